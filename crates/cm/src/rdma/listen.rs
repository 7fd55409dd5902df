//! rdma_cm listeners as data: what a listening id binds, which device's
//! requests it takes, the request that belongs to it (Linux's
//! `cma_find_listener`), and whether its backlog has room.

use crate::limits::MAX_BACKLOG;
use crate::{PortSpace, ServiceId};
use std::net::{IpAddr, SocketAddr};

/// The transport of an rdma_cm id or of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable connection (REQ, transport service type 0).
    Rc,
    /// Unreliable connection (REQ, transport service type 1).
    Uc,
    /// Unreliable datagram (SIDR_REQ).
    Ud,
    /// XRC (an id of an XRC QP): no request softrdma's CM takes asks for
    /// it, so its listener rejects every one.
    Xrc,
}

impl Transport {
    /// The transport librdmacm gives an id of port space `ps` when the
    /// program names no QP type (`rdma_create_id`: `ucma_get_qp_type`):
    /// UDP and IPoIB ids are UD, TCP and IB ids RC. Each port space has
    /// its own port table and its own service IDs (`RDMA_PS_* << 16 |
    /// port`), so one port number may be held in all four at once.
    pub const fn of_port_space(ps: PortSpace) -> Transport {
        match ps {
            PortSpace::Udp | PortSpace::Ipoib => Transport::Ud,
            PortSpace::Tcp | PortSpace::Ib => Transport::Rc,
        }
    }

    /// The transport a REQ asks for (its Transport Service Type field);
    /// `None` for one rdma_cm does not connect (RD, reserved values).
    pub const fn of_req(transport_service_type: u8) -> Option<Transport> {
        match transport_service_type {
            0 => Some(Transport::Rc),
            1 => Some(Transport::Uc),
            _ => None,
        }
    }
}

/// The service ID of an rdma_cm port (IBA A3.2.3: the port space in the
/// upper bits, the port below).
pub fn service_id(ps: PortSpace, port: u16) -> ServiceId {
    ServiceId::rdma_cm(ps, port)
}

/// `rdma_listen`'s backlog as the kernel keeps it: ≤ 0 or above
/// [`MAX_BACKLOG`] means [`MAX_BACKLOG`].
pub fn backlog(backlog: i32) -> u32 {
    match u32::try_from(backlog) {
        Ok(b) if b > 0 && b <= MAX_BACKLOG => b,
        _ => MAX_BACKLOG,
    }
}

/// A listening rdma_cm id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listener {
    /// Its port space.
    pub ps: PortSpace,
    /// The address and port it is bound to (the IP unspecified for a
    /// wildcard).
    pub bound: SocketAddr,
    /// It takes only requests of its address family
    /// (`RDMA_OPTION_ID_AFONLY`, or the default it got when it bound).
    pub afonly: bool,
    /// The device it is bound to (the driver's number for it); `None`: a
    /// wildcard, every device (those open now and those that open later).
    pub device: Option<u64>,
    /// The transport of the requests it takes.
    pub transport: Transport,
    /// Requests it may have untaken (see [`backlog`]).
    pub backlog: u32,
    /// Requests queued for it and not yet taken by the program.
    pub pending: u32,
}

/// What becomes of a request that reached its listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// The listener takes it: a new id and a CONNECT_REQUEST (counted in
    /// [`Listener::pending`] until [`Listener::taken`]).
    Take,
    /// The transport differs: REJ 28 (SIDR: "reject").
    Reject,
    /// The backlog is full: no answer, the requester retries
    /// (`Cm::drop_request`).
    Drop,
}

impl Listener {
    /// A listener for the id bound to `bound` (`backlog` as given to
    /// `rdma_listen`).
    pub fn new(
        ps: PortSpace,
        bound: SocketAddr,
        afonly: bool,
        device: Option<u64>,
        transport: Transport,
        backlog_given: i32,
    ) -> Listener {
        Listener {
            ps,
            bound,
            afonly,
            device,
            transport,
            backlog: backlog(backlog_given),
            pending: 0,
        }
    }

    /// Its service ID.
    pub fn service_id(&self) -> ServiceId {
        service_id(self.ps, self.bound.port())
    }

    /// Whether it covers `device` for `sid`: it listens on that service,
    /// bound to that device's address or to a wildcard (every device,
    /// whatever its address family: requests are sorted by their
    /// destination later, as the kernel's `cma_listen_on_all` does).
    pub fn covers(&self, device: u64, sid: ServiceId) -> bool {
        self.service_id() == sid && self.device.is_none_or(|d| d == device)
    }

