//! Connection management in the simulator: several [`Cm`]s on a virtual
//! clock, their MADs carried by a seeded link that loses, duplicates,
//! reorders, corrupts (a corrupted MAD fails the ICRC and is dropped) and
//! delays them, and a driver model per node that connects, accepts,
//! rejects, answers late, disconnects, destroys and sometimes dies.
//!
//! [`run`] plays one seeded [`Scenario`] to the end and returns a
//! [`Report`]; [`Report::check`] verifies the promises:
//!
//! - exactly one ESTABLISHED on each side of every connection that both
//!   sides accepted (the client's successful RTU, the server's
//!   [`Event::Established`]), none on any other;
//! - a connection to a service nobody listens on is rejected with reason 8,
//!   one the server declines with 28 and its private data, one to a node
//!   that never answers ends UNREACHABLE; SIDR likewise;
//! - no id gets two outcomes (ESTABLISHED / REJECTED / UNREACHABLE), two
//!   disconnect events or two timewait exits, and events name only ids the
//!   driver holds;
//! - when the run drains, every CM of a live node is quiescent: every id
//!   ended and was destroyed, no timer, timewait record or queued MAD is
//!   left;
//! - the link's loss, duplication and reordering actually happened, and
//!   the CMs retransmitted, recognised duplicates and sent MRAs.
//!
//! A run is a function of its seed; `SOFTRDMA_SIM_TRACE=1` prints every MAD.

use crate::net::{LinkConfig, NetStats};
use softrdma_cm::negotiate::{self, ConnParam};
use softrdma_cm::{
    Cm, CmConfig, CmId, Event, Instant, QpType, RejReason, ServiceId, SidrRepParams, SidrReqParams,
    SidrStatus, State, Unanswered,
};
use softrdma_link::{fate, Rates, Rng};
use softrdma_wire::cm::{CmaHdrRepr, PortSpace};
use softrdma_wire::{PKey, QKey, Qpn};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::net::{IpAddr, Ipv4Addr};

/// What the server does with a connection request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerPlan {
    /// Accept after `delay_ms` (past 6144 ms the requester's REQ comes
    /// again and is answered with an MRA).
    Accept {
        /// Time to answer.
        delay_ms: u64,
    },
    /// `rdma_reject` (REJ 28 with private data) after `delay_ms`.
    Reject {
        /// Time to answer.
        delay_ms: u64,
    },
    /// Destroy the new id after `delay_ms` (REJ 28 from the CM).
    Destroy {
        /// Time to answer.
        delay_ms: u64,
    },
    /// The server does not listen on the service: REJ 8.
    NoListener,
}

/// What the client does with the REP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientPlan {
    /// RTU after `delay_ms` (past 4096 ms the REP comes again and gets an
    /// MRA).
    Establish {
        /// Time to answer.
        delay_ms: u64,
    },
    /// `rdma_reject` of the REP.
    Reject {
        /// Time to answer.
        delay_ms: u64,
    },
    /// Give up before connecting: destroy the id (REJ "timeout" while the
    /// REQ is pending, REJ 28 when the REP has come).
    DestroyEarly {
        /// Time after the REQ.
        after_ms: u64,
    },
}

/// How an established connection ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Teardown {
    /// The client disconnects.
    ClientDisconnect,
    /// The server disconnects.
    ServerDisconnect,
    /// Both at once.
    Both,
    /// The client destroys its id (one DREQ, no retries).
    ClientDestroy,
    /// The server destroys its id.
    ServerDestroy,
}

/// One planned connection.
#[derive(Clone, Debug)]
pub struct ConnPlan {
    /// Node of the client.
    pub client: usize,
    /// Node of the server.
    pub server: usize,
    /// When the client connects.
    pub start_ms: u64,
    /// The server's answer.
    pub server_plan: ServerPlan,
    /// The client's answer.
    pub client_plan: ClientPlan,
    /// How it ends.
    pub teardown: Teardown,
    /// How long it stays up.
    pub hold_ms: u64,
    /// When the client's first data packet reaches the server's QP after
    /// the RTU went out (capped at half the hold time): if the RTU was lost
    /// and the REP's retry has not brought another yet, this is what
    /// establishes the server (`notify_established`), as the communication
    /// established event does in Linux. Applications send data before they
    /// disconnect; without it a server whose RTU was lost sees the DREQ
    /// first and is never ESTABLISHED, in Linux as here.
    pub data_ms: u64,
}

/// One planned SIDR resolution.
#[derive(Clone, Debug)]
pub struct SidrPlan {
    /// Node asking.
    pub client: usize,
    /// Node asked.
    pub server: usize,
    /// When.
    pub start_ms: u64,
    /// Whether the server listens on the UD service.
    pub listening: bool,
}

/// A whole run.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The seed of everything.
    pub seed: u64,
    /// The link.
    pub link: LinkConfig,
    /// Nodes.
    pub nodes: usize,
    /// A node that never comes up (its address eats everything).
    pub dead_node: Option<usize>,
    /// A node that dies at a time.
    pub dies: Option<(usize, u64)>,
    /// Connections.
    pub conns: Vec<ConnPlan>,
    /// SIDR resolutions.
    pub sidrs: Vec<SidrPlan>,
    /// When listeners close.
    pub close_listeners_ms: u64,
}

