//! The same-host path (issue 19 item 2): two processes of this test binary
//! (roles re-run with `--ignored`), each with a device on a shared address
//! (one address for both, or one each), connected by raw verbs (QP numbers
//! and keys exchanged over TCP). With the path on (the default), the
//! datagrams move through shared-memory rings — the counters of both
//! processes say so — and WRITE, READ, atomics and SEND land, the one-sided
//! ones while the target's only thread sleeps in `read()`; with
//! `SOFTRDMA_SAME_HOST=udp` the same run goes through UDP (no path is
//! opened). A target stopped with SIGSTOP while 24 MiB of WRITEs come fills
//! its ring: refused datagrams are loss, recovered once it runs again. A
//! target killed with SIGKILL mid-stream leaves the initiator with an
//! error completion (retry exceeded) and lets go of its rings (with the
//! path off too: retry exceeded over UDP).
//! Both processes capture (`SOFTRDMA_PCAP`) what the path carries as
//! the wire would: `softrdma dump` and tshark decode both files, every
//! ICRC right. The soak's invariants hold over the path with faults
//! injected on both devices.
//!
//! Rings do not outlive their peers: a target that served short-lived
//! initiators (half of them killed, half closing normally) ends with no
//! ring mapped; a parent killed while a forked child holds copies of its
//! descriptors is seen dead all the same (pidfd), and a forked child that
//! exits does not disturb its parent's rings. The device process never
//! waits for a connection that does not speak, and an offer of a ring
//! that meets the member's full ring is not lost.
//!
//! Addresses 127.64.x.y, 127.42.x.y and 127.74.2-4.x. About 5 s.

use softrdma::cm::{connect_rc, Listener};
use softrdma::*;
use softrdma_testkit::wait_line;
use std::io::{BufReader, Read, Write};
use std::net::IpAddr;
use std::process::{Child, Command};
use std::sync::atomic::Ordering;
use std::time::Duration;

mod capture;
mod rings;
mod soak;
use soak::{soak_recv_slot, SOAK_SENDS};

const T: Duration = Duration::from_secs(30);
const LEN: usize = 1 << 20;
const COUNTER: usize = LEN - 64;
const SEND_AT: usize = LEN - 8192;
const SEND_LEN: usize = 4096;

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| panic!("{k} unset: this role runs only under its test"))
}

fn counters(dev: &Device) -> String {
    match dev.same_host_counters() {
        Some(c) => format!(
            "COUNTERS sent={} received={} refused={} paths={} out={} in={}",
            c.sent, c.received, c.refused, c.paths, c.rings_out, c.rings_in
        ),
        None => "COUNTERS none".into(),
    }
}

/// Mappings of same-host path rings in this process.
fn path_maps() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains("softrdma-path"))
        .count()
}

