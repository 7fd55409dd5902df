//! Unguessable numbers from a key: local communication IDs and starting
//! PSNs.
//!
//! A local comm ID is all a peer needs (with the QPN) to forge a DREQ or a
//! REJ against a connection, so the IDs must not be predictable from the
//! ones already seen on the wire. Each number is SipHash-2-4 (Aumasson and
//! Bernstein, a keyed pseudo-random function) of a counter under a 128-bit
//! key the driver supplies: from the OS in the engine, from the test seed
//! in the simulator (the same seed gives the same IDs). Outputs reveal
//! nothing about the key or the next output, unlike a plain PRNG whose
//! state can be read back from its outputs.

/// A keyed generator.
#[derive(Clone, Debug)]
pub struct IdGen {
    k0: u64,
    k1: u64,
    counter: u64,
}

impl IdGen {
    /// A generator under `key`.
    pub const fn new(key: [u64; 2]) -> IdGen {
        IdGen {
            k0: key[0],
            k1: key[1],
            counter: 0,
        }
    }

    /// The next 64 pseudo-random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.counter = self.counter.wrapping_add(1);
        siphash24(self.k0, self.k1, self.counter)
    }

    /// The next 32 pseudo-random bits.
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
}

/// SipHash-2-4 of one 8-byte message (`m` as its little-endian bytes).
pub fn siphash24(k0: u64, k1: u64, m: u64) -> u64 {
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }
    // The message block, then the final block holding the length (8).
    for b in [m, 8u64 << 56] {
        v[3] ^= b;
        round(&mut v);
        round(&mut v);
        v[0] ^= b;
    }
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_vector() {
        // The SipHash paper's test vectors: key 00 01 .. 0f, message
        // 00 01 .. 07 gives the bytes 62 24 93 9a 79 f5 f5 93.
        let k0 = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        let k1 = u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]);
        let m = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(
            siphash24(k0, k1, m).to_le_bytes(),
            [0x62, 0x24, 0x93, 0x9a, 0x79, 0xf5, 0xf5, 0x93]
        );
    }

    #[test]
    fn keys_give_different_streams() {
        let mut a = IdGen::new([1, 2]);
        let mut b = IdGen::new([1, 3]);
        let xs: Vec<u32> = (0..8).map(|_| a.next_u32()).collect();
        let ys: Vec<u32> = (0..8).map(|_| b.next_u32()).collect();
        assert_ne!(xs, ys);
        let mut a2 = IdGen::new([1, 2]);
        assert_eq!(xs, (0..8).map(|_| a2.next_u32()).collect::<Vec<_>>());
    }
}
