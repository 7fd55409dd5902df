//! The handlers of received MADs: one `on_*` a message type, as Linux
//! cm.c's `cm_*_handler`.

use super::*;

impl Cm {
    /// A MAD received on QP 1 from `src` (its source IP) and QP `src_qpn`.
    /// The driver has already checked the packet (ICRC, P_Key, Q_Key
    /// 0x80010000, UD SEND to QP 1). Anything malformed or unexpected is
    /// dropped or answered as Linux's MAD layer and CM answer it; nothing
    /// panics.
    pub fn handle_mad(&mut self, now: Instant, src: IpAddr, src_qpn: Qpn, mad: &[u8]) {
        self.counters.rx_mads += 1;
        if !self.receive(now, src, src_qpn, mad) {
            self.counters.rx_dropped += 1;
        }
    }

    /// Returns false when the MAD was dropped.
    pub(super) fn receive(&mut self, now: Instant, src: IpAddr, src_qpn: Qpn, mad: &[u8]) -> bool {
        if mad::check_mad_len(mad).is_err() {
            return false;
        }
        let Ok(view) = Mad::new_checked(mad) else {
            return false;
        };
        let Ok(hdr) = MadHeaderRepr::parse(&view) else {
            return false;
        };
        let rx = Rx {
            now,
            src,
            src_qpn,
            hdr,
            mad,
        };
        // validate_mad (mad.c): base version 1; no subnet management on
        // QP 1; CM attributes other than ClassPortInfo only with Send.
        if hdr.base_version != mad::BASE_VERSION
            || hdr.mgmt_class == mad::class::SUBN_LID_ROUTED
            || hdr.mgmt_class == mad::class::SUBN_DIRECTED_ROUTE
        {
            return false;
        }
        let is_cm = hdr.mgmt_class == mad::class::CM;
        if is_cm && hdr.attr_id != attr::CLASS_PORT_INFO && hdr.method != mad::method::SEND {
            return false;
        }
        // Only the CM agent (class 7, version 2, method Send) takes MADs.
        // Anything else has no agent: Linux answers a Get or Set with
        // "unsupported method/attribute" (generate_unmatched_resp) and
        // drops the rest.
        if !is_cm || hdr.class_version != CM_CLASS_VERSION || hdr.method != mad::method::SEND {
            if hdr.method == mad::method::GET || hdr.method == mad::method::SET {
                self.answer_unsupported(&rx);
                return true;
            }
            return false;
        }
        let Ok(msg) = CmMsg::parse(hdr.attr_id, &mad[MAD_HEADER_LEN..MAD_LEN]) else {
            // cm_recv_handler drops unknown attributes (and LAP/APR are
            // refused on RoCE ports).
            return false;
        };
        match msg {
            CmMsg::Req(r) => self.on_req(&rx, &r),
            CmMsg::Mra(r) => self.on_mra(&rx, &r),
            CmMsg::Rej(r) => self.on_rej(&rx, &r),
            CmMsg::Rep(r) => self.on_rep(&rx, &r),
            CmMsg::Rtu(r) => self.on_rtu(&r),
            CmMsg::Dreq(r) => self.on_dreq(&rx, &r),
            CmMsg::Drep(r) => self.on_drep(&rx, &r),
            CmMsg::SidrReq(r) => self.on_sidr_req(&rx, &r),
            CmMsg::SidrRep(r) => self.on_sidr_rep(&rx, &r),
        }
    }

    /// The GetResp Linux's MAD layer sends for a Get/Set no agent takes:
    /// the MAD back with method GetResp and status "unsupported
    /// method/attribute".
    pub(super) fn answer_unsupported(&mut self, rx: &Rx<'_>) {
        let mut out = [0u8; MAD_LEN];
        out.copy_from_slice(&rx.mad[..MAD_LEN]);
        let mut m = Mad::new_unchecked(&mut out[..]);
        m.set_method(mad::method::GET_RESP);
        m.set_status(mad::status::UNSUPPORTED_METHOD_ATTRIB);
        self.counters.tx_unsupported += 1;
        self.send(rx.src, rx.src_qpn, out);
    }

    /// `cm_acquire_id`: the id with this local comm ID whose remote comm ID
    /// is `remote` (0 = not yet known).
    pub(super) fn acquire(&self, local: u32, remote: u32) -> Option<u32> {
        match self.ids.get(&local) {
            Some(c) if c.remote_id == remote => Some(local),
            _ => None,
        }
    }

