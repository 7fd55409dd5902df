//! `softrdma exec -- PROGRAM ARGS…`: runs an unmodified verbs program
//! (rdma-core's `ibv_*_pingpong`, perftest, your own) over softrdma.
//!
//! The program is executed (it replaces this process) with softrdma's
//! `libibverbs.so.1` (crate `softrdma-ibverbs`) first on `LD_LIBRARY_PATH`,
//! so the dynamic linker picks it instead of the system's libibverbs.
//! The library is looked for, in order:
//!
//! 1. `--lib DIR` or `$SOFTRDMA_IBVERBS_DIR`: a directory holding
//!    `libibverbs.so.1` or `libibverbs.so`;
//! 2. next to the `softrdma` binary (`target/<profile>/` after
//!    `cargo build`, where cargo puts `libibverbs.so`), in `deps/` below
//!    it (where building the tests leaves it), or its parent;
//! 3. `../lib/softrdma/` from the binary (an installed layout).
//!
//! Cargo names the library `libibverbs.so`; the dynamic linker wants the
//! soname `libibverbs.so.1`, so when only the former exists a directory
//! `softrdma-ibverbs-lib/` beside it (or in the temporary directory, if
//! that is read-only) gets a `libibverbs.so.1` symlink.
//!
//! `--addr ADDRESS` binds the program's device (`SOFTRDMA_ADDR`): an IP
//! address, `if:NAME` (the address of interface NAME), `first` (the first
//! non-loopback interface's address) or `auto`; without it each process
//! takes its own loopback address.
//!
//! UCX (and through it Open MPI and MPICH) lists a device only if it has a
//! device node and reads its RoCE version from sysfs; softrdma has
//! neither, so `libsoftrdma_preload.so` (crate `softrdma-preload`), found
//! in the same places as the library, is added to `LD_PRELOAD`: it
//! answers exactly those paths and nothing else (`--no-preload` leaves it
//! out). Children inherit all of it: mpirun's daemons and hydra's proxies
//! started on this host, and the ranks they start. Ranks on other hosts
//! get it from the launcher (Open MPI: `-x LD_LIBRARY_PATH -x LD_PRELOAD
//! -x SOFTRDMA_ADDR=if:NAME`; MPICH's hydra passes the environment on by
//! default), see the README.
//!
//! The same file is librdmacm too (its RDMACM_1.x symbols): the directory
//! also gets `librdmacm.so.1`, a second symlink to it. A program that
//! needs both maps the file once (the loader knows it by device and
//! inode), so libibverbs and librdmacm share one state.
//!
//! The preload library shows the devices in sysfs and `/dev/infiniband`
//! as a kernel RDMA device is shown (crate softrdma-sysfs). Two more
//! things complete what programs see of a kernel device:
//!
//! - `rdma` (iproute2's tool, which asks the kernel over netlink): a
//!   directory first on `PATH` holds `rdma`, a link to this binary, which
//!   answers `rdma link show` and `rdma dev show` for softrdma's devices
//!   and hands every other command to the real tool ([`crate::rdma`]);
//!   `bin/rdma` beside the library when installed, else made there or in
//!   the private runtime directory;
//! - Open MPI's openib BTL: it wakes up when `/sys/class/infiniband`
//!   exists, and cannot use a RoCE device without its rdmacm connection
//!   scheme (Debian's Open MPI 4.1 has only udcm): it would print two
//!   warnings per process before giving up. `OMPI_MCA_btl_openib_if_exclude`
//!   names softrdma's devices (unless the environment already says which
//!   devices openib takes), which keeps it as quiet as before; UCX is Open
//!   MPI's way to them.

use std::ffi::OsString;
use std::net::IpAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// Arguments of `softrdma exec`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory holding softrdma's libibverbs.so.1 (or libibverbs.so).
    #[arg(long, value_name = "DIR")]
    pub lib: Option<PathBuf>,
    /// Bind the device to this address (SOFTRDMA_ADDR): an IP address,
    /// if:NAME (the address of interface NAME), first (the first
    /// non-loopback interface's address) or auto (default: a free loopback
    /// address per process, reachable from this host only).
    #[arg(long, value_name = "ADDRESS", value_parser = parse_addr)]
    pub addr: Option<String>,
    /// Do not put libsoftrdma_preload.so (device visibility for UCX/MPI)
    /// in LD_PRELOAD.
    #[arg(long)]
    pub no_preload: bool,
    /// Print the library directory and the command instead of running it.
    #[arg(long)]
    pub dry_run: bool,
    /// The program and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<OsString>,
}

