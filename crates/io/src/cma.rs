//! Cross Memory Attach: one kernel copy from another process's memory
//! into ours (`process_vm_readv`), the building block for moving a
//! same-host peer's payload without a shared-memory hop (issue 19).
//!
//! The kernel allows it when this process may ptrace the peer
//! (`PTRACE_MODE_ATTACH_REALCREDS`, mm/process_vm_access.c): the same
//! user, the peer not made undumpable, and — where the Yama security
//! module is on — its `ptrace_scope` (`/proc/sys/kernel/yama/ptrace_scope`):
//! 0 allows it, 1 only from an ancestor or from a process the peer named
//! with `prctl(PR_SET_PTRACER, …)` ([`allow_readers`]), 2 only with
//! `CAP_SYS_PTRACE`, 3 never. So whether it works between two given
//! processes is found by trying ([`probe`]), as UCX's cma transport does
//! (it tries `process_vm_readv` and reads the scope). A bad address never
//! faults this process: the kernel ends the copy with `EFAULT`, and a peer
//! that exited is `ESRCH` ([`CmaError`]).
//!
//! Granting it gives the peer ptrace-like reading rights over this
//! process: a caller grants it only to processes of this user that it
//! already trusts (the same-host path's rings are paired by the device
//! process after `SO_PEERCRED`).

use std::io;

/// Why a copy from a peer did not complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmaError {
    /// The peer no longer exists (`ESRCH`).
    Gone,
    /// Part of the range is not mapped or not readable in the peer, or
    /// not writable here (`EFAULT`, or a short copy).
    Fault,
    /// The kernel does not let this process read the peer (`EPERM`: another
    /// user, Yama's `ptrace_scope`, an undumpable peer).
    Denied,
    /// The kernel lacks the call (`ENOSYS`) or refused the arguments.
    Unsupported(i32),
}

impl std::fmt::Display for CmaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CmaError::Gone => f.write_str("the peer process is gone"),
            CmaError::Fault => f.write_str("memory not mapped or not accessible"),
            CmaError::Denied => f.write_str("not allowed to read the peer's memory (ptrace rules)"),
            CmaError::Unsupported(e) => {
                write!(f, "process_vm_readv: {}", io::Error::from_raw_os_error(*e))
            }
        }
    }
}

impl std::error::Error for CmaError {}

/// At most this many pieces per side in one call (the kernel's `UIO_MAXIOV`).
pub const MAX_PIECES: usize = 1024;

/// A piece of memory: an address and a length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// The first byte's address.
    pub addr: usize,
    /// How many bytes.
    pub len: usize,
}

fn iov(s: &Span) -> libc::iovec {
    libc::iovec {
        iov_base: s.addr as *mut libc::c_void,
        iov_len: s.len,
    }
}

/// Copies the bytes of `remote` (addresses in process `pid`, in order)
/// into `local` (addresses in this process, in order) with one
/// `process_vm_readv` per [`MAX_PIECES`] pieces; the two lists describe
/// the same number of bytes. `Ok` when every byte was copied; otherwise
/// some prefix may have been (a partial copy is [`CmaError::Fault`]).
///
/// # Safety
/// Every `local` span must be memory this process may write (a registered
/// region that grants the write, a buffer of its own) and that no Rust
/// reference covers while the kernel writes it; the copy is the kernel's,
/// so bytes that another thread touches meanwhile are not a data race in
/// Rust's sense. `remote` is only read, by the kernel, which checks it.
pub unsafe fn read_from(pid: i32, local: &[Span], remote: &[Span]) -> Result<(), CmaError> {
    let want: usize = local.iter().map(|s| s.len).sum();
    let have: usize = remote.iter().map(|s| s.len).sum();
    if want != have {
        return Err(CmaError::Unsupported(libc::EINVAL));
    }
    if want == 0 {
        return Ok(());
    }
    // The two lists cut the bytes differently: merge them into pieces
    // whose local and remote sides have one length (two-pointer walk),
    // MAX_PIECES of them per call.
    let (mut li, mut loff, mut ri, mut roff) = (0, 0, 0, 0);
    let mut l: Vec<libc::iovec> = Vec::with_capacity(MAX_PIECES.min(local.len() + remote.len()));
    let mut r: Vec<libc::iovec> = Vec::with_capacity(l.capacity());
    let mut batch = 0;
    while li < local.len() && ri < remote.len() {
        let n = (local[li].len - loff).min(remote[ri].len - roff);
        if n > 0 {
            l.push(iov(&Span {
                addr: local[li].addr + loff,
                len: n,
            }));
            r.push(iov(&Span {
                addr: remote[ri].addr + roff,
                len: n,
            }));
            batch += n;
        }
        loff += n;
        roff += n;
        if loff == local[li].len {
            li += 1;
            loff = 0;
        }
        if roff == remote[ri].len {
            ri += 1;
            roff = 0;
        }
        if l.len() == MAX_PIECES || li == local.len() || ri == remote.len() {
            // SAFETY: see `call`.
            unsafe { call(pid, &l, &r, batch) }?;
            l.clear();
            r.clear();
            batch = 0;
        }
    }
    Ok(())
}

