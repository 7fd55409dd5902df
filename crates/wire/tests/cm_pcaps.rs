//! Golden tests of the CM messages against real Linux rdma_cm traffic
//! (rping between two rxe guests, `tests/data/rping_rdmacm.pcap` and
//! `v6_rping_rdmacm.pcap`): every MAD to QP 1 parses as a CM message,
//! re-emits byte for byte, and carries the values the brief read off the
//! captures (rdmacm.md §3.3), which are written out here by hand.

#[path = "common/pcap.rs"]
mod pcap;

use pcap::qp1_mads;
use softrdma_wire::cm::{
    attr, CmMadRepr, CmMsg, CmaHdrRepr, MsgRef, PortSpace, ServiceId, CMA_HDR_LEN,
};
use softrdma_wire::mad::{class, method, GSI_QKEY, MAD_LEN};
use softrdma_wire::{Gid, PKey, Psn, QKey, Qpn};
use std::net::IpAddr;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Parses, checks the MAD header and the encapsulation, re-emits.
fn parse_and_reemit(m: &pcap::CapturedMad) -> CmMadRepr<'_> {
    assert_eq!(m.mad.len(), MAD_LEN, "frame {}", m.frame);
    assert_eq!(m.qkey, GSI_QKEY, "frame {}", m.frame);
    assert_eq!(m.src_qp, Qpn::GSI, "frame {}", m.frame);
    let r = CmMadRepr::parse(&m.mad).unwrap_or_else(|e| panic!("frame {}: {e}", m.frame));
    assert_eq!(r.header.base_version, 1);
    assert_eq!(r.header.mgmt_class, class::CM);
    assert_eq!(r.header.class_version, 2);
    assert_eq!(r.header.method, method::SEND);
    assert_eq!(r.header.status, 0);
    assert_eq!(r.header.attr_mod, 0);
    let again = r.to_bytes().unwrap();
    assert_eq!(
        again[..],
        m.mad[..],
        "frame {} re-emits byte for byte",
        m.frame
    );
    r
}

/// Linux's TID: the MAD agent's hi_tid (2 in both guests) above the local
/// comm ID as the CPU reads a big-endian word on x86 (byte-swapped).
fn linux_tid(hi: u32, comm_id: u32) -> u64 {
    (hi as u64) << 32 | comm_id.swap_bytes() as u64
}

struct Expect {
    file: &'static str,
    frames: [usize; 5],
    client: IpAddr,
    server: IpAddr,
    client_comm: u32,
    server_comm: u32,
    qpn: u32,
    req_psn: u32,
    rep_psn: u32,
    src_port: u16,
    flow_label: u32,
}

