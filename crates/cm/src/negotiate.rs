//! What goes into REQ and REP, and what comes out of them for the QPs:
//! the rules of Linux's rdma_cm (core/cma.c) and librdmacm (librdmacm/cma.c)
//! as plain data, for the rdma_cm layer above the CM.
//!
//! - [`rdma_cm_path`]: the RoCE path rdma_cm resolves without an SA.
//! - [`req_params`] / [`rep_params`] / [`sidr_req_params`]: REQ, REP and
//!   SIDR_REQ parameters from an `rdma_conn_param` ([`ConnParam`]).
//! - [`conn_param_from_req`] / [`conn_param_from_rep`]: the `param.conn`
//!   of CONNECT_REQUEST and ESTABLISHED/CONNECT_RESPONSE events
//!   (responder resources and initiator depth swapped).
//! - [`Cm::init_qp_attr`]: `ib_cm_init_qp_attr` for INIT, RTR and RTS;
//!   [`RdmaCmOverrides`] what rdma_cm and librdmacm change in them;
//!   [`create_qp_attrs`] the transitions of `rdma_create_qp` itself.
//!
//! Attribute masks and access flags carry libibverbs' values
//! (`IBV_QP_*`, `IBV_ACCESS_*`), so a C layer passes them through.

use crate::cm::{Cm, State};
use crate::limits;
use crate::params::{Ece, Path, QpType, RepParams, ReqParams, SidrReqParams};
use crate::{CmError, CmId};
use softrdma_wire::cm::{private_len, CmaHdrRepr, RepRepr, ReqRepr, ServiceId, CMA_HDR_LEN};
use softrdma_wire::{Gid, PKey, Psn, Qpn};
use std::net::IpAddr;

/// A QP attribute mask with libibverbs' bit values (`enum ibv_qp_attr_mask`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct AttrMask(pub u32);

impl AttrMask {
    /// `IBV_QP_STATE`.
    pub const STATE: AttrMask = AttrMask(1 << 0);
    /// `IBV_QP_ACCESS_FLAGS`.
    pub const ACCESS_FLAGS: AttrMask = AttrMask(1 << 3);
    /// `IBV_QP_PKEY_INDEX`.
    pub const PKEY_INDEX: AttrMask = AttrMask(1 << 4);
    /// `IBV_QP_PORT`.
    pub const PORT: AttrMask = AttrMask(1 << 5);
    /// `IBV_QP_QKEY`.
    pub const QKEY: AttrMask = AttrMask(1 << 6);
    /// `IBV_QP_AV`.
    pub const AV: AttrMask = AttrMask(1 << 7);
    /// `IBV_QP_PATH_MTU`.
    pub const PATH_MTU: AttrMask = AttrMask(1 << 8);
    /// `IBV_QP_TIMEOUT`.
    pub const TIMEOUT: AttrMask = AttrMask(1 << 9);
    /// `IBV_QP_RETRY_CNT`.
    pub const RETRY_CNT: AttrMask = AttrMask(1 << 10);
    /// `IBV_QP_RNR_RETRY`.
    pub const RNR_RETRY: AttrMask = AttrMask(1 << 11);
    /// `IBV_QP_RQ_PSN`.
    pub const RQ_PSN: AttrMask = AttrMask(1 << 12);
    /// `IBV_QP_MAX_QP_RD_ATOMIC`.
    pub const MAX_QP_RD_ATOMIC: AttrMask = AttrMask(1 << 13);
    /// `IBV_QP_MIN_RNR_TIMER`.
    pub const MIN_RNR_TIMER: AttrMask = AttrMask(1 << 15);
    /// `IBV_QP_SQ_PSN`.
    pub const SQ_PSN: AttrMask = AttrMask(1 << 16);
    /// `IBV_QP_MAX_DEST_RD_ATOMIC`.
    pub const MAX_DEST_RD_ATOMIC: AttrMask = AttrMask(1 << 17);
    /// `IBV_QP_DEST_QPN`.
    pub const DEST_QPN: AttrMask = AttrMask(1 << 20);

