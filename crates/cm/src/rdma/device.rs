//! One device's part of the rdma_cm layer: its [`Cm`], the map from CM ids
//! to the layer's ids, the CM listeners its rdma_cm listeners share, and
//! the requests held for a listener to come ([`PARK_NS`]).

use crate::limits::{MAX_HALF_OPEN_PER_SOURCE, PARK_MAX, PARK_NS, REFUSED_REPORT_EVERY_NS};
use crate::{Cm, CmConfig, CmError, CmId, Instant, ServiceId};
use softrdma_wire::cm::{CmMadRepr, CmMsg};
use softrdma_wire::Qpn;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

/// A request held for a listener to come.
#[derive(Debug)]
struct Parked {
    until: Instant,
    sid: ServiceId,
    src: IpAddr,
    src_qpn: Qpn,
    mad: Vec<u8>,
}

/// Requests refused for their source's half-open limit since the last
/// report (at most one report per [`REFUSED_REPORT_EVERY_NS`]): the driver
/// logs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    /// How many since the last report.
    pub count: u64,
    /// The source of the last MAD received.
    pub last_from: IpAddr,
    /// The limit they hit ([`MAX_HALF_OPEN_PER_SOURCE`]).
    pub limit: usize,
}

/// A device's CM and what the rdma_cm layer keeps beside it.
#[derive(Debug)]
pub struct DeviceCm {
    /// The device's CM.
    pub cm: Cm,
    /// The device's address.
    pub ip: IpAddr,
    /// CM id (comm ID) → the layer's id.
    ids: HashMap<u32, u64>,
    /// The CM listener of each service ID some rdma_cm listener covering
    /// this device listens on (shared by the rdma_cm listeners of one
    /// port: `0.0.0.0` and `[::]`, or several addresses).
    listeners: HashMap<ServiceId, CmId>,
    /// Requests for service IDs nobody listens on yet.
    parked: VecDeque<Parked>,
    /// Requests refused for their source's half-open limit, as last
    /// reported.
    refused_reported: u64,
    /// When the next such report may come.
    refused_report_at: Instant,
    /// A device shared with other processes: its CM listens on a service
    /// only once the device process agreed (`Endpoint::gate_listen`).
    pub(super) gated: bool,
    /// A device of the parent process after a fork: nothing is sent from
    /// it and its listeners are left alone (`Endpoint::set_forked_away`).
    pub(super) forked_away: bool,
}

/// The service ID of a REQ or SIDR_REQ.
pub fn request_sid(mad: &[u8]) -> Option<ServiceId> {
    match CmMadRepr::parse(mad).ok()?.msg {
        CmMsg::Req(r) => Some(r.service_id),
        CmMsg::SidrReq(r) => Some(r.service_id),
        _ => None,
    }
}

impl DeviceCm {
    /// The part of the device at `ip` whose CM has `config`.
    pub fn new(config: CmConfig, ip: IpAddr) -> DeviceCm {
        DeviceCm {
            cm: Cm::new(config),
            ip,
            ids: HashMap::new(),
            listeners: HashMap::new(),
            parked: VecDeque::new(),
            refused_reported: 0,
            refused_report_at: Instant(0),
            gated: false,
            forked_away: false,
        }
    }

