//! Queue pairs: create (also `ibv_create_qp_ex`), modify, query, destroy.
//! Posting is in `post`, the `ibv_wr_*` API in `qpex`.

use crate::ah::{address_vector, ah_attr_of};
use crate::context::{context, Ctx};
use crate::cq::Cq;
use crate::ffi::*;
use crate::handle::{Castable, Kind, Obj, Use};
use crate::pd::Pd;
use crate::srq::Srq;
use crate::util::{guard_errno, guard_ptr, zeroed};
use softrdma::{Access, AttrMask, Mtu, Psn, QKey, QpAttr, QpState, QpType, Qpn, QueuePair, SendWr};
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};

/// What `ibv_wr_start` … `ibv_wr_complete` accumulate.
#[derive(Default)]
pub struct WrBatch {
    pub wrs: Vec<SendWr>,
    /// The first error met while building (reported by `wr_complete`).
    pub err: Option<i32>,
}

/// A queue pair (always an `ibv_qp_ex`; `ibv_qp` is its prefix).
pub struct Qp {
    pub qp: QueuePair,
    ctx: Ctx,
    _pd: Use<Pd>,
    _send_cq: Use<Cq>,
    _recv_cq: Use<Cq>,
    _srq: Option<Use<Srq>>,
    cap: ibv_qp_cap,
    qp_type: c_int,
    sq_sig_all: c_int,
    pub batch: Mutex<WrBatch>,
    /// Its asynchronous events handed out (a destroy waits for their
    /// acknowledgements, `acks.rs`).
    pub acks: crate::acks::EventAcks,
}

impl Castable for Qp {
    type Repr = ibv_qp_ex;
    type Api = ibv_qp;
    const KIND: Kind = Kind::Qp;
    const MAGIC: u64 = 0x5352_5150_0000_0008;
    fn release_uses(&self) {
        self._pd.release();
        self._send_cq.release();
        self._recv_cq.release();
        if let Some(s) = &self._srq {
            s.release();
        }
    }
}

impl Qp {
    pub fn is_ud(&self) -> bool {
        self.qp_type == IBV_QPT_UD
    }
    pub fn is_xrc_send(&self) -> bool {
        self.qp_type == IBV_QPT_XRC_SEND
    }
}

/// The data path's check (post, `ibv_wr_*`): NULL and the magic word.
///
/// # Safety
/// As [`Obj::fast`]: `p` is NULL or a QP the program got from us and has
/// not destroyed (the C contract of the verb, reached through
/// `context->ops` or the QP's own function pointers); the result does not
/// outlive the call.
#[inline]
pub unsafe fn qp_fast<'a>(p: *mut ibv_qp) -> Option<&'a Obj<Qp>> {
    // SAFETY: per the contract.
    unsafe { Obj::<Qp>::fast(p) }
}

const SEND_OPS_SUPPORTED: u64 = IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | IBV_QP_EX_WITH_LOCAL_INV
    | IBV_QP_EX_WITH_BIND_MW
    | IBV_QP_EX_WITH_SEND_WITH_INV
    | IBV_QP_EX_WITH_FLUSH
    | IBV_QP_EX_WITH_ATOMIC_WRITE;

