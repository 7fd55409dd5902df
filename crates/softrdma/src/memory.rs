//! Memory that remote peers can reach, and the rules for touching it.
//!
//! A [`MemoryRegion`](crate::MemoryRegion) is either allocated by softrdma
//! (page-aligned, zeroed, freed when the last user — the handle or a work
//! request in flight — is gone) or registered from the program's own memory
//! (`unsafe`, see
//! [`ProtectionDomain::register_mr`](crate::ProtectionDomain::register_mr)).
//!
//! # The rules (all of them, for every layer)
//!
//! While a region is registered, the device's engine may read or write its
//! bytes at any time, exactly like an RDMA NIC's DMA engine: a remote WRITE
//! lands without the program's involvement, and the program may be reading
//! or writing the same bytes meanwhile (the flag idiom below, or a bug).
//! Bytes that another thread may access concurrently must never be reached
//! through a Rust reference (`&[u8]`/`&mut [u8]`): the compiler may assume
//! such bytes do not change and that it may read them again, and a data
//! race on them is undefined behaviour. So:
//!
//! 1. Region bytes are reached only through raw pointers, by the copies in
//!    this module: [`copy_out`] and [`copy_in`] move bytes with relaxed
//!    atomic accesses of ONE size, a byte ([`AtomicU8`]). Rust's memory
//!    model defines an atomic access racing with another atomic access of
//!    the same size, and mixed-size atomic *reads*, but not an atomic write
//!    racing with an atomic access of another size (rust-lang/rust#128778,
//!    "Memory model for atomic accesses" in `core::sync::atomic`). A WRITE
//!    landing while a READ response is copied out, two WRITEs on the same
//!    bytes, and the program polling a flag byte with
//!    [`MemoryRegion::load_u8`](crate::MemoryRegion::load_u8) all race, so
//!    every copy uses the byte size, whatever its alignment (a copy that
//!    used 8-byte words in the middle and bytes at the edges would race
//!    with another copy's byte at the same address). On x86-64 the bulk of
//!    a copy — 64-byte blocks, then 8-byte words — goes through a small
//!    assembly loop instead: the compiler cannot see into it (no reference,
//!    no assumption, nothing elided, merged or re-read: like a volatile
//!    copy), and each of its loads and stores is single-copy atomic for
//!    every aligned byte (Intel SDM vol. 3 §9.1.1), so its effect is that
//!    of the byte-wise relaxed atomic copy, only wider.
//!
//!    Remote atomics (and `IBV_WR_ATOMIC_WRITE`) use [`AtomicU64`] on the 8
//!    aligned bytes, as does the program through
//!    [`MemoryRegion::atomic_u64`](crate::MemoryRegion::atomic_u64): the
//!    same size as each other, so atomics racing atomics are defined. What
//!    is left is an 8-byte atomic racing a copy (a WRITE, READ or SEND, or
//!    the program's byte access) on the same bytes: the IBTA defines no
//!    result for it either (an atomic is atomic only with respect to other
//!    atomics, IBA 9.4.5 / o9-21), no correct RDMA program does it, and
//!    there is no single access size that could serve both 8-byte atomics
//!    and byte-granular WRITEs at any offset. It is the one mixed-size race
//!    softrdma can be made to perform, and only by a program that races
//!    its own atomics with data movement on the same word.
//! 2. [`copy_in`] stores the last byte last, with release ordering. The
//!    engine writes a message's packets in order, so a program that sees
//!    the last byte of a WRITE with an acquire load
//!    ([`MemoryRegion::load_u8`](crate::MemoryRegion::load_u8)) sees the
//!    whole WRITE (the "spin on the last byte" idiom of `ib_write_lat`).
//! 3. The I/O layer reads payload for zero-copy transmission by handing the
//!    kernel a raw address (an iovec); the ICRC over those bytes is computed
//!    from a copy made with [`copy_out`], never from a borrowed slice.
//! 4. A send buffer is read only until its work request completes: the
//!    core holds a send completion back until the engine has handed every
//!    datagram that reads the buffer to the kernel (or copied or dropped
//!    it) — `Device::handle_released` in the core.
//! 5. Nothing is touched after deregistration returns: the core revokes
//!    the region (every later access through a work request, a READ
//!    response or a landing WRITE fails instead) and the engine copies the
//!    payload of datagrams still queued for the socket out of it before
//!    `ibv_dereg_mr` / the handle's drop returns. The same holds for QP
//!    destruction and device close.
//!
//! The program synchronises with peers the RDMA way: through completions,
//! or by polling a flag byte with acquire ordering.
//!
//! # On-demand paging regions
//!
//! A region registered with `IBV_ACCESS_ON_DEMAND` ([`OdpRegion`]) is not
//! touched directly: its bytes are copied through the kernel
//! (`softrdma_io::mem::read_own` / `write_own`, `process_vm_readv` /
//! `process_vm_writev` on this process), so a page the program has
//! unmapped is an access error for the peer or the work request, never a
//! fault in the program — what an RDMA NIC with on-demand paging gives.
//! Atomics check the page is mapped and writable first
//! (`MADV_POPULATE_WRITE`) and then use the CPU's atomic instruction on
//! it: a program that unmaps the page in the instant between the two
//! still takes the fault (a NIC would not; no system call does a 64-bit
//! atomic through the kernel). Zero-copy transmission does not read ODP
//! memory (its address is not lent); payload is copied into the packet.
//! Implicit regions (address 0, length `SIZE_MAX`) are the whole address
//! space: offsets are addresses.