    /// Both masks' bits.
    #[must_use]
    pub const fn with(self, o: AttrMask) -> AttrMask {
        AttrMask(self.0 | o.0)
    }
    /// Whether every bit of `o` is set.
    pub const fn contains(self, o: AttrMask) -> bool {
        self.0 & o.0 == o.0
    }
}

/// Access flags with libibverbs' values (`enum ibv_access_flags`).
pub mod access {
    /// `IBV_ACCESS_LOCAL_WRITE`.
    pub const LOCAL_WRITE: u32 = 1;
    /// `IBV_ACCESS_REMOTE_WRITE`.
    pub const REMOTE_WRITE: u32 = 2;
    /// `IBV_ACCESS_REMOTE_READ`.
    pub const REMOTE_READ: u32 = 4;
    /// `IBV_ACCESS_REMOTE_ATOMIC`.
    pub const REMOTE_ATOMIC: u32 = 8;
}

/// A QP state a transition goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpState {
    /// INIT.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Error (rdma_cm: after REJ, on disconnect).
    Err,
}

/// The address vector of a connected QP (a global route: RoCE).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct AhAttr {
    /// The peer's GID.
    pub dgid: Gid,
    /// Our GID (the driver turns it into its GID index).
    pub sgid: Gid,
    /// Flow label.
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Service level.
    pub sl: u8,
    /// Port (1).
    pub port_num: u8,
}

/// QP attributes; only those in the mask of [`QpAttrs`] mean anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QpAttr {
    /// The state to go to.
    pub qp_state: QpState,
    /// P_Key index (0: the table holds 0xFFFF only).
    pub pkey_index: u16,
    /// Port (1).
    pub port_num: u8,
    /// `IBV_ACCESS_*` remote access.
    pub qp_access_flags: u32,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Path MTU code.
    pub path_mtu: u8,
    /// The peer's QP.
    pub dest_qp_num: Qpn,
    /// Our receive PSN.
    pub rq_psn: Psn,
    /// RDMA READ/atomics we accept (responder resources).
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code (0 = 655.36 ms, what rdma_cm leaves).
    pub min_rnr_timer: u8,
    /// Address vector.
    pub ah_attr: AhAttr,
    /// Our send PSN (the peer's Starting PSN).
    pub sq_psn: Psn,
    /// Transport timer (5-bit IBA time).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries.
    pub rnr_retry: u8,
    /// RDMA READ/atomics we issue (initiator depth).
    pub max_rd_atomic: u8,
}

impl QpAttr {
    const fn empty(qp_state: QpState) -> QpAttr {
        QpAttr {
            qp_state,
            pkey_index: 0,
            port_num: 0,
            qp_access_flags: 0,
            qkey: 0,
            path_mtu: 0,
            dest_qp_num: Qpn::new(0),
            rq_psn: Psn::ZERO,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
            ah_attr: AhAttr {
                dgid: Gid::ZERO,
                sgid: Gid::ZERO,
                flow_label: 0,
                hop_limit: 0,
                traffic_class: 0,
                sl: 0,
                port_num: 0,
            },
            sq_psn: Psn::ZERO,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
            max_rd_atomic: 0,
        }
    }
}

/// Attributes and the mask of those to apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QpAttrs {
    /// Values.
    pub attr: QpAttr,
    /// Which values to apply.
    pub mask: AttrMask,
}

/// Port of every softrdma device.
const PORT_NUM: u8 = 1;

