//! Base Transport Header (IBA 9.2, 12 bytes).
//!
//! ```text
//!  0       OpCode
//!  1       SE(1) M(1) PadCnt(2) TVer(4)
//!  2..4    P_Key
//!  4       FECN(1) BECN(1) Resv6   (RoCE v2 ICRC masks this byte)
//!  5..8    DestQP
//!  8       AckReq(1) Resv7
//!  9..12   PSN
//! ```

use crate::opcode::Opcode;
use crate::types::{PKey, Psn, Qpn};
use crate::{be, view, Error, Result};

mod field {
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PKEY: usize = 2;
    pub const FB: usize = 4;
    pub const DEST_QP: usize = 5;
    pub const ACK: usize = 8;
    pub const PSN: usize = 9;
}

/// Length of the BTH.
pub const HEADER_LEN: usize = 12;
/// Offset of the byte the RoCE v2 ICRC replaces with 0xff (FECN/BECN/Resv6).
pub const ICRC_MASKED_BYTE: usize = field::FB;

const SE: u8 = 0x80;
const MIG: u8 = 0x40;
const FECN: u8 = 0x80;
const BECN: u8 = 0x40;
const ACKREQ: u8 = 0x80;

view!(
    /// A view of a BTH at the start of a buffer.
    Bth,
    HEADER_LEN
);

impl<T: AsRef<[u8]>> Bth<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// OpCode.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.b()[field::OPCODE])
    }
    /// Solicited event.
    pub fn solicited(&self) -> bool {
        self.b()[field::FLAGS] & SE != 0
    }
    /// MigReq.
    pub fn mig_req(&self) -> bool {
        self.b()[field::FLAGS] & MIG != 0
    }
    /// Pad count: 0–3 bytes of padding after the payload.
    pub fn pad_count(&self) -> u8 {
        (self.b()[field::FLAGS] >> 4) & 0x3
    }
    /// Transport header version (0).
    pub fn tver(&self) -> u8 {
        self.b()[field::FLAGS] & 0x0f
    }
    /// Partition key.
    pub fn pkey(&self) -> PKey {
        PKey(be::u16(self.b(), field::PKEY))
    }
    /// Forward explicit congestion notification.
    pub fn fecn(&self) -> bool {
        self.b()[field::FB] & FECN != 0
    }
    /// Backward explicit congestion notification.
    pub fn becn(&self) -> bool {
        self.b()[field::FB] & BECN != 0
    }
    /// Destination QP.
    pub fn dest_qp(&self) -> Qpn {
        Qpn::new(be::u24(self.b(), field::DEST_QP))
    }
    /// Acknowledge request.
    pub fn ack_req(&self) -> bool {
        self.b()[field::ACK] & ACKREQ != 0
    }
    /// Packet sequence number.
    pub fn psn(&self) -> Psn {
        Psn::new(be::u24(self.b(), field::PSN))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    fn set_bit(&mut self, at: usize, mask: u8, on: bool) {
        let b = &mut self.bm()[at];
        *b = if on { *b | mask } else { *b & !mask };
    }
    /// Sets the opcode.
    pub fn set_opcode(&mut self, op: Opcode) {
        self.bm()[field::OPCODE] = op.0;
    }
    /// Sets SE.
    pub fn set_solicited(&mut self, v: bool) {
        self.set_bit(field::FLAGS, SE, v);
    }
    /// Sets MigReq.
    pub fn set_mig_req(&mut self, v: bool) {
        self.set_bit(field::FLAGS, MIG, v);
    }
    /// Sets PadCnt (low two bits of `v`).
    pub fn set_pad_count(&mut self, v: u8) {
        let b = &mut self.bm()[field::FLAGS];
        *b = (*b & !0x30) | ((v & 3) << 4);
    }
    /// Sets TVer (low four bits of `v`).
    pub fn set_tver(&mut self, v: u8) {
        let b = &mut self.bm()[field::FLAGS];
        *b = (*b & 0xf0) | (v & 0x0f);
    }
    /// Sets the P_Key.
    pub fn set_pkey(&mut self, v: PKey) {
        be::set_u16(self.bm(), field::PKEY, v.0);
    }
    /// Sets FECN, BECN and clears the reserved bits of byte 4.
    pub fn set_fecn_becn(&mut self, fecn: bool, becn: bool) {
        self.bm()[field::FB] = if fecn { FECN } else { 0 } | if becn { BECN } else { 0 };
    }
    /// Sets the destination QP.
    pub fn set_dest_qp(&mut self, v: Qpn) {
        be::set_u24(self.bm(), field::DEST_QP, v.value());
    }
    /// Sets AckReq and clears the reserved bits of byte 8.
    pub fn set_ack_req(&mut self, v: bool) {
        self.bm()[field::ACK] = if v { ACKREQ } else { 0 };
    }
    /// Sets the PSN.
    pub fn set_psn(&mut self, v: Psn) {
        be::set_u24(self.bm(), field::PSN, v.value());
    }
}

