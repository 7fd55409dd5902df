//! The responder, rule by rule, with hand-written request packets at
//! explicit virtual times.

mod support;

use softrdma_proto::*;
use softrdma_wire::*;
use support::*;

fn send_only(r: &Rig, psn: Psn, data: &[u8]) -> PacketRepr<'static> {
    let data: &'static [u8] = Box::leak(data.to_vec().into_boxed_slice());
    PacketRepr::new(r.bth(0x04, psn), data)
}

#[test]
fn rnr_nak_when_no_receive_then_ack() {
    // IBA 9.7.5.2.8: no receive WQE → RNR NAK with min_rnr_timer, PSN of the
    // request, MSN unchanged; the request is not consumed.
    let mut r = Rig::new(Setup::default());
    let psn = r.take_psn(1);
    let p = send_only(&r, psn, &pattern(1, 64));
    r.deliver(&p);
    let out = r.sent();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].opcode, 0x11);
    assert_eq!(out[0].psn, psn.value());
    assert_eq!(out[0].aeth, Some((Syndrome::RnrNak { timer: 5 }, 0)));
    assert!(r.recv_cq().is_empty());
    // The retry after a receive is posted succeeds.
    r.post_recv(7, 0, 128);
    r.deliver(&p);
    let out = r.sent();
    assert_eq!(out[0].aeth, Some((ack_syn(), 1)));
    let wc = r.recv_cq();
    assert_eq!(wc.len(), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].byte_len, wc[0].status),
        (7, 64, WcStatus::Success)
    );
    assert_eq!(r.read_mem(0, 64), pattern(1, 64));
    assert_eq!(r.dev.qp_counters(r.qpn).unwrap().rnr_nak_sent, 1);
}

#[test]
fn psn_sequence_error_nak_sent_once() {
    let mut r = Rig::new(Setup::default());
    r.post_recv(1, 0, 4096);
    r.post_recv(2, 4096, 4096);
    let psn = r.take_psn(1);
    // Skip psn: psn+1 and psn+2 arrive first.
    let a = send_only(&r, psn.add(1), &[1; 8]);
    let b = send_only(&r, psn.add(2), &[2; 8]);
    r.deliver(&a);
    r.deliver(&b);
    let out = r.sent();
    assert_eq!(out.len(), 1, "one NAK per sequence error: {out:?}");
    assert_eq!(
        out[0].aeth,
        Some((Syndrome::Nak(NakCode::PsnSequenceError), 0))
    );
    assert_eq!(out[0].psn, psn.value());
    // The missing one arrives, then the rest again.
    let c = send_only(&r, psn, &[3; 8]);
    r.deliver(&c);
    r.deliver(&a);
    let out = r.sent();
    assert_eq!(out.len(), 1, "the two ACKs coalesce: {out:?}");
    assert_eq!(out[0].psn, psn.add(1).value());
    assert_eq!(out[0].aeth, Some((ack_syn(), 2)));
    assert_eq!(r.recv_cq().len(), 2);
}

#[test]
fn duplicate_send_is_acked_not_delivered() {
    let mut r = Rig::new(Setup::default());
    r.post_recv(1, 0, 4096);
    r.post_recv(2, 4096, 4096);
    let psn = r.take_psn(1);
    let p = send_only(&r, psn, &[9; 100]);
    r.deliver(&p);
    assert_eq!(r.sent().len(), 1);
    r.deliver(&p);
    let out = r.sent();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].psn, psn.value());
    assert_eq!(out[0].aeth, Some((ack_syn(), 1)));
    assert_eq!(r.recv_cq().len(), 1, "a duplicate is never delivered twice");
    assert_eq!(r.dev.qp_counters(r.qpn).unwrap().duplicate_requests, 1);
}

