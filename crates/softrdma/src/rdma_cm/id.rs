//! rdma_cm ids: the calls (bind, resolve, listen, connect, accept, reject,
//! establish, disconnect, QP attributes, options, migrate, destroy) and
//! the delivery of queued events.
//!
//! Each call follows Linux's rdma_cm (core/cma.c) for the state it needs
//! and what it sends, and librdmacm (librdmacm/cma.c) for what it does to
//! the id's QP; the function names in the comments are theirs.

use super::channel::{ChanInner, Queued};
use super::driver::{dev_state, now, pump, service_id};
use super::resolve::{self, provider};
use super::state::{lock, Guard, IdEntry, Listen, St, State};
use super::{Acks, CmEvent, ConnParam, EventChannel, EventType};
use crate::error::{Error, Result};
use crate::{Device, QueuePair};
use softrdma_cm::negotiate::{self, QpAttrs, QpState, RdmaCmOverrides};
use softrdma_cm::{Path, PortSpace, RejReason, SidrRepParams, SidrStatus};
use softrdma_proto::{AddressVector, Mtu, QpType};
use softrdma_wire::cm::CmaHdrRepr;
use softrdma_wire::{Psn, QKey, Qpn};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The program's handle of an id: the last one to go destroys the id
/// (without waiting for acknowledgements), unless `destroy` did.
pub(crate) struct IdUser {
    pub num: u64,
    acks: Arc<Acks>,
    destroyed: AtomicBool,
}

impl Drop for IdUser {
    fn drop(&mut self) {
        if !self.destroyed.swap(true, Ordering::SeqCst) {
            let _ = destroy_num(self.num);
        }
    }
}

impl std::fmt::Debug for IdUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CmId({})", self.num)
    }
}

/// An rdma_cm id (`struct rdma_cm_id`). Clones are handles of one id; the
/// id is destroyed by [`CmId::destroy`] or when its last handle goes (a
/// [`CmEvent`] holds handles of its ids).
#[derive(Clone, Debug)]
pub struct CmId(pub(crate) Arc<IdUser>);

impl PartialEq for CmId {
    fn eq(&self, o: &CmId) -> bool {
        self.0.num == o.0.num
    }
}
impl Eq for CmId {}

/// What an id knows about its addresses (what librdmacm copies into
/// `id->verbs`, `id->route`, `id->port_num`).
#[derive(Clone, Debug)]
pub struct AddrInfo {
    /// The device (once bound to an address or resolved).
    pub device: Option<Device>,
    /// Local address and port (the IP unspecified for a wildcard).
    pub src: Option<SocketAddr>,
    /// The peer's address and port.
    pub dst: Option<SocketAddr>,
    /// The route (after `resolve_route`, or a request's path back).
    pub path: Option<Path>,
}

pub(super) fn einval(what: &str) -> Error {
    Error::cm(libc::EINVAL, what.to_string())
}

fn random_psn() -> Psn {
    let mut b = [0u8; 4];
    let _ = getrandom::fill(&mut b);
    Psn::new(u32::from_le_bytes(b))
}

pub(super) fn entry(g: &mut Guard, num: u64) -> Result<&mut IdEntry> {
    g.st()
        .ids
        .get_mut(&num)
        .ok_or_else(|| einval("no such rdma_cm id"))
}

fn any_of(v4: bool) -> IpAddr {
    if v4 {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    }
}

/// Lowest and highest ephemeral port (Linux's default
/// `ip_local_port_range`).
const EPHEMERAL: (u16, u16) = (32768, 60999);

/// `cma_check_port`: may `num` hold `ip:port`?
fn check_port(
    st: &State,
    ps: PortSpace,
    port: u16,
    num: u64,
    ip: IpAddr,
    reuse: bool,
) -> Result<()> {
    let Some(holders) = st.ports.get(&(ps, port)) else {
        return Ok(());
    };
    let me = st.ids.get(&num);
    let my_afonly = me.is_some_and(|e| e.opts.afonly(ip.is_ipv4()));
    for &o in holders {
        if o == num {
            continue;
        }
        let Some(oe) = st.ids.get(&o) else {
            continue;
        };
        if reuse && oe.opts.reuseaddr {
            continue;
        }
        let oip = oe.src.map_or(any_of(true), |s| s.ip());
        if my_afonly && oe.opts.afonly(oip.is_ipv4()) && oip.is_ipv4() != ip.is_ipv4() {
            continue;
        }
        if ip.is_unspecified() || oip.is_unspecified() {
            return Err(Error::cm(
                libc::EADDRNOTAVAIL,
                format!("port {port} in use"),
            ));
        }
        if ip == oip {
            return Err(Error::cm(libc::EADDRINUSE, format!("{ip}:{port} in use")));
        }
    }
    Ok(())
}

/// Binds `num` to `ip:port` in its port space (port 0: an ephemeral one).
fn take_port(st: &mut State, num: u64, ip: IpAddr, port: u16) -> Result<u16> {
    let e = st.ids.get(&num).ok_or_else(|| einval("no such id"))?;
    let (ps, reuse) = (e.ps, e.opts.reuseaddr);
    let port = if port != 0 {
        check_port(st, ps, port, num, ip, reuse)?;
        port
    } else {
        let span = u32::from(EPHEMERAL.1 - EPHEMERAL.0) + 1;
        let mut b = [0u8; 4];
        let _ = getrandom::fill(&mut b);
        let start = u32::from_le_bytes(b) % span;
        (0..span)
            .map(|i| EPHEMERAL.0 + ((start + i) % span) as u16)
            .find(|&p| !st.ports.contains_key(&(ps, p)))
            .ok_or_else(|| Error::cm(libc::EADDRNOTAVAIL, "no free ephemeral port"))?
    };
    st.ports.entry((ps, port)).or_default().push(num);
    let e = st.ids.get_mut(&num).expect("checked");
    e.src = Some(SocketAddr::new(ip, port));
    e.port_held = true;
    Ok(port)
}

