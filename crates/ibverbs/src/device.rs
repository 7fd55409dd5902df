//! The device list: `ibv_get_device_list` and friends, `ibv_open_device`.
//!
//! Devices come from the configuration (see [`crate::config`]); each is a
//! leaked [`DevEntry`] whose first field is the `ibv_device` the program
//! sees. All contexts of a process share one softrdma [`Device`] per entry
//! (one address, one GID, one progress thread).

use crate::config::{configured_devices, DevConfig};
use crate::ffi::*;
use crate::util::{copy_cstr, guard, guard_ptr, set_errno};
use softrdma::{Device, DeviceOptions};
use std::collections::HashSet;
use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// A device of the list: the C structure first, then ours.
#[repr(C)]
pub struct DevEntry {
    pub c: ibv_device,
    pub cfg: DevConfig,
    /// The open softrdma device and the number of contexts using it.
    open: Mutex<Option<(Device, usize)>>,
    /// Node GUID once known (big-endian in memory, like `__be64`).
    guid_be: AtomicU64,
}

// SAFETY: the C part holds only NULL pointers and data, written once before
// the entry is shared and never changed; the rest is Mutex/atomics.
unsafe impl Sync for DevEntry {}
// SAFETY: as above.
unsafe impl Send for DevEntry {}

static DEVICES: OnceLock<Result<Vec<&'static DevEntry>, i32>> = OnceLock::new();

/// The device list, built once per process; a configuration that is not
/// usable is printed once to stderr and fails the list with `EINVAL`.
pub fn device_list() -> Result<&'static [&'static DevEntry], i32> {
    crate::fork::watch();
    DEVICES
        .get_or_init(|| {
            BUILDING.with(|b| b.set(true));
            let r = match configured_devices() {
                Ok(list) => Ok(list
                    .into_iter()
                    .enumerate()
                    .map(|(i, c)| leak_entry(i, c))
                    .collect()),
                Err(e) => {
                    eprintln!("softrdma: {e}");
                    Err(libc::EINVAL)
                }
            };
            BUILDING.with(|b| b.set(false));
            r
        })
        .as_deref()
        .map_err(|e| *e)
}

thread_local! {
    /// Set while this thread builds the device list (reading the
    /// configuration, whose file a preload library may see opened).
    static BUILDING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread is building the device list: a call that needs
/// the list must not wait for it then (it would wait for itself).
pub fn building_list() -> bool {
    BUILDING.with(|b| b.get())
}

/// The device list (empty when the configuration is not usable).
pub fn devices() -> &'static [&'static DevEntry] {
    device_list().unwrap_or_default()
}

/// The entry of the `index`th device: `dev_name` `uverbsN` and its sysfs
/// paths, as a kernel device's (the preload library's sysfs view has them).
fn leak_entry(index: usize, cfg: DevConfig) -> &'static DevEntry {
    let mut c: ibv_device = crate::util::zeroed();
    c.node_type = IBV_NODE_CA;
    c.transport_type = IBV_TRANSPORT_IB;
    copy_cstr(&mut c.name, &cfg.name);
    copy_cstr(&mut c.dev_name, &format!("uverbs{index}"));
    copy_cstr(
        &mut c.dev_path,
        &format!("/sys/class/infiniband_verbs/uverbs{index}"),
    );
    copy_cstr(
        &mut c.ibdev_path,
        &format!("/sys/class/infiniband/{}", cfg.name),
    );
    let guid = cfg.addr.map_or(0, |a| softrdma::node_guid_of(a).to_be());
    Box::leak(Box::new(DevEntry {
        c,
        cfg,
        open: Mutex::new(None),
        guid_be: AtomicU64::new(guid),
    }))
}

/// The entry behind a program's `ibv_device` pointer, if it is one of ours.
pub fn entry(p: *mut ibv_device) -> Option<&'static DevEntry> {
    devices().iter().copied().find(|d| std::ptr::eq(&d.c, p))
}

