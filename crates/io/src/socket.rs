//! The UDP socket: creation, options, capabilities and counters.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::sys::{cvt, getsockopt_int, setsockopt_int, RawAddr};

/// Most datagrams one `sendmmsg` / `recvmmsg` call carries.
pub const BATCH_SIZE: usize = 32;

/// Most segments this crate puts in one UDP GSO send when the kernel
/// supports GSO (the kernel's `UDP_MAX_SEGMENTS` is at least 64).
///
/// The UDP length field caps a super-datagram at 65,507 bytes of payload on
/// IPv4 (65,527 on IPv6), which is the tighter limit for RoCE-sized
/// segments: 15 segments of 4,128 bytes fit. See [`max_gso_segments_for`].
pub const MAX_GSO_SEGMENTS: usize = 64;

/// Largest UDP payload of one IPv4 datagram (65,535 − 20 − 8).
pub const MAX_UDP_PAYLOAD_V4: usize = 65_507;

/// Largest UDP payload of one IPv6 datagram without jumbograms (65,535 − 8).
pub const MAX_UDP_PAYLOAD_V6: usize = 65_527;

/// Receive-buffer size that always holds a whole GRO super-datagram.
/// With GRO on, give [`UdpSocket::recv`] buffers this large, or the tail
/// segments of a coalesced datagram are cut off (counted in
/// [`Stats::recv_truncated`]).
pub const GRO_BUF_LEN: usize = 65_536;

/// How many `segment_size`-byte segments fit in one GSO send to `dst`,
/// given the UDP length limit and [`MAX_GSO_SEGMENTS`] (at least 1).
pub fn max_gso_segments_for(dst: &SocketAddr, segment_size: usize) -> usize {
    let limit = if dst.is_ipv4() {
        MAX_UDP_PAYLOAD_V4
    } else {
        MAX_UDP_PAYLOAD_V6
    };
    (limit / segment_size.max(1)).clamp(1, MAX_GSO_SEGMENTS)
}

/// How to set up a [`UdpSocket`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SocketConfig {
    /// Requested `SO_SNDBUF` in bytes (the kernel doubles it for overhead).
    /// `SO_SNDBUFFORCE` is tried first (works as root), then `SO_SNDBUF`,
    /// which `net.core.wmem_max` caps.
    pub send_buffer: usize,
    /// Requested `SO_RCVBUF` in bytes; `SO_RCVBUFFORCE` first, as above.
    pub recv_buffer: usize,
    /// Use UDP GSO when the kernel has it.
    pub gso: bool,
    /// Ask for UDP GRO on receive when the kernel has it.
    pub gro: bool,
    /// IPv6 only: send UDP checksum 0 (`UDP_NO_CHECK6_TX`), as Linux rxe
    /// does. The kernel refuses GSO on such a socket (`EINVAL`), so this
    /// turns GSO off for IPv6 sockets; set it to `false` to keep GSO and send
    /// real checksums (which Linux receivers, rxe included, accept).
    /// Receiving checksum-0 datagrams (`UDP_NO_CHECK6_RX`) is always on.
    pub ipv6_zero_checksum_tx: bool,
    /// IPv6 only: `IPV6_V6ONLY`. With `false`, an IPv6 socket bound to `::`
    /// also carries IPv4 (addresses appear IPv4-mapped).
    pub ipv6_only: bool,
    /// `SO_BUSY_POLL` in microseconds, if set. Only NAPI drivers honour it
    /// (not loopback or veth). On Linux 6.18 an unprivileged process may
    /// set it (checked running the tests as `nobody`).
    pub busy_poll_us: Option<u32>,
    /// Report each datagram's destination address ([`crate::RecvMeta::dst_ip`];
    /// `IP_PKTINFO` / `IPV6_RECVPKTINFO`).
    pub recv_dst_ip: bool,
    /// Report TOS / traffic class ([`crate::RecvMeta::tos`]; `IP_RECVTOS` /
    /// `IPV6_RECVTCLASS`), which carries the ECN bits.
    pub recv_tos: bool,
    /// Report TTL / hop limit ([`crate::RecvMeta::ttl`]; `IP_RECVTTL` /
    /// `IPV6_RECVHOPLIMIT`).
    pub recv_ttl: bool,
    /// Keep [`Stats::recv_dropped`] up to date (`SO_RXQ_OVFL`).
    ///
    /// Each of these four costs a control message per received buffer:
    /// about 0.1 µs each on loopback (`udp_bw` ping-pong: 64-byte RTT 4.7-5.0
    /// µs with none, 5.0-6.6 µs with all four), nothing worth noting per
    /// byte with GRO.
    pub recv_drop_count: bool,
}

