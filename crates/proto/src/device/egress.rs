//! The transmit round-robin, the timers, released buffers and events.

use super::*;

impl Device {
    /// The next datagram to send, written into `buf` (at least
    /// [`MIN_TX_BUF`](crate::device::MIN_TX_BUF) bytes).
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        self.poll_transmit_with(now, buf, false, false)
    }

    /// Like [`Self::poll_transmit`], but a payload that sits in registered
    /// memory which lends its address ([`RegionMemory::address`]) is left
    /// there: the returned [`Transmit::gather`] says how to assemble the
    /// datagram, and the ICRC already covers it. The memory must not change
    /// before the datagram is sent (as with a NIC's DMA). The driver owes
    /// [`Device::handle_released`] for every gather it takes.
    #[must_use]
    pub fn poll_transmit_gather(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        self.poll_transmit_with(now, buf, true, false)
    }

    /// [`Self::poll_transmit_gather`] that leaves the ICRC of zero-copy
    /// packets to the driver (`Gather::icrc_left`): a driver whose link
    /// may not carry it (the same-host path's rings) computes it with
    /// [`Gather::fill_icrc`](crate::Gather::fill_icrc) only for the
    /// packets that leave through UDP or into a capture — the ICRC's CRC
    /// over 4 KiB of payload is a large part of a sender's cost per
    /// packet.
    pub fn poll_transmit_gather_icrc_left(
        &mut self,
        now: Instant,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        self.poll_transmit_with(now, buf, true, true)
    }

    pub(super) fn poll_transmit_with(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        gather: bool,
        icrc_left: bool,
    ) -> Option<Transmit> {
        let rounds = self.tx_ready.len();
        for _ in 0..rounds {
            let idx = self.tx_ready.pop_front()?;
            let Some(qp) = self.qps.get_mut(idx) else {
                continue;
            };
            qp.tx_queued = false;
            let before = Self::notes_before(&self.notes, qp);
            let mut ctx = ctx!(self, now);
            ctx.gather = gather;
            ctx.icrc_left = icrc_left;
            // Requests and responses of a QP take turns; with one of each
            // waiting after a response, the request goes first: in a
            // ping-pong the peer's answer then travels ahead of the ACK
            // of its previous message, which nobody is waiting for.
            let tx = if qp.last_tx_request {
                qp.poll_response(&mut ctx, buf)
                    .map(|t| (t, false))
                    .or_else(|| qp.poll_request(&mut ctx, buf).map(|t| (t, true)))
            } else {
                qp.poll_request(&mut ctx, buf)
                    .map(|t| (t, true))
                    .or_else(|| qp.poll_response(&mut ctx, buf).map(|t| (t, false)))
            };
            let tx = tx.map(|(t, request)| {
                qp.last_tx_request = request;
                if let Some(g) = &t.gather {
                    debug_assert_eq!(g.seq, self.gather_seq + 1);
                    self.gather_seq = g.seq;
                }
                t
            });
            if let Some((c, st)) = before {
                let after = (&qp.counters, qp.state);
                self.notes.derive(qp.qpn, (&c, st), after, None, None);
            }
            if tx.is_none() && !qp.req.budget_blocked && std::mem::take(&mut qp.budget_woken) {
                // Nothing more to send: the grant goes back.
                self.budget.granted -= 1;
            }
            Self::sync_timer(&mut self.timers, &mut self.budget, qp, idx);
            if let Some(tx) = tx {
                qp.tx_queued = true;
                self.tx_ready.push_back(idx);
                return Some(tx);
            }
            if !self.budget.wait.is_empty() {
                self.release_budget();
            }
        }
        None
    }

    /// The earliest timer deadline.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let t = self.timers.first().map(|&(t, _)| t);
        debug_assert_eq!(
            t,
            self.qps.iter().filter_map(|(_, q)| q.deadline()).min(),
            "timer set out of step with the QPs"
        );
        t
    }

    /// Runs every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        // The QPs due, in slot order (the order in which they wake).
        let mut due: Vec<u32> = self
            .timers
            .range(..=(now, u32::MAX))
            .map(|&(_, i)| i)
            .collect();
        due.sort_unstable();
        due.dedup();
        for idx in due {
            let Some(qp) = self.qps.get_mut(idx) else {
                continue;
            };
            let before = Self::notes_before(&self.notes, qp);
            let mut ctx = ctx!(self, now);
            qp.on_timer(&mut ctx);
            if let Some((c, st)) = before {
                let after = (&qp.counters, qp.state);
                self.notes.derive(qp.qpn, (&c, st), after, None, None);
            }
            Self::wake(&mut self.tx_ready, qp, idx);
            Self::sync_timer(&mut self.timers, &mut self.budget, qp, idx);
        }
        self.release_budget();
    }

    /// The driver no longer reads the pieces of the zero-copy datagrams
    /// with sequence numbers up to `seq` (it sent, copied or dropped them).
    /// Send completions that waited for them become visible; a completion
    /// event fires for armed CQs.
    ///
    /// A driver that uses [`Device::poll_transmit_gather`] must call this,
    /// or the completions of requests sent from registered memory never
    /// appear: the program may reuse a send buffer once its request has
    /// completed, so the completion waits until nothing reads the buffer.
    pub fn handle_released(&mut self, seq: u64) {
        if seq <= self.released {
            return;
        }
        self.released = seq.min(self.gather_seq);
        if self.gated == 0 {
            return;
        }
        let released = self.released;
        let mut still = 0;
        for (id, cq) in self.cqs.iter_mut() {
            if cq.release(released) {
                self.events.push_back(Event::Completion(CqId(id)));
            }
            still += cq.gated_len();
        }
        self.gated = still;
    }

    /// The smallest gather sequence number a completion waits for: the
    /// driver need not call [`Device::handle_released`] before it has
    /// released that one.
    pub fn release_wanted(&self) -> Option<u64> {
        if self.gated == 0 {
            return None;
        }
        self.cqs.iter().filter_map(|(_, cq)| cq.gated_min()).min()
    }

    /// The next event.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// True when some QP may have a packet to send.
    pub fn wants_transmit(&self) -> bool {
        !self.tx_ready.is_empty()
    }
}
