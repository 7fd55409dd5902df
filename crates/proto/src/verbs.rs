//! The verbs vocabulary (IBA chapter 11): queue pair types and states,
//! attributes, work requests, work completions, access flags, async events
//! and the error type. Numeric values follow libibverbs (`verbs.h`) so the
//! C library maps them one to one.

use softrdma_wire::{PKey, Psn, QKey, Qpn, RKey};
use std::net::IpAddr;

/// Handle of a protection domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PdId(pub u32);
/// Handle of a completion queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CqId(pub u32);
/// Handle of a shared receive queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SrqId(pub u32);
/// Handle of an address handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AhId(pub u32);
/// Handle of a memory window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MwId(pub u32);
/// Handle of an XRC domain (`ibv_xrcd`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct XrcdId(pub u32);

/// Memory window type (`ibv_mw_type`, IBA 10.6.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MwType {
    /// Type 1 (IBV_MW_TYPE_1 = 1): bound with `ibv_bind_mw`, tied to its
    /// protection domain; a bind of length 0 unbinds it.
    Type1,
    /// Type 2 (IBV_MW_TYPE_2 = 2): bound by a BIND_MW work request on a QP
    /// of its protection domain and usable through that QP only;
    /// invalidated by LOCAL_INV or SEND_WITH_INV.
    Type2,
}

impl MwType {
    /// From the libibverbs number (type 3 and others: `None`).
    pub const fn from_ibv(v: u32) -> Option<Self> {
        match v {
            1 => Some(MwType::Type1),
            2 => Some(MwType::Type2),
            _ => None,
        }
    }
    /// libibverbs number.
    pub const fn to_ibv(self) -> u32 {
        match self {
            MwType::Type1 => 1,
            MwType::Type2 => 2,
        }
    }
}

/// What a BIND_MW work request binds (`ibv_mw_bind_info` plus the key).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MwBind {
    /// The window.
    pub mw: MwId,
    /// The window's new R_Key: only its low 8 bits count (IBA 10.6.7.1:
    /// the consumer owns the key byte, the device the rest).
    pub rkey: RKey,
    /// L_Key of the region the window goes onto (ignored when `length` is 0).
    pub mr_lkey: u32,
    /// First address of the window (an address of the region).
    pub addr: u64,
    /// Length; 0 unbinds a type 1 window.
    pub length: u64,
    /// Rights the window grants (`mw_access_flags`).
    pub access: Access,
}

/// The two fields of a FLUSH (`ibv_wr_flush`'s `type` and `level`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct FlushSpec {
    /// Placement type bits: 1 global visibility, 2 persistence
    /// (`IBV_FLUSH_GLOBAL`, `IBV_FLUSH_PERSISTENT`).
    pub placement_type: u8,
    /// Selectivity level: 0 the range, 1 the whole region
    /// (`IBV_FLUSH_RANGE`, `IBV_FLUSH_MR`).
    pub level: u8,
}

/// Queue pair transport type (`ibv_qp_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connected (IBV_QPT_RC = 2).
    Rc,
    /// Unreliable connected (IBV_QPT_UC = 3).
    Uc,
    /// Unreliable datagram (IBV_QPT_UD = 4).
    Ud,
    /// XRC initiator (IBV_QPT_XRC_SEND = 9, the kernel's XRC_INI): RC's
    /// requester whose requests name an XRC SRQ of the target's XRC domain
    /// in their XRCETH; no receive queue.
    XrcSend,
    /// XRC target (IBV_QPT_XRC_RECV = 10, XRC_TGT): RC's responder in an
    /// XRC domain; each request goes to the XRC SRQ its XRCETH names (that
    /// SRQ's receive WQE, CQ and protection domain); no send queue, no PD
    /// and no CQ of its own.
    XrcRecv,
}

impl QpType {
    /// RC and both XRC types: the reliable connected transport (PSNs,
    /// ACKs, retries).
    pub const fn is_reliable(self) -> bool {
        matches!(self, QpType::Rc | QpType::XrcSend | QpType::XrcRecv)
    }
    /// libibverbs number (`ibv_qp_type`).
    pub const fn to_ibv(self) -> u32 {
        match self {
            QpType::Rc => 2,
            QpType::Uc => 3,
            QpType::Ud => 4,
            QpType::XrcSend => 9,
            QpType::XrcRecv => 10,
        }
    }
}

