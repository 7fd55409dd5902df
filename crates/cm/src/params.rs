//! What the driver passes in: the parameters of a REQ, REP, SIDR_REQ and
//! SIDR_REP (Linux `ib_cm_req_param`, `ib_cm_rep_param`, …). The CM checks
//! them against the field widths and private-data sizes of the messages
//! and fills in what belongs to it (comm IDs, TIDs, its CA GUID, the Target
//! ACK Delay, the Local ACK Timeout).

use softrdma_wire::cm::{ServiceId, SidrStatus};
use softrdma_wire::{Gid, PKey, Psn, QKey, Qpn};
use std::net::IpAddr;

/// A path, as rdma_cm's route resolution leaves it in `path_rec[0]` (over
/// RoCE: built from the two IP addresses, no subnet administrator).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Path {
    /// Our GID (the source IP).
    pub sgid: Gid,
    /// The peer's GID: CM MADs go to its IP.
    pub dgid: Gid,
    /// Flow label (20 bits; rdma_cm hashes the two ports for RoCE v2).
    pub flow_label: u32,
    /// Traffic class (the TOS option, 0 by default).
    pub traffic_class: u8,
    /// Hop limit (64 for a routed RoCE v2 path).
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Partition key (0xFFFF over RoCE).
    pub pkey: PKey,
    /// Path MTU code (1 = 256 … 5 = 4096).
    pub mtu: u8,
    /// Static rate (6 bits; 0 = port current).
    pub rate: u8,
    /// Packet life time (5-bit IBA time; 18 from Linux 6.1's rdma_cm).
    pub packet_life_time: u8,
}

impl Path {
    /// The peer's address, where CM MADs go.
    pub fn peer(&self) -> IpAddr {
        self.dgid.to_ip()
    }
}

/// The transport a REQ asks for (UD goes through SIDR instead).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connection.
    Rc,
    /// Unreliable connection.
    Uc,
}

impl QpType {
    /// The REQ's Transport Service Type field.
    pub const fn transport_service_type(self) -> u8 {
        match self {
            QpType::Rc => 0,
            QpType::Uc => 1,
        }
    }
    /// The QP type of a REQ's Transport Service Type (RD and the extended
    /// types are not supported).
    pub const fn from_transport_service_type(t: u8) -> Option<QpType> {
        match t {
            0 => Some(QpType::Rc),
            1 => Some(QpType::Uc),
            _ => None,
        }
    }
}

/// Enhanced connection establishment options: the Vendor ID field and
/// the MAD's attribute modifier (0 with rxe).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Ece {
    /// Vendor ID (24 bits).
    pub vendor_id: u32,
    /// Attribute modifier of the REQ/REP/SIDR_REP MAD.
    pub attr_mod: u32,
}

/// What [`Cm::connect`](crate::Cm::connect) sends in a REQ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReqParams {
    /// Service ID of the listener.
    pub service_id: ServiceId,
    /// Our QP.
    pub qpn: Qpn,
    /// RC or UC.
    pub qp_type: QpType,
    /// Our receive PSN (the peer's send PSN).
    pub starting_psn: Psn,
    /// RDMA READ/atomics we accept at once.
    pub responder_resources: u8,
    /// RDMA READ/atomics we issue at once.
    pub initiator_depth: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// Transport retries the peer's QP is to use (3 bits).
    pub retry_count: u8,
    /// RNR retries the peer's QP is to use (3 bits).
    pub rnr_retry_count: u8,
    /// Our QP uses an SRQ.
    pub srq: bool,
    /// The primary path; MADs go to its `dgid`.
    pub path: Path,
    /// How long the peer's CM may take to answer (5-bit IBA time).
    pub remote_cm_response_timeout: u8,
    /// How long we take to answer (5-bit IBA time): the peer's REP timer.
    pub local_cm_response_timeout: u8,
    /// Retransmissions of the REQ, and of the peer's REP (4 bits).
    pub max_cm_retries: u8,
    /// Private data, at most 92 bytes (rdma_cm: its 36-byte header, then
    /// up to 56 of the user's).
    pub private_data: Vec<u8>,
    /// ECE.
    pub ece: Ece,
}

/// What [`Cm::accept`](crate::Cm::accept) sends in a REP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepParams {
    /// Our QP.
    pub qpn: Qpn,
    /// Our receive PSN (the requester's send PSN).
    pub starting_psn: Psn,
    /// RDMA READ/atomics we accept at once.
    pub responder_resources: u8,
    /// RDMA READ/atomics we issue at once.
    pub initiator_depth: u8,
    /// Failover accepted (2 bits; 0).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// RNR retries the requester's QP is to use (3 bits).
    pub rnr_retry_count: u8,
    /// Our QP uses an SRQ.
    pub srq: bool,
    /// Private data, at most 196 bytes.
    pub private_data: Vec<u8>,
    /// ECE.
    pub ece: Ece,
}

/// What [`Cm::sidr_request`](crate::Cm::sidr_request) sends in a SIDR_REQ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidrReqParams {
    /// The peer's address.
    pub peer: IpAddr,
    /// Service ID.
    pub service_id: ServiceId,
    /// Partition key.
    pub pkey: PKey,
    /// Time to wait for the SIDR_REP, per try (rdma_cm: 4096 ms).
    pub timeout_ms: u64,
    /// Retransmissions (rdma_cm: 15).
    pub max_cm_retries: u8,
    /// Private data, at most 216 bytes (rdma_cm: its header, then up to 180).
    pub private_data: Vec<u8>,
}

/// What [`Cm::sidr_reply`](crate::Cm::sidr_reply) sends in a SIDR_REP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidrRepParams {
    /// Status (SUCCESS, or REJECT for `rdma_reject`).
    pub status: SidrStatus,
    /// Our UD QP (0 unless SUCCESS).
    pub qpn: Qpn,
    /// Its Q_Key (rdma_cm: 0x01234567).
    pub qkey: QKey,
    /// Additional information, at most 72 bytes.
    pub info: Vec<u8>,
    /// Private data, at most 136 bytes.
    pub private_data: Vec<u8>,
    /// ECE.
    pub ece: Ece,
}
