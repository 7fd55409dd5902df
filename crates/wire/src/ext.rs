//! Extension transport headers (IBA 9.3): RETH, AETH, AtomicETH,
//! AtomicAckETH, ImmDt, IETH and DETH, and the FLUSH ETH of the Memory
//! Placement Extensions (IBA 1.5, annex A19).

use crate::types::{Msn, QKey, Qpn, RKey};
use crate::{be, view, Result};
use core::fmt;

// ---------------------------------------------------------------- RETH ----

mod reth {
    pub const VA: usize = 0;
    pub const RKEY: usize = 8;
    pub const LEN: usize = 12;
}

view!(
    /// RDMA Extended Transport Header (IBA 9.3.3, 16 bytes): virtual address,
    /// R_Key, DMA length. Starts RDMA WRITEs and carries READ requests.
    Reth,
    16
);

impl<T: AsRef<[u8]>> Reth<T> {
    /// Virtual address.
    pub fn va(&self) -> u64 {
        be::u64(self.buffer.as_ref(), reth::VA)
    }
    /// Remote key.
    pub fn rkey(&self) -> RKey {
        RKey(be::u32(self.buffer.as_ref(), reth::RKEY))
    }
    /// DMA length in bytes.
    pub fn dma_len(&self) -> u32 {
        be::u32(self.buffer.as_ref(), reth::LEN)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Reth<T> {
    /// Sets the virtual address.
    pub fn set_va(&mut self, v: u64) {
        be::set_u64(self.buffer.as_mut(), reth::VA, v)
    }
    /// Sets the remote key.
    pub fn set_rkey(&mut self, v: RKey) {
        be::set_u32(self.buffer.as_mut(), reth::RKEY, v.0)
    }
    /// Sets the DMA length.
    pub fn set_dma_len(&mut self, v: u32) {
        be::set_u32(self.buffer.as_mut(), reth::LEN, v)
    }
}

/// Fields of a RETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RethRepr {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: RKey,
    /// DMA length.
    pub dma_len: u32,
}

impl RethRepr {
    /// Parses a view.
    pub fn parse<T: AsRef<[u8]>>(v: &Reth<T>) -> Result<Self> {
        v.check_len()?;
        Ok(Self {
            va: v.va(),
            rkey: v.rkey(),
            dma_len: v.dma_len(),
        })
    }
    /// Emitted length.
    pub const fn buffer_len(&self) -> usize {
        16
    }
    /// Writes into a view.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Reth<T>) {
        v.set_va(self.va);
        v.set_rkey(self.rkey);
        v.set_dma_len(self.dma_len);
    }
}

// ---------------------------------------------------------------- AETH ----

/// NAK codes of the AETH (IBA 9.7.5.2.2, table 44).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// 0: PSN sequence error — the requester must go back to the NAK's PSN.
    PsnSequenceError,
    /// 1: invalid request (unsupported opcode, bad length, missing permission).
    InvalidRequest,
    /// 2: remote access error (R_Key, bounds, access rights).
    RemoteAccessError,
    /// 3: remote operational error.
    RemoteOperationalError,
    /// 4: invalid RD request.
    InvalidRdRequest,
    /// 5–31: reserved values, kept so parsing never loses bits.
    Reserved(u8),
}

impl NakCode {
    /// The 5-bit code.
    pub const fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(v) => v & 0x1f,
        }
    }
    /// From the 5-bit code.
    pub const fn from_code(v: u8) -> Self {
        match v & 0x1f {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            v => NakCode::Reserved(v),
        }
    }
}

/// Credit count that means "no end-to-end flow control" (IBA 9.7.7.2,
/// the invalid credit count 0b11111); what rxe sends in every ACK.
pub const CREDITS_UNLIMITED: u8 = 0x1f;

/// The AETH syndrome byte (IBA 9.3.5, table 42): bits 6:5 select ACK,
/// RNR NAK, reserved or NAK; bits 4:0 are the credit count, RNR timer or
/// NAK code. Bit 7 is reserved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// ACK with an encoded credit count (0x1f: unlimited).
    Ack {
        /// 5-bit credit count code.
        credits: u8,
    },
    /// Receiver not ready; retry after the encoded delay.
    RnrNak {
        /// 5-bit RNR timer code, see [`rnr_timer_us`].
        timer: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
    /// Reserved syndrome (type 0b10 or bit 7 set), kept verbatim.
    Reserved(u8),
}

