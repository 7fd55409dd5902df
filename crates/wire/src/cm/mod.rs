//! Communication management messages (IBA vol. 1 ch. 12, tables 106-120):
//! the MADs of class 0x07, version 2, method Send that set up and tear down
//! connections.
//!
//! Each message has a view over the 232 bytes of MAD class data (offsets
//! below are from the start of that data, as in the IBA tables; add 24 for
//! the offset in the MAD) and a Repr that borrows its private data:
//!
//! | attribute | view / Repr | private data |
//! | --- | --- | --- |
//! | 0x0010 REQ | [`Req`] / [`ReqRepr`] | 92 |
//! | 0x0011 MRA | [`Mra`] / [`MraRepr`] | 222 |
//! | 0x0012 REJ | [`Rej`] / [`RejRepr`] | 148 |
//! | 0x0013 REP | [`Rep`] / [`RepRepr`] | 196 |
//! | 0x0014 RTU | [`Rtu`] / [`RtuRepr`] | 224 |
//! | 0x0015 DREQ | [`Dreq`] / [`DreqRepr`] | 220 |
//! | 0x0016 DREP | [`Drep`] / [`DrepRepr`] | 224 |
//! | 0x0017 SIDR_REQ | [`SidrReq`] / [`SidrReqRepr`] | 216 |
//! | 0x0018 SIDR_REP | [`SidrRep`] / [`SidrRepRepr`] | 136 |
//!
//! Bit fields are numbered from the most significant bit, as IBA and
//! Linux's `ibta_vol1_c12.h` do. A Repr keeps every field the tables name;
//! reserved bits are dropped on parse and written as zero. Private data is
//! the whole field as received (IB CM has no length for it); on emit a
//! shorter slice is zero-filled to the field size and a longer one is an
//! error. `emit` also refuses a number that does not fit its field, so a
//! Repr that emits parses back to itself.
//!
//! [`CmMsg`] dispatches on the attribute ID; [`CmMadRepr`] is a whole MAD
//! (header and message). [`cma`] has the rdma_cm private-data header and
//! the service IDs of the rdma_cm port spaces.

use crate::mad::{Mad, MadHeaderRepr, MAD_DATA_LEN, MAD_HEADER_LEN, MAD_LEN};
use crate::types::{Gid, PKey, Psn, QKey, Qpn};
use crate::{be, Error, Result};
use core::fmt;

pub mod cma;
mod msgs;
mod req;
mod sidr;

pub use cma::{CmaHdr, CmaHdrRepr, PortSpace, ServiceId, CMA_HDR_LEN, CMA_VERSION};
pub use msgs::{
    Drep, DrepRepr, Dreq, DreqRepr, Mra, MraRepr, Rej, RejRepr, Rep, RepRepr, Rtu, RtuRepr,
};
pub use req::{CmPathRepr, Req, ReqRepr};
pub use sidr::{SidrRep, SidrRepRepr, SidrReq, SidrReqRepr, SidrStatus};

/// Class version of the CM (IBA 12.6.1; Linux `IB_CM_CLASS_VERSION`).
pub const CM_CLASS_VERSION: u8 = 2;

/// Attribute IDs of the CM class (IBA table 105; Linux `ib_cm.h`).
pub mod attr {
    /// ClassPortInfo.
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// Request for communication.
    pub const REQ: u16 = 0x0010;
    /// Message receipt acknowledgement.
    pub const MRA: u16 = 0x0011;
    /// Reject.
    pub const REJ: u16 = 0x0012;
    /// Reply to request for communication.
    pub const REP: u16 = 0x0013;
    /// Ready to use.
    pub const RTU: u16 = 0x0014;
    /// Request for communication release (disconnection request).
    pub const DREQ: u16 = 0x0015;
    /// Reply to request for communication release.
    pub const DREP: u16 = 0x0016;
    /// Service ID resolution request.
    pub const SIDR_REQ: u16 = 0x0017;
    /// Service ID resolution response.
    pub const SIDR_REP: u16 = 0x0018;
    /// Load alternate path (not used over RoCE).
    pub const LAP: u16 = 0x0019;
    /// Alternate path response (not used over RoCE).
    pub const APR: u16 = 0x001a;

    /// The messages of connection establishment, release and SIDR that
    /// RoCE carries (IBA 12.6, 12.11), in attribute-ID order.
    pub const CONNECTION: [u16; 9] = [REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ, SIDR_REP];
}

