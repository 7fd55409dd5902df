//! The requester (IBA 9.7.1–9.7.4, rxe_req.c): segments send work requests
//! into packets at the path MTU, assigns PSNs, asks for ACKs, respects the
//! READ/atomic limit, fences and the in-flight window, and rewinds for
//! go-back-N.

use super::{Ctx, Qp, SendWqe};
use crate::device::{Gather, Transmit, MAX_GATHER};
use crate::limits::{ACK_REQ_EVERY_PKTS, MAX_INFLIGHT_PKTS};
use crate::memory::{Piece, Revoked, SgList, Span};
use crate::verbs::*;
use crate::Instant;
use softrdma_wire::ip::{DatagramRepr, IpRepr};
use softrdma_wire::{
    AtomicEthRepr, BthRepr, DethRepr, FethRepr, Opcode, PacketRepr, Psn, QKey, RethRepr,
};

/// Requester state of a QP.
#[derive(Debug)]
pub(crate) struct Requester {
    /// PSN for the next work request that starts.
    pub next_psn: Psn,
    /// Index in the send queue of the request being sent; everything before
    /// it has been sent at least once.
    pub cur: usize,
    /// Next packet of `sq[cur]` (READ: the response index the request asks from).
    pub cur_pkt: u32,
    /// Highest PSN sent so far (to count retransmissions).
    pub max_sent: Option<Psn>,
    /// Transport retries left.
    pub retry_left: u8,
    /// RNR retries left (7 = forever).
    pub rnr_left: u8,
    /// Retransmission timer.
    pub retrans_deadline: Option<Instant>,
    /// Waiting after an RNR NAK until this time, then resend from `rnr_psn`.
    pub rnr_deadline: Option<Instant>,
    /// Where to resume after the RNR wait.
    pub rnr_psn: Psn,
    /// READ and atomic requests started and not completed.
    pub rd_atomic_outstanding: u32,
    /// Set when a go-back-N to this PSN is under way: later hints of the same
    /// loss do not rewind again.
    pub retrying_from: Option<Psn>,
    /// Packets allowed in flight: halved on every retry, grown by every
    /// acknowledged packet up to `MAX_INFLIGHT_PKTS`. Go-back-N resends the
    /// whole window after a loss; this keeps a lossy link from drowning in
    /// retransmissions. It changes nothing on the wire.
    pub cwnd: u32,
    /// The last `poll_request` had a packet ready but the device's
    /// in-flight budget was spent (the device parks the QP).
    pub budget_blocked: bool,
    /// Tail-loss probe: when no ACK came by then, the last packet sent
    /// goes again (see `Qp::tail_probe`).
    pub probe_deadline: Option<Instant>,
    /// The next packet sent asks for an ACK (it is a probe).
    pub probe_pending: bool,
    /// The oldest unacknowledged PSN when the last probe went, until an
    /// answer tells whether the probe was needed.
    pub probed: Option<Psn>,
    /// The probe timeout's floor for this QP: [`PROBE_MIN_NS`], doubled
    /// after each probe that proved spurious (its packet had been
    /// acknowledged meanwhile: a peer or a host that did not run, no
    /// loss), back to the minimum when a loss shows (a NAK after a probe,
    /// a transport timeout).
    ///
    /// [`PROBE_MIN_NS`]: crate::limits::PROBE_MIN_NS
    pub probe_floor_ns: u64,
    /// Smoothed round trip in ns (one timed packet at a time, never a
    /// retransmitted one: Karn's rule).
    pub srtt_ns: Option<u64>,
    /// Its mean deviation in ns.
    pub rttvar_ns: u64,
    /// The packet being timed and when it left.
    pub rtt_sample: Option<(Psn, Instant)>,
}