/// Waits (bounded) until this process maps no ring of the path and its
/// counters say so; prints both.
fn say_rings_freed(dev: &Device) {
    let deadline = std::time::Instant::now() + T;
    while std::time::Instant::now() < deadline {
        // (None: the path is off.)
        let Some(c) = dev.same_host_counters() else {
            break;
        };
        if c.rings_out == 0 && c.rings_in == 0 && path_maps() == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    say(&format!("MAPS {}", path_maps()));
    say(&counters(dev));
}

/// Waits (bounded) until this device writes into a ring: the way to its
/// peer, asked for at RTR without waiting, is known. Until then the
/// library sends through UDP, and the tests that count what the path
/// carried would count less. (Path off: at once.)
fn wait_for_ring(dev: &Device) {
    let deadline = std::time::Instant::now() + T;
    while dev.same_host_counters().is_some_and(|c| c.rings_out == 0) {
        assert!(
            std::time::Instant::now() < deadline,
            "no same-host path to the peer: {}",
            counters(dev)
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn say(s: &str) {
    println!("{s}");
    std::io::stdout().flush().unwrap();
}

fn access() -> Access {
    Access::LOCAL_WRITE
        .with(Access::REMOTE_WRITE)
        .with(Access::REMOTE_READ)
        .with(Access::REMOTE_ATOMIC)
}

#[test]
#[ignore = "a role: the test that needs it runs it in its own process (with --ignored)"]
fn target_role() {
    let ip: IpAddr = env("SH_ADDR").parse().unwrap();
    let port = env("SH_PORT");
    let dev = Device::open(DeviceOptions::at(ip)).unwrap();
    assert!(dev.host_pid().is_some(), "the device is not shared");
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64, None).unwrap();
    let mr = pd.alloc_mr(LEN, access()).unwrap();
    mr.write(LEN / 2, &pattern(7, LEN / 2 - 8192));
    mr.atomic_u64(COUNTER).store(1000, Ordering::SeqCst);
    let l = Listener::bind(&format!("{ip}:{port}")).unwrap();
    say(&format!("HOST {}", dev.host_pid().unwrap()));
    say("LISTENING");
    let mode = env("SH_MODE");
    if mode == "serve" {
        // Short-lived initiators one after another; their connections
        // (and QPs) stay: only the peers go.
        let n: usize = env("SH_N").parse().unwrap();
        let mut conns = Vec::new();
        for _ in 0..n {
            conns.push(
                l.accept_rc(&pd, &cq, QpType::Rc, Some(&mr), &ConnectOptions::default())
                    .unwrap(),
            );
            say("ACCEPTED");
        }
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        say_rings_freed(&dev);
        return;
    }
    let conn = l
        .accept_rc(&pd, &cq, QpType::Rc, Some(&mr), &ConnectOptions::default())
        .unwrap();
    if mode == "soak" {
        for k in 0..SOAK_SENDS {
            conn.qp
                .post_recv(RecvWr {
                    wr_id: k as u64,
                    sg_list: vec![mr.sge(soak_recv_slot(k), SEND_LEN as u32)],
                })
                .unwrap();
        }
        say(&format!("READY {}", conn.qp.qpn().value()));
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        // Every SEND arrived once, in order, whole.
        let wc = cq.wait(SOAK_SENDS, T).unwrap();
        let mut good = 0;
        for (k, w) in wc.iter().enumerate() {
            let len = w.byte_len as usize;
            if w.wr_id == k as u64
                && w.status == WcStatus::Success
                && mr.to_vec(soak_recv_slot(k), len) == pattern(k as u8 ^ 0x5a, len)
            {
                good += 1;
            } else {
                say(&format!("BAD RECV {k}: {w:?}"));
            }
        }
        let extra = cq.wait(1, Duration::from_millis(200)).unwrap();
        say(&format!(
            "CHECK sends={good} extra={} counter={}",
            extra.len(),
            mr.atomic_u64(COUNTER).load(Ordering::SeqCst)
        ));
        say(&counters(&dev));
        return;
    }
    conn.qp
        .post_recv(RecvWr {
            wr_id: 5,
            sg_list: vec![mr.sge(SEND_AT, SEND_LEN as u32)],
        })
        .unwrap();
    say(&format!("READY {}", conn.qp.qpn().value()));
    // Sleep in read() while the initiator works.
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    if line.trim() == "fork" {
        // A child that never uses softrdma and exits through exit(3)
        // (the atexit handlers run in it), while the rings are in use.
        // SAFETY: the child calls only async-signal-safe functions and
        // exit, as a program that forks and execs or exits would.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: plain calls in the child.
            unsafe {
                libc::usleep(50_000);
                libc::exit(0);
            }
        }
        let mut status = 0;
        // SAFETY: our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        say("FORKED");
        line.clear();
        std::io::stdin().read_line(&mut line).unwrap();
    } else if line.trim() == "fork-and-stay" {
        // A child that holds copies of every descriptor and mapping and
        // outlives us (the test kills us): never uses softrdma.
        // SAFETY: as above; the child only sleeps.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: plain calls in the child.
            unsafe {
                libc::sleep(30);
                libc::_exit(0);
            }
        }
        say(&format!("CHILD {pid}"));
        line.clear();
        std::io::stdin().read_line(&mut line).unwrap();
    }
    // (Only the "ops" run SENDs.)
    let n = usize::from(mode == "ops" || mode == "fork");
    let wc = cq.wait(n, T).unwrap();
    let recv_ok = wc.len() == 1 && wc[0].status == WcStatus::Success && wc[0].byte_len == 4096;
    let written = mr.to_vec(0, LEN / 2) == pattern(3, LEN / 2);
    let sent = mr.to_vec(SEND_AT, SEND_LEN) == pattern(9, SEND_LEN);
    let counter = mr.atomic_u64(COUNTER).load(Ordering::SeqCst);
    say(&format!(
        "CHECK written={written} counter={counter} send={}",
        recv_ok && sent
    ));
    say(&counters(&dev));
}

#[test]
#[ignore = "a role: the test that needs it runs it in its own process (with --ignored)"]
fn initiator_role() {
    let ip: IpAddr = env("SH_ADDR").parse().unwrap();
    let target = env("SH_TARGET");
    let mode = env("SH_MODE");
    let dev = Device::open(DeviceOptions::at(ip)).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(256, None).unwrap();
    let mr = pd.alloc_mr(LEN, access()).unwrap();
    let mut opts = ConnectOptions::default();
    if mode == "offer" || mode == "late" || mode == "garble" {
        // 4.096 µs × 2^17 ≈ 0.5 s, 7 retries: the target stopped for a
        // while is not given up on.
        opts.timeout = 17;
    }
    if mode == "soak" {
        // 4.096 µs × 2^12 ≈ 17 ms: lost packets are retried soon.
        opts.timeout = 12;
    }
    if mode == "kill" {
        // 4.096 µs × 2^10 ≈ 4 ms, 3 retries: a dead peer is seen soon.
        opts.timeout = 10;
        opts.retry_cnt = 3;
    }
    let conn = connect_rc(&target, &pd, &cq, QpType::Rc, None, &opts).unwrap();
    let remote = conn.remote;
    let write = |id: u64, len: usize| {
        let mut wr = SendWr::new(id, WrOpcode::RdmaWrite);
        wr.sg_list = vec![mr.sge(0, len as u32)];
        wr.remote_addr = remote.va;
        wr.rkey = remote.rkey;
        conn.qp.post_send(wr).unwrap();
    };
    let ok = |n: usize| {
        let wc = cq.wait(n, T).unwrap();
        assert_eq!(wc.len(), n, "{wc:?}");
        assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
    };
    match mode.as_str() {
        "ops" | "fork" => {
            wait_for_ring(&dev);
            mr.write(0, &pattern(3, LEN / 2));
            write(1, LEN / 2);
            ok(1);
            if mode == "fork" {
                // The rings exist both ways: the target forks now.
                say("PHASE1");
                let mut line = String::new();
                std::io::stdin().read_line(&mut line).unwrap();
                write(1, LEN / 2);
                ok(1);
            }
            let mut rd = SendWr::new(2, WrOpcode::RdmaRead);
            rd.sg_list = vec![mr.sge(LEN / 2, (LEN / 2 - 8192) as u32)];
            rd.remote_addr = remote.va + (LEN / 2) as u64;
            rd.rkey = remote.rkey;
            conn.qp.post_send(rd).unwrap();
            ok(1);
            assert_eq!(
                mr.to_vec(LEN / 2, LEN / 2 - 8192),
                pattern(7, LEN / 2 - 8192)
            );
            for k in 0..100u64 {
                let mut fa = SendWr::new(10 + k, WrOpcode::AtomicFetchAndAdd);
                fa.sg_list = vec![mr.sge(LEN - 64, 8)];
                fa.remote_addr = remote.va + COUNTER as u64;
                fa.rkey = remote.rkey;
                fa.compare_add = 3;
                conn.qp.post_send(fa).unwrap();
                ok(1);
                assert_eq!(mr.atomic_u64(LEN - 64).load(Ordering::SeqCst), 1000 + 3 * k);
            }
            let mut cas = SendWr::new(200, WrOpcode::AtomicCmpAndSwp);
            cas.sg_list = vec![mr.sge(LEN - 64, 8)];
            cas.remote_addr = remote.va + COUNTER as u64;
            cas.rkey = remote.rkey;
            cas.compare_add = 1300;
            cas.swap = 77;
            conn.qp.post_send(cas).unwrap();
            ok(1);
            mr.write(SEND_AT, &pattern(9, SEND_LEN));
            let mut s = SendWr::new(300, WrOpcode::Send);
            s.sg_list = vec![mr.sge(SEND_AT, SEND_LEN as u32)];
            conn.qp.post_send(s).unwrap();
            ok(1);
            say("DONE");
        }
        "soak" => soak::soak(&conn, &mr, &cq, remote),
        "flood" | "offer" | "late" | "garble" => {
            // 24 × 1 MiB while the target is stopped: more than its ring.
            // (The ring there first, so that they all go into it; "offer"
            // and "late" are about the question, which they leave to the
            // asker: it is usually answered by then too.)
            if mode == "flood" || mode == "garble" {
                wait_for_ring(&dev);
            }
            say("STREAMING");
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).unwrap();
            mr.write(0, &pattern(3, LEN / 2));
            for k in 0..24 {
                write(k, LEN / 2);
            }
            // (The path was asked for when the first one was posted.)
            say("POSTED");
            ok(24);
            if mode == "late" {
                // The way to the target is looked for again after 1 s.
                std::thread::sleep(Duration::from_millis(1300));
                write(100, LEN / 2);
                ok(1);
            }
            say("DONE");
        }
        "short" => {
            // One WRITE (rings both ways), then gone: closing normally,
            // or killed by the test after it says so.
            wait_for_ring(&dev);
            mr.write(0, &pattern(3, 4096));
            write(1, 64 * 1024);
            ok(1);
            // The target's way back is its asker's too: its first ACKs
            // may go through UDP. Again until one came through a ring.
            let deadline = std::time::Instant::now() + T;
            while dev.same_host_counters().is_some_and(|c| c.received == 0)
                && std::time::Instant::now() < deadline
            {
                write(1, 64 * 1024);
                ok(1);
            }
            say(&counters(&dev));
            if env("SH_END") == "kill" {
                say("KILL ME");
                let mut line = String::new();
                std::io::stdin().read_line(&mut line).unwrap();
                panic!("not killed");
            }
            drop(conn);
            return;
        }
        "kill" => {
            wait_for_ring(&dev);
            say("STREAMING");
            // WRITEs until one fails: the peer was killed.
            let mut k = 0u64;
            loop {
                write(k, 64 * 1024);
                k += 1;
                let wc = cq.wait(1, T).unwrap();
                assert_eq!(wc.len(), 1, "no completion within {T:?}");
                if wc[0].status != WcStatus::Success {
                    say(&format!("ERROR {:?} after {k}", wc[0].status));
                    break;
                }
            }
            // The dead target's rings are let go of.
            say_rings_freed(&dev);
            return;
        }
        m => panic!("mode {m}"),
    }
    say(&counters(&dev));
}

