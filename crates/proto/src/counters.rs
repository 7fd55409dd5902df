//! Counters, per device and per queue pair.

use core::ops::AddAssign;

/// What happened on the wire and in the transport. The device keeps one set
/// for itself and one per QP; the device's includes every QP's and the drops
/// that belong to no QP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes sent (UDP payload: BTH through ICRC).
    pub tx_bytes: u64,
    /// Packets received and accepted by a QP.
    pub rx_packets: u64,
    /// Bytes received (UDP payload).
    pub rx_bytes: u64,
    /// Request packets sent again (go-back-N after a NAK, timeout or RNR).
    pub retransmits: u64,
    /// Retransmission timer expiries.
    pub timeouts: u64,
    /// Tail-loss probes: the last packet sent again, asking for an ACK,
    /// when no acknowledgement came for a few round trips (long before the
    /// retransmission timer; see `qp::comp`).
    pub tail_probes: u64,
    /// Times a QP waited with a packet ready because the device's RC
    /// packets in flight had reached the device-wide budget
    /// (`DeviceConfig::inflight_budget_pkts`).
    pub budget_waits: u64,
    /// RNR NAKs sent (responder had no receive posted).
    pub rnr_nak_sent: u64,
    /// RNR NAKs received.
    pub rnr_nak_rcvd: u64,
    /// PSN sequence error NAKs sent.
    pub seq_nak_sent: u64,
    /// PSN sequence error NAKs received.
    pub seq_nak_rcvd: u64,
    /// Invalid request NAKs sent.
    pub inv_req_nak_sent: u64,
    /// Invalid request NAKs received.
    pub inv_req_nak_rcvd: u64,
    /// Remote access error NAKs sent.
    pub rem_access_nak_sent: u64,
    /// Remote access error NAKs received.
    pub rem_access_nak_rcvd: u64,
    /// Remote operational error NAKs sent.
    pub rem_op_nak_sent: u64,
    /// Remote operational error NAKs received.
    pub rem_op_nak_rcvd: u64,
    /// Duplicate request packets received (answered, not executed again).
    pub duplicate_requests: u64,
    /// Out-of-sequence request packets received (dropped).
    pub out_of_sequence: u64,
    /// Responses the requester ignored (stale, duplicate, unexpected).
    pub stale_responses: u64,
    /// ACKs sent.
    pub acks_sent: u64,
    /// UC messages dropped because a packet was lost.
    pub uc_msgs_dropped: u64,
    /// Packets dropped for a bad ICRC.
    pub icrc_errors: u64,
    /// IPv4 packets whose ICRC only checked with an identification other
    /// than 0 (a peer such as rxe; see `softrdma_wire::icrc::solve_ipv4_id`).
    pub icrc_ip_id_inferred: u64,
    /// Packets dropped for a P_Key mismatch.
    pub bad_pkey: u64,
    /// UD packets dropped for a Q_Key mismatch.
    pub bad_qkey: u64,
    /// Packets for no QP, or a QP not in a receiving state.
    pub unknown_qp: u64,
    /// RC/UC packets from another source than the connected peer (its IP
    /// address, and its UDP port once known): dropped before any other
    /// check (see `qp::pin`). Off-path injection attempts show here.
    pub wrong_peer: u64,
    /// READ and atomic requests beyond the negotiated
    /// `max_dest_rd_atomic` (still waiting responses): NAKed as invalid
    /// requests, the QP to the error state.
    pub too_many_rd_atomic: u64,
    /// ACKs, RNR NAKs and repeated responses not queued because the
    /// responder's queue was full or already held the same answer (a peer
    /// sending faster than it takes its answers).
    pub resp_dropped: u64,
    /// Packets that did not parse.
    pub malformed: u64,
    /// UD packets dropped: no receive posted, or too long.
    pub ud_drops: u64,
    /// Congestion notification packets received.
    pub cnp_rcvd: u64,
    /// MADs received on QP 1 and queued for the communication manager.
    pub gsi_rx: u64,
    /// Packets for QP 1 dropped: not a UD SEND_ONLY with the GSI Q_Key
    /// and a MAD-sized payload, or the queue was full.
    pub gsi_dropped: u64,
    /// MADs sent from QP 1.
    pub gsi_tx: u64,
    /// XRC requests whose XRCETH names no XRC SRQ of the target QP's XRC
    /// domain (NAKed as invalid requests when they are the expected PSN).
    pub xrc_bad_srqn: u64,
    /// Copies of multicast packets delivered to the QPs attached to their
    /// group (one per QP, each then checked like any UD packet).
    pub mcast_copies: u64,
    /// Multicast packets for a group no QP of the device is attached to.
    pub mcast_unmatched: u64,
}

