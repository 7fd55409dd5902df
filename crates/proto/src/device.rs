//! The device: object tables, the receive path (ICRC, P_Key, QP lookup,
//! peer check, dispatch), the transmit round-robin and the timers.

pub use crate::attr::{Advice, DeviceAttr, OdpCaps};
use crate::counters::Counters;
use crate::cq::Cq;
pub use crate::datagram::{
    guid_of, DeviceConfig, Event, Gather, RecvMeta, ResponderView, Transmit, WriteChunking,
    MAX_GATHER,
};
use crate::gsi::Gsi;
use crate::limits;
use crate::memory::{MrTable, RegionMemory, Rereg};
use crate::note::{DropReason, Notes};
use crate::qp::{Qp, Srq};
use crate::qpn::QpnAlloc;
use crate::verbs::*;
use crate::{Instant, KeyRng, Slab, U32Map};
use softrdma_wire::icrc::solve_ipv4_id;
use softrdma_wire::ip::IpRepr;
use softrdma_wire::{IbPacket, PKey, PacketRepr, Qpn, Transport};
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

/// See [`Device::set_qpn_claim`].
pub type QpnClaim = Box<dyn FnMut(u32, bool) -> bool + Send>;

/// The RNIC.
pub struct Device {
    pub(crate) cfg: DeviceConfig,
    pub(crate) rng: KeyRng,
    pub(crate) pds: Slab<()>,
    pub(crate) mrs: MrTable,
    pub(crate) cqs: Slab<Cq>,
    pub(crate) srqs: Slab<Srq>,
    pub(crate) ahs: Slab<AddressVector>,
    pub(crate) ah_pd: U32Map<PdId>,
    pub(crate) qps: Slab<Qp>,
    pub(crate) qpn_map: U32Map<u32>,
    /// Draws QP numbers at random (ReDMArk V5; see the `qpn` module).
    pub(crate) qpns: QpnAlloc,
    /// When the device is shared by several processes: asks whoever hands
    /// out the device's QP numbers whether a drawn number may be this
    /// process's (`true`: yes), or (`false` second argument) gives one
    /// back. `None`: this process is the whole device.
    pub(crate) qpn_claim: Option<QpnClaim>,
    pub(crate) tx_ready: VecDeque<u32>,
    /// Armed timers as (deadline, QP slot), one entry per QP whose
    /// `deadline()` is set; `sync_timer` keeps them in step after every
    /// input that reaches a QP, so the earliest is at hand without a scan.
    pub(crate) timers: BTreeSet<(Instant, u32)>,
    pub(crate) events: VecDeque<Event>,
    /// Drops that belong to no QP, and the totals of destroyed QPs.
    pub(crate) counters: Counters,
    /// Notes for the driver's log, when it asked for them.
    pub(crate) notes: Notes,
    /// Sequence number of the last zero-copy datagram handed out.
    pub(crate) gather_seq: u64,
    /// Zero-copy datagrams the driver has released (all up to this one).
    pub(crate) released: u64,
    /// Completions waiting in CQs for a release.
    pub(crate) gated: usize,
    /// QP 1: MADs for the driver's communication manager (see `gsi`).
    pub(crate) gsi: Gsi,
    /// Packets refused so far (see [`Device::refusals`]).
    pub(crate) refusals: u64,
    /// XRC domains (see the `xrc` module).
    pub(crate) xrcds: Slab<crate::xrc::Xrcd>,
    /// XRC SRQ numbers to SRQ slots.
    pub(crate) xrc_srqns: U32Map<u32>,
    /// Multicast groups and their attached QPs (see the `mcast` module).
    pub(crate) mcast: crate::mcast::Groups,
}

/// The context a QP's transport runs in (`qp::Ctx`), from the device's
/// tables, at `now`.
macro_rules! ctx {
    ($self:ident, $now:expr) => {
        $crate::qp::Ctx {
            now: $now,
            mrs: &mut $self.mrs,
            cqs: &mut $self.cqs,
            srqs: &mut $self.srqs,
            xrc_srqns: &$self.xrc_srqns,
            ahs: &$self.ahs,
            events: &mut $self.events,
            local_ip: $self.cfg.local_ip,
            udp_src_port: $self.cfg.udp_src_port,
            port_mtu: $self.cfg.port_mtu,
            gather: false,
            write_chunking: $self.cfg.write_chunking,
            next_gather_seq: $self.gather_seq + 1,
            released: $self.released,
            gated: &mut $self.gated,
        }
    };
}

pub(crate) use ctx;

impl Device {
    /// A device with no objects.
    pub fn new(cfg: DeviceConfig) -> Self {
        let rng = match cfg.key {
            Some(k) => KeyRng::new(k),
            None => KeyRng::from_seed(cfg.seed),
        };
        Device {
            cfg,
            rng,
            pds: Slab::default(),
            mrs: MrTable::default(),
            cqs: Slab::default(),
            srqs: Slab::default(),
            ahs: Slab::default(),
            ah_pd: U32Map::default(),
            qps: Slab::default(),
            qpn_map: U32Map::default(),
            qpns: QpnAlloc::default(),
            qpn_claim: None,
            tx_ready: VecDeque::new(),
            timers: BTreeSet::new(),
            events: VecDeque::new(),
            counters: Counters::default(),
            notes: Notes::default(),
            gather_seq: 0,
            released: 0,
            gated: 0,
            gsi: Gsi::default(),
            refusals: 0,
            xrcds: Slab::default(),
            xrc_srqns: U32Map::default(),
            mcast: crate::mcast::Groups::default(),
        }
    }

