//! The 40-byte Global Route Header as it appears at the head of UD receive
//! buffers (IBA 8.3, 11.4.1.1 and Annex A17.4.5.1).
//!
//! Native InfiniBand puts a GRH (IPv6-shaped) on the wire. RoCE v2 carries an
//! IP header instead, and the verbs contract still reserves 40 bytes at the
//! start of every UD receive buffer: they hold the IPv6 header as received,
//! or, for IPv4, 20 unspecified bytes (zero, as rxe writes them) followed by
//! the IPv4 header. rdma-core's `ibv_init_ah_from_wc` reads either layout.

use crate::ip::{DatagramRepr, IpRepr, IPV4_HEADER_LEN, IPV6_HEADER_LEN, UDP_HEADER_LEN};
use crate::{be, view, Result};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Length of the GRH area.
pub const GRH_LEN: usize = 40;

mod field {
    pub const PAYLOAD_LEN: usize = 4;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SGID: usize = 8;
    pub const DGID: usize = 24;
}

view!(
    /// View of a 40-byte GRH (IPv6 layout).
    Grh,
    GRH_LEN
);

impl<T: AsRef<[u8]>> Grh<T> {
    /// IP version nibble (6 for a GRH).
    pub fn ip_version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }
    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        (be::u16(self.buffer.as_ref(), 0) >> 4) as u8
    }
    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        be::u32(self.buffer.as_ref(), 0) & 0xfffff
    }
    /// Payload length.
    pub fn payload_len(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::PAYLOAD_LEN)
    }
    /// Next header.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    /// Source GID.
    pub fn sgid(&self) -> [u8; 16] {
        let mut g = [0u8; 16];
        g.copy_from_slice(&self.buffer.as_ref()[field::SGID..field::SGID + 16]);
        g
    }
    /// Destination GID.
    pub fn dgid(&self) -> [u8; 16] {
        let mut g = [0u8; 16];
        g.copy_from_slice(&self.buffer.as_ref()[field::DGID..field::DGID + 16]);
        g
    }
}

/// The fields of a GRH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GrhRepr {
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label.
    pub flow_label: u32,
    /// Payload length.
    pub payload_len: u16,
    /// Next header (17 = UDP under RoCE v2, 0x1b under native IB).
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Source GID.
    pub sgid: [u8; 16],
    /// Destination GID.
    pub dgid: [u8; 16],
}

impl GrhRepr {
    /// Parses a view (IPv6 layout).
    pub fn parse<T: AsRef<[u8]>>(v: &Grh<T>) -> Result<Self> {
        v.check_len()?;
        Ok(Self {
            traffic_class: v.traffic_class(),
            flow_label: v.flow_label(),
            payload_len: v.payload_len(),
            next_header: v.next_header(),
            hop_limit: v.hop_limit(),
            sgid: v.sgid(),
            dgid: v.dgid(),
        })
    }
    /// Emitted length.
    pub const fn buffer_len(&self) -> usize {
        GRH_LEN
    }
    /// Writes into a view.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Grh<T>) {
        let b = v.buffer.as_mut();
        let first =
            (6u32 << 28) | ((self.traffic_class as u32) << 20) | (self.flow_label & 0xfffff);
        be::set_u32(b, 0, first);
        be::set_u16(b, field::PAYLOAD_LEN, self.payload_len);
        b[field::NEXT_HEADER] = self.next_header;
        b[field::HOP_LIMIT] = self.hop_limit;
        b[field::SGID..field::SGID + 16].copy_from_slice(&self.sgid);
        b[field::DGID..field::DGID + 16].copy_from_slice(&self.dgid);
    }
}

/// The GID of an IP address under RoCE v2: an IPv6 address as is, an IPv4
/// address as `::ffff:a.b.c.d`.
pub fn gid_of(addr: IpAddr) -> [u8; 16] {
    match addr {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// The node GUID of a device at `ip`: EUI-64 style, stable per address so
/// it is known before a device is opened (IPv4: `02:50:56:ff:fe` and the
/// last three octets; IPv6: the interface identifier with the
/// universal/local bit flipped).
pub fn node_guid_of(ip: IpAddr) -> u64 {
    let b = match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            [0x02, 0x50, 0x56, 0xff, 0xfe, o[1], o[2], o[3]]
        }
        IpAddr::V6(a) => {
            let o = a.octets();
            [o[8] ^ 2, o[9], o[10], o[11], o[12], o[13], o[14], o[15]]
        }
    };
    u64::from_be_bytes(b)
}

/// The IP address a RoCE v2 GID stands for (IPv4-mapped GIDs give IPv4).
pub fn addr_of_gid(gid: [u8; 16]) -> IpAddr {
    let a = Ipv6Addr::from(gid);
    match a.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(a),
    }
}

