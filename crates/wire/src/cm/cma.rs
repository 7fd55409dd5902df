//! What rdma_cm puts into IB CM messages: service IDs made of a port space
//! and a port, and the 36-byte header at the start of the private data of
//! REQ and SIDR_REQ (Linux `struct cma_hdr`, core/cma.c).
//!
//! ```text
//! cma_hdr  0 cma_version (0)
//!          1 IP version(4 high bits: 4 or 6) rsv(4)
//!          2 source port (the requester's rdma_cm port)
//!          4 source IP (16: IPv4 = 12 zero bytes + address; or IPv6)
//!         20 destination IP (16, same encoding)
//! ```
//!
//! The destination port is not in the header: the responder takes it from
//! the service ID. User private data follows the header: up to 56 bytes in
//! a REQ, 180 in a SIDR_REQ.

use crate::{be, view, Error, Result};
use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Bytes of the rdma_cm header.
pub const CMA_HDR_LEN: usize = 36;
/// The only header version (Linux `CMA_VERSION`).
pub const CMA_VERSION: u8 = 0;
/// User private data after the header in a REQ (92 - 36).
pub const REQ_USER_DATA_LEN: usize = super::private_len::REQ - CMA_HDR_LEN;
/// User private data after the header in a SIDR_REQ (216 - 36).
pub const SIDR_REQ_USER_DATA_LEN: usize = super::private_len::SIDR_REQ - CMA_HDR_LEN;

/// An rdma_cm port space (Linux `enum rdma_ucm_port_space`): the high part
/// of a service ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PortSpace {
    /// `RDMA_PS_IPOIB`.
    Ipoib,
    /// `RDMA_PS_IB`.
    Ib,
    /// `RDMA_PS_TCP`: RC.
    Tcp,
    /// `RDMA_PS_UDP`: UD (SIDR).
    Udp,
}

impl PortSpace {
    /// The number (`RDMA_PS_*`).
    pub const fn value(self) -> u16 {
        match self {
            PortSpace::Ipoib => 0x0002,
            PortSpace::Ib => 0x013f,
            PortSpace::Tcp => 0x0106,
            PortSpace::Udp => 0x0111,
        }
    }
    /// The port space with this number.
    pub const fn from_value(v: u16) -> Option<PortSpace> {
        match v {
            0x0002 => Some(PortSpace::Ipoib),
            0x013f => Some(PortSpace::Ib),
            0x0106 => Some(PortSpace::Tcp),
            0x0111 => Some(PortSpace::Udp),
            _ => None,
        }
    }
    /// Its name as Linux spells it.
    pub const fn name(self) -> &'static str {
        match self {
            PortSpace::Ipoib => "IPOIB",
            PortSpace::Ib => "IB",
            PortSpace::Tcp => "TCP",
            PortSpace::Udp => "UDP",
        }
    }
}

/// A service ID (IBA 12.7.3), in host order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ServiceId(pub u64);

impl ServiceId {
    /// The service ID rdma_cm uses for a port in a port space:
    /// `ps << 16 | port` (Linux `rdma_get_service_id`), e.g. rping on TCP
    /// port 7174 is 0x0000_0000_0106_1c06.
    pub const fn rdma_cm(ps: PortSpace, port: u16) -> ServiceId {
        ServiceId((ps.value() as u64) << 16 | port as u64)
    }
    /// The rdma_cm port space and port, when the ID has that form.
    pub const fn rdma_cm_parts(self) -> Option<(PortSpace, u16)> {
        if self.0 >> 32 != 0 {
            return None;
        }
        match PortSpace::from_value((self.0 >> 16) as u16) {
            Some(ps) => Some((ps, self.0 as u16)),
            None => None,
        }
    }
}

impl fmt::Debug for ServiceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ServiceId({self})")
    }
}
impl fmt::Display for ServiceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#018x}", self.0)?;
        if let Some((ps, port)) = self.rdma_cm_parts() {
            write!(f, "({}:{port})", ps.name())?;
        }
        Ok(())
    }
}

mod field {
    pub const VERSION: usize = 0;
    pub const IP_VERSION: usize = 1;
    pub const SRC_PORT: usize = 2;
    pub const SRC_ADDR: usize = 4;
    pub const DST_ADDR: usize = 20;
    /// An IPv4 address sits in the last 4 bytes of its 16-byte slot.
    pub const V4_IN_SLOT: usize = 12;
}

view!(
    /// A view of the rdma_cm header at the start of REQ/SIDR_REQ private data.
    CmaHdr,
    CMA_HDR_LEN
);

impl<T: AsRef<[u8]>> CmaHdr<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// `cma_version`.
    pub fn version(&self) -> u8 {
        self.b()[field::VERSION]
    }
    /// IP version (the high 4 bits of byte 1).
    pub fn ip_version(&self) -> u8 {
        self.b()[field::IP_VERSION] >> 4
    }
    /// The requester's port.
    pub fn src_port(&self) -> u16 {
        be::u16(self.b(), field::SRC_PORT)
    }
    fn addr(&self, at: usize) -> Option<IpAddr> {
        let b = &self.b()[at..at + 16];
        match self.ip_version() {
            4 => {
                let s = field::V4_IN_SLOT;
                Some(IpAddr::V4(Ipv4Addr::new(
                    b[s],
                    b[s + 1],
                    b[s + 2],
                    b[s + 3],
                )))
            }
            6 => {
                let mut a = [0u8; 16];
                a.copy_from_slice(b);
                Some(IpAddr::V6(Ipv6Addr::from(a)))
            }
            _ => None,
        }
    }
    /// The requester's IP, when the IP version is 4 or 6.
    pub fn src_addr(&self) -> Option<IpAddr> {
        self.addr(field::SRC_ADDR)
    }
    /// The IP the requester connects to, when the IP version is 4 or 6.
    pub fn dst_addr(&self) -> Option<IpAddr> {
        self.addr(field::DST_ADDR)
    }
}

