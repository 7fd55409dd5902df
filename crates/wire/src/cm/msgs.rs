//! MRA, REJ, REP, RTU, DREQ and DREP (IBA tables 107, 108, 110-113).
//!
//! ```text
//! MRA   0 Local Comm ID  4 Remote Comm ID  8 Message MRAed(2) rsv(6)
//!       9 Service Timeout(5) rsv(3)  10..232 Private Data (222)
//! REJ   0 Local Comm ID  4 Remote Comm ID  8 Message REJected(2) rsv(6)
//!       9 Reject Info Length(7) rsv(1)  10 Reason(16)  12..84 ARI (72)
//!       84..232 Private Data (148)
//! REP   0 Local Comm ID  4 Remote Comm ID  8 Local Q_Key
//!      12 Local QPN(24) Vendor ID[23:16]  16 Local EECN(24) Vendor ID[15:8]
//!      20 Starting PSN(24) Vendor ID[7:0]  24 Responder Resources
//!      25 Initiator Depth  26 Target ACK Delay(5) Failover Accepted(2) E2E Flow Control(1)
//!      27 RNR Retry Count(3) SRQ(1) rsv(4)  28 Local CA GUID  36..232 Private Data (196)
//! RTU   0 Local Comm ID  4 Remote Comm ID  8..232 Private Data (224)
//! DREQ  0 Local Comm ID  4 Remote Comm ID  8 Remote QPN/EECN(24) rsv(8)
//!      12..232 Private Data (220)
//! DREP  0 Local Comm ID  4 Remote Comm ID  8..232 Private Data (224)
//! ```

use super::{
    check_24, check_fits, cm_view, private_len, put_bytes, MsgRef, RejReason, REJ_ARI_LEN,
};
use crate::mad::MAD_DATA_LEN;
use crate::types::{Psn, QKey, Qpn};
use crate::{Error, Result};

/// Offsets shared by every connected-mode message.
mod common {
    use super::super::U32;
    pub const LOCAL_COMM_ID: U32 = U32(0);
    pub const REMOTE_COMM_ID: U32 = U32(4);
}

// ---------------------------------------------------------------- MRA

mod mra {
    use super::super::Bits;
    use core::ops::Range;
    pub const MESSAGE_MRAED: Bits = Bits::new(8, 6, 2);
    pub const SERVICE_TIMEOUT: Bits = Bits::new(9, 3, 5);
    pub const PRIVATE_DATA: Range<usize> = 10..232;
}

cm_view! {
    /// A view of an MRA.
    Mra {
        /// Local Communication ID (the sender's).
        local_comm_id, set_local_comm_id: u32 = common::LOCAL_COMM_ID;
        /// Remote Communication ID.
        remote_comm_id, set_remote_comm_id: u32 = common::REMOTE_COMM_ID;
        /// Message MRAed (2 bits).
        message_mraed_raw, set_message_mraed_raw: u8 = mra::MESSAGE_MRAED;
        /// Service Timeout (5-bit IBA time).
        service_timeout, set_service_timeout: u8 = mra::SERVICE_TIMEOUT;
    }
}

impl<T: AsRef<[u8]>> Mra<T> {
    /// Which message is acknowledged.
    pub fn message_mraed(&self) -> MsgRef {
        MsgRef(self.message_mraed_raw())
    }
    /// Private data (222 bytes).
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[mra::PRIVATE_DATA]
    }
}

/// The fields of an MRA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MraRepr<'a> {
    /// Local Communication ID (the sender's).
    pub local_comm_id: u32,
    /// Remote Communication ID.
    pub remote_comm_id: u32,
    /// Message MRAed.
    pub message_mraed: MsgRef,
    /// Service Timeout (5-bit IBA time): how much longer to wait.
    pub service_timeout: u8,
    /// Private data (222 bytes when parsed).
    pub private_data: &'a [u8],
}

