//! Users' own RDMA programs under `SOFTRDMA_FAULTS`, unmodified, through
//! `softrdma exec`, each process with its own device on 127.68.10.x:
//! perftest (ib_write_bw, ib_read_bw, ib_send_bw), ibv_rc_pingpong with
//! its buffer check (`-c`), rping with its ping check (`-V`), ucx_perftest
//! over rc_verbs, and Open MPI (our ping-pong and allreduce, which check
//! every byte and value) — every one under moderate loss, duplication,
//! reordering and corruption on both sides, and every one must complete
//! and report correct data. Each process says the faults it was given
//! (with their seed) and what it injected: both are checked, so a run
//! without faults cannot pass. (Debian's perftest 4.5 has no data check
//! for its bandwidth tools: those must complete with their figures.)
//!
//! Needs perftest, ibverbs-utils, rdmacm-utils, ucx-utils, openmpi-bin and
//! libopenmpi-dev (scripts/deps installs them) and the built library; one
//! test at a time with the other interop tests (their flock).

#[path = "common/libs.rs"]
mod libs;

use libs::{profile_dir, serial};
use softrdma_testkit::{Done, Proc};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(120);
const SERVER: &str = "127.68.10.1";
const CLIENT: &str = "127.68.10.2";
/// Moderate faults on what each side sends: 1 % lost, 0.5 % duplicated,
/// 0.5 % held back, 0.2 % corrupted.
const FAULTS: &str = "loss=1%,dup=0.5%,reorder=0.5%,corrupt=0.2%";

/// `softrdma exec --lib` with this build's libraries (libs.rs).
fn lib_dir() -> PathBuf {
    libs::lib_dir("softrdma-faults-lib", true)
}

fn require(tool: &str) {
    let path = std::env::var_os("PATH").unwrap_or_default();
    assert!(
        std::env::split_paths(&path).any(|d| d.join(tool).is_file()),
        "{tool} not found: apt-get install -y perftest ibverbs-utils rdmacm-utils ucx-utils \
         openmpi-bin libopenmpi-dev (scripts/deps)"
    );
}

/// `SOFTRDMA_FAULTS=seed=SEED,FAULTS softrdma exec --lib … --addr ADDR --
/// prog args…`, in a clean environment.
fn sx(addr: &str, seed: u64, prog: &str, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_softrdma"));
    c.arg("exec").arg("--lib").arg(lib_dir());
    c.args(["--addr", addr, "--", prog]).args(args);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        // (SOFTRDMA_SAME_HOST passes: the suite runs with the same-host
        // path on and off.)
        if (k.starts_with("SOFTRDMA_") && k != "SOFTRDMA_SAME_HOST")
            || k.starts_with("UCX_")
            || k.starts_with("OMPI_")
            || k == "LD_PRELOAD"
        {
            c.env_remove(k.as_ref());
        }
    }
    c.env("SOFTRDMA_FAULTS", format!("seed={seed},{FAULTS}"))
        .env("SOFTRDMA_POLL_YIELD", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .stdin(Stdio::null());
    c
}

fn spawn(cmd: Command, tag: &str) -> Proc {
    Proc::spawn(cmd, "softrdma-faults-out", tag, true)
}

trait WaitReady {
    fn wait_ready(&mut self, port: u16, addr: &str) -> bool;
}

impl WaitReady for Proc {
    /// Waits until the process listens on TCP `port`, or has its device
    /// bound (UDP 4791 at `addr`) when `port` is 0.
    fn wait_ready(&mut self, port: u16, addr: &str) -> bool {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(30) {
            if ready(port, addr) {
                return true;
            }
            if !self.running() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

fn ready(port: u16, addr: &str) -> bool {
    if port == 0 {
        let ip: std::net::Ipv4Addr = addr.parse().unwrap();
        let want = format!("{:08X}:12B7", u32::from_le_bytes(ip.octets()));
        return std::fs::read_to_string("/proc/net/udp").is_ok_and(|t| {
            t.lines()
                .any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
        });
    }
    let want = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines()
                .any(|l| l.contains(&want) && l.split_whitespace().nth(3) == Some("0A"))
        })
    })
}

