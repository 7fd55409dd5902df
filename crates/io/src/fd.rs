//! Descriptors to wait on: an eventfd ([`EventFd`]) and an epoll instance
//! that mirrors one other descriptor ([`FdWatch`]). The device's wakers,
//! completion channels and asynchronous-event queues are built from them,
//! and the C library hands [`FdWatch`]es to programs as
//! `ibv_comp_channel::fd` and `ibv_context::async_fd`.

use crate::sys::cvt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// A Linux eventfd (non-blocking, close-on-exec): a counter that is
/// readable while non-zero.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A new eventfd with its counter at zero.
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd takes no pointers; the result is checked.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Adds one to the counter (wakes waiters).
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd. The
        // only failure is EAGAIN when the counter would overflow, which
        // still leaves it readable: all a waiter needs.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Resets the counter; returns whether it was non-zero.
    pub fn drain(&self) -> bool {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64 from our own
        // non-blocking eventfd; EAGAIN (already zero) is harmless.
        let n = unsafe { libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        n == 8 && v > 0
    }

    /// Waits until the counter is non-zero or `timeout` passes (`None`:
    /// forever). Returns whether it is readable; a signal restarts the wait.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let mut p = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.map_or(-1, |d| d.as_millis().min(i32::MAX as u128) as i32);
        loop {
            // SAFETY: one live pollfd.
            match cvt(unsafe { libc::poll(&mut p, 1, ms) }) {
                Ok(r) => return Ok(r > 0),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
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
}
