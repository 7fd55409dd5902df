//! REQ, the request for communication (IBA table 106).
//!
//! ```text
//!   0  Local Communication ID
//!   4  reserved(8) Vendor ID(24)
//!   8  Service ID (64)
//!  16  Local CA GUID (64)
//!  24  reserved (32)
//!  28  Local Q_Key
//!  32  Local QPN(24) Responder Resources(8)
//!  36  Local EECN(24) Initiator Depth(8)
//!  40  Remote EECN(24) | Remote CM Response Timeout(5) Transport Service Type(2) E2E Flow Control(1)
//!  44  Starting PSN(24) | Local CM Response Timeout(5) Retry Count(3)
//!  48  Partition Key(16) | Path MTU(4) RDC Exists(1) RNR Retry Count(3) | Max CM Retries(4) SRQ(1) Extended Transport Type(3)
//!  52  primary path (44 bytes, below)
//!  96  alternate path (44 bytes; the last byte also holds SAP Supported)
//! 140  Private Data (92)
//! ```
//!
//! A path (offsets from its start):
//!
//! ```text
//!   0  Local Port LID(16) Remote Port LID(16)
//!   4  Local Port GID (128)
//!  20  Remote Port GID (128)
//!  36  Flow Label(20) reserved(6) Packet Rate(6)
//!  40  Traffic Class(8) Hop Limit(8) SL(4) Subnet Local(1) reserved(3) Local ACK Timeout(5) reserved(3)
//! ```

use super::{
    check_24, check_fits, cm_view, private_len, put_bytes, Bits, Flag, FlowLabelAt, GidAt,
    ServiceId, U16, U32, U8,
};
use crate::types::{Gid, PKey, Psn, QKey, Qpn};
use crate::Result;

mod field {
    use super::super::loc::{PKeyAt, QKeyAt, SidAt};
    use super::super::{Bits, Flag, PsnAt, QpnAt, U24, U32, U64, U8};
    use core::ops::Range;

    pub const LOCAL_COMM_ID: U32 = U32(0);
    pub const RESERVED_4: usize = 4;
    pub const VENDOR_ID: U24 = U24(5);
    pub const SERVICE_ID: SidAt = SidAt(8);
    pub const LOCAL_CA_GUID: U64 = U64(16);
    pub const RESERVED_24: Range<usize> = 24..28;
    pub const LOCAL_QKEY: QKeyAt = QKeyAt(28);
    pub const LOCAL_QPN: QpnAt = QpnAt(32);
    pub const RESPONDER_RESOURCES: U8 = U8(35);
    pub const LOCAL_EECN: U24 = U24(36);
    pub const INITIATOR_DEPTH: U8 = U8(39);
    pub const REMOTE_EECN: U24 = U24(40);
    pub const REMOTE_CM_RESPONSE_TIMEOUT: Bits = Bits::new(43, 3, 5);
    pub const TRANSPORT_SERVICE_TYPE: Bits = Bits::new(43, 1, 2);
    pub const FLOW_CONTROL: Flag = Flag(43, 0);
    pub const STARTING_PSN: PsnAt = PsnAt(44);
    pub const LOCAL_CM_RESPONSE_TIMEOUT: Bits = Bits::new(47, 3, 5);
    pub const RETRY_COUNT: Bits = Bits::new(47, 0, 3);
    pub const PARTITION_KEY: PKeyAt = PKeyAt(48);
    pub const PATH_MTU: Bits = Bits::new(50, 4, 4);
    pub const RDC_EXISTS: Flag = Flag(50, 3);
    pub const RNR_RETRY_COUNT: Bits = Bits::new(50, 0, 3);
    pub const MAX_CM_RETRIES: Bits = Bits::new(51, 4, 4);
    pub const SRQ: Flag = Flag(51, 3);
    pub const EXTENDED_TRANSPORT_TYPE: Bits = Bits::new(51, 0, 3);
    pub const PRIMARY_PATH: usize = 52;
    pub const ALTERNATE_PATH: usize = 96;
    /// SAP Supported: bit 2 of the alternate path's last byte.
    pub const SAP_SUPPORTED: Flag = Flag(139, 2);
    pub const PRIVATE_DATA: Range<usize> = 140..232;

