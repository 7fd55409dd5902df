//! Helpers of the CM's scripted tests: two CMs, their MADs delivered by
//! hand at explicit virtual times.
#![allow(dead_code)]

use softrdma_cm::negotiate::{self, ConnParam};
use softrdma_cm::{Cm, CmConfig, CmId, Event, Instant, QpType, ReqParams, ServiceId, Transmit};
use softrdma_wire::cm::{CmMadRepr, CmMsg, CmaHdrRepr, PortSpace};
use softrdma_wire::{Psn, Qpn};
use std::net::IpAddr;

pub const GUID_A: u64 = 0x5054_00ff_fe12_0002;
pub const GUID_B: u64 = 0x5054_00ff_fe12_0001;

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub fn ip_a() -> IpAddr {
    ip("198.18.0.2")
}
pub fn ip_b() -> IpAddr {
    ip("198.18.0.1")
}

/// rping's service: TCP port 7174.
pub fn sid() -> ServiceId {
    ServiceId::rdma_cm(PortSpace::Tcp, 7174)
}

pub fn cm(guid: u64, seed: u64) -> Cm {
    Cm::new(CmConfig::new(guid, [seed, !seed]))
}

/// A client (a) and a server (b).
pub struct Pair {
    pub a: Cm,
    pub b: Cm,
    pub now: Instant,
}

impl Pair {
    pub fn new() -> Pair {
        Pair {
            a: cm(GUID_A, 1),
            b: cm(GUID_B, 2),
            now: Instant(0),
        }
    }

    pub fn at_ms(&mut self, ms: u64) {
        self.now = Instant(ms * 1_000_000);
    }

    /// Runs both CMs' timers at the current time.
    pub fn tick(&mut self) {
        self.a.handle_timeout(self.now);
        self.b.handle_timeout(self.now);
    }

    /// a's MADs, all delivered to b; returns them.
    pub fn a_to_b(&mut self) -> Vec<Transmit> {
        let t = take_tx(&mut self.a);
        for x in &t {
            assert_eq!(x.dst, ip_b());
            self.b.handle_mad(self.now, ip_a(), Qpn::GSI, &x.mad);
        }
        t
    }

    /// b's MADs, all delivered to a.
    pub fn b_to_a(&mut self) -> Vec<Transmit> {
        let t = take_tx(&mut self.b);
        for x in &t {
            assert_eq!(x.dst, ip_a());
            self.a.handle_mad(self.now, ip_b(), Qpn::GSI, &x.mad);
        }
        t
    }
}

pub fn take_tx(cm: &mut Cm) -> Vec<Transmit> {
    std::iter::from_fn(|| cm.poll_transmit()).collect()
}

pub fn events(cm: &mut Cm) -> Vec<Event> {
    std::iter::from_fn(|| cm.poll_event()).collect()
}

pub fn one_event(cm: &mut Cm) -> Event {
    let e = events(cm);
    assert_eq!(e.len(), 1, "{e:?}");
    e.into_iter().next().unwrap()
}

pub fn parse(t: &Transmit) -> CmMadRepr<'_> {
    CmMadRepr::parse(&t.mad).expect("a CM MAD")
}

pub fn names(t: &[Transmit]) -> Vec<&'static str> {
    t.iter().map(|x| parse(x).msg.name()).collect()
}

pub fn only<'a>(t: &'a [Transmit], name: &str) -> CmMsg<'a> {
    assert_eq!(t.len(), 1, "{:?}", names(t));
    let m = parse(&t[0]);
    assert_eq!(m.msg.name(), name);
    m.msg
}

/// rping's client REQ: rr 1, id 1, retry 7, rnr 7, QPN 0x27, port 54667.
pub fn rping_req(psn: u32) -> ReqParams {
    rping_req_qpn(psn, 0x27)
}

pub fn rping_req_qpn(psn: u32, qpn: u32) -> ReqParams {
    let path = negotiate::rdma_cm_path(ip_a(), ip_b(), 54667, 7174, 3, 0, 64);
    let cma = CmaHdrRepr {
        src_port: 54667,
        src: ip_a(),
        dst: ip_b(),
    };
    let conn = ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        qp_num: Qpn::new(qpn),
        ..Default::default()
    };
    negotiate::req_params(&path, sid(), &cma, QpType::Rc, Psn::new(psn), &conn).unwrap()
}

/// rping's server accept: rr 1, id 1, rnr 7, QPN 0x27.
pub fn rping_rep(psn: u32) -> softrdma_cm::RepParams {
    rping_rep_qpn(psn, 0x27)
}

pub fn rping_rep_qpn(psn: u32, qpn: u32) -> softrdma_cm::RepParams {
    let conn = ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        qp_num: Qpn::new(qpn),
        ..Default::default()
    };
    negotiate::rep_params(Psn::new(psn), &conn).unwrap()
}

/// b listens on `sid()` and has taken a's REQ: returns the pair, the
/// client's id and the server's (its ConnectRequest event consumed).
pub fn requested() -> (Pair, CmId, CmId) {
    let mut p = Pair::new();
    p.b.listen(sid()).unwrap();
    let a = p.a.connect(p.now, &rping_req(1)).unwrap();
    p.a_to_b();
    let s = one_event(&mut p.b).id();
    (p, a, s)
}

/// Connects a to b up to both established; returns (client id, server
/// id). The server listens on `sid()` first if not yet.
pub fn connect(p: &mut Pair) -> (CmId, CmId) {
    let _ = p.b.listen(sid());
    let a = p.a.connect(p.now, &rping_req(0x123456)).unwrap();
    p.a_to_b();
    let Event::ConnectRequest(cr) = one_event(&mut p.b) else {
        panic!("no connect request")
    };
    p.b.accept(p.now, cr.id, &rping_rep(0x654321)).unwrap();
    p.b_to_a();
    let Event::RepReceived(rr) = one_event(&mut p.a) else {
        panic!("no REP")
    };
    assert_eq!(rr.id, a);
    p.a.establish(p.now, a, &[]).unwrap();
    p.a_to_b();
    assert_eq!(one_event(&mut p.b), Event::Established { id: cr.id });
    (a, cr.id)
}
