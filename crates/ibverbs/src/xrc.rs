//! XRC in libibverbs' API: `ibv_open_xrcd` / `ibv_close_xrcd`,
//! `ibv_create_srq_ex` with `IBV_SRQT_XRC`, `ibv_get_srq_num`,
//! `ibv_create_qp_ex` with `IBV_QPT_XRC_RECV` (TGT) — the XRC_SEND (INI)
//! type is an ordinary QP of `qp.rs` — and `ibv_open_qp`, over softrdma's
//! `XrcDomain`, XRC SRQs and `XrcTgtQp`.
//!
//! Sharing by file, as the kernel's uverbs does it per device
//! (`ib_uverbs_open_xrcd`): `ibv_open_xrcd` with a file descriptor finds
//! the XRC domain already opened for that file's inode on the same device
//! (every open gives a new `ibv_xrcd` handle on it), creates one with
//! `O_CREAT` when there is none (`EAGAIN` without), and refuses an
//! existing one with `O_EXCL` (`EINVAL`); `fd` -1 gives an unshared
//! domain; a bad descriptor is `EBADF`. The domain goes with the last
//! handle closed. softrdma's devices are per process, so the sharing is
//! among the opens of one process (the kernel's spans processes).
//! `ibv_close_xrcd` of a handle through which SRQs or TGT QPs were
//! created and still live is `EBUSY` (uverbs' refcnt).
//!
//! A TGT QP is destroyed with the last of its handles (`ibv_create_qp_ex`'s
//! and `ibv_open_qp`'s), as the kernel's `__ib_destroy_shared_qp`.

use crate::context::{context, file_id, Ctx};
use crate::cq::Cq;
use crate::ffi::*;
use crate::handle::{Castable, Kind, Obj, Use};
use crate::pd::Pd;
use crate::srq::Srq;
use crate::util::{guard_errno, guard_ptr, zeroed};
use softrdma::{XrcDomain, XrcTgtQp};
use std::collections::HashMap;
use std::ffi::c_int;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// One `ibv_xrcd` handle.
pub struct Xrcd {
    pub xrcd: XrcDomain,
    pub ctx: Ctx,
    /// The file it was opened for (device, inode), if shared.
    file: Option<(u64, u64)>,
}

impl Castable for Xrcd {
    type Repr = ibv_xrcd;
    type Api = ibv_xrcd;
    const KIND: Kind = Kind::Xrcd;
    const MAGIC: u64 = 0x5352_5852_4344_000e;
    fn release_uses(&self) {}
}

/// Domains opened for a file: (device address, file's device, inode) →
/// (domain, handles open on it).
type Shared = HashMap<(SocketAddr, u64, u64), (XrcDomain, usize)>;

