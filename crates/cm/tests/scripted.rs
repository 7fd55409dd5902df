//! Scripted exchanges between two CMs at explicit virtual times, one rule
//! of Linux's CM (or of the IBA) per test. Expected values are written out
//! from the kernel sources and the brief (rdmacm.md §3), not computed by
//! the crate.

mod support;

use softrdma_cm::negotiate::{AttrMask, QpState, RdmaCmOverrides};
use softrdma_cm::{
    CmError, CmId, Event, Instant, RejReason, SidrRepParams, SidrReqParams, SidrStatus, State,
    Unanswered,
};
use softrdma_wire::cm::{CmMsg, MsgRef, PortSpace, ServiceId};
use softrdma_wire::mad::{GSI_QKEY, MAD_LEN};
use softrdma_wire::{Gid, PKey, Psn, QKey, Qpn};
use support::*;

fn linux_tid(comm: u32) -> u64 {
    2u64 << 32 | comm.swap_bytes() as u64
}

#[test]
fn connect_accept_establish_disconnect_timewait() {
    let mut p = Pair::new();
    let listen = p.b.listen(sid()).unwrap();
    let a = p.a.connect(p.now, &rping_req(0xccc3b7)).unwrap();
    assert_eq!(p.a.state(a), Some(State::ReqSent));

    let t = p.a_to_b();
    let m = parse(&t[0]);
    assert_eq!(m.header.tid, linux_tid(a.comm_id()));
    assert_eq!(t[0].dst_qpn, Qpn::GSI);
    let CmMsg::Req(req) = m.msg else { panic!() };
    assert_eq!(req.local_comm_id, a.comm_id());
    assert_eq!(req.local_ca_guid, GUID_A);

    let Event::ConnectRequest(cr) = one_event(&mut p.b) else {
        panic!()
    };
    assert_eq!(cr.listen_id, listen);
    assert_eq!(cr.src, ip_a());
    let cma = cr.cma.expect("rdma_cm header");
    assert_eq!((cma.src, cma.dst, cma.src_port), (ip_a(), ip_b(), 54667));
    assert_eq!(cr.req().starting_psn, Psn::new(0xccc3b7));
    assert_eq!(cr.user_private_data().len(), 56);
    // rdma_cm's delayed MRA: armed, nothing sent.
    assert_eq!(p.b.state(cr.id), Some(State::MraReqSent));
    assert!(p.b.poll_transmit().is_none());

    p.b.accept(p.now, cr.id, &rping_rep(0x3f3c91)).unwrap();
    assert_eq!(p.b.state(cr.id), Some(State::RepSent));
    let t = p.b_to_a();
    let m = parse(&t[0]);
    assert_eq!(
        m.header.tid,
        linux_tid(a.comm_id()),
        "REP echoes the REQ's TID"
    );
    let CmMsg::Rep(rep) = m.msg else { panic!() };
    assert_eq!(
        (rep.local_comm_id, rep.remote_comm_id),
        (cr.id.comm_id(), a.comm_id())
    );
    assert_eq!(rep.target_ack_delay, 15);
    assert_eq!(rep.local_ca_guid, GUID_B);

    let Event::RepReceived(rr) = one_event(&mut p.a) else {
        panic!()
    };
    assert_eq!(rr.rep().starting_psn, Psn::new(0x3f3c91));
    assert_eq!(p.a.state(a), Some(State::MraRepSent));
    p.a.establish(p.now, a, &[]).unwrap();
    let t = p.a_to_b();
    assert_eq!(parse(&t[0]).header.tid, linux_tid(a.comm_id()));
    assert!(matches!(only(&t, "RTU"), CmMsg::Rtu(r) if r.remote_comm_id == cr.id.comm_id()));
    assert_eq!(one_event(&mut p.b), Event::Established { id: cr.id });
    assert!(events(&mut p.a).is_empty(), "no event for our own RTU");

    // Disconnect from the client: DREQ (its own TID) with the server's QPN.
    p.at_ms(10);
    p.a.disconnect(p.now, a, &[]).unwrap();
    let t = p.a_to_b();
    let m = parse(&t[0]);
    assert_eq!(m.header.tid, linux_tid(a.comm_id()));
    let CmMsg::Dreq(dreq) = m.msg else { panic!() };
    assert_eq!(dreq.remote_qpn, Qpn::new(0x27));
    let e = one_event(&mut p.b);
    assert!(matches!(e, Event::DisconnectRequest { id, .. } if id == cr.id));
    p.b.disconnect(p.now, cr.id, &[]).unwrap();
    assert_eq!(p.b.state(cr.id), Some(State::Timewait));
    let t = p.b_to_a();
    assert_eq!(
        parse(&t[0]).header.tid,
        linux_tid(a.comm_id()),
        "DREP echoes the DREQ's TID"
    );
    assert!(matches!(
        one_event(&mut p.a),
        Event::Disconnected {
            timed_out: false,
            ..
        }
    ));
    assert_eq!(p.a.state(a), Some(State::Timewait));

    // Timewait: ms(19) = 2048 ms on both sides.
    p.at_ms(10 + 2047);
    p.tick();
    assert!(events(&mut p.a).is_empty() && events(&mut p.b).is_empty());
    p.at_ms(10 + 2048);
    p.tick();
    assert_eq!(one_event(&mut p.a), Event::TimewaitExit { id: a });
    assert_eq!(one_event(&mut p.b), Event::TimewaitExit { id: cr.id });
    for (cm, ids) in [(&mut p.a, vec![a]), (&mut p.b, vec![cr.id, listen])] {
        for id in ids {
            assert_eq!(
                cm.state(id).map(|s| s == State::Idle || s == State::Listen),
                Some(true)
            );
            cm.destroy(p.now, id).unwrap();
        }
        assert!(take_tx(cm).is_empty(), "idle ids leave silently");
        assert!(cm.is_quiescent());
        cm.check_invariants().unwrap();
    }
}