/// The RC service every live node listens on.
pub const RC_SERVICE: ServiceId = ServiceId::rdma_cm(PortSpace::Tcp, 7174);
/// An RC service nobody listens on.
pub const UNHEARD_SERVICE: ServiceId = ServiceId::rdma_cm(PortSpace::Tcp, 9999);
/// The UD service of the SIDR plans.
pub const UD_SERVICE: ServiceId = ServiceId::rdma_cm(PortSpace::Udp, 7175);

impl Scenario {
    /// A random scenario: `nodes` nodes (at least 3), `conns` connections
    /// and `sidrs` resolutions started in the first 30 s, one node dead
    /// from the start and one dying mid-run when `faults`.
    pub fn random(
        seed: u64,
        link: LinkConfig,
        nodes: usize,
        conns: usize,
        sidrs: usize,
        faults: bool,
    ) -> Scenario {
        let nodes = nodes.max(3);
        let mut rng = Rng::new(seed ^ 0xc0ff_ee00_5ce7_a210);
        let dead_node = faults.then_some(nodes - 1);
        let dies = faults.then(|| (nodes - 2, 20_000 + rng.below(20_000)));
        let mut out = Scenario {
            seed,
            link,
            nodes,
            dead_node,
            dies,
            conns: Vec::new(),
            sidrs: Vec::new(),
            close_listeners_ms: 400_000,
        };
        let pick = |rng: &mut Rng, n: u64| rng.below(n);
        for _ in 0..conns {
            let client = pick(&mut rng, nodes as u64) as usize;
            let mut server = pick(&mut rng, nodes as u64 - 1) as usize;
            if server >= client {
                server += 1;
            }
            let server_plan = match pick(&mut rng, 20) {
                0..=13 => ServerPlan::Accept {
                    delay_ms: if pick(&mut rng, 4) == 0 {
                        6_500 + pick(&mut rng, 20_000)
                    } else {
                        pick(&mut rng, 3_000)
                    },
                },
                14..=15 => ServerPlan::Reject {
                    delay_ms: pick(&mut rng, 2_000),
                },
                16..=17 => ServerPlan::Destroy {
                    delay_ms: pick(&mut rng, 2_000),
                },
                _ => ServerPlan::NoListener,
            };
            let client_plan = match pick(&mut rng, 20) {
                0..=16 => ClientPlan::Establish {
                    delay_ms: if pick(&mut rng, 4) == 0 {
                        4_500 + pick(&mut rng, 6_000)
                    } else {
                        pick(&mut rng, 2_000)
                    },
                },
                17..=18 => ClientPlan::Reject {
                    delay_ms: pick(&mut rng, 2_000),
                },
                _ => ClientPlan::DestroyEarly {
                    after_ms: pick(&mut rng, 3_000),
                },
            };
            let teardown = match pick(&mut rng, 5) {
                0 => Teardown::ClientDisconnect,
                1 => Teardown::ServerDisconnect,
                2 => Teardown::Both,
                3 => Teardown::ClientDestroy,
                _ => Teardown::ServerDestroy,
            };
            out.conns.push(ConnPlan {
                client,
                server,
                start_ms: pick(&mut rng, 30_000),
                server_plan,
                client_plan,
                teardown,
                hold_ms: 5_000 + pick(&mut rng, 60_000),
                data_ms: 1 + pick(&mut rng, 10_000),
            });
        }
        for _ in 0..sidrs {
            let client = pick(&mut rng, nodes as u64) as usize;
            let mut server = pick(&mut rng, nodes as u64 - 1) as usize;
            if server >= client {
                server += 1;
            }
            out.sidrs.push(SidrPlan {
                client,
                server,
                start_ms: pick(&mut rng, 30_000),
                listening: pick(&mut rng, 4) != 0,
            });
        }
        out
    }
}

/// What happened to one connection.
#[derive(Clone, Debug, Default)]
pub struct ConnLog {
    /// Client id.
    pub client_id: Option<CmId>,
    /// Server ids created for it (a REQ that comes back after its id was
    /// destroyed makes a new one, as in Linux).
    pub server_ids: Vec<CmId>,
    /// Successful RTUs of the client.
    pub client_established: u32,
    /// ESTABLISHED events of the server.
    pub server_established: u32,
    /// REP events of the client.
    pub reps: u32,
    /// REJ reasons the client saw.
    pub client_rejected: Vec<RejReason>,
    /// REJ reasons the server saw.
    pub server_rejected: Vec<RejReason>,
    /// The client's REQ went unanswered.
    pub client_unreachable: u32,
    /// The server's REP went unanswered.
    pub server_unreachable: u32,
    /// Private data of the client's first REJ.
    pub rej_private: Vec<u8>,
    /// The client destroyed its id before any answer.
    pub client_gave_up: bool,
    /// The server accepted (a REP went out).
    pub accepted: bool,
    /// DREQs that ran out of retries, either side.
    pub dreq_timeouts: u32,
}

/// What happened to one SIDR plan.
#[derive(Clone, Debug, Default)]
pub struct SidrLog {
    /// Replies: status.
    pub replies: Vec<SidrStatus>,
    /// Unanswered.
    pub unreachable: u32,
    /// Requests the server saw.
    pub requests: u32,
}

