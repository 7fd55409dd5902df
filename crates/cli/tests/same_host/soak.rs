//! The soak of the simulated transport over the real same-host path.

use super::*;

/// SENDs of the soak (the target posts a receive for each).
pub(crate) const SOAK_SENDS: usize = 64;
/// Operations of the soak besides the SENDs.
const SOAK_OPS: usize = 1500;
/// Operations of the soak in flight at once (each its own local slot).
const SOAK_WINDOW: usize = 16;
/// Bytes of each in-flight operation's local slot, and the most one moves.
const SOAK_SLOT: usize = 32 << 10;

/// Where the target receives the soak's SEND `k`: 4 KiB slots from the
/// middle of its region (the WRITE and READ zone is the first half).
pub(crate) fn soak_recv_slot(k: usize) -> usize {
    LEN / 2 + k * SEND_LEN
}

/// xorshift64*: the soak's operations, from `SH_SEED`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// What a soak operation must have done, checked at its completion.
enum Expect {
    Nothing,
    /// A READ: its local slot holds these bytes (the target's memory as
    /// the WRITEs posted before it left it).
    Read(usize, Vec<u8>),
    /// A FETCH_ADD: it returned this value into its local slot.
    Fetched(usize, u64),
}

/// The soak of the simulated transport (crates/sim/tests/soak.rs) over the
/// real same-host path, with both devices injecting loss, duplication,
/// reordering and corruption (`SOFTRDMA_FAULTS`): WRITEs, READs and
/// FETCH_ADDs of random sizes and places, SENDs, up to `SOAK_WINDOW` in
/// flight. Its invariants: every operation completes exactly once, in
/// posting order, successfully (no retry exhaustion at these rates); every
/// READ brings the target's memory as the WRITEs before it left it
/// (checked against a shadow), every FETCH_ADD the sum of the adds before
/// it; at the end the target's memory is the shadow, its counter the sum,
/// and it received every SEND once, in order, whole (it checks that).
pub(crate) fn soak(
    conn: &softrdma::cm::Connection,
    mr: &MemoryRegion,
    cq: &CompletionQueue,
    remote: softrdma::cm::ConnInfo,
) {
    let mut rng = Rng(env("SH_SEED").parse::<u64>().unwrap() | 1);
    let zone = LEN / 2;
    // The target's zone starts as this pattern: one WRITE of all of it.
    let mut shadow = pattern(0x33, zone);
    // (Local slots: SOAK_WINDOW × SOAK_SLOT from 0; the staging of the
    // first WRITE uses the same bytes before any slot is in use.)
    mr.write(0, &shadow);
    let mut first = SendWr::new(u64::MAX, WrOpcode::RdmaWrite);
    first.sg_list = vec![mr.sge(0, zone as u32)];
    first.remote_addr = remote.va;
    first.rkey = remote.rkey;
    conn.qp.post_send(first).unwrap();
    let wc = cq.wait(1, T).unwrap();
    assert!(wc.len() == 1 && wc[0].status == WcStatus::Success, "{wc:?}");
    let mut sum = 0u64;
    let mut sends = 0usize;
    let mut in_flight: std::collections::VecDeque<(u64, usize, Expect)> = Default::default();
    let mut free: Vec<usize> = (0..SOAK_WINDOW).collect();
    let (mut posted, mut completed) = (0u64, 0u64);
    let total = (SOAK_OPS + SOAK_SENDS) as u64;
    let mut counts = [0usize; 4];
    while completed < total {
        while posted < total && !free.is_empty() {
            let slot = free.pop().unwrap();
            let local = slot * SOAK_SLOT;
            let id = posted;
            // SENDs spread over the run.
            let kind = if sends < SOAK_SENDS && rng.below(SOAK_OPS / SOAK_SENDS + 1) == 0
                || (total - posted) as usize <= SOAK_SENDS - sends
            {
                3
            } else {
                rng.below(3)
            };
            counts[kind] += 1;
            let (wr, expect) = match kind {
                0 | 1 => {
                    // 0 B to 32 KiB, anywhere in the zone.
                    let len = if rng.below(2) == 0 {
                        [0, 1, 63, 4096, 4097, 12_000, SOAK_SLOT][rng.below(7)]
                    } else {
                        rng.below(SOAK_SLOT + 1)
                    };
                    let off = rng.below(zone - len + 1);
                    if kind == 0 {
                        let bytes = pattern(rng.next() as u8, len);
                        mr.write(local, &bytes);
                        shadow[off..off + len].copy_from_slice(&bytes);
                        let mut w = SendWr::new(id, WrOpcode::RdmaWrite);
                        w.sg_list = vec![mr.sge(local, len as u32)];
                        w.remote_addr = remote.va + off as u64;
                        w.rkey = remote.rkey;
                        // A READ whose response is lost is executed again
                        // by the target (IBA 9.7.5.2.1): a WRITE posted
                        // after it may not land before it completes, or
                        // the READ could bring the newer bytes.
                        w.flags = w.flags.with(SendFlags::FENCE);
                        (w, Expect::Nothing)
                    } else {
                        mr.write(local, &vec![0xee; len]);
                        let mut w = SendWr::new(id, WrOpcode::RdmaRead);
                        w.sg_list = vec![mr.sge(local, len as u32)];
                        w.remote_addr = remote.va + off as u64;
                        w.rkey = remote.rkey;
                        (w, Expect::Read(local, shadow[off..off + len].to_vec()))
                    }
                }
                2 => {
                    let add = rng.next() % 1000;
                    let mut w = SendWr::new(id, WrOpcode::AtomicFetchAndAdd);
                    w.sg_list = vec![mr.sge(local, 8)];
                    w.remote_addr = remote.va + COUNTER as u64;
                    w.rkey = remote.rkey;
                    w.compare_add = add;
                    let e = Expect::Fetched(local, 1000 + sum);
                    sum += add;
                    (w, e)
                }
                _ => {
                    let len = 1 + rng.below(SEND_LEN);
                    mr.write(local, &pattern(sends as u8 ^ 0x5a, len));
                    sends += 1;
                    let mut w = SendWr::new(id, WrOpcode::Send);
                    w.sg_list = vec![mr.sge(local, len as u32)];
                    (w, Expect::Nothing)
                }
            };
            conn.qp.post_send(wr).unwrap();
            in_flight.push_back((id, slot, expect));
            posted += 1;
        }
        let wc = cq.wait(1, T).unwrap();
        assert_eq!(
            wc.len(),
            1,
            "no completion within {T:?} ({completed} of {total} done)"
        );
        let w = &wc[0];
        let (id, slot, expect) = in_flight
            .pop_front()
            .expect("a completion for nothing posted");
        assert_eq!(w.wr_id, id, "out of order or twice: {w:?}");
        assert_eq!(w.status, WcStatus::Success, "op {id}: {w:?}");
        match expect {
            Expect::Nothing => {}
            Expect::Read(local, want) => {
                assert!(
                    mr.to_vec(local, want.len()) == want,
                    "READ {id} brought other bytes"
                );
            }
            Expect::Fetched(local, want) => {
                let got = mr.atomic_u64(local).load(Ordering::SeqCst);
                assert_eq!(got, want, "FETCH_ADD {id}");
            }
        }
        free.push(slot);
        completed += 1;
    }
    assert!(
        cq.wait(1, Duration::from_millis(200)).unwrap().is_empty(),
        "a completion too many"
    );
    // The end state: the target's zone is the shadow.
    let mut all = SendWr::new(u64::MAX - 1, WrOpcode::RdmaRead);
    all.sg_list = vec![mr.sge(0, zone as u32)];
    all.remote_addr = remote.va;
    all.rkey = remote.rkey;
    conn.qp.post_send(all).unwrap();
    let wc = cq.wait(1, T).unwrap();
    assert!(wc.len() == 1 && wc[0].status == WcStatus::Success, "{wc:?}");
    assert!(
        mr.to_vec(0, zone) == shadow,
        "the target's memory is not the shadow"
    );
    say(&format!(
        "SOAK writes={} reads={} fetch_adds={} sends={sends} counter={}",
        counts[0],
        counts[1],
        counts[2],
        1000 + sum
    ));
    say("DONE");
}

