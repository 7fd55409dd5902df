//! Devices and contexts: discovery (environment, config file, loopback
//! default), `ibv_open_device`, the queries, asynchronous events.
//!
//! # Which devices exist
//!
//! 1. `SOFTRDMA_ADDR=IP` in the environment: one device, `softrdma0`, at
//!    that address.
//! 2. Otherwise the config file `$SOFTRDMA_CONFIG`, else `/etc/softrdma.conf`
//!    when it exists: one device per line, `NAME ADDRESS [mtu=BYTES]`, where
//!    ADDRESS is an IPv4/IPv6 address or `auto`; `#` starts a comment.
//! 3. Otherwise one device, `softrdma0`, that takes the first free loopback
//!    address 127.0.0.x when opened: several processes on one host need no
//!    setup and each gets its own address (and GID).
//!
//! `SOFTRDMA_MTU=BYTES` sets the active MTU (256–4096, default 4096) of
//! devices that do not name one.

use crate::ffi::*;
use crate::util::{self, copy_cstr, guard_errno, guard_neg, guard_ptr, is_live, Kind};
use softrdma::{Device, DeviceOptions};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// Magic values after each C structure: a cheap sanity check on the hot
/// paths, where a registry lookup would cost too much.
pub const MAGIC_DEVICE: u64 = 0x5352_4456_4943_4501;
/// See [`MAGIC_DEVICE`].
pub const MAGIC_CONTEXT: u64 = 0x5352_4354_5854_0002;

/// One configured device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevConfig {
    /// Name reported by `ibv_get_device_name`.
    pub name: String,
    /// Address, or `None` for the first free loopback address.
    pub addr: Option<IpAddr>,
    /// Active MTU in bytes.
    pub mtu: u32,
}

/// Parses the config file format (see the module docs).
pub fn parse_config(text: &str, default_mtu: u32) -> Result<Vec<DevConfig>, String> {
    let mut out: Vec<DevConfig> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut it = line.split_whitespace();
        let name = it.next().unwrap_or_default().to_string();
        let addr = it
            .next()
            .ok_or_else(|| format!("line {}: missing address", i + 1))?;
        let addr = if addr == "auto" {
            None
        } else {
            Some(
                addr.parse::<IpAddr>()
                    .map_err(|_| format!("line {}: bad address {addr:?}", i + 1))?,
            )
        };
        let mut mtu = default_mtu;
        for opt in it {
            match opt.split_once('=') {
                Some(("mtu", v)) => {
                    mtu = v
                        .parse()
                        .ok()
                        .filter(|m| (256..=4096).contains(m))
                        .ok_or_else(|| format!("line {}: bad mtu {v:?}", i + 1))?
                }
                _ => return Err(format!("line {}: unknown option {opt:?}", i + 1)),
            }
        }
        if name.is_empty() || name.len() >= IBV_SYSFS_NAME_MAX {
            return Err(format!("line {}: bad device name", i + 1));
        }
        if out.iter().any(|d| d.name == name) {
            return Err(format!("line {}: duplicate device {name}", i + 1));
        }
        out.push(DevConfig { name, addr, mtu });
    }
    Ok(out)
}

fn env_mtu() -> u32 {
    std::env::var("SOFTRDMA_MTU")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .filter(|m| (256..=4096).contains(m))
        .unwrap_or(4096)
}

/// The configured devices, from the environment or the config file.
pub fn configured_devices() -> Vec<DevConfig> {
    let mtu = env_mtu();
    if let Ok(a) = std::env::var("SOFTRDMA_ADDR") {
        if let Ok(ip) = a.trim().parse::<IpAddr>() {
            return vec![DevConfig {
                name: "softrdma0".into(),
                addr: Some(ip),
                mtu,
            }];
        }
        eprintln!("softrdma: ignoring SOFTRDMA_ADDR={a:?}: not an IP address");
    }
    let path = std::env::var_os("SOFTRDMA_CONFIG")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            let p = std::path::PathBuf::from("/etc/softrdma.conf");
            p.exists().then_some(p)
        });
    if let Some(p) = path {
        match std::fs::read_to_string(&p)
            .map_err(|e| e.to_string())
            .and_then(|t| parse_config(&t, mtu))
        {
            Ok(list) => return list,
            Err(e) => eprintln!("softrdma: {}: {e}; no devices", p.display()),
        }
        return Vec::new();
    }
    vec![DevConfig {
        name: "softrdma0".into(),
        addr: None,
        mtu,
    }]
}

