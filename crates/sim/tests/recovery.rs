//! Loss recovery without the transport timer, and the device-wide budget
//! of packets in flight (issue 22: many QPs at the UDP limit).
//!
//! Each test asserts the mechanism (counters: probes, NAKs, timer
//! expiries, queue drops) and prints the virtual time a loss cost; no
//! test depends on a wall clock.

use softrdma_proto::*;
use softrdma_sim::*;
use softrdma_wire::{IbPacket, Opcode, RKey};
use std::cell::Cell;
use std::rc::Rc;

/// perftest's `timeout` attribute: 4.096 µs × 2^14 = 67 ms.
const PERFTEST_TIMEOUT: u8 = 14;
const RTO_NS: u64 = 4096 << PERFTEST_TIMEOUT;

fn write_wr(ca: &Endpoint, sb: &Endpoint, id: u64, len: u32) -> SendWr {
    let mut wr = SendWr::new(id, WrOpcode::RdmaWrite);
    let off = (id * len as u64) % (ca.mem.len() as u64 - len as u64);
    wr.sg_list = vec![Sge::new(ca.va + off, len, ca.key)];
    wr.remote_addr = sb.va + off;
    wr.rkey = RKey(sb.key);
    wr
}

fn opts() -> PairOpts {
    PairOpts {
        timeout: PERFTEST_TIMEOUT,
        mtu: Mtu::M4096,
        ..PairOpts::default()
    }
}

/// WRITE ONLY packets from the requester (requests carry a RETH).
fn is_write_only(d: &[u8]) -> bool {
    IbPacket::new_checked(d).is_ok_and(|p| p.bth().opcode() == Opcode(0x0a))
}

/// A client (node `a`, returned) connected to a server over a link that
/// loses the n-th WRITE ONLY packet (0-based, first copies and
/// retransmissions counted alike) when `lose(n)`.
fn lossy_pair(lose: impl Fn(u32) -> bool + 'static) -> (Sim, usize, Endpoint, Endpoint) {
    let mut sim = Sim::new(7, LinkConfig::default());
    let a = sim.add_node(11, None);
    let b = sim.add_node(12, None);
    let (ca, sb) = connect(&mut sim, a, b, &opts());
    let seen = Rc::new(Cell::new(0u32));
    let s2 = seen.clone();
    sim.drop_filter = Some(Box::new(move |d| {
        if !is_write_only(d) {
            return false;
        }
        let n = s2.get();
        s2.set(n + 1);
        lose(n)
    }));
    (sim, a, ca, sb)
}

/// Eight one-packet WRITEs on one QP; `lose(n)` says whether the n-th
/// WRITE packet handed to the link (0-based, first copies and
/// retransmissions counted alike) is lost. Returns (client counters,
/// virtual ns from posting to the last completion).
fn eight_writes(lose: impl Fn(u32) -> bool + 'static) -> (Counters, u64) {
    let (mut sim, a, ca, sb) = lossy_pair(lose);
    let start = sim.now;
    for id in 0..8 {
        let wr = write_wr(&ca, &sb, id, 4096);
        sim.nodes[a].dev.post_send(start, ca.qpn, wr).unwrap();
    }
    let mut wcs = Vec::new();
    let limit = start.add_ns(10 * RTO_NS);
    let done = sim.run_until(limit, |s| {
        wcs.extend(drain_cq(s, a, ca.send_cq));
        wcs.len() == 8
    });
    assert!(done, "the WRITEs completed: {wcs:?}");
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, (0..8).collect::<Vec<_>>(), "in order");
    let c = sim.nodes[a].dev.qp_counters(ca.qpn).unwrap();
    (c, sim.now.0 - start.0)
}

