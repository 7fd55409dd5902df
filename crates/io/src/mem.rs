//! The process's own memory, reached through the kernel so that a page
//! that is not mapped is an error and never a crash: what on-demand paging
//! regions, `ibv_advise_mr` and FLUSH need.
//!
//! An RDMA NIC with on-demand paging (ODP) translates the addresses of a
//! region when a request reaches them, and a page the program has unmapped
//! is then an access error for the peer, not a fault in the program. A
//! user-space device touching the memory directly would take a `SIGSEGV`
//! instead. [`read_own`] and [`write_own`] copy with `process_vm_readv` /
//! `process_vm_writev` on the process itself, which the kernel serves with
//! its own page-fault handling: an unmapped or (for writes) read-only page
//! ends the copy with `EFAULT` ([`MemFault`]). They are about a system call
//! each, so only ODP regions use them; pinned regions keep direct copies.
//!
//! [`populate`] (`MADV_POPULATE_READ` / `_WRITE`) faults pages in without
//! touching their bytes and reports a range that is not mapped, or not
//! writable, as an error: prefetch for `ibv_advise_mr`, and the check
//! before an atomic on ODP memory. [`msync`] writes a range of a file
//! mapping back to its file (FLUSH with persistence).

use std::io;
use std::sync::atomic::{AtomicU8, Ordering};

/// The range is not (wholly) mapped, or not accessible the way asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemFault;

impl std::fmt::Display for MemFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("memory not mapped or not accessible")
    }
}

impl std::error::Error for MemFault {}

/// `MADV_POPULATE_READ` (Linux 5.14), in case the libc crate lacks it.
const MADV_POPULATE_READ: libc::c_int = 22;
/// `MADV_POPULATE_WRITE` (Linux 5.14).
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// The page size (4096 when sysconf cannot tell).
pub fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the running system.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

/// `[addr, addr + len)` widened to whole pages, or `None` if it wraps.
fn page_span(addr: usize, len: usize) -> Option<(usize, usize)> {
    let page = page_size();
    let start = addr & !(page - 1);
    let end = addr.checked_add(len)?.checked_add(page - 1)? & !(page - 1);
    Some((start, end - start))
}

/// Splits a long copy into pieces the kernel takes in one call
/// (`process_vm_*` handle at most `isize::MAX` bytes; keep well below).
const MAX_CHUNK: usize = 1 << 30;

/// Copies `dst.len()` bytes at address `src` of this process into `dst`.
/// A byte of the range that is not mapped or not readable gives
/// `Err(MemFault)` (some bytes before it may have been copied); the
/// caller never faults.
///
/// # Safety
/// The bytes at `src` may change while they are copied (another thread,
/// a peer): the copy is the kernel's, never a Rust reference, so that is
/// defined; the caller must still only read memory it is entitled to
/// (a registered region of the program).
pub unsafe fn read_own(src: usize, dst: &mut [u8]) -> Result<(), MemFault> {
    let mut done = 0;
    while done < dst.len() {
        let n = (dst.len() - done).min(MAX_CHUNK);
        let local = libc::iovec {
            iov_base: dst[done..].as_mut_ptr().cast(),
            iov_len: n,
        };
        let remote = libc::iovec {
            iov_base: src.checked_add(done).ok_or(MemFault)? as *mut libc::c_void,
            iov_len: n,
        };
        // SAFETY: `local` describes `n` writable bytes of `dst`; `remote`
        // is only read, by the kernel, which checks every page and returns
        // EFAULT for one it cannot read. Our own pid is always allowed.
        let r = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        if r <= 0 {
            return Err(MemFault);
        }
        done += r as usize;
    }
    Ok(())
}

/// Copies `src` to address `dst` of this process. A byte of the range that
/// is not mapped or not writable gives `Err(MemFault)` (the bytes before it
/// may have been written, as a NIC's partial DMA); the caller never faults.
///
/// # Safety
/// The caller must be entitled to write `dst .. dst + src.len()` (a
/// registered region of the program that grants it): the kernel checks
/// the mapping, not the program's intentions.
pub unsafe fn write_own(dst: usize, src: &[u8]) -> Result<(), MemFault> {
    let mut done = 0;
    while done < src.len() {
        let n = (src.len() - done).min(MAX_CHUNK);
        let local = libc::iovec {
            iov_base: src[done..].as_ptr() as *mut libc::c_void,
            iov_len: n,
        };
        let remote = libc::iovec {
            iov_base: dst.checked_add(done).ok_or(MemFault)? as *mut libc::c_void,
            iov_len: n,
        };
        // SAFETY: `local` is only read (by the kernel); `remote` is written
        // by the kernel after checking each page's mapping and write
        // permission (EFAULT otherwise); the caller is entitled to the range.
        let r = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
        if r <= 0 {
            return Err(MemFault);
        }
        done += r as usize;
    }
    Ok(())
}

