//! Starting a helper process that outlives the program that starts it
//! (the device process), from inside a program softrdma does not own.
//!
//! `posix_spawn` (glibc: `clone(CLONE_VM | CLONE_VFORK)`, then `execve`)
//! runs none of the program's `pthread_atfork` handlers and copies none
//! of its memory, so it is safe from any thread of a multithreaded
//! program. The new process gets a session of its own (no terminal's
//! signals reach it), an empty signal mask and default signal actions (a
//! program's ignored signals stay with the program), `/dev/null` as
//! standard input, output and error (a program whose output a pipe
//! collects must not have a helper keep that pipe open after it exits),
//! the descriptors it is given at the numbers it is given and no other,
//! and the program's environment without `LD_PRELOAD`.
//!
//! The helper is expected to fork at once and let its first process exit
//! (the daemon convention): this function reaps that first process, so
//! the program is left with no child of ours, and the helper is adopted
//! by init (or the nearest subreaper).

use std::ffi::{CString, OsString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

extern "C" {
    /// glibc 2.34's `posix_spawn_file_actions_addclosefrom_np`.
    fn posix_spawn_file_actions_addclosefrom_np(
        actions: *mut libc::posix_spawn_file_actions_t,
        from: libc::c_int,
    ) -> libc::c_int;
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r))
    }
}

/// Starts `program` with `args` (not including its name), the descriptors
/// `fds` as the numbers given (each ≥ 3), and waits for its first process
/// to exit. Returns that process's exit status (0 when the helper forked
/// and went on).
pub fn spawn_detached(
    program: &Path,
    args: &[OsString],
    fds: &[(BorrowedFd<'_>, RawFd)],
) -> io::Result<i32> {
    let cstr = |s: &[u8]| {
        CString::new(s).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in argument"))
    };
    let path = cstr(program.as_os_str().as_bytes())?;
    let mut argv_c = vec![path.clone()];
    for a in args {
        argv_c.push(cstr(a.as_bytes())?);
    }
    let mut envp_c = Vec::new();
    for (k, v) in std::env::vars_os() {
        if k == "LD_PRELOAD" {
            continue;
        }
        let mut kv = k.as_bytes().to_vec();
        kv.push(b'=');
        kv.extend_from_slice(v.as_bytes());
        if let Ok(c) = CString::new(kv) {
            envp_c.push(c);
        }
    }
    let mut argv: Vec<*mut libc::c_char> = argv_c.iter().map(|c| c.as_ptr().cast_mut()).collect();
    argv.push(std::ptr::null_mut());
    let mut envp: Vec<*mut libc::c_char> = envp_c.iter().map(|c| c.as_ptr().cast_mut()).collect();
    envp.push(std::ptr::null_mut());

    // Our descriptors first go above every target number, so that no
    // dup2 of the file actions overwrites a source not yet moved.
    let high: Vec<std::os::fd::OwnedFd> = fds
        .iter()
        .map(|(f, _)| {
            // SAFETY: F_DUPFD_CLOEXEC on a live descriptor.
            let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 512) };
            if r < 0 {
                Err(io::Error::last_os_error())
            } else {
                // SAFETY: a fresh descriptor nothing else owns.
                Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(r) })
            }
        })
        .collect::<io::Result<_>>()?;
    let top = fds.iter().map(|(_, t)| *t).max().unwrap_or(2).max(2);
    if fds.iter().any(|(_, t)| *t < 3) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "target fd below 3",
        ));
    }
    let devnull = cstr(b"/dev/null")?;

    let mut fa = MaybeUninit::<libc::posix_spawn_file_actions_t>::uninit();
    let mut at = MaybeUninit::<libc::posix_spawnattr_t>::uninit();
    // SAFETY: each call initialises or uses the objects above, which live
    // until they are destroyed at the end; every pointer passed is to a
    // live C string or array ending with a null pointer.
    unsafe {
        check(libc::posix_spawn_file_actions_init(fa.as_mut_ptr()))?;
        let r = (|| -> io::Result<libc::pid_t> {
            let fa = fa.as_mut_ptr();
            check(libc::posix_spawn_file_actions_addopen(
                fa,
                0,
                devnull.as_ptr(),
                libc::O_RDWR,
                0,
            ))?;
            check(libc::posix_spawn_file_actions_adddup2(fa, 0, 1))?;
            check(libc::posix_spawn_file_actions_adddup2(fa, 0, 2))?;
            for (h, (_, target)) in high.iter().zip(fds) {
                check(libc::posix_spawn_file_actions_adddup2(
                    fa,
                    h.as_raw_fd(),
                    *target,
                ))?;
            }
            check(posix_spawn_file_actions_addclosefrom_np(fa, top + 1))?;
            check(libc::posix_spawnattr_init(at.as_mut_ptr()))?;
            let at = at.as_mut_ptr();
            let mut empty = MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigemptyset(empty.as_mut_ptr());
            let mut all = MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigfillset(all.as_mut_ptr());
            check(libc::posix_spawnattr_setsigmask(at, empty.as_ptr()))?;
            check(libc::posix_spawnattr_setsigdefault(at, all.as_ptr()))?;
            // A process group of its own (pgid = its pid): the terminal's
            // signals (^C, ^Z) go to the foreground group, not to it. The
            // same session: the scheduler's autogroup (one per session)
            // shares the CPU between the program and its device process
            // as between the program's own threads; a session of its own
            // would put the device process in a group of its own, which a
            // loaded machine starves for hundreds of milliseconds (RC
            // retry timeouts) while the program spins.
            check(libc::posix_spawnattr_setpgroup(at, 0))?;
            check(libc::posix_spawnattr_setflags(
                at,
                libc::POSIX_SPAWN_SETPGROUP as libc::c_short
                    | libc::POSIX_SPAWN_SETSIGMASK as libc::c_short
                    | libc::POSIX_SPAWN_SETSIGDEF as libc::c_short,
            ))?;
            let mut pid: libc::pid_t = 0;
            check(libc::posix_spawn(
                &mut pid,
                path.as_ptr(),
                fa,
                at,
                argv.as_ptr(),
                envp.as_ptr(),
            ))?;
            Ok(pid)
        })();
        libc::posix_spawn_file_actions_destroy(fa.as_mut_ptr());
        libc::posix_spawnattr_destroy(at.as_mut_ptr());
        let pid = r?;
        drop(high);
        let mut status = 0;
        loop {
            let w = libc::waitpid(pid, &mut status, 0);
            if w == pid {
                break;
            }
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // ECHILD: the program reaped it (SIGCHLD handler or SIG_IGN).
            return Ok(0);
        }
        if libc::WIFEXITED(status) {
            Ok(libc::WEXITSTATUS(status))
        } else {
            Ok(128 + libc::WTERMSIG(status))
        }
    }
}