    /// Offsets inside a path.
    pub mod path {
        pub const LOCAL_LID: usize = 0;
        pub const REMOTE_LID: usize = 2;
        pub const LOCAL_GID: usize = 4;
        pub const REMOTE_GID: usize = 20;
        /// Flow label (20 high bits), reserved (6), packet rate (6 low bits).
        pub const FLOW_LABEL: usize = 36;
        pub const PACKET_RATE: usize = 39;
        pub const TRAFFIC_CLASS: usize = 40;
        pub const HOP_LIMIT: usize = 41;
        /// SL (4 high bits), Subnet Local (bit 3), reserved (3).
        pub const SL: usize = 42;
        /// Local ACK Timeout (5 high bits), then reserved (or SAP Supported).
        pub const LOCAL_ACK_TIMEOUT: usize = 43;
        pub const LEN: usize = 44;
    }
}

/// Location of one path's fields, `base` = the path's offset in the REQ.
#[derive(Clone, Copy)]
struct PathLoc {
    local_lid: U16,
    remote_lid: U16,
    local_gid: GidAt,
    remote_gid: GidAt,
    flow_label: FlowLabelAt,
    packet_rate: Bits,
    traffic_class: U8,
    hop_limit: U8,
    sl: Bits,
    subnet_local: Flag,
    local_ack_timeout: Bits,
}

impl PathLoc {
    const fn at(base: usize) -> PathLoc {
        use field::path::*;
        PathLoc {
            local_lid: U16(base + LOCAL_LID),
            remote_lid: U16(base + REMOTE_LID),
            local_gid: GidAt(base + LOCAL_GID),
            remote_gid: GidAt(base + REMOTE_GID),
            flow_label: FlowLabelAt(base + FLOW_LABEL),
            packet_rate: Bits::new(base + PACKET_RATE, 0, 6),
            traffic_class: U8(base + TRAFFIC_CLASS),
            hop_limit: U8(base + HOP_LIMIT),
            sl: Bits::new(base + SL, 4, 4),
            subnet_local: Flag(base + SL, 3),
            local_ack_timeout: Bits::new(base + LOCAL_ACK_TIMEOUT, 3, 5),
        }
    }
}

const PRIMARY: PathLoc = PathLoc::at(field::PRIMARY_PATH);
const ALTERNATE: PathLoc = PathLoc::at(field::ALTERNATE_PATH);
const _: () = assert!(field::ALTERNATE_PATH == field::PRIMARY_PATH + field::path::LEN);
const _: () = assert!(field::PRIVATE_DATA.start == field::ALTERNATE_PATH + field::path::LEN);

cm_view! {
    /// A view of a REQ (the MAD class data).
    Req {
        /// Local Communication ID.
        local_comm_id, set_local_comm_id: u32 = field::LOCAL_COMM_ID;
        /// Vendor ID (24 bits; ECE, 0 from rxe).
        vendor_id, set_vendor_id: u32 = field::VENDOR_ID;
        /// Service ID.
        service_id, set_service_id: ServiceId = field::SERVICE_ID;
        /// Local CA GUID.
        local_ca_guid, set_local_ca_guid: u64 = field::LOCAL_CA_GUID;
        /// Local Q_Key (0 for RC).
        local_qkey, set_local_qkey: QKey = field::LOCAL_QKEY;
        /// Local QPN.
        local_qpn, set_local_qpn: Qpn = field::LOCAL_QPN;
        /// Responder Resources.
        responder_resources, set_responder_resources: u8 = field::RESPONDER_RESOURCES;
        /// Local EECN.
        local_eecn, set_local_eecn: u32 = field::LOCAL_EECN;
        /// Initiator Depth.
        initiator_depth, set_initiator_depth: u8 = field::INITIATOR_DEPTH;
        /// Remote EECN.
        remote_eecn, set_remote_eecn: u32 = field::REMOTE_EECN;
        /// Remote CM Response Timeout (5-bit IBA time).
        remote_cm_response_timeout, set_remote_cm_response_timeout: u8 = field::REMOTE_CM_RESPONSE_TIMEOUT;
        /// Transport Service Type (0 RC, 1 UC, 2 RD, 3 see extended).
        transport_service_type, set_transport_service_type: u8 = field::TRANSPORT_SERVICE_TYPE;
        /// End-to-End Flow Control.
        flow_control, set_flow_control: bool = field::FLOW_CONTROL;
        /// Starting PSN.
        starting_psn, set_starting_psn: Psn = field::STARTING_PSN;
        /// Local CM Response Timeout (5-bit IBA time).
        local_cm_response_timeout, set_local_cm_response_timeout: u8 = field::LOCAL_CM_RESPONSE_TIMEOUT;
        /// Retry Count (3 bits).
        retry_count, set_retry_count: u8 = field::RETRY_COUNT;
        /// Partition Key.
        pkey, set_pkey: PKey = field::PARTITION_KEY;
        /// Path Packet Payload MTU (code).
        path_mtu, set_path_mtu: u8 = field::PATH_MTU;
        /// RDC Exists.
        rdc_exists, set_rdc_exists: bool = field::RDC_EXISTS;
        /// RNR Retry Count (3 bits).
        rnr_retry_count, set_rnr_retry_count: u8 = field::RNR_RETRY_COUNT;
        /// Max CM Retries (4 bits).
        max_cm_retries, set_max_cm_retries: u8 = field::MAX_CM_RETRIES;
        /// SRQ.
        srq, set_srq: bool = field::SRQ;
        /// Extended Transport Type (3 bits; 1 = XRC).
        extended_transport_type, set_extended_transport_type: u8 = field::EXTENDED_TRANSPORT_TYPE;
        /// SAP Supported.
        sap_supported, set_sap_supported: bool = field::SAP_SUPPORTED;
    }
}