    /// Whether a request for `dst` matches its bound address
    /// (`cma_match_private_data`): a wildcard that is not AFONLY takes
    /// either family; otherwise the family must match, and a specific
    /// address must be `dst`.
    pub fn matches(&self, dst: IpAddr) -> bool {
        let b = self.bound;
        if b.ip().is_unspecified() && !self.afonly {
            return true;
        }
        if b.is_ipv4() != dst.is_ipv4() {
            return false;
        }
        b.ip().is_unspecified() || b.ip() == dst
    }

    /// A request asking for `transport` reached it: [`Admission::Take`]
    /// counts it pending.
    pub fn admit(&mut self, transport: Transport) -> Admission {
        if transport != self.transport {
            return Admission::Reject;
        }
        if self.pending >= self.backlog {
            return Admission::Drop;
        }
        self.pending += 1;
        Admission::Take
    }

    /// `rdma_listen` of the listening id again: as Linux's ucma, which
    /// sets its count of requests the listener may still take to the new
    /// backlog (those not taken yet no longer count against it).
    pub fn relisten(&mut self, backlog_given: i32) {
        self.backlog = backlog(backlog_given);
        self.pending = 0;
    }

    /// The program took one of its requests (`rdma_get_cm_event`).
    pub fn taken(&mut self) {
        self.pending = self.pending.saturating_sub(1);
    }
}

/// The listener a request for `sid` that reached `device` for address
/// `dst` belongs to (`cma_find_listener`): among `listeners` (id number
/// and listener), one covering the device whose bound address matches
/// `dst`, a specific address before a wildcard, the lowest number first.
pub fn find<'a>(
    listeners: impl IntoIterator<Item = (u64, &'a Listener)>,
    device: u64,
    sid: ServiceId,
    dst: IpAddr,
) -> Option<u64> {
    let mut best: Option<(u64, bool)> = None;
    for (n, l) in listeners {
        if !l.covers(device, sid) || !l.matches(dst) {
            continue;
        }
        let specific = !l.bound.ip().is_unspecified();
        if best.is_none_or(|(b, bs)| (specific && !bs) || (specific == bs && n < b)) {
            best = Some((n, specific));
        }
    }
    best.map(|(n, _)| n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(bound: &str, afonly: bool, device: Option<u64>) -> Listener {
        Listener::new(
            PortSpace::Tcp,
            bound.parse().unwrap(),
            afonly,
            device,
            Transport::Rc,
            2,
        )
    }

    #[test]
    fn specific_before_wildcard_and_families() {
        let any4 = l("0.0.0.0:7000", true, None);
        let any6 = l("[::]:7000", true, None);
        let one = l("10.0.0.1:7000", true, Some(3));
        let sid = service_id(PortSpace::Tcp, 7000);
        let ls = [(1, &any4), (2, &any6), (3, &one)];
        let v4: IpAddr = "10.0.0.1".parse().unwrap();
        let other4: IpAddr = "10.0.0.2".parse().unwrap();
        let v6: IpAddr = "fe80::1".parse().unwrap();
        assert_eq!(find(ls, 3, sid, v4), Some(3));
        assert_eq!(find(ls, 4, sid, v4), Some(1), "device 4: only wildcards");
        assert_eq!(find(ls, 3, sid, other4), Some(1));
        assert_eq!(find(ls, 3, sid, v6), Some(2));
        assert_eq!(find(ls, 3, service_id(PortSpace::Tcp, 7001), v4), None);
        assert_eq!(find(ls, 3, service_id(PortSpace::Udp, 7000), v4), None);
        // [::] without AFONLY takes IPv4 requests too.
        let dual = l("[::]:7000", false, None);
        assert_eq!(find([(5, &dual)], 9, sid, v4), Some(5));
        assert_eq!(find([(2, &any6)], 9, sid, v4), None);
    }

    #[test]
    fn admission_counts_the_backlog() {
        let mut x = l("0.0.0.0:7000", true, None);
        assert_eq!(x.admit(Transport::Ud), Admission::Reject);
        assert_eq!(x.admit(Transport::Rc), Admission::Take);
        assert_eq!(x.admit(Transport::Rc), Admission::Take);
        assert_eq!(x.admit(Transport::Rc), Admission::Drop);
        x.taken();
        assert_eq!(x.admit(Transport::Rc), Admission::Take);
        assert_eq!(x.pending, 2);
    }

    #[test]
    fn backlog_defaults() {
        assert_eq!(backlog(0), MAX_BACKLOG);
        assert_eq!(backlog(-5), MAX_BACKLOG);
        assert_eq!(backlog(5000), MAX_BACKLOG);
        assert_eq!(backlog(7), 7);
        assert_eq!(Transport::of_req(0), Some(Transport::Rc));
        assert_eq!(Transport::of_req(1), Some(Transport::Uc));
        assert_eq!(Transport::of_req(2), None);
    }
}
