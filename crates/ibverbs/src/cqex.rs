//! The extended CQ polling API (`ibv_cq_ex`: `ibv_start_poll`,
//! `ibv_next_poll`, `ibv_end_poll`, `ibv_wc_read_*`).
//!
//! Completions are taken one at a time from the same queue `ibv_poll_cq`
//! uses (with the same inline progress), so the two APIs can be mixed.

use crate::cq::{cq_ex, Cq};
use crate::ffi::*;
use crate::util::guard_data;
use softrdma::{Wc, WcFlags};
use std::ffi::{c_int, c_uint};

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    guard_data(libc::EIO, || {
        // SAFETY: the program's CQ, through its own function pointer.
        let Some(q) = (unsafe { cq_ex(cq) }) else {
            return libc::EINVAL;
        };
        // SAFETY: NULL or a valid attribute structure.
        if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
            return libc::EINVAL;
        }
        q.poll_one()
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: the program's CQ, through its own function pointer.
    guard_data(libc::EIO, || match unsafe { cq_ex(cq) } {
        Some(q) => q.poll_one(),
        None => libc::EINVAL,
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn end_poll(_cq: *mut ibv_cq_ex) {}

/// `f` of the completion being read (the default without one).
fn read<R: Default>(q: Option<&crate::handle::Obj<Cq>>, f: impl FnOnce(&Wc) -> R) -> R {
    guard_data(R::default(), || match q {
        Some(q) => f(&q.current()),
        None => R::default(),
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn read_opcode(cq: *mut ibv_cq_ex) -> ibv_wc_opcode {
    // SAFETY: the program's CQ, through its own `read_*` pointer.
    read(unsafe { cq_ex(cq) }, |w| w.opcode as c_int)
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn read_vendor_err(_cq: *mut ibv_cq_ex) -> u32 {
    0
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: the program's CQ, through its own `read_*` pointer.
    read(unsafe { cq_ex(cq) }, |w| w.byte_len)
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: the program's CQ, through its own `read_*` pointer.
    read(unsafe { cq_ex(cq) }, |w| {
        if w.wc_flags.contains(WcFlags::WITH_IMM) {
            w.imm_or_inv.to_be()
        } else {
            w.imm_or_inv
        }
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: the program's CQ, through its own `read_*` pointer.
    read(unsafe { cq_ex(cq) }, |w| w.qp_num.value())
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn read_src_qp(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: the program's CQ, through its own `read_*` pointer.
    read(unsafe { cq_ex(cq) }, |w| w.src_qp.value())
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn read_wc_flags(cq: *mut ibv_cq_ex) -> c_uint {
    // SAFETY: the program's CQ, through its own `read_*` pointer.
    read(unsafe { cq_ex(cq) }, |w| w.wc_flags.0)
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn read_slid(_cq: *mut ibv_cq_ex) -> u32 {
    0
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn read_sl(cq: *mut ibv_cq_ex) -> u8 {
    // SAFETY: the program's CQ, through its own function pointer.
    guard_data(0, || match unsafe { cq_ex(cq) } {
        Some(q) if q.current().wc_flags.contains(WcFlags::GRH) => q.grh_sl,
        _ => 0,
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn read_dlid_path_bits(_cq: *mut ibv_cq_ex) -> u8 {
    0
}

/// `ibv_wc_read_completion_ts`: the device clock when the completion was
/// generated, in cycles of `hca_core_clock` (1 GHz: nanoseconds since the
/// device opened).
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn read_completion_ts(cq: *mut ibv_cq_ex) -> u64 {
    // SAFETY: the program's CQ, through its own function pointer.
    guard_data(0, || (unsafe { cq_ex(cq) }).map_or(0, |q| q.current_ts()))
}

/// `ibv_wc_read_completion_wallclock_ns`: the same instant on the wall
/// clock (ns since the epoch, CLOCK_REALTIME).
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn read_completion_wallclock_ns(cq: *mut ibv_cq_ex) -> u64 {
    guard_data(0, || {
        // SAFETY: the program's CQ, through its own function pointer.
        let Some(q) = (unsafe { cq_ex(cq) }) else {
            return 0;
        };
        let ago = q.ctx.dev.clock_ns().saturating_sub(q.current_ts());
        crate::query::realtime_ns().saturating_sub(ago)
    })
}
