//! Work requests of each test, receive bookkeeping, completion checks and
//! the watchdog every waiting loop uses.

use super::ctrl::Ctrl;
use super::params::{AtomicType, Conn, Op, FETCH_ADD, GRH_LEN};
use super::pattern::{self, Strict};
use super::setup::{atomic_init, bw_slots, Side};
use super::Error;
use softrdma::{RecvWr, SendFlags, SendWr, Wc, WcOpcode, WcStatus, WrOpcode};
use std::time::{Duration, Instant};

/// With no progress for this long, a waiting loop checks whether the peer
/// is still there and gives up.
pub const STALL: Duration = Duration::from_secs(10);

/// The immediate data of message `seq` of size index `k`: the size index
/// in the top byte (late messages of an earlier size are recognised), the
/// sequence number in the low 24 bits.
pub fn imm_tag(k: usize, seq: u64) -> u32 {
    ((k as u32 & 0xff) << 24) | (seq as u32 & 0x00ff_ffff)
}

/// The send work request of operation `idx` of QP `i` (message size
/// `size`, size index `k`); `signaled` asks for a completion.
pub fn send_wr(side: &Side, i: usize, k: usize, size: u64, idx: u64, signaled: bool) -> SendWr {
    let p = &side.params;
    let mr = &side.mrs[i];
    let remote = &side.remote[i];
    let mut wr = match p.test.op() {
        Op::Write | Op::Read => {
            let (slot_off, remote_off) = if p.test.is_lat() {
                // Latency: the peer's landing zone.
                (0, side.layout.recv_off as u64)
            } else {
                let slot = (idx % bw_slots(p, size)) * size;
                (slot, slot)
            };
            let opcode = if p.test.op() == Op::Write {
                WrOpcode::RdmaWrite
            } else {
                WrOpcode::RdmaRead
            };
            let mut wr = SendWr::new(idx, opcode);
            wr.sg_list = vec![mr.sge(slot_off as usize, size as u32)];
            wr.remote_addr = remote.va + remote_off;
            wr.rkey = remote.rkey;
            wr
        }
        Op::Send => {
            let mut wr = SendWr::new(idx, WrOpcode::SendWithImm);
            wr.sg_list = vec![mr.sge(0, size as u32)];
            wr.imm_data = imm_tag(k, idx);
            wr.ud = side.ud_dest(i);
            wr
        }
        Op::Atomic => {
            let slot = (idx % p.tx_depth as u64) as usize * 8;
            let (opcode, compare_add, swap) = match p.atomic {
                AtomicType::FetchAndAdd => (WrOpcode::AtomicFetchAndAdd, FETCH_ADD, 0),
                AtomicType::CmpAndSwap => {
                    let v = atomic_init(i).wrapping_add(idx);
                    (WrOpcode::AtomicCmpAndSwp, v, v.wrapping_add(1))
                }
            };
            let mut wr = SendWr::new(idx, opcode);
            wr.sg_list = vec![mr.sge(slot, 8)];
            wr.remote_addr = remote.va;
            wr.rkey = remote.rkey;
            wr.compare_add = compare_add;
            wr.swap = swap;
            wr
        }
    };
    if !signaled {
        wr.flags = SendFlags(0);
    }
    wr
}

/// The value atomic operation `idx` of QP `i` must have fetched.
pub fn atomic_expected(side: &Side, i: usize, idx: u64) -> u64 {
    match side.params.atomic {
        AtomicType::FetchAndAdd => atomic_init(i).wrapping_add(idx.wrapping_mul(FETCH_ADD)),
        AtomicType::CmpAndSwap => atomic_init(i).wrapping_add(idx),
    }
}

/// The counter's value after `n` operations on QP `i`.
pub fn atomic_final(side: &Side, i: usize, n: u64) -> u64 {
    atomic_expected(side, i, n)
}

/// Checks the fetched values of atomic operations `from..to` of QP `i`
/// (their result slots must not have been reused yet). Returns the first
/// wrong one.
pub fn check_fetched(side: &Side, i: usize, from: u64, to: u64) -> Option<String> {
    let depth = side.params.tx_depth as u64;
    for idx in from..to {
        let got = side.mrs[i]
            .atomic_u64((idx % depth) as usize * 8)
            .load(std::sync::atomic::Ordering::Acquire);
        let want = atomic_expected(side, i, idx);
        if got != want {
            return Some(format!(
                "QP {i}: atomic operation {idx} fetched {got:#018x}, expected {want:#018x}"
            ));
        }
    }
    None
}