/// The fields of an rdma_cm header. Parsing checks what Linux's
/// `cma_save_ip_info` checks: version 0 and IP version 4 or 6.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CmaHdrRepr {
    /// The requester's rdma_cm port.
    pub src_port: u16,
    /// The requester's IP.
    pub src: IpAddr,
    /// The destination IP (the listener's, or the address it was reached at).
    pub dst: IpAddr,
}

impl CmaHdrRepr {
    /// Parses a header view: [`Error::Malformed`] for a version other than
    /// 0, an IP version other than 4/6, or addresses of two families.
    pub fn parse<T: AsRef<[u8]>>(v: &CmaHdr<T>) -> Result<CmaHdrRepr> {
        v.check_len()?;
        if v.version() != CMA_VERSION {
            return Err(Error::Malformed);
        }
        match (v.src_addr(), v.dst_addr()) {
            (Some(src), Some(dst)) => Ok(CmaHdrRepr {
                src_port: v.src_port(),
                src,
                dst,
            }),
            _ => Err(Error::Malformed),
        }
    }

    /// Parses the header at the start of REQ or SIDR_REQ private data.
    pub fn parse_private(private_data: &[u8]) -> Result<CmaHdrRepr> {
        Self::parse(&CmaHdr::new_checked(private_data)?)
    }

    /// Length of the emitted header.
    pub const fn buffer_len(&self) -> usize {
        CMA_HDR_LEN
    }

    /// Writes the 36 bytes; the two addresses must be of one family.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut CmaHdr<T>) -> Result<()> {
        v.check_len()?;
        let b = &mut v.buffer.as_mut()[..CMA_HDR_LEN];
        b.fill(0);
        b[field::VERSION] = CMA_VERSION;
        let put = |b: &mut [u8], at: usize, a: IpAddr| match a {
            IpAddr::V4(v4) => {
                let s = at + field::V4_IN_SLOT;
                b[s..s + 4].copy_from_slice(&v4.octets());
            }
            IpAddr::V6(v6) => b[at..at + 16].copy_from_slice(&v6.octets()),
        };
        let ver = match (self.src, self.dst) {
            (IpAddr::V4(_), IpAddr::V4(_)) => 4u8,
            (IpAddr::V6(_), IpAddr::V6(_)) => 6u8,
            _ => return Err(Error::BadRepr),
        };
        b[field::IP_VERSION] = ver << 4;
        be::set_u16(b, field::SRC_PORT, self.src_port);
        put(b, field::SRC_ADDR, self.src);
        put(b, field::DST_ADDR, self.dst);
        Ok(())
    }

    /// The header as bytes (for building private data).
    pub fn to_bytes(&self) -> Result<[u8; CMA_HDR_LEN]> {
        let mut out = [0u8; CMA_HDR_LEN];
        self.emit(&mut CmaHdr::new_unchecked(&mut out[..]))?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ids_of_the_port_spaces() {
        let sid = ServiceId::rdma_cm(PortSpace::Tcp, 7174);
        assert_eq!(sid.0, 0x0000_0000_0106_1c06);
        assert_eq!(sid.rdma_cm_parts(), Some((PortSpace::Tcp, 7174)));
        assert_eq!(sid.to_string(), "0x0000000001061c06(TCP:7174)");
        assert_eq!(ServiceId::rdma_cm(PortSpace::Udp, 1).0, 0x0111_0001);
        assert_eq!(ServiceId::rdma_cm(PortSpace::Ib, 2).0, 0x013f_0002);
        assert_eq!(ServiceId::rdma_cm(PortSpace::Ipoib, 3).0, 0x0002_0003);
        assert_eq!(ServiceId(0x1_0106_0000).rdma_cm_parts(), None);
        assert_eq!(ServiceId(0x0107_0000).rdma_cm_parts(), None);
    }

    #[test]
    fn header_from_the_rping_req() {
        // rping_rdmacm.pcap frame 1, REQ private data bytes 0..36.
        let mut b = [0u8; 36];
        b[1] = 0x40;
        b[2..4].copy_from_slice(&[0xd5, 0x8b]);
        b[16..20].copy_from_slice(&[198, 18, 0, 2]);
        b[32..36].copy_from_slice(&[198, 18, 0, 1]);
        let r = CmaHdrRepr::parse_private(&b).unwrap();
        assert_eq!(r.src_port, 54667);
        assert_eq!(r.src, "198.18.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(r.dst, "198.18.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(r.to_bytes().unwrap(), b);

        let mut bad = b;
        bad[0] = 1;
        assert_eq!(CmaHdrRepr::parse_private(&bad), Err(Error::Malformed));
        bad = b;
        bad[1] = 0x50;
        assert_eq!(CmaHdrRepr::parse_private(&bad), Err(Error::Malformed));
        assert_eq!(CmaHdrRepr::parse_private(&b[..35]), Err(Error::Truncated));
        let mixed = CmaHdrRepr {
            dst: "::1".parse().unwrap(),
            ..r
        };
        assert_eq!(mixed.to_bytes(), Err(Error::BadRepr));
    }
}
