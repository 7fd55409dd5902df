//! Latency tests: one operation at a time.
//!
//! - `write-lat`: ping-pong of RDMA WRITEs. Each side spins on the last byte
//!   of its landing zone until the peer's WRITE of this round has landed
//!   (the byte carries the round number), then writes back. The client
//!   times each round trip and reports half of it.
//! - `send-lat`: ping-pong of SENDs; each side polls for the receive.
//! - `read-lat`, `atomic-lat`: the client posts one READ/atomic, waits for
//!   its completion, and times it whole. The server's device answers.

use super::ctrl::{Ctrl, REPLY_TIMEOUT};
use super::ops::{self, Receives, Watchdog};
use super::params::{Op, Test};
use super::report::Progress;
use super::setup::Side;
use super::Error;
use softrdma::{WcOpcode, WcStatus, EMPTY_WC};
use std::time::{Duration, Instant};

/// What one side measured for a size.
pub struct LatRun {
    /// Time of each operation (round trip), in nanoseconds.
    pub samples_ns: Vec<u64>,
    /// Operations done.
    pub done: u64,
    /// The first problem seen (wrong fetched value, message out of order).
    pub problem: Option<String>,
}

/// The round-number byte of round `idx` (never zero: zero is "nothing
/// landed yet").
fn flag(idx: u64) -> u8 {
    (idx % 255) as u8 + 1
}

/// Reaps send completions; returns how many, or the error of a failed one.
fn reap(
    side: &Side,
    wcs: &mut [softrdma::Wc],
    recvs: Option<&mut Receives>,
    k: usize,
) -> Result<(usize, Vec<u64>), Error> {
    let n = side.cq.poll(wcs)?;
    let mut sends = 0;
    let mut got = Vec::new();
    let mut recvs = recvs;
    for wc in &wcs[..n] {
        let i = ops::qp_of(side, wc)?;
        match wc.opcode {
            WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => {
                let r = recvs.as_deref_mut().ok_or_else(|| {
                    Error::Failed(format!("an unexpected receive completion: {wc:?}"))
                })?;
                let size = side.params.sizes[k].size;
                if let Some(seq) = r.take(side, i, k, size, wc)? {
                    got.push(seq);
                }
            }
            _ => {
                if wc.status != WcStatus::Success {
                    return Err(ops::wc_error(side, i, wc));
                }
                sends += 1;
            }
        }
    }
    Ok((sends, got))
}

/// Whether the run should stop before round `idx`.
fn finished(side: &Side, k: usize, idx: u64, start: Instant) -> bool {
    match side.params.duration_ms {
        Some(ms) => start.elapsed() >= Duration::from_millis(ms),
        None => idx >= side.params.sizes[k].iters,
    }
}

/// Runs size index `k` as the client.
pub fn client(
    side: &Side,
    ctrl: &mut Ctrl,
    k: usize,
    mut recvs: Option<&mut Receives>,
    progress: &mut Progress,
) -> Result<LatRun, Error> {
    let p = &side.params;
    let size = p.sizes[k].size;
    let mr = &side.mrs[0];
    let qp = &side.qps[0];
    let flag_at = size as usize - 1;
    let landing = side.layout.recv_off + flag_at;
    let total = p.duration_ms.is_none().then_some(p.sizes[k].iters);
    let secs = p.duration_ms.map(|m| m as f64 / 1000.0);
    let mut samples = Vec::with_capacity(total.unwrap_or(1 << 16).min(1 << 24) as usize);
    let mut sq = SendQueue::new();
    let mut problem = None;
    let mut dog = Watchdog::new(side);
    let start = Instant::now();
    let mut idx = 0u64;
    while !finished(side, k, idx, start) {
        before_post(side, ctrl, k, idx, &mut sq, recvs.as_deref_mut(), &mut dog)?;
        let t0 = Instant::now();
        qp.post_send(ops::send_wr(side, 0, k, size, idx, true))?;
        sq.outstanding += 1;
        // Wait for this round's answer.
        loop {
            if p.test == Test::WriteLat && mr.load_u8(landing) == flag(idx) {
                break;
            }
            let before = sq.outstanding;
            let (s, got) = reap(side, &mut sq.wcs, recvs.as_deref_mut(), k)?;
            sq.outstanding -= s as u64;
            let mut answered = false;
            match p.test.op() {
                Op::Send => {
                    for seq in got {
                        if seq == idx & 0x00ff_ffff {
                            answered = true;
                        } else if problem.is_none() {
                            problem =
                                Some(format!("the server's answer {seq} arrived in round {idx}"));
                        }
                    }
                }
                Op::Read | Op::Atomic => answered = sq.outstanding == 0,
                Op::Write => {}
            }
            if answered {
                break;
            }
            if s > 0 || sq.outstanding != before {
                dog.progress();
            } else if dog.idle(ctrl, "the server's answer")? {
                return Err(interrupted(ctrl));
            }
        }
        samples.push(t0.elapsed().as_nanos() as u64);
        if p.test.op() == Op::Atomic && p.verify && problem.is_none() {
            problem = ops::check_fetched(side, 0, idx, idx + 1);
        }
        dog.progress();
        idx += 1;
        progress.tick(idx, total, secs);
    }
    drain(side, ctrl, k, &mut sq.wcs, &mut sq.outstanding, recvs, None)?;
    Ok(LatRun {
        samples_ns: samples,
        done: idx,
        problem,
    })
}

