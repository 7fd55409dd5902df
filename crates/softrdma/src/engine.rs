//! The engine: drives the sans-I/O core over a UDP socket.
//!
//! One progress thread per device receives datagrams in batches, feeds them
//! to the core, runs its timers and sends what it produces. Application
//! threads never wait for it to send: a verb that makes the core produce
//! packets (`post_send`, `post_recv` after an RNR…) sends them from the
//! calling thread, in order, before returning. A thread polling an empty CQ
//! also makes progress itself (receives and processes what has arrived), so
//! a program spinning on its CQ gets its completions without a thread
//! switch; the progress thread is what makes one-sided operations land while
//! the program does something else entirely.
//!
//! Idle policy: after activity the progress thread keeps polling the socket
//! for `spin` (busy-poll, configurable), then sleeps in epoll until a
//! datagram, a timer deadline or a wake-up.
//!
//! Nothing waits for the program's next call (DESIGN promise 7). While a
//! program thread polls, what its polls and posts produce is left in the
//! core for its next call, batched with it (`leave_for_next_call`); the
//! progress thread, which watches the program's polls (`app_polls`), sends
//! it when the program has not come back within `APP_ACTIVE_NS` — woken
//! for it if it sleeps in epoll (`output_left`). Output of a step that
//! raised an asynchronous event (a NAK moving a QP to ERR) is sent at
//! once; a QP moved to ERR or RESET or destroyed first sends what the
//! core holds (`modify_qp`); at normal exit every device sends what it
//! still holds (`drain`).
//!
//! Locks: `core` (the state machine) is always taken before `tx` (the send
//! queue). Packets are pulled from the core and queued under both, then sent
//! under `tx` alone, so concurrent senders can never reorder them.
//!
//! Fault injection (`SOFTRDMA_FAULTS`, softrdma-link) sits between the core
//! and the socket, one injector per direction: the send one in `tx` (every
//! datagram the core produces passes it before it is queued; what it
//! delays it holds and queues when due), the receive one in `rx` (every
//! received datagram passes it before the core sees it; what it answers
//! is queued for sending). The capture records what really went on the
//! wire (after the send injector) and what the core really received
//! (after the receive injector). Without faults each path costs one
//! branch: `tx.faults` / `rx.faults` is `None`.
//!
//! The connection manager (rdma_cm) hooks in at three places and nowhere
//! else, through `crate::cm_hook` (the engine names no upper layer), so a
//! device that never sees a MAD runs exactly as before:
//! - a received batch that put MADs in QP 1's queue (the core only queues
//!   packets for QP 1, found after a failed QPN lookup) ends with
//!   `cm_hook::on_gsi`, called with no engine lock held;
//! - the progress thread compares the CM's next deadline (`cm_deadline`, an
//!   atomic the CM driver publishes) with the time once per loop and calls
//!   `cm_hook::on_timer` when it has passed; it sleeps no longer
//!   than that deadline;
//! - the driver sends MADs with `send_mads` (core, then tx, as above).
//!
//! The CM's own lock (process-wide) is always taken before
//! `core`: the driver holds it while it calls into the engine, and the
//! engine never holds `core`, `tx` or `rx` when it calls the driver.

mod samehost;
pub(crate) use samehost::same_host_enabled;

use crate::event::{AsyncQueue, ChannelShared};
use crate::pcap::{Record, SharedWriter};
use crate::sync::{Mutex, MutexGuard};
use softrdma_io::{GatherTransmit, IoPiece, Poller, RecvMeta as IoMeta, UdpSocket, Waker};
use softrdma_link::{FaultCounters, FaultSpec, Injector, Responder, Step};
use softrdma_proto::device::MIN_TX_BUF;
use softrdma_proto::memory::Region;
use softrdma_proto::{CqId, Device as Core, Event, Gather, GsiMad, Instant, RecvMeta};
use softrdma_wire::mad::{GSI_QKEY, MAD_LEN};
use softrdma_wire::{QKey, Qpn};
use std::collections::{HashMap, VecDeque};
use std::io::IoSliceMut;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Datagrams received per batch by the progress thread.
const RX_BATCH: usize = 32;
/// Datagrams received per batch by a program thread driving progress: it
/// usually finds none or a few, and a smaller batch costs less to set up.
const INLINE_RX_BATCH: usize = 8;
/// Batches [`Shared::receive_arrived`] takes at most before a modify to
/// ERR or RESET (a full batch is [`RX_BATCH`] buffers).
const ARRIVED_BATCHES: usize = 8;
/// Receive buffer per batch slot: a GRO super-datagram.
const RX_BUF: usize = 64 * 1024;
/// Packets pulled from the core per flush before they are sent.
const TX_BATCH: usize = 64;
/// Datagrams queued while the socket is full before the core is left to
/// hold the rest (it retransmits what a reliable QP loses).
const TX_QUEUE_MAX: usize = 4096;

/// The progress thread's window for noticing program polls: if a program
/// thread polled during it, the progress thread leaves progress to it.
const APP_ACTIVE_NS: u64 = 300_000;

/// A datagram waiting to be sent.
struct Pending {
    buf: Vec<u8>,
    len: usize,
    dst: SocketAddr,
    tos: u8,
    ttl: u8,
    /// Zero-copy: headers in `buf`, payload in registered memory, trailer
    /// (pad + ICRC) in `buf` after the headers.
    gather: Option<Gather>,
    /// The gather sequence number to release once this datagram is sent or
    /// dropped (0: it never read registered memory).
    seq: u64,
}

impl Pending {
    /// Appends the datagram's parts, in order, as I/O pieces.
    fn pieces<'a>(&'a self, out: &mut Vec<IoPiece<'a>>) {
        let Some(g) = &self.gather else {
            out.push(IoPiece::new(&self.buf[..self.len]));
            return;
        };
        out.push(IoPiece::new(&self.buf[..g.header_len]));
        for p in g.pieces.iter().flatten() {
            match p.address() {
                // SAFETY: the region is registered: deregistration copies
                // the payload of queued datagrams out of it (`materialize`,
                // under the `tx` lock we hold) before it returns, so the
                // bytes stay valid while this datagram is queued. The kernel
                // only reads them, and no Rust reference to them exists.
                Some(a) => out.push(unsafe { IoPiece::from_raw(a, p.len) }),
                None => {
                    // Cannot happen (see above); the datagram then leaves
                    // short and the receiver drops it, as a damaged one.
                    debug_assert!(false, "a queued datagram reads a revoked region");
                    return;
                }
            }
        }
        if g.trailer_len > 0 {
            out.push(IoPiece::new(
                &self.buf[g.header_len..g.header_len + g.trailer_len],
            ));
        }
    }

    /// Whether the payload still sits in `region` (or any region, for
    /// `None`).
    fn reads(&self, region: Option<&Arc<Region>>) -> bool {
        self.gather.as_ref().is_some_and(|g| {
            g.pieces
                .iter()
                .flatten()
                .any(|p| region.is_none_or(|r| Arc::ptr_eq(&p.region, r)))
        })
    }

    /// Copies the payload out of registered memory into `buf`, so the
    /// datagram no longer reads the program's memory.
    fn materialize(&mut self) {
        let Some(g) = self.gather.take() else {
            return;
        };
        let payload: usize = g.pieces.iter().flatten().map(|p| p.len).sum();
        let total = g.header_len + payload + g.trailer_len;
        if self.buf.len() < total {
            self.buf.resize(total, 0);
        }
        // Trailer to its place after the payload, then the payload.
        self.buf.copy_within(
            g.header_len..g.header_len + g.trailer_len,
            g.header_len + payload,
        );
        let mut at = g.header_len;
        for p in g.pieces.iter().flatten() {
            // A revoked region cannot be read: zeros make the receiver drop
            // the datagram (its ICRC no longer checks), as a damaged one.
            if p.read(&mut self.buf[at..at + p.len]).is_err() {
                self.buf[at..at + p.len].fill(0);
            }
            at += p.len;
        }
        self.len = total;
    }

    /// The datagram in one piece (for the capture file).
    fn contiguous(&self) -> std::borrow::Cow<'_, [u8]> {
        let Some(g) = &self.gather else {
            return std::borrow::Cow::Borrowed(&self.buf[..self.len]);
        };
        let mut v = Vec::with_capacity(self.len);
        v.extend_from_slice(&self.buf[..g.header_len]);
        for p in g.pieces.iter().flatten() {
            let at = v.len();
            v.resize(at + p.len, 0);
            let _ = p.read(&mut v[at..]);
        }
        v.extend_from_slice(&self.buf[g.header_len..g.header_len + g.trailer_len]);
        std::borrow::Cow::Owned(v)
    }
}

