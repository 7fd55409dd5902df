//! A flood of connection requests from one source (issue 21): half-open
//! connections, as a SYN flood. Each source may have
//! `MAX_HALF_OPEN_PER_SOURCE` requests waiting; the rest get REJ "no
//! resources" at once and are counted, and other sources are served.

mod support;

use softrdma_cm::limits::{MAX_HALF_OPEN_PER_SOURCE, MAX_PENDING_EVENTS};
use softrdma_cm::{Event, State};
use softrdma_wire::cm::{CmMsg, RejReason};
use softrdma_wire::Qpn;
use support::*;

#[test]
fn a_req_flood_from_one_source_is_capped_and_others_get_through() {
    let mut p = Pair::new();
    p.b.listen(sid()).unwrap();
    // 10,000 REQs from a (distinct comm IDs and QPNs), none ever finished.
    let n = 10_000;
    let mut answers = Vec::new();
    for chunk in 0..n / 1000 {
        for i in chunk * 1000..(chunk + 1) * 1000 {
            p.a.connect(p.now, &rping_req_qpn(i, 0x100 + i)).unwrap();
        }
        assert_eq!(p.a_to_b().len(), 1000);
        answers.extend(take_tx(&mut p.b));
    }
    p.b.check_invariants().unwrap();
    let requests: Vec<_> = events(&mut p.b)
        .into_iter()
        .filter_map(|e| match e {
            Event::ConnectRequest(cr) => Some(cr),
            _ => None,
        })
        .collect();
    assert_eq!(requests.len(), MAX_HALF_OPEN_PER_SOURCE);
    let refused = n as usize - MAX_HALF_OPEN_PER_SOURCE;
    assert_eq!(
        p.b.counters().rx_refused_half_open,
        refused as u64,
        "every refusal counted"
    );
    // Refused at once, each with a REJ "no resources".
    assert_eq!(answers.len(), refused);
    for t in &answers {
        let CmMsg::Rej(rej) = parse(t).msg else {
            panic!("{:?}", names(&answers[..1]))
        };
        assert_eq!(rej.reason, RejReason::NO_RESOURCES);
    }
    // The table holds only what was admitted (before: every REQ until
    // MAX_PENDING_EVENTS, 4096, then silence).
    assert_eq!(p.b.id_count(), 1 + MAX_HALF_OPEN_PER_SOURCE);
    const _: () = assert!(MAX_HALF_OPEN_PER_SOURCE < MAX_PENDING_EVENTS);

    // Another source still gets through.
    let mut c = cm(0x5054_00ff_fe12_0003, 3);
    c.connect(p.now, &rping_req_qpn(7, 0x77)).unwrap();
    for t in take_tx(&mut c) {
        p.b.handle_mad(p.now, ip("198.18.0.3"), Qpn::GSI, &t.mad);
    }
    let e = events(&mut p.b);
    assert!(
        matches!(&e[..], [Event::ConnectRequest(cr)] if cr.src == ip("198.18.0.3")),
        "{e:?}"
    );
    p.b.check_invariants().unwrap();

    // A request that is finished frees its source's place.
    let first = requests[0].id;
    p.b.accept(p.now, first, &rping_rep(0x654321)).unwrap();
    p.b_to_a();
    let a_id = events(&mut p.a)
        .into_iter()
        .find_map(|e| match e {
            Event::RepReceived(r) => Some(r.id),
            _ => None,
        })
        .expect("the REP");
    p.a.establish(p.now, a_id, &[]).unwrap();
    p.a_to_b();
    assert_eq!(p.b.state(first), Some(State::Established));
    p.a.connect(p.now, &rping_req_qpn(n + 1, 0x100 + n + 1))
        .unwrap();
    p.a_to_b();
    let e = events(&mut p.b);
    assert!(
        e.iter().any(|e| matches!(e, Event::ConnectRequest(_))),
        "{e:?}"
    );
    // Destroying the waiting ones frees the rest.
    for cr in &requests[1..] {
        p.b.destroy(p.now, cr.id).unwrap();
    }
    p.b.check_invariants().unwrap();
    assert_eq!(
        p.b.counters().rx_refused_half_open,
        refused as u64,
        "nothing more refused"
    );
}
