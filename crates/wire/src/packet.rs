//! One InfiniBand transport packet as RoCE v2 carries it in a UDP payload:
//! `BTH | extension headers | payload | pad (0–3) | ICRC (4)`.
//!
//! The opcode table decides which extension headers are present and where;
//! [`IbPacket`] is the zero-copy view, [`PacketRepr`] the parsed form.

use crate::bth::{self, Bth, BthRepr};
use crate::ext::{
    Aeth, AethRepr, AtomicAckEth, AtomicEth, AtomicEthRepr, Deth, DethRepr, Feth, FethRepr, Ieth,
    ImmDt, Reth, RethRepr, XrcEth,
};
use crate::opcode::{Headers, OpcodeInfo};
use crate::types::RKey;
use crate::{Error, Result};

/// Length of the invariant CRC trailer.
pub const ICRC_LEN: usize = 4;
/// Length of a CNP's reserved block after the BTH.
pub const CNP_PAD_LEN: usize = 16;

/// Zero-copy view of a transport packet (BTH through ICRC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IbPacket<T: AsRef<[u8]>> {
    buffer: T,
    info: &'static OpcodeInfo,
}

impl<T: AsRef<[u8]>> IbPacket<T> {
    /// Validates the buffer: a known opcode, room for BTH, every extension
    /// header the opcode requires and the ICRC, a PadCnt that fits, and no
    /// payload where the opcode allows none. After this no accessor panics.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < bth::HEADER_LEN + ICRC_LEN {
            return Err(Error::Truncated);
        }
        let view = Bth::new_unchecked(b);
        let info = view.opcode().info().ok_or(Error::UnknownOpcode(b[0]))?;
        if view.tver() != 0 {
            return Err(Error::BadTver);
        }
        let hdr = bth::HEADER_LEN + info.ext_len();
        if b.len() < hdr + ICRC_LEN {
            return Err(Error::Truncated);
        }
        let data = b.len() - hdr - ICRC_LEN;
        let pad = view.pad_count() as usize;
        if pad > data {
            return Err(Error::BadPad);
        }
        if !info.payload && data != 0 {
            return Err(Error::Malformed);
        }
        Ok(Self { buffer, info })
    }

    /// The opcode's table entry.
    pub fn info(&self) -> &'static OpcodeInfo {
        self.info
    }

    /// The BTH.
    pub fn bth(&self) -> Bth<&[u8]> {
        Bth::new_unchecked(&self.buffer.as_ref()[..bth::HEADER_LEN])
    }

    fn ext(&self, which: Headers, len: usize) -> Option<&[u8]> {
        let off = bth::HEADER_LEN + self.info.headers.offset_of(which)?;
        Some(&self.buffer.as_ref()[off..off + len])
    }

    /// The RETH, when the opcode carries one.
    pub fn reth(&self) -> Option<Reth<&[u8]>> {
        self.ext(Headers::RETH, 16).map(Reth::new_unchecked)
    }
    /// The AETH, when the opcode carries one.
    pub fn aeth(&self) -> Option<Aeth<&[u8]>> {
        self.ext(Headers::AETH, 4).map(Aeth::new_unchecked)
    }
    /// The AtomicETH, when the opcode carries one.
    pub fn atomic_eth(&self) -> Option<AtomicEth<&[u8]>> {
        self.ext(Headers::ATOMIC_ETH, 28)
            .map(AtomicEth::new_unchecked)
    }
    /// The AtomicAckETH, when the opcode carries one.
    pub fn atomic_ack_eth(&self) -> Option<AtomicAckEth<&[u8]>> {
        self.ext(Headers::ATOMIC_ACK_ETH, 8)
            .map(AtomicAckEth::new_unchecked)
    }
    /// The immediate data header, when the opcode carries one.
    pub fn imm(&self) -> Option<ImmDt<&[u8]>> {
        self.ext(Headers::IMM, 4).map(ImmDt::new_unchecked)
    }
    /// The IETH, when the opcode carries one.
    pub fn ieth(&self) -> Option<Ieth<&[u8]>> {
        self.ext(Headers::IETH, 4).map(Ieth::new_unchecked)
    }
    /// The DETH, when the opcode carries one.
    pub fn deth(&self) -> Option<Deth<&[u8]>> {
        self.ext(Headers::DETH, 8).map(Deth::new_unchecked)
    }
    /// The FETH, when the opcode carries one (FLUSH).
    pub fn feth(&self) -> Option<Feth<&[u8]>> {
        self.ext(Headers::FETH, 4).map(Feth::new_unchecked)
    }
    /// The XRCETH, when the opcode carries one (XRC requests).
    pub fn xrceth(&self) -> Option<XrcEth<&[u8]>> {
        self.ext(Headers::XRCETH, 4).map(XrcEth::new_unchecked)
    }

    /// Length of BTH plus extension headers.
    pub fn header_len(&self) -> usize {
        bth::HEADER_LEN + self.info.ext_len()
    }

    /// The payload without pad bytes.
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = b.len() - ICRC_LEN - self.bth().pad_count() as usize;
        &b[self.header_len()..end]
    }

    /// The pad bytes (0–3).
    pub fn pad(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = b.len() - ICRC_LEN;
        &b[end - self.bth().pad_count() as usize..end]
    }

    /// Everything the ICRC covers that belongs to the transport packet (BTH
    /// through pad), unmasked.
    pub fn icrc_covered(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[..b.len() - ICRC_LEN]
    }

    /// The ICRC as stored in the packet.
    pub fn icrc(&self) -> u32 {
        let b = self.buffer.as_ref();
        let n = b.len();
        u32::from_le_bytes([b[n - 4], b[n - 3], b[n - 2], b[n - 1]])
    }

    /// Total length including the ICRC.
    pub fn len(&self) -> usize {
        self.buffer.as_ref().len()
    }

    /// Never true for a checked packet (kept for clippy's len/is_empty pair).
    pub fn is_empty(&self) -> bool {
        self.buffer.as_ref().is_empty()
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

/// A parsed transport packet. The extension header fields present must be
/// exactly the ones the opcode's table entry lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketRepr<'a> {
    /// Base transport header; `bth.pad_count` pad bytes follow the payload.
    pub bth: BthRepr,
    /// DETH (UD).
    pub deth: Option<DethRepr>,
    /// XRCETH (XRC requests): the XRC SRQ number at the target, 24 bits.
    pub xrceth: Option<u32>,
    /// FETH (FLUSH).
    pub feth: Option<FethRepr>,
    /// RETH (RDMA WRITE first/only, READ request, FLUSH, ATOMIC WRITE).
    pub reth: Option<RethRepr>,
    /// AtomicETH (CompareSwap, FetchAdd).
    pub atomic_eth: Option<AtomicEthRepr>,
    /// AETH (ACK/NAK, atomic ACK, read response first/last/only).
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH: original remote data.
    pub atomic_ack: Option<u64>,
    /// Immediate data.
    pub imm: Option<u32>,
    /// IETH: R_Key to invalidate.
    pub ieth: Option<RKey>,
    /// Payload, without pad.
    pub payload: &'a [u8],
}

