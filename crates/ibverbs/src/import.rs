//! Sharing a device context: `ibv_import_device`, `ibv_import_pd`,
//! `ibv_unimport_pd`, `ibv_import_mr`, `ibv_unimport_mr`.
//!
//! With a kernel device, a context is a file (`cmd_fd`); a `dup` of it
//! opens a second `ibv_context` on the same device context, and the PDs
//! and MRs of one are found in the other by their handles. Here a
//! context's `cmd_fd` is a memfd whose inode names the device context
//! (`Context::ucontext`): importing a descriptor finds the context by
//! that inode, and the new context shares the device, the object tables
//! (asynchronous events of objects created in either) and the objects.
//! An imported PD is the same protection domain as the original; an
//! imported MR is the same region (its `addr` is NULL, as rdma-core's).
//!
//! `ibv_dealloc_pd` of an imported PD releases that handle; the PD goes
//! away with the last handle (the kernel destroys it at once for every
//! handle). `ibv_dereg_mr` of an imported MR deregisters the region, as
//! the kernel does; the original handle then only frees itself (0, where
//! the kernel says EINVAL and rdma-core leaks the handle).
//! `ibv_unimport_*` frees the handle only.
//!
//! The device context lives in the process that opened it (softrdma's
//! engine is in that process): a command descriptor passed to another
//! process — or inherited by a child after `fork` — cannot be imported
//! there (EOPNOTSUPP); a descriptor that is
//! no softrdma context is EINVAL, as rdma-core says of a file that is no
//! uverbs device.

use crate::context::{context, file_id, new_context, Context, CMD_FILE_PREFIX};
use crate::ffi::*;
use crate::handle::{Castable, Kind, Obj, Use};
use crate::mr::Mr;
use crate::pd::Pd;
use crate::util::{guard, guard_ptr, zeroed};
use std::ffi::c_int;
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
use std::sync::Arc;

/// An MR imported by handle: the original region, seen from another PD
/// handle of its device context.
pub struct ImportedMr {
    orig: Arc<Obj<Mr>>,
    _pd: Use<Pd>,
}

impl Castable for ImportedMr {
    type Repr = ibv_mr;
    type Api = ibv_mr;
    const KIND: Kind = Kind::ImportedMr;
    const MAGIC: u64 = 0x5352_494d_5200_000d;
    fn release_uses(&self) {
        self._pd.release();
    }
}

/// Whether descriptor `fd` is a softrdma command file (of any process).
fn is_softrdma_cmd_file(fd: c_int) -> bool {
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .map(|t| {
            t.to_string_lossy()
                .starts_with(&format!("/memfd:{CMD_FILE_PREFIX}"))
        })
        .unwrap_or(false)
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_import_device`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn import_device(cmd_fd: c_int) -> *mut ibv_context {
    guard_ptr(|| {
        let id = file_id(cmd_fd)?;
        let me = std::process::id() as libc::pid_t;
        let Some(orig) = Obj::<Context>::find(|c| c.ucontext == id && c.pid == me) else {
            return Err(if is_softrdma_cmd_file(cmd_fd) {
                libc::EOPNOTSUPP
            } else {
                libc::EINVAL
            });
        };
        let entry = orig.entry();
        let dev = entry.acquire_at(None, None)?;
        // SAFETY: the program hands the descriptor over (the context
        // closes it); on failure it is handed back unclosed below.
        let cmd = unsafe { OwnedFd::from_raw_fd(cmd_fd) };
        new_context(entry, dev, cmd, id, orig.objs.clone()).map_err(|(e, cmd)| {
            let _ = cmd.into_raw_fd();
            e
        })
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_import_pd`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn import_pd(ctx: *mut ibv_context, pd_handle: u32) -> *mut ibv_pd {
    guard_ptr(|| {
        let c = context(ctx).ok_or(libc::EINVAL)?;
        // SAFETY (the predicate): reads the handle of a live PD's own
        // structure.
        let orig = Obj::<Pd>::find(|p| {
            p.parent.is_none()
                && p.ctx.ucontext == c.ucontext
                && unsafe { (*p.repr()).handle } == pd_handle
        })
        .ok_or(libc::EINVAL)?;
        Ok(crate::pd::publish(c, orig.pd.clone(), pd_handle, None))
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_unimport_pd`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn unimport_pd(pd: *mut ibv_pd) {
    guard((), || drop(Obj::<Pd>::take_forced(pd)))
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_import_mr`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn import_mr(pd: *mut ibv_pd, mr_handle: u32) -> *mut ibv_mr {
    guard_ptr(|| {
        let x = Obj::<Pd>::get_use(pd).ok_or(libc::EINVAL)?;
        let uc = x.ctx.ucontext;
        // SAFETY (the predicate): reads the handle of a live MR's own
        // structure. The MR's PD is checked after, outside the registry's
        // lock.
        let cands = Obj::<Mr>::find_all(|m| unsafe { (*m.repr()).handle } == mr_handle);
        let orig = cands
            .into_iter()
            .find(|m| {
                // SAFETY: the live MR's own structure.
                let p = unsafe { (*m.repr()).pd };
                Obj::<Pd>::get(p).is_some_and(|p| p.ctx.ucontext == uc)
            })
            .ok_or(libc::EINVAL)?;
        // SAFETY: the live MR's own structure.
        let o = unsafe { &*orig.repr() };
        let mut c: ibv_mr = zeroed();
        c.context = x.ctx.api();
        c.pd = pd;
        c.addr = std::ptr::null_mut();
        c.length = o.length;
        c.handle = o.handle;
        c.lkey = o.lkey;
        c.rkey = o.rkey;
        Ok(Obj::new(c, ImportedMr { orig, _pd: x }).publish())
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_unimport_mr`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn unimport_mr(mr: *mut ibv_mr) {
    guard((), || drop(Obj::<ImportedMr>::take_forced(mr)))
}

/// `ibv_dereg_mr` of an imported MR: deregisters the region (whoever
/// registered it) and frees this handle; the original handle stays valid
/// memory for the program, and its own `ibv_dereg_mr` frees it. `None`
/// when `m` is no imported MR.
pub fn dereg_imported(m: *mut ibv_mr) -> Option<c_int> {
    let x = Obj::<ImportedMr>::take_forced(m).ok()?;
    Some(x.orig.deregister())
}
