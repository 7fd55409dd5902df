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
//! error completion (retry exceeded).
//!
//! Addresses 127.64.x.y. About 2 s.

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
            "COUNTERS sent={} received={} refused={} paths={}",
            c.sent, c.received, c.refused, c.paths
        ),
        None => "COUNTERS none".into(),
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
    say("LISTENING");
    let conn = l
        .accept_rc(&pd, &cq, QpType::Rc, Some(&mr), &ConnectOptions::default())
        .unwrap();
    conn.qp
        .post_recv(RecvWr {
            wr_id: 5,
            sg_list: vec![mr.sge(SEND_AT, SEND_LEN as u32)],
        })
        .unwrap();
    say("READY");
    // Sleep in read() while the initiator works.
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    // (Only the "ops" run SENDs.)
    let n = usize::from(env("SH_MODE") == "ops");
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
        "ops" => {
            mr.write(0, &pattern(3, LEN / 2));
            write(1, LEN / 2);
            ok(1);
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
        "flood" => {
            // 24 × 1 MiB while the target is stopped: more than its ring.
            say("STREAMING");
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).unwrap();
            mr.write(0, &pattern(3, LEN / 2));
            for k in 0..24 {
                write(k, LEN / 2);
            }
            ok(24);
            say("DONE");
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
    if vars.iter().any(|(k, v)| *k == "SH_MODE" && v == "flood") {
        // A 1 MiB ring (about 250 packets of 4 KiB): one 512 KiB WRITE fits,
        // the 24 of them while the target is stopped do not.
        c.env("SOFTRDMA_PATH_RING", "1048576");
    }
    c.spawn().unwrap()
}

use softrdma_testkit::free_tcp_port as free_port;

/// `COUNTERS sent=… received=… refused=… paths=…` → the four numbers.
fn parse_counters(line: &str) -> Option<[u64; 4]> {
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|kv| kv.split('=').nth(1)?.parse().ok())
        .collect::<Option<_>>()?;
    v.try_into().ok()
}

struct Pair {
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
    let port = free_port();
    let mut tv = vec![
        ("SH_ADDR", target_ip.to_string()),
        ("SH_PORT", port.to_string()),
        ("SH_MODE", mode.to_string()),
    ];
    tv.extend_from_slice(extra);
    let mut target = role("target_role", same_host, &tv);
    let mut tout = BufReader::new(target.stdout.take().unwrap());
    wait_line(&mut tout, "LISTENING");
    let mut iv = vec![
        ("SH_ADDR", init_ip.to_string()),
        ("SH_TARGET", format!("{target_ip}:{port}")),
        ("SH_MODE", mode.to_string()),
    ];
    iv.extend_from_slice(extra);
    let mut init = role("initiator_role", same_host, &iv);
    let iout = BufReader::new(init.stdout.take().unwrap());
    wait_line(&mut tout, "READY");
    Pair {
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
    let mut p = pair_with(same_host, "ops", init_ip, target_ip, extra);
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
    let ic = wait_line(&mut p.iout, "COUNTERS");
    assert!(parse_counters(&ic).is_some_and(|c| c[0] > 0), "{ic}");
    let mut rest = String::new();
    let _ = p.iout.read_to_string(&mut rest);
    assert!(p.init.wait().unwrap().success());
}
