//! Reading packet capture files: classic pcap and pcapng.
//!
//! - classic pcap: either byte order, microsecond (`a1b2c3d4`) and nanosecond
//!   (`a1b23c4d`) magic, version 2.x;
//! - pcapng: sections in either byte order (each Section Header Block sets
//!   its own), Interface Description Blocks with `if_tsresol` and
//!   `if_tsoffset`, Enhanced, Simple and (obsolete) Packet Blocks, several
//!   interfaces with their own link types; every other block is skipped.
//!
//! The reader pulls from any [`Read`], one record at a time, into a buffer it
//! reuses. It never trusts a length from the file: a record or block longer
//! than [`MAX_RECORD_LEN`] or than what is left of the file (when its size is
//! known) is an error before anything is allocated, and data is read with
//! `Read::take(..).read_to_end`, so memory grows only with bytes that really
//! arrived. Every error carries the byte offset of the record or field at
//! fault. Nothing here panics on any input.

use crate::{
    NG_BYTE_ORDER_MAGIC, NG_DEFAULT_TSRESOL, NG_EPB, NG_IDB, NG_OPB, NG_OPT_END,
    NG_OPT_IF_TSOFFSET, NG_OPT_IF_TSRESOL, NG_SHB, NG_SPB, PCAP_HEADER_LEN, PCAP_MAGIC_NS,
    PCAP_MAGIC_US, PCAP_RECORD_HEADER_LEN,
};
use std::fmt;
use std::io::{self, Read};

/// The longest record (pcap) or block (pcapng) the reader accepts, 64 MiB.
/// Real captures stay under 256 KiB per packet.
pub const MAX_RECORD_LEN: u64 = 64 << 20;

/// The container format of a capture file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Classic libpcap format.
    Pcap {
        /// The file was written big-endian.
        big_endian: bool,
        /// Timestamps are in nanoseconds (else microseconds).
        nanosecond: bool,
    },
    /// pcapng (byte order may change per section).
    PcapNg,
}

/// A capture timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timestamp {
    /// Nanoseconds since the Unix epoch (may be negative with `if_tsoffset`).
    pub nanos: i128,
    /// Decimal digits of the fraction the file actually records (6 for
    /// microseconds, 9 for nanoseconds or finer).
    pub digits: u8,
}

/// One captured frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// 1-based frame number, as Wireshark counts.
    pub number: u64,
    /// Byte offset of the frame's record or block in the file.
    pub offset: u64,
    /// Interface index (0 for classic pcap).
    pub interface: u32,
    /// Link-layer type of the interface.
    pub linktype: u32,
    /// Capture time (Simple Packet Blocks have none).
    pub timestamp: Option<Timestamp>,
    /// Length of the frame on the wire (may exceed `data.len()` when the
    /// capture was cut by the snapshot length).
    pub orig_len: u32,
    /// The captured bytes, starting at the link-layer header.
    pub data: &'a [u8],
}

/// A pcapng interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interface {
    /// Link-layer type.
    pub linktype: u32,
    /// Snapshot length (0: unlimited).
    pub snaplen: u32,
    /// `if_tsresol`: bit 7 clear, 10^-n s units; set, 2^-n s units.
    pub tsresol: u8,
    /// `if_tsoffset`: seconds added to every timestamp.
    pub tsoffset: i64,
}

/// What went wrong, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// Byte offset in the file of the record, block or field at fault.
    pub offset: u64,
    /// The problem.
    pub kind: ErrorKind,
}

/// The kinds of [`Error`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Reading failed (message of the I/O error).
    Io(String),
    /// The file is empty.
    Empty,
    /// The first four bytes are neither a pcap nor a pcapng magic.
    UnknownMagic([u8; 4]),
    /// The file ends inside a header or record.
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes it needs.
        needed: u64,
        /// Bytes the file still had.
        available: u64,
    },
    /// A length field that cannot be right.
    BadLength {
        /// Which length.
        what: &'static str,
        /// Its value.
        len: u64,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A version or feature this reader does not handle.
    Unsupported(String),
    /// A packet block names an interface no IDB described.
    UnknownInterface(u32),
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Io(e) => write!(f, "read error: {e}"),
            ErrorKind::Empty => f.write_str("empty file"),
            ErrorKind::UnknownMagic(m) => write!(
                f,
                "not a pcap or pcapng file (magic {:02x}{:02x}{:02x}{:02x})",
                m[0], m[1], m[2], m[3]
            ),
            ErrorKind::Truncated {
                what,
                needed,
                available,
            } => write!(
                f,
                "file truncated in {what}: needs {needed} bytes, {available} left"
            ),
            ErrorKind::BadLength { what, len, reason } => {
                write!(f, "bad {what} {len}: {reason}")
            }
            ErrorKind::Unsupported(s) => write!(f, "unsupported: {s}"),
            ErrorKind::UnknownInterface(i) => {
                write!(
                    f,
                    "packet block for interface {i}, which was never described"
                )
            }
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte offset {}: {}", self.offset, self.kind)
    }
}

impl std::error::Error for Error {}

type Result<T> = core::result::Result<T, Error>;

