//! Queue pairs: state, attributes and the modify-QP state machine.
//!
//! The transport is split the way IBA ch. 9 and rxe split it:
//! - [`req`]: the requester turns send work requests into packets;
//! - [`comp`]: the completer consumes ACKs, NAKs and responses, retries and
//!   completes send work requests;
//! - [`resp`]: the responder checks and executes incoming requests and
//!   queues ACKs, NAKs and read/atomic responses.

pub(crate) mod comp;
mod dup;
mod pin;
pub(crate) mod req;
pub(crate) mod resp;
mod ud;
mod xrc;

use crate::counters::Counters;
use crate::cq::{Cq, Pushed};
use crate::memory::{MrTable, SgList};
use crate::verbs::*;
use crate::{Instant, Slab};
use softrdma_wire::ext::{FLUSH_GLOBAL, FLUSH_MR, FLUSH_PERSISTENT};
use softrdma_wire::{BthRepr, Opcode, PKey, Psn, Qpn};
use std::collections::VecDeque;

/// A send work request in the send queue.
#[derive(Debug)]
pub(crate) struct SendWqe {
    pub wr: SendWr,
    /// Resolved local buffers (when the requester started the request).
    pub sgl: Option<SgList>,
    /// Message length.
    pub len: u32,
    /// First PSN (valid once `started`).
    pub first_psn: Psn,
    /// PSNs the request occupies (READ: one per response packet), ≥ 1.
    pub npkts: u32,
    /// PSNs were assigned and at least the first packet was (or is being) sent.
    pub started: bool,
    /// Packets acknowledged (SEND/WRITE) or responses received (READ).
    pub acked_pkts: u32,
    /// READ: response index at which the latest copy of the request starts
    /// (its first response is FIRST or ONLY).
    pub resp_start: u32,
    /// READ: responses received past `acked_pkts` (bit per response index;
    /// allocated on the first out-of-order one).
    pub rx_map: Vec<u64>,
    /// READ: out-of-order responses since the last request for the hole.
    pub ooo: u32,
    /// The outcome, once known; the completion is delivered in order.
    pub done: Option<WcStatus>,
    /// Gather sequence number of the last datagram that left payload of
    /// this request in the program's memory (0: none); the completion
    /// waits until the driver released it.
    pub gather_seq: u64,
    /// Generate a completion on success.
    pub signaled: bool,
}

impl SendWqe {
    pub fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts - 1)
    }
    pub fn contains(&self, psn: Psn) -> bool {
        self.started && psn.distance_from(self.first_psn) < self.npkts
    }
    /// Counts against `max_rd_atomic` (see [`WrOpcode::uses_responder_resource`]).
    pub fn uses_responder_resource(&self) -> bool {
        self.wr.opcode.uses_responder_resource()
    }
    /// Completed by a response packet, not by an ACK (READ, atomics,
    /// ATOMIC WRITE, FLUSH).
    pub fn has_response(&self) -> bool {
        self.wr.opcode.has_response()
    }
    /// Response `idx` of a READ already arrived (out of order).
    pub fn rx_has(&self, idx: u32) -> bool {
        self.rx_map
            .get(idx as usize / 64)
            .is_some_and(|w| w >> (idx % 64) & 1 != 0)
    }
    /// Records response `idx` of a READ.
    pub fn rx_set(&mut self, idx: u32) {
        let words = (self.npkts as usize).div_ceil(64);
        if self.rx_map.len() < words {
            self.rx_map.resize(words, 0);
        }
        self.rx_map[idx as usize / 64] |= 1 << (idx % 64);
    }
}

/// A receive work request (in the QP's receive queue or an SRQ).
#[derive(Debug, Clone)]
pub(crate) struct RecvWqe {
    pub wr: RecvWr,
}

/// What makes a shared receive queue an XRC SRQ (`IBV_SRQT_XRC`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct XrcSrq {
    /// Its XRC domain: TGT QPs of this domain deliver to it.
    pub xrcd: XrcdId,
    /// The CQ its receive completions go to.
    pub cq: CqId,
    /// Its number (`ibv_get_srq_num`), what XRCETHs name.
    pub srqn: u32,
}

