//! The verbs objects behind the C pointers: protection domains, memory
//! regions, completion channels and queues, shared receive queues, queue
//! pairs and address handles, and the data path (post, poll).
//!
//! Each object is a `repr(C)` box whose first field is the C structure the
//! program sees (in an `UnsafeCell`: the program writes some of its fields,
//! e.g. `cq_context` or `ibv_qp_ex.wr_id`), followed by a magic number and
//! the safe softrdma handle. Control-path verbs check the pointer against
//! the registry of live objects before touching it; data-path verbs (reached
//! through `context->ops`, after the program has dereferenced the pointer
//! itself) check NULL and the magic number.

use crate::device::{context, epoll_watching, is_nonblocking, Context};
use crate::ffi::*;
use crate::util::{self, guard, guard_errno, guard_ptr, is_live, Kind};
use softrdma::{
    Access, AddressVector, AsyncEvent, AttrMask, CompletionChannel, CompletionQueue, MemoryRegion,
    Mtu, ProtectionDomain, QKey, QpAttr, QpState, QpType, Qpn, QueuePair, RKey, RecvWr, SendFlags,
    SendWr, Sge, SharedReceiveQueue, UdDest, Wc, WcFlags, WrOpcode, EMPTY_WC,
};
use softrdma_wire::grh::{addr_of_gid, gid_of, ud_grh_source, GRH_LEN};
use softrdma_wire::Psn;
use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

const MAGIC_PD: u64 = 0x5352_5044_0000_0003;
const MAGIC_MR: u64 = 0x5352_4d52_0000_0004;
const MAGIC_CHANNEL: u64 = 0x5352_4348_0000_0005;
const MAGIC_CQ: u64 = 0x5352_4351_0000_0006;
const MAGIC_SRQ: u64 = 0x5352_5352_5100_0007;
const MAGIC_QP: u64 = 0x5352_5150_0000_0008;
const MAGIC_AH: u64 = 0x5352_4148_0000_0009;

/// The registered object of `kind` at `p`, if live and of our making.
///
/// # Safety
/// `T` must be the wrapper type registered under `kind`.
unsafe fn lookup<'a, T>(p: *const c_void, kind: Kind) -> Option<&'a T> {
    if !is_live(p.cast(), kind) {
        return None;
    }
    // SAFETY: live registered pointers of this kind are boxed `T`s.
    Some(unsafe { &*(p as *const T) })
}

/// Reads a wrapper's magic word at `off` bytes from the C pointer `p`, for
/// the data path.
///
/// # Safety
/// `p` is NULL or points to at least `off + 8` readable bytes.
#[inline]
unsafe fn magic_at<C>(p: *const C, off: usize) -> u64 {
    if p.is_null() {
        return 0;
    }
    // SAFETY: per the contract.
    unsafe {
        AtomicU64::from_ptr((p as *const u8).add(off).cast::<u64>() as *mut u64)
            .load(Ordering::Relaxed)
    }
}

/// # Safety
/// The pointer must come from `Box::into_raw` and be unregistered (so this
/// is the only free).
unsafe fn free<T>(p: *const T) {
    // SAFETY: per the contract.
    drop(unsafe { Box::from_raw(p as *mut T) });
}

fn zeroed<T>() -> T {
    // SAFETY: only used for the C structures of ffi.rs, which are plain
    // data (integers, pointers, Option<fn>): all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

// ------------------------------------------------------------------ PD ----

/// A protection domain.
#[repr(C)]
pub struct Pd {
    c: UnsafeCell<ibv_pd>,
    magic: AtomicU64,
    pub pd: ProtectionDomain,
    ctx: *const Context,
    users: AtomicUsize,
}

impl Pd {
    fn c_ptr(&self) -> *mut ibv_pd {
        self.c.get()
    }
    fn ctx(&self) -> &Context {
        // SAFETY: a context outlives its objects (a program that closes it
        // first breaks the verbs contract as it would with libibverbs).
        unsafe { &*self.ctx }
    }
}

fn pd<'a>(p: *mut ibv_pd) -> Option<&'a Pd> {
    // SAFETY: Kind::Pd entries are `Pd`s.
    unsafe { lookup::<Pd>(p.cast(), Kind::Pd) }
        .filter(|x| x.magic.load(Ordering::Relaxed) == MAGIC_PD)
}

pub unsafe extern "C" fn alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    guard_ptr(|| {
        let c = context(ctx).ok_or(libc::EINVAL)?;
        let pd = c.dev.alloc_pd().map_err(|e| e.errno())?;
        let mut cp: ibv_pd = zeroed();
        cp.context = c.c_ptr();
        cp.handle = pd.id().0;
        let p = Box::into_raw(Box::new(Pd {
            c: UnsafeCell::new(cp),
            magic: AtomicU64::new(MAGIC_PD),
            pd,
            ctx: c,
            users: AtomicUsize::new(0),
        }));
        c.users.fetch_add(1, Ordering::SeqCst);
        util::register(p as *const (), Kind::Pd);
        // SAFETY: just allocated.
        Ok(unsafe { (*p).c_ptr() })
    })
}

pub unsafe extern "C" fn dealloc_pd(p: *mut ibv_pd) -> c_int {
    guard_errno(|| {
        let Some(x) = pd(p) else {
            return libc::EINVAL;
        };
        if x.users.load(Ordering::SeqCst) > 0 {
            return libc::EBUSY;
        }
        if !util::unregister(p as *const (), Kind::Pd) {
            return libc::EINVAL;
        }
        x.magic.store(0, Ordering::SeqCst);
        let ctx = x.ctx;
        // SAFETY: unregistered above: the only free.
        unsafe { free(x as *const Pd) };
        // SAFETY: the PD was counted in its context's users.
        unsafe { crate::device::release_user(ctx) };
        0
    })
}

// ------------------------------------------------------------------ MR ----

/// A memory region.
#[repr(C)]
pub struct Mr {
    c: UnsafeCell<ibv_mr>,
    magic: AtomicU64,
    _mr: MemoryRegion,
    pd: *const Pd,
}

const ACCESS_KNOWN: c_int = 0xff;

