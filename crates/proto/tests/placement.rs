//! FLUSH and ATOMIC WRITE (IBA 1.5, annex A19, the Memory Placement
//! Extensions) at the core: the requester's packets as rxe builds them,
//! the responder's checks, execution, zero-length READ RESPONSE ONLY
//! acknowledgement and duplicate handling, and the completer.

mod support;

use softrdma_proto::*;
use softrdma_wire::ext::{FLUSH_GLOBAL, FLUSH_MR, FLUSH_PERSISTENT, FLUSH_RANGE};
use softrdma_wire::*;
use std::sync::Arc;
use support::*;

fn rw() -> Access {
    Access::LOCAL_WRITE
        .with(Access::REMOTE_WRITE)
        .with(Access::REMOTE_READ)
}

/// Grants the rig's QP `access` (RTS → RTS).
fn qp_access(r: &mut Rig, access: Access) {
    let a = QpAttr {
        qp_state: QpState::Rts,
        qp_access_flags: access,
        ..Default::default()
    };
    r.dev
        .modify_qp(
            r.now,
            r.qpn,
            &a,
            AttrMask::STATE.with(AttrMask::ACCESS_FLAGS),
        )
        .unwrap();
}

fn atomic_write_wr(id: u64, va: u64, rkey: u32, data: [u8; 8]) -> SendWr {
    let mut wr = SendWr::new(id, WrOpcode::AtomicWrite);
    wr.flags = wr.flags.with(SendFlags::INLINE);
    wr.inline_data = data.to_vec();
    wr.remote_addr = va;
    wr.rkey = RKey(rkey);
    wr
}

fn flush_wr(id: u64, va: u64, rkey: u32, len: u64, ptype: u8, level: u8) -> SendWr {
    let mut wr = SendWr::new(id, WrOpcode::Flush);
    wr.remote_addr = va;
    wr.rkey = RKey(rkey);
    wr.flush = FlushSpec {
        placement_type: ptype,
        level,
    };
    wr.flush_len = len;
    wr
}

/// The peer's zero-length RDMA READ RESPONSE ONLY for `psn`.
fn zero_read_response(r: &mut Rig, psn: Psn, msn: u32) {
    let mut p = PacketRepr::new(r.bth(0x10, psn), &[]);
    p.bth.ack_req = false;
    p.aeth = Some(AethRepr {
        syndrome: Syndrome::ACK,
        msn: Msn::new(msn),
    });
    r.deliver(&p);
}

#[test]
fn atomic_write_request_is_rxe_s_packet_and_completes_on_the_zero_read_response() {
    let mut r = Rig::new(Setup::default());
    let data = [1, 2, 3, 4, 5, 6, 7, 8];
    r.post_send(atomic_write_wr(7, 0x7000_1000, 0xabcd, data));
    let out = r.sent();
    assert_eq!(out.len(), 1);
    let p = &out[0];
    assert_eq!(p.opcode, 0x1d);
    assert_eq!(p.psn, r.dev_psn.value());
    assert!(p.ack_req, "the only packet asks for its ACK");
    assert_eq!(
        p.reth,
        Some(RethRepr {
            va: 0x7000_1000,
            rkey: RKey(0xabcd),
            dma_len: 8
        })
    );
    assert_eq!(p.payload, data);
    // A plain ACK does not complete it (the response was lost: go back).
    let first = r.dev_psn;
    r.ack(first, 1);
    assert!(r.send_cq().is_empty());
    let resent = r.sent();
    assert_eq!(resent.len(), 1);
    assert_eq!(resent[0].opcode, 0x1d);
    let first = r.dev_psn;
    zero_read_response(&mut r, first, 1);
    let wc = r.send_cq();
    assert_eq!(wc.len(), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode, wc[0].byte_len),
        (7, WcStatus::Success, WcOpcode::AtomicWrite, 8)
    );
}

#[test]
fn atomic_write_counts_against_max_rd_atomic() {
    let mut r = Rig::new(Setup {
        max_rd_atomic: 1,
        ..Default::default()
    });
    r.post_send(atomic_write_wr(1, 0x1000, 1, [1; 8]));
    r.post_send(atomic_write_wr(2, 0x1008, 1, [2; 8]));
    assert_eq!(
        r.sent().len(),
        1,
        "the second waits for the first's response"
    );
    let first = r.dev_psn;
    zero_read_response(&mut r, first, 1);
    let out = r.sent();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].psn, r.dev_psn.add(1).value());
}

