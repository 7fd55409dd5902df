//! Queue pairs: creation with their capabilities, destruction,
//! modification, queries, posting, counters.

use super::*;

impl Device {
    pub(super) fn qp_idx(&self, qpn: Qpn) -> VerbsResult<u32> {
        self.qpn_map
            .get(&qpn.value())
            .copied()
            .ok_or(VerbsError::NoSuchObject)
    }

    /// `ibv_create_qp`: returns the QP number. Capabilities are checked
    /// against the limits and rounded up to at least 1.
    pub fn create_qp(&mut self, init: &QpInit) -> VerbsResult<(Qpn, QpCap)> {
        let cap = self.check_qp_init(init)?;
        let qpn = self.draw_qpn()?;
        self.insert_qp(init, cap, qpn);
        Ok((qpn, cap))
    }

    /// [`Device::create_qp`] with a QP number the caller chooses.
    ///
    /// For replaying captured traffic and for tests, where the peer's
    /// packets already name the QP; applications use `create_qp`. Fails with
    /// `InvalidArgument` for the special QPs 0 and 1, and with `Busy` when a
    /// QP already has the number.
    pub fn create_qp_with_qpn(&mut self, init: &QpInit, qpn: Qpn) -> VerbsResult<QpCap> {
        if crate::qpn::is_reserved(qpn.value()) {
            return Err(VerbsError::InvalidArgument(
                "QPs 0, 1 and 0xffffff are reserved",
            ));
        }
        if self.qpn_map.contains_key(&qpn.value()) {
            return Err(VerbsError::Busy);
        }
        let cap = self.check_qp_init(init)?;
        self.insert_qp(init, cap, qpn);
        Ok(cap)
    }

    /// Validates `create_qp` arguments; returns the capabilities granted.
    pub(super) fn check_qp_init(&self, init: &QpInit) -> VerbsResult<QpCap> {
        if init.qp_type == QpType::XrcRecv {
            return Err(VerbsError::InvalidArgument(
                "an XRC TGT QP is created in an XRC domain (create_xrc_tgt_qp)",
            ));
        }
        self.check_pd(init.pd)?;
        if self.cqs.get(init.send_cq.0).is_none() || self.cqs.get(init.recv_cq.0).is_none() {
            return Err(VerbsError::InvalidArgument("unknown CQ"));
        }
        if let Some(s) = init.srq {
            // An XRC SRQ takes requests through TGT QPs only (uverbs'
            // create_qp: EINVAL).
            if self.srqs.get(s.0).is_none_or(|s| s.xrc.is_some()) {
                return Err(VerbsError::InvalidArgument("unknown or XRC SRQ"));
            }
        }
        let c = init.cap;
        if c.max_send_wr > limits::MAX_QP_WR
            || c.max_recv_wr > limits::MAX_QP_WR
            || c.max_send_sge > limits::MAX_SGE
            || c.max_recv_sge > limits::MAX_SGE
            || c.max_inline_data > limits::MAX_INLINE_DATA
        {
            return Err(VerbsError::InvalidArgument(
                "QP capabilities above device limits",
            ));
        }
        if self.qps.len() >= limits::MAX_QP {
            return Err(VerbsError::NoMemory);
        }
        // An XRC INI QP has no receive queue (uverbs' create_qp sets its
        // receive capabilities to 0).
        let no_rq = init.srq.is_some() || init.qp_type == QpType::XrcSend;
        Ok(QpCap {
            max_send_wr: c.max_send_wr.max(1),
            max_recv_wr: if no_rq { 0 } else { c.max_recv_wr.max(1) },
            max_send_sge: c.max_send_sge.max(1),
            max_recv_sge: if no_rq { 0 } else { c.max_recv_sge.max(1) },
            // Inline data is always possible up to the device limit.
            max_inline_data: limits::MAX_INLINE_DATA.max(c.max_inline_data),
        })
    }

    /// A fresh QP number, claimed from the shared device if there is one.
    pub(crate) fn draw_qpn(&mut self) -> VerbsResult<Qpn> {
        for _ in 0..crate::limits::QPN_CLAIM_TRIES {
            let map = &self.qpn_map;
            let qpn = self
                .qpns
                .alloc(&mut self.rng, |n| map.contains_key(&n))
                .ok_or(VerbsError::NoMemory)?;
            let ok = match &mut self.qpn_claim {
                None => true,
                Some(claim) => claim(qpn.value(), true),
            };
            if ok {
                return Ok(qpn);
            }
        }
        Err(VerbsError::NoMemory)
    }

