//! Two endpoints, one device each, their MADs carried by hand: the ids'
//! calls and what comes out of them.

use super::*;
use crate::limits::PARK_NS;
use crate::negotiate::QpState;
use crate::RejReason;

const A: u64 = 1;
const B: u64 = 2;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Client `a` on 10.0.0.1, server `b` on 10.0.0.2 listening on
/// 0.0.0.0:7000 (RC) and 0.0.0.0:7001 (UD).
fn pair() -> (Endpoint, Endpoint, u64, u64) {
    let mut a = Endpoint::new();
    let mut b = Endpoint::new();
    a.add_device(A, CmConfig::new(1, [1, 2]), ip("10.0.0.1"), Instant(0));
    b.add_device(B, CmConfig::new(2, [3, 4]), ip("10.0.0.2"), Instant(0));
    let mut listen = |ps, t, port| {
        let l = b.create_id(ps, t, Psn::new(9));
        let any = SocketAddr::new(ip("0.0.0.0"), port);
        assert_eq!(b.bind(l, None, any, 0), Ok(port));
        b.listen(l, 0, Instant(0)).expect("listen");
        l
    };
    let rc = listen(PortSpace::Tcp, Transport::Rc, 7000);
    let ud = listen(PortSpace::Udp, Transport::Ud, 7001);
    (a, b, rc, ud)
}

/// Carries every MAD between the two until neither has one.
fn carry(a: &mut Endpoint, b: &mut Endpoint, now: Instant) -> usize {
    let mut n = 0;
    loop {
        let mut moved = false;
        while let Some((_, t)) = a.poll_transmit() {
            b.receive(B, now, ip("10.0.0.1"), t.dst_qpn, &t.mad);
            moved = true;
            n += 1;
        }
        while let Some((_, t)) = b.poll_transmit() {
            a.receive(A, now, ip("10.0.0.2"), t.dst_qpn, &t.mad);
            moved = true;
            n += 1;
        }
        if !moved {
            return n;
        }
    }
}

/// An active id on `a` resolved to 10.0.0.2:`port`.
fn active(a: &mut Endpoint, ps: PortSpace, t: Transport, port: u16) -> u64 {
    let c = a.create_id(ps, t, Psn::new(0x77));
    let dst = SocketAddr::new(ip("10.0.0.2"), port);
    let path = rdma_cm_path(ip("10.0.0.1"), dst.ip(), 0, port, 3, 0, 64);
    let p = a
        .resolve(c, A, ip("10.0.0.1"), dst, path, 5)
        .expect("resolve");
    assert!(p >= crate::limits::EPHEMERAL_PORTS.0, "an ephemeral port");
    c
}

fn next(e: &mut Endpoint) -> IdEvent {
    let q = e.poll_event().expect("an event");
    e.ack(q.id);
    q
}

