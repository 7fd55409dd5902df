//! Completion queues: create (also `ibv_create_cq_ex`), destroy, resize,
//! `ibv_poll_cq` and `ibv_req_notify_cq` (the data path).
//!
//! `ibv_poll_cq` is softrdma's `CompletionQueue::poll`, which drives
//! progress inline when the CQ is empty, so perftest's spin loops make
//! progress without a thread switch. On a host of fewer than 4 cores with a
//! loopback device (peers on the same host), every 4th empty poll yields
//! the CPU (see `context::yield_on_idle_polls`).

use crate::acks::EventAcks;
use crate::channel::Channel;
use crate::context::{context, Ctx};
use crate::ffi::*;
use crate::handle::{Castable, Kind, Obj, Use};
use crate::util::{guard_data, guard_data_errno, guard_errno, guard_ptr, zeroed};
use softrdma::{CompletionQueue, Wc, WcFlags, EMPTY_WC};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// A completion queue (always an `ibv_cq_ex`; `ibv_cq` is its prefix).
pub struct Cq {
    pub cq: CompletionQueue,
    pub ctx: Ctx,
    _channel: Option<Use<Channel>>,
    /// Completion events handed out by `ibv_get_cq_event` (a destroy
    /// waits for their acknowledgements, `acks.rs`).
    pub comp_acks: EventAcks,
    /// Its CQ_ERR events handed out by `ibv_get_async_event`.
    pub async_acks: EventAcks,
    /// The completion being read between `start_poll` and `end_poll`, and
    /// its timestamp (device ns).
    cur: Mutex<(Wc, u64)>,
    /// Created with a completion timestamp in its `wc_flags`: polls take
    /// the timestamps too.
    stamped: bool,
    /// The parent domain it was created in (`IBV_CQ_INIT_ATTR_MASK_PD`).
    _parent: Option<Use<crate::pd::Pd>>,
    /// Yield the CPU every few empty polls.
    yield_idle: bool,
    /// Empty polls so far.
    idle_polls: AtomicU32,
    /// `wc.sl` of a UD receive with a GRH (see [`grh_sl`]).
    pub grh_sl: u8,
}

/// `wc.sl` of a UD receive completion on a RoCE port, as mlx5 reports it
/// and UCX reads it (the L3 header type: 2 = IPv4, 1 = IPv6; UCX's
/// ud_verbs compares the destination address in the GRH area with its
/// own by it, and drops every packet when it says 0, the RoCE v1 GRH). A
/// device has one address, so every packet it receives is of its family.
pub fn grh_sl(addr: std::net::IpAddr) -> u8 {
    if addr.is_ipv4() {
        2
    } else {
        1
    }
}

impl Castable for Cq {
    type Repr = ibv_cq_ex;
    type Api = ibv_cq;
    const KIND: Kind = Kind::Cq;
    const MAGIC: u64 = 0x5352_4351_0000_0006;
    fn release_uses(&self) {
        if let Some(c) = &self._channel {
            c.release();
        }
        if let Some(p) = &self._parent {
            p.release();
        }
    }
}

/// The `wc_flags` of `ibv_create_cq_ex` softrdma fills: the standard
/// ones and both completion timestamps (the device clock, and the wall
/// clock). Not VLANs, flow tags or tag matching (no such offloads).
const CQ_EX_FLAGS: u64 = IBV_WC_STANDARD_FLAGS
    | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
    | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;

/// What `ibv_create_cq_ex` adds to `ibv_create_cq`.
#[derive(Default)]
struct CqEx {
    wc_flags: u64,
    parent: Option<Use<crate::pd::Pd>>,
}

