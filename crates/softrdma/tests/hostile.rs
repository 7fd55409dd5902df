//! Hostile peers over real UDP sockets on loopback (issue 21, ReDMArk):
//! softrdma devices at 127.62.0.x, and an attacker that writes RoCE
//! packets by hand (softrdma-wire's emitters, ICRC and all) on plain UDP
//! sockets — what any local process can do without privileges. The
//! attacker is given the worst case: it knows the QPNs and PSNs.
//!
//! The same attacks against an unmodified `ibv_rc_pingpong` server are in
//! the CLI's `hostile` tests; the core's rules, scripted, in softrdma-proto's.

use softrdma::*;
use softrdma_wire::ip::DatagramRepr;
use softrdma_wire::{
    AethRepr, AtomicEthRepr, BthRepr, IbPacket, Msn, NakCode, Opcode, PacketRepr, Psn, Qpn, RKey,
    RethRepr, Syndrome,
};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn open(addr: &str) -> Device {
    Device::open(DeviceOptions {
        addr: Some(ip(addr)),
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("device at {addr}: {e}"))
}

fn all_access() -> Access {
    Access::LOCAL_WRITE
        .with(Access::REMOTE_WRITE)
        .with(Access::REMOTE_READ)
        .with(Access::REMOTE_ATOMIC)
}

/// A device with a PD, a CQ and a 1 MiB region.
struct Node {
    dev: Device,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    mr: MemoryRegion,
}

impl Node {
    fn new(addr: &str) -> Node {
        let dev = open(addr);
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(4096, None).unwrap();
        let mr = pd.alloc_mr(1 << 20, all_access()).unwrap();
        Node { dev, pd, cq, mr }
    }
    fn qp(&self) -> QueuePair {
        self.pd
            .qp_builder(QpType::Rc, &self.cq, &self.cq)
            .build()
            .unwrap()
    }
}

/// Connects `a`'s QP to `b`'s; with `given`, each side says its port.
fn connect(a: &QueuePair, b: &QueuePair, given: bool, o: &ConnectOptions) -> (Psn, Psn) {
    let (pa, pb) = (Psn::new(0x10_0000), Psn::new(0x20_0000));
    let mut ea = a.endpoint(pa);
    let mut eb = b.endpoint(pb);
    if !given {
        ea.port = None;
        eb.port = None;
    }
    a.connect(pa, &eb, o).unwrap();
    b.connect(pb, &ea, o).unwrap();
    (pa, pb)
}

/// Writes `p` as a datagram from `src` to `dst` (ICRC over the addresses
/// and ports the receiver sees).
fn forge(p: &PacketRepr<'_>, src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    DatagramRepr::between(src, dst)
        .unwrap()
        .udp_payload(p)
        .unwrap()
}

fn bth(opcode: u8, qpn: Qpn, psn: Psn) -> BthRepr {
    BthRepr {
        ack_req: true,
        ..BthRepr::new(Opcode(opcode), qpn, psn)
    }
}

fn leak(b: &[u8]) -> &'static [u8] {
    Box::leak(b.to_vec().into_boxed_slice())
}

fn write_only(qpn: Qpn, psn: Psn, va: u64, rkey: u32, data: &[u8]) -> PacketRepr<'static> {
    let mut p = PacketRepr::new(bth(0x0a, qpn, psn), leak(data));
    p.reth = Some(RethRepr {
        va,
        rkey: RKey(rkey),
        dma_len: data.len() as u32,
    });
    p
}

fn read_req(qpn: Qpn, psn: Psn, va: u64, rkey: u32, len: u32) -> PacketRepr<'static> {
    let mut p = PacketRepr::new(bth(0x0c, qpn, psn), &[]);
    p.reth = Some(RethRepr {
        va,
        rkey: RKey(rkey),
        dma_len: len,
    });
    p
}