#[test]
fn connect_accept_establish_disconnect() {
    let (mut a, mut b, rc, _) = pair();
    let c = active(&mut a, PortSpace::Tcp, Transport::Rc, 7000);
    let p = ConnParam {
        private_data: b"hello".to_vec(),
        qp_num: 0x11,
        ..Default::default()
    };
    a.connect(c, Instant(1), Some(&p), 16).expect("connect");
    assert_eq!(a.id(c).map(|e| e.st), Some(IdState::Connect));
    carry(&mut a, &mut b, Instant(2));
    let req = b.poll_event().expect("CONNECT_REQUEST");
    assert_eq!(req.event, EventType::ConnectRequest);
    assert_eq!(req.listen_id, Some(rc));
    assert_eq!(&req.conn.private_data[..5], b"hello");
    assert_eq!(b.unacked(req.id), 1, "reported, not acknowledged");
    b.ack(req.id);
    b.claim(req.id);
    let s = req.id;
    let se = b.id(s).expect("the request's id");
    assert_eq!(se.listener, Some(rc));
    assert_eq!(se.src.map(|x| x.port()), Some(7000));
    assert_eq!(se.dst.map(|x| x.ip()), Some(ip("10.0.0.1")));
    // The server's QP: INIT now, INIT/RTR/RTS with the accept.
    b.attach_qp(s, Qpn::new(0x22), false).expect("attach");
    let init = b.poll_qp_change().expect("INIT");
    assert!(matches!(init, (n, q, QpChange::Modify(a))
        if n == s && q == Qpn::new(0x22) && a.attr.qp_state == QpState::Init));
    // The accept's moves come first, for the driver to apply; no REP is
    // out before it calls `accept` (a move that fails fails the accept
    // with nothing sent, as librdmacm's).
    let changes = b.accept_changes(s, None, 16).expect("the accept's moves");
    let states: Vec<_> = changes
        .iter()
        .map(|(q, c)| match c {
            QpChange::Modify(a) if *q == Qpn::new(0x22) => a.attr.qp_state,
            _ => QpState::Err,
        })
        .collect();
    assert_eq!(states, [QpState::Init, QpState::Rtr, QpState::Rts]);
    assert!(b.poll_transmit().is_none(), "no REP before the QP moved");
    assert!(b.poll_qp_change().is_none());
    assert_eq!(b.cm_state(s), Some(crate::State::MraReqSent), "no REP");
    b.accept(s, Instant(3), None, 16).expect("accept");
    assert!(b.poll_qp_change().is_none(), "moved by the driver already");
    carry(&mut a, &mut b, Instant(4));
    let rep = next(&mut a);
    assert_eq!((rep.id, rep.event), (c, EventType::ConnectResponse));
    assert_eq!(rep.conn.qp_num, 0x22);
    a.establish(c, Instant(5)).expect("RTU");
    carry(&mut a, &mut b, Instant(6));
    assert_eq!(next(&mut b).event, EventType::Established);
    assert_eq!(a.cm_state(c), Some(crate::State::Established));
    // The client disconnects; the server answers its DISCONNECTED.
    a.disconnect(c, Instant(7)).expect("DREQ");
    carry(&mut a, &mut b, Instant(8));
    let d = next(&mut b);
    assert_eq!((d.id, d.event), (s, EventType::Disconnected));
    b.disconnect(s, Instant(9)).expect("DREP");
    assert_eq!(
        b.poll_qp_change().map(|c| c.2),
        Some(QpChange::ToErr),
        "the QP to ERR first"
    );
    carry(&mut a, &mut b, Instant(10));
    assert_eq!(next(&mut a).event, EventType::Disconnected);
    // Timewait ends on both sides, then the ids go.
    let t = a
        .deadline()
        .expect("timewait")
        .max(b.deadline().expect("timewait"));
    a.handle_timeout(t);
    b.handle_timeout(t);
    assert_eq!(next(&mut a).event, EventType::TimewaitExit);
    assert_eq!(next(&mut b).event, EventType::TimewaitExit);
    let src = a.id(c).and_then(|e| e.src).expect("bound");
    a.destroy(c, t).expect("destroy");
    assert!(a.ports.is_free(PortSpace::Tcp, src.port()), "the port went");
    b.destroy(s, t).expect("destroy");
    assert!(a.is_quiescent());
    assert_eq!(b.ids().count(), 2, "the two listeners");
}

#[test]
fn a_reject_reaches_the_client_with_its_data() {
    let (mut a, mut b, _, _) = pair();
    let c = active(&mut a, PortSpace::Tcp, Transport::Rc, 7000);
    a.connect(c, Instant(1), Some(&ConnParam::default()), 16)
        .expect("connect");
    carry(&mut a, &mut b, Instant(2));
    let s = next(&mut b).id;
    b.reject(s, Instant(3), b"no thanks", RejReason::CONSUMER_DEFINED)
        .expect("reject");
    carry(&mut a, &mut b, Instant(4));
    let r = next(&mut a);
    assert_eq!((r.event, r.status), (EventType::Rejected, 28));
    assert_eq!(&r.conn.private_data[..9], b"no thanks");
    assert_eq!(a.id(c).map(|e| e.st), Some(IdState::RouteResolved));
}

#[test]
fn nobody_listening_is_a_rej_8_after_the_hold() {
    let (mut a, mut b, _, _) = pair();
    let c = active(&mut a, PortSpace::Tcp, Transport::Rc, 7999);
    a.connect(c, Instant(0), Some(&ConnParam::default()), 16)
        .expect("connect");
    carry(&mut a, &mut b, Instant(0));
    assert_eq!(b.deadline(), Some(Instant(PARK_NS)), "held for a listener");
    b.handle_timeout(Instant(PARK_NS));
    carry(&mut a, &mut b, Instant(PARK_NS));
    let r = next(&mut a);
    assert_eq!((r.event, r.status), (EventType::Rejected, 8));
}

