//! rdma_cm over real sockets: two devices of this process on loopback
//! addresses, the whole exchange through the engine (MADs on QP 1, the
//! progress threads' timers).

use softrdma::rdma_cm::{self, CmId, ConnParam, EventChannel, EventType, PortSpace};
use softrdma::{Device, DeviceOptions, RecvWr, SendWr, WcStatus, WrOpcode};
use std::net::SocketAddr;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

fn two_devices() -> (Device, Device) {
    let a = Device::open(DeviceOptions::default()).unwrap();
    let b = Device::open(DeviceOptions::default()).unwrap();
    (a, b)
}

#[test]
fn connect_send_and_disconnect() {
    let (a, _b) = two_devices();
    let l = rdma_cm::listen(SocketAddr::new(a.local_addr().ip(), 0)).unwrap();
    let addr = l.local_addr().unwrap();
    assert_eq!(addr.ip(), a.local_addr().ip());
    assert!(addr.port() >= 32768);
    let server = std::thread::spawn(move || {
        let c = l.accept(&Default::default()).unwrap();
        let mr = c.pd.alloc_mr(64, softrdma::Access::LOCAL_WRITE).unwrap();
        c.qp.post_recv(RecvWr {
            wr_id: 7,
            sg_list: vec![mr.sge(0, 64)],
        })
        .unwrap();
        let wc = c.cq.wait(1, T).unwrap();
        assert_eq!(wc[0].status, WcStatus::Success);
        assert_eq!(&mr.to_vec(0, 5), b"hello");
        // The client disconnects: DISCONNECTED here, then our DREP.
        let ev = c.channel.get_event_timeout(T).unwrap().unwrap();
        assert_eq!(ev.event, EventType::Disconnected);
        drop(ev);
        c.id.disconnect().unwrap();
        c.peer_private_data
    });
    let mut o = rdma_cm::ConnectOptions::default();
    o.conn.private_data = b"from the client".to_vec();
    let c = rdma_cm::connect(addr, &o).unwrap();
    assert_eq!(c.peer_private_data.len(), 196);
    let mr = c.pd.alloc_mr(64, softrdma::Access::LOCAL_WRITE).unwrap();
    mr.write(0, b"hello");
    // The server posts its receive after accepting: RNR retries cover it.
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sg_list = vec![mr.sge(0, 5)];
    c.qp.post_send(wr).unwrap();
    let wc = c.cq.wait(1, T).unwrap();
    assert_eq!(wc[0].status, WcStatus::Success);
    c.disconnect(T).unwrap();
    let pd = server.join().unwrap();
    assert_eq!(pd.len(), 56);
    assert_eq!(&pd[..15], b"from the client");
}

fn events(ch: &EventChannel) -> rdma_cm::CmEvent {
    ch.get_event_timeout(T).unwrap().expect("an event")
}

#[test]
fn nobody_listens_gets_reject_8() {
    let (a, _b) = two_devices();
    let ch = EventChannel::new().unwrap();
    let id = CmId::new(&ch, PortSpace::Tcp, None).unwrap();
    id.resolve_addr(None, SocketAddr::new(a.local_addr().ip(), 9))
        .unwrap();
    assert_eq!(events(&ch).event, EventType::AddrResolved);
    id.resolve_route().unwrap();
    assert_eq!(events(&ch).event, EventType::RouteResolved);
    id.connect(Some(&ConnParam {
        qp_num: 0x123,
        ..Default::default()
    }))
    .unwrap();
    let ev = events(&ch);
    assert_eq!((ev.event, ev.status), (EventType::Rejected, 8));
    drop(ev);
    id.destroy().unwrap();
}

#[test]
fn reject_with_private_data() {
    let (a, _b) = two_devices();
    let lch = EventChannel::new().unwrap();
    let lid = CmId::new(&lch, PortSpace::Tcp, None).unwrap();
    lid.bind_addr(SocketAddr::new(a.local_addr().ip(), 0))
        .unwrap();
    lid.listen(4).unwrap();
    let port = lid.addr_info().unwrap().src.unwrap().port();
    let ch = EventChannel::new().unwrap();
    let id = CmId::new(&ch, PortSpace::Tcp, None).unwrap();
    id.resolve_addr(None, SocketAddr::new(a.local_addr().ip(), port))
        .unwrap();
    drop(events(&ch));
    id.resolve_route().unwrap();
    drop(events(&ch));
    id.connect(Some(&ConnParam {
        qp_num: 0x456,
        private_data: vec![1, 2, 3],
        ..Default::default()
    }))
    .unwrap();
    let req = events(&lch);
    assert_eq!(req.event, EventType::ConnectRequest);
    assert_eq!(req.listen_id.as_ref(), Some(&lid));
    assert_eq!(req.conn.qp_num, 0x456);
    assert_eq!(&req.conn.private_data[..3], &[1, 2, 3]);
    req.id.reject(b"no thanks").unwrap();
    let child = req.id.clone();
    drop(req);
    let ev = events(&ch);
    assert_eq!((ev.event, ev.status), (EventType::Rejected, 28));
    assert_eq!(ev.conn.private_data.len(), 148);
    assert_eq!(&ev.conn.private_data[..9], b"no thanks");
    drop(ev);
    child.destroy().unwrap();
    id.destroy().unwrap();
    lid.destroy().unwrap();
}

