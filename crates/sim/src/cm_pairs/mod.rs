//! Connection management in the simulator: several devices' part of the
//! rdma_cm layer ([`softrdma_cm::rdma::DeviceCm`]: the real CM, the shared
//! CM listeners, requests held for a listener; [`softrdma_cm::rdma::Listener`]:
//! which rdma_cm listener takes a request, its backlog) on a virtual
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
//!   [`softrdma_cm::Event::Established`]), none on any other;
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
//!
//! Where things live: `scenario.rs` draws the plans (what each client,
//! server and SIDR pair does, which node never answers or dies);
//! `report.rs` is what a run saw and [`Report::check`]; `world.rs` is the
//! simulation state, the link that carries MADs and the event loop's step;
//! `driver.rs` is the driver model (how each node answers its CM's events
//! and carries out the plans' actions); this file is [`run`] and
//! [`lossy_link`].

mod driver;
mod report;
mod scenario;
mod world;

use crate::net::{LinkConfig, NetStats};
pub use report::{ConnLog, Report, SidrLog};
pub use scenario::*;
use softrdma_cm::rdma::{DeviceCm, Listener, Transport};
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
            dev: DeviceCm::new(cfg, ip),
            ip,
            up: sc.dead_node != Some(i),
            listeners: BTreeMap::new(),
        };
        // Two wildcard rdma_cm listeners (`rdma_listen` on 0.0.0.0, the
        // default backlog): RC on RC_SERVICE's port, UD on UD_SERVICE's.
        let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        for (num, ps, port, transport) in [
            (1, PortSpace::Tcp, RC_PORT, Transport::Rc),
            (2, PortSpace::Udp, UD_PORT, Transport::Ud),
        ] {
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
    w.report.net = w.net;
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