/// The outcome of a run.
#[derive(Debug, Default)]
pub struct Report {
    /// Per connection.
    pub conns: Vec<ConnLog>,
    /// Per SIDR plan.
    pub sidrs: Vec<SidrLog>,
    /// Violations seen while running (events for unknown ids, two
    /// outcomes, …).
    pub violations: Vec<String>,
    /// What the link did.
    pub net: NetStats,
    /// The CMs' counters, summed.
    pub cm: softrdma_cm::Counters,
    /// Ids left on live nodes after the run drained.
    pub leftover_ids: usize,
    /// Non-quiescent live CMs.
    pub not_quiescent: Vec<usize>,
    /// The ids left: node, id, state, what the driver held it for.
    pub leftovers: Vec<String>,
    /// Virtual time at the end.
    pub end: Instant,
}

impl Report {
    /// Checks every promise against the plans; the first failure.
    pub fn check(&self, sc: &Scenario) -> Result<(), String> {
        if let Some(v) = self.violations.first() {
            return Err(format!("{} violations, first: {v}", self.violations.len()));
        }
        if !self.not_quiescent.is_empty() || self.leftover_ids != 0 {
            return Err(format!(
                "nodes {:?} not quiescent, {} ids left: {:?}",
                self.not_quiescent, self.leftover_ids, self.leftovers
            ));
        }
        let dead = |n: usize| sc.dead_node == Some(n) || sc.dies.is_some_and(|(d, _)| d == n);
        for (i, (p, l)) in sc.conns.iter().zip(&self.conns).enumerate() {
            let who = format!("conn {i} {p:?}: {l:?}");
            if l.client_established > 1 || l.server_established > 1 {
                return Err(format!("ESTABLISHED twice: {who}"));
            }
            if l.client_established == 1 && l.reps == 0 {
                return Err(format!("RTU without a REP: {who}"));
            }
            let involved_dead = dead(p.client) || dead(p.server);
            if !involved_dead && l.dreq_timeouts != 0 {
                // 16 DREQs or their DREPs all lost: 10^-16 at 10 % loss.
                return Err(format!("a DREQ to a live peer went unanswered: {who}"));
            }
            if involved_dead {
                if sc.dead_node == Some(p.server) && !dead(p.client) {
                    // Nobody ever answers: the REQ runs out.
                    if l.client_unreachable != 1 && !l.client_gave_up {
                        return Err(format!("a dead server is not unreachable: {who}"));
                    }
                }
                continue;
            }
            match (p.server_plan, p.client_plan) {
                (ServerPlan::NoListener, ClientPlan::DestroyEarly { .. }) => {}
                (ServerPlan::NoListener, _) => {
                    if l.client_rejected != [RejReason::INVALID_SERVICE_ID] {
                        return Err(format!("no listener but not REJ 8: {who}"));
                    }
                }
                (ServerPlan::Reject { .. } | ServerPlan::Destroy { .. }, c) => {
                    if l.client_established != 0 || l.server_established != 0 {
                        return Err(format!("established though declined: {who}"));
                    }
                    if !matches!(c, ClientPlan::DestroyEarly { .. }) {
                        if l.client_rejected.first() != Some(&RejReason::CONSUMER_DEFINED) {
                            return Err(format!("declined but not REJ 28: {who}"));
                        }
                        if matches!(p.server_plan, ServerPlan::Reject { .. })
                            && !l.rej_private.starts_with(b"no thanks")
                        {
                            return Err(format!("REJ private data lost: {who}"));
                        }
                    }
                }
                (ServerPlan::Accept { .. }, ClientPlan::Establish { .. }) => {
                    if l.client_established != 1 || l.server_established != 1 {
                        return Err(format!(
                            "accepted on both sides but not established once each: {who}"
                        ));
                    }
                }
                (ServerPlan::Accept { .. }, ClientPlan::Reject { .. }) => {
                    if l.client_established != 0 || l.server_established != 0 {
                        return Err(format!("established though the client rejected: {who}"));
                    }
                    if l.reps == 1
                        && l.server_rejected.first() != Some(&RejReason::CONSUMER_DEFINED)
                        && l.server_unreachable == 0
                    {
                        return Err(format!(
                            "the client's REJ of the REP never ended the server: {who}"
                        ));
                    }
                }
                (ServerPlan::Accept { .. }, ClientPlan::DestroyEarly { .. }) => {
                    if l.server_established != 0 {
                        return Err(format!("server established with a vanished client: {who}"));
                    }
                }
            }
        }
        for (i, (p, l)) in sc.sidrs.iter().zip(&self.sidrs).enumerate() {
            let who = format!("sidr {i} {p:?}: {l:?}");
            if l.replies.len() + l.unreachable as usize > 1 {
                return Err(format!("two outcomes: {who}"));
            }
            if dead(p.client) {
                continue;
            }
            if sc.dead_node == Some(p.server) {
                if l.unreachable != 1 {
                    return Err(format!("dead server, not unreachable: {who}"));
                }
            } else if !dead(p.server) {
                let want = if p.listening {
                    SidrStatus::SUCCESS
                } else {
                    SidrStatus::UNSUPPORTED
                };
                if l.replies != [want] {
                    return Err(format!("wrong SIDR outcome: {who}"));
                }
            }
        }
        Ok(())
    }
}

/// A node: one CM at one address.
struct Node {
    cm: Cm,
    ip: IpAddr,
    up: bool,
    /// Listener ids.
    listeners: Vec<CmId>,
}

/// Which plan an id belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    ConnClient(usize),
    ConnServer(usize),
    SidrClient(usize),
    SidrServer(usize),
    Listener,
}

/// Per-id bookkeeping of the driver model.
#[derive(Clone, Debug, Default)]
struct IdLog {
    outcomes: u32,
    disconnects: u32,
    timewait_exits: u32,
}