/// What the send injector needs to send a datagram it held: destination,
/// traffic class, hop limit.
type TxHeld = (SocketAddr, u8, u8);

#[derive(Default)]
struct TxQueue {
    pending: VecDeque<Pending>,
    pool: Vec<Vec<u8>>,
    /// The send injector (`SOFTRDMA_FAULTS`), if any rule acts on sends.
    faults: Option<Box<Injector<TxHeld>>>,
}

struct RxBufs {
    bufs: Vec<Vec<u8>>,
    meta: Vec<IoMeta>,
    /// The receive injector, if any rule acts on what the device receives.
    faults: Option<Box<Injector<RecvMeta>>>,
    /// A corrupted copy of a received datagram.
    scratch: Vec<u8>,
}

/// What the device and its handles share.
pub(crate) struct Shared {
    core: Mutex<Core>,
    tx: Mutex<TxQueue>,
    rx: Mutex<RxBufs>,
    pub socket: UdpSocket,
    waker: Waker,
    stop: AtomicBool,
    epoch: std::time::Instant,
    pcap: Option<SharedWriter>,
    pub local: SocketAddr,
    pub channels: Mutex<HashMap<CqId, Arc<ChannelShared>>>,
    pub async_events: AsyncQueue,
    /// Busy-poll window after activity.
    spin: Duration,
    /// Time of the last datagram in or out (ns since epoch).
    last_activity: AtomicU64,
    /// When the progress thread sleeps: until this time (ns since epoch);
    /// `u64::MAX` while it is awake.
    sleep_until: AtomicU64,
    /// CQ polls and progress calls by program threads: a counter, so the
    /// program pays no clock read for it.
    app_polls: AtomicU64,
    /// The progress thread saw program polls in its last window: progress
    /// is theirs, and posts wait for their next poll.
    app_active: AtomicBool,
    /// Datagrams the socket refused (queue overflow): lost, counted.
    pub tx_dropped: AtomicU64,
    gso: bool,
    /// Send calls refused on purpose (`DeviceOptions::refuse_sends`).
    refuser: Option<Refuser>,
    /// The smallest gather sequence number a send completion waits for
    /// (`u64::MAX`: none), published whenever the core lock is held, so a
    /// sender can tell without the lock whether what it released matters.
    release_wanted: AtomicU64,
    /// Gather sequence numbers sent or dropped (the core's
    /// `handle_released` mark, applied under its lock).
    released: AtomicU64,
    /// The device's number in this process, never reused: rdma_cm's key
    /// for its per-device state.
    pub serial: u64,
    /// The communication manager's next deadline (ns since `epoch`;
    /// `u64::MAX`: none), published by the rdma_cm driver.
    cm_deadline: AtomicU64,
    /// rdma_cm keeps state for this device (told when the device goes).
    pub cm_used: AtomicBool,
    /// MADs for QP 1 wait in the core for the progress thread to hand
    /// them to rdma_cm (`receive_arrived` received them).
    gsi_waiting: AtomicBool,
    /// The sockets of the multicast groups the device joined.
    pub(crate) mcast: crate::mcast::GroupSockets,
    /// The process's fork generation when the device opened: in a forked
    /// child the device is the parent's (`forked_away`).
    generation: u64,
    /// Refused packets, reported at most once a second.
    refusals: crate::log::RefusalLog,
    /// The device is shared with other processes (see `host`): datagrams
    /// come from the device process's ring, not the socket, and QP 1
    /// traffic leaves through it.
    pub(crate) host: Option<Arc<crate::host::member::Member>>,
    /// Faults are injected (either direction): the progress thread also
    /// wakes for datagrams the injectors hold.
    faulty: bool,
    /// When the send / receive injector's next held datagram is due (ns
    /// since `epoch`; `u64::MAX`: none), published under `tx` / `rx`.
    tx_fault_due: AtomicU64,
    rx_fault_due: AtomicU64,
    /// Fault events go to the log (its debug level is on).
    fault_log: bool,
    /// The faults this device injected were said (at close or exit).
    faults_said: AtomicBool,
}

/// Serial numbers of devices.
static SERIAL: AtomicU64 = AtomicU64::new(1);

