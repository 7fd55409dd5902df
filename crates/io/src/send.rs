//! Batched sending: `sendmmsg` with per-datagram TOS / TTL / source address
//! and UDP GSO, with a fallback that splits GSO transmits in user space.

use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

use crate::socket::{UdpSocket, BATCH_SIZE};
use crate::sys::{in6_pktinfo, in_pktinfo, CmsgBuf, CmsgEncoder, RawAddr};

/// One datagram to send — or, with `segment_size`, a run of datagrams to the
/// same destination sent as one UDP GSO super-datagram.
#[derive(Debug, Clone, Copy)]
pub struct Transmit<'a> {
    /// Where to send.
    pub destination: SocketAddr,
    /// The UDP payload (for RoCE v2: BTH through ICRC).
    pub contents: &'a [u8],
    /// UDP GSO: `contents` is cut into datagrams of this many bytes, the
    /// last one possibly shorter. `None` (or `contents.len() <= size`) sends
    /// one datagram. See [`UdpSocket::send`] for the limits.
    pub segment_size: Option<usize>,
    /// IPv4 TOS / IPv6 traffic class byte (DSCP and ECN). 0 sends the
    /// socket's default (0) without a control message.
    pub tos: u8,
    /// IPv4 TTL / IPv6 hop limit; `None` for the system default.
    pub ttl: Option<u8>,
    /// Source address to send from (`IP_PKTINFO` / `IPV6_PKTINFO`), for a
    /// socket bound to a wildcard address; `None` lets routing choose.
    pub src_ip: Option<IpAddr>,
}

impl<'a> Transmit<'a> {
    /// One datagram to `destination` with default TOS, TTL and source.
    pub fn new(destination: SocketAddr, contents: &'a [u8]) -> Self {
        Self {
            destination,
            contents,
            segment_size: None,
            tos: 0,
            ttl: None,
            src_ip: None,
        }
    }
}

/// One piece of a gathered datagram: a `struct iovec` the kernel reads
/// from. Made from a slice, or — for memory that must not be reached
/// through a Rust reference, such as RDMA-registered memory that peers and
/// the program may change at any time — from a raw address.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct IoPiece<'a> {
    iov: libc::iovec,
    _bytes: std::marker::PhantomData<&'a [u8]>,
}

impl<'a> IoPiece<'a> {
    /// The bytes of `s`.
    pub fn new(s: &'a [u8]) -> Self {
        IoPiece {
            iov: libc::iovec {
                iov_base: s.as_ptr() as *mut libc::c_void,
                iov_len: s.len(),
            },
            _bytes: std::marker::PhantomData,
        }
    }

    /// `len` bytes at `ptr`, read by the kernel only (never through a Rust
    /// reference).
    ///
    /// # Safety
    /// `ptr..ptr + len` must stay valid for reads until every send that
    /// uses this piece has returned.
    pub unsafe fn from_raw(ptr: *const u8, len: usize) -> Self {
        IoPiece {
            iov: libc::iovec {
                iov_base: ptr as *mut libc::c_void,
                iov_len: len,
            },
            _bytes: std::marker::PhantomData,
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.iov.iov_len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.iov.iov_len == 0
    }

    /// Start and length (for copies within this crate: the piece's
    /// contract keeps them readable while it is in use).
    pub(crate) fn raw(&self) -> (*const u8, usize) {
        (self.iov.iov_base as *const u8, self.iov.iov_len)
    }
}

impl std::fmt::Debug for IoPiece<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IoPiece({:p}+{})", self.iov.iov_base, self.iov.iov_len)
    }
}

/// Like [`Transmit`], but the payload is gathered from several pieces
/// (`sendmsg` iovecs), so a packet can go out as header + payload straight
/// from registered memory + ICRC trailer without being copied together.
///
/// With `segment_size`, segment boundaries fall on byte offsets of the
/// concatenated slices, so `[h0, p0, t0, h1, p1, t1]` with equal-sized
/// packets is a GSO run of two datagrams. The kernel accepts at most 1024
/// slices (`UIO_MAXIOV`) per transmit.
#[derive(Debug, Clone, Copy)]
pub struct GatherTransmit<'a> {
    /// Where to send.
    pub destination: SocketAddr,
    /// The UDP payload, in pieces.
    pub contents: &'a [IoPiece<'a>],
    /// UDP GSO segment size, as in [`Transmit`]'s `segment_size`.
    pub segment_size: Option<usize>,
    /// As in [`Transmit`]'s `tos`.
    pub tos: u8,
    /// As in [`Transmit`]'s `ttl`.
    pub ttl: Option<u8>,
    /// As in [`Transmit`]'s `src_ip`.
    pub src_ip: Option<IpAddr>,
}

