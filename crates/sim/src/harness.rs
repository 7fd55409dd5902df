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
//! Violations are collected in [`Report::violations`] together with the seed.
//! With `HARNESS_DEBUG` set, every post and the byte range of a mismatching
//! receive are printed (`SOFTRDMA_SIM_TRACE` adds every packet).

use crate::net::{LinkConfig, NetStats, Sim};
use softrdma_proto::*;
use softrdma_wire::{Psn, QKey, Qpn, RKey};
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Arc;

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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    FetchAdd,
    CmpSwap,
}

impl Kind {
    fn uses_recv(self) -> bool {
        matches!(self, Kind::Send | Kind::SendImm | Kind::WriteImm)
    }
    fn wr_opcode(self) -> WrOpcode {
        match self {
            Kind::Send => WrOpcode::Send,
            Kind::SendImm => WrOpcode::SendWithImm,
            Kind::Write => WrOpcode::RdmaWrite,
            Kind::WriteImm => WrOpcode::RdmaWriteWithImm,
            Kind::Read => WrOpcode::RdmaRead,
            Kind::FetchAdd => WrOpcode::AtomicFetchAndAdd,
            Kind::CmpSwap => WrOpcode::AtomicCmpAndSwp,
        }
    }
}

#[derive(Clone, Debug)]
struct Op {
    kind: Kind,
    len: usize,
    signaled: bool,
    imm: u32,
    add: u64,
    compare: u64,
    swap: u64,
    fence: bool,
    solicited: bool,
    inline: bool,
    /// Client slot, server target slot (for WRITE/READ).
    slot: usize,
    state: OpState,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpState {
    NotPosted,
    Posted,
    /// Completed with success (or known successful because a later one was).
    Done,
    Failed,
}

struct Pair {
    ty: QpType,
    client: usize,
    server: usize,
    cqpn: Qpn,
    sqpn: Qpn,
    c_send_cq: CqId,
    s_recv_cq: CqId,
    c_mem: Arc<VecMemory>,
    c_key: u32,
    c_va: u64,
    s_mem: Arc<VecMemory>,
    s_key: u32,
    s_va: u64,
    /// Expected contents of the server region; `known[i]` false where the
    /// outcome is legitimately unknown (UC writes, failed RC pairs).
    shadow: Vec<u8>,
    known: Vec<bool>,
    depth: usize,
    slot_len: usize,
    ops: Vec<Op>,
    next_post: usize,
    /// Posted operations awaiting their completion (or implied success).
    pending: VecDeque<usize>,
    /// Operations whose message consumes a receive, in posting order.
    recv_expect: VecDeque<usize>,
    recv_posted: usize,
    recv_done: usize,
    failed: bool,
    ah: Option<AhId>,
    cas_value: u64,
    /// Offset of this pair's compare-swap slot in the server region.
    cas_off: usize,
}

fn pattern(tag: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut x = tag ^ 0x9e37_79b9_7f4a_7c15;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn op_tag(seed: u64, pair: usize, op: usize) -> u64 {
    seed.wrapping_mul(0x1000_0000_01b3) ^ ((pair as u64) << 40) ^ op as u64
}

/// Splits `[va, va+len)` into 1–3 SGEs.
fn split_sges(rng: &mut Rng, va: u64, len: usize, lkey: u32) -> Vec<Sge> {
    if len == 0 {
        return if rng.chance(0.5) {
            Vec::new()
        } else {
            vec![Sge {
                addr: va,
                length: 0,
                lkey,
            }]
        };
    }
    let parts = 1 + rng.below(3) as usize;
    let mut cuts: Vec<usize> = (1..parts)
        .map(|_| rng.below(len as u64 + 1) as usize)
        .collect();
    cuts.sort_unstable();
    let mut out = Vec::new();
    let mut start = 0;
    for c in cuts.into_iter().chain(std::iter::once(len)) {
        out.push(Sge {
            addr: va + start as u64,
            length: (c - start) as u32,
            lkey,
        });
        start = c;
    }
    out
}

const GRH: usize = 40;

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
    // One PD per node; a shared atomic counter region per node.
    let mut pds = Vec::new();
    let mut counters = Vec::new();
    for i in 0..nodes {
        let dev = &mut sim.nodes[i].dev;
        let pd = dev.alloc_pd().expect("pd");
        let mem = Arc::new(VecMemory::new(64));
        let start = rng.next_u64() >> 8;
        mem.fill_from(0, &start.to_ne_bytes());
        let key = dev
            .reg_mr(
                pd,
                0x7000_0000,
                mem.clone(),
                Access::LOCAL_WRITE.with(Access::REMOTE_ATOMIC),
            )
            .expect("counter mr");
        pds.push(pd);
        counters.push((mem, key, start));
    }
    // (pair, op index, returned value) of successful FETCH_ADDs per node.
    let mut fadd_results: Vec<Vec<(u64, u64)>> = vec![Vec::new(); nodes];
    let mut fadd_unknown: Vec<u64> = vec![0; nodes];

    let max_link_mtu = cfg.link.mtu.saturating_sub(48 + 12 + 28 + 4);
    let mut pairs: Vec<Pair> = Vec::new();
    for p in 0..cfg.pairs {
        let client = rng.below(nodes as u64) as usize;
        let server = (client + 1 + rng.below(nodes as u64 - 1) as usize) % nodes;
        let tw = cfg.type_weights;
        let r = rng.below((tw[0] + tw[1] + tw[2]).max(1) as u64) as u32;
        let ty = if r < tw[0] {
            QpType::Rc
        } else if r < tw[0] + tw[1] {
            QpType::Uc
        } else {
            QpType::Ud
        };
        let mtus = [Mtu::M256, Mtu::M512, Mtu::M1024, Mtu::M2048, Mtu::M4096];
        let mut mtu = mtus[rng.below(5) as usize];
        while mtu.bytes() as usize > max_link_mtu && mtu != Mtu::M256 {
            mtu = Mtu::from_ibv(mtu as u32 - 1).expect("smaller mtu");
        }
        let depth = 1 + rng.below(24) as usize;
        let max_len = match ty {
            QpType::Ud => mtu.bytes() as usize,
            _ if p < cfg.big_pairs => cfg.max_msg_big,
            _ => cfg.max_msg,
        };
        let slot_len = max_len.max(8) + GRH;
        let c_len = depth * slot_len;
        // Server: target slots, receive slots, compare-swap slot.
        let s_len = 2 * depth * slot_len + 64;
        let access = Access::LOCAL_WRITE
            .with(Access::REMOTE_WRITE)
            .with(Access::REMOTE_READ)
            .with(Access::REMOTE_ATOMIC);
        let c_mem = Arc::new(VecMemory::new(c_len));
        let s_mem = Arc::new(VecMemory::new(s_len));
        let background = pattern(op_tag(cfg.seed, p, usize::MAX), s_len);
        s_mem.fill_from(0, &background);
        let cas_off = s_len - 64;
        let cas_value = rng.next_u64();
        s_mem.fill_from(cas_off, &cas_value.to_ne_bytes());
        let mut shadow = background;
        shadow[cas_off..cas_off + 8].copy_from_slice(&cas_value.to_ne_bytes());
        let (c_va, s_va) = (
            0x1_0000_0000 + (p as u64) * 0x1000_0000,
            0x8_0000_0000 + (p as u64) * 0x1000_0000,
        );
        let mk = |sim: &mut Sim, node: usize, mem: Arc<VecMemory>, va: u64| {
            let dev = &mut sim.nodes[node].dev;
            let pd = pds[node];
            let key = dev.reg_mr(pd, va, mem, access).expect("mr");
            let scq = dev.create_cq(4 * depth as u32 + 8).expect("cq");
            let rcq = dev.create_cq(4 * depth as u32 + 8).expect("cq");
            let (qpn, _) = dev
                .create_qp(&QpInit {
                    qp_type: ty,
                    pd,
                    send_cq: scq,
                    recv_cq: rcq,
                    srq: None,
                    cap: QpCap {
                        max_send_wr: depth as u32 + 1,
                        max_recv_wr: depth as u32 + 1,
                        max_send_sge: 4,
                        max_recv_sge: 4,
                        max_inline_data: 64,
                    },
                    sq_sig_all: false,
                })
                .expect("qp");
            (key, scq, rcq, qpn)
        };
        let (c_key, c_send_cq, _c_rcq, cqpn) = mk(&mut sim, client, c_mem.clone(), c_va);
        let (s_key, _s_scq, s_recv_cq, sqpn) = mk(&mut sim, server, s_mem.clone(), s_va);
        let o = crate::PairOpts {
            qp_type: ty,
            mtu,
            timeout: 5 + rng.below(6) as u8,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1 + rng.below(8) as u8,
            max_rd_atomic: 1 + rng.below(16) as u8,
            access,
            ..Default::default()
        };
        for (node, qpn) in [(client, cqpn), (server, sqpn)] {
            let a = QpAttr {
                qp_state: QpState::Init,
                qp_access_flags: access.remote(),
                qkey: QKey(0x1111_1111),
                ..Default::default()
            };
            let mask = AttrMask::required(ty, QpState::Reset, QpState::Init)
                .expect("a bring-up transition");
            let now = sim.now;
            sim.nodes[node]
                .dev
                .modify_qp(now, qpn, &a, mask)
                .expect("init");
        }
        let dummy = |node: usize, qpn: Qpn| crate::Endpoint {
            node,
            pd: pds[node],
            send_cq: c_send_cq,
            recv_cq: s_recv_cq,
            qpn,
            mem: c_mem.clone(),
            key: 0,
            va: 0,
            srq: None,
        };
        let (ec, es) = (dummy(client, cqpn), dummy(server, sqpn));
        let pc = Psn::new(rng.next_u32());
        let ps = Psn::new(rng.next_u32());
        crate::to_rts(&mut sim, &ec, &es, &o, ps, pc);
        crate::to_rts(&mut sim, &es, &ec, &o, pc, ps);
        let ah = (ty == QpType::Ud).then(|| {
            let ip = sim.nodes[server].ip;
            sim.nodes[client]
                .dev
                .create_ah(pds[client], AddressVector::to(ip))
                .expect("ah")
        });
        // Operations.
        let mut ops = Vec::with_capacity(cfg.ops_per_pair);
        for i in 0..cfg.ops_per_pair {
            let kind = match ty {
                QpType::Rc => match rng.below(100) {
                    0..=19 => Kind::Send,
                    20..=29 => Kind::SendImm,
                    30..=49 => Kind::Write,
                    50..=59 => Kind::WriteImm,
                    60..=79 => Kind::Read,
                    80..=91 => Kind::FetchAdd,
                    _ => Kind::CmpSwap,
                },
                QpType::Uc => match rng.below(4) {
                    0 => Kind::Send,
                    1 => Kind::SendImm,
                    2 => Kind::Write,
                    _ => Kind::WriteImm,
                },
                QpType::Ud => {
                    if rng.chance(0.5) {
                        Kind::Send
                    } else {
                        Kind::SendImm
                    }
                }
            };
            let len = if matches!(kind, Kind::FetchAdd | Kind::CmpSwap) {
                8
            } else {
                let r = rng.below(100);
                let cap = max_len as u64;
                (match r {
                    0..=4 => 0,
                    5..=59 => rng.below(257.min(cap + 1)),
                    60..=84 => rng.below(8193.min(cap + 1)),
                    85..=96 => rng.below(65537.min(cap + 1)),
                    _ => rng.below(cap + 1),
                }) as usize
            };
            let inline = len <= 64
                && matches!(
                    kind,
                    Kind::Send | Kind::SendImm | Kind::Write | Kind::WriteImm
                )
                && rng.chance(0.3);
            ops.push(Op {
                kind,
                len,
                // At least one signaled request per `depth`, as a real
                // application needs to reclaim its send queue.
                signaled: i + 1 == cfg.ops_per_pair || i % depth == depth - 1 || rng.chance(0.7),
                imm: rng.next_u32(),
                add: 1 + rng.below(1000),
                compare: 0,
                swap: rng.next_u64(),
                fence: ty == QpType::Rc && rng.chance(0.05),
                solicited: rng.chance(0.2),
                inline,
                slot: i % depth,
                state: OpState::NotPosted,
            });
        }
        pairs.push(Pair {
            ty,
            client,
            server,
            cqpn,
            sqpn,
            c_send_cq,
            s_recv_cq,
            c_mem,
            c_key,
            c_va,
            s_mem,
            s_key,
            s_va,
            known: vec![true; shadow.len()],
            shadow,

            depth,
            slot_len,
            ops,
            next_post: 0,
            pending: VecDeque::new(),
            recv_expect: VecDeque::new(),
            recv_posted: 0,
            recv_done: 0,
            failed: false,
            ah,
            cas_value,
            cas_off,
        });
    }

    let limit = softrdma_proto::Instant(cfg.time_limit_ns);
    let mut wcbuf = vec![empty_wc(); 256];
    loop {
        // Post receives and operations.
        for (pi, p) in pairs.iter_mut().enumerate() {
            post_receives(&mut sim, p, &mut rng, cfg.recv_lag);
            post_ops(&mut sim, p, pi, cfg, &mut rng, &counters, &mut rep);
        }
        let progressed = sim.step(limit);
        // Completions.
        for (pi, p) in pairs.iter_mut().enumerate() {
            check_send_completions(
                &mut sim,
                p,
                pi,
                cfg,
                &mut wcbuf,
                &mut fadd_results,
                &mut fadd_unknown,
                &mut rep,
            );
            check_recv_completions(&mut sim, p, pi, cfg, &mut wcbuf, &mut rep);
        }
        let all_done = pairs
            .iter()
            .all(|p| p.next_post == p.ops.len() && p.pending.is_empty());
        if all_done {
            break;
        }
        if !progressed {
            let mut s = format!("seed {}: hang at {} ns:", cfg.seed, sim.now.0);
            for (i, p) in pairs.iter().enumerate() {
                if !(p.next_post == p.ops.len() && p.pending.is_empty()) {
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
            }
            rep.violations.push(s);
            break;
        }
    }
    // Let trailing ACKs and duplicates settle, then check the end state.
    let settle = sim.now.add_ns(1_000_000_000).min(limit);
    while sim.step(settle) {}
    for (pi, p) in pairs.iter_mut().enumerate() {
        check_recv_completions(&mut sim, p, pi, cfg, &mut wcbuf, &mut rep);
        if p.ty != QpType::Rc || p.failed {
            // Unreliable or failed: writes may have partly happened.
            for (i, op) in p.ops.iter().enumerate() {
                let unknown_write = matches!(op.kind, Kind::Write | Kind::WriteImm)
                    && (p.ty == QpType::Uc || op.state != OpState::Done);
                let unknown_cas = op.kind == Kind::CmpSwap && op.state != OpState::Done;
                if unknown_write {
                    let off = target_off(p, i);
                    p.known[off..off + op.len]
                        .iter_mut()
                        .for_each(|k| *k = false);
                }
                if unknown_cas {
                    let o = p.cas_off;
                    p.known[o..o + 8].iter_mut().for_each(|k| *k = false);
                }
            }
        }
        // Receive slots are checked per completion; exclude them here.
        let r0 = p.depth * p.slot_len;
        p.known[r0..2 * p.depth * p.slot_len]
            .iter_mut()
            .for_each(|k| *k = false);
        let actual = p.s_mem.snapshot();
        if let Some(i) = (0..actual.len()).find(|&i| p.known[i] && actual[i] != p.shadow[i]) {
            rep.violations.push(format!(
                "seed {}: pair {pi} ({:?}) server byte {i} is {:#04x}, expected {:#04x} (memory outside successful writes changed)",
                cfg.seed, p.ty, actual[i], p.shadow[i]
            ));
        }
    }
    // Atomics: one chain per counter, and the final value.
    for (node, (mem, _, start)) in counters.iter().enumerate() {
        let mut res = fadd_results[node].clone();
        res.sort_unstable();
        let mut v = *start;
        for (orig, add) in &res {
            if *orig != v && fadd_unknown[node] == 0 {
                rep.violations.push(format!(
                    "seed {}: node {node} FETCH_ADD chain broken: got {orig}, expected {v}",
                    cfg.seed
                ));
                break;
            }
            v = orig.wrapping_add(*add);
        }
        let fin = u64::from_ne_bytes(mem.snapshot()[..8].try_into().expect("8 bytes"));
        let sum: u64 = res.iter().map(|r| r.1).sum();
        let lo = start.wrapping_add(sum);
        if fin.wrapping_sub(lo) > fadd_unknown[node] {
            rep.violations.push(format!(
                "seed {}: node {node} counter is {fin}, expected {lo} (+ up to {} from failed QPs)",
                cfg.seed, fadd_unknown[node]
            ));
        }
    }
    rep.failed_pairs = pairs.iter().filter(|p| p.failed).count();
    rep.net = sim.stats;
    for n in &sim.nodes {
        rep.counters += &n.dev.counters();
    }
    rep.virtual_ns = sim.now.0;
    rep
}

fn empty_wc() -> Wc {
    Wc {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        byte_len: 0,
        imm_or_inv: 0,
        qp_num: Qpn::new(0),
        src_qp: Qpn::new(0),
        wc_flags: WcFlags::default(),
        pkey_index: 0,
        solicited: false,
    }
}

/// `len` bytes of a region at `off`.
fn bytes(mem: &VecMemory, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    mem.read(off, &mut v);
    v
}

fn target_off(p: &Pair, op: usize) -> usize {
    p.ops[op].slot * p.slot_len
}

fn recv_off(p: &Pair, n: usize) -> usize {
    (p.depth + n % p.depth) * p.slot_len
}

fn post_receives(sim: &mut Sim, p: &mut Pair, rng: &mut Rng, lag: f64) {
    if p.ty != QpType::Rc && p.recv_posted == 0 {
        // Unreliable receivers must be ready before anything is sent.
    } else if rng.chance(lag) {
        return;
    }
    let now = sim.now;
    while p.recv_posted < p.recv_done + p.depth {
        let off = recv_off(p, p.recv_posted);
        let len = p.slot_len;
        let sges = split_sges(rng, p.s_va + off as u64, len, p.s_key);
        let wr = RecvWr {
            wr_id: p.recv_posted as u64,
            sg_list: sges,
        };
        if sim.nodes[p.server].dev.post_recv(now, p.sqpn, wr).is_err() {
            break;
        }
        p.recv_posted += 1;
    }
}

fn post_ops(
    sim: &mut Sim,
    p: &mut Pair,
    pi: usize,
    cfg: &Config,
    rng: &mut Rng,
    counters: &[(Arc<VecMemory>, u32, u64)],
    rep: &mut Report,
) {
    let now = sim.now;
    while p.next_post < p.ops.len() && p.pending.len() < p.depth && !p.failed {
        let i = p.next_post;
        let tag = op_tag(cfg.seed, pi, i);
        if std::env::var_os("HARNESS_DEBUG").is_some() {
            let o = &p.ops[i];
            eprintln!(
                "{} post pair {pi} op {i} {:?} len {} slot {} signaled {} pending {:?}",
                sim.now.0, o.kind, o.len, o.slot, o.signaled, p.pending
            );
        }
        let op = p.ops[i].clone();
        let coff = op.slot * p.slot_len;
        let data = pattern(tag, op.len);
        let mut wr = SendWr::new(i as u64, op.kind.wr_opcode());
        wr.flags = SendFlags(0);
        if op.signaled {
            wr.flags = wr.flags.with(SendFlags::SIGNALED);
        }
        if op.fence {
            wr.flags = wr.flags.with(SendFlags::FENCE);
        }
        if op.solicited {
            wr.flags = wr.flags.with(SendFlags::SOLICITED);
        }
        wr.imm_data = op.imm;
        match op.kind {
            Kind::Send | Kind::SendImm | Kind::Write | Kind::WriteImm => {
                if op.inline {
                    wr.flags = wr.flags.with(SendFlags::INLINE);
                    wr.inline_data = data.clone();
                } else {
                    p.c_mem.fill_from(coff, &data);
                    wr.sg_list = split_sges(rng, p.c_va + coff as u64, op.len, p.c_key);
                }
            }
            Kind::Read => {
                // Destination starts as garbage; the server slot holds the data.
                p.c_mem.fill_from(coff, &pattern(!tag, op.len));
                let toff = target_off(p, i);
                p.s_mem.fill_from(toff, &data);
                p.shadow[toff..toff + op.len].copy_from_slice(&data);
                wr.sg_list = split_sges(rng, p.c_va + coff as u64, op.len, p.c_key);
            }
            Kind::FetchAdd | Kind::CmpSwap => {
                p.c_mem.fill_from(coff, &[0xee; 8]);
                wr.sg_list = vec![Sge {
                    addr: p.c_va + coff as u64,
                    length: 8,
                    lkey: p.c_key,
                }];
            }
        }
        match op.kind {
            Kind::Write | Kind::WriteImm | Kind::Read => {
                wr.remote_addr = p.s_va + target_off(p, i) as u64;
                wr.rkey = RKey(p.s_key);
            }
            Kind::FetchAdd => {
                wr.remote_addr = 0x7000_0000;
                wr.rkey = RKey(counters[p.server].1);
                wr.compare_add = op.add;
            }
            Kind::CmpSwap => {
                wr.remote_addr = p.s_va + p.cas_off as u64;
                wr.rkey = RKey(p.s_key);
                wr.compare_add = p.cas_value;
                wr.swap = op.swap;
                p.ops[i].compare = p.cas_value;
                p.cas_value = op.swap;
                let o = p.cas_off;
                p.shadow[o..o + 8].copy_from_slice(&op.swap.to_ne_bytes());
            }
            _ => {}
        }
        if matches!(op.kind, Kind::Write | Kind::WriteImm) {
            let toff = target_off(p, i);
            p.shadow[toff..toff + op.len].copy_from_slice(&data);
        }
        if let Some(ah) = p.ah {
            wr.ud = Some(UdDest {
                ah,
                remote_qpn: p.sqpn,
                remote_qkey: QKey(0x1111_1111),
            });
        }
        if let Err(e) = sim.nodes[p.client].dev.post_send(now, p.cqpn, wr) {
            rep.violations.push(format!(
                "seed {}: pair {pi} op {i}: post_send failed: {e}",
                cfg.seed
            ));
            p.failed = true;
            return;
        }
        rep.ops += 1;
        rep.bytes += op.len as u64;
        p.ops[i].state = OpState::Posted;
        p.pending.push_back(i);
        if op.kind.uses_recv() {
            p.recv_expect.push_back(i);
        }
        p.next_post += 1;
    }
}

#[allow(clippy::too_many_arguments)]
fn check_send_completions(
    sim: &mut Sim,
    p: &mut Pair,
    pi: usize,
    cfg: &Config,
    wcbuf: &mut [Wc],
    fadd: &mut [Vec<(u64, u64)>],
    fadd_unknown: &mut [u64],
    rep: &mut Report,
) {
    loop {
        let n = sim.nodes[p.client]
            .dev
            .poll_cq(p.c_send_cq, wcbuf)
            .expect("cq");
        for wc in &wcbuf[..n] {
            rep.completions += 1;
            let id = wc.wr_id as usize;
            let ty = p.ty;
            let fail = |rep: &mut Report, what: String| {
                rep.violations.push(format!(
                    "seed {}: pair {pi} ({ty:?}) op {id}: {what}",
                    cfg.seed
                ));
            };
            // Unsignaled operations before this one succeeded silently.
            loop {
                let Some(&front) = p.pending.front() else {
                    fail(rep, format!("completion for nothing outstanding: {wc:?}"));
                    break;
                };
                if front == id {
                    p.pending.pop_front();
                    break;
                }
                if p.ops[front].signaled && !p.failed {
                    fail(
                        rep,
                        format!("completion out of order (op {front} is due first)"),
                    );
                }
                if wc.status == WcStatus::Success || !p.failed {
                    p.ops[front].state = OpState::Done;
                    verify_op(p, front, pi, cfg, rep, fadd);
                } else {
                    p.ops[front].state = OpState::Failed;
                }
                p.pending.pop_front();
            }
            let op = p.ops[id].clone();
            if wc.status == WcStatus::Success {
                if p.failed {
                    fail(rep, "success after the QP failed".into());
                }
                if wc.opcode != op.kind.wr_opcode().wc_opcode() {
                    fail(rep, format!("completion opcode {:?}", wc.opcode));
                }
                p.ops[id].state = OpState::Done;
                verify_op(p, id, pi, cfg, rep, fadd);
            } else {
                p.ops[id].state = OpState::Failed;
                let first_error = !p.failed;
                let allowed = if first_error {
                    p.ty == QpType::Rc && wc.status == WcStatus::RetryExcErr
                } else {
                    wc.status == WcStatus::WrFlushErr
                };
                if !allowed {
                    fail(rep, format!("unexpected status {:?}", wc.status));
                }
                if first_error {
                    p.failed = true;
                }
            }
        }
        if n < wcbuf.len() {
            break;
        }
    }
    if p.failed {
        // Everything not known to be done is unknown now.
        for op in &p.ops {
            if op.kind == Kind::FetchAdd && op.state == OpState::Failed {
                fadd_unknown[p.server] += op.add;
            }
        }
        for op in p.ops.iter_mut() {
            if op.state == OpState::Failed {
                op.state = OpState::NotPosted; // counted once
            }
        }
        if p.pending.is_empty() {
            p.next_post = p.ops.len();
        }
    }
}

fn verify_op(
    p: &mut Pair,
    i: usize,
    pi: usize,
    cfg: &Config,
    rep: &mut Report,
    fadd: &mut [Vec<(u64, u64)>],
) {
    let op = &p.ops[i];
    let tag = op_tag(cfg.seed, pi, i);
    let coff = op.slot * p.slot_len;
    let mut bad = None;
    match op.kind {
        Kind::Write | Kind::WriteImm
            if p.ty == QpType::Rc
                && bytes(&p.s_mem, target_off(p, i), op.len) != pattern(tag, op.len) =>
        {
            bad = Some("WRITE target differs from the source".to_string());
        }
        Kind::Read if bytes(&p.c_mem, coff, op.len) != pattern(tag, op.len) => {
            bad = Some("READ result differs from the remote data".to_string());
        }
        Kind::FetchAdd => {
            let orig = u64::from_ne_bytes(bytes(&p.c_mem, coff, 8).try_into().expect("8"));
            fadd[p.server].push((orig, op.add));
        }
        Kind::CmpSwap => {
            let orig = u64::from_ne_bytes(bytes(&p.c_mem, coff, 8).try_into().expect("8"));
            if orig != op.compare {
                bad = Some(format!(
                    "COMPARE_SWAP returned {orig:#x}, expected {:#x}",
                    op.compare
                ));
            }
        }
        _ => {}
    }
    if let Some(b) = bad {
        rep.violations.push(format!(
            "seed {}: pair {pi} ({:?}) op {i}: {b}",
            cfg.seed, p.ty
        ));
    }
}

fn check_recv_completions(
    sim: &mut Sim,
    p: &mut Pair,
    pi: usize,
    cfg: &Config,
    wcbuf: &mut [Wc],
    rep: &mut Report,
) {
    loop {
        let n = sim.nodes[p.server]
            .dev
            .poll_cq(p.s_recv_cq, wcbuf)
            .expect("cq");
        for wc in &wcbuf[..n] {
            rep.completions += 1;
            let slot = wc.wr_id as usize;
            if slot != p.recv_done {
                rep.violations.push(format!(
                    "seed {}: pair {pi}: receive {slot} completed, expected {}",
                    cfg.seed, p.recv_done
                ));
            }
            p.recv_done += 1;
            if wc.status != WcStatus::Success {
                if !(p.failed && wc.status == WcStatus::WrFlushErr) {
                    rep.violations.push(format!(
                        "seed {}: pair {pi}: receive failed with {:?}",
                        cfg.seed, wc.status
                    ));
                }
                continue;
            }
            let off = recv_off(p, slot);
            let got = bytes(&p.s_mem, off, p.slot_len);
            let hdr = if p.ty == QpType::Ud { GRH } else { 0 };
            // Find the message this is: RC exactly the next one; UC/UD the
            // next one (or a later one after losses) that matches.
            let mut matched = None;
            let candidates = if p.ty == QpType::Rc {
                1
            } else {
                p.recv_expect.len()
            };
            for (k, &i) in p.recv_expect.iter().enumerate().take(candidates) {
                let op = &p.ops[i];
                let len_ok = wc.byte_len as usize == op.len + hdr;
                let imm_ok = match op.kind {
                    Kind::SendImm | Kind::WriteImm => {
                        wc.wc_flags.contains(WcFlags::WITH_IMM) && wc.imm_or_inv == op.imm
                    }
                    _ => !wc.wc_flags.contains(WcFlags::WITH_IMM),
                };
                let opcode_ok = match op.kind {
                    Kind::WriteImm => wc.opcode == WcOpcode::RecvRdmaWithImm,
                    _ => wc.opcode == WcOpcode::Recv,
                };
                let data_ok = match op.kind {
                    Kind::WriteImm => {
                        let t = target_off(p, i);
                        bytes(&p.s_mem, t, op.len) == pattern(op_tag(cfg.seed, pi, i), op.len)
                    }
                    _ => {
                        len_ok
                            && got[hdr..hdr + op.len]
                                == pattern(op_tag(cfg.seed, pi, i), op.len)[..]
                    }
                };
                let solicited_ok = !op.solicited || wc.solicited;
                if len_ok && imm_ok && opcode_ok && data_ok && solicited_ok {
                    matched = Some(k);
                    break;
                }
                if p.ty == QpType::Rc {
                    if std::env::var_os("HARNESS_DEBUG").is_some() {
                        let want = pattern(op_tag(cfg.seed, pi, i), op.len);
                        let diffs: Vec<usize> = (0..op.len.min(got.len() - hdr))
                            .filter(|&k| got[hdr + k] != want[k])
                            .collect();
                        eprintln!(
                            "diff at {:?}..{:?} ({} bytes)",
                            diffs.first(),
                            diffs.last(),
                            diffs.len()
                        );
                    }
                    rep.violations.push(format!(
                        "seed {}: pair {pi} (RC) receive {slot} does not match op {i} \
                         (len {len_ok} imm {imm_ok} opcode {opcode_ok} data {data_ok} se {solicited_ok}): {wc:?}",
                        cfg.seed
                    ));
                    matched = Some(k);
                    break;
                }
            }
            match matched {
                Some(k) => {
                    if p.ty == QpType::Uc {
                        rep.unreliable_lost += k as u64;
                        p.recv_expect.drain(..=k);
                    } else if p.ty == QpType::Ud {
                        // UD may duplicate or reorder: only drop what came before.
                        rep.unreliable_lost += k as u64;
                        p.recv_expect.drain(..=k);
                    } else {
                        p.recv_expect.pop_front();
                    }
                }
                None => {
                    if p.ty == QpType::Ud {
                        // A duplicate or late datagram is legal UD behaviour,
                        // but it must still be one that was sent, whole.
                        let whole = p.ops.iter().enumerate().any(|(i, op)| {
                            op.kind.uses_recv()
                                && wc.byte_len as usize == op.len + GRH
                                && got[GRH..GRH + op.len]
                                    == pattern(op_tag(cfg.seed, pi, i), op.len)[..]
                        });
                        if whole {
                            continue;
                        }
                    }
                    rep.violations.push(format!(
                        "seed {}: pair {pi} ({:?}) receive {slot} matches no sent message \
                         (partial or corrupt delivery): {wc:?}",
                        cfg.seed, p.ty
                    ));
                }
            }
            if p.ty == QpType::Ud {
                let src =
                    softrdma_wire::grh::ud_grh_source(got[..GRH].try_into().expect("40 bytes"));
                if src != sim.nodes[p.client].ip || wc.src_qp != p.cqpn {
                    rep.violations.push(format!(
                        "seed {}: pair {pi} UD source {src} qp {:?} wrong",
                        cfg.seed, wc.src_qp
                    ));
                }
            }
        }
        if n < wcbuf.len() {
            break;
        }
    }
}
