//! `rdma_join_multicast`, `rdma_join_multicast_ex`, `rdma_leave_multicast`
//! over `softrdma::rdma_cm` (which joins, reports MULTICAST_JOIN and
//! attaches the id's QP when the event is taken, as librdmacm does), with
//! librdmacm's argument checks. The join's `context` comes back as the
//! events' `param.ud.private_data`.

use super::ffi::rdma_cm_id;
use super::ffi::rdma_cm_join_mc_attr_ex;
use super::id::{get, sockaddr_in};
use crate::util::guard_neg;
use std::ffi::{c_int, c_void};

/// `RDMA_CM_JOIN_MC_ATTR_ADDRESS`, `_JOIN_FLAGS`, `_RESERVED`.
const ATTR_ADDRESS: u32 = 1;
const ATTR_JOIN_FLAGS: u32 = 2;
const ATTR_RESERVED: u32 = 4;
/// `RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER`, `_RESERVED`.
const FLAG_SENDONLY_FULLMEMBER: u32 = 1;
const FLAG_RESERVED: u32 = 2;

fn join(id: *mut rdma_cm_id, addr: *const libc::sockaddr, flags: u32, ctx: *mut c_void) -> c_int {
    guard_neg(|| {
        let o = get(id)?;
        // SAFETY: the caller's address.
        let a = unsafe { sockaddr_in(addr) }.ok_or(libc::EINVAL)?;
        o.cm.join_multicast(a.ip(), flags == FLAG_SENDONLY_FULLMEMBER, ctx as u64)
            .map_err(|e| e.errno())
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_join_multicast`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn join_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
    context: *mut c_void,
) -> c_int {
    join(id, addr, 0, context)
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_join_multicast_ex`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn join_multicast_ex(
    id: *mut rdma_cm_id,
    attr: *mut rdma_cm_join_mc_attr_ex,
    context: *mut c_void,
) -> c_int {
    if attr.is_null() {
        crate::util::set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: the caller's attributes.
    let a = unsafe { &*attr };
    let err = if a.comp_mask >= ATTR_RESERVED {
        libc::EOPNOTSUPP
    } else if a.comp_mask & ATTR_ADDRESS == 0
        || a.comp_mask & ATTR_JOIN_FLAGS == 0
        || a.join_flags >= FLAG_RESERVED
    {
        libc::EINVAL
    } else {
        return join(id, a.addr, a.join_flags, context);
    };
    crate::util::set_errno(err);
    -1
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_leave_multicast`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn leave_multicast(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int {
    guard_neg(|| {
        let o = get(id)?;
        // SAFETY: the caller's address.
        let a = unsafe { sockaddr_in(addr) }.ok_or(libc::EINVAL)?;
        o.cm.leave_multicast(a.ip()).map_err(|e| e.errno())
    })
}