/// Private data bytes of each message (Linux `IB_CM_*_PRIVATE_DATA_SIZE`).
pub mod private_len {
    /// REQ.
    pub const REQ: usize = 92;
    /// MRA.
    pub const MRA: usize = 222;
    /// REJ.
    pub const REJ: usize = 148;
    /// REP.
    pub const REP: usize = 196;
    /// RTU.
    pub const RTU: usize = 224;
    /// DREQ.
    pub const DREQ: usize = 220;
    /// DREP.
    pub const DREP: usize = 224;
    /// SIDR_REQ.
    pub const SIDR_REQ: usize = 216;
    /// SIDR_REP.
    pub const SIDR_REP: usize = 136;
}

/// Bytes of Additional Rejection Information in a REJ.
pub const REJ_ARI_LEN: usize = 72;
/// Bytes of Additional Information in a SIDR_REP.
pub const SIDR_REP_INFO_LEN: usize = 72;

/// Which message a REJ rejects or an MRA acknowledges (the 2-bit "Message
/// REJected" / "Message MRAed" fields; Linux `enum cm_msg_response`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MsgRef(pub u8);

impl MsgRef {
    /// The REQ.
    pub const REQ: MsgRef = MsgRef(0);
    /// The REP.
    pub const REP: MsgRef = MsgRef(1);
    /// Another message (LAP, or a REJ that is not about REQ/REP).
    pub const OTHER: MsgRef = MsgRef(2);
}

impl fmt::Debug for MsgRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
impl fmt::Display for MsgRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            0 => f.write_str("REQ"),
            1 => f.write_str("REP"),
            2 => f.write_str("other"),
            n => write!(f, "reserved({n})"),
        }
    }
}

/// A REJ reason (IBA table 108; names as Linux `enum ib_cm_rej_reason`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RejReason(pub u16);

macro_rules! rej_reasons {
    ($($(#[$m:meta])* $name:ident = $v:expr;)*) => {
        impl RejReason {
            $($(#[$m])* pub const $name: RejReason = RejReason($v);)*
            /// The constant's name, if the reason has one.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($v => Some(stringify!($name)),)*
                    _ => None,
                }
            }
        }
    };
}

rej_reasons! {
    /// No QP available.
    NO_QP = 1;
    /// No EE context available.
    NO_EEC = 2;
    /// No resources available.
    NO_RESOURCES = 3;
    /// Timeout: the requester gave up (ARI = its CA GUID).
    TIMEOUT = 4;
    /// Unsupported request.
    UNSUPPORTED = 5;
    /// Invalid communication ID.
    INVALID_COMM_ID = 6;
    /// Invalid communication instance.
    INVALID_COMM_INSTANCE = 7;
    /// No listener for the service ID.
    INVALID_SERVICE_ID = 8;
    /// Invalid transport service type.
    INVALID_TRANSPORT_TYPE = 9;
    /// Stale connection: the QP is still in use by an old connection.
    STALE_CONN = 10;
    /// RDC does not exist.
    RDC_NOT_EXIST = 11;
    /// Primary remote port GID rejected (ARI = a GID).
    INVALID_GID = 12;
    /// Primary remote port LID rejected.
    INVALID_LID = 13;
    /// Primary SL rejected.
    INVALID_SL = 14;
    /// Primary traffic class rejected.
    INVALID_TRAFFIC_CLASS = 15;
    /// Primary hop limit rejected.
    INVALID_HOP_LIMIT = 16;
    /// Primary packet rate rejected.
    INVALID_PACKET_RATE = 17;
    /// Alternate remote port GID rejected.
    INVALID_ALT_GID = 18;
    /// Alternate remote port LID rejected.
    INVALID_ALT_LID = 19;
    /// Alternate SL rejected.
    INVALID_ALT_SL = 20;
    /// Alternate traffic class rejected.
    INVALID_ALT_TRAFFIC_CLASS = 21;
    /// Alternate hop limit rejected.
    INVALID_ALT_HOP_LIMIT = 22;
    /// Alternate packet rate rejected.
    INVALID_ALT_PACKET_RATE = 23;
    /// Port CM redirection.
    PORT_CM_REDIRECT = 24;
    /// Port redirection.
    PORT_REDIRECT = 25;
    /// Path MTU not supported.
    INVALID_MTU = 26;
    /// Not enough responder resources.
    INSUFFICIENT_RESP_RESOURCES = 27;
    /// Consumer defined: the application said no (`rdma_reject`).
    CONSUMER_DEFINED = 28;
    /// RNR retry count rejected.
    INVALID_RNR_RETRY = 29;
    /// Duplicate local communication ID.
    DUPLICATE_LOCAL_COMM_ID = 30;
    /// Class version not supported.
    INVALID_CLASS_VERSION = 31;
    /// Primary flow label rejected.
    INVALID_FLOW_LABEL = 32;
    /// Alternate flow label rejected.
    INVALID_ALT_FLOW_LABEL = 33;
    /// A vendor option (ECE) is not supported (`rdma_reject_ece`).
    VENDOR_OPTION_NOT_SUPPORTED = 35;
}

impl fmt::Debug for RejReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
impl fmt::Display for RejReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{}({n})", self.0),
            None => write!(f, "{}", self.0),
        }
    }
}

