//! The QP helpers: `rdma_create_qp[_ex]`, `rdma_destroy_qp`,
//! `rdma_create_srq[_ex]`, `rdma_destroy_srq`, `rdma_create_ep`,
//! `rdma_destroy_ep`, as librdmacm does them: CQs (with completion
//! channels, `cq_context` = the id, as rdma_verbs.h's helpers expect) made
//! when the caller gives none, `id->pd`/`qp`/`srq`/CQ fields filled, the
//! QP moved to INIT (UD: to RTS) by softrdma's rdma_cm, which drives it
//! from then on.

use super::ffi::*;
use super::id::{create_id2, destroy_id, qp_obj, sockaddr_in, Id, QpInitAttr};
use crate::ffi::*;
use crate::handle::Obj;
use crate::util::{guard, guard_neg};
use std::ffi::c_int;

/// `ucma_destroy_cqs`.
///
/// # Safety
/// `c` is a live C id of ours.
unsafe fn destroy_cqs(c: *mut rdma_cm_id) {
    // SAFETY: per the contract; the CQs and channels are ours.
    unsafe {
        if !(*c).recv_cq.is_null() {
            crate::cq::destroy_cq((*c).recv_cq);
            if !(*c).send_cq.is_null() && (*c).send_cq != (*c).recv_cq {
                crate::cq::destroy_cq((*c).send_cq);
                (*c).send_cq = std::ptr::null_mut();
            }
            (*c).recv_cq = std::ptr::null_mut();
        }
        if !(*c).recv_cq_channel.is_null() {
            crate::channel::destroy_comp_channel((*c).recv_cq_channel);
            if !(*c).send_cq_channel.is_null() && (*c).send_cq_channel != (*c).recv_cq_channel {
                crate::channel::destroy_comp_channel((*c).send_cq_channel);
                (*c).send_cq_channel = std::ptr::null_mut();
            }
            (*c).recv_cq_channel = std::ptr::null_mut();
        }
    }
}

/// `ucma_create_cqs`.
///
/// # Safety
/// `c` is a live C id of ours.
unsafe fn create_cqs(c: *mut rdma_cm_id, send: u32, recv: u32) -> Result<(), i32> {
    // SAFETY: per the contract.
    unsafe {
        let verbs = (*c).verbs;
        let one = |ch: &mut *mut ibv_comp_channel, cq: &mut *mut ibv_cq, n: u32| {
            *ch = crate::channel::create_comp_channel(verbs);
            if ch.is_null() {
                return Err(crate::util::errno());
            }
            *cq = crate::cq::create_cq(verbs, n as c_int, c.cast(), *ch, 0);
            if cq.is_null() {
                return Err(crate::util::errno());
            }
            Ok(())
        };
        let r = (|| {
            if recv > 0 {
                one(&mut (*c).recv_cq_channel, &mut (*c).recv_cq, recv)?;
            }
            if send > 0 {
                one(&mut (*c).send_cq_channel, &mut (*c).send_cq, send)?;
            }
            Ok(())
        })();
        if r.is_err() {
            destroy_cqs(c);
        }
        r
    }
}

/// `rdma_create_qp_ex`.
pub fn create_qp_ex_on(c: *mut rdma_cm_id, attr: &mut ibv_qp_init_attr_ex) -> Result<(), i32> {
    let o = Obj::<Id>::get(c).ok_or(libc::EINVAL)?;
    // SAFETY: `c` is live (we hold it); the fields are ours or the
    // program's pointers it gave us.
    unsafe {
        if !(*c).qp.is_null() || (*c).verbs.is_null() {
            return Err(libc::EINVAL);
        }
        if attr.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || attr.pd.is_null() {
            attr.comp_mask |= IBV_QP_INIT_ATTR_PD;
            attr.pd = (*c).pd;
        } else if (*attr.pd).context != (*c).verbs {
            return Err(libc::EINVAL);
        }
        if (!(*c).recv_cq.is_null() && !attr.recv_cq.is_null() && (*c).recv_cq != attr.recv_cq)
            || (!(*c).send_cq.is_null() && !attr.send_cq.is_null() && (*c).send_cq != attr.send_cq)
        {
            return Err(libc::EINVAL);
        }
        let send = if attr.send_cq.is_null() && (*c).send_cq.is_null() {
            attr.cap.max_send_wr
        } else {
            0
        };
        let recv = if attr.recv_cq.is_null() && (*c).recv_cq.is_null() {
            attr.cap.max_recv_wr
        } else {
            0
        };
        create_cqs(c, send, recv)?;
        if attr.send_cq.is_null() {
            attr.send_cq = (*c).send_cq;
        }
        if attr.recv_cq.is_null() {
            attr.recv_cq = (*c).recv_cq;
        }
        if !(*c).srq.is_null() && attr.srq.is_null() {
            attr.srq = (*c).srq;
        }
        let qp = crate::qp::create_qp_ex((*c).verbs, attr);
        if qp.is_null() {
            let e = crate::util::errno();
            destroy_cqs(c);
            return Err(e);
        }
        let q = qp_obj(qp).ok_or(libc::EINVAL)?;
        if let Err(e) = o.cm.attach_qp(&q.qp) {
            drop(q);
            crate::qp::destroy_qp(qp);
            destroy_cqs(c);
            return Err(e.errno());
        }
        (*c).pd = (*qp).pd;
        (*c).qp = qp;
    }
    Ok(())
}