/// Which QP a completion belongs to.
pub fn qp_of(side: &Side, wc: &Wc) -> Result<usize, Error> {
    side.index
        .get(&wc.qp_num.value())
        .copied()
        .ok_or_else(|| Error::Failed(format!("a completion for an unknown QP: {wc:?}")))
}

/// An error for a failed completion, with what it most likely means.
pub fn wc_error(side: &Side, i: usize, wc: &Wc) -> Error {
    let what = match wc.opcode {
        WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => "a receive".to_string(),
        _ => format!("operation {}", wc.wr_id),
    };
    let hint = match wc.status {
        WcStatus::RetryExcErr => " (the peer stopped answering: did it exit?)",
        WcStatus::RnrRetryExcErr => " (the peer posted no receive in time)",
        WcStatus::RemAccessErr => " (the peer refused the access: wrong key or bounds)",
        WcStatus::LocLenErr => " (a message longer than the receive buffer)",
        WcStatus::WrFlushErr => " (the QP had failed before)",
        _ => "",
    };
    let _ = side;
    Error::Failed(format!(
        "QP {i}: {what} completed with status {:?}{hint}",
        wc.status
    ))
}

/// Posted receives and what landed where (SEND tests).
pub struct Receives {
    /// Receives posted per QP (the next one's work request id).
    pub posted: Vec<u64>,
    /// Per QP, per slot: a complete message landed there during this size.
    pub landed: Vec<Vec<bool>>,
    /// Messages received per QP during this size.
    pub count: Vec<u64>,
    /// Messages of an earlier size that arrived late (UC/UD).
    pub stale: u64,
    /// The first problem seen in a received message.
    pub problem: Option<String>,
}

impl Receives {
    /// Posts the initial receives (`rx_depth` per QP).
    pub fn new(side: &Side) -> Result<Receives, Error> {
        let q = side.qps.len();
        let mut r = Receives {
            posted: vec![0; q],
            landed: vec![vec![false; side.layout.recv_slots]; q],
            count: vec![0; q],
            stale: 0,
            problem: None,
        };
        for i in 0..q {
            for _ in 0..side.params.rx_depth {
                r.post(side, i)?;
            }
        }
        Ok(r)
    }

    /// Posts one receive on QP `i`.
    pub fn post(&mut self, side: &Side, i: usize) -> Result<(), Error> {
        let l = &side.layout;
        let j = self.posted[i];
        let slot = (j % l.recv_slots as u64) as usize;
        side.qps[i].post_recv(RecvWr {
            wr_id: j,
            sg_list: vec![side.mrs[i].sge(l.recv_off + slot * l.recv_stride, l.recv_stride as u32)],
        })?;
        self.posted[i] += 1;
        Ok(())
    }

    /// Starts a size: forgets what landed and clears the receive buffers.
    pub fn reset(&mut self, side: &Side) {
        let l = &side.layout;
        for (i, mr) in side.mrs.iter().enumerate() {
            pattern::clear(mr, l.recv_off, l.recv_slots * l.recv_stride);
            self.landed[i].iter_mut().for_each(|s| *s = false);
            self.count[i] = 0;
        }
        self.stale = 0;
        self.problem = None;
    }

    /// Takes a receive completion of QP `i` for size index `k`: checks it,
    /// notes the slot and posts a new receive. Returns the message's
    /// sequence number, `None` for a stale message.
    pub fn take(
        &mut self,
        side: &Side,
        i: usize,
        k: usize,
        size: u64,
        wc: &Wc,
    ) -> Result<Option<u64>, Error> {
        if wc.status != WcStatus::Success {
            return Err(wc_error(side, i, wc));
        }
        self.post(side, i)?;
        if (wc.imm_or_inv >> 24) as usize != (k & 0xff) {
            self.stale += 1;
            return Ok(None);
        }
        let seq = (wc.imm_or_inv & 0x00ff_ffff) as u64;
        let grh = if side.params.conn == Conn::Ud {
            GRH_LEN
        } else {
            0
        };
        if wc.byte_len as u64 != size + grh && self.problem.is_none() {
            self.problem = Some(format!(
                "QP {i}: received a message of {} bytes, expected {}",
                wc.byte_len,
                size + grh
            ));
        }
        // RC delivers every message once and in order.
        let expect = self.count[i] & 0x00ff_ffff;
        if side.params.conn == Conn::Rc && seq != expect && self.problem.is_none() {
            self.problem = Some(format!(
                "QP {i}: received message {seq} where message {expect} was due (RC delivers in order, once)"
            ));
        }
        let slot = (wc.wr_id % side.layout.recv_slots as u64) as usize;
        self.landed[i][slot] = true;
        self.count[i] += 1;
        Ok(Some(seq))
    }

