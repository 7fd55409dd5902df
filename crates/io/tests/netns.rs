//! Root-only tests in network namespaces made for the test: what Linux puts
//! on the wire (IPv4 identification, DF, IPv6 UDP checksum) for datagrams
//! sent through this crate, on loopback and on a veth pair, read back with
//! an AF_PACKET capture; and sends into an unreachable route.
//!
//! Without root they print a loud SKIPPED notice and pass.

mod common;

use std::fs::File;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use softrdma_io::{SocketConfig, Transmit, UdpSocket};

// --- namespace plumbing ------------------------------------------------------

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Two network namespaces joined by a veth pair, deleted on drop.
/// Addresses come from 198.18.0.0/15 (RFC 2544 benchmarking) and the ULA
/// fd00:198:18::/64; traffic never leaves the namespaces.
struct Pair {
    a: String,
    b: String,
    veth_a: String,
    veth_b: String,
}

const A4: &str = "198.18.0.1";
const B4: &str = "198.18.0.2";
const A6: &str = "fd00:198:18::1";
const B6: &str = "fd00:198:18::2";

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Pair {
    fn new() -> Result<Self, String> {
        let id = format!(
            "{}x{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let p = Pair {
            a: format!("sio-a-{id}"),
            b: format!("sio-b-{id}"),
            veth_a: "sioa".into(),
            veth_b: "siob".into(),
        };
        ip(&["netns", "add", &p.a])?;
        ip(&["netns", "add", &p.b])?;
        // Created inside namespace a, so the names cannot clash with other
        // tests' pairs; one end then moves to b.
        let (a, b, va, vb) = (&p.a, &p.b, &p.veth_a, &p.veth_b);
        ip(&[
            "-n", a, "link", "add", va, "type", "veth", "peer", "name", vb, "netns", b,
        ])?;
        for (ns, dev, v4, v6) in [(a, va, A4, A6), (b, vb, B4, B6)] {
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["-n", ns, "addr", "add", &format!("{v4}/24"), "dev", dev])?;
            ip(&[
                "-n",
                ns,
                "-6",
                "addr",
                "add",
                &format!("{v6}/64"),
                "dev",
                dev,
                "nodad",
            ])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
        }
        Ok(p)
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.a]);
        let _ = ip(&["netns", "del", &self.b]);
    }
}

/// Runs `f` on a thread that has entered namespace `ns`. Sockets created
/// there stay in that namespace wherever they are used later.
fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    thread::scope(|s| {
        s.spawn(|| {
            let file = File::open(format!("/run/netns/{ns}")).unwrap();
            // SAFETY: setns on a valid namespace fd affects only this thread.
            let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .unwrap()
    })
}

fn bind_in(ns: &str, addr: &str, cfg: SocketConfig) -> UdpSocket {
    let addr: SocketAddr = addr.parse().unwrap();
    in_netns(ns, move || UdpSocket::bind_with(addr, &cfg).unwrap())
}

/// The namespace pair, or `None` (after a loud notice) where the test
/// cannot run: not root, no `ip`, or namespaces refused (a container).
fn pair_or_skip(test: &str) -> Option<Pair> {
    if !is_root() {
        skip(test, "needs root for network namespaces and AF_PACKET");
        return None;
    }
    if Command::new("ip").arg("-V").output().is_err() {
        skip(test, "needs iproute2's `ip`");
        return None;
    }
    match Pair::new() {
        Ok(p) => Some(p),
        Err(e) => {
            skip(test, &format!("cannot set up network namespaces: {e}"));
            None
        }
    }
}

// --- AF_PACKET capture ---------------------------------------------------------

const PACKET_HOST: u8 = 0;
const PACKET_OUTGOING: u8 = 4;

/// A raw capture on one interface of one namespace.
struct Capture {
    fd: OwnedFd,
}

/// What the test reads from a captured frame.
#[derive(Debug, Clone)]
struct Frame {
    pkttype: u8,
    v4: bool,
    /// IPv4 identification (0 for IPv6).
    ident: u16,
    df: bool,
    dst_port: u16,
    udp_checksum: u16,
    udp_payload_len: usize,
}

impl Capture {
    fn open(ns: &str, ifname: &str) -> Capture {
        let ifname = std::ffi::CString::new(ifname).unwrap();
        in_netns(ns, move || {
            let proto = (libc::ETH_P_ALL as u16).to_be();
            // SAFETY: plain syscall; returns a new fd or -1.
            let raw = unsafe {
                libc::socket(
                    libc::AF_PACKET,
                    libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                    libc::c_int::from(proto),
                )
            };
            assert!(raw >= 0, "AF_PACKET: {}", std::io::Error::last_os_error());
            // SAFETY: a fresh fd nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            // SAFETY: a NUL-terminated name; looked up in this namespace.
            let ifindex = unsafe { libc::if_nametoindex(ifname.as_ptr()) };
            assert_ne!(ifindex, 0, "no interface {ifname:?}");
            // SAFETY: all-zero is a valid sockaddr_ll.
            let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_protocol = proto;
            sll.sll_ifindex = ifindex as i32;
            // SAFETY: `sll` is a live sockaddr_ll and its size is passed.
            let r = unsafe {
                libc::bind(
                    fd.as_raw_fd(),
                    (&sll as *const libc::sockaddr_ll).cast(),
                    std::mem::size_of::<libc::sockaddr_ll>() as u32,
                )
            };
            assert_eq!(r, 0, "bind AF_PACKET: {}", std::io::Error::last_os_error());
            Capture { fd }
        })
    }

    /// Collects UDP frames to `port` with packet type `pkttype` until their
    /// UDP payloads add up to `bytes`.
    fn collect(&self, port: u16, pkttype: u8, bytes: usize) -> Vec<Frame> {
        let mut out = Vec::new();
        let mut got = 0;
        let mut buf = vec![0u8; 70_000];
        let deadline = Instant::now() + PATIENCE;
        while got < bytes {
            // SAFETY: all-zero is a valid sockaddr_ll.
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            // SAFETY: `buf` and `from` are live and their sizes are passed.
            let n = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    0,
                    (&mut from as *mut libc::sockaddr_ll).cast(),
                    &mut len,
                )
            };
            if n < 0 {
                assert!(
                    Instant::now() < deadline,
                    "captured {got} of {bytes} bytes: {out:?}"
                );
                thread::sleep(Duration::from_millis(1));
                continue;
            }
            if let Some(f) = parse(&buf[..n as usize], from.sll_pkttype) {
                if f.dst_port == port && f.pkttype == pkttype {
                    got += f.udp_payload_len;
                    out.push(f);
                }
            }
        }
        assert_eq!(got, bytes, "captured more than was sent: {out:?}");
        out
    }
}

