//! The simulation state of a CM run: the nodes, the link that carries
//! their MADs (the same dice as the packet link), the queue of actions
//! and the step of the event loop.

use super::{Report, Scenario};
use crate::net::{LinkConfig, NetStats};
use softrdma_cm::rdma::{DeviceCm, IdState, Listener};
use softrdma_cm::{CmId, Instant};
use softrdma_link::{fate, Rates, Rng};
use softrdma_wire::Qpn;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::net::IpAddr;

/// A node: one device's part of the rdma_cm layer (its CM, its shared
/// CM listeners, the requests it holds for a listener) at one address.
pub(super) struct Node {
    pub(super) dev: DeviceCm,
    pub(super) ip: IpAddr,
    pub(super) up: bool,
    /// The rdma_cm listeners, by number.
    pub(super) listeners: BTreeMap<u64, Listener>,
}

/// Which plan an id belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Owner {
    ConnClient(usize),
    ConnServer(usize),
    SidrClient(usize),
    SidrServer(usize),
}

/// Per-id bookkeeping of the driver model.
#[derive(Clone, Debug)]
pub(super) struct IdLog {
    pub(super) outcomes: u32,
    pub(super) disconnects: u32,
    pub(super) timewait_exits: u32,
    /// The id's rdma_cm state, moved by the layer's `report`.
    pub(super) st: IdState,
}

impl Default for IdLog {
    /// Every id of a run connects (`rdma_connect`, or a request's id).
    fn default() -> IdLog {
        IdLog {
            outcomes: 0,
            disconnects: 0,
            timewait_exits: 0,
            st: IdState::Connect,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Action {
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

pub(super) struct InFlight {
    pub(super) to: usize,
    pub(super) src: IpAddr,
    pub(super) src_qpn: Qpn,
    pub(super) mad: [u8; 256],
}

/// The simulation state.
pub(super) struct World<'s> {
    pub(super) sc: &'s Scenario,
    pub(super) now: Instant,
    pub(super) nodes: Vec<Node>,
    pub(super) rng: Rng,
    pub(super) link: LinkConfig,
    pub(super) net: NetStats,
    pub(super) wire: BinaryHeap<Reverse<(Instant, u64)>>,
    pub(super) in_flight: BTreeMap<u64, InFlight>,
    pub(super) actions: BinaryHeap<Reverse<(Instant, u64)>>,
    pub(super) action_list: BTreeMap<u64, Action>,
    pub(super) seq: u64,
    pub(super) owners: BTreeMap<(usize, CmId), Owner>,
    pub(super) ids: BTreeMap<(usize, CmId), IdLog>,
    pub(super) report: Report,
    pub(super) print: bool,
    /// QPN -> connection, for matching REQs to plans.
    pub(super) conn_of_qpn: BTreeMap<u32, usize>,
}

pub(super) const MS: u64 = 1_000_000;

impl World<'_> {
    pub(super) fn schedule(&mut self, at: Instant, a: Action) {
        self.seq += 1;
        self.action_list.insert(self.seq, a);
        self.actions.push(Reverse((at, self.seq)));
    }

    pub(super) fn node_of(&self, ip: IpAddr) -> Option<usize> {
        self.nodes.iter().position(|n| n.ip == ip)
    }

    pub(super) fn violation(&mut self, s: String) {
        self.report
            .violations
            .push(format!("at {} ms: {s}", self.now.0 / MS));
    }

    /// Everything the CMs want to send, onto the link.
    pub(super) fn flush(&mut self) {
        for from in 0..self.nodes.len() {
            while let Some(t) = self.nodes[from].dev.cm.poll_transmit() {
                if !self.nodes[from].up {
                    continue;
                }
                self.send(from, t.dst, t.dst_qpn, t.mad);
            }
        }
    }

    pub(super) fn send(&mut self, from: usize, dst: IpAddr, _dst_qpn: Qpn, mad: [u8; 256]) {
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

    pub(super) fn next_time(&self) -> Option<Instant> {
        let wire = self.wire.peek().map(|r| r.0 .0);
        let act = self.actions.peek().map(|r| r.0 .0);
        let timers = self
            .nodes
            .iter()
            .filter(|n| n.up)
            .filter_map(|n| n.dev.deadline())
            .min();
        [wire, act, timers].into_iter().flatten().min()
    }

    pub(super) fn step(&mut self) -> bool {
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
                // Held (a request nobody listens for yet) or to the CM.
                self.nodes[f.to]
                    .dev
                    .receive(self.now, f.src, f.src_qpn, &f.mad);
                self.drain_events(f.to);
            }
        }
        for i in 0..self.nodes.len() {
            if self.nodes[i].up && self.nodes[i].dev.deadline().is_some_and(|d| d <= self.now) {
                self.nodes[i].dev.handle_timeout(self.now);
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

    pub(super) fn destroy(&mut self, node: usize, id: CmId) {
        let now = self.now;
        if self.nodes[node].dev.cm.destroy(now, id).is_err() {
            self.violation(format!("destroy of {id} on node {node} failed"));
        }
        self.owners.remove(&(node, id));
        self.ids.remove(&(node, id));
    }

    pub(super) fn outcome(&mut self, node: usize, id: CmId, what: &str) {
        let e = self.ids.entry((node, id)).or_default();
        e.outcomes += 1;
        if e.outcomes > 1 {
            self.violation(format!("second outcome ({what}) for {id} on node {node}"));
        }
    }

    pub(super) fn drain_events(&mut self, node: usize) {
        while let Some(e) = self.nodes[node].dev.cm.poll_event() {
            self.on_event(node, e);
        }
    }
}
