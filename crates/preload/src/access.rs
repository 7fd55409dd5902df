//! `access faccessat euidaccess eaccess`, and the extended attributes
//! (`getxattr lgetxattr listxattr llistxattr`).

use super::*;

pub(crate) type AccessFn = unsafe extern "C" fn(*const c_char, c_int) -> c_int;
pub(crate) type FaccessatFn = unsafe extern "C" fn(c_int, *const c_char, c_int, c_int) -> c_int;

macro_rules! access_fn {
    ($(#[$doc:meta])* $name:ident, $sym:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The contract of the libc function of this name (its prototype and
        /// man page): the path is NULL or NUL-terminated, every buffer valid for
        /// the length given.
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
///
/// # Safety
/// The contract of glibc's `faccessat` (its prototype and man page): the path
/// is NULL or NUL-terminated, every buffer valid for the length given.
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

pub(crate) type GetxattrFn =
    unsafe extern "C" fn(*const c_char, *const c_char, *mut c_void, usize) -> isize;
pub(crate) type ListxattrFn = unsafe extern "C" fn(*const c_char, *mut c_char, usize) -> isize;

macro_rules! getxattr_fn {
    ($(#[$doc:meta])* $name:ident, $sym:literal, $follow:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The contract of the libc function of this name (its prototype and
        /// man page): the path is NULL or NUL-terminated, every buffer valid for
        /// the length given.
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
        ///
        /// # Safety
        /// The contract of the libc function of this name (its prototype and
        /// man page): the path is NULL or NUL-terminated, every buffer valid for
        /// the length given.
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
