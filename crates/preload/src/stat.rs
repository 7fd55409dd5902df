//! The `stat` family: `stat stat64 lstat lstat64 fstatat fstatat64 statx`
//! and the pre-2.33 `__xstat` entry points old binaries call.

use super::*;

// The buffers are opaque here: libc writes them.

pub(crate) type StatFn = unsafe extern "C" fn(*const c_char, *mut c_void) -> c_int;
pub(crate) type FstatatFn = unsafe extern "C" fn(c_int, *const c_char, *mut c_void, c_int) -> c_int;
pub(crate) type XstatFn = unsafe extern "C" fn(c_int, *const c_char, *mut c_void) -> c_int;
pub(crate) type FxstatatFn =
    unsafe extern "C" fn(c_int, c_int, *const c_char, *mut c_void, c_int) -> c_int;
pub(crate) type StatxFn =
    unsafe extern "C" fn(c_int, *const c_char, c_int, c_uint, *mut c_void) -> c_int;

macro_rules! stat_fn {
    ($(#[$doc:meta])* $name:ident, $sym:literal, $follow:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The contract of the libc function of this name (its prototype and
        /// man page): the path is NULL or NUL-terminated, every buffer valid for
        /// the length given.
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
        ///
        /// # Safety
        /// The contract of the libc function of this name (its prototype and
        /// man page): the path is NULL or NUL-terminated, every buffer valid for
        /// the length given.
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
        ///
        /// # Safety
        /// The contract of the libc function of this name (its prototype and
        /// man page): the path is NULL or NUL-terminated, every buffer valid for
        /// the length given.
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
        ///
        /// # Safety
        /// The contract of the libc function of this name (its prototype and
        /// man page): the path is NULL or NUL-terminated, every buffer valid for
        /// the length given.
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
///
/// # Safety
/// The contract of glibc's `statx` (its prototype and man page): the path
/// is NULL or NUL-terminated, every buffer valid for the length given.
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
