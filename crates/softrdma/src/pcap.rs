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
//! with a valid ICRC. The file is its owner's only (mode 0600), whatever
//! the umask and whether it existed before.
//!
//! Every device of a process that captures to one path writes one file
//! ([`open_shared`]): with `SOFTRDMA_PCAP` set, a program with two devices
//! (`softrdma perf --loopback`, a config file with two devices) gets one
//! valid file holding both devices' packets. Records reach the file after
//! every batch the engine sends or receives, so a program that exits
//! without closing its device still leaves a complete capture.

use crate::sync::Mutex;
use softrdma_pcap::{linktype, PcapHeader};
use softrdma_wire::icrc::solve_ipv4_id;
use softrdma_wire::ip::{DatagramRepr, IpRepr};
use softrdma_wire::IbPacket;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

/// A pcap file being written (the format is `softrdma_pcap`'s).
pub struct PcapWriter {
    out: softrdma_pcap::PcapWriter<BufWriter<File>>,
    buf: Vec<u8>,
    records: u64,
}

/// A capture file shared by every device of the process that writes to
/// the same path.
pub type SharedWriter = Arc<Mutex<PcapWriter>>;

/// The capture files open in this process, by absolute path. A std lock,
/// held across `fork` (see `crate::fork`).
static OPEN: std::sync::Mutex<Vec<(PathBuf, Weak<Mutex<PcapWriter>>)>> =
    std::sync::Mutex::new(Vec::new());

type OpenList = Vec<(PathBuf, Weak<Mutex<PcapWriter>>)>;

/// The list of open capture files, locked.
pub(crate) fn open_list() -> std::sync::MutexGuard<'static, OpenList> {
    OPEN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Opens `path` for a device: the writer another device of this process
/// already has on that file, or a new file (created, truncated). Two
/// devices thus write one valid file with both their packets, instead of
/// truncating and overwriting each other's.
pub fn open_shared(path: &Path) -> io::Result<SharedWriter> {
    let key = absolute(path);
    let mut open = open_list();
    open.retain(|(_, w)| w.strong_count() > 0);
    if let Some(w) = open
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, w)| w.upgrade())
    {
        return Ok(w);
    }
    let w = Arc::new(Mutex::new(PcapWriter::create(path)?));
    open.push((key, Arc::downgrade(&w)));
    Ok(w)
}

/// `path` with its directory resolved, so that two spellings of one file
/// meet (the file itself may not exist yet).
fn absolute(path: &Path) -> PathBuf {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match (std::fs::canonicalize(dir), path.file_name()) {
        (Ok(d), Some(name)) => d.join(name),
        _ => path.to_path_buf(),
    }
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
    /// Creates (truncates) `path`, readable by its owner only (mode 0600:
    /// a capture holds payloads, memory keys and PSNs), and writes the
    /// file header: nanosecond timestamps, little-endian, link type RAW.
    pub fn create(path: &Path) -> io::Result<PcapWriter> {
        let file = BufWriter::with_capacity(1 << 20, softrdma_pcap::create_private(path)?);
        let mut out = softrdma_pcap::PcapWriter::new(file, PcapHeader::new(linktype::RAW))?;
        // The header is in the file before the first packet.
        out.get_mut().flush()?;
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
        let mut d = DatagramRepr::new(ip, r.src.port(), r.dst.port());
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
        // The buffered writer may write to the file: not a cancellation
        // point inside a program's verb (see `softrdma_io::NoCancel`).
        let _nc = softrdma_io::NoCancel::new();
        self.out.packet(ts, &self.buf)?;
        self.records += 1;
        Ok(())
    }

    /// Records written.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Pushes buffered records to the file. The engine calls it after
    /// every batch it sends or receives, so the file is complete even when
    /// the program exits without closing its device.
    pub fn flush(&mut self) -> io::Result<()> {
        let _nc = softrdma_io::NoCancel::new();
        self.out.get_mut().flush()
    }
}

impl Drop for PcapWriter {
    fn drop(&mut self) {
        let _ = self.flush();
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
    if d.icrc_forms(covered).any(|(c, _)| c == stored) {
        return;
    }
    for df in [true, false] {
        if let IpRepr::V4(v) = &mut d.ip {
            v.ident = 0;
            v.dont_frag = df;
        } else {
            return;
        }
        // For FLUSH, rxe's ICRC form or the annex's (softrdma_wire::icrc).
        for (base, after) in d.icrc_forms(covered) {
            if let Some(id) = solve_ipv4_id(base, stored, after) {
                if let IpRepr::V4(v) = &mut d.ip {
                    v.ident = id;
                }
                return;
            }
        }
    }
    if let IpRepr::V4(v) = &mut d.ip {
        v.ident = 0;
        v.dont_frag = true;
    }
}
