//! rdma_cm's events as data: librdmacm's event types and parameters, the
//! states of an id (Linux's `enum rdma_cm_state`), and what an event of a
//! device's CM means for the rdma_cm id it names ([`report`], Linux's
//! `cma_ib_handler`).

use crate::negotiate::{self, AhAttr};
use crate::{Event, Path, SidrStatus};
use softrdma_wire::Qpn;

/// Linux's `ETIMEDOUT` (asm-generic/errno.h): the status of an
/// UNREACHABLE for an unanswered REQ and of a DISCONNECTED whose DREQ went
/// unanswered, negated.
pub const ETIMEDOUT: i32 = 110;

/// The rdma_cm state of an id (Linux `enum rdma_cm_state`, without the
/// transient query states: resolution is immediate here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdState {
    /// Created.
    Idle,
    /// `rdma_bind_addr` done.
    AddrBound,
    /// `rdma_resolve_addr` done.
    AddrResolved,
    /// `rdma_resolve_route` done (or a REJ ended a connect).
    RouteResolved,
    /// Connecting or connected.
    Connect,
    /// Disconnected (by either side).
    Disconnect,
    /// Listening.
    Listen,
}

/// The events of `enum rdma_cm_event_type`, with its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum EventType {
    /// `rdma_resolve_addr` done.
    AddrResolved = 0,
    /// `rdma_resolve_addr` failed (status: -errno).
    AddrError = 1,
    /// `rdma_resolve_route` done.
    RouteResolved = 2,
    /// `rdma_resolve_route` failed.
    RouteError = 3,
    /// A connection request: `id` is a new id, `listen_id` the listener.
    ConnectRequest = 4,
    /// The REP to a connect from an id without a QP: call
    /// `rdma_establish` (or reject).
    ConnectResponse = 5,
    /// Moving the QP to RTR/RTS after the REP failed.
    ConnectError = 6,
    /// The peer did not answer (status -ETIMEDOUT), or a SIDR_REP said no
    /// (status: its SIDR status).
    Unreachable = 7,
    /// The peer rejected (status: the IB reject reason, e.g. 8 = no one
    /// listens, 28 = the application rejected).
    Rejected = 8,
    /// Connected (UD: the SIDR_REP with the peer's QPN and Q_Key).
    Established = 9,
    /// The connection is closed (by either side; status -ETIMEDOUT when
    /// our DREQ went unanswered).
    Disconnected = 10,
    /// Never sent by softrdma.
    DeviceRemoval = 11,
    /// A join completed (`join_multicast`: the group's address handle in
    /// the event's UD parameters).
    MulticastJoin = 12,
    /// A join failed (status -1, as the kernel's for a failed attach).
    MulticastError = 13,
    /// Never sent by softrdma.
    AddrChange = 14,
    /// The connection left timewait.
    TimewaitExit = 15,
}

impl EventType {
    /// librdmacm's name (`rdma_event_str`).
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::AddrResolved => "RDMA_CM_EVENT_ADDR_RESOLVED",
            EventType::AddrError => "RDMA_CM_EVENT_ADDR_ERROR",
            EventType::RouteResolved => "RDMA_CM_EVENT_ROUTE_RESOLVED",
            EventType::RouteError => "RDMA_CM_EVENT_ROUTE_ERROR",
            EventType::ConnectRequest => "RDMA_CM_EVENT_CONNECT_REQUEST",
            EventType::ConnectResponse => "RDMA_CM_EVENT_CONNECT_RESPONSE",
            EventType::ConnectError => "RDMA_CM_EVENT_CONNECT_ERROR",
            EventType::Unreachable => "RDMA_CM_EVENT_UNREACHABLE",
            EventType::Rejected => "RDMA_CM_EVENT_REJECTED",
            EventType::Established => "RDMA_CM_EVENT_ESTABLISHED",
            EventType::Disconnected => "RDMA_CM_EVENT_DISCONNECTED",
            EventType::DeviceRemoval => "RDMA_CM_EVENT_DEVICE_REMOVAL",
            EventType::MulticastJoin => "RDMA_CM_EVENT_MULTICAST_JOIN",
            EventType::MulticastError => "RDMA_CM_EVENT_MULTICAST_ERROR",
            EventType::AddrChange => "RDMA_CM_EVENT_ADDR_CHANGE",
            EventType::TimewaitExit => "RDMA_CM_EVENT_TIMEWAIT_EXIT",
        }
    }
}