impl Syndrome {
    /// The syndrome byte.
    pub const fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1f,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            Syndrome::Nak(c) => 0x60 | c.code(),
            Syndrome::Reserved(b) => b,
        }
    }
    /// Decodes the syndrome byte.
    pub const fn from_byte(b: u8) -> Self {
        if b & 0x80 != 0 {
            return Syndrome::Reserved(b);
        }
        match (b >> 5) & 3 {
            0 => Syndrome::Ack { credits: b & 0x1f },
            1 => Syndrome::RnrNak { timer: b & 0x1f },
            3 => Syndrome::Nak(NakCode::from_code(b & 0x1f)),
            _ => Syndrome::Reserved(b),
        }
    }
    /// ACK with unlimited credits, as rxe sends.
    pub const ACK: Syndrome = Syndrome::Ack {
        credits: CREDITS_UNLIMITED,
    };
}

impl fmt::Display for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Syndrome::Ack { credits } => write!(f, "ACK(credits={credits})"),
            Syndrome::RnrNak { timer } => write!(f, "RNR_NAK(timer={timer})"),
            Syndrome::Nak(NakCode::PsnSequenceError) => f.write_str("NAK(PSN_SEQ_ERR)"),
            Syndrome::Nak(NakCode::InvalidRequest) => f.write_str("NAK(INV_REQ)"),
            Syndrome::Nak(NakCode::RemoteAccessError) => f.write_str("NAK(REM_ACCESS_ERR)"),
            Syndrome::Nak(NakCode::RemoteOperationalError) => f.write_str("NAK(REM_OP_ERR)"),
            Syndrome::Nak(NakCode::InvalidRdRequest) => f.write_str("NAK(INV_RD_REQ)"),
            Syndrome::Nak(NakCode::Reserved(c)) => write!(f, "NAK(code={c})"),
            Syndrome::Reserved(b) => write!(f, "RESERVED({b:#04x})"),
        }
    }
}

/// RNR NAK timer field → minimum delay in microseconds (IBA 9.7.5.2.8,
/// table 45). Code 0 is the longest delay, 655.36 ms.
pub const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// Delay of an RNR timer code in microseconds.
pub const fn rnr_timer_us(code: u8) -> u32 {
    RNR_TIMER_US[(code & 0x1f) as usize]
}

mod aeth {
    pub const SYNDROME: usize = 0;
    pub const MSN: usize = 1;
}

view!(
    /// ACK Extended Transport Header (IBA 9.3.5, 4 bytes): syndrome and MSN.
    Aeth,
    4
);

impl<T: AsRef<[u8]>> Aeth<T> {
    /// Syndrome.
    pub fn syndrome(&self) -> Syndrome {
        Syndrome::from_byte(self.buffer.as_ref()[aeth::SYNDROME])
    }
    /// Message sequence number.
    pub fn msn(&self) -> Msn {
        Msn::new(be::u24(self.buffer.as_ref(), aeth::MSN))
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Aeth<T> {
    /// Sets the syndrome.
    pub fn set_syndrome(&mut self, s: Syndrome) {
        self.buffer.as_mut()[aeth::SYNDROME] = s.to_byte();
    }
    /// Sets the MSN.
    pub fn set_msn(&mut self, m: Msn) {
        be::set_u24(self.buffer.as_mut(), aeth::MSN, m.value())
    }
}

/// Fields of an AETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AethRepr {
    /// Syndrome.
    pub syndrome: Syndrome,
    /// MSN.
    pub msn: Msn,
}

impl AethRepr {
    /// Parses a view.
    pub fn parse<T: AsRef<[u8]>>(v: &Aeth<T>) -> Result<Self> {
        v.check_len()?;
        Ok(Self {
            syndrome: v.syndrome(),
            msn: v.msn(),
        })
    }
    /// Emitted length.
    pub const fn buffer_len(&self) -> usize {
        4
    }
    /// Writes into a view.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Aeth<T>) {
        v.set_syndrome(self.syndrome);
        v.set_msn(self.msn);
    }
}

// ----------------------------------------------------------- AtomicETH ----