impl<'a> GatherTransmit<'a> {
    /// One datagram to `destination`, gathered from `contents`.
    pub fn new(destination: SocketAddr, contents: &'a [IoPiece<'a>]) -> Self {
        Self {
            destination,
            contents,
            segment_size: None,
            tos: 0,
            ttl: None,
            src_ip: None,
        }
    }
}

/// What the send path needs from either kind of transmit.
trait Tx {
    fn destination(&self) -> &SocketAddr;
    fn segment_size(&self) -> Option<usize>;
    fn tos(&self) -> u8;
    fn ttl(&self) -> Option<u8>;
    fn src_ip(&self) -> Option<IpAddr>;
    fn len(&self) -> usize;
    /// The contents as iovecs: either the caller's own slices or `scratch`.
    fn iov(&self, scratch: &mut MaybeUninit<libc::iovec>) -> (*mut libc::iovec, usize);
}

/// The accessors both transmit kinds implement the same way: their fields.
macro_rules! tx_fields {
    () => {
        fn destination(&self) -> &SocketAddr {
            &self.destination
        }
        fn segment_size(&self) -> Option<usize> {
            self.segment_size
        }
        fn tos(&self) -> u8 {
            self.tos
        }
        fn ttl(&self) -> Option<u8> {
            self.ttl
        }
        fn src_ip(&self) -> Option<IpAddr> {
            self.src_ip
        }
    };
}

impl Tx for Transmit<'_> {
    tx_fields!();
    fn len(&self) -> usize {
        self.contents.len()
    }
    fn iov(&self, scratch: &mut MaybeUninit<libc::iovec>) -> (*mut libc::iovec, usize) {
        // The kernel only reads through iov_base on send; the cast to *mut
        // is what the C type requires.
        let v = scratch.write(libc::iovec {
            iov_base: self.contents.as_ptr() as *mut libc::c_void,
            iov_len: self.contents.len(),
        });
        (v as *mut libc::iovec, 1)
    }
}

impl Tx for GatherTransmit<'_> {
    tx_fields!();
    fn len(&self) -> usize {
        self.contents.iter().map(|s| s.len()).sum()
    }
    fn iov(&self, _scratch: &mut MaybeUninit<libc::iovec>) -> (*mut libc::iovec, usize) {
        // `IoPiece` is a transparent `iovec`, so the caller's array is
        // passed to the kernel as is; the kernel only reads it on send.
        (
            self.contents.as_ptr() as *mut libc::iovec,
            self.contents.len(),
        )
    }
}

/// Control-message space per datagram: UDP_SEGMENT (u16), TOS or TCLASS
/// (int), TTL or HOPLIMIT (int), IP(V6)_PKTINFO (≤ 20 bytes).
const SEND_CMSG_LEN: usize = 128;

/// How a transmit goes out, given the current GSO limit.
enum Plan {
    /// One `msghdr`; `gso` is the segment size when it carries several
    /// datagrams; `datagrams` is how many.
    Single { gso: Option<u16>, datagrams: u64 },
    /// Needs splitting in user space (GSO off, or too many segments).
    Split { segment: usize },
}

fn plan<T: Tx>(t: &T, gso_max: usize) -> Plan {
    let len = t.len();
    match t.segment_size() {
        Some(seg) if seg > 0 && len > seg => {
            let datagrams = len.div_ceil(seg);
            if datagrams <= gso_max && seg <= u16::MAX as usize {
                Plan::Single {
                    gso: Some(seg as u16),
                    datagrams: datagrams as u64,
                }
            } else if seg > u16::MAX as usize {
                // Cannot be valid (each datagram would exceed 64 KiB); send
                // it whole and let the kernel report EMSGSIZE.
                Plan::Single {
                    gso: None,
                    datagrams: 1,
                }
            } else {
                Plan::Split { segment: seg }
            }
        }
        _ => Plan::Single {
            gso: None,
            datagrams: 1,
        },
    }
}