/// Polls `f` until it holds (a deadline against a hang, not a timing).
fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + T;
    while !f() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn ok(wc: &[Wc], n: usize) {
    assert_eq!(wc.len(), n, "{wc:?}");
    for w in wc {
        assert_eq!(w.status, WcStatus::Success, "{w:?}");
    }
}

/// Sends a SEND of `data` from `from` to `to`'s posted receive at offset
/// `off`; both complete.
fn send(from: &Node, fq: &QueuePair, to: &Node, tq: &QueuePair, data: &[u8], off: usize) {
    tq.post_recv(RecvWr {
        wr_id: 7,
        sg_list: vec![to.mr.sge(off, 4096)],
    })
    .unwrap();
    from.mr.write(0, data);
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sg_list = vec![from.mr.sge(0, data.len() as u32)];
    fq.post_send(wr).unwrap();
    ok(&from.cq.wait(1, T).unwrap(), 1);
    ok(&to.cq.wait(1, T).unwrap(), 1);
    assert_eq!(to.mr.to_vec(off, data.len()), data);
}

/// A local process sends from the peer's address (any 127.x is anyone's)
/// but another port: in-window forgeries — a SEND, WRITEs with a bad and a
/// good R_Key, a READ, an atomic, a broken opcode sequence, an oversized
/// SEND — all dropped before any check; the connection carries on.
/// Before: the SEND was delivered to the program and the first bad
/// request moved the QP to the error state.
fn injection_from_another_port(given: bool, v_addr: &str, c_addr: &str) {
    let v = Node::new(v_addr);
    let c = Node::new(c_addr);
    let (vq, cq) = (v.qp(), c.qp());
    let (_, c_psn) = {
        let (pv, pc) = connect(&vq, &cq, given, &ConnectOptions::default());
        (pv, pc)
    };
    if !given {
        // The victim learns the client's port from its first packet.
        assert_eq!(vq.peer_port().unwrap(), None);
        send(&c, &cq, &v, &vq, b"first", 0);
    }
    assert_eq!(vq.peer_port().unwrap(), Some(c.dev.local_addr().port()));
    let next = if given { c_psn } else { c_psn.add(1) };
    let attacker = UdpSocket::bind((ip(c_addr), 0)).unwrap();
    let src = attacker.local_addr().unwrap();
    let dst = v.dev.local_addr();
    let q = vq.qpn();
    let mut fa = PacketRepr::new(bth(0x14, q, next), &[]);
    fa.atomic_eth = Some(AtomicEthRepr {
        va: v.mr.addr(),
        rkey: v.mr.rkey(),
        swap_add: 1,
        compare: 0,
    });
    let forged = [
        PacketRepr::new(bth(0x04, q, next), b"forged"),
        write_only(q, next, v.mr.addr(), v.mr.rkey().0 ^ 1, &[0xee; 16]),
        write_only(q, next, v.mr.addr(), v.mr.rkey().0, &[0xee; 16]),
        read_req(q, next, v.mr.addr(), v.mr.rkey().0 ^ 1, 64),
        fa,
        PacketRepr::new(bth(0x01, q, next), leak(&[1; 4096])),
        PacketRepr::new(bth(0x04, q, next), leak(&[2; 4100])),
        PacketRepr::new(bth(0x04, q, next.add(9)), b"ahead"),
    ];
    vq.post_recv(RecvWr {
        wr_id: 8,
        sg_list: vec![v.mr.sge(8192, 8192)],
    })
    .unwrap();
    let before = v.mr.to_vec(0, 1 << 20);
    for p in &forged {
        attacker.send_to(&forge(p, src, dst), dst).unwrap();
    }
    wait_for("every forgery counted", || {
        vq.counters().unwrap().wrong_peer == forged.len() as u64
    });
    assert_eq!(vq.state().unwrap(), QpState::Rts);
    assert_eq!(v.mr.to_vec(0, 1 << 20), before, "no byte written");
    assert!(
        v.cq.wait(1, Duration::ZERO).unwrap().is_empty(),
        "nothing delivered"
    );
    // No answer went to the attacker.
    attacker.set_nonblocking(true).unwrap();
    let mut b = [0u8; 64];
    assert!(attacker.recv_from(&mut b).is_err());
    // The real client carries on: its SEND lands in the receive the
    // forged SEND did not take.
    c.mr.write(0, b"real");
    let mut wr = SendWr::new(2, WrOpcode::Send);
    wr.sg_list = vec![c.mr.sge(0, 4)];
    cq.post_send(wr).unwrap();
    ok(&c.cq.wait(1, T).unwrap(), 1);
    let got = v.cq.wait(1, T).unwrap();
    ok(&got, 1);
    assert_eq!((got[0].wr_id, got[0].byte_len), (8, 4));
    assert_eq!(v.mr.to_vec(8192, 4), b"real");
}