    /// `cm_req_handler` and `cm_match_req`.
    pub(super) fn on_req(&mut self, rx: &Rx<'_>, req: &ReqRepr<'_>) -> bool {
        let guid = req.local_ca_guid;
        // A duplicate of a REQ that made a live id.
        if let Some(&local) = self.remote_ids.get(&(guid, req.local_comm_id)) {
            self.counters.rx_duplicates += 1;
            self.dup_req(rx, local);
            return true;
        }
        // A stale connection: that QP of that CA is still connected here.
        if let Some(&old) = self.remote_qps.get(&(guid, req.local_qpn.value())) {
            self.issue_rej(rx, RejReason::STALE_CONN, MsgRef::REQ);
            if self.ids.get(&old).map(|c| c.state) == Some(State::Established) {
                let _ = self.disconnect(rx.now, CmId(old), &[]);
            }
            return true;
        }
        if self.cfg.timewait_rejects_stale_qpn
            && self
                .tw_qps
                .range((guid, req.local_qpn.value(), 0)..=(guid, req.local_qpn.value(), u64::MAX))
                .next()
                .is_some()
        {
            self.issue_rej(rx, RejReason::STALE_CONN, MsgRef::REQ);
            return true;
        }
        let Some(&listen) = self.listeners.get(&req.service_id) else {
            self.issue_rej(rx, RejReason::INVALID_SERVICE_ID, MsgRef::REQ);
            return true;
        };
        // One source may not hold more than its share of requests waiting
        // (half-open connections, SYN-flood style): refused with a REJ,
        // so a well-meaning requester learns at once (not in Linux).
        if self.over_half_open_limit(rx.src) {
            self.issue_rej(rx, RejReason::NO_RESOURCES, MsgRef::REQ);
            return true;
        }
        if !self.has_room() {
            // Like a full rdma_cm backlog: no answer, the requester retries.
            self.counters.rx_busy += 1;
            return true;
        }
        let Some(local) = self.alloc_local_id() else {
            self.counters.rx_busy += 1;
            return true;
        };
        let p = &req.primary;
        // cm_format_paths_from_req: the path back to the requester.
        let plt = p.local_ack_timeout.saturating_sub(1);
        let mut c = self.new_conn(local, State::ReqRcvd, rx.src);
        c.remote_id = req.local_comm_id;
        c.service_id = req.service_id;
        c.listen_id = Some(listen);
        c.tid = rx.hdr.tid;
        c.timeout_ns = ms_to_ns(cm_time_ms(req.local_cm_response_timeout));
        c.max_cm_retries = req.max_cm_retries;
        c.remote_qpn = req.local_qpn;
        c.remote_guid = guid;
        c.initiator_depth = req.responder_resources;
        c.responder_resources = req.initiator_depth;
        c.path_mtu = req.path_mtu;
        c.pkey = req.pkey;
        c.sq_psn = req.starting_psn;
        c.retry_count = req.retry_count;
        c.rnr_retry_count = req.rnr_retry_count;
        c.qp_type =
            QpType::from_transport_service_type(req.transport_service_type).unwrap_or(QpType::Rc);
        c.path = Path {
            sgid: p.remote_gid,
            dgid: p.local_gid,
            flow_label: p.flow_label,
            traffic_class: p.traffic_class,
            hop_limit: p.hop_limit,
            sl: p.sl,
            pkey: req.pkey,
            mtu: req.path_mtu,
            rate: p.packet_rate,
            packet_life_time: plt,
        };
        c.av_timeout = (plt + 1).min(31);
        if let Some(t) = self.cfg.mra_delay_timeout {
            // rdma_cm: ib_send_cm_mra(DELAY | 24) right after the event.
            c.state = State::MraReqSent;
            c.service_timeout = t & 0x1f;
        }
        self.ids.insert(local, c);
        self.insert_remote(local);
        self.half_open.insert((rx.src, local));
        let mut private = [0u8; private_len::REQ];
        let n = req.private_data.len().min(private.len());
        private[..n].copy_from_slice(&req.private_data[..n]);
        self.push_event(Event::ConnectRequest(Box::new(ConnectRequest {
            id: CmId(local),
            listen_id: CmId(listen),
            src: rx.src,
            tid: rx.hdr.tid,
            attr_mod: rx.hdr.attr_mod,
            cma: CmaHdrRepr::parse_private(req.private_data).ok(),
            req: req.with_private_data(&[]),
            private,
        })));
        true
    }

