//! The receive path: ICRC, P_Key, QP lookup, peer check, dispatch.

use super::*;

impl Device {
    /// A received UDP payload (BTH through ICRC).
    pub fn handle_datagram(&mut self, now: Instant, meta: &RecvMeta, data: &[u8]) {
        self.handle_datagram_with(now, meta, data, true);
    }

    /// [`Self::handle_datagram`] of a datagram from a link that cannot
    /// corrupt it, whose ICRC is not looked at: the same-host path's
    /// shared-memory rings (written by a process of the same user that
    /// passed the connection handshake, with no wire or router between).
    /// The ICRC is the wire's end-to-end check (IBA 7.8.1); without a
    /// wire its 4 KiB CRC per packet is the receiver's largest cost after
    /// the copy. Everything else — parsing, P_Key, QP and PSN checks — is
    /// as for any datagram, so a garbled record is refused or lost, never
    /// read out of bounds.
    pub fn handle_datagram_trusted_link(&mut self, now: Instant, meta: &RecvMeta, data: &[u8]) {
        self.handle_datagram_with(now, meta, data, false);
    }

    fn handle_datagram_with(&mut self, now: Instant, meta: &RecvMeta, data: &[u8], icrc: bool) {
        let Ok(pkt) = IbPacket::new_checked(data) else {
            self.counters.malformed += 1;
            self.refusals += 1;
            self.note_drop(meta, None, DropReason::Malformed);
            return;
        };
        if icrc && !self.icrc_ok(meta, &pkt) {
            self.counters.icrc_errors += 1;
            self.refusals += 1;
            self.note_drop(meta, Some(&pkt), DropReason::BadIcrc);
            return;
        }
        let Ok(repr) = PacketRepr::parse(&pkt) else {
            self.counters.malformed += 1;
            self.refusals += 1;
            self.note_drop(meta, Some(&pkt), DropReason::Malformed);
            return;
        };
        let info = pkt.info();
        if info.transport == Transport::Cnp {
            self.counters.cnp_rcvd += 1;
            return;
        }
        if !repr.bth.pkey.matches(PKey::DEFAULT) {
            self.counters.bad_pkey += 1;
            self.refusals += 1;
            self.note_drop(meta, Some(&pkt), DropReason::BadPkey);
            return;
        }
        if repr.bth.dest_qp == Qpn::MULTICAST {
            self.handle_mcast(now, meta, &pkt, &repr);
            return;
        }
        let Some(&idx) = self.qpn_map.get(&repr.bth.dest_qp.value()) else {
            // QP 1 is never in the map: MADs take this branch, off the
            // data path.
            if repr.bth.dest_qp == Qpn::GSI {
                if self.gsi.receive(meta, &repr) {
                    self.counters.gsi_rx += 1;
                } else {
                    self.counters.gsi_dropped += 1;
                    self.note_drop(meta, Some(&pkt), DropReason::GsiRejected);
                }
                return;
            }
            self.counters.unknown_qp += 1;
            self.note_drop(meta, Some(&pkt), DropReason::UnknownQp);
            return;
        };
        let Some(qp) = self.qps.get_mut(idx) else {
            self.counters.unknown_qp += 1;
            self.note_drop(meta, Some(&pkt), DropReason::UnknownQp);
            return;
        };
        // An XRC INI QP takes XRC responses, an XRC TGT QP XRC requests.
        let type_ok = match (qp.qp_type, info.transport) {
            (QpType::Rc, Transport::Rc)
            | (QpType::Uc, Transport::Uc)
            | (QpType::Ud, Transport::Ud) => true,
            (QpType::XrcSend, Transport::Xrc) => !info.is_request(),
            (QpType::XrcRecv, Transport::Xrc) => info.is_request(),
            _ => false,
        };
        if !type_ok {
            qp.counters.malformed += 1;
            self.refusals += 1;
            self.note_drop(meta, Some(&pkt), DropReason::WrongTransport);
            return;
        }
        // The address check comes first (rxe's check_addr, hdr_check):
        // nothing from another source reaches the transport's checks.
        let pins = qp.pins_peer();
        if pins && !qp.is_from_peer(meta, self.cfg.local_ip) {
            qp.counters.wrong_peer += 1;
            self.refusals += 1;
            self.note_drop(meta, Some(&pkt), DropReason::WrongPeer);
            return;
        }
        let learn = pins && qp.peer_port.is_none() && qp.expects(&repr, info.is_request());
        if learn {
            qp.peer_port = Some(meta.src.port());
        }
        qp.counters.rx_packets += 1;
        qp.counters.rx_bytes += meta.len as u64;
        // Off (the usual case) this costs the one branch.
        let before = Self::notes_before(&self.notes, qp);
        let refused = |c: &Counters| c.too_many_rd_atomic + c.resp_dropped + c.bad_qkey;
        let refused_before = refused(&qp.counters);
        let mut ctx = ctx!(self, now);
        if info.is_request() {
            qp.handle_request(&repr, meta, &mut ctx);
            qp.counters.resp_dropped += std::mem::take(&mut qp.resp.dropped);
        } else {
            qp.handle_response(&repr, &mut ctx);
        }
        self.refusals += refused(&qp.counters) - refused_before;
        if let Some((c, st)) = before {
            let after = (&qp.counters, qp.state);
            let psn = Some(repr.bth.psn);
            self.notes
                .derive(qp.qpn, (&c, st), after, psn, Some(meta.src));
        }
        Self::wake(&mut self.tx_ready, qp, idx);
        Self::sync_timer(&mut self.timers, &mut self.budget, qp, idx);
        if !self.budget.wait.is_empty() {
            self.release_budget();
        }
    }

    /// ICRC check with the headers a UDP socket cannot see reconstructed;
    /// for IPv4, an identification other than 0 is solved for.
    pub(super) fn icrc_ok(&mut self, meta: &RecvMeta, pkt: &IbPacket<&[u8]>) -> bool {
        let Some(d) = meta.datagram(self.cfg.udp_dst_port) else {
            return false;
        };
        let covered = pkt.icrc_covered();
        let stored = pkt.icrc();
        // One form per opcode, two for FLUSH: rxe's and the annex's
        // (softrdma_wire::icrc).
        if d.icrc_forms(covered).any(|(c, _)| c == stored) {
            return true;
        }
        if !self.cfg.infer_ipv4_ident || meta.src.ip().is_loopback() {
            return false;
        }
        if let IpRepr::V4(_) = d.ip {
            for df in [true, false] {
                let mut d2 = d;
                if let IpRepr::V4(r) = &mut d2.ip {
                    r.dont_frag = df;
                }
                // `after`: bytes after the identification (IPv4 bytes
                // 6..20, UDP, transport, for rxe's FLUSH form twice).
                for (base, after) in d2.icrc_forms(covered) {
                    if solve_ipv4_id(base, stored, after).is_some() {
                        self.counters.icrc_ip_id_inferred += 1;
                        return true;
                    }
                }
            }
        }
        false
    }
}
