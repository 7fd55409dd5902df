//! From a captured frame to its IP datagram: strips the link-layer header of
//! the link types the reader's files carry (Ethernet with 802.1Q / 802.1ad
//! tags, raw IP, Linux cooked v1 and v2, BSD null and loop), and names what
//! is not IP.

use crate::linktype;

/// Ethertypes the decoder looks at.
mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    pub const VLAN: u16 = 0x8100;
    pub const QINQ: u16 = 0x88a8;
    pub const QINQ_OLD: u16 = 0x9100;
    pub const IPV6: u16 = 0x86dd;
}

/// At most this many stacked VLAN tags are stripped.
const MAX_VLAN_TAGS: usize = 8;

/// What a frame carries, as far as the dump cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Network<'a> {
    /// An IPv4 or IPv6 datagram (starting at the IP header; may carry
    /// trailing link-layer padding).
    Ip(&'a [u8]),
    /// Anything else, by kind.
    Other(Skipped),
}

/// Kinds of frames that are not IP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Skipped {
    /// ARP.
    Arp,
    /// Another ethertype (or Linux cooked protocol).
    Ethertype(u16),
    /// IEEE 802.3 frame with a length field (LLC).
    Llc,
    /// A BSD loopback address family other than IPv4/IPv6.
    AddressFamily(u32),
    /// The frame is shorter than its link-layer header.
    TruncatedLink,
    /// Raw IP whose version nibble is neither 4 nor 6.
    NotIp,
    /// A link type the decoder does not know.
    LinkType(u32),
}

impl core::fmt::Display for Skipped {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Skipped::Arp => f.write_str("arp"),
            Skipped::Ethertype(t) => write!(f, "ethertype {t:#06x}"),
            Skipped::Llc => f.write_str("802.3/llc"),
            Skipped::AddressFamily(a) => write!(f, "loopback af {a}"),
            Skipped::TruncatedLink => f.write_str("truncated link header"),
            Skipped::NotIp => f.write_str("raw non-ip"),
            Skipped::LinkType(l) => write!(f, "link type {l}"),
        }
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Decodes the link-layer header of `data` for `linktype`.
pub fn network(linktype: u32, data: &[u8]) -> Network<'_> {
    match linktype {
        linktype::ETHERNET => match be16(data, 12) {
            Some(t) => by_ethertype(t, &data[14..]),
            None => Network::Other(Skipped::TruncatedLink),
        },
        linktype::RAW => match data.first().map(|b| b >> 4) {
            Some(4) | Some(6) => Network::Ip(data),
            Some(_) => Network::Other(Skipped::NotIp),
            None => Network::Other(Skipped::TruncatedLink),
        },
        linktype::IPV4 | linktype::IPV6 => Network::Ip(data),
        // Linux cooked v1: packet type, ARPHRD, address length, 8 address
        // bytes, protocol (an ethertype for the link types we see).
        linktype::LINUX_SLL => match be16(data, 14) {
            Some(t) => by_ethertype(t, &data[16..]),
            None => Network::Other(Skipped::TruncatedLink),
        },
        // Cooked v2: protocol, reserved, interface index, ARPHRD, packet
        // type, address length, 8 address bytes.
        linktype::LINUX_SLL2 => match (be16(data, 0), data.get(20..)) {
            (Some(t), Some(rest)) => by_ethertype(t, rest),
            _ => Network::Other(Skipped::TruncatedLink),
        },
        linktype::NULL | linktype::LOOP => {
            let Some(h) = data.get(..4) else {
                return Network::Other(Skipped::TruncatedLink);
            };
            let h = [h[0], h[1], h[2], h[3]];
            // NULL is in the writer's byte order: a family is small, so a
            // value with the low half zero was written the other way round.
            let af = if linktype == linktype::LOOP {
                u32::from_be_bytes(h)
            } else {
                let v = u32::from_le_bytes(h);
                if v & 0xffff == 0 {
                    v.swap_bytes()
                } else {
                    v
                }
            };
            match af {
                // AF_INET everywhere; AF_INET6 on Linux, the BSDs, macOS.
                2 | 10 | 24 | 28 | 30 => Network::Ip(&data[4..]),
                a => Network::Other(Skipped::AddressFamily(a)),
            }
        }
        l => Network::Other(Skipped::LinkType(l)),
    }
}