/// Whether a GID is a multicast GID as Linux's `rdma_is_multicast_addr`
/// decides for RoCE: an IPv6 multicast address (`ff00::/8`), or an
/// IPv4-mapped IPv4 multicast address (`::ffff:224.0.0.0/100`).
pub fn is_multicast_gid(gid: [u8; 16]) -> bool {
    gid[0] == 0xff || addr_of_gid(gid).is_multicast()
}

/// The 40 bytes placed before a received UD payload: the IPv6 header, or 20
/// zero bytes and the IPv4 header. `ib_len` is the transport packet's length
/// (BTH through ICRC) so the length fields read as received.
pub fn ud_grh_area(d: &DatagramRepr, ib_len: usize) -> [u8; GRH_LEN] {
    let mut out = [0u8; GRH_LEN];
    let mut hdr = [0u8; IPV6_HEADER_LEN + UDP_HEADER_LEN];
    let hl = d.header_len();
    let _ = d.emit_headers(&mut hdr[..hl], ib_len);
    match d.ip {
        IpRepr::V4(_) => out[20..].copy_from_slice(&hdr[..IPV4_HEADER_LEN]),
        IpRepr::V6(_) => out.copy_from_slice(&hdr[..IPV6_HEADER_LEN]),
    }
    out
}

/// Source address recorded in a UD GRH area (either layout).
pub fn ud_grh_source(area: &[u8; GRH_LEN]) -> IpAddr {
    if area[20] >> 4 == 4 && area[..20].iter().all(|&b| b == 0) {
        IpAddr::V4(Ipv4Addr::new(area[32], area[33], area[34], area[35]))
    } else {
        let mut s = [0u8; 16];
        s.copy_from_slice(&area[field::SGID..field::SGID + 16]);
        IpAddr::V6(Ipv6Addr::from(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ip::{Ipv6Repr, UdpRepr};

    #[test]
    fn gid_mapping() {
        let a: IpAddr = "198.18.0.1".parse().unwrap();
        let g = gid_of(a);
        assert_eq!(&g[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(addr_of_gid(g), a);
        let b: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(addr_of_gid(gid_of(b)), b);
    }

    #[test]
    fn multicast_gids() {
        for (addr, mc) in [
            ("239.67.0.1", true),
            ("224.0.0.1", true),
            ("198.18.0.1", false),
            ("ff0e::67:1", true),
            ("ff02::1", true),
            ("2001:db8::1", false),
        ] {
            let a: IpAddr = addr.parse().unwrap();
            assert_eq!(is_multicast_gid(gid_of(a)), mc, "{addr}");
            assert_eq!(addr_of_gid(gid_of(a)), a);
        }
        // The v4-mapped form only: ::239.1.1.1 (IPv4-compatible) is not.
        let mut g = [0u8; 16];
        g[12..].copy_from_slice(&[239, 1, 1, 1]);
        assert!(!is_multicast_gid(g));
    }

    #[test]
    fn ud_area_ipv6_matches_rxe_log() {
        // logs/v6_ud_send_imm.server.txt: 6b900000 0064 11 c8 2001:db8::2 2001:db8::1
        let d = DatagramRepr {
            ip: IpRepr::V6(Ipv6Repr {
                src: "2001:db8::2".parse().unwrap(),
                dst: "2001:db8::1".parse().unwrap(),
                traffic_class: 0xb9,
                flow_label: 0,
                hop_limit: 200,
            }),
            udp: UdpRepr {
                src_port: 1,
                dst_port: 4791,
                checksum: 0,
            },
        };
        let area = ud_grh_area(&d, 100 - 8);
        assert_eq!(&area[..8], &[0x6b, 0x90, 0, 0, 0, 0x64, 0x11, 0xc8]);
        assert_eq!(
            ud_grh_source(&area),
            "2001:db8::2".parse::<IpAddr>().unwrap()
        );
        let g = GrhRepr::parse(&Grh::new_checked(&area[..]).unwrap()).unwrap();
        assert_eq!(g.traffic_class, 0xb9);
        assert_eq!(g.hop_limit, 200);
        let mut o = [0u8; 40];
        g.emit(&mut Grh::new_unchecked(&mut o[..]));
        assert_eq!(o, area);
    }

    #[test]
    fn ud_area_ipv4() {
        let d = DatagramRepr::new(
            IpRepr::between(
                "198.18.0.2".parse().unwrap(),
                "198.18.0.1".parse().unwrap(),
                0,
            )
            .unwrap(),
            1,
            4791,
        );
        let area = ud_grh_area(&d, 100);
        assert!(area[..20].iter().all(|&b| b == 0));
        assert_eq!(area[20], 0x45);
        assert_eq!(
            ud_grh_source(&area),
            "198.18.0.2".parse::<IpAddr>().unwrap()
        );
    }
}
