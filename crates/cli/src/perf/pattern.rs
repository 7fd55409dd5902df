//! The data every test sends and the checks of what arrived.
//!
//! A buffer of one QP is filled with a pseudo-random pattern that depends on
//! a seed (side and QP) and on the byte's offset in the buffer, and never
//! contains a zero byte. So a message that lands at the wrong offset, a
//! short or stale message, a flipped byte or data from another QP is
//! visible, and a zero byte means "nothing landed here" (receive buffers
//! are cleared before each size).

use softrdma::MemoryRegion;

/// Bytes generated per chunk when filling or checking a region.
const CHUNK: usize = 64 * 1024;

/// The seed of a side's buffer of QP `qp`.
pub fn seed(server: bool, qp: usize) -> u64 {
    let side: u64 = if server { 0x5e } else { 0xc1 };
    (side << 56) ^ (qp as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The pattern bytes of offsets `off..off + out.len()`.
pub fn fill(seed: u64, off: u64, out: &mut [u8]) {
    let mut i = 0;
    while i < out.len() {
        let o = off + i as u64;
        let word = mix(seed ^ (o / 8).wrapping_mul(0xd6e8_feb8_6659_fd93));
        let bytes = word.to_le_bytes();
        let start = (o % 8) as usize;
        for &b in &bytes[start..] {
            if i == out.len() {
                break;
            }
            out[i] = if b == 0 { 0xa5 } else { b };
            i += 1;
        }
    }
}

/// Writes the pattern into `mr[off..off + len]`.
pub fn write_pattern(mr: &MemoryRegion, seed: u64, off: usize, len: usize) {
    let mut buf = vec![0u8; CHUNK.min(len)];
    let mut done = 0;
    while done < len {
        let n = CHUNK.min(len - done);
        fill(seed, (off + done) as u64, &mut buf[..n]);
        mr.write(off + done, &buf[..n]);
        done += n;
    }
}

/// Zeroes `mr[off..off + len]`.
pub fn clear(mr: &MemoryRegion, off: usize, len: usize) {
    let zero = vec![0u8; CHUNK.min(len)];
    let mut done = 0;
    while done < len {
        let n = CHUNK.min(len - done);
        mr.write(off + done, &zero[..n]);
        done += n;
    }
}

/// How strictly to compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strict {
    /// Every byte must be the pattern's.
    Exact,
    /// Every byte must be the pattern's or zero (never written): for
    /// unreliable transports, where a message may be lost.
    Landed,
}

/// The first difference found by [`check`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// Offset in the checked range.
    pub at: u64,
    /// The byte found.
    pub got: u8,
    /// The byte expected.
    pub want: u8,
    /// Bytes that differ in the range.
    pub count: u64,
}

/// Compares `mr[off..off + len]` with the pattern of `seed` at offsets
/// `pat_off..pat_off + len`. Returns the number of bytes that were zero
/// (never written; only possible with [`Strict::Landed`]) or the first
/// difference.
pub fn check(
    mr: &MemoryRegion,
    off: usize,
    len: usize,
    seed: u64,
    pat_off: u64,
    strict: Strict,
) -> Result<u64, Mismatch> {
    let mut want = vec![0u8; CHUNK.min(len)];
    let mut got = vec![0u8; CHUNK.min(len)];
    let mut first: Option<Mismatch> = None;
    let mut zeros = 0;
    let mut done = 0;
    while done < len {
        let n = CHUNK.min(len - done);
        fill(seed, pat_off + done as u64, &mut want[..n]);
        mr.read(off + done, &mut got[..n]);
        if want[..n] != got[..n] {
            for i in 0..n {
                let (g, w) = (got[i], want[i]);
                if g == w {
                    continue;
                }
                if g == 0 && strict == Strict::Landed {
                    zeros += 1;
                    continue;
                }
                match &mut first {
                    Some(m) => m.count += 1,
                    None => {
                        first = Some(Mismatch {
                            at: (done + i) as u64,
                            got: g,
                            want: w,
                            count: 1,
                        })
                    }
                }
            }
        }
        done += n;
    }
    match first {
        Some(m) => Err(m),
        None => Ok(zeros),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_has_no_zero_and_depends_on_offset_and_seed() {
        let mut a = vec![0u8; 4099];
        fill(seed(false, 0), 0, &mut a);
        assert!(a.iter().all(|&b| b != 0));
        // Any sub-range generated alone equals the same range of the whole.
        for start in [0usize, 1, 7, 8, 13, 4000] {
            let mut b = vec![0u8; a.len() - start];
            fill(seed(false, 0), start as u64, &mut b);
            assert_eq!(b, a[start..]);
        }
        let mut c = vec![0u8; 4099];
        fill(seed(false, 1), 0, &mut c);
        assert_ne!(a, c);
        let mut d = vec![0u8; 4099];
        fill(seed(true, 0), 0, &mut d);
        assert_ne!(a, d);
        // Shifting by one byte gives a different sequence.
        assert_ne!(a[1..100], a[0..99]);
    }
}
