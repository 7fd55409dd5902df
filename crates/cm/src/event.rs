//! What the CM tells the driver ([`Cm::poll_event`](crate::Cm::poll_event)).
//!
//! Received messages come with their fields as Reprs whose private data
//! points into the event (`req()`, `rep()`): the whole private-data field,
//! as the kernel reports it (IB CM has no length for it).

use crate::CmId;
use softrdma_wire::cm::{
    private_len, CmaHdrRepr, MsgRef, RejReason, RepRepr, ReqRepr, ServiceId, SidrStatus,
};
use softrdma_wire::{PKey, QKey, Qpn};
use std::net::IpAddr;

/// An event of one id. Every id gets at most one of `Established`,
/// `Rejected`, `Unreachable` for its connection attempt, and at most one
/// of `DisconnectRequest`/`Disconnected` for its teardown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A REQ for a listener: `id` is a new id the driver now owns (accept,
    /// reject or destroy it). rdma_cm: `RDMA_CM_EVENT_CONNECT_REQUEST`
    /// (after its own checks of the cma header).
    ConnectRequest(Box<ConnectRequest>),
    /// The REP to our REQ. The driver moves its QP to RTR and RTS and calls
    /// [`Cm::establish`](crate::Cm::establish) (RTU), or rejects.
    /// rdma_cm: `ESTABLISHED` (it has the QP) or `CONNECT_RESPONSE`.
    RepReceived(Box<RepReceived>),
    /// The passive side is connected: an RTU arrived, or the driver called
    /// [`Cm::notify_established`](crate::Cm::notify_established).
    /// rdma_cm: `RDMA_CM_EVENT_ESTABLISHED`.
    Established {
        /// The id.
        id: CmId,
    },
    /// The peer rejected. rdma_cm: `RDMA_CM_EVENT_REJECTED`, status =
    /// reason.
    Rejected(Box<Rejected>),
    /// A message went unanswered through all its retries (or a SIDR_REP
    /// said no). rdma_cm: `RDMA_CM_EVENT_UNREACHABLE`.
    Unreachable {
        /// The id.
        id: CmId,
        /// Which message.
        what: Unanswered,
    },
    /// The peer sent a DREQ; the driver moves its QP to ERR and calls
    /// [`Cm::disconnect`](crate::Cm::disconnect) (DREP).
    /// rdma_cm: `RDMA_CM_EVENT_DISCONNECTED`.
    DisconnectRequest {
        /// The id.
        id: CmId,
        /// The DREQ's private data (220 bytes).
        private_data: Vec<u8>,
    },
    /// Our DREQ was answered by a DREP, or went unanswered (`timed_out`).
    /// The id is in timewait. rdma_cm: `RDMA_CM_EVENT_DISCONNECTED`
    /// (status -ETIMEDOUT when timed out), unless already reported.
    Disconnected {
        /// The id.
        id: CmId,
        /// The DREQ was never answered.
        timed_out: bool,
        /// The DREP's private data (224 bytes; empty when timed out).
        private_data: Vec<u8>,
    },
    /// The id left timewait and is idle. rdma_cm:
    /// `RDMA_CM_EVENT_TIMEWAIT_EXIT`.
    TimewaitExit {
        /// The id.
        id: CmId,
    },
    /// A SIDR_REQ for a listener: `id` is a new id; answer it with
    /// [`Cm::sidr_reply`](crate::Cm::sidr_reply) or destroy it (which
    /// answers REJECT). rdma_cm: `CONNECT_REQUEST` on a UD id.
    SidrRequest(Box<SidrRequest>),
    /// The SIDR_REP to our SIDR_REQ, whatever its status. rdma_cm:
    /// `ESTABLISHED` (status 0) or `UNREACHABLE` (status = SIDR status).
    SidrReply(Box<SidrReply>),
}

impl Event {
    /// The id the event is about.
    pub fn id(&self) -> CmId {
        match self {
            Event::ConnectRequest(e) => e.id,
            Event::RepReceived(e) => e.id,
            Event::Established { id } => *id,
            Event::Rejected(e) => e.id,
            Event::Unreachable { id, .. } => *id,
            Event::DisconnectRequest { id, .. } => *id,
            Event::Disconnected { id, .. } => *id,
            Event::TimewaitExit { id } => *id,
            Event::SidrRequest(e) => e.id,
            Event::SidrReply(e) => e.id,
        }
    }
}

