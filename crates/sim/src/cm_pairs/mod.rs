//! Connection management in the simulator: several devices' part of the
//! rdma_cm layer ([`softrdma_cm::rdma::DeviceCm`]: the real CM, the shared
//! CM listeners, requests held for a listener; [`softrdma_cm::rdma::Listener`]:
//! which rdma_cm listener takes a request, its backlog) on a virtual
//! clock, their MADs carried between the nodes' QP 1 as RoCE packets by
//! the simulator's network ([`crate::Sim`], the link of the transport
//! runs: seeded loss, duplication, reordering, corruption — a corrupted
//! packet fails the receiving device's ICRC check — and delay), and a
//! driver model per node that connects, accepts,
//! rejects, answers late, disconnects, destroys and sometimes dies.
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
//!   driver holds;
//! - when the run drains, every CM of a live node is quiescent: every id
//!   ended and was destroyed, no timer, timewait record or queued MAD is
//!   left, and no port is held in its [`softrdma_cm::rdma::Ports`] (the
//!   listeners bind theirs, connecting and SIDR ids an ephemeral one,
//!   which the server sees in the REQ's cma header);
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
//! `driver.rs` is the driver model (how each node answers its CM's events
//! and carries out the plans' actions); this file is [`run`] and
//! [`lossy_link`].

mod driver;
mod report;
mod scenario;
mod world;

use crate::net::{LinkConfig, Sim};
pub use report::{ConnLog, Report, SidrLog};
pub use scenario::*;
use softrdma_cm::rdma::{DeviceCm, Listener, Ports, Transport};
use softrdma_cm::{CmConfig, Instant};
use softrdma_link::Rng;
use softrdma_wire::cm::PortSpace;
use std::collections::{BTreeMap, BinaryHeap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
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
        let mut node = Node {
            dev: DeviceCm::new(cfg, ip),
            ip,
            up: sc.dead_node != Some(i),
            listeners: BTreeMap::new(),
            ports: Ports::default(),
            ports_held: 0,
            next_num: 1,
            port_rng: Rng::new(key_rng.next_u64()),
        };
        // Two wildcard rdma_cm listeners (`rdma_bind_addr` on 0.0.0.0,
        // `rdma_listen` with the default backlog): RC on RC_SERVICE's
        // port, UD on UD_SERVICE's.
        let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        for (ps, port, transport) in [
            (PortSpace::Tcp, RC_PORT, Transport::Rc),
            (PortSpace::Udp, UD_PORT, Transport::Ud),
        ] {
            let num = match node.bind(ps, any, port) {
                Ok((num, _)) => num,
                Err(e) => {
                    w.report
                        .violations
                        .push(format!("node {i}: bind {port}: {e}"));
                    continue;
                }
            };
            let l = Listener::new(ps, SocketAddr::new(any, port), true, None, transport, 0);
            if node.dev.listen(Instant(0), l.service_id()).is_ok() {
                node.listeners.insert(num, l);
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
        let c = n.dev.cm.counters();
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
        if let Err(e) = n.dev.cm.check_invariants() {
            w.report.violations.push(format!("node {i}: {e}"));
        }
        w.report.leftover_ids += n.dev.cm.id_count();
        for id in n.dev.cm.ids() {
            w.report.leftovers.push(format!(
                "node {i} {id} {:?} held for {:?}",
                n.dev.cm.state(id),
                w.owners.get(&(i, id))
            ));
        }
        if n.ports_held != 0 {
            w.report
                .violations
                .push(format!("node {i}: {} ports still held", n.ports_held));
        }
        if !n.dev.cm.is_quiescent() {
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