fn u16_at(b: &[u8], at: usize, le: bool) -> Option<u16> {
    let a: [u8; 2] = b.get(at..at.checked_add(2)?)?.try_into().ok()?;
    Some(if le {
        u16::from_le_bytes(a)
    } else {
        u16::from_be_bytes(a)
    })
}

fn u32_at(b: &[u8], at: usize, le: bool) -> Option<u32> {
    let a: [u8; 4] = b.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(if le {
        u32::from_le_bytes(a)
    } else {
        u32::from_be_bytes(a)
    })
}

/// The byte source with its position.
struct Source<R> {
    r: R,
    offset: u64,
    size: Option<u64>,
}

impl<R: Read> Source<R> {
    /// Bytes left in the file, when its size is known.
    fn remaining(&self) -> Option<u64> {
        self.size.map(|s| s.saturating_sub(self.offset))
    }

    /// Fills `out` unless the file ends first; returns the bytes read.
    fn fill(&mut self, out: &mut [u8]) -> Result<usize> {
        let mut got = 0;
        while got < out.len() {
            match self.r.read(&mut out[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io_error(e, got)),
            }
        }
        self.offset += got as u64;
        Ok(got)
    }

    /// Replaces `buf` with the next `n` bytes, or fewer at end of file.
    /// `n` must already be checked against [`MAX_RECORD_LEN`].
    fn read_into(&mut self, buf: &mut Vec<u8>, n: u64) -> Result<u64> {
        buf.clear();
        // take + read_to_end: the buffer grows with the bytes that arrive,
        // never to an untrusted length up front.
        let got = match (&mut self.r).take(n).read_to_end(buf) {
            Ok(g) => g as u64,
            Err(e) => return Err(self.io_error(e, buf.len())),
        };
        self.offset += got;
        Ok(got)
    }

    fn io_error(&self, e: io::Error, got: usize) -> Error {
        Error {
            offset: self.offset + got as u64,
            kind: ErrorKind::Io(e.to_string()),
        }
    }

    /// Refuses a length before reading it: too large, or past the end of a
    /// file of known size. `len_at` is the offset of the length field,
    /// `start` that of the record or block it belongs to.
    fn check_len(&self, start: u64, len_at: u64, what: &'static str, len: u64) -> Result<()> {
        if len > MAX_RECORD_LEN {
            return Err(Error {
                offset: len_at,
                kind: ErrorKind::BadLength {
                    what: "length",
                    len,
                    reason: "larger than the 64 MiB the reader accepts",
                },
            });
        }
        if let Some(rem) = self.remaining() {
            if len > rem {
                let before = self.offset - start;
                return Err(truncated(start, what, before + len, before + rem));
            }
        }
        Ok(())
    }
}

fn truncated(offset: u64, what: &'static str, needed: u64, available: u64) -> Error {
    Error {
        offset,
        kind: ErrorKind::Truncated {
            what,
            needed,
            available,
        },
    }
}

fn bad_len(offset: u64, what: &'static str, len: u64, reason: &'static str) -> Error {
    Error {
        offset,
        kind: ErrorKind::BadLength { what, len, reason },
    }
}

#[derive(Debug)]
enum State {
    Pcap {
        le: bool,
        nanosecond: bool,
        linktype: u32,
    },
    PcapNg {
        le: bool,
        interfaces: Vec<Interface>,
    },
    /// An error was returned; the reader yields nothing more.
    Failed,
}

/// A capture file reader; see the module documentation.
pub struct CaptureReader<R> {
    src: Source<R>,
    state: State,
    format: Format,
    buf: Vec<u8>,
    frames: u64,
}

impl<'a> CaptureReader<&'a [u8]> {
    /// Reads a capture held in memory.
    pub fn from_bytes(bytes: &'a [u8]) -> Result<Self> {
        Self::new(bytes, Some(bytes.len() as u64))
    }
}

impl<R: Read> CaptureReader<R> {
    /// Opens a capture: reads and checks the file header (pcap) or the
    /// first Section Header Block (pcapng). `size` is the file length when
    /// known; it turns impossible lengths into errors before any read.
    pub fn new(reader: R, size: Option<u64>) -> Result<Self> {
        let mut src = Source {
            r: reader,
            offset: 0,
            size,
        };
        let mut magic = [0u8; 4];
        let got = src.fill(&mut magic)?;
        if got == 0 {
            return Err(Error {
                offset: 0,
                kind: ErrorKind::Empty,
            });
        }
        if got < 4 {
            return Err(truncated(0, "file magic", 4, got as u64));
        }
        let le_magic = u32::from_le_bytes(magic);
        let be_magic = u32::from_be_bytes(magic);
        let mut r = CaptureReader {
            src,
            state: State::Failed,
            format: Format::PcapNg,
            buf: Vec::new(),
            frames: 0,
        };
        if le_magic == NG_SHB {
            r.read_shb(0)?;
            return Ok(r);
        }
        let (le, nanosecond) = match (le_magic, be_magic) {
            (PCAP_MAGIC_US, _) => (true, false),
            (PCAP_MAGIC_NS, _) => (true, true),
            (_, PCAP_MAGIC_US) => (false, false),
            (_, PCAP_MAGIC_NS) => (false, true),
            _ => {
                return Err(Error {
                    offset: 0,
                    kind: ErrorKind::UnknownMagic(magic),
                })
            }
        };
        let mut hdr = [0u8; PCAP_HEADER_LEN];
        hdr[..4].copy_from_slice(&magic);
        let got = r.src.fill(&mut hdr[4..])?;
        if got < PCAP_HEADER_LEN - 4 {
            return Err(truncated(
                0,
                "pcap file header",
                PCAP_HEADER_LEN as u64,
                4 + got as u64,
            ));
        }
        let major = u16_at(&hdr, 4, le).unwrap_or(0);
        let minor = u16_at(&hdr, 6, le).unwrap_or(0);
        if major != 2 {
            return Err(Error {
                offset: 4,
                kind: ErrorKind::Unsupported(format!("pcap version {major}.{minor}")),
            });
        }
        // Bits 0-15: the link type; above them FCS information (ignored:
        // the IP length delimits every datagram).
        let linktype = u32_at(&hdr, 20, le).unwrap_or(0) & 0xffff;
        r.state = State::Pcap {
            le,
            nanosecond,
            linktype,
        };
        r.format = Format::Pcap {
            big_endian: !le,
            nanosecond,
        };
        Ok(r)
    }

