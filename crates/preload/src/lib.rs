//! libsoftrdma_preload.so: makes softrdma devices visible to UCX (and so
//! to Open MPI and MPICH) without root and without a kernel module.
//!
//! UCX 1.13 lists an InfiniBand device only if `/dev/infiniband/<dev_name>`
//! is a character device it may read and write (uct/ib/base/ib_md.c,
//! `uct_ib_device_is_accessible`: `stat` + `access`), and reads the RoCE
//! version and network interface of each GID from sysfs
//! (`/sys/class/infiniband/<dev>/ports/<p>/gid_attrs/{types,ndevs}/<i>`,
//! read with `open`); a missing type means RoCE v1. softrdma has neither
//! a device node nor sysfs. `softrdma exec` puts this library in
//! `LD_PRELOAD`, and children inherit it (mpirun's daemons, hydra's
//! proxies, the ranks); it answers exactly those paths ([`paths`]) and
//! hands every other call to libc untouched.
//!
//! Interposed (the glibc 2.36 names a program or library may import):
//! `stat stat64 lstat lstat64 fstatat fstatat64 statx __xstat __xstat64
//! __lxstat __lxstat64 __fxstatat __fxstatat64 access faccessat euidaccess
//! eaccess open open64 __open_2 __open64_2 openat openat64 __openat_2
//! __openat64_2 fopen fopen64`. UCX's `libuct_ib` imports `stat@GLIBC_2.33`
//! and `access`; `libucs` reads files with `open` and `fopen`. Calls that
//! glibc makes inside itself (e.g. `fopen` opening its file) do not go
//! through these symbols, which is why `fopen` is interposed as a whole.
//!
//! The device node is answered with `/dev/null` (what a root-only setup
//! would make: `ln -s /dev/null /dev/infiniband/uverbs-softrdma0`); a sysfs
//! file is a sealed read-only memfd with its contents. The fast path, for
//! every other path, is one prefix comparison; the real functions are
//! found with `dlsym(RTLD_NEXT)` once.

#![allow(clippy::missing_safety_doc)] // the C contracts of the libc functions

pub mod config;
pub mod paths;

use paths::Answer;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The next definition of `name` (libc's), looked up once.
fn resolve(slot: &AtomicUsize, name: &CStr) -> usize {
    let p = slot.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT finds the
    // definition after this library's (glibc's). It allocates nothing on
    // success, so an allocator that opens files while initialising cannot
    // recurse into it through us.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    slot.store(p, Ordering::Relaxed);
    p
}

/// `real!("name", fn type)`: libc's function, or `None` if it has none.
macro_rules! real {
    ($name:literal, $ty:ty) => {{
        static SLOT: AtomicUsize = AtomicUsize::new(0);
        let p = resolve(&SLOT, $name);
        // SAFETY: `p` is libc's definition of this name, whose C type is
        // `$ty` (glibc 2.36 headers).
        (p != 0).then(|| unsafe { std::mem::transmute::<usize, $ty>(p) })
    }};
}

fn set_errno(e: c_int) {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = e };
}

/// -1 with `errno = e`.
fn fail(e: c_int) -> c_int {
    set_errno(e);
    -1
}

/// What a call on `path` does.
enum Route {
    /// Not ours: libc with the program's arguments.
    Libc,
    /// The device node: libc on `/dev/null`.
    Node,
    /// A sysfs file: this descriptor holds its contents.
    Text(OwnedFd),
    /// Ours, but the contents could not be made.
    Err(c_int),
}

const DEV_NULL: &CStr = c"/dev/null";

/// The route of `path`. `cloexec`: whether a text descriptor given to the
/// program closes on exec.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
unsafe fn route(path: *const c_char, cloexec: bool) -> Route {
    if path.is_null() {
        return Route::Libc;
    }
    // SAFETY: the caller's path is NUL-terminated.
    let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
    if !paths::candidate(bytes) {
        return Route::Libc;
    }
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    let r = match paths::answer_here(bytes) {
        None => Route::Libc,
        Some(Answer::DevNull) => Route::Node,
        Some(Answer::Text(t)) => match memfd(t.as_bytes(), cloexec) {
            Ok(fd) => Route::Text(fd),
            Err(e) => Route::Err(e),
        },
    };
    // Looking the answer up (config file, interfaces) must not leave a
    // stray errno behind for the program.
    set_errno(errno);
    r
}

