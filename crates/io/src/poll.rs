//! Sleeping until there is work: an epoll instance watching one socket and
//! an eventfd that any thread can poke through a [`Waker`].

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::fd::EventFd;
use crate::sys::cvt;

const TOKEN_SOCKET: u64 = 0;
const TOKEN_WAKER: u64 = 1;

/// What [`Poller::wait`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Readiness {
    /// The socket has datagrams to receive (or a pending error).
    pub readable: bool,
    /// The socket has room to send; only reported while
    /// [`Poller::set_writable_interest`] is on.
    pub writable: bool,
    /// A [`Waker::wake`] happened since the previous wait returned.
    pub woken: bool,
    /// The descriptors added with [`Poller::add`] that are readable (or
    /// hung up), as a bit mask of their tokens.
    pub others: u64,
}

impl Readiness {
    /// Nothing happened: the timeout expired or a signal interrupted.
    pub fn is_empty(&self) -> bool {
        !(self.readable || self.writable || self.woken || self.others != 0)
    }
}

struct WakerInner {
    eventfd: EventFd,
    /// Set by the first `wake` after the poller drained; later wakes see it
    /// set and skip the syscall (coalescing).
    pending: AtomicBool,
}

/// Wakes a [`Poller`] from any thread. Cheap to clone; `wake` is one atomic
/// swap when a wake is already pending, and one `write(2)` to an eventfd
/// otherwise.
#[derive(Clone)]
pub struct Waker {
    inner: Arc<WakerInner>,
}

impl Waker {
    /// Makes the poller's current or next [`Poller::wait`] return with
    /// `woken`. Wakes that happen before the poller drains coalesce into one.
    ///
    /// Publish the work before calling this: the poller's thread sees every
    /// write made before `wake` once `wait` has returned `woken`.
    pub fn wake(&self) {
        if !self.inner.pending.swap(true, Ordering::AcqRel) {
            self.inner.eventfd.signal();
        }
    }
}

impl std::fmt::Debug for Waker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waker")
            .field("eventfd", &self.inner.eventfd.as_raw_fd())
            .finish()
    }
}

/// An epoll instance watching one socket (level-triggered) and a [`Waker`].
///
/// The intended loop: busy-poll `recv` / the work queues while there is
/// work; when idle, `wait` with the next timer deadline; after it returns,
/// check everything again (a return may be spurious).
///
/// Sleeping is expensive on a VM: `udp_bw` measures a ping-pong RTT of
/// 5-6 µs when both sides busy-poll but 11-90 µs when they sleep in
/// `wait` (the idle vCPU has to be woken), so keep polling for a while
/// before sleeping. Timeouts also overshoot by the thread's timer slack
/// (50 µs by default; `prctl(PR_SET_TIMERSLACK)` lowers it).
pub struct Poller {
    epoll: Arc<OwnedFd>,
    socket: RawFd,
    waker: Waker,
    writable_interest: bool,
    socket_watched: bool,
}

impl Poller {
    /// Watches `socket` for readability. The socket must outlive its use
    /// here: closing it removes it from the epoll set, after which the
    /// poller only reports wakes.
    pub fn new(socket: &impl AsFd) -> io::Result<Self> {
        // SAFETY: plain syscall; returns a new fd or -1.
        let ep = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `ep` is a fresh fd owned by nothing else.
        let epoll = unsafe { OwnedFd::from_raw_fd(ep) };
        let eventfd = EventFd::new()?;
        let socket = socket.as_fd().as_raw_fd();
        ctl(
            &epoll,
            libc::EPOLL_CTL_ADD,
            socket,
            libc::EPOLLIN,
            TOKEN_SOCKET,
        )?;
        ctl(
            &epoll,
            libc::EPOLL_CTL_ADD,
            eventfd.as_raw_fd(),
            libc::EPOLLIN,
            TOKEN_WAKER,
        )?;
        Ok(Self {
            epoll: Arc::new(epoll),
            socket,
            waker: Waker {
                inner: Arc::new(WakerInner {
                    eventfd,
                    pending: AtomicBool::new(false),
                }),
            },
            writable_interest: false,
            socket_watched: true,
        })
    }

