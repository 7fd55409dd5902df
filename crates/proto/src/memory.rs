//! Protection domains, memory regions and every access check.
//!
//! Application memory reaches the core only through [`RegionMemory`], a safe
//! trait: the simulator implements it with vectors, the engine with the
//! program's registered buffers. Every local access (scatter/gather entry)
//! and remote access (R_Key, VA, length) is checked here against the
//! region's bounds, protection domain and access flags before any byte moves.
//!
//! # Lifetime of region bytes
//!
//! A registered region is a [`Region`]: the memory plus a *revoked* flag.
//! Work requests, READ responses being sent and zero-copy datagrams keep
//! the `Region` (an `Arc`), not a bare pointer. Deregistration revokes it
//! (`MrTable::deregister`), and from then on every access through it fails
//! with [`Revoked`] instead of touching the bytes: a requester re-reading a
//! send buffer completes its request with a local protection error, a READ
//! response stops with a remote access NAK, a WRITE landing in it is NAKed.
//! Since every access of the core happens inside a call into the core, the
//! driver knows that once `dereg_mr` returns, the core will never touch
//! the bytes again; zero-copy pieces it still holds (see
//! [`Piece::address`]) are its own to copy or drop before it returns to
//! the program.
//!
//! # Memory that may not be there
//!
//! Every access of [`RegionMemory`] may fail with [`Fault`]: memory of an
//! on-demand paging region (`IBV_ACCESS_ON_DEMAND`) is reached page by
//! page when an access happens, and a page the program has unmapped is an
//! error for that access, exactly as a revoked region's bytes are: a
//! remote access error for a peer, a local protection error for a local
//! work request. Pinned regions never fail.
//!
//! # Memory windows and re-registration
//!
//! Remote keys name regions or memory windows (`mw` module). A window
//! lends a range of a region (or the whole of it) with rights of its own;
//! [`MrTable::resolve_remote`] looks both up. A region with bound windows
//! cannot be deregistered, invalidated or re-registered.
//! [`MrTable::reregister`] changes a region's protection domain, rights
//! or memory: a new memory revokes the old one (as deregistration does)
//! and gets new keys.
use crate::mw::Mw;
use crate::verbs::{Access, MwId, MwType, PdId, Sge, VerbsError, VerbsResult};
use crate::{KeyRng, U32Map};
use softrdma_wire::{Qpn, RKey};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The memory is not there: a page of an on-demand paging region is not
/// mapped, or not writable, at the moment of the access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault;

/// Bytes of a registered region, as the core sees them. Offsets are relative
/// to the start of the region and always in bounds: the core checks before it
/// calls. Every access may fail with [`Fault`] (on-demand paging); memory
/// that is always there returns `Ok`.
///
/// Implementations that reach memory other threads may use at the same
/// time (the engine's registered buffers) must do so without Rust
/// references to it: raw pointers and atomic copies (see the `softrdma`
/// crate's `memory` module for the rules).
pub trait RegionMemory: Send + Sync {
    /// Length of the region in bytes.
    fn len(&self) -> usize;
    /// True for an empty region.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies `dst.len()` bytes starting at `offset` into `dst`.
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), Fault>;
    /// Copies `src` into the region at `offset`. The last byte is stored
    /// last, with release ordering: a program that sees it (acquire) sees
    /// every byte before it (the "poll the last byte" idiom).
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), Fault>;
    /// Atomically adds `add` to the native-endian u64 at `offset` (8-byte
    /// aligned) and returns the previous value.
    fn fetch_add(&self, offset: usize, add: u64) -> Result<u64, Fault>;
    /// Atomically replaces the u64 at `offset` with `swap` if it equals
    /// `compare`; returns the previous value.
    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> Result<u64, Fault>;
    /// ATOMIC WRITE (IBA A19): stores the 8 bytes at `offset` (8-byte
    /// aligned) as one single-copy atomic store with release ordering: a
    /// reader never sees a mix of old and new bytes.
    fn atomic_write(&self, offset: usize, bytes: [u8; 8]) -> Result<(), Fault>;
    /// FLUSH (IBA A19): makes the bytes of `[offset, offset + len)` placed
    /// so far visible to every reader (global visibility) and, with
    /// `persistent`, durable where the memory has storage behind it.
    /// The default is a release fence: stores this device made are then
    /// visible, which is what global visibility means for host memory.
    fn flush(&self, offset: usize, len: usize, persistent: bool) -> Result<(), Fault> {
        let _ = (offset, len, persistent);
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        Ok(())
    }
    /// Brings the pages of `[offset, offset + len)` in (`ibv_advise_mr`
    /// prefetch), writable with `write`. `Err` when part of the range is
    /// not mapped (or not writable). Pinned memory has nothing to do.
    fn prefetch(&self, offset: usize, len: usize, write: bool) -> Result<(), Fault> {
        let _ = (offset, len, write);
        Ok(())
    }
    /// The address of byte 0, when the I/O layer may read the bytes itself
    /// (zero-copy transmission; the driver dereferences it, the core never
    /// does). `None` makes the core copy payloads into the packet buffer;
    /// memory that may fault ([`Fault`]) must answer `None`.
    fn address(&self) -> Option<std::ptr::NonNull<u8>> {
        None
    }
}

