//! libsoftrdma_preload.so: shows softrdma's devices in the file system as
//! a kernel RDMA device is shown, to the programs `softrdma exec` starts
//! and their children, without root and without a kernel module.
//!
//! Programs find RDMA devices without the verbs: UCX checks
//! `/dev/infiniband/<dev_name>` and reads each GID's RoCE version and
//! interface from `/sys/class/infiniband/DEV/ports/1/gid_attrs/`; Open MPI
//! looks for `/sys/class/infiniband`; Mooncake lists it and resolves
//! `DEV/../..` to the device's folder for its NUMA node; rdma-core's test
//! suite lists `DEV/device/net/` with `ls`; harnesses read `gids/N`,
//! `node_guid`, `pkeys/0`. softrdma-sysfs makes that view out of files
//! (a directory materialized once per content in a private runtime
//! directory); this library resolves every path a program names against
//! it ([`softrdma_sysfs::Overlay`]) and hands libc the real location: a
//! file of the view, a real file (the interface's folder, `numa_node` of
//! a PCI device), or `/dev/null` for a device node. Which view a process
//! sees is [`view`]'s business: none at all for a program running another
//! libibverbs than softrdma's.
//!
//! Interposed (the glibc 2.36 names a program or library may import):
//! `open open64 __open_2 __open64_2 openat openat64 __openat_2
//! __openat64_2 fopen fopen64`, `stat stat64 lstat lstat64 fstatat
//! fstatat64 statx __xstat __xstat64 __lxstat __lxstat64 __fxstatat
//! __fxstatat64`, `access faccessat euidaccess eaccess`, `opendir`,
//! `readlink readlinkat`, `realpath __realpath_chk canonicalize_file_name`
//! (glibc's `realpath` reads links with internal calls no preload
//! reaches), `chdir getcwd`, `getxattr lgetxattr listxattr llistxattr`,
//! `scandir scandir64` (internal `opendir`), `glob glob64` (made to walk
//! the folders through the functions above with `GLOB_ALTDIRFUNC`). Calls glibc makes inside itself (`fopen`
//! opening its file, `opendir` opening the folder) do not go through
//! these symbols, which is why those are interposed as a whole. A path
//! that cannot meet the view — every path without `infiniband` or `..` in
//! it, bar `/sys/devices/virtual/softrdma` — costs two substring searches;
//! the real functions are found with `dlsym(RTLD_NEXT)` once. Files of the
//! view are read-only (writing one is EACCES).

#![allow(clippy::missing_safety_doc)] // the C contracts of the libc functions

pub mod view;

use softrdma_sysfs::Resolved;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The next definition of `name` (libc's), looked up once.
fn resolve_sym(slot: &AtomicUsize, name: &CStr) -> usize {
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
        let p = resolve_sym(&SLOT, $name);
        // SAFETY: `p` is libc's definition of this name, whose C type is
        // `$ty` (glibc 2.36 headers).
        (p != 0).then(|| unsafe { std::mem::transmute::<usize, $ty>(p) })
    }};
}

fn errno() -> c_int {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() }
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

/// Set once the program changed into a folder of a view: relative paths
/// are then resolved too.
static CWD_IN_VIEW: AtomicBool = AtomicBool::new(false);

/// Where a call on a path goes.
enum Route {
    /// Not the view's business: libc with the program's arguments.
    Libc,
    /// libc on this path instead; `in_view`: a (read-only) file of the view;
    /// `virt`: the path in the program's terms.
    At {
        os: CString,
        virt: PathBuf,
        in_view: bool,
    },
}

/// Whether `p` may meet a view at all (the cheap test every call makes).
fn candidate(p: &[u8]) -> bool {
    fn has(h: &[u8], n: &[u8]) -> bool {
        h.windows(n.len()).any(|w| w == n)
    }
    if p.first() == Some(&b'/') {
        has(p, b"infiniband")
            || has(p, b"/..")
            || p.starts_with(b"/sys/devices/virtual/softrdma")
            || p.starts_with(b"//")
            || has(p, b"/./")
    } else {
        !p.is_empty() && CWD_IN_VIEW.load(Ordering::Relaxed)
    }
}