#[test]
fn a_lost_last_packet_is_sent_again_after_one_probe_not_after_the_timer() {
    // The 8th WRITE's only packet is lost: nothing follows it, so the
    // responder has nothing to NAK.
    let (c, took) = eight_writes(|n| n == 7);
    eprintln!(
        "lost last packet: recovered in {} µs (timer: {} µs); {c:?}",
        took / 1000,
        RTO_NS / 1000
    );
    assert_eq!(c.timeouts, 0, "the transport timer never fired: {c:?}");
    assert_eq!(c.tail_probes, 1, "one probe: {c:?}");
    assert_eq!(
        c.retransmits, 1,
        "the probe is the one packet sent again: {c:?}"
    );
    assert!(took < RTO_NS / 4, "recovered in {took} ns of virtual time");
}

#[test]
fn a_lost_tail_of_three_is_recovered_by_a_probe_and_the_nak_it_draws() {
    // WRITEs 6, 7, 8 lost: the probe (a copy of the 8th) reaches a
    // responder that expects the 6th: a PSN sequence error NAK, and the
    // requester goes back to the 6th.
    let (c, took) = eight_writes(|n| (5..8).contains(&n));
    eprintln!("lost tail of 3: recovered in {} µs; {c:?}", took / 1000);
    assert_eq!(c.timeouts, 0, "{c:?}");
    assert_eq!(c.tail_probes, 1, "{c:?}");
    assert_eq!(c.seq_nak_rcvd, 1, "{c:?}");
    assert!(took < RTO_NS / 4, "recovered in {took} ns of virtual time");
}

#[test]
fn a_probe_that_is_lost_too_leaves_recovery_to_the_timer() {
    // The last packet and its probe are lost: the timer still recovers.
    let (c, _) = eight_writes(|n| n == 7 || n == 8);
    assert_eq!(c.tail_probes, 1, "{c:?}");
    assert_eq!(c.timeouts, 1, "{c:?}");
}

/// `pairs` RC QPs from node 0 to node 1, each with `per_qp` one-packet
/// 4 KiB WRITEs posted at once, and a receiver that holds `queue`
/// datagrams. Returns (client device counters, link stats, virtual ns to
/// the last completion).
fn many_qps(
    pairs: usize,
    per_qp: u64,
    queue: usize,
    budget: Option<u32>,
) -> (Counters, NetStats, u64) {
    let mut sim = Sim::new(3, LinkConfig::default());
    let a = sim.add_node(21, None);
    let b = sim.add_node(22, None);
    if let Some(p) = budget {
        sim.nodes[a].dev.set_inflight_budget_pkts(p);
    }
    let o = PairOpts {
        mem_len: 1 << 15,
        cq_depth: 256,
        sq_depth: 256,
        rq_depth: 1,
        ..opts()
    };
    let ends: Vec<_> = (0..pairs).map(|_| connect(&mut sim, a, b, &o)).collect();
    sim.rx_queue_limit = Some(queue);
    let start = sim.now;
    for (ca, sb) in &ends {
        for id in 0..per_qp {
            let wr = write_wr(ca, sb, id, 4096);
            sim.nodes[a].dev.post_send(start, ca.qpn, wr).unwrap();
        }
    }
    let mut done = vec![0u64; pairs];
    let limit = start.add_ns(100 * RTO_NS);
    let all = sim.run_until(limit, |s| {
        for (i, (ca, _)) in ends.iter().enumerate() {
            for w in drain_cq(s, a, ca.send_cq) {
                assert_eq!(w.status, WcStatus::Success, "{w:?}");
                done[i] += 1;
            }
        }
        done.iter().all(|&n| n == per_qp)
    });
    assert!(all, "every WRITE completed");
    (sim.nodes[a].dev.counters(), sim.stats, sim.now.0 - start.0)
}