fn role(name: &str, same_host: &str, vars: &[(&str, String)]) -> Child {
    let mut c = softrdma_testkit::role_command(name);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("SOFTRDMA_") || k == "LD_PRELOAD" {
            c.env_remove(k.as_ref());
        }
    }
    c.env("SOFTRDMA_BIN", env!("CARGO_BIN_EXE_softrdma"))
        .env("SOFTRDMA_SAME_HOST", same_host);
    for (k, v) in vars {
        c.env(k, v);
    }
    if vars
        .iter()
        .any(|(k, v)| *k == "SH_MODE" && (v == "flood" || v == "garble"))
    {
        // A 1 MiB ring (about 250 packets of 4 KiB): one 512 KiB WRITE fits,
        // the 24 of them while the target is stopped do not.
        c.env("SOFTRDMA_PATH_RING", "1048576");
    }
    c.spawn().unwrap()
}

use softrdma_testkit::free_tcp_port as free_port;

/// `COUNTERS sent=… received=… refused=… paths=… out=… in=…` → the six
/// numbers.
fn parse_counters(line: &str) -> Option<[u64; 6]> {
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|kv| kv.split('=').nth(1)?.parse().ok())
        .collect::<Option<_>>()?;
    v.try_into().ok()
}

struct Pair {
    target_qpn: u32,
    /// The target's device process.
    host_pid: i32,
    target: Child,
    tout: BufReader<std::process::ChildStdout>,
    init: Child,
    iout: BufReader<std::process::ChildStdout>,
}