/// A device of the list: the C structure first, then ours.
#[repr(C)]
pub struct DevEntry {
    pub c: ibv_device,
    magic: AtomicU64,
    pub cfg: DevConfig,
    /// The open softrdma device and the number of contexts using it: all
    /// contexts of a process share one device (one address, one GID).
    open: Mutex<Option<(Device, usize)>>,
    /// Node GUID once known (big-endian in memory, like `__be64`).
    guid_be: AtomicU64,
}

// SAFETY: the C part holds only NULL pointers and data, written once before
// the entry is shared and never changed; the rest is Mutex/atomics.
unsafe impl Sync for DevEntry {}
// SAFETY: as above.
unsafe impl Send for DevEntry {}

/// Node GUID derived from an address, as softrdma-proto derives it (known
/// before the device is opened, for `ibv_get_device_guid`).
fn guid_for(ip: IpAddr) -> u64 {
    let b = match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            [0x02, 0x50, 0x56, 0xff, 0xfe, o[1], o[2], o[3]]
        }
        IpAddr::V6(a) => {
            let o = a.octets();
            [o[8] ^ 2, o[9], o[10], o[11], o[12], o[13], o[14], o[15]]
        }
    };
    u64::from_be_bytes(b)
}

static DEVICES: OnceLock<Vec<&'static DevEntry>> = OnceLock::new();

/// The device list, built once per process.
pub fn devices() -> &'static [&'static DevEntry] {
    DEVICES.get_or_init(|| {
        configured_devices()
            .into_iter()
            .map(|cfg| {
                // SAFETY: ibv_device is plain data (pointers, ints, arrays):
                // all-zero is a valid value.
                let mut c: ibv_device = unsafe { std::mem::zeroed() };
                c.node_type = IBV_NODE_CA;
                c.transport_type = IBV_TRANSPORT_IB;
                copy_cstr(&mut c.name, &cfg.name);
                copy_cstr(&mut c.dev_name, &format!("uverbs-{}", cfg.name));
                copy_cstr(
                    &mut c.dev_path,
                    &format!("/sys/class/infiniband_verbs/uverbs-{}", cfg.name),
                );
                copy_cstr(
                    &mut c.ibdev_path,
                    &format!("/sys/class/infiniband/{}", cfg.name),
                );
                let guid = cfg.addr.map_or(0, |a| guid_for(a).to_be());
                let e: &'static DevEntry = Box::leak(Box::new(DevEntry {
                    c,
                    magic: AtomicU64::new(MAGIC_DEVICE),
                    cfg,
                    open: Mutex::new(None),
                    guid_be: AtomicU64::new(guid),
                }));
                util::register((e as *const DevEntry).cast(), Kind::Device);
                e
            })
            .collect()
    })
}

fn entry<'a>(p: *mut ibv_device) -> Option<&'a DevEntry> {
    if !is_live(p as *const (), Kind::Device) {
        return None;
    }
    // SAFETY: registered devices are leaked `DevEntry`s with `c` first.
    let e = unsafe { &*(p as *const DevEntry) };
    (e.magic.load(Ordering::Relaxed) == MAGIC_DEVICE).then_some(e)
}

impl DevEntry {
    fn acquire(&self) -> Result<Device, i32> {
        let mut g = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((d, n)) = g.as_mut() {
            *n += 1;
            return Ok(d.clone());
        }
        let mut o = match self.cfg.addr {
            Some(a) => DeviceOptions::at(a),
            None => DeviceOptions::default(),
        };
        o.mtu = self.cfg.mtu;
        let d = Device::open(o).map_err(|e| {
            eprintln!("softrdma: opening {}: {e}", self.cfg.name);
            e.errno()
        })?;
        self.guid_be
            .store(d.query_device().node_guid.to_be(), Ordering::Relaxed);
        *g = Some((d.clone(), 1));
        Ok(d)
    }

    fn release(&self) {
        let mut g = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, n)) = g.as_mut() {
            *n -= 1;
            if *n == 0 {
                *g = None;
            }
        }
    }
}

// ------------------------------------------------------------ contexts ----

/// Per-context tables that turn the core's handles back into the C
/// objects (for completion and asynchronous events).
#[derive(Default)]
pub struct Objects {
    pub cqs: HashMap<u32, usize>,
    pub qps: HashMap<u32, usize>,
    pub srqs: HashMap<u32, usize>,
}

