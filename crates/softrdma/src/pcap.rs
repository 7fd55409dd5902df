//! Packet capture of everything a device sends and receives.
//!
//! `SOFTRDMA_PCAP=FILE` (or [`DeviceOptions::pcap`](crate::DeviceOptions))
//! writes a classic pcap file, nanosecond timestamps, link type RAW (101:
//! each record is an IP datagram). A UDP socket never sees the IP and UDP
//! headers, so they are rebuilt as they were on the wire: addresses, ports,
//! traffic class and hop limit from the socket, IPv4 identification 0 with
//! DF for what we send (what Linux puts there), and for what we receive the
//! identification that makes the ICRC check (solved from the ICRC, see
//! `softrdma_wire::icrc::solve_ipv4_id`). Every record therefore decodes in
//! Wireshark (`tshark -d udp.port==4791,infiniband`) and `softrdma dump`
//! with a valid ICRC.

use softrdma_wire::icrc::solve_ipv4_id;
use softrdma_wire::ip::{DatagramRepr, IpRepr, UdpRepr};
use softrdma_wire::IbPacket;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// pcap magic for nanosecond timestamps.
const MAGIC_NS: u32 = 0xa1b2_3c4d;
/// LINKTYPE_RAW: raw IPv4/IPv6.
const LINKTYPE_RAW: u32 = 101;

/// A pcap file being written.
pub struct PcapWriter {
    out: BufWriter<File>,
    buf: Vec<u8>,
    records: u64,
}

/// One datagram to record.
pub struct Record<'a> {
    /// Source address and port.
    pub src: SocketAddr,
    /// Destination address and port.
    pub dst: SocketAddr,
    /// Traffic class / TOS.
    pub traffic_class: u8,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// The UDP payload (BTH through ICRC).
    pub payload: &'a [u8],
    /// True for a received datagram (its IPv4 identification is solved).
    pub received: bool,
}

impl PcapWriter {
    /// Creates (truncates) `path` and writes the file header.
    pub fn create(path: &Path) -> io::Result<PcapWriter> {
        let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&MAGIC_NS.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&65_535u32.to_le_bytes());
        h.extend_from_slice(&LINKTYPE_RAW.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter {
            out,
            buf: Vec::with_capacity(9000),
            records: 0,
        })
    }

    /// Records one datagram now.
    pub fn write(&mut self, r: &Record<'_>) -> io::Result<()> {
        let Ok(mut ip) = IpRepr::between(r.src.ip(), r.dst.ip(), r.traffic_class) else {
            return Ok(());
        };
        match &mut ip {
            IpRepr::V4(v) => v.ttl = r.hop_limit,
            IpRepr::V6(v) => v.hop_limit = r.hop_limit,
        }
        let mut d = DatagramRepr {
            ip,
            udp: UdpRepr {
                src_port: r.src.port(),
                dst_port: r.dst.port(),
                checksum: 0,
            },
        };
        if r.received {
            fix_ipv4_ident(&mut d, r.payload);
        }
        let hl = d.header_len();
        self.buf.clear();
        self.buf.resize(hl, 0);
        if d.emit_headers(&mut self.buf, r.payload.len()).is_err() {
            return Ok(());
        }
        self.buf.extend_from_slice(r.payload);
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let n = self.buf.len() as u32;
        let mut rec = [0u8; 16];
        rec[0..4].copy_from_slice(&(ts.as_secs() as u32).to_le_bytes());
        rec[4..8].copy_from_slice(&ts.subsec_nanos().to_le_bytes());
        rec[8..12].copy_from_slice(&n.to_le_bytes());
        rec[12..16].copy_from_slice(&n.to_le_bytes());
        self.out.write_all(&rec)?;
        self.out.write_all(&self.buf)?;
        self.records += 1;
        Ok(())
    }

    /// Records written.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Pushes buffered records to the file.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

impl Drop for PcapWriter {
    fn drop(&mut self) {
        let _ = self.out.flush();
    }
}

/// Sets the IPv4 identification (and DF) that makes the packet's ICRC check,
/// when identification 0 with DF does not.
fn fix_ipv4_ident(d: &mut DatagramRepr, payload: &[u8]) {
    let Ok(pkt) = IbPacket::new_checked(payload) else {
        return;
    };
    let covered = pkt.icrc_covered();
    let stored = pkt.icrc();
    if d.icrc(covered) == stored {
        return;
    }
    for df in [true, false] {
        if let IpRepr::V4(v) = &mut d.ip {
            v.ident = 0;
            v.dont_frag = df;
        } else {
            return;
        }
        let base = d.icrc(covered);
        if let Some(id) = solve_ipv4_id(base, stored, 14 + 8 + covered.len()) {
            if let IpRepr::V4(v) = &mut d.ip {
                v.ident = id;
            }
            return;
        }
    }
    if let IpRepr::V4(v) = &mut d.ip {
        v.ident = 0;
        v.dont_frag = true;
    }
}
