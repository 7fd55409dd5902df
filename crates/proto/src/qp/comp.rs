//! The completer (IBA 9.7.5.1–9.7.6, rxe_comp.c): consumes ACKs, NAKs, READ
//! responses and atomic ACKs; completes send work requests in order; runs the
//! retransmission and RNR timers; turns NAKs and exhausted retries into error
//! completions.

use super::{Ctx, Qp};
use crate::limits::{MAX_INFLIGHT_PKTS, MIN_CWND};
use crate::verbs::*;
use softrdma_wire::{NakCode, Operation, PacketRepr, Position, Psn, Syndrome};

/// READ responses that may arrive past a missing one before the requester
/// asks for it again.
const READ_REORDER_TOLERANCE: u32 = 8;

/// IBA 9.7.5.2.2 / table 44 → the requester's completion status.
pub(crate) const fn nak_status(code: NakCode) -> WcStatus {
    match code {
        NakCode::InvalidRequest | NakCode::InvalidRdRequest | NakCode::Reserved(_) => {
            WcStatus::RemInvReqErr
        }
        NakCode::RemoteAccessError => WcStatus::RemAccessErr,
        NakCode::RemoteOperationalError => WcStatus::RemOpErr,
        // Never an error completion: the requester retries.
        NakCode::PsnSequenceError => WcStatus::RetryExcErr,
    }
}

impl Qp {
    /// Pops the finished requests at the head of the send queue and delivers
    /// their completions, in posting order. An error completion takes the QP
    /// to the error state.
    pub(crate) fn complete_done(&mut self, ctx: &mut Ctx) {
        while let Some(w) = self.sq.front() {
            let Some(status) = w.done else { break };
            let w = self.sq.pop_front().expect("front exists");
            if self.req.cur > 0 {
                self.req.cur -= 1;
            } else {
                self.req.cur_pkt = 0;
            }
            if w.uses_responder_resource() && w.npkts > 0 {
                self.req.rd_atomic_outstanding = self.req.rd_atomic_outstanding.saturating_sub(1);
            }
            if (status != WcStatus::Success || w.signaled) && !self.complete_send(&w, status, ctx) {
                self.enter_error(ctx);
                return;
            }
            if status != WcStatus::Success {
                self.enter_error(ctx);
                return;
            }
        }
        self.check_drained(ctx);
    }

    /// Everything up to and including `psn` was received by the responder.
    /// Completes SENDs and WRITEs that end there; a READ or atomic that
    /// starts at or before `psn` and still lacks its response lost it: go
    /// back to it. Returns whether anything moved forward.
    fn ack_through(&mut self, psn: Psn) -> u32 {
        let mut progress = 0;
        for i in 0..self.sq.len() {
            let w = &mut self.sq[i];
            if !w.started {
                break;
            }
            if w.done.is_some() {
                continue;
            }
            if w.first_psn.after(psn) {
                break;
            }
            if w.has_response() {
                let resume = w.first_psn.add(w.acked_pkts);
                if self.req.retrying_from != Some(resume) {
                    self.rewind_to(resume);
                }
                break;
            }
            let done_pkts = psn.distance_from(w.first_psn) + 1;
            if done_pkts >= w.npkts {
                progress += w.npkts - w.acked_pkts;
                w.acked_pkts = w.npkts;
                w.done = Some(WcStatus::Success);
            } else {
                if done_pkts > w.acked_pkts {
                    progress += done_pkts - w.acked_pkts;
                    w.acked_pkts = done_pkts;
                }
                break;
            }
        }
        progress
    }

