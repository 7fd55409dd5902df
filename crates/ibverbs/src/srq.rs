//! Shared receive queues.

use crate::context::{context, Ctx};
use crate::ffi::*;
use crate::handle::{Castable, Kind, Obj, Use};
use crate::pd::Pd;
use crate::util::{self, guard_errno, guard_ptr, zeroed};
use softrdma::SharedReceiveQueue;
use std::ffi::c_int;
use std::sync::Arc;

/// A shared receive queue.
pub struct Srq {
    pub srq: SharedReceiveQueue,
    _pd: Use<Pd>,
    ctx: Ctx,
    /// An XRC SRQ's domain handle and CQ (it counts as their user).
    _xrc: Option<(Use<crate::xrc::Xrcd>, Use<crate::cq::Cq>)>,
    /// Its asynchronous events handed out (a destroy waits for their
    /// acknowledgements, `acks.rs`).
    pub acks: crate::acks::EventAcks,
}

impl Castable for Srq {
    type Repr = ibv_srq;
    type Api = ibv_srq;
    const KIND: Kind = Kind::Srq;
    const MAGIC: u64 = 0x5352_5352_5100_0007;
    fn release_uses(&self) {
        self._pd.release();
        if let Some((x, c)) = &self._xrc {
            x.release();
            c.release();
        }
    }
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_create_srq`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn create_srq(p: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    guard_ptr(|| {
        let x = Obj::<Pd>::get_use(p).ok_or(libc::EINVAL)?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller passes a valid attribute structure.
        let a = unsafe { &mut *attr };
        let dev = x.ctx.dev.query_device();
        if a.attr.max_wr == 0
            || a.attr.max_wr > dev.max_srq_wr
            || a.attr.max_sge > dev.max_srq_sge
            || a.attr.srq_limit > a.attr.max_wr
        {
            return Err(libc::EINVAL);
        }
        let srq =
            x.pd.create_srq(a.attr.max_wr, a.attr.max_sge.max(1), a.attr.srq_limit)
                .map_err(|e| e.errno())?;
        if let Ok((w, s, _, _)) = srq.query() {
            a.attr.max_wr = w;
            a.attr.max_sge = s;
        }
        let ctx = x.ctx.clone();
        publish(&ctx, srq, x, a.srq_context, None)
    })
}

/// Hands an SRQ to C.
pub fn publish(
    ctx: &Ctx,
    srq: SharedReceiveQueue,
    x: Use<Pd>,
    srq_context: *mut std::ffi::c_void,
    xrc: Option<(Use<crate::xrc::Xrcd>, Use<crate::cq::Cq>)>,
) -> Result<*mut ibv_srq, i32> {
    let mut c: ibv_srq = zeroed();
    c.context = ctx.api();
    c.srq_context = srq_context;
    c.pd = x.api();
    c.handle = srq.id().0;
    let id = srq.id().0;
    let placement = crate::domain::placement(&x, crate::domain::RES_TYPE_SRQ);
    let o = Obj::new_in(
        c,
        Srq {
            srq,
            _pd: x,
            ctx: ctx.clone(),
            _xrc: xrc,
            acks: Default::default(),
        },
        placement,
    )
    .map_err(|(e, _)| e)?;
    ctx.objs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .srqs
        .insert(id, Arc::downgrade(&o));
    Ok(o.publish())
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn create_srq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    guard_ptr(|| {
        let Some(c) = context(ctx) else {
            return Err(libc::EINVAL);
        };
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller passes a valid attribute structure.
        let a = unsafe { &mut *attr };
        let typed = a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0;
        if typed && a.srq_type == IBV_SRQT_XRC {
            return crate::xrc::create_xrc_srq(&c, a);
        }
        let basic = !typed || a.srq_type == IBV_SRQT_BASIC;
        if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 {
            return Err(libc::EINVAL);
        }
        // The XRC members mean nothing to a basic SRQ; tag matching is an
        // offload softrdma does not have.
        let known = IBV_SRQ_INIT_ATTR_PD
            | IBV_SRQ_INIT_ATTR_TYPE
            | IBV_SRQ_INIT_ATTR_XRCD
            | IBV_SRQ_INIT_ATTR_CQ;
        if !basic || a.comp_mask & !known != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        // ibv_srq_init_attr is the prefix of ibv_srq_init_attr_ex.
        // SAFETY: forwarded with the prefix structure.
        let r = unsafe { create_srq(a.pd, (a as *mut ibv_srq_init_attr_ex).cast()) };
        if r.is_null() {
            Err(util::errno())
        } else {
            Ok(r)
        }
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_modify_srq`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn modify_srq(
    s: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    guard_errno(|| {
        let Some(x) = Obj::<Srq>::get(s) else {
            return libc::EINVAL;
        };
        if attr.is_null() || mask & !(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) != 0 {
            return libc::EINVAL;
        }
        // SAFETY: valid attribute structure.
        let a = unsafe { &*attr };
        // A resize keeps the posted receives; it may not go below them, nor
        // below an armed limit, nor past the device's max_srq_wr (rxe's
        // rules; IBV_DEVICE_SRQ_RESIZE is advertised).
        let max_wr = (mask & IBV_SRQ_MAX_WR != 0).then_some(a.max_wr);
        let limit = (mask & IBV_SRQ_LIMIT != 0).then_some(a.srq_limit);
        if max_wr.is_none() && limit.is_none() {
            return 0;
        }
        if let Err(e) = x.srq.modify(max_wr, limit) {
            return e.errno();
        }
        0
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_query_srq`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn query_srq(s: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    guard_errno(|| {
        let Some(x) = Obj::<Srq>::get(s) else {
            return libc::EINVAL;
        };
        if attr.is_null() {
            return libc::EINVAL;
        }
        match x.srq.query() {
            Ok((w, sge, limit, _)) => {
                // SAFETY: valid output structure.
                unsafe {
                    attr.write(ibv_srq_attr {
                        max_wr: w,
                        max_sge: sge,
                        srq_limit: limit,
                    })
                };
                0
            }
            Err(e) => e.errno(),
        }
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_destroy_srq`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn destroy_srq(s: *mut ibv_srq) -> c_int {
    guard_errno(|| {
        let Some(x) = Obj::<Srq>::get(s) else {
            return libc::EINVAL;
        };
        // EBUSY while QPs use it.
        if x.busy() {
            return libc::EBUSY;
        }
        // No event is handed out for it from here on; then the wait for
        // the acknowledgements of those that were (`acks.rs`).
        let id = x.srq.id().0;
        let objs = || x.ctx.objs.lock().unwrap_or_else(|e| e.into_inner());
        let entry = objs().srqs.remove(&id);
        // SAFETY: a u32 field of the SRQ's C structure.
        let done = unsafe { x.counter(|r| std::ptr::addr_of_mut!((*r).events_completed)) };
        x.acks.wait(done);
        match Obj::<Srq>::take(s) {
            Ok(_) => 0,
            Err(e) => {
                if let Some(w) = entry {
                    objs().srqs.insert(id, w);
                }
                e
            }
        }
    })
}