impl<'a> PacketRepr<'a> {
    /// Pad bytes needed after a payload of `len` bytes (IBA 9.2: payload
    /// plus pad is a multiple of four).
    pub const fn pad_for(len: usize) -> u8 {
        ((4 - (len & 3)) & 3) as u8
    }

    /// A Repr with only the BTH and a payload; fill in the extension headers.
    pub fn new(bth: BthRepr, payload: &'a [u8]) -> Self {
        PacketRepr {
            bth,
            deth: None,
            xrceth: None,
            feth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack: None,
            imm: None,
            ieth: None,
            payload,
        }
    }

    /// Parses a checked packet.
    pub fn parse(p: &IbPacket<&'a [u8]>) -> Result<Self> {
        let bth = BthRepr::parse(&p.bth())?;
        let b: &'a [u8] = p.into_inner();
        let end = b.len() - ICRC_LEN - bth.pad_count as usize;
        Ok(PacketRepr {
            bth,
            deth: p.deth().map(|v| DethRepr::parse(&v)).transpose()?,
            xrceth: p.xrceth().map(|v| v.srqn()),
            feth: p.feth().map(|v| FethRepr::parse(&v)).transpose()?,
            reth: p.reth().map(|v| RethRepr::parse(&v)).transpose()?,
            atomic_eth: p
                .atomic_eth()
                .map(|v| AtomicEthRepr::parse(&v))
                .transpose()?,
            aeth: p.aeth().map(|v| AethRepr::parse(&v)).transpose()?,
            atomic_ack: p.atomic_ack_eth().map(|v| v.orig()),
            imm: p.imm().map(|v| v.imm()),
            ieth: p.ieth().map(|v| v.rkey()),
            payload: &b[p.header_len()..end],
        })
    }

