//! The new post-send API (`ibv_qp_ex`, `ibv_wr_*`): perftest's default.
//!
//! `ibv_wr_start` opens a batch; each `ibv_wr_<opcode>` starts a request
//! with the `wr_id`/`wr_flags` the program stored in the `ibv_qp_ex` just
//! before; `ibv_wr_set_*` fill in its buffers or UD address;
//! `ibv_wr_complete` posts the batch under one lock and returns 0 or an
//! errno (the first error met while building discards the batch);
//! `ibv_wr_abort` discards it. The functions return nothing, so a bad
//! argument is remembered and reported by `ibv_wr_complete`.

use crate::ffi::*;
use crate::handle::Obj;
use crate::mw::mw_id;
use crate::post::{gather_inline, ud_dest};
use crate::qp::{qp_fast, Qp, WrBatch};
use crate::util::guard_data;
use softrdma::{Access, FlushSpec, MwBind, RKey, SendFlags, SendWr, Sge, WrOpcode};
use std::ffi::{c_int, c_void};

/// Installs the `wr_*` function pointers of a new QP (rdma-core 45's
/// `wr_flush` included, after the 44 structure).
pub fn fill_ops(c: &mut ibv_qp_ex) {
    c.comp_mask = 0;
    c.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    c.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    c.wr_bind_mw = Some(wr_bind_mw);
    c.wr_local_inv = Some(wr_local_inv);
    c.wr_rdma_read = Some(wr_rdma_read);
    c.wr_rdma_write = Some(wr_rdma_write);
    c.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    c.wr_send = Some(wr_send);
    c.wr_send_imm = Some(wr_send_imm);
    c.wr_send_inv = Some(wr_send_inv);
    c.wr_send_tso = Some(wr_send_tso);
    c.wr_set_ud_addr = Some(wr_set_ud_addr);
    c.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    c.wr_set_inline_data = Some(wr_set_inline_data);
    c.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    c.wr_set_sge = Some(wr_set_sge);
    c.wr_set_sge_list = Some(wr_set_sge_list);
    c.wr_start = Some(wr_start);
    c.wr_complete = Some(wr_complete);
    c.wr_abort = Some(wr_abort);
    c.wr_atomic_write = Some(wr_atomic_write);
    c.wr_flush = Some(wr_flush);
}

/// The QP of an `ibv_qp_ex` pointer (data path: the magic word only).
///
/// # Safety
/// As [`qp_fast`]: `q` is NULL or a QP the program got from us and has
/// not destroyed, passed to its own `wr_*` function pointers.
unsafe fn qpx<'a>(q: *mut ibv_qp_ex) -> Option<&'a Obj<Qp>> {
    // SAFETY: per the contract.
    unsafe { qp_fast(q.cast()) }
}

/// Runs `f` on the QP's batch (nothing for a pointer that is not ours).
fn with(x: Option<&Obj<Qp>>, f: impl FnOnce(&Obj<Qp>, &mut WrBatch)) {
    guard_data((), || {
        if let Some(x) = x {
            let mut b = x.batch.lock().unwrap_or_else(|e| e.into_inner());
            f(x, &mut b);
        }
    })
}

fn fail(b: &mut WrBatch, e: i32) {
    b.err.get_or_insert(e);
}

/// Starts a request of `op` with the program's current wr_id and flags.
fn begin<'b>(x: &Obj<Qp>, b: &'b mut WrBatch, op: WrOpcode) -> &'b mut SendWr {
    let c = x.repr();
    // SAFETY: fields of the QP's C structure, written by the program before
    // this call (never concurrently with it, by the API's contract).
    let (id, flags) = unsafe { ((*c).wr_id, (*c).wr_flags) };
    let mut wr = SendWr::new(id, op);
    wr.flags = SendFlags(flags & (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED));
    b.wrs.push(wr);
    b.wrs.last_mut().expect("just pushed")
}

/// The request being built, or an error recorded.
fn last(b: &mut WrBatch) -> Option<&mut SendWr> {
    if b.wrs.is_empty() {
        fail(b, libc::EINVAL);
    }
    b.wrs.last_mut()
}

/// `ibv_wr_atomic_cmp_swp`.
///
/// # Safety
/// The C contract of `ibv_wr_atomic_cmp_swp` (reached through the QP's own
/// function pointer): `q` a QP this library made and the program has
/// not destroyed, other pointers valid as the prototype says.
unsafe extern "C" fn wr_atomic_cmp_swp(
    q: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    compare: u64,
    swap: u64,
) {
    // SAFETY: the program's QP, through its own `wr_*` pointer.
    with(unsafe { qpx(q) }, |x, b| {
        let w = begin(x, b, WrOpcode::AtomicCmpAndSwp);
        w.rkey = RKey(rkey);
        w.remote_addr = addr;
        w.compare_add = compare;
        w.swap = swap;
    })
}