impl<T: AsRef<[u8]>> Req<T> {
    /// The primary path.
    pub fn primary_path(&self) -> CmPathRepr {
        CmPathRepr::read(PRIMARY, self.buffer.as_ref())
    }
    /// The alternate path (all zero when absent).
    pub fn alternate_path(&self) -> CmPathRepr {
        CmPathRepr::read(ALTERNATE, self.buffer.as_ref())
    }
    /// Private data (92 bytes).
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PRIVATE_DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Req<T> {
    /// Writes the primary path.
    pub fn set_primary_path(&mut self, p: &CmPathRepr) {
        p.write(PRIMARY, self.buffer.as_mut());
    }
    /// Writes the alternate path.
    pub fn set_alternate_path(&mut self, p: &CmPathRepr) {
        p.write(ALTERNATE, self.buffer.as_mut());
    }
    /// Private data, writable.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PRIVATE_DATA]
    }
}

/// One path of a REQ (primary or alternate).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct CmPathRepr {
    /// Local Port LID (0xFFFF, permissive, over RoCE).
    pub local_lid: u16,
    /// Remote Port LID.
    pub remote_lid: u16,
    /// Local Port GID: the requester's.
    pub local_gid: Gid,
    /// Remote Port GID: the responder's.
    pub remote_gid: Gid,
    /// Flow Label (20 bits).
    pub flow_label: u32,
    /// Packet Rate (6 bits).
    pub packet_rate: u8,
    /// Traffic Class.
    pub traffic_class: u8,
    /// Hop Limit.
    pub hop_limit: u8,
    /// SL (4 bits).
    pub sl: u8,
    /// Subnet Local.
    pub subnet_local: bool,
    /// Local ACK Timeout (5-bit IBA time).
    pub local_ack_timeout: u8,
}

impl CmPathRepr {
    fn read(l: PathLoc, b: &[u8]) -> CmPathRepr {
        use super::Loc;
        CmPathRepr {
            local_lid: l.local_lid.get(b),
            remote_lid: l.remote_lid.get(b),
            local_gid: l.local_gid.get(b),
            remote_gid: l.remote_gid.get(b),
            flow_label: l.flow_label.get(b),
            packet_rate: l.packet_rate.get(b),
            traffic_class: l.traffic_class.get(b),
            hop_limit: l.hop_limit.get(b),
            sl: l.sl.get(b),
            subnet_local: l.subnet_local.get(b),
            local_ack_timeout: l.local_ack_timeout.get(b),
        }
    }

    /// Writes every byte of the path except the bits of its last byte
    /// outside Local ACK Timeout (SAP Supported lives there).
    fn write(&self, l: PathLoc, b: &mut [u8]) {
        use super::Loc;
        l.local_lid.set(b, self.local_lid);
        l.remote_lid.set(b, self.remote_lid);
        l.local_gid.set(b, self.local_gid);
        l.remote_gid.set(b, self.remote_gid);
        // Flow label, reserved bits and rate share one word: clear it first.
        U32(l.flow_label.0).set(b, 0);
        l.flow_label.set(b, self.flow_label);
        l.packet_rate.set(b, self.packet_rate);
        l.traffic_class.set(b, self.traffic_class);
        l.hop_limit.set(b, self.hop_limit);
        U8(l.sl.byte).set(b, 0);
        l.sl.set(b, self.sl);
        l.subnet_local.set(b, self.subnet_local);
        l.local_ack_timeout.set(b, self.local_ack_timeout);
    }