// ------------------------------------------- REQs rdma_cm must refuse ----

mod raw {
    //! A hand-made peer: REQ MADs in RoCE v2 packets from a UDP socket of
    //! its own, and the MADs that come back.
    use softrdma_wire::cm::{CmMadRepr, CmMsg, CmPathRepr, PortSpace, ReqRepr, ServiceId};
    use softrdma_wire::mad::GSI_QKEY;
    use softrdma_wire::{
        BthRepr, DatagramRepr, DethRepr, Gid, IbPacket, IpRepr, Opcode, PKey, PacketRepr, Psn,
        QKey, Qpn, RoceDatagram,
    };
    use std::net::{IpAddr, SocketAddr, UdpSocket};
    use std::time::Duration;

    /// A UDP socket on a free loopback address, port 4791.
    pub fn peer() -> UdpSocket {
        for last in 200..=250u8 {
            let ip = IpAddr::from([127, 0, 78, last]);
            if let Ok(s) = UdpSocket::bind(SocketAddr::new(ip, 4791)) {
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                return s;
            }
        }
        panic!("no free loopback address in 127.0.78.200-250");
    }

    /// A REQ for `port` (TCP port space) from `src` to `dst` with this
    /// private data (the rdma_cm header first), as rping would send it.
    pub fn req(comm_id: u32, port: u16, src: IpAddr, dst: IpAddr, private: &[u8]) -> [u8; 256] {
        let req = ReqRepr {
            local_comm_id: comm_id,
            vendor_id: 0,
            service_id: ServiceId::rdma_cm(PortSpace::Tcp, port),
            local_ca_guid: 0x0250_56ff_fe00_0001,
            local_qkey: QKey(0),
            local_qpn: Qpn::new(0x77),
            responder_resources: 1,
            local_eecn: 0,
            initiator_depth: 1,
            remote_eecn: 0,
            remote_cm_response_timeout: 20,
            transport_service_type: 0,
            flow_control: false,
            starting_psn: Psn::new(0x1234),
            local_cm_response_timeout: 20,
            retry_count: 7,
            pkey: PKey::DEFAULT,
            path_mtu: 3,
            rdc_exists: false,
            rnr_retry_count: 7,
            max_cm_retries: 15,
            srq: false,
            extended_transport_type: 0,
            primary: CmPathRepr {
                local_lid: 0xffff,
                remote_lid: 0xffff,
                local_gid: Gid::from(src),
                remote_gid: Gid::from(dst),
                flow_label: 0,
                packet_rate: 0x0e,
                traffic_class: 0,
                hop_limit: 64,
                sl: 0,
                subnet_local: false,
                local_ack_timeout: 19,
            },
            alternate: CmPathRepr::default(),
            sap_supported: false,
            private_data: private,
        };
        CmMadRepr::new(u64::from(comm_id), 0, CmMsg::Req(req))
            .to_bytes()
            .unwrap()
    }

    /// `mad` to QP 1 of the device at `dst`, from the socket's address.
    pub fn send(s: &UdpSocket, dst: IpAddr, mad: &[u8]) {
        let src = s.local_addr().unwrap().ip();
        let bth = BthRepr {
            ack_req: true,
            ..BthRepr::new(Opcode(0x64), Qpn::GSI, Psn::new(0))
        };
        let mut r = PacketRepr::new(bth, mad);
        r.deth = Some(DethRepr {
            qkey: QKey(GSI_QKEY),
            src_qp: Qpn::GSI,
        });
        let d = DatagramRepr::new(IpRepr::between(src, dst, 0).unwrap(), 4791, 4791);
        let mut buf = vec![0u8; 2048];
        let n = d.emit(&r, &mut buf).unwrap();
        let dg = RoceDatagram::new_checked(&buf[..n]).unwrap();
        s.send_to(dg.ib().into_inner(), SocketAddr::new(dst, 4791))
            .unwrap();
    }

