//! Every limit and every protocol constant of the CM in one place. Units are
//! in the names. IBA times are 5-bit exponents: 4.096 µs × 2^t.

/// Connection ids (listening, connecting, connected, in timewait) per CM.
/// A REQ or SIDR_REQ that would need one more is dropped without a reply,
/// like a full rdma_cm backlog, so the requester retries.
pub const MAX_IDS: usize = 1 << 16;
/// Timewait records at once (they outlive destroyed ids until they
/// expire). With this many, a new one ends the oldest early.
pub const MAX_TIMEWAIT: usize = 1 << 16;
/// Requests (REQ or SIDR_REQ) one source address may have waiting at once
/// — received and not yet established: not accepted, or accepted and
/// waiting for the RTU. More are refused (REJ "no resources", SIDR_REP
/// "reject") and counted (`rx_refused_half_open`): one host flooding REQs
/// without finishing them cannot take the id table and the event queue
/// ([`MAX_PENDING_EVENTS`]) from everyone else. Linux has no such limit
/// (rdma_cm's listen backlog is per listener); 256 is well above what a
/// program connects at once from one address.
pub const MAX_HALF_OPEN_PER_SOURCE: usize = 256;
/// Events waiting for the driver. Past this, new REQs and SIDR_REQs are
/// dropped (the requester retries); events of existing ids are always
/// queued, and there are a few per id at most.
pub const MAX_PENDING_EVENTS: usize = 4096;
/// MADs waiting to be sent. Past this a MAD is dropped and counted: MADs
/// with a timer are sent again, the others are answers the peer asks for
/// again.
pub const MAX_TX_QUEUE: usize = 4096;

/// The CM's management class version (IBA 12.6.1).
pub const CM_CLASS_VERSION: u8 = softrdma_wire::cm::CM_CLASS_VERSION;

/// Linux 6.1 rdma_cm (`CMA_CM_RESPONSE_TIMEOUT`, as the rping captures
/// show): the REQ's Remote and Local CM Response Timeout, 20 = 4.3 s.
/// Newer kernels send 22; any received value is honoured.
pub const CMA_CM_RESPONSE_TIMEOUT: u8 = 20;
/// rdma_cm's Max CM Retries (`CMA_MAX_CM_RETRIES`).
pub const CMA_MAX_CM_RETRIES: u8 = 15;
/// Packet life time rdma_cm gives a RoCE path in Linux 6.1
/// (`CMA_IBOE_PACKET_LIFETIME`; 16 in newer kernels).
pub const CMA_IBOE_PACKET_LIFETIME: u8 = 18;
/// The Service Timeout of the MRA rdma_cm sends when a duplicate REQ or REP
/// arrives before the user answered (`CMA_CM_MRA_SETTING` = DELAY | 24:
/// 68.7 s).
pub const CMA_MRA_SERVICE_TIMEOUT: u8 = 24;
/// CA ACK delay of rxe (`local_ca_ack_delay`): the REP's Target ACK Delay.
pub const RXE_CA_ACK_DELAY: u8 = 15;
/// The high 32 bits of Linux's TIDs: the CM MAD agent's `hi_tid`, 2 in the
/// Debian 12 guests of the rxe captures (one rxe device, one port).
pub const LINUX_HI_TID: u32 = 2;
/// Q_Key rdma_cm gives UD QPs of the UDP and IB port spaces
/// (`RDMA_UDP_QKEY`), sent in SIDR_REP.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;
/// Defaults of `rdma_connect(id, NULL)` (librdmacm): retry and RNR retry 7.
pub const RDMA_DEFAULT_RETRY: u8 = 7;

/// Milliseconds of an IBA time as Linux approximates it
/// (`cm_convert_to_ms`: 2^max(t-8, 0); 4.096 µs × 2^t ≈ 2^(t-8) ms).
pub const fn cm_time_ms(iba_time: u8) -> u64 {
    let t = iba_time & 0x1f;
    1 << t.saturating_sub(8)
}

/// Nanoseconds of `ms` milliseconds.
pub const fn ms_to_ns(ms: u64) -> u64 {
    ms.saturating_mul(1_000_000)
}

/// The Local ACK Timeout for a path: 4.096 µs × 2^t ≥ CA ACK delay + 2 ×
/// packet life time, rounded as Linux's `cm_ack_timeout` does (the larger
/// of ack delay and life time + 1, plus one when the other is within a
/// factor of two). rxe's 15 and life time 18 give 19 (2.1 s).
pub const fn cm_ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let mut t = packet_life_time as u16 + 1;
    let d = ca_ack_delay as u16;
    if t >= d {
        if d + 1 >= t {
            t += 1;
        }
    } else {
        t = if t + 1 >= d { d + 1 } else { d };
    }
    if t > 31 {
        31
    } else {
        t as u8
    }
}

/// How long the rdma_cm layer holds a REQ or SIDR_REQ for a service ID
/// nobody listens on before the CM answers it (REJ 8, SIDR_REP
/// "unsupported"), in case a listener comes: then it is handed over at
/// once. Programs that agree out of band that the server is ready
/// (perftest's `-R` handshake) let the client connect right after the
/// server's last message, while the server is still between that message
/// and `rdma_listen`; Linux, whose address and route resolution take
/// longer, rarely loses that race, a softrdma client on the same host
/// often would. The only difference a peer sees: a REJ 8 comes this much
/// later. Not Linux's: softrdma's own.
pub const PARK_NS: u64 = 200_000_000;

/// Requests the rdma_cm layer holds at most per device (more go to the CM
/// at once).
pub const PARK_MAX: usize = 64;

/// How often at most the rdma_cm layer reports requests refused for their
/// source's half-open limit ([`MAX_HALF_OPEN_PER_SOURCE`]).
pub const REFUSED_REPORT_EVERY_NS: u64 = 1_000_000_000;

/// The largest backlog of an rdma_cm listener (`rdma_listen` with a
/// backlog ≤ 0 or above it gets this one).
pub const MAX_BACKLOG: u32 = 1024;

/// Lowest and highest ephemeral port of rdma_cm's port spaces (Linux's
/// default `net.ipv4.ip_local_port_range`).
pub const EPHEMERAL_PORTS: (u16, u16) = (32768, 60999);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_times() {
        assert_eq!(cm_time_ms(20), 4096);
        assert_eq!(cm_time_ms(18), 1024);
        assert_eq!(cm_time_ms(19), 2048);
        assert_eq!(cm_time_ms(24), 65536);
        assert_eq!(cm_time_ms(3), 1);
        // The REQ timer of Linux 6.1's rdma_cm: 2 x 1024 + 4096.
        assert_eq!(2 * cm_time_ms(18) + cm_time_ms(20), 6144);
        assert_eq!(
            cm_ack_timeout(RXE_CA_ACK_DELAY, CMA_IBOE_PACKET_LIFETIME),
            19
        );
        // Newer kernels' life time 16.
        assert_eq!(cm_ack_timeout(15, 16), 17);
        assert_eq!(cm_ack_timeout(15, 14), 16);
        assert_eq!(cm_ack_timeout(20, 10), 20);
        assert_eq!(cm_ack_timeout(15, 31), 31);
    }
}