mod atomic {
    pub const VA: usize = 0;
    pub const RKEY: usize = 8;
    pub const SWAP_ADD: usize = 12;
    pub const COMPARE: usize = 20;
}

view!(
    /// Atomic Extended Transport Header (IBA 9.3.4, 28 bytes).
    AtomicEth,
    28
);

impl<T: AsRef<[u8]>> AtomicEth<T> {
    /// Virtual address (must be 8-byte aligned).
    pub fn va(&self) -> u64 {
        be::u64(self.buffer.as_ref(), atomic::VA)
    }
    /// Remote key.
    pub fn rkey(&self) -> RKey {
        RKey(be::u32(self.buffer.as_ref(), atomic::RKEY))
    }
    /// Swap value (CompareSwap) or addend (FetchAdd).
    pub fn swap_add(&self) -> u64 {
        be::u64(self.buffer.as_ref(), atomic::SWAP_ADD)
    }
    /// Compare value (CompareSwap only).
    pub fn compare(&self) -> u64 {
        be::u64(self.buffer.as_ref(), atomic::COMPARE)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEth<T> {
    /// Sets the virtual address.
    pub fn set_va(&mut self, v: u64) {
        be::set_u64(self.buffer.as_mut(), atomic::VA, v)
    }
    /// Sets the remote key.
    pub fn set_rkey(&mut self, v: RKey) {
        be::set_u32(self.buffer.as_mut(), atomic::RKEY, v.0)
    }
    /// Sets swap/add.
    pub fn set_swap_add(&mut self, v: u64) {
        be::set_u64(self.buffer.as_mut(), atomic::SWAP_ADD, v)
    }
    /// Sets compare.
    pub fn set_compare(&mut self, v: u64) {
        be::set_u64(self.buffer.as_mut(), atomic::COMPARE, v)
    }
}

/// Fields of an AtomicETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AtomicEthRepr {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: RKey,
    /// Swap value or addend.
    pub swap_add: u64,
    /// Compare value.
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Parses a view.
    pub fn parse<T: AsRef<[u8]>>(v: &AtomicEth<T>) -> Result<Self> {
        v.check_len()?;
        Ok(Self {
            va: v.va(),
            rkey: v.rkey(),
            swap_add: v.swap_add(),
            compare: v.compare(),
        })
    }
    /// Emitted length.
    pub const fn buffer_len(&self) -> usize {
        28
    }
    /// Writes into a view.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut AtomicEth<T>) {
        v.set_va(self.va);
        v.set_rkey(self.rkey);
        v.set_swap_add(self.swap_add);
        v.set_compare(self.compare);
    }
}

// -------------------------------------------------------- AtomicAckETH ----

view!(
    /// Atomic ACK Extended Transport Header (IBA 9.3.6, 8 bytes): the value
    /// the target held before the atomic.
    AtomicAckEth,
    8
);