fn release_port(st: &mut State, num: u64, e: &IdEntry) {
    if !e.port_held {
        return;
    }
    if let Some(src) = e.src {
        let key = (e.ps, src.port());
        if let Some(v) = st.ports.get_mut(&key) {
            v.retain(|&n| n != num);
            if v.is_empty() {
                st.ports.remove(&key);
            }
        }
    }
}

/// A CM attribute set as softrdma verbs attributes.
pub(crate) fn to_verbs(a: &QpAttrs, dest_port: u16) -> (crate::QpAttr, crate::AttrMask) {
    let s = &a.attr;
    let state = match s.qp_state {
        QpState::Init => crate::QpState::Init,
        QpState::Rtr => crate::QpState::Rtr,
        QpState::Rts => crate::QpState::Rts,
        QpState::Err => crate::QpState::Err,
    };
    let mut av = AddressVector::to(s.ah_attr.dgid.to_ip());
    av.dest_port = dest_port;
    av.traffic_class = s.ah_attr.traffic_class;
    av.hop_limit = s.ah_attr.hop_limit;
    av.flow_label = s.ah_attr.flow_label;
    let attr = crate::QpAttr {
        qp_state: state,
        path_mtu: Mtu::from_ibv(u32::from(s.path_mtu)).unwrap_or(Mtu::M1024),
        qkey: QKey(s.qkey),
        rq_psn: s.rq_psn,
        sq_psn: s.sq_psn,
        dest_qp_num: s.dest_qp_num,
        qp_access_flags: crate::Access(s.qp_access_flags),
        ah_attr: av,
        pkey_index: s.pkey_index,
        max_rd_atomic: s.max_rd_atomic,
        max_dest_rd_atomic: s.max_dest_rd_atomic,
        min_rnr_timer: s.min_rnr_timer,
        port_num: s.port_num.max(1),
        timeout: s.timeout,
        retry_cnt: s.retry_cnt,
        rnr_retry: s.rnr_retry,
        ..Default::default()
    };
    (attr, crate::AttrMask(a.mask.0))
}

fn modify(dev: &Device, qpn: Qpn, a: &QpAttrs) -> Result<()> {
    let (attr, mask) = to_verbs(a, dev.local_addr().port());
    dev.shared()
        .modify_qp(qpn, &attr, mask)
        .map_err(Error::from)
}

fn modify_err(dev: &Device, qpn: Qpn) {
    let a = crate::QpAttr {
        qp_state: crate::QpState::Err,
        ..Default::default()
    };
    // What the QP can send now leaves first (`Shared::modify_qp`): the
    // peer gets a SEND posted right before `rdma_disconnect`.
    let _ = dev.shared().modify_qp(qpn, &a, crate::AttrMask::STATE);
}

/// The device's limit of RDMA READ/atomics in flight (librdmacm's
/// `max_responder_resources` / `max_initiator_depth`).
fn max_rd_atom(dev: &Device) -> u8 {
    dev.query_device().max_qp_rd_atom.min(255) as u8
}

/// `rdma_init_qp_attr` for an id (under the lock).
fn init_attrs(g: &mut Guard, num: u64, state: QpState) -> Result<QpAttrs> {
    let e = entry(g, num)?;
    let (qp_type, cm, seq, opts) = (e.qp_type, e.cm, e.seq, e.opts);
    let serial = e
        .serial()
        .ok_or_else(|| einval("the id has no device yet"))?;
    let mut a = match (cm, qp_type) {
        // cma_ib_init_qp_attr: no connection yet, or UD.
        (None, _) | (_, QpType::Ud) => {
            let mut attr = negotiate::create_qp_attrs(match qp_type {
                QpType::Ud => negotiate::RdmaQpType::Ud {
                    qkey: softrdma_cm::limits::RDMA_UDP_QKEY,
                },
                _ => negotiate::RdmaQpType::Connected,
            })[0];
            attr.attr.qp_state = state;
            attr
        }
        (Some(c), _) => {
            let ds = g
                .st()
                .devs
                .get(&serial)
                .ok_or_else(|| einval("no CM on the device"))?;
            ds.cm
                .init_qp_attr(c, state)
                .map_err(|e| einval(&e.to_string()))?
        }
    };
    RdmaCmOverrides {
        rq_psn: Some(seq),
        timeout: opts.ack_timeout,
        min_rnr_timer: opts.min_rnr_timer,
        ..Default::default()
    }
    .apply(&mut a);
    Ok(a)
}

/// Pumps the CM of the id's device.
fn pump_dev(g: &mut Guard, dev: &Device) {
    pump(g, dev.shared());
}

impl CmId {
    /// `rdma_create_id`: a new id reporting to `channel`. The port space
    /// gives the QP type librdmacm gives it (UDP and IPoIB: UD; TCP and
    /// IB: RC) unless `qp_type` says otherwise.
    pub fn new(channel: &EventChannel, ps: PortSpace, qp_type: Option<QpType>) -> Result<CmId> {
        let qp_type = qp_type.unwrap_or(match ps {
            PortSpace::Udp | PortSpace::Ipoib => QpType::Ud,
            PortSpace::Tcp | PortSpace::Ib => QpType::Rc,
        });
        super::state::cleanup_at_exit();
        crate::fork::watch();
        let mut g = lock();
        let e = IdEntry::new(channel.0.clone(), ps, qp_type, random_psn());
        let acks = e.acks.clone();
        let num = g.st().insert(e);
        let user = Arc::new(IdUser {
            num,
            acks,
            destroyed: AtomicBool::new(false),
        });
        entry(&mut g, num)?.user = Arc::downgrade(&user);
        Ok(CmId(user))
    }

    /// A number naming the id in this process.
    pub fn num(&self) -> u64 {
        self.0.num
    }

