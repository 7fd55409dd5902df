//! The responder (IBA 9.7.5, rxe_resp.c): a pipeline of named checks for
//! every request packet — PSN, opcode sequence, operation allowed, resources,
//! length, R_Key — then execution and acknowledgement. Responses leave in
//! PSN order through one queue, where consecutive ACKs coalesce.

use super::req::{build_packet, Payload};
use super::{Ctx, Qp, RecvWqe};
use crate::device::{RecvMeta, Transmit};
use crate::memory::{SgList, Span};
use crate::verbs::*;
use softrdma_wire::ext::{CREDITS_UNLIMITED, FLUSH_GLOBAL, FLUSH_MR, FLUSH_PERSISTENT};
use softrdma_wire::{
    AethRepr, BthRepr, Msn, NakCode, Opcode, OpcodeInfo, Operation, PacketRepr, Position, Psn,
    Syndrome,
};
use std::collections::VecDeque;

/// Something the responder will send.
#[derive(Debug)]
pub(crate) enum RespJob {
    /// ACK, RNR NAK or NAK.
    Ack {
        psn: Psn,
        msn: Msn,
        syndrome: Syndrome,
    },
    /// Atomic ACK with the original value (`replay`: answering a
    /// duplicate).
    AtomicAck {
        psn: Psn,
        msn: Msn,
        orig: u64,
        replay: bool,
    },
    /// The zero-length RDMA READ RESPONSE ONLY that acknowledges a FLUSH
    /// or an ATOMIC WRITE (IBA A19; rxe's `send_read_response_ack`).
    PlacementAck { psn: Psn, msn: Msn },
    /// READ responses still to send.
    Read(ReadJob),
}

#[derive(Debug)]
pub(crate) struct ReadJob {
    pub(super) res_id: u64,
    /// PSN of the next response.
    pub(super) psn: Psn,
    pub(super) span: Option<Span>,
    /// Bytes already sent.
    pub(super) offset: usize,
    pub(super) len: usize,
    pub(super) msn: Msn,
    /// Answering a duplicate request (re-executed from its PSN).
    pub(super) replay: bool,
}

/// A READ or atomic the responder remembers for duplicates (IBA 9.7.5.1.3,
/// "responder resources", `max_dest_rd_atomic` of them).
#[derive(Debug, Clone, Copy)]
pub(super) struct Resource {
    pub(super) id: u64,
    pub(super) first_psn: Psn,
    pub(super) npkts: u32,
    /// `Some(original value)` for an atomic.
    pub(super) atomic: Option<u64>,
    /// A FLUSH or ATOMIC WRITE: a duplicate is acknowledged again, never
    /// executed again (oA19-14, oA19-15).
    pub(super) placement: bool,
    pub(super) msn: Msn,
}

/// The message being received.
#[derive(Debug)]
enum InProgress {
    Send {
        wqe: RecvWqe,
        sgl: SgList,
        offset: u64,
        from_srq: bool,
    },
    Write {
        span: Option<Span>,
        offset: usize,
        len: usize,
    },
}

/// Responder state of a QP.
#[derive(Debug, Default)]
pub(crate) struct Responder {
    /// Expected PSN.
    pub epsn: Psn,
    /// Message sequence number: requests completed.
    pub msn: Msn,
    cur: Option<InProgress>,
    /// A PSN sequence NAK went out for `epsn`.
    nak_sent: bool,
    /// UC: skip packets until the next message start.
    uc_drop: bool,
    pub(super) resources: VecDeque<Resource>,
    max_resources: usize,
    /// `max_dest_rd_atomic` as negotiated: READ/atomic requests whose
    /// responses may wait to be sent at once (0: none accepted).
    max_dest_rd_atomic: u8,
    next_res_id: u64,
    pub out: VecDeque<RespJob>,
    comm_est: bool,
    /// Answers not queued (see `has_room`), for the QP's counters.
    pub dropped: u64,
}

/// How a request failed at the responder (IBA 9.7.5.2.2 classes).
pub(super) enum Fail {
    /// NAK and move to the error state.
    Nak(NakCode),
    /// Receiver not ready: RNR NAK, state unchanged.
    Rnr,
    /// Silently dropped.
    Drop,
}