/// The region's bytes cannot be touched: it was deregistered, or (on-demand
/// paging) the memory is not mapped. Either way the access does not happen
/// and the operation fails as a NIC's would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Revoked;

impl From<Fault> for Revoked {
    fn from(_: Fault) -> Self {
        Revoked
    }
}

/// A registered region's bytes and whether they may still be touched.
pub struct Region {
    mem: Arc<dyn RegionMemory>,
    revoked: AtomicBool,
}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Region({} bytes", self.mem.len())?;
        if self.is_revoked() {
            f.write_str(", revoked")?;
        }
        f.write_str(")")
    }
}

impl Region {
    /// Wraps registered memory.
    pub fn new(mem: Arc<dyn RegionMemory>) -> Self {
        Region {
            mem,
            revoked: AtomicBool::new(false),
        }
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.mem.len()
    }
    /// True for an empty region.
    pub fn is_empty(&self) -> bool {
        self.mem.is_empty()
    }
    /// Deregistered: no access from now on.
    pub fn is_revoked(&self) -> bool {
        self.revoked.load(Ordering::Acquire)
    }
    /// Forbids every later access (deregistration).
    pub(crate) fn revoke(&self) {
        self.revoked.store(true, Ordering::Release);
    }
    fn live(&self) -> Result<&dyn RegionMemory, Revoked> {
        if self.is_revoked() {
            Err(Revoked)
        } else {
            Ok(&*self.mem)
        }
    }
    /// [`RegionMemory::read`], unless revoked.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), Revoked> {
        Ok(self.live()?.read(offset, dst)?)
    }
    /// [`RegionMemory::write`], unless revoked.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), Revoked> {
        Ok(self.live()?.write(offset, src)?)
    }
    /// [`RegionMemory::fetch_add`], unless revoked.
    pub fn fetch_add(&self, offset: usize, add: u64) -> Result<u64, Revoked> {
        Ok(self.live()?.fetch_add(offset, add)?)
    }
    /// [`RegionMemory::compare_swap`], unless revoked.
    pub fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> Result<u64, Revoked> {
        Ok(self.live()?.compare_swap(offset, compare, swap)?)
    }
    /// [`RegionMemory::atomic_write`], unless revoked.
    pub fn atomic_write(&self, offset: usize, bytes: [u8; 8]) -> Result<(), Revoked> {
        Ok(self.live()?.atomic_write(offset, bytes)?)
    }
    /// [`RegionMemory::flush`], unless revoked.
    pub fn flush(&self, offset: usize, len: usize, persistent: bool) -> Result<(), Revoked> {
        Ok(self.live()?.flush(offset, len, persistent)?)
    }
    /// [`RegionMemory::prefetch`], unless revoked.
    pub fn prefetch(&self, offset: usize, len: usize, write: bool) -> Result<(), Revoked> {
        Ok(self.live()?.prefetch(offset, len, write)?)
    }
    /// Feeds `len` bytes at `offset` into the ICRC, through a bounded stack
    /// buffer (the bytes are copied out, never borrowed).
    pub fn icrc_update(
        &self,
        offset: usize,
        len: usize,
        icrc: &mut softrdma_wire::Icrc,
    ) -> Result<(), Revoked> {
        let mem = self.live()?;
        let mut buf = [0u8; 1024];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(buf.len());
            mem.read(offset + done, &mut buf[..n])?;
            icrc.update(&buf[..n]);
            done += n;
        }
        Ok(())
    }
    /// The address of byte `offset` for zero-copy I/O, unless revoked or
    /// the memory does not lend its address.
    pub fn address(&self, offset: usize) -> Option<*const u8> {
        let base = self.live().ok()?.address()?;
        Some(base.as_ptr().wrapping_add(offset) as *const u8)
    }
}