impl Default for Requester {
    fn default() -> Self {
        Requester {
            next_psn: Psn::ZERO,
            cur: 0,
            cur_pkt: 0,
            max_sent: None,
            retry_left: 0,
            rnr_left: 0,
            retrans_deadline: None,
            rnr_deadline: None,
            rnr_psn: Psn::ZERO,
            rd_atomic_outstanding: 0,
            retrying_from: None,
            cwnd: MAX_INFLIGHT_PKTS,
            budget_blocked: false,
            probe_deadline: None,
            probe_pending: false,
            probed: None,
            probe_floor_ns: crate::limits::PROBE_MIN_NS,
            srtt_ns: None,
            rttvar_ns: 0,
            rtt_sample: None,
        }
    }
}

impl Requester {
    pub fn reset_psn(&mut self, psn: Psn) {
        self.next_psn = psn;
        self.max_sent = None;
    }

    pub fn on_error(&mut self) {
        self.retrans_deadline = None;
        self.probe_deadline = None;
        self.probe_pending = false;
        self.probed = None;
        self.rtt_sample = None;
        self.rnr_deadline = None;
        self.rd_atomic_outstanding = 0;
        self.retrying_from = None;
    }

    /// Some started request has not completed.
    pub fn has_outstanding(&self, qp: &Qp) -> bool {
        qp.sq.iter().any(|w| w.started && w.done.is_none())
    }
}