impl Drop for Shared {
    fn drop(&mut self) {
        // Refusals not yet reported (the last period's): reported now.
        let core = self.core.lock();
        let refused = core.refusals();
        if self.refusals.due(refused, None) {
            let c = core.counters();
            self.refusals.report(self.local.ip(), refused, 0, &c);
        }
        drop(core);
        if self.cm_used.load(Ordering::SeqCst) {
            crate::cm_hook::forget_device(self.serial);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // parking_lot: no poisoning (a panic while holding the lock leaves the
    // state consistent enough to keep going: every mutation is a complete
    // step of the core).
    m.lock()
}

/// How the engine runs (from `DeviceOptions`).
pub(crate) struct Tuning {
    /// Busy-poll window after activity.
    pub spin: Duration,
    /// Send runs of equal-sized datagrams with UDP GSO.
    pub gso: bool,
    /// Fraction of send calls refused as if the socket were full (a fault
    /// injector for tests: datagrams then wait in the engine's queue).
    pub refuse_sends: f64,
    /// Faults to inject on the device's datagrams, with their seed.
    pub faults: Option<FaultSpec>,
}

/// Refuses a fraction of send calls (xorshift64; the state is only
/// touched under the `tx` lock, the atomic just makes it shareable).
struct Refuser {
    threshold: u64,
    state: AtomicU64,
}

impl Refuser {
    fn new(fraction: f64) -> Option<Refuser> {
        (fraction > 0.0).then(|| Refuser {
            threshold: (fraction.min(1.0) * u64::MAX as f64) as u64,
            state: AtomicU64::new(0x2545_f491_4f6c_dd1d),
        })
    }
    fn refuse(&self) -> bool {
        let mut x = self.state.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.state.store(x, Ordering::Relaxed);
        x < self.threshold
    }
}

impl Shared {
    pub fn new(
        core: Core,
        socket: UdpSocket,
        poller_waker: Waker,
        pcap: Option<SharedWriter>,
        tuning: Tuning,
        mcast: crate::mcast::GroupSockets,
        host: Option<Arc<crate::host::member::Member>>,
    ) -> std::io::Result<Shared> {
        let local = socket.local_addr();
        let fault_log = crate::log::notes_wanted();
        fn injector<M: Clone>(
            spec: Option<&FaultSpec>,
            send: bool,
            local: SocketAddr,
            log: bool,
        ) -> Option<Box<Injector<M>>> {
            let spec = spec?;
            let mut i = Injector::new(spec, spec.seed.unwrap_or(0), send, local)?;
            i.set_events(log);
            Some(Box::new(i))
        }
        let spec = tuning.faults.as_ref();
        let tx_faults = injector(spec, true, local, fault_log);
        let rx_faults = injector(spec, false, local, fault_log);
        let faulty = tx_faults.is_some() || rx_faults.is_some();
        Ok(Shared {
            core: Mutex::new(core),
            tx: Mutex::new(TxQueue {
                faults: tx_faults,
                ..Default::default()
            }),
            rx: Mutex::new(RxBufs {
                bufs: (0..RX_BATCH).map(|_| vec![0u8; RX_BUF]).collect(),
                meta: vec![IoMeta::default(); RX_BATCH],
                faults: rx_faults,
                scratch: Vec::new(),
            }),
            socket,
            waker: poller_waker,
            stop: AtomicBool::new(false),
            epoch: std::time::Instant::now(),
            pcap,
            local,
            channels: Mutex::new(HashMap::new()),
            async_events: AsyncQueue::new()?,
            spin: tuning.spin,
            last_activity: AtomicU64::new(0),
            sleep_until: AtomicU64::new(u64::MAX),
            app_polls: AtomicU64::new(0),
            app_active: AtomicBool::new(false),
            tx_dropped: AtomicU64::new(0),
            gso: tuning.gso,
            refuser: Refuser::new(tuning.refuse_sends),
            release_wanted: AtomicU64::new(u64::MAX),
            released: AtomicU64::new(0),
            serial: SERIAL.fetch_add(1, Ordering::Relaxed),
            cm_deadline: AtomicU64::new(u64::MAX),
            cm_used: AtomicBool::new(false),
            gsi_waiting: AtomicBool::new(false),
            mcast,
            generation: softrdma_io::fork_generation(),
            refusals: crate::log::RefusalLog::default(),
            host,
            faulty,
            tx_fault_due: AtomicU64::new(u64::MAX),
            rx_fault_due: AtomicU64::new(u64::MAX),
            fault_log,
            faults_said: AtomicBool::new(false),
        })
    }

    /// Says on stderr, once, what faults the device injected (at close, or
    /// at exit for a device still open): a user running a program under
    /// `SOFTRDMA_FAULTS` sees what it went through.
    pub fn say_faults(&self, name: &str) {
        if !self.faulty || self.forked_away() || self.faults_said.swap(true, Ordering::SeqCst) {
            return;
        }
        // (At exit another thread may keep a lock: what it holds is left
        // out rather than waited for.)
        let mut c = FaultCounters::default();
        if let Some(f) = self
            .tx
            .try_lock()
            .and_then(|t| t.faults.as_ref().map(|f| f.counters()))
        {
            c.merge(&f);
        }
        if let Some(f) = self
            .rx
            .try_lock()
            .and_then(|r| r.faults.as_ref().map(|f| f.counters()))
        {
            c.merge(&f);
        }
        let list: Vec<String> = c
            .nonzero()
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let line = format!(
            "softrdma: {name} ({}) injected faults: {}\n",
            self.local.ip(),
            if list.is_empty() {
                "none".to_string()
            } else {
                list.join(", ")
            }
        );
        let _ = softrdma_io::sys_write(2, line.as_bytes());
    }

    /// Whether this process is a forked child of the one that opened the
    /// device: its progress thread does not exist here, its locks may be
    /// held forever by threads that do not either, and its socket is the
    /// parent's. Nothing of it may be used, locked or sent.
    pub fn forked_away(&self) -> bool {
        softrdma_io::fork_generation() != self.generation
    }

    /// The core's clock.
    pub fn now(&self) -> Instant {
        Instant(self.epoch.elapsed().as_nanos() as u64)
    }

    /// Runs `f` on the core, then delivers its events and sends the packets
    /// it produced. Every verb goes through here.
    pub fn with_core<R>(&self, f: impl FnOnce(&mut Core, Instant) -> R) -> R {
        let now = self.now();
        let mut core = lock(&self.core);
        let r = f(&mut core, now);
        self.after(core, now);
        r
    }

    /// Like [`Self::with_core`] for posting work: while a program thread is
    /// driving progress (spinning on its CQ), the packets are left for its
    /// next poll, which sends everything queued in one batch — a thread
    /// posting many requests then polling pays one system call per batch,
    /// not one per request. Otherwise they are sent now.
    pub fn with_core_post<R>(&self, f: impl FnOnce(&mut Core, Instant) -> R) -> R {
        let now = self.now();
        let mut core = lock(&self.core);
        let r = f(&mut core, now);
        if self.app_active.load(Ordering::Relaxed) {
            self.leave_for_next_call(core, now);
        } else {
            self.after(core, now);
        }
        r
    }

    /// Ends a program thread's call that leaves what the core produced for
    /// the thread's next call (batched with it). What must not wait — the
    /// output of a step that raised an asynchronous event, such as the NAK
    /// of a request that moved a QP to the error state, which the program
    /// may answer by exiting — is sent now. And the progress thread is
    /// told: it sends the rest if the program does not come back within
    /// its short window (`APP_ACTIVE_NS`), whatever the program does next —
    /// sleep in poll() on its channel, in epoll, or nothing.
    fn leave_for_next_call<'a>(&'a self, mut core: MutexGuard<'a, Core>, now: Instant) {
        if self.route_events(&mut core) {
            self.after(core, now);
            return;
        }
        let left = core.wants_transmit();
        drop(core);
        if left {
            self.output_left();
        }
    }

    /// Output waits in the core: a progress thread sleeping in epoll is
    /// woken to take it over. (It checks the core after publishing
    /// `sleep_until` and before sleeping, under the core lock: of the two
    /// threads, at least one sees the other.)
    fn output_left(&self) {
        if self.sleep_until.load(Ordering::SeqCst) != u64::MAX {
            self.waker.wake();
        }
    }

    /// `ibv_modify_qp`. A QP moved to ERR or RESET stops sending and its
    /// queues are flushed or forgotten: what the core can send now leaves
    /// first, so a disconnect, an error or a reset never overtakes work
    /// posted before it (a SEND posted, unsignaled, right before
    /// `rdma_disconnect` reaches the peer before the DREQ); and what has
    /// arrived is processed first (`receive_arrived`), so an ACK already
    /// in the socket completes its SEND instead of it being flushed.
    pub fn modify_qp(
        &self,
        qpn: Qpn,
        attr: &softrdma_proto::QpAttr,
        mask: softrdma_proto::AttrMask,
    ) -> softrdma_proto::VerbsResult<()> {
        use softrdma_proto::{AttrMask, QpState};
        if mask.contains(AttrMask::STATE) && matches!(attr.qp_state, QpState::Err | QpState::Reset)
        {
            // What has arrived counts first: an ACK in the socket
            // completes its SEND rather than seeing it flushed.
            self.receive_arrived();
            self.flush_now();
        }
        self.with_core(|c, now| c.modify_qp(now, qpn, attr, mask))
    }

    /// Like [`Self::with_core`] for reads that produce nothing to send.
    pub fn peek_core<R>(&self, f: impl FnOnce(&Core) -> R) -> R {
        f(&lock(&self.core))
    }

    fn after<'a>(&'a self, mut core: MutexGuard<'a, Core>, now: Instant) {
        self.route_events(&mut core);
        // A new deadline earlier than the sleeping progress thread's wake-up
        // (a request just sent arms its retransmission timer): wake it.
        if let Some(d) = core.poll_timeout() {
            let s = self.sleep_until.load(Ordering::Relaxed);
            if s != u64::MAX && d.0 < s {
                self.waker.wake();
            }
        }
        if core.wants_transmit() {
            self.flush(core, now);
        } else {
            drop(core);
            // Datagrams left from an earlier full socket (or held by the
            // send injector, now due).
            if !lock(&self.tx).pending.is_empty() || self.tx_fault_due(now) {
                self.send_pending();
            }
        }
    }