    /// Also watches `fd` for input (level-triggered); [`Readiness::others`]
    /// reports it as bit `token` (2..64). The descriptor must stay open
    /// until [`Poller::remove`].
    pub fn add(&mut self, fd: RawFd, token: u32) -> io::Result<()> {
        if !(2..64).contains(&token) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "token 2..64"));
        }
        ctl(
            &self.epoll,
            libc::EPOLL_CTL_ADD,
            fd,
            libc::EPOLLIN,
            u64::from(token),
        )
    }

    /// Stops watching a descriptor given to [`Poller::add`].
    pub fn remove(&mut self, fd: RawFd) -> io::Result<()> {
        ctl(&self.epoll, libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Watches the socket (the default) or not: a process that shares a
    /// socket another process reads must not be woken by its datagrams.
    pub fn watch_socket(&mut self, on: bool) -> io::Result<()> {
        if on == self.socket_watched {
            return Ok(());
        }
        if on {
            let events = if self.writable_interest {
                libc::EPOLLIN | libc::EPOLLOUT
            } else {
                libc::EPOLLIN
            };
            ctl(
                &self.epoll,
                libc::EPOLL_CTL_ADD,
                self.socket,
                events,
                TOKEN_SOCKET,
            )?;
        } else {
            ctl(&self.epoll, libc::EPOLL_CTL_DEL, self.socket, 0, 0)?;
        }
        self.socket_watched = on;
        Ok(())
    }

    /// The waker's eventfd, for another process to wake this poller
    /// (pass a duplicate; a write of a non-zero count wakes it).
    pub fn waker_fd(&self) -> RawFd {
        self.waker.inner.eventfd.as_raw_fd()
    }

    /// A waker for this poller (clone it freely).
    pub fn waker(&self) -> Waker {
        self.waker.clone()
    }

    /// A handle that adds more sockets to watch (clone it freely; any
    /// thread may use it while another waits).
    pub fn registry(&self) -> PollRegistry {
        PollRegistry {
            epoll: self.epoll.clone(),
        }
    }

    /// Also report writability (after a send returned fewer than asked).
    /// Turn it off again once the backlog is sent: a UDP socket is almost
    /// always writable, and level-triggered interest would spin.
    pub fn set_writable_interest(&mut self, on: bool) -> io::Result<()> {
        if on == self.writable_interest {
            return Ok(());
        }
        if !self.socket_watched {
            self.writable_interest = on;
            return Ok(());
        }
        let events = if on {
            libc::EPOLLIN | libc::EPOLLOUT
        } else {
            libc::EPOLLIN
        };
        ctl(
            &self.epoll,
            libc::EPOLL_CTL_MOD,
            self.socket,
            events,
            TOKEN_SOCKET,
        )?;
        self.writable_interest = on;
        Ok(())
    }

    /// Sleeps until the socket is ready, a wake happens, or `timeout`
    /// passes (`None`: no timeout; `Some(ZERO)`: just look). The timeout has
    /// nanosecond resolution where the kernel has `epoll_pwait2` (5.11+) and
    /// is rounded up to whole milliseconds elsewhere. A signal makes it
    /// return an empty [`Readiness`].
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<Readiness> {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 16];
        let ret = epoll_wait(self.epoll.as_raw_fd(), &mut events, timeout);
        let n = match cvt(ret) {
            Ok(n) => n as usize,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(Readiness::default()),
            Err(e) => return Err(e),
        };
        let mut r = Readiness::default();
        for ev in &events[..n] {
            let flags = ev.events;
            match ev.u64 {
                TOKEN_SOCKET => {
                    let err = flags & (libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0;
                    r.readable |= flags & libc::EPOLLIN as u32 != 0 || err;
                    r.writable |= flags & libc::EPOLLOUT as u32 != 0;
                }
                TOKEN_WAKER => {
                    self.drain_waker();
                    r.woken = true;
                }
                t @ 2..64 => r.others |= 1 << t,
                _ => {}
            }
        }
        Ok(r)
    }

    /// Drains the eventfd counter, then clears the pending flag — in that
    /// order. A wake whose swap comes before our swap is seen here (our
    /// swap reads its `true` and acquires its writes). A wake whose swap
    /// comes after finds the flag clear and writes the eventfd again, so the
    /// next wait returns at once. (Clearing first loses wakes: a wake could
    /// set the flag and write between the clear and the read, the read would
    /// swallow its write, and the flag would stay set with the counter at
    /// zero, muting every later wake. The contention test caught that.)
    fn drain_waker(&self) {
        self.waker.inner.eventfd.drain();
        self.waker.inner.pending.swap(false, Ordering::AcqRel);
    }
}

/// Adds sockets to a [`Poller`]'s set, or removes them: their readability
/// is reported as the main socket's ([`Readiness::readable`]). Used for a
/// device's multicast group sockets.
#[derive(Clone)]
pub struct PollRegistry {
    epoll: Arc<OwnedFd>,
}

impl PollRegistry {
    /// Watches `socket` for readability.
    pub fn add(&self, socket: &impl AsFd) -> io::Result<()> {
        let fd = socket.as_fd().as_raw_fd();
        ctl(
            &self.epoll,
            libc::EPOLL_CTL_ADD,
            fd,
            libc::EPOLLIN,
            TOKEN_SOCKET,
        )
    }

    /// Stops watching `socket` (closing it does too).
    pub fn remove(&self, socket: &impl AsFd) -> io::Result<()> {
        let fd = socket.as_fd().as_raw_fd();
        ctl(&self.epoll, libc::EPOLL_CTL_DEL, fd, 0, TOKEN_SOCKET)
    }
}

/// A set of sockets asked which of them have input now, without sleeping:
/// an epoll instance of its own whose events carry each socket's
/// descriptor. One `epoll_wait` with a zero timeout answers for the whole
/// set, however many sockets it holds (a device's multicast group sockets,
/// up to 8,192: reading each in turn on every poll would cost a system call
/// per group). The set is itself a descriptor, readable while one of its
/// sockets is: add it to a [`Poller`] (through a [`PollRegistry`]) to sleep
/// on all of them.
pub struct ReadySet {
    epoll: OwnedFd,
}

impl ReadySet {
    /// An empty set.
    pub fn new() -> io::Result<ReadySet> {
        // SAFETY: plain syscall; returns a new fd or -1.
        let ep = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `ep` is a fresh fd owned by nothing else.
        let epoll = unsafe { OwnedFd::from_raw_fd(ep) };
        Ok(ReadySet { epoll })
    }

    /// Watches `socket` for input (level-triggered). It must stay open
    /// until [`ReadySet::remove`] (closing it removes it too).
    pub fn add(&self, socket: &impl AsFd) -> io::Result<()> {
        let fd = socket.as_fd().as_raw_fd();
        ctl(
            &self.epoll,
            libc::EPOLL_CTL_ADD,
            fd,
            libc::EPOLLIN,
            fd as u64,
        )
    }

    /// Stops watching `socket`.
    pub fn remove(&self, socket: &impl AsFd) -> io::Result<()> {
        let fd = socket.as_fd().as_raw_fd();
        ctl(&self.epoll, libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// The descriptors of the sockets that have input (or an error) now,
    /// at most `out.len()` of them; returns how many were written. Never
    /// sleeps; an interrupted or failed look reports none (the sockets are
    /// level-triggered: the next look sees them).
    pub fn ready(&self, out: &mut [RawFd]) -> usize {
        const MAX: usize = 16;
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; MAX];
        let want = out.len().min(MAX);
        if want == 0 {
            return 0;
        }
        // SAFETY: `events` is a live array of at least `want` entries; the
        // kernel writes at most that many.
        let n = unsafe {
            libc::epoll_wait(
                self.epoll.as_raw_fd(),
                events.as_mut_ptr(),
                want as libc::c_int,
                0,
            )
        };
        let n = usize::try_from(n).unwrap_or(0);
        for (o, ev) in out.iter_mut().zip(&events[..n]) {
            *o = ev.u64 as RawFd;
        }
        n
    }
}

impl AsFd for ReadySet {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.epoll.as_fd()
    }
}

impl std::fmt::Debug for ReadySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadySet")
            .field("epoll", &self.epoll.as_raw_fd())
            .finish()
    }
}

