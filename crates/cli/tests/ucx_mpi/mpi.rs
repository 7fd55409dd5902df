//! MPI: Open MPI and MPICH run our checks and NetPIPE on one host; a rank
//! that dies fails the job.

use super::*;

pub(crate) const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ucx");

/// Builds tests/ucx/NAME.c with `mpicc` into the build directory.
pub(crate) fn mpi_program(mpicc: &str, name: &str, tag: &str) -> PathBuf {
    require(mpicc);
    let dir = profile_dir().join("softrdma-ucx-bin");
    std::fs::create_dir_all(&dir).expect("bin dir");
    let out = dir.join(format!("{name}-{tag}"));
    let tmp = dir.join(format!(".{name}-{tag}.{}", std::process::id()));
    let st = Command::new(mpicc)
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&tmp)
        .arg(format!("{SRC}/{name}.c"))
        .status()
        .unwrap_or_else(|e| panic!("{mpicc}: {e}"));
    assert!(st.success(), "{mpicc} {name}.c");
    std::fs::rename(&tmp, &out).expect("rename");
    out
}

/// `SOFTRDMA_POLL_YIELD` of ranks that share their namespace's address:
/// off. Ranks spinning on their CQs with `sched_yield` every 4th empty
/// poll starved the device process of their group (Linux 6.18's EEVDF,
/// the ranks and the device process in one session, i.e. one scheduler
/// autogroup): with yield, Open MPI's 8 ranks per namespace failed 3 runs
/// of 3 with RC retry exceeded, the device process's loop running up to
/// 8.5 s after its 100 ms wait ended (`SOFTRDMA_HOST_TRACE`), and the 4
/// ranks per namespace beside 8 CPU hogs failed 2 of 4 (late up to
/// 9.3 s; 16 s with the device process in a session of its own);
/// without, 2 of 2 passed each (late at most 0.6 s).
const SHARED_YIELD: &str = "0";

/// `TEST_MPI_ENV="K=V K2=V2"`: more settings for every rank (debugging,
/// e.g. `UCX_LOG_LEVEL=debug` or a UCX tunable; the environment of the
/// test itself never reaches the ranks, see `clean_env`).
fn extra_env() -> Vec<String> {
    std::env::var("TEST_MPI_ENV")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mpi {
    OpenMpi,
    Mpich,
}

impl Mpi {
    pub(crate) fn tag(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "ompi",
            Mpi::Mpich => "mpich",
        }
    }
    pub(crate) fn mpicc(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "mpicc.openmpi",
            Mpi::Mpich => "mpicc.mpich",
        }
    }
    fn netpipe(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "NPopenmpi",
            Mpi::Mpich => "NPmpich2",
        }
    }
    /// The launcher and its arguments for two ranks; `hosts`: the two
    /// namespaces' addresses (one rank each, through nsrsh).
    fn launch(
        self,
        hosts: Option<(&str, &str)>,
        per_host: usize,
        tls: &str,
    ) -> (&'static str, Vec<String>) {
        let np = if hosts.is_some() { 2 * per_host } else { 2 }.to_string();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        match self {
            Mpi::OpenMpi => {
                require("mpirun.openmpi");
                let mut v = s(&["-np", &np, "--bind-to", "none"]);
                if let Some((a, b)) = hosts {
                    v.extend(s(&[
                        "--host",
                        &format!("{a}:{per_host},{b}:{per_host}"),
                        "--mca",
                        "plm_rsh_agent",
                    ]));
                    v.push(format!("{SRC}/nsrsh"));
                    v.extend(s(&["--mca", "plm_rsh_no_tree_spawn", "1"]));
                    v.extend(s(&["--mca", "oob_tcp_if_include", &format!("{a}/24")]));
                }
                // pml ucx (its priority is below ob1's on a device that is
                // not an mlx* NIC); no openib/ofi.
                v.extend(s(&[
                    "--mca", "pml", "ucx", "--mca", "btl", "self", "--mca", "mtl", "^ofi",
                ]));
                for e in [
                    format!("UCX_TLS={tls},self"),
                    "UCX_NET_DEVICES=softrdma0:1".into(),
                    "UCX_LOG_LEVEL=info".into(),
                ] {
                    v.push("-x".into());
                    v.push(e);
                }
                if per_host > 1 {
                    v.extend(s(&["-x", &format!("SOFTRDMA_POLL_YIELD={}", SHARED_YIELD)]));
                }
                for e in extra_env() {
                    v.push("-x".into());
                    v.push(e);
                }
                ("mpirun.openmpi", v)
            }
            Mpi::Mpich => {
                require("mpiexec.mpich");
                let mut v = s(&["-n", &np]);
                if let Some((a, b)) = hosts {
                    v.extend(s(&[
                        "-hosts",
                        &format!("{a}:{per_host},{b}:{per_host}"),
                        "-launcher",
                        "ssh",
                        "-launcher-exec",
                    ]));
                    v.push(format!("{SRC}/nsrsh"));
                }
                // Ranks on one host would talk through shared memory.
                for (k, val) in [
                    ("MPIR_CVAR_NOLOCAL", "1".to_string()),
                    ("UCX_TLS", format!("{tls},self")),
                    ("UCX_NET_DEVICES", "softrdma0:1".into()),
                    ("UCX_LOG_LEVEL", "info".into()),
                ] {
                    v.extend(["-genv".to_string(), k.to_string(), val]);
                }
                if per_host > 1 {
                    v.extend(s(&["-genv", "SOFTRDMA_POLL_YIELD", SHARED_YIELD]));
                }
                for e in extra_env() {
                    let (k, val) = e.split_once('=').unwrap_or((&e, ""));
                    v.extend(s(&["-genv", k, val]));
                }
                ("mpiexec.mpich", v)
            }
        }
    }
}

