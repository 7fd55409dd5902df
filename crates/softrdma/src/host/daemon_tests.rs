//! Unit tests of the device process (`daemon.rs`): its ring record
//! headers, and an in-process device process with members on raw
//! connections.

use super::*;

#[test]
fn ring_header_round_trips() {
    for src in ["10.1.2.3:4791", "[fe80::1]:1234"] {
        let a: SocketAddr = src.parse().unwrap();
        let h = rec_header(a, 0x2e, 17);
        assert_eq!(parse_rec_header(&h), Some((a, 0x2e, 17)));
    }
    assert_eq!(parse_rec_header(&[0; REC_HDR]), None);
    assert_eq!(parse_rec_header(&[4; 3]), None);
}

/// A device process starting while its address is still held (by the
/// previous device process leaving, or a member process exiting)
/// binds it once it is let go; an address held for good is refused
/// after the wait (issue 19: the next program failed with
/// EADDRINUSE). The holder lets go 100 ms into the wait; the bind
/// succeeds whenever it does (the wait here is a minute).
#[test]
fn the_device_binds_its_address_once_the_holder_lets_go() {
    let holder = std::net::UdpSocket::bind("127.76.0.1:0").unwrap();
    let addr = holder.local_addr().unwrap();
    let cfg = SocketConfig::default();
    let Err(e) = UdpSocket::bind_with(addr, &cfg) else {
        panic!("bound a held address");
    };
    assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
    let Err(e) = bind_waiting(addr, &cfg, Duration::from_millis(20)) else {
        panic!("bound an address held for good");
    };
    assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        drop(holder);
    });
    let s = bind_waiting(addr, &cfg, Duration::from_secs(60)).expect("bound once let go");
    assert_eq!(s.local_addr(), addr);
    t.join().unwrap();
}

/// A member's end of the handshake: its link and ring.
fn join(name: &[u8], same_host: bool) -> (SeqPacket, Ring, EventFd) {
    let conn = SeqPacket::connect(name).unwrap();
    let wake = EventFd::new().unwrap();
    let hello = Request::Hello {
        version: msg::VERSION,
        same_host,
        mtu: 0,
        comm: "t".into(),
    };
    conn.send(&hello.encode(), &[wake.as_fd()]).unwrap();
    let (reply, mut fds) = answer(&conn);
    assert!(matches!(reply, Reply::Welcome { .. }), "{reply:?}");
    // The socket, the ring, the deputy page.
    assert_eq!(fds.len(), 3);
    super::super::deputy::Page::attach(fds.pop().unwrap()).unwrap();
    let ring = Ring::attach(fds.pop().unwrap()).unwrap();
    (conn, ring, wake)
}

fn answer(conn: &SeqPacket) -> (Reply, Vec<OwnedFd>) {
    let mut buf = vec![0u8; msg::MAX_MSG];
    let mut fds = Vec::new();
    // Long: the device process answers at once unless something
    // blocks it (the defect this guards against blocked it 5 s).
    let n = conn
        .recv_wait(&mut buf, &mut fds, Duration::from_secs(60))
        .expect("an answer");
    (Reply::decode(&buf[..n]).expect("a reply"), fds)
}

fn ask(conn: &SeqPacket, req: &Request) -> Reply {
    conn.send(&msg::frame(7, &req.encode()), &[]).unwrap();
    let mut buf = vec![0u8; msg::MAX_MSG];
    let mut fds = Vec::new();
    let n = conn
        .recv_wait(&mut buf, &mut fds, Duration::from_secs(60))
        .expect("an answer");
    let (seq, body) = msg::unframe(&buf[..n]).expect("framed");
    assert_eq!(seq, 7, "the answer echoes the request's number");
    Reply::decode(body).expect("a reply")
}

