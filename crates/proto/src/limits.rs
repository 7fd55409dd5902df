//! Every limit of the device in one place. Units are in the names.
//!
//! The values are what `query_device` reports; the core enforces each of
//! them, and every queue and loop in the core is bounded by one of them.

/// Queue pairs per device.
pub const MAX_QP: usize = 1 << 16;
/// Destroyed QP numbers kept out of the draw (`qpn` module): a number is
/// not given to a new QP before this many more QPs were destroyed, and
/// with 2^24 numbers drawn at random, rarely for much longer.
pub const QPN_QUARANTINE: usize = 1 << 16;
/// Draws of a QP number before `create_qp` gives up (each is rejected with
/// probability below 1 %: see the `qpn` module).
pub const QPN_DRAW_TRIES: u32 = 300;
/// Numbers drawn for one QP on a shared device before giving up (another
/// process holding each one: with at most a few thousand live QPs in 2^24
/// numbers, never).
pub const QPN_CLAIM_TRIES: u32 = 64;
/// Work requests per send or receive queue.
pub const MAX_QP_WR: u32 = 16 * 1024;
/// Scatter/gather entries per work request.
pub const MAX_SGE: u32 = 32;
/// Scatter/gather entries of an RDMA READ.
pub const MAX_SGE_RD: u32 = 32;
/// Bytes of inline data per send work request.
pub const MAX_INLINE_DATA: u32 = 256;
/// Completion queues per device.
pub const MAX_CQ: usize = 1 << 16;
/// Entries per completion queue.
pub const MAX_CQE: u32 = 1 << 20;
/// Memory regions per device.
pub const MAX_MR: usize = 1 << 20;
/// Largest memory region.
pub const MAX_MR_SIZE: u64 = 1 << 40;
/// Protection domains per device.
pub const MAX_PD: usize = 1 << 16;
/// Outstanding RDMA READ / atomic requests per QP, either direction
/// (`max_qp_rd_atom`, `max_qp_init_rd_atom`).
pub const MAX_RD_ATOMIC: u8 = 128;
/// Shared receive queues per device.
pub const MAX_SRQ: usize = 1 << 16;
/// Work requests per shared receive queue.
pub const MAX_SRQ_WR: u32 = 16 * 1024;
/// Scatter/gather entries per SRQ work request.
pub const MAX_SRQ_SGE: u32 = 32;
/// Address handles per device.
pub const MAX_AH: usize = 1 << 16;
/// Memory windows per device.
pub const MAX_MW: usize = 1 << 16;
/// Largest message (IBA: 2^31 bytes).
pub const MAX_MSG_SIZE: u32 = 1 << 31;
/// Entries of the P_Key table (one: the default key).
pub const PKEY_TABLE_LEN: u16 = 1;

/// Smallest path MTU in bytes.
pub const MIN_MTU: u32 = 256;
/// Largest path MTU in bytes.
pub const MAX_MTU: u32 = 4096;
/// Bytes of a RoCE v2 packet around its payload that the link MTU must
/// also carry, as Linux rxe counts them when it derives its port MTU from
/// the netdev's (`RXE_MAX_HDR_LENGTH` in rxe_param.h: IP, UDP, BTH, the
/// largest extension headers, ICRC): a 1500-byte link gives 1024, 9000
/// gives 4096 ([`crate::Mtu::of_link`]).
pub const ROCE_MAX_HDR_LEN: u32 = 80;