/// Runs `prog args` on two ranks with `mpi`, on one host (`ns` None) or
/// across the two namespaces.
pub(crate) fn mpirun(mpi: Mpi, ns: Option<&Netns>, prog: &Path, args: &[&str], tag: &str) -> Done {
    mpirun_n(mpi, ns, 1, prog, args, tag)
}

/// [`mpirun`] with `per_host` ranks in each namespace (all of them on
/// the namespace's one address: one shared device).
pub(crate) fn mpirun_n(
    mpi: Mpi,
    ns: Option<&Netns>,
    per_host: usize,
    prog: &Path,
    args: &[&str],
    tag: &str,
) -> Done {
    let hosts = ns.map(|n| (n.addr_a.as_str(), n.addr_b.as_str()));
    let (launcher, mut v) = mpi.launch(hosts, per_host, "rc_v");
    v.push(prog.to_string_lossy().into_owned());
    v.extend(args.iter().map(|a| a.to_string()));
    let v: Vec<&str> = v.iter().map(String::as_str).collect();
    let cmd = match ns {
        None => sx(None, launcher, &v),
        Some(n) => {
            // The launcher runs in the first namespace; each rank's device
            // takes its namespace's address (`first`), which is what makes
            // them reach each other.
            let inner = sx(Some("first"), launcher, &v);
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &n.a])
                .arg(inner.get_program())
                .args(inner.get_args());
            clean_env(&mut c);
            c.env(
                "NSRSH_MAP",
                format!("{}={} {}={}", n.addr_a, n.a, n.addr_b, n.b),
            );
            c
        }
    };
    run(cmd, &format!("{}-{tag}", mpi.tag()), LIMIT)
}

pub(crate) fn check_mpi(what: &str, d: &Done, ok_line: &str) {
    assert!(
        d.ok(),
        "{what}: exit {:?} after {:.1}s:\n{}",
        d.status,
        d.secs,
        d.out
    );
    assert!(
        d.out.contains(ok_line),
        "{what}: no {ok_line:?}:\n{}",
        d.out
    );
    assert_no_ucx_warnings(what, &d.out);
    // Both ranks' endpoints to each other on softrdma (UCX_LOG_LEVEL=info).
    let eps = d
        .out
        .lines()
        .filter(|l| l.contains("ep_cfg[") && l.contains("rc_verbs/softrdma0:1"))
        .count();
    assert!(
        eps >= 2,
        "{what}: {eps} endpoints on rc_verbs/softrdma0:1:\n{}",
        d.out
    );
    println!("{what}: ok in {:.1}s", d.secs);
}

