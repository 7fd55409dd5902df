//! Event channels: a queue of events and an eventfd in semaphore mode that
//! counts them, so the descriptor is readable exactly while events are
//! queued (what `poll` on the kernel's rdma_cm descriptor says), and one
//! `read` takes one count: it blocks, or fails with EAGAIN when the
//! program made the descriptor non-blocking, as the kernel's does.
//!
//! Invariant: the count equals the queue's length (push adds one to both,
//! a reader takes one count then one event). Events of ids destroyed while
//! queued stay in the queue and are skipped by the reader that takes them
//! (the count stays right; a non-blocking reader may then see EAGAIN once).

use super::{CmEvent, ConnParam, EventType, UdParam};
use crate::error::{Error, Result};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// An event as queued, before it is delivered (`id::deliver`).
#[derive(Debug)]
pub(crate) struct Queued {
    /// The id it counts against (the listener, for a request).
    pub num: u64,
    pub event: EventType,
    pub status: i32,
    /// A request's new id.
    pub new_id: Option<u64>,
    pub conn: ConnParam,
    pub ud: Option<UdParam>,
    /// Multicast events: the group's address and the join's context.
    pub mc: Option<(std::net::IpAddr, u64)>,
}

impl Queued {
    pub fn new(num: u64, event: EventType, status: i32) -> Queued {
        Queued {
            num,
            event,
            status,
            new_id: None,
            conn: ConnParam::zero(),
            ud: None,
            mc: None,
        }
    }
}

#[derive(Debug)]
pub(crate) struct ChanInner {
    pub q: Mutex<VecDeque<Queued>>,
    fd: OwnedFd,
}

impl ChanInner {
    pub fn new() -> io::Result<Arc<ChanInner>> {
        // Blocking by default, like the kernel's descriptor.
        // SAFETY: eventfd takes no pointers; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_SEMAPHORE | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Arc::new(ChanInner {
            q: Mutex::new(VecDeque::new()),
            // SAFETY: a fresh descriptor we own.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        }))
    }

    /// Queues an event and makes the descriptor readable.
    pub fn push(&self, e: Queued) {
        self.q
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(e);
        self.post(1);
    }

    /// Adds `n` to the count (events moved here by a migration).
    pub fn post(&self, n: u64) {
        if n == 0 {
            return;
        }
        // SAFETY: writes 8 bytes from a valid u64. It cannot overflow:
        // the count is bounded by the queue length.
        unsafe { libc::write(self.fd.as_raw_fd(), (&n as *const u64).cast(), 8) };
    }

    /// Takes one count: blocks while there is none, unless the descriptor
    /// is non-blocking (EAGAIN).
    pub fn take_count(&self) -> io::Result<()> {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        if n == 8 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    pub fn pop(&self) -> Option<Queued> {
        self.q.lock().unwrap_or_else(|e| e.into_inner()).pop_front()
    }

    /// Takes the queued events of `num` (requests counted against a
    /// listener included) out of the queue, for `rdma_migrate_id`; the
    /// count keeps them (see the module documentation).
    pub fn take_of(&self, num: u64) -> Vec<Queued> {
        let mut q = self.q.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        let mut keep = VecDeque::with_capacity(q.len());
        for e in q.drain(..) {
            if e.num == num {
                out.push(e);
            } else {
                keep.push_back(e);
            }
        }
        *q = keep;
        out
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// An event channel (`struct rdma_event_channel`): ids created on it
/// report their events here. The descriptor ([`EventChannel::fd`]) is
/// readable while events are queued; a program may make it non-blocking.
#[derive(Clone, Debug)]
pub struct EventChannel(pub(crate) Arc<ChanInner>);

impl EventChannel {
    /// `rdma_create_event_channel`.
    pub fn new() -> Result<EventChannel> {
        Ok(EventChannel(
            ChanInner::new().map_err(|e| Error::io("eventfd", e))?,
        ))
    }

    /// The descriptor (`channel->fd`).
    pub fn fd(&self) -> RawFd {
        self.0.raw()
    }

    /// `rdma_get_cm_event`: the next event; blocks until one comes unless
    /// the descriptor is non-blocking (then `Error::Cm` with EAGAIN).
    pub fn get_event(&self) -> Result<CmEvent> {
        loop {
            self.0.take_count().map_err(|e| {
                Error::cm(e.raw_os_error().unwrap_or(libc::EIO), "rdma_get_cm_event")
            })?;
            let Some(q) = self.0.pop() else {
                continue;
            };
            if let Some(ev) = super::id::deliver(&self.0, q) {
                return Ok(ev);
            }
        }
    }

    /// The next event, waiting at most `timeout` (`Ok(None)` when none
    /// came). Meant for one reader per channel: with several, another may
    /// take the event this one was woken for, and it waits for the next.
    pub fn get_event_timeout(&self, timeout: Duration) -> Result<Option<CmEvent>> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let mut p = libc::pollfd {
                fd: self.fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().min(i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd.
            let r = unsafe { libc::poll(&mut p, 1, ms) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(Error::io("polling the event channel", e));
            }
            if r == 0 {
                return Ok(None);
            }
            self.0.take_count().map_err(|e| {
                Error::cm(e.raw_os_error().unwrap_or(libc::EIO), "rdma_get_cm_event")
            })?;
            if let Some(q) = self.0.pop() {
                if let Some(ev) = super::id::deliver(&self.0, q) {
                    return Ok(Some(ev));
                }
            }
            if left.is_zero() {
                return Ok(None);
            }
        }
    }
}

impl AsRawFd for EventChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.fd()
    }
}
