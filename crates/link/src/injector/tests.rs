//! The injector on hand-made packets: rates within their statistical
//! bounds, the same seed gives the same run, each targeted fault acts
//! exactly as many times as asked and makes valid answers.

use super::*;
use softrdma_config::faults::FaultSpec;
use softrdma_wire::ext::{NakCode, RethRepr};
use softrdma_wire::opcode::Position;
use softrdma_wire::{RKey, RoceDatagram};

const LOCAL: &str = "10.0.0.1:4791";
const PEER: &str = "10.0.0.2";

fn local() -> SocketAddr {
    LOCAL.parse().unwrap()
}
fn peer() -> IpAddr {
    PEER.parse().unwrap()
}

/// An RC packet: `op` at `pos`, to `qpn`, PSN `psn`, `len` payload bytes.
fn rc(op: Operation, pos: Position, qpn: u32, psn: u32, len: usize) -> Vec<u8> {
    let opcode = Opcode::find(Transport::Rc, op, pos, false, false).expect("opcode");
    let payload = vec![0xab; len];
    let mut r = PacketRepr::new(
        BthRepr {
            pad_count: PacketRepr::pad_for(len),
            ..BthRepr::new(opcode, Qpn::new(qpn), Psn::new(psn))
        },
        &payload,
    );
    let info = opcode.info().unwrap();
    if info.headers.contains(softrdma_wire::Headers::RETH) {
        r.reth = Some(RethRepr {
            va: 0x1000,
            rkey: RKey(0x1234),
            dma_len: 64,
        });
    }
    if info.headers.contains(softrdma_wire::Headers::AETH) {
        r.aeth = Some(AethRepr {
            syndrome: Syndrome::ACK,
            msn: Msn::new(1),
        });
    }
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut b).unwrap();
    b
}

fn ack(qpn: u32, psn: u32, syndrome: Syndrome) -> Vec<u8> {
    let mut b = rc(Operation::Acknowledge, Position::Only, qpn, psn, 0);
    let mut p = PacketRepr::parse_bytes(&b).unwrap();
    p.aeth = Some(AethRepr {
        syndrome,
        msn: Msn::new(3),
    });
    let p2 = PacketRepr { payload: &[], ..p };
    let mut out = vec![0u8; p2.buffer_len()];
    p2.emit(&mut out).unwrap();
    b.copy_from_slice(&out);
    b
}

fn injector(spec: &str, seed: u64, send: bool) -> Injector<u32> {
    let spec = FaultSpec::parse(spec).unwrap();
    Injector::new(&spec, seed, send, local()).expect("an injector for that direction")
}

fn no_responder(_: Qpn) -> Option<Responder> {
    None
}

/// Counts of n datagrams of 1 KiB through `inj`; returns (steps, held).
fn run(inj: &mut Injector<u32>, n: u32) -> (Vec<Step>, Vec<(u64, u32)>) {
    let mut steps = Vec::new();
    let mut held = Vec::new();
    for i in 0..n {
        let d = rc(Operation::RdmaWrite, Position::Only, 7, i, 1024);
        let now = i as u64 * 1000;
        steps.push(inj.process(now, peer(), &i, &d, &mut no_responder));
        while let Some((m, _)) = inj.poll_due(now) {
            held.push((now, m));
        }
    }
    while let Some((m, _)) = inj.take_held() {
        held.push((u64::MAX, m));
    }
    (steps, held)
}

/// `got` is within 7 standard deviations of a binomial(n, p) (and not
/// zero when 20 or more are expected): the simulator harness's bound.
fn within(what: &str, got: u64, n: u64, p: f64) {
    let mean = n as f64 * p;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    assert!(
        (got as f64 - mean).abs() <= 7.0 * sd + 1.0 && (mean < 20.0 || got > 0),
        "{what}: {got} of {n}, expected {mean:.0} ± {:.0}",
        7.0 * sd
    );
}

