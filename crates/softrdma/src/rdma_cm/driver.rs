//! The CM driver: one `softrdma_cm::Cm` per device, fed by the engine
//! (MADs received on QP 1, timers) and by rdma_cm calls, its MADs sent as
//! UD SENDs from QP 1, its events turned into rdma_cm events on the
//! channels (what Linux's `cma_ib_handler` / `cma_ib_req_handler` do).

use super::channel::Queued;
use super::state::{lock, Guard, IdEntry, St};
use super::{ConnParam, EventType, UdParam};
use crate::engine::Shared;
use softrdma_cm::negotiate::{conn_param_from_rep, conn_param_from_req, AhAttr};
use softrdma_cm::{Cm, CmConfig, Event, Instant, ServiceId, SidrStatus};
use softrdma_proto::QpType;
use softrdma_wire::cm::CMA_HDR_LEN;
use softrdma_wire::cm::{CmMadRepr, CmMsg};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};

/// A device's CM and the maps from its ids to rdma_cm ids.
pub(crate) struct DevState {
    pub cm: Cm,
    /// CM id (comm ID) → rdma_cm id.
    pub by_cm: HashMap<u32, u64>,
    /// The device's address.
    pub ip: IpAddr,
    /// The CM listener of each service ID some rdma_cm listener covering
    /// this device listens on (shared by the rdma_cm listeners of one
    /// port: `0.0.0.0` and `[::]`, or several addresses).
    pub listeners: HashMap<ServiceId, softrdma_cm::CmId>,
    /// Requests for service IDs nobody listens on yet (see [`PARK_NS`]).
    parked: VecDeque<Parked>,
    /// Requests refused for their source's half-open limit, as last logged.
    refused_logged: u64,
    /// When the next such warning may be logged.
    refused_log_at: Instant,
}

/// How often at most refused connection requests are logged.
const REFUSED_LOG_EVERY_NS: u64 = 1_000_000_000;

/// How long a REQ or SIDR_REQ for a service ID nobody listens on is held
/// before the CM answers it (REJ 8, SIDR_REP "unsupported"), in case a
/// listener comes: then it is handed over at once. Programs that agree
/// out of band that the server is ready (perftest's `-R` handshake) let
/// the client connect right after the server's last message, while the
/// server is still between that message and `rdma_listen`; Linux, whose
/// address and route resolution take longer, rarely loses that race, a
/// softrdma client on the same host often would. The only difference a
/// peer sees: a REJ 8 comes this much later.
pub(crate) const PARK_NS: u64 = 200_000_000;
/// Requests held at most (more go to the CM at once).
const PARK_MAX: usize = 64;

/// A request held for a listener to come.
struct Parked {
    until: Instant,
    sid: ServiceId,
    src: IpAddr,
    src_qpn: softrdma_wire::Qpn,
    mad: Vec<u8>,
}

/// The service ID of a REQ or SIDR_REQ.
fn request_sid(mad: &[u8]) -> Option<ServiceId> {
    match CmMadRepr::parse(mad).ok()?.msg {
        CmMsg::Req(r) => Some(r.service_id),
        CmMsg::SidrReq(r) => Some(r.service_id),
        _ => None,
    }
}

impl DevState {
    /// Takes a received MAD: to the CM, or held (a request nobody listens
    /// for yet).
    fn receive(&mut self, t: Instant, m: &softrdma_proto::GsiMad) {
        if self.parked.len() < PARK_MAX {
            if let Some(sid) = request_sid(&m.mad).filter(|s| !self.listeners.contains_key(s)) {
                if !self.parked.iter().any(|p| p.mad == m.mad && p.src == m.src) {
                    self.parked.push_back(Parked {
                        until: t.add_ns(PARK_NS),
                        sid,
                        src: m.src,
                        src_qpn: m.src_qpn,
                        mad: m.mad.clone(),
                    });
                }
                return;
            }
        }
        self.cm.handle_mad(t, m.src, m.src_qpn, &m.mad);
        self.log_refused(t, m.src);
    }

