//! What every entry point needs: errno, panics stopped at the boundary,
//! thread cancellation as rdma-core has it, C strings and extensible
//! output structures.
//!
//! Cancellation (`pthread_cancel`). In rdma-core the calls that block —
//! `ibv_get_cq_event`, `ibv_get_async_event`, `rdma_get_cm_event` and the
//! calls of a synchronous rdma_cm id that wait for its event — block in
//! `read()` on a descriptor, a cancellation point; no other verb is one.
//! Here:
//! - every entry point runs its work under [`guard`] (or [`guarded`]):
//!   cancellation disabled (`softrdma::NoCancel`: a write to a capture
//!   file does not act on a pending request) and Rust panics caught;
//! - the data path ([`guard_data`]: posts, polls, arming a CQ) skips the
//!   cancellation toggle — it costs as much as a short poll — and reaches
//!   no cancellation point: its system calls are raw ones (softrdma-io);
//! - a blocking call is `extern "C-unwind"`: it alternates guarded steps
//!   with a wait outside any guard, in softrdma-io's `wait_readable` or
//!   `read_blocking` (a cancellation point declared C-unwind), holding only
//!   `Arc`s whose destructors the forced unwind runs. A forced unwind must
//!   never meet `catch_unwind`: Rust would stop it, and glibc aborts the
//!   process ("FATAL: exception not rethrown").

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Sets the calling thread's `errno`.
pub fn set_errno(e: i32) {
    // SAFETY: __errno_location returns the calling thread's errno slot,
    // valid for the thread's lifetime.
    unsafe { *libc::__errno_location() = e };
}

/// The calling thread's `errno`.
pub fn errno() -> i32 {
    // SAFETY: as in `set_errno`.
    unsafe { *libc::__errno_location() }
}

/// Runs `f` with thread cancellation disabled, turning a panic into
/// `on_panic` with errno EIO: a bug in the library must never unwind into
/// C (undefined behaviour) or abort the program, and no verb but the
/// blocking ones is a cancellation point.
pub fn guard<R>(on_panic: R, f: impl FnOnce() -> R) -> R {
    let _nc = softrdma::NoCancel::new();
    guard_data(on_panic, f)
}

/// [`guard`] for the data path (posts, CQ polls, arming a CQ): panics
/// caught, cancellation left as it is — these reach no cancellation point
/// (raw system calls; a capture or log write disables cancellation
/// itself).
pub fn guard_data<R>(on_panic: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            set_errno(libc::EIO);
            on_panic
        }
    }
}

/// [`guard_data`] for functions that return an errno value, setting
/// errno to it too on failure (see [`guard_errno`]).
pub fn guard_data_errno(f: impl FnOnce() -> i32) -> i32 {
    errno_too(guard_data(libc::EIO, f))
}

/// An errno value returned (0 or positive), also stored in errno when it
/// is a failure: libibverbs' functions returning an errno value fail
/// after a system call on the command descriptor failed, which set errno
/// to the value they return, and programs print `%m` (UCX). Success
/// leaves errno alone, as the system calls do.
pub fn errno_too(e: i32) -> i32 {
    if e != 0 {
        set_errno(e);
    }
    e
}

/// A step of a blocking entry point: `f` under [`guard`], a panic giving
/// `Err(EIO)`.
pub fn guarded<T>(f: impl FnOnce() -> Result<T, i32>) -> Result<T, i32> {
    let _nc = softrdma::NoCancel::new();
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(Err(libc::EIO))
}

/// 0, or -1 with errno set: a blocking entry point's return.
pub fn neg(r: Result<(), i32>) -> std::ffi::c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// Like [`guard`] for functions that return an errno value (0 or positive),
/// setting errno to it too on failure ([`errno_too`]): a panic returns
/// EIO.
pub fn guard_errno(f: impl FnOnce() -> i32) -> i32 {
    errno_too(guard(libc::EIO, f))
}

