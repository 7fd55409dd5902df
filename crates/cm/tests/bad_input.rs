//! Hostile MADs against CMs with live ids in many states.
//!
//! Each case builds a client and a server with connections established,
//! half-open (REQ unanswered, REP unanswered), disconnecting, in timewait,
//! a SIDR request pending and a listener, then feeds a random sequence of
//! MADs: random bytes of any length; real MADs of the session with bytes
//! flipped, comm IDs replaced by live ones, the attribute, class version,
//! method or length changed; replays of anything seen; interleaved with
//! time passing and random calls on random ids. Whatever the CMs send is
//! delivered to the other side, so the session keeps moving.
//!
//! Checked after every step: no panic, the CMs' tables agree
//! (`check_invariants`). At the end every id is destroyed and the clock
//! runs far ahead: both CMs must be quiescent (no id, timer, record or
//! queued output left), so nothing leaked.

mod support;

use proptest::prelude::*;
use softrdma_cm::{Cm, CmId, Event, Instant, RejReason, SidrReqParams};
use softrdma_wire::cm::{PortSpace, ServiceId};
use softrdma_wire::{PKey, Qpn};
use support::*;

#[derive(Clone, Debug)]
enum Op {
    /// Random bytes to a or b.
    Random(bool, Vec<u8>),
    /// A seen MAD, changed, to a or b.
    Mutate {
        to_b: bool,
        base: usize,
        flips: Vec<(usize, u8)>,
        comm: Option<(bool, usize)>,
        attr: Option<u16>,
        header: Option<(u8, u8)>,
        truncate: Option<usize>,
    },
    /// A seen MAD again, unchanged.
    Replay(bool, usize),
    /// Time passes.
    Advance(u64),
    /// A call on a live id.
    Call(bool, u8, usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (any::<bool>(), proptest::collection::vec(any::<u8>(), 0..300))
            .prop_map(|(b, v)| Op::Random(b, v)),
        2 => (any::<bool>(), proptest::collection::vec(any::<u8>(), 256))
            .prop_map(|(b, v)| Op::Random(b, v)),
        6 => (
            any::<bool>(),
            any::<usize>(),
            proptest::collection::vec((0usize..256, any::<u8>()), 0..4),
            proptest::option::of((any::<bool>(), any::<usize>())),
            proptest::option::of(prop_oneof![0x0010u16..=0x001a, any::<u16>()]),
            proptest::option::of((0u8..4, any::<u8>())),
            proptest::option::weighted(0.1, 0usize..300),
        )
            .prop_map(|(to_b, base, flips, comm, attr, header, truncate)| Op::Mutate {
                to_b,
                base,
                flips,
                comm,
                attr,
                header,
                truncate,
            }),
        4 => (any::<bool>(), any::<usize>()).prop_map(|(b, i)| Op::Replay(b, i)),
        2 => prop_oneof![0u64..10, 1000u64..7000, 60_000u64..200_000].prop_map(Op::Advance),
        2 => (any::<bool>(), any::<u8>(), any::<usize>()).prop_map(|(b, w, i)| Op::Call(b, w, i)),
    ]
}

struct World {
    p: Pair,
    seen: Vec<[u8; 256]>,
}

impl World {
    /// Delivers everything queued, both ways, until quiet; remembers it.
    fn pump(&mut self) {
        for _ in 0..64 {
            let ta = take_tx(&mut self.p.a);
            let tb = take_tx(&mut self.p.b);
            if ta.is_empty() && tb.is_empty() {
                return;
            }
            for t in ta {
                self.seen.push(t.mad);
                self.p.b.handle_mad(self.p.now, ip_a(), t.dst_qpn, &t.mad);
            }
            for t in tb {
                self.seen.push(t.mad);
                self.p.a.handle_mad(self.p.now, ip_b(), t.dst_qpn, &t.mad);
            }
            // Events are read and answered like a busy but sane driver.
            let _ = events(&mut self.p.a);
            let _ = events(&mut self.p.b);
        }
    }