    /// The next MAD that arrives (None after the 5 s read timeout).
    pub fn recv(s: &UdpSocket) -> Option<Vec<u8>> {
        let mut buf = [0u8; 4096];
        let (n, _) = s.recv_from(&mut buf).ok()?;
        let p = IbPacket::new_checked(&buf[..n]).ok()?;
        Some(PacketRepr::parse(&p).ok()?.payload.to_vec())
    }
}

/// REQs that reach a listening port but that rdma_cm cannot take — no
/// valid rdma_cm header, a header for another destination address, a UC
/// connection for an RC listener — are rejected as
/// Linux's rdma_cm does (the handler fails, `cm_destroy_id` sends REJ
/// reason 28), reach no application, and take no place in the backlog:
/// with a backlog of 1, a real connect afterwards still gets through.
#[test]
fn reqs_rdma_cm_cannot_take_get_rej_28_and_leave_the_backlog_alone() {
    use softrdma_wire::cm::{CmMadRepr, CmMsg, CmaHdrRepr, RejReason};
    let (a, _b) = two_devices();
    let ip = a.local_addr().ip();
    let lch = EventChannel::new().unwrap();
    let lid = CmId::new(&lch, PortSpace::Tcp, None).unwrap();
    lid.bind_addr(SocketAddr::new(ip, 0)).unwrap();
    lid.listen(1).unwrap();
    let port = lid.addr_info().unwrap().src.unwrap().port();
    let s = raw::peer();
    let me = s.local_addr().unwrap().ip();
    let hdr = |dst| {
        CmaHdrRepr {
            src_port: 40000,
            src: me,
            dst,
        }
        .to_bytes()
        .unwrap()
    };
    let mut bad_version = hdr(ip);
    bad_version[0] = 7;
    let elsewhere = hdr("127.0.99.99".parse().unwrap());
    let cases: [(&str, Vec<u8>, bool); 4] = [
        ("no rdma_cm header", vec![], false),
        ("header version 7", bad_version.to_vec(), false),
        ("header for another address", elsewhere.to_vec(), false),
        ("UC transport on an RC listener", hdr(ip).to_vec(), true),
    ];
    for (k, (what, private, uc)) in cases.iter().enumerate() {
        let comm = 0x5000 + k as u32;
        let mut mad = raw::req(comm, port, me, ip, private);
        if *uc {
            // Transport Service Type UC: bits 2-1 of REQ byte 43.
            mad[24 + 43] = (mad[24 + 43] & !0x06) | (1 << 1);
        }
        raw::send(&s, ip, &mad);
        let back = raw::recv(&s).unwrap_or_else(|| panic!("{what}: no answer"));
        let m = CmMadRepr::parse(&back).unwrap();
        let CmMsg::Rej(rej) = m.msg else {
            panic!("{what}: {:?} instead of a REJ", m.msg.name())
        };
        assert_eq!(rej.reason, RejReason::CONSUMER_DEFINED, "{what}");
        assert_eq!(rej.remote_comm_id, comm, "{what}");
        // The same REQ again (a retry): refused again, no second id.
        raw::send(&s, ip, &mad);
        let back = raw::recv(&s).unwrap_or_else(|| panic!("{what}: retry: no answer"));
        let m = CmMadRepr::parse(&back).unwrap();
        let CmMsg::Rej(rej) = m.msg else {
            panic!("{what}: retry: {:?} instead of a REJ", m.msg.name())
        };
        println!("{what}: REJ 28, the retry REJ {}", rej.reason.0);
        assert_eq!(rej.remote_comm_id, comm, "{what}");
        assert!(
            lch.get_event_timeout(Duration::from_millis(100))
                .unwrap()
                .is_none(),
            "{what}: reached the application"
        );
    }
    // The backlog of 1 is free: a real connect is accepted.
    let addr = SocketAddr::new(ip, port);
    let client = std::thread::spawn(move || rdma_cm::connect(addr, &Default::default()));
    let req = events(&lch);
    assert_eq!(req.event, EventType::ConnectRequest);
    req.id.reject(b"").unwrap();
    let child = req.id.clone();
    drop(req);
    assert!(client.join().unwrap().is_err());
    child.destroy().unwrap();
    lid.destroy().unwrap();
}

