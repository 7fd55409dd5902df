//! rdma-core's own test suite (Debian's python3-pyverbs, the suite
//! rdma-core's maintainers and the rxe developers run) over softrdma:
//! copied from `/usr/share/doc/rdma-core/tests`, unpacked, 2 MiB huge pages
//! allocated (machine-wide, next to overlapping runs: common/huge_pages.rs),
//! each module in a network namespace of its own (127.0.0.1 is its alone),
//! and every module run with the suite's own `run_tests.py -v`
//! under `softrdma exec`, one module per process. The per-test results are
//! read from unittest's verbose output (and checked against its summary
//! line) and must say:
//!
//! - no test fails or errors, except those [`PENDING`] lists with the
//!   feature (and the helper building it) they wait for;
//! - at least [`FLOOR`] tests pass;
//! - every test that passes on Linux rxe ([`RXE_PASSES`], Debian 12's 6.1
//!   kernel in the rxe VM) passes, unless pending;
//! - every skip has a reason [`SKIPS`] knows: hardware only softrdma will
//!   never have (mlx5, EFA, device memory, dmabuf, CUDA, raw packet QPs,
//!   PCI);
//! - no test [`PENDING`] lists passes (shorten the list when one does);
//! - the unicast rdma_cm tests, two processes on one address, pass
//!   ([`ONE_ADDRESS_RDMACM`]).
//!
//! It prints the counts per outcome and per skip reason, and the time.
//! Raise [`FLOOR`] and shorten [`PENDING`] as features land.
//!
//! Needs python3-pyverbs (scripts/deps) and root for the huge pages; either
//! missing fails the test loudly. Holds the ibverbs interop tests' lock.

#[path = "common/huge_pages.rs"]
mod huge_pages;
#[path = "common/libs.rs"]
mod libs;

use libs::{profile_dir, serial};
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Tests that must pass: at least this many.
const FLOOR: usize = 132;

/// Tests allowed to fail or error, with the feature they wait for.
const PENDING: &[(&str, &str)] = &[
    // Empty: the 7 unicast rdma_cm tests, which run their passive and
    // active sides as two processes on one address (127.0.0.1), pass on
    // the shared device (issue 19).
];

/// rdma-core's unicast rdma_cm tests: each runs its passive and active
/// sides as two processes on one address (127.0.0.1), which only a
/// device the processes share allows (issue 19); they must pass, not be
/// skipped or left out.
const ONE_ADDRESS_RDMACM: &[&str] = &[
    "tests.test_rdmacm.CMTestCase.test_rdmacm_sync_traffic",
    "tests.test_rdmacm.CMTestCase.test_rdmacm_async_traffic",
    "tests.test_rdmacm.CMTestCase.test_rdmacm_async_reject_traffic",
    "tests.test_rdmacm.CMTestCase.test_rdmacm_async_traffic_external_qp",
    "tests.test_rdmacm.CMTestCase.test_rdmacm_async_udp_traffic",
    "tests.test_rdmacm.CMTestCase.test_rdmacm_async_read",
    "tests.test_rdmacm.CMTestCase.test_rdmacm_async_write",
];

/// Skip reasons allowed (a prefix of unittest's reason): features only
/// hardware has. Every feature a software device can have runs.
const SKIPS: &[&str] = &[
    "Can not run the test over non MLX5 device",
    "Could not open mlx5 context",
    "Can not run the test over non EFA device",
    "Device memory is not supported",
    "Allocating dmabuf is not supported",
    "cuda-python",
    "PCI device must be passed by the user",
    // Raw packet QPs (type 8): flow steering, RSS, raw timestamps.
    "Create QP type 8 is not supported",
    "Create Raw Packet QP",
    // mlx5dv's clock conversion (mlx5dv_get_clock_info).
    "Converting timestamp to nanoseconds is not supported",
    // Tag matching (IBV_WC_EX_WITH_TM_INFO, tm_caps): an mlx5 offload; rxe
    // has none either.
    "Extended CQ is not supported",
];