/// An access check failed: unknown key, other protection domain,
/// invalidated key, missing right or out of bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessDenied;

/// A registered memory region.
#[derive(Clone)]
pub struct Mr {
    /// Protection domain.
    pub pd: PdId,
    /// Virtual address of the first byte (what SGEs and RETHs name).
    pub va: u64,
    /// Length in bytes.
    pub len: u64,
    /// Rights granted.
    pub access: Access,
    /// Local key (equal to the remote key).
    pub lkey: u32,
    /// Remote key.
    pub rkey: RKey,
    /// False after LOCAL_INV or SEND_WITH_INV until re-registered.
    pub valid: bool,
    /// The bytes.
    pub region: Arc<Region>,
    /// Memory windows bound to the region (IBA 10.6.7.2.6: while there are
    /// any, it cannot be deregistered, invalidated or re-registered).
    pub windows: u32,
}

impl fmt::Debug for Mr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mr")
            .field("pd", &self.pd)
            .field("va", &format_args!("{:#x}", self.va))
            .field("len", &self.len)
            .field("access", &self.access)
            .field("key", &format_args!("{:#010x}", self.lkey))
            .field("valid", &self.valid)
            .field("windows", &self.windows)
            .finish()
    }
}

impl Mr {
    /// Offset of `[va, va+len)` inside the region, if it fits.
    pub(crate) fn offset_of(&self, va: u64, len: u64) -> Option<usize> {
        let off = va.checked_sub(self.va)?;
        let end = off.checked_add(len)?;
        (end <= self.len).then_some(off as usize)
    }
}

/// A checked piece of memory: a region and an offset range inside it.
#[derive(Clone)]
pub struct Span {
    /// Region bytes.
    pub region: Arc<Region>,
    /// Offset inside the region.
    pub offset: usize,
    /// Length.
    pub len: usize,
}

impl fmt::Debug for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Span({}+{})", self.offset, self.len)
    }
}

/// Part of a packet's payload, left in registered memory for the I/O layer
/// to send from (zero-copy transmission).
#[derive(Clone)]
pub struct Piece {
    /// The region (kept alive while the datagram waits).
    pub region: Arc<Region>,
    /// Offset inside the region.
    pub offset: usize,
    /// Length.
    pub len: usize,
}

impl fmt::Debug for Piece {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Piece({}+{})", self.offset, self.len)
    }
}

impl Piece {
    /// Where the I/O layer reads the bytes: `None` once the region is
    /// deregistered (the driver must then copy or drop the datagram before
    /// `dereg_mr` returns to the program), or when its memory does not lend
    /// its address.
    pub fn address(&self) -> Option<*const u8> {
        self.region.address(self.offset)
    }
    /// Copies the bytes into `dst` (`len` bytes), unless revoked.
    pub fn read(&self, dst: &mut [u8]) -> Result<(), Revoked> {
        self.region.read(self.offset, &mut dst[..self.len])
    }
}

/// A checked scatter/gather list.
#[derive(Clone, Debug, Default)]
pub struct SgList {
    spans: Spans,
    total: u64,
}

/// The spans of a list: most work requests have one SGE, and those need no
/// allocation.
#[derive(Clone, Debug, Default)]
enum Spans {
    #[default]
    None,
    One(Span),
    Many(Vec<Span>),
}

impl Spans {
    fn as_slice(&self) -> &[Span] {
        match self {
            Spans::None => &[],
            Spans::One(s) => std::slice::from_ref(s),
            Spans::Many(v) => v,
        }
    }
    fn push(&mut self, s: Span) {
        *self = match std::mem::take(self) {
            Spans::None => Spans::One(s),
            Spans::One(a) => Spans::Many(vec![a, s]),
            Spans::Many(mut v) => {
                v.push(s);
                Spans::Many(v)
            }
        };
    }
}

