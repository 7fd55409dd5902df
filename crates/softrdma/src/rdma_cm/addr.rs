//! The address side of an rdma_cm id: `rdma_bind_addr`,
//! `rdma_resolve_addr`, `rdma_resolve_route` and `rdma_listen`. What the
//! OS knows (which device has or reaches an address, a route's MTU, the
//! devices to listen on) is found here; the ids, their ports and
//! listeners are the endpoint's (`softrdma_cm::rdma::Endpoint`, Linux's
//! core/cma.c rules). The id itself is in `id.rs`.

use super::driver::{call, ensure_dev, flush, now};
use super::id::{dev_of, einval, ep_id, side, CmId};
use super::resolve::{self, provider};
use super::state::{afonly, lock, Guard, St};
use crate::error::{Error, Result};
use crate::Device;
use softrdma_cm::negotiate;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

fn any_of(v4: bool) -> IpAddr {
    if v4 {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    }
}

/// A random start for the ephemeral port search.
fn random_start() -> u32 {
    let mut r = [0u8; 4];
    let _ = getrandom::fill(&mut r);
    u32::from_le_bytes(r)
}

/// The id's AFONLY for an address of `ip`'s family, given to the
/// endpoint before it binds.
fn set_afonly(g: &mut Guard, num: u64, ip: IpAddr) -> Result<()> {
    let set = side(g, num)?.afonly;
    let mut o = ep_id(g, num)?.opts;
    o.afonly = afonly(set, ip.is_ipv4());
    call(g, |ep| ep.set_options(num, o))
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
        let num = self.0.num;
        let mut g = lock();
        if let Some(d) = &dev {
            g.defer_drop(d.clone());
        }
        if ep_id(&mut g, num)?.st != St::Idle {
            return Err(einval("rdma_bind_addr: the id is bound already"));
        }
        if let Some(d) = &dev {
            ensure_dev(&mut g, d.shared());
        }
        set_afonly(&mut g, num, ip)?;
        let serial = dev.as_ref().map(Device::serial);
        call(&mut g, |ep| ep.bind(num, serial, addr, random_start()))?;
        side(&mut g, num)?.dev = dev;
        Ok(())
    }

    /// `rdma_resolve_addr`: binds `src` (if given and unbound), picks the
    /// device that reaches `dst` and queues ADDR_RESOLVED, or ADDR_ERROR
    /// when none does.
    pub fn resolve_addr(&self, src: Option<SocketAddr>, dst: SocketAddr) -> Result<()> {
        if dst.ip().is_unspecified() {
            return Err(einval("rdma_resolve_addr: no destination"));
        }
        let num = self.0.num;
        let (state, bound) = {
            let mut g = lock();
            let e = ep_id(&mut g, num)?;
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
        let found = if need_dev {
            provider().source_for(dst.ip())?
        } else {
            None
        };
        let mut g = lock();
        if let Some(d) = &found {
            g.defer_drop(d.clone());
        }
        if ep_id(&mut g, num)?.st != state {
            return Err(einval("rdma_resolve_addr: the id changed meanwhile"));
        }
        let dev = if need_dev {
            let Some(d) = found else {
                return call(&mut g, |ep| ep.resolve_failed(num, -libc::EHOSTUNREACH));
            };
            d
        } else {
            dev_of(&mut g, num)?.ok_or_else(|| einval("rdma_resolve_addr: no device"))?
        };
        let ip = match bound {
            Some(b) if !b.ip().is_unspecified() => b.ip(),
            _ => dev.local_addr().ip(),
        };
        ensure_dev(&mut g, dev.shared());
        if state == St::Idle {
            set_afonly(&mut g, num, ip)?;
        }
        let serial = dev.serial();
        call(&mut g, |ep| {
            ep.resolve_addr(num, serial, ip, dst, random_start())
        })?;
        side(&mut g, num)?.dev = Some(dev);
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
        let e = ep_id(&mut g, num)?;
        if e.st != St::AddrResolved {
            return Err(einval("rdma_resolve_route: address not resolved"));
        }
        let (Some(src), Some(dst), Some(dev)) = (e.src, e.dst, dev_of(&mut g, num)?) else {
            return Err(einval("rdma_resolve_route: address not resolved"));
        };
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
        call(&mut g, |ep| ep.resolve_route(num, path))
    }

    /// `rdma_listen`: requests to the bound port come as CONNECT_REQUEST
    /// events. Bound to an address, on its device; bound to a wildcard,
    /// on every device, as the kernel's rdma_cm does (`cma_listen_on_all`):
    /// those configured (opened now), those that open later, and none at
    /// all yet (it still succeeds); requests are then sorted by their
    /// destination address (an AFONLY `[::]` takes only IPv6 ones).
    /// `backlog` ≤ 0 means 1024: requests beyond that many untaken ones
    /// get no answer (the requester retries). An unbound id is bound to
    /// 0.0.0.0 first. On a device shared with other processes, the device
    /// process must let this one listen (ENOMEM when another listens);
    /// ENOMEM too when a device's CM has no room for the listener (its
    /// `MAX_IDS` ids). A listening id: the new backlog, and EINVAL, as
    /// Linux gives.
    pub fn listen(&self, backlog: i32) -> Result<()> {
        let num = self.0.num;
        let (state, src) = {
            let mut g = lock();
            let e = ep_id(&mut g, num)?;
            (e.st, e.src)
        };
        if state == St::Idle {
            self.bind_addr(SocketAddr::new(any_of(true), 0))?;
            return self.listen(backlog);
        }
        if state == St::Listen {
            // Linux: ucma sets the listener's backlog, then `rdma_listen`
            // fails (EINVAL: its `rdma_bind_addr` of a bound id).
            let mut g = lock();
            return call(&mut g, |ep| ep.listen(num, backlog, now()));
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
        if ep_id(&mut g, num)?.st != state {
            return Err(einval("rdma_listen: the id changed meanwhile"));
        }
        for d in &devs {
            ensure_dev(&mut g, d.shared());
        }
        let _ = flush(&mut g);
        let r = g.ep().listen(num, backlog, now());
        let fl = flush(&mut g);
        r.map_err(super::driver::errno)?;
        let e = ep_id(&mut g, num)?;
        let sid = e.listen.as_ref().map(|l| l.service_id());
        let refused = fl.refused.iter().any(|&(d, s)| {
            Some(s) == sid
                && e.listen
                    .as_ref()
                    .is_some_and(|l| l.device.is_none_or(|x| x == d))
        });
        if refused {
            let _ = g.ep().stop_listening(num, now());
            let _ = flush(&mut g);
            return Err(Error::cm(libc::ENOMEM, "rdma_listen: too many CM ids"));
        }
        Ok(())
    }
}