impl Default for SocketConfig {
    fn default() -> Self {
        Self {
            send_buffer: 8 << 20,
            recv_buffer: 8 << 20,
            gso: true,
            gro: true,
            ipv6_zero_checksum_tx: true,
            ipv6_only: true,
            busy_poll_us: None,
            recv_dst_ip: true,
            recv_tos: true,
            recv_ttl: true,
            recv_drop_count: true,
        }
    }
}

/// A snapshot of a socket's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Datagrams handed to the kernel (GSO segments counted one by one).
    pub datagrams_sent: u64,
    /// Datagrams dropped because their send failed with an error other than
    /// would-block (GSO segments counted one by one).
    pub send_errors: u64,
    /// `errno` of the most recent such error (0 if none yet).
    pub last_send_errno: i32,
    /// GSO was switched off after the kernel refused a GSO send.
    pub gso_disabled: bool,
    /// Datagrams (GRO super-datagrams) received and cut short because the
    /// buffer was too small.
    pub recv_truncated: u64,
    /// The kernel's count of datagrams dropped on this socket because its
    /// receive queue was full (`SO_RXQ_OVFL`), as carried by the last
    /// datagram received (so as of when that datagram was queued).
    pub recv_dropped: u32,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) datagrams_sent: AtomicU64,
    pub(crate) send_errors: AtomicU64,
    pub(crate) last_send_errno: AtomicI32,
    pub(crate) gso_disabled: AtomicBool,
    pub(crate) recv_truncated: AtomicU64,
    pub(crate) recv_dropped: AtomicU32,
}

impl Counters {
    pub(crate) fn send_error(&self, datagrams: u64, errno: i32) {
        self.send_errors.fetch_add(datagrams, Ordering::Relaxed);
        self.last_send_errno.store(errno, Ordering::Relaxed);
    }
}

/// A nonblocking UDP socket set up for RoCE v2 traffic.
///
/// Created by [`UdpSocket::bind`]; sends with [`UdpSocket::send`] /
/// [`UdpSocket::send_gather`] and receives with [`UdpSocket::recv`]. All
/// methods take `&self`, so one socket can be shared between threads, but
/// the design point is one progress thread per socket.
///
/// Setup (each a socket option; see the crate docs for why):
/// - IPv4: `IP_MTU_DISCOVER = IP_PMTUDISC_DO` (DF set, never fragmented
///   locally; identification 0 on unconnected sends), `IP_PKTINFO`,
///   `IP_RECVTOS`, `IP_RECVTTL`.
/// - IPv6: `IPV6_MTU_DISCOVER = IPV6_PMTUDISC_DO`, `UDP_NO_CHECK6_RX`,
///   optionally `UDP_NO_CHECK6_TX`, `IPV6_RECVPKTINFO`, `IPV6_RECVTCLASS`,
///   `IPV6_RECVHOPLIMIT`.
/// - Both: large buffers, `SO_RXQ_OVFL`, `UDP_GRO`, and a GSO probe.
pub struct UdpSocket {
    pub(crate) fd: OwnedFd,
    pub(crate) local: SocketAddr,
    pub(crate) v6: bool,
    /// Current GSO segment limit; 1 means no GSO. Lowered to 1 if the
    /// kernel refuses a GSO send.
    pub(crate) gso_segments: AtomicUsize,
    pub(crate) gro: bool,
    pub(crate) counters: Counters,
}

