//! The InfiniBand communication manager (IBA vol. 1 ch. 12) as a sans-I/O
//! state machine: the REQ/MRA/REJ/REP/RTU/DREQ/DREP/SIDR exchanges on QP 1
//! that Linux's `ib_cm` (drivers/infiniband/core/cm.c) runs under rdma_cm,
//! with rdma_cm's own rules for what goes into them ([`negotiate`]).
//!
//! One [`Cm`] serves one device (one GID). It does no I/O, owns no thread,
//! reads no clock and knows QPs only as numbers.
//!
//! # Contract
//!
//! Inputs:
//! - calls on ids: [`Cm::listen`], [`Cm::connect`] (REQ), [`Cm::accept`]
//!   (REP), [`Cm::reject`] (REJ), [`Cm::establish`] (RTU),
//!   [`Cm::notify_established`], [`Cm::send_mra`], [`Cm::disconnect`]
//!   (DREQ or DREP), [`Cm::drop_request`], [`Cm::destroy`],
//!   [`Cm::sidr_request`], [`Cm::sidr_reply`]. Each checks the id's state
//!   and its parameters and fails with a [`CmError`] without side effects;
//! - [`Cm::handle_mad`]: a MAD that arrived on QP 1 (the UD payload, 256
//!   bytes) with its source IP and source QP;
//! - [`Cm::handle_timeout`]: the time has reached [`Cm::poll_timeout`].
//!
//! Outputs, polled after every input until they return `None`:
//! - [`Cm::poll_transmit`]: a MAD and where to send it. The driver sends it
//!   as a UD SEND_ONLY from its QP 1 to QP `dst_qpn` (1) at `dst`, Q_Key
//!   0x80010000, P_Key 0xFFFF;
//! - [`Cm::poll_event`]: an [`Event`] for an id;
//! - [`Cm::poll_timeout`]: the next deadline.
//!
//! Time is an [`Instant`] the driver supplies; the same inputs at the same
//! instants give the same outputs. Queues are bounded ([`limits`]): when
//! full, new requests are dropped unanswered (the peer retries) and MADs
//! are dropped and counted (timers resend what matters).
//!
//! # Ids
//!
//! An id ([`CmId`]) is named by its local communication ID: random, never
//! 0, not reused while the id or its timewait record lives. The driver
//! creates ids with `listen`, `connect` and `sidr_request`; the CM creates
//! passive ids for REQs and SIDR_REQs that match a listener and hands them
//! over in [`Event::ConnectRequest`] / [`Event::SidrRequest`]. Every id
//! lives until the driver calls [`Cm::destroy`], whatever its state; ids
//! go `Idle` after a REJ, a timeout or timewait, and destroy says goodbye
//! to the peer as Linux does in each state. A run that destroys all its
//! ids and waits out the timers ends [`Cm::is_quiescent`].
//!
//! Matching follows Linux: a listener per service ID (`listen` refuses a
//! second one; an rdma_cm layer with several listeners on one port but
//! different IPs keeps one CM listener and sorts requests by the cma
//! header in the event); duplicates by (CA GUID, remote comm ID); stale
//! connections by (CA GUID, QPN); REP/RTU/DREQ/DREP/MRA/REJ by comm IDs.
//!
//! # How a driver uses it
//!
//! The engine's progress thread keeps the `Cm` under a mutex beside the
//! transport core. It delivers every datagram to QP 1 with
//! `handle_mad(now, src_ip, src_qpn, payload)`, calls `handle_timeout`
//! when [`Cm::poll_timeout`] passes, and after either (and after any call
//! from an application thread) drains `poll_transmit` into its QP 1 and
//! `poll_event` into the rdma_cm event channels.
//!
//! The librdmacm layer maps its calls:
//!
//! | rdma_cm | CM |
//! | --- | --- |
//! | `rdma_listen` | [`Cm::listen`] on [`ServiceId::rdma_cm`] (once per service ID) |
//! | `rdma_connect` (RC) | [`negotiate::req_params`], then [`Cm::connect`] |
//! | `rdma_connect` (UD) | [`negotiate::sidr_req_params`], then [`Cm::sidr_request`] |
//! | CONNECT_REQUEST | [`Event::ConnectRequest`]: check the cma header, the bound IP and the QP type, else `reject(28)` |
//! | `rdma_accept` (RC) | [`Cm::init_qp_attr`] for INIT/RTR/RTS, then [`Cm::accept`] with [`negotiate::rep_params`] |
//! | `rdma_accept` (UD) | [`Cm::sidr_reply`] (status 0, QPN, Q_Key) |
//! | `rdma_reject` | [`Cm::reject`] with [`RejReason::CONSUMER_DEFINED`] (UD: `sidr_reply` REJECT) |
//! | REP (active) | [`Event::RepReceived`]: QP to RTR/RTS, [`Cm::establish`], report ESTABLISHED; or CONNECT_RESPONSE and `rdma_establish` later |
//! | ESTABLISHED (passive) | [`Event::Established`] (RTU, or [`Cm::notify_established`] on the QP's first packet) |
//! | `rdma_disconnect` | QP to ERR, [`Cm::disconnect`] |
//! | DISCONNECTED | [`Event::DisconnectRequest`] or [`Event::Disconnected`], whichever comes first |
//! | REJECTED / UNREACHABLE / TIMEWAIT_EXIT | [`Event::Rejected`] / [`Event::Unreachable`] / [`Event::TimewaitExit`] |
//! | full backlog | [`Cm::drop_request`] (no REJ: the requester retries) |
//! | `rdma_destroy_id` | [`Cm::destroy`] |
//! | `rdma_init_qp_attr` | [`Cm::init_qp_attr`] + [`negotiate::RdmaCmOverrides`] |
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cm;
pub mod event;
pub mod idgen;
pub mod limits;
pub mod negotiate;
pub mod params;
pub mod rdma;

