//! Protection domains.

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
}

impl Castable for Pd {
    type Repr = ibv_pd;
    type Api = ibv_pd;
    const KIND: Kind = Kind::Pd;
    const MAGIC: u64 = 0x5352_5044_0000_0003;
}

pub unsafe extern "C" fn alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    guard_ptr(|| {
        let c = context(ctx).ok_or(libc::EINVAL)?;
        let pd = c.dev.alloc_pd().map_err(|e| e.errno())?;
        let mut cp: ibv_pd = zeroed();
        cp.context = c.api();
        cp.handle = pd.id().0;
        Ok(Obj::new(cp, Pd { pd, ctx: c }).publish())
    })
}

pub unsafe extern "C" fn dealloc_pd(p: *mut ibv_pd) -> c_int {
    // EBUSY while regions, QPs, SRQs or address handles use it.
    guard_errno(|| Obj::<Pd>::take(p).map_or_else(|e| e, |_| 0))
}
