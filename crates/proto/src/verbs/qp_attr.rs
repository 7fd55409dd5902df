//! Queue pair attributes (IBA 11.2.5, `ibv_qp_attr`, `ibv_qp_init_attr`):
//! the modify mask, the attributes and the creation parameters, re-exported
//! by [`crate::verbs`].

use super::*;
/// Modify-QP attribute mask (`ibv_qp_attr_mask`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct AttrMask(pub u32);

impl AttrMask {
    /// qp_state.
    pub const STATE: AttrMask = AttrMask(1 << 0);
    /// cur_qp_state.
    pub const CUR_STATE: AttrMask = AttrMask(1 << 1);
    /// en_sqd_async_notify.
    pub const EN_SQD_ASYNC_NOTIFY: AttrMask = AttrMask(1 << 2);
    /// qp_access_flags.
    pub const ACCESS_FLAGS: AttrMask = AttrMask(1 << 3);
    /// pkey_index.
    pub const PKEY_INDEX: AttrMask = AttrMask(1 << 4);
    /// port_num.
    pub const PORT: AttrMask = AttrMask(1 << 5);
    /// qkey.
    pub const QKEY: AttrMask = AttrMask(1 << 6);
    /// ah_attr.
    pub const AV: AttrMask = AttrMask(1 << 7);
    /// path_mtu.
    pub const PATH_MTU: AttrMask = AttrMask(1 << 8);
    /// timeout.
    pub const TIMEOUT: AttrMask = AttrMask(1 << 9);
    /// retry_cnt.
    pub const RETRY_CNT: AttrMask = AttrMask(1 << 10);
    /// rnr_retry.
    pub const RNR_RETRY: AttrMask = AttrMask(1 << 11);
    /// rq_psn.
    pub const RQ_PSN: AttrMask = AttrMask(1 << 12);
    /// max_rd_atomic.
    pub const MAX_QP_RD_ATOMIC: AttrMask = AttrMask(1 << 13);
    /// alt_ah_attr etc.
    pub const ALT_PATH: AttrMask = AttrMask(1 << 14);
    /// min_rnr_timer.
    pub const MIN_RNR_TIMER: AttrMask = AttrMask(1 << 15);
    /// sq_psn.
    pub const SQ_PSN: AttrMask = AttrMask(1 << 16);
    /// max_dest_rd_atomic.
    pub const MAX_DEST_RD_ATOMIC: AttrMask = AttrMask(1 << 17);
    /// path_mig_state.
    pub const PATH_MIG_STATE: AttrMask = AttrMask(1 << 18);
    /// cap.
    pub const CAP: AttrMask = AttrMask(1 << 19);
    /// dest_qp_num.
    pub const DEST_QPN: AttrMask = AttrMask(1 << 20);
    /// rate_limit.
    pub const RATE_LIMIT: AttrMask = AttrMask(1 << 25);

    /// An RC (or XRC INI) QP's INIT → RTR: `STATE` and the attributes IBA
    /// table 91 requires (address vector, path MTU, destination QPN,
    /// receive PSN, responder resources, RNR NAK timer) — what
    /// `required(QpType::Rc, Init, Rtr)` answers, as a constant.
    pub const RC_RTR: AttrMask = AttrMask(
        Self::STATE.0
            | Self::AV.0
            | Self::PATH_MTU.0
            | Self::DEST_QPN.0
            | Self::RQ_PSN.0
            | Self::MAX_DEST_RD_ATOMIC.0
            | Self::MIN_RNR_TIMER.0,
    );
    /// An RC QP's RTR → RTS: `STATE`, send PSN, timeout, retry and RNR
    /// retry counts, initiator depth (`required(QpType::Rc, Rtr, Rts)`).
    pub const RC_RTS: AttrMask = AttrMask(
        Self::STATE.0
            | Self::SQ_PSN.0
            | Self::TIMEOUT.0
            | Self::RETRY_CNT.0
            | Self::RNR_RETRY.0
            | Self::MAX_QP_RD_ATOMIC.0,
    );

    /// Union.
    pub const fn with(self, o: AttrMask) -> AttrMask {
        AttrMask(self.0 | o.0)
    }
    /// All bits of `o` present.
    pub const fn contains(self, o: AttrMask) -> bool {
        self.0 & o.0 == o.0
    }
    /// Bits of `self` not in `o`.
    pub const fn without(self, o: AttrMask) -> AttrMask {
        AttrMask(self.0 & !o.0)
    }

    /// The mask `modify_qp` requires to take a QP of type `t` from `from`
    /// to `to`: `STATE` and the attributes IBA table 91 makes mandatory
    /// (what the usual RESET → INIT → RTR → RTS bring-up passes). `None`
    /// for a transition that does not exist.
    pub fn required(t: QpType, from: QpState, to: QpState) -> Option<AttrMask> {
        crate::qp::required_mask(t, from, to).map(|m| AttrMask::STATE.with(AttrMask(m)))
    }
}