/// One `process_vm_readv` of `bytes` bytes.
///
/// # Safety
/// `l` describes memory the caller lets the kernel write ([`read_from`]'s
/// contract); `r` is only read by the kernel, which checks each page of
/// the peer and returns EFAULT for one it cannot read.
unsafe fn call(
    pid: i32,
    l: &[libc::iovec],
    r: &[libc::iovec],
    bytes: usize,
) -> Result<(), CmaError> {
    if bytes == 0 {
        return Ok(());
    }
    // SAFETY: per the contract; both vectors live across the call and hold
    // at most UIO_MAXIOV entries.
    let n = unsafe {
        libc::process_vm_readv(
            pid,
            l.as_ptr(),
            l.len() as libc::c_ulong,
            r.as_ptr(),
            r.len() as libc::c_ulong,
            0,
        )
    };
    if n < 0 {
        return Err(errno_error(io::Error::last_os_error()));
    }
    if (n as usize) < bytes {
        // A page of the peer (or ours) ended the copy.
        return Err(CmaError::Fault);
    }
    Ok(())
}

/// Copies `dst.len()` bytes at `addr` of process `pid` into `dst`.
pub fn read_into(pid: i32, addr: usize, dst: &mut [u8]) -> Result<(), CmaError> {
    let local = Span {
        addr: dst.as_mut_ptr() as usize,
        len: dst.len(),
    };
    // SAFETY: `dst` is ours, borrowed mutably for the call.
    unsafe {
        read_from(
            pid,
            &[local],
            &[Span {
                addr,
                len: dst.len(),
            }],
        )
    }
}

fn errno_error(e: io::Error) -> CmaError {
    match e.raw_os_error() {
        Some(libc::ESRCH) => CmaError::Gone,
        Some(libc::EFAULT) => CmaError::Fault,
        Some(libc::EPERM) | Some(libc::EACCES) => CmaError::Denied,
        Some(x) => CmaError::Unsupported(x),
        None => CmaError::Unsupported(0),
    }
}

/// Whether this process may read `pid`'s memory: reads the `expect.len()`
/// bytes at `addr` there (a word the peer published for the purpose) and
/// compares them. A zero-length read proves nothing (the kernel returns
/// before it checks permission), hence the word.
pub fn probe(pid: i32, addr: usize, expect: &[u8]) -> Result<(), CmaError> {
    let mut got = vec![0u8; expect.len()];
    read_into(pid, addr, &mut got)?;
    if got == expect {
        Ok(())
    } else {
        Err(CmaError::Fault)
    }
}

