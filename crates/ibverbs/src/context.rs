//! Contexts: `ibv_open_device`, `ibv_close_device`, asynchronous events.
//!
//! A context is a `verbs_context` (which ends with the `ibv_context` the
//! program sees), with `sz` and `abi_compat = __VERBS_ABI_IS_EXTENDED` so
//! verbs.h's `verbs_get_ctx_op` finds the extended entry points we fill
//! (`query_port`, `query_device_ex`, `create_cq_ex`, `create_qp_ex`,
//! `create_srq_ex`, `query_rt_values`, the XRC slots `open_xrcd`,
//! `close_xrcd`, `open_qp`, `get_srq_num`, …); every other slot stays NULL and the
//! inline wrappers fail with EOPNOTSUPP themselves.
//!
//! Closing a context with PDs, CQs or channels still alive (perftest's
//! client does) is allowed: the objects hold the context, which is freed
//! with the last of them.
//!
//! `context->cmd_fd` is a real descriptor, as the kernel's open
//! `/dev/infiniband/uverbsN` is: a memfd of its own per opened context
//! (close-on-exec), which names the device context — its inode — so that
//! `ibv_import_device` on a `dup` of it finds the context again (see
//! `import`). It is closed with the context.

use crate::cq::Cq;
use crate::device::DevEntry;
use crate::ffi::*;
use crate::handle::{Castable, Kind, Obj};
use crate::qp::Qp;
use crate::srq::Srq;
use crate::util::{guard, guard_neg, guarded, neg};
use softrdma::{AsyncEvent, Device, FdWatch, Qpn};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, Weak};

/// The objects of a context by their core handles, to turn completion and
/// asynchronous events back into C pointers (weak: the objects own
/// themselves).
#[derive(Default)]
pub struct Objects {
    pub cqs: HashMap<u32, Weak<Obj<Cq>>>,
    pub qps: HashMap<u32, Weak<Obj<Qp>>>,
    pub srqs: HashMap<u32, Weak<Obj<Srq>>>,
}

/// Our side of a context.
pub struct Context {
    pub dev: Device,
    entry: &'static DevEntry,
    /// An epoll descriptor watching the device's async-event eventfd: it is
    /// `context->async_fd`, readable while an event is pending, and has
    /// its own O_NONBLOCK flag for the program to set.
    async_ep: FdWatch,
    /// Shared with the contexts imported from this one.
    pub objs: Arc<Mutex<Objects>>,
    /// Whether an empty `ibv_poll_cq` now and then yields the CPU (see
    /// [`yield_on_idle_polls`]).
    pub yield_idle: bool,
    /// `context->cmd_fd`, held to be closed with the context.
    _cmd: OwnedFd,
    /// The device context ("ucontext") this context stands for: the
    /// inode of its command file, shared by the contexts imported from it.
    pub ucontext: UContext,
    /// The process that opened it (a child after `fork` has a copy of the
    /// context but not its engine).
    pub pid: libc::pid_t,
}

/// A device context's identity: (device, inode) of its command file.
pub type UContext = (u64, u64);

/// The (device, inode) of an open descriptor.
pub fn file_id(fd: c_int) -> Result<UContext, i32> {
    softrdma_io::host::file_id(fd).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}

/// The name of a context's command file (a memfd), as /proc shows it
/// (`/memfd:NAME (deleted)`): how a command descriptor of softrdma that
/// another process passed is recognised.
pub const CMD_FILE_PREFIX: &str = "softrdma-uverbs:";

/// A new command file for a context of device `name`.
fn cmd_file(name: &str) -> Result<OwnedFd, i32> {
    let n = std::ffi::CString::new(format!("{CMD_FILE_PREFIX}{name}")).map_err(|_| libc::EINVAL)?;
    softrdma_io::host::memfd(&n).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}

impl Castable for Context {
    fn release_uses(&self) {}
    type Repr = verbs_context;
    type Api = ibv_context;
    const KIND: Kind = Kind::Context;
    const MAGIC: u64 = 0x5352_4354_5854_0002;
    const API_OFFSET: usize = std::mem::offset_of!(verbs_context, context);
}

