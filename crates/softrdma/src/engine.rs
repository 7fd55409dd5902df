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

mod faults;
mod pending;
mod rx;
mod samehost;
mod tx;
use faults::{flip_bit, responder, Refuser};
use pending::Pending;
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
    /// Core lock acquisitions other than CQ polls' (`lock_core`): the
    /// core may have changed since a CQ poll that found its CQ empty
    /// when this moved (see `poll_cq`).
    core_gen: AtomicU64,
    /// Core lock acquisitions by CQ polls (`poll_cq`), counted for tests
    /// (`Device::lock_counts`).
    cq_locks: AtomicU64,
    /// A program thread's call left output in the core for its next
    /// call (`leave_for_next_call`); cleared when the core's output is
    /// sent (`after`). Lets an empty poll skip the core lock.
    left_output: AtomicBool,
    /// Datagrams wait in the send queue (the socket was full), as of the
    /// last send (`send_locked`).
    tx_backlog: AtomicBool,
}

/// Serial numbers of devices.
static SERIAL: AtomicU64 = AtomicU64::new(1);

impl Drop for Shared {
    fn drop(&mut self) {
        // Refusals not yet reported (the last period's): reported now.
        let core = self.lock_core();
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
            core_gen: AtomicU64::new(0),
            cq_locks: AtomicU64::new(0),
            left_output: AtomicBool::new(false),
            tx_backlog: AtomicBool::new(false),
        })
    }

    /// Whether this process is a forked child of the one that opened the
    /// device: its progress thread does not exist here, its locks may be
    /// held forever by threads that do not either, and its socket is the
    /// parent's. Nothing of it may be used, locked or sent.
    pub fn forked_away(&self) -> bool {
        softrdma_io::fork_generation() != self.generation
    }

    /// Takes the core lock for anything but a CQ poll: the core may
    /// change, and a CQ found empty before may not be any more.
    fn lock_core(&self) -> MutexGuard<'_, Core> {
        let core = lock(&self.core);
        // Under the lock, before any change: a CQ poll that reads the
        // old value ran before it (see `poll_cq`).
        self.core_gen.fetch_add(1, Ordering::SeqCst);
        core
    }

    fn try_lock_core(&self) -> Option<MutexGuard<'_, Core>> {
        let core = self.core.try_lock()?;
        self.core_gen.fetch_add(1, Ordering::SeqCst);
        Some(core)
    }

    /// A CQ poll: `f` takes completions from the core. `empty_at` is the
    /// CQ handle's mark: the value of `core_gen` when a poll last found
    /// it empty. Completions are only added under the core lock, taken
    /// through `lock_core`, which moves `core_gen` first: while it has
    /// not moved, the CQ is still empty and the poll returns at once —
    /// no lock, no clock. `room`: `f` may take completions (a poll for
    /// none finds nothing whatever the CQ holds, and marks nothing).
    pub fn poll_cq(
        &self,
        empty_at: &AtomicU64,
        room: bool,
        f: impl FnOnce(&mut Core) -> softrdma_proto::VerbsResult<usize>,
    ) -> softrdma_proto::VerbsResult<usize> {
        if empty_at.load(Ordering::SeqCst) == self.core_gen.load(Ordering::SeqCst) {
            return Ok(0);
        }
        let mut core = lock(&self.core);
        self.cq_locks.fetch_add(1, Ordering::Relaxed);
        // Every change counted in it has ended (its lock was released).
        let g = self.core_gen.load(Ordering::SeqCst);
        let r = f(&mut core);
        drop(core);
        empty_at.store(
            if room && matches!(r, Ok(0)) {
                g
            } else {
                u64::MAX
            },
            Ordering::SeqCst,
        );
        r
    }

    /// (Core lock acquisitions other than CQ polls', CQ polls' core lock
    /// acquisitions.)
    pub fn lock_counts(&self) -> (u64, u64) {
        (
            self.core_gen.load(Ordering::SeqCst),
            self.cq_locks.load(Ordering::SeqCst),
        )
    }

    /// The core's clock.
    pub fn now(&self) -> Instant {
        Instant(self.epoch.elapsed().as_nanos() as u64)
    }

    /// Runs `f` on the core, then delivers its events and sends the packets
    /// it produced. Every verb goes through here.
    pub fn with_core<R>(&self, f: impl FnOnce(&mut Core, Instant) -> R) -> R {
        let now = self.now();
        let mut core = self.lock_core();
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
        let mut core = self.lock_core();
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
        if left {
            self.left_output.store(true, Ordering::SeqCst);
        }
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
        f(&self.lock_core())
    }

    fn after<'a>(&'a self, mut core: MutexGuard<'a, Core>, now: Instant) {
        // What a program thread left for its next call leaves now.
        self.left_output.store(false, Ordering::SeqCst);
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
            if self.tx_backlog.load(Ordering::SeqCst) || self.tx_fault_due(now) {
                self.send_pending();
            }
        }
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
        let mut core = self.lock_core();
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
        let mut core = self.lock_core();
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
        let mut core = self.lock_core();
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

    /// The MADs waiting in QP 1's queue.
    pub fn take_gsi(&self) -> Vec<GsiMad> {
        let mut core = self.lock_core();
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
        let mut core = self.lock_core();
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

    /// Changes the core without a clock read.
    pub fn peek_core_mut<R>(&self, f: impl FnOnce(&mut Core) -> R) -> R {
        f(&mut self.lock_core())
    }

    /// Progress driven by a program thread (polling a CQ, or
    /// `Device::progress`): send what is waiting, receive. While program
    /// threads do this, the progress thread stays out of their way, and
    /// runs the timers (every `APP_ACTIVE_NS`, after receiving what has
    /// arrived: see `poll_timers`). When nothing waits and nothing
    /// arrived, this is a few atomic loads and one receive system call
    /// that finds the socket empty: no core lock, no clock read.
    pub fn progress_inline(&self) -> usize {
        self.note_app_poll();
        // First send what earlier calls left queued — posts, and the ACKs
        // and responses of what they received — and datagrams a full
        // socket kept (and, with faults, what the send injector holds).
        if self.left_output.load(Ordering::SeqCst)
            || self.tx_backlog.load(Ordering::SeqCst)
            || self.faulty
        {
            self.flush_now();
        }
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
        let core = self.lock_core();
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
            if let Some(core) = self.try_lock_core() {
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
        let core = self.lock_core();
        self.after(core, now);
        self.waker.wake();
    }

    /// While a program thread drives progress: runs the timers if one is
    /// due, and otherwise leaves the core as it is — what the program's
    /// calls left there waits for its next call, batched with it. (A look
    /// changes nothing: no `core_gen` move, so the program's CQ polls
    /// stay lock-free.)
    fn timers_if_due(&self) {
        let now = self.now();
        let due = lock(&self.core).poll_timeout().is_some_and(|d| d <= now);
        if due {
            self.poll_timers();
        }
    }

    /// Runs due timers, after receiving what has arrived: an ACK waiting
    /// in the socket must stop the probe or the retransmission it would
    /// otherwise cause (a host that did not run this thread for longer
    /// than the probe timeout finds both the deadline passed and the ACK
    /// there). Returns the next deadline.
    fn poll_timers(&self) -> Option<Instant> {
        let due = |core: &Core, now: Instant| core.poll_timeout().is_some_and(|d| d <= now);
        let now = self.now();
        let core = self.lock_core();
        if !due(&core, now) {
            let next = core.poll_timeout();
            self.after(core, now);
            return next;
        }
        drop(core);
        // Bounded: a peer that keeps sending does not hold the timers
        // back for more than `ARRIVED_BATCHES` batches.
        for _ in 0..ARRIVED_BATCHES {
            if self.rx_batch(lock(&self.rx), &self.socket, None, RX_BATCH, true, true) == 0 {
                break;
            }
        }
        let now = self.now();
        let mut core = self.lock_core();
        if due(&core, now) {
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
            // The program receives MADs with its polls; timers are ours
            // (an empty poll reads no clock), the transport's and the
            // CM's.
            shared.timers_if_due();
            shared.cm_timers(None);
            std::thread::sleep(Duration::from_nanos(APP_ACTIVE_NS));
            continue;
        }
        if shared.app_active.swap(false, Ordering::SeqCst) {
            // The program stopped polling: send what its posts left queued.
            let now = shared.now();
            let core = shared.lock_core();
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
        // Receiving for a late device process (`host::deputy`): nobody
        // wakes us for the socket's datagrams.
        if shared
            .host
            .as_ref()
            .and_then(|h| h.deputy.as_ref())
            .is_some_and(|d| d.active())
        {
            t = t.min(Duration::from_millis(1));
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
            let c = shared.lock_core();
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