    fn on_progress(&mut self, acked: u32, ctx: &mut Ctx) {
        self.req.cwnd = (self.req.cwnd + acked).min(MAX_INFLIGHT_PKTS);
        self.req.retry_left = self.attr.retry_cnt;
        self.req.rnr_left = self.attr.rnr_retry;
        if let (Some(r), Some(old)) = (self.req.retrying_from, self.oldest_unacked()) {
            if old.after(r) {
                self.req.retrying_from = None;
            }
        } else {
            self.req.retrying_from = None;
        }
        self.req.retrans_deadline = None;
        self.req.probe_deadline = None;
        let oldest = self.oldest_unacked();
        if let Some((p, sent)) = self.req.rtt_sample {
            if oldest.is_none_or(|o| o.after(p)) {
                let sample = ctx.now.0.saturating_sub(sent.0);
                // RFC 6298's estimators (α = 1/8, β = 1/4).
                match self.req.srtt_ns {
                    Some(s) => {
                        let dev = s.abs_diff(sample);
                        let v = self.req.rttvar_ns;
                        self.req.rttvar_ns = v - v / 4 + dev / 4;
                        self.req.srtt_ns = Some(s - s / 8 + sample / 8);
                    }
                    None => {
                        self.req.srtt_ns = Some(sample);
                        self.req.rttvar_ns = sample / 2;
                    }
                }
                self.req.rtt_sample = None;
            }
        }
        if oldest.is_some() {
            if let Some(t) = crate::limits::ack_timeout_ns(self.attr.timeout) {
                self.req.retrans_deadline = Some(ctx.now.add_ns(t));
            }
            if ctx.tail_probe {
                self.req.probe_deadline = self.probe_timeout_ns().map(|t| ctx.now.add_ns(t));
            }
        }
    }

    /// Marks the outstanding request containing `psn` (or the oldest one)
    /// failed with `status`.
    fn fail_at(&mut self, psn: Option<Psn>, status: WcStatus) {
        let idx = match psn {
            Some(p) => self
                .sq
                .iter()
                .position(|w| w.contains(p) && w.done.is_none()),
            None => self.sq.iter().position(|w| w.started && w.done.is_none()),
        };
        if let Some(i) = idx {
            self.sq[i].done = Some(status);
        }
    }

    /// A retry that does not come from a timeout: a NAK or a gap in the
    /// responses. Consumes one transport retry.
    fn retry_from(&mut self, psn: Psn) {
        if self.req.retrying_from == Some(psn) {
            return;
        }
        if self.req.retry_left == 0 {
            self.fail_at(Some(psn), WcStatus::RetryExcErr);
            return;
        }
        self.req.retry_left -= 1;
        self.req.cwnd = (self.req.cwnd / 2).max(MIN_CWND);
        self.rewind_to(psn);
    }