    /// The container format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Link type of a classic pcap file, or of the first pcapng interface
    /// described so far.
    pub fn linktype(&self) -> Option<u32> {
        match &self.state {
            State::Pcap { linktype, .. } => Some(*linktype),
            State::PcapNg { interfaces, .. } => interfaces.first().map(|i| i.linktype),
            State::Failed => None,
        }
    }

    /// Bytes consumed so far.
    pub fn offset(&self) -> u64 {
        self.src.offset
    }

    /// The next frame; `Ok(None)` at a clean end of file (at a record or
    /// block boundary). After an error it returns `Ok(None)`.
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>> {
        let res = match self.state {
            State::Pcap { .. } => self.next_pcap(),
            State::PcapNg { .. } => self.next_pcapng(),
            State::Failed => return Ok(None),
        };
        match res {
            Ok(Some(f)) => {
                self.frames += 1;
                let data = self.buf.get(f.data.0..f.data.1).unwrap_or(&[]);
                Ok(Some(Frame {
                    number: self.frames,
                    offset: f.offset,
                    interface: f.interface,
                    linktype: f.linktype,
                    timestamp: f.timestamp,
                    orig_len: f.orig_len,
                    data,
                }))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                self.state = State::Failed;
                Err(e)
            }
        }
    }

    fn next_pcap(&mut self) -> Result<Option<RawFrame>> {
        let State::Pcap {
            le,
            nanosecond,
            linktype,
        } = self.state
        else {
            return Ok(None);
        };
        let start = self.src.offset;
        let mut hdr = [0u8; PCAP_RECORD_HEADER_LEN];
        let got = self.src.fill(&mut hdr)?;
        if got == 0 {
            return Ok(None);
        }
        if got < hdr.len() {
            return Err(truncated(
                start,
                "packet record header",
                hdr.len() as u64,
                got as u64,
            ));
        }
        let field = |at| u32_at(&hdr, at, le).unwrap_or(0);
        let (sec, frac, incl, orig) = (field(0), field(4), field(8), field(12));
        self.src
            .check_len(start, start + 8, "packet record", incl as u64)?;
        let got = self.src.read_into(&mut self.buf, incl as u64)?;
        if got < incl as u64 {
            return Err(truncated(
                start,
                "packet record",
                16 + incl as u64,
                16 + got,
            ));
        }
        let frac_ns = if nanosecond {
            frac as i128
        } else {
            frac as i128 * 1000
        };
        Ok(Some(RawFrame {
            offset: start,
            interface: 0,
            linktype,
            timestamp: Some(Timestamp {
                nanos: sec as i128 * 1_000_000_000 + frac_ns,
                digits: if nanosecond { 9 } else { 6 },
            }),
            orig_len: orig,
            data: (0, incl as usize),
        }))
    }

    /// Reads the rest of a block whose 8-byte header (type, length) is
    /// known, into `self.buf` (body without the trailing length).
    fn read_block_body(&mut self, start: u64, len: u32, le: bool) -> Result<()> {
        if len < 12 {
            return Err(bad_len(
                start + 4,
                "block total length",
                len as u64,
                "smaller than the 12-byte minimum",
            ));
        }
        if !len.is_multiple_of(4) {
            return Err(bad_len(
                start + 4,
                "block total length",
                len as u64,
                "not a multiple of 4",
            ));
        }
        let rest = len as u64 - 8;
        self.src.check_len(start, start + 4, "block", rest)?;
        let got = self.src.read_into(&mut self.buf, rest)?;
        if got < rest {
            return Err(truncated(start, "block", len as u64, 8 + got));
        }
        let body_len = self.buf.len() - 4;
        let trailer = u32_at(&self.buf, body_len, le).unwrap_or(0);
        if trailer != len {
            return Err(bad_len(
                start + len as u64 - 4,
                "block trailing length",
                trailer as u64,
                "differs from the block's leading length",
            ));
        }
        self.buf.truncate(body_len);
        Ok(())
    }

