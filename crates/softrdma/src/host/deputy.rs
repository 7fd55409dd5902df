//! Deputy receive: members take the device's datagrams from its socket
//! themselves while the device process is not being run.
//!
//! A NIC delivers whether or not any task is scheduled; the device
//! process is a task, and a loaded machine may leave it off the CPU for
//! seconds (8.6 s measured with 16 busy-polling MPI ranks on 2 CPUs —
//! UCX's whole RC retry budget) while the members, which poll, keep
//! running. So the device process publishes a loop counter (the *beat*)
//! in a page of shared memory every member maps (given at `Welcome`),
//! and a member whose ring is empty looks, at most every [`CHECK_MS`]
//! (one coarse clock read and one atomic load per poll otherwise),
//! whether datagrams have waited in the socket for [`LATE_MS`] while the
//! beat stood still. Then it is a *deputy* until the beat moves: under a
//! lock in the page (which the device process takes around each of its
//! receive batches too: one process consumes the socket at a time) it
//! receives from its duplicate of the device socket, handles the
//! datagrams for its own QPs at once (GRO trains split, each datagram
//! decided alone) and puts every other one into the page's *pool*: a
//! fixed set of slots, each a datagram with its source and destination
//! QPN. Every member claims its own datagrams from the pool (in the order
//! they were put); the device process, when it runs again, routes what
//! is left (QP 1's MADs, unknown QPNs, members that sleep) as it routes
//! its socket's datagrams. A full pool, or a datagram larger than a slot,
//! is loss (counted in the page).
//!
//! The page is shared only with processes of this user that passed the
//! handshake (it travels with the socket's duplicate), and its contents
//! are checked like a ring's: a slot's lengths are bounded.

use crate::sync::Mutex;
use softrdma_io::{RecvMeta as IoMeta, Shm, UdpSocket};
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// How often a member whose ring is empty looks at the device process.
pub(crate) const CHECK_MS: u64 = 4;
/// Datagrams waiting this long in the socket while the device process's
/// beat stands still make the members its deputies (the device process
/// normally takes them within a millisecond; RC retry timeouts are ≥ 1 s
/// in UCX and softrdma's defaults).
pub(crate) const LATE_MS: u64 = 40;
/// A receive lock held this long is taken over (its holder was stopped
/// or died mid-batch; each datagram is still consumed by one process).
pub(crate) const STEAL_MS: u32 = 20;

const MAGIC: u64 = u64::from_le_bytes(*b"SRDMDEP1");
const OFF_MAGIC: usize = 0;
const OFF_BEAT: usize = 64;
const OFF_LOCK: usize = 128;
const OFF_POOLED: usize = 192;
const OFF_SEQ: usize = 256;
const OFF_LOST: usize = 320;
const OFF_PUT: usize = 384;
const OFF_TAKEN: usize = 448;
/// The slots' states: one word each, side by side (a member looking for
/// its datagrams reads 32 KiB, not a line of every slot).
const OFF_STATES: usize = 4096;
/// Slots of the pool.
pub(crate) const SLOTS: usize = 4096;
const HEADER: usize = OFF_STATES + SLOTS * 8;
/// Bytes of a slot: sequence, length, source header, datagram (the
/// largest RoCE datagram: a 4096-byte payload and its headers).
const SLOT: usize = 4352;
const SLOT_SEQ: usize = 0;
const SLOT_LEN: usize = 8;
const SLOT_HDR: usize = 16;
const SLOT_DATA: usize = SLOT_HDR + super::daemon::REC_HDR;
/// Largest datagram a slot holds.
pub(crate) const SLOT_MAX: usize = SLOT - SLOT_DATA;
/// Room a deputy leaves in the pool before it receives a batch (each of
/// its buffers may be a GRO train of up to 64 datagrams); with less it
/// leaves the datagrams in the socket (whose buffer is 64 MiB), where
/// the device process or their owners find them, rather than lose them.
const ROOM: usize = BATCH * 64;
/// Slot states: free, being written or read, full (destination QPN in
/// the bits above 8).
const FREE: u64 = 0;
const BUSY: u64 = 1;
const FULL: u64 = 2;
/// Bytes of the page.
const PAGE_LEN: usize = HEADER + SLOTS * SLOT;

/// The page shared by the device process and its members.
#[derive(Debug)]
pub(crate) struct Page {
    shm: Shm,
}