#[test]
fn rates_within_statistical_bounds() {
    let n = 100_000u32;
    let mut inj = injector(
        "loss=10%,dup=5%,reorder=5%,corrupt=2%,reorder-delay=3us",
        1,
        true,
    );
    let (steps, held) = run(&mut inj, n);
    let c = inj.counters();
    let n = n as u64;
    within("lost", c.tx_lost, n, 0.10);
    // The other faults apply to what was not lost.
    let kept = n - c.tx_lost;
    within("duplicated", c.tx_duplicated, kept, 0.05);
    within("reordered", c.tx_reordered, kept, 0.05);
    within("corrupted", c.tx_corrupted, kept, 0.02);
    assert_eq!(c.rx_lost + c.rx_duplicated + c.acks_dropped, 0);
    assert_eq!(
        steps.iter().filter(|s| **s == Step::Gone).count() as u64,
        c.tx_lost
    );
    // Every reordered datagram and every duplicate copy was held, and came
    // out no earlier than its hold.
    assert_eq!(held.len() as u64, c.tx_reordered + c.tx_duplicated);
    let flipped = steps
        .iter()
        .filter(|s| matches!(s, Step::Pass { flip } if flip.len() == 1))
        .count() as u64;
    assert!(flipped <= c.tx_corrupted);
    // Only the send side: a receive injector of this spec does not exist.
    let spec = FaultSpec::parse("loss=10%").unwrap();
    assert!(Injector::<u32>::new(&spec, 1, false, local()).is_none());
}

#[test]
fn delay_and_jitter_hold_every_datagram_for_their_time() {
    let mut inj = injector("on=recv,delay=200us,jitter=100us", 5, false);
    let mut due = Vec::new();
    for i in 0..1000u32 {
        let d = rc(Operation::Send, Position::Only, 7, i, 8);
        assert_eq!(
            inj.process(0, peer(), &i, &d, &mut no_responder),
            Step::Held
        );
    }
    assert_eq!(inj.counters().rx_delayed, 1000);
    assert!(inj.poll_due(199_999).is_none());
    while let Some(t) = inj.next_due() {
        assert!((200_000..=300_000).contains(&t), "{t}");
        due.push(inj.poll_due(t).unwrap().0);
    }
    assert_eq!(due.len(), 1000);
    // Jitter reorders: not all in their order.
    assert!(due.windows(2).any(|w| w[0] > w[1]));
}

#[test]
fn reorder_every_holds_back_the_psns_it_names() {
    let mut inj = injector("reorder-every=4,reorder-delay=5us", 1, true);
    let (steps, held) = run(&mut inj, 40);
    for (i, s) in steps.iter().enumerate() {
        assert_eq!(*s == Step::Held, i.is_multiple_of(4), "{i}: {s:?}");
    }
    let late: Vec<u32> = held.iter().map(|h| h.1).collect();
    assert_eq!(late, (0..40).step_by(4).collect::<Vec<_>>());
    assert_eq!(inj.counters().tx_reordered, 10);
}

#[test]
fn same_seed_same_run_other_seed_other_run() {
    let spec = "loss=10%,dup=10%,reorder=10%,corrupt=10%,jitter=5us";
    let (a, ah) = run(&mut injector(spec, 42, true), 5000);
    let (b, bh) = run(&mut injector(spec, 42, true), 5000);
    assert_eq!(a, b);
    assert_eq!(ah, bh);
    let (c, _) = run(&mut injector(spec, 43, true), 5000);
    assert_ne!(a, c);
    // Send and receive draw from their own streams.
    let rx = "on=recv,loss=10%,dup=10%,reorder=10%,corrupt=10%,jitter=5us";
    let (d, _) = run(&mut injector(rx, 42, false), 5000);
    assert_ne!(a, d);
}

#[test]
fn peer_rules_touch_only_their_peer() {
    let mut inj = injector("peer=10.0.0.9,loss=1", 1, true);
    let d = rc(Operation::Send, Position::Only, 7, 1, 8);
    assert_eq!(
        inj.process(0, peer(), &0, &d, &mut no_responder),
        Step::Pass { flip: vec![] }
    );
    let other: IpAddr = "10.0.0.9".parse().unwrap();
    assert_eq!(inj.process(0, other, &0, &d, &mut no_responder), Step::Gone);
}

