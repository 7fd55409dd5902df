//! Replays the CM side of real Linux rping sessions between two rxe
//! guests (`tests/data/rping_rdmacm.pcap`, `v6_rping_rdmacm.pcap`).
//!
//! - As the server: the captured REQ goes into a CM that listens like
//!   rping's server; its REP, and the DREP for the captured DREQ, must be
//!   the captured ones.
//! - As the client: a CM configured like rping's client (Linux 6.1
//!   rdma_cm: its node GUID, rping's ports and conn_param, the PSN it
//!   drew) must send the captured REQ, RTU and DREQ, and take the captured
//!   REP and DREP.
//!
//! What is masked, and why: only our own Local Communication ID (and the
//! low half of the TIDs we start, which Linux makes from it). Linux draws
//! its comm IDs at random, and so does this CM, from its own key; the
//! tests check instead that the TID's low half is the byte-swapped comm ID
//! (`cm_form_tid` on a little-endian CPU). The captured messages we feed
//! back carry the rxe peer's idea of our comm ID (its Remote Communication
//! ID field), which is patched to ours, as it would be on the wire. Every
//! other byte is compared: starting PSNs, GUIDs, QPNs, ports and the flow
//! label are inputs the rdma_cm layer supplies and are set to the
//! captured values.

#[path = "../../wire/tests/common/pcap.rs"]
mod pcap;

use softrdma_cm::negotiate::{self, ConnParam, QpState, RdmaCmOverrides};
use softrdma_cm::{Cm, CmConfig, Event, Instant, QpType, State};
use softrdma_wire::cm::{CmaHdrRepr, PortSpace, ServiceId};
use softrdma_wire::mad::MAD_HEADER_LEN;
use softrdma_wire::{Gid, Psn, Qpn};
use std::net::IpAddr;

const CLIENT_GUID: u64 = 0x5054_00ff_fe12_0002;
const SERVER_GUID: u64 = 0x5054_00ff_fe12_0001;
/// Offset of a message's first comm ID (Local) in the MAD, and the second.
const LOCAL_COMM: usize = MAD_HEADER_LEN;
const REMOTE_COMM: usize = MAD_HEADER_LEN + 4;

struct Session {
    file: &'static str,
    client: IpAddr,
    server: IpAddr,
    src_port: u16,
    qpn: u32,
    req_psn: u32,
    rep_psn: u32,
}

const V4: Session = Session {
    file: "rping_rdmacm.pcap",
    client: IpAddr::V4(std::net::Ipv4Addr::new(198, 18, 0, 2)),
    server: IpAddr::V4(std::net::Ipv4Addr::new(198, 18, 0, 1)),
    src_port: 54667,
    qpn: 0x27,
    req_psn: 0xccc3b7,
    rep_psn: 0x3f3c91,
};

fn v6() -> Session {
    Session {
        file: "v6_rping_rdmacm.pcap",
        client: "2001:db8::2".parse().unwrap(),
        server: "2001:db8::1".parse().unwrap(),
        src_port: 37566,
        qpn: 0x18,
        req_psn: 0xa9374e,
        rep_psn: 0x1764d1,
    }
}

fn rping_sid() -> ServiceId {
    ServiceId::rdma_cm(PortSpace::Tcp, 7174)
}

/// rping's conn_param (responder resources and initiator depth 1, the
/// library defaults of 7 retries) with the session's QPN.
fn rping_conn(s: &Session) -> ConnParam {
    ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        qp_num: Qpn::new(s.qpn),
        ..Default::default()
    }
}

/// The REQ, REP, RTU, DREQ, DREP MADs of the capture.
fn captured(s: &Session) -> [[u8; 256]; 5] {
    let m = pcap::qp1_mads(s.file);
    assert_eq!(m.len(), 5);
    core::array::from_fn(|i| m[i].mad.as_slice().try_into().unwrap())
}