impl Pair {
    /// Tells the target to check its memory (it answers with a CHECK line).
    fn ask_target_to_check(&mut self) {
        self.target
            .stdin
            .take()
            .unwrap()
            .write_all(b"check\n")
            .unwrap();
    }

    /// Reads what the initiator still says and checks it exits well.
    fn initiator_ends_well(&mut self) {
        let mut rest = String::new();
        let _ = self.iout.read_to_string(&mut rest);
        assert!(self.init.wait().unwrap().success());
    }
}

fn pair(same_host: &str, mode: &str, init_ip: &str, target_ip: &str) -> Pair {
    pair_with(same_host, mode, init_ip, target_ip, &[])
}

fn pair_with(
    same_host: &str,
    mode: &str,
    init_ip: &str,
    target_ip: &str,
    extra: &[(&str, String)],
) -> Pair {
    pair_with_target(same_host, mode, init_ip, target_ip, extra, &[])
}

/// [`pair_with`], with `target_extra` for the target alone.
fn pair_with_target(
    same_host: &str,
    mode: &str,
    init_ip: &str,
    target_ip: &str,
    extra: &[(&str, String)],
    target_extra: &[(&str, String)],
) -> Pair {
    let port = free_port();
    let mut tv = vec![
        ("SH_ADDR", target_ip.to_string()),
        ("SH_PORT", port.to_string()),
        ("SH_MODE", mode.to_string()),
    ];
    tv.extend_from_slice(extra);
    tv.extend_from_slice(target_extra);
    let mut target = role("target_role", same_host, &tv);
    let mut tout = BufReader::new(target.stdout.take().unwrap());
    let host_pid = wait_line(&mut tout, "HOST")[5..].parse().unwrap();
    wait_line(&mut tout, "LISTENING");
    let mut iv = vec![
        ("SH_ADDR", init_ip.to_string()),
        ("SH_TARGET", format!("{target_ip}:{port}")),
        ("SH_MODE", mode.to_string()),
    ];
    iv.extend_from_slice(extra);
    let mut init = role("initiator_role", same_host, &iv);
    let iout = BufReader::new(init.stdout.take().unwrap());
    let ready = wait_line(&mut tout, "READY");
    let target_qpn = ready[6..].parse().unwrap();
    Pair {
        target_qpn,
        host_pid,
        target,
        tout,
        init,
        iout,
    }
}