#[test]
fn atomic_write_is_8_bytes_inline_on_rc_only() {
    let mut r = Rig::new(Setup::default());
    let mut wr = atomic_write_wr(1, 0, 1, [0; 8]);
    wr.inline_data.pop();
    assert!(r.dev.post_send(r.now, r.qpn, wr).is_err());
    let mut r = Rig::new(Setup {
        qp_type: QpType::Uc,
        ..Default::default()
    });
    assert!(r
        .dev
        .post_send(r.now, r.qpn, atomic_write_wr(1, 0, 1, [0; 8]))
        .is_err());
    let mut r = Rig::new(Setup {
        qp_type: QpType::Uc,
        ..Default::default()
    });
    assert!(r
        .dev
        .post_send(
            r.now,
            r.qpn,
            flush_wr(1, 0, 1, 0, FLUSH_GLOBAL, FLUSH_RANGE)
        )
        .is_err());
}

fn aw_packet(r: &Rig, psn: Psn, va: u64, rkey: u32, data: &[u8]) -> PacketRepr<'static> {
    let data: &'static [u8] = Box::leak(data.to_vec().into_boxed_slice());
    let mut p = PacketRepr::new(r.bth(0x1d, psn), data);
    p.reth = Some(RethRepr {
        va,
        rkey: RKey(rkey),
        dma_len: data.len() as u32,
    });
    p
}

#[test]
fn atomic_write_responder_writes_acks_and_never_replays() {
    let mut r = Rig::new(Setup::default());
    let psn = r.take_psn(1);
    let p = aw_packet(&r, psn, VA + 0x40, r.key, &[9, 8, 7, 6, 5, 4, 3, 2]);
    r.deliver(&p);
    let out = r.sent();
    assert_eq!(out.len(), 1);
    // rxe's send_read_response_ack: RDMA READ RESPONSE ONLY, no payload,
    // AETH ACK with the MSN, the request's PSN, no AckReq.
    assert_eq!(out[0].opcode, 0x10);
    assert_eq!(out[0].psn, psn.value());
    assert_eq!(out[0].aeth, Some((Syndrome::ACK, 1)));
    assert!(out[0].payload.is_empty());
    assert!(!out[0].ack_req);
    assert_eq!(r.read_mem(0x40, 8), [9, 8, 7, 6, 5, 4, 3, 2]);
    // The program changes the bytes; a duplicate is acknowledged again
    // (same MSN) and not executed again.
    r.mem.fill_from(0x40, &[0; 8]);
    r.deliver(&p);
    let out = r.sent();
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].opcode, out[0].aeth),
        (0x10, Some((Syndrome::ACK, 1)))
    );
    assert_eq!(r.read_mem(0x40, 8), [0; 8]);
}

#[test]
fn atomic_write_responder_refuses_what_rxe_refuses() {
    // Misaligned: invalid request (rxe_mr_do_atomic_write).
    let mut r = Rig::new(Setup::default());
    let psn = r.take_psn(1);
    r.deliver(&aw_packet(&r, psn, VA + 4, r.key, &[1; 8]));
    assert_eq!(
        r.sent()[0].aeth,
        Some((Syndrome::Nak(NakCode::InvalidRequest), 0))
    );
    assert_eq!(r.read_mem(0, 16), [0; 16]);
    // Not 8 bytes (oA19-28): invalid request.
    let mut r = Rig::new(Setup::default());
    let psn = r.take_psn(1);
    r.deliver(&aw_packet(&r, psn, VA, r.key, &[1; 4]));
    assert_eq!(
        r.sent()[0].aeth,
        Some((Syndrome::Nak(NakCode::InvalidRequest), 0))
    );
    // A QP without remote write: invalid request (check_qp_attr_access).
    let mut r = Rig::new(Setup::default());
    qp_access(&mut r, Access::REMOTE_READ);
    let psn = r.take_psn(1);
    r.deliver(&aw_packet(&r, psn, VA, r.key, &[1; 8]));
    assert_eq!(
        r.sent()[0].aeth,
        Some((Syndrome::Nak(NakCode::InvalidRequest), 0))
    );
    // Out of the region: remote access error.
    let mut r = Rig::new(Setup::default());
    let psn = r.take_psn(1);
    r.deliver(&aw_packet(&r, psn, VA + MEM as u64 - 4, r.key, &[1; 8]));
    assert_eq!(
        r.sent()[0].aeth,
        Some((Syndrome::Nak(NakCode::RemoteAccessError), 0))
    );
}