impl SgList {
    /// Total length.
    pub fn len(&self) -> u64 {
        self.total
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }
    /// Calls `f` for each piece of `[offset, offset+len)` across the list.
    fn for_range(&self, mut offset: u64, mut len: usize, mut f: impl FnMut(&Span, usize, usize)) {
        let mut done = 0usize;
        for s in self.spans.as_slice() {
            if len == 0 {
                break;
            }
            if offset >= s.len as u64 {
                offset -= s.len as u64;
                continue;
            }
            let n = (s.len - offset as usize).min(len);
            f(s, s.offset + offset as usize, n);
            let _ = done;
            done += n;
            len -= n;
            offset = 0;
        }
    }
    /// The pieces of `[offset, offset+len)` as (memory, offset, length),
    /// if there are at most `N` of them; for zero-copy transmission.
    pub(crate) fn pieces<const N: usize>(
        &self,
        offset: u64,
        len: usize,
    ) -> Option<[Option<Piece>; N]> {
        let mut out: [Option<Piece>; N] = std::array::from_fn(|_| None);
        let mut k = 0;
        let mut ok = true;
        self.for_range(offset, len, |s, o, n| {
            if k < N {
                out[k] = Some(Piece {
                    region: s.region.clone(),
                    offset: o,
                    len: n,
                });
                k += 1;
            } else {
                ok = false;
            }
        });
        ok.then_some(out)
    }
    /// Copies `dst.len()` bytes from list offset `offset`.
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<(), Revoked> {
        let mut at = 0;
        let mut r = Ok(());
        self.for_range(offset, dst.len(), |s, o, n| {
            if r.is_ok() {
                r = s.region.read(o, &mut dst[at..at + n]);
            }
            at += n;
        });
        r
    }
    /// Copies `src` to list offset `offset`.
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<(), Revoked> {
        let mut at = 0;
        let mut r = Ok(());
        self.for_range(offset, src.len(), |s, o, n| {
            if r.is_ok() {
                r = s.region.write(o, &src[at..at + n]);
            }
            at += n;
        });
        r
    }
}

/// Memory regions and memory windows of a device, keyed by unguessable
/// 32-bit keys. A window's R_Key is its index (the upper 24 bits, fixed
/// for its life) and a key byte the consumer chooses at each bind; no
/// region key shares its upper 24 bits with a window's index, so a key
/// names one object at most.
#[derive(Default)]
pub struct MrTable {
    by_key: U32Map<Mr>,
    pds: U32Map<u32>, // pd -> number of regions and windows in it
    pub(crate) mws: U32Map<Mw>,
}

/// What `MrTable::reregister` changes (`ibv_rereg_mr`'s flags).
#[derive(Clone, Default)]
pub struct Rereg {
    /// IBV_REREG_MR_CHANGE_PD.
    pub pd: Option<PdId>,
    /// IBV_REREG_MR_CHANGE_TRANSLATION: the new address and memory.
    pub translation: Option<(u64, Arc<dyn RegionMemory>)>,
    /// IBV_REREG_MR_CHANGE_ACCESS.
    pub access: Option<Access>,
}

impl fmt::Debug for Rereg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rereg")
            .field("pd", &self.pd)
            .field("translation", &self.translation.as_ref().map(|t| t.0))
            .field("access", &self.access)
            .finish()
    }
}

impl MrTable {
    /// Registers a region and returns its key (lkey = rkey).
    pub fn register(
        &mut self,
        rng: &mut KeyRng,
        pd: PdId,
        va: u64,
        mem: Arc<dyn RegionMemory>,
        access: Access,
    ) -> VerbsResult<u32> {
        Self::check_region(va, mem.len() as u64, access)?;
        if self.by_key.len() >= crate::limits::MAX_MR {
            return Err(VerbsError::NoMemory);
        }
        let key = self.fresh_key(rng);
        self.insert(key, pd, va, mem, access);
        Ok(key)
    }

    /// An unused region key: unguessable (a cryptographic generator: one
    /// key seen on the wire says nothing of the next), never 0 and never
    /// 0xffffffff, which UCX and others take for "no key", and not in the
    /// index range of a window.
    fn fresh_key(&self, rng: &mut KeyRng) -> u32 {
        loop {
            let k = rng.next_u32();
            if k != 0
                && k != u32::MAX
                && !self.by_key.contains_key(&k)
                && !self.mws.contains_key(&(k >> 8))
            {
                break k;
            }
        }
    }

