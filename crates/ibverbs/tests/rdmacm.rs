//! Unmodified rdma_cm programs over softrdma's librdmacm.so.1 (the same
//! file as its libibverbs.so.1): rdmacm-utils (rping, ucmatose, udaddy,
//! rdma_server/rdma_client, cmtime), perftest with `-R`, qperf `-cm1` and
//! fio's rdma engine, each server and client its own process on this
//! machine, one pair at a time (the interop flock).
//!
//! The server's device is bound to 127.0.77.1 and the client's to
//! 127.0.77.2 (`SOFTRDMA_ADDR`), out of the range other tests' devices
//! take (127.0.0.x), so that a parallel test cannot hold the address the
//! client is told to connect to. The client starts once the server's
//! device socket exists.
//!
//! The `netns_*` tests run rping, ucmatose, udaddy, `ib_send_bw -R` and
//! `ib_read_lat -R` across two network namespaces joined by a veth pair
//! (server 10.78.0.1, client 10.78.0.2, MTU 1500); they need root and
//! iproute2 (CI has them) and fail without them.
//!
//! Needs Debian's rdmacm-utils, perftest, qperf and fio (CI installs
//! them); a missing tool fails the test rather than skipping it.

mod common;

use common::*;
use softrdma_testkit::{ip, wait_deadline as wait_until};
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(60);
const SERVER: &str = "127.0.77.1";
const CLIENT: &str = "127.0.77.2";

/// Where a pair runs: each side's device address (`SOFTRDMA_ADDR`) and,
/// across hosts, the network namespace it runs in.
struct Site {
    server: String,
    client: String,
    server_ns: Option<String>,
    client_ns: Option<String>,
}

impl Site {
    /// Both on this host's loopback, 127.0.77.1 and 127.0.77.2.
    fn loopback() -> Site {
        Site {
            server: SERVER.into(),
            client: CLIENT.into(),
            server_ns: None,
            client_ns: None,
        }
    }

    /// The server in `hosts.a`, the client in `hosts.b`.
    fn across(hosts: &Hosts) -> Site {
        Site {
            server: hosts.addr_a.clone(),
            client: hosts.addr_b.clone(),
            server_ns: Some(hosts.a.clone()),
            client_ns: Some(hosts.b.clone()),
        }
    }
}

/// `prog args` with its device at `addr`, inside namespace `ns` if given
/// (`ip netns exec` execs the program: the child's pid is the program's).
fn cm_command(prog: &str, args: &[&str], ns: Option<&str>, addr: &str) -> Command {
    let env = [("SOFTRDMA_ADDR", addr)];
    match ns {
        None => command(prog, args, &env),
        Some(ns) => {
            let exe = require_tool(prog);
            let mut a = vec!["netns", "exec", ns, exe.to_str().expect("UTF-8 path")];
            a.extend_from_slice(args);
            command("ip", &a, &env)
        }
    }
}

/// Whether a process has a UDP socket bound to `ip:port` (the server's
/// device), looked up in that process's own network namespace.
fn udp_bound(pid: u32, ip: Ipv4Addr, port: u16) -> bool {
    let want = format!("{:08X}:{port:04X}", u32::from_le_bytes(ip.octets()));
    std::fs::read_to_string(format!("/proc/{pid}/net/udp")).is_ok_and(|t| {
        t.lines()
            .skip(1)
            .any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
    })
}

/// How a pair ends.
#[derive(Clone, Copy, PartialEq)]
enum ServerEnds {
    /// On its own, successfully.
    Exits,
    /// Never (cmtime, qperf's daemon): stopped once the client is done.
    Stopped,
}

/// A pair on loopback (see `cm_pair_at`).
fn cm_pair(
    server: (&str, &[&str]),
    client: (&str, &[&str]),
    ready: Ready,
    ends: ServerEnds,
) -> (String, String) {
    cm_pair_at(&Site::loopback(), server, client, ready, ends)
}

