//! Memory that remote peers can reach.
//!
//! A [`MemoryRegion`] is either allocated by softrdma (page-aligned, zeroed,
//! freed when the last user — the handle or a work request in flight — is
//! gone) or registered from the program's own memory (`unsafe`, see
//! [`ProtectionDomain::register_mr`](crate::ProtectionDomain::register_mr)).
//!
//! # Rules for the program
//!
//! While a region is registered, the device's engine thread may read or
//! write its bytes at any time, exactly like an RDMA NIC's DMA engine: a
//! remote WRITE lands without the program's involvement. The program
//! therefore never holds a Rust reference (`&[u8]` / `&mut [u8]`) into a
//! region that a peer may write; it uses the accessors here, which go through
//! raw pointers with volatile or atomic accesses, and it synchronises with
//! peers the RDMA way: through completions, or by polling a flag byte with
//! [`MemoryRegion::load_u8`] (acquire). The engine writes payload bytes in
//! order, so the last byte of a WRITE landing means the whole WRITE landed
//! (the "spin on the last byte" idiom of `ib_write_lat`).

use softrdma_proto::RegionMemory;
use softrdma_wire::Icrc;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

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
        // SAFETY: in bounds, aligned, valid for the region's lifetime; all
        // concurrent accesses of these bytes by softrdma are atomics too.
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
    fn read(&self, offset: usize, dst: &mut [u8]) {
        self.check(offset, dst.len());
        // SAFETY: in bounds (checked); `dst` is a distinct Rust buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                dst.as_mut_ptr(),
                dst.len(),
            )
        }
    }
    fn write(&self, offset: usize, src: &[u8]) {
        self.check(offset, src.len());
        // SAFETY: in bounds (checked); `src` is a distinct Rust buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(offset), src.len())
        }
        // Publish the bytes before anyone sees a later flag byte.
        std::sync::atomic::fence(Ordering::Release);
    }
    fn fetch_add(&self, offset: usize, add: u64) -> u64 {
        self.atomic(offset).fetch_add(add, Ordering::SeqCst)
    }
    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> u64 {
        match self.atomic(offset).compare_exchange(
            compare,
            swap,
            Ordering::SeqCst,
            Ordering::SeqCst,
        ) {
            Ok(v) | Err(v) => v,
        }
    }
    fn as_slice(&self, offset: usize, len: usize) -> Option<&[u8]> {
        self.check(offset, len);
        // SAFETY: in bounds; valid for as long as `self` (the registration
        // contract). The bytes may be changed concurrently by the program,
        // exactly as a NIC's DMA may read memory the program is writing.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(offset), len) })
    }
    fn icrc_update(&self, offset: usize, len: usize, icrc: &mut Icrc) {
        self.check(offset, len);
        // SAFETY: in bounds; the slice lives only for this call. Bytes a
        // peer writes concurrently would make the ICRC (and the data) wrong,
        // which the receiver detects — the same as a NIC reading memory the
        // program is changing.
        let s = unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(offset), len) };
        icrc.update(s);
    }
}

/// Accessors shared by every region handle.
pub(crate) fn volatile_read(r: &RawRegion, offset: usize, dst: &mut [u8]) {
    r.check(offset, dst.len());
    std::sync::atomic::fence(Ordering::Acquire);
    let base = r.ptr.as_ptr().wrapping_add(offset);
    for (i, d) in dst.iter_mut().enumerate() {
        // SAFETY: in bounds (checked above).
        *d = unsafe { std::ptr::read_volatile(base.add(i)) };
    }
}

pub(crate) fn volatile_write(r: &RawRegion, offset: usize, src: &[u8]) {
    r.check(offset, src.len());
    let base = r.ptr.as_ptr().wrapping_add(offset);
    for (i, s) in src.iter().enumerate() {
        // SAFETY: in bounds (checked above).
        unsafe { std::ptr::write_volatile(base.add(i), *s) };
    }
    std::sync::atomic::fence(Ordering::Release);
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

    #[test]
    fn allocated_region_round_trips() {
        let r = RawRegion::allocate(10_000).unwrap();
        assert_eq!(r.as_ptr() as usize % PAGE, 0);
        r.write(100, b"hello");
        let mut b = [0u8; 5];
        volatile_read(&r, 100, &mut b);
        assert_eq!(&b, b"hello");
        assert_eq!(load_u8(&r, 104), b'o');
        r.fetch_add(8, 5);
        assert_eq!(r.compare_swap(8, 5, 9), 5);
        assert_eq!(atomic_u64(&r, 8).load(Ordering::SeqCst), 9);
        let mut z = [1u8; 3];
        r.read(9997, &mut z);
        assert_eq!(z, [0, 0, 0]);
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn out_of_bounds_panics_instead_of_touching_memory() {
        let r = RawRegion::allocate(16).unwrap();
        r.write(10, &[0; 7]);
    }
}