    /// `cm_dup_req_handler`: an MRA if the REQ waits for the user, a REJ if
    /// the id is in timewait. Unlike Linux (which leaves it to the REP's
    /// timer) a duplicate REQ after our REP gets the REP again: the
    /// requester is evidently missing it.
    pub(super) fn dup_req(&mut self, rx: &Rx<'_>, local: u32) {
        let Some(c) = self.ids.get(&local) else {
            return;
        };
        let mad = match c.state {
            State::MraReqSent => Self::mra_mad(c, MsgRef::REQ, c.service_timeout, &c.saved_private),
            State::Timewait => Self::rej_mad(c, State::Timewait, RejReason::STALE_CONN, &[], &[]),
            State::RepSent | State::MraRepRcvd => c.msg.as_ref().map(|m| m.mad),
            _ => None,
        };
        if let Some(m) = mad {
            self.send(rx.src, rx.src_qpn, m);
        }
    }

    /// `cm_mra_handler`: a longer wait for our REQ or REP; no event.
    pub(super) fn on_mra(&mut self, rx: &Rx<'_>, mra: &MraRepr<'_>) -> bool {
        let local = match mra.message_mraed {
            MsgRef::REQ => self.acquire(mra.remote_comm_id, 0),
            MsgRef::REP | MsgRef::OTHER => self.acquire(mra.remote_comm_id, mra.local_comm_id),
            _ => None,
        };
        let Some(local) = local else {
            return false;
        };
        let Some(c) = self.ids.get_mut(&local) else {
            return false;
        };
        let next = match (c.state, mra.message_mraed) {
            (State::ReqSent, MsgRef::REQ) => State::MraReqRcvd,
            (State::RepSent, MsgRef::REP) => State::MraRepRcvd,
            (State::MraReqRcvd | State::MraRepRcvd, _) => {
                self.counters.rx_duplicates += 1;
                return true;
            }
            _ => return false,
        };
        let timeout_ns = ms_to_ns(cm_time_ms(mra.service_timeout) + cm_time_ms(c.av_timeout));
        c.state = next;
        // ib_modify_mad: the current wait and every later try take the
        // new timeout; the retries left stay.
        if let Some(m) = c.msg.as_mut() {
            let old = m.deadline;
            m.timeout_ns = timeout_ns;
            m.deadline = rx.now.add_ns(timeout_ns);
            let new = m.deadline;
            self.timers.remove(&(old, Timer::Msg(local)));
            self.timers.insert((new, Timer::Msg(local)));
        }
        true
    }

    /// `cm_rej_handler` with `cm_acquire_rejected_id`.
    pub(super) fn on_rej(&mut self, rx: &Rx<'_>, rej: &RejRepr<'_>) -> bool {
        let local = if rej.reason == RejReason::TIMEOUT {
            // The requester gave up: its ARI is its CA GUID.
            let Some(g) = rej.ari.get(..8) else {
                return false;
            };
            let mut b = [0u8; 8];
            b.copy_from_slice(g);
            self.remote_ids
                .get(&(u64::from_be_bytes(b), rej.local_comm_id))
                .copied()
        } else if rej.message_rejected == MsgRef::REQ {
            self.acquire(rej.remote_comm_id, 0)
        } else {
            self.acquire(rej.remote_comm_id, rej.local_comm_id)
        };
        let Some(local) = local else {
            return false;
        };
        let Some(state) = self.ids.get(&local).map(|c| c.state) else {
            return false;
        };
        let stale = rej.reason == RejReason::STALE_CONN;
        match state {
            State::ReqSent
            | State::MraReqRcvd
            | State::RepSent
            | State::MraRepRcvd
            | State::ReqRcvd
            | State::MraReqSent => {
                self.cancel_msg(local);
                if stale {
                    self.enter_timewait(rx.now, local);
                } else {
                    self.reset_to_idle(local);
                }
            }
            State::DreqSent | State::RepRcvd | State::MraRepSent | State::Established => {
                self.cancel_msg(local);
                self.enter_timewait(rx.now, local);
            }
            _ => return false,
        }
        self.push_event(Event::Rejected(Box::new(Rejected {
            id: CmId(local),
            reason: rej.reason,
            message_rejected: rej.message_rejected,
            ari: rej.ari_bytes().to_vec(),
            private_data: rej.private_data.to_vec(),
        })));
        true
    }

