//! The endpoint's device facts (a shared device's listen gate, a device
//! forked away), multicast joins, the four port spaces and XRC ids.

use super::*;
use crate::rdma::MCAST_HOP_LIMIT;
use softrdma_wire::Gid;

/// An RC connection from `a` to `b`'s listener on `port`, established;
/// (client id, server id).
fn connected(a: &mut Endpoint, b: &mut Endpoint, port: u16) -> (u64, u64) {
    let c = active(a, PortSpace::Tcp, Transport::Rc, port);
    a.connect(c, Instant(1), Some(&ConnParam::default()), 16)
        .expect("connect");
    carry(a, b, Instant(2));
    let s = next(b).id;
    b.claim(s);
    b.accept(s, Instant(3), Some(&ConnParam::default()), 16)
        .expect("accept");
    carry(a, b, Instant(4));
    assert_eq!(next(a).event, EventType::ConnectResponse);
    a.establish(c, Instant(5)).expect("RTU");
    carry(a, b, Instant(6));
    assert_eq!(next(b).event, EventType::Established);
    (c, s)
}

#[test]
fn a_gated_device_listens_once_its_device_process_agrees() {
    let mut a = Endpoint::new();
    let mut b = Endpoint::new();
    a.add_device(A, CmConfig::new(1, [1, 2]), ip("10.0.0.1"), Instant(0));
    b.add_device(B, CmConfig::new(2, [3, 4]), ip("10.0.0.2"), Instant(0));
    b.set_gated(B, true);
    let sid = service_id(PortSpace::Tcp, 7000);
    let l = b.create_id(PortSpace::Tcp, Transport::Rc, Psn::new(9));
    b.bind(l, None, SocketAddr::new(ip("0.0.0.0"), 7000), 0)
        .expect("bind");
    b.listen(l, 0, Instant(0)).expect("listen");
    assert_eq!(b.poll_gate(), Some(GateAsk::Listen { dev: B, sid }));
    assert_eq!(b.poll_gate(), None, "asked once");
    assert!(!b.devs[&B].listens(sid), "not before the answer");
    // A request that comes first is held, and asks again.
    let c = active(&mut a, PortSpace::Tcp, Transport::Rc, 7000);
    a.connect(c, Instant(1), Some(&ConnParam::default()), 16)
        .expect("connect");
    carry(&mut a, &mut b, Instant(2));
    assert!(b.poll_event().is_none(), "held");
    assert_eq!(b.poll_gate(), Some(GateAsk::Listen { dev: B, sid }));
    b.gate_listen(B, sid, true, Instant(3))
        .expect("the CM listens");
    assert!(b.devs[&B].listens(sid));
    let req = next(&mut b);
    assert_eq!(
        (req.event, req.listen_id),
        (EventType::ConnectRequest, Some(l))
    );
    // The last listener goes: the service goes back.
    b.destroy(l, Instant(4)).expect("destroy");
    assert_eq!(b.poll_gate(), Some(GateAsk::Unlisten { dev: B, sid }));
    assert!(!b.devs[&B].listens(sid));
    // An approval that comes after the listener went gives it back.
    let l2 = b.create_id(PortSpace::Tcp, Transport::Rc, Psn::new(9));
    b.bind(l2, Some(B), SocketAddr::new(ip("10.0.0.2"), 7001), 0)
        .expect("bind");
    b.listen(l2, 0, Instant(5)).expect("listen");
    let sid2 = service_id(PortSpace::Tcp, 7001);
    assert_eq!(b.poll_gate(), Some(GateAsk::Listen { dev: B, sid: sid2 }));
    b.destroy(l2, Instant(6)).expect("destroy");
    assert_eq!(b.poll_gate(), None, "it never listened");
    b.gate_listen(B, sid2, true, Instant(7))
        .expect("the CM listens");
    assert!(!b.devs[&B].listens(sid2));
    assert_eq!(b.poll_gate(), Some(GateAsk::Unlisten { dev: B, sid: sid2 }));
}