    /// A warning, at most once a second, when requests were refused for
    /// their source's half-open limit.
    fn log_refused(&mut self, t: Instant, src: IpAddr) {
        let refused = self.cm.counters().rx_refused_half_open;
        if refused > self.refused_logged && t >= self.refused_log_at {
            tracing::warn!(
                target: "softrdma::rdma_cm",
                dev = %self.ip,
                last_from = %src,
                "refused {} connection requests (REJ no resources): their source had \
                 {} requests waiting (counter rx_refused_half_open)",
                refused - self.refused_logged,
                softrdma_cm::limits::MAX_HALF_OPEN_PER_SOURCE
            );
            self.refused_logged = refused;
            self.refused_log_at = t.add_ns(REFUSED_LOG_EVERY_NS);
        }
    }

    /// Hands the held requests that are due (or, with `sid`, those for a
    /// service ID that has a listener now) to the CM.
    pub fn release_parked(&mut self, t: Instant, sid: Option<ServiceId>) {
        let mut keep = VecDeque::with_capacity(self.parked.len());
        for p in self.parked.drain(..) {
            if p.until <= t || Some(p.sid) == sid {
                self.cm.handle_mad(t, p.src, p.src_qpn, &p.mad);
            } else {
                keep.push_back(p);
            }
        }
        self.parked = keep;
    }

    /// The next deadline: the CM's or a held request's.
    fn deadline(&self) -> Option<Instant> {
        let held = self.parked.iter().map(|p| p.until).min();
        match (self.cm.poll_timeout(), held) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The CM's clock: the engine's.
pub(crate) fn now(shared: &Shared) -> Instant {
    Instant(shared.now().0)
}

/// The device's CM, made on first use.
pub(crate) fn dev_state<'a>(g: &'a mut Guard, shared: &Shared) -> &'a mut DevState {
    let serial = shared.serial;
    let st = g.st();
    st.devs.entry(serial).or_insert_with(|| {
        let (guid, ip) = shared.peek_core(|c| (c.config().node_guid, c.config().local_ip));
        let mut key = [0u8; 16];
        let _ = getrandom::fill(&mut key);
        let k = [
            u64::from_le_bytes(key[..8].try_into().expect("8 bytes")),
            u64::from_le_bytes(key[8..].try_into().expect("8 bytes")),
        ];
        shared
            .cm_used
            .store(true, std::sync::atomic::Ordering::SeqCst);
        DevState {
            cm: Cm::new(CmConfig::new(guid, k)),
            by_cm: HashMap::new(),
            ip,
            listeners: HashMap::new(),
            parked: VecDeque::new(),
            refused_logged: 0,
            refused_log_at: Instant(0),
        }
    })
}

/// MADs arrived on QP 1 (called by the engine, no engine lock held).
/// Installs this driver as the engine's CM hook ([`crate::cm_hook`]).
pub(crate) fn install_hook() {
    crate::cm_hook::install(crate::cm_hook::CmHook {
        on_gsi,
        on_timer,
        forget_device,
    });
}

pub(crate) fn on_gsi(shared: &Shared) {
    let mads = shared.take_gsi();
    if mads.is_empty() {
        return;
    }
    let mut g = lock();
    receive_mads(&mut g, shared, &mads);
    pump(&mut g, shared);
}

/// Hands received MADs to the device's CM (no pump).
fn receive_mads(g: &mut Guard, shared: &Shared, mads: &[softrdma_proto::GsiMad]) {
    let t = now(shared);
    let serial = shared.serial;
    dev_state(g, shared);
    for m in mads {
        // A request for a port a wildcard listener took before this device
        // opened: the device listens on it now (`cma_listen_on_dev` when
        // a device is added).
        if let Some(sid) = request_sid(&m.mad) {
            cm_listen(g, serial, sid);
        }
        let ds = dev_state(g, shared);
        tracing::debug!(target: "softrdma::rdma_cm", "softrdma cm {}: <- {} {}",
                ds.ip,
                m.src,
                softrdma_wire::pretty::mad_line(&m.mad));
        ds.receive(t, m);
    }
}

