//! Memory windows: `ibv_alloc_mw`, `ibv_dealloc_mw`, `ibv_bind_mw` (the
//! `context->ops` slots verbs.h's inline functions call). Binds through
//! `ibv_post_send` (IBV_WR_BIND_MW) and `ibv_wr_bind_mw` are in `post` and
//! `qpex`; the rules are the core's (softrdma_proto's `mw` module).

use crate::ffi::*;
use crate::handle::{Castable, Kind, Obj, Use};
use crate::pd::Pd;
use crate::qp::qp_fast;
use crate::util::{guard_errno, guard_ptr, zeroed};
use softrdma::{Access, MemoryWindow, MwBind, MwId, MwType, RKey, SendFlags, SendWr, WrOpcode};
use std::ffi::c_int;

/// A memory window.
pub struct Mw {
    mw: MemoryWindow,
    _pd: Use<Pd>,
}

impl Castable for Mw {
    fn release_uses(&self) {
        self._pd.release();
    }
    type Repr = ibv_mw;
    type Api = ibv_mw;
    const KIND: Kind = Kind::Mw;
    const MAGIC: u64 = 0x5352_4d57_0000_000c;
}

/// The core's handle of a window the program passes in a work request
/// (data path: NULL and the magic word only).
pub fn mw_id(p: *mut ibv_mw) -> Option<MwId> {
    // SAFETY: the program passes a window it allocated (or NULL).
    unsafe { Obj::<Mw>::fast(p) }.map(|x| x.mw.id())
}

/// `ibv_alloc_mw`: type 1 or 2 (the only types the IBA and libibverbs
/// define; type 3 and others are EINVAL).
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn alloc_mw(p: *mut ibv_pd, ty: ibv_mw_type) -> *mut ibv_mw {
    guard_ptr(|| {
        let x = Obj::<Pd>::get_use(p).ok_or(libc::EINVAL)?;
        let kind = match ty {
            IBV_MW_TYPE_1 => MwType::Type1,
            IBV_MW_TYPE_2 => MwType::Type2,
            _ => return Err(libc::EINVAL),
        };
        let mw = x.pd.alloc_mw(kind).map_err(|e| e.errno())?;
        let mut c: ibv_mw = zeroed();
        c.context = x.ctx.api();
        c.pd = x.api();
        c.rkey = mw.rkey().0;
        c.handle = mw.id().0;
        c.type_ = ty;
        Ok(Obj::new(c, Mw { mw, _pd: x }).publish())
    })
}

/// `ibv_dealloc_mw`: a bound window is unbound first; its keys stop
/// working at once.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn dealloc_mw(m: *mut ibv_mw) -> c_int {
    guard_errno(|| Obj::<Mw>::take(m).map_or_else(|e| e, |_| 0))
}

/// `ibv_bind_mw` (type 1; verbs.h's inline wrapper has checked the type,
/// the NULL region with a range, and the region's PD): posted as a BIND_MW
/// work request with the key after the window's current one, which the
/// window takes at once (as rxe's provider does: the program undoes it if
/// the bind completes with an error). Zero-based type 1 windows: EINVAL
/// (o10-36.2.2).
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn bind_mw(q: *mut ibv_qp, m: *mut ibv_mw, bind: *mut ibv_mw_bind) -> c_int {
    guard_errno(|| {
        // SAFETY: the program's QP (the verb's C contract).
        let Some(x) = (unsafe { qp_fast(q) }) else {
            return libc::EINVAL;
        };
        // SAFETY: the program passes its window and a bind description.
        let (Some(w), Some(b)) = (unsafe { Obj::<Mw>::fast(m) }, unsafe { bind.as_ref() }) else {
            return libc::EINVAL;
        };
        let info = &b.bind_info;
        if info.mw_access_flags as c_int & IBV_ACCESS_ZERO_BASED != 0 {
            return libc::EINVAL;
        }
        if x.is_ud() {
            return libc::EINVAL;
        }
        let c = w.repr();
        // SAFETY: our own C structure; the program does not bind one window
        // from two threads at once (the verbs contract).
        let cur = unsafe { (*c).rkey };
        let rkey = cur & !0xff | (cur.wrapping_add(1) & 0xff);
        let mr_lkey = if info.mr.is_null() {
            0
        } else {
            // SAFETY: the program passes one of its regions.
            unsafe { (*info.mr).lkey }
        };
        let mut wr = SendWr::new(b.wr_id, WrOpcode::BindMw);
        wr.flags = SendFlags(b.send_flags & (IBV_SEND_FENCE | IBV_SEND_SIGNALED));
        wr.bind = Some(MwBind {
            mw: w.mw.id(),
            rkey: RKey(rkey),
            mr_lkey,
            addr: info.addr,
            length: info.length,
            access: Access(info.mw_access_flags),
        });
        if let Err(e) = x.qp.post_send(wr) {
            return e.errno();
        }
        // SAFETY: as above.
        unsafe { (*c).rkey = rkey };
        0
    })
}