/// The daemon convention's other half, for the helper: forks; the parent
/// exits at once with status 0 (which [`spawn_detached`] returns) and the
/// child returns from this and goes on, adopted by init. Call it from a
/// process with one thread only (the helper's `main`, before any thread).
pub fn detach() -> io::Result<()> {
    // SAFETY: fork in a single-threaded process; the parent only calls
    // _exit, which is async-signal-safe.
    unsafe {
        match libc::fork() {
            -1 => Err(io::Error::last_os_error()),
            0 => Ok(()),
            _ => libc::_exit(0),
        }
    }
}

/// This process's effective user ID.
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and takes nothing.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn helper_gets_its_fds_and_no_others() {
        let (mut r, w) = std::os::unix::net::UnixStream::pair().unwrap();
        let (r2, _w2) = std::os::unix::net::UnixStream::pair().unwrap();
        // The helper: forks, the parent exits; the child writes what it
        // has open into fd 3 and whether LD_PRELOAD survived.
        let script = "ls /proc/self/fd >&3; echo \"preload=${LD_PRELOAD-unset}\" >&3";
        let st = spawn_detached(
            Path::new("/bin/sh"),
            &["-c".into(), format!("({script}) & exit 0").into()],
            // SAFETY: borrowed for the call.
            &[(std::os::fd::AsFd::as_fd(&w), 3)],
        )
        .unwrap();
        assert_eq!(st, 0);
        drop(w);
        drop(r2);
        let mut out = String::new();
        r.read_to_string(&mut out).unwrap();
        let fds: Vec<&str> = out.lines().filter(|l| l.parse::<u32>().is_ok()).collect();
        // 0, 1, 2, 3 and the descriptor `ls` reads /proc/self/fd with.
        assert!(fds.len() <= 5, "{out}");
        assert!(fds.contains(&"3"), "{out}");
    }
}
