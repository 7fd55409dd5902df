//! What the tests that build network namespaces share (`netns.rs`,
//! `mcast.rs`, `port_mtu.rs`): running `ip`, namespaces deleted on drop,
//! the root check, a role (an ignored test of the same executable) started
//! in a namespace and the lines it prints; and the access rights the data
//! tests (`netns.rs`, `faults.rs`) register their regions with.
#![allow(dead_code)]

use softrdma::Access;
#[allow(unused_imports)] // each test binary uses its own part
pub use softrdma_testkit::{is_root, sh, wait_line};
use std::process::{Child, Command, Stdio};

/// Network namespaces, deleted when this goes.
pub struct Namespaces(pub Vec<String>);

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = sh(&["ip", "netns", "del", n]);
        }
    }
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
        .args(softrdma_testkit::role_args(name))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    for (k, v) in envs {
        c.env(k, v);
    }
    c.spawn().unwrap()
}

/// Local write and every remote access.
pub fn access() -> Access {
    Access::LOCAL_WRITE
        .with(Access::REMOTE_WRITE)
        .with(Access::REMOTE_READ)
        .with(Access::REMOTE_ATOMIC)
}