/// A path MTU code (IBA table 230): 1 = 256 … 5 = 4096 bytes.
pub const fn mtu_bytes(code: u8) -> Option<u32> {
    match code {
        1..=5 => Some(128 << code),
        _ => None,
    }
}

/// Where a field lives in a message, and how to read and write it. Once a
/// view's length is checked, no location reads past it.
pub(crate) trait Loc: Copy {
    type V;
    fn get(self, b: &[u8]) -> Self::V;
    fn set(self, b: &mut [u8], v: Self::V);
}

/// A byte.
#[derive(Clone, Copy)]
pub(crate) struct U8(pub usize);
/// A big-endian 16-bit word.
#[derive(Clone, Copy)]
pub(crate) struct U16(pub usize);
/// A big-endian 24-bit number in three bytes.
#[derive(Clone, Copy)]
pub(crate) struct U24(pub usize);
/// A big-endian 32-bit word.
#[derive(Clone, Copy)]
pub(crate) struct U32(pub usize);
/// A big-endian 64-bit word.
#[derive(Clone, Copy)]
pub(crate) struct U64(pub usize);
/// `width` bits of one byte whose lowest bit is `lsb` (0 = least significant).
#[derive(Clone, Copy)]
pub(crate) struct Bits {
    pub byte: usize,
    pub lsb: u8,
    pub width: u8,
}
/// One bit of a byte (0 = least significant).
#[derive(Clone, Copy)]
pub(crate) struct Flag(pub usize, pub u8);
/// A 24-bit QPN.
#[derive(Clone, Copy)]
pub(crate) struct QpnAt(pub usize);
/// A 24-bit PSN.
#[derive(Clone, Copy)]
pub(crate) struct PsnAt(pub usize);
/// A 16-byte GID.
#[derive(Clone, Copy)]
pub(crate) struct GidAt(pub usize);
/// A 20-bit flow label in the high bits of a 32-bit word.
#[derive(Clone, Copy)]
pub(crate) struct FlowLabelAt(pub usize);

impl Bits {
    pub(crate) const fn new(byte: usize, lsb: u8, width: u8) -> Bits {
        Bits { byte, lsb, width }
    }
    const fn mask(self) -> u8 {
        ((1u16 << self.width) - 1) as u8
    }
    /// Whether `v` fits the field.
    pub(crate) const fn fits(self, v: u8) -> bool {
        v <= self.mask()
    }
}