/// The CM's deadline passed (called by the progress thread).
pub(crate) fn on_timer(shared: &Shared) {
    let mut g = lock();
    let t = now(shared);
    if let Some(ds) = g.st().devs.get_mut(&shared.serial) {
        ds.release_parked(t, None);
        ds.cm.handle_timeout(t);
    }
    pump(&mut g, shared);
}

/// The device is gone: drop its CM (called when the engine's state is
/// dropped, never under this module's lock).
pub(crate) fn forget_device(serial: u64) {
    let mut g = lock();
    if let Some(ds) = g.st().devs.remove(&serial) {
        g.defer_drop(ds.by_cm);
    }
}

/// Runs the device's CM until it has nothing more to say: its events
/// become rdma_cm events, its MADs go out, its deadline is published.
pub(crate) fn pump(g: &mut Guard, shared: &Shared) {
    let serial = shared.serial;
    // Bounded: each round takes one event; handling one may produce more
    // (a reject of a bad request), never more than one per event.
    for _ in 0..100_000 {
        let Some(ds) = g.st().devs.get_mut(&serial) else {
            return;
        };
        let Some(ev) = ds.cm.poll_event() else {
            break;
        };
        tracing::debug!(target: "softrdma::rdma_cm", "softrdma cm {}: event {ev:?}", ds.ip);
        handle_event(g, shared, ev);
    }
    let Some(ds) = g.st().devs.get_mut(&serial) else {
        return;
    };
    let mut out = Vec::new();
    while let Some(t) = ds.cm.poll_transmit() {
        tracing::debug!(target: "softrdma::rdma_cm", "softrdma cm {}: -> {} {}",
                ds.ip,
                t.dst,
                softrdma_wire::pretty::mad_line(&t.mad));
        out.push((t.dst, t.dst_qpn, t.mad));
    }
    let deadline = ds.deadline().map(|t| softrdma_proto::Instant(t.0));
    shared.send_mads(&out);
    shared.set_cm_deadline(deadline);
}

/// The rdma_cm id of a CM id of this device.
fn id_of(g: &mut Guard, serial: u64, cm_id: softrdma_cm::CmId) -> Option<u64> {
    g.st()
        .devs
        .get(&serial)?
        .by_cm
        .get(&cm_id.comm_id())
        .copied()
}

fn push(g: &mut Guard, num: u64, q: Queued) {
    if let Some(e) = g.st().ids.get(&num) {
        e.chan.push(q);
    }
}

fn handle_event(g: &mut Guard, shared: &Shared, ev: Event) {
    let serial = shared.serial;
    match ev {
        Event::ConnectRequest(cr) => connect_request(g, shared, *cr),
        Event::SidrRequest(sr) => sidr_request(g, shared, *sr),
        Event::RepReceived(r) => {
            let Some(num) = id_of(g, serial, r.id) else {
                return;
            };
            let mut q = Queued::new(num, EventType::ConnectResponse, 0);
            q.conn = to_conn(conn_param_from_rep(&r.rep()));
            push(g, num, q);
        }
        Event::Established { id } => {
            let Some(num) = id_of(g, serial, id) else {
                return;
            };
            push(g, num, Queued::new(num, EventType::Established, 0));
        }
        Event::Rejected(r) => {
            let Some(num) = id_of(g, serial, r.id) else {
                return;
            };
            if let Some(e) = g.st().ids.get_mut(&num) {
                // cma_ib_handler: the id leaves CONNECT for good.
                if e.st == St::Connect {
                    e.st = St::RouteResolved;
                }
            }
            let mut q = Queued::new(num, EventType::Rejected, i32::from(r.reason.0));
            q.conn.private_data = r.private_data.clone();
            push(g, num, q);
        }
        Event::Unreachable { id, .. } => {
            let Some(num) = id_of(g, serial, id) else {
                return;
            };
            push(
                g,
                num,
                Queued::new(num, EventType::Unreachable, -libc::ETIMEDOUT),
            );
        }
        Event::DisconnectRequest { id, .. } => disconnected(g, serial, id, 0),
        Event::Disconnected { id, timed_out, .. } => {
            disconnected(g, serial, id, if timed_out { -libc::ETIMEDOUT } else { 0 })
        }
        Event::TimewaitExit { id } => {
            let Some(num) = id_of(g, serial, id) else {
                return;
            };
            push(g, num, Queued::new(num, EventType::TimewaitExit, 0));
        }
        Event::SidrReply(r) => {
            let Some(num) = id_of(g, serial, r.id) else {
                return;
            };
            let Some(e) = g.st().ids.get_mut(&num) else {
                return;
            };
            let mut ud = UdParam {
                private_data: r.private_data.clone(),
                ..Default::default()
            };
            let q = if r.status == SidrStatus::SUCCESS {
                ud.qp_num = r.qpn.value();
                ud.qkey = r.qkey.0;
                ud.ah_attr = e.path.map(|p| AhAttr {
                    dgid: p.dgid,
                    sgid: p.sgid,
                    flow_label: p.flow_label,
                    hop_limit: p.hop_limit,
                    traffic_class: p.traffic_class,
                    sl: p.sl,
                    port_num: 1,
                });
                e.remote_ud = Some((r.qpn, r.qkey.0));
                Queued::new(num, EventType::Established, 0)
            } else {
                Queued::new(num, EventType::Unreachable, i32::from(r.status.0))
            };
            let mut q = q;
            q.ud = Some(ud);
            e.chan.push(q);
        }
    }
}

