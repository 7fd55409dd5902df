//! [`Endpoint`]: the rdma_cm ids of one process (or one simulated node)
//! as a sans-I/O state machine, the role quinn's `Endpoint` plays for its
//! connections. It owns the ids by number, the port tables, the
//! listeners and one [`DeviceCm`] per device; it takes the program's calls
//! on ids (`bind`, `listen`, `connect`, `accept`, `reject`, `disconnect`,
//! `destroy`…), the MADs each device received and the time, and gives
//! back, as data, the events for the program's channels
//! ([`Endpoint::poll_event`]), the MADs to send
//! ([`Endpoint::poll_transmit`]), the changes to make to the ids' QPs
//! ([`Endpoint::poll_qp_change`]) and its next deadline
//! ([`Endpoint::deadline`]).
//!
//! What it leaves to its driver: resolving addresses and routes (the
//! kernel's routing table, a route's MTU: the driver hands the result to
//! [`Endpoint::resolve`]), the channels' descriptors, applying the QP
//! changes to real QPs, and the clock. The calls on the connection side
//! (`connect`, `accept`…) are in `calls.rs`.

use super::event::{report, ConnParam, EventType, IdState, UdParam};
use super::listen::{find, Admission, Listener, Transport};
use super::ports::{Binding, PortError, Ports};
use super::{request_sid, service_id, DeviceCm, GateAsk, Join, QpChange, Refused};
use crate::negotiate::{conn_param_from_req, rdma_cm_path};
use crate::{CmConfig, CmError, CmId, Event, Instant, Path, PortSpace, ServiceId, Transmit};
use softrdma_wire::cm::CMA_HDR_LEN;
use softrdma_wire::{Psn, Qpn};
use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, SocketAddr};

