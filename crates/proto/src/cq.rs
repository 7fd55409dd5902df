//! Completion queues.
//!
//! A CQ holds at most `depth` completions. Pushing into a full CQ is an
//! overrun (IBA 11.4.2.1, C11-27): the CQ enters the error state, an
//! `AsyncEvent::CqErr` is raised and the QPs completing into it are moved to
//! the error state by the device. Completions are never dropped silently.
//!
//! A send completion may have to wait for the driver: when its request left
//! payload in the program's memory for zero-copy transmission, the program
//! gets the buffer back only once the driver no longer reads it
//! ([`Device::handle_released`](crate::Device::handle_released)). Such a
//! completion is *gated* by the gather sequence number it waits for; it
//! counts against the depth but is invisible to polls (and fires no
//! notification) until it is released. Gated completions are released in
//! the order they were pushed, so a QP's completions keep their order.

use crate::verbs::Wc;
use crate::Instant;
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

/// A completion queue. Each completion carries the device time at which
/// it was generated (its completion timestamp, `ibv_wc_read_completion_ts`).
#[derive(Debug)]
pub struct Cq {
    entries: VecDeque<(Wc, Instant)>,
    /// Completions waiting for the driver to release gather sequence
    /// numbers up to the first element.
    gated: VecDeque<(u64, Wc, Instant)>,
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
            gated: VecDeque::new(),
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

    /// Completions waiting (visible or gated).
    pub fn len(&self) -> usize {
        self.entries.len() + self.gated.len()
    }

