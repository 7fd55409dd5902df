//! Management datagrams (IBA 13.4): the 256-byte MADs that QP 1 carries, and
//! their common 24-byte header.
//!
//! ```text
//!  0       BaseVersion (1)
//!  1       MgmtClass (0x07 = communication management)
//!  2       ClassVersion (2 for the CM)
//!  3       R(1) Method(7)
//!  4..6    Status
//!  6..8    ClassSpecific
//!  8..16   TransactionID
//! 16..18   AttributeID
//! 18..20   Reserved
//! 20..24   AttributeModifier
//! 24..256  class data (232 bytes)
//! ```
//!
//! Under RoCE v2 a MAD travels as the payload of a UD SEND_ONLY to QP 1 with
//! Q_Key [`GSI_QKEY`] (IBA 13.5.3); the payload is exactly [`MAD_LEN`] bytes.

use crate::{be, view, Error, Result};

/// Bytes in a MAD (IBA 13.4.1: every MAD on QP 0/1 is 256 bytes).
pub const MAD_LEN: usize = 256;
/// Bytes of the common MAD header.
pub const MAD_HEADER_LEN: usize = 24;
/// Bytes of class data after the header.
pub const MAD_DATA_LEN: usize = MAD_LEN - MAD_HEADER_LEN;
/// The only base version (IBA 13.4.2).
pub const BASE_VERSION: u8 = 1;
/// Q_Key of QP 1 (IBA 13.5.3 "well-known Q_Key" 0x80010000).
pub const GSI_QKEY: u32 = 0x8001_0000;

/// Management classes (IBA table 147) the CM side cares about.
pub mod class {
    /// Subnet management, LID routed (QP 0 only).
    pub const SUBN_LID_ROUTED: u8 = 0x01;
    /// Subnet management, directed route (QP 0 only).
    pub const SUBN_DIRECTED_ROUTE: u8 = 0x81;
    /// Subnet administration.
    pub const SUBN_ADM: u8 = 0x03;
    /// Performance management.
    pub const PERF_MGMT: u8 = 0x04;
    /// Communication management (IBA ch. 12).
    pub const CM: u8 = 0x07;
}

/// Methods (IBA table 148).
pub mod method {
    /// Get.
    pub const GET: u8 = 0x01;
    /// Set.
    pub const SET: u8 = 0x02;
    /// Send: the only method of CM messages (IBA 12.6.1).
    pub const SEND: u8 = 0x03;
    /// Trap.
    pub const TRAP: u8 = 0x05;
    /// The response bit of a method.
    pub const RESP: u8 = 0x80;
    /// GetResp.
    pub const GET_RESP: u8 = 0x81;
}

/// Status field values (IBA table 149, bits 4:2 "invalid field" codes).
pub mod status {
    /// Success.
    pub const OK: u16 = 0;
    /// The class or base version is not supported.
    pub const BAD_VERSION: u16 = 0x0004;
    /// The method is not supported.
    pub const UNSUPPORTED_METHOD: u16 = 0x0008;
    /// The method/attribute combination is not supported: what a port
    /// answers to a Get or Set that no agent takes (Linux
    /// `IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB`).
    pub const UNSUPPORTED_METHOD_ATTRIB: u16 = 0x000c;
}

/// Attribute ID of ClassPortInfo, common to every class (IBA 13.4.8.1).
pub const ATTR_CLASS_PORT_INFO: u16 = 0x0001;

mod field {
    pub const BASE_VERSION: usize = 0;
    pub const MGMT_CLASS: usize = 1;
    pub const CLASS_VERSION: usize = 2;
    pub const METHOD: usize = 3;
    pub const STATUS: usize = 4;
    pub const CLASS_SPECIFIC: usize = 6;
    pub const TID: usize = 8;
    pub const ATTR_ID: usize = 16;
    pub const RESERVED: core::ops::Range<usize> = 18..20;
    pub const ATTR_MOD: usize = 20;
    pub const DATA: core::ops::Range<usize> = super::MAD_HEADER_LEN..super::MAD_LEN;
}

