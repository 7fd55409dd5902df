//! Unix sequenced-packet sockets: the control channel between the
//! processes that share a device and the process that hosts it.
//!
//! A [`SeqPacket`] keeps message boundaries (one `send` is one `recv`),
//! carries file descriptors (`SCM_RIGHTS`: sockets, memfds, eventfds) and
//! tells who is on the other end (`SO_PEERCRED`: pid, uid, gid, checked
//! by the kernel at `connect`). Names live in Linux's *abstract* namespace
//! (no file, gone when the socket closes, and scoped to the network
//! namespace of the socket that binds or connects): binding a name is an
//! atomic election — the first process wins, every other gets
//! `EADDRINUSE` — and a name whose owner died is free again at once.
//! Abstract names have no permissions: whoever connects must check the
//! peer's credentials ([`SeqPacket::peer_cred`]) itself.
//!
//! Every socket is close-on-exec and non-blocking; [`SeqPacket::recv_wait`]
//! and [`SeqPacket::send`] wait with `poll` where they must.

use crate::sys::cvt;
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// Most descriptors one message carries.
pub const MAX_FDS: usize = 8;

/// Longest abstract name (`sun_path` less the leading NUL).
pub const MAX_NAME: usize = 107;

/// The credentials of a socket's peer, as the kernel recorded them when
/// the connection was made (`SO_PEERCRED`). `pid` is 0 when the peer is
/// in a PID namespace this process cannot see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCred {
    /// Process ID (in this process's PID namespace).
    pub pid: i32,
    /// Effective user ID.
    pub uid: u32,
    /// Effective group ID.
    pub gid: u32,
}

/// A connected (or listening) `AF_UNIX` `SOCK_SEQPACKET` socket.
#[derive(Debug)]
pub struct SeqPacket {
    fd: OwnedFd,
}

fn abstract_addr(name: &[u8]) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "abstract socket name empty or too long",
        ));
    }
    // SAFETY: sockaddr_un is a plain C struct; all-zero bytes are valid.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    // sun_path[0] stays 0: the abstract namespace.
    for (d, s) in a.sun_path[1..].iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    let len = size_of::<libc::sa_family_t>() + 1 + name.len();
    Ok((a, len as libc::socklen_t))
}