/// A shared receive queue.
#[derive(Debug)]
pub(crate) struct Srq {
    /// XRC SRQs: domain, CQ, number.
    pub xrc: Option<XrcSrq>,
    pub pd: PdId,
    pub queue: VecDeque<RecvWqe>,
    pub max_wr: u32,
    pub max_sge: u32,
    /// Armed limit (0 = not armed).
    pub limit: u32,
    pub users: u32,
}

/// Everything outside the QP that the transport touches.
pub(crate) struct Ctx<'a> {
    pub now: Instant,
    pub mrs: &'a mut MrTable,
    pub cqs: &'a mut Slab<Cq>,
    pub srqs: &'a mut Slab<Srq>,
    /// XRC SRQ numbers to SRQ slots.
    pub xrc_srqns: &'a crate::U32Map<u32>,
    pub ahs: &'a Slab<AddressVector>,
    pub events: &'a mut VecDeque<crate::device::Event>,
    pub local_ip: std::net::IpAddr,
    pub udp_src_port: u16,
    /// Active MTU of the port (UD messages).
    pub port_mtu: u32,
    /// Leave payloads in registered memory (zero-copy transmission).
    pub gather: bool,
    /// With `gather`: leave the ICRC of such packets to the driver
    /// (`Gather::icrc_left`).
    pub icrc_left: bool,
    /// How multi-packet RC WRITEs go on the wire.
    pub write_chunking: crate::device::WriteChunking,
    /// The sequence number the next zero-copy datagram gets.
    pub next_gather_seq: u64,
    /// Gather sequence numbers the driver has released.
    pub released: u64,
    /// Completions gated in all CQs (see `Cq::push_gated`).
    pub gated: &'a mut usize,
    /// RC packets the device's in-flight budget still allows.
    pub budget_left: u32,
    /// QPs wait for the budget: only one woken from that queue may take
    /// more.
    pub budget_queue: bool,
    /// Tail-loss probes are on (`DeviceConfig::tail_probe`).
    pub tail_probe: bool,
}

impl Ctx<'_> {
    /// Delivers a completion. Returns false on a CQ overrun (the QP must go
    /// to the error state).
    pub fn complete(&mut self, cq: CqId, wc: Wc) -> bool {
        self.complete_after(cq, wc, 0)
    }
    /// Delivers a completion once gather sequence number `after` is
    /// released (see `Cq::push_gated`).
    pub fn complete_after(&mut self, cq: CqId, wc: Wc, after: u64) -> bool {
        let released = self.released;
        let Some(c) = self.cqs.get_mut(cq.0) else {
            return false;
        };
        if after > released {
            *self.gated += 1;
        }
        match c.push_gated(wc, after, released, self.now) {
            Pushed::Ok => true,
            Pushed::Notified => {
                self.events.push_back(crate::device::Event::Completion(cq));
                true
            }
            Pushed::Overrun => {
                self.events
                    .push_back(crate::device::Event::Async(AsyncEvent::CqErr(cq)));
                false
            }
        }
    }
    pub fn event(&mut self, e: AsyncEvent) {
        self.events.push_back(crate::device::Event::Async(e));
    }
}

/// A queue pair.
#[derive(Debug)]
pub(crate) struct Qp {
    pub qpn: Qpn,
    pub qp_type: QpType,
    pub state: QpState,
    pub pd: PdId,
    pub send_cq: CqId,
    pub recv_cq: CqId,
    pub srq: Option<SrqId>,
    pub cap: QpCap,
    pub sq_sig_all: bool,
    pub attr: QpAttr,
    pub sq: VecDeque<SendWqe>,
    pub rq: VecDeque<RecvWqe>,
    pub req: req::Requester,
    pub resp: resp::Responder,
    pub counters: Counters,
    /// In the device's transmit round-robin.
    pub tx_queued: bool,
    /// The last packet this QP sent was a request (for the order in which
    /// requests and responses share the link: see `Device::poll_transmit`).
    pub last_tx_request: bool,
    /// SQD entered with notification requested and not yet sent.
    pub sqd_notify: bool,
    /// The deadline the device's timer set holds for this QP.
    pub armed: Option<Instant>,
    /// Its packets in flight as the device's budget counts them.
    pub budget_counted: u32,
    /// In the device's queue of QPs waiting for the in-flight budget.
    pub budget_parked: bool,
    /// Woken from that queue with a grant it has not used up.
    pub budget_woken: bool,
    /// The gather sequence number the last send completion waited for:
    /// later ones wait at least as long, so they stay in order.
    pub comp_floor: u64,
    /// The UDP port the peer sends from, once known (RC/UC; see `pin`).
    pub peer_port: Option<u16>,
    /// The XRC domain of an XRC TGT QP. Such a QP has no PD, CQ or SRQ of
    /// its own: while it handles a request, `pd`, `recv_cq` and `srq` are
    /// those of the XRC SRQ the request's XRCETH names (see `xrc`).
    pub xrcd: Option<XrcdId>,
}