#[test]
fn a_refused_listen_leaves_requests_to_the_hold() {
    let (mut a, mut b, _, _) = pair();
    b.set_gated(B, true);
    let sid = service_id(PortSpace::Tcp, 7100);
    let l = b.create_id(PortSpace::Tcp, Transport::Rc, Psn::new(9));
    b.bind(l, None, SocketAddr::new(ip("0.0.0.0"), 7100), 0)
        .expect("bind");
    b.listen(l, 0, Instant(0)).expect("listen");
    assert_eq!(b.poll_gate(), Some(GateAsk::Listen { dev: B, sid }));
    b.gate_listen(B, sid, false, Instant(0))
        .expect("refused: nothing to do");
    assert!(!b.devs[&B].listens(sid), "another process listens");
    let c = active(&mut a, PortSpace::Tcp, Transport::Rc, 7100);
    a.connect(c, Instant(0), Some(&ConnParam::default()), 16)
        .expect("connect");
    carry(&mut a, &mut b, Instant(0));
    assert_eq!(b.poll_gate(), Some(GateAsk::Listen { dev: B, sid }));
    b.gate_listen(B, sid, false, Instant(0))
        .expect("refused: nothing to do");
    b.handle_timeout(Instant(PARK_NS));
    carry(&mut a, &mut b, Instant(PARK_NS));
    let r = next(&mut a);
    assert_eq!((r.event, r.status), (EventType::Rejected, 8));
    assert!(b.poll_event().is_none());
    // The listener going gives back nothing it never had.
    b.destroy(l, Instant(PARK_NS)).expect("destroy");
    assert_eq!(b.poll_gate(), None);
}

#[test]
fn a_device_forked_away_sends_nothing() {
    let (mut a, mut b, rc, _) = pair();
    let (c, s) = connected(&mut a, &mut b, 7000);
    assert!(!a.forked_away(A));
    a.set_forked_away(A);
    assert!(a.forked_away(A));
    a.destroy(c, Instant(7)).expect("destroy");
    assert!(a.id(c).is_none(), "forgotten");
    assert!(a.poll_transmit().is_none(), "no DREQ");
    assert_eq!(carry(&mut a, &mut b, Instant(8)), 0);
    assert_eq!(b.cm_state(s), Some(crate::State::Established));
    // The parent's listeners stay: the child's destroy leaves the CM
    // listener, and asks nothing of the device process.
    b.set_gated(B, true);
    b.set_forked_away(B);
    let sid = service_id(PortSpace::Tcp, 7000);
    b.destroy(rc, Instant(9)).expect("destroy");
    assert!(b.devs[&B].listens(sid), "the parent's");
    assert_eq!(b.poll_gate(), None);
    b.destroy(s, Instant(9)).expect("destroy");
    assert!(b.poll_transmit().is_none(), "no DREQ either");
}

#[test]
fn multicast_joins_and_leaves() {
    let (mut a, _, _, _) = pair();
    let u = a.create_id(PortSpace::Udp, Transport::Ud, Psn::new(1));
    let group = ip("239.1.2.3");
    assert!(
        a.join_multicast(u, group, false, 5).is_err(),
        "no device yet"
    );
    a.bind(u, Some(A), SocketAddr::new(ip("10.0.0.1"), 0), 3)
        .expect("bind");
    for bad in ["10.0.0.9", "ff02::1"] {
        assert!(
            a.join_multicast(u, ip(bad), false, 5).is_err(),
            "{bad}: not a group of the device's family"
        );
    }
    let t = a.create_id(PortSpace::Tcp, Transport::Rc, Psn::new(1));
    a.bind(t, Some(A), SocketAddr::new(ip("10.0.0.1"), 0), 3)
        .expect("bind");
    assert!(a.join_multicast(t, group, false, 5).is_err(), "not UD");
    a.join_multicast(u, group, false, 5).expect("join");
    let j = next(&mut a);
    assert_eq!((j.id, j.event, j.status), (u, EventType::MulticastJoin, 0));
    assert_eq!(j.mc, Some((group, 5)));
    let ud = j.ud.expect("UD parameters");
    assert_eq!(
        (ud.qp_num, ud.qkey),
        (0xFF_FFFF, crate::limits::RDMA_UDP_QKEY)
    );
    let ah = ud.ah_attr.expect("the group's AH");
    assert_eq!(ah.dgid, Gid::from_ip(group));
    assert_eq!(ah.sgid, Gid::from_ip(ip("10.0.0.1")));
    assert_eq!(ah.hop_limit, MCAST_HOP_LIMIT);
    assert_eq!(a.join_target(u, group, 5), None, "no QP yet");
    a.attach_qp(u, Qpn::new(0x44), false).expect("QP");
    assert_eq!(a.join_target(u, group, 5), Some(Qpn::new(0x44)));
    assert_eq!(a.join_target(u, group, 6), None, "another context");
    a.mcast_attached(u, group, 5, Qpn::new(0x44));
    assert_eq!(a.join_target(u, group, 5), None, "attached already");
    // A send-only join attaches nothing.
    a.join_multicast(u, ip("239.1.2.4"), true, 6).expect("join");
    assert_eq!(next(&mut a).event, EventType::MulticastJoin);
    assert_eq!(a.join_target(u, ip("239.1.2.4"), 6), None);
    assert_eq!(a.leave_multicast(u, group), Ok(Some(Qpn::new(0x44))));
    assert_eq!(a.leave_multicast(u, ip("239.1.2.4")), Ok(None));
    assert_eq!(
        a.leave_multicast(u, group),
        Err(EndpointError::NotJoined(group))
    );
}