/// `ibv_wr_atomic_fetch_add`.
///
/// # Safety
/// The C contract of `ibv_wr_atomic_fetch_add` (reached through the QP's own
/// function pointer): `q` a QP this library made and the program has
/// not destroyed, other pointers valid as the prototype says.
unsafe extern "C" fn wr_atomic_fetch_add(q: *mut ibv_qp_ex, rkey: u32, addr: u64, add: u64) {
    // SAFETY: the program's QP, through its own `wr_*` pointer.
    with(unsafe { qpx(q) }, |x, b| {
        let w = begin(x, b, WrOpcode::AtomicFetchAndAdd);
        w.rkey = RKey(rkey);
        w.remote_addr = addr;
        w.compare_add = add;
    })
}

/// `ibv_wr_bind_mw`.
///
/// # Safety
/// The C contract of `ibv_wr_bind_mw` (reached through the QP's own
/// function pointer): `q` a QP this library made and the program has
/// not destroyed, other pointers valid as the prototype says.
unsafe extern "C" fn wr_bind_mw(
    q: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    // SAFETY: the program's QP, through its own `wr_*` pointer.
    with(unsafe { qpx(q) }, |x, b| {
        if x.is_ud() {
            return fail(b, libc::EINVAL);
        }
        // SAFETY: the program passes a valid bind description (or NULL).
        let Some(info) = (unsafe { info.as_ref() }) else {
            return fail(b, libc::EINVAL);
        };
        match bind_of(mw, rkey, info) {
            Ok(bind) => begin(x, b, WrOpcode::BindMw).bind = Some(bind),
            Err(e) => fail(b, e),
        }
    })
}

/// The core's bind request for window `mw`, key `rkey` and `info`.
pub fn bind_of(mw: *mut ibv_mw, rkey: u32, info: &ibv_mw_bind_info) -> Result<MwBind, i32> {
    let id = mw_id(mw).ok_or(libc::EINVAL)?;
    if info.mr.is_null() && info.length != 0 {
        return Err(libc::EINVAL);
    }
    let mr_lkey = if info.mr.is_null() {
        0
    } else {
        // SAFETY: the program passes one of its regions.
        unsafe { (*info.mr).lkey }
    };
    Ok(MwBind {
        mw: id,
        rkey: RKey(rkey),
        mr_lkey,
        addr: info.addr,
        length: info.length,
        access: Access(info.mw_access_flags),
    })
}

/// `ibv_wr_local_inv`.
///
/// # Safety
/// The C contract of `ibv_wr_local_inv` (reached through the QP's own
/// function pointer): `q` a QP this library made and the program has
/// not destroyed, other pointers valid as the prototype says.
unsafe extern "C" fn wr_local_inv(q: *mut ibv_qp_ex, rkey: u32) {
    // SAFETY: the program's QP, through its own `wr_*` pointer.
    with(unsafe { qpx(q) }, |x, b| {
        begin(x, b, WrOpcode::LocalInv).invalidate_rkey = RKey(rkey)
    })
}

/// `ibv_wr_rdma_read`.
///
/// # Safety
/// The C contract of `ibv_wr_rdma_read` (reached through the QP's own
/// function pointer): `q` a QP this library made and the program has
/// not destroyed, other pointers valid as the prototype says.
unsafe extern "C" fn wr_rdma_read(q: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    // SAFETY: the program's QP, through its own `wr_*` pointer.
    with(unsafe { qpx(q) }, |x, b| {
        let w = begin(x, b, WrOpcode::RdmaRead);
        w.rkey = RKey(rkey);
        w.remote_addr = addr;
    })
}

/// `ibv_wr_rdma_write`.
///
/// # Safety
/// The C contract of `ibv_wr_rdma_write` (reached through the QP's own
/// function pointer): `q` a QP this library made and the program has
/// not destroyed, other pointers valid as the prototype says.
unsafe extern "C" fn wr_rdma_write(q: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    // SAFETY: the program's QP, through its own `wr_*` pointer.
    with(unsafe { qpx(q) }, |x, b| {
        let w = begin(x, b, WrOpcode::RdmaWrite);
        w.rkey = RKey(rkey);
        w.remote_addr = addr;
    })
}

