//! One-sided operations land while the target program does nothing.
//!
//! The target is another process (this test binary re-run in a "target"
//! role). In the first test its only thread is blocked in `read()` on a pipe
//! while the initiator WRITEs, READs and runs atomics on its memory; the
//! test checks from /proc that the thread really sleeps in `pipe_read`. In
//! the second the target spins on the last byte of its buffer without
//! calling any verb, as `ib_write_lat` does, until a remote WRITE lands.

use softrdma::cm::{self, connect_rc, Listener};
use softrdma::*;
use softrdma_testkit::wait_line;
use std::io::{BufReader, Read, Write};
use std::sync::atomic::Ordering;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);
const LEN: usize = 1 << 20;
const COUNTER: usize = LEN - 64;

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// The target role: does nothing unless the parent test asked for it.
#[test]
#[ignore = "a role: the test that needs it runs it in its own process (with --ignored)"]
fn target_role() {
    let port = std::env::var("SOFTRDMA_TEST_TARGET_PORT").expect(
        "SOFTRDMA_TEST_TARGET_PORT unset: this role runs only when its parent test starts it",
    );
    let mode = std::env::var("SOFTRDMA_TEST_TARGET_MODE").unwrap_or_default();
    let dev = Device::open_default().unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let access = Access::LOCAL_WRITE
        .with(Access::REMOTE_WRITE)
        .with(Access::REMOTE_READ)
        .with(Access::REMOTE_ATOMIC);
    let mr = pd.alloc_mr(LEN, access).unwrap();
    // The READ source: the second half holds a known pattern.
    mr.write(LEN / 2, &pattern(7, LEN / 2 - 64));
    mr.atomic_u64(COUNTER).store(1000, Ordering::SeqCst);
    let l = Listener::bind(&format!("127.0.0.1:{port}")).unwrap();
    println!("LISTENING");
    let _conn = l
        .accept_rc(&pd, &cq, QpType::Rc, Some(&mr), &ConnectOptions::default())
        .unwrap();
    println!("READY");
    std::io::stdout().flush().unwrap();
    if mode == "spin" {
        // No verb, no syscall: only loads of the last byte.
        while mr.load_u8(LEN / 2 - 1) != 0xab {
            std::hint::spin_loop();
        }
        let ok = mr.to_vec(0, LEN / 2 - 1) == pattern(3, LEN / 2 - 1);
        println!("LANDED {}", if ok { "ok" } else { "CORRUPT" });
        std::io::stdout().flush().unwrap();
        assert!(ok);
        return;
    }
    // Block in read() until the initiator is done, then check.
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let written = mr.to_vec(0, LEN / 2) == pattern(3, LEN / 2);
    let counter = mr.atomic_u64(COUNTER).load(Ordering::SeqCst);
    println!("CHECK written={written} counter={counter}");
    std::io::stdout().flush().unwrap();
}

/// A target role in `mode` and the initiator connected to it (the target
/// said READY), with the target's output.
fn start(
    mode: &str,
) -> (
    std::process::Child,
    BufReader<std::process::ChildStdout>,
    Initiator,
) {
    let port = free_port();
    let mut child = spawn_target(mode, port);
    let mut out = BufReader::new(child.stdout.take().unwrap());
    wait_line(&mut out, "LISTENING");
    let i = initiator(port);
    wait_line(&mut out, "READY");
    (child, out, i)
}

fn spawn_target(mode: &str, port: u16) -> std::process::Child {
    softrdma_testkit::role_command("target_role")
        .env("SOFTRDMA_TEST_TARGET_PORT", port.to_string())
        .env("SOFTRDMA_TEST_TARGET_MODE", mode)
        .spawn()
        .unwrap()
}

use softrdma_testkit::free_tcp_port as free_port;

struct Initiator {
    dev: Device,
    cq: CompletionQueue,
    mr: MemoryRegion,
    conn: cm::Connection,
    _pd: ProtectionDomain,
}

fn initiator(port: u16) -> Initiator {
    let dev = Device::open_default().unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64, None).unwrap();
    let mr = pd.alloc_mr(LEN, Access::LOCAL_WRITE).unwrap();
    let conn = connect_rc(
        &format!("127.0.0.1:{port}"),
        &pd,
        &cq,
        QpType::Rc,
        None,
        &ConnectOptions::default(),
    )
    .unwrap();
    Initiator {
        dev,
        cq,
        mr,
        conn,
        _pd: pd,
    }
}

