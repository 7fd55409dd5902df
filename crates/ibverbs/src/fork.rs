//! `fork` in a program using the C library: the process-wide locks of
//! this crate that a child needs to open and use devices of its own — the
//! handle registry, the device lists, rdma_cm's id map, the XRC domains
//! shared by file — are taken by the forking thread before the fork and
//! released after it in both processes (softrdma does the same for its
//! own: see `softrdma::Device::forked_away` and its `fork` module). They
//! are leaves (no other lock is taken while one is held), so the order in
//! which they are taken cannot deadlock. What a child may not do — use its
//! parent's objects — fails with EIO.

use std::any::Any;
use std::cell::RefCell;

thread_local! {
    /// The locks `prepare` took, held by the forking thread.
    static HELD: RefCell<Vec<Box<dyn Any>>> = const { RefCell::new(Vec::new()) };
}

extern "C" fn prepare() {
    let live = crate::handle::live();
    let lists = crate::device::lists_for_fork();
    let cm_lists = crate::rdmacm::device::lists_for_fork();
    let ids = crate::rdmacm::id::ids_for_fork();
    let xrcds = crate::xrc::shared();
    HELD.with(|h| {
        let mut h = h.borrow_mut();
        h.push(Box::new(live));
        h.push(Box::new(lists));
        h.push(Box::new(cm_lists));
        h.push(Box::new(ids));
        h.push(Box::new(xrcds));
    });
}

extern "C" fn release() {
    HELD.with(|h| {
        let mut h = h.borrow_mut();
        while h.pop().is_some() {}
    });
}

/// Registers the handlers (once).
pub fn watch() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        softrdma::at_fork(Some(prepare), Some(release), Some(release));
    });
}