    /// Moves the clock to `target`, stopping at every timer on the way
    /// (as a driver does) and delivering what the timers send.
    fn advance_to(&mut self, target: Instant) {
        loop {
            let next = [self.p.a.poll_timeout(), self.p.b.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) if t <= target => {
                    self.p.now = self.p.now.max(t);
                    self.p.tick();
                    self.pump();
                    self.check();
                }
                _ => break,
            }
        }
        self.p.now = self.p.now.max(target);
    }

    fn cm(&mut self, b: bool) -> &mut Cm {
        if b {
            &mut self.p.b
        } else {
            &mut self.p.a
        }
    }

    fn live(&self, b: bool) -> Vec<CmId> {
        if b {
            self.p.b.ids().collect()
        } else {
            self.p.a.ids().collect()
        }
    }

    fn check(&self) {
        self.p.a.check_invariants().expect("client tables");
        self.p.b.check_invariants().expect("server tables");
    }
}

/// A session with ids in many states.
fn world() -> World {
    let mut w = World {
        p: Pair::new(),
        seen: Vec::new(),
    };
    w.p.b.listen(sid()).unwrap();
    w.p.b.listen(ServiceId::rdma_cm(PortSpace::Udp, 9)).unwrap();
    // Two established connections.
    for qpn in [0x30, 0x31] {
        w.p.a.connect(w.p.now, &rping_req_qpn(qpn, qpn)).unwrap();
        w.pump();
    }
    // Accept and establish what is pending.
    let pending: Vec<CmId> = w.p.b.ids().collect();
    for (k, id) in pending.into_iter().enumerate() {
        // Distinct server QPNs: a QPN reused is a stale connection.
        let _ =
            w.p.b
                .accept(w.p.now, id, &rping_rep_qpn(5, 0x50 + k as u32));
    }
    w.pump();
    let ids: Vec<CmId> = w.p.a.ids().collect();
    for id in ids {
        let _ = w.p.a.establish(w.p.now, id, &[]);
    }
    w.pump();
    // One disconnecting, one REQ unanswered, one REP unanswered, a SIDR.
    let first = w.p.a.ids().next().unwrap();
    w.p.a.disconnect(w.p.now, first, &[]).unwrap();
    let p = &mut w.p;
    p.a.connect(p.now, &rping_req_qpn(1, 0x40)).unwrap();
    p.a.connect(p.now, &rping_req_qpn(2, 0x41)).unwrap();
    p.a.sidr_request(
        p.now,
        &SidrReqParams {
            peer: ip_b(),
            service_id: ServiceId::rdma_cm(PortSpace::Udp, 9),
            pkey: PKey::DEFAULT,
            timeout_ms: 4096,
            max_cm_retries: 15,
            private_data: vec![],
        },
    )
    .unwrap();
    w.pump();
    let waiting: Vec<CmId> = w.p.b.ids().collect();
    if let Some(&id) = waiting
        .iter()
        .find(|&&i| w.p.b.state(i) == Some(softrdma_cm::State::MraReqSent))
    {
        let _ = w.p.b.accept(w.p.now, id, &rping_rep_qpn(6, 0x60));
    }
    // That REP is delivered, its RTU is not: the server stays in REP_SENT.
    let rep = take_tx(&mut w.p.b);
    for t in rep {
        w.seen.push(t.mad);
        w.p.a.handle_mad(w.p.now, ip_b(), Qpn::GSI, &t.mad);
    }
    let _ = take_tx(&mut w.p.a);
    let _ = events(&mut w.p.a);
    w.check();
    w
}