#[test]
fn flush_request_is_rxe_s_packet() {
    let mut r = Rig::new(Setup::default());
    r.post_send(flush_wr(
        3,
        0x7f00_0000_1000,
        0x4242,
        4096,
        FLUSH_GLOBAL,
        FLUSH_RANGE,
    ));
    let out = r.sent();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].opcode, 0x1c);
    assert!(out[0].ack_req);
    assert_eq!(
        out[0].feth,
        Some(FethRepr {
            placement_type: FLUSH_GLOBAL,
            selectivity_level: FLUSH_RANGE
        })
    );
    assert_eq!(
        out[0].reth,
        Some(RethRepr {
            va: 0x7f00_0000_1000,
            rkey: RKey(0x4242),
            dma_len: 4096
        })
    );
    assert!(out[0].payload.is_empty());
    let first = r.dev_psn;
    zero_read_response(&mut r, first, 1);
    let wc = r.send_cq();
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode, wc[0].byte_len),
        (3, WcStatus::Success, WcOpcode::Flush, 4096)
    );
    // A bad type or level is refused at post time.
    for (t, l) in [(4, FLUSH_RANGE), (FLUSH_GLOBAL, 2)] {
        assert!(r
            .dev
            .post_send(r.now, r.qpn, flush_wr(4, 0, 1, 8, t, l))
            .is_err());
    }
}

fn flush_packet(
    r: &Rig,
    psn: Psn,
    va: u64,
    rkey: u32,
    len: u32,
    t: u8,
    l: u8,
) -> PacketRepr<'static> {
    let mut p = PacketRepr::new(r.bth(0x1c, psn), &[]);
    p.feth = Some(FethRepr {
        placement_type: t,
        selectivity_level: l,
    });
    p.reth = Some(RethRepr {
        va,
        rkey: RKey(rkey),
        dma_len: len,
    });
    p
}

/// A rig whose QP grants both FLUSH rights and a region granting `mr`.
fn flush_rig(mr: Access) -> (Rig, u32) {
    let mut r = Rig::new(Setup::default());
    qp_access(&mut r, rw().remote().with(Access::FLUSH));
    let mem = Arc::new(VecMemory::new(4096));
    let key = r.dev.reg_mr(r.pd, 0x90_0000, mem, mr).unwrap();
    (r, key)
}

#[test]
fn flush_responder_checks_rights_then_acknowledges() {
    let (mut r, key) = flush_rig(rw().with(Access::FLUSH_GLOBAL));
    let psn = r.take_psn(1);
    r.deliver(&flush_packet(
        &r,
        psn,
        0x90_0100,
        key,
        256,
        FLUSH_GLOBAL,
        FLUSH_RANGE,
    ));
    let out = r.sent();
    assert_eq!(
        (out[0].opcode, out[0].psn, out[0].aeth),
        (0x10, psn.value(), Some((Syndrome::ACK, 1)))
    );
    // The whole region, whatever the address and length say.
    let psn = r.take_psn(1);
    r.deliver(&flush_packet(
        &r,
        psn,
        0,
        key,
        12_345_678,
        FLUSH_GLOBAL,
        FLUSH_MR,
    ));
    assert_eq!(r.sent()[0].aeth, Some((Syndrome::ACK, 2)));
    // A duplicate is acknowledged again.
    r.deliver(&flush_packet(
        &r,
        psn,
        0,
        key,
        12_345_678,
        FLUSH_GLOBAL,
        FLUSH_MR,
    ));
    assert_eq!(r.sent()[0].aeth, Some((Syndrome::ACK, 2)));
    // A range outside the region: remote access error.
    let psn = r.take_psn(1);
    r.deliver(&flush_packet(
        &r,
        psn,
        0x90_0f00,
        key,
        0x200,
        FLUSH_GLOBAL,
        FLUSH_RANGE,
    ));
    assert_eq!(
        r.sent()[0].aeth,
        Some((Syndrome::Nak(NakCode::RemoteAccessError), 2))
    );
}

/// The answer (AETH) to a persistent FLUSH of 64 bytes at the flush rig's
/// region.
fn persistent_flush(r: &mut Rig, key: u32) -> Option<(Syndrome, u32)> {
    let psn = r.take_psn(1);
    r.deliver(&flush_packet(
        r,
        psn,
        0x90_0000,
        key,
        64,
        FLUSH_PERSISTENT,
        FLUSH_RANGE,
    ));
    r.sent()[0].aeth
}

#[test]
fn persistent_flush_of_a_region_without_the_right_is_a_remote_access_error() {
    // pyverbs' test_qp_ex_rc_flush_type_violate.
    let (mut r, key) = flush_rig(rw().with(Access::FLUSH_GLOBAL));
    assert_eq!(
        persistent_flush(&mut r, key),
        Some((Syndrome::Nak(NakCode::RemoteAccessError), 0))
    );
    assert_eq!(r.state(), QpState::Err);
}