unsafe fn register_mr(
    p: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> Result<*mut ibv_mr, i32> {
    let x = pd(p).ok_or(libc::EINVAL)?;
    // Optional access bits (relaxed ordering, …) may be ignored by a device.
    let access = access & !IBV_ACCESS_OPTIONAL_RANGE;
    if access & !ACCESS_KNOWN != 0 {
        return Err(libc::EINVAL);
    }
    let a = Access(access as u32);
    if (a.contains(Access::REMOTE_WRITE) || a.contains(Access::REMOTE_ATOMIC))
        && !a.contains(Access::LOCAL_WRITE)
    {
        return Err(libc::EINVAL);
    }
    if access & ((1 << 5) | (1 << 6)) != 0 {
        // Zero-based addressing (remote addresses would be offsets) and
        // on-demand paging.
        return Err(libc::EOPNOTSUPP);
    }
    if addr.is_null() || iova != addr as u64 {
        // softrdma addresses registered memory by its pointer value.
        return Err(if addr.is_null() {
            libc::EINVAL
        } else {
            libc::EOPNOTSUPP
        });
    }
    if (addr as usize).checked_add(length).is_none() {
        return Err(libc::EINVAL);
    }
    let a = Access(access as u32 & (Access::ALL.0 | Access::MW_BIND.0));
    // SAFETY: the verbs contract: the program keeps addr..addr+length valid
    // until ibv_dereg_mr and lets the device read and write it meanwhile.
    let mr = unsafe { x.pd.register_mr(addr.cast(), length, a) }.map_err(|e| e.errno())?;
    let mut c: ibv_mr = zeroed();
    c.context = x.ctx().c_ptr();
    c.pd = x.c_ptr();
    c.addr = addr;
    c.length = length;
    c.handle = mr.lkey();
    c.lkey = mr.lkey();
    c.rkey = mr.rkey().0;
    x.users.fetch_add(1, Ordering::SeqCst);
    let b = Box::into_raw(Box::new(Mr {
        c: UnsafeCell::new(c),
        magic: AtomicU64::new(MAGIC_MR),
        _mr: mr,
        pd: x,
    }));
    util::register(b as *const (), Kind::Mr);
    // SAFETY: just allocated.
    Ok(unsafe { (*b).c.get() })
}

pub unsafe extern "C" fn reg_mr(
    p: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded.
    guard_ptr(|| unsafe { register_mr(p, addr, length, addr as u64, access) })
}

pub unsafe extern "C" fn reg_mr_iova(
    p: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded.
    guard_ptr(|| unsafe { register_mr(p, addr, length, iova, access) })
}

pub unsafe extern "C" fn reg_mr_iova2(
    p: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: u32,
) -> *mut ibv_mr {
    // SAFETY: forwarded.
    guard_ptr(|| unsafe { register_mr(p, addr, length, iova, access as c_int) })
}

fn mr<'a>(m: *mut ibv_mr) -> Option<&'a Mr> {
    // SAFETY: Kind::Mr entries are `Mr`s.
    unsafe { lookup::<Mr>(m.cast(), Kind::Mr) }
        .filter(|x| x.magic.load(Ordering::Relaxed) == MAGIC_MR)
}

pub unsafe extern "C" fn dereg_mr(m: *mut ibv_mr) -> c_int {
    guard_errno(|| {
        let Some(x) = mr(m) else {
            return libc::EINVAL;
        };
        if !util::unregister(m as *const (), Kind::Mr) {
            return libc::EINVAL;
        }
        x.magic.store(0, Ordering::SeqCst);
        // SAFETY: the PD outlives its regions (dealloc_pd refuses while used).
        unsafe { &*x.pd }.users.fetch_sub(1, Ordering::SeqCst);
        // SAFETY: unregistered above: the only free.
        unsafe { free(x as *const Mr) };
        0
    })
}

pub unsafe extern "C" fn rereg_mr(
    m: *mut ibv_mr,
    flags: c_int,
    _pd: *mut ibv_pd,
    _addr: *mut c_void,
    _length: usize,
    _access: c_int,
) -> c_int {
    guard(-1, || {
        if mr(m).is_none() || flags & !7 != 0 {
            util::set_errno(libc::EINVAL);
            return -1; // IBV_REREG_MR_ERR_INPUT
        }
        if flags == 0 {
            return 0;
        }
        util::set_errno(libc::EOPNOTSUPP);
        -1 // IBV_REREG_MR_ERR_INPUT: the old region stays valid
    })
}

// ------------------------------------------------------------- channel ----

/// A completion channel.
#[repr(C)]
pub struct Channel {
    c: UnsafeCell<ibv_comp_channel>,
    magic: AtomicU64,
    ch: CompletionChannel,
    /// `channel->fd`: an epoll descriptor watching the channel's eventfd
    /// (readable while an event is pending; its own O_NONBLOCK flag).
    ep: OwnedFd,
    ctx: *const Context,
}

fn channel<'a>(p: *mut ibv_comp_channel) -> Option<&'a Channel> {
    // SAFETY: Kind::Channel entries are `Channel`s.
    unsafe { lookup::<Channel>(p.cast(), Kind::Channel) }
        .filter(|x| x.magic.load(Ordering::Relaxed) == MAGIC_CHANNEL)
}

impl Channel {
    fn refcnt(&self) -> &AtomicI32 {
        // SAFETY: `refcnt` is an aligned int inside our allocation; all our
        // accesses are atomic, and the program only reads it.
        unsafe { AtomicI32::from_ptr(std::ptr::addr_of_mut!((*self.c.get()).refcnt)) }
    }
}

pub unsafe extern "C" fn create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel {
    guard_ptr(|| {
        let c = context(ctx).ok_or(libc::EINVAL)?;
        let ch = c.dev.create_comp_channel().map_err(|e| e.errno())?;
        let ep = epoll_watching(ch.as_raw_fd())?;
        let cc = ibv_comp_channel {
            context: c.c_ptr(),
            fd: ep.as_raw_fd(),
            refcnt: 0,
        };
        let b = Box::into_raw(Box::new(Channel {
            c: UnsafeCell::new(cc),
            magic: AtomicU64::new(MAGIC_CHANNEL),
            ch,
            ep,
            ctx: c,
        }));
        c.users.fetch_add(1, Ordering::SeqCst);
        util::register(b as *const (), Kind::Channel);
        // SAFETY: just allocated.
        Ok(unsafe { (*b).c.get() })
    })
}

pub unsafe extern "C" fn destroy_comp_channel(p: *mut ibv_comp_channel) -> c_int {
    guard_errno(|| {
        let Some(x) = channel(p) else {
            return libc::EINVAL;
        };
        if x.refcnt().load(Ordering::SeqCst) > 0 {
            return libc::EBUSY;
        }
        if !util::unregister(p as *const (), Kind::Channel) {
            return libc::EINVAL;
        }
        x.magic.store(0, Ordering::SeqCst);
        let ctx = x.ctx;
        // SAFETY: unregistered above: the only free.
        unsafe { free(x as *const Channel) };
        // SAFETY: the channel was counted in its context's users.
        unsafe { crate::device::release_user(ctx) };
        0
    })
}

pub unsafe extern "C" fn get_cq_event(
    p: *mut ibv_comp_channel,
    cq_out: *mut *mut ibv_cq,
    ctx_out: *mut *mut c_void,
) -> c_int {
    util::guard_neg(|| {
        let x = channel(p).ok_or(libc::EINVAL)?;
        if cq_out.is_null() || ctx_out.is_null() {
            return Err(libc::EINVAL);
        }
        let nonblock = is_nonblocking(x.ep.as_raw_fd());
        // SAFETY: the context outlives its channels.
        let ctx = unsafe { &*x.ctx };
        loop {
            let id = if nonblock {
                x.ch.try_get_event().ok_or(libc::EAGAIN)?
            } else {
                match x.ch.get_event(None) {
                    Ok(Some(id)) => id,
                    Ok(None) => continue,
                    Err(e) => return Err(e.errno()),
                }
            };
            let found = ctx
                .objs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .cqs
                .get(&id.0)
                .copied();
            let Some(cqp) = found else {
                continue; // the CQ was destroyed meanwhile
            };
            // SAFETY: entries of `objs.cqs` are live `Cq`s (removed before
            // the CQ is freed, under the same lock order).
            let q = unsafe { &*(cqp as *const Cq) };
            q.events.fetch_add(1, Ordering::SeqCst);
            // SAFETY: valid output pointers (checked non-NULL).
            unsafe {
                *cq_out = q.c_ptr();
                *ctx_out = (*q.c.get()).cq_context;
            }
            return Ok(());
        }
    })
}

pub unsafe extern "C" fn ack_cq_events(cq: *mut ibv_cq, n: u32) {
    guard((), || {
        if let Some(q) = cq_checked(cq) {
            // SAFETY: a u32 inside our allocation; the program only reads it.
            let a = unsafe {
                AtomicU32::from_ptr(std::ptr::addr_of_mut!((*q.c.get()).comp_events_completed))
            };
            a.fetch_add(n, Ordering::SeqCst);
        }
    })
}

// ------------------------------------------------------------------ CQ ----

/// A completion queue (always an `ibv_cq_ex`; `ibv_cq` is its prefix).
#[repr(C)]
pub struct Cq {
    c: UnsafeCell<ibv_cq_ex>,
    magic: AtomicU64,
    pub cq: CompletionQueue,
    ctx: *const Context,
    channel: *const Channel,
    users: AtomicUsize,
    /// Events handed out by `ibv_get_cq_event`.
    events: AtomicU32,
    /// The completion being read between `start_poll` and `end_poll`.
    cur: Mutex<Wc>,
    /// Yield the CPU every few empty polls (`device::yield_on_idle_polls`).
    yield_idle: bool,
    /// Empty polls so far.
    idle_polls: AtomicU32,
}

impl Cq {
    fn c_ptr(&self) -> *mut ibv_cq {
        self.c.get().cast()
    }
}

fn cq_checked<'a>(p: *mut ibv_cq) -> Option<&'a Cq> {
    // SAFETY: Kind::Cq entries are `Cq`s.
    unsafe { lookup::<Cq>(p.cast(), Kind::Cq) }
        .filter(|x| x.magic.load(Ordering::Relaxed) == MAGIC_CQ)
}

/// The data path's check: NULL and the magic word.
#[inline]
fn cq_fast<'a>(p: *mut ibv_cq) -> Option<&'a Cq> {
    // SAFETY: the program passes a CQ it created (it has just read
    // `cq->context` itself to get here); we read within its allocation.
    if unsafe { magic_at(p, std::mem::offset_of!(Cq, magic)) } != MAGIC_CQ {
        return None;
    }
    // SAFETY: the magic word says this is one of our `Cq`s.
    Some(unsafe { &*(p as *const Cq) })
}

const CQ_EX_FLAGS: u64 = IBV_WC_STANDARD_FLAGS;

unsafe fn new_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    ch: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> Result<*mut Cq, i32> {
    let c = context(ctx).ok_or(libc::EINVAL)?;
    let max = c.dev.query_device().max_cqe;
    if cqe <= 0 || cqe as u32 > max || comp_vector != 0 {
        return Err(libc::EINVAL);
    }
    let chan = if ch.is_null() {
        None
    } else {
        Some(channel(ch).ok_or(libc::EINVAL)?)
    };
    if let Some(x) = chan {
        if !std::ptr::eq(x.ctx, c) {
            return Err(libc::EINVAL);
        }
    }
    let cq = c
        .dev
        .create_cq(cqe as u32, chan.map(|x| &x.ch))
        .map_err(|e| e.errno())?;
    let mut cc: ibv_cq_ex = zeroed();
    cc.context = c.c_ptr();
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
    if let Some(x) = chan {
        x.refcnt().fetch_add(1, Ordering::SeqCst);
    }
    let id = cq.id().0;
    let b = Box::into_raw(Box::new(Cq {
        c: UnsafeCell::new(cc),
        magic: AtomicU64::new(MAGIC_CQ),
        cq,
        ctx: c,
        channel: chan.map_or(std::ptr::null(), |x| x as *const Channel),
        users: AtomicUsize::new(0),
        events: AtomicU32::new(0),
        cur: Mutex::new(EMPTY_WC),
        yield_idle: c.yield_idle,
        idle_polls: AtomicU32::new(0),
    }));
    c.users.fetch_add(1, Ordering::SeqCst);
    util::register(b as *const (), Kind::Cq);
    c.objs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .cqs
        .insert(id, b as usize);
    Ok(b)
}

pub unsafe extern "C" fn create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    ch: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    guard_ptr(|| {
        // SAFETY: forwarded.
        let q = unsafe { new_cq(ctx, cqe, cq_context, ch, comp_vector) }?;
        // SAFETY: just allocated.
        Ok(unsafe { (*q).c_ptr() })
    })
}

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
        if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0 {
            return Err(libc::EOPNOTSUPP); // parent domains
        }
        if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0
            && a.flags & !IBV_CREATE_CQ_ATTR_SINGLE_THREADED != 0
        {
            return Err(libc::EOPNOTSUPP);
        }
        if a.wc_flags & !CQ_EX_FLAGS != 0 {
            // Completion timestamps, VLAN, flow tags, tag matching.
            return Err(libc::EOPNOTSUPP);
        }
        let cqe = c_int::try_from(a.cqe).map_err(|_| libc::EINVAL)?;
        // SAFETY: forwarded.
        let q = unsafe { new_cq(ctx, cqe, a.cq_context, a.channel, a.comp_vector as c_int) }?;
        // SAFETY: just allocated.
        Ok(unsafe { (*q).c.get() })
    })
}

