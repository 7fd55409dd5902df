//! The address side of an rdma_cm id: the port tables of the four port
//! spaces (`cma_check_port`, ephemeral ports), `rdma_bind_addr`,
//! `rdma_resolve_addr`, `rdma_resolve_route` and `rdma_listen`, as Linux's
//! core/cma.c does them. The id itself is in `id.rs`.

use super::channel::Queued;
use super::driver::{dev_state, now, service_id};
use super::id::{einval, entry, pump_dev, CmId};
use super::resolve::{self, provider};
use super::state::{lock, IdEntry, St, State};
use super::{ConnParam, EventType};
use crate::error::{Error, Result};
use crate::Device;
use softrdma_cm::negotiate::{self};
use softrdma_cm::rdma::{Binding, Listener, PortError};
use softrdma_cm::PortSpace;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

fn any_of(v4: bool) -> IpAddr {
    if v4 {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    }
}

/// The port table's answer as the errno Linux gives.
fn port_error(e: PortError) -> Error {
    let errno = match e {
        PortError::InUse(..) => libc::EADDRINUSE,
        PortError::Taken(_) | PortError::NoEphemeral => libc::EADDRNOTAVAIL,
    };
    Error::cm(errno, e.to_string())
}

/// Id `e`'s binding of `ip` (its REUSEADDR, its AFONLY for `ip`'s family).
fn binding(e: &IdEntry, ip: IpAddr, reuse: bool) -> Binding {
    Binding {
        ip,
        reuseaddr: reuse,
        afonly: e.opts.afonly(ip.is_ipv4()),
    }
}

/// `cma_check_port`: may `num` hold `ip:port` (with REUSEADDR if `reuse`)?
pub(super) fn check_port(
    st: &State,
    ps: PortSpace,
    port: u16,
    num: u64,
    ip: IpAddr,
    reuse: bool,
) -> Result<()> {
    let e = st.ids.get(&num).ok_or_else(|| einval("no such id"))?;
    st.ports
        .check(ps, port, num, binding(e, ip, reuse))
        .map_err(port_error)
}

/// Binds `num` to `ip:port` in its port space (port 0: an ephemeral one).
pub(super) fn take_port(st: &mut State, num: u64, ip: IpAddr, port: u16) -> Result<u16> {
    let e = st.ids.get(&num).ok_or_else(|| einval("no such id"))?;
    let (ps, b) = (e.ps, binding(e, ip, e.opts.reuseaddr));
    let mut r = [0u8; 4];
    let _ = getrandom::fill(&mut r);
    let port = st
        .ports
        .take(ps, num, port, b, u32::from_le_bytes(r))
        .map_err(port_error)?;
    let e = st.ids.get_mut(&num).expect("checked");
    e.src = Some(SocketAddr::new(ip, port));
    e.port_held = true;
    Ok(port)
}

/// The port table learns that `num`'s address or REUSEADDR changed.
pub(super) fn rebind_port(st: &mut State, num: u64) {
    let Some(e) = st.ids.get(&num) else {
        return;
    };
    if let (true, Some(src)) = (e.port_held, e.src) {
        let (ps, b) = (e.ps, binding(e, src.ip(), e.opts.reuseaddr));
        st.ports.update(ps, src.port(), num, b);
    }
}

pub(super) fn release_port(st: &mut State, num: u64, e: &IdEntry) {
    if let (true, Some(src)) = (e.port_held, e.src) {
        st.ports.release(e.ps, src.port(), num);
    }
}

impl CmId {
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
                    rebind_port(g.st(), num);
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
        e.listen = Some(Listener::new(
            ps,
            src,
            e.opts.afonly(src.is_ipv4()),
            e.serial(),
            super::driver::transport(e.qp_type),
            backlog,
        ));
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
        // Requests that came before the listener went to the CM when the
        // device listened (`DeviceCm::listen`): their events now.
        for d in &devs {
            pump_dev(&mut g, d);
        }
        Ok(())
    }
}