#[test]
fn injection_from_another_port_is_refused_once_the_port_is_learned() {
    injection_from_another_port(false, "127.62.0.1", "127.62.0.2");
}

#[test]
fn injection_from_another_port_is_refused_from_the_start_when_given() {
    injection_from_another_port(true, "127.62.0.3", "127.62.0.4");
}

/// ReDMArk's PSN sweep: every PSN in a window of 2^16 around the expected
/// one, from another port: all counted as `wrong_peer`, none noticed by
/// the connection. (The whole 2^24 space is swept in the core's test.)
#[test]
fn a_psn_sweep_from_another_port_is_counted() {
    let v = Node::new("127.62.0.5");
    let c = Node::new("127.62.0.6");
    let (vq, cq) = (v.qp(), c.qp());
    let (_, c_psn) = connect(&vq, &cq, true, &ConnectOptions::default());
    let attacker = UdpSocket::bind((ip("127.62.0.6"), 0)).unwrap();
    let src = attacker.local_addr().unwrap();
    let dst = v.dev.local_addr();
    let n: u32 = 1 << 16;
    let start = c_psn.sub(n / 2);
    let mut sent = 0u64;
    for chunk in 0..n / 1024 {
        for i in 0..1024 {
            let psn = start.add(chunk * 1024 + i);
            let p = write_only(vq.qpn(), psn, v.mr.addr(), 0xbad, &[0xee; 8]);
            attacker.send_to(&forge(&p, src, dst), dst).unwrap();
        }
        sent += 1024;
        // Paced by the device's own count, so no datagram is lost to a
        // full socket and every one must be counted.
        wait_for("the chunk counted", || {
            vq.counters().unwrap().wrong_peer == sent
        });
    }
    assert_eq!(vq.state().unwrap(), QpState::Rts);
    send(&c, &cq, &v, &vq, b"still here", 0);
}

