//! Event channels: a queue of events and an eventfd in semaphore mode that
//! counts them, so the descriptor is readable exactly while events are
//! queued (what `poll` on the kernel's rdma_cm descriptor says), and one
//! `read` takes one count: it blocks, or fails with EAGAIN when the
//! program made the descriptor non-blocking, as the kernel's does.
//!
//! Invariant: the count equals the queue's length (push adds one to both,
//! a reader takes one count then one event). Events that leave the queue
//! otherwise — moved by `rdma_migrate_id`, discarded by `rdma_destroy_id`
//! — take their counts with them (`ChanInner::take_of`): the descriptor is
//! never readable for events that are not there (an epoll loop would take
//! it for a new one, and a blocking `rdma_get_cm_event` would then block).
//! Counts are read only by a holder of `reads` that saw the descriptor
//! readable, so taking one back never blocks; waiting is a poll() with no
//! lock held.

use super::{CmEvent, ConnParam, EventType, UdParam};
use crate::error::{Error, Result};
use softrdma_io::EventFd;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// An event as queued, before it is delivered (`deliver::deliver`).
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

#[derive(Debug)]
pub(crate) struct ChanInner {
    pub q: Mutex<VecDeque<Queued>>,
    fd: EventFd,
    /// Held while a count is taken: whoever holds it and sees the
    /// descriptor readable takes a count without blocking, so counts of
    /// events that left the queue can be taken back ([`ChanInner::uncount`]).
    reads: Mutex<()>,
}

impl ChanInner {
    pub fn new() -> io::Result<Arc<ChanInner>> {
        Ok(Arc::new(ChanInner {
            q: Mutex::new(VecDeque::new()),
            // Blocking by default, like the kernel's descriptor.
            fd: EventFd::semaphore()?,
            reads: Mutex::new(()),
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
        // It cannot overflow: the count is bounded by the queue length. A
        // raw system call: no cancellation point.
        let _ = softrdma_io::sys_write(self.fd.as_raw_fd(), &n.to_ne_bytes());
    }

    /// Takes one count: blocks while there is none, unless the descriptor
    /// is non-blocking (EAGAIN). A cancellation point, as the kernel
    /// descriptor's `read()` librdmacm blocks in: it waits in poll() with
    /// no lock held, and reads only a count it saw (never blocking), so
    /// that [`ChanInner::uncount`] can take counts back.
    pub fn take_count(&self) -> io::Result<()> {
        let fd = self.fd.as_raw_fd();
        loop {
            if self.try_take()? {
                return Ok(());
            }
            if softrdma_io::is_nonblocking(fd)? {
                return Err(io::Error::from_raw_os_error(libc::EAGAIN));
            }
            softrdma_io::wait_readable(fd, None)?;
        }
    }

    /// Takes one count if there is one now (never blocks).
    pub fn try_take(&self) -> io::Result<bool> {
        let _g = self.reads.lock().unwrap_or_else(|e| e.into_inner());
        let fd = self.fd.as_raw_fd();
        if !softrdma_io::readable_now(fd)? {
            return Ok(false);
        }
        // Readable, and no other reader while we hold `reads`: one count
        // (semaphore mode) without blocking.
        let mut v = [0u8; 8];
        match softrdma_io::sys_read(fd, &mut v) {
            Ok(8) => Ok(true),
            Ok(_) => Err(io::Error::from_raw_os_error(libc::EIO)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Takes back the counts of `n` events that left the queue (moved to
    /// another channel, or of an id destroyed), so that the descriptor is
    /// readable only while events wait, as the kernel's is.
    pub fn uncount(&self, n: usize) {
        for _ in 0..n {
            if !matches!(self.try_take(), Ok(true)) {
                break;
            }
        }
    }

    pub fn pop(&self) -> Option<Queued> {
        self.q.lock().unwrap_or_else(|e| e.into_inner()).pop_front()
    }

    /// Takes the queued events of `num` (requests counted against a
    /// listener included) out of the queue, with their counts
    /// (`rdma_migrate_id`, `rdma_destroy_id`).
    pub fn take_of(&self, num: u64) -> Vec<Queued> {
        let out = self.take_queued_of(num);
        self.uncount(out.len());
        out
    }

    fn take_queued_of(&self, num: u64) -> Vec<Queued> {
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
            self.wait_count()?;
            if let Some(ev) = self.take_counted() {
                return Ok(ev);
            }
        }
    }

    /// The blocking half of [`EventChannel::get_event`]: takes one count of
    /// the descriptor, waiting for it unless the descriptor is
    /// non-blocking (then `Error::Cm` with EAGAIN). It holds no lock while
    /// it waits and is a cancellation point, as librdmacm's `read()`: a
    /// `pthread_cancel` of the waiting thread unwinds it from here.
    pub fn wait_count(&self) -> Result<()> {
        self.0
            .take_count()
            .map_err(|e| Error::cm(e.raw_os_error().unwrap_or(libc::EIO), "rdma_get_cm_event"))
    }

    /// The other half: after [`EventChannel::wait_count`] took a count, the
    /// event it stands for — `None` when that event's id is gone (wait for
    /// the next one). Never blocks.
    pub fn take_counted(&self) -> Option<CmEvent> {
        let q = self.0.pop()?;
        super::deliver::deliver(&self.0, q)
    }

    /// The next event, waiting at most `timeout` (`Ok(None)` when none
    /// came). Meant for one reader per channel: with several, another may
    /// take the event this one was woken for, and it waits for the next.
    pub fn get_event_timeout(&self, timeout: Duration) -> Result<Option<CmEvent>> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let ready = softrdma_io::wait_readable(self.fd(), Some(left))
                .map_err(|e| Error::io("polling the event channel", e))?;
            if !ready {
                return Ok(None);
            }
            // Another reader may have taken the count meanwhile: then wait
            // again, for what is left of the time.
            let took = self.0.try_take().map_err(|e| {
                Error::cm(e.raw_os_error().unwrap_or(libc::EIO), "rdma_get_cm_event")
            })?;
            if !took {
                if left.is_zero() {
                    return Ok(None);
                }
                continue;
            }
            if let Some(q) = self.0.pop() {
                if let Some(ev) = super::deliver::deliver(&self.0, q) {
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
