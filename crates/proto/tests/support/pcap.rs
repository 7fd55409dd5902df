//! The RoCE v2 datagrams of the rig's captures (`tests/data/*.pcap`, read
//! by softrdma-pcap; Ethernet only, anything else fails loudly).
#![allow(dead_code)]

use softrdma_pcap::{linktype, CaptureReader};
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

/// Records of an Ethernet capture: (timestamp ns, link-layer bytes).
pub fn records(file: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut r = CaptureReader::from_bytes(file).expect("a capture file");
    assert_eq!(r.linktype(), Some(linktype::ETHERNET), "Ethernet link type");
    let mut out = Vec::new();
    while let Some(f) = r.next_frame().expect("a whole capture") {
        let ts = f.timestamp.expect("a timestamp").nanos as u64;
        out.push((ts, f.data.to_vec()));
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
