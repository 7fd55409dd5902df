//! Descriptors to wait on: an eventfd ([`EventFd`]) and an epoll instance
//! that mirrors one other descriptor ([`FdWatch`]). The device's wakers,
//! completion channels and asynchronous-event queues are built from them,
//! and the C library hands [`FdWatch`]es to programs as
//! `ibv_comp_channel::fd` and `ibv_context::async_fd`.

use crate::sys::cvt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// A Linux eventfd (close-on-exec): a counter that is readable while
/// non-zero. Non-blocking ([`EventFd::new`]), or blocking in semaphore
/// mode ([`EventFd::semaphore`]).
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl std::os::fd::AsFd for EventFd {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl EventFd {
    /// A new eventfd with its counter at zero.
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd takes no pointers; the result is checked.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// A new eventfd in semaphore mode with its counter at zero, blocking
    /// (as the kernel's event descriptors are until the program sets
    /// O_NONBLOCK): each `read` takes one count, so the descriptor stays
    /// readable exactly while counts are left.
    pub fn semaphore() -> io::Result<EventFd> {
        // SAFETY: eventfd takes no pointers; the result is checked.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_SEMAPHORE | libc::EFD_CLOEXEC) })?;
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// An eventfd another process passed (`SCM_RIGHTS`), to wake it.
    pub fn from_fd(fd: OwnedFd) -> EventFd {
        EventFd(fd)
    }

    /// Adds one to the counter (wakes waiters). A raw system call: never
    /// a cancellation point (see [`crate::NoCancel`]).
    pub fn signal(&self) {
        // The only failure is EAGAIN when the counter would overflow, which
        // still leaves it readable: all a waiter needs.
        let _ = crate::sys_write(self.0.as_raw_fd(), &1u64.to_ne_bytes());
    }

    /// Resets the counter; returns whether it was non-zero. A raw system
    /// call, as [`EventFd::signal`].
    pub fn drain(&self) -> bool {
        let mut v = [0u8; 8];
        // EAGAIN (already zero) is harmless.
        crate::sys_read(self.0.as_raw_fd(), &mut v).is_ok_and(|n| n == 8)
            && u64::from_ne_bytes(v) > 0
    }

    /// Waits until the counter is non-zero or `timeout` passes (`None`:
    /// forever). Returns whether it is readable; a signal restarts the wait.
    /// A cancellation point ([`crate::wait_readable`]).
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<bool> {
        crate::wait_readable(self.0.as_raw_fd(), timeout)
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// An epoll instance watching one descriptor for input: readable exactly
/// when that descriptor is, but a file of its own, so a program may make
/// it non-blocking (and [`FdWatch::is_nonblocking`] tells) without
/// touching the descriptor it watches.
#[derive(Debug)]
pub struct FdWatch(OwnedFd);

impl FdWatch {
    /// Watches `fd`, which must stay open as long as this is used (closing
    /// it removes it from the epoll set).
    pub fn new(fd: RawFd) -> io::Result<FdWatch> {
        // SAFETY: epoll_create1 takes no pointers; the result is checked.
        let ep = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `ep` is a fresh descriptor nothing else owns.
        let ep = unsafe { OwnedFd::from_raw_fd(ep) };
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 0,
        };
        // SAFETY: `ev` is a live epoll_event the kernel copies; a bad `fd`
        // comes back as errno.
        cvt(unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
        Ok(FdWatch(ep))
    }

    /// Whether the program set O_NONBLOCK on this descriptor.
    pub fn is_nonblocking(&self) -> bool {
        // SAFETY: F_GETFL takes no pointer.
        let fl = unsafe { libc::fcntl(self.0.as_raw_fd(), libc::F_GETFL) };
        fl >= 0 && fl & libc::O_NONBLOCK != 0
    }
}

impl AsRawFd for FdWatch {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(fd: RawFd) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    #[test]
    fn eventfd_and_watch() {
        let e = EventFd::new().unwrap();
        let w = FdWatch::new(e.as_raw_fd()).unwrap();
        assert!(!e.drain());
        assert!(!e.wait(Some(Duration::ZERO)).unwrap());
        assert!(!readable(w.as_raw_fd()));
        e.signal();
        e.signal();
        assert!(e.wait(None).unwrap());
        assert!(readable(w.as_raw_fd()));
        assert!(e.drain());
        assert!(!readable(w.as_raw_fd()));
        assert!(!w.is_nonblocking());
        // SAFETY: F_SETFL with an int flag.
        unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
        assert!(w.is_nonblocking());
        assert!(FdWatch::new(-1).is_err());
    }

    #[test]
    fn semaphore_eventfd_takes_one_count_a_read() {
        let e = EventFd::semaphore().unwrap();
        assert!(!readable(e.as_raw_fd()));
        assert!(!crate::is_nonblocking(e.as_raw_fd()).unwrap());
        e.signal();
        e.signal();
        let mut v = [0u8; 8];
        assert_eq!(crate::sys_read(e.as_raw_fd(), &mut v).unwrap(), 8);
        assert_eq!(u64::from_ne_bytes(v), 1);
        assert!(readable(e.as_raw_fd()));
        assert_eq!(crate::sys_read(e.as_raw_fd(), &mut v).unwrap(), 8);
        assert_eq!(u64::from_ne_bytes(v), 1);
        assert!(!readable(e.as_raw_fd()));
    }
}