/// Whether the datagram to `dst` is IPv4 on the wire (also when sent from
/// a dual-stack IPv6 socket to an IPv4-mapped address).
fn wire_is_v4(dst: &SocketAddr) -> bool {
    match dst {
        SocketAddr::V4(_) => true,
        SocketAddr::V6(a) => a.ip().to_ipv4_mapped().is_some(),
    }
}

/// Per-message storage for one `sendmmsg` call. Left uninitialised (a
/// one-datagram send should not clear 8 KiB); entry `i` is written in full
/// before message `i` is passed to the kernel.
struct Batch {
    msgs: [MaybeUninit<libc::mmsghdr>; BATCH_SIZE],
    iovs: [MaybeUninit<libc::iovec>; BATCH_SIZE],
    addrs: [MaybeUninit<RawAddr>; BATCH_SIZE],
    cmsgs: [CmsgBuf<SEND_CMSG_LEN>; BATCH_SIZE],
    datagrams: [u64; BATCH_SIZE],
    gso: [Option<u16>; BATCH_SIZE],
}

impl Batch {
    fn new() -> Self {
        Self {
            msgs: [const { MaybeUninit::uninit() }; BATCH_SIZE],
            iovs: [const { MaybeUninit::uninit() }; BATCH_SIZE],
            addrs: [const { MaybeUninit::uninit() }; BATCH_SIZE],
            cmsgs: [CmsgBuf::uninit(); BATCH_SIZE],
            datagrams: [0; BATCH_SIZE],
            gso: [None; BATCH_SIZE],
        }
    }
}

/// Fills one `msghdr`. `iov`/`iovlen` must stay valid until the syscall.
#[allow(clippy::too_many_arguments)]
fn fill_msg(
    msg: &mut libc::msghdr,
    addr: &mut MaybeUninit<RawAddr>,
    cmsg: &mut CmsgBuf<SEND_CMSG_LEN>,
    v6_socket: bool,
    dst: &SocketAddr,
    iov: *mut libc::iovec,
    iovlen: usize,
    tos: u8,
    ttl: Option<u8>,
    src_ip: Option<IpAddr>,
    gso: Option<u16>,
) {
    let (raw, len) = RawAddr::encode(dst, v6_socket);
    let addr = addr.write(raw);
    msg.msg_name = addr.as_mut_ptr().cast();
    msg.msg_namelen = len;
    msg.msg_iov = iov;
    msg.msg_iovlen = iovlen as _;
    msg.msg_flags = 0;

    let v4 = wire_is_v4(dst);
    let mut enc = CmsgEncoder::new(cmsg);
    if let Some(seg) = gso {
        enc.push(libc::SOL_UDP, libc::UDP_SEGMENT, seg);
    }
    if tos != 0 {
        let v = libc::c_int::from(tos);
        if v4 {
            enc.push(libc::IPPROTO_IP, libc::IP_TOS, v);
        } else {
            enc.push(libc::IPPROTO_IPV6, libc::IPV6_TCLASS, v);
        }
    }
    if let Some(ttl) = ttl {
        let v = libc::c_int::from(ttl);
        if v4 {
            enc.push(libc::IPPROTO_IP, libc::IP_TTL, v);
        } else {
            enc.push(libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT, v);
        }
    }
    match src_ip {
        Some(IpAddr::V4(ip)) if v4 => enc.push(libc::IPPROTO_IP, libc::IP_PKTINFO, in_pktinfo(ip)),
        Some(IpAddr::V6(ip)) if !v4 => {
            enc.push(libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, in6_pktinfo(ip))
        }
        Some(IpAddr::V6(ip)) => {
            // An IPv4-mapped source for an IPv4 datagram.
            if let Some(ip4) = ip.to_ipv4_mapped() {
                enc.push(libc::IPPROTO_IP, libc::IP_PKTINFO, in_pktinfo(ip4));
            }
        }
        // An IPv4 source for an IPv6 datagram cannot work; leave it to routing.
        Some(IpAddr::V4(_)) | None => {}
    }
    let used = enc.len();
    if used == 0 {
        msg.msg_control = std::ptr::null_mut();
        msg.msg_controllen = 0;
    } else {
        msg.msg_control = cmsg.as_mut_ptr().cast();
        msg.msg_controllen = used as _;
    }
}

