//! Small facts of this process and host that the C library needs: the
//! wall clock, the identity of an open file, a memory file. Here so that
//! their `unsafe` lives in the one crate for OS code.

use std::ffi::CStr;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// The wall clock (`CLOCK_REALTIME`) in nanoseconds since the epoch.
pub fn realtime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// The (device, inode) of an open descriptor (`fstat`); a bad descriptor
/// is `EBADF`.
pub fn file_id(fd: RawFd) -> io::Result<(u64, u64)> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a buffer of the size fstat writes; checked before reading.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat succeeded, so it filled the structure.
    let st = unsafe { st.assume_init() };
    Ok((st.st_dev, st.st_ino))
}

/// A new memory file (`memfd_create`, close-on-exec) named `name`.
pub fn memfd(name: &CStr) -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated name; the result is checked.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn memfd_identity_and_clock() {
        let a = memfd(c"softrdma-host-test").unwrap();
        let b = memfd(c"softrdma-host-test").unwrap();
        let (ia, ib) = (
            file_id(a.as_raw_fd()).unwrap(),
            file_id(b.as_raw_fd()).unwrap(),
        );
        assert_ne!(ia, ib, "two memory files, two inodes");
        assert_eq!(file_id(a.as_raw_fd()).unwrap(), ia);
        assert_eq!(file_id(-1).unwrap_err().raw_os_error(), Some(libc::EBADF));
        // After 2020-01-01 and before 2200.
        let t = realtime_ns();
        assert!(t > 1_577_836_800_000_000_000 && t < 7_258_118_400_000_000_000);
    }
}
