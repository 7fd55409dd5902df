//! Batched receiving: `recvmmsg` with GRO and ancillary data.

use std::io::{self, IoSliceMut};
use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

use crate::socket::{UdpSocket, BATCH_SIZE};
use crate::sys::{pktinfo_dst_v4, pktinfo_dst_v6, CmsgBuf, CmsgIter, RawAddr};

/// What the kernel told about one received (possibly GRO-coalesced)
/// datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvMeta {
    /// The sender. On a dual-stack IPv6 socket, IPv4 senders appear
    /// IPv4-mapped (`::ffff:a.b.c.d`).
    pub addr: SocketAddr,
    /// Bytes written to the buffer.
    pub len: usize,
    /// With GRO, several datagrams from `addr` arrive back to back in one
    /// buffer: each `stride` bytes long, the last possibly shorter. Without
    /// coalescing, `stride == len`.
    pub stride: usize,
    /// The destination address in the IP header (`IP_PKTINFO` /
    /// `IPV6_PKTINFO`): which of the host's addresses (which GID) it was
    /// sent to.
    pub dst_ip: Option<IpAddr>,
    /// IPv4 TOS / IPv6 traffic class byte (DSCP and ECN).
    pub tos: u8,
    /// IPv4 TTL / IPv6 hop limit.
    pub ttl: Option<u8>,
}

impl Default for RecvMeta {
    fn default() -> Self {
        Self {
            addr: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
            len: 0,
            stride: 0,
            dst_ip: None,
            tos: 0,
            ttl: None,
        }
    }
}

impl RecvMeta {
    /// How many datagrams the buffer holds (`len / stride`, rounded up).
    pub fn segments(&self) -> usize {
        if self.stride == 0 {
            0
        } else {
            self.len.div_ceil(self.stride)
        }
    }

    /// Iterates the datagrams in `buf` (the buffer this meta describes).
    pub fn datagrams<'b>(&self, buf: &'b [u8]) -> impl Iterator<Item = &'b [u8]> + 'b {
        let data = &buf[..self.len.min(buf.len())];
        data.chunks(self.stride.max(1))
    }
}

/// Control-message space per datagram: PKTINFO (≤ 20 bytes), TOS/TCLASS,
/// TTL/HOPLIMIT, UDP_GRO, SO_RXQ_OVFL, with room for both IPv4 and IPv6
/// levels on a dual-stack socket.
const RECV_CMSG_LEN: usize = 256;

impl UdpSocket {
    /// Receives up to `min(bufs.len(), meta.len(), BATCH_SIZE)` datagrams
    /// with one `recvmmsg`, one per buffer; returns how many, filling
    /// `meta[..n]`. Would-block (nothing queued) is
    /// `Err(ErrorKind::WouldBlock)`.
    ///
    /// With GRO on ([`UdpSocket::gro_enabled`]) a buffer may hold several
    /// datagrams (see [`RecvMeta::stride`]); give it [`crate::GRO_BUF_LEN`]
    /// bytes so nothing is cut off. A datagram larger than its buffer is
    /// truncated and counted in [`crate::Stats::recv_truncated`].
    pub fn recv(&self, bufs: &mut [IoSliceMut<'_>], meta: &mut [RecvMeta]) -> io::Result<usize> {
        let n = bufs.len().min(meta.len()).min(BATCH_SIZE);
        if n == 0 {
            return Ok(0);
        }
        // Entries `0..n` are written below; the rest stay untouched, so a
        // poll that finds nothing does not clear kilobytes of headers.
        let mut msgs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; BATCH_SIZE];
        let mut names = [const { MaybeUninit::<RawAddr>::uninit() }; BATCH_SIZE];
        let mut cmsgs = [CmsgBuf::<RECV_CMSG_LEN>::uninit(); BATCH_SIZE];
        for i in 0..n {
            let name = names[i].write(RawAddr::zeroed());
            // SAFETY: all-zero is a valid mmsghdr (null pointers, zero lengths).
            let m = msgs[i].write(unsafe { std::mem::zeroed() });
            let h = &mut m.msg_hdr;
            h.msg_name = name.as_mut_ptr().cast();
            h.msg_namelen = RawAddr::CAPACITY;
            // `IoSliceMut` is documented as ABI-compatible with `iovec`.
            h.msg_iov = (&mut bufs[i] as *mut IoSliceMut<'_>).cast::<libc::iovec>();
            h.msg_iovlen = 1;
            h.msg_control = cmsgs[i].as_mut_ptr().cast();
            h.msg_controllen = RECV_CMSG_LEN as _;
        }
        let got = loop {
            // SAFETY: the first `n` headers point at `names`, `cmsgs` (locals
            // living through the call) and the caller's buffers via their
            // iovecs, each with its true capacity; the kernel writes within
            // those bounds and fills `msg_len`, `msg_namelen`,
            // `msg_controllen` and `msg_flags`.
            // A raw system call: glibc's recvmmsg is a cancellation point,
            // and a program's CQ poll must not be one (see `NoCancel`).
            let ret = unsafe {
                libc::syscall(
                    libc::SYS_recvmmsg,
                    self.fd.as_raw_fd(),
                    msgs.as_mut_ptr().cast::<libc::mmsghdr>(),
                    n as libc::c_uint,
                    0,
                    std::ptr::null_mut::<libc::timespec>(),
                )
            };
            if ret >= 0 {
                break ret as usize;
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        };
        for i in 0..got {
            // SAFETY: entries below `n` (and `got <= n`) were initialised
            // above and updated by the kernel.
            let (msg, name) = unsafe { (msgs[i].assume_init_ref(), names[i].assume_init_ref()) };
            let h = &msg.msg_hdr;
            let len = msg.msg_len as usize;
            let mut m = RecvMeta {
                addr: name.decode().unwrap_or(RecvMeta::default().addr),
                len,
                stride: len,
                ..RecvMeta::default()
            };
            if h.msg_flags & libc::MSG_TRUNC != 0 {
                self.counters.recv_truncated.fetch_add(1, Ordering::Relaxed);
            }
            // SAFETY: the kernel wrote `msg_controllen` bytes of control
            // messages into this buffer.
            // (`msg_controllen` is size_t on glibc, socklen_t on musl.)
            #[allow(clippy::unnecessary_cast)]
            let cmsgs_i = unsafe { CmsgIter::new(&cmsgs[i], h.msg_controllen as usize) };
            for c in cmsgs_i {
                match (c.level, c.ty) {
                    (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                        m.dst_ip = c.read::<libc::in_pktinfo>().map(|p| pktinfo_dst_v4(&p));
                    }
                    (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                        m.dst_ip = c.read::<libc::in6_pktinfo>().map(|p| pktinfo_dst_v6(&p));
                    }
                    (libc::IPPROTO_IP, libc::IP_TOS) | (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                        m.tos = c.read_int().unwrap_or(0) as u8;
                    }
                    (libc::IPPROTO_IP, libc::IP_TTL)
                    | (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT) => {
                        m.ttl = c.read_int().map(|v| v as u8);
                    }
                    (libc::SOL_UDP, libc::UDP_GRO) => {
                        if let Some(seg) = c.read_int() {
                            if seg > 0 {
                                m.stride = (seg as usize).min(len.max(1));
                            }
                        }
                    }
                    (libc::SOL_SOCKET, libc::SO_RXQ_OVFL) => {
                        if let Some(drops) = c.read::<u32>() {
                            self.counters.recv_dropped.store(drops, Ordering::Relaxed);
                        }
                    }
                    _ => {}
                }
            }
            meta[i] = m;
        }
        Ok(got)
    }
}