#[test]
fn qp_attributes_of_both_sides() {
    let mut p = Pair::new();
    p.b.listen(sid()).unwrap();
    let a = p.a.connect(p.now, &rping_req(0x111111)).unwrap();
    // The active side may go to INIT with its REQ out, not further.
    assert!(p.a.init_qp_attr(a, QpState::Init).is_ok());
    assert_eq!(
        p.a.init_qp_attr(a, QpState::Rtr),
        Err(CmError::InvalidState(State::ReqSent))
    );
    p.a_to_b();
    let Event::ConnectRequest(cr) = one_event(&mut p.b) else {
        panic!()
    };
    let s = cr.id;
    let info = p.b.info(s).unwrap();
    assert_eq!(
        (info.path.sgid, info.path.dgid),
        (Gid::from_ip(ip_b()), Gid::from_ip(ip_a()))
    );
    assert_eq!((info.path.packet_life_time, info.path.mtu), (18, 3));
    assert_eq!(
        (info.remote_comm_id, info.remote_qpn),
        (a.comm_id(), Qpn::new(0x27))
    );
    assert_eq!(
        info.listen_id,
        p.b.ids().find(|&i| p.b.state(i) == Some(State::Listen))
    );
    // Passive, before the REP: INIT with read/atomics (the REQ's
    // initiator depth is 1), RTR towards the requester, RTS with its PSN.
    let init = p.b.init_qp_attr(s, QpState::Init).unwrap();
    assert_eq!(init.mask.0, 1 | 8 | 16 | 32);
    assert_eq!(init.attr.qp_access_flags, 2 | 4 | 8);
    assert_eq!((init.attr.pkey_index, init.attr.port_num), (0, 1));
    let mut rtr = p.b.init_qp_attr(s, QpState::Rtr).unwrap();
    assert_eq!(
        rtr.mask.0,
        1 | (1 << 7) | (1 << 8) | (1 << 20) | (1 << 12) | (1 << 17) | (1 << 15)
    );
    assert_eq!(rtr.attr.ah_attr.dgid, Gid::from_ip(ip_a()));
    assert_eq!(rtr.attr.ah_attr.sgid, Gid::from_ip(ip_b()));
    assert_eq!(rtr.attr.ah_attr.flow_label, 0x9f7db);
    assert_eq!(rtr.attr.ah_attr.hop_limit, 64);
    assert_eq!(rtr.attr.path_mtu, 3);
    assert_eq!(rtr.attr.dest_qp_num, Qpn::new(0x27));
    assert_eq!(rtr.attr.max_dest_rd_atomic, 1);
    assert_eq!(rtr.attr.min_rnr_timer, 0, "655 ms, as rdma_cm leaves it");
    // rdma_cm's receive PSN is its own seq_num.
    RdmaCmOverrides {
        rq_psn: Some(Psn::new(0x222222)),
        ..Default::default()
    }
    .apply(&mut rtr);
    assert_eq!(rtr.attr.rq_psn, Psn::new(0x222222));
    let rts = p.b.init_qp_attr(s, QpState::Rts).unwrap();
    assert_eq!(
        rts.mask.0,
        1 | (1 << 16) | (1 << 10) | (1 << 11) | (1 << 13) | (1 << 9)
    );
    assert_eq!(
        rts.attr.sq_psn,
        Psn::new(0x111111),
        "the REQ's starting PSN"
    );
    assert_eq!((rts.attr.retry_cnt, rts.attr.rnr_retry), (7, 7));
    assert_eq!(rts.attr.max_rd_atomic, 1);
    assert_eq!(rts.attr.timeout, 19);

    p.b.accept(p.now, s, &rping_rep(0x222222)).unwrap();
    p.b_to_a();
    let _ = events(&mut p.a);
    let rtr = p.a.init_qp_attr(a, QpState::Rtr).unwrap();
    assert_eq!(rtr.attr.dest_qp_num, Qpn::new(0x27));
    assert_eq!(rtr.attr.rq_psn, Psn::new(0x111111));
    assert_eq!(rtr.attr.ah_attr.dgid, Gid::from_ip(ip_b()));
    let rts = p.a.init_qp_attr(a, QpState::Rts).unwrap();
    assert_eq!(
        rts.attr.sq_psn,
        Psn::new(0x222222),
        "the REP's starting PSN"
    );
    assert_eq!(rts.attr.rnr_retry, 7, "the REP's RNR retry count");
    assert_eq!(rts.attr.timeout, 19, "cm_ack_timeout(15, 19 - 1)");
    assert!(rts.mask.contains(AttrMask::TIMEOUT));
}

#[test]
fn req_without_listener_gets_rej_8_like_linux() {
    let mut p = Pair::new();
    let a = p.a.connect(p.now, &rping_req(1)).unwrap();
    p.a_to_b();
    assert!(events(&mut p.b).is_empty());
    assert_eq!(p.b.id_count(), 0, "no id kept");
    let t = p.b_to_a();
    assert_eq!(
        parse(&t[0]).header.tid,
        linux_tid(a.comm_id()),
        "TID echoed"
    );
    let CmMsg::Rej(rej) = only(&t, "REJ") else {
        panic!()
    };
    assert_eq!(rej.local_comm_id, 0);
    assert_eq!(rej.remote_comm_id, a.comm_id());
    assert_eq!(rej.message_rejected, MsgRef::REQ);
    assert_eq!(rej.reason, RejReason::INVALID_SERVICE_ID);
    assert_eq!(rej.reason.0, 8);
    let Event::Rejected(r) = one_event(&mut p.a) else {
        panic!()
    };
    assert_eq!((r.id, r.reason), (a, RejReason(8)));
    assert_eq!(r.private_data.len(), 148);
    assert_eq!(p.a.state(a), Some(State::Idle));
    // No more REQs.
    p.at_ms(100_000);
    p.tick();
    assert!(take_tx(&mut p.a).is_empty());
    p.a.destroy(p.now, a).unwrap();
    assert!(take_tx(&mut p.a).is_empty());
    assert!(p.a.is_quiescent() && p.b.is_quiescent());
}

