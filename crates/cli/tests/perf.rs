//! `softrdma perf` and `softrdma devinfo` end to end: every tool in
//! `--loopback` mode, the table and JSON output, verification that fails
//! when the data is wrong, the error paths, and server and client as two
//! processes. No assertion depends on how fast anything runs.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::PERF_TESTS as TESTS;

/// Longest any single command may take before the test calls it hung.
const HANG: Duration = Duration::from_secs(180);

fn cmd(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_softrdma"));
    c.args(args)
        .env_remove("SOFTRDMA_ADDR")
        .env_remove("SOFTRDMA_PCAP");
    c
}

/// Waits for a child, killing it (and failing) if it hangs.
fn wait(mut child: Child, what: &str) -> Output {
    let deadline = Instant::now() + HANG;
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{what} hung:\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run(args: &[&str]) -> Output {
    let child = cmd(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run softrdma");
    wait(child, &args.join(" "))
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

fn describe(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    )
}

const BW_HEAD: &str =
    " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]";
const BW_HEAD_GBITS: &str =
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";
const LAT_HEAD: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]";

/// The rows under the table header `head`, as numbers.
fn rows(stdout: &str, head: &str) -> Vec<Vec<f64>> {
    let mut lines = stdout.lines();
    assert!(
        lines.any(|l| l == head),
        "no table header {head:?} in:\n{stdout}"
    );
    lines
        .take_while(|l| !l.starts_with("---"))
        .map(|l| {
            l.split_whitespace()
                .map(|w| {
                    w.parse::<f64>()
                        .unwrap_or_else(|_| panic!("{w:?} in {l:?} is not a number"))
                })
                .collect()
        })
        .collect()
}

/// Checks a bandwidth row: 5 columns, sane positive numbers.
fn check_bw_row(r: &[f64], size: f64, iters: f64) {
    assert_eq!(r.len(), 5, "{r:?}");
    assert_eq!((r[0], r[1]), (size, iters), "{r:?}");
    // Two decimals, as perftest prints them: a few tiny messages on a busy
    // machine may round to 0.00 MiB/s, but never below, and the message
    // rate (six decimals) is positive.
    let (peak, avg, rate) = (r[2], r[3], r[4]);
    assert!(avg >= 0.0 && peak >= avg && rate > 0.0, "{r:?}");
    assert!(peak.is_finite() && rate.is_finite(), "{r:?}");
}

/// Checks a latency row: 9 columns, min <= typical/avg <= max, p99 <= p99.9.
fn check_lat_row(r: &[f64], size: f64, iters: f64) {
    assert_eq!(r.len(), 9, "{r:?}");
    assert_eq!((r[0], r[1]), (size, iters), "{r:?}");
    let (min, max, typ, avg, stdev, p99, p999) = (r[2], r[3], r[4], r[5], r[6], r[7], r[8]);
    assert!(min > 0.0, "{r:?}");
    assert!(min <= typ && typ <= max, "{r:?}");
    assert!(min <= avg && avg <= max, "{r:?}");
    assert!(stdev >= 0.0 && stdev.is_finite(), "{r:?}");
    assert!(typ <= p99 && p99 <= p999 && p999 <= max, "{r:?}");
}

fn is_lat(test: &str) -> bool {
    test.ends_with("-lat")
}

#[test]
fn every_tool_runs_in_loopback_with_its_table() {
    for test in TESTS {
        let size = if test.starts_with("atomic") {
            "8"
        } else {
            "4096"
        };
        let out = run(&["perf", test, "--loopback", "-n", "40", "-s", size]);
        assert!(out.status.success(), "{test}: {}", describe(&out));
        let so = text(&out.stdout);
        let head = if is_lat(test) { LAT_HEAD } else { BW_HEAD };
        let r = rows(&so, head);
        assert_eq!(r.len(), 1, "{test}: {so}");
        if is_lat(test) {
            check_lat_row(&r[0], size.parse().unwrap(), 40.0);
        } else {
            check_bw_row(&r[0], size.parse().unwrap(), 40.0);
        }
        assert!(
            so.contains("data verification: ok (1 size(s), both sides)"),
            "{test}: {so}"
        );
        // Counters of both sides, with packets sent and received.
        assert!(so.contains("client counters"), "{test}: {so}");
        assert!(so.contains("server counters"), "{test}: {so}");
        assert!(so.contains("tx_packets"), "{test}: {so}");
        assert!(!so.contains("tx_packets 0,"), "{test}: {so}");
        // Nothing on stderr: no progress line when stderr is not a terminal.
        assert!(out.stderr.is_empty(), "{test}: {}", describe(&out));
    }
}

#[test]
fn json_is_one_valid_document() {
    for test in TESTS {
        let out = run(&["perf", test, "--loopback", "-n", "20", "--json"]);
        assert!(out.status.success(), "{test}: {}", describe(&out));
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{test}: {e}\n{}", describe(&out)));
        assert_eq!(doc["test"], test);
        assert_eq!(doc["role"], "loopback");
        assert_eq!(doc["connection"], "RC");
        assert_eq!(doc["verification"]["status"], "ok", "{doc}");
        let results = doc["results"].as_array().unwrap();
        assert_eq!(results.len(), 1);
        let r = &results[0];
        assert_eq!(r["iterations"], 20);
        assert_eq!(r["verified"], "ok");
        if is_lat(test) {
            let min = r["t_min_us"].as_f64().unwrap();
            let max = r["t_max_us"].as_f64().unwrap();
            assert!(min > 0.0 && min <= max, "{r}");
            assert!(r["p99_9_us"].as_f64().unwrap() <= max, "{r}");
        } else {
            assert!(r["bw_average_mib_s"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["bw_average_gbit_s"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["msg_rate_mpps"].as_f64().unwrap() > 0.0, "{r}");
            assert_eq!(r["operations"], 20);
        }
        for side in ["client", "server"] {
            let c = &doc["counters"][side];
            assert!(c["tx_packets"].as_u64().unwrap() > 0, "{test} {side}: {c}");
            assert!(c["rx_packets"].as_u64().unwrap() > 0, "{test} {side}: {c}");
            assert!(c["retransmits"].is_u64(), "{c}");
            assert!(c["socket_rx_dropped"].is_u64(), "{c}");
        }
    }
}

#[test]
fn verification_fails_loudly_on_wrong_data() {
    // The hidden hook damages the data at its source: one byte of the
    // sender's buffer (the server's for READ), or the server's atomic
    // counter. Each side's check must catch it and fail the run.
    for test in TESTS {
        let out = run(&["perf", test, "--loopback", "-n", "10", "--debug-corrupt"]);
        assert_eq!(out.status.code(), Some(1), "{test}: {}", describe(&out));
        let err = text(&out.stderr);
        assert!(err.contains("data verification failed"), "{test}: {err}");
        assert!(
            err.contains("expected"),
            "{test}: the message says what was expected: {err}"
        );
        assert!(
            text(&out.stdout).contains("data verification: FAILED"),
            "{test}: {}",
            describe(&out)
        );
        // The same run without verification passes: the hook is what fails.
        let out = run(&[
            "perf",
            test,
            "--loopback",
            "-n",
            "10",
            "--debug-corrupt",
            "--no-verify",
        ]);
        assert!(out.status.success(), "{test}: {}", describe(&out));
        assert!(text(&out.stdout).contains("data verification: off"));
    }
    // JSON says so too, and is still one document.
    let out = run(&[
        "perf",
        "write-bw",
        "--loopback",
        "-n",
        "10",
        "--debug-corrupt",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["verification"]["status"], "failed");
    assert_eq!(doc["results"][0]["verified"], "failed");
    assert!(!doc["verification"]["errors"].as_array().unwrap().is_empty());
}

#[test]
fn all_sizes_and_transports() {
    // The README's main job with few iterations: 2 B .. 8 MiB.
    let out = run(&["perf", "write-bw", "--loopback", "-a", "-n", "5"]);
    assert!(out.status.success(), "{}", describe(&out));
    let r = rows(&text(&out.stdout), BW_HEAD);
    assert_eq!(r.len(), 23);
    for (i, row) in r.iter().enumerate() {
        check_bw_row(row, (2u64 << i) as f64, 5.0);
    }
    // UD: sizes only up to the MTU; loss is allowed, wrong data is not.
    let out = run(&[
        "perf",
        "send-bw",
        "--loopback",
        "-a",
        "-n",
        "5",
        "-c",
        "UD",
        "-m",
        "1024",
    ]);
    assert!(out.status.success(), "{}", describe(&out));
    let r = rows(&text(&out.stdout), BW_HEAD);
    assert_eq!(r.len(), 10, "2 .. 1024");
    assert_eq!(r[9][0], 1024.0);
    // Latency over every size, UC.
    let out = run(&[
        "perf",
        "write-lat",
        "--loopback",
        "-a",
        "-n",
        "3",
        "-c",
        "uc",
    ]);
    assert!(out.status.success(), "{}", describe(&out));
    let r = rows(&text(&out.stdout), LAT_HEAD);
    assert_eq!(r.len(), 23);
    for (i, row) in r.iter().enumerate() {
        check_lat_row(row, (2u64 << i) as f64, 3.0);
    }
    for args in [
        &["send-lat", "-c", "UD", "-s", "1000"][..],
        &["send-lat", "-c", "UC"],
        &["send-bw", "-c", "UC", "-s", "10000"],
        &["write-bw", "-c", "UC", "-s", "100000"],
        &["atomic-bw", "-A", "CMP_AND_SWAP", "-q", "2"],
        &["atomic-lat", "-A", "CMP_AND_SWAP"],
        &["write-lat", "--spin", "busy"],
        &["send-bw", "--spin", "yield"],
    ] {
        let mut a = vec!["perf"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["--loopback", "-n", "30"]);
        let out = run(&a);
        assert!(out.status.success(), "{args:?}: {}", describe(&out));
        assert!(text(&out.stdout).contains("data verification: ok"));
    }
}

#[test]
fn queue_pairs_duration_depth_and_gbits() {
    let out = run(&[
        "perf",
        "write-bw",
        "--loopback",
        "-q",
        "3",
        "-n",
        "50",
        "-t",
        "8",
        "-s",
        "3000",
        "--report-gbits",
    ]);
    assert!(out.status.success(), "{}", describe(&out));
    let so = text(&out.stdout);
    let r = rows(&so, BW_HEAD_GBITS);
    check_bw_row(&r[0], 3000.0, 50.0);
    assert_eq!(so.matches(" local address: QPN").count(), 3, "{so}");
    // Duration mode: as many iterations as fit.
    let out = run(&[
        "perf",
        "read-bw",
        "--loopback",
        "-D",
        "0.2",
        "-q",
        "2",
        "--json",
    ]);
    assert!(out.status.success(), "{}", describe(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &doc["results"][0];
    assert!(r["iterations"].as_u64().unwrap() > 0, "{r}");
    assert!(r["operations"].as_u64().unwrap() >= 2 * r["iterations"].as_u64().unwrap());
    assert_eq!(doc["duration_s"].as_f64(), Some(0.2));
    for test in ["write-lat", "send-lat", "send-bw", "atomic-bw"] {
        let out = run(&["perf", test, "--loopback", "-D", "0.1"]);
        assert!(out.status.success(), "{test}: {}", describe(&out));
    }
}

#[test]
fn usage_errors_are_clear() {
    for (args, msg) in [
        (
            &["perf", "write-bw", "-s", "0", "--loopback"][..],
            "at least 1 byte",
        ),
        (
            &["perf", "write-bw", "-s", "12Q", "--loopback"],
            "unknown unit",
        ),
        (
            &["perf", "write-bw", "-s", "4G", "--loopback"],
            "larger than",
        ),
        (
            &["perf", "read-bw", "-c", "UD", "--loopback"],
            "-c UD is not possible for read-bw: RDMA READ exists on RC only",
        ),
        (&["perf", "read-lat", "-c", "UC", "--loopback"], "RC only"),
        (&["perf", "atomic-bw", "-c", "UD", "--loopback"], "RC only"),
        (
            &["perf", "write-bw", "-c", "UD", "--loopback"],
            "RC and UC only",
        ),
        (&["perf", "atomic-bw", "-s", "16", "--loopback"], "8 bytes"),
        (
            &["perf", "send-bw", "-c", "UD", "-s", "8K", "--loopback"],
            "fit one packet",
        ),
        (
            &["perf", "write-bw", "-m", "1000", "--loopback"],
            "MTU 1000",
        ),
        (&["perf", "write-lat", "-q", "2", "--loopback"], "one QP"),
        (
            &["perf", "write-bw", "-A", "CMP_AND_SWAP", "--loopback"],
            "-A applies",
        ),
        (&["perf", "write-bw", "-n", "0", "--loopback"], "at least 1"),
        (
            &["perf", "write-bw", "-D", "0", "--loopback"],
            "more than 0 seconds",
        ),
        (
            &["perf", "write-bw", "-c", "XX", "--loopback"],
            "possible values",
        ),
        (&["perf", "write-bw", "-q", "0", "--loopback"], "1..=65536"),
        (&["perf", "write-bw", "-t", "0", "--loopback"], "TX depth"),
        (&["perf", "nosuch-bw"], "unrecognized subcommand"),
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
        let err = text(&out.stderr);
        assert!(err.contains(msg), "{args:?}: want {msg:?} in {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(out.stdout.is_empty(), "{args:?}: {}", describe(&out));
    }
}

/// A TCP port nobody listens on (just released by the kernel).
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn unreachable_server_and_port_in_use() {
    let port = free_port().to_string();
    let out = run(&[
        "perf",
        "write-bw",
        "127.0.0.1",
        "-p",
        &port,
        "--connect-timeout",
        "0.3",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("cannot reach the server at 127.0.0.1:{port}")),
        "{err}"
    );
    assert!(err.contains("refused"), "{err}");

    let out = run(&[
        "perf",
        "write-bw",
        "no.such.host.invalid",
        "--connect-timeout",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("cannot resolve"),
        "{}",
        describe(&out)
    );

    let busy = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let out = run(&["perf", "write-bw", "-p", &port]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = text(&out.stderr);
    assert!(err.contains("port in use"), "{err}");
    assert!(err.contains(&port), "{err}");
}

fn spawn_server(args: &[&str]) -> Child {
    cmd(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the server")
}

#[test]
fn server_and_client_as_two_processes() {
    let port = free_port().to_string();
    let server = spawn_server(&["perf", "send-bw", "-p", &port]);
    // The client's parameters are the ones used; it retries until the
    // server listens.
    let client = cmd(&[
        "perf",
        "send-bw",
        "127.0.0.1",
        "-p",
        &port,
        "-n",
        "300",
        "-s",
        "5000",
        "-q",
        "2",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let c = wait(client, "client");
    let s = wait(server, "server");
    assert!(c.status.success(), "client: {}", describe(&c));
    assert!(s.status.success(), "server: {}", describe(&s));
    let r = rows(&text(&c.stdout), BW_HEAD);
    check_bw_row(&r[0], 5000.0, 300.0);
    let so = text(&s.stdout);
    assert!(so.contains("the client's parameters are used"), "{so}");
    assert!(
        so.contains("5000 B: 600 operations served, data verification ok"),
        "{so}"
    );
    assert!(so.contains("server counters"), "{so}");

    // A client for another test is refused, both say why.
    let port = free_port().to_string();
    let server = spawn_server(&["perf", "write-bw", "-p", &port]);
    let c = run(&["perf", "read-bw", "127.0.0.1", "-p", &port, "-n", "5"]);
    let s = wait(server, "server");
    assert_eq!(c.status.code(), Some(1), "{}", describe(&c));
    assert_eq!(s.status.code(), Some(1), "{}", describe(&s));
    for o in [&c, &s] {
        assert!(
            text(&o.stderr).contains("this server runs write-bw, the client asked for read-bw"),
            "{}",
            describe(o)
        );
    }

    // Wrong data found by the server process fails both processes.
    let port = free_port().to_string();
    let server = spawn_server(&["perf", "write-bw", "-p", &port]);
    let c = run(&[
        "perf",
        "write-bw",
        "127.0.0.1",
        "-p",
        &port,
        "-n",
        "5",
        "--debug-corrupt",
    ]);
    let s = wait(server, "server");
    assert_eq!(c.status.code(), Some(1), "{}", describe(&c));
    assert_eq!(s.status.code(), Some(1), "{}", describe(&s));
    assert!(text(&c.stderr).contains("server: QP 0"), "{}", describe(&c));
    assert!(text(&s.stderr).contains("expected"), "{}", describe(&s));
}

#[test]
fn ten_thousand_qps_between_two_processes() {
    // Every QP connects (one exchange, both directions at once) and moves
    // verified data; the run reports the setup rate and the memory per QP.
    let port = free_port().to_string();
    let server = spawn_server(&["perf", "write-bw", "-p", &port]);
    let c = run(&[
        "perf",
        "write-bw",
        "127.0.0.1",
        "-p",
        &port,
        "-q",
        "10000",
        "-s",
        "4096",
        "-n",
        "3",
        "--json",
    ]);
    let s = wait(server, "server");
    assert!(c.status.success(), "client: {}", describe(&c));
    assert!(s.status.success(), "server: {}", describe(&s));
    let d: serde_json::Value = serde_json::from_slice(&c.stdout).unwrap();
    assert_eq!(d["qps"], 10000);
    assert_eq!(d["results"][0]["iterations"], 3);
    assert_eq!(d["results"][0]["verified"], "ok");
    assert_eq!(d["setup"]["qps"], 10000);
    assert!(d["setup"]["qps_per_s"].as_f64().unwrap() > 0.0, "{d}");
    // Idle QPs are cheap: well under the 10 KiB a QP that 100 MB for
    // 10,000 allows (about 1 KB measured when this test was written).
    let per_qp = d["setup"]["rss_bytes_per_qp"].as_u64().unwrap();
    assert!(per_qp < 10_240, "{per_qp} bytes of resident memory per QP");
}

#[test]
fn a_peer_that_disconnects_is_reported() {
    for test in ["write-bw", "write-lat", "send-bw"] {
        // Kill the client once its run has started: the server says so.
        let port = free_port().to_string();
        let server = spawn_server(&["perf", test, "-p", &port]);
        let mut client = cmd(&["perf", test, "127.0.0.1", "-p", &port, "-D", "60"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
        // The table header is printed when the run starts.
        assert!(
            lines.any(|l| l.unwrap().starts_with(" #bytes")),
            "{test}: the client did not start"
        );
        client.kill().unwrap();
        let _ = client.wait();
        let s = wait(server, "server");
        assert_eq!(s.status.code(), Some(1), "{test}: {}", describe(&s));
        assert!(
            text(&s.stderr).contains("the client closed the connection"),
            "{test}: {}",
            describe(&s)
        );

        // Kill the server during the run: the client says so.
        let port = free_port().to_string();
        let mut server = spawn_server(&["perf", test, "-p", &port]);
        let mut sout = BufReader::new(server.stdout.take().unwrap()).lines();
        let client = cmd(&["perf", test, "127.0.0.1", "-p", &port, "-D", "60"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The server prints its header once the QPs are connected.
        assert!(
            sout.any(|l| l.unwrap().starts_with(" remote address")),
            "{test}: the server did not connect"
        );
        server.kill().unwrap();
        let _ = server.wait();
        let c = wait(client, "client");
        assert_eq!(c.status.code(), Some(1), "{test}: {}", describe(&c));
        let err = text(&c.stderr);
        assert!(
            err.contains("the server closed the connection")
                || err.contains("the server went away")
                || err.contains("stopped answering"),
            "{test}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn pcap_capture_decodes() {
    let dir = std::env::temp_dir().join(format!("softrdma-perf-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("write.pcap");
    let out = run(&[
        "perf",
        "write-bw",
        "--loopback",
        "-n",
        "20",
        "-s",
        "10000",
        "--pcap",
        pcap.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", describe(&out));
    let dump = run(&["dump", "--quiet", pcap.to_str().unwrap()]);
    assert!(dump.status.success(), "{}", describe(&dump));
    let d = text(&dump.stdout);
    // 20 WRITEs of 10000 bytes at MTU 4096: 3 packets each, all ICRC-good.
    assert!(d.contains("ICRC bad 0"), "{d}");
    let summary = d.lines().last().unwrap();
    let roce: u64 = summary
        .split("RoCE v2 ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(roce >= 60, "{d}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn devinfo_text_verbose_and_json() {
    let out = run(&["devinfo"]);
    assert!(out.status.success(), "{}", describe(&out));
    let t = text(&out.stdout);
    for want in [
        "hca_id:\tsoftrdma",
        "node_guid:",
        "PORT_ACTIVE (4)",
        "active_mtu:\t\t4096 (5)",
        "link_layer:\t\tEthernet",
        "GID[  0]:\t\t0000:0000:0000:0000:0000:ffff:7f00:",
        "RoCE v2",
        "max_qp_wr:",
    ] {
        assert!(t.contains(want), "{want:?} in\n{t}");
    }
    assert!(!t.contains("max_srq_wr"), "{t}");
    let v = text(&run(&["devinfo", "-v"]).stdout);
    assert!(
        v.contains("max_srq_wr:") && v.contains("max_inline_data:"),
        "{v}"
    );
    // -v: the effective configuration and where each value came from.
    assert!(v.contains("configuration:\n"), "{v}");
    let row = |t: &str, name: &str| {
        t.lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| panic!("no {name} row in\n{t}"))
    };
    // Nothing set: the port MTU follows the interface (loopback: 4096).
    assert_eq!(row(&v, "mtu"), "mtu 4096 (interface lo)");
    assert_eq!(row(&v, "address"), "address auto (default)");
    let out = cmd(&["devinfo", "-v"])
        .env("SOFTRDMA_MTU", "1024")
        .env("SOFTRDMA_SPIN_US", "5")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let v = text(&out.stdout);
    assert!(v.contains("active_mtu:\t\t1024 (3)"), "{v}");
    assert_eq!(row(&v, "mtu"), "mtu 1024 (env SOFTRDMA_MTU)");
    assert_eq!(row(&v, "spin_us"), "spin_us 5 (env SOFTRDMA_SPIN_US)");
    let out = cmd(&["devinfo", "-v", "-d", "127.0.0.203"])
        .output()
        .unwrap();
    assert_eq!(
        row(&text(&out.stdout), "address"),
        "address 127.0.0.203 (option)"
    );
    // A bad value: an error naming the variable and what it accepts.
    let out = cmd(&["devinfo"])
        .env("SOFTRDMA_MTU", "abc")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains(
            "SOFTRDMA_MTU=\"abc\": want an MTU in bytes from 256 to 4096 (e.g. 1024 or 4096)"
        ),
        "{}",
        describe(&out)
    );

    let out = run(&["devinfo", "--json"]);
    assert!(out.status.success(), "{}", describe(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["name"].as_str().unwrap().starts_with("softrdma"));
    let port = &doc["ports"][0];
    assert_eq!(port["state"], "PORT_ACTIVE");
    assert_eq!(port["link_layer"], "Ethernet");
    assert_eq!(port["gids"][0]["type"], "RoCE v2");
    assert_eq!(port["gids"][0]["index"], 0);
    assert!(doc["limits"]["max_qp"].as_u64().unwrap() > 0);
    assert!(doc["limits"]["max_srq_sge"].is_u64());

    // SOFTRDMA_ADDR is honoured (and -d over it).
    let out = cmd(&["devinfo", "--json"])
        .env("SOFTRDMA_ADDR", "127.0.0.201")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["address"], "127.0.0.201");
    assert_eq!(
        doc["ports"][0]["gids"][0]["gid"],
        "0000:0000:0000:0000:0000:ffff:7f00:00c9"
    );
    let out = cmd(&["devinfo", "-d", "127.0.0.202"])
        .env("SOFTRDMA_ADDR", "127.0.0.201")
        .output()
        .unwrap();
    assert!(
        text(&out.stdout).contains("127.0.0.202:4791"),
        "{}",
        describe(&out)
    );
    // An address no interface has: a clear error.
    let out = run(&["devinfo", "-d", "192.0.2.99"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(text(&out.stderr).contains("no interface has this address"));
}

#[test]
fn help_explains_the_tools() {
    let out = run(&["perf", "--help"]);
    assert!(out.status.success());
    let h = text(&out.stdout);
    for t in TESTS {
        assert!(h.contains(t), "{t} in {h}");
    }
    let out = run(&["perf", "write-bw", "--help"]);
    let h = text(&out.stdout);
    for want in [
        "[HOST]",
        "--size",
        "--all",
        "--iters",
        "--duration",
        "--mtu",
        "--qp",
        "--tx-depth",
        "--connection",
        "--report-gbits",
        "--json",
        "--no-verify",
        "--addr",
        "--pcap",
        "--loopback",
        "--progress",
        "18515",
    ] {
        assert!(h.contains(want), "{want} in {h}");
    }
    assert!(!h.contains("debug-corrupt"), "the test hook stays hidden");
    let mut s = String::new();
    cmd(&["perf", "atomic-bw", "--help"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut s)
        .unwrap();
    assert!(
        s.contains("CMP_AND_SWAP") && s.contains("FETCH_AND_ADD"),
        "{s}"
    );
}
