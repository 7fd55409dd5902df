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

#[path = "common/libs.rs"]
mod libs;

use libs::{profile_dir, serial};
use softrdma_testkit::{Done, Proc};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(120);

/// `softrdma exec --lib` with this build's libraries (libs.rs).
fn lib_dir() -> PathBuf {
    libs::lib_dir("softrdma-ucx-lib", false)
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
    crate::libs::require_root("ip netns, veth");
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
        // (SOFTRDMA_SAME_HOST passes: the suite runs with the same-host
        // path on and off.)
        if (k.starts_with("SOFTRDMA_") && k != "SOFTRDMA_SAME_HOST")
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
    // SOFTRDMA_LOG is cleared above; `TEST_SOFTRDMA_LOG=softrdma=debug`
    // hands it to the launcher and its ranks (their notes land in the
    // output a failing test prints).
    if let Ok(v) = std::env::var("TEST_SOFTRDMA_LOG") {
        c.env("SOFTRDMA_LOG", v);
    }
    // `TEST_SOFTRDMA_HOST_TRACE=FILE`: the device processes' and
    // members' trace (joins, leaves, ring counters, late loops).
    if let Ok(v) = std::env::var("TEST_SOFTRDMA_HOST_TRACE") {
        c.env("SOFTRDMA_HOST_TRACE", v);
    }
}

/// Runs `cmd` in a process group of its own (ip netns exec, a launcher
/// and its ranks), its output into a file.
fn spawn(cmd: Command, tag: &str) -> Proc {
    Proc::spawn(cmd, "softrdma-ucx-out", tag, true)
}

trait WaitTcp {
    fn wait_listen(&mut self, port: u16, limit: Duration) -> bool;
    fn wait_tcp(&mut self, port: u16, state: &str, limit: Duration) -> bool;
}

impl WaitTcp for Proc {
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

#[path = "ucx_mpi/mpi.rs"]
mod mpi;
#[path = "ucx_mpi/netns.rs"]
mod netns;
#[path = "ucx_mpi/ucx.rs"]
mod ucx;
#[allow(unused_imports)]
use {mpi::*, netns::*, ucx::*};