fn new_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with constant arguments.
    let raw = cvt(unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Waits until `fd` has `events` or `deadline` passes (`None`: forever);
/// returns whether it has. A signal restarts the wait.
pub fn poll_fd(fd: RawFd, events: libc::c_short, deadline: Option<Instant>) -> io::Result<bool> {
    loop {
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                left.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32
            }
        };
        let mut p = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r > 0 {
            return Ok(true);
        }
        if r == 0 {
            return Ok(false);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

impl SeqPacket {
    /// Binds `name` in the abstract namespace and listens. `EADDRINUSE`
    /// when another socket (of any process in this network namespace)
    /// holds the name.
    pub fn listen(name: &[u8]) -> io::Result<SeqPacket> {
        let fd = new_socket()?;
        let (a, len) = abstract_addr(name)?;
        // SAFETY: `a` is a valid sockaddr_un of `len` bytes.
        cvt(unsafe { libc::bind(fd.as_raw_fd(), (&a as *const libc::sockaddr_un).cast(), len) })?;
        // SAFETY: plain syscall on our descriptor.
        cvt(unsafe { libc::listen(fd.as_raw_fd(), 128) })?;
        Ok(SeqPacket { fd })
    }

    /// Connects to the listener holding `name`. `ECONNREFUSED` when
    /// nobody listens there; `EAGAIN` when its backlog is full.
    pub fn connect(name: &[u8]) -> io::Result<SeqPacket> {
        let fd = new_socket()?;
        let (a, len) = abstract_addr(name)?;
        // SAFETY: `a` is a valid sockaddr_un of `len` bytes. A unix
        // connect completes at once (it never returns EINPROGRESS).
        cvt(unsafe {
            libc::connect(fd.as_raw_fd(), (&a as *const libc::sockaddr_un).cast(), len)
        })?;
        Ok(SeqPacket { fd })
    }

    /// A connected pair.
    pub fn pair() -> io::Result<(SeqPacket, SeqPacket)> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two descriptors.
        cvt(unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        })?;
        // SAFETY: two fresh descriptors nothing else owns.
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok((SeqPacket { fd: a }, SeqPacket { fd: b }))
    }

    /// A socket from a descriptor (one passed in at exec, say). The
    /// descriptor is made non-blocking and close-on-exec.
    pub fn from_fd(fd: OwnedFd) -> io::Result<SeqPacket> {
        // SAFETY: fcntl on our descriptor with integer arguments.
        unsafe {
            let fl = cvt(libc::fcntl(fd.as_raw_fd(), libc::F_GETFL))?;
            cvt(libc::fcntl(
                fd.as_raw_fd(),
                libc::F_SETFL,
                fl | libc::O_NONBLOCK,
            ))?;
            cvt(libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC))?;
        }
        Ok(SeqPacket { fd })
    }

    /// Takes a waiting connection: `None` when there is none.
    pub fn accept(&self) -> io::Result<Option<SeqPacket>> {
        // SAFETY: null address arguments are allowed.
        let r = unsafe {
            libc::accept4(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
                _ if e.raw_os_error() == Some(libc::ECONNABORTED) => Ok(None),
                _ => Err(e),
            };
        }
        // SAFETY: a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(r) };
        Ok(Some(SeqPacket { fd }))
    }

    /// The peer's credentials (as of `connect`).
    pub fn peer_cred(&self) -> io::Result<PeerCred> {
        let mut c = MaybeUninit::<libc::ucred>::zeroed();
        let mut len = size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: `c` has room for a ucred; the kernel writes at most `len`.
        cvt(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                c.as_mut_ptr().cast(),
                &mut len,
            )
        })?;
        // SAFETY: zero-initialised and filled by the kernel.
        let c = unsafe { c.assume_init() };
        Ok(PeerCred {
            pid: c.pid,
            uid: c.uid,
            gid: c.gid,
        })
    }

    /// Sends one message with `fds` attached. Waits (up to 5 s) while the
    /// peer's queue is full; `EPIPE` when the peer is gone (no SIGPIPE).
    /// (A caller that must not wait that long: [`Self::send_until`] or
    /// [`Self::try_send`].)
    pub fn send(&self, msg: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        self.send_until(msg, fds, Instant::now() + Duration::from_secs(5))
    }

    /// [`Self::send`], waiting for room in the peer's queue until
    /// `deadline` at most (`TimedOut` then).
    pub fn send_until(
        &self,
        msg: &[u8],
        fds: &[BorrowedFd<'_>],
        deadline: Instant,
    ) -> io::Result<()> {
        if fds.len() > MAX_FDS {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many fds"));
        }
        loop {
            match self.try_send(msg, fds) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !poll_fd(self.fd.as_raw_fd(), libc::POLLOUT, Some(deadline))? {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "the peer does not take messages",
                        ));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => return r,
            }
        }
    }

    /// Waits until a message may be sent without blocking, or `deadline`:
    /// whether it may (an error or a hang-up counts as may: the send then
    /// says what happened).
    pub fn wait_writable(&self, deadline: Instant) -> io::Result<bool> {
        poll_fd(self.fd.as_raw_fd(), libc::POLLOUT, Some(deadline))
    }

    /// Sends one message without waiting (`WouldBlock` when the peer's
    /// queue is full).
    pub fn try_send(&self, msg: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        let mut iov = libc::iovec {
            iov_base: msg.as_ptr() as *mut libc::c_void,
            iov_len: msg.len(),
        };
        let mut cbuf = [0u64; (MAX_FDS * 4 + 24).div_ceil(8)];
        // SAFETY: msghdr is a plain C struct; all-zero is valid.
        let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
        h.msg_iov = &mut iov;
        h.msg_iovlen = 1;
        if !fds.is_empty() {
            let data = fds.len() * size_of::<libc::c_int>();
            // SAFETY: CMSG_SPACE/CMSG_LEN only compute sizes.
            let (space, clen) =
                unsafe { (libc::CMSG_SPACE(data as u32), libc::CMSG_LEN(data as u32)) };
            h.msg_control = cbuf.as_mut_ptr().cast();
            h.msg_controllen = space as usize;
            // SAFETY: the control buffer is aligned (u64) and has room for
            // one cmsghdr plus MAX_FDS ints; CMSG_FIRSTHDR points into it.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&h);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = clen as usize;
                let p = libc::CMSG_DATA(c).cast::<libc::c_int>();
                for (i, f) in fds.iter().enumerate() {
                    p.add(i).write_unaligned(f.as_raw_fd());
                }
            }
        }
        // SAFETY: `h` points at live buffers for the duration of the call.
        let r = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &h, libc::MSG_NOSIGNAL) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Receives one message into `buf`, its descriptors appended to `fds`
    /// (close-on-exec). `Ok(None)`: nothing waiting. `Ok(Some(0))` with no
    /// descriptor: the peer closed. A message longer than `buf` is an
    /// `InvalidData` error (its rest is lost).
    pub fn try_recv(&self, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<Option<usize>> {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut cbuf = [0u64; (MAX_FDS * 4 + 24).div_ceil(8)];
        // SAFETY: msghdr is a plain C struct; all-zero is valid.
        let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
        h.msg_iov = &mut iov;
        h.msg_iovlen = 1;
        h.msg_control = cbuf.as_mut_ptr().cast();
        h.msg_controllen = std::mem::size_of_val(&cbuf);
        // SAFETY: `h` points at live buffers the kernel may fill.
        let r = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut h, libc::MSG_CMSG_CLOEXEC) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
                _ => Err(e),
            };
        }
        // Descriptors first: they are ours now, whatever else happened.
        // SAFETY: the kernel wrote `msg_controllen` bytes of control
        // messages into `cbuf`; the CMSG macros walk them within it.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&h);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(c).cast::<libc::c_int>();
                    let n = ((*c).cmsg_len - libc::CMSG_LEN(0) as usize) / size_of::<libc::c_int>();
                    for i in 0..n {
                        fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                    }
                }
                c = libc::CMSG_NXTHDR(&h, c);
            }
        }
        if h.msg_flags & libc::MSG_TRUNC != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "message too long",
            ));
        }
        Ok(Some(r as usize))
    }

    /// Waits up to `timeout` for one message (see [`Self::try_recv`]);
    /// `TimedOut` when none came.
    pub fn recv_wait(
        &self,
        buf: &mut [u8],
        fds: &mut Vec<OwnedFd>,
        timeout: Duration,
    ) -> io::Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(n) = self.try_recv(buf, fds)? {
                return Ok(n);
            }
            if !poll_fd(self.fd.as_raw_fd(), libc::POLLIN, Some(deadline))? {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "no answer"));
            }
        }
    }
}

