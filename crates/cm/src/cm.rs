//! The communication manager of one device: ids, their states, the tables
//! that match incoming MADs to them, timers, and the queues of MADs and
//! events. The behaviour follows Linux's `drivers/infiniband/core/cm.c`
//! (function names in the comments); where it differs, the comment says
//! why.

use crate::event::{
    ConnectRequest, Event, Rejected, RepReceived, SidrReply, SidrRequest, Unanswered,
};
use crate::idgen::IdGen;
use crate::limits::{self, cm_ack_timeout, cm_time_ms, ms_to_ns};
use crate::params::{Path, QpType, RepParams, ReqParams, SidrRepParams, SidrReqParams};
use crate::{CmError, CmId, Instant};
use softrdma_wire::cm::{
    attr, private_len, CmMadRepr, CmMsg, CmPathRepr, CmaHdrRepr, DrepRepr, DreqRepr, MraRepr,
    MsgRef, Rej, RejReason, RejRepr, RepRepr, ReqRepr, RtuRepr, ServiceId, SidrRepRepr,
    SidrReqRepr, SidrStatus, CM_CLASS_VERSION, REJ_ARI_LEN, SIDR_REP_INFO_LEN,
};
use softrdma_wire::mad::{self, Mad, MadHeaderRepr, MAD_HEADER_LEN, MAD_LEN};
use softrdma_wire::{PKey, Psn, QKey, Qpn};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::IpAddr;

mod formats;
mod handlers;
mod tables;
mod timers;
mod verbs;

/// The state of an id (IBA 12.9.6 and Linux `enum ib_cm_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// Not connected (new, or after a REJ, a timeout, timewait).
    Idle,
    /// Listening for REQs and SIDR_REQs to a service ID.
    Listen,
    /// Active: REQ sent, waiting for REP/REJ/MRA.
    ReqSent,
    /// Active: an MRA extended the REQ's timer.
    MraReqRcvd,
    /// Passive: REQ received, not answered.
    ReqRcvd,
    /// Passive: REQ received, MRA sent (or armed, rdma_cm's delayed MRA).
    MraReqSent,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Passive: an MRA extended the REP's timer.
    MraRepRcvd,
    /// Active: REP received, RTU not sent.
    RepRcvd,
    /// Active: REP received, MRA sent or armed.
    MraRepSent,
    /// Connected.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// DREQ received, DREP not sent.
    DreqRcvd,
    /// Disconnected, waiting out packets of the old connection.
    Timewait,
    /// SIDR_REQ sent, waiting for SIDR_REP.
    SidrReqSent,
    /// SIDR_REQ received, not answered.
    SidrReqRcvd,
}

/// Settings of a CM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmConfig {
    /// Our node GUID: the Local CA GUID of REQ/REP, the ARI of REJ
    /// "timeout".
    pub node_guid: u64,
    /// Key of the comm-ID and PSN generator (the engine: from the OS; the
    /// simulator: from the seed).
    pub key: [u64; 2],
    /// High 32 bits of the TIDs of REQ, DREQ and SIDR_REQ (Linux: the MAD
    /// agent's `hi_tid`; [`limits::LINUX_HI_TID`] by default).
    pub tid_high: u32,
    /// Our CA ACK delay, sent as the REP's Target ACK Delay and used for
    /// the REQ's Local ACK Timeout (rxe: 15).
    pub ca_ack_delay: u8,
    /// rdma_cm's delayed MRA: with `Some(t)`, a REQ handed to the driver
    /// and a REP received put the id in `MraReqSent` / `MraRepSent` at
    /// once without sending anything; a duplicate REQ/REP then gets an MRA
    /// with Service Timeout `t`, so a slow accept does not make the peer
    /// give up (Linux rdma_cm: `IB_CM_MRA_FLAG_DELAY | 24`). `None`: plain
    /// IB CM, duplicates are dropped until the driver answers.
    pub mra_delay_timeout: Option<u8>,
    /// A REQ from a (CA GUID, QPN) whose connection is in timewait here is
    /// rejected with reason 10 (stale connection), as IBA 12.9.8.3.1 and
    /// the rdma_cm brief describe. Linux only checks live connections (its
    /// timewait records leave the QPN table on entry); `false` does the
    /// same.
    pub timewait_rejects_stale_qpn: bool,
}

impl CmConfig {
    /// A configuration with Linux 6.1 rdma_cm's behaviour over rxe.
    pub const fn new(node_guid: u64, key: [u64; 2]) -> CmConfig {
        CmConfig {
            node_guid,
            key,
            tid_high: limits::LINUX_HI_TID,
            ca_ack_delay: limits::RXE_CA_ACK_DELAY,
            mra_delay_timeout: Some(limits::CMA_MRA_SERVICE_TIMEOUT),
            timewait_rejects_stale_qpn: true,
        }
    }
}

