//! Thin helpers over `libc`: error conversion, socket options, socket
//! addresses and control-message (cmsg) encoding and decoding.
//!
//! Everything `unsafe` about the kernel ABI lives in this file and in the
//! three syscall sites (`sendmmsg`, `recvmmsg`, `epoll_wait`).

use std::io;
use std::mem::{self, size_of, MaybeUninit};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd};

/// Turns a `-1` return into the thread's `errno`.
pub(crate) fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Sets an integer socket option.
pub(crate) fn setsockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    setsockopt_struct(fd, level, name, &value)
}

/// Sets a socket option whose value is a plain C structure (`ip_mreqn`,
/// `ipv6_mreq`).
pub(crate) fn setsockopt_struct<T: Copy>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` is a live `T` of plain data and the length passed is
    // its size; the kernel only reads that many bytes. An invalid fd or
    // option is an errno.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    cvt(ret).map(drop)
}

/// Reads an integer socket option.
pub(crate) fn getsockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live locals; the kernel writes at most
    // `len` bytes into `value` and updates `len`.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    cvt(ret)?;
    Ok(value)
}

/// A socket address in the kernel's layout, big enough for IPv4 and IPv6.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union RawAddr {
    v4: libc::sockaddr_in,
    v6: libc::sockaddr_in6,
}

impl RawAddr {
    /// An all-zero address (family `AF_UNSPEC`), to be filled by the kernel.
    pub(crate) fn zeroed() -> Self {
        // SAFETY: both variants are plain C structs for which all-zero bytes
        // are a valid value.
        unsafe { mem::zeroed() }
    }

    /// Size of the buffer, as a `socklen_t`.
    pub(crate) const CAPACITY: libc::socklen_t = size_of::<RawAddr>() as libc::socklen_t;

    /// Encodes `addr`. With `v6_family` (the socket is `AF_INET6`), an IPv4
    /// address becomes its IPv4-mapped IPv6 form, as dual-stack sockets need.
    pub(crate) fn encode(addr: &SocketAddr, v6_family: bool) -> (Self, libc::socklen_t) {
        let mut raw = Self::zeroed();
        match (addr, v6_family) {
            (SocketAddr::V4(a), false) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                raw.v4 = sin;
                (raw, size_of::<libc::sockaddr_in>() as libc::socklen_t)
            }
            (SocketAddr::V4(a), true) => {
                let mapped = SocketAddrV6::new(a.ip().to_ipv6_mapped(), a.port(), 0, 0);
                Self::encode(&SocketAddr::V6(mapped), true)
            }
            (SocketAddr::V6(a), _) => {
                // SAFETY: sockaddr_in6 is a plain C struct; all-zero is valid.
                let mut sin6: libc::sockaddr_in6 = unsafe { mem::zeroed() };
                sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                sin6.sin6_port = a.port().to_be();
                sin6.sin6_flowinfo = a.flowinfo().to_be();
                sin6.sin6_addr.s6_addr = a.ip().octets();
                sin6.sin6_scope_id = a.scope_id();
                raw.v6 = sin6;
                (raw, size_of::<libc::sockaddr_in6>() as libc::socklen_t)
            }
        }
    }

    /// Decodes an address the kernel wrote; `None` for another family.
    pub(crate) fn decode(&self) -> Option<SocketAddr> {
        // SAFETY: every variant starts with `sa_family_t`; the union is always
        // fully initialised (created zeroed), so reading the family is sound.
        let family = unsafe { self.v4.sin_family } as libc::c_int;
        match family {
            libc::AF_INET => {
                // SAFETY: the family says the kernel wrote a sockaddr_in.
                let sin = unsafe { self.v4 };
                let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
                Some(SocketAddr::V4(SocketAddrV4::new(
                    ip,
                    u16::from_be(sin.sin_port),
                )))
            }
            libc::AF_INET6 => {
                // SAFETY: the family says the kernel wrote a sockaddr_in6.
                let sin6 = unsafe { self.v6 };
                Some(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                    u16::from_be(sin6.sin6_port),
                    u32::from_be(sin6.sin6_flowinfo),
                    sin6.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }

    pub(crate) fn as_ptr(&self) -> *const libc::sockaddr {
        (self as *const Self).cast()
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut libc::sockaddr {
        (self as *mut Self).cast()
    }
}

// --- control messages --------------------------------------------------------
//
// Layout facts (Linux ABI, `man 3 cmsg`): a `cmsghdr` is followed by its data;
// lengths are aligned to `size_of::<usize>()`; `CMSG_LEN(n)` is the aligned
// header size plus `n`, `CMSG_SPACE(n)` the aligned header plus aligned `n`.

const fn cmsg_align(len: usize) -> usize {
    (len + size_of::<usize>() - 1) & !(size_of::<usize>() - 1)
}

const fn cmsg_hdr_len() -> usize {
    cmsg_align(size_of::<libc::cmsghdr>())
}

/// `CMSG_SPACE(len)`.
pub(crate) const fn cmsg_space(len: usize) -> usize {
    cmsg_hdr_len() + cmsg_align(len)
}

/// `CMSG_LEN(len)`.
const fn cmsg_len(len: usize) -> usize {
    cmsg_hdr_len() + len
}

/// A control-message buffer aligned like `cmsghdr` (8 bytes on 64-bit).
///
/// Left uninitialised: the encoder writes (and zero-pads) what it uses, and
/// the kernel writes what it reports; only those bytes are ever read.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub(crate) struct CmsgBuf<const N: usize>(MaybeUninit<[u8; N]>);

impl<const N: usize> CmsgBuf<N> {
    pub(crate) const fn uninit() -> Self {
        Self(MaybeUninit::uninit())
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.0.as_mut_ptr().cast()
    }

    fn as_ptr(&self) -> *const u8 {
        self.0.as_ptr().cast()
    }
}

/// Appends control messages to a [`CmsgBuf`].
pub(crate) struct CmsgEncoder<'a, const N: usize> {
    buf: &'a mut CmsgBuf<N>,
    used: usize,
}

impl<'a, const N: usize> CmsgEncoder<'a, N> {
    pub(crate) fn new(buf: &'a mut CmsgBuf<N>) -> Self {
        Self { buf, used: 0 }
    }

    /// Appends one control message carrying `value`.
    ///
    /// Panics if the buffer is too small: buffer sizes are constants chosen
    /// for the fixed set of messages this crate sends.
    pub(crate) fn push<T: Copy>(&mut self, level: libc::c_int, ty: libc::c_int, value: T) {
        let space = cmsg_space(size_of::<T>());
        assert!(self.used + space <= N, "cmsg buffer too small");
        // SAFETY: all-zero is a valid cmsghdr (plain C struct, maybe padding).
        let mut hdr: libc::cmsghdr = unsafe { mem::zeroed() };
        hdr.cmsg_len = cmsg_len(size_of::<T>()) as _;
        hdr.cmsg_level = level;
        hdr.cmsg_type = ty;
        // SAFETY: `used + space <= N` was checked, so the `space` bytes from
        // `used` (header, data and padding) are inside the buffer; they are
        // zeroed first so every byte up to `len()` is initialised. Writes are
        // unaligned to be safe for any `T`.
        unsafe {
            let at = self.buf.as_mut_ptr().add(self.used);
            at.write_bytes(0, space);
            at.cast::<libc::cmsghdr>().write_unaligned(hdr);
            at.add(cmsg_hdr_len()).cast::<T>().write_unaligned(value);
        }
        self.used += space;
    }

    /// Bytes used so far (what goes into `msg_controllen`).
    pub(crate) fn len(&self) -> usize {
        self.used
    }
}

/// Types every byte pattern of their size is a valid value of (integers
/// and C structures of integers), so a control message's bytes may be
/// read as one.
///
/// # Safety
/// Implement only for such types: no `bool`, `char`, enums, references or
/// padding-sensitive invariants.
pub(crate) unsafe trait Plain: Copy {}

// SAFETY: integers, and the kernel's `in_pktinfo` / `in6_pktinfo` (ints
// and address structures of integers): any bytes are valid.
unsafe impl Plain for u16 {}
// SAFETY: as above.
unsafe impl Plain for u32 {}
// SAFETY: as above.
unsafe impl Plain for i32 {}
// SAFETY: as above.
unsafe impl Plain for libc::in_pktinfo {}
// SAFETY: as above.
unsafe impl Plain for libc::in6_pktinfo {}

/// One received control message.
pub(crate) struct Cmsg<'a> {
    pub(crate) level: libc::c_int,
    pub(crate) ty: libc::c_int,
    pub(crate) data: &'a [u8],
}

impl Cmsg<'_> {
    /// Reads the data as a `T` if it is at least that long.
    pub(crate) fn read<T: Plain>(&self) -> Option<T> {
        if self.data.len() < size_of::<T>() {
            return None;
        }
        // SAFETY: the slice holds at least size_of::<T>() bytes, and
        // `T: Plain` is valid for any bytes.
        Some(unsafe { self.data.as_ptr().cast::<T>().read_unaligned() })
    }

    /// Reads an integer that the kernel may deliver as one byte or as an
    /// `int` (IP_TOS arrives as one byte, IPV6_TCLASS as an int).
    pub(crate) fn read_int(&self) -> Option<i64> {
        match self.data.len() {
            1 => Some(i64::from(self.data[0])),
            2 => self.read::<u16>().map(i64::from),
            n if n >= 4 => self.read::<i32>().map(i64::from),
            _ => None,
        }
    }
}

/// Iterates the control messages in the first `len` bytes of a buffer the
/// kernel (or a [`CmsgEncoder`]) filled in. Reads only headers and their
/// data, never the alignment padding between messages (which the kernel
/// leaves unwritten). Stops at the first malformed header.
pub(crate) struct CmsgIter<'a> {
    base: *const u8,
    len: usize,
    pos: usize,
    _buf: std::marker::PhantomData<&'a [u8]>,
}

impl<'a> CmsgIter<'a> {
    /// # Safety
    ///
    /// Every control message (header and data) within the first `len` bytes
    /// of `buf` must be initialised, as after `recvmsg` reported
    /// `msg_controllen = len`, or after encoding `len` bytes.
    pub(crate) unsafe fn new<const N: usize>(buf: &'a CmsgBuf<N>, len: usize) -> Self {
        Self {
            base: buf.as_ptr(),
            len: len.min(N),
            pos: 0,
            _buf: std::marker::PhantomData,
        }
    }
}

impl<'a> Iterator for CmsgIter<'a> {
    type Item = Cmsg<'a>;

    fn next(&mut self) -> Option<Cmsg<'a>> {
        let rest = self.len.checked_sub(self.pos)?;
        if rest < size_of::<libc::cmsghdr>() {
            return None;
        }
        // SAFETY: a full header lies within the first `len` bytes, which the
        // constructor's contract says are initialised where messages are.
        let hdr: libc::cmsghdr = unsafe {
            self.base
                .add(self.pos)
                .cast::<libc::cmsghdr>()
                .read_unaligned()
        };
        // `cmsg_len` is size_t on glibc but u32 on musl.
        #[allow(clippy::unnecessary_cast)]
        let total = hdr.cmsg_len as usize;
        if total < cmsg_hdr_len() || total > rest {
            return None;
        }
        // SAFETY: header plus `total - hdr` data bytes lie within `len` and
        // were written as this message's data; the borrow of the buffer
        // lives for 'a.
        let data = unsafe {
            std::slice::from_raw_parts(
                self.base.add(self.pos + cmsg_hdr_len()),
                total - cmsg_hdr_len(),
            )
        };
        self.pos += cmsg_align(total);
        Some(Cmsg {
            level: hdr.cmsg_level,
            ty: hdr.cmsg_type,
            data,
        })
    }
}

/// `in_pktinfo` for sending from a chosen IPv4 source address.
pub(crate) fn in_pktinfo(src: Ipv4Addr) -> libc::in_pktinfo {
    libc::in_pktinfo {
        ipi_ifindex: 0,
        ipi_spec_dst: libc::in_addr {
            s_addr: u32::from_ne_bytes(src.octets()),
        },
        ipi_addr: libc::in_addr { s_addr: 0 },
    }
}

/// `in6_pktinfo` for sending from a chosen IPv6 source address.
pub(crate) fn in6_pktinfo(src: Ipv6Addr) -> libc::in6_pktinfo {
    libc::in6_pktinfo {
        ipi6_addr: libc::in6_addr {
            s6_addr: src.octets(),
        },
        ipi6_ifindex: 0,
    }
}

/// The destination address from a received `in_pktinfo`.
pub(crate) fn pktinfo_dst_v4(info: &libc::in_pktinfo) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(info.ipi_addr.s_addr.to_ne_bytes()))
}

/// The destination address from a received `in6_pktinfo`.
pub(crate) fn pktinfo_dst_v6(info: &libc::in6_pktinfo) -> IpAddr {
    IpAddr::V6(Ipv6Addr::from(info.ipi6_addr.s6_addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addr_roundtrip() {
        for a in [
            "127.1.2.3:4791".parse::<SocketAddr>().unwrap(),
            "[::1]:4791".parse().unwrap(),
            "[fe80::1%3]:9".parse().unwrap(),
        ] {
            let (raw, len) = RawAddr::encode(&a, a.is_ipv6());
            assert!(len <= RawAddr::CAPACITY);
            assert_eq!(raw.decode(), Some(a));
        }
        // An IPv4 destination on an IPv6 socket becomes IPv4-mapped.
        let a: SocketAddr = "10.0.0.1:7".parse().unwrap();
        let (raw, _) = RawAddr::encode(&a, true);
        assert_eq!(raw.decode(), Some("[::ffff:10.0.0.1]:7".parse().unwrap()));
        assert_eq!(RawAddr::zeroed().decode(), None);
    }

    #[test]
    fn cmsg_encode_decode() {
        let mut buf = CmsgBuf::<128>::uninit();
        let mut enc = CmsgEncoder::new(&mut buf);
        enc.push(libc::SOL_UDP, libc::UDP_SEGMENT, 4128u16);
        enc.push(libc::IPPROTO_IP, libc::IP_TOS, 0x62 as libc::c_int);
        let len = enc.len();
        assert_eq!(len, cmsg_space(2) + cmsg_space(4));
        // SAFETY: the encoder initialised the first `len` bytes.
        let got: Vec<_> = unsafe { CmsgIter::new(&buf, len) }
            .map(|c| (c.level, c.ty, c.read_int()))
            .collect();
        assert_eq!(
            got,
            vec![
                (libc::SOL_UDP, libc::UDP_SEGMENT, Some(4128)),
                (libc::IPPROTO_IP, libc::IP_TOS, Some(0x62)),
            ]
        );
        // A truncated buffer yields no message instead of reading past it.
        // SAFETY: as above; 10 < len.
        assert_eq!(unsafe { CmsgIter::new(&buf, 10) }.count(), 0);
    }
}