    /// Whether the send injector holds a datagram due at `now` (one branch
    /// without faults).
    fn tx_fault_due(&self, now: Instant) -> bool {
        self.faulty && self.tx_fault_due.load(Ordering::SeqCst) <= now.0
    }

    /// When the next datagram either injector holds is due.
    fn fault_deadline(&self) -> Option<Instant> {
        if !self.faulty {
            return None;
        }
        let d = self
            .tx_fault_due
            .load(Ordering::SeqCst)
            .min(self.rx_fault_due.load(Ordering::SeqCst));
        (d != u64::MAX).then_some(Instant(d))
    }

    /// The faults injected so far (both directions).
    pub fn fault_counters(&self) -> FaultCounters {
        let mut c = FaultCounters::default();
        if !self.faulty {
            return c;
        }
        if let Some(f) = &lock(&self.tx).faults {
            c.merge(&f.counters());
        }
        if let Some(f) = &lock(&self.rx).faults {
            c.merge(&f.counters());
        }
        c
    }

    /// A datagram the core produced, through the send injector: queued,
    /// flipped and queued, held for later, or gone.
    #[cold]
    #[inline(never)]
    fn inject_tx(&self, tx: &mut TxQueue, mut p: Pending, now: Instant) {
        let Some(inj) = tx.faults.as_mut() else {
            tx.pending.push_back(p);
            return;
        };
        let meta = (p.dst, p.tos, p.ttl);
        // Datagrams with the faults on are whole in `buf` (no zero copy).
        debug_assert!(p.gather.is_none());
        match inj.process(now.0, p.dst.ip(), &meta, &p.buf[..p.len], &mut |_| None) {
            Step::Pass { flip } => {
                for b in flip {
                    flip_bit(&mut p.buf[..p.len], b);
                }
                tx.pending.push_back(p);
            }
            Step::Held | Step::Gone => tx.pool.push(p.buf),
        }
        self.after_tx_injection(tx);
    }

    /// Publishes the send injector's next deadline and logs its events.
    fn after_tx_injection(&self, tx: &mut TxQueue) {
        let Some(inj) = tx.faults.as_mut() else {
            return;
        };
        let due = inj.next_due().unwrap_or(u64::MAX);
        let before = self.tx_fault_due.swap(due, Ordering::SeqCst);
        if due < before {
            // The progress thread may sleep past it.
            let s = self.sleep_until.load(Ordering::SeqCst);
            if s != u64::MAX && due < s {
                self.waker.wake();
            }
        }
        if self.fault_log {
            while let Some(e) = inj.poll_event() {
                crate::log::fault(self.local.ip(), &e);
            }
        }
    }

    /// Queues what the send injector held and is now due (everything, when
    /// the device closes: `all`).
    fn release_held_tx(&self, tx: &mut TxQueue, now: Instant, all: bool) {
        let TxQueue {
            pending, faults, ..
        } = tx;
        let Some(inj) = faults.as_mut() else { return };
        loop {
            let held = if all {
                inj.take_held()
            } else {
                inj.poll_due(now.0)
            };
            let Some(((dst, tos, ttl), buf)) = held else {
                break;
            };
            pending.push_back(Pending {
                len: buf.len(),
                buf,
                dst,
                tos,
                ttl,
                gather: None,
                seq: 0,
            });
        }
        self.after_tx_injection(tx);
    }

    /// The datagrams up to gather sequence number `seq` were sent or
    /// dropped. The core learns it the next time anyone holds its lock;
    /// now, when a completion waits for it.
    fn release(&self, seq: u64) {
        // SeqCst with `route_events`' store of `release_wanted` and load of
        // `released`: of a sender releasing and a lock holder gating at the
        // same moment, at least one sees the other.
        self.released.fetch_max(seq, Ordering::SeqCst);
        if seq < self.release_wanted.load(Ordering::SeqCst) {
            return;
        }
        let mut core = lock(&self.core);
        self.route_events(&mut core);
    }

    fn publish_release_wanted(&self, core: &Core) {
        self.release_wanted
            .store(core.release_wanted().unwrap_or(u64::MAX), Ordering::SeqCst);
    }

    /// `ibv_dereg_mr`: queued datagrams whose payload still sits in the
    /// region get a copy of it first; then the core revokes the region.
    /// When this returns, nothing of softrdma reads or writes those bytes.
    pub fn dereg_mr(&self, key: u32) -> softrdma_proto::VerbsResult<()> {
        let now = self.now();
        let mut core = lock(&self.core);
        if let Some(region) = core.mr(key).map(|m| m.region.clone()) {
            let mut tx = lock(&self.tx);
            for d in tx.pending.iter_mut().filter(|d| d.reads(Some(&region))) {
                d.materialize();
            }
        }
        let r = core.dereg_mr(key);
        self.after(core, now);
        r
    }

    /// `ibv_rereg_mr`: like [`Self::dereg_mr`] when the memory changes
    /// (queued datagrams reading the old memory get a copy first; the core
    /// revokes it), otherwise the region's protection domain or rights
    /// change in place. Returns the region's key, new when the memory
    /// changed.
    pub fn rereg_mr(
        &self,
        key: u32,
        change: softrdma_proto::Rereg,
    ) -> softrdma_proto::VerbsResult<u32> {
        let now = self.now();
        let mut core = lock(&self.core);
        if change.translation.is_some() {
            if let Some(region) = core.mr(key).map(|m| m.region.clone()) {
                let mut tx = lock(&self.tx);
                for d in tx.pending.iter_mut().filter(|d| d.reads(Some(&region))) {
                    d.materialize();
                }
            }
        }
        let r = core.rereg_mr(key, change);
        self.after(core, now);
        r
    }

