//! Shared memory between processes, and the single-producer /
//! single-consumer ring of records that the same-host path and the device
//! process use to hand datagrams to a process.
//!
//! [`Shm`] is a `memfd` mapped `MAP_SHARED`: the creator passes its
//! descriptor to the other process (`SCM_RIGHTS`), which maps the same
//! pages. Bytes are reached through raw pointers only (never a Rust
//! reference into memory another process writes); the few shared words
//! are atomics.
//!
//! A [`Ring`] is one direction between two processes: a 4 KiB header
//! (magic, capacity, the producer's `tail` and the consumer's `head`
//! counters on cache lines of their own, the consumer's "asleep" flag,
//! the producer's count of records refused because the ring was full)
//! and a power-of-two data area. Records are a `u32` length and a `u32`
//! tag followed by the bytes, padded to 8; a record never wraps (a
//! padding record fills the end of the area instead). The producer writes
//! a record, then publishes `tail` (release); the consumer reads `tail`
//! (acquire), copies records out, then publishes `head` (release), which
//! frees the space. A full ring refuses the record — the caller treats it
//! as loss, which the RDMA transport recovers from as from any loss.
//!
//! Sleeping: a consumer about to sleep sets `asleep` and looks once more
//! (both sequentially consistent, as is the producer's publish and check),
//! so of a producer publishing and a consumer going to sleep at least one
//! sees the other; a producer that finds `asleep` set clears it and
//! writes the consumer's eventfd (once per sleep).
//!
//! Two more shared words, outside the record stream so that a full ring
//! never loses them: a "raised" flag the producer sets to ask for the
//! consumer's attention (the device process's "rings were offered to
//! you", which must not be a record a full ring would refuse) and the
//! "closed" bits each end sets when it is done with the ring (an orderly
//! close; a process that dies sets nothing, which is what pidfds are for).
//!
//! The consumer never trusts the producer's bytes: every length is checked
//! against the area, and a malformed ring reads as empty from then on.