pub(crate) fn mpi_suite(mpi: Mpi, ns: Option<&Netns>) {
    let pp = mpi_program(mpi.mpicc(), "pingpong", mpi.tag());
    let ar = mpi_program(mpi.mpicc(), "allreduce", mpi.tag());
    require(mpi.netpipe());
    let where_ = if ns.is_some() {
        "two namespaces"
    } else {
        "one host"
    };
    let d = mpirun(mpi, ns, &pp, &["20"], "pingpong");
    check_mpi(&format!("{mpi:?} pingpong, {where_}"), &d, "pingpong ok");
    print_lines(&d.out, "size ");
    let d = mpirun(mpi, ns, &ar, &[], "allreduce");
    check_mpi(&format!("{mpi:?} allreduce, {where_}"), &d, "allreduce ok");
    if ns.is_none() {
        // Waiting ranks sleep: softrdma's descriptors are readable only
        // while an event is pending, and its progress thread goes idle.
        let idle = mpi_program(mpi.mpicc(), "idle", mpi.tag());
        let d = mpirun(mpi, ns, &idle, &[], "idle");
        check_mpi(&format!("{mpi:?} idle ranks, {where_}"), &d, "idle ok");
        print_lines(&d.out, "of CPU");
    }
    // NetPIPE: its integrity mode checks every message's bytes.
    let out = profile_dir().join(format!(
        "softrdma-ucx-out/np-{}-{}.out",
        mpi.tag(),
        std::process::id()
    ));
    let np = which(mpi.netpipe());
    let o = out.to_string_lossy().into_owned();
    let d = mpirun(
        mpi,
        ns,
        &np,
        &["-i", "-u", "1048576", "-n", "10", "-p", "0", "-o", &o],
        "netpipe",
    );
    check_mpi(
        &format!("{mpi:?} NetPIPE -i, {where_}"),
        &d,
        "Integrity check passed",
    );
    assert!(!d.out.contains("Integrity check failed"), "{}", d.out);
    let d = mpirun(
        mpi,
        ns,
        &np,
        &["-u", "1048576", "-n", "10", "-p", "0", "-o", &o],
        "netpipe",
    );
    check_mpi(&format!("{mpi:?} NetPIPE, {where_}"), &d, " bytes ");
    print_lines(&d.out, "bytes");
}

pub(crate) fn which(tool: &str) -> PathBuf {
    require(tool);
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .expect("found above")
}

pub(crate) fn print_lines(out: &str, pat: &str) {
    for l in out.lines().filter(|l| l.contains(pat)) {
        println!("  {l}");
    }
}

#[test]
fn openmpi_one_host() {
    let _s = serial();
    mpi_suite(Mpi::OpenMpi, None);
}

#[test]
fn mpich_one_host() {
    let _s = serial();
    mpi_suite(Mpi::Mpich, None);
}

#[test]
fn mpi_rank_that_dies_fails_the_job() {
    let _s = serial();
    for mpi in [Mpi::OpenMpi, Mpi::Mpich] {
        let pp = mpi_program(mpi.mpicc(), "pingpong", mpi.tag());
        // Rank 1 exits in the middle of the 64 KiB round trips.
        let d = mpirun(mpi, None, &pp, &["20", "5"], "dies");
        println!(
            "{mpi:?}: job ended after {:.1}s with {:?}",
            d.secs, d.status
        );
        assert!(
            d.status.is_some(),
            "{mpi:?}: the job hung after a rank died:\n{}",
            d.out
        );
        assert!(!d.ok(), "{mpi:?}: {}", d.out);
        assert!(d.out.contains("exiting abruptly"), "{}", d.out);
    }
}
