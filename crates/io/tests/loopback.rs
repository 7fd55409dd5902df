//! Real sockets on 127.0.0.0/8 and ::1.

mod common;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;

use common::*;
use softrdma_io::{
    max_gso_segments_for, GatherTransmit, IoPiece, SocketConfig, Transmit, UdpSocket,
    MAX_GSO_SEGMENTS,
};

fn no_gro() -> SocketConfig {
    let mut c = SocketConfig::default();
    c.gro = false;
    c
}

/// Sends `count` datagrams of varying sizes in batches and checks each one
/// arrives exactly once, byte for byte, with the right addresses.
fn batch_round_trip(tx_addr: &str, rx_addr: &str, count: u32) {
    let tx = bind(tx_addr);
    let rx = bind(rx_addr);
    let dst = rx.local_addr();
    let sizes = |seq: u32| 1 + (seq as usize * 397) % 4176;
    let payloads: Vec<Vec<u8>> = (0..count).map(|s| payload(s, sizes(s).max(4))).collect();

    let mut received: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    // Send in slices of 100 and drain in between so the receive queue
    // never overflows.
    for chunk in payloads.chunks(100) {
        let txs: Vec<Transmit<'_>> = chunk.iter().map(|p| Transmit::new(dst, p)).collect();
        let mut sent = 0;
        while sent < txs.len() {
            sent += tx.send(&txs[sent..]).unwrap();
        }
        for r in recv_datagrams(&rx, chunk.len()) {
            assert_eq!(r.meta.addr, tx.local_addr());
            assert_eq!(r.meta.dst_ip, Some(dst.ip()));
            for d in r.datagrams() {
                let seq = u32::from_be_bytes(d[..4].try_into().unwrap());
                assert!(received.insert(seq, d).is_none(), "duplicate {seq}");
            }
        }
    }
    assert_eq!(received.len(), count as usize);
    for (seq, d) in received {
        assert_eq!(d, payloads[seq as usize], "datagram {seq} differs");
    }
    let s = tx.stats();
    assert_eq!(s.datagrams_sent, u64::from(count));
    assert_eq!(s.send_errors, 0);
}

#[test]
fn batch_round_trip_ipv4() {
    batch_round_trip("127.0.0.2:0", "127.0.0.3:0", 1000);
}

#[test]
fn batch_round_trip_ipv6() {
    batch_round_trip("[::1]:0", "[::1]:0", 1000);
}

/// One GSO send of four full segments and a short fifth, with TOS and TTL,
/// over IPv4 and IPv6 (with real checksums, which GSO needs), received once
/// with GRO (one buffer, stride = segment) and once without (five
/// datagrams); every datagram carries the TOS and TTL.
#[test]
fn gso_send_with_short_last_segment_gro_and_plain_receive() {
    let mut v6_summed = SocketConfig::default();
    v6_summed.ipv6_zero_checksum_tx = false;
    for (tx_addr, rx_addr) in [("127.0.0.4:0", "127.0.0.5:0"), ("[::1]:0", "[::1]:0")] {
        let tx = bind_with(tx_addr, &v6_summed);
        assert!(
            tx.max_gso_segments() > 1,
            "this kernel has UDP GSO (4.18+); detection failed"
        );
        let seg = 1200;
        let data = payload(7, 4 * seg + 200);
        for gro in [true, false] {
            let rx = if gro {
                bind(rx_addr)
            } else {
                bind_with(rx_addr, &no_gro())
            };
            assert_eq!(rx.gro_enabled(), gro);
            let mut t = Transmit::new(rx.local_addr(), &data);
            t.segment_size = Some(seg);
            t.tos = 0x02;
            t.ttl = Some(33);
            assert_eq!(tx.send(&[t]).unwrap(), 1);
            let got = recv_datagrams(&rx, 5);
            let dgrams: Vec<Vec<u8>> = got.iter().flat_map(|r| r.datagrams()).collect();
            let want: Vec<Vec<u8>> = data.chunks(seg).map(<[u8]>::to_vec).collect();
            assert_eq!(dgrams, want, "{tx_addr} gro={gro}");
            assert!(got
                .iter()
                .all(|r| r.meta.tos == 0x02 && r.meta.ttl == Some(33)));
            if gro {
                // Loopback hands the GSO super-datagram to a GRO socket whole.
                assert_eq!(got.len(), 1, "{got:?}");
                assert_eq!(got[0].meta.stride, seg);
                assert_eq!(got[0].meta.len, data.len());
            } else {
                assert_eq!(got.len(), 5);
                assert!(got.iter().all(|r| r.meta.stride == r.meta.len));
            }
        }
        assert_eq!(tx.stats().datagrams_sent, 10);
        assert!(!tx.stats().gso_disabled);
    }
}