impl Cm {
    /// The attributes a connection's QP takes to `state`
    /// (`ib_cm_init_qp_attr`):
    ///
    /// - INIT (re-init before RTR): remote write, plus remote read and
    ///   atomics when we accept any (responder resources > 0); P_Key index
    ///   0, port 1.
    /// - RTR: the path as address vector, path MTU, the peer's QPN, our
    ///   receive PSN, and for RC max_dest_rd_atomic = responder resources
    ///   and min_rnr_timer 0.
    /// - RTS: send PSN = the peer's Starting PSN; for RC the peer's retry
    ///   and RNR retry counts, max_rd_atomic = initiator depth, timeout =
    ///   the path's (19 over rxe).
    ///
    /// The passive side may ask for RTR and RTS before its REP (rdma_cm
    /// does, so the QP is ready when the RTU comes); its receive PSN is
    /// known only after the REP, which is why rdma_cm overrides it with its
    /// own ([`RdmaCmOverrides`]).
    pub fn init_qp_attr(&self, id: CmId, state: QpState) -> Result<QpAttrs, CmError> {
        let c = self.ids.get(&id.comm_id()).ok_or(CmError::UnknownId)?;
        use State::*;
        let connected_or_going = matches!(
            c.state,
            ReqRcvd | MraReqSent | RepRcvd | MraRepSent | RepSent | MraRepRcvd | Established
        );
        let rc = c.qp_type == QpType::Rc;
        let mut a = QpAttr::empty(state);
        let mask = match state {
            QpState::Init => {
                if !(connected_or_going || matches!(c.state, ReqSent | MraReqRcvd)) {
                    return Err(CmError::InvalidState(c.state));
                }
                a.qp_access_flags = access::REMOTE_WRITE;
                if c.responder_resources > 0 {
                    a.qp_access_flags |= access::REMOTE_READ | access::REMOTE_ATOMIC;
                }
                a.pkey_index = 0;
                a.port_num = PORT_NUM;
                AttrMask::STATE
                    .with(AttrMask::ACCESS_FLAGS)
                    .with(AttrMask::PKEY_INDEX)
                    .with(AttrMask::PORT)
            }
            QpState::Rtr => {
                if !connected_or_going {
                    return Err(CmError::InvalidState(c.state));
                }
                a.ah_attr = AhAttr {
                    dgid: c.path.dgid,
                    sgid: c.path.sgid,
                    flow_label: c.path.flow_label,
                    hop_limit: c.path.hop_limit,
                    traffic_class: c.path.traffic_class,
                    sl: c.path.sl,
                    port_num: PORT_NUM,
                };
                a.path_mtu = c.path_mtu;
                a.dest_qp_num = c.remote_qpn;
                a.rq_psn = c.rq_psn;
                let mut m = AttrMask::STATE
                    .with(AttrMask::AV)
                    .with(AttrMask::PATH_MTU)
                    .with(AttrMask::DEST_QPN)
                    .with(AttrMask::RQ_PSN);
                if rc {
                    a.max_dest_rd_atomic = c.responder_resources;
                    a.min_rnr_timer = 0;
                    m = m
                        .with(AttrMask::MAX_DEST_RD_ATOMIC)
                        .with(AttrMask::MIN_RNR_TIMER);
                }
                m
            }
            QpState::Rts => {
                if !connected_or_going {
                    return Err(CmError::InvalidState(c.state));
                }
                a.sq_psn = c.sq_psn;
                let mut m = AttrMask::STATE.with(AttrMask::SQ_PSN);
                if rc {
                    a.retry_cnt = c.retry_count;
                    a.rnr_retry = c.rnr_retry_count;
                    a.max_rd_atomic = c.initiator_depth;
                    a.timeout = c.av_timeout;
                    m = m
                        .with(AttrMask::RETRY_CNT)
                        .with(AttrMask::RNR_RETRY)
                        .with(AttrMask::MAX_QP_RD_ATOMIC)
                        .with(AttrMask::TIMEOUT);
                }
                m
            }
            QpState::Err => AttrMask::STATE,
        };
        Ok(QpAttrs { attr: a, mask })
    }
}

/// What rdma_cm and librdmacm change in [`Cm::init_qp_attr`]'s answer:
/// the receive PSN is always rdma_cm's own `seq_num` (the PSN it put in its
/// REQ or REP; `rdma_init_qp_attr`), librdmacm's `rdma_accept` /
/// `rdma_connect` values for max_dest_rd_atomic and max_rd_atomic unless
/// they are 0xFF ("device maximum"), the ACK_TIMEOUT option for the
/// timeout, `rdma_set_min_rnr_timer` for the RNR timer. Each applies only
/// when its attribute is in the mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct RdmaCmOverrides {
    /// rdma_cm's own PSN.
    pub rq_psn: Option<Psn>,
    /// Responder resources of the connect/accept call.
    pub max_dest_rd_atomic: Option<u8>,
    /// Initiator depth of the connect/accept call.
    pub max_rd_atomic: Option<u8>,
    /// `RDMA_OPTION_ID_ACK_TIMEOUT`.
    pub timeout: Option<u8>,
    /// `rdma_set_min_rnr_timer`.
    pub min_rnr_timer: Option<u8>,
}