/// Attribute masks allowed per transition (IBA table 91 / the kernel's
/// `qp_state_table` in drivers/infiniband/core/verbs.c, which
/// `ib_modify_qp_is_ok` checks), per transport: RC, UC, UD, XRC INI, XRC
/// TGT.
struct Transition {
    required: [u32; 5],
    optional: [u32; 5],
}

const fn ti(x: QpType) -> usize {
    match x {
        QpType::Rc => 0,
        QpType::Uc => 1,
        QpType::Ud => 2,
        QpType::XrcSend => 3,
        QpType::XrcRecv => 4,
    }
}

/// The attributes (mask bits) required for a transition, by QP type.
pub(crate) fn required_mask(t: QpType, from: QpState, to: QpState) -> Option<u32> {
    transition(from, to).map(|tr| tr.required[ti(t)])
}

/// Attributes libibverbs programs pass that an XRC QP has no use for: the
/// kernel's uverbs drops them before checking the mask
/// (`modify_qp_mask`: XRC INI has no responder, XRC TGT no requester),
/// and so does softrdma.
pub(crate) const fn ignored_mask(t: QpType) -> u32 {
    match t {
        QpType::XrcSend => AttrMask::MAX_DEST_RD_ATOMIC.0 | AttrMask::MIN_RNR_TIMER.0,
        QpType::XrcRecv => {
            AttrMask::MAX_QP_RD_ATOMIC.0 | AttrMask::RETRY_CNT.0 | AttrMask::RNR_RETRY.0
        }
        _ => 0,
    }
}

