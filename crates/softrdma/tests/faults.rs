//! Fault injection on real sockets (`DeviceOptions::faults`, the language
//! of `SOFTRDMA_FAULTS`): two devices of one process on loopback
//! (127.68.x.y), the injector between each device's core and its socket.
//! The transport must survive what it promises to: RC delivers every
//! message exactly once, in order, byte for byte, under 10 % loss with
//! duplication, reordering, corruption and delay; UD loses but never
//! delivers a corrupted byte. The targeted faults give the completion
//! statuses a requester must see: a READ answered with a remote access
//! error fails with `RemAccessErr`; an RNR storm is survived with
//! `rnr_retry` 7 and fails at once with 0; ACKs lost are recovered by
//! retransmission. Every fault is counted, and captures show them.

mod common;

use common::access;
use softrdma::config::FaultSpec;
use softrdma::*;
use softrdma_pcap::CaptureReader;
use softrdma_wire::ip::RoceDatagram;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

const T: Duration = Duration::from_secs(60);

fn pattern(seed: u64, n: usize) -> Vec<u8> {
    softrdma_testkit::xorshift_bytes(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15), n)
}

fn spec(s: &str) -> FaultSpec {
    FaultSpec::parse(s).unwrap()
}

struct Side {
    dev: Device,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
}

fn side(addr: &str, faults: Option<&str>, pcap: Option<std::path::PathBuf>, t: QpType) -> Side {
    let dev = Device::open(DeviceOptions {
        addr: Some(addr.parse().unwrap()),
        faults: Some(faults.map(spec).unwrap_or_default()),
        pcap,
        ..Default::default()
    })
    .unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(4096, None).unwrap();
    let qp = pd
        .qp_builder(t, &cq, &cq)
        .max_send_wr(1024)
        .max_recv_wr(1024)
        .build()
        .unwrap();
    let mr = pd.alloc_mr(4 << 20, access()).unwrap();
    Side {
        dev,
        pd,
        cq,
        qp,
        mr,
    }
}

/// Connects two sides' QPs in this process with `c` (client) and `s`
/// (server) options.
fn connect(c: &Side, s: &Side, co: &ConnectOptions, so: &ConnectOptions) {
    let (pc, ps) = (c.dev.random_psn(), s.dev.random_psn());
    s.qp.connect(ps, &c.qp.endpoint(pc), so).unwrap();
    c.qp.connect(pc, &s.qp.endpoint(ps), co).unwrap();
}

fn opts() -> ConnectOptions {
    ConnectOptions {
        mtu: Mtu::M1024,
        // 16.8 ms: the tail of a burst lost costs one timer, not 67 ms.
        timeout: 12,
        min_rnr_timer: 1,
        ..Default::default()
    }
}

fn all_ok(wc: &[Wc], n: usize, what: &str) {
    assert_eq!(wc.len(), n, "{what}: {wc:?}");
    for w in wc {
        assert_eq!(w.status, WcStatus::Success, "{what}: {w:?}");
    }
}