/// The tests that pass on Linux rxe (Debian 12, kernel 6.1, in the rxe
/// VM; /work/shared/briefs/conformance.md): 86.
const RXE_PASSES: &[&str] = &[
    "tests.test_addr.AHTest.test_create_ah",
    "tests.test_addr.AHTest.test_create_ah_roce",
    "tests.test_addr.AHTest.test_destroy_ah",
    "tests.test_atomic.AtomicTest.test_atomic_cmp_and_swap",
    "tests.test_atomic.AtomicTest.test_atomic_fetch_and_add",
    "tests.test_atomic.AtomicTest.test_atomic_invalid_lkey",
    "tests.test_atomic.AtomicTest.test_atomic_invalid_mr_access",
    "tests.test_atomic.AtomicTest.test_atomic_invalid_qp_access",
    "tests.test_atomic.AtomicTest.test_atomic_invalid_rkey",
    "tests.test_atomic.AtomicTest.test_atomic_non_aligned_addr",
    "tests.test_cq.CQAPITest.test_create_cq",
    "tests.test_cq.CQAPITest.test_create_cq_bad_flow",
    "tests.test_cq.CQAPITest.test_create_cq_with_comp_channel",
    "tests.test_cq.CQTest.test_resize_cq",
    "tests.test_cq_events.CqEventsTestCase.test_cq_events_rc",
    "tests.test_cq_events.CqEventsTestCase.test_cq_events_ud",
    "tests.test_cqex.CQEXAPITest.test_create_cq_ex",
    "tests.test_cqex.CQEXAPITest.test_create_cq_ex_bad_flow",
    "tests.test_cqex.CqExTestCase.test_rc_traffic_cq_ex",
    "tests.test_cqex.CqExTestCase.test_ud_traffic_cq_ex",
    "tests.test_device.DeviceTest.test_dev_list",
    "tests.test_device.DeviceTest.test_open_dev",
    "tests.test_device.DeviceTest.test_phys_port_cnt_ex",
    "tests.test_device.DeviceTest.test_query_device",
    "tests.test_device.DeviceTest.test_query_device_ex",
    "tests.test_device.DeviceTest.test_query_gid",
    "tests.test_device.DeviceTest.test_query_gid_ex",
    "tests.test_device.DeviceTest.test_query_gid_ex_bad_flow",
    "tests.test_device.DeviceTest.test_query_gid_table",
    "tests.test_device.DeviceTest.test_query_gid_table_bad_flow",
    "tests.test_device.DeviceTest.test_query_pkey",
    "tests.test_device.DeviceTest.test_query_port",
    "tests.test_device.DeviceTest.test_query_port_bad_flow",
    "tests.test_fork.ForkAPITest.test_is_fork_initialized",
    "tests.test_mr.MRTest.test_reg_mr_bad_flags",
    "tests.test_mr.MWTest.test_invalidate_mw_type1",
    "tests.test_mr.MWTest.test_mw_type1",
    "tests.test_mr.MWTest.test_mw_type2",
    "tests.test_mr.MWTest.test_mw_type2_invalidate_dealloc",
    "tests.test_mr.MWTest.test_mw_type2_invalidate_local",
    "tests.test_mr.MWTest.test_mw_type2_invalidate_remote",
    "tests.test_mr.MWTest.test_reg_mw_wrong_type",
    "tests.test_pd.PDTest.test_alloc_pd",
    "tests.test_pd.PDTest.test_dealloc_pd",
    "tests.test_pd.PDTest.test_destroy_pd_twice",
    "tests.test_pd.PDTest.test_multiple_pd_creation",
    "tests.test_qp.QPTest.test_create_raw_qp_ex_with_illegal_caps_max_recv_sge",
    "tests.test_qp.QPTest.test_create_raw_qp_ex_with_illegal_caps_max_recv_wr",
    "tests.test_qp.QPTest.test_create_raw_qp_ex_with_illegal_caps_max_send_sge",
    "tests.test_qp.QPTest.test_create_raw_qp_ex_with_illegal_caps_max_send_wr",
    "tests.test_qp.QPTest.test_create_rc_qp_ex_no_attr",
    "tests.test_qp.QPTest.test_create_rc_qp_ex_with_attr",
    "tests.test_qp.QPTest.test_create_rc_qp_no_attr",
    "tests.test_qp.QPTest.test_create_rc_qp_with_attr",
    "tests.test_qp.QPTest.test_create_uc_qp_ex_no_attr",
    "tests.test_qp.QPTest.test_create_uc_qp_ex_with_attr",
    "tests.test_qp.QPTest.test_create_uc_qp_no_attr",
    "tests.test_qp.QPTest.test_create_uc_qp_with_attr",
    "tests.test_qp.QPTest.test_create_ud_qp_ex_no_attr",
    "tests.test_qp.QPTest.test_create_ud_qp_ex_with_attr",
    "tests.test_qp.QPTest.test_create_ud_qp_no_attr",
    "tests.test_qp.QPTest.test_create_ud_qp_with_attr",
    "tests.test_qp.QPTest.test_modify_ud_qp",
    "tests.test_qp.QPTest.test_query_data_in_order",
    "tests.test_qp.QPTest.test_query_rc_qp",
    "tests.test_qp.QPTest.test_query_uc_qp",
    "tests.test_qp.QPTest.test_query_ud_qp",
    "tests.test_qpex.QpExTestCase.test_full_rq_bad_flow",
    "tests.test_qpex.QpExTestCase.test_post_receive_qp_state_bad_flow",
    "tests.test_qpex.QpExTestCase.test_post_send_qp_state_bad_flow",
    "tests.test_qpex.QpExTestCase.test_qp_ex_rc_atomic_cmp_swp",
    "tests.test_qpex.QpExTestCase.test_qp_ex_rc_atomic_fetch_add",
    "tests.test_qpex.QpExTestCase.test_qp_ex_rc_bind_mw",
    "tests.test_qpex.QpExTestCase.test_qp_ex_rc_rdma_read",
    "tests.test_qpex.QpExTestCase.test_qp_ex_rc_rdma_read_zero_size",
    "tests.test_qpex.QpExTestCase.test_qp_ex_rc_rdma_write",
    "tests.test_qpex.QpExTestCase.test_qp_ex_rc_rdma_write_imm",
    "tests.test_qpex.QpExTestCase.test_qp_ex_rc_rdma_write_zero_length",
    "tests.test_qpex.QpExTestCase.test_qp_ex_rc_send",
    "tests.test_qpex.QpExTestCase.test_qp_ex_rc_send_imm",
    "tests.test_qpex.QpExTestCase.test_qp_ex_ud_send",
    "tests.test_qpex.QpExTestCase.test_qp_ex_ud_send_imm",
    "tests.test_qpex.QpExTestCase.test_qp_ex_ud_zero_size",
    "tests.test_qpex.QpExTestCase.test_rq_with_larger_sgl_bad_flow",
    "tests.test_relaxed_ordering.RoTestCase.test_ro_rc_traffic",
    "tests.test_relaxed_ordering.RoTestCase.test_ro_ud_traffic",
];