fn set_u32(mad: &mut [u8; 256], at: usize, v: u32) {
    mad[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn u32_at(mad: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(mad[at..at + 4].try_into().unwrap())
}

/// `ours` equals `theirs` except our Local Comm ID at `LOCAL_COMM`, and,
/// when `own_tid`, the TID's low half, which must be that comm ID swapped.
fn assert_same_but_comm_id(ours: &[u8; 256], theirs: &[u8; 256], comm: u32, own_tid: bool) {
    assert_eq!(u32_at(ours, LOCAL_COMM), comm);
    let mut a = *ours;
    let mut b = *theirs;
    set_u32(&mut a, LOCAL_COMM, 0);
    set_u32(&mut b, LOCAL_COMM, 0);
    if own_tid {
        assert_eq!(u32_at(ours, 12), comm.swap_bytes(), "TID low half");
        set_u32(&mut a, 12, 0);
        set_u32(&mut b, 12, 0);
    }
    for i in 0..256 {
        assert_eq!(a[i], b[i], "byte {i} (MAD offset)");
    }
}

fn drain(cm: &mut Cm) -> Vec<[u8; 256]> {
    std::iter::from_fn(|| cm.poll_transmit())
        .map(|t| t.mad)
        .collect()
}

fn replay_as_server(s: &Session) {
    let [req, rep, rtu, dreq, drep] = captured(s);
    let mut cm = Cm::new(CmConfig::new(SERVER_GUID, [11, 12]));
    let now = Instant(0);
    cm.listen(rping_sid()).unwrap();
    cm.handle_mad(now, s.client, Qpn::GSI, &req);
    assert!(drain(&mut cm).is_empty());
    let Some(Event::ConnectRequest(cr)) = cm.poll_event() else {
        panic!("no CONNECT_REQUEST")
    };
    let cma = cr.cma.expect("rdma_cm header");
    assert_eq!(
        (cma.src, cma.src_port, cma.dst),
        (s.client, s.src_port, s.server)
    );
    let param = negotiate::conn_param_from_req(&cr.req());
    assert_eq!(
        (
            param.responder_resources,
            param.initiator_depth,
            param.retry_count,
            param.rnr_retry_count
        ),
        (1, 1, 7, 7)
    );
    assert_eq!(param.qp_num, Qpn::new(s.qpn));
    assert_eq!(param.private_data.len(), 56);
    let id = cr.id;

    // rdma_accept: the QP goes to RTS before the REP.
    let ours = RdmaCmOverrides {
        rq_psn: Some(Psn::new(s.rep_psn)),
        ..Default::default()
    };
    let mut rtr = cm.init_qp_attr(id, QpState::Rtr).unwrap();
    ours.apply(&mut rtr);
    assert_eq!(rtr.attr.dest_qp_num, Qpn::new(s.qpn));
    assert_eq!(rtr.attr.rq_psn, Psn::new(s.rep_psn));
    assert_eq!(rtr.attr.path_mtu, 3);
    assert_eq!(rtr.attr.ah_attr.dgid, Gid::from_ip(s.client));
    assert_eq!(rtr.attr.ah_attr.sgid, Gid::from_ip(s.server));
    assert_eq!(
        rtr.attr.ah_attr.flow_label,
        negotiate::roce_flow_label(s.src_port, 7174)
    );
    let rts = cm.init_qp_attr(id, QpState::Rts).unwrap();
    assert_eq!(rts.attr.sq_psn, Psn::new(s.req_psn));
    assert_eq!(
        (rts.attr.retry_cnt, rts.attr.rnr_retry, rts.attr.timeout),
        (7, 7, 19)
    );

    let rep_params = negotiate::rep_params(Psn::new(s.rep_psn), &rping_conn(s)).unwrap();
    cm.accept(now, id, &rep_params).unwrap();
    let out = drain(&mut cm);
    assert_eq!(out.len(), 1);
    assert_same_but_comm_id(&out[0], &rep, id.comm_id(), false);

    // The captured RTU, addressed to our comm ID.
    let mut rtu = rtu;
    set_u32(&mut rtu, REMOTE_COMM, id.comm_id());
    cm.handle_mad(now, s.client, Qpn::GSI, &rtu);
    assert_eq!(cm.poll_event(), Some(Event::Established { id }));

    // The client's DREQ; rping's server answers with rdma_disconnect.
    let mut dreq = dreq;
    set_u32(&mut dreq, REMOTE_COMM, id.comm_id());
    cm.handle_mad(now, s.client, Qpn::GSI, &dreq);
    assert!(matches!(cm.poll_event(), Some(Event::DisconnectRequest { id: i, .. }) if i == id));
    cm.disconnect(now, id, &[]).unwrap();
    let out = drain(&mut cm);
    assert_eq!(out.len(), 1);
    assert_same_but_comm_id(&out[0], &drep, id.comm_id(), false);
    assert_eq!(cm.state(id), Some(State::Timewait));
    cm.check_invariants().unwrap();
}

fn replay_as_client(s: &Session) {
    let [req, rep, rtu, dreq, drep] = captured(s);
    let mut cm = Cm::new(CmConfig::new(CLIENT_GUID, [21, 22]));
    let now = Instant(0);
    // rping's client: route resolved to the server, rdma_connect.
    let path = negotiate::rdma_cm_path(s.client, s.server, s.src_port, 7174, 3, 0, 64);
    let cma = CmaHdrRepr {
        src_port: s.src_port,
        src: s.client,
        dst: s.server,
    };
    let params = negotiate::req_params(
        &path,
        rping_sid(),
        &cma,
        QpType::Rc,
        Psn::new(s.req_psn),
        &rping_conn(s),
    )
    .unwrap();
    let id = cm.connect(now, &params).unwrap();
    let out = drain(&mut cm);
    assert_eq!(out.len(), 1);
    assert_same_but_comm_id(&out[0], &req, id.comm_id(), true);

    // The server's REP, addressed to our comm ID (and echoing our TID).
    let mut rep = rep;
    set_u32(&mut rep, REMOTE_COMM, id.comm_id());
    rep[12..16].copy_from_slice(&out[0][12..16]);
    cm.handle_mad(now, s.server, Qpn::GSI, &rep);
    let Some(Event::RepReceived(rr)) = cm.poll_event() else {
        panic!("no REP event")
    };
    let param = negotiate::conn_param_from_rep(&rr.rep());
    assert_eq!((param.responder_resources, param.initiator_depth), (1, 1));
    assert_eq!(param.qp_num, Qpn::new(s.qpn));
    let rts = cm.init_qp_attr(id, QpState::Rts).unwrap();
    assert_eq!(rts.attr.sq_psn, Psn::new(s.rep_psn));
    assert_eq!(
        (rts.attr.rnr_retry, rts.attr.timeout, rts.attr.max_rd_atomic),
        (7, 19, 1)
    );
    let rtr = cm.init_qp_attr(id, QpState::Rtr).unwrap();
    assert_eq!(rtr.attr.rq_psn, Psn::new(s.req_psn));
    assert_eq!(rtr.attr.dest_qp_num, Qpn::new(s.qpn));

    cm.establish(now, id, &[]).unwrap();
    let out = drain(&mut cm);
    assert_eq!(out.len(), 1);
    assert_same_but_comm_id(&out[0], &rtu, id.comm_id(), true);

    // rping's client disconnects first.
    cm.disconnect(now, id, &[]).unwrap();
    let out = drain(&mut cm);
    assert_eq!(out.len(), 1);
    assert_same_but_comm_id(&out[0], &dreq, id.comm_id(), true);

    let mut drep = drep;
    set_u32(&mut drep, REMOTE_COMM, id.comm_id());
    drep[12..16].copy_from_slice(&out[0][12..16]);
    cm.handle_mad(now, s.server, Qpn::GSI, &drep);
    assert!(matches!(
        cm.poll_event(),
        Some(Event::Disconnected {
            timed_out: false,
            ..
        })
    ));
    assert_eq!(cm.state(id), Some(State::Timewait));
    cm.check_invariants().unwrap();
}

#[test]
fn server_side_of_rping_over_ipv4() {
    replay_as_server(&V4);
}

#[test]
fn server_side_of_rping_over_ipv6() {
    replay_as_server(&v6());
}

#[test]
fn client_side_of_rping_over_ipv4() {
    replay_as_client(&V4);
}

#[test]
fn client_side_of_rping_over_ipv6() {
    replay_as_client(&v6());
}