fn disconnected(g: &mut Guard, serial: u64, id: softrdma_cm::CmId, status: i32) {
    let Some(num) = id_of(g, serial, id) else {
        return;
    };
    let Some(e) = g.st().ids.get_mut(&num) else {
        return;
    };
    // cma_comp_exch(CONNECT → DISCONNECT): reported once.
    if e.st != St::Connect {
        return;
    }
    e.st = St::Disconnect;
    e.chan
        .push(Queued::new(num, EventType::Disconnected, status));
}

fn to_conn(c: softrdma_cm::negotiate::ConnParam) -> ConnParam {
    ConnParam {
        private_data: c.private_data,
        responder_resources: c.responder_resources,
        initiator_depth: c.initiator_depth,
        flow_control: c.flow_control,
        retry_count: c.retry_count,
        rnr_retry_count: c.rnr_retry_count,
        srq: c.srq,
        qp_num: c.qp_num.value(),
    }
}

/// Whether listener `e` covers the device `serial` for `sid`: it listens
/// on that port, bound to the device's address or to a wildcard (every
/// device, whatever its address family: requests are sorted by their
/// destination later, as the kernel's `cma_listen_on_all` does).
fn covers(e: &IdEntry, serial: u64, sid: ServiceId) -> bool {
    e.st == St::Listen
        && e.src.is_some_and(|s| service_id(e.ps, s.port()) == sid)
        && e.dev.as_ref().is_none_or(|d| d.serial() == serial)
}

/// Makes the device listen on `sid` (one CM listener, shared) if an
/// rdma_cm listener covers it. Returns whether it listens.
pub(crate) fn cm_listen(g: &mut Guard, serial: u64, sid: ServiceId) -> bool {
    let st = g.st();
    let Some(ds) = st.devs.get(&serial) else {
        return false;
    };
    if ds.listeners.contains_key(&sid) {
        return true;
    }
    if !st.ids.values().any(|e| covers(e, serial, sid)) {
        return false;
    }
    // A device shared with other processes: connection requests for the
    // service come to this one (the device process routes them).
    let host = crate::device::Device::by_serial(serial).and_then(|d| d.shared().host.clone());
    if let Some(h) = &host {
        if let Err(e) = h.listen(sid.0) {
            tracing::debug!(target: "softrdma::rdma_cm", "softrdma cm: listen on {sid:?}: another process of the device listens (errno {e})");
            return false;
        }
    }
    let st = g.st();
    let ds = st.devs.get_mut(&serial).expect("checked");
    match ds.cm.listen(sid) {
        Ok(c) => {
            ds.listeners.insert(sid, c);
            true
        }
        Err(e) => {
            tracing::debug!(target: "softrdma::rdma_cm", "softrdma cm {}: listen on {sid:?}: {e}", ds.ip);
            false
        }
    }
}

