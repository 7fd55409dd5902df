//! The program's memory stays the program's, through libibverbs.so.1 and
//! C programs built with AddressSanitizer (`tests/c/`):
//!
//! - `reuse.c`: a send completion hands the buffer back. 20,000 UD SENDs
//!   of 4 KiB and of 1 KiB and 20,000 UC WRITEs of 4 KiB, each buffer
//!   overwritten the moment its send completes; every message arrives with
//!   its original bytes. The engine refuses 30 % of its send calls as if
//!   the socket were full (`SOFTRDMA_REFUSE_SENDS`), so built datagrams
//!   wait in its queue — where a completion given too early shows.
//! - `dereg.c`: nothing touches a region after `ibv_dereg_mr` returns. Two
//!   network namespaces, 30 % loss each way; a peer WRITEs and READs 64 KiB
//!   while the owner deregisters and unmaps the buffer. No fault, no
//!   sanitizer report, and the peer sees success or an error completion,
//!   never other bytes. Needs root, iproute2 and nftables (CI has them).
//! - `close_race.c`: `ibv_close_device` racing the destruction of the last
//!   PD, CQ and QP from another thread, 10,000 times.
//! - `destroy_busy.c`: the SRQ, CQ and PD destroyed right after their QP,
//!   while an event thread acks the QP's last event: no EBUSY, 2,000
//!   times.
//! - `destroy_waits.c`: `ibv_destroy_cq`, `ibv_destroy_qp` and
//!   `ibv_destroy_srq` each wait, on a thread of their own, until another
//!   thread acknowledges the events handed out for the object, as
//!   rdma-core's do (a completion event, LAST_WQE_REACHED, the SRQ limit).
//!
//! `scripts/sanitize` runs the same programs over a library built with
//! AddressSanitizer too, so a use-after-free inside it is caught as well.

mod common;

use common::*;
use softrdma_testkit::sh;
use std::process::Command;
use std::time::{Duration, Instant};

fn no_sanitizer_report(o: &Output) {
    assert!(!o.out.contains("Sanitizer"), "sanitizer report:\n{}", o.out);
    assert!(!o.out.contains("runtime error"), "UBSan report:\n{}", o.out);
}

#[test]
fn c_buffers_reused_at_completion() {
    let exe = build_c("reuse");
    let _s = serial();
    for (mode, size) in [("ud", "4096"), ("ud", "1024"), ("uc", "4096")] {
        let o = run(
            &exe,
            &[mode, size, "20000"],
            &[("SOFTRDMA_REFUSE_SENDS", "0.3")],
            Duration::from_secs(180),
        );
        println!("{}", o.out.trim_end());
        no_sanitizer_report(&o);
        let want = format!("{mode} {size} B: 20000 of 20000 messages arrived, 0 with other bytes");
        assert!(o.out.contains(&want), "{mode} {size}:\n{}", o.out);
        assert_eq!(o.status, Some(0), "{}", o.out);
    }
}

#[test]
fn c_parents_destroyed_right_after_their_child_held_by_an_ack() {
    let exe = build_c("destroy_busy");
    let _s = serial();
    let o = run(&exe, &["2000"], &[], Duration::from_secs(300));
    println!("{}", o.out.trim_end());
    no_sanitizer_report(&o);
    assert!(
        o.out.contains("2000 iterations, 0 failures, 2000 events"),
        "{}",
        o.out
    );
    assert_eq!(o.status, Some(0));
}

#[test]
fn c_destroys_wait_for_the_acks_of_their_events() {
    run_c("destroy_waits", "127.63.3.1");
}

#[test]
fn c_close_device_races_the_last_destroy() {
    let exe = build_c("close_race");
    let _s = serial();
    let o = run(&exe, &["10000"], &[], Duration::from_secs(300));
    println!("{}", o.out.trim_end());
    no_sanitizer_report(&o);
    assert!(o.out.contains("10000 iterations, 0 failures"), "{}", o.out);
    assert_eq!(o.status, Some(0));
}