/// Like [`guard`] for functions that return 0 or -1 with errno set.
pub fn guard_neg(f: impl FnOnce() -> Result<(), i32>) -> i32 {
    guard(-1, || match f() {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    })
}

/// Like [`guard`] for functions that return a pointer, NULL with errno set
/// on failure.
pub fn guard_ptr<T>(f: impl FnOnce() -> Result<*mut T, i32>) -> *mut T {
    guard(std::ptr::null_mut(), || match f() {
        Ok(p) => p,
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    })
}

/// C structures for which all-zero bytes are a valid value: plain data
/// (integers, raw pointers, `Option<extern fn>`, arrays and unions of
/// those), no references, no `NonNull`, no enums with invalid patterns.
///
/// # Safety
/// Implement only for types whose every field accepts all-zero bytes.
pub unsafe trait Zeroable: Sized {}

macro_rules! zeroable {
    ($($t:ty),* $(,)?) => {
        // SAFETY: each is a `repr(C)` structure of ffi.rs / rdmacm's ffi.rs
        // or libc made of integers, raw pointers, `Option<extern fn>` and
        // arrays/unions of those (checked against the C headers by
        // build.rs): all-zero is valid, as in C.
        $(unsafe impl Zeroable for $t {})*
    };
}

zeroable!(
    crate::ffi::ibv_ah,
    crate::ffi::ibv_cq_ex,
    crate::ffi::ibv_device,
    crate::ffi::ibv_device_attr,
    crate::ffi::ibv_device_attr_ex,
    crate::ffi::ibv_mr,
    crate::ffi::ibv_mw,
    crate::ffi::ibv_pd,
    crate::ffi::ibv_port_attr,
    crate::ffi::ibv_qp_ex,
    crate::ffi::ibv_qp_init_attr_ex,
    crate::ffi::ibv_srq,
    crate::ffi::ibv_srq_init_attr_ex,
    crate::ffi::ibv_td,
    crate::ffi::verbs_context,
    crate::rdmacm::ffi::rdma_cm_id,
    libc::addrinfo,
);

/// An all-zero C structure.
pub fn zeroed<T: Zeroable>() -> T {
    // SAFETY: `T: Zeroable` promises all-zero bytes are a valid `T`.
    unsafe { std::mem::zeroed() }
}

/// Copies `s` into a C char array, NUL-terminated and truncated to fit.
pub fn copy_cstr(dst: &mut [core::ffi::c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as core::ffi::c_char;
    }
    if let Some(d) = dst.get_mut(n) {
        *d = 0;
    }
}

/// Writes the first `len` bytes of `src` to `dst` (for extensible output
/// structures whose caller states its size).
///
/// # Safety
/// `dst` must be valid for `len` bytes of writes.
pub unsafe fn write_prefix<T>(dst: *mut T, src: &T, len: usize) {
    let n = len.min(std::mem::size_of::<T>());
    // SAFETY: `src` is a valid T (n ≤ its size) and the caller vouches for
    // `dst..dst+len`; the two cannot overlap (src is a Rust value).
    unsafe { std::ptr::copy_nonoverlapping((src as *const T).cast::<u8>(), dst.cast::<u8>(), n) };
}

/// [`write_prefix`], and zeros from the end of `T` to `len`: a caller's
/// structure of a newer rdma-core whose new members we do not know reads
/// 0 in them ("not supported").
///
/// # Safety
/// `dst..dst+len` must be writable memory of the caller.
pub unsafe fn write_prefix_zero_rest<T>(dst: *mut T, src: &T, len: usize) {
    // SAFETY: per the contract.
    unsafe { write_prefix(dst, src, len) };
    let size = std::mem::size_of::<T>();
    if len > size {
        // SAFETY: `dst+size..dst+len` is inside the caller's `len` bytes.
        unsafe { std::ptr::write_bytes(dst.cast::<u8>().add(size), 0, len - size) };
    }
}