#[test]
fn sidr_resolves_the_peer_qp() {
    let (mut a, mut b, _, _) = pair();
    let c = active(&mut a, PortSpace::Udp, Transport::Ud, 7001);
    let p = ConnParam {
        private_data: b"ud".to_vec(),
        ..Default::default()
    };
    a.connect(c, Instant(1), Some(&p), 16).expect("SIDR_REQ");
    carry(&mut a, &mut b, Instant(2));
    let req = next(&mut b);
    assert_eq!(req.event, EventType::ConnectRequest);
    assert_eq!(
        req.ud.map(|u| u.private_data[..2].to_vec()),
        Some(b"ud".to_vec())
    );
    b.claim(req.id);
    b.attach_qp(req.id, Qpn::new(0x33), false).expect("UD QP");
    assert_eq!(
        std::iter::from_fn(|| b.poll_qp_change()).count(),
        3,
        "INIT, RTR, RTS"
    );
    b.accept(req.id, Instant(3), None, 16).expect("SIDR_REP");
    carry(&mut a, &mut b, Instant(4));
    let est = next(&mut a);
    assert_eq!(est.event, EventType::Established);
    assert_eq!(est.ud.map(|u| u.qp_num), Some(0x33));
    assert_eq!(
        a.id(c).and_then(|e| e.remote_ud),
        Some((Qpn::new(0x33), crate::limits::RDMA_UDP_QKEY))
    );
}

#[test]
fn destroying_a_listener_rejects_the_requests_nobody_took() {
    let (mut a, mut b, rc, _) = pair();
    let c = active(&mut a, PortSpace::Tcp, Transport::Rc, 7000);
    a.connect(c, Instant(1), Some(&ConnParam::default()), 16)
        .expect("connect");
    carry(&mut a, &mut b, Instant(2));
    let s = b.poll_event().expect("CONNECT_REQUEST").id;
    b.destroy(rc, Instant(3)).expect("destroy the listener");
    assert!(b.id(s).is_none(), "its untaken request went too");
    assert!(b.poll_event().is_none());
    carry(&mut a, &mut b, Instant(4));
    let r = next(&mut a);
    assert_eq!((r.event, r.status), (EventType::Rejected, 28));
    assert!(!b.devs[&B].listens(service_id(PortSpace::Tcp, 7000)));
}

#[test]
fn a_full_backlog_drops_until_a_request_is_taken() {
    let (mut a, mut b, rc, _) = pair();
    // Listening already: Linux's ucma takes the backlog, `rdma_listen`
    // then fails (EINVAL).
    assert_eq!(
        b.listen(rc, 1, Instant(0)),
        Err(EndpointError::State("rdma_listen: listening already"))
    );
    assert_eq!(
        b.id(rc).and_then(|e| e.listen.as_ref()).map(|l| l.backlog),
        Some(1)
    );
    let c1 = active(&mut a, PortSpace::Tcp, Transport::Rc, 7000);
    let c2 = active(&mut a, PortSpace::Tcp, Transport::Rc, 7000);
    for (c, qpn) in [(c1, 0x41), (c2, 0x42)] {
        let p = ConnParam {
            qp_num: qpn,
            ..Default::default()
        };
        a.connect(c, Instant(1), Some(&p), 16).expect("connect");
    }
    carry(&mut a, &mut b, Instant(2));
    let first = next(&mut b);
    assert!(b.poll_event().is_none(), "the second waits (dropped)");
    b.claim(first.id);
    let t = a.deadline().expect("the REQ's retry");
    a.handle_timeout(t);
    carry(&mut a, &mut b, t);
    assert_eq!(
        next(&mut b).event,
        EventType::ConnectRequest,
        "retried, taken"
    );
}