#[derive(Clone, Copy, Debug)]
enum Action {
    Connect(usize),
    Sidr(usize),
    ServerAnswer(usize, CmId),
    ClientAnswer(usize),
    ClientGiveUp(usize),
    Data(usize),
    Teardown(usize, u8),
    Watchdog(usize, bool),
    Kill(usize),
    CloseListeners,
}

struct InFlight {
    to: usize,
    src: IpAddr,
    src_qpn: Qpn,
    mad: [u8; 256],
}

/// The simulation state.
struct World<'s> {
    sc: &'s Scenario,
    now: Instant,
    nodes: Vec<Node>,
    rng: Rng,
    link: LinkConfig,
    net: NetStats,
    wire: BinaryHeap<Reverse<(Instant, u64)>>,
    in_flight: BTreeMap<u64, InFlight>,
    actions: BinaryHeap<Reverse<(Instant, u64)>>,
    action_list: BTreeMap<u64, Action>,
    seq: u64,
    owners: BTreeMap<(usize, CmId), Owner>,
    ids: BTreeMap<(usize, CmId), IdLog>,
    report: Report,
    print: bool,
    /// QPN -> connection, for matching REQs to plans.
    conn_of_qpn: BTreeMap<u32, usize>,
}

const MS: u64 = 1_000_000;