/// Stops the device's CM listener of `sid` once no rdma_cm listener
/// covers the device any more.
pub(crate) fn cm_unlisten(g: &mut Guard, serial: u64, sid: ServiceId, t: Instant) {
    let st = g.st();
    if st.ids.values().any(|e| covers(e, serial, sid)) {
        return;
    }
    if let Some(ds) = st.devs.get_mut(&serial) {
        if let Some(c) = ds.listeners.remove(&sid) {
            let _ = ds.cm.destroy(t, c);
            if let Some(h) =
                crate::device::Device::by_serial(serial).and_then(|d| d.shared().host.clone())
            {
                h.unlisten(sid.0);
            }
        }
    }
}

/// The rdma_cm listener a request for `sid` that reached device `serial`
/// for address `dst` belongs to (`cma_find_listener`): one covering the
/// device whose bound address matches `dst`, a specific address before a
/// wildcard.
fn find_listener(g: &mut Guard, serial: u64, sid: ServiceId, dst: IpAddr) -> Option<u64> {
    let mut best: Option<(u64, bool)> = None;
    for (&n, e) in &g.st().ids {
        if !covers(e, serial, sid) || !addr_matches(e, dst) {
            continue;
        }
        let specific = e.src.is_some_and(|s| !s.ip().is_unspecified());
        if best.is_none_or(|(b, bs)| (specific && !bs) || (specific == bs && n < b)) {
            best = Some((n, specific));
        }
    }
    best.map(|(n, _)| n)
}

/// Whether a request for `dst` matches a listener's bound address
/// (`cma_match_private_data`): a wildcard that is not AFONLY takes either
/// family; otherwise the family must match, and a specific address must
/// be `dst`.
fn addr_matches(e: &IdEntry, dst: IpAddr) -> bool {
    let Some(b) = e.src else {
        return false;
    };
    if b.ip().is_unspecified() && !e.opts.afonly(b.is_ipv4()) {
        return true;
    }
    if b.is_ipv4() != dst.is_ipv4() {
        return false;
    }
    b.ip().is_unspecified() || b.ip() == dst
}

/// A REQ for one of our listeners (`cma_ib_req_handler`): checks the
/// rdma_cm header, the bound address and the QP type (else REJ 28), the
/// backlog (else no answer: the requester retries), then a new id and a
/// CONNECT_REQUEST on the listener's channel.
fn connect_request(g: &mut Guard, shared: &Shared, cr: softrdma_cm::ConnectRequest) {
    let serial = shared.serial;
    let t = now(shared);
    let req = cr.req();
    // The CM's destroy of an unanswered request sends REJ 28 (Linux: the
    // handler's error makes cm_destroy_id reject it).
    let reject = |g: &mut Guard| {
        if let Some(ds) = g.st().devs.get_mut(&serial) {
            let _ = ds.cm.destroy(t, cr.id);
        }
    };
    let Some(cma) = cr.cma else {
        return reject(g);
    };
    let Some(lnum) = find_listener(g, serial, req.service_id, cma.dst) else {
        return reject(g);
    };
    let qp_type = match req.transport_service_type {
        0 => QpType::Rc,
        1 => QpType::Uc,
        _ => return reject(g),
    };
    let Some(l) = g.st().ids.get(&lnum) else {
        return reject(g);
    };
    if l.qp_type != qp_type {
        return reject(g);
    }
    let full = l.listen.as_ref().is_some_and(|x| x.pending >= x.backlog);
    if full {
        if let Some(ds) = g.st().devs.get_mut(&serial) {
            let _ = ds.cm.drop_request(cr.id);
        }
        return;
    }
    let (chan, ps, opts, lport) = (l.chan.clone(), l.ps, l.opts, l.src.map_or(0, |s| s.port()));
    let Some(dev) = g.device(serial) else {
        return reject(g);
    };
    let ds = g.st().devs.get_mut(&serial).expect("the device's CM");
    let info = ds.cm.info(cr.id);
    let seq = ds.cm.random_psn();
    let mut e = IdEntry::new(chan, ps, qp_type, seq);
    e.st = St::Connect;
    e.dev = Some(dev);
    e.src = Some(SocketAddr::new(cma.dst, lport));
    e.dst = Some(SocketAddr::new(cma.src, cma.src_port));
    e.path = info.map(|i| i.path);
    e.cm = Some(cr.id);
    e.listener = Some(lnum);
    e.opts.tos = opts.tos;
    let conn = conn_param_from_req(&req);
    e.resp_res = conn.responder_resources;
    e.init_depth = conn.initiator_depth;
    let num = g.st().insert(e);
    let ds = g.st().devs.get_mut(&serial).expect("the device's CM");
    ds.by_cm.insert(cr.id.comm_id(), num);
    if let Some(l) = g.st().ids.get_mut(&lnum).and_then(|l| l.listen.as_mut()) {
        l.pending += 1;
    }
    let mut q = Queued::new(lnum, EventType::ConnectRequest, 0);
    q.new_id = Some(num);
    q.conn = to_conn(conn);
    push(g, lnum, q);
}