/// Why a call on an id failed (the driver turns each into an errno:
/// EINVAL unless said otherwise).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// No id with this number.
    #[error("no such rdma_cm id")]
    NoSuchId,
    /// The call does not fit the id's state.
    #[error("{0}")]
    State(&'static str),
    /// The id's device is unknown to the endpoint.
    #[error("no such device")]
    NoDevice,
    /// The port tables refused (EADDRINUSE).
    #[error(transparent)]
    Port(#[from] PortError),
    /// The device's CM refused.
    #[error(transparent)]
    Cm(#[from] CmError),
    /// `rdma_leave_multicast` of a group the id did not join
    /// (EADDRNOTAVAIL).
    #[error("{0} not joined")]
    NotJoined(IpAddr),
}

/// Options of an id (`rdma_set_option`, `rdma_set_min_rnr_timer`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// `RDMA_OPTION_ID_TOS`.
    pub tos: Option<u8>,
    /// `RDMA_OPTION_ID_ACK_TIMEOUT`.
    pub ack_timeout: Option<u8>,
    /// `rdma_set_min_rnr_timer`.
    pub min_rnr_timer: Option<u8>,
    /// `RDMA_OPTION_ID_REUSEADDR`.
    pub reuseaddr: bool,
    /// `RDMA_OPTION_ID_AFONLY` as bound (the driver decides the default).
    pub afonly: bool,
}

/// One rdma_cm id.
#[derive(Clone, Debug)]
pub struct Id {
    /// Its port space.
    pub ps: PortSpace,
    /// The transport of its QP.
    pub transport: Transport,
    /// Its rdma_cm state.
    pub st: IdState,
    /// Its device (once bound to an address or resolved).
    pub dev: Option<u64>,
    /// Local address (IP unspecified while bound to a wildcard).
    pub src: Option<SocketAddr>,
    /// Peer address.
    pub dst: Option<SocketAddr>,
    /// The resolved route (the path back for a request's id).
    pub path: Option<Path>,
    /// The CM id of its connection on `dev`.
    pub cm: Option<CmId>,
    /// Listening: what it binds and its backlog.
    pub listen: Option<Listener>,
    /// A request's id: its listener.
    pub listener: Option<u64>,
    /// A request's id the program took ([`Endpoint::claim`]).
    pub claimed: bool,
    /// The QP the id drives and whether it has an SRQ.
    pub qp: Option<(Qpn, bool)>,
    /// rdma_cm's own PSN (`seq_num`): the receive PSN.
    pub seq: Psn,
    /// librdmacm's `responder_resources` / `initiator_depth`.
    pub resp_res: u8,
    /// See `resp_res`.
    pub init_depth: u8,
    /// Options.
    pub opts: Options,
    /// The id holds `src`'s port in its port space's table.
    pub port_held: bool,
    /// The peer's UD QP and Q_Key (UD, after ESTABLISHED).
    pub remote_ud: Option<(Qpn, u32)>,
    /// Events reported and acknowledged (`rdma_ack_cm_event`).
    pub reported: u64,
    /// See `reported`.
    pub acked: u64,
    /// Multicast groups joined (`rdma_join_multicast`, `mcast.rs`).
    pub mcast: Vec<Join>,
}

impl Id {
    fn new(ps: PortSpace, transport: Transport, seq: Psn) -> Id {
        Id {
            ps,
            transport,
            st: IdState::Idle,
            dev: None,
            src: None,
            dst: None,
            path: None,
            cm: None,
            listen: None,
            listener: None,
            claimed: false,
            qp: None,
            seq,
            resp_res: 0,
            init_depth: 0,
            opts: Options::default(),
            port_held: false,
            remote_ud: None,
            reported: 0,
            acked: 0,
            mcast: Vec::new(),
        }
    }

    fn binding(&self, ip: IpAddr) -> Binding {
        Binding {
            ip,
            reuseaddr: self.opts.reuseaddr,
            afonly: self.opts.afonly,
        }
    }
}

/// An event for a program's channel (`struct rdma_cm_event` as data).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdEvent {
    /// The id (for `ConnectRequest`, the new one).
    pub id: u64,
    /// What happened.
    pub event: EventType,
    /// 0, a negative errno, or the IB reject reason / SIDR status.
    pub status: i32,
    /// The listener, for `ConnectRequest`.
    pub listen_id: Option<u64>,
    /// Connection parameters (RC events).
    pub conn: ConnParam,
    /// UD parameters (events of UD ids).
    pub ud: Option<UdParam>,
    /// A multicast event's group and the program's context for the join.
    pub mc: Option<(IpAddr, u64)>,
}

impl IdEvent {
    /// An event without parameters.
    pub fn new(id: u64, event: EventType, status: i32) -> IdEvent {
        IdEvent {
            id,
            event,
            status,
            listen_id: None,
            conn: ConnParam::zero(),
            ud: None,
            mc: None,
        }
    }
}

/// A device's CM event and the id it concerned, for observers
/// ([`Endpoint::observe`]): what the rdma_cm events were made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The device.
    pub dev: u64,
    /// The id the event went to (none: a request no listener took).
    pub id: Option<u64>,
    /// The CM's event.
    pub event: Event,
    /// The rdma_cm event it became, if any (event and status).
    pub reported: Option<(EventType, i32)>,
}

/// The rdma_cm ids of a process, their ports, listeners and devices' CMs.
#[derive(Debug, Default)]
pub struct Endpoint {
    pub(super) devs: BTreeMap<u64, DeviceCm>,
    pub(super) ids: BTreeMap<u64, Id>,
    next: u64,
    pub(super) ports: Ports,
    pub(super) events: VecDeque<IdEvent>,
    pub(super) changes: VecDeque<(u64, Qpn, QpChange)>,
    observed: Option<VecDeque<Observed>>,
    /// The latest time a call gave (for what the CM does while pumping).
    pub(super) now: Instant,
    refused: VecDeque<(u64, Refused)>,
    /// What gated devices ask of their device process (`gate.rs`).
    pub(super) gate: VecDeque<GateAsk>,
}