fn transition(from: QpState, to: QpState) -> Option<Transition> {
    use QpState::*;
    const PKEY: u32 = AttrMask::PKEY_INDEX.0;
    const PORT: u32 = AttrMask::PORT.0;
    const QKEY: u32 = AttrMask::QKEY.0;
    const ACC: u32 = AttrMask::ACCESS_FLAGS.0;
    const AV: u32 = AttrMask::AV.0;
    const MTU: u32 = AttrMask::PATH_MTU.0;
    const DQPN: u32 = AttrMask::DEST_QPN.0;
    const RQPSN: u32 = AttrMask::RQ_PSN.0;
    const SQPSN: u32 = AttrMask::SQ_PSN.0;
    const MDRA: u32 = AttrMask::MAX_DEST_RD_ATOMIC.0;
    const MRA: u32 = AttrMask::MAX_QP_RD_ATOMIC.0;
    const RNRT: u32 = AttrMask::MIN_RNR_TIMER.0;
    const TMO: u32 = AttrMask::TIMEOUT.0;
    const RETRY: u32 = AttrMask::RETRY_CNT.0;
    const RNR: u32 = AttrMask::RNR_RETRY.0;
    const ALT: u32 = AttrMask::ALT_PATH.0;
    const CUR: u32 = AttrMask::CUR_STATE.0;
    const MIG: u32 = AttrMask::PATH_MIG_STATE.0;
    const SQD_N: u32 = AttrMask::EN_SQD_ASYNC_NOTIFY.0;
    let t = |required: [u32; 5], optional: [u32; 5]| Some(Transition { required, optional });
    // RC, UC, UD, XRC INI, XRC TGT.
    const CONN: u32 = PKEY | PORT | ACC;
    match (from, to) {
        (_, Reset) | (_, Err) => t([0; 5], [0; 5]),
        (Reset, Init) => t([CONN, CONN, PKEY | PORT | QKEY, CONN, CONN], [0; 5]),
        (Init, Init) => t([0; 5], [CONN, CONN, PKEY | PORT | QKEY, CONN, CONN]),
        (Init, Rtr) => t(
            [
                AV | MTU | DQPN | RQPSN | MDRA | RNRT,
                AV | MTU | DQPN | RQPSN,
                0,
                AV | MTU | DQPN | RQPSN,
                AV | MTU | DQPN | RQPSN | MDRA | RNRT,
            ],
            [
                ALT | ACC | PKEY,
                ALT | ACC | PKEY,
                PKEY | QKEY,
                ALT | ACC | PKEY,
                ALT | ACC | PKEY,
            ],
        ),
        (Rtr, Rts) => t(
            [
                TMO | RETRY | RNR | SQPSN | MRA,
                SQPSN,
                SQPSN,
                TMO | RETRY | RNR | SQPSN | MRA,
                TMO | SQPSN,
            ],
            [
                CUR | ALT | ACC | RNRT | MIG,
                CUR | ALT | ACC | MIG,
                CUR | QKEY,
                CUR | ALT | ACC | MIG,
                CUR | ALT | ACC | RNRT | MIG,
            ],
        ),
        (Rts, Rts) => t(
            [0; 5],
            [
                CUR | ACC | ALT | MIG | RNRT,
                CUR | ACC | ALT | MIG,
                CUR | QKEY,
                CUR | ACC | ALT | MIG,
                CUR | ACC | ALT | MIG | RNRT,
            ],
        ),
        (Rts, Sqd) => t([0; 5], [SQD_N; 5]),
        (Sqd, Rts) => t(
            [0; 5],
            [
                CUR | ALT | ACC | RNRT | MIG,
                CUR | ALT | ACC | MIG,
                CUR | QKEY,
                CUR | ALT | ACC | MIG,
                CUR | ALT | ACC | RNRT | MIG,
            ],
        ),
        (Sqd, Sqd) => t(
            [0; 5],
            [
                PORT | AV | TMO | RETRY | RNR | MRA | MDRA | ALT | ACC | PKEY | RNRT | MIG,
                AV | ALT | ACC | PKEY | MIG,
                PKEY | QKEY,
                PORT | AV | TMO | RETRY | RNR | MRA | ALT | ACC | PKEY | MIG,
                PORT | AV | TMO | MDRA | ALT | ACC | PKEY | RNRT | MIG,
            ],
        ),
        // The kernel's table has SQE only for UD (and UC); softrdma keeps
        // the RC entry it always had.
        (Sqe, Rts) => t([0; 5], [CUR | ACC, CUR | ACC, CUR | QKEY, 0, 0]),
        _ => None,
    }
}

impl Qp {
    pub fn new(qpn: Qpn, init: &QpInit) -> Qp {
        Qp {
            qpn,
            qp_type: init.qp_type,
            state: QpState::Reset,
            pd: init.pd,
            send_cq: init.send_cq,
            recv_cq: init.recv_cq,
            srq: init.srq,
            cap: init.cap,
            sq_sig_all: init.sq_sig_all,
            attr: QpAttr::default(),
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            req: req::Requester::default(),
            resp: resp::Responder::default(),
            counters: Counters::default(),
            tx_queued: false,
            last_tx_request: false,
            sqd_notify: false,
            armed: None,
            budget_counted: 0,
            budget_parked: false,
            budget_woken: false,
            comp_floor: 0,
            peer_port: None,
            xrcd: None,
        }
    }

    pub fn pkey(&self) -> PKey {
        DEFAULT_PKEY
    }

    /// A BTH of this QP's: `opcode` at `psn` to the destination QP, with
    /// this QP's partition key (the other fields as [`BthRepr::new`]).
    pub fn bth(&self, opcode: Opcode, psn: Psn) -> BthRepr {
        BthRepr {
            pkey: self.pkey(),
            ..BthRepr::new(opcode, self.attr.dest_qp_num, psn)
        }
    }

    pub fn mtu(&self) -> u32 {
        self.attr.path_mtu.bytes()
    }