impl<'a> MraRepr<'a> {
    /// Parses an MRA view.
    pub fn parse(v: &Mra<&'a [u8]>) -> Result<MraRepr<'a>> {
        v.check_len()?;
        let b: &'a [u8] = v.into_inner();
        Ok(MraRepr {
            local_comm_id: v.local_comm_id(),
            remote_comm_id: v.remote_comm_id(),
            message_mraed: v.message_mraed(),
            service_timeout: v.service_timeout(),
            private_data: &b[mra::PRIVATE_DATA],
        })
    }
    /// Length of the emitted message.
    pub const fn buffer_len(&self) -> usize {
        MAD_DATA_LEN
    }
    /// Writes every byte of the message.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Mra<T>) -> Result<()> {
        v.check_len()?;
        check_fits(&[
            (mra::MESSAGE_MRAED, self.message_mraed.0),
            (mra::SERVICE_TIMEOUT, self.service_timeout),
        ])?;
        check_private(self.private_data, private_len::MRA)?;
        v.bytes_mut().fill(0);
        v.set_local_comm_id(self.local_comm_id);
        v.set_remote_comm_id(self.remote_comm_id);
        v.set_message_mraed_raw(self.message_mraed.0);
        v.set_service_timeout(self.service_timeout);
        put_bytes(&mut v.bytes_mut()[mra::PRIVATE_DATA], self.private_data)
    }
}

// ---------------------------------------------------------------- REJ

mod rej {
    use super::super::{Bits, U16};
    use core::ops::Range;
    pub const MESSAGE_REJECTED: Bits = Bits::new(8, 6, 2);
    pub const REJECT_INFO_LENGTH: Bits = Bits::new(9, 1, 7);
    pub const REASON: U16 = U16(10);
    pub const ARI: Range<usize> = 12..84;
    pub const PRIVATE_DATA: Range<usize> = 84..232;
}

cm_view! {
    /// A view of a REJ.
    Rej {
        /// Local Communication ID (the sender's; 0 when it rejects a REQ
        /// it kept no state for).
        local_comm_id, set_local_comm_id: u32 = common::LOCAL_COMM_ID;
        /// Remote Communication ID.
        remote_comm_id, set_remote_comm_id: u32 = common::REMOTE_COMM_ID;
        /// Message REJected (2 bits).
        message_rejected_raw, set_message_rejected_raw: u8 = rej::MESSAGE_REJECTED;
        /// Reject Info Length (7 bits): meaningful ARI bytes.
        reject_info_len, set_reject_info_len: u8 = rej::REJECT_INFO_LENGTH;
        /// Reason (raw).
        reason_raw, set_reason_raw: u16 = rej::REASON;
    }
}

impl<T: AsRef<[u8]>> Rej<T> {
    /// Which message is rejected.
    pub fn message_rejected(&self) -> MsgRef {
        MsgRef(self.message_rejected_raw())
    }
    /// The reason.
    pub fn reason(&self) -> RejReason {
        RejReason(self.reason_raw())
    }
    /// Additional Rejection Information (72 bytes).
    pub fn ari(&self) -> &[u8] {
        &self.buffer.as_ref()[rej::ARI]
    }
    /// Private data (148 bytes).
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[rej::PRIVATE_DATA]
    }
}

/// The fields of a REJ.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RejRepr<'a> {
    /// Local Communication ID (the sender's).
    pub local_comm_id: u32,
    /// Remote Communication ID.
    pub remote_comm_id: u32,
    /// Message REJected.
    pub message_rejected: MsgRef,
    /// Reject Info Length (7 bits).
    pub reject_info_len: u8,
    /// Reason.
    pub reason: RejReason,
    /// Additional Rejection Information (72 bytes when parsed).
    pub ari: &'a [u8],
    /// Private data (148 bytes when parsed).
    pub private_data: &'a [u8],
}