impl<T: AsRef<[u8]>> AtomicAckEth<T> {
    /// Original remote data.
    pub fn orig(&self) -> u64 {
        be::u64(self.buffer.as_ref(), 0)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEth<T> {
    /// Sets the original remote data.
    pub fn set_orig(&mut self, v: u64) {
        be::set_u64(self.buffer.as_mut(), 0, v)
    }
}

// ------------------------------------------------------- ImmDt / IETH ----

view!(
    /// Immediate data (IBA 9.3.7, 4 bytes), opaque to the transport.
    ImmDt,
    4
);

impl<T: AsRef<[u8]>> ImmDt<T> {
    /// The immediate value, as it appears on the wire (big-endian read).
    pub fn imm(&self) -> u32 {
        be::u32(self.buffer.as_ref(), 0)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmDt<T> {
    /// Sets the immediate value.
    pub fn set_imm(&mut self, v: u32) {
        be::set_u32(self.buffer.as_mut(), 0, v)
    }
}

view!(
    /// Invalidate Extended Transport Header (IBA 9.3.8, 4 bytes): the R_Key
    /// the responder invalidates.
    Ieth,
    4
);

impl<T: AsRef<[u8]>> Ieth<T> {
    /// R_Key to invalidate.
    pub fn rkey(&self) -> RKey {
        RKey(be::u32(self.buffer.as_ref(), 0))
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Ieth<T> {
    /// Sets the R_Key to invalidate.
    pub fn set_rkey(&mut self, v: RKey) {
        be::set_u32(self.buffer.as_mut(), 0, v.0)
    }
}

// -------------------------------------------------------------- XRCETH ----

view!(
    /// XRC Extended Transport Header (IBA 9.3.7, 4 bytes): 8 reserved bits,
    /// then the 24-bit number of the XRC SRQ at the target that takes the
    /// request (its receive WQE, its CQ, and the protection domain every
    /// access of the request is checked against).
    XrcEth,
    4
);

/// The XRC SRQ number field: the low 24 bits of the big-endian word.
const XRC_SRQN_MASK: u32 = 0x00ff_ffff;

impl<T: AsRef<[u8]>> XrcEth<T> {
    /// XRC SRQ number (24 bits; the reserved byte is ignored).
    pub fn srqn(&self) -> u32 {
        be::u32(self.buffer.as_ref(), 0) & XRC_SRQN_MASK
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> XrcEth<T> {
    /// Sets the XRC SRQ number (cut to 24 bits) and clears the reserved byte.
    pub fn set_srqn(&mut self, v: u32) {
        be::set_u32(self.buffer.as_mut(), 0, v & XRC_SRQN_MASK)
    }
}

// ---------------------------------------------------------------- FETH ----

/// FLUSH placement type bit: make the data globally visible (IBA A19,
/// `IBV_FLUSH_GLOBAL`).
pub const FLUSH_GLOBAL: u8 = 1;
/// FLUSH placement type bit: make the data persistent (`IBV_FLUSH_PERSISTENT`).
pub const FLUSH_PERSISTENT: u8 = 2;
/// FLUSH selectivity level: the range the RETH names (`IBV_FLUSH_RANGE`).
pub const FLUSH_RANGE: u8 = 0;
/// FLUSH selectivity level: the whole memory region of the R_Key
/// (`IBV_FLUSH_MR`); the RETH's address and length are not used.
pub const FLUSH_MR: u8 = 1;

mod feth {
    /// Placement type: bits 3:0 of the big-endian word.
    pub const PLT_MASK: u32 = 0x0f;
    /// Selectivity level: bits 5:4.
    pub const SEL_MASK: u32 = 0x30;
    pub const SEL_SHIFT: u32 = 4;
}

view!(
    /// FLUSH Extended Transport Header (IBA 1.5, annex A19, 4 bytes), the
    /// first extension header of a FLUSH request (a RETH follows):
    /// bits 31:6 reserved, 5:4 selectivity level, 3:0 placement type.
    Feth,
    4
);

impl<T: AsRef<[u8]>> Feth<T> {
    fn word(&self) -> u32 {
        be::u32(self.buffer.as_ref(), 0)
    }
    /// Placement type (4 bits: [`FLUSH_GLOBAL`], [`FLUSH_PERSISTENT`]).
    pub fn placement_type(&self) -> u8 {
        (self.word() & feth::PLT_MASK) as u8
    }
    /// Selectivity level (2 bits: [`FLUSH_RANGE`], [`FLUSH_MR`]).
    pub fn selectivity_level(&self) -> u8 {
        ((self.word() & feth::SEL_MASK) >> feth::SEL_SHIFT) as u8
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Feth<T> {
    /// Sets both fields; the reserved bits become zero.
    pub fn set_fields(&mut self, placement_type: u8, selectivity_level: u8) {
        let w = (placement_type as u32 & feth::PLT_MASK)
            | ((selectivity_level as u32) << feth::SEL_SHIFT & feth::SEL_MASK);
        be::set_u32(self.buffer.as_mut(), 0, w)
    }
}

/// Fields of a FETH (reserved bits dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FethRepr {
    /// Placement type, 4 bits.
    pub placement_type: u8,
    /// Selectivity level, 2 bits.
    pub selectivity_level: u8,
}

impl FethRepr {
    /// Parses a view.
    pub fn parse<T: AsRef<[u8]>>(v: &Feth<T>) -> Result<Self> {
        v.check_len()?;
        Ok(Self {
            placement_type: v.placement_type(),
            selectivity_level: v.selectivity_level(),
        })
    }
    /// Emitted length.
    pub const fn buffer_len(&self) -> usize {
        4
    }
    /// Writes into a view (values wider than their field are cut to it).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Feth<T>) {
        v.set_fields(self.placement_type, self.selectivity_level);
    }
}

// ---------------------------------------------------------------- DETH ----

mod deth {
    pub const QKEY: usize = 0;
    pub const SRC_QP: usize = 5;
}

view!(
    /// Datagram Extended Transport Header (IBA 9.3.2, 8 bytes): Q_Key,
    /// reserved byte, source QP.
    Deth,
    8
);

impl<T: AsRef<[u8]>> Deth<T> {
    /// Queue key.
    pub fn qkey(&self) -> QKey {
        QKey(be::u32(self.buffer.as_ref(), deth::QKEY))
    }
    /// Source QP.
    pub fn src_qp(&self) -> Qpn {
        Qpn::new(be::u24(self.buffer.as_ref(), deth::SRC_QP))
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Deth<T> {
    /// Sets the Q_Key.
    pub fn set_qkey(&mut self, v: QKey) {
        be::set_u32(self.buffer.as_mut(), deth::QKEY, v.0)
    }
    /// Sets the source QP and clears the reserved byte.
    pub fn set_src_qp(&mut self, v: Qpn) {
        self.buffer.as_mut()[deth::SRC_QP - 1] = 0;
        be::set_u24(self.buffer.as_mut(), deth::SRC_QP, v.value())
    }
}

/// Fields of a DETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DethRepr {
    /// Queue key.
    pub qkey: QKey,
    /// Source QP.
    pub src_qp: Qpn,
}

impl DethRepr {
    /// Parses a view.
    pub fn parse<T: AsRef<[u8]>>(v: &Deth<T>) -> Result<Self> {
        v.check_len()?;
        Ok(Self {
            qkey: v.qkey(),
            src_qp: v.src_qp(),
        })
    }
    /// Emitted length.
    pub const fn buffer_len(&self) -> usize {
        8
    }
    /// Writes into a view.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Deth<T>) {
        v.set_qkey(self.qkey);
        v.set_src_qp(self.src_qp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn reth_golden() {
        // read_bw_64.pcap frame 20: va 0x55ca29fcc000 rkey 0xa76 len 64.
        let b = [
            0x00, 0x00, 0x55, 0xca, 0x29, 0xfc, 0xc0, 0x00, 0x00, 0x00, 0x0a, 0x76, 0, 0, 0, 64,
        ];
        let r = RethRepr::parse(&Reth::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(r.va, 0x55ca_29fc_c000);
        assert_eq!(r.rkey, RKey(0xa76));
        assert_eq!(r.dma_len, 64);
        let mut o = [0u8; 16];
        r.emit(&mut Reth::new_unchecked(&mut o[..]));
        assert_eq!(o, b);
        assert_eq!(Reth::new_checked(&b[..15]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn xrceth_golden() {
        // IBA 9.3.7: a reserved byte, then the 24-bit XRC SRQ number.
        let b = [0x00, 0x12, 0x34, 0x56];
        let v = XrcEth::new_checked(&b[..]).unwrap();
        assert_eq!(v.srqn(), 0x12_3456);
        // The reserved byte is not part of the number, and is cleared.
        let r = [0xff, 0x12, 0x34, 0x56];
        assert_eq!(XrcEth::new_checked(&r[..]).unwrap().srqn(), 0x12_3456);
        let mut o = [0xaa; 4];
        XrcEth::new_unchecked(&mut o[..]).set_srqn(0xab12_3456);
        assert_eq!(o, b);
        assert_eq!(XrcEth::new_checked(&b[..3]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn aeth_syndromes() {
        for b in 0..=255u8 {
            assert_eq!(Syndrome::from_byte(b).to_byte(), b, "{b:#x}");
        }
        assert_eq!(Syndrome::from_byte(0x1f), Syndrome::ACK);
        assert_eq!(Syndrome::from_byte(0x21), Syndrome::RnrNak { timer: 1 });
        assert_eq!(
            Syndrome::from_byte(0x60),
            Syndrome::Nak(NakCode::PsnSequenceError)
        );
        assert_eq!(
            Syndrome::from_byte(0x61),
            Syndrome::Nak(NakCode::InvalidRequest)
        );
        assert_eq!(
            Syndrome::from_byte(0x62),
            Syndrome::Nak(NakCode::RemoteAccessError)
        );
        assert_eq!(
            Syndrome::from_byte(0x63),
            Syndrome::Nak(NakCode::RemoteOperationalError)
        );
        assert_eq!(
            Syndrome::from_byte(0x64),
            Syndrome::Nak(NakCode::InvalidRdRequest)
        );
        assert_eq!(Syndrome::from_byte(0x45), Syndrome::Reserved(0x45));
        // atomic_bw_fadd.pcap frame 57: ACK credits 31, MSN 1.
        let b = [0x1f, 0, 0, 1];
        let a = AethRepr::parse(&Aeth::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(a.msn, Msn::new(1));
        let mut o = [0u8; 4];
        a.emit(&mut Aeth::new_unchecked(&mut o[..]));
        assert_eq!(o, b);
        assert_eq!(rnr_timer_us(0), 655_360);
        assert_eq!(rnr_timer_us(1), 10);
        assert_eq!(rnr_timer_us(31), 491_520);
    }

    #[test]
    fn atomic_golden() {
        let mut b = [0u8; 28];
        b[..8].copy_from_slice(&0x55ce_6117_a000u64.to_be_bytes());
        b[8..12].copy_from_slice(&0x1309u32.to_be_bytes());
        b[12..20].copy_from_slice(&1u64.to_be_bytes());
        let r = AtomicEthRepr::parse(&AtomicEth::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(
            (r.va, r.rkey, r.swap_add, r.compare),
            (0x55ce_6117_a000, RKey(0x1309), 1, 0)
        );
        let mut o = [0xffu8; 28];
        r.emit(&mut AtomicEth::new_unchecked(&mut o[..]));
        assert_eq!(o, b);
        let mut ack = [0u8; 8];
        AtomicAckEth::new_unchecked(&mut ack[..]).set_orig(0x0102_0304_0506_0708);
        assert_eq!(ack, [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(
            AtomicAckEth::new_unchecked(&ack[..]).orig(),
            0x0102_0304_0506_0708
        );
    }

    #[test]
    fn deth_golden() {
        // ud_pingpong: Q_Key 0x11111111, source QP 0x000012.
        let b = [0x11, 0x11, 0x11, 0x11, 0x00, 0x00, 0x00, 0x12];
        let d = DethRepr::parse(&Deth::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(d.qkey, QKey(0x1111_1111));
        assert_eq!(d.src_qp, Qpn::new(0x12));
        let mut o = [0xffu8; 8];
        d.emit(&mut Deth::new_unchecked(&mut o[..]));
        assert_eq!(o, b);
    }

    #[test]
    fn feth_golden() {
        // rxe's feth_init: (level << 4 & 0x30) | (type & 0xf), big-endian.
        // A persistent flush of a whole MR: type 2, level 1.
        let b = [0x00, 0x00, 0x00, 0x12];
        let f = FethRepr::parse(&Feth::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(f.placement_type, FLUSH_PERSISTENT);
        assert_eq!(f.selectivity_level, FLUSH_MR);
        let mut o = [0xffu8; 4];
        f.emit(&mut Feth::new_unchecked(&mut o[..]));
        assert_eq!(o, b);
        // Reserved bits are dropped on parse and written as zero.
        let r = [0xff, 0xff, 0xff, 0xc1];
        let f = FethRepr::parse(&Feth::new_checked(&r[..]).unwrap()).unwrap();
        assert_eq!((f.placement_type, f.selectivity_level), (FLUSH_GLOBAL, 0));
        f.emit(&mut Feth::new_unchecked(&mut o[..]));
        assert_eq!(o, [0, 0, 0, 1]);
        assert_eq!(Feth::new_checked(&b[..3]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn imm_ieth() {
        let b = [0x11, 0x22, 0x33, 0x44];
        assert_eq!(ImmDt::new_checked(&b[..]).unwrap().imm(), 0x1122_3344);
        assert_eq!(Ieth::new_checked(&b[..]).unwrap().rkey(), RKey(0x1122_3344));
        let mut o = [0u8; 4];
        ImmDt::new_unchecked(&mut o[..]).set_imm(0x1122_3344);
        assert_eq!(o, b);
        Ieth::new_unchecked(&mut o[..]).set_rkey(RKey(7));
        assert_eq!(o, [0, 0, 0, 7]);
    }
}