    /// `ibv_modify_qp`: validates the mask for the transition and the values,
    /// then applies them. Returns whether the QP may have packets to send.
    pub fn modify(&mut self, attr: &QpAttr, mask: AttrMask, ctx: &mut Ctx) -> VerbsResult<()> {
        let cur = self.state;
        if mask.contains(AttrMask::CUR_STATE) && attr.cur_qp_state != cur {
            return Err(VerbsError::InvalidArgument("cur_qp_state does not match"));
        }
        let to = if mask.contains(AttrMask::STATE) {
            attr.qp_state
        } else {
            cur
        };
        let tr = transition(cur, to).ok_or(VerbsError::InvalidArgument("invalid transition"))?;
        let t = ti(self.qp_type);
        let allowed = tr.required[t] | tr.optional[t] | AttrMask::STATE.0;
        let mask = AttrMask(mask.0 & !ignored_mask(self.qp_type));
        let given = mask.0;
        if given & tr.required[t] != tr.required[t] {
            return Err(VerbsError::InvalidArgument("required attribute missing"));
        }
        if given & !allowed != 0 {
            return Err(VerbsError::InvalidArgument(
                "attribute not allowed in this transition",
            ));
        }
        // Values.
        if mask.contains(AttrMask::PKEY_INDEX) && attr.pkey_index >= crate::limits::PKEY_TABLE_LEN {
            return Err(VerbsError::InvalidArgument("pkey_index out of range"));
        }
        if mask.contains(AttrMask::PORT) && attr.port_num != 1 {
            return Err(VerbsError::InvalidArgument("port_num must be 1"));
        }
        if mask.contains(AttrMask::TIMEOUT) && attr.timeout > 31 {
            return Err(VerbsError::InvalidArgument("timeout > 31"));
        }
        if mask.contains(AttrMask::RETRY_CNT) && attr.retry_cnt > 7 {
            return Err(VerbsError::InvalidArgument("retry_cnt > 7"));
        }
        if mask.contains(AttrMask::RNR_RETRY) && attr.rnr_retry > 7 {
            return Err(VerbsError::InvalidArgument("rnr_retry > 7"));
        }
        if mask.contains(AttrMask::MIN_RNR_TIMER) && attr.min_rnr_timer > 31 {
            return Err(VerbsError::InvalidArgument("min_rnr_timer > 31"));
        }
        if mask.contains(AttrMask::MAX_QP_RD_ATOMIC)
            && attr.max_rd_atomic > crate::limits::MAX_RD_ATOMIC
        {
            return Err(VerbsError::InvalidArgument("max_rd_atomic too large"));
        }
        if mask.contains(AttrMask::MAX_DEST_RD_ATOMIC)
            && attr.max_dest_rd_atomic > crate::limits::MAX_RD_ATOMIC
        {
            return Err(VerbsError::InvalidArgument("max_dest_rd_atomic too large"));
        }
        if mask.contains(AttrMask::ACCESS_FLAGS)
            && attr.qp_access_flags.0 & !Access::QP_ACCEPTED != 0
        {
            return Err(VerbsError::InvalidArgument("unsupported access flag"));
        }
        if mask.contains(AttrMask::AV) {
            let same_family = attr.ah_attr.dest.is_ipv4() == ctx.local_ip.is_ipv4();
            if !same_family || attr.ah_attr.dest.is_unspecified() {
                return Err(VerbsError::InvalidArgument(
                    "destination address family differs from the device's",
                ));
            }
            if attr.ah_attr.sgid_index != 0 {
                return Err(VerbsError::InvalidArgument("sgid_index out of range"));
            }
        }
        if mask.contains(AttrMask::DEST_QPN)
            && attr.dest_qp_num.value() == 0
            && self.qp_type != QpType::Ud
        {
            // QP 0 is the SMI: not a valid peer on RoCE.
            return Err(VerbsError::InvalidArgument("dest_qp_num 0"));
        }

        // Apply.
        let a = &mut self.attr;
        macro_rules! set {
            ($m:expr, $f:ident) => {
                if mask.contains($m) {
                    a.$f = attr.$f;
                }
            };
        }
        set!(AttrMask::PKEY_INDEX, pkey_index);
        set!(AttrMask::PORT, port_num);
        set!(AttrMask::QKEY, qkey);
        set!(AttrMask::ACCESS_FLAGS, qp_access_flags);
        if mask.contains(AttrMask::AV) && attr.ah_attr.dest != a.ah_attr.dest {
            // Another peer: its port is learned again.
            self.peer_port = None;
        }
        set!(AttrMask::AV, ah_attr);
        set!(AttrMask::PATH_MTU, path_mtu);
        set!(AttrMask::DEST_QPN, dest_qp_num);
        set!(AttrMask::RQ_PSN, rq_psn);
        set!(AttrMask::SQ_PSN, sq_psn);
        set!(AttrMask::MAX_DEST_RD_ATOMIC, max_dest_rd_atomic);
        set!(AttrMask::MAX_QP_RD_ATOMIC, max_rd_atomic);
        set!(AttrMask::MIN_RNR_TIMER, min_rnr_timer);
        set!(AttrMask::TIMEOUT, timeout);
        set!(AttrMask::RETRY_CNT, retry_cnt);
        set!(AttrMask::RNR_RETRY, rnr_retry);
        set!(AttrMask::EN_SQD_ASYNC_NOTIFY, en_sqd_async_notify);
        if mask.contains(AttrMask::RQ_PSN) {
            self.resp.reset_psn(attr.rq_psn);
        }
        if mask.contains(AttrMask::SQ_PSN) {
            self.req.reset_psn(attr.sq_psn);
        }
        if mask.contains(AttrMask::RETRY_CNT) {
            self.req.retry_left = attr.retry_cnt;
        }
        if mask.contains(AttrMask::RNR_RETRY) {
            self.req.rnr_left = attr.rnr_retry;
        }
        if mask.contains(AttrMask::MAX_DEST_RD_ATOMIC) {
            self.resp.set_max_resources(attr.max_dest_rd_atomic);
        }
        self.attr.qp_state = to;
        self.attr.cur_qp_state = to;
        match to {
            QpState::Reset => self.reset(ctx),
            QpState::Err if cur != QpState::Err => self.enter_error(ctx),
            QpState::Sqd => {
                self.sqd_notify = self.attr.en_sqd_async_notify;
                self.state = QpState::Sqd;
                self.check_drained(ctx);
            }
            _ => self.state = to,
        }
        Ok(())
    }