/// A read-only memfd holding `data`, positioned at its start.
fn memfd(data: &[u8], cloexec: bool) -> Result<OwnedFd, c_int> {
    let flags = libc::MFD_ALLOW_SEALING | if cloexec { libc::MFD_CLOEXEC } else { 0 };
    // SAFETY: a NUL-terminated name; the result is checked.
    let fd = unsafe { libc::memfd_create(c"softrdma-sysfs".as_ptr(), flags) };
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut off = 0;
    while off < data.len() {
        // SAFETY: the slice is valid for its length.
        let n = unsafe {
            libc::write(
                fd.as_raw_fd(),
                data[off..].as_ptr().cast(),
                data.len() - off,
            )
        };
        if n <= 0 {
            return Err(last_errno());
        }
        off += n as usize;
    }
    let seals = libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
    // SAFETY: plain descriptor operations on our memfd.
    unsafe {
        libc::fchmod(fd.as_raw_fd(), 0o444);
        libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals);
        libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_SET);
    }
    Ok(fd)
}

fn last_errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

// ------------------------------------------------------------- open ------

/// `open`-like calls: `real(path, flags, mode)`.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
unsafe fn open_with(
    path: *const c_char,
    flags: c_int,
    real: impl FnOnce(*const c_char, c_int) -> c_int,
) -> c_int {
    // SAFETY: forwarded contract.
    match unsafe { route(path, flags & libc::O_CLOEXEC != 0) } {
        Route::Libc => real(path, flags),
        Route::Node => real(DEV_NULL.as_ptr(), flags),
        Route::Err(e) => fail(e),
        Route::Text(fd) => {
            if flags & (libc::O_CREAT | libc::O_EXCL) == libc::O_CREAT | libc::O_EXCL {
                fail(libc::EEXIST)
            } else if flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0 {
                fail(libc::EACCES)
            } else if flags & libc::O_DIRECTORY != 0 {
                fail(libc::ENOTDIR)
            } else {
                fd.into_raw_fd()
            }
        }
    }
}

type OpenFn = unsafe extern "C" fn(*const c_char, c_int, c_uint) -> c_int;
type OpenAtFn = unsafe extern "C" fn(c_int, *const c_char, c_int, c_uint) -> c_int;
type Open2Fn = unsafe extern "C" fn(*const c_char, c_int) -> c_int;
type OpenAt2Fn = unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int;

// `open(path, flags, ...)` is variadic; defining it with a fixed third
// argument is sound on the Linux ABIs (x86-64 System V, AArch64): a
// variadic integer argument travels in the register a fixed one would,
// and when the caller passes none the value read is ignored by libc
// unless O_CREAT or O_TMPFILE asks for it, as in libc itself.

/// Interposed `open`.
#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    let Some(f) = real!(c"open", OpenFn) else {
        return fail(libc::ENOSYS);
    };
    // SAFETY: forwarded contract; `f` is libc's open.
    unsafe { open_with(path, flags, |p, fl| f(p, fl, mode)) }
}

/// Interposed `open64`.
#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    let Some(f) = real!(c"open64", OpenFn) else {
        return fail(libc::ENOSYS);
    };
    // SAFETY: as `open`.
    unsafe { open_with(path, flags, |p, fl| f(p, fl, mode)) }
}

/// Interposed `__open_2` (`open` under `_FORTIFY_SOURCE`).
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    let Some(f) = real!(c"__open_2", Open2Fn) else {
        return fail(libc::ENOSYS);
    };
    // SAFETY: as `open`.
    unsafe { open_with(path, flags, |p, fl| f(p, fl)) }
}

/// Interposed `__open64_2`.
#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    let Some(f) = real!(c"__open64_2", Open2Fn) else {
        return fail(libc::ENOSYS);
    };
    // SAFETY: as `open`.
    unsafe { open_with(path, flags, |p, fl| f(p, fl)) }
}

/// Interposed `openat` (an absolute path ignores `dirfd`).
#[no_mangle]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    let Some(f) = real!(c"openat", OpenAtFn) else {
        return fail(libc::ENOSYS);
    };
    // SAFETY: as `open`.
    unsafe { open_with(path, flags, |p, fl| f(dirfd, p, fl, mode)) }
}

/// Interposed `openat64`.
#[no_mangle]
pub unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    let Some(f) = real!(c"openat64", OpenAtFn) else {
        return fail(libc::ENOSYS);
    };
    // SAFETY: as `open`.
    unsafe { open_with(path, flags, |p, fl| f(dirfd, p, fl, mode)) }
}

/// Interposed `__openat_2`.
#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    let Some(f) = real!(c"__openat_2", OpenAt2Fn) else {
        return fail(libc::ENOSYS);
    };
    // SAFETY: as `open`.
    unsafe { open_with(path, flags, |p, fl| f(dirfd, p, fl)) }
}

/// Interposed `__openat64_2`.
#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    let Some(f) = real!(c"__openat64_2", OpenAt2Fn) else {
        return fail(libc::ENOSYS);
    };
    // SAFETY: as `open`.
    unsafe { open_with(path, flags, |p, fl| f(dirfd, p, fl)) }
}

type FopenFn = unsafe extern "C" fn(*const c_char, *const c_char) -> *mut libc::FILE;

