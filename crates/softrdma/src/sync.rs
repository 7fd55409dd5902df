//! The locks of the engine and the verbs objects: parking_lot's (no
//! poisoning, small, fast uncontended), seen by ThreadSanitizer.
//!
//! ThreadSanitizer learns happens-before from instrumented atomics and the
//! pthread functions it intercepts. Without a standard library built with
//! the sanitizer (`-Zbuild-std`, which needs a `rust-src` this machine
//! cannot download), the atomics inside `core` are not instrumented, so it
//! sees neither std's nor parking_lot's lock hand-offs and reports every
//! access under a lock as a race. Built with `--cfg softrdma_tsan`
//! (`scripts/sanitize` does), these locks tell it directly:
//! `__tsan_acquire` after taking a lock, `__tsan_release` before giving it
//! back. Otherwise they are parking_lot's locks with nothing added.

use std::ops::{Deref, DerefMut};

#[cfg(softrdma_tsan)]
extern "C" {
    fn __tsan_acquire(addr: *mut std::ffi::c_void);
    fn __tsan_release(addr: *mut std::ffi::c_void);
}

/// A mutual-exclusion lock (parking_lot's).
#[derive(Debug, Default)]
pub struct Mutex<T>(parking_lot::Mutex<T>);

/// The lock held; released on drop.
pub struct MutexGuard<'a, T>(parking_lot::MutexGuard<'a, T>);

impl<T> Mutex<T> {
    /// A lock around `v`.
    pub const fn new(v: T) -> Self {
        Mutex(parking_lot::const_mutex(v))
    }

    /// Takes the lock, waiting for it.
    pub fn lock(&self) -> MutexGuard<'_, T> {
        let g = self.0.lock();
        acquired(&self.0);
        MutexGuard(g)
    }

    /// Takes the lock if it is free.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        let g = self.0.try_lock()?;
        acquired(&self.0);
        Some(MutexGuard(g))
    }
}

#[inline(always)]
fn acquired<T>(_m: &parking_lot::Mutex<T>) {
    #[cfg(softrdma_tsan)]
    // SAFETY: a sanitizer annotation; the address only names the lock.
    unsafe {
        __tsan_acquire(_m as *const _ as *mut std::ffi::c_void)
    };
}

impl<T> Drop for MutexGuard<'_, T> {
    #[inline(always)]
    fn drop(&mut self) {
        #[cfg(softrdma_tsan)]
        // SAFETY: a sanitizer annotation; the address only names the lock.
        unsafe {
            __tsan_release(
                parking_lot::MutexGuard::mutex(&self.0) as *const _ as *mut std::ffi::c_void
            )
        };
    }
}

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}
