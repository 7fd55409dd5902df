//! Verbs objects: protection domains, memory regions, completion queues,
//! queue pairs, shared receive queues, address handles. Each handle frees
//! its object when dropped.

use crate::device::Device;
use crate::error::{Error, Result};
use crate::event::CompletionChannel;
use crate::memory::{self, OdpRegion, RawRegion};
pub use crate::qp::{ConnectOptions, QpBuilder, QpEndpoint, QueuePair};
use softrdma_proto::*;
use softrdma_wire::grh::addr_of_gid;
use softrdma_wire::RKey;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

pub(crate) struct PdInner {
    pub(crate) dev: Device,
    pub(crate) id: PdId,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        let id = self.id;
        let _ = self.dev.release(|c| c.dealloc_pd(id));
    }
}

/// A protection domain: regions, QPs, SRQs and address handles created from
/// it can only be used together.
#[derive(Clone)]
pub struct ProtectionDomain {
    pub(crate) inner: Arc<PdInner>,
}

impl std::fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProtectionDomain({:?})", self.inner.id)
    }
}

impl ProtectionDomain {
    pub(crate) fn new(dev: Device, id: PdId) -> Self {
        ProtectionDomain {
            inner: Arc::new(PdInner { dev, id }),
        }
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.inner.dev
    }

    /// The core's handle.
    pub fn id(&self) -> PdId {
        self.inner.id
    }

    /// Allocates `len` zeroed, page-aligned bytes and registers them.
    /// With `Access::ON_DEMAND` the device reaches them page by page
    /// through the kernel (see the [`memory`](crate::memory) module).
    pub fn alloc_mr(&self, len: usize, access: Access) -> Result<MemoryRegion> {
        let r = RawRegion::allocate(len)
            .ok_or_else(|| Error::InvalidArgument(format!("cannot allocate {len} bytes")))?;
        let va = r.as_ptr() as u64;
        self.register(Some(Arc::new(r)), va, len, access)
    }

    /// Registers the program's own memory.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid for reads and writes until the returned
    /// region is dropped **and** every work request that names it has
    /// completed. The device may read and write those bytes at any time in
    /// between (remote peers, if `access` allows; local SGEs otherwise), so
    /// the program must not hold Rust references into them; see the
    /// [`memory`](crate::memory) module for the rules. With
    /// `Access::ON_DEMAND` the memory need not stay mapped: an access of
    /// memory that is gone is an access error, not a fault.
    pub unsafe fn register_mr(
        &self,
        ptr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<MemoryRegion> {
        // SAFETY: forwarded.
        unsafe { self.register_mr_iova(ptr, len, ptr as u64, access) }
    }

    /// [`Self::register_mr`] with the region addressed by peers and SGEs
    /// at `iova` instead of `ptr` (`ibv_reg_mr_iova`; iova 0 makes a
    /// zero-based region).
    ///
    /// # Safety
    /// As [`Self::register_mr`].
    pub unsafe fn register_mr_iova(
        &self,
        ptr: *mut u8,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<MemoryRegion> {
        let p = NonNull::new(ptr).ok_or_else(|| Error::InvalidArgument("null pointer".into()))?;
        // SAFETY: forwarded from the caller's contract.
        let r = unsafe { RawRegion::borrowed(p, len) };
        self.register(Some(Arc::new(r)), iova, len, access)
    }

    /// An implicit on-demand paging region: the whole address space of the
    /// process (`ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND | …)`),
    /// addressed by plain addresses. Memory that is not mapped when a
    /// request or a peer reaches it is an access error.
    ///
    /// # Safety
    /// Whoever holds the key may read (and, with the write rights, write)
    /// any mapped memory of the process, within `access`: only for
    /// programs that mean it.
    pub unsafe fn register_implicit_odp(&self, access: Access) -> Result<MemoryRegion> {
        if !access.contains(Access::ON_DEMAND) {
            return Err(Error::InvalidArgument(
                "an implicit region needs on-demand paging".into(),
            ));
        }
        self.register(None, 0, usize::MAX, access)
    }

    /// Registers `host` (the program-facing bytes; `None` for an implicit
    /// region) at `va`: pinned memory is reached directly, on-demand
    /// memory through the kernel.
    fn register(
        &self,
        host: Option<Arc<RawRegion>>,
        va: u64,
        len: usize,
        access: Access,
    ) -> Result<MemoryRegion> {
        let mem = Self::core_memory(host.as_ref(), len, access);
        let pd = self.inner.id;
        let key = self
            .inner
            .dev
            .shared()
            .with_core(|c, _| c.reg_mr(pd, va, mem, access))?;
        Ok(MemoryRegion {
            pd: self.clone(),
            key,
            region: host,
            len,
            va,
            access,
            gone: AtomicBool::new(false),
        })
    }

    fn core_memory(
        host: Option<&Arc<RawRegion>>,
        len: usize,
        access: Access,
    ) -> Arc<dyn RegionMemory> {
        match host {
            Some(r) if !access.contains(Access::ON_DEMAND) => r.clone(),
            Some(r) => Arc::new(OdpRegion::new(r.as_ptr() as usize, len)),
            None => Arc::new(OdpRegion::new(0, usize::MAX)),
        }
    }

    /// `ibv_alloc_mw`: a memory window of `kind` in this protection domain.
    pub fn alloc_mw(&self, kind: MwType) -> Result<MemoryWindow> {
        let pd = self.inner.id;
        let (id, _) = self
            .inner
            .dev
            .shared()
            .with_core(|c, _| c.alloc_mw(pd, kind))?;
        Ok(MemoryWindow {
            pd: self.clone(),
            id,
            kind,
        })
    }

    /// `ibv_advise_mr`: prefetch ranges of on-demand paging regions of this
    /// protection domain (`sges` name them by lkey); with `flush` the call
    /// returns once they are in and reports a range that is not mapped
    /// (EFAULT), otherwise it is best effort.
    pub fn advise_mr(&self, advice: Advice, flush: bool, sges: &[Sge]) -> Result<()> {
        let pd = self.inner.id;
        Ok(self
            .inner
            .dev
            .shared()
            .with_core(|c, _| c.advise_mr(pd, advice, flush, sges))?)
    }

    /// A builder for a queue pair of type `qp_type` on these CQs.
    pub fn qp_builder<'a>(
        &'a self,
        qp_type: QpType,
        send_cq: &'a CompletionQueue,
        recv_cq: &'a CompletionQueue,
    ) -> QpBuilder<'a> {
        QpBuilder {
            pd: self,
            send_cq,
            recv_cq,
            srq: None,
            init: QpInit {
                qp_type,
                pd: self.inner.id,
                send_cq: send_cq.id,
                recv_cq: recv_cq.id,
                srq: None,
                cap: QpCap::new(256, 4, 256),
                sq_sig_all: false,
            },
        }
    }

