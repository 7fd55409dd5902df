//! The CM's tables: local ids, the remote-id and half-open tables, the
//! message queue and timers of an id, timewait (Linux cm.c's
//! `cm_insert_remote_id`, `cm_enter_timewait`, …).

use super::*;

impl Cm {
    /// Linux's TID for messages an id starts (`cm_form_tid`): `hi_tid`
    /// above the comm ID as a little-endian CPU reads its big-endian bytes.
    pub(super) fn form_tid(&self, local_id: u32) -> u64 {
        (self.cfg.tid_high as u64) << 32 | local_id.swap_bytes() as u64
    }

    /// A fresh comm ID: random, non-zero, not used by a live id or a
    /// timewait record.
    pub(super) fn alloc_local_id(&mut self) -> Option<u32> {
        // The table is far from full (MAX_IDS << 2^32): a few draws do.
        for _ in 0..64 {
            let id = self.ids_gen.next_u32();
            if id != 0 && !self.ids.contains_key(&id) && !self.tw_locals.contains(&id) {
                return Some(id);
            }
        }
        None
    }

    pub(super) fn new_conn(&self, local_id: u32, state: State, peer: IpAddr) -> Conn {
        Conn {
            state,
            local_id,
            remote_id: 0,
            peer,
            tid: 0,
            service_id: ServiceId(0),
            listen_id: None,
            qp_type: QpType::Rc,
            local_qpn: Qpn::new(0),
            remote_qpn: Qpn::new(0),
            remote_guid: 0,
            timeout_ns: 0,
            max_cm_retries: 0,
            responder_resources: 0,
            initiator_depth: 0,
            sq_psn: Psn::ZERO,
            rq_psn: Psn::ZERO,
            retry_count: 0,
            rnr_retry_count: 0,
            path_mtu: 0,
            pkey: PKey::DEFAULT,
            path: Path {
                sgid: Default::default(),
                dgid: softrdma_wire::Gid::from_ip(peer),
                flow_label: 0,
                traffic_class: 0,
                hop_limit: 0,
                sl: 0,
                pkey: PKey::DEFAULT,
                mtu: 0,
                rate: 0,
                packet_life_time: 0,
            },
            av_timeout: 0,
            service_timeout: 0,
            saved_private: Vec::new(),
            msg: None,
            in_remote_tables: false,
            timewait: None,
        }
    }

    pub(super) fn conn(&self, id: CmId) -> Result<&Conn, CmError> {
        self.ids.get(&id.0).ok_or(CmError::UnknownId)
    }

    pub(super) fn conn_mut(&mut self, id: CmId) -> Result<&mut Conn, CmError> {
        self.ids.get_mut(&id.0).ok_or(CmError::UnknownId)
    }

    /// Queues a MAD (bounded).
    pub(super) fn send(&mut self, dst: IpAddr, dst_qpn: Qpn, mad: [u8; MAD_LEN]) {
        if self.tx.len() >= limits::MAX_TX_QUEUE {
            self.counters.tx_queue_drops += 1;
            return;
        }
        self.counters.tx_mads += 1;
        let view = Mad::new_unchecked(&mad[..]);
        if view.mgmt_class() == mad::class::CM && view.method() == mad::method::SEND {
            match view.attr_id() {
                attr::REJ => self.counters.tx_rej += 1,
                attr::MRA => self.counters.tx_mra += 1,
                _ => {}
            }
        }
        self.tx.push_back(Transmit { dst, dst_qpn, mad });
    }

    /// Emits a CM MAD; `None` only if a value does not fit (the public
    /// entry points check their parameters first, so this does not happen).
    pub(super) fn build(tid: u64, attr_mod: u32, msg: CmMsg<'_>) -> Option<[u8; MAD_LEN]> {
        CmMadRepr::new(tid, attr_mod, msg).to_bytes().ok()
    }

    /// Sends an id's retransmitted MAD and arms its timer.
    pub(super) fn send_msg(
        &mut self,
        now: Instant,
        local: u32,
        mad: [u8; MAD_LEN],
        timeout_ns: u64,
        retries: u8,
    ) {
        self.cancel_msg(local);
        let Some(c) = self.ids.get_mut(&local) else {
            return;
        };
        let deadline = now.add_ns(timeout_ns);
        c.msg = Some(Outstanding {
            mad,
            timeout_ns,
            retries_left: retries,
            deadline,
        });
        let peer = c.peer;
        self.timers.insert((deadline, Timer::Msg(local)));
        self.send(peer, Qpn::GSI, mad);
    }

    /// Stops retransmitting an id's MAD (`ib_cancel_mad`).
    pub(super) fn cancel_msg(&mut self, local: u32) {
        if let Some(m) = self.ids.get_mut(&local).and_then(|c| c.msg.take()) {
            self.timers.remove(&(m.deadline, Timer::Msg(local)));
        }
    }