/// The absolute form of a relative `p` in the program's terms (the
/// working directory may be a folder of a view).
fn absolute(p: &[u8]) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: a buffer of its length; the raw system call.
    let n = unsafe { libc::syscall(libc::SYS_getcwd, buf.as_mut_ptr(), buf.len()) };
    if n <= 0 {
        return None;
    }
    buf.truncate(n as usize - 1);
    let cwd = PathBuf::from(std::ffi::OsStr::from_bytes(&buf));
    let cwd = view::unmap(&cwd).unwrap_or(cwd);
    let mut v = cwd.into_os_string().into_encoded_bytes();
    v.push(b'/');
    v.extend_from_slice(p);
    Some(v)
}

/// The route of `path` (`follow_last`: whether a link in the last
/// component is followed).
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
unsafe fn route(path: *const c_char, follow_last: bool) -> Route {
    if path.is_null() {
        return Route::Libc;
    }
    // SAFETY: the caller's path is NUL-terminated.
    let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
    if !candidate(bytes) {
        return Route::Libc;
    }
    let saved = errno();
    let r = view::outside(|| {
        let abs;
        let p = if bytes.first() == Some(&b'/') {
            bytes
        } else {
            abs = absolute(bytes);
            match &abs {
                Some(a) => a.as_slice(),
                None => return Route::Libc,
            }
        };
        let Some(o) = view::current() else {
            return Route::Libc;
        };
        match o.resolve(p, follow_last) {
            Resolved::Untouched => Route::Libc,
            Resolved::At { os, virt, in_view } => match CString::new(os.as_os_str().as_bytes()) {
                Ok(os) => Route::At { os, virt, in_view },
                Err(_) => Route::Libc,
            },
        }
    })
    .unwrap_or(Route::Libc);
    // Looking the view up must not leave a stray errno for the program.
    set_errno(saved);
    r
}

/// `real(path)` on the route's path; `write`: the call would change the
/// file (EACCES on a file of the view).
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
unsafe fn on_path(
    path: *const c_char,
    follow_last: bool,
    write: bool,
    real: impl FnOnce(*const c_char) -> c_int,
) -> c_int {
    // SAFETY: forwarded contract.
    match unsafe { route(path, follow_last) } {
        Route::Libc => real(path),
        Route::At { in_view: true, .. } if write => fail(libc::EACCES),
        Route::At { os, .. } => real(os.as_ptr()),
    }
}

/// Whether `flags` of an open change the file.
fn open_writes(flags: c_int) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY
        || flags & (libc::O_CREAT | libc::O_TRUNC) != 0
        // O_TMPFILE includes O_DIRECTORY's bit: all of it, not any.
        || flags & libc::O_TMPFILE == libc::O_TMPFILE
}

/// `dirfd`-relative calls: only absolute paths (or the working
/// directory's) can meet a view.
fn by_dirfd(dirfd: c_int, path: *const c_char) -> bool {
    if dirfd == libc::AT_FDCWD || path.is_null() {
        return true;
    }
    // SAFETY: a NUL-terminated path.
    unsafe { *path == b'/' as c_char }
}

// ------------------------------------------------------------- open ------

type OpenFn = unsafe extern "C" fn(*const c_char, c_int, c_uint) -> c_int;
type OpenAtFn = unsafe extern "C" fn(c_int, *const c_char, c_int, c_uint) -> c_int;
type Open2Fn = unsafe extern "C" fn(*const c_char, c_int) -> c_int;
type OpenAt2Fn = unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int;

/// `open`-like calls.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
unsafe fn open_with(
    path: *const c_char,
    flags: c_int,
    real: impl FnOnce(*const c_char) -> c_int,
) -> c_int {
    let follow = flags & libc::O_NOFOLLOW == 0;
    // SAFETY: forwarded contract.
    unsafe { on_path(path, follow, open_writes(flags), real) }
}

// `open(path, flags, ...)` is variadic; defining it with a fixed third
// argument is sound on the Linux ABIs (x86-64 System V, AArch64): a
// variadic integer argument travels in the register a fixed one would,
// and when the caller passes none the value read is ignored by libc
// unless O_CREAT or O_TMPFILE asks for it, as in libc itself.