/// Gather transmits: header + payload + trailer slices, alone and as a GSO
/// run, arrive as the concatenation.
#[test]
fn gather_send_plain_and_gso() {
    let tx = bind("127.0.0.6:0");
    let rx = bind_with("127.0.0.7:0", &no_gro());
    let dst = rx.local_addr();
    let hdr = [[0xAAu8; 12], [0xABu8; 12]];
    let body = payload(1, 8192);
    let icrc = [[1u8, 2, 3, 4], [5, 6, 7, 8]];
    // Two packets of 12 + 4096 + 4 bytes built from slices of one buffer.
    let slices = [
        IoPiece::new(&hdr[0]),
        IoPiece::new(&body[..4096]),
        IoPiece::new(&icrc[0]),
        IoPiece::new(&hdr[1]),
        IoPiece::new(&body[4096..]),
        IoPiece::new(&icrc[1]),
    ];
    let packet = |i: usize| [&hdr[i][..], &body[i * 4096..(i + 1) * 4096], &icrc[i][..]].concat();

    let single = GatherTransmit::new(dst, &slices[..3]);
    let mut run = GatherTransmit::new(dst, &slices);
    run.segment_size = Some(12 + 4096 + 4);
    assert_eq!(tx.send_gather(&[single, run]).unwrap(), 2);
    let got: Vec<Vec<u8>> = recv_datagrams(&rx, 3)
        .iter()
        .flat_map(|r| r.datagrams())
        .collect();
    assert_eq!(got, vec![packet(0), packet(0), packet(1)]);
}

/// With GSO configured off, a transmit with `segment_size` is split in user
/// space; with more segments than one GSO send allows, it is sent in
/// several GSO chunks. Either way every datagram arrives, in order.
#[test]
fn segment_runs_are_split_when_gso_is_off_or_too_long() {
    let rx = bind_with("127.0.0.9:0", &no_gro());
    let dst = rx.local_addr();

    let mut cfg = SocketConfig::default();
    cfg.gso = false;
    let plain = bind_with("127.0.0.8:0", &cfg);
    assert_eq!(plain.max_gso_segments(), 1);
    let data = payload(3, 5 * 1000 + 1);
    let mut t = Transmit::new(dst, &data);
    t.segment_size = Some(1000);
    assert_eq!(plain.send(&[t]).unwrap(), 1);
    let got: Vec<Vec<u8>> = recv_datagrams(&rx, 6)
        .iter()
        .flat_map(|r| r.datagrams())
        .collect();
    assert_eq!(
        got,
        data.chunks(1000).map(<[u8]>::to_vec).collect::<Vec<_>>()
    );
    assert_eq!(plain.stats().datagrams_sent, 6);

    let gso = bind("127.0.0.8:0");
    let n = MAX_GSO_SEGMENTS + 6;
    assert!(max_gso_segments_for(&dst, 100) >= MAX_GSO_SEGMENTS);
    let data = payload(4, n * 100);
    let mut t = Transmit::new(dst, &data);
    t.segment_size = Some(100);
    assert_eq!(gso.send(&[t]).unwrap(), 1);
    let got: Vec<Vec<u8>> = recv_datagrams(&rx, n)
        .iter()
        .flat_map(|r| r.datagrams())
        .collect();
    assert_eq!(
        got,
        data.chunks(100).map(<[u8]>::to_vec).collect::<Vec<_>>()
    );
    assert_eq!(gso.stats().datagrams_sent, n as u64);
    assert!(!gso.stats().gso_disabled);
}