/// A context: `verbs_context` (which ends with the `ibv_context` the
/// program sees) first, then ours.
#[repr(C)]
pub struct Context {
    pub vctx: verbs_context,
    magic: AtomicU64,
    pub dev: Device,
    pub entry: &'static DevEntry,
    /// An epoll descriptor watching the device's async-event eventfd: it is
    /// `context->async_fd`, readable while an event is pending, and has
    /// its own O_NONBLOCK flag for the program to set.
    async_ep: OwnedFd,
    pub objs: Mutex<Objects>,
    /// PDs, CQs and completion channels of this context (everything else
    /// hangs off a PD): a context closed while they live is freed with the
    /// last of them.
    pub users: std::sync::atomic::AtomicUsize,
    /// Closed by the program (freed with its last object).
    closed: std::sync::atomic::AtomicBool,
    /// Freed (once).
    freed: std::sync::atomic::AtomicBool,
    /// Whether an empty `ibv_poll_cq` now and then yields the CPU (see
    /// [`yield_on_idle_polls`]).
    pub yield_idle: bool,
}

/// Whether a thread spinning on an empty CQ should now and then yield the
/// CPU: `SOFTRDMA_POLL_YIELD=1`/`0` decides; by default yes when the
/// device has a loopback address (every peer is on this host) and the host
/// has fewer than 4 cores. Then a spinning program, its peer and the
/// progress threads share too few cores, and a round trip would otherwise
/// wait for a scheduler time slice (milliseconds) whenever the one who
/// must act is not running — the policy of `softrdma perf --spin auto`.
pub fn yield_on_idle_polls(addr: IpAddr) -> bool {
    match std::env::var("SOFTRDMA_POLL_YIELD").as_deref() {
        Ok("1") | Ok("yes") | Ok("always") => true,
        Ok("0") | Ok("no") | Ok("never") => false,
        _ => {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            addr.is_loopback() && cores < 4
        }
    }
}

/// An epoll instance watching one descriptor for input: readable exactly
/// when that descriptor is, but a file of its own (so a program may make
/// it non-blocking without touching softrdma's descriptor).
pub fn epoll_watching(fd: RawFd) -> Result<OwnedFd, i32> {
    // SAFETY: epoll_create1 takes no pointers; the result is checked.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(util::errno());
    }
    // SAFETY: `ep` is a fresh descriptor we own.
    let ep = unsafe { OwnedFd::from_raw_fd(ep) };
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: 0,
    };
    // SAFETY: valid epoll and target descriptors, `ev` lives across the call.
    if unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
        return Err(util::errno());
    }
    Ok(ep)
}

/// Whether the program made `fd` non-blocking.
pub fn is_nonblocking(fd: RawFd) -> bool {
    // SAFETY: F_GETFL takes no pointer.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    fl >= 0 && fl & libc::O_NONBLOCK != 0
}

/// The context behind a program's `ibv_context` pointer, if it is one of
/// ours and still open (registry lookup: for the non-hot verbs).
pub fn context<'a>(p: *mut ibv_context) -> Option<&'a Context> {
    let c = context_ptr(p)?;
    if !is_live(c as *const (), Kind::Context) {
        return None;
    }
    // SAFETY: registered contexts are live boxed `Context`s.
    let c = unsafe { &*c };
    (c.magic.load(Ordering::Relaxed) == MAGIC_CONTEXT).then_some(c)
}

fn context_ptr(p: *mut ibv_context) -> Option<*const Context> {
    if p.is_null() {
        return None;
    }
    let off = std::mem::offset_of!(Context, vctx) + std::mem::offset_of!(verbs_context, context);
    Some((p as *const u8).wrapping_sub(off).cast())
}

impl Context {
    /// The pointer the program holds.
    pub fn c_ptr(&self) -> *mut ibv_context {
        &self.vctx.context as *const ibv_context as *mut ibv_context
    }
}