#[test]
fn rc_is_exactly_once_and_byte_exact_under_loss_duplication_reordering_corruption() {
    // Every datagram either way: 10 % lost, 5 % duplicated, 5 % held
    // back, 2 % corrupted; what the server receives also waits 50-250 µs.
    let rates = "seed=21,loss=10%,dup=5%,reorder=5%,corrupt=2%";
    let c = side("127.68.1.1", Some(rates), None, QpType::Rc);
    let server_rules = format!("{rates};on=recv,delay=50us,jitter=200us");
    let s = side("127.68.1.2", Some(&server_rules), None, QpType::Rc);
    connect(&c, &s, &opts(), &opts());

    // SENDs with immediates: each exactly once, in order, byte exact.
    const SENDS: u64 = 120;
    for i in 0..SENDS {
        s.qp.post_recv(RecvWr {
            wr_id: i,
            sg_list: vec![s.mr.sge((i as usize) * 16384, 16384)],
        })
        .unwrap();
    }
    let len = |i: u64| 1 + (i as usize * 997) % 12000;
    for i in 0..SENDS {
        let off = (i as usize) * 16384;
        c.mr.write(off, &pattern(i, len(i)));
        let mut wr = SendWr::new(i, WrOpcode::SendWithImm);
        wr.sg_list = vec![c.mr.sge(off, len(i) as u32)];
        wr.imm_data = i as u32;
        c.qp.post_send(wr).unwrap();
    }
    let wc = c.cq.wait(SENDS as usize, T).unwrap();
    all_ok(&wc, SENDS as usize, "sends");
    assert!(wc.iter().map(|w| w.wr_id).eq(0..SENDS), "order: {wc:?}");
    let r = s.cq.wait(SENDS as usize, T).unwrap();
    all_ok(&r, SENDS as usize, "receives");
    for (k, w) in r.iter().enumerate() {
        let i = k as u64;
        assert_eq!(
            (w.wr_id, w.imm_or_inv, w.byte_len as usize),
            (i, i as u32, len(i))
        );
        assert_eq!(
            s.mr.to_vec((i as usize) * 16384, len(i)),
            pattern(i, len(i)),
            "send {i}"
        );
    }
    // Nothing more arrives: no message was delivered twice.
    std::thread::sleep(Duration::from_millis(50));
    assert!(s.cq.wait(1, Duration::from_millis(1)).unwrap().is_empty());

    // WRITEs of 32 KiB to their own places, READs of 16 KiB back.
    let (base, wlen) = (2 << 20, 32768usize);
    for i in 0..24u64 {
        let off = base + i as usize * wlen;
        c.mr.write(off, &pattern(1000 + i, wlen));
        let wr = SendWr::rdma(
            i,
            WrOpcode::RdmaWrite,
            c.mr.sge(off, wlen as u32),
            s.mr.addr() + off as u64,
            s.mr.rkey(),
        );
        c.qp.post_send(wr).unwrap();
    }
    all_ok(&c.cq.wait(24, T).unwrap(), 24, "writes");
    for i in 0..24u64 {
        let off = base + i as usize * wlen;
        assert_eq!(s.mr.to_vec(off, wlen), pattern(1000 + i, wlen), "write {i}");
    }
    let rbase = 3 << 20;
    s.mr.write(rbase, &pattern(77, 24 * 16384));
    for i in 0..24u64 {
        let off = rbase + i as usize * 16384;
        let wr = SendWr::rdma(
            i,
            WrOpcode::RdmaRead,
            c.mr.sge(off, 16384),
            s.mr.addr() + off as u64,
            s.mr.rkey(),
        );
        c.qp.post_send(wr).unwrap();
    }
    all_ok(&c.cq.wait(24, T).unwrap(), 24, "reads");
    assert_eq!(c.mr.to_vec(rbase, 24 * 16384), pattern(77, 24 * 16384));

    // FETCH_ADDs: each executed once, retransmitted or not — the values
    // fetched are 0..n, each once, and the counter ends at n.
    const ADDS: u64 = 150;
    let counter = (4 << 20) - 8;
    s.mr.atomic_u64(counter).store(0, Ordering::SeqCst);
    for i in 0..ADDS {
        let mut wr = SendWr::rdma(
            i,
            WrOpcode::AtomicFetchAndAdd,
            c.mr.sge((1 << 20) + (i as usize) * 8, 8),
            s.mr.addr() + counter as u64,
            s.mr.rkey(),
        );
        wr.compare_add = 1;
        c.qp.post_send(wr).unwrap();
    }
    all_ok(&c.cq.wait(ADDS as usize, T).unwrap(), ADDS as usize, "adds");
    assert_eq!(s.mr.atomic_u64(counter).load(Ordering::SeqCst), ADDS);
    let mut got: Vec<u64> = (0..ADDS)
        .map(|i| {
            u64::from_le_bytes(
                c.mr.to_vec((1 << 20) + (i as usize) * 8, 8)
                    .try_into()
                    .unwrap(),
            )
        })
        .collect();
    got.sort_unstable();
    assert!(got.iter().copied().eq(0..ADDS), "{got:?}");

    // Every kind of fault happened, and the transport saw it.
    let (fc, fs) = (c.dev.fault_counters(), s.dev.fault_counters());
    let (cc, sc) = (c.dev.counters(), s.dev.counters());
    println!(
        "client faults {:?}\nserver faults {:?}",
        fc.nonzero(),
        fs.nonzero()
    );
    println!("client {:?}\nserver {:?}", cc.nonzero(), sc.nonzero());
    for (name, n) in [
        ("client lost", fc.tx_lost),
        ("client duplicated", fc.tx_duplicated),
        ("client reordered", fc.tx_reordered),
        ("client corrupted", fc.tx_corrupted),
        ("server lost", fs.tx_lost),
        ("server delayed on receive", fs.rx_delayed),
        ("client retransmissions", cc.retransmits),
        ("server duplicates", sc.duplicate_requests),
        ("server ICRC errors", sc.icrc_errors),
    ] {
        assert!(n > 0, "{name}: none");
    }
    assert_eq!(
        fs.rx_delayed,
        fs.total()
            - fs.tx_lost
            - fs.tx_duplicated
            - fs.tx_reordered
            - fs.tx_corrupted
            - fs.rx_reordered
    );
}

