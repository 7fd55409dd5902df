//! Mooncake: the transfer engine (its Python wheel) on one host and across
//! two namespaces, with the RoCE payload checked in a capture.

use super::*;

pub(crate) const MOONCAKE: &str = "mooncake-transfer-engine-non-cuda==0.3.13";

/// The Python of a virtual environment with Mooncake, made on first use in
/// the cache directory (`SOFTRDMA_TEST_CACHE`, else
/// `/var/cache/softrdma-tests`), outside the clone.
pub(crate) fn mooncake_python() -> PathBuf {
    let cache = std::env::var_os("SOFTRDMA_TEST_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/softrdma-tests"));
    std::fs::create_dir_all(&cache).expect("cache directory");
    let venv = cache.join("mooncake-venv-0.3.13");
    let py = venv.join("bin/python");
    let lock = std::fs::File::create(cache.join("mooncake.lock")).expect("lock");
    let st = Command::new("flock")
        .arg("-x")
        .arg("0")
        .stdin(lock.try_clone().unwrap())
        .status()
        .expect("flock");
    assert!(st.success());
    let works = |py: &Path| {
        Command::new(py)
            .args(["-c", "import mooncake.engine"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !works(&py) {
        require("python3", "python3-venv");
        let _ = std::fs::remove_dir_all(&venv);
        let o = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .output()
            .expect("python3");
        assert!(
            o.status.success(),
            "python3 -m venv (apt-get install python3-venv): {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let o = Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", MOONCAKE])
            .output()
            .expect("pip");
        assert!(
            o.status.success(),
            "pip install {MOONCAKE} (needs PyPI): {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(works(&py), "{MOONCAKE} does not import");
    }
    py
}

/// Payload bytes of the RoCE requests from `from` to `to` and of the
/// responses back, from `softrdma dump`'s per-QP totals.
pub(crate) fn roce_payloads(pcap: &Path, from: &str, to: &str) -> (u64, u64) {
    let o = Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .arg("dump")
        .arg(pcap)
        .output()
        .expect("softrdma dump");
    let text = String::from_utf8_lossy(&o.stdout);
    let sum = |class: &str, a: &str, b: &str| -> u64 {
        text.lines()
            .filter(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.len() > 4 && w[0] == class && w[1] == a && w[2] == "->" && w[3] == b
            })
            .filter_map(|l| l.split("payload ").nth(1))
            .filter_map(|x| x.split(',').next())
            .filter_map(|x| x.trim().parse::<u64>().ok())
            .sum()
    };
    (sum("req", from, to), sum("resp", to, from))
}

/// Mooncake's transfer engine, unmodified and with no hand-written
/// topology: it finds the RDMA device itself, and 32 MiB written and
/// 32 MiB read between two processes go over RoCE (the capture says so),
/// every byte checked.
pub(crate) fn mooncake_suite(tns: Option<&str>, taddr: &str, ins: Option<&str>, iaddr: &str) {
    let py = mooncake_python();
    let py = py.display().to_string();
    let script = format!(
        "{}/tests/apps/mooncake_transfer.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let dir = work_dir("mooncake");
    let pcap = dir.join("target.pcap");
    let mut tc = sx(tns, taddr, &py, &[&script, "target", taddr]);
    tc.env("SOFTRDMA_PCAP", &pcap)
        .stdin(std::process::Stdio::piped());
    let mut target = spawn(tc, "mooncake-target");
    assert!(
        target.wait_for("READY ", Duration::from_secs(60)),
        "{}",
        target.text()
    );
    let ready = target.text();
    let r: Vec<&str> = ready
        .lines()
        .find_map(|l| l.strip_prefix("READY "))
        .expect("READY line")
        .split_whitespace()
        .collect();
    let ini = run(
        sx(
            ins,
            iaddr,
            &py,
            &[&script, "initiator", iaddr, r[0], r[1], r[2]],
        ),
        "mooncake-initiator",
        LIMIT,
    );
    {
        use std::io::Write;
        let stdin = target.child.stdin.as_mut().expect("stdin");
        let _ = stdin.write_all(b"check\n");
    }
    let _ = target.child.stdin.take();
    let tgt = target.wait(LIMIT);
    for (who, d) in [("target", &tgt), ("initiator", &ini)] {
        assert!(
            !d.out.contains("Found 0 HCAs"),
            "Mooncake's {who} found no RDMA device and would use TCP:\n{}",
            d.out
        );
        assert!(d.out.contains("HCAs."), "{}", d.out);
    }
    ini.expect_ok();
    tgt.expect_ok();
    assert!(ini.out.contains("initiator ok"), "{}", ini.out);
    assert!(tgt.out.contains("target ok"), "{}", tgt.out);
    let (written, read) = roce_payloads(&pcap, iaddr, taddr);
    assert!(
        written >= 32 << 20 && read >= 32 << 20,
        "RoCE payload: {written} bytes written, {read} read (want 32 MiB each)"
    );
    println!(
        "mooncake: {written} bytes written, {read} read over RoCE in {:.2} s",
        ini.secs
    );
}

#[test]
fn mooncake_transfer_engine_on_one_host() {
    let _s = serial();
    mooncake_suite(None, "127.66.13.1", None, "127.66.13.2");
}

#[test]
fn mooncake_transfer_engine_across_two_namespaces() {
    let _s = serial();
    let n = Netns::new(13, 1, None);
    mooncake_suite(Some(&n.a), &n.addrs_a[0], Some(&n.b), &n.addrs_b[0]);
}