/// Connects a fresh id to `dst`:`port` with a made-up QPN (no QP: the
/// request is all that matters) and returns its channel and id.
fn request_to(dst: std::net::IpAddr, port: u16) -> (EventChannel, CmId) {
    request_from_qpn(dst, port, 0x321)
}

/// [`request_to`] naming QP `qpn` (requests of one device that are under
/// way at once name distinct QPs, or all but the first get REJ 10).
fn request_from_qpn(dst: std::net::IpAddr, port: u16, qpn: u32) -> (EventChannel, CmId) {
    let ch = EventChannel::new().unwrap();
    let id = CmId::new(&ch, PortSpace::Tcp, None).unwrap();
    id.resolve_addr(None, SocketAddr::new(dst, port)).unwrap();
    assert_eq!(events(&ch).event, EventType::AddrResolved);
    id.resolve_route().unwrap();
    assert_eq!(events(&ch).event, EventType::RouteResolved);
    id.connect(Some(&ConnParam {
        qp_num: qpn,
        ..Default::default()
    }))
    .unwrap();
    (ch, id)
}

/// Listening on a wildcard works as with the kernel's rdma_cm
/// (`cma_listen_on_all`), the way tgtd does it: `0.0.0.0` (AFONLY by
/// default for IPv4) and `[::]` with AFONLY on one port, although no
/// device has an IPv6 address; requests reach the listener of their
/// address family, on the devices open when it listened and on a device
/// opened afterwards; when the listeners go, nothing listens any more.
#[test]
fn wildcard_listeners_cover_every_device_present_and_future() {
    let a = Device::open(DeviceOptions::at("127.66.1.1".parse().unwrap())).unwrap();
    let _client = Device::open(DeviceOptions::at("127.66.1.2".parse().unwrap())).unwrap();
    let lch = EventChannel::new().unwrap();
    let v4 = CmId::new(&lch, PortSpace::Tcp, None).unwrap();
    v4.bind_addr("0.0.0.0:0".parse().unwrap()).unwrap();
    let port = v4.addr_info().unwrap().src.unwrap().port();
    v4.listen(0).unwrap();
    let v6 = CmId::new(&lch, PortSpace::Tcp, None).unwrap();
    v6.set_afonly(true).unwrap();
    v6.bind_addr(SocketAddr::new("::".parse().unwrap(), port))
        .unwrap();
    v6.listen(0).unwrap();
    // Without AFONLY the IPv6 wildcard would take IPv4 requests too: the
    // port is taken.
    let both = CmId::new(&lch, PortSpace::Tcp, None).unwrap();
    let e = both
        .bind_addr(SocketAddr::new("::".parse().unwrap(), port))
        .unwrap_err();
    assert_eq!(e.errno(), libc::EADDRNOTAVAIL, "{e}");

    let (_ch, _id) = request_to(a.local_addr().ip(), port);
    let req = events(&lch);
    assert_eq!(req.event, EventType::ConnectRequest);
    assert_eq!(req.listen_id.as_ref(), Some(&v4));
    assert_eq!(
        req.id.addr_info().unwrap().src,
        Some(SocketAddr::new(a.local_addr().ip(), port))
    );
    req.id.reject(&[]).unwrap();
    drop(req);

    // A device that opens after the listen.
    let later = Device::open(DeviceOptions::at("127.66.1.3".parse().unwrap())).unwrap();
    let (ch2, _id2) = request_to(later.local_addr().ip(), port);
    let req = events(&lch);
    assert_eq!(req.event, EventType::ConnectRequest);
    assert_eq!(req.listen_id.as_ref(), Some(&v4));
    assert_eq!(
        req.id.addr_info().unwrap().src.map(|s| s.ip()),
        Some(later.local_addr().ip())
    );
    req.id.reject(&[]).unwrap();
    drop(req);
    let ev = events(&ch2);
    assert_eq!((ev.event, ev.status), (EventType::Rejected, 28));
    drop(ev);

    // The listeners go: a request now finds nobody (REJ 8, once the
    // CM's wait for a late listener is over).
    v4.destroy().unwrap();
    v6.destroy().unwrap();
    let (ch3, _id3) = request_to(later.local_addr().ip(), port);
    let ev = events(&ch3);
    assert_eq!((ev.event, ev.status), (EventType::Rejected, 8));
}

