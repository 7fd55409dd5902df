//! The receive side: batches from the socket, the shared device's ring or
//! the same-host path's rings, through the receive injector into the
//! core, and what that produced sent back (`rx_batch`).

use super::*;

impl Shared {
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
        // (Unless the device process is late and this member receives
        // for it: then `rx_batch` below takes the socket's datagrams.)
        if let Some(h) = &self.host {
            if !h.deputy.as_ref().is_some_and(|d| d.active()) {
                h.receive_arrived();
            }
        }
        for _ in 0..ARRIVED_BATCHES {
            if self.rx_batch(lock(&self.rx), &self.socket, None, RX_BATCH, true, false) == 0 {
                break;
            }
        }
    }

    /// Receives up to `batch` buffers and processes them; with `send`, also
    /// sends what that produced (ACKs, responses) before returning.
    pub(super) fn poll_rx_with(&self, batch: usize, send: bool) -> usize {
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
    pub(super) fn rx_batch(
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
        // The same-host path's rings are read in place (no copy into the
        // receive buffers: the core places the payload straight from the
        // ring), unless the receive injector is on (it may hold datagrams
        // back, so it gets copies).
        let host = self.host.as_deref().filter(|_| group.is_none());
        let in_place = host.filter(|_| rx.faults.is_none());
        let n = match (host, in_place) {
            (Some(h), Some(_)) => h.recv_device(&mut slices[..batch], &mut rx.meta),
            (Some(h), None) => h.recv(&mut slices[..batch], &mut rx.meta, self.local),
            _ => socket
                .recv(&mut slices[..batch], &mut rx.meta)
                .unwrap_or_default(),
        };
        // The ring is empty: now and then (every `deputy::CHECK_MS`), and
        // on every call while the device process is late, receive for it
        // (`host::deputy`).
        let deputy = host
            .and_then(|h| h.deputy.as_ref())
            .filter(|d| n == 0 && d.due());
        // (With faults, datagrams the receive injector held may be due.)
        if n == 0
            && deputy.is_none()
            && !in_place.is_some_and(|h| h.paths_have_data())
            && !(rx.faults.is_some() && self.rx_fault_due.load(Ordering::SeqCst) <= self.now().0)
        {
            return 0;
        }
        let now = self.now();
        self.last_activity.store(now.0, Ordering::Relaxed);
        let mut count = 0;
        let mut core = self.lock_core();
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
        if let Some(d) = deputy {
            let dst = self.local.ip();
            count += d.receive(socket, batch, |src, tos, ttl, dgram| {
                let meta = RecvMeta {
                    src,
                    dst,
                    len: dgram.len(),
                    traffic_class: tos,
                    hop_limit: ttl,
                };
                let Some(inj) = faults.as_deref_mut() else {
                    self.deliver(&mut core, now, &meta, dgram);
                    return;
                };
                match inj.process(now.0, src.ip(), &meta, dgram, &mut |q| responder(&core, q)) {
                    Step::Pass { flip } if flip.is_empty() => {
                        self.deliver(&mut core, now, &meta, dgram);
                    }
                    Step::Pass { flip } => {
                        scratch.clear();
                        scratch.extend_from_slice(dgram);
                        for b in flip {
                            flip_bit(scratch, b);
                        }
                        self.deliver(&mut core, now, &meta, scratch);
                    }
                    Step::Held | Step::Gone => {}
                }
            });
        }
        if let Some(h) = in_place {
            // The same-host path's datagrams, in place; the ICRC of those
            // whose sender left it out is not checked
            // (`Core::handle_datagram_trusted_link`: a ring of shared
            // memory has no wire to corrupt them).
            let dst = self.local.ip();
            count += h.recv_paths_in_place(batch, |src, tos, ttl, icrc_left, dgram| {
                let meta = RecvMeta {
                    src,
                    dst,
                    len: dgram.len(),
                    traffic_class: tos,
                    hop_limit: ttl,
                };
                // A datagram whose sender left its ICRC out is not
                // checked (nothing but the ring carried it); one whose
                // sender computed it is, as over UDP (small packets, a
                // capturing sender, a sender's fault injector that
                // corrupts what it sends).
                if icrc_left {
                    if self.pcap.is_some() {
                        self.record_path_received(&meta, dgram);
                    }
                    core.handle_datagram_trusted_link(now, &meta, dgram);
                } else {
                    self.record_received(&meta, dgram);
                    core.handle_datagram(now, &meta, dgram);
                }
            });
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
    pub(super) fn deliver(&self, core: &mut Core, now: Instant, meta: &RecvMeta, dgram: &[u8]) {
        self.record_received(meta, dgram);
        core.handle_datagram(now, meta, dgram);
    }

    /// Writes a datagram of the same-host path to the capture, its ICRC
    /// computed here: a sender that captures nothing leaves it out of the
    /// ring (`Gather::icrc_left`), and the capture holds what the wire
    /// would have carried.
    #[cold]
    fn record_path_received(&self, meta: &RecvMeta, dgram: &[u8]) {
        let mut whole = dgram.to_vec();
        crate::host::member::fill_icrc(&mut whole, meta.src, self.local);
        self.record_received(meta, &whole);
    }

    /// Writes a received datagram to the capture, if one is on.
    #[inline]
    fn record_received(&self, meta: &RecvMeta, dgram: &[u8]) {
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
    }
}