/// Faults in the pages of `[addr, addr + len)`, readable (or writable with
/// `write`), without reading or writing their bytes (`MADV_POPULATE_READ`
/// / `_WRITE`). `Err(MemFault)` when part of the range is not mapped, or
/// not readable / writable. On a kernel older than 5.14 (no such advice)
/// readability is checked by reading the first byte of each page through
/// the kernel instead, and writability cannot be checked.
pub fn populate(addr: usize, len: usize, write: bool) -> Result<(), MemFault> {
    if len == 0 {
        return Ok(());
    }
    let (start, span) = page_span(addr, len).ok_or(MemFault)?;
    if !populate_supported() {
        // No populate advice: read one byte per page through the kernel.
        let page = page_size();
        let mut p = start;
        let mut b = [0u8; 1];
        while p < start + span {
            let at = p.max(addr);
            // SAFETY: a one-byte read through the kernel (see read_own).
            unsafe { read_own(at, &mut b) }?;
            p += page;
        }
        return Ok(());
    }
    let advice = if write {
        MADV_POPULATE_WRITE
    } else {
        MADV_POPULATE_READ
    };
    // SAFETY: madvise with a populate advice does not change the mapping
    // or its contents; it faults pages in as an access would, and reports
    // an unmapped (ENOMEM), inaccessible (EINVAL, "incompatible
    // permissions") or failing (EFAULT) range as an error.
    let r = unsafe { libc::madvise(start as *mut libc::c_void, span, advice) };
    if r == 0 {
        Ok(())
    } else {
        Err(MemFault)
    }
}

/// Whether the kernel knows `MADV_POPULATE_READ` (Linux 5.14): asked once,
/// on a page of this thread's stack.
fn populate_supported() -> bool {
    static KNOWN: AtomicU8 = AtomicU8::new(0); // 0 unknown, 1 yes, 2 no
    match KNOWN.load(Ordering::Relaxed) {
        1 => return true,
        2 => return false,
        _ => {}
    }
    let probe = 0u8;
    let at = std::ptr::addr_of!(probe) as usize & !(page_size() - 1);
    // SAFETY: populating a page of our own stack, which is mapped and
    // readable; nothing changes.
    let r = unsafe { libc::madvise(at as *mut libc::c_void, page_size(), MADV_POPULATE_READ) };
    let yes = r == 0;
    KNOWN.store(if yes { 1 } else { 2 }, Ordering::Relaxed);
    yes
}

/// Writes the pages of `[addr, addr + len)` back to the file they map
/// (`msync(MS_SYNC)`), so the bytes are on storage when this returns. For
/// anonymous memory there is nothing to write and this succeeds; a range
/// that is not mapped is `Err`.
pub fn msync(addr: usize, len: usize) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    let (start, span) =
        page_span(addr, len).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: msync neither reads nor writes the bytes from user space; an
    // unmapped range is ENOMEM.
    let r = unsafe { libc::msync(start as *mut libc::c_void, span, libc::MS_SYNC) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use softrdma_testkit::mem::Mapping;

    /// One test, so that no other test of this module maps memory into
    /// the hole it makes.
    #[test]
    fn kernel_copies_and_populate() {
        copies_through_the_kernel_and_reports_holes();
        read_only_pages_refuse_writes_and_write_populate();
        msync_of_anonymous_memory_and_of_nothing();
    }

    fn copies_through_the_kernel_and_reports_holes() {
        let page = page_size();
        let m = Mapping::new(3);
        let data: Vec<u8> = (0..page + 100).map(|i| i as u8).collect();
        // SAFETY: our mapping.
        unsafe { write_own(m.addr() + 50, &data) }.unwrap();
        let mut back = vec![0u8; data.len()];
        // SAFETY: our mapping.
        unsafe { read_own(m.addr() + 50, &mut back) }.unwrap();
        assert_eq!(back, data);
        m.unmap_page(1);
        assert_eq!(populate(m.addr() + page, 1, false), Err(MemFault));
        let mut b = [0u8; 8];
        // SAFETY: our (partly unmapped) mapping: the point of the test.
        assert_eq!(
            unsafe { read_own(m.addr() + page + 8, &mut b) },
            Err(MemFault)
        );
        // SAFETY: as above.
        assert_eq!(unsafe { write_own(m.addr() + page - 4, &b) }, Err(MemFault));
        // A range across the hole fails; the pages around it still work.
        // SAFETY: as above.
        assert_eq!(
            unsafe { read_own(m.addr(), &mut vec![0; 3 * page]) },
            Err(MemFault)
        );
        // SAFETY: as above.
        unsafe { read_own(m.addr() + 2 * page, &mut b) }.unwrap();
        assert_eq!(populate(m.addr(), page, true), Ok(()));
        assert!(populate_supported(), "Linux 5.14 or later");
    }

    fn read_only_pages_refuse_writes_and_write_populate() {
        let m = Mapping::read_only(1);
        let mut b = [9u8; 4];
        // SAFETY: our mapping.
        unsafe { read_own(m.addr(), &mut b) }.unwrap();
        assert_eq!(b, [0; 4]);
        // SAFETY: our mapping.
        assert_eq!(unsafe { write_own(m.addr(), &b) }, Err(MemFault));
        assert_eq!(populate(m.addr(), 8, false), Ok(()));
        assert_eq!(populate(m.addr(), 8, true), Err(MemFault));
    }

    fn msync_of_anonymous_memory_and_of_nothing() {
        let m = Mapping::new(1);
        msync(m.addr() + 10, 20).unwrap();
        m.unmap_page(0);
        assert!(msync(m.addr(), 20).is_err());
    }
}
