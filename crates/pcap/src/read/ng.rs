//! pcapng: Section Header Blocks (each sets its byte order; interfaces
//! start over), Interface Description Blocks with `if_tsresol` and
//! `if_tsoffset`, Enhanced, Simple and obsolete Packet Blocks; every other
//! block is skipped.

use super::{
    bad_len, truncated, u16_at, u32_at, CaptureReader, Error, ErrorKind, Format, Interface,
    RawFrame, Result, State, Timestamp,
};
use crate::{
    NG_BYTE_ORDER_MAGIC, NG_DEFAULT_TSRESOL, NG_EPB, NG_IDB, NG_OPB, NG_OPT_END,
    NG_OPT_IF_TSOFFSET, NG_OPT_IF_TSRESOL, NG_SHB, NG_SPB,
};
use std::io::Read;

impl<R: Read> CaptureReader<R> {
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
        self.read_block_rest(start, len, 8, "block", le)
    }

    /// Reads the rest of a block of total length `len` whose first `read`
    /// bytes are consumed (8: type and length; 12 in a Section Header
    /// Block, with its byte-order magic) into `self.buf`, without the
    /// trailing length, which must repeat `len`.
    fn read_block_rest(
        &mut self,
        start: u64,
        len: u32,
        read: u64,
        what: &'static str,
        le: bool,
    ) -> Result<()> {
        if !len.is_multiple_of(4) {
            return Err(bad_len(
                start + 4,
                "block total length",
                len as u64,
                "not a multiple of 4",
            ));
        }
        let rest = len as u64 - read;
        self.src.check_len(start, start + 4, what, rest)?;
        let got = self.src.read_into(&mut self.buf, rest)?;
        if got < rest {
            return Err(truncated(start, what, len as u64, read + got));
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
    pub(super) fn read_shb(&mut self, start: u64) -> Result<()> {
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
        self.read_block_rest(start, len, 12, "section header block", le)?;
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

    pub(super) fn next_pcapng(&mut self) -> Result<Option<RawFrame>> {
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
        at_least(
            start,
            b.len(),
            8,
            "interface description block length",
            "smaller than the 20-byte minimum",
        )?;
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
        at_least(
            start,
            b.len(),
            20,
            "packet block length",
            "smaller than the 32-byte minimum",
        )?;
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
        at_least(
            start,
            self.buf.len(),
            4,
            "simple packet block length",
            "smaller than the 16-byte minimum",
        )?;
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

/// Refuses a block whose body (after type and length, before the trailing
/// length) is shorter than `min` bytes.
fn at_least(
    start: u64,
    body: usize,
    min: usize,
    what: &'static str,
    reason: &'static str,
) -> Result<()> {
    if body < min {
        return Err(bad_len(start + 4, what, body as u64 + 12, reason));
    }
    Ok(())
}

/// Converts `units` of an `if_tsresol` to nanoseconds; `None` for a
/// resolution finer than 10^-38 s or 2^-127 s.
pub(super) fn ts_units_to_nanos(units: u64, tsresol: u8) -> Option<i128> {
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
pub(super) fn ts_digits(tsresol: u8) -> u8 {
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