/// The payload after an ethertype, through any 802.1Q / 802.1ad tags.
fn by_ethertype(mut t: u16, mut rest: &[u8]) -> Network<'_> {
    for _ in 0..=MAX_VLAN_TAGS {
        match t {
            ethertype::IPV4 | ethertype::IPV6 => return Network::Ip(rest),
            ethertype::ARP => return Network::Other(Skipped::Arp),
            ethertype::VLAN | ethertype::QINQ | ethertype::QINQ_OLD => {
                // TCI (2 bytes), then the inner ethertype.
                match be16(rest, 2) {
                    Some(inner) => {
                        t = inner;
                        rest = &rest[4..];
                    }
                    None => return Network::Other(Skipped::TruncatedLink),
                }
            }
            t if t < 0x0600 => return Network::Other(Skipped::Llc),
            t => return Network::Other(Skipped::Ethertype(t)),
        }
    }
    Network::Other(Skipped::Ethertype(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    const IP: [u8; 4] = [0x45, 0, 0, 20];

    #[test]
    fn ethernet_with_and_without_vlan_tags() {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(&IP);
        assert_eq!(network(linktype::ETHERNET, &f), Network::Ip(&IP));
        let mut tagged = vec![0u8; 12];
        tagged.extend_from_slice(&[0x88, 0xa8, 0x00, 0x05, 0x81, 0x00, 0x00, 0x07, 0x86, 0xdd]);
        tagged.extend_from_slice(&[0x60, 1, 2]);
        assert_eq!(
            network(linktype::ETHERNET, &tagged),
            Network::Ip(&[0x60, 1, 2])
        );
        let mut arp = vec![0u8; 12];
        arp.extend_from_slice(&[0x08, 0x06, 0, 1]);
        assert_eq!(
            network(linktype::ETHERNET, &arp),
            Network::Other(Skipped::Arp)
        );
        let mut llc = vec![0u8; 12];
        llc.extend_from_slice(&[0x00, 0x26, 0x42, 0x42]);
        assert_eq!(
            network(linktype::ETHERNET, &llc),
            Network::Other(Skipped::Llc)
        );
        assert_eq!(
            network(linktype::ETHERNET, &[0; 13]),
            Network::Other(Skipped::TruncatedLink)
        );
        // A tag cut short, and a frame of nothing but tags.
        let mut cut = vec![0u8; 12];
        cut.extend_from_slice(&[0x81, 0x00, 0x00]);
        assert_eq!(
            network(linktype::ETHERNET, &cut),
            Network::Other(Skipped::TruncatedLink)
        );
        let mut tags = vec![0u8; 12];
        for _ in 0..20 {
            tags.extend_from_slice(&[0x81, 0x00, 0x00, 0x01]);
        }
        tags.extend_from_slice(&[0x81, 0x00]);
        assert_eq!(
            network(linktype::ETHERNET, &tags),
            Network::Other(Skipped::Ethertype(0x8100))
        );
    }

    #[test]
    fn raw_cooked_and_loopback() {
        assert_eq!(network(linktype::RAW, &IP), Network::Ip(&IP));
        assert_eq!(
            network(linktype::RAW, &[0x20]),
            Network::Other(Skipped::NotIp)
        );
        assert_eq!(network(linktype::IPV4, &IP), Network::Ip(&IP));
        let mut sll = vec![0, 0, 0, 1, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0, 0x08, 0x00];
        sll.extend_from_slice(&IP);
        assert_eq!(network(linktype::LINUX_SLL, &sll), Network::Ip(&IP));
        let mut sll2 = vec![
            0x86, 0xdd, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0,
        ];
        sll2.extend_from_slice(&[0x60]);
        assert_eq!(network(linktype::LINUX_SLL2, &sll2), Network::Ip(&[0x60]));
        assert_eq!(
            network(linktype::LINUX_SLL2, &sll2[..19]),
            Network::Other(Skipped::TruncatedLink)
        );
        // NULL in either byte order; LOOP always big-endian.
        for h in [[2u8, 0, 0, 0], [0, 0, 0, 2], [30, 0, 0, 0], [0, 0, 0, 24]] {
            let mut f = h.to_vec();
            f.extend_from_slice(&IP);
            assert_eq!(network(linktype::NULL, &f), Network::Ip(&IP), "{h:?}");
        }
        assert_eq!(
            network(linktype::NULL, &[7, 0, 0, 0, 1]),
            Network::Other(Skipped::AddressFamily(7))
        );
        assert_eq!(
            network(linktype::LOOP, &[0, 0, 0, 2, 0x45]),
            Network::Ip(&[0x45])
        );
        assert_eq!(network(147, &IP), Network::Other(Skipped::LinkType(147)));
    }
}