    /// Records a connection in the duplicate and stale tables.
    pub(super) fn insert_remote(&mut self, local: u32) {
        let Some(c) = self.ids.get_mut(&local) else {
            return;
        };
        c.in_remote_tables = true;
        let (g, r, q) = (c.remote_guid, c.remote_id, c.remote_qpn.value());
        self.remote_ids.insert((g, r), local);
        self.remote_qps.insert((g, q), local);
    }

    /// `cm_remove_remote`.
    pub(super) fn remove_remote(&mut self, local: u32) {
        let Some(c) = self.ids.get_mut(&local) else {
            return;
        };
        if !c.in_remote_tables {
            return;
        }
        c.in_remote_tables = false;
        let (g, r, q) = (c.remote_guid, c.remote_id, c.remote_qpn.value());
        if self.remote_ids.get(&(g, r)) == Some(&local) {
            self.remote_ids.remove(&(g, r));
        }
        if self.remote_qps.get(&(g, q)) == Some(&local) {
            self.remote_qps.remove(&(g, q));
        }
    }

    /// `cm_reset_to_idle`.
    pub(super) fn reset_to_idle(&mut self, local: u32) {
        self.remove_remote(local);
        if let Some(c) = self.ids.get_mut(&local) {
            c.state = State::Idle;
        }
    }

    /// `cm_enter_timewait`: leaves the live tables, starts a timewait
    /// record of `ms(av timeout)` (2048 ms over rxe).
    pub(super) fn enter_timewait(&mut self, now: Instant, local: u32) {
        self.remove_remote(local);
        if !self.ids.contains_key(&local) {
            return;
        }
        if self.timewait.len() >= limits::MAX_TIMEWAIT {
            // Out of records: the oldest ends early (its id, if alive,
            // gets its TIMEWAIT_EXIT now) rather than the table growing
            // without bound.
            if let Some((&seq, tw)) = self.timewait.first_key_value() {
                self.timers.remove(&(tw.at, Timer::Timewait(seq)));
                self.on_timewait_end(seq);
            }
        }
        let Some(c) = self.ids.get_mut(&local) else {
            return;
        };
        self.tw_seq += 1;
        let seq = self.tw_seq;
        let at = now.add_ns(ms_to_ns(cm_time_ms(c.av_timeout)));
        let tw = Tw {
            local_id: local,
            remote_guid: c.remote_guid,
            remote_qpn: c.remote_qpn.value(),
            at,
        };
        c.state = State::Timewait;
        c.timewait = Some(seq);
        self.timewait.insert(seq, tw);
        self.tw_qps.insert((tw.remote_guid, tw.remote_qpn, seq));
        self.tw_locals.insert(local);
        self.timers.insert((at, Timer::Timewait(seq)));
    }

    /// A passive id whose request was not yet established: a REQ or
    /// SIDR_REQ received, answered or not.
    pub(super) fn is_half_open(c: &Conn) -> bool {
        c.listen_id.is_some()
            && matches!(
                c.state,
                State::ReqRcvd
                    | State::MraReqSent
                    | State::RepSent
                    | State::MraRepRcvd
                    | State::SidrReqRcvd
            )
    }

    /// The half-open ids from `src`; index entries of ids no longer
    /// half-open are dropped on the way, so the index holds live ids only
    /// and a count costs the source's own entries.
    pub(super) fn half_open_from(&mut self, src: IpAddr) -> usize {
        let mut n = 0;
        let mut stale = Vec::new();
        for &(_, k) in self.half_open.range((src, 0)..=(src, u32::MAX)) {
            match self.ids.get(&k) {
                Some(c) if Self::is_half_open(c) => n += 1,
                _ => stale.push(k),
            }
        }
        for k in stale {
            self.half_open.remove(&(src, k));
        }
        n
    }

    /// Whether a new request from `src` would exceed its share of
    /// half-open ids; counts the refusal.
    pub(super) fn over_half_open_limit(&mut self, src: IpAddr) -> bool {
        if self.half_open_from(src) < limits::MAX_HALF_OPEN_PER_SOURCE {
            return false;
        }
        self.counters.rx_refused_half_open += 1;
        true
    }

    /// Drops `local` from the indexes before its id goes.
    pub(super) fn forget_half_open(&mut self, local: u32) {
        if let Some(c) = self.ids.get(&local) {
            self.half_open.remove(&(c.peer, local));
        }
    }

    pub(super) fn push_event(&mut self, e: Event) {
        self.events.push_back(e);
    }

    /// Room for a new passive id and its event.
    pub(super) fn has_room(&self) -> bool {
        self.ids.len() < limits::MAX_IDS && self.events.len() < limits::MAX_PENDING_EVENTS
    }
}
