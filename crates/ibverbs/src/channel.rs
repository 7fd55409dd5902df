//! Completion channels: `ibv_create_comp_channel`, `ibv_get_cq_event`.
//!
//! `channel->fd` is an epoll descriptor watching softrdma's eventfd:
//! readable while an event is pending, pollable like the kernel's, with an
//! O_NONBLOCK flag of its own that `ibv_get_cq_event` honours (EAGAIN
//! instead of blocking).

use crate::context::{context, Ctx};
use crate::cq::Cq;
use crate::ffi::*;
use crate::handle::{Castable, Kind, Obj};
use crate::util::{guard_data, guard_errno, guard_ptr, guarded, neg};
use softrdma::{CompletionChannel, FdWatch};
use std::ffi::{c_int, c_void};
use std::os::fd::AsRawFd;

/// A completion channel.
pub struct Channel {
    pub ch: CompletionChannel,
    ep: FdWatch,
    pub ctx: Ctx,
}

impl Castable for Channel {
    fn release_uses(&self) {}
    type Repr = ibv_comp_channel;
    type Api = ibv_comp_channel;
    const KIND: Kind = Kind::Channel;
    const MAGIC: u64 = 0x5352_4348_0000_0005;
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_create_comp_channel`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel {
    guard_ptr(|| {
        let c = context(ctx).ok_or(libc::EINVAL)?;
        let ch = c.dev.create_comp_channel().map_err(|e| e.errno())?;
        let ep = FdWatch::new(ch.as_raw_fd()).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        let cc = ibv_comp_channel {
            context: c.api(),
            fd: ep.as_raw_fd(),
            refcnt: 0,
        };
        Ok(Obj::new(cc, Channel { ch, ep, ctx: c }).publish())
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_destroy_comp_channel`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn destroy_comp_channel(p: *mut ibv_comp_channel) -> c_int {
    // EBUSY while CQs use it.
    guard_errno(|| Obj::<Channel>::take(p).map_or_else(|e| e, |_| 0))
}

/// `ibv_get_cq_event`: blocks (unless the descriptor is non-blocking)
/// until a CQ of the channel has a notification. A cancellation point, as
/// libibverbs' `read()` on the channel: see `util`.
///
/// # Safety
/// The C contract of `ibv_get_cq_event`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C-unwind" fn get_cq_event(
    p: *mut ibv_comp_channel,
    cq_out: *mut *mut ibv_cq,
    ctx_out: *mut *mut c_void,
) -> c_int {
    // Held across the wait; a forced unwind drops it.
    let x = match guarded(|| {
        let x = Obj::<Channel>::get(p).ok_or(libc::EINVAL)?;
        if cq_out.is_null() || ctx_out.is_null() {
            return Err(libc::EINVAL);
        }
        Ok(x)
    }) {
        Ok(x) => x,
        Err(e) => return neg(Err(e)),
    };
    loop {
        match guarded(|| take_cq_event(&x, cq_out, ctx_out)) {
            Ok(true) => return 0,
            Ok(false) => {}
            Err(e) => return neg(Err(e)),
        }
        // Outside any guard: the cancellation point.
        if let Err(e) = x.ch.wait(None) {
            return neg(Err(e.errno()));
        }
    }
}

/// A pending notification of the channel, written out: `Ok(true)`; none
/// and the thread may block: `Ok(false)` (the device told it is about to
/// block); none on a non-blocking descriptor: EAGAIN.
fn take_cq_event(
    x: &Obj<Channel>,
    cq_out: *mut *mut ibv_cq,
    ctx_out: *mut *mut c_void,
) -> Result<bool, i32> {
    while let Some(id) = x.ch.try_get_event() {
        // Counted as handed out under the table's lock, which a destroy
        // takes to stop deliveries (`acks.rs`).
        let found = {
            let o = x.ctx.objs.lock().unwrap_or_else(|e| e.into_inner());
            let q = o.cqs.get(&id.0).and_then(|w| w.upgrade());
            if let Some(q) = &q {
                q.comp_acks.delivered();
            }
            q
        };
        let Some(q) = found else {
            continue; // the CQ was destroyed meanwhile
        };
        // SAFETY: valid output pointers (checked non-NULL); the CQ's
        // `cq_context` is ours to read.
        unsafe {
            *cq_out = q.api();
            *ctx_out = (*q.repr()).cq_context;
        }
        return Ok(true);
    }
    if x.ep.is_nonblocking() {
        return Err(libc::EAGAIN);
    }
    x.ch.about_to_block();
    Ok(false)
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_ack_cq_events`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn ack_cq_events(cq: *mut ibv_cq, n: u32) {
    guard_data((), || {
        if let Some(q) = Obj::<Cq>::get(cq) {
            // SAFETY: a u32 of the CQ's C structure; the program only reads it.
            let c = unsafe { q.counter(|r| std::ptr::addr_of_mut!((*r).comp_events_completed)) };
            q.comp_acks.ack(c, n);
        }
    })
}