fn new_context(entry: &'static DevEntry) -> Result<*mut ibv_context, i32> {
    let dev = entry.acquire()?;
    let yield_idle = yield_on_idle_polls(dev.local_addr().ip());
    let async_ep = match epoll_watching(dev.async_fd()) {
        Ok(e) => e,
        Err(e) => {
            entry.release();
            return Err(e);
        }
    };
    // SAFETY: verbs_context is plain data (pointers, Option<fn>, ints):
    // all-zero is valid, and every function slot is then None.
    let mut vctx: verbs_context = unsafe { std::mem::zeroed() };
    vctx.query_port = Some(crate::verbs::query_port_ex);
    vctx.create_cq_ex = Some(crate::verbs::create_cq_ex);
    vctx.query_device_ex = Some(query_device_ex);
    vctx.create_qp_ex = Some(crate::verbs::create_qp_ex);
    vctx.create_srq_ex = Some(crate::verbs::create_srq_ex);
    vctx.query_rt_values = Some(query_rt_values);
    vctx.sz = std::mem::size_of::<verbs_context>();
    let c = &mut vctx.context;
    c.device = &entry.c as *const ibv_device as *mut ibv_device;
    c.ops._compat_query_device = Some(compat_query_device);
    c.ops.poll_cq = Some(crate::verbs::poll_cq);
    c.ops.req_notify_cq = Some(crate::verbs::req_notify_cq);
    c.ops.post_srq_recv = Some(crate::verbs::post_srq_recv);
    c.ops.post_send = Some(crate::verbs::post_send);
    c.ops.post_recv = Some(crate::verbs::post_recv);
    c.cmd_fd = -1;
    c.async_fd = async_ep.as_raw_fd();
    c.num_comp_vectors = 1;
    c.abi_compat = usize::MAX as *mut c_void; // __VERBS_ABI_IS_EXTENDED
    let b = Box::new(Context {
        vctx,
        magic: AtomicU64::new(MAGIC_CONTEXT),
        dev,
        entry,
        async_ep,
        objs: Mutex::new(Objects::default()),
        users: std::sync::atomic::AtomicUsize::new(0),
        closed: std::sync::atomic::AtomicBool::new(false),
        freed: std::sync::atomic::AtomicBool::new(false),
        yield_idle,
    });
    let p = Box::into_raw(b);
    util::register(p as *const (), Kind::Context);
    // SAFETY: just allocated.
    Ok(unsafe { (*p).c_ptr() })
}

// ----------------------------------------------------------- functions ----

pub unsafe extern "C" fn get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    guard_ptr(|| {
        let devs = devices();
        // calloc'ed so that the array is NULL-terminated; freed by
        // ibv_free_device_list.
        // SAFETY: calloc with a non-zero count; checked for NULL.
        let arr = unsafe { libc::calloc(devs.len() + 1, std::mem::size_of::<*mut ibv_device>()) }
            as *mut *mut ibv_device;
        if arr.is_null() {
            return Err(libc::ENOMEM);
        }
        for (i, d) in devs.iter().enumerate() {
            // SAFETY: `arr` has devs.len() + 1 slots.
            unsafe { *arr.add(i) = &d.c as *const ibv_device as *mut ibv_device };
        }
        util::register(arr as *const (), Kind::DeviceList);
        if !num.is_null() {
            // SAFETY: the caller passes a valid int pointer or NULL.
            unsafe { *num = devs.len() as c_int };
        }
        Ok(arr)
    })
}

pub unsafe extern "C" fn free_device_list(list: *mut *mut ibv_device) {
    util::guard((), || {
        if util::unregister(list as *const (), Kind::DeviceList) {
            // SAFETY: allocated by calloc in get_device_list, freed once.
            unsafe { libc::free(list.cast()) };
        }
    })
}

pub unsafe extern "C" fn get_device_name(dev: *mut ibv_device) -> *const c_char {
    util::guard(std::ptr::null(), || match entry(dev) {
        Some(e) => e.c.name.as_ptr(),
        None => {
            util::set_errno(libc::EINVAL);
            std::ptr::null()
        }
    })
}

pub unsafe extern "C" fn get_device_index(dev: *mut ibv_device) -> c_int {
    util::guard(-1, || {
        devices()
            .iter()
            .position(|d| std::ptr::eq(&d.c, dev))
            .map_or(-1, |i| i as c_int)
    })
}

pub unsafe extern "C" fn get_device_guid(dev: *mut ibv_device) -> u64 {
    util::guard(0, || {
        entry(dev).map_or(0, |e| e.guid_be.load(Ordering::Relaxed))
    })
}

pub unsafe extern "C" fn open_device(dev: *mut ibv_device) -> *mut ibv_context {
    guard_ptr(|| {
        let e = entry(dev).ok_or(libc::EINVAL)?;
        // SAFETY of the 'static: device entries are leaked, never freed.
        let e: &'static DevEntry = unsafe { &*(e as *const DevEntry) };
        new_context(e)
    })
}

pub unsafe extern "C" fn close_device(ctx: *mut ibv_context) -> c_int {
    guard_neg(|| {
        let c = context(ctx).ok_or(libc::EINVAL)?;
        let p = c as *const Context;
        if !util::unregister(p as *const (), Kind::Context) {
            return Err(libc::EINVAL);
        }
        // Closed: no longer usable as a context. Freed now, or — when the
        // program closes it with PDs, CQs or channels still alive, as
        // perftest's client does with its receive CQ — when the last of
        // them is destroyed, so that destroy never reaches freed memory.
        c.magic.store(0, Ordering::SeqCst);
        c.closed.store(true, Ordering::SeqCst);
        if c.users.load(Ordering::SeqCst) == 0 {
            // SAFETY: unregistered above; `free_context` frees once.
            unsafe { free_context(p) };
        }
        Ok(())
    })
}

