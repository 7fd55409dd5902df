//! IPv4 / IPv6 + UDP encapsulation of RoCE v2 (IBA Annex A17.4): build and
//! parse whole datagrams, and compute their ICRC.

use crate::icrc::{self, Icrc};
use crate::packet::{IbPacket, PacketRepr, ICRC_LEN};
use crate::{be, Error, Result};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// UDP destination port of RoCE v2 (IANA).
pub const ROCE_V2_PORT: u16 = 4791;
/// Length of an IPv4 header without options.
pub const IPV4_HEADER_LEN: usize = 20;
/// Length of an IPv6 header.
pub const IPV6_HEADER_LEN: usize = 40;
/// Length of a UDP header.
pub const UDP_HEADER_LEN: usize = 8;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;

mod v4 {
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const LEN: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLAGS: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTO: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: usize = 12;
    pub const DST: usize = 16;
}

mod v6 {
    pub const PAYLOAD_LEN: usize = 4;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: usize = 8;
    pub const DST: usize = 24;
}

mod udp {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LEN: usize = 4;
    pub const CHECKSUM: usize = 6;
}

const DF: u16 = 0x4000;

/// IPv4 header fields of a RoCE v2 datagram (no options, never fragmented).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// DSCP and ECN (type of service byte).
    pub tos: u8,
    /// Identification.
    pub ident: u16,
    /// Don't-fragment flag.
    pub dont_frag: bool,
    /// Time to live.
    pub ttl: u8,
}

/// IPv6 header fields of a RoCE v2 datagram (no extension headers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
}

/// The IP header of a RoCE v2 datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpRepr {
    /// IPv4.
    V4(Ipv4Repr),
    /// IPv6.
    V6(Ipv6Repr),
}

impl IpRepr {
    /// An IP header for `src` → `dst` as a UDP socket sender produces it:
    /// IPv4 with DF set, TTL 64 and identification 0 (what Linux puts in DF
    /// datagrams of an unconnected socket), IPv6 with hop limit 64. A mixed
    /// pair is an error.
    pub fn between(src: IpAddr, dst: IpAddr, tclass: u8) -> Result<IpRepr> {
        match (src, dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => Ok(IpRepr::V4(Ipv4Repr {
                src,
                dst,
                tos: tclass,
                ident: 0,
                dont_frag: true,
                ttl: 64,
            })),
            (IpAddr::V6(src), IpAddr::V6(dst)) => Ok(IpRepr::V6(Ipv6Repr {
                src,
                dst,
                traffic_class: tclass,
                flow_label: 0,
                hop_limit: 64,
            })),
            _ => Err(Error::BadRepr),
        }
    }
    /// Header length.
    pub const fn header_len(&self) -> usize {
        match self {
            IpRepr::V4(_) => IPV4_HEADER_LEN,
            IpRepr::V6(_) => IPV6_HEADER_LEN,
        }
    }
    /// Source address.
    pub fn src(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => r.src.into(),
            IpRepr::V6(r) => r.src.into(),
        }
    }
    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => r.dst.into(),
            IpRepr::V6(r) => r.dst.into(),
        }
    }
}

/// UDP header fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port (RoCE v2 stacks use it for ECMP entropy).
    pub src_port: u16,
    /// Destination port (4791 for RoCE v2).
    pub dst_port: u16,
    /// Checksum as carried (rxe sends 0; the ICRC masks it).
    pub checksum: u16,
}

/// IP and UDP headers of a RoCE v2 datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DatagramRepr {
    /// IP header.
    pub ip: IpRepr,
    /// UDP header.
    pub udp: UdpRepr,
}