    /// Parses a buffer holding BTH through ICRC.
    pub fn parse_bytes(b: &'a [u8]) -> Result<Self> {
        Self::parse(&IbPacket::new_checked(b)?)
    }

    /// Checks that the headers present are exactly the opcode's and returns
    /// its table entry.
    pub fn check(&self) -> Result<&'static OpcodeInfo> {
        let info = self
            .bth
            .opcode
            .info()
            .ok_or(Error::UnknownOpcode(self.bth.opcode.0))?;
        let h = info.headers;
        let ok = h.contains(Headers::DETH) == self.deth.is_some()
            && h.contains(Headers::XRCETH) == self.xrceth.is_some()
            && self.xrceth.is_none_or(|n| n <= 0x00ff_ffff)
            && h.contains(Headers::FETH) == self.feth.is_some()
            && h.contains(Headers::RETH) == self.reth.is_some()
            && h.contains(Headers::ATOMIC_ETH) == self.atomic_eth.is_some()
            && h.contains(Headers::AETH) == self.aeth.is_some()
            && h.contains(Headers::ATOMIC_ACK_ETH) == self.atomic_ack.is_some()
            && h.contains(Headers::IMM) == self.imm.is_some()
            && h.contains(Headers::IETH) == self.ieth.is_some()
            && (info.payload || (self.payload.is_empty() && self.bth.pad_count == 0))
            && self.bth.pad_count <= 3;
        if ok {
            Ok(info)
        } else {
            Err(Error::BadRepr)
        }
    }

    /// Length of BTH plus extension headers.
    pub fn header_len(&self) -> usize {
        bth::HEADER_LEN + self.bth.opcode.info().map_or(0, |i| i.ext_len())
    }

    /// Total length including payload, pad and ICRC.
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload.len() + self.bth.pad_count as usize + ICRC_LEN
    }

    /// Writes BTH and extension headers into `buf` (which must hold
    /// [`Self::header_len`] bytes) and returns their length. Payload, pad and
    /// ICRC are the caller's: this is the gather-I/O entry point.
    pub fn emit_headers(&self, buf: &mut [u8]) -> Result<usize> {
        let info = self.check()?;
        let hlen = bth::HEADER_LEN + info.ext_len();
        if buf.len() < hlen {
            return Err(Error::Truncated);
        }
        let buf = &mut buf[..hlen];
        self.bth
            .emit(&mut Bth::new_unchecked(&mut buf[..bth::HEADER_LEN]));
        let ext = &mut buf[bth::HEADER_LEN..];
        let at = |w: Headers| info.headers.offset_of(w).unwrap_or(0);
        if let Some(d) = &self.deth {
            let o = at(Headers::DETH);
            d.emit(&mut Deth::new_unchecked(&mut ext[o..o + 8]));
        }
        if let Some(n) = self.xrceth {
            let o = at(Headers::XRCETH);
            XrcEth::new_unchecked(&mut ext[o..o + 4]).set_srqn(n);
        }
        if let Some(f) = &self.feth {
            let o = at(Headers::FETH);
            f.emit(&mut Feth::new_unchecked(&mut ext[o..o + 4]));
        }
        if let Some(r) = &self.reth {
            let o = at(Headers::RETH);
            r.emit(&mut Reth::new_unchecked(&mut ext[o..o + 16]));
        }
        if let Some(a) = &self.atomic_eth {
            let o = at(Headers::ATOMIC_ETH);
            a.emit(&mut AtomicEth::new_unchecked(&mut ext[o..o + 28]));
        }
        if let Some(a) = &self.aeth {
            let o = at(Headers::AETH);
            a.emit(&mut Aeth::new_unchecked(&mut ext[o..o + 4]));
        }
        if let Some(v) = self.atomic_ack {
            let o = at(Headers::ATOMIC_ACK_ETH);
            AtomicAckEth::new_unchecked(&mut ext[o..o + 8]).set_orig(v);
        }
        if let Some(v) = self.imm {
            let o = at(Headers::IMM);
            ImmDt::new_unchecked(&mut ext[o..o + 4]).set_imm(v);
        }
        if let Some(v) = self.ieth {
            let o = at(Headers::IETH);
            Ieth::new_unchecked(&mut ext[o..o + 4]).set_rkey(v);
        }
        if let Some(o) = info.headers.offset_of(Headers::CNP_PAD) {
            ext[o..o + CNP_PAD_LEN].fill(0);
        }
        Ok(hlen)
    }

    /// Writes headers, payload and zero pad; leaves the four ICRC bytes
    /// (zeroed) for [`crate::icrc`] to fill. Returns [`Self::buffer_len`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let total = self.buffer_len();
        if buf.len() < total {
            return Err(Error::Truncated);
        }
        let h = self.emit_headers(buf)?;
        let p = h + self.payload.len();
        buf[h..p].copy_from_slice(self.payload);
        buf[p..total].fill(0);
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ext::FethRepr;
    use crate::ext::Syndrome;
    use crate::opcode::Opcode;
    use crate::types::{Msn, Psn, Qpn};

    fn bth(op: u8, pad: u8) -> BthRepr {
        BthRepr {
            pad_count: pad,
            ack_req: true,
            ..BthRepr::new(Opcode(op), Qpn::new(0x11), Psn::new(5))
        }
    }

    #[test]
    fn write_only_with_imm_layout() {
        let payload = [7u8; 13];
        let mut r = PacketRepr::new(bth(0x0b, PacketRepr::pad_for(13)), &payload);
        r.reth = Some(RethRepr {
            va: 0x1000,
            rkey: RKey(0x42),
            dma_len: 13,
        });
        r.imm = Some(0xdead_beef);
        assert_eq!(r.bth.pad_count, 3);
        assert_eq!(r.buffer_len(), 12 + 16 + 4 + 13 + 3 + 4);
        let mut buf = vec![0xaa; r.buffer_len()];
        r.emit(&mut buf).unwrap();
        assert_eq!(&buf[28..32], &[0xde, 0xad, 0xbe, 0xef]);
        let p = IbPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(p.payload(), &payload);
        assert_eq!(p.pad(), &[0, 0, 0]);
        assert_eq!(PacketRepr::parse_bytes(&buf).unwrap(), r);
        assert_eq!(PacketRepr::parse(&p).unwrap(), r);
    }

    /// A FLUSH as rxe's requester builds it (rxe_req.c init_req_packet:
    /// `feth_init` then the RETH with the flush's rkey, the iova and the
    /// length; AckReq set on the only packet; no payload).
    #[test]
    fn flush_golden() {
        let mut r = PacketRepr::new(bth(0x1c, 0), &[]);
        r.feth = Some(FethRepr {
            placement_type: crate::ext::FLUSH_GLOBAL,
            selectivity_level: crate::ext::FLUSH_RANGE,
        });
        r.reth = Some(RethRepr {
            va: 0x7f00_1234_5000,
            rkey: RKey(0x0000_1a2b),
            dma_len: 4096,
        });
        let mut buf = vec![0xaa; r.buffer_len()];
        assert_eq!(r.emit(&mut buf).unwrap(), 12 + 4 + 16 + 4);
        let want: [u8; 32] = [
            0x1c, 0x00, 0xff, 0xff, // opcode, SE/M/pad/tver, P_Key
            0x00, 0x00, 0x00, 0x11, // reserved, dest QP
            0x80, 0x00, 0x00, 0x05, // AckReq, PSN
            0x00, 0x00, 0x00, 0x01, // FETH: level 0 (range), type 1 (global)
            0x00, 0x00, 0x7f, 0x00, 0x12, 0x34, 0x50, 0x00, // RETH va
            0x00, 0x00, 0x1a, 0x2b, // R_Key
            0x00, 0x00, 0x10, 0x00, // length
        ];
        assert_eq!(&buf[..32], &want);
        let back = PacketRepr::parse_bytes(&buf).unwrap();
        assert_eq!(back, r);
        // A FLUSH carries no payload.
        let mut long = buf.clone();
        long.splice(32..32, [0u8; 4]);
        assert_eq!(
            IbPacket::new_checked(&long[..]).unwrap_err(),
            Error::Malformed
        );
    }

    /// XRC requests (IBA 9.3.7, 9.4): the XRCETH right after the BTH, then
    /// RC's extension headers; XRC responses are RC's layout at RC's opcode
    /// + 0xa0. Bytes written from the spec's layouts.
    #[test]
    fn xrc_golden() {
        // SEND ONLY with immediate to XRC SRQ 0x00abcd, 5 bytes.
        let data = *b"hello";
        let mut r = PacketRepr::new(bth(0xa5, PacketRepr::pad_for(5)), &data);
        r.xrceth = Some(0x00_abcd);
        r.imm = Some(0x0102_0304);
        let mut buf = vec![0xaa; r.buffer_len()];
        assert_eq!(r.emit(&mut buf).unwrap(), 12 + 4 + 4 + 5 + 3 + 4);
        let want: [u8; 28] = [
            0xa5, 0x30, 0xff, 0xff, // opcode, pad 3, P_Key
            0x00, 0x00, 0x00, 0x11, // reserved, dest QP
            0x80, 0x00, 0x00, 0x05, // AckReq, PSN
            0x00, 0x00, 0xab, 0xcd, // XRCETH: reserved, XRC SRQ number
            0x01, 0x02, 0x03, 0x04, // ImmDt
            b'h', b'e', b'l', b'l', b'o', 0, 0, 0, // payload, pad
        ];
        assert_eq!(&buf[..28], &want);
        assert_eq!(PacketRepr::parse_bytes(&buf).unwrap(), r);
        let p = IbPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(p.xrceth().unwrap().srqn(), 0xabcd);

        // RDMA WRITE FIRST: XRCETH then RETH.
        let data = [9u8; 8];
        let mut r = PacketRepr::new(bth(0xa6, 0), &data);
        r.xrceth = Some(0xfe_dcba);
        r.reth = Some(RethRepr {
            va: 0x1122_3344_5566_7788,
            rkey: RKey(0x99aa_bbcc),
            dma_len: 8192,
        });
        let mut buf = vec![0; r.buffer_len()];
        r.emit(&mut buf).unwrap();
        assert_eq!(&buf[12..16], &[0x00, 0xfe, 0xdc, 0xba]);
        assert_eq!(
            &buf[16..32],
            &[
                0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0, 0, 0x20,
                0
            ]
        );
        assert_eq!(&buf[32..40], &data);
        assert_eq!(PacketRepr::parse_bytes(&buf).unwrap(), r);

        // CmpSwap: XRCETH then AtomicETH (28 bytes), no payload.
        let mut r = PacketRepr::new(bth(0xb3, 0), &[]);
        r.xrceth = Some(7);
        r.atomic_eth = Some(AtomicEthRepr {
            va: 0x1000,
            rkey: RKey(5),
            swap_add: 2,
            compare: 1,
        });
        let mut buf = vec![0; r.buffer_len()];
        assert_eq!(r.emit(&mut buf).unwrap(), 12 + 4 + 28 + 4);
        assert_eq!(&buf[12..20], &[0, 0, 0, 7, 0, 0, 0, 0]);
        assert_eq!(PacketRepr::parse_bytes(&buf).unwrap(), r);

        // XRC ACKNOWLEDGE: AETH only, no XRCETH.
        let mut r = PacketRepr::new(bth(0xb1, 0), &[]);
        r.aeth = Some(AethRepr {
            syndrome: Syndrome::ACK,
            msn: Msn::new(6),
        });
        let mut buf = vec![0; r.buffer_len()];
        assert_eq!(r.emit(&mut buf).unwrap(), 12 + 4 + 4);
        assert_eq!(&buf[12..16], &[0x1f, 0, 0, 6]);
        assert_eq!(PacketRepr::parse_bytes(&buf).unwrap(), r);

        // A request without its XRCETH, or a response with one, is not a
        // packet; nor is an SRQ number wider than 24 bits.
        let mut r = PacketRepr::new(bth(0xa4, 0), &[]);
        assert_eq!(r.check(), Err(Error::BadRepr));
        r.xrceth = Some(1 << 24);
        assert_eq!(r.check(), Err(Error::BadRepr));
        let mut r = PacketRepr::new(bth(0xb1, 0), &[]);
        r.aeth = Some(AethRepr {
            syndrome: Syndrome::ACK,
            msn: Msn::new(6),
        });
        r.xrceth = Some(1);
        assert_eq!(r.check(), Err(Error::BadRepr));
    }

    /// An ATOMIC WRITE: RETH (length 8) then the 8 bytes verbatim.
    #[test]
    fn atomic_write_golden() {
        let data = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let mut r = PacketRepr::new(bth(0x1d, 0), &data);
        r.reth = Some(RethRepr {
            va: 0x1000,
            rkey: RKey(0x77),
            dma_len: 8,
        });
        let mut buf = vec![0; r.buffer_len()];
        assert_eq!(r.emit(&mut buf).unwrap(), 12 + 16 + 8 + 4);
        assert_eq!(buf[0], 0x1d);
        assert_eq!(
            &buf[12..28],
            &[0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0x77, 0, 0, 0, 8]
        );
        assert_eq!(&buf[28..36], &data);
        assert_eq!(PacketRepr::parse_bytes(&buf).unwrap(), r);
    }

    #[test]
    fn checks_headers_against_opcode() {
        let mut r = PacketRepr::new(bth(0x11, 0), &[]);
        assert_eq!(r.check(), Err(Error::BadRepr));
        r.aeth = Some(AethRepr {
            syndrome: Syndrome::ACK,
            msn: Msn::new(1),
        });
        assert!(r.check().is_ok());
        r.payload = &[1];
        assert_eq!(r.check(), Err(Error::BadRepr));
    }

    #[test]
    fn rejects_bad_buffers() {
        assert_eq!(
            IbPacket::new_checked(&[0u8; 15][..]).unwrap_err(),
            Error::Truncated
        );
        let mut b = [0u8; 16];
        b[0] = 0x15;
        assert_eq!(
            IbPacket::new_checked(&b[..]).unwrap_err(),
            Error::UnknownOpcode(0x15)
        );
        b[0] = 0x0a; // WRITE_ONLY needs a RETH
        assert_eq!(IbPacket::new_checked(&b[..]).unwrap_err(), Error::Truncated);
        b[0] = 0x04;
        b[1] = 0x30; // pad 3 with no payload
        assert_eq!(IbPacket::new_checked(&b[..]).unwrap_err(), Error::BadPad);
        let mut a = [0u8; 24];
        a[0] = 0x11; // ACK with 4 stray bytes
        assert_eq!(IbPacket::new_checked(&a[..]).unwrap_err(), Error::Malformed);
    }
}