    /// Takes a received MAD: to the CM, or held (a request nobody listens
    /// for yet). Returns the refused requests to report, if it is time.
    pub fn receive(
        &mut self,
        t: Instant,
        src: IpAddr,
        src_qpn: Qpn,
        mad: &[u8],
    ) -> Option<Refused> {
        if self.parked.len() < PARK_MAX {
            if let Some(sid) = request_sid(mad).filter(|s| !self.listeners.contains_key(s)) {
                if !self.parked.iter().any(|p| p.mad == mad && p.src == src) {
                    self.parked.push_back(Parked {
                        until: t.add_ns(PARK_NS),
                        sid,
                        src,
                        src_qpn,
                        mad: mad.to_vec(),
                    });
                }
                return None;
            }
        }
        self.cm.handle_mad(t, src, src_qpn, mad);
        let refused = self.cm.counters().rx_refused_half_open;
        if refused > self.refused_reported && t >= self.refused_report_at {
            let r = Refused {
                count: refused - self.refused_reported,
                last_from: src,
                limit: MAX_HALF_OPEN_PER_SOURCE,
            };
            self.refused_reported = refused;
            self.refused_report_at = t.add_ns(REFUSED_REPORT_EVERY_NS);
            return Some(r);
        }
        None
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

    /// The time reached [`DeviceCm::deadline`]: held requests that are
    /// due go to the CM, then the CM's timers run.
    pub fn handle_timeout(&mut self, t: Instant) {
        self.release_parked(t, None);
        self.cm.handle_timeout(t);
    }

    /// The next deadline: the CM's or a held request's.
    pub fn deadline(&self) -> Option<Instant> {
        let held = self.parked.iter().map(|p| p.until).min();
        match (self.cm.poll_timeout(), held) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether the device's CM listens on `sid`.
    pub fn listens(&self, sid: ServiceId) -> bool {
        self.listeners.contains_key(&sid)
    }

    /// The device's CM listens on `sid` (once: the rdma_cm listeners of a
    /// port share it); the requests held for it go to the CM at once.
    pub fn listen(&mut self, t: Instant, sid: ServiceId) -> Result<(), CmError> {
        if !self.listeners.contains_key(&sid) {
            let c = self.cm.listen(sid)?;
            self.listeners.insert(sid, c);
        }
        self.release_parked(t, Some(sid));
        Ok(())
    }

    /// The device's CM stops listening on `sid` (the last rdma_cm
    /// listener covering the device went). Returns whether it listened.
    pub fn unlisten(&mut self, t: Instant, sid: ServiceId) -> bool {
        match self.listeners.remove(&sid) {
            Some(c) => {
                let _ = self.cm.destroy(t, c);
                true
            }
            None => false,
        }
    }

    /// The next MAD the device sends; none from a device forked away (its
    /// CM's MADs are dropped: the parent's connections are the parent's).
    pub fn poll_transmit(&mut self) -> Option<crate::Transmit> {
        if self.forked_away {
            while self.cm.poll_transmit().is_some() {}
            return None;
        }
        self.cm.poll_transmit()
    }

    /// `cm` is the layer's id `num` from now on.
    pub fn bind(&mut self, cm: CmId, num: u64) {
        self.ids.insert(cm.comm_id(), num);
    }

    /// The layer's id of a CM id.
    pub fn id_of(&self, cm: CmId) -> Option<u64> {
        self.ids.get(&cm.comm_id()).copied()
    }

    /// The layer's id `cm` stood for is gone.
    pub fn unbind(&mut self, cm: CmId) {
        self.ids.remove(&cm.comm_id());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::negotiate;
    use crate::{PortSpace, QpType};
    use softrdma_wire::cm::CmaHdrRepr;
    use softrdma_wire::Psn;

    fn dev(n: u64, ip: &str) -> DeviceCm {
        DeviceCm::new(CmConfig::new(n, [n, n + 1]), ip.parse().unwrap())
    }

    /// A REQ for `sid` from `a` to `dst` (its MAD).
    fn req(a: &mut DeviceCm, sid: ServiceId, dst: IpAddr) -> Vec<u8> {
        let path = negotiate::rdma_cm_path(a.ip, dst, 40000, 7000, 3, 0, 64);
        let cma = CmaHdrRepr {
            src_port: 40000,
            src: a.ip,
            dst,
        };
        let conn = negotiate::ConnParam {
            qp_num: Qpn::new(0x27),
            ..Default::default()
        };
        let p = negotiate::req_params(&path, sid, &cma, QpType::Rc, Psn::new(5), &conn)
            .expect("REQ parameters");
        a.cm.connect(Instant(0), &p).expect("connect");
        a.cm.poll_transmit().expect("the REQ").mad.to_vec()
    }

    #[test]
    fn a_request_waits_for_its_listener() {
        let mut a = dev(1, "10.0.0.1");
        let mut b = dev(2, "10.0.0.2");
        let sid = crate::rdma::service_id(PortSpace::Tcp, 7000);
        let mad = req(&mut a, sid, b.ip);
        let t = Instant(1_000);
        assert_eq!(b.receive(t, a.ip, Qpn::new(1), &mad), None);
        assert_eq!(b.deadline(), Some(t.add_ns(PARK_NS)), "held");
        assert!(b.cm.poll_event().is_none());
        // A duplicate is held once.
        b.receive(t, a.ip, Qpn::new(1), &mad);
        assert_eq!(b.parked.len(), 1);
        b.listen(t.add_ns(10), sid).expect("listen");
        assert!(b.listens(sid));
        assert!(matches!(
            b.cm.poll_event(),
            Some(crate::Event::ConnectRequest(_))
        ));
        assert!(b.parked.is_empty());
        assert!(b.unlisten(t, sid));
        assert!(!b.unlisten(t, sid));
    }

    #[test]
    fn an_unheard_request_is_rejected_when_due() {
        let mut a = dev(1, "10.0.0.1");
        let mut b = dev(2, "10.0.0.2");
        let sid = crate::rdma::service_id(PortSpace::Tcp, 7001);
        let mad = req(&mut a, sid, b.ip);
        b.receive(Instant(0), a.ip, Qpn::new(1), &mad);
        b.handle_timeout(Instant(PARK_NS - 1));
        assert!(b.cm.poll_transmit().is_none(), "still held");
        b.handle_timeout(Instant(PARK_NS));
        let rej = b.cm.poll_transmit().expect("REJ");
        let m = CmMadRepr::parse(&rej.mad).expect("a MAD");
        assert!(matches!(m.msg, CmMsg::Rej(r) if r.reason == crate::RejReason::INVALID_SERVICE_ID));
    }

    #[test]
    fn ids_map_both_ways() {
        let mut b = dev(2, "10.0.0.2");
        let c = CmId::from_comm_id(0x1234);
        assert_eq!(b.id_of(c), None);
        b.bind(c, 7);
        assert_eq!(b.id_of(c), Some(7));
        b.unbind(c);
        assert_eq!(b.id_of(c), None);
    }
}