    /// Whether Linux counts the path as present (`cm_req_has_alt_path`:
    /// a non-zero local LID; OPA GIDs do not occur over RoCE).
    pub const fn is_present(&self) -> bool {
        self.local_lid != 0
    }

    fn check(&self) -> Result<()> {
        if self.flow_label > 0xf_ffff {
            return Err(crate::Error::BadRepr);
        }
        check_fits(&[
            (PRIMARY.packet_rate, self.packet_rate),
            (PRIMARY.sl, self.sl),
            (PRIMARY.local_ack_timeout, self.local_ack_timeout),
        ])
    }
}

/// The fields of a REQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReqRepr<'a> {
    /// Local Communication ID (the requester's).
    pub local_comm_id: u32,
    /// Vendor ID (24 bits).
    pub vendor_id: u32,
    /// Service ID.
    pub service_id: ServiceId,
    /// Local CA GUID (the requester's node GUID).
    pub local_ca_guid: u64,
    /// Local Q_Key.
    pub local_qkey: QKey,
    /// Local QPN (the requester's QP).
    pub local_qpn: Qpn,
    /// Responder Resources: RDMA READ/atomics the requester accepts.
    pub responder_resources: u8,
    /// Local EECN (24 bits).
    pub local_eecn: u32,
    /// Initiator Depth: RDMA READ/atomics the requester will issue.
    pub initiator_depth: u8,
    /// Remote EECN (24 bits).
    pub remote_eecn: u32,
    /// Remote CM Response Timeout (5-bit IBA time).
    pub remote_cm_response_timeout: u8,
    /// Transport Service Type (2 bits).
    pub transport_service_type: u8,
    /// End-to-End Flow Control.
    pub flow_control: bool,
    /// Starting PSN: the requester's receive PSN (the responder's sq_psn).
    pub starting_psn: Psn,
    /// Local CM Response Timeout (5-bit IBA time).
    pub local_cm_response_timeout: u8,
    /// Retry Count (3 bits).
    pub retry_count: u8,
    /// Partition Key.
    pub pkey: PKey,
    /// Path MTU code (4 bits).
    pub path_mtu: u8,
    /// RDC Exists.
    pub rdc_exists: bool,
    /// RNR Retry Count (3 bits).
    pub rnr_retry_count: u8,
    /// Max CM Retries (4 bits).
    pub max_cm_retries: u8,
    /// SRQ.
    pub srq: bool,
    /// Extended Transport Type (3 bits).
    pub extended_transport_type: u8,
    /// Primary path.
    pub primary: CmPathRepr,
    /// Alternate path (all zero when absent).
    pub alternate: CmPathRepr,
    /// SAP Supported.
    pub sap_supported: bool,
    /// Private data: the whole 92-byte field when parsed; up to 92 bytes
    /// (zero-filled) when emitted.
    pub private_data: &'a [u8],
}