#[test]
fn many_qps_under_the_device_budget_never_overrun_the_receivers_queue() {
    // 200 QPs × 32 WRITEs = 6,400 packets ready at once; the receiver
    // holds 2,048 datagrams. With the default budget (1,024) nothing is
    // dropped and no timer fires.
    let (c, net, took) = many_qps(200, 32, 2048, None);
    eprintln!(
        "budget {}: {} µs, {net:?}, {c:?}",
        limits::DEVICE_INFLIGHT_PKTS,
        took / 1000
    );
    assert_eq!(net.queue_drops, 0, "{net:?}");
    assert_eq!((c.timeouts, c.retransmits), (0, 0), "{c:?}");
    assert!(c.budget_waits > 0, "the budget held QPs back: {c:?}");
    // Without a budget the same burst overruns the queue (the situation
    // the budget exists for): every QP still completes, by NAKs, probes
    // and timers.
    let (c, net, took) = many_qps(200, 32, 2048, Some(0));
    eprintln!("no budget: {} µs, {net:?}, {c:?}", took / 1000);
    assert!(net.queue_drops > 0, "{net:?}");
    assert_eq!(c.budget_waits, 0, "{c:?}");
}

#[test]
fn a_qp_with_nothing_in_flight_always_sends_even_when_the_budget_is_spent() {
    // A budget of 8 packets over 40 QPs: every QP still gets its turn.
    let (c, net, _) = many_qps(40, 4, 4096, Some(8));
    assert_eq!(net.queue_drops, 0, "{net:?}");
    assert!(c.budget_waits > 0, "{c:?}");
}

#[test]
fn a_nak_for_the_probed_packet_sends_it_again_at_once() {
    // The 8th WRITE's packet is lost, and so is the probe (its copy);
    // then a 9th WRITE arrives, and the responder, still expecting the
    // 8th, answers with a PSN sequence error NAK naming it. The requester
    // must go back to the 8th at once: the probe is no go-back-N retry,
    // and must not make the NAK look like one already under way (it did:
    // the NAK was ignored, and only the transport timer recovered, with
    // the window down to its minimum and a retry spent).
    let (mut sim, a, ca, sb) = lossy_pair(|n| n == 7 || n == 8);
    let start = sim.now;
    for id in 0..8 {
        let wr = write_wr(&ca, &sb, id, 4096);
        sim.nodes[a].dev.post_send(start, ca.qpn, wr).unwrap();
    }
    let mut wcs = Vec::new();
    let mut ninth = false;
    let limit = start.add_ns(10 * RTO_NS);
    let done = sim.run_until(limit, |s| {
        let probes = s.nodes[a].dev.qp_counters(ca.qpn).unwrap().tail_probes;
        if !ninth && probes == 1 {
            // The probe is due (it leaves first, and is lost): one more
            // WRITE behind it.
            ninth = true;
            let wr = write_wr(&ca, &sb, 8, 4096);
            let now = s.now;
            s.nodes[a].dev.post_send(now, ca.qpn, wr).unwrap();
        }
        wcs.extend(drain_cq(s, a, ca.send_cq));
        wcs.len() == 9
    });
    assert!(done, "the WRITEs completed: {wcs:?}");
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let c = sim.nodes[a].dev.qp_counters(ca.qpn).unwrap();
    let took = sim.now.0 - start.0;
    eprintln!(
        "lost packet and probe, then a NAK: recovered in {} µs; {c:?}",
        took / 1000
    );
    assert_eq!(c.tail_probes, 1, "{c:?}");
    assert_eq!(c.seq_nak_rcvd, 1, "the NAK came: {c:?}");
    assert_eq!(c.timeouts, 0, "the NAK, not the timer, recovered: {c:?}");
    assert!(took < RTO_NS / 4, "recovered in {took} ns of virtual time");
}