/// Where the Debian package installs the suite.
const SUITE: &str = "/usr/share/doc/rdma-core/tests";
/// 2 MiB huge pages the suite's huge-page tests need (two resources of
/// one page each per test, run one at a time; headroom), reserved
/// machine-wide next to those of overlapping runs (huge_pages.rs).
const HUGE_PAGES: u64 = 16;
/// How long one module may run (the pending rdma_cm tests wait 30 s each
/// for their stuck processes).
const MODULE_LIMIT: Duration = Duration::from_secs(600);

/// `softrdma exec --lib` with this build's libraries (libs.rs).
fn lib_dir() -> PathBuf {
    libs::lib_dir("softrdma-suite-lib", false)
}

/// The suite copied and unpacked (34 of its files are gzipped by
/// dh_compress).
fn unpack() -> PathBuf {
    let src = Path::new(SUITE);
    assert!(
        src.join("run_tests.py").exists(),
        "{SUITE}/run_tests.py is missing: apt-get install -y python3-pyverbs (scripts/deps)"
    );
    let dir = profile_dir().join(format!("rdma-core-suite-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let tests = dir.join("tests");
    std::fs::create_dir_all(&tests).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), tests.join(e.file_name())).unwrap();
        }
    }
    let gz: Vec<PathBuf> = std::fs::read_dir(&tests)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "gz"))
        .collect();
    if !gz.is_empty() {
        let st = Command::new("gunzip")
            .args(&gz)
            .status()
            .expect("gunzip (gzip)");
        assert!(st.success(), "gunzip");
    }
    tests
}