impl World<'_> {
    fn schedule(&mut self, at: Instant, a: Action) {
        self.seq += 1;
        self.action_list.insert(self.seq, a);
        self.actions.push(Reverse((at, self.seq)));
    }

    fn node_of(&self, ip: IpAddr) -> Option<usize> {
        self.nodes.iter().position(|n| n.ip == ip)
    }

    fn violation(&mut self, s: String) {
        self.report
            .violations
            .push(format!("at {} ms: {s}", self.now.0 / MS));
    }

    /// Everything the CMs want to send, onto the link.
    fn flush(&mut self) {
        for from in 0..self.nodes.len() {
            while let Some(t) = self.nodes[from].cm.poll_transmit() {
                if !self.nodes[from].up {
                    continue;
                }
                self.send(from, t.dst, t.dst_qpn, t.mad);
            }
        }
    }

    fn send(&mut self, from: usize, dst: IpAddr, _dst_qpn: Qpn, mad: [u8; 256]) {
        self.net.sent += 1;
        let src = self.nodes[from].ip;
        if self.print {
            eprintln!(
                "{:>10} ms {src} > {dst} {}",
                self.now.0 / MS,
                softrdma_wire::pretty::mad_line(&mad)
            );
        }
        let Some(to) = self.node_of(dst) else {
            self.net.no_route += 1;
            return;
        };
        // The same dice as the simulator's packet link and the engine's
        // injector (softrdma-link), thrown for the MAD's 256 bytes (its
        // PSN-based reordering does not apply: MADs go through QP 1).
        let rates = Rates {
            reorder_every: 0,
            ..self.link.rates()
        };
        let f = fate(&rates, &mut self.rng, &mad);
        if f.lost {
            self.net.lost += 1;
            return;
        }
        if f.corrupt_bit.is_some() {
            // The ICRC catches it; the receiver's transport drops it.
            self.net.corrupted += 1;
            return;
        }
        let delay = f.delay_ns;
        if f.reordered {
            self.net.reordered += 1;
        }
        if f.duplicate_after_ns.is_some() {
            self.net.duplicated += 1;
        }
        let lags = [Some(0), f.duplicate_after_ns];
        for extra in lags.into_iter().flatten() {
            self.seq += 1;
            self.in_flight.insert(
                self.seq,
                InFlight {
                    to,
                    src,
                    src_qpn: Qpn::GSI,
                    mad,
                },
            );
            self.wire
                .push(Reverse((self.now.add_ns(delay + extra), self.seq)));
        }
    }

    fn next_time(&self) -> Option<Instant> {
        let wire = self.wire.peek().map(|r| r.0 .0);
        let act = self.actions.peek().map(|r| r.0 .0);
        let timers = self
            .nodes
            .iter()
            .filter(|n| n.up)
            .filter_map(|n| n.cm.poll_timeout())
            .min();
        [wire, act, timers].into_iter().flatten().min()
    }

    fn step(&mut self) -> bool {
        self.flush();
        let Some(t) = self.next_time() else {
            return false;
        };
        self.now = self.now.max(t);
        while self.wire.peek().is_some_and(|r| r.0 .0 <= self.now) {
            let Reverse((_, seq)) = self.wire.pop().expect("peeked");
            let Some(f) = self.in_flight.remove(&seq) else {
                continue;
            };
            self.net.delivered += 1;
            if self.nodes[f.to].up {
                self.nodes[f.to]
                    .cm
                    .handle_mad(self.now, f.src, f.src_qpn, &f.mad);
                self.drain_events(f.to);
            }
        }
        for i in 0..self.nodes.len() {
            if self.nodes[i].up
                && self.nodes[i]
                    .cm
                    .poll_timeout()
                    .is_some_and(|d| d <= self.now)
            {
                self.nodes[i].cm.handle_timeout(self.now);
                self.drain_events(i);
            }
        }
        while self.actions.peek().is_some_and(|r| r.0 .0 <= self.now) {
            let Reverse((_, seq)) = self.actions.pop().expect("peeked");
            if let Some(a) = self.action_list.remove(&seq) {
                self.act(a);
            }
        }
        true
    }

    fn destroy(&mut self, node: usize, id: CmId) {
        let now = self.now;
        if self.nodes[node].cm.destroy(now, id).is_err() {
            self.violation(format!("destroy of {id} on node {node} failed"));
        }
        self.owners.remove(&(node, id));
        self.ids.remove(&(node, id));
    }

    fn outcome(&mut self, node: usize, id: CmId, what: &str) {
        let e = self.ids.entry((node, id)).or_default();
        e.outcomes += 1;
        if e.outcomes > 1 {
            self.violation(format!("second outcome ({what}) for {id} on node {node}"));
        }
    }

    fn drain_events(&mut self, node: usize) {
        while let Some(e) = self.nodes[node].cm.poll_event() {
            self.on_event(node, e);
        }
    }

    fn on_event(&mut self, node: usize, e: Event) {
        let now = self.now;
        let id = e.id();
        let owner = match &e {
            Event::ConnectRequest(_) | Event::SidrRequest(_) => None,
            _ => match self.owners.get(&(node, id)) {
                Some(o) => Some(*o),
                None => {
                    self.violation(format!("event for an id the driver does not hold: {e:?}"));
                    return;
                }
            },
        };
        match e {
            Event::ConnectRequest(cr) => {
                let qpn = cr.req().local_qpn.value();
                let Some(&c) = self.conn_of_qpn.get(&qpn) else {
                    self.violation(format!("REQ of no plan: QPN {qpn:#x}"));
                    return;
                };
                self.owners.insert((node, cr.id), Owner::ConnServer(c));
                self.ids.insert((node, cr.id), IdLog::default());
                let cma_ok = cr
                    .cma
                    .is_some_and(|h| h.src == self.nodes[self.sc.conns[c].client].ip);
                if !cma_ok {
                    self.violation(format!("conn {c}: REQ without the client's cma header"));
                }
                let first = self.report.conns[c].server_ids.is_empty();
                self.report.conns[c].server_ids.push(cr.id);
                let delay = match self.sc.conns[c].server_plan {
                    ServerPlan::Accept { delay_ms }
                    | ServerPlan::Reject { delay_ms }
                    | ServerPlan::Destroy { delay_ms } => delay_ms,
                    ServerPlan::NoListener => 0,
                };
                // A REQ that comes back after its first id is gone is
                // declined at once.
                let delay = if first { delay } else { 0 };
                self.schedule(now.add_ms(delay), Action::ServerAnswer(c, cr.id));
            }
            Event::SidrRequest(sr) => {
                // The user data after the cma header names the plan.
                let s = sr
                    .private_data
                    .get(36..40)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
                    .filter(|&s| s < self.sc.sidrs.len());
                if let Some(s) = s {
                    self.report.sidrs[s].requests += 1;
                }
                self.owners
                    .insert((node, sr.id), Owner::SidrServer(s.unwrap_or(usize::MAX)));
                let r = self.nodes[node].cm.sidr_reply(
                    now,
                    sr.id,
                    &SidrRepParams {
                        status: SidrStatus::SUCCESS,
                        qpn: Qpn::new(0x100 + node as u32),
                        qkey: QKey(softrdma_cm::limits::RDMA_UDP_QKEY),
                        info: Vec::new(),
                        private_data: Vec::new(),
                        ece: Default::default(),
                    },
                );
                if r.is_err() {
                    self.violation(format!("SIDR reply failed: {r:?}"));
                }
                self.destroy(node, sr.id);
            }
            Event::RepReceived(_) => {
                let Some(Owner::ConnClient(c)) = owner else {
                    self.violation(format!("REP for a non-client id {id}"));
                    return;
                };
                self.report.conns[c].reps += 1;
                let delay = match self.sc.conns[c].client_plan {
                    ClientPlan::Establish { delay_ms } | ClientPlan::Reject { delay_ms } => {
                        delay_ms
                    }
                    ClientPlan::DestroyEarly { .. } => 0,
                };
                self.schedule(now.add_ms(delay), Action::ClientAnswer(c));
            }
            Event::Established { .. } => {
                self.outcome(node, id, "ESTABLISHED");
                if let Some(Owner::ConnServer(c)) = owner {
                    self.report.conns[c].server_established += 1;
                } else {
                    self.violation(format!("ESTABLISHED on a non-server id {id}"));
                }
            }
            Event::Rejected(r) => {
                self.outcome(node, id, "REJECTED");
                match owner {
                    Some(Owner::ConnClient(c)) => {
                        if self.report.conns[c].client_rejected.is_empty() {
                            self.report.conns[c].rej_private = r.private_data.clone();
                        }
                        self.report.conns[c].client_rejected.push(r.reason);
                    }
                    Some(Owner::ConnServer(c)) => {
                        self.report.conns[c].server_rejected.push(r.reason)
                    }
                    _ => self.violation(format!("REJ for {id}")),
                }
                self.after_outcome(node, id);
            }
            Event::Unreachable { what, .. } => {
                self.outcome(node, id, "UNREACHABLE");
                match (owner, what) {
                    (Some(Owner::ConnClient(c)), Unanswered::Req) => {
                        self.report.conns[c].client_unreachable += 1
                    }
                    (Some(Owner::ConnServer(c)), Unanswered::Rep) => {
                        self.report.conns[c].server_unreachable += 1
                    }
                    (Some(Owner::SidrClient(s)), Unanswered::SidrReq) => {
                        self.report.sidrs[s].unreachable += 1
                    }
                    _ => self.violation(format!("UNREACHABLE {what:?} for {owner:?}")),
                }
                self.destroy(node, id);
            }
            Event::DisconnectRequest { .. } | Event::Disconnected { .. } => {
                let first_disconnect = {
                    let e = self.ids.entry((node, id)).or_default();
                    e.disconnects += 1;
                    e.disconnects == 1
                };
                if !first_disconnect {
                    self.violation(format!("two disconnect events for {id} on node {node}"));
                }
                if let (
                    Event::Disconnected {
                        timed_out: true, ..
                    },
                    Some(Owner::ConnClient(c) | Owner::ConnServer(c)),
                ) = (&e, owner)
                {
                    self.report.conns[c].dreq_timeouts += 1;
                }
                if let Event::DisconnectRequest { .. } = e {
                    // rdma_disconnect: the DREP.
                    if let Err(err) = self.nodes[node].cm.disconnect(now, id, &[]) {
                        self.violation(format!("DREP for {id} failed: {err}"));
                    }
                }
                // Timewait follows; the id is destroyed on its exit.
            }
            Event::TimewaitExit { .. } => {
                let e = self.ids.entry((node, id)).or_default();
                e.timewait_exits += 1;
                if e.timewait_exits > 1 {
                    self.violation(format!("two timewait exits for {id}"));
                }
                self.destroy(node, id);
            }
            Event::SidrReply(r) => {
                self.outcome(node, id, "SIDR_REP");
                if let Some(Owner::SidrClient(s)) = owner {
                    self.report.sidrs[s].replies.push(r.status);
                } else {
                    self.violation(format!("SIDR_REP for {owner:?}"));
                }
                self.destroy(node, id);
            }
        }
    }

    /// After REJ: an idle id is destroyed; one in timewait waits for its
    /// exit.
    fn after_outcome(&mut self, node: usize, id: CmId) {
        if self.nodes[node].cm.state(id) != Some(State::Timewait) {
            self.destroy(node, id);
        }
    }

    fn act(&mut self, a: Action) {
        let now = self.now;
        match a {
            Action::Connect(c) => {
                let p = &self.sc.conns[c];
                if !self.nodes[p.client].up {
                    return;
                }
                let (src, dst) = (self.nodes[p.client].ip, self.nodes[p.server].ip);
                let port = 10_000 + c as u16;
                let path = negotiate::rdma_cm_path(src, dst, port, 7174, 3, 0, 64);
                let cma = CmaHdrRepr {
                    src_port: port,
                    src,
                    dst,
                };
                let conn = ConnParam {
                    responder_resources: 1,
                    initiator_depth: 1,
                    retry_count: 7,
                    rnr_retry_count: 7,
                    qp_num: Qpn::new(Self::client_qpn(c)),
                    ..Default::default()
                };
                let sid = if p.server_plan == ServerPlan::NoListener {
                    UNHEARD_SERVICE
                } else {
                    RC_SERVICE
                };
                let psn = self.nodes[p.client].cm.random_psn();
                let params = match negotiate::req_params(&path, sid, &cma, QpType::Rc, psn, &conn) {
                    Ok(x) => x,
                    Err(e) => return self.violation(format!("req params: {e}")),
                };
                match self.nodes[p.client].cm.connect(now, &params) {
                    Ok(id) => {
                        self.owners.insert((p.client, id), Owner::ConnClient(c));
                        self.ids.insert((p.client, id), IdLog::default());
                        self.report.conns[c].client_id = Some(id);
                        if let ClientPlan::DestroyEarly { after_ms } = p.client_plan {
                            self.schedule(now.add_ms(after_ms), Action::ClientGiveUp(c));
                        }
                    }
                    Err(e) => self.violation(format!("connect: {e}")),
                }
            }
            Action::Sidr(s) => {
                let p = &self.sc.sidrs[s];
                if !self.nodes[p.client].up {
                    return;
                }
                let (src, dst) = (self.nodes[p.client].ip, self.nodes[p.server].ip);
                let cma = CmaHdrRepr {
                    src_port: 20_000 + s as u16,
                    src,
                    dst,
                };
                let sid = if p.listening {
                    UD_SERVICE
                } else {
                    ServiceId::rdma_cm(PortSpace::Udp, 9998)
                };
                // The user data names the plan.
                let user = (s as u32).to_be_bytes();
                let params = match negotiate::sidr_req_params(dst, sid, &cma, &user) {
                    Ok(mut x) => {
                        x.pkey = PKey::DEFAULT;
                        x
                    }
                    Err(e) => return self.violation(format!("sidr params: {e}")),
                };
                let params: SidrReqParams = params;
                match self.nodes[p.client].cm.sidr_request(now, &params) {
                    Ok(id) => {
                        self.owners.insert((p.client, id), Owner::SidrClient(s));
                        self.ids.insert((p.client, id), IdLog::default());
                    }
                    Err(e) => self.violation(format!("sidr_request: {e}")),
                }
            }
            Action::ServerAnswer(c, id) => {
                let p = &self.sc.conns[c];
                let node = p.server;
                if !self.nodes[node].up || !self.owners.contains_key(&(node, id)) {
                    return;
                }
                let first = self.report.conns[c].server_ids.first() == Some(&id);
                let cm = &mut self.nodes[node].cm;
                let r = match (p.server_plan, first) {
                    (ServerPlan::Accept { .. }, true) => {
                        let conn = ConnParam {
                            responder_resources: 1,
                            initiator_depth: 1,
                            rnr_retry_count: 7,
                            qp_num: Qpn::new(Self::server_qpn(c)),
                            ..Default::default()
                        };
                        let psn = cm.random_psn();
                        let rep = negotiate::rep_params(psn, &conn).expect("REP params");
                        let r = cm.accept(now, id, &rep);
                        if r.is_ok() {
                            self.report.conns[c].accepted = true;
                        }
                        r
                    }
                    (ServerPlan::Destroy { .. }, true) => {
                        self.destroy(node, id);
                        return;
                    }
                    _ => cm.reject(now, id, RejReason::CONSUMER_DEFINED, &[], b"no thanks"),
                };
                // An error: the id ended meanwhile (REJ "timeout" from a
                // client that gave up), and its event destroys it. A reject
                // leaves it idle: destroy it now.
                if r.is_ok() && self.nodes[node].cm.state(id) == Some(State::Idle) {
                    self.destroy(node, id);
                }
            }
            Action::ClientAnswer(c) => {
                let p = &self.sc.conns[c];
                let node = p.client;
                let Some(id) = self.report.conns[c].client_id else {
                    return;
                };
                if !self.nodes[node].up || !self.owners.contains_key(&(node, id)) {
                    return;
                }
                match p.client_plan {
                    ClientPlan::Establish { .. } => {
                        if self.nodes[node].cm.establish(now, id, &[]).is_ok() {
                            self.outcome(node, id, "ESTABLISHED (RTU)");
                            self.report.conns[c].client_established += 1;
                            let data = p.data_ms.min(p.hold_ms / 2);
                            self.schedule(now.add_ms(data), Action::Data(c));
                            let td = match p.teardown {
                                Teardown::ClientDisconnect | Teardown::ClientDestroy => 0,
                                Teardown::ServerDisconnect | Teardown::ServerDestroy => 1,
                                Teardown::Both => 2,
                            };
                            self.schedule(now.add_ms(p.hold_ms), Action::Teardown(c, td));
                            self.schedule(
                                now.add_ms(p.hold_ms + 30_000),
                                Action::Watchdog(c, false),
                            );
                            self.schedule(
                                now.add_ms(p.hold_ms + 30_000),
                                Action::Watchdog(c, true),
                            );
                        }
                    }
                    ClientPlan::Reject { .. } => {
                        if self.nodes[node]
                            .cm
                            .reject(now, id, RejReason::CONSUMER_DEFINED, &[], &[])
                            .is_ok()
                        {
                            self.after_outcome(node, id);
                        }
                    }
                    ClientPlan::DestroyEarly { .. } => {}
                }
            }
            Action::ClientGiveUp(c) => {
                let node = self.sc.conns[c].client;
                let Some(id) = self.report.conns[c].client_id else {
                    return;
                };
                if !self.nodes[node].up || !self.owners.contains_key(&(node, id)) {
                    return;
                }
                // Whatever was reached by now (REQ pending, or a REP not
                // answered yet): destroy says goodbye.
                self.report.conns[c].client_gave_up = true;
                self.destroy(node, id);
            }
            Action::Data(c) => {
                // The client's first packet reaches the server's QP.
                let node = self.sc.conns[c].server;
                if !self.nodes[node].up {
                    return;
                }
                let ids = self.report.conns[c].server_ids.clone();
                for id in ids {
                    if matches!(
                        self.nodes[node].cm.state(id),
                        Some(State::RepSent | State::MraRepRcvd)
                    ) {
                        let _ = self.nodes[node].cm.notify_established(id);
                        self.drain_events(node);
                    }
                }
            }
            Action::Teardown(c, who) => {
                let p = self.sc.conns[c].clone();
                let client = self.report.conns[c].client_id.map(|i| (p.client, i));
                let server = self.report.conns[c]
                    .server_ids
                    .first()
                    .map(|&i| (p.server, i));
                let destroy = matches!(
                    p.teardown,
                    Teardown::ClientDestroy | Teardown::ServerDestroy
                );
                let sides: Vec<(usize, CmId)> = match who {
                    0 => client.into_iter().collect(),
                    1 => server.into_iter().collect(),
                    _ => client.into_iter().chain(server).collect(),
                };
                for (node, id) in sides {
                    if !self.nodes[node].up || !self.owners.contains_key(&(node, id)) {
                        continue;
                    }
                    let st = self.nodes[node].cm.state(id);
                    if destroy && st == Some(State::Established) {
                        self.destroy(node, id);
                    } else if st == Some(State::Established) {
                        let _ = self.nodes[node].cm.disconnect(now, id, &[]);
                    } else if matches!(st, Some(State::RepSent | State::MraRepRcvd)) {
                        // Not connected yet on this side (RTU on its way):
                        // try again later.
                        self.schedule(now.add_ms(5_000), Action::Teardown(c, who));
                    }
                }
            }
            Action::Watchdog(c, server_side) => {
                // A peer that died never sends its DREQ: the QP errors out
                // and the application disconnects by itself.
                let p = &self.sc.conns[c];
                let side = if server_side {
                    self.report.conns[c]
                        .server_ids
                        .first()
                        .map(|&i| (p.server, i))
                } else {
                    self.report.conns[c].client_id.map(|i| (p.client, i))
                };
                if let Some((node, id)) = side {
                    if self.nodes[node].up && self.owners.contains_key(&(node, id)) {
                        match self.nodes[node].cm.state(id) {
                            Some(State::Established) => {
                                let _ = self.nodes[node].cm.disconnect(now, id, &[]);
                            }
                            Some(State::RepSent | State::MraRepRcvd | State::DreqSent) => {
                                self.schedule(now.add_ms(30_000), Action::Watchdog(c, server_side));
                            }
                            _ => {}
                        }
                    }
                }
            }
            Action::Kill(n) => {
                self.nodes[n].up = false;
            }
            Action::CloseListeners => {
                for n in 0..self.nodes.len() {
                    if !self.nodes[n].up {
                        continue;
                    }
                    for id in std::mem::take(&mut self.nodes[n].listeners) {
                        self.destroy(n, id);
                    }
                }
            }
        }
        for n in 0..self.nodes.len() {
            self.drain_events(n);
        }
        self.flush();
    }

    fn client_qpn(c: usize) -> u32 {
        0x1000 + 2 * c as u32
    }
    fn server_qpn(c: usize) -> u32 {
        0x1001 + 2 * c as u32
    }
}