    pub(super) fn insert_qp(&mut self, init: &QpInit, cap: QpCap, qpn: Qpn) {
        let mut init2 = *init;
        init2.cap = cap;
        let idx = self.qps.insert(Qp::new(qpn, &init2));
        self.qpn_map.insert(qpn.value(), idx);
        for cq in [init.send_cq, init.recv_cq] {
            if let Some(c) = self.cqs.get_mut(cq.0) {
                c.users += 1;
            }
        }
        if let Some(s) = init.srq.and_then(|s| self.srqs.get_mut(s.0)) {
            s.users += 1;
        }
    }

    /// `ibv_destroy_qp`. Outstanding work is dropped without completions.
    pub fn destroy_qp(&mut self, qpn: Qpn) -> VerbsResult<()> {
        let idx = self.qp_idx(qpn)?;
        let qp = self.qps.remove(idx).ok_or(VerbsError::NoSuchObject)?;
        self.qpn_map.remove(&qpn.value());
        self.qpns.released(qpn.value());
        if let Some(claim) = &mut self.qpn_claim {
            claim(qpn.value(), false);
        }
        self.counters += &qp.counters;
        self.mcast_forget_qp(qpn);
        if !self.forget_xrc_qp(&qp) {
            for cq in [qp.send_cq, qp.recv_cq] {
                if let Some(c) = self.cqs.get_mut(cq.0) {
                    c.users -= 1;
                }
            }
            if let Some(s) = qp.srq.and_then(|s| self.srqs.get_mut(s.0)) {
                s.users -= 1;
            }
        }
        self.tx_ready.retain(|&i| i != idx);
        self.budget.inflight -= qp.budget_counted;
        if qp.budget_parked {
            self.budget.wait.retain(|&i| i != idx);
        }
        if qp.budget_woken {
            self.budget.granted -= 1;
        }
        self.release_budget();
        if let Some(t) = qp.armed {
            self.timers.remove(&(t, idx));
        }
        // Type 2 windows bound to the QP go free with it.
        self.mrs.unbind_qp(qpn);
        Ok(())
    }

    /// `ibv_modify_qp`.
    pub fn modify_qp(
        &mut self,
        now: Instant,
        qpn: Qpn,
        attr: &QpAttr,
        mask: AttrMask,
    ) -> VerbsResult<()> {
        let idx = self.qp_idx(qpn)?;
        let qp = self.qps.get_mut(idx).ok_or(VerbsError::NoSuchObject)?;
        let before = (qp.counters, qp.state);
        let mut ctx = ctx!(self, now);
        qp.modify(attr, mask, &mut ctx)?;
        if self.notes.on {
            let after = (&qp.counters, qp.state);
            let b = (&before.0, before.1);
            self.notes.derive(qpn, b, after, None, None);
        }
        Self::wake(&mut self.tx_ready, qp, idx);
        Self::sync_timer(&mut self.timers, &mut self.budget, qp, idx);
        self.release_budget();
        Ok(())
    }

    /// `ibv_query_qp`: attributes and capabilities.
    pub fn query_qp(&self, qpn: Qpn) -> VerbsResult<(QpAttr, QpCap, QpType)> {
        let qp = self
            .qps
            .get(self.qp_idx(qpn)?)
            .ok_or(VerbsError::NoSuchObject)?;
        Ok((qp.query(), qp.cap, qp.qp_type))
    }

    /// The UDP port RC/UC QP `qpn` takes packets from: `None` until its
    /// first expected packet after RTR told it, or [`Device::set_peer_port`]
    /// did (see `qp::pin`).
    pub fn peer_port(&self, qpn: Qpn) -> VerbsResult<Option<u16>> {
        Ok(self
            .qps
            .get(self.qp_idx(qpn)?)
            .ok_or(VerbsError::NoSuchObject)?
            .peer_port)
    }

    /// Pins RC/UC QP `qpn` to a peer that sends from UDP port `port` (the
    /// peer told it out of band): from then on packets from another port
    /// are dropped as `wrong_peer`, from the first packet on. Cleared when
    /// the QP goes to RESET or its address vector names another peer.
    pub fn set_peer_port(&mut self, qpn: Qpn, port: u16) -> VerbsResult<()> {
        let idx = self.qp_idx(qpn)?;
        let qp = self.qps.get_mut(idx).ok_or(VerbsError::NoSuchObject)?;
        if qp.qp_type == QpType::Ud {
            return Err(VerbsError::InvalidArgument("a UD QP has no peer"));
        }
        qp.peer_port = Some(port);
        Ok(())
    }