impl AddAssign<&Counters> for Counters {
    fn add_assign(&mut self, o: &Counters) {
        macro_rules! add {
            ($($f:ident),*) => { $( self.$f += o.$f; )* };
        }
        add!(
            tx_packets,
            tx_bytes,
            rx_packets,
            rx_bytes,
            retransmits,
            timeouts,
            tail_probes,
            budget_waits,
            rnr_nak_sent,
            rnr_nak_rcvd,
            seq_nak_sent,
            seq_nak_rcvd,
            inv_req_nak_sent,
            inv_req_nak_rcvd,
            rem_access_nak_sent,
            rem_access_nak_rcvd,
            rem_op_nak_sent,
            rem_op_nak_rcvd,
            duplicate_requests,
            out_of_sequence,
            stale_responses,
            acks_sent,
            uc_msgs_dropped,
            icrc_errors,
            icrc_ip_id_inferred,
            bad_pkey,
            bad_qkey,
            unknown_qp,
            wrong_peer,
            too_many_rd_atomic,
            resp_dropped,
            malformed,
            ud_drops,
            cnp_rcvd,
            gsi_rx,
            gsi_dropped,
            gsi_tx,
            xrc_bad_srqn,
            mcast_copies,
            mcast_unmatched
        );
    }
}

impl Counters {
    /// Each non-zero counter as (name, value), for printing.
    pub fn nonzero(&self) -> Vec<(&'static str, u64)> {
        let all = [
            ("tx_packets", self.tx_packets),
            ("tx_bytes", self.tx_bytes),
            ("rx_packets", self.rx_packets),
            ("rx_bytes", self.rx_bytes),
            ("retransmits", self.retransmits),
            ("timeouts", self.timeouts),
            ("tail_probes", self.tail_probes),
            ("budget_waits", self.budget_waits),
            ("rnr_nak_sent", self.rnr_nak_sent),
            ("rnr_nak_rcvd", self.rnr_nak_rcvd),
            ("seq_nak_sent", self.seq_nak_sent),
            ("seq_nak_rcvd", self.seq_nak_rcvd),
            ("inv_req_nak_sent", self.inv_req_nak_sent),
            ("inv_req_nak_rcvd", self.inv_req_nak_rcvd),
            ("rem_access_nak_sent", self.rem_access_nak_sent),
            ("rem_access_nak_rcvd", self.rem_access_nak_rcvd),
            ("rem_op_nak_sent", self.rem_op_nak_sent),
            ("rem_op_nak_rcvd", self.rem_op_nak_rcvd),
            ("duplicate_requests", self.duplicate_requests),
            ("out_of_sequence", self.out_of_sequence),
            ("stale_responses", self.stale_responses),
            ("acks_sent", self.acks_sent),
            ("uc_msgs_dropped", self.uc_msgs_dropped),
            ("icrc_errors", self.icrc_errors),
            ("icrc_ip_id_inferred", self.icrc_ip_id_inferred),
            ("bad_pkey", self.bad_pkey),
            ("bad_qkey", self.bad_qkey),
            ("unknown_qp", self.unknown_qp),
            ("wrong_peer", self.wrong_peer),
            ("too_many_rd_atomic", self.too_many_rd_atomic),
            ("resp_dropped", self.resp_dropped),
            ("malformed", self.malformed),
            ("ud_drops", self.ud_drops),
            ("cnp_rcvd", self.cnp_rcvd),
            ("gsi_rx", self.gsi_rx),
            ("gsi_dropped", self.gsi_dropped),
            ("gsi_tx", self.gsi_tx),
            ("xrc_bad_srqn", self.xrc_bad_srqn),
            ("mcast_copies", self.mcast_copies),
            ("mcast_unmatched", self.mcast_unmatched),
        ];
        all.into_iter().filter(|(_, v)| *v != 0).collect()
    }
}