/// Plays a scenario to the end.
pub fn run(sc: &Scenario) -> Report {
    let mut w = World {
        sc,
        now: Instant(0),
        nodes: Vec::new(),
        rng: Rng::new(sc.seed ^ 0x11ce_5eed_0000_0c3a),
        link: sc.link,
        net: NetStats::default(),
        wire: BinaryHeap::new(),
        in_flight: BTreeMap::new(),
        actions: BinaryHeap::new(),
        action_list: BTreeMap::new(),
        seq: 0,
        owners: BTreeMap::new(),
        ids: BTreeMap::new(),
        report: Report::default(),
        print: std::env::var_os("SOFTRDMA_SIM_TRACE").is_some(),
        conn_of_qpn: BTreeMap::new(),
    };
    w.report.conns = vec![ConnLog::default(); sc.conns.len()];
    w.report.sidrs = vec![SidrLog::default(); sc.sidrs.len()];
    for i in 0..sc.nodes {
        let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, i as u8 + 1));
        let mut key_rng = Rng::new(sc.seed.wrapping_mul(0x9e37_79b9).wrapping_add(i as u64));
        let cfg = CmConfig::new(
            0x0200_0000_0000_0000 | i as u64,
            [key_rng.next_u64(), key_rng.next_u64()],
        );
        let mut node = Node {
            cm: Cm::new(cfg),
            ip,
            up: sc.dead_node != Some(i),
            listeners: Vec::new(),
        };
        for sid in [RC_SERVICE, UD_SERVICE] {
            if let Ok(id) = node.cm.listen(sid) {
                node.listeners.push(id);
            }
        }
        for &id in &node.listeners {
            w.owners.insert((i, id), Owner::Listener);
        }
        w.nodes.push(node);
    }
    for (c, p) in sc.conns.iter().enumerate() {
        w.conn_of_qpn.insert(World::client_qpn(c), c);
        w.schedule(Instant(p.start_ms * MS), Action::Connect(c));
    }
    for (s, p) in sc.sidrs.iter().enumerate() {
        w.schedule(Instant(p.start_ms * MS), Action::Sidr(s));
    }
    if let Some((n, at)) = sc.dies {
        w.schedule(Instant(at * MS), Action::Kill(n));
    }
    w.schedule(Instant(sc.close_listeners_ms * MS), Action::CloseListeners);
    // Bounded: every action, MAD and timer is finite (retries and timewait
    // end), and the run stops at a day of virtual time whatever happens.
    let limit = Instant(86_400_000 * MS);
    while w.now < limit && w.step() {}
    w.flush();
    w.report.net = w.net;
    w.report.end = w.now;
    for (i, n) in w.nodes.iter().enumerate() {
        let c = n.cm.counters();
        let t = &mut w.report.cm;
        t.rx_mads += c.rx_mads;
        t.rx_dropped += c.rx_dropped;
        t.rx_duplicates += c.rx_duplicates;
        t.rx_busy += c.rx_busy;
        t.tx_mads += c.tx_mads;
        t.tx_retransmits += c.tx_retransmits;
        t.tx_queue_drops += c.tx_queue_drops;
        t.tx_rej += c.tx_rej;
        t.tx_mra += c.tx_mra;
        t.tx_unsupported += c.tx_unsupported;
        if !n.up {
            continue;
        }
        if let Err(e) = n.cm.check_invariants() {
            w.report.violations.push(format!("node {i}: {e}"));
        }
        w.report.leftover_ids += n.cm.id_count();
        for id in n.cm.ids() {
            w.report.leftovers.push(format!(
                "node {i} {id} {:?} held for {:?}",
                n.cm.state(id),
                w.owners.get(&(i, id))
            ));
        }
        if !n.cm.is_quiescent() {
            w.report.not_quiescent.push(i);
        }
    }
    w.report
}

/// The link of the CM runs: 10 % loss, 5 % duplication, 10 % reordering
/// by up to 30 ms, 1 % corruption, 50 µs ± 2 ms.
pub fn lossy_link() -> LinkConfig {
    LinkConfig {
        loss: 0.10,
        duplicate: 0.05,
        reorder: 0.10,
        reorder_delay_ns: 30 * MS,
        corrupt: 0.01,
        delay_ns: 50_000,
        jitter_ns: 2 * MS,
        mtu: 9000,
        reorder_psn_mod: 0,
    }
}