/// Runs a server, waits until its device socket is bound (or, for
/// `tcp_port`, its TCP port listens), runs the client, and checks both.
/// Returns (server output, client output).
fn cm_pair_at(
    site: &Site,
    server: (&str, &[&str]),
    client: (&str, &[&str]),
    ready: Ready,
    ends: ServerEnds,
) -> (String, String) {
    let deadline = Instant::now() + LIMIT;
    let (mut s, sp) = {
        let mut c = cm_command(server.0, server.1, site.server_ns.as_deref(), &site.server);
        let (f, p) = out_file("cm-server");
        c.stdout(f.try_clone().unwrap()).stderr(f);
        (c.spawn().expect("spawn server"), p)
    };
    loop {
        let up = match ready {
            Ready::Device => udp_bound(s.id(), site.server.parse().unwrap(), 4791),
            Ready::Tcp(p) => tcp_listening(s.id(), p),
        };
        if up {
            break;
        }
        if Instant::now() >= deadline || s.try_wait().unwrap().is_some() {
            let _ = s.kill();
            let _ = s.wait();
            panic!(
                "{} {:?}: the server never got ready\n{}",
                server.0,
                server.1,
                std::fs::read_to_string(&sp).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let c = run_command(
        cm_command(client.0, client.1, site.client_ns.as_deref(), &site.client),
        LIMIT,
    );
    let status = match ends {
        ServerEnds::Exits => wait_until(&mut s, deadline),
        ServerEnds::Stopped => {
            let _ = s.kill();
            let _ = s.wait();
            Some(0)
        }
    };
    let so = std::fs::read_to_string(&sp).unwrap_or_default();
    let _ = std::fs::remove_file(&sp);
    assert!(
        c.ok() && status == Some(0),
        "{} {:?} / {} {:?}: server exit {status:?}, client exit {:?}\n--- server ---\n{so}\n--- client ---\n{}",
        server.0,
        server.1,
        client.0,
        client.1,
        c.status,
        c.out
    );
    (so, c.out)
}

/// Runs a command to completion (killed after `limit`); output and the
/// time it took.
fn run_command(mut c: Command, limit: Duration) -> Output {
    let (f, p) = out_file("cm-client");
    c.stdout(f.try_clone().unwrap()).stderr(f);
    let mut child = c.spawn().expect("spawn");
    let status = wait_until(&mut child, Instant::now() + limit);
    let out = std::fs::read_to_string(&p).unwrap_or_default();
    let _ = std::fs::remove_file(&p);
    Output { status, out }
}

#[derive(Clone, Copy)]
enum Ready {
    Device,
    Tcp(u16),
}

fn out_file(tag: &str) -> (std::fs::File, std::path::PathBuf) {
    let dir = profile_dir().join("softrdma-ibverbs-out");
    let _ = std::fs::create_dir_all(&dir);
    let p = dir.join(format!("{}-{tag}.txt", std::process::id()));
    (std::fs::File::create(&p).unwrap(), p)
}

/// Whether TCP `port` listens in the network namespace of process `pid`.
fn tcp_listening(pid: u32, port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["tcp", "tcp6"].iter().any(|f| {
        std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let mut it = l.split_whitespace();
                let local = it.nth(1).unwrap_or("");
                let state = it.nth(1).unwrap_or("");
                local.ends_with(&want) && state == "0A"
            })
        })
    })
}

/// `(symbol, version)` of every RDMACM_1.x function a library exports.
fn rdmacm_symbols(lib: &Path) -> Vec<(String, String)> {
    let out = Command::new(require_tool("objdump"))
        .arg("-T")
        .arg(lib)
        .output()
        .expect("objdump");
    let mut v: Vec<(String, String)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(" DF ") && l.contains("RDMACM_"))
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let name = w.last()?.to_string();
            let ver = w[w.len() - 2]
                .trim_matches(|c| c == '(' || c == ')')
                .to_string();
            Some((name, ver))
        })
        .collect();
    v.sort();
    v
}