/// A SIDR_REQ for one of our listeners: the same checks for a UD listener,
/// a new id, a CONNECT_REQUEST with the UD parameters.
fn sidr_request(g: &mut Guard, shared: &Shared, sr: softrdma_cm::SidrRequest) {
    let serial = shared.serial;
    let t = now(shared);
    let refuse = |g: &mut Guard| {
        if let Some(ds) = g.st().devs.get_mut(&serial) {
            let _ = ds.cm.destroy(t, sr.id);
        }
    };
    let Some(cma) = sr.cma else {
        return refuse(g);
    };
    let Some(lnum) = find_listener(g, serial, sr.service_id, cma.dst) else {
        return refuse(g);
    };
    let Some(l) = g.st().ids.get(&lnum) else {
        return refuse(g);
    };
    if l.qp_type != QpType::Ud {
        return refuse(g);
    }
    if l.listen.as_ref().is_some_and(|x| x.pending >= x.backlog) {
        if let Some(ds) = g.st().devs.get_mut(&serial) {
            let _ = ds.cm.drop_request(sr.id);
        }
        return;
    }
    let (chan, ps, lport) = (l.chan.clone(), l.ps, l.src.map_or(0, |s| s.port()));
    let Some(dev) = g.device(serial) else {
        return refuse(g);
    };
    let ds = g.st().devs.get_mut(&serial).expect("the device's CM");
    let seq = ds.cm.random_psn();
    let local = ds.ip;
    let mut e = IdEntry::new(chan, ps, QpType::Ud, seq);
    e.st = St::Connect;
    e.dev = Some(dev);
    e.src = Some(SocketAddr::new(cma.dst, lport));
    e.dst = Some(SocketAddr::new(cma.src, cma.src_port));
    e.path = Some(softrdma_cm::negotiate::rdma_cm_path(
        local,
        cma.src,
        lport,
        cma.src_port,
        5,
        0,
        64,
    ));
    e.cm = Some(sr.id);
    e.listener = Some(lnum);
    let num = g.st().insert(e);
    let ds = g.st().devs.get_mut(&serial).expect("the device's CM");
    ds.by_cm.insert(sr.id.comm_id(), num);
    if let Some(l) = g.st().ids.get_mut(&lnum).and_then(|l| l.listen.as_mut()) {
        l.pending += 1;
    }
    let mut q = Queued::new(lnum, EventType::ConnectRequest, 0);
    q.new_id = Some(num);
    q.ud = Some(UdParam {
        private_data: sr.private_data.get(CMA_HDR_LEN..).unwrap_or(&[]).to_vec(),
        ..Default::default()
    });
    push(g, lnum, q);
}

/// The service ID of an rdma_cm port.
pub(crate) fn service_id(ps: PortSpace, port: u16) -> ServiceId {
    ServiceId::rdma_cm(ps, port)
}

use softrdma_cm::PortSpace;