#[test]
fn ib_and_ipoib_port_spaces_have_their_own_ports_and_listeners() {
    assert_eq!(Transport::of_port_space(PortSpace::Tcp), Transport::Rc);
    assert_eq!(Transport::of_port_space(PortSpace::Ib), Transport::Rc);
    assert_eq!(Transport::of_port_space(PortSpace::Udp), Transport::Ud);
    assert_eq!(Transport::of_port_space(PortSpace::Ipoib), Transport::Ud);
    // `pair` listens on TCP 7000 and UDP 7001; IB and IPoIB take the same
    // ports.
    let (mut a, mut b, _, _) = pair();
    let mut listen = |ps, port| {
        let l = b.create_id(ps, Transport::of_port_space(ps), Psn::new(9));
        let any = SocketAddr::new(ip("0.0.0.0"), port);
        assert_eq!(b.bind(l, None, any, 0), Ok(port), "{ps:?}");
        b.listen(l, 0, Instant(0)).expect("listen");
        l
    };
    let ib = listen(PortSpace::Ib, 7000);
    let ipoib = listen(PortSpace::Ipoib, 7001);
    let c = active(&mut a, PortSpace::Ib, Transport::Rc, 7000);
    a.connect(c, Instant(1), Some(&ConnParam::default()), 16)
        .expect("REQ");
    let u = active(&mut a, PortSpace::Ipoib, Transport::Ud, 7001);
    a.connect(u, Instant(1), Some(&ConnParam::default()), 16)
        .expect("SIDR_REQ");
    carry(&mut a, &mut b, Instant(2));
    let mut got: Vec<_> = std::iter::from_fn(|| b.poll_event())
        .map(|q| (q.event, q.listen_id))
        .collect();
    got.sort_by_key(|g| g.1);
    let mut want = vec![
        (EventType::ConnectRequest, Some(ib)),
        (EventType::ConnectRequest, Some(ipoib)),
    ];
    want.sort_by_key(|g| g.1);
    assert_eq!(got, want, "each request reached its port space's listener");
}

#[test]
fn an_xrc_listener_rejects_every_request() {
    let (mut a, mut b, _, _) = pair();
    let l = b.create_id(PortSpace::Tcp, Transport::Xrc, Psn::new(9));
    b.bind(l, None, SocketAddr::new(ip("0.0.0.0"), 7200), 0)
        .expect("bind");
    b.listen(l, 0, Instant(0)).expect("listen");
    let c = active(&mut a, PortSpace::Tcp, Transport::Rc, 7200);
    a.connect(c, Instant(1), Some(&ConnParam::default()), 16)
        .expect("connect");
    carry(&mut a, &mut b, Instant(2));
    assert!(b.poll_event().is_none(), "no CONNECT_REQUEST");
    let r = next(&mut a);
    assert_eq!((r.event, r.status), (EventType::Rejected, 28));
}