/// Packets a requester keeps unacknowledged per QP before it waits. RoCE
/// has no credit-based flow control in practice (rxe sends credits 31,
/// "unlimited"), so this window keeps a fast sender from overrunning the
/// socket buffers of its peer.
pub const MAX_INFLIGHT_PKTS: u32 = 512;
/// RC request packets all QPs of a device keep unacknowledged together
/// (the default of `DeviceConfig::inflight_budget_pkts`); QPs past it wait
/// in order for ACKs to free it (`device::Budget`). With perftest's 128 outstanding WRITEs on
/// each of 1,000 QPs, 128,000 packets would otherwise leave at once and
/// overrun the receiver's socket buffer (8 MiB requested, ~2,000 datagrams
/// of 4 KiB): tail drops then wait for the transport timer. 1,024 packets
/// of 4 KiB fit the receiver's buffer and, at a loopback round trip of
/// ~100 µs, allow ~40 GB/s.
pub const DEVICE_INFLIGHT_PKTS: u32 = 1024;
/// A QP that waited for the device's in-flight budget is woken once this
/// many packets of it are free, and may send them in a run: the responder
/// answers a run with one coalesced ACK, where 1,000 QPs sending one
/// packet each would draw 1,000 ACKs.
pub const BUDGET_GRANT_PKTS: u32 = 32;
/// Tail-loss probe (a requester sends its last packet again, with AckReq,
/// when no acknowledgement came for this long): at least this, however
/// short the measured round trip (a loaded host's scheduling delays).
pub const PROBE_MIN_NS: u64 = 2_000_000;
/// A QP's probe floor grows (doubles) with each spurious probe up to
/// this: past a quarter of the transport timer the QP no longer probes
/// (at perftest's `timeout` 14, 67 ms: from 32 ms on), until a loss
/// brings the floor back to [`PROBE_MIN_NS`].
pub const PROBE_FLOOR_MAX_NS: u64 = 64_000_000;
/// The probe's timeout before a QP measured a round trip.
pub const PROBE_INIT_NS: u64 = 10_000_000;
/// Smallest in-flight window after losses.
pub const MIN_CWND: u32 = 2;
/// A requester asks for an ACK at least this often inside a long message,
/// so its window keeps moving.
pub const ACK_REQ_EVERY_PKTS: u32 = 64;
/// Retransmission timer when the QP's `timeout` attribute is 0 ("infinite"
/// per IBA): none. Timer values are 4.096 µs × 2^timeout (IBA 9.7.6.1.3).
pub const TIMEOUT_BASE_NS: u64 = 4096;
/// Default UDP destination port (RoCE v2).
pub const ROCE_PORT: u16 = softrdma_wire::ROCE_V2_PORT;

/// Transport timer of a QP with the given `timeout` attribute, in
/// nanoseconds; `None` for 0 (no timer).
pub const fn ack_timeout_ns(timeout: u8) -> Option<u64> {
    if timeout == 0 {
        None
    } else {
        // Clamp to the 5-bit field.
        Some(TIMEOUT_BASE_NS << (timeout & 0x1f))
    }
}

/// Answers (ACKs, NAKs, READ responses, atomic ACKs) a QP's responder
/// holds before the driver takes them. READ and atomic responses are
/// bounded by `max_dest_rd_atomic` (at most [`MAX_RD_ATOMIC`]); past this,
/// an ACK, RNR NAK or repeated response is dropped and counted
/// (`resp_dropped`): the peer retransmits what it still needs.
pub const MAX_RESP_QUEUE: usize = 2 * MAX_RD_ATOMIC as usize + 32;

/// MADs received on QP 1 (the GSI) waiting for the driver's communication
/// manager; more are dropped and counted (`gsi_dropped`: the CM's peers
/// retransmit).
pub const GSI_RX_QUEUE: usize = 256;

/// Multicast groups per device (`max_mcast_grp`; rxe's
/// `RXE_MAX_MCAST_GRP`, 8,192).
pub const MAX_MCAST_GRP: usize = 8192;
/// QPs attached to one multicast group (`max_mcast_qp_attach`; rxe's
/// `RXE_MAX_MCAST_QP_ATTACH`, 56).
pub const MAX_MCAST_QP_ATTACH: usize = 56;
/// Attachments over all groups (`max_total_mcast_qp_attach`; rxe's
/// `RXE_MAX_TOT_MCAST_QP_ATTACH`, 0x70000 = 8,192 × 56).
pub const MAX_TOTAL_MCAST_QP_ATTACH: usize = MAX_MCAST_GRP * MAX_MCAST_QP_ATTACH;
/// XRC domains per device.
pub const MAX_XRCD: usize = 1 << 16;
/// Draws of an XRC SRQ number before `create_xrc_srq` gives up (with at
/// most [`MAX_SRQ`] of 2^24 numbers taken, a draw is refused with
/// probability under 1 %).
pub const SRQN_DRAW_TRIES: u32 = 300;
