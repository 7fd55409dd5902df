//! Source pinning: an RC or UC QP takes packets only from its peer.
//!
//! RoCE v2 names a connection's two ends by IP address and QPN; nothing on
//! the wire authenticates a packet (the ICRC is a CRC with a public seed).
//! rxe checks the source IP against the QP's address vector
//! (`check_addr`, rxe_recv.c) and so did we; but on one host every peer is
//! a 127.x address any local process can send from, and the QPN and PSN
//! are all an injector still needs. A peer sends a connection's packets
//! from one UDP source port — rxe from `0xC000 + hash(QPN)`, NICs from a
//! port derived from the flow label or the QPNs, softrdma from its
//! device's socket — so once the port is known the QP takes packets only
//! from that address *and* port. A local process cannot send from a port
//! another socket holds, so on one host an unprivileged process can no
//! longer inject; only someone who can forge the source address and port
//! (root with a raw socket, an on-path host) still can, as on any RoCE
//! network.
//!
//! The port is learned from the first packet after RTR that the QP expects
//! — a request with the expected PSN, or a response to an outstanding
//! request — or given beforehand ([`Device::set_peer_port`]; softrdma's
//! own connection exchange does). Everything else from another port is
//! dropped and counted (`wrong_peer`) before any check of its contents,
//! so it can neither reach the R_Key check nor move the QP to the error
//! state. The pin holds until the QP goes back to RESET or its address
//! vector names another destination.
//!
//! [`Device::set_peer_port`]: crate::device::Device::set_peer_port

use super::Qp;
use crate::device::RecvMeta;
use crate::verbs::{QpState, QpType};
use softrdma_wire::PacketRepr;
use std::net::IpAddr;

impl Qp {
    /// Whether this QP checks where its packets come from: a connected
    /// transport (RC, UC) from RTR on.
    pub(crate) fn pins_peer(&self) -> bool {
        self.qp_type != QpType::Ud && self.state >= QpState::Rtr
    }

    /// Whether a packet with these addresses may reach the transport: the
    /// peer's IP, to the device's IP, and once known the peer's UDP port.
    pub(crate) fn is_from_peer(&self, meta: &RecvMeta, local_ip: IpAddr) -> bool {
        meta.src.ip() == self.attr.ah_attr.dest
            && meta.dst == local_ip
            && self.peer_port.is_none_or(|p| p == meta.src.port())
    }

    /// Whether `pkt` (from the peer's IP, port not yet known) is one the
    /// QP expects now, so that its port may be taken as the peer's: a
    /// request at the expected PSN, or a response whose PSN falls among
    /// the outstanding requests'.
    pub(crate) fn expects(&self, pkt: &PacketRepr<'_>, request: bool) -> bool {
        let psn = pkt.bth.psn;
        if request {
            return psn == self.resp.epsn;
        }
        match (self.oldest_unacked(), self.req.max_sent) {
            (Some(oldest), Some(max)) => !psn.before(oldest) && !psn.after(max),
            _ => false,
        }
    }
}