#[test]
fn consumer_reject_carries_reason_28_and_private_data() {
    let mut p = Pair::new();
    p.b.listen(sid()).unwrap();
    let a = p.a.connect(p.now, &rping_req(1)).unwrap();
    p.a_to_b();
    let s = one_event(&mut p.b).id();
    p.b.reject(p.now, s, RejReason::CONSUMER_DEFINED, &[], b"go away")
        .unwrap();
    assert_eq!(p.b.state(s), Some(State::Idle));
    let t = p.b_to_a();
    let CmMsg::Rej(rej) = only(&t, "REJ") else {
        panic!()
    };
    // From MRA_REQ_SENT (rdma_cm's delayed MRA): our comm ID, REQ rejected.
    assert_eq!(
        (rej.local_comm_id, rej.message_rejected),
        (s.comm_id(), MsgRef::REQ)
    );
    let Event::Rejected(r) = one_event(&mut p.a) else {
        panic!()
    };
    assert_eq!((r.id, r.reason), (a, RejReason(28)));
    assert_eq!(&r.private_data[..8], b"go away\0");
    assert_eq!(p.a.state(a), Some(State::Idle));
    // Without the delayed MRA, from REQ_RCVD: Local Comm ID 0.
    let mut p = Pair::new();
    let mut cfg = p.b.config().clone();
    cfg.mra_delay_timeout = None;
    p.b = softrdma_cm::Cm::new(cfg);
    p.b.listen(sid()).unwrap();
    p.a.connect(p.now, &rping_req(1)).unwrap();
    p.a_to_b();
    let s = one_event(&mut p.b).id();
    assert_eq!(p.b.state(s), Some(State::ReqRcvd));
    p.b.reject(p.now, s, RejReason::CONSUMER_DEFINED, &[], &[])
        .unwrap();
    let t = take_tx(&mut p.b);
    let CmMsg::Rej(rej) = only(&t, "REJ") else {
        panic!()
    };
    assert_eq!(rej.local_comm_id, 0);
    assert_eq!(
        p.b.reject(p.now, s, RejReason(28), &[], &[]),
        Err(CmError::InvalidState(State::Idle))
    );
}

#[test]
fn req_is_retransmitted_every_6144_ms_fifteen_times_then_unreachable() {
    let mut p = Pair::new();
    let a = p.a.connect(p.now, &rping_req(1)).unwrap();
    let first = take_tx(&mut p.a);
    assert_eq!(first.len(), 1);
    let mut sent_at = vec![0u64];
    for k in 1..=15u64 {
        assert_eq!(p.a.poll_timeout(), Some(Instant(k * 6144 * 1_000_000)));
        p.at_ms(k * 6144 - 1);
        p.tick();
        assert!(take_tx(&mut p.a).is_empty());
        p.at_ms(k * 6144);
        p.tick();
        let t = take_tx(&mut p.a);
        assert_eq!(names(&t), ["REQ"]);
        assert_eq!(t[0].mad, first[0].mad, "the same REQ, byte for byte");
        sent_at.push(k * 6144);
        assert!(events(&mut p.a).is_empty());
    }
    assert_eq!(sent_at.len(), 16, "1 + Max CM Retries");
    p.at_ms(16 * 6144);
    p.tick();
    assert!(take_tx(&mut p.a).is_empty());
    assert_eq!(
        one_event(&mut p.a),
        Event::Unreachable {
            id: a,
            what: Unanswered::Req
        }
    );
    assert_eq!(p.a.state(a), Some(State::Idle));
    assert_eq!(p.a.poll_timeout(), None);
    assert_eq!(p.a.counters().tx_retransmits, 15);
}

#[test]
fn a_duplicate_req_gets_an_mra_that_extends_the_requester_timer() {
    let mut p = Pair::new();
    p.b.listen(sid()).unwrap();
    let a = p.a.connect(p.now, &rping_req(1)).unwrap();
    p.a_to_b();
    let s = one_event(&mut p.b).id();
    // The server sits on the request; the REQ comes again at 6144 ms.
    p.at_ms(6144);
    p.tick();
    let t = p.a_to_b();
    assert_eq!(names(&t), ["REQ"]);
    assert!(events(&mut p.b).is_empty(), "a duplicate is no new request");
    let t = p.b_to_a();
    let CmMsg::Mra(mra) = only(&t, "MRA") else {
        panic!()
    };
    assert_eq!(mra.message_mraed, MsgRef::REQ);
    assert_eq!(mra.service_timeout, 24);
    assert_eq!(
        (mra.local_comm_id, mra.remote_comm_id),
        (s.comm_id(), a.comm_id())
    );
    assert!(events(&mut p.a).is_empty(), "MRA is no event");
    assert_eq!(p.a.state(a), Some(State::MraReqRcvd));
    // New deadline: ms(24) + ms(19) after the MRA.
    let extended = 6144 + 65536 + 2048;
    assert_eq!(p.a.poll_timeout(), Some(Instant(extended * 1_000_000)));
    p.at_ms(extended - 1);
    p.tick();
    assert!(take_tx(&mut p.a).is_empty());
    // The server answers in time: connected.
    p.at_ms(30_000);
    p.b.accept(p.now, s, &rping_rep(2)).unwrap();
    p.b_to_a();
    assert!(matches!(one_event(&mut p.a), Event::RepReceived(_)));
    p.a.establish(p.now, a, &[]).unwrap();
    p.a_to_b();
    assert_eq!(one_event(&mut p.b), Event::Established { id: s });
}