#[test]
fn exports_every_symbol_of_debians_librdmacm() {
    let debian = Path::new("/usr/lib/x86_64-linux-gnu/librdmacm.so.1");
    assert!(
        debian.exists(),
        "{} missing: apt-get install librdmacm1 (librdmacm-dev)",
        debian.display()
    );
    let theirs = rdmacm_symbols(debian);
    let ours = rdmacm_symbols(&lib_dir().join("librdmacm.so.1"));
    assert_eq!(theirs.len(), 68, "Debian's librdmacm: {theirs:?}");
    assert_eq!(ours, theirs);
    // The layout check of build.rs ran against this header.
    assert!(Path::new("/usr/include/rdma/rdma_cma.h").exists());
}

#[test]
fn programs_load_our_library_under_both_names() {
    let out = Command::new(require_tool("ldd"))
        .arg(require_tool("rping"))
        .env("LD_LIBRARY_PATH", lib_dir())
        .output()
        .expect("ldd");
    let text = String::from_utf8_lossy(&out.stdout);
    let dir = lib_dir();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("librdmacm.so.1"))
        .unwrap_or_else(|| panic!("librdmacm.so.1 not in\n{text}"));
    assert!(
        line.contains(&dir.display().to_string()),
        "librdmacm.so.1 resolves elsewhere: {line}"
    );
    // rping also needs libibverbs.so.1: the loader found it already
    // mapped (librdmacm.so.1 is the same file, whose soname it is), so no
    // second object is loaded.
    assert!(
        !text
            .lines()
            .any(|l| l.trim_start().starts_with("libibverbs.so.1")),
        "a second object for libibverbs.so.1:\n{text}"
    );
    // Both names are the same file: one object in the process.
    let a = std::fs::canonicalize(dir.join("librdmacm.so.1")).unwrap();
    let b = std::fs::canonicalize(dir.join("libibverbs.so.1")).unwrap();
    assert_eq!(a, b);
}

/// rping with `-C 10 -V -v` (and `extra`): ten verified pings each way.
fn rping_at(site: &Site, extra: &[&str]) {
    let mut sa = vec!["-s", "-a", &site.server, "-C", "10", "-V", "-v"];
    sa.extend_from_slice(extra);
    let mut ca = vec!["-c", "-a", &site.server, "-C", "10", "-V", "-v"];
    ca.extend_from_slice(extra);
    let (so, co) = cm_pair_at(
        site,
        ("rping", &sa),
        ("rping", &ca),
        Ready::Device,
        ServerEnds::Exits,
    );
    assert_eq!(co.matches("ping data: rdma-ping-").count(), 10, "{co}");
    assert_eq!(
        so.matches("server ping data: rdma-ping-").count(),
        10,
        "{so}"
    );
    assert!(so.contains("DISCONNECT EVENT"), "{so}");
}

/// A QP the program created with `ibv_create_qp` and put in the id
/// itself (`id->qp = qp`, as uDAPL's cma provider does before
/// `rdma_accept`): the REQ and REP carry its number (not conn_param's,
/// not 0), accept and the REP move it to RTS (ESTABLISHED, not
/// CONNECT_RESPONSE), disconnect moves it to ERR, and a message goes each
/// way (tests/c/cm_own_qp.c, built with ASan/UBSan).
#[test]
fn a_qp_the_program_puts_in_the_id() {
    let _s = serial();
    let exe = build_c_libs("cm_own_qp", &["-lrdmacm"]);
    let (so, co) = cm_pair(
        (&exe, &["server", SERVER, "7471"]),
        (&exe, &["client", SERVER, "7471"]),
        Ready::Device,
        ServerEnds::Exits,
    );
    let qpn = |out: &str, what: &str| -> u32 {
        out.lines()
            .find_map(|l| l.strip_prefix(what))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {what:?} in\n{out}"))
    };
    assert_eq!(qpn(&so, "peer qpn "), qpn(&co, "own qpn "), "{so}\n{co}");
    assert_eq!(qpn(&co, "peer qpn "), qpn(&so, "own qpn "), "{so}\n{co}");
    assert!(so.ends_with("ok\n") && co.ends_with("ok\n"), "{so}\n{co}");
}