/// `fopen`-like calls.
///
/// # Safety
/// `path` and `mode` are NULL or NUL-terminated strings.
unsafe fn fopen_with(path: *const c_char, mode: *const c_char, f: FopenFn) -> *mut libc::FILE {
    let m: &[u8] = if mode.is_null() {
        b""
    } else {
        // SAFETY: the caller's mode is NUL-terminated.
        unsafe { CStr::from_ptr(mode) }.to_bytes()
    };
    // SAFETY: forwarded contract.
    match unsafe { route(path, m.contains(&b'e')) } {
        // SAFETY: libc's fopen with the caller's arguments.
        Route::Libc => unsafe { f(path, mode) },
        // SAFETY: as above, on /dev/null.
        Route::Node => unsafe { f(DEV_NULL.as_ptr(), mode) },
        Route::Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
        Route::Text(fd) => {
            if m.iter().any(|c| b"wa+".contains(c)) {
                set_errno(libc::EACCES);
                return std::ptr::null_mut();
            }
            // SAFETY: fdopen takes our descriptor (closed with the FILE).
            let file = unsafe { libc::fdopen(fd.as_raw_fd(), mode) };
            if !file.is_null() {
                let _ = fd.into_raw_fd();
            }
            file
        }
    }
}

/// Interposed `fopen`.
#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    match real!(c"fopen", FopenFn) {
        // SAFETY: forwarded contract.
        Some(f) => unsafe { fopen_with(path, mode, f) },
        None => {
            set_errno(libc::ENOSYS);
            std::ptr::null_mut()
        }
    }
}

/// Interposed `fopen64`.
#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    match real!(c"fopen64", FopenFn) {
        // SAFETY: forwarded contract.
        Some(f) => unsafe { fopen_with(path, mode, f) },
        None => {
            set_errno(libc::ENOSYS);
            std::ptr::null_mut()
        }
    }
}

// ------------------------------------------------------------- stat ------

// A sysfs file's metadata is its memfd's, taken with fstatat(fd, "",
// AT_EMPTY_PATH) (statx and __fxstatat alike); sysfs files are no
// symlinks, so the no-follow variants answer the same. The buffers are
// opaque here: libc writes them.

type StatFn = unsafe extern "C" fn(*const c_char, *mut c_void) -> c_int;
type FstatatFn = unsafe extern "C" fn(c_int, *const c_char, *mut c_void, c_int) -> c_int;
type XstatFn = unsafe extern "C" fn(c_int, *const c_char, *mut c_void) -> c_int;
type FxstatatFn = unsafe extern "C" fn(c_int, c_int, *const c_char, *mut c_void, c_int) -> c_int;
type StatxFn = unsafe extern "C" fn(c_int, *const c_char, c_int, c_uint, *mut c_void) -> c_int;

/// `stat`-like calls: `real(path)` for ours and others, `text(fd)` for a
/// sysfs file.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
unsafe fn stat_with(
    path: *const c_char,
    real: impl FnOnce(*const c_char) -> c_int,
    text: impl FnOnce(c_int) -> c_int,
) -> c_int {
    // SAFETY: forwarded contract.
    match unsafe { route(path, true) } {
        Route::Libc => real(path),
        Route::Node => real(DEV_NULL.as_ptr()),
        Route::Text(fd) => text(fd.as_raw_fd()),
        Route::Err(e) => fail(e),
    }
}

macro_rules! stat_fn {
    ($(#[$doc:meta])* $name:ident, $sym:literal) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, buf: *mut c_void) -> c_int {
            let (Some(f), Some(at)) = (real!($sym, StatFn), real!(c"fstatat64", FstatatFn)) else {
                return fail(libc::ENOSYS);
            };
            // SAFETY: libc's functions with the caller's buffer.
            unsafe { stat_with(path, |p| f(p, buf), |fd| at(fd, c"".as_ptr(), buf, libc::AT_EMPTY_PATH)) }
        }
    };
}

stat_fn!(
    /// Interposed `stat`.
    stat, c"stat"
);
stat_fn!(
    /// Interposed `stat64`.
    stat64, c"stat64"
);
stat_fn!(
    /// Interposed `lstat`.
    lstat, c"lstat"
);
stat_fn!(
    /// Interposed `lstat64`.
    lstat64, c"lstat64"
);

macro_rules! fstatat_fn {
    ($(#[$doc:meta])* $name:ident, $sym:literal) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(dirfd: c_int, path: *const c_char, buf: *mut c_void, flags: c_int) -> c_int {
            let Some(f) = real!($sym, FstatatFn) else {
                return fail(libc::ENOSYS);
            };
            // SAFETY: libc's function with the caller's buffer.
            unsafe { stat_with(path, |p| f(dirfd, p, buf, flags), |fd| f(fd, c"".as_ptr(), buf, libc::AT_EMPTY_PATH)) }
        }
    };
}