impl AsFd for SeqPacket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for SeqPacket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A pidfd: a descriptor for one process that becomes readable when it
/// exits (Linux 5.3), whatever it died of and whoever holds copies of its
/// other descriptors.
#[derive(Debug)]
pub struct PidFd(OwnedFd);

impl PidFd {
    /// Opens `pid`. `ESRCH` when it does not exist (any more).
    pub fn open(pid: i32) -> io::Result<PidFd> {
        // SAFETY: plain syscall with integer arguments.
        let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor (pidfds are close-on-exec).
        Ok(PidFd(unsafe { OwnedFd::from_raw_fd(r as RawFd) }))
    }

    /// A pidfd another process passed (`SCM_RIGHTS`).
    pub fn from_fd(fd: OwnedFd) -> PidFd {
        PidFd(fd)
    }

    /// Whether the process has exited (zombie or reaped).
    pub fn exited(&self) -> bool {
        poll_fd(self.0.as_raw_fd(), libc::POLLIN, Some(Instant::now())).unwrap_or(true)
    }
}

impl AsFd for PidFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl AsRawFd for PidFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// The identity of this process's network namespace (the inode of
/// `/proc/self/ns/net`): two processes with the same one see the same
/// addresses, sockets and abstract unix names.
pub fn netns_id() -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata("/proc/self/ns/net")?.ino())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(tag: &str) -> Vec<u8> {
        format!("softrdma-io-test/{}/{tag}", std::process::id()).into_bytes()
    }

    #[test]
    fn listen_is_an_election_and_messages_carry_fds_and_creds() {
        let n = name("elect");
        let l = SeqPacket::listen(&n).unwrap();
        let e = SeqPacket::listen(&n).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EADDRINUSE));
        let c = SeqPacket::connect(&n).unwrap();
        let s = loop {
            if let Some(s) = l.accept().unwrap() {
                break s;
            }
        };
        let cred = s.peer_cred().unwrap();
        assert_eq!(cred.pid as u32, std::process::id());
        // SAFETY: getuid cannot fail.
        assert_eq!(cred.uid, unsafe { libc::getuid() });
        let ev = crate::EventFd::new().unwrap();
        // SAFETY: borrowed for the call only.
        let b = unsafe { BorrowedFd::borrow_raw(ev.as_raw_fd()) };
        c.send(b"hello", &[b, b]).unwrap();
        let mut buf = [0u8; 64];
        let mut fds = Vec::new();
        let n2 = s
            .recv_wait(&mut buf, &mut fds, Duration::from_secs(5))
            .unwrap();
        assert_eq!(&buf[..n2], b"hello");
        assert_eq!(fds.len(), 2);
        // The received copy is the same eventfd.
        crate::sys_write(fds[0].as_raw_fd(), &1u64.to_ne_bytes()).unwrap();
        assert!(ev.drain());
        // Boundaries kept.
        c.send(b"a", &[]).unwrap();
        c.send(b"bc", &[]).unwrap();
        assert_eq!(
            s.recv_wait(&mut buf, &mut fds, Duration::from_secs(5))
                .unwrap(),
            1
        );
        assert_eq!(
            s.recv_wait(&mut buf, &mut fds, Duration::from_secs(5))
                .unwrap(),
            2
        );
        assert_eq!(s.try_recv(&mut buf, &mut fds).unwrap(), None);
        drop(c);
        assert_eq!(
            s.recv_wait(&mut buf, &mut fds, Duration::from_secs(5))
                .unwrap(),
            0
        );
        // The name is free again once the listener is closed.
        drop(l);
        assert_eq!(
            SeqPacket::connect(&n).unwrap_err().raw_os_error(),
            Some(libc::ECONNREFUSED)
        );
        let _again = SeqPacket::listen(&n).unwrap();
    }

    #[test]
    fn pidfd_sees_exit() {
        let child = std::process::Command::new("sleep")
            .arg("0.05")
            .spawn()
            .unwrap();
        let p = PidFd::open(child.id() as i32).unwrap();
        assert!(!p.exited());
        let mut child = child;
        child.wait().unwrap();
        assert!(p.exited());
        assert!(netns_id().unwrap() > 0);
    }
}
