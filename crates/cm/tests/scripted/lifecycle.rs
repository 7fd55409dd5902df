//! The rest of an id's life: stale connections, destroy, early traffic,
//! simultaneous disconnects, SIDR, the MAD layer, argument checks, timewait
//! bounds, a CM on another thread.

use super::*;

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
    let (mut p, a, s) = requested();
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
    let (mut p, a, s) = requested();
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
    let (mut p, a, s) = requested();
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