/// QP attributes for `modify_qp` / `query_qp` (`ibv_qp_attr`). Only the
/// fields named in the mask are read by `modify_qp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpAttr {
    /// Target state.
    pub qp_state: QpState,
    /// Asserted current state (checked when in the mask).
    pub cur_qp_state: QpState,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Q_Key (UD).
    pub qkey: QKey,
    /// PSN the responder expects first.
    pub rq_psn: Psn,
    /// PSN of the first request.
    pub sq_psn: Psn,
    /// Destination QP (RC/UC).
    pub dest_qp_num: Qpn,
    /// Remote access rights the QP grants.
    pub qp_access_flags: Access,
    /// Destination (RC/UC).
    pub ah_attr: AddressVector,
    /// P_Key index.
    pub pkey_index: u16,
    /// Raise an event when the send queue has drained (RTS→SQD).
    pub en_sqd_async_notify: bool,
    /// Outstanding READ/atomic requests this QP may issue.
    pub max_rd_atomic: u8,
    /// Outstanding READ/atomic requests this QP accepts.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code this QP's responder sends.
    pub min_rnr_timer: u8,
    /// Port number (1).
    pub port_num: u8,
    /// Transport timer exponent: 4.096 µs × 2^timeout; 0 = none.
    pub timeout: u8,
    /// Transport retries (0–7).
    pub retry_cnt: u8,
    /// RNR retries (0–6; 7 = forever).
    pub rnr_retry: u8,
}

impl QpAttr {
    /// The attributes that move a QP to `state` (with [`AttrMask::STATE`]),
    /// every other field its default.
    pub fn to(state: QpState) -> QpAttr {
        QpAttr {
            qp_state: state,
            ..Default::default()
        }
    }

    /// The three `modify_qp` calls that take a UD QP from RESET to RTS
    /// with Q_Key `qkey` (P_Key index 0, port 1, send PSN 0): INIT with
    /// the attributes IBA table 91 requires, RTR, RTS.
    pub fn ud_to_rts(qkey: QKey) -> [(QpAttr, AttrMask); 3] {
        let at = |qp_state| QpAttr {
            qp_state,
            qkey,
            ..Default::default()
        };
        [
            (
                at(QpState::Init),
                AttrMask::STATE
                    .with(AttrMask::PKEY_INDEX)
                    .with(AttrMask::PORT)
                    .with(AttrMask::QKEY),
            ),
            (at(QpState::Rtr), AttrMask::STATE),
            (at(QpState::Rts), AttrMask::STATE.with(AttrMask::SQ_PSN)),
        ]
    }
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            path_mtu: Mtu::M1024,
            qkey: QKey(0),
            rq_psn: Psn::ZERO,
            sq_psn: Psn::ZERO,
            dest_qp_num: Qpn::new(0),
            qp_access_flags: Access(0),
            ah_attr: AddressVector::to(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)),
            pkey_index: 0,
            en_sqd_async_notify: false,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
            port_num: 1,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
        }
    }
}

/// Sizes of a queue pair's queues (`ibv_qp_cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct QpCap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send request.
    pub max_send_sge: u32,
    /// SGEs per receive request.
    pub max_recv_sge: u32,
    /// Inline bytes per send request.
    pub max_inline_data: u32,
}

impl QpCap {
    /// Queues of `wr` requests with `sge` SGEs each, the send and the
    /// receive queue alike, and `inline` inline bytes per send request.
    pub const fn new(wr: u32, sge: u32, inline: u32) -> QpCap {
        QpCap {
            max_send_wr: wr,
            max_recv_wr: wr,
            max_send_sge: sge,
            max_recv_sge: sge,
            max_inline_data: inline,
        }
    }
}

/// Arguments of `create_qp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInit {
    /// Transport.
    pub qp_type: QpType,
    /// Protection domain.
    pub pd: PdId,
    /// CQ for send completions.
    pub send_cq: CqId,
    /// CQ for receive completions.
    pub recv_cq: CqId,
    /// Shared receive queue, if any.
    pub srq: Option<SrqId>,
    /// Queue sizes.
    pub cap: QpCap,
    /// When false, every send request generates a completion regardless
    /// of its SIGNALED flag.
    pub sq_sig_all: bool,
}

impl QpInit {
    /// A QP of `qp_type` in `pd` whose send and receive completions both go
    /// to `cq`: no SRQ, the default queue sizes, a completion for signaled
    /// requests only (`sq_sig_all` false). Set other fields with struct
    /// update syntax.
    pub fn new(qp_type: QpType, pd: PdId, cq: CqId) -> QpInit {
        QpInit {
            qp_type,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        }
    }
}