/// The soak's invariants (crates/sim/tests/soak.rs) over the same-host
/// path: [`soak`] between two processes whose devices both inject loss,
/// duplication, reordering and corruption, one address and two; the path
/// carried the run (both processes' counters), the target received every
/// SEND once, in order, whole, and its counter is the sum of the adds.
#[test]
fn the_soaks_invariants_hold_over_the_path_with_faults() {
    for (seed, a, b) in [
        (19u64, "127.74.3.1", "127.74.3.1"),
        (74, "127.74.3.2", "127.74.3.3"),
    ] {
        let faults = format!("seed={seed},loss=2%,dup=1%,reorder=2%,corrupt=0.2%");
        let mut p = pair_with(
            "shm",
            "soak",
            a,
            b,
            &[("SH_SEED", seed.to_string()), ("SOFTRDMA_FAULTS", faults)],
        );
        let soak = wait_line(&mut p.iout, "SOAK");
        wait_line(&mut p.iout, "DONE");
        let ic = wait_line(&mut p.iout, "COUNTERS");
        p.ask_target_to_check();
        let check = wait_line(&mut p.tout, "CHECK");
        let counter = soak.split("counter=").nth(1).unwrap();
        assert_eq!(
            check,
            format!("CHECK sends={SOAK_SENDS} extra=0 counter={counter}"),
            "{soak}"
        );
        let tc = wait_line(&mut p.tout, "COUNTERS");
        assert!(p.init.wait().unwrap().success());
        assert!(p.target.wait().unwrap().success());
        let i = parse_counters(&ic).unwrap_or_else(|| panic!("path off? {ic}"));
        let t = parse_counters(&tc).unwrap_or_else(|| panic!("path off? {tc}"));
        assert!(i[0] > 1000 && i[1] > 1000 && i[3] == 1, "initiator {ic}");
        assert!(t[0] > 1000 && t[1] > 1000 && t[3] == 1, "target {tc}");
        println!("seed {seed}, {a} → {b}: {soak}; {ic}; {tc}");
    }
}
