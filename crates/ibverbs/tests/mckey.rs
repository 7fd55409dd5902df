//! rdmacm-utils' `mckey` (UD multicast over rdma_cm: `rdma_join_multicast`,
//! the MULTICAST_JOIN event's address handle, QPN 0xFFFFFF and Q_Key, the
//! QP attached when the event is taken, `rdma_leave_multicast`), unmodified,
//! over softrdma's librdmacm.so.1: a receiver and a sender, each its own
//! process, every pair run twice with the roles swapped —
//!
//! - on this host, two loopback addresses (127.67.5.1, 127.67.5.2), IPv4;
//! - on one host over IPv6 (Linux's `lo` has no IPv6 multicast): two
//!   addresses of one veth end in a namespace;
//! - across two namespaces joined by a veth pair, IPv4 and IPv6.
//!
//! The receiver posts 10 receives, joins, and waits until all 10 SENDs
//! arrived (mckey polls without end otherwise: the time limit then fails
//! the test); the sender starts once the receiver's device has joined the
//! IP group (its group socket is bound: /proc/PID/net/udp{,6}). mckey
//! sleeps 3 s after joining ("to give the SM a chance"): about 3 s a run
//! (both sides sleep at once; the receiver, spinning on its CQ, takes the
//! group's datagrams from its own poll).
//!
//! Needs rdmacm-utils, and for the namespaces root and iproute2 (CI has
//! them); a missing tool fails the test. Holds the interop lock.

mod common;

use common::*;
use softrdma_testkit::{ip, wait_deadline as wait};
use std::net::IpAddr;
use std::process::Command;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(40);
const COUNT: &str = "10";

/// Where a process runs: its address and (across hosts) its namespace.
#[derive(Clone)]
struct Side {
    addr: String,
    ns: Option<String>,
}

fn mckey(side: &Side, group: &str, sender: bool) -> Command {
    let mut args = vec!["-m", group, "-b", &side.addr, "-C", COUNT];
    if sender {
        args.push("-s");
    }
    let env = [("SOFTRDMA_ADDR", side.addr.as_str())];
    match &side.ns {
        None => command("mckey", &args, &env),
        Some(ns) => {
            let exe = require_tool("mckey");
            let mut a = vec!["netns", "exec", ns.as_str(), exe.to_str().unwrap()];
            a.extend_from_slice(&args);
            command("ip", &a, &env)
        }
    }
}

/// Whether process `pid` has a UDP socket bound to `group:4791` (the
/// device joined the group), in its own namespace.
fn joined(pid: u32, group: IpAddr) -> bool {
    let (file, want) = match group {
        IpAddr::V4(g) => (
            "udp",
            format!("{:08X}:12B7", u32::from_le_bytes(g.octets())),
        ),
        IpAddr::V6(g) => {
            let mut s = String::new();
            for w in g.octets().chunks(4) {
                s.push_str(&format!(
                    "{:08X}",
                    u32::from_le_bytes([w[0], w[1], w[2], w[3]])
                ));
            }
            ("udp6", format!("{s}:12B7"))
        }
    };
    std::fs::read_to_string(format!("/proc/{pid}/net/{file}")).is_ok_and(|t| {
        t.lines()
            .skip(1)
            .any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
    })
}

fn out_path(tag: &str) -> std::path::PathBuf {
    let dir = profile_dir().join("softrdma-ibverbs-out");
    let _ = std::fs::create_dir_all(&dir);
    dir.join(format!("{}-mckey-{tag}.txt", std::process::id()))
}