#[test]
fn ack_coalescing_in_one_batch() {
    let mut r = Rig::new(Setup::default());
    for i in 0..5 {
        r.post_recv(i, i * 256, 256);
    }
    let psn = r.take_psn(5);
    for i in 0..5 {
        let p = send_only(&r, psn.add(i), &[i as u8; 16]);
        r.deliver(&p);
    }
    let out = r.sent();
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].psn, psn.add(4).value());
    assert_eq!(out[0].aeth, Some((ack_syn(), 5)));
}

#[test]
fn multi_packet_send_and_lengths() {
    let mut r = Rig::new(Setup::default());
    r.post_recv(1, 0, 3000);
    let psn = r.take_psn(3);
    let data = pattern(4, 2500);
    let mut f = PacketRepr::new(r.bth(0x00, psn), &data[..1024]);
    f.bth.ack_req = false;
    let mut m = PacketRepr::new(r.bth(0x01, psn.add(1)), &data[1024..2048]);
    m.bth.ack_req = false;
    let mut l = PacketRepr::new(r.bth(0x03, psn.add(2)), &data[2048..]);
    l.imm = Some(0xabcd);
    l.bth.solicited = true;
    r.deliver(&f);
    r.deliver(&m);
    assert!(r.sent().is_empty(), "no ACK without AckReq");
    r.deliver(&l);
    assert_eq!(r.sent()[0].aeth, Some((ack_syn(), 1)));
    let wc = r.recv_cq();
    assert_eq!(wc[0].byte_len, 2500);
    assert!(wc[0].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(wc[0].imm_or_inv, 0xabcd);
    assert!(wc[0].solicited);
    assert_eq!(r.read_mem(0, 2500), data);
}

#[test]
fn middle_packet_of_wrong_length_is_invalid_request() {
    let mut r = Rig::new(Setup::default());
    r.post_recv(1, 0, 4096);
    let psn = r.take_psn(2);
    let data = pattern(4, 2000);
    let f = PacketRepr::new(r.bth(0x00, psn), &data[..1000]); // FIRST shorter than the MTU
    r.deliver(&f);
    let out = r.sent();
    assert_eq!(
        out[0].aeth,
        Some((Syndrome::Nak(NakCode::InvalidRequest), 0))
    );
    assert_eq!(r.state(), QpState::Err);
}

#[test]
fn opcode_sequence_violation_is_invalid_request() {
    let mut r = Rig::new(Setup::default());
    r.post_recv(1, 0, 4096);
    let psn = r.take_psn(1);
    let m = PacketRepr::new(r.bth(0x01, psn), &[0; 1024]); // MIDDLE with nothing begun
    r.deliver(&m);
    assert_eq!(
        r.sent()[0].aeth,
        Some((Syndrome::Nak(NakCode::InvalidRequest), 0))
    );
    assert_eq!(r.state(), QpState::Err);
    // The posted receive is flushed.
    let wc = r.recv_cq();
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].status, WcStatus::WrFlushErr);
    assert!(r
        .events()
        .contains(&Event::Async(AsyncEvent::QpReqErr(r.qpn))));
}

