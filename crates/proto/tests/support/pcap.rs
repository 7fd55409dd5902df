//! The RoCE v2 datagrams of the rig's captures (`tests/data/*.pcap`): a
//! minimal classic-pcap reader (Ethernet link type, µs or ns timestamps,
//! either byte order). The CLI has the robust pcap/pcapng reader; this one
//! only has to read the rig's files, and fails loudly on anything else.
#![allow(dead_code)]

use softrdma_wire::ip::IpRepr;
use softrdma_wire::{DatagramRepr, RoceDatagram};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// One captured RoCE v2 datagram.
#[derive(Clone, Debug)]
pub struct Frame {
    /// Index of the frame in the file (0-based, all frames counted).
    pub index: usize,
    /// Capture time in nanoseconds since the epoch.
    pub ts_ns: u64,
    /// Source address and UDP port.
    pub src: IpAddr,
    pub sport: u16,
    /// Destination address and UDP port.
    pub dst: IpAddr,
    pub dport: u16,
    /// IPv4 TOS or IPv6 traffic class.
    pub tclass: u8,
    /// TTL or hop limit.
    pub hop: u8,
    /// IPv4 identification (None for IPv6).
    pub ip_id: Option<u16>,
    /// The IP header as captured (20 or 40 bytes).
    pub ip_header: Vec<u8>,
    /// The UDP payload: BTH through ICRC.
    pub payload: Vec<u8>,
}

/// `tests/data` of the repository.
pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data")
}

/// Records of a classic pcap file: (timestamp ns, link-layer bytes).
pub fn records(file: &[u8]) -> Vec<(u64, &[u8])> {
    let magic = &file[..4];
    let (le, nanos) = match magic {
        [0xd4, 0xc3, 0xb2, 0xa1] => (true, false),
        [0x4d, 0x3c, 0xb2, 0xa1] => (true, true),
        [0xa1, 0xb2, 0xc3, 0xd4] => (false, false),
        [0xa1, 0xb2, 0x3c, 0x4d] => (false, true),
        _ => panic!("not a classic pcap: magic {magic:02x?}"),
    };
    let u32_at = |at: usize| -> u32 {
        let b: [u8; 4] = file[at..at + 4].try_into().unwrap();
        if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    };
    assert_eq!(u32_at(20) & 0x0fff_ffff, 1, "Ethernet link type");
    let mut at = 24;
    let mut out = Vec::new();
    while at < file.len() {
        let (sec, frac, incl) = (u32_at(at), u32_at(at + 4), u32_at(at + 8) as usize);
        let ns = sec as u64 * 1_000_000_000
            + if nanos {
                frac as u64
            } else {
                frac as u64 * 1000
            };
        out.push((ns, &file[at + 16..at + 16 + incl]));
        at += 16 + incl;
    }
    out
}

/// Every RoCE v2 datagram (UDP destination port 4791) of a capture in
/// `tests/data`, in capture order.
pub fn roce_frames(name: &str) -> Vec<Frame> {
    let path = data_dir().join(name);
    let file = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    for (index, (ts_ns, frame)) in records(&file).into_iter().enumerate() {
        if frame.len() < 14 || !matches!(frame[12..14], [0x08, 0x00] | [0x86, 0xdd]) {
            continue;
        }
        let Ok(d) = RoceDatagram::new_checked(&frame[14..]) else {
            continue;
        };
        if !d.is_roce_port() {
            continue;
        }
        let repr = DatagramRepr::parse(&d);
        let (tclass, hop, ip_id, hlen) = match repr.ip {
            IpRepr::V4(v4) => (v4.tos, v4.ttl, Some(v4.ident), 20),
            IpRepr::V6(v6) => (v6.traffic_class, v6.hop_limit, None, 40),
        };
        out.push(Frame {
            index,
            ts_ns,
            src: repr.ip.src(),
            sport: repr.udp.src_port,
            dst: repr.ip.dst(),
            dport: repr.udp.dst_port,
            tclass,
            hop,
            ip_id,
            ip_header: d.datagram()[..hlen].to_vec(),
            payload: d.ib().into_inner().to_vec(),
        });
    }
    out
}