/// Queue pair state (`ibv_qp_state`, IBA 10.3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QpState {
    /// 0: just created or reset; nothing happens.
    Reset,
    /// 1: initialized; receives may be posted.
    Init,
    /// 2: ready to receive.
    Rtr,
    /// 3: ready to send.
    Rts,
    /// 4: send queue drain.
    Sqd,
    /// 5: send queue error (UC/UD): the send queue failed, receives go on.
    Sqe,
    /// 6: error: every work request is flushed.
    Err,
}

impl QpState {
    /// libibverbs number.
    pub const fn to_ibv(self) -> u32 {
        self as u32
    }
    /// From the libibverbs number.
    pub const fn from_ibv(v: u32) -> Option<Self> {
        Some(match v {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Sqd,
            5 => QpState::Sqe,
            6 => QpState::Err,
            _ => return None,
        })
    }
}

/// Memory access rights (`ibv_access_flags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Access(pub u32);

impl Access {
    /// The local side may write (receive buffers, READ targets).
    pub const LOCAL_WRITE: Access = Access(1);
    /// Remote RDMA WRITE.
    pub const REMOTE_WRITE: Access = Access(2);
    /// Remote RDMA READ.
    pub const REMOTE_READ: Access = Access(4);
    /// Remote atomics.
    pub const REMOTE_ATOMIC: Access = Access(8);
    /// Memory windows may be bound to the region.
    pub const MW_BIND: Access = Access(16);
    /// Zero-based virtual addresses (memory windows of type 2: remote
    /// addresses are offsets from the window's start).
    pub const ZERO_BASED: Access = Access(32);
    /// On-demand paging: the region's pages are reached when an access
    /// happens, and memory that is not mapped then is an access error.
    pub const ON_DEMAND: Access = Access(1 << 6);
    /// Huge pages back the region (a hint, with `ON_DEMAND`).
    pub const HUGETLB: Access = Access(1 << 7);
    /// FLUSH with global visibility may target the region (IBA A19).
    pub const FLUSH_GLOBAL: Access = Access(1 << 8);
    /// FLUSH with persistence may target the region (IBA A19).
    pub const FLUSH_PERSISTENT: Access = Access(1 << 9);
    /// Relaxed ordering (`IBV_ACCESS_RELAXED_ORDERING`, optional: ignored).
    pub const RELAXED_ORDERING: Access = Access(1 << 20);
    /// Everything a region can grant.
    pub const ALL: Access = Access(1 | 2 | 4 | 8);
    /// Both FLUSH rights.
    pub const FLUSH: Access = Access((1 << 8) | (1 << 9));
    /// Bits softrdma accepts in `reg_mr`.
    pub const SUPPORTED: u32 =
        1 | 2 | 4 | 8 | 16 | 32 | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 20);
    /// Bits of a QP's `qp_access_flags` that mean something: the remote
    /// rights, MW_BIND and the FLUSH rights (rdma-core 56's tests set them
    /// all on every extended QP).
    pub const QP_SUPPORTED: u32 = 1 | 2 | 4 | 8 | 16 | (1 << 8) | (1 << 9);
    /// Bits `modify_qp` accepts in `qp_access_flags`: every access bit a
    /// region knows (rdma-core's ODP tests pass a region's flags,
    /// IBV_ACCESS_ON_DEMAND included; the kernel and rxe ignore the bits
    /// that do not concern a QP, and so does softrdma).
    pub const QP_ACCEPTED: u32 = Self::SUPPORTED;
    /// Bits a memory window bind may grant (rxe's `RXE_ACCESS_SUPPORTED_MW`
    /// plus the FLUSH rights): local write is accepted and means nothing
    /// for a window.
    pub const MW_SUPPORTED: u32 = 1 | 2 | 4 | 8 | 32 | (1 << 8) | (1 << 9);

    /// Union.
    pub const fn with(self, o: Access) -> Access {
        Access(self.0 | o.0)
    }
    /// All bits of `o` present.
    pub const fn contains(self, o: Access) -> bool {
        self.0 & o.0 == o.0
    }
    /// Only the bits that matter to a queue pair's remote access.
    pub const fn remote(self) -> Access {
        Access(self.0 & (2 | 4 | 8))
    }
    /// Some bit of `o` present.
    pub const fn intersects(self, o: Access) -> bool {
        self.0 & o.0 != 0
    }
}

/// Send flags (`ibv_send_flags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct SendFlags(pub u32);

