//! Folders: `opendir`, `scandir scandir64`, `glob glob64` (walked through
//! the functions above with `GLOB_ALTDIRFUNC`), `chdir`, `getcwd`.

use super::*;
use crate::stat::{lstat64, stat64};

pub(crate) type OpendirFn = unsafe extern "C" fn(*const c_char) -> *mut libc::DIR;

/// Interposed `opendir` (glibc opens the folder with an internal call).
///
/// # Safety
/// The contract of glibc's `opendir` (its prototype and man page): the path
/// is NULL or NUL-terminated, every buffer valid for the length given.
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

pub(crate) type ScandirFn = unsafe extern "C" fn(
    *const c_char,
    *mut *mut *mut c_void,
    Option<unsafe extern "C" fn(*const c_void) -> c_int>,
    Option<unsafe extern "C" fn(*mut *const c_void, *mut *const c_void) -> c_int>,
) -> c_int;

macro_rules! scandir_fn {
    ($(#[$doc:meta])* $name:ident, $sym:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The contract of the libc function of this name (its prototype and
        /// man page): the path is NULL or NUL-terminated, every buffer valid for
        /// the length given.
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
pub(crate) type GlobFn = unsafe extern "C" fn(
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
pub(crate) const GLOB_ALTDIRFUNC: c_int = 1 << 9;

// The `GLOB_ALTDIRFUNC` callbacks glob calls with its own arguments.

/// # Safety
/// glob's `gl_opendir` contract: `p` a NUL-terminated path.
unsafe extern "C" fn glob_opendir(p: *const c_char) -> *mut c_void {
    // SAFETY: glob passes a NUL-terminated path.
    unsafe { opendir(p) }.cast()
}
/// # Safety
/// glob's `gl_readdir` contract: `d` a folder `glob_opendir` opened.
unsafe extern "C" fn glob_readdir(d: *mut c_void) -> *mut c_void {
    // SAFETY: a folder opened by `glob_opendir`.
    unsafe { libc::readdir64(d.cast()) }.cast()
}
/// # Safety
/// glob's `gl_closedir` contract: `d` a folder `glob_opendir` opened,
/// closed once.
unsafe extern "C" fn glob_closedir(d: *mut c_void) {
    // SAFETY: as above.
    unsafe { libc::closedir(d.cast()) };
}
/// # Safety
/// glob's `gl_stat` contract: `p` a NUL-terminated path, `b` a
/// `struct stat64` to fill.
unsafe extern "C" fn glob_stat(p: *const c_char, b: *mut c_void) -> c_int {
    // SAFETY: glob passes a path and a stat64 buffer.
    unsafe { stat64(p, b) }
}
/// # Safety
/// As `glob_stat` (`gl_lstat`).
unsafe extern "C" fn glob_lstat(p: *const c_char, b: *mut c_void) -> c_int {
    // SAFETY: as above.
    unsafe { lstat64(p, b) }
}

macro_rules! glob_fn {
    ($(#[$doc:meta])* $name:ident, $sym:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The contract of the libc function of this name (its prototype and
        /// man page): the path is NULL or NUL-terminated, every buffer valid for
        /// the length given.
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

pub(crate) type ChdirFn = unsafe extern "C" fn(*const c_char) -> c_int;

/// Interposed `chdir`: into a folder of a view, the real working folder
/// is the view's (relative paths and `getcwd` then follow it).
///
/// # Safety
/// The contract of glibc's `chdir` (its prototype and man page): the path
/// is NULL or NUL-terminated, every buffer valid for the length given.
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

pub(crate) type GetcwdFn = unsafe extern "C" fn(*mut c_char, usize) -> *mut c_char;

/// Interposed `getcwd`: a folder of a view is named by the path it
/// stands for.
///
/// # Safety
/// The contract of glibc's `getcwd` (its prototype and man page): the path
/// is NULL or NUL-terminated, every buffer valid for the length given.
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
pub(crate) unsafe fn give_path(
    path: &[u8],
    buf: *mut c_char,
    size: usize,
    too_small: c_int,
) -> *mut c_char {
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