    /// Shares the QP number space with other processes: every number
    /// drawn is claimed with `claim(n, true)` (a `false` answer draws
    /// again), every destroyed QP's number is given back with
    /// `claim(n, false)`.
    pub fn set_qpn_claim(&mut self, claim: QpnClaim) {
        self.qpn_claim = Some(claim);
    }

    /// The configuration.
    pub fn config(&self) -> &DeviceConfig {
        &self.cfg
    }

    /// The port's active MTU changed (its interface's did): UD messages
    /// from now on are limited by it (rxe's `rxe_set_mtu`). Connected QPs
    /// keep their path MTU. Clamped to 256..=4096 bytes.
    pub fn set_port_mtu(&mut self, bytes: u32) {
        self.cfg.port_mtu = bytes.clamp(limits::MIN_MTU, limits::MAX_MTU);
    }

    /// Attributes for `query_device`.
    pub fn query_device(&self) -> DeviceAttr {
        DeviceAttr {
            node_guid: self.cfg.node_guid,
            max_mr_size: limits::MAX_MR_SIZE,
            max_qp: limits::MAX_QP as u32,
            max_qp_wr: limits::MAX_QP_WR,
            max_sge: limits::MAX_SGE,
            max_sge_rd: limits::MAX_SGE_RD,
            max_cq: limits::MAX_CQ as u32,
            max_cqe: limits::MAX_CQE,
            max_mr: limits::MAX_MR as u32,
            max_pd: limits::MAX_PD as u32,
            max_qp_rd_atom: limits::MAX_RD_ATOMIC as u32,
            max_qp_init_rd_atom: limits::MAX_RD_ATOMIC as u32,
            max_srq: limits::MAX_SRQ as u32,
            max_srq_wr: limits::MAX_SRQ_WR,
            max_srq_sge: limits::MAX_SRQ_SGE,
            max_ah: limits::MAX_AH as u32,
            max_pkeys: limits::PKEY_TABLE_LEN,
            max_inline_data: limits::MAX_INLINE_DATA,
            max_mw: limits::MAX_MW as u32,
            odp: OdpCaps::softrdma(),
        }
    }

    /// A random PSN, for applications that want one (24 bits).
    pub fn random_psn(&mut self) -> softrdma_wire::Psn {
        softrdma_wire::Psn::new(self.rng.next_u32())
    }