#[test]
fn write_checks_rkey_bounds_and_rights() {
    // Right key, in bounds: written and ACKed.
    let mut r = Rig::new(Setup::default());
    let psn = r.take_psn(1);
    let p = write_only(&r, psn, VA + 100, r.key, &pattern(2, 64));
    r.deliver(&p);
    assert_eq!(r.sent()[0].aeth, Some((ack_syn(), 1)));
    assert_eq!(r.read_mem(100, 64), pattern(2, 64));

    // Wrong key (one bit flipped, as in nak_rem_access.pcap): NAK 0x62.
    let before = r.mem.snapshot();
    let psn = r.take_psn(1);
    let p = write_only(&r, psn, VA + 100, r.key ^ 0x100, &[0xff; 64]);
    r.deliver(&p);
    let out = r.sent();
    assert_eq!(
        out[0].aeth,
        Some((Syndrome::Nak(NakCode::RemoteAccessError), 1))
    );
    assert_eq!(out[0].psn, psn.value());
    assert_eq!(r.state(), QpState::Err);
    assert_eq!(r.mem.snapshot(), before, "no byte changed");

    // 32 bytes past the end of the region.
    let mut r = Rig::new(Setup::default());
    let psn = r.take_psn(1);
    let before = r.mem.snapshot();
    let p = write_only(&r, psn, VA + MEM as u64 - 32, r.key, &[0xff; 64]);
    r.deliver(&p);
    assert_eq!(
        r.sent()[0].aeth,
        Some((Syndrome::Nak(NakCode::RemoteAccessError), 0))
    );
    assert_eq!(r.mem.snapshot(), before);

    // Region without remote write (QP allows it): remote access error.
    let mut r = Rig::new(Setup::default());
    let ro = std::sync::Arc::new(VecMemory::new(4096));
    let k = r
        .dev
        .reg_mr(
            r.pd,
            0x900_0000,
            ro.clone(),
            Access::LOCAL_WRITE.with(Access::REMOTE_READ),
        )
        .unwrap();
    let psn = r.take_psn(1);
    let p = write_only(&r, psn, 0x900_0000, k, &[0xff; 64]);
    r.deliver(&p);
    assert_eq!(
        r.sent()[0].aeth,
        Some((Syndrome::Nak(NakCode::RemoteAccessError), 0))
    );
    assert!(ro.snapshot().iter().all(|&b| b == 0));
}

#[test]
fn zero_length_write_needs_no_valid_rkey() {
    // IBA C9-88: a zero-length RDMA WRITE is not checked against the R_Key.
    let mut r = Rig::new(Setup::default());
    let psn = r.take_psn(1);
    let p = write_only(&r, psn, 0xdead_0000, 0x1234_5678, &[]);
    r.deliver(&p);
    assert_eq!(r.sent()[0].aeth, Some((ack_syn(), 1)));
    assert_eq!(r.state(), QpState::Rts);
}

#[test]
fn write_with_immediate_consumes_a_receive() {
    let mut r = Rig::new(Setup::default());
    let psn = r.take_psn(1);
    let mut p = write_only(&r, psn, VA + 512, r.key, &pattern(5, 100));
    p.bth.opcode = Opcode(0x0b);
    p.imm = Some(0x1122_3344);
    r.deliver(&p);
    // No receive posted: RNR NAK, nothing written.
    assert_eq!(r.sent()[0].aeth, Some((Syndrome::RnrNak { timer: 5 }, 0)));
    assert_eq!(r.read_mem(512, 100), vec![0; 100]);
    r.post_recv(3, 0, 0);
    r.deliver(&p);
    assert_eq!(r.sent()[0].aeth, Some((ack_syn(), 1)));
    let wc = r.recv_cq();
    assert_eq!(wc[0].opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!(wc[0].byte_len, 100);
    assert_eq!(wc[0].imm_or_inv, 0x1122_3344);
    assert_eq!(r.read_mem(512, 100), pattern(5, 100));
}

#[test]
fn qp_without_remote_atomic_gives_invalid_request() {
    // nak_inv_req_op_err.pcap: FETCH_ADD to a QP opened without remote
    // atomic access → NAK invalid request (0x61).
    let mut r = Rig::new(Setup {
        access: Access::LOCAL_WRITE
            .with(Access::REMOTE_WRITE)
            .with(Access::REMOTE_READ),
        ..Default::default()
    });
    let psn = r.take_psn(1);
    let mut p = PacketRepr::new(r.bth(0x14, psn), &[]);
    p.atomic_eth = Some(AtomicEthRepr {
        va: VA,
        rkey: RKey(r.key),
        swap_add: 1,
        compare: 0,
    });
    r.deliver(&p);
    let out = r.sent();
    assert_eq!(
        out[0].aeth,
        Some((Syndrome::Nak(NakCode::InvalidRequest), 0))
    );
    assert_eq!(r.state(), QpState::Err);
}

#[test]
fn send_longer_than_receive_is_remote_operational_error() {
    // As rxe answers (nak_inv_req_op_err.pcap): 0x63; the receive completes
    // with a local length error.
    let mut r = Rig::new(Setup::default());
    r.post_recv(5, 0, 64);
    let psn = r.take_psn(1);
    let p = send_only(&r, psn, &[1; 128]);
    r.deliver(&p);
    assert_eq!(
        r.sent()[0].aeth,
        Some((Syndrome::Nak(NakCode::RemoteOperationalError), 0))
    );
    let wc = r.recv_cq();
    assert_eq!(wc[0].wr_id, 5);
    assert_eq!(wc[0].status, WcStatus::LocLenErr);
    assert_eq!(r.state(), QpState::Err);
}

fn atomic(r: &Rig, psn: Psn, op: u8, va: u64, swap_add: u64, compare: u64) -> PacketRepr<'static> {
    let mut p = PacketRepr::new(r.bth(op, psn), &[]);
    p.atomic_eth = Some(AtomicEthRepr {
        va,
        rkey: RKey(r.key),
        swap_add,
        compare,
    });
    p
}