/// `ibv_wr_rdma_write_imm`.
///
/// # Safety
/// The C contract of `ibv_wr_rdma_write_imm` (reached through the QP's own
/// function pointer): `q` a QP this library made and the program has
/// not destroyed, other pointers valid as the prototype says.
unsafe extern "C" fn wr_rdma_write_imm(q: *mut ibv_qp_ex, rkey: u32, addr: u64, imm: u32) {
    // SAFETY: the program's QP, through its own `wr_*` pointer.
    with(unsafe { qpx(q) }, |x, b| {
        let w = begin(x, b, WrOpcode::RdmaWriteWithImm);
        w.rkey = RKey(rkey);
        w.remote_addr = addr;
        w.imm_data = u32::from_be(imm);
    })
}

/// `ibv_wr_send`.
///
/// # Safety
/// The C contract of `ibv_wr_send` (reached through the QP's own
/// function pointer): `q` a QP this library made and the program has
/// not destroyed, other pointers valid as the prototype says.
unsafe extern "C" fn wr_send(q: *mut ibv_qp_ex) {
    // SAFETY: the program's QP, through its own `wr_*` pointer.
    with(unsafe { qpx(q) }, |x, b| {
        begin(x, b, WrOpcode::Send);
    })
}

/// `ibv_wr_send_imm`.
///
/// # Safety
/// The C contract of `ibv_wr_send_imm` (reached through the QP's own
/// function pointer): `q` a QP this library made and the program has
/// not destroyed, other pointers valid as the prototype says.
unsafe extern "C" fn wr_send_imm(q: *mut ibv_qp_ex, imm: u32) {
    // SAFETY: the program's QP, through its own `wr_*` pointer.
    with(unsafe { qpx(q) }, |x, b| {
        begin(x, b, WrOpcode::SendWithImm).imm_data = u32::from_be(imm)
    })
}

/// `ibv_wr_send_inv`.
///
/// # Safety
/// The C contract of `ibv_wr_send_inv` (reached through the QP's own
/// function pointer): `q` a QP this library made and the program has
/// not destroyed, other pointers valid as the prototype says.
unsafe extern "C" fn wr_send_inv(q: *mut ibv_qp_ex, rkey: u32) {
    // SAFETY: the program's QP, through its own `wr_*` pointer.
    with(unsafe { qpx(q) }, |x, b| {
        begin(x, b, WrOpcode::SendWithInv).invalidate_rkey = RKey(rkey)
    })
}

/// `ibv_wr_send_tso`.
///
/// # Safety
/// The C contract of `ibv_wr_send_tso` (reached through the QP's own
/// function pointer): `q` a QP this library made and the program has
/// not destroyed, other pointers valid as the prototype says.
unsafe extern "C" fn wr_send_tso(q: *mut ibv_qp_ex, _hdr: *mut c_void, _sz: u16, _mss: u16) {
    // SAFETY: the program's QP, through its own `wr_*` pointer.
    with(unsafe { qpx(q) }, |_, b| fail(b, libc::EOPNOTSUPP))
}

/// `ibv_wr_set_ud_addr`.
///
/// # Safety
/// The C contract of `ibv_wr_set_ud_addr` (reached through the QP's own
/// function pointer): `q` a QP this library made and the program has
/// not destroyed, other pointers valid as the prototype says.
unsafe extern "C" fn wr_set_ud_addr(q: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    // SAFETY: the program's QP, through its own `wr_*` pointer.
    with(unsafe { qpx(q) }, |x, b| {
        if !x.is_ud() {
            return fail(b, libc::EINVAL);
        }
        match ud_dest(ah, qpn, qkey) {
            Ok(d) => {
                if let Some(w) = last(b) {
                    w.ud = Some(d);
                }
            }
            Err(e) => fail(b, e),
        }
    })
}

/// `ibv_wr_set_xrc_srqn`: the XRC SRQ at the target of the request being
/// built (XRC INI QPs only).
///
/// # Safety
/// The C contract of `ibv_wr_set_xrc_srqn` (reached through the QP's own
/// function pointer): `q` a QP this library made and the program has
/// not destroyed, other pointers valid as the prototype says.
unsafe extern "C" fn wr_set_xrc_srqn(q: *mut ibv_qp_ex, srqn: u32) {
    // SAFETY: the program's QP, through its own `wr_*` pointer.
    with(unsafe { qpx(q) }, |x, b| {
        if !x.is_xrc_send() {
            return fail(b, libc::EINVAL);
        }
        if let Some(w) = last(b) {
            w.remote_srqn = srqn;
        }
    })
}

