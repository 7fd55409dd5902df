//! The rest of libibverbs' exports: rate conversions, fork support, sysfs
//! helpers, and the functions softrdma does not support (they fail the
//! way libibverbs fails: NULL or -1 with errno, or an errno value).

use crate::ffi::*;
use crate::util::{guard, set_errno};
use std::ffi::{c_char, c_int, c_void, CStr};

/// `enum ibv_rate` → multiple of 2.5 Gb/s, as verbs.h documents the values.
const RATES: [(c_int, c_int, c_int); 24] = [
    // (enum value, multiple of 2.5 Gb/s, Mb/s)
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (4, 12, 30000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, 0, 14062),
    (12, 0, 56250),
    (13, 0, 112500),
    (14, 0, 168750),
    (15, 10, 25781),
    (16, 40, 103125),
    (17, 80, 206250),
    (18, 120, 309375),
    (19, 0, 28125),
    (20, 20, 53125),
    (21, 160, 425000),
    (22, 240, 637500),
    (23, 320, 850000),
    (24, 480, 1275000),
    (0, 0, 0),
];

pub extern "C" fn rate_to_mult(rate: ibv_rate) -> c_int {
    RATES
        .iter()
        .find(|r| r.0 == rate && r.1 != 0)
        .map_or(-1, |r| r.1)
}

pub extern "C" fn mult_to_rate(mult: c_int) -> ibv_rate {
    RATES
        .iter()
        .find(|r| r.1 == mult && r.1 != 0)
        .map_or(0, |r| r.0)
}

pub extern "C" fn rate_to_mbps(rate: ibv_rate) -> c_int {
    RATES
        .iter()
        .find(|r| r.0 == rate && r.2 != 0)
        .map_or(-1, |r| r.2)
}

pub extern "C" fn mbps_to_rate(mbps: c_int) -> ibv_rate {
    RATES
        .iter()
        .find(|r| r.2 == mbps && r.2 != 0)
        .map_or(0, |r| r.0)
}

/// `ibv_fork_init`: nothing to do (no pinned pages: the engine reads
/// memory with ordinary loads), so it succeeds.
pub extern "C" fn fork_init() -> c_int {
    0
}

/// `ibv_is_fork_initialized`: IBV_FORK_UNNEEDED.
pub extern "C" fn is_fork_initialized() -> ibv_fork_status {
    crate::ffi::IBV_FORK_UNNEEDED
}

/// `ibv_dontfork_range` / `ibv_dofork_range`: nothing pinned, so success.
pub extern "C" fn fork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

pub extern "C" fn get_sysfs_path() -> *const c_char {
    c"/sys".as_ptr()
}

/// `ibv_read_sysfs_file(dir, file, buf, size)`: reads a real file, strips
/// the trailing newline; -1 if it does not exist (softrdma devices have
/// no sysfs directory).
///
/// # Safety
/// The C contract of `ibv_read_sysfs_file`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    guard(-1, || {
        if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: the caller passes NUL-terminated strings.
        let (d, f) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
        let path = format!("{}/{}", d.to_string_lossy(), f.to_string_lossy());
        let mut data = match std::fs::read(&path) {
            Ok(v) => v,
            Err(e) => {
                set_errno(e.raw_os_error().unwrap_or(libc::ENOENT));
                return -1;
            }
        };
        data.truncate(size - 1);
        if data.last() == Some(&b'\n') {
            data.pop();
        }
        // SAFETY: `buf` holds `size` bytes; we write at most size - 1 + 1.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), buf.cast::<u8>(), data.len());
            *buf.add(data.len()) = 0;
        }
        data.len() as c_int
    })
}

/// Functions that convert kernel ABI structures (no kernel here) and
/// `ibv_register_driver` (no providers): they do nothing.
pub extern "C" fn nothing() {}

/// Unsupported, for functions returning an errno value (errno set too,
/// as `guard_errno` does).
pub extern "C" fn unsupported_errno() -> c_int {
    set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

/// Unsupported, for functions returning -1 with errno.
pub extern "C" fn unsupported_neg() -> c_int {
    set_errno(libc::EOPNOTSUPP);
    -1
}

/// Unsupported, for functions returning a pointer (NULL with errno).
pub extern "C" fn unsupported_null() -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// Unsupported, for functions returning a count or a flag (0).
pub extern "C" fn zero() -> u64 {
    0
}

/// `ibv_query_qp_data_in_order`: 0, "no ordering guarantee stated".
pub extern "C" fn data_in_order(_qp: *mut ibv_qp, _op: ibv_wr_opcode, _flags: u32) -> c_int {
    0
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

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_event_type_str`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn event_type_str(e: ibv_event_type) -> *const c_char {
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

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_node_type_str`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn node_type_str(t: ibv_node_type) -> *const c_char {
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

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_port_state_str`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn port_state_str(s: ibv_port_state) -> *const c_char {
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

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_wc_status_str`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn wc_status_str(s: ibv_wc_status) -> *const c_char {
    usize::try_from(s)
        .ok()
        .and_then(|i| WC_STATUS_STR.get(i))
        .map_or(c"unknown".as_ptr(), |s| s.as_ptr())
}

/// `ibv_wr_opcode_str`: the name of an `enum ibv_wr_opcode` value, by
/// value (verbs.h), as rdma-core 49+ names them. 12 and 13 name no opcode:
/// "unknown" (rdma-core returns NULL there), as for any value out of range.
const WR_OPCODE_STR: [&CStr; 16] = [
    c"rdma-write",
    c"rdma-write-with-imm",
    c"send",
    c"send-with-imm",
    c"rdma-read",
    c"atomic-cmp-and-swp",
    c"atomic-fetch-and-add",
    c"local-inv",
    c"bind-mw",
    c"send-with-inv",
    c"tso",
    c"driver1",
    c"unknown",
    c"unknown",
    c"flush",
    c"atomic-write",
];

/// `ibv_wr_opcode_str` (IBVERBS_PRIVATE_34 since rdma-core 50): a static
/// string, never NULL.
///
/// # Safety
/// The C contract of `ibv_wr_opcode_str`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn wr_opcode_str(op: ibv_wr_opcode) -> *const c_char {
    usize::try_from(op)
        .ok()
        .and_then(|i| WR_OPCODE_STR.get(i))
        .map_or(c"unknown".as_ptr(), |s| s.as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wr_opcode_names() {
        // SAFETY: the function returns static strings.
        let name = |op| {
            unsafe { CStr::from_ptr(wr_opcode_str(op)) }
                .to_str()
                .unwrap()
        };
        assert_eq!(name(0), "rdma-write");
        assert_eq!(name(4), "rdma-read");
        assert_eq!(name(6), "atomic-fetch-and-add");
        assert_eq!(name(11), "driver1");
        assert_eq!(name(12), "unknown");
        assert_eq!(name(13), "unknown");
        assert_eq!(name(14), "flush");
        assert_eq!(name(15), "atomic-write");
        assert_eq!(name(16), "unknown");
        assert_eq!(name(-1), "unknown");
    }

    #[test]
    fn rates_round_trip() {
        assert_eq!(rate_to_mult(3), 4); // IBV_RATE_10_GBPS
        assert_eq!(mult_to_rate(4), 3);
        assert_eq!(rate_to_mbps(16), 103125); // IBV_RATE_100_GBPS
        assert_eq!(mbps_to_rate(103125), 16);
        assert_eq!(rate_to_mult(99), -1);
        assert_eq!(mult_to_rate(7), 0);
    }
}