fstatat_fn!(
    /// Interposed `fstatat`.
    fstatat, c"fstatat"
);
fstatat_fn!(
    /// Interposed `fstatat64`.
    fstatat64, c"fstatat64"
);

macro_rules! xstat_fn {
    ($(#[$doc:meta])* $name:ident, $sym:literal, $at:literal) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(ver: c_int, path: *const c_char, buf: *mut c_void) -> c_int {
            let (Some(f), Some(at)) = (real!($sym, XstatFn), real!($at, FxstatatFn)) else {
                return fail(libc::ENOSYS);
            };
            // SAFETY: libc's functions with the caller's buffer.
            unsafe { stat_with(path, |p| f(ver, p, buf), |fd| at(ver, fd, c"".as_ptr(), buf, libc::AT_EMPTY_PATH)) }
        }
    };
}

xstat_fn!(
    /// Interposed `__xstat` (`stat` of binaries built before glibc 2.33).
    __xstat, c"__xstat", c"__fxstatat"
);
xstat_fn!(
    /// Interposed `__xstat64`.
    __xstat64, c"__xstat64", c"__fxstatat64"
);
xstat_fn!(
    /// Interposed `__lxstat`.
    __lxstat, c"__lxstat", c"__fxstatat"
);
xstat_fn!(
    /// Interposed `__lxstat64`.
    __lxstat64, c"__lxstat64", c"__fxstatat64"
);

macro_rules! fxstatat_fn {
    ($(#[$doc:meta])* $name:ident, $sym:literal) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(ver: c_int, dirfd: c_int, path: *const c_char, buf: *mut c_void, flags: c_int) -> c_int {
            let Some(f) = real!($sym, FxstatatFn) else {
                return fail(libc::ENOSYS);
            };
            // SAFETY: libc's function with the caller's buffer.
            unsafe { stat_with(path, |p| f(ver, dirfd, p, buf, flags), |fd| f(ver, fd, c"".as_ptr(), buf, libc::AT_EMPTY_PATH)) }
        }
    };
}

fxstatat_fn!(
    /// Interposed `__fxstatat`.
    __fxstatat, c"__fxstatat"
);
fxstatat_fn!(
    /// Interposed `__fxstatat64`.
    __fxstatat64, c"__fxstatat64"
);

/// Interposed `statx`.
#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    buf: *mut c_void,
) -> c_int {
    let Some(f) = real!(c"statx", StatxFn) else {
        return fail(libc::ENOSYS);
    };
    let sync = flags & libc::AT_STATX_SYNC_TYPE;
    // SAFETY: libc's function with the caller's buffer.
    unsafe {
        stat_with(
            path,
            |p| f(dirfd, p, flags, mask, buf),
            |fd| f(fd, c"".as_ptr(), libc::AT_EMPTY_PATH | sync, mask, buf),
        )
    }
}

// ----------------------------------------------------------- access ------

type AccessFn = unsafe extern "C" fn(*const c_char, c_int) -> c_int;
type FaccessatFn = unsafe extern "C" fn(c_int, *const c_char, c_int, c_int) -> c_int;

/// `access`-like calls. A sysfs file is readable, not writable or
/// executable.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
unsafe fn access_with(
    path: *const c_char,
    mode: c_int,
    real: impl FnOnce(*const c_char) -> c_int,
) -> c_int {
    // SAFETY: forwarded contract.
    match unsafe { route(path, true) } {
        Route::Libc => real(path),
        Route::Node => real(DEV_NULL.as_ptr()),
        Route::Text(_) if mode & (libc::W_OK | libc::X_OK) != 0 => fail(libc::EACCES),
        Route::Text(_) => 0,
        Route::Err(e) => fail(e),
    }
}

macro_rules! access_fn {
    ($(#[$doc:meta])* $name:ident, $sym:literal) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: c_int) -> c_int {
            let Some(f) = real!($sym, AccessFn) else {
                return fail(libc::ENOSYS);
            };
            // SAFETY: libc's function with the caller's arguments.
            unsafe { access_with(path, mode, |p| f(p, mode)) }
        }
    };
}

access_fn!(
    /// Interposed `access`.
    access, c"access"
);
access_fn!(
    /// Interposed `euidaccess`.
    euidaccess, c"euidaccess"
);
access_fn!(
    /// Interposed `eaccess`.
    eaccess, c"eaccess"
);

/// Interposed `faccessat`.
#[no_mangle]
pub unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    let Some(f) = real!(c"faccessat", FaccessatFn) else {
        return fail(libc::ENOSYS);
    };
    // SAFETY: libc's function with the caller's arguments.
    unsafe { access_with(path, mode, |p| f(dirfd, p, mode, flags)) }
}