/// The inline data of the request being built, gathered now.
///
/// # Safety
/// As [`gather_inline`]: each of `bufs` describes readable memory of the
/// program (the `ibv_wr_set_inline_data*` contract).
unsafe fn set_inline(b: &mut WrBatch, bufs: &[ibv_sge]) {
    // SAFETY: per the contract; copied now (inline semantics).
    match unsafe { gather_inline(bufs) } {
        Ok(v) => {
            if let Some(w) = last(b) {
                if w.opcode.is_read_or_atomic() {
                    b.err.get_or_insert(libc::EINVAL);
                    return;
                }
                w.inline_data = v;
                w.sg_list.clear();
                w.flags = w.flags.with(SendFlags::INLINE);
            }
        }
        Err(e) => fail(b, e),
    }
}

/// `ibv_wr_set_inline_data`.
///
/// # Safety
/// The C contract of `ibv_wr_set_inline_data` (reached through the QP's own
/// function pointer): `q` a QP this library made and the program has
/// not destroyed, other pointers valid as the prototype says.
unsafe extern "C" fn wr_set_inline_data(q: *mut ibv_qp_ex, addr: *mut c_void, len: usize) {
    // SAFETY: the program's QP, through its own `wr_*` pointer.
    with(unsafe { qpx(q) }, |_, b| {
        let Ok(length) = u32::try_from(len) else {
            return fail(b, libc::EINVAL);
        };
        // SAFETY: the program's buffer (the verb's contract).
        unsafe {
            set_inline(
                b,
                &[ibv_sge {
                    addr: addr as u64,
                    length,
                    lkey: 0,
                }],
            )
        }
    })
}

/// `ibv_wr_set_inline_data_list`.
///
/// # Safety
/// The C contract of `ibv_wr_set_inline_data_list` (reached through the QP's own
/// function pointer): `q` a QP this library made and the program has
/// not destroyed, other pointers valid as the prototype says.
unsafe extern "C" fn wr_set_inline_data_list(
    q: *mut ibv_qp_ex,
    n: usize,
    bufs: *const ibv_data_buf,
) {
    // SAFETY: the program's QP, through its own `wr_*` pointer.
    with(unsafe { qpx(q) }, |_, b| {
        if n > 0 && bufs.is_null() || n > softrdma::limits::MAX_SGE as usize {
            return fail(b, libc::EINVAL);
        }
        let list = if n == 0 {
            &[][..]
        } else {
            // SAFETY: the program passes `n` buffers.
            unsafe { std::slice::from_raw_parts(bufs, n) }
        };
        let mut sges = Vec::with_capacity(n);
        for d in list {
            let Ok(length) = u32::try_from(d.length) else {
                return fail(b, libc::EINVAL);
            };
            sges.push(ibv_sge {
                addr: d.addr as u64,
                length,
                lkey: 0,
            });
        }
        // SAFETY: the program's buffers (the verb's contract).
        unsafe { set_inline(b, &sges) }
    })
}

/// `ibv_wr_set_sge`.
///
/// # Safety
/// The C contract of `ibv_wr_set_sge` (reached through the QP's own
/// function pointer): `q` a QP this library made and the program has
/// not destroyed, other pointers valid as the prototype says.
unsafe extern "C" fn wr_set_sge(q: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    // SAFETY: the program's QP, through its own `wr_*` pointer.
    with(unsafe { qpx(q) }, |_, b| {
        if let Some(w) = last(b) {
            w.sg_list.clear();
            w.sg_list.push(Sge { addr, length, lkey });
        }
    })
}

/// `ibv_wr_set_sge_list`.
///
/// # Safety
/// The C contract of `ibv_wr_set_sge_list` (reached through the QP's own
/// function pointer): `q` a QP this library made and the program has
/// not destroyed, other pointers valid as the prototype says.
unsafe extern "C" fn wr_set_sge_list(q: *mut ibv_qp_ex, n: usize, sges: *const ibv_sge) {
    // SAFETY: the program's QP, through its own `wr_*` pointer.
    with(unsafe { qpx(q) }, |_, b| {
        if n > 0 && sges.is_null() || n > softrdma::limits::MAX_SGE as usize {
            return fail(b, libc::EINVAL);
        }
        let list = if n == 0 {
            &[][..]
        } else {
            // SAFETY: the program passes `n` entries.
            unsafe { std::slice::from_raw_parts(sges, n) }
        };
        if let Some(w) = last(b) {
            w.sg_list.clear();
            w.sg_list.extend(list.iter().map(ibv_sge::sge));
        }
    })
}