/// Runs a server (ready when it listens on `port`, or its device is up
/// for 0) and its client; both must succeed. Returns their outputs.
fn pair(what: &str, server: Command, client: Command, port: u16) -> (Done, Done) {
    let mut s = spawn(server, &format!("{what}-server"));
    assert!(
        s.wait_ready(port, SERVER),
        "{what}: the server did not start:\n{}",
        s.text()
    );
    let c = spawn(client, &format!("{what}-client")).wait(LIMIT);
    let s = s.wait(if c.status == Some(0) {
        LIMIT
    } else {
        Duration::from_secs(3)
    });
    assert_eq!(
        c.status,
        Some(0),
        "{what}: client:\n{}\n--- server:\n{}",
        c.out,
        s.out
    );
    assert_eq!(s.status, Some(0), "{what}: server:\n{}", s.out);
    for (side, d) in [("client", &c), ("server", &s)] {
        faults_were_injected(&format!("{what} {side}"), &d.out);
    }
    println!(
        "{what}: client {:.1}s, server {:.1}s; {}",
        c.secs,
        s.secs,
        injected(&c.out).join(" / ")
    );
    (c, s)
}

/// The "injected faults: …" lines of a process's output.
fn injected(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.split_once(") injected faults: ").map(|x| x.1.to_string()))
        .collect()
}

/// The process ran with the faults (it said so, with a seed) and its
/// devices injected some.
fn faults_were_injected(what: &str, out: &str) {
    assert!(
        out.contains(") injects faults: seed=") && out.contains(",loss=0.01,dup=0.005,"),
        "{what}: no fault announcement:\n{out}"
    );
    let lines = injected(out);
    assert!(!lines.is_empty(), "{what}: no fault report:\n{out}");
    assert!(
        lines.iter().any(|l| l.contains("fault_tx_lost")),
        "{what}: nothing was lost: {lines:?}"
    );
}

#[test]
fn perftest_bandwidth_tools_complete_under_faults() {
    let _s = serial();
    let mut port = 23800;
    for (tool, size) in [
        ("ib_write_bw", "65536"),
        ("ib_read_bw", "65536"),
        ("ib_send_bw", "8192"),
    ] {
        require(tool);
        port += 1;
        let p = port.to_string();
        let args = ["-x", "0", "-p", &p, "-n", "300", "-s", size];
        let mut ca = args.to_vec();
        ca.push(SERVER);
        let (c, _) = pair(
            tool,
            sx(SERVER, 1, tool, &args),
            sx(CLIENT, 2, tool, &ca),
            port,
        );
        // The figures' row: the size, the iterations, a bandwidth.
        let row = c
            .out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(size))
            .unwrap_or_else(|| panic!("{tool}: no result row:\n{}", c.out));
        let f: Vec<f64> = row
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        assert!(f.len() >= 4 && f[1] == 300.0 && f[3] > 0.0, "{tool}: {row}");
    }
}

#[test]
fn ibv_rc_pingpong_checks_its_buffers_under_faults() {
    require("ibv_rc_pingpong");
    let _s = serial();
    let port = 23810;
    let p = port.to_string();
    let args = ["-g", "0", "-p", &p, "-c", "-n", "300", "-s", "4096"];
    let mut ca = args.to_vec();
    ca.push("127.0.0.1");
    let (c, s) = pair(
        "ibv_rc_pingpong",
        sx(SERVER, 3, "ibv_rc_pingpong", &args),
        sx(CLIENT, 4, "ibv_rc_pingpong", &ca),
        port,
    );
    for d in [&c, &s] {
        // `-c` checks every buffer received and fails the run otherwise.
        assert!(d.out.contains("300 iters in"), "{}", d.out);
    }
}

#[test]
fn rping_verifies_its_pings_under_faults() {
    require("rping");
    let _s = serial();
    // Every packet of a ping-pong lost costs rdma_cm's transport timer
    // (2.1 s): few pings.
    let sa = ["-s", "-a", SERVER, "-p", "23811", "-C", "20", "-V", "-v"];
    let ca = ["-c", "-a", SERVER, "-p", "23811", "-C", "20", "-V", "-v"];
    let (c, s) = pair(
        "rping",
        sx(SERVER, 5, "rping", &sa),
        sx(CLIENT, 6, "rping", &ca),
        0,
    );
    // `-V` checks each ping's data; every one came back.
    assert_eq!(
        c.out.matches("ping data: rdma-ping-").count(),
        20,
        "{}",
        c.out
    );
    assert_eq!(
        s.out.matches("server ping data: rdma-ping-").count(),
        20,
        "{}",
        s.out
    );
}