/// One QP, `depth` 8 MiB WRITEs kept outstanding (perftest's shape at the
/// main job's largest size), `total` in all, both nodes paused now and
/// then as a loaded host's scheduler pauses a process, the receiver's
/// queue overrun meanwhile. Returns (client counters, link stats, the
/// longest virtual wait for a completion in ns).
fn paused_big_writes(seed: u64, probe: bool, timers_first: bool) -> (Counters, NetStats, u64) {
    const MSG: u32 = 8 << 20;
    let (depth, total) = (4u64, 12u64);
    let mut sim = Sim::new(seed, LinkConfig::default());
    sim.timers_first_after_pause = timers_first;
    let a = sim.add_node(seed, None);
    let b = sim.add_node(seed + 1, None);
    for n in [a, b] {
        let mut cfg = sim.nodes[n].dev.config().clone();
        cfg.tail_probe = probe;
        sim.nodes[n].dev = Device::new(cfg);
    }
    let o = PairOpts {
        mem_len: 2 * MSG as usize,
        ..opts()
    };
    let (ca, sb) = connect(&mut sim, a, b, &o);
    // Less than one QP's window (`MAX_INFLIGHT_PKTS`): bursts overflow it.
    sim.rx_queue_limit = Some(300);
    let mut dice = softrdma_link::Rng::new(seed);
    let (mut posted, mut done) = (0u64, 0u64);
    let (mut last, mut longest) = (sim.now, 0u64);
    let mut next_pause = 0u64;
    let limit = sim.now.add_ns(300 * RTO_NS);
    while done < total {
        while posted < total && posted - done < depth {
            let mut wr = write_wr(&ca, &sb, 0, MSG);
            wr.wr_id = posted;
            wr.flags = SendFlags::SIGNALED;
            let now = sim.now;
            sim.nodes[a].dev.post_send(now, ca.qpn, wr).unwrap();
            posted += 1;
        }
        if sim.now.0 >= next_pause {
            // Pauses of up to 5 ms every few ms, and one of 100 ms (longer
            // than the transport timer) now and then.
            let node = [a, b][(dice.next_u64() % 2) as usize];
            let len = if dice.next_u64().is_multiple_of(20) {
                100_000_000
            } else {
                dice.next_u64() % 5_000_000
            };
            sim.pause(node, sim.now.add_ns(len));
            next_pause = sim.now.0 + dice.next_u64() % 5_000_000;
        }
        assert!(sim.step(limit), "time ran out: {done}/{total} completed");
        for w in drain_cq(&mut sim, a, ca.send_cq) {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            done += 1;
            longest = longest.max(sim.now.0 - last.0);
            last = sim.now;
        }
    }
    let c = sim.nodes[a].dev.qp_counters(ca.qpn).unwrap();
    (c, sim.stats, longest)
}

#[test]
fn big_writes_finish_while_both_ends_are_paused_and_the_queue_overflows() {
    let mut drops = 0;
    for seed in 0..4 {
        for timers_first in [false, true] {
            let (c, net, longest) = paused_big_writes(seed, true, timers_first);
            eprintln!(
                "seed {seed} timers first {timers_first}: longest wait {} ms; probes {}, timeouts {}, NAKs {}, queue drops {}",
                longest / 1_000_000,
                c.tail_probes,
                c.timeouts,
                c.seq_nak_rcvd,
                net.queue_drops
            );
            // A completion every 8 MiB: one waits for a few pauses and
            // timer expiries at most, never for the retry count.
            assert!(longest < 20 * RTO_NS, "waited {longest} ns: {c:?}");
            drops += net.queue_drops;
        }
    }
    assert!(drops > 0, "the receiver's queue overflowed");
}

