//! What the kernel says about a network interface: its MTU (the port MTU
//! of a device bound to one of its addresses follows it, as rxe's follows
//! its netdev's).

use crate::sys::cvt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

/// The MTU of interface `name` in this network namespace (`SIOCGIFMTU`),
/// read now: it follows `ip link set … mtu`.
pub fn interface_mtu(name: &str) -> io::Result<u32> {
    let mut req: libc::ifreq = zeroed_ifreq();
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= req.ifr_name.len() || bytes.contains(&0) {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    for (d, s) in req.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: socket() takes no pointers; the result is checked and owned.
    let fd = cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })
        .or_else(|_| {
            // An IPv6-only namespace.
            // SAFETY: as above.
            cvt(unsafe { libc::socket(libc::AF_INET6, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })
        })?;
    // SAFETY: a descriptor we just created and own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: SIOCGIFMTU reads the NUL-terminated name from and writes the
    // MTU into the ifreq we own, which lives through the call.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFMTU, &mut req) })?;
    // SAFETY: SIOCGIFMTU filled the `ifru_mtu` member of the union.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    u32::try_from(mtu).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))
}

/// The path MTU the kernel holds for the destination of a connected UDP
/// socket (`IP_MTU` / `IPV6_MTU`): the egress interface's MTU, or a
/// smaller one it learnt for that path. An error when the socket is not
/// connected.
pub fn path_mtu(socket: &std::net::UdpSocket) -> io::Result<u32> {
    let (level, name) = if socket.peer_addr()?.is_ipv4() {
        (libc::IPPROTO_IP, libc::IP_MTU)
    } else {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU)
    };
    let mtu = crate::sys::getsockopt_int(socket.as_fd(), level, name)?;
    u32::try_from(mtu).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))
}

fn zeroed_ifreq() -> libc::ifreq {
    // SAFETY: ifreq is plain data (a name array and a union of integers
    // and pointers); all-zero is a valid value of it.
    unsafe { std::mem::zeroed() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_and_missing_interfaces() {
        // lo's MTU is 65536 on Linux since 3.x (and never below 1500).
        assert!(interface_mtu("lo").unwrap() >= 1500);
        assert!(interface_mtu("no-such-if0").is_err());
        assert!(interface_mtu("").is_err());
        assert!(interface_mtu("a-name-far-too-long-for-ifnamsiz").is_err());
    }

    #[test]
    fn path_mtu_of_loopback() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        // Not connected: no path yet.
        assert!(path_mtu(&s).is_err());
        s.connect("127.0.0.1:4791").unwrap();
        // The route's MTU is lo's, capped at the largest IP packet (65535;
        // lo's MTU is 65536).
        assert_eq!(
            path_mtu(&s).unwrap(),
            interface_mtu("lo").unwrap().min(65535)
        );
    }
}
