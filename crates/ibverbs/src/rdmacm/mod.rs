//! librdmacm in the same library as libibverbs: the 68 functions of
//! rdma-core 44's librdmacm.so.1 (symbol versions RDMACM_1.0 … 1.3,
//! `exports.rs`), over `softrdma::rdma_cm`, sharing this library's devices,
//! contexts, PDs, CQs and QPs.
//!
//! `librdmacm.so.1` is a second name (symlink) of this very file. The
//! dynamic loader recognises an object it has already mapped by its file
//! identity (device and inode), so a program that needs both libraries
//! maps one object, with one state, and its RDMACM_1.x references find
//! their versions here (the version script defines the nodes).
//!
//! - `ffi`: the structures of `<rdma/rdma_cma.h>`, checked at build time.
//! - `device`: the device provider over libibverbs' device list, one
//!   context and PD per device, `rdma_get_devices`.
//! - `event`: channels and events.
//! - `id`: ids and every call on them.
//! - `qp`: the QP/SRQ/endpoint helpers.
//! - `addrinfo`: `rdma_getaddrinfo`.
//! - `mcast`: multicast joins and leaves.
//! - rsockets are not implemented: their entry points exist (programs bind
//!   every import at load time) and fail with ENOSYS.

pub mod addrinfo;
pub mod device;
pub mod event;
#[allow(non_camel_case_types, non_snake_case, dead_code)]
pub mod ffi;
pub mod id;
pub mod mcast;
pub mod options;
pub mod qp;

use crate::util::set_errno;

/// Every rsocket function: not implemented. -1 (as `int`, `ssize_t` or
/// `off_t`) with errno ENOSYS.
///
/// # Safety
/// The C contract of `rsocket`, `rbind`, `rlisten`, `raccept` and others, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn rsocket_unsupported() -> isize {
    set_errno(libc::ENOSYS);
    -1
}