/// Yama's `ptrace_scope` (0–3), or `None` where Yama is not on (the
/// classic rules: the same user suffices).
pub fn yama_scope() -> Option<u8> {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// Lets other processes of this user read this process's memory where
/// Yama's scope 1 would refuse them (`prctl(PR_SET_PTRACER,
/// PR_SET_PTRACER_ANY)`, what UCX's cma transport does); nothing to do
/// without Yama or at scope 0. Returns whether readers are now allowed as
/// far as Yama goes (scope 2 and 3 cannot be lifted by the process).
pub fn allow_readers() -> bool {
    match yama_scope() {
        None | Some(0) => true,
        Some(1) => {
            // SAFETY: prctl with PR_SET_PTRACER changes only Yama's
            // exception for this process; no memory is passed.
            let r = unsafe {
                libc::prctl(
                    libc::PR_SET_PTRACER,
                    libc::PR_SET_PTRACER_ANY as libc::c_ulong,
                    0,
                    0,
                    0,
                )
            };
            r == 0
        }
        Some(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A forked child that sits until told to go (its pipe closes), so
    /// that its memory can be read. Only async-signal-safe calls after the
    /// fork (read, _exit).
    struct Child {
        pid: i32,
        wr: i32,
    }
    impl Child {
        fn fork() -> Child {
            let mut fds = [0; 2];
            // SAFETY: a fresh pipe.
            assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
            // SAFETY: the child only reads its pipe and exits.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0);
            if pid == 0 {
                let mut b = 0u8;
                // SAFETY: async-signal-safe calls only.
                unsafe {
                    libc::close(fds[1]);
                    libc::read(fds[0], std::ptr::addr_of_mut!(b).cast(), 1);
                    libc::_exit(0);
                }
            }
            // SAFETY: our end of the pipe.
            unsafe { libc::close(fds[0]) };
            Child { pid, wr: fds[1] }
        }
        /// Ends the child and reaps it: its pid is then gone.
        fn end(&mut self) {
            if self.wr >= 0 {
                // SAFETY: our pipe end; the child exits on EOF.
                unsafe { libc::close(self.wr) };
                self.wr = -1;
                let mut st = 0;
                // SAFETY: our child.
                unsafe { libc::waitpid(self.pid, &mut st, 0) };
            }
        }
    }
    impl Drop for Child {
        fn drop(&mut self) {
            self.end();
        }
    }

    /// One test: it forks, and the holes it makes must not be filled by a
    /// parallel test's mappings.
    #[test]
    fn reads_a_peer_and_reports_faults_and_gone_peers() {
        let page = crate::mem::page_size();
        // Before the fork: a pattern the child keeps, and a hole.
        let mut buf: Vec<u8> = (0..3 * page + 123).map(|i| (i * 7) as u8).collect();
        let before = buf.clone();
        // An address unmapped before the fork, so a hole in the child too.
        let hole = softrdma_testkit::mem::hole();
        let mut child = Child::fork();
        // Ours changes; the child's copy does not: what we read is its.
        buf.iter_mut().for_each(|b| *b = !*b);
        let mut got = vec![0u8; buf.len()];
        read_into(child.pid, buf.as_ptr() as usize, &mut got).unwrap();
        assert_eq!(got, before);
        assert_eq!(
            probe(child.pid, buf.as_ptr() as usize + 5, &before[5..21]),
            Ok(())
        );
        assert_eq!(
            probe(child.pid, buf.as_ptr() as usize, &buf[..16]),
            Err(CmaError::Fault)
        );

        // Pieces cut differently on both sides, more than one call's worth.
        let n = MAX_PIECES + 300;
        let mut dst = vec![0u8; n * 2];
        let local: Vec<Span> = (0..n)
            .map(|i| Span {
                addr: dst.as_mut_ptr() as usize + 2 * i,
                len: 2,
            })
            .collect();
        let remote: Vec<Span> = (0..2 * n / 4)
            .map(|i| Span {
                addr: buf.as_ptr() as usize + 4 * i,
                len: 4,
            })
            .collect();
        // SAFETY: `local` is `dst`, ours and not otherwise borrowed.
        unsafe { read_from(child.pid, &local, &remote) }.unwrap();
        assert_eq!(dst, before[..2 * n]);
        // Unequal lengths are refused before any copy.
        // SAFETY: as above.
        let r = unsafe { read_from(child.pid, &local[..1], &remote[..1]) };
        assert_eq!(r, Err(CmaError::Unsupported(libc::EINVAL)));

        // A hole in the peer: EFAULT, and nothing here faults; a range
        // that starts mapped and runs into the hole is a fault too.
        let mut b = [0u8; 16];
        assert_eq!(read_into(child.pid, hole, &mut b), Err(CmaError::Fault));
        assert_eq!(
            read_into(child.pid, hole + page - 8, &mut b),
            Err(CmaError::Fault)
        );
        // A hole on our side (the kernel writes nothing there either).
        let here = [Span {
            addr: hole,
            len: 16,
        }];
        let there = [Span {
            addr: buf.as_ptr() as usize,
            len: 16,
        }];
        // SAFETY: the local span is unmapped: the kernel refuses it.
        assert_eq!(
            unsafe { read_from(child.pid, &here, &there) },
            Err(CmaError::Fault)
        );

        // The peer gone (exited and reaped): ESRCH.
        let pid = child.pid;
        child.end();
        assert_eq!(
            read_into(pid, buf.as_ptr() as usize, &mut b),
            Err(CmaError::Gone)
        );
    }

    #[test]
    fn readers_are_allowed_where_yama_lets_the_process_decide() {
        match yama_scope() {
            None | Some(0) | Some(1) => assert!(allow_readers()),
            Some(_) => assert!(!allow_readers()),
        }
        // Reading ourselves is always allowed.
        let x = [1u8, 2, 3, 4];
        // SAFETY: getpid is always safe.
        let me = unsafe { libc::getpid() };
        assert_eq!(probe(me, x.as_ptr() as usize, &x), Ok(()));
    }
}