/// One PD, CQ or completion channel of `c` is gone: frees a closed context
/// with its last object.
///
/// # Safety
/// `c` is a context that counted that object in `users`.
pub unsafe fn release_user(c: *const Context) {
    // SAFETY: the context lives while its `users` count is non-zero.
    let r = unsafe { &*c };
    if r.users.fetch_sub(1, Ordering::SeqCst) == 1 && r.closed.load(Ordering::SeqCst) {
        // SAFETY: closed and unused: `free_context` frees once.
        unsafe { free_context(c) };
    }
}

/// Frees a closed context (at most once, whoever calls first).
///
/// # Safety
/// `c` is a boxed, unregistered context.
unsafe fn free_context(c: *const Context) {
    // SAFETY: per the contract.
    if unsafe { &*c }.freed.swap(true, Ordering::SeqCst) {
        return;
    }
    // SAFETY: contexts are `Box::into_raw`ed; `freed` makes this the only
    // free.
    let b = unsafe { Box::from_raw(c as *mut Context) };
    let entry = b.entry;
    drop(b);
    entry.release();
}

fn env_u32(name: &str) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|s| {
            let s = s.trim();
            match s.strip_prefix("0x") {
                Some(h) => u32::from_str_radix(h, 16).ok(),
                None => s.parse().ok(),
            }
        })
        .unwrap_or(0)
}

fn device_attr(c: &Context) -> ibv_device_attr {
    let a = c.dev.query_device();
    let i = |v: u32| v.min(i32::MAX as u32) as c_int;
    // SAFETY: plain data; all-zero is valid.
    let mut d: ibv_device_attr = unsafe { std::mem::zeroed() };
    copy_cstr(
        &mut d.fw_ver,
        concat!("softrdma ", env!("CARGO_PKG_VERSION")),
    );
    d.node_guid = a.node_guid.to_be();
    d.sys_image_guid = a.node_guid.to_be();
    d.max_mr_size = a.max_mr_size;
    d.page_size_cap = 0xffff_f000; // any multiple of 4 KiB
                                   // No PCI identity (0) unless SOFTRDMA_VENDOR_ID / SOFTRDMA_VENDOR_PART_ID
                                   // say otherwise: some programs key features on it (perftest turns on
                                   // its ibv_wr_* path only for devices it recognises).
    d.vendor_id = env_u32("SOFTRDMA_VENDOR_ID");
    d.vendor_part_id = env_u32("SOFTRDMA_VENDOR_PART_ID");
    d.hw_ver = 0;
    d.max_qp = i(a.max_qp);
    d.max_qp_wr = i(a.max_qp_wr);
    d.device_cap_flags = IBV_DEVICE_BAD_PKEY_CNTR
        | IBV_DEVICE_BAD_QKEY_CNTR
        | IBV_DEVICE_CURR_QP_STATE_MOD
        | IBV_DEVICE_SYS_IMAGE_GUID
        | IBV_DEVICE_RC_RNR_NAK_GEN
        | IBV_DEVICE_N_NOTIFY_CQ;
    d.max_sge = i(a.max_sge);
    d.max_sge_rd = i(a.max_sge_rd);
    d.max_cq = i(a.max_cq);
    d.max_cqe = i(a.max_cqe);
    d.max_mr = i(a.max_mr);
    d.max_pd = i(a.max_pd);
    d.max_qp_rd_atom = i(a.max_qp_rd_atom);
    d.max_qp_init_rd_atom = i(a.max_qp_init_rd_atom);
    d.max_res_rd_atom = i(a.max_qp_rd_atom.saturating_mul(a.max_qp));
    d.atomic_cap = IBV_ATOMIC_HCA;
    d.max_ah = i(a.max_ah);
    d.max_srq = i(a.max_srq);
    d.max_srq_wr = i(a.max_srq_wr);
    d.max_srq_sge = i(a.max_srq_sge);
    d.max_pkeys = a.max_pkeys;
    d.local_ca_ack_delay = 15;
    d.phys_port_cnt = 1;
    d
}