use crate::send::IoPiece;
use crate::sys::cvt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A `memfd` mapped shared.
#[derive(Debug)]
pub struct Shm {
    ptr: NonNull<u8>,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is plain memory reached only through raw pointers
// and atomics; moving or sharing the handle between threads is fine.
unsafe impl Send for Shm {}
// SAFETY: as above (every access is a copy or an atomic).
unsafe impl Sync for Shm {}

impl Shm {
    /// A new zero-filled `memfd` of `len` bytes (`name` shows in
    /// `/proc/PID/fd` and `/proc/PID/maps`), mapped.
    pub fn create(name: &str, len: usize) -> io::Result<Shm> {
        let cname = std::ffi::CString::new(name)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in shm name"))?;
        // SAFETY: `cname` is a valid C string; flags are constants.
        let raw = cvt(unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) })?;
        // SAFETY: a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: plain syscall on our descriptor.
        cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) })?;
        Self::map(fd)
    }

    /// Maps a `memfd` (or any shared-memory file) another process passed,
    /// all of it.
    pub fn map(fd: OwnedFd) -> io::Result<Shm> {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: `st` has room for a stat; the kernel fills it.
        cvt(unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) })?;
        // SAFETY: filled by the successful fstat.
        let len = unsafe { st.assume_init() }.st_size as usize;
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "empty shm"));
        }
        // SAFETY: a fresh shared mapping of the file; the kernel picks the
        // address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Shm {
            ptr: NonNull::new(p.cast()).expect("mmap never maps address 0"),
            len,
            fd,
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never, once mapped).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The 8-byte-aligned atomic at `off`.
    ///
    /// # Panics
    /// If `off` is misaligned or out of bounds.
    pub fn u64_at(&self, off: usize) -> &AtomicU64 {
        assert!(
            off.is_multiple_of(8) && off + 8 <= self.len,
            "shm u64 at {off}"
        );
        // SAFETY: in bounds and aligned (the mapping is page aligned);
        // the memory lives as long as `self`; atomics may be shared with
        // other processes' atomics on the same word.
        unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(off).cast()) }
    }

    /// The 4-byte-aligned atomic at `off`.
    ///
    /// # Panics
    /// If `off` is misaligned or out of bounds.
    pub fn u32_at(&self, off: usize) -> &AtomicU32 {
        assert!(
            off.is_multiple_of(4) && off + 4 <= self.len,
            "shm u32 at {off}"
        );
        // SAFETY: as `u64_at`.
        unsafe { AtomicU32::from_ptr(self.ptr.as_ptr().add(off).cast()) }
    }

    /// Copies `src` to `off`.
    ///
    /// # Panics
    /// If the range is out of bounds.
    pub fn write(&self, off: usize, src: &[u8]) {
        assert!(off.checked_add(src.len()).is_some_and(|e| e <= self.len));
        // SAFETY: in bounds; the destination is shared memory reached only
        // by raw pointers; the ring protocol gives the writer these bytes
        // alone until it publishes them.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(off), src.len())
        };
    }

    /// Copies the bytes of `p` to `off`.
    ///
    /// # Panics
    /// If the range is out of bounds.
    pub fn write_piece(&self, off: usize, p: &IoPiece<'_>) {
        let (src, len) = p.raw();
        assert!(off.checked_add(len).is_some_and(|e| e <= self.len));
        // SAFETY: in bounds, as `write`; the source is readable for `len`
        // bytes while the piece is alive (`IoPiece`'s contract), and it is
        // never a Rust reference into shared memory.
        unsafe { std::ptr::copy_nonoverlapping(src, self.ptr.as_ptr().add(off), len) };
    }

    /// The `len` bytes at `off`, borrowed where they lie (for a ring's
    /// consumer: bytes the ring protocol gives it alone; see
    /// [`Ring::pop_in_place`]).
    ///
    /// # Panics
    /// If the range is out of bounds.
    fn slice(&self, off: usize, len: usize) -> &[u8] {
        assert!(off.checked_add(len).is_some_and(|e| e <= self.len));
        // SAFETY: in bounds, and the mapping lives as long as `self`
        // (the borrow ties the slice to it). A `&[u8]` promises the
        // compiler that nothing writes the bytes while it lives: the ring
        // protocol keeps that promise — the producer published them with
        // release (seen here with acquire) and writes them again only
        // after the consumer freed them (`release`, after the borrow
        // ended). It rests on the producer following the protocol: see
        // `Ring::pop_in_place` for what a producer that does not would do.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len) }
    }

    /// Copies `dst.len()` bytes at `off` into `dst`.
    ///
    /// # Panics
    /// If the range is out of bounds.
    pub fn read(&self, off: usize, dst: &mut [u8]) {
        assert!(off.checked_add(dst.len()).is_some_and(|e| e <= self.len));
        // SAFETY: in bounds; the ring protocol gives the reader these bytes
        // (published with release, seen with acquire) until it frees them.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), dst.as_mut_ptr(), dst.len())
        };
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