    /// `cm_rep_handler`, or `cm_dup_rep_handler` when the REQ is no longer
    /// pending.
    pub(super) fn on_rep(&mut self, rx: &Rx<'_>, rep: &RepRepr<'_>) -> bool {
        let Some(local) = self.acquire(rep.remote_comm_id, 0) else {
            return self.dup_rep(rx, rep);
        };
        let Some(state) = self.ids.get(&local).map(|c| c.state) else {
            return false;
        };
        if !matches!(state, State::ReqSent | State::MraReqRcvd) {
            return false;
        }
        let guid = rep.local_ca_guid;
        if self.remote_ids.contains_key(&(guid, rep.local_comm_id)) {
            self.counters.rx_duplicates += 1;
            return true;
        }
        if let Some(&old) = self.remote_qps.get(&(guid, rep.local_qpn.value())) {
            // The responder's QP is still connected to us: REJ 10 and a
            // DREQ to the old connection. Our REQ stays pending (Linux).
            self.issue_rej(rx, RejReason::STALE_CONN, MsgRef::REP);
            if self.ids.get(&old).map(|c| c.state) == Some(State::Established) {
                let _ = self.disconnect(rx.now, CmId(old), &[]);
            }
            return true;
        }
        self.cancel_msg(local);
        let mra = self.cfg.mra_delay_timeout;
        let Some(c) = self.ids.get_mut(&local) else {
            return false;
        };
        c.state = State::RepRcvd;
        c.remote_id = rep.local_comm_id;
        c.remote_guid = guid;
        c.remote_qpn = rep.local_qpn;
        c.initiator_depth = rep.responder_resources;
        c.responder_resources = rep.initiator_depth;
        c.sq_psn = rep.starting_psn;
        c.rnr_retry_count = rep.rnr_retry_count;
        c.av_timeout = cm_ack_timeout(rep.target_ack_delay, c.av_timeout.saturating_sub(1));
        if let Some(t) = mra {
            // rdma_cm: ib_send_cm_mra(DELAY | 24) on REP for RC/UC.
            c.state = State::MraRepSent;
            c.service_timeout = t & 0x1f;
        }
        self.insert_remote(local);
        let mut private = [0u8; private_len::REP];
        let n = rep.private_data.len().min(private.len());
        private[..n].copy_from_slice(&rep.private_data[..n]);
        self.push_event(Event::RepReceived(Box::new(RepReceived {
            id: CmId(local),
            attr_mod: rx.hdr.attr_mod,
            rep: rep.with_private_data(&[]),
            private,
        })));
        true
    }

    /// `cm_dup_rep_handler`: the RTU again if connected (it was lost), an
    /// MRA if the REP waits for the user.
    pub(super) fn dup_rep(&mut self, rx: &Rx<'_>, rep: &RepRepr<'_>) -> bool {
        let Some(local) = self.acquire(rep.remote_comm_id, rep.local_comm_id) else {
            return false;
        };
        let Some(c) = self.ids.get(&local) else {
            return false;
        };
        let mad = match c.state {
            State::Established => Self::rtu_mad(c, &c.saved_private),
            State::MraRepSent => Self::mra_mad(c, MsgRef::REP, c.service_timeout, &c.saved_private),
            _ => None,
        };
        self.counters.rx_duplicates += 1;
        if let Some(m) = mad {
            self.send(rx.src, rx.src_qpn, m);
        }
        true
    }

    /// `cm_rtu_handler`.
    pub(super) fn on_rtu(&mut self, rtu: &RtuRepr<'_>) -> bool {
        let Some(local) = self.acquire(rtu.remote_comm_id, rtu.local_comm_id) else {
            return false;
        };
        let Some(c) = self.ids.get_mut(&local) else {
            return false;
        };
        if !matches!(c.state, State::RepSent | State::MraRepRcvd) {
            self.counters.rx_duplicates += 1;
            return true;
        }
        c.state = State::Established;
        self.cancel_msg(local);
        self.push_event(Event::Established { id: CmId(local) });
        true
    }

    /// `cm_dreq_handler`: a DREP for an unknown id, the DREP again in
    /// timewait; a DREQ not naming our QP is ignored.
    pub(super) fn on_dreq(&mut self, rx: &Rx<'_>, dreq: &DreqRepr<'_>) -> bool {
        let Some(local) = self.acquire(dreq.remote_comm_id, dreq.local_comm_id) else {
            // cm_issue_drep: answer so the peer can finish.
            let drep = DrepRepr {
                local_comm_id: dreq.remote_comm_id,
                remote_comm_id: dreq.local_comm_id,
                private_data: &[],
            };
            if let Some(m) = Self::build(rx.hdr.tid, 0, CmMsg::Drep(drep)) {
                self.counters.rx_duplicates += 1;
                self.send(rx.src, rx.src_qpn, m);
            }
            return true;
        };
        let Some(c) = self.ids.get(&local) else {
            return false;
        };
        if c.local_qpn != dreq.remote_qpn {
            return false;
        }
        match c.state {
            State::RepSent | State::DreqSent | State::MraRepRcvd => self.cancel_msg(local),
            State::Established => {}
            State::Timewait => {
                self.counters.rx_duplicates += 1;
                if let Some(m) = Self::drep_mad(c, &c.saved_private) {
                    self.send(rx.src, rx.src_qpn, m);
                }
                return true;
            }
            State::DreqRcvd => {
                self.counters.rx_duplicates += 1;
                return true;
            }
            _ => return false,
        }
        let Some(c) = self.ids.get_mut(&local) else {
            return false;
        };
        c.state = State::DreqRcvd;
        c.tid = rx.hdr.tid;
        self.push_event(Event::DisconnectRequest {
            id: CmId(local),
            private_data: dreq.private_data.to_vec(),
        });
        true
    }