/// Two namespaces joined by a veth pair; each drops 30 % of the RoCE
/// packets it sends (nftables: this CI kernel has no netem).
struct Hosts {
    a: String,
    b: String,
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = sh(&["ip", "netns", "del", &self.a]);
        let _ = sh(&["ip", "netns", "del", &self.b]);
    }
}

fn lossy_hosts() -> Result<Hosts, String> {
    let id = std::process::id() % 100_000;
    let h = Hosts {
        a: format!("srdm-a{id}"),
        b: format!("srdm-b{id}"),
    };
    let (va, vb) = (format!("sda{id}"), format!("sdb{id}"));
    sh(&["ip", "netns", "add", &h.a])?;
    sh(&["ip", "netns", "add", &h.b])?;
    sh(&[
        "ip", "link", "add", &va, "netns", &h.a, "type", "veth", "peer", "name", &vb, "netns", &h.b,
    ])?;
    for (ns, dev, ip) in [(&h.a, &va, "10.79.0.1/24"), (&h.b, &vb, "10.79.0.2/24")] {
        sh(&["ip", "-n", ns, "addr", "add", ip, "dev", dev])?;
        sh(&["ip", "-n", ns, "link", "set", dev, "up"])?;
        sh(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
        let rules = "table inet srdm_loss {\n chain out {\n  type filter hook output priority 0; policy accept;\n  \
                     udp dport 4791 numgen random mod 100 < 30 drop\n }\n}\n";
        let mut nft = Command::new("ip")
            .args(["netns", "exec", ns, "nft", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("nft: {e} (apt-get install nftables)"))?;
        use std::io::Write;
        nft.stdin
            .take()
            .expect("piped")
            .write_all(rules.as_bytes())
            .map_err(|e| e.to_string())?;
        let out = nft.wait_with_output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("nft: {}", String::from_utf8_lossy(&out.stderr)));
        }
    }
    Ok(h)
}

#[test]
fn c_dereg_and_unmap_while_the_peer_retransmits() {
    let exe = build_c("dereg");
    let hosts = lossy_hosts().unwrap_or_else(|e| {
        panic!("this test needs root, iproute2 and nftables (CI has them): {e}")
    });
    let _s = serial();
    let env = |addr| [("SOFTRDMA_ADDR", addr), ("SOFTRDMA_MTU", "1024")];
    let rounds = "24";
    let owner = start(
        "ip",
        &[
            "netns",
            "exec",
            &hosts.a,
            &exe,
            "owner",
            "10.79.0.1",
            "19100",
            rounds,
        ],
        &env("10.79.0.1"),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !output_so_far(&owner.1).contains("LISTENING") {
        assert!(Instant::now() < deadline, "the owner never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    let peer = run(
        "ip",
        &[
            "netns",
            "exec",
            &hosts.b,
            &exe,
            "peer",
            "10.79.0.1",
            "19100",
            rounds,
        ],
        &env("10.79.0.2"),
        Duration::from_secs(600),
    );
    let owner = finish(owner, Duration::from_secs(30));
    println!("{}\n{}", owner.out.trim_end(), peer.out.trim_end());
    no_sanitizer_report(&owner);
    no_sanitizer_report(&peer);
    assert!(
        owner
            .out
            .contains("owner: 24 rounds, deregistered and unmapped"),
        "owner exit {:?}:\n{}",
        owner.status,
        owner.out
    );
    assert_eq!(owner.status, Some(0), "{}", owner.out);
    assert!(peer.out.contains(" 0 wrong"), "{}", peer.out);
    assert_eq!(peer.status, Some(0), "{}", peer.out);
    // The run really raced: requests were still under way when the memory
    // went (error completions), and some completed before it went.
    let errors: u64 = field(&peer.out, "succeeded, ");
    assert!(errors > 0, "no request was cut short: {}", peer.out);
}

/// The number before `after` in `s` (e.g. "12 error completions").
fn field(s: &str, after: &str) -> u64 {
    s.split(after)
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