impl Responder {
    pub fn reset_psn(&mut self, psn: Psn) {
        self.epsn = psn;
        self.nak_sent = false;
    }
    pub fn set_max_resources(&mut self, n: u8) {
        self.max_dest_rd_atomic = n;
        self.max_resources = (n as usize).max(1);
        while self.resources.len() > self.max_resources {
            self.resources.pop_front();
        }
    }
    pub fn on_error(&mut self) {
        // ACKs and the NAK that explains the error still go out; READ
        // responses do not.
        self.out.retain(|j| !matches!(j, RespJob::Read(_)));
        self.resources.clear();
    }
    /// READ and atomic requests (first executions, not duplicates) whose
    /// responses have not all been handed out yet. A requester that keeps
    /// to `max_rd_atomic` has that many outstanding at most; answers to
    /// duplicates (one per responder resource at most: a duplicate
    /// replaces its resource's job) are not counted, since a duplicate the
    /// network delayed may come after its request completed.
    fn rd_atomic_pending(&self) -> usize {
        self.out
            .iter()
            .filter(|j| {
                matches!(
                    j,
                    RespJob::Read(ReadJob { replay: false, .. })
                        | RespJob::AtomicAck { replay: false, .. }
                )
            })
            .count()
    }

    /// Whether one more ACK, RNR NAK or repeated response fits the queue
    /// ([`MAX_RESP_QUEUE`](crate::limits::MAX_RESP_QUEUE)); a peer that
    /// keeps sending without reading its answers gets no more of them (it
    /// retransmits what it still needs).
    pub(super) fn has_room(&self) -> bool {
        self.out.len() < crate::limits::MAX_RESP_QUEUE
    }

    /// Queues an ACK, merging it with an ACK already at the tail.
    pub(super) fn queue_ack(&mut self, psn: Psn) {
        let msn = self.msn;
        if let Some(RespJob::Ack {
            psn: p,
            msn: m,
            syndrome: Syndrome::Ack { .. },
        }) = self.out.back_mut()
        {
            *p = psn;
            *m = msn;
            return;
        }
        if !self.has_room() {
            self.dropped += 1;
            return;
        }
        self.out.push_back(RespJob::Ack {
            psn,
            msn,
            syndrome: Syndrome::ACK,
        });
    }
    /// Queues a NAK that ends the connection (always goes out).
    pub(super) fn queue_nak_fatal(&mut self, psn: Psn, syndrome: Syndrome) {
        self.queue_nak(psn, syndrome)
    }
    /// Queues a NAK. One that ends the connection always goes out; an RNR
    /// or sequence NAK only while the queue has room.
    pub(super) fn queue_nak(&mut self, psn: Psn, syndrome: Syndrome) {
        let fatal = matches!(syndrome, Syndrome::Nak(c) if c != NakCode::PsnSequenceError);
        if !fatal && !self.has_room() {
            self.dropped += 1;
            return;
        }
        self.out.push_back(RespJob::Ack {
            psn,
            msn: self.msn,
            syndrome,
        });
    }
    fn add_resource(
        &mut self,
        first_psn: Psn,
        npkts: u32,
        atomic: Option<u64>,
        placement: bool,
    ) -> u64 {
        if self.resources.len() >= self.max_resources.max(1) {
            self.resources.pop_front();
        }
        self.next_res_id += 1;
        let id = self.next_res_id;
        self.resources.push_back(Resource {
            id,
            first_psn,
            npkts,
            atomic,
            placement,
            msn: self.msn,
        });
        id
    }
}

/// The rights a FLUSH of placement type `t` needs, of the QP and of the
/// region (rxe's check_qp_attr_access and check_rkey).
fn flush_access(t: u8) -> Access {
    let mut a = Access(0);
    if t & FLUSH_GLOBAL != 0 {
        a = a.with(Access::FLUSH_GLOBAL);
    }
    if t & FLUSH_PERSISTENT != 0 {
        a = a.with(Access::FLUSH_PERSISTENT);
    }
    a
}

/// Right the QP's own access flags must grant for an operation.
fn qp_access_needed(op: Operation) -> Option<Access> {
    match op {
        Operation::RdmaWrite | Operation::AtomicWrite => Some(Access::REMOTE_WRITE),
        Operation::ReadRequest => Some(Access::REMOTE_READ),
        Operation::CompareSwap | Operation::FetchAdd => Some(Access::REMOTE_ATOMIC),
        _ => None,
    }
}

