//! Unmodified rdma-core and perftest programs over softrdma: each server
//! and client runs as its own process on this machine with our
//! `libibverbs.so.1` first on `LD_LIBRARY_PATH` (each process's device
//! takes its own loopback address). Every run must succeed and report the
//! figures it exists for (iterations, bytes, bandwidth, latency); the
//! figures are printed, never compared with a clock.
//!
//! Needs Debian's `libibverbs-dev ibverbs-utils perftest` (CI installs
//! them); a missing tool fails the test rather than skipping it.

mod common;

use common::*;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(90);

/// perftest recognises devices by PCI part id and uses its `ibv_wr_*`
/// post-send path only on those it knows (ConnectX-4 and later, EFA, …);
/// on an unknown device it falls back to `ibv_post_send`. This identity
/// (ConnectX-5's part id, reported only when asked for) makes it take the
/// `ibv_wr_*` path over softrdma.
const NEW_API: &[(&str, &str)] = &[("SOFTRDMA_VENDOR_PART_ID", "4119")];

#[test]
fn headers_present_so_layouts_were_checked() {
    // build.rs checks every structure against this header when it exists.
    assert!(
        std::path::Path::new("/usr/include/infiniband/verbs.h").exists(),
        "libibverbs-dev is missing: the layout check did not run"
    );
}

#[test]
fn ibv_devices_and_devinfo() {
    let _s = serial();
    let o = run("ibv_devices", &[], &[], LIMIT);
    assert!(o.ok(), "{o:?}");
    assert!(o.out.contains("softrdma0"), "{}", o.out);

    let o = run("ibv_devinfo", &["-v"], &[], LIMIT);
    assert!(o.ok(), "{o:?}");
    for want in [
        "hca_id:\tsoftrdma0",
        "PORT_ACTIVE (4)",
        "link_layer:\t\tEthernet",
        "atomic_cap:\t\t\tATOMIC_HCA (1)",
        "max_qp_wr:\t\t\t16384",
        "max_sge:\t\t\t32",
        "active_mtu:\t\t4096 (5)",
        "GID[  0]:\t\t::ffff:127.",
        ", RoCE v2",
    ] {
        assert!(o.out.contains(want), "missing {want:?} in\n{}", o.out);
    }
    println!("{}", o.out);

    // An address from the environment, and devices from a config file.
    let o = run(
        "ibv_devinfo",
        &["-v"],
        &[("SOFTRDMA_ADDR", "127.0.0.213"), ("SOFTRDMA_MTU", "1024")],
        LIMIT,
    );
    assert!(o.ok(), "{o:?}");
    assert!(
        o.out.contains("GID[  0]:\t\t::ffff:127.0.0.213, RoCE v2"),
        "{}",
        o.out
    );
    assert!(o.out.contains("active_mtu:\t\t1024 (3)"), "{}", o.out);

    let conf = profile_dir().join("softrdma-ibverbs-test.conf");
    std::fs::write(&conf, "# test\nroce7 127.0.0.217 mtu=2048\nroce8 auto\n").unwrap();
    let conf_s = conf.to_str().unwrap();
    let o = run("ibv_devices", &[], &[("SOFTRDMA_CONFIG", conf_s)], LIMIT);
    assert!(o.ok(), "{o:?}");
    assert!(
        o.out.contains("roce7") && o.out.contains("roce8"),
        "{}",
        o.out
    );
    // GUID of an explicit address is known before the device is opened.
    assert!(
        o.out
            .contains("02505 6fffe0000d9".replace(' ', "").as_str()),
        "{}",
        o.out
    );
    let o = run(
        "ibv_devinfo",
        &["-v", "-d", "roce7"],
        &[("SOFTRDMA_CONFIG", conf_s)],
        LIMIT,
    );
    assert!(o.ok(), "{o:?}");
    assert!(o.out.contains("::ffff:127.0.0.217"), "{}", o.out);
    assert!(o.out.contains("active_mtu:\t\t2048 (4)"), "{}", o.out);
}

#[test]
fn bad_configuration_fails_the_device_list_with_one_message() {
    let _s = serial();
    // ibv_devices: ibv_get_device_list returns NULL; the message names the
    // variable and what it accepts, printed once.
    let o = run("ibv_devices", &[], &[("SOFTRDMA_MTU", "abc")], LIMIT);
    let want = "softrdma: SOFTRDMA_MTU=\"abc\": want an MTU in bytes from 256 to 4096";
    assert_eq!(o.out.matches(want).count(), 1, "{o:?}");
    assert!(!o.out.contains("softrdma0"), "{}", o.out);
    // ibv_devinfo asks for the list and gets none either.
    let o = run("ibv_devinfo", &[], &[("SOFTRDMA_ADDR", "10.0.0")], LIMIT);
    assert!(!o.ok(), "{o:?}");
    assert!(
        o.out
            .contains("SOFTRDMA_ADDR=\"10.0.0\": want an IP address, auto, first or if:NAME"),
        "{}",
        o.out
    );
    // A config file line that does not parse names the file and line.
    let conf = profile_dir().join("softrdma-ibverbs-bad.conf");
    std::fs::write(&conf, "roce7 127.0.0.217\nroce8 auto mtu=99\n").unwrap();
    let o = run(
        "ibv_devices",
        &[],
        &[("SOFTRDMA_CONFIG", conf.to_str().unwrap())],
        LIMIT,
    );
    assert!(
        o.out
            .contains("softrdma-ibverbs-bad.conf:2: bad mtu \"99\""),
        "{}",
        o.out
    );
}

