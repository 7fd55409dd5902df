//! `softrdma exec`: an unmodified verbs program runs over softrdma's
//! libibverbs.so.1, found next to the `softrdma` binary.

use std::path::Path;
use std::process::Command;

fn softrdma() -> Command {
    Command::new(env!("CARGO_BIN_EXE_softrdma"))
}

/// The directory `softrdma exec` will take the library from, if built.
fn built_lib() -> Option<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_BIN_EXE_softrdma")).parent().unwrap();
    [dir.to_path_buf(), dir.join("deps")]
        .into_iter()
        .find(|d| d.join("libibverbs.so").exists())
}

fn have(tool: &str) -> bool {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .any(|d| d.join(tool).is_file())
}

#[test]
fn dry_run_puts_the_library_first() {
    let o = softrdma()
        .args(["exec", "--dry-run", "--", "prog", "-x", "1"])
        .env("LD_LIBRARY_PATH", "/elsewhere")
        .env_remove("SOFTRDMA_IBVERBS_DIR")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    if let Some(dir) = built_lib() {
        assert!(o.status.success(), "{err}");
        let first = out.lines().next().unwrap();
        assert!(
            first.starts_with(&format!(
                "LD_LIBRARY_PATH={}",
                dir.join("softrdma-ibverbs-lib").display()
            )),
            "{out}"
        );
        assert!(first.ends_with(":/elsewhere"), "{out}");
        // The preload library (UCX/MPI device visibility) is built with
        // the workspace too.
        assert!(
            out.lines()
                .any(|l| l.starts_with("LD_PRELOAD=") && l.contains("libsoftrdma_preload.so")),
            "{out}"
        );
        assert_eq!(out.lines().last(), Some("prog -x 1"));
    } else {
        // The library is built by `cargo build` of the workspace; alone,
        // the command says what to do.
        assert_eq!(o.status.code(), Some(127), "{out}{err}");
        assert!(
            err.contains("cargo build --release -p softrdma-ibverbs"),
            "{err}"
        );
    }
}

#[test]
fn runs_ibv_devinfo_over_softrdma() {
    // Built by `cargo build`, or by building softrdma-ibverbs's tests as
    // the workspace test run does: without it this test cannot run, and
    // says so instead of passing.
    assert!(
        built_lib().is_some(),
        "softrdma's libibverbs.so is not built next to the softrdma binary: \
         cargo build -p softrdma-ibverbs (the workspace test run builds it)"
    );
    assert!(have("ibv_devinfo"), "apt-get install -y ibverbs-utils");
    let o = softrdma()
        .args(["exec", "--addr", "127.0.0.219", "--", "ibv_devinfo", "-v"])
        .env_remove("SOFTRDMA_IBVERBS_DIR")
        .env_remove("SOFTRDMA_CONFIG")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("hca_id:\tsoftrdma0"), "{out}");
    assert!(out.contains("::ffff:127.0.0.219, RoCE v2"), "{out}");
    // A program that does not exist: exec's error, exit 127.
    let o = softrdma()
        .args(["exec", "--", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127));
}

#[test]
fn warns_when_a_multi_host_job_stays_on_loopback() {
    if built_lib().is_none() {
        eprintln!("NOTE: softrdma-ibverbs not built: exec not run");
        return;
    }
    let run = |extra: &[&str]| {
        let mut c = softrdma();
        c.args(["exec", "--dry-run"])
            .args(extra)
            .args(["--", "mpirun", "-np", "2", "-H", "hostA,hostB", "./app"])
            .env_remove("SOFTRDMA_ADDR")
            .env_remove("SOFTRDMA_CONFIG");
        let o = c.output().unwrap();
        assert!(o.status.success());
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    if Path::new("/etc/softrdma.conf").exists() {
        return; // this host configures its devices
    }
    let err = run(&[]);
    assert!(
        err.contains("loopback") && err.contains("--addr if:NAME"),
        "{err}"
    );
    assert_eq!(run(&["--addr", "first"]), "");
}