/// Runs WRITE, READ, atomics, SEND between the two; returns the two
/// processes' counters (initiator, target).
fn ops(same_host: &str, init_ip: &str, target_ip: &str) -> (String, String) {
    ops_with(same_host, init_ip, target_ip, &[])
}

fn ops_with(
    same_host: &str,
    init_ip: &str,
    target_ip: &str,
    extra: &[(&str, String)],
) -> (String, String) {
    ops_with_target(same_host, init_ip, target_ip, extra, &[])
}

/// [`ops_with`], with `target_extra` for the target alone.
fn ops_with_target(
    same_host: &str,
    init_ip: &str,
    target_ip: &str,
    extra: &[(&str, String)],
    target_extra: &[(&str, String)],
) -> (String, String) {
    let mut p = pair_with_target(same_host, "ops", init_ip, target_ip, extra, target_extra);
    wait_line(&mut p.iout, "DONE");
    let ic = wait_line(&mut p.iout, "COUNTERS");
    p.ask_target_to_check();
    let check = wait_line(&mut p.tout, "CHECK");
    assert_eq!(check, "CHECK written=true counter=77 send=true");
    let tc = wait_line(&mut p.tout, "COUNTERS");
    assert!(p.init.wait().unwrap().success());
    assert!(p.target.wait().unwrap().success());
    (ic, tc)
}

fn assert_path_carried(ic: &str, tc: &str) {
    let i = parse_counters(ic).unwrap_or_else(|| panic!("path off? {ic}"));
    let t = parse_counters(tc).unwrap_or_else(|| panic!("path off? {tc}"));
    // 512 KiB WRITE = 128 packets, and the rest: all through the rings.
    assert!(i[0] > 200 && i[1] > 100 && i[3] == 1, "initiator {ic}");
    assert!(t[0] > 100 && t[1] > 200 && t[3] == 1, "target {tc}");
    assert_eq!(i[0], t[1], "what one sent the other received: {ic} / {tc}");
}

#[test]
fn write_read_atomics_send_over_the_path_on_one_address() {
    let (ic, tc) = ops("shm", "127.64.1.1", "127.64.1.1");
    assert_path_carried(&ic, &tc);
}

#[test]
fn write_read_atomics_send_over_the_path_between_two_addresses() {
    let (ic, tc) = ops("shm", "127.64.2.1", "127.64.2.2");
    assert_path_carried(&ic, &tc);
}

#[test]
fn the_same_over_udp_when_the_path_is_off() {
    let (ic, tc) = ops("udp", "127.64.3.1", "127.64.3.1");
    assert_eq!(ic, "COUNTERS none");
    assert_eq!(tc, "COUNTERS none");
}

fn signal(c: &Child, sig: i32) {
    softrdma_testkit::signal(c.id() as i32, sig).expect("a signal to our own child");
}