view!(
    /// A view of a whole 256-byte MAD. Bytes after the first 256 are not
    /// part of it.
    Mad,
    MAD_LEN
);

impl<T: AsRef<[u8]>> Mad<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// BaseVersion.
    pub fn base_version(&self) -> u8 {
        self.b()[field::BASE_VERSION]
    }
    /// MgmtClass.
    pub fn mgmt_class(&self) -> u8 {
        self.b()[field::MGMT_CLASS]
    }
    /// ClassVersion.
    pub fn class_version(&self) -> u8 {
        self.b()[field::CLASS_VERSION]
    }
    /// Method, with the response bit.
    pub fn method(&self) -> u8 {
        self.b()[field::METHOD]
    }
    /// Status.
    pub fn status(&self) -> u16 {
        be::u16(self.b(), field::STATUS)
    }
    /// ClassSpecific.
    pub fn class_specific(&self) -> u16 {
        be::u16(self.b(), field::CLASS_SPECIFIC)
    }
    /// TransactionID.
    pub fn tid(&self) -> u64 {
        be::u64(self.b(), field::TID)
    }
    /// AttributeID.
    pub fn attr_id(&self) -> u16 {
        be::u16(self.b(), field::ATTR_ID)
    }
    /// AttributeModifier.
    pub fn attr_mod(&self) -> u32 {
        be::u32(self.b(), field::ATTR_MOD)
    }
    /// The 232 bytes of class data.
    pub fn data(&self) -> &[u8] {
        &self.b()[field::DATA]
    }
    /// The 256 bytes of the MAD.
    pub fn bytes(&self) -> &[u8] {
        &self.b()[..MAD_LEN]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Mad<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets BaseVersion.
    pub fn set_base_version(&mut self, v: u8) {
        self.bm()[field::BASE_VERSION] = v;
    }
    /// Sets MgmtClass.
    pub fn set_mgmt_class(&mut self, v: u8) {
        self.bm()[field::MGMT_CLASS] = v;
    }
    /// Sets ClassVersion.
    pub fn set_class_version(&mut self, v: u8) {
        self.bm()[field::CLASS_VERSION] = v;
    }
    /// Sets Method.
    pub fn set_method(&mut self, v: u8) {
        self.bm()[field::METHOD] = v;
    }
    /// Sets Status.
    pub fn set_status(&mut self, v: u16) {
        be::set_u16(self.bm(), field::STATUS, v);
    }
    /// Sets ClassSpecific.
    pub fn set_class_specific(&mut self, v: u16) {
        be::set_u16(self.bm(), field::CLASS_SPECIFIC, v);
    }
    /// Sets the TransactionID.
    pub fn set_tid(&mut self, v: u64) {
        be::set_u64(self.bm(), field::TID, v);
    }
    /// Sets the AttributeID.
    pub fn set_attr_id(&mut self, v: u16) {
        be::set_u16(self.bm(), field::ATTR_ID, v);
    }
    /// Sets the AttributeModifier.
    pub fn set_attr_mod(&mut self, v: u32) {
        be::set_u32(self.bm(), field::ATTR_MOD, v);
    }
    /// The class data, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.bm()[field::DATA]
    }
}

/// The fields of a MAD header. The reserved bytes 18-19 are not kept: they
/// are ignored on receipt and sent as zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MadHeaderRepr {
    /// BaseVersion (1).
    pub base_version: u8,
    /// MgmtClass.
    pub mgmt_class: u8,
    /// ClassVersion.
    pub class_version: u8,
    /// Method, with the response bit.
    pub method: u8,
    /// Status.
    pub status: u16,
    /// ClassSpecific.
    pub class_specific: u16,
    /// TransactionID.
    pub tid: u64,
    /// AttributeID.
    pub attr_id: u16,
    /// AttributeModifier.
    pub attr_mod: u32,
}