use softrdma_proto::{Fault, RegionMemory};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// Copies the bulk of `n` bytes from `src` to `dst` with assembly loops —
/// whole 64-byte blocks of 16-byte moves, then whole 8-byte words — and
/// returns the bytes copied (at most `n`, less than 8 short of it). See the
/// module rules (1) for why this is a sound way to touch region memory;
/// elsewhere than x86-64 it copies nothing (the callers' byte loops do).
///
/// # Safety
/// `src..src + n` valid for reads, `dst..dst + n` for writes, not
/// overlapping.
#[inline]
unsafe fn bulk_copy(dst: *mut u8, src: *const u8, n: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        let blocks = n / 64;
        let words = (n % 64) / 8;
        let (mut s, mut t) = (src, dst);
        if blocks > 0 {
            // SAFETY: per the contract; the loop reads and writes exactly
            // `blocks * 64` bytes at `src` and `dst`, and clobbers only the
            // registers named here.
            unsafe {
                std::arch::asm!(
                    "2:",
                    "movdqu {a}, xmmword ptr [{s}]",
                    "movdqu {b}, xmmword ptr [{s} + 16]",
                    "movdqu {c}, xmmword ptr [{s} + 32]",
                    "movdqu {d}, xmmword ptr [{s} + 48]",
                    "movdqu xmmword ptr [{t}], {a}",
                    "movdqu xmmword ptr [{t} + 16], {b}",
                    "movdqu xmmword ptr [{t} + 32], {c}",
                    "movdqu xmmword ptr [{t} + 48], {d}",
                    "add {s}, 64",
                    "add {t}, 64",
                    "dec {n}",
                    "jnz 2b",
                    s = inout(reg) s,
                    t = inout(reg) t,
                    n = inout(reg) blocks => _,
                    a = out(xmm_reg) _,
                    b = out(xmm_reg) _,
                    c = out(xmm_reg) _,
                    d = out(xmm_reg) _,
                    options(nostack, preserves_flags),
                );
            }
        }
        if words > 0 {
            // SAFETY: per the contract; the loop reads and writes exactly
            // `words * 8` bytes right after the blocks, and clobbers only
            // the registers named here.
            unsafe {
                std::arch::asm!(
                    "2:",
                    "mov {w}, qword ptr [{s}]",
                    "mov qword ptr [{t}], {w}",
                    "add {s}, 8",
                    "add {t}, 8",
                    "dec {n}",
                    "jnz 2b",
                    s = inout(reg) s => _,
                    t = inout(reg) t => _,
                    n = inout(reg) words => _,
                    w = out(reg) _,
                    options(nostack, preserves_flags),
                );
            }
        }
        blocks * 64 + words * 8
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (dst, src, n);
        0
    }
}