macro_rules! open_fn {
    ($(#[$doc:meta])* $name:ident, $sym:literal) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
            let Some(f) = real!($sym, OpenFn) else {
                return fail(libc::ENOSYS);
            };
            // SAFETY: forwarded contract; `f` is libc's.
            unsafe { open_with(path, flags, |p| f(p, flags, mode)) }
        }
    };
}

open_fn!(
    /// Interposed `open`.
    open, c"open"
);
open_fn!(
    /// Interposed `open64`.
    open64, c"open64"
);

macro_rules! open2_fn {
    ($(#[$doc:meta])* $name:ident, $sym:literal) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, flags: c_int) -> c_int {
            let Some(f) = real!($sym, Open2Fn) else {
                return fail(libc::ENOSYS);
            };
            // SAFETY: as `open`.
            unsafe { open_with(path, flags, |p| f(p, flags)) }
        }
    };
}

open2_fn!(
    /// Interposed `__open_2` (`open` under `_FORTIFY_SOURCE`).
    __open_2, c"__open_2"
);
open2_fn!(
    /// Interposed `__open64_2`.
    __open64_2, c"__open64_2"
);

macro_rules! openat_fn {
    ($(#[$doc:meta])* $name:ident, $sym:literal) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
            let Some(f) = real!($sym, OpenAtFn) else {
                return fail(libc::ENOSYS);
            };
            if !by_dirfd(dirfd, path) {
                // SAFETY: libc's function with the program's arguments.
                return unsafe { f(dirfd, path, flags, mode) };
            }
            // SAFETY: as `open`.
            unsafe { open_with(path, flags, |p| f(dirfd, p, flags, mode)) }
        }
    };
}

openat_fn!(
    /// Interposed `openat`.
    openat, c"openat"
);
openat_fn!(
    /// Interposed `openat64`.
    openat64, c"openat64"
);

macro_rules! openat2_fn {
    ($(#[$doc:meta])* $name:ident, $sym:literal) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
            let Some(f) = real!($sym, OpenAt2Fn) else {
                return fail(libc::ENOSYS);
            };
            if !by_dirfd(dirfd, path) {
                // SAFETY: libc's function with the program's arguments.
                return unsafe { f(dirfd, path, flags) };
            }
            // SAFETY: as `open`.
            unsafe { open_with(path, flags, |p| f(dirfd, p, flags)) }
        }
    };
}

openat2_fn!(
    /// Interposed `__openat_2`.
    __openat_2, c"__openat_2"
);
openat2_fn!(
    /// Interposed `__openat64_2`.
    __openat64_2, c"__openat64_2"
);

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
    let write = m.iter().any(|c| b"wa+".contains(c));
    // SAFETY: forwarded contract.
    match unsafe { route(path, true) } {
        // SAFETY: libc's fopen with the caller's arguments.
        Route::Libc => unsafe { f(path, mode) },
        Route::At { in_view: true, .. } if write => {
            set_errno(libc::EACCES);
            std::ptr::null_mut()
        }
        // SAFETY: as above, on the route's path.
        Route::At { os, .. } => unsafe { f(os.as_ptr(), mode) },
    }
}

macro_rules! fopen_fn {
    ($(#[$doc:meta])* $name:ident, $sym:literal) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
            match real!($sym, FopenFn) {
                // SAFETY: forwarded contract.
                Some(f) => unsafe { fopen_with(path, mode, f) },
                None => {
                    set_errno(libc::ENOSYS);
                    std::ptr::null_mut()
                }
            }
        }
    };
}

fopen_fn!(
    /// Interposed `fopen`.
    fopen, c"fopen"
);
fopen_fn!(
    /// Interposed `fopen64`.
    fopen64, c"fopen64"
);

// ------------------------------------------------------------- stat ------

// The buffers are opaque here: libc writes them.

type StatFn = unsafe extern "C" fn(*const c_char, *mut c_void) -> c_int;
type FstatatFn = unsafe extern "C" fn(c_int, *const c_char, *mut c_void, c_int) -> c_int;
type XstatFn = unsafe extern "C" fn(c_int, *const c_char, *mut c_void) -> c_int;
type FxstatatFn = unsafe extern "C" fn(c_int, c_int, *const c_char, *mut c_void, c_int) -> c_int;
type StatxFn = unsafe extern "C" fn(c_int, *const c_char, c_int, c_uint, *mut c_void) -> c_int;

