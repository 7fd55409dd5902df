//! The program model of a CM run: what each node's program does through
//! its rdma_cm ids (the endpoint's calls: connect, accept, reject, answer
//! late, establish, disconnect, destroy, SIDR) when an event comes, and how
//! it carries out the scenario's actions (kill a node, close the
//! listeners). It never touches a CM directly.

use super::world::{Action, IdLog, Owner, World};
use super::{ClientPlan, ServerPlan, Teardown, RC_PORT, UD_PORT};
use softrdma_cm::rdma::{self, ConnParam, EventType, Observed, Transport};
use softrdma_cm::{Event, PortSpace, RejReason, SidrStatus, State, Unanswered};
use std::net::SocketAddr;

/// The device limit of READs in flight the program model gives the layer.
const MAX_RD_ATOM: u8 = 16;

/// The `conn_param` of the model's RC connects and accepts: one READ each
/// way, retries 7, the QP's number.
fn rc_param(qp_num: u32) -> ConnParam {
    ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        qp_num,
        ..ConnParam::zero()
    }
}

impl World<'_> {
    /// A CM event of `node`'s endpoint, the rdma_cm id it went to and the
    /// rdma_cm event it became: what the program model does about it.
    pub(super) fn on_event(&mut self, node: usize, o: Observed) {
        let now = self.now;
        let e = o.event;
        let request = matches!(e, Event::ConnectRequest(_) | Event::SidrRequest(_));
        let Some(id) = o.id else {
            // The layer's checks (`cma_ib_req_handler`: the listener of
            // the request's address, its transport and backlog) refused
            // it, or the CM spoke of an id the layer does not hold.
            let what = if request {
                "a request no rdma_cm listener takes"
            } else {
                "an event for an id the layer does not hold"
            };
            self.violation(format!("{what}: {e:?}"));
            return;
        };
        let owner = if request {
            // The program takes the request at once.
            self.nodes[node].ep.claim(id);
            None
        } else {
            match self.owners.get(&(node, id)) {
                Some(o) => Some(*o),
                None => {
                    self.violation(format!("event for an id the program does not hold: {e:?}"));
                    return;
                }
            }
        };
        if owner.is_some() {
            self.rdma_report(node, id, &e, o.reported);
        }
        match e {
            Event::ConnectRequest(cr) => {
                let req = cr.req();
                let qpn = req.local_qpn.value();
                let Some(&c) = self.conn_of_qpn.get(&qpn) else {
                    self.violation(format!("REQ of no plan: QPN {qpn:#x}"));
                    return;
                };
                self.owners.insert((node, id), Owner::ConnServer(c));
                self.ids.insert((node, id), IdLog::default());
                // The client's address and the port its id holds.
                let cma_ok = cr.cma.is_some_and(|h| {
                    h.src == self.nodes[self.sc.conns[c].client].ip
                        && Some(h.src_port) == self.report.conns[c].client_port
                });
                if !cma_ok {
                    self.violation(format!("conn {c}: REQ without the client's cma header"));
                }
                let first = self.report.conns[c].server_ids.is_empty();
                self.report.conns[c].server_ids.push(id);
                let delay = match self.sc.conns[c].server_plan {
                    ServerPlan::Accept { delay_ms }
                    | ServerPlan::Reject { delay_ms }
                    | ServerPlan::Destroy { delay_ms } => delay_ms,
                    ServerPlan::NoListener => 0,
                };
                // A REQ that comes back after its first id is gone is
                // declined at once.
                let delay = if first { delay } else { 0 };
                self.schedule(now.add_ms(delay), Action::ServerAnswer(c, id));
            }
            Event::SidrRequest(sr) => {
                // The user data after the cma header names the plan.
                let s = sr
                    .private_data
                    .get(36..40)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
                    .filter(|&s| s < self.sc.sidrs.len());
                if let Some(s) = s {
                    self.report.sidrs[s].requests += 1;
                }
                self.owners
                    .insert((node, id), Owner::SidrServer(s.unwrap_or(usize::MAX)));
                // `rdma_accept` of the UD id: the SIDR_REP with its QP.
                let p = ConnParam {
                    qp_num: 0x100 + node as u32,
                    ..ConnParam::zero()
                };
                let r = self.nodes[node].ep.accept(id, now, Some(&p), MAX_RD_ATOM);
                if r.is_err() {
                    self.violation(format!("SIDR reply failed: {r:?}"));
                }
                self.destroy(node, id);
            }
            Event::RepReceived(_) => {
                let Some(Owner::ConnClient(c)) = owner else {
                    self.violation(format!("REP for a non-client id {id}"));
                    return;
                };
                self.report.conns[c].reps += 1;
                let delay = match self.sc.conns[c].client_plan {
                    ClientPlan::Establish { delay_ms } | ClientPlan::Reject { delay_ms } => {
                        delay_ms
                    }
                    ClientPlan::DestroyEarly { .. } => 0,
                };
                self.schedule(now.add_ms(delay), Action::ClientAnswer(c));
            }
            Event::Established { .. } => {
                self.outcome(node, id, "ESTABLISHED");
                if let Some(Owner::ConnServer(c)) = owner {
                    self.report.conns[c].server_established += 1;
                    self.check_rts(node, id, Self::client_qpn(c));
                } else {
                    self.violation(format!("ESTABLISHED on a non-server id {id}"));
                }
            }
            Event::Rejected(r) => {
                self.outcome(node, id, "REJECTED");
                match owner {
                    Some(Owner::ConnClient(c)) => {
                        if self.report.conns[c].client_rejected.is_empty() {
                            self.report.conns[c].rej_private = r.private_data.clone();
                        }
                        self.report.conns[c].client_rejected.push(r.reason);
                    }
                    Some(Owner::ConnServer(c)) => {
                        self.report.conns[c].server_rejected.push(r.reason)
                    }
                    _ => self.violation(format!("REJ for {id}")),
                }
                self.after_outcome(node, id);
            }
            Event::Unreachable { what, .. } => {
                self.outcome(node, id, "UNREACHABLE");
                match (owner, what) {
                    (Some(Owner::ConnClient(c)), Unanswered::Req) => {
                        self.report.conns[c].client_unreachable += 1
                    }
                    (Some(Owner::ConnServer(c)), Unanswered::Rep) => {
                        self.report.conns[c].server_unreachable += 1
                    }
                    (Some(Owner::SidrClient(s)), Unanswered::SidrReq) => {
                        self.report.sidrs[s].unreachable += 1
                    }
                    _ => self.violation(format!("UNREACHABLE {what:?} for {owner:?}")),
                }
                self.destroy(node, id);
            }
            Event::DisconnectRequest { .. } | Event::Disconnected { .. } => {
                let first_disconnect = {
                    let e = self.ids.entry((node, id)).or_default();
                    e.disconnects += 1;
                    e.disconnects == 1
                };
                if !first_disconnect {
                    self.violation(format!("two disconnect events for {id} on node {node}"));
                }
                if let (
                    Event::Disconnected {
                        timed_out: true, ..
                    },
                    Some(Owner::ConnClient(c) | Owner::ConnServer(c)),
                ) = (&e, owner)
                {
                    self.report.conns[c].dreq_timeouts += 1;
                }
                if let Event::DisconnectRequest { .. } = e {
                    // rdma_disconnect: the DREP.
                    if let Err(err) = self.nodes[node].ep.disconnect(id, now) {
                        self.violation(format!("DREP for {id} failed: {err}"));
                    }
                }
                // Timewait follows; the id is destroyed on its exit.
            }
            Event::TimewaitExit { .. } => {
                let e = self.ids.entry((node, id)).or_default();
                e.timewait_exits += 1;
                if e.timewait_exits > 1 {
                    self.violation(format!("two timewait exits for {id}"));
                }
                self.destroy(node, id);
            }
            Event::SidrReply(r) => {
                self.outcome(node, id, "SIDR_REP");
                if let Some(Owner::SidrClient(s)) = owner {
                    self.report.sidrs[s].replies.push(r.status);
                } else {
                    self.violation(format!("SIDR_REP for {owner:?}"));
                }
                self.destroy(node, id);
            }
        }
    }

    /// The rdma_cm event the layer reports for `e` (the id's state moved
    /// as `cma_ib_handler` moves it), checked against `e`: the event and
    /// status the program would see, DISCONNECTED once.
    fn rdma_report(&mut self, node: usize, id: u64, e: &Event, got: Option<(EventType, i32)>) {
        let log = self.ids.entry((node, id)).or_default();
        let first_disconnect = log.disconnects == 0;
        let want = match e {
            Event::RepReceived(_) => Some((EventType::ConnectResponse, 0)),
            Event::Established { .. } => Some((EventType::Established, 0)),
            Event::Rejected(r) => Some((EventType::Rejected, i32::from(r.reason.0))),
            Event::Unreachable { .. } => Some((EventType::Unreachable, -rdma::ETIMEDOUT)),
            Event::DisconnectRequest { .. } => {
                first_disconnect.then_some((EventType::Disconnected, 0))
            }
            Event::Disconnected { timed_out, .. } => first_disconnect.then_some((
                EventType::Disconnected,
                if *timed_out { -rdma::ETIMEDOUT } else { 0 },
            )),
            Event::TimewaitExit { .. } => Some((EventType::TimewaitExit, 0)),
            Event::SidrReply(r) if r.status == SidrStatus::SUCCESS => {
                Some((EventType::Established, 0))
            }
            Event::SidrReply(r) => Some((EventType::Unreachable, i32::from(r.status.0))),
            Event::ConnectRequest(_) | Event::SidrRequest(_) => None,
        };
        if got != want {
            self.violation(format!("rdma_cm reports {got:?} for {e:?}, want {want:?}"));
        }
        if got.is_some() {
            self.report.rdma_events += 1;
        }
    }

    /// After REJ: an idle id is destroyed; one in timewait waits for its
    /// exit.
    fn after_outcome(&mut self, node: usize, id: u64) {
        if self.nodes[node].ep.cm_state(id) != Some(State::Timewait) {
            self.destroy(node, id);
        }
    }

    pub(super) fn act(&mut self, a: Action) {
        let now = self.now;
        match a {
            Action::Connect(c) => {
                let p = &self.sc.conns[c];
                if !self.nodes[p.client].up {
                    return;
                }
                let port = if p.server_plan == ServerPlan::NoListener {
                    9999
                } else {
                    RC_PORT
                };
                let dst = SocketAddr::new(self.nodes[p.server].ip, port);
                let client = p.client;
                let (num, port) =
                    match self.nodes[client].active(PortSpace::Tcp, Transport::Rc, dst) {
                        Ok(x) => x,
                        Err(e) => return self.violation(format!("conn {c}: {e}")),
                    };
                self.report.conns[c].client_port = Some(port);
                let conn = rc_param(Self::client_qpn(c));
                self.owners.insert((client, num), Owner::ConnClient(c));
                self.ids.insert((client, num), IdLog::default());
                self.create_qp(client, num, Self::client_qpn(c));
                match self.nodes[client]
                    .ep
                    .connect(num, now, Some(&conn), MAX_RD_ATOM)
                {
                    Ok(()) => {
                        self.report.conns[c].client_id = Some(num);
                        if let ClientPlan::DestroyEarly { after_ms } = self.sc.conns[c].client_plan
                        {
                            self.schedule(now.add_ms(after_ms), Action::ClientGiveUp(c));
                        }
                    }
                    Err(e) => self.violation(format!("connect: {e}")),
                }
            }
            Action::Sidr(s) => {
                let p = &self.sc.sidrs[s];
                if !self.nodes[p.client].up {
                    return;
                }
                let port = if p.listening { UD_PORT } else { 9998 };
                let dst = SocketAddr::new(self.nodes[p.server].ip, port);
                let client = p.client;
                let num = match self.nodes[client].active(PortSpace::Udp, Transport::Ud, dst) {
                    Ok((num, _)) => num,
                    Err(e) => return self.violation(format!("SIDR {s}: {e}")),
                };
                // The user data names the plan.
                let conn = ConnParam {
                    private_data: (s as u32).to_be_bytes().to_vec(),
                    ..ConnParam::zero()
                };
                self.owners.insert((client, num), Owner::SidrClient(s));
                self.ids.insert((client, num), IdLog::default());
                if let Err(e) = self.nodes[client]
                    .ep
                    .connect(num, now, Some(&conn), MAX_RD_ATOM)
                {
                    self.violation(format!("SIDR connect: {e}"));
                }
            }
            Action::ServerAnswer(c, id) => {
                let p = &self.sc.conns[c];
                let node = p.server;
                if !self.nodes[node].up || !self.owners.contains_key(&(node, id)) {
                    return;
                }
                let first = self.report.conns[c].server_ids.first() == Some(&id);
                let r = match (p.server_plan, first) {
                    (ServerPlan::Accept { .. }, true) => {
                        // `rdma_create_qp`, then the accept moves it to RTS.
                        self.create_qp(node, id, Self::server_qpn(c));
                        let conn = rc_param(Self::server_qpn(c));
                        // librdmacm moves the QP first, then sends the REP.
                        let ep = &mut self.nodes[node].ep;
                        let r = ep.accept_changes(id, Some(&conn), MAX_RD_ATOM);
                        for (qpn, ch) in r.iter().flatten() {
                            self.apply(node, id, *qpn, ch);
                        }
                        let ep = &mut self.nodes[node].ep;
                        let r = r.and_then(|_| ep.accept(id, now, Some(&conn), MAX_RD_ATOM));
                        if r.is_ok() {
                            self.report.conns[c].accepted = true;
                        }
                        r
                    }
                    (ServerPlan::Destroy { .. }, true) => {
                        self.destroy(node, id);
                        return;
                    }
                    _ => self.nodes[node].ep.reject(
                        id,
                        now,
                        b"no thanks",
                        RejReason::CONSUMER_DEFINED,
                    ),
                };
                // An error: the id ended meanwhile (REJ "timeout" from a
                // client that gave up), and its event destroys it. A reject
                // leaves it idle: destroy it now.
                if r.is_ok() && self.nodes[node].ep.cm_state(id) == Some(State::Idle) {
                    self.destroy(node, id);
                }
            }
            Action::ClientAnswer(c) => {
                let p = &self.sc.conns[c];
                let node = p.client;
                let Some(id) = self.report.conns[c].client_id else {
                    return;
                };
                if !self.nodes[node].up || !self.owners.contains_key(&(node, id)) {
                    return;
                }
                match p.client_plan {
                    ClientPlan::Establish { .. } => {
                        // librdmacm's part of CONNECT_RESPONSE: the QP to
                        // RTR and RTS, then the RTU.
                        match self.nodes[node].ep.rep_changes(id) {
                            Ok(changes) => {
                                let q = softrdma_wire::Qpn::new(Self::client_qpn(c));
                                for ch in &changes {
                                    self.apply(node, id, q, ch);
                                }
                            }
                            Err(e) => self.violation(format!("conn {c}: REP's QP changes: {e}")),
                        }
                        if self.nodes[node].ep.establish(id, now).is_ok() {
                            self.check_rts(node, id, Self::server_qpn(c));
                            self.outcome(node, id, "ESTABLISHED (RTU)");
                            self.report.conns[c].client_established += 1;
                            let data = p.data_ms.min(p.hold_ms / 2);
                            self.schedule(now.add_ms(data), Action::Data(c));
                            let td = match p.teardown {
                                Teardown::ClientDisconnect | Teardown::ClientDestroy => 0,
                                Teardown::ServerDisconnect | Teardown::ServerDestroy => 1,
                                Teardown::Both => 2,
                            };
                            self.schedule(now.add_ms(p.hold_ms), Action::Teardown(c, td));
                            self.schedule(
                                now.add_ms(p.hold_ms + 30_000),
                                Action::Watchdog(c, false),
                            );
                            self.schedule(
                                now.add_ms(p.hold_ms + 30_000),
                                Action::Watchdog(c, true),
                            );
                        }
                    }
                    ClientPlan::Reject { .. } => {
                        if self.nodes[node]
                            .ep
                            .reject(id, now, &[], RejReason::CONSUMER_DEFINED)
                            .is_ok()
                        {
                            self.after_outcome(node, id);
                        }
                    }
                    ClientPlan::DestroyEarly { .. } => {}
                }
            }
            Action::ClientGiveUp(c) => {
                let node = self.sc.conns[c].client;
                let Some(id) = self.report.conns[c].client_id else {
                    return;
                };
                if !self.nodes[node].up || !self.owners.contains_key(&(node, id)) {
                    return;
                }
                // Whatever was reached by now (REQ pending, or a REP not
                // answered yet): destroy says goodbye.
                self.report.conns[c].client_gave_up = true;
                self.destroy(node, id);
            }
            Action::Data(c) => {
                // The client's first packet reaches the server's QP.
                let node = self.sc.conns[c].server;
                if !self.nodes[node].up {
                    return;
                }
                let ids = self.report.conns[c].server_ids.clone();
                for id in ids {
                    if matches!(
                        self.nodes[node].ep.cm_state(id),
                        Some(State::RepSent | State::MraRepRcvd)
                    ) {
                        let _ = self.nodes[node].ep.notify_established(id);
                        self.drain_events(node);
                    }
                }
            }
            Action::Teardown(c, who) => {
                let p = self.sc.conns[c].clone();
                let client = self.report.conns[c].client_id.map(|i| (p.client, i));
                let server = self.report.conns[c]
                    .server_ids
                    .first()
                    .map(|&i| (p.server, i));
                let destroy = matches!(
                    p.teardown,
                    Teardown::ClientDestroy | Teardown::ServerDestroy
                );
                let sides: Vec<(usize, u64)> = match who {
                    0 => client.into_iter().collect(),
                    1 => server.into_iter().collect(),
                    _ => client.into_iter().chain(server).collect(),
                };
                for (node, id) in sides {
                    if !self.nodes[node].up || !self.owners.contains_key(&(node, id)) {
                        continue;
                    }
                    let st = self.nodes[node].ep.cm_state(id);
                    if destroy && st == Some(State::Established) {
                        self.destroy(node, id);
                    } else if st == Some(State::Established) {
                        let _ = self.nodes[node].ep.disconnect(id, now);
                    } else if matches!(st, Some(State::RepSent | State::MraRepRcvd)) {
                        // Not connected yet on this side (RTU on its way):
                        // try again later.
                        self.schedule(now.add_ms(5_000), Action::Teardown(c, who));
                    }
                }
            }
            Action::Watchdog(c, server_side) => {
                // A peer that died never sends its DREQ: the QP errors out
                // and the application disconnects by itself.
                let p = &self.sc.conns[c];
                let side = if server_side {
                    self.report.conns[c]
                        .server_ids
                        .first()
                        .map(|&i| (p.server, i))
                } else {
                    self.report.conns[c].client_id.map(|i| (p.client, i))
                };
                if let Some((node, id)) = side {
                    if self.nodes[node].up && self.owners.contains_key(&(node, id)) {
                        match self.nodes[node].ep.cm_state(id) {
                            Some(State::Established) => {
                                let _ = self.nodes[node].ep.disconnect(id, now);
                            }
                            Some(State::RepSent | State::MraRepRcvd | State::DreqSent) => {
                                self.schedule(now.add_ms(30_000), Action::Watchdog(c, server_side));
                            }
                            _ => {}
                        }
                    }
                }
            }
            Action::Kill(n) => {
                self.nodes[n].up = false;
            }
            Action::CloseListeners => {
                for n in 0..self.nodes.len() {
                    if !self.nodes[n].up {
                        continue;
                    }
                    // `rdma_destroy_id` of each listener: the device stops
                    // listening once none covers it, the ports go.
                    for num in std::mem::take(&mut self.nodes[n].listeners) {
                        if let Err(e) = self.nodes[n].ep.destroy(num, now) {
                            self.violation(format!("destroy of listener {num}: {e}"));
                        }
                    }
                }
            }
        }
        for n in 0..self.nodes.len() {
            self.drain_events(n);
        }
        self.flush();
    }

    pub(super) fn client_qpn(c: usize) -> u32 {
        0x1000 + 2 * c as u32
    }
    fn server_qpn(c: usize) -> u32 {
        0x1001 + 2 * c as u32
    }
}
