//! The port tables of rdma_cm's four port spaces: which ids hold which
//! port, with the address they bound and the options that let ids share a
//! port (Linux's `cma_check_port`, `cma_alloc_any_port`).

use crate::limits::EPHEMERAL_PORTS;
use crate::PortSpace;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// An id's hold on a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The address it bound (unspecified: a wildcard).
    pub ip: IpAddr,
    /// `RDMA_OPTION_ID_REUSEADDR`.
    pub reuseaddr: bool,
    /// It takes only its address family (`RDMA_OPTION_ID_AFONLY`, or the
    /// default for `ip`'s family).
    pub afonly: bool,
}

/// Why a port cannot be had (the errno Linux gives).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    /// A wildcard is involved and the port is taken (EADDRNOTAVAIL).
    #[error("port {0} in use")]
    Taken(u16),
    /// The address and port are taken (EADDRINUSE).
    #[error("{0}:{1} in use")]
    InUse(IpAddr, u16),
    /// Every ephemeral port is taken (EADDRNOTAVAIL).
    #[error("no free ephemeral port")]
    NoEphemeral,
}

/// The ports held in the four port spaces.
#[derive(Clone, Debug, Default)]
pub struct Ports {
    held: BTreeMap<(PortSpace, u16), Vec<(u64, Binding)>>,
}

impl Ports {
    /// `cma_check_port`: may id `num` hold `port` with binding `b` (what
    /// it would bind)? Ids sharing a port must both allow it (REUSEADDR),
    /// or be AFONLY ids of two families; otherwise a wildcard conflicts
    /// with any holder ([`PortError::Taken`]) and a specific address with
    /// a holder of the same one ([`PortError::InUse`]).
    pub fn check(&self, ps: PortSpace, port: u16, num: u64, b: Binding) -> Result<(), PortError> {
        let Some(holders) = self.held.get(&(ps, port)) else {
            return Ok(());
        };
        for (o, ob) in holders {
            if *o == num {
                continue;
            }
            if b.reuseaddr && ob.reuseaddr {
                continue;
            }
            if b.afonly && ob.afonly && ob.ip.is_ipv4() != b.ip.is_ipv4() {
                continue;
            }
            if b.ip.is_unspecified() || ob.ip.is_unspecified() {
                return Err(PortError::Taken(port));
            }
            if b.ip == ob.ip {
                return Err(PortError::InUse(b.ip, port));
            }
        }
        Ok(())
    }

    /// Id `num` takes `port` (0: an ephemeral one, the first free from
    /// `start` on, `start` taken modulo the range: the driver's random
    /// number) with binding `b`. Returns the port.
    pub fn take(
        &mut self,
        ps: PortSpace,
        num: u64,
        port: u16,
        b: Binding,
        start: u32,
    ) -> Result<u16, PortError> {
        let port = if port != 0 {
            self.check(ps, port, num, b)?;
            port
        } else {
            let (lo, hi) = EPHEMERAL_PORTS;
            let span = u32::from(hi - lo) + 1;
            let start = start % span;
            (0..span)
                .map(|i| lo + ((start + i) % span) as u16)
                .find(|&p| !self.held.contains_key(&(ps, p)))
                .ok_or(PortError::NoEphemeral)?
        };
        self.held.entry((ps, port)).or_default().push((num, b));
        Ok(port)
    }

    /// Id `num`'s hold on `port`, if it has one.
    fn binding(&mut self, ps: PortSpace, port: u16, num: u64) -> Option<&mut Binding> {
        let v = self.held.get_mut(&(ps, port))?;
        v.iter_mut().find(|(n, _)| *n == num).map(|(_, b)| b)
    }

    /// Id `num` holding `port` now binds `b` (a wildcard resolved to a
    /// device's address, REUSEADDR set while bound).
    pub fn update(&mut self, ps: PortSpace, port: u16, num: u64, b: Binding) {
        if let Some(x) = self.binding(ps, port, num) {
            *x = b;
        }
    }