    /// An ACK, NAK, READ response or atomic ACK for this QP's requester.
    pub(crate) fn handle_response(&mut self, pkt: &PacketRepr<'_>, ctx: &mut Ctx) {
        if !matches!(self.qp_type, QpType::Rc | QpType::XrcSend)
            || !matches!(self.state, QpState::Rts | QpState::Sqd | QpState::Sqe)
        {
            self.counters.stale_responses += 1;
            return;
        }
        let Some(info) = pkt.bth.opcode.info() else {
            return;
        };
        let psn = pkt.bth.psn;
        // Every response names a PSN this QP sent: an ACK, NAK or response
        // beyond the highest one is forged or from another connection, and
        // must not complete requests whose packets never left.
        if self.req.max_sent.is_none_or(|m| psn.after(m)) {
            self.counters.stale_responses += 1;
            return;
        }
        let mut progress = 0;
        match info.operation {
            Operation::Acknowledge => {
                let Some(aeth) = pkt.aeth else { return };
                match aeth.syndrome {
                    Syndrome::Ack { .. } => {
                        progress = self.ack_through(psn);
                        if progress == 0 {
                            self.counters.stale_responses += 1;
                            // A late ACK for what was outstanding when
                            // the probe went, after the probe's own
                            // answer: nothing was lost, the probe was not
                            // needed.
                            if self.req.probed.is_some_and(|p| !psn.before(p)) {
                                self.probe_verdict(true);
                            }
                        }
                    }
                    Syndrome::Nak(NakCode::PsnSequenceError) => {
                        self.counters.seq_nak_rcvd += 1;
                        // A loss: a probe was (or would have been) useful.
                        self.probe_verdict(false);
                        progress = self.ack_through(psn.sub(1));
                        if progress > 0 {
                            self.on_progress(progress, ctx);
                        }
                        progress = 0;
                        if self.sq.iter().any(|w| w.contains(psn) && w.done.is_none()) {
                            // Resend from the NAK's PSN, or from an earlier READ
                            // or atomic whose response was lost.
                            let target = self
                                .oldest_unacked()
                                .filter(|o| o.before(psn))
                                .unwrap_or(psn);
                            self.retry_from(target);
                        }
                    }
                    Syndrome::RnrNak { timer } => {
                        self.counters.rnr_nak_rcvd += 1;
                        progress = self.ack_through(psn.sub(1));
                        if progress > 0 {
                            self.on_progress(progress, ctx);
                        }
                        progress = 0;
                        if self.sq.iter().any(|w| w.contains(psn) && w.done.is_none()) {
                            if self.req.rnr_left == 0 {
                                self.fail_at(Some(psn), WcStatus::RnrRetryExcErr);
                            } else {
                                if self.req.rnr_left != 7 {
                                    self.req.rnr_left -= 1;
                                }
                                let us = softrdma_wire::ext::rnr_timer_us(timer) as u64;
                                self.req.rnr_deadline = Some(ctx.now.add_ns(us * 1000));
                                self.req.rnr_psn = psn;
                                self.req.retrans_deadline = None;
                                self.req.probe_deadline = None;
                                // Nothing is sent until the RNR wait ends.
                                self.rewind_to(psn);
                            }
                        }
                    }
                    Syndrome::Nak(code) => {
                        let c = &mut self.counters;
                        match code {
                            NakCode::InvalidRequest
                            | NakCode::InvalidRdRequest
                            | NakCode::Reserved(_) => {
                                c.inv_req_nak_rcvd += 1;
                            }
                            NakCode::RemoteAccessError => {
                                c.rem_access_nak_rcvd += 1;
                            }
                            NakCode::RemoteOperationalError => {
                                c.rem_op_nak_rcvd += 1;
                            }
                            NakCode::PsnSequenceError => {}
                        }
                        self.ack_through(psn.sub(1));
                        self.fail_at(Some(psn), nak_status(code));
                    }
                    Syndrome::Reserved(_) => {
                        self.counters.stale_responses += 1;
                        return;
                    }
                }
            }
            Operation::ReadResponse | Operation::AtomicAcknowledge => {
                progress = self.handle_data_response(pkt, info.position);
            }
            _ => return,
        }
        if progress > 0 {
            self.on_progress(progress, ctx);
        }
        self.complete_done(ctx);
    }