#[allow(clippy::too_many_arguments)]
fn new_qp(
    p: *mut ibv_pd,
    qp_context: *mut c_void,
    send_cq: *mut ibv_cq,
    recv_cq: *mut ibv_cq,
    srq: *mut ibv_srq,
    cap: &mut ibv_qp_cap,
    qp_type: c_int,
    sq_sig_all: c_int,
) -> Result<*mut ibv_qp, i32> {
    let t = match qp_type {
        IBV_QPT_RC => QpType::Rc,
        IBV_QPT_UC => QpType::Uc,
        IBV_QPT_UD => QpType::Ud,
        IBV_QPT_XRC_SEND => QpType::XrcSend,
        // A TGT QP comes from an XRC domain (ibv_create_qp_ex).
        IBV_QPT_XRC_RECV => return Err(libc::EINVAL),
        8 | 0xff => return Err(libc::EOPNOTSUPP), // raw packet, driver
        _ => return Err(libc::EINVAL),
    };
    // An XRC INI QP has no receive side: uverbs ignores its receive CQ
    // and SRQ (the send CQ stands for both) and its receive capabilities.
    let xrc_ini = t == QpType::XrcSend;
    let (recv_cq, srq) = if xrc_ini {
        (send_cq, std::ptr::null_mut())
    } else {
        (recv_cq, srq)
    };
    if xrc_ini {
        cap.max_recv_wr = 0;
        cap.max_recv_sge = 0;
    }
    let x = Obj::<Pd>::get_use(p).ok_or(libc::EINVAL)?;
    let scq = Obj::<Cq>::get_use(send_cq).ok_or(libc::EINVAL)?;
    let rcq = Obj::<Cq>::get_use(recv_cq).ok_or(libc::EINVAL)?;
    let s = if srq.is_null() {
        None
    } else {
        Some(Obj::<Srq>::get_use(srq).ok_or(libc::EINVAL)?)
    };
    let ctx = x.ctx.clone();
    // The CQs of one device context (an imported context shares its
    // objects with the one it came from).
    if scq.ctx.ucontext != ctx.ucontext || rcq.ctx.ucontext != ctx.ucontext {
        return Err(libc::EINVAL);
    }
    let dev = ctx.dev.query_device();
    if cap.max_send_wr > dev.max_qp_wr
        || cap.max_recv_wr > dev.max_qp_wr
        || cap.max_send_sge > dev.max_sge
        || cap.max_recv_sge > dev.max_sge
        || cap.max_inline_data > dev.max_inline_data
    {
        return Err(libc::EINVAL);
    }
    let mut b =
        x.pd.qp_builder(t, &scq.cq, &rcq.cq)
            .max_send_wr(cap.max_send_wr)
            .max_recv_wr(cap.max_recv_wr)
            .max_send_sge(cap.max_send_sge)
            .max_recv_sge(cap.max_recv_sge)
            .max_inline_data(cap.max_inline_data)
            .sq_sig_all(sq_sig_all != 0);
    if let Some(s) = &s {
        b = b.srq(&s.srq);
    }
    let qp = b.build().map_err(|e| e.errno())?;
    let got = qp.cap();
    *cap = ibv_qp_cap {
        max_send_wr: got.max_send_wr,
        max_recv_wr: if s.is_some() { 0 } else { got.max_recv_wr },
        max_send_sge: got.max_send_sge,
        max_recv_sge: if s.is_some() { 0 } else { got.max_recv_sge },
        max_inline_data: got.max_inline_data,
    };
    let mut c: ibv_qp_ex = zeroed();
    c.qp_base.context = ctx.api();
    c.qp_base.qp_context = qp_context;
    c.qp_base.pd = x.api();
    c.qp_base.send_cq = send_cq;
    c.qp_base.recv_cq = recv_cq;
    c.qp_base.srq = srq;
    c.qp_base.handle = qp.qpn().value();
    c.qp_base.qp_num = qp.qpn().value();
    c.qp_base.state = 0;
    c.qp_base.qp_type = qp_type;
    crate::qpex::fill_ops(&mut c);
    let qpn = qp.qpn().value();
    let placement = crate::domain::placement(&x, crate::domain::RES_TYPE_QP);
    let o = Obj::new_in(
        c,
        Qp {
            qp,
            ctx: ctx.clone(),
            _pd: x,
            _send_cq: scq,
            _recv_cq: rcq,
            _srq: s,
            cap: *cap,
            qp_type,
            sq_sig_all,
            batch: Mutex::new(WrBatch::default()),
            acks: Default::default(),
        },
        placement,
    )
    .map_err(|(e, _)| e)?;
    ctx.objs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .qps
        .insert(qpn, Arc::downgrade(&o));
    Ok(o.publish())
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_create_qp`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn create_qp(p: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    guard_ptr(|| {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: valid attribute structure.
        let a = unsafe { &mut *attr };
        new_qp(
            p,
            a.qp_context,
            a.send_cq,
            a.recv_cq,
            a.srq,
            &mut a.cap,
            a.qp_type,
            a.sq_sig_all,
        )
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn create_qp_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    guard_ptr(|| {
        let c = context(ctx).ok_or(libc::EINVAL)?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: valid attribute structure.
        let a = unsafe { &mut *attr };
        let known = IBV_QP_INIT_ATTR_PD
            | IBV_QP_INIT_ATTR_XRCD
            | IBV_QP_INIT_ATTR_CREATE_FLAGS
            | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        if a.comp_mask & !known != 0 {
            return Err(libc::EOPNOTSUPP); // RSS, TSO
        }
        if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if a.qp_type == IBV_QPT_XRC_RECV {
            return crate::xrc::create_tgt_qp(&c, a);
        }
        if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
            return Err(libc::EINVAL);
        }
        if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0
            && a.send_ops_flags & !SEND_OPS_SUPPORTED != 0
        {
            return Err(libc::EOPNOTSUPP);
        }
        let x = Obj::<Pd>::get(a.pd).ok_or(libc::EINVAL)?;
        if x.ctx.ucontext != c.ucontext {
            return Err(libc::EINVAL);
        }
        new_qp(
            a.pd,
            a.qp_context,
            a.send_cq,
            a.recv_cq,
            a.srq,
            &mut a.cap,
            a.qp_type,
            a.sq_sig_all,
        )
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_qp_to_qp_ex`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn qp_to_qp_ex(q: *mut ibv_qp) -> *mut ibv_qp_ex {
    guard_ptr(|| {
        Obj::<Qp>::get(q)
            .map(|x| x.repr().cast::<ibv_qp_ex>())
            .ok_or(libc::EINVAL)
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_destroy_qp`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn destroy_qp(q: *mut ibv_qp) -> c_int {
    if crate::xrc::tgt(q).is_some() {
        return guard_errno(|| crate::xrc::destroy_tgt(q));
    }
    // A QP still attached to multicast groups: EBUSY (uverbs refuses a
    // user's destroy until the program detaches them).
    if Obj::<Qp>::get(q).is_some_and(|x| !x.qp.mcast_groups().is_empty()) {
        return crate::util::errno_too(libc::EBUSY);
    }
    guard_errno(|| {
        let Some(x) = Obj::<Qp>::get(q) else {
            return libc::EINVAL;
        };
        // No event is handed out for it from here on; then the wait for
        // the acknowledgements of those that were (`acks.rs`).
        let qpn = x.qp.qpn().value();
        let objs = || x.ctx.objs.lock().unwrap_or_else(|e| e.into_inner());
        let entry = objs().qps.remove(&qpn);
        // SAFETY: a u32 field of the QP's C structure.
        let done = unsafe { x.counter(|r| std::ptr::addr_of_mut!((*r).qp_base.events_completed)) };
        x.acks.wait(done);
        match Obj::<Qp>::take(q) {
            Ok(_) => 0,
            Err(e) => {
                if let Some(w) = entry {
                    objs().qps.insert(qpn, w);
                }
                e
            }
        }
    })
}

fn qp_state(v: c_int) -> Result<QpState, i32> {
    u32::try_from(v)
        .ok()
        .and_then(QpState::from_ibv)
        .ok_or(libc::EINVAL)
}

/// `ibv_qp_attr` and its mask as softrdma's `QpAttr`.
fn qp_attr_of(a: &ibv_qp_attr, mask: c_int, ctx: &Ctx) -> Result<(QpAttr, AttrMask), i32> {
    let m = AttrMask(mask as u32);
    if mask < 0 {
        return Err(libc::EINVAL);
    }
    let mut qa = QpAttr::default();
    if m.contains(AttrMask::STATE) {
        qa.qp_state = qp_state(a.qp_state)?;
    }
    if m.contains(AttrMask::CUR_STATE) {
        qa.cur_qp_state = qp_state(a.cur_qp_state)?;
    }
    if m.contains(AttrMask::PATH_MTU) {
        qa.path_mtu = u32::try_from(a.path_mtu)
            .ok()
            .and_then(Mtu::from_ibv)
            .ok_or(libc::EINVAL)?;
    }
    if m.contains(AttrMask::AV) {
        qa.ah_attr = address_vector(&a.ah_attr)?;
        ctx.check_peer(qa.ah_attr.dest);
    }
    if m.contains(AttrMask::CAP) {
        // Resizing a QP's queues is not supported.
        return Err(libc::EINVAL);
    }
    qa.qkey = QKey(a.qkey);
    qa.rq_psn = Psn::new(a.rq_psn);
    qa.sq_psn = Psn::new(a.sq_psn);
    qa.dest_qp_num = Qpn::new(a.dest_qp_num);
    qa.qp_access_flags = Access(a.qp_access_flags);
    qa.pkey_index = a.pkey_index;
    qa.en_sqd_async_notify = a.en_sqd_async_notify != 0;
    qa.max_rd_atomic = a.max_rd_atomic;
    qa.max_dest_rd_atomic = a.max_dest_rd_atomic;
    qa.min_rnr_timer = a.min_rnr_timer;
    qa.port_num = a.port_num;
    qa.timeout = a.timeout;
    qa.retry_cnt = a.retry_cnt;
    qa.rnr_retry = a.rnr_retry;
    Ok((qa, m))
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_modify_qp`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn modify_qp(q: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
    guard_errno(|| {
        if attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: valid attribute structure.
        let a = unsafe { &*attr };
        let (r, api) = if let Some(x) = Obj::<Qp>::get(q) {
            let r = qp_attr_of(a, mask, &x.ctx)
                .and_then(|(qa, m)| x.qp.modify(&qa, m).map_err(|e| e.errno()));
            (r, x.api())
        } else if let Some(x) = crate::xrc::tgt(q) {
            let r = qp_attr_of(a, mask, &x.ctx)
                .and_then(|(qa, m)| x.qp.modify(&qa, m).map_err(|e| e.errno()));
            (r, x.api())
        } else {
            return libc::EINVAL;
        };
        match r {
            Ok(()) => {
                if AttrMask(mask as u32).contains(AttrMask::STATE) {
                    // libibverbs keeps `qp->state` in step with modify.
                    // SAFETY: a field of our own allocation.
                    unsafe { (*api).state = a.qp_state };
                }
                0
            }
            Err(e) => e,
        }
    })
}

/// softrdma's attributes as `ibv_qp_attr` (`ud`: no path to report).
fn ibv_attr_of(qa: &QpAttr, cap: ibv_qp_cap, ud: bool) -> ibv_qp_attr {
    let mut o = ibv_qp_attr {
        qp_state: qa.qp_state.to_ibv() as c_int,
        cur_qp_state: qa.qp_state.to_ibv() as c_int,
        path_mtu: qa.path_mtu as c_int,
        path_mig_state: 0, // IBV_MIG_MIGRATED
        qkey: qa.qkey.0,
        rq_psn: qa.rq_psn.value(),
        sq_psn: qa.sq_psn.value(),
        dest_qp_num: qa.dest_qp_num.value(),
        qp_access_flags: qa.qp_access_flags.0,
        cap,
        ah_attr: ah_attr_of(&qa.ah_attr),
        pkey_index: qa.pkey_index,
        en_sqd_async_notify: qa.en_sqd_async_notify as u8,
        sq_draining: 0,
        max_rd_atomic: qa.max_rd_atomic,
        max_dest_rd_atomic: qa.max_dest_rd_atomic,
        min_rnr_timer: qa.min_rnr_timer,
        port_num: 1,
        timeout: qa.timeout,
        retry_cnt: qa.retry_cnt,
        rnr_retry: qa.rnr_retry,
        ..Default::default()
    };
    if ud || qa.qp_state == QpState::Reset || qa.qp_state == QpState::Init {
        // No path yet (or none at all).
        o.ah_attr = ibv_ah_attr::default();
    }
    o
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_query_qp`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn query_qp(
    q: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    guard_errno(|| {
        if attr.is_null() || init.is_null() {
            return libc::EINVAL;
        }
        let (qa, i, cap, ud) = if let Some(x) = Obj::<Qp>::get(q) {
            // SAFETY: our own allocation.
            let c = unsafe { &*x.api() };
            let i = ibv_qp_init_attr {
                qp_context: c.qp_context,
                send_cq: c.send_cq,
                recv_cq: c.recv_cq,
                srq: c.srq,
                cap: x.cap,
                qp_type: x.qp_type,
                sq_sig_all: x.sq_sig_all,
            };
            (x.qp.query(), i, x.cap, x.is_ud())
        } else if let Some(x) = crate::xrc::tgt(q) {
            // SAFETY: our own allocation.
            let c = unsafe { &*x.api() };
            let i = ibv_qp_init_attr {
                qp_context: c.qp_context,
                send_cq: std::ptr::null_mut(),
                recv_cq: std::ptr::null_mut(),
                srq: std::ptr::null_mut(),
                cap: ibv_qp_cap::default(),
                qp_type: IBV_QPT_XRC_RECV,
                sq_sig_all: 0,
            };
            (x.qp.query(), i, ibv_qp_cap::default(), false)
        } else {
            return libc::EINVAL;
        };
        let o = match qa {
            Ok(qa) => ibv_attr_of(&qa, cap, ud),
            Err(e) => return e.errno(),
        };
        // SAFETY: valid output structures.
        unsafe {
            attr.write(o);
            init.write(i);
        }
        0
    })
}

/// `ibv_attach_mcast` (IBVERBS_1.1): a UD QP joins multicast group `gid`.
/// The LID means nothing on RoCE (the kernel checks it only on IB links).
///
/// # Safety
/// The C contract of `ibv_attach_mcast`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn attach_mcast(q: *mut ibv_qp, gid: *const ibv_gid, _lid: u16) -> c_int {
    // SAFETY: the caller's contract, passed on.
    unsafe { with_group(q, gid, softrdma::QueuePair::attach_mcast) }
}

/// `ibv_attach_mcast` / `ibv_detach_mcast`: `f` with the QP and the
/// group's GID; EINVAL for an unknown QP or a NULL GID.
///
/// # Safety
/// `gid` is NULL or points to a GID.
unsafe fn with_group(
    q: *mut ibv_qp,
    gid: *const ibv_gid,
    f: fn(&softrdma::QueuePair, [u8; 16]) -> softrdma::Result<()>,
) -> c_int {
    guard_errno(|| {
        let Some(x) = Obj::<Qp>::get(q) else {
            return libc::EINVAL;
        };
        if gid.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a valid GID.
        let g = unsafe { (*gid).raw };
        match f(&x.qp, g) {
            Ok(()) => 0,
            Err(e) => e.errno(),
        }
    })
}

/// `ibv_detach_mcast` (IBVERBS_1.1).
///
/// # Safety
/// The C contract of `ibv_detach_mcast`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn detach_mcast(q: *mut ibv_qp, gid: *const ibv_gid, _lid: u16) -> c_int {
    // SAFETY: the caller's contract, passed on.
    unsafe { with_group(q, gid, softrdma::QueuePair::detach_mcast) }
}
