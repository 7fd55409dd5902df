//! Fault injection on a device's datagrams (`SOFTRDMA_FAULTS`, softrdma-link):
//! the send injector between the core and the send queue, the receive one
//! between the socket and the core, their deadlines and counters, and
//! the refuser that makes send calls fail as a full socket would
//! (`DeviceOptions::refuse_sends`).

use super::*;

/// Refuses a fraction of send calls (xorshift64; the state is only
/// touched under the `tx` lock, the atomic just makes it shareable).
pub(super) struct Refuser {
    pub(super) threshold: u64,
    pub(super) state: AtomicU64,
}

impl Refuser {
    pub(super) fn new(fraction: f64) -> Option<Refuser> {
        (fraction > 0.0).then(|| Refuser {
            threshold: (fraction.min(1.0) * u64::MAX as f64) as u64,
            state: AtomicU64::new(0x2545_f491_4f6c_dd1d),
        })
    }
    pub(super) fn refuse(&self) -> bool {
        let mut x = self.state.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.state.store(x, Ordering::Relaxed);
        x < self.threshold
    }
}

impl Shared {
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

    /// Whether the send injector holds a datagram due at `now` (one branch
    /// without faults).
    pub(super) fn tx_fault_due(&self, now: Instant) -> bool {
        self.faulty && self.tx_fault_due.load(Ordering::SeqCst) <= now.0
    }

    /// When the next datagram either injector holds is due.
    pub(super) fn fault_deadline(&self) -> Option<Instant> {
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
    pub(super) fn inject_tx(&self, tx: &mut TxQueue, mut p: Pending, now: Instant) {
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

    /// Wakes the progress thread if an injector's new deadline `due`
    /// comes before the end of its sleep (it may sleep past it), and logs
    /// the injector's events.
    fn after_injection<M: Clone>(&self, inj: &mut Injector<M>, due: Option<u64>) {
        if let Some(due) = due {
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

    /// Publishes the send injector's next deadline and logs its events.
    pub(super) fn after_tx_injection(&self, tx: &mut TxQueue) {
        let Some(inj) = tx.faults.as_mut() else {
            return;
        };
        let due = inj.next_due().unwrap_or(u64::MAX);
        let before = self.tx_fault_due.swap(due, Ordering::SeqCst);
        self.after_injection(inj, (due < before).then_some(due));
    }

    /// Queues what the send injector held and is now due (everything, when
    /// the device closes: `all`).
    pub(super) fn release_held_tx(&self, tx: &mut TxQueue, now: Instant, all: bool) {
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

    /// After a received batch went through the receive injector: its
    /// answers leave now (the core lock is held: `tx` comes after it), its
    /// next deadline is published, its events logged.
    #[cold]
    #[inline(never)]
    pub(super) fn after_rx_injection(&self, inj: &mut Injector<RecvMeta>) {
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
        self.after_injection(inj, Some(due));
    }
}

/// What the receive injector needs to answer a request for local QP `q`.
pub(super) fn responder(core: &Core, q: Qpn) -> Option<Responder> {
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
pub(super) fn flip_bit(d: &mut [u8], b: u64) {
    if let Some(x) = d.get_mut((b / 8) as usize) {
        *x ^= 1 << (b % 8);
    }
}