pub unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    guard_errno(|| {
        let Some(q) = cq_checked(cq) else {
            return libc::EINVAL;
        };
        if q.users.load(Ordering::SeqCst) > 0 {
            return libc::EBUSY;
        }
        // SAFETY: the context outlives its CQs.
        let ctx = unsafe { &*q.ctx };
        {
            let mut o = ctx.objs.lock().unwrap_or_else(|e| e.into_inner());
            if !util::unregister(cq as *const (), Kind::Cq) {
                return libc::EINVAL;
            }
            o.cqs.remove(&q.cq.id().0);
        }
        q.magic.store(0, Ordering::SeqCst);
        if !q.channel.is_null() {
            // SAFETY: a channel outlives its CQs (destroy refuses while used).
            unsafe { &*q.channel }
                .refcnt()
                .fetch_sub(1, Ordering::SeqCst);
        }
        // SAFETY: unregistered above: the only free.
        unsafe { free(q as *const Cq) };
        // SAFETY: the CQ was counted in its context's users.
        unsafe { crate::device::release_user(ctx) };
        0
    })
}

pub unsafe extern "C" fn resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    guard_errno(|| {
        let Some(q) = cq_checked(cq) else {
            return libc::EINVAL;
        };
        if cqe <= 0 {
            return libc::EINVAL;
        }
        match q.cq.resize(cqe as u32) {
            Ok(()) => {
                // SAFETY: a field of our own allocation; the program only
                // reads it.
                unsafe { (*q.c.get()).cqe = q.cq.depth().map_or(cqe, |d| d as c_int) };
                0
            }
            Err(e) => e.errno(),
        }
    })
}