impl RdmaCmOverrides {
    /// Applies the overrides whose attribute is in the mask.
    pub fn apply(&self, a: &mut QpAttrs) {
        let m = a.mask;
        let at = &mut a.attr;
        if let (true, Some(v)) = (m.contains(AttrMask::RQ_PSN), self.rq_psn) {
            at.rq_psn = v;
        }
        if let (true, Some(v)) = (
            m.contains(AttrMask::MAX_DEST_RD_ATOMIC),
            self.max_dest_rd_atomic,
        ) {
            at.max_dest_rd_atomic = v;
        }
        if let (true, Some(v)) = (m.contains(AttrMask::MAX_QP_RD_ATOMIC), self.max_rd_atomic) {
            at.max_rd_atomic = v;
        }
        if let (true, Some(v)) = (m.contains(AttrMask::TIMEOUT), self.timeout) {
            at.timeout = v;
        }
        if let (true, Some(v)) = (m.contains(AttrMask::MIN_RNR_TIMER), self.min_rnr_timer) {
            at.min_rnr_timer = v;
        }
    }
}

/// The QP type of an rdma_cm id, for [`create_qp_attrs`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RdmaQpType {
    /// RC or UC: connected through REQ/REP.
    Connected,
    /// UD: SIDR, and a Q_Key.
    Ud {
        /// Q_Key ([`limits::RDMA_UDP_QKEY`] for the UDP and IB port spaces).
        qkey: u32,
    },
}

/// The transitions `rdma_create_qp` applies itself
/// (`cma_ib_init_qp_attr`, librdmacm `ucma_init_conn_qp` /
/// `ucma_init_ud_qp`): a connected QP goes to INIT with P_Key index 0,
/// port 1, no remote access; a UD QP goes to INIT with its Q_Key, then RTR,
/// then RTS with send PSN 0.
pub fn create_qp_attrs(t: RdmaQpType) -> Vec<QpAttrs> {
    let mut init = QpAttr::empty(QpState::Init);
    init.port_num = PORT_NUM;
    let base = AttrMask::STATE
        .with(AttrMask::PKEY_INDEX)
        .with(AttrMask::PORT);
    match t {
        RdmaQpType::Connected => vec![QpAttrs {
            attr: init,
            mask: base.with(AttrMask::ACCESS_FLAGS),
        }],
        RdmaQpType::Ud { qkey } => {
            init.qkey = qkey;
            vec![
                QpAttrs {
                    attr: init,
                    mask: base.with(AttrMask::QKEY),
                },
                QpAttrs {
                    attr: QpAttr::empty(QpState::Rtr),
                    mask: AttrMask::STATE,
                },
                QpAttrs {
                    attr: QpAttr::empty(QpState::Rts),
                    mask: AttrMask::STATE.with(AttrMask::SQ_PSN),
                },
            ]
        }
    }
}

/// The flow label rdma_cm gives a RoCE v2 path (`cma_get_roce_udp_flow_label`):
/// `(src_port × 31 + dst_port) & 0xFFFFF` of the two rdma_cm ports. rxe
/// turns it into the UDP source port of the connection's packets.
pub const fn roce_flow_label(src_port: u16, dst_port: u16) -> u32 {
    (src_port as u32 * 31 + dst_port as u32) & 0xf_ffff
}