impl Endpoint {
    /// An endpoint without devices or ids.
    pub fn new() -> Endpoint {
        Endpoint::default()
    }

    /// Adds a device (by the driver's number) with its CM; the wildcard
    /// listeners listen on it at once (`cma_listen_on_dev`).
    pub fn add_device(&mut self, dev: u64, cfg: CmConfig, ip: IpAddr, now: Instant) {
        self.tick(now);
        self.devs.insert(dev, DeviceCm::new(cfg, ip));
        let sids: Vec<ServiceId> = self
            .ids
            .values()
            .filter_map(|e| e.listen.as_ref())
            .filter(|l| l.device.is_none())
            .map(Listener::service_id)
            .collect();
        // A CM that cannot listen (its table full) leaves the request
        // held, then rejected as for nobody listening (Linux fails the
        // device's addition instead).
        for sid in sids {
            let _ = self.cm_listen(dev, sid, now);
        }
    }

    /// Forgets a device and its CM (the ids on it keep their numbers).
    pub fn remove_device(&mut self, dev: u64) -> Option<DeviceCm> {
        self.devs.remove(&dev)
    }

    /// A device's CM.
    pub fn device(&self, dev: u64) -> Option<&DeviceCm> {
        self.devs.get(&dev)
    }

    /// A device's CM, to change.
    pub fn device_mut(&mut self, dev: u64) -> Option<&mut DeviceCm> {
        self.devs.get_mut(&dev)
    }