#[test]
fn atomics_execute_once_and_replay_from_saved_result() {
    let mut r = Rig::new(Setup::default());
    r.mem.fill_from(8, &100u64.to_ne_bytes());
    let psn = r.take_psn(1);
    let fa = atomic(&r, psn, 0x14, VA + 8, 5, 0);
    r.deliver(&fa);
    let out = r.sent();
    assert_eq!(out[0].opcode, 0x12);
    assert_eq!(out[0].atomic_ack, Some(100));
    assert_eq!(out[0].aeth, Some((ack_syn(), 1)));
    // The duplicate gets the same answer; memory changes once.
    r.deliver(&fa);
    let out = r.sent();
    assert_eq!(out[0].atomic_ack, Some(100));
    assert_eq!(r.read_mem(8, 8), 105u64.to_ne_bytes());
    // Compare-and-swap: match swaps, mismatch does not.
    let psn = r.take_psn(2);
    r.deliver(&atomic(&r, psn, 0x13, VA + 8, 7, 105));
    r.deliver(&atomic(&r, psn.add(1), 0x13, VA + 8, 9, 105));
    let out = r.sent();
    assert_eq!(out[0].atomic_ack, Some(105));
    assert_eq!(out[1].atomic_ack, Some(7));
    assert_eq!(r.read_mem(8, 8), 7u64.to_ne_bytes());
    // Misaligned: invalid request.
    let psn = r.take_psn(1);
    r.deliver(&atomic(&r, psn, 0x14, VA + 12, 1, 0));
    assert_eq!(
        r.sent()[0].aeth,
        Some((Syndrome::Nak(NakCode::InvalidRequest), 3))
    );
}

fn read_req(r: &Rig, psn: Psn, va: u64, len: u32) -> PacketRepr<'static> {
    let mut p = PacketRepr::new(r.bth(0x0c, psn), &[]);
    p.reth = Some(RethRepr {
        va,
        rkey: RKey(r.key),
        dma_len: len,
    });
    p
}

#[test]
fn read_response_segmentation_like_rxe() {
    // read_bw_8k.pcap: FIRST and LAST carry an AETH with the MSN, MIDDLE
    // none; PSNs follow the request's; payloads are MTU-sized but the last.
    let mut r = Rig::new(Setup::default());
    let data = pattern(7, 3000);
    r.mem.fill_from(1000, &data);
    let psn = r.take_psn(3);
    r.deliver(&read_req(&r, psn, VA + 1000, 3000));
    let out = r.sent();
    let ops: Vec<_> = out
        .iter()
        .map(|o| (o.opcode, o.psn, o.payload.len(), o.aeth))
        .collect();
    assert_eq!(
        ops,
        vec![
            (0x0d, psn.value(), 1024, Some((ack_syn(), 1))),
            (0x0e, psn.add(1).value(), 1024, None),
            (0x0f, psn.add(2).value(), 952, Some((ack_syn(), 1))),
        ]
    );
    let got: Vec<u8> = out.iter().flat_map(|o| o.payload.clone()).collect();
    assert_eq!(got, data);
    // The next request's PSN follows the read's response PSNs.
    r.post_recv(1, 8192, 64);
    let p = send_only(&r, psn.add(3), &[1; 8]);
    r.deliver(&p);
    assert_eq!(r.sent()[0].aeth, Some((ack_syn(), 2)));
    // Zero-length read: one READ_RESPONSE_ONLY without payload, R_Key unchecked.
    let psn = r.take_psn(2).add(1);
    let mut z = read_req(&r, psn, 0, 0);
    z.reth.as_mut().unwrap().rkey = RKey(0xbad);
    r.deliver(&z);
    let out = r.sent();
    assert_eq!((out[0].opcode, out[0].payload.len()), (0x10, 0));
}

