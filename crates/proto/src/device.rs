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

mod egress;
mod ingress;
mod objects;
mod qps;

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
    /// The device-wide budget of RC packets in flight, and the QPs that
    /// wait for it.
    pub(crate) budget: Budget,
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
            icrc_left: false,
            write_chunking: $self.cfg.write_chunking,
            next_gather_seq: $self.gather_seq + 1,
            released: $self.released,
            gated: &mut $self.gated,
            budget_left: $self.budget.left(),
            budget_queue: !$self.budget.wait.is_empty(),
            tail_probe: $self.cfg.tail_probe,
        }
    };
}

pub(crate) use ctx;

/// RC request packets in flight over all QPs, against a limit
/// (`DeviceConfig::inflight_budget_pkts`). Each QP's share is what it
/// counted at its last `sync_timer`; QPs that had a packet ready while the
/// budget was spent wait in `wait`, in order. The budget is handed out in
/// grants of [`BUDGET_GRANT_PKTS`](crate::limits::BUDGET_GRANT_PKTS): a
/// QP at the head of the queue is woken once that much is free, and while
/// QPs wait, no other QP takes new budget. So a few QPs send runs of
/// packets rather than every QP one packet at a time, and the responder
/// answers a run with one ACK instead of one per packet.
///
/// Liveness: what a QP counts is acknowledged, or the QP's retries run
/// out and it enters the error state (0 counted); a QP without a
/// transport timer (`timeout` 0) or in an RNR wait counts nothing. So the
/// budget always comes free, and the queue is served in order.
#[derive(Debug, Default)]
pub(crate) struct Budget {
    /// 0: no limit.
    pub limit: u32,
    /// Sum of every QP's `budget_counted`.
    pub inflight: u32,
    /// QP slots waiting for the budget (each once: `Qp::budget_parked`).
    pub wait: VecDeque<u32>,
    /// QPs woken from `wait` that have not used their grant yet
    /// (`Qp::budget_woken`).
    pub granted: u32,
}

impl Budget {
    /// Packets that may still go into flight (`u32::MAX` without a limit).
    pub fn left(&self) -> u32 {
        if self.limit == 0 {
            u32::MAX
        } else {
            self.limit.saturating_sub(self.inflight)
        }
    }

    /// Counts `qp`'s packets in flight now.
    fn sync(&mut self, qp: &mut Qp) {
        let n = qp.inflight_pkts();
        if n != qp.budget_counted {
            self.inflight = self.inflight - qp.budget_counted + n;
            qp.budget_counted = n;
        }
    }
}

impl Device {
    /// A device with no objects.
    pub fn new(cfg: DeviceConfig) -> Self {
        let rng = match cfg.key {
            Some(k) => KeyRng::new(k),
            None => KeyRng::from_seed(cfg.seed),
        };
        let budget_limit = cfg.inflight_budget_pkts;
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
            budget: Budget {
                limit: budget_limit,
                ..Budget::default()
            },
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

    /// Changes the device-wide budget of RC packets in flight
    /// (`DeviceConfig::inflight_budget_pkts`; 0: none). QPs waiting for
    /// the old budget are woken when the new one has room.
    pub fn set_inflight_budget_pkts(&mut self, pkts: u32) {
        self.cfg.inflight_budget_pkts = pkts;
        self.budget.limit = pkts;
        self.release_budget();
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
}

/// Smallest buffer [`Device::poll_transmit`] accepts for any MTU.
pub const MIN_TX_BUF: usize = crate::qp::req::MIN_TX_BUF;