/// The attacker has a legitimate connection of its own to the victim's
/// device and sweeps R_Keys over it: one NAK (remote access error), its QP
/// dies, later tries get no answer; the victim's connection carries on
/// and its region is untouched.
#[test]
fn an_rkey_sweep_kills_only_the_attackers_qp() {
    let v = Node::new("127.62.0.7");
    let c = Node::new("127.62.0.8");
    let (vq, cq) = (v.qp(), c.qp());
    connect(&vq, &cq, true, &ConnectOptions::default());
    // The attacker's own QP on the victim's device.
    let attacker = UdpSocket::bind("127.62.0.9:4791").unwrap();
    let a_addr = attacker.local_addr().unwrap();
    let aq = v.qp();
    let mut gid = [0u8; 16];
    gid[10] = 0xff;
    gid[11] = 0xff;
    gid[12..].copy_from_slice(&[127, 62, 0, 9]);
    let a_psn = Psn::new(0x33_0000);
    let ep = QpEndpoint {
        gid,
        qpn: Qpn::new(0x4242),
        psn: a_psn,
        port: Some(4791),
    };
    aq.connect(Psn::new(0x44_0000), &ep, &ConnectOptions::default())
        .unwrap();
    let before = v.mr.to_vec(0, 1 << 20);
    let dst = v.dev.local_addr();
    let tries = 2000u32;
    let mut key = 0x1234_5678u32;
    for i in 0..tries {
        key = key.wrapping_mul(0x9e37_79b9).wrapping_add(1);
        if key == v.mr.rkey().0 {
            key ^= 1;
        }
        let p = write_only(aq.qpn(), a_psn.add(i), v.mr.addr(), key, &[0xee; 8]);
        attacker.send_to(&forge(&p, a_addr, dst), dst).unwrap();
        if i % 256 == 255 {
            // Paced: none lost to a full socket.
            let seen = i as u64 + 1;
            wait_for("tries seen", || {
                let k = aq.counters().unwrap();
                k.rem_access_nak_sent + k.unknown_qp == seen
            });
        }
    }
    wait_for("every try seen", || {
        let k = aq.counters().unwrap();
        k.rem_access_nak_sent + k.unknown_qp == tries as u64
    });
    let k = aq.counters().unwrap();
    assert_eq!(k.rem_access_nak_sent, 1, "one answer: {k:?}");
    assert_eq!(aq.state().unwrap(), QpState::Err);
    // On the wire: one NAK, remote access error, at the first try's PSN.
    attacker.set_read_timeout(Some(T)).unwrap();
    let mut b = [0u8; 256];
    let n = attacker.recv(&mut b).unwrap();
    let r = PacketRepr::parse(&IbPacket::new_checked(&b[..n]).unwrap()).unwrap();
    assert_eq!(r.bth.psn, a_psn);
    assert_eq!(
        r.aeth.map(|a| a.syndrome),
        Some(Syndrome::Nak(NakCode::RemoteAccessError))
    );
    attacker.set_nonblocking(true).unwrap();
    assert!(attacker.recv(&mut b).is_err(), "a second answer");
    assert_eq!(v.mr.to_vec(0, 1 << 20), before);
    // The victim's connection works.
    assert_eq!(vq.state().unwrap(), QpState::Rts);
    send(&c, &cq, &v, &vq, b"victim", 100);
}

/// READs beyond the negotiated `max_dest_rd_atomic` while the earlier
/// ones' responses are still being sent: an invalid request, the
/// flooder's QP to the error state. Before: every READ was queued (64 MiB
/// of responses each).
#[test]
fn a_read_flood_beyond_max_dest_rd_atomic_is_refused() {
    let v = Node::new("127.62.0.10");
    let big = v.pd.alloc_mr(64 << 20, all_access()).unwrap();
    let attacker = UdpSocket::bind("127.62.0.11:4791").unwrap();
    let a_addr = attacker.local_addr().unwrap();
    let aq = v.qp();
    let mut gid = [0u8; 16];
    gid[10] = 0xff;
    gid[11] = 0xff;
    gid[12..].copy_from_slice(&[127, 62, 0, 11]);
    let a_psn = Psn::new(0x55_0000);
    let o = ConnectOptions {
        max_rd_atomic: 4,
        ..Default::default()
    };
    let ep = QpEndpoint {
        gid,
        qpn: Qpn::new(0x4343),
        psn: a_psn,
        port: Some(4791),
    };
    aq.connect(Psn::new(0x66_0000), &ep, &o).unwrap();
    // Six READs of 64 MiB (16,384 responses each at 4 KiB) sent at once:
    // the fifth arrives while the first is still being answered.
    let dst = v.dev.local_addr();
    let len = 64u32 << 20;
    let npkts = len / 4096;
    let dgrams: Vec<Vec<u8>> = (0..6)
        .map(|i| {
            let p = read_req(
                aq.qpn(),
                a_psn.add(i * npkts),
                big.addr(),
                big.rkey().0,
                len,
            );
            forge(&p, a_addr, dst)
        })
        .collect();
    for d in &dgrams {
        attacker.send_to(d, dst).unwrap();
    }
    wait_for("the QP refused a READ", || {
        aq.counters().unwrap().too_many_rd_atomic > 0
    });
    let k = aq.counters().unwrap();
    assert_eq!((k.too_many_rd_atomic, k.inv_req_nak_sent), (1, 1), "{k:?}");
    assert_eq!(aq.state().unwrap(), QpState::Err);
}