#[test]
fn drop_acks_drops_exactly_the_next_n_acks() {
    let mut inj = injector("drop-acks=3", 1, true);
    inj.set_events(true);
    let mut gone = 0;
    for psn in 0..10 {
        // NAKs and requests in between are never taken.
        let nak = ack(7, psn, Syndrome::Nak(NakCode::PsnSequenceError));
        let req = rc(Operation::Send, Position::Only, 7, psn, 8);
        for d in [&nak, &req] {
            assert_eq!(
                inj.process(0, peer(), &0, d, &mut no_responder),
                Step::Pass { flip: vec![] }
            );
        }
        if inj.process(
            0,
            peer(),
            &0,
            &ack(7, psn, Syndrome::ACK),
            &mut no_responder,
        ) == Step::Gone
        {
            assert!(psn < 3);
            gone += 1;
        }
    }
    assert_eq!(gone, 3);
    assert_eq!(inj.counters().acks_dropped, 3);
    let ev: Vec<FaultEvent> = std::iter::from_fn(|| inj.poll_event()).collect();
    assert_eq!(ev.len(), 3);
    assert!(ev.iter().all(|e| e.kind == FaultKind::AckDropped && e.send));
    assert!(
        ev[0]
            .packet
            .starts_with("RC_ACKNOWLEDGE qp=0x000007 psn=0x000000 AETH(ACK"),
        "{}",
        ev[0].packet
    );
    // On receive too, with on=recv.
    let mut inj = injector("on=recv,drop-acks=1", 1, false);
    assert_eq!(
        inj.process(0, peer(), &0, &ack(7, 1, Syndrome::ACK), &mut no_responder),
        Step::Gone
    );
    assert_eq!(
        inj.process(0, peer(), &0, &ack(7, 2, Syndrome::ACK), &mut no_responder),
        Step::Pass { flip: vec![] }
    );
}

fn responder() -> impl FnMut(Qpn) -> Option<Responder> {
    |q: Qpn| {
        (q.value() == 7).then(|| Responder {
            dest_qpn: Qpn::new(0x1234),
            dest: SocketAddr::new(peer(), 4791),
            msn: Msn::new(5),
            rnr_timer: 14,
            traffic_class: 0,
            hop_limit: 64,
        })
    }
}

/// The answer parsed, its ICRC checked in the datagram it goes in.
fn check_answer(a: &AnswerPacket, psn: u32, want: Syndrome) {
    assert_eq!(a.dst, SocketAddr::new(peer(), 4791));
    let d = DatagramRepr::new(
        IpRepr::between(local().ip(), peer(), 0).unwrap(),
        4791,
        4791,
    );
    let mut whole = vec![0u8; d.header_len() + a.data.len()];
    d.emit_headers(&mut whole, a.data.len()).unwrap();
    whole[d.header_len()..].copy_from_slice(&a.data);
    assert!(
        RoceDatagram::new_checked(&whole[..]).unwrap().icrc_ok(),
        "bad ICRC"
    );
    let p = PacketRepr::parse_bytes(&a.data).unwrap();
    assert_eq!(p.bth.opcode, Opcode::RC_ACKNOWLEDGE);
    assert_eq!(p.bth.dest_qp, Qpn::new(0x1234));
    assert_eq!(p.bth.psn, Psn::new(psn));
    assert_eq!(
        p.aeth,
        Some(AethRepr {
            syndrome: want,
            msn: Msn::new(5)
        })
    );
}

#[test]
fn rem_access_answers_the_next_read_once() {
    let mut inj = injector("rem-access=1", 1, false);
    let mut r = responder();
    // A WRITE and an ACK are not READs.
    let w = rc(Operation::RdmaWrite, Position::Only, 7, 10, 64);
    assert_eq!(
        inj.process(0, peer(), &0, &w, &mut r),
        Step::Pass { flip: vec![] }
    );
    let read = rc(Operation::ReadRequest, Position::Only, 7, 11, 0);
    // From another address than the QP's peer: left alone.
    let stranger: IpAddr = "10.0.0.66".parse().unwrap();
    assert_eq!(
        inj.process(0, stranger, &0, &read, &mut r),
        Step::Pass { flip: vec![] }
    );
    // For a QP that does not answer (not RC, unknown): left alone.
    let other_qp = rc(Operation::ReadRequest, Position::Only, 8, 11, 0);
    assert_eq!(
        inj.process(0, peer(), &0, &other_qp, &mut r),
        Step::Pass { flip: vec![] }
    );
    assert_eq!(inj.process(0, peer(), &0, &read, &mut r), Step::Gone);
    let a = inj.poll_answer().expect("an answer");
    check_answer(&a, 11, Syndrome::Nak(NakCode::RemoteAccessError));
    assert!(inj.poll_answer().is_none());
    // What followed it is swallowed until the requester goes back to 11 …
    let next = rc(Operation::ReadRequest, Position::Only, 7, 12, 0);
    assert_eq!(inj.process(1, peer(), &0, &next, &mut r), Step::Gone);
    // … and the READ itself, sent again, passes: one answer only.
    assert_eq!(
        inj.process(2, peer(), &0, &read, &mut r),
        Step::Pass { flip: vec![] }
    );
    assert_eq!(
        inj.process(3, peer(), &0, &next, &mut r),
        Step::Pass { flip: vec![] }
    );
    let c = inj.counters();
    assert_eq!((c.answered_rem_access, c.swallowed), (1, 1));
}

