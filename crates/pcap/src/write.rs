//! Writing capture files: classic pcap ([`PcapWriter`], what softrdma's
//! engine writes for `SOFTRDMA_PCAP`) and pcapng ([`NgWriter`], for tests
//! that need several interfaces, timestamp resolutions and block kinds).
//!
//! Both write through any [`Write`]; neither buffers (wrap a file in a
//! `BufWriter`) and neither checks what it is given beyond what the format
//! cannot hold: they also write the odd files the reader's tests need.

use crate::{
    NG_BYTE_ORDER_MAGIC, NG_EPB, NG_IDB, NG_OPB, NG_OPT_END, NG_OPT_IF_TSOFFSET, NG_OPT_IF_TSRESOL,
    NG_SHB, NG_SPB, PCAP_MAGIC_NS, PCAP_MAGIC_US,
};
use std::io::{self, Write};
use std::time::Duration;

/// pcapng option code of `if_name`.
const NG_OPT_IF_NAME: u16 = 2;
/// pcapng option code of `epb_flags`.
const NG_OPT_EPB_FLAGS: u16 = 2;

/// Integers in the file's byte order.
#[derive(Clone, Copy, Debug)]
struct Order {
    big_endian: bool,
}

impl Order {
    fn u16(self, v: u16) -> [u8; 2] {
        if self.big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }

    fn u32(self, v: u32) -> [u8; 4] {
        if self.big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }

    fn i64(self, v: i64) -> [u8; 8] {
        if self.big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }
}

/// The file header of a classic pcap file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcapHeader {
    /// Write big-endian (else little-endian).
    pub big_endian: bool,
    /// Nanosecond timestamps (magic `a1b23c4d`), else microseconds.
    pub nanosecond: bool,
    /// Snapshot length.
    pub snaplen: u32,
    /// Link type of every record ([`crate::linktype`]).
    pub linktype: u32,
}

impl PcapHeader {
    /// Little-endian, nanosecond timestamps, snapshot length 65535.
    pub fn new(linktype: u32) -> PcapHeader {
        PcapHeader {
            big_endian: false,
            nanosecond: true,
            snaplen: 65_535,
            linktype,
        }
    }
}

/// A classic pcap file being written.
#[derive(Debug)]
pub struct PcapWriter<W> {
    out: W,
    header: PcapHeader,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header.
    pub fn new(mut out: W, header: PcapHeader) -> io::Result<PcapWriter<W>> {
        let o = Order {
            big_endian: header.big_endian,
        };
        let magic = if header.nanosecond {
            PCAP_MAGIC_NS
        } else {
            PCAP_MAGIC_US
        };
        let mut h = [0u8; crate::PCAP_HEADER_LEN];
        h[0..4].copy_from_slice(&o.u32(magic));
        h[4..6].copy_from_slice(&o.u16(2));
        h[6..8].copy_from_slice(&o.u16(4));
        // 8..16: time zone and accuracy, zero.
        h[16..20].copy_from_slice(&o.u32(header.snaplen));
        h[20..24].copy_from_slice(&o.u32(header.linktype));
        out.write_all(&h)?;
        Ok(PcapWriter { out, header })
    }

    /// Writes one record: seconds, the fraction in the file's unit
    /// (µs or ns), the captured bytes and the length on the wire.
    pub fn record(&mut self, sec: u32, frac: u32, data: &[u8], orig_len: u32) -> io::Result<()> {
        let o = Order {
            big_endian: self.header.big_endian,
        };
        let mut h = [0u8; crate::PCAP_RECORD_HEADER_LEN];
        h[0..4].copy_from_slice(&o.u32(sec));
        h[4..8].copy_from_slice(&o.u32(frac));
        h[8..12].copy_from_slice(&o.u32(data.len() as u32));
        h[12..16].copy_from_slice(&o.u32(orig_len));
        self.out.write_all(&h)?;
        self.out.write_all(data)
    }

    /// Writes a whole packet captured `since_epoch` after the Unix epoch.
    pub fn packet(&mut self, since_epoch: Duration, data: &[u8]) -> io::Result<()> {
        let frac = if self.header.nanosecond {
            since_epoch.subsec_nanos()
        } else {
            since_epoch.subsec_micros()
        };
        self.record(since_epoch.as_secs() as u32, frac, data, data.len() as u32)
    }

    /// The file header it wrote.
    pub fn header(&self) -> PcapHeader {
        self.header
    }

    /// The output.
    pub fn get_ref(&self) -> &W {
        &self.out
    }

    /// The output, for flushing.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// Gives the output back.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Options of an Interface Description Block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdbOptions<'a> {
    /// `if_name`.
    pub name: Option<&'a str>,
    /// `if_tsresol` (bit 7 clear: 10^-n s; set: 2^-n s; absent: µs).
    pub tsresol: Option<u8>,
    /// `if_tsoffset`: seconds added to every timestamp.
    pub tsoffset: Option<i64>,
}

/// A pcapng file being written.
#[derive(Debug)]
pub struct NgWriter<W> {
    out: W,
    order: Order,
}

impl<W: Write> NgWriter<W> {
    /// Writes the first Section Header Block.
    pub fn new(out: W, big_endian: bool) -> io::Result<NgWriter<W>> {
        let mut w = NgWriter {
            out,
            order: Order { big_endian },
        };
        w.section(big_endian)?;
        Ok(w)
    }