#[test]
fn ucx_perftest_over_rc_verbs_completes_under_faults() {
    require("ucx_perftest");
    let _s = serial();
    for (k, (what, args)) in [
        (
            "put_bw 64 KiB",
            ["-t", "put_bw", "-D", "zcopy", "-s", "65536", "-n", "300"],
        ),
        (
            "am_lat",
            ["-t", "am_lat", "-n", "1000", "-s", "8", "-D", "short"],
        ),
    ]
    .iter()
    .enumerate()
    {
        let port = (23820 + k as u16).to_string();
        let mut a = vec!["-d", "softrdma0:1", "-x", "rc_verbs", "-p", &port];
        a.extend_from_slice(args);
        let mut ca = a.clone();
        ca.push("127.0.0.1");
        // UCX's transport timer is 1 s by default: in a ping-pong every
        // lost packet waits for it (as on any RoCE network). Users testing
        // under loss shorten it, as here.
        let mk = |addr, seed, args: &[&str]| {
            let mut c = sx(addr, seed, "ucx_perftest", args);
            c.env("UCX_RC_TIMEOUT", "10ms");
            c
        };
        let (c, s) = pair(
            &format!("ucx_perftest rc_verbs {what}"),
            mk(SERVER, 7, &a),
            mk(CLIENT, 8, &ca),
            23820 + k as u16,
        );
        assert!(c.out.lines().any(|l| l.starts_with("Final:")), "{}", c.out);
        for d in [&c, &s] {
            assert!(
                !d.out.contains("UCX  ERROR") && !d.out.contains("UCX  WARN"),
                "{}",
                d.out
            );
        }
    }
}

/// Builds tests/ucx/NAME.c with Open MPI's mpicc.
fn mpi_program(name: &str) -> PathBuf {
    require("mpicc.openmpi");
    let dir = profile_dir().join("softrdma-faults-bin");
    std::fs::create_dir_all(&dir).expect("bin dir");
    let out = dir.join(name);
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    let st = Command::new("mpicc.openmpi")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&tmp)
        .arg(format!("{}/tests/ucx/{name}.c", env!("CARGO_MANIFEST_DIR")))
        .status()
        .expect("mpicc.openmpi");
    assert!(st.success(), "mpicc {name}.c");
    std::fs::rename(&tmp, &out).expect("rename");
    out
}

