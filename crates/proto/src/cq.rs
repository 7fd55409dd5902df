//! Completion queues.
//!
//! A CQ holds at most `depth` completions. Pushing into a full CQ is an
//! overrun (IBA 11.4.2.1, C11-27): the CQ enters the error state, an
//! `AsyncEvent::CqErr` is raised and the QPs completing into it are moved to
//! the error state by the device. Completions are never dropped silently.

use crate::verbs::Wc;
use std::collections::VecDeque;

/// Armed notification (`ibv_req_notify_cq`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notify {
    /// Not armed.
    Off,
    /// The next completion of any kind.
    Next,
    /// The next solicited or error completion.
    Solicited,
}

/// A completion queue.
#[derive(Debug)]
pub struct Cq {
    entries: VecDeque<Wc>,
    depth: usize,
    overrun: bool,
    notify: Notify,
    /// Set when a notification fired and the engine has not picked it up.
    pub(crate) event_pending: bool,
    /// QPs using this CQ (to reject destroy while in use).
    pub(crate) users: u32,
}

/// Result of pushing a completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushed {
    /// Stored.
    Ok,
    /// Stored, and an armed notification fired.
    Notified,
    /// The CQ was full: overrun.
    Overrun,
}

impl Cq {
    /// A CQ of `depth` entries.
    pub fn new(depth: usize) -> Self {
        Cq {
            entries: VecDeque::with_capacity(depth.min(4096)),
            depth,
            overrun: false,
            notify: Notify::Off,
            event_pending: false,
            users: 0,
        }
    }

    /// Capacity.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No completion waiting.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// True after an overrun.
    pub fn overrun(&self) -> bool {
        self.overrun
    }

    /// Adds a completion.
    pub fn push(&mut self, wc: Wc) -> Pushed {
        if self.entries.len() >= self.depth {
            self.overrun = true;
            return Pushed::Overrun;
        }
        let fire = match self.notify {
            Notify::Off => false,
            Notify::Next => true,
            Notify::Solicited => wc.solicited || wc.status != crate::verbs::WcStatus::Success,
        };
        self.entries.push_back(wc);
        if fire {
            self.notify = Notify::Off;
            self.event_pending = true;
            Pushed::Notified
        } else {
            Pushed::Ok
        }
    }

    /// Moves up to `out.len()` completions into `out`; returns how many.
    pub fn poll(&mut self, out: &mut [Wc]) -> usize {
        let n = out.len().min(self.entries.len());
        for (slot, wc) in out.iter_mut().zip(self.entries.drain(..n)) {
            *slot = wc;
        }
        n
    }

    /// Takes one completion.
    pub fn pop(&mut self) -> Option<Wc> {
        self.entries.pop_front()
    }

    /// Arms the notification.
    pub fn arm(&mut self, solicited_only: bool) {
        // Arming for "next" overrides "solicited", never the other way round.
        self.notify = match (self.notify, solicited_only) {
            (Notify::Next, _) => Notify::Next,
            (_, true) => Notify::Solicited,
            (_, false) => Notify::Next,
        };
    }

    /// Changes the depth (`ibv_resize_cq`); fails if more entries are queued.
    pub fn resize(&mut self, depth: usize) -> bool {
        if depth < self.entries.len() {
            return false;
        }
        self.depth = depth;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::{WcFlags, WcOpcode, WcStatus};
    use softrdma_wire::Qpn;

    fn wc(id: u64, solicited: bool) -> Wc {
        Wc {
            wr_id: id,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 0,
            imm_or_inv: 0,
            qp_num: Qpn::new(1),
            src_qp: Qpn::new(0),
            wc_flags: WcFlags::default(),
            pkey_index: 0,
            solicited,
        }
    }

    #[test]
    fn overrun_and_notify() {
        let mut cq = Cq::new(2);
        cq.arm(true);
        assert_eq!(cq.push(wc(1, false)), Pushed::Ok);
        assert_eq!(cq.push(wc(2, true)), Pushed::Notified);
        assert_eq!(cq.push(wc(3, false)), Pushed::Overrun);
        assert!(cq.overrun());
        let mut out = [wc(0, false); 4];
        assert_eq!(cq.poll(&mut out), 2);
        assert_eq!((out[0].wr_id, out[1].wr_id), (1, 2));
        cq.arm(false);
        assert_eq!(cq.push(wc(4, false)), Pushed::Notified);
        assert_eq!(cq.push(wc(5, false)), Pushed::Ok);
    }
}
