//! What the application tests share: `softrdma exec` commands with a clean
//! environment, processes in their own group (killed with everything they
//! started when a test fails half-way), network namespaces joined by a
//! veth, our own small programs built from `tests/apps/`, one test at a
//! time on the machine.

#![allow(dead_code)]

pub use crate::libs::{profile_dir, serial};
use softrdma_testkit::{ip, netns_del};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `softrdma exec --lib` with this build's libraries (libs.rs).
pub fn lib_dir() -> PathBuf {
    crate::libs::lib_dir("softrdma-apps-lib", true)
}

/// The path of `tool`, or a failure naming the package to install.
pub fn require(tool: &str, package: &str) -> PathBuf {
    if tool.starts_with('/') {
        let p = PathBuf::from(tool);
        assert!(
            p.exists(),
            "{tool} missing: apt-get install -y {package} (scripts/deps)"
        );
        return p;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{tool} not found: apt-get install -y {package} (scripts/deps)"))
}

pub fn require_root() {
    crate::libs::require_root("network namespaces, tgtd's control socket");
}

/// A directory of this test's own (removed first if it exists).
pub fn work_dir(tag: &str) -> PathBuf {
    let d = profile_dir()
        .join("softrdma-apps-out")
        .join(format!("{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("work dir");
    d
}

/// Removes what the caller's environment could change in a program
/// (softrdma, uDAPL, Mooncake settings, a preload of its own).
pub fn clean_env(c: &mut Command) {
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        // (SOFTRDMA_SAME_HOST passes: the suite runs with the same-host
        // path on and off.)
        if (k.starts_with("SOFTRDMA_") && k != "SOFTRDMA_SAME_HOST")
            || k.starts_with("MC_")
            || k.starts_with("DAT_")
            || k == "LD_PRELOAD"
            || k == "LD_LIBRARY_PATH"
        {
            c.env_remove(k.as_ref());
        }
    }
    // Two cores: a spinning program yields now and then.
    c.env("SOFTRDMA_POLL_YIELD", "1").stdin(Stdio::null());
}

/// `softrdma exec --lib … --addr ADDR -- prog args…`, in network namespace
/// `ns` if given (`ip netns exec` execs: the child's pid is the program's).
pub fn sx(ns: Option<&str>, addr: &str, prog: &str, args: &[&str]) -> Command {
    let mut inner: Vec<String> = vec![
        env!("CARGO_BIN_EXE_softrdma").into(),
        "exec".into(),
        "--lib".into(),
        lib_dir().display().to_string(),
        "--addr".into(),
        addr.into(),
        "--".into(),
        prog.into(),
    ];
    inner.extend(args.iter().map(|s| s.to_string()));
    plain(ns, &inner)
}

/// `argv` as is (not over softrdma), in namespace `ns` if given.
pub fn plain(ns: Option<&str>, argv: &[String]) -> Command {
    let mut c = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).args(argv);
            c
        }
        None => {
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]);
            c
        }
    };
    clean_env(&mut c);
    c
}

/// A program running in a process group of its own, its output (stdout and
/// stderr) into a file (softrdma-testkit's).
pub use softrdma_testkit::{Done, Proc};

pub fn spawn(cmd: Command, tag: &str) -> Proc {
    Proc::spawn(cmd, "softrdma-apps-out", tag, true)
}

/// What the application tests add to [`Proc`].
pub trait WaitListening {
    fn wait_listening(&mut self, ns: Option<&str>, limit: Duration) -> bool;
}

impl WaitListening for Proc {
    /// Waits until this process (the program itself: `ip netns exec` and
    /// `softrdma exec` both exec) has a listening TCP socket in namespace
    /// `ns` (true), or it ends or `limit` passes (false). For programs that
    /// say they wait for a client before they listen (uDAPL's scm provider
    /// opens its TCP port in a thread of its own).
    fn wait_listening(&mut self, ns: Option<&str>, limit: Duration) -> bool {
        let pid = format!("pid={},", self.child.id());
        let argv: Vec<String> = ["ss", "-Hltnp"].iter().map(|s| s.to_string()).collect();
        let t = Instant::now();
        while t.elapsed() < limit && self.running() {
            let o = plain(ns, &argv).output().expect("ss (iproute2)");
            if String::from_utf8_lossy(&o.stdout).contains(&pid) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

pub fn run(cmd: Command, tag: &str, limit: Duration) -> Done {
    spawn(cmd, tag).wait(limit)
}

/// Two network namespaces ("hosts") joined by a veth pair whose ends have
/// the same name on both sides (uDAPL's cma provider names its device by
/// interface, and dtest's client takes the server's provider name), MTU
/// 1500 unless set: `addrs` addresses on each side (10.66.NET.1, .3, … on
/// A; .2, .4, … on B).
pub struct Netns {
    pub a: String,
    pub b: String,
    pub ifname: String,
    pub addrs_a: Vec<String>,
    pub addrs_b: Vec<String>,
}

impl Netns {
    pub fn new(net: u8, addrs: usize, mtu: Option<u32>) -> Netns {
        require_root();
        require("ip", "iproute2");
        let id = std::process::id() % 100_000;
        let n = Netns {
            a: format!("srap{id}a"),
            b: format!("srap{id}b"),
            ifname: "srapp0".into(),
            addrs_a: (0..addrs)
                .map(|k| format!("10.66.{net}.{}", 2 * k + 1))
                .collect(),
            addrs_b: (0..addrs)
                .map(|k| format!("10.66.{net}.{}", 2 * k + 2))
                .collect(),
        };
        for x in [&n.a, &n.b] {
            netns_del(x);
            ip(&["netns", "add", x]);
        }
        let (va, vb) = (format!("srap{id}va"), format!("srap{id}vb"));
        ip(&[
            "link", "add", &va, "netns", &n.a, "type", "veth", "peer", "name", &vb, "netns", &n.b,
        ]);
        for (ns, dev, addrs) in [(&n.a, &va, &n.addrs_a), (&n.b, &vb, &n.addrs_b)] {
            ip(&["-n", ns, "link", "set", dev, "name", &n.ifname]);
            for a in addrs {
                ip(&[
                    "-n",
                    ns,
                    "addr",
                    "add",
                    &format!("{a}/24"),
                    "dev",
                    &n.ifname,
                ]);
            }
            if let Some(m) = mtu {
                ip(&["-n", ns, "link", "set", &n.ifname, "mtu", &m.to_string()]);
            }
            ip(&["-n", ns, "link", "set", &n.ifname, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        n
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for x in [&self.a, &self.b] {
            netns_del(x);
        }
    }
}

/// Builds `tests/apps/SRC` with `compiler` (gcc, g++) and `libs` into the
/// profile directory; returns the executable.
pub fn build(src: &str, compiler: &str, libs: &[&str], package: &str) -> String {
    let cc = require(compiler, compiler);
    let path = format!("{}/tests/apps/{src}", env!("CARGO_MANIFEST_DIR"));
    let stem = src.split('.').next().expect("a name");
    let exe = profile_dir().join(format!("softrdma-apps-{stem}"));
    let out = Command::new(cc)
        .args(["-O1", "-g", "-Wall", "-Wextra", "-Werror", &path, "-o"])
        .arg(&exe)
        .args(libs)
        .output()
        .expect("compiler");
    assert!(
        out.status.success(),
        "{compiler} {src} failed (needs {package}):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe.display().to_string()
}
