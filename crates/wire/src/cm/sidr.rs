//! SIDR_REQ and SIDR_REP: service ID resolution for UD (IBA tables 119,
//! 120).
//!
//! ```text
//! SIDR_REQ  0 Request ID  4 Partition Key(16) rsv(16)  8 Service ID
//!          16..232 Private Data (216)
//! SIDR_REP  0 Request ID  4 Status  5 Additional Information Length
//!           6 Vendor ID[23:8]  8 QPN(24) Vendor ID[7:0]  12 Service ID
//!          20 Q_Key  24..96 Additional Information (72)
//!          96..232 Private Data (136)
//! ```

use super::{cm_view, private_len, put_bytes, ServiceId, SIDR_REP_INFO_LEN};
use crate::mad::MAD_DATA_LEN;
use crate::types::{PKey, QKey, Qpn};
use crate::{Error, Result};
use core::fmt;

mod req {
    use super::super::loc::{PKeyAt, SidAt};
    use super::super::U32;
    use core::ops::Range;
    pub const REQUEST_ID: U32 = U32(0);
    pub const PARTITION_KEY: PKeyAt = PKeyAt(4);
    pub const RESERVED: Range<usize> = 6..8;
    pub const SERVICE_ID: SidAt = SidAt(8);
    pub const PRIVATE_DATA: Range<usize> = 16..232;
}

mod rep {
    use super::super::loc::{QKeyAt, SidAt};
    use super::super::{QpnAt, U16, U32, U8};
    use core::ops::Range;
    pub const REQUEST_ID: U32 = U32(0);
    pub const STATUS: U8 = U8(4);
    pub const ADDITIONAL_INFO_LENGTH: U8 = U8(5);
    pub const VENDOR_ID_H: U16 = U16(6);
    pub const QPN: QpnAt = QpnAt(8);
    pub const VENDOR_ID_L: U8 = U8(11);
    pub const SERVICE_ID: SidAt = SidAt(12);
    pub const QKEY: QKeyAt = QKeyAt(20);
    pub const ADDITIONAL_INFO: Range<usize> = 24..96;
    pub const PRIVATE_DATA: Range<usize> = 96..232;
}

const _: () = assert!(req::PRIVATE_DATA.end - req::PRIVATE_DATA.start == private_len::SIDR_REQ);
const _: () = assert!(rep::PRIVATE_DATA.end - rep::PRIVATE_DATA.start == private_len::SIDR_REP);
const _: () = assert!(rep::ADDITIONAL_INFO.end - rep::ADDITIONAL_INFO.start == SIDR_REP_INFO_LEN);

cm_view! {
    /// A view of a SIDR_REQ.
    SidrReq {
        /// Request ID (the requester's comm ID).
        request_id, set_request_id: u32 = req::REQUEST_ID;
        /// Partition Key.
        pkey, set_pkey: PKey = req::PARTITION_KEY;
        /// Service ID.
        service_id, set_service_id: ServiceId = req::SERVICE_ID;
    }
}

impl<T: AsRef<[u8]>> SidrReq<T> {
    /// Private data (216 bytes).
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[req::PRIVATE_DATA]
    }
}

/// The fields of a SIDR_REQ. Bytes 6-7 are reserved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SidrReqRepr<'a> {
    /// Request ID.
    pub request_id: u32,
    /// Partition Key.
    pub pkey: PKey,
    /// Service ID.
    pub service_id: ServiceId,
    /// Private data (216 bytes when parsed).
    pub private_data: &'a [u8],
}

impl<'a> SidrReqRepr<'a> {
    /// Parses a view.
    pub fn parse(v: &SidrReq<&'a [u8]>) -> Result<SidrReqRepr<'a>> {
        v.check_len()?;
        let b: &'a [u8] = v.into_inner();
        Ok(SidrReqRepr {
            request_id: v.request_id(),
            pkey: v.pkey(),
            service_id: v.service_id(),
            private_data: &b[req::PRIVATE_DATA],
        })
    }
    /// Length of the emitted message.
    pub const fn buffer_len(&self) -> usize {
        MAD_DATA_LEN
    }
    /// Writes every byte of the message.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut SidrReq<T>) -> Result<()> {
        v.check_len()?;
        if self.private_data.len() > private_len::SIDR_REQ {
            return Err(Error::BadRepr);
        }
        v.bytes_mut().fill(0);
        v.set_request_id(self.request_id);
        v.set_pkey(self.pkey);
        v.bytes_mut()[req::RESERVED].fill(0);
        v.set_service_id(self.service_id);
        put_bytes(&mut v.bytes_mut()[req::PRIVATE_DATA], self.private_data)
    }
}

/// The status of a SIDR_REP (IBA table 120; Linux `enum ib_cm_sidr_status`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SidrStatus(pub u8);

