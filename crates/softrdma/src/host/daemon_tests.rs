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
    conn.send(&req.encode(), &[]).unwrap();
    answer(conn).0
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