#[test]
fn duplicate_read_resumes_from_its_psn() {
    // IBA 9.7.5.1.3: a duplicate READ inside an earlier read's PSN range is
    // executed again from that PSN with the duplicate's own VA and length.
    let mut r = Rig::new(Setup::default());
    let data = pattern(8, 4096);
    r.mem.fill_from(0, &data);
    let psn = r.take_psn(4);
    r.deliver(&read_req(&r, psn, VA, 4096));
    assert_eq!(r.sent().len(), 4);
    // Requester lost responses 2 and 3: asks again from psn+2.
    r.deliver(&read_req(&r, psn.add(2), VA + 2048, 2048));
    let out = r.sent();
    let ops: Vec<_> = out.iter().map(|o| (o.opcode, o.psn)).collect();
    assert_eq!(
        ops,
        vec![(0x0d, psn.add(2).value()), (0x0f, psn.add(3).value())]
    );
    assert_eq!(out[0].payload, data[2048..3072]);
    assert_eq!(out[1].payload, data[3072..]);
    assert_eq!(r.dev.qp_counters(r.qpn).unwrap().duplicate_requests, 1);
}

#[test]
fn read_of_forbidden_region_is_remote_access_error() {
    let mut r = Rig::new(Setup::default());
    let psn = r.take_psn(1);
    r.deliver(&read_req(&r, psn, VA + MEM as u64 - 10, 64));
    assert_eq!(
        r.sent()[0].aeth,
        Some((Syndrome::Nak(NakCode::RemoteAccessError), 0))
    );
}

#[test]
fn uc_drops_a_message_missing_a_packet() {
    let mut r = Rig::new(Setup {
        qp_type: QpType::Uc,
        ..Default::default()
    });
    r.post_recv(1, 0, 4096);
    r.post_recv(2, 4096, 4096);
    let psn = r.take_psn(6);
    let d = pattern(3, 3072);
    let base = r.bth(0, psn);
    let mk = |op: u8, p: Psn, data: &[u8]| {
        let data: &'static [u8] = Box::leak(data.to_vec().into_boxed_slice());
        let mut x = PacketRepr::new(BthRepr { psn: p, ..base }, data);
        x.bth.opcode = Opcode(op);
        x.bth.ack_req = false;
        x
    };
    // Message 1: FIRST, (MIDDLE lost), LAST.
    r.deliver(&mk(0x20, psn, &d[..1024]));
    r.deliver(&mk(0x22, psn.add(2), &d[2048..]));
    // Message 2: ONLY.
    r.deliver(&mk(0x24, psn.add(3), &[5; 10]));
    assert!(r.sent().is_empty(), "UC never acknowledges");
    let wc = r.recv_cq();
    assert_eq!(wc.len(), 1, "the broken message is not reported: {wc:?}");
    assert_eq!(wc[0].wr_id, 1, "its receive is reused by the next message");
    assert_eq!(wc[0].byte_len, 10);
    assert_eq!(r.read_mem(0, 10), vec![5; 10]);
    assert!(r.dev.qp_counters(r.qpn).unwrap().uc_msgs_dropped >= 1);
}