#[test]
fn rping() {
    let _s = serial();
    for extra in [&[][..], &["-q"][..]] {
        rping_at(&Site::loopback(), extra);
    }
}

/// ucmatose or udaddy (UD over SIDR), with `extra`: rdma_cm's two test
/// programs share their options and their verdict, both sides complete
/// with status 0.
fn cmatose_at(tool: &str, site: &Site, extra: &[&str]) {
    let mut sa = vec!["-b", &site.server];
    sa.extend_from_slice(extra);
    let mut ca = vec!["-s", &site.server];
    ca.extend_from_slice(extra);
    let (so, co) = cm_pair_at(
        site,
        (tool, &sa),
        (tool, &ca),
        Ready::Device,
        ServerEnds::Exits,
    );
    for o in [&so, &co] {
        assert!(
            o.contains("test complete") && o.contains("return status 0"),
            "{tool} {extra:?}: {o}"
        );
    }
}

#[test]
fn ucmatose() {
    let _s = serial();
    for extra in [
        &[][..],
        &["-c", "10"][..],
        &["-c", "4", "-P", "ib"][..],
        &["-c", "2", "-m"][..],
    ] {
        cmatose_at("ucmatose", &Site::loopback(), extra);
    }
}

#[test]
fn ucmatose_tos_and_ack_timeout() {
    let _s = serial();
    cmatose_at("ucmatose", &Site::loopback(), &["-t", "32", "-a", "16"]);
}

#[test]
fn udaddy() {
    let _s = serial();
    for extra in [&[][..], &["-c", "4"][..]] {
        cmatose_at("udaddy", &Site::loopback(), extra);
    }
}

#[test]
fn rdma_server_and_client() {
    let _s = serial();
    let (so, co) = cm_pair(
        ("rdma_server", &[]),
        ("rdma_client", &["-s", SERVER]),
        Ready::Device,
        ServerEnds::Exits,
    );
    assert!(so.contains("rdma_server: end 0"), "{so}");
    assert!(co.contains("rdma_client: end 0"), "{co}");
}

#[test]
fn cmtime() {
    let _s = serial();
    let (_, co) = cm_pair(
        ("cmtime", &["-b", SERVER, "-c", "100"]),
        ("cmtime", &["-s", SERVER, "-c", "100"]),
        Ready::Device,
        ServerEnds::Stopped,
    );
    for step in [
        "resolve addr",
        "resolve route",
        "connect",
        "disconnect",
        "destroy",
    ] {
        assert!(co.contains(step), "{step} missing in\n{co}");
    }
    println!("{co}");
}

/// A perftest pair with `-R` (rdma_cm) on loopback.
fn perftest_cm(tool: &str, args: &[&str]) {
    perftest_cm_at(&Site::loopback(), tool, args);
}

/// A perftest pair with `-R` (rdma_cm), checked like the verbs ones.
fn perftest_cm_at(site: &Site, tool: &str, args: &[&str]) {
    let mut sa = vec!["-R", "-x", "0"];
    sa.extend_from_slice(args);
    let mut ca = sa.clone();
    ca.push(&site.server);
    let (_, co) = cm_pair_at(
        site,
        (tool, &sa),
        (tool, &ca),
        Ready::Device,
        ServerEnds::Exits,
    );
    assert!(co.contains("rdma_cm QPs\t : ON"), "{co}");
    let rows = perftest_rows(&co);
    assert!(!rows.is_empty(), "{tool} {args:?}: no result rows in\n{co}");
    for r in &rows {
        assert!(r[1] > 0.0 && r[3] > 0.0, "{tool} {args:?}: {r:?}");
        println!("{tool} -R {args:?}: {r:?}");
    }
}