/// Checks an `--addr` value: an IP address, `if:NAME`, `first` or `auto`.
pub fn parse_addr(s: &str) -> Result<String, String> {
    let ok = match s {
        "auto" | "first" => true,
        _ => match s.strip_prefix("if:") {
            Some(n) => !n.is_empty() && n.len() < 16 && !n.contains(['/', ' ']),
            None => s.parse::<IpAddr>().is_ok(),
        },
    };
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not an IP address, if:NAME (an interface), first or auto"
        ))
    }
}

/// Whether `command` launches MPI ranks on other hosts: an MPI launcher
/// (mpirun, mpiexec, orterun and their `.openmpi`/`.mpich`/`.hydra`
/// variants) given hosts (`--host`, `-H`, `-hosts`, a host or machine
/// file).
pub fn launches_on_other_hosts(command: &[OsString]) -> bool {
    let Some(prog) = command.first() else {
        return false;
    };
    let base = Path::new(prog)
        .file_name()
        .map(|b| b.to_string_lossy().into_owned())
        .unwrap_or_default();
    let launcher = ["mpirun", "mpiexec", "orterun"]
        .iter()
        .any(|l| base == *l || base.starts_with(&format!("{l}.")));
    launcher
        && command[1..].iter().any(|a| {
            let a = a.to_string_lossy();
            let name = a.split('=').next().unwrap_or("");
            matches!(
                name,
                "--host"
                    | "-host"
                    | "-H"
                    | "-hosts"
                    | "--hostfile"
                    | "-hostfile"
                    | "-f"
                    | "--machinefile"
                    | "-machinefile"
                    | "--default-hostfile"
            )
        })
}

/// The warning for a launch on other hosts with every device on its
/// default loopback address (no `--addr`, `SOFTRDMA_ADDR`, or config).
pub const LOOPBACK_ACROSS_HOSTS: &str = "softrdma exec: this job runs ranks on other hosts, \
and each softrdma device is on a loopback address (no --addr, SOFTRDMA_ADDR or \
/etc/softrdma.conf), which other hosts cannot reach: add --addr if:NAME (the \
interface the hosts share) or --addr first, and pass LD_LIBRARY_PATH, LD_PRELOAD \
and SOFTRDMA_ADDR on to the ranks (Open MPI: -x NAME)";

/// The preload library's file name.
pub const PRELOAD: &str = "libsoftrdma_preload.so";

/// The first candidate directory holding the preload library.
pub fn preload_lib(candidates: &[PathBuf]) -> Option<PathBuf> {
    candidates
        .iter()
        .map(|d| d.join(PRELOAD))
        .find(|p| p.is_file())
        .and_then(|p| p.canonicalize().ok())
}

/// `LD_PRELOAD` with `lib` first (once).
pub fn preload_path(lib: &Path, old: Option<OsString>) -> OsString {
    let mut v = OsString::from(lib.as_os_str());
    if let Some(o) = old {
        let o = o.to_string_lossy().into_owned();
        for item in o.split([' ', ':']).filter(|i| !i.is_empty()) {
            if Path::new(item) != lib {
                v.push(":");
                v.push(item);
            }
        }
    }
    v
}

/// Why `softrdma exec` could not run the program.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No libibverbs.so of softrdma was found.
    #[error(
        "softrdma's libibverbs.so not found (looked in{}); build it with `cargo build --release -p softrdma-ibverbs` or pass --lib DIR",
        .0.iter().map(|t| format!(" {}", t.display())).collect::<String>()
    )]
    NoLibrary(Vec<PathBuf>),
    /// The symlink directory could not be made.
    #[error("{path}: {err}", path = .0.display(), err = .1)]
    Io(PathBuf, std::io::Error),
    /// exec(2) failed.
    #[error("running {prog}: {err}", prog = .0.to_string_lossy(), err = .1)]
    Exec(OsString, std::io::Error),
}

