//! Sorting IP traffic for `softrdma dump`: RoCE v2 (UDP destination port
//! 4791), or a named kind for the summary. The link layer before it is
//! [`softrdma_pcap::link`]'s.

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// What an IP datagram carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// UDP to port 4791: a RoCE v2 packet (to be parsed by the wire crate).
    RoceV2,
    /// Something else, by name (`ipv4/tcp`, `ipv6/icmpv6`, `ipv4/udp`...).
    Other(IpKind),
}

/// Non-RoCE IP traffic kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IpKind {
    /// 4 or 6 (0: too short to tell).
    pub version: u8,
    /// IP protocol / next header (256: unknown, e.g. a truncated header).
    pub protocol: u16,
    /// A non-first IPv4 fragment (its UDP header is elsewhere).
    pub fragment: bool,
}

impl core::fmt::Display for IpKind {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let v = match self.version {
            4 => "ipv4",
            6 => "ipv6",
            _ => "ip",
        };
        let p = match (self.version, self.protocol) {
            (_, 6) => "tcp".to_string(),
            (_, 17) => "udp".to_string(),
            (4, 1) => "icmp".to_string(),
            (6, 58) => "icmpv6".to_string(),
            (_, 2) => "igmp".to_string(),
            (_, 256) => "truncated".to_string(),
            (_, p) => format!("proto {p}"),
        };
        if self.fragment {
            write!(f, "{v}/{p} fragment")
        } else {
            write!(f, "{v}/{p}")
        }
    }
}

/// Sorts an IP datagram: RoCE v2 (UDP destination port 4791) or not.
/// Checks only what it needs to read; the wire crate validates the rest.
pub fn transport(ip: &[u8]) -> Transport {
    let other = |version, protocol, fragment| {
        Transport::Other(IpKind {
            version,
            protocol,
            fragment,
        })
    };
    match ip.first().map(|b| b >> 4) {
        Some(4) => {
            let Some(&proto) = ip.get(9) else {
                return other(4, 256, false);
            };
            let frag_off = be16(ip, 6).unwrap_or(0) & 0x1fff;
            if frag_off != 0 {
                return other(4, proto as u16, true);
            }
            let ihl = (ip[0] & 0x0f) as usize * 4;
            if proto == 17 && be16(ip, ihl + 2) == Some(softrdma_wire::ROCE_V2_PORT) {
                Transport::RoceV2
            } else {
                other(4, proto as u16, false)
            }
        }
        Some(6) => {
            let Some(&next) = ip.get(6) else {
                return other(6, 256, false);
            };
            if next == 17 && be16(ip, 42) == Some(softrdma_wire::ROCE_V2_PORT) {
                Transport::RoceV2
            } else {
                other(6, next as u16, false)
            }
        }
        _ => other(0, 256, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_ip_traffic() {
        let mut v4 = vec![0u8; 28];
        v4[0] = 0x45;
        v4[9] = 17;
        v4[22..24].copy_from_slice(&4791u16.to_be_bytes());
        assert_eq!(transport(&v4), Transport::RoceV2);
        v4[22..24].copy_from_slice(&53u16.to_be_bytes());
        assert_eq!(transport(&v4).to_string_kind(), "ipv4/udp");
        v4[9] = 6;
        assert_eq!(transport(&v4).to_string_kind(), "ipv4/tcp");
        v4[7] = 1; // fragment offset
        assert_eq!(transport(&v4).to_string_kind(), "ipv4/tcp fragment");
        let mut v6 = vec![0u8; 48];
        v6[0] = 0x60;
        v6[6] = 17;
        v6[42..44].copy_from_slice(&4791u16.to_be_bytes());
        assert_eq!(transport(&v6), Transport::RoceV2);
        v6[6] = 58;
        assert_eq!(transport(&v6).to_string_kind(), "ipv6/icmpv6");
        assert_eq!(transport(&[0x45]).to_string_kind(), "ipv4/truncated");
        assert_eq!(transport(&[]).to_string_kind(), "ip/truncated");
    }

    impl Transport {
        fn to_string_kind(self) -> String {
            match self {
                Transport::RoceV2 => "roce".into(),
                Transport::Other(k) => k.to_string(),
            }
        }
    }
}