#[test]
fn a_lost_rtu_is_recovered_by_the_rep_retry_and_a_duplicate_rep() {
    let mut p = Pair::new();
    p.b.listen(sid()).unwrap();
    let a = p.a.connect(p.now, &rping_req(1)).unwrap();
    p.a_to_b();
    let s = one_event(&mut p.b).id();
    p.b.accept(p.now, s, &rping_rep(2)).unwrap();
    p.b_to_a();
    let _ = events(&mut p.a);
    p.a.establish(p.now, a, b"rtu").unwrap();
    let lost = take_tx(&mut p.a);
    assert_eq!(names(&lost), ["RTU"]);
    // REP again after ms(20) = 4096 ms.
    p.at_ms(4095);
    p.tick();
    assert!(take_tx(&mut p.b).is_empty());
    p.at_ms(4096);
    p.tick();
    let t = p.b_to_a();
    assert_eq!(names(&t), ["REP"]);
    assert!(events(&mut p.a).is_empty(), "a duplicate REP is no event");
    let t = p.a_to_b();
    let CmMsg::Rtu(rtu) = only(&t, "RTU") else {
        panic!()
    };
    assert_eq!(
        &rtu.private_data[..3],
        b"rtu",
        "the RTU again, same private data"
    );
    assert_eq!(t[0].mad, lost[0].mad);
    assert_eq!(one_event(&mut p.b), Event::Established { id: s });
    // A third copy changes nothing.
    for x in &t {
        p.b.handle_mad(p.now, ip_a(), Qpn::GSI, &x.mad);
    }
    assert!(events(&mut p.b).is_empty());
    assert_eq!(p.b.poll_timeout(), None, "REP timer stopped");
}

#[test]
fn a_duplicate_rep_before_the_user_answered_gets_an_mra() {
    let mut p = Pair::new();
    p.b.listen(sid()).unwrap();
    let a = p.a.connect(p.now, &rping_req(1)).unwrap();
    p.a_to_b();
    let s = one_event(&mut p.b).id();
    p.b.accept(p.now, s, &rping_rep(2)).unwrap();
    p.b_to_a();
    let _ = events(&mut p.a);
    // The client's user is slow; the REP comes again.
    p.at_ms(4096);
    p.tick();
    p.b_to_a();
    let t = p.a_to_b();
    let CmMsg::Mra(mra) = only(&t, "MRA") else {
        panic!()
    };
    assert_eq!(mra.message_mraed, MsgRef::REP);
    assert_eq!(p.b.state(s), Some(State::MraRepRcvd));
    assert_eq!(
        p.b.poll_timeout(),
        Some(Instant((4096 + 65536 + 2048) * 1_000_000))
    );
    p.a.establish(p.now, a, &[]).unwrap();
    p.a_to_b();
    assert_eq!(one_event(&mut p.b), Event::Established { id: s });
}

#[test]
fn a_duplicate_req_after_our_rep_gets_the_rep_again() {
    let mut p = Pair::new();
    p.b.listen(sid()).unwrap();
    p.a.connect(p.now, &rping_req(1)).unwrap();
    let req = p.a_to_b();
    let s = one_event(&mut p.b).id();
    p.b.accept(p.now, s, &rping_rep(2)).unwrap();
    let rep = take_tx(&mut p.b);
    // The REP was lost; the requester's REQ comes again.
    for x in &req {
        p.b.handle_mad(p.now, ip_a(), Qpn::GSI, &x.mad);
    }
    let again = take_tx(&mut p.b);
    assert_eq!(names(&again), ["REP"]);
    assert_eq!(again[0].mad, rep[0].mad);
    assert!(events(&mut p.b).is_empty());
}

#[test]
fn rep_retries_run_out_into_unreachable() {
    let mut p = Pair::new();
    p.b.listen(sid()).unwrap();
    p.a.connect(p.now, &rping_req(1)).unwrap();
    p.a_to_b();
    let s = one_event(&mut p.b).id();
    p.b.accept(p.now, s, &rping_rep(2)).unwrap();
    let mut reps = take_tx(&mut p.b).len();
    for k in 1..=16u64 {
        p.at_ms(k * 4096);
        p.tick();
        reps += take_tx(&mut p.b).len();
    }
    assert_eq!(reps, 16, "the REQ's Max CM Retries (15) + 1");
    assert_eq!(
        one_event(&mut p.b),
        Event::Unreachable {
            id: s,
            what: Unanswered::Rep
        }
    );
    assert_eq!(p.b.state(s), Some(State::Idle));
}