    /// What RC QP `qpn`'s responder puts in an answer to a request from
    /// its peer — its peer's QP and address, its MSN and RNR timer — while
    /// it takes requests (RTR and after, not in error); `None` otherwise.
    /// Read-only: a driver's fault injector answers requests on the wire
    /// with it (softrdma-link) without touching the transport.
    pub fn responder_view(&self, qpn: Qpn) -> Option<ResponderView> {
        let qp = self.qps.get(self.qp_idx(qpn).ok()?)?;
        let takes_requests = matches!(
            qp.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        );
        (qp.qp_type == QpType::Rc && takes_requests).then(|| ResponderView {
            dest_qpn: qp.attr.dest_qp_num,
            dest: std::net::SocketAddr::new(qp.attr.ah_attr.dest, qp.attr.ah_attr.dest_port),
            msn: qp.resp.msn,
            min_rnr_timer: qp.attr.min_rnr_timer,
            traffic_class: qp.attr.ah_attr.traffic_class,
            hop_limit: qp.attr.ah_attr.hop_limit,
        })
    }

    /// State of a QP.
    pub fn qp_state(&self, qpn: Qpn) -> VerbsResult<QpState> {
        Ok(self
            .qps
            .get(self.qp_idx(qpn)?)
            .ok_or(VerbsError::NoSuchObject)?
            .state)
    }

    /// `ibv_post_send`.
    pub fn post_send(&mut self, now: Instant, qpn: Qpn, wr: SendWr) -> VerbsResult<()> {
        let idx = self.qp_idx(qpn)?;
        let qp = self.qps.get_mut(idx).ok_or(VerbsError::NoSuchObject)?;
        let mut ctx = ctx!(self, now);
        qp.post_send(wr, &mut ctx)?;
        Self::wake(&mut self.tx_ready, qp, idx);
        Self::sync_timer(&mut self.timers, &mut self.budget, qp, idx);
        Ok(())
    }

    /// `ibv_post_recv`.
    pub fn post_recv(&mut self, now: Instant, qpn: Qpn, wr: RecvWr) -> VerbsResult<()> {
        let idx = self.qp_idx(qpn)?;
        let qp = self.qps.get_mut(idx).ok_or(VerbsError::NoSuchObject)?;
        let mut ctx = ctx!(self, now);
        let r = qp.post_recv(wr, &mut ctx);
        Self::sync_timer(&mut self.timers, &mut self.budget, qp, idx);
        r
    }

    /// Counters of the device: its own drops plus every QP's.
    pub fn counters(&self) -> Counters {
        let mut c = self.counters;
        for (_, q) in self.qps.iter() {
            c += &q.counters;
        }
        c
    }

    /// How many received packets the device has refused so far: malformed,
    /// bad ICRC or P_Key, another transport, not from the connected peer
    /// (`wrong_peer`), READ/atomic beyond `max_dest_rd_atomic`, answers
    /// not queued, UD Q_Key mismatches. One number kept as they happen, so
    /// a driver can tell at the cost of a load whether to look at
    /// [`Device::counters`] (which sums every QP's) and log.
    pub fn refusals(&self) -> u64 {
        self.refusals
    }

    /// Counters of one QP.
    pub fn qp_counters(&self, qpn: Qpn) -> VerbsResult<Counters> {
        Ok(self
            .qps
            .get(self.qp_idx(qpn)?)
            .ok_or(VerbsError::NoSuchObject)?
            .counters)
    }

    /// Makes the timer set agree with the QP's deadline. Also counts the
    /// QP's packets in flight against the device's budget, and parks the
    /// QP when it waits for that budget.
    pub(crate) fn sync_timer(
        timers: &mut BTreeSet<(Instant, u32)>,
        budget: &mut Budget,
        qp: &mut Qp,
        idx: u32,
    ) {
        budget.sync(qp);
        if std::mem::take(&mut qp.req.budget_blocked) && !qp.budget_parked {
            if std::mem::take(&mut qp.budget_woken) {
                budget.granted -= 1;
            }
            qp.budget_parked = true;
            qp.counters.budget_waits += 1;
            budget.wait.push_back(idx);
        }
        let d = qp.deadline();
        if d != qp.armed {
            if let Some(old) = qp.armed {
                timers.remove(&(old, idx));
            }
            if let Some(new) = d {
                timers.insert((new, idx));
            }
            qp.armed = d;
        }
    }

    /// Wakes QPs waiting for the in-flight budget, one per free grant
    /// (see [`Budget`]).
    pub(super) fn release_budget(&mut self) {
        let b = &mut self.budget;
        let grant = crate::limits::BUDGET_GRANT_PKTS.min(b.limit).max(1);
        while b.limit == 0 || b.left() >= (b.granted + 1).saturating_mul(grant) {
            let Some(idx) = b.wait.pop_front() else {
                break;
            };
            let Some(qp) = self.qps.get_mut(idx) else {
                continue;
            };
            qp.budget_parked = false;
            qp.budget_woken = true;
            b.granted += 1;
            Self::wake(&mut self.tx_ready, qp, idx);
        }
    }

    pub(crate) fn wake(tx_ready: &mut VecDeque<u32>, qp: &mut Qp, idx: u32) {
        if !qp.tx_queued {
            qp.tx_queued = true;
            tx_ready.push_back(idx);
        }
    }
}