impl Loc for U8 {
    type V = u8;
    fn get(self, b: &[u8]) -> u8 {
        b[self.0]
    }
    fn set(self, b: &mut [u8], v: u8) {
        b[self.0] = v;
    }
}
impl Loc for U16 {
    type V = u16;
    fn get(self, b: &[u8]) -> u16 {
        be::u16(b, self.0)
    }
    fn set(self, b: &mut [u8], v: u16) {
        be::set_u16(b, self.0, v);
    }
}
impl Loc for U24 {
    type V = u32;
    fn get(self, b: &[u8]) -> u32 {
        be::u24(b, self.0)
    }
    fn set(self, b: &mut [u8], v: u32) {
        be::set_u24(b, self.0, v);
    }
}
impl Loc for U32 {
    type V = u32;
    fn get(self, b: &[u8]) -> u32 {
        be::u32(b, self.0)
    }
    fn set(self, b: &mut [u8], v: u32) {
        be::set_u32(b, self.0, v);
    }
}
impl Loc for U64 {
    type V = u64;
    fn get(self, b: &[u8]) -> u64 {
        be::u64(b, self.0)
    }
    fn set(self, b: &mut [u8], v: u64) {
        be::set_u64(b, self.0, v);
    }
}
impl Loc for Bits {
    type V = u8;
    fn get(self, b: &[u8]) -> u8 {
        (b[self.byte] >> self.lsb) & self.mask()
    }
    fn set(self, b: &mut [u8], v: u8) {
        let m = self.mask() << self.lsb;
        b[self.byte] = (b[self.byte] & !m) | ((v << self.lsb) & m);
    }
}
impl Loc for Flag {
    type V = bool;
    fn get(self, b: &[u8]) -> bool {
        b[self.0] & (1 << self.1) != 0
    }
    fn set(self, b: &mut [u8], v: bool) {
        if v {
            b[self.0] |= 1 << self.1;
        } else {
            b[self.0] &= !(1 << self.1);
        }
    }
}
impl Loc for QpnAt {
    type V = Qpn;
    fn get(self, b: &[u8]) -> Qpn {
        Qpn::new(be::u24(b, self.0))
    }
    fn set(self, b: &mut [u8], v: Qpn) {
        be::set_u24(b, self.0, v.value());
    }
}
impl Loc for PsnAt {
    type V = Psn;
    fn get(self, b: &[u8]) -> Psn {
        Psn::new(be::u24(b, self.0))
    }
    fn set(self, b: &mut [u8], v: Psn) {
        be::set_u24(b, self.0, v.value());
    }
}
impl Loc for GidAt {
    type V = Gid;
    fn get(self, b: &[u8]) -> Gid {
        let mut g = [0u8; 16];
        g.copy_from_slice(&b[self.0..self.0 + 16]);
        Gid(g)
    }
    fn set(self, b: &mut [u8], v: Gid) {
        b[self.0..self.0 + 16].copy_from_slice(&v.0);
    }
}
impl Loc for FlowLabelAt {
    type V = u32;
    fn get(self, b: &[u8]) -> u32 {
        be::u32(b, self.0) >> 12
    }
    fn set(self, b: &mut [u8], v: u32) {
        let w = be::u32(b, self.0) & 0xfff;
        be::set_u32(b, self.0, (v & 0xf_ffff) << 12 | w);
    }
}