#[test]
fn perftest_rdma_cm() {
    let _s = serial();
    for t in ["ib_send_bw", "ib_write_bw", "ib_read_bw", "ib_atomic_bw"] {
        perftest_cm(t, &["-n", "200"]);
    }
    for t in [
        "ib_send_lat",
        "ib_write_lat",
        "ib_read_lat",
        "ib_atomic_lat",
    ] {
        perftest_cm(t, &["-n", "200"]);
    }
    perftest_cm("ib_send_bw", &["-n", "200", "-c", "UD"]);
    perftest_cm("ib_send_lat", &["-n", "200", "-c", "UD"]);
    perftest_cm("ib_send_bw", &["-n", "200", "-q", "4"]);
    perftest_cm("ib_write_bw", &["-n", "200", "-q", "4"]);
}

/// Each test after the first takes ~6 s more than it runs: Debian's qperf
/// 0.4.11 sends the server's port to the client before its
/// `rdma_listen` (fixed upstream after 0.4.11: linux-rdma/qperf 118a571,
/// "Fix rdmacm race"), and its server child opens softrdma's device only
/// in that listen, so the client's first REQ finds no device bound and
/// is lost; the CM's retry connects. (With rxe the REQ would meet the
/// kernel's CM without a listener and be rejected.)
#[test]
fn qperf_cm() {
    let _s = serial();
    let (_, co) = cm_pair(
        ("qperf", &[]),
        (
            "qperf",
            &[
                "-cm1",
                "-t",
                "1",
                // qperf's 5 s default for its synchronisation messages ran
                // out once under CI load (two cores, every test binary).
                "-to",
                "20",
                SERVER,
                "rc_bw",
                "rc_lat",
                "rc_rdma_write_bw",
                "rc_rdma_read_lat",
            ],
        ),
        Ready::Tcp(19765),
        ServerEnds::Stopped,
    );
    for t in [
        "rc_bw:",
        "rc_lat:",
        "rc_rdma_write_bw:",
        "rc_rdma_read_lat:",
    ] {
        assert!(co.contains(t), "{t} missing in\n{co}");
    }
    assert_eq!(co.matches("bw  =").count(), 2, "{co}");
    assert_eq!(co.matches("latency  =").count(), 2, "{co}");
    println!("{co}");
}

#[test]
fn fio_rdma_engine() {
    let _s = serial();
    // `--verb=send` is left out: fio's client connects with rnr_retry_count
    // 0 (its conn_param is zeroed) and relies on a 500 ms sleep for the
    // server to post its receives first, so under CI load one early SEND
    // meets an empty receive queue, the RNR NAK is fatal (status 13) and
    // both processes wait for ever. It ran here when the machine was idle.
    for (i, verb) in ["write", "read"].iter().enumerate() {
        let port = (19300 + i).to_string();
        let common = |rw: &str| {
            vec![
                format!("--name=rdma-{verb}"),
                "--ioengine=rdma".into(),
                format!("--hostname={SERVER}"),
                format!("--port={port}"),
                format!("--verb={verb}"),
                format!("--rw={rw}"),
                "--bs=64k".into(),
                "--size=4m".into(),
                "--thread".into(),
            ]
        };
        // fio's rdma engine: the reading job is the server.
        let sa = common("read");
        let ca = common("write");
        let sa: Vec<&str> = sa.iter().map(String::as_str).collect();
        let ca: Vec<&str> = ca.iter().map(String::as_str).collect();
        let (_, co) = cm_pair(("fio", &sa), ("fio", &ca), Ready::Device, ServerEnds::Exits);
        assert!(co.contains("err= 0"), "{co}");
        assert!(co.contains("io=4096KiB"), "{co}");
    }
}

// ----------------------------------------------------- namespaces --------

