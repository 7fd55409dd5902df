//! `fork` in a process that uses softrdma, as with rdma-core: the child
//! cannot use what its parent opened (the devices' threads do not exist
//! in it, their sockets are the parent's), but it may open devices of its
//! own, and it must never deadlock on a lock another thread of the parent
//! held at the moment of the fork.
//!
//! - Every device records the process's fork generation when it opens
//!   (`softrdma_io::fork_generation`); in a child, `Device::shared` refuses
//!   a device of an older one (a panic the C library turns into EIO)
//!   before touching any of its locks, and destroys, closes and exit
//!   handlers leave such a device alone (nothing of the parent's is sent
//!   or torn down from the child).
//! - The process-wide locks a child needs to open and use devices of its
//!   own — rdma_cm's state, the list of open devices, the list of capture
//!   files — are taken by the forking thread before the fork (`prepare`)
//!   and released after it in both processes, so the child finds them
//!   free and what they guard whole. rdma_cm's state is taken first: it is
//!   the outermost lock (held while the others are taken); the others are
//!   leaves. All three are std locks, whose release in the child is a
//!   plain atomic store.
//!
//! The C library adds its own process-wide locks the same way
//! (`softrdma-ibverbs`: its handle registry and device lists).

use std::any::Any;
use std::cell::RefCell;

thread_local! {
    /// The locks `prepare` took, held by the forking thread until the
    /// parent and child handlers drop them.
    static HELD: RefCell<Vec<Box<dyn Any>>> = const { RefCell::new(Vec::new()) };
}

extern "C" fn prepare() {
    let state = crate::rdma_cm::state::lock_for_fork();
    let devices = crate::device::open_list();
    let captures = crate::pcap::open_list();
    HELD.with(|h| {
        let mut h = h.borrow_mut();
        h.push(Box::new(state));
        h.push(Box::new(devices));
        h.push(Box::new(captures));
    });
}

extern "C" fn release() {
    // Innermost first.
    HELD.with(|h| {
        let mut h = h.borrow_mut();
        while h.pop().is_some() {}
    });
}

/// Starts watching forks (once): the fork counter, then the handlers above.
pub(crate) fn watch() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        softrdma_io::at_fork(Some(prepare), Some(release), Some(release));
    });
}