impl AsFd for Shm {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The layout's and the records' version: `SRDMRNG3` since a record's
/// header may say its packet carries no ICRC (a ring of another version is
/// not attached).
const MAGIC: u64 = u64::from_le_bytes(*b"SRDMRNG3");
const OFF_MAGIC: usize = 0;
const OFF_CAP_LOG2: usize = 8;
const OFF_TAIL: usize = 64;
const OFF_HEAD: usize = 128;
const OFF_ASLEEP: usize = 192;
const OFF_REFUSED: usize = 256;
const OFF_CLOSED: usize = 320;
const OFF_RAISED: usize = 384;
/// The epoch of the ways to the ring's consumer (see [`Ring::epoch`]),
/// far from the other words (a zero page in rings made before it).
const OFF_EPOCH: usize = 2048;
/// `OFF_CLOSED` bit of the producer, and of the consumer.
const CLOSED_PRODUCER: u32 = 1;
const CLOSED_CONSUMER: u32 = 2;
/// Bytes before the data area.
const HEADER: usize = 4096;
/// Record header: length and tag.
const REC_HDR: usize = 8;
/// Tag of a padding record (the rest of the area before it wraps).
const TAG_PAD: u32 = 0;

/// Smallest and largest data area.
pub const RING_MIN: usize = 4096;
/// See [`RING_MIN`].
pub const RING_MAX: usize = 1 << 28;

/// A record did not fit (the ring is full, or the record is larger than
/// half the ring).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingFull;

/// One direction of a ring: the producer's or the consumer's end.
#[derive(Debug)]
pub struct Ring {
    shm: Shm,
    cap: usize,
    /// Producer: its tail; consumer: its head (both mirror the shared
    /// word this end owns).
    own: u64,
    /// The other end's counter as last read.
    seen: u64,
    /// The consumer found the ring malformed: it reads as empty.
    broken: bool,
    /// This end produces (made by [`Ring::create`]).
    producer: bool,
}

fn pad8(n: usize) -> usize {
    (n + 7) & !7
}

impl Ring {
    /// A new ring with a data area of `capacity` bytes (rounded up to a
    /// power of two within [`RING_MIN`]..=[`RING_MAX`]): the producer's
    /// end. Pass [`Ring::fd`] to the consumer.
    pub fn create(name: &str, capacity: usize) -> io::Result<Ring> {
        let cap = capacity.clamp(RING_MIN, RING_MAX).next_power_of_two();
        let shm = Shm::create(name, HEADER + cap)?;
        shm.u64_at(OFF_CAP_LOG2)
            .store(u64::from(cap.trailing_zeros()), Ordering::Relaxed);
        shm.u64_at(OFF_MAGIC).store(MAGIC, Ordering::Release);
        Ok(Ring {
            shm,
            cap,
            own: 0,
            seen: 0,
            broken: false,
            producer: true,
        })
    }

    /// The consumer's end of a ring whose descriptor the producer passed.
    pub fn attach(fd: OwnedFd) -> io::Result<Ring> {
        let shm = Shm::map(fd)?;
        let bad = || io::Error::new(io::ErrorKind::InvalidData, "not a softrdma ring");
        if shm.len() < HEADER + RING_MIN || shm.u64_at(OFF_MAGIC).load(Ordering::Acquire) != MAGIC {
            return Err(bad());
        }
        let log2 = shm.u64_at(OFF_CAP_LOG2).load(Ordering::Relaxed);
        if log2 >= 63 || (1usize << log2) + HEADER != shm.len() {
            return Err(bad());
        }
        let head = shm.u64_at(OFF_HEAD).load(Ordering::Acquire);
        Ok(Ring {
            cap: 1 << log2,
            own: head,
            seen: head,
            broken: false,
            producer: false,
            shm,
        })
    }

    /// The shared memory's descriptor (for the consumer).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.shm.as_fd()
    }

    /// Data area in bytes.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Largest record body that fits at all.
    pub fn max_record(&self) -> usize {
        self.cap / 2 - REC_HDR
    }

    // ---- producer ----

    /// Appends one record (the concatenation of `parts`) with `tag`
    /// (non-zero) and publishes it. `Err(RingFull)`, counted, when the
    /// ring has no room for it now; `Ok(true)` when the consumer sleeps
    /// and must be woken (see [`Self::publish`]).
    pub fn push(&mut self, tag: u32, parts: &[&[u8]]) -> Result<bool, RingFull> {
        if !self.push_unpublished(tag, parts) {
            return Err(RingFull);
        }
        Ok(self.publish())
    }

    /// [`Self::push`] without publishing: call [`Self::publish`] after a
    /// batch (one release store for all of it).
    pub fn push_unpublished(&mut self, tag: u32, parts: &[&[u8]]) -> bool {
        let body: usize = parts.iter().map(|p| p.len()).sum();
        let Some(mut off) = self.reserve(tag, body) else {
            return false;
        };
        for p in parts {
            self.shm.write(off, p);
            off += p.len();
        }
        true
    }

