//! Living in someone else's process: softrdma runs inside the program that
//! uses it, so it must behave as the libraries that program was written
//! for (rdma-core's) do.
//!
//! - Signals: [`with_signals_blocked`] starts softrdma's threads with every
//!   signal blocked, so a process-directed signal the program blocks in its
//!   own threads (and reads from a signalfd, as tgtd does with SIGUSR2)
//!   never lands in one of ours, where its default action would kill the
//!   process. A new thread inherits the mask of the thread that creates
//!   it, so the mask holds from the new thread's first instruction.
//! - Exit: [`at_exit`] runs softrdma's last duties when the program exits
//!   normally (sending what is still queued, disconnecting), as the kernel
//!   does for rdma-core's objects when the process goes.

use std::mem::MaybeUninit;

/// Registers `f` to run at normal process exit (`atexit`: when `main`
/// returns or the program calls `exit`), after the handlers registered
/// later. `f` must not unwind. Returns false when the C library has no
/// room for another handler.
pub fn at_exit(f: extern "C" fn()) -> bool {
    // SAFETY: registers a plain function pointer with no arguments.
    unsafe { libc::atexit(f) == 0 }
}

/// Runs `spawn` (which starts threads) with every signal blocked in the
/// calling thread, then restores the caller's mask: the threads `spawn`
/// starts inherit the full mask. glibc keeps its two internal signals
/// (thread cancellation and set*id) deliverable whatever the mask says.
///
/// A signal sent to the calling thread meanwhile stays pending and is
/// delivered when the mask is restored.
pub fn with_signals_blocked<R>(spawn: impl FnOnce() -> R) -> R {
    let mut all = MaybeUninit::<libc::sigset_t>::uninit();
    let mut old = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigfillset initialises the set it is given; pthread_sigmask
    // reads `all` (initialised) and writes the previous mask into `old`.
    // Neither can fail with valid arguments (SIG_SETMASK, live pointers).
    let restored = unsafe {
        libc::sigfillset(all.as_mut_ptr());
        libc::pthread_sigmask(libc::SIG_SETMASK, all.as_ptr(), old.as_mut_ptr()) == 0
    };
    let r = spawn();
    if restored {
        // SAFETY: `old` was written by the successful call above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old.as_ptr(), std::ptr::null_mut()) };
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked_mask() -> libc::sigset_t {
        let mut cur = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: a null new set only reads the mask into `cur`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), cur.as_mut_ptr());
            cur.assume_init()
        }
    }

    fn is_blocked(set: &libc::sigset_t, sig: libc::c_int) -> bool {
        // SAFETY: a live, initialised set.
        unsafe { libc::sigismember(set, sig) == 1 }
    }

    #[test]
    fn threads_start_with_every_signal_blocked_and_the_caller_keeps_its_mask() {
        let before = blocked_mask();
        let h = with_signals_blocked(|| std::thread::spawn(blocked_mask));
        let inner = h.join().unwrap();
        for sig in [
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGPIPE,
        ] {
            assert!(
                is_blocked(&inner, sig),
                "signal {sig} not blocked in the thread"
            );
        }
        let after = blocked_mask();
        for sig in 1..32 {
            assert_eq!(
                is_blocked(&before, sig),
                is_blocked(&after, sig),
                "signal {sig}"
            );
        }
    }
}