impl DevEntry {
    /// The shared device, opened by the first context. The first open of
    /// the loopback-default entry binds `at` when given (rdma_cm binding a
    /// local address no device has) instead of the first free loopback
    /// address.
    /// Automatic selection skips `avoid` (a loopback peer's address).
    pub fn acquire_at(
        &self,
        at: Option<std::net::IpAddr>,
        avoid: Option<std::net::IpAddr>,
    ) -> Result<Device, i32> {
        let mut g = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((d, n)) = g.as_mut() {
            if !d.forked_away() {
                *n += 1;
                return Ok(d.clone());
            }
            // A forked child: that device is the parent's (its contexts
            // here no longer count: see `Context`'s drop). The child opens
            // one of its own — on another address, unless the entry's is
            // the loopback default.
            *g = None;
        }
        // The configured device supplies its address and MTU (and where
        // they came from); `at` only places the loopback default.
        let o = DeviceOptions {
            device: Some(self.cfg.name.clone()),
            addr: if self.cfg.addr.is_none() { at } else { None },
            avoid: avoid.into_iter().collect(),
            ..Default::default()
        };
        let d = Device::open(o).map_err(|e| {
            eprintln!("softrdma: opening {}: {e}", self.cfg.name);
            e.errno()
        })?;
        self.guid_be
            .store(d.query_device().node_guid.to_be(), Ordering::Relaxed);
        *g = Some((d.clone(), 1));
        Ok(d)
    }

    /// The open device, if it is open; `Err(())` while another call holds
    /// the entry (opening or closing it): the caller must not wait, it may
    /// be that call's own thread (sysfs lookups made while a device opens).
    pub fn try_open_device(&self) -> Result<Option<Device>, ()> {
        match self.open.try_lock() {
            Ok(g) => Ok(g.as_ref().map(|(d, _)| d.clone())),
            Err(std::sync::TryLockError::Poisoned(e)) => {
                Ok(e.into_inner().as_ref().map(|(d, _)| d.clone()))
            }
            Err(std::sync::TryLockError::WouldBlock) => Err(()),
        }
    }

    /// The address of the open device, if it is open.
    pub fn open_addr(&self) -> Option<std::net::IpAddr> {
        let g = self.open.lock().unwrap_or_else(|e| e.into_inner());
        g.as_ref().map(|(d, _)| d.local_addr().ip())
    }

    /// Whether the open device is the parent's (this process a forked
    /// child of the one that opened it).
    pub fn open_by_parent(&self) -> bool {
        let g = self.open.lock().unwrap_or_else(|e| e.into_inner());
        g.as_ref().is_some_and(|(d, _)| d.forked_away())
    }

    /// One context fewer; the last one closes the device.
    pub fn release(&self) {
        let mut g = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, n)) = g.as_mut() {
            *n -= 1;
            if *n == 0 {
                *g = None;
            }
        }
    }
}

/// Device lists handed out and not yet freed.
static LISTS: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

/// The lists, locked (for `crate::fork`'s handlers).
pub(crate) fn lists_for_fork() -> std::sync::MutexGuard<'static, Option<HashSet<usize>>> {
    LISTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_get_device_list`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    guard_ptr(|| {
        let devs = device_list()?;
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
        LISTS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(HashSet::new)
            .insert(arr as usize);
        if !num.is_null() {
            // SAFETY: the caller passes a valid int pointer or NULL.
            unsafe { *num = devs.len() as c_int };
        }
        Ok(arr)
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_free_device_list`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn free_device_list(list: *mut *mut ibv_device) {
    guard((), || {
        let ours = LISTS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
            .is_some_and(|s| s.remove(&(list as usize)));
        if ours {
            // SAFETY: allocated by calloc in get_device_list, freed once.
            unsafe { libc::free(list.cast()) };
        }
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_get_device_name`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn get_device_name(dev: *mut ibv_device) -> *const c_char {
    guard(std::ptr::null(), || match entry(dev) {
        Some(e) => e.c.name.as_ptr(),
        None => {
            set_errno(libc::EINVAL);
            std::ptr::null()
        }
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_get_device_index`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn get_device_index(dev: *mut ibv_device) -> c_int {
    guard(-1, || {
        devices()
            .iter()
            .position(|d| std::ptr::eq(&d.c, dev))
            .map_or(-1, |i| i as c_int)
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_get_device_guid`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn get_device_guid(dev: *mut ibv_device) -> __be64 {
    guard(0, || {
        entry(dev).map_or(0, |e| e.guid_be.load(Ordering::Relaxed))
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_open_device`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn open_device(dev: *mut ibv_device) -> *mut ibv_context {
    guard_ptr(|| crate::context::open(entry(dev).ok_or(libc::EINVAL)?))
}
