//! Thread domains and parent domains: `ibv_alloc_td`, `ibv_dealloc_td`,
//! `ibv_alloc_parent_domain` (verbs.h reaches them through the
//! `verbs_context`; `ibv_dealloc_pd` frees a parent domain).
//!
//! A parent domain is a PD ([`Pd`] with [`Pd::parent`] set): the same
//! protection domain as the one it extends, usable wherever a PD is, plus
//! an optional thread domain and optional allocators. softrdma's objects
//! are safe for concurrent use whatever the thread domain says, so a TD
//! changes no locking; it is checked (same context), held by the parent
//! domains that name it (`ibv_dealloc_td` is EBUSY meanwhile) and freed.
//!
//! The allocators are used as a provider uses them, for the per-object
//! memory the library allocates: the structure the program's pointer
//! designates — the `ibv_qp_ex` of a QP, the `ibv_cq_ex` of a CQ, the
//! `ibv_srq` of an SRQ created in the parent domain — with the small
//! header the library keeps in front of it, comes from `alloc` (64-byte
//! aligned, resource types [`RES_TYPE_QP`], [`RES_TYPE_CQ`],
//! [`RES_TYPE_SRQ`]) and goes back to `free` when the object is
//! destroyed. `IBV_ALLOCATOR_USE_DEFAULT` makes it ours; NULL fails the
//! creation with ENOMEM. (The queues themselves live in softrdma's
//! engine, which has no memory the program could provide.)

use crate::context::{context, Ctx};
use crate::ffi::*;
use crate::handle::{Castable, Kind, Obj, Placement, Use};
use crate::pd::Pd;
use crate::util::{guard_errno, guard_ptr, zeroed};
use std::ffi::{c_int, c_void};

/// `resource_type` of a QP's structure: no `rdma_driver_id` (the upper 32
/// bits, 0) and softrdma's code 1.
pub const RES_TYPE_QP: u64 = 1;
/// `resource_type` of a CQ's structure.
pub const RES_TYPE_CQ: u64 = 2;
/// `resource_type` of an SRQ's structure.
pub const RES_TYPE_SRQ: u64 = 3;

/// A thread domain.
pub struct Td {
    ctx: Ctx,
}

impl Castable for Td {
    type Repr = ibv_td;
    type Api = ibv_td;
    const KIND: Kind = Kind::Td;
    const MAGIC: u64 = 0x5352_5444_0000_000c;
    fn release_uses(&self) {}
}

/// What makes a PD a parent domain.
pub struct Parent {
    /// The PD it extends (EBUSY for its `ibv_dealloc_pd` meanwhile).
    _base: Use<Pd>,
    /// Its thread domain (EBUSY for its `ibv_dealloc_td` meanwhile).
    _td: Option<Use<Td>>,
    /// `alloc`/`free`, when given.
    allocators: Option<(PdAllocFn, PdFreeFn)>,
    /// `pd_context`, when given.
    pd_context: *mut c_void,
}

impl Parent {
    /// The parent domain's destroy: its PD and thread domain are free
    /// to go.
    pub fn release_uses(&self) {
        self._base.release();
        if let Some(t) = &self._td {
            t.release();
        }
    }
}

// SAFETY: `pd_context` is the program's pointer, only passed back to its
// own allocators.
unsafe impl Send for Parent {}
// SAFETY: as above.
unsafe impl Sync for Parent {}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn alloc_td(
    ctx: *mut ibv_context,
    attr: *mut ibv_td_init_attr,
) -> *mut ibv_td {
    guard_ptr(|| {
        let c = context(ctx).ok_or(libc::EINVAL)?;
        // SAFETY: NULL or the program's attribute structure.
        if attr.is_null() || unsafe { (*attr).comp_mask } != 0 {
            return Err(libc::EINVAL);
        }
        let mut t: ibv_td = zeroed();
        t.context = c.api();
        Ok(Obj::new(t, Td { ctx: c }).publish())
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn dealloc_td(td: *mut ibv_td) -> c_int {
    // EBUSY while parent domains use it.
    guard_errno(|| Obj::<Td>::take(td).map_or_else(|e| e, |_| 0))
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn alloc_parent_domain(
    ctx: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> *mut ibv_pd {
    guard_ptr(|| {
        let c = context(ctx).ok_or(libc::EINVAL)?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the program's attribute structure.
        let a = unsafe { &*attr };
        let known = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
        if a.comp_mask & !known != 0 {
            return Err(libc::EINVAL);
        }
        let base = Obj::<Pd>::get_use(a.pd).ok_or(libc::EINVAL)?;
        // A parent domain extends a PD of this context, not another parent
        // domain.
        if base.parent.is_some() || base.ctx.ucontext != c.ucontext {
            return Err(libc::EINVAL);
        }
        let td = if a.td.is_null() {
            None
        } else {
            let t = Obj::<Td>::get_use(a.td).ok_or(libc::EINVAL)?;
            if t.ctx.ucontext != c.ucontext {
                return Err(libc::EINVAL);
            }
            Some(t)
        };
        let allocators = if a.comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS != 0 {
            match (a.alloc, a.free) {
                (Some(al), Some(fr)) => Some((al, fr)),
                _ => return Err(libc::EINVAL),
            }
        } else {
            None
        };
        let pd_context = if a.comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT != 0 {
            a.pd_context
        } else {
            std::ptr::null_mut()
        };
        let pd = base.pd.clone();
        // SAFETY: the base PD's own structure.
        let handle = unsafe { (*base.repr()).handle };
        let parent = Parent {
            _base: base,
            _td: td,
            allocators,
            pd_context,
        };
        Ok(crate::pd::publish(c, pd, handle, Some(parent)))
    })
}

/// Where an object of `resource_type` created with PD `pd` keeps its
/// structure: the program's allocator when `pd` is a parent domain with
/// allocators.
pub fn placement(pd: &Use<Pd>, resource_type: u64) -> Option<Placement> {
    let p = pd.parent.as_ref()?;
    let (alloc, free) = p.allocators?;
    Some(Placement {
        alloc,
        free,
        pd: pd.api(),
        pd_context: p.pd_context,
        resource_type,
        hold: Box::new(pd.another()),
    })
}