fn pingpong(tool: &str, port: u16, size: u64, extra: &[&str]) {
    let p = port.to_string();
    let s = size.to_string();
    let mut args = vec!["-g", "0", "-n", "1000", "-p", &p, "-s", &s];
    args.extend_from_slice(extra);
    let r = pair(tool, &args, &args, port, &[], LIMIT);
    let what = format!("{tool} {}", args.join(" "));
    check_pair(&what, &r);
    for o in [&r.0, &r.1] {
        let (bytes, iters, mbit, usec) =
            pingpong_figures(&o.out).unwrap_or_else(|| panic!("{what}: no figures in\n{}", o.out));
        assert_eq!(iters, 1000, "{what}");
        assert_eq!(bytes, 2 * size * 1000, "{what}");
        assert!(mbit > 0.0 && usec > 0.0, "{what}");
    }
    let (_, _, mbit, usec) = pingpong_figures(&r.1.out).unwrap();
    println!("{what}: {mbit} Mbit/s, {usec} usec/iter");
}

/// `tool` at each size with each set of extra flags, on ports after `port`.
fn pingpongs(tool: &str, port: u16, sizes: [u64; 2], extras: &[&[&str]]) {
    let _s = serial();
    let mut port = port;
    for size in sizes {
        for extra in extras {
            port += 1;
            pingpong(tool, port, size, extra);
        }
    }
}

#[test]
fn rc_pingpong() {
    let extras: &[&[&str]] = &[&[], &["-e"], &["-N"], &["-N", "-e"]];
    pingpongs("ibv_rc_pingpong", 23100, [64, 65536], extras);
}

#[test]
fn uc_pingpong() {
    pingpongs("ibv_uc_pingpong", 23120, [64, 65536], &[&[], &["-e"]]);
}

#[test]
fn ud_pingpong() {
    // UD messages go up to the MTU (4096).
    pingpongs("ibv_ud_pingpong", 23140, [64, 4096], &[&[], &["-e"]]);
}

#[test]
fn srq_pingpong() {
    pingpongs("ibv_srq_pingpong", 23160, [64, 65536], &[&[], &["-e"]]);
}

/// What a perftest run must report.
enum Expect {
    /// Bandwidth rows: `iters` per size (`None` in duration mode, `-D`,
    /// where any positive count will do), positive average bandwidth.
    Bw { iters: Option<f64> },
    /// Latency rows: `iters`, positive minimum and typical latency.
    Lat { iters: f64 },
}

fn perftest(
    tool: &str,
    port: u16,
    args: &[&str],
    env: &[(&str, &str)],
    expect: Expect,
) -> Vec<Vec<f64>> {
    let p = port.to_string();
    let mut a = vec!["-x", "0", "-p", &p];
    a.extend_from_slice(args);
    let r = pair(tool, &a, &a, port, env, LIMIT);
    let what = format!(
        "{}{tool} {}",
        env.iter()
            .map(|(k, v)| format!("{k}={v} "))
            .collect::<String>(),
        a.join(" ")
    );
    check_pair(&what, &r);
    let new_api = !env.is_empty() && !args.contains(&"--use_old_post_send");
    let api_line = if new_api {
        "ibv_wr* API     : ON"
    } else {
        "ibv_wr* API     : OFF"
    };
    assert!(
        r.1.out.contains(api_line),
        "{what}: expected {api_line:?}\n{}",
        r.1.out
    );
    let rows = perftest_rows(&r.1.out);
    assert!(!rows.is_empty(), "{what}: no result rows in\n{}", r.1.out);
    for row in &rows {
        match expect {
            Expect::Bw { iters } => {
                match iters {
                    Some(n) => assert_eq!(row[1], n, "{what}: iterations in {row:?}"),
                    None => assert!(row[1] > 0.0, "{what}: iterations in {row:?}"),
                }
                assert!(row[3] > 0.0, "{what}: average bandwidth in {row:?}");
            }
            Expect::Lat { iters } => {
                assert_eq!(row[1], iters, "{what}: iterations in {row:?}");
                assert!(row[2] > 0.0 && row[4] > 0.0, "{what}: latency in {row:?}");
            }
        }
    }
    for row in &rows {
        match expect {
            Expect::Bw { .. } => println!(
                "{what}: {} B x {}: peak {} MB/s, average {} MB/s, {} Mpps",
                row[0], row[1], row[2], row[3], row[4]
            ),
            Expect::Lat { .. } => println!(
                "{what}: {} B x {}: min {} us, typical {} us, avg {} us",
                row[0], row[1], row[2], row[4], row[5]
            ),
        }
    }
    rows
}