/// `rdma_create_qp` on a C id.
pub fn create_qp_on(
    c: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: &mut ibv_qp_init_attr,
) -> Result<(), i32> {
    let mut ex: ibv_qp_init_attr_ex = crate::util::zeroed();
    ex.qp_context = attr.qp_context;
    ex.send_cq = attr.send_cq;
    ex.recv_cq = attr.recv_cq;
    ex.srq = attr.srq;
    ex.cap = attr.cap;
    ex.qp_type = attr.qp_type;
    ex.sq_sig_all = attr.sq_sig_all;
    ex.comp_mask = IBV_QP_INIT_ATTR_PD;
    // SAFETY: `c` is checked by create_qp_ex_on; reading `pd` of our id.
    ex.pd = if pd.is_null() {
        if Obj::<Id>::get(c).is_none() {
            return Err(libc::EINVAL);
        }
        unsafe { (*c).pd }
    } else {
        pd
    };
    let r = create_qp_ex_on(c, &mut ex);
    attr.send_cq = ex.send_cq;
    attr.recv_cq = ex.recv_cq;
    attr.srq = ex.srq;
    attr.cap = ex.cap;
    r
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_create_qp`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard_neg(|| {
        super::device::init();
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's structure.
        create_qp_on(id, pd, unsafe { &mut *attr })
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_create_qp_ex`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn create_qp_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    guard_neg(|| {
        super::device::init();
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's structure.
        create_qp_ex_on(id, unsafe { &mut *attr })
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_destroy_qp`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn destroy_qp(id: *mut rdma_cm_id) {
    guard((), || {
        let Some(o) = Obj::<Id>::get(id) else {
            return;
        };
        o.cm.detach_qp();
        // SAFETY: our id; its QP and CQs are ours.
        unsafe {
            let qp = std::mem::replace(&mut (*id).qp, std::ptr::null_mut());
            if !qp.is_null() {
                crate::qp::destroy_qp(qp);
            }
            destroy_cqs(id);
        }
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_create_srq_ex`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn create_srq_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_srq_init_attr_ex,
) -> c_int {
    guard_neg(|| {
        let _o = Obj::<Id>::get(id).ok_or(libc::EINVAL)?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: our id, the caller's structure.
        unsafe {
            let a = &mut *attr;
            if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE == 0 {
                return Err(libc::EINVAL);
            }
            if a.srq_type != IBV_SRQT_BASIC {
                return Err(libc::EOPNOTSUPP); // XRC
            }
            if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 || a.pd.is_null() {
                a.pd = (*id).pd;
                a.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
            }
            let srq = crate::srq::create_srq_ex((*id).verbs, a);
            if srq.is_null() {
                let e = crate::util::errno();
                destroy_cqs(id);
                return Err(e);
            }
            if (*id).pd.is_null() {
                (*id).pd = a.pd;
            }
            (*id).srq = srq;
        }
        Ok(())
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_create_srq`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    guard_neg(|| {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        let mut ex: ibv_srq_init_attr_ex = crate::util::zeroed();
        // SAFETY: the caller's structure.
        unsafe {
            ex.srq_context = (*attr).srq_context;
            ex.attr = (*attr).attr;
        }
        ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
        ex.srq_type = IBV_SRQT_BASIC;
        ex.pd = pd;
        // SAFETY: forwarded.
        let r = unsafe { create_srq_ex(id, &mut ex) };
        // SAFETY: the caller's structure.
        unsafe { (*attr).attr = ex.attr };
        if r == 0 {
            Ok(())
        } else {
            Err(crate::util::errno())
        }
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_destroy_srq`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn destroy_srq(id: *mut rdma_cm_id) {
    guard((), || {
        if Obj::<Id>::get(id).is_none() {
            return;
        }
        // SAFETY: our id and its SRQ.
        unsafe {
            let s = std::mem::replace(&mut (*id).srq, std::ptr::null_mut());
            if !s.is_null() {
                crate::srq::destroy_srq(s);
            }
            destroy_cqs(id);
        }
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_create_ep`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard_neg(|| {
        if id.is_null() || res.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's address information.
        let r = unsafe { &*res };
        let c = create_id2(
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            r.ai_port_space,
            r.ai_qp_type,
        )?;
        let fail = |e: i32| {
            // SAFETY: the id we just made.
            unsafe { destroy_ep(c) };
            Err(e)
        };
        let o = Obj::<Id>::get(c).ok_or(libc::EINVAL)?;
        if r.ai_connect_len > 0 && !r.ai_connect.is_null() {
            // SAFETY: the caller's connect data of the length it gives.
            let d =
                unsafe { std::slice::from_raw_parts(r.ai_connect.cast::<u8>(), r.ai_connect_len) };
            o.c.lock().unwrap_or_else(|e| e.into_inner()).connect_data = d.to_vec();
        }
        if r.ai_flags & RAI_PASSIVE != 0 {
            // SAFETY: the caller's address.
            let Some(src) = (unsafe { sockaddr_in(r.ai_src_addr) }) else {
                return fail(libc::EINVAL);
            };
            // SAFETY: forwarded to our own entry point.
            if unsafe { super::id::bind_addr(c, r.ai_src_addr) } != 0 {
                return fail(crate::util::errno());
            }
            let _ = src;
            if !pd.is_null() {
                // SAFETY: our id.
                unsafe { (*c).pd = pd };
            }
            if !qp_init_attr.is_null() {
                // SAFETY: the caller's structure (copied).
                let mut a = unsafe { std::ptr::read(qp_init_attr) };
                a.qp_type = r.ai_qp_type;
                o.c.lock().unwrap_or_else(|e| e.into_inner()).qp_init_attr =
                    Some(Box::new(QpInitAttr(a)));
            }
        } else {
            // SAFETY: forwarded to our own entry points.
            unsafe {
                if super::id::resolve_addr(c, r.ai_src_addr, r.ai_dst_addr, 2000) != 0 {
                    return fail(crate::util::errno());
                }
                // A route rdma_getaddrinfo gave (ibacm's) is set as is
                // (librdmacm's rdma_create_ep); none is resolved.
                if r.ai_route_len > 0 && !r.ai_route.is_null() {
                    if let Err(e) = super::options::set_route(c, r.ai_route, r.ai_route_len) {
                        return fail(e);
                    }
                } else if super::id::resolve_route(c, 2000) != 0 {
                    return fail(crate::util::errno());
                }
                if !qp_init_attr.is_null() {
                    (*qp_init_attr).qp_type = r.ai_qp_type;
                    if let Err(e) = create_qp_on(c, pd, &mut *qp_init_attr) {
                        return fail(e);
                    }
                }
            }
        }
        // SAFETY: the caller's output pointer.
        unsafe { *id = c };
        Ok(())
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_destroy_ep`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn destroy_ep(id: *mut rdma_cm_id) {
    guard((), || {
        let Some(o) = Obj::<Id>::get(id) else {
            return;
        };
        // SAFETY: our id.
        unsafe {
            if !(*id).qp.is_null() {
                destroy_qp(id);
            }
            if !(*id).srq.is_null() {
                destroy_srq(id);
            }
        }
        o.c.lock().unwrap_or_else(|e| e.into_inner()).qp_init_attr = None;
        drop(o);
        // SAFETY: forwarded.
        unsafe { destroy_id(id) };
    })
}