macro_rules! stat_fn {
    ($(#[$doc:meta])* $name:ident, $sym:literal, $follow:expr) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, buf: *mut c_void) -> c_int {
            let Some(f) = real!($sym, StatFn) else {
                return fail(libc::ENOSYS);
            };
            // SAFETY: libc's function with the caller's buffer.
            unsafe { on_path(path, $follow, false, |p| f(p, buf)) }
        }
    };
}

stat_fn!(
    /// Interposed `stat`.
    stat, c"stat", true
);
stat_fn!(
    /// Interposed `stat64`.
    stat64, c"stat64", true
);
stat_fn!(
    /// Interposed `lstat`.
    lstat, c"lstat", false
);
stat_fn!(
    /// Interposed `lstat64`.
    lstat64, c"lstat64", false
);

macro_rules! fstatat_fn {
    ($(#[$doc:meta])* $name:ident, $sym:literal) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(dirfd: c_int, path: *const c_char, buf: *mut c_void, flags: c_int) -> c_int {
            let Some(f) = real!($sym, FstatatFn) else {
                return fail(libc::ENOSYS);
            };
            if !by_dirfd(dirfd, path) {
                // SAFETY: libc's function with the program's arguments.
                return unsafe { f(dirfd, path, buf, flags) };
            }
            let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
            // SAFETY: libc's function with the caller's buffer.
            unsafe { on_path(path, follow, false, |p| f(dirfd, p, buf, flags)) }
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
    ($(#[$doc:meta])* $name:ident, $sym:literal, $follow:expr) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(ver: c_int, path: *const c_char, buf: *mut c_void) -> c_int {
            let Some(f) = real!($sym, XstatFn) else {
                return fail(libc::ENOSYS);
            };
            // SAFETY: libc's function with the caller's buffer.
            unsafe { on_path(path, $follow, false, |p| f(ver, p, buf)) }
        }
    };
}

xstat_fn!(
    /// Interposed `__xstat` (`stat` of binaries built before glibc 2.33).
    __xstat, c"__xstat", true
);
xstat_fn!(
    /// Interposed `__xstat64`.
    __xstat64, c"__xstat64", true
);
xstat_fn!(
    /// Interposed `__lxstat`.
    __lxstat, c"__lxstat", false
);
xstat_fn!(
    /// Interposed `__lxstat64`.
    __lxstat64, c"__lxstat64", false
);

macro_rules! fxstatat_fn {
    ($(#[$doc:meta])* $name:ident, $sym:literal) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(ver: c_int, dirfd: c_int, path: *const c_char, buf: *mut c_void, flags: c_int) -> c_int {
            let Some(f) = real!($sym, FxstatatFn) else {
                return fail(libc::ENOSYS);
            };
            if !by_dirfd(dirfd, path) {
                // SAFETY: libc's function with the program's arguments.
                return unsafe { f(ver, dirfd, path, buf, flags) };
            }
            let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
            // SAFETY: libc's function with the caller's buffer.
            unsafe { on_path(path, follow, false, |p| f(ver, dirfd, p, buf, flags)) }
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
    if !by_dirfd(dirfd, path) {
        // SAFETY: libc's function with the program's arguments.
        return unsafe { f(dirfd, path, flags, mask, buf) };
    }
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    // SAFETY: libc's function with the caller's buffer.
    unsafe { on_path(path, follow, false, |p| f(dirfd, p, flags, mask, buf)) }
}

// ----------------------------------------------------------- access ------

type AccessFn = unsafe extern "C" fn(*const c_char, c_int) -> c_int;
type FaccessatFn = unsafe extern "C" fn(c_int, *const c_char, c_int, c_int) -> c_int;

macro_rules! access_fn {
    ($(#[$doc:meta])* $name:ident, $sym:literal) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: c_int) -> c_int {
            let Some(f) = real!($sym, AccessFn) else {
                return fail(libc::ENOSYS);
            };
            // SAFETY: libc's function with the caller's arguments.
            unsafe { on_path(path, true, mode & libc::W_OK != 0, |p| f(p, mode)) }
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
    if !by_dirfd(dirfd, path) {
        // SAFETY: libc's function with the program's arguments.
        return unsafe { f(dirfd, path, mode, flags) };
    }
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    // SAFETY: libc's function with the caller's arguments.
    unsafe {
        on_path(path, follow, mode & libc::W_OK != 0, |p| {
            f(dirfd, p, mode, flags)
        })
    }
}

// ----------------------------------------------------------- xattrs ------

// `ls -l` asks every file for its SELinux label (libselinux's
// `lgetfilecon`): a file of a view has none (ENODATA), as sysfs answers.

type GetxattrFn = unsafe extern "C" fn(*const c_char, *const c_char, *mut c_void, usize) -> isize;
type ListxattrFn = unsafe extern "C" fn(*const c_char, *mut c_char, usize) -> isize;

macro_rules! getxattr_fn {
    ($(#[$doc:meta])* $name:ident, $sym:literal, $follow:expr) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, name: *const c_char, value: *mut c_void, size: usize) -> isize {
            let Some(f) = real!($sym, GetxattrFn) else {
                set_errno(libc::ENOSYS);
                return -1;
            };
            // SAFETY: forwarded contract.
            match unsafe { route(path, $follow) } {
                // SAFETY: libc's function with the program's arguments.
                Route::Libc => unsafe { f(path, name, value, size) },
                // SAFETY: libc's function on the route's path.
                Route::At { os, .. } => unsafe { f(os.as_ptr(), name, value, size) },
            }
        }
    };
}

getxattr_fn!(
    /// Interposed `getxattr`.
    getxattr, c"getxattr", true
);
getxattr_fn!(
    /// Interposed `lgetxattr`.
    lgetxattr, c"lgetxattr", false
);

macro_rules! listxattr_fn {
    ($(#[$doc:meta])* $name:ident, $sym:literal, $follow:expr) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, list: *mut c_char, size: usize) -> isize {
            let Some(f) = real!($sym, ListxattrFn) else {
                set_errno(libc::ENOSYS);
                return -1;
            };
            // SAFETY: forwarded contract.
            match unsafe { route(path, $follow) } {
                // SAFETY: libc's function with the program's arguments.
                Route::Libc => unsafe { f(path, list, size) },
                // SAFETY: libc's function on the route's path.
                Route::At { os, .. } => unsafe { f(os.as_ptr(), list, size) },
            }
        }
    };
}

listxattr_fn!(
    /// Interposed `listxattr`.
    listxattr, c"listxattr", true
);
listxattr_fn!(
    /// Interposed `llistxattr`.
    llistxattr, c"llistxattr", false
);

// ----------------------------------------------------------- folders -----

type OpendirFn = unsafe extern "C" fn(*const c_char) -> *mut libc::DIR;

/// Interposed `opendir` (glibc opens the folder with an internal call).
#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut libc::DIR {
    let Some(f) = real!(c"opendir", OpendirFn) else {
        set_errno(libc::ENOSYS);
        return std::ptr::null_mut();
    };
    // SAFETY: forwarded contract.
    match unsafe { route(path, true) } {
        // SAFETY: libc's function with the program's argument.
        Route::Libc => unsafe { f(path) },
        // SAFETY: libc's function on the route's path.
        Route::At { os, .. } => unsafe { f(os.as_ptr()) },
    }
}

type ScandirFn = unsafe extern "C" fn(
    *const c_char,
    *mut *mut *mut c_void,
    Option<unsafe extern "C" fn(*const c_void) -> c_int>,
    Option<unsafe extern "C" fn(*mut *const c_void, *mut *const c_void) -> c_int>,
) -> c_int;

macro_rules! scandir_fn {
    ($(#[$doc:meta])* $name:ident, $sym:literal) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            path: *const c_char,
            list: *mut *mut *mut c_void,
            filter: Option<unsafe extern "C" fn(*const c_void) -> c_int>,
            compar: Option<unsafe extern "C" fn(*mut *const c_void, *mut *const c_void) -> c_int>,
        ) -> c_int {
            let Some(f) = real!($sym, ScandirFn) else {
                return fail(libc::ENOSYS);
            };
            // SAFETY: libc's function with the program's other arguments.
            unsafe { on_path(path, true, false, |p| f(p, list, filter, compar)) }
        }
    };
}

scandir_fn!(
    /// Interposed `scandir` (glibc opens the folder with an internal call).
    scandir, c"scandir"
);
scandir_fn!(
    /// Interposed `scandir64`.
    scandir64, c"scandir64"
);

/// `glob`: glibc walks the folders with internal calls; with
/// `GLOB_ALTDIRFUNC` it walks them through the functions above.
type GlobFn = unsafe extern "C" fn(
    *const c_char,
    c_int,
    Option<unsafe extern "C" fn(*const c_char, c_int) -> c_int>,
    *mut GlobT,
) -> c_int;

/// glibc's `glob_t` (= `glob64_t` on 64-bit Linux).
#[repr(C)]
pub struct GlobT {
    gl_pathc: usize,
    gl_pathv: *mut *mut c_char,
    gl_offs: usize,
    gl_flags: c_int,
    gl_closedir: *mut c_void,
    gl_readdir: *mut c_void,
    gl_opendir: *mut c_void,
    gl_lstat: *mut c_void,
    gl_stat: *mut c_void,
}

/// `GLOB_ALTDIRFUNC` (glibc's glob.h).
const GLOB_ALTDIRFUNC: c_int = 1 << 9;

unsafe extern "C" fn glob_opendir(p: *const c_char) -> *mut c_void {
    // SAFETY: glob passes a NUL-terminated path.
    unsafe { opendir(p) }.cast()
}
unsafe extern "C" fn glob_readdir(d: *mut c_void) -> *mut c_void {
    // SAFETY: a folder opened by `glob_opendir`.
    unsafe { libc::readdir64(d.cast()) }.cast()
}
unsafe extern "C" fn glob_closedir(d: *mut c_void) {
    // SAFETY: as above.
    unsafe { libc::closedir(d.cast()) };
}
unsafe extern "C" fn glob_stat(p: *const c_char, b: *mut c_void) -> c_int {
    // SAFETY: glob passes a path and a stat64 buffer.
    unsafe { stat64(p, b) }
}
unsafe extern "C" fn glob_lstat(p: *const c_char, b: *mut c_void) -> c_int {
    // SAFETY: as above.
    unsafe { lstat64(p, b) }
}

macro_rules! glob_fn {
    ($(#[$doc:meta])* $name:ident, $sym:literal) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            pattern: *const c_char,
            flags: c_int,
            errfunc: Option<unsafe extern "C" fn(*const c_char, c_int) -> c_int>,
            g: *mut GlobT,
        ) -> c_int {
            let Some(f) = real!($sym, GlobFn) else {
                return libc::GLOB_NOSPACE;
            };
            // SAFETY: the program's pattern and glob_t (glob and glob64
            // have one layout on 64-bit Linux).
            unsafe {
                if flags & GLOB_ALTDIRFUNC != 0 || g.is_null() || !candidate(CStr::from_ptr(pattern).to_bytes()) {
                    return f(pattern, flags, errfunc, g);
                }
                (*g).gl_closedir = glob_closedir as *mut c_void;
                (*g).gl_readdir = glob_readdir as *mut c_void;
                (*g).gl_opendir = glob_opendir as *mut c_void;
                (*g).gl_lstat = glob_lstat as *mut c_void;
                (*g).gl_stat = glob_stat as *mut c_void;
                f(pattern, flags | GLOB_ALTDIRFUNC, errfunc, g)
            }
        }
    };
}

glob_fn!(
    /// Interposed `glob`.
    glob, c"glob"
);
glob_fn!(
    /// Interposed `glob64`.
    glob64, c"glob64"
);

type ChdirFn = unsafe extern "C" fn(*const c_char) -> c_int;

/// Interposed `chdir`: into a folder of a view, the real working folder
/// is the view's (relative paths and `getcwd` then follow it).
#[no_mangle]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    let Some(f) = real!(c"chdir", ChdirFn) else {
        return fail(libc::ENOSYS);
    };
    // SAFETY: forwarded contract.
    let (r, in_view) = match unsafe { route(path, true) } {
        // SAFETY: libc's function with the program's argument.
        Route::Libc => (unsafe { f(path) }, false),
        // SAFETY: libc's function on the route's path.
        Route::At { os, in_view, .. } => (unsafe { f(os.as_ptr()) }, in_view),
    };
    if r == 0 {
        CWD_IN_VIEW.store(in_view, Ordering::Relaxed);
    }
    r
}

type GetcwdFn = unsafe extern "C" fn(*mut c_char, usize) -> *mut c_char;

/// Interposed `getcwd`: a folder of a view is named by the path it
/// stands for.
#[no_mangle]
pub unsafe extern "C" fn getcwd(buf: *mut c_char, size: usize) -> *mut c_char {
    let Some(f) = real!(c"getcwd", GetcwdFn) else {
        set_errno(libc::ENOSYS);
        return std::ptr::null_mut();
    };
    if !CWD_IN_VIEW.load(Ordering::Relaxed) {
        // SAFETY: libc's function with the program's arguments.
        return unsafe { f(buf, size) };
    }
    let mut own = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: our buffer of its length.
    if unsafe { f(own.as_mut_ptr().cast(), own.len()) }.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: getcwd wrote a NUL-terminated path.
    let cwd = unsafe { CStr::from_ptr(own.as_ptr().cast()) }.to_bytes();
    let p = Path::new(std::ffi::OsStr::from_bytes(cwd));
    let saved = errno();
    let mapped = view::outside(|| view::unmap(p)).flatten();
    set_errno(saved);
    let out: Vec<u8> = match mapped {
        Some(v) => v.into_os_string().into_encoded_bytes(),
        None => cwd.to_vec(),
    };
    // SAFETY: `out` and the program's buffer per getcwd's contract.
    unsafe { give_path(&out, buf, size, libc::ERANGE) }
}

/// A path for the program per getcwd/realpath's contract: into `buf`
/// (`size` bytes; `too_small` when it does not fit) or, with `buf` NULL,
/// a malloc'ed copy.
///
/// # Safety
/// `buf` is NULL or holds `size` bytes.
unsafe fn give_path(path: &[u8], buf: *mut c_char, size: usize, too_small: c_int) -> *mut c_char {
    let need = path.len() + 1;
    let dst = if buf.is_null() {
        // SAFETY: plain allocation, checked.
        let m = unsafe { libc::malloc(need.max(size)) } as *mut c_char;
        if m.is_null() {
            set_errno(libc::ENOMEM);
            return m;
        }
        m
    } else {
        if need > size {
            set_errno(too_small);
            return std::ptr::null_mut();
        }
        buf
    };
    // SAFETY: `dst` holds at least `need` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(path.as_ptr(), dst.cast::<u8>(), path.len());
        *dst.add(path.len()) = 0;
    }
    dst
}

// ------------------------------------------------------------ links ------

type ReadlinkFn = unsafe extern "C" fn(*const c_char, *mut c_char, usize) -> isize;
type ReadlinkatFn = unsafe extern "C" fn(c_int, *const c_char, *mut c_char, usize) -> isize;

/// `readlink`-like calls: a link of a view that leaves it reads relative,
/// as sysfs links do.
///
/// # Safety
/// `path` is NULL or NUL-terminated; `buf` holds `size` bytes.
unsafe fn readlink_with(
    path: *const c_char,
    buf: *mut c_char,
    size: usize,
    real: impl Fn(*const c_char, *mut c_char, usize) -> isize,
) -> isize {
    // SAFETY: forwarded contract.
    let (os, virt) = match unsafe { route(path, false) } {
        Route::Libc => return real(path, buf, size),
        Route::At { os, virt, .. } => (os, virt),
    };
    let mut own = vec![0u8; libc::PATH_MAX as usize];
    let n = real(os.as_ptr(), own.as_mut_ptr().cast(), own.len());
    if n < 0 {
        return n;
    }
    own.truncate(n as usize);
    let saved = errno();
    let text = view::outside(|| {
        view::current().map(|o| {
            o.link_text(&virt, Path::new(std::ffi::OsStr::from_bytes(&own)))
                .into_os_string()
                .into_encoded_bytes()
        })
    })
    .flatten()
    .unwrap_or(own);
    set_errno(saved);
    let k = text.len().min(size);
    // SAFETY: the program's buffer holds `size` bytes.
    unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), k) };
    k as isize
}

