//! The driver's commands (`ib_cm_listen`, `ib_send_cm_req`, …): what the
//! engine or the simulator asks of the CM.

use super::*;

impl Cm {
    /// Listens for REQs and SIDR_REQs to `service_id` (`ib_cm_listen`). One
    /// listener per service ID: rdma_cm's listeners on one port but
    /// different IPs share it and sort requests by the cma header.
    pub fn listen(&mut self, service_id: ServiceId) -> Result<CmId, CmError> {
        if self.listeners.contains_key(&service_id) {
            return Err(CmError::Busy);
        }
        if self.ids.len() >= limits::MAX_IDS {
            return Err(CmError::TooManyIds);
        }
        let local = self.alloc_local_id().ok_or(CmError::TooManyIds)?;
        let mut c = self.new_conn(local, State::Listen, IpAddr::from([0u8; 4]));
        c.service_id = service_id;
        self.ids.insert(local, c);
        self.listeners.insert(service_id, local);
        Ok(CmId(local))
    }

    /// Sends a REQ on a new id (`ib_send_cm_req`); the REQ is sent again
    /// every `2 × ms(packet life time) + ms(remote CM response timeout)`
    /// (6144 ms for rdma_cm over rxe), `max_cm_retries` times.
    pub fn connect(&mut self, now: Instant, p: &ReqParams) -> Result<CmId, CmError> {
        let path = &p.path;
        let check = |ok: bool, what: &'static str| {
            if ok {
                Ok(())
            } else {
                Err(CmError::InvalidParam(what))
            }
        };
        check(
            p.private_data.len() <= private_len::REQ,
            "private data over 92 bytes",
        )?;
        check(p.retry_count <= 7, "retry count over 7")?;
        check(p.rnr_retry_count <= 7, "RNR retry count over 7")?;
        check(p.max_cm_retries <= 15, "max CM retries over 15")?;
        check(
            p.remote_cm_response_timeout <= 31,
            "remote CM response timeout over 31",
        )?;
        check(
            p.local_cm_response_timeout <= 31,
            "local CM response timeout over 31",
        )?;
        check(path.packet_life_time <= 31, "packet life time over 31")?;
        check(path.mtu <= 15, "MTU code over 15")?;
        check(path.sl <= 15, "SL over 15")?;
        check(path.rate <= 63, "rate over 63")?;
        check(path.flow_label <= 0xf_ffff, "flow label over 20 bits")?;
        check(p.ece.vendor_id <= 0xff_ffff, "vendor ID over 24 bits")?;
        if self.ids.len() >= limits::MAX_IDS {
            return Err(CmError::TooManyIds);
        }
        let local = self.alloc_local_id().ok_or(CmError::TooManyIds)?;
        let peer = path.peer();
        let tid = self.form_tid(local);
        // cm_format_req: permissive LIDs and "not subnet local" on a routed
        // path (hop limit > 1), as every RoCE v2 path is.
        let routed = path.hop_limit > 1;
        let lid = if routed { 0xffff } else { 0 };
        let req = ReqRepr {
            local_comm_id: local,
            vendor_id: p.ece.vendor_id,
            service_id: p.service_id,
            local_ca_guid: self.cfg.node_guid,
            local_qkey: QKey(0),
            local_qpn: p.qpn,
            responder_resources: p.responder_resources,
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: p.remote_cm_response_timeout,
            transport_service_type: p.qp_type.transport_service_type(),
            flow_control: p.flow_control,
            starting_psn: p.starting_psn,
            local_cm_response_timeout: p.local_cm_response_timeout,
            retry_count: p.retry_count,
            pkey: path.pkey,
            path_mtu: path.mtu,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count,
            max_cm_retries: p.max_cm_retries,
            srq: p.srq,
            extended_transport_type: 0,
            primary: CmPathRepr {
                local_lid: lid,
                remote_lid: lid,
                local_gid: path.sgid,
                remote_gid: path.dgid,
                flow_label: path.flow_label,
                packet_rate: path.rate,
                traffic_class: path.traffic_class,
                hop_limit: path.hop_limit,
                sl: path.sl,
                subnet_local: !routed,
                local_ack_timeout: cm_ack_timeout(self.cfg.ca_ack_delay, path.packet_life_time),
            },
            alternate: CmPathRepr::default(),
            sap_supported: false,
            private_data: &p.private_data,
        };
        let mad = Self::build(tid, p.ece.attr_mod, CmMsg::Req(req))
            .ok_or(CmError::InvalidParam("REQ fields"))?;
        let timeout_ms =
            2 * cm_time_ms(path.packet_life_time) + cm_time_ms(p.remote_cm_response_timeout);
        let mut c = self.new_conn(local, State::ReqSent, peer);
        c.tid = tid;
        c.service_id = p.service_id;
        c.qp_type = p.qp_type;
        c.local_qpn = p.qpn;
        c.timeout_ns = ms_to_ns(timeout_ms);
        c.max_cm_retries = p.max_cm_retries;
        c.initiator_depth = p.initiator_depth;
        c.responder_resources = p.responder_resources;
        c.retry_count = p.retry_count;
        c.path_mtu = path.mtu;
        c.pkey = path.pkey;
        c.rq_psn = p.starting_psn;
        c.path = *path;
        // cm_init_av_by_path: the address vector's timeout is life time + 1.
        c.av_timeout = (path.packet_life_time + 1).min(31);
        let (timeout_ns, retries) = (c.timeout_ns, c.max_cm_retries);
        self.ids.insert(local, c);
        self.send_msg(now, local, mad, timeout_ns, retries);
        Ok(CmId(local))
    }

    /// Answers a REQ with a REP (`ib_send_cm_rep`), retransmitted every
    /// `ms(REQ's Local CM Response Timeout)` up to the REQ's Max CM
    /// Retries until the RTU comes. rdma_cm moves its QP to RTS first.
    pub fn accept(&mut self, now: Instant, id: CmId, p: &RepParams) -> Result<(), CmError> {
        let c = self.conn(id)?;
        if !matches!(c.state, State::ReqRcvd | State::MraReqSent) {
            return Err(CmError::InvalidState(c.state));
        }
        if p.private_data.len() > private_len::REP
            || p.rnr_retry_count > 7
            || p.failover_accepted > 3
            || p.ece.vendor_id > 0xff_ffff
        {
            return Err(CmError::InvalidParam("REP fields"));
        }
        let rep = RepRepr {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            local_qkey: QKey(0),
            local_qpn: p.qpn,
            local_eecn: 0,
            starting_psn: p.starting_psn,
            vendor_id: p.ece.vendor_id,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: self.cfg.ca_ack_delay & 0x1f,
            failover_accepted: p.failover_accepted,
            flow_control: p.flow_control,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq,
            local_ca_guid: self.cfg.node_guid,
            private_data: &p.private_data,
        };
        let mad = Self::build(c.tid, p.ece.attr_mod, CmMsg::Rep(rep))
            .ok_or(CmError::InvalidParam("REP fields"))?;
        let (timeout_ns, retries) = (c.timeout_ns, c.max_cm_retries);
        let c = self.conn_mut(id)?;
        c.state = State::RepSent;
        c.initiator_depth = p.initiator_depth;
        c.responder_resources = p.responder_resources;
        c.rq_psn = p.starting_psn;
        c.local_qpn = p.qpn;
        self.send_msg(now, id.0, mad, timeout_ns, retries);
        Ok(())
    }

    /// Rejects (`ib_send_cm_rej`): a REQ we received, a REP we received, or
    /// our own REQ/REP attempt. rdma_cm sends reason 28 (consumer defined)
    /// with the user's private data (≤ 148 bytes); `ari` ≤ 72 bytes.
    pub fn reject(
        &mut self,
        now: Instant,
        id: CmId,
        reason: RejReason,
        ari: &[u8],
        private_data: &[u8],
    ) -> Result<(), CmError> {
        if private_data.len() > private_len::REJ || ari.len() > REJ_ARI_LEN {
            return Err(CmError::InvalidParam("REJ private data or ARI too long"));
        }
        let state = self.conn(id)?.state;
        match state {
            State::ReqSent
            | State::MraReqRcvd
            | State::ReqRcvd
            | State::MraReqSent
            | State::RepRcvd
            | State::MraRepSent => {
                // Linux leaves a REQ being retransmitted after rejecting it
                // here; it is cancelled instead, so no REQ follows our REJ.
                self.cancel_msg(id.0);
                self.reset_to_idle(id.0);
            }
            State::RepSent | State::MraRepRcvd => {
                self.cancel_msg(id.0);
                self.enter_timewait(now, id.0);
            }
            s => return Err(CmError::InvalidState(s)),
        }
        let c = self.conn(id)?;
        if let Some(m) = Self::rej_mad(c, state, reason, ari, private_data) {
            let peer = c.peer;
            self.send(peer, Qpn::GSI, m);
        }
        Ok(())
    }

    /// Sends the RTU after a REP (`ib_send_cm_rtu`): the active side is
    /// connected. rdma_cm moves its QP to RTR and RTS first and reports
    /// ESTABLISHED itself; no event comes from here.
    pub fn establish(
        &mut self,
        _now: Instant,
        id: CmId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        if private_data.len() > private_len::RTU {
            return Err(CmError::InvalidParam("RTU private data over 224 bytes"));
        }
        let c = self.conn_mut(id)?;
        if !matches!(c.state, State::RepRcvd | State::MraRepSent) {
            return Err(CmError::InvalidState(c.state));
        }
        c.state = State::Established;
        c.saved_private = private_data.to_vec();
        let peer = c.peer;
        if let Some(m) = Self::rtu_mad(c, private_data) {
            self.send(peer, Qpn::GSI, m);
        }
        Ok(())
    }

    /// The passive side's QP received traffic before the RTU (the
    /// communication-established async event; `ib_cm_notify`): connected
    /// now, [`Event::Established`] follows and a late RTU is ignored.
    pub fn notify_established(&mut self, id: CmId) -> Result<(), CmError> {
        let c = self.conn_mut(id)?;
        match c.state {
            State::RepSent | State::MraRepRcvd => {}
            s => return Err(CmError::InvalidState(s)),
        }
        c.state = State::Established;
        self.cancel_msg(id.0);
        self.push_event(Event::Established { id });
        Ok(())
    }

    /// Sends an MRA now (`ib_send_cm_mra` without the delay flag) for a REQ
    /// or REP we have not answered, asking the peer to wait
    /// `service_timeout` more. With [`CmConfig::mra_delay_timeout`] set the
    /// ids are already past that state and this fails, as in Linux.
    pub fn send_mra(
        &mut self,
        _now: Instant,
        id: CmId,
        service_timeout: u8,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        if private_data.len() > private_len::MRA || service_timeout > 31 {
            return Err(CmError::InvalidParam("MRA fields"));
        }
        let c = self.conn_mut(id)?;
        let (next, msg) = match c.state {
            State::ReqRcvd => (State::MraReqSent, MsgRef::REQ),
            State::RepRcvd => (State::MraRepSent, MsgRef::REP),
            s => return Err(CmError::InvalidState(s)),
        };
        c.state = next;
        c.service_timeout = service_timeout;
        c.saved_private = private_data.to_vec();
        let peer = c.peer;
        if let Some(m) = Self::mra_mad(c, msg, service_timeout, private_data) {
            self.send(peer, Qpn::GSI, m);
        }
        Ok(())
    }

    /// rdma_disconnect: a DREQ from a connected id (retransmitted like the
    /// REQ/REP that made it), or the DREP answering a DREQ received
    /// (`ib_send_cm_dreq`, else `ib_send_cm_drep`, which enters timewait).
    pub fn disconnect(
        &mut self,
        now: Instant,
        id: CmId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let c = self.conn(id)?;
        match c.state {
            State::Established => {
                if private_data.len() > private_len::DREQ {
                    return Err(CmError::InvalidParam("DREQ private data over 220 bytes"));
                }
                let mad = self
                    .dreq_mad(c, private_data)
                    .ok_or(CmError::InvalidParam("DREQ fields"))?;
                let (timeout_ns, retries) = (c.timeout_ns, c.max_cm_retries);
                self.conn_mut(id)?.state = State::DreqSent;
                self.send_msg(now, id.0, mad, timeout_ns, retries);
                Ok(())
            }
            State::DreqRcvd => {
                if private_data.len() > private_len::DREP {
                    return Err(CmError::InvalidParam("DREP private data over 224 bytes"));
                }
                self.send_drep(now, id.0, private_data);
                Ok(())
            }
            s => Err(CmError::InvalidState(s)),
        }
    }

    /// `cm_send_drep_locked`: timewait, then the DREP.
    pub(super) fn send_drep(&mut self, now: Instant, local: u32, private_data: &[u8]) {
        if let Some(c) = self.ids.get_mut(&local) {
            c.saved_private = private_data.to_vec();
        }
        self.enter_timewait(now, local);
        if let Some(c) = self.ids.get(&local) {
            if let Some(m) = Self::drep_mad(c, private_data) {
                let peer = c.peer;
                self.send(peer, Qpn::GSI, m);
            }
        }
    }

    /// Forgets a REQ without answering it, so that the requester retries:
    /// what rdma_cm does when its backlog is full (Linux: `cm_destroy_id`
    /// with -ENOMEM resets to idle without a REJ).
    pub fn drop_request(&mut self, id: CmId) -> Result<(), CmError> {
        let state = self.conn(id)?.state;
        if !matches!(state, State::ReqRcvd | State::MraReqSent) {
            return Err(CmError::InvalidState(state));
        }
        self.remove_remote(id.0);
        self.forget_half_open(id.0);
        self.ids.remove(&id.0);
        Ok(())
    }

    /// Destroys an id, telling the peer what Linux's `cm_destroy_id` tells
    /// it in each state: REJ "timeout" (ARI = our GUID) for our pending
    /// REQ; REJ 28 for a REQ or REP not answered; a DREQ (sent once) from a
    /// connected id; the DREP owed for a DREQ received; SIDR_REP "reject"
    /// for a SIDR_REQ not answered. A timewait record outlives the id.
    pub fn destroy(&mut self, now: Instant, id: CmId) -> Result<(), CmError> {
        let state = self.conn(id)?.state;
        let local = id.0;
        match state {
            State::Listen => {
                let sid = self.conn(id)?.service_id;
                if self.listeners.get(&sid) == Some(&local) {
                    self.listeners.remove(&sid);
                }
            }
            State::SidrReqSent => self.cancel_msg(local),
            State::SidrReqRcvd => {
                let reject = SidrRepParams {
                    status: SidrStatus::REJECT,
                    qpn: Qpn::new(0),
                    qkey: QKey(0),
                    info: Vec::new(),
                    private_data: Vec::new(),
                    ece: Default::default(),
                };
                let _ = self.sidr_reply(now, id, &reject);
            }
            State::ReqSent | State::MraReqRcvd => {
                self.cancel_msg(local);
                let guid = self.cfg.node_guid.to_be_bytes();
                let _ = self.reject(now, id, RejReason::TIMEOUT, &guid, &[]);
            }
            State::ReqRcvd
            | State::MraReqSent
            | State::RepRcvd
            | State::MraRepSent
            | State::RepSent
            | State::MraRepRcvd => {
                let _ = self.reject(now, id, RejReason::CONSUMER_DEFINED, &[], &[]);
            }
            State::Established => {
                // cm_issue_dreq: one DREQ, no retries, then timewait.
                let c = self.conn(id)?;
                if let Some(m) = self.dreq_mad(c, &[]) {
                    let peer = c.peer;
                    self.send(peer, Qpn::GSI, m);
                }
                self.enter_timewait(now, local);
            }
            State::DreqSent => {
                self.cancel_msg(local);
                self.enter_timewait(now, local);
            }
            State::DreqRcvd => self.send_drep(now, local, &[]),
            State::Timewait | State::Idle => {}
        }
        self.cancel_msg(local);
        self.remove_remote(local);
        self.forget_half_open(local);
        self.ids.remove(&local);
        Ok(())
    }

    /// Sends a SIDR_REQ on a new id (`ib_send_cm_sidr_req`), retransmitted
    /// every `timeout_ms`, `max_cm_retries` times.
    pub fn sidr_request(&mut self, now: Instant, p: &SidrReqParams) -> Result<CmId, CmError> {
        if p.private_data.len() > private_len::SIDR_REQ || p.max_cm_retries > 15 {
            return Err(CmError::InvalidParam("SIDR_REQ fields"));
        }
        if self.ids.len() >= limits::MAX_IDS {
            return Err(CmError::TooManyIds);
        }
        let local = self.alloc_local_id().ok_or(CmError::TooManyIds)?;
        let tid = self.form_tid(local);
        let req = SidrReqRepr {
            request_id: local,
            pkey: p.pkey,
            service_id: p.service_id,
            private_data: &p.private_data,
        };
        let mad = Self::build(tid, 0, CmMsg::SidrReq(req))
            .ok_or(CmError::InvalidParam("SIDR_REQ fields"))?;
        let mut c = self.new_conn(local, State::SidrReqSent, p.peer);
        c.tid = tid;
        c.service_id = p.service_id;
        c.pkey = p.pkey;
        c.timeout_ns = ms_to_ns(p.timeout_ms);
        c.max_cm_retries = p.max_cm_retries;
        let (timeout_ns, retries) = (c.timeout_ns, c.max_cm_retries);
        self.ids.insert(local, c);
        self.send_msg(now, local, mad, timeout_ns, retries);
        Ok(CmId(local))
    }

    /// Answers a SIDR_REQ (`ib_send_cm_sidr_rep`): sent once; the id goes
    /// idle. A lost SIDR_REP makes the requester ask again, which comes as
    /// a new [`Event::SidrRequest`], as in Linux.
    pub fn sidr_reply(
        &mut self,
        _now: Instant,
        id: CmId,
        p: &SidrRepParams,
    ) -> Result<(), CmError> {
        if p.private_data.len() > private_len::SIDR_REP
            || p.info.len() > SIDR_REP_INFO_LEN
            || p.ece.vendor_id > 0xff_ffff
        {
            return Err(CmError::InvalidParam("SIDR_REP fields"));
        }
        let c = self.conn(id)?;
        if c.state != State::SidrReqRcvd {
            return Err(CmError::InvalidState(c.state));
        }
        let rep = SidrRepRepr {
            request_id: c.remote_id,
            status: p.status,
            additional_info_len: p.info.len() as u8,
            vendor_id: p.ece.vendor_id,
            qpn: p.qpn,
            service_id: c.service_id,
            qkey: p.qkey,
            additional_info: &p.info,
            private_data: &p.private_data,
        };
        let mad = Self::build(c.tid, p.ece.attr_mod, CmMsg::SidrRep(rep))
            .ok_or(CmError::InvalidParam("SIDR_REP fields"))?;
        let (peer, key) = (c.peer, (c.peer, c.remote_id));
        self.send(peer, Qpn::GSI, mad);
        if self.sidr_remote.get(&key) == Some(&id.0) {
            self.sidr_remote.remove(&key);
        }
        self.conn_mut(id)?.state = State::Idle;
        Ok(())
    }
}
