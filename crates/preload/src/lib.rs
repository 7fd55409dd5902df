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
        // `$ty`: build.rs calls every such symbol with `$ty`'s C types
        // against glibc's headers, and the build fails where they differ.
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

mod access;
mod dirs;
mod links;
mod open;
mod stat;