fn check(e: &Expect) {
    let mads = qp1_mads(e.file);
    let frames: Vec<usize> = mads.iter().map(|m| m.frame).collect();
    assert_eq!(frames, e.frames, "{}: the CM MADs", e.file);
    let client_guid = 0x5054_00ff_fe12_0002u64;
    let server_guid = 0x5054_00ff_fe12_0001u64;
    let tid = linux_tid(2, e.client_comm);
    let names: Vec<&str> = mads
        .iter()
        .map(|m| parse_and_reemit(m).msg.name())
        .collect();
    assert_eq!(names, ["REQ", "REP", "RTU", "DREQ", "DREP"]);

    // REQ, client -> server.
    let m = &mads[0];
    assert_eq!((m.src, m.dst), (e.client, e.server));
    let r = parse_and_reemit(m);
    assert_eq!(r.header.tid, tid);
    let CmMsg::Req(req) = r.msg else { panic!() };
    assert_eq!(req.local_comm_id, e.client_comm);
    assert_eq!(req.vendor_id, 0);
    assert_eq!(req.service_id, ServiceId::rdma_cm(PortSpace::Tcp, 7174));
    assert_eq!(req.service_id.0, 0x0000_0000_0106_1c06);
    assert_eq!(req.local_ca_guid, client_guid);
    assert_eq!(req.local_qkey, QKey(0));
    assert_eq!(req.local_qpn, Qpn::new(e.qpn));
    assert_eq!((req.responder_resources, req.initiator_depth), (1, 1));
    assert_eq!((req.local_eecn, req.remote_eecn), (0, 0));
    assert_eq!(req.remote_cm_response_timeout, 20);
    assert_eq!(req.transport_service_type, 0, "RC");
    assert!(!req.flow_control);
    assert_eq!(req.starting_psn, Psn::new(e.req_psn));
    assert_eq!(req.local_cm_response_timeout, 20);
    assert_eq!(req.retry_count, 7);
    assert_eq!(req.pkey, PKey::DEFAULT);
    assert_eq!(req.path_mtu, 3, "1024");
    assert!(!req.rdc_exists);
    assert_eq!(req.rnr_retry_count, 7);
    assert_eq!(req.max_cm_retries, 15);
    assert!(!req.srq);
    assert_eq!(req.extended_transport_type, 0);
    let p = req.primary;
    assert_eq!((p.local_lid, p.remote_lid), (0xffff, 0xffff));
    assert_eq!(p.local_gid, Gid::from_ip(e.client));
    assert_eq!(p.remote_gid, Gid::from_ip(e.server));
    assert_eq!(p.flow_label, e.flow_label);
    assert_eq!(p.packet_rate, 0);
    assert_eq!(p.traffic_class, 0);
    assert_eq!(p.hop_limit, 64);
    assert_eq!(p.sl, 0);
    assert!(!p.subnet_local);
    assert_eq!(p.local_ack_timeout, 19);
    assert_eq!(req.alternate, Default::default());
    assert!(!req.alternate.is_present());
    assert!(!req.sap_supported);
    assert_eq!(req.private_data.len(), 92);
    let cma = CmaHdrRepr::parse_private(req.private_data).unwrap();
    assert_eq!(cma.src_port, e.src_port);
    assert_eq!((cma.src, cma.dst), (e.client, e.server));
    assert!(req.private_data[CMA_HDR_LEN..].iter().all(|&b| b == 0));
    // The flow label is Linux's hash of the rdma_cm ports.
    assert_eq!((e.src_port as u32 * 31 + 7174) & 0xf_ffff, e.flow_label);

    // REP, server -> client, same TID.
    let m = &mads[1];
    assert_eq!((m.src, m.dst), (e.server, e.client));
    let r = parse_and_reemit(m);
    assert_eq!(r.header.tid, tid);
    let CmMsg::Rep(rep) = r.msg else { panic!() };
    assert_eq!(rep.local_comm_id, e.server_comm);
    assert_eq!(rep.remote_comm_id, e.client_comm);
    assert_eq!(rep.local_qkey, QKey(0));
    assert_eq!(rep.local_qpn, Qpn::new(e.qpn));
    assert_eq!(rep.local_eecn, 0);
    assert_eq!(rep.starting_psn, Psn::new(e.rep_psn));
    assert_eq!(rep.vendor_id, 0);
    assert_eq!((rep.responder_resources, rep.initiator_depth), (1, 1));
    assert_eq!(rep.target_ack_delay, 15);
    assert_eq!(rep.failover_accepted, 0);
    assert!(!rep.flow_control);
    assert_eq!(rep.rnr_retry_count, 7);
    assert!(!rep.srq);
    assert_eq!(rep.local_ca_guid, server_guid);
    assert!(rep.private_data.iter().all(|&b| b == 0));

    // RTU, client -> server, the REQ's TID.
    let r = parse_and_reemit(&mads[2]);
    assert_eq!(r.header.tid, tid);
    let CmMsg::Rtu(rtu) = r.msg else { panic!() };
    assert_eq!(
        (rtu.local_comm_id, rtu.remote_comm_id),
        (e.client_comm, e.server_comm)
    );

    // DREQ from the client (its TID again: cm_form_tid of its comm ID) with
    // the server's QPN, and the server's DREP echoing that TID.
    let m = &mads[3];
    assert_eq!((m.src, m.dst), (e.client, e.server));
    let r = parse_and_reemit(m);
    assert_eq!(r.header.tid, tid);
    let CmMsg::Dreq(dreq) = r.msg else { panic!() };
    assert_eq!(
        (dreq.local_comm_id, dreq.remote_comm_id),
        (e.client_comm, e.server_comm)
    );
    assert_eq!(dreq.remote_qpn, Qpn::new(e.qpn));
    let r = parse_and_reemit(&mads[4]);
    assert_eq!(r.header.tid, tid);
    let CmMsg::Drep(drep) = r.msg else { panic!() };
    assert_eq!(
        (drep.local_comm_id, drep.remote_comm_id),
        (e.server_comm, e.client_comm)
    );
}

#[test]
fn rping_over_ipv4() {
    check(&Expect {
        file: "rping_rdmacm.pcap",
        frames: [1, 2, 3, 40, 41],
        client: ip("198.18.0.2"),
        server: ip("198.18.0.1"),
        client_comm: 0x6bfb_2532,
        server_comm: 0x649d_db5a,
        qpn: 0x27,
        req_psn: 0xccc3b7,
        rep_psn: 0x3f3c91,
        src_port: 54667,
        flow_label: 0x9f7db,
    });
}

#[test]
fn rping_over_ipv6() {
    check(&Expect {
        file: "v6_rping_rdmacm.pcap",
        frames: [3, 6, 7, 44, 45],
        client: ip("2001:db8::2"),
        server: ip("2001:db8::1"),
        client_comm: 0x88cb_3989,
        server_comm: 0xc4fe_3070,
        qpn: 0x18,
        req_psn: 0xa9374e,
        rep_psn: 0x1764d1,
        src_port: 37566,
        flow_label: 0x1e108,
    });
}

#[test]
fn attribute_ids_are_the_spec_values() {
    assert_eq!(
        attr::CONNECTION,
        [0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18]
    );
    assert_eq!((attr::REQ, attr::DREP, attr::SIDR_REP), (0x10, 0x16, 0x18));
    assert_eq!(MsgRef::REP.0, 1);
}
