//! Living in someone else's process: softrdma runs inside the program that
//! uses it, so it must behave as the libraries that program was written
//! for (rdma-core's) do.
//!
//! - Signals: [`with_signals_blocked`] starts softrdma's threads with every
//!   signal blocked, so a process-directed signal the program blocks in its
//!   own threads (and reads from a signalfd, as tgtd does with SIGUSR2)
//!   never lands in one of ours, where its default action would kill the
//!   process. A new thread inherits the mask of the thread that creates
//!   it, so the mask holds from the new thread's first instruction.
//! - Cancellation: rdma-core's blocking calls (`ibv_get_cq_event`,
//!   `rdma_get_cm_event`, …) block in `read()` on a descriptor, a
//!   cancellation point, so `pthread_cancel` of a thread blocked there
//!   unwinds it (a forced unwind: glibc's `__pthread_unwind`). softrdma
//!   blocks in [`wait_readable`] and [`read_blocking`], declared
//!   `extern "C-unwind"` so the forced unwind may pass through the Rust
//!   frames above them (running their destructors; no lock is held across
//!   them). Everything else softrdma does must not act on a cancellation
//!   request: the data path uses raw system calls, which are no
//!   cancellation points ([`sys_write`], and the sockets' `sendmmsg` and
//!   `recvmmsg`), and the rest runs under [`NoCancel`]. A forced unwind
//!   must never meet `catch_unwind` (Rust aborts: "FATAL: exception not
//!   rethrown").
//! - Fork: as with rdma-core, a child process cannot use its parent's
//!   devices (their sockets, threads and state are the parent's; the
//!   threads do not exist in the child). [`fork_generation`] tells a
//!   device made before a `fork` in the child from one made after; softrdma
//!   refuses the first kind and leaves their state alone (a destroy or an
//!   exit handler in the child never sends anything for the parent), and
//!   [`at_fork`] handlers hold the process-wide locks across `fork`, so
//!   that the child finds them free and consistent.
//! - Exit: [`at_exit`] runs softrdma's last duties when the program exits
//!   normally (sending what is still queued, disconnecting), as the kernel
//!   does for rdma-core's objects when the process goes.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;
use std::time::Duration;

extern "C-unwind" {
    /// poll(2) of the C library: a cancellation point, out of which a
    /// forced unwind may come.
    #[link_name = "poll"]
    fn poll_cancellable(
        fds: *mut libc::pollfd,
        nfds: libc::nfds_t,
        timeout: libc::c_int,
    ) -> libc::c_int;
    /// read(2) of the C library: a cancellation point, as above.
    #[link_name = "read"]
    fn read_cancellable(fd: libc::c_int, buf: *mut libc::c_void, n: libc::size_t) -> libc::ssize_t;
}

extern "C" {
    /// pthread_setcancelstate(3) (not in the libc crate).
    fn pthread_setcancelstate(state: libc::c_int, oldstate: *mut libc::c_int) -> libc::c_int;
}

/// glibc's `PTHREAD_CANCEL_ENABLE` and `PTHREAD_CANCEL_DISABLE`
/// (<pthread.h>).
const PTHREAD_CANCEL_ENABLE: libc::c_int = 0;
const PTHREAD_CANCEL_DISABLE: libc::c_int = 1;