/// IPv6 with zero UDP checksums on send: the kernel refuses GSO on such a
/// socket (EINVAL). Detection keeps GSO off by default, and if the option
/// appears later anyway, the first refused GSO send switches GSO off and
/// the datagrams still go out, split.
#[test]
fn ipv6_zero_checksum_and_gso_fallback_on_refusal() {
    let rx = bind_with("[::1]:0", &no_gro());
    let dst = rx.local_addr();

    let zero = bind("[::1]:0");
    assert_eq!(
        zero.max_gso_segments(),
        1,
        "GSO must be off with zero checksums"
    );

    let mut cfg = SocketConfig::default();
    cfg.ipv6_zero_checksum_tx = false;
    let tx = bind_with("[::1]:0", &cfg);
    assert!(tx.max_gso_segments() > 1);
    // Turn on zero checksums behind the socket's back.
    let one: libc::c_int = 1;
    // SAFETY: setsockopt on a live fd with a live c_int and its size.
    let r = unsafe {
        libc::setsockopt(
            tx.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_NO_CHECK6_TX,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0);
    let data = payload(5, 3 * 700 + 50);
    let mut t = Transmit::new(dst, &data);
    t.segment_size = Some(700);
    let before = Transmit::new(dst, b"first");
    assert_eq!(tx.send(&[before, t, before]).unwrap(), 3);
    let s = tx.stats();
    assert!(
        s.gso_disabled,
        "the kernel accepted GSO with UDP_NO_CHECK6_TX"
    );
    assert_eq!(tx.max_gso_segments(), 1);
    assert_eq!(s.send_errors, 0);
    assert_eq!(s.datagrams_sent, 6);
    let got: Vec<Vec<u8>> = recv_datagrams(&rx, 6)
        .iter()
        .flat_map(|r| r.datagrams())
        .collect();
    let mut want = vec![b"first".to_vec()];
    want.extend(data.chunks(700).map(<[u8]>::to_vec));
    want.push(b"first".to_vec());
    assert_eq!(got, want);
}

/// TOS / traffic class and TTL / hop limit set per datagram are reported by
/// the receiver, along with the destination address; defaults are 0 and 64.
#[test]
fn ancillary_data_is_reported() {
    for (tx_addr, rx_addr) in [("127.0.0.10:0", "127.0.0.11:0"), ("[::1]:0", "[::1]:0")] {
        let tx = bind(tx_addr);
        let rx = bind(rx_addr);
        let dst = rx.local_addr();
        let mut marked = Transmit::new(dst, b"marked");
        marked.tos = 0x62; // DSCP 24, ECN ECT(0)
        marked.ttl = Some(7);
        let plain = Transmit::new(dst, b"plain");
        assert_eq!(tx.send(&[marked, plain]).unwrap(), 2);
        let got = recv_datagrams(&rx, 2);
        assert_eq!(got[0].data, b"marked");
        assert_eq!(got[0].meta.tos, 0x62);
        assert_eq!(got[0].meta.ttl, Some(7));
        assert_eq!(got[0].meta.dst_ip, Some(dst.ip()));
        assert_eq!(got[0].meta.addr, tx.local_addr());
        assert_eq!(got[1].data, b"plain");
        assert_eq!(got[1].meta.tos, 0);
        assert_eq!(got[1].meta.ttl, Some(64));
        assert_eq!(got[1].meta.dst_ip, Some(dst.ip()));
    }
}

/// A socket bound to the wildcard address sends from the source address
/// asked for, and reports which local address a datagram was sent to.
#[test]
fn source_address_selection_and_destination_report() {
    let rx = bind("0.0.0.0:0");
    let port = rx.local_addr().port();
    let tx = bind("0.0.0.0:0");
    for (src, dst) in [("127.0.0.21", "127.0.0.31"), ("127.0.0.22", "127.0.0.32")] {
        let src: IpAddr = src.parse().unwrap();
        let dst: IpAddr = dst.parse().unwrap();
        let mut t = Transmit::new(SocketAddr::new(dst, port), b"x");
        t.src_ip = Some(src);
        assert_eq!(tx.send(&[t]).unwrap(), 1);
        let got = recv_datagrams(&rx, 1);
        assert_eq!(got[0].meta.addr.ip(), src);
        assert_eq!(got[0].meta.dst_ip, Some(dst));
    }
}

/// Datagrams that fail (no permission to broadcast, port 0, wrong address
/// family, too big) are counted and dropped; the rest of the batch goes out.
#[test]
fn failing_destinations_do_not_fail_the_batch() {
    let tx = bind("127.0.0.12:0");
    let rx = bind("127.0.0.13:0");
    let dst = rx.local_addr();
    let huge = vec![0u8; 70_000];
    let bad = [
        Transmit::new("255.255.255.255:4791".parse().unwrap(), b"bcast"), // EACCES
        Transmit::new("127.0.0.13:0".parse().unwrap(), b"port0"),         // EINVAL
        Transmit::new("[::1]:4791".parse().unwrap(), b"v6"),              // EAFNOSUPPORT
        Transmit::new(dst, &huge),                                        // EMSGSIZE
    ];
    let oks: Vec<Vec<u8>> = (0..5).map(|i| vec![i; 10]).collect();
    let mut batch = Vec::new();
    for i in 0..4 {
        batch.push(Transmit::new(dst, &oks[i]));
        batch.push(bad[i]);
    }
    batch.push(Transmit::new(dst, &oks[4]));
    assert_eq!(tx.send(&batch).unwrap(), batch.len());
    let got: Vec<Vec<u8>> = recv_datagrams(&rx, 5).into_iter().map(|r| r.data).collect();
    assert_eq!(got, oks);
    let s = tx.stats();
    assert_eq!(s.send_errors, 4);
    assert_eq!(s.datagrams_sent, 5);
    assert_eq!(s.last_send_errno, libc::EMSGSIZE);
    assert!(!s.gso_disabled);
}

/// A datagram bigger than its buffer is cut short and counted.
#[test]
fn truncation_is_counted() {
    let tx = bind("127.0.0.14:0");
    let rx = bind_with("127.0.0.15:0", &no_gro());
    let data = payload(9, 3000);
    assert_eq!(
        tx.send(&[Transmit::new(rx.local_addr(), &data)]).unwrap(),
        1
    );
    let mut poller = softrdma_io::Poller::new(&rx).unwrap();
    assert!(poller.wait(Some(PATIENCE)).unwrap().readable);
    let mut small = [0u8; 1000];
    let mut meta = [softrdma_io::RecvMeta::default(); 1];
    let n = rx
        .recv(&mut [std::io::IoSliceMut::new(&mut small)], &mut meta)
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(meta[0].len, 1000);
    assert_eq!(&small[..], &data[..1000]);
    assert_eq!(rx.stats().recv_truncated, 1);
}

/// Overflowing a small receive queue shows up in the kernel's drop counter.
#[test]
fn receive_queue_drops_are_reported() {
    let tx = bind("127.0.0.16:0");
    let mut cfg = no_gro();
    cfg.recv_buffer = 4096; // the kernel's minimum is about 2 KiB
    let rx = bind_with("127.0.0.17:0", &cfg);
    let data = vec![0u8; 4000];
    let txs = vec![Transmit::new(rx.local_addr(), &data); 200];
    let mut sent = 0;
    while sent < txs.len() {
        sent += tx.send(&txs[sent..]).unwrap();
    }
    let got = recv_queued(&rx);
    assert!(!got.is_empty() && got.len() < 200, "{} queued", got.len());
    // A datagram carries the drop count as of its own queueing: send one
    // more after the overflow to learn the total.
    assert_eq!(tx.send(&txs[..1]).unwrap(), 1);
    assert_eq!(recv_datagrams(&rx, 1).len(), 1);
    assert_eq!(u64::from(rx.stats().recv_dropped), 200 - got.len() as u64);
}

#[test]
fn bind_reports_capabilities_and_buffers() {
    let s = bind("127.0.0.1:0");
    assert_ne!(s.local_addr().port(), 0);
    let (snd, rcv) = s.buffer_sizes().unwrap();
    // Root gets the requested 8 MiB (doubled by the kernel) via *BUFFORCE;
    // others get what net.core.[wr]mem_max allows.
    if is_root() {
        assert_eq!((snd, rcv), (16 << 20, 16 << 20));
    } else {
        assert!(snd > 0 && rcv > 0);
    }
    assert!(s.gro_enabled());
    assert_eq!(s.max_gso_segments(), MAX_GSO_SEGMENTS);
    let dbg = format!("{s:?}");
    assert!(dbg.contains("max_gso_segments: 64"), "{dbg}");
    let v6 = bind("[::1]:0");
    assert!(v6.local_addr().is_ipv6());
    let taken = UdpSocket::bind(s.local_addr()).unwrap_err();
    assert_eq!(taken.raw_os_error(), Some(libc::EADDRINUSE));
}

/// IPv6 datagrams with UDP checksum 0 (as Linux rxe sends them): a default
/// Linux socket drops them, ours accepts them. The zero-checksum datagrams
/// come from one of our sockets (`UDP_NO_CHECK6_TX`; `tests/netns.rs`
/// confirms the 0 on the wire). Loopback delivers in order, so "the
/// plain socket's first datagram is the checksummed one sent after" proves
/// the drop without waiting on a clock.
#[test]
fn ipv6_zero_checksum_datagrams_are_accepted() {
    let zero = bind("[::1]:0");
    let mut cfg = SocketConfig::default();
    cfg.ipv6_zero_checksum_tx = false;
    let summed = bind_with("[::1]:0", &cfg);

    let ours = bind("[::1]:0");
    let plain = std::net::UdpSocket::bind("[::1]:0").unwrap();
    plain.set_nonblocking(true).unwrap();
    for dst in [ours.local_addr(), plain.local_addr().unwrap()] {
        assert_eq!(zero.send(&[Transmit::new(dst, b"zero")]).unwrap(), 1);
        assert_eq!(summed.send(&[Transmit::new(dst, b"summed")]).unwrap(), 1);
    }
    let got: Vec<Vec<u8>> = recv_datagrams(&ours, 2)
        .into_iter()
        .map(|r| r.data)
        .collect();
    assert_eq!(got, vec![b"zero".to_vec(), b"summed".to_vec()]);

    let mut poller = softrdma_io::Poller::new(&plain).unwrap();
    assert!(poller.wait(Some(PATIENCE)).unwrap().readable);
    let mut buf = [0u8; 16];
    let (n, from) = plain.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"summed", "a default socket accepted checksum 0");
    assert_eq!(from, summed.local_addr());
    assert_eq!(
        plain.recv_from(&mut buf).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );
}