#[test]
fn a_full_ring_is_loss_and_the_transport_recovers() {
    let mut p = pair("shm", "flood", "127.64.4.1", "127.64.4.1");
    wait_line(&mut p.iout, "STREAMING");
    signal(&p.target, libc::SIGSTOP);
    p.init.stdin.take().unwrap().write_all(b"go\n").unwrap();
    std::thread::sleep(Duration::from_millis(150));
    signal(&p.target, libc::SIGCONT);
    wait_line(&mut p.iout, "DONE");
    let ic = wait_line(&mut p.iout, "COUNTERS");
    let i = parse_counters(&ic).unwrap();
    assert!(i[2] > 0, "the ring never filled: {ic}");
    p.ask_target_to_check();
    // (No SEND and no atomics in this run: only the WRITEs are checked.)
    let check = wait_line(&mut p.tout, "CHECK");
    assert!(check.starts_with("CHECK written=true"), "{check}");
    assert!(p.init.wait().unwrap().success());
    let _ = p.target.kill();
    let _ = p.target.wait();
}

#[test]
fn a_killed_target_leaves_the_initiator_with_an_error_completion() {
    let mut p = pair("shm", "kill", "127.64.5.1", "127.64.5.1");
    wait_line(&mut p.iout, "STREAMING");
    std::thread::sleep(Duration::from_millis(50));
    signal(&p.target, libc::SIGKILL);
    let _ = p.target.wait();
    let e = wait_line(&mut p.iout, "ERROR");
    assert!(e.starts_with("ERROR RetryExcErr"), "{e}");
    assert_eq!(wait_line(&mut p.iout, "MAPS"), "MAPS 0");
    let ic = wait_line(&mut p.iout, "COUNTERS");
    let c = parse_counters(&ic).unwrap();
    assert!(c[0] > 0 && c[3] == 1, "{ic}");
    assert_eq!((c[4], c[5]), (0, 0), "rings of a dead peer kept: {ic}");
    p.initiator_ends_well();
}

/// The same with the path off: the killed target's QP goes with it from
/// its device process, which drops what comes for it; the initiator's
/// WRITEs are lost on UDP until it runs out of retries.
#[test]
fn a_killed_target_leaves_the_initiator_with_an_error_completion_over_udp() {
    let mut p = pair("udp", "kill", "127.74.4.1", "127.74.4.1");
    wait_line(&mut p.iout, "STREAMING");
    std::thread::sleep(Duration::from_millis(50));
    signal(&p.target, libc::SIGKILL);
    let _ = p.target.wait();
    let e = wait_line(&mut p.iout, "ERROR");
    assert!(e.starts_with("ERROR RetryExcErr"), "{e}");
    assert_eq!(wait_line(&mut p.iout, "MAPS"), "MAPS 0");
    assert_eq!(wait_line(&mut p.iout, "COUNTERS"), "COUNTERS none");
    p.initiator_ends_well();
}

#[test]
fn a_path_answer_that_comes_too_late_does_not_keep_the_sender_on_udp() {
    // The target's device process is stopped while the initiator asks it
    // for the path: the initiator gives up waiting (its ring closed),
    // goes through UDP, and gets the path when it asks again.
    let mut p = pair("shm", "late", "127.42.6.1", "127.42.6.2");
    wait_line(&mut p.iout, "STREAMING");
    let host: i32 = p.host_pid;
    // The device process our target started (same user).
    softrdma_testkit::signal(host, libc::SIGSTOP).unwrap();
    p.init.stdin.take().unwrap().write_all(b"go\n").unwrap();
    wait_line(&mut p.iout, "POSTED");
    std::thread::sleep(Duration::from_millis(50));
    softrdma_testkit::signal(host, libc::SIGCONT).unwrap();
    wait_line(&mut p.iout, "DONE");
    let ic = wait_line(&mut p.iout, "COUNTERS");
    let i = parse_counters(&ic).unwrap();
    // The last WRITE (128 packets) went through the path.
    assert!(i[0] >= 128 && i[3] == 1 && i[4] == 1, "{ic}");
    p.ask_target_to_check();
    let check = wait_line(&mut p.tout, "CHECK");
    assert!(check.starts_with("CHECK written=true"), "{check}");
    assert!(p.init.wait().unwrap().success());
    assert!(p.target.wait().unwrap().success());
}