/// Where a packet's payload comes from.
pub(crate) enum Payload<'a> {
    None,
    Bytes(&'a [u8]),
    Sgl(&'a SgList, u64, usize),
    Span(&'a Span, usize, usize),
}

impl Payload<'_> {
    fn len(&self) -> usize {
        match self {
            Payload::None => 0,
            Payload::Bytes(b) => b.len(),
            Payload::Sgl(_, _, n) | Payload::Span(_, _, n) => *n,
        }
    }
}

/// Payloads shorter than this are copied even when zero-copy is asked for:
/// below it, an extra iovec and a reference count cost more than the copy.
const GATHER_MIN: usize = 512;

/// Smallest transmit buffer: a 4096-byte payload with every header.
pub const MIN_TX_BUF: usize = 4096 + 128;

/// Writes one packet (BTH through ICRC) into `buf` and describes it.
/// `Ok(None)`: it cannot be built (buffer too small, addresses of two IP
/// versions); `Err(Revoked)`: its payload's region was deregistered.
pub(crate) fn build_packet(
    ctx: &Ctx,
    av: &AddressVector,
    mut repr: PacketRepr<'_>,
    payload: Payload<'_>,
    buf: &mut [u8],
) -> Result<Option<Transmit>, Revoked> {
    let plen = payload.len();
    repr.bth.pad_count = PacketRepr::pad_for(plen);
    repr.payload = &[];
    let hlen = repr.header_len();
    let total = hlen + plen + repr.bth.pad_count as usize + softrdma_wire::ICRC_LEN;
    if buf.len() < total || repr.emit_headers(buf).is_err() {
        return Ok(None);
    }
    let Ok(ip) = IpRepr::between(ctx.local_ip, av.dest, av.traffic_class) else {
        return Ok(None);
    };
    let d = DatagramRepr::new(ip, ctx.udp_src_port, av.dest_port);
    let pad = repr.bth.pad_count as usize;
    let tx = |gather| Transmit {
        dst: std::net::SocketAddr::new(av.dest, av.dest_port),
        len: total,
        traffic_class: av.traffic_class,
        hop_limit: av.hop_limit,
        gather,
    };
    // Zero-copy: the payload stays in registered memory; the buffer gets the
    // headers, then the pad and ICRC right after them.
    if ctx.gather && plen >= GATHER_MIN {
        let pieces = match &payload {
            Payload::Sgl(l, off, n) => l.pieces::<MAX_GATHER>(*off, *n),
            Payload::Span(sp, off, n) => {
                let mut p: [Option<Piece>; MAX_GATHER] = std::array::from_fn(|_| None);
                p[0] = Some(Piece {
                    region: sp.region.clone(),
                    offset: sp.offset + off,
                    len: *n,
                });
                Some(p)
            }
            _ => None,
        };
        if let Some(pieces) = pieces.filter(|p| p.iter().flatten().all(|x| x.address().is_some())) {
            buf[hlen..hlen + pad + softrdma_wire::ICRC_LEN].fill(0);
            let mut g = Gather {
                header_len: hlen,
                trailer_len: pad + softrdma_wire::ICRC_LEN,
                pieces,
                seq: ctx.next_gather_seq,
                icrc_left: Some(d),
            };
            if !ctx.icrc_left {
                g.fill_icrc(buf)?;
            }
            return Ok(Some(tx(Some(g))));
        }
    }
    let data = &mut buf[hlen..hlen + plen];
    match payload {
        Payload::None => {}
        Payload::Bytes(b) => data.copy_from_slice(b),
        Payload::Sgl(l, off, _) => l.read(off, data)?,
        Payload::Span(s, off, _) => s.region.read(s.offset + off, data)?,
    }
    let pad_end = total - softrdma_wire::ICRC_LEN;
    buf[hlen + plen..pad_end].fill(0);
    let icrc = d.icrc(&buf[..pad_end]);
    buf[pad_end..total].copy_from_slice(&icrc.to_le_bytes());
    Ok(Some(tx(None)))
}

/// BTH opcode of a request packet, from wire's opcode table; `None` for
/// an operation the transport does not have (post checks refuse those).
fn request_opcode(qp_type: QpType, op: WrOpcode, first: bool, last: bool) -> Option<Opcode> {
    use softrdma_wire::opcode::{Operation as O, Position, Transport as T};
    use WrOpcode::*;
    let transport = match qp_type {
        QpType::Rc => T::Rc,
        QpType::Uc => T::Uc,
        QpType::Ud => T::Ud,
        QpType::XrcSend | QpType::XrcRecv => T::Xrc,
    };
    let (operation, imm, inv) = match op {
        // LOCAL_INV and BIND_MW are local: never sent.
        Send | LocalInv | BindMw => (O::Send, false, false),
        SendWithImm => (O::Send, true, false),
        SendWithInv => (O::Send, false, true),
        RdmaWrite => (O::RdmaWrite, false, false),
        RdmaWriteWithImm => (O::RdmaWrite, true, false),
        RdmaRead => (O::ReadRequest, false, false),
        AtomicCmpAndSwp => (O::CompareSwap, false, false),
        AtomicFetchAndAdd => (O::FetchAdd, false, false),
        Flush => (O::Flush, false, false),
        AtomicWrite => (O::AtomicWrite, false, false),
    };
    let position = Position::of(first, last);
    // Immediate data and the invalidated R_Key ride on the last packet.
    let end = position.ends();
    Opcode::find(transport, operation, position, imm && end, inv && end)
}

impl Qp {
    /// Number of PSNs a request of `len` bytes occupies.
    fn packets_for(&self, w: &SendWqe, mtu: u32) -> u32 {
        if w.wr.opcode.is_atomic() {
            1
        } else {
            w.len.div_ceil(mtu).max(1)
        }
    }

    /// Starts `sq[idx]`: checks and resolves its local buffers, assigns PSNs.
    /// `Err` is the completion status of a local error.
    fn start_wqe(&mut self, idx: usize, ctx: &mut Ctx) -> Result<(), WcStatus> {
        let mtu = if self.qp_type == QpType::Ud {
            ctx.port_mtu
        } else {
            self.mtu()
        };
        let pd = self.pd;
        let w = &mut self.sq[idx];
        let inline = w.wr.flags.contains(SendFlags::INLINE);
        if !inline {
            // READ and atomics write their result into the local buffers.
            let need = if matches!(
                w.wr.opcode,
                WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
            ) {
                Access::LOCAL_WRITE
            } else {
                Access(0)
            };
            let sgl = ctx
                .mrs
                .resolve_local(pd, &w.wr.sg_list, need)
                .map_err(|_| WcStatus::LocProtErr)?;
            w.sgl = Some(sgl);
        }
        if w.wr.opcode.is_atomic() && w.len < 8 {
            return Err(WcStatus::LocLenErr);
        }
        if self.qp_type == QpType::Ud && w.len > mtu {
            return Err(WcStatus::LocLenErr);
        }
        let w = &self.sq[idx];
        let n = self.packets_for(w, mtu);
        let first = self.req.next_psn;
        let w = &mut self.sq[idx];
        w.npkts = n;
        w.first_psn = first;
        w.started = true;
        self.req.next_psn = first.add(n);
        if w.wr.opcode.uses_responder_resource() {
            self.req.rd_atomic_outstanding += 1;
        }
        Ok(())
    }

    /// Oldest PSN not yet acknowledged, if any request is outstanding.
    pub(crate) fn oldest_unacked(&self) -> Option<Psn> {
        self.sq
            .iter()
            .find(|w| w.started && w.done.is_none())
            .map(|w| w.first_psn.add(w.acked_pkts))
    }

    /// The next request packet, if the QP may send one now.
    pub(crate) fn poll_request(&mut self, ctx: &mut Ctx, buf: &mut [u8]) -> Option<Transmit> {
        let sending = match self.state {
            QpState::Rts => true,
            // SQD finishes the message in progress, starts nothing new.
            QpState::Sqd => {
                self.req.cur_pkt > 0 || self.sq.get(self.req.cur).is_some_and(|w| w.started)
            }
            _ => false,
        };
        if !sending || self.req.rnr_deadline.is_some() {
            return None;
        }
        // LOCAL_INV and failed requests send nothing: walk past them (bounded
        // by the queue length).
        loop {
            let idx = self.req.cur;
            let w = self.sq.get(idx)?;
            if w.started {
                break;
            }
            if self.state == QpState::Sqd {
                return None;
            }
            if w.wr.flags.contains(SendFlags::FENCE) && self.req.rd_atomic_outstanding > 0 {
                return None;
            }
            if w.wr.opcode.uses_responder_resource()
                && self.req.rd_atomic_outstanding >= self.attr.max_rd_atomic.max(1) as u32
            {
                return None;
            }
            if w.wr.opcode.is_local() {
                let status = self.local_op(idx, ctx);
                let w = &mut self.sq[idx];
                w.started = true;
                w.npkts = 0;
                w.done = Some(status);
                self.req.cur += 1;
                if status != WcStatus::Success {
                    self.enter_error(ctx);
                    return None;
                }
                self.complete_done(ctx);
                continue;
            }
            match self.start_wqe(idx, ctx) {
                Ok(()) => break,
                Err(status) => {
                    let w = &mut self.sq[idx];
                    w.started = true;
                    w.npkts = 0;
                    w.done = Some(status);
                    self.enter_error(ctx);
                    return None;
                }
            }
        }
        let idx = self.req.cur;
        let rc = self.qp_type.is_reliable();
        let w = &self.sq[idx];
        let psn = w.first_psn.add(self.req.cur_pkt);
        let oldest = if rc { self.oldest_unacked() } else { None };
        if let Some(old) = oldest {
            if psn.distance_from(old) >= self.req.cwnd && psn != old {
                return None;
            }
            // The device-wide budget holds back new packets only (a
            // retransmission is already counted); while QPs wait for it,
            // only those woken with a grant take more (`device::Budget`).
            let new = self.req.max_sent.is_none_or(|m| psn.after(m));
            if new
                && self.budgeted()
                && (ctx.budget_left == 0 || (ctx.budget_queue && !self.budget_woken))
            {
                self.req.budget_blocked = true;
                return None;
            }
        }
        let mtu = if self.qp_type == QpType::Ud {
            ctx.port_mtu
        } else {
            self.mtu()
        };
        // The packet that fills the window asks for an ACK, or the window
        // would only reopen on a timeout.
        // So does a probe, and the packet that spends the device's budget.
        let fills_window = oldest.is_some_and(|old| psn.distance_from(old) + 1 >= self.req.cwnd)
            || (rc && (self.req.probe_pending || ctx.budget_left <= 1));
        let tx = match self.build_request(idx, psn, mtu, fills_window, ctx, buf) {
            Ok(tx) => tx?,
            Err(Revoked) => {
                // The program deregistered the source buffer of a request
                // it had posted: nothing more is read from it, and the
                // request ends with a local protection error.
                self.sq[idx].done = Some(WcStatus::LocProtErr);
                self.enter_error(ctx);
                return None;
            }
        };
        if let Some(g) = &tx.gather {
            self.sq[idx].gather_seq = g.seq;
        }
        // Advance.
        if self.sq[idx].wr.opcode == WrOpcode::RdmaRead {
            self.sq[idx].resp_start = self.req.cur_pkt;
        }
        let w = &self.sq[idx];
        let is_read = w.wr.opcode == WrOpcode::RdmaRead;
        let last_sent_psn = if is_read { w.last_psn() } else { psn };
        let finished = is_read || self.req.cur_pkt + 1 >= w.npkts;
        if finished {
            self.req.cur += 1;
            self.req.cur_pkt = 0;
            if !rc {
                // UC and UD requests complete once sent.
                self.sq[idx].done = Some(WcStatus::Success);
                self.complete_done(ctx);
            }
        } else {
            self.req.cur_pkt += 1;
        }
        let retransmit = self.req.max_sent.is_some_and(|m| !last_sent_psn.after(m));
        match self.req.max_sent {
            Some(m) if !last_sent_psn.after(m) => {
                self.counters.retransmits += 1;
                // Karn: an ACK after a retransmission times nothing.
                self.req.rtt_sample = None;
            }
            _ => {
                self.req.max_sent = Some(last_sent_psn);
                if rc && self.req.rtt_sample.is_none() {
                    self.req.rtt_sample = Some((last_sent_psn, ctx.now));
                }
            }
        }
        self.req.probe_pending = false;
        if rc && self.req.retrans_deadline.is_none() {
            if let Some(t) = crate::limits::ack_timeout_ns(self.attr.timeout) {
                self.req.retrans_deadline = Some(ctx.now.add_ns(t));
            }
        }
        // The probe timer runs from new packets and ACKs only: after a
        // probe, the next recovery is the transport timer's.
        if rc && ctx.tail_probe && self.req.probe_deadline.is_none() && !retransmit {
            self.req.probe_deadline = self.probe_timeout_ns().map(|t| ctx.now.add_ns(t));
        }
        self.counters.tx_packets += 1;
        self.counters.tx_bytes += tx.len as u64;
        Some(tx)
    }

    /// Executes a local work request (LOCAL_INV, BIND_MW) when the
    /// requester reaches it, in posting order, and returns its status:
    /// a failed LOCAL_INV is `LocQpOpErr` and a failed bind `MwBindErr`,
    /// as rxe's `rxe_do_local_ops` reports them.
    fn local_op(&mut self, idx: usize, ctx: &mut Ctx) -> WcStatus {
        let wr = &self.sq[idx].wr;
        match wr.opcode {
            WrOpcode::LocalInv => {
                match ctx
                    .mrs
                    .invalidate(wr.invalidate_rkey.0, self.pd, self.qpn, false)
                {
                    Ok(()) => WcStatus::Success,
                    Err(_) => WcStatus::LocQpOpErr,
                }
            }
            WrOpcode::BindMw => {
                let Some(b) = wr.bind else {
                    return WcStatus::MwBindErr;
                };
                match ctx.mrs.bind_mw(self.pd, self.qpn, &b) {
                    Ok(_) => WcStatus::Success,
                    Err(_) => WcStatus::MwBindErr,
                }
            }
            _ => WcStatus::LocQpOpErr,
        }
    }

    fn build_request(
        &self,
        idx: usize,
        psn: Psn,
        mtu: u32,
        fills_window: bool,
        ctx: &Ctx,
        buf: &mut [u8],
    ) -> Result<Option<Transmit>, Revoked> {
        let w = &self.sq[idx];
        let k = self.req.cur_pkt;
        let op = w.wr.opcode;
        let is_read = op == WrOpcode::RdmaRead;
        let first = k == 0 || is_read;
        let last = is_read || k + 1 >= w.npkts;
        let offset = k as u64 * mtu as u64;
        // Each packet of a chunked WRITE is a WRITE ONLY of its own.
        let chunked = w.npkts > 1 && op == WrOpcode::RdmaWrite && self.chunk_writes(ctx);
        let Some(opcode) = request_opcode(self.qp_type, op, first || chunked, last || chunked)
        else {
            return Ok(None);
        };
        // rxe sets SE on the last packet of a SEND or WRITE with immediate
        // only (init_req_packet); the flag means nothing to other requests.
        let se_op = matches!(
            op,
            WrOpcode::Send
                | WrOpcode::SendWithImm
                | WrOpcode::SendWithInv
                | WrOpcode::RdmaWriteWithImm
        );
        let mut bth = BthRepr {
            solicited: last && se_op && w.wr.flags.contains(SendFlags::SOLICITED),
            ..self.bth(opcode, psn)
        };
        if self.qp_type.is_reliable() {
            bth.ack_req = last || fills_window || (k + 1).is_multiple_of(ACK_REQ_EVERY_PKTS);
        }
        let mut repr = PacketRepr::new(bth, &[]);
        if self.qp_type == QpType::XrcSend {
            // IBA 9.3.7: every XRC request names the XRC SRQ at the target.
            repr.xrceth = Some(w.wr.remote_srqn & 0x00ff_ffff);
        }
        let mut av = self.attr.ah_attr;
        let payload_len = if is_read || op.is_atomic() || op == WrOpcode::Flush {
            0
        } else {
            (w.len as u64 - offset.min(w.len as u64)).min(mtu as u64) as usize
        };
        match op {
            WrOpcode::RdmaRead => {
                repr.reth = Some(RethRepr {
                    va: w.wr.remote_addr.wrapping_add(offset),
                    rkey: w.wr.rkey,
                    dma_len: w.len.saturating_sub(offset as u32),
                });
            }
            WrOpcode::AtomicCmpAndSwp => {
                repr.atomic_eth = Some(AtomicEthRepr {
                    va: w.wr.remote_addr,
                    rkey: w.wr.rkey,
                    swap_add: w.wr.swap,
                    compare: w.wr.compare_add,
                });
            }
            WrOpcode::AtomicFetchAndAdd => {
                repr.atomic_eth = Some(AtomicEthRepr {
                    va: w.wr.remote_addr,
                    rkey: w.wr.rkey,
                    swap_add: w.wr.compare_add,
                    compare: 0,
                });
            }
            // rxe's init_req_packet: FETH, then the RETH with the flush's
            // R_Key, address and length.
            WrOpcode::Flush => {
                repr.feth = Some(FethRepr {
                    placement_type: w.wr.flush.placement_type,
                    selectivity_level: w.wr.flush.level,
                });
                repr.reth = Some(RethRepr {
                    va: w.wr.remote_addr,
                    rkey: w.wr.rkey,
                    dma_len: w.wr.flush_len as u32,
                });
            }
            WrOpcode::AtomicWrite => {
                repr.reth = Some(RethRepr {
                    va: w.wr.remote_addr,
                    rkey: w.wr.rkey,
                    dma_len: 8,
                });
            }
            WrOpcode::RdmaWrite if chunked => {
                repr.reth = Some(RethRepr {
                    va: w.wr.remote_addr.wrapping_add(offset),
                    rkey: w.wr.rkey,
                    dma_len: payload_len as u32,
                });
            }
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm if first => {
                repr.reth = Some(RethRepr {
                    va: w.wr.remote_addr,
                    rkey: w.wr.rkey,
                    dma_len: w.len,
                });
            }
            _ => {}
        }
        if last {
            match op {
                WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm => {
                    repr.imm = Some(w.wr.imm_data)
                }
                WrOpcode::SendWithInv => repr.ieth = Some(w.wr.invalidate_rkey),
                _ => {}
            }
        }
        if self.qp_type == QpType::Ud {
            let Some(ud) = w.wr.ud else { return Ok(None) };
            let Some(ah) = ctx.ahs.get(ud.ah.0) else {
                return Ok(None);
            };
            av = *ah;
            repr.bth.dest_qp = ud.remote_qpn;
            let qkey = if ud.remote_qkey.0 & 0x8000_0000 != 0 {
                self.attr.qkey
            } else {
                ud.remote_qkey
            };
            repr.deth = Some(DethRepr {
                qkey: QKey(qkey.0),
                src_qp: self.qpn,
            });
        }
        let payload = if payload_len == 0 {
            Payload::None
        } else if w.wr.flags.contains(SendFlags::INLINE) {
            let o = offset as usize;
            Payload::Bytes(&w.wr.inline_data[o..o + payload_len])
        } else {
            let Some(sgl) = w.sgl.as_ref() else {
                return Ok(None);
            };
            Payload::Sgl(sgl, offset, payload_len)
        };
        build_packet(ctx, &av, repr, payload, buf)
    }

    /// Whether this QP sends a multi-packet RDMA WRITE (without immediate)
    /// as one WRITE ONLY per packet, each with its own RETH
    /// ([`WriteChunking`](crate::device::WriteChunking)). Only RC: the
    /// responder places the bytes exactly as it would for FIRST … LAST
    /// (a UC responder would keep the packets of a message that lost one,
    /// and WRITE with immediate reports its whole length in one message).
    fn chunk_writes(&self, ctx: &Ctx) -> bool {
        use crate::device::WriteChunking;
        self.qp_type == QpType::Rc
            && match ctx.write_chunking {
                WriteChunking::Never => false,
                WriteChunking::LoopbackPeers => self.attr.ah_attr.dest.is_loopback(),
                WriteChunking::Always => true,
            }
    }

    /// How long the requester waits for an acknowledgement before it
    /// probes for a lost tail: the smoothed round trip plus the larger of
    /// itself and four mean deviations (RFC 6298's spread), at least
    /// the QP's floor (`probe_floor_ns`: [`PROBE_MIN_NS`], more after
    /// spurious probes). `None` without a transport timer, or when the
    /// timer itself comes nearly as soon (within 4 probe timeouts).
    ///
    /// [`PROBE_MIN_NS`]: crate::limits::PROBE_MIN_NS
    pub(crate) fn probe_timeout_ns(&self) -> Option<u64> {
        use crate::limits::PROBE_INIT_NS;
        let rto = crate::limits::ack_timeout_ns(self.attr.timeout)?;
        let floor = self.req.probe_floor_ns;
        let pto = self.req.srtt_ns.map_or(PROBE_INIT_NS.max(floor), |s| {
            s.saturating_add(s.max(self.req.rttvar_ns.saturating_mul(4)))
                .max(floor)
        });
        (pto <= rto / 4).then_some(pto)
    }

    /// The tail-loss probe is due: no ACK came for a few round trips
    /// while packets are in flight. When the last packets of a burst are
    /// lost, nothing reaches the responder that would make it NAK, and
    /// only the transport timer (67 ms at perftest's `timeout` 14) would
    /// recover. Instead the last packet sent goes again, asking for an
    /// ACK (IBA 9.7.4.1: a requester may resend any unacknowledged
    /// packet): a responder that has everything ACKs it as a duplicate
    /// (IBA 9.7.5.1.2), one that misses earlier packets answers with a PSN
    /// sequence error NAK (9.7.5.1.1) and the requester goes back to the
    /// hole. It costs one packet, and no retry: a silent peer still meets
    /// the timer and `retry_cnt`.
    pub(crate) fn tail_probe(&mut self) {
        if self.req.rnr_deadline.is_some() || !matches!(self.state, QpState::Rts | QpState::Sqd) {
            return;
        }
        let Some(max) = self.req.max_sent else { return };
        if self.oldest_unacked().is_none_or(|o| o.after(max)) {
            return;
        }
        // Already going back (a NAK or the timer): nothing to probe.
        let next = self
            .sq
            .get(self.req.cur)
            .filter(|w| w.started)
            .map(|w| w.first_psn.add(self.req.cur_pkt));
        if next.is_some_and(|p| !p.after(max)) {
            return;
        }
        // READs and atomics are answered by their responses; their
        // losses show as gaps there.
        let Some(w) = self.sq.iter().find(|w| w.contains(max) && w.done.is_none()) else {
            return;
        };
        if w.has_response() {
            return;
        }
        self.counters.tail_probes += 1;
        self.req.probe_pending = true;
        // An ACK for the oldest packet unacknowledged now that comes
        // after the probe's own answer was only late (the earliest probe
        // not yet judged: a late ACK may come after later probes).
        if self.req.probed.is_none() {
            self.req.probed = self.oldest_unacked();
        }
        // The probe is no go-back-N retry: `retrying_from` stays as it
        // was. Marked, a PSN sequence error NAK that names the probed
        // packet (it and its probe lost, a later packet arrived) would
        // look like one already answered, and only the transport timer
        // would recover.
        let retrying = self.req.retrying_from;
        self.rewind_to(max);
        self.req.retrying_from = retrying;
    }

    /// The answer to a probe: `spurious` when it acknowledged nothing new
    /// (the probed packet had been acknowledged meanwhile: nothing was
    /// lost, the ACK was only late), and the QP waits longer before its
    /// next probe; a loss (a NAK, a timeout) brings the floor back.
    pub(crate) fn probe_verdict(&mut self, spurious: bool) {
        use crate::limits::{PROBE_FLOOR_MAX_NS, PROBE_MIN_NS};
        self.req.probed = None;
        self.req.probe_floor_ns = if spurious {
            self.req
                .probe_floor_ns
                .saturating_mul(2)
                .min(PROBE_FLOOR_MAX_NS)
        } else {
            PROBE_MIN_NS
        };
    }

    /// Go-back-N: the next packet sent is the one with `psn`.
    pub(crate) fn rewind_to(&mut self, psn: Psn) {
        if let Some(i) = self
            .sq
            .iter()
            .position(|w| w.contains(psn) && w.done.is_none())
        {
            let w = &self.sq[i];
            self.req.cur = i;
            self.req.cur_pkt = psn.distance_from(w.first_psn);
            self.req.retrying_from = Some(psn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_opcodes_match_the_table() {
        use WrOpcode::*;
        let cases = [
            (QpType::Rc, Send, true, true, 0x04),
            (QpType::Rc, Send, true, false, 0x00),
            (QpType::Rc, Send, false, false, 0x01),
            (QpType::Rc, SendWithImm, false, true, 0x03),
            (QpType::Rc, SendWithInv, true, true, 0x17),
            (QpType::Rc, SendWithInv, false, true, 0x16),
            (QpType::Rc, RdmaWriteWithImm, true, true, 0x0b),
            (QpType::Rc, RdmaWrite, true, false, 0x06),
            (QpType::Uc, RdmaWriteWithImm, false, true, 0x29),
            (QpType::Uc, Send, true, true, 0x24),
            (QpType::Ud, SendWithImm, true, true, 0x65),
            (QpType::Rc, RdmaRead, true, true, 0x0c),
            (QpType::Rc, AtomicFetchAndAdd, true, true, 0x14),
            (QpType::Rc, Flush, true, true, 0x1c),
            (QpType::Rc, AtomicWrite, true, true, 0x1d),
            (QpType::XrcSend, Send, true, true, 0xa4),
            (QpType::XrcSend, Send, false, false, 0xa1),
            (QpType::XrcSend, SendWithImm, false, true, 0xa3),
            (QpType::XrcSend, SendWithInv, true, true, 0xb7),
            (QpType::XrcSend, RdmaWrite, true, false, 0xa6),
            (QpType::XrcSend, RdmaWriteWithImm, true, true, 0xab),
            (QpType::XrcSend, RdmaRead, true, true, 0xac),
            (QpType::XrcSend, AtomicCmpAndSwp, true, true, 0xb3),
            (QpType::XrcSend, AtomicFetchAndAdd, true, true, 0xb4),
        ];
        for (t, op, f, l, want) in cases {
            let o = request_opcode(t, op, f, l).unwrap();
            assert_eq!(o, Opcode(want), "{t:?} {op:?} {f} {l}");
            assert!(o.info().is_some_and(|i| i.is_request()));
        }
    }
}
