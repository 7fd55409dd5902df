//! rdma_cm calls on an id besides its life and connection (id.rs): the
//! QP attributes for a state (`rdma_init_qp_attr`), options, moving to
//! another channel, the ports, ECE.

use super::event::{ack_cm_event, new_channel, Channel};
use super::ffi::*;
use super::id::*;
use crate::ffi::{ibv_ah_attr, ibv_ece, ibv_qp_attr};
use crate::handle::Obj;
use crate::util::{guard, guard_neg};
use softrdma::rdma_cm::QpState;
use std::ffi::{c_int, c_void};

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_init_qp_attr`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn init_qp_attr(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    guard_neg(|| {
        let o = get(id)?;
        if attr.is_null() || mask.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's structures.
        let (a, m) = unsafe { (&mut *attr, &mut *mask) };
        let state = match a.qp_state {
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            6 => QpState::Err,
            _ => return Err(libc::EINVAL),
        };
        let q = o.cm.init_qp_attr(state).map_err(|e| e.errno())?;
        let s = &q.attr;
        a.qp_access_flags = s.qp_access_flags;
        a.pkey_index = s.pkey_index;
        a.port_num = s.port_num;
        a.qkey = s.qkey;
        a.path_mtu = s.path_mtu as c_int;
        a.dest_qp_num = s.dest_qp_num.value();
        a.rq_psn = s.rq_psn.value();
        a.sq_psn = s.sq_psn.value();
        a.max_dest_rd_atomic = s.max_dest_rd_atomic;
        a.max_rd_atomic = s.max_rd_atomic;
        a.min_rnr_timer = s.min_rnr_timer;
        a.timeout = s.timeout;
        a.retry_cnt = s.retry_cnt;
        a.rnr_retry = s.rnr_retry;
        let mut ah = ibv_ah_attr::default();
        ah.grh.dgid.raw = s.ah_attr.dgid.octets();
        ah.grh.flow_label = s.ah_attr.flow_label;
        ah.grh.sgid_index = 0;
        ah.grh.hop_limit = s.ah_attr.hop_limit;
        ah.grh.traffic_class = s.ah_attr.traffic_class;
        ah.sl = s.ah_attr.sl;
        ah.is_global = 1;
        ah.port_num = s.ah_attr.port_num.max(1);
        a.ah_attr = ah;
        *m = q.mask.0 as c_int;
        Ok(())
    })
}

/// `rdma_create_ep`'s route from `rdma_getaddrinfo` (`ai_route`): set as
/// `RDMA_OPTION_IB_PATH`, then completed as `rdma_resolve_route` is.
///
/// # Safety
/// `route` covers `len` bytes.
pub(super) unsafe fn set_route(
    id: *mut rdma_cm_id,
    route: *mut c_void,
    len: usize,
) -> Result<(), i32> {
    // SAFETY: forwarded per the contract.
    if unsafe { set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, route, len) } != 0 {
        return Err(crate::util::errno());
    }
    let o = get(id)?;
    complete(&o)
}

/// `struct ibv_path_data` (`<infiniband/sa.h>`): flags, reserved, then
/// the IBA PathRecord (IBA 15.2.5.16) in network byte order.
const PATH_DATA_LEN: usize = 8 + 64;
/// The one entry `RDMA_OPTION_IB_PATH` takes (as the kernel's
/// `ucma_set_ib_path`): GMP | PRIMARY | BIDIRECTIONAL (OUTBOUND |
/// INBOUND_REVERSE).
const PATH_FLAGS_WANTED: u32 = 1 | (1 << 1) | (1 << 3) | (1 << 5);

/// The primary bidirectional path of an `ibv_path_data` array: none, or a
/// length that is not a whole number of entries, is None (EINVAL).
fn ib_path(b: &[u8]) -> Option<softrdma::rdma_cm::Path> {
    if b.is_empty() || !b.len().is_multiple_of(PATH_DATA_LEN) {
        return None;
    }
    let e = b
        .chunks_exact(PATH_DATA_LEN)
        .find(|e| u32::from_ne_bytes([e[0], e[1], e[2], e[3]]) == PATH_FLAGS_WANTED)?;
    let r = &e[8..];
    let be16 = |i: usize| u16::from_be_bytes([r[i], r[i + 1]]);
    let gid = |i: usize| {
        let mut g = [0u8; 16];
        g.copy_from_slice(&r[i..i + 16]);
        softrdma::Gid(g)
    };
    let flow_hop = u32::from_be_bytes([r[44], r[45], r[46], r[47]]);
    Some(softrdma::rdma_cm::Path {
        dgid: gid(8),
        sgid: gid(24),
        flow_label: (flow_hop >> 8) & 0xf_ffff,
        hop_limit: flow_hop as u8,
        traffic_class: r[48],
        pkey: softrdma::PKey(be16(50)),
        sl: (be16(52) & 0xf) as u8,
        mtu: r[54] & 0x3f,
        rate: r[55] & 0x3f,
        packet_life_time: r[56] & 0x3f,
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_set_option`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: usize,
) -> c_int {
    guard_neg(|| {
        let o = get(id)?;
        if val.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's option of `len` bytes (checked per option).
        let u8_at = || unsafe { *(val as *const u8) };
        // SAFETY: as above.
        let int_at = || unsafe { (val as *const c_int).read_unaligned() };
        let r = match (level, name) {
            (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) if len == 1 => o.cm.set_tos(u8_at()),
            (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) if len == 1 => {
                o.cm.set_ack_timeout(u8_at())
            }
            (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR) if len == 4 => {
                o.cm.set_reuseaddr(int_at() != 0)
            }
            (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY) if len == 4 => o.cm.set_afonly(int_at() != 0),
            (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS)
            | (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT)
            | (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR)
            | (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY) => return Err(libc::EINVAL),
            (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) => {
                // SAFETY: the caller's array of `len` bytes.
                let b = unsafe { std::slice::from_raw_parts(val as *const u8, len) };
                let path = ib_path(b).ok_or(libc::EINVAL)?;
                let r = o.cm.set_ib_path(path);
                refresh(&o);
                r
            }
            _ => return Err(libc::ENOSYS),
        };
        r.map_err(|e| e.errno())
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_migrate_id`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn migrate_id(id: *mut rdma_cm_id, ch: *mut rdma_event_channel) -> c_int {
    guard_neg(|| {
        let o = get(id)?;
        let was_sync = lock(&o).sync;
        if was_sync && ch.is_null() {
            return Err(libc::EINVAL);
        }
        let (ch, sync) = if ch.is_null() {
            (new_channel()?, true)
        } else {
            (ch, false)
        };
        let chan = Obj::<Channel>::get(ch).ok_or(libc::EINVAL)?;
        if was_sync {
            // SAFETY: our allocation.
            let ev = unsafe { std::mem::replace(&mut (*o.repr()).event, std::ptr::null_mut()) };
            if !ev.is_null() {
                // SAFETY: an event we handed out.
                unsafe { ack_cm_event(ev) };
            }
        }
        o.cm.migrate(&chan.ch).map_err(|e| e.errno())?;
        let mut st = lock(&o);
        if was_sync && st.own_chan != 0 {
            drop(Obj::<Channel>::take(st.own_chan as *mut rdma_event_channel));
        }
        st.sync = sync;
        st.own_chan = if sync { ch as usize } else { 0 };
        // SAFETY: our allocation.
        unsafe { (*o.repr()).channel = ch };
        Ok(())
    })
}

/// Port of `route.addr.src` or `dst` (network order), as librdmacm reads
/// it from the id.
fn port_of(s: &sockaddr_storage) -> u16 {
    let fam = u16::from_ne_bytes([s.0[0], s.0[1]]) as c_int;
    if fam == libc::AF_INET || fam == libc::AF_INET6 {
        u16::from_ne_bytes([s.0[2], s.0[3]])
    } else {
        0
    }
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_get_src_port`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn get_src_port(id: *mut rdma_cm_id) -> u16 {
    guard(0, || {
        if id.is_null() {
            return 0;
        }
        // SAFETY: the program's id (librdmacm reads it without checks).
        port_of(unsafe { &(*id).route.addr.src_storage })
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_get_dst_port`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn get_dst_port(id: *mut rdma_cm_id) -> u16 {
    guard(0, || {
        if id.is_null() {
            return 0;
        }
        // SAFETY: as above.
        port_of(unsafe { &(*id).route.addr.dst_storage })
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_set_local_ece`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    guard_neg(|| {
        let o = get(id)?;
        // SAFETY: our allocation, and the caller's structure.
        unsafe {
            if ece.is_null()
                || !(*id).qp.is_null()
                || (*ece).vendor_id == 0
                || (*ece).comp_mask != 0
            {
                return Err(libc::EINVAL);
            }
            lock(&o).local_ece = ((*ece).vendor_id, (*ece).options);
        }
        Ok(())
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_get_remote_ece`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    guard_neg(|| {
        let _o = get(id)?;
        // SAFETY: as above. Peers over RoCE send no ECE (vendor ID 0).
        unsafe {
            if ece.is_null() || !(*id).qp.is_null() {
                return Err(libc::EINVAL);
            }
            (*ece).vendor_id = 0;
            (*ece).options = 0;
            (*ece).comp_mask = 0;
        }
        Ok(())
    })
}
