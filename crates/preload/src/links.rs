//! Links: `readlink readlinkat`, `realpath __realpath_chk
//! canonicalize_file_name`.

use super::*;
use crate::dirs::give_path;

pub(crate) type ReadlinkFn = unsafe extern "C" fn(*const c_char, *mut c_char, usize) -> isize;
pub(crate) type ReadlinkatFn =
    unsafe extern "C" fn(c_int, *const c_char, *mut c_char, usize) -> isize;

/// `readlink`-like calls: a link of a view that leaves it reads relative,
/// as sysfs links do.
///
/// # Safety
/// `path` is NULL or NUL-terminated; `buf` holds `size` bytes.
pub(crate) unsafe fn readlink_with(
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
///
/// # Safety
/// The contract of glibc's `readlink` (its prototype and man page): the path
/// is NULL or NUL-terminated, every buffer valid for the length given.
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
///
/// # Safety
/// The contract of glibc's `readlinkat` (its prototype and man page): the path
/// is NULL or NUL-terminated, every buffer valid for the length given.
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

pub(crate) type RealpathFn = unsafe extern "C" fn(*const c_char, *mut c_char) -> *mut c_char;

/// `realpath` of a path that meets a view: the path it resolves to in the
/// program's terms, if it exists. `None`: libc's business.
///
/// # Safety
/// `path` is NULL or NUL-terminated; `buf` is NULL or holds `size` bytes.
pub(crate) unsafe fn realpath_with(
    path: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> Option<*mut c_char> {
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
///
/// # Safety
/// The contract of glibc's `realpath` (its prototype and man page): the path
/// is NULL or NUL-terminated, every buffer valid for the length given.
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

pub(crate) type RealpathChkFn =
    unsafe extern "C" fn(*const c_char, *mut c_char, usize) -> *mut c_char;

/// Interposed `__realpath_chk` (`realpath` under `_FORTIFY_SOURCE`).
///
/// # Safety
/// The contract of glibc's `__realpath_chk` (its prototype and man page): the path
/// is NULL or NUL-terminated, every buffer valid for the length given.
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

pub(crate) type CanonFn = unsafe extern "C" fn(*const c_char) -> *mut c_char;

/// Interposed `canonicalize_file_name`.
///
/// # Safety
/// The contract of glibc's `canonicalize_file_name` (its prototype and man page): the path
/// is NULL or NUL-terminated, every buffer valid for the length given.
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
