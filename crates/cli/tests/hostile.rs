//! A hostile RC client against an unmodified `ibv_rc_pingpong` server
//! running over softrdma (`softrdma exec`), on loopback (issue 21). The
//! client speaks pingpong's TCP exchange and its RoCE traffic by hand from
//! plain UDP sockets — its own at 127.62.1.x:4791, and an injector on
//! another port of the same address, what any local process may open. The
//! server's QP was created by the program, with its own random PSN and
//! `qp_access_flags` 0 (no remote access), max_dest_rd_atomic 1, timeout
//! 14, retry_cnt 7.
//!
//! Needs Debian's `ibverbs-utils` (CI installs it); a missing tool fails.

#[path = "common/libs.rs"]
mod libs;
use libs::listening;

use softrdma_wire::ip::DatagramRepr;
use softrdma_wire::{
    AethRepr, AtomicEthRepr, BthRepr, IbPacket, Msn, NakCode, Opcode, PacketRepr, Psn, Qpn, RKey,
    RethRepr, Syndrome,
};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A deadline against hangs: never what decides a check.
const T: Duration = Duration::from_secs(30);

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn require_tools() {
    libs::require_built_library(env!("CARGO_BIN_EXE_softrdma"));
    assert!(
        Path::new("/usr/bin/ibv_rc_pingpong").exists(),
        "ibv_rc_pingpong not found: apt-get install -y ibverbs-utils (scripts/deps installs it)"
    );
}

/// The directory of this build's `libibverbs.so` for `softrdma exec
/// --lib`: next to the binary (`cargo build`) or in `deps/` (building the
/// tests), whichever is newer — exec alone prefers the first, which an
/// earlier `cargo build` may have left stale.
fn lib_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_BIN_EXE_softrdma")).parent().unwrap();
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    [dir.to_path_buf(), dir.join("deps")]
        .into_iter()
        .filter(|d| d.join("libibverbs.so").exists())
        .max_by_key(|d| mtime(&d.join("libibverbs.so")))
        .expect("libibverbs.so is built")
}

/// The wire form of a GID in pingpong's exchange: the 16 bytes in hex.
fn wire_gid(addr: IpAddr) -> String {
    let IpAddr::V4(a) = addr else { panic!("IPv4") };
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a.octets());
    g.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `p` from `src` to `dst` with its ICRC.
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

/// What the server sent, parsed.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Got {
    opcode: u8,
    psn: Psn,
    syndrome: Option<Syndrome>,
    from: SocketAddr,
}

/// Message size of the runs (`-s`).
const SIZE: usize = 64;

/// An `ibv_rc_pingpong` server under `softrdma exec`, and the hostile
/// client's view of it.
struct Server {
    child: Option<Child>,
    out: PathBuf,
    /// The client's socket: its own address, port 4791.
    real: UdpSocket,
    /// Another port of the client's address.
    inj: UdpSocket,
    dst: SocketAddr,
    qpn: Qpn,
    /// The server's first send PSN.
    spsn: Psn,
    /// The client's first PSN.
    cpsn: Psn,
    /// PINGs sent, server SENDs taken.
    pings: u32,
    pongs: u32,
}