/// Parses Ethernet (loopback frames carry a zeroed Ethernet header too),
/// then IPv4 or IPv6 (without extension headers), then UDP.
fn parse(frame: &[u8], pkttype: u8) -> Option<Frame> {
    let be16 = |b: &[u8], at: usize| u16::from_be_bytes([b[at], b[at + 1]]);
    let ethertype = be16(frame.get(..14)?, 12);
    let (v4, ident, df, udp) = match ethertype {
        0x0800 => {
            let ip = frame.get(14..)?;
            let ihl = usize::from(ip.first()? & 0x0f) * 4;
            if ip.len() < ihl + 8 || ip[9] != 17 {
                return None;
            }
            (true, be16(ip, 4), be16(ip, 6) & 0x4000 != 0, &ip[ihl..])
        }
        0x86dd => {
            let ip = frame.get(14..)?;
            if ip.len() < 48 || ip[6] != 17 {
                return None;
            }
            (false, 0, true, &ip[40..])
        }
        _ => return None,
    };
    Some(Frame {
        pkttype,
        v4,
        ident,
        df,
        dst_port: be16(udp, 2),
        udp_checksum: be16(udp, 6),
        udp_payload_len: usize::from(be16(udp, 4)).saturating_sub(8),
    })
}

// --- the tests -------------------------------------------------------------------

const SEG: usize = 1000;
const GSO_LEN: usize = 4 * SEG + 500;
const SINGLE_LEN: usize = 100;

/// Sends three single datagrams, then one GSO run of four 1000-byte
/// segments and a 500-byte one, and returns the bytes sent.
fn send_pattern(tx: &UdpSocket, dst: SocketAddr) -> usize {
    let single = vec![0x11u8; SINGLE_LEN];
    let run = vec![0x22u8; GSO_LEN];
    let mut g = Transmit::new(dst, &run);
    g.segment_size = Some(SEG);
    let s = Transmit::new(dst, &single);
    assert_eq!(tx.send(&[s, s, s, g]).unwrap(), 4);
    assert_eq!(tx.stats().send_errors, 0);
    3 * SINGLE_LEN + GSO_LEN
}

