//! What the injectors of a device did.

/// Faults injected by a device, each counted once, where it happened
/// (`tx_*`: on datagrams it sent; `rx_*`: on datagrams it received).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounters {
    /// Sent datagrams lost.
    pub tx_lost: u64,
    /// Sent datagrams sent twice.
    pub tx_duplicated: u64,
    /// Sent datagrams held back by the reorder delay.
    pub tx_reordered: u64,
    /// Sent datagrams held by `delay`/`jitter`.
    pub tx_delayed: u64,
    /// Sent datagrams with a bit flipped.
    pub tx_corrupted: u64,
    /// Received datagrams lost.
    pub rx_lost: u64,
    /// Received datagrams delivered twice.
    pub rx_duplicated: u64,
    /// Received datagrams held back by the reorder delay.
    pub rx_reordered: u64,
    /// Received datagrams held by `delay`/`jitter`.
    pub rx_delayed: u64,
    /// Received datagrams with a bit flipped.
    pub rx_corrupted: u64,
    /// RC ACKs lost by `drop-acks` (sent or received).
    pub acks_dropped: u64,
    /// Requests answered with a NAK remote access error (`rem-access`).
    pub answered_rem_access: u64,
    /// Requests answered with a NAK invalid request (`rem-inv-req`).
    pub answered_inv_req: u64,
    /// Requests answered with a NAK remote operational error (`rem-op`).
    pub answered_rem_op: u64,
    /// Requests answered with an RNR NAK (`rnr`).
    pub answered_rnr: u64,
    /// Request packets lost after an answered one until the requester
    /// sent the answered PSN again (the rest of the message and what it
    /// had pipelined, as a responder that NAKed drops them).
    pub swallowed: u64,
    /// Datagrams lost because the injector already held
    /// [`MAX_HELD_BYTES`](crate::MAX_HELD_BYTES) (a delay longer than the
    /// traffic can fill).
    pub held_overflow: u64,
}

impl FaultCounters {
    /// Every counter as (name, value), names prefixed `fault_`.
    pub fn all(&self) -> [(&'static str, u64); 17] {
        [
            ("fault_tx_lost", self.tx_lost),
            ("fault_tx_duplicated", self.tx_duplicated),
            ("fault_tx_reordered", self.tx_reordered),
            ("fault_tx_delayed", self.tx_delayed),
            ("fault_tx_corrupted", self.tx_corrupted),
            ("fault_rx_lost", self.rx_lost),
            ("fault_rx_duplicated", self.rx_duplicated),
            ("fault_rx_reordered", self.rx_reordered),
            ("fault_rx_delayed", self.rx_delayed),
            ("fault_rx_corrupted", self.rx_corrupted),
            ("fault_acks_dropped", self.acks_dropped),
            ("fault_answered_rem_access", self.answered_rem_access),
            ("fault_answered_inv_req", self.answered_inv_req),
            ("fault_answered_rem_op", self.answered_rem_op),
            ("fault_answered_rnr", self.answered_rnr),
            ("fault_swallowed", self.swallowed),
            ("fault_held_overflow", self.held_overflow),
        ]
    }

    /// The counters that are not zero.
    pub fn nonzero(&self) -> Vec<(&'static str, u64)> {
        self.all().into_iter().filter(|(_, v)| *v > 0).collect()
    }

    /// The sum of every counter.
    pub fn total(&self) -> u64 {
        self.all().iter().map(|(_, v)| v).sum()
    }

    /// Adds `o`'s counts to these (a device's two directions).
    pub fn merge(&mut self, o: &FaultCounters) {
        let theirs = o.all();
        let mine = [
            &mut self.tx_lost,
            &mut self.tx_duplicated,
            &mut self.tx_reordered,
            &mut self.tx_delayed,
            &mut self.tx_corrupted,
            &mut self.rx_lost,
            &mut self.rx_duplicated,
            &mut self.rx_reordered,
            &mut self.rx_delayed,
            &mut self.rx_corrupted,
            &mut self.acks_dropped,
            &mut self.answered_rem_access,
            &mut self.answered_inv_req,
            &mut self.answered_rem_op,
            &mut self.answered_rnr,
            &mut self.swallowed,
            &mut self.held_overflow,
        ];
        for (f, (_, v)) in mine.into_iter().zip(theirs) {
            *f += v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_adds_every_field() {
        let mut a = FaultCounters {
            tx_lost: 1,
            held_overflow: 2,
            ..Default::default()
        };
        let b = FaultCounters {
            tx_lost: 3,
            swallowed: 4,
            answered_rnr: 5,
            ..Default::default()
        };
        a.merge(&b);
        assert_eq!(
            a.nonzero(),
            [
                ("fault_tx_lost", 4),
                ("fault_answered_rnr", 5),
                ("fault_swallowed", 4),
                ("fault_held_overflow", 2)
            ]
        );
        assert_eq!(a.total(), 15);
    }
}