    /// `ibv_create_srq`.
    pub fn create_srq(&self, max_wr: u32, max_sge: u32, limit: u32) -> Result<SharedReceiveQueue> {
        let pd = self.inner.id;
        let id = self
            .inner
            .dev
            .shared()
            .with_core(|c, _| c.create_srq(pd, max_wr, max_sge, limit))?;
        Ok(SharedReceiveQueue {
            inner: Arc::new(SrqInner {
                pd: self.clone(),
                id,
                xrc: None,
            }),
        })
    }

    /// `ibv_create_ah`.
    pub fn create_ah(&self, av: AddressVector) -> Result<AddressHandle> {
        let pd = self.inner.id;
        let id = self
            .inner
            .dev
            .shared()
            .with_core(|c, _| c.create_ah(pd, av))?;
        Ok(AddressHandle {
            inner: Arc::new(AhInner {
                pd: self.clone(),
                id,
            }),
        })
    }

    /// An address handle for a peer's GID (`::ffff:a.b.c.d` or IPv6).
    pub fn create_ah_for_gid(&self, gid: [u8; 16]) -> Result<AddressHandle> {
        self.create_ah(AddressVector::to(addr_of_gid(gid)))
    }
}

/// A registered memory region. Its bytes are reached through the accessors
/// below (or the raw pointer, under the rules of [`memory`](crate::memory)).
pub struct MemoryRegion {
    pd: ProtectionDomain,
    key: u32,
    /// The bytes as the program sees them; `None` for an implicit region.
    region: Option<Arc<RawRegion>>,
    len: usize,
    va: u64,
    access: Access,
    /// Deregistered already (by [`MemoryRegion::deregister`]).
    gone: AtomicBool,
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MemoryRegion(va={:#x} len={} key={:#010x})",
            self.va,
            self.len(),
            self.key
        )
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        if self.gone.load(Ordering::Acquire) {
            return;
        }
        if self.pd.inner.dev.forked_away() {
            return; // the parent's (see `Device::forked_away`)
        }
        // When this returns, softrdma never touches the bytes again (see
        // the memory module's rules). Windows still bound to the region are
        // unbound first: a drop cannot fail.
        let key = self.key;
        let sh = self.pd.inner.dev.shared();
        sh.with_core(|c, _| c.unbind_region(key));
        let _ = sh.dereg_mr(key);
    }
}