#[test]
fn dreq_answers_unknown_ids_timewait_and_wrong_qpns() {
    let mut p = Pair::new();
    let (a, s) = connect(&mut p);
    p.a.disconnect(p.now, a, &[]).unwrap();
    let dreq = take_tx(&mut p.a);
    // A DREQ naming another QP is ignored.
    let mut wrong = dreq[0].mad;
    wrong[24 + 10] ^= 0x01;
    p.b.handle_mad(p.now, ip_a(), Qpn::GSI, &wrong);
    assert!(take_tx(&mut p.b).is_empty() && events(&mut p.b).is_empty());
    assert_eq!(p.b.state(s), Some(State::Established));
    // The real one.
    p.b.handle_mad(p.now, ip_a(), Qpn::GSI, &dreq[0].mad);
    let _ = events(&mut p.b);
    // A duplicate in DREQ_RCVD: nothing.
    p.b.handle_mad(p.now, ip_a(), Qpn::GSI, &dreq[0].mad);
    assert!(take_tx(&mut p.b).is_empty() && events(&mut p.b).is_empty());
    p.b.disconnect(p.now, s, b"bye").unwrap();
    let drep = take_tx(&mut p.b);
    // The DREP was lost: the DREQ comes again, into timewait: DREP again.
    p.b.handle_mad(p.now, ip_a(), Qpn::GSI, &dreq[0].mad);
    let again = take_tx(&mut p.b);
    assert_eq!(names(&again), ["DREP"]);
    assert_eq!(again[0].mad, drep[0].mad);
    // After the server destroyed its id: DREP from nowhere, comm IDs
    // swapped from the DREQ, TID echoed.
    p.b.destroy(p.now, s).unwrap();
    p.b.handle_mad(p.now, ip_a(), Qpn::GSI, &dreq[0].mad);
    let t = take_tx(&mut p.b);
    let m = parse(&t[0]);
    assert_eq!(m.header.tid, parse(&dreq[0]).header.tid);
    let CmMsg::Drep(d) = m.msg else { panic!() };
    assert_eq!(
        (d.local_comm_id, d.remote_comm_id),
        (s.comm_id(), a.comm_id())
    );
    for x in t {
        p.a.handle_mad(p.now, ip_b(), Qpn::GSI, &x.mad);
    }
    assert!(matches!(
        one_event(&mut p.a),
        Event::Disconnected {
            timed_out: false,
            ..
        }
    ));
}

#[test]
fn dreq_retries_run_out_into_disconnected_and_timewait() {
    let mut p = Pair::new();
    let (a, _) = connect(&mut p);
    p.at_ms(1);
    p.a.disconnect(p.now, a, &[]).unwrap();
    let mut n = take_tx(&mut p.a).len();
    // The client's DREQ timer is its REQ's: 6144 ms.
    for k in 1..=16u64 {
        p.at_ms(1 + k * 6144);
        p.tick();
        n += take_tx(&mut p.a).len();
    }
    assert_eq!(n, 16);
    assert!(matches!(
        one_event(&mut p.a),
        Event::Disconnected {
            timed_out: true,
            ..
        }
    ));
    assert_eq!(p.a.state(a), Some(State::Timewait));
}

#[test]
fn rep_for_an_unknown_id_is_dropped() {
    let mut p = Pair::new();
    let (a, s) = connect(&mut p);
    // A REP naming a comm ID nobody has.
    p.b.destroy(p.now, s).unwrap();
    let _ = take_tx(&mut p.b);
    // Another pair, other keys: other comm IDs.
    let mut q = Pair::new();
    q.a = cm(GUID_A, 77);
    q.b = cm(GUID_B, 78);
    q.b.listen(sid()).unwrap();
    q.a.connect(q.now, &rping_req(9)).unwrap();
    q.a_to_b();
    let s2 = one_event(&mut q.b).id();
    q.b.accept(q.now, s2, &rping_rep(2)).unwrap();
    let rep = take_tx(&mut q.b);
    let before = p.a.counters().rx_dropped;
    p.a.handle_mad(p.now, ip_b(), Qpn::GSI, &rep[0].mad);
    assert!(take_tx(&mut p.a).is_empty() && events(&mut p.a).is_empty());
    assert_eq!(p.a.counters().rx_dropped, before + 1);
    assert_eq!(p.a.state(a), Some(State::Established));
}

#[test]
fn stale_connections_get_rej_10() {
    // A REQ from a (CA GUID, QPN) that is still connected here: REJ 10 and
    // a DREQ to the old connection (Linux cm_match_req).
    let mut p = Pair::new();
    let (_, s) = connect(&mut p);
    let mut old_client = cm(GUID_A, 99);
    old_client.connect(p.now, &rping_req(7)).unwrap();
    let req = take_tx(&mut old_client);
    p.b.handle_mad(p.now, ip_a(), Qpn::GSI, &req[0].mad);
    let t = take_tx(&mut p.b);
    assert_eq!(names(&t), ["REJ", "DREQ"]);
    let CmMsg::Rej(rej) = parse(&t[0]).msg else {
        panic!()
    };
    assert_eq!(rej.reason, RejReason::STALE_CONN);
    assert_eq!(p.b.state(s), Some(State::DreqSent));
    assert!(events(&mut p.b).is_empty());

    // The same QPN while the old connection is in timewait: REJ 10 too
    // (IBA; Linux lets it through, see CmConfig::timewait_rejects_stale_qpn).
    let mut p = Pair::new();
    let (a, s) = connect(&mut p);
    p.a.disconnect(p.now, a, &[]).unwrap();
    p.a_to_b();
    let _ = events(&mut p.b);
    p.b.disconnect(p.now, s, &[]).unwrap();
    p.b_to_a();
    let _ = events(&mut p.a);
    assert_eq!(p.b.state(s), Some(State::Timewait));
    p.b.destroy(p.now, s).unwrap();
    p.at_ms(2047);
    let a2 = p.a.connect(p.now, &rping_req(8)).unwrap();
    p.a_to_b();
    let t = p.b_to_a();
    assert!(matches!(only(&t, "REJ"), CmMsg::Rej(r) if r.reason == RejReason(10)));
    assert!(matches!(one_event(&mut p.a), Event::Rejected(r) if r.id == a2 && r.reason.0 == 10));
    assert_eq!(
        p.a.state(a2),
        Some(State::Timewait),
        "REJ 10 sends the requester to timewait"
    );
    // After the record expires the QPN is free again.
    p.at_ms(2048);
    p.tick();
    let _ = events(&mut p.a);
    p.a.connect(p.now, &rping_req(9)).unwrap();
    p.a_to_b();
    assert!(matches!(one_event(&mut p.b), Event::ConnectRequest(_)));

    // With Linux's rule the timewait QPN is accepted.
    let mut p = Pair::new();
    let mut cfg = p.b.config().clone();
    cfg.timewait_rejects_stale_qpn = false;
    p.b = softrdma_cm::Cm::new(cfg);
    let (a, s) = connect(&mut p);
    p.a.disconnect(p.now, a, &[]).unwrap();
    p.a_to_b();
    let _ = events(&mut p.b);
    p.b.disconnect(p.now, s, &[]).unwrap();
    p.b_to_a();
    p.a.connect(p.now, &rping_req(8)).unwrap();
    p.a_to_b();
    assert!(matches!(one_event(&mut p.b), Event::ConnectRequest(_)));
}