/// How a test ended.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Ok,
    Skipped(String),
    Failed(String),
}

/// Per-test results from unittest's verbose output: `NAME (ID)`, an
/// optional docstring line, ` ... RESULT` (or RESULT alone on a line, after
/// what the test printed); up to the first `=====`/`-----` rule. Checked
/// against the summary (`Ran N tests`, `FAILED (failures=…, errors=…,
/// skipped=…)` / `OK (skipped=…)`): a test the parse missed fails.
fn parse(out: &str) -> Result<Vec<(String, Outcome)>, String> {
    let mut v = Vec::new();
    let mut cur: Option<String> = None;
    let result = |s: &str| -> Option<Outcome> {
        let s = s.trim_end();
        match s {
            "ok" => Some(Outcome::Ok),
            "FAIL" | "ERROR" | "unexpected success" => Some(Outcome::Failed(s.into())),
            "expected failure" => Some(Outcome::Ok),
            _ => s
                .strip_prefix("skipped ")
                .map(|r| Outcome::Skipped(r.trim_matches(|c| c == '\'' || c == '"').into())),
        }
    };
    for line in out.lines() {
        if line.starts_with("=====") || line.starts_with("-----") {
            break;
        }
        if let Some(open) = line.find(" (tests.") {
            if let Some(close) = line[open..].find(')') {
                let id = &line[open + 2..open + close];
                if !id.contains(' ') {
                    if let Some(prev) = cur.take() {
                        return Err(format!("no result for {prev}"));
                    }
                    cur = Some(id.to_string());
                }
            }
        }
        let r = match line.rfind(" ... ") {
            Some(i) => result(&line[i + 5..]),
            None => result(line),
        };
        if let (Some(r), Some(id)) = (r, cur.as_ref()) {
            v.push((id.clone(), r));
            cur = None;
        }
    }
    let ran = out
        .lines()
        .find_map(|l| {
            l.strip_prefix("Ran ")
                .and_then(|r| r.split_whitespace().next())
                .and_then(|n| n.parse::<usize>().ok())
        })
        .ok_or("no `Ran N tests` line")?;
    if ran != v.len() {
        return Err(format!(
            "unittest ran {ran} tests, {} results read",
            v.len()
        ));
    }
    let count = |k: &str| -> usize {
        out.lines()
            .filter(|l| l.starts_with("OK") || l.starts_with("FAILED"))
            .filter_map(|l| l.split(&format!("{k}=")).nth(1))
            .filter_map(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .filter_map(|n| n.parse::<usize>().ok())
            .sum()
    };
    let skipped = v
        .iter()
        .filter(|(_, o)| matches!(o, Outcome::Skipped(_)))
        .count();
    let failed = v
        .iter()
        .filter(|(_, o)| matches!(o, Outcome::Failed(_)))
        .count();
    if skipped != count("skipped")
        || failed != count("failures") + count("errors") + count("unexpected successes")
    {
        return Err(format!(
            "summary disagrees: {skipped} skipped and {failed} failed read"
        ));
    }
    Ok(v)
}

/// The suite's modules (`test_*.py`).
fn modules(tests: &Path) -> Vec<String> {
    let mut m: Vec<String> = std::fs::read_dir(tests)
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().to_string_lossy().into_owned();
            (n.starts_with("test_") && n.ends_with(".py")).then(|| n[..n.len() - 3].to_string())
        })
        .collect();
    m.sort();
    m
}