impl Server {
    /// Starts the server at `srv`, exchanges with it as a client at `cli`.
    fn start(tag: &str, srv: &str, cli: &str, port: u16, iters: u32, log: &str) -> Server {
        let out =
            std::env::temp_dir().join(format!("softrdma-hostile-{tag}-{}.txt", std::process::id()));
        let f = std::fs::File::create(&out).unwrap();
        let p = port.to_string();
        let n = iters.to_string();
        let s = SIZE.to_string();
        let child = Command::new(env!("CARGO_BIN_EXE_softrdma"))
            .args(["exec", "--lib"])
            .arg(lib_dir())
            .args(["--addr", srv, "--", "ibv_rc_pingpong", "-g", "0"])
            .args(["-p", &p, "-n", &n, "-s", &s])
            .env_remove("SOFTRDMA_CONFIG")
            .env("SOFTRDMA_LOG", log)
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .expect("softrdma exec");
        let mut me = Server {
            child: Some(child),
            out,
            real: UdpSocket::bind((ip(cli), 4791)).unwrap(),
            inj: UdpSocket::bind((ip(cli), 0)).unwrap(),
            dst: SocketAddr::new(ip(srv), 4791),
            qpn: Qpn::new(0),
            spsn: Psn::ZERO,
            cpsn: Psn::new(0x12_3456),
            pings: 0,
            pongs: 0,
        };
        let deadline = Instant::now() + T;
        while !listening(port) {
            if Instant::now() > deadline || me.exited().is_some() {
                panic!("the server never listened:\n{}", me.output());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // pingpong's exchange: "LID:QPN:PSN:GID" and its NUL, both ways,
        // then the client's "done".
        let mut tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let msg = format!(
            "{:04x}:{:06x}:{:06x}:{}\0",
            0,
            0x4242,
            me.cpsn.value(),
            wire_gid(ip(cli))
        );
        assert_eq!(msg.len(), 52);
        tcp.write_all(msg.as_bytes()).unwrap();
        let mut theirs = [0u8; 52];
        tcp.read_exact(&mut theirs).unwrap();
        tcp.write_all(b"done\0").unwrap();
        let text = String::from_utf8_lossy(&theirs);
        let fields: Vec<&str> = text.trim_end_matches('\0').split(':').collect();
        me.qpn = Qpn::new(u32::from_str_radix(fields[1], 16).unwrap());
        me.spsn = Psn::new(u32::from_str_radix(fields[2], 16).unwrap());
        // Keep the connection open until the server closes it.
        std::mem::forget(tcp);
        me.real
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        me
    }

    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().unwrap())
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// Waits for the server to exit; its status and output.
    fn finish(mut self) -> (std::process::ExitStatus, String) {
        let deadline = Instant::now() + T;
        loop {
            if let Some(s) = self.exited() {
                self.child = None;
                return (s, self.output());
            }
            assert!(
                Instant::now() < deadline,
                "the server hangs:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `p` from the client's own port.
    fn send(&self, p: &PacketRepr<'_>) {
        let src = self.real.local_addr().unwrap();
        self.real
            .send_to(&forge(p, src, self.dst), self.dst)
            .unwrap();
    }

    /// Sends `p` from the injector's port.
    fn inject(&self, p: &PacketRepr<'_>) {
        let src = self.inj.local_addr().unwrap();
        self.inj
            .send_to(&forge(p, src, self.dst), self.dst)
            .unwrap();
    }

    /// The next packet from the server, if one comes before `deadline`.
    fn recv(&self, deadline: Instant) -> Option<Got> {
        let mut b = [0u8; 9000];
        while Instant::now() < deadline {
            let Ok((n, from)) = self.real.recv_from(&mut b) else {
                continue;
            };
            let pkt = IbPacket::new_checked(&b[..n]).expect("the server sent a valid packet");
            let r = PacketRepr::parse(&pkt).unwrap();
            return Some(Got {
                opcode: r.bth.opcode.0,
                psn: r.bth.psn,
                syndrome: r.aeth.map(|a| a.syndrome),
                from,
            });
        }
        None
    }

    fn ack(&self, psn: Psn, msn: u32) {
        let mut p = PacketRepr::new(bth(0x11, self.qpn, psn), &[]);
        p.bth.ack_req = false;
        p.aeth = Some(AethRepr {
            syndrome: Syndrome::ACK,
            msn: Msn::new(msn),
        });
        self.send(&p);
    }

    /// The next PSN the server expects from us.
    fn next_psn(&self) -> Psn {
        self.cpsn.add(self.pings)
    }

    /// One exchange: our SEND, its ACK and the server's SEND, which we ACK.
    fn round(&mut self) {
        let psn = self.next_psn();
        let ping = PacketRepr::new(bth(0x04, self.qpn, psn), leak(&[0x5a; SIZE]));
        self.send(&ping);
        self.pings += 1;
        let want_pong = self.spsn.add(self.pongs);
        let (mut acked, mut ponged) = (false, false);
        let deadline = Instant::now() + T;
        while !(acked && ponged) {
            let g = self
                .recv(deadline)
                .unwrap_or_else(|| panic!("round {}: no answer\n{}", self.pings, self.output()));
            assert_eq!(g.from, self.dst);
            match g.opcode {
                0x11 => match g.syndrome {
                    Some(Syndrome::Ack { .. }) if !g.psn.before(psn) => acked = true,
                    Some(Syndrome::Ack { .. }) => {}
                    s => panic!("round {}: {s:?}\n{}", self.pings, self.output()),
                },
                0x04 if g.psn == want_pong => {
                    self.ack(g.psn, self.pongs + 1);
                    ponged = true;
                }
                // A retransmission of an earlier SEND: ACK it again.
                0x04 => self.ack(g.psn, self.pongs),
                o => panic!("unexpected opcode {o:#x}"),
            }
        }
        self.pongs += 1;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(&self.out);
    }
}

/// In-window forgeries from another port of the client's address, after
/// its first packet: a SEND that pingpong would count as a message,
/// WRITE/READ/FETCH_ADD (the QP allows none), a MIDDLE with no FIRST, a
/// SEND longer than the MTU. All dropped and logged as not from the
/// connected peer, none answered; the pingpong runs to its end. Before:
/// the first forgery was NAKed and the server's QP moved to the error
/// state (the run failed).
#[test]
fn forgeries_from_another_port_leave_an_unmodified_server_running() {
    require_tools();
    // One program pair at a time (the interop tests' lock): fixed TCP
    // ports, and the pairs spin.
    let _one = libs::serial();
    let mut s = Server::start(
        "forge",
        "127.62.1.1",
        "127.62.1.2",
        23711,
        4,
        "softrdma::engine=debug",
    );
    s.round();
    let next = s.next_psn();
    let q = s.qpn;
    let mut write = PacketRepr::new(bth(0x0a, q, next), leak(&[0xee; 16]));
    write.reth = Some(RethRepr {
        va: 0x1000,
        rkey: RKey(0xdead),
        dma_len: 16,
    });
    let mut read = PacketRepr::new(bth(0x0c, q, next), &[]);
    read.reth = Some(RethRepr {
        va: 0x1000,
        rkey: RKey(0xdead),
        dma_len: 64,
    });
    let mut fadd = PacketRepr::new(bth(0x14, q, next), &[]);
    fadd.atomic_eth = Some(AtomicEthRepr {
        va: 0x1000,
        rkey: RKey(0xdead),
        swap_add: 1,
        compare: 0,
    });
    let forged = [
        PacketRepr::new(bth(0x04, q, next), leak(&[0x66; SIZE])),
        write,
        read,
        fadd,
        PacketRepr::new(bth(0x01, q, next), leak(&[1; 1024])),
        PacketRepr::new(bth(0x04, q, next), leak(&[2; 2000])),
    ];
    for p in &forged {
        s.inject(p);
    }
    for _ in 1..4 {
        s.round();
    }
    s.inj.set_nonblocking(true).unwrap();
    let mut b = [0u8; 64];
    assert!(s.inj.recv(&mut b).is_err(), "the injector got an answer");
    let (status, out) = s.finish();
    assert!(status.success(), "{status:?}\n{out}");
    assert!(out.contains("4 iters in"), "{out}");
    let dropped = out
        .matches("dropped packet: not from the connected peer")
        .count();
    assert_eq!(dropped, forged.len(), "{out}");
    assert!(!out.contains("-> Err"), "{out}");
}

/// ReDMArk's PSN sweep, from another port: 2^16 forged WRITEs with a bad
/// R_Key around the expected PSN. The server counts them (one rate-limited
/// warning) and the pingpong runs to its end.
#[test]
fn a_psn_sweep_from_another_port_leaves_the_server_running() {
    require_tools();
    // One program pair at a time (the interop tests' lock): fixed TCP
    // ports, and the pairs spin.
    let _one = libs::serial();
    let mut s = Server::start("sweep", "127.62.1.3", "127.62.1.4", 23712, 3, "warn");
    s.round();
    let start = s.next_psn().sub(1 << 15);
    let mut p = PacketRepr::new(bth(0x0a, s.qpn, start), leak(&[0xee; 8]));
    p.reth = Some(RethRepr {
        va: 0x1000,
        rkey: RKey(0xbad),
        dma_len: 8,
    });
    for i in 0..1u32 << 16 {
        p.bth.psn = start.add(i);
        s.inject(&p);
        if i % 512 == 511 {
            // Paced so that the server's socket takes them (a drop in its
            // queue would prove nothing either way).
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    s.round();
    s.round();
    let (status, out) = s.finish();
    assert!(status.success(), "{status:?}\n{out}");
    assert!(
        out.contains("refused packets") && out.contains("wrong_peer+"),
        "{out}"
    );
}

/// The client's own bad requests — a WRITE, a READ, a FETCH_ADD to a QP
/// that allows none — are NAKed at once as invalid requests (0x61) at
/// their PSN, sent once, as rxe does; the server's QP goes to the error
/// state and the program fails. (Depends on the engine sending the NAK a
/// QP produces as it moves to the error state: issue 21's "NAK produced
/// and never leaves".)
#[test]
fn the_peers_bad_requests_are_naked_at_once() {
    require_tools();
    // One program pair at a time (the interop tests' lock): fixed TCP
    // ports, and the pairs spin.
    let _one = libs::serial();
    for (i, op) in ["write", "read", "fetch_add"].into_iter().enumerate() {
        let i = i as u8;
        let mut s = Server::start(
            op,
            &format!("127.62.1.{}", 10 + 2 * i),
            &format!("127.62.1.{}", 11 + 2 * i),
            23720 + i as u16,
            2,
            "softrdma::engine=debug",
        );
        s.round();
        let psn = s.next_psn();
        let q = s.qpn;
        let p = match op {
            "write" => {
                let mut p = PacketRepr::new(bth(0x0a, q, psn), leak(&[0xee; 16]));
                p.reth = Some(RethRepr {
                    va: 0x1000,
                    rkey: RKey(0xdead),
                    dma_len: 16,
                });
                p
            }
            "read" => {
                let mut p = PacketRepr::new(bth(0x0c, q, psn), &[]);
                p.reth = Some(RethRepr {
                    va: 0x1000,
                    rkey: RKey(0xdead),
                    dma_len: 64,
                });
                p
            }
            _ => {
                let mut p = PacketRepr::new(bth(0x14, q, psn), &[]);
                p.atomic_eth = Some(AtomicEthRepr {
                    va: 0x1000,
                    rkey: RKey(0xdead),
                    swap_add: 1,
                    compare: 0,
                });
                p
            }
        };
        s.send(&p);
        let deadline = Instant::now() + T;
        let nak = loop {
            let Some(g) = s.recv(deadline) else {
                panic!("{op}: no NAK came\n{}", s.output());
            };
            if g.opcode == 0x11 && matches!(g.syndrome, Some(Syndrome::Nak(_))) {
                break g;
            }
            // The server's pong of round 1 may still come: ACK it.
            if g.opcode == 0x04 {
                s.ack(g.psn, 1);
            }
        };
        assert_eq!(nak.psn, psn, "{op}");
        assert_eq!(
            nak.syndrome,
            Some(Syndrome::Nak(NakCode::InvalidRequest)),
            "{op}"
        );
        let (status, out) = s.finish();
        assert!(!status.success(), "{op}: the program's QP lives on\n{out}");
        assert!(out.contains("NAK sent: invalid request"), "{op}: {out}");
    }
}

/// ACKs for PSNs the server never sent are ignored: a forged ACK past the
/// server's SEND does not complete it, which the server then sends again.
/// Forged sequence NAKs make it go back, but only `retry_cnt` (7) times
/// before its request fails. Before: the ACK completed the SEND (no
/// retransmission ever came).
#[test]
fn forged_acks_are_ignored_and_naks_cost_bounded_retries() {
    require_tools();
    // One program pair at a time (the interop tests' lock): fixed TCP
    // ports, and the pairs spin.
    let _one = libs::serial();
    let mut s = Server::start("acks", "127.62.1.20", "127.62.1.21", 23730, 2, "warn");
    // Our SEND; the server ACKs it and sends its own.
    let psn = s.next_psn();
    s.send(&PacketRepr::new(bth(0x04, s.qpn, psn), leak(&[1; SIZE])));
    s.pings += 1;
    let deadline = Instant::now() + T;
    let pong = loop {
        let g = s.recv(deadline).expect("the server's SEND");
        if g.opcode == 0x04 {
            break g;
        }
    };
    assert_eq!(pong.psn, s.spsn);
    // ACKs beyond it: ignored, so it comes again (its transport timer).
    for ahead in [1, 5, 1000] {
        let mut p = PacketRepr::new(bth(0x11, s.qpn, pong.psn.add(ahead)), &[]);
        p.bth.ack_req = false;
        p.aeth = Some(AethRepr {
            syndrome: Syndrome::ACK,
            msn: Msn::new(1),
        });
        s.send(&p);
    }
    let again = loop {
        let g = s.recv(deadline).expect("the SEND again");
        if g.opcode == 0x04 {
            break g;
        }
    };
    assert_eq!(again.psn, pong.psn, "the forged ACK completed the SEND");
    // Sequence NAKs for it, one per copy: it comes at most 7 more times,
    // then the server gives up (transport retry counter exceeded).
    let mut copies = 0;
    let mut nak = PacketRepr::new(bth(0x11, s.qpn, pong.psn), &[]);
    nak.bth.ack_req = false;
    nak.aeth = Some(AethRepr {
        syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
        msn: Msn::new(1),
    });
    s.send(&nak);
    while let Some(g) = s.recv(Instant::now() + Duration::from_secs(5)) {
        if g.opcode == 0x04 && g.psn == pong.psn {
            copies += 1;
            s.send(&nak);
        }
    }
    assert!(copies <= 7, "{copies} more copies");
    let (status, out) = s.finish();
    assert!(!status.success(), "{out}");
    assert!(out.to_lowercase().contains("retry"), "{out}");
}