/// A responder remembers `max_dest_rd_atomic` READ, atomic, FLUSH and
/// ATOMIC WRITE requests to answer their duplicates (IBA 9.7.5.1.3); a
/// requester must keep that many at most outstanding, FLUSH included, or
/// the responder forgets one it may still retransmit — and then answers
/// that retransmission with nothing at all, until the retry counter runs
/// out (issue 19: the capture of an RC requester retransmitting its two
/// oldest PSNs to a responder that never answered them again). Here, with
/// one resource: a FETCH_ADD, then a FLUSH, and the atomic's ACK is lost.
/// Before the fix the FLUSH left at once, took the responder's only
/// resource and its response implied a lost atomic response; the atomic's
/// retransmissions met a responder that no longer knew it (8 timeouts,
/// RetryExcErr).
#[test]
fn a_flush_waits_for_the_atomic_before_it_so_a_lost_atomic_ack_is_answered_again() {
    let mut sim = Sim::new(7, LinkConfig::default());
    let a = sim.add_node(11, None);
    let b = sim.add_node(12, None);
    let o = PairOpts {
        max_rd_atomic: 1,
        access: PairOpts::default()
            .access
            .with(Access::FLUSH_GLOBAL)
            .with(Access::FLUSH_PERSISTENT),
        ..opts()
    };
    let (ca, sb) = connect(&mut sim, a, b, &o);
    // The first ATOMIC ACKNOWLEDGE (opcode 0x12) is lost.
    let lost = Rc::new(Cell::new(0u32));
    let l2 = lost.clone();
    sim.drop_filter = Some(Box::new(move |d| {
        let atomic_ack = IbPacket::new_checked(d).is_ok_and(|p| p.bth().opcode() == Opcode(0x12));
        if atomic_ack && l2.get() == 0 {
            l2.set(1);
            return true;
        }
        false
    }));
    let start = sim.now;
    let mut fa = SendWr::rdma(
        0,
        WrOpcode::AtomicFetchAndAdd,
        Sge::new(ca.va, 8, ca.key),
        sb.va,
        RKey(sb.key),
    );
    fa.compare_add = 5;
    let mut fl = SendWr::new(1, WrOpcode::Flush);
    fl.remote_addr = sb.va + 4096;
    fl.rkey = RKey(sb.key);
    fl.flush = FlushSpec {
        placement_type: 1,
        level: 0,
    };
    fl.flush_len = 64;
    for wr in [fa, fl] {
        sim.nodes[a].dev.post_send(start, ca.qpn, wr).unwrap();
    }
    let mut wcs = Vec::new();
    let limit = start.add_ns(20 * RTO_NS);
    let done = sim.run_until(limit, |s| {
        wcs.extend(drain_cq(s, a, ca.send_cq));
        wcs.len() == 2
    });
    assert_eq!(lost.get(), 1, "the atomic ACK was dropped");
    assert!(done, "both completed: {wcs:?}");
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let c = sim.nodes[a].dev.qp_counters(ca.qpn).unwrap();
    let s = sim.nodes[b].dev.qp_counters(sb.qpn).unwrap();
    assert_eq!(s.duplicate_requests, 1, "the atomic came again: {s:?}");
    assert!(c.timeouts <= 1, "answered at the first retry: {c:?}");
    eprintln!(
        "atomic ACK lost: recovered after {} µs (virtual), {} timeout(s)",
        (sim.now.0 - start.0) / 1000,
        c.timeouts
    );
}