impl<'a> ReqRepr<'a> {
    /// Parses a REQ view.
    pub fn parse(v: &Req<&'a [u8]>) -> Result<ReqRepr<'a>> {
        v.check_len()?;
        let b: &'a [u8] = v.into_inner();
        Ok(ReqRepr {
            local_comm_id: v.local_comm_id(),
            vendor_id: v.vendor_id(),
            service_id: v.service_id(),
            local_ca_guid: v.local_ca_guid(),
            local_qkey: v.local_qkey(),
            local_qpn: v.local_qpn(),
            responder_resources: v.responder_resources(),
            local_eecn: v.local_eecn(),
            initiator_depth: v.initiator_depth(),
            remote_eecn: v.remote_eecn(),
            remote_cm_response_timeout: v.remote_cm_response_timeout(),
            transport_service_type: v.transport_service_type(),
            flow_control: v.flow_control(),
            starting_psn: v.starting_psn(),
            local_cm_response_timeout: v.local_cm_response_timeout(),
            retry_count: v.retry_count(),
            pkey: v.pkey(),
            path_mtu: v.path_mtu(),
            rdc_exists: v.rdc_exists(),
            rnr_retry_count: v.rnr_retry_count(),
            max_cm_retries: v.max_cm_retries(),
            srq: v.srq(),
            extended_transport_type: v.extended_transport_type(),
            primary: v.primary_path(),
            alternate: v.alternate_path(),
            sap_supported: v.sap_supported(),
            private_data: &b[field::PRIVATE_DATA],
        })
    }

    /// The same fields with other private data (e.g. a copy the caller
    /// owns, to keep the message past the buffer it was parsed from).
    pub fn with_private_data<'b>(&self, private_data: &'b [u8]) -> ReqRepr<'b> {
        ReqRepr {
            local_comm_id: self.local_comm_id,
            vendor_id: self.vendor_id,
            service_id: self.service_id,
            local_ca_guid: self.local_ca_guid,
            local_qkey: self.local_qkey,
            local_qpn: self.local_qpn,
            responder_resources: self.responder_resources,
            local_eecn: self.local_eecn,
            initiator_depth: self.initiator_depth,
            remote_eecn: self.remote_eecn,
            remote_cm_response_timeout: self.remote_cm_response_timeout,
            transport_service_type: self.transport_service_type,
            flow_control: self.flow_control,
            starting_psn: self.starting_psn,
            local_cm_response_timeout: self.local_cm_response_timeout,
            retry_count: self.retry_count,
            pkey: self.pkey,
            path_mtu: self.path_mtu,
            rdc_exists: self.rdc_exists,
            rnr_retry_count: self.rnr_retry_count,
            max_cm_retries: self.max_cm_retries,
            srq: self.srq,
            extended_transport_type: self.extended_transport_type,
            primary: self.primary,
            alternate: self.alternate,
            sap_supported: self.sap_supported,
            private_data,
        }
    }

    /// Length of the emitted message.
    pub const fn buffer_len(&self) -> usize {
        crate::mad::MAD_DATA_LEN
    }

    /// Writes every byte of the message.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Req<T>) -> Result<()> {
        v.check_len()?;
        check_24(self.vendor_id)?;
        check_24(self.local_eecn)?;
        check_24(self.remote_eecn)?;
        check_fits(&[
            (
                field::REMOTE_CM_RESPONSE_TIMEOUT,
                self.remote_cm_response_timeout,
            ),
            (field::TRANSPORT_SERVICE_TYPE, self.transport_service_type),
            (
                field::LOCAL_CM_RESPONSE_TIMEOUT,
                self.local_cm_response_timeout,
            ),
            (field::RETRY_COUNT, self.retry_count),
            (field::PATH_MTU, self.path_mtu),
            (field::RNR_RETRY_COUNT, self.rnr_retry_count),
            (field::MAX_CM_RETRIES, self.max_cm_retries),
            (field::EXTENDED_TRANSPORT_TYPE, self.extended_transport_type),
        ])?;
        self.primary.check()?;
        self.alternate.check()?;
        if self.private_data.len() > private_len::REQ {
            return Err(crate::Error::BadRepr);
        }
        v.bytes_mut().fill(0);
        v.set_local_comm_id(self.local_comm_id);
        v.set_vendor_id(self.vendor_id);
        v.set_service_id(self.service_id);
        v.set_local_ca_guid(self.local_ca_guid);
        v.set_local_qkey(self.local_qkey);
        v.set_local_qpn(self.local_qpn);
        v.set_responder_resources(self.responder_resources);
        v.set_local_eecn(self.local_eecn);
        v.set_initiator_depth(self.initiator_depth);
        v.set_remote_eecn(self.remote_eecn);
        v.set_remote_cm_response_timeout(self.remote_cm_response_timeout);
        v.set_transport_service_type(self.transport_service_type);
        v.set_flow_control(self.flow_control);
        v.set_starting_psn(self.starting_psn);
        v.set_local_cm_response_timeout(self.local_cm_response_timeout);
        v.set_retry_count(self.retry_count);
        v.set_pkey(self.pkey);
        v.set_path_mtu(self.path_mtu);
        v.set_rdc_exists(self.rdc_exists);
        v.set_rnr_retry_count(self.rnr_retry_count);
        v.set_max_cm_retries(self.max_cm_retries);
        v.set_srq(self.srq);
        v.set_extended_transport_type(self.extended_transport_type);
        v.set_primary_path(&self.primary);
        v.set_alternate_path(&self.alternate);
        v.set_sap_supported(self.sap_supported);
        put_bytes(v.private_data_mut(), self.private_data)
    }
}

// Reserved bytes are named for the record; emit clears the whole message.
const _: (usize, core::ops::Range<usize>) = (field::RESERVED_4, field::RESERVED_24);
