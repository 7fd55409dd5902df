//! The data path: `ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv`,
//! reached through `context->ops` (pointers checked by their magic word
//! only), and the conversion of C work requests.

use crate::ah::Ah;
use crate::ffi::*;
use crate::handle::Obj;
use crate::qp::{qp_fast, Qp};
use crate::srq::Srq;
use crate::util::guard_data_errno;
use softrdma::{QKey, Qpn, RKey, RecvWr, SendFlags, SendWr, Sge, UdDest, WrOpcode};
use std::ffi::c_int;

impl ibv_sge {
    /// The entry as softrdma's.
    pub(crate) fn sge(&self) -> Sge {
        Sge {
            addr: self.addr,
            length: self.length,
            lkey: self.lkey,
        }
    }
}

/// A work request's SGEs: EINVAL for a negative count, a NULL list with
/// entries, or more than `MAX_SGE`.
///
/// # Safety
/// With `n > 0` and `list` not NULL, `list` points to `n` SGEs that stay
/// valid for the returned lifetime.
unsafe fn sg_list<'a>(list: *const ibv_sge, n: c_int) -> Result<&'a [ibv_sge], i32> {
    if n < 0 || (n > 0 && list.is_null()) || n as u32 > softrdma::limits::MAX_SGE {
        return Err(libc::EINVAL);
    }
    if n == 0 {
        return Ok(&[]);
    }
    // SAFETY: per the contract (checked non-NULL, n > 0).
    Ok(unsafe { std::slice::from_raw_parts(list, n as usize) })
}

/// Converts a C receive request.
///
/// # Safety
/// `w` points to a valid request whose `sg_list` has `num_sge` entries.
unsafe fn recv_wr(w: &ibv_recv_wr) -> Result<RecvWr, i32> {
    // SAFETY: per the contract.
    let sges = unsafe { sg_list(w.sg_list, w.num_sge) }?;
    Ok(RecvWr {
        wr_id: w.wr_id,
        sg_list: sges.iter().map(ibv_sge::sge).collect(),
    })
}