/// The post-send variants: perftest's default on this device (old API),
/// `--use_old_post_send` said explicitly, and the `ibv_wr_*` API.
/// Extra arguments and environment of one post-send variant.
type Api = (
    &'static [&'static str],
    &'static [(&'static str, &'static str)],
);

fn apis() -> [Api; 3] {
    [(&[], &[]), (&["--use_old_post_send"], &[]), (&[], NEW_API)]
}

fn bw_matrix(tool: &str, base: u16, variants: &[&[&str]]) {
    let _s = serial();
    let mut port = base;
    for v in variants {
        for (api, env) in apis() {
            port += 1;
            let mut a: Vec<&str> = v.to_vec();
            a.extend_from_slice(api);
            let qps = a
                .windows(2)
                .find(|w| w[0] == "-q")
                .map_or(1.0, |w| w[1].parse::<f64>().unwrap());
            let iters = a
                .windows(2)
                .find(|w| w[0] == "-n")
                .map_or(1000.0, |w| w[1].parse::<f64>().unwrap());
            let iters = (!a.contains(&"-D")).then_some(iters * qps);
            perftest(tool, port, &a, env, Expect::Bw { iters });
        }
    }
}

fn lat_matrix(tool: &str, base: u16, variants: &[&[&str]]) {
    let _s = serial();
    let mut port = base;
    for v in variants {
        for (api, env) in apis() {
            port += 1;
            let mut a: Vec<&str> = v.to_vec();
            a.extend_from_slice(api);
            perftest(tool, port, &a, env, Expect::Lat { iters: 1000.0 });
        }
    }
}

#[test]
fn ib_write_bw() {
    bw_matrix(
        "ib_write_bw",
        23200,
        &[
            &["-n", "1000", "-s", "64"],
            &["-n", "1000", "-s", "65536"],
            &["-n", "1000", "-c", "UC"],
            &["-n", "1000", "-q", "4"],
            &["-n", "200", "-a"],
        ],
    );
}

#[test]
fn ib_read_bw() {
    bw_matrix(
        "ib_read_bw",
        23240,
        &[
            &["-n", "1000", "-s", "64"],
            &["-n", "1000", "-s", "65536"],
            &["-n", "1000", "-q", "4"],
        ],
    );
}

#[test]
fn ib_send_bw() {
    bw_matrix(
        "ib_send_bw",
        23280,
        &[
            &["-n", "1000", "-s", "64"],
            &["-n", "1000", "-s", "65536"],
            // Unreliable SENDs may find no receive posted (the receiver
            // is a process on a busy 2-core machine) and are then dropped,
            // as on a wire: a receiver counting to -n would wait forever,
            // so these run for a duration instead.
            &["-D", "1", "-c", "UC"],
            &["-D", "1", "-c", "UD", "-s", "4096"],
            &["-n", "1000", "-q", "4"],
        ],
    );
}

#[test]
fn ib_atomic_bw() {
    bw_matrix(
        "ib_atomic_bw",
        23320,
        &[
            &["-n", "1000", "-A", "FETCH_AND_ADD"],
            &["-n", "1000", "-A", "CMP_AND_SWAP"],
            &["-n", "1000", "-A", "FETCH_AND_ADD", "-q", "4"],
        ],
    );
}

#[test]
fn ib_write_lat() {
    lat_matrix(
        "ib_write_lat",
        23360,
        &[
            &["-n", "1000", "-s", "64"],
            &["-n", "1000", "-s", "65536"],
            &["-n", "1000", "-c", "UC"],
        ],
    );
}

#[test]
fn ib_read_lat() {
    lat_matrix(
        "ib_read_lat",
        23380,
        &[&["-n", "1000", "-s", "64"], &["-n", "1000", "-s", "65536"]],
    );
}

#[test]
fn ib_send_lat() {
    lat_matrix(
        "ib_send_lat",
        23400,
        &[
            &["-n", "1000", "-s", "64"],
            &["-n", "1000", "-s", "65536"],
            &["-n", "1000", "-c", "UC"],
            &["-n", "1000", "-c", "UD", "-s", "1024"],
        ],
    );
}

#[test]
fn ib_atomic_lat() {
    lat_matrix(
        "ib_atomic_lat",
        23420,
        &[
            &["-n", "1000", "-A", "FETCH_AND_ADD"],
            &["-n", "1000", "-A", "CMP_AND_SWAP"],
        ],
    );
}