/// Checks what the engine relies on and returns a one-line description:
/// single datagrams carry identification 0 and DF; each GSO segment (or the
/// unsegmented super-datagram, whose first segment starts at offset 0)
/// carries identification = its segment index, with DF.
fn check_ids(frames: &[Frame], place: &str) -> String {
    assert!(
        frames.iter().all(|f| f.v4 && f.df),
        "{place}: DF missing: {frames:?}"
    );
    let (singles, gso) = frames.split_at(3);
    for f in singles {
        assert_eq!(f.udp_payload_len, SINGLE_LEN, "{place}: {frames:?}");
        assert_eq!(
            f.ident, 0,
            "{place}: single unconnected DF datagram: {frames:?}"
        );
    }
    let mut offset = 0;
    for f in gso {
        assert_eq!(offset % SEG, 0, "{place}: {frames:?}");
        assert_eq!(
            usize::from(f.ident),
            offset / SEG,
            "{place}: GSO segment at offset {offset}: {frames:?}"
        );
        offset += f.udp_payload_len;
    }
    assert_eq!(offset, GSO_LEN);
    let ids: Vec<String> = gso
        .iter()
        .map(|f| format!("{}B id {}", f.udp_payload_len, f.ident))
        .collect();
    format!(
        "{place}: singles id 0 + DF; GSO run as {} frame(s): [{}]",
        gso.len(),
        ids.join(", ")
    )
}

/// What IPv4 identification Linux puts on unconnected DF datagrams and on
/// UDP GSO segments — loopback, veth, and veth forced to segment in
/// software. The ICRC covers this field, so the engine's ICRC must match.
#[test]
fn ipv4_identification_on_the_wire() {
    let Some(pair) = pair_or_skip("ipv4_identification_on_the_wire") else {
        return;
    };
    let mut report = Vec::new();

    // (1) Loopback inside namespace a: the sender's outgoing frames.
    let cap = Capture::open(&pair.a, "lo");
    let rx = bind_in(&pair.a, "127.0.0.1:0", SocketConfig::default());
    let tx = bind_in(&pair.a, "127.0.0.1:0", SocketConfig::default());
    let bytes = send_pattern(&tx, rx.local_addr());
    let frames = cap.collect(rx.local_addr().port(), PACKET_OUTGOING, bytes);
    report.push(check_ids(&frames, "loopback"));
    assert_eq!(
        recv_datagrams(&rx, 3 + 5).len(),
        3 + 1,
        "GRO delivers the run whole"
    );

    // (2) veth a -> b, default offloads: what arrives at b's interface.
    let cap = Capture::open(&pair.b, &pair.veth_b);
    let rx = bind_in(&pair.b, &format!("{B4}:0"), SocketConfig::default());
    let tx = bind_in(&pair.a, &format!("{A4}:0"), SocketConfig::default());
    let bytes = send_pattern(&tx, rx.local_addr());
    let frames = cap.collect(rx.local_addr().port(), PACKET_HOST, bytes);
    report.push(check_ids(&frames, "veth"));
    let got = recv_datagrams(&rx, 3 + 5);
    assert_eq!(
        got.iter().map(|r| r.meta.len).sum::<usize>(),
        bytes,
        "{got:?}"
    );

    // (3) veth with gso_max_segs 1 on a: the kernel segments in software
    // before the device, as on a NIC without UDP segmentation offload.
    match ip(&[
        "-n",
        &pair.a,
        "link",
        "set",
        &pair.veth_a,
        "gso_max_segs",
        "1",
    ]) {
        Err(e) => skip(
            "ipv4_identification_on_the_wire (software segmentation part)",
            &e,
        ),
        Ok(()) => {
            let bytes = send_pattern(&tx, rx.local_addr());
            let frames = cap.collect(rx.local_addr().port(), PACKET_HOST, bytes);
            assert_eq!(frames.len(), 3 + 5, "segmented in software: {frames:?}");
            report.push(check_ids(&frames, "veth, software GSO"));
            recv_datagrams(&rx, 3 + 5);
        }
    }
    eprintln!("IPv4 identification findings:\n  {}", report.join("\n  "));
}

/// IPv6 with `UDP_NO_CHECK6_TX` (the default config) puts UDP checksum 0
/// on the wire, and a default-config receiver accepts it.
#[test]
fn ipv6_zero_udp_checksum_on_the_wire() {
    let Some(pair) = pair_or_skip("ipv6_zero_udp_checksum_on_the_wire") else {
        return;
    };
    let cap = Capture::open(&pair.b, &pair.veth_b);
    let rx = bind_in(&pair.b, &format!("[{B6}]:0"), SocketConfig::default());
    let zero = bind_in(&pair.a, &format!("[{A6}]:0"), SocketConfig::default());
    let mut cfg = SocketConfig::default();
    cfg.ipv6_zero_checksum_tx = false;
    let summed = bind_in(&pair.a, &format!("[{A6}]:0"), cfg);
    let dst = rx.local_addr();
    assert_eq!(zero.send(&[Transmit::new(dst, &[1u8; 200])]).unwrap(), 1);
    assert_eq!(summed.send(&[Transmit::new(dst, &[2u8; 200])]).unwrap(), 1);
    let frames = cap.collect(dst.port(), PACKET_HOST, 400);
    assert_eq!(frames.len(), 2);
    assert!(!frames[0].v4 && !frames[1].v4);
    assert_eq!(frames[0].udp_checksum, 0, "UDP_NO_CHECK6_TX: {frames:?}");
    // (The other carries a checksum, possibly still partial on veth.)
    assert_ne!(frames[1].udp_checksum, 0, "{frames:?}");
    let got = recv_datagrams(&rx, 2);
    assert_eq!(got[0].data, vec![1u8; 200]);
    assert_eq!(got[1].data, vec![2u8; 200]);
    let src: IpAddr = A6.parse().unwrap();
    assert!(got.iter().all(|r| r.meta.addr.ip() == src));
}