impl MemoryRegion {
    /// `ibv_dereg_mr`, with its error: refused (the region stays, returned
    /// with the error) while memory windows are bound to it (IBA
    /// 10.6.7.2.6, EINVAL as rxe). Dropping the region deregisters it too,
    /// unbinding its windows first.
    pub fn deregister(self) -> std::result::Result<(), Box<(MemoryRegion, Error)>> {
        match self.pd.inner.dev.shared().dereg_mr(self.key) {
            Ok(()) => {
                self.gone.store(true, Ordering::Release);
                Ok(())
            }
            Err(e) => Err(Box::new((self, e.into()))),
        }
    }

    /// `ibv_rereg_mr`: moves the region to another protection domain,
    /// changes its rights, and/or (`translation`: pointer, length, iova)
    /// points it at other memory. A new memory gets new keys (the old ones
    /// stop working, as after deregistration; nothing touches the old
    /// memory once this returns); a PD or rights change keeps them. On an
    /// error nothing changed.
    ///
    /// # Safety
    /// A new memory follows the contract of
    /// [`ProtectionDomain::register_mr`].
    pub unsafe fn rereg(
        &mut self,
        pd: Option<&ProtectionDomain>,
        translation: Option<(*mut u8, usize, u64)>,
        access: Option<Access>,
    ) -> Result<()> {
        let access_now = access.unwrap_or(self.access);
        let mut host = None;
        let mut change = softrdma_proto::Rereg {
            pd: pd.map(|p| p.id()),
            access,
            translation: None,
        };
        if let Some((ptr, len, iova)) = translation {
            let p =
                NonNull::new(ptr).ok_or_else(|| Error::InvalidArgument("null pointer".into()))?;
            // SAFETY: forwarded from the caller's contract.
            let r = Arc::new(unsafe { RawRegion::borrowed(p, len) });
            let mem = ProtectionDomain::core_memory(Some(&r), len, access_now);
            change.translation = Some((iova, mem));
            host = Some((r, len, iova));
        } else if access.is_some_and(|a| {
            a.contains(Access::ON_DEMAND) != self.access.contains(Access::ON_DEMAND)
        }) {
            // Paging mode changes: the same memory, reached the other way.
            let mem = ProtectionDomain::core_memory(self.region.as_ref(), self.len, access_now);
            change.translation = Some((self.va, mem));
            host = Some((
                self.region.clone().ok_or_else(|| {
                    Error::InvalidArgument("an implicit region stays on demand".into())
                })?,
                self.len,
                self.va,
            ));
        }
        let key = self.key;
        let new_key = self.pd.inner.dev.shared().rereg_mr(key, change)?;
        self.key = new_key;
        if let Some(pd) = pd {
            self.pd = pd.clone();
        }
        if let Some((r, len, iova)) = host {
            self.region = Some(r);
            self.len = len;
            self.va = iova;
        }
        self.access = access_now;
        Ok(())
    }

    /// Local key for SGEs.
    pub fn lkey(&self) -> u32 {
        self.key
    }
    /// Remote key for peers.
    pub fn rkey(&self) -> RKey {
        RKey(self.key)
    }
    /// Virtual address of the first byte (what SGEs and peers use).
    pub fn addr(&self) -> u64 {
        self.va
    }
    /// Length in bytes (`usize::MAX` for an implicit region).
    pub fn len(&self) -> usize {
        self.len
    }
    /// True for an empty region.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Rights granted.
    pub fn access(&self) -> Access {
        self.access
    }
    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }
    /// An SGE for `len` bytes at `offset`.
    pub fn sge(&self, offset: usize, len: u32) -> Sge {
        Sge {
            addr: self.va + offset as u64,
            length: len,
            lkey: self.key,
        }
    }
    fn host(&self) -> &RawRegion {
        self.region
            .as_ref()
            .expect("an implicit region has no bytes of its own")
    }
    /// Raw pointer to the first byte (see the module rules; null for an
    /// implicit region).
    pub fn as_ptr(&self) -> *mut u8 {
        self.region
            .as_ref()
            .map_or(std::ptr::null_mut(), |r| r.as_ptr())
    }
    /// Copies bytes out, with the atomic copies of the
    /// [`memory`](crate::memory) rules (panics out of bounds).
    pub fn read(&self, offset: usize, dst: &mut [u8]) {
        memory::program_read(self.host(), offset, dst)
    }
    /// Copies bytes in, with the atomic copies of the
    /// [`memory`](crate::memory) rules (panics out of bounds).
    pub fn write(&self, offset: usize, src: &[u8]) {
        memory::program_write(self.host(), offset, src)
    }
    /// `len` bytes at `offset`.
    pub fn to_vec(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.read(offset, &mut v);
        v
    }
    /// One byte, with acquire ordering: spin on it to see a remote WRITE land.
    pub fn load_u8(&self, offset: usize) -> u8 {
        memory::load_u8(self.host(), offset)
    }
    /// The 8 bytes at `offset` (8-byte aligned) as an atomic, coherent with
    /// remote atomics executed by the device.
    pub fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        memory::atomic_u64(self.host(), offset)
    }
}