/// `struct rdma_conn_param`: what a connect or accept asks for, and what
/// connection events report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnParam {
    /// Private data. Sent: the caller's (≤ 56 bytes in a REQ, 196 in a
    /// REP, 148 in a REJ). Reported: the whole field as the kernel reports
    /// it (56 for a request, 196 for a REP, 148 for a REJ).
    pub private_data: Vec<u8>,
    /// RDMA READ/atomics accepted at once (0xFF: the device maximum).
    pub responder_resources: u8,
    /// RDMA READ/atomics issued at once (0xFF: the device maximum).
    pub initiator_depth: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// Transport retries of the peer's QP (capped at 7; ignored on accept).
    pub retry_count: u8,
    /// RNR retries (capped at 7).
    pub rnr_retry_count: u8,
    /// The QP has an SRQ (ids without a QP).
    pub srq: bool,
    /// The QP number (ids without a QP; reported: the peer's).
    pub qp_num: u32,
}

impl Default for ConnParam {
    /// What librdmacm sends without a `conn_param`: device maxima, retry
    /// counts 7.
    fn default() -> Self {
        ConnParam {
            private_data: Vec::new(),
            responder_resources: 0xff,
            initiator_depth: 0xff,
            flow_control: false,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: false,
            qp_num: 0,
        }
    }
}

impl ConnParam {
    /// An all-zero parameter set (what events start from).
    pub fn zero() -> ConnParam {
        ConnParam {
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 0,
            rnr_retry_count: 0,
            ..Default::default()
        }
    }
}

/// `struct rdma_ud_param`: what UD events report.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct UdParam {
    /// Private data (180 bytes in a request, 136 in a SIDR_REP).
    pub private_data: Vec<u8>,
    /// The address handle attributes to reach the peer (ESTABLISHED).
    pub ah_attr: Option<AhAttr>,
    /// The peer's QP.
    pub qp_num: u32,
    /// The peer's Q_Key.
    pub qkey: u32,
}

impl From<negotiate::ConnParam> for ConnParam {
    /// The parameters a REQ or REP carried, as events report them.
    fn from(c: negotiate::ConnParam) -> ConnParam {
        ConnParam {
            private_data: c.private_data,
            responder_resources: c.responder_resources,
            initiator_depth: c.initiator_depth,
            flow_control: c.flow_control,
            retry_count: c.retry_count,
            rnr_retry_count: c.rnr_retry_count,
            srq: c.srq,
            qp_num: c.qp_num.value(),
        }
    }
}

/// What an event of the device's CM means for the rdma_cm id it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The rdma_cm event.
    pub event: EventType,
    /// 0, a negative errno, or the IB reject reason / SIDR status.
    pub status: i32,
    /// Connection parameters (RC events; zero where the event has none).
    pub conn: ConnParam,
    /// UD parameters (the SIDR_REP's).
    pub ud: Option<UdParam>,
    /// The peer's UD QP and Q_Key, which the id keeps (a successful
    /// SIDR_REP).
    pub remote_ud: Option<(Qpn, u32)>,
}

impl Report {
    fn new(event: EventType, status: i32) -> Report {
        Report {
            event,
            status,
            conn: ConnParam::zero(),
            ud: None,
            remote_ud: None,
        }
    }
}