fn new_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    ch: *mut ibv_comp_channel,
    comp_vector: c_int,
    ex: CqEx,
) -> Result<*mut ibv_cq, i32> {
    let c = context(ctx).ok_or(libc::EINVAL)?;
    let max = c.dev.query_device().max_cqe;
    if cqe <= 0 || cqe as u32 > max || comp_vector != 0 {
        return Err(libc::EINVAL);
    }
    let chan = if ch.is_null() {
        None
    } else {
        Some(Obj::<Channel>::get_use(ch).ok_or(libc::EINVAL)?)
    };
    if chan.as_ref().is_some_and(|x| x.ctx.ucontext != c.ucontext) {
        return Err(libc::EINVAL);
    }
    if ex
        .parent
        .as_ref()
        .is_some_and(|p| p.ctx.ucontext != c.ucontext)
    {
        return Err(libc::EINVAL);
    }
    let cq = c
        .dev
        .create_cq(cqe as u32, chan.as_ref().map(|x| &x.ch))
        .map_err(|e| e.errno())?;
    let mut cc: ibv_cq_ex = zeroed();
    cc.context = c.api();
    cc.channel = ch;
    cc.cq_context = cq_context;
    cc.handle = cq.id().0;
    cc.cqe = cq.depth().map_or(cqe, |d| d as c_int);
    cc.start_poll = Some(crate::cqex::start_poll);
    cc.next_poll = Some(crate::cqex::next_poll);
    cc.end_poll = Some(crate::cqex::end_poll);
    cc.read_opcode = Some(crate::cqex::read_opcode);
    cc.read_vendor_err = Some(crate::cqex::read_vendor_err);
    cc.read_byte_len = Some(crate::cqex::read_byte_len);
    cc.read_imm_data = Some(crate::cqex::read_imm_data);
    cc.read_qp_num = Some(crate::cqex::read_qp_num);
    cc.read_src_qp = Some(crate::cqex::read_src_qp);
    cc.read_wc_flags = Some(crate::cqex::read_wc_flags);
    cc.read_slid = Some(crate::cqex::read_slid);
    cc.read_sl = Some(crate::cqex::read_sl);
    cc.read_dlid_path_bits = Some(crate::cqex::read_dlid_path_bits);
    cc.read_completion_ts = Some(crate::cqex::read_completion_ts);
    cc.read_completion_wallclock_ns = Some(crate::cqex::read_completion_wallclock_ns);
    let id = cq.id().0;
    let yield_idle = c.yield_idle;
    let grh_sl = grh_sl(c.dev.local_addr().ip());
    let stamped = ex.wc_flags
        & (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
        != 0;
    let placement = ex
        .parent
        .as_ref()
        .and_then(|p| crate::domain::placement(p, crate::domain::RES_TYPE_CQ));
    let o = Obj::new_in(
        cc,
        Cq {
            cq,
            ctx: c.clone(),
            _channel: chan,
            comp_acks: EventAcks::default(),
            async_acks: EventAcks::default(),
            cur: Mutex::new((EMPTY_WC, 0)),
            stamped,
            _parent: ex.parent,
            yield_idle,
            idle_polls: AtomicU32::new(0),
            grh_sl,
        },
        placement,
    )
    .map_err(|(e, _)| e)?;
    c.objs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .cqs
        .insert(id, Arc::downgrade(&o));
    Ok(o.publish())
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_create_cq`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    ch: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    guard_ptr(|| new_cq(ctx, cqe, cq_context, ch, comp_vector, CqEx::default()))
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn create_cq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    guard_ptr(|| {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller passes a valid attribute structure.
        let a = unsafe { &*attr };
        if a.comp_mask & !(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) != 0 {
            return Err(libc::EINVAL);
        }
        // A parent domain (not a plain PD), as providers require.
        let parent = if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0 {
            let p = Obj::<crate::pd::Pd>::get_use(a.parent_domain).ok_or(libc::EINVAL)?;
            if p.parent.is_none() {
                return Err(libc::EINVAL);
            }
            Some(p)
        } else {
            None
        };
        if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0
            && a.flags & !IBV_CREATE_CQ_ATTR_SINGLE_THREADED != 0
        {
            return Err(libc::EOPNOTSUPP);
        }
        if a.wc_flags & !CQ_EX_FLAGS != 0 {
            // VLAN, flow tags, tag matching.
            return Err(libc::EOPNOTSUPP);
        }
        let cqe = c_int::try_from(a.cqe).map_err(|_| libc::EINVAL)?;
        let ex = CqEx {
            wc_flags: a.wc_flags,
            parent,
        };
        // ibv_cq is the prefix of ibv_cq_ex: the same pointer.
        Ok(new_cq(
            ctx,
            cqe,
            a.cq_context,
            a.channel,
            a.comp_vector as c_int,
            ex,
        )?
        .cast())
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_destroy_cq`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    guard_errno(|| {
        let Some(q) = Obj::<Cq>::get(cq) else {
            return libc::EINVAL;
        };
        // EBUSY while QPs use it.
        if q.busy() {
            return libc::EBUSY;
        }
        // No event is handed out for it from here on; then the wait for
        // the acknowledgements of those that were (`acks.rs`).
        let id = q.cq.id().0;
        let objs = || q.ctx.objs.lock().unwrap_or_else(|e| e.into_inner());
        let entry = objs().cqs.remove(&id);
        // SAFETY (both): u32 fields of the CQ's C structure.
        let comp = unsafe { q.counter(|r| std::ptr::addr_of_mut!((*r).comp_events_completed)) };
        let asy = unsafe { q.counter(|r| std::ptr::addr_of_mut!((*r).async_events_completed)) };
        q.comp_acks.wait(comp);
        q.async_acks.wait(asy);
        match Obj::<Cq>::take(cq) {
            Ok(_) => 0,
            Err(e) => {
                // A QP made meanwhile uses it: it stays.
                if let Some(w) = entry {
                    objs().cqs.insert(id, w);
                }
                e
            }
        }
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_resize_cq`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    guard_errno(|| {
        let Some(q) = Obj::<Cq>::get(cq) else {
            return libc::EINVAL;
        };
        if cqe <= 0 {
            return libc::EINVAL;
        }
        match q.cq.resize(cqe as u32) {
            Ok(()) => {
                // SAFETY: a field of our own allocation; the program only
                // reads it.
                unsafe { (*q.repr()).cqe = q.cq.depth().map_or(cqe, |d| d as c_int) };
                0
            }
            Err(e) => e.errno(),
        }
    })
}

/// Fills a C work completion; `grh_sl` is the CQ's [`grh_sl`].
#[inline]
pub fn to_ibv_wc(w: &Wc, grh_sl: u8, o: &mut ibv_wc) {
    o.wr_id = w.wr_id;
    o.status = w.status as c_int;
    o.opcode = w.opcode as c_int;
    o.vendor_err = 0;
    o.byte_len = w.byte_len;
    o.imm_data = if w.wc_flags.contains(WcFlags::WITH_IMM) {
        w.imm_or_inv.to_be()
    } else {
        w.imm_or_inv
    };
    o.qp_num = w.qp_num.value();
    o.src_qp = w.src_qp.value();
    o.wc_flags = w.wc_flags.0;
    o.pkey_index = w.pkey_index;
    o.slid = 0;
    o.sl = if w.wc_flags.contains(WcFlags::GRH) {
        grh_sl
    } else {
        0
    };
    o.dlid_path_bits = 0;
}

const POLL_CHUNK: usize = 16;

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    guard_data(-libc::EIO, || {
        if cq.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: reached through `context->ops` with the program's CQ.
        let Some(q) = (unsafe { Obj::<Cq>::fast(cq) }) else {
            // Not a live CQ (the program destroyed it): empty. rdma-core's
            // providers do not check the pointer, and programs rely on a
            // destroyed CQ reporting nothing: libiscsi's iSER discovery
            // (iscsi-ls) tears its connection down from a completion
            // callback, then polls the destroyed CQ once more and counts
            // the result in an unsigned integer (a negative errno made it
            // walk garbage).
            return 0;
        };
        if n < 0 || (n > 0 && wc.is_null()) {
            return -libc::EINVAL;
        }
        let n = n as usize;
        let mut done = 0usize;
        let mut buf = [EMPTY_WC; POLL_CHUNK];
        while done < n {
            let want = (n - done).min(POLL_CHUNK);
            let got = match q.cq.poll(&mut buf[..want]) {
                Ok(k) => k,
                Err(e) => {
                    if done > 0 {
                        break;
                    }
                    return -e.errno();
                }
            };
            for (i, w) in buf[..got].iter().enumerate() {
                // SAFETY: the program passes room for `n` completions.
                to_ibv_wc(w, q.grh_sl, unsafe { &mut *wc.add(done + i) });
            }
            done += got;
            if got < want {
                break;
            }
        }
        if done == 0 {
            q.idle();
        }
        done as c_int
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    guard_data_errno(|| {
        // SAFETY: reached through `context->ops` with the program's CQ.
        let Some(q) = (unsafe { Obj::<Cq>::fast(cq) }) else {
            return libc::EINVAL;
        };
        match q.cq.req_notify(solicited_only != 0) {
            Ok(()) => 0,
            Err(e) => e.errno(),
        }
    })
}

/// For the cq_ex functions: the CQ (data path: the magic word only).
///
/// # Safety
/// As [`Obj::fast`]: `p` is NULL or a CQ the program got from us and has
/// not destroyed, passed through its own function pointers
/// (`cq->start_poll` …); the result does not outlive the call.
pub unsafe fn cq_ex<'a>(p: *mut ibv_cq_ex) -> Option<&'a Obj<Cq>> {
    // SAFETY: per the contract.
    unsafe { Obj::<Cq>::fast(p.cast()) }
}

impl Obj<Cq> {
    /// An empty poll: every 4th yields the CPU when that is the policy.
    #[inline]
    fn idle(&self) {
        if self.yield_idle && self.idle_polls.fetch_add(1, Ordering::Relaxed) % 4 == 3 {
            std::thread::yield_now();
        }
    }

    /// Polls one completion into `cur` and the C structure's status and
    /// wr_id. Returns 0, ENOENT when empty, or an errno.
    pub fn poll_one(&self) -> c_int {
        let mut b = [EMPTY_WC; 1];
        let mut t = [0u64; 1];
        let r = if self.stamped {
            self.cq.poll_stamped(&mut b, &mut t)
        } else {
            self.cq.poll(&mut b)
        };
        match r {
            Ok(0) => {
                self.idle();
                libc::ENOENT
            }
            Ok(_) => {
                *self.cur.lock().unwrap_or_else(|e| e.into_inner()) = (b[0], t[0]);
                // SAFETY: fields of our own allocation that the program
                // reads after this call returns (no concurrent access by
                // the ibv_cq_ex contract: one poller between start/end).
                unsafe {
                    let c = self.repr();
                    (*c).status = b[0].status as c_int;
                    (*c).wr_id = b[0].wr_id;
                }
                0
            }
            Err(e) => e.errno(),
        }
    }

    /// The completion being read.
    pub fn current(&self) -> Wc {
        self.cur.lock().unwrap_or_else(|e| e.into_inner()).0
    }

    /// The timestamp of the completion being read (device ns; 0 when the
    /// CQ was created without a timestamp flag).
    pub fn current_ts(&self) -> u64 {
        self.cur.lock().unwrap_or_else(|e| e.into_inner()).1
    }
}