/// Connections that have not said who they are yet do not stop the
/// device process: while one stays silent after connecting, a
/// member's datagrams are routed, its requests answered and a path
/// opened; the silent one is still served when it speaks, and keeps
/// the device process alive until then. (It used to wait for a first
/// message inline, up to 5 s, routing nothing: a connecting process a
/// loaded machine did not schedule held every member of the address.)
/// No timing decides it: the first-message wait is an hour here and
/// the order of events is forced.
#[test]
fn connections_in_their_handshake_never_hold_the_device() {
    let name = format!("softrdma-test/{}/handshake", std::process::id()).into_bytes();
    let listener = SeqPacket::listen(&name).unwrap();
    let socket =
        UdpSocket::bind_with("127.41.0.1:0".parse().unwrap(), &SocketConfig::default()).unwrap();
    let dev = socket.local_addr();
    let mut host = Host::new(listener, socket).unwrap();
    host.first_wait = Duration::from_secs(3600);
    let t = std::thread::spawn(move || host.run());

    let (m, mut ring, _wake) = join(&name, true);
    const QPN: u32 = 0x41_2345;
    assert_eq!(ask(&m, &Request::ClaimQpn(QPN)), Reply::Ok);

    // Silent: connected, nothing sent.
    let silent = SeqPacket::connect(&name).unwrap();

    // A datagram for the member's QP: routed into its ring.
    let mut dgram = vec![0u8; 40];
    dgram[0] = 0x04; // RC SEND only
    dgram[5..8].copy_from_slice(&QPN.to_be_bytes()[1..]);
    dgram[12] = 0xab;
    let peer = std::net::UdpSocket::bind("127.41.0.2:0").unwrap();
    peer.send_to(&dgram, dev).unwrap();
    assert_eq!(ask(&m, &Request::Receive), Reply::Ok);
    let mut buf = vec![0u8; 4096];
    let (tag, len) = ring.pop(&mut buf).expect("the datagram in the ring");
    assert_eq!(tag, TAG_DATAGRAM);
    assert_eq!(&buf[REC_HDR..len], &dgram[..]);

    // A path to the member's QP, opened with its ring.
    let path = SeqPacket::connect(&name).unwrap();
    let given = Ring::create("t", 4096).unwrap();
    let open = Request::OpenPath {
        sender: 7,
        qpn: QPN,
    };
    path.send(&open.encode(), &[given.fd()]).unwrap();
    let (r, _) = answer(&path);
    assert!(
        matches!(
            r,
            Reply::Path {
                ring: PathRing::Taken,
                ..
            }
        ),
        "{r:?}"
    );
    // The member is told by the flag beside its ring.
    assert!(ring.take_raised());

    // The last member leaves; the silent connection keeps the device
    // process, and is served when it speaks.
    drop(m);
    let hello = Request::Hello {
        version: msg::VERSION,
        same_host: false,
        mtu: 0,
        comm: "late".into(),
    };
    let wake = EventFd::new().unwrap();
    silent.send(&hello.encode(), &[wake.as_fd()]).unwrap();
    assert!(matches!(answer(&silent).0, Reply::Welcome { .. }));

    // Its last member leaves: so does the device process.
    drop((silent, path));
    t.join().unwrap().unwrap();
}

/// The way to QP `qpn` at `dst` once every question was answered.
fn way_settled(paths: &mut super::super::path::Paths, dst: SocketAddr, qpn: u32) -> Option<usize> {
    let mut h = [0u8; 12];
    h[0] = 0x04;
    h[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
    let _ = paths.way(dst, &h, Instant::now());
    paths.settle_all(Duration::from_secs(60));
    paths.way(dst, &h, Instant::now())
}

/// Issue 19: a sender of the same-host path kept its way to the
/// member that owned a QP number when it was asked; once that member
/// freed the number (or left) and another member of the device
/// claimed it, the sender went on writing into the old owner's ring,
/// where the datagrams were dropped, and the new owner never saw
/// them. The device process now moves the epoch of the rings to a
/// member whose QP number is freed or who leaves; the sender asks
/// again and reaches the new owner (and UDP once nobody owns it).
#[test]
fn a_qp_number_that_changes_hands_is_asked_for_again() {
    let socket =
        UdpSocket::bind_with("127.23.2.1:0".parse().unwrap(), &SocketConfig::default()).unwrap();
    let dev = socket.local_addr();
    let name = super::super::rendezvous_name(dev).unwrap();
    let listener = SeqPacket::listen(&name).unwrap();
    let mut host = Host::new(listener, socket).unwrap();
    host.first_wait = Duration::from_secs(3600);
    let t = std::thread::spawn(move || host.run());

    const Q: u32 = 0x23_4567;
    let (m1, ring1, _w1) = join(&name, true);
    assert_eq!(ask(&m1, &Request::ClaimQpn(Q)), Reply::Ok);
    let mut paths = super::super::path::Paths::new("127.23.2.2:4791".parse().unwrap());
    let first = way_settled(&mut paths, dev, Q).expect("a ring to the first owner");
    assert!(ring1.take_raised(), "offered to the first owner");

    // The first owner frees Q (answered in order: `Members` after it
    // means it was done); a second member claims it.
    m1.send(
        &msg::frame(msg::NO_ANSWER, &Request::FreeQpn(Q).encode()),
        &[],
    )
    .unwrap();
    assert!(matches!(ask(&m1, &Request::Members), Reply::Members(_)));
    let (m2, ring2, _w2) = join(&name, true);
    assert_eq!(ask(&m2, &Request::ClaimQpn(Q)), Reply::Ok);
    let second = way_settled(&mut paths, dev, Q).expect("a ring to the new owner");
    assert_ne!(second, first, "still writing into the old owner's ring");
    assert!(ring2.take_raised(), "offered to the new owner");

    // The new owner leaves (its connection closes, as when its
    // process dies): nobody owns Q, UDP.
    drop(m2);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !matches!(ask(&m1, &Request::Members), Reply::Members(v) if v.len() == 1) {
        assert!(Instant::now() < deadline, "the member never left");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(way_settled(&mut paths, dev, Q), None);
    drop((m1, paths));
    t.join().unwrap().unwrap();
}