#[test]
fn ud_checks_qkey_and_writes_grh() {
    let mut r = Rig::new(Setup {
        qp_type: QpType::Ud,
        ..Default::default()
    });
    r.post_recv(1, 0, 40 + 100);
    let mut p = PacketRepr::new(r.bth(0x65, Psn::new(1)), &[7; 100]);
    p.bth.ack_req = false;
    p.deth = Some(DethRepr {
        qkey: QKey(0x2222_2222),
        src_qp: Qpn::new(0x55),
    });
    p.imm = Some(0xd0d0_0001);
    r.deliver(&p);
    assert!(r.recv_cq().is_empty(), "wrong Q_Key is dropped");
    assert_eq!(r.dev.qp_counters(r.qpn).unwrap().bad_qkey, 1);
    p.deth = Some(DethRepr {
        qkey: QKey(0x1111_1111),
        src_qp: Qpn::new(0x55),
    });
    r.deliver(&p);
    let wc = r.recv_cq();
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].byte_len, 140);
    assert_eq!(wc[0].src_qp, Qpn::new(0x55));
    assert!(wc[0].wc_flags.contains(WcFlags::GRH));
    assert!(wc[0].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(wc[0].imm_or_inv, 0xd0d0_0001);
    // IPv4 layout: 20 zero bytes then the IPv4 header with the source.
    let grh = r.read_mem(0, 40);
    assert!(grh[..20].iter().all(|&b| b == 0));
    assert_eq!(grh[20], 0x45);
    assert_eq!(&grh[32..36], &[10, 0, 0, 2]);
    assert_eq!(r.read_mem(40, 100), vec![7; 100]);
    // A datagram longer than the receive: local length error.
    r.post_recv(2, 0, 60);
    r.deliver(&p);
    assert_eq!(r.recv_cq()[0].status, WcStatus::LocLenErr);
}

#[test]
fn bad_input_is_dropped_and_counted() {
    let mut r = Rig::new(Setup::default());
    r.post_recv(1, 0, 4096);
    let psn = r.take_psn(1);
    let good = send_only(&r, psn, &[1; 32]);
    // Garbage, truncation, unknown opcode.
    r.deliver_raw(&[0u8; 3], ip(PEER_IP));
    r.deliver_raw(&[0xff; 64], ip(PEER_IP));
    let bytes = encode(&good, ip(PEER_IP), ip(DEV_IP));
    r.deliver_raw(&bytes[..bytes.len() - 1], ip(PEER_IP));
    // Corrupted payload: ICRC catches it.
    let mut c = bytes.clone();
    c[20] ^= 0x10;
    r.deliver_raw(&c, ip(PEER_IP));
    // Unknown QPN.
    let mut other = good;
    other.bth.dest_qp = Qpn::new(0x777);
    r.deliver(&other);
    // Wrong P_Key.
    let mut pk = good;
    pk.bth.pkey = PKey(0x8001);
    r.deliver(&pk);
    // Right packet from the wrong peer.
    r.deliver_from(&good, ip("10.0.0.9"));
    // UD opcode to an RC QP.
    let mut ud = good;
    ud.bth.opcode = Opcode(0x64);
    ud.deth = Some(DethRepr {
        qkey: QKey(0),
        src_qp: Qpn::new(1),
    });
    r.deliver(&ud);
    assert!(r.sent().is_empty());
    assert!(r.recv_cq().is_empty());
    assert_eq!(r.state(), QpState::Rts);
    let c = r.dev.counters();
    // The truncated packet still parses (one payload byte less): its ICRC fails.
    assert_eq!(c.icrc_errors, 2);
    // Three bytes, an unknown opcode, and a UD opcode for an RC QP.
    assert_eq!(c.malformed, 3);
    assert_eq!(c.unknown_qp, 1);
    assert_eq!(c.bad_pkey, 1);
    assert_eq!(c.wrong_peer, 1);
    // The good packet still works afterwards.
    r.deliver(&good);
    assert_eq!(r.sent()[0].aeth, Some((ack_syn(), 1)));
    assert_eq!(r.read_mem(0, 32), vec![1; 32]);
}

