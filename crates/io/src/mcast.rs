//! IP multicast for RoCE v2 multicast groups: a device sends to a group
//! from its own socket (on its interface, looped back to this host's
//! members), and receives a group on a socket of its own bound to the
//! group's address and port and joined on the device's interface.
//!
//! - [`UdpSocket::set_multicast_interface`]: `IP_MULTICAST_IF` (an
//!   `ip_mreqn` with the device's address and interface) or
//!   `IPV6_MULTICAST_IF`, and `IP(V6)_MULTICAST_LOOP` on, so members on
//!   this host — other devices, other processes, the sender's own device —
//!   get the datagram too.
//! - [`UdpSocket::bind_multicast`]: a socket bound to `group:port` with
//!   `SO_REUSEADDR` (every such socket of the host gets its own copy: each
//!   device that joined, in any process), `IP(V6)_MULTICAST_ALL` off (only
//!   the group it is bound to, not every group some socket of the host
//!   joined), and `IP_ADD_MEMBERSHIP` / `IPV6_JOIN_GROUP` on the device's
//!   interface. Closing it leaves the group.
//!
//! Linux's loopback interface carries IPv4 multicast but not IPv6 (no
//! multicast route, no MLD on `lo`): an IPv6 device needs an interface
//! with multicast (a veth, a dummy, a NIC).

use crate::host::{each_ifaddr, sockaddr_ip};
use crate::socket::{SocketConfig, UdpSocket};
use crate::sys::{setsockopt_int, setsockopt_struct};
use std::ffi::CStr;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::ops::ControlFlow;
use std::os::fd::AsFd;

/// `IP_MULTICAST_ALL` (linux/in.h; not in every libc).
const IP_MULTICAST_ALL: libc::c_int = 49;
/// `IPV6_MULTICAST_ALL` (linux/in6.h, Linux 4.20).
const IPV6_MULTICAST_ALL: libc::c_int = 29;

/// The index of the interface that holds address `ip` (getifaddrs): the
/// one with that very address, else the one whose subnet contains it
/// (Linux binds any 127/8 address on `lo`, which lists 127.0.0.1/8).
pub fn interface_of(ip: IpAddr) -> Option<u32> {
    let (mut exact, mut subnet) = (None, None);
    let bits = |x: IpAddr| match x {
        IpAddr::V4(v) => u32::from(v) as u128,
        IpAddr::V6(v) => u128::from(v),
    };
    let listed = each_ifaddr(|i| {
        // SAFETY: ifa_addr (and ifa_netmask, when not null) point to
        // sockaddrs of the family ifa_addr names.
        let (a, mask) = unsafe { (sockaddr_ip(i.ifa_addr), sockaddr_ip(i.ifa_netmask)) };
        let Some(a) = a else {
            return ControlFlow::Continue(());
        };
        let mask = mask.map(bits);
        let same_family = a.is_ipv4() == ip.is_ipv4();
        let is_exact = a == ip;
        let in_subnet = same_family && mask.is_some_and(|m| m != 0 && bits(a) & m == bits(ip) & m);
        let wanted = is_exact || (in_subnet && subnet.is_none());
        if !wanted {
            return ControlFlow::Continue(());
        }
        // SAFETY: a NUL-terminated interface name from getifaddrs.
        let name = unsafe { CStr::from_ptr(i.ifa_name) };
        // SAFETY: a NUL-terminated name; 0 means no such interface.
        let idx = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if idx == 0 {
            return ControlFlow::Continue(());
        }
        if is_exact {
            exact = Some(idx);
            return ControlFlow::Break(());
        }
        subnet = Some(idx);
        ControlFlow::Continue(())
    });
    if !listed {
        return None;
    }
    exact.or(subnet)
}

fn v4_octets(ip: Ipv4Addr) -> libc::in_addr {
    libc::in_addr {
        s_addr: u32::from_ne_bytes(ip.octets()),
    }
}

impl UdpSocket {
    /// Sends multicast datagrams out of interface `ifindex` from address
    /// `local` (the socket's), looped back to this host's members.
    pub fn set_multicast_interface(&self, local: IpAddr, ifindex: u32) -> io::Result<()> {
        let b = self.as_fd();
        match local {
            IpAddr::V4(a) => {
                let m = libc::ip_mreqn {
                    imr_multiaddr: v4_octets(Ipv4Addr::UNSPECIFIED),
                    imr_address: v4_octets(a),
                    imr_ifindex: ifindex as libc::c_int,
                };
                setsockopt_struct(b, libc::IPPROTO_IP, libc::IP_MULTICAST_IF, &m)?;
                setsockopt_int(b, libc::IPPROTO_IP, libc::IP_MULTICAST_LOOP, 1)
            }
            IpAddr::V6(_) => {
                setsockopt_int(
                    b,
                    libc::IPPROTO_IPV6,
                    libc::IPV6_MULTICAST_IF,
                    ifindex as libc::c_int,
                )?;
                setsockopt_int(b, libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_LOOP, 1)
            }
        }
    }

