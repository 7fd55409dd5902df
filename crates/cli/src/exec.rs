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
//! The same file is librdmacm too (its RDMACM_1.x symbols): the directory
//! also gets `librdmacm.so.1`, a second symlink to it. A program that
//! needs both maps the file once (the loader knows it by device and
//! inode), so libibverbs and librdmacm share one state.
//!
//! `--addr IP` binds the program's device to IP (`SOFTRDMA_ADDR`);
//! without it each process takes its own loopback address.

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
    /// Bind the device to this address (SOFTRDMA_ADDR); default: a free
    /// loopback address per process.
    #[arg(long, value_name = "IP")]
    pub addr: Option<IpAddr>,
    /// Print the library directory and the command instead of running it.
    #[arg(long)]
    pub dry_run: bool,
    /// The program and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<OsString>,
}

/// Why `softrdma exec` could not run the program.
#[derive(Debug)]
pub enum Error {
    /// No libibverbs.so of softrdma was found.
    NoLibrary(Vec<PathBuf>),
    /// The symlink directory could not be made.
    Io(PathBuf, std::io::Error),
    /// exec(2) failed.
    Exec(OsString, std::io::Error),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NoLibrary(tried) => {
                write!(f, "softrdma's libibverbs.so not found (looked in")?;
                for t in tried {
                    write!(f, " {}", t.display())?;
                }
                write!(
                    f,
                    "); build it with `cargo build --release -p softrdma-ibverbs` or pass --lib DIR"
                )
            }
            Error::Io(p, e) => write!(f, "{}: {e}", p.display()),
            Error::Exec(p, e) => write!(f, "running {}: {e}", p.to_string_lossy()),
        }
    }
}

impl std::error::Error for Error {}

/// The directories searched for the library, in order.
pub fn candidates(lib: Option<&Path>, exe: Option<&Path>) -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(l) = lib {
        v.push(l.to_path_buf());
        return v;
    }
    if let Some(d) = std::env::var_os("SOFTRDMA_IBVERBS_DIR") {
        v.push(PathBuf::from(d));
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
    if let Some(a) = args.addr {
        cmd.env("SOFTRDMA_ADDR", a.to_string());
    }
    if args.dry_run {
        let _ = writeln!(out, "LD_LIBRARY_PATH={}", path.to_string_lossy());
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