impl SendFlags {
    /// Wait for prior RDMA READs and atomics to complete first.
    pub const FENCE: SendFlags = SendFlags(1);
    /// Generate a completion.
    pub const SIGNALED: SendFlags = SendFlags(2);
    /// Set the solicited-event bit.
    pub const SOLICITED: SendFlags = SendFlags(4);
    /// The data is in `SendWr::inline_data`.
    pub const INLINE: SendFlags = SendFlags(8);
    /// Union.
    pub const fn with(self, o: SendFlags) -> SendFlags {
        SendFlags(self.0 | o.0)
    }
    /// All bits of `o` present.
    pub const fn contains(self, o: SendFlags) -> bool {
        self.0 & o.0 == o.0
    }
}

/// One scatter/gather entry: a local buffer in a registered region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sge {
    /// Virtual address.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the region.
    pub lkey: u32,
}

impl Sge {
    /// `length` bytes at `addr` in the region of `lkey`.
    pub const fn new(addr: u64, length: u32, lkey: u32) -> Sge {
        Sge { addr, length, lkey }
    }
}

/// Send work request opcode (`ibv_wr_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WrOpcode {
    /// 0: RDMA WRITE.
    RdmaWrite,
    /// 1: RDMA WRITE with immediate.
    RdmaWriteWithImm,
    /// 2: SEND.
    Send,
    /// 3: SEND with immediate.
    SendWithImm,
    /// 4: RDMA READ.
    RdmaRead,
    /// 5: atomic compare and swap.
    AtomicCmpAndSwp,
    /// 6: atomic fetch and add.
    AtomicFetchAndAdd,
    /// 7: local invalidate.
    LocalInv,
    /// 8: bind a memory window.
    BindMw,
    /// 9: SEND with invalidate.
    SendWithInv,
    /// 14: FLUSH (IBA 1.5 Memory Placement Extensions).
    Flush,
    /// 15: ATOMIC WRITE (IBA 1.5 Memory Placement Extensions): 8 bytes
    /// written as one.
    AtomicWrite,
}

impl WrOpcode {
    /// libibverbs number.
    pub const fn to_ibv(self) -> u32 {
        match self {
            WrOpcode::RdmaWrite => 0,
            WrOpcode::RdmaWriteWithImm => 1,
            WrOpcode::Send => 2,
            WrOpcode::SendWithImm => 3,
            WrOpcode::RdmaRead => 4,
            WrOpcode::AtomicCmpAndSwp => 5,
            WrOpcode::AtomicFetchAndAdd => 6,
            WrOpcode::LocalInv => 7,
            WrOpcode::BindMw => 8,
            WrOpcode::SendWithInv => 9,
            WrOpcode::Flush => 14,
            WrOpcode::AtomicWrite => 15,
        }
    }
    /// From the libibverbs number.
    pub const fn from_ibv(v: u32) -> Option<Self> {
        Some(match v {
            0 => WrOpcode::RdmaWrite,
            1 => WrOpcode::RdmaWriteWithImm,
            2 => WrOpcode::Send,
            3 => WrOpcode::SendWithImm,
            4 => WrOpcode::RdmaRead,
            5 => WrOpcode::AtomicCmpAndSwp,
            6 => WrOpcode::AtomicFetchAndAdd,
            7 => WrOpcode::LocalInv,
            8 => WrOpcode::BindMw,
            9 => WrOpcode::SendWithInv,
            14 => WrOpcode::Flush,
            15 => WrOpcode::AtomicWrite,
            _ => return None,
        })
    }
    /// RDMA READ, an atomic or an ATOMIC WRITE (what may not be sent
    /// inline); with FLUSH, these count against `max_rd_atomic`
    /// ([`Self::uses_responder_resource`]).
    pub const fn is_read_or_atomic(self) -> bool {
        matches!(
            self,
            WrOpcode::RdmaRead
                | WrOpcode::AtomicCmpAndSwp
                | WrOpcode::AtomicFetchAndAdd
                | WrOpcode::AtomicWrite
        )
    }
    /// Completed by a response packet (READ response, atomic ACK, or the
    /// zero-length READ response that answers FLUSH and ATOMIC WRITE).
    pub const fn has_response(self) -> bool {
        self.is_read_or_atomic() || matches!(self, WrOpcode::Flush)
    }
    /// Takes a responder resource at the peer (IBA 9.7.5.1.3; A19 for
    /// FLUSH and ATOMIC WRITE): READ, atomics, ATOMIC WRITE and FLUSH,
    /// the requests the responder must answer again from what it saved.
    /// No more than `max_rd_atomic` of them may be outstanding, or the
    /// responder forgets one the requester may still retransmit.
    pub const fn uses_responder_resource(self) -> bool {
        self.has_response()
    }
    /// Executed by the local device alone, sending nothing (LOCAL_INV,
    /// BIND_MW).
    pub const fn is_local(self) -> bool {
        matches!(self, WrOpcode::LocalInv | WrOpcode::BindMw)
    }
    /// An atomic.
    pub const fn is_atomic(self) -> bool {
        matches!(
            self,
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
        )
    }
    /// The completion opcode of this work request.
    pub const fn wc_opcode(self) -> WcOpcode {
        match self {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => WcOpcode::Send,
            WrOpcode::RdmaRead => WcOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp => WcOpcode::CompSwap,
            WrOpcode::AtomicFetchAndAdd => WcOpcode::FetchAdd,
            WrOpcode::LocalInv => WcOpcode::LocalInv,
            WrOpcode::BindMw => WcOpcode::BindMw,
            WrOpcode::Flush => WcOpcode::Flush,
            WrOpcode::AtomicWrite => WcOpcode::AtomicWrite,
        }
    }
}