impl<'a> RejRepr<'a> {
    /// Parses a REJ view.
    pub fn parse(v: &Rej<&'a [u8]>) -> Result<RejRepr<'a>> {
        v.check_len()?;
        let b: &'a [u8] = v.into_inner();
        Ok(RejRepr {
            local_comm_id: v.local_comm_id(),
            remote_comm_id: v.remote_comm_id(),
            message_rejected: v.message_rejected(),
            reject_info_len: v.reject_info_len(),
            reason: v.reason(),
            ari: &b[rej::ARI],
            private_data: &b[rej::PRIVATE_DATA],
        })
    }
    /// The meaningful ARI bytes (at most the field).
    pub fn ari_bytes(&self) -> &'a [u8] {
        &self.ari[..(self.reject_info_len as usize).min(self.ari.len())]
    }
    /// Length of the emitted message.
    pub const fn buffer_len(&self) -> usize {
        MAD_DATA_LEN
    }
    /// Writes every byte of the message.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Rej<T>) -> Result<()> {
        v.check_len()?;
        check_fits(&[
            (rej::MESSAGE_REJECTED, self.message_rejected.0),
            (rej::REJECT_INFO_LENGTH, self.reject_info_len),
        ])?;
        check_private(self.ari, REJ_ARI_LEN)?;
        check_private(self.private_data, private_len::REJ)?;
        v.bytes_mut().fill(0);
        v.set_local_comm_id(self.local_comm_id);
        v.set_remote_comm_id(self.remote_comm_id);
        v.set_message_rejected_raw(self.message_rejected.0);
        v.set_reject_info_len(self.reject_info_len);
        v.set_reason_raw(self.reason.0);
        put_bytes(&mut v.bytes_mut()[rej::ARI], self.ari)?;
        put_bytes(&mut v.bytes_mut()[rej::PRIVATE_DATA], self.private_data)
    }
}

// ---------------------------------------------------------------- REP

mod rep {
    use super::super::loc::QKeyAt;
    use super::super::{Bits, Flag, PsnAt, QpnAt, U24, U64, U8};
    use core::ops::Range;
    pub const LOCAL_QKEY: QKeyAt = QKeyAt(8);
    pub const LOCAL_QPN: QpnAt = QpnAt(12);
    pub const VENDOR_ID_H: U8 = U8(15);
    pub const LOCAL_EECN: U24 = U24(16);
    pub const VENDOR_ID_M: U8 = U8(19);
    pub const STARTING_PSN: PsnAt = PsnAt(20);
    pub const VENDOR_ID_L: U8 = U8(23);
    pub const RESPONDER_RESOURCES: U8 = U8(24);
    pub const INITIATOR_DEPTH: U8 = U8(25);
    pub const TARGET_ACK_DELAY: Bits = Bits::new(26, 3, 5);
    pub const FAILOVER_ACCEPTED: Bits = Bits::new(26, 1, 2);
    pub const FLOW_CONTROL: Flag = Flag(26, 0);
    pub const RNR_RETRY_COUNT: Bits = Bits::new(27, 5, 3);
    pub const SRQ: Flag = Flag(27, 4);
    pub const LOCAL_CA_GUID: U64 = U64(28);
    pub const PRIVATE_DATA: Range<usize> = 36..232;
}