    /// Port space and QP type.
    pub fn kind(&self) -> Result<(PortSpace, QpType)> {
        let mut g = lock();
        let e = entry(&mut g, self.0.num)?;
        Ok((e.ps, e.qp_type))
    }

    /// The id's addresses, device and route.
    pub fn addr_info(&self) -> Result<AddrInfo> {
        let mut g = lock();
        let e = entry(&mut g, self.0.num)?;
        let info = AddrInfo {
            device: e.dev.clone(),
            src: e.src,
            dst: e.dst,
            path: e.path,
        };
        g.defer_drop(info.clone());
        Ok(info)
    }

    /// The device (after bind or resolve).
    pub fn device(&self) -> Option<Device> {
        self.addr_info().ok().and_then(|i| i.device)
    }

    /// `rdma_bind_addr`: the address and port (0: an ephemeral one) the id
    /// uses. A wildcard IP binds no device yet (a listener then listens
    /// on all of them). EADDRNOTAVAIL when no local interface has the
    /// address, ENODEV when no device may use it, EADDRINUSE when the
    /// port is taken.
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<()> {
        let ip = addr.ip();
        let dev = if ip.is_unspecified() {
            None
        } else {
            Some(
                provider()
                    .device_at(ip)?
                    .ok_or_else(|| resolve::no_device(ip))?,
            )
        };
        let mut g = lock();
        if let Some(d) = &dev {
            g.defer_drop(d.clone());
        }
        let e = entry(&mut g, self.0.num)?;
        if e.st != St::Idle {
            return Err(einval("rdma_bind_addr: the id is bound already"));
        }
        take_port(g.st(), self.0.num, ip, addr.port())?;
        let e = entry(&mut g, self.0.num)?;
        e.dev = dev;
        e.st = St::AddrBound;
        Ok(())
    }

    /// `rdma_resolve_addr`: binds `src` (if given and unbound), picks the
    /// device that reaches `dst` and queues ADDR_RESOLVED, or ADDR_ERROR
    /// when none does.
    pub fn resolve_addr(&self, src: Option<SocketAddr>, dst: SocketAddr) -> Result<()> {
        if dst.ip().is_unspecified() {
            return Err(einval("rdma_resolve_addr: no destination"));
        }
        let (state, bound) = {
            let mut g = lock();
            let e = entry(&mut g, self.0.num)?;
            (e.st, e.src)
        };
        if state == St::Idle {
            if let Some(s) = src.filter(|s| !s.ip().is_unspecified() || s.port() != 0) {
                self.bind_addr(s)?;
                return self.resolve_addr(None, dst);
            }
        }
        match state {
            St::Idle | St::AddrBound => {}
            _ => {
                return Err(einval(
                    "rdma_resolve_addr: the id is past address resolution",
                ))
            }
        }
        let need_dev = bound.is_none_or(|b| b.ip().is_unspecified());
        let dev = if need_dev {
            provider().source_for(dst.ip())?
        } else {
            None
        };
        let mut g = lock();
        if let Some(d) = &dev {
            g.defer_drop(d.clone());
        }
        let num = self.0.num;
        let e = entry(&mut g, num)?;
        if e.st != state {
            return Err(einval("rdma_resolve_addr: the id changed meanwhile"));
        }
        if need_dev {
            let Some(d) = dev else {
                let mut q = Queued::new(num, EventType::AddrError, -libc::EHOSTUNREACH);
                q.conn = ConnParam::zero();
                e.chan.push(q);
                return Ok(());
            };
            let ip = d.local_addr().ip();
            if ip.is_ipv4() != dst.is_ipv4() {
                return Err(einval("rdma_resolve_addr: addresses of two families"));
            }
            match e.src {
                None => {
                    take_port(g.st(), num, ip, 0)?;
                }
                Some(s) => {
                    // Bound to a wildcard: the port stays, the IP is the
                    // device's now.
                    let port = s.port();
                    let (ps, reuse) = (e.ps, e.opts.reuseaddr);
                    check_port(g.st(), ps, port, num, ip, reuse)?;
                    entry(&mut g, num)?.src = Some(SocketAddr::new(ip, port));
                }
            }
            entry(&mut g, num)?.dev = Some(d);
        }
        let e = entry(&mut g, num)?;
        let local = e.src.map(|s| s.ip());
        if local.is_some_and(|l| l.is_ipv4() != dst.is_ipv4()) {
            return Err(einval("rdma_resolve_addr: addresses of two families"));
        }
        e.dst = Some(dst);
        e.st = St::AddrResolved;
        e.chan.push(Queued::new(num, EventType::AddrResolved, 0));
        Ok(())
    }

    /// `rdma_resolve_route`: the RoCE path (`cma_resolve_iboe_route`):
    /// GIDs from the two addresses, the path MTU the egress interface
    /// carries (never above the device's active MTU), hop limit 64, the
    /// TOS option as traffic class, the flow label from the two ports;
    /// queues ROUTE_RESOLVED.
    pub fn resolve_route(&self) -> Result<()> {
        let mut g = lock();
        let num = self.0.num;
        let e = entry(&mut g, num)?;
        if e.st != St::AddrResolved {
            return Err(einval("rdma_resolve_route: address not resolved"));
        }
        let (Some(src), Some(dst), Some(dev)) = (e.src, e.dst, e.dev.clone()) else {
            return Err(einval("rdma_resolve_route: address not resolved"));
        };
        g.defer_drop(dev.clone());
        let e = entry(&mut g, num)?;
        let dev_mtu = resolve::mtu_code(dev.query_port().active_mtu);
        let link = resolve::route_mtu(src.ip(), dst.ip()).map_or(dev_mtu, resolve::iboe_mtu);
        let mut path = negotiate::rdma_cm_path(
            src.ip(),
            dst.ip(),
            src.port(),
            dst.port(),
            dev_mtu.min(link),
            e.opts.tos.unwrap_or(0),
            64,
        );
        if let Some(t) = e.opts.ack_timeout {
            path.packet_life_time = t.saturating_sub(1);
        }
        e.path = Some(path);
        e.st = St::RouteResolved;
        e.chan.push(Queued::new(num, EventType::RouteResolved, 0));
        Ok(())
    }

