//! UCX 1.13, Open MPI 4.1.4 and MPICH 4.0.2 (Debian 12's, unmodified)
//! over softrdma through `softrdma exec`: UCX lists rc_verbs and ud_verbs
//! on softrdma0:1, ucx_perftest runs at the UCT and UCP levels, and MPI
//! programs (our ping-pong and allreduce checks in tests/ucx/, NetPIPE)
//! run with two ranks on one host and with one rank in each of two
//! network namespaces joined by a veth (mpirun's and hydra's launchers
//! reach the other namespace through tests/ucx/nsrsh). Every program
//! checks its data; the logs must show the endpoints on softrdma0:1 and
//! no UCX warning or error.
//!
//! Needs `ucx-utils openmpi-bin libopenmpi-dev mpich libmpich-dev
//! netpipe-openmpi netpipe-mpich2` (scripts/deps installs them) and root
//! for the namespaces; a missing tool or privilege fails the test, it
//! never passes by running nothing. One test at a time (the flock of the
//! ibverbs interop tests): two spinning processes per test already fill
//! the two cores of CI.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(120);

/// `target/<profile>`: two levels up from this test (`…/deps/ucx_mpi-…`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// The newer of `target/<profile>/NAME` and `target/<profile>/deps/NAME`
/// (building the tests leaves the second; `cargo build` the first, which
/// may be older).
fn newest(name: &str) -> PathBuf {
    let prof = profile_dir();
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    [prof.join(name), prof.join("deps").join(name)]
        .into_iter()
        .filter(|p| p.exists())
        .max_by_key(|p| mtime(p))
        .unwrap_or_else(|| {
            panic!(
                "{name} is missing in {}: cargo build the workspace",
                prof.display()
            )
        })
}

/// A directory for `softrdma exec --lib` with this build's
/// `libibverbs.so.1` and `libsoftrdma_preload.so`.
fn lib_dir() -> PathBuf {
    let dir = profile_dir().join("softrdma-ucx-lib");
    std::fs::create_dir_all(&dir).expect("lib dir");
    for (link, so) in [
        ("libibverbs.so.1", "libibverbs.so"),
        ("libsoftrdma_preload.so", "libsoftrdma_preload.so"),
    ] {
        let target = newest(so);
        let l = dir.join(link);
        if std::fs::read_link(&l).ok().as_deref() != Some(target.as_path()) {
            let tmp = dir.join(format!(".{link}.{}", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(&target, &tmp).expect("symlink");
            std::fs::rename(&tmp, &l).expect("rename");
        }
    }
    dir
}

/// Fails, with the install hint, when a program is missing.
fn require(tool: &str) {
    let path = std::env::var_os("PATH").unwrap_or_default();
    if !std::env::split_paths(&path).any(|d| d.join(tool).is_file()) {
        panic!(
            "{tool} not found: these tests need apt-get install -y ucx-utils openmpi-bin \
             libopenmpi-dev mpich libmpich-dev netpipe-openmpi netpipe-mpich2 (scripts/deps)"
        );
    }
}

fn require_root() {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(str::to_string))
        })
        .unwrap_or_default();
    assert_eq!(
        uid, "0",
        "the network-namespace tests must run as root (CI does): ip netns, veth"
    );
}