cm_view! {
    /// A view of a REP.
    Rep {
        /// Local Communication ID (the responder's).
        local_comm_id, set_local_comm_id: u32 = common::LOCAL_COMM_ID;
        /// Remote Communication ID (the REQ's Local Communication ID).
        remote_comm_id, set_remote_comm_id: u32 = common::REMOTE_COMM_ID;
        /// Local Q_Key.
        local_qkey, set_local_qkey: QKey = rep::LOCAL_QKEY;
        /// Local QPN (the responder's QP).
        local_qpn, set_local_qpn: Qpn = rep::LOCAL_QPN;
        /// Vendor ID bits 23:16.
        vendor_id_h, set_vendor_id_h: u8 = rep::VENDOR_ID_H;
        /// Local EECN (24 bits).
        local_eecn, set_local_eecn: u32 = rep::LOCAL_EECN;
        /// Vendor ID bits 15:8.
        vendor_id_m, set_vendor_id_m: u8 = rep::VENDOR_ID_M;
        /// Starting PSN: the responder's receive PSN.
        starting_psn, set_starting_psn: Psn = rep::STARTING_PSN;
        /// Vendor ID bits 7:0.
        vendor_id_l, set_vendor_id_l: u8 = rep::VENDOR_ID_L;
        /// Responder Resources.
        responder_resources, set_responder_resources: u8 = rep::RESPONDER_RESOURCES;
        /// Initiator Depth.
        initiator_depth, set_initiator_depth: u8 = rep::INITIATOR_DEPTH;
        /// Target ACK Delay (5 bits).
        target_ack_delay, set_target_ack_delay: u8 = rep::TARGET_ACK_DELAY;
        /// Failover Accepted (2 bits).
        failover_accepted, set_failover_accepted: u8 = rep::FAILOVER_ACCEPTED;
        /// End-to-End Flow Control.
        flow_control, set_flow_control: bool = rep::FLOW_CONTROL;
        /// RNR Retry Count (3 bits).
        rnr_retry_count, set_rnr_retry_count: u8 = rep::RNR_RETRY_COUNT;
        /// SRQ.
        srq, set_srq: bool = rep::SRQ;
        /// Local CA GUID.
        local_ca_guid, set_local_ca_guid: u64 = rep::LOCAL_CA_GUID;
    }
}

impl<T: AsRef<[u8]>> Rep<T> {
    /// The 24-bit Vendor ID from its three bytes.
    pub fn vendor_id(&self) -> u32 {
        (self.vendor_id_h() as u32) << 16
            | (self.vendor_id_m() as u32) << 8
            | self.vendor_id_l() as u32
    }
    /// Private data (196 bytes).
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[rep::PRIVATE_DATA]
    }
}

/// The fields of a REP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RepRepr<'a> {
    /// Local Communication ID (the responder's).
    pub local_comm_id: u32,
    /// Remote Communication ID (the requester's).
    pub remote_comm_id: u32,
    /// Local Q_Key.
    pub local_qkey: QKey,
    /// Local QPN (the responder's QP).
    pub local_qpn: Qpn,
    /// Local EECN (24 bits).
    pub local_eecn: u32,
    /// Starting PSN: the responder's receive PSN (the requester's sq_psn).
    pub starting_psn: Psn,
    /// Vendor ID (24 bits).
    pub vendor_id: u32,
    /// Responder Resources: RDMA READ/atomics the responder accepts.
    pub responder_resources: u8,
    /// Initiator Depth: RDMA READ/atomics the responder will issue.
    pub initiator_depth: u8,
    /// Target ACK Delay (5 bits).
    pub target_ack_delay: u8,
    /// Failover Accepted (2 bits).
    pub failover_accepted: u8,
    /// End-to-End Flow Control.
    pub flow_control: bool,
    /// RNR Retry Count (3 bits): what the requester's QP is to use.
    pub rnr_retry_count: u8,
    /// SRQ.
    pub srq: bool,
    /// Local CA GUID (the responder's node GUID).
    pub local_ca_guid: u64,
    /// Private data (196 bytes when parsed).
    pub private_data: &'a [u8],
}

