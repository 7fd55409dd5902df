//! `open`, `open64`, `__open_2`, `__open64_2`, `openat`, `openat64`,
//! `__openat_2`, `__openat64_2`, `fopen`, `fopen64`.

use super::*;

pub(crate) type OpenFn = unsafe extern "C" fn(*const c_char, c_int, c_uint) -> c_int;
pub(crate) type OpenAtFn = unsafe extern "C" fn(c_int, *const c_char, c_int, c_uint) -> c_int;
pub(crate) type Open2Fn = unsafe extern "C" fn(*const c_char, c_int) -> c_int;
pub(crate) type OpenAt2Fn = unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int;

/// `open`-like calls.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
pub(crate) unsafe fn open_with(
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
        ///
        /// # Safety
        /// The contract of the libc function of this name (its prototype and
        /// man page): the path is NULL or NUL-terminated, every buffer valid for
        /// the length given.
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
        ///
        /// # Safety
        /// The contract of the libc function of this name (its prototype and
        /// man page): the path is NULL or NUL-terminated, every buffer valid for
        /// the length given.
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
        ///
        /// # Safety
        /// The contract of the libc function of this name (its prototype and
        /// man page): the path is NULL or NUL-terminated, every buffer valid for
        /// the length given.
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
        ///
        /// # Safety
        /// The contract of the libc function of this name (its prototype and
        /// man page): the path is NULL or NUL-terminated, every buffer valid for
        /// the length given.
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

pub(crate) type FopenFn = unsafe extern "C" fn(*const c_char, *const c_char) -> *mut libc::FILE;

/// `fopen`-like calls.
///
/// # Safety
/// `path` and `mode` are NULL or NUL-terminated strings.
pub(crate) unsafe fn fopen_with(
    path: *const c_char,
    mode: *const c_char,
    f: FopenFn,
) -> *mut libc::FILE {
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
        ///
        /// # Safety
        /// The contract of the libc function of this name (its prototype and
        /// man page): the path is NULL or NUL-terminated, every buffer valid for
        /// the length given.
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
