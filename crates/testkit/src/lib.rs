//! What the integration tests of softrdma's crates share, so that each
//! helper is written once: the build's directories, running `ip` and other
//! commands, the root check, the lines a role process prints, replaying a
//! committed fuzz corpus, test data, signals, and programs run in a
//! process group of their own with their output in a file ([`Proc`]),
//! and mappings with unmapped pages ([`mem`]).
//!
//! A dev-dependency only (`softrdma-testkit = { workspace = true }`); it
//! depends on no softrdma crate but `softrdma-io` (for [`signal`] and the
//! page size), so every crate's tests can use it — softrdma-io's own too
//! (a dev-dependency cycle cargo allows: its tests link this crate's copy
//! of softrdma-io).

pub mod mem;
mod proc;

pub use proc::{Done, Proc};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>`: two levels up from the running test executable
/// (`target/<profile>/deps/<test>-…`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// The newer of `target/<profile>/NAME` and `target/<profile>/deps/NAME`
/// (building the tests puts a library in `deps/`, `cargo build` copies it
/// up; the other may be left from an earlier build), or `None`.
pub fn newest_built(name: &str) -> Option<PathBuf> {
    let prof = profile_dir();
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    [prof.join(name), prof.join("deps").join(name)]
        .into_iter()
        .filter(|p| p.exists())
        .max_by_key(|p| mtime(p))
}

/// Runs a command (`args[0]` the program); its stderr in the error.
pub fn sh(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Runs `ip ARGS…` (iproute2); panics with its stderr when it fails.
pub fn ip(args: &[&str]) {
    let o = Command::new("ip")
        .args(args)
        .output()
        .expect("ip (iproute2)");
    assert!(
        o.status.success(),
        "ip {}: {} (root and iproute2 needed)",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Deletes network namespace `ns` if it exists (a run killed half-way
/// may have left it).
pub fn netns_del(ns: &str) {
    let _ = Command::new("ip")
        .args(["netns", "del", ns])
        .stderr(std::process::Stdio::null())
        .status();
}

/// Whether the process runs as root (effective uid 0, read from /proc).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        .unwrap_or(false)
}

/// The arguments that run only the ignored test `name` of a test
/// executable, one thread, its output not captured: a "role" a test
/// starts as another process of the same executable.
pub fn role_args(name: &str) -> [&str; 6] {
    [
        name,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads",
        "1",
    ]
}

/// This test executable running the role `name` ([`role_args`]), its
/// stdin and stdout piped (the test talks to it by lines). The role is
/// killed when the thread that started it ends (`PR_SET_PDEATHSIG`): a
/// test that panics, or that the runner kills at its time limit, leaves
/// no role behind holding its address (roles left waiting in `accept`
/// for 50 minutes kept a shared device alive and failed later tests).
pub fn role_command(name: &str) -> Command {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(std::env::current_exe().expect("test executable path"));
    c.args(role_args(name))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the child between fork and exec and
    // only makes async-signal-safe calls (prctl, getppid).
    unsafe {
        c.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have gone between fork and prctl.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    c
}

/// A TCP port free on 127.0.0.1 now (the kernel's pick; another process
/// may take it before the caller binds it, as with any such helper).
pub fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The rest of the first line that contains `marker`, from `marker` on
/// and trimmed, read from a role process's output; panics if the output
/// ends first. (The test harness prints "test role ... " without a
/// newline first, so the marker may follow it on the same line.)
pub fn wait_line(r: &mut impl BufRead, marker: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            r.read_line(&mut line).unwrap() > 0,
            "role exited before {marker}"
        );
        if let Some(i) = line.find(marker) {
            return line[i..].trim().to_string();
        }
    }
}

/// Replays the committed fuzz corpus `fuzz/corpus/NAME/` through `check`
/// (the fuzz target's own checks): every file must pass without a panic,
/// and there must be at least `min` of them (a corpus gone missing fails).
pub fn replay_corpus(name: &str, min: usize, check: impl Fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(name);
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if !p.is_file() {
            continue;
        }
        let data = std::fs::read(&p).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&data)));
        assert!(r.is_ok(), "corpus file {} fails", p.display());
        n += 1;
    }
    assert!(n >= min, "only {n} corpus files in {}", dir.display());
}

/// `n` bytes of xorshift64 from `state` (made odd): test data that no
/// offset or length mistake reproduces by chance.
pub fn xorshift_bytes(state: u64, n: usize) -> Vec<u8> {
    let mut x = state | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// How many times the commonest difference between consecutive 24-bit
/// numbers (QPNs) of `qpns` occurs: 1 or 2 for random draws, almost
/// surely; `qpns.len() - 1` for a counter.
pub fn commonest_delta(qpns: &[u32]) -> usize {
    let mut deltas: Vec<u32> = qpns
        .windows(2)
        .map(|w| w[1].wrapping_sub(w[0]) & 0xff_ffff)
        .collect();
    deltas.sort_unstable();
    deltas
        .chunk_by(|a, b| a == b)
        .map(<[u32]>::len)
        .max()
        .unwrap_or(0)
}

/// Sends signal `sig` (a `libc::SIG*` number) to `pid`; a negative `pid`
/// names a process group (`kill(2)`).
pub fn signal(pid: i32, sig: i32) -> std::io::Result<()> {
    softrdma_io::signal(pid, sig)
}

/// Waits for `c` until `deadline`: its exit code (-1 when a signal ended
/// it), or `None` when it was still running (then it is killed).
pub fn wait_deadline(c: &mut std::process::Child, deadline: std::time::Instant) -> Option<i32> {
    loop {
        if let Some(s) = c.try_wait().unwrap() {
            return Some(s.code().unwrap_or(-1));
        }
        if std::time::Instant::now() >= deadline {
            let _ = c.kill();
            let _ = c.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Whether `/proc/<pid>` exists.
pub fn pid_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_line_finds_the_marker_after_harness_text() {
        let text = b"running 1 test\ntest role ... READY 5 6\nmore\n";
        let mut r = &text[..];
        assert_eq!(wait_line(&mut r, "READY"), "READY 5 6");
    }

    #[test]
    #[should_panic(expected = "role exited before GONE")]
    fn wait_line_panics_when_the_output_ends() {
        let mut r = &b"nothing\n"[..];
        wait_line(&mut r, "GONE");
    }

    #[test]
    fn xorshift_bytes_are_reproducible_and_differ_by_state() {
        assert_eq!(xorshift_bytes(7, 64), xorshift_bytes(7, 64));
        assert_ne!(xorshift_bytes(7, 64), xorshift_bytes(9, 64));
        assert_eq!(xorshift_bytes(6, 64), xorshift_bytes(7, 64));
    }

    #[test]
    fn sh_reports_the_failing_command() {
        assert!(sh(&["true"]).is_ok());
        let e = sh(&["sh", "-c", "echo nope >&2; exit 3"]).unwrap_err();
        assert!(e.contains("nope"), "{e}");
    }
}