/// The message that went unanswered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unanswered {
    /// Our REQ (no REP, REJ or MRA): Linux `IB_CM_REQ_ERROR`.
    Req,
    /// Our REP (no RTU): `IB_CM_REP_ERROR`.
    Rep,
    /// Our SIDR_REQ: `IB_CM_SIDR_REQ_ERROR`.
    SidrReq,
}

/// A REQ that found a listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectRequest {
    /// The new id (state `MraReqSent`, or `ReqRcvd` without the delayed
    /// MRA of [`CmConfig::mra_delay_timeout`](crate::CmConfig)).
    pub id: CmId,
    /// The listener the service ID matched.
    pub listen_id: CmId,
    /// The source IP of the MAD (the requester's GID).
    pub src: IpAddr,
    /// The MAD's transaction ID.
    pub tid: u64,
    /// The MAD's attribute modifier (ECE).
    pub attr_mod: u32,
    /// The rdma_cm header at the start of the private data, when it is one
    /// Linux accepts (version 0, IP version 4 or 6). rdma_cm rejects a REQ
    /// without one (REJ 28), and checks its destination IP against the
    /// listener's bound address.
    pub cma: Option<CmaHdrRepr>,
    pub(crate) req: ReqRepr<'static>,
    pub(crate) private: [u8; private_len::REQ],
}

impl ConnectRequest {
    /// The REQ's fields; private data is the whole 92-byte field.
    pub fn req(&self) -> ReqRepr<'_> {
        ReqRepr {
            private_data: &self.private,
            ..self.req
        }
    }
    /// The user's private data after the rdma_cm header (56 bytes), or all
    /// of it when there is no header.
    pub fn user_private_data(&self) -> &[u8] {
        match self.cma {
            Some(_) => &self.private[softrdma_wire::cm::CMA_HDR_LEN..],
            None => &self.private,
        }
    }
}

/// A REP to our REQ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepReceived {
    /// The id.
    pub id: CmId,
    /// The MAD's attribute modifier (ECE).
    pub attr_mod: u32,
    pub(crate) rep: RepRepr<'static>,
    pub(crate) private: [u8; private_len::REP],
}

impl RepReceived {
    /// The REP's fields; private data is the whole 196-byte field.
    pub fn rep(&self) -> RepRepr<'_> {
        RepRepr {
            private_data: &self.private,
            ..self.rep
        }
    }
}

/// A REJ for one of our ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    /// The id.
    pub id: CmId,
    /// The reason.
    pub reason: RejReason,
    /// Which of our messages was rejected.
    pub message_rejected: MsgRef,
    /// The meaningful bytes of the Additional Rejection Information.
    pub ari: Vec<u8>,
    /// The REJ's private data (148 bytes).
    pub private_data: Vec<u8>,
}

/// A SIDR_REQ that found a listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidrRequest {
    /// The new id (state `SidrReqRcvd`).
    pub id: CmId,
    /// The listener.
    pub listen_id: CmId,
    /// The source IP of the MAD.
    pub src: IpAddr,
    /// The source QP of the MAD (1).
    pub src_qpn: Qpn,
    /// P_Key.
    pub pkey: PKey,
    /// Service ID.
    pub service_id: ServiceId,
    /// The rdma_cm header, when valid.
    pub cma: Option<CmaHdrRepr>,
    /// Private data (216 bytes).
    pub private_data: Vec<u8>,
}

/// A SIDR_REP to our SIDR_REQ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidrReply {
    /// The id (now idle).
    pub id: CmId,
    /// The address the reply came from.
    pub src: IpAddr,
    /// Status.
    pub status: SidrStatus,
    /// The service's UD QP.
    pub qpn: Qpn,
    /// Its Q_Key.
    pub qkey: QKey,
    /// Vendor ID (24 bits).
    pub vendor_id: u32,
    /// Additional information (the meaningful bytes).
    pub info: Vec<u8>,
    /// Private data (136 bytes).
    pub private_data: Vec<u8>,
}