/// Copies `dst.len()` bytes of region memory at `src` into `dst` with
/// relaxed byte-sized atomic loads (the bulk through [`bulk_copy`]).
///
/// # Safety
/// `src..src + dst.len()` must be valid for reads (registered, in bounds,
/// or the program's memory it names in a work request) for the duration
/// of the call. Read-only memory is fine: relaxed atomic loads of a byte
/// and plain loads in assembly never write.
pub unsafe fn copy_out(src: *const u8, dst: &mut [u8]) {
    let len = dst.len();
    let mut i = 0;
    // SAFETY (both loops): in bounds per the contract; a byte is always
    // aligned.
    unsafe {
        while i < len && !(src as usize + i).is_multiple_of(8) {
            dst[i] = AtomicU8::from_ptr(src.add(i).cast_mut()).load(Ordering::Relaxed);
            i += 1;
        }
        i += bulk_copy(dst.as_mut_ptr().add(i), src.add(i), len - i);
        while i < len {
            dst[i] = AtomicU8::from_ptr(src.add(i).cast_mut()).load(Ordering::Relaxed);
            i += 1;
        }
    }
}

/// Copies `src` into region memory at `dst` with relaxed byte-sized atomic
/// stores (the bulk through [`bulk_copy`]); the last byte is stored last, with release
/// ordering (rule 2).
///
/// # Safety
/// `dst..dst + src.len()` must be valid for reads and writes (registered,
/// in bounds) for the duration of the call.
pub unsafe fn copy_in(dst: *mut u8, src: &[u8]) {
    let Some((&last, body)) = src.split_last() else {
        return;
    };
    let len = body.len();
    let mut i = 0;
    // SAFETY (all loops and the last store): in bounds per the contract;
    // each atomic is properly aligned.
    unsafe {
        while i < len && !(dst as usize + i).is_multiple_of(8) {
            AtomicU8::from_ptr(dst.add(i)).store(body[i], Ordering::Relaxed);
            i += 1;
        }
        i += bulk_copy(dst.add(i), body.as_ptr().add(i), len - i);
        while i < len {
            AtomicU8::from_ptr(dst.add(i)).store(body[i], Ordering::Relaxed);
            i += 1;
        }
        AtomicU8::from_ptr(dst.add(len)).store(last, Ordering::Release);
    }
}

/// A remote compare-and-swap: the old value, whether it swapped or not.
fn compare_swap(a: &AtomicU64, compare: u64, swap: u64) -> u64 {
    match a.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(v) | Err(v) => v,
    }
}

/// ATOMIC WRITE: one 8-byte store, so a reader sees all old or all new
/// bytes.
fn atomic_write(a: &AtomicU64, bytes: [u8; 8]) {
    a.store(u64::from_ne_bytes(bytes), Ordering::Release);
}

/// Page alignment of allocated regions.
pub const PAGE: usize = 4096;

/// Bytes at a fixed address: either owned (allocated here) or borrowed from
/// the program under the `register_mr` contract.
pub(crate) struct RawRegion {
    ptr: NonNull<u8>,
    len: usize,
    owned: bool,
}

// SAFETY: the region is plain bytes; every access goes through raw pointers
// (copies or atomics) and the registration contract guarantees the memory
// stays valid while the region is alive.
unsafe impl Send for RawRegion {}
// SAFETY: as above; concurrent accesses are byte copies or atomics, the same
// model as DMA by a NIC.
unsafe impl Sync for RawRegion {}

impl RawRegion {
    /// `len` zeroed bytes, page-aligned.
    pub fn allocate(len: usize) -> Option<RawRegion> {
        let layout = Layout::from_size_align(len.max(1), PAGE).ok()?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { alloc_zeroed(layout) };
        Some(RawRegion {
            ptr: NonNull::new(p)?,
            len,
            owned: true,
        })
    }