/// Where a UD send goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UdDest {
    /// Address handle.
    pub ah: AhId,
    /// Destination QP number.
    pub remote_qpn: Qpn,
    /// Q_Key; when its high bit is set the QP's own Q_Key is used instead
    /// (IBA 10.2.5).
    pub remote_qkey: QKey,
}

/// A send work request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendWr {
    /// The caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub opcode: WrOpcode,
    /// Flags: signaled, fence, solicited, inline.
    pub flags: SendFlags,
    /// Local buffers (ignored with `SendFlags::INLINE`).
    pub sg_list: Vec<Sge>,
    /// Inline payload (with `SendFlags::INLINE`): copied at post time.
    pub inline_data: Vec<u8>,
    /// Immediate data (WITH_IMM opcodes), as it appears on the wire.
    pub imm_data: u32,
    /// R_Key to invalidate (SEND_WITH_INV, LOCAL_INV).
    pub invalidate_rkey: RKey,
    /// Remote address (RDMA and atomics).
    pub remote_addr: u64,
    /// Remote key (RDMA and atomics).
    pub rkey: RKey,
    /// Compare value (compare-and-swap).
    pub compare_add: u64,
    /// Swap value (compare-and-swap); the addend of fetch-and-add is `compare_add`.
    pub swap: u64,
    /// UD destination.
    pub ud: Option<UdDest>,
    /// BIND_MW: what to bind.
    pub bind: Option<MwBind>,
    /// FLUSH: placement type and level (the length is `flush_len`).
    pub flush: FlushSpec,
    /// FLUSH: bytes from `remote_addr` (level range).
    pub flush_len: u64,
    /// XRC: the number of the XRC SRQ at the target that takes the request
    /// (`wr.qp_type.xrc.remote_srqn`, `ibv_wr_set_xrc_srqn`; 24 bits).
    pub remote_srqn: u32,
}

impl SendWr {
    /// A signaled work request with nothing filled in but the opcode.
    pub fn new(wr_id: u64, opcode: WrOpcode) -> Self {
        SendWr {
            wr_id,
            opcode,
            flags: SendFlags::SIGNALED,
            sg_list: Vec::new(),
            inline_data: Vec::new(),
            imm_data: 0,
            invalidate_rkey: RKey(0),
            remote_addr: 0,
            rkey: RKey(0),
            compare_add: 0,
            swap: 0,
            ud: None,
            bind: None,
            flush: FlushSpec::default(),
            flush_len: 0,
            remote_srqn: 0,
        }
    }
    /// A signaled one-sided request (`RdmaWrite`, `RdmaRead`, an atomic)
    /// of one SGE to `remote_addr` under `rkey`; the rest as [`Self::new`].
    pub fn rdma(wr_id: u64, opcode: WrOpcode, sge: Sge, remote_addr: u64, rkey: RKey) -> Self {
        SendWr {
            sg_list: vec![sge],
            remote_addr,
            rkey,
            ..SendWr::new(wr_id, opcode)
        }
    }
    /// Total payload length.
    pub fn length(&self) -> u64 {
        if self.flags.contains(SendFlags::INLINE) {
            self.inline_data.len() as u64
        } else {
            self.sg_list.iter().map(|s| s.length as u64).sum()
        }
    }
}

