//! The workload: nodes with their atomic counters, pairs of QPs between
//! them with their regions and a random sequence of operations each, and
//! the data every operation carries.

use super::Config;
use crate::net::Sim;
use softrdma_proto::*;
use softrdma_wire::{Psn, QKey, Qpn};
use std::collections::VecDeque;
use std::sync::Arc;

/// The operations a workload mixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    FetchAdd,
    CmpSwap,
    /// ATOMIC WRITE of 8 bytes into a target slot (IBA A19).
    AtomicWrite,
    /// FLUSH (global visibility) of a target slot's range.
    Flush,
}

impl Kind {
    pub(super) fn uses_recv(self) -> bool {
        matches!(self, Kind::Send | Kind::SendImm | Kind::WriteImm)
    }
    pub(super) fn wr_opcode(self) -> WrOpcode {
        match self {
            Kind::Send => WrOpcode::Send,
            Kind::SendImm => WrOpcode::SendWithImm,
            Kind::Write => WrOpcode::RdmaWrite,
            Kind::WriteImm => WrOpcode::RdmaWriteWithImm,
            Kind::Read => WrOpcode::RdmaRead,
            Kind::FetchAdd => WrOpcode::AtomicFetchAndAdd,
            Kind::CmpSwap => WrOpcode::AtomicCmpAndSwp,
            Kind::AtomicWrite => WrOpcode::AtomicWrite,
            Kind::Flush => WrOpcode::Flush,
        }
    }
}

/// One operation of a pair's workload.
#[derive(Clone, Debug)]
pub(super) struct Op {
    pub(super) kind: Kind,
    pub(super) len: usize,
    pub(super) signaled: bool,
    pub(super) imm: u32,
    pub(super) add: u64,
    pub(super) compare: u64,
    pub(super) swap: u64,
    pub(super) fence: bool,
    pub(super) solicited: bool,
    pub(super) inline: bool,
    /// Client slot, server target slot (for WRITE/READ).
    pub(super) slot: usize,
    pub(super) state: OpState,
}

/// Where an operation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OpState {
    NotPosted,
    Posted,
    /// Completed with success (or known successful because a later one was).
    Done,
    Failed,
}

/// A connection between two nodes, its regions and its workload.
pub(super) struct Pair {
    pub(super) ty: QpType,
    pub(super) client: usize,
    pub(super) server: usize,
    pub(super) cqpn: Qpn,
    pub(super) sqpn: Qpn,
    pub(super) c_send_cq: CqId,
    pub(super) s_recv_cq: CqId,
    pub(super) c_mem: Arc<VecMemory>,
    pub(super) c_key: u32,
    pub(super) c_va: u64,
    pub(super) s_mem: Arc<VecMemory>,
    pub(super) s_key: u32,
    pub(super) s_va: u64,
    /// Expected contents of the server region; `known[i]` false where the
    /// outcome is legitimately unknown (UC writes, failed RC pairs).
    pub(super) shadow: Vec<u8>,
    pub(super) known: Vec<bool>,
    pub(super) depth: usize,
    pub(super) slot_len: usize,
    pub(super) ops: Vec<Op>,
    pub(super) next_post: usize,
    /// Posted operations awaiting their completion (or implied success).
    pub(super) pending: VecDeque<usize>,
    /// Operations whose message consumes a receive, in posting order.
    pub(super) recv_expect: VecDeque<usize>,
    pub(super) recv_posted: usize,
    pub(super) recv_done: usize,
    pub(super) failed: bool,
    pub(super) ah: Option<AhId>,
    pub(super) cas_value: u64,
    /// Offset of this pair's compare-swap slot in the server region.
    pub(super) cas_off: usize,
}

