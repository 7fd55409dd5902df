//! What the tests that build network namespaces share (`netns.rs`,
//! `mcast.rs`, `port_mtu.rs`): running `ip`, namespaces deleted on drop,
//! the root check, a role (an ignored test of the same executable) started
//! in a namespace and the lines it prints; and the access rights the data
//! tests (`netns.rs`, `faults.rs`) register their regions with.
#![allow(dead_code)]

use softrdma::Access;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};

/// Runs a command; its stderr in the error.
pub fn sh(args: &[&str]) -> std::result::Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Network namespaces, deleted when this goes.
pub struct Namespaces(pub Vec<String>);

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = sh(&["ip", "netns", "del", n]);
        }
    }
}

/// True when running as root (reads /proc, no libc call needed).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        .unwrap_or(false)
}

/// Whether the test may build namespaces: root and iproute2. Without them
/// it panics, unless `SOFTRDMA_SKIP_NETNS` is set (then it says SKIPPED
/// and returns false).
pub fn need_root() -> bool {
    if !is_root() || Command::new("ip").arg("-V").output().is_err() {
        if std::env::var_os("SOFTRDMA_SKIP_NETNS").is_some() {
            eprintln!("SKIPPED: needs root and iproute2 (SOFTRDMA_SKIP_NETNS set)");
            return false;
        }
        panic!("this test needs root and iproute2; set SOFTRDMA_SKIP_NETNS=1 to skip it");
    }
    true
}

/// Runs the ignored test `name` of this executable in namespace `ns` with
/// `envs`, its stdin and stdout piped.
pub fn role(ns: &str, name: &str, envs: &[(&str, String)]) -> Child {
    let exe = std::env::current_exe().unwrap();
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns])
        .arg(exe)
        .args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    for (k, v) in envs {
        c.env(k, v);
    }
    c.spawn().unwrap()
}

/// The rest of the first line with `marker` a role prints (from `marker`
/// on); panics if the role ends first.
pub fn wait_line(r: &mut impl BufRead, marker: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            r.read_line(&mut line).unwrap() > 0,
            "role exited before {marker}"
        );
        if let Some(i) = line.find(marker) {
            return line[i..].trim().to_string();
        }
    }
}

/// Local write and every remote access.
pub fn access() -> Access {
    Access::LOCAL_WRITE
        .with(Access::REMOTE_WRITE)
        .with(Access::REMOTE_READ)
        .with(Access::REMOTE_ATOMIC)
}