impl Context {
    /// The device entry of this context.
    pub fn entry(&self) -> &'static DevEntry {
        self.entry
    }

    /// Warns once when `dest` looks unreachable from this device's address
    /// (see `reach`).
    pub fn check_peer(&self, dest: IpAddr) {
        crate::reach::check(&self.entry.cfg.name, self.dev.local_addr().ip(), dest);
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // A forked child's copy of a parent's context counts for nothing:
        // the entry may hold a device of the child's own by now.
        if !self.dev.forked_away() {
            self.entry.release();
        }
    }
}

/// A context as its objects hold it.
pub type Ctx = Arc<Obj<Context>>;

/// The context behind a program's pointer, if live.
pub fn context(p: *mut ibv_context) -> Option<Ctx> {
    Obj::<Context>::get(p)
}

/// Whether a thread spinning on an empty CQ should now and then yield the
/// CPU: `SOFTRDMA_POLL_YIELD=1`/`0` decides; by default
/// [`yield_by_default`] — the policy of `softrdma perf --spin auto`.
pub fn yield_on_idle_polls(addr: IpAddr) -> bool {
    let configured = softrdma::config::global().map_or(None, |c| c.poll_yield.value);
    match configured {
        Some(y) => y,
        None => {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            yield_by_default(addr.is_loopback(), cores)
        }
    }
}

/// The default of [`yield_on_idle_polls`]: yes when the device has a
/// loopback address (every peer is on this host) and the host has fewer
/// than 4 cores. Then a spinning program, its peer and the progress
/// threads (and, for a shared device, its device process) share too few
/// cores, and a round trip would otherwise wait for a scheduler time
/// slice (milliseconds) whenever the one who must act is not running.
///
/// Whether the device is shared does not change it (issue 19, measured
/// with `softrdma perf write-lat` 2 B between two processes on one shared
/// loopback address, alternated rounds, 2 cores): at load average 10,
/// through the same-host path, mean 4.2 µs yielding vs 8.6-42 µs busy
/// (typical 3.7 vs 1.9 µs), and with the device process routing every
/// datagram (`SOFTRDMA_SAME_HOST=udp`) mean 89-104 µs yielding vs
/// 145-354 µs busy; at load average 30-40 busy won (median of 6 rounds'
/// typical 89 vs 908 µs). Addresses off loopback never yield by default:
/// there the device process of many ranks sharing an address was starved
/// by ranks forced to yield (Open MPI, 8 ranks per namespace,
/// `SOFTRDMA_POLL_YIELD=1`: RC retry exceeded in 3 runs of 3).
pub fn yield_by_default(loopback: bool, cores: usize) -> bool {
    loopback && cores < 4
}

/// `ibv_open_device`.
pub fn open(entry: &'static DevEntry) -> Result<*mut ibv_context, i32> {
    open_at(entry, None, None)
}

/// `ibv_open_device`; a loopback-default device not open yet binds `at`,
/// or skips `avoid` (see [`DevEntry::acquire_at`]).
pub fn open_at(
    entry: &'static DevEntry,
    at: Option<IpAddr>,
    avoid: Option<IpAddr>,
) -> Result<*mut ibv_context, i32> {
    let cmd = cmd_file(&entry.cfg.name)?;
    let ucontext = file_id(cmd.as_raw_fd())?;
    let dev = entry.acquire_at(at, avoid)?;
    let objs = Arc::new(Mutex::new(Objects::default()));
    new_context(entry, dev, cmd, ucontext, objs).map_err(|(e, _)| e)
}