    /// The devices' numbers.
    pub fn devices(&self) -> impl Iterator<Item = u64> + '_ {
        self.devs.keys().copied()
    }

    /// Keeps (or stops keeping) the CM events behind the rdma_cm events
    /// for [`Endpoint::poll_observed`].
    pub fn observe(&mut self, on: bool) {
        self.observed = on.then(VecDeque::new);
    }

    /// The next CM event kept by [`Endpoint::observe`].
    pub fn poll_observed(&mut self) -> Option<Observed> {
        self.observed.as_mut()?.pop_front()
    }

    /// `rdma_create_id`: a new id; `seq` is its PSN (random, the driver's).
    pub fn create_id(&mut self, ps: PortSpace, transport: Transport, seq: Psn) -> u64 {
        self.insert(Id::new(ps, transport, seq))
    }

    fn insert(&mut self, e: Id) -> u64 {
        self.next += 1;
        self.ids.insert(self.next, e);
        self.next
    }

    /// The clock moved to `now` (it never goes back).
    pub(super) fn tick(&mut self, now: Instant) {
        self.now = self.now.max(now);
    }

    /// An id.
    pub fn id(&self, num: u64) -> Option<&Id> {
        self.ids.get(&num)
    }

    /// The ids' numbers.
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.ids.keys().copied()
    }

    pub(super) fn entry(&mut self, num: u64) -> Result<&mut Id, EndpointError> {
        self.ids.get_mut(&num).ok_or(EndpointError::NoSuchId)
    }

    /// The CM state of an id's connection.
    pub fn cm_state(&self, num: u64) -> Option<crate::State> {
        let e = self.ids.get(&num)?;
        self.devs.get(&e.dev?)?.cm.state(e.cm?)
    }

    /// Sets an id's options (REUSEADDR: before bind or while bound, the
    /// port's binding follows; AFONLY: before bind).
    pub fn set_options(&mut self, num: u64, o: Options) -> Result<(), EndpointError> {
        let e = self.entry(num)?;
        if o.reuseaddr != e.opts.reuseaddr && !matches!(e.st, IdState::Idle | IdState::AddrBound) {
            return Err(EndpointError::State("REUSEADDR after bind"));
        }
        if o.afonly != e.opts.afonly && e.st != IdState::Idle {
            return Err(EndpointError::State("AFONLY after bind"));
        }
        e.opts = o;
        if let (true, Some(src)) = (e.port_held, e.src) {
            let (ps, b) = (e.ps, e.binding(src.ip()));
            self.ports.update(ps, src.port(), num, b);
        }
        Ok(())
    }

    /// `rdma_bind_addr`: the id takes `addr`'s port (0: an ephemeral one,
    /// searched from `start`) on device `dev` (none: a wildcard).
    pub fn bind(
        &mut self,
        num: u64,
        dev: Option<u64>,
        addr: SocketAddr,
        start: u32,
    ) -> Result<u16, EndpointError> {
        let e = self.entry(num)?;
        if e.st != IdState::Idle {
            return Err(EndpointError::State("rdma_bind_addr: bound already"));
        }
        let (ps, b) = (e.ps, e.binding(addr.ip()));
        let port = self.ports.take(ps, num, addr.port(), b, start)?;
        let e = self.entry(num)?;
        e.port_held = true;
        e.src = Some(SocketAddr::new(addr.ip(), port));
        e.dev = dev;
        e.st = IdState::AddrBound;
        Ok(port)
    }

    /// The address and route the driver resolved (`rdma_resolve_addr`
    /// and `rdma_resolve_route`): an unbound id takes an ephemeral port on
    /// `src`. The driver reports ADDR_RESOLVED / ROUTE_RESOLVED itself.
    pub fn resolve(
        &mut self,
        num: u64,
        dev: u64,
        src: IpAddr,
        dst: SocketAddr,
        path: Path,
        start: u32,
    ) -> Result<u16, EndpointError> {
        let e = self.entry(num)?;
        let port = match (e.st, e.src) {
            (IdState::Idle, _) => self.bind(num, Some(dev), SocketAddr::new(src, 0), start)?,
            (IdState::AddrBound | IdState::AddrResolved, Some(s)) => s.port(),
            _ => return Err(EndpointError::State("rdma_resolve_addr: in use")),
        };
        let e = self.entry(num)?;
        e.dev = Some(dev);
        e.src = Some(SocketAddr::new(src, port));
        e.dst = Some(dst);
        e.path = Some(path);
        e.st = IdState::RouteResolved;
        Ok(port)
    }

    /// `rdma_resolve_addr` as resolved by the driver (the device `dev`
    /// whose address `src` reaches `dst`): an unbound id takes an
    /// ephemeral port on `src`, one bound to a wildcard keeps its port on
    /// `src` (if the port tables allow it there); ADDR_RESOLVED queued.
    pub fn resolve_addr(
        &mut self,
        num: u64,
        dev: u64,
        src: IpAddr,
        dst: SocketAddr,
        start: u32,
    ) -> Result<u16, EndpointError> {
        if src.is_ipv4() != dst.is_ipv4() {
            return Err(EndpointError::State(
                "rdma_resolve_addr: addresses of two families",
            ));
        }
        let e = self.entry(num)?;
        let port = match (e.st, e.src) {
            (IdState::Idle, _) => self.bind(num, Some(dev), SocketAddr::new(src, 0), start)?,
            (IdState::AddrBound, Some(s)) if s.ip().is_unspecified() => {
                let (ps, b) = (e.ps, e.binding(src));
                self.ports.check(ps, s.port(), num, b)?;
                self.ports.update(ps, s.port(), num, b);
                s.port()
            }
            (IdState::AddrBound, Some(s)) if s.ip() == src => s.port(),
            _ => return Err(EndpointError::State("rdma_resolve_addr: in use")),
        };
        let e = self.entry(num)?;
        e.dev = Some(dev);
        e.src = Some(SocketAddr::new(src, port));
        e.dst = Some(dst);
        e.st = IdState::AddrResolved;
        self.push(IdEvent::new(num, EventType::AddrResolved, 0));
        Ok(port)
    }

    /// `rdma_resolve_addr` that found no device reaching the destination:
    /// ADDR_ERROR with `status` (a negative errno) queued.
    pub fn resolve_failed(&mut self, num: u64, status: i32) -> Result<(), EndpointError> {
        self.entry(num)?;
        self.push(IdEvent::new(num, EventType::AddrError, status));
        Ok(())
    }

    /// `rdma_resolve_route` with the path the driver made (the egress
    /// interface's MTU, the id's TOS and ACK timeout):
    /// ROUTE_RESOLVED queued.
    pub fn resolve_route(&mut self, num: u64, path: Path) -> Result<(), EndpointError> {
        let e = self.entry(num)?;
        if e.st != IdState::AddrResolved || e.dev.is_none() {
            return Err(EndpointError::State(
                "rdma_resolve_route: address not resolved",
            ));
        }
        e.path = Some(path);
        e.st = IdState::RouteResolved;
        self.push(IdEvent::new(num, EventType::RouteResolved, 0));
        Ok(())
    }

    /// `rdma_listen`: the id takes the requests for its port on its device
    /// (every device for a wildcard address); `backlog` ≤ 0: the most. A
    /// port shared with REUSEADDR must be the id's alone to listen
    /// (`cma_bind_listen`). A device's CM that cannot listen (its id
    /// table full: [`CmError::TooManyIds`], ENOMEM) fails the call: the
    /// id is bound again and no device listens for it
    /// (`cma_listen_on_all`'s `_cma_cancel_listens`).
    ///
    /// A listening id: Linux's ucma sets the backlog
    /// ([`Listener::relisten`]) before `rdma_listen`, which then fails
    /// (its `rdma_bind_addr` of a bound id: EINVAL); so here.
    pub fn listen(&mut self, num: u64, backlog: i32, now: Instant) -> Result<(), EndpointError> {
        self.tick(now);
        let e = self.entry(num)?;
        if e.st == IdState::Listen {
            if let Some(l) = e.listen.as_mut() {
                l.relisten(backlog);
            }
            return Err(EndpointError::State("rdma_listen: listening already"));
        }
        let (IdState::AddrBound, Some(src)) = (e.st, e.src) else {
            return Err(EndpointError::State("rdma_listen: not bound"));
        };
        let exclusive = Binding {
            reuseaddr: false,
            ..e.binding(src.ip())
        };
        let ps = e.ps;
        self.ports.check(ps, src.port(), num, exclusive)?;
        let e = self.entry(num)?;
        let l = Listener::new(e.ps, src, e.opts.afonly, e.dev, e.transport, backlog);
        let sid = l.service_id();
        e.listen = Some(l);
        e.st = IdState::Listen;
        let devs: Vec<u64> = match e.dev {
            Some(d) => vec![d],
            None => self.devs.keys().copied().collect(),
        };
        for d in devs {
            if let Err(err) = self.cm_listen(d, sid, now) {
                self.stop_listening(num, now)?;
                return Err(err.into());
            }
        }
        Ok(())
    }

    /// Device `dev` listens on `sid` (one CM listener, shared); a gated
    /// device asks its device process first (`gate.rs`). The CM's
    /// refusal (its id table full) comes back.
    pub(super) fn cm_listen(
        &mut self,
        dev: u64,
        sid: ServiceId,
        now: Instant,
    ) -> Result<(), CmError> {
        if self
            .devs
            .get(&dev)
            .is_some_and(|d| d.gated && !d.listens(sid))
        {
            self.ask(GateAsk::Listen { dev, sid });
            return Ok(());
        }
        let r = match self.devs.get_mut(&dev) {
            Some(ds) => ds.listen(now, sid),
            None => Ok(()),
        };
        self.pump(dev);
        r
    }

    /// A request's id the program took (its CONNECT_REQUEST delivered):
    /// its listener's backlog has room again, and destroying the listener
    /// leaves it alone.
    pub fn claim(&mut self, num: u64) {
        let Some(e) = self.ids.get_mut(&num) else {
            return;
        };
        if std::mem::replace(&mut e.claimed, true) {
            return;
        }
        if let Some(l) = e.listener.and_then(|l| self.ids.get_mut(&l)) {
            if let Some(l) = l.listen.as_mut() {
                l.taken();
            }
        }
    }

    /// The program acknowledged one event of the id.
    pub fn ack(&mut self, num: u64) {
        if let Some(e) = self.ids.get_mut(&num) {
            e.acked += 1;
        }
    }

    /// Events of the id reported and not acknowledged yet.
    pub fn unacked(&self, num: u64) -> u64 {
        self.ids
            .get(&num)
            .map_or(0, |e| e.reported.saturating_sub(e.acked))
    }

    /// `rdma_destroy_id`: the port goes, the peer is told what Linux tells
    /// it in the id's state (REJ, DREQ, DREP), its queued events go, and
    /// the ids of requests the program never took go too. The driver
    /// waits for the acknowledgements itself ([`Endpoint::unacked`]).
    pub fn destroy(&mut self, num: u64, now: Instant) -> Result<Id, EndpointError> {
        self.tick(now);
        let e = self.ids.remove(&num).ok_or(EndpointError::NoSuchId)?;
        if let (true, Some(src)) = (e.port_held, e.src) {
            self.ports.release(e.ps, src.port(), num);
        }
        self.events.retain(|q| q.id != num);
        self.changes.retain(|c| c.0 != num);
        if let (Some(c), Some(dev)) = (e.cm, e.dev) {
            if let Some(ds) = self.devs.get_mut(&dev) {
                // A forked child forgets its parent's connection: no
                // REJ, DREQ or DREP from it.
                if !ds.forked_away {
                    let _ = ds.cm.destroy(now, c);
                }
                ds.unbind(c);
            }
            self.pump(dev);
        }
        if let Some(l) = &e.listen {
            self.unlisten_uncovered(l.service_id(), now);
            let orphans: Vec<u64> = self
                .ids
                .iter()
                .filter(|(_, c)| c.listener == Some(num) && !c.claimed)
                .map(|(&n, _)| n)
                .collect();
            for o in orphans {
                let _ = self.destroy(o, now);
            }
        }
        Ok(e)
    }

    /// MADs device `dev` received on QP 1.
    pub fn receive(&mut self, dev: u64, now: Instant, src: IpAddr, src_qpn: Qpn, mad: &[u8]) {
        self.tick(now);
        // A request for a port a wildcard listener took before this
        // device came: the device listens on it now.
        if let Some(sid) = request_sid(mad) {
            let covered = self
                .ids
                .values()
                .any(|e| e.listen.as_ref().is_some_and(|l| l.covers(dev, sid)));
            if covered && self.devs.get(&dev).is_some_and(|d| !d.listens(sid)) {
                let _ = self.cm_listen(dev, sid, now);
            }
        }
        let Some(ds) = self.devs.get_mut(&dev) else {
            return;
        };
        if let Some(r) = ds.receive(now, src, src_qpn, mad) {
            self.refused.push_back((dev, r));
        }
        self.pump(dev);
    }

    /// Requests a device refused for their source's half-open limit (to
    /// log).
    pub fn poll_refused(&mut self) -> Option<(u64, Refused)> {
        self.refused.pop_front()
    }

    /// Runs the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.tick(now);
        let due: Vec<u64> = self
            .devs
            .iter()
            .filter(|(_, d)| d.deadline().is_some_and(|t| t <= now))
            .map(|(&n, _)| n)
            .collect();
        for d in due {
            if let Some(ds) = self.devs.get_mut(&d) {
                ds.handle_timeout(now);
            }
            self.pump(d);
        }
    }

    /// The next time [`Endpoint::handle_timeout`] has work.
    pub fn deadline(&self) -> Option<Instant> {
        self.devs.values().filter_map(DeviceCm::deadline).min()
    }

    /// The deadline of one device.
    pub fn device_deadline(&self, dev: u64) -> Option<Instant> {
        self.devs.get(&dev)?.deadline()
    }

    /// The next event for a program's channel.
    pub fn poll_event(&mut self) -> Option<IdEvent> {
        self.events.pop_front()
    }

    /// The next MAD to send, with its device (none from a device forked
    /// away: what its CM would send is dropped).
    pub fn poll_transmit(&mut self) -> Option<(u64, Transmit)> {
        self.devs
            .iter_mut()
            .find_map(|(&n, d)| Some((n, d.poll_transmit()?)))
    }

    /// The next MAD device `dev` sends.
    pub fn poll_device_transmit(&mut self, dev: u64) -> Option<Transmit> {
        self.devs.get_mut(&dev)?.poll_transmit()
    }

    /// The next change to make to an id's QP: (id, QP, change).
    pub fn poll_qp_change(&mut self) -> Option<(u64, Qpn, QpChange)> {
        self.changes.pop_front()
    }

    pub(super) fn push(&mut self, q: IdEvent) {
        if let Some(e) = self.ids.get_mut(&q.id) {
            e.reported += 1;
            self.events.push_back(q);
        }
    }

    /// Turns the device's CM events into rdma_cm events (Linux's
    /// `cma_ib_handler` / `cma_ib_req_handler`).
    pub(super) fn pump(&mut self, dev: u64) {
        while let Some(ev) = self.devs.get_mut(&dev).and_then(|d| d.cm.poll_event()) {
            let id = match &ev {
                Event::ConnectRequest(_) | Event::SidrRequest(_) => None,
                e => self.devs.get(&dev).and_then(|d| d.id_of(e.id())),
            };
            let obs = self.observed.is_some().then(|| ev.clone());
            let (id, reported) = match ev {
                Event::ConnectRequest(cr) => {
                    let id = self.connect_request(dev, *cr);
                    (id, id.map(|_| (EventType::ConnectRequest, 0)))
                }
                Event::SidrRequest(sr) => {
                    let id = self.sidr_request(dev, *sr);
                    (id, id.map(|_| (EventType::ConnectRequest, 0)))
                }
                ev => (id, id.and_then(|num| self.report(num, &ev))),
            };
            if let (Some(o), Some(event)) = (self.observed.as_mut(), obs) {
                o.push_back(Observed {
                    dev,
                    id,
                    event,
                    reported,
                });
            }
        }
    }

    fn report(&mut self, num: u64, ev: &Event) -> Option<(EventType, i32)> {
        let e = self.ids.get_mut(&num)?;
        let r = report(&mut e.st, e.path.as_ref(), ev)?;
        let got = (r.event, r.status);
        if r.remote_ud.is_some() {
            e.remote_ud = r.remote_ud;
        }
        self.push(IdEvent {
            id: num,
            event: r.event,
            status: r.status,
            listen_id: None,
            conn: r.conn,
            ud: r.ud,
            mc: None,
        });
        Some(got)
    }

    /// The checks of a REQ or SIDR_REQ: its rdma_cm header, the listener
    /// of its destination, its transport and that listener's backlog. A
    /// full backlog drops the request (the requester retries); any other
    /// failure rejects it (REJ 28 or SIDR_REP "reject").
    fn admit(
        &mut self,
        dev: u64,
        id: CmId,
        sid: ServiceId,
        cma: Option<softrdma_wire::cm::CmaHdrRepr>,
        transport: Option<Transport>,
    ) -> Option<(u64, softrdma_wire::cm::CmaHdrRepr)> {
        let found = (|| {
            let cma = cma?;
            let ls = self
                .ids
                .iter()
                .filter_map(|(&n, e)| Some((n, e.listen.as_ref()?)));
            let lnum = find(ls, dev, sid, cma.dst)?;
            let l = self.ids.get_mut(&lnum)?.listen.as_mut()?;
            Some((l.admit(transport?), lnum, cma))
        })();
        let ds = self.devs.get_mut(&dev)?;
        match found {
            Some((Admission::Take, lnum, cma)) => return Some((lnum, cma)),
            Some((Admission::Drop, ..)) => {
                let _ = ds.cm.drop_request(id);
            }
            Some((Admission::Reject, ..)) | None => {
                let _ = ds.cm.destroy(self.now, id);
            }
        }
        None
    }

    /// A new id for a request its listener took, and the listener's
    /// CONNECT_REQUEST.
    fn request_id(&mut self, dev: u64, lnum: u64, cm: CmId, cma: &CmaHdr) -> Option<(u16, Id)> {
        let l = self.ids.get(&lnum)?;
        let lport = l.src.map_or(0, |s| s.port());
        let (ps, transport, tos) = (l.ps, l.transport, l.opts.tos);
        let ds = self.devs.get_mut(&dev)?;
        let mut e = Id::new(ps, transport, ds.cm.random_psn());
        e.st = IdState::Connect;
        e.dev = Some(dev);
        e.src = Some(SocketAddr::new(cma.dst, lport));
        e.dst = Some(SocketAddr::new(cma.src, cma.src_port));
        e.cm = Some(cm);
        e.listener = Some(lnum);
        e.opts.tos = tos;
        Some((lport, e))
    }

    fn connect_request(&mut self, dev: u64, cr: crate::ConnectRequest) -> Option<u64> {
        let req = cr.req();
        let t = Transport::of_req(req.transport_service_type);
        let (lnum, cma) = self.admit(dev, cr.id, req.service_id, cr.cma, t)?;
        let (_, mut e) = self.request_id(dev, lnum, cr.id, &cma)?;
        let ds = self.devs.get(&dev)?;
        e.path = ds.cm.info(cr.id).map(|i| i.path);
        let conn = conn_param_from_req(&req);
        e.resp_res = conn.responder_resources;
        e.init_depth = conn.initiator_depth;
        let num = self.insert(e);
        self.devs.get_mut(&dev)?.bind(cr.id, num);
        let mut q = IdEvent::new(num, EventType::ConnectRequest, 0);
        q.listen_id = Some(lnum);
        q.conn = conn.into();
        self.push(q);
        Some(num)
    }

    fn sidr_request(&mut self, dev: u64, sr: crate::SidrRequest) -> Option<u64> {
        let ud = Some(Transport::Ud);
        let (lnum, cma) = self.admit(dev, sr.id, sr.service_id, sr.cma, ud)?;
        let (lport, mut e) = self.request_id(dev, lnum, sr.id, &cma)?;
        let local = self.devs.get(&dev)?.ip;
        e.transport = Transport::Ud;
        e.path = Some(rdma_cm_path(local, cma.src, lport, cma.src_port, 5, 0, 64));
        let num = self.insert(e);
        self.devs.get_mut(&dev)?.bind(sr.id, num);
        let mut q = IdEvent::new(num, EventType::ConnectRequest, 0);
        q.listen_id = Some(lnum);
        q.ud = Some(UdParam {
            private_data: sr.private_data.get(CMA_HDR_LEN..).unwrap_or(&[]).to_vec(),
            ..Default::default()
        });
        self.push(q);
        Some(num)
    }

    /// The port tables.
    pub fn ports(&self) -> &Ports {
        &self.ports
    }

    /// Whether every id is gone and every device's CM is quiescent.
    pub fn is_quiescent(&self) -> bool {
        self.ids.is_empty() && self.devs.values().all(|d| d.cm.is_quiescent())
    }

    /// The service ID an id's connect goes to.
    pub(super) fn sid_of(e: &Id, dst: SocketAddr) -> ServiceId {
        service_id(e.ps, dst.port())
    }
}

type CmaHdr = softrdma_wire::cm::CmaHdrRepr;

#[cfg(test)]
#[path = "endpoint_tests.rs"]
mod tests;
