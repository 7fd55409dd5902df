//! UCX: `ucx_info` lists the transports, `ucx_perftest` at the UCT and UCP
//! levels, a peer killed mid-run.

use super::*;

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
pub(crate) fn final_line(out: &str) -> Option<(u64, f64, f64)> {
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
pub(crate) fn perftest(what: &str, args: &[&str], env: &[(&str, &str)], port: u16) -> String {
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

pub(crate) fn ucp_cases(tls: &str, port: u16) {
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
    server.kill(libc::SIGKILL);
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
