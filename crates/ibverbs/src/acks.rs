//! rdma-core's rule for destroying an object that reported events: the
//! destroy returns only once the program acknowledged every event it was
//! handed for the object. `ibv_destroy_cq` waits until
//! `ibv_ack_cq_events` acknowledged the completion events `ibv_get_cq_event`
//! returned for it and `ibv_ack_async_event` its CQ_ERR events;
//! `ibv_destroy_qp` and `ibv_destroy_srq` wait for the acknowledgements of
//! their asynchronous events (rdma-core: the kernel's destroy answers with
//! the events it reported, and the library waits on the object's
//! `cond` until its `*_events_completed` counters reach them; the acks
//! signal it). An event not handed out yet is dropped with the object.
//!
//! The counters of acknowledgements are the C structure's own
//! (`comp_events_completed`, `async_events_completed`,
//! `events_completed`), which programs may read; [`EventAcks`] counts the
//! events handed out and wakes the waiting destroy. A program that
//! destroys before acknowledging blocks, as with rdma-core (the
//! documented contract). The wait is no cancellation point.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Condvar, Mutex};

/// The events handed out for one object (of one kind: completion or
/// asynchronous), and the wake-up of a destroy waiting for their
/// acknowledgements.
#[derive(Default)]
pub struct EventAcks {
    delivered: AtomicU32,
    lock: Mutex<()>,
    cv: Condvar,
}

impl EventAcks {
    /// One event handed to the program (counted while the context's
    /// object table is locked, the lock a destroy takes to stop
    /// deliveries).
    pub fn delivered(&self) {
        self.delivered.fetch_add(1, Ordering::SeqCst);
    }

    /// `n` events acknowledged: added to the object's counter `completed`,
    /// and a waiting destroy woken.
    pub fn ack(&self, completed: &AtomicU32, n: u32) {
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        completed.fetch_add(n, Ordering::SeqCst);
        self.cv.notify_all();
    }

    /// Waits until `completed` reached the events handed out (no more are
    /// handed out once the destroy took the object out of its context's
    /// table).
    pub fn wait(&self, completed: &AtomicU32) {
        let mut g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        while completed.load(Ordering::SeqCst) != self.delivered.load(Ordering::SeqCst) {
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}
