//! Real faults: two network namespaces joined by a veth pair with
//! `tc netem` loss 5 %, reordering, duplication and delay on both ends. A
//! client in one namespace runs RDMA WRITE, READ, SEND and atomics against a
//! server in the other and checks every byte. Everything must complete.
//!
//! Needs root and iproute2 (CI runs as root). Without them the test fails
//! with a message, unless `SOFTRDMA_SKIP_NETNS=1` says to skip.

mod common;

use common::{access, need_root, role, sh, wait_line, Namespaces};
use softrdma::cm::{self, connect_rc, Listener};
use softrdma::*;
use std::io::BufReader;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;

const LEN: usize = 16 << 20;
const ADDS: u64 = 300;

fn pattern(seed: u64, n: usize) -> Vec<u8> {
    softrdma_testkit::xorshift_bytes(seed, n)
}

fn opts() -> ConnectOptions {
    ConnectOptions {
        mtu: Mtu::M1024,
        // 67 ms transport timer (what perftest and rdma-core examples use).
        timeout: 14,
        ..Default::default()
    }
}

/// Server role (in namespace B): offers a region with a READ pattern and a
/// counter, receives SENDs, then checks what the client wrote.
#[test]
#[ignore = "a role: the test that needs it runs it in its own process (with --ignored)"]
fn netns_server_role() {
    let addr = std::env::var("SOFTRDMA_NETNS_SERVER")
        .expect("SOFTRDMA_NETNS_SERVER unset: this role runs only when its parent test starts it");
    let dev = Device::open(DeviceOptions::at(addr.parse().unwrap())).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(4096, None).unwrap();
    let mr = pd.alloc_mr(LEN, access()).unwrap();
    mr.write(LEN / 2, &pattern(2, 2 << 20));
    mr.atomic_u64(LEN - 8).store(5, Ordering::SeqCst);
    let l = Listener::bind(&format!("{addr}:18600")).unwrap();
    println!("LISTENING");
    let mut c = l
        .accept_rc(&pd, &cq, QpType::Rc, Some(&mr), &opts())
        .unwrap();
    // Receives for the client's SENDs: 64 of up to 64 KiB, at 3/4 of the region.
    for k in 0..64u64 {
        let off = 3 * LEN / 4 + (k as usize) * 65536;
        c.qp.post_recv(RecvWr {
            wr_id: k,
            sg_list: vec![mr.sge(off, 65536)],
        })
        .unwrap();
    }
    cm::barrier(&mut c.stream).unwrap();
    // The client is done: check receives and the written area.
    let wc = cq.wait(64, Duration::from_secs(120)).unwrap();
    let mut bad = 0;
    for w in &wc {
        let off = 3 * LEN / 4 + (w.wr_id as usize) * 65536;
        let want = pattern(1000 + w.wr_id, 1000 + w.wr_id as usize * 900);
        if w.status != WcStatus::Success
            || mr.to_vec(off, want.len()) != want
            || w.byte_len as usize != want.len()
        {
            bad += 1;
        }
    }
    let written = mr.to_vec(0, LEN / 2) == pattern(1, LEN / 2);
    let counter = mr.atomic_u64(LEN - 8).load(Ordering::SeqCst);
    println!(
        "SERVER recvs={} bad={bad} written={written} counter={counter} counters={:?}",
        wc.len(),
        dev.counters().nonzero()
    );
    cm::barrier(&mut c.stream).unwrap();
}