    /// `rdma_listen`: requests to the bound port come as CONNECT_REQUEST
    /// events. Bound to an address, on its device; bound to a wildcard,
    /// on every device, as the kernel's rdma_cm does (`cma_listen_on_all`):
    /// those configured (opened now), those that open later, and none at
    /// all yet (it still succeeds); requests are then sorted by their
    /// destination address (an AFONLY `[::]` takes only IPv6 ones).
    /// `backlog` ≤ 0 means 1024: requests beyond that many untaken ones
    /// get no answer (the requester retries). An unbound id is bound to
    /// 0.0.0.0 first.
    pub fn listen(&self, backlog: i32) -> Result<()> {
        let num = self.0.num;
        let (state, src) = {
            let mut g = lock();
            let e = entry(&mut g, num)?;
            (e.st, e.src)
        };
        if state == St::Idle {
            self.bind_addr(SocketAddr::new(any_of(true), 0))?;
            return self.listen(backlog);
        }
        if state != St::AddrBound {
            return Err(einval("rdma_listen: the id is not bound"));
        }
        let src = src.ok_or_else(|| einval("rdma_listen: not bound"))?;
        let devs: Vec<Device> = if src.ip().is_unspecified() {
            provider().all_devices()?
        } else {
            Vec::new()
        };
        let mut g = lock();
        g.defer_drop(devs.clone());
        let e = entry(&mut g, num)?;
        if e.st != St::AddrBound {
            return Err(einval("rdma_listen: the id changed meanwhile"));
        }
        let (ps, port) = (e.ps, src.port());
        let devs = match &e.dev {
            Some(d) => vec![d.clone()],
            None => devs,
        };
        g.defer_drop(devs.clone());
        // cma_bind_listen: a REUSEADDR binding must be exclusive to listen.
        check_port(g.st(), ps, port, num, src.ip(), false)?;
        let sid = service_id(ps, port);
        let e = entry(&mut g, num)?;
        e.listen = Some(Listen {
            backlog: if backlog <= 0 || backlog > 1024 {
                1024
            } else {
                backlog as u32
            },
            pending: 0,
        });
        e.st = St::Listen;
        for d in &devs {
            dev_state(&mut g, d.shared());
            if !super::driver::cm_listen(&mut g, d.serial(), sid) {
                let e = entry(&mut g, num)?;
                e.listen = None;
                e.st = St::AddrBound;
                for d in &devs {
                    super::driver::cm_unlisten(&mut g, d.serial(), sid, now(d.shared()));
                }
                return Err(Error::cm(libc::ENOMEM, "rdma_listen: too many CM ids"));
            }
        }
        // Requests that came before the listener: now.
        for d in &devs {
            let t = now(d.shared());
            dev_state(&mut g, d.shared()).release_parked(t, Some(sid));
            pump_dev(&mut g, d);
        }
        Ok(())
    }