pub unsafe extern "C" fn query_device(ctx: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int {
    guard_errno(|| {
        let Some(c) = context(ctx) else {
            return libc::EINVAL;
        };
        if attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller passes a valid ibv_device_attr.
        unsafe { attr.write(device_attr(c)) };
        0
    })
}

unsafe extern "C" fn compat_query_device(
    ctx: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    // SAFETY: same contract.
    unsafe { query_device(ctx, attr) }
}

pub unsafe extern "C" fn query_device_ex(
    ctx: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    guard_errno(|| {
        let Some(c) = context(ctx) else {
            return libc::EINVAL;
        };
        // SAFETY: NULL or a valid input structure.
        if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
            return libc::EINVAL;
        }
        if attr.is_null() || attr_size < std::mem::size_of::<ibv_device_attr>() {
            return libc::EINVAL;
        }
        // SAFETY: plain data; all-zero is valid.
        let mut x: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
        x.orig_attr = device_attr(c);
        x.phys_port_cnt_ex = 1;
        // SAFETY: the caller states `attr` holds `attr_size` bytes.
        unsafe { util::write_prefix(attr, &x, attr_size) };
        0
    })
}

unsafe extern "C" fn query_rt_values(ctx: *mut ibv_context, values: *mut ibv_values_ex) -> c_int {
    guard_errno(|| {
        if context(ctx).is_none() || values.is_null() {
            return libc::EINVAL;
        }
        // IBV_VALUES_MASK_RAW_CLOCK: the clock completions would be stamped
        // with (CLOCK_MONOTONIC); we stamp none, but the clock is honest.
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        // SAFETY: valid output structure.
        let v = unsafe { &mut *values };
        if v.comp_mask & 1 != 0 {
            v.raw_clock.tv_sec = ts.tv_sec;
            v.raw_clock.tv_nsec = ts.tv_nsec;
            v.comp_mask = 1;
        } else {
            v.comp_mask = 0;
        }
        0
    })
}

/// Port attributes of port 1.
pub fn port_attr(c: &Context) -> ibv_port_attr {
    let p = c.dev.query_port();
    let mtu_enum = |b: u32| softrdma::Mtu::from_bytes_floor(b).map_or(5, |m| m as c_int);
    // SAFETY: plain data; all-zero is valid.
    let mut a: ibv_port_attr = unsafe { std::mem::zeroed() };
    a.state = IBV_PORT_ACTIVE;
    a.max_mtu = mtu_enum(p.max_mtu);
    a.active_mtu = mtu_enum(p.active_mtu);
    a.gid_tbl_len = p.gid_tbl_len as c_int;
    a.port_cap_flags = IBV_PORT_IP_BASED_GIDS;
    a.max_msg_sz = softrdma_proto::limits::MAX_MSG_SIZE;
    a.bad_pkey_cntr = 0;
    a.qkey_viol_cntr = 0;
    a.pkey_tbl_len = p.pkey_tbl_len;
    a.lid = 0;
    a.sm_lid = 0;
    a.lmc = 0;
    a.max_vl_num = 1;
    a.sm_sl = 0;
    a.subnet_timeout = 0;
    a.init_type_reply = 0;
    a.active_width = 1; // 1X
    a.active_speed = 32; // EDR (25 Gb/s per lane): a figure, not a limit
    a.phys_state = 5; // LinkUp
    a.link_layer = IBV_LINK_LAYER_ETHERNET;
    a.flags = 0;
    a.port_cap_flags2 = 0;
    a
}

/// `ibv_query_port` as exported: the caller's structure is the
/// pre-`port_cap_flags2` layout, so only that prefix is written.
pub unsafe extern "C" fn query_port(ctx: *mut ibv_context, port: u8, attr: *mut c_void) -> c_int {
    guard_errno(|| {
        let Some(c) = context(ctx) else {
            return libc::EINVAL;
        };
        if port != 1 || attr.is_null() {
            return libc::EINVAL;
        }
        let a = port_attr(c);
        // SAFETY: the compat structure is `ibv_port_attr` up to `flags`.
        unsafe {
            util::write_prefix(
                attr.cast::<ibv_port_attr>(),
                &a,
                std::mem::offset_of!(ibv_port_attr, port_cap_flags2),
            )
        };
        0
    })
}