/// Interposed `readlink`.
#[no_mangle]
pub unsafe extern "C" fn readlink(path: *const c_char, buf: *mut c_char, size: usize) -> isize {
    let Some(f) = real!(c"readlink", ReadlinkFn) else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: forwarded contract; `f` is libc's.
    unsafe { readlink_with(path, buf, size, |p, b, s| f(p, b, s)) }
}

/// Interposed `readlinkat`.
#[no_mangle]
pub unsafe extern "C" fn readlinkat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> isize {
    let Some(f) = real!(c"readlinkat", ReadlinkatFn) else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    if !by_dirfd(dirfd, path) {
        // SAFETY: libc's function with the program's arguments.
        return unsafe { f(dirfd, path, buf, size) };
    }
    // SAFETY: forwarded contract; `f` is libc's.
    unsafe { readlink_with(path, buf, size, |p, b, s| f(dirfd, p, b, s)) }
}

type RealpathFn = unsafe extern "C" fn(*const c_char, *mut c_char) -> *mut c_char;

/// `realpath` of a path that meets a view: the path it resolves to in the
/// program's terms, if it exists. `None`: libc's business.
///
/// # Safety
/// `path` is NULL or NUL-terminated; `buf` is NULL or holds `size` bytes.
unsafe fn realpath_with(path: *const c_char, buf: *mut c_char, size: usize) -> Option<*mut c_char> {
    // SAFETY: forwarded contract.
    let (os, virt) = match unsafe { route(path, true) } {
        Route::Libc => return None,
        Route::At { os, virt, .. } => (os, virt),
    };
    // SAFETY: plain data; the kernel fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: the raw system call with a NUL-terminated path and a buffer.
    let r = unsafe {
        libc::syscall(
            libc::SYS_newfstatat,
            libc::AT_FDCWD,
            os.as_ptr(),
            &mut st as *mut libc::stat,
            0,
        )
    };
    if r != 0 {
        return Some(std::ptr::null_mut());
    }
    let v = virt.into_os_string().into_encoded_bytes();
    // SAFETY: the program's buffer per realpath's contract.
    Some(unsafe { give_path(&v, buf, size, libc::ENAMETOOLONG) })
}