/// Walks a list of receive requests, posting each with `post`; on failure
/// sets `*bad` to the failing request and returns its errno.
unsafe fn post_recv_list(
    mut w: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    mut post: impl FnMut(RecvWr) -> Result<(), i32>,
) -> c_int {
    while !w.is_null() {
        // SAFETY: the program passes a valid list.
        let r = unsafe { recv_wr(&*w) }.and_then(&mut post);
        if let Err(e) = r {
            if !bad.is_null() {
                // SAFETY: valid output pointer.
                unsafe { *bad = w };
            }
            return e;
        }
        // SAFETY: as above.
        w = unsafe { (*w).next };
    }
    0
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn post_srq_recv(
    s: *mut ibv_srq,
    w: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    guard_data_errno(|| {
        // SAFETY: reached through `context->ops` with the program's SRQ.
        let Some(x) = (unsafe { Obj::<Srq>::fast(s) }) else {
            if !bad.is_null() {
                // SAFETY: valid output pointer.
                unsafe { *bad = w };
            }
            return libc::EINVAL;
        };
        // SAFETY: forwarded.
        unsafe { post_recv_list(w, bad, |r| x.srq.post_recv(r).map_err(|e| e.errno())) }
    })
}

/// The UD destination of an address handle pointer.
pub fn ud_dest(ah: *mut ibv_ah, qpn: u32, qkey: u32) -> Result<UdDest, i32> {
    // SAFETY: the program passes an AH it created (data path: the magic
    // word only).
    let a = unsafe { Obj::<Ah>::fast(ah) }.ok_or(libc::EINVAL)?;
    Ok(UdDest {
        ah: a.ah.id(),
        remote_qpn: Qpn::new(qpn),
        remote_qkey: QKey(qkey),
    })
}

/// Inline data gathered from SGEs (program memory, read at post time).
///
/// The bytes may lie in a registered region a remote WRITE lands in while
/// we read them (the engine's thread, or a peer on the same host), so they
/// are never seen through a `&[u8]`: `softrdma::memory::copy_out` reads
/// them through the raw pointer with atomic/assembly copies, like every
/// other access to region memory (DESIGN promise 6, memory.rs rule 1).
///
/// # Safety
/// Each SGE must describe readable memory of the program.
pub unsafe fn gather_inline(sges: &[ibv_sge]) -> Result<Vec<u8>, i32> {
    let total: u64 = sges.iter().map(|s| s.length as u64).sum();
    if total > softrdma::limits::MAX_INLINE_DATA as u64 {
        return Err(libc::EINVAL);
    }
    let mut v = vec![0u8; total as usize];
    let mut at = 0usize;
    for s in sges {
        if s.length == 0 {
            continue;
        }
        if s.addr == 0 {
            return Err(libc::EINVAL);
        }
        let n = s.length as usize;
        // SAFETY: per the contract, `addr .. addr + length` is readable
        // for the duration of the call (inline data is copied at post
        // time); `v` has room for every SGE (sized from their sum).
        unsafe { softrdma::memory::copy_out(s.addr as usize as *const u8, &mut v[at..at + n]) };
        at += n;
    }
    Ok(v)
}

/// Converts a C send request.
///
/// # Safety
/// `w` points to a valid request whose `sg_list` has `num_sge` entries.
unsafe fn send_wr(q: &Qp, w: &ibv_send_wr) -> Result<SendWr, i32> {
    let op = u32::try_from(w.opcode)
        .ok()
        .and_then(WrOpcode::from_ibv)
        .ok_or(if (10..=13).contains(&w.opcode) {
            libc::EOPNOTSUPP // TSO, driver opcodes
        } else {
            libc::EINVAL
        })?;
    if op == WrOpcode::Flush {
        // `ibv_send_wr` has no FLUSH fields (type, level): only
        // `ibv_wr_flush` can post one.
        return Err(libc::EINVAL);
    }
    // SAFETY: per the contract.
    let sges = unsafe { sg_list(w.sg_list, w.num_sge) }?;
    let mut wr = SendWr::new(w.wr_id, op);
    wr.flags = SendFlags(w.send_flags & 0xf);
    if op == WrOpcode::BindMw {
        // rxe's validate_send_wr: a bind carries no data and no immediate.
        if w.num_sge != 0 || w.imm_data != 0 || q.is_ud() {
            return Err(libc::EINVAL);
        }
        let b = w.bind_mw;
        let info = ibv_mw_bind_info {
            mr: b.bind_info_mr,
            addr: b.bind_info_addr,
            length: b.bind_info_length,
            mw_access_flags: b.bind_info_mw_access_flags,
        };
        wr.flags = SendFlags(wr.flags.0 & !IBV_SEND_INLINE);
        wr.bind = Some(crate::qpex::bind_of(b.mw, b.rkey, &info)?);
        return Ok(wr);
    }
    if op == WrOpcode::AtomicWrite {
        // The 8 bytes are read now, from the SGEs (or inline data).
        // SAFETY: the SGEs describe the program's memory.
        wr.inline_data = unsafe { gather_inline(sges) }?;
        if wr.inline_data.len() != 8 {
            return Err(libc::EINVAL);
        }
        wr.flags = wr.flags.with(SendFlags::INLINE);
        // SAFETY: as below (union of plain integers and pointers).
        let r = unsafe { w.wr.rdma };
        wr.remote_addr = r.remote_addr;
        wr.rkey = RKey(r.rkey);
        return Ok(wr);
    }
    if wr.flags.contains(SendFlags::INLINE) && !op.is_read_or_atomic() {
        // SAFETY: the SGEs describe the program's memory.
        wr.inline_data = unsafe { gather_inline(sges) }?;
    } else {
        wr.flags = SendFlags(wr.flags.0 & !IBV_SEND_INLINE);
        wr.sg_list = sges.iter().map(ibv_sge::sge).collect();
    }
    match op {
        WrOpcode::RdmaWriteWithImm | WrOpcode::SendWithImm => {
            wr.imm_data = u32::from_be(w.imm_data)
        }
        WrOpcode::SendWithInv | WrOpcode::LocalInv => wr.invalidate_rkey = RKey(w.imm_data),
        _ => {}
    }
    // SAFETY (all union reads below): the members are plain integers and
    // pointers; any bit pattern is a valid value.
    match op {
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead => {
            let r = unsafe { w.wr.rdma };
            wr.remote_addr = r.remote_addr;
            wr.rkey = RKey(r.rkey);
        }
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
            // SAFETY: as above (union of plain integers and pointers).
            let a = unsafe { w.wr.atomic };
            wr.remote_addr = a.remote_addr;
            wr.rkey = RKey(a.rkey);
            wr.compare_add = a.compare_add;
            wr.swap = a.swap;
        }
        _ => {}
    }
    if q.is_ud() {
        // SAFETY: as above (union of plain integers and pointers).
        let u = unsafe { w.wr.ud };
        wr.ud = Some(ud_dest(u.ah, u.remote_qpn, u.remote_qkey)?);
    }
    if q.is_xrc_send() {
        // `wr.qp_type.xrc.remote_srqn`: the XRC SRQ at the target.
        wr.remote_srqn = w.qp_type.xrc.remote_srqn;
    }
    Ok(wr)
}