    /// Reads a Section Header Block whose type field (at `start`) was read.
    fn read_shb(&mut self, start: u64) -> Result<()> {
        let mut h = [0u8; 8];
        let got = self.src.fill(&mut h)?;
        if got < h.len() {
            return Err(truncated(start, "section header block", 12, 4 + got as u64));
        }
        let le = match u32::from_le_bytes([h[4], h[5], h[6], h[7]]) {
            NG_BYTE_ORDER_MAGIC => true,
            m if m.swap_bytes() == NG_BYTE_ORDER_MAGIC => false,
            m => {
                return Err(Error {
                    offset: start + 8,
                    kind: ErrorKind::Unsupported(format!("pcapng byte-order magic {m:#010x}")),
                })
            }
        };
        let len = u32_at(&h, 0, le).unwrap_or(0);
        if len < 28 {
            return Err(bad_len(
                start + 4,
                "section header block length",
                len as u64,
                "smaller than the 28-byte minimum",
            ));
        }
        // The byte-order magic is part of the body already read.
        if !len.is_multiple_of(4) {
            return Err(bad_len(
                start + 4,
                "block total length",
                len as u64,
                "not a multiple of 4",
            ));
        }
        let rest = len as u64 - 12;
        self.src
            .check_len(start, start + 4, "section header block", rest)?;
        let got = self.src.read_into(&mut self.buf, rest)?;
        if got < rest {
            return Err(truncated(
                start,
                "section header block",
                len as u64,
                12 + got,
            ));
        }
        let body_len = self.buf.len() - 4;
        let trailer = u32_at(&self.buf, body_len, le).unwrap_or(0);
        if trailer != len {
            return Err(bad_len(
                start + len as u64 - 4,
                "block trailing length",
                trailer as u64,
                "differs from the block's leading length",
            ));
        }
        let major = u16_at(&self.buf, 0, le).unwrap_or(0);
        if major != 1 {
            let minor = u16_at(&self.buf, 2, le).unwrap_or(0);
            return Err(Error {
                offset: start + 12,
                kind: ErrorKind::Unsupported(format!("pcapng version {major}.{minor}")),
            });
        }
        // A new section: interfaces start over.
        self.state = State::PcapNg {
            le,
            interfaces: Vec::new(),
        };
        self.format = Format::PcapNg;
        Ok(())
    }

    fn next_pcapng(&mut self) -> Result<Option<RawFrame>> {
        loop {
            let State::PcapNg { le, .. } = self.state else {
                return Ok(None);
            };
            let start = self.src.offset;
            let mut ty = [0u8; 4];
            let got = self.src.fill(&mut ty)?;
            if got == 0 {
                return Ok(None);
            }
            if got < 4 {
                return Err(truncated(start, "block header", 8, got as u64));
            }
            let block_type = u32_at(&ty, 0, le).unwrap_or(0);
            if block_type == NG_SHB {
                self.read_shb(start)?;
                continue;
            }
            let mut l = [0u8; 4];
            let got = self.src.fill(&mut l)?;
            if got < 4 {
                return Err(truncated(start, "block header", 8, 4 + got as u64));
            }
            let len = u32_at(&l, 0, le).unwrap_or(0);
            self.read_block_body(start, len, le)?;
            match block_type {
                NG_IDB => self.parse_idb(start, le)?,
                NG_EPB | NG_OPB => return self.parse_epb(start, le, block_type).map(Some),
                NG_SPB => return self.parse_spb(start, le).map(Some),
                _ => {} // statistics, name resolution, custom...: skipped
            }
        }
    }

    fn parse_idb(&mut self, start: u64, le: bool) -> Result<()> {
        let b = &self.buf;
        let body = start + 8;
        if b.len() < 8 {
            return Err(bad_len(
                start + 4,
                "interface description block length",
                b.len() as u64 + 12,
                "smaller than the 20-byte minimum",
            ));
        }
        let mut iface = Interface {
            linktype: u16_at(b, 0, le).unwrap_or(0) as u32,
            snaplen: u32_at(b, 4, le).unwrap_or(0),
            tsresol: NG_DEFAULT_TSRESOL,
            tsoffset: 0,
        };
        let mut at = 8usize;
        while at + 4 <= b.len() {
            let code = u16_at(b, at, le).unwrap_or(0);
            let olen = u16_at(b, at + 2, le).unwrap_or(0) as usize;
            if code == NG_OPT_END {
                break;
            }
            let Some(v) = b.get(at + 4..at + 4 + olen) else {
                return Err(bad_len(
                    body + at as u64 + 2,
                    "option length",
                    olen as u64,
                    "runs past the end of the block",
                ));
            };
            match (code, olen) {
                (NG_OPT_IF_TSRESOL, 1) => {
                    iface.tsresol = v[0];
                    if ts_units_to_nanos(1, v[0]).is_none() {
                        return Err(Error {
                            offset: body + at as u64 + 4,
                            kind: ErrorKind::Unsupported(format!("if_tsresol {:#04x}", v[0])),
                        });
                    }
                }
                (NG_OPT_IF_TSOFFSET, 8) => {
                    let a: [u8; 8] = v.try_into().unwrap_or([0; 8]);
                    iface.tsoffset = if le {
                        i64::from_le_bytes(a)
                    } else {
                        i64::from_be_bytes(a)
                    };
                }
                _ => {}
            }
            at += 4 + olen.div_ceil(4) * 4;
        }
        if let State::PcapNg { interfaces, .. } = &mut self.state {
            interfaces.push(iface);
        }
        Ok(())
    }