/// A wildcard listener also listens when no device is open or configured
/// for its family: `[::]` AFONLY listens (the kernel's rdma_cm listens
/// on no device and succeeds), and a later bind of the same port to
/// IPv6 conflicts with it.
#[test]
fn an_ipv6_wildcard_listens_with_no_ipv6_device() {
    let _a = Device::open(DeviceOptions::at("127.66.1.4".parse().unwrap())).unwrap();
    let lch = EventChannel::new().unwrap();
    let v6 = CmId::new(&lch, PortSpace::Tcp, None).unwrap();
    v6.set_afonly(true).unwrap();
    v6.bind_addr("[::]:0".parse().unwrap()).unwrap();
    let port = v6.addr_info().unwrap().src.unwrap().port();
    v6.listen(0).unwrap();
    let other = CmId::new(&lch, PortSpace::Tcp, None).unwrap();
    other.set_afonly(true).unwrap();
    let e = other
        .bind_addr(SocketAddr::new("::".parse().unwrap(), port))
        .unwrap_err();
    assert_eq!(e.errno(), libc::EADDRNOTAVAIL, "{e}");
}

fn readable(fd: std::os::fd::RawFd, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    unsafe { libc::poll(&mut p, 1, ms) == 1 }
}

/// The channel's descriptor is readable only while events wait on it, as
/// the kernel's: the queued events of an id destroyed, or migrated to
/// another channel, take their readability with them (an epoll loop
/// would otherwise wake for an event that is not there, and its next
/// `rdma_get_cm_event` block — librpma's 06scch example did).
#[test]
fn a_channel_is_readable_only_for_events_that_are_there() {
    let a = Device::open(DeviceOptions::at("127.66.1.5".parse().unwrap())).unwrap();
    let dst = SocketAddr::new(a.local_addr().ip(), 9);
    let ch = EventChannel::new().unwrap();
    let gone = CmId::new(&ch, PortSpace::Tcp, None).unwrap();
    gone.resolve_addr(None, dst).unwrap();
    assert!(readable(ch.fd(), 10_000));
    gone.destroy().unwrap();
    assert!(!readable(ch.fd(), 0), "readable for a destroyed id's event");

    let moved = CmId::new(&ch, PortSpace::Tcp, None).unwrap();
    moved.resolve_addr(None, dst).unwrap();
    assert!(readable(ch.fd(), 10_000));
    let ch2 = EventChannel::new().unwrap();
    moved.migrate(&ch2).unwrap();
    assert!(!readable(ch.fd(), 0), "readable for a migrated id's event");
    assert!(readable(ch2.fd(), 0));
    assert_eq!(events(&ch2).event, EventType::AddrResolved);
    assert!(!readable(ch2.fd(), 0));
}

/// `rdma_accept` whose move of the QP to RTR/RTS fails returns the error
/// with no REP sent, as librdmacm's (its ACCEPT never reaches the
/// kernel): the request is still pending, and a reject reaches the
/// requester as its first answer (a REP sent anyway would have been its
/// CONNECT_RESPONSE).
#[test]
fn an_accept_whose_qp_move_fails_sends_no_rep() {
    let a = Device::open(DeviceOptions::at("127.63.1.1".parse().unwrap())).unwrap();
    let ip = a.local_addr().ip();
    let lch = EventChannel::new().unwrap();
    let lid = CmId::new(&lch, PortSpace::Tcp, None).unwrap();
    lid.bind_addr(SocketAddr::new(ip, 0)).unwrap();
    lid.listen(4).unwrap();
    let port = lid.addr_info().unwrap().src.unwrap().port();
    let (ch, id) = request_to(ip, port);
    let req = events(&lch);
    assert_eq!(req.event, EventType::ConnectRequest);
    let child = req.id.clone();
    drop(req);
    let dev = child.device().unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8, None).unwrap();
    let qp = pd
        .qp_builder(softrdma::QpType::Rc, &cq, &cq)
        .build()
        .unwrap();
    child.attach_qp(&qp).unwrap();
    // A QP in ERR moves to INIT/RTR no more.
    let err = softrdma::QpAttr {
        qp_state: softrdma::QpState::Err,
        ..Default::default()
    };
    qp.modify(&err, softrdma::AttrMask::STATE).unwrap();
    let e = child.accept(None).unwrap_err();
    println!("accept: {e}");
    child.reject(b"after all").unwrap();
    let ev = events(&ch);
    assert_eq!(
        (ev.event, ev.status),
        (EventType::Rejected, 28),
        "a REP went out before the reject"
    );
    assert_eq!(&ev.conn.private_data[..9], b"after all");
    drop(ev);
    child.destroy().unwrap();
    id.destroy().unwrap();
    lid.destroy().unwrap();
}