/// Requests converted and posted under one lock per batch.
const POST_BATCH: usize = 32;

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn post_send(
    q: *mut ibv_qp,
    w: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    guard_data_errno(|| {
        let set_bad = |p: *mut ibv_send_wr| {
            if !bad.is_null() {
                // SAFETY: valid output pointer.
                unsafe { *bad = p };
            }
        };
        // SAFETY: the program's QP (the verb's C contract).
        let Some(x) = (unsafe { qp_fast(q) }) else {
            set_bad(w);
            return libc::EINVAL;
        };
        // SAFETY: the program passes a valid list.
        if !w.is_null() && unsafe { (*w).next }.is_null() {
            // One request: the common case, no batch.
            // SAFETY: as above.
            let r =
                unsafe { send_wr(x, &*w) }.and_then(|wr| x.qp.post_send(wr).map_err(|e| e.errno()));
            return match r {
                Ok(()) => 0,
                Err(e) => {
                    set_bad(w);
                    e
                }
            };
        }
        let mut cur = w;
        let mut ptrs: Vec<*mut ibv_send_wr> = Vec::new();
        let mut wrs: Vec<SendWr> = Vec::new();
        while !cur.is_null() {
            ptrs.clear();
            wrs.clear();
            let mut conv_err = None;
            while !cur.is_null() && wrs.len() < POST_BATCH {
                // SAFETY: the program passes a valid list.
                match unsafe { send_wr(x, &*cur) } {
                    Ok(wr) => {
                        wrs.push(wr);
                        ptrs.push(cur);
                        // SAFETY: as above.
                        cur = unsafe { (*cur).next };
                    }
                    Err(e) => {
                        conv_err = Some(e);
                        break;
                    }
                }
            }
            if let Err((i, e)) = x.qp.post_send_batch(wrs.drain(..)) {
                set_bad(ptrs[i]);
                return e.errno();
            }
            if let Some(e) = conv_err {
                set_bad(cur);
                return e;
            }
        }
        0
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn post_recv(
    q: *mut ibv_qp,
    w: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    guard_data_errno(|| {
        // SAFETY: the program's QP (the verb's C contract).
        let Some(x) = (unsafe { qp_fast(q) }) else {
            if !bad.is_null() {
                // SAFETY: valid output pointer.
                unsafe { *bad = w };
            }
            return libc::EINVAL;
        };
        // SAFETY: forwarded.
        unsafe { post_recv_list(w, bad, |r| x.qp.post_recv(r).map_err(|e| e.errno())) }
    })
}