#[test]
fn rnr_storm_answers_n_sends_and_swallows_their_followers() {
    let mut inj = injector("rnr=2", 1, false);
    let mut r = responder();
    let first = rc(Operation::Send, Position::First, 7, 100, 1024);
    let middle = rc(Operation::Send, Position::Middle, 7, 101, 1024);
    let last = rc(Operation::Send, Position::Last, 7, 102, 1024);
    for round in 0..3 {
        let want = if round < 2 {
            [Step::Gone, Step::Gone, Step::Gone]
        } else {
            std::array::from_fn(|_| Step::Pass { flip: vec![] })
        };
        for (d, w) in [&first, &middle, &last].iter().zip(want) {
            assert_eq!(
                inj.process(round, peer(), &0, d, &mut r),
                w,
                "round {round}"
            );
        }
        if round < 2 {
            check_answer(
                &inj.poll_answer().unwrap(),
                100,
                Syndrome::RnrNak { timer: 14 },
            );
        }
        assert!(inj.poll_answer().is_none());
    }
    let c = inj.counters();
    assert_eq!((c.answered_rnr, c.swallowed), (2, 4));
    // A WRITE never gets an RNR NAK.
    let mut inj = injector("rnr=1", 1, false);
    let w = rc(Operation::RdmaWrite, Position::First, 7, 5, 1024);
    assert_eq!(
        inj.process(0, peer(), &0, &w, &mut r),
        Step::Pass { flip: vec![] }
    );
}

#[test]
fn answers_of_each_class() {
    let mut r = responder();
    for (spec, op, pos, want) in [
        (
            "rem-access=write:1",
            Operation::RdmaWrite,
            Position::First,
            NakCode::RemoteAccessError,
        ),
        (
            "rem-inv-req=1",
            Operation::FetchAdd,
            Position::Only,
            NakCode::InvalidRequest,
        ),
        (
            "rem-op=send:1",
            Operation::Send,
            Position::Only,
            NakCode::RemoteOperationalError,
        ),
        (
            "rem-access=atomic:1",
            Operation::CompareSwap,
            Position::Only,
            NakCode::RemoteAccessError,
        ),
    ] {
        let mut inj = injector(spec, 1, false);
        // A MIDDLE packet never starts a message: not answered.
        if pos == Position::First {
            let mid = rc(op, Position::Middle, 7, 1, 1024);
            assert_eq!(
                inj.process(0, peer(), &0, &mid, &mut r),
                Step::Pass { flip: vec![] }
            );
        }
        let d = if op.is_atomic() {
            // Atomics carry an AtomicETH: built by hand here.
            atomic(op, 7, 2)
        } else {
            rc(
                op,
                pos,
                7,
                2,
                if pos == Position::Only && op == Operation::FetchAdd {
                    0
                } else {
                    16
                },
            )
        };
        assert_eq!(inj.process(0, peer(), &0, &d, &mut r), Step::Gone, "{spec}");
        check_answer(&inj.poll_answer().unwrap(), 2, Syndrome::Nak(want));
    }
}

fn atomic(op: Operation, qpn: u32, psn: u32) -> Vec<u8> {
    let opcode = Opcode::find(Transport::Rc, op, Position::Only, false, false).unwrap();
    let mut r = PacketRepr::new(
        BthRepr {
            ack_req: true,
            ..BthRepr::new(opcode, Qpn::new(qpn), Psn::new(psn))
        },
        &[],
    );
    r.atomic_eth = Some(softrdma_wire::ext::AtomicEthRepr {
        va: 0x1000,
        rkey: RKey(1),
        swap_add: 1,
        compare: 0,
    });
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut b).unwrap();
    b
}

#[test]
fn held_bytes_are_bounded() {
    let mut inj = injector("delay=1s", 1, true);
    let d = vec![0u8; 4096];
    let mut held = 0;
    for i in 0..(MAX_HELD_BYTES / 4096 + 10) {
        match inj.process(0, peer(), &(i as u32), &d, &mut no_responder) {
            Step::Held => held += 1,
            Step::Gone => {}
            s => panic!("{s:?}"),
        }
    }
    assert_eq!(held, MAX_HELD_BYTES / 4096);
    assert_eq!(inj.counters().held_overflow, 10);
}
