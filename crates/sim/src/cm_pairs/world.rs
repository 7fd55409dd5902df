//! The simulation state of a CM run: the nodes, the simulated network
//! ([`crate::Sim`], the transport runs' link) that carries their MADs as
//! RoCE packets between the nodes' QP 1, the queue of actions and the
//! step of the event loop.

use super::{Report, Scenario};
use crate::net::Sim;
use softrdma_cm::rdma::{Endpoint, Options, Transport};
use softrdma_cm::{Instant, PortSpace};
use softrdma_link::Rng;
use softrdma_wire::mad::GSI_QKEY;
use softrdma_wire::{Psn, QKey};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::net::{IpAddr, SocketAddr};

/// A node: the rdma_cm layer of one process ([`Endpoint`]: its ids, port
/// tables, listeners and its one device's CM) at one address; its RoCE
/// device is the [`Sim`]'s node of the same index, which is also the
/// device's number in the endpoint.
pub(super) struct Node {
    pub(super) ep: Endpoint,
    pub(super) dev: u64,
    pub(super) ip: IpAddr,
    pub(super) up: bool,
    /// The rdma_cm listeners' id numbers.
    pub(super) listeners: Vec<u64>,
    /// Where an ephemeral port search starts (the random draw of `rdma_bind_addr`).
    pub(super) port_rng: Rng,
    /// The PD and CQ of the connections' QPs on the node's device.
    pub(super) pd: softrdma_proto::PdId,
    pub(super) cq: softrdma_proto::CqId,
}

impl Node {
    /// `rdma_create_id` with the PSN the device's CM draws.
    pub(super) fn create_id(&mut self, ps: PortSpace, t: Transport) -> u64 {
        let seq = match self.ep.device_mut(self.dev) {
            Some(d) => d.cm.random_psn(),
            None => Psn::ZERO,
        };
        self.ep.create_id(ps, t, seq)
    }

    /// A wildcard rdma_cm listener (`rdma_bind_addr` on 0.0.0.0 with
    /// AFONLY, `rdma_listen` with the default backlog).
    pub(super) fn listen(&mut self, ps: PortSpace, t: Transport, port: u16) -> Result<u64, String> {
        let num = self.create_id(ps, t);
        let o = Options {
            afonly: true,
            ..Default::default()
        };
        let any = SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), port);
        let r = self.ep.set_options(num, o).and_then(|()| {
            self.ep.bind(num, None, any, 0)?;
            self.ep.listen(num, 0, Instant(0))
        });
        r.map_err(|e| format!("listen on {port}: {e}"))?;
        self.listeners.push(num);
        Ok(num)
    }

    /// An active id resolved to `dst` (`rdma_resolve_addr` binds an
    /// ephemeral port, `rdma_resolve_route` gives the path): its number
    /// and port.
    pub(super) fn active(
        &mut self,
        ps: PortSpace,
        t: Transport,
        dst: SocketAddr,
    ) -> Result<(u64, u16), String> {
        let num = self.create_id(ps, t);
        let start = self.port_rng.next_u64() as u32;
        let src = SocketAddr::new(self.ip, 0);
        let port = self
            .ep
            .bind(num, Some(self.dev), src, start)
            .map_err(|e| format!("bind: {e}"))?;
        let path =
            softrdma_cm::negotiate::rdma_cm_path(self.ip, dst.ip(), port, dst.port(), 3, 0, 64);
        self.ep
            .resolve(num, self.dev, self.ip, dst, path, start)
            .map_err(|e| format!("resolve: {e}"))?;
        Ok((num, port))
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

/// Per-id bookkeeping of the program model.
#[derive(Clone, Debug, Default)]
pub(super) struct IdLog {
    pub(super) outcomes: u32,
    pub(super) disconnects: u32,
    pub(super) timewait_exits: u32,
}

/// What the event loop does at a time.
#[derive(Clone, Copy, Debug)]
pub(super) enum Action {
    Connect(usize),
    Sidr(usize),
    ServerAnswer(usize, u64),
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
    /// (node, rdma_cm id) -> the plan it belongs to.
    pub(super) owners: BTreeMap<(usize, u64), Owner>,
    pub(super) ids: BTreeMap<(usize, u64), IdLog>,
    pub(super) report: Report,
    /// QPN -> connection, for matching REQs to plans.
    pub(super) conn_of_qpn: BTreeMap<u32, usize>,
    /// (node, rdma_cm id) -> its QP on the node's device (`qps.rs`).
    pub(super) qps: BTreeMap<(usize, u64), softrdma_wire::Qpn>,
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

    /// Everything the endpoints want to send: each MAD a UD SEND_ONLY from
    /// QP 1 built by the node's device, handed to the link.
    pub(super) fn flush(&mut self) {
        self.sim.now = softrdma_proto::Instant(self.now.0);
        for from in 0..self.nodes.len() {
            while let Some((_, t)) = self.nodes[from].ep.poll_transmit() {
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
            .filter_map(|n| n.ep.deadline())
            .min();
        [net, act, timers].into_iter().flatten().min()
    }

    /// One step of the event loop: the network to the next time, the
    /// MADs it delivered into the endpoints, the timers due, the actions
    /// due.
    pub(super) fn step(&mut self) -> bool {
        self.flush();
        let Some(t) = self.next_time() else {
            return false;
        };
        self.now = self.now.max(t);
        self.sim.step(softrdma_proto::Instant(self.now.0));
        for i in 0..self.nodes.len() {
            while let Some(m) = self.sim.nodes[i].dev.poll_gsi() {
                if self.nodes[i].up {
                    let n = &mut self.nodes[i];
                    n.ep.receive(n.dev, self.now, m.src, m.src_qpn, &m.mad);
                    self.drain_events(i);
                }
            }
        }
        for i in 0..self.nodes.len() {
            if self.nodes[i].up && self.nodes[i].ep.deadline().is_some_and(|d| d <= self.now) {
                self.nodes[i].ep.handle_timeout(self.now);
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

    /// `rdma_destroy_id` (the endpoint says goodbye and frees the port).
    pub(super) fn destroy(&mut self, node: usize, id: u64) {
        let now = self.now;
        if let Err(e) = self.nodes[node].ep.destroy(id, now) {
            self.violation(format!("destroy of id {id} on node {node} failed: {e}"));
        }
        self.owners.remove(&(node, id));
        self.ids.remove(&(node, id));
        self.destroy_qp(node, id);
    }

    pub(super) fn outcome(&mut self, node: usize, id: u64, what: &str) {
        let e = self.ids.entry((node, id)).or_default();
        e.outcomes += 1;
        if e.outcomes > 1 {
            self.violation(format!(
                "second outcome ({what}) for id {id} on node {node}"
            ));
        }
    }

    /// The node's CM events (with the rdma_cm events they became) and its
    /// channel events, until none is left.
    pub(super) fn drain_events(&mut self, node: usize) {
        loop {
            if let Some(o) = self.nodes[node].ep.poll_observed() {
                self.on_event(node, o);
                continue;
            }
            let Some(q) = self.nodes[node].ep.poll_event() else {
                return self.apply_qp_changes(node);
            };
            // The program takes the event at once and acknowledges it.
            self.nodes[node].ep.ack(q.id);
            if !self.owners.contains_key(&(node, q.id))
                && !self.nodes[node].listeners.contains(&q.id)
            {
                self.violation(format!("an rdma_cm event for an id nobody holds: {q:?}"));
            }
        }
    }
}
