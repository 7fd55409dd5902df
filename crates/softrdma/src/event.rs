//! Completion channels and asynchronous events: file descriptors a program
//! can wait on with poll/epoll, or block on.

use crate::error::{Error, Result};
use crate::sync::Mutex;
use softrdma_io::EventFd;
use softrdma_proto::{AsyncEvent, CqId};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// State shared between a channel handle and the device that signals it.
#[derive(Debug)]
pub(crate) struct ChannelShared {
    pub fd: EventFd,
    /// The device, told when a program thread is about to block here.
    pub dev: Weak<crate::engine::Shared>,
    /// CQs that got a notification and were not yet picked up.
    pub ready: Mutex<VecDeque<CqId>>,
}

impl ChannelShared {
    pub fn notify(&self, cq: CqId) {
        let mut q = self.ready.lock();
        if !q.contains(&cq) {
            q.push_back(cq);
        }
        drop(q);
        self.fd.signal();
    }
}

/// A completion channel (`ibv_comp_channel`): CQs created with it signal
/// its file descriptor when an armed notification fires
/// ([`CompletionQueue::req_notify`](crate::CompletionQueue::req_notify)).
/// The descriptor is readable while a notification is pending, so it can
/// be put in any poll/epoll/select loop or an async reactor.
#[derive(Clone, Debug)]
pub struct CompletionChannel {
    pub(crate) inner: Arc<ChannelShared>,
}

impl CompletionChannel {
    pub(crate) fn new(dev: Weak<crate::engine::Shared>) -> Result<CompletionChannel> {
        Ok(CompletionChannel {
            inner: Arc::new(ChannelShared {
                fd: EventFd::new().map_err(|e| Error::io("eventfd", e))?,
                dev,
                ready: Mutex::new(VecDeque::new()),
            }),
        })
    }

    /// Waits up to `timeout` (forever with `None`) for a notification and
    /// returns the CQ handle it is for (`ibv_get_cq_event`). `Ok(None)` on
    /// timeout.
    pub fn get_event(&self, timeout: Option<Duration>) -> Result<Option<CqId>> {
        take_blocking(
            timeout,
            || self.try_get_event(),
            |left| {
                self.about_to_block();
                self.wait(left)
            },
        )
    }

    /// Tells the device a program thread is about to block on this
    /// channel: the progress thread takes over at once (what the thread's
    /// polls left for its next call leaves now).
    pub fn about_to_block(&self) {
        if let Some(dev) = self.inner.dev.upgrade() {
            if !dev.forked_away() {
                dev.app_idle();
            }
        }
    }

    /// Waits up to `timeout` (forever with `None`) until a notification
    /// is pending, without taking it; returns whether one is. Holds no
    /// lock while it waits, and is a cancellation point (as the `read()`
    /// of libibverbs' `ibv_get_cq_event`): a `pthread_cancel` of the
    /// waiting thread unwinds it from here.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        self.inner
            .fd
            .wait(timeout)
            .map_err(|e| Error::io("waiting on the completion channel", e))
    }

    /// A pending notification, without waiting.
    pub fn try_get_event(&self) -> Option<CqId> {
        let mut q = self.inner.ready.lock();
        let cq = q.pop_front();
        if q.is_empty() {
            self.inner.fd.drain();
        }
        cq
    }
}

impl AsRawFd for CompletionChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.fd.as_raw_fd()
    }
}

/// The device's asynchronous event queue (`ibv_get_async_event`).
#[derive(Debug)]
pub(crate) struct AsyncQueue {
    pub fd: EventFd,
    pub q: Mutex<VecDeque<AsyncEvent>>,
}

impl AsyncQueue {
    pub fn new() -> io::Result<AsyncQueue> {
        Ok(AsyncQueue {
            fd: EventFd::new()?,
            q: Mutex::new(VecDeque::new()),
        })
    }
    pub fn push(&self, e: AsyncEvent) {
        let mut q = self.q.lock();
        // Bounded: a program that never reads events keeps the newest ones.
        if q.len() >= 4096 {
            q.pop_front();
        }
        q.push_back(e);
        drop(q);
        self.fd.signal();
    }
    pub fn pop(&self) -> Option<AsyncEvent> {
        let mut q = self.q.lock();
        let e = q.pop_front();
        if q.is_empty() {
            self.fd.drain();
        }
        e
    }
}

/// What `try_take` gives, trying again after each `block(time left)`
/// (`None`: no limit; what it returns is not needed) until `timeout`
/// passes (then `Ok(None)`); an error
/// of `block` ends the wait. The loop of every blocking "get" call.
pub(crate) fn take_blocking<T>(
    timeout: Option<Duration>,
    mut try_take: impl FnMut() -> Option<T>,
    mut block: impl FnMut(Option<Duration>) -> Result<bool>,
) -> Result<Option<T>> {
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    loop {
        if let Some(x) = try_take() {
            return Ok(Some(x));
        }
        let left = match deadline {
            Some(d) => match d.checked_duration_since(std::time::Instant::now()) {
                Some(l) => Some(l),
                None => return Ok(None),
            },
            None => None,
        };
        block(left)?;
    }
}