/// A MAD to send: a UD SEND to `dst_qpn` (QP 1) at `dst`, Q_Key
/// [`mad::GSI_QKEY`], P_Key 0xFFFF, from our QP 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// The peer's address (its GID).
    pub dst: IpAddr,
    /// The peer's QP (1 for CM traffic).
    pub dst_qpn: Qpn,
    /// The 256-byte MAD.
    pub mad: [u8; MAD_LEN],
}

/// What the CM counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// MADs handed to [`Cm::handle_mad`].
    pub rx_mads: u64,
    /// MADs dropped: malformed, wrong length, version, class, method or
    /// attribute, or matching no id in a state that takes them.
    pub rx_dropped: u64,
    /// Duplicates of REQ, REP, RTU, DREQ, MRA, SIDR_REQ recognised.
    pub rx_duplicates: u64,
    /// REQs and SIDR_REQs dropped because the id table or the event queue
    /// is full.
    pub rx_busy: u64,
    /// MADs queued for sending (first transmissions and answers).
    pub tx_mads: u64,
    /// Retransmissions of REQ, REP, DREQ, SIDR_REQ.
    pub tx_retransmits: u64,
    /// MADs dropped because the send queue was full.
    pub tx_queue_drops: u64,
    /// REJs sent.
    pub tx_rej: u64,
    /// MRAs sent.
    pub tx_mra: u64,
    /// GetResp "unsupported" answers to Get/Set MADs nobody handles.
    pub tx_unsupported: u64,
    /// REQs and SIDR_REQs refused (REJ "no resources", SIDR_REP "reject")
    /// because their source already had
    /// [`MAX_HALF_OPEN_PER_SOURCE`](limits::MAX_HALF_OPEN_PER_SOURCE)
    /// requests not yet established: a flood of half-open connections from
    /// one address.
    pub rx_refused_half_open: u64,
}

/// A snapshot of an id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdInfo {
    /// State.
    pub state: State,
    /// Our comm ID.
    pub local_comm_id: u32,
    /// The peer's comm ID (0 until known).
    pub remote_comm_id: u32,
    /// Where MADs go.
    pub peer: IpAddr,
    /// Service ID.
    pub service_id: ServiceId,
    /// Our QP.
    pub local_qpn: Qpn,
    /// The peer's QP (0 until known).
    pub remote_qpn: Qpn,
    /// The peer's CA GUID (0 until known).
    pub remote_ca_guid: u64,
    /// The listener a passive id came from.
    pub listen_id: Option<CmId>,
    /// The path: the one given to `connect`, or for a passive id the one
    /// back to the requester, built from its REQ (rdma_cm's
    /// `route.path_rec` of the new id). Meaningless for listeners and SIDR.
    pub path: Path,
}

/// The one MAD an id retransmits until answered (Linux `cm_id_priv->msg`).
#[derive(Clone, Debug)]
struct Outstanding {
    mad: [u8; MAD_LEN],
    timeout_ns: u64,
    retries_left: u8,
    deadline: Instant,
}

/// One id (Linux `struct cm_id_private`).
#[derive(Clone, Debug)]
pub(crate) struct Conn {
    pub(crate) state: State,
    pub(crate) local_id: u32,
    pub(crate) remote_id: u32,
    pub(crate) peer: IpAddr,
    pub(crate) tid: u64,
    pub(crate) service_id: ServiceId,
    pub(crate) listen_id: Option<u32>,
    pub(crate) qp_type: QpType,
    pub(crate) local_qpn: Qpn,
    pub(crate) remote_qpn: Qpn,
    pub(crate) remote_guid: u64,
    /// Time per try of REQ/REP/DREQ/SIDR_REQ (`timeout_ms`).
    pub(crate) timeout_ns: u64,
    pub(crate) max_cm_retries: u8,
    pub(crate) responder_resources: u8,
    pub(crate) initiator_depth: u8,
    pub(crate) sq_psn: Psn,
    pub(crate) rq_psn: Psn,
    pub(crate) retry_count: u8,
    pub(crate) rnr_retry_count: u8,
    pub(crate) path_mtu: u8,
    pub(crate) pkey: PKey,
    /// The address vector's path (our GID is `sgid`).
    pub(crate) path: Path,
    /// The address vector's timeout: QP timeout and timewait length.
    pub(crate) av_timeout: u8,
    service_timeout: u8,
    /// Private data of our last MRA, RTU or DREP, for answering duplicates.
    saved_private: Vec<u8>,
    msg: Option<Outstanding>,
    in_remote_tables: bool,
    timewait: Option<u64>,
}