/// `rdma_listen` of a listening id: EINVAL, and the new backlog, as
/// Linux's ucma sets it before `rdma_listen` fails: a request queued and
/// not taken yet no longer counts against it. A request to a second
/// listener, sent after the one the new backlog admits from the same
/// device, tells when that one has been handled.
#[test]
fn listening_again_sets_the_backlog_and_gives_einval() {
    let a = Device::open(DeviceOptions::at("127.63.1.2".parse().unwrap())).unwrap();
    let ip = a.local_addr().ip();
    let listener = |ch: &EventChannel, backlog| {
        let l = CmId::new(ch, PortSpace::Tcp, None).unwrap();
        l.bind_addr(SocketAddr::new(ip, 0)).unwrap();
        l.listen(backlog).unwrap();
        let port = l.addr_info().unwrap().src.unwrap().port();
        (l, port)
    };
    let (lch, och) = (EventChannel::new().unwrap(), EventChannel::new().unwrap());
    let (lid, port) = listener(&lch, 1);
    let (other, other_port) = listener(&och, 4);
    let (_c1ch, c1) = request_from_qpn(ip, port, 0x501);
    // Queued, not taken: the backlog of 1 is full.
    assert!(readable(lch.fd(), 10_000));
    let e = lid.listen(1).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL, "{e}");
    let (_c2ch, c2) = request_from_qpn(ip, port, 0x502);
    let (_c3ch, c3) = request_from_qpn(ip, other_port, 0x503);
    // The third request has been handled, so the second too.
    assert!(readable(och.fd(), 10_000));
    let take = |ch: &EventChannel, l: &CmId| {
        let ev = events(ch);
        assert_eq!(ev.event, EventType::ConnectRequest);
        assert_eq!(ev.listen_id.as_ref(), Some(l));
        ev.id.reject(b"").unwrap();
        let child = ev.id.clone();
        drop(ev);
        child.destroy().unwrap();
    };
    take(&lch, &lid);
    assert!(readable(lch.fd(), 0), "the second request was dropped");
    take(&lch, &lid);
    take(&och, &other);
    for id in [c1, c2, c3, other, lid] {
        id.destroy().unwrap();
    }
}

/// Whether thread `tid` of this process sleeps in a futex (a lock or a
/// condition wait): `/proc/self/task/TID/syscall`.
fn in_futex(tid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<i64>().ok())
        == Some(libc::SYS_futex)
}

/// `rdma_leave_multicast` waits until the join's events the program got
/// are acknowledged, as librdmacm's (`mc->events_completed`): the leave
/// runs on a thread, seen asleep 20 times in a row before the
/// MULTICAST_JOIN event is dropped (acknowledged), and has not returned
/// by then.
#[test]
fn leaving_a_group_waits_for_the_joins_events_to_be_acked() {
    let a = Device::open(DeviceOptions::at("127.63.1.3".parse().unwrap())).unwrap();
    let ch = EventChannel::new().unwrap();
    let id = CmId::new(&ch, PortSpace::Udp, None).unwrap();
    id.bind_addr(SocketAddr::new(a.local_addr().ip(), 0))
        .unwrap();
    let group: std::net::IpAddr = "239.63.1.3".parse().unwrap();
    id.join_multicast(group, false, 7).unwrap();
    let ev = events(&ch);
    assert_eq!(
        (ev.event, ev.mc),
        (EventType::MulticastJoin, Some((group, 7)))
    );
    let tid = std::sync::Arc::new(std::sync::atomic::AtomicI32::new(0));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let leaver = {
        let (id, tid, done) = (id.clone(), tid.clone(), done.clone());
        std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tid.store(
                unsafe { libc::gettid() },
                std::sync::atomic::Ordering::SeqCst,
            );
            let r = id.leave_multicast(group);
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            r
        })
    };
    let t = loop {
        match tid.load(std::sync::atomic::Ordering::SeqCst) {
            0 => std::thread::yield_now(),
            t => break t,
        }
    };
    let mut asleep = 0;
    while !done.load(std::sync::atomic::Ordering::SeqCst) && asleep < 20 {
        asleep = if in_futex(t) { asleep + 1 } else { 0 };
        std::thread::sleep(Duration::from_millis(1));
    }
    let early = done.load(std::sync::atomic::Ordering::SeqCst);
    drop(ev);
    leaver.join().unwrap().unwrap();
    assert!(
        !early,
        "rdma_leave_multicast returned before the event's ack"
    );
    id.destroy().unwrap();
}