/// The process's shared domains, locked (also by `crate::fork` around a
/// fork). In a forked child the parent's are forgotten: they are the
/// parent's, and a file opened again names a domain of the child's.
pub(crate) fn shared() -> std::sync::MutexGuard<'static, Shared> {
    static SHARED: std::sync::LazyLock<Mutex<Shared>> =
        std::sync::LazyLock::new(|| Mutex::new(HashMap::new()));
    let mut s = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    s.retain(|_, (d, _)| !d.device().forked_away());
    s
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn open_xrcd(
    ctx: *mut ibv_context,
    attr: *mut ibv_xrcd_init_attr,
) -> *mut ibv_xrcd {
    guard_ptr(|| {
        let c = context(ctx).ok_or(libc::EINVAL)?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller passes a valid attribute structure.
        let a = unsafe { &*attr };
        // libibverbs' ibv_cmd_open_xrcd.
        if a.comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED {
            return Err(libc::EOPNOTSUPP);
        }
        if a.comp_mask & IBV_XRCD_INIT_ATTR_FD == 0 || a.comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS == 0
        {
            return Err(libc::EINVAL);
        }
        let (xrcd, file) = if a.fd == -1 {
            (c.dev.alloc_xrcd().map_err(|e| e.errno())?, None)
        } else {
            let (dev, ino) = file_id(a.fd)?;
            let key = (c.dev.local_addr(), dev, ino);
            let mut s = shared();
            match s.get_mut(&key) {
                Some(_) if a.oflags & libc::O_EXCL != 0 => return Err(libc::EINVAL),
                Some((d, n)) => {
                    *n += 1;
                    (d.clone(), Some((dev, ino)))
                }
                None if a.oflags & libc::O_CREAT == 0 => return Err(libc::EAGAIN),
                None => {
                    let d = c.dev.alloc_xrcd().map_err(|e| e.errno())?;
                    s.insert(key, (d.clone(), 1));
                    (d, Some((dev, ino)))
                }
            }
        };
        let repr = ibv_xrcd { context: c.api() };
        Ok(Obj::new(
            repr,
            Xrcd {
                xrcd,
                ctx: c.clone(),
                file,
            },
        )
        .publish())
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn close_xrcd(x: *mut ibv_xrcd) -> c_int {
    guard_errno(|| match Obj::<Xrcd>::take(x) {
        Ok(o) => {
            if let Some((dev, ino)) = o.file {
                let key = (o.ctx.dev.local_addr(), dev, ino);
                let mut s = shared();
                if let Some((_, n)) = s.get_mut(&key) {
                    *n -= 1;
                    if *n == 0 {
                        s.remove(&key);
                    }
                }
            }
            0
        }
        Err(e) => e,
    })
}

/// `ibv_create_srq_ex` of an XRC SRQ (`IBV_SRQT_XRC`): PD, XRC domain and
/// CQ required (uverbs' `ib_uverbs_create_xsrq`: EINVAL otherwise).
pub fn create_xrc_srq(ctx: &Ctx, a: &mut ibv_srq_init_attr_ex) -> Result<*mut ibv_srq, i32> {
    let need = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    if a.comp_mask & need != need {
        return Err(libc::EINVAL);
    }
    let pd = Obj::<Pd>::get_use(a.pd).ok_or(libc::EINVAL)?;
    let xrcd = Obj::<Xrcd>::get_use(a.xrcd).ok_or(libc::EINVAL)?;
    let cq = Obj::<Cq>::get_use(a.cq).ok_or(libc::EINVAL)?;
    if pd.ctx.ucontext != ctx.ucontext
        || xrcd.ctx.ucontext != ctx.ucontext
        || cq.ctx.ucontext != ctx.ucontext
    {
        return Err(libc::EINVAL);
    }
    let dev = ctx.dev.query_device();
    if a.attr.max_wr == 0
        || a.attr.max_wr > dev.max_srq_wr
        || a.attr.max_sge > dev.max_srq_sge
        || a.attr.srq_limit > a.attr.max_wr
    {
        return Err(libc::EINVAL);
    }
    let srq = pd
        .pd
        .create_xrc_srq(
            &xrcd.xrcd,
            &cq.cq,
            a.attr.max_wr,
            a.attr.max_sge.max(1),
            a.attr.srq_limit,
        )
        .map_err(|e| e.errno())?;
    if let Ok((w, s, _, _)) = srq.query() {
        a.attr.max_wr = w;
        a.attr.max_sge = s;
    }
    crate::srq::publish(ctx, srq, pd, a.srq_context, Some((xrcd, cq)))
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn get_srq_num(s: *mut ibv_srq, out: *mut u32) -> c_int {
    guard_errno(|| {
        let Some(x) = Obj::<Srq>::get(s) else {
            return libc::EINVAL;
        };
        if out.is_null() {
            return libc::EINVAL;
        }
        match x.srq.srq_num() {
            // SAFETY: a valid output location.
            Some(n) => {
                unsafe { out.write(n) };
                0
            }
            // A basic SRQ has no number.
            None => libc::EOPNOTSUPP,
        }
    })
}

/// An XRC TGT QP handle (`ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`, or
/// `ibv_open_qp`).
pub struct TgtQp {
    pub qp: XrcTgtQp,
    pub ctx: Ctx,
    _xrcd: Use<Xrcd>,
}

impl Castable for TgtQp {
    type Repr = ibv_qp_ex;
    type Api = ibv_qp;
    const KIND: Kind = Kind::TgtQp;
    const MAGIC: u64 = 0x5352_5447_5451_000f;
    fn release_uses(&self) {
        self._xrcd.release();
    }
}

fn tgt_handle(
    ctx: &Ctx,
    qp: XrcTgtQp,
    xrcd: Use<Xrcd>,
    xrcd_ptr: *mut ibv_xrcd,
    qp_context: *mut std::ffi::c_void,
) -> *mut ibv_qp {
    let mut c: ibv_qp_ex = zeroed();
    c.qp_base.context = ctx.api();
    c.qp_base.qp_context = qp_context;
    c.qp_base.handle = qp.qpn().value();
    c.qp_base.qp_num = qp.qpn().value();
    c.qp_base.state = qp.state().map_or(0, |s| s.to_ibv() as c_int);
    c.qp_base.qp_type = IBV_QPT_XRC_RECV;
    let _ = xrcd_ptr;
    Obj::new(
        c,
        TgtQp {
            qp,
            ctx: ctx.clone(),
            _xrcd: xrcd,
        },
    )
    .publish()
}

/// `ibv_create_qp_ex` of an XRC TGT QP: the XRC domain required (the
/// kernel takes no PD, CQ or SRQ for it).
pub fn create_tgt_qp(ctx: &Ctx, a: &mut ibv_qp_init_attr_ex) -> Result<*mut ibv_qp, i32> {
    if a.comp_mask & IBV_QP_INIT_ATTR_XRCD == 0 {
        return Err(libc::EINVAL);
    }
    let xrcd = Obj::<Xrcd>::get_use(a.xrcd).ok_or(libc::EINVAL)?;
    if xrcd.ctx.ucontext != ctx.ucontext {
        return Err(libc::EINVAL);
    }
    let qp = xrcd.xrcd.create_tgt_qp().map_err(|e| e.errno())?;
    a.cap = ibv_qp_cap::default();
    let x = a.xrcd;
    Ok(tgt_handle(ctx, qp, xrcd, x, a.qp_context))
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn open_qp(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_open_attr,
) -> *mut ibv_qp {
    guard_ptr(|| {
        let c = context(ctx).ok_or(libc::EINVAL)?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller passes a valid attribute structure.
        let a = unsafe { &*attr };
        // libibverbs' ibv_cmd_open_qp.
        if a.comp_mask >= IBV_QP_OPEN_ATTR_RESERVED {
            return Err(libc::EOPNOTSUPP);
        }
        let need = IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_TYPE;
        if a.comp_mask & need != need {
            return Err(libc::EINVAL);
        }
        if a.qp_type != IBV_QPT_XRC_RECV {
            return Err(libc::EINVAL);
        }
        let xrcd = Obj::<Xrcd>::get_use(a.xrcd).ok_or(libc::EINVAL)?;
        let qp = xrcd
            .xrcd
            .open_tgt_qp(softrdma::Qpn::new(a.qp_num))
            .map_err(|e| e.errno())?;
        let qp_context = if a.comp_mask & IBV_QP_OPEN_ATTR_CONTEXT != 0 {
            a.qp_context
        } else {
            std::ptr::null_mut()
        };
        Ok(tgt_handle(&c, qp, xrcd, a.xrcd, qp_context))
    })
}

/// The TGT QP handles of one kind of call: `Some` when `q` is one.
pub fn tgt(q: *mut ibv_qp) -> Option<Arc<Obj<TgtQp>>> {
    Obj::<TgtQp>::get(q)
}

/// `ibv_destroy_qp` of a TGT QP handle.
pub fn destroy_tgt(q: *mut ibv_qp) -> c_int {
    match Obj::<TgtQp>::take(q) {
        Ok(_) => 0,
        Err(e) => e,
    }
}