/// Interposed `realpath` (glibc resolves links with internal calls no
/// preload library reaches).
#[no_mangle]
pub unsafe extern "C" fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    // SAFETY: realpath's buffer is NULL or PATH_MAX bytes.
    if let Some(r) = unsafe { realpath_with(path, resolved, libc::PATH_MAX as usize) } {
        return r;
    }
    match real!(c"realpath", RealpathFn) {
        // SAFETY: libc's function with the program's arguments.
        Some(f) => unsafe { f(path, resolved) },
        None => {
            set_errno(libc::ENOSYS);
            std::ptr::null_mut()
        }
    }
}

type RealpathChkFn = unsafe extern "C" fn(*const c_char, *mut c_char, usize) -> *mut c_char;

/// Interposed `__realpath_chk` (`realpath` under `_FORTIFY_SOURCE`).
#[no_mangle]
pub unsafe extern "C" fn __realpath_chk(
    path: *const c_char,
    resolved: *mut c_char,
    resolvedlen: usize,
) -> *mut c_char {
    // SAFETY: the program's buffer holds `resolvedlen` bytes.
    if let Some(r) = unsafe { realpath_with(path, resolved, resolvedlen) } {
        return r;
    }
    match real!(c"__realpath_chk", RealpathChkFn) {
        // SAFETY: libc's function with the program's arguments.
        Some(f) => unsafe { f(path, resolved, resolvedlen) },
        None => {
            set_errno(libc::ENOSYS);
            std::ptr::null_mut()
        }
    }
}

type CanonFn = unsafe extern "C" fn(*const c_char) -> *mut c_char;

/// Interposed `canonicalize_file_name`.
#[no_mangle]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    // SAFETY: a NULL buffer: the result is malloc'ed.
    if let Some(r) = unsafe { realpath_with(path, std::ptr::null_mut(), 0) } {
        return r;
    }
    match real!(c"canonicalize_file_name", CanonFn) {
        // SAFETY: libc's function with the program's argument.
        Some(f) => unsafe { f(path) },
        None => {
            set_errno(libc::ENOSYS);
            std::ptr::null_mut()
        }
    }
}
