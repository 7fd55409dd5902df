//! What the tests that run programs through `softrdma exec` share: this
//! build's libraries in a directory for `--lib`, and one such test at a
//! time on the machine (the lock of the ibverbs interop tests). Included
//! with `#[path = "common/libs.rs"] mod libs;`.

#![allow(dead_code)]

pub use softrdma_testkit::profile_dir;
use std::path::PathBuf;
use std::process::Command;

/// The newer of `target/<profile>/NAME` and `target/<profile>/deps/NAME`.
pub fn newest(name: &str) -> PathBuf {
    softrdma_testkit::newest_built(name).unwrap_or_else(|| {
        panic!(
            "{name} is missing in {}: cargo build the workspace",
            profile_dir().display()
        )
    })
}

/// `target/<profile>/DIR` for `softrdma exec --lib`: this build's
/// `libibverbs.so.1` (also as `librdmacm.so.1` with `rdmacm`) and
/// `libsoftrdma_preload.so`, as symbolic links replaced atomically.
pub fn lib_dir(dir: &str, rdmacm: bool) -> PathBuf {
    let dir = profile_dir().join(dir);
    std::fs::create_dir_all(&dir).expect("lib dir");
    let mut links = vec![
        ("libibverbs.so.1", "libibverbs.so"),
        ("libsoftrdma_preload.so", "libsoftrdma_preload.so"),
    ];
    if rdmacm {
        links.push(("librdmacm.so.1", "libibverbs.so"));
    }
    for (link, so) in links {
        let target = newest(so);
        let l = dir.join(link);
        if std::fs::read_link(&l).ok().as_deref() != Some(target.as_path()) {
            let tmp = dir.join(format!(".{link}.{}", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(&target, &tmp).expect("symlink");
            std::fs::rename(&tmp, &l).expect("rename");
        }
    }
    dir
}

/// Held while a test runs: one at a time with the other interop tests.
pub struct Serial(#[allow(dead_code)] std::fs::File);

/// Waits for the interop lock (`target/<profile>/softrdma-ibverbs-interop.lock`).
pub fn serial() -> Serial {
    let p = profile_dir().join("softrdma-ibverbs-interop.lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&p)
        .expect("lock file");
    // `flock` the command holds the lock on our descriptor (inherited)
    // until it exits; wait for it with `-x`. The lock stays with the open
    // file description, which this process keeps.
    let st = Command::new("flock")
        .arg("-x")
        .arg("0")
        .stdin(f.try_clone().expect("dup"))
        .status()
        .expect("flock (util-linux)");
    assert!(st.success(), "flock");
    Serial(f)
}

/// Fails unless the test runs as root (effective uid 0), saying `why`
/// root is needed.
pub fn require_root(why: &str) {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(str::to_string))
        })
        .unwrap_or_default();
    assert_eq!(uid, "0", "these tests must run as root (CI does): {why}");
}

/// Fails unless `softrdma exec` finds this build's library: next to the
/// `softrdma` binary, where building the workspace (`cargo build`, or
/// the tests of softrdma-ibverbs) puts it.
pub fn require_built_library(softrdma_bin: &str) {
    let dir = std::path::Path::new(softrdma_bin).parent().unwrap();
    assert!(
        dir.join("libibverbs.so").exists() || dir.join("deps/libibverbs.so").exists(),
        "softrdma's libibverbs.so is not built in {}: cargo build -p softrdma-ibverbs \
         (the workspace test run builds it)",
        dir.display()
    );
}

/// Whether something listens on TCP `port` (any address; looking at /proc
/// does not use up a server's single accept).
pub fn listening(port: u16) -> bool {
    let hex = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            // sl local_address rem_address st: the local port, state 0A.
            t.lines().skip(1).any(|l| {
                l.split_whitespace()
                    .nth(1)
                    .is_some_and(|a| format!("{a} ").contains(&hex))
                    && l.split_whitespace().nth(3) == Some("0A")
            })
        })
    })
}