impl<'a> RepRepr<'a> {
    /// Parses a REP view.
    pub fn parse(v: &Rep<&'a [u8]>) -> Result<RepRepr<'a>> {
        v.check_len()?;
        let b: &'a [u8] = v.into_inner();
        Ok(RepRepr {
            local_comm_id: v.local_comm_id(),
            remote_comm_id: v.remote_comm_id(),
            local_qkey: v.local_qkey(),
            local_qpn: v.local_qpn(),
            local_eecn: v.local_eecn(),
            starting_psn: v.starting_psn(),
            vendor_id: v.vendor_id(),
            responder_resources: v.responder_resources(),
            initiator_depth: v.initiator_depth(),
            target_ack_delay: v.target_ack_delay(),
            failover_accepted: v.failover_accepted(),
            flow_control: v.flow_control(),
            rnr_retry_count: v.rnr_retry_count(),
            srq: v.srq(),
            local_ca_guid: v.local_ca_guid(),
            private_data: &b[rep::PRIVATE_DATA],
        })
    }
    /// The same fields with other private data (e.g. a copy the caller
    /// owns).
    pub fn with_private_data<'b>(&self, private_data: &'b [u8]) -> RepRepr<'b> {
        RepRepr {
            local_comm_id: self.local_comm_id,
            remote_comm_id: self.remote_comm_id,
            local_qkey: self.local_qkey,
            local_qpn: self.local_qpn,
            local_eecn: self.local_eecn,
            starting_psn: self.starting_psn,
            vendor_id: self.vendor_id,
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            target_ack_delay: self.target_ack_delay,
            failover_accepted: self.failover_accepted,
            flow_control: self.flow_control,
            rnr_retry_count: self.rnr_retry_count,
            srq: self.srq,
            local_ca_guid: self.local_ca_guid,
            private_data,
        }
    }
    /// Length of the emitted message.
    pub const fn buffer_len(&self) -> usize {
        MAD_DATA_LEN
    }
    /// Writes every byte of the message.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Rep<T>) -> Result<()> {
        v.check_len()?;
        check_24(self.local_eecn)?;
        check_24(self.vendor_id)?;
        check_fits(&[
            (rep::TARGET_ACK_DELAY, self.target_ack_delay),
            (rep::FAILOVER_ACCEPTED, self.failover_accepted),
            (rep::RNR_RETRY_COUNT, self.rnr_retry_count),
        ])?;
        check_private(self.private_data, private_len::REP)?;
        v.bytes_mut().fill(0);
        v.set_local_comm_id(self.local_comm_id);
        v.set_remote_comm_id(self.remote_comm_id);
        v.set_local_qkey(self.local_qkey);
        v.set_local_qpn(self.local_qpn);
        v.set_vendor_id_h((self.vendor_id >> 16) as u8);
        v.set_local_eecn(self.local_eecn);
        v.set_vendor_id_m((self.vendor_id >> 8) as u8);
        v.set_starting_psn(self.starting_psn);
        v.set_vendor_id_l(self.vendor_id as u8);
        v.set_responder_resources(self.responder_resources);
        v.set_initiator_depth(self.initiator_depth);
        v.set_target_ack_delay(self.target_ack_delay);
        v.set_failover_accepted(self.failover_accepted);
        v.set_flow_control(self.flow_control);
        v.set_rnr_retry_count(self.rnr_retry_count);
        v.set_srq(self.srq);
        v.set_local_ca_guid(self.local_ca_guid);
        put_bytes(&mut v.bytes_mut()[rep::PRIVATE_DATA], self.private_data)
    }
}

// ------------------------------------------------- RTU, DREQ and DREP

mod rtu {
    use core::ops::Range;
    pub const PRIVATE_DATA: Range<usize> = 8..232;
}

mod dreq {
    use super::super::QpnAt;
    use core::ops::Range;
    pub const REMOTE_QPN: QpnAt = QpnAt(8);
    pub const PRIVATE_DATA: Range<usize> = 12..232;
}

mod drep {
    use core::ops::Range;
    pub const PRIVATE_DATA: Range<usize> = 8..232;
}

cm_view! {
    /// A view of an RTU.
    Rtu {
        /// Local Communication ID (the requester's).
        local_comm_id, set_local_comm_id: u32 = common::LOCAL_COMM_ID;
        /// Remote Communication ID.
        remote_comm_id, set_remote_comm_id: u32 = common::REMOTE_COMM_ID;
    }
}

cm_view! {
    /// A view of a DREQ.
    Dreq {
        /// Local Communication ID (the sender's).
        local_comm_id, set_local_comm_id: u32 = common::LOCAL_COMM_ID;
        /// Remote Communication ID.
        remote_comm_id, set_remote_comm_id: u32 = common::REMOTE_COMM_ID;
        /// Remote QPN/EECN: the receiver's QP (Linux ignores a DREQ whose
        /// value is not its local QPN).
        remote_qpn, set_remote_qpn: Qpn = dreq::REMOTE_QPN;
    }
}

