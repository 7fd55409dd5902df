//! Running unmodified verbs programs against the library this crate builds.

#![allow(dead_code)]

pub use softrdma_testkit::profile_dir;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A directory holding `libibverbs.so.1` and `librdmacm.so.1` → our
/// `libibverbs.so`, for `LD_LIBRARY_PATH`.
///
/// Building the tests builds the library into `target/<profile>/deps/`;
/// `cargo build` also copies it to `target/<profile>/`. The newer one is
/// used (the other may be left from an earlier build).
/// `SOFTRDMA_TEST_LIB_DIR` names another directory holding a
/// `libibverbs.so.1` (scripts/sanitize: a library built with
/// AddressSanitizer).
pub fn lib_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SOFTRDMA_TEST_LIB_DIR") {
        return PathBuf::from(d);
    }
    let prof = profile_dir();
    let so = softrdma_testkit::newest_built("libibverbs.so").unwrap_or_else(|| {
        panic!(
            "libibverbs.so is missing in {}: build the library (cargo build -p softrdma-ibverbs)",
            prof.display()
        )
    });
    let rel = so.strip_prefix(&prof).expect("inside the profile dir");
    let target = Path::new("..").join(rel);
    let dir = prof.join("softrdma-ibverbs-lib");
    let _ = std::fs::create_dir_all(&dir);
    // The same file under both sonames: librdmacm lives in it too.
    for name in ["libibverbs.so.1", "librdmacm.so.1"] {
        let link = dir.join(name);
        if std::fs::read_link(&link).ok().as_deref() != Some(target.as_path()) {
            // Made under a private name and renamed over: atomic for other
            // test processes.
            let tmp = dir.join(format!(".{name}.{}", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(&target, &tmp).expect("symlink");
            std::fs::rename(&tmp, &link).expect("rename");
        }
    }
    dir
}

/// Fails (with the install hint) when a tool is not installed: these tests
/// must not pass by running nothing.
pub fn require_tool(name: &str) -> PathBuf {
    if name.starts_with('/') {
        return PathBuf::from(name);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for d in std::env::split_paths(&path) {
        let p = d.join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "{name} not found: apt-get install -y libibverbs-dev ibverbs-utils perftest rdmacm-utils"
    );
}

/// One test program at a time on this machine (two cores): the pairs spin
/// on their CQs, and overlapping runs would only measure contention. An
/// flock on a file in the build directory serialises test processes.
pub struct Serial(std::fs::File);

pub fn serial() -> Serial {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(profile_dir().join("softrdma-ibverbs-interop.lock"))
        .expect("lock file");
    // SAFETY: flock on a descriptor we own; blocks until granted.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(r, 0, "flock");
    Serial(f)
}

/// A finished program.
#[derive(Debug)]
pub struct Output {
    pub status: Option<i32>,
    pub out: String,
}

impl Output {
    pub fn ok(&self) -> bool {
        self.status == Some(0)
    }
}

fn out_file(tag: &str) -> (std::fs::File, PathBuf) {
    let dir = profile_dir().join("softrdma-ibverbs-out");
    let _ = std::fs::create_dir_all(&dir);
    let p = dir.join(format!("{}-{tag}.txt", std::process::id()));
    let f = std::fs::File::create(&p).expect("output file");
    (f, p)
}

pub fn command(prog: &str, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(require_tool(prog));
    c.args(args)
        .env("LD_LIBRARY_PATH", lib_dir())
        .env_remove("SOFTRDMA_ADDR")
        .env_remove("SOFTRDMA_CONFIG")
        .stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn spawn(mut c: Command, tag: &str) -> (Child, PathBuf) {
    let (f, p) = out_file(tag);
    let f2 = f.try_clone().expect("dup");
    c.stdout(f).stderr(f2);
    (c.spawn().expect("spawn"), p)
}

fn wait(child: &mut Child, deadline: Instant) -> Option<i32> {
    loop {
        match child.try_wait().expect("wait") {
            Some(s) => return Some(s.code().unwrap_or(-1)),
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn read(p: &Path) -> String {
    let mut s = String::new();
    if let Ok(mut f) = std::fs::File::open(p) {
        let _ = f.read_to_string(&mut s);
    }
    let _ = std::fs::remove_file(p);
    s
}

/// Builds `tests/c/NAME.c` with AddressSanitizer and UBSan against
/// Debian's `<infiniband/verbs.h>`; returns the executable's path.
pub fn build_c(name: &str) -> String {
    build_c_libs(name, &[])
}

/// [`build_c`] linking `libs` too (`-lrdmacm`: librdmacm-dev's headers,
/// our library under that soname).
pub fn build_c_libs(name: &str, libs: &[&str]) -> String {
    build_c_with(name, &[], libs)
}

/// [`build_c`] with extra compiler flags `cflags` and libraries `libs`.
pub fn build_c_with(name: &str, cflags: &[&str], libs: &[&str]) -> String {
    let gcc = require_tool("gcc");
    let src = format!("{}/tests/c/{name}.c", env!("CARGO_MANIFEST_DIR"));
    let exe = profile_dir().join(format!("softrdma-ibverbs-c-{name}"));
    let out = Command::new(gcc)
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-g", "-O1"])
        .args([
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=undefined",
        ])
        .args(cflags)
        .args(["-fno-omit-frame-pointer", &src, "-o"])
        .arg(&exe)
        .args(libs)
        .args(["-libverbs", "-lpthread"])
        .output()
        .expect("gcc");
    assert!(
        out.status.success(),
        "gcc {src} failed (needs libibverbs-dev):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe.to_str().expect("UTF-8 path").to_string()
}

/// Starts a program in the background, its output going to a file.
pub fn start(prog: &str, args: &[&str], env: &[(&str, &str)]) -> (Child, PathBuf) {
    spawn(command(prog, args, env), "bg")
}

/// Waits for a background program (at most `limit`).
pub fn finish((mut c, p): (Child, PathBuf), limit: Duration) -> Output {
    let status = wait(&mut c, Instant::now() + limit);
    Output {
        status,
        out: read(&p),
    }
}

/// The output a background program has written so far.
pub fn output_so_far(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// Runs one program to completion (at most `limit`).
pub fn run(prog: &str, args: &[&str], env: &[(&str, &str)], limit: Duration) -> Output {
    let (mut c, p) = spawn(command(prog, args, env), "run");
    let status = wait(&mut c, Instant::now() + limit);
    Output {
        status,
        out: read(&p),
    }
}

/// Whether something listens on TCP `port` (from /proc/net/tcp{,6}:
/// looking does not consume the server's single accept).
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let mut it = l.split_whitespace();
                let local = it.nth(1).unwrap_or("");
                let state = it.nth(1).unwrap_or("");
                local.ends_with(&want) && state == "0A"
            })
        })
    })
}

/// Runs a server and then its client (the client gets `127.0.0.1` as its
/// last argument); both must finish within `limit`.
pub fn pair(
    prog: &str,
    server_args: &[&str],
    client_args: &[&str],
    port: u16,
    env: &[(&str, &str)],
    limit: Duration,
) -> (Output, Output) {
    let deadline = Instant::now() + limit;
    let (mut s, sp) = spawn(command(prog, server_args, env), "server");
    // The server listens once it has opened the device and set up.
    while !listening(port) {
        if Instant::now() >= deadline || s.try_wait().expect("wait").is_some() {
            let status = wait(&mut s, Instant::now());
            let so = Output {
                status,
                out: read(&sp),
            };
            let co = Output {
                status: None,
                out: "(client not started: the server never listened)".into(),
            };
            return (so, co);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut ca: Vec<&str> = client_args.to_vec();
    ca.push("127.0.0.1");
    let (mut c, cp) = spawn(command(prog, &ca, env), "client");
    let cs = wait(&mut c, deadline);
    // A client that failed leaves the server waiting: give it a moment.
    let ss = wait(
        &mut s,
        if cs == Some(0) {
            deadline
        } else {
            Instant::now() + Duration::from_secs(2)
        },
    );
    (
        Output {
            status: ss,
            out: read(&sp),
        },
        Output {
            status: cs,
            out: read(&cp),
        },
    )
}

/// Panics with both outputs unless both succeeded.
pub fn check_pair(what: &str, (s, c): &(Output, Output)) {
    assert!(
        s.ok() && c.ok(),
        "{what}: server exit {:?}, client exit {:?}\n--- server ---\n{}\n--- client ---\n{}",
        s.status,
        c.status,
        s.out,
        c.out
    );
}

/// Result rows of a perftest report: the numeric lines after the
/// `#bytes` header.
pub fn perftest_rows(out: &str) -> Vec<Vec<f64>> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for l in out.lines() {
        let t = l.trim();
        if t.starts_with("#bytes") {
            in_table = true;
            continue;
        }
        if in_table {
            let nums: Option<Vec<f64>> = t.split_whitespace().map(|w| w.parse().ok()).collect();
            match nums {
                Some(v) if v.len() >= 5 => rows.push(v),
                _ if t.starts_with("---") => in_table = false,
                _ => {}
            }
        }
    }
    rows
}

/// `(bytes, iterations, seconds)` of a pingpong report
/// (`N bytes in S seconds = …` and `I iters in S seconds = U usec/iter`).
pub fn pingpong_figures(out: &str) -> Option<(u64, u64, f64, f64)> {
    let mut bytes = None;
    let mut iters = None;
    let mut mbit = None;
    let mut usec = None;
    for l in out.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.len() >= 7 && w[1] == "bytes" && w[2] == "in" {
            bytes = w[0].parse().ok();
            mbit = w[6].parse().ok();
        }
        if w.len() >= 7 && w[1] == "iters" && w[2] == "in" {
            iters = w[0].parse().ok();
            usec = w[6].parse().ok();
        }
    }
    Some((bytes?, iters?, mbit?, usec?))
}

/// Builds `tests/c/NAME.c` (ASan and UBSan), runs it with its device on
/// `addr` (one test at a time), and requires its own verdict: no sanitizer
/// report, "N checks, 0 failures", exit status 0.
pub fn run_c(name: &str, addr: &str) {
    let exe = build_c(name);
    let _s = serial();
    let o = run(
        &exe,
        &[],
        &[
            ("ASAN_OPTIONS", "abort_on_error=0:detect_leaks=1"),
            ("SOFTRDMA_ADDR", addr),
        ],
        Duration::from_secs(120),
    );
    println!("{}", o.out);
    assert!(!o.out.contains("Sanitizer"), "sanitizer report:\n{}", o.out);
    assert!(o.out.contains(" checks, 0 failures"), "{}", o.out);
    assert_eq!(o.status, Some(0), "{}", o.out);
}