/// `ibv_wr_start`.
///
/// # Safety
/// The C contract of `ibv_wr_start` (reached through the QP's own
/// function pointer): `q` a QP this library made and the program has
/// not destroyed, other pointers valid as the prototype says.
unsafe extern "C" fn wr_start(q: *mut ibv_qp_ex) {
    // SAFETY: the program's QP, through its own `wr_*` pointer.
    with(unsafe { qpx(q) }, |_, b| {
        b.wrs.clear();
        b.err = None;
    })
}

/// `ibv_wr_complete`.
///
/// # Safety
/// The C contract of `ibv_wr_complete` (reached through the QP's own
/// function pointer): `q` a QP this library made and the program has
/// not destroyed, other pointers valid as the prototype says.
unsafe extern "C" fn wr_complete(q: *mut ibv_qp_ex) -> c_int {
    crate::util::guard_data_errno(|| {
        // SAFETY: the program's QP, through its own `wr_complete` pointer.
        let Some(x) = (unsafe { qpx(q) }) else {
            return libc::EINVAL;
        };
        let mut b = x.batch.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = b.err.take() {
            b.wrs.clear();
            return e;
        }
        let wrs = std::mem::take(&mut b.wrs);
        drop(b);
        let n = wrs.len();
        let r = if n == 1 {
            let wr = wrs.into_iter().next().expect("one request");
            x.qp.post_send(wr).map_err(|e| e.errno())
        } else {
            x.qp.post_send_batch(wrs).map_err(|(_, e)| e.errno())
        };
        match r {
            Ok(()) => 0,
            Err(e) => e,
        }
    })
}

/// `ibv_wr_abort`.
///
/// # Safety
/// The C contract of `ibv_wr_abort` (reached through the QP's own
/// function pointer): `q` a QP this library made and the program has
/// not destroyed, other pointers valid as the prototype says.
unsafe extern "C" fn wr_abort(q: *mut ibv_qp_ex) {
    // SAFETY: the program's QP, through its own `wr_*` pointer.
    with(unsafe { qpx(q) }, |_, b| {
        b.wrs.clear();
        b.err = None;
    })
}

/// `ibv_wr_atomic_write`.
///
/// # Safety
/// The C contract of `ibv_wr_atomic_write` (reached through the QP's own
/// function pointer): `q` a QP this library made and the program has
/// not destroyed, other pointers valid as the prototype says.
unsafe extern "C" fn wr_atomic_write(q: *mut ibv_qp_ex, rkey: u32, addr: u64, data: *const c_void) {
    // SAFETY: the program's QP, through its own `wr_*` pointer.
    with(unsafe { qpx(q) }, |x, b| {
        if data.is_null() {
            return fail(b, libc::EINVAL);
        }
        let mut bytes = [0u8; 8];
        // SAFETY: `ibv_wr_atomic_write` takes a pointer to 8 bytes, copied
        // now (rxe copies them into its WQE the same way).
        unsafe { std::ptr::copy_nonoverlapping(data.cast::<u8>(), bytes.as_mut_ptr(), 8) };
        let w = begin(x, b, WrOpcode::AtomicWrite);
        w.rkey = RKey(rkey);
        w.remote_addr = addr;
        w.inline_data = bytes.to_vec();
        w.flags = w.flags.with(SendFlags::INLINE);
    })
}

/// `ibv_wr_flush` (rdma-core 45+): a FLUSH of `len` bytes at `addr`
/// (`level` IBV_FLUSH_RANGE) or of the whole region (IBV_FLUSH_MR), with
/// placement `ptype` (IBV_FLUSH_GLOBAL, IBV_FLUSH_PERSISTENT).
///
/// # Safety
/// The C contract of `ibv_wr_flush` (reached through the QP's own
/// function pointer): `q` a QP this library made and the program has
/// not destroyed, other pointers valid as the prototype says.
unsafe extern "C" fn wr_flush(
    q: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    len: usize,
    ptype: u8,
    level: u8,
) {
    // SAFETY: the program's QP, through its own `wr_*` pointer.
    with(unsafe { qpx(q) }, |x, b| {
        let w = begin(x, b, WrOpcode::Flush);
        w.rkey = RKey(rkey);
        w.remote_addr = addr;
        w.flush = FlushSpec {
            placement_type: ptype,
            level,
        };
        w.flush_len = len as u64;
    })
}