cm_view! {
    /// A view of a DREP.
    Drep {
        /// Local Communication ID (the sender's).
        local_comm_id, set_local_comm_id: u32 = common::LOCAL_COMM_ID;
        /// Remote Communication ID.
        remote_comm_id, set_remote_comm_id: u32 = common::REMOTE_COMM_ID;
    }
}

/// Declares the Repr of a message that is two comm IDs, maybe one more
/// field, and private data.
macro_rules! simple_repr {
    (
        $(#[$m:meta])* $repr:ident for $view:ident, private $range:expr, $plen:expr;
        $( $(#[$fm:meta])* $f:ident: $ty:ty, $set:ident; )*
    ) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub struct $repr<'a> {
            /// Local Communication ID (the sender's).
            pub local_comm_id: u32,
            /// Remote Communication ID.
            pub remote_comm_id: u32,
            $( $(#[$fm])* pub $f: $ty, )*
            /// Private data (the whole field when parsed).
            pub private_data: &'a [u8],
        }

        impl<T: AsRef<[u8]>> $view<T> {
            /// Private data.
            pub fn private_data(&self) -> &[u8] {
                &self.buffer.as_ref()[$range]
            }
        }

        impl<'a> $repr<'a> {
            /// Parses a view.
            pub fn parse(v: &$view<&'a [u8]>) -> Result<$repr<'a>> {
                v.check_len()?;
                let b: &'a [u8] = v.into_inner();
                Ok($repr {
                    local_comm_id: v.local_comm_id(),
                    remote_comm_id: v.remote_comm_id(),
                    $( $f: v.$f(), )*
                    private_data: &b[$range],
                })
            }
            /// Length of the emitted message.
            pub const fn buffer_len(&self) -> usize {
                MAD_DATA_LEN
            }
            /// Writes every byte of the message.
            pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut $view<T>) -> Result<()> {
                v.check_len()?;
                check_private(self.private_data, $plen)?;
                v.bytes_mut().fill(0);
                v.set_local_comm_id(self.local_comm_id);
                v.set_remote_comm_id(self.remote_comm_id);
                $( v.$set(self.$f); )*
                put_bytes(&mut v.bytes_mut()[$range], self.private_data)
            }
        }
    };
}

simple_repr! {
    /// The fields of an RTU.
    RtuRepr for Rtu, private rtu::PRIVATE_DATA, private_len::RTU;
}

simple_repr! {
    /// The fields of a DREQ.
    DreqRepr for Dreq, private dreq::PRIVATE_DATA, private_len::DREQ;
    /// Remote QPN/EECN (the receiver's QP).
    remote_qpn: Qpn, set_remote_qpn;
}

simple_repr! {
    /// The fields of a DREP.
    DrepRepr for Drep, private drep::PRIVATE_DATA, private_len::DREP;
}

fn check_private(data: &[u8], max: usize) -> Result<()> {
    if data.len() > max {
        Err(Error::BadRepr)
    } else {
        Ok(())
    }
}

const _: () = assert!(rtu::PRIVATE_DATA.end - rtu::PRIVATE_DATA.start == private_len::RTU);
const _: () = assert!(dreq::PRIVATE_DATA.end - dreq::PRIVATE_DATA.start == private_len::DREQ);
const _: () = assert!(drep::PRIVATE_DATA.end - drep::PRIVATE_DATA.start == private_len::DREP);
const _: () = assert!(rep::PRIVATE_DATA.end - rep::PRIVATE_DATA.start == private_len::REP);
const _: () = assert!(rej::PRIVATE_DATA.end - rej::PRIVATE_DATA.start == private_len::REJ);
const _: () = assert!(mra::PRIVATE_DATA.end - mra::PRIVATE_DATA.start == private_len::MRA);