/// The records of a capture: (raw IP datagram, ICRC valid).
fn records(path: &std::path::Path) -> Vec<(Vec<u8>, bool)> {
    let b = std::fs::read(path).unwrap();
    let mut r = CaptureReader::from_bytes(&b).unwrap();
    let mut out = Vec::new();
    while let Some(f) = r.next_frame().unwrap() {
        let d = f.data.to_vec();
        let ok = RoceDatagram::new_checked(&d[..]).is_ok_and(|g| g.icrc_ok());
        out.push((d, ok));
    }
    out
}

fn src_of(d: &[u8]) -> IpAddr {
    IpAddr::from(<[u8; 4]>::try_from(&d[12..16]).unwrap())
}

#[test]
fn ud_loses_but_never_corrupts_and_captures_show_the_faults() {
    let dir = std::env::temp_dir().join(format!("softrdma-faults-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (pc, ps) = (dir.join("ud-client.pcap"), dir.join("ud-server.pcap"));
    let c = side(
        "127.68.2.1",
        Some("seed=5,loss=10%,dup=10%,corrupt=20%,reorder=10%"),
        Some(pc.clone()),
        QpType::Ud,
    );
    let s = side("127.68.2.2", None, Some(ps.clone()), QpType::Ud);
    connect(&c, &s, &opts(), &opts());
    const N: u64 = 600;
    const LEN: usize = 1000;
    for i in 0..1000u64 {
        s.qp.post_recv(RecvWr {
            wr_id: i,
            sg_list: vec![s.mr.sge(i as usize * 2048, 2048)],
        })
        .unwrap();
    }
    let ah = c.pd.create_ah_for_gid(s.dev.gid()).unwrap();
    for i in 0..N {
        let off = i as usize * 2048;
        let mut msg = pattern(i, LEN);
        msg[..8].copy_from_slice(&i.to_le_bytes());
        c.mr.write(off, &msg);
        let mut wr = SendWr::new(i, WrOpcode::Send);
        wr.sg_list = vec![c.mr.sge(off, LEN as u32)];
        wr.ud = Some(UdDest {
            ah: ah.id(),
            remote_qpn: s.qp.qpn(),
            remote_qkey: QKey(0x1111_1111),
        });
        c.qp.post_send(wr).unwrap();
        if i % 64 == 63 {
            // Keep the send queue short and give the receiver time.
            all_ok(&c.cq.wait(64, T).unwrap(), 64, "ud sends");
        }
    }
    all_ok(
        &c.cq.wait((N % 64) as usize, T).unwrap(),
        (N % 64) as usize,
        "ud sends",
    );
    std::thread::sleep(Duration::from_millis(300));
    let r = s.cq.wait(1000, Duration::from_millis(200)).unwrap();
    let f = c.dev.fault_counters();
    let sc = s.dev.counters();
    println!(
        "client faults {:?}; server {:?}; {} received",
        f.nonzero(),
        sc.nonzero(),
        r.len()
    );
    // Lost ones are lost; duplicates arrive twice (UD has no duplicate
    // detection); corrupted ones never arrive: the ICRC drops them.
    assert!(f.tx_lost > 0 && f.tx_corrupted > 0 && f.tx_duplicated > 0);
    assert!((r.len() as u64) < N + f.tx_duplicated);
    assert!(sc.icrc_errors > 0);
    for w in &r {
        assert_eq!(w.status, WcStatus::Success);
        let got = s.mr.to_vec(w.wr_id as usize * 2048 + 40, LEN);
        let i = u64::from_le_bytes(got[..8].try_into().unwrap());
        assert!(i < N, "a corrupted sequence number {i}");
        let mut want = pattern(i, LEN);
        want[..8].copy_from_slice(&i.to_le_bytes());
        assert_eq!(got, want, "message {i} corrupted");
    }
    let (client_ip, server_ip) = (c.dev.local_addr().ip(), s.dev.local_addr().ip());
    drop((c, s));

    // The client's capture is what went on the wire: the lost never, the
    // duplicated twice, the corrupted with a bad ICRC.
    let sent: Vec<(Vec<u8>, bool)> = records(&pc)
        .into_iter()
        .filter(|(d, _)| src_of(d) == client_ip)
        .collect();
    assert_eq!(sent.len() as u64, N - f.tx_lost + f.tx_duplicated);
    let bad = sent.iter().filter(|(_, ok)| !ok).count() as u64;
    assert!(
        bad >= f.tx_corrupted && bad <= 2 * f.tx_corrupted,
        "{bad} bad ICRCs"
    );
    // The server's capture is what its transport received: all of it
    // (no receive faults there), the corrupted ones with their bad ICRC.
    let got: Vec<(Vec<u8>, bool)> = records(&ps)
        .into_iter()
        .filter(|(d, _)| src_of(d) == client_ip)
        .collect();
    assert_eq!(got.len(), sent.len());
    assert_eq!(got.iter().filter(|(_, ok)| !ok).count() as u64, bad);
    assert!(records(&ps)
        .iter()
        .all(|(d, _)| src_of(d) != server_ip || d.len() > 28));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_read_answered_with_a_remote_access_error_fails_with_rem_access_err() {
    let dir = std::env::temp_dir().join(format!("softrdma-faults-ra-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ps = dir.join("server.pcap");
    let c = side("127.68.3.1", None, None, QpType::Rc);
    // The server answers the next READ it receives.
    let s = side(
        "127.68.3.2",
        Some("rem-access=read:1"),
        Some(ps.clone()),
        QpType::Rc,
    );
    connect(&c, &s, &opts(), &opts());
    // A WRITE first: not a READ, untouched.
    c.mr.write(0, &pattern(1, 4096));
    let wr = SendWr::rdma(
        1,
        WrOpcode::RdmaWrite,
        c.mr.sge(0, 4096),
        s.mr.addr(),
        s.mr.rkey(),
    );
    c.qp.post_send(wr).unwrap();
    all_ok(&c.cq.wait(1, T).unwrap(), 1, "write");
    let wr = SendWr::rdma(
        2,
        WrOpcode::RdmaRead,
        c.mr.sge(8192, 4096),
        s.mr.addr(),
        s.mr.rkey(),
    );
    c.qp.post_send(wr).unwrap();
    let wc = c.cq.wait(1, T).unwrap();
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (2, WcStatus::RemAccessErr));
    assert_eq!(c.dev.counters().rem_access_nak_rcvd, 1);
    let f = s.dev.fault_counters();
    assert_eq!(f.answered_rem_access, 1);
    assert_eq!(f.total(), 1);
    // The server's transport never saw the READ; its QP is as it was.
    assert_eq!(s.dev.counters().rem_access_nak_sent, 0);
    assert_eq!(s.qp.state().unwrap(), QpState::Rts);
    drop(s);
    // Its capture: the NAK as it sent it (valid ICRC, AETH 0x62), and no
    // READ request received.
    let recs = records(&ps);
    let ib = |d: &[u8]| d[28..].to_vec();
    let naks: Vec<_> = recs
        .iter()
        .filter(|(d, _)| d[28] == 0x11 && d[28 + 12] == 0x62)
        .collect();
    assert_eq!(naks.len(), 1, "{} records", recs.len());
    assert!(naks[0].1, "the NAK's ICRC");
    assert!(
        !recs.iter().any(|(d, _)| ib(d)[0] == 0x0c),
        "a READ request in the capture"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// An RNR storm of 5 answers to SENDs: `rnr_retry` 7 rides it out, 0
/// fails at the first.
#[test]
fn an_rnr_storm_is_survived_with_rnr_retry_7_and_fails_with_0() {
    for (k, rnr_retry) in [(1u8, 7u8), (2, 0)] {
        let c = side(&format!("127.68.4.{k}"), None, None, QpType::Rc);
        let s = side(&format!("127.68.5.{k}"), Some("rnr=5"), None, QpType::Rc);
        let co = ConnectOptions {
            rnr_retry,
            ..opts()
        };
        connect(&c, &s, &co, &opts());
        s.qp.post_recv(RecvWr {
            wr_id: 9,
            sg_list: vec![s.mr.sge(0, 8192)],
        })
        .unwrap();
        // Three packets (MTU 1024): the first is answered, the rest
        // swallowed until the SEND comes again.
        c.mr.write(0, &pattern(3, 3000));
        let mut wr = SendWr::new(1, WrOpcode::Send);
        wr.sg_list = vec![c.mr.sge(0, 3000)];
        c.qp.post_send(wr).unwrap();
        let wc = c.cq.wait(1, T).unwrap();
        assert_eq!(wc.len(), 1);
        let f = s.dev.fault_counters();
        let cc = c.dev.counters();
        if rnr_retry == 7 {
            assert_eq!(wc[0].status, WcStatus::Success);
            let r = s.cq.wait(1, T).unwrap();
            all_ok(&r, 1, "receive after the storm");
            assert_eq!(s.mr.to_vec(0, 3000), pattern(3, 3000));
            assert_eq!((f.answered_rnr, cc.rnr_nak_rcvd), (5, 5));
            assert_eq!(f.swallowed, 10);
        } else {
            assert_eq!(wc[0].status, WcStatus::RnrRetryExcErr);
            assert_eq!((f.answered_rnr, cc.rnr_nak_rcvd), (1, 1));
        }
        assert_eq!(s.dev.counters().rnr_nak_sent, 0);
    }
}

#[test]
fn acks_lost_are_recovered_by_retransmission() {
    let c = side("127.68.6.1", None, None, QpType::Rc);
    // The server does not send its next 3 ACKs.
    let s = side("127.68.6.2", Some("drop-acks=3"), None, QpType::Rc);
    connect(&c, &s, &opts(), &opts());
    for i in 0..5u64 {
        s.qp.post_recv(RecvWr {
            wr_id: i,
            sg_list: vec![s.mr.sge(i as usize * 4096, 4096)],
        })
        .unwrap();
    }
    for i in 0..5u64 {
        c.mr.write(i as usize * 4096, &pattern(i, 100));
        let mut wr = SendWr::new(i, WrOpcode::Send);
        wr.sg_list = vec![c.mr.sge(i as usize * 4096, 100)];
        c.qp.post_send(wr).unwrap();
        // One at a time: each waits for its ACK.
        all_ok(&c.cq.wait(1, T).unwrap(), 1, "send");
    }
    let r = s.cq.wait(5, T).unwrap();
    all_ok(&r, 5, "receives");
    for w in &r {
        assert_eq!(
            s.mr.to_vec(w.wr_id as usize * 4096, 100),
            pattern(w.wr_id, 100)
        );
    }
    assert_eq!(s.dev.fault_counters().acks_dropped, 3);
    let cc = c.dev.counters();
    assert!(
        cc.timeouts >= 1 && cc.retransmits >= 1,
        "{:?}",
        cc.nonzero()
    );
    // The retransmitted SENDs were duplicates: ACKed again, not delivered.
    assert!(s.dev.counters().duplicate_requests >= 1);
    assert!(s.cq.wait(1, Duration::from_millis(20)).unwrap().is_empty());
}

#[test]
fn the_device_says_what_it_runs_with() {
    let c = side("127.68.7.1", Some("loss=1%"), None, QpType::Rc);
    let f = c.dev.settings().faults.value.clone().unwrap();
    // The seed drawn for the device is recorded: the spec replays.
    let seed = f.seed.expect("a seed");
    assert_eq!(f.to_string(), format!("seed={seed},loss=0.01"));
    assert!(c
        .dev
        .settings()
        .describe()
        .iter()
        .any(|(k, v, src)| *k == "faults"
            && *v == f.to_string()
            && **src == config::Source::Option));
    let d = side("127.68.7.2", None, None, QpType::Rc);
    assert!(d
        .dev
        .settings()
        .describe()
        .iter()
        .any(|(k, v, _)| *k == "faults" && v == "none"));
    assert_eq!(d.dev.fault_counters(), Default::default());
}
