//! Memory regions: `ibv_reg_mr` (and its iova variants), `ibv_dereg_mr`.
//!
//! Deregistration returns only once softrdma will never touch the bytes
//! again (softrdma's memory rules): the program may free or unmap them
//! right after.

use crate::ffi::*;
use crate::handle::{Castable, Kind, Obj, Use};
use crate::pd::Pd;
use crate::util::{guard, guard_errno, guard_ptr, set_errno, zeroed};
use softrdma::{Access, MemoryRegion};
use std::ffi::{c_int, c_void};
use std::sync::Mutex;

/// A memory region.
pub struct Mr {
    /// Taken out and dropped by `ibv_dereg_mr` itself, whoever else still
    /// holds the object: deregistration is done when it returns.
    mr: Mutex<Option<MemoryRegion>>,
    _pd: Use<Pd>,
}

impl Mr {
    /// Deregisters the region now, leaving the object to its handle
    /// (`ibv_dereg_mr` through an imported handle, see `import`).
    pub fn deregister(&self) {
        drop(self.mr.lock().unwrap_or_else(|e| e.into_inner()).take());
    }
}

impl Castable for Mr {
    type Repr = ibv_mr;
    type Api = ibv_mr;
    const KIND: Kind = Kind::Mr;
    const MAGIC: u64 = 0x5352_4d52_0000_0004;
}

const ACCESS_KNOWN: c_int = 0xff;

unsafe fn register_mr(
    p: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> Result<*mut ibv_mr, i32> {
    let x = Obj::<Pd>::get_use(p).ok_or(libc::EINVAL)?;
    // Optional access bits (relaxed ordering, …) may be ignored by a device.
    let access = access & !IBV_ACCESS_OPTIONAL_RANGE;
    if access & !ACCESS_KNOWN != 0 {
        return Err(libc::EINVAL);
    }
    let a = Access(access as u32);
    if (a.contains(Access::REMOTE_WRITE) || a.contains(Access::REMOTE_ATOMIC))
        && !a.contains(Access::LOCAL_WRITE)
    {
        return Err(libc::EINVAL);
    }
    if access & ((1 << 5) | (1 << 6)) != 0 {
        // Zero-based addressing (remote addresses would be offsets) and
        // on-demand paging.
        return Err(libc::EOPNOTSUPP);
    }
    if addr.is_null() || iova != addr as u64 {
        // softrdma addresses registered memory by its pointer value.
        return Err(if addr.is_null() {
            libc::EINVAL
        } else {
            libc::EOPNOTSUPP
        });
    }
    if (addr as usize).checked_add(length).is_none() {
        return Err(libc::EINVAL);
    }
    let a = Access(access as u32 & (Access::ALL.0 | Access::MW_BIND.0));
    // SAFETY: the verbs contract: the program keeps addr..addr+length valid
    // until ibv_dereg_mr and lets the device read and write it meanwhile.
    let mr = unsafe { x.pd.register_mr(addr.cast(), length, a) }.map_err(|e| e.errno())?;
    let mut c: ibv_mr = zeroed();
    c.context = x.ctx.api();
    c.pd = x.api();
    c.addr = addr;
    c.length = length;
    c.handle = mr.lkey();
    c.lkey = mr.lkey();
    c.rkey = mr.rkey().0;
    let mr = Mutex::new(Some(mr));
    Ok(Obj::new(c, Mr { mr, _pd: x }).publish())
}

pub unsafe extern "C" fn reg_mr(
    p: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded.
    guard_ptr(|| unsafe { register_mr(p, addr, length, addr as u64, access) })
}

pub unsafe extern "C" fn reg_mr_iova(
    p: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded.
    guard_ptr(|| unsafe { register_mr(p, addr, length, iova, access) })
}

pub unsafe extern "C" fn reg_mr_iova2(
    p: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: u32,
) -> *mut ibv_mr {
    // SAFETY: forwarded.
    guard_ptr(|| unsafe { register_mr(p, addr, length, iova, access as c_int) })
}

pub unsafe extern "C" fn dereg_mr(m: *mut ibv_mr) -> c_int {
    if let Some(r) = crate::import::dereg_imported(m) {
        return r;
    }
    guard_errno(|| match Obj::<Mr>::take(m) {
        Ok(o) => {
            drop(o.mr.lock().unwrap_or_else(|e| e.into_inner()).take());
            0
        }
        Err(e) => e,
    })
}

pub unsafe extern "C" fn rereg_mr(
    m: *mut ibv_mr,
    flags: c_int,
    _pd: *mut ibv_pd,
    _addr: *mut c_void,
    _length: usize,
    _access: c_int,
) -> c_int {
    guard(-1, || {
        if Obj::<Mr>::get(m).is_none() || flags & !7 != 0 {
            set_errno(libc::EINVAL);
            return -1; // IBV_REREG_MR_ERR_INPUT
        }
        if flags == 0 {
            return 0;
        }
        set_errno(libc::EOPNOTSUPP);
        -1 // IBV_REREG_MR_ERR_INPUT: the old region stays valid
    })
}