/// The path rdma_cm resolves for RoCE without an SA
/// (`cma_resolve_iboe_route`): GIDs from the IPs, the flow label from the
/// ports, P_Key 0xFFFF, SL 0, rate "port current", Linux 6.1's packet life
/// time 18.
pub fn rdma_cm_path(
    src: IpAddr,
    dst: IpAddr,
    src_port: u16,
    dst_port: u16,
    mtu: u8,
    traffic_class: u8,
    hop_limit: u8,
) -> Path {
    Path {
        sgid: Gid::from_ip(src),
        dgid: Gid::from_ip(dst),
        flow_label: roce_flow_label(src_port, dst_port),
        traffic_class,
        hop_limit,
        sl: 0,
        pkey: PKey::DEFAULT,
        mtu,
        rate: 0,
        packet_life_time: limits::CMA_IBOE_PACKET_LIFETIME,
    }
}

/// `struct rdma_conn_param`, the parts the CM carries.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ConnParam {
    /// The user's private data.
    pub private_data: Vec<u8>,
    /// RDMA READ/atomics accepted at once.
    pub responder_resources: u8,
    /// RDMA READ/atomics issued at once.
    pub initiator_depth: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// Transport retries (capped at 7).
    pub retry_count: u8,
    /// RNR retries (capped at 7).
    pub rnr_retry_count: u8,
    /// The QP has an SRQ.
    pub srq: bool,
    /// The QP.
    pub qp_num: Qpn,
}

/// The REQ of `rdma_connect` (`cma_connect_ib`): rdma_cm's header and the
/// user's data (≤ 56 bytes) as private data, 20 / 20 CM response
/// timeouts, 15 CM retries, retry counts capped at 7, our PSN.
pub fn req_params(
    path: &Path,
    service_id: ServiceId,
    cma: &CmaHdrRepr,
    qp_type: QpType,
    starting_psn: Psn,
    conn: &ConnParam,
) -> Result<ReqParams, CmError> {
    let hdr = cma
        .to_bytes()
        .map_err(|_| CmError::InvalidParam("cma header addresses of two families"))?;
    if conn.private_data.len() > private_len::REQ - CMA_HDR_LEN {
        return Err(CmError::InvalidParam("REQ user private data over 56 bytes"));
    }
    let mut private_data = hdr.to_vec();
    private_data.extend_from_slice(&conn.private_data);
    Ok(ReqParams {
        service_id,
        qpn: conn.qp_num,
        qp_type,
        starting_psn,
        responder_resources: conn.responder_resources,
        initiator_depth: conn.initiator_depth,
        flow_control: conn.flow_control,
        retry_count: conn.retry_count.min(7),
        rnr_retry_count: conn.rnr_retry_count.min(7),
        srq: conn.srq,
        path: *path,
        remote_cm_response_timeout: limits::CMA_CM_RESPONSE_TIMEOUT,
        local_cm_response_timeout: limits::CMA_CM_RESPONSE_TIMEOUT,
        max_cm_retries: limits::CMA_MAX_CM_RETRIES,
        private_data,
        ece: Ece::default(),
    })
}

/// The REP of `rdma_accept` (`cma_accept_ib`): the user's values, RNR
/// retry capped at 7, our PSN, no failover.
pub fn rep_params(starting_psn: Psn, conn: &ConnParam) -> Result<RepParams, CmError> {
    if conn.private_data.len() > private_len::REP {
        return Err(CmError::InvalidParam("REP private data over 196 bytes"));
    }
    Ok(RepParams {
        qpn: conn.qp_num,
        starting_psn,
        responder_resources: conn.responder_resources,
        initiator_depth: conn.initiator_depth,
        failover_accepted: 0,
        flow_control: conn.flow_control,
        rnr_retry_count: conn.rnr_retry_count.min(7),
        srq: conn.srq,
        private_data: conn.private_data.clone(),
        ece: Ece::default(),
    })
}