/// One test at a time, and not during the ibverbs interop tests either.
struct Serial(#[allow(dead_code)] std::fs::File);

fn serial() -> Serial {
    let p = profile_dir().join("softrdma-ibverbs-interop.lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&p)
        .expect("lock file");
    // `flock` the command holds the lock on our descriptor (inherited)
    // until it exits; wait for it with `-x`. The lock stays with the open
    // file description, which this process keeps.
    let st = Command::new("flock")
        .arg("-x")
        .arg("0")
        .stdin(f.try_clone().expect("dup"))
        .status()
        .expect("flock (util-linux)");
    assert!(st.success(), "flock");
    Serial(f)
}

/// `softrdma exec --lib … [--addr A] -- prog args…` with a clean
/// environment (no softrdma, UCX or MPI settings of the caller).
fn sx(addr: Option<&str>, prog: &str, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_softrdma"));
    c.arg("exec").arg("--lib").arg(lib_dir());
    if let Some(a) = addr {
        c.args(["--addr", a]);
    }
    c.arg("--").arg(prog).args(args);
    clean_env(&mut c);
    c
}

fn clean_env(c: &mut Command) {
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("SOFTRDMA_")
            || k.starts_with("UCX_")
            || k.starts_with("OMPI_")
            || k.starts_with("MPIR_")
            || k.starts_with("HYDRA_")
            || k == "LD_PRELOAD"
        {
            c.env_remove(k.as_ref());
        }
    }
    // Two cores: a spinning rank yields now and then (also off loopback).
    c.env("SOFTRDMA_POLL_YIELD", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .stdin(Stdio::null());
}

/// Runs `cmd` in a process group of its own (ip netns exec, a launcher
/// and its ranks), its output into a file.
struct Proc {
    child: Child,
    out: PathBuf,
    start: Instant,
    reaped: bool,
}

impl Drop for Proc {
    /// A test that fails half-way leaves no server behind.
    fn drop(&mut self) {
        if !self.reaped {
            kill_group(self.child.id());
            let _ = self.child.wait();
        }
    }
}

#[derive(Debug)]
struct Done {
    status: Option<i32>,
    out: String,
    secs: f64,
}

impl Done {
    fn ok(&self) -> bool {
        self.status == Some(0)
    }
}

fn spawn(mut cmd: Command, tag: &str) -> Proc {
    let dir = profile_dir().join("softrdma-ucx-out");
    let _ = std::fs::create_dir_all(&dir);
    let out = dir.join(format!("{}-{tag}.txt", std::process::id()));
    let f = std::fs::File::create(&out).expect("output file");
    cmd.stdout(f.try_clone().expect("dup"))
        .stderr(f)
        .process_group(0);
    let child = cmd.spawn().unwrap_or_else(|e| panic!("{tag}: {e}"));
    Proc {
        child,
        out,
        start: Instant::now(),
        reaped: false,
    }
}

fn kill_group(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .stderr(Stdio::null())
        .status();
}

impl Proc {
    fn text(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// Waits up to `limit`; then kills the whole group.
    fn wait(mut self, limit: Duration) -> Done {
        let status = loop {
            match self.child.try_wait().expect("wait") {
                Some(s) => break Some(s.code().unwrap_or(-1)),
                None if self.start.elapsed() >= limit => break None,
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        // Whatever is left of the group (a rank of a failed job).
        kill_group(self.child.id());
        let _ = self.child.wait();
        self.reaped = true;
        Done {
            status,
            out: self.text(),
            secs: self.start.elapsed().as_secs_f64(),
        }
    }

    /// Waits until the process (a ucx_perftest server, which says nothing
    /// until it has a client: its output is a file, fully buffered)
    /// listens on TCP `port`, in whatever network namespace it is.
    fn wait_listen(&mut self, port: u16, limit: Duration) -> bool {
        self.wait_tcp(port, "0A", limit)
    }

    /// Waits until the process has a TCP socket on local `port` in
    /// `state` (/proc/net/tcp: 0A LISTEN, 01 ESTABLISHED).
    fn wait_tcp(&mut self, port: u16, state: &str, limit: Duration) -> bool {
        let t = Instant::now();
        let want = format!(":{port:04X} ");
        while t.elapsed() < limit {
            for f in ["tcp", "tcp6"] {
                let p = format!("/proc/{}/net/{f}", self.child.id());
                let text = std::fs::read_to_string(p).unwrap_or_default();
                // sl local_address rem_address st: st 0A is LISTEN.
                if text.lines().any(|l| {
                    let v: Vec<&str> = l.split_whitespace().collect();
                    v.len() > 3 && format!("{} ", v[1]).ends_with(&want) && v[3] == state
                }) {
                    return true;
                }
            }
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Waits until the output contains `what` (true) or the process ends
    /// or `limit` passes (false).
    fn wait_for(&mut self, what: &str, limit: Duration) -> bool {
        let t = Instant::now();
        while t.elapsed() < limit {
            if self.text().contains(what) {
                return true;
            }
            if let Ok(Some(_)) = self.child.try_wait() {
                return self.text().contains(what);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

fn run(cmd: Command, tag: &str, limit: Duration) -> Done {
    spawn(cmd, tag).wait(limit)
}

/// No UCX warning or error in a log (UCX's DIAG lines, e.g. rdmacm's
/// missing /dev/infiniband/rdma_cm, are allowed).
fn assert_no_ucx_warnings(what: &str, out: &str) {
    let bad: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("UCX  WARN") || l.contains("UCX  ERROR") || l.contains("UCX  FATAL"))
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: UCX warnings/errors:\n{}\n---\n{out}",
        bad.join("\n")
    );
}

// ------------------------------------------------------------ UCX --------

#[test]
fn ucx_info_lists_rc_and_ud_verbs_on_softrdma0() {
    require("ucx_info");
    let _s = serial();
    let d = run(sx(None, "ucx_info", &["-d"]), "ucx_info", LIMIT);
    assert!(d.ok(), "{d:?}");
    // The transports listed on each device.
    let mut dev = String::new();
    let mut tls = Vec::new();
    let mut transport = String::new();
    for l in d.out.lines() {
        if let Some(t) = l.trim().strip_prefix("#      Transport: ") {
            transport = t.to_string();
        } else if let Some(x) = l.trim().strip_prefix("#         Device: ") {
            dev = x.to_string();
            if dev == "softrdma0:1" {
                tls.push(transport.clone());
            }
        }
    }
    let _ = dev;
    assert!(
        tls.contains(&"rc_verbs".to_string()) && tls.contains(&"ud_verbs".to_string()),
        "softrdma0:1 has {tls:?}\n{}",
        d.out
    );
    assert_no_ucx_warnings("ucx_info -d", &d.out);

    // UCX read the GID's interface from the sysfs file the preload
    // serves (the GID type file is read the same way, just before).
    let mut c = sx(None, "ucx_info", &["-d"]);
    c.env("UCX_LOG_LEVEL", "debug");
    let d = run(c, "ucx_info-debug", LIMIT);
    assert!(d.ok(), "{d:?}");
    assert!(
        d.out.contains("RoCE LAG level on softrdma0:1 (lo)"),
        "{}",
        d.out
    );
    assert!(
        !d.out.contains("gid_attrs"),
        "UCX could not read a GID attribute:\n{}",
        d.out
    );

    // Without the preload library UCX does not list the device (its
    // device-node check): the library is what makes it visible.
    let mut c = Command::new(env!("CARGO_BIN_EXE_softrdma"));
    c.arg("exec")
        .arg("--lib")
        .arg(lib_dir())
        .args(["--no-preload", "--", "ucx_info", "-d"]);
    clean_env(&mut c);
    let d = run(c, "ucx_info-nopreload", LIMIT);
    assert!(d.ok(), "{d:?}");
    assert!(!d.out.contains("softrdma0:1"), "{}", d.out);
}

/// The figures of ucx_perftest's `Final:` line: iterations, typical
/// latency (us), overall bandwidth (MB/s).
fn final_line(out: &str) -> Option<(u64, f64, f64)> {
    let l = out.lines().find(|l| l.starts_with("Final:"))?;
    let f: Vec<&str> = l.split_whitespace().collect();
    Some((
        f.get(1)?.parse().ok()?,
        f.get(2)?.parse().ok()?,
        f.get(6)?.parse().ok()?,
    ))
}

/// A ucx_perftest server and client on this host (two processes, each
/// device on its own loopback address). Returns the client's output.
fn perftest(what: &str, args: &[&str], env: &[(&str, &str)], port: u16) -> String {
    let p = port.to_string();
    let mut a: Vec<&str> = args.to_vec();
    a.extend(["-p", &p]);
    let mk = |extra: Option<&str>| {
        let mut v = a.clone();
        v.extend(extra);
        let mut c = sx(None, "ucx_perftest", &v);
        for (k, val) in env {
            c.env(k, val);
        }
        c
    };
    // The server's traffic is captured (pcap) for the RoCE checks.
    let pcap = profile_dir().join(format!(
        "softrdma-ucx-out/{}-{port}.pcap",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&pcap);
    let mut sc = mk(None);
    sc.env("SOFTRDMA_PCAP", &pcap);
    let mut server = spawn(sc, &format!("perftest-server-{port}"));
    assert!(
        server.wait_listen(port, Duration::from_secs(20)),
        "{what}: server did not start:\n{}",
        server.text()
    );
    let client = run(
        mk(Some("127.0.0.1")),
        &format!("perftest-client-{port}"),
        LIMIT,
    );
    let server = server.wait(Duration::from_secs(30));
    assert!(
        client.ok(),
        "{what}: client failed:\n{}\n--- server:\n{}",
        client.out,
        server.out
    );
    assert!(server.ok(), "{what}: server failed:\n{}", server.out);
    assert_no_ucx_warnings(what, &client.out);
    assert_no_ucx_warnings(what, &server.out);
    let f =
        final_line(&client.out).unwrap_or_else(|| panic!("{what}: no Final line:\n{}", client.out));
    assert!(f.0 > 0 && f.1 > 0.0 && f.2 > 0.0, "{what}: {f:?}");
    println!(
        "{what}: {} iterations, {:.2} us, {:.1} MB/s ({:.1}s)",
        f.0, f.1, f.2, client.secs
    );
    client.out
}

#[test]
fn ucx_perftest_uct_rc_verbs_and_ud_verbs() {
    require("ucx_perftest");
    let _s = serial();
    let uct = |tl: &'static str, rest: &[&'static str]| {
        let mut v = vec!["-d", "softrdma0:1", "-x", tl, "-t"];
        v.extend_from_slice(rest);
        v
    };
    let cases: Vec<(&str, Vec<&str>)> = vec![
        (
            "rc_verbs put_bw 64 KiB",
            uct(
                "rc_verbs",
                &["put_bw", "-D", "zcopy", "-s", "65536", "-n", "2000"],
            ),
        ),
        (
            "rc_verbs get 64 KiB",
            uct(
                "rc_verbs",
                &["get", "-D", "zcopy", "-s", "65536", "-n", "2000"],
            ),
        ),
        (
            "rc_verbs am_lat",
            uct("rc_verbs", &["am_lat", "-n", "5000"]),
        ),
        (
            "rc_verbs add_lat",
            uct("rc_verbs", &["add_lat", "-n", "5000"]),
        ),
        (
            "ud_verbs am_lat",
            uct("ud_verbs", &["am_lat", "-n", "5000"]),
        ),
        (
            "ud_verbs am_bw 2 KiB",
            uct(
                "ud_verbs",
                &["am_bw", "-D", "bcopy", "-s", "2048", "-n", "5000"],
            ),
        ),
    ];
    for (i, (what, args)) in cases.iter().enumerate() {
        perftest(what, args, &[], 14100 + i as u16);
    }
}

fn ucp_cases(tls: &str, port: u16) {
    let env = [
        ("UCX_TLS", format!("{tls},self")),
        ("UCX_NET_DEVICES", "softrdma0:1".to_string()),
        ("UCX_LOG_LEVEL", "info".to_string()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let tl = if tls == "rc_v" {
        "rc_verbs"
    } else {
        "ud_verbs"
    };
    let cases: [(&str, &[&str]); 4] = [
        ("tag_lat 8 B", &["-t", "tag_lat", "-n", "5000"]),
        (
            "tag_bw 1 MiB",
            &["-t", "tag_bw", "-s", "1048576", "-n", "100"],
        ),
        (
            "ucp_put_bw 64 KiB",
            &["-t", "ucp_put_bw", "-s", "65536", "-n", "500"],
        ),
        (
            "ucp_get 64 KiB",
            &["-t", "ucp_get", "-s", "65536", "-n", "300"],
        ),
    ];
    for (i, (what, args)) in cases.iter().enumerate() {
        let what = format!("UCX_TLS={tls},self {what}");
        let port = port + i as u16;
        // UCX_LOG_LEVEL=info prints the lanes of each endpoint: the
        // traffic went over softrdma, not a fallback.
        let log = perftest(&what, args, &env, port);
        let want = format!("{tl}/softrdma0:1");
        assert!(
            log.lines()
                .any(|l| l.contains("ep_cfg[") && l.contains(&want)),
            "{what}: no endpoint on {want}:\n{log}"
        );
    }
}

#[test]
fn ucx_perftest_ucp_over_rc_verbs() {
    require("ucx_perftest");
    let _s = serial();
    ucp_cases("rc_v", 14200);
}

#[test]
fn ucx_perftest_ucp_over_ud_verbs() {
    require("ucx_perftest");
    let _s = serial();
    ucp_cases("ud_v", 14300);
}

#[test]
fn ucp_peer_killed_mid_run_fails_with_ucx_error() {
    require("ucx_perftest");
    let _s = serial();
    // One-sided puts: the client always has operations in flight, which
    // its dead peer never acknowledges.
    let args = [
        "-t",
        "ucp_put_bw",
        "-s",
        "65536",
        "-n",
        "100000000",
        "-p",
        "14400",
    ];
    let env = [("UCX_TLS", "rc_v,self"), ("UCX_NET_DEVICES", "softrdma0:1")];
    let mk = |host: Option<&str>| {
        let mut v = args.to_vec();
        v.extend(host);
        let mut c = sx(None, "ucx_perftest", &v);
        c.envs(env);
        c
    };
    let mut server = spawn(mk(None), "kill-server");
    assert!(
        server.wait_listen(14400, Duration::from_secs(20)),
        "{}",
        server.text()
    );
    let client = spawn(mk(Some("127.0.0.1")), "kill-client");
    // Connected, then give the transfer a moment to be under way.
    assert!(
        server.wait_tcp(14400, "01", Duration::from_secs(30)),
        "{}",
        server.text()
    );
    std::thread::sleep(Duration::from_millis(1500));
    kill_group(server.child.id());
    let _ = server.wait(Duration::from_secs(5));
    // The client's QP exhausts its retries (timeout ~1 s x 7 retries) and
    // UCX reports the error: no hang.
    let d = client.wait(Duration::from_secs(60));
    println!("client ended after {:.1}s with {:?}", d.secs, d.status);
    assert!(
        d.status.is_some(),
        "client hung after its peer was killed:\n{}",
        d.out
    );
    assert!(!d.ok(), "{}", d.out);
    assert!(
        d.out.contains("retry counter exceeded")
            || d.out.contains("Endpoint timeout")
            || d.out.contains("unreachable"),
        "no UCX error about the peer:\n{}",
        d.out
    );
}

// ------------------------------------------------------------ MPI --------

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ucx");

/// Builds tests/ucx/NAME.c with `mpicc` into the build directory.
fn mpi_program(mpicc: &str, name: &str, tag: &str) -> PathBuf {
    require(mpicc);
    let dir = profile_dir().join("softrdma-ucx-bin");
    std::fs::create_dir_all(&dir).expect("bin dir");
    let out = dir.join(format!("{name}-{tag}"));
    let tmp = dir.join(format!(".{name}-{tag}.{}", std::process::id()));
    let st = Command::new(mpicc)
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&tmp)
        .arg(format!("{SRC}/{name}.c"))
        .status()
        .unwrap_or_else(|e| panic!("{mpicc}: {e}"));
    assert!(st.success(), "{mpicc} {name}.c");
    std::fs::rename(&tmp, &out).expect("rename");
    out
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mpi {
    OpenMpi,
    Mpich,
}

impl Mpi {
    fn tag(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "ompi",
            Mpi::Mpich => "mpich",
        }
    }
    fn mpicc(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "mpicc.openmpi",
            Mpi::Mpich => "mpicc.mpich",
        }
    }
    fn netpipe(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "NPopenmpi",
            Mpi::Mpich => "NPmpich2",
        }
    }
    /// The launcher and its arguments for two ranks; `hosts`: the two
    /// namespaces' addresses (one rank each, through nsrsh).
    fn launch(
        self,
        hosts: Option<(&str, &str)>,
        per_host: usize,
        tls: &str,
    ) -> (&'static str, Vec<String>) {
        let np = if hosts.is_some() { 2 * per_host } else { 2 }.to_string();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        match self {
            Mpi::OpenMpi => {
                require("mpirun.openmpi");
                let mut v = s(&["-np", &np, "--bind-to", "none"]);
                if let Some((a, b)) = hosts {
                    v.extend(s(&[
                        "--host",
                        &format!("{a}:{per_host},{b}:{per_host}"),
                        "--mca",
                        "plm_rsh_agent",
                    ]));
                    v.push(format!("{SRC}/nsrsh"));
                    v.extend(s(&["--mca", "plm_rsh_no_tree_spawn", "1"]));
                    v.extend(s(&["--mca", "oob_tcp_if_include", &format!("{a}/24")]));
                }
                // pml ucx (its priority is below ob1's on a device that is
                // not an mlx* NIC); no openib/ofi.
                v.extend(s(&[
                    "--mca", "pml", "ucx", "--mca", "btl", "self", "--mca", "mtl", "^ofi",
                ]));
                for e in [
                    format!("UCX_TLS={tls},self"),
                    "UCX_NET_DEVICES=softrdma0:1".into(),
                    "UCX_LOG_LEVEL=info".into(),
                ] {
                    v.push("-x".into());
                    v.push(e);
                }
                if per_host > 1 {
                    // More spinning ranks than cores (README: fewer than 4
                    // cores): ranks yield, so the device process that
                    // hands them their packets runs.
                    v.extend(s(&["-x", "SOFTRDMA_POLL_YIELD=1"]));
                }
                ("mpirun.openmpi", v)
            }
            Mpi::Mpich => {
                require("mpiexec.mpich");
                let mut v = s(&["-n", &np]);
                if let Some((a, b)) = hosts {
                    v.extend(s(&[
                        "-hosts",
                        &format!("{a}:{per_host},{b}:{per_host}"),
                        "-launcher",
                        "ssh",
                        "-launcher-exec",
                    ]));
                    v.push(format!("{SRC}/nsrsh"));
                }
                // Ranks on one host would talk through shared memory.
                for (k, val) in [
                    ("MPIR_CVAR_NOLOCAL", "1".to_string()),
                    ("UCX_TLS", format!("{tls},self")),
                    ("UCX_NET_DEVICES", "softrdma0:1".into()),
                    ("UCX_LOG_LEVEL", "info".into()),
                ] {
                    v.extend(["-genv".to_string(), k.to_string(), val]);
                }
                if per_host > 1 {
                    v.extend(s(&["-genv", "SOFTRDMA_POLL_YIELD", "1"]));
                }
                ("mpiexec.mpich", v)
            }
        }
    }
}

/// Runs `prog args` on two ranks with `mpi`, on one host (`ns` None) or
/// across the two namespaces.
fn mpirun(mpi: Mpi, ns: Option<&Netns>, prog: &Path, args: &[&str], tag: &str) -> Done {
    mpirun_n(mpi, ns, 1, prog, args, tag)
}

/// [`mpirun`] with `per_host` ranks in each namespace (all of them on
/// the namespace's one address: one shared device).
fn mpirun_n(
    mpi: Mpi,
    ns: Option<&Netns>,
    per_host: usize,
    prog: &Path,
    args: &[&str],
    tag: &str,
) -> Done {
    let hosts = ns.map(|n| (n.addr_a.as_str(), n.addr_b.as_str()));
    let (launcher, mut v) = mpi.launch(hosts, per_host, "rc_v");
    v.push(prog.to_string_lossy().into_owned());
    v.extend(args.iter().map(|a| a.to_string()));
    let v: Vec<&str> = v.iter().map(String::as_str).collect();
    let cmd = match ns {
        None => sx(None, launcher, &v),
        Some(n) => {
            // The launcher runs in the first namespace; each rank's device
            // takes its namespace's address (`first`), which is what makes
            // them reach each other.
            let inner = sx(Some("first"), launcher, &v);
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &n.a])
                .arg(inner.get_program())
                .args(inner.get_args());
            clean_env(&mut c);
            c.env(
                "NSRSH_MAP",
                format!("{}={} {}={}", n.addr_a, n.a, n.addr_b, n.b),
            );
            c
        }
    };
    run(cmd, &format!("{}-{tag}", mpi.tag()), LIMIT)
}

fn check_mpi(what: &str, d: &Done, ok_line: &str) {
    assert!(
        d.ok(),
        "{what}: exit {:?} after {:.1}s:\n{}",
        d.status,
        d.secs,
        d.out
    );
    assert!(
        d.out.contains(ok_line),
        "{what}: no {ok_line:?}:\n{}",
        d.out
    );
    assert_no_ucx_warnings(what, &d.out);
    // Both ranks' endpoints to each other on softrdma (UCX_LOG_LEVEL=info).
    let eps = d
        .out
        .lines()
        .filter(|l| l.contains("ep_cfg[") && l.contains("rc_verbs/softrdma0:1"))
        .count();
    assert!(
        eps >= 2,
        "{what}: {eps} endpoints on rc_verbs/softrdma0:1:\n{}",
        d.out
    );
    println!("{what}: ok in {:.1}s", d.secs);
}

fn mpi_suite(mpi: Mpi, ns: Option<&Netns>) {
    let pp = mpi_program(mpi.mpicc(), "pingpong", mpi.tag());
    let ar = mpi_program(mpi.mpicc(), "allreduce", mpi.tag());
    require(mpi.netpipe());
    let where_ = if ns.is_some() {
        "two namespaces"
    } else {
        "one host"
    };
    let d = mpirun(mpi, ns, &pp, &["20"], "pingpong");
    check_mpi(&format!("{mpi:?} pingpong, {where_}"), &d, "pingpong ok");
    print_lines(&d.out, "size ");
    let d = mpirun(mpi, ns, &ar, &[], "allreduce");
    check_mpi(&format!("{mpi:?} allreduce, {where_}"), &d, "allreduce ok");
    if ns.is_none() {
        // Waiting ranks sleep: softrdma's descriptors are readable only
        // while an event is pending, and its progress thread goes idle.
        let idle = mpi_program(mpi.mpicc(), "idle", mpi.tag());
        let d = mpirun(mpi, ns, &idle, &[], "idle");
        check_mpi(&format!("{mpi:?} idle ranks, {where_}"), &d, "idle ok");
        print_lines(&d.out, "of CPU");
    }
    // NetPIPE: its integrity mode checks every message's bytes.
    let out = profile_dir().join(format!(
        "softrdma-ucx-out/np-{}-{}.out",
        mpi.tag(),
        std::process::id()
    ));
    let np = which(mpi.netpipe());
    let o = out.to_string_lossy().into_owned();
    let d = mpirun(
        mpi,
        ns,
        &np,
        &["-i", "-u", "1048576", "-n", "10", "-p", "0", "-o", &o],
        "netpipe",
    );
    check_mpi(
        &format!("{mpi:?} NetPIPE -i, {where_}"),
        &d,
        "Integrity check passed",
    );
    assert!(!d.out.contains("Integrity check failed"), "{}", d.out);
    let d = mpirun(
        mpi,
        ns,
        &np,
        &["-u", "1048576", "-n", "10", "-p", "0", "-o", &o],
        "netpipe",
    );
    check_mpi(&format!("{mpi:?} NetPIPE, {where_}"), &d, " bytes ");
    print_lines(&d.out, "bytes");
}

fn which(tool: &str) -> PathBuf {
    require(tool);
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .expect("found above")
}

fn print_lines(out: &str, pat: &str) {
    for l in out.lines().filter(|l| l.contains(pat)) {
        println!("  {l}");
    }
}

#[test]
fn openmpi_one_host() {
    let _s = serial();
    mpi_suite(Mpi::OpenMpi, None);
}

#[test]
fn mpich_one_host() {
    let _s = serial();
    mpi_suite(Mpi::Mpich, None);
}

#[test]
fn mpi_rank_that_dies_fails_the_job() {
    let _s = serial();
    for mpi in [Mpi::OpenMpi, Mpi::Mpich] {
        let pp = mpi_program(mpi.mpicc(), "pingpong", mpi.tag());
        // Rank 1 exits in the middle of the 64 KiB round trips.
        let d = mpirun(mpi, None, &pp, &["20", "5"], "dies");
        println!(
            "{mpi:?}: job ended after {:.1}s with {:?}",
            d.secs, d.status
        );
        assert!(
            d.status.is_some(),
            "{mpi:?}: the job hung after a rank died:\n{}",
            d.out
        );
        assert!(!d.ok(), "{mpi:?}: {}", d.out);
        assert!(d.out.contains("exiting abruptly"), "{}", d.out);
    }
}

// ----------------------------------------------------- namespaces --------

/// Two network namespaces ("hosts") joined by a veth pair, MTU 9000.
struct Netns {
    a: String,
    b: String,
    addr_a: String,
    addr_b: String,
}

fn ip(args: &[&str]) {
    let o = Command::new("ip")
        .args(args)
        .output()
        .expect("ip (iproute2)");
    assert!(
        o.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
}

impl Netns {
    fn new() -> Netns {
        require_root();
        require("ip");
        let id = std::process::id() % 100_000;
        let n = Netns {
            a: format!("sru{id}a"),
            b: format!("sru{id}b"),
            addr_a: "198.18.0.1".into(),
            addr_b: "198.18.0.2".into(),
        };
        let (va, vb) = (format!("sru{id}va"), format!("sru{id}vb"));
        for x in [&n.a, &n.b] {
            let _ = Command::new("ip")
                .args(["netns", "del", x])
                .stderr(Stdio::null())
                .status();
            ip(&["netns", "add", x]);
        }
        ip(&[
            "link", "add", &va, "netns", &n.a, "type", "veth", "peer", "name", &vb, "netns", &n.b,
        ]);
        for (ns, dev, addr) in [(&n.a, &va, &n.addr_a), (&n.b, &vb, &n.addr_b)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "mtu", "9000", "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        n
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for x in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", x]).status();
        }
    }
}

#[test]
fn openmpi_across_two_namespaces() {
    let _s = serial();
    let n = Netns::new();
    mpi_suite(Mpi::OpenMpi, Some(&n));
}

/// Several ranks per host on the host's one address (issue 19): the
/// ranks of a namespace share its device, as ranks share a NIC.
fn ranks_share_the_host_address(mpi: Mpi) {
    let n = Netns::new();
    let ar = mpi_program(mpi.mpicc(), "allreduce", mpi.tag());
    let d = mpirun_n(mpi, Some(&n), 4, &ar, &[], "allreduce-4x2");
    check_mpi(
        &format!("{mpi:?} allreduce, 4 ranks in each of two namespaces"),
        &d,
        "allreduce ok (8 ranks)",
    );
}

#[test]
fn openmpi_four_ranks_per_namespace_share_its_address() {
    let _s = serial();
    ranks_share_the_host_address(Mpi::OpenMpi);
}

#[test]
fn mpich_four_ranks_per_namespace_share_its_address() {
    let _s = serial();
    ranks_share_the_host_address(Mpi::Mpich);
}

#[test]
fn mpich_across_two_namespaces() {
    let _s = serial();
    let n = Netns::new();
    mpi_suite(Mpi::Mpich, Some(&n));
}

#[test]
fn unreachable_peer_address_says_which_and_how_to_set_it() {
    require("ucx_perftest");
    let _s = serial();
    let n = Netns::new();
    let args = [
        "-d",
        "softrdma0:1",
        "-x",
        "rc_verbs",
        "-t",
        "am_lat",
        "-n",
        "1000",
        "-p",
        "14500",
    ];
    let in_ns = |ns: &str, addr: Option<&str>, host: Option<&str>| {
        let mut v = args.to_vec();
        v.extend(host);
        let inner = sx(addr, "ucx_perftest", &v);
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns])
            .arg(inner.get_program())
            .args(inner.get_args());
        clean_env(&mut c);
        c
    };
    // The server is bound to its namespace's address; the client was
    // left on loopback (the default), which the server cannot reach.
    let mut server = spawn(in_ns(&n.a, Some("first"), None), "unreach-server");
    assert!(
        server.wait_listen(14500, Duration::from_secs(20)),
        "{}",
        server.text()
    );
    let mut client = spawn(in_ns(&n.b, None, Some(&n.addr_a)), "unreach-client");
    let want = format!("cannot reach the peer at {}", n.addr_a);
    let seen = client.wait_for(&want, Duration::from_secs(30));
    let server_saw = server.wait_for(
        "no softrdma device of this host is at 127.0.0.1",
        Duration::from_secs(30),
    );
    let c = client.wait(Duration::from_secs(0));
    let s = server.wait(Duration::from_secs(0));
    assert!(
        seen,
        "client did not say which address is unreachable:\n{}",
        c.out
    );
    assert!(c.out.contains("--addr"), "{}", c.out);
    assert!(
        server_saw,
        "server did not say the peer is on loopback:\n{}",
        s.out
    );
    println!(
        "client: {}",
        c.out
            .lines()
            .find(|l| l.contains("softrdma:"))
            .unwrap_or("")
    );
    println!(
        "server: {}",
        s.out
            .lines()
            .find(|l| l.contains("softrdma:"))
            .unwrap_or("")
    );
}

#[test]
fn uct_over_ipv6_between_namespaces() {
    // UD and RC between IPv6 GIDs (UD receives report wc.sl = 1; UCX then
    // compares the whole destination GID of the GRH with its own).
    require("ucx_perftest");
    let _s = serial();
    let n = Netns::new();
    for (ns, dev, a) in [(&n.a, "a", "fd00:5::1"), (&n.b, "b", "fd00:5::2")] {
        let id = std::process::id() % 100_000;
        let dev = format!("sru{id}v{dev}");
        ip(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("{a}/64"),
            "dev",
            &dev,
            "nodad",
        ]);
    }
    for (i, tl) in ["ud_verbs", "rc_verbs"].into_iter().enumerate() {
        let port = (14600 + i as u16).to_string();
        let args = [
            "-d",
            "softrdma0:1",
            "-x",
            tl,
            "-t",
            "am_lat",
            "-n",
            "2000",
            "-p",
            &port,
        ];
        let in_ns = |ns: &str, addr: &str, host: Option<&str>| {
            let mut v = args.to_vec();
            v.extend(host);
            let inner = sx(Some(addr), "ucx_perftest", &v);
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns])
                .arg(inner.get_program())
                .args(inner.get_args());
            clean_env(&mut c);
            c
        };
        let mut server = spawn(in_ns(&n.a, "fd00:5::1", None), &format!("v6-server-{tl}"));
        assert!(
            server.wait_listen(14600 + i as u16, Duration::from_secs(20)),
            "{}",
            server.text()
        );
        // The control connection runs over IPv4; RoCE over IPv6.
        let c = run(
            in_ns(&n.b, "fd00:5::2", Some(&n.addr_a)),
            &format!("v6-client-{tl}"),
            LIMIT,
        );
        let s = server.wait(Duration::from_secs(30));
        assert!(
            c.ok() && s.ok(),
            "{tl} over IPv6:\n{}\n--- server:\n{}",
            c.out,
            s.out
        );
        assert_no_ucx_warnings(tl, &c.out);
        let f = final_line(&c.out).unwrap_or_else(|| panic!("{tl}: no Final line:\n{}", c.out));
        assert_eq!(f.0, 2000, "{tl}: {f:?}");
        println!("{tl} am_lat over IPv6: {:.2} us", f.1);
    }
}