#[test]
fn ports_and_options() {
    let (mut a, _, _, _) = pair();
    let x = a.create_id(PortSpace::Tcp, Transport::Rc, Psn::new(1));
    let y = a.create_id(PortSpace::Tcp, Transport::Rc, Psn::new(1));
    let at = SocketAddr::new(ip("10.0.0.1"), 6000);
    assert_eq!(a.bind(x, Some(A), at, 0), Ok(6000));
    assert!(matches!(
        a.bind(y, Some(A), at, 0),
        Err(EndpointError::Port(_))
    ));
    let o = Options {
        afonly: true,
        ..Default::default()
    };
    assert!(a.set_options(x, o).is_err(), "AFONLY after bind");
    let reuse = Options {
        reuseaddr: true,
        ..Default::default()
    };
    a.set_options(x, reuse).expect("REUSEADDR while bound");
    a.set_options(y, reuse).expect("REUSEADDR before bind");
    assert_eq!(a.bind(y, Some(A), at, 0), Ok(6000), "both reuse");
    // `cma_bind_listen`: a port two ids share with REUSEADDR is no place
    // to listen (Linux's EADDRINUSE; the listen once `y` is gone is in
    // `gate_tests::address_then_route_each_with_its_event`).
    assert!(matches!(
        a.listen(x, 0, Instant(0)),
        Err(EndpointError::Port(PortError::InUse(..)))
    ));
    assert_eq!(
        a.connect(x, Instant(0), None, 16),
        Err(EndpointError::State("rdma_connect: route not resolved"))
    );
    assert_eq!(
        a.destroy(99, Instant(0)).err(),
        Some(EndpointError::NoSuchId)
    );
}

/// A second `rdma_listen` on a listener sets its backlog anew (EINVAL
/// all the same): requests queued and not taken yet no longer count
/// against it, as ucma's count of free places is set to the new backlog.
#[test]
fn listening_again_sets_the_backlog_and_fails() {
    let (mut a, mut b, rc, _) = pair();
    assert!(b.listen(rc, 1, Instant(0)).is_err());
    let conn = |a: &mut Endpoint, qpn| {
        let c = active(a, PortSpace::Tcp, Transport::Rc, 7000);
        let p = ConnParam {
            qp_num: qpn,
            ..Default::default()
        };
        a.connect(c, Instant(1), Some(&p), 16).expect("connect");
    };
    conn(&mut a, 0x41);
    carry(&mut a, &mut b, Instant(2));
    assert_eq!(next(&mut b).event, EventType::ConnectRequest);
    // Not taken by the program: the backlog of 1 is full until it is set
    // again.
    conn(&mut a, 0x42);
    carry(&mut a, &mut b, Instant(2));
    assert!(b.poll_event().is_none(), "dropped: the backlog is full");
    assert!(b.listen(rc, 1, Instant(2)).is_err(), "EINVAL, backlog set");
    conn(&mut a, 0x43);
    carry(&mut a, &mut b, Instant(3));
    assert_eq!(next(&mut b).event, EventType::ConnectRequest);
    assert_eq!(
        b.id(rc).and_then(|e| e.listen.as_ref()).map(|l| l.pending),
        Some(1)
    );
}

/// A device's CM with no room for another id fails `rdma_listen`
/// (Linux: ENOMEM from `ib_cm_insert_listen`); the id is bound again and
/// no device listens for it.
#[test]
fn a_full_cm_fails_the_listen() {
    let mut b = Endpoint::new();
    b.add_device(B, CmConfig::new(2, [3, 4]), ip("10.0.0.2"), Instant(0));
    b.add_device(3, CmConfig::new(3, [5, 6]), ip("10.0.0.3"), Instant(0));
    let at = |port| SocketAddr::new(ip("10.0.0.2"), port);
    // Every port of two port spaces on device B: its table is full.
    let mut n = 0;
    'fill: for ps in [PortSpace::Tcp, PortSpace::Udp] {
        let t = Transport::of_port_space(ps);
        for port in 1..=u16::MAX {
            if n == crate::limits::MAX_IDS {
                break 'fill;
            }
            let l = b.create_id(ps, t, Psn::new(1));
            b.bind(l, Some(B), at(port), 0).expect("bind");
            b.listen(l, 0, Instant(0)).expect("room left");
            n += 1;
        }
    }
    let l = b.create_id(PortSpace::Ib, Transport::Rc, Psn::new(1));
    b.bind(l, None, SocketAddr::new(ip("0.0.0.0"), 5), 0)
        .expect("bind");
    assert_eq!(
        b.listen(l, 0, Instant(0)),
        Err(EndpointError::Cm(CmError::TooManyIds))
    );
    let e = b.id(l).expect("the id");
    assert_eq!((e.st, e.listen.is_none()), (IdState::AddrBound, true));
    let sid = service_id(PortSpace::Ib, 5);
    assert!(!b.devs[&3].listens(sid), "device 3's listen undone");
    assert!(!b.devs[&B].listens(sid));
}

#[path = "gate_tests.rs"]
mod gate_tests;