#[test]
fn destroy_tells_the_peer_what_linux_tells_it() {
    // REQ_SENT: REJ "timeout" with our GUID as ARI; the server finds its id
    // by (GUID, comm ID) and reports the rejection.
    let mut p = Pair::new();
    p.b.listen(sid()).unwrap();
    let a = p.a.connect(p.now, &rping_req(1)).unwrap();
    p.a_to_b();
    let s = one_event(&mut p.b).id();
    p.a.destroy(p.now, a).unwrap();
    let t = p.a_to_b();
    let m = parse(&t[0]);
    assert_eq!(m.header.tid, linux_tid(a.comm_id()));
    let CmMsg::Rej(rej) = m.msg else { panic!() };
    assert_eq!(rej.reason, RejReason::TIMEOUT);
    assert_eq!(rej.message_rejected, MsgRef::OTHER);
    assert_eq!(rej.local_comm_id, a.comm_id());
    assert_eq!(rej.ari_bytes(), GUID_A.to_be_bytes());
    assert!(matches!(one_event(&mut p.b), Event::Rejected(r) if r.id == s && r.reason.0 == 4));
    assert_eq!(p.b.state(s), Some(State::Idle));
    assert!(p.a.is_quiescent());

    // ESTABLISHED: one DREQ, never retransmitted; the peer gets it.
    let mut p = Pair::new();
    let (a, s) = connect(&mut p);
    p.a.destroy(p.now, a).unwrap();
    let t = p.a_to_b();
    assert_eq!(names(&t), ["DREQ"]);
    assert!(matches!(one_event(&mut p.b), Event::DisconnectRequest { id, .. } if id == s));
    p.at_ms(1_000_000);
    p.tick();
    assert!(
        take_tx(&mut p.a).is_empty(),
        "no DREQ retries after destroy"
    );
    assert!(p.a.is_quiescent(), "the timewait record expired too");
    // The server's DREP finds nobody: dropped.
    p.b.disconnect(p.now, s, &[]).unwrap();
    p.b_to_a();
    assert!(events(&mut p.a).is_empty());

    // MRA_REQ_SENT: REJ 28 for the REQ; REP_SENT: REJ 28 "other", and the
    // timewait record outlives the id.
    let mut p = Pair::new();
    p.b.listen(sid()).unwrap();
    let a = p.a.connect(p.now, &rping_req(1)).unwrap();
    p.a_to_b();
    let s = one_event(&mut p.b).id();
    p.b.accept(p.now, s, &rping_rep(2)).unwrap();
    p.b_to_a();
    assert!(matches!(one_event(&mut p.a), Event::RepReceived(_)));
    p.b.destroy(p.now, s).unwrap();
    let t = p.b_to_a();
    let CmMsg::Rej(rej) = only(&t, "REJ") else {
        panic!()
    };
    assert_eq!((rej.reason.0, rej.message_rejected), (28, MsgRef::OTHER));
    assert!(matches!(one_event(&mut p.a), Event::Rejected(r) if r.id == a));
    assert_eq!(
        p.a.state(a),
        Some(State::Timewait),
        "a REJ after the REP: timewait"
    );
    assert_eq!(p.b.timewait_count(), 1);
    assert_eq!(p.b.id_count(), 1, "the listener");
    p.at_ms(2048);
    p.tick();
    assert_eq!(p.b.timewait_count(), 0);
    assert!(
        events(&mut p.b).is_empty(),
        "no TIMEWAIT_EXIT for a destroyed id"
    );

    // DREQ_RCVD: the DREP owed.
    let mut p = Pair::new();
    let (a, s) = connect(&mut p);
    p.a.disconnect(p.now, a, &[]).unwrap();
    p.a_to_b();
    let _ = events(&mut p.b);
    p.b.destroy(p.now, s).unwrap();
    assert_eq!(names(&p.b_to_a()), ["DREP"]);
    assert!(matches!(one_event(&mut p.a), Event::Disconnected { .. }));

    // A destroyed listener: the next REQ gets REJ 8.
    let mut p = Pair::new();
    let l = p.b.listen(sid()).unwrap();
    p.b.destroy(p.now, l).unwrap();
    p.a.connect(p.now, &rping_req(1)).unwrap();
    p.a_to_b();
    assert!(matches!(only(&p.b_to_a(), "REJ"), CmMsg::Rej(r) if r.reason.0 == 8));
    assert_eq!(p.b.destroy(p.now, l), Err(CmError::UnknownId));
}

#[test]
fn traffic_before_the_rtu_establishes_the_passive_side_once() {
    let mut p = Pair::new();
    p.b.listen(sid()).unwrap();
    let a = p.a.connect(p.now, &rping_req(1)).unwrap();
    p.a_to_b();
    let s = one_event(&mut p.b).id();
    assert_eq!(
        p.b.notify_established(s),
        Err(CmError::InvalidState(State::MraReqSent))
    );
    p.b.accept(p.now, s, &rping_rep(2)).unwrap();
    p.b_to_a();
    let _ = events(&mut p.a);
    p.a.establish(p.now, a, &[]).unwrap();
    // The first data packet beats the RTU.
    p.b.notify_established(s).unwrap();
    assert_eq!(one_event(&mut p.b), Event::Established { id: s });
    assert_eq!(p.b.poll_timeout(), None);
    p.a_to_b();
    assert!(events(&mut p.b).is_empty(), "the RTU is a duplicate now");
    assert_eq!(
        p.b.notify_established(s),
        Err(CmError::InvalidState(State::Established))
    );
}