#[test]
fn send_with_invalidate_invalidates_the_rkey() {
    let mut r = Rig::new(Setup::default());
    let other = std::sync::Arc::new(VecMemory::new(4096));
    let k = r
        .dev
        .reg_mr(
            r.pd,
            0x900_0000,
            other,
            Access::LOCAL_WRITE.with(Access::REMOTE_WRITE),
        )
        .unwrap();
    r.post_recv(1, 0, 256);
    let psn = r.take_psn(2);
    let mut p = send_only(&r, psn, &[1; 64]);
    p.bth.opcode = Opcode(0x17);
    p.ieth = Some(RKey(k));
    r.deliver(&p);
    assert_eq!(r.sent()[0].aeth, Some((ack_syn(), 1)));
    let wc = r.recv_cq();
    assert!(wc[0].wc_flags.contains(WcFlags::WITH_INV));
    assert_eq!(wc[0].imm_or_inv, k);
    // A WRITE through the invalidated key: remote access error (send_inv_mw.pcap).
    let w = write_only(&r, psn.add(1), 0x900_0000, k, &[2; 64]);
    r.deliver(&w);
    assert_eq!(
        r.sent()[0].aeth,
        Some((Syndrome::Nak(NakCode::RemoteAccessError), 1))
    );
}

#[test]
fn comm_established_on_first_packet_in_rtr() {
    let mut r = Rig::new(Setup::default());
    // Back to RTR is impossible, so build a fresh QP left in RTR.
    let (qpn, _) = r.dev.create_qp(&small_rc(r.pd, r.scq, r.rcq)).unwrap();
    let now = r.now;
    let init = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: Access::REMOTE_WRITE,
        ..Default::default()
    };
    r.dev
        .modify_qp(
            now,
            qpn,
            &init,
            AttrMask::STATE
                .with(AttrMask::PKEY_INDEX)
                .with(AttrMask::PORT)
                .with(AttrMask::ACCESS_FLAGS),
        )
        .unwrap();
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Mtu::M1024,
        dest_qp_num: Qpn::new(PEER_QPN),
        rq_psn: Psn::new(10),
        ah_attr: AddressVector::to(ip(PEER_IP)),
        ..Default::default()
    };
    r.dev.modify_qp(now, qpn, &rtr, AttrMask::RC_RTR).unwrap();
    let mut p = write_only(&r, Psn::new(10), VA, r.key, &[1; 4]);
    p.bth.dest_qp = qpn;
    r.deliver(&p);
    assert!(r.events().contains(&Event::Async(AsyncEvent::CommEst(qpn))));
    // A responder in RTR answers.
    assert_eq!(r.sent()[0].aeth, Some((ack_syn(), 1)));
}