impl SidrStatus {
    /// The QP is valid: success.
    pub const SUCCESS: SidrStatus = SidrStatus(0);
    /// Service ID not supported: nobody listens for it.
    pub const UNSUPPORTED: SidrStatus = SidrStatus(1);
    /// The service provider rejected the request (`rdma_reject` on UD).
    pub const REJECT: SidrStatus = SidrStatus(2);
    /// No QP available.
    pub const NO_QP: SidrStatus = SidrStatus(3);
    /// Redirect (ClassPortInfo in the additional information).
    pub const REDIRECT: SidrStatus = SidrStatus(4);
    /// Class version not supported.
    pub const UNSUPPORTED_VERSION: SidrStatus = SidrStatus(5);

    /// The status's name, if it has one.
    pub const fn name(self) -> Option<&'static str> {
        match self.0 {
            0 => Some("SUCCESS"),
            1 => Some("UNSUPPORTED"),
            2 => Some("REJECT"),
            3 => Some("NO_QP"),
            4 => Some("REDIRECT"),
            5 => Some("UNSUPPORTED_VERSION"),
            _ => None,
        }
    }
}

impl fmt::Debug for SidrStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
impl fmt::Display for SidrStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{}({n})", self.0),
            None => write!(f, "{}", self.0),
        }
    }
}

cm_view! {
    /// A view of a SIDR_REP.
    SidrRep {
        /// Request ID (the SIDR_REQ's).
        request_id, set_request_id: u32 = rep::REQUEST_ID;
        /// Status (raw).
        status_raw, set_status_raw: u8 = rep::STATUS;
        /// Additional Information Length.
        additional_info_len, set_additional_info_len: u8 = rep::ADDITIONAL_INFO_LENGTH;
        /// Vendor ID bits 23:8.
        vendor_id_h, set_vendor_id_h: u16 = rep::VENDOR_ID_H;
        /// QPN.
        qpn, set_qpn: Qpn = rep::QPN;
        /// Vendor ID bits 7:0.
        vendor_id_l, set_vendor_id_l: u8 = rep::VENDOR_ID_L;
        /// Service ID.
        service_id, set_service_id: ServiceId = rep::SERVICE_ID;
        /// Q_Key.
        qkey, set_qkey: QKey = rep::QKEY;
    }
}

impl<T: AsRef<[u8]>> SidrRep<T> {
    /// The status.
    pub fn status(&self) -> SidrStatus {
        SidrStatus(self.status_raw())
    }
    /// The 24-bit Vendor ID.
    pub fn vendor_id(&self) -> u32 {
        (self.vendor_id_h() as u32) << 8 | self.vendor_id_l() as u32
    }
    /// Additional Information (72 bytes).
    pub fn additional_info(&self) -> &[u8] {
        &self.buffer.as_ref()[rep::ADDITIONAL_INFO]
    }
    /// Private data (136 bytes).
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[rep::PRIVATE_DATA]
    }
}

/// The fields of a SIDR_REP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SidrRepRepr<'a> {
    /// Request ID.
    pub request_id: u32,
    /// Status.
    pub status: SidrStatus,
    /// Additional Information Length.
    pub additional_info_len: u8,
    /// Vendor ID (24 bits).
    pub vendor_id: u32,
    /// QPN of the service's UD QP.
    pub qpn: Qpn,
    /// Service ID.
    pub service_id: ServiceId,
    /// Q_Key of the service's QP.
    pub qkey: QKey,
    /// Additional Information (72 bytes when parsed).
    pub additional_info: &'a [u8],
    /// Private data (136 bytes when parsed).
    pub private_data: &'a [u8],
}

impl<'a> SidrRepRepr<'a> {
    /// Parses a view.
    pub fn parse(v: &SidrRep<&'a [u8]>) -> Result<SidrRepRepr<'a>> {
        v.check_len()?;
        let b: &'a [u8] = v.into_inner();
        Ok(SidrRepRepr {
            request_id: v.request_id(),
            status: v.status(),
            additional_info_len: v.additional_info_len(),
            vendor_id: v.vendor_id(),
            qpn: v.qpn(),
            service_id: v.service_id(),
            qkey: v.qkey(),
            additional_info: &b[rep::ADDITIONAL_INFO],
            private_data: &b[rep::PRIVATE_DATA],
        })
    }
    /// Length of the emitted message.
    pub const fn buffer_len(&self) -> usize {
        MAD_DATA_LEN
    }
    /// Writes every byte of the message.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut SidrRep<T>) -> Result<()> {
        v.check_len()?;
        if self.vendor_id > 0xff_ffff
            || self.additional_info.len() > SIDR_REP_INFO_LEN
            || self.private_data.len() > private_len::SIDR_REP
        {
            return Err(Error::BadRepr);
        }
        v.bytes_mut().fill(0);
        v.set_request_id(self.request_id);
        v.set_status_raw(self.status.0);
        v.set_additional_info_len(self.additional_info_len);
        v.set_vendor_id_h((self.vendor_id >> 8) as u16);
        v.set_qpn(self.qpn);
        v.set_vendor_id_l(self.vendor_id as u8);
        v.set_service_id(self.service_id);
        v.set_qkey(self.qkey);
        put_bytes(
            &mut v.bytes_mut()[rep::ADDITIONAL_INFO],
            self.additional_info,
        )?;
        put_bytes(&mut v.bytes_mut()[rep::PRIVATE_DATA], self.private_data)
    }
}
