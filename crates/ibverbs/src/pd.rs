//! Protection domains (and parent domains, which are PDs: see `domain`).

use crate::context::{context, Ctx};
use crate::ffi::*;
use crate::handle::{Castable, Kind, Obj};
use crate::util::{guard_errno, guard_ptr, zeroed};
use softrdma::ProtectionDomain;
use std::ffi::c_int;

/// A protection domain.
pub struct Pd {
    pub pd: ProtectionDomain,
    pub ctx: Ctx,
    /// Set for a parent domain: the PD it extends, its thread domain and
    /// allocators.
    pub parent: Option<crate::domain::Parent>,
}

impl Castable for Pd {
    type Repr = ibv_pd;
    type Api = ibv_pd;
    const KIND: Kind = Kind::Pd;
    const MAGIC: u64 = 0x5352_5044_0000_0003;
    fn release_uses(&self) {
        if let Some(p) = &self.parent {
            p.release_uses();
        }
    }
}

/// A new PD object for `pd` in context `c` (also an imported or a parent
/// domain's), with the program-visible `handle`.
pub fn publish(
    c: Ctx,
    pd: ProtectionDomain,
    handle: u32,
    parent: Option<crate::domain::Parent>,
) -> *mut ibv_pd {
    let mut cp: ibv_pd = zeroed();
    cp.context = c.api();
    cp.handle = handle;
    Obj::new(cp, Pd { pd, ctx: c, parent }).publish()
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_alloc_pd`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    guard_ptr(|| {
        let c = context(ctx).ok_or(libc::EINVAL)?;
        let pd = c.dev.alloc_pd().map_err(|e| e.errno())?;
        let handle = pd.id().0;
        Ok(publish(c, pd, handle, None))
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_dealloc_pd`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn dealloc_pd(p: *mut ibv_pd) -> c_int {
    // EBUSY while regions, QPs, SRQs, address handles or parent domains
    // use it.
    guard_errno(|| Obj::<Pd>::take(p).map_or_else(|e| e, |_| 0))
}