/// An ACK or NAK from the peer's address but another port reaches no
/// requester: a forged remote access NAK does not fail an outstanding
/// request. Before: the request completed with REM_ACCESS_ERR.
#[test]
fn a_forged_nak_from_another_port_is_ignored() {
    let v = Node::new("127.62.0.12");
    let c = Node::new("127.62.0.13");
    let (vq, cq) = (v.qp(), c.qp());
    let o = ConnectOptions {
        min_rnr_timer: 14,
        ..Default::default()
    };
    let (v_psn, c_psn) = connect(&vq, &cq, false, &o);
    let _ = v_psn;
    // No receive posted at the victim: the client's SEND stays
    // outstanding, RNR NAKed (which also tells the client the victim's
    // port).
    c.mr.write(0, b"waiting");
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sg_list = vec![c.mr.sge(0, 7)];
    cq.post_send(wr).unwrap();
    wait_for("an RNR NAK", || cq.counters().unwrap().rnr_nak_rcvd > 0);
    assert_eq!(cq.peer_port().unwrap(), Some(v.dev.local_addr().port()));
    let attacker = UdpSocket::bind(("127.62.0.12", 0)).unwrap();
    let src = attacker.local_addr().unwrap();
    let dst = c.dev.local_addr();
    for syn in [
        Syndrome::Nak(NakCode::RemoteAccessError),
        Syndrome::Nak(NakCode::InvalidRequest),
        Syndrome::ACK,
    ] {
        let mut p = PacketRepr::new(bth(0x11, cq.qpn(), c_psn), &[]);
        p.aeth = Some(AethRepr {
            syndrome: syn,
            msn: Msn::new(1),
        });
        attacker.send_to(&forge(&p, src, dst), dst).unwrap();
    }
    wait_for("the forgeries counted", || {
        cq.counters().unwrap().wrong_peer == 3
    });
    assert!(
        c.cq.wait(1, Duration::ZERO).unwrap().is_empty(),
        "nothing completed"
    );
    // The receive comes; the SEND completes as it should.
    vq.post_recv(RecvWr {
        wr_id: 5,
        sg_list: vec![v.mr.sge(0, 64)],
    })
    .unwrap();
    ok(&c.cq.wait(1, T).unwrap(), 1);
    ok(&v.cq.wait(1, T).unwrap(), 1);
}

/// 256 QPs of a real device: no pattern in their numbers (ReDMArk V5).
/// Before: consecutive numbers.
#[test]
fn qpns_of_a_device_are_unpredictable() {
    let n = Node::new("127.62.0.14");
    let qps: Vec<QueuePair> = (0..256).map(|_| n.qp()).collect();
    let q: Vec<u32> = qps.iter().map(|x| x.qpn().value()).collect();
    let mut deltas: Vec<u32> = q
        .windows(2)
        .map(|w| w[1].wrapping_sub(w[0]) & 0xff_ffff)
        .collect();
    deltas.sort_unstable();
    let commonest = deltas
        .chunk_by(|a, b| a == b)
        .map(<[u32]>::len)
        .max()
        .unwrap();
    assert!(commonest <= 2, "a delta repeats {commonest} times: {q:x?}");
    let (lo, hi) = (q.iter().min().unwrap(), q.iter().max().unwrap());
    assert!(hi - lo > 1 << 22, "{lo:#x}..{hi:#x}");
}