/// The directories searched for the library, in order.
pub fn candidates(lib: Option<&Path>, exe: Option<&Path>) -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(l) = lib {
        v.push(l.to_path_buf());
        return v;
    }
    if let Some(d) = softrdma::config::global()
        .ok()
        .and_then(|c| c.ibverbs_dir.value.clone())
    {
        v.push(d);
    }
    if let Some(dir) = exe.and_then(Path::parent) {
        v.push(dir.to_path_buf());
        // Where building the tests leaves it (`cargo build` copies it up).
        v.push(dir.join("deps"));
        if let Some(up) = dir.parent() {
            v.push(up.to_path_buf());
            v.push(up.join("lib").join("softrdma"));
        }
    }
    v
}

/// A directory with `libibverbs.so.1` for `LD_LIBRARY_PATH`, from the
/// first candidate holding the library.
pub fn library_dir(candidates: &[PathBuf]) -> Result<PathBuf, Error> {
    for dir in candidates {
        if dir.join("libibverbs.so.1").is_file() && dir.join("librdmacm.so.1").is_file() {
            return Ok(dir.clone());
        }
        // The library itself: cargo's name, or the soname alone (an
        // installed copy without the librdmacm link).
        let so = ["libibverbs.so", "libibverbs.so.1"]
            .iter()
            .map(|n| dir.join(n))
            .find(|p| p.is_file());
        if let Some(so) = so {
            let so = so.canonicalize().map_err(|e| Error::Io(so.clone(), e))?;
            let beside = dir.join("softrdma-ibverbs-lib");
            let tmp =
                std::env::temp_dir().join(format!("softrdma-ibverbs-lib-{}", std::process::id()));
            let mut last = None;
            for d in [beside, tmp] {
                match link_in(&d, &so) {
                    Ok(()) => return Ok(d),
                    Err(e) => last = Some(Error::Io(d, e)),
                }
            }
            return Err(last.expect("two attempts"));
        }
    }
    Err(Error::NoLibrary(candidates.to_vec()))
}

/// The names the library is loaded by: libibverbs and librdmacm.
pub const SONAMES: [&str; 2] = ["libibverbs.so.1", "librdmacm.so.1"];

/// Makes `dir/libibverbs.so.1` and `dir/librdmacm.so.1` symlinks to `so`.
fn link_in(dir: &Path, so: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for name in SONAMES {
        let link = dir.join(name);
        if std::fs::read_link(&link).ok().as_deref() == Some(so) {
            continue;
        }
        // Another process may be doing the same: make it under a private
        // name and rename over (atomic).
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(so, &tmp)?;
        std::fs::rename(&tmp, &link)?;
    }
    Ok(())
}

/// The `rdma` shim's name.
pub const RDMA_SHIM: &str = "rdma";