/// Fills a C work completion.
#[inline]
pub fn to_ibv_wc(w: &Wc, o: &mut ibv_wc) {
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
    o.sl = 0;
    o.dlid_path_bits = 0;
}

const POLL_CHUNK: usize = 16;

pub unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    guard(-libc::EIO, || {
        let Some(q) = cq_fast(cq) else {
            return -libc::EINVAL;
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
                to_ibv_wc(w, unsafe { &mut *wc.add(done + i) });
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

pub unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    guard_errno(|| {
        let Some(q) = cq_fast(cq) else {
            return libc::EINVAL;
        };
        match q.cq.req_notify(solicited_only != 0) {
            Ok(()) => 0,
            Err(e) => e.errno(),
        }
    })
}

/// For the cq_ex functions: the CQ and its current completion.
pub fn cq_ex<'a>(p: *mut ibv_cq_ex) -> Option<&'a Cq> {
    cq_fast(p.cast())
}

impl Cq {
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
        match self.cq.poll(&mut b) {
            Ok(0) => {
                self.idle();
                libc::ENOENT
            }
            Ok(_) => {
                *self.cur.lock().unwrap_or_else(|e| e.into_inner()) = b[0];
                // SAFETY: fields of our own allocation that the program
                // reads after this call returns (no concurrent access by
                // the ibv_cq_ex contract: one poller between start/end).
                unsafe {
                    let c = self.c.get();
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
        *self.cur.lock().unwrap_or_else(|e| e.into_inner())
    }
}

// ----------------------------------------------------------------- SRQ ----

/// A shared receive queue.
#[repr(C)]
pub struct Srq {
    c: UnsafeCell<ibv_srq>,
    magic: AtomicU64,
    pub srq: SharedReceiveQueue,
    pd: *const Pd,
    ctx: *const Context,
    users: AtomicUsize,
}

fn srq_checked<'a>(p: *mut ibv_srq) -> Option<&'a Srq> {
    // SAFETY: Kind::Srq entries are `Srq`s.
    unsafe { lookup::<Srq>(p.cast(), Kind::Srq) }
        .filter(|x| x.magic.load(Ordering::Relaxed) == MAGIC_SRQ)
}

#[inline]
fn srq_fast<'a>(p: *mut ibv_srq) -> Option<&'a Srq> {
    // SAFETY: see `cq_fast`.
    if unsafe { magic_at(p, std::mem::offset_of!(Srq, magic)) } != MAGIC_SRQ {
        return None;
    }
    // SAFETY: the magic word says this is one of our `Srq`s.
    Some(unsafe { &*(p as *const Srq) })
}

pub unsafe extern "C" fn create_srq(p: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    guard_ptr(|| {
        let x = pd(p).ok_or(libc::EINVAL)?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller passes a valid attribute structure.
        let a = unsafe { &mut *attr };
        let dev = x.ctx().dev.query_device();
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
        let ctx = x.ctx();
        let mut c: ibv_srq = zeroed();
        c.context = ctx.c_ptr();
        c.srq_context = a.srq_context;
        c.pd = x.c_ptr();
        c.handle = srq.id().0;
        let id = srq.id().0;
        x.users.fetch_add(1, Ordering::SeqCst);
        let b = Box::into_raw(Box::new(Srq {
            c: UnsafeCell::new(c),
            magic: AtomicU64::new(MAGIC_SRQ),
            srq,
            pd: x,
            ctx,
            users: AtomicUsize::new(0),
        }));
        util::register(b as *const (), Kind::Srq);
        ctx.objs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .srqs
            .insert(id, b as usize);
        // SAFETY: just allocated.
        Ok(unsafe { (*b).c.get() })
    })
}

pub unsafe extern "C" fn create_srq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    guard_ptr(|| {
        if context(ctx).is_none() || attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller passes a valid attribute structure.
        let a = unsafe { &mut *attr };
        let basic = a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE == 0 || a.srq_type == IBV_SRQT_BASIC;
        if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 {
            return Err(libc::EINVAL);
        }
        if !basic || a.comp_mask & !(IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE) != 0 {
            return Err(libc::EOPNOTSUPP); // XRC and tag-matching SRQs
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

pub unsafe extern "C" fn modify_srq(
    s: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    guard_errno(|| {
        let Some(x) = srq_checked(s) else {
            return libc::EINVAL;
        };
        if attr.is_null() || mask & !(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) != 0 {
            return libc::EINVAL;
        }
        if mask & IBV_SRQ_MAX_WR != 0 {
            return libc::EOPNOTSUPP; // no SRQ resize (not in device_cap_flags)
        }
        if mask & IBV_SRQ_LIMIT != 0 {
            // SAFETY: valid attribute structure.
            let limit = unsafe { (*attr).srq_limit };
            if let Ok((w, _, _, _)) = x.srq.query() {
                if limit > w {
                    return libc::EINVAL;
                }
            }
            if let Err(e) = x.srq.set_limit(limit) {
                return e.errno();
            }
        }
        0
    })
}

pub unsafe extern "C" fn query_srq(s: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    guard_errno(|| {
        let Some(x) = srq_checked(s) else {
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

pub unsafe extern "C" fn destroy_srq(s: *mut ibv_srq) -> c_int {
    guard_errno(|| {
        let Some(x) = srq_checked(s) else {
            return libc::EINVAL;
        };
        if x.users.load(Ordering::SeqCst) > 0 {
            return libc::EBUSY;
        }
        // SAFETY: the context outlives its SRQs.
        let ctx = unsafe { &*x.ctx };
        {
            let mut o = ctx.objs.lock().unwrap_or_else(|e| e.into_inner());
            if !util::unregister(s as *const (), Kind::Srq) {
                return libc::EINVAL;
            }
            o.srqs.remove(&x.srq.id().0);
        }
        x.magic.store(0, Ordering::SeqCst);
        // SAFETY: the PD outlives its SRQs.
        unsafe { &*x.pd }.users.fetch_sub(1, Ordering::SeqCst);
        // SAFETY: unregistered above: the only free.
        unsafe { free(x as *const Srq) };
        0
    })
}

/// Converts a C receive request.
///
/// # Safety
/// `w` points to a valid request whose `sg_list` has `num_sge` entries.
unsafe fn recv_wr(w: &ibv_recv_wr) -> Result<RecvWr, i32> {
    if w.num_sge < 0 || (w.num_sge > 0 && w.sg_list.is_null()) {
        return Err(libc::EINVAL);
    }
    if w.num_sge as u32 > softrdma_proto::limits::MAX_SGE {
        return Err(libc::EINVAL);
    }
    let sges = if w.num_sge == 0 {
        &[][..]
    } else {
        // SAFETY: per the contract.
        unsafe { std::slice::from_raw_parts(w.sg_list, w.num_sge as usize) }
    };
    Ok(RecvWr {
        wr_id: w.wr_id,
        sg_list: sges
            .iter()
            .map(|s| Sge {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey,
            })
            .collect(),
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

pub unsafe extern "C" fn post_srq_recv(
    s: *mut ibv_srq,
    w: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    guard_errno(|| {
        let Some(x) = srq_fast(s) else {
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

// ------------------------------------------------------------------ AH ----

/// An address handle.
#[repr(C)]
pub struct Ah {
    c: UnsafeCell<ibv_ah>,
    magic: AtomicU64,
    pub ah: softrdma::AddressHandle,
    pd: *const Pd,
}

/// The address vector of a C `ibv_ah_attr` (RoCE: the GRH is mandatory).
fn address_vector(a: &ibv_ah_attr) -> Result<AddressVector, i32> {
    if a.is_global == 0 || a.grh.sgid_index != 0 {
        return Err(libc::EINVAL);
    }
    if a.port_num > 1 {
        return Err(libc::EINVAL);
    }
    let mut av = AddressVector::to(addr_of_gid(a.grh.dgid.raw));
    av.traffic_class = a.grh.traffic_class;
    // A hop limit of 0 would put TTL 0 on the packet; use the default.
    av.hop_limit = if a.grh.hop_limit == 0 {
        64
    } else {
        a.grh.hop_limit
    };
    av.flow_label = a.grh.flow_label & 0xf_ffff;
    av.sgid_index = 0;
    Ok(av)
}

fn ah_attr_of(av: &AddressVector) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid {
                raw: gid_of(av.dest),
            },
            flow_label: av.flow_label,
            sgid_index: av.sgid_index,
            hop_limit: av.hop_limit,
            traffic_class: av.traffic_class,
        },
        dlid: 0,
        sl: 0,
        src_path_bits: 0,
        static_rate: 0,
        is_global: 1,
        port_num: 1,
    }
}

pub unsafe extern "C" fn create_ah(p: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    guard_ptr(|| {
        let x = pd(p).ok_or(libc::EINVAL)?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: valid attribute structure.
        let av = address_vector(unsafe { &*attr })?;
        let ah = x.pd.create_ah(av).map_err(|e| e.errno())?;
        let mut c: ibv_ah = zeroed();
        c.context = x.ctx().c_ptr();
        c.pd = x.c_ptr();
        c.handle = ah.id().0;
        x.users.fetch_add(1, Ordering::SeqCst);
        let b = Box::into_raw(Box::new(Ah {
            c: UnsafeCell::new(c),
            magic: AtomicU64::new(MAGIC_AH),
            ah,
            pd: x,
        }));
        util::register(b as *const (), Kind::Ah);
        // SAFETY: just allocated.
        Ok(unsafe { (*b).c.get() })
    })
}

fn ah<'a>(a: *mut ibv_ah) -> Option<&'a Ah> {
    // SAFETY: Kind::Ah entries are `Ah`s.
    unsafe { lookup::<Ah>(a.cast(), Kind::Ah) }
        .filter(|x| x.magic.load(Ordering::Relaxed) == MAGIC_AH)
}

pub unsafe extern "C" fn destroy_ah(a: *mut ibv_ah) -> c_int {
    guard_errno(|| {
        let Some(x) = ah(a) else {
            return libc::EINVAL;
        };
        if !util::unregister(a as *const (), Kind::Ah) {
            return libc::EINVAL;
        }
        x.magic.store(0, Ordering::SeqCst);
        // SAFETY: the PD outlives its address handles.
        unsafe { &*x.pd }.users.fetch_sub(1, Ordering::SeqCst);
        // SAFETY: unregistered above: the only free.
        unsafe { free(x as *const Ah) };
        0
    })
}

pub unsafe extern "C" fn init_ah_from_wc(
    ctx: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    attr: *mut ibv_ah_attr,
) -> c_int {
    util::guard_neg(|| {
        let c = context(ctx).ok_or(libc::EINVAL)?;
        if port != 1 || wc.is_null() || grh.is_null() || attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: valid work completion.
        let w = unsafe { &*wc };
        if w.wc_flags & IBV_WC_GRH == 0 {
            return Err(libc::EINVAL); // RoCE needs the GRH to answer
        }
        let mut area = [0u8; GRH_LEN];
        // SAFETY: the GRH area is the first 40 bytes of the receive buffer.
        unsafe { std::ptr::copy_nonoverlapping(grh.cast::<u8>(), area.as_mut_ptr(), GRH_LEN) };
        let src = ud_grh_source(&area);
        if src.is_ipv4() != c.dev.local_addr().ip().is_ipv4() {
            return Err(libc::EINVAL);
        }
        let tclass = if area[0] >> 4 == 6 {
            ((u32::from_be_bytes([area[0], area[1], area[2], area[3]]) >> 20) & 0xff) as u8
        } else {
            area[21] // IPv4 TOS
        };
        let mut av = AddressVector::to(src);
        av.traffic_class = tclass;
        av.hop_limit = 0xff;
        // SAFETY: valid output structure.
        unsafe { attr.write(ah_attr_of(&av)) };
        Ok(())
    })
}

pub unsafe extern "C" fn create_ah_from_wc(
    p: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port: u8,
) -> *mut ibv_ah {
    guard_ptr(|| {
        let x = pd(p).ok_or(libc::EINVAL)?;
        let mut attr = ibv_ah_attr::default();
        // SAFETY: forwarded.
        if unsafe { init_ah_from_wc(x.ctx().c_ptr(), port, wc, grh, &mut attr) } != 0 {
            return Err(util::errno());
        }
        // SAFETY: forwarded.
        let a = unsafe { create_ah(p, &mut attr) };
        if a.is_null() {
            Err(util::errno())
        } else {
            Ok(a)
        }
    })
}

// ------------------------------------------------------------------ QP ----

/// What `ibv_wr_start` … `ibv_wr_complete` accumulate.
#[derive(Default)]
pub struct WrBatch {
    pub wrs: Vec<SendWr>,
    /// The first error met while building (reported by `wr_complete`).
    pub err: Option<i32>,
}

/// A queue pair (always an `ibv_qp_ex`; `ibv_qp` is its prefix).
#[repr(C)]
pub struct Qp {
    c: UnsafeCell<ibv_qp_ex>,
    magic: AtomicU64,
    pub qp: QueuePair,
    ctx: *const Context,
    pd: *const Pd,
    send_cq: *const Cq,
    recv_cq: *const Cq,
    srq: *const Srq,
    cap: ibv_qp_cap,
    qp_type: c_int,
    sq_sig_all: c_int,
    pub batch: Mutex<WrBatch>,
}

impl Qp {
    fn c_ptr(&self) -> *mut ibv_qp {
        self.c.get().cast()
    }
    /// The C structure (the program may write `wr_id`/`wr_flags` of it
    /// between our calls, never during them).
    pub fn c_ex(&self) -> *mut ibv_qp_ex {
        self.c.get()
    }
    pub fn is_ud(&self) -> bool {
        self.qp_type == IBV_QPT_UD
    }
}

fn qp_checked<'a>(p: *mut ibv_qp) -> Option<&'a Qp> {
    // SAFETY: Kind::Qp entries are `Qp`s.
    unsafe { lookup::<Qp>(p.cast(), Kind::Qp) }
        .filter(|x| x.magic.load(Ordering::Relaxed) == MAGIC_QP)
}

/// The data path's check: NULL and the magic word.
#[inline]
pub fn qp_fast<'a>(p: *mut ibv_qp) -> Option<&'a Qp> {
    // SAFETY: see `cq_fast`.
    if unsafe { magic_at(p, std::mem::offset_of!(Qp, magic)) } != MAGIC_QP {
        return None;
    }
    // SAFETY: the magic word says this is one of our `Qp`s.
    Some(unsafe { &*(p as *const Qp) })
}

const SEND_OPS_SUPPORTED: u64 = IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | IBV_QP_EX_WITH_LOCAL_INV
    | IBV_QP_EX_WITH_SEND_WITH_INV;

#[allow(clippy::too_many_arguments)]
unsafe fn new_qp(
    p: *mut ibv_pd,
    qp_context: *mut c_void,
    send_cq: *mut ibv_cq,
    recv_cq: *mut ibv_cq,
    srq: *mut ibv_srq,
    cap: &mut ibv_qp_cap,
    qp_type: c_int,
    sq_sig_all: c_int,
) -> Result<*mut ibv_qp, i32> {
    let x = pd(p).ok_or(libc::EINVAL)?;
    let t = match qp_type {
        IBV_QPT_RC => QpType::Rc,
        IBV_QPT_UC => QpType::Uc,
        IBV_QPT_UD => QpType::Ud,
        8..=10 | 0xff => return Err(libc::EOPNOTSUPP), // raw packet, XRC, driver
        _ => return Err(libc::EINVAL),
    };
    let scq = cq_checked(send_cq).ok_or(libc::EINVAL)?;
    let rcq = cq_checked(recv_cq).ok_or(libc::EINVAL)?;
    let s = if srq.is_null() {
        None
    } else {
        Some(srq_checked(srq).ok_or(libc::EINVAL)?)
    };
    let ctx = x.ctx();
    if !std::ptr::eq(scq.ctx, ctx) || !std::ptr::eq(rcq.ctx, ctx) {
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
    if let Some(s) = s {
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
    c.qp_base.context = ctx.c_ptr();
    c.qp_base.qp_context = qp_context;
    c.qp_base.pd = x.c_ptr();
    c.qp_base.send_cq = send_cq;
    c.qp_base.recv_cq = recv_cq;
    c.qp_base.srq = srq;
    c.qp_base.handle = qp.qpn().value();
    c.qp_base.qp_num = qp.qpn().value();
    c.qp_base.state = 0;
    c.qp_base.qp_type = qp_type;
    crate::qpex::fill_ops(&mut c);
    let qpn = qp.qpn().value();
    x.users.fetch_add(1, Ordering::SeqCst);
    scq.users.fetch_add(1, Ordering::SeqCst);
    rcq.users.fetch_add(1, Ordering::SeqCst);
    if let Some(s) = s {
        s.users.fetch_add(1, Ordering::SeqCst);
    }
    let b = Box::into_raw(Box::new(Qp {
        c: UnsafeCell::new(c),
        magic: AtomicU64::new(MAGIC_QP),
        qp,
        ctx,
        pd: x,
        send_cq: scq,
        recv_cq: rcq,
        srq: s.map_or(std::ptr::null(), |s| s as *const Srq),
        cap: *cap,
        qp_type,
        sq_sig_all,
        batch: Mutex::new(WrBatch::default()),
    }));
    util::register(b as *const (), Kind::Qp);
    ctx.objs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .qps
        .insert(qpn, b as usize);
    // SAFETY: just allocated.
    Ok(unsafe { (*b).c_ptr() })
}

pub unsafe extern "C" fn create_qp(p: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    guard_ptr(|| {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: valid attribute structure.
        let a = unsafe { &mut *attr };
        // SAFETY: forwarded.
        unsafe {
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
        }
    })
}

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
        let known =
            IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
            return Err(libc::EINVAL);
        }
        if a.comp_mask & !known != 0 {
            return Err(libc::EOPNOTSUPP); // XRC, RSS, TSO
        }
        if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0
            && a.send_ops_flags & !SEND_OPS_SUPPORTED != 0
        {
            return Err(libc::EOPNOTSUPP);
        }
        let x = pd(a.pd).ok_or(libc::EINVAL)?;
        if !std::ptr::eq(x.ctx, c) {
            return Err(libc::EINVAL);
        }
        // SAFETY: forwarded.
        unsafe {
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
        }
    })
}

pub unsafe extern "C" fn qp_to_qp_ex(q: *mut ibv_qp) -> *mut ibv_qp_ex {
    guard_ptr(|| qp_checked(q).map(|x| x.c_ex()).ok_or(libc::EINVAL))
}

pub unsafe extern "C" fn destroy_qp(q: *mut ibv_qp) -> c_int {
    guard_errno(|| {
        let Some(x) = qp_checked(q) else {
            return libc::EINVAL;
        };
        // SAFETY: the context outlives its QPs.
        let ctx = unsafe { &*x.ctx };
        {
            let mut o = ctx.objs.lock().unwrap_or_else(|e| e.into_inner());
            if !util::unregister(q as *const (), Kind::Qp) {
                return libc::EINVAL;
            }
            o.qps.remove(&x.qp.qpn().value());
        }
        x.magic.store(0, Ordering::SeqCst);
        // SAFETY: PD, CQs and SRQ outlive the QP (their destroy refuses
        // while it is counted as a user).
        unsafe {
            (*x.pd).users.fetch_sub(1, Ordering::SeqCst);
            (*x.send_cq).users.fetch_sub(1, Ordering::SeqCst);
            (*x.recv_cq).users.fetch_sub(1, Ordering::SeqCst);
            if !x.srq.is_null() {
                (*x.srq).users.fetch_sub(1, Ordering::SeqCst);
            }
        }
        // SAFETY: unregistered above: the only free.
        unsafe { free(x as *const Qp) };
        0
    })
}

fn qp_state(v: c_int) -> Result<QpState, i32> {
    u32::try_from(v)
        .ok()
        .and_then(QpState::from_ibv)
        .ok_or(libc::EINVAL)
}

pub unsafe extern "C" fn modify_qp(q: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
    guard_errno(|| {
        let Some(x) = qp_checked(q) else {
            return libc::EINVAL;
        };
        if attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: valid attribute structure.
        let a = unsafe { &*attr };
        let m = AttrMask(mask as u32);
        let r = (|| -> Result<(), i32> {
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
            x.qp.modify(&qa, m).map_err(|e| e.errno())
        })();
        match r {
            Ok(()) => {
                if m.contains(AttrMask::STATE) {
                    // libibverbs keeps `qp->state` in step with modify.
                    // SAFETY: a field of our own allocation.
                    unsafe { (*x.c_ptr()).state = a.qp_state };
                }
                0
            }
            Err(e) => e,
        }
    })
}

pub unsafe extern "C" fn query_qp(
    q: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    guard_errno(|| {
        let Some(x) = qp_checked(q) else {
            return libc::EINVAL;
        };
        if attr.is_null() || init.is_null() {
            return libc::EINVAL;
        }
        let qa = match x.qp.query() {
            Ok(a) => a,
            Err(e) => return e.errno(),
        };
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
            cap: x.cap,
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
        if x.is_ud() || qa.qp_state == QpState::Reset || qa.qp_state == QpState::Init {
            // No path yet (or none at all).
            o.ah_attr = ibv_ah_attr::default();
        }
        // SAFETY: valid output structures.
        unsafe {
            attr.write(o);
            let c = &*x.c_ptr();
            init.write(ibv_qp_init_attr {
                qp_context: c.qp_context,
                send_cq: c.send_cq,
                recv_cq: c.recv_cq,
                srq: c.srq,
                cap: x.cap,
                qp_type: x.qp_type,
                sq_sig_all: x.sq_sig_all,
            });
        }
        0
    })
}

/// The UD destination of an address handle pointer.
pub fn ud_dest(ah: *mut ibv_ah, qpn: u32, qkey: u32) -> Result<UdDest, i32> {
    // SAFETY: see `cq_fast`: the program passes an AH it created.
    if unsafe { magic_at(ah, std::mem::offset_of!(Ah, magic)) } != MAGIC_AH {
        return Err(libc::EINVAL);
    }
    // SAFETY: the magic word says this is one of our `Ah`s.
    let a = unsafe { &*(ah as *const Ah) };
    Ok(UdDest {
        ah: a.ah.id(),
        remote_qpn: Qpn::new(qpn),
        remote_qkey: QKey(qkey),
    })
}

/// Inline data gathered from SGEs (program memory, read at post time).
///
/// # Safety
/// Each SGE must describe readable memory of the program.
pub unsafe fn gather_inline(sges: &[ibv_sge]) -> Result<Vec<u8>, i32> {
    let total: u64 = sges.iter().map(|s| s.length as u64).sum();
    if total > softrdma_proto::limits::MAX_INLINE_DATA as u64 {
        return Err(libc::EINVAL);
    }
    let mut v = Vec::with_capacity(total as usize);
    for s in sges {
        if s.length == 0 {
            continue;
        }
        if s.addr == 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: per the contract (inline data is copied at post time).
        v.extend_from_slice(unsafe {
            std::slice::from_raw_parts(s.addr as usize as *const u8, s.length as usize)
        });
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
        .ok_or(if (8..=15).contains(&w.opcode) {
            libc::EOPNOTSUPP // bind MW, TSO, atomic write
        } else {
            libc::EINVAL
        })?;
    if w.num_sge < 0 || (w.num_sge > 0 && w.sg_list.is_null()) {
        return Err(libc::EINVAL);
    }
    if w.num_sge as u32 > softrdma_proto::limits::MAX_SGE {
        return Err(libc::EINVAL);
    }
    let sges = if w.num_sge == 0 {
        &[][..]
    } else {
        // SAFETY: per the contract.
        unsafe { std::slice::from_raw_parts(w.sg_list, w.num_sge as usize) }
    };
    let mut wr = SendWr::new(w.wr_id, op);
    wr.flags = SendFlags(w.send_flags & 0xf);
    if wr.flags.contains(SendFlags::INLINE) && !op.is_read_or_atomic() {
        // SAFETY: the SGEs describe the program's memory.
        wr.inline_data = unsafe { gather_inline(sges) }?;
    } else {
        wr.flags = SendFlags(wr.flags.0 & !IBV_SEND_INLINE);
        wr.sg_list = sges
            .iter()
            .map(|s| Sge {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey,
            })
            .collect();
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
    Ok(wr)
}

/// Requests converted and posted under one lock per batch.
const POST_BATCH: usize = 32;

pub unsafe extern "C" fn post_send(
    q: *mut ibv_qp,
    w: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    guard_errno(|| {
        let set_bad = |p: *mut ibv_send_wr| {
            if !bad.is_null() {
                // SAFETY: valid output pointer.
                unsafe { *bad = p };
            }
        };
        let Some(x) = qp_fast(q) else {
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

pub unsafe extern "C" fn post_recv(
    q: *mut ibv_qp,
    w: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    guard_errno(|| {
        let Some(x) = qp_fast(q) else {
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

// ------------------------------------------------------- async events ----

fn lookup_obj(m: &std::collections::HashMap<u32, usize>, k: u32) -> Option<usize> {
    m.get(&k).copied()
}

/// The C event for a softrdma event, or `None` when its object is gone.
pub fn translate_async_event(c: &Context, e: AsyncEvent) -> Option<ibv_async_event> {
    let o = c.objs.lock().unwrap_or_else(|e| e.into_inner());
    let qp = |n: Qpn, t: c_int| {
        lookup_obj(&o.qps, n.value()).map(|p| ibv_async_event {
            // SAFETY: entries are live `Qp`s (removed before free).
            element: unsafe { (*(p as *const Qp)).c_ptr() }.cast(),
            event_type: t,
        })
    };
    match e {
        AsyncEvent::CqErr(id) => lookup_obj(&o.cqs, id.0).map(|p| ibv_async_event {
            // SAFETY: entries are live `Cq`s.
            element: unsafe { (*(p as *const Cq)).c_ptr() }.cast(),
            event_type: IBV_EVENT_CQ_ERR,
        }),
        AsyncEvent::QpFatal(n) => qp(n, IBV_EVENT_QP_FATAL),
        AsyncEvent::QpReqErr(n) => qp(n, IBV_EVENT_QP_REQ_ERR),
        AsyncEvent::QpAccessErr(n) => qp(n, IBV_EVENT_QP_ACCESS_ERR),
        AsyncEvent::CommEst(n) => qp(n, IBV_EVENT_COMM_EST),
        AsyncEvent::SqDrained(n) => qp(n, IBV_EVENT_SQ_DRAINED),
        AsyncEvent::QpLastWqeReached(n) => qp(n, IBV_EVENT_QP_LAST_WQE_REACHED),
        AsyncEvent::SrqLimitReached(id) => lookup_obj(&o.srqs, id.0).map(|p| ibv_async_event {
            // SAFETY: entries are live `Srq`s.
            element: unsafe { (*(p as *const Srq)).c.get() }.cast(),
            event_type: IBV_EVENT_SRQ_LIMIT_REACHED,
        }),
    }
}

/// `ibv_ack_async_event`: counts the event on its object.
pub fn ack_async_event(ev: &ibv_async_event) {
    let bump = |p: *mut u32| {
        // SAFETY: a u32 field of a live object of ours; atomic access.
        unsafe { AtomicU32::from_ptr(p) }.fetch_add(1, Ordering::SeqCst);
    };
    match ev.event_type {
        IBV_EVENT_CQ_ERR => {
            if let Some(q) = cq_checked(ev.element.cast()) {
                bump(
                    // SAFETY: field of our allocation.
                    unsafe { std::ptr::addr_of_mut!((*q.c.get()).async_events_completed) },
                );
            }
        }
        IBV_EVENT_SRQ_LIMIT_REACHED => {
            if let Some(s) = srq_checked(ev.element.cast()) {
                // SAFETY: field of our allocation.
                bump(unsafe { std::ptr::addr_of_mut!((*s.c.get()).events_completed) });
            }
        }
        _ => {
            if let Some(q) = qp_checked(ev.element.cast()) {
                // SAFETY: field of our allocation.
                bump(unsafe { std::ptr::addr_of_mut!((*q.c_ptr()).events_completed) });
            }
        }
    }
}

// --------------------------------------------------------- port query ----

pub unsafe extern "C" fn query_port_ex(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    guard_errno(|| {
        let Some(c) = context(ctx) else {
            return libc::EINVAL;
        };
        if port != 1 || attr.is_null() {
            return libc::EINVAL;
        }
        let a = crate::device::port_attr(c);
        // SAFETY: the caller states `attr` holds `len` bytes.
        unsafe { util::write_prefix(attr, &a, len) };
        0
    })
}

// ---------------------------------------------------------- multicast ----

pub unsafe extern "C" fn attach_mcast(q: *mut ibv_qp, _gid: *const ibv_gid, _lid: u16) -> c_int {
    guard_errno(|| {
        if qp_checked(q).is_none() {
            return libc::EINVAL;
        }
        libc::EOPNOTSUPP
    })
}