/// A receive work request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecvWr {
    /// The caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Buffers to fill.
    pub sg_list: Vec<Sge>,
}

/// Completion status (`ibv_wc_status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WcStatus {
    /// Success.
    Success = 0,
    /// Local length error: a message longer than the receive buffer, or bad SGEs.
    LocLenErr = 1,
    /// Local QP operation error.
    LocQpOpErr = 2,
    /// Local protection error: an SGE's lkey, bounds or access is wrong.
    LocProtErr = 4,
    /// Flushed: the QP entered the error state before the request ran.
    WrFlushErr = 5,
    /// Memory window bind error.
    MwBindErr = 6,
    /// Unexpected response from the responder.
    BadRespErr = 7,
    /// Local access error.
    LocAccessErr = 8,
    /// The responder NAKed: invalid request.
    RemInvReqErr = 9,
    /// The responder NAKed: remote access error.
    RemAccessErr = 10,
    /// The responder NAKed: remote operational error.
    RemOpErr = 11,
    /// Transport retries exhausted.
    RetryExcErr = 12,
    /// RNR retries exhausted.
    RnrRetryExcErr = 13,
    /// Fatal error.
    FatalErr = 19,
    /// General error.
    GeneralErr = 21,
}

/// Completion opcode (`ibv_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WcOpcode {
    /// SEND.
    Send = 0,
    /// RDMA WRITE.
    RdmaWrite = 1,
    /// RDMA READ.
    RdmaRead = 2,
    /// Compare and swap.
    CompSwap = 3,
    /// Fetch and add.
    FetchAdd = 4,
    /// Memory window bind.
    BindMw = 5,
    /// Local invalidate.
    LocalInv = 6,
    /// FLUSH (IBV_WC_FLUSH).
    Flush = 8,
    /// ATOMIC WRITE (IBV_WC_ATOMIC_WRITE).
    AtomicWrite = 9,
    /// A received SEND.
    Recv = 128,
    /// A received RDMA WRITE with immediate.
    RecvRdmaWithImm = 129,
}

/// Completion flags (`ibv_wc_flags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct WcFlags(pub u32);

impl WcFlags {
    /// The first 40 bytes of the buffer hold a GRH (UD).
    pub const GRH: WcFlags = WcFlags(1);
    /// `imm_data` is valid.
    pub const WITH_IMM: WcFlags = WcFlags(2);
    /// `invalidated_rkey` is valid.
    pub const WITH_INV: WcFlags = WcFlags(8);
    /// Union.
    pub const fn with(self, o: WcFlags) -> WcFlags {
        WcFlags(self.0 | o.0)
    }
    /// All bits of `o` present.
    pub const fn contains(self, o: WcFlags) -> bool {
        self.0 & o.0 == o.0
    }
}

/// A work completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wc {
    /// The work request's identifier.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// Operation (valid only on success for receive completions).
    pub opcode: WcOpcode,
    /// Bytes transferred (receives, READs, atomics: 8).
    pub byte_len: u32,
    /// Immediate data (with `WcFlags::WITH_IMM`) or invalidated R_Key
    /// (with `WcFlags::WITH_INV`), as on the wire.
    pub imm_or_inv: u32,
    /// Local QP number.
    pub qp_num: Qpn,
    /// Source QP (UD receives).
    pub src_qp: Qpn,
    /// Flags.
    pub wc_flags: WcFlags,
    /// P_Key index (UD receives).
    pub pkey_index: u16,
    /// Set when the remote packet had the solicited-event bit.
    pub solicited: bool,
}

impl Wc {
    /// An empty completion, for filling arrays before polling.
    pub const EMPTY: Wc = Wc {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        byte_len: 0,
        imm_or_inv: 0,
        qp_num: Qpn::new(0),
        src_qp: Qpn::new(0),
        wc_flags: WcFlags(0),
        pkey_index: 0,
        solicited: false,
    };
}

/// Address vector of a connected QP or an address handle: where packets go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AddressVector {
    /// Destination IP (from the GID: `::ffff:a.b.c.d` maps to IPv4).
    pub dest: IpAddr,
    /// Destination UDP port (4791 on the wire; other values only on loopback test setups).
    pub dest_port: u16,
    /// Traffic class / DSCP+ECN.
    pub traffic_class: u8,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// Flow label (IPv6; rxe ignores it).
    pub flow_label: u32,
    /// Source GID index (always 0: one address per device).
    pub sgid_index: u8,
}