#[test]
fn a_refused_listen_is_undone() {
    let (_, mut b, _, _) = pair();
    b.set_gated(B, true);
    let sid = service_id(PortSpace::Tcp, 7300);
    let l = b.create_id(PortSpace::Tcp, Transport::Rc, Psn::new(9));
    let at = SocketAddr::new(ip("10.0.0.2"), 7300);
    b.bind(l, Some(B), at, 0).expect("bind");
    b.listen(l, 0, Instant(0)).expect("listen");
    assert_eq!(b.poll_gate(), Some(GateAsk::Listen { dev: B, sid }));
    b.gate_listen(B, sid, false, Instant(0))
        .expect("refused: nothing to do");
    b.stop_listening(l, Instant(0)).expect("undone");
    assert_eq!(b.id(l).map(|e| e.st), Some(IdState::AddrBound));
    assert!(b.id(l).is_some_and(|e| e.listen.is_none()));
    assert_eq!(b.poll_gate(), None, "nothing to give back");
    assert!(b.stop_listening(l, Instant(0)).is_err());
    // Listening again asks again.
    b.listen(l, 0, Instant(1)).expect("listen");
    assert_eq!(b.poll_gate(), Some(GateAsk::Listen { dev: B, sid }));
}

#[test]
fn address_then_route_each_with_its_event() {
    let (mut a, _, _, _) = pair();
    let dst = SocketAddr::new(ip("10.0.0.2"), 7000);
    // Bound to a wildcard: the port stays, the address becomes the
    // device's.
    let w = a.create_id(PortSpace::Tcp, Transport::Rc, Psn::new(1));
    a.bind(w, None, SocketAddr::new(ip("0.0.0.0"), 6100), 0)
        .expect("bind");
    assert_eq!(a.resolve_addr(w, A, ip("10.0.0.1"), dst, 0), Ok(6100));
    let q = next(&mut a);
    assert_eq!((q.id, q.event), (w, EventType::AddrResolved));
    assert_eq!(
        a.id(w).and_then(|e| e.src),
        Some(SocketAddr::new(ip("10.0.0.1"), 6100))
    );
    assert!(a.connect(w, Instant(0), None, 16).is_err(), "no route yet");
    let path = rdma_cm_path(ip("10.0.0.1"), dst.ip(), 6100, 7000, 3, 0, 64);
    a.resolve_route(w, path).expect("route");
    assert_eq!(next(&mut a).event, EventType::RouteResolved);
    assert_eq!(a.id(w).map(|e| e.st), Some(IdState::RouteResolved));
    assert!(a.resolve_route(w, path).is_err(), "resolved already");
    // Unbound: an ephemeral port; two families: refused.
    let u = a.create_id(PortSpace::Tcp, Transport::Rc, Psn::new(1));
    let p = a
        .resolve_addr(u, A, ip("10.0.0.1"), dst, 9)
        .expect("resolve");
    assert!(p >= crate::limits::EPHEMERAL_PORTS.0);
    assert_eq!(next(&mut a).event, EventType::AddrResolved);
    let v6 = a.create_id(PortSpace::Tcp, Transport::Rc, Psn::new(1));
    let dst6 = SocketAddr::new(ip("fd00::2"), 7000);
    assert!(a.resolve_addr(v6, A, ip("10.0.0.1"), dst6, 9).is_err());
    assert_eq!(a.id(v6).map(|e| e.st), Some(IdState::Idle), "left unbound");
    a.resolve_failed(v6, -113).expect("ADDR_ERROR");
    let q = next(&mut a);
    assert_eq!((q.event, q.status), (EventType::AddrError, -113));
    // A port bound with REUSEADDR by two ids: neither may listen.
    let reuse = Options {
        reuseaddr: true,
        ..Default::default()
    };
    let (x, y) = (
        a.create_id(PortSpace::Tcp, Transport::Rc, Psn::new(1)),
        a.create_id(PortSpace::Tcp, Transport::Rc, Psn::new(1)),
    );
    let at = SocketAddr::new(ip("10.0.0.1"), 6200);
    for i in [x, y] {
        a.set_options(i, reuse).expect("REUSEADDR");
        a.bind(i, Some(A), at, 0).expect("shared");
    }
    assert!(matches!(
        a.listen(x, 0, Instant(0)),
        Err(EndpointError::Port(_))
    ));
    a.destroy(y, Instant(0)).expect("destroy");
    a.listen(x, 0, Instant(0)).expect("alone now");
}