/// A timewait record (Linux `struct cm_timewait_info` on the timewait
/// list). It outlives its id if the id is destroyed first.
#[derive(Clone, Copy, Debug)]
struct Tw {
    local_id: u32,
    remote_guid: u64,
    remote_qpn: u32,
    /// When it ends (its timer's deadline).
    at: Instant,
}

/// The timers, ordered by deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    /// The outstanding MAD of an id (by local comm ID).
    Msg(u32),
    /// A timewait record (by sequence number).
    Timewait(u64),
}

/// The communication manager of one device. See the crate documentation
/// for the contract.
#[derive(Debug)]
pub struct Cm {
    cfg: CmConfig,
    ids_gen: IdGen,
    psn_gen: IdGen,
    pub(crate) ids: BTreeMap<u32, Conn>,
    listeners: BTreeMap<ServiceId, u32>,
    /// Live connections by (remote CA GUID, remote comm ID): duplicate REQs
    /// and REPs (`cm.remote_id_table`).
    remote_ids: BTreeMap<(u64, u32), u32>,
    /// Live connections by (remote CA GUID, remote QPN): stale connections
    /// (`cm.remote_qp_table`).
    remote_qps: BTreeMap<(u64, u32), u32>,
    /// Passive SIDR ids by (source, request ID): duplicate SIDR_REQs.
    sidr_remote: BTreeMap<(IpAddr, u32), u32>,
    /// Passive ids by (source, local comm ID), made by a REQ or SIDR_REQ;
    /// entries of ids that have since been established are dropped when
    /// their source is counted again or the id goes (see `half_open_from`).
    half_open: BTreeSet<(IpAddr, u32)>,
    timewait: BTreeMap<u64, Tw>,
    tw_qps: BTreeSet<(u64, u32, u64)>,
    tw_locals: BTreeSet<u32>,
    tw_seq: u64,
    timers: BTreeSet<(Instant, Timer)>,
    tx: VecDeque<Transmit>,
    events: VecDeque<Event>,
    counters: Counters,
}

/// A received MAD being handled.
struct Rx<'a> {
    now: Instant,
    src: IpAddr,
    src_qpn: Qpn,
    hdr: MadHeaderRepr,
    mad: &'a [u8],
}

impl Cm {
    /// A CM with no ids.
    pub fn new(cfg: CmConfig) -> Cm {
        let psn_key = [cfg.key[0] ^ 0x7073_6e73_7073_6e73, cfg.key[1]];
        Cm {
            ids_gen: IdGen::new(cfg.key),
            psn_gen: IdGen::new(psn_key),
            cfg,
            ids: BTreeMap::new(),
            listeners: BTreeMap::new(),
            remote_ids: BTreeMap::new(),
            remote_qps: BTreeMap::new(),
            sidr_remote: BTreeMap::new(),
            half_open: BTreeSet::new(),
            timewait: BTreeMap::new(),
            tw_qps: BTreeSet::new(),
            tw_locals: BTreeSet::new(),
            tw_seq: 0,
            timers: BTreeSet::new(),
            tx: VecDeque::new(),
            events: VecDeque::new(),
            counters: Counters::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CmConfig {
        &self.cfg
    }

    /// A random 24-bit PSN for a REQ or REP (rdma_cm's `seq_num`), from the
    /// CM's keyed generator.
    pub fn random_psn(&mut self) -> Psn {
        Psn::new(self.psn_gen.next_u32())
    }

    // ------------------------------------------------------------ outputs

    /// The next MAD to send.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.tx.pop_front()
    }

    /// The next event.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The earliest timer deadline.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.first().map(|&(t, _)| t)
    }

    /// Counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    // ------------------------------------------------------------ queries

    /// The state of an id.
    pub fn state(&self, id: CmId) -> Option<State> {
        self.ids.get(&id.0).map(|c| c.state)
    }

    /// A snapshot of an id.
    pub fn info(&self, id: CmId) -> Option<IdInfo> {
        self.ids.get(&id.0).map(|c| IdInfo {
            state: c.state,
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            peer: c.peer,
            service_id: c.service_id,
            local_qpn: c.local_qpn,
            remote_qpn: c.remote_qpn,
            remote_ca_guid: c.remote_guid,
            listen_id: c.listen_id.map(CmId),
            path: c.path,
        })
    }