/// What `ev` (an event of the device's CM for an id of this layer, not a
/// request: those make new ids) means for that id in state `state`, whose
/// route is `path` (Linux's `cma_ib_handler`): the rdma_cm event to queue,
/// if any, and the id's new state.
pub fn report(state: &mut IdState, path: Option<&Path>, ev: &Event) -> Option<Report> {
    Some(match ev {
        Event::ConnectRequest(_) | Event::SidrRequest(_) => return None,
        Event::RepReceived(r) => {
            let mut q = Report::new(EventType::ConnectResponse, 0);
            q.conn = negotiate::conn_param_from_rep(&r.rep()).into();
            q
        }
        Event::Established { .. } => Report::new(EventType::Established, 0),
        Event::Rejected(r) => {
            // The id leaves CONNECT for good.
            if *state == IdState::Connect {
                *state = IdState::RouteResolved;
            }
            let mut q = Report::new(EventType::Rejected, i32::from(r.reason.0));
            q.conn.private_data = r.private_data.clone();
            q
        }
        Event::Unreachable { .. } => Report::new(EventType::Unreachable, -ETIMEDOUT),
        Event::DisconnectRequest { .. } | Event::Disconnected { .. } => {
            // cma_comp_exch(CONNECT → DISCONNECT): reported once.
            if *state != IdState::Connect {
                return None;
            }
            *state = IdState::Disconnect;
            let timed_out = matches!(
                ev,
                Event::Disconnected {
                    timed_out: true,
                    ..
                }
            );
            Report::new(
                EventType::Disconnected,
                if timed_out { -ETIMEDOUT } else { 0 },
            )
        }
        Event::TimewaitExit { .. } => Report::new(EventType::TimewaitExit, 0),
        Event::SidrReply(r) => {
            let mut ud = UdParam {
                private_data: r.private_data.clone(),
                ..Default::default()
            };
            let mut q = if r.status == SidrStatus::SUCCESS {
                ud.qp_num = r.qpn.value();
                ud.qkey = r.qkey.0;
                ud.ah_attr = path.map(|p| AhAttr {
                    dgid: p.dgid,
                    sgid: p.sgid,
                    flow_label: p.flow_label,
                    hop_limit: p.hop_limit,
                    traffic_class: p.traffic_class,
                    sl: p.sl,
                    port_num: 1,
                });
                let mut q = Report::new(EventType::Established, 0);
                q.remote_ud = Some((r.qpn, r.qkey.0));
                q
            } else {
                Report::new(EventType::Unreachable, i32::from(r.status.0))
            };
            q.ud = Some(ud);
            q
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CmId, RejReason, SidrReply};
    use softrdma_wire::cm::MsgRef;
    use softrdma_wire::QKey;

    const ID: CmId = CmId::from_comm_id(7);

    #[test]
    fn a_disconnect_is_reported_once() {
        let mut st = IdState::Connect;
        let dreq = Event::DisconnectRequest {
            id: ID,
            private_data: Vec::new(),
        };
        let r = report(&mut st, None, &dreq).expect("DISCONNECTED");
        assert_eq!((r.event, r.status), (EventType::Disconnected, 0));
        assert_eq!(st, IdState::Disconnect);
        let late = Event::Disconnected {
            id: ID,
            timed_out: true,
            private_data: Vec::new(),
        };
        assert_eq!(report(&mut st, None, &late), None, "once");
        let mut st = IdState::Connect;
        let r = report(&mut st, None, &late).expect("DISCONNECTED");
        assert_eq!(r.status, -ETIMEDOUT);
    }

    #[test]
    fn a_rej_ends_the_connect() {
        let mut st = IdState::Connect;
        let rej = Event::Rejected(Box::new(crate::Rejected {
            id: ID,
            reason: RejReason::CONSUMER_DEFINED,
            message_rejected: MsgRef::REQ,
            ari: Vec::new(),
            private_data: b"no".to_vec(),
        }));
        let r = report(&mut st, None, &rej).expect("REJECTED");
        assert_eq!((r.event, r.status), (EventType::Rejected, 28));
        assert_eq!(r.conn.private_data, b"no");
        assert_eq!(st, IdState::RouteResolved);
        let tw = Event::TimewaitExit { id: ID };
        let r = report(&mut st, None, &tw).expect("TIMEWAIT_EXIT");
        assert_eq!(r.event, EventType::TimewaitExit);
    }

    #[test]
    fn a_sidr_rep_gives_the_peer() {
        let path = negotiate::rdma_cm_path(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            1,
            2,
            5,
            0,
            64,
        );
        let rep = |status| {
            Event::SidrReply(Box::new(SidrReply {
                id: ID,
                src: "10.0.0.2".parse().unwrap(),
                status,
                qpn: Qpn::new(0x42),
                qkey: QKey(0x0123_4567),
                vendor_id: 0,
                info: Vec::new(),
                private_data: vec![1, 2],
            }))
        };
        let mut st = IdState::Connect;
        let r = report(&mut st, Some(&path), &rep(SidrStatus::SUCCESS)).expect("ESTABLISHED");
        assert_eq!(r.event, EventType::Established);
        assert_eq!(r.remote_ud, Some((Qpn::new(0x42), 0x0123_4567)));
        let ud = r.ud.expect("UD parameters");
        assert_eq!((ud.qp_num, ud.private_data), (0x42, vec![1, 2]));
        assert_eq!(ud.ah_attr.map(|a| a.dgid), Some(path.dgid));
        let r = report(&mut st, Some(&path), &rep(SidrStatus::UNSUPPORTED)).expect("UNREACHABLE");
        assert_eq!((r.event, r.remote_ud), (EventType::Unreachable, None));
        assert_eq!(r.status, i32::from(SidrStatus::UNSUPPORTED.0));
    }
}