/// A memory window (`ibv_mw`): a range of a region lent to peers under an
/// R_Key of its own, bound by a BIND_MW work request
/// ([`QueuePair::bind_mw`], or a [`SendWr`] with `bind`). Dropping it
/// deallocates it: its keys stop working at once.
pub struct MemoryWindow {
    pd: ProtectionDomain,
    id: MwId,
    kind: MwType,
}

impl std::fmt::Debug for MemoryWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MemoryWindow({:?} {:?} {})",
            self.kind,
            self.id,
            self.rkey()
        )
    }
}

impl Drop for MemoryWindow {
    fn drop(&mut self) {
        let id = self.id;
        let _ = self.pd.inner.dev.release(|c| c.dealloc_mw(id));
    }
}

impl MemoryWindow {
    /// The core's handle.
    pub fn id(&self) -> MwId {
        self.id
    }
    /// Type 1 or 2.
    pub fn kind(&self) -> MwType {
        self.kind
    }
    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }
    /// The current R_Key (the last successful bind's key byte).
    pub fn rkey(&self) -> RKey {
        let id = self.id;
        self.pd
            .inner
            .dev
            .shared()
            .peek_core(|c| c.mw(id).map_or(RKey(0), |m| m.0))
    }
}

pub(crate) struct CqInner {
    pub(crate) dev: Device,
    id: CqId,
    channel: Option<CompletionChannel>,
    /// When a poll last found the CQ empty (see `Shared::poll_cq`).
    empty_at: std::sync::atomic::AtomicU64,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        if self.dev.forked_away() {
            return; // the parent's (see `Device::forked_away`)
        }
        let id = self.id;
        let _ = self.dev.shared().with_core(|c, _| c.destroy_cq(id));
        if self.channel.is_some() {
            self.dev.shared().channels.lock().remove(&id);
        }
    }
}

/// A completion queue.
#[derive(Clone)]
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
    id: CqId,
}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CompletionQueue({:?})", self.id)
    }
}

/// An empty completion, for filling arrays before polling.
pub const EMPTY_WC: Wc = Wc::EMPTY;

impl CompletionQueue {
    pub(crate) fn new(dev: Device, id: CqId, channel: Option<CompletionChannel>) -> Self {
        CompletionQueue {
            inner: Arc::new(CqInner {
                dev,
                id,
                channel,
                empty_at: std::sync::atomic::AtomicU64::new(u64::MAX),
            }),
            id,
        }
    }

    /// The core's handle.
    pub fn id(&self) -> CqId {
        self.id
    }

    /// Non-blocking poll: moves up to `out.len()` completions into `out`.
    /// When none is waiting, processes what has arrived on the socket first
    /// (so a spinning poller needs no thread switch).
    pub fn poll(&self, out: &mut [Wc]) -> Result<usize> {
        let sh = self.inner.dev.shared();
        let id = self.id;
        let seen = &self.inner.empty_at;
        let n = sh.poll_cq(seen, !out.is_empty(), |c| c.poll_cq(id, out))?;
        if n > 0 {
            sh.note_app_poll();
            return Ok(n);
        }
        if sh.progress_inline() > 0 {
            return Ok(sh.poll_cq(seen, !out.is_empty(), |c| c.poll_cq(id, out))?);
        }
        Ok(0)
    }

    /// [`CompletionQueue::poll`], with the device time each completion was
    /// generated at ([`Device::clock_ns`]) in `at` (as long as `out`).
    pub fn poll_stamped(&self, out: &mut [Wc], at: &mut [u64]) -> Result<usize> {
        let sh = self.inner.dev.shared();
        let id = self.id;
        let seen = &self.inner.empty_at;
        let mut stamps = [Instant(0); 16];
        let want = out.len().min(at.len()).min(stamps.len());
        let mut n = sh.poll_cq(seen, want > 0, |c| {
            c.poll_cq_stamped(id, &mut out[..want], &mut stamps[..want])
        })?;
        if n > 0 {
            sh.note_app_poll();
        } else if sh.progress_inline() > 0 {
            n = sh.poll_cq(seen, want > 0, |c| {
                c.poll_cq_stamped(id, &mut out[..want], &mut stamps[..want])
            })?;
        }
        for (t, s) in at.iter_mut().zip(&stamps[..n]) {
            *t = s.0;
        }
        Ok(n)
    }

