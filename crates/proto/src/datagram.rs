//! What crosses the sans-I/O boundary besides verbs: the device's
//! configuration, a received datagram's metadata, a datagram to send (and
//! its zero-copy parts), and the events the driver delivers.

use crate::limits;
use crate::verbs::{AsyncEvent, CqId};
use softrdma_wire::grh::{ud_grh_area, GRH_LEN};
use softrdma_wire::ip::{DatagramRepr, IpRepr};
use std::net::{IpAddr, SocketAddr};

/// Configuration of a device.
#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// The device's address: source of every packet, its GID.
    pub local_ip: IpAddr,
    /// UDP source port of every packet (the engine's socket port). It is
    /// covered by the ICRC, so it must be what really goes on the wire.
    pub udp_src_port: u16,
    /// UDP port the device receives on (4791 on a real link).
    pub udp_dst_port: u16,
    /// Active MTU of the port in bytes (UD messages, `query_port`).
    pub port_mtu: u32,
    /// Seed for memory keys, initial PSNs and QP numbers when `key` is
    /// `None` (deterministic: the simulator, tests).
    pub seed: u64,
    /// 256 bits keying the generator of memory keys, initial PSNs and
    /// QP numbers; the engine draws them from the operating system.
    pub key: Option<[u8; 32]>,
    /// Node GUID.
    pub node_guid: u64,
    /// How multi-packet RC RDMA WRITEs (without immediate) go on the wire.
    pub write_chunking: WriteChunking,
    /// Accept an IPv4 packet whose ICRC only checks with an identification
    /// other than 0 (solved from the ICRC; see
    /// `softrdma_wire::icrc::solve_ipv4_id`). Peers that are not softrdma —
    /// Linux rxe, RoCE NICs — send such packets, and a receiver on a UDP
    /// socket cannot see the field. The price: for those packets the ICRC
    /// catches a corruption with probability 1 − 2^-15 instead of 1 − 2^-32
    /// (Ethernet's FCS still guards the link). Never used for loopback
    /// sources, whose senders are softrdma and send identification 0.
    pub infer_ipv4_ident: bool,
    /// RC request packets the device's QPs keep in flight together
    /// ([`limits::DEVICE_INFLIGHT_PKTS`]); 0: no device-wide limit (each
    /// QP still has its own window). It changes nothing on the wire.
    pub inflight_budget_pkts: u32,
    /// Send tail-loss probes (see `Qp::tail_probe`); off, a lost tail
    /// waits for the transport timer.
    pub tail_probe: bool,
}

impl DeviceConfig {
    /// A device at `ip` on the RoCE v2 port, MTU 4096.
    pub fn new(ip: IpAddr, seed: u64) -> Self {
        DeviceConfig {
            local_ip: ip,
            udp_src_port: limits::ROCE_PORT,
            udp_dst_port: limits::ROCE_PORT,
            port_mtu: limits::MAX_MTU,
            seed,
            key: None,
            node_guid: guid_of(ip),
            write_chunking: WriteChunking::Never,
            infer_ipv4_ident: true,
            inflight_budget_pkts: limits::DEVICE_INFLIGHT_PKTS,
            tail_probe: true,
        }
    }
}

/// How a multi-packet RC RDMA WRITE without immediate is sent.
///
/// The FIRST packet of a WRITE carries the RETH, so it is 16 bytes longer
/// than the MIDDLE and LAST packets that follow; a driver that sends runs
/// of equal-sized datagrams as one UDP GSO super-datagram (and a receiver
/// that gets them as one GRO super-datagram) gets runs of two packets at
/// most from a stream of 8 KiB WRITEs. Sent as one WRITE ONLY per packet,
/// each with the RETH of its own bytes, every full packet has the same
/// size. The responder places the bytes exactly as for FIRST … LAST; the
/// wire differs (more, shorter messages; MSN counts each), so rxe and NICs
/// get the standard segmentation: the engine chunks only towards loopback
/// peers, which are softrdma devices on this host — the only ones it sends
/// GSO runs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WriteChunking {
    /// FIRST, MIDDLE…, LAST, as rxe sends them.
    #[default]
    Never,
    /// WRITE ONLY per packet towards loopback addresses.
    LoopbackPeers,
    /// WRITE ONLY per packet towards every peer (tests, the simulator).
    Always,
}

/// EUI-64-style node GUID derived from the address (stable per address, so
/// it is known before a device is opened).
pub use softrdma_wire::grh::node_guid_of as guid_of;

/// Where a received datagram came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvMeta {
    /// Source address and UDP port.
    pub src: SocketAddr,
    /// Destination address (the device's).
    pub dst: IpAddr,
    /// Length of the UDP payload.
    pub len: usize,
    /// Traffic class / TOS as received (0 when unknown).
    pub traffic_class: u8,
    /// Hop limit / TTL as received (64 when unknown).
    pub hop_limit: u8,
}