    /// `rdma_connect`: a REQ (UD ids: a SIDR_REQ) to the resolved peer.
    /// `param` `None` is librdmacm's NULL: device maxima, retry counts 7
    /// (refused for TCP ids without a QP, which must name their QP).
    pub fn connect(&self, param: Option<&ConnParam>) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        let e = entry(&mut g, num)?;
        if e.st != St::RouteResolved {
            return Err(einval("rdma_connect: route not resolved"));
        }
        let dev = e
            .dev
            .clone()
            .ok_or_else(|| einval("rdma_connect: no device"))?;
        g.defer_drop(dev.clone());
        let e = entry(&mut g, num)?;
        let max = max_rd_atom(&dev);
        if e.ps == PortSpace::Tcp {
            if e.qp.is_none() && param.is_none() {
                return Err(einval("rdma_connect: no QP and no conn_param"));
            }
            if let Some(p) = param {
                if (p.responder_resources != 0xff && p.responder_resources > max)
                    || (p.initiator_depth != 0xff && p.initiator_depth > max)
                {
                    return Err(einval("rdma_connect: more READs than the device allows"));
                }
            }
        }
        let dflt = ConnParam::default();
        let p = param.unwrap_or(&dflt);
        e.init_depth = if p.initiator_depth == 0xff {
            max
        } else {
            p.initiator_depth
        };
        e.resp_res = if p.responder_resources == 0xff {
            max
        } else {
            p.responder_resources
        };
        let (src, dst, path) = match (e.src, e.dst, e.path) {
            (Some(s), Some(d), Some(p)) => (s, d, p),
            _ => return Err(einval("rdma_connect: route not resolved")),
        };
        let cma = CmaHdrRepr {
            src_port: src.port(),
            src: src.ip(),
            dst: dst.ip(),
        };
        let sid = service_id(e.ps, dst.port());
        let qp_num = e.qp.unwrap_or(Qpn::new(p.qp_num));
        let srq = if e.qp.is_some() { e.qp_srq } else { p.srq };
        let (qp_type, seq, resp_res, init_depth) = (e.qp_type, e.seq, e.resp_res, e.init_depth);
        let t = now(dev.shared());
        let ds = dev_state(&mut g, dev.shared());
        let cm_id = if qp_type == QpType::Ud {
            let rp = negotiate::sidr_req_params(dst.ip(), sid, &cma, &p.private_data)
                .map_err(|e| einval(&e.to_string()))?;
            ds.cm.sidr_request(t, &rp)
        } else {
            let conn = negotiate::ConnParam {
                private_data: p.private_data.clone(),
                responder_resources: resp_res,
                initiator_depth: init_depth,
                flow_control: p.flow_control,
                retry_count: p.retry_count,
                rnr_retry_count: p.rnr_retry_count,
                srq,
                qp_num,
            };
            let t_qp = if qp_type == QpType::Uc {
                softrdma_cm::QpType::Uc
            } else {
                softrdma_cm::QpType::Rc
            };
            let rp = negotiate::req_params(&path, sid, &cma, t_qp, seq, &conn)
                .map_err(|e| einval(&e.to_string()))?;
            ds.cm.connect(t, &rp)
        }
        .map_err(|e| einval(&e.to_string()))?;
        ds.by_cm.insert(cm_id.comm_id(), num);
        let e = entry(&mut g, num)?;
        e.cm = Some(cm_id);
        e.st = St::Connect;
        pump_dev(&mut g, &dev);
        Ok(())
    }

    /// `rdma_accept` of a request's id. RC: with a QP, librdmacm's INIT,
    /// RTR and RTS first (so the QP is ready when the RTU comes), then the
    /// REP; ESTABLISHED follows on the RTU. UD: the SIDR_REP (QPN, Q_Key
    /// 0x01234567), no event. `param` `None`: what the requester asked for,
    /// capped by the device.
    pub fn accept(&self, param: Option<&ConnParam>) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        let e = entry(&mut g, num)?;
        let (Some(cm_id), Some(dev), true) = (e.cm, e.dev.clone(), e.listener.is_some()) else {
            return Err(einval("rdma_accept: not a connection request"));
        };
        g.defer_drop(dev.clone());
        let e = entry(&mut g, num)?;
        if e.st != St::Connect {
            return Err(einval("rdma_accept: not a connection request"));
        }
        let max = max_rd_atom(&dev);
        let dflt = ConnParam::default();
        if e.ps == PortSpace::Tcp && e.qp.is_none() && param.is_none() {
            return Err(einval("rdma_accept: no QP and no conn_param"));
        }
        if let (PortSpace::Tcp, Some(p)) = (e.ps, param) {
            if (p.responder_resources != 0xff && p.responder_resources > max)
                || (p.initiator_depth != 0xff && p.initiator_depth > max)
            {
                return Err(einval("rdma_accept: more READs than the device allows"));
            }
        }
        let p = param.unwrap_or(&dflt);
        e.init_depth = if p.initiator_depth == 0xff {
            e.init_depth.min(max)
        } else {
            p.initiator_depth
        };
        e.resp_res = if p.responder_resources == 0xff {
            e.resp_res.min(max)
        } else {
            p.responder_resources
        };
        let (qp, srq, seq, qp_type, resp_res, init_depth) =
            (e.qp, e.qp_srq, e.seq, e.qp_type, e.resp_res, e.init_depth);
        let qp_num = qp.unwrap_or(Qpn::new(p.qp_num));
        let t = now(dev.shared());
        if qp_type == QpType::Ud {
            let rp = SidrRepParams {
                status: SidrStatus::SUCCESS,
                qpn: qp_num,
                qkey: QKey(softrdma_cm::limits::RDMA_UDP_QKEY),
                info: Vec::new(),
                private_data: p.private_data.clone(),
                ece: Default::default(),
            };
            let ds = dev_state(&mut g, dev.shared());
            ds.cm
                .sidr_reply(t, cm_id, &rp)
                .map_err(|e| einval(&e.to_string()))?;
            pump_dev(&mut g, &dev);
            return Ok(());
        }
        if let Some(q) = qp {
            // ucma_modify_qp_rtr / ucma_modify_qp_rts.
            let r = (|| -> Result<()> {
                let a = init_attrs(&mut g, num, QpState::Init)?;
                modify(&dev, q, &a)?;
                let mut a = init_attrs(&mut g, num, QpState::Rtr)?;
                a.attr.max_dest_rd_atomic = resp_res;
                modify(&dev, q, &a)?;
                let mut a = init_attrs(&mut g, num, QpState::Rts)?;
                a.attr.max_rd_atomic = init_depth;
                modify(&dev, q, &a)
            })();
            r?;
        }
        let conn = negotiate::ConnParam {
            private_data: p.private_data.clone(),
            responder_resources: resp_res,
            initiator_depth: init_depth,
            flow_control: p.flow_control,
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            srq: if qp.is_some() { srq } else { p.srq },
            qp_num,
        };
        let rp = negotiate::rep_params(seq, &conn).map_err(|e| einval(&e.to_string()))?;
        let ds = dev_state(&mut g, dev.shared());
        if let Err(e) = ds.cm.accept(t, cm_id, &rp) {
            if let Some(q) = qp {
                modify_err(&dev, q);
            }
            return Err(einval(&e.to_string()));
        }
        pump_dev(&mut g, &dev);
        Ok(())
    }

    /// `rdma_reject`: REJ reason 28 with the private data (≤ 148 bytes) for
    /// a request or a REP taken as CONNECT_RESPONSE; UD: SIDR_REP "reject".
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        self.reject_with(private_data, RejReason::CONSUMER_DEFINED)
    }

    /// `rdma_reject_ece`: REJ reason 35 (vendor option not supported).
    pub fn reject_ece(&self, private_data: &[u8]) -> Result<()> {
        self.reject_with(private_data, RejReason(35))
    }

    fn reject_with(&self, private_data: &[u8], reason: RejReason) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        let e = entry(&mut g, num)?;
        let (Some(cm_id), Some(dev)) = (e.cm, e.dev.clone()) else {
            return Err(einval("rdma_reject: nothing to reject"));
        };
        g.defer_drop(dev.clone());
        let e = entry(&mut g, num)?;
        let ud = e.qp_type == QpType::Ud;
        let t = now(dev.shared());
        let ds = dev_state(&mut g, dev.shared());
        let r = if ud {
            let rp = SidrRepParams {
                status: SidrStatus::REJECT,
                qpn: Qpn::new(0),
                qkey: QKey(0),
                info: Vec::new(),
                private_data: private_data.to_vec(),
                ece: Default::default(),
            };
            ds.cm.sidr_reply(t, cm_id, &rp)
        } else {
            ds.cm.reject(t, cm_id, reason, &[], private_data)
        };
        r.map_err(|e| einval(&e.to_string()))?;
        pump_dev(&mut g, &dev);
        Ok(())
    }

    /// `rdma_establish`: after CONNECT_RESPONSE on an id without a QP (the
    /// program moved its own QP to RTS): the RTU.
    pub fn establish(&self) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        let e = entry(&mut g, num)?;
        if e.qp.is_some() {
            return Err(einval("rdma_establish: the id has a QP"));
        }
        let (Some(cm_id), Some(dev)) = (e.cm, e.dev.clone()) else {
            return Err(einval("rdma_establish: not connecting"));
        };
        g.defer_drop(dev.clone());
        let t = now(dev.shared());
        let ds = dev_state(&mut g, dev.shared());
        ds.cm
            .establish(t, cm_id, &[])
            .map_err(|e| einval(&e.to_string()))?;
        pump_dev(&mut g, &dev);
        Ok(())
    }

    /// `rdma_notify` with IBV_EVENT_COMM_EST: the QP received before the
    /// RTU; the passive side is connected (ESTABLISHED follows).
    pub fn notify_established(&self) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        let e = entry(&mut g, num)?;
        let (Some(cm_id), Some(dev)) = (e.cm, e.dev.clone()) else {
            return Err(einval("rdma_notify: not connecting"));
        };
        g.defer_drop(dev.clone());
        let ds = dev_state(&mut g, dev.shared());
        ds.cm
            .notify_established(cm_id)
            .map_err(|e| einval(&e.to_string()))?;
        pump_dev(&mut g, &dev);
        Ok(())
    }

    /// `rdma_disconnect`: the QP to ERR, then a DREQ, or the DREP of a DREQ
    /// received. DISCONNECTED follows (on the DREP, or at once for a DREQ
    /// already reported).
    pub fn disconnect(&self) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        let e = entry(&mut g, num)?;
        let (Some(cm_id), Some(dev), qp) = (e.cm, e.dev.clone(), e.qp) else {
            return Err(einval("rdma_disconnect: not connected"));
        };
        g.defer_drop(dev.clone());
        if let Some(q) = qp {
            modify_err(&dev, q);
        }
        let t = now(dev.shared());
        let ds = dev_state(&mut g, dev.shared());
        // Linux tries a DREQ, then a DREP, and ignores a state that takes
        // neither.
        let _ = ds.cm.disconnect(t, cm_id, &[]);
        pump_dev(&mut g, &dev);
        Ok(())
    }

    /// `rdma_init_qp_attr`: the attributes and mask for moving the
    /// program's own QP to `state` (INIT, RTR, RTS).
    pub fn init_qp_attr(&self, state: QpState) -> Result<QpAttrs> {
        let mut g = lock();
        init_attrs(&mut g, self.0.num, state)
    }

    /// Makes `qp` the id's QP (`rdma_create_qp` after creating it): moves
    /// it to INIT (UD: INIT with Q_Key 0x01234567, RTR, RTS), and from now
    /// on connect/accept/REP/REJ/disconnect drive it.
    pub fn attach_qp(&self, qp: &QueuePair) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        let e = entry(&mut g, num)?;
        if e.qp.is_some() {
            return Err(einval("the id has a QP already"));
        }
        let dev = e
            .dev
            .clone()
            .ok_or_else(|| einval("the id has no device yet"))?;
        g.defer_drop(dev.clone());
        if !dev.same_device(qp.pd().device()) {
            return Err(einval("the QP is on another device"));
        }
        let e = entry(&mut g, num)?;
        let ud = e.qp_type == QpType::Ud;
        if ud != (qp.qp_type() == QpType::Ud) {
            return Err(einval("the QP's type is not the id's"));
        }
        if ud {
            for (i, a) in negotiate::create_qp_attrs(negotiate::RdmaQpType::Ud {
                qkey: softrdma_cm::limits::RDMA_UDP_QKEY,
            })
            .iter()
            .enumerate()
            {
                let mut a = *a;
                if i == 2 {
                    a.attr.sq_psn = Psn::ZERO;
                }
                modify(&dev, qp.qpn(), &a)?;
            }
        } else {
            let a = init_attrs(&mut g, num, QpState::Init)?;
            modify(&dev, qp.qpn(), &a)?;
        }
        let e = entry(&mut g, num)?;
        e.qp = Some(qp.qpn());
        e.qp_srq = qp.has_srq();
        Ok(())
    }

    /// The QP the program put in the id itself (the C library reads
    /// `id->qp` back before each call and each event, as librdmacm reads
    /// it whenever it needs it: uDAPL assigns `cm_id->qp` and then calls
    /// `rdma_accept`). Unlike [`CmId::attach_qp`] the QP is not moved: the
    /// next connect, accept or REP moves it from whatever state it is in
    /// (INIT, RTR, RTS), as librdmacm does. `None`: the id has no QP.
    pub fn use_qp(&self, qp: Option<&QueuePair>) -> Result<()> {
        let mut g = lock();
        let e = entry(&mut g, self.0.num)?;
        let Some(qp) = qp else {
            e.qp = None;
            return Ok(());
        };
        if e.qp == Some(qp.qpn()) {
            return Ok(());
        }
        if let Some(d) = &e.dev {
            if !d.same_device(qp.pd().device()) {
                return Err(einval("the QP is on another device"));
            }
        }
        if (e.qp_type == QpType::Ud) != (qp.qp_type() == QpType::Ud) {
            return Err(einval("the QP's type is not the id's"));
        }
        e.qp = Some(qp.qpn());
        e.qp_srq = qp.has_srq();
        Ok(())
    }

    /// The id no longer drives its QP (`rdma_destroy_qp`).
    pub fn detach_qp(&self) {
        let mut g = lock();
        if let Ok(e) = entry(&mut g, self.0.num) {
            e.qp = None;
        }
    }

    /// `RDMA_OPTION_ID_TOS`: the traffic class of the route (before
    /// `resolve_route`).
    pub fn set_tos(&self, tos: u8) -> Result<()> {
        let mut g = lock();
        entry(&mut g, self.0.num)?.opts.tos = Some(tos);
        Ok(())
    }

    /// `RDMA_OPTION_ID_ACK_TIMEOUT`: the QP's transport timeout (and the
    /// path's packet life time, timeout − 1).
    pub fn set_ack_timeout(&self, timeout: u8) -> Result<()> {
        let mut g = lock();
        entry(&mut g, self.0.num)?.opts.ack_timeout = Some(timeout.min(31));
        Ok(())
    }

    /// `rdma_set_min_rnr_timer`.
    pub fn set_min_rnr_timer(&self, t: u8) -> Result<()> {
        let mut g = lock();
        entry(&mut g, self.0.num)?.opts.min_rnr_timer = Some(t.min(31));
        Ok(())
    }

    /// `RDMA_OPTION_ID_REUSEADDR` (before bind, or while bound).
    pub fn set_reuseaddr(&self, on: bool) -> Result<()> {
        let mut g = lock();
        let e = entry(&mut g, self.0.num)?;
        if !matches!(e.st, St::Idle | St::AddrBound) {
            return Err(einval("REUSEADDR after bind"));
        }
        e.opts.reuseaddr = on;
        Ok(())
    }

    /// `RDMA_OPTION_ID_AFONLY` (before bind).
    pub fn set_afonly(&self, on: bool) -> Result<()> {
        let mut g = lock();
        let e = entry(&mut g, self.0.num)?;
        if e.st != St::Idle {
            return Err(einval("AFONLY after bind"));
        }
        e.opts.afonly = Some(on);
        Ok(())
    }

    /// `rdma_set_option(RDMA_OPTION_IB, RDMA_OPTION_IB_PATH)`: the route
    /// given instead of resolved (the kernel's `ucma_set_ib_path` and
    /// `rdma_set_ib_path`): only once the address is resolved, the path
    /// taken as given; queues ROUTE_RESOLVED as `rdma_resolve_route` does.
    pub fn set_ib_path(&self, path: Path) -> Result<()> {
        let mut g = lock();
        let num = self.0.num;
        let e = entry(&mut g, num)?;
        if e.st != St::AddrResolved || e.dev.is_none() {
            return Err(einval("RDMA_OPTION_IB_PATH: address not resolved"));
        }
        e.path = Some(path);
        e.st = St::RouteResolved;
        e.chan.push(Queued::new(num, EventType::RouteResolved, 0));
        Ok(())
    }

    /// `rdma_migrate_id`: the id's events (queued ones too) go to
    /// `channel` from now on; waits until the events already reported on
    /// the old channel are acknowledged.
    pub fn migrate(&self, channel: &EventChannel) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        let e = entry(&mut g, num)?;
        let old = std::mem::replace(&mut e.chan, channel.0.clone());
        if !Arc::ptr_eq(&old, &channel.0) {
            for q in old.take_of(num) {
                channel.0.push(q);
            }
        }
        drop(g);
        self.0.acks.wait();
        Ok(())
    }

    /// `rdma_destroy_id`: tells the peer what Linux tells it in the id's
    /// state (REJ, DREQ, DREP…), frees the port, destroys the ids of
    /// requests nobody took, then waits until every event reported for
    /// the id was acknowledged.
    pub fn destroy(&self) -> Result<()> {
        if self.0.destroyed.swap(true, Ordering::SeqCst) {
            return Err(einval("rdma_destroy_id: destroyed already"));
        }
        destroy_num(self.0.num)?;
        self.0.acks.wait();
        Ok(())
    }
}