/// The bytes of operation `tag`: a xorshift stream, different per tag.
pub(super) fn pattern(tag: u64, len: usize) -> Vec<u8> {
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

/// The tag of operation `op` of pair `pair`.
pub(super) fn op_tag(seed: u64, pair: usize, op: usize) -> u64 {
    seed.wrapping_mul(0x1000_0000_01b3) ^ ((pair as u64) << 40) ^ op as u64
}

/// Splits `[va, va+len)` into 1–3 SGEs.
pub(super) fn split_sges(rng: &mut Rng, va: u64, len: usize, lkey: u32) -> Vec<Sge> {
    if len == 0 {
        return if rng.chance(0.5) {
            Vec::new()
        } else {
            vec![Sge::new(va, 0, lkey)]
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
        out.push(Sge::new(va + start as u64, (c - start) as u32, lkey));
        start = c;
    }
    out
}

/// The GRH area in front of a UD message.
pub(super) const GRH: usize = 40;

/// Offset of operation `op`'s WRITE/READ/ATOMIC WRITE/FLUSH target in the
/// server region (8-byte aligned for an ATOMIC WRITE, inside the slot).
pub(super) fn target_off(p: &Pair, op: usize) -> usize {
    let o = p.ops[op].slot * p.slot_len;
    if p.ops[op].kind == Kind::AtomicWrite {
        (o + 7) & !7
    } else {
        o
    }
}

/// Offset of receive `n` in the server region.
pub(super) fn recv_off(p: &Pair, n: usize) -> usize {
    (p.depth + n % p.depth) * p.slot_len
}

/// `len` bytes of a region at `off`.
pub(super) fn bytes(mem: &VecMemory, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    mem.read(off, &mut v).expect("vector memory never faults");
    v
}

/// A node's shared FETCH_ADD counter and what the run learnt about it.
pub(super) struct Counter {
    pub(super) mem: Arc<VecMemory>,
    pub(super) key: u32,
    pub(super) start: u64,
    /// (returned value, add) of every FETCH_ADD known to have run.
    pub(super) fadd: Vec<(u64, u64)>,
    /// Sum of the adds of FETCH_ADDs whose fate is unknown (failed QPs).
    pub(super) unknown: u64,
}

/// One PD and one atomic counter region per node.
pub(super) fn nodes(sim: &mut Sim, rng: &mut Rng, nodes: usize) -> (Vec<PdId>, Vec<Counter>) {
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
                COUNTER_VA,
                mem.clone(),
                Access::LOCAL_WRITE.with(Access::REMOTE_ATOMIC),
            )
            .expect("counter mr");
        pds.push(pd);
        counters.push(Counter {
            mem,
            key,
            start,
            fadd: Vec::new(),
            unknown: 0,
        });
    }
    (pds, counters)
}

/// Virtual address of every node's counter region.
pub(super) const COUNTER_VA: u64 = 0x7000_0000;

/// RC, UC or UD, by the configured weights.
fn pick_type(rng: &mut Rng, tw: [u32; 3]) -> QpType {
    let r = rng.below((tw[0] + tw[1] + tw[2]).max(1) as u64) as u32;
    if r < tw[0] {
        QpType::Rc
    } else if r < tw[0] + tw[1] {
        QpType::Uc
    } else {
        QpType::Ud
    }
}

/// A random path MTU that fits the link.
fn pick_mtu(rng: &mut Rng, max_link_mtu: usize) -> Mtu {
    let mtus = [Mtu::M256, Mtu::M512, Mtu::M1024, Mtu::M2048, Mtu::M4096];
    let mut mtu = mtus[rng.below(5) as usize];
    while mtu.bytes() as usize > max_link_mtu && mtu != Mtu::M256 {
        mtu = Mtu::from_ibv(mtu as u32 - 1).expect("smaller mtu");
    }
    mtu
}

/// What one end of a pair is made of.
struct End {
    key: u32,
    send_cq: CqId,
    recv_cq: CqId,
    qpn: Qpn,
}

