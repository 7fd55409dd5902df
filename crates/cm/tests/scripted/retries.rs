//! Lost and duplicated messages: retransmissions of REQ, REP and DREQ, the
//! MRAs that answer duplicates, retries running out.

use super::*;

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
    let (mut p, a, s) = requested();
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
    let (mut p, a, s) = requested();
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
    let (mut p, a, s) = requested();
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