/// RFC 1071 checksum of an IPv4 header with its checksum field zero.
pub fn ipv4_checksum(hdr: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for c in hdr.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        sum += w as u32;
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

impl DatagramRepr {
    /// Length of IP + UDP headers.
    pub const fn header_len(&self) -> usize {
        self.ip.header_len() + UDP_HEADER_LEN
    }

    /// Writes the IP and UDP headers for a transport packet of `ib_len`
    /// bytes (BTH through ICRC). Returns the header length.
    pub fn emit_headers(&self, buf: &mut [u8], ib_len: usize) -> Result<usize> {
        self.emit_headers_with(buf, ib_len, true)
    }

    /// [`Self::emit_headers`], optionally without the IPv4 header checksum
    /// (the ICRC masks it, so computing it for the ICRC is wasted work).
    fn emit_headers_with(&self, buf: &mut [u8], ib_len: usize, checksum: bool) -> Result<usize> {
        let hl = self.header_len();
        if buf.len() < hl {
            return Err(Error::Truncated);
        }
        let udp_len = UDP_HEADER_LEN + ib_len;
        match &self.ip {
            IpRepr::V4(r) => {
                let total = IPV4_HEADER_LEN + udp_len;
                if total > u16::MAX as usize {
                    return Err(Error::BadRepr);
                }
                let h = &mut buf[..IPV4_HEADER_LEN];
                h[v4::VER_IHL] = 0x45;
                h[v4::TOS] = r.tos;
                be::set_u16(h, v4::LEN, total as u16);
                be::set_u16(h, v4::IDENT, r.ident);
                be::set_u16(h, v4::FLAGS, if r.dont_frag { DF } else { 0 });
                h[v4::TTL] = r.ttl;
                h[v4::PROTO] = IPPROTO_UDP;
                be::set_u16(h, v4::CHECKSUM, 0);
                h[v4::SRC..v4::SRC + 4].copy_from_slice(&r.src.octets());
                h[v4::DST..v4::DST + 4].copy_from_slice(&r.dst.octets());
                if checksum {
                    let c = ipv4_checksum(h);
                    be::set_u16(h, v4::CHECKSUM, c);
                }
            }
            IpRepr::V6(r) => {
                if udp_len > u16::MAX as usize {
                    return Err(Error::BadRepr);
                }
                let h = &mut buf[..IPV6_HEADER_LEN];
                let first =
                    (6u32 << 28) | ((r.traffic_class as u32) << 20) | (r.flow_label & 0xfffff);
                be::set_u32(h, 0, first);
                be::set_u16(h, v6::PAYLOAD_LEN, udp_len as u16);
                h[v6::NEXT_HEADER] = IPPROTO_UDP;
                h[v6::HOP_LIMIT] = r.hop_limit;
                h[v6::SRC..v6::SRC + 16].copy_from_slice(&r.src.octets());
                h[v6::DST..v6::DST + 16].copy_from_slice(&r.dst.octets());
            }
        }
        let u = &mut buf[self.ip.header_len()..hl];
        be::set_u16(u, udp::SRC_PORT, self.udp.src_port);
        be::set_u16(u, udp::DST_PORT, self.udp.dst_port);
        be::set_u16(u, udp::LEN, udp_len as u16);
        be::set_u16(u, udp::CHECKSUM, self.udp.checksum);
        Ok(hl)
    }

    /// Starts the ICRC of a transport packet of `ib_len` bytes (BTH through
    /// ICRC) sent with these headers; feed the transport bytes next.
    pub fn icrc_begin(&self, ib_len: usize) -> Icrc {
        let mut hdr = [0u8; IPV6_HEADER_LEN + UDP_HEADER_LEN];
        let hl = self.header_len();
        // Lengths were validated by the caller's packet; on overflow the
        // headers would be wrong and so would the ICRC, never a panic.
        let _ = self.emit_headers(&mut hdr[..hl], ib_len);
        icrc_begin_from_headers(&hdr[..hl])
    }

    /// ICRC of `covered` (BTH through pad) sent with these headers, as
    /// softrdma and Linux rxe send it (for FLUSH rxe's form; see
    /// [`crate::icrc`]).
    pub fn icrc(&self, covered: &[u8]) -> u32 {
        let mut hdr = [0u8; IPV6_HEADER_LEN + UDP_HEADER_LEN];
        let hl = self.header_len();
        // As in icrc_begin: an overflowing length gives a wrong ICRC, never a panic.
        let _ = self.emit_headers_with(&mut hdr[..hl], covered.len() + ICRC_LEN, false);
        icrc::icrc_datagram(&hdr[..hl], covered)
    }

    /// The ICRC of IBA annex A17.3.3 for `covered`, which differs from
    /// [`Self::icrc`] for FLUSH only.
    pub fn icrc_iba(&self, covered: &[u8]) -> u32 {
        let mut hdr = [0u8; IPV6_HEADER_LEN + UDP_HEADER_LEN];
        let hl = self.header_len();
        let _ = self.emit_headers_with(&mut hdr[..hl], covered.len() + ICRC_LEN, false);
        icrc::icrc_datagram_iba(&hdr[..hl], covered)
    }

    /// The ICRCs a receiver accepts for `covered` with these headers (rxe's
    /// first, then for FLUSH the annex's), each with the number of ICRC
    /// input bytes after the IPv4 identification, the `bytes_after_id` of
    /// [`icrc::solve_ipv4_id`].
    pub fn icrc_forms(&self, covered: &[u8]) -> impl Iterator<Item = (u32, usize)> {
        let mut hdr = [0u8; IPV6_HEADER_LEN + UDP_HEADER_LEN];
        let hl = self.header_len();
        let _ = self.emit_headers_with(&mut hdr[..hl], covered.len() + ICRC_LEN, false);
        icrc::icrc_forms(&hdr[..hl], covered)
    }

    /// Writes a whole datagram — IP, UDP, the transport packet and its ICRC —
    /// and returns its length.
    pub fn emit(&self, pkt: &PacketRepr<'_>, buf: &mut [u8]) -> Result<usize> {
        let ib_len = pkt.buffer_len();
        let hl = self.header_len();
        let total = hl + ib_len;
        if buf.len() < total {
            return Err(Error::Truncated);
        }
        pkt.check()?;
        self.emit_headers(buf, ib_len)?;
        pkt.emit(&mut buf[hl..total])?;
        let icrc = icrc::icrc_datagram(&buf[..hl], &buf[hl..total - ICRC_LEN]);
        buf[total - ICRC_LEN..total].copy_from_slice(&icrc.to_le_bytes());
        Ok(total)
    }

    /// IP header `ip` and a UDP header from `src_port` to `dst_port`
    /// with checksum 0 (RoCE v2 senders may leave it 0; the ICRC covers
    /// the payload).
    pub const fn new(ip: IpRepr, src_port: u16, dst_port: u16) -> DatagramRepr {
        DatagramRepr {
            ip,
            udp: UdpRepr {
                src_port,
                dst_port,
                checksum: 0,
            },
        }
    }

    /// The datagram a RoCE v2 peer at UDP endpoint `src` sends to `dst`
    /// (traffic class 0, the UDP checksum left 0 as RoCE v2 allows).
    /// Fails when the two addresses are of different families.
    pub fn between(src: core::net::SocketAddr, dst: core::net::SocketAddr) -> Result<DatagramRepr> {
        Ok(DatagramRepr::new(
            IpRepr::between(src.ip(), dst.ip(), 0)?,
            src.port(),
            dst.port(),
        ))
    }

    /// The UDP payload that carries `pkt` in this datagram: `pkt` with its
    /// pad count set for its payload, then its ICRC over these headers —
    /// a packet as a peer would send it (tests and tools forge with it).
    pub fn udp_payload(&self, pkt: &PacketRepr<'_>) -> Result<std::vec::Vec<u8>> {
        let mut p = *pkt;
        p.bth.pad_count = PacketRepr::pad_for(p.payload.len());
        let mut buf = std::vec![0u8; p.buffer_len()];
        let n = p.emit(&mut buf)?;
        buf.truncate(n);
        let icrc = self.icrc(&buf[..n - ICRC_LEN]);
        buf[n - ICRC_LEN..].copy_from_slice(&icrc.to_le_bytes());
        Ok(buf)
    }

    /// Parses the headers of a checked datagram.
    pub fn parse<T: AsRef<[u8]>>(d: &RoceDatagram<T>) -> DatagramRepr {
        let b = d.buffer.as_ref();
        let ip = if d.is_v6 {
            let first = be::u32(b, 0);
            let mut s = [0u8; 16];
            let mut t = [0u8; 16];
            s.copy_from_slice(&b[v6::SRC..v6::SRC + 16]);
            t.copy_from_slice(&b[v6::DST..v6::DST + 16]);
            IpRepr::V6(Ipv6Repr {
                src: Ipv6Addr::from(s),
                dst: Ipv6Addr::from(t),
                traffic_class: (first >> 20) as u8,
                flow_label: first & 0xfffff,
                hop_limit: b[v6::HOP_LIMIT],
            })
        } else {
            IpRepr::V4(Ipv4Repr {
                src: Ipv4Addr::new(b[12], b[13], b[14], b[15]),
                dst: Ipv4Addr::new(b[16], b[17], b[18], b[19]),
                tos: b[v4::TOS],
                ident: be::u16(b, v4::IDENT),
                dont_frag: be::u16(b, v4::FLAGS) & DF != 0,
                ttl: b[v4::TTL],
            })
        };
        let u = &b[d.ip_len..];
        DatagramRepr {
            ip,
            udp: UdpRepr {
                src_port: be::u16(u, udp::SRC_PORT),
                dst_port: be::u16(u, udp::DST_PORT),
                checksum: be::u16(u, udp::CHECKSUM),
            },
        }
    }
}

/// Starts an ICRC from the raw IP + UDP headers (masks applied here).
fn icrc_begin_from_headers(hdr: &[u8]) -> Icrc {
    let mut c = Icrc::new();
    let ip_len = if hdr.len() == IPV6_HEADER_LEN + UDP_HEADER_LEN {
        let mut a = [0u8; IPV6_HEADER_LEN];
        a.copy_from_slice(&hdr[..IPV6_HEADER_LEN]);
        c.ipv6_header(&a);
        IPV6_HEADER_LEN
    } else {
        let mut a = [0u8; IPV4_HEADER_LEN];
        a.copy_from_slice(&hdr[..IPV4_HEADER_LEN]);
        c.ipv4_header(&a);
        IPV4_HEADER_LEN
    };
    let mut u = [0u8; UDP_HEADER_LEN];
    u.copy_from_slice(&hdr[ip_len..ip_len + UDP_HEADER_LEN]);
    c.udp_header(&u);
    c
}

/// Zero-copy view of a whole RoCE v2 datagram, starting at the IP header.
#[derive(Debug, Clone, Copy)]
pub struct RoceDatagram<T: AsRef<[u8]>> {
    buffer: T,
    is_v6: bool,
    ip_len: usize,
    /// End of the datagram per the IP length field (trailing bytes, such as
    /// Ethernet padding, are ignored).
    end: usize,
}

impl<T: AsRef<[u8]>> RoceDatagram<T> {
    /// Validates IP version, header length, protocol UDP, no fragmentation,
    /// consistent IP and UDP lengths, and a valid transport packet inside.
    /// Does not look at the UDP port: see [`Self::is_roce_port`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.is_empty() {
            return Err(Error::Truncated);
        }
        let (is_v6, ip_len, end) = match b[0] >> 4 {
            4 => {
                if b.len() < IPV4_HEADER_LEN {
                    return Err(Error::Truncated);
                }
                if b[0] & 0x0f != 5 || b[v4::PROTO] != IPPROTO_UDP {
                    return Err(Error::Malformed);
                }
                if be::u16(b, v4::FLAGS) & 0x3fff != 0 {
                    // More-fragments or a fragment offset.
                    return Err(Error::Malformed);
                }
                let total = be::u16(b, v4::LEN) as usize;
                if total < IPV4_HEADER_LEN + UDP_HEADER_LEN {
                    return Err(Error::Malformed);
                }
                if b.len() < total {
                    return Err(Error::Truncated);
                }
                (false, IPV4_HEADER_LEN, total)
            }
            6 => {
                if b.len() < IPV6_HEADER_LEN {
                    return Err(Error::Truncated);
                }
                if b[v6::NEXT_HEADER] != IPPROTO_UDP {
                    return Err(Error::Malformed);
                }
                let total = IPV6_HEADER_LEN + be::u16(b, v6::PAYLOAD_LEN) as usize;
                if b.len() < total {
                    return Err(Error::Truncated);
                }
                if total < IPV6_HEADER_LEN + UDP_HEADER_LEN {
                    return Err(Error::Malformed);
                }
                (true, IPV6_HEADER_LEN, total)
            }
            _ => return Err(Error::Malformed),
        };
        let udp_len = be::u16(b, ip_len + udp::LEN) as usize;
        if udp_len != end - ip_len {
            return Err(Error::Malformed);
        }
        IbPacket::new_checked(&b[ip_len + UDP_HEADER_LEN..end])?;
        Ok(Self {
            buffer,
            is_v6,
            ip_len,
            end,
        })
    }

    /// True for IPv6.
    pub fn is_v6(&self) -> bool {
        self.is_v6
    }

    /// True when the UDP destination port is 4791.
    pub fn is_roce_port(&self) -> bool {
        be::u16(self.buffer.as_ref(), self.ip_len + udp::DST_PORT) == ROCE_V2_PORT
    }

    /// IP + UDP header bytes.
    pub fn headers(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.ip_len + UDP_HEADER_LEN]
    }

    /// The transport packet (BTH through ICRC).
    pub fn ib(&self) -> IbPacket<&[u8]> {
        IbPacket::new_checked(&self.buffer.as_ref()[self.ip_len + UDP_HEADER_LEN..self.end])
            .expect("validated by new_checked")
    }

    /// The whole datagram as the IP length field delimits it.
    pub fn datagram(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.end]
    }

    /// Recomputes the ICRC over the datagram as it is (as softrdma and rxe
    /// send it; for FLUSH rxe's form, see [`crate::icrc`]).
    pub fn compute_icrc(&self) -> u32 {
        icrc::icrc_datagram(self.headers(), self.ib().icrc_covered())
    }

    /// True when the stored ICRC matches (for FLUSH, rxe's form or the
    /// annex's).
    pub fn icrc_ok(&self) -> bool {
        let stored = self.ib().icrc();
        icrc::icrc_forms(self.headers(), self.ib().icrc_covered()).any(|(c, _)| c == stored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_checksum_known_value() {
        // Header from RFC 1071 style example (checksum field zeroed).
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(ipv4_checksum(&h), 0xb861);
    }

    #[test]
    fn rejects_non_roce() {
        assert_eq!(
            RoceDatagram::new_checked(&[][..]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            RoceDatagram::new_checked(&[0x50u8; 60][..]).unwrap_err(),
            Error::Malformed
        );
        let mut tcp = [0u8; 60];
        tcp[0] = 0x45;
        tcp[9] = 6;
        assert_eq!(
            RoceDatagram::new_checked(&tcp[..]).unwrap_err(),
            Error::Malformed
        );
    }

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Frames of two Linux 6.12 rxe instances (Debian 13, `rig.sh capture
    /// placement` with `RIG_SUITE=trixie`): ATOMIC WRITE and its zero-length
    /// READ RESPONSE ONLY, a FLUSH of a range and a FLUSH of the whole MR.
    const RXE_612: [&str; 4] = [
        "45000044642b400040114a56c6120002c6120001c12112b7003000001d00ffff0000001180cdffa3\
         00005573808310400000038b0000000841544f4d494357522bdf9e2d",
        "45000030cb5140004011e343c6120001c6120002c12112b7001c00001000ffff0000001100cdffa3\
         1f0000011974b075",
        "45000040642f400040114a56c6120002c6120001c12112b7002c00001c00ffff0000001180cdffa6\
         0000000100005573808310800000038b000000405a014913",
        "450000406430400040114a55c6120002c6120001c12112b7002c00001c00ffff0000001180cdffa7\
         0000001100000000000000000000038b00000000d758f378",
    ];

    #[test]
    fn rxe_placement_frames_check_and_reemit_byte_for_byte() {
        for (i, h) in RXE_612.iter().enumerate() {
            let b = unhex(h);
            let d = RoceDatagram::new_checked(&b[..]).unwrap();
            assert!(d.icrc_ok(), "frame {i}");
            assert_eq!(d.compute_icrc(), d.ib().icrc(), "frame {i}");
            let repr = DatagramRepr::parse(&d);
            let ib = d.ib();
            let pkt = PacketRepr::parse(&ib).unwrap();
            let mut out = vec![0u8; b.len()];
            assert_eq!(repr.emit(&pkt, &mut out).unwrap(), b.len());
            assert_eq!(out, b, "frame {i}");
        }
    }

    #[test]
    fn flush_icrc_is_rxes_and_the_annexes_is_accepted() {
        let b = unhex(RXE_612[2]);
        let d = RoceDatagram::new_checked(&b[..]).unwrap();
        let repr = DatagramRepr::parse(&d);
        let ib = d.ib();
        let covered = ib.icrc_covered();
        assert!(icrc::rxe_covers_headers_twice(covered));
        // rxe's form: the annex's input followed by BTH..RETH again.
        let stored = ib.icrc();
        assert_eq!(repr.icrc(covered), stored);
        let iba = repr.icrc_iba(covered);
        assert_ne!(iba, stored);
        let forms: Vec<_> = repr.icrc_forms(covered).collect();
        assert_eq!(forms, vec![(stored, 14 + 8 + 2 * 32), (iba, 14 + 8 + 32)]);
        // A FLUSH carrying the annex's ICRC checks as well.
        let mut c = b.clone();
        let n = c.len();
        c[n - 4..].copy_from_slice(&iba.to_le_bytes());
        assert!(RoceDatagram::new_checked(&c[..]).unwrap().icrc_ok());
        // Every other opcode has one form, the annex's.
        let a = unhex(RXE_612[0]);
        let d = RoceDatagram::new_checked(&a[..]).unwrap();
        let ib = d.ib();
        let covered = ib.icrc_covered();
        let repr = DatagramRepr::parse(&d);
        assert_eq!(repr.icrc_forms(covered).count(), 1);
        assert_eq!(repr.icrc_iba(covered), repr.icrc(covered));
    }

    #[test]
    fn identification_solves_for_either_flush_form() {
        let b = unhex(RXE_612[2]);
        let d = RoceDatagram::new_checked(&b[..]).unwrap();
        let mut repr = DatagramRepr::parse(&d);
        let ib = d.ib();
        let covered = ib.icrc_covered();
        let IpRepr::V4(v) = &mut repr.ip else {
            panic!()
        };
        let ident = v.ident;
        v.ident = 0;
        let solved: Vec<_> = repr
            .icrc_forms(covered)
            .filter_map(|(base, after)| icrc::solve_ipv4_id(base, ib.icrc(), after))
            .collect();
        assert_eq!(solved.first(), Some(&ident));
    }
}