/// Waits for the send completions still due. With `end`, the peer's END
/// line may arrive meanwhile (the peer finished first: its last answer has
/// landed here, and the acknowledgment of ours is still on its way); it is
/// kept there. Any other line interrupts.
fn drain(
    side: &Side,
    ctrl: &mut Ctrl,
    k: usize,
    wcs: &mut [softrdma::Wc],
    outstanding: &mut u64,
    mut recvs: Option<&mut Receives>,
    mut end: Option<&mut Option<String>>,
) -> Result<(), Error> {
    let mut dog = Watchdog::new(side);
    while *outstanding > 0 {
        let (s, _) = reap(side, wcs, recvs.as_deref_mut(), k)?;
        *outstanding -= s as u64;
        if s > 0 {
            dog.progress();
            continue;
        }
        if !dog.idle(ctrl, "send completions")? {
            continue;
        }
        match end.as_deref_mut() {
            Some(slot) if slot.is_none() => {
                let line = ctrl.recv(Some(REPLY_TIMEOUT))?;
                if line.split_whitespace().next() != Some("END") {
                    return Err(Error::Failed(format!(
                        "the peer interrupted the run: {line}"
                    )));
                }
                *slot = Some(line);
            }
            _ => return Err(interrupted(ctrl)),
        }
    }
    Ok(())
}

/// The send side of a ping-pong: a completion buffer and the operations
/// still outstanding.
struct SendQueue {
    wcs: [softrdma::Wc; 16],
    outstanding: u64,
}

impl SendQueue {
    fn new() -> Self {
        SendQueue {
            wcs: [EMPTY_WC; 16],
            outstanding: 0,
        }
    }
}

/// Before posting round `idx`: the flag byte a WRITE ping-pong carries,
/// then room in the send queue (completions reaped until fewer than its
/// depth are outstanding).
fn before_post(
    side: &Side,
    ctrl: &mut Ctrl,
    k: usize,
    idx: u64,
    sq: &mut SendQueue,
    mut recvs: Option<&mut Receives>,
    dog: &mut Watchdog,
) -> Result<(), Error> {
    let p = &side.params;
    if p.test == Test::WriteLat {
        let flag_at = p.sizes[k].size as usize - 1;
        side.mrs[0].write(flag_at, &[flag(idx)]);
    }
    let depth = p.tx_depth.max(2) as u64;
    while sq.outstanding >= depth {
        let (s, _) = reap(side, &mut sq.wcs, recvs.as_deref_mut(), k)?;
        sq.outstanding -= s as u64;
        if s == 0 && dog.idle(ctrl, "send completions")? {
            return Err(interrupted(ctrl));
        }
    }
    Ok(())
}

fn interrupted(ctrl: &mut Ctrl) -> Error {
    match ctrl.recv(Some(Duration::from_secs(1))) {
        Ok(line) => Error::Failed(format!("the peer interrupted the run: {line}")),
        Err(e) => e,
    }
}

/// Serves size index `k` of a latency test; returns the END line's counts
/// and the first problem seen.
pub fn server(
    side: &Side,
    ctrl: &mut Ctrl,
    k: usize,
    mut recvs: Option<&mut Receives>,
) -> Result<(Vec<u64>, Option<String>), Error> {
    let p = &side.params;
    if !matches!(p.test, Test::WriteLat | Test::SendLat) {
        // READ and atomics: the device answers.
        let line = ctrl.expect("END", None)?;
        return Ok((super::ctrl::parse_end(&line, k, 1)?, None));
    }
    let size = p.sizes[k].size;
    let mr = &side.mrs[0];
    let qp = &side.qps[0];
    let flag_at = size as usize - 1;
    let landing = side.layout.recv_off + flag_at;
    let mut sq = SendQueue::new();
    let mut problem = None;
    let mut dog = Watchdog::new(side);
    let mut end = None;
    let mut idx = 0u64;
    'rounds: loop {
        if p.duration_ms.is_none() && idx >= p.sizes[k].iters {
            break;
        }
        // Wait for the client's message of this round.
        loop {
            if p.test == Test::WriteLat && mr.load_u8(landing) == flag(idx) {
                break;
            }
            let (s, got) = reap(side, &mut sq.wcs, recvs.as_deref_mut(), k)?;
            sq.outstanding -= s as u64;
            let mut arrived = false;
            for seq in got {
                if seq == idx & 0x00ff_ffff {
                    arrived = true;
                } else if problem.is_none() {
                    problem = Some(format!("the client's message {seq} arrived in round {idx}"));
                }
            }
            if arrived {
                break;
            }
            if s > 0 {
                dog.progress();
            } else if dog.idle(ctrl, "the client's next message")? {
                let line = ctrl.expect("END", Some(REPLY_TIMEOUT))?;
                end = Some(super::ctrl::parse_end(&line, k, 1)?);
                break 'rounds;
            }
        }
        dog.progress();
        before_post(side, ctrl, k, idx, &mut sq, recvs.as_deref_mut(), &mut dog)?;
        qp.post_send(ops::send_wr(side, 0, k, size, idx, true))?;
        sq.outstanding += 1;
        idx += 1;
    }
    let mut end_line = None;
    if end.is_none() {
        drain(
            side,
            ctrl,
            k,
            &mut sq.wcs,
            &mut sq.outstanding,
            recvs,
            Some(&mut end_line),
        )?;
    } else {
        drain(side, ctrl, k, &mut sq.wcs, &mut sq.outstanding, recvs, None)?;
    }
    let counts = match (end, end_line) {
        (Some(c), _) => c,
        (None, Some(line)) => super::ctrl::parse_end(&line, k, 1)?,
        (None, None) => {
            let line = ctrl.expect("END", Some(REPLY_TIMEOUT))?;
            super::ctrl::parse_end(&line, k, 1)?
        }
    };
    if counts[0] != idx && problem.is_none() {
        problem = Some(format!(
            "the client counted {} round trips, the server {idx}",
            counts[0]
        ));
    }
    Ok((counts, problem))
}