/// Destinations behind `unreachable` and `prohibit` routes fail locally
/// (EHOSTUNREACH, EACCES); those datagrams are counted and dropped, and the
/// rest of the batch is delivered.
#[test]
fn unreachable_routes_do_not_fail_the_batch() {
    let Some(pair) = pair_or_skip("unreachable_routes_do_not_fail_the_batch") else {
        return;
    };
    ip(&[
        "-n",
        &pair.a,
        "route",
        "add",
        "unreachable",
        "198.51.100.0/24",
    ])
    .unwrap();
    ip(&["-n", &pair.a, "route", "add", "prohibit", "203.0.113.0/24"]).unwrap();
    let rx = bind_in(&pair.b, &format!("{B4}:0"), SocketConfig::default());
    let tx = bind_in(&pair.a, &format!("{A4}:0"), SocketConfig::default());
    let dst = rx.local_addr();
    let unreach: SocketAddr = "198.51.100.7:4791".parse().unwrap();
    let prohib: SocketAddr = "203.0.113.7:4791".parse().unwrap();
    let run = vec![9u8; 3000];
    let mut gso_unreach = Transmit::new(unreach, &run);
    gso_unreach.segment_size = Some(1000);
    let batch = [
        Transmit::new(dst, b"one"),
        Transmit::new(unreach, b"x"),
        Transmit::new(dst, b"two"),
        Transmit::new(prohib, b"y"),
        gso_unreach,
        Transmit::new(dst, b"three"),
    ];
    assert_eq!(tx.send(&batch).unwrap(), batch.len());
    let got: Vec<Vec<u8>> = recv_datagrams(&rx, 3).into_iter().map(|r| r.data).collect();
    assert_eq!(
        got,
        vec![b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]
    );
    let s = tx.stats();
    assert_eq!(s.send_errors, 1 + 1 + 3, "{s:?}");
    assert_eq!(s.datagrams_sent, 3);
    assert!(!s.gso_disabled, "a routing error must not switch GSO off");
}

/// A GSO run whose segments exceed the MTU is refused (EINVAL) like a
/// GSO-less device would be; the retry as single datagrams fails too
/// (EMSGSIZE), which shows the run, not GSO, was at fault: the datagrams are
/// counted and dropped and GSO stays on for the next, valid run.
#[test]
fn oversized_gso_segments_do_not_switch_gso_off() {
    let Some(pair) = pair_or_skip("oversized_gso_segments_do_not_switch_gso_off") else {
        return;
    };
    ip(&["-n", &pair.a, "link", "set", "lo", "mtu", "1500"]).unwrap();
    let mut no_gro = SocketConfig::default();
    no_gro.gro = false;
    let rx = bind_in(&pair.a, "127.0.0.1:0", no_gro);
    let tx = bind_in(&pair.a, "127.0.0.1:0", SocketConfig::default());
    let dst = rx.local_addr();
    let big = vec![1u8; 3 * 2000];
    let mut bad = Transmit::new(dst, &big);
    bad.segment_size = Some(2000);
    let good_run = vec![2u8; 3 * 1000];
    let mut good = Transmit::new(dst, &good_run);
    good.segment_size = Some(1000);
    assert_eq!(tx.send(&[bad, good]).unwrap(), 2);
    let s = tx.stats();
    assert!(!s.gso_disabled, "{s:?}");
    assert_eq!(tx.max_gso_segments(), softrdma_io::MAX_GSO_SEGMENTS);
    assert_eq!((s.send_errors, s.datagrams_sent), (3, 3), "{s:?}");
    assert_eq!(s.last_send_errno, libc::EMSGSIZE);
    let got = recv_datagrams(&rx, 3);
    assert!(got.iter().all(|r| r.data == vec![2u8; 1000]));
}
