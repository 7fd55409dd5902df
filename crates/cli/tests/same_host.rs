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
        // while (or its ring replaced) is not given up on.
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
        "soak" => soak(&conn, &mr, &cq, remote),
        "flood" | "offer" | "late" | "garble" => {
            // 24 × 1 MiB while the target is stopped: more than its ring.
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
            mr.write(0, &pattern(3, 4096));
            write(1, 64 * 1024);
            ok(1);
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

/// SENDs of the soak (the target posts a receive for each).
const SOAK_SENDS: usize = 64;
/// Operations of the soak besides the SENDs.
const SOAK_OPS: usize = 1500;
/// Operations of the soak in flight at once (each its own local slot).
const SOAK_WINDOW: usize = 16;
/// Bytes of each in-flight operation's local slot, and the most one moves.
const SOAK_SLOT: usize = 32 << 10;

/// Where the target receives the soak's SEND `k`: 4 KiB slots from the
/// middle of its region (the WRITE and READ zone is the first half).
fn soak_recv_slot(k: usize) -> usize {
    LEN / 2 + k * SEND_LEN
}

/// xorshift64*: the soak's operations, from `SH_SEED`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// What a soak operation must have done, checked at its completion.
enum Expect {
    Nothing,
    /// A READ: its local slot holds these bytes (the target's memory as
    /// the WRITEs posted before it left it).
    Read(usize, Vec<u8>),
    /// A FETCH_ADD: it returned this value into its local slot.
    Fetched(usize, u64),
}

/// The soak of the simulated transport (crates/sim/tests/soak.rs) over the
/// real same-host path, with both devices injecting loss, duplication,
/// reordering and corruption (`SOFTRDMA_FAULTS`): WRITEs, READs and
/// FETCH_ADDs of random sizes and places, SENDs, up to `SOAK_WINDOW` in
/// flight. Its invariants: every operation completes exactly once, in
/// posting order, successfully (no retry exhaustion at these rates); every
/// READ brings the target's memory as the WRITEs before it left it
/// (checked against a shadow), every FETCH_ADD the sum of the adds before
/// it; at the end the target's memory is the shadow, its counter the sum,
/// and it received every SEND once, in order, whole (it checks that).
fn soak(
    conn: &softrdma::cm::Connection,
    mr: &MemoryRegion,
    cq: &CompletionQueue,
    remote: softrdma::cm::ConnInfo,
) {
    let mut rng = Rng(env("SH_SEED").parse::<u64>().unwrap() | 1);
    let zone = LEN / 2;
    // The target's zone starts as this pattern: one WRITE of all of it.
    let mut shadow = pattern(0x33, zone);
    // (Local slots: SOAK_WINDOW × SOAK_SLOT from 0; the staging of the
    // first WRITE uses the same bytes before any slot is in use.)
    mr.write(0, &shadow);
    let mut first = SendWr::new(u64::MAX, WrOpcode::RdmaWrite);
    first.sg_list = vec![mr.sge(0, zone as u32)];
    first.remote_addr = remote.va;
    first.rkey = remote.rkey;
    conn.qp.post_send(first).unwrap();
    let wc = cq.wait(1, T).unwrap();
    assert!(wc.len() == 1 && wc[0].status == WcStatus::Success, "{wc:?}");
    let mut sum = 0u64;
    let mut sends = 0usize;
    let mut in_flight: std::collections::VecDeque<(u64, usize, Expect)> = Default::default();
    let mut free: Vec<usize> = (0..SOAK_WINDOW).collect();
    let (mut posted, mut completed) = (0u64, 0u64);
    let total = (SOAK_OPS + SOAK_SENDS) as u64;
    let mut counts = [0usize; 4];
    while completed < total {
        while posted < total && !free.is_empty() {
            let slot = free.pop().unwrap();
            let local = slot * SOAK_SLOT;
            let id = posted;
            // SENDs spread over the run.
            let kind = if sends < SOAK_SENDS && rng.below(SOAK_OPS / SOAK_SENDS + 1) == 0
                || (total - posted) as usize <= SOAK_SENDS - sends
            {
                3
            } else {
                rng.below(3)
            };
            counts[kind] += 1;
            let (wr, expect) = match kind {
                0 | 1 => {
                    // 0 B to 32 KiB, anywhere in the zone.
                    let len = if rng.below(2) == 0 {
                        [0, 1, 63, 4096, 4097, 12_000, SOAK_SLOT][rng.below(7)]
                    } else {
                        rng.below(SOAK_SLOT + 1)
                    };
                    let off = rng.below(zone - len + 1);
                    if kind == 0 {
                        let bytes = pattern(rng.next() as u8, len);
                        mr.write(local, &bytes);
                        shadow[off..off + len].copy_from_slice(&bytes);
                        let mut w = SendWr::new(id, WrOpcode::RdmaWrite);
                        w.sg_list = vec![mr.sge(local, len as u32)];
                        w.remote_addr = remote.va + off as u64;
                        w.rkey = remote.rkey;
                        // A READ whose response is lost is executed again
                        // by the target (IBA 9.7.5.2.1): a WRITE posted
                        // after it may not land before it completes, or
                        // the READ could bring the newer bytes.
                        w.flags = w.flags.with(SendFlags::FENCE);
                        (w, Expect::Nothing)
                    } else {
                        mr.write(local, &vec![0xee; len]);
                        let mut w = SendWr::new(id, WrOpcode::RdmaRead);
                        w.sg_list = vec![mr.sge(local, len as u32)];
                        w.remote_addr = remote.va + off as u64;
                        w.rkey = remote.rkey;
                        (w, Expect::Read(local, shadow[off..off + len].to_vec()))
                    }
                }
                2 => {
                    let add = rng.next() % 1000;
                    let mut w = SendWr::new(id, WrOpcode::AtomicFetchAndAdd);
                    w.sg_list = vec![mr.sge(local, 8)];
                    w.remote_addr = remote.va + COUNTER as u64;
                    w.rkey = remote.rkey;
                    w.compare_add = add;
                    let e = Expect::Fetched(local, 1000 + sum);
                    sum += add;
                    (w, e)
                }
                _ => {
                    let len = 1 + rng.below(SEND_LEN);
                    mr.write(local, &pattern(sends as u8 ^ 0x5a, len));
                    sends += 1;
                    let mut w = SendWr::new(id, WrOpcode::Send);
                    w.sg_list = vec![mr.sge(local, len as u32)];
                    (w, Expect::Nothing)
                }
            };
            conn.qp.post_send(wr).unwrap();
            in_flight.push_back((id, slot, expect));
            posted += 1;
        }
        let wc = cq.wait(1, T).unwrap();
        assert_eq!(
            wc.len(),
            1,
            "no completion within {T:?} ({completed} of {total} done)"
        );
        let w = &wc[0];
        let (id, slot, expect) = in_flight
            .pop_front()
            .expect("a completion for nothing posted");
        assert_eq!(w.wr_id, id, "out of order or twice: {w:?}");
        assert_eq!(w.status, WcStatus::Success, "op {id}: {w:?}");
        match expect {
            Expect::Nothing => {}
            Expect::Read(local, want) => {
                assert!(
                    mr.to_vec(local, want.len()) == want,
                    "READ {id} brought other bytes"
                );
            }
            Expect::Fetched(local, want) => {
                let got = mr.atomic_u64(local).load(Ordering::SeqCst);
                assert_eq!(got, want, "FETCH_ADD {id}");
            }
        }
        free.push(slot);
        completed += 1;
    }
    assert!(
        cq.wait(1, Duration::from_millis(200)).unwrap().is_empty(),
        "a completion too many"
    );
    // The end state: the target's zone is the shadow.
    let mut all = SendWr::new(u64::MAX - 1, WrOpcode::RdmaRead);
    all.sg_list = vec![mr.sge(0, zone as u32)];
    all.remote_addr = remote.va;
    all.rkey = remote.rkey;
    conn.qp.post_send(all).unwrap();
    let wc = cq.wait(1, T).unwrap();
    assert!(wc.len() == 1 && wc[0].status == WcStatus::Success, "{wc:?}");
    assert!(
        mr.to_vec(0, zone) == shadow,
        "the target's memory is not the shadow"
    );
    say(&format!(
        "SOAK writes={} reads={} fetch_adds={} sends={sends} counter={}",
        counts[0],
        counts[1],
        counts[2],
        1000 + sum
    ));
    say("DONE");
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

#[test]
fn captures_of_the_path_decode_as_the_wire_would() {
    let dir = std::env::temp_dir().join(format!("softrdma-samehost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("cap-{addr}.pcap");
    let (ic, tc) = ops_with(
        "shm",
        "127.64.6.1",
        "127.64.6.2",
        &[("SOFTRDMA_PCAP", pcap.display().to_string())],
    );
    assert_path_carried(&ic, &tc);
    for ip in ["127.64.6.1", "127.64.6.2"] {
        let f = dir.join(format!("cap-{ip}.pcap"));
        let o = Command::new(env!("CARGO_BIN_EXE_softrdma"))
            .arg("dump")
            .arg(&f)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        // Both directions, every kind of packet the run made, sent and
        // received, all with good ICRCs.
        for what in [
            // (WRITE ONLY per packet towards loopback peers.)
            "RC_RDMA_WRITE_",
            "RC_RDMA_READ_REQUEST",
            "RC_RDMA_READ_RESPONSE_",
            "RC_FETCH_ADD",
            "RC_COMPARE_SWAP",
            "RC_ATOMIC_ACKNOWLEDGE",
            "RC_SEND_ONLY",
            "RC_ACKNOWLEDGE",
            "127.64.6.1:4791 > 127.64.6.2:4791",
            "127.64.6.2:4791 > 127.64.6.1:4791",
            "ICRC bad 0, malformed 0",
        ] {
            assert!(
                text.contains(what),
                "{what} missing in {}:\n{text}",
                f.display()
            );
        }
        assert!(!text.contains("icrc=bad"), "{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_receiver_alone_capturing_records_the_icrc_its_sender_left_out() {
    // The initiator captures nothing, so it leaves the ICRC of its
    // zero-copy packets out of the ring (the receiver does not check it);
    // the target captures, and its capture must still hold the packets
    // the wire would carry, ICRC included (computed as they are
    // recorded).
    let dir = std::env::temp_dir().join(format!("softrdma-samehost-rx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("target.pcap");
    let (ic, tc) = ops_with_target(
        "shm",
        "127.72.6.1",
        "127.72.6.2",
        &[],
        &[("SOFTRDMA_PCAP", f.display().to_string())],
    );
    assert_path_carried(&ic, &tc);
    let o = Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .arg("dump")
        .arg(&f)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for what in [
        "RC_RDMA_WRITE_",
        "RC_SEND_ONLY",
        "RC_RDMA_READ_RESPONSE_",
        "127.72.6.1:4791 > 127.72.6.2:4791",
        "127.72.6.2:4791 > 127.72.6.1:4791",
        "ICRC bad 0, malformed 0",
    ] {
        assert!(
            text.contains(what),
            "{what} missing in {}:\n{text}",
            f.display()
        );
    }
    assert!(!text.contains("icrc=bad"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// CRC-32 (the Ethernet polynomial, reflected, initial value and final
/// XOR all ones), bit by bit: computed here without softrdma's code.
fn crc32(bytes: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in bytes {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xedb8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// The ICRC of a RoCE v2 datagram over IPv4 (`ip`: IP header through
/// ICRC), as IBA annex A17.3.3 defines it: 8 bytes of 0xff, the IP header
/// with type of service, time to live and checksum all ones, the UDP
/// header with its checksum all ones, the BTH with its byte 4 all ones,
/// the rest up to the ICRC. (No FLUSH in these runs: rxe's form of its
/// ICRC differs.)
fn annex_icrc(ip: &[u8]) -> u32 {
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let mut v = vec![0xffu8; 8];
    v.extend_from_slice(&ip[..ip.len() - 4]);
    let (h, u, b) = (8, 8 + ihl, 8 + ihl + 8);
    v[h + 1] = 0xff; // type of service
    v[h + 8] = 0xff; // time to live
    v[h + 10..h + 12].fill(0xff); // header checksum
    v[u + 6..u + 8].fill(0xff); // UDP checksum
    v[b + 4] = 0xff; // BTH: FECN, BECN, reserved
    crc32(&v)
}

/// The frames of a pcap file of link type RAW (IP first), in order.
fn pcap_frames(file: &std::path::Path) -> Vec<Vec<u8>> {
    let d = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    assert!(d.len() >= 24, "{}: no pcap header", file.display());
    let magic = u32::from_le_bytes(d[0..4].try_into().unwrap());
    let le = match magic {
        0xa1b2_c3d4 | 0xa1b2_3c4d => true,
        0xd4c3_b2a1 | 0x4d3c_b2a1 => false,
        m => panic!("{}: not a pcap file (magic {m:#x})", file.display()),
    };
    let u32_at = |at: usize| {
        let b: [u8; 4] = d[at..at + 4].try_into().unwrap();
        if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    };
    // LINKTYPE_RAW (101).
    assert_eq!(u32_at(20), 101, "{}: link type", file.display());
    let mut frames = Vec::new();
    let mut at = 24;
    while at < d.len() {
        let len = u32_at(at + 8) as usize;
        assert_eq!(len, u32_at(at + 12) as usize, "a cut frame");
        frames.push(d[at + 16..at + 16 + len].to_vec());
        at += 16 + len;
    }
    frames
}

/// Both processes capture (`SOFTRDMA_PCAP`) a run over the same-host path:
/// tshark decodes every frame of both files as RoCE v2 (InfiniBand over
/// UDP 4791, nothing malformed), and every packet's ICRC — as tshark
/// reads it, and as computed here from the annex — is right. The packets
/// of the path are captured as the wire would carry them, ICRC included,
/// whatever the path itself carries.
#[test]
fn captures_of_the_path_on_both_sides_decode_in_tshark_with_good_icrcs() {
    let dir = std::env::temp_dir().join(format!("softrdma-samehost-ts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("cap-{addr}.pcap");
    let (a, b) = ("127.74.2.1", "127.74.2.2");
    let (ic, tc) = ops_with(
        "shm",
        a,
        b,
        &[("SOFTRDMA_PCAP", pcap.display().to_string())],
    );
    assert_path_carried(&ic, &tc);
    for ip in [a, b] {
        let f = dir.join(format!("cap-{ip}.pcap"));
        let frames = pcap_frames(&f);
        let t = Command::new("tshark")
            .arg("-r")
            .arg(&f)
            .args(["-d", "udp.port==4791,infiniband", "-T", "fields"])
            .args(["-e", "frame.number", "-e", "_ws.malformed"])
            .args([
                "-e",
                "infiniband.bth.opcode",
                "-e",
                "infiniband.invariant.crc",
            ])
            .output()
            .expect("tshark (apt-get install -y tshark; scripts/deps installs it)");
        let out = String::from_utf8_lossy(&t.stdout);
        let err = String::from_utf8_lossy(&t.stderr);
        assert!(t.status.success(), "tshark: {err}");
        assert!(
            !err.contains("damaged") && !err.contains("cut short"),
            "{err}"
        );
        let lines: Vec<&str> = out.lines().collect();
        // Both directions, each a good part of the run (the 512 KiB WRITE
        // alone is 128 packets one way).
        assert!(
            frames.len() > 300,
            "{}: {} frames",
            f.display(),
            frames.len()
        );
        assert_eq!(lines.len(), frames.len(), "tshark saw:\n{out}");
        let (mut sent, mut received) = (0, 0);
        for (l, frame) in lines.iter().zip(&frames) {
            let cols: Vec<&str> = l.split('\t').collect();
            assert_eq!(cols.len(), 4, "{l}");
            assert!(cols[1].is_empty(), "tshark: malformed: {l}");
            assert!(!cols[2].is_empty(), "tshark did not decode a BTH: {l}");
            let trailer: [u8; 4] = frame[frame.len() - 4..].try_into().unwrap();
            let shown = u32::from_str_radix(cols[3].trim_start_matches("0x"), 16)
                .unwrap_or_else(|_| panic!("tshark shows no ICRC: {l}"));
            assert_eq!(shown, u32::from_be_bytes(trailer), "{l}");
            // Stored least significant byte first.
            assert_eq!(
                annex_icrc(frame),
                u32::from_le_bytes(trailer),
                "{}: frame {} has a bad ICRC",
                f.display(),
                cols[0]
            );
            let src = std::net::Ipv4Addr::new(frame[12], frame[13], frame[14], frame[15]);
            if src.to_string() == ip {
                sent += 1;
            } else {
                received += 1;
            }
        }
        assert!(
            sent > 100 && received > 100,
            "{ip}: sent {sent}, received {received}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The soak's invariants (crates/sim/tests/soak.rs) over the same-host
/// path: [`soak`] between two processes whose devices both inject loss,
/// duplication, reordering and corruption, one address and two; the path
/// carried the run (both processes' counters), the target received every
/// SEND once, in order, whole, and its counter is the sum of the adds.
#[test]
fn the_soaks_invariants_hold_over_the_path_with_faults() {
    for (seed, a, b) in [
        (19u64, "127.74.3.1", "127.74.3.1"),
        (74, "127.74.3.2", "127.74.3.3"),
    ] {
        let faults = format!("seed={seed},loss=2%,dup=1%,reorder=2%,corrupt=0.2%");
        let mut p = pair_with(
            "shm",
            "soak",
            a,
            b,
            &[("SH_SEED", seed.to_string()), ("SOFTRDMA_FAULTS", faults)],
        );
        let soak = wait_line(&mut p.iout, "SOAK");
        wait_line(&mut p.iout, "DONE");
        let ic = wait_line(&mut p.iout, "COUNTERS");
        p.ask_target_to_check();
        let check = wait_line(&mut p.tout, "CHECK");
        let counter = soak.split("counter=").nth(1).unwrap();
        assert_eq!(
            check,
            format!("CHECK sends={SOAK_SENDS} extra=0 counter={counter}"),
            "{soak}"
        );
        let tc = wait_line(&mut p.tout, "COUNTERS");
        assert!(p.init.wait().unwrap().success());
        assert!(p.target.wait().unwrap().success());
        let i = parse_counters(&ic).unwrap_or_else(|| panic!("path off? {ic}"));
        let t = parse_counters(&tc).unwrap_or_else(|| panic!("path off? {tc}"));
        assert!(i[0] > 1000 && i[1] > 1000 && i[3] == 1, "initiator {ic}");
        assert!(t[0] > 1000 && t[1] > 1000 && t[3] == 1, "target {tc}");
        println!("seed {seed}, {a} → {b}: {soak}; {ic}; {tc}");
    }
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

/// The producer's end of the initiator's path ring (a memfd named
/// `softrdma-path`), mapped here through `/proc/PID/fd`: its start and
/// length.
fn map_path_ring(pid: u32) -> (*mut u8, usize) {
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let path = e.unwrap().path();
        let Ok(link) = std::fs::read_link(&path) else {
            continue;
        };
        if !link.to_string_lossy().contains("softrdma-path") {
            continue;
        }
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let len = f.metadata().unwrap().len() as usize;
        // SAFETY: a shared mapping of a file we opened, of its length;
        // the test writes only within it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&f),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        return (p.cast(), len);
    }
    panic!("the initiator maps no path ring");
}

#[test]
fn a_garbled_ring_record_is_loss_and_the_sender_gets_a_new_ring() {
    // The target stopped, the initiator fills its ring; the test then
    // writes garbage over the length of the first record the target has
    // not read (as a producer breaking the ring's protocol would). The
    // target finds the ring malformed, lets go of it and closes it; the
    // initiator lets go of its end, offers a new ring, and its transport
    // sends again what the garbled ring swallowed: the data arrives whole.
    let mut p = pair("shm", "garble", "127.72.4.1", "127.72.4.1");
    wait_line(&mut p.iout, "STREAMING");
    signal(&p.target, libc::SIGSTOP);
    p.init.stdin.take().unwrap().write_all(b"go\n").unwrap();
    wait_line(&mut p.iout, "POSTED");
    let (base, len) = map_path_ring(p.init.id());
    // softrdma_io::ring's layout: tail at 64, head at 128, the data
    // area after 4096 bytes; a record starts with its length (u32 LE).
    let word = |off: usize| {
        // SAFETY: aligned, within the mapping; the ring's counters are
        // 8-byte atomics.
        unsafe { &*base.add(off).cast::<std::sync::atomic::AtomicU64>() }
    };
    let t0 = std::time::Instant::now();
    while word(64).load(Ordering::Acquire) == word(128).load(Ordering::Acquire) {
        assert!(t0.elapsed() < Duration::from_secs(60), "nothing published");
        std::thread::sleep(Duration::from_millis(5));
    }
    let cap = len - 4096;
    let head = word(128).load(Ordering::Acquire) as usize & (cap - 1);
    // SAFETY: within the mapping (a record header is 8 bytes, 8-aligned
    // in the data area); the producer does not write published records.
    unsafe {
        base.add(4096 + head)
            .cast::<u32>()
            .write_volatile(0xffff_fff0)
    };
    // SAFETY: our mapping, unmapped once.
    unsafe { libc::munmap(base.cast(), len) };
    signal(&p.target, libc::SIGCONT);
    wait_line(&mut p.iout, "DONE");
    let ic = wait_line(&mut p.iout, "COUNTERS");
    let i = parse_counters(&ic).unwrap();
    assert!(i[3] >= 2, "no new ring after the garbage: {ic}");
    p.ask_target_to_check();
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
    let mut rest = String::new();
    let _ = p.iout.read_to_string(&mut rest);
    assert!(p.init.wait().unwrap().success());
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
    let mut rest = String::new();
    let _ = p.iout.read_to_string(&mut rest);
    assert!(p.init.wait().unwrap().success());
}

#[test]
fn a_path_answer_that_comes_too_late_does_not_keep_the_sender_on_udp() {
    // The target's device process is stopped while the initiator asks it
    // for the path: the initiator gives up waiting (its ring closed),
    // goes through UDP, and gets the path when it asks again.
    let mut p = pair("shm", "late", "127.42.6.1", "127.42.6.2");
    wait_line(&mut p.iout, "STREAMING");
    let host: i32 = p.host_pid;
    // SAFETY: the device process our target started (same user).
    assert_eq!(unsafe { libc::kill(host, libc::SIGSTOP) }, 0);
    p.init.stdin.take().unwrap().write_all(b"go\n").unwrap();
    wait_line(&mut p.iout, "POSTED");
    std::thread::sleep(Duration::from_millis(50));
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(host, libc::SIGCONT) }, 0);
    wait_line(&mut p.iout, "DONE");
    let ic = wait_line(&mut p.iout, "COUNTERS");
    let i = parse_counters(&ic).unwrap();
    // The last WRITE (128 packets) went through the path.
    assert!(i[0] >= 128 && i[3] == 1 && i[4] == 1, "{ic}");
    p.target
        .stdin
        .take()
        .unwrap()
        .write_all(b"check\n")
        .unwrap();
    let check = wait_line(&mut p.tout, "CHECK");
    assert!(check.starts_with("CHECK written=true"), "{check}");
    assert!(p.init.wait().unwrap().success());
    assert!(p.target.wait().unwrap().success());
}

#[test]
fn rings_of_short_lived_peers_are_freed_whether_they_close_or_die() {
    const N: usize = 6;
    let port = free_port();
    let target_ip = "127.42.1.1";
    let mut target = role(
        "target_role",
        "shm",
        &[
            ("SH_ADDR", target_ip.to_string()),
            ("SH_PORT", port.to_string()),
            ("SH_MODE", "serve".to_string()),
            ("SH_N", N.to_string()),
        ],
    );
    let mut tout = BufReader::new(target.stdout.take().unwrap());
    wait_line(&mut tout, "LISTENING");
    for k in 0..N {
        // Half on the target's address (its device process), half on
        // another (a device process that leaves with its only member);
        // half killed, half closing their device.
        let ip = if k % 2 == 0 { target_ip } else { "127.42.1.2" };
        let end = if k < N / 2 { "kill" } else { "close" };
        let mut init = role(
            "initiator_role",
            "shm",
            &[
                ("SH_ADDR", ip.to_string()),
                ("SH_TARGET", format!("{target_ip}:{port}")),
                ("SH_MODE", "short".to_string()),
                ("SH_END", end.to_string()),
            ],
        );
        let mut iout = BufReader::new(init.stdout.take().unwrap());
        wait_line(&mut tout, "ACCEPTED");
        let ic = wait_line(&mut iout, "COUNTERS");
        let c = parse_counters(&ic).unwrap();
        assert!(c[0] > 0 && c[1] > 0 && c[3] == 1, "initiator {k}: {ic}");
        if end == "kill" {
            wait_line(&mut iout, "KILL ME");
            signal(&init, libc::SIGKILL);
            let _ = init.wait();
        } else {
            assert!(init.wait().unwrap().success());
        }
    }
    target.stdin.take().unwrap().write_all(b"check\n").unwrap();
    assert_eq!(wait_line(&mut tout, "MAPS"), "MAPS 0");
    let tc = wait_line(&mut tout, "COUNTERS");
    let c = parse_counters(&tc).unwrap();
    assert_eq!(c[3], N as u64, "a path to each initiator: {tc}");
    assert_eq!((c[4], c[5]), (0, 0), "rings kept: {tc}");
    assert!(target.wait().unwrap().success());
}

#[test]
fn a_forked_child_that_exits_leaves_its_parents_rings_alone() {
    let mut p = pair("shm", "fork", "127.42.4.1", "127.42.4.2");
    wait_line(&mut p.iout, "PHASE1");
    let mut tin = p.target.stdin.take().unwrap();
    tin.write_all(b"fork\n").unwrap();
    wait_line(&mut p.tout, "FORKED");
    p.init.stdin.take().unwrap().write_all(b"go\n").unwrap();
    wait_line(&mut p.iout, "DONE");
    let ic = wait_line(&mut p.iout, "COUNTERS");
    tin.write_all(b"check\n").unwrap();
    let check = wait_line(&mut p.tout, "CHECK");
    assert_eq!(check, "CHECK written=true counter=77 send=true");
    let tc = wait_line(&mut p.tout, "COUNTERS");
    assert!(p.init.wait().unwrap().success());
    assert!(p.target.wait().unwrap().success());
    // The same rings before and after the fork, nothing refused.
    assert_path_carried(&ic, &tc);
    for c in [&ic, &tc] {
        let v = parse_counters(c).unwrap();
        assert_eq!(v[2], 0, "refused: {c}");
        assert_eq!((v[4], v[5]), (1, 1), "{c}");
    }
}

#[test]
fn a_parent_killed_while_its_forked_child_lives_is_seen_dead() {
    let mut p = pair("shm", "kill", "127.42.5.1", "127.42.5.2");
    wait_line(&mut p.iout, "STREAMING");
    let mut tin = p.target.stdin.take().unwrap();
    tin.write_all(b"fork-and-stay\n").unwrap();
    let child: i32 = wait_line(&mut p.tout, "CHILD")[6..].parse().unwrap();
    signal(&p.target, libc::SIGKILL);
    let _ = p.target.wait();
    let e = wait_line(&mut p.iout, "ERROR");
    assert!(e.starts_with("ERROR RetryExcErr"), "{e}");
    assert_eq!(wait_line(&mut p.iout, "MAPS"), "MAPS 0");
    let ic = wait_line(&mut p.iout, "COUNTERS");
    let c = parse_counters(&ic).unwrap();
    assert_eq!((c[4], c[5]), (0, 0), "rings of a dead peer kept: {ic}");
    // The child held every descriptor all along.
    // SAFETY: signal 0 only checks that the process exists.
    let alive = unsafe { libc::kill(child, 0) } == 0;
    // SAFETY: the target's child (reparented): ours to end.
    unsafe { libc::kill(child, libc::SIGKILL) };
    assert!(alive, "the forked child was gone before the check");
    assert!(p.init.wait().unwrap().success());
}

/// A plain socket connected to a device's rendezvous name (non-blocking),
/// saying nothing.
fn silent_connection(ip: &str, port: u16) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    use std::os::unix::fs::MetadataExt;
    let ns = std::fs::metadata("/proc/self/ns/net").unwrap().ino();
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let name = format!("softrdma-device/{uid}/{ns:x}/{ip}/{port}");
    // SAFETY: plain socket calls on a descriptor we own; the address is a
    // zeroed sockaddr_un with the abstract name written in bounds.
    unsafe {
        let fd = libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        );
        assert!(fd >= 0);
        let fd = std::os::fd::OwnedFd::from_raw_fd(fd);
        let mut a: libc::sockaddr_un = std::mem::zeroed();
        a.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (i, b) in name.bytes().enumerate() {
            a.sun_path[i + 1] = b as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sa_family_t>() + 1 + name.len();
        use std::os::fd::AsRawFd;
        let r = libc::connect(
            fd.as_raw_fd(),
            &a as *const libc::sockaddr_un as *const libc::sockaddr,
            len as libc::socklen_t,
        );
        (r == 0).then_some(fd)
    }
}

#[test]
fn connections_that_never_speak_do_not_stop_the_device_process() {
    // Path off: every datagram goes through the device process, and the
    // initiator joins it (on the target's address) while connections that
    // say nothing keep arriving.
    let ip = "127.42.2.1";
    let port = free_port();
    let mut target = role(
        "target_role",
        "udp",
        &[
            ("SH_ADDR", ip.to_string()),
            ("SH_PORT", port.to_string()),
            ("SH_MODE", "ops".to_string()),
        ],
    );
    let mut tout = BufReader::new(target.stdout.take().unwrap());
    wait_line(&mut tout, "LISTENING");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let staller = std::thread::spawn(move || {
        let mut held = Vec::new();
        while !s2.load(Ordering::SeqCst) {
            if let Some(c) = silent_connection(ip, 4791) {
                held.push(c);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        held.len()
    });
    std::thread::sleep(Duration::from_millis(200));
    let mut init = role(
        "initiator_role",
        "udp",
        &[
            ("SH_ADDR", ip.to_string()),
            ("SH_TARGET", format!("{ip}:{port}")),
            ("SH_MODE", "ops".to_string()),
        ],
    );
    let mut iout = BufReader::new(init.stdout.take().unwrap());
    // (The initiator first: one that cannot join exits, and says so.)
    wait_line(&mut iout, "DONE");
    wait_line(&mut tout, "READY");
    stop.store(true, Ordering::SeqCst);
    let held = staller.join().unwrap();
    assert!(held > 0, "no silent connection was made");
    target.stdin.take().unwrap().write_all(b"check\n").unwrap();
    let check = wait_line(&mut tout, "CHECK");
    assert_eq!(check, "CHECK written=true counter=77 send=true");
    assert!(init.wait().unwrap().success());
    assert!(target.wait().unwrap().success());
}

#[test]
fn an_offer_that_meets_a_full_member_ring_is_not_lost() {
    let dir = std::env::temp_dir().join(format!("softrdma-samehost-offer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("trace");
    let ip = "127.42.3.1";
    let mut p = pair_with(
        "shm",
        "offer",
        ip,
        ip,
        &[("SOFTRDMA_HOST_TRACE", trace.display().to_string())],
    );
    wait_line(&mut p.iout, "STREAMING");
    // The target stops; datagrams for its QP fill its device-process
    // ring (8 MiB) from a plain UDP socket.
    signal(&p.target, libc::SIGSTOP);
    let sock = std::net::UdpSocket::bind("127.42.3.9:0").unwrap();
    let mut d = vec![0u8; 4000];
    d[0] = 0x04; // RC SEND ONLY; garbage after the BTH (a bad ICRC).
    d[5..8].copy_from_slice(&p.target_qpn.to_be_bytes()[1..]);
    for k in 0..6000 {
        let _ = sock.send_to(&d, (ip, 4791));
        if k % 64 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // Now the initiator's first WRITE asks for the path: the device
    // process offers the target its ring while the target's ring is full.
    p.init.stdin.take().unwrap().write_all(b"go\n").unwrap();
    wait_line(&mut p.iout, "POSTED");
    std::thread::sleep(Duration::from_millis(100));
    signal(&p.target, libc::SIGCONT);
    wait_line(&mut p.iout, "DONE");
    let ic = wait_line(&mut p.iout, "COUNTERS");
    let i = parse_counters(&ic).unwrap();
    assert_eq!(i[3], 1, "{ic}");
    p.target
        .stdin
        .take()
        .unwrap()
        .write_all(b"check\n")
        .unwrap();
    let check = wait_line(&mut p.tout, "CHECK");
    assert!(check.starts_with("CHECK written=true"), "{check}");
    let tc = wait_line(&mut p.tout, "COUNTERS");
    let t = parse_counters(&tc).unwrap();
    assert!(t[1] > 0, "the target never read the path: {tc}");
    assert!(p.init.wait().unwrap().success());
    assert!(p.target.wait().unwrap().success());
    // The target's ring was full indeed (the device process says so when
    // the target leaves).
    let deadline = std::time::Instant::now() + T;
    let refused = loop {
        let text = std::fs::read_to_string(&trace).unwrap_or_default();
        let line = text
            .lines()
            .find(|l| l.contains(&format!("pid {} left", p.target.id())))
            .map(str::to_string);
        if let Some(l) = line {
            let r: u64 = l
                .split("ring refused ")
                .nth(1)
                .unwrap()
                .split(',')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            break r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no leave line:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(refused > 0, "the target's ring never filled");
    let _ = std::fs::remove_dir_all(&dir);
}