/// The C library's reader of an id's public fields (see
/// [`set_read_back`]).
static READ_BACK: std::sync::RwLock<Option<fn(u64)>> = std::sync::RwLock::new(None);

/// Installs `f`, called with an id's [`CmId::num`] before an event of
/// that id is processed (the REP of an id with a QP moves the QP, a REJ
/// moves it to ERR): the C library reads back what the program set in
/// `struct rdma_cm_id` (its `qp`) there, as librdmacm reads the structure
/// while it processes the event. It runs with no lock of rdma_cm held.
pub fn set_read_back(f: fn(u64)) {
    *READ_BACK.write().unwrap_or_else(|e| e.into_inner()) = Some(f);
}

/// At process exit: every id still alive is destroyed, as the kernel's
/// rdma_cm does when a process's rdma_cm descriptor closes (`ucma_close`):
/// the peer of a connection gets its DREQ (or the DREP it waits for), a
/// pending request its REJ. Programs rely on it (qperf's server never
/// destroys its connection's id).
pub(crate) fn destroy_all_at_exit() {
    // Another thread may hold the lock forever (blocked in a call, or
    // killed by exit itself): a few tries, then nothing.
    for _ in 0..50 {
        if let Some(mut g) = super::state::try_lock() {
            let nums: Vec<u64> = g.st().ids.keys().copied().collect();
            for n in nums {
                let _ = destroy_locked(&mut g, n);
            }
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// Destroys an id (and the untaken ids of a listener's requests).
fn destroy_num(num: u64) -> Result<()> {
    let mut g = lock();
    destroy_locked(&mut g, num)
}

fn destroy_locked(g: &mut Guard, num: u64) -> Result<()> {
    let e = g
        .st()
        .ids
        .remove(&num)
        .ok_or_else(|| einval("no such rdma_cm id"))?;
    tracing::debug!(target: "softrdma::rdma_cm", "softrdma cm: destroy id {num} ({:?}, CM id {:?})",
            e.st, e.cm);
    release_port(g.st(), num, &e);
    // Its queued events go, with their counts (`ucma_cleanup_ctx_events`):
    // the channel is readable only for events that are there.
    drop(e.chan.take_of(num));
    // In a forked child, the parent's connections are the parent's: its
    // ids are forgotten here, nothing is sent (no DREQ, no REJ).
    if e.dev.as_ref().is_some_and(Device::forked_away) {
        g.defer_drop(e);
        return Ok(());
    }
    if let (Some(c), Some(dev)) = (e.cm, e.dev.clone()) {
        let t = now(dev.shared());
        if let Some(ds) = g.st().devs.get_mut(&dev.serial()) {
            let _ = ds.cm.destroy(t, c);
            ds.by_cm.remove(&c.comm_id());
        }
        pump_dev(g, &dev);
        g.defer_drop(dev);
    }
    if e.listen.is_some() {
        // The devices' CM listeners this was the last rdma_cm listener of
        // go too.
        let sid = service_id(e.ps, e.src.map_or(0, |s| s.port()));
        let serials: Vec<u64> = g
            .st()
            .devs
            .iter()
            .filter(|(_, ds)| ds.listeners.contains_key(&sid))
            .map(|(&s, _)| s)
            .collect();
        for serial in serials {
            let Some(dev) = g.device(serial) else {
                continue;
            };
            // A forked child leaves its parent's listeners alone.
            if dev.forked_away() {
                continue;
            }
            super::driver::cm_unlisten(g, serial, sid, now(dev.shared()));
            pump_dev(g, &dev);
        }
        // Requests queued and never taken: their ids go too (REJ 28).
        let orphans: Vec<u64> = g
            .st()
            .ids
            .iter()
            .filter(|(_, c)| c.listener == Some(num) && c.user.strong_count() == 0)
            .map(|(&n, _)| n)
            .collect();
        for o in orphans {
            let _ = destroy_locked(g, o);
        }
    }
    g.defer_drop(e);
    Ok(())
}

/// Turns a queued event into the program's event (`rdma_get_cm_event`),
/// or `None` when its id is gone. Runs librdmacm's part: the REP of an id
/// with a QP moves the QP to RTR and RTS and sends the RTU (ESTABLISHED),
/// or moves it to ERR (CONNECT_ERROR); a REJ moves the QP to ERR.
pub(crate) fn deliver(chan: &Arc<ChanInner>, mut q: Queued) -> Option<CmEvent> {
    // What the program set in the id's public fields counts from here.
    if let Some(read_back) = *READ_BACK.read().unwrap_or_else(|e| e.into_inner()) {
        read_back(q.num);
    }
    let mut g = lock();
    let num = q.num;
    let e = g.st().ids.get_mut(&num)?;
    if !Arc::ptr_eq(&e.chan, chan) {
        // Migrated after it was queued here: it belongs to the new channel.
        let c = e.chan.clone();
        c.push(q);
        return None;
    }
    let user = e.user.upgrade()?;
    let acks = e.acks.clone();
    let (dev, qp) = (e.dev.clone(), e.qp);
    g.defer_drop(user.clone());
    if let Some(d) = &dev {
        g.defer_drop(d.clone());
    }
    let mut new_user = None;
    match q.event {
        EventType::ConnectRequest => {
            let child = q.new_id?;
            if let Some(l) = entry(&mut g, num).ok().and_then(|e| e.listen.as_mut()) {
                l.pending = l.pending.saturating_sub(1);
            }
            let c = g.st().ids.get_mut(&child)?;
            let u = Arc::new(IdUser {
                num: child,
                acks: c.acks.clone(),
                destroyed: AtomicBool::new(false),
            });
            c.user = Arc::downgrade(&u);
            new_user = Some(u);
        }
        EventType::ConnectResponse => {
            if let (Some(qpn), Some(dev)) = (qp, &dev) {
                // ucma_process_conn_resp.
                let r = (|| -> Result<()> {
                    let a = init_attrs(&mut g, num, QpState::Init)?;
                    modify(dev, qpn, &a)?;
                    let a = init_attrs(&mut g, num, QpState::Rtr)?;
                    modify(dev, qpn, &a)?;
                    let a = init_attrs(&mut g, num, QpState::Rts)?;
                    modify(dev, qpn, &a)?;
                    let cm_id = entry(&mut g, num)?.cm.ok_or_else(|| einval("no CM id"))?;
                    let t = now(dev.shared());
                    let ds = dev_state(&mut g, dev.shared());
                    ds.cm
                        .establish(t, cm_id, &[])
                        .map_err(|e| einval(&e.to_string()))?;
                    pump_dev(&mut g, dev);
                    Ok(())
                })();
                match r {
                    Ok(()) => q.event = EventType::Established,
                    Err(err) => {
                        modify_err(dev, qpn);
                        q.event = EventType::ConnectError;
                        q.status = -err.errno();
                        if let Ok(e) = entry(&mut g, num) {
                            e.connect_error = true;
                        }
                    }
                }
            }
        }
        // librdmacm's ucma_process_join: the id's QP attaches.
        EventType::MulticastJoin => super::mcast::on_join(&mut g, num, &mut q),
        EventType::Rejected | EventType::Disconnected => {
            if entry(&mut g, num).ok()?.connect_error {
                return None;
            }
            if q.event == EventType::Rejected {
                if let (Some(qpn), Some(dev)) = (qp, &dev) {
                    modify_err(dev, qpn);
                }
            }
        }
        _ => {}
    }
    acks.report();
    let (id, listen_id) = match new_user {
        Some(u) => (CmId(u), Some(CmId(user))),
        None => (CmId(user), None),
    };
    tracing::debug!(target: "softrdma::rdma_cm", "softrdma cm: id {num} delivers {} status {}",
            q.event.as_str(),
            q.status);
    let ev = CmEvent {
        event: q.event,
        status: q.status,
        id,
        listen_id,
        conn: q.conn,
        ud: q.ud,
        mc: q.mc,
        acks,
    };
    drop(g);
    Some(ev)
}