    /// [`Self::push_unpublished`] of `head` followed by `pieces` (a
    /// datagram whose payload is still in the program's registered
    /// memory: one copy, straight into the ring).
    pub fn push_pieces_unpublished(
        &mut self,
        tag: u32,
        head: &[u8],
        pieces: &[IoPiece<'_>],
    ) -> bool {
        let body = head.len() + pieces.iter().map(IoPiece::len).sum::<usize>();
        let Some(mut off) = self.reserve(tag, body) else {
            return false;
        };
        self.shm.write(off, head);
        off += head.len();
        for p in pieces {
            self.shm.write_piece(off, p);
            off += p.len();
        }
        true
    }

    /// Makes room for a record of `body` bytes and writes its header:
    /// the offset of its body in the shared memory, or `None` (counted)
    /// when it does not fit.
    fn reserve(&mut self, tag: u32, body: usize) -> Option<usize> {
        debug_assert_ne!(tag, TAG_PAD);
        let need = REC_HDR + pad8(body);
        if body > self.max_record() || body > u32::MAX as usize {
            self.refused();
            return None;
        }
        let at = (self.own as usize) & (self.cap - 1);
        let to_end = self.cap - at;
        let total = if need > to_end { to_end + need } else { need };
        if self.free() < total {
            self.seen = self.shm.u64_at(OFF_HEAD).load(Ordering::Acquire);
            if self.free() < total {
                self.refused();
                return None;
            }
        }
        if need > to_end {
            // Pad to the end; the record starts at 0.
            self.write_hdr(at, (to_end - REC_HDR) as u32, TAG_PAD);
            self.own += to_end as u64;
        }
        let at = (self.own as usize) & (self.cap - 1);
        self.write_hdr(at, body as u32, tag);
        self.own += need as u64;
        Some(HEADER + at + REC_HDR)
    }

    fn write_hdr(&self, at: usize, len: u32, tag: u32) {
        let mut h = [0u8; REC_HDR];
        h[..4].copy_from_slice(&len.to_le_bytes());
        h[4..].copy_from_slice(&tag.to_le_bytes());
        self.shm.write(HEADER + at, &h);
    }

    fn free(&self) -> usize {
        self.cap - (self.own.wrapping_sub(self.seen) as usize).min(self.cap)
    }

    fn refused(&self) {
        self.shm.u64_at(OFF_REFUSED).fetch_add(1, Ordering::Relaxed);
    }

    /// Makes the records pushed so far visible. Returns whether the
    /// consumer was asleep (the caller then writes its eventfd); the flag
    /// is cleared, so only one producer write follows one sleep.
    pub fn publish(&mut self) -> bool {
        self.shm.u64_at(OFF_TAIL).store(self.own, Ordering::SeqCst);
        let asleep = self.shm.u32_at(OFF_ASLEEP);
        asleep.load(Ordering::SeqCst) != 0 && asleep.swap(0, Ordering::SeqCst) != 0
    }

    /// Producer: asks for the consumer's attention with a flag beside the
    /// records (never refused, however full the ring: see
    /// [`Self::take_raised`]). Returns whether the consumer sleeps (the
    /// caller writes its eventfd), as [`Self::publish`].
    pub fn raise(&mut self) -> bool {
        self.shm.u32_at(OFF_RAISED).store(1, Ordering::SeqCst);
        let asleep = self.shm.u32_at(OFF_ASLEEP);
        asleep.load(Ordering::SeqCst) != 0 && asleep.swap(0, Ordering::SeqCst) != 0
    }

    /// Records refused because the ring was full (or too large).
    pub fn refused_count(&self) -> u64 {
        self.shm.u64_at(OFF_REFUSED).load(Ordering::Relaxed)
    }

    /// How far the consumer has read (a counter of bytes that only
    /// grows): the producer's way to tell a slow consumer from a stopped
    /// one.
    pub fn consumed(&mut self) -> u64 {
        self.seen = self.shm.u64_at(OFF_HEAD).load(Ordering::Acquire);
        self.seen
    }

    /// Bytes written and not yet consumed (the producer's view).
    pub fn in_flight(&mut self) -> usize {
        self.seen = self.shm.u64_at(OFF_HEAD).load(Ordering::Acquire);
        self.own.wrapping_sub(self.seen) as usize
    }

    // ---- consumer ----

    /// Whether a record is waiting.
    pub fn has_data(&self) -> bool {
        !self.broken && self.shm.u64_at(OFF_TAIL).load(Ordering::Acquire) != self.own
    }

    /// Copies the next record into `buf`: its tag and length. `None` when
    /// the ring is empty. A record longer than `buf` is skipped (counted
    /// as refused). Frees the space at once.
    pub fn pop(&mut self, buf: &mut [u8]) -> Option<(u32, usize)> {
        let r = self.pop_unreleased(buf);
        self.release();
        r
    }

    /// [`Self::pop`] without freeing: call [`Self::release`] after a
    /// batch.
    pub fn pop_unreleased(&mut self, buf: &mut [u8]) -> Option<(u32, usize)> {
        self.pop_split_unreleased(&mut [], buf)
    }

    /// [`Self::pop_unreleased`] of a record that starts with a header of
    /// `head.len()` bytes: the header goes to `head`, the rest to the
    /// start of `buf` (no second copy to move a body behind its header).
    /// Returns the tag and the body's length (without the header); a
    /// record shorter than the header fills only its start.
    pub fn pop_split_unreleased(
        &mut self,
        head: &mut [u8],
        buf: &mut [u8],
    ) -> Option<(u32, usize)> {
        loop {
            let (tag, at, len) = self.next_record()?;
            let h = len.min(head.len());
            if len - h > buf.len() {
                self.refused();
                continue;
            }
            self.shm.read(at, &mut head[..h]);
            self.shm.read(at + h, &mut buf[..len - h]);
            return Some((tag, len - h));
        }
    }

    /// Consumer: hands the next record — its tag and its body where it
    /// lies in the shared memory, no copy — to `f`, and returns what `f`
    /// returns; `None` when the ring is empty. Without freeing, as
    /// [`Self::pop_unreleased`]: the body stays the consumer's until
    /// [`Self::release`], and the producer never writes it before (the
    /// ring protocol).
    ///
    /// Soundness rests on that protocol, unlike the copying pops: `f`
    /// gets a `&[u8]`, which tells the compiler the bytes do not change
    /// while it lives, so it may read a byte twice where the source reads
    /// it once (a length checked, then loaded again to index). A producer
    /// that broke the protocol and wrote the body meanwhile would be a
    /// data race — undefined behaviour, not merely torn bytes: a bounds
    /// check could pass on one value and the access use another. The
    /// producer is a softrdma process of the same user (checked at the
    /// handshake) running this crate's producer, which writes only free
    /// space; a process of the same user can already write this one's
    /// memory through ptrace or `/proc/PID/mem` unless Yama restricts it,
    /// and a hostile one is outside the threat model as it is for those.
    /// A consumer that must not trust its producer's code uses
    /// [`Self::pop_split_unreleased`] (a raw copy into the caller's
    /// buffer, then plain parsing of bytes no one else writes). The
    /// receiver also treats every record as untrusted *content* (it
    /// parses each one as a datagram from the network).
    pub fn pop_in_place<R>(&mut self, f: impl FnOnce(u32, &[u8]) -> R) -> Option<R> {
        let (tag, at, len) = self.next_record()?;
        Some(f(tag, self.shm.slice(at, len)))
    }

    /// Takes the next record that is not padding: its tag, the offset of
    /// its body in the shared memory and its length. `None` when the ring
    /// is empty or broken (garbage: it then reads as empty for good).
    fn next_record(&mut self) -> Option<(u32, usize, usize)> {
        loop {
            if self.broken {
                return None;
            }
            if self.seen == self.own {
                self.seen = self.shm.u64_at(OFF_TAIL).load(Ordering::Acquire);
                if self.seen == self.own {
                    return None;
                }
            }
            let avail = self.seen.wrapping_sub(self.own) as usize;
            let at = (self.own as usize) & (self.cap - 1);
            let mut h = [0u8; REC_HDR];
            if avail < REC_HDR || self.cap - at < REC_HDR {
                self.broken = true;
                return None;
            }
            self.shm.read(HEADER + at, &mut h);
            let len = u32::from_le_bytes(h[..4].try_into().expect("4")) as usize;
            let tag = u32::from_le_bytes(h[4..].try_into().expect("4"));
            let need = REC_HDR + pad8(len);
            if need > avail || need > self.cap - at {
                self.broken = true;
                return None;
            }
            self.own += need as u64;
            if tag == TAG_PAD {
                continue;
            }
            return Some((tag, HEADER + at + REC_HDR, len));
        }
    }

    /// Frees the space of the records taken so far.
    pub fn release(&mut self) {
        self.shm.u64_at(OFF_HEAD).store(self.own, Ordering::Release);
    }

    /// About to sleep: sets the "asleep" flag and returns whether the ring
    /// is still empty and not raised (if not, do not sleep; call
    /// [`Self::awake`]).
    pub fn prepare_sleep(&self) -> bool {
        self.shm.u32_at(OFF_ASLEEP).store(1, Ordering::SeqCst);
        let raised = self.shm.u32_at(OFF_RAISED).load(Ordering::SeqCst) != 0;
        !raised && (self.broken || self.shm.u64_at(OFF_TAIL).load(Ordering::SeqCst) == self.own)
    }

    /// Consumer: takes the producer's "attention" flag (see
    /// [`Self::raise`]): whether it was set.
    pub fn take_raised(&self) -> bool {
        let r = self.shm.u32_at(OFF_RAISED);
        r.load(Ordering::Relaxed) != 0 && r.swap(0, Ordering::SeqCst) != 0
    }

    /// Back from sleep (or decided not to): producers need not wake us.
    pub fn awake(&self) {
        self.shm.u32_at(OFF_ASLEEP).store(0, Ordering::Relaxed);
    }

    // ---- both ends ----

    /// This end is done with the ring (an orderly close: the other end
    /// lets go of it too once it sees [`Self::peer_closed`]). A producer
    /// publishes first; whether the consumer sleeps is returned (wake it:
    /// it then sees the close soon).
    pub fn close(&mut self) -> bool {
        let bit = if self.producer {
            self.shm.u64_at(OFF_TAIL).store(self.own, Ordering::SeqCst);
            CLOSED_PRODUCER
        } else {
            CLOSED_CONSUMER
        };
        self.shm.u32_at(OFF_CLOSED).fetch_or(bit, Ordering::SeqCst);
        let asleep = self.shm.u32_at(OFF_ASLEEP);
        self.producer && asleep.load(Ordering::SeqCst) != 0 && asleep.swap(0, Ordering::SeqCst) != 0
    }

    /// Whether the other end closed the ring ([`Self::close`]). A
    /// consumer still reads what was published before.
    pub fn peer_closed(&self) -> bool {
        let bit = if self.producer {
            CLOSED_CONSUMER
        } else {
            CLOSED_PRODUCER
        };
        self.shm.u32_at(OFF_CLOSED).load(Ordering::SeqCst) & bit != 0
    }

    /// The consumer found garbage: the ring reads as empty for good.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// The epoch of what the producer knows about the consumer: whoever
    /// hands out the consumer's identities (the shared device's device
    /// process, which maps the ring too) moves it on with
    /// [`Self::bump_epoch`] when one of them changes hands, and a producer
    /// that learnt an identity at another epoch asks again. One load on a
    /// cache line that is rarely written.
    pub fn epoch(&self) -> u64 {
        self.shm.u64_at(OFF_EPOCH).load(Ordering::Acquire)
    }

    /// Moves [`Self::epoch`] on; returns the new value.
    pub fn bump_epoch(&self) -> u64 {
        self.shm.u64_at(OFF_EPOCH).fetch_add(1, Ordering::AcqRel) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dup(r: &Ring) -> OwnedFd {
        r.fd().try_clone_to_owned().unwrap()
    }

    #[test]
    fn two_threads_move_every_record_intact() {
        let mut p = Ring::create("t", 1 << 16).unwrap();
        let mut c = Ring::attach(dup(&p)).unwrap();
        const N: u32 = 200_000;
        let t = std::thread::spawn(move || {
            let mut i = 0u32;
            while i < N {
                let len = 24 + (i as usize * 131) % 4100;
                let body = vec![(i % 251) as u8; len];
                if p.push(1, &[&i.to_le_bytes(), &body]).is_ok() {
                    i += 1;
                } else {
                    std::hint::spin_loop();
                }
            }
        });
        let mut buf = vec![0u8; 8192];
        let mut next = 0u32;
        while next < N {
            match c.pop(&mut buf) {
                Some((1, n)) => {
                    let k = u32::from_le_bytes(buf[..4].try_into().unwrap());
                    assert_eq!(k, next);
                    assert_eq!(n, 4 + 24 + (k as usize * 131) % 4100);
                    assert!(
                        buf[4..n].iter().all(|&b| b == (k % 251) as u8),
                        "record {k}"
                    );
                    next += 1;
                }
                Some(other) => panic!("{other:?}"),
                None => {
                    assert!(!c.is_broken());
                    std::hint::spin_loop();
                }
            }
        }
        t.join().unwrap();
    }

    #[test]
    fn records_in_order_with_wrap_and_full() {
        let mut p = Ring::create("t", 4096).unwrap();
        let mut c = Ring::attach(dup(&p)).unwrap();
        let mut buf = vec![0u8; 4096];
        assert_eq!(c.pop(&mut buf), None);
        let mut next_in = 0u32;
        let mut next_out = 0u32;
        for round in 0..2000u32 {
            // Push records of varying sizes until full, pop some.
            let len = (round as usize * 37) % 700 + 1;
            let body: Vec<u8> = (0..len).map(|i| (i as u32 ^ next_in) as u8).collect();
            if p.push(next_in + 1, &[&next_in.to_le_bytes(), &body])
                .is_ok()
            {
                next_in += 1;
            }
            if round % 3 != 0 {
                if let Some((tag, n)) = c.pop(&mut buf) {
                    assert_eq!(tag, next_out + 1);
                    let k = u32::from_le_bytes(buf[..4].try_into().unwrap());
                    assert_eq!(k, next_out);
                    for (i, b) in buf[4..n].iter().enumerate() {
                        assert_eq!(*b, (i as u32 ^ k) as u8);
                    }
                    next_out += 1;
                }
            }
        }
        assert!(p.refused_count() > 0, "the ring never filled");
        while c.pop(&mut buf).is_some() {
            next_out += 1;
        }
        assert_eq!(next_in, next_out);
        // Too large for the ring at all: refused.
        assert_eq!(p.push(1, &[&vec![0u8; 4096]]), Err(RingFull));
    }

    #[test]
    fn sleeping_consumer_is_reported_once() {
        let mut p = Ring::create("t", 4096).unwrap();
        let c = Ring::attach(dup(&p)).unwrap();
        assert!(p.push(7, &[b"w"]) == Ok(false), "nobody asleep yet");
        let mut c = c;
        let mut buf = [0u8; 8];
        assert_eq!(c.pop(&mut buf), Some((7, 1)));
        assert!(c.prepare_sleep(), "empty: may sleep");
        // The push sees the flag and clears it; a second push does not.
        assert_eq!(p.push(7, &[b"x"]), Ok(true));
        assert_eq!(p.push(7, &[b"y"]), Ok(false));
        assert!(!c.prepare_sleep(), "not empty: must not sleep");
        c.awake();
    }

    #[test]
    fn a_raised_flag_survives_a_full_ring_and_closes_are_seen_by_the_other_end() {
        let mut p = Ring::create("t", 4096).unwrap();
        let mut c = Ring::attach(dup(&p)).unwrap();
        while p.push(1, &[&[0u8; 1000]]).is_ok() {}
        while p.push(1, &[b"x"]).is_ok() {}
        assert!(p.refused_count() >= 2, "full");
        assert!(!c.take_raised());
        assert!(!c.prepare_sleep(), "records wait");
        c.awake();
        let mut buf = [0u8; 1024];
        while c.pop(&mut buf).is_some() {}
        // Empty: may sleep, until raised (the sleeper is reported once).
        assert!(c.prepare_sleep());
        assert!(p.raise(), "the consumer sleeps: wake it");
        assert!(!c.prepare_sleep(), "raised: must not sleep");
        c.awake();
        assert!(c.take_raised());
        assert!(!c.take_raised(), "taken once");
        // Closing: each end sees the other's, not its own.
        assert!(!p.peer_closed() && !c.peer_closed());
        p.push(1, &[b"last"]).unwrap();
        assert!(!p.close(), "nobody asleep");
        assert!(c.peer_closed() && !p.peer_closed());
        assert_eq!(
            c.pop(&mut buf),
            Some((1, 4)),
            "what came before the close is read"
        );
        c.close();
        assert!(p.peer_closed());
    }

    /// A third mapping (the device process's) moves the epoch on; both
    /// ends see it, and it leaves the records alone.
    #[test]
    fn the_epoch_is_shared_by_every_mapping() {
        let mut p = Ring::create("t", 4096).unwrap();
        let c = Ring::attach(dup(&p)).unwrap();
        let third = Ring::attach(dup(&p)).unwrap();
        assert_eq!((p.epoch(), c.epoch()), (0, 0));
        p.push(1, &[b"x"]).unwrap();
        assert_eq!(third.bump_epoch(), 1);
        assert_eq!(third.bump_epoch(), 2);
        assert_eq!((p.epoch(), c.epoch()), (2, 2));
        assert!(c.has_data());
        assert!(!c.prepare_sleep());
    }

    #[test]
    fn split_pops_put_the_header_apart() {
        let mut p = Ring::create("t", 4096).unwrap();
        let mut c = Ring::attach(dup(&p)).unwrap();
        p.push(5, &[b"HEAD", b"body bytes"]).unwrap();
        p.push(6, &[b"HE"]).unwrap();
        let mut h = [0u8; 4];
        let mut b = [0u8; 16];
        assert_eq!(c.pop_split_unreleased(&mut h, &mut b), Some((5, 10)));
        assert_eq!((&h, &b[..10]), (b"HEAD", &b"body bytes"[..]));
        // Shorter than the header: its start only, no body.
        assert_eq!(c.pop_split_unreleased(&mut h, &mut b), Some((6, 0)));
        assert_eq!(&h[..2], b"HE");
        c.release();
        assert_eq!(c.pop_split_unreleased(&mut h, &mut b), None);
    }

    #[test]
    fn in_place_pops_borrow_the_body_until_released() {
        let mut p = Ring::create("t", 4096).unwrap();
        let mut c = Ring::attach(dup(&p)).unwrap();
        // Wraps: records of 1000 bytes, more than the ring holds in all.
        let mut got = Vec::new();
        for round in 0u8..12 {
            let body = [round; 1000];
            if p.push_unpublished(7, &[&body]) {
                p.publish();
            } else {
                while let Some(b) = c.pop_in_place(|t, b| (t, b.to_vec())) {
                    got.push(b);
                }
                c.release();
                assert!(p.push(7, &[&body]).is_ok(), "room after release");
            }
        }
        while let Some(b) = c.pop_in_place(|t, b| (t, b.to_vec())) {
            got.push(b);
        }
        c.release();
        assert_eq!(got.len(), 12);
        for (i, (t, b)) in got.iter().enumerate() {
            assert_eq!((*t, b.len()), (7, 1000));
            assert!(b.iter().all(|&x| x == i as u8), "record {i} intact");
        }
        assert_eq!(c.pop_in_place(|_, _| ()), None);
    }

    #[test]
    fn garbage_reads_as_empty() {
        let mut p = Ring::create("t", 4096).unwrap();
        let mut c = Ring::attach(dup(&p)).unwrap();
        p.push(3, &[b"ok"]).unwrap();
        // Corrupt the length of the next record, then publish it.
        p.shm.write(HEADER + 16, &u32::MAX.to_le_bytes());
        p.shm.u64_at(OFF_TAIL).store(32, Ordering::Release);
        let mut buf = [0u8; 64];
        assert_eq!(c.pop(&mut buf), Some((3, 2)));
        assert_eq!(c.pop(&mut buf), None);
        assert!(c.is_broken());
        let other = Shm::create("x", 8192).unwrap();
        assert!(Ring::attach(other.as_fd().try_clone_to_owned().unwrap()).is_err());
    }
}
