//! The simulation state of a CM run: the nodes, the simulated network
//! ([`crate::Sim`], the transport runs' link) that carries their MADs as
//! RoCE packets between the nodes' QP 1, the queue of actions and the
//! step of the event loop.

use super::{Report, Scenario};
use crate::net::Sim;
use softrdma_cm::rdma::{Binding, DeviceCm, IdState, Listener, Ports};
use softrdma_cm::{CmId, Instant};
use softrdma_link::Rng;
use softrdma_wire::cm::PortSpace;
use softrdma_wire::mad::GSI_QKEY;
use softrdma_wire::QKey;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::net::IpAddr;

/// A node: one device's part of the rdma_cm layer (its CM, its shared
/// CM listeners, the requests it holds for a listener) at one address;
/// its RoCE device is the [`Sim`]'s node of the same index.
pub(super) struct Node {
    pub(super) dev: DeviceCm,
    pub(super) ip: IpAddr,
    pub(super) up: bool,
    /// The rdma_cm listeners, by number.
    pub(super) listeners: BTreeMap<u64, Listener>,
    /// The ports its rdma_cm ids hold (the layer's tables, as the
    /// softrdma driver keeps them): the listeners' and the connecting
    /// ids' ephemeral ones.
    pub(super) ports: Ports,
    /// Ports held, to find a leak when the run drains.
    pub(super) ports_held: usize,
    /// The next rdma_cm id number (the listeners are 1 and 2).
    pub(super) next_num: u64,
    /// Where an ephemeral port search starts (the driver's random draw).
    pub(super) port_rng: Rng,
}

impl Node {
    /// A new rdma_cm id `rdma_bind_addr`s `ip` and `port` (0: an
    /// ephemeral one) in `ps`: its number and port.
    pub(super) fn bind(
        &mut self,
        ps: PortSpace,
        ip: IpAddr,
        port: u16,
    ) -> Result<(u64, u16), softrdma_cm::rdma::PortError> {
        let num = self.next_num;
        self.next_num += 1;
        let b = Binding {
            ip,
            reuseaddr: false,
            afonly: false,
        };
        let start = self.port_rng.next_u64() as u32;
        let port = self.ports.take(ps, num, port, b, start)?;
        self.ports_held += 1;
        Ok((num, port))
    }

    /// Id `num` lets its port go.
    pub(super) fn unbind(&mut self, ps: PortSpace, port: u16, num: u64) {
        self.ports.release(ps, port, num);
        self.ports_held -= 1;
    }
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
    /// The port it holds: space, port, rdma_cm id number.
    pub(super) port: Option<(PortSpace, u16, u64)>,
}

impl Default for IdLog {
    /// Every id of a run connects (`rdma_connect`, or a request's id).
    fn default() -> IdLog {
        IdLog {
            outcomes: 0,
            disconnects: 0,
            timewait_exits: 0,
            st: IdState::Connect,
            port: None,
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

/// The simulation state.
pub(super) struct World<'s> {
    pub(super) sc: &'s Scenario,
    pub(super) now: Instant,
    pub(super) nodes: Vec<Node>,
    /// The network: node `i`'s RoCE device (QP 1 carries its MADs) and
    /// the link between them; its clock follows `now`.
    pub(super) sim: Sim,
    /// Where [`Device::emit_gsi`](softrdma_proto::Device::emit_gsi) writes.
    pub(super) buf: Vec<u8>,
    pub(super) actions: BinaryHeap<Reverse<(Instant, u64)>>,
    pub(super) action_list: BTreeMap<u64, Action>,
    pub(super) seq: u64,
    pub(super) owners: BTreeMap<(usize, CmId), Owner>,
    pub(super) ids: BTreeMap<(usize, CmId), IdLog>,
    pub(super) report: Report,
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

    pub(super) fn violation(&mut self, s: String) {
        self.report
            .violations
            .push(format!("at {} ms: {s}", self.now.0 / MS));
    }

    /// Everything the CMs want to send: each MAD a UD SEND_ONLY from QP 1
    /// built by the node's device, handed to the link.
    pub(super) fn flush(&mut self) {
        self.sim.now = softrdma_proto::Instant(self.now.0);
        for from in 0..self.nodes.len() {
            while let Some(t) = self.nodes[from].dev.cm.poll_transmit() {
                if !self.nodes[from].up {
                    continue;
                }
                let dev = &mut self.sim.nodes[from].dev;
                let Some(tx) =
                    dev.emit_gsi(t.dst, t.dst_qpn, QKey(GSI_QKEY), &t.mad, &mut self.buf)
                else {
                    self.violation(format!("node {from} cannot send a MAD to {}", t.dst));
                    continue;
                };
                let data = self.buf[..tx.len].to_vec();
                self.sim
                    .send(from, tx.dst, tx.traffic_class, tx.hop_limit, data);
                if self.sim.print {
                    // The Sim printed the packet (and its fate); what it carries.
                    eprintln!(
                        "{:>12}   {}",
                        "MAD",
                        softrdma_wire::pretty::mad_line(&t.mad)
                    );
                }
            }
        }
    }

    pub(super) fn next_time(&self) -> Option<Instant> {
        let net = self.sim.next_event().map(|t| Instant(t.0));
        let act = self.actions.peek().map(|r| r.0 .0);
        let timers = self
            .nodes
            .iter()
            .filter(|n| n.up)
            .filter_map(|n| n.dev.deadline())
            .min();
        [net, act, timers].into_iter().flatten().min()
    }

    pub(super) fn step(&mut self) -> bool {
        self.flush();
        let Some(t) = self.next_time() else {
            return false;
        };
        self.now = self.now.max(t);
        // The network delivers what is due (a corrupted packet fails the
        // device's ICRC check), then each node's CM takes what its QP 1
        // received, in order.
        self.sim.step(softrdma_proto::Instant(self.now.0));
        for i in 0..self.nodes.len() {
            while let Some(m) = self.sim.nodes[i].dev.poll_gsi() {
                if self.nodes[i].up {
                    // Held (a request nobody listens for yet) or to the CM.
                    self.nodes[i]
                        .dev
                        .receive(self.now, m.src, m.src_qpn, &m.mad);
                    self.drain_events(i);
                }
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
        if let Some((ps, port, num)) = self.ids.remove(&(node, id)).and_then(|l| l.port) {
            self.nodes[node].unbind(ps, port, num);
        }
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