impl std::fmt::Debug for PollRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PollRegistry")
            .field("epoll", &self.epoll.as_raw_fd())
            .finish()
    }
}

impl std::fmt::Debug for Poller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poller")
            .field("epoll", &self.epoll.as_raw_fd())
            .field("socket", &self.socket)
            .finish()
    }
}

/// Whether `epoll_pwait2` may work here; cleared the first time the kernel
/// (or a seccomp filter) refuses it.
static PWAIT2: AtomicBool = AtomicBool::new(cfg!(target_pointer_width = "64"));

/// `epoll_pwait2` with a nanosecond timeout when available, else
/// `epoll_wait` with the timeout rounded up to milliseconds.
fn epoll_wait(
    epfd: RawFd,
    events: &mut [libc::epoll_event],
    timeout: Option<Duration>,
) -> libc::c_int {
    let max = events.len() as libc::c_int;
    if let Some(d) = timeout {
        if PWAIT2.load(Ordering::Relaxed) {
            // The syscall takes a `__kernel_timespec` (64-bit seconds), which
            // is `libc::timespec` on 64-bit targets (the only ones enabling
            // this path).
            let ts = libc::timespec {
                tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: d.subsec_nanos() as _,
            };
            // SAFETY: `events` is a live array of `max` entries the kernel
            // may fill; `ts` is a live timespec; a null sigmask means "keep
            // the current mask" (its size argument is then ignored).
            let r = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    epfd,
                    events.as_mut_ptr(),
                    max,
                    &ts as *const libc::timespec,
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            };
            let refused = r == -1
                && matches!(
                    io::Error::last_os_error().raw_os_error(),
                    Some(libc::ENOSYS) | Some(libc::EPERM)
                );
            if !refused {
                return r as libc::c_int;
            }
            PWAIT2.store(false, Ordering::Relaxed);
        }
    }
    let timeout_ms: libc::c_int = match timeout {
        None => -1,
        Some(d) => {
            let ms = d.as_nanos().div_ceil(1_000_000);
            ms.min(libc::c_int::MAX as u128) as libc::c_int
        }
    };
    // SAFETY: `events` is a live array of `max` entries; the kernel writes
    // at most that many.
    unsafe { libc::epoll_wait(epfd, events.as_mut_ptr(), max, timeout_ms) }
}

fn ctl(
    epoll: &OwnedFd,
    op: libc::c_int,
    fd: RawFd,
    events: libc::c_int,
    token: u64,
) -> io::Result<()> {
    let mut ev = libc::epoll_event {
        events: events as u32,
        u64: token,
    };
    // SAFETY: `ev` is a live epoll_event; the kernel copies it. Bad fds or
    // ops come back as errno.
    cvt(unsafe { libc::epoll_ctl(epoll.as_raw_fd(), op, fd, &mut ev) }).map(drop)
}