    fn interface(&self, start: u64, id: u32) -> Result<Interface> {
        match &self.state {
            State::PcapNg { interfaces, .. } => interfaces.get(id as usize).copied().ok_or(Error {
                offset: start,
                kind: ErrorKind::UnknownInterface(id),
            }),
            _ => Err(Error {
                offset: start,
                kind: ErrorKind::UnknownInterface(id),
            }),
        }
    }

    /// Enhanced Packet Block, or the obsolete Packet Block (same layout but
    /// a 16-bit interface id followed by a 16-bit drop count).
    fn parse_epb(&mut self, start: u64, le: bool, ty: u32) -> Result<RawFrame> {
        let b = &self.buf;
        if b.len() < 20 {
            return Err(bad_len(
                start + 4,
                "packet block length",
                b.len() as u64 + 12,
                "smaller than the 32-byte minimum",
            ));
        }
        let id = if ty == NG_OPB {
            u16_at(b, 0, le).unwrap_or(0) as u32
        } else {
            u32_at(b, 0, le).unwrap_or(0)
        };
        let ts =
            (u32_at(b, 4, le).unwrap_or(0) as u64) << 32 | u32_at(b, 8, le).unwrap_or(0) as u64;
        let caplen = u32_at(b, 12, le).unwrap_or(0);
        let orig = u32_at(b, 16, le).unwrap_or(0);
        if caplen as usize > b.len() - 20 {
            return Err(bad_len(
                start + 20,
                "captured packet length",
                caplen as u64,
                "runs past the end of the block",
            ));
        }
        let iface = self.interface(start + 8, id)?;
        Ok(RawFrame {
            offset: start,
            interface: id,
            linktype: iface.linktype,
            timestamp: Some(timestamp(ts, &iface)),
            orig_len: orig,
            data: (20, 20 + caplen as usize),
        })
    }

    fn parse_spb(&mut self, start: u64, le: bool) -> Result<RawFrame> {
        if self.buf.len() < 4 {
            return Err(bad_len(
                start + 4,
                "simple packet block length",
                self.buf.len() as u64 + 12,
                "smaller than the 16-byte minimum",
            ));
        }
        let orig = u32_at(&self.buf, 0, le).unwrap_or(0);
        let iface = self.interface(start, 0)?;
        // The captured length is implied: the packet, cut at the snapshot
        // length, within the block.
        let mut caplen = (orig as usize).min(self.buf.len() - 4);
        if iface.snaplen != 0 {
            caplen = caplen.min(iface.snaplen as usize);
        }
        Ok(RawFrame {
            offset: start,
            interface: 0,
            linktype: iface.linktype,
            timestamp: None,
            orig_len: orig,
            data: (4, 4 + caplen),
        })
    }
}

/// A frame before its data is borrowed from the buffer.
struct RawFrame {
    offset: u64,
    interface: u32,
    linktype: u32,
    timestamp: Option<Timestamp>,
    orig_len: u32,
    data: (usize, usize),
}

/// Converts `units` of an `if_tsresol` to nanoseconds; `None` for a
/// resolution finer than 10^-38 s or 2^-127 s.
fn ts_units_to_nanos(units: u64, tsresol: u8) -> Option<i128> {
    let exp = (tsresol & 0x7f) as u32;
    let u = units as i128;
    if tsresol & 0x80 == 0 {
        if exp <= 9 {
            Some(u * 10i128.pow(9 - exp))
        } else {
            Some(u / 10i128.checked_pow(exp - 9)?)
        }
    } else {
        // u < 2^64, so u * 10^9 < 2^94: no overflow.
        Some((u * 1_000_000_000) >> exp)
    }
}

/// Decimal digits worth printing for an `if_tsresol`.
fn ts_digits(tsresol: u8) -> u8 {
    let exp = (tsresol & 0x7f) as u32;
    let digits = if tsresol & 0x80 == 0 {
        exp
    } else {
        // 2^-n s resolves about n * log10(2) decimal digits.
        (exp * 30103).div_ceil(100_000)
    };
    if digits <= 6 {
        6
    } else {
        9
    }
}