    /// Datagrams still queued (the socket was full) stop reading the
    /// program's memory: their payload is copied out. QP destruction and
    /// device close call it, so nothing reads a buffer after they return.
    pub fn materialize_queued(&self) {
        let mut tx = lock(&self.tx);
        for d in tx.pending.iter_mut().filter(|d| d.reads(None)) {
            d.materialize();
        }
    }

    /// Delivers the core's events: completion notifications to channels,
    /// asynchronous events to the device's queue. Returns whether an
    /// asynchronous event fired.
    pub(crate) fn route_events(&self, core: &mut Core) -> bool {
        // Completions this interaction gated may already be released; and a
        // sender may release while we publish what we wait for (see
        // `release`).
        loop {
            let r = self.released.load(Ordering::SeqCst);
            core.handle_released(r);
            self.publish_release_wanted(core);
            if self.released.load(Ordering::SeqCst) == r {
                break;
            }
        }
        let mut async_event = false;
        while let Some(e) = core.poll_event() {
            match e {
                Event::Completion(cq) => {
                    if let Some(ch) = lock(&self.channels).get(&cq) {
                        ch.notify(cq);
                    }
                }
                Event::Async(a) => {
                    async_event = true;
                    self.async_events.push(a);
                }
            }
        }
        while let Some(n) = core.poll_note() {
            crate::log::note(self.local.ip(), n);
        }
        // Groups joined or left (an attach reports its own join's error:
        // see `crate::mcast`); here what a destroyed QP left.
        if let Err(e) = self.mcast.apply(core) {
            tracing::warn!(target: "softrdma::engine", "multicast: {e}");
        }
        async_event
    }