    /// Checks the contents of every slot a message landed in.
    pub fn verify(&self, side: &Side, size: u64) -> Result<(), String> {
        if let Some(p) = &self.problem {
            return Err(p.clone());
        }
        let l = &side.layout;
        let grh = if side.params.conn == Conn::Ud {
            GRH_LEN as usize
        } else {
            0
        };
        for (i, mr) in side.mrs.iter().enumerate() {
            for (slot, _) in self.landed[i].iter().enumerate().filter(|(_, l)| **l) {
                let off = l.recv_off + slot * l.recv_stride + grh;
                if let Err(m) =
                    pattern::check(mr, off, size as usize, side.peer_seed(i), 0, Strict::Exact)
                {
                    return Err(format!(
                        "QP {i}: byte {} of a received {size}-byte message is {:#04x}, expected {:#04x} ({} byte(s) wrong)",
                        m.at, m.got, m.want, m.count
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Watches a waiting loop: after [`STALL`] without progress it asks the
/// control connection whether the peer is still there.
pub struct Watchdog {
    last: Instant,
    next_check: Instant,
    spins: u32,
    yield_idle: bool,
    /// The device: packets it receives count as progress too.
    dev: softrdma::Device,
    /// Packets the device had received at the last look.
    rx_packets: u64,
    /// When to look again.
    next_look: Instant,
}

/// How often a waiting loop without completions looks at the device's
/// packet counter.
const LOOK: Duration = Duration::from_secs(1);

impl Watchdog {
    /// Starts watching a loop of `side` (which says whether idle rounds
    /// yield the CPU).
    pub fn new(side: &Side) -> Watchdog {
        let now = Instant::now();
        Watchdog {
            last: now,
            next_check: now + Duration::from_millis(2),
            spins: 0,
            yield_idle: side.yield_idle,
            dev: side.dev.clone(),
            rx_packets: side.dev.counters().rx_packets,
            next_look: now + LOOK,
        }
    }

    /// Something happened.
    pub fn progress(&mut self) {
        self.spins = 0;
        self.last = Instant::now();
    }

    /// Nothing happened this round. Every so often: is the peer gone
    /// (closed connection), or silent for [`STALL`]? `what` says what the
    /// loop waits for. `Ok(true)` when a control line is waiting.
    pub fn idle(&mut self, ctrl: &mut Ctrl, what: &str) -> Result<bool, Error> {
        self.spins = self.spins.wrapping_add(1);
        // Let the peer's or the progress thread run when they share our
        // cores: a round trip then costs a little more, but never a
        // scheduler time slice.
        if self.yield_idle && self.spins.is_multiple_of(4) {
            std::thread::yield_now();
        }
        if !self.spins.is_multiple_of(256) {
            return Ok(false);
        }
        let now = Instant::now();
        if now < self.next_check {
            return Ok(false);
        }
        self.next_check = now + Duration::from_millis(2);
        if ctrl.pending()? {
            return Ok(true);
        }
        if now >= self.next_look {
            // No completion for a while, but the transport may still be
            // moving: with CQ moderation (perftest's 100) a completion of
            // 8 MiB WRITEs comes every 800 MiB, which a host under heavy
            // load may take longer than STALL to move. Packets the device
            // received count as progress; RC's own timer and retry count
            // end a transfer that truly hangs.
            self.next_look = now + LOOK;
            let n = self.dev.counters().rx_packets;
            if n != self.rx_packets {
                self.rx_packets = n;
                self.last = now;
            }
        }
        if now.duration_since(self.last) > STALL {
            let c = self.dev.counters();
            let moved: Vec<String> = c
                .nonzero()
                .into_iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            return Err(Error::Failed(format!(
                "no progress for {} s while waiting for {what} (a lost packet on an unreliable transport, or the peer hangs); device counters: {}",
                STALL.as_secs(),
                moved.join(", ")
            )));
        }
        Ok(false)
    }
}