/// Client role (in namespace A).
#[test]
#[ignore = "a role: the test that needs it runs it in its own process (with --ignored)"]
fn netns_client_role() {
    let addr = std::env::var("SOFTRDMA_NETNS_CLIENT")
        .expect("SOFTRDMA_NETNS_CLIENT unset: this role runs only when its parent test starts it");
    let server = std::env::var("SOFTRDMA_NETNS_PEER").unwrap();
    let dev = Device::open(DeviceOptions::at(addr.parse().unwrap())).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(4096, None).unwrap();
    let mr = pd.alloc_mr(LEN, access()).unwrap();
    let mut c = connect_rc(
        &format!("{server}:18600"),
        &pd,
        &cq,
        QpType::Rc,
        Some(&mr),
        &opts(),
    )
    .unwrap();
    let r = c.remote;
    let t = Duration::from_secs(120);
    let check = |wc: Vec<Wc>, n: usize| {
        assert_eq!(wc.len(), n, "{wc:?}");
        assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
    };
    // WRITE the first half in chunks of 256 KiB, 8 outstanding.
    mr.write(0, &pattern(1, LEN / 2));
    let chunk = 256 << 10;
    let n = LEN / 2 / chunk;
    for k in 0..n {
        let wr = SendWr::rdma(
            k as u64,
            WrOpcode::RdmaWrite,
            mr.sge(k * chunk, chunk as u32),
            r.va + (k * chunk) as u64,
            r.rkey,
        );
        c.qp.post_send(wr).unwrap();
        if k >= 8 {
            check(cq.wait(1, t).unwrap(), 1);
        }
    }
    check(cq.wait(8.min(n), t).unwrap(), 8.min(n));
    // READ the server's pattern (2 MiB) into the second half, 4 × 512 KiB.
    for k in 0..4 {
        let mut wr = SendWr::new(100 + k as u64, WrOpcode::RdmaRead);
        let off = LEN / 2 + k * (512 << 10);
        wr.sg_list = vec![mr.sge(off, 512 << 10)];
        wr.remote_addr = r.va + off as u64;
        wr.rkey = r.rkey;
        c.qp.post_send(wr).unwrap();
    }
    check(cq.wait(4, t).unwrap(), 4);
    let read_ok = mr.to_vec(LEN / 2, 2 << 20) == pattern(2, 2 << 20);
    // SEND 64 messages of growing size.
    let mut sent = 0;
    for k in 0..64u64 {
        let data = pattern(1000 + k, 1000 + k as usize * 900);
        let off = 3 * LEN / 4 + (k as usize) * 65536;
        mr.write(off, &data);
        let mut wr = SendWr::new(200 + k, WrOpcode::Send);
        wr.sg_list = vec![mr.sge(off, data.len() as u32)];
        c.qp.post_send(wr).unwrap();
        sent += 1;
        if sent >= 16 {
            check(cq.wait(1, t).unwrap(), 1);
            sent -= 1;
        }
    }
    check(cq.wait(sent, t).unwrap(), sent);
    // FETCH_ADD 7, ADDS times, 4 outstanding; each returns a distinct value.
    let mut seen = std::collections::BTreeSet::new();
    let mut out = 0;
    for k in 0..ADDS {
        let mut wr = SendWr::new(1000 + k, WrOpcode::AtomicFetchAndAdd);
        let slot = (k % 4) as usize * 8;
        wr.sg_list = vec![mr.sge(LEN - 64 + slot, 8)];
        wr.remote_addr = r.va + (LEN - 8) as u64;
        wr.rkey = r.rkey;
        wr.compare_add = 7;
        c.qp.post_send(wr).unwrap();
        out += 1;
        if out == 4 {
            let wc = cq.wait(1, t).unwrap();
            check(wc.clone(), 1);
            let s = ((wc[0].wr_id - 1000) % 4) as usize * 8;
            seen.insert(mr.atomic_u64(LEN - 64 + s).load(Ordering::SeqCst));
            out -= 1;
        }
    }
    for wc in cq.wait(out, t).unwrap() {
        assert_eq!(wc.status, WcStatus::Success);
        let s = ((wc.wr_id - 1000) % 4) as usize * 8;
        seen.insert(mr.atomic_u64(LEN - 64 + s).load(Ordering::SeqCst));
    }
    let chain =
        seen.len() as u64 == ADDS && seen.iter().enumerate().all(|(i, v)| *v == 5 + 7 * i as u64);
    cm::barrier(&mut c.stream).unwrap();
    println!(
        "CLIENT read_ok={read_ok} chain={chain} counters={:?}",
        dev.counters().nonzero()
    );
    cm::barrier(&mut c.stream).unwrap();
}

/// The two namespaces of the test (deleted with `_del`).
struct Netns {
    a: String,
    b: String,
    _del: Namespaces,
}