#[test]
fn operations_the_qp_does_not_allow_are_invalid_request() {
    // IBA 9.7.5.1.2 / rxe check_op_valid: a WRITE, READ or atomic on an RC
    // QP whose access flags do not grant it → NAK invalid request (0x61)
    // at once, the QP in the error state, the region untouched.
    let all = Access::LOCAL_WRITE
        .with(Access::REMOTE_WRITE)
        .with(Access::REMOTE_READ)
        .with(Access::REMOTE_ATOMIC);
    for (missing, opcode) in [
        (Access::REMOTE_WRITE, 0x0a),
        (Access::REMOTE_READ, 0x0c),
        (Access::REMOTE_ATOMIC, 0x14),
        (Access::REMOTE_ATOMIC, 0x13),
    ] {
        let mut r = Rig::new(Setup::default());
        // The region allows everything; only the QP forbids `missing`.
        let qp_flags = Access(all.remote().0 & !missing.0);
        r.dev
            .modify_qp(
                r.now,
                r.qpn,
                &QpAttr {
                    qp_access_flags: qp_flags,
                    ..Default::default()
                },
                AttrMask::ACCESS_FLAGS,
            )
            .unwrap();
        let psn = r.take_psn(1);
        let p = match opcode {
            0x0a => write_only(&r, psn, VA, r.key, &[7; 32]),
            0x0c => read_req(&r, psn, VA, 64),
            _ => {
                let mut p = PacketRepr::new(r.bth(opcode, psn), &[]);
                p.atomic_eth = Some(AtomicEthRepr {
                    va: VA,
                    rkey: RKey(r.key),
                    swap_add: 1,
                    compare: 0,
                });
                p
            }
        };
        r.deliver(&p);
        let out = r.sent();
        assert_eq!(out.len(), 1, "opcode {opcode:#x}: {out:?}");
        assert_eq!(out[0].opcode, 0x11, "opcode {opcode:#x}");
        assert_eq!(out[0].psn, psn.value());
        assert_eq!(
            out[0].aeth,
            Some((Syndrome::Nak(NakCode::InvalidRequest), 0)),
            "opcode {opcode:#x}"
        );
        assert_eq!(r.state(), QpState::Err, "opcode {opcode:#x}");
        assert_eq!(r.read_mem(0, 32), vec![0; 32], "opcode {opcode:#x}");
        assert!(r
            .events()
            .contains(&Event::Async(AsyncEvent::QpReqErr(r.qpn))));
    }
}

#[test]
fn notes_give_each_drop_its_reason_and_each_nak_its_qp() {
    use softrdma_proto::note::{DropReason, Nak, Note};
    let mut r = Rig::new(Setup::default());
    // Off by default: nothing is kept.
    r.deliver_raw(&[0u8; 3], ip(PEER_IP));
    assert_eq!(r.dev.poll_note(), None);
    r.dev.set_notes(true);
    let psn = r.take_psn(1);
    let good = write_only(&r, psn, VA + 100, r.key, &pattern(2, 64));
    let bytes = encode(&good, ip(PEER_IP), ip(DEV_IP));
    let mut c = bytes.clone();
    c[20] ^= 0x10;
    r.deliver_raw(&c, ip(PEER_IP));
    let mut other = good;
    other.bth.dest_qp = Qpn::new(0x777);
    r.deliver(&other);
    let mut pk = good;
    pk.bth.pkey = PKey(0x8001);
    r.deliver(&pk);
    r.deliver_from(&good, ip("10.0.0.9"));
    let mut notes = Vec::new();
    while let Some(n) = r.dev.poll_note() {
        notes.push(n);
    }
    let drops: Vec<_> = notes
        .iter()
        .map(|n| match *n {
            Note::Dropped {
                qpn,
                psn: p,
                reason,
                ..
            } => (qpn, p, reason),
            n => panic!("{n:?}"),
        })
        .collect();
    assert_eq!(
        drops,
        [
            (Some(r.qpn), Some(psn), DropReason::BadIcrc),
            (Some(Qpn::new(0x777)), Some(psn), DropReason::UnknownQp),
            (Some(r.qpn), Some(psn), DropReason::BadPkey),
            (Some(r.qpn), Some(psn), DropReason::WrongPeer),
        ]
    );
    // A bad R_Key: the NAK sent, and the QP's move to the error state.
    let bad = write_only(&r, psn, VA + 100, r.key ^ 0x100, &[0xff; 64]);
    r.deliver(&bad);
    let _ = r.sent();
    assert_eq!(
        r.dev.poll_note(),
        Some(Note::NakSent {
            qpn: r.qpn,
            psn: Some(psn),
            nak: Nak::RemoteAccessError
        })
    );
    assert_eq!(
        r.dev.poll_note(),
        Some(Note::StateChanged {
            qpn: r.qpn,
            from: QpState::Rts,
            to: QpState::Err
        })
    );
    assert_eq!(r.dev.poll_note(), None);
    assert_eq!(r.dev.notes_lost(), 0);
}
