//! Memory regions: `ibv_reg_mr` (and its iova variants, on-demand paging,
//! implicit regions), `ibv_rereg_mr`, `ibv_dereg_mr`, `ibv_advise_mr`.
//!
//! Deregistration returns only once softrdma will never touch the bytes
//! again (softrdma's memory rules): the program may free or unmap them
//! right after. A region with memory windows bound to it cannot be
//! deregistered (EINVAL, as rxe: IBA 10.6.7.2.6).

use crate::ffi::*;
use crate::handle::{Castable, Kind, Obj, Use};
use crate::pd::Pd;
use crate::util::{guard, guard_errno, guard_ptr, set_errno, zeroed};
use softrdma::{Access, Advice, MemoryRegion, Sge};
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};

/// A memory region.
pub struct Mr {
    /// Taken out and dropped by `ibv_dereg_mr` itself, whoever else still
    /// holds the object: deregistration is done when it returns.
    mr: Mutex<Option<MemoryRegion>>,
    /// The protection domain (changes with `ibv_rereg_mr`).
    pd: Mutex<Use<Pd>>,
}

impl Mr {
    /// Deregisters the region now, leaving the object to its handle
    /// (`ibv_dereg_mr` itself, and through an imported handle, see
    /// `import`). 0 (also when it was deregistered already, through an
    /// imported handle), or the errno: EINVAL when windows are bound to it
    /// (it stays usable; rxe: EINVAL).
    pub fn deregister(&self) -> c_int {
        let mut slot = self.mr.lock().unwrap_or_else(|e| e.into_inner());
        let Some(mr) = slot.take() else {
            return 0;
        };
        match mr.deregister() {
            Ok(()) => 0,
            Err(back) => {
                let (mr, e) = *back;
                *slot = Some(mr);
                e.errno()
            }
        }
    }
}

impl Castable for Mr {
    type Repr = ibv_mr;
    type Api = ibv_mr;
    const KIND: Kind = Kind::Mr;
    const MAGIC: u64 = 0x5352_4d52_0000_0004;
    fn release_uses(&self) {
        self.pd.lock().unwrap_or_else(|e| e.into_inner()).release();
    }
}

/// The access bits `ibv_reg_mr` takes: the rights, MW_BIND, on-demand
/// paging (with its HUGETLB hint) and the FLUSH rights (rdma-core 47+);
/// IBV_ACCESS_OPTIONAL_RANGE bits may be ignored, as libibverbs allows.
const ACCESS_KNOWN: c_int = 0x3ff;

/// The program's access flags as the core's, or the errno that refuses
/// them (EINVAL as the kernel's `ib_check_mr_access`).
fn check_access(access: c_int) -> Result<Access, i32> {
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
    if access & IBV_ACCESS_ZERO_BASED != 0 {
        // Zero-based addressing is for memory windows; a region addressed
        // from 0 is registered with ibv_reg_mr_iova(…, iova 0, …).
        return Err(libc::EOPNOTSUPP);
    }
    Ok(a)
}

/// `ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND | …)`.
fn is_implicit(addr: *mut c_void, length: usize, access: c_int) -> bool {
    addr.is_null() && length == usize::MAX && access & IBV_ACCESS_ON_DEMAND != 0
}