/// The receive lock, held (see [`Page::try_lock`]).
#[derive(Debug)]
pub(crate) struct Held(u64);

impl Page {
    /// The device process's new page.
    pub fn create() -> io::Result<Page> {
        let shm = Shm::create("softrdma-deputy", PAGE_LEN)?;
        shm.u64_at(OFF_MAGIC).store(MAGIC, Ordering::Release);
        Ok(Page { shm })
    }

    /// A member's view of the page the device process gave it.
    pub fn attach(fd: OwnedFd) -> io::Result<Page> {
        let shm = Shm::map(fd)?;
        if shm.len() != PAGE_LEN || shm.u64_at(OFF_MAGIC).load(Ordering::Acquire) != MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not a softrdma deputy page",
            ));
        }
        Ok(Page { shm })
    }

    /// Its descriptor (for a new member).
    pub fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.shm.as_fd()
    }

    /// The device process ran a loop.
    pub fn tick(&self) {
        self.shm.u64_at(OFF_BEAT).fetch_add(1, Ordering::Relaxed);
    }

    /// The device process's loop counter.
    pub fn beat(&self) -> u64 {
        self.shm.u64_at(OFF_BEAT).load(Ordering::Relaxed)
    }

    /// Takes the receive lock for `holder` (a pid) at `now_ms` (coarse
    /// clock), or takes it over from a holder that kept it for
    /// [`STEAL_MS`]. `None`: another process receives now.
    pub fn try_lock(&self, holder: u32, now_ms: u64) -> Option<Held> {
        let lock = self.shm.u64_at(OFF_LOCK);
        let cur = lock.load(Ordering::Relaxed);
        if cur != 0 && (now_ms as u32).wrapping_sub(cur as u32) < STEAL_MS {
            return None;
        }
        // (Never 0: a holder's pid is not 0.)
        let mine = u64::from(holder.max(1)) << 32 | u64::from(now_ms as u32);
        lock.compare_exchange(cur, mine, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Held(mine))
    }

    /// Lets go of the lock (unless it was taken over meanwhile).
    pub fn unlock(&self, held: Held) {
        let _ = self.shm.u64_at(OFF_LOCK).compare_exchange(
            held.0,
            0,
            Ordering::Release,
            Ordering::Relaxed,
        );
    }

    /// Datagrams in the pool.
    pub fn pooled(&self) -> u64 {
        self.shm.u64_at(OFF_POOLED).load(Ordering::Acquire)
    }

    /// (Datagrams deputies took from the socket, put into the pool, lost.)
    pub fn counts(&self) -> (u64, u64, u64) {
        let c = |o| self.shm.u64_at(o).load(Ordering::Relaxed);
        (c(OFF_TAKEN), c(OFF_PUT), c(OFF_LOST))
    }

    /// A deputy took `n` datagrams from the socket.
    pub fn count_taken(&self, n: u64) {
        self.shm.u64_at(OFF_TAKEN).fetch_add(n, Ordering::Relaxed);
    }

    fn slot(i: usize) -> usize {
        HEADER + i * SLOT
    }

    fn state(&self, i: usize) -> &AtomicU64 {
        self.shm.u64_at(OFF_STATES + 8 * i)
    }

    /// Whether the pool has room for a deputy's batch.
    pub fn has_room(&self) -> bool {
        (self.pooled() as usize).saturating_add(ROOM) <= SLOTS
    }

    /// Puts a datagram for `qpn` into the pool (`hdr`: its source, as a
    /// ring record says it). `false`: no room, or too large (counted).
    pub fn put(&self, qpn: u32, hdr: &[u8], dgram: &[u8]) -> bool {
        if dgram.len() > SLOT_MAX || hdr.len() != SLOT_DATA - SLOT_HDR {
            self.shm.u64_at(OFF_LOST).fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let seq = self.shm.u64_at(OFF_SEQ).fetch_add(1, Ordering::Relaxed);
        for k in 0..SLOTS {
            let i = (seq as usize + k) % SLOTS;
            let off = Self::slot(i);
            let state = self.state(i);
            if state.load(Ordering::Relaxed) != FREE
                || state
                    .compare_exchange(FREE, BUSY, Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            self.shm
                .u64_at(off + SLOT_SEQ)
                .store(seq, Ordering::Relaxed);
            self.shm
                .u64_at(off + SLOT_LEN)
                .store(dgram.len() as u64, Ordering::Relaxed);
            self.shm.write(off + SLOT_HDR, hdr);
            self.shm.write(off + SLOT_DATA, dgram);
            state.store(FULL | u64::from(qpn) << 8, Ordering::Release);
            self.shm.u64_at(OFF_POOLED).fetch_add(1, Ordering::Release);
            self.shm.u64_at(OFF_PUT).fetch_add(1, Ordering::Relaxed);
            return true;
        }
        self.shm.u64_at(OFF_LOST).fetch_add(1, Ordering::Relaxed);
        false
    }

    /// Claims up to `max` datagrams of the pool whose destination QPN
    /// `mine` accepts, and hands each to `f` (source header, datagram) in
    /// the order they were put. Returns how many.
    pub fn take(
        &self,
        max: usize,
        mine: impl Fn(u32) -> bool,
        scratch: &mut Vec<u8>,
        mut f: impl FnMut(&[u8], &[u8]),
    ) -> usize {
        if self.pooled() == 0 {
            return 0;
        }
        let mut claimed: Vec<(u64, usize)> = Vec::new();
        for i in 0..SLOTS {
            if claimed.len() >= max {
                break;
            }
            let off = Self::slot(i);
            let state = self.state(i);
            let s = state.load(Ordering::Relaxed);
            if s & 0xff != FULL || !mine((s >> 8) as u32) {
                continue;
            }
            if state
                .compare_exchange(s, BUSY, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                claimed.push((self.shm.u64_at(off + SLOT_SEQ).load(Ordering::Relaxed), i));
            }
        }
        claimed.sort_unstable();
        for &(_, i) in &claimed {
            let off = Self::slot(i);
            let len =
                (self.shm.u64_at(off + SLOT_LEN).load(Ordering::Relaxed) as usize).min(SLOT_MAX);
            scratch.resize(SLOT - SLOT_HDR, 0);
            let n = SLOT_DATA - SLOT_HDR + len;
            self.shm.read(off + SLOT_HDR, &mut scratch[..n]);
            self.state(i).store(FREE, Ordering::Release);
            self.shm.u64_at(OFF_POOLED).fetch_sub(1, Ordering::AcqRel);
            let (hdr, dgram) = scratch[..n].split_at(SLOT_DATA - SLOT_HDR);
            f(hdr, dgram);
        }
        claimed.len()
    }
}

/// Whether a member should receive for the device process (sans-I/O).
#[derive(Debug, Default)]
pub(crate) struct Lateness {
    beat: u64,
    /// (Coarse ms) since when datagrams were seen waiting at this beat.
    since: Option<u64>,
    late: bool,
}

impl Lateness {
    /// Looks at `now_ms` with the device process's beat `beat`;
    /// `pending` says whether datagrams wait in the socket (asked only
    /// when the beat stood still since the last look). Whether the
    /// member is a deputy: datagrams waited for [`LATE_MS`] with the beat
    /// still, and it stays one until the beat moves.
    pub fn check(&mut self, now_ms: u64, beat: u64, pending: impl FnOnce() -> bool) -> bool {
        if beat != self.beat {
            *self = Lateness {
                beat,
                since: None,
                late: false,
            };
            return false;
        }
        if self.late {
            return true;
        }
        if !pending() {
            self.since = None;
            return false;
        }
        let since = *self.since.get_or_insert(now_ms);
        self.late = now_ms.saturating_sub(since) >= LATE_MS;
        self.late
    }
}

/// `Deputy::state` while the member is a deputy (otherwise: the coarse
/// ms of its last look).
const ACTIVE: u64 = u64::MAX;
/// Receive buffers of a deputy (each a GRO train).
const BATCH: usize = 8;

/// A member's side of deputy receive.
#[derive(Debug)]
pub(crate) struct Deputy {
    page: Page,
    state: AtomicU64,
    inner: Mutex<Inner>,
    /// The QP numbers this member holds (claimed from the device
    /// process).
    qpns: Mutex<Vec<u32>>,
    pid: u32,
}

#[derive(Debug, Default)]
struct Inner {
    lateness: Lateness,
    bufs: Vec<Vec<u8>>,
    meta: Vec<IoMeta>,
    mine: Vec<u32>,
    scratch: Vec<u8>,
}

impl Deputy {
    pub fn new(page: Page) -> Deputy {
        Deputy {
            page,
            state: AtomicU64::new(0),
            inner: Mutex::new(Inner::default()),
            qpns: Mutex::new(Vec::new()),
            pid: std::process::id(),
        }
    }

    /// This member holds `qpn` (`false`: no longer).
    pub fn own(&self, qpn: u32, held: bool) {
        let mut q = self.qpns.lock();
        q.retain(|&x| x != qpn);
        if held {
            q.push(qpn);
        }
    }

    /// Whether [`Self::receive`] has something to do: the member is a
    /// deputy, or its next look is due. One coarse clock read and one
    /// atomic load.
    #[inline]
    pub fn due(&self) -> bool {
        let s = self.state.load(Ordering::Relaxed);
        s == ACTIVE || softrdma_io::host::coarse_ms().wrapping_sub(s) >= CHECK_MS
    }

    /// Whether the member is a deputy now.
    pub fn active(&self) -> bool {
        self.state.load(Ordering::Relaxed) == ACTIVE
    }

    /// Looks at the device process; while it is late, receives from
    /// `socket` (the member's duplicate of the device socket), handing
    /// this member's datagrams to `deliver` (source, TOS, TTL, datagram)
    /// and pooling the others; claims this member's datagrams from the
    /// pool. Returns how many it delivered.
    pub fn receive(
        &self,
        socket: &UdpSocket,
        max: usize,
        mut deliver: impl FnMut(SocketAddr, u8, u8, &[u8]),
    ) -> usize {
        let now = softrdma_io::host::coarse_ms();
        let Some(mut guard) = self.inner.try_lock() else {
            return 0;
        };
        let inner = &mut *guard;
        // (Datagrams wait in the socket, or in the pool: another deputy
        // may have taken all of the socket's, ours among them, and we
        // must then claim ours on every poll too, not every CHECK_MS.)
        let late = inner.lateness.check(now, self.page.beat(), || {
            self.page.pooled() > 0 || socket.has_queued()
        });
        let was = self
            .state
            .swap(if late { ACTIVE } else { now }, Ordering::Relaxed);
        if late && was != ACTIVE {
            super::daemon::trace(&format!(
                "member pid {}: the device process is late, receiving for it",
                self.pid
            ));
        } else if !late && was == ACTIVE {
            let (taken, put, lost) = self.page.counts();
            super::daemon::trace(&format!(
                "member pid {}: the device process runs again (deputies took {taken}, \
                 pooled {put}, lost {lost} so far)",
                self.pid
            ));
        }
        inner.mine.clear();
        inner.mine.extend_from_slice(&self.qpns.lock());
        let mine = &inner.mine;
        let mut n = self.page.take(
            max,
            |q| mine.contains(&q),
            &mut inner.scratch,
            |h, d| {
                if let Some((src, tos, ttl)) = super::daemon::parse_rec_header(h) {
                    deliver(src, tos, ttl, d);
                }
            },
        );
        if !late || n >= max {
            return n;
        }
        let Some(held) = self.page.try_lock(self.pid, now) else {
            return n;
        };
        if inner.bufs.is_empty() {
            inner.bufs = (0..BATCH)
                .map(|_| vec![0u8; softrdma_io::GRO_BUF_LEN])
                .collect();
            inner.meta = vec![IoMeta::default(); BATCH];
        }
        while n < max && self.page.has_room() {
            let mut it = inner.bufs.iter_mut();
            let mut slices: [IoSliceMut<'_>; BATCH] =
                std::array::from_fn(|_| IoSliceMut::new(it.next().expect("BATCH")));
            let got = socket
                .recv(&mut slices, &mut inner.meta)
                .unwrap_or_default();
            for (m, buf) in inner.meta[..got].iter().zip(inner.bufs.iter()) {
                let ttl = m.ttl.unwrap_or(64);
                for dgram in m.datagrams(&buf[..m.len]) {
                    self.page.count_taken(1);
                    match super::route::dest_qpn(dgram) {
                        Some(q) if mine.contains(&q) => {
                            deliver(m.addr, m.tos, ttl, dgram);
                            n += 1;
                        }
                        q => {
                            let h = super::daemon::rec_header(m.addr, m.tos, ttl);
                            self.page.put(q.unwrap_or(0), &h, dgram);
                        }
                    }
                }
            }
            if got < BATCH {
                break;
            }
        }
        self.page.unlock(held);
        n
    }
}

#[cfg(test)]
#[path = "deputy_tests.rs"]
mod tests;