fn ifindex_of(ip: IpAddr) -> u32 {
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we free below.
    if unsafe { libc::getifaddrs(&mut ifa) } != 0 {
        return 0;
    }
    let mut found = 0;
    let mut p = ifa;
    while !p.is_null() {
        // SAFETY: a node of the list returned by getifaddrs.
        let i = unsafe { &*p };
        if !i.ifa_addr.is_null() {
            // SAFETY: ifa_addr points to a sockaddr of the family it names.
            let a = unsafe {
                match (*i.ifa_addr).sa_family as i32 {
                    libc::AF_INET => {
                        let s = &*(i.ifa_addr as *const libc::sockaddr_in);
                        Some(IpAddr::from(u32::from_be(s.sin_addr.s_addr).to_be_bytes()))
                    }
                    libc::AF_INET6 => {
                        let s = &*(i.ifa_addr as *const libc::sockaddr_in6);
                        Some(IpAddr::from(s.sin6_addr.s6_addr))
                    }
                    _ => None,
                }
            };
            let hit = match (a, ip) {
                (Some(a), ip) if a == ip => true,
                // Every 127/8 address is on the loopback interface.
                (Some(IpAddr::V4(a)), IpAddr::V4(b)) => a.is_loopback() && b.is_loopback(),
                _ => false,
            };
            if hit {
                // SAFETY: ifa_name is a NUL-terminated interface name.
                found = unsafe { libc::if_nametoindex(i.ifa_name) };
                break;
            }
        }
        p = i.ifa_next;
    }
    // SAFETY: the list from getifaddrs, freed once.
    unsafe { libc::freeifaddrs(ifa) };
    found
}

fn gid_entry(c: &Context) -> ibv_gid_entry {
    ibv_gid_entry {
        gid: ibv_gid { raw: c.dev.gid() },
        gid_index: 0,
        port_num: 1,
        gid_type: IBV_GID_TYPE_ROCE_V2,
        ndev_ifindex: ifindex_of(c.dev.local_addr().ip()),
    }
}

pub unsafe extern "C" fn query_gid(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    guard_neg(|| {
        let c = context(ctx).ok_or(libc::EINVAL)?;
        if port != 1 || index != 0 || gid.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller passes a valid gid.
        unsafe { gid.write(ibv_gid { raw: c.dev.gid() }) };
        Ok(())
    })
}

pub unsafe extern "C" fn query_gid_ex(
    ctx: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    guard_errno(|| {
        let Some(c) = context(ctx) else {
            return libc::EINVAL;
        };
        if flags != 0 || entry.is_null() || entry_size < std::mem::size_of::<ibv_gid_entry>() {
            return libc::EINVAL;
        }
        if port != 1 || index != 0 {
            return libc::EINVAL;
        }
        // SAFETY: the caller passes a valid entry of at least our size.
        unsafe { entry.write(gid_entry(c)) };
        0
    })
}

pub unsafe extern "C" fn query_gid_table(
    ctx: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    util::guard(-(libc::EIO as isize), || {
        let Some(c) = context(ctx) else {
            return -(libc::EINVAL as isize);
        };
        if flags != 0 || entry_size < std::mem::size_of::<ibv_gid_entry>() {
            return -(libc::EINVAL as isize);
        }
        if max < 1 || entries.is_null() {
            return -(libc::EINVAL as isize);
        }
        // SAFETY: the caller passes at least one entry of `entry_size`.
        unsafe { entries.write(gid_entry(c)) };
        1
    })
}

/// `ibv_query_gid_type` (IBVERBS_PRIVATE_34): rdma-core's sysfs numbering,
/// where RoCE v2 is 1 (`IBV_GID_TYPE_SYSFS_ROCE_V2`).
pub unsafe extern "C" fn query_gid_type(
    ctx: *mut ibv_context,
    port: u8,
    index: u32,
    ty: *mut c_int,
) -> c_int {
    guard_neg(|| {
        context(ctx).ok_or(libc::EINVAL)?;
        if port != 1 || index != 0 || ty.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: valid output pointer.
        unsafe { *ty = 1 };
        Ok(())
    })
}

pub unsafe extern "C" fn query_pkey(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    guard_neg(|| {
        context(ctx).ok_or(libc::EINVAL)?;
        if port != 1 || index != 0 || pkey.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: valid output pointer; __be16 0xffff.
        unsafe { *pkey = 0xffff_u16.to_be() };
        Ok(())
    })
}

pub unsafe extern "C" fn get_pkey_index(ctx: *mut ibv_context, port: u8, pkey: u16) -> c_int {
    util::guard(-1, || {
        if context(ctx).is_none() || port != 1 {
            return -1;
        }
        if u16::from_be(pkey) & 0x7fff == 0x7fff {
            0
        } else {
            -1
        }
    })
}

// -------------------------------------------------------- async events ----

