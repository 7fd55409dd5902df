//! Random workloads over many queue pairs, checked against the promises the
//! transport makes.
//!
//! [`run`] builds `pairs` connections between random nodes (RC, UC and UD),
//! generates a random sequence of operations for each (SEND, SEND with
//! immediate, RDMA WRITE, WRITE with immediate, RDMA READ, FETCH_ADD,
//! COMPARE_SWAP; UD sends), posts them with bounded outstanding work, runs the
//! network and checks, as completions arrive and at the end:
//!
//! - every signaled work request completes exactly once, in posting order
//!   per QP, with the status the transport allows (success; on RC a retry
//!   exhaustion followed by flushes);
//! - data is byte-exact: WRITE targets, READ results, received messages;
//! - atomics run exactly once: the values FETCH_ADD returns form one chain
//!   and the counter ends at its start plus the sum of the adds;
//! - nothing outside the targets of successful WRITEs changed in any region
//!   (a shadow copy of every server region is compared at the end);
//! - UC never reports a partial message; UD messages are whole;
//! - everything finishes within the virtual time limit (no hang).
//!
//! - the link injected the faults it was configured with (loss,
//!   duplication, reordering, corruption), about as often as asked, and no
//!   other: a run with no fault would test no recovery.
//!
//! Violations are collected in [`Report::violations`] together with the seed.
//! With `HARNESS_DEBUG` set, every post and the byte range of a mismatching
//! receive are printed (`SOFTRDMA_SIM_TRACE` adds every packet).

//!
//! The pieces: [`workload`] draws the nodes, pairs and operations, `post`
//! posts them, [`check`] checks completions, the end state and the link.

mod check;
mod post;
mod workload;

use crate::net::{LinkConfig, NetStats, Sim};
use softrdma_proto::*;
use std::fmt::Write as _;
use workload::{Counter, Pair};

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Seed of everything random in the run.
    pub seed: u64,
    /// Nodes (≥ 2).
    pub nodes: usize,
    /// QP pairs.
    pub pairs: usize,
    /// Operations per pair.
    pub ops_per_pair: usize,
    /// Link impairments.
    pub link: LinkConfig,
    /// Largest message of the "big" pairs (the first `big_pairs`).
    pub max_msg_big: usize,
    /// Pairs allowed messages up to `max_msg_big`.
    pub big_pairs: usize,
    /// Largest message of the other pairs.
    pub max_msg: usize,
    /// Weights of RC, UC, UD pairs.
    pub type_weights: [u32; 3],
    /// Probability, per step, that a server holds back its receives (RNR).
    pub recv_lag: f64,
    /// Virtual time limit.
    pub time_limit_ns: u64,
}

impl Config {
    /// A moderate default workload for `seed`.
    pub fn new(seed: u64) -> Self {
        Config {
            seed,
            nodes: 3,
            pairs: 8,
            ops_per_pair: 100,
            link: LinkConfig::default(),
            max_msg_big: 256 * 1024,
            big_pairs: 1,
            max_msg: 16 * 1024,
            type_weights: [6, 2, 2],
            recv_lag: 0.05,
            time_limit_ns: 600_000_000_000,
        }
    }
}

/// What happened.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Operations posted.
    pub ops: u64,
    /// Payload bytes of posted operations.
    pub bytes: u64,
    /// Completions checked.
    pub completions: u64,
    /// RC pairs that ended in retry exhaustion (allowed under heavy loss).
    pub failed_pairs: usize,
    /// UC/UD messages lost (allowed).
    pub unreliable_lost: u64,
    /// Everything that broke a promise.
    pub violations: Vec<String>,
    /// Network statistics.
    pub net: NetStats,
    /// Device counters summed over the nodes.
    pub counters: Counters,
    /// Virtual time at the end, ns.
    pub virtual_ns: u64,
}

impl Report {
    /// True when no promise was broken.
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Runs one workload and checks it.
pub fn run(cfg: &Config) -> Report {
    let mut rng = Rng::new(cfg.seed);
    let mut sim = Sim::new(cfg.seed, cfg.link);
    let mut rep = Report {
        seed: cfg.seed,
        ..Default::default()
    };
    let nodes = cfg.nodes.max(2);
    for i in 0..nodes {
        sim.add_node(cfg.seed.wrapping_add(i as u64 * 7919), None);
    }
    let (pds, mut counters) = workload::nodes(&mut sim, &mut rng, nodes);
    let mut pairs: Vec<Pair> = (0..cfg.pairs)
        .map(|p| workload::pair(&mut sim, &mut rng, cfg, p, &pds))
        .collect();
    let limit = softrdma_proto::Instant(cfg.time_limit_ns);
    drive(
        &mut sim,
        &mut rng,
        &mut pairs,
        &mut counters,
        cfg,
        limit,
        &mut rep,
    );
    // Let trailing ACKs and duplicates settle, then check the end state.
    let settle = sim.now.add_ns(1_000_000_000).min(limit);
    while sim.step(settle) {}
    for (pi, p) in pairs.iter_mut().enumerate() {
        check::recv_completions(&mut sim, p, pi, cfg, &mut rep);
        check::region(p, pi, cfg, &mut rep);
    }
    check::atomics(&counters, cfg, &mut rep);
    check::faults(cfg, &sim.stats, &mut rep);
    rep.failed_pairs = pairs.iter().filter(|p| p.failed).count();
    rep.net = sim.stats;
    for n in &sim.nodes {
        rep.counters += &n.dev.counters();
    }
    rep.virtual_ns = sim.now.0;
    rep
}

/// Posts, runs the network and checks completions until every operation
/// has completed, or nothing moves any more (a hang, reported).
fn drive(
    sim: &mut Sim,
    rng: &mut Rng,
    pairs: &mut [Pair],
    counters: &mut [Counter],
    cfg: &Config,
    limit: softrdma_proto::Instant,
    rep: &mut Report,
) {
    let finished = |p: &Pair| p.next_post == p.ops.len() && p.pending.is_empty();
    loop {
        for (pi, p) in pairs.iter_mut().enumerate() {
            post::post_receives(sim, p, rng, cfg.recv_lag);
            post::post_ops(sim, p, pi, cfg, rng, counters, rep);
        }
        let progressed = sim.step(limit);
        for (pi, p) in pairs.iter_mut().enumerate() {
            check::send_completions(sim, p, pi, cfg, counters, rep);
            check::recv_completions(sim, p, pi, cfg, rep);
        }
        if pairs.iter().all(finished) {
            return;
        }
        if !progressed {
            let mut s = format!("seed {}: hang at {} ns:", cfg.seed, sim.now.0);
            for (i, p) in pairs.iter().enumerate().filter(|(_, p)| !finished(p)) {
                let st = sim.nodes[p.client].dev.qp_state(p.cqpn);
                let _ = write!(
                    s,
                    " pair {i} {:?} posted {}/{} pending {} state {:?};",
                    p.ty,
                    p.next_post,
                    p.ops.len(),
                    p.pending.len(),
                    st
                );
            }
            rep.violations.push(s);
            return;
        }
    }
}