pub use crate::cm::{Cm, CmConfig, Counters, IdInfo, State, Transmit};
pub use event::{ConnectRequest, Event, Rejected, RepReceived, SidrReply, SidrRequest, Unanswered};
pub use params::{Ece, Path, QpType, RepParams, ReqParams, SidrRepParams, SidrReqParams};
pub use softrdma_wire::cm::{PortSpace, RejReason, ServiceId, SidrStatus};

use core::fmt;

/// A point in time in nanoseconds since an origin the driver chooses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(pub u64);

impl Instant {
    /// `self + ns`, saturating.
    pub const fn add_ns(self, ns: u64) -> Instant {
        Instant(self.0.saturating_add(ns))
    }
    /// `self + ms` milliseconds, saturating.
    pub const fn add_ms(self, ms: u64) -> Instant {
        self.add_ns(limits::ms_to_ns(ms))
    }
    /// Nanoseconds from `earlier` to `self` (0 if `earlier` is later).
    pub const fn since(self, earlier: Instant) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

/// An id: its local communication ID.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CmId(pub(crate) u32);

impl CmId {
    /// The id with this local comm ID (for a layer that stores comm IDs;
    /// the CM answers [`CmError::UnknownId`] for ids it does not have).
    pub const fn from_comm_id(comm_id: u32) -> CmId {
        CmId(comm_id)
    }
    /// The local communication ID (what the peer sees as our comm ID).
    pub const fn comm_id(self) -> u32 {
        self.0
    }
}

impl fmt::Debug for CmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CmId({:#010x})", self.0)
    }
}
impl fmt::Display for CmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#010x}", self.0)
    }
}

/// Why a call on the CM failed. Nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    /// No such id (never created, or destroyed).
    #[error("no such CM id")]
    UnknownId,
    /// The call does not apply in the id's state (Linux: -EINVAL, or
    /// -EISCONN for `notify_established` on a connected id).
    #[error("not allowed in state {0:?}")]
    InvalidState(State),
    /// A parameter does not fit its message field.
    #[error("invalid parameter: {0}")]
    InvalidParam(&'static str),
    /// Someone already listens on the service ID.
    #[error("service ID already has a listener")]
    Busy,
    /// The id table is full.
    #[error("too many CM ids")]
    TooManyIds,
}