    /// Every live id, in comm-ID order.
    pub fn ids(&self) -> impl Iterator<Item = CmId> + '_ {
        self.ids.keys().map(|&k| CmId(k))
    }

    /// Live ids.
    pub fn id_count(&self) -> usize {
        self.ids.len()
    }

    /// Timewait records (they expire on their own).
    pub fn timewait_count(&self) -> usize {
        self.timewait.len()
    }

    /// Armed timers.
    pub fn timer_count(&self) -> usize {
        self.timers.len()
    }

    /// True when nothing is left: no id, no record, no timer, nothing
    /// queued. What a drained run must end in.
    pub fn is_quiescent(&self) -> bool {
        self.ids.is_empty()
            && self.timewait.is_empty()
            && self.timers.is_empty()
            && self.tx.is_empty()
            && self.events.is_empty()
            && self.listeners.is_empty()
            && self.remote_ids.is_empty()
            && self.remote_qps.is_empty()
            && self.sidr_remote.is_empty()
            && self.half_open.is_empty()
            && self.tw_qps.is_empty()
            && self.tw_locals.is_empty()
    }

    /// Checks the tables agree with each other; a description of the first
    /// disagreement. For tests and the simulator.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (&k, c) in &self.ids {
            if c.local_id != k {
                return Err(format!("id {k:#x} stored as {:#x}", c.local_id));
            }
            let armed = self.timers.iter().any(|&(_, t)| t == Timer::Msg(k));
            match &c.msg {
                Some(m) if !self.timers.contains(&(m.deadline, Timer::Msg(k))) => {
                    return Err(format!("id {k:#x}: outstanding MAD without its timer"));
                }
                None if armed => return Err(format!("id {k:#x}: timer without a MAD")),
                _ => {}
            }
            let retransmitting = matches!(
                c.state,
                State::ReqSent
                    | State::MraReqRcvd
                    | State::RepSent
                    | State::MraRepRcvd
                    | State::DreqSent
                    | State::SidrReqSent
            );
            if retransmitting != c.msg.is_some() {
                return Err(format!(
                    "id {k:#x} in {:?} with outstanding MAD {}",
                    c.state,
                    c.msg.is_some()
                ));
            }
            if (c.state == State::Timewait) != c.timewait.is_some() {
                return Err(format!("id {k:#x} in {:?}: timewait record", c.state));
            }
            if let Some(seq) = c.timewait {
                if !self.timewait.contains_key(&seq) {
                    return Err(format!("id {k:#x}: timewait record {seq} missing"));
                }
            }
            let in_tables = self.remote_ids.get(&(c.remote_guid, c.remote_id)) == Some(&k);
            if in_tables != c.in_remote_tables {
                return Err(format!("id {k:#x}: remote table membership"));
            }
        }
        if self.remote_ids.len() != self.remote_qps.len() {
            return Err("remote id and QPN tables differ in size".into());
        }
        for (&s, &k) in &self.listeners {
            match self.ids.get(&k) {
                Some(c) if c.state == State::Listen && c.service_id == s => {}
                _ => return Err(format!("listener {s} -> {k:#x} is not a listening id")),
            }
        }
        for &k in self.remote_ids.values().chain(self.remote_qps.values()) {
            if !self.ids.contains_key(&k) {
                return Err(format!("remote table names the gone id {k:#x}"));
            }
        }
        for &k in self.sidr_remote.values() {
            if self.ids.get(&k).map(|c| c.state) != Some(State::SidrReqRcvd) {
                return Err(format!("SIDR table names {k:#x}, not in SidrReqRcvd"));
            }
        }
        for (&seq, tw) in &self.timewait {
            if !self.tw_qps.contains(&(tw.remote_guid, tw.remote_qpn, seq))
                || !self.tw_locals.contains(&tw.local_id)
            {
                return Err(format!("timewait record {seq} not indexed"));
            }
            if !self.timers.contains(&(tw.at, Timer::Timewait(seq))) {
                return Err(format!("timewait record {seq} without its timer"));
            }
        }
        for &(src, k) in &self.half_open {
            if self.ids.get(&k).map(|c| c.peer) != Some(src) {
                return Err(format!(
                    "half-open index names {k:#x} from {src}, not an id of it"
                ));
            }
        }
        for (&k, c) in &self.ids {
            if Self::is_half_open(c) && !self.half_open.contains(&(c.peer, k)) {
                return Err(format!("half-open id {k:#x} not indexed"));
            }
        }
        if self.tw_qps.len() != self.timewait.len() || self.tw_locals.len() != self.timewait.len() {
            return Err("timewait indexes out of step".into());
        }
        let expected = self.ids.values().filter(|c| c.msg.is_some()).count() + self.timewait.len();
        if self.timers.len() != expected {
            return Err(format!(
                "{} timers for {expected} reasons",
                self.timers.len()
            ));
        }
        Ok(())
    }
}