    /// `cm_drep_handler`.
    pub(super) fn on_drep(&mut self, rx: &Rx<'_>, drep: &DrepRepr<'_>) -> bool {
        let Some(local) = self.acquire(drep.remote_comm_id, drep.local_comm_id) else {
            return false;
        };
        if !matches!(
            self.ids.get(&local).map(|c| c.state),
            Some(State::DreqSent | State::DreqRcvd)
        ) {
            return false;
        }
        self.cancel_msg(local);
        self.enter_timewait(rx.now, local);
        self.push_event(Event::Disconnected {
            id: CmId(local),
            timed_out: false,
            private_data: drep.private_data.to_vec(),
        });
        true
    }

    /// Answers a SIDR_REQ with a SIDR_REP of `status` and nothing else
    /// (no listener: UNSUPPORTED; too many half-open from its source:
    /// REJECT).
    fn refuse_sidr(&mut self, rx: &Rx<'_>, req: &SidrReqRepr<'_>, status: SidrStatus) {
        let rep = SidrRepRepr {
            request_id: req.request_id,
            status,
            additional_info_len: 0,
            vendor_id: 0,
            qpn: Qpn::new(0),
            service_id: req.service_id,
            qkey: QKey(0),
            additional_info: &[],
            private_data: &[],
        };
        if let Some(m) = Self::build(rx.hdr.tid, 0, CmMsg::SidrRep(rep)) {
            self.send(rx.src, rx.src_qpn, m);
        }
    }

    /// `cm_sidr_req_handler`.
    pub(super) fn on_sidr_req(&mut self, rx: &Rx<'_>, req: &SidrReqRepr<'_>) -> bool {
        if self.sidr_remote.contains_key(&(rx.src, req.request_id)) {
            self.counters.rx_duplicates += 1;
            return true;
        }
        let Some(&listen) = self.listeners.get(&req.service_id) else {
            self.refuse_sidr(rx, req, SidrStatus::UNSUPPORTED);
            return true;
        };
        if self.over_half_open_limit(rx.src) {
            self.refuse_sidr(rx, req, SidrStatus::REJECT);
            return true;
        }
        if !self.has_room() {
            self.counters.rx_busy += 1;
            return true;
        }
        let Some(local) = self.alloc_local_id() else {
            self.counters.rx_busy += 1;
            return true;
        };
        let mut c = self.new_conn(local, State::SidrReqRcvd, rx.src);
        c.remote_id = req.request_id;
        c.service_id = req.service_id;
        c.listen_id = Some(listen);
        c.tid = rx.hdr.tid;
        c.pkey = req.pkey;
        self.ids.insert(local, c);
        self.sidr_remote.insert((rx.src, req.request_id), local);
        self.half_open.insert((rx.src, local));
        self.push_event(Event::SidrRequest(Box::new(SidrRequest {
            id: CmId(local),
            listen_id: CmId(listen),
            src: rx.src,
            src_qpn: rx.src_qpn,
            pkey: req.pkey,
            service_id: req.service_id,
            cma: CmaHdrRepr::parse_private(req.private_data).ok(),
            private_data: req.private_data.to_vec(),
        })));
        true
    }

    /// `cm_sidr_rep_handler`.
    pub(super) fn on_sidr_rep(&mut self, rx: &Rx<'_>, rep: &SidrRepRepr<'_>) -> bool {
        let Some(local) = self.acquire(rep.request_id, 0) else {
            return false;
        };
        match self.ids.get_mut(&local) {
            Some(c) if c.state == State::SidrReqSent => c.state = State::Idle,
            _ => return false,
        }
        self.cancel_msg(local);
        let n = (rep.additional_info_len as usize).min(rep.additional_info.len());
        self.push_event(Event::SidrReply(Box::new(SidrReply {
            id: CmId(local),
            src: rx.src,
            status: rep.status,
            qpn: rep.qpn,
            qkey: rep.qkey,
            vendor_id: rep.vendor_id,
            info: rep.additional_info[..n].to_vec(),
            private_data: rep.private_data.to_vec(),
        })));
        true
    }
}
