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

use crate::{NG_SHB, PCAP_HEADER_LEN, PCAP_MAGIC_NS, PCAP_MAGIC_US, PCAP_RECORD_HEADER_LEN};
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
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("at byte offset {offset}: {kind}")]
pub struct Error {
    /// Byte offset in the file of the record, block or field at fault.
    pub offset: u64,
    /// The problem.
    pub kind: ErrorKind,
}

/// The kinds of [`Error`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    /// Reading failed (message of the I/O error).
    #[error("read error: {0}")]
    Io(String),
    /// The file is empty.
    #[error("empty file")]
    Empty,
    /// The first four bytes are neither a pcap nor a pcapng magic.
    #[error("not a pcap or pcapng file (magic {:02x}{:02x}{:02x}{:02x})", .0[0], .0[1], .0[2], .0[3])]
    UnknownMagic([u8; 4]),
    /// The file ends inside a header or record.
    #[error("file truncated in {what}: needs {needed} bytes, {available} left")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes it needs.
        needed: u64,
        /// Bytes the file still had.
        available: u64,
    },
    /// A length field that cannot be right.
    #[error("bad {what} {len}: {reason}")]
    BadLength {
        /// Which length.
        what: &'static str,
        /// Its value.
        len: u64,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A version or feature this reader does not handle.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A packet block names an interface no IDB described.
    #[error("packet block for interface {0}, which was never described")]
    UnknownInterface(u32),
}

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

mod ng;
#[cfg(test)]
mod tests;