/// Runs one module; its output (stdout and stderr, as unittest prints).
fn run_module(tests: &Path, module: &str) -> String {
    let log = tests.join(format!("{module}.log"));
    let f = std::fs::File::create(&log).unwrap();
    // A network namespace of its own (loopback up): the suite's rdma_cm
    // tests use 127.0.0.1 (lo's first address), which any other softrdma
    // device of the machine may hold (a loopback-default device takes the
    // first free loopback address; an overlapping run of this test).
    let mut child = Command::new("unshare")
        .args([
            "--net",
            "--",
            "sh",
            "-c",
            "ip link set lo up && exec \"$@\"",
            "sh",
        ])
        .arg(env!("CARGO_BIN_EXE_softrdma"))
        .arg("exec")
        .arg("--lib")
        .arg(lib_dir())
        .args(["--", "/usr/bin/python3", "run_tests.py", "-v"])
        .arg(format!("tests.{module}"))
        .current_dir(tests)
        .env_remove("SOFTRDMA_ADDR")
        .env_remove("SOFTRDMA_CONFIG")
        .stdin(std::process::Stdio::null())
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .process_group(0)
        .spawn()
        .expect("unshare (util-linux): softrdma exec python3");
    let deadline = Instant::now() + MODULE_LIMIT;
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            // The process group we made.
            let _ = softrdma_testkit::signal(-(child.id() as i32), libc::SIGKILL);
            let _ = child.wait();
            panic!(
                "{module} ran more than {MODULE_LIMIT:?}:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::read_to_string(&log).unwrap_or_default()
}

#[test]
fn rdma_cores_suite_passes() {
    let _s = serial();
    let tests = unpack();
    let _huge = huge_pages::reserve(HUGE_PAGES);
    let t0 = Instant::now();
    let mut all: Vec<(String, Outcome)> = Vec::new();
    // Each module's output, by module.
    let mut logs: BTreeMap<String, String> = BTreeMap::new();
    for m in modules(&tests) {
        let out = run_module(&tests, &m);
        match parse(&out) {
            Ok(r) => all.extend(r),
            Err(e) => panic!("{m}: {e}\n{out}"),
        }
        logs.insert(m, out);
    }
    let took = t0.elapsed();

    // Counts, per outcome and per skip reason.
    let ok: Vec<&str> = all
        .iter()
        .filter(|(_, o)| *o == Outcome::Ok)
        .map(|(i, _)| i.as_str())
        .collect();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut unknown = Vec::new();
    for (id, o) in &all {
        if let Outcome::Skipped(r) = o {
            *reasons.entry(r.clone()).or_default() += 1;
            if !SKIPS.iter().any(|p| r.starts_with(p)) {
                unknown.push(format!("{id}: skipped '{r}'"));
            }
        }
    }
    let failed: Vec<&(String, Outcome)> = all
        .iter()
        .filter(|(_, o)| matches!(o, Outcome::Failed(_)))
        .collect();
    println!(
        "rdma-core's suite over softrdma: {} tests, {} ok, {} skipped, {} failed or errored, in {:.0} s",
        all.len(),
        ok.len(),
        reasons.values().sum::<usize>(),
        failed.len(),
        took.as_secs_f64()
    );
    println!("skips per reason:");
    for (r, n) in &reasons {
        let why = if SKIPS.iter().any(|p| r.starts_with(p)) {
            "hardware only"
        } else {
            "NOT ALLOWED"
        };
        println!("  {n:4}  {r}  [{why}]");
    }
    for (id, o) in &failed {
        let pending = PENDING.iter().find(|(p, _)| p == id);
        println!(
            "  {o:?}  {id}{}",
            pending.map_or(String::new(), |(_, f)| format!("  [pending: {f}]"))
        );
    }
    let stale: Vec<&str> = PENDING
        .iter()
        .filter(|(id, _)| ok.contains(id))
        .map(|(id, _)| *id)
        .collect();

    // The assertions.
    let bad: Vec<String> = failed
        .iter()
        .filter(|(id, _)| !PENDING.iter().any(|(p, _)| p == id))
        .map(|(id, o)| format!("{id}: {o:?}"))
        .collect();
    let lost: Vec<&str> = RXE_PASSES
        .iter()
        .filter(|t| !ok.contains(t) && !PENDING.iter().any(|(p, _)| p == *t))
        .copied()
        .collect();
    let one_address: Vec<&str> = ONE_ADDRESS_RDMACM
        .iter()
        .filter(|t| !ok.contains(t))
        .copied()
        .collect();
    let problems = [
        (!bad.is_empty()).then(|| format!("failed or errored: {bad:#?}")),
        (!one_address.is_empty())
            .then(|| format!("rdma_cm on one address, not passed: {one_address:#?}")),
        (ok.len() < FLOOR).then(|| format!("{} tests passed, fewer than {FLOOR}", ok.len())),
        (!lost.is_empty()).then(|| format!("pass on rxe, not here: {lost:#?}")),
        (!unknown.is_empty()).then(|| format!("skipped for a reason not allowed: {unknown:#?}")),
        (!stale.is_empty()).then(|| format!("pass now, remove them from PENDING: {stale:#?}")),
    ];
    let problems: Vec<String> = problems.into_iter().flatten().collect();
    if !problems.is_empty() {
        // The output of the modules the problems name (all if none).
        let mut shown: Vec<&String> = logs
            .keys()
            .filter(|m| problems.iter().any(|p| p.contains(&format!("tests.{m}."))))
            .collect();
        let which = if shown.is_empty() {
            shown = logs.keys().collect();
            "every module"
        } else {
            "the modules named"
        };
        let mut out = String::new();
        for m in shown {
            out.push_str(&format!("\n===== {m} =====\n{}", logs[m]));
        }
        panic!(
            "{}\n\nthe output of {which}:\n{out}\n(every module's log is kept in {})",
            problems.join("\n"),
            tests.display()
        );
    }
    let _ = std::fs::remove_dir_all(tests.parent().unwrap());
}

#[test]
fn the_verbose_output_is_read_whole() {
    let out = "test_a (tests.test_x.C.test_a) ... ok\n\
        test_b (tests.test_x.C.test_b)\nDoc line ... skipped 'No huge pages'\n\
        test_c (tests.test_x.C.test_c) ... printed by the test\nok\n\
        test_d (tests.test_x.C.test_d) ... ERROR\n\
        ======================================================================\n\
        ERROR: test_d (tests.test_x.C.test_d)\n\
        ----------------------------------------------------------------------\n\
        Ran 4 tests in 0.1s\n\nFAILED (errors=1, skipped=1)\n";
    let r = parse(out).unwrap();
    assert_eq!(
        r,
        vec![
            ("tests.test_x.C.test_a".to_string(), Outcome::Ok),
            (
                "tests.test_x.C.test_b".into(),
                Outcome::Skipped("No huge pages".into())
            ),
            ("tests.test_x.C.test_c".into(), Outcome::Ok),
            (
                "tests.test_x.C.test_d".into(),
                Outcome::Failed("ERROR".into())
            ),
        ]
    );
    // A result the parse missed is an error, not a smaller count.
    assert!(parse(&out.replace("Ran 4", "Ran 5")).is_err());
    assert!(parse(&out.replace(
        "test_c (tests.test_x.C.test_c) ... printed by the test\nok\n",
        "test_c (tests.test_x.C.test_c) ... printed\n"
    ))
    .is_err());
    assert!(parse("no summary").is_err());
}

/// Overlapping runs (two checkouts' tests on one machine) each keep their
/// huge pages: the pool covers both, and the end of the first leaves the
/// second's (the pool used to go back to the first's starting size,
/// failing the second's huge-page tests with "Failed to allocate MR
/// buffer").
#[test]
fn huge_pages_stay_while_another_run_holds_them() {
    let first = huge_pages::reserve(HUGE_PAGES);
    let second = huge_pages::reserve(HUGE_PAGES);
    assert!(
        huge_pages::pool() >= 2 * HUGE_PAGES,
        "{}",
        huge_pages::pool()
    );
    let surplus = 2 * HUGE_PAGES * huge_pages::SURPLUS;
    assert!(
        huge_pages::surplus() >= surplus,
        "{}",
        huge_pages::surplus()
    );
    drop(first);
    assert!(huge_pages::pool() >= HUGE_PAGES, "{}", huge_pages::pool());
    assert!(
        huge_pages::surplus() >= surplus / 2,
        "{}",
        huge_pages::surplus()
    );
    let listed = std::fs::read_to_string(huge_pages::REGISTRY).unwrap();
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(&format!("{} ", std::process::id()))),
        "{listed}"
    );
    drop(second);
}