    /// Registers a region under a key the caller chooses (replays, tests).
    pub fn register_with_key(
        &mut self,
        key: u32,
        pd: PdId,
        va: u64,
        mem: Arc<dyn RegionMemory>,
        access: Access,
    ) -> VerbsResult<u32> {
        Self::check_region(va, mem.len() as u64, access)?;
        if key == 0 {
            return Err(VerbsError::InvalidArgument("key 0"));
        }
        if self.by_key.contains_key(&key) || self.mws.contains_key(&(key >> 8)) {
            return Err(VerbsError::Busy);
        }
        if self.by_key.len() >= crate::limits::MAX_MR {
            return Err(VerbsError::NoMemory);
        }
        self.insert(key, pd, va, mem, access);
        Ok(key)
    }

    /// An implicit on-demand paging region: address 0, length `u64::MAX`,
    /// the whole address space (`ibv_reg_mr(pd, NULL, SIZE_MAX,
    /// IBV_ACCESS_ON_DEMAND)`).
    pub fn is_implicit(va: u64, len: u64, access: Access) -> bool {
        va == 0 && len == u64::MAX && access.contains(Access::ON_DEMAND)
    }

    fn check_region(va: u64, len: u64, access: Access) -> VerbsResult<()> {
        if access.0 & !Access::SUPPORTED != 0 {
            return Err(VerbsError::InvalidArgument("unsupported access flag"));
        }
        // IBA 10.6.3.1: remote write or atomic need local write.
        if (access.contains(Access::REMOTE_WRITE) || access.contains(Access::REMOTE_ATOMIC))
            && !access.contains(Access::LOCAL_WRITE)
        {
            return Err(VerbsError::InvalidArgument(
                "remote write/atomic access needs local write",
            ));
        }
        if access.contains(Access::ZERO_BASED) {
            // Zero-based addressing is for memory windows (a zero-based
            // region is registered with iova 0 instead).
            return Err(VerbsError::InvalidArgument("zero-based region"));
        }
        if Self::is_implicit(va, len, access) {
            return Ok(());
        }
        if len > crate::limits::MAX_MR_SIZE || va.checked_add(len).is_none() {
            return Err(VerbsError::InvalidArgument("region too large"));
        }
        Ok(())
    }

    fn insert(&mut self, key: u32, pd: PdId, va: u64, mem: Arc<dyn RegionMemory>, access: Access) {
        let len = if Self::is_implicit(va, mem.len() as u64, access) {
            u64::MAX
        } else {
            mem.len() as u64
        };
        let region = Arc::new(Region::new(mem));
        self.by_key.insert(
            key,
            Mr {
                pd,
                va,
                len,
                access,
                lkey: key,
                rkey: RKey(key),
                valid: true,
                region,
                windows: 0,
            },
        );
        *self.pds.entry(pd.0).or_default() += 1;
    }

    fn pd_release(&mut self, pd: PdId) {
        if let Some(n) = self.pds.get_mut(&pd.0) {
            *n -= 1;
            if *n == 0 {
                self.pds.remove(&pd.0);
            }
        }
    }

    /// Removes a region and revokes its bytes: work requests, responses
    /// and datagrams that still name it can no longer touch them. Refused
    /// (`InvalidArgument`, EINVAL as rxe) while windows are bound to it
    /// (IBA 10.6.7.2.6).
    pub fn deregister(&mut self, key: u32) -> VerbsResult<()> {
        let mr = self.by_key.get(&key).ok_or(VerbsError::NoSuchObject)?;
        if mr.windows > 0 {
            return Err(VerbsError::InvalidArgument(
                "memory windows are bound to the region",
            ));
        }
        let mr = self.by_key.remove(&key).ok_or(VerbsError::NoSuchObject)?;
        mr.region.revoke();
        self.pd_release(mr.pd);
        Ok(())
    }