    /// Polls until `n` completions arrived or `timeout` passed; returns them.
    pub fn wait(&self, n: usize, timeout: std::time::Duration) -> Result<Vec<Wc>> {
        let deadline = std::time::Instant::now() + timeout;
        let mut out = Vec::with_capacity(n);
        let mut buf = [EMPTY_WC; 32];
        while out.len() < n {
            let k = self.poll(&mut buf[..(n - out.len()).min(32)])?;
            out.extend_from_slice(&buf[..k]);
            if k == 0 {
                if std::time::Instant::now() >= deadline {
                    break;
                }
                std::thread::yield_now();
            }
        }
        Ok(out)
    }

    /// Arms the completion channel for the next completion (or the next
    /// solicited/error one).
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        let id = self.id;
        Ok(self
            .inner
            .dev
            .shared()
            .with_core(|c, _| c.req_notify_cq(id, solicited_only))?)
    }

    /// The channel, if the CQ has one.
    pub fn channel(&self) -> Option<&CompletionChannel> {
        self.inner.channel.as_ref()
    }

    /// Capacity.
    pub fn depth(&self) -> Result<u32> {
        let id = self.id;
        Ok(self.inner.dev.shared().peek_core(|c| c.cq_depth(id))?)
    }

    /// `ibv_resize_cq`.
    pub fn resize(&self, depth: u32) -> Result<()> {
        let id = self.id;
        Ok(self
            .inner
            .dev
            .shared()
            .with_core(|c, _| c.resize_cq(id, depth))?)
    }

    /// A stream of completions for async code (needs a channel).
    #[cfg(feature = "tokio")]
    pub fn stream(&self) -> Result<crate::stream::WcStream> {
        crate::stream::WcStream::new(self.clone())
    }
}

pub(crate) struct SrqInner {
    pub(crate) pd: ProtectionDomain,
    pub(crate) id: SrqId,
    /// An XRC SRQ's domain, CQ and number (see `crate::xrc`).
    pub(crate) xrc: Option<crate::xrc::XrcSrqParts>,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        let id = self.id;
        let _ = self.pd.inner.dev.release(|c| c.destroy_srq(id));
    }
}

/// A shared receive queue.
#[derive(Clone)]
pub struct SharedReceiveQueue {
    pub(crate) inner: Arc<SrqInner>,
}

impl SharedReceiveQueue {
    /// The core's handle.
    pub fn id(&self) -> SrqId {
        self.inner.id
    }
    /// Runs `f` on the core with this SRQ's handle.
    fn on_core<R>(
        &self,
        f: impl FnOnce(&mut softrdma_proto::Device, SrqId) -> VerbsResult<R>,
    ) -> Result<R> {
        let id = self.inner.id;
        Ok(self
            .inner
            .pd
            .inner
            .dev
            .shared()
            .with_core(|c, _| f(c, id))?)
    }
    /// `ibv_post_srq_recv`.
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.on_core(|c, id| c.post_srq_recv(id, wr))
    }
    /// Arms the limit event (0 disarms).
    pub fn set_limit(&self, limit: u32) -> Result<()> {
        self.on_core(|c, id| c.modify_srq(id, None, Some(limit)))
    }
    /// `ibv_modify_srq`: a new depth (resize; the posted receives stay)
    /// and/or the limit, checked and applied together.
    pub fn modify(&self, max_wr: Option<u32>, limit: Option<u32>) -> Result<()> {
        self.on_core(|c, id| c.modify_srq(id, max_wr, limit))
    }
    /// (max_wr, max_sge, limit, queued).
    pub fn query(&self) -> Result<(u32, u32, u32, u32)> {
        let id = self.inner.id;
        Ok(self
            .inner
            .pd
            .inner
            .dev
            .shared()
            .peek_core(|c| c.query_srq(id))?)
    }
}

struct AhInner {
    pd: ProtectionDomain,
    id: AhId,
}

impl Drop for AhInner {
    fn drop(&mut self) {
        let id = self.id;
        let _ = self.pd.inner.dev.release(|c| c.destroy_ah(id));
    }
}

/// An address handle (UD destinations).
#[derive(Clone)]
pub struct AddressHandle {
    inner: Arc<AhInner>,
}

impl AddressHandle {
    /// The core's handle.
    pub fn id(&self) -> AhId {
        self.inner.id
    }
}