    /// A READ response or atomic ACK with PSN `pkt.bth.psn`.
    fn handle_data_response(&mut self, pkt: &PacketRepr<'_>, pos: Position) -> u32 {
        let psn = pkt.bth.psn;
        let is_atomic = pkt.atomic_ack.is_some();
        let Some(i) = self
            .sq
            .iter()
            .position(|w| w.contains(psn) && w.done.is_none() && w.has_response())
        else {
            self.counters.stale_responses += 1;
            return 0;
        };
        // The responder answers in order: this response acknowledges every
        // request before this one.
        let mut progress = 0;
        if self.sq.iter().take(i).any(|w| w.done.is_none()) {
            let before = self.sq[i].first_psn.sub(1);
            progress = self.ack_through(before);
            if self.sq.iter().take(i).any(|w| w.done.is_none()) {
                // An earlier READ/atomic lost its response: we went back.
                return progress;
            }
        }
        let mtu = self.mtu();
        let w = &mut self.sq[i];
        if is_atomic != w.wr.opcode.is_atomic() {
            self.counters.stale_responses += 1;
            return progress;
        }
        // FLUSH and ATOMIC WRITE are answered by a zero-length RDMA READ
        // RESPONSE ONLY (IBA A19; rxe's send_read_response_ack); anything
        // else in its place is an unexpected response (rxe completes a
        // mismatched READ response with an error too).
        if matches!(w.wr.opcode, WrOpcode::Flush | WrOpcode::AtomicWrite) {
            if psn != w.first_psn {
                self.counters.stale_responses += 1;
                return progress;
            }
            w.acked_pkts = 1;
            w.done = Some(if pos == Position::Only && pkt.payload.is_empty() {
                WcStatus::Success
            } else {
                WcStatus::BadRespErr
            });
            return progress + 1;
        }
        if let Some(orig) = pkt.atomic_ack {
            if psn != w.first_psn.add(w.acked_pkts) {
                self.counters.stale_responses += 1;
                return progress;
            }
            let placed = w
                .sgl
                .as_ref()
                .map_or(Ok(()), |l| l.write(0, &orig.to_ne_bytes()));
            w.acked_pkts = 1;
            // The result buffer was deregistered meanwhile: a local error.
            w.done = Some(match placed {
                Ok(()) => WcStatus::Success,
                Err(_) => WcStatus::LocProtErr,
            });
            return progress + 1;
        }
        // READ responses are placed by PSN, whatever order they come in
        // (IBA 9.7.4.1.3 places each response at its offset): a response
        // that overtook a delayed one is kept, not thrown away, so
        // reordering costs nothing and a loss costs only the hole.
        let _ = pos;
        let idx = psn.distance_from(w.first_psn);
        let last_idx = w.npkts - 1;
        if idx < w.acked_pkts || w.rx_has(idx) {
            self.counters.stale_responses += 1;
            return progress;
        }
        let offset = idx as u64 * mtu as u64;
        let expect_len = if idx == last_idx {
            w.len as u64 - offset.min(w.len as u64)
        } else {
            mtu as u64
        };
        if pkt.payload.len() as u64 != expect_len {
            w.done = Some(WcStatus::BadRespErr);
            return progress;
        }
        if let Some(sgl) = &w.sgl {
            if sgl.write(offset, pkt.payload).is_err() {
                // The destination was deregistered meanwhile.
                w.done = Some(WcStatus::LocProtErr);
                return progress + 1;
            }
        }
        if idx == w.acked_pkts {
            w.acked_pkts += 1;
            while w.acked_pkts < w.npkts && w.rx_has(w.acked_pkts) {
                w.acked_pkts += 1;
            }
        } else {
            w.rx_set(idx);
            w.ooo += 1;
            // A hole: after enough later responses (or the last one) it is
            // a loss, not reordering. Ask again from the hole.
            if w.ooo >= READ_REORDER_TOLERANCE || idx == last_idx {
                w.ooo = 0;
                let hole = w.first_psn.add(w.acked_pkts);
                self.retry_from(hole);
                return progress + 1;
            }
        }
        if w.acked_pkts == w.npkts {
            w.done = Some(WcStatus::Success);
            w.rx_map = Vec::new();
        }
        progress + 1
    }

    /// Timers of this QP that are due at `ctx.now`.
    pub(crate) fn on_timer(&mut self, ctx: &mut Ctx) {
        let now = ctx.now;
        if self.req.probe_deadline.is_some_and(|t| t <= now) {
            self.req.probe_deadline = None;
            self.tail_probe();
        }
        if self.req.rnr_deadline.is_some_and(|t| t <= now) {
            self.req.rnr_deadline = None;
            self.req.retrying_from = None;
            let p = self.req.rnr_psn;
            self.rewind_to(p);
        }
        if self.req.retrans_deadline.is_some_and(|t| t <= now) {
            self.req.retrans_deadline = None;
            if let Some(old) = self.oldest_unacked() {
                if !self.inflight_sent() {
                    // Nothing that left is unacknowledged: the request was
                    // held back (its window, the device's budget), not
                    // lost. No retry is spent and the window stays.
                    self.rewind_to(old);
                    self.req.retrying_from = None;
                    if let Some(t) = crate::limits::ack_timeout_ns(self.attr.timeout) {
                        self.req.retrans_deadline = Some(now.add_ns(t));
                    }
                    self.complete_done(ctx);
                    return;
                }
                self.counters.timeouts += 1;
                self.probe_verdict(false);
                if self.req.retry_left == 0 {
                    self.fail_at(None, WcStatus::RetryExcErr);
                    self.complete_done(ctx);
                    return;
                }
                self.req.retry_left -= 1;
                self.req.cwnd = MIN_CWND;
                self.req.retrying_from = None;
                self.rewind_to(old);
                if let Some(t) = crate::limits::ack_timeout_ns(self.attr.timeout) {
                    self.req.retrans_deadline = Some(now.add_ns(t));
                }
            }
        }
        self.complete_done(ctx);
    }
}
