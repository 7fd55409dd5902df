//! Posting: receives on the server side, operations on the client side,
//! with the shadow of the server region updated for what they will write.

use super::workload::{
    op_tag, pattern, recv_off, split_sges, target_off, Counter, Kind, OpState, Pair, COUNTER_VA,
};
use super::{Config, Report};
use crate::net::Sim;
use softrdma_proto::*;
use softrdma_wire::{QKey, RKey};

/// Keeps `depth` receives posted on the server (unless it lags this step:
/// receiver-not-ready for RC).
pub(super) fn post_receives(sim: &mut Sim, p: &mut Pair, rng: &mut Rng, lag: f64) {
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

/// Posts the next operations while fewer than `depth` are outstanding.
pub(super) fn post_ops(
    sim: &mut Sim,
    p: &mut Pair,
    pi: usize,
    cfg: &Config,
    rng: &mut Rng,
    counters: &[Counter],
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
            Kind::AtomicWrite => {
                wr.flags = wr.flags.with(SendFlags::INLINE);
                wr.inline_data = data.clone();
            }
            Kind::Flush => {
                wr.flush = FlushSpec {
                    placement_type: softrdma_wire::ext::FLUSH_GLOBAL,
                    level: softrdma_wire::ext::FLUSH_RANGE,
                };
                wr.flush_len = op.len as u64;
            }
            Kind::FetchAdd | Kind::CmpSwap => {
                p.c_mem.fill_from(coff, &[0xee; 8]);
                wr.sg_list = vec![Sge::new(p.c_va + coff as u64, 8, p.c_key)];
            }
        }
        match op.kind {
            Kind::Write | Kind::WriteImm | Kind::Read | Kind::AtomicWrite | Kind::Flush => {
                wr.remote_addr = p.s_va + target_off(p, i) as u64;
                wr.rkey = RKey(p.s_key);
            }
            Kind::FetchAdd => {
                wr.remote_addr = COUNTER_VA;
                wr.rkey = RKey(counters[p.server].key);
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
        if matches!(op.kind, Kind::Write | Kind::WriteImm | Kind::AtomicWrite) {
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