impl UdpSocket {
    /// Binds a socket to `addr` with [`SocketConfig::default`].
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        Self::bind_with(addr, &SocketConfig::default())
    }

    /// Binds a socket to `addr` (port 0 picks a free port) with `config`.
    pub fn bind_with(addr: SocketAddr, config: &SocketConfig) -> io::Result<Self> {
        Self::bind_with_reuse(addr, config, false)
    }

    /// [`UdpSocket::bind_with`], with `SO_REUSEADDR` when `reuse` (several
    /// sockets bound to one multicast group and port each get a copy of
    /// every datagram; see [`UdpSocket::bind_multicast`]).
    pub(crate) fn bind_with_reuse(
        addr: SocketAddr,
        config: &SocketConfig,
        reuse: bool,
    ) -> io::Result<Self> {
        let v6 = addr.is_ipv6();
        let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
        // SAFETY: plain syscall with constant arguments; returns a new fd or -1.
        let raw = cvt(unsafe {
            libc::socket(
                family,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::IPPROTO_UDP,
            )
        })?;
        // SAFETY: `raw` is a fresh fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let b = fd.as_fd();

        set_buffer(b, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, config.send_buffer)?;
        set_buffer(b, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, config.recv_buffer)?;

        if v6 {
            setsockopt_int(
                b,
                libc::IPPROTO_IPV6,
                libc::IPV6_V6ONLY,
                config.ipv6_only as _,
            )?;
            setsockopt_int(
                b,
                libc::IPPROTO_IPV6,
                libc::IPV6_MTU_DISCOVER,
                libc::IPV6_PMTUDISC_DO,
            )?;
            let on = |flag: bool| libc::c_int::from(flag);
            setsockopt_int(
                b,
                libc::IPPROTO_IPV6,
                libc::IPV6_RECVPKTINFO,
                on(config.recv_dst_ip),
            )?;
            setsockopt_int(
                b,
                libc::IPPROTO_IPV6,
                libc::IPV6_RECVTCLASS,
                on(config.recv_tos),
            )?;
            setsockopt_int(
                b,
                libc::IPPROTO_IPV6,
                libc::IPV6_RECVHOPLIMIT,
                on(config.recv_ttl),
            )?;
            setsockopt_int(b, libc::SOL_UDP, libc::UDP_NO_CHECK6_RX, 1)?;
            if config.ipv6_zero_checksum_tx {
                setsockopt_int(b, libc::SOL_UDP, libc::UDP_NO_CHECK6_TX, 1)?;
            }
        }
        if !v6 || !config.ipv6_only {
            // On a dual-stack IPv6 socket these govern IPv4-mapped traffic;
            // there they are best effort.
            let v4 = [
                (libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO),
                (libc::IP_PKTINFO, libc::c_int::from(config.recv_dst_ip)),
                (libc::IP_RECVTOS, libc::c_int::from(config.recv_tos)),
                (libc::IP_RECVTTL, libc::c_int::from(config.recv_ttl)),
            ];
            for (name, value) in v4 {
                let r = setsockopt_int(b, libc::IPPROTO_IP, name, value);
                if !v6 {
                    r?;
                }
            }
        }
        if config.recv_drop_count {
            // Informational, so best effort.
            let _ = setsockopt_int(b, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1);
        }
        if let Some(us) = config.busy_poll_us {
            setsockopt_int(b, libc::SOL_SOCKET, libc::SO_BUSY_POLL, us as _)?;
        }

        if reuse {
            setsockopt_int(b, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
        }
        let (raw_addr, len) = RawAddr::encode(&addr, v6);
        // SAFETY: `raw_addr` holds a valid sockaddr of `len` bytes.
        cvt(unsafe { libc::bind(b.as_raw_fd(), raw_addr.as_ptr(), len) })?;
        let local = local_addr(b)?;

        // GSO probe: the option exists iff the kernel has UDP GSO (4.18+).
        // Reading it changes nothing.
        let gso_ok = config.gso
            && !(v6 && config.ipv6_zero_checksum_tx)
            && getsockopt_int(b, libc::SOL_UDP, libc::UDP_SEGMENT).is_ok();
        let gro = config.gro && setsockopt_int(b, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok();

        Ok(Self {
            fd,
            local,
            v6,
            gso_segments: AtomicUsize::new(if gso_ok { MAX_GSO_SEGMENTS } else { 1 }),
            gro,
            counters: Counters::default(),
        })
    }

    /// A socket from a descriptor another process (or this one) set up
    /// with [`UdpSocket::bind_with`] and passed on: the same socket, with
    /// its options, read back (GSO, GRO, the address).
    pub fn from_fd(fd: OwnedFd) -> io::Result<Self> {
        let b = fd.as_fd();
        let ty = getsockopt_int(b, libc::SOL_SOCKET, libc::SO_TYPE)?;
        if ty != libc::SOCK_DGRAM {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a datagram socket",
            ));
        }
        let local = local_addr(b)?;
        let v6 = local.is_ipv6();
        let zero_csum =
            v6 && getsockopt_int(b, libc::SOL_UDP, libc::UDP_NO_CHECK6_TX).is_ok_and(|v| v != 0);
        let gso_ok = !zero_csum && getsockopt_int(b, libc::SOL_UDP, libc::UDP_SEGMENT).is_ok();
        let gro = getsockopt_int(b, libc::SOL_UDP, libc::UDP_GRO).is_ok_and(|v| v != 0);
        // SAFETY: F_GETFL/F_SETFL on our descriptor with integer flags.
        unsafe {
            let fl = cvt(libc::fcntl(fd.as_raw_fd(), libc::F_GETFL))?;
            cvt(libc::fcntl(
                fd.as_raw_fd(),
                libc::F_SETFL,
                fl | libc::O_NONBLOCK,
            ))?;
        }
        Ok(Self {
            fd,
            local,
            v6,
            gso_segments: AtomicUsize::new(if gso_ok { MAX_GSO_SEGMENTS } else { 1 }),
            gro,
            counters: Counters::default(),
        })
    }

    /// A new descriptor for the same socket (close-on-exec), to pass to
    /// another process.
    pub fn dup_fd(&self) -> io::Result<OwnedFd> {
        self.fd.try_clone()
    }

    /// The address the socket is bound to (with the port the kernel chose).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Most segments one GSO transmit may carry; 1 when GSO is unavailable
    /// or was switched off. A transmit with more segments, or with a
    /// `segment_size` while GSO is off, is split by [`UdpSocket::send`]
    /// (slower, but correct).
    pub fn max_gso_segments(&self) -> usize {
        self.gso_segments.load(Ordering::Relaxed)
    }

    /// Whether received datagrams may be GRO-coalesced (see
    /// [`crate::RecvMeta::stride`]).
    pub fn gro_enabled(&self) -> bool {
        self.gro
    }

    /// The send and receive buffer sizes the kernel reports (`SO_SNDBUF`,
    /// `SO_RCVBUF`: twice the granted request).
    pub fn buffer_sizes(&self) -> io::Result<(usize, usize)> {
        let b = self.fd.as_fd();
        let snd = getsockopt_int(b, libc::SOL_SOCKET, libc::SO_SNDBUF)?;
        let rcv = getsockopt_int(b, libc::SOL_SOCKET, libc::SO_RCVBUF)?;
        Ok((snd as usize, rcv as usize))
    }

    /// Sets `SO_BUSY_POLL`: how long a blocking receive or `epoll_wait`
    /// spins on the device queue before sleeping. Only NAPI drivers honour
    /// it (see [`SocketConfig::busy_poll_us`]).
    pub fn set_busy_poll(&self, spin: Duration) -> io::Result<()> {
        let us = spin.as_micros().min(i32::MAX as u128) as libc::c_int;
        setsockopt_int(self.fd.as_fd(), libc::SOL_SOCKET, libc::SO_BUSY_POLL, us)
    }

    /// Whether a datagram waits in the receive queue (`FIONREAD`: the
    /// size of the first one; an empty datagram reads as none).
    pub fn has_queued(&self) -> bool {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int to the pointer given.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::FIONREAD, &mut n) };
        r == 0 && n > 0
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        let c = &self.counters;
        Stats {
            datagrams_sent: c.datagrams_sent.load(Ordering::Relaxed),
            send_errors: c.send_errors.load(Ordering::Relaxed),
            last_send_errno: c.last_send_errno.load(Ordering::Relaxed),
            gso_disabled: c.gso_disabled.load(Ordering::Relaxed),
            recv_truncated: c.recv_truncated.load(Ordering::Relaxed),
            recv_dropped: c.recv_dropped.load(Ordering::Relaxed),
        }
    }
}