/// Registers `mem` at `va` on `node` and creates two CQs and a QP.
#[allow(clippy::too_many_arguments)]
fn end(
    sim: &mut Sim,
    node: usize,
    pd: PdId,
    ty: QpType,
    depth: usize,
    mem: Arc<VecMemory>,
    va: u64,
    access: Access,
) -> End {
    let dev = &mut sim.nodes[node].dev;
    let key = dev.reg_mr(pd, va, mem, access).expect("mr");
    let send_cq = dev.create_cq(4 * depth as u32 + 8).expect("cq");
    let recv_cq = dev.create_cq(4 * depth as u32 + 8).expect("cq");
    let (qpn, _) = dev
        .create_qp(&QpInit {
            qp_type: ty,
            pd,
            send_cq,
            recv_cq,
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
    End {
        key,
        send_cq,
        recv_cq,
        qpn,
    }
}

/// Takes both QPs of a pair to RTS with random timers and limits.
fn bring_up(sim: &mut Sim, rng: &mut Rng, p: &Pair, mtu: Mtu, access: Access, pds: &[PdId]) {
    let ty = p.ty;
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
    for (node, qpn) in [(p.client, p.cqpn), (p.server, p.sqpn)] {
        let a = QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: access.remote().with(Access(access.0 & Access::FLUSH.0)),
            qkey: QKey(0x1111_1111),
            ..Default::default()
        };
        let mask =
            AttrMask::required(ty, QpState::Reset, QpState::Init).expect("a bring-up transition");
        let now = sim.now;
        sim.nodes[node]
            .dev
            .modify_qp(now, qpn, &a, mask)
            .expect("init");
    }
    // to_rts reads the node, PD and QP number of each end.
    let endpoint = |node: usize, qpn: Qpn| crate::Endpoint {
        node,
        pd: pds[node],
        send_cq: p.c_send_cq,
        recv_cq: p.s_recv_cq,
        qpn,
        mem: p.c_mem.clone(),
        key: 0,
        va: 0,
        srq: None,
    };
    let (ec, es) = (endpoint(p.client, p.cqpn), endpoint(p.server, p.sqpn));
    let pc = Psn::new(rng.next_u32());
    let ps = Psn::new(rng.next_u32());
    crate::to_rts(sim, &ec, &es, &o, ps, pc);
    crate::to_rts(sim, &es, &ec, &o, pc, ps);
}

/// Draws pair `p`: its nodes, transport, MTU and depth, its regions, its
/// QPs in RTS, and its operations.
pub(super) fn pair(sim: &mut Sim, rng: &mut Rng, cfg: &Config, p: usize, pds: &[PdId]) -> Pair {
    let nodes = pds.len();
    let max_link_mtu = cfg.link.mtu.saturating_sub(48 + 12 + 28 + 4);
    let client = rng.below(nodes as u64) as usize;
    let server = (client + 1 + rng.below(nodes as u64 - 1) as usize) % nodes;
    let ty = pick_type(rng, cfg.type_weights);
    let mtu = pick_mtu(rng, max_link_mtu);
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
        .with(Access::REMOTE_ATOMIC)
        .with(Access::FLUSH_GLOBAL);
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
    let c = end(
        sim,
        client,
        pds[client],
        ty,
        depth,
        c_mem.clone(),
        c_va,
        access,
    );
    let s = end(
        sim,
        server,
        pds[server],
        ty,
        depth,
        s_mem.clone(),
        s_va,
        access,
    );
    let mut pair = Pair {
        ty,
        client,
        server,
        cqpn: c.qpn,
        sqpn: s.qpn,
        c_send_cq: c.send_cq,
        s_recv_cq: s.recv_cq,
        c_mem,
        c_key: c.key,
        c_va,
        s_mem,
        s_key: s.key,
        s_va,
        known: vec![true; shadow.len()],
        shadow,
        depth,
        slot_len,
        ops: Vec::new(),
        next_post: 0,
        pending: VecDeque::new(),
        recv_expect: VecDeque::new(),
        recv_posted: 0,
        recv_done: 0,
        failed: false,
        ah: None,
        cas_value,
        cas_off,
    };
    bring_up(sim, rng, &pair, mtu, access, pds);
    if ty == QpType::Ud {
        let ip = sim.nodes[server].ip;
        let ah = sim.nodes[client]
            .dev
            .create_ah(pds[client], AddressVector::to(ip))
            .expect("ah");
        pair.ah = Some(ah);
    }
    pair.ops = (0..cfg.ops_per_pair)
        .map(|i| op(rng, cfg, ty, depth, max_len, i))
        .collect();
    pair
}

/// Operation `i` of a pair's workload.
fn op(rng: &mut Rng, cfg: &Config, ty: QpType, depth: usize, max_len: usize, i: usize) -> Op {
    let kind = match ty {
        QpType::Rc => match rng.below(100) {
            0..=18 => Kind::Send,
            19..=28 => Kind::SendImm,
            29..=46 => Kind::Write,
            47..=56 => Kind::WriteImm,
            57..=75 => Kind::Read,
            76..=86 => Kind::FetchAdd,
            87..=93 => Kind::CmpSwap,
            94..=96 => Kind::AtomicWrite,
            _ => Kind::Flush,
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
        // The harness draws RC, UC and UD pairs (XRC: tests/xrc.rs).
        QpType::XrcSend | QpType::XrcRecv => unreachable!("no XRC pairs in the harness"),
    };
    let len = if matches!(kind, Kind::FetchAdd | Kind::CmpSwap | Kind::AtomicWrite) {
        8
    } else {
        let cap = max_len as u64;
        (match rng.below(100) {
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
    Op {
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
    }
}
