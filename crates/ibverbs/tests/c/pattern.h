/*
 * The byte pattern the lifetime programs (reuse.c, dereg.c) write and
 * check: xorshift64 from a seed, so that every seed's bytes differ from
 * every other's everywhere.
 */
#ifndef PATTERN_H
#define PATTERN_H

#include <stddef.h>
#include <stdint.h>

/* The first `n` bytes of seed `seed`'s pattern into `out`. */
static inline void pattern_fill(uint64_t seed, uint8_t *out, size_t n)
{
	uint64_t x = (seed * 0x9e3779b97f4a7c15ULL) | 1;
	for (size_t k = 0; k < n; k++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		out[k] = (uint8_t)x;
	}
}

#endif