/// The device's socket is its own: a second device on its address fails,
/// and so does a socket asking to share the port with SO_REUSEPORT (which
/// would let another process of the same user take a share of its
/// datagrams).
#[test]
fn the_device_socket_cannot_be_shared() {
    let n = Node::new("127.62.0.15");
    let again = Device::open(DeviceOptions {
        addr: Some(ip("127.62.0.15")),
        ..Default::default()
    });
    let e = again.expect_err("a second device on the address");
    assert_eq!(e.errno(), libc::EADDRINUSE, "{e}");
    // SAFETY: plain socket calls on a descriptor this test owns.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
        assert!(fd >= 0);
        let one: libc::c_int = 1;
        let r = libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEPORT,
            &one as *const _ as *const libc::c_void,
            std::mem::size_of_val(&one) as libc::socklen_t,
        );
        assert_eq!(r, 0);
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 4791u16.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes([127, 62, 0, 15]),
            },
            sin_zero: [0; 8],
        };
        let r = libc::bind(
            fd,
            &sa as *const _ as *const libc::sockaddr,
            std::mem::size_of_val(&sa) as libc::socklen_t,
        );
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        assert_eq!(r, -1, "SO_REUSEPORT shared the device's port");
        assert_eq!(err.raw_os_error(), Some(libc::EADDRINUSE));
    }
    drop(n);
}

/// Captures are their owner's only (mode 0600), new or overwritten, and
/// whatever the umask. Before: 0644 (0666 less the umask).
#[test]
fn captures_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("softrdma-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let new = dir.join("new.pcap");
    let old = dir.join("old.pcap");
    std::fs::write(&old, b"x").unwrap();
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).unwrap();
    for (addr, path) in [("127.62.0.16", &new), ("127.62.0.17", &old)] {
        let d = Device::open(DeviceOptions {
            addr: Some(ip(addr)),
            pcap: Some(path.clone()),
            ..Default::default()
        })
        .unwrap();
        let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", path.display());
        drop(d);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn cap_net_raw() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let capeff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
        .unwrap();
    capeff >> 13 & 1 == 1
}

/// Sets a controlled Q_Key (0x80010000) on a UD QP of a device at `addr`:
/// allowed with CAP_NET_RAW, EPERM without; an ordinary Q_Key always.
fn set_controlled_qkey(addr: &str) {
    let n = Node::new(addr);
    let ud = n.pd.qp_builder(QpType::Ud, &n.cq, &n.cq).build().unwrap();
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qkey: softrdma_wire::QKey(0x8001_0000),
        ..Default::default()
    };
    let m = AttrMask::required(QpType::Ud, QpState::Reset, QpState::Init).unwrap();
    let r = ud.modify(&init, m);
    if cap_net_raw() {
        r.unwrap();
    } else {
        let e = r.unwrap_err();
        assert_eq!(e.errno(), libc::EPERM, "{e}");
        assert_eq!(ud.state().unwrap(), QpState::Reset);
    }
    let plain = QpAttr {
        qkey: softrdma_wire::QKey(0x1234),
        ..init
    };
    let ud2 = n.pd.qp_builder(QpType::Ud, &n.cq, &n.cq).build().unwrap();
    ud2.modify(&plain, m).unwrap();
}

/// A controlled Q_Key (most significant bit set) needs CAP_NET_RAW, as
/// the kernel asks of user programs since 2023 (uverbs `modify_qp`,
/// EPERM). Checked in this process and in a copy of it started without
/// CAP_NET_RAW (`setpriv --bounding-set -net_raw`). Before: any process
/// could set one.
#[test]
fn controlled_qkeys_need_cap_net_raw() {
    set_controlled_qkey("127.62.0.18");
    let out = std::process::Command::new("setpriv")
        .args(["--bounding-set", "-net_raw", "--inh-caps", "-net_raw", "--"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "controlled_qkey_without_cap_net_raw",
            "--ignored",
        ])
        .output()
        .expect("setpriv (util-linux)");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "the child ran nothing: {text}");
}

/// Run by `controlled_qkeys_need_cap_net_raw` without CAP_NET_RAW.
#[test]
#[ignore = "run by controlled_qkeys_need_cap_net_raw under setpriv"]
fn controlled_qkey_without_cap_net_raw() {
    assert!(!cap_net_raw(), "started with CAP_NET_RAW");
    set_controlled_qkey("127.62.0.19");
}