    /// `ibv_rereg_mr`: changes a region's protection domain, rights or
    /// memory, as deregistration followed by registration would, and
    /// returns its key. The key stays unless the memory changes: then the
    /// old memory is revoked (nothing touches it once this returns: work
    /// requests still naming it fail with a local protection error, peers
    /// with a remote access error) and the region gets a new key, so no
    /// peer reaches the new memory with a key given out for the old one.
    /// Refused while windows are bound to the region. On an error nothing
    /// changed.
    pub fn reregister(&mut self, rng: &mut KeyRng, key: u32, change: Rereg) -> VerbsResult<u32> {
        let mr = self.by_key.get(&key).ok_or(VerbsError::NoSuchObject)?;
        if mr.windows > 0 {
            return Err(VerbsError::InvalidArgument(
                "memory windows are bound to the region",
            ));
        }
        let access = change.access.unwrap_or(mr.access);
        let (va, len) = match &change.translation {
            Some((va, mem)) => (*va, mem.len() as u64),
            None => (mr.va, mr.len),
        };
        // (An implicit region stays one only with on-demand paging.)
        Self::check_region(va, len, access)?;
        let old_pd = mr.pd;
        let new_pd = change.pd.unwrap_or(old_pd);
        let key = match change.translation {
            Some((va, mem)) => {
                let old = self.by_key.remove(&key).ok_or(VerbsError::NoSuchObject)?;
                old.region.revoke();
                self.pd_release(old.pd);
                let k = self.fresh_key(rng);
                self.insert(k, new_pd, va, mem, access);
                k
            }
            None => {
                let mr = self.by_key.get_mut(&key).ok_or(VerbsError::NoSuchObject)?;
                mr.access = access;
                mr.pd = new_pd;
                mr.valid = true;
                if new_pd != old_pd {
                    self.pd_release(old_pd);
                    *self.pds.entry(new_pd.0).or_default() += 1;
                }
                key
            }
        };
        Ok(key)
    }

    /// Number of regions and windows in a protection domain.
    pub fn count_in_pd(&self, pd: PdId) -> u32 {
        self.pds.get(&pd.0).copied().unwrap_or(0)
    }

    /// The region with this key.
    pub fn get(&self, key: u32) -> Option<&Mr> {
        self.by_key.get(&key)
    }

    pub(crate) fn get_mut(&mut self, key: u32) -> Option<&mut Mr> {
        self.by_key.get_mut(&key)
    }

    pub(crate) fn pd_hold(&mut self, pd: PdId) {
        *self.pds.entry(pd.0).or_default() += 1;
    }

    pub(crate) fn pd_drop(&mut self, pd: PdId) {
        self.pd_release(pd)
    }

    /// A fresh window index: not 0 or 0xffffff (so its keys are never 0 or
    /// 0xffffffff), not a window's, and no region key in its range.
    pub(crate) fn fresh_mw_index(&self, rng: &mut KeyRng) -> u32 {
        loop {
            let i = rng.next_u32() >> 8;
            if i != 0
                && i != 0x00ff_ffff
                && !self.mws.contains_key(&i)
                && !(0..=255u32).any(|b| self.by_key.contains_key(&(i << 8 | b)))
            {
                break i;
            }
        }
    }

    /// Invalidates a key (LOCAL_INV, or with `remote` SEND_WITH_INV
    /// arriving on QP `qpn`) for a QP in `pd`. A region: it must be in
    /// `pd` and have no windows bound. A window: a type 2 window, bound,
    /// with exactly this key, in `pd` (and for SEND_WITH_INV, bound to
    /// this QP); it becomes free for the next bind (IBA 10.6.7.2.5).
    pub fn invalidate(
        &mut self,
        key: u32,
        pd: PdId,
        qpn: Qpn,
        remote: bool,
    ) -> Result<(), AccessDenied> {
        if let Some(mr) = self.by_key.get_mut(&key) {
            if mr.pd != pd || mr.windows > 0 {
                return Err(AccessDenied);
            }
            mr.valid = false;
            return Ok(());
        }
        let mw = self.mws.get(&(key >> 8)).ok_or(AccessDenied)?;
        if mw.kind != MwType::Type2 || mw.rkey.0 != key || mw.pd != pd {
            return Err(AccessDenied);
        }
        let Some(b) = &mw.binding else {
            return Err(AccessDenied);
        };
        if remote && b.qpn != Some(qpn) {
            return Err(AccessDenied);
        }
        self.unbind(MwId(key >> 8));
        Ok(())
    }

