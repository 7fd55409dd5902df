//! rdma_cm's devices are libibverbs' (one state): the device provider of
//! softrdma's rdma_cm opens them through the device list of `device.rs`,
//! and, as librdmacm does (`ucma_get_device`), this module keeps one open
//! context and one PD per device for the process (`id->verbs`, `id->pd`).
//! `rdma_get_devices` lists those contexts.

use crate::context::Context;
use crate::device::{devices, DevEntry};
use crate::ffi::*;
use crate::handle::Obj;
use crate::util::{guard, guard_ptr};
use softrdma::rdma_cm::{is_local, route_source, DeviceProvider};
use softrdma::Device;
use std::ffi::c_int;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, Once};

/// A device opened for rdma_cm: its context and PD (pointers we
/// published; they live as long as the process).
pub struct CmDev {
    pub entry: &'static DevEntry,
    pub dev: Device,
    pub ctx: usize,
    pub pd: usize,
}

static CMDEVS: Mutex<Vec<CmDev>> = Mutex::new(Vec::new());

/// The context and PD of an open device.
pub fn verbs_of(dev: &Device) -> Option<(*mut ibv_context, *mut ibv_pd)> {
    let l = CMDEVS.lock().unwrap_or_else(|e| e.into_inner());
    l.iter()
        .find(|c| c.dev.same_device(dev))
        .map(|c| (c.ctx as *mut ibv_context, c.pd as *mut ibv_pd))
}

/// Opens `entry` for rdma_cm (once per process): a context and a PD.
fn open_entry(
    entry: &'static DevEntry,
    at: Option<IpAddr>,
    avoid: Option<IpAddr>,
) -> softrdma::Result<Device> {
    let mut l = CMDEVS.lock().unwrap_or_else(|e| e.into_inner());
    // In a forked child, the parent's are the parent's: forgotten (their
    // context and PD stay as they are), the child opens its own.
    l.retain(|c| !c.dev.forked_away());
    if let Some(c) = l.iter().find(|c| std::ptr::eq(c.entry, entry)) {
        return Ok(c.dev.clone());
    }
    let ctx = crate::context::open_at(entry, at, avoid).map_err(|e| softrdma::Error::Cm {
        errno: e,
        context: format!("opening {}", entry.cfg.name),
    })?;
    let c = Obj::<Context>::get(ctx).expect("just published");
    let dev = c.dev.clone();
    // SAFETY: `ctx` is the context we just opened.
    let pd = unsafe { crate::pd::alloc_pd(ctx) };
    if pd.is_null() {
        return Err(softrdma::Error::Cm {
            errno: libc::ENOMEM,
            context: "allocating rdma_cm's PD".into(),
        });
    }
    l.push(CmDev {
        entry,
        dev: dev.clone(),
        ctx: ctx as usize,
        pd: pd as usize,
    });
    Ok(dev)
}

/// The provider over libibverbs' device list: configured devices by their
/// address; the loopback default (no `SOFTRDMA_ADDR`, no config file)
/// opens at the address rdma_cm binds, or, to reach a loopback peer, on
/// the first free loopback address (each process its own).
pub struct IbvProvider;

impl DeviceProvider for IbvProvider {
    fn device_at(&self, ip: IpAddr) -> softrdma::Result<Option<Device>> {
        for e in devices() {
            match e.cfg.addr {
                Some(a) if a == ip => return open_entry(e, None, None).map(Some),
                Some(_) => {}
                None => match e.open_addr() {
                    Some(a) if a == ip => return open_entry(e, None, None).map(Some),
                    // The parent's device, in a forked child: the child
                    // opens its own, as when the parent's is at `ip`. Where
                    // the parent's landed (127.0.0.2 when another device
                    // held 127.0.0.1 then) must not decide: rdma-core's
                    // multicast tests fork with a context open and bind
                    // 127.0.0.1 in the children (ENODEV).
                    Some(_) if ip.is_loopback() && e.open_by_parent() => {
                        return open_entry(e, None, None).map(Some)
                    }
                    Some(_) => {}
                    None if is_local(ip) => return open_entry(e, Some(ip), None).map(Some),
                    None => {}
                },
            }
        }
        Ok(None)
    }

    fn source_for(&self, dst: IpAddr) -> softrdma::Result<Option<Device>> {
        let src = route_source(dst);
        let fam = |a: IpAddr| a.is_ipv4() == dst.is_ipv4();
        // A configured device at the route's source address.
        if let Some(s) = src {
            if let Some(e) = devices().iter().find(|e| e.cfg.addr == Some(s) && s != dst) {
                return open_entry(e, None, None).map(Some);
            }
        }
        // The loopback default: this process's own device.
        if let Some(e) = devices().iter().find(|e| e.cfg.addr.is_none()) {
            match e.open_addr() {
                Some(a) if fam(a) => return open_entry(e, None, None).map(Some),
                Some(_) => {}
                None if dst.is_loopback() => return open_entry(e, None, Some(dst)).map(Some),
                None => {
                    if let Some(s) = src.filter(|s| is_local(*s) && fam(*s)) {
                        return open_entry(e, Some(s), None).map(Some);
                    }
                }
            }
        }
        // Else the only device of the family.
        let mut it = devices().iter().filter(|e| e.cfg.addr.is_some_and(fam));
        if let (Some(e), None) = (it.next(), it.next()) {
            return open_entry(e, None, None).map(Some);
        }
        Ok(None)
    }

    fn all_devices(&self) -> softrdma::Result<Vec<Device>> {
        devices()
            .iter()
            .map(|e| open_entry(e, None, None))
            .collect()
    }
}

/// Installs the provider (once).
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        softrdma::rdma_cm::set_device_provider(Arc::new(IbvProvider));
        softrdma::rdma_cm::set_read_back(super::id::read_back_num);
    });
}

/// Device lists handed out by `rdma_get_devices`.
static LISTS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// The lists, locked (for `crate::fork`'s handlers).
pub(crate) fn lists_for_fork() -> std::sync::MutexGuard<'static, Vec<usize>> {
    LISTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// `rdma_get_devices`: every device, opened; a NULL-terminated array of
/// contexts.
///
/// # Safety
/// The C contract of `rdma_get_devices`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn get_devices(num: *mut c_int) -> *mut *mut ibv_context {
    guard_ptr(|| {
        init();
        let devs = IbvProvider.all_devices().map_err(|e| e.errno())?;
        let ctxs: Vec<*mut ibv_context> = devs
            .iter()
            .filter_map(|d| verbs_of(d).map(|v| v.0))
            .collect();
        // SAFETY: calloc with a non-zero count; checked.
        let arr = unsafe { libc::calloc(ctxs.len() + 1, std::mem::size_of::<usize>()) }
            as *mut *mut ibv_context;
        if arr.is_null() {
            return Err(libc::ENOMEM);
        }
        for (i, c) in ctxs.iter().enumerate() {
            // SAFETY: `arr` has ctxs.len() + 1 slots.
            unsafe { *arr.add(i) = *c };
        }
        if !num.is_null() {
            // SAFETY: the caller's int.
            unsafe { *num = ctxs.len() as c_int };
        }
        LISTS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(arr as usize);
        Ok(arr)
    })
}

/// `rdma_free_devices`.
///
/// # Safety
/// The C contract of `rdma_free_devices`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn free_devices(list: *mut *mut ibv_context) {
    guard((), || {
        let mut l = LISTS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = l.iter().position(|&p| p == list as usize) {
            l.swap_remove(i);
            // SAFETY: allocated by calloc in get_devices, freed once.
            unsafe { libc::free(list.cast()) };
        }
    })
}
