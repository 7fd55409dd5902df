//! `rdma_getaddrinfo` / `rdma_freeaddrinfo`: getaddrinfo(3) and a
//! conversion of its first result, as librdmacm's addrinfo.c does for IP
//! addresses (no ibacm route lookup: `ai_route` stays NULL, and
//! `rdma_create_ep` then resolves the route itself).

use super::ffi::*;
use crate::ffi::{IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD};
use crate::util::{guard, set_errno};
use std::ffi::{c_char, c_int};

/// A malloc'ed copy of `len` bytes.
///
/// # Safety
/// `src` is valid for `len` bytes.
unsafe fn copy_addr(src: *const libc::sockaddr, len: u32) -> Result<*mut libc::sockaddr, c_int> {
    // SAFETY: malloc of a non-zero size, checked.
    let p = unsafe { libc::malloc(len.max(1) as usize) } as *mut libc::sockaddr;
    if p.is_null() {
        return Err(libc::EAI_MEMORY);
    }
    // SAFETY: both valid for `len` bytes, distinct allocations.
    unsafe { std::ptr::copy_nonoverlapping(src.cast::<u8>(), p.cast::<u8>(), len as usize) };
    Ok(p)
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_getaddrinfo`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    guard(libc::EAI_SYSTEM, || {
        if (node.is_null() && service.is_null() && hints.is_null()) || res.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        super::device::init();
        // SAFETY: calloc, checked; freed by rdma_freeaddrinfo.
        let rai =
            unsafe { libc::calloc(1, std::mem::size_of::<rdma_addrinfo>()) } as *mut rdma_addrinfo;
        if rai.is_null() {
            set_errno(libc::ENOMEM);
            return -1;
        }
        // SAFETY: our zeroed allocation and the caller's hints (or none).
        let r = unsafe { fill(node, service, hints.as_ref(), &mut *rai) };
        match r {
            Ok(()) => {
                // SAFETY: the caller's output pointer.
                unsafe { *res = rai };
                0
            }
            Err(e) => {
                // SAFETY: ours, partly filled.
                unsafe { freeaddrinfo(rai) };
                e
            }
        }
    })
}

/// Fills `rai` (zeroed) from getaddrinfo's first answer.
///
/// # Safety
/// `node`/`service` are NULL or C strings; `hints`' addresses cover their
/// lengths.
unsafe fn fill(
    node: *const c_char,
    service: *const c_char,
    hints: Option<&rdma_addrinfo>,
    rai: &mut rdma_addrinfo,
) -> Result<(), c_int> {
    if node.is_null() && service.is_null() {
        let h = hints.ok_or(libc::EAI_NONAME)?;
        rai.ai_flags = h.ai_flags;
        rai.ai_family = h.ai_family;
        rai.ai_qp_type = h.ai_qp_type;
        rai.ai_port_space = h.ai_port_space;
        if h.ai_dst_len > 0 && !h.ai_dst_addr.is_null() {
            // SAFETY: per the contract.
            rai.ai_dst_addr = unsafe { copy_addr(h.ai_dst_addr, h.ai_dst_len) }?;
            rai.ai_dst_len = h.ai_dst_len;
        }
    } else {
        // An all-zero addrinfo is valid hints.
        let mut ai: libc::addrinfo = crate::util::zeroed();
        if let Some(h) = hints {
            if h.ai_flags & RAI_PASSIVE != 0 {
                ai.ai_flags = libc::AI_PASSIVE;
            }
            if h.ai_flags & RAI_NUMERICHOST != 0 {
                ai.ai_flags |= libc::AI_NUMERICHOST;
            }
            ai.ai_family = h.ai_family;
            ai.ai_socktype = match h.ai_qp_type {
                IBV_QPT_RC | IBV_QPT_UC => libc::SOCK_STREAM,
                IBV_QPT_UD => libc::SOCK_DGRAM,
                _ => 0,
            };
            ai.ai_protocol = match h.ai_port_space {
                RDMA_PS_TCP => libc::IPPROTO_TCP,
                RDMA_PS_UDP | RDMA_PS_IPOIB => libc::IPPROTO_UDP,
                RDMA_PS_IB if ai.ai_socktype == libc::SOCK_STREAM => libc::IPPROTO_TCP,
                RDMA_PS_IB if ai.ai_socktype == libc::SOCK_DGRAM => libc::IPPROTO_UDP,
                _ => 0,
            };
        }
        let mut out: *mut libc::addrinfo = std::ptr::null_mut();
        // SAFETY: C strings or NULL, valid hints, an output pointer.
        let r = unsafe {
            libc::getaddrinfo(
                node,
                service,
                if hints.is_some() {
                    &ai
                } else {
                    std::ptr::null()
                },
                &mut out,
            )
        };
        if r != 0 {
            return Err(r);
        }
        // SAFETY: getaddrinfo's first answer.
        let a = unsafe { &*out };
        let h = hints;
        rai.ai_qp_type = match h.map_or(0, |h| h.ai_qp_type) {
            0 => match a.ai_socktype {
                libc::SOCK_STREAM => IBV_QPT_RC,
                libc::SOCK_DGRAM => IBV_QPT_UD,
                _ => 0,
            },
            t => t,
        };
        rai.ai_port_space = match h.map_or(0, |h| h.ai_port_space) {
            0 => match a.ai_protocol {
                libc::IPPROTO_TCP => RDMA_PS_TCP,
                libc::IPPROTO_UDP => RDMA_PS_UDP,
                _ => 0,
            },
            ps => ps,
        };
        rai.ai_family = a.ai_family;
        // SAFETY: getaddrinfo's address of `ai_addrlen` bytes.
        let copy = unsafe { copy_addr(a.ai_addr, a.ai_addrlen) };
        let passive = a.ai_flags & libc::AI_PASSIVE != 0;
        // SAFETY: getaddrinfo's list, freed once.
        unsafe { libc::freeaddrinfo(out) };
        let copy = copy?;
        if passive {
            rai.ai_flags = RAI_PASSIVE;
            rai.ai_src_addr = copy;
            rai.ai_src_len = a.ai_addrlen;
        } else {
            rai.ai_dst_addr = copy;
            rai.ai_dst_len = a.ai_addrlen;
        }
    }
    if rai.ai_src_len == 0 {
        if let Some(h) = hints.filter(|h| h.ai_src_len > 0 && !h.ai_src_addr.is_null()) {
            // SAFETY: per the contract.
            rai.ai_src_addr = unsafe { copy_addr(h.ai_src_addr, h.ai_src_len) }?;
            rai.ai_src_len = h.ai_src_len;
        }
    }
    Ok(())
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_freeaddrinfo`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn freeaddrinfo(res: *mut rdma_addrinfo) {
    guard((), || {
        let mut p = res;
        while !p.is_null() {
            // SAFETY: a list rdma_getaddrinfo made (malloc'ed members).
            unsafe {
                let next = (*p).ai_next;
                for m in [
                    (*p).ai_connect,
                    (*p).ai_route,
                    (*p).ai_src_canonname.cast(),
                    (*p).ai_dst_canonname.cast(),
                    (*p).ai_src_addr.cast(),
                    (*p).ai_dst_addr.cast(),
                ] {
                    libc::free(m);
                }
                libc::free(p.cast());
                p = next;
            }
        }
    })
}