#[test]
fn both_sides_disconnect_at_once() {
    let mut p = Pair::new();
    let (a, s) = connect(&mut p);
    p.a.disconnect(p.now, a, &[]).unwrap();
    p.b.disconnect(p.now, s, &[]).unwrap();
    let ta = take_tx(&mut p.a);
    let tb = take_tx(&mut p.b);
    for x in &ta {
        p.b.handle_mad(p.now, ip_a(), Qpn::GSI, &x.mad);
    }
    for x in &tb {
        p.a.handle_mad(p.now, ip_b(), Qpn::GSI, &x.mad);
    }
    // Each sees the other's DREQ in DREQ_SENT: DREQ_RCVD, answers DREP.
    assert!(matches!(
        one_event(&mut p.a),
        Event::DisconnectRequest { .. }
    ));
    assert!(matches!(
        one_event(&mut p.b),
        Event::DisconnectRequest { .. }
    ));
    p.a.disconnect(p.now, a, &[]).unwrap();
    p.b.disconnect(p.now, s, &[]).unwrap();
    p.a_to_b();
    p.b_to_a();
    assert_eq!(p.a.state(a), Some(State::Timewait));
    assert_eq!(p.b.state(s), Some(State::Timewait));
    assert!(events(&mut p.a).is_empty() && events(&mut p.b).is_empty());
    assert_eq!(p.a.poll_timeout(), Some(Instant(2048 * 1_000_000)));
}

#[test]
fn sidr_resolution() {
    let mut p = Pair::new();
    let udp = ServiceId::rdma_cm(PortSpace::Udp, 7174);
    let req = SidrReqParams {
        peer: ip_b(),
        service_id: udp,
        pkey: PKey::DEFAULT,
        timeout_ms: 4096,
        max_cm_retries: 15,
        private_data: vec![1, 2, 3],
    };
    // Nobody listens: status 1.
    let a = p.a.sidr_request(p.now, &req).unwrap();
    let t = p.a_to_b();
    let tid = parse(&t[0]).header.tid;
    assert_eq!(tid, linux_tid(a.comm_id()));
    let t = p.b_to_a();
    let m = parse(&t[0]);
    assert_eq!(m.header.tid, tid);
    let CmMsg::SidrRep(r) = m.msg else { panic!() };
    assert_eq!(
        (r.status, r.request_id, r.service_id),
        (SidrStatus::UNSUPPORTED, a.comm_id(), udp)
    );
    assert!(matches!(one_event(&mut p.a), Event::SidrReply(r) if r.status.0 == 1));
    assert_eq!(p.b.id_count(), 0);
    p.a.destroy(p.now, a).unwrap();

    // A listener answers with its QPN and Q_Key.
    let l = p.b.listen(udp).unwrap();
    let a = p.a.sidr_request(p.now, &req).unwrap();
    let t = p.a_to_b();
    let Event::SidrRequest(sr) = one_event(&mut p.b) else {
        panic!()
    };
    assert_eq!((sr.listen_id, sr.service_id, sr.src), (l, udp, ip_a()));
    assert_eq!(&sr.private_data[..4], &[1, 2, 3, 0]);
    // A duplicate while unanswered: dropped.
    p.b.handle_mad(p.now, ip_a(), Qpn::GSI, &t[0].mad);
    assert!(events(&mut p.b).is_empty() && take_tx(&mut p.b).is_empty());
    p.b.sidr_reply(
        p.now,
        sr.id,
        &SidrRepParams {
            status: SidrStatus::SUCCESS,
            qpn: Qpn::new(0x42),
            qkey: QKey(0x0123_4567),
            info: vec![],
            private_data: vec![9],
            ece: Default::default(),
        },
    )
    .unwrap();
    assert_eq!(p.b.state(sr.id), Some(State::Idle));
    p.b_to_a();
    let Event::SidrReply(r) = one_event(&mut p.a) else {
        panic!()
    };
    assert_eq!(
        (r.id, r.status, r.qpn, r.qkey),
        (a, SidrStatus::SUCCESS, Qpn::new(0x42), QKey(0x0123_4567))
    );
    assert_eq!(p.a.state(a), Some(State::Idle));
    assert_eq!(p.a.poll_timeout(), None);

    // Unanswered: 16 SIDR_REQs 4096 ms apart, then unreachable.
    let mut q = Pair::new();
    let a = q.a.sidr_request(q.now, &req).unwrap();
    let mut n = take_tx(&mut q.a).len();
    for k in 1..=16 {
        q.at_ms(k * 4096);
        q.tick();
        n += take_tx(&mut q.a).len();
    }
    assert_eq!(n, 16);
    assert_eq!(
        one_event(&mut q.a),
        Event::Unreachable {
            id: a,
            what: Unanswered::SidrReq
        }
    );

    // Destroying an unanswered SIDR_REQ id answers REJECT.
    let a = p.a.sidr_request(p.now, &req).unwrap();
    p.a_to_b();
    let s = one_event(&mut p.b).id();
    p.b.destroy(p.now, s).unwrap();
    p.b_to_a();
    assert!(
        matches!(one_event(&mut p.a), Event::SidrReply(r) if r.id == a && r.status == SidrStatus::REJECT)
    );
}