/// A directory holding `rdma` → `exe`, for `PATH`: `bin/` in the library
/// directory (installed there, or made), else in the private runtime
/// directory.
pub fn shim_dir(libdir: &Path, exe: &Path) -> Result<PathBuf, Error> {
    let exe = exe
        .canonicalize()
        .map_err(|e| Error::Io(exe.to_path_buf(), e))?;
    let beside = libdir.join("bin");
    let mut tries = vec![beside];
    if let Ok(r) = softrdma_sysfs::runtime_dir() {
        tries.push(r.join("bin"));
    }
    let mut last = None;
    for d in tries {
        let link = d.join(RDMA_SHIM);
        if link.canonicalize().ok().as_deref() == Some(exe.as_path()) {
            return Ok(d);
        }
        let made = std::fs::create_dir_all(&d).and_then(|()| {
            let tmp = d.join(format!(".{RDMA_SHIM}.{}", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(&exe, &tmp)?;
            std::fs::rename(&tmp, &link)
        });
        match made {
            Ok(()) => return Ok(d),
            Err(e) => last = Some(Error::Io(d, e)),
        }
    }
    Err(last.expect("at least one directory"))
}

/// `PATH` with `dir` first.
pub fn search_path(dir: &Path, old: Option<OsString>) -> OsString {
    let mut v = OsString::from(dir.as_os_str());
    if let Some(o) = old.filter(|o| !o.is_empty()) {
        v.push(":");
        v.push(o);
    }
    v
}

/// The Open MPI variable that keeps its openib BTL off softrdma's devices
/// (see the module's documentation), unless the environment already says
/// which devices openib takes.
pub fn openib_exclude(
    devices: &[String],
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Option<(&'static str, String)> {
    const EXCLUDE: &str = "OMPI_MCA_btl_openib_if_exclude";
    const INCLUDE: &str = "OMPI_MCA_btl_openib_if_include";
    if devices.is_empty() || env(EXCLUDE).is_some() || env(INCLUDE).is_some() {
        return None;
    }
    Some((EXCLUDE, devices.join(",")))
}

/// `LD_LIBRARY_PATH` with `dir` first.
pub fn library_path(dir: &Path, old: Option<OsString>) -> OsString {
    let mut v = OsString::from(dir.as_os_str());
    if let Some(o) = old.filter(|o| !o.is_empty()) {
        v.push(":");
        v.push(o);
    }
    v
}

/// Runs the command; returns only on failure (or after `--dry-run`).
pub fn run(args: &Args, out: &mut dyn std::io::Write) -> Result<(), Error> {
    let exe = std::env::current_exe().ok();
    let dir = library_dir(&candidates(args.lib.as_deref(), exe.as_deref()))?;
    let path = library_path(&dir, std::env::var_os("LD_LIBRARY_PATH"));
    let prog = &args.command[0];
    let mut cmd = std::process::Command::new(prog);
    cmd.args(&args.command[1..]).env("LD_LIBRARY_PATH", &path);
    let mut shown = vec![format!("LD_LIBRARY_PATH={}", path.to_string_lossy())];
    if !args.no_preload {
        let cands = candidates(args.lib.as_deref(), exe.as_deref());
        match preload_lib(&cands) {
            Some(lib) => {
                let p = preload_path(&lib, std::env::var_os("LD_PRELOAD"));
                shown.push(format!("LD_PRELOAD={}", p.to_string_lossy()));
                cmd.env("LD_PRELOAD", p);
            }
            None => eprintln!(
                "softrdma exec: {PRELOAD} not found next to the library: UCX and MPI will not \
                 see softrdma devices (build it: cargo build --release -p softrdma-preload)"
            ),
        }
    }
    // Devices placed by SOFTRDMA_ADDR or a config file (a configuration
    // that does not parse is the library's to report, not a loopback one).
    let configured = args.addr.is_some()
        || softrdma::config::global().map_or(true, |c| {
            c.config_file.value.is_some()
                || c.devices
                    .iter()
                    .any(|d| d.addr.source != softrdma::config::Source::Default)
        });
    if !configured && launches_on_other_hosts(&args.command) {
        eprintln!("{LOOPBACK_ACROSS_HOSTS}");
    }
    // Devices of the program that share an address start their device
    // process from this binary (see `softrdma::host`).
    if let Some(exe) = &exe {
        if std::env::var_os(softrdma::host::BIN_ENV).is_none() {
            cmd.env(softrdma::host::BIN_ENV, exe);
        }
    }
    if let Some(a) = &args.addr {
        cmd.env("SOFTRDMA_ADDR", a);
        shown.push(format!("SOFTRDMA_ADDR={a}"));
    }
    if let Some(exe) = &exe {
        match shim_dir(&dir, exe) {
            Ok(bin) => {
                let p = search_path(&bin, std::env::var_os("PATH"));
                shown.push(format!("PATH={}", p.to_string_lossy()));
                cmd.env("PATH", p);
            }
            Err(e) => eprintln!("softrdma exec: no `rdma` for softrdma's devices: {e}"),
        }
    }
    let names: Vec<String> = softrdma::config::global()
        .map(|c| c.devices.iter().map(|d| d.name.clone()).collect())
        .unwrap_or_default();
    if let Some((k, v)) = openib_exclude(&names, &|k| std::env::var_os(k)) {
        shown.push(format!("{k}={v}"));
        cmd.env(k, v);
    }
    if args.dry_run {
        for s in &shown {
            let _ = writeln!(out, "{s}");
        }
        let _ = writeln!(
            out,
            "{}",
            args.command
                .iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" ")
        );
        return Ok(());
    }
    let e = cmd.exec();
    Err(Error::Exec(prog.clone(), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_library_and_links_the_soname() {
        let d = std::env::temp_dir().join(format!("softrdma-exec-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("target/release")).unwrap();
        let exe = d.join("target/release/softrdma");
        assert!(matches!(
            library_dir(&candidates(None, Some(&exe))),
            Err(Error::NoLibrary(_))
        ));
        std::fs::write(d.join("target/release/libibverbs.so"), b"elf").unwrap();
        let got = library_dir(&candidates(None, Some(&exe))).unwrap();
        assert_eq!(got, d.join("target/release/softrdma-ibverbs-lib"));
        for name in SONAMES {
            let target = std::fs::read_link(got.join(name)).unwrap();
            assert_eq!(
                target,
                d.join("target/release/libibverbs.so")
                    .canonicalize()
                    .unwrap()
            );
        }
        // Idempotent.
        assert_eq!(library_dir(&candidates(None, Some(&exe))).unwrap(), got);
        // An explicit directory with the soname wins as it is.
        std::fs::create_dir_all(d.join("lib")).unwrap();
        std::fs::write(d.join("lib/libibverbs.so.1"), b"elf").unwrap();
        std::fs::write(d.join("lib/librdmacm.so.1"), b"elf").unwrap();
        assert_eq!(
            library_dir(&candidates(Some(&d.join("lib")), Some(&exe))).unwrap(),
            d.join("lib")
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn addresses_preload_and_env_list() {
        for ok in ["10.0.0.1", "::1", "auto", "first", "if:eth0"] {
            assert_eq!(parse_addr(ok).as_deref(), Ok(ok));
        }
        for bad in ["10.0.0", "if:", "eth0", "if:a/b", "firsts"] {
            assert!(parse_addr(bad).is_err(), "{bad}");
        }
        let lib = Path::new("/x/libsoftrdma_preload.so");
        assert_eq!(
            preload_path(lib, None),
            OsString::from("/x/libsoftrdma_preload.so")
        );
        assert_eq!(
            preload_path(lib, Some("/a.so /x/libsoftrdma_preload.so:/b.so".into())),
            OsString::from("/x/libsoftrdma_preload.so:/a.so:/b.so")
        );
    }

    #[test]
    fn recognises_launches_on_other_hosts() {
        let c = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(launches_on_other_hosts(&c(&[
            "mpirun", "-np", "2", "--host", "a,b", "x"
        ])));
        assert!(launches_on_other_hosts(&c(&[
            "/usr/bin/mpirun.openmpi",
            "-H",
            "a,b",
            "x"
        ])));
        assert!(launches_on_other_hosts(&c(&[
            "mpiexec.mpich",
            "-n",
            "2",
            "-hosts",
            "a,b"
        ])));
        assert!(launches_on_other_hosts(&c(&[
            "mpiexec", "-f", "hosts", "./x"
        ])));
        assert!(launches_on_other_hosts(&c(&[
            "mpirun",
            "--hostfile=h",
            "./x"
        ])));
        assert!(!launches_on_other_hosts(&c(&["mpirun", "-np", "2", "./x"])));
        assert!(!launches_on_other_hosts(&c(&["ib_write_bw", "-H", "x"])));
        assert!(!launches_on_other_hosts(&c(&[])));
    }

    #[test]
    fn openib_is_kept_off_unless_the_user_chose() {
        let none = |_: &str| None;
        let d = vec!["softrdma0".to_string(), "roce1".to_string()];
        assert_eq!(
            openib_exclude(&d, &none),
            Some(("OMPI_MCA_btl_openib_if_exclude", "softrdma0,roce1".into()))
        );
        for set in [
            "OMPI_MCA_btl_openib_if_exclude",
            "OMPI_MCA_btl_openib_if_include",
        ] {
            let env = |k: &str| (k == set).then(|| OsString::from("mlx5_0"));
            assert_eq!(openib_exclude(&d, &env), None, "{set}");
        }
        assert_eq!(openib_exclude(&[], &none), None);
    }

    #[test]
    fn the_rdma_shim_links_to_this_binary() {
        let d = std::env::temp_dir().join(format!("softrdma-shim-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let exe = d.join("softrdma");
        std::fs::write(&exe, b"elf").unwrap();
        let bin = shim_dir(&d, &exe).unwrap();
        assert_eq!(bin, d.join("bin"));
        assert_eq!(
            std::fs::canonicalize(bin.join("rdma")).unwrap(),
            exe.canonicalize().unwrap()
        );
        assert_eq!(shim_dir(&d, &exe).unwrap(), bin, "idempotent");
        assert_eq!(
            search_path(&bin, Some("/usr/bin".into())),
            OsString::from(format!("{}:/usr/bin", bin.display()))
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn library_path_goes_first() {
        let p = library_path(Path::new("/x"), Some("/a:/b".into()));
        assert_eq!(p, OsString::from("/x:/a:/b"));
        assert_eq!(library_path(Path::new("/x"), None), OsString::from("/x"));
        assert_eq!(
            library_path(Path::new("/x"), Some("".into())),
            OsString::from("/x")
        );
    }
}