/// The SIDR_REQ of `rdma_connect` on a UD id (`cma_resolve_ib_udp`): the
/// header and the user's data (≤ 180 bytes), 4096 ms per try
/// (`1 << (CMA_CM_RESPONSE_TIMEOUT - 8)`), 15 retries.
pub fn sidr_req_params(
    peer: IpAddr,
    service_id: ServiceId,
    cma: &CmaHdrRepr,
    user_private_data: &[u8],
) -> Result<SidrReqParams, CmError> {
    let hdr = cma
        .to_bytes()
        .map_err(|_| CmError::InvalidParam("cma header addresses of two families"))?;
    if user_private_data.len() > private_len::SIDR_REQ - CMA_HDR_LEN {
        return Err(CmError::InvalidParam(
            "SIDR_REQ user private data over 180 bytes",
        ));
    }
    let mut private_data = hdr.to_vec();
    private_data.extend_from_slice(user_private_data);
    Ok(SidrReqParams {
        peer,
        service_id,
        pkey: PKey::DEFAULT,
        timeout_ms: limits::cm_time_ms(limits::CMA_CM_RESPONSE_TIMEOUT),
        max_cm_retries: limits::CMA_MAX_CM_RETRIES,
        private_data,
    })
}

/// `param.conn` of CONNECT_REQUEST (`cm_format_req_event` +
/// `cma_set_req_event_data`): what the requester offers seen from here —
/// our responder resources are its initiator depth and the other way
/// round. Private data is the user's part after the rdma_cm header.
pub fn conn_param_from_req(req: &ReqRepr<'_>) -> ConnParam {
    let user = req.private_data.get(CMA_HDR_LEN..).unwrap_or(&[]);
    ConnParam {
        private_data: user.to_vec(),
        responder_resources: req.initiator_depth,
        initiator_depth: req.responder_resources,
        flow_control: req.flow_control,
        retry_count: req.retry_count,
        rnr_retry_count: req.rnr_retry_count,
        srq: req.srq,
        qp_num: req.local_qpn,
    }
}

/// `param.conn` of ESTABLISHED / CONNECT_RESPONSE on the active side
/// (`cm_format_rep_event` + `cma_set_rep_event_data`), swapped likewise.
pub fn conn_param_from_rep(rep: &RepRepr<'_>) -> ConnParam {
    ConnParam {
        private_data: rep.private_data.to_vec(),
        responder_resources: rep.initiator_depth,
        initiator_depth: rep.responder_resources,
        flow_control: rep.flow_control,
        retry_count: 0,
        rnr_retry_count: rep.rnr_retry_count,
        srq: rep.srq,
        qp_num: rep.local_qpn,
    }
}

/// The responder resources and initiator depth of `rdma_accept(id, NULL)`:
/// what the requester asked for, capped by the device (`max_qp_rd_atom`,
/// `max_qp_init_rd_atom`).
pub fn accept_depths(req: &ReqRepr<'_>, max_qp_rd_atom: u8, max_qp_init_rd_atom: u8) -> (u8, u8) {
    (
        req.initiator_depth.min(max_qp_rd_atom),
        req.responder_resources.min(max_qp_init_rd_atom),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rping_flow_labels() {
        assert_eq!(roce_flow_label(54667, 7174), 0x9f7db);
        assert_eq!(roce_flow_label(37566, 7174), 0x1e108);
    }

    #[test]
    fn overrides_apply_only_to_masked_attributes() {
        let mut a = QpAttrs {
            attr: QpAttr::empty(QpState::Rtr),
            mask: AttrMask::STATE.with(AttrMask::RQ_PSN),
        };
        let o = RdmaCmOverrides {
            rq_psn: Some(Psn::new(5)),
            timeout: Some(3),
            ..Default::default()
        };
        o.apply(&mut a);
        assert_eq!(a.attr.rq_psn, Psn::new(5));
        assert_eq!(a.attr.timeout, 0);
    }

    #[test]
    fn create_qp_transitions() {
        let rc = create_qp_attrs(RdmaQpType::Connected);
        assert_eq!(rc.len(), 1);
        assert_eq!(rc[0].mask.0, 1 | 8 | 16 | 32);
        assert_eq!((rc[0].attr.port_num, rc[0].attr.qp_access_flags), (1, 0));
        let ud = create_qp_attrs(RdmaQpType::Ud {
            qkey: limits::RDMA_UDP_QKEY,
        });
        assert_eq!(ud.len(), 3);
        assert_eq!(ud[0].mask.0, 1 | 16 | 32 | 64);
        assert_eq!(ud[0].attr.qkey, 0x0123_4567);
        assert_eq!(ud[2].mask.0, 1 | (1 << 16));
    }
}