    /// Back to RESET: everything is forgotten, no completion is generated,
    /// and the completions of this QP still in its CQs are removed (as
    /// mlx5 does: a program that resets a QP after an error and polls on
    /// does not meet the flushes of its previous life).
    fn reset(&mut self, ctx: &mut Ctx) {
        for cq in [self.send_cq, self.recv_cq] {
            if let Some(c) = ctx.cqs.get_mut(cq.0) {
                *ctx.gated -= c.remove_qp(self.qpn);
            }
        }
        self.state = QpState::Reset;
        self.sq.clear();
        self.rq.clear();
        let attr = self.attr;
        self.req = req::Requester::default();
        self.resp = resp::Responder::default();
        self.attr = QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            ..attr
        };
        self.sqd_notify = false;
        self.peer_port = None;
    }

    /// Enters ERR: every outstanding work request completes — the ones
    /// whose outcome is known with it, the others flushed — in posting order.
    pub fn enter_error(&mut self, ctx: &mut Ctx) {
        self.state = QpState::Err;
        self.attr.qp_state = QpState::Err;
        self.attr.cur_qp_state = QpState::Err;
        self.req.on_error();
        self.resp.on_error();
        while let Some(w) = self.sq.pop_front() {
            let status = w.done.unwrap_or(WcStatus::WrFlushErr);
            if status == WcStatus::Success && !(w.signaled || self.sq_sig_all) {
                continue;
            }
            self.complete_send(&w, status, ctx);
        }
        self.req.cur = 0;
        self.req.cur_pkt = 0;
        while let Some(r) = self.rq.pop_front() {
            let wc = self.flush_recv_wc(&r);
            ctx.complete(self.recv_cq, wc);
        }
        if self.srq.is_some() && self.qp_type != QpType::XrcRecv {
            ctx.event(AsyncEvent::QpLastWqeReached(self.qpn));
        }
    }

    /// Delivers the completion of a send request, after the driver has
    /// released every datagram that reads its payload (and those of the
    /// QP's earlier requests). Returns false on a CQ overrun.
    pub fn complete_send(&mut self, w: &SendWqe, status: WcStatus, ctx: &mut Ctx) -> bool {
        self.comp_floor = self.comp_floor.max(w.gather_seq);
        let wc = self.send_wc(w, status);
        ctx.complete_after(self.send_cq, wc, self.comp_floor)
    }

    pub fn send_wc(&self, w: &SendWqe, status: WcStatus) -> Wc {
        let byte_len = match w.wr.opcode {
            WrOpcode::RdmaRead => w.len,
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd | WrOpcode::AtomicWrite => 8,
            // rxe reports the FLUSH's length (its wqe->dma.length).
            WrOpcode::Flush => w.wr.flush_len as u32,
            _ => w.len,
        };
        Wc {
            wr_id: w.wr.wr_id,
            status,
            opcode: w.wr.opcode.wc_opcode(),
            byte_len,
            imm_or_inv: 0,
            qp_num: self.qpn,
            src_qp: Qpn::new(0),
            wc_flags: WcFlags::default(),
            pkey_index: 0,
            solicited: false,
        }
    }

    pub fn flush_recv_wc(&self, r: &RecvWqe) -> Wc {
        Wc {
            wr_id: r.wr.wr_id,
            status: WcStatus::WrFlushErr,
            opcode: WcOpcode::Recv,
            byte_len: 0,
            imm_or_inv: 0,
            qp_num: self.qpn,
            src_qp: Qpn::new(0),
            wc_flags: WcFlags::default(),
            pkey_index: 0,
            solicited: false,
        }
    }

    /// Validates and queues a send work request.
    pub fn post_send(&mut self, wr: SendWr, ctx: &mut Ctx) -> VerbsResult<()> {
        if self.qp_type == QpType::XrcRecv {
            return Err(VerbsError::InvalidArgument(
                "an XRC TGT QP has no send queue",
            ));
        }
        match self.state {
            QpState::Reset | QpState::Init | QpState::Rtr => {
                return Err(VerbsError::InvalidArgument("QP not ready to send"))
            }
            _ => {}
        }
        if self.sq.len() as u32 >= self.cap.max_send_wr {
            return Err(VerbsError::QueueFull);
        }
        let inline = wr.flags.contains(SendFlags::INLINE);
        if inline {
            if wr.inline_data.len() as u32 > self.cap.max_inline_data {
                return Err(VerbsError::InvalidArgument("inline data too long"));
            }
        } else if wr.sg_list.len() as u32 > self.cap.max_send_sge {
            return Err(VerbsError::InvalidArgument("too many SGEs"));
        }
        let op_ok = match self.qp_type {
            QpType::Rc => true,
            // XRC has no FLUSH or ATOMIC WRITE opcode (see softrdma_wire's
            // opcode table).
            QpType::XrcSend => !matches!(wr.opcode, WrOpcode::Flush | WrOpcode::AtomicWrite),
            QpType::XrcRecv => false,
            QpType::Uc => matches!(
                wr.opcode,
                WrOpcode::Send
                    | WrOpcode::SendWithImm
                    | WrOpcode::RdmaWrite
                    | WrOpcode::RdmaWriteWithImm
                    | WrOpcode::LocalInv
                    | WrOpcode::BindMw
            ),
            QpType::Ud => matches!(wr.opcode, WrOpcode::Send | WrOpcode::SendWithImm),
        };
        if !op_ok {
            return Err(VerbsError::InvalidArgument(
                "opcode not supported on this QP type",
            ));
        }
        if inline && (wr.opcode == WrOpcode::RdmaRead || wr.opcode.is_atomic()) {
            return Err(VerbsError::InvalidArgument("inline READ or atomic"));
        }
        let well_formed = match wr.opcode {
            // rxe's validate_send_wr: a bind carries no data.
            WrOpcode::BindMw => wr.bind.is_some() && wr.sg_list.is_empty() && wr.length() == 0,
            // The 8 bytes travel with the request (copied at post time).
            WrOpcode::AtomicWrite => inline && wr.inline_data.len() == 8,
            WrOpcode::Flush => {
                let f = wr.flush;
                f.placement_type & !(FLUSH_GLOBAL | FLUSH_PERSISTENT) == 0
                    && f.level <= FLUSH_MR
                    && wr.sg_list.is_empty()
                    && !inline
                    && wr.flush_len <= crate::limits::MAX_MSG_SIZE as u64
            }
            _ => true,
        };
        if !well_formed {
            return Err(VerbsError::InvalidArgument(
                "BIND_MW carries no data, ATOMIC WRITE exactly 8 bytes, FLUSH a type, a level and a length",
            ));
        }
        if self.qp_type == QpType::Ud {
            let Some(ud) = wr.ud else {
                return Err(VerbsError::InvalidArgument(
                    "UD send without address handle",
                ));
            };
            if ctx.ahs.get(ud.ah.0).is_none() {
                return Err(VerbsError::InvalidArgument("unknown address handle"));
            }
        }
        let len64 = wr.length();
        if len64 > crate::limits::MAX_MSG_SIZE as u64 {
            return Err(VerbsError::InvalidArgument("message too long"));
        }
        let signaled = wr.flags.contains(SendFlags::SIGNALED) || self.sq_sig_all;
        let w = SendWqe {
            len: len64 as u32,
            wr,
            sgl: None,
            first_psn: Psn::ZERO,
            npkts: 1,
            started: false,
            acked_pkts: 0,
            resp_start: 0,
            rx_map: Vec::new(),
            ooo: 0,
            done: None,
            signaled,
            gather_seq: 0,
        };
        self.sq.push_back(w);
        if self.state == QpState::Err {
            // Posted to a QP in error: flushed at once (IBA 10.8.3.3).
            let w = self.sq.pop_back().expect("just pushed");
            self.complete_send(&w, WcStatus::WrFlushErr, ctx);
        }
        Ok(())
    }

    /// Validates and queues a receive work request.
    pub fn post_recv(&mut self, wr: RecvWr, ctx: &mut Ctx) -> VerbsResult<()> {
        if matches!(self.qp_type, QpType::XrcSend | QpType::XrcRecv) {
            return Err(VerbsError::InvalidArgument(
                "an XRC QP has no receive queue (XRC SRQs receive)",
            ));
        }
        if self.srq.is_some() {
            return Err(VerbsError::InvalidArgument("QP uses an SRQ"));
        }
        if self.state == QpState::Reset {
            return Err(VerbsError::InvalidArgument("QP in RESET"));
        }
        if self.rq.len() as u32 >= self.cap.max_recv_wr {
            return Err(VerbsError::QueueFull);
        }
        if wr.sg_list.len() as u32 > self.cap.max_recv_sge {
            return Err(VerbsError::InvalidArgument("too many SGEs"));
        }
        let r = RecvWqe { wr };
        if self.state == QpState::Err {
            let wc = self.flush_recv_wc(&r);
            ctx.complete(self.recv_cq, wc);
            return Ok(());
        }
        self.rq.push_back(r);
        Ok(())
    }

    /// In SQD with nothing outstanding: raise SQ_DRAINED once.
    pub fn check_drained(&mut self, ctx: &mut Ctx) {
        if self.state == QpState::Sqd && self.sqd_notify && !self.req.has_outstanding(self) {
            self.sqd_notify = false;
            ctx.event(AsyncEvent::SqDrained(self.qpn));
        }
    }

    /// Earliest deadline of this QP's timers.
    pub fn deadline(&self) -> Option<Instant> {
        [
            self.req.retrans_deadline,
            self.req.rnr_deadline,
            self.req.probe_deadline,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Some packet that left is not acknowledged yet.
    pub fn inflight_sent(&self) -> bool {
        matches!(
            (self.oldest_unacked(), self.req.max_sent),
            (Some(old), Some(max)) if !old.after(max)
        )
    }

    /// Whether the device's in-flight budget applies: RC and XRC QPs with
    /// a transport timer (one without could hold its share forever).
    pub fn budgeted(&self) -> bool {
        self.qp_type.is_reliable() && crate::limits::ack_timeout_ns(self.attr.timeout).is_some()
    }

    /// Request packets sent and not yet acknowledged (RC, XRC), as the
    /// device's in-flight budget counts them: from the oldest
    /// unacknowledged PSN through the highest sent (a READ counts its
    /// responses).
    pub fn inflight_pkts(&self) -> u32 {
        if !self.budgeted() || self.req.rnr_deadline.is_some() {
            return 0;
        }
        match (self.oldest_unacked(), self.req.max_sent) {
            (Some(old), Some(max)) if !old.after(max) => max.distance_from(old) + 1,
            _ => 0,
        }
    }

    /// Current attributes for `query_qp`.
    pub fn query(&self) -> QpAttr {
        let mut a = self.attr;
        a.qp_state = self.state;
        a.cur_qp_state = self.state;
        a.sq_psn = self.req.next_psn;
        a.rq_psn = self.resp.epsn;
        a
    }
}