    /// Id `num` lets `port` go.
    pub fn release(&mut self, ps: PortSpace, port: u16, num: u64) {
        if let Some(v) = self.held.get_mut(&(ps, port)) {
            v.retain(|(n, _)| *n != num);
            if v.is_empty() {
                self.held.remove(&(ps, port));
            }
        }
    }

    /// Whether nobody holds `port`.
    pub fn is_free(&self, ps: PortSpace, port: u16) -> bool {
        !self.held.contains_key(&(ps, port))
    }

    /// How many (id, port) bindings are held.
    pub fn held(&self) -> usize {
        self.held.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(ip: &str, reuseaddr: bool, afonly: bool) -> Binding {
        Binding {
            ip: ip.parse().unwrap(),
            reuseaddr,
            afonly,
        }
    }

    #[test]
    fn sharing_rules() {
        let mut p = Ports::default();
        let tcp = PortSpace::Tcp;
        assert_eq!(p.take(tcp, 1, 7000, b("0.0.0.0", false, true), 0), Ok(7000));
        // A wildcard holds it: any other address is refused.
        assert_eq!(
            p.check(tcp, 7000, 2, b("10.0.0.1", false, true)),
            Err(PortError::Taken(7000))
        );
        // Another family, both AFONLY: shared.
        assert_eq!(p.check(tcp, 7000, 2, b("::", false, true)), Ok(()));
        assert_eq!(
            p.check(tcp, 7000, 2, b("::", false, false)),
            Err(PortError::Taken(7000))
        );
        // Another port space: free.
        assert!(p.is_free(PortSpace::Udp, 7000));
        // The holder's own check passes.
        assert_eq!(p.check(tcp, 7000, 1, b("0.0.0.0", false, true)), Ok(()));
        // Specific addresses: the same one conflicts, another does not.
        p.update(tcp, 7000, 1, b("10.0.0.1", false, true));
        assert_eq!(
            p.check(tcp, 7000, 2, b("10.0.0.1", false, true)),
            Err(PortError::InUse("10.0.0.1".parse().unwrap(), 7000))
        );
        assert_eq!(p.check(tcp, 7000, 2, b("10.0.0.2", false, true)), Ok(()));
        // REUSEADDR on both sides: shared.
        assert_eq!(
            p.check(tcp, 7000, 2, b("10.0.0.1", true, true)),
            Err(PortError::InUse("10.0.0.1".parse().unwrap(), 7000))
        );
        p.update(tcp, 7000, 1, b("10.0.0.1", true, true));
        assert_eq!(p.check(tcp, 7000, 2, b("10.0.0.1", true, true)), Ok(()));
        p.release(tcp, 7000, 1);
        assert!(p.is_free(tcp, 7000));
    }

    #[test]
    fn ephemeral_ports() {
        let mut p = Ports::default();
        let any = b("0.0.0.0", false, true);
        let (lo, hi) = EPHEMERAL_PORTS;
        assert_eq!(p.take(PortSpace::Udp, 1, 0, any, 0), Ok(lo));
        assert_eq!(
            p.take(PortSpace::Udp, 2, 0, any, 0),
            Ok(lo + 1),
            "the next free"
        );
        let span = u32::from(hi - lo) + 1;
        assert_eq!(p.take(PortSpace::Udp, 3, 0, any, span - 1), Ok(hi));
        assert_eq!(p.take(PortSpace::Udp, 4, 0, any, span), Ok(lo + 2), "wraps");
        // The rest, each from a start that is free (one scan each).
        for n in 5..=u64::from(span) {
            assert!(p.take(PortSpace::Udp, n, 0, any, n as u32 - 2).is_ok());
        }
        assert_eq!(
            p.take(PortSpace::Udp, 99_999, 0, any, 7),
            Err(PortError::NoEphemeral)
        );
        assert_eq!(
            p.take(PortSpace::Tcp, 1, 0, any, 0),
            Ok(lo),
            "its own space"
        );
    }
}