    /// Wraps the program's memory.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes for as long as the
    /// returned value (and every clone of its `Arc`) lives.
    pub unsafe fn borrowed(ptr: NonNull<u8>, len: usize) -> RawRegion {
        RawRegion {
            ptr,
            len,
            owned: false,
        }
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    fn check(&self, offset: usize, len: usize) {
        assert!(
            offset.checked_add(len).is_some_and(|e| e <= self.len),
            "region access out of bounds"
        );
    }

    fn atomic(&self, offset: usize) -> &AtomicU64 {
        self.check(offset, 8);
        let p = self.ptr.as_ptr().wrapping_add(offset);
        assert!(
            (p as usize).is_multiple_of(8),
            "atomic access must be 8-byte aligned"
        );
        // SAFETY: in bounds, aligned, valid for the region's lifetime; the
        // concurrent accesses of these bytes by softrdma are atomics too
        // (this size for atomics, bytes for copies: module rule 1).
        unsafe { AtomicU64::from_ptr(p as *mut u64) }
    }
}

impl Drop for RawRegion {
    fn drop(&mut self) {
        if self.owned {
            let layout =
                Layout::from_size_align(self.len.max(1), PAGE).expect("valid at allocation");
            // SAFETY: allocated in `allocate` with this layout.
            unsafe { dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

impl RegionMemory for RawRegion {
    fn len(&self) -> usize {
        self.len
    }
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), Fault> {
        self.check(offset, dst.len());
        // SAFETY: in bounds (checked); valid while the region lives.
        unsafe { copy_out(self.ptr.as_ptr().add(offset), dst) };
        Ok(())
    }
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), Fault> {
        self.check(offset, src.len());
        // SAFETY: in bounds (checked); valid while the region lives.
        unsafe { copy_in(self.ptr.as_ptr().add(offset), src) };
        Ok(())
    }
    fn fetch_add(&self, offset: usize, add: u64) -> Result<u64, Fault> {
        Ok(self.atomic(offset).fetch_add(add, Ordering::SeqCst))
    }
    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> Result<u64, Fault> {
        Ok(compare_swap(self.atomic(offset), compare, swap))
    }
    fn atomic_write(&self, offset: usize, bytes: [u8; 8]) -> Result<(), Fault> {
        atomic_write(self.atomic(offset), bytes);
        Ok(())
    }
    fn flush(&self, offset: usize, len: usize, persistent: bool) -> Result<(), Fault> {
        self.check(offset, len);
        std::sync::atomic::fence(Ordering::SeqCst);
        if persistent && len > 0 {
            // A file mapping's pages go to the file; anonymous memory has
            // no storage behind it and msync has nothing to do.
            softrdma_io::mem::msync(self.ptr.as_ptr() as usize + offset, len).map_err(|_| Fault)?;
        }
        Ok(())
    }
    fn address(&self) -> Option<NonNull<u8>> {
        Some(self.ptr)
    }
}

/// The program's memory registered with on-demand paging: reached through
/// the kernel, so that memory the program has unmapped is an error for the
/// access and never a fault (see the module docs). `base` is the address of
/// byte 0 (0 for an implicit region, whose length is the address space).
pub(crate) struct OdpRegion {
    base: usize,
    len: usize,
}

impl OdpRegion {
    /// The program's range `base .. base + len` (`len` may be `usize::MAX`
    /// with `base` 0: the whole address space).
    pub fn new(base: usize, len: usize) -> OdpRegion {
        OdpRegion { base, len }
    }

    fn at(&self, offset: usize) -> usize {
        self.base.wrapping_add(offset)
    }

    /// Checks that the 8 bytes at `offset` are mapped and writable (and
    /// faults their page in), then gives the atomic over them.
    fn atomic(&self, offset: usize) -> Result<&AtomicU64, Fault> {
        let p = self.at(offset);
        if !p.is_multiple_of(8) {
            return Err(Fault);
        }
        softrdma_io::mem::populate(p, 8, true).map_err(|_| Fault)?;
        // SAFETY: aligned, and mapped writable a moment ago (a program that
        // unmaps it right now takes the fault: see the module docs); all
        // concurrent accesses of these bytes by softrdma are atomics or
        // kernel copies.
        Ok(unsafe { AtomicU64::from_ptr(p as *mut u64) })
    }
}

impl RegionMemory for OdpRegion {
    fn len(&self) -> usize {
        self.len
    }
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), Fault> {
        // SAFETY: the registered range (offsets are checked by the core);
        // the kernel copies, faults become errors.
        unsafe { softrdma_io::mem::read_own(self.at(offset), dst) }.map_err(|_| Fault)
    }
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), Fault> {
        // SAFETY: the registered range, which the program let the device
        // write; the kernel copies, faults become errors.
        unsafe { softrdma_io::mem::write_own(self.at(offset), src) }.map_err(|_| Fault)
    }
    fn fetch_add(&self, offset: usize, add: u64) -> Result<u64, Fault> {
        Ok(self.atomic(offset)?.fetch_add(add, Ordering::SeqCst))
    }
    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> Result<u64, Fault> {
        Ok(compare_swap(self.atomic(offset)?, compare, swap))
    }
    fn atomic_write(&self, offset: usize, bytes: [u8; 8]) -> Result<(), Fault> {
        atomic_write(self.atomic(offset)?, bytes);
        Ok(())
    }
    fn flush(&self, offset: usize, len: usize, persistent: bool) -> Result<(), Fault> {
        std::sync::atomic::fence(Ordering::SeqCst);
        if len == 0 {
            return Ok(());
        }
        // The range must be there (a flush of unmapped memory is a remote
        // access error, as any access of it).
        softrdma_io::mem::populate(self.at(offset), len, false).map_err(|_| Fault)?;
        if persistent {
            softrdma_io::mem::msync(self.at(offset), len).map_err(|_| Fault)?;
        }
        Ok(())
    }
    fn prefetch(&self, offset: usize, len: usize, write: bool) -> Result<(), Fault> {
        softrdma_io::mem::populate(self.at(offset), len, write).map_err(|_| Fault)
    }
    // No `address`: the I/O layer must not read memory that may be gone.
}

/// The program reads region bytes (after an acquire fence: what it
/// synchronised with before is visible).
pub(crate) fn program_read(r: &RawRegion, offset: usize, dst: &mut [u8]) {
    r.check(offset, dst.len());
    std::sync::atomic::fence(Ordering::Acquire);
    // SAFETY: in bounds (checked above); valid while the region lives.
    unsafe { copy_out(r.ptr.as_ptr().add(offset), dst) }
}

/// The program writes region bytes.
pub(crate) fn program_write(r: &RawRegion, offset: usize, src: &[u8]) {
    r.check(offset, src.len());
    // SAFETY: in bounds (checked above); valid while the region lives.
    unsafe { copy_in(r.ptr.as_ptr().add(offset), src) }
}

pub(crate) fn load_u8(r: &RawRegion, offset: usize) -> u8 {
    r.check(offset, 1);
    // SAFETY: in bounds; a byte is always aligned.
    let a = unsafe { AtomicU8::from_ptr(r.ptr.as_ptr().add(offset)) };
    a.load(Ordering::Acquire)
}

pub(crate) fn atomic_u64(r: &RawRegion, offset: usize) -> &AtomicU64 {
    r.atomic(offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every alignment and length the copies split differently (head
    /// bytes, 64-byte blocks, 8-byte words, tail bytes) moves exactly its
    /// bytes and nothing around them.
    #[test]
    fn copies_move_exact_bytes_at_every_alignment() {
        let r = RawRegion::allocate(512).unwrap();
        for off in 0..9 {
            for len in [0usize, 1, 7, 8, 9, 63, 64, 65, 71, 72, 130, 200] {
                let pattern: Vec<u8> = (0..len).map(|i| (i * 7 + off + 1) as u8).collect();
                r.write(0, &[0xee; 512]).unwrap();
                r.write(off, &pattern).unwrap();
                let mut all = [0u8; 512];
                r.read(0, &mut all).unwrap();
                assert!(all[..off].iter().all(|&b| b == 0xee), "before {off}/{len}");
                assert_eq!(&all[off..off + len], &pattern[..], "at {off}/{len}");
                assert!(
                    all[off + len..].iter().all(|&b| b == 0xee),
                    "after {off}/{len}"
                );
                let mut back = vec![0u8; len];
                r.read(off, &mut back).unwrap();
                assert_eq!(back, pattern);
            }
        }
    }

    #[test]
    fn allocated_region_round_trips() {
        let r = RawRegion::allocate(10_000).unwrap();
        assert_eq!(r.as_ptr() as usize % PAGE, 0);
        r.write(100, b"hello").unwrap();
        let mut b = [0u8; 5];
        program_read(&r, 100, &mut b);
        assert_eq!(&b, b"hello");
        assert_eq!(load_u8(&r, 104), b'o');
        r.fetch_add(8, 5).unwrap();
        assert_eq!(r.compare_swap(8, 5, 9), Ok(5));
        assert_eq!(atomic_u64(&r, 8).load(Ordering::SeqCst), 9);
        let mut z = [1u8; 3];
        r.read(9997, &mut z).unwrap();
        assert_eq!(z, [0, 0, 0]);
    }

    #[test]
    fn copies_move_every_byte_at_every_alignment() {
        let r = RawRegion::allocate(512).unwrap();
        for off in 0..17 {
            for len in (0..40).chain([63, 64, 65, 127, 128, 129, 200, 300]) {
                let src: Vec<u8> = (0..len).map(|i| (i * 7 + off + 1) as u8).collect();
                r.write(off, &src).unwrap();
                let mut back = vec![0u8; len];
                r.read(off, &mut back).unwrap();
                assert_eq!(back, src, "offset {off} length {len}");
            }
        }
        // Bytes around a write stay as they were.
        let r = RawRegion::allocate(64).unwrap();
        r.write(0, &[0xee; 64]).unwrap();
        r.write(3, &[1; 11]).unwrap();
        let mut all = [0u8; 64];
        r.read(0, &mut all).unwrap();
        assert_eq!(&all[..3], &[0xee; 3]);
        assert_eq!(&all[3..14], &[1; 11]);
        assert_eq!(&all[14..], &[0xee; 50]);
    }

    #[test]
    fn odp_region_faults_instead_of_crashing() {
        let page = softrdma_io::mem::page_size();
        let a = RawRegion::allocate(3 * page).unwrap();
        let base = a.as_ptr() as usize;
        let odp = OdpRegion::new(base, 3 * page);
        odp.write(10, b"odp").unwrap();
        let mut b = [0u8; 3];
        odp.read(10, &mut b).unwrap();
        assert_eq!(&b, b"odp");
        assert_eq!(odp.fetch_add(16, 2), Ok(0));
        assert_eq!(odp.compare_swap(16, 2, 7), Ok(2));
        odp.atomic_write(24, [1; 8]).unwrap();
        odp.flush(0, 3 * page, true).unwrap();
        odp.prefetch(0, 3 * page, true).unwrap();
        // An implicit region: offsets are addresses.
        let all = OdpRegion::new(0, usize::MAX);
        all.read(base + 10, &mut b).unwrap();
        assert_eq!(&b, b"odp");
        // Unmapped memory: errors, no crash.
        let hole = softrdma_testkit::mem::hole();
        let gone = OdpRegion::new(hole, page);
        assert_eq!(gone.read(0, &mut b), Err(Fault));
        assert_eq!(gone.write(0, &b), Err(Fault));
        assert_eq!(gone.fetch_add(8, 1), Err(Fault));
        assert_eq!(gone.atomic_write(8, [0; 8]), Err(Fault));
        assert_eq!(gone.flush(0, 8, false), Err(Fault));
        assert_eq!(gone.prefetch(0, 8, false), Err(Fault));
        assert!(gone.address().is_none());
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn out_of_bounds_panics_instead_of_touching_memory() {
        let r = RawRegion::allocate(16).unwrap();
        let _ = r.write(10, &[0; 7]);
    }
}