fn timestamp(units: u64, iface: &Interface) -> Timestamp {
    let nanos = ts_units_to_nanos(units, iface.tsresol).unwrap_or(0)
        + iface.tsoffset as i128 * 1_000_000_000;
    Timestamp {
        nanos,
        digits: ts_digits(iface.tsresol),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linktype;
    use crate::write::{IdbOptions, NgWriter, PcapHeader, PcapWriter};

    /// Builds a classic pcap file in memory and notes where the file header
    /// and each record end (all records hold packets).
    struct Pcap {
        w: PcapWriter<Vec<u8>>,
        ends: Vec<(usize, bool)>,
    }

    impl Pcap {
        fn new(le: bool, nanosecond: bool, linktype: u32) -> Self {
            let header = PcapHeader {
                big_endian: !le,
                nanosecond,
                snaplen: 65535,
                linktype,
            };
            let w = PcapWriter::new(Vec::new(), header).unwrap();
            let ends = vec![(w.get_ref().len(), false)];
            Pcap { w, ends }
        }
        fn record(&mut self, sec: u32, frac: u32, data: &[u8], orig: u32) {
            self.w.record(sec, frac, data, orig).unwrap();
            self.ends.push((self.w.get_ref().len(), true));
        }
        fn out(&self) -> &[u8] {
            self.w.get_ref()
        }
    }

    /// Builds a pcapng file in memory and notes where each block ends and
    /// whether it holds a packet. Interfaces carry an `if_name` and packets
    /// an `epb_flags` option, so that option skipping is exercised.
    struct Ng {
        w: NgWriter<Vec<u8>>,
        ends: Vec<(usize, bool)>,
    }

    impl Ng {
        fn new(le: bool) -> Self {
            let w = NgWriter::new(Vec::new(), !le).unwrap();
            let ends = vec![(w.get_ref().len(), false)];
            Ng { w, ends }
        }
        fn note(&mut self, r: io::Result<()>, packet: bool) {
            r.unwrap();
            self.ends.push((self.w.get_ref().len(), packet));
        }
        fn out(&self) -> &[u8] {
            self.w.get_ref()
        }
        /// Starts a new section, possibly switching byte order.
        fn shb(&mut self, le: bool) {
            let r = self.w.section(!le);
            self.note(r, false);
        }
        fn idb(&mut self, linktype: u16, snaplen: u32, tsresol: Option<u8>, tsoffset: Option<i64>) {
            let opts = IdbOptions {
                name: Some("lo"),
                tsresol,
                tsoffset,
            };
            let r = self.w.interface(linktype, snaplen, &opts);
            self.note(r, false);
        }
        fn epb(&mut self, iface: u32, ts: u64, data: &[u8], orig: u32) {
            let r = self.w.enhanced(iface, ts, data, orig, Some(1));
            self.note(r, true);
        }
        fn spb(&mut self, data: &[u8], orig: u32) {
            let r = self.w.simple(data, orig);
            self.note(r, true);
        }
        fn opb(&mut self, iface: u16, ts: u64, data: &[u8]) {
            let r = self.w.obsolete_packet(iface, ts, data);
            self.note(r, true);
        }
        /// Some block the reader skips (an Interface Statistics Block).
        fn isb(&mut self) {
            let r = self.w.block(5, &[0; 12]);
            self.note(r, false);
        }
    }

    /// Owned copy of a frame, for comparisons.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Owned {
        pub number: u64,
        pub interface: u32,
        pub linktype: u32,
        pub ts: Option<Timestamp>,
        pub orig_len: u32,
        pub data: Vec<u8>,
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<Owned>> {
        let mut r = CaptureReader::from_bytes(bytes)?;
        let mut v = Vec::new();
        while let Some(f) = r.next_frame()? {
            v.push(Owned {
                number: f.number,
                interface: f.interface,
                linktype: f.linktype,
                ts: f.timestamp,
                orig_len: f.orig_len,
                data: f.data.to_vec(),
            });
        }
        Ok(v)
    }

    fn us(nanos: i128) -> Option<Timestamp> {
        Some(Timestamp { nanos, digits: 6 })
    }

    #[test]
    fn classic_pcap_both_byte_orders_and_resolutions() {
        for le in [true, false] {
            for ns in [false, true] {
                let mut w = Pcap::new(le, ns, linktype::RAW);
                w.record(10, 5, &[0x45, 1, 2], 3);
                w.record(11, 999_999, &[6; 7], 70);
                let f = read_all(w.out()).unwrap();
                assert_eq!(f.len(), 2);
                let unit = if ns { 1 } else { 1000 };
                assert_eq!(f[0].ts.unwrap().nanos, 10_000_000_000 + 5 * unit);
                assert_eq!(f[0].ts.unwrap().digits, if ns { 9 } else { 6 });
                assert_eq!(f[1].ts.unwrap().nanos, 11_000_000_000 + 999_999 * unit);
                assert_eq!(f[0].data, [0x45, 1, 2]);
                assert_eq!((f[1].orig_len, f[1].data.len()), (70, 7));
                assert_eq!(f[1].linktype, linktype::RAW);
                assert_eq!(f[1].number, 2);
                let r = CaptureReader::from_bytes(w.out()).unwrap();
                assert_eq!(
                    r.format(),
                    Format::Pcap {
                        big_endian: !le,
                        nanosecond: ns
                    }
                );
            }
        }
    }

    fn sample_pcapng(le: bool) -> Vec<u8> {
        sample_pcapng_writer(le).out().to_vec()
    }

    fn sample_pcapng_writer(le: bool) -> Ng {
        let mut w = Ng::new(le);
        w.idb(linktype::ETHERNET as u16, 0, None, None);
        w.idb(linktype::LINUX_SLL2 as u16, 4, Some(9), Some(-2));
        w.epb(0, 1_500_000, &[1, 2, 3, 4, 5], 5);
        w.isb();
        w.epb(1, 3_000_000_123, &[9; 6], 60);
        w.spb(&[7; 6], 6);
        w.opb(1, 7, &[8; 3]);
        w
    }

    #[test]
    fn pcapng_interfaces_block_kinds_and_timestamps() {
        for le in [true, false] {
            let f = read_all(&sample_pcapng(le)).unwrap();
            assert_eq!(f.len(), 4);
            assert_eq!(
                (f[0].interface, f[0].linktype, f[0].ts),
                (0, linktype::ETHERNET, us(1_500_000_000))
            );
            assert_eq!(f[0].data, [1, 2, 3, 4, 5]);
            // Interface 1: nanoseconds, offset -2 s, its own link type.
            assert_eq!(f[1].linktype, linktype::LINUX_SLL2);
            assert_eq!(
                f[1].ts,
                Some(Timestamp {
                    nanos: 3_000_000_123 - 2_000_000_000,
                    digits: 9
                })
            );
            assert_eq!((f[1].orig_len, f[1].data.len()), (60, 6));
            // SPB: interface 0, no time, the implied length.
            assert_eq!((f[2].interface, f[2].ts), (0, None));
            assert_eq!(f[2].data, [7; 6]);
            // Obsolete packet block.
            assert_eq!((f[3].interface, f[3].data.len()), (1, 3));
            assert_eq!(f[3].ts.unwrap().nanos, 7 - 2_000_000_000);
        }
    }

    #[test]
    fn pcapng_sections_may_switch_byte_order_and_reset_interfaces() {
        let mut w = Ng::new(true);
        w.idb(linktype::RAW as u16, 0, None, None);
        w.epb(0, 1, &[0x45], 1);
        w.shb(false);
        w.idb(linktype::NULL as u16, 0, Some(0x80 | 10), None);
        w.epb(0, 1024, &[2, 0, 0, 0], 4);
        let f = read_all(w.out()).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f[1].linktype, linktype::NULL);
        // 1024 units of 2^-10 s = 1 s.
        assert_eq!(f[1].ts.unwrap().nanos, 1_000_000_000);
        // A section without an IDB cannot have packets.
        let mut w = Ng::new(true);
        w.idb(1, 0, None, None);
        w.shb(true);
        let n = w.out().len();
        w.epb(0, 1, &[0], 1);
        assert_eq!(
            read_all(w.out()).unwrap_err(),
            Error {
                offset: n as u64 + 8,
                kind: ErrorKind::UnknownInterface(0)
            }
        );
    }

    #[test]
    fn tsresol_conversions() {
        assert_eq!(ts_units_to_nanos(5, 6), Some(5_000));
        assert_eq!(ts_units_to_nanos(5, 9), Some(5));
        assert_eq!(ts_units_to_nanos(12_345, 12), Some(12));
        assert_eq!(
            ts_units_to_nanos(u64::MAX, 0),
            Some(u64::MAX as i128 * 1_000_000_000)
        );
        assert_eq!(ts_units_to_nanos(3, 0x80 | 1), Some(1_500_000_000));
        assert_eq!(ts_units_to_nanos(u64::MAX, 0x80 | 127), Some(0));
        assert_eq!(ts_units_to_nanos(1, 47), Some(0));
        assert_eq!(ts_units_to_nanos(1, 48), None);
        assert_eq!(ts_digits(3), 6);
        assert_eq!(ts_digits(6), 6);
        assert_eq!(ts_digits(9), 9);
        assert_eq!(ts_digits(0x80 | 19), 6);
        assert_eq!(ts_digits(0x80 | 20), 9);
        assert_eq!(ts_digits(0x80 | 30), 9);
    }

    /// Truncates a file at every offset. `ends` lists where each header,
    /// record or block ends and whether it held a packet. A prefix that ends
    /// on one of them reads cleanly with the packets before it; any other
    /// prefix reads those packets, then fails with a truncation error at or
    /// before the cut. Never a panic.
    fn check_every_truncation(bytes: &[u8], ends: &[(usize, bool)]) {
        assert_eq!(ends.last().unwrap().0, bytes.len());
        let header_end = ends[0].0;
        for cut in 0..bytes.len() {
            let prefix = &bytes[..cut];
            let complete = ends.iter().filter(|(end, pkt)| *pkt && *end <= cut).count();
            let at_boundary = ends.iter().any(|(end, _)| *end == cut);
            let mut r = match CaptureReader::from_bytes(prefix) {
                Ok(r) => r,
                Err(e) => {
                    assert!(cut < header_end, "cut {cut}: {e}");
                    assert!(e.offset <= cut as u64);
                    if cut == 0 {
                        assert_eq!(e.kind, ErrorKind::Empty);
                    } else {
                        assert!(matches!(e.kind, ErrorKind::Truncated { .. }), "{e}");
                    }
                    continue;
                }
            };
            assert!(cut >= header_end, "cut {cut}: opened a cut header");
            let mut n = 0;
            let res = loop {
                match r.next_frame() {
                    Ok(Some(_)) => n += 1,
                    Ok(None) => break Ok(()),
                    Err(e) => break Err(e),
                }
            };
            assert_eq!(n, complete, "cut {cut}");
            match res {
                Ok(()) => assert!(at_boundary, "cut {cut} read cleanly mid-record"),
                Err(e) => {
                    assert!(!at_boundary, "cut {cut}: {e}");
                    assert!(e.offset <= cut as u64, "cut {cut}: {e}");
                    assert!(
                        matches!(e.kind, ErrorKind::Truncated { .. }),
                        "cut {cut}: {e}"
                    );
                    // Once failed, the reader stays quiet.
                    assert_eq!(r.next_frame(), Ok(None));
                }
            }
        }
    }

    #[test]
    fn truncation_at_every_offset_pcap() {
        for le in [true, false] {
            let mut w = Pcap::new(le, false, linktype::ETHERNET);
            w.record(1, 2, &[1; 5], 5);
            w.record(1, 3, &[], 0);
            w.record(1, 4, &[2; 9], 100);
            check_every_truncation(w.out(), &w.ends);
        }
    }

    #[test]
    fn truncation_at_every_offset_pcapng() {
        for le in [true, false] {
            let w = sample_pcapng_writer(le);
            check_every_truncation(w.out(), &w.ends);
        }
    }

    #[test]
    fn garbled_lengths_are_refused_with_offsets() {
        // A record claiming 4 GiB in a small file: refused before reading.
        let mut w = Pcap::new(true, false, 1);
        w.record(0, 0, &[1, 2, 3], 3);
        let mut bad = w.out().to_vec();
        bad[24 + 8..24 + 12].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = read_all(&bad).unwrap_err();
        assert_eq!(e.offset, 32);
        assert!(matches!(e.kind, ErrorKind::BadLength { .. }), "{e}");
        // 1 MiB claimed with 3 bytes present.
        bad[24 + 8..24 + 12].copy_from_slice(&(1u32 << 20).to_le_bytes());
        let e = read_all(&bad).unwrap_err();
        assert_eq!(
            e.kind,
            ErrorKind::Truncated {
                what: "packet record",
                needed: 16 + (1 << 20),
                available: 16 + 3
            }
        );
        assert_eq!(
            e.to_string(),
            "at byte offset 24: file truncated in packet record: needs 1048592 bytes, 19 left"
        );

        // pcapng: wrong trailing length, length not a multiple of 4, too small.
        let ng = sample_pcapng(true);
        let idb = 28; // first IDB after the 28-byte SHB
        let mut bad = ng.clone();
        let len = u32::from_le_bytes(bad[idb + 4..idb + 8].try_into().unwrap()) as usize;
        bad[idb + len - 4] ^= 4;
        let e = read_all(&bad).unwrap_err();
        assert_eq!(e.offset, (idb + len - 4) as u64);
        for l in [3u32, 13, 0xffff_fff0] {
            let mut bad = ng.clone();
            bad[idb + 4..idb + 8].copy_from_slice(&l.to_le_bytes());
            let e = read_all(&bad).unwrap_err();
            assert_eq!(e.offset, (idb + 4) as u64, "{l}: {e}");
        }
        // EPB whose captured length overruns its block.
        let mut w = Ng::new(true);
        w.idb(1, 0, None, None);
        let epb = w.out().len();
        w.epb(0, 0, &[1, 2, 3, 4], 4);
        let mut bad = w.out().to_vec();
        bad[epb + 20..epb + 24].copy_from_slice(&100u32.to_le_bytes());
        let e = read_all(&bad).unwrap_err();
        assert_eq!(e.offset, epb as u64 + 20, "{e}");
        // Wrong magic, wrong versions.
        assert!(matches!(
            read_all(b"GIF89a......").unwrap_err().kind,
            ErrorKind::UnknownMagic(_)
        ));
        let mut v = Pcap::new(true, false, 1).out().to_vec();
        v[4] = 3;
        assert!(matches!(
            read_all(&v).unwrap_err().kind,
            ErrorKind::Unsupported(_)
        ));
        let mut v = sample_pcapng(true);
        v[12] = 2;
        assert!(matches!(
            read_all(&v).unwrap_err().kind,
            ErrorKind::Unsupported(_)
        ));
    }

    /// A reader that hands out one byte per call and reports no size: the
    /// streaming path must give the same frames as the in-memory one.
    struct Dribble<'a>(&'a [u8]);
    impl Read for Dribble<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            match (self.0.split_first(), out.first_mut()) {
                (Some((b, rest)), Some(o)) => {
                    *o = *b;
                    self.0 = rest;
                    Ok(1)
                }
                _ => Ok(0),
            }
        }
    }

    #[test]
    fn streaming_without_size_reads_the_same() {
        for bytes in [sample_pcapng(false), {
            let mut w = Pcap::new(false, true, 1);
            w.record(1, 2, &[3; 33], 33);
            w.out().to_vec()
        }] {
            let mut r = CaptureReader::new(Dribble(&bytes), None).unwrap();
            let mut n = 0;
            let want = read_all(&bytes).unwrap();
            while let Some(f) = r.next_frame().unwrap() {
                assert_eq!(f.data, &want[n].data[..]);
                assert_eq!(f.timestamp, want[n].ts);
                n += 1;
            }
            assert_eq!(n, want.len());
            // Truncated streams fail the same way without a known size.
            let cut = &bytes[..bytes.len() - 3];
            let mut r = CaptureReader::new(Dribble(cut), None).unwrap();
            let err = loop {
                match r.next_frame() {
                    Ok(Some(_)) => {}
                    Ok(None) => panic!("clean end on a cut stream"),
                    Err(e) => break e,
                }
            };
            assert!(matches!(err.kind, ErrorKind::Truncated { .. }));
        }
    }
}
