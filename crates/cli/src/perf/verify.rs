//! The checks at the end of each size on this side (`verify_local`: the
//! server checks WRITEs and SENDs that landed and the atomic counters, the
//! client what READs brought back and, in the latency tests, what the
//! server sent), and the preparation around them.

use super::ops::{self, Receives};
use super::params::{Conn, Op, Test};
use super::pattern::{self, Strict};
use super::setup::{bw_slots, Side};

/// The verdict of a size or a run: `off` (`--no-verify`), `ok`, `failed`.
pub(super) fn verdict(verify: bool, failures: &[String]) -> &'static str {
    if !verify {
        "off"
    } else if failures.is_empty() {
        "ok"
    } else {
        "failed"
    }
}

/// Checks what landed on this side at the end of size `k` (`done`:
/// operations per QP). Returns the failures.
pub(super) fn verify_local(
    side: &Side,
    k: usize,
    done: &[u64],
    recvs: Option<&Receives>,
) -> Vec<String> {
    let p = &side.params;
    if !p.verify {
        return Vec::new();
    }
    let size = p.sizes[k].size;
    let mut bad = Vec::new();
    let mut check = |i: usize, off: usize, len: usize, strict: Strict| {
        if len == 0 {
            return;
        }
        if let Err(m) = pattern::check(&side.mrs[i], off, len, side.peer_seed(i), 0, strict) {
            bad.push(format!(
                "QP {i}, {size}-byte messages: byte {} of the {} bytes that {} is {:#04x}, expected {:#04x} ({} byte(s) wrong)",
                m.at,
                len,
                match p.test.op() {
                    Op::Read => "the READs brought back",
                    _ => "the peer wrote",
                },
                m.got,
                m.want,
                m.count
            ));
        }
    };
    match (p.test, side.server) {
        (Test::WriteBw, true) => {
            let strict = if p.conn == Conn::Rc {
                Strict::Exact
            } else {
                Strict::Landed
            };
            for (i, n) in done.iter().enumerate() {
                let slots = (*n).min(bw_slots(p, size));
                check(i, 0, (slots * size) as usize, strict);
            }
        }
        (Test::ReadBw, false) => {
            for (i, n) in done.iter().enumerate() {
                let slots = (*n).min(bw_slots(p, size));
                check(i, 0, (slots * size) as usize, Strict::Exact);
            }
        }
        (Test::ReadLat, false) if done[0] > 0 => check(0, 0, size as usize, Strict::Exact),
        (Test::WriteLat, _) if done[0] > 0 => {
            check(0, side.layout.recv_off, size as usize - 1, Strict::Exact)
        }
        (Test::SendBw, true) | (Test::SendLat, _) => {
            if let Some(r) = recvs {
                if let Err(e) = r.verify(side, size) {
                    bad.push(e);
                }
            }
        }
        (Test::AtomicBw | Test::AtomicLat, true) => {
            for (i, n) in done.iter().enumerate() {
                let got = side.mrs[i]
                    .atomic_u64(0)
                    .load(std::sync::atomic::Ordering::SeqCst);
                let want = ops::atomic_final(side, i, *n);
                if got != want {
                    bad.push(format!(
                        "QP {i}: the counter is {got:#018x} after {n} {}, expected {want:#018x}",
                        p.atomic.name()
                    ));
                }
            }
        }
        _ => {}
    }
    bad
}

/// Clears what the peer (or READs) will write during size `k`.
pub(super) fn prepare(side: &Side, k: usize, recvs: Option<&mut Receives>) {
    let p = &side.params;
    let size = p.sizes[k].size;
    match (p.test, side.server) {
        (Test::WriteBw, true) | (Test::ReadBw, false) => {
            for mr in &side.mrs {
                pattern::clear(mr, 0, (bw_slots(p, size) * size) as usize);
            }
        }
        (Test::ReadLat, false) => pattern::clear(&side.mrs[0], 0, size as usize),
        (Test::WriteLat, _) => pattern::clear(&side.mrs[0], side.layout.recv_off, size as usize),
        _ => {}
    }
    if let Some(r) = recvs {
        r.reset(side);
    }
}

/// Puts back the pattern byte a WRITE ping-pong used as its round number.
pub(super) fn restore(side: &Side, k: usize) {
    if side.params.test == Test::WriteLat {
        let at = side.params.sizes[k].size as usize - 1;
        pattern::write_pattern(&side.mrs[0], side.seed(0), at, 1);
    }
}