impl Qp {
    fn responder_ready(&self) -> bool {
        matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        )
    }

    /// Takes a receive WQE from the QP's queue or its SRQ.
    pub(super) fn take_recv(&mut self, ctx: &mut Ctx) -> Option<(RecvWqe, bool)> {
        match self.srq {
            None => self.rq.pop_front().map(|w| (w, false)),
            Some(id) => {
                let srq = ctx.srqs.get_mut(id.0)?;
                let w = srq.queue.pop_front()?;
                if srq.limit != 0 && (srq.queue.len() as u32) < srq.limit {
                    srq.limit = 0;
                    ctx.event(AsyncEvent::SrqLimitReached(id));
                }
                Some((w, true))
            }
        }
    }

    fn has_recv(&self, ctx: &Ctx) -> bool {
        match self.srq {
            None => !self.rq.is_empty(),
            Some(id) => ctx.srqs.get(id.0).is_some_and(|s| !s.queue.is_empty()),
        }
    }

    /// Returns a receive WQE taken for a message that did not complete.
    fn put_back_recv(&mut self, wqe: RecvWqe, from_srq: bool, ctx: &mut Ctx) {
        match (from_srq, self.srq) {
            (true, Some(id)) => {
                if let Some(s) = ctx.srqs.get_mut(id.0) {
                    s.queue.push_front(wqe);
                }
            }
            _ => self.rq.push_front(wqe),
        }
    }

    /// Drops the message in progress (UC loss, or an error), returning its WQE.
    fn abandon_message(&mut self, ctx: &mut Ctx) {
        if let Some(InProgress::Send { wqe, from_srq, .. }) = self.resp.cur.take() {
            self.put_back_recv(wqe, from_srq, ctx);
        }
    }

    /// A request packet for this QP's responder.
    pub(crate) fn handle_request(&mut self, pkt: &PacketRepr<'_>, meta: &RecvMeta, ctx: &mut Ctx) {
        if !self.responder_ready() {
            self.counters.unknown_qp += 1;
            return;
        }
        let Some(info) = pkt.bth.opcode.info() else {
            return;
        };
        if self.state == QpState::Rtr && !self.resp.comm_est {
            self.resp.comm_est = true;
            ctx.event(AsyncEvent::CommEst(self.qpn));
        }
        if self.qp_type == QpType::Ud {
            self.handle_ud(pkt, info, meta, ctx);
            return;
        }
        if self.qp_type == QpType::XrcRecv && !self.select_xrc_srq(pkt, ctx) {
            return;
        }
        let rc = self.qp_type.is_reliable();
        let psn = pkt.bth.psn;

        // 1. PSN.
        if rc {
            if psn != self.resp.epsn {
                if psn.after(self.resp.epsn) {
                    self.counters.out_of_sequence += 1;
                    if !self.resp.nak_sent {
                        self.resp.nak_sent = true;
                        self.resp
                            .queue_nak(self.resp.epsn, Syndrome::Nak(NakCode::PsnSequenceError));
                        self.counters.seq_nak_sent += 1;
                    }
                } else {
                    self.handle_duplicate(pkt, info, ctx);
                }
                return;
            }
        } else {
            if psn.before(self.resp.epsn) {
                // UC has no duplicate detection; like rxe, an old PSN is
                // dropped so messages are never delivered out of order.
                self.counters.duplicate_requests += 1;
                return;
            }
            if psn != self.resp.epsn {
                if self.resp.cur.is_some() {
                    self.counters.uc_msgs_dropped += 1;
                }
                self.abandon_message(ctx);
                self.resp.uc_drop = true;
                self.resp.epsn = psn;
            }
            if self.resp.uc_drop {
                if !info.position.starts() {
                    self.resp.epsn = psn.next();
                    self.counters.out_of_sequence += 1;
                    return;
                }
                self.resp.uc_drop = false;
            }
        }

        match self.execute(pkt, info, ctx) {
            Ok(()) => {}
            Err(Fail::Rnr) => {
                self.counters.rnr_nak_sent += 1;
                self.resp.queue_nak(
                    psn,
                    Syndrome::RnrNak {
                        timer: self.attr.min_rnr_timer,
                    },
                );
            }
            Err(Fail::Drop) => {
                // UC: the message is lost; skip to the next one.
                self.abandon_message(ctx);
                self.resp.uc_drop = true;
                self.resp.epsn = psn.next();
            }
            Err(Fail::Nak(code)) => {
                if !rc {
                    self.abandon_message(ctx);
                    self.resp.uc_drop = true;
                    self.resp.epsn = psn.next();
                    return;
                }
                match code {
                    NakCode::RemoteAccessError => {
                        self.counters.rem_access_nak_sent += 1;
                        ctx.event(AsyncEvent::QpAccessErr(self.qpn));
                    }
                    NakCode::RemoteOperationalError => {
                        self.counters.rem_op_nak_sent += 1;
                        ctx.event(AsyncEvent::QpFatal(self.qpn));
                    }
                    _ => {
                        self.counters.inv_req_nak_sent += 1;
                        ctx.event(AsyncEvent::QpReqErr(self.qpn));
                    }
                }
                self.resp.queue_nak(psn, Syndrome::Nak(code));
                // The in-progress receive is flushed with the queue.
                self.abandon_message(ctx);
                self.enter_error(ctx);
            }
        }
    }

    /// Checks 2–7 of the pipeline and execution for the packet at `epsn`.
    fn execute(
        &mut self,
        pkt: &PacketRepr<'_>,
        info: &OpcodeInfo,
        ctx: &mut Ctx,
    ) -> Result<(), Fail> {
        let rc = self.qp_type.is_reliable();
        let mtu = self.mtu() as usize;
        let psn = pkt.bth.psn;
        let plen = pkt.payload.len();

        // 2. Opcode sequence (IBA 9.8.3.1 / C9-79).
        let continuing = match &self.resp.cur {
            Some(InProgress::Send { .. }) => Some(Operation::Send),
            Some(InProgress::Write { .. }) => Some(Operation::RdmaWrite),
            None => None,
        };
        match continuing {
            Some(op) if op != info.operation || info.position.starts() => {
                return Err(Fail::Nak(NakCode::InvalidRequest));
            }
            None if !info.position.starts() => return Err(Fail::Nak(NakCode::InvalidRequest)),
            _ => {}
        }

        // 3. Operation allowed on this QP.
        if let Some(need) = qp_access_needed(info.operation) {
            if !self.attr.qp_access_flags.contains(need) {
                return Err(Fail::Nak(NakCode::InvalidRequest));
            }
        }

        // 4. Responder resources of a READ or atomic (IBA 9.7.5.1.3,
        // rxe's check_resource): no more than `max_dest_rd_atomic` whose
        // responses still wait; a requester that sends more did not keep
        // to what was negotiated (RESPST_ERR_TOO_MANY_RDMA_ATM_REQ).
        if matches!(
            info.operation,
            Operation::ReadRequest | Operation::CompareSwap | Operation::FetchAdd
        ) && self.resp.rd_atomic_pending() >= self.resp.max_dest_rd_atomic as usize
        {
            self.counters.too_many_rd_atomic += 1;
            return Err(Fail::Nak(NakCode::InvalidRequest));
        }

        // 5. Length of this packet (IBA 9.7.5.1.1 / C9-89).
        let len_ok = match info.position {
            Position::First | Position::Middle => plen == mtu,
            Position::Last => plen >= 1 && plen <= mtu,
            Position::Only => plen <= mtu,
        };
        if info.payload && !len_ok {
            return Err(Fail::Nak(NakCode::InvalidRequest));
        }

        match info.operation {
            Operation::Send => self.exec_send(pkt, info, ctx)?,
            Operation::RdmaWrite => self.exec_write(pkt, info, ctx)?,
            Operation::ReadRequest => {
                let reth = pkt.reth.ok_or(Fail::Nak(NakCode::InvalidRequest))?;
                if reth.dma_len > crate::limits::MAX_MSG_SIZE {
                    return Err(Fail::Nak(NakCode::InvalidRequest));
                }
                let span = self.check_rkey(
                    reth.rkey,
                    reth.va,
                    reth.dma_len as u64,
                    Access::REMOTE_READ,
                    ctx,
                )?;
                let npkts = (reth.dma_len as usize).div_ceil(mtu).max(1) as u32;
                self.resp.msn = self.resp.msn.next();
                let id = self.resp.add_resource(psn, npkts, None, false);
                self.resp.out.push_back(RespJob::Read(ReadJob {
                    res_id: id,
                    psn,
                    span,
                    offset: 0,
                    len: reth.dma_len as usize,
                    msn: self.resp.msn,
                    replay: false,
                }));
                self.resp.epsn = psn.add(npkts);
                self.resp.nak_sent = false;
                return Ok(());
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                let a = pkt.atomic_eth.ok_or(Fail::Nak(NakCode::InvalidRequest))?;
                if a.va & 7 != 0 {
                    return Err(Fail::Nak(NakCode::InvalidRequest));
                }
                let span = self
                    .check_rkey(a.rkey, a.va, 8, Access::REMOTE_ATOMIC, ctx)?
                    .ok_or(Fail::Nak(NakCode::RemoteAccessError))?;
                let orig = if info.operation == Operation::CompareSwap {
                    span.region.compare_swap(span.offset, a.compare, a.swap_add)
                } else {
                    span.region.fetch_add(span.offset, a.swap_add)
                }
                .map_err(|_| Fail::Nak(NakCode::RemoteAccessError))?;
                self.resp.msn = self.resp.msn.next();
                self.resp.add_resource(psn, 1, Some(orig), false);
                self.resp.out.push_back(RespJob::AtomicAck {
                    psn,
                    msn: self.resp.msn,
                    orig,
                    replay: false,
                });
                self.resp.epsn = psn.next();
                self.resp.nak_sent = false;
                return Ok(());
            }
            Operation::AtomicWrite => {
                self.exec_atomic_write(pkt, ctx)?;
                return Ok(());
            }
            Operation::Flush => {
                self.exec_flush(pkt, ctx)?;
                return Ok(());
            }
            _ => return Err(Fail::Nak(NakCode::InvalidRequest)),
        }

        // 8. Acknowledge SENDs and WRITEs.
        self.resp.epsn = psn.next();
        self.resp.nak_sent = false;
        if rc && pkt.bth.ack_req {
            self.resp.queue_ack(psn);
        }
        Ok(())
    }

    /// Check 6: R_Key, bounds and rights; no check for zero-length
    /// transfers (IBA 9.7.5.1.6 / C9-88). `Ok(None)` for zero length.
    pub(super) fn check_rkey(
        &self,
        rkey: softrdma_wire::RKey,
        va: u64,
        len: u64,
        need: Access,
        ctx: &Ctx,
    ) -> Result<Option<Span>, Fail> {
        if len == 0 {
            return Ok(None);
        }
        ctx.mrs
            .resolve_remote(self.pd, self.qpn, rkey, va, len, need)
            .map(Some)
            .map_err(|_| Fail::Nak(NakCode::RemoteAccessError))
    }

    /// ATOMIC WRITE (IBA A19, rxe's atomic_write_reply): exactly 8 bytes
    /// (oA19-28), written as one store at an 8-byte aligned address the
    /// R_Key allows writing; acknowledged with a zero-length READ response.
    fn exec_atomic_write(&mut self, pkt: &PacketRepr<'_>, ctx: &mut Ctx) -> Result<(), Fail> {
        let psn = pkt.bth.psn;
        let reth = pkt.reth.ok_or(Fail::Nak(NakCode::InvalidRequest))?;
        if reth.dma_len != 8 || pkt.payload.len() != 8 {
            return Err(Fail::Nak(NakCode::InvalidRequest));
        }
        let span = self
            .check_rkey(reth.rkey, reth.va, 8, Access::REMOTE_WRITE, ctx)?
            .ok_or(Fail::Nak(NakCode::RemoteAccessError))?;
        // rxe_mr_do_atomic_write: a misaligned address is an invalid request.
        if reth.va & 7 != 0 {
            return Err(Fail::Nak(NakCode::InvalidRequest));
        }
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(pkt.payload);
        span.region
            .atomic_write(span.offset, bytes)
            .map_err(|_| Fail::Nak(NakCode::RemoteAccessError))?;
        self.placement_done(psn);
        Ok(())
    }

    /// FLUSH (IBA A19, rxe's process_flush): the QP and the R_Key must
    /// grant the FLUSH rights of the placement type; the range (or, at the
    /// memory-region level, the whole region or window) is made visible,
    /// and durable for a persistent flush; acknowledged with a zero-length
    /// READ response.
    fn exec_flush(&mut self, pkt: &PacketRepr<'_>, ctx: &mut Ctx) -> Result<(), Fail> {
        let psn = pkt.bth.psn;
        let (Some(feth), Some(reth)) = (pkt.feth, pkt.reth) else {
            return Err(Fail::Nak(NakCode::InvalidRequest));
        };
        let need = flush_access(feth.placement_type);
        if !self.attr.qp_access_flags.contains(need) {
            return Err(Fail::Nak(NakCode::InvalidRequest));
        }
        // IBA C9-94 (rxe_resp_check_length): a RETH length above 2^31.
        if reth.dma_len > crate::limits::MAX_MSG_SIZE {
            return Err(Fail::Nak(NakCode::InvalidRequest));
        }
        let whole = feth.selectivity_level == FLUSH_MR;
        let (region, offset, len) = ctx
            .mrs
            .resolve_flush(
                self.pd,
                self.qpn,
                reth.rkey,
                reth.va,
                reth.dma_len as u64,
                need,
                whole,
            )
            .map_err(|_| Fail::Nak(NakCode::RemoteAccessError))?;
        let persistent = feth.placement_type & FLUSH_PERSISTENT != 0;
        region
            .flush(offset, len, persistent)
            .map_err(|_| Fail::Nak(NakCode::RemoteAccessError))?;
        self.placement_done(psn);
        Ok(())
    }

    /// A FLUSH or ATOMIC WRITE at `psn` executed: a responder resource for
    /// duplicates, the zero-length READ response, the next PSN.
    fn placement_done(&mut self, psn: Psn) {
        self.resp.msn = self.resp.msn.next();
        self.resp.add_resource(psn, 1, None, true);
        self.resp.out.push_back(RespJob::PlacementAck {
            psn,
            msn: self.resp.msn,
        });
        self.resp.epsn = psn.next();
        self.resp.nak_sent = false;
    }

    fn exec_send(
        &mut self,
        pkt: &PacketRepr<'_>,
        info: &OpcodeInfo,
        ctx: &mut Ctx,
    ) -> Result<(), Fail> {
        let rc = self.qp_type.is_reliable();
        if info.position.starts() {
            // 4. Resources: a receive WQE.
            if !self.has_recv(ctx) {
                return Err(if rc { Fail::Rnr } else { Fail::Drop });
            }
            let (wqe, from_srq) = self.take_recv(ctx).ok_or(Fail::Drop)?;
            let Some(sgl) = self.recv_sgl(&wqe, ctx) else {
                return Err(Fail::Nak(NakCode::RemoteOperationalError));
            };
            self.resp.cur = Some(InProgress::Send {
                wqe,
                sgl,
                offset: 0,
                from_srq,
            });
        }
        let Some(InProgress::Send { sgl, offset, .. }) = &mut self.resp.cur else {
            return Err(Fail::Nak(NakCode::InvalidRequest));
        };
        let end = *offset + pkt.payload.len() as u64;
        if end > sgl.len() {
            // Longer than the receive buffer. rxe answers remote operational
            // error (IBA asks for invalid request); we match rxe.
            if let Some(InProgress::Send { wqe, .. }) = self.resp.cur.take() {
                self.recv_error(&wqe, WcStatus::LocLenErr, ctx);
            }
            return Err(Fail::Nak(NakCode::RemoteOperationalError));
        }
        if sgl.write(*offset, pkt.payload).is_err() {
            // The receive buffer was deregistered under the message.
            if let Some(InProgress::Send { wqe, .. }) = self.resp.cur.take() {
                self.recv_error(&wqe, WcStatus::LocProtErr, ctx);
            }
            return Err(Fail::Nak(NakCode::RemoteOperationalError));
        }
        *offset = end;
        if info.position.ends() {
            if let Some(rkey) = pkt.ieth {
                if ctx.mrs.invalidate(rkey.0, self.pd, self.qpn, true).is_err() {
                    if let Some(InProgress::Send { wqe, .. }) = self.resp.cur.take() {
                        self.recv_error(&wqe, WcStatus::RemInvReqErr, ctx);
                    }
                    return Err(Fail::Nak(NakCode::InvalidRequest));
                }
            }
            let Some(InProgress::Send { wqe, offset, .. }) = self.resp.cur.take() else {
                unreachable!("matched above");
            };
            self.resp.msn = self.resp.msn.next();
            let mut wc = self.recv_wc(&wqe, offset as u32, WcOpcode::Recv, pkt);
            if let Some(imm) = pkt.imm {
                wc.wc_flags = wc.wc_flags.with(WcFlags::WITH_IMM);
                wc.imm_or_inv = imm;
            }
            if let Some(rkey) = pkt.ieth {
                wc.wc_flags = wc.wc_flags.with(WcFlags::WITH_INV);
                wc.imm_or_inv = rkey.0;
            }
            if !ctx.complete(self.recv_cq, wc) {
                return Err(Fail::Nak(NakCode::RemoteOperationalError));
            }
        }
        Ok(())
    }

    fn exec_write(
        &mut self,
        pkt: &PacketRepr<'_>,
        info: &OpcodeInfo,
        ctx: &mut Ctx,
    ) -> Result<(), Fail> {
        let rc = self.qp_type.is_reliable();
        if info.position.starts() {
            let reth = pkt.reth.ok_or(Fail::Nak(NakCode::InvalidRequest))?;
            let len = reth.dma_len as usize;
            // A WRITE ONLY carries the whole message.
            if info.position == Position::Only && pkt.payload.len() != len {
                return Err(Fail::Nak(NakCode::InvalidRequest));
            }
            if info.position == Position::First && len <= self.mtu() as usize {
                return Err(Fail::Nak(NakCode::InvalidRequest));
            }
            // 4. Resources: WRITE with immediate consumes a receive WQE.
            if info.immediate() && !self.has_recv(ctx) {
                return Err(if rc { Fail::Rnr } else { Fail::Drop });
            }
            let span =
                self.check_rkey(reth.rkey, reth.va, len as u64, Access::REMOTE_WRITE, ctx)?;
            self.resp.cur = Some(InProgress::Write {
                span,
                offset: 0,
                len,
            });
        } else if info.immediate() && !self.has_recv(ctx) {
            return Err(if rc { Fail::Rnr } else { Fail::Drop });
        }
        let Some(InProgress::Write { span, offset, len }) = &mut self.resp.cur else {
            return Err(Fail::Nak(NakCode::InvalidRequest));
        };
        let end = *offset + pkt.payload.len();
        let bad_len = end > *len || (info.position.ends() && end != *len);
        if bad_len {
            return Err(Fail::Nak(NakCode::InvalidRequest));
        }
        if let Some(s) = span {
            if !pkt.payload.is_empty() && s.region.write(s.offset + *offset, pkt.payload).is_err() {
                // The target region was deregistered under the message.
                return Err(Fail::Nak(NakCode::RemoteAccessError));
            }
        }
        *offset = end;
        if info.position.ends() {
            let total = *len as u32;
            self.resp.cur = None;
            self.resp.msn = self.resp.msn.next();
            if info.immediate() {
                let (wqe, _) = self.take_recv(ctx).ok_or(Fail::Drop)?;
                let mut wc = self.recv_wc(&wqe, total, WcOpcode::RecvRdmaWithImm, pkt);
                wc.wc_flags = wc.wc_flags.with(WcFlags::WITH_IMM);
                wc.imm_or_inv = pkt.imm.unwrap_or(0);
                if !ctx.complete(self.recv_cq, wc) {
                    return Err(Fail::Nak(NakCode::RemoteOperationalError));
                }
            }
        }
        Ok(())
    }

    pub(super) fn recv_wc(
        &self,
        wqe: &RecvWqe,
        byte_len: u32,
        opcode: WcOpcode,
        pkt: &PacketRepr<'_>,
    ) -> Wc {
        Wc {
            wr_id: wqe.wr.wr_id,
            status: WcStatus::Success,
            opcode,
            byte_len,
            imm_or_inv: 0,
            qp_num: self.qpn,
            src_qp: self.attr.dest_qp_num,
            wc_flags: WcFlags::default(),
            pkey_index: 0,
            solicited: pkt.bth.solicited,
        }
    }

    /// The local memory receive WQE `wqe` names (writable by us), or None
    /// when it is not: then the WQE completed in error (LocProtErr).
    pub(super) fn recv_sgl(&self, wqe: &RecvWqe, ctx: &mut Ctx) -> Option<SgList> {
        match ctx
            .mrs
            .resolve_local(self.pd, &wqe.wr.sg_list, Access::LOCAL_WRITE)
        {
            Ok(s) => Some(s),
            Err(_) => {
                self.recv_error(wqe, WcStatus::LocProtErr, ctx);
                None
            }
        }
    }

    pub(super) fn recv_error(&self, wqe: &RecvWqe, status: WcStatus, ctx: &mut Ctx) {
        let mut wc = self.flush_recv_wc(wqe);
        wc.status = status;
        ctx.complete(self.recv_cq, wc);
    }

    /// A READ whose region went away mid-response: NAK remote access error
    /// at the response's PSN, and the QP to the error state.
    fn fail_read(&mut self, psn: Psn, msn: Msn, ctx: &mut Ctx, buf: &mut [u8]) -> Option<Transmit> {
        self.counters.rem_access_nak_sent += 1;
        ctx.event(AsyncEvent::QpAccessErr(self.qpn));
        self.enter_error(ctx);
        let mut r = PacketRepr::new(self.bth(self.ack_opcode(), psn), &[]);
        r.aeth = Some(AethRepr {
            syndrome: Syndrome::Nak(NakCode::RemoteAccessError),
            msn,
        });
        let av = self.attr.ah_attr;
        let tx = build_packet(ctx, &av, r, Payload::None, buf).ok()??;
        self.counters.tx_packets += 1;
        self.counters.tx_bytes += tx.len as u64;
        Some(tx)
    }

    /// The next response packet, if any.
    pub(crate) fn poll_response(&mut self, ctx: &mut Ctx, buf: &mut [u8]) -> Option<Transmit> {
        if self.resp.out.is_empty() {
            return None;
        }
        if self.state == QpState::Reset {
            self.resp.out.clear();
            return None;
        }
        let mtu = self.mtu() as usize;
        let av = self.attr.ah_attr;
        let (pkey, dest_qp) = (self.pkey(), self.attr.dest_qp_num);
        let tr = self.resp_transport();
        let (ack_op, atomic_ack_op) = (self.ack_opcode(), self.atomic_ack_opcode());
        let bth = move |opcode: Opcode, psn: Psn| BthRepr {
            pkey,
            ..BthRepr::new(opcode, dest_qp, psn)
        };
        let job = self.resp.out.front_mut()?;
        let tx = match job {
            RespJob::Ack { psn, msn, syndrome } => {
                let mut r = PacketRepr::new(bth(ack_op, *psn), &[]);
                r.aeth = Some(AethRepr {
                    syndrome: *syndrome,
                    msn: *msn,
                });
                let tx = build_packet(ctx, &av, r, Payload::None, buf).ok()?;
                if matches!(syndrome, Syndrome::Ack { .. }) {
                    self.counters.acks_sent += 1;
                }
                self.resp.out.pop_front();
                tx
            }
            RespJob::AtomicAck { psn, msn, orig, .. } => {
                let mut r = PacketRepr::new(bth(atomic_ack_op, *psn), &[]);
                r.aeth = Some(AethRepr {
                    syndrome: Syndrome::Ack {
                        credits: CREDITS_UNLIMITED,
                    },
                    msn: *msn,
                });
                r.atomic_ack = Some(*orig);
                let tx = build_packet(ctx, &av, r, Payload::None, buf).ok()?;
                self.resp.out.pop_front();
                tx
            }
            RespJob::PlacementAck { psn, msn } => {
                let code = Opcode::find(tr, Operation::ReadResponse, Position::Only, false, false)?;
                let mut r = PacketRepr::new(bth(code, *psn), &[]);
                r.aeth = Some(AethRepr {
                    syndrome: Syndrome::ACK,
                    msn: *msn,
                });
                let tx = build_packet(ctx, &av, r, Payload::None, buf).ok()?;
                self.resp.out.pop_front();
                tx
            }
            RespJob::Read(j) => {
                let n = (j.len - j.offset).min(mtu);
                let first = j.offset == 0;
                let last = j.offset + n >= j.len;
                let pos = Position::of(first, last);
                let code = Opcode::find(tr, Operation::ReadResponse, pos, false, false)?;
                let mut r = PacketRepr::new(bth(code, j.psn), &[]);
                if first || last {
                    r.aeth = Some(AethRepr {
                        syndrome: Syndrome::ACK,
                        msn: j.msn,
                    });
                }
                let payload = match &j.span {
                    Some(s) if n > 0 => Payload::Span(s, j.offset, n),
                    _ => Payload::None,
                };
                let Ok(tx) = build_packet(ctx, &av, r, payload, buf) else {
                    // The region was deregistered while its READ was being
                    // answered: no byte more is read from it; the
                    // requester gets a remote access error, as from a NIC.
                    let psn = j.psn;
                    let msn = j.msn;
                    self.resp.out.pop_front();
                    return self.fail_read(psn, msn, ctx, buf);
                };
                j.offset += n;
                j.psn = j.psn.next();
                if last {
                    self.resp.out.pop_front();
                }
                tx
            }
        }?;
        self.counters.tx_packets += 1;
        self.counters.tx_bytes += tx.len as u64;
        Some(tx)
    }
}