/// Loss 5 %, duplication 1 %, reordering and delay on `dev`'s egress.
/// With `tc netem` when the kernel has it; otherwise (this project's CI
/// kernel is built without CONFIG_NET_SCH_NETEM) the same impairments from
/// what it does have: nftables drops 5 % and duplicates 1 % of RoCE packets
/// at random, and an HTB class limited to 200 Mbit/s delays every packet
/// whose PSN is a multiple of 8 behind the others, which reorders them.
/// (A slower lane would queue for longer than the transport timer, and a
/// go-back-N transport then retransmits into its own queue: congestion
/// collapse, which is not what this test is about.)
fn impair(ns: &str, dev: &str, peer: &str) -> std::result::Result<(), String> {
    let netem = sh(&[
        "ip",
        "netns",
        "exec",
        ns,
        "tc",
        "qdisc",
        "add",
        "dev",
        dev,
        "root",
        "netem",
        "loss",
        "5%",
        "delay",
        "1ms",
        "500us",
        "reorder",
        "10%",
        "50%",
        "duplicate",
        "1%",
    ]);
    match netem {
        Ok(()) => {
            eprintln!("impairments: tc netem on {dev}");
            return Ok(());
        }
        Err(e) if e.contains("unknown") => {}
        Err(e) => return Err(e),
    }
    eprintln!("impairments: no netem in this kernel; nftables + htb on {dev}");
    let rules = format!(
        "table inet srdma_loss {{\n chain out {{\n  type filter hook output priority 0; policy accept;\n  \
         udp dport 4791 numgen random mod 1000 < 50 drop\n }}\n}}\n\
         table ip srdma_dup {{\n chain out {{\n  type filter hook output priority 0; policy accept;\n  \
         udp dport 4791 numgen random mod 1000 < 10 dup to {peer} device \"{dev}\"\n }}\n}}\n"
    );
    let mut nft = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("nft: {e} (apt-get install nftables)"))?;
    use std::io::Write;
    nft.stdin
        .take()
        .unwrap()
        .write_all(rules.as_bytes())
        .map_err(|e| e.to_string())?;
    let out = nft.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("nft: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let tc = |args: &[&str]| {
        let mut v = vec!["ip", "netns", "exec", ns, "tc"];
        v.extend_from_slice(args);
        sh(&v)
    };
    tc(&[
        "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10", "r2q", "100000",
    ])?;
    tc(&[
        "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", "10gbit",
    ])?;
    tc(&[
        "class", "add", "dev", dev, "parent", "1:", "classid", "1:20", "htb", "rate", "200mbit",
        "burst", "2k",
    ])?;
    // u32 offset 39 from the IPv4 header: 20 IP + 8 UDP + 11 = the PSN's low byte.
    tc(&[
        "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match",
        "ip", "protocol", "17", "0xff", "match", "u8", "0x00", "0x07", "at", "39", "flowid",
        "1:20",
    ])
}

fn setup() -> std::result::Result<Netns, String> {
    let id = std::process::id() % 100_000;
    let (a, b) = (format!("srdma-a{id}"), format!("srdma-b{id}"));
    let n = Netns {
        _del: Namespaces(vec![a.clone(), b.clone()]),
        a,
        b,
    };
    let (va, vb) = (format!("sra{id}"), format!("srb{id}"));
    sh(&["ip", "netns", "add", &n.a])?;
    sh(&["ip", "netns", "add", &n.b])?;
    sh(&[
        "ip", "link", "add", &va, "netns", &n.a, "type", "veth", "peer", "name", &vb, "netns", &n.b,
    ])?;
    for (ns, dev, ip, peer) in [
        (&n.a, &va, "10.77.0.1/24", "10.77.0.2"),
        (&n.b, &vb, "10.77.0.2/24", "10.77.0.1"),
    ] {
        sh(&["ip", "-n", ns, "addr", "add", ip, "dev", dev])?;
        sh(&["ip", "-n", ns, "link", "set", dev, "up"])?;
        sh(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
        impair(ns, dev, peer)?;
    }
    Ok(n)
}

#[test]
fn rdma_over_a_lossy_reordering_duplicating_link() {
    if !need_root() {
        return;
    }
    let ns = setup().unwrap_or_else(|e| panic!("namespace setup failed: {e}"));
    let mut server = role(
        &ns.b,
        "netns_server_role",
        &[("SOFTRDMA_NETNS_SERVER", "10.77.0.2".into())],
    );
    let mut sout = BufReader::new(server.stdout.take().unwrap());
    wait_line(&mut sout, "LISTENING");
    let mut client = role(
        &ns.a,
        "netns_client_role",
        &[
            ("SOFTRDMA_NETNS_CLIENT", "10.77.0.1".into()),
            ("SOFTRDMA_NETNS_PEER", "10.77.0.2".into()),
        ],
    );
    let mut cout = BufReader::new(client.stdout.take().unwrap());
    let s = wait_line(&mut sout, "SERVER");
    let c = wait_line(&mut cout, "CLIENT");
    eprintln!("{s}\n{c}");
    assert!(server.wait().unwrap().success(), "server role failed");
    assert!(client.wait().unwrap().success(), "client role failed");
    assert!(
        s.starts_with("SERVER recvs=64 bad=0 written=true counter=2105 "),
        "{s}"
    );
    assert!(c.starts_with("CLIENT read_ok=true chain=true "), "{c}");
    // The link really lost packets and the transport really recovered.
    assert!(
        c.contains("retransmits") && s.contains("duplicate_requests"),
        "no recovery seen:\n{s}\n{c}"
    );
}