#[test]
fn the_mad_layer_drops_or_answers_what_no_agent_takes() {
    let mut p = Pair::new();
    p.b.listen(sid()).unwrap();
    p.a.connect(p.now, &rping_req(1)).unwrap();
    let req = take_tx(&mut p.a).remove(0).mad;
    let feed = |b: &mut softrdma_cm::Cm, m: &[u8]| {
        b.handle_mad(Instant(0), ip_a(), Qpn::GSI, m);
        (take_tx(b), events(b))
    };
    // Class version 1, base version 2, a non-Send method, a truncated or
    // an oversized MAD: dropped, no answer.
    for (at, v) in [(2usize, 1u8), (0, 2), (3, 0x06)] {
        let mut m = req;
        m[at] = v;
        let (t, e) = feed(&mut p.b, &m);
        assert!(t.is_empty() && e.is_empty(), "byte {at} = {v}");
    }
    assert!(feed(&mut p.b, &req[..255]).0.is_empty());
    let mut long = req.to_vec();
    long.push(0);
    assert!(feed(&mut p.b, &long).0.is_empty());
    assert_eq!(p.b.counters().rx_dropped, 5);
    // A Get of ClassPortInfo of the CM class: GetResp "unsupported
    // method/attribute" (the CM agent takes only Send). Same for another
    // class. A GetResp is never answered.
    let mut get = [0u8; MAD_LEN];
    get[..4].copy_from_slice(&[1, 0x07, 2, 0x01]);
    get[8..16].copy_from_slice(&0x1122_3344_5566_7788u64.to_be_bytes());
    get[17] = 0x01;
    let (t, _) = feed(&mut p.b, &get);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].mad[3], 0x81);
    assert_eq!(&t[0].mad[4..6], &[0x00, 0x0c]);
    assert_eq!(t[0].mad[8..], get[8..]);
    let mut perf = get;
    perf[1] = 0x04;
    perf[2] = 1;
    assert_eq!(feed(&mut p.b, &perf).0.len(), 1);
    let mut resp = get;
    resp[3] = 0x81;
    assert!(feed(&mut p.b, &resp).0.is_empty());
    // An SMP on QP 1: dropped.
    let mut smp = get;
    smp[1] = 0x01;
    assert!(feed(&mut p.b, &smp).0.is_empty());
    // Linux would fold this Q_Key into the address; it is the driver's.
    assert_eq!(GSI_QKEY, 0x8001_0000);
    // The real REQ still works.
    assert_eq!(feed(&mut p.b, &req).1.len(), 1);
}

#[test]
fn calls_check_state_and_parameters() {
    let mut p = Pair::new();
    let l = p.b.listen(sid()).unwrap();
    assert_eq!(p.b.listen(sid()), Err(CmError::Busy));
    assert_eq!(
        p.b.accept(p.now, l, &rping_rep(1)),
        Err(CmError::InvalidState(State::Listen))
    );
    let ghost = CmId::from_comm_id(0x1234);
    assert_eq!(p.b.destroy(p.now, ghost), Err(CmError::UnknownId));
    let mut bad = rping_req(1);
    bad.private_data = vec![0; 93];
    assert!(matches!(
        p.a.connect(p.now, &bad),
        Err(CmError::InvalidParam(_))
    ));
    let mut bad = rping_req(1);
    bad.retry_count = 8;
    assert!(matches!(
        p.a.connect(p.now, &bad),
        Err(CmError::InvalidParam(_))
    ));
    assert_eq!(p.a.id_count(), 0, "failed calls leave nothing");
    let (a, _) = connect(&mut p);
    assert_eq!(
        p.a.establish(p.now, a, &[]),
        Err(CmError::InvalidState(State::Established))
    );
    assert!(matches!(
        p.a.disconnect(p.now, a, &[0; 221]),
        Err(CmError::InvalidParam(_))
    ));
    assert_eq!(p.a.state(a), Some(State::Established));
    p.a.check_invariants().unwrap();
    p.b.check_invariants().unwrap();
}

#[test]
fn timewait_records_are_bounded_and_the_oldest_ends_first() {
    use softrdma_cm::limits::MAX_TIMEWAIT;
    use softrdma_wire::cm::{CmMadRepr, RejRepr};
    let mut a = cm(GUID_A, 5);
    let now = Instant(0);
    let mut first = None;
    for k in 0..=MAX_TIMEWAIT as u32 {
        let id = a.connect(now, &rping_req_qpn(1, k)).unwrap();
        first.get_or_insert(id);
        let _ = take_tx(&mut a);
        // REJ 10 sends a pending REQ into timewait; destroying the id
        // leaves the record.
        let rej = CmMadRepr::new(
            0,
            0,
            CmMsg::Rej(RejRepr {
                local_comm_id: 0,
                remote_comm_id: id.comm_id(),
                message_rejected: MsgRef::REQ,
                reject_info_len: 0,
                reason: RejReason::STALE_CONN,
                ari: &[],
                private_data: &[],
            }),
        )
        .to_bytes()
        .unwrap();
        a.handle_mad(now, ip_b(), Qpn::GSI, &rej);
        assert_eq!(a.state(id), Some(State::Timewait));
        if k == 0 {
            // The first id stays, to see its early exit.
            continue;
        }
        a.destroy(now, id).unwrap();
    }
    assert_eq!(a.timewait_count(), MAX_TIMEWAIT);
    let first = first.unwrap();
    assert_eq!(a.state(first), Some(State::Idle), "the oldest record ended");
    let exits: Vec<Event> = events(&mut a)
        .into_iter()
        .filter(|e| matches!(e, Event::TimewaitExit { .. }))
        .collect();
    assert_eq!(exits, [Event::TimewaitExit { id: first }]);
    a.check_invariants().unwrap();
    a.destroy(now, first).unwrap();
    a.handle_timeout(Instant(u64::MAX));
    assert!(a.is_quiescent());
}

#[test]
fn a_cm_can_live_behind_a_mutex_on_another_thread() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<softrdma_cm::Cm>();
    send_sync::<Event>();
}