    // ---------------------------------------------------------- PDs ----

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&mut self) -> VerbsResult<PdId> {
        if self.pds.len() >= limits::MAX_PD {
            return Err(VerbsError::NoMemory);
        }
        Ok(PdId(self.pds.insert(())))
    }

    /// `ibv_dealloc_pd`: fails with `Busy` while anything uses it.
    pub fn dealloc_pd(&mut self, pd: PdId) -> VerbsResult<()> {
        self.pds.get(pd.0).ok_or(VerbsError::NoSuchObject)?;
        // An XRC TGT QP's PD is that of the SRQ of its current request:
        // not its own.
        let used = self.mrs.count_in_pd(pd) > 0
            || self
                .qps
                .iter()
                .any(|(_, q)| q.pd == pd && q.qp_type != QpType::XrcRecv)
            || self.srqs.iter().any(|(_, s)| s.pd == pd)
            || self.ah_pd.values().any(|p| *p == pd);
        if used {
            return Err(VerbsError::Busy);
        }
        self.pds.remove(pd.0);
        Ok(())
    }

    pub(crate) fn check_pd(&self, pd: PdId) -> VerbsResult<()> {
        self.pds
            .get(pd.0)
            .map(|_| ())
            .ok_or(VerbsError::NoSuchObject)
    }

    // ---------------------------------------------------------- MRs ----

    /// `ibv_reg_mr`: registers `mem`, addressed by peers and SGEs at `va`.
    /// Returns the key (lkey = rkey).
    pub fn reg_mr(
        &mut self,
        pd: PdId,
        va: u64,
        mem: Arc<dyn RegionMemory>,
        access: Access,
    ) -> VerbsResult<u32> {
        self.check_pd(pd)?;
        self.mrs.register(&mut self.rng, pd, va, mem, access)
    }

    /// [`Device::reg_mr`] with a key the caller chooses (lkey = rkey = `key`).
    ///
    /// For replaying captured traffic and for tests, where the peer's
    /// requests already carry the R_Key; applications use `reg_mr`, whose
    /// keys are unguessable. Fails with `InvalidArgument` for key 0 and with
    /// `Busy` when a region already has the key.
    pub fn reg_mr_with_key(
        &mut self,
        pd: PdId,
        va: u64,
        mem: Arc<dyn RegionMemory>,
        access: Access,
        key: u32,
    ) -> VerbsResult<u32> {
        self.check_pd(pd)?;
        self.mrs.register_with_key(key, pd, va, mem, access)
    }

    /// `ibv_dereg_mr`. Refused while memory windows are bound to the
    /// region.
    pub fn dereg_mr(&mut self, key: u32) -> VerbsResult<()> {
        self.mrs.deregister(key)
    }

    /// `ibv_rereg_mr` (see [`MrTable::reregister`]): returns the region's
    /// key, new when the memory changed.
    pub fn rereg_mr(&mut self, key: u32, change: Rereg) -> VerbsResult<u32> {
        if let Some(pd) = change.pd {
            self.check_pd(pd)?;
        }
        self.mrs.reregister(&mut self.rng, key, change)
    }

    /// `ibv_advise_mr`: prefetches the ranges of on-demand paging regions
    /// that `sges` name (lkeys of regions in `pd`). With `flush`
    /// (IBV_ADVISE_MR_FLAG_FLUSH) a range that cannot be brought in is an
    /// error (`Fault`); without it, advice is best effort. Errors as the
    /// man page: a key that names no region `Fault` (EFAULT), another
    /// protection domain or a write prefetch of a region without local
    /// write `PermissionDenied` (EPERM), a region without on-demand paging
    /// `InvalidArgument` (EINVAL, as rxe), a range outside the region
    /// `Fault`.
    pub fn advise_mr(
        &mut self,
        pd: PdId,
        advice: Advice,
        flush: bool,
        sges: &[Sge],
    ) -> VerbsResult<()> {
        self.check_pd(pd)?;
        if sges.is_empty() {
            return Err(VerbsError::InvalidArgument("no scatter/gather entry"));
        }
        let write = advice == Advice::PrefetchWrite;
        let mut todo = Vec::with_capacity(sges.len());
        for s in sges {
            let mr = self.mrs.get(s.lkey).ok_or(VerbsError::Fault)?;
            if mr.pd != pd {
                return Err(VerbsError::PermissionDenied);
            }
            if !mr.access.contains(Access::ON_DEMAND) {
                return Err(VerbsError::InvalidArgument(
                    "not an on-demand paging region",
                ));
            }
            if write && !mr.access.contains(Access::LOCAL_WRITE) {
                return Err(VerbsError::PermissionDenied);
            }
            let off = mr
                .offset_of(s.addr, s.length as u64)
                .ok_or(VerbsError::Fault)?;
            todo.push((mr.region.clone(), off, s.length as usize));
        }
        if advice == Advice::PrefetchNoFault {
            return Ok(());
        }
        for (region, off, len) in todo {
            if region.prefetch(off, len, write).is_err() && flush {
                return Err(VerbsError::Fault);
            }
        }
        Ok(())
    }

    // ---------------------------------------------------------- MWs ----

    /// `ibv_alloc_mw`: a window of type `kind` in `pd`; returns its handle
    /// and R_Key. (Type 3 and other numbers are refused by the caller:
    /// [`MwType`] has 1 and 2 only.)
    pub fn alloc_mw(&mut self, pd: PdId, kind: MwType) -> VerbsResult<(MwId, softrdma_wire::RKey)> {
        self.check_pd(pd)?;
        let rkey = self.mrs.alloc_mw(&mut self.rng, pd, kind)?;
        Ok((MwId(rkey.0 >> 8), rkey))
    }

    /// `ibv_dealloc_mw`: unbinds (if bound) and frees the window; its keys
    /// stop working at once.
    pub fn dealloc_mw(&mut self, mw: MwId) -> VerbsResult<()> {
        self.mrs.dealloc_mw(mw)
    }

    /// Unbinds the windows bound to the region `key` (for a deregistration
    /// that cannot be refused, as a handle's drop in Rust).
    pub fn unbind_region(&mut self, key: u32) {
        self.mrs.unbind_region(key)
    }

    /// A window's current R_Key, type and protection domain.
    pub fn mw(&self, mw: MwId) -> Option<(softrdma_wire::RKey, MwType, PdId)> {
        self.mrs.mw_info(mw)
    }

    /// Region lookup (for the API layers).
    pub fn mr(&self, key: u32) -> Option<&crate::memory::Mr> {
        self.mrs.get(key)
    }

    // ---------------------------------------------------------- CQs ----

    /// `ibv_create_cq`.
    pub fn create_cq(&mut self, depth: u32) -> VerbsResult<CqId> {
        if depth == 0 || depth > limits::MAX_CQE {
            return Err(VerbsError::InvalidArgument("cqe out of range"));
        }
        if self.cqs.len() >= limits::MAX_CQ {
            return Err(VerbsError::NoMemory);
        }
        Ok(CqId(self.cqs.insert(Cq::new(depth as usize))))
    }

    /// `ibv_destroy_cq`: `Busy` while a QP uses it.
    pub fn destroy_cq(&mut self, cq: CqId) -> VerbsResult<()> {
        let c = self.cqs.get(cq.0).ok_or(VerbsError::NoSuchObject)?;
        if c.users > 0 {
            return Err(VerbsError::Busy);
        }
        self.gated -= c.gated_len();
        self.cqs.remove(cq.0);
        Ok(())
    }

    /// `ibv_resize_cq`.
    pub fn resize_cq(&mut self, cq: CqId, depth: u32) -> VerbsResult<()> {
        if depth == 0 || depth > limits::MAX_CQE {
            return Err(VerbsError::InvalidArgument("cqe out of range"));
        }
        let c = self.cqs.get_mut(cq.0).ok_or(VerbsError::NoSuchObject)?;
        if c.resize(depth as usize) {
            Ok(())
        } else {
            Err(VerbsError::InvalidArgument(
                "fewer entries than queued completions",
            ))
        }
    }

    /// Depth of a CQ.
    pub fn cq_depth(&self, cq: CqId) -> VerbsResult<u32> {
        Ok(self.cqs.get(cq.0).ok_or(VerbsError::NoSuchObject)?.depth() as u32)
    }

    /// `ibv_poll_cq`: moves completions into `out`, returns how many.
    pub fn poll_cq(&mut self, cq: CqId, out: &mut [Wc]) -> VerbsResult<usize> {
        let c = self.cqs.get_mut(cq.0).ok_or(VerbsError::NoSuchObject)?;
        Ok(c.poll(out))
    }

    /// [`Device::poll_cq`] with the time each completion was generated at
    /// (`at` as long as `out`).
    pub fn poll_cq_stamped(
        &mut self,
        cq: CqId,
        out: &mut [Wc],
        at: &mut [Instant],
    ) -> VerbsResult<usize> {
        let c = self.cqs.get_mut(cq.0).ok_or(VerbsError::NoSuchObject)?;
        Ok(c.poll_stamped(out, at))
    }

    /// `ibv_req_notify_cq`.
    pub fn req_notify_cq(&mut self, cq: CqId, solicited_only: bool) -> VerbsResult<()> {
        let c = self.cqs.get_mut(cq.0).ok_or(VerbsError::NoSuchObject)?;
        c.arm(solicited_only);
        Ok(())
    }

    // ---------------------------------------------------------- AHs ----

    /// `ibv_create_ah`.
    pub fn create_ah(&mut self, pd: PdId, av: AddressVector) -> VerbsResult<AhId> {
        self.check_pd(pd)?;
        if av.dest.is_ipv4() != self.cfg.local_ip.is_ipv4() || av.dest.is_unspecified() {
            return Err(VerbsError::InvalidArgument(
                "address family differs from the device's",
            ));
        }
        if self.ahs.len() >= limits::MAX_AH {
            return Err(VerbsError::NoMemory);
        }
        let id = self.ahs.insert(av);
        self.ah_pd.insert(id, pd);
        Ok(AhId(id))
    }

    /// `ibv_destroy_ah`.
    pub fn destroy_ah(&mut self, ah: AhId) -> VerbsResult<()> {
        self.ahs.remove(ah.0).ok_or(VerbsError::NoSuchObject)?;
        self.ah_pd.remove(&ah.0);
        Ok(())
    }

    // ---------------------------------------------------------- QPs ----

    fn qp_idx(&self, qpn: Qpn) -> VerbsResult<u32> {
        self.qpn_map
            .get(&qpn.value())
            .copied()
            .ok_or(VerbsError::NoSuchObject)
    }

    /// `ibv_create_qp`: returns the QP number. Capabilities are checked
    /// against the limits and rounded up to at least 1.
    pub fn create_qp(&mut self, init: &QpInit) -> VerbsResult<(Qpn, QpCap)> {
        let cap = self.check_qp_init(init)?;
        let qpn = self.draw_qpn()?;
        self.insert_qp(init, cap, qpn);
        Ok((qpn, cap))
    }

    /// [`Device::create_qp`] with a QP number the caller chooses.
    ///
    /// For replaying captured traffic and for tests, where the peer's
    /// packets already name the QP; applications use `create_qp`. Fails with
    /// `InvalidArgument` for the special QPs 0 and 1, and with `Busy` when a
    /// QP already has the number.
    pub fn create_qp_with_qpn(&mut self, init: &QpInit, qpn: Qpn) -> VerbsResult<QpCap> {
        if crate::qpn::is_reserved(qpn.value()) {
            return Err(VerbsError::InvalidArgument(
                "QPs 0, 1 and 0xffffff are reserved",
            ));
        }
        if self.qpn_map.contains_key(&qpn.value()) {
            return Err(VerbsError::Busy);
        }
        let cap = self.check_qp_init(init)?;
        self.insert_qp(init, cap, qpn);
        Ok(cap)
    }

    /// Validates `create_qp` arguments; returns the capabilities granted.
    fn check_qp_init(&self, init: &QpInit) -> VerbsResult<QpCap> {
        if init.qp_type == QpType::XrcRecv {
            return Err(VerbsError::InvalidArgument(
                "an XRC TGT QP is created in an XRC domain (create_xrc_tgt_qp)",
            ));
        }
        self.check_pd(init.pd)?;
        if self.cqs.get(init.send_cq.0).is_none() || self.cqs.get(init.recv_cq.0).is_none() {
            return Err(VerbsError::InvalidArgument("unknown CQ"));
        }
        if let Some(s) = init.srq {
            // An XRC SRQ takes requests through TGT QPs only (uverbs'
            // create_qp: EINVAL).
            if self.srqs.get(s.0).is_none_or(|s| s.xrc.is_some()) {
                return Err(VerbsError::InvalidArgument("unknown or XRC SRQ"));
            }
        }
        let c = init.cap;
        if c.max_send_wr > limits::MAX_QP_WR
            || c.max_recv_wr > limits::MAX_QP_WR
            || c.max_send_sge > limits::MAX_SGE
            || c.max_recv_sge > limits::MAX_SGE
            || c.max_inline_data > limits::MAX_INLINE_DATA
        {
            return Err(VerbsError::InvalidArgument(
                "QP capabilities above device limits",
            ));
        }
        if self.qps.len() >= limits::MAX_QP {
            return Err(VerbsError::NoMemory);
        }
        // An XRC INI QP has no receive queue (uverbs' create_qp sets its
        // receive capabilities to 0).
        let no_rq = init.srq.is_some() || init.qp_type == QpType::XrcSend;
        Ok(QpCap {
            max_send_wr: c.max_send_wr.max(1),
            max_recv_wr: if no_rq { 0 } else { c.max_recv_wr.max(1) },
            max_send_sge: c.max_send_sge.max(1),
            max_recv_sge: if no_rq { 0 } else { c.max_recv_sge.max(1) },
            // Inline data is always possible up to the device limit.
            max_inline_data: limits::MAX_INLINE_DATA.max(c.max_inline_data),
        })
    }

    /// A fresh QP number, claimed from the shared device if there is one.
    pub(crate) fn draw_qpn(&mut self) -> VerbsResult<Qpn> {
        for _ in 0..crate::limits::QPN_CLAIM_TRIES {
            let map = &self.qpn_map;
            let qpn = self
                .qpns
                .alloc(&mut self.rng, |n| map.contains_key(&n))
                .ok_or(VerbsError::NoMemory)?;
            let ok = match &mut self.qpn_claim {
                None => true,
                Some(claim) => claim(qpn.value(), true),
            };
            if ok {
                return Ok(qpn);
            }
        }
        Err(VerbsError::NoMemory)
    }

    fn insert_qp(&mut self, init: &QpInit, cap: QpCap, qpn: Qpn) {
        let mut init2 = *init;
        init2.cap = cap;
        let idx = self.qps.insert(Qp::new(qpn, &init2));
        self.qpn_map.insert(qpn.value(), idx);
        for cq in [init.send_cq, init.recv_cq] {
            if let Some(c) = self.cqs.get_mut(cq.0) {
                c.users += 1;
            }
        }
        if let Some(s) = init.srq.and_then(|s| self.srqs.get_mut(s.0)) {
            s.users += 1;
        }
    }

    /// `ibv_destroy_qp`. Outstanding work is dropped without completions.
    pub fn destroy_qp(&mut self, qpn: Qpn) -> VerbsResult<()> {
        let idx = self.qp_idx(qpn)?;
        let qp = self.qps.remove(idx).ok_or(VerbsError::NoSuchObject)?;
        self.qpn_map.remove(&qpn.value());
        self.qpns.released(qpn.value());
        if let Some(claim) = &mut self.qpn_claim {
            claim(qpn.value(), false);
        }
        self.counters += &qp.counters;
        self.mcast_forget_qp(qpn);
        if !self.forget_xrc_qp(&qp) {
            for cq in [qp.send_cq, qp.recv_cq] {
                if let Some(c) = self.cqs.get_mut(cq.0) {
                    c.users -= 1;
                }
            }
            if let Some(s) = qp.srq.and_then(|s| self.srqs.get_mut(s.0)) {
                s.users -= 1;
            }
        }
        self.tx_ready.retain(|&i| i != idx);
        if let Some(t) = qp.armed {
            self.timers.remove(&(t, idx));
        }
        // Type 2 windows bound to the QP go free with it.
        self.mrs.unbind_qp(qpn);
        Ok(())
    }

    /// `ibv_modify_qp`.
    pub fn modify_qp(
        &mut self,
        now: Instant,
        qpn: Qpn,
        attr: &QpAttr,
        mask: AttrMask,
    ) -> VerbsResult<()> {
        let idx = self.qp_idx(qpn)?;
        let qp = self.qps.get_mut(idx).ok_or(VerbsError::NoSuchObject)?;
        let before = (qp.counters, qp.state);
        let mut ctx = ctx!(self, now);
        qp.modify(attr, mask, &mut ctx)?;
        if self.notes.on {
            let after = (&qp.counters, qp.state);
            let b = (&before.0, before.1);
            self.notes.derive(qpn, b, after, None, None);
        }
        Self::wake(&mut self.tx_ready, qp, idx);
        Self::sync_timer(&mut self.timers, qp, idx);
        Ok(())
    }

    /// `ibv_query_qp`: attributes and capabilities.
    pub fn query_qp(&self, qpn: Qpn) -> VerbsResult<(QpAttr, QpCap, QpType)> {
        let qp = self
            .qps
            .get(self.qp_idx(qpn)?)
            .ok_or(VerbsError::NoSuchObject)?;
        Ok((qp.query(), qp.cap, qp.qp_type))
    }

    /// The UDP port RC/UC QP `qpn` takes packets from: `None` until its
    /// first expected packet after RTR told it, or [`Device::set_peer_port`]
    /// did (see `qp::pin`).
    pub fn peer_port(&self, qpn: Qpn) -> VerbsResult<Option<u16>> {
        Ok(self
            .qps
            .get(self.qp_idx(qpn)?)
            .ok_or(VerbsError::NoSuchObject)?
            .peer_port)
    }

    /// Pins RC/UC QP `qpn` to a peer that sends from UDP port `port` (the
    /// peer told it out of band): from then on packets from another port
    /// are dropped as `wrong_peer`, from the first packet on. Cleared when
    /// the QP goes to RESET or its address vector names another peer.
    pub fn set_peer_port(&mut self, qpn: Qpn, port: u16) -> VerbsResult<()> {
        let idx = self.qp_idx(qpn)?;
        let qp = self.qps.get_mut(idx).ok_or(VerbsError::NoSuchObject)?;
        if qp.qp_type == QpType::Ud {
            return Err(VerbsError::InvalidArgument("a UD QP has no peer"));
        }
        qp.peer_port = Some(port);
        Ok(())
    }

    /// What RC QP `qpn`'s responder puts in an answer to a request from
    /// its peer — its peer's QP and address, its MSN and RNR timer — while
    /// it takes requests (RTR and after, not in error); `None` otherwise.
    /// Read-only: a driver's fault injector answers requests on the wire
    /// with it (softrdma-link) without touching the transport.
    pub fn responder_view(&self, qpn: Qpn) -> Option<ResponderView> {
        let qp = self.qps.get(self.qp_idx(qpn).ok()?)?;
        let takes_requests = matches!(
            qp.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        );
        (qp.qp_type == QpType::Rc && takes_requests).then(|| ResponderView {
            dest_qpn: qp.attr.dest_qp_num,
            dest: std::net::SocketAddr::new(qp.attr.ah_attr.dest, qp.attr.ah_attr.dest_port),
            msn: qp.resp.msn,
            min_rnr_timer: qp.attr.min_rnr_timer,
            traffic_class: qp.attr.ah_attr.traffic_class,
            hop_limit: qp.attr.ah_attr.hop_limit,
        })
    }

    /// State of a QP.
    pub fn qp_state(&self, qpn: Qpn) -> VerbsResult<QpState> {
        Ok(self
            .qps
            .get(self.qp_idx(qpn)?)
            .ok_or(VerbsError::NoSuchObject)?
            .state)
    }

    /// `ibv_post_send`.
    pub fn post_send(&mut self, now: Instant, qpn: Qpn, wr: SendWr) -> VerbsResult<()> {
        let idx = self.qp_idx(qpn)?;
        let qp = self.qps.get_mut(idx).ok_or(VerbsError::NoSuchObject)?;
        let mut ctx = ctx!(self, now);
        qp.post_send(wr, &mut ctx)?;
        Self::wake(&mut self.tx_ready, qp, idx);
        Self::sync_timer(&mut self.timers, qp, idx);
        Ok(())
    }

    /// `ibv_post_recv`.
    pub fn post_recv(&mut self, now: Instant, qpn: Qpn, wr: RecvWr) -> VerbsResult<()> {
        let idx = self.qp_idx(qpn)?;
        let qp = self.qps.get_mut(idx).ok_or(VerbsError::NoSuchObject)?;
        let mut ctx = ctx!(self, now);
        let r = qp.post_recv(wr, &mut ctx);
        Self::sync_timer(&mut self.timers, qp, idx);
        r
    }

    /// Counters of the device: its own drops plus every QP's.
    pub fn counters(&self) -> Counters {
        let mut c = self.counters;
        for (_, q) in self.qps.iter() {
            c += &q.counters;
        }
        c
    }

    /// How many received packets the device has refused so far: malformed,
    /// bad ICRC or P_Key, another transport, not from the connected peer
    /// (`wrong_peer`), READ/atomic beyond `max_dest_rd_atomic`, answers
    /// not queued, UD Q_Key mismatches. One number kept as they happen, so
    /// a driver can tell at the cost of a load whether to look at
    /// [`Device::counters`] (which sums every QP's) and log.
    pub fn refusals(&self) -> u64 {
        self.refusals
    }

    /// Counters of one QP.
    pub fn qp_counters(&self, qpn: Qpn) -> VerbsResult<Counters> {
        Ok(self
            .qps
            .get(self.qp_idx(qpn)?)
            .ok_or(VerbsError::NoSuchObject)?
            .counters)
    }

    /// Makes the timer set agree with the QP's deadline.
    pub(crate) fn sync_timer(timers: &mut BTreeSet<(Instant, u32)>, qp: &mut Qp, idx: u32) {
        let d = qp.deadline();
        if d != qp.armed {
            if let Some(old) = qp.armed {
                timers.remove(&(old, idx));
            }
            if let Some(new) = d {
                timers.insert((new, idx));
            }
            qp.armed = d;
        }
    }

    pub(crate) fn wake(tx_ready: &mut VecDeque<u32>, qp: &mut Qp, idx: u32) {
        if !qp.tx_queued {
            qp.tx_queued = true;
            tx_ready.push_back(idx);
        }
    }

    // ------------------------------------------------------ the wire ----

    /// A received UDP payload (BTH through ICRC).
    pub fn handle_datagram(&mut self, now: Instant, meta: &RecvMeta, data: &[u8]) {
        let Ok(pkt) = IbPacket::new_checked(data) else {
            self.counters.malformed += 1;
            self.refusals += 1;
            self.note_drop(meta, None, DropReason::Malformed);
            return;
        };
        if !self.icrc_ok(meta, &pkt) {
            self.counters.icrc_errors += 1;
            self.refusals += 1;
            self.note_drop(meta, Some(&pkt), DropReason::BadIcrc);
            return;
        }
        let Ok(repr) = PacketRepr::parse(&pkt) else {
            self.counters.malformed += 1;
            self.refusals += 1;
            self.note_drop(meta, Some(&pkt), DropReason::Malformed);
            return;
        };
        let info = pkt.info();
        if info.transport == Transport::Cnp {
            self.counters.cnp_rcvd += 1;
            return;
        }
        if !repr.bth.pkey.matches(PKey::DEFAULT) {
            self.counters.bad_pkey += 1;
            self.refusals += 1;
            self.note_drop(meta, Some(&pkt), DropReason::BadPkey);
            return;
        }
        if repr.bth.dest_qp == Qpn::MULTICAST {
            self.handle_mcast(now, meta, &pkt, &repr);
            return;
        }
        let Some(&idx) = self.qpn_map.get(&repr.bth.dest_qp.value()) else {
            // QP 1 is never in the map: MADs take this branch, off the
            // data path.
            if repr.bth.dest_qp == Qpn::GSI {
                if self.gsi.receive(meta, &repr) {
                    self.counters.gsi_rx += 1;
                } else {
                    self.counters.gsi_dropped += 1;
                    self.note_drop(meta, Some(&pkt), DropReason::GsiRejected);
                }
                return;
            }
            self.counters.unknown_qp += 1;
            self.note_drop(meta, Some(&pkt), DropReason::UnknownQp);
            return;
        };
        let Some(qp) = self.qps.get_mut(idx) else {
            self.counters.unknown_qp += 1;
            self.note_drop(meta, Some(&pkt), DropReason::UnknownQp);
            return;
        };
        // An XRC INI QP takes XRC responses, an XRC TGT QP XRC requests.
        let type_ok = match (qp.qp_type, info.transport) {
            (QpType::Rc, Transport::Rc)
            | (QpType::Uc, Transport::Uc)
            | (QpType::Ud, Transport::Ud) => true,
            (QpType::XrcSend, Transport::Xrc) => !info.is_request(),
            (QpType::XrcRecv, Transport::Xrc) => info.is_request(),
            _ => false,
        };
        if !type_ok {
            qp.counters.malformed += 1;
            self.refusals += 1;
            self.note_drop(meta, Some(&pkt), DropReason::WrongTransport);
            return;
        }
        // The address check comes first (rxe's check_addr, hdr_check):
        // nothing from another source reaches the transport's checks.
        let pins = qp.pins_peer();
        if pins && !qp.is_from_peer(meta, self.cfg.local_ip) {
            qp.counters.wrong_peer += 1;
            self.refusals += 1;
            self.note_drop(meta, Some(&pkt), DropReason::WrongPeer);
            return;
        }
        let learn = pins && qp.peer_port.is_none() && qp.expects(&repr, info.is_request());
        if learn {
            qp.peer_port = Some(meta.src.port());
        }
        qp.counters.rx_packets += 1;
        qp.counters.rx_bytes += meta.len as u64;
        // Off (the usual case) this costs the one branch.
        let before = Self::notes_before(&self.notes, qp);
        let refused = |c: &Counters| c.too_many_rd_atomic + c.resp_dropped + c.bad_qkey;
        let refused_before = refused(&qp.counters);
        let mut ctx = ctx!(self, now);
        if info.is_request() {
            qp.handle_request(&repr, meta, &mut ctx);
            qp.counters.resp_dropped += std::mem::take(&mut qp.resp.dropped);
        } else {
            qp.handle_response(&repr, &mut ctx);
        }
        self.refusals += refused(&qp.counters) - refused_before;
        if let Some((c, st)) = before {
            let after = (&qp.counters, qp.state);
            let psn = Some(repr.bth.psn);
            self.notes
                .derive(qp.qpn, (&c, st), after, psn, Some(meta.src));
        }
        Self::wake(&mut self.tx_ready, qp, idx);
        Self::sync_timer(&mut self.timers, qp, idx);
    }

    /// ICRC check with the headers a UDP socket cannot see reconstructed;
    /// for IPv4, an identification other than 0 is solved for.
    fn icrc_ok(&mut self, meta: &RecvMeta, pkt: &IbPacket<&[u8]>) -> bool {
        let Some(d) = meta.datagram(self.cfg.udp_dst_port) else {
            return false;
        };
        let covered = pkt.icrc_covered();
        let stored = pkt.icrc();
        // One form per opcode, two for FLUSH: rxe's and the annex's
        // (softrdma_wire::icrc).
        if d.icrc_forms(covered).any(|(c, _)| c == stored) {
            return true;
        }
        if !self.cfg.infer_ipv4_ident || meta.src.ip().is_loopback() {
            return false;
        }
        if let IpRepr::V4(_) = d.ip {
            for df in [true, false] {
                let mut d2 = d;
                if let IpRepr::V4(r) = &mut d2.ip {
                    r.dont_frag = df;
                }
                // `after`: bytes after the identification (IPv4 bytes
                // 6..20, UDP, transport, for rxe's FLUSH form twice).
                for (base, after) in d2.icrc_forms(covered) {
                    if solve_ipv4_id(base, stored, after).is_some() {
                        self.counters.icrc_ip_id_inferred += 1;
                        return true;
                    }
                }
            }
        }
        false
    }

    /// The next datagram to send, written into `buf` (at least
    /// [`MIN_TX_BUF`](crate::device::MIN_TX_BUF) bytes).
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        self.poll_transmit_with(now, buf, false)
    }

    /// Like [`Self::poll_transmit`], but a payload that sits in registered
    /// memory which lends its address ([`RegionMemory::address`]) is left
    /// there: the returned [`Transmit::gather`] says how to assemble the
    /// datagram, and the ICRC already covers it. The memory must not change
    /// before the datagram is sent (as with a NIC's DMA). The driver owes
    /// [`Device::handle_released`] for every gather it takes.
    #[must_use]
    pub fn poll_transmit_gather(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        self.poll_transmit_with(now, buf, true)
    }

    fn poll_transmit_with(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        gather: bool,
    ) -> Option<Transmit> {
        let rounds = self.tx_ready.len();
        for _ in 0..rounds {
            let idx = self.tx_ready.pop_front()?;
            let Some(qp) = self.qps.get_mut(idx) else {
                continue;
            };
            qp.tx_queued = false;
            let before = Self::notes_before(&self.notes, qp);
            let mut ctx = ctx!(self, now);
            ctx.gather = gather;
            // Requests and responses of a QP take turns; with one of each
            // waiting after a response, the request goes first: in a
            // ping-pong the peer's answer then travels ahead of the ACK
            // of its previous message, which nobody is waiting for.
            let tx = if qp.last_tx_request {
                qp.poll_response(&mut ctx, buf)
                    .map(|t| (t, false))
                    .or_else(|| qp.poll_request(&mut ctx, buf).map(|t| (t, true)))
            } else {
                qp.poll_request(&mut ctx, buf)
                    .map(|t| (t, true))
                    .or_else(|| qp.poll_response(&mut ctx, buf).map(|t| (t, false)))
            };
            let tx = tx.map(|(t, request)| {
                qp.last_tx_request = request;
                if let Some(g) = &t.gather {
                    debug_assert_eq!(g.seq, self.gather_seq + 1);
                    self.gather_seq = g.seq;
                }
                t
            });
            if let Some((c, st)) = before {
                let after = (&qp.counters, qp.state);
                self.notes.derive(qp.qpn, (&c, st), after, None, None);
            }
            Self::sync_timer(&mut self.timers, qp, idx);
            if let Some(tx) = tx {
                qp.tx_queued = true;
                self.tx_ready.push_back(idx);
                return Some(tx);
            }
        }
        None
    }

    /// The earliest timer deadline.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let t = self.timers.first().map(|&(t, _)| t);
        debug_assert_eq!(
            t,
            self.qps.iter().filter_map(|(_, q)| q.deadline()).min(),
            "timer set out of step with the QPs"
        );
        t
    }

    /// Runs every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        // The QPs due, in slot order (the order in which they wake).
        let mut due: Vec<u32> = self
            .timers
            .range(..=(now, u32::MAX))
            .map(|&(_, i)| i)
            .collect();
        due.sort_unstable();
        due.dedup();
        for idx in due {
            let Some(qp) = self.qps.get_mut(idx) else {
                continue;
            };
            let before = Self::notes_before(&self.notes, qp);
            let mut ctx = ctx!(self, now);
            qp.on_timer(&mut ctx);
            if let Some((c, st)) = before {
                let after = (&qp.counters, qp.state);
                self.notes.derive(qp.qpn, (&c, st), after, None, None);
            }
            Self::wake(&mut self.tx_ready, qp, idx);
            Self::sync_timer(&mut self.timers, qp, idx);
        }
    }

    /// The driver no longer reads the pieces of the zero-copy datagrams
    /// with sequence numbers up to `seq` (it sent, copied or dropped them).
    /// Send completions that waited for them become visible; a completion
    /// event fires for armed CQs.
    ///
    /// A driver that uses [`Device::poll_transmit_gather`] must call this,
    /// or the completions of requests sent from registered memory never
    /// appear: the program may reuse a send buffer once its request has
    /// completed, so the completion waits until nothing reads the buffer.
    pub fn handle_released(&mut self, seq: u64) {
        if seq <= self.released {
            return;
        }
        self.released = seq.min(self.gather_seq);
        if self.gated == 0 {
            return;
        }
        let released = self.released;
        let mut still = 0;
        for (id, cq) in self.cqs.iter_mut() {
            if cq.release(released) {
                self.events.push_back(Event::Completion(CqId(id)));
            }
            still += cq.gated_len();
        }
        self.gated = still;
    }

    /// The smallest gather sequence number a completion waits for: the
    /// driver need not call [`Device::handle_released`] before it has
    /// released that one.
    pub fn release_wanted(&self) -> Option<u64> {
        if self.gated == 0 {
            return None;
        }
        self.cqs.iter().filter_map(|(_, cq)| cq.gated_min()).min()
    }

    /// The next event.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// True when some QP may have a packet to send.
    pub fn wants_transmit(&self) -> bool {
        !self.tx_ready.is_empty()
    }
}

/// Smallest buffer [`Device::poll_transmit`] accepts for any MTU.
pub const MIN_TX_BUF: usize = crate::qp::req::MIN_TX_BUF;