    /// No completion waiting.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.gated.is_empty()
    }

    /// Completions gated, waiting for a release.
    pub fn gated_len(&self) -> usize {
        self.gated.len()
    }

    /// The smallest gather sequence number a gated completion waits for.
    pub fn gated_min(&self) -> Option<u64> {
        self.gated.iter().map(|g| g.0).min()
    }

    /// True after an overrun.
    pub fn overrun(&self) -> bool {
        self.overrun
    }

    /// Adds a completion generated at `now`.
    pub fn push(&mut self, wc: Wc, now: Instant) -> Pushed {
        self.push_gated(wc, 0, 0, now)
    }

    /// Adds a completion generated at `now` that becomes visible once
    /// gather sequence number `after` is released (`released` is the
    /// driver's current mark).
    pub fn push_gated(&mut self, wc: Wc, after: u64, released: u64, now: Instant) -> Pushed {
        if self.len() >= self.depth {
            self.overrun = true;
            return Pushed::Overrun;
        }
        if after > released {
            self.gated.push_back((after, wc, now));
            return Pushed::Ok;
        }
        self.make_visible(wc, now)
    }

    fn make_visible(&mut self, wc: Wc, at: Instant) -> Pushed {
        let fire = match self.notify {
            Notify::Off => false,
            Notify::Next => true,
            Notify::Solicited => wc.solicited || wc.status != crate::verbs::WcStatus::Success,
        };
        self.entries.push_back((wc, at));
        if fire {
            self.notify = Notify::Off;
            self.event_pending = true;
            Pushed::Notified
        } else {
            Pushed::Ok
        }
    }

    /// The driver released gather sequence numbers up to `released`:
    /// gated completions waiting for no more than that become visible, in
    /// the order they were pushed. Returns whether a notification fired.
    pub fn release(&mut self, released: u64) -> bool {
        let mut fired = false;
        let mut i = 0;
        while i < self.gated.len() {
            if self.gated[i].0 <= released {
                let (_, wc, at) = self.gated.remove(i).expect("index in range");
                fired |= self.make_visible(wc, at) == Pushed::Notified;
            } else {
                i += 1;
            }
        }
        fired
    }

    /// Moves up to `out.len()` completions into `out`; returns how many.
    pub fn poll(&mut self, out: &mut [Wc]) -> usize {
        let n = out.len().min(self.entries.len());
        for (slot, (wc, _)) in out.iter_mut().zip(self.entries.drain(..n)) {
            *slot = wc;
        }
        n
    }

    /// [`Cq::poll`] with each completion's timestamp in `at` (as long as
    /// `out`, or the shorter of the two is used).
    pub fn poll_stamped(&mut self, out: &mut [Wc], at: &mut [Instant]) -> usize {
        let n = out.len().min(at.len()).min(self.entries.len());
        for ((slot, t), (wc, ts)) in out
            .iter_mut()
            .zip(at.iter_mut())
            .zip(self.entries.drain(..n))
        {
            *slot = wc;
            *t = ts;
        }
        n
    }

    /// Removes the completions of QP `qpn`, visible and gated (a QP that
    /// goes back to RESET: mlx5 cleans its CQs the same way). Returns how
    /// many gated ones went.
    pub fn remove_qp(&mut self, qpn: softrdma_wire::Qpn) -> usize {
        self.entries.retain(|(w, _)| w.qp_num != qpn);
        let before = self.gated.len();
        self.gated.retain(|(_, w, _)| w.qp_num != qpn);
        before - self.gated.len()
    }

    /// Takes one completion.
    pub fn pop(&mut self) -> Option<Wc> {
        self.entries.pop_front().map(|(wc, _)| wc)
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
        if depth < self.len() {
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
        assert_eq!(cq.push(wc(1, false), Instant(1)), Pushed::Ok);
        assert_eq!(cq.push(wc(2, true), Instant(2)), Pushed::Notified);
        assert_eq!(cq.push(wc(3, false), Instant(3)), Pushed::Overrun);
        assert!(cq.overrun());
        let mut out = [wc(0, false); 4];
        let mut at = [Instant(0); 4];
        assert_eq!(cq.poll_stamped(&mut out, &mut at), 2);
        assert_eq!((out[0].wr_id, out[1].wr_id), (1, 2));
        assert_eq!(&at[..2], &[Instant(1), Instant(2)]);
        cq.arm(false);
        assert_eq!(cq.push(wc(4, false), Instant(4)), Pushed::Notified);
        assert_eq!(cq.push(wc(5, false), Instant(5)), Pushed::Ok);
    }

    #[test]
    fn gated_completions_wait_for_their_release_in_order() {
        let mut cq = Cq::new(4);
        cq.arm(false);
        // Waits for gather 5 while the driver has released up to 3.
        assert_eq!(cq.push_gated(wc(1, false), 5, 3, Instant(10)), Pushed::Ok);
        assert_eq!(cq.push_gated(wc(2, false), 7, 3, Instant(11)), Pushed::Ok);
        // Another QP's completion needs nothing: visible at once.
        assert_eq!(
            cq.push_gated(wc(3, false), 0, 3, Instant(12)),
            Pushed::Notified
        );
        let mut out = [wc(0, false); 4];
        assert_eq!(cq.poll(&mut out), 1);
        assert_eq!(out[0].wr_id, 3);
        assert_eq!(cq.len(), 2, "gated completions count against the depth");
        assert_eq!(cq.gated_min(), Some(5));
        cq.arm(false);
        assert!(!cq.release(4));
        assert_eq!(cq.poll(&mut out), 0);
        assert!(cq.release(6), "the armed CQ fires when one becomes visible");
        assert_eq!(cq.poll(&mut out), 1);
        assert_eq!(out[0].wr_id, 1);
        cq.release(7);
        // A gated completion keeps the time it was generated at, not the
        // time it became visible.
        let mut at = [Instant(0); 4];
        assert_eq!(cq.poll_stamped(&mut out, &mut at), 1);
        assert_eq!((out[0].wr_id, at[0]), (2, Instant(11)));
        assert!(cq.is_empty());
        // Overrun counts gated entries.
        let mut cq = Cq::new(1);
        assert_eq!(cq.push_gated(wc(1, false), 9, 0, Instant(0)), Pushed::Ok);
        assert_eq!(cq.push(wc(2, false), Instant(1)), Pushed::Overrun);
    }
}