/// Waits until `fd` is readable or `timeout` passes (`None`: forever);
/// returns whether it is readable. A signal restarts the wait.
///
/// A cancellation point, as the `read()` rdma-core's blocking calls wait
/// in: a `pthread_cancel` of the calling thread unwinds it from here
/// (callers hold no lock across this call).
pub fn wait_readable(fd: RawFd, timeout: Option<Duration>) -> io::Result<bool> {
    let ms = timeout.map_or(-1, |d| d.as_millis().min(i32::MAX as u128) as i32);
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one live pollfd.
        let r = unsafe { poll_cancellable(&mut p, 1, ms) };
        if r >= 0 {
            return Ok(r > 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// read(2) of up to `buf.len()` bytes, blocking as the descriptor's flags
/// say; a signal restarts it. A cancellation point, as [`wait_readable`].
pub fn read_blocking(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is live and writable for its length.
        let r = unsafe { read_cancellable(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// write(2) as a raw system call: never a cancellation point (glibc's
/// `write` is one).
pub fn sys_write(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is live for its length; the kernel only reads it.
    let r = unsafe { libc::syscall(libc::SYS_write, fd, buf.as_ptr(), buf.len()) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// read(2) as a raw system call: never a cancellation point. For
/// descriptors that do not block (or when blocking is not wanted to be
/// cancellable).
pub fn sys_read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is live and writable for its length.
    let r = unsafe { libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len()) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Whether `fd` is readable now (ppoll(2) with a zero timeout, as a raw
/// system call: never a cancellation point, never a wait).
pub fn readable_now(fd: RawFd) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    loop {
        // SAFETY: one live pollfd and a live timespec; no signal mask.
        let r = unsafe {
            libc::syscall(
                libc::SYS_ppoll,
                &mut p as *mut libc::pollfd,
                1 as libc::nfds_t,
                &zero as *const libc::timespec,
                std::ptr::null::<libc::sigset_t>(),
                0usize,
            )
        };
        if r >= 0 {
            return Ok(r > 0 && p.revents & libc::POLLIN != 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Whether `fd` is in non-blocking mode (`O_NONBLOCK`, which the program
/// may set on a descriptor softrdma gave it).
pub fn is_nonblocking(fd: RawFd) -> io::Result<bool> {
    // SAFETY: F_GETFL takes no argument; not a cancellation point.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if fl < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fl & libc::O_NONBLOCK != 0)
}

/// Thread cancellation disabled while it lives (`pthread_setcancelstate`),
/// the caller's state restored when it drops: a cancellation request that
/// comes meanwhile stays pending until the program's next cancellation
/// point. softrdma's entry points that may reach one (a write to a
/// capture file or the log, a file read) run under it.
#[must_use = "cancellation is enabled again when this drops"]
pub struct NoCancel {
    old: libc::c_int,
    /// Not Send: the state is the thread's.
    _thread: std::marker::PhantomData<*const ()>,
}

impl NoCancel {
    /// Disables cancellation for the calling thread.
    pub fn new() -> NoCancel {
        let mut old = PTHREAD_CANCEL_ENABLE;
        // SAFETY: writes the previous state into a live c_int.
        unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut old) };
        NoCancel {
            old,
            _thread: std::marker::PhantomData,
        }
    }
}

impl Default for NoCancel {
    fn default() -> Self {
        NoCancel::new()
    }
}

impl Drop for NoCancel {
    fn drop(&mut self) {
        // SAFETY: restores a state pthread_setcancelstate gave us; a null
        // old-state pointer is allowed.
        unsafe { pthread_setcancelstate(self.old, std::ptr::null_mut()) };
    }
}

/// Forks this process descends through since softrdma first watched
/// (bumped in the child by the handler [`watch_forks`] registers).
static FORK_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn forked_child() {
    FORK_GENERATION.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// Starts counting forks (once per process; before any other fork
/// handler softrdma registers, so the child's count is right when they
/// run).
pub fn watch_forks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a function pointer for the child; no
        // prepare/parent handlers.
        unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
    });
}

/// How many `fork`s separate this process from the one that first called
/// [`watch_forks`]: an object made when it was different belongs to an
/// ancestor process.
pub fn fork_generation() -> u64 {
    FORK_GENERATION.load(std::sync::atomic::Ordering::Relaxed)
}

/// Registers `fork` handlers (`pthread_atfork`): `prepare` runs in the
/// forking thread before the fork (handlers registered later run first),
/// `parent` and `child` after it in the parent and in the child (in
/// registration order, after the fork counter's). They must not unwind.
/// Returns false when the C library refused.
pub fn at_fork(
    prepare: Option<extern "C" fn()>,
    parent: Option<extern "C" fn()>,
    child: Option<extern "C" fn()>,
) -> bool {
    watch_forks();
    let f = |h: Option<extern "C" fn()>| h.map(|f| f as unsafe extern "C" fn());
    // SAFETY: registers plain function pointers.
    unsafe { libc::pthread_atfork(f(prepare), f(parent), f(child)) == 0 }
}

/// Registers `f` to run at normal process exit (`atexit`: when `main`
/// returns or the program calls `exit`), after the handlers registered
/// later. `f` must not unwind. Returns false when the C library has no
/// room for another handler.
pub fn at_exit(f: extern "C" fn()) -> bool {
    // SAFETY: registers a plain function pointer with no arguments.
    unsafe { libc::atexit(f) == 0 }
}

/// Sends signal `sig` to `pid` (`kill(2)`: a negative `pid` names a
/// process group, `sig` 0 only checks that the target exists).
pub fn signal(pid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: kill takes two integers and touches no memory of ours.
    if unsafe { libc::kill(pid, sig) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Runs `spawn` (which starts threads) with every signal blocked in the
/// calling thread, then restores the caller's mask: the threads `spawn`
/// starts inherit the full mask. glibc keeps its two internal signals
/// (thread cancellation and set*id) deliverable whatever the mask says.
///
/// A signal sent to the calling thread meanwhile stays pending and is
/// delivered when the mask is restored.
pub fn with_signals_blocked<R>(spawn: impl FnOnce() -> R) -> R {
    let mut all = MaybeUninit::<libc::sigset_t>::uninit();
    let mut old = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigfillset initialises the set it is given; pthread_sigmask
    // reads `all` (initialised) and writes the previous mask into `old`.
    // Neither can fail with valid arguments (SIG_SETMASK, live pointers).
    let restored = unsafe {
        libc::sigfillset(all.as_mut_ptr());
        libc::pthread_sigmask(libc::SIG_SETMASK, all.as_ptr(), old.as_mut_ptr()) == 0
    };
    let r = spawn();
    if restored {
        // SAFETY: `old` was written by the successful call above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old.as_ptr(), std::ptr::null_mut()) };
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_reaches_a_child_and_names_missing_targets() {
        assert!(signal(std::process::id() as i32, 0).is_ok());
        let mut c = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        signal(c.id() as i32, libc::SIGKILL).unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(c.wait().unwrap().signal(), Some(libc::SIGKILL));
        let e = signal(i32::MAX, 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ESRCH));
    }

    fn blocked_mask() -> libc::sigset_t {
        let mut cur = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: a null new set only reads the mask into `cur`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), cur.as_mut_ptr());
            cur.assume_init()
        }
    }

    fn is_blocked(set: &libc::sigset_t, sig: libc::c_int) -> bool {
        // SAFETY: a live, initialised set.
        unsafe { libc::sigismember(set, sig) == 1 }
    }

    #[test]
    fn threads_start_with_every_signal_blocked_and_the_caller_keeps_its_mask() {
        let before = blocked_mask();
        let h = with_signals_blocked(|| std::thread::spawn(blocked_mask));
        let inner = h.join().unwrap();
        for sig in [
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGPIPE,
        ] {
            assert!(
                is_blocked(&inner, sig),
                "signal {sig} not blocked in the thread"
            );
        }
        let after = blocked_mask();
        for sig in 1..32 {
            assert_eq!(
                is_blocked(&before, sig),
                is_blocked(&after, sig),
                "signal {sig}"
            );
        }
    }
}
