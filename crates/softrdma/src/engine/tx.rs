//! The send side: packets pulled from the core (`flush`, under `core`
//! then `tx`), queued, captured, and sent in GSO runs or through the
//! same-host path (`send_locked`, under `tx` alone).

use super::*;

impl Shared {
    /// Pulls packets from the core and sends them, in order, until the
    /// core has nothing more or the socket is full.
    pub(super) fn flush<'a>(&'a self, mut core: MutexGuard<'a, Core>, now: Instant) {
        loop {
            let mut tx = lock(&self.tx);
            let mut n = 0;
            // The send injector copies, corrupts, holds: whole datagrams.
            let faults = tx.faults.is_some();
            // A socket of our own: payloads are copied into the packet
            // buffer rather than gathered from registered memory. The
            // ICRC reads every payload byte before it leaves anyway
            // (through a bounce buffer when gathered), so copying costs no
            // extra pass: it reads the region once, CRCs what it copied
            // while it is in L1, and the kernel copies from a buffer in
            // cache; the completion needs no release gate. 11 % fewer
            // instructions per 64 KiB WRITE (`scripts/cost bw`, issue
            // 22). A member of a device process keeps gathering: its rings
            // (the same-host path, the device process's) take the pieces
            // straight from registered memory.
            let copy = faults || self.host.is_none();
            // A device with same-host paths leaves the ICRC of zero-copy
            // datagrams to the link: UDP computes it as they leave
            // (`send_queued`), the rings do not carry it. A capture
            // records every datagram whole, so with one on it is computed
            // at once.
            let icrc_left =
                self.pcap.is_none() && self.host.as_ref().is_some_and(|h| h.paths.is_some());
            while n < TX_BATCH && tx.pending.len() < TX_QUEUE_MAX {
                let mut buf = tx.pool.pop().unwrap_or_else(|| vec![0u8; MIN_TX_BUF]);
                let t = if copy {
                    core.poll_transmit(now, &mut buf)
                } else if icrc_left {
                    core.poll_transmit_gather_icrc_left(now, &mut buf)
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
            core = self.lock_core();
        }
    }

    pub(super) fn send_pending(&self) {
        let mut tx = lock(&self.tx);
        let (_, released) = self.send_locked(&mut tx);
        drop(tx);
        self.release(released);
    }

    /// Sends queued datagrams. Returns whether the socket is full, and the
    /// highest gather sequence number of the datagrams sent or dropped.
    pub(super) fn send_locked(&self, tx: &mut TxQueue) -> (bool, u64) {
        let r = self.send_queued(tx);
        self.tx_backlog
            .store(!tx.pending.is_empty(), Ordering::SeqCst);
        r
    }

    fn send_queued(&self, tx: &mut TxQueue) -> (bool, u64) {
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
                samehost::Lead::Udp(limit) => {
                    // Only a device with same-host paths leaves ICRCs out
                    // (`poll` above): the UDP-only path skips this walk.
                    if self.host.as_ref().is_some_and(|h| h.paths.is_some()) {
                        // (What one `send_some` can take at most.)
                        let most =
                            limit.min(softrdma_io::BATCH_SIZE * softrdma_io::MAX_GSO_SEGMENTS);
                        for d in tx.pending.iter_mut().take(most) {
                            d.fill_icrc();
                        }
                    }
                    self.send_some(tx, limit)
                }
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

    pub(super) fn capture_sent<'a>(&self, sent: impl Iterator<Item = &'a Pending>) {
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
    pub(super) fn send_some(&self, tx: &TxQueue, limit: usize) -> std::io::Result<usize> {
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
}
