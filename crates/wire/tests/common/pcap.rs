// A minimal classic-pcap reader for the rig's captures in tests/data, and
// the extraction of the MADs that travel to QP 1. Shared by the wire
// crate's CM golden tests and the softrdma-cm replay tests (included by
// path), so both read the captures the same way.

use softrdma_wire::{IpRepr, Opcode, Qpn, RoceDatagram};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// `tests/data` of the workspace.
pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data")
}

/// The records of a classic pcap file (either byte order).
pub fn pcap_records(file: &[u8]) -> Vec<&[u8]> {
    let le = match &file[..4] {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        m => panic!("not a classic pcap: magic {m:02x?}"),
    };
    let u32_at = |at: usize| {
        let b: [u8; 4] = file[at..at + 4].try_into().unwrap();
        if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    };
    assert_eq!(u32_at(20) & 0x0fff_ffff, 1, "Ethernet captures only");
    let mut at = 24;
    let mut out = Vec::new();
    while at < file.len() {
        let incl = u32_at(at + 8) as usize;
        out.push(&file[at + 16..at + 16 + incl]);
        at += 16 + incl;
    }
    out
}

/// One MAD sent to QP 1 in a capture.
#[allow(dead_code)]
pub struct CapturedMad {
    /// Frame number (1-based, as Wireshark counts).
    pub frame: usize,
    /// IP source.
    pub src: IpAddr,
    /// IP destination.
    pub dst: IpAddr,
    /// Source QP from the DETH.
    pub src_qp: Qpn,
    /// Q_Key from the DETH.
    pub qkey: u32,
    /// The UD payload: the MAD.
    pub mad: Vec<u8>,
}

/// Every UD SEND_ONLY to QP 1 in the capture file `name`.
pub fn qp1_mads(name: &str) -> Vec<CapturedMad> {
    let file = std::fs::read(data_dir().join(name)).expect("capture");
    let mut out = Vec::new();
    for (i, frame) in pcap_records(&file).into_iter().enumerate() {
        let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
        if ethertype != 0x0800 && ethertype != 0x86dd {
            continue;
        }
        let Ok(d) = RoceDatagram::new_checked(&frame[14..]) else {
            continue;
        };
        if !d.is_roce_port() {
            continue;
        }
        let (src, dst) = match softrdma_wire::DatagramRepr::parse(&d).ip {
            IpRepr::V4(ip) => (IpAddr::V4(ip.src), IpAddr::V4(ip.dst)),
            IpRepr::V6(ip) => (IpAddr::V6(ip.src), IpAddr::V6(ip.dst)),
        };
        let ib = d.ib();
        if ib.bth().opcode() != Opcode(0x64) || ib.bth().dest_qp() != Qpn::GSI {
            continue;
        }
        let deth = ib.deth().expect("UD has a DETH");
        out.push(CapturedMad {
            frame: i + 1,
            src,
            dst,
            src_qp: deth.src_qp(),
            qkey: deth.qkey().0,
            mad: ib.payload().to_vec(),
        });
    }
    out
}
