//! Connection management in the simulator: one rdma_cm layer per node
//! ([`softrdma_cm::rdma::Endpoint`], the one softrdma's rdma_cm is built
//! on: the ids, their ports and listeners, the device's real CM, requests
//! held for a listener) on a virtual clock, their MADs carried between the
//! nodes' QP 1 as RoCE packets by the simulator's network ([`crate::Sim`],
//! the link of the transport runs: seeded loss, duplication, reordering,
//! corruption — a corrupted packet fails the receiving device's ICRC
//! check — and delay), and a program model per node that makes
//! librdmacm's calls on its ids (`rdma_connect`, `rdma_accept`,
//! `rdma_reject`, `rdma_establish`, `rdma_disconnect`, `rdma_destroy_id`,
//! UD ids' SIDR), answers late and sometimes dies.
//!
//! [`run`] plays one seeded [`Scenario`] to the end and returns a
//! [`Report`]; [`Report::check`] verifies the promises:
//!
//! - exactly one ESTABLISHED on each side of every connection that both
//!   sides accepted (the client's successful RTU, the server's
//!   [`softrdma_cm::Event::Established`]), none on any other;
//! - a connection to a service nobody listens on is rejected with reason 8,
//!   one the server declines with 28 and its private data, one to a node
//!   that never answers ends UNREACHABLE; SIDR likewise;
//! - no id gets two outcomes (ESTABLISHED / REJECTED / UNREACHABLE), two
//!   disconnect events or two timewait exits, and events name only ids the
//!   program holds;
//! - when the run drains, every CM of a live node is quiescent: every id
//!   ended and was destroyed, no timer, timewait record or queued MAD is
//!   left, every rdma_cm id was destroyed and no port is held in its
//!   endpoint's [`softrdma_cm::rdma::Ports`] (the listeners bind theirs,
//!   connecting and SIDR ids an ephemeral one, which the server sees in
//!   the REQ's cma header);
//! - each CM event became the rdma_cm event Linux's `cma_ib_handler` makes
//!   of it (the endpoint's [`softrdma_cm::rdma::Observed`] record);
//! - the link's loss, duplication and reordering actually happened, and
//!   the CMs retransmitted, recognised duplicates and sent MRAs.
//!
//! A run is a function of its seed; `SOFTRDMA_SIM_TRACE=1` prints every MAD.
//!
//! Where things live: `scenario.rs` draws the plans (what each client,
//! server and SIDR pair does, which node never answers or dies);
//! `report.rs` is what a run saw and [`Report::check`]; `world.rs` is the
//! simulation state, how MADs go through the nodes' devices and the
//! [`crate::Sim`], and the event loop's step;
//! `program.rs` is the program model (how each node's program answers its
//! ids' events and carries out the plans' actions through the endpoint's
//! id calls); this file is [`run`] and [`lossy_link`].

mod program;
mod qps;
mod report;
mod scenario;
mod world;

use crate::net::{LinkConfig, Sim};
pub use report::{ConnLog, Report, SidrLog};
pub use scenario::*;
use softrdma_cm::rdma::{Endpoint, Transport};
use softrdma_cm::{CmConfig, Instant};
use softrdma_link::Rng;
use softrdma_wire::cm::PortSpace;
use std::collections::{BTreeMap, BinaryHeap};
use std::net::{IpAddr, Ipv4Addr};
use world::{Action, Node, World, MS};

/// Plays a scenario to the end.
pub fn run(sc: &Scenario) -> Report {
    let mut w = World {
        sc,
        now: Instant(0),
        nodes: Vec::new(),
        sim: Sim::new(sc.seed ^ 0x11ce_5eed_0000_0c3a, sc.link),
        buf: vec![0; softrdma_proto::device::MIN_TX_BUF],
        actions: BinaryHeap::new(),
        action_list: BTreeMap::new(),
        seq: 0,
        owners: BTreeMap::new(),
        ids: BTreeMap::new(),
        report: Report::default(),
        conn_of_qpn: BTreeMap::new(),
        qps: BTreeMap::new(),
    };
    w.report.conns = vec![ConnLog::default(); sc.conns.len()];
    w.report.sidrs = vec![SidrLog::default(); sc.sidrs.len()];
    for i in 0..sc.nodes {
        let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, i as u8 + 1));
        w.sim.add_node(sc.seed.wrapping_add(i as u64), Some(ip));
        let mut key_rng = Rng::new(sc.seed.wrapping_mul(0x9e37_79b9).wrapping_add(i as u64));
        let cfg = CmConfig::new(
            0x0200_0000_0000_0000 | i as u64,
            [key_rng.next_u64(), key_rng.next_u64()],
        );
        let dev = i as u64;
        // The connections' QPs: one PD and one CQ (nothing is posted, so
        // nothing completes but the flushes of the QPs' ERR).
        let d = &mut w.sim.nodes[i].dev;
        let (pd, cq) = match (d.alloc_pd(), d.create_cq(4096)) {
            (Ok(pd), Ok(cq)) => (pd, cq),
            r => panic!("node {i}: PD and CQ: {r:?}"),
        };
        let mut ep = Endpoint::new();
        ep.add_device(dev, cfg, ip, Instant(0));
        // The CM events behind the rdma_cm events, for the checks.
        ep.observe(true);
        let mut node = Node {
            ep,
            dev,
            ip,
            up: sc.dead_node != Some(i),
            listeners: Vec::new(),
            port_rng: Rng::new(key_rng.next_u64()),
            pd,
            cq,
        };
        // Two wildcard rdma_cm listeners: RC on RC_SERVICE's port, UD on
        // UD_SERVICE's.
        for (ps, port, transport) in [
            (PortSpace::Tcp, RC_PORT, Transport::Rc),
            (PortSpace::Udp, UD_PORT, Transport::Ud),
        ] {
            if let Err(e) = node.listen(ps, transport, port) {
                w.report.violations.push(format!("node {i}: {e}"));
            }
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
    w.report.net = w.sim.stats;
    for n in &w.sim.nodes {
        let c = n.dev.counters();
        w.report.gsi_tx += c.gsi_tx;
        w.report.gsi_rx += c.gsi_rx;
        w.report.icrc_errors += c.icrc_errors;
    }
    // Every MAD went through a device onto the link.
    if w.report.gsi_tx != w.report.net.sent {
        let (tx, sent) = (w.report.gsi_tx, w.report.net.sent);
        w.report
            .violations
            .push(format!("{tx} MADs sent from QP 1, {sent} on the link"));
    }
    w.report.end = w.now;
    for (i, n) in w.nodes.iter().enumerate() {
        let Some(cm) = n.ep.device(n.dev).map(|d| &d.cm) else {
            w.report
                .violations
                .push(format!("node {i}: its device is gone"));
            continue;
        };
        let c = cm.counters();
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
        if let Err(e) = cm.check_invariants() {
            w.report.violations.push(format!("node {i}: {e}"));
        }
        w.report.leftover_ids += cm.id_count();
        for id in cm.ids() {
            w.report
                .leftovers
                .push(format!("node {i} {id} {:?}", cm.state(id)));
        }
        // The rdma_cm ids too: every one destroyed.
        w.report.leftover_ids += n.ep.ids().count();
        for num in n.ep.ids() {
            w.report.leftovers.push(format!(
                "node {i} rdma_cm id {num} {:?} held for {:?}",
                n.ep.id(num).map(|e| e.st),
                w.owners.get(&(i, num))
            ));
        }
        let held = n.ep.ports().held();
        if held != 0 {
            w.report
                .violations
                .push(format!("node {i}: {held} ports still held"));
        }
        if !cm.is_quiescent() {
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
