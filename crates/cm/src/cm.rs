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

    // ------------------------------------------------------------ helpers

    /// Linux's TID for messages an id starts (`cm_form_tid`): `hi_tid`
    /// above the comm ID as a little-endian CPU reads its big-endian bytes.
    fn form_tid(&self, local_id: u32) -> u64 {
        (self.cfg.tid_high as u64) << 32 | local_id.swap_bytes() as u64
    }

    /// A fresh comm ID: random, non-zero, not used by a live id or a
    /// timewait record.
    fn alloc_local_id(&mut self) -> Option<u32> {
        // The table is far from full (MAX_IDS << 2^32): a few draws do.
        for _ in 0..64 {
            let id = self.ids_gen.next_u32();
            if id != 0 && !self.ids.contains_key(&id) && !self.tw_locals.contains(&id) {
                return Some(id);
            }
        }
        None
    }

    fn new_conn(&self, local_id: u32, state: State, peer: IpAddr) -> Conn {
        Conn {
            state,
            local_id,
            remote_id: 0,
            peer,
            tid: 0,
            service_id: ServiceId(0),
            listen_id: None,
            qp_type: QpType::Rc,
            local_qpn: Qpn::new(0),
            remote_qpn: Qpn::new(0),
            remote_guid: 0,
            timeout_ns: 0,
            max_cm_retries: 0,
            responder_resources: 0,
            initiator_depth: 0,
            sq_psn: Psn::ZERO,
            rq_psn: Psn::ZERO,
            retry_count: 0,
            rnr_retry_count: 0,
            path_mtu: 0,
            pkey: PKey::DEFAULT,
            path: Path {
                sgid: Default::default(),
                dgid: softrdma_wire::Gid::from_ip(peer),
                flow_label: 0,
                traffic_class: 0,
                hop_limit: 0,
                sl: 0,
                pkey: PKey::DEFAULT,
                mtu: 0,
                rate: 0,
                packet_life_time: 0,
            },
            av_timeout: 0,
            service_timeout: 0,
            saved_private: Vec::new(),
            msg: None,
            in_remote_tables: false,
            timewait: None,
        }
    }

    fn conn(&self, id: CmId) -> Result<&Conn, CmError> {
        self.ids.get(&id.0).ok_or(CmError::UnknownId)
    }

    fn conn_mut(&mut self, id: CmId) -> Result<&mut Conn, CmError> {
        self.ids.get_mut(&id.0).ok_or(CmError::UnknownId)
    }

    /// Queues a MAD (bounded).
    fn send(&mut self, dst: IpAddr, dst_qpn: Qpn, mad: [u8; MAD_LEN]) {
        if self.tx.len() >= limits::MAX_TX_QUEUE {
            self.counters.tx_queue_drops += 1;
            return;
        }
        self.counters.tx_mads += 1;
        let view = Mad::new_unchecked(&mad[..]);
        if view.mgmt_class() == mad::class::CM && view.method() == mad::method::SEND {
            match view.attr_id() {
                attr::REJ => self.counters.tx_rej += 1,
                attr::MRA => self.counters.tx_mra += 1,
                _ => {}
            }
        }
        self.tx.push_back(Transmit { dst, dst_qpn, mad });
    }

    /// Emits a CM MAD; `None` only if a value does not fit (the public
    /// entry points check their parameters first, so this does not happen).
    fn build(tid: u64, attr_mod: u32, msg: CmMsg<'_>) -> Option<[u8; MAD_LEN]> {
        CmMadRepr::new(tid, attr_mod, msg).to_bytes().ok()
    }

    /// Sends an id's retransmitted MAD and arms its timer.
    fn send_msg(
        &mut self,
        now: Instant,
        local: u32,
        mad: [u8; MAD_LEN],
        timeout_ns: u64,
        retries: u8,
    ) {
        self.cancel_msg(local);
        let Some(c) = self.ids.get_mut(&local) else {
            return;
        };
        let deadline = now.add_ns(timeout_ns);
        c.msg = Some(Outstanding {
            mad,
            timeout_ns,
            retries_left: retries,
            deadline,
        });
        let peer = c.peer;
        self.timers.insert((deadline, Timer::Msg(local)));
        self.send(peer, Qpn::GSI, mad);
    }

    /// Stops retransmitting an id's MAD (`ib_cancel_mad`).
    fn cancel_msg(&mut self, local: u32) {
        if let Some(m) = self.ids.get_mut(&local).and_then(|c| c.msg.take()) {
            self.timers.remove(&(m.deadline, Timer::Msg(local)));
        }
    }

    /// Records a connection in the duplicate and stale tables.
    fn insert_remote(&mut self, local: u32) {
        let Some(c) = self.ids.get_mut(&local) else {
            return;
        };
        c.in_remote_tables = true;
        let (g, r, q) = (c.remote_guid, c.remote_id, c.remote_qpn.value());
        self.remote_ids.insert((g, r), local);
        self.remote_qps.insert((g, q), local);
    }

    /// `cm_remove_remote`.
    fn remove_remote(&mut self, local: u32) {
        let Some(c) = self.ids.get_mut(&local) else {
            return;
        };
        if !c.in_remote_tables {
            return;
        }
        c.in_remote_tables = false;
        let (g, r, q) = (c.remote_guid, c.remote_id, c.remote_qpn.value());
        if self.remote_ids.get(&(g, r)) == Some(&local) {
            self.remote_ids.remove(&(g, r));
        }
        if self.remote_qps.get(&(g, q)) == Some(&local) {
            self.remote_qps.remove(&(g, q));
        }
    }

    /// `cm_reset_to_idle`.
    fn reset_to_idle(&mut self, local: u32) {
        self.remove_remote(local);
        if let Some(c) = self.ids.get_mut(&local) {
            c.state = State::Idle;
        }
    }

    /// `cm_enter_timewait`: leaves the live tables, starts a timewait
    /// record of `ms(av timeout)` (2048 ms over rxe).
    fn enter_timewait(&mut self, now: Instant, local: u32) {
        self.remove_remote(local);
        if !self.ids.contains_key(&local) {
            return;
        }
        if self.timewait.len() >= limits::MAX_TIMEWAIT {
            // Out of records: the oldest ends early (its id, if alive,
            // gets its TIMEWAIT_EXIT now) rather than the table growing
            // without bound.
            if let Some((&seq, tw)) = self.timewait.first_key_value() {
                self.timers.remove(&(tw.at, Timer::Timewait(seq)));
                self.on_timewait_end(seq);
            }
        }
        let Some(c) = self.ids.get_mut(&local) else {
            return;
        };
        self.tw_seq += 1;
        let seq = self.tw_seq;
        let at = now.add_ns(ms_to_ns(cm_time_ms(c.av_timeout)));
        let tw = Tw {
            local_id: local,
            remote_guid: c.remote_guid,
            remote_qpn: c.remote_qpn.value(),
            at,
        };
        c.state = State::Timewait;
        c.timewait = Some(seq);
        self.timewait.insert(seq, tw);
        self.tw_qps.insert((tw.remote_guid, tw.remote_qpn, seq));
        self.tw_locals.insert(local);
        self.timers.insert((at, Timer::Timewait(seq)));
    }

    /// A passive id whose request was not yet established: a REQ or
    /// SIDR_REQ received, answered or not.
    fn is_half_open(c: &Conn) -> bool {
        c.listen_id.is_some()
            && matches!(
                c.state,
                State::ReqRcvd
                    | State::MraReqSent
                    | State::RepSent
                    | State::MraRepRcvd
                    | State::SidrReqRcvd
            )
    }

    /// The half-open ids from `src`; index entries of ids no longer
    /// half-open are dropped on the way, so the index holds live ids only
    /// and a count costs the source's own entries.
    fn half_open_from(&mut self, src: IpAddr) -> usize {
        let mut n = 0;
        let mut stale = Vec::new();
        for &(_, k) in self.half_open.range((src, 0)..=(src, u32::MAX)) {
            match self.ids.get(&k) {
                Some(c) if Self::is_half_open(c) => n += 1,
                _ => stale.push(k),
            }
        }
        for k in stale {
            self.half_open.remove(&(src, k));
        }
        n
    }

    /// Whether a new request from `src` would exceed its share of
    /// half-open ids; counts the refusal.
    fn over_half_open_limit(&mut self, src: IpAddr) -> bool {
        if self.half_open_from(src) < limits::MAX_HALF_OPEN_PER_SOURCE {
            return false;
        }
        self.counters.rx_refused_half_open += 1;
        true
    }

    /// Drops `local` from the indexes before its id goes.
    fn forget_half_open(&mut self, local: u32) {
        if let Some(c) = self.ids.get(&local) {
            self.half_open.remove(&(c.peer, local));
        }
    }

    fn push_event(&mut self, e: Event) {
        self.events.push_back(e);
    }

    /// Room for a new passive id and its event.
    fn has_room(&self) -> bool {
        self.ids.len() < limits::MAX_IDS && self.events.len() < limits::MAX_PENDING_EVENTS
    }

    // ---------------------------------------------- formats of our messages

    /// `cm_format_rej`: the Local Comm ID and Message REJected depend on
    /// the state the id was in.
    fn rej_mad(
        c: &Conn,
        state: State,
        reason: RejReason,
        ari: &[u8],
        private: &[u8],
    ) -> Option<[u8; MAD_LEN]> {
        let (local, msg) = match state {
            State::ReqRcvd => (0, MsgRef::REQ),
            State::MraReqSent => (c.local_id, MsgRef::REQ),
            State::RepRcvd | State::MraRepSent => (c.local_id, MsgRef::REP),
            _ => (c.local_id, MsgRef::OTHER),
        };
        Self::build(
            c.tid,
            0,
            CmMsg::Rej(RejRepr {
                local_comm_id: local,
                remote_comm_id: c.remote_id,
                message_rejected: msg,
                reject_info_len: ari.len() as u8,
                reason,
                ari,
                private_data: private,
            }),
        )
    }

    fn mra_mad(
        c: &Conn,
        msg: MsgRef,
        service_timeout: u8,
        private: &[u8],
    ) -> Option<[u8; MAD_LEN]> {
        Self::build(
            c.tid,
            0,
            CmMsg::Mra(MraRepr {
                local_comm_id: c.local_id,
                remote_comm_id: c.remote_id,
                message_mraed: msg,
                service_timeout: service_timeout & 0x1f,
                private_data: private,
            }),
        )
    }

    fn rtu_mad(c: &Conn, private: &[u8]) -> Option<[u8; MAD_LEN]> {
        Self::build(
            c.tid,
            0,
            CmMsg::Rtu(RtuRepr {
                local_comm_id: c.local_id,
                remote_comm_id: c.remote_id,
                private_data: private,
            }),
        )
    }

    fn dreq_mad(&self, c: &Conn, private: &[u8]) -> Option<[u8; MAD_LEN]> {
        Self::build(
            self.form_tid(c.local_id),
            0,
            CmMsg::Dreq(DreqRepr {
                local_comm_id: c.local_id,
                remote_comm_id: c.remote_id,
                remote_qpn: c.remote_qpn,
                private_data: private,
            }),
        )
    }

    fn drep_mad(c: &Conn, private: &[u8]) -> Option<[u8; MAD_LEN]> {
        Self::build(
            c.tid,
            0,
            CmMsg::Drep(DrepRepr {
                local_comm_id: c.local_id,
                remote_comm_id: c.remote_id,
                private_data: private,
            }),
        )
    }

    /// `cm_issue_rej`: a REJ to a MAD we keep no id for. Like Linux it reads
    /// the comm IDs at offsets 0 and 4 of whatever message it answers: the
    /// REJ's Local Comm ID is the received bytes 4..8 (0 in a REQ from
    /// rxe: reserved + Vendor ID), its Remote Comm ID the sender's.
    fn issue_rej(&mut self, rx: &Rx<'_>, reason: RejReason, msg: MsgRef) {
        // "Cast to any message": the received bytes read as a REJ.
        let Ok(any) = Rej::new_checked(&rx.mad[MAD_HEADER_LEN..MAD_LEN]) else {
            return;
        };
        let rej = RejRepr {
            local_comm_id: any.remote_comm_id(),
            remote_comm_id: any.local_comm_id(),
            message_rejected: msg,
            reject_info_len: 0,
            reason,
            ari: &[],
            private_data: &[],
        };
        if let Some(m) = Self::build(rx.hdr.tid, 0, CmMsg::Rej(rej)) {
            self.send(rx.src, rx.src_qpn, m);
        }
    }

    // ---------------------------------------------------------- verbs

    /// Listens for REQs and SIDR_REQs to `service_id` (`ib_cm_listen`). One
    /// listener per service ID: rdma_cm's listeners on one port but
    /// different IPs share it and sort requests by the cma header.
    pub fn listen(&mut self, service_id: ServiceId) -> Result<CmId, CmError> {
        if self.listeners.contains_key(&service_id) {
            return Err(CmError::Busy);
        }
        if self.ids.len() >= limits::MAX_IDS {
            return Err(CmError::TooManyIds);
        }
        let local = self.alloc_local_id().ok_or(CmError::TooManyIds)?;
        let mut c = self.new_conn(local, State::Listen, IpAddr::from([0u8; 4]));
        c.service_id = service_id;
        self.ids.insert(local, c);
        self.listeners.insert(service_id, local);
        Ok(CmId(local))
    }

    /// Sends a REQ on a new id (`ib_send_cm_req`); the REQ is sent again
    /// every `2 × ms(packet life time) + ms(remote CM response timeout)`
    /// (6144 ms for rdma_cm over rxe), `max_cm_retries` times.
    pub fn connect(&mut self, now: Instant, p: &ReqParams) -> Result<CmId, CmError> {
        let path = &p.path;
        let check = |ok: bool, what: &'static str| {
            if ok {
                Ok(())
            } else {
                Err(CmError::InvalidParam(what))
            }
        };
        check(
            p.private_data.len() <= private_len::REQ,
            "private data over 92 bytes",
        )?;
        check(p.retry_count <= 7, "retry count over 7")?;
        check(p.rnr_retry_count <= 7, "RNR retry count over 7")?;
        check(p.max_cm_retries <= 15, "max CM retries over 15")?;
        check(
            p.remote_cm_response_timeout <= 31,
            "remote CM response timeout over 31",
        )?;
        check(
            p.local_cm_response_timeout <= 31,
            "local CM response timeout over 31",
        )?;
        check(path.packet_life_time <= 31, "packet life time over 31")?;
        check(path.mtu <= 15, "MTU code over 15")?;
        check(path.sl <= 15, "SL over 15")?;
        check(path.rate <= 63, "rate over 63")?;
        check(path.flow_label <= 0xf_ffff, "flow label over 20 bits")?;
        check(p.ece.vendor_id <= 0xff_ffff, "vendor ID over 24 bits")?;
        if self.ids.len() >= limits::MAX_IDS {
            return Err(CmError::TooManyIds);
        }
        let local = self.alloc_local_id().ok_or(CmError::TooManyIds)?;
        let peer = path.peer();
        let tid = self.form_tid(local);
        // cm_format_req: permissive LIDs and "not subnet local" on a routed
        // path (hop limit > 1), as every RoCE v2 path is.
        let routed = path.hop_limit > 1;
        let lid = if routed { 0xffff } else { 0 };
        let req = ReqRepr {
            local_comm_id: local,
            vendor_id: p.ece.vendor_id,
            service_id: p.service_id,
            local_ca_guid: self.cfg.node_guid,
            local_qkey: QKey(0),
            local_qpn: p.qpn,
            responder_resources: p.responder_resources,
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: p.remote_cm_response_timeout,
            transport_service_type: p.qp_type.transport_service_type(),
            flow_control: p.flow_control,
            starting_psn: p.starting_psn,
            local_cm_response_timeout: p.local_cm_response_timeout,
            retry_count: p.retry_count,
            pkey: path.pkey,
            path_mtu: path.mtu,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count,
            max_cm_retries: p.max_cm_retries,
            srq: p.srq,
            extended_transport_type: 0,
            primary: CmPathRepr {
                local_lid: lid,
                remote_lid: lid,
                local_gid: path.sgid,
                remote_gid: path.dgid,
                flow_label: path.flow_label,
                packet_rate: path.rate,
                traffic_class: path.traffic_class,
                hop_limit: path.hop_limit,
                sl: path.sl,
                subnet_local: !routed,
                local_ack_timeout: cm_ack_timeout(self.cfg.ca_ack_delay, path.packet_life_time),
            },
            alternate: CmPathRepr::default(),
            sap_supported: false,
            private_data: &p.private_data,
        };
        let mad = Self::build(tid, p.ece.attr_mod, CmMsg::Req(req))
            .ok_or(CmError::InvalidParam("REQ fields"))?;
        let timeout_ms =
            2 * cm_time_ms(path.packet_life_time) + cm_time_ms(p.remote_cm_response_timeout);
        let mut c = self.new_conn(local, State::ReqSent, peer);
        c.tid = tid;
        c.service_id = p.service_id;
        c.qp_type = p.qp_type;
        c.local_qpn = p.qpn;
        c.timeout_ns = ms_to_ns(timeout_ms);
        c.max_cm_retries = p.max_cm_retries;
        c.initiator_depth = p.initiator_depth;
        c.responder_resources = p.responder_resources;
        c.retry_count = p.retry_count;
        c.path_mtu = path.mtu;
        c.pkey = path.pkey;
        c.rq_psn = p.starting_psn;
        c.path = *path;
        // cm_init_av_by_path: the address vector's timeout is life time + 1.
        c.av_timeout = (path.packet_life_time + 1).min(31);
        let (timeout_ns, retries) = (c.timeout_ns, c.max_cm_retries);
        self.ids.insert(local, c);
        self.send_msg(now, local, mad, timeout_ns, retries);
        Ok(CmId(local))
    }

    /// Answers a REQ with a REP (`ib_send_cm_rep`), retransmitted every
    /// `ms(REQ's Local CM Response Timeout)` up to the REQ's Max CM
    /// Retries until the RTU comes. rdma_cm moves its QP to RTS first.
    pub fn accept(&mut self, now: Instant, id: CmId, p: &RepParams) -> Result<(), CmError> {
        let c = self.conn(id)?;
        if !matches!(c.state, State::ReqRcvd | State::MraReqSent) {
            return Err(CmError::InvalidState(c.state));
        }
        if p.private_data.len() > private_len::REP
            || p.rnr_retry_count > 7
            || p.failover_accepted > 3
            || p.ece.vendor_id > 0xff_ffff
        {
            return Err(CmError::InvalidParam("REP fields"));
        }
        let rep = RepRepr {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            local_qkey: QKey(0),
            local_qpn: p.qpn,
            local_eecn: 0,
            starting_psn: p.starting_psn,
            vendor_id: p.ece.vendor_id,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: self.cfg.ca_ack_delay & 0x1f,
            failover_accepted: p.failover_accepted,
            flow_control: p.flow_control,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq,
            local_ca_guid: self.cfg.node_guid,
            private_data: &p.private_data,
        };
        let mad = Self::build(c.tid, p.ece.attr_mod, CmMsg::Rep(rep))
            .ok_or(CmError::InvalidParam("REP fields"))?;
        let (timeout_ns, retries) = (c.timeout_ns, c.max_cm_retries);
        let c = self.conn_mut(id)?;
        c.state = State::RepSent;
        c.initiator_depth = p.initiator_depth;
        c.responder_resources = p.responder_resources;
        c.rq_psn = p.starting_psn;
        c.local_qpn = p.qpn;
        self.send_msg(now, id.0, mad, timeout_ns, retries);
        Ok(())
    }

    /// Rejects (`ib_send_cm_rej`): a REQ we received, a REP we received, or
    /// our own REQ/REP attempt. rdma_cm sends reason 28 (consumer defined)
    /// with the user's private data (≤ 148 bytes); `ari` ≤ 72 bytes.
    pub fn reject(
        &mut self,
        now: Instant,
        id: CmId,
        reason: RejReason,
        ari: &[u8],
        private_data: &[u8],
    ) -> Result<(), CmError> {
        if private_data.len() > private_len::REJ || ari.len() > REJ_ARI_LEN {
            return Err(CmError::InvalidParam("REJ private data or ARI too long"));
        }
        let state = self.conn(id)?.state;
        match state {
            State::ReqSent
            | State::MraReqRcvd
            | State::ReqRcvd
            | State::MraReqSent
            | State::RepRcvd
            | State::MraRepSent => {
                // Linux leaves a REQ being retransmitted after rejecting it
                // here; it is cancelled instead, so no REQ follows our REJ.
                self.cancel_msg(id.0);
                self.reset_to_idle(id.0);
            }
            State::RepSent | State::MraRepRcvd => {
                self.cancel_msg(id.0);
                self.enter_timewait(now, id.0);
            }
            s => return Err(CmError::InvalidState(s)),
        }
        let c = self.conn(id)?;
        if let Some(m) = Self::rej_mad(c, state, reason, ari, private_data) {
            let peer = c.peer;
            self.send(peer, Qpn::GSI, m);
        }
        Ok(())
    }

    /// Sends the RTU after a REP (`ib_send_cm_rtu`): the active side is
    /// connected. rdma_cm moves its QP to RTR and RTS first and reports
    /// ESTABLISHED itself; no event comes from here.
    pub fn establish(
        &mut self,
        _now: Instant,
        id: CmId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        if private_data.len() > private_len::RTU {
            return Err(CmError::InvalidParam("RTU private data over 224 bytes"));
        }
        let c = self.conn_mut(id)?;
        if !matches!(c.state, State::RepRcvd | State::MraRepSent) {
            return Err(CmError::InvalidState(c.state));
        }
        c.state = State::Established;
        c.saved_private = private_data.to_vec();
        let peer = c.peer;
        if let Some(m) = Self::rtu_mad(c, private_data) {
            self.send(peer, Qpn::GSI, m);
        }
        Ok(())
    }

    /// The passive side's QP received traffic before the RTU (the
    /// communication-established async event; `ib_cm_notify`): connected
    /// now, [`Event::Established`] follows and a late RTU is ignored.
    pub fn notify_established(&mut self, id: CmId) -> Result<(), CmError> {
        let c = self.conn_mut(id)?;
        match c.state {
            State::RepSent | State::MraRepRcvd => {}
            s => return Err(CmError::InvalidState(s)),
        }
        c.state = State::Established;
        self.cancel_msg(id.0);
        self.push_event(Event::Established { id });
        Ok(())
    }

    /// Sends an MRA now (`ib_send_cm_mra` without the delay flag) for a REQ
    /// or REP we have not answered, asking the peer to wait
    /// `service_timeout` more. With [`CmConfig::mra_delay_timeout`] set the
    /// ids are already past that state and this fails, as in Linux.
    pub fn send_mra(
        &mut self,
        _now: Instant,
        id: CmId,
        service_timeout: u8,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        if private_data.len() > private_len::MRA || service_timeout > 31 {
            return Err(CmError::InvalidParam("MRA fields"));
        }
        let c = self.conn_mut(id)?;
        let (next, msg) = match c.state {
            State::ReqRcvd => (State::MraReqSent, MsgRef::REQ),
            State::RepRcvd => (State::MraRepSent, MsgRef::REP),
            s => return Err(CmError::InvalidState(s)),
        };
        c.state = next;
        c.service_timeout = service_timeout;
        c.saved_private = private_data.to_vec();
        let peer = c.peer;
        if let Some(m) = Self::mra_mad(c, msg, service_timeout, private_data) {
            self.send(peer, Qpn::GSI, m);
        }
        Ok(())
    }

    /// rdma_disconnect: a DREQ from a connected id (retransmitted like the
    /// REQ/REP that made it), or the DREP answering a DREQ received
    /// (`ib_send_cm_dreq`, else `ib_send_cm_drep`, which enters timewait).
    pub fn disconnect(
        &mut self,
        now: Instant,
        id: CmId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let c = self.conn(id)?;
        match c.state {
            State::Established => {
                if private_data.len() > private_len::DREQ {
                    return Err(CmError::InvalidParam("DREQ private data over 220 bytes"));
                }
                let mad = self
                    .dreq_mad(c, private_data)
                    .ok_or(CmError::InvalidParam("DREQ fields"))?;
                let (timeout_ns, retries) = (c.timeout_ns, c.max_cm_retries);
                self.conn_mut(id)?.state = State::DreqSent;
                self.send_msg(now, id.0, mad, timeout_ns, retries);
                Ok(())
            }
            State::DreqRcvd => {
                if private_data.len() > private_len::DREP {
                    return Err(CmError::InvalidParam("DREP private data over 224 bytes"));
                }
                self.send_drep(now, id.0, private_data);
                Ok(())
            }
            s => Err(CmError::InvalidState(s)),
        }
    }

    /// `cm_send_drep_locked`: timewait, then the DREP.
    fn send_drep(&mut self, now: Instant, local: u32, private_data: &[u8]) {
        if let Some(c) = self.ids.get_mut(&local) {
            c.saved_private = private_data.to_vec();
        }
        self.enter_timewait(now, local);
        if let Some(c) = self.ids.get(&local) {
            if let Some(m) = Self::drep_mad(c, private_data) {
                let peer = c.peer;
                self.send(peer, Qpn::GSI, m);
            }
        }
    }

    /// Forgets a REQ without answering it, so that the requester retries:
    /// what rdma_cm does when its backlog is full (Linux: `cm_destroy_id`
    /// with -ENOMEM resets to idle without a REJ).
    pub fn drop_request(&mut self, id: CmId) -> Result<(), CmError> {
        let state = self.conn(id)?.state;
        if !matches!(state, State::ReqRcvd | State::MraReqSent) {
            return Err(CmError::InvalidState(state));
        }
        self.remove_remote(id.0);
        self.forget_half_open(id.0);
        self.ids.remove(&id.0);
        Ok(())
    }

    /// Destroys an id, telling the peer what Linux's `cm_destroy_id` tells
    /// it in each state: REJ "timeout" (ARI = our GUID) for our pending
    /// REQ; REJ 28 for a REQ or REP not answered; a DREQ (sent once) from a
    /// connected id; the DREP owed for a DREQ received; SIDR_REP "reject"
    /// for a SIDR_REQ not answered. A timewait record outlives the id.
    pub fn destroy(&mut self, now: Instant, id: CmId) -> Result<(), CmError> {
        let state = self.conn(id)?.state;
        let local = id.0;
        match state {
            State::Listen => {
                let sid = self.conn(id)?.service_id;
                if self.listeners.get(&sid) == Some(&local) {
                    self.listeners.remove(&sid);
                }
            }
            State::SidrReqSent => self.cancel_msg(local),
            State::SidrReqRcvd => {
                let reject = SidrRepParams {
                    status: SidrStatus::REJECT,
                    qpn: Qpn::new(0),
                    qkey: QKey(0),
                    info: Vec::new(),
                    private_data: Vec::new(),
                    ece: Default::default(),
                };
                let _ = self.sidr_reply(now, id, &reject);
            }
            State::ReqSent | State::MraReqRcvd => {
                self.cancel_msg(local);
                let guid = self.cfg.node_guid.to_be_bytes();
                let _ = self.reject(now, id, RejReason::TIMEOUT, &guid, &[]);
            }
            State::ReqRcvd
            | State::MraReqSent
            | State::RepRcvd
            | State::MraRepSent
            | State::RepSent
            | State::MraRepRcvd => {
                let _ = self.reject(now, id, RejReason::CONSUMER_DEFINED, &[], &[]);
            }
            State::Established => {
                // cm_issue_dreq: one DREQ, no retries, then timewait.
                let c = self.conn(id)?;
                if let Some(m) = self.dreq_mad(c, &[]) {
                    let peer = c.peer;
                    self.send(peer, Qpn::GSI, m);
                }
                self.enter_timewait(now, local);
            }
            State::DreqSent => {
                self.cancel_msg(local);
                self.enter_timewait(now, local);
            }
            State::DreqRcvd => self.send_drep(now, local, &[]),
            State::Timewait | State::Idle => {}
        }
        self.cancel_msg(local);
        self.remove_remote(local);
        self.forget_half_open(local);
        self.ids.remove(&local);
        Ok(())
    }

    /// Sends a SIDR_REQ on a new id (`ib_send_cm_sidr_req`), retransmitted
    /// every `timeout_ms`, `max_cm_retries` times.
    pub fn sidr_request(&mut self, now: Instant, p: &SidrReqParams) -> Result<CmId, CmError> {
        if p.private_data.len() > private_len::SIDR_REQ || p.max_cm_retries > 15 {
            return Err(CmError::InvalidParam("SIDR_REQ fields"));
        }
        if self.ids.len() >= limits::MAX_IDS {
            return Err(CmError::TooManyIds);
        }
        let local = self.alloc_local_id().ok_or(CmError::TooManyIds)?;
        let tid = self.form_tid(local);
        let req = SidrReqRepr {
            request_id: local,
            pkey: p.pkey,
            service_id: p.service_id,
            private_data: &p.private_data,
        };
        let mad = Self::build(tid, 0, CmMsg::SidrReq(req))
            .ok_or(CmError::InvalidParam("SIDR_REQ fields"))?;
        let mut c = self.new_conn(local, State::SidrReqSent, p.peer);
        c.tid = tid;
        c.service_id = p.service_id;
        c.pkey = p.pkey;
        c.timeout_ns = ms_to_ns(p.timeout_ms);
        c.max_cm_retries = p.max_cm_retries;
        let (timeout_ns, retries) = (c.timeout_ns, c.max_cm_retries);
        self.ids.insert(local, c);
        self.send_msg(now, local, mad, timeout_ns, retries);
        Ok(CmId(local))
    }

    /// Answers a SIDR_REQ (`ib_send_cm_sidr_rep`): sent once; the id goes
    /// idle. A lost SIDR_REP makes the requester ask again, which comes as
    /// a new [`Event::SidrRequest`], as in Linux.
    pub fn sidr_reply(
        &mut self,
        _now: Instant,
        id: CmId,
        p: &SidrRepParams,
    ) -> Result<(), CmError> {
        if p.private_data.len() > private_len::SIDR_REP
            || p.info.len() > SIDR_REP_INFO_LEN
            || p.ece.vendor_id > 0xff_ffff
        {
            return Err(CmError::InvalidParam("SIDR_REP fields"));
        }
        let c = self.conn(id)?;
        if c.state != State::SidrReqRcvd {
            return Err(CmError::InvalidState(c.state));
        }
        let rep = SidrRepRepr {
            request_id: c.remote_id,
            status: p.status,
            additional_info_len: p.info.len() as u8,
            vendor_id: p.ece.vendor_id,
            qpn: p.qpn,
            service_id: c.service_id,
            qkey: p.qkey,
            additional_info: &p.info,
            private_data: &p.private_data,
        };
        let mad = Self::build(c.tid, p.ece.attr_mod, CmMsg::SidrRep(rep))
            .ok_or(CmError::InvalidParam("SIDR_REP fields"))?;
        let (peer, key) = (c.peer, (c.peer, c.remote_id));
        self.send(peer, Qpn::GSI, mad);
        if self.sidr_remote.get(&key) == Some(&id.0) {
            self.sidr_remote.remove(&key);
        }
        self.conn_mut(id)?.state = State::Idle;
        Ok(())
    }

    // ------------------------------------------------------------ timers

    /// Runs every timer due at `now`: retransmissions, their exhaustion,
    /// timewait expiry.
    pub fn handle_timeout(&mut self, now: Instant) {
        // Bounded: each pass removes a timer; a retransmission re-arms
        // later than `now` (timeouts are at least 1 ms).
        while let Some(&(at, timer)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.remove(&(at, timer));
            match timer {
                Timer::Msg(local) => self.on_msg_timeout(now, local),
                Timer::Timewait(seq) => self.on_timewait_end(seq),
            }
        }
    }

    fn on_msg_timeout(&mut self, now: Instant, local: u32) {
        let Some(c) = self.ids.get_mut(&local) else {
            return;
        };
        let Some(m) = c.msg.as_mut() else {
            return;
        };
        if m.retries_left > 0 {
            m.retries_left -= 1;
            // A zero timeout would spin; Linux's is at least 1 ms.
            m.deadline = now.add_ns(m.timeout_ns.max(1_000_000));
            let (deadline, mad, peer) = (m.deadline, m.mad, c.peer);
            self.timers.insert((deadline, Timer::Msg(local)));
            self.counters.tx_retransmits += 1;
            self.send(peer, Qpn::GSI, mad);
            return;
        }
        c.msg = None;
        let id = CmId(local);
        // cm_process_send_error.
        match c.state {
            State::ReqSent | State::MraReqRcvd => {
                self.reset_to_idle(local);
                self.push_event(Event::Unreachable {
                    id,
                    what: Unanswered::Req,
                });
            }
            State::RepSent | State::MraRepRcvd => {
                self.reset_to_idle(local);
                self.push_event(Event::Unreachable {
                    id,
                    what: Unanswered::Rep,
                });
            }
            State::DreqSent => {
                self.enter_timewait(now, local);
                self.push_event(Event::Disconnected {
                    id,
                    timed_out: true,
                    private_data: Vec::new(),
                });
            }
            State::SidrReqSent => {
                c.state = State::Idle;
                self.push_event(Event::Unreachable {
                    id,
                    what: Unanswered::SidrReq,
                });
            }
            _ => {}
        }
    }

    /// `cm_timewait_handler`.
    fn on_timewait_end(&mut self, seq: u64) {
        let Some(tw) = self.timewait.remove(&seq) else {
            return;
        };
        self.tw_qps.remove(&(tw.remote_guid, tw.remote_qpn, seq));
        self.tw_locals.remove(&tw.local_id);
        if let Some(c) = self.ids.get_mut(&tw.local_id) {
            if c.state == State::Timewait && c.timewait == Some(seq) {
                c.state = State::Idle;
                c.timewait = None;
                self.push_event(Event::TimewaitExit {
                    id: CmId(tw.local_id),
                });
            }
        }
    }

    // ------------------------------------------------------------ receive

    /// A MAD received on QP 1 from `src` (its source IP) and QP `src_qpn`.
    /// The driver has already checked the packet (ICRC, P_Key, Q_Key
    /// 0x80010000, UD SEND to QP 1). Anything malformed or unexpected is
    /// dropped or answered as Linux's MAD layer and CM answer it; nothing
    /// panics.
    pub fn handle_mad(&mut self, now: Instant, src: IpAddr, src_qpn: Qpn, mad: &[u8]) {
        self.counters.rx_mads += 1;
        if !self.receive(now, src, src_qpn, mad) {
            self.counters.rx_dropped += 1;
        }
    }

    /// Returns false when the MAD was dropped.
    fn receive(&mut self, now: Instant, src: IpAddr, src_qpn: Qpn, mad: &[u8]) -> bool {
        if mad::check_mad_len(mad).is_err() {
            return false;
        }
        let Ok(view) = Mad::new_checked(mad) else {
            return false;
        };
        let Ok(hdr) = MadHeaderRepr::parse(&view) else {
            return false;
        };
        let rx = Rx {
            now,
            src,
            src_qpn,
            hdr,
            mad,
        };
        // validate_mad (mad.c): base version 1; no subnet management on
        // QP 1; CM attributes other than ClassPortInfo only with Send.
        if hdr.base_version != mad::BASE_VERSION
            || hdr.mgmt_class == mad::class::SUBN_LID_ROUTED
            || hdr.mgmt_class == mad::class::SUBN_DIRECTED_ROUTE
        {
            return false;
        }
        let is_cm = hdr.mgmt_class == mad::class::CM;
        if is_cm && hdr.attr_id != attr::CLASS_PORT_INFO && hdr.method != mad::method::SEND {
            return false;
        }
        // Only the CM agent (class 7, version 2, method Send) takes MADs.
        // Anything else has no agent: Linux answers a Get or Set with
        // "unsupported method/attribute" (generate_unmatched_resp) and
        // drops the rest.
        if !is_cm || hdr.class_version != CM_CLASS_VERSION || hdr.method != mad::method::SEND {
            if hdr.method == mad::method::GET || hdr.method == mad::method::SET {
                self.answer_unsupported(&rx);
                return true;
            }
            return false;
        }
        let Ok(msg) = CmMsg::parse(hdr.attr_id, &mad[MAD_HEADER_LEN..MAD_LEN]) else {
            // cm_recv_handler drops unknown attributes (and LAP/APR are
            // refused on RoCE ports).
            return false;
        };
        match msg {
            CmMsg::Req(r) => self.on_req(&rx, &r),
            CmMsg::Mra(r) => self.on_mra(&rx, &r),
            CmMsg::Rej(r) => self.on_rej(&rx, &r),
            CmMsg::Rep(r) => self.on_rep(&rx, &r),
            CmMsg::Rtu(r) => self.on_rtu(&r),
            CmMsg::Dreq(r) => self.on_dreq(&rx, &r),
            CmMsg::Drep(r) => self.on_drep(&rx, &r),
            CmMsg::SidrReq(r) => self.on_sidr_req(&rx, &r),
            CmMsg::SidrRep(r) => self.on_sidr_rep(&rx, &r),
        }
    }

    /// The GetResp Linux's MAD layer sends for a Get/Set no agent takes:
    /// the MAD back with method GetResp and status "unsupported
    /// method/attribute".
    fn answer_unsupported(&mut self, rx: &Rx<'_>) {
        let mut out = [0u8; MAD_LEN];
        out.copy_from_slice(&rx.mad[..MAD_LEN]);
        let mut m = Mad::new_unchecked(&mut out[..]);
        m.set_method(mad::method::GET_RESP);
        m.set_status(mad::status::UNSUPPORTED_METHOD_ATTRIB);
        self.counters.tx_unsupported += 1;
        self.send(rx.src, rx.src_qpn, out);
    }

    /// `cm_acquire_id`: the id with this local comm ID whose remote comm ID
    /// is `remote` (0 = not yet known).
    fn acquire(&self, local: u32, remote: u32) -> Option<u32> {
        match self.ids.get(&local) {
            Some(c) if c.remote_id == remote => Some(local),
            _ => None,
        }
    }

    /// `cm_req_handler` and `cm_match_req`.
    fn on_req(&mut self, rx: &Rx<'_>, req: &ReqRepr<'_>) -> bool {
        let guid = req.local_ca_guid;
        // A duplicate of a REQ that made a live id.
        if let Some(&local) = self.remote_ids.get(&(guid, req.local_comm_id)) {
            self.counters.rx_duplicates += 1;
            self.dup_req(rx, local);
            return true;
        }
        // A stale connection: that QP of that CA is still connected here.
        if let Some(&old) = self.remote_qps.get(&(guid, req.local_qpn.value())) {
            self.issue_rej(rx, RejReason::STALE_CONN, MsgRef::REQ);
            if self.ids.get(&old).map(|c| c.state) == Some(State::Established) {
                let _ = self.disconnect(rx.now, CmId(old), &[]);
            }
            return true;
        }
        if self.cfg.timewait_rejects_stale_qpn
            && self
                .tw_qps
                .range((guid, req.local_qpn.value(), 0)..=(guid, req.local_qpn.value(), u64::MAX))
                .next()
                .is_some()
        {
            self.issue_rej(rx, RejReason::STALE_CONN, MsgRef::REQ);
            return true;
        }
        let Some(&listen) = self.listeners.get(&req.service_id) else {
            self.issue_rej(rx, RejReason::INVALID_SERVICE_ID, MsgRef::REQ);
            return true;
        };
        // One source may not hold more than its share of requests waiting
        // (half-open connections, SYN-flood style): refused with a REJ,
        // so a well-meaning requester learns at once (not in Linux).
        if self.over_half_open_limit(rx.src) {
            self.issue_rej(rx, RejReason::NO_RESOURCES, MsgRef::REQ);
            return true;
        }
        if !self.has_room() {
            // Like a full rdma_cm backlog: no answer, the requester retries.
            self.counters.rx_busy += 1;
            return true;
        }
        let Some(local) = self.alloc_local_id() else {
            self.counters.rx_busy += 1;
            return true;
        };
        let p = &req.primary;
        // cm_format_paths_from_req: the path back to the requester.
        let plt = p.local_ack_timeout.saturating_sub(1);
        let mut c = self.new_conn(local, State::ReqRcvd, rx.src);
        c.remote_id = req.local_comm_id;
        c.service_id = req.service_id;
        c.listen_id = Some(listen);
        c.tid = rx.hdr.tid;
        c.timeout_ns = ms_to_ns(cm_time_ms(req.local_cm_response_timeout));
        c.max_cm_retries = req.max_cm_retries;
        c.remote_qpn = req.local_qpn;
        c.remote_guid = guid;
        c.initiator_depth = req.responder_resources;
        c.responder_resources = req.initiator_depth;
        c.path_mtu = req.path_mtu;
        c.pkey = req.pkey;
        c.sq_psn = req.starting_psn;
        c.retry_count = req.retry_count;
        c.rnr_retry_count = req.rnr_retry_count;
        c.qp_type =
            QpType::from_transport_service_type(req.transport_service_type).unwrap_or(QpType::Rc);
        c.path = Path {
            sgid: p.remote_gid,
            dgid: p.local_gid,
            flow_label: p.flow_label,
            traffic_class: p.traffic_class,
            hop_limit: p.hop_limit,
            sl: p.sl,
            pkey: req.pkey,
            mtu: req.path_mtu,
            rate: p.packet_rate,
            packet_life_time: plt,
        };
        c.av_timeout = (plt + 1).min(31);
        if let Some(t) = self.cfg.mra_delay_timeout {
            // rdma_cm: ib_send_cm_mra(DELAY | 24) right after the event.
            c.state = State::MraReqSent;
            c.service_timeout = t & 0x1f;
        }
        self.ids.insert(local, c);
        self.insert_remote(local);
        self.half_open.insert((rx.src, local));
        let mut private = [0u8; private_len::REQ];
        let n = req.private_data.len().min(private.len());
        private[..n].copy_from_slice(&req.private_data[..n]);
        self.push_event(Event::ConnectRequest(Box::new(ConnectRequest {
            id: CmId(local),
            listen_id: CmId(listen),
            src: rx.src,
            tid: rx.hdr.tid,
            attr_mod: rx.hdr.attr_mod,
            cma: CmaHdrRepr::parse_private(req.private_data).ok(),
            req: req.with_private_data(&[]),
            private,
        })));
        true
    }

    /// `cm_dup_req_handler`: an MRA if the REQ waits for the user, a REJ if
    /// the id is in timewait. Unlike Linux (which leaves it to the REP's
    /// timer) a duplicate REQ after our REP gets the REP again: the
    /// requester is evidently missing it.
    fn dup_req(&mut self, rx: &Rx<'_>, local: u32) {
        let Some(c) = self.ids.get(&local) else {
            return;
        };
        let mad = match c.state {
            State::MraReqSent => Self::mra_mad(c, MsgRef::REQ, c.service_timeout, &c.saved_private),
            State::Timewait => Self::rej_mad(c, State::Timewait, RejReason::STALE_CONN, &[], &[]),
            State::RepSent | State::MraRepRcvd => c.msg.as_ref().map(|m| m.mad),
            _ => None,
        };
        if let Some(m) = mad {
            self.send(rx.src, rx.src_qpn, m);
        }
    }

    /// `cm_mra_handler`: a longer wait for our REQ or REP; no event.
    fn on_mra(&mut self, rx: &Rx<'_>, mra: &MraRepr<'_>) -> bool {
        let local = match mra.message_mraed {
            MsgRef::REQ => self.acquire(mra.remote_comm_id, 0),
            MsgRef::REP | MsgRef::OTHER => self.acquire(mra.remote_comm_id, mra.local_comm_id),
            _ => None,
        };
        let Some(local) = local else {
            return false;
        };
        let Some(c) = self.ids.get_mut(&local) else {
            return false;
        };
        let next = match (c.state, mra.message_mraed) {
            (State::ReqSent, MsgRef::REQ) => State::MraReqRcvd,
            (State::RepSent, MsgRef::REP) => State::MraRepRcvd,
            (State::MraReqRcvd | State::MraRepRcvd, _) => {
                self.counters.rx_duplicates += 1;
                return true;
            }
            _ => return false,
        };
        let timeout_ns = ms_to_ns(cm_time_ms(mra.service_timeout) + cm_time_ms(c.av_timeout));
        c.state = next;
        // ib_modify_mad: the current wait and every later try take the
        // new timeout; the retries left stay.
        if let Some(m) = c.msg.as_mut() {
            let old = m.deadline;
            m.timeout_ns = timeout_ns;
            m.deadline = rx.now.add_ns(timeout_ns);
            let new = m.deadline;
            self.timers.remove(&(old, Timer::Msg(local)));
            self.timers.insert((new, Timer::Msg(local)));
        }
        true
    }

    /// `cm_rej_handler` with `cm_acquire_rejected_id`.
    fn on_rej(&mut self, rx: &Rx<'_>, rej: &RejRepr<'_>) -> bool {
        let local = if rej.reason == RejReason::TIMEOUT {
            // The requester gave up: its ARI is its CA GUID.
            let Some(g) = rej.ari.get(..8) else {
                return false;
            };
            let mut b = [0u8; 8];
            b.copy_from_slice(g);
            self.remote_ids
                .get(&(u64::from_be_bytes(b), rej.local_comm_id))
                .copied()
        } else if rej.message_rejected == MsgRef::REQ {
            self.acquire(rej.remote_comm_id, 0)
        } else {
            self.acquire(rej.remote_comm_id, rej.local_comm_id)
        };
        let Some(local) = local else {
            return false;
        };
        let Some(state) = self.ids.get(&local).map(|c| c.state) else {
            return false;
        };
        let stale = rej.reason == RejReason::STALE_CONN;
        match state {
            State::ReqSent
            | State::MraReqRcvd
            | State::RepSent
            | State::MraRepRcvd
            | State::ReqRcvd
            | State::MraReqSent => {
                self.cancel_msg(local);
                if stale {
                    self.enter_timewait(rx.now, local);
                } else {
                    self.reset_to_idle(local);
                }
            }
            State::DreqSent | State::RepRcvd | State::MraRepSent | State::Established => {
                self.cancel_msg(local);
                self.enter_timewait(rx.now, local);
            }
            _ => return false,
        }
        self.push_event(Event::Rejected(Box::new(Rejected {
            id: CmId(local),
            reason: rej.reason,
            message_rejected: rej.message_rejected,
            ari: rej.ari_bytes().to_vec(),
            private_data: rej.private_data.to_vec(),
        })));
        true
    }

    /// `cm_rep_handler`, or `cm_dup_rep_handler` when the REQ is no longer
    /// pending.
    fn on_rep(&mut self, rx: &Rx<'_>, rep: &RepRepr<'_>) -> bool {
        let Some(local) = self.acquire(rep.remote_comm_id, 0) else {
            return self.dup_rep(rx, rep);
        };
        let Some(state) = self.ids.get(&local).map(|c| c.state) else {
            return false;
        };
        if !matches!(state, State::ReqSent | State::MraReqRcvd) {
            return false;
        }
        let guid = rep.local_ca_guid;
        if self.remote_ids.contains_key(&(guid, rep.local_comm_id)) {
            self.counters.rx_duplicates += 1;
            return true;
        }
        if let Some(&old) = self.remote_qps.get(&(guid, rep.local_qpn.value())) {
            // The responder's QP is still connected to us: REJ 10 and a
            // DREQ to the old connection. Our REQ stays pending (Linux).
            self.issue_rej(rx, RejReason::STALE_CONN, MsgRef::REP);
            if self.ids.get(&old).map(|c| c.state) == Some(State::Established) {
                let _ = self.disconnect(rx.now, CmId(old), &[]);
            }
            return true;
        }
        self.cancel_msg(local);
        let mra = self.cfg.mra_delay_timeout;
        let Some(c) = self.ids.get_mut(&local) else {
            return false;
        };
        c.state = State::RepRcvd;
        c.remote_id = rep.local_comm_id;
        c.remote_guid = guid;
        c.remote_qpn = rep.local_qpn;
        c.initiator_depth = rep.responder_resources;
        c.responder_resources = rep.initiator_depth;
        c.sq_psn = rep.starting_psn;
        c.rnr_retry_count = rep.rnr_retry_count;
        c.av_timeout = cm_ack_timeout(rep.target_ack_delay, c.av_timeout.saturating_sub(1));
        if let Some(t) = mra {
            // rdma_cm: ib_send_cm_mra(DELAY | 24) on REP for RC/UC.
            c.state = State::MraRepSent;
            c.service_timeout = t & 0x1f;
        }
        self.insert_remote(local);
        let mut private = [0u8; private_len::REP];
        let n = rep.private_data.len().min(private.len());
        private[..n].copy_from_slice(&rep.private_data[..n]);
        self.push_event(Event::RepReceived(Box::new(RepReceived {
            id: CmId(local),
            attr_mod: rx.hdr.attr_mod,
            rep: rep.with_private_data(&[]),
            private,
        })));
        true
    }

    /// `cm_dup_rep_handler`: the RTU again if connected (it was lost), an
    /// MRA if the REP waits for the user.
    fn dup_rep(&mut self, rx: &Rx<'_>, rep: &RepRepr<'_>) -> bool {
        let Some(local) = self.acquire(rep.remote_comm_id, rep.local_comm_id) else {
            return false;
        };
        let Some(c) = self.ids.get(&local) else {
            return false;
        };
        let mad = match c.state {
            State::Established => Self::rtu_mad(c, &c.saved_private),
            State::MraRepSent => Self::mra_mad(c, MsgRef::REP, c.service_timeout, &c.saved_private),
            _ => None,
        };
        self.counters.rx_duplicates += 1;
        if let Some(m) = mad {
            self.send(rx.src, rx.src_qpn, m);
        }
        true
    }

    /// `cm_rtu_handler`.
    fn on_rtu(&mut self, rtu: &RtuRepr<'_>) -> bool {
        let Some(local) = self.acquire(rtu.remote_comm_id, rtu.local_comm_id) else {
            return false;
        };
        let Some(c) = self.ids.get_mut(&local) else {
            return false;
        };
        if !matches!(c.state, State::RepSent | State::MraRepRcvd) {
            self.counters.rx_duplicates += 1;
            return true;
        }
        c.state = State::Established;
        self.cancel_msg(local);
        self.push_event(Event::Established { id: CmId(local) });
        true
    }

    /// `cm_dreq_handler`: a DREP for an unknown id, the DREP again in
    /// timewait; a DREQ not naming our QP is ignored.
    fn on_dreq(&mut self, rx: &Rx<'_>, dreq: &DreqRepr<'_>) -> bool {
        let Some(local) = self.acquire(dreq.remote_comm_id, dreq.local_comm_id) else {
            // cm_issue_drep: answer so the peer can finish.
            let drep = DrepRepr {
                local_comm_id: dreq.remote_comm_id,
                remote_comm_id: dreq.local_comm_id,
                private_data: &[],
            };
            if let Some(m) = Self::build(rx.hdr.tid, 0, CmMsg::Drep(drep)) {
                self.counters.rx_duplicates += 1;
                self.send(rx.src, rx.src_qpn, m);
            }
            return true;
        };
        let Some(c) = self.ids.get(&local) else {
            return false;
        };
        if c.local_qpn != dreq.remote_qpn {
            return false;
        }
        match c.state {
            State::RepSent | State::DreqSent | State::MraRepRcvd => self.cancel_msg(local),
            State::Established => {}
            State::Timewait => {
                self.counters.rx_duplicates += 1;
                if let Some(m) = Self::drep_mad(c, &c.saved_private) {
                    self.send(rx.src, rx.src_qpn, m);
                }
                return true;
            }
            State::DreqRcvd => {
                self.counters.rx_duplicates += 1;
                return true;
            }
            _ => return false,
        }
        let Some(c) = self.ids.get_mut(&local) else {
            return false;
        };
        c.state = State::DreqRcvd;
        c.tid = rx.hdr.tid;
        self.push_event(Event::DisconnectRequest {
            id: CmId(local),
            private_data: dreq.private_data.to_vec(),
        });
        true
    }

    /// `cm_drep_handler`.
    fn on_drep(&mut self, rx: &Rx<'_>, drep: &DrepRepr<'_>) -> bool {
        let Some(local) = self.acquire(drep.remote_comm_id, drep.local_comm_id) else {
            return false;
        };
        if !matches!(
            self.ids.get(&local).map(|c| c.state),
            Some(State::DreqSent | State::DreqRcvd)
        ) {
            return false;
        }
        self.cancel_msg(local);
        self.enter_timewait(rx.now, local);
        self.push_event(Event::Disconnected {
            id: CmId(local),
            timed_out: false,
            private_data: drep.private_data.to_vec(),
        });
        true
    }

    /// `cm_sidr_req_handler`.
    fn on_sidr_req(&mut self, rx: &Rx<'_>, req: &SidrReqRepr<'_>) -> bool {
        if self.sidr_remote.contains_key(&(rx.src, req.request_id)) {
            self.counters.rx_duplicates += 1;
            return true;
        }
        let Some(&listen) = self.listeners.get(&req.service_id) else {
            let rep = SidrRepRepr {
                request_id: req.request_id,
                status: SidrStatus::UNSUPPORTED,
                additional_info_len: 0,
                vendor_id: 0,
                qpn: Qpn::new(0),
                service_id: req.service_id,
                qkey: QKey(0),
                additional_info: &[],
                private_data: &[],
            };
            if let Some(m) = Self::build(rx.hdr.tid, 0, CmMsg::SidrRep(rep)) {
                self.send(rx.src, rx.src_qpn, m);
            }
            return true;
        };
        if self.over_half_open_limit(rx.src) {
            let rep = SidrRepRepr {
                request_id: req.request_id,
                status: SidrStatus::REJECT,
                additional_info_len: 0,
                vendor_id: 0,
                qpn: Qpn::new(0),
                service_id: req.service_id,
                qkey: QKey(0),
                additional_info: &[],
                private_data: &[],
            };
            if let Some(m) = Self::build(rx.hdr.tid, 0, CmMsg::SidrRep(rep)) {
                self.send(rx.src, rx.src_qpn, m);
            }
            return true;
        }
        if !self.has_room() {
            self.counters.rx_busy += 1;
            return true;
        }
        let Some(local) = self.alloc_local_id() else {
            self.counters.rx_busy += 1;
            return true;
        };
        let mut c = self.new_conn(local, State::SidrReqRcvd, rx.src);
        c.remote_id = req.request_id;
        c.service_id = req.service_id;
        c.listen_id = Some(listen);
        c.tid = rx.hdr.tid;
        c.pkey = req.pkey;
        self.ids.insert(local, c);
        self.sidr_remote.insert((rx.src, req.request_id), local);
        self.half_open.insert((rx.src, local));
        self.push_event(Event::SidrRequest(Box::new(SidrRequest {
            id: CmId(local),
            listen_id: CmId(listen),
            src: rx.src,
            src_qpn: rx.src_qpn,
            pkey: req.pkey,
            service_id: req.service_id,
            cma: CmaHdrRepr::parse_private(req.private_data).ok(),
            private_data: req.private_data.to_vec(),
        })));
        true
    }

    /// `cm_sidr_rep_handler`.
    fn on_sidr_rep(&mut self, rx: &Rx<'_>, rep: &SidrRepRepr<'_>) -> bool {
        let Some(local) = self.acquire(rep.request_id, 0) else {
            return false;
        };
        match self.ids.get_mut(&local) {
            Some(c) if c.state == State::SidrReqSent => c.state = State::Idle,
            _ => return false,
        }
        self.cancel_msg(local);
        let n = (rep.additional_info_len as usize).min(rep.additional_info.len());
        self.push_event(Event::SidrReply(Box::new(SidrReply {
            id: CmId(local),
            src: rx.src,
            status: rep.status,
            qpn: rep.qpn,
            qkey: rep.qkey,
            vendor_id: rep.vendor_id,
            info: rep.additional_info[..n].to_vec(),
            private_data: rep.private_data.to_vec(),
        })));
        true
    }
}