#[test]
fn open_mpi_pingpong_and_allreduce_check_their_data_under_faults() {
    require("mpirun.openmpi");
    let _s = serial();
    for (prog, args, ok) in [
        ("pingpong", vec!["10"], "pingpong ok"),
        ("allreduce", vec![], "allreduce ok"),
    ] {
        let bin = mpi_program(prog);
        let mut v: Vec<String> = [
            "-np",
            "2",
            "--bind-to",
            "none",
            "--mca",
            "pml",
            "ucx",
            "--mca",
            "btl",
            "self",
            "--mca",
            "mtl",
            "^ofi",
            "-x",
            "UCX_TLS=rc_v,self",
            "-x",
            "UCX_NET_DEVICES=softrdma0:1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        v.push(bin.to_string_lossy().into_owned());
        v.extend(args.iter().map(|s| s.to_string()));
        let v: Vec<&str> = v.iter().map(String::as_str).collect();
        // Both ranks on this host: each opens its own device (the
        // automatic loopback choice; --addr "auto" keeps the exec's
        // environment free of a fixed address both would take).
        let d = spawn(sx("auto", 9, "mpirun.openmpi", &v), prog).wait(LIMIT);
        assert_eq!(d.status, Some(0), "{prog}: {:.1}s\n{}", d.secs, d.out);
        assert!(d.out.contains(ok), "{prog}:\n{}", d.out);
        assert!(!d.out.contains("UCX  ERROR"), "{prog}:\n{}", d.out);
        // Both ranks ran with faults and injected some.
        assert_eq!(
            d.out.matches(") injects faults: seed=9,").count(),
            2,
            "{}",
            d.out
        );
        let lines = injected(&d.out);
        assert!(
            lines.len() >= 2 && lines.iter().all(|l| l != "none"),
            "{prog}: {lines:?}\n{}",
            d.out
        );
        println!("Open MPI {prog}: {:.1}s; {}", d.secs, lines.join(" / "));
    }
}

/// `softrdma devinfo -v` shows the faults a device runs with (the seed
/// drawn when none was given) and where they came from; `softrdma perf`
/// counts them with the device's counters, in text and JSON; a bad value
/// is an error naming the variable and what it accepts.
#[test]
fn devinfo_perf_and_bad_values() {
    let cmd = |args: &[&str], faults: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_softrdma"));
        c.args(args).stdin(Stdio::null());
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("SOFTRDMA_") {
                c.env_remove(k);
            }
        }
        if let Some(f) = faults {
            c.env("SOFTRDMA_FAULTS", f);
        }
        c.output().expect("softrdma")
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let row = |t: &str| {
        t.lines()
            .find(|l| l.trim_start().starts_with("faults "))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| panic!("no faults row in\n{t}"))
    };
    let o = cmd(
        &["devinfo", "-v", "-d", "127.68.11.1"],
        Some("seed=42,loss=1%"),
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        row(&text(&o.stdout)),
        "faults seed=42,loss=0.01 (env SOFTRDMA_FAULTS)"
    );
    // Said on stderr when the device opens, and what it injected at close.
    let err = text(&o.stderr);
    assert!(
        err.contains("(127.68.11.1) injects faults: seed=42,loss=0.01 (env SOFTRDMA_FAULTS;"),
        "{err}"
    );
    assert!(err.contains("(127.68.11.1) injected faults: none"), "{err}");
    // Without a seed, the one drawn is shown: the run replays with it.
    let o = cmd(
        &["devinfo", "-v", "-d", "127.68.11.1"],
        Some("on=recv,dup=2%"),
    );
    let r = row(&text(&o.stdout));
    assert!(
        r.starts_with("faults seed=") && r.ends_with(",on=recv,dup=0.02 (env SOFTRDMA_FAULTS)"),
        "{r}"
    );
    let o = cmd(&["devinfo", "-v", "-d", "127.68.11.1"], None);
    assert_eq!(row(&text(&o.stdout)), "faults none (default)");
    assert!(!text(&o.stderr).contains("faults"), "{}", text(&o.stderr));

    for (bad, why) in [
        ("loss=2", "loss=\"2\": want a probability"),
        ("delay=5", "delay=\"5\": want a time with its unit"),
        ("on=send,rnr=1", "not in a rule with on=send"),
    ] {
        let o = cmd(&["devinfo"], Some(bad));
        assert_eq!(o.status.code(), Some(1), "{bad}: {}", text(&o.stderr));
        let e = text(&o.stderr);
        assert!(
            e.contains(&format!("SOFTRDMA_FAULTS={bad:?}: want fault rules")) && e.contains(why),
            "{bad}: {e}"
        );
    }

    // perf: both sides' fault counters, in the text and in the JSON.
    let o = cmd(
        &["perf", "write-bw", "--loopback", "-n", "300", "-s", "65536"],
        Some("seed=3,loss=2%,dup=1%"),
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let t = text(&o.stdout);
    assert!(t.contains("fault_tx_lost"), "{t}");
    assert!(t.contains("fault(s) injected (SOFTRDMA_FAULTS"), "{t}");
    assert!(t.contains("data verification: ok"), "{t}");
    let o = cmd(
        &[
            "perf",
            "write-bw",
            "--loopback",
            "-n",
            "300",
            "-s",
            "65536",
            "--json",
        ],
        Some("seed=3,loss=2%,dup=1%"),
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let lost = |side: &str| v["counters"][side]["fault_tx_lost"].as_u64().unwrap_or(0);
    assert!(lost("client") > 0 && lost("server") > 0, "{v:#}");
}