/// Two network namespaces ("hosts") joined by a veth pair (MTU 1500, so
/// the path MTU is 1024), removed again when dropped, also when a test
/// fails.
struct Hosts {
    a: String,
    b: String,
    addr_a: String,
    addr_b: String,
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

impl Hosts {
    fn new() -> Hosts {
        let id = std::process::id() % 100_000;
        let h = Hosts {
            a: format!("srcm{id}a"),
            b: format!("srcm{id}b"),
            addr_a: "10.78.0.1".into(),
            addr_b: "10.78.0.2".into(),
        };
        let (va, vb) = (format!("srcm{id}va"), format!("srcm{id}vb"));
        for ns in [&h.a, &h.b] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(std::process::Stdio::null())
                .status();
            ip(&["netns", "add", ns]);
        }
        ip(&[
            "link", "add", &va, "netns", &h.a, "type", "veth", "peer", "name", &vb, "netns", &h.b,
        ]);
        for (ns, dev, addr) in [(&h.a, &va, &h.addr_a), (&h.b, &vb, &h.addr_b)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        h
    }
}

#[test]
fn netns_rping() {
    let _s = serial();
    let hosts = Hosts::new();
    for extra in [&[][..], &["-q"][..]] {
        rping_at(&Site::across(&hosts), extra);
    }
}

#[test]
fn netns_ucmatose() {
    let _s = serial();
    let hosts = Hosts::new();
    for extra in [&[][..], &["-c", "4"][..]] {
        cmatose_at("ucmatose", &Site::across(&hosts), extra);
    }
}

#[test]
fn netns_udaddy() {
    let _s = serial();
    let hosts = Hosts::new();
    cmatose_at("udaddy", &Site::across(&hosts), &[]);
}

#[test]
fn netns_perftest_rdma_cm() {
    let _s = serial();
    let hosts = Hosts::new();
    let site = Site::across(&hosts);
    perftest_cm_at(&site, "ib_send_bw", &["-n", "200"]);
    perftest_cm_at(&site, "ib_read_lat", &["-n", "200"]);
}

// ----------------------------------------------------- bad endings --------

/// A background program, killed when dropped (also when a test fails).
struct Bg {
    child: std::process::Child,
    out: std::path::PathBuf,
}

impl Bg {
    fn start(c: Command, tag: &str) -> Bg {
        let mut c = c;
        let (f, out) = out_file(tag);
        c.stdout(f.try_clone().unwrap()).stderr(f);
        Bg {
            child: c.spawn().expect("spawn"),
            out,
        }
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// Waits until the program's device socket at `ip` is bound.
    fn wait_device(&mut self, ip: &str) {
        let deadline = Instant::now() + LIMIT;
        while !udp_bound(self.child.id(), ip.parse().unwrap(), 4791) {
            assert!(
                Instant::now() < deadline && self.child.try_wait().unwrap().is_none(),
                "the server never got ready\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.out);
    }
}

/// rping to a device whose port 7174 has no listener (a ucmatose server
/// holds the device, listening on 7471): the REQ gets REJ reason 8 and
/// rping ends with RDMA_CM_EVENT_REJECTED at once — well inside 10 s,
/// where an unanswered REQ would take 15 retries of 6 s.
#[test]
fn rping_to_a_port_nobody_listens_on_is_rejected() {
    let _s = serial();
    let site = Site::loopback();
    let mut other = Bg::start(
        cm_command("ucmatose", &["-b", SERVER], None, SERVER),
        "cm-other",
    );
    other.wait_device(SERVER);
    let t = Instant::now();
    let c = run_command(
        cm_command(
            "rping",
            &["-c", "-a", SERVER, "-C", "3", "-v"],
            None,
            &site.client,
        ),
        Duration::from_secs(10),
    );
    let took = t.elapsed();
    println!(
        "rping to a port without listener: exit {:?} after {took:?}",
        c.status
    );
    assert!(
        c.status.is_some(),
        "rping still waiting after 10 s:\n{}",
        c.out
    );
    assert!(!c.ok(), "{}", c.out);
    assert!(
        c.out.contains("RDMA_CM_EVENT_REJECTED, error 8"),
        "{}",
        c.out
    );
    assert!(!c.out.contains("ping data"), "{}", c.out);
}

/// A running client whose server is killed (SIGKILL, so no DREQ) ends:
/// `ib_write_bw -R` always has WRITEs outstanding, its RC QP runs out of
/// retries (7 × the 2.1 s ACK timeout of the path's packet lifetime) and
/// the client exits with a retry-exceeded completion instead of waiting
/// forever (its `-D 100` would end it only after 100 s).
///
/// A client that is only waiting for its peer (rping between two pings)
/// has nothing outstanding and waits on: the kernel sends a DREQ for a
/// process that dies, but nobody is left to send one for a softrdma
/// process that is killed.
#[test]
fn a_client_whose_server_is_killed_ends() {
    let _s = serial();
    let site = Site::loopback();
    let args = ["-R", "-x", "0", "-D", "100"];
    let mut server = Bg::start(cm_command("ib_write_bw", &args, None, SERVER), "cm-victim");
    server.wait_device(SERVER);
    // Line-buffered, to see the run start (perftest's stdout is a file).
    let mut ca = vec!["-oL", "ib_write_bw"];
    ca.extend_from_slice(&args);
    ca.push(SERVER);
    require_tool("ib_write_bw");
    let mut client = Bg::start(cm_command("stdbuf", &ca, None, &site.client), "cm-survivor");
    // Let the WRITEs run for a second, then kill the server.
    let deadline = Instant::now() + LIMIT;
    while !client.text().contains("#bytes") {
        assert!(
            Instant::now() < deadline && client.child.try_wait().unwrap().is_none(),
            "the test never got going\n{}\n{}",
            client.text(),
            server.text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_secs(1));
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let t = Instant::now();
    let status = wait_until(&mut client.child, t + Duration::from_secs(60));
    let out = client.text();
    println!(
        "ib_write_bw -R client after its server was killed: exit {status:?} after {:?}",
        t.elapsed()
    );
    assert!(status.is_some(), "the client hung:\n{out}");
    assert_ne!(status, Some(0), "{out}");
    // IBV_WC_RETRY_EXC_ERR.
    assert!(out.contains("Failed status 12"), "{out}");
}

/// libfabric's verbs provider finds softrdma's device through rdma_cm
/// (`rdma_get_devices`, `rdma_getaddrinfo`, `rdma_bind_addr` on every
/// non-loopback interface address) and offers an RC MSG endpoint on it.
///
/// `fi_pingpong -p verbs -e msg` itself cannot run: its server always
/// calls `fi_getinfo(NULL, NULL, …)`, which the verbs provider turns into
/// `rdma_bind_addr(127.0.0.1)` (prov/verbs/src/fi_verbs.c: `local_node`
/// "localhost"), while it offers MSG endpoints only on devices with an
/// address on a non-loopback interface (verbs_info.c skips IFF_LOOPBACK).
/// No device is both, so the server fails with ENODATA — the kernel's
/// rdma_cm refuses that bind too (no RDMA device on `lo`, ENODEV).
#[test]
fn netns_libfabric_verbs_offers_a_msg_endpoint() {
    let _s = serial();
    let hosts = Hosts::new();
    let o = run_command(
        cm_command(
            "fi_info",
            &["-p", "verbs", "-t", "FI_EP_MSG", "-s", &hosts.addr_a],
            Some(&hosts.a),
            &hosts.addr_a,
        ),
        LIMIT,
    );
    println!("{}", o.out);
    assert!(
        o.ok(),
        "fi_info (apt-get install libfabric-bin):\n{}",
        o.out
    );
    assert!(o.out.contains("domain: softrdma0\n"), "{}", o.out);
    assert!(o.out.contains("type: FI_EP_MSG"), "{}", o.out);
    assert!(
        o.out.contains("protocol: FI_PROTO_RDMA_CM_IB_RC"),
        "{}",
        o.out
    );
}