/// Declares a message view over the MAD class data: its type, then one
/// getter/setter pair per field, each reading its location constant.
macro_rules! cm_view {
    (
        $(#[$m:meta])* $name:ident {
            $( $(#[$fm:meta])* $get:ident, $set:ident: $ty:ty = $loc:expr; )*
        }
    ) => {
        $crate::view!($(#[$m])* $name, $crate::mad::MAD_DATA_LEN);

        impl<T: AsRef<[u8]>> $name<T> {
            $(
                $(#[$fm])*
                pub fn $get(&self) -> $ty {
                    $crate::cm::Loc::get($loc, self.buffer.as_ref())
                }
            )*
            /// The class data bytes (the whole message).
            pub fn bytes(&self) -> &[u8] {
                &self.buffer.as_ref()[..$crate::mad::MAD_DATA_LEN]
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            $(
                #[doc = concat!("Sets `", stringify!($get), "` (bits beyond the field are dropped).")]
                pub fn $set(&mut self, v: $ty) {
                    $crate::cm::Loc::set($loc, self.buffer.as_mut(), v)
                }
            )*
            /// The class data bytes, writable.
            pub fn bytes_mut(&mut self) -> &mut [u8] {
                &mut self.buffer.as_mut()[..$crate::mad::MAD_DATA_LEN]
            }
        }
    };
}
pub(crate) use cm_view;

/// Copies `src` into the field `dst`, zero-filling the rest; fails when
/// `src` is longer than the field.
pub(crate) fn put_bytes(dst: &mut [u8], src: &[u8]) -> Result<()> {
    if src.len() > dst.len() {
        return Err(Error::BadRepr);
    }
    dst[..src.len()].copy_from_slice(src);
    dst[src.len()..].fill(0);
    Ok(())
}

/// Fails unless every bit-field value fits its field.
pub(crate) fn check_fits(fields: &[(Bits, u8)]) -> Result<()> {
    if fields.iter().all(|&(b, v)| b.fits(v)) {
        Ok(())
    } else {
        Err(Error::BadRepr)
    }
}

/// Fails unless a 24-bit number fits.
pub(crate) fn check_24(v: u32) -> Result<()> {
    if v <= 0xff_ffff {
        Ok(())
    } else {
        Err(Error::BadRepr)
    }
}

/// Any CM message, by attribute ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmMsg<'a> {
    /// REQ.
    Req(ReqRepr<'a>),
    /// MRA.
    Mra(MraRepr<'a>),
    /// REJ.
    Rej(RejRepr<'a>),
    /// REP.
    Rep(RepRepr<'a>),
    /// RTU.
    Rtu(RtuRepr<'a>),
    /// DREQ.
    Dreq(DreqRepr<'a>),
    /// DREP.
    Drep(DrepRepr<'a>),
    /// SIDR_REQ.
    SidrReq(SidrReqRepr<'a>),
    /// SIDR_REP.
    SidrRep(SidrRepRepr<'a>),
}

impl<'a> CmMsg<'a> {
    /// Parses the class data of a MAD with attribute `attr_id`. Unknown
    /// attributes and LAP/APR (unused over RoCE, and dropped by Linux's CM
    /// on RoCE ports) are [`Error::Malformed`].
    pub fn parse(attr_id: u16, data: &'a [u8]) -> Result<CmMsg<'a>> {
        Ok(match attr_id {
            attr::REQ => CmMsg::Req(ReqRepr::parse(&Req::new_checked(data)?)?),
            attr::MRA => CmMsg::Mra(MraRepr::parse(&Mra::new_checked(data)?)?),
            attr::REJ => CmMsg::Rej(RejRepr::parse(&Rej::new_checked(data)?)?),
            attr::REP => CmMsg::Rep(RepRepr::parse(&Rep::new_checked(data)?)?),
            attr::RTU => CmMsg::Rtu(RtuRepr::parse(&Rtu::new_checked(data)?)?),
            attr::DREQ => CmMsg::Dreq(DreqRepr::parse(&Dreq::new_checked(data)?)?),
            attr::DREP => CmMsg::Drep(DrepRepr::parse(&Drep::new_checked(data)?)?),
            attr::SIDR_REQ => CmMsg::SidrReq(SidrReqRepr::parse(&SidrReq::new_checked(data)?)?),
            attr::SIDR_REP => CmMsg::SidrRep(SidrRepRepr::parse(&SidrRep::new_checked(data)?)?),
            _ => return Err(Error::Malformed),
        })
    }

    /// The attribute ID of the message.
    pub const fn attr_id(&self) -> u16 {
        match self {
            CmMsg::Req(_) => attr::REQ,
            CmMsg::Mra(_) => attr::MRA,
            CmMsg::Rej(_) => attr::REJ,
            CmMsg::Rep(_) => attr::REP,
            CmMsg::Rtu(_) => attr::RTU,
            CmMsg::Dreq(_) => attr::DREQ,
            CmMsg::Drep(_) => attr::DREP,
            CmMsg::SidrReq(_) => attr::SIDR_REQ,
            CmMsg::SidrRep(_) => attr::SIDR_REP,
        }
    }

    /// The message's name as IBA writes it ("REQ", "SIDR_REP", …).
    pub const fn name(&self) -> &'static str {
        attr_name(self.attr_id())
    }

    /// Length of the emitted class data.
    pub const fn buffer_len(&self) -> usize {
        MAD_DATA_LEN
    }

    /// Writes all 232 bytes of class data.
    pub fn emit(&self, data: &mut [u8]) -> Result<()> {
        match self {
            CmMsg::Req(r) => r.emit(&mut Req::new_checked(data)?),
            CmMsg::Mra(r) => r.emit(&mut Mra::new_checked(data)?),
            CmMsg::Rej(r) => r.emit(&mut Rej::new_checked(data)?),
            CmMsg::Rep(r) => r.emit(&mut Rep::new_checked(data)?),
            CmMsg::Rtu(r) => r.emit(&mut Rtu::new_checked(data)?),
            CmMsg::Dreq(r) => r.emit(&mut Dreq::new_checked(data)?),
            CmMsg::Drep(r) => r.emit(&mut Drep::new_checked(data)?),
            CmMsg::SidrReq(r) => r.emit(&mut SidrReq::new_checked(data)?),
            CmMsg::SidrRep(r) => r.emit(&mut SidrRep::new_checked(data)?),
        }
    }
}

/// The IBA name of a CM attribute ID, or "?" for an unknown one.
pub const fn attr_name(attr_id: u16) -> &'static str {
    match attr_id {
        attr::CLASS_PORT_INFO => "ClassPortInfo",
        attr::REQ => "REQ",
        attr::MRA => "MRA",
        attr::REJ => "REJ",
        attr::REP => "REP",
        attr::RTU => "RTU",
        attr::DREQ => "DREQ",
        attr::DREP => "DREP",
        attr::SIDR_REQ => "SIDR_REQ",
        attr::SIDR_REP => "SIDR_REP",
        attr::LAP => "LAP",
        attr::APR => "APR",
        _ => "?",
    }
}

/// A whole CM MAD: header and message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmMadRepr<'a> {
    /// The MAD header. [`CmMadRepr::emit`] writes the message's attribute
    /// ID whatever `header.attr_id` says.
    pub header: MadHeaderRepr,
    /// The message.
    pub msg: CmMsg<'a>,
}

impl<'a> CmMadRepr<'a> {
    /// A CM MAD as Linux sends it (version 1, class CM version 2, method
    /// Send, status 0).
    pub const fn new(tid: u64, attr_mod: u32, msg: CmMsg<'a>) -> CmMadRepr<'a> {
        CmMadRepr {
            header: MadHeaderRepr::cm(msg.attr_id(), tid, attr_mod),
            msg,
        }
    }

    /// Parses a MAD of the CM class (any class version and method: the
    /// receiver judges those) whose attribute is one of the nine messages.
    pub fn parse(mad: &'a [u8]) -> Result<CmMadRepr<'a>> {
        let view = Mad::new_checked(mad)?;
        let header = MadHeaderRepr::parse(&view)?;
        if header.mgmt_class != crate::mad::class::CM {
            return Err(Error::Malformed);
        }
        let msg = CmMsg::parse(header.attr_id, &mad[MAD_HEADER_LEN..MAD_LEN])?;
        Ok(CmMadRepr { header, msg })
    }

    /// Length of the emitted MAD.
    pub const fn buffer_len(&self) -> usize {
        MAD_LEN
    }

    /// Writes the 256-byte MAD.
    pub fn emit(&self, out: &mut [u8]) -> Result<()> {
        let mut mad = Mad::new_checked(out)?;
        MadHeaderRepr {
            attr_id: self.msg.attr_id(),
            ..self.header
        }
        .emit(&mut mad)?;
        self.msg.emit(mad.data_mut())
    }

    /// The MAD as a new array.
    pub fn to_bytes(&self) -> Result<[u8; MAD_LEN]> {
        let mut out = [0u8; MAD_LEN];
        self.emit(&mut out)?;
        Ok(out)
    }
}

/// Q_Key, P_Key, GID helpers shared by the message files.
pub(crate) mod loc {
    use super::*;

    /// A Q_Key.
    #[derive(Clone, Copy)]
    pub(crate) struct QKeyAt(pub usize);
    impl Loc for QKeyAt {
        type V = QKey;
        fn get(self, b: &[u8]) -> QKey {
            QKey(be::u32(b, self.0))
        }
        fn set(self, b: &mut [u8], v: QKey) {
            be::set_u32(b, self.0, v.0);
        }
    }

    /// A P_Key.
    #[derive(Clone, Copy)]
    pub(crate) struct PKeyAt(pub usize);
    impl Loc for PKeyAt {
        type V = PKey;
        fn get(self, b: &[u8]) -> PKey {
            PKey(be::u16(b, self.0))
        }
        fn set(self, b: &mut [u8], v: PKey) {
            be::set_u16(b, self.0, v.0);
        }
    }

    /// A service ID.
    #[derive(Clone, Copy)]
    pub(crate) struct SidAt(pub usize);
    impl Loc for SidAt {
        type V = ServiceId;
        fn get(self, b: &[u8]) -> ServiceId {
            ServiceId(be::u64(b, self.0))
        }
        fn set(self, b: &mut [u8], v: ServiceId) {
            be::set_u64(b, self.0, v.0);
        }
    }
}
