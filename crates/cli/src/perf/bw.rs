//! Bandwidth tests: the client keeps `-t` operations outstanding on every
//! QP and measures; the server serves (WRITE/READ/atomic: waits, its
//! progress thread does the work; SEND: keeps receives posted).

use super::ctrl::Ctrl;
use super::ops::{self, Receives, Watchdog};
use super::params::{Conn, Op};
use super::report::{bw_figures, BwFigures, Progress};
use super::setup::Side;
use super::Error;
use softrdma::{WcOpcode, WcStatus, EMPTY_WC};
use std::time::{Duration, Instant};

/// What the client measured for one size.
pub struct BwRun {
    /// The figures.
    pub figures: BwFigures,
    /// Operations completed per QP (sent to the server).
    pub done: Vec<u64>,
    /// The first wrong fetched atomic value, if any.
    pub problem: Option<String>,
}

/// Runs size index `k` as the client.
pub fn client(
    side: &Side,
    ctrl: &mut Ctrl,
    k: usize,
    progress: &mut Progress,
) -> Result<BwRun, Error> {
    let p = &side.params;
    let run = p.sizes[k];
    let size = run.size;
    let q = side.qps.len();
    let depth = p.tx_depth as u64;
    let cq_mod = (p.cq_mod as u64).clamp(1, depth);
    let duration = p.duration_ms.map(Duration::from_millis);
    let atomic_check = p.test.op() == Op::Atomic && p.verify;

    let mut posted = vec![0u64; q];
    let mut done = vec![0u64; q];
    let mut checked = vec![0u64; q];
    let mut target = vec![
        if duration.is_some() {
            u64::MAX
        } else {
            run.iters
        };
        q
    ];
    let mut problem = None;
    let mut wcs = [EMPTY_WC; 64];
    let mut batch = Vec::with_capacity(depth as usize);
    let mut samples: Vec<(f64, u64)> = Vec::with_capacity(1024);
    let mut total_done = 0u64;
    let mut dog = Watchdog::new(side);
    let start = Instant::now();
    let deadline = duration.map(|d| start + d);
    let mut time_up = false;
    samples.push((0.0, 0));
    loop {
        if let Some(d) = deadline {
            if !time_up && Instant::now() >= d {
                time_up = true;
                // Finish at the next signaled operation of each QP.
                for i in 0..q {
                    target[i] = posted[i].div_ceil(cq_mod) * cq_mod;
                }
            }
        }
        for i in 0..q {
            let room = depth - (posted[i] - done[i]);
            let n = (target[i] - posted[i]).min(room);
            if n == 0 {
                continue;
            }
            batch.clear();
            for idx in posted[i]..posted[i] + n {
                let signaled = (idx + 1) % cq_mod == 0 || idx + 1 == target[i];
                batch.push(ops::send_wr(side, i, k, size, idx, signaled));
            }
            side.qps[i]
                .post_send_batch(batch.drain(..))
                .map_err(|(j, e)| {
                    Error::Failed(format!(
                        "QP {i}: posting operation {}: {e}",
                        posted[i] + j as u64
                    ))
                })?;
            posted[i] += n;
        }
        if (0..q).all(|i| done[i] == target[i]) {
            break;
        }
        let n = side.cq.poll(&mut wcs)?;
        if n > 0 {
            for wc in &wcs[..n] {
                let i = ops::qp_of(side, wc)?;
                if wc.status != WcStatus::Success {
                    return Err(ops::wc_error(side, i, wc));
                }
                if matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm) {
                    continue;
                }
                let now_done = wc.wr_id + 1;
                total_done += now_done - done[i];
                done[i] = now_done;
                if atomic_check && problem.is_none() {
                    problem = ops::check_fetched(side, i, checked[i], now_done);
                }
                checked[i] = now_done;
            }
            samples.push((start.elapsed().as_secs_f64(), total_done));
            dog.progress();
        } else if dog.idle(ctrl, "completions")? {
            let line = ctrl.recv(Some(Duration::from_secs(1)))?;
            return Err(Error::Failed(format!(
                "the server interrupted the run: {line}"
            )));
        }
        progress.tick(
            total_done,
            duration.is_none().then_some(run.iters * q as u64),
            duration.map(|d| d.as_secs_f64()),
        );
    }
    let iters = done.iter().copied().min().unwrap_or(0);
    let window = (total_done / 16).max(depth * q as u64);
    Ok(BwRun {
        figures: bw_figures(size, iters, &samples, window),
        done,
        problem,
    })
}

/// Serves size index `k` of a bandwidth test until the client's END;
/// returns the END line's operation counts and, for SEND, what arrived.
pub fn server(
    side: &Side,
    ctrl: &mut Ctrl,
    k: usize,
    recvs: Option<&mut Receives>,
) -> Result<Vec<u64>, Error> {
    let Some(r) = recvs else {
        // WRITE, READ, atomics: the device does everything.
        let line = ctrl.expect("END", None)?;
        return super::ctrl::parse_end(&line, k, side.qps.len());
    };
    let p = &side.params;
    let size = p.sizes[k].size;
    let q = side.qps.len();
    let mut wcs = [EMPTY_WC; 64];
    let mut dog = Watchdog::new(side);
    let mut end: Option<Vec<u64>> = None;
    let mut end_at = Instant::now();
    let mut last_rx = Instant::now();
    loop {
        let n = side.cq.poll(&mut wcs)?;
        for wc in &wcs[..n] {
            let i = ops::qp_of(side, wc)?;
            match wc.opcode {
                WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => {
                    r.take(side, i, k, size, wc)?;
                }
                _ if wc.status != WcStatus::Success => return Err(ops::wc_error(side, i, wc)),
                _ => {}
            }
        }
        if n > 0 {
            dog.progress();
            last_rx = Instant::now();
        }
        if let Some(counts) = &end {
            let all = (0..q).all(|i| r.count[i] >= counts[i]);
            if all {
                break;
            }
            // Unreliable transports lose messages: stop once nothing came
            // for a while after the client finished.
            let quiet = last_rx.max(end_at).elapsed();
            if p.conn != Conn::Rc && quiet > Duration::from_millis(200) {
                break;
            }
            if p.conn == Conn::Rc && quiet > ops::STALL {
                return Err(Error::Failed(format!(
                    "the client sent {:?} messages per QP, {:?} arrived",
                    counts, r.count
                )));
            }
            continue;
        }
        // RC with a known count: everything is here, the END follows.
        let all_in = p.duration_ms.is_none()
            && p.conn == Conn::Rc
            && (0..q).all(|i| r.count[i] >= p.sizes[k].iters);
        if all_in || (n == 0 && dog.idle(ctrl, "messages")?) {
            let line = ctrl.expect("END", Some(super::ctrl::REPLY_TIMEOUT))?;
            end = Some(super::ctrl::parse_end(&line, k, q)?);
            end_at = Instant::now();
        }
    }
    Ok(end.unwrap_or_default())
}