/// A context over the acquired device `dev` (released on failure).
pub fn new_context(
    entry: &'static DevEntry,
    dev: Device,
    cmd: OwnedFd,
    ucontext: UContext,
    objs: Arc<Mutex<Objects>>,
) -> Result<*mut ibv_context, (i32, OwnedFd)> {
    let yield_idle = yield_on_idle_polls(dev.local_addr().ip());
    let async_ep = match FdWatch::new(dev.async_fd()) {
        Ok(e) => e,
        Err(e) => {
            entry.release();
            return Err((e.raw_os_error().unwrap_or(libc::EIO), cmd));
        }
    };
    // Every function slot starts None.
    let mut vctx: verbs_context = crate::util::zeroed();
    vctx.query_port = Some(crate::query::query_port_ex);
    vctx.create_cq_ex = Some(crate::cq::create_cq_ex);
    vctx.query_device_ex = Some(crate::query::query_device_ex);
    vctx.create_qp_ex = Some(crate::qp::create_qp_ex);
    vctx.create_srq_ex = Some(crate::srq::create_srq_ex);
    vctx.query_rt_values = Some(crate::query::query_rt_values);
    vctx.alloc_td = Some(crate::domain::alloc_td);
    vctx.dealloc_td = Some(crate::domain::dealloc_td);
    vctx.alloc_parent_domain = Some(crate::domain::alloc_parent_domain);
    vctx.advise_mr = Some(crate::mr::advise_mr);
    vctx.open_xrcd = Some(crate::xrc::open_xrcd);
    vctx.close_xrcd = Some(crate::xrc::close_xrcd);
    vctx.open_qp = Some(crate::xrc::open_qp);
    vctx.get_srq_num = Some(crate::xrc::get_srq_num);
    vctx.sz = std::mem::size_of::<verbs_context>();
    let c = &mut vctx.context;
    c.device = &entry.c as *const ibv_device as *mut ibv_device;
    c.ops._compat_query_device = Some(crate::query::compat_query_device);
    c.ops.poll_cq = Some(crate::cq::poll_cq);
    c.ops.req_notify_cq = Some(crate::cq::req_notify_cq);
    c.ops.post_srq_recv = Some(crate::post::post_srq_recv);
    c.ops.post_send = Some(crate::post::post_send);
    c.ops.post_recv = Some(crate::post::post_recv);
    c.cmd_fd = cmd.as_raw_fd();
    c.ops.alloc_mw = Some(crate::mw::alloc_mw);
    c.ops.bind_mw = Some(crate::mw::bind_mw);
    c.ops.dealloc_mw = Some(crate::mw::dealloc_mw);
    c.async_fd = async_ep.as_raw_fd();
    c.num_comp_vectors = 1;
    c.abi_compat = usize::MAX as *mut c_void; // __VERBS_ABI_IS_EXTENDED
    let ctx = Context {
        dev,
        entry,
        async_ep,
        objs,
        yield_idle,
        _cmd: cmd,
        ucontext,
        pid: std::process::id() as libc::pid_t,
    };
    Ok(Obj::new(vctx, ctx).publish())
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_close_device`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn close_device(ctx: *mut ibv_context) -> c_int {
    // Always succeeds for a live context, like libibverbs; the context is
    // freed now or with its last object (whichever reference goes last).
    guard_neg(|| {
        Obj::<Context>::take(ctx)
            .map(drop)
            .map_err(|_| libc::EINVAL)
    })
}

// -------------------------------------------------------- async events ----

/// `ibv_get_async_event`: blocks (unless the descriptor is non-blocking)
/// until the device has an asynchronous event. A cancellation point, as
/// libibverbs' `read()` on `async_fd`: see `util`.
///
/// # Safety
/// The C contract of `ibv_get_async_event`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C-unwind" fn get_async_event(
    ctx: *mut ibv_context,
    ev: *mut ibv_async_event,
) -> c_int {
    // Held across the wait; a forced unwind drops it.
    let c = match guarded(|| {
        let c = context(ctx).ok_or(libc::EINVAL)?;
        if ev.is_null() {
            return Err(libc::EINVAL);
        }
        Ok(c)
    }) {
        Ok(c) => c,
        Err(e) => return neg(Err(e)),
    };
    loop {
        let got = guarded(|| {
            while let Some(e) = c.dev.poll_async_event() {
                if let Some(out) = translate_async_event(&c, e) {
                    // SAFETY: valid output structure.
                    unsafe { ev.write(out) };
                    return Ok(true);
                }
                // An event for an object already destroyed: skip it.
            }
            if c.async_ep.is_nonblocking() {
                return Err(libc::EAGAIN);
            }
            c.dev.about_to_block();
            Ok(false)
        });
        match got {
            Ok(true) => return 0,
            Ok(false) => {}
            Err(e) => return neg(Err(e)),
        }
        // Outside any guard: the cancellation point.
        if let Err(e) = c.dev.wait_async_event(None) {
            return neg(Err(e.errno()));
        }
    }
}

/// The C event for a softrdma event, or `None` when its object is gone.
/// The object counts it as handed out, under the table's lock a destroy
/// takes to stop deliveries (`acks.rs`).
fn translate_async_event(c: &Context, e: AsyncEvent) -> Option<ibv_async_event> {
    let o = c.objs.lock().unwrap_or_else(|e| e.into_inner());
    let ev = |element: *mut c_void, event_type| ibv_async_event {
        element,
        event_type,
    };
    let qp = |n: Qpn, t: c_int| {
        let q = o.qps.get(&n.value())?.upgrade()?;
        q.acks.delivered();
        Some(ev(q.api().cast(), t))
    };
    match e {
        AsyncEvent::CqErr(id) => {
            let q = o.cqs.get(&id.0)?.upgrade()?;
            q.async_acks.delivered();
            Some(ev(q.api().cast(), IBV_EVENT_CQ_ERR))
        }
        AsyncEvent::QpFatal(n) => qp(n, IBV_EVENT_QP_FATAL),
        AsyncEvent::QpReqErr(n) => qp(n, IBV_EVENT_QP_REQ_ERR),
        AsyncEvent::QpAccessErr(n) => qp(n, IBV_EVENT_QP_ACCESS_ERR),
        AsyncEvent::CommEst(n) => qp(n, IBV_EVENT_COMM_EST),
        AsyncEvent::SqDrained(n) => qp(n, IBV_EVENT_SQ_DRAINED),
        AsyncEvent::QpLastWqeReached(n) => qp(n, IBV_EVENT_QP_LAST_WQE_REACHED),
        AsyncEvent::SrqLimitReached(id) => {
            let s = o.srqs.get(&id.0)?.upgrade()?;
            s.acks.delivered();
            Some(ev(s.api().cast(), IBV_EVENT_SRQ_LIMIT_REACHED))
        }
    }
}

/// `ibv_ack_async_event`: counts the event on its object (and wakes its
/// destroy waiting for it, `acks.rs`); events of no object (a port's,
/// the device's) need none, as in rdma-core.
///
/// # Safety
/// The C contract of `ibv_ack_async_event`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn ack_async_event(ev: *mut ibv_async_event) {
    guard((), || {
        if ev.is_null() {
            return;
        }
        // SAFETY: the caller passes the event it got.
        let ev = unsafe { &*ev };
        // SAFETY (all three): a u32 field of the object's C structure.
        match ev.event_type {
            IBV_EVENT_CQ_ERR => {
                if let Some(q) = Obj::<Cq>::get(ev.element.cast()) {
                    let c = unsafe {
                        q.counter(|r| std::ptr::addr_of_mut!((*r).async_events_completed))
                    };
                    q.async_acks.ack(c, 1);
                }
            }
            IBV_EVENT_SRQ_ERR | IBV_EVENT_SRQ_LIMIT_REACHED => {
                if let Some(s) = Obj::<Srq>::get(ev.element.cast()) {
                    let c = unsafe { s.counter(|r| std::ptr::addr_of_mut!((*r).events_completed)) };
                    s.acks.ack(c, 1);
                }
            }
            IBV_EVENT_QP_FATAL
            | IBV_EVENT_QP_REQ_ERR
            | IBV_EVENT_QP_ACCESS_ERR
            | IBV_EVENT_COMM_EST
            | IBV_EVENT_SQ_DRAINED
            | IBV_EVENT_PATH_MIG
            | IBV_EVENT_PATH_MIG_ERR
            | IBV_EVENT_QP_LAST_WQE_REACHED => {
                if let Some(q) = Obj::<Qp>::get(ev.element.cast()) {
                    let c = unsafe {
                        q.counter(|r| std::ptr::addr_of_mut!((*r).qp_base.events_completed))
                    };
                    q.acks.ack(c, 1);
                }
            }
            _ => {}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::yield_by_default;

    /// Idle polls yield by default only on a loopback device on a host of
    /// fewer than 4 cores.
    #[test]
    fn idle_polls_yield_only_on_loopback_with_few_cores() {
        for cores in [1, 2, 3] {
            assert!(yield_by_default(true, cores), "{cores} cores");
            assert!(!yield_by_default(false, cores), "not loopback");
        }
        for cores in [4, 8, 64] {
            assert!(!yield_by_default(true, cores));
            assert!(!yield_by_default(false, cores));
        }
    }
}