    /// Checks a local scatter/gather list for `pd` with rights `need` and
    /// returns it resolved. `Err` is a local protection error.
    pub fn resolve_local(
        &self,
        pd: PdId,
        sges: &[Sge],
        need: Access,
    ) -> Result<SgList, AccessDenied> {
        let mut list = SgList::default();
        for s in sges {
            if s.length == 0 {
                continue;
            }
            let mr = self.by_key.get(&s.lkey).ok_or(AccessDenied)?;
            if mr.pd != pd || !mr.valid || !mr.access.contains(need) {
                return Err(AccessDenied);
            }
            let offset = mr.offset_of(s.addr, s.length as u64).ok_or(AccessDenied)?;
            list.spans.push(Span {
                region: mr.region.clone(),
                offset,
                len: s.length as usize,
            });
            list.total += s.length as u64;
        }
        Ok(list)
    }

    /// Checks a remote access of `len` bytes at `va` with `rkey` for QP
    /// `qpn` in `pd` needing rights `need`. The key names a region, or a
    /// memory window whose range and rights bound the access (a
    /// zero-based window takes `va` as an offset from its start). `Err`
    /// is a remote access error.
    pub fn resolve_remote(
        &self,
        pd: PdId,
        qpn: Qpn,
        rkey: RKey,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<Span, AccessDenied> {
        let (mr, offset) = self.remote_target(pd, qpn, rkey, va, len, need)?;
        Ok(Span {
            region: mr.region.clone(),
            offset,
            len: len as usize,
        })
    }

    /// What a FLUSH with `rkey` covers, after the checks of
    /// [`Self::resolve_remote`] with rights `need`: the range `[va, va +
    /// len)` (which may be empty: the key is checked all the same), or with
    /// `whole` (selectivity level "memory region") the whole region or
    /// window the key names, whatever the address and length (rxe skips
    /// the range check then). An implicit region has no whole to flush:
    /// its range is the RETH's.
    #[allow(clippy::too_many_arguments)]
    pub fn resolve_flush(
        &self,
        pd: PdId,
        qpn: Qpn,
        rkey: RKey,
        va: u64,
        len: u64,
        need: Access,
        whole: bool,
    ) -> Result<(Arc<Region>, usize, usize), AccessDenied> {
        let (va, len) = if !whole {
            (va, len)
        } else if let Some(mr) = self.by_key.get(&rkey.0) {
            if mr.len == u64::MAX {
                (va, len)
            } else {
                (mr.va, mr.len)
            }
        } else {
            let mw = self.mws.get(&(rkey.0 >> 8)).ok_or(AccessDenied)?;
            let b = mw.binding.as_ref().ok_or(AccessDenied)?;
            let start = if b.access.contains(Access::ZERO_BASED) {
                0
            } else {
                b.addr
            };
            (start, b.len)
        };
        let (mr, offset) = self.remote_target(pd, qpn, rkey, va, len, need)?;
        Ok((mr.region.clone(), offset, len as usize))
    }

    /// The region a remote key reaches and the offset of `[va, va + len)`
    /// in it, after every check of [`Self::resolve_remote`].
    pub(crate) fn remote_target(
        &self,
        pd: PdId,
        qpn: Qpn,
        rkey: RKey,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<(&Mr, usize), AccessDenied> {
        if let Some(mr) = self.by_key.get(&rkey.0) {
            if mr.pd != pd || !mr.valid || !mr.access.contains(need) {
                return Err(AccessDenied);
            }
            let offset = mr.offset_of(va, len).ok_or(AccessDenied)?;
            return Ok((mr, offset));
        }
        let mw = self.mws.get(&(rkey.0 >> 8)).ok_or(AccessDenied)?;
        let (mr_key, mr_va) = mw.check_access(pd, qpn, rkey, va, len, need)?;
        let mr = self.by_key.get(&mr_key).ok_or(AccessDenied)?;
        if !mr.valid {
            return Err(AccessDenied);
        }
        let offset = mr.offset_of(mr_va, len).ok_or(AccessDenied)?;
        Ok((mr, offset))
    }
}

/// A plain vector as region memory: for tests and the simulator.
pub struct VecMemory {
    bytes: std::sync::Mutex<Vec<u8>>,
}

impl VecMemory {
    /// `len` zero bytes.
    pub fn new(len: usize) -> Self {
        VecMemory {
            bytes: std::sync::Mutex::new(vec![0; len]),
        }
    }
    /// A copy of the contents.
    pub fn snapshot(&self) -> Vec<u8> {
        self.lock().clone()
    }
    /// Overwrites bytes at `offset`.
    pub fn fill_from(&self, offset: usize, src: &[u8]) {
        self.lock()[offset..offset + src.len()].copy_from_slice(src);
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        // A poisoned lock only means a panicking test thread held it; the
        // bytes are still the bytes.
        self.bytes.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn load(v: &[u8], offset: usize) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&v[offset..offset + 8]);
        u64::from_ne_bytes(a)
    }
}

impl RegionMemory for VecMemory {
    fn len(&self) -> usize {
        self.lock().len()
    }
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), Fault> {
        dst.copy_from_slice(&self.lock()[offset..offset + dst.len()]);
        Ok(())
    }
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), Fault> {
        self.lock()[offset..offset + src.len()].copy_from_slice(src);
        Ok(())
    }
    fn fetch_add(&self, offset: usize, add: u64) -> Result<u64, Fault> {
        let mut v = self.lock();
        let old = Self::load(&v, offset);
        v[offset..offset + 8].copy_from_slice(&old.wrapping_add(add).to_ne_bytes());
        Ok(old)
    }
    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> Result<u64, Fault> {
        let mut v = self.lock();
        let old = Self::load(&v, offset);
        if old == compare {
            v[offset..offset + 8].copy_from_slice(&swap.to_ne_bytes());
        }
        Ok(old)
    }
    fn atomic_write(&self, offset: usize, bytes: [u8; 8]) -> Result<(), Fault> {
        self.lock()[offset..offset + 8].copy_from_slice(&bytes);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q: Qpn = Qpn::new(0x11);

    #[test]
    fn checks_bounds_pd_and_rights() {
        let mut rng = KeyRng::from_seed(1);
        let mut t = MrTable::default();
        let mem: Arc<dyn RegionMemory> = Arc::new(VecMemory::new(64));
        let pd = PdId(1);
        let k = t
            .register(
                &mut rng,
                pd,
                0x1000,
                mem.clone(),
                Access::LOCAL_WRITE.with(Access::REMOTE_READ),
            )
            .unwrap();
        let rk = RKey(k);
        assert!(t
            .resolve_remote(pd, Q, rk, 0x1000, 64, Access::REMOTE_READ)
            .is_ok());
        assert!(t
            .resolve_remote(pd, Q, rk, 0x1001, 64, Access::REMOTE_READ)
            .is_err());
        assert!(t
            .resolve_remote(pd, Q, rk, 0xfff, 1, Access::REMOTE_READ)
            .is_err());
        assert!(t
            .resolve_remote(pd, Q, rk, u64::MAX, 2, Access::REMOTE_READ)
            .is_err());
        assert!(t
            .resolve_remote(pd, Q, rk, 0x1000, 8, Access::REMOTE_WRITE)
            .is_err());
        assert!(t
            .resolve_remote(PdId(2), Q, rk, 0x1000, 8, Access::REMOTE_READ)
            .is_err());
        assert!(t
            .resolve_remote(pd, Q, RKey(k ^ 1), 0x1000, 8, Access::REMOTE_READ)
            .is_err());
        let sges = [
            Sge {
                addr: 0x1010,
                length: 16,
                lkey: k,
            },
            Sge {
                addr: 0x1000,
                length: 4,
                lkey: k,
            },
        ];
        let l = t.resolve_local(pd, &sges, Access::LOCAL_WRITE).unwrap();
        assert_eq!(l.len(), 20);
        l.write(14, &[1, 2, 3, 4]).unwrap();
        let mut out = [0u8; 4];
        l.read(14, &mut out).unwrap();
        assert_eq!(out, [1, 2, 3, 4]);
        let mut whole = [0u8; 64];
        mem.read(0, &mut whole).unwrap();
        assert_eq!(&whole[0x1e..0x20], &[1, 2]);
        assert_eq!(&whole[0..2], &[3, 4]);
        t.invalidate(k, pd, Q, false).unwrap();
        assert!(t
            .resolve_remote(pd, Q, rk, 0x1000, 8, Access::REMOTE_READ)
            .is_err());
        assert!(t
            .register(
                &mut rng,
                pd,
                0,
                Arc::new(VecMemory::new(8)),
                Access::REMOTE_WRITE
            )
            .is_err());
    }
}