impl MadHeaderRepr {
    /// The header of a CM message: base version 1, class CM, class version
    /// 2, method Send, status 0 (what Linux's `cm_format_mad_hdr` writes).
    pub const fn cm(attr_id: u16, tid: u64, attr_mod: u32) -> MadHeaderRepr {
        MadHeaderRepr {
            base_version: BASE_VERSION,
            mgmt_class: class::CM,
            class_version: crate::cm::CM_CLASS_VERSION,
            method: method::SEND,
            status: status::OK,
            class_specific: 0,
            tid,
            attr_id,
            attr_mod,
        }
    }

    /// Parses the header of a MAD. Any values are accepted: which classes,
    /// versions and methods make sense is the receiver's business.
    pub fn parse<T: AsRef<[u8]>>(mad: &Mad<T>) -> Result<MadHeaderRepr> {
        mad.check_len()?;
        Ok(MadHeaderRepr {
            base_version: mad.base_version(),
            mgmt_class: mad.mgmt_class(),
            class_version: mad.class_version(),
            method: mad.method(),
            status: mad.status(),
            class_specific: mad.class_specific(),
            tid: mad.tid(),
            attr_id: mad.attr_id(),
            attr_mod: mad.attr_mod(),
        })
    }

    /// Length of the emitted header.
    pub const fn buffer_len(&self) -> usize {
        MAD_HEADER_LEN
    }

    /// Writes the 24 header bytes (the class data is left alone).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, mad: &mut Mad<T>) -> Result<()> {
        mad.check_len()?;
        mad.set_base_version(self.base_version);
        mad.set_mgmt_class(self.mgmt_class);
        mad.set_class_version(self.class_version);
        mad.set_method(self.method);
        mad.set_status(self.status);
        mad.set_class_specific(self.class_specific);
        mad.set_tid(self.tid);
        mad.set_attr_id(self.attr_id);
        mad.bm()[field::RESERVED].fill(0);
        mad.set_attr_mod(self.attr_mod);
        Ok(())
    }
}

/// Checks that `bytes` is exactly one MAD: what QP 1 accepts (a shorter
/// payload is not a MAD; a longer one does not fit a QP 1 receive buffer).
pub fn check_mad_len(bytes: &[u8]) -> Result<()> {
    match bytes.len() {
        MAD_LEN => Ok(()),
        n if n < MAD_LEN => Err(Error::Truncated),
        _ => Err(Error::Malformed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The header of the REQ in rping_rdmacm.pcap frame 1.
    const GOLDEN_HDR: [u8; 24] = [
        0x01, 0x07, 0x02, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x32, 0x25, 0xfb,
        0x6b, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn parses_and_emits_the_golden_header() {
        let mut mad = [0u8; MAD_LEN];
        mad[..24].copy_from_slice(&GOLDEN_HDR);
        let r = MadHeaderRepr::parse(&Mad::new_checked(&mad[..]).unwrap()).unwrap();
        assert_eq!(r, MadHeaderRepr::cm(0x0010, 0x0000_0002_3225_fb6b, 0));
        let mut out = [0xaau8; MAD_LEN];
        r.emit(&mut Mad::new_unchecked(&mut out[..])).unwrap();
        assert_eq!(out[..24], GOLDEN_HDR);
        assert!(out[24..].iter().all(|&b| b == 0xaa), "data untouched");
    }

    #[test]
    fn reserved_bytes_are_dropped_and_lengths_checked() {
        let mut mad = [0u8; MAD_LEN];
        mad[..24].copy_from_slice(&GOLDEN_HDR);
        mad[18] = 0x12;
        mad[19] = 0x34;
        let r = MadHeaderRepr::parse(&Mad::new_unchecked(&mad[..])).unwrap();
        let mut out = mad;
        r.emit(&mut Mad::new_unchecked(&mut out[..])).unwrap();
        assert_eq!(&out[18..20], &[0, 0]);
        assert_eq!(Mad::new_checked(&mad[..255]).unwrap_err(), Error::Truncated);
        assert_eq!(check_mad_len(&mad), Ok(()));
        assert_eq!(check_mad_len(&mad[..100]), Err(Error::Truncated));
        assert_eq!(check_mad_len(&[0u8; 300]), Err(Error::Malformed));
    }
}