fn ok(i: &Initiator, n: usize) {
    // Not `cq.wait`: block in the completion channel would also do; here
    // we poll, which is what makes progress on *our* side only.
    let wc = i.cq.wait(n, T).unwrap();
    assert_eq!(wc.len(), n, "{wc:?}");
    assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
}

/// WRITEs the first half of the initiator's region to the start of the
/// target's, and waits for its completion.
fn write_half(i: &Initiator) {
    let remote = i.conn.remote;
    let sge = i.mr.sge(0, (LEN / 2) as u32);
    let wr = SendWr::rdma(1, WrOpcode::RdmaWrite, sge, remote.va, remote.rkey);
    i.conn.qp.post_send(wr).unwrap();
    ok(i, 1);
}

/// State and wait channel of the target's test thread (the harness runs
/// each test in a thread named after it).
fn sleeping_in_pipe_read(pid: u32) -> (String, String) {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten();
    for t in tasks {
        let dir = t.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != "target_role" {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string();
        let wchan = std::fs::read_to_string(dir.join("wchan")).unwrap_or_default();
        // Context switches: unchanged means the thread never ran.
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        let switches: String = status
            .lines()
            .filter(|l| l.contains("ctxt_switches"))
            .collect::<Vec<_>>()
            .join(" ");
        return (state, format!("{} {}", wchan.trim(), switches));
    }
    (String::new(), String::new())
}

#[test]
fn write_read_atomics_land_while_the_target_blocks_in_read() {
    let (mut child, mut out, i) = start("block");
    // Give the target time to enter read(), then check it is there.
    let pid = child.id();
    let mut seen = (String::new(), String::new());
    for _ in 0..200 {
        seen = sleeping_in_pipe_read(pid);
        if seen.0 == "S" && seen.1.contains("pipe") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        seen.0 == "S" && seen.1.contains("pipe"),
        "the target's thread is not asleep in a pipe read: {seen:?}"
    );
    let remote = i.conn.remote;
    // WRITE 512 KiB.
    i.mr.write(0, &pattern(3, LEN / 2));
    write_half(&i);
    // READ the target's pattern.
    let rd = SendWr::rdma(
        2,
        WrOpcode::RdmaRead,
        i.mr.sge(LEN / 2, (LEN / 2 - 64) as u32),
        remote.va + (LEN / 2) as u64,
        remote.rkey,
    );
    i.conn.qp.post_send(rd).unwrap();
    ok(&i, 1);
    assert_eq!(i.mr.to_vec(LEN / 2, LEN / 2 - 64), pattern(7, LEN / 2 - 64));
    // 100 FETCH_ADDs of 3, then a COMPARE_SWAP 1300 → 77.
    for k in 0..100u64 {
        let mut fa = SendWr::rdma(
            10 + k,
            WrOpcode::AtomicFetchAndAdd,
            i.mr.sge(LEN - 64, 8),
            remote.va + COUNTER as u64,
            remote.rkey,
        );
        fa.compare_add = 3;
        i.conn.qp.post_send(fa).unwrap();
        ok(&i, 1);
        assert_eq!(
            i.mr.atomic_u64(LEN - 64).load(Ordering::SeqCst),
            1000 + 3 * k
        );
    }
    let mut cas = SendWr::rdma(
        200,
        WrOpcode::AtomicCmpAndSwp,
        i.mr.sge(LEN - 64, 8),
        remote.va + COUNTER as u64,
        remote.rkey,
    );
    cas.compare_add = 1300;
    cas.swap = 77;
    i.conn.qp.post_send(cas).unwrap();
    ok(&i, 1);
    // The target slept through all of it: same state, same wait channel,
    // not a single context switch since.
    let after = sleeping_in_pipe_read(pid);
    assert_eq!(after, seen, "the target's thread ran during the operations");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"check\n").unwrap();
    let line = wait_line(&mut out, "CHECK");
    assert_eq!(line.trim(), "CHECK written=true counter=77");
    assert!(child.wait().unwrap().success());
    drop(i.dev);
}

#[test]
fn a_write_lands_while_the_target_spins_on_its_last_byte() {
    let (mut child, mut out, i) = start("spin");
    let mut data = pattern(3, LEN / 2);
    data[LEN / 2 - 1] = 0xab;
    i.mr.write(0, &data);
    write_half(&i);
    let line = wait_line(&mut out, "LANDED");
    assert_eq!(line.trim(), "LANDED ok");
    let mut rest = String::new();
    let _ = out.read_to_string(&mut rest);
    assert!(child.wait().unwrap().success());
}