    /// Writes a block: type, length, `body` padded to 32 bits, length.
    pub fn block(&mut self, block_type: u32, body: &[u8]) -> io::Result<()> {
        let pad = body.len().next_multiple_of(4) - body.len();
        let len = self.order.u32((12 + body.len() + pad) as u32);
        self.out.write_all(&self.order.u32(block_type))?;
        self.out.write_all(&len)?;
        self.out.write_all(body)?;
        self.out.write_all(&[0; 3][..pad])?;
        self.out.write_all(&len)
    }

    /// Starts a new section (its interfaces start over), possibly in the
    /// other byte order.
    pub fn section(&mut self, big_endian: bool) -> io::Result<()> {
        self.order = Order { big_endian };
        let o = self.order;
        let mut body = o.u32(NG_BYTE_ORDER_MAGIC).to_vec();
        body.extend_from_slice(&o.u16(1));
        body.extend_from_slice(&o.u16(0));
        body.extend_from_slice(&[0xff; 8]); // section length unknown
        self.block(NG_SHB, &body)
    }

    /// Describes the next interface of the section (numbered from 0).
    pub fn interface(&mut self, linktype: u16, snaplen: u32, opts: &IdbOptions) -> io::Result<()> {
        let o = self.order;
        let mut body = o.u16(linktype).to_vec();
        body.extend_from_slice(&[0, 0]);
        body.extend_from_slice(&o.u32(snaplen));
        if let Some(name) = opts.name {
            option(&mut body, o, NG_OPT_IF_NAME, name.as_bytes());
        }
        if let Some(r) = opts.tsresol {
            option(&mut body, o, NG_OPT_IF_TSRESOL, &[r]);
        }
        if let Some(off) = opts.tsoffset {
            option(&mut body, o, NG_OPT_IF_TSOFFSET, &o.i64(off));
        }
        option(&mut body, o, NG_OPT_END, &[]);
        self.block(NG_IDB, &body)
    }

    /// An Enhanced Packet Block: interface, time in the interface's units,
    /// the captured bytes, the length on the wire, and an optional
    /// `epb_flags` option.
    pub fn enhanced(
        &mut self,
        interface: u32,
        time: u64,
        data: &[u8],
        orig_len: u32,
        flags: Option<u32>,
    ) -> io::Result<()> {
        let o = self.order;
        let mut body = o.u32(interface).to_vec();
        body.extend_from_slice(&o.u32((time >> 32) as u32));
        body.extend_from_slice(&o.u32(time as u32));
        body.extend_from_slice(&o.u32(data.len() as u32));
        body.extend_from_slice(&o.u32(orig_len));
        body.extend_from_slice(data);
        if let Some(f) = flags {
            body.resize(body.len().next_multiple_of(4), 0);
            option(&mut body, o, NG_OPT_EPB_FLAGS, &o.u32(f));
            option(&mut body, o, NG_OPT_END, &[]);
        }
        self.block(NG_EPB, &body)
    }

    /// A Simple Packet Block (interface 0, no time).
    pub fn simple(&mut self, data: &[u8], orig_len: u32) -> io::Result<()> {
        let mut body = self.order.u32(orig_len).to_vec();
        body.extend_from_slice(data);
        self.block(NG_SPB, &body)
    }

    /// An obsolete Packet Block (16-bit interface, drop count 0).
    pub fn obsolete_packet(&mut self, interface: u16, time: u64, data: &[u8]) -> io::Result<()> {
        let o = self.order;
        let mut body = o.u16(interface).to_vec();
        body.extend_from_slice(&o.u16(0));
        body.extend_from_slice(&o.u32((time >> 32) as u32));
        body.extend_from_slice(&o.u32(time as u32));
        body.extend_from_slice(&o.u32(data.len() as u32));
        body.extend_from_slice(&o.u32(data.len() as u32));
        body.extend_from_slice(data);
        self.block(NG_OPB, &body)
    }

    /// The output.
    pub fn get_ref(&self) -> &W {
        &self.out
    }

    /// Gives the output back.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Appends an option (code, length, value padded to 32 bits).
fn option(body: &mut Vec<u8>, o: Order, code: u16, value: &[u8]) {
    body.extend_from_slice(&o.u16(code));
    body.extend_from_slice(&o.u16(value.len() as u16));
    body.extend_from_slice(value);
    body.resize(body.len().next_multiple_of(4), 0);
}

/// Permission bits of a capture file: its owner's only. A capture holds
/// payloads, memory keys and PSNs — what an injector needs.
pub const PRIVATE_MODE: u32 = 0o600;

/// Creates (or truncates) `path` for writing a capture readable and
/// writable by its owner only ([`PRIVATE_MODE`]). A new file is created
/// with that mode; an existing one is truncated and its mode narrowed to
/// it, and if that is not allowed (the file is someone else's) nothing is
/// written and the error says why.
#[cfg(unix)]
pub fn create_private(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(PRIVATE_MODE)
        .open(path)?;
    let meta = file.metadata()?;
    if meta.permissions().mode() & 0o777 != PRIVATE_MODE {
        file.set_permissions(std::fs::Permissions::from_mode(PRIVATE_MODE))
            .map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "{}: cannot make the capture private (mode {:o}): {e}",
                        path.display(),
                        PRIVATE_MODE
                    ),
                )
            })?;
    }
    Ok(file)
}
