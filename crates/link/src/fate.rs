//! The dice and what one datagram suffers on a faulty link.

use softrdma_config::faults::Rates;

/// SplitMix64: small, fast, and the same sequence for the same seed
/// everywhere (the simulator replays a run from its seed with it). The
/// transport core's generator, one implementation for both.
pub use softrdma_proto::Rng;

/// What the link does to one datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Fate {
    /// Lost: nothing else applies.
    pub lost: bool,
    /// The bit flipped (bit `b % 8` of byte `b / 8`), if corrupted.
    pub corrupt_bit: Option<u64>,
    /// Delay before delivery, ns (delay, jitter, and the reorder hold).
    pub delay_ns: u64,
    /// Held back by the reorder delay (randomly, or its PSN is a multiple
    /// of `reorder_every`).
    pub reordered: bool,
    /// Delivered a second time, this long after the first copy, ns.
    pub duplicate_after_ns: Option<u64>,
}

/// The BTH PSN of a UDP payload (bytes 9..12), if it is long enough.
fn psn_of(data: &[u8]) -> Option<u32> {
    (data.len() >= 12).then(|| u32::from_be_bytes([0, data[9], data[10], data[11]]))
}

/// Throws the dice for a datagram of UDP payload `data` on a link with
/// rates `r`. Draws in a fixed order — loss; corruption and its bit;
/// jitter; reordering (no draw when the PSN decides it); duplication and
/// the copy's lag — so a seed replays a run. The PSN that decides
/// `reorder_every` is the one on the wire, corrupted or not.
pub fn fate(r: &Rates, rng: &mut Rng, data: &[u8]) -> Fate {
    let mut f = Fate::default();
    if rng.chance(r.loss) {
        f.lost = true;
        return f;
    }
    if !data.is_empty() && rng.chance(r.corrupt) {
        f.corrupt_bit = Some(rng.below(data.len() as u64 * 8));
    }
    f.delay_ns = r.delay_ns;
    if r.jitter_ns > 0 {
        f.delay_ns += rng.below(r.jitter_ns + 1);
    }
    let slow = r.reorder_every != 0
        && psn_of(data).is_some_and(|mut psn| {
            if let Some(b) = f.corrupt_bit {
                let (byte, bit) = ((b / 8) as usize, b % 8);
                if (9..12).contains(&byte) {
                    psn ^= 1 << ((11 - byte) * 8 + bit as usize);
                }
            }
            psn.is_multiple_of(r.reorder_every)
        });
    if slow || rng.chance(r.reorder) {
        f.delay_ns += r.reorder_delay_ns;
        f.reordered = true;
    }
    if rng.chance(r.duplicate) {
        f.duplicate_after_ns = Some(1 + rng.below(r.reorder_delay_ns.max(1)));
    }
    f
}

/// Flips bit `bit` of `data` (as [`Fate::corrupt_bit`] numbers them).
pub(crate) fn flip(data: &mut [u8], bit: u64) {
    if let Some(b) = data.get_mut((bit / 8) as usize) {
        *b ^= 1 << (bit % 8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reorder_every_reads_the_psn_on_the_wire() {
        let r = Rates {
            reorder_every: 4,
            reorder_delay_ns: 10,
            ..Default::default()
        };
        let mut pkt = [0u8; 16];
        pkt[11] = 8;
        let f = fate(&r, &mut Rng::new(1), &pkt);
        assert!(f.reordered && f.delay_ns == 10);
        pkt[11] = 9;
        assert!(!fate(&r, &mut Rng::new(1), &pkt).reordered);
        // Too short to have a PSN: never held by it.
        assert!(!fate(&r, &mut Rng::new(1), &pkt[..8]).reordered);
        // A flipped bit in the PSN is what the PSN is.
        let r = Rates { corrupt: 1.0, ..r };
        for seed in 0..200 {
            pkt[11] = 8;
            let f = fate(&r, &mut Rng::new(seed), &pkt);
            let b = f.corrupt_bit.unwrap();
            flip(&mut pkt, b);
            let psn = u32::from_be_bytes([0, pkt[9], pkt[10], pkt[11]]);
            assert_eq!(f.reordered, psn.is_multiple_of(4), "seed {seed} bit {b}");
        }
    }
}
