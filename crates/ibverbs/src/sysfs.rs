//! The sysfs view of this process's devices, as the verbs report them
//! (crate softrdma-sysfs), for the preload library: `softrdma_sysfs_root`
//! (exported under `SOFTRDMA_PRIVATE_1`) materializes the view of the
//! devices as they are now — an open device with the address it got (the
//! loopback default picks one when it opens), its GID, node GUID and port
//! attributes; a device not open with what the configuration says — and
//! returns its directory. The preload library finds the function in the
//! libibverbs loaded in the process; its presence is also how it knows
//! the libibverbs is softrdma's (a program running another libibverbs is
//! shown no softrdma device).
//!
//! The view only changes when a device opens or closes: the call costs a
//! lock and a comparison otherwise.

use crate::device::devices;
use crate::util::guard;
use softrdma::config::{interfaces, AddrSpec};
use softrdma::Device;
use softrdma_sysfs::{DeviceView, PortView};
use std::ffi::c_char;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Mutex;

/// A view made: the addresses of the open devices it was made for, and
/// its directory (NUL-terminated).
type Made = (Vec<Option<IpAddr>>, Vec<u8>);

/// The last view made.
static LAST: Mutex<Option<Made>> = Mutex::new(None);

/// The views of the devices of this process, `open` their open devices.
fn views(open: &[Option<Device>]) -> Vec<DeviceView> {
    let ifs = interfaces();
    let sys = Path::new("/sys");
    devices()
        .iter()
        .zip(open)
        .enumerate()
        .map(|(i, (e, d))| {
            let i = i as u32;
            match d.clone() {
                Some(dev) => {
                    let ip = dev.local_addr().ip();
                    let a = crate::query::port_attr_of(&dev);
                    let port = PortView {
                        state: a.state as u32,
                        phys_state: u32::from(a.phys_state),
                        width: a.active_width,
                        speed: a.active_speed,
                        cap_mask: a.port_cap_flags,
                        gid_tbl_len: a.gid_tbl_len as u32,
                        pkey_tbl_len: a.pkey_tbl_len,
                        active_mtu: dev.query_port().active_mtu,
                    };
                    let netdev = AddrSpec::Ip(ip).netdev(&ifs);
                    let mut v = DeviceView::new(&e.cfg.name, i, Some(ip), netdev, port, sys);
                    v.node_guid = dev.query_device().node_guid;
                    v.fw_ver = crate::query::FW_VER.to_string();
                    v
                }
                None => {
                    let spec = e.cfg.addr.map_or(AddrSpec::Auto, AddrSpec::Ip);
                    let mut v = DeviceView::configured(&e.cfg.name, i, &spec, e.cfg.mtu, &ifs, sys);
                    v.fw_ver = crate::query::FW_VER.to_string();
                    v
                }
            }
        })
        .collect()
}

/// The directory of the current view, NUL-terminated.
fn root() -> Result<Vec<u8>, i32> {
    if crate::device::building_list() {
        // Asked while this thread reads the configuration (its file's
        // path is one a preload library looks at): not now.
        return Err(libc::EBUSY);
    }
    let mut g = LAST.lock().unwrap_or_else(|e| e.into_inner());
    let mut open = Vec::new();
    for e in devices() {
        match e.try_open_device() {
            Ok(d) => open.push(d),
            // A device opening or closing (maybe on this thread, which
            // looks a path up meanwhile): the view as it was.
            Err(()) => match g.as_ref() {
                Some((_, r)) => return Ok(r.clone()),
                None => open.push(None),
            },
        }
    }
    let key: Vec<Option<IpAddr>> = open
        .iter()
        .map(|d| d.as_ref().map(|d| d.local_addr().ip()))
        .collect();
    if let Some((k, r)) = g.as_ref() {
        if *k == key {
            return Ok(r.clone());
        }
    }
    let dir = softrdma_sysfs::materialize(&views(&open)).map_err(|e| {
        static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
            eprintln!("softrdma: {e}; programs see no softrdma device in sysfs");
        }
        e.raw_os_error().unwrap_or(libc::EIO)
    })?;
    let mut r = dir.into_os_string().into_encoded_bytes();
    r.push(0);
    *g = Some((key, r.clone()));
    Ok(r)
}

/// `softrdma_sysfs_root(buf, len)`: writes the directory of the current
/// view (NUL-terminated) into `buf`; returns its length without the NUL,
/// `-ERANGE` when `len` is too small, or `-errno`.
///
/// # Safety
/// The C contract of `softrdma_sysfs_root`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn sysfs_root(buf: *mut c_char, len: usize) -> isize {
    guard(-(libc::EIO as isize), || match root() {
        Ok(r) if r.len() <= len && !buf.is_null() => {
            // SAFETY: the caller passes `len` writable bytes.
            unsafe { std::ptr::copy_nonoverlapping(r.as_ptr(), buf.cast::<u8>(), r.len()) };
            (r.len() - 1) as isize
        }
        Ok(_) => -(libc::ERANGE as isize),
        Err(e) => -(e as isize),
    })
}