/// What to do about a failed send.
#[derive(Debug, PartialEq, Eq)]
enum Failure {
    /// EINTR: try again.
    Retry,
    /// Would block: the socket buffer is full.
    Full,
    /// EIO / EINVAL on a GSO message: maybe the kernel or device refuses
    /// GSO (quinn-udp saw EIO from devices without checksum offload; the
    /// kernel gives EINVAL with `UDP_NO_CHECK6_TX`), maybe the run itself
    /// is bad (a segment larger than the MTU is EINVAL too).
    GsoRefused,
    /// A bug on our side or a closed socket: report it.
    Fatal,
    /// Anything else (no route, EMSGSIZE, ENOBUFS, ...): drop and count.
    Drop,
}

fn classify(err: &io::Error, had_gso: bool) -> Failure {
    match err.raw_os_error() {
        Some(libc::EINTR) => Failure::Retry,
        Some(libc::EAGAIN) => Failure::Full,
        Some(libc::EIO | libc::EINVAL) if had_gso => Failure::GsoRefused,
        Some(libc::EBADF | libc::ENOTSOCK | libc::EFAULT) => Failure::Fatal,
        _ => Failure::Drop,
    }
}

impl UdpSocket {
    /// Sends a batch of transmits with `sendmmsg`, up to [`BATCH_SIZE`] per
    /// call, and returns how many transmits were consumed.
    ///
    /// - A return smaller than `transmits.len()` means the socket buffer is
    ///   full (would-block): wait for writability (see
    ///   [`crate::Poller::set_writable_interest`]) and send the rest. `Ok(0)`
    ///   means nothing was sent.
    /// - Any other error (unreachable destination, EMSGSIZE, ...) drops that
    ///   transmit: it counts as consumed, and [`crate::Stats::send_errors`]
    ///   grows by its datagram count. Retransmission covers it. `Err` is
    ///   only for errors about the socket itself (EBADF, ENOTSOCK, EFAULT).
    /// - GSO: a transmit with `segment_size` goes out as one UDP GSO
    ///   super-datagram when [`UdpSocket::max_gso_segments`] allows;
    ///   otherwise it is split in user space. If the kernel refuses a GSO
    ///   send (EIO / EINVAL), the run is retried as single datagrams; if
    ///   those go out, GSO was at fault and is switched off for this socket
    ///   ([`crate::Stats::gso_disabled`]); if they fail too, the run itself
    ///   was bad (say, segments larger than the MTU) and GSO stays on.
    /// - If a run being split hits would-block part-way, it counts as not
    ///   consumed, so a retry may send its first datagrams twice (RoCE
    ///   receivers drop duplicates by PSN).
    /// - The kernel's limits: each datagram must fit the path MTU (DF is
    ///   set), and a GSO super-datagram must fit the UDP length field
    ///   ([`crate::max_gso_segments_for`]).
    pub fn send(&self, transmits: &[Transmit<'_>]) -> io::Result<usize> {
        self.send_impl(transmits)
    }

    /// [`UdpSocket::send`] for gathered payloads.
    pub fn send_gather(&self, transmits: &[GatherTransmit<'_>]) -> io::Result<usize> {
        self.send_impl(transmits)
    }

    fn send_impl<T: Tx>(&self, txs: &[T]) -> io::Result<usize> {
        let mut done = 0;
        let mut b = Batch::new();
        while done < txs.len() {
            let gso_max = self.gso_segments.load(Ordering::Relaxed);
            if let Plan::Split { segment } = plan(&txs[done], gso_max) {
                match self.send_split(&txs[done], segment, true) {
                    Ok(_) => {
                        done += 1;
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(done),
                    Err(e) => return Err(e),
                }
            }
            let mut n = 0;
            while n < BATCH_SIZE && done + n < txs.len() {
                let t = &txs[done + n];
                let (gso, datagrams) = match plan(t, gso_max) {
                    Plan::Single { gso, datagrams } => (gso, datagrams),
                    Plan::Split { .. } => break,
                };
                let (iov, iovlen) = t.iov(&mut b.iovs[n]);
                // SAFETY: all-zero is a valid mmsghdr (null pointers, zero
                // lengths); fill_msg then sets every field that matters.
                let m = b.msgs[n].write(unsafe { std::mem::zeroed() });
                fill_msg(
                    &mut m.msg_hdr,
                    &mut b.addrs[n],
                    &mut b.cmsgs[n],
                    self.v6,
                    t.destination(),
                    iov,
                    iovlen,
                    t.tos(),
                    t.ttl(),
                    t.src_ip(),
                    gso,
                );
                b.datagrams[n] = datagrams;
                b.gso[n] = gso;
                n += 1;
            }
            // SAFETY: the first `n` entries of `b.msgs` were just written and
            // point at names, iovecs and control buffers inside `b` (a local
            // that does not move during the call) or at the caller's `txs`
            // contents, all live for this call; the kernel reads them and
            // writes only `msg_len`.
            // A raw system call: glibc's sendmmsg is a cancellation point,
            // and a program's post must not be one (see `NoCancel`).
            let ret = unsafe {
                libc::syscall(
                    libc::SYS_sendmmsg,
                    self.fd.as_raw_fd(),
                    b.msgs.as_mut_ptr().cast::<libc::mmsghdr>(),
                    n as libc::c_uint,
                    0,
                )
            };
            if ret >= 0 {
                let sent = ret as usize;
                let datagrams: u64 = b.datagrams[..sent].iter().sum();
                self.counters
                    .datagrams_sent
                    .fetch_add(datagrams, Ordering::Relaxed);
                done += sent;
                // If sent < n, message `sent` failed; the next call reports
                // its error.
                continue;
            }
            let err = io::Error::last_os_error();
            match classify(&err, b.gso[0].is_some()) {
                Failure::Retry => continue,
                Failure::Full => return Ok(done),
                Failure::Fatal => return Err(err),
                Failure::GsoRefused => {
                    let segment = usize::from(b.gso[0].unwrap_or(u16::MAX));
                    match self.send_split(&txs[done], segment, false) {
                        Ok(sent) => {
                            if sent > 0 {
                                self.disable_gso();
                            }
                            done += 1;
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(done),
                        Err(e) => return Err(e),
                    }
                }
                Failure::Drop => {
                    self.counters
                        .send_error(b.datagrams[0], err.raw_os_error().unwrap_or(0));
                    done += 1;
                }
            }
        }
        Ok(done)
    }

    pub(crate) fn disable_gso(&self) {
        self.gso_segments.store(1, Ordering::Relaxed);
        self.counters.gso_disabled.store(true, Ordering::Relaxed);
    }

    /// Sends one run that cannot go in one GSO send: in chunks of
    /// [`UdpSocket::max_gso_segments`] segments with `allow_gso`, else one
    /// datagram at a time. Returns how many datagrams went out; failures
    /// are counted and dropped as in `send`. Would-block is `Err`.
    fn send_split<T: Tx>(&self, t: &T, segment: usize, allow_gso: bool) -> io::Result<u64> {
        let mut scratch = MaybeUninit::uninit();
        let (base, count) = t.iov(&mut scratch);
        // SAFETY: `t.iov` returns a pointer to `count` initialised iovecs
        // that live as long as `t` (or `scratch`, which outlives this use).
        let base: &[libc::iovec] = unsafe { std::slice::from_raw_parts(base, count) };
        self.send_range(t, base, 0, t.len(), segment, allow_gso)
    }

    /// `send_split` for bytes `[start, start + len)` of the run.
    fn send_range<T: Tx>(
        &self,
        t: &T,
        base: &[libc::iovec],
        start: usize,
        len: usize,
        segment: usize,
        allow_gso: bool,
    ) -> io::Result<u64> {
        let mut piece: Vec<libc::iovec> = Vec::with_capacity(base.len().min(64) + 1);
        let mut addr = MaybeUninit::uninit();
        let mut cmsg = CmsgBuf::<SEND_CMSG_LEN>::uninit();
        let mut sent = 0;
        let mut offset = start;
        let end = start + len;
        while offset < end {
            let max = if allow_gso {
                self.gso_segments.load(Ordering::Relaxed)
            } else {
                1
            };
            let chunk = (end - offset).min(segment * max);
            let gso = (chunk > segment).then_some(segment as u16);
            let datagrams = chunk.div_ceil(segment) as u64;
            piece.clear();
            sub_iov(base, offset, chunk, &mut piece);
            // SAFETY: all-zero is a valid msghdr.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            fill_msg(
                &mut msg,
                &mut addr,
                &mut cmsg,
                self.v6,
                t.destination(),
                piece.as_mut_ptr(),
                piece.len(),
                t.tos(),
                t.ttl(),
                t.src_ip(),
                gso,
            );
            // SAFETY: `msg` points at `addr`, `cmsg` and `piece` (locals that
            // outlive the call) and at the caller's contents.
            // (A raw system call: see above.)
            let ret = unsafe {
                libc::syscall(
                    libc::SYS_sendmsg,
                    self.fd.as_raw_fd(),
                    &msg as *const libc::msghdr,
                    0,
                )
            };
            if ret >= 0 {
                self.counters
                    .datagrams_sent
                    .fetch_add(datagrams, Ordering::Relaxed);
                sent += datagrams;
                offset += chunk;
                continue;
            }
            let err = io::Error::last_os_error();
            match classify(&err, gso.is_some()) {
                Failure::Retry => continue,
                Failure::Full | Failure::Fatal => return Err(err),
                Failure::GsoRefused => {
                    let ok = self.send_range(t, base, offset, chunk, segment, false)?;
                    if ok > 0 {
                        self.disable_gso();
                    }
                    sent += ok;
                }
                Failure::Drop => {
                    self.counters
                        .send_error(datagrams, err.raw_os_error().unwrap_or(0));
                }
            }
            offset += chunk;
        }
        Ok(sent)
    }
}

/// Appends to `out` the iovecs covering bytes `[start, start + len)` of the
/// concatenation of `base`.
fn sub_iov(base: &[libc::iovec], start: usize, len: usize, out: &mut Vec<libc::iovec>) {
    let end = start + len;
    let mut pos = 0;
    for v in base {
        let (s, e) = (pos, pos + v.iov_len);
        pos = e;
        if e <= start || v.iov_len == 0 {
            continue;
        }
        if s >= end {
            break;
        }
        let from = start.max(s) - s;
        let to = end.min(e) - s;
        out.push(libc::iovec {
            // Stays inside the caller's buffer: from < to <= iov_len.
            iov_base: v.iov_base.cast::<u8>().wrapping_add(from).cast(),
            iov_len: to - from,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iov(s: &[u8]) -> libc::iovec {
        libc::iovec {
            iov_base: s.as_ptr() as *mut libc::c_void,
            iov_len: s.len(),
        }
    }

    fn gather(v: &[libc::iovec]) -> Vec<u8> {
        v.iter()
            .flat_map(|v| {
                // SAFETY: test iovecs point into live local arrays.
                unsafe { std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len) }
            })
            .copied()
            .collect()
    }

    #[test]
    fn sub_iov_cuts_at_any_offset() {
        let data: Vec<u8> = (0..=99).collect();
        let base = [
            iov(&data[0..7]),
            iov(&data[7..7]),
            iov(&data[7..50]),
            iov(&data[50..100]),
        ];
        for start in 0..100 {
            for len in 1..=(100 - start) {
                let mut out = Vec::new();
                sub_iov(&base, start, len, &mut out);
                assert_eq!(gather(&out), &data[start..start + len], "{start}+{len}");
                assert!(out.iter().all(|v| v.iov_len > 0));
            }
        }
    }

    #[test]
    fn plan_chooses_gso_or_split() {
        let dst: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let data = [0u8; 100];
        let mut t = Transmit::new(dst, &data);
        assert!(matches!(
            plan(&t, 64),
            Plan::Single {
                gso: None,
                datagrams: 1
            }
        ));
        t.segment_size = Some(30);
        assert!(matches!(
            plan(&t, 64),
            Plan::Single {
                gso: Some(30),
                datagrams: 4
            }
        ));
        assert!(matches!(plan(&t, 3), Plan::Split { segment: 30 }));
        assert!(matches!(plan(&t, 1), Plan::Split { segment: 30 }));
        t.segment_size = Some(100);
        assert!(matches!(
            plan(&t, 1),
            Plan::Single {
                gso: None,
                datagrams: 1
            }
        ));
        t.segment_size = Some(0);
        assert!(matches!(
            plan(&t, 64),
            Plan::Single {
                gso: None,
                datagrams: 1
            }
        ));
    }
}