impl AddressVector {
    /// A vector to `dest` on the RoCE v2 port with default fields.
    pub fn to(dest: IpAddr) -> Self {
        AddressVector {
            dest,
            dest_port: crate::limits::ROCE_PORT,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            sgid_index: 0,
        }
    }
}

/// Path MTU (`ibv_mtu`: 1 = 256 … 5 = 4096).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes.
    M256 = 1,
    /// 512 bytes.
    M512 = 2,
    /// 1024 bytes.
    M1024 = 3,
    /// 2048 bytes.
    M2048 = 4,
    /// 4096 bytes.
    M4096 = 5,
}

impl Mtu {
    /// Bytes.
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }
    /// From the libibverbs enum value.
    pub const fn from_ibv(v: u32) -> Option<Mtu> {
        Some(match v {
            1 => Mtu::M256,
            2 => Mtu::M512,
            3 => Mtu::M1024,
            4 => Mtu::M2048,
            5 => Mtu::M4096,
            _ => return None,
        })
    }
    /// The port MTU a link of `link_mtu` bytes carries, as rxe derives it
    /// from its netdev (`rxe_set_mtu`): the largest IB MTU that fits with
    /// [`ROCE_MAX_HDR_LEN`](crate::limits::ROCE_MAX_HDR_LEN) bytes of
    /// headers, at least 256, at most 4096.
    pub const fn of_link(link_mtu: u32) -> Mtu {
        match Mtu::from_bytes_floor(link_mtu.saturating_sub(crate::limits::ROCE_MAX_HDR_LEN)) {
            Some(m) => m,
            None => Mtu::M256,
        }
    }

    /// The largest MTU not above `bytes`.
    pub const fn from_bytes_floor(bytes: u32) -> Option<Mtu> {
        Some(if bytes >= 4096 {
            Mtu::M4096
        } else if bytes >= 2048 {
            Mtu::M2048
        } else if bytes >= 1024 {
            Mtu::M1024
        } else if bytes >= 512 {
            Mtu::M512
        } else if bytes >= 256 {
            Mtu::M256
        } else {
            return None;
        })
    }
}

mod qp_attr;
pub use qp_attr::{AttrMask, QpAttr, QpCap, QpInit};

/// An asynchronous event (`ibv_event_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AsyncEvent {
    /// A CQ overran: completions were lost (IBV_EVENT_CQ_ERR).
    CqErr(CqId),
    /// A QP hit a fatal error (IBV_EVENT_QP_FATAL).
    QpFatal(Qpn),
    /// Invalid request on a QP's responder (IBV_EVENT_QP_REQ_ERR).
    QpReqErr(Qpn),
    /// Access violation on a QP's responder (IBV_EVENT_QP_ACCESS_ERR).
    QpAccessErr(Qpn),
    /// First packet received in RTR (IBV_EVENT_COMM_EST).
    CommEst(Qpn),
    /// Send queue drained in SQD (IBV_EVENT_SQ_DRAINED).
    SqDrained(Qpn),
    /// Last WQE of an SRQ-attached QP in error (IBV_EVENT_QP_LAST_WQE_REACHED).
    QpLastWqeReached(Qpn),
    /// SRQ fell below its limit (IBV_EVENT_SRQ_LIMIT_REACHED).
    SrqLimitReached(SrqId),
}

/// Why a verb failed. (The C library maps each to an errno: softrdma's
/// `Error::errno`.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum VerbsError {
    /// An argument is invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// A resource limit is reached.
    #[error("resource limit reached")]
    NoMemory,
    /// The handle names nothing.
    #[error("no such object")]
    NoSuchObject,
    /// The object is still in use.
    #[error("object in use")]
    Busy,
    /// Unsupported operation.
    #[error("operation not supported")]
    NotSupported,
    /// The work queue is full.
    #[error("work queue full")]
    QueueFull,
    /// Memory is not mapped, out of a region's bounds, or a key does not
    /// name a region that allows the access (EFAULT, as `ibv_advise_mr`).
    #[error("bad address")]
    Fault,
    /// The object belongs to another protection domain, or lacks a right
    /// (EPERM).
    #[error("permission denied")]
    PermissionDenied,
}

/// Result of a verb.
pub type VerbsResult<T> = Result<T, VerbsError>;

/// The P_Key at index 0 of the table.
pub const DEFAULT_PKEY: PKey = PKey::DEFAULT;