/// Ancillary data can be switched off; then nothing is reported.
#[test]
fn ancillary_data_can_be_switched_off() {
    let tx = bind("127.0.0.50:0");
    let mut cfg = SocketConfig::default();
    cfg.recv_dst_ip = false;
    cfg.recv_tos = false;
    cfg.recv_ttl = false;
    cfg.recv_drop_count = false;
    let rx = bind_with("127.0.0.51:0", &cfg);
    let mut t = Transmit::new(rx.local_addr(), b"quiet");
    t.tos = 0x62;
    t.ttl = Some(9);
    assert_eq!(tx.send(&[t]).unwrap(), 1);
    let got = recv_datagrams(&rx, 1);
    assert_eq!(got[0].data, b"quiet");
    assert_eq!(
        (got[0].meta.dst_ip, got[0].meta.tos, got[0].meta.ttl),
        (None, 0, None)
    );
    assert_eq!(got[0].meta.addr, tx.local_addr());
}

/// A dual-stack IPv6 socket carries IPv4 too: IPv4 peers appear
/// IPv4-mapped, ancillary data is reported for IPv4 datagrams, and sending
/// to a plain IPv4 address (with TOS and TTL) works.
#[test]
fn dual_stack_socket_carries_ipv4() {
    let mut cfg = SocketConfig::default();
    cfg.ipv6_only = false;
    let dual = bind_with("[::]:0", &cfg);
    let port = dual.local_addr().port();
    let v4 = bind("127.0.0.60:0");

    let mut t = Transmit::new(
        SocketAddr::new("127.0.0.61".parse().unwrap(), port),
        b"to dual",
    );
    t.tos = 0x61;
    t.ttl = Some(5);
    assert_eq!(v4.send(&[t]).unwrap(), 1);
    let got = recv_datagrams(&dual, 1);
    let mapped: SocketAddr = format!("[::ffff:127.0.0.60]:{}", v4.local_addr().port())
        .parse()
        .unwrap();
    assert_eq!(got[0].meta.addr, mapped);
    assert_eq!(got[0].meta.dst_ip, Some("127.0.0.61".parse().unwrap()));
    assert_eq!((got[0].meta.tos, got[0].meta.ttl), (0x61, Some(5)));

    let mut back = Transmit::new(v4.local_addr(), b"from dual");
    back.tos = 0x62;
    back.ttl = Some(6);
    assert_eq!(dual.send(&[back]).unwrap(), 1);
    let got = recv_datagrams(&v4, 1);
    assert_eq!(got[0].data, b"from dual");
    assert_eq!((got[0].meta.tos, got[0].meta.ttl), (0x62, Some(6)));
    assert_eq!(dual.stats().send_errors, 0);
}

#[test]
fn handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<UdpSocket>();
    send_sync::<softrdma_io::Waker>();
    send::<softrdma_io::Poller>();
}

/// SO_BUSY_POLL set through the socket and through the config sticks (no
/// privilege needed on this kernel, as root or not).
#[test]
fn busy_poll_setting() {
    let get = |s: &UdpSocket| {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt into a live c_int with its size.
        let rc = unsafe {
            libc::getsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_BUSY_POLL,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0);
        v
    };
    let s = bind("127.0.0.70:0");
    assert_eq!(get(&s), 0);
    s.set_busy_poll(std::time::Duration::from_micros(50))
        .unwrap();
    assert_eq!(get(&s), 50);
    let mut cfg = SocketConfig::default();
    cfg.busy_poll_us = Some(20);
    let c = UdpSocket::bind_with("127.0.0.70:0".parse().unwrap(), &cfg).unwrap();
    assert_eq!(get(&c), 20);
}