#[test]
fn flush_on_a_qp_without_the_right_is_an_invalid_request() {
    let (mut r, key) = flush_rig(rw().with(Access::FLUSH));
    qp_access(&mut r, rw().remote().with(Access::FLUSH_GLOBAL));
    assert_eq!(
        persistent_flush(&mut r, key),
        Some((Syndrome::Nak(NakCode::InvalidRequest), 0))
    );
}

#[test]
fn flush_and_atomic_write_rights_are_accepted_by_reg_mr_and_modify_qp() {
    let mut r = Rig::new(Setup::default());
    let mem = Arc::new(VecMemory::new(64));
    let all = rw().with(Access::FLUSH).with(Access::MW_BIND);
    r.dev.reg_mr(r.pd, 0x80_0000, mem, all).unwrap();
    qp_access(&mut r, Access(Access::QP_SUPPORTED));
    qp_access(&mut r, Access::REMOTE_WRITE);
    let a = QpAttr {
        qp_state: QpState::Rts,
        qp_access_flags: Access(1 << 12),
        ..Default::default()
    };
    assert!(r
        .dev
        .modify_qp(
            r.now,
            r.qpn,
            &a,
            AttrMask::STATE.with(AttrMask::ACCESS_FLAGS)
        )
        .is_err());
}

/// `p` from the peer with the ICRC `form` computes (identification
/// `ident`): "rxe" (BTH through RETH fed twice, what rxe and softrdma send)
/// or "iba" (the annex's).
fn flush_bytes(p: &PacketRepr<'_>, ident: u16, form: &str) -> Vec<u8> {
    let mut buf = vec![0u8; p.buffer_len()];
    let n = p.emit(&mut buf).unwrap();
    let mut ip = IpRepr::between(ip(PEER_IP), ip(DEV_IP), 0).unwrap();
    if let IpRepr::V4(v) = &mut ip {
        v.ident = ident;
    }
    let d = DatagramRepr::new(ip, 4791, 4791);
    let c = if form == "rxe" {
        d.icrc(&buf[..n - 4])
    } else {
        d.icrc_iba(&buf[..n - 4])
    };
    buf[n - 4..].copy_from_slice(&c.to_le_bytes());
    buf
}

#[test]
fn flush_icrc_is_rxe_s_form_and_either_form_is_accepted() {
    // Sent: rxe's form (Linux 6.12 drops a FLUSH with the annex's ICRC).
    let mut r = Rig::new(Setup::default());
    qp_access(&mut r, rw().remote().with(Access::FLUSH));
    r.post_send(flush_wr(
        1,
        0x7000_0000,
        0x1234,
        64,
        FLUSH_GLOBAL,
        FLUSH_RANGE,
    ));
    let mut buf = vec![0u8; 8192];
    let tx = r.dev.poll_transmit(r.now, &mut buf).unwrap();
    let pkt = IbPacket::new_checked(&buf[..tx.len]).unwrap();
    let d = DatagramRepr::new(
        IpRepr::between(ip(DEV_IP), ip(PEER_IP), 0).unwrap(),
        4791,
        4791,
    );
    assert_eq!(pkt.bth().opcode(), Opcode(0x1c));
    assert_eq!(pkt.icrc(), d.icrc(pkt.icrc_covered()));
    assert_ne!(pkt.icrc(), d.icrc_iba(pkt.icrc_covered()));

    // Received: either form, with identification 0 or another (solved).
    let (mut r, key) = flush_rig(rw().with(Access::FLUSH_GLOBAL));
    let mut msn = 0;
    for (ident, form) in [(0, "rxe"), (0, "iba"), (0xbf85, "rxe"), (0x0102, "iba")] {
        let psn = r.take_psn(1);
        let p = flush_packet(&r, psn, 0x90_0100, key, 64, FLUSH_GLOBAL, FLUSH_RANGE);
        r.deliver_raw(&flush_bytes(&p, ident, form), ip(PEER_IP));
        msn += 1;
        let out = r.sent();
        assert_eq!(out.len(), 1, "ident {ident:#x} form {form}");
        assert_eq!(
            (out[0].opcode, out[0].aeth),
            (0x10, Some((Syndrome::ACK, msn)))
        );
    }
    assert_eq!(r.dev.counters().icrc_ip_id_inferred, 2);
    // A corrupted FLUSH is dropped: no answer.
    let psn = r.take_psn(1);
    let p = flush_packet(&r, psn, 0x90_0100, key, 64, FLUSH_GLOBAL, FLUSH_RANGE);
    let mut b = flush_bytes(&p, 0, "rxe");
    b[20] ^= 0x40;
    r.deliver_raw(&b, ip(PEER_IP));
    assert!(r.sent().is_empty());
}
