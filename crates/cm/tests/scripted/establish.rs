//! Establishing and refusing connections: the three-way handshake, the QP
//! attributes of both sides, REJs.

use super::*;

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
    let (mut p, a, s) = requested();
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