/// One run: `rx` receives, `tx` sends, both must end well.
fn run(rx: &Side, tx: &Side, group: &str) {
    let deadline = Instant::now() + LIMIT;
    let g: IpAddr = group.parse().unwrap();
    let (rp, tp) = (out_path("rx"), out_path("tx"));
    let spawn = |mut c: Command, p: &std::path::Path| {
        let f = std::fs::File::create(p).unwrap();
        c.stdout(f.try_clone().unwrap()).stderr(f);
        c.spawn().expect("spawn mckey")
    };
    let mut r = spawn(mckey(rx, group, false), &rp);
    while !joined(r.id(), g) {
        if Instant::now() >= deadline || r.try_wait().unwrap().is_some() {
            let _ = r.kill();
            let _ = r.wait();
            panic!(
                "the receiver never joined {group}:\n{}",
                std::fs::read_to_string(&rp).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut t = spawn(mckey(tx, group, true), &tp);
    let ts = wait(&mut t, deadline);
    let rs = wait(&mut r, deadline);
    let (ro, to) = (
        std::fs::read_to_string(&rp).unwrap_or_default(),
        std::fs::read_to_string(&tp).unwrap_or_default(),
    );
    let _ = (std::fs::remove_file(&rp), std::fs::remove_file(&tp));
    assert!(
        rs == Some(0) && ts == Some(0),
        "mckey {group}: receiver {} exit {rs:?}, sender {} exit {ts:?}\n--- receiver ---\n{ro}\n--- sender ---\n{to}",
        rx.addr,
        tx.addr
    );
    // The join's address handle names the group (as a GID).
    let gid = match g {
        IpAddr::V4(v4) => format!("::ffff:{v4}"),
        IpAddr::V6(v6) => v6.to_string(),
    };
    for o in [&ro, &to] {
        assert!(o.contains(&format!("joined dgid: {gid} mlid 0x0")), "{o}");
        assert!(o.contains("data transfers complete"), "{o}");
        assert!(o.contains("return status 0"), "{o}");
    }
}

/// Both directions between `a` and `b`.
fn both_ways(a: &Side, b: &Side, group: &str) {
    run(a, b, group);
    run(b, a, group);
}

#[test]
fn mckey_two_processes_on_loopback() {
    let _l = serial();
    let a = Side {
        addr: "127.67.5.1".into(),
        ns: None,
    };
    let b = Side {
        addr: "127.67.5.2".into(),
        ns: None,
    };
    both_ways(&a, &b, "239.67.5.1");
}

// ------------------------------------------------------ namespaces ----

struct Namespaces(Vec<String>);

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// Waits until IPv6 multicast can leave `dev` in `ns` (the kernel adds
/// the interface's `ff00::/8` route when the link watcher reports its
/// carrier: up to a second late). A readiness check, bounded.
fn v6_ready(ns: &str, dev: &str) {
    let want = format!("ff00::/8 dev {dev} ");
    for _ in 0..2000 {
        let o = Command::new("ip")
            .args(["-n", ns, "-6", "route", "show", "table", "local"])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&o.stdout).contains(&want) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("no IPv6 multicast route on {dev} in {ns}");
}

/// Two namespaces joined by a veth pair; `addrs` of each end.
fn veth(tag: &str, v6: bool, a_addrs: &[&str], b_addrs: &[&str]) -> (Namespaces, String, String) {
    let id = std::process::id() % 100_000;
    let ns = Namespaces(vec![format!("mck{tag}{id}a"), format!("mck{tag}{id}b")]);
    let (va, vb) = (format!("mk{tag}{id}a"), format!("mk{tag}{id}b"));
    for n in &ns.0 {
        ip(&["netns", "add", n]);
    }
    ip(&[
        "link", "add", &va, "netns", &ns.0[0], "type", "veth", "peer", "name", &vb, "netns",
        &ns.0[1],
    ]);
    let plen = if v6 { "64" } else { "24" };
    for (n, d, addrs) in [(&ns.0[0], &va, a_addrs), (&ns.0[1], &vb, b_addrs)] {
        for a in addrs {
            let cidr = format!("{a}/{plen}");
            let mut args = vec!["-n", n.as_str(), "addr", "add", &cidr, "dev", d];
            if v6 {
                args.push("nodad");
            }
            ip(&args);
        }
        ip(&["-n", n, "link", "set", d, "up"]);
        ip(&["-n", n, "link", "set", "lo", "up"]);
    }
    if v6 {
        v6_ready(&ns.0[0], &va);
        v6_ready(&ns.0[1], &vb);
    }
    (ns, va, vb)
}

fn across(v6: bool) {
    let _l = serial();
    let (a_addr, b_addr, group) = if v6 {
        ("fd67:5::1", "fd67:5::2", "ff0e::67:5")
    } else {
        ("10.67.5.1", "10.67.5.2", "239.67.5.2")
    };
    let tag = if v6 { "6" } else { "4" };
    let (ns, _, _) = veth(tag, v6, &[a_addr], &[b_addr]);
    let a = Side {
        addr: a_addr.into(),
        ns: Some(ns.0[0].clone()),
    };
    let b = Side {
        addr: b_addr.into(),
        ns: Some(ns.0[1].clone()),
    };
    both_ways(&a, &b, group);
}

#[test]
fn mckey_ipv4_across_namespaces() {
    across(false);
}

#[test]
fn mckey_ipv6_across_namespaces() {
    across(true);
}

#[test]
fn mckey_ipv6_two_processes_on_one_host() {
    let _l = serial();
    let (ns, _, _) = veth("h", true, &["fd67:6::1", "fd67:6::2"], &["fd67:6::9"]);
    let host = Some(ns.0[0].clone());
    let a = Side {
        addr: "fd67:6::1".into(),
        ns: host.clone(),
    };
    let b = Side {
        addr: "fd67:6::2".into(),
        ns: host,
    };
    both_ways(&a, &b, "ff0e::67:6");
}