fn apply(w: &mut World, op: Op) {
    match op {
        Op::Random(to_b, bytes) => {
            let now = w.p.now;
            let src = if to_b { ip_a() } else { ip_b() };
            w.cm(to_b).handle_mad(now, src, Qpn::GSI, &bytes);
        }
        Op::Mutate {
            to_b,
            base,
            flips,
            comm,
            attr,
            header,
            truncate,
        } => {
            if w.seen.is_empty() {
                return;
            }
            let mut m = w.seen[base % w.seen.len()];
            for (at, x) in flips {
                m[at] ^= x;
            }
            if let Some((remote_slot, k)) = comm {
                // A live comm ID of the receiver (or the sender) in the
                // Local or Remote Comm ID slot.
                let ids: Vec<CmId> = w.live(to_b).into_iter().chain(w.live(!to_b)).collect();
                if !ids.is_empty() {
                    let c = ids[k % ids.len()].comm_id();
                    let at = if remote_slot { 28 } else { 24 };
                    m[at..at + 4].copy_from_slice(&c.to_be_bytes());
                }
            }
            if let Some(a) = attr {
                m[16..18].copy_from_slice(&a.to_be_bytes());
            }
            if let Some((field, v)) = header {
                m[field as usize] = v;
            }
            let len = truncate.unwrap_or(256).min(256);
            let now = w.p.now;
            let src = if to_b { ip_a() } else { ip_b() };
            w.cm(to_b).handle_mad(now, src, Qpn::GSI, &m[..len]);
        }
        Op::Replay(to_b, i) => {
            if w.seen.is_empty() {
                return;
            }
            let m = w.seen[i % w.seen.len()];
            let now = w.p.now;
            let src = if to_b { ip_a() } else { ip_b() };
            w.cm(to_b).handle_mad(now, src, Qpn::GSI, &m);
        }
        Op::Advance(ms) => {
            let target = w.p.now.add_ms(ms);
            w.advance_to(target);
        }
        Op::Call(b, what, k) => {
            let ids = w.live(b);
            if ids.is_empty() {
                return;
            }
            let id = ids[k % ids.len()];
            let now = w.p.now;
            let cm = w.cm(b);
            // Errors are fine; side effects must be consistent.
            let _ = match what % 7 {
                0 => cm.destroy(now, id),
                1 => cm.disconnect(now, id, b"x"),
                2 => cm.accept(now, id, &rping_rep_qpn(3, 0x70 + (k % 8) as u32)),
                3 => cm.reject(now, id, RejReason::CONSUMER_DEFINED, &[], &[1]),
                4 => cm.establish(now, id, &[]),
                5 => cm.notify_established(id),
                _ => cm.drop_request(id),
            };
        }
    }
    w.pump();
    w.check();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn hostile_mads_never_break_the_cm(ops in proptest::collection::vec(op(), 1..60)) {
        let mut w = world();
        for op in ops {
            apply(&mut w, op);
        }
        // Every id can be destroyed, whatever state it reached.
        for b in [false, true] {
            for id in w.live(b) {
                let now = w.p.now;
                w.cm(b).destroy(now, id).expect("a live id destroys");
            }
        }
        w.pump();
        // Past every timer: timewait records (up to ms(31) with a hostile
        // ACK timeout) and retransmissions all expire.
        let target = w.p.now.add_ms(1 << 24);
        w.advance_to(target);
        // MADs still in flight after the destroys may have created ids
        // (a REQ, a SIDR_REQ): destroy those too and wait again.
        for b in [false, true] {
            for id in w.live(b) {
                let now = w.p.now;
                w.cm(b).destroy(now, id).expect("a live id destroys");
            }
        }
        let _ = take_tx(&mut w.p.a);
        let _ = take_tx(&mut w.p.b);
        let target = w.p.now.add_ms(1 << 24);
        while let Some(t) = [w.p.a.poll_timeout(), w.p.b.poll_timeout()].into_iter().flatten().min() {
            prop_assert!(t <= target, "a timer past every protocol timeout");
            w.p.now = t;
            w.p.tick();
            let _ = take_tx(&mut w.p.a);
            let _ = take_tx(&mut w.p.b);
        }
        let _ = events(&mut w.p.a);
        let _ = events(&mut w.p.b);
        let _ = take_tx(&mut w.p.a);
        let _ = take_tx(&mut w.p.b);
        w.check();
        prop_assert!(w.p.a.is_quiescent(), "client left {:?}", w.p.a);
        prop_assert!(w.p.b.is_quiescent(), "server left {:?}", w.p.b);
    }
}

#[test]
fn the_world_has_ids_in_many_states() {
    use softrdma_cm::State::*;
    let w = world();
    let mut states: Vec<_> =
        w.p.a
            .ids()
            .map(|i| w.p.a.state(i).unwrap())
            .chain(w.p.b.ids().map(|i| w.p.b.state(i).unwrap()))
            .collect();
    states.sort_by_key(|s| format!("{s:?}"));
    for s in [
        Listen,
        Established,
        DreqSent,
        DreqRcvd,
        MraReqSent,
        RepSent,
        MraRepSent,
        SidrReqRcvd,
        SidrReqSent,
    ] {
        assert!(states.contains(&s), "{s:?} missing from {states:?}");
    }
    let _ = Event::TimewaitExit {
        id: CmId::from_comm_id(1),
    };
    let _ = Instant(0);
}
