//! Small facts of this process and host that the libraries need: the
//! wall clock, the identity of an open file, a memory file, the host's
//! interface addresses, the effective uid, a symbolic link looked at with
//! raw system calls. Here so that their `unsafe` lives in the one crate
//! for OS code (the configuration, the sysfs view and the C library call
//! them).

use std::ffi::{CStr, OsString};
use std::io;
use std::net::IpAddr;
use std::ops::ControlFlow;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

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

/// `CLOCK_MONOTONIC_COARSE` in milliseconds (a vDSO read, no system
/// call; the same clock in every process of the host).
pub fn coarse_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec; CLOCK_MONOTONIC_COARSE exists since 2.6.32.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1000)
        .saturating_add(ts.tv_nsec as u64 / 1_000_000)
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

/// One address of one of this host's (this network namespace's)
/// interfaces, as `getifaddrs` lists them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostAddr {
    /// The interface's name (`lo`, `eth0`).
    pub name: String,
    /// The address.
    pub ip: IpAddr,
    /// `IFF_LOOPBACK`.
    pub loopback: bool,
    /// `IFF_UP`.
    pub up: bool,
}

/// Calls `f` with each node of this host's `getifaddrs` list that has an
/// address and a name, until `f` breaks; false when `getifaddrs` fails.
pub(crate) fn each_ifaddr(mut f: impl FnMut(&libc::ifaddrs) -> ControlFlow<()>) -> bool {
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list that is freed below.
    if unsafe { libc::getifaddrs(&mut ifa) } != 0 {
        return false;
    }
    let mut p = ifa;
    while !p.is_null() {
        // SAFETY: a node of the list getifaddrs returned.
        let i = unsafe { &*p };
        p = i.ifa_next;
        if i.ifa_addr.is_null() || i.ifa_name.is_null() {
            continue;
        }
        if f(i).is_break() {
            break;
        }
    }
    // SAFETY: the list from getifaddrs, freed once.
    unsafe { libc::freeifaddrs(ifa) };
    true
}

/// The IPv4 or IPv6 address in `sa` (None: another family or null).
///
/// # Safety
/// `sa` is null or points to a live sockaddr of the family it names (as
/// getifaddrs' `ifa_addr` and `ifa_netmask` do).
pub(crate) unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: the caller's promise: a sockaddr of the family it names.
    unsafe {
        match (*sa).sa_family as i32 {
            libc::AF_INET => {
                let s = &*(sa as *const libc::sockaddr_in);
                Some(IpAddr::from(u32::from_be(s.sin_addr.s_addr).to_be_bytes()))
            }
            libc::AF_INET6 => {
                let s = &*(sa as *const libc::sockaddr_in6);
                Some(IpAddr::from(s.sin6_addr.s6_addr))
            }
            _ => None,
        }
    }
}

/// The IPv4 and IPv6 addresses of this host's interfaces (empty when
/// `getifaddrs` fails).
pub fn addresses() -> Vec<HostAddr> {
    let mut out = Vec::new();
    each_ifaddr(|i| {
        // SAFETY: ifa_addr points to a sockaddr of the family it names.
        let Some(ip) = (unsafe { sockaddr_ip(i.ifa_addr) }) else {
            return ControlFlow::Continue(());
        };
        // SAFETY: ifa_name is a NUL-terminated interface name.
        let name = unsafe { CStr::from_ptr(i.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let flags = i.ifa_flags as libc::c_int;
        out.push(HostAddr {
            name,
            ip,
            loopback: flags & libc::IFF_LOOPBACK != 0,
            up: flags & libc::IFF_UP != 0,
        });
        ControlFlow::Continue(())
    });
    out
}

/// The effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// What a path is, looked at without following a last symbolic link and
/// with raw system calls (`newfstatat`, `readlinkat`): no library
/// function a preload library could interpose is called.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RawKind {
    /// Nothing there (or not reachable).
    Missing,
    /// A symbolic link and its target.
    Link(PathBuf),
    /// Anything else.
    Other,
}

/// [`RawKind`] of `path`.
pub fn raw_lstat(path: &CStr) -> RawKind {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a NUL-terminated path and a stat buffer of the size the
    // kernel writes; the raw system call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_newfstatat,
            libc::AT_FDCWD,
            path.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r != 0 {
        return RawKind::Missing;
    }
    // SAFETY: the call succeeded, so the kernel filled the structure.
    let st = unsafe { st.assume_init() };
    if st.st_mode & libc::S_IFMT != libc::S_IFLNK {
        return RawKind::Other;
    }
    let mut buf = vec![0u8; 4096];
    // SAFETY: as above, with a buffer of its length.
    let n = unsafe {
        libc::syscall(
            libc::SYS_readlinkat,
            libc::AT_FDCWD,
            path.as_ptr(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    if n < 0 {
        return RawKind::Missing;
    }
    buf.truncate(n as usize);
    RawKind::Link(PathBuf::from(OsString::from_vec(buf)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;

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

    #[test]
    fn addresses_links_and_uid() {
        let a = addresses();
        assert!(
            a.iter()
                .any(|x| x.loopback && x.ip == IpAddr::from([127, 0, 0, 1])),
            "{a:?}"
        );
        let dir = std::env::temp_dir().join(format!("softrdma-host-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let link = dir.join("l");
        std::os::unix::fs::symlink("target/of/link", &link).unwrap();
        let c =
            |p: &std::path::Path| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(
            raw_lstat(&c(&link)),
            RawKind::Link(PathBuf::from("target/of/link"))
        );
        assert_eq!(raw_lstat(&c(&dir)), RawKind::Other);
        assert_eq!(raw_lstat(&c(&dir.join("none"))), RawKind::Missing);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            euid() == 0,
            std::fs::metadata("/proc/self").unwrap().uid() == 0
        );
    }
}
