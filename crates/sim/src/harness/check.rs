//! The checks: completions as they arrive, then the end state (server
//! regions against their shadows, the atomic counters), and what the link
//! did against what it was asked to do.

use super::workload::{
    bytes, op_tag, pattern, recv_off, target_off, Counter, Kind, OpState, Pair, GRH,
};
use super::{Config, Report};
use crate::net::{NetStats, Sim};
use softrdma_proto::*;

/// Checks the client's send completions: exactly once, in posting order,
/// with an allowed status; verifies what each successful operation did.
pub(super) fn send_completions(
    sim: &mut Sim,
    p: &mut Pair,
    pi: usize,
    cfg: &Config,
    counters: &mut [Counter],
    rep: &mut Report,
) {
    for wc in &crate::drain_cq(sim, p.client, p.c_send_cq) {
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
                verify_op(p, front, pi, cfg, rep, counters);
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
            verify_op(p, id, pi, cfg, rep, counters);
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
    if p.failed {
        // Everything not known to be done is unknown now.
        for op in &p.ops {
            if op.kind == Kind::FetchAdd && op.state == OpState::Failed {
                counters[p.server].unknown += op.add;
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

/// Checks what a successful operation did: WRITE target, READ result,
/// the value an atomic returned.
fn verify_op(
    p: &mut Pair,
    i: usize,
    pi: usize,
    cfg: &Config,
    rep: &mut Report,
    counters: &mut [Counter],
) {
    let op = &p.ops[i];
    let tag = op_tag(cfg.seed, pi, i);
    let coff = op.slot * p.slot_len;
    let mut bad = None;
    match op.kind {
        Kind::Write | Kind::WriteImm | Kind::AtomicWrite
            if p.ty == QpType::Rc
                && bytes(&p.s_mem, target_off(p, i), op.len) != pattern(tag, op.len) =>
        {
            bad = Some(format!("{:?} target differs from the source", op.kind));
        }
        Kind::Read if bytes(&p.c_mem, coff, op.len) != pattern(tag, op.len) => {
            bad = Some("READ result differs from the remote data".to_string());
        }
        Kind::FetchAdd => {
            let orig = u64::from_ne_bytes(bytes(&p.c_mem, coff, 8).try_into().expect("8"));
            counters[p.server].fadd.push((orig, op.add));
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

/// Checks the server's receive completions: in order, each one a whole
/// message that was sent (RC: exactly the next one; UC/UD: the next one
/// or a later one after losses), from the right source on UD.
pub(super) fn recv_completions(
    sim: &mut Sim,
    p: &mut Pair,
    pi: usize,
    cfg: &Config,
    rep: &mut Report,
) {
    for wc in &crate::drain_cq(sim, p.server, p.s_recv_cq) {
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
                // UC and UD requests complete when sent: a later request
                // of the client may already have rewritten the slot a
                // WRITE with immediate landed in; then its bytes cannot
                // be checked here (RC waits for the completion first).
                Kind::WriteImm
                    if p.ty != QpType::Rc
                        && p.ops[i + 1..]
                            .iter()
                            .any(|o| o.slot == op.slot && o.state != OpState::NotPosted) =>
                {
                    true
                }
                Kind::WriteImm => {
                    let t = target_off(p, i);
                    bytes(&p.s_mem, t, op.len) == pattern(op_tag(cfg.seed, pi, i), op.len)
                }
                _ => {
                    len_ok && got[hdr..hdr + op.len] == pattern(op_tag(cfg.seed, pi, i), op.len)[..]
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
                // UC/UD: the messages before the match were lost (UD may
                // also duplicate or reorder: only what came before goes).
                rep.unreliable_lost += k as u64;
                p.recv_expect.drain(..=k);
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
            let src = softrdma_wire::grh::ud_grh_source(got[..GRH].try_into().expect("40 bytes"));
            if src != sim.nodes[p.client].ip || wc.src_qp != p.cqpn {
                rep.violations.push(format!(
                    "seed {}: pair {pi} UD source {src} qp {:?} wrong",
                    cfg.seed, wc.src_qp
                ));
            }
        }
    }
}

/// After the run: nothing outside the targets of successful writes changed
/// in the server region (unreliable or failed pairs may have written part
/// of theirs; receive slots were checked per completion).
pub(super) fn region(p: &mut Pair, pi: usize, cfg: &Config, rep: &mut Report) {
    if p.ty != QpType::Rc || p.failed {
        // Unreliable or failed: writes may have partly happened.
        for (i, op) in p.ops.iter().enumerate() {
            let unknown_write = matches!(op.kind, Kind::Write | Kind::WriteImm | Kind::AtomicWrite)
                && (p.ty == QpType::Uc || op.state != OpState::Done);
            let unknown_cas = op.kind == Kind::CmpSwap && op.state != OpState::Done;
            if unknown_write {
                let off = target_off(p, i);
                p.known[off..off + op.len].fill(false);
            }
            if unknown_cas {
                let o = p.cas_off;
                p.known[o..o + 8].fill(false);
            }
        }
    }
    let r0 = p.depth * p.slot_len;
    p.known[r0..2 * p.depth * p.slot_len].fill(false);
    let actual = p.s_mem.snapshot();
    if let Some(i) = (0..actual.len()).find(|&i| p.known[i] && actual[i] != p.shadow[i]) {
        rep.violations.push(format!(
            "seed {}: pair {pi} ({:?}) server byte {i} is {:#04x}, expected {:#04x} (memory outside successful writes changed)",
            cfg.seed, p.ty, actual[i], p.shadow[i]
        ));
    }
}

/// Atomics ran once: the values FETCH_ADD returned form one chain per
/// counter, and the counter ends at its start plus the sum of the adds
/// (plus at most the adds of failed QPs).
pub(super) fn atomics(counters: &[Counter], cfg: &Config, rep: &mut Report) {
    for (node, c) in counters.iter().enumerate() {
        let mut res = c.fadd.clone();
        res.sort_unstable();
        let mut v = c.start;
        for (orig, add) in &res {
            if *orig != v && c.unknown == 0 {
                rep.violations.push(format!(
                    "seed {}: node {node} FETCH_ADD chain broken: got {orig}, expected {v}",
                    cfg.seed
                ));
                break;
            }
            v = orig.wrapping_add(*add);
        }
        let fin = u64::from_ne_bytes(c.mem.snapshot()[..8].try_into().expect("8 bytes"));
        let sum: u64 = res.iter().map(|r| r.1).sum();
        let lo = c.start.wrapping_add(sum);
        if fin.wrapping_sub(lo) > c.unknown {
            rep.violations.push(format!(
                "seed {}: node {node} counter is {fin}, expected {lo} (+ up to {} from failed QPs)",
                cfg.seed, c.unknown
            ));
        }
    }
}

/// The counts a link that draws each fault with probability `p` over
/// `trials` datagrams stays within: none when `p` is 0; otherwise the mean
/// ± 7 standard deviations (and at least one when 20 or more are expected:
/// a miss then has a chance below 10^-8).
fn expected_range(p: f64, trials: u64) -> (u64, u64) {
    if p <= 0.0 {
        return (0, 0);
    }
    let mean = p * trials as f64;
    let sd = (mean * (1.0 - p.min(1.0))).sqrt();
    let lo = if mean >= 20.0 {
        (mean - 7.0 * sd).max(1.0).floor() as u64
    } else {
        0
    };
    (lo, (mean + 7.0 * sd + 10.0).ceil() as u64)
}

/// The link injected the faults it was asked for, about as often as asked
/// (and none it was not asked for): a run that injects nothing would pass
/// every other check without testing recovery.
pub(super) fn faults(cfg: &Config, net: &NetStats, rep: &mut Report) {
    let l = &cfg.link;
    // Datagrams that reached the loss draw, and those that went on.
    let routed = net.sent - net.no_route - net.too_big;
    let kept = routed - net.lost;
    let mut check = |what: &str, p: f64, trials: u64, got: u64| {
        let (lo, hi) = expected_range(p, trials);
        if got < lo || got > hi {
            rep.violations.push(format!(
                "seed {}: {what} {p} asked for over {trials} datagrams: the link did it {got} times, \
                 expected {lo}..={hi}",
                cfg.seed
            ));
        }
    };
    check("loss", l.loss, routed, net.lost);
    check("corruption", l.corrupt, kept, net.corrupted);
    check("duplication", l.duplicate, kept, net.duplicated);
    if l.reorder_psn_mod == 0 {
        check("reordering", l.reorder, kept, net.reordered);
    } else if kept > 2 * u64::from(l.reorder_psn_mod) && net.reordered == 0 {
        rep.violations.push(format!(
            "seed {}: every PSN multiple of {} was to be held back, but nothing was",
            cfg.seed, l.reorder_psn_mod
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::{expected_range, faults};
    use crate::harness::{Config, Report};
    use crate::net::NetStats;

    #[test]
    fn a_link_that_injects_nothing_it_was_asked_for_fails_the_run() {
        let mut cfg = Config::new(1);
        cfg.link.loss = 0.05;
        cfg.link.duplicate = 0.01;
        let clean = NetStats {
            sent: 20_000,
            delivered: 20_000,
            ..Default::default()
        };
        let mut rep = Report::default();
        faults(&cfg, &clean, &mut rep);
        assert_eq!(rep.violations.len(), 2, "{:?}", rep.violations);
        assert!(
            rep.violations[0].contains("loss 0.05"),
            "{:?}",
            rep.violations
        );
        // As asked: 5 % lost, 1 % of the rest duplicated.
        let ok = NetStats {
            lost: 1_000,
            duplicated: 190,
            ..clean
        };
        let mut rep = Report::default();
        faults(&cfg, &ok, &mut rep);
        assert!(rep.ok(), "{:?}", rep.violations);
        // A fault nobody asked for.
        let extra = NetStats { corrupted: 1, ..ok };
        let mut rep = Report::default();
        faults(&cfg, &extra, &mut rep);
        assert_eq!(rep.violations.len(), 1, "{:?}", rep.violations);
    }

    #[test]
    fn fault_count_ranges() {
        assert_eq!(expected_range(0.0, 1_000_000), (0, 0));
        // 5 % of 20,000: 1,000 ± 7 sd (sd ≈ 30.8).
        let (lo, hi) = expected_range(0.05, 20_000);
        assert!(
            (780..=790).contains(&lo) && (1215..=1230).contains(&hi),
            "{lo} {hi}"
        );
        // 0.1 % of 20,000: 20 expected, so at least one.
        assert!(expected_range(0.001, 20_000).0 >= 1);
        // Too few datagrams to insist on any.
        assert_eq!(expected_range(0.001, 1_000).0, 0);
    }
}