    /// Pulls packets from the core and sends them, in order, until the
    /// core has nothing more or the socket is full.
    fn flush<'a>(&'a self, mut core: MutexGuard<'a, Core>, now: Instant) {
        loop {
            let mut tx = lock(&self.tx);
            let mut n = 0;
            // The send injector copies, corrupts, holds: whole datagrams.
            let faults = tx.faults.is_some();
            while n < TX_BATCH && tx.pending.len() < TX_QUEUE_MAX {
                let mut buf = tx.pool.pop().unwrap_or_else(|| vec![0u8; MIN_TX_BUF]);
                let t = if faults {
                    core.poll_transmit(now, &mut buf)
                } else {
                    core.poll_transmit_gather(now, &mut buf)
                };
                match t {
                    Some(t) => {
                        let p = Pending {
                            buf,
                            len: t.len,
                            dst: t.dst,
                            tos: t.traffic_class,
                            ttl: t.hop_limit,
                            seq: t.gather.as_ref().map_or(0, |g| g.seq),
                            gather: t.gather,
                        };
                        if faults {
                            self.inject_tx(&mut tx, p, now);
                        } else {
                            tx.pending.push_back(p);
                        }
                        n += 1;
                    }
                    None => {
                        tx.pool.push(buf);
                        break;
                    }
                }
            }
            // What was just pulled may have completed requests whose
            // payload is queued here: they wait for its release.
            self.publish_release_wanted(&core);
            let more = n == TX_BATCH && core.wants_transmit();
            // Keep the order: send this batch before releasing `tx`, but let
            // other threads use the core meanwhile.
            drop(core);
            let (full, released) = self.send_locked(&mut tx);
            drop(tx);
            self.release(released);
            if !more || full {
                return;
            }
            core = lock(&self.core);
        }
    }

    fn send_pending(&self) {
        let mut tx = lock(&self.tx);
        let (_, released) = self.send_locked(&mut tx);
        drop(tx);
        self.release(released);
    }

    /// Sends queued datagrams. Returns whether the socket is full, and the
    /// highest gather sequence number of the datagrams sent or dropped.
    fn send_locked(&self, tx: &mut TxQueue) -> (bool, u64) {
        let mut released = 0;
        if tx.faults.is_some() {
            self.release_held_tx(tx, self.now(), false);
        }
        if tx.pending.is_empty() {
            return (false, released);
        }
        if !self.spin.is_zero() {
            // Only the busy-poll window reads it: no clock read otherwise.
            self.last_activity.store(self.now().0, Ordering::Relaxed);
        }
        while !tx.pending.is_empty() {
            // The same-host path takes the datagrams at the front that
            // have one (see `samehost`); UDP the run up to the next.
            let sent = match self.same_host_lead(tx) {
                samehost::Lead::Ring(n) => Ok(n),
                samehost::Lead::Full => Ok(0),
                samehost::Lead::Udp(limit) => self.send_some(tx, limit),
            };
            match sent {
                Ok(0) | Err(_) => {
                    if tx.pending.len() >= TX_QUEUE_MAX {
                        // The socket stays full: drop the oldest; reliable
                        // QPs retransmit, unreliable ones lose them as a
                        // network would.
                        let drop_n = tx.pending.len() / 2;
                        for d in tx.pending.drain(..drop_n) {
                            released = released.max(d.seq);
                            if d.buf.len() >= MIN_TX_BUF {
                                tx.pool.push(d.buf);
                            }
                        }
                        self.tx_dropped.fetch_add(drop_n as u64, Ordering::Relaxed);
                    }
                    return (true, released);
                }
                Ok(n) => {
                    // Captured once each, as they leave (a datagram that
                    // waited for a full socket is not recorded twice).
                    self.capture_sent(tx.pending.range(..n));
                    for d in tx.pending.drain(..n) {
                        released = released.max(d.seq);
                        // (Datagrams the fault injector held or made are
                        // only as long as they are: never a buffer the
                        // core writes a packet of any size into.)
                        if tx.pool.len() < 1024 && d.buf.len() >= MIN_TX_BUF {
                            tx.pool.push(d.buf);
                        }
                    }
                }
            }
        }
        (false, released)
    }

    fn capture_sent<'a>(&self, sent: impl Iterator<Item = &'a Pending>) {
        let Some(p) = &self.pcap else { return };
        let mut w = lock(p);
        for d in sent {
            let _ = w.write(&Record {
                src: self.local,
                dst: d.dst,
                traffic_class: d.tos,
                hop_limit: d.ttl,
                payload: &d.contiguous(),
                received: false,
            });
        }
        let _ = w.flush();
    }

    /// One sendmmsg worth of the queue, GSO-coalescing runs of equal-sized
    /// datagrams to the same destination. Returns datagrams sent.
    fn send_some(&self, tx: &TxQueue, limit: usize) -> std::io::Result<usize> {
        if self.refuser.as_ref().is_some_and(Refuser::refuse) {
            return Ok(0);
        }
        let max_seg = if self.gso {
            self.socket.max_gso_segments()
        } else {
            1
        };
        let mut slices: Vec<IoPiece<'_>> = Vec::with_capacity(tx.pending.len().min(1024));
        // (first datagram, first slice, end of its slices, datagrams)
        let mut groups: Vec<(usize, usize, usize, usize)> = Vec::new();
        let mut i = 0;
        let items = &tx.pending;
        let n_items = items
            .len()
            .min(limit)
            .min(softrdma_io::BATCH_SIZE * max_seg);
        while i < n_items && groups.len() < softrdma_io::BATCH_SIZE {
            let first = &items[i];
            let mut j = i + 1;
            // Segments must be equal; only the last may be shorter.
            // A GSO super-datagram stays under the 64 KiB UDP limit. Only
            // loopback peers get them: where a run is split in software
            // (a NIC without segmentation offload, or the receiving host
            // splitting it for rxe), segment i leaves with IPv4
            // identification i, which the ICRC covers and we computed as 0.
            let seg_limit = if first.dst.ip().is_loopback() {
                max_seg.min(softrdma_io::max_gso_segments_for(&first.dst, first.len))
            } else {
                1
            };
            while j < n_items
                && j - i < seg_limit
                && items[j].dst == first.dst
                && items[j].tos == first.tos
                && items[j].ttl == first.ttl
                && items[j - 1].len == first.len
                && items[j].len <= first.len
            {
                j += 1;
            }
            let first_slice = slices.len();
            for d in items.range(i..j) {
                d.pieces(&mut slices);
            }
            groups.push((i, first_slice, slices.len(), j - i));
            i = j;
        }
        let mut transmits = Vec::with_capacity(groups.len());
        for &(item, start, end, count) in &groups {
            let d = &items[item];
            let mut t = GatherTransmit::new(d.dst, &slices[start..end]);
            t.tos = d.tos;
            t.ttl = Some(d.ttl);
            if count > 1 {
                t.segment_size = Some(d.len);
            }
            transmits.push(t);
        }
        let groups_sent = self.socket.send_gather(&transmits)?;
        Ok(groups[..groups_sent].iter().map(|g| g.3).sum())
    }

    /// Receives and processes what has arrived, if no other thread is doing
    /// it. Returns the number of datagrams processed.
    pub fn poll_rx(&self) -> usize {
        // Multicast groups' sockets, when some group is joined (a load
        // otherwise).
        let m = self.mcast.poll(self, true);
        m + self.poll_rx_with(RX_BATCH, true)
    }

    /// Receives and processes what has already arrived, waiting for a
    /// thread that is receiving now to finish its batch first. A QP moved
    /// to ERR or RESET flushes its outstanding work requests; an ACK or a
    /// response that reached the device before the program's modify must
    /// complete its request instead, as a NIC has processed it long
    /// before the driver hands it the modify (uDAPL's dapltest: the peer
    /// receives a SEND, ACKs it, says so over TCP and disconnects; told
    /// over TCP, the sender moves its QP to ERR while the ACK waits in the
    /// socket). Bounded: a peer that keeps sending does not hold the
    /// caller for more than [`ARRIVED_BATCHES`] batches.
    /// MADs for QP 1 that this brings go to rdma_cm through the progress
    /// thread (the caller may hold rdma_cm's lock: `rdma_disconnect`),
    /// which it wakes.
    pub fn receive_arrived(&self) {
        // A shared device's datagrams wait in the device process's socket
        // until it hands them to our ring: it does so first, however
        // late a loaded machine schedules it (without this, 10-35% of
        // tests/c/ack_before_err.c's SENDs were flushed under load).
        if let Some(h) = &self.host {
            h.receive_arrived();
        }
        for _ in 0..ARRIVED_BATCHES {
            if self.rx_batch(lock(&self.rx), &self.socket, None, RX_BATCH, true, false) == 0 {
                break;
            }
        }
    }

    /// Receives up to `batch` buffers and processes them; with `send`, also
    /// sends what that produced (ACKs, responses) before returning.
    fn poll_rx_with(&self, batch: usize, send: bool) -> usize {
        self.rx_from(&self.socket, None, batch, send)
    }

    /// Receives up to `batch` buffers from `socket` and processes them;
    /// `group`: the multicast group a group socket receives (the
    /// destination of each of its datagrams).
    pub(crate) fn rx_from(
        &self,
        socket: &UdpSocket,
        group: Option<IpAddr>,
        batch: usize,
        send: bool,
    ) -> usize {
        let Some(rx_guard) = self.rx.try_lock() else {
            return 0;
        };
        self.rx_batch(rx_guard, socket, group, batch, send, true)
    }

    /// [`Self::rx_from`] with the receive buffers taken. With
    /// `gsi_here`, MADs received for QP 1 go to rdma_cm from this thread;
    /// otherwise the progress thread takes them (`cm_timers`).
    fn rx_batch(
        &self,
        mut rx_guard: MutexGuard<'_, RxBufs>,
        socket: &UdpSocket,
        group: Option<IpAddr>,
        batch: usize,
        send: bool,
        gsi_here: bool,
    ) -> usize {
        let rx = &mut *rx_guard;
        // On the stack: this runs on every poll of a spinning program.
        let mut bufs = rx.bufs.iter_mut();
        let mut slices: [IoSliceMut<'_>; RX_BATCH] =
            std::array::from_fn(|_| IoSliceMut::new(bufs.next().expect("RX_BATCH buffers")));
        let n = match (&self.host, group) {
            (Some(h), None) => h.recv(&mut slices[..batch], &mut rx.meta),
            _ => socket
                .recv(&mut slices[..batch], &mut rx.meta)
                .unwrap_or_default(),
        };
        // (With faults, datagrams the receive injector held may be due.)
        if n == 0
            && !(rx.faults.is_some() && self.rx_fault_due.load(Ordering::SeqCst) <= self.now().0)
        {
            return 0;
        }
        let now = self.now();
        self.last_activity.store(now.0, Ordering::Relaxed);
        let mut count = 0;
        let mut core = lock(&self.core);
        let RxBufs {
            bufs,
            meta: metas,
            faults,
            scratch,
        } = rx;
        if let Some(inj) = faults.as_deref_mut() {
            while let Some((meta, data)) = inj.poll_due(now.0) {
                self.deliver(&mut core, now, &meta, &data);
                count += 1;
            }
        }
        for (m, buf) in metas[..n].iter().zip(bufs.iter()) {
            for dgram in m.datagrams(&buf[..m.len]) {
                let meta = RecvMeta {
                    src: m.addr,
                    dst: group.or(m.dst_ip).unwrap_or(self.local.ip()),
                    len: dgram.len(),
                    traffic_class: m.tos,
                    hop_limit: m.ttl.unwrap_or(64),
                };
                let Some(inj) = faults.as_deref_mut() else {
                    self.deliver(&mut core, now, &meta, dgram);
                    count += 1;
                    continue;
                };
                let step = inj.process(now.0, m.addr.ip(), &meta, dgram, &mut |q| {
                    responder(&core, q)
                });
                match step {
                    Step::Pass { flip } if flip.is_empty() => {
                        self.deliver(&mut core, now, &meta, dgram);
                        count += 1;
                    }
                    Step::Pass { flip } => {
                        scratch.clear();
                        scratch.extend_from_slice(dgram);
                        for b in flip {
                            flip_bit(scratch, b);
                        }
                        self.deliver(&mut core, now, &meta, scratch);
                        count += 1;
                    }
                    Step::Held | Step::Gone => {}
                }
            }
        }
        if let Some(inj) = faults.as_deref_mut() {
            self.after_rx_injection(inj);
        }
        let refused = core.refusals();
        if self.refusals.due(refused, Some(now.0)) {
            let c = core.counters();
            self.refusals.report(self.local.ip(), refused, now.0, &c);
        }
        // MADs for QP 1 (rdma_cm): rare, checked once per batch.
        let gsi = core.gsi_pending();
        self.flush_pcap();
        if send {
            self.after(core, now);
        } else {
            self.leave_for_next_call(core, now);
        }
        drop(rx_guard);
        if gsi && gsi_here {
            // The CM may write to event channels and read files: inside a
            // program's CQ poll, no cancellation point (see
            // `softrdma_io::NoCancel`).
            let _nc = softrdma_io::NoCancel::new();
            crate::cm_hook::on_gsi(self);
        } else if gsi {
            self.gsi_waiting.store(true, Ordering::SeqCst);
            self.waker.wake();
        }
        count
    }

    /// Hands a received datagram to the core, recording it first.
    #[inline]
    fn deliver(&self, core: &mut Core, now: Instant, meta: &RecvMeta, dgram: &[u8]) {
        if let Some(p) = &self.pcap {
            let _ = lock(p).write(&Record {
                src: meta.src,
                dst: SocketAddr::new(meta.dst, self.local.port()),
                traffic_class: meta.traffic_class,
                hop_limit: meta.hop_limit,
                payload: dgram,
                received: true,
            });
        }
        core.handle_datagram(now, meta, dgram);
    }

    /// After a received batch went through the receive injector: its
    /// answers leave now (the core lock is held: `tx` comes after it), its
    /// next deadline is published, its events logged.
    #[cold]
    #[inline(never)]
    fn after_rx_injection(&self, inj: &mut Injector<RecvMeta>) {
        let mut answers = std::iter::from_fn(|| inj.poll_answer()).peekable();
        if answers.peek().is_some() {
            let mut tx = lock(&self.tx);
            for a in answers {
                tx.pending.push_back(Pending {
                    len: a.data.len(),
                    buf: a.data,
                    dst: a.dst,
                    tos: a.traffic_class,
                    ttl: a.hop_limit,
                    gather: None,
                    seq: 0,
                });
            }
            let (_, released) = self.send_locked(&mut tx);
            drop(tx);
            self.released.fetch_max(released, Ordering::SeqCst);
        }
        let due = inj.next_due().unwrap_or(u64::MAX);
        self.rx_fault_due.store(due, Ordering::SeqCst);
        let s = self.sleep_until.load(Ordering::SeqCst);
        if s != u64::MAX && due < s {
            self.waker.wake();
        }
        if self.fault_log {
            while let Some(e) = inj.poll_event() {
                crate::log::fault(self.local.ip(), &e);
            }
        }
    }

    /// The MADs waiting in QP 1's queue.
    pub fn take_gsi(&self) -> Vec<GsiMad> {
        let mut core = lock(&self.core);
        std::iter::from_fn(|| core.poll_gsi()).collect()
    }

    /// Sends MADs from QP 1: UD SEND_ONLY to `(ip, qpn)` with the GSI
    /// Q_Key, in order. A MAD the socket cannot take is dropped (the CM
    /// retransmits what matters).
    pub fn send_mads(&self, mads: &[(IpAddr, Qpn, [u8; MAD_LEN])]) {
        if mads.is_empty() {
            return;
        }
        // What the core produced earlier leaves first (a program thread's
        // poll leaves its ACKs for its next call): a REQ sent right after
        // a message arrived must not overtake that message's ACK, which
        // the peer may be waiting for before it listens.
        self.flush_now();
        let mut core = lock(&self.core);
        let mut tx = lock(&self.tx);
        for (dst, qpn, mad) in mads {
            if tx.pending.len() >= TX_QUEUE_MAX {
                self.tx_dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let mut buf = tx.pool.pop().unwrap_or_else(|| vec![0u8; MIN_TX_BUF]);
            match core.emit_gsi(*dst, *qpn, QKey(GSI_QKEY), mad, &mut buf) {
                Some(t) if self.host.is_some() => {
                    // Through the device process, which learns the
                    // connection from it (see `host::route`).
                    if let Some(h) = &self.host {
                        h.send_gsi(t.dst.ip(), &buf[..t.len]);
                    }
                    // Captured as sent, as the MADs a lone device sends.
                    if let Some(p) = &self.pcap {
                        let mut w = lock(p);
                        let _ = w.write(&Record {
                            src: self.local,
                            dst: t.dst,
                            traffic_class: t.traffic_class,
                            hop_limit: t.hop_limit,
                            payload: &buf[..t.len],
                            received: false,
                        });
                        let _ = w.flush();
                    }
                    tx.pool.push(buf);
                }
                Some(t) => {
                    let p = Pending {
                        buf,
                        len: t.len,
                        dst: t.dst,
                        tos: t.traffic_class,
                        ttl: t.hop_limit,
                        gather: None,
                        seq: 0,
                    };
                    if tx.faults.is_some() {
                        self.inject_tx(&mut tx, p, self.now());
                    } else {
                        tx.pending.push_back(p);
                    }
                }
                None => tx.pool.push(buf),
            }
        }
        drop(core);
        let (_, released) = self.send_locked(&mut tx);
        drop(tx);
        self.release(released);
    }

    /// The CM's next deadline (published by the rdma_cm driver after every
    /// step of its CM): the progress thread wakes up for it.
    pub fn set_cm_deadline(&self, deadline: Option<Instant>) {
        let v = deadline.map_or(u64::MAX, |d| d.0);
        self.cm_deadline.store(v, Ordering::SeqCst);
        let s = self.sleep_until.load(Ordering::SeqCst);
        if s != u64::MAX && v < s {
            self.waker.wake();
        }
    }

    /// Runs the CM's timers if they are due; returns the earlier of `next`
    /// and the CM's deadline. One atomic load when no CM is in use.
    fn cm_timers(&self, next: Option<Instant>) -> Option<Instant> {
        if self.gsi_waiting.swap(false, Ordering::SeqCst) {
            crate::cm_hook::on_gsi(self);
        }
        let d = self.cm_deadline.load(Ordering::SeqCst);
        if d == u64::MAX {
            return next;
        }
        if d <= self.now().0 {
            crate::cm_hook::on_timer(self);
        }
        let d = self.cm_deadline.load(Ordering::SeqCst);
        match (next, d) {
            (n, u64::MAX) => n,
            (Some(n), d) => Some(Instant(n.0.min(d))),
            (None, d) => Some(Instant(d)),
        }
    }

    /// A program thread polled (a CQ or `Device::progress`).
    pub fn note_app_poll(&self) {
        self.app_polls.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads the core without a clock read (CQ polls).
    pub fn peek_core_mut<R>(&self, f: impl FnOnce(&mut Core) -> R) -> R {
        f(&mut lock(&self.core))
    }

    /// Progress driven by a program thread (polling a CQ, or
    /// `Device::progress`): receive, run timers, send what is waiting. While
    /// program threads do this, the progress thread stays out of their way.
    pub fn progress_inline(&self) -> usize {
        self.note_app_poll();
        // First send what earlier calls left queued — posts, and the ACKs
        // and responses of what they received — and run due timers.
        self.poll_timers();
        // Then receive, without sending: the caller sees what landed (a
        // completion, a flag byte) before anything of ours goes out, and
        // what this produces leaves with its next call, batched with the
        // requests it posts in reaction. The multicast groups' sockets
        // too: the progress thread steps aside while the program polls,
        // and would leave their datagrams waiting until it paused (see
        // `crate::mcast`).
        let m = self.mcast.poll(self, false);
        m + self.poll_rx_with(INLINE_RX_BATCH, false)
    }

    /// Sends everything the core has queued, now.
    pub fn flush_now(&self) {
        let now = self.now();
        let core = lock(&self.core);
        self.after(core, now);
    }

    /// At process exit and device close: sends what the core and the send
    /// queue still hold — output a program thread left for a call that
    /// will not come, a backlog of a full socket — as a NIC's queues drain
    /// after the process is gone. Bounded: a lock another thread keeps, or
    /// a socket that stays full, ends it.
    pub fn drain(&self) {
        const TRIES: usize = 50;
        if self.forked_away() {
            return;
        }
        for _ in 0..TRIES {
            if let Some(core) = self.core.try_lock() {
                let now = self.now();
                self.after(core, now);
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        for _ in 0..TRIES {
            if let Some(mut tx) = self.tx.try_lock() {
                // What the send injector holds leaves too, as datagrams in
                // flight still arrive.
                if tx.faults.is_some() {
                    self.release_held_tx(&mut tx, self.now(), true);
                }
                if tx.pending.is_empty() {
                    break;
                }
                let (full, released) = self.send_locked(&mut tx);
                drop(tx);
                self.release(released);
                if !full {
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.flush_pcap();
    }

    /// A program thread stops driving progress (it is about to block):
    /// the progress thread takes over at once.
    pub fn app_idle(&self) {
        self.app_active.store(false, Ordering::SeqCst);
        let now = self.now();
        let core = lock(&self.core);
        self.after(core, now);
        self.waker.wake();
    }

    /// Runs due timers. Returns the next deadline.
    fn poll_timers(&self) -> Option<Instant> {
        let now = self.now();
        let mut core = lock(&self.core);
        if core.poll_timeout().is_some_and(|d| d <= now) {
            core.handle_timeout(now);
        }
        let next = core.poll_timeout();
        self.after(core, now);
        next
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.waker.wake();
        if let Some(p) = &self.pcap {
            let _ = lock(p).flush();
        }
    }

    /// Flushes the capture file.
    pub fn flush_pcap(&self) {
        if let Some(p) = &self.pcap {
            let _ = lock(p).flush();
        }
    }
}

/// What the receive injector needs to answer a request for local QP `q`.
fn responder(core: &Core, q: Qpn) -> Option<Responder> {
    core.responder_view(q).map(|v| Responder {
        dest_qpn: v.dest_qpn,
        dest: v.dest,
        msn: v.msn,
        rnr_timer: v.min_rnr_timer,
        traffic_class: v.traffic_class,
        hop_limit: v.hop_limit,
    })
}

/// Flips bit `b` of a datagram (bit `b % 8` of byte `b / 8`).
fn flip_bit(d: &mut [u8], b: u64) {
    if let Some(x) = d.get_mut((b / 8) as usize) {
        *x ^= 1 << (b % 8);
    }
}

/// The progress thread's loop.
pub(crate) fn run(shared: Arc<Shared>, mut poller: Poller) {
    let mut seen_polls = shared.app_polls.load(Ordering::Relaxed);
    while !shared.stop.load(Ordering::Relaxed) {
        // A program thread is spinning on its CQ and making progress itself:
        // competing for the socket and the core lock would only cost both
        // of us (two cores, several spinners). Check back after a window.
        let polls = shared.app_polls.load(Ordering::Relaxed);
        if polls != seen_polls {
            seen_polls = polls;
            shared.app_active.store(true, Ordering::SeqCst);
            // The program receives MADs with its polls; CM timers are ours.
            shared.cm_timers(None);
            std::thread::sleep(Duration::from_nanos(APP_ACTIVE_NS));
            continue;
        }
        if shared.app_active.swap(false, Ordering::SeqCst) {
            // The program stopped polling: send what its posts left queued.
            let now = shared.now();
            let core = lock(&shared.core);
            shared.after(core, now);
        }
        let got = shared.poll_rx();
        let next = shared.poll_timers();
        let next = shared.cm_timers(next);
        if !lock(&shared.tx).pending.is_empty() || shared.tx_fault_due(shared.now()) {
            shared.send_pending();
        }
        // Datagrams the fault injectors hold are due then.
        let next = match (next, shared.fault_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if got > 0 {
            continue;
        }
        let now = shared.now();
        let idle_ns = now
            .0
            .saturating_sub(shared.last_activity.load(Ordering::Relaxed));
        if idle_ns < shared.spin.as_nanos() as u64 {
            std::hint::spin_loop();
            continue;
        }
        let timeout = next.map(|d| Duration::from_nanos(d.0.saturating_sub(now.0)));
        // Sleep until a datagram, a wake-up or the next deadline (at most
        // a second, to notice `stop` even without a wake; briefly when the
        // socket was full and datagrams wait).
        let mut t = timeout
            .unwrap_or(Duration::from_secs(1))
            .min(Duration::from_secs(1));
        if !lock(&shared.tx).pending.is_empty() {
            t = t.min(Duration::from_micros(100));
        }
        if t.is_zero() {
            continue;
        }
        shared
            .sleep_until
            .store(now.0.saturating_add(t.as_nanos() as u64), Ordering::SeqCst);
        // Re-check after publishing: a deadline set in between is seen, and
        // so is output a program thread left in the core for its next call
        // (`output_left`): the loop takes it over instead of sleeping.
        let (again, left) = {
            let c = lock(&shared.core);
            (c.poll_timeout(), c.wants_transmit())
        };
        let cm = shared.cm_deadline.load(Ordering::SeqCst);
        let until = now.0 + t.as_nanos() as u64;
        let held = shared.fault_deadline().is_none_or(|d| d.0 >= until);
        if !left && again.is_none_or(|d| d.0 >= until) && cm >= until && held {
            // A shared device's datagrams come through the ring: sleep
            // only if it is still empty once the device process can see
            // that we sleep (it then writes our wake-up eventfd).
            match &shared.host {
                Some(h) => {
                    if h.prepare_sleep() {
                        let _ = poller.wait(Some(t));
                        h.drain_wake();
                    }
                    h.awake();
                }
                None => {
                    let _ = poller.wait(Some(t));
                }
            }
        }
        shared.sleep_until.store(u64::MAX, Ordering::SeqCst);
        if shared.pcap.is_some() {
            shared.flush_pcap();
        }
    }
}