pub unsafe extern "C" fn get_async_event(ctx: *mut ibv_context, ev: *mut ibv_async_event) -> c_int {
    guard_neg(|| {
        let c = context(ctx).ok_or(libc::EINVAL)?;
        if ev.is_null() {
            return Err(libc::EINVAL);
        }
        let nonblock = is_nonblocking(c.async_ep.as_raw_fd());
        loop {
            let e = if nonblock {
                c.dev.poll_async_event().ok_or(libc::EAGAIN)?
            } else {
                match c.dev.get_async_event(None) {
                    Ok(Some(e)) => e,
                    Ok(None) => continue,
                    Err(e) => return Err(e.errno()),
                }
            };
            if let Some(out) = crate::verbs::translate_async_event(c, e) {
                // SAFETY: valid output structure.
                unsafe { ev.write(out) };
                return Ok(());
            }
            // An event for an object already destroyed: skip it.
        }
    })
}

pub unsafe extern "C" fn ack_async_event(ev: *mut ibv_async_event) {
    util::guard((), || {
        if ev.is_null() {
            return;
        }
        // SAFETY: the caller passes the event it got.
        let ev = unsafe { &*ev };
        crate::verbs::ack_async_event(ev);
    })
}

// ------------------------------------------------------------- strings ----

const EVENT_STR: [&std::ffi::CStr; 20] = [
    c"CQ error",
    c"local work queue catastrophic error",
    c"invalid request local work queue error",
    c"local access violation work queue error",
    c"communication established",
    c"send queue drained",
    c"path migrated",
    c"path migration request error",
    c"local catastrophic error",
    c"port active",
    c"port error",
    c"LID change",
    c"P_Key change",
    c"SM change",
    c"SRQ catastrophic error",
    c"SRQ limit reached",
    c"last WQE reached",
    c"client reregistration",
    c"GID table change",
    c"WQ fatal",
];

pub unsafe extern "C" fn event_type_str(e: c_int) -> *const c_char {
    usize::try_from(e)
        .ok()
        .and_then(|i| EVENT_STR.get(i))
        .map_or(c"unknown".as_ptr(), |s| s.as_ptr())
}

const NODE_STR: [&std::ffi::CStr; 8] = [
    c"unknown",
    c"InfiniBand channel adapter",
    c"InfiniBand switch",
    c"InfiniBand router",
    c"iWARP NIC",
    c"usNIC",
    c"usNIC UDP",
    c"unspecified",
];

pub unsafe extern "C" fn node_type_str(t: c_int) -> *const c_char {
    usize::try_from(t)
        .ok()
        .and_then(|i| NODE_STR.get(i))
        .map_or(c"unknown".as_ptr(), |s| s.as_ptr())
}

const PORT_STR: [&std::ffi::CStr; 6] = [
    c"PORT_NOP",
    c"PORT_DOWN",
    c"PORT_INIT",
    c"PORT_ARMED",
    c"PORT_ACTIVE",
    c"PORT_ACTIVE_DEFER",
];

pub unsafe extern "C" fn port_state_str(s: c_int) -> *const c_char {
    usize::try_from(s)
        .ok()
        .and_then(|i| PORT_STR.get(i))
        .map_or(c"unknown".as_ptr(), |s| s.as_ptr())
}

const WC_STATUS_STR: [&std::ffi::CStr; 24] = [
    c"success",
    c"local length error",
    c"local QP operation error",
    c"local EE context operation error",
    c"local protection error",
    c"Work Request Flushed Error",
    c"memory management operation error",
    c"bad response error",
    c"local access error",
    c"remote invalid request error",
    c"remote access error",
    c"remote operation error",
    c"transport retry counter exceeded",
    c"RNR retry counter exceeded",
    c"local RDD violation error",
    c"remote invalid RD request",
    c"aborted error",
    c"invalid EE context number",
    c"invalid EE context state",
    c"fatal error",
    c"response timeout error",
    c"general error",
    c"TM error",
    c"TM software rendezvous",
];

pub unsafe extern "C" fn wc_status_str(s: c_int) -> *const c_char {
    usize::try_from(s)
        .ok()
        .and_then(|i| WC_STATUS_STR.get(i))
        .map_or(c"unknown".as_ptr(), |s| s.as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_file() {
        let t = "# devices\nsoftrdma0 127.0.0.9 mtu=1024\n\nroce1 auto # comment\n";
        let l = parse_config(t, 4096).unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].addr, Some("127.0.0.9".parse().unwrap()));
        assert_eq!(l[0].mtu, 1024);
        assert_eq!(l[1].name, "roce1");
        assert_eq!(l[1].addr, None);
        assert_eq!(l[1].mtu, 4096);
        assert!(parse_config("x 1.2.3", 4096).is_err());
        assert!(parse_config("x auto mtu=99", 4096).is_err());
        assert!(parse_config("x auto\nx auto", 4096).is_err());
        assert!(parse_config("x", 4096).is_err());
    }
}