/// The fields of a BTH. Reserved bits are not kept: they are ignored on
/// receipt and sent as zero (IBA 9.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BthRepr {
    /// OpCode.
    pub opcode: Opcode,
    /// Solicited event.
    pub solicited: bool,
    /// MigReq (path migration; RoCE v2 stacks send 0).
    pub mig_req: bool,
    /// Pad count (0–3).
    pub pad_count: u8,
    /// Partition key.
    pub pkey: PKey,
    /// FECN.
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// Destination QP.
    pub dest_qp: Qpn,
    /// AckReq.
    pub ack_req: bool,
    /// PSN.
    pub psn: Psn,
}

impl BthRepr {
    /// A BTH for `opcode` to `dest_qp` at `psn`, everything else as RoCE v2
    /// stacks send it by default: the default partition key, no solicited
    /// event, MigReq, congestion bits or AckReq, pad count 0 (set fields
    /// with struct update syntax: `BthRepr { ack_req: true, ..BthRepr::new(…) }`).
    pub const fn new(opcode: Opcode, dest_qp: Qpn, psn: Psn) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: PKey::DEFAULT,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        }
    }

    /// Parses a BTH view. Fails on TVer other than 0.
    pub fn parse<T: AsRef<[u8]>>(bth: &Bth<T>) -> Result<BthRepr> {
        bth.check_len()?;
        if bth.tver() != 0 {
            return Err(Error::BadTver);
        }
        Ok(BthRepr {
            opcode: bth.opcode(),
            solicited: bth.solicited(),
            mig_req: bth.mig_req(),
            pad_count: bth.pad_count(),
            pkey: bth.pkey(),
            fecn: bth.fecn(),
            becn: bth.becn(),
            dest_qp: bth.dest_qp(),
            ack_req: bth.ack_req(),
            psn: bth.psn(),
        })
    }

    /// Length of the emitted header.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into a view; every byte is written.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, bth: &mut Bth<T>) {
        bth.bm()[field::FLAGS] = 0;
        bth.set_opcode(self.opcode);
        bth.set_solicited(self.solicited);
        bth.set_mig_req(self.mig_req);
        bth.set_pad_count(self.pad_count);
        bth.set_tver(0);
        bth.set_pkey(self.pkey);
        bth.set_fecn_becn(self.fecn, self.becn);
        bth.set_dest_qp(self.dest_qp);
        bth.set_ack_req(self.ack_req);
        bth.set_psn(self.psn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RC_SEND_ONLY from rc_pingpong_64.pcap frame 14: dQP 0x000011, PSN 0xf206f4, AckReq.
    const GOLDEN: [u8; 12] = [
        0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0xf2, 0x06, 0xf4,
    ];

    #[test]
    fn parses_golden_bytes() {
        let v = Bth::new_checked(&GOLDEN[..]).unwrap();
        let r = BthRepr::parse(&v).unwrap();
        assert_eq!(r.opcode, Opcode(0x04));
        assert_eq!(r.dest_qp, Qpn::new(0x11));
        assert_eq!(r.psn, Psn::new(0xf206f4));
        assert!(r.ack_req && !r.solicited && r.pad_count == 0);
        assert_eq!(r.pkey, PKey::DEFAULT);
        let mut out = [0xaau8; 12];
        r.emit(&mut Bth::new_unchecked(&mut out[..]));
        assert_eq!(out, GOLDEN);
    }

    #[test]
    fn flags_round_trip() {
        let r = BthRepr {
            opcode: Opcode(0x0b),
            solicited: true,
            mig_req: true,
            pad_count: 3,
            pkey: PKey(0x8001),
            fecn: true,
            becn: false,
            dest_qp: Qpn::new(0xabcdef),
            ack_req: false,
            psn: Psn::new(0x123456),
        };
        let mut out = [0u8; 12];
        r.emit(&mut Bth::new_unchecked(&mut out[..]));
        assert_eq!(
            out,
            [0x0b, 0xf0, 0x80, 0x01, 0x80, 0xab, 0xcd, 0xef, 0, 0x12, 0x34, 0x56]
        );
        assert_eq!(BthRepr::parse(&Bth::new_unchecked(&out[..])).unwrap(), r);
    }

    #[test]
    fn rejects_short_and_bad_tver() {
        assert_eq!(
            Bth::new_checked(&GOLDEN[..11]).unwrap_err(),
            Error::Truncated
        );
        let mut b = GOLDEN;
        b[1] = 0x01;
        assert_eq!(
            BthRepr::parse(&Bth::new_unchecked(&b[..])).unwrap_err(),
            Error::BadTver
        );
    }
}
