//! Captures are complete and valid in every case (`SOFTRDMA_PCAP`):
//!
//! - several devices of one process write one file (every `softrdma perf`
//!   tool with `--loopback` opens two devices): both devices' packets, not
//!   two writers truncating and interleaving one file;
//! - a program that exits without closing its device (perftest's UD
//!   client) leaves a complete file, not an empty one.
//!
//! Each file must read to its end in `softrdma dump` and in tshark, with
//! every ICRC valid.
//!
//! rdma_cm programs (rping, ucmatose, a refused rping) under `softrdma
//! exec`: tshark must also decode every CM MAD (REQ, REP, RTU, DREQ,
//! DREP, REJ) with no malformed or expert mark.

mod common;
#[path = "common/libs.rs"]
mod libs;
use libs::listening;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Longest any single command may take before the test calls it hung.
const HANG: Duration = Duration::from_secs(180);

fn softrdma() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_softrdma"));
    c.env_remove("SOFTRDMA_ADDR")
        .env_remove("SOFTRDMA_CONFIG")
        .env_remove("SOFTRDMA_IBVERBS_DIR")
        .stdin(Stdio::null());
    c
}

/// Waits for a child, killing it (and failing) if it hangs.
fn finish(mut child: Child, what: &str) -> Output {
    let deadline = Instant::now() + HANG;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{what}: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn run(c: &mut Command, what: &str) -> Output {
    let child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    finish(child, what)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("softrdma-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A number after `label` in `text` (`"RoCE v2 12 (ICRC bad 0, …"`).
fn number_after(text: &str, label: &str) -> u64 {
    text.split(label)
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no {label:?} in {text}"))
}

/// `softrdma dump` and tshark read `file` to its end; every RoCE packet has
/// a valid ICRC. Returns the number of RoCE packets.
fn check_capture(file: &Path) -> u64 {
    let what = file.display().to_string();
    let dump = run(softrdma().args(["dump", "--quiet"]).arg(file), &what);
    let text = String::from_utf8_lossy(&dump.stdout).into_owned();
    let summary = text.lines().last().unwrap_or_default();
    let frames = number_after(summary, "frames ");
    let roce = number_after(summary, "RoCE v2 ");
    assert!(roce > 0, "{what}: no RoCE packet\n{text}");
    assert_eq!(frames, roce, "{what}: only RoCE in a softrdma capture");
    assert_eq!(number_after(summary, "ICRC bad "), 0, "{what}\n{text}");
    assert_eq!(number_after(summary, "malformed "), 0, "{what}\n{text}");

    let tshark = Command::new("tshark")
        .arg("-r")
        .arg(file)
        .args(["-d", "udp.port==4791,infiniband", "-T", "fields"])
        .args(["-e", "frame.number", "-e", "_ws.malformed"])
        .output()
        .expect("tshark (apt-get install -y tshark; scripts/deps installs it)");
    let err = String::from_utf8_lossy(&tshark.stderr);
    let out = String::from_utf8_lossy(&tshark.stdout);
    assert!(tshark.status.success(), "{what}: tshark: {err}");
    assert!(
        !err.contains("damaged") && !err.contains("cut short"),
        "{what}: {err}"
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len() as u64, frames, "{what}: tshark saw\n{out}");
    assert!(
        lines.iter().all(|l| l.trim().parse::<u64>().is_ok()),
        "{out}"
    );
    roce
}

#[test]
fn every_perf_tool_with_loopback_writes_one_valid_file() {
    let dir = scratch("perf-pcap");
    for tool in common::PERF_TESTS {
        let file = dir.join(format!("{tool}.pcap"));
        let mut c = softrdma();
        c.args(["perf", tool, "--loopback", "-n", "20"])
            .env("SOFTRDMA_PCAP", &file);
        run(&mut c, tool);
        let roce = check_capture(&file);
        // Both devices write the file: every request is there as sent by
        // the client's device and as received by the server's.
        assert!(roce >= 2 * 20, "{tool}: {roce} RoCE packets");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn require_built_library() {
    libs::require_built_library(env!("CARGO_BIN_EXE_softrdma"));
}

/// Runs a perftest server and its client under `softrdma exec`, each
/// capturing to `dir/{tool}-{addr}.pcap`; returns the capture files.
fn perftest_pair(dir: &Path, tool: &str, args: &[&str], port: u16) -> Vec<PathBuf> {
    let pattern = dir.join(format!("{tool}-{{addr}}.pcap"));
    let p = port.to_string();
    let exec = |extra: &[&str]| {
        let mut c = softrdma();
        c.args(["exec", "--", tool, "-p", &p])
            .args(args)
            .args(extra)
            .env("SOFTRDMA_PCAP", &pattern)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    let server = exec(&[]).spawn().expect("server");
    let deadline = Instant::now() + HANG;
    while !listening(port) {
        assert!(
            Instant::now() < deadline,
            "{tool}: the server never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let client = exec(&["127.0.0.1"]).spawn().expect("client");
    finish(client, &format!("{tool} client"));
    finish(server, &format!("{tool} server"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|f| {
            f.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{tool}-")))
        })
        .collect();
    files.sort();
    files
}

#[test]
fn perftest_pairs_under_exec_write_complete_files() {
    require_built_library();
    let _one_at_a_time = libs::serial();
    for t in ["ib_write_bw", "ib_send_bw", "ib_read_lat", "ib_atomic_bw"] {
        assert!(
            Command::new(t).arg("--help").output().is_ok(),
            "{t}: apt-get install -y perftest (scripts/deps installs it)"
        );
    }
    let dir = scratch("perftest-pcap");
    let mut port = 23600;
    for (tool, args) in [
        // The UD client exits without destroying its QP or closing the
        // device: its capture used to stay empty.
        ("ib_send_bw", &["-c", "UD", "-n", "100", "-s", "1024"][..]),
        ("ib_send_lat", &["-c", "UD", "-n", "100", "-s", "64"][..]),
        ("ib_write_bw", &["-n", "100", "-s", "8192"][..]),
        ("ib_read_lat", &["-n", "100", "-s", "64"][..]),
        ("ib_atomic_bw", &["-n", "100"][..]),
    ] {
        port += 1;
        let files = perftest_pair(&dir, tool, args, port);
        assert_eq!(files.len(), 2, "{tool}: one file per process: {files:?}");
        for f in &files {
            let mut head = [0u8; 24];
            let n = std::fs::File::open(f)
                .and_then(|mut h| h.read(&mut head))
                .unwrap();
            assert_eq!(n, 24, "{}: empty or cut capture", f.display());
            check_capture(f);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------------------------ rdma_cm ----

const CM_SERVER: &str = "127.0.79.1";
const CM_CLIENT: &str = "127.0.79.2";

/// `softrdma exec -- prog args` with its device at `addr`, capturing to
/// `dir/{tag}-{addr}.pcap`.
fn cm_exec(dir: &Path, tag: &str, addr: &str, prog: &str, args: &[&str]) -> Command {
    let mut c = softrdma();
    c.args(["exec", "--", prog])
        .args(args)
        .env("SOFTRDMA_ADDR", addr)
        .env("SOFTRDMA_PCAP", dir.join(format!("{tag}-{{addr}}.pcap")))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Whether a UDP socket is bound to `CM_SERVER:4791` (the server's device).
fn cm_server_up() -> bool {
    let ip: std::net::Ipv4Addr = CM_SERVER.parse().unwrap();
    let want = format!("{:08X}:12B7", u32::from_le_bytes(ip.octets()));
    std::fs::read_to_string("/proc/net/udp").is_ok_and(|t| {
        t.lines()
            .any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
    })
}

/// A server, killed if the test fails before `finish` takes it.
struct CmServer(Option<Child>);

impl CmServer {
    fn finish(mut self, what: &str) -> Output {
        finish(self.0.take().expect("running"), what)
    }
}

impl Drop for CmServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn start_cm_server(c: &mut Command, what: &str) -> CmServer {
    let mut child = c.spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
    let deadline = Instant::now() + HANG;
    while !cm_server_up() {
        if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!("{what}: the server's device never came up");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    CmServer(Some(child))
}

/// The CM MADs of a capture as tshark decodes them: checks that every
/// packet reads without a malformed or expert mark, that every MAD on
/// QP 1 is a CM MAD whose message tshark took apart (its fields are
/// there), and counts the messages by name.
fn tshark_cm_messages(file: &Path) -> std::collections::BTreeMap<&'static str, u64> {
    let what = file.display().to_string();
    let t = Command::new("tshark")
        .arg("-r")
        .arg(file)
        .args([
            "-d",
            "udp.port==4791,infiniband",
            "-Y",
            "_ws.malformed || _ws.expert",
        ])
        .output()
        .expect("tshark (apt-get install -y tshark; scripts/deps installs it)");
    let marked = String::from_utf8_lossy(&t.stdout);
    assert!(
        t.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&t.stderr)
    );
    assert!(marked.trim().is_empty(), "{what}: tshark marks\n{marked}");

    // One column per message tshark knows, after the attribute ID.
    let messages: [(&str, &str, &str); 6] = [
        ("REQ", "0x0010", "infiniband.cm.req.localqpn"),
        ("REJ", "0x0012", "infiniband.cm.rej.reason"),
        ("REP", "0x0013", "infiniband.cm.rep.localqpn"),
        ("RTU", "0x0014", "infiniband.cm.rtu.localcommid"),
        ("DREQ", "0x0015", "infiniband.cm.dreq.localcommid"),
        ("DREP", "0x0016", "infiniband.cm.drsp.localcommid"),
    ];
    let mut c = Command::new("tshark");
    c.arg("-r")
        .arg(file)
        .args(["-d", "udp.port==4791,infiniband", "-Y", "infiniband.mad"])
        .args(["-T", "fields", "-E", "separator=|"])
        .args([
            "-e",
            "infiniband.mad.mgmtclass",
            "-e",
            "infiniband.mad.attributeid",
        ]);
    for (_, _, field) in &messages {
        c.args(["-e", field]);
    }
    let t = c.output().expect("tshark");
    assert!(
        t.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&t.stderr)
    );
    let out = String::from_utf8_lossy(&t.stdout);
    let mut counts = std::collections::BTreeMap::new();
    for l in out.lines() {
        let cols: Vec<&str> = l.split('|').collect();
        assert_eq!(cols.len(), 2 + messages.len(), "{what}: {l}");
        assert_eq!(cols[0], "0x07", "{what}: not a CM MAD: {l}");
        let k = messages
            .iter()
            .position(|(_, attr, _)| *attr == cols[1])
            .unwrap_or_else(|| panic!("{what}: a CM message tshark does not decode: {l}"));
        assert!(
            !cols[2 + k].is_empty(),
            "{what}: tshark did not decode the {}: {l}",
            messages[k].0
        );
        *counts.entry(messages[k].0).or_insert(0) += 1;
    }
    counts
}

/// Both captures of a pair (one per process): valid for `softrdma dump`
/// and tshark (`check_capture`), and their CM messages as tshark counts
/// them, the two files added.
fn check_cm_pair(dir: &Path, tag: &str) -> std::collections::BTreeMap<&'static str, u64> {
    let mut total = std::collections::BTreeMap::new();
    for addr in [CM_SERVER, CM_CLIENT] {
        let f = dir.join(format!("{tag}-{addr}.pcap"));
        check_capture(&f);
        for (k, n) in tshark_cm_messages(&f) {
            *total.entry(k).or_insert(0) += n;
        }
    }
    total
}

/// rping and ucmatose (and an rping to a port without listener, for a
/// REJ) under `softrdma exec` with `SOFTRDMA_PCAP`: every packet has a
/// valid ICRC and reads in `softrdma dump`; tshark decodes every CM MAD
/// (REQ, REP, RTU, DREQ, DREP, REJ) with no malformed or expert mark.
#[test]
fn rdma_cm_captures_decode_in_tshark() {
    require_built_library();
    let _one_at_a_time = libs::serial();
    for t in ["rping", "ucmatose"] {
        assert!(
            Command::new(t).arg("-h").output().is_ok(),
            "{t}: apt-get install -y rdmacm-utils (scripts/deps installs it)"
        );
    }
    let dir = scratch("rdmacm-pcap");

    let rping = |role: &'static str| vec![role, "-a", CM_SERVER, "-C", "5", "-V"];
    let server = start_cm_server(
        &mut cm_exec(&dir, "rping", CM_SERVER, "rping", &rping("-s")),
        "rping server",
    );
    run(
        &mut cm_exec(&dir, "rping", CM_CLIENT, "rping", &rping("-c")),
        "rping client",
    );
    server.finish("rping server");
    let n = check_cm_pair(&dir, "rping");
    println!("rping: {n:?}");
    // Each message is in both files (sent by one, received by the
    // other), but the DREP: the client exits right after its DREQ (rping
    // does not wait for DISCONNECTED), so only the server's file has it.
    for (m, min) in [("REQ", 2), ("REP", 2), ("RTU", 2), ("DREQ", 2), ("DREP", 1)] {
        assert!(
            n.get(m).copied().unwrap_or(0) >= min,
            "rping: {m} missing: {n:?}"
        );
    }

    let server = start_cm_server(
        &mut cm_exec(
            &dir,
            "ucmatose",
            CM_SERVER,
            "ucmatose",
            &["-b", CM_SERVER, "-c", "2"],
        ),
        "ucmatose server",
    );
    // Port 7174 has no listener: REJ reason 8.
    let refused = cm_exec(&dir, "refused", CM_CLIENT, "rping", &rping("-c"))
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("REJECTED, error 8"),
        "{refused:?}"
    );
    run(
        &mut cm_exec(
            &dir,
            "ucmatose",
            CM_CLIENT,
            "ucmatose",
            &["-s", CM_SERVER, "-c", "2"],
        ),
        "ucmatose client",
    );
    server.finish("ucmatose server");
    let n = check_cm_pair(&dir, "ucmatose");
    println!("ucmatose: {n:?}");
    for (m, min) in [("REQ", 4), ("REP", 4), ("RTU", 4), ("DREQ", 4), ("DREP", 2)] {
        assert!(
            n.get(m).copied().unwrap_or(0) >= min,
            "ucmatose: {m} missing: {n:?}"
        );
    }
    // The refused REQ and its REJ, in the server's file and the
    // refused client's.
    assert_eq!(n.get("REJ"), Some(&1), "{n:?}");
    let f = dir.join(format!("refused-{CM_CLIENT}.pcap"));
    check_capture(&f);
    let r = tshark_cm_messages(&f);
    println!("refused rping: {r:?}");
    assert_eq!(r.get("REJ"), Some(&1), "{r:?}");
    assert!(r.contains_key("REQ"), "{r:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