impl AsFd for UdpSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for UdpSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl std::fmt::Debug for UdpSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpSocket")
            .field("fd", &self.fd.as_raw_fd())
            .field("local", &self.local)
            .field("max_gso_segments", &self.max_gso_segments())
            .field("gro", &self.gro)
            .finish()
    }
}

/// Sets a buffer size, first with the privileged `*FORCE` option.
fn set_buffer(
    fd: BorrowedFd<'_>,
    force: libc::c_int,
    plain: libc::c_int,
    bytes: usize,
) -> io::Result<()> {
    let bytes = bytes.min(i32::MAX as usize / 2) as libc::c_int;
    match setsockopt_int(fd, libc::SOL_SOCKET, force, bytes) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            setsockopt_int(fd, libc::SOL_SOCKET, plain, bytes)
        }
        Err(e) => Err(e),
    }
}

fn local_addr(fd: BorrowedFd<'_>) -> io::Result<SocketAddr> {
    let mut raw = RawAddr::zeroed();
    let mut len = RawAddr::CAPACITY;
    // SAFETY: `raw` is a writable buffer of `len` bytes; the kernel writes at
    // most that and updates `len`.
    cvt(unsafe { libc::getsockname(fd.as_raw_fd(), raw.as_mut_ptr(), &mut len) })?;
    raw.decode()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unexpected address family"))
}