    /// A socket receiving multicast group `group` (address and port) on
    /// interface `ifindex`, whose address is `local` (see the module).
    /// Destination addresses are not reported (`recv_dst_ip` is turned
    /// off: every datagram is the group's).
    pub fn bind_multicast(
        group: SocketAddr,
        local: IpAddr,
        ifindex: u32,
        config: &SocketConfig,
    ) -> io::Result<UdpSocket> {
        if !group.ip().is_multicast() || group.is_ipv4() != local.is_ipv4() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a multicast group of the local address's family",
            ));
        }
        let mut cfg = config.clone();
        cfg.recv_dst_ip = false;
        let s = UdpSocket::bind_with_reuse(group, &cfg, true)?;
        let b = s.as_fd();
        match (group.ip(), local) {
            (IpAddr::V4(g), IpAddr::V4(a)) => {
                setsockopt_int(b, libc::IPPROTO_IP, IP_MULTICAST_ALL, 0)?;
                let m = libc::ip_mreqn {
                    imr_multiaddr: v4_octets(g),
                    imr_address: v4_octets(a),
                    imr_ifindex: ifindex as libc::c_int,
                };
                setsockopt_struct(b, libc::IPPROTO_IP, libc::IP_ADD_MEMBERSHIP, &m)?;
            }
            (IpAddr::V6(g), _) => {
                // Best effort: kernels before 4.20 lack it (the socket is
                // bound to the group's address anyway).
                let _ = setsockopt_int(b, libc::IPPROTO_IPV6, IPV6_MULTICAST_ALL, 0);
                let m = libc::ipv6_mreq {
                    ipv6mr_multiaddr: libc::in6_addr {
                        s6_addr: g.octets(),
                    },
                    ipv6mr_interface: ifindex,
                };
                setsockopt_struct(b, libc::IPPROTO_IPV6, libc::IPV6_ADD_MEMBERSHIP, &m)?;
            }
            _ => unreachable!("families checked above"),
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::IoSliceMut;

    /// Two receivers of one group on loopback each get one copy of what a
    /// third socket sends; a socket of another group gets nothing.
    #[test]
    fn loopback_members_each_get_a_copy() {
        let lo: IpAddr = "127.67.9.1".parse().unwrap();
        // 127.67.9.1 is on lo (127/8), though getifaddrs lists 127.0.0.1.
        let Some(ifx) = interface_of(lo) else {
            panic!("no loopback interface")
        };
        assert_eq!(interface_of("127.0.0.1".parse().unwrap()), Some(ifx));
        assert_eq!(interface_of("203.0.113.77".parse().unwrap()), None);
        let cfg = SocketConfig::default();
        let group: SocketAddr = "239.67.9.1:47951".parse().unwrap();
        let other: SocketAddr = "239.67.9.2:47951".parse().unwrap();
        let r1 = UdpSocket::bind_multicast(group, lo, ifx, &cfg).unwrap();
        let r2 = UdpSocket::bind_multicast(group, lo, ifx, &cfg).unwrap();
        let r3 = UdpSocket::bind_multicast(other, lo, ifx, &cfg).unwrap();
        let tx = UdpSocket::bind_with("127.67.9.2:47951".parse().unwrap(), &cfg).unwrap();
        tx.set_multicast_interface("127.67.9.2".parse().unwrap(), ifx)
            .unwrap();
        let sent = tx
            .send(&[crate::Transmit::new(group, b"to the group")])
            .unwrap();
        assert_eq!(sent, 1);
        let recv_all = |s: &UdpSocket| {
            let mut got = Vec::new();
            let start = std::time::Instant::now();
            while start.elapsed() < std::time::Duration::from_millis(300) {
                let mut buf = vec![0u8; crate::GRO_BUF_LEN];
                let mut meta = [crate::RecvMeta::default()];
                if let Ok(1) = s.recv(&mut [IoSliceMut::new(&mut buf)], &mut meta) {
                    got.push((buf[..meta[0].len].to_vec(), meta[0].addr));
                }
            }
            got
        };
        for r in [&r1, &r2] {
            let got = recv_all(r);
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(got[0].0, b"to the group");
            assert_eq!(got[0].1, "127.67.9.2:47951".parse().unwrap());
        }
        assert!(recv_all(&r3).is_empty());
        // A unicast address is no group.
        assert!(
            UdpSocket::bind_multicast("127.0.0.9:47951".parse().unwrap(), lo, ifx, &cfg).is_err()
        );
    }
}
