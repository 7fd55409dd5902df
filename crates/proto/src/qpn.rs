//! QP numbers a peer cannot predict.
//!
//! Public so that the device process of a shared device (softrdma's
//! `host`) draws every member's QP numbers from one allocator.
//!
//! A QPN is half of what an off-path attacker must know to inject into a
//! connection (the other half is the PSN). NICs and rxe hand them out in
//! sequence (ReDMArk, USENIX Security 2021, weakness V5: one observed QPN
//! gives the next ones); here every QPN is drawn from the 24-bit space
//! with the device's ChaCha20 generator ([`KeyRng`]), so one number tells
//! nothing about the next.
//!
//! Excluded from the draw: the special QPs 0 (SMI) and 1 (GSI), 0xFFFFFF
//! (the multicast QPN), the live QPs, and the
//! [`QPN_QUARANTINE`] most recently destroyed ones, so that packets of an
//! old connection still on their way never reach a new QP that took its
//! number.
//!
//! Cost: a draw is a rejection sample. Live and quarantined numbers are at
//! most 2 × 2^16 of 2^24, so a draw is rejected with probability below
//! 1 %; memory is the quarantine's ring and set, which grow only with
//! destroys, up to [`QPN_QUARANTINE`] entries.

use crate::limits::{QPN_DRAW_TRIES, QPN_QUARANTINE};
use crate::{KeyRng, U32Map};
use softrdma_wire::Qpn;
use std::collections::VecDeque;

/// Largest QPN (24 bits).
const QPN_MASK: u32 = 0xff_ffff;
/// The multicast QPN: never a QP of its own.
pub const MULTICAST_QPN: u32 = 0xff_ffff;

/// Whether `qpn` is one no QP may be given: 0, 1 or the multicast QPN.
pub const fn is_reserved(qpn: u32) -> bool {
    qpn <= 1 || qpn >= MULTICAST_QPN
}

/// Draws QP numbers and remembers recently destroyed ones.
#[derive(Debug, Default)]
pub struct QpnAlloc {
    /// Destroyed QPNs, oldest first.
    recent: VecDeque<u32>,
    /// The same numbers, for lookup.
    recent_set: U32Map<()>,
}

impl QpnAlloc {
    /// A fresh QPN: random, not reserved, not live (`live(n)` says whether
    /// `n` is), not destroyed recently. `None` only if [`QPN_DRAW_TRIES`]
    /// draws in a row all hit taken numbers, which cannot happen with the
    /// device's limits (odds below 2^-600).
    pub fn alloc(&mut self, rng: &mut KeyRng, live: impl Fn(u32) -> bool) -> Option<Qpn> {
        for _ in 0..QPN_DRAW_TRIES {
            let n = rng.next_u32() & QPN_MASK;
            if is_reserved(n) || live(n) || self.recent_set.contains_key(&n) {
                continue;
            }
            return Some(Qpn::new(n));
        }
        None
    }

    /// `qpn` was destroyed: it is not drawn again before
    /// [`QPN_QUARANTINE`] more QPs are destroyed.
    pub fn released(&mut self, qpn: u32) {
        if self.recent_set.insert(qpn, ()).is_some() {
            return;
        }
        self.recent.push_back(qpn);
        if self.recent.len() > QPN_QUARANTINE {
            if let Some(old) = self.recent.pop_front() {
                self.recent_set.remove(&old);
            }
        }
    }

    /// Whether `qpn` was destroyed recently.
    #[cfg(test)]
    pub fn is_quarantined(&self, qpn: u32) -> bool {
        self.recent_set.contains_key(&qpn)
    }

    /// Numbers in quarantine.
    #[cfg(test)]
    pub fn quarantined(&self) -> usize {
        self.recent.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn draws_avoid_reserved_live_and_recent() {
        let mut rng = KeyRng::from_seed(1);
        let mut a = QpnAlloc::default();
        let mut live = HashSet::new();
        for _ in 0..10_000 {
            let q = a.alloc(&mut rng, |n| live.contains(&n)).unwrap().value();
            assert!(!is_reserved(q), "{q:#x}");
            assert!(live.insert(q), "{q:#x} drawn twice");
        }
        // Destroy them all; none comes back while quarantined.
        for q in live.drain() {
            a.released(q);
        }
        assert_eq!(a.quarantined(), 10_000);
        for _ in 0..10_000 {
            let q = a.alloc(&mut rng, |_| false).unwrap().value();
            assert!(!a.is_quarantined(q), "{q:#x} reused while quarantined");
        }
    }

    #[test]
    fn quarantine_is_bounded_and_fifo() {
        let mut a = QpnAlloc::default();
        for q in 2..(2 + QPN_QUARANTINE as u32 + 10) {
            a.released(q);
        }
        assert_eq!(a.quarantined(), QPN_QUARANTINE);
        // The 10 oldest left first.
        for q in 2..12 {
            assert!(!a.is_quarantined(q));
        }
        assert!(a.is_quarantined(12));
        // Releasing a number twice keeps one entry.
        a.released(12);
        assert_eq!(a.quarantined(), QPN_QUARANTINE);
    }

    #[test]
    fn gives_up_rather_than_loop_forever() {
        let mut rng = KeyRng::from_seed(2);
        let mut a = QpnAlloc::default();
        assert!(a.alloc(&mut rng, |_| true).is_none());
    }
}
