//! One warning when a device is given a peer it cannot reach from the
//! address it is bound to — the usual mistake of a job across hosts that
//! left every device on its default loopback address. UCX and MPI only
//! report an endpoint timeout seconds later; this says which address and
//! how to set it, once per (device address, peer address).
//!
//! Cases (checked when a QP is given its destination or an address handle
//! is made):
//!
//! - the device is on loopback and the peer's address is not one of this
//!   host's: loopback cannot reach another host;
//! - the peer's address is a loopback address that no softrdma device of
//!   this host holds (its RoCE port, UDP 4791, is free): the peer is on
//!   another host with its device on loopback.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Mutex;

/// UDP port of RoCE v2.
const ROCE_PORT: u16 = 4791;

static WARNED: Mutex<Option<HashSet<(IpAddr, IpAddr)>>> = Mutex::new(None);

const HOW: &str = "bind each host's device to an address the other hosts reach: \
softrdma exec --addr IP|if:NAME|first (or SOFTRDMA_ADDR=..., or a line \
`softrdma0 ADDRESS` in /etc/softrdma.conf)";

/// What is wrong with sending from `local` (device `name`) to `dest`, if
/// anything. `is_local(ip)`: whether this host has the address;
/// `port_free(ip)`: whether nothing holds UDP 4791 there.
pub fn problem(
    name: &str,
    local: IpAddr,
    dest: IpAddr,
    is_local: &dyn Fn(IpAddr) -> bool,
    port_free: &dyn Fn(IpAddr) -> bool,
) -> Option<String> {
    if dest == local || dest.is_unspecified() || dest.is_multicast() {
        return None;
    }
    if local.is_loopback() && !dest.is_loopback() && !is_local(dest) {
        return Some(format!(
            "softrdma: {name} is at {local}, a loopback address, and cannot reach the peer at \
             {dest} on another host; {HOW}"
        ));
    }
    if dest.is_loopback() && port_free(dest) {
        return Some(format!(
            "softrdma: no softrdma device of this host is at {dest}, the peer's address for \
             {name} ({local}): the peer is on another host with its device on loopback (the \
             default), which nothing outside that host reaches; {HOW}"
        ));
    }
    None
}

fn port_free(ip: IpAddr) -> bool {
    UdpSocket::bind(SocketAddr::new(ip, ROCE_PORT)).is_ok()
}

fn is_local(ip: IpAddr) -> bool {
    crate::config::is_local(ip)
}

/// Warns (stderr, once per pair) when `dest` looks unreachable from the
/// device `name` at `local`.
pub fn check(name: &str, local: IpAddr, dest: IpAddr) {
    {
        let mut g = WARNED.lock().unwrap_or_else(|e| e.into_inner());
        if !g.get_or_insert_with(HashSet::new).insert((local, dest)) {
            return;
        }
    }
    if let Some(msg) = problem(name, local, dest, &is_local, &port_free) {
        eprintln!("{msg}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let local = |a: IpAddr| a == ip("10.0.0.5");
        let held = |a: IpAddr| a != ip("127.0.0.9");
        let p = |l: &str, d: &str| problem("softrdma0", ip(l), ip(d), &local, &|a| !held(a));
        // Same host, loopback to loopback (the peer's port is held).
        assert_eq!(p("127.0.0.2", "127.0.0.3"), None);
        // Loopback to another host.
        let m = p("127.0.0.2", "198.18.0.2").unwrap();
        assert!(
            m.contains("127.0.0.2") && m.contains("198.18.0.2") && m.contains("--addr"),
            "{m}"
        );
        // Loopback to this host's other address: fine.
        assert_eq!(p("127.0.0.2", "10.0.0.5"), None);
        // A peer on loopback that no device of this host holds.
        let m = p("127.0.0.2", "127.0.0.9").unwrap();
        assert!(m.contains("127.0.0.9") && m.contains("another host"), "{m}");
        let m = p("198.18.0.1", "127.0.0.9").unwrap();
        assert!(m.contains("198.18.0.1"), "{m}");
        // Between real addresses: nothing to say.
        assert_eq!(p("198.18.0.1", "198.18.0.2"), None);
        // Itself (UCX makes an address handle to its own GID).
        assert_eq!(p("127.0.0.9", "127.0.0.9"), None);
    }
}