/// The requester's node is paused (a loaded host does not run it) past
/// its probe timeout, while the ACK of its last packet arrives. When it
/// runs again, the ACK waits in its socket and the probe's deadline has
/// passed: read first, the ACK stops the probe; timers first, a probe
/// goes out for a packet that has long been acknowledged (a duplicate
/// the responder ACKs again). The engine reads the socket before it runs
/// a due timer (`Shared::poll_timers`; a program thread's poll no longer
/// runs timers first): no probe in a lossless run.
#[test]
fn a_paused_requester_reads_the_waiting_ack_before_its_timers_no_probe() {
    let probes = |timers_first: bool| {
        let mut sim = Sim::new(7, LinkConfig::default());
        sim.timers_first_after_pause = timers_first;
        let a = sim.add_node(11, None);
        let b = sim.add_node(12, None);
        let (ca, sb) = connect(&mut sim, a, b, &opts());
        let start = sim.now;
        let mut wr = write_wr(&ca, &sb, 0, 4096);
        wr.flags = SendFlags::SIGNALED;
        sim.nodes[a].dev.post_send(start, ca.qpn, wr).unwrap();
        // Sent; paused longer than any probe timeout before its ACK.
        sim.flush();
        sim.pause(a, start.add_ns(4 * limits::PROBE_INIT_NS));
        let mut wcs = Vec::new();
        let done = sim.run_until(start.add_ns(10 * RTO_NS), |s| {
            wcs.extend(drain_cq(s, a, ca.send_cq));
            !wcs.is_empty()
        });
        assert!(done, "the WRITE completed");
        assert_eq!(wcs[0].status, WcStatus::Success, "{wcs:?}");
        let c = sim.nodes[a].dev.qp_counters(ca.qpn).unwrap();
        eprintln!("timers first {timers_first}: {c:?}");
        assert_eq!(c.timeouts, 0, "{c:?}");
        c.tail_probes
    };
    assert_eq!(probes(false), 0, "ACK read first: no probe");
    // The order the engine had: a probe for nothing lost.
    assert_eq!(probes(true), 1, "timers first: a spurious probe");
}

/// A lossless link where one ACK in 20 is late by more than the probe
/// timeout, as on a loaded host whose peer does not run for a few ms: a
/// probe then sends again a packet that was not lost (the responder
/// answers it as a duplicate). Each probe found spurious (a late ACK
/// acknowledging nothing new once the probe's own came) doubles the QP's
/// probe floor: a handful of probes, not one per late ACK (before: 26
/// probes for 26 late ACKs, all of them duplicates; after: 4).
#[test]
fn late_acks_on_a_lossless_link_stop_drawing_probes() {
    let mut sim = Sim::new(3, LinkConfig::default());
    let a = sim.add_node(21, None);
    let b = sim.add_node(22, None);
    let (ca, sb) = connect(&mut sim, a, b, &opts());
    let late = Rc::new(Cell::new(0u64));
    let l2 = late.clone();
    let mut acks = 0u64;
    sim.delay_filter = Some(Box::new(move |d| {
        let is_ack = IbPacket::new_checked(d).is_ok_and(|p| p.bth().opcode() == Opcode(0x11));
        if !is_ack {
            return 0;
        }
        acks += 1;
        if acks.is_multiple_of(20) {
            l2.set(l2.get() + 1);
            6_000_000
        } else {
            0
        }
    }));
    let (depth, total) = (4u64, 2000u64);
    let (mut posted, mut done) = (0u64, 0u64);
    let limit = sim.now.add_ns(1000 * RTO_NS);
    while done < total {
        while posted < total && posted - done < depth {
            let mut wr = write_wr(&ca, &sb, posted, 4096);
            wr.wr_id = posted;
            wr.flags = SendFlags::SIGNALED;
            let now = sim.now;
            sim.nodes[a].dev.post_send(now, ca.qpn, wr).unwrap();
            posted += 1;
        }
        assert!(sim.step(limit), "time ran out: {done}/{total} completed");
        for w in drain_cq(&mut sim, a, ca.send_cq) {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            done += 1;
        }
    }
    let c = sim.nodes[a].dev.qp_counters(ca.qpn).unwrap();
    let r = sim.nodes[b].dev.qp_counters(sb.qpn).unwrap();
    eprintln!(
        "{} late ACKs: probes {}, duplicates at the responder {}, timeouts {}, NAKs {}, stale {}",
        late.get(),
        c.tail_probes,
        r.duplicate_requests,
        c.timeouts,
        c.seq_nak_rcvd,
        c.stale_responses
    );
    assert!(late.get() >= 20, "ACKs were late: {}", late.get());
    assert_eq!(c.seq_nak_rcvd + c.timeouts, 0, "nothing was lost: {c:?}");
    assert!(
        c.tail_probes <= 4,
        "{} probes for {} late ACKs",
        c.tail_probes,
        late.get()
    );
}