impl RecvMeta {
    /// The IP/UDP headers as a UDP-socket receiver reconstructs them:
    /// identification 0 and DF for IPv4 (what a Linux UDP socket sender
    /// puts there); the ICRC masks the fields that vary.
    pub fn datagram(&self, dst_port: u16) -> Option<DatagramRepr> {
        let mut ip = IpRepr::between(self.src.ip(), self.dst, self.traffic_class).ok()?;
        match &mut ip {
            IpRepr::V4(r) => r.ttl = self.hop_limit,
            IpRepr::V6(r) => r.hop_limit = self.hop_limit,
        }
        Some(DatagramRepr::new(ip, self.src.port(), dst_port))
    }

    /// The 40 bytes written before a UD payload.
    pub fn grh_area(&self) -> [u8; GRH_LEN] {
        match self.datagram(limits::ROCE_PORT) {
            Some(d) => ud_grh_area(&d, self.len),
            None => [0; GRH_LEN],
        }
    }
}

/// A datagram to send: its UDP payload is in the buffer given to
/// [`Device::poll_transmit`](crate::Device::poll_transmit), `len` bytes long — or, from
/// [`Device::poll_transmit_gather`](crate::Device::poll_transmit_gather), partly in registered memory (see
/// [`Transmit::gather`]).
#[derive(Clone, Debug)]
pub struct Transmit {
    /// Destination address and UDP port.
    pub dst: SocketAddr,
    /// Bytes of UDP payload written.
    pub len: usize,
    /// Traffic class / DSCP+ECN to send with.
    pub traffic_class: u8,
    /// Hop limit / TTL to send with.
    pub hop_limit: u8,
    /// Zero-copy payload: the datagram is `buf[..gather.header_len]`, then
    /// each piece's bytes, then `buf[gather.header_len..gather.header_len +
    /// gather.trailer_len]` (pad and ICRC). `None`: all of it is in `buf`.
    pub gather: Option<Gather>,
}

/// The parts of a zero-copy datagram.
#[derive(Clone, Debug)]
pub struct Gather {
    /// Bytes of headers at the start of the buffer.
    pub header_len: usize,
    /// Bytes of pad and ICRC right after them in the buffer.
    pub trailer_len: usize,
    /// The payload, in order (up to [`MAX_GATHER`]).
    pub pieces: [Option<crate::memory::Piece>; MAX_GATHER],
    /// Sequence number of this zero-copy datagram (1, 2, … in the order
    /// they are handed out): once the driver no longer reads its pieces
    /// (sent, copied or dropped), it passes this number — or a later one,
    /// for everything before it too — to [`Device::handle_released`](crate::Device::handle_released).
    pub seq: u64,
    /// The ICRC was left to the driver
    /// ([`Device::poll_transmit_gather_icrc_left`](crate::Device::poll_transmit_gather_icrc_left)):
    /// the headers it covers, until [`Gather::fill_icrc`] writes it. The
    /// trailer's ICRC bytes are 0 meanwhile.
    pub icrc_left: Option<DatagramRepr>,
}

impl Gather {
    /// Computes and writes the ICRC the core left to the driver (nothing
    /// when it computed it): `buf` is the datagram's buffer (headers and
    /// trailer). Before the datagram leaves through a link that carries
    /// the ICRC — UDP, a capture. `Err`: the payload's region was
    /// deregistered (the ICRC stays 0: the receiver drops the datagram
    /// as damaged).
    pub fn fill_icrc(&mut self, buf: &mut [u8]) -> Result<(), crate::memory::Revoked> {
        let Some(d) = self.icrc_left.take() else {
            return Ok(());
        };
        let payload: usize = self.pieces.iter().flatten().map(|p| p.len).sum();
        let pad = self.trailer_len - softrdma_wire::ICRC_LEN;
        let mut icrc = d.icrc_begin(self.header_len + payload + self.trailer_len);
        icrc.transport(&buf[..self.header_len]);
        for p in self.pieces.iter().flatten() {
            p.region.icrc_update(p.offset, p.len, &mut icrc)?;
        }
        let at = self.header_len + pad;
        icrc.update(&buf[self.header_len..at]);
        buf[at..at + softrdma_wire::ICRC_LEN].copy_from_slice(&icrc.finish().to_le_bytes());
        Ok(())
    }
}

/// Payload pieces a zero-copy datagram may have; a payload in more pieces
/// is copied.
pub const MAX_GATHER: usize = 2;

/// What an RC QP's responder puts in an answer
/// ([`Device::responder_view`](crate::Device::responder_view)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponderView {
    /// The peer's QP.
    pub dest_qpn: softrdma_wire::Qpn,
    /// The peer's address and UDP port.
    pub dest: SocketAddr,
    /// Messages the responder completed.
    pub msn: softrdma_wire::Msn,
    /// Its RNR NAK timer code.
    pub min_rnr_timer: u8,
    /// Traffic class of its packets.
    pub traffic_class: u8,
    /// Hop limit of its packets.
    pub hop_limit: u8,
}

/// Output that is not a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// An asynchronous event.
    Async(AsyncEvent),
    /// An armed CQ got a completion: signal its completion channel.
    Completion(CqId),
}