unsafe fn register_mr(
    p: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> Result<*mut ibv_mr, i32> {
    let x = Obj::<Pd>::get_use(p).ok_or(libc::EINVAL)?;
    let a = check_access(access)?;
    let mr = if is_implicit(addr, length, access) {
        if iova != 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: the program asked for the whole address space to be
        // reachable (within `access`), through the kernel.
        unsafe { x.pd.register_implicit_odp(a) }.map_err(|e| e.errno())?
    } else {
        if addr.is_null() || (addr as usize).checked_add(length).is_none() {
            return Err(libc::EINVAL);
        }
        if iova.checked_add(length as u64).is_none() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the verbs contract: the program keeps addr..addr+length
        // valid until ibv_dereg_mr (with on-demand paging: mapped or not,
        // the device copes) and lets the device read and write it meanwhile.
        unsafe { x.pd.register_mr_iova(addr.cast(), length, iova, a) }.map_err(|e| e.errno())?
    };
    let mut c: ibv_mr = zeroed();
    c.context = x.ctx.api();
    c.pd = x.api();
    c.addr = addr;
    c.length = length;
    c.handle = mr.lkey();
    c.lkey = mr.lkey();
    c.rkey = mr.rkey().0;
    let mr = Mutex::new(Some(mr));
    Ok(Obj::new(
        c,
        Mr {
            mr,
            pd: Mutex::new(x),
        },
    )
    .publish())
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_reg_mr`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn reg_mr(
    p: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded.
    guard_ptr(|| unsafe { register_mr(p, addr, length, addr as u64, access) })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_reg_mr_iova`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
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

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_reg_mr_iova2`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
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

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_dereg_mr`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn dereg_mr(m: *mut ibv_mr) -> c_int {
    if let Some(r) = crate::import::dereg_imported(m) {
        return r;
    }
    guard_errno(|| {
        let Some(o) = Obj::<Mr>::get(m) else {
            return libc::EINVAL;
        };
        match o.deregister() {
            // The registry's reference goes (EINVAL when another thread
            // freed the handle first); the memory with the last.
            0 => Obj::<Mr>::take(m).map_or_else(|e| e, |_| 0),
            e => e,
        }
    })
}

/// `ibv_rereg_mr` as libibverbs does it, with the checks of its wrapper
/// (IBV_REREG_MR_ERR_INPUT: the region is unchanged) and of the kernel
/// (IBV_REREG_MR_ERR_CMD, errno set: here too the region is unchanged, a
/// stronger promise than the man page's "MR shouldn't be used").
///
/// # Safety
/// The C contract of `ibv_rereg_mr`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn rereg_mr(
    m: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    guard(IBV_REREG_MR_ERR_INPUT, || {
        let input = |e| {
            set_errno(e);
            IBV_REREG_MR_ERR_INPUT
        };
        let cmd = |e| {
            set_errno(e);
            IBV_REREG_MR_ERR_CMD
        };
        let Some(o) = Obj::<Mr>::get(m) else {
            return input(libc::EINVAL);
        };
        const ALL: c_int =
            IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
        if flags & !ALL != 0 {
            return input(libc::EINVAL);
        }
        let translation = flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0;
        if translation && (length == 0 || addr.is_null()) {
            return input(libc::EINVAL);
        }
        if access != 0 && flags & IBV_REREG_MR_CHANGE_ACCESS == 0 {
            return input(libc::EINVAL);
        }
        // The kernel's ib_uverbs_rereg_mr: no flag is an invalid command.
        if flags == 0 {
            return cmd(libc::EINVAL);
        }
        let new_access = if flags & IBV_REREG_MR_CHANGE_ACCESS != 0 {
            match check_access(access) {
                Ok(a) => Some(a),
                Err(e) => return cmd(e),
            }
        } else {
            None
        };
        let new_pd = if flags & IBV_REREG_MR_CHANGE_PD != 0 {
            match Obj::<Pd>::get_use(pd) {
                Some(p) => Some(p),
                None => return cmd(libc::EINVAL),
            }
        } else {
            None
        };
        let mut slot = o.mr.lock().unwrap_or_else(|e| e.into_inner());
        let Some(mr) = slot.as_mut() else {
            return cmd(libc::EINVAL);
        };
        if let Some(p) = &new_pd {
            if !Arc::ptr_eq(&p.ctx, &mr_ctx(&o)) {
                return cmd(libc::EINVAL);
            }
        }
        let t = translation.then_some((addr.cast::<u8>(), length, addr as u64));
        // SAFETY: the new memory follows the verbs contract, as for reg_mr.
        let r = unsafe { mr.rereg(new_pd.as_ref().map(|p| &p.pd), t, new_access) };
        if let Err(e) = r {
            return cmd(e.errno());
        }
        let (lkey, rkey) = (mr.lkey(), mr.rkey().0);
        drop(slot);
        let c = o.repr();
        // SAFETY: our own C structure; the verbs contract keeps the
        // program from using the region concurrently with its rereg.
        unsafe {
            (*c).lkey = lkey;
            (*c).rkey = rkey;
            (*c).handle = lkey;
            if translation {
                (*c).addr = addr;
                (*c).length = length;
            }
            if let Some(p) = new_pd {
                (*c).pd = p.api();
                *o.pd.lock().unwrap_or_else(|e| e.into_inner()) = p;
            }
        }
        0
    })
}

/// The context of a region (its protection domain's).
fn mr_ctx(o: &Obj<Mr>) -> crate::context::Ctx {
    o.pd.lock().unwrap_or_else(|e| e.into_inner()).ctx.clone()
}

/// `ibv_advise_mr` (the verbs_context slot): prefetch ranges of on-demand
/// paging regions. Returns 0 or an errno, as the man page says: EINVAL for
/// a bad PD, flags or list, ENOTSUP (EOPNOTSUPP) for an unknown advice,
/// EFAULT for a key that names no region of the PD or a range out of it
/// (or, with IBV_ADVISE_MR_FLAG_FLUSH, not mapped), EPERM for a region of
/// another PD or a write prefetch of a region without local write, EINVAL
/// for a region without on-demand paging (as rxe).
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn advise_mr(
    p: *mut ibv_pd,
    advice: ibv_advise_mr_advice,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sge: u32,
) -> c_int {
    guard_errno(|| {
        let Some(x) = Obj::<Pd>::get(p) else {
            return libc::EINVAL;
        };
        let advice = match advice {
            IBV_ADVISE_MR_ADVICE_PREFETCH => Advice::Prefetch,
            IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE => Advice::PrefetchWrite,
            IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT => Advice::PrefetchNoFault,
            _ => return libc::EOPNOTSUPP,
        };
        if flags & !IBV_ADVISE_MR_FLAG_FLUSH != 0 {
            return libc::EINVAL;
        }
        if num_sge == 0 || sg_list.is_null() || num_sge > softrdma::limits::MAX_SGE {
            return libc::EINVAL;
        }
        // SAFETY: the program passes `num_sge` entries.
        let list = unsafe { std::slice::from_raw_parts(sg_list, num_sge as usize) };
        let sges: Vec<Sge> = list.iter().map(ibv_sge::sge).collect();
        let flush = flags & IBV_ADVISE_MR_FLAG_FLUSH != 0;
        match x.pd.advise_mr(advice, flush, &sges) {
            Ok(()) => 0,
            Err(e) => e.errno(),
        }
    })
}
