//! The requester and completer, rule by rule: the device sends requests, the
//! test answers (or not) by hand at explicit virtual times.

mod support;

use softrdma_proto::*;
use softrdma_wire::*;
use support::*;

fn send(id: u64, off: u64, len: u32) -> SendWr {
    let mut wr = SendWr::new(id, WrOpcode::Send);
    wr.sg_list = vec![Sge::new(VA + off, len, 0)];
    wr
}

fn rdma(id: u64, op: WrOpcode, off: u64, len: u32, rva: u64) -> SendWr {
    let mut wr = send(id, off, len);
    wr.opcode = op;
    wr.remote_addr = rva;
    wr.rkey = RKey(0x4242);
    wr
}

/// The transport timer of `timeout`, in ns.
fn timer(t: u8) -> u64 {
    4096 << t
}

#[test]
fn segmentation_ackreq_and_psn_wrap() {
    let mut r = Rig::new(Setup {
        dev_psn: 0xff_fffe,
        ..Default::default()
    });
    let data = pattern(1, 3000);
    r.mem.fill_from(0, &data);
    let mut wr = send(1, 0, 3000);
    wr.opcode = WrOpcode::SendWithImm;
    wr.imm_data = 0xcafe_0002;
    wr.flags = wr.flags.with(SendFlags::SOLICITED);
    r.post_send(wr);
    let out = r.sent();
    let v: Vec<_> = out
        .iter()
        .map(|o| (o.opcode, o.psn, o.ack_req, o.payload.len(), o.imm, o.se))
        .collect();
    assert_eq!(
        v,
        vec![
            (0x00, 0xff_fffe, false, 1024, None, false),
            (0x01, 0xff_ffff, false, 1024, None, false),
            (0x03, 0x00_0000, true, 952, Some(0xcafe_0002), true),
        ]
    );
    assert_eq!(
        out.iter()
            .flat_map(|o| o.payload.clone())
            .collect::<Vec<_>>(),
        data
    );
    assert!(out.iter().all(|o| o.dest_qp == PEER_QPN));
    r.ack(Psn::new(0), 1);
    let wc = r.send_cq();
    assert_eq!(wc.len(), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode, wc[0].byte_len),
        (1, WcStatus::Success, WcOpcode::Send, 3000)
    );
}

#[test]
fn write_first_middle_last_and_only() {
    let mut r = Rig::new(Setup::default());
    r.post_send(rdma(1, WrOpcode::RdmaWrite, 0, 2100, 0x5000));
    r.post_send(rdma(2, WrOpcode::RdmaWriteWithImm, 0, 0, 0x9000));
    let out = r.sent();
    let v: Vec<_> = out
        .iter()
        .map(|o| (o.opcode, o.reth.map(|x| x.dma_len), o.payload.len()))
        .collect();
    assert_eq!(
        v,
        vec![
            (0x06, Some(2100), 1024),
            (0x07, None, 1024),
            (0x08, None, 52),
            (0x0b, Some(0), 0)
        ]
    );
    assert_eq!(out[0].reth.unwrap().va, 0x5000);
    assert_eq!(out[0].reth.unwrap().rkey, RKey(0x4242));
}

#[test]
fn timeout_retransmits_then_retry_exhaustion() {
    // 4.096 µs × 2^timeout, retry_cnt retries, then RETRY_EXC_ERR, the QP in
    // error and later requests flushed.
    let mut r = Rig::new(Setup {
        timeout: 10,
        retry_cnt: 2,
        ..Default::default()
    });
    r.post_send(send(1, 0, 10));
    r.post_send(send(2, 0, 10));
    assert_eq!(r.sent().len(), 2);
    r.advance(timer(10) - 1);
    assert!(r.sent().is_empty(), "not before the timer");
    for _ in 0..2 {
        r.advance(1);
        let out = r.sent();
        assert_eq!(out.len(), 2, "go-back-N resends both");
        assert_eq!(out[0].psn, r.dev_psn.value());
        r.advance(timer(10) - 1);
    }
    r.advance(1);
    assert!(r.sent().is_empty());
    let wc = r.send_cq();
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(r.state(), QpState::Err);
    let c = r.dev.qp_counters(r.qpn).unwrap();
    assert_eq!((c.timeouts, c.retransmits), (3, 4));
}

#[test]
fn progress_resets_the_retry_counter() {
    let mut r = Rig::new(Setup {
        timeout: 8,
        retry_cnt: 1,
        ..Default::default()
    });
    for i in 0..3 {
        r.post_send(send(i, 0, 8));
    }
    assert_eq!(r.sent().len(), 3);
    r.advance(timer(8));
    // After a timeout the in-flight window restarts small (2 packets).
    assert_eq!(r.sent().len(), 2);
    r.ack(r.dev_psn, 1); // progress: the counter is back to 1
    assert_eq!(r.sent().len(), 1, "the window grew again");
    r.advance(timer(8));
    assert_eq!(r.sent().len(), 2);
    r.ack(r.dev_psn.add(2), 3);
    let wc = r.send_cq();
    assert_eq!(wc.len(), 3);
    assert!(wc.iter().all(|w| w.status == WcStatus::Success));
}

#[test]
fn psn_sequence_nak_goes_back_n() {
    let mut r = Rig::new(Setup::default());
    for i in 0..4 {
        r.post_send(send(i, 0, 8));
    }
    assert_eq!(r.sent().len(), 4);
    let p = r.dev_psn;
    // The responder got the first, lost the second.
    r.nak(p.add(1), Syndrome::Nak(NakCode::PsnSequenceError));
    let out = r.sent();
    assert_eq!(
        out.iter().map(|o| o.psn).collect::<Vec<_>>(),
        vec![p.add(1).value(), p.add(2).value(), p.add(3).value()]
    );
    // The NAK acknowledged the first.
    assert_eq!(
        r.send_cq().iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        vec![0]
    );
    r.ack(p.add(3), 4);
    assert_eq!(r.send_cq().len(), 3);
    assert_eq!(r.dev.qp_counters(r.qpn).unwrap().seq_nak_rcvd, 1);
}

#[test]
fn rnr_nak_waits_the_rnr_timer() {
    // rnr_nak.pcap: AETH 0x21 (timer 1 = 10 µs), resend the same PSN after it.
    let mut r = Rig::new(Setup {
        rnr_retry: 2,
        ..Default::default()
    });
    r.post_send(send(1, 0, 64));
    let p = r.dev_psn;
    assert_eq!(r.sent().len(), 1);
    r.nak(p, Syndrome::RnrNak { timer: 14 }); // 1.28 ms
    r.advance(1_279_000);
    assert!(r.sent().is_empty());
    r.advance(1_000);
    let out = r.sent();
    assert_eq!((out.len(), out[0].psn, out[0].opcode), (1, p.value(), 0x04));
    r.nak(p, Syndrome::RnrNak { timer: 1 });
    r.advance(10_000);
    assert_eq!(r.sent().len(), 1);
    r.nak(p, Syndrome::RnrNak { timer: 1 });
    r.advance(10_000);
    assert!(r.sent().is_empty(), "rnr_retry 2 used up");
    let wc = r.send_cq();
    assert_eq!(wc[0].status, WcStatus::RnrRetryExcErr);
    assert_eq!(r.state(), QpState::Err);
}

#[test]
fn rnr_retry_7_is_infinite() {
    let mut r = Rig::new(Setup {
        rnr_retry: 7,
        ..Default::default()
    });
    r.post_send(send(1, 0, 64));
    let p = r.dev_psn;
    r.sent();
    for _ in 0..50 {
        r.nak(p, Syndrome::RnrNak { timer: 1 });
        r.advance(10_000);
        assert_eq!(r.sent().len(), 1);
    }
    r.ack(p, 1);
    assert_eq!(r.send_cq()[0].status, WcStatus::Success);
}

#[test]
fn error_naks_complete_with_matching_status() {
    for (code, status) in [
        (NakCode::InvalidRequest, WcStatus::RemInvReqErr),
        (NakCode::RemoteAccessError, WcStatus::RemAccessErr),
        (NakCode::RemoteOperationalError, WcStatus::RemOpErr),
    ] {
        let mut r = Rig::new(Setup::default());
        r.post_send(send(1, 0, 8));
        r.post_send(rdma(2, WrOpcode::RdmaWrite, 0, 8, 0x1000));
        r.post_send(send(3, 0, 8));
        r.sent();
        let p = r.dev_psn;
        r.nak(p.add(1), Syndrome::Nak(code));
        let wc = r.send_cq();
        assert_eq!(
            wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            vec![
                (1, WcStatus::Success),
                (2, status),
                (3, WcStatus::WrFlushErr)
            ],
            "{code:?}"
        );
        assert_eq!(r.state(), QpState::Err);
    }
}

#[test]
fn read_responses_land_in_the_local_buffer() {
    let mut r = Rig::new(Setup::default());
    r.post_send(rdma(1, WrOpcode::RdmaRead, 100, 2500, 0x7000));
    let out = r.sent();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].opcode, 0x0c);
    assert!(out[0].ack_req);
    assert_eq!(out[0].reth.unwrap().dma_len, 2500);
    let p = r.dev_psn;
    let data = pattern(6, 2500);
    let resp = |r: &mut Rig, op: u8, i: u32, range: std::ops::Range<usize>, aeth: bool| {
        let d: &'static [u8] = Box::leak(data[range].to_vec().into_boxed_slice());
        let mut x = PacketRepr::new(r.bth(op, p.add(i)), d);
        x.bth.ack_req = false;
        if aeth {
            x.aeth = Some(AethRepr {
                syndrome: Syndrome::ACK,
                msn: Msn::new(1),
            });
        }
        r.deliver(&x);
    };
    resp(&mut r, 0x0d, 0, 0..1024, true);
    resp(&mut r, 0x0e, 1, 1024..2048, false);
    assert!(r.send_cq().is_empty());
    resp(&mut r, 0x0f, 2, 2048..2500, true);
    let wc = r.send_cq();
    assert_eq!(
        (wc[0].opcode, wc[0].byte_len, wc[0].status),
        (WcOpcode::RdmaRead, 2500, WcStatus::Success)
    );
    assert_eq!(r.read_mem(100, 2500), data);
    // The next request uses the PSN after the read's responses.
    r.post_send(send(2, 0, 1));
    assert_eq!(r.sent()[0].psn, p.add(3).value());
}

#[test]
fn lost_read_response_re_requests_the_rest() {
    let mut r = Rig::new(Setup::default());
    r.post_send(rdma(1, WrOpcode::RdmaRead, 0, 3072, 0x7000));
    r.sent();
    let p = r.dev_psn;
    let data = pattern(9, 3072);
    let mut first = PacketRepr::new(r.bth(0x0d, p), &data[..1024]);
    first.aeth = Some(AethRepr {
        syndrome: Syndrome::ACK,
        msn: Msn::new(1),
    });
    r.deliver(&first);
    // Response p+1 lost; p+2 arrives: the requester asks again from p+1.
    let mut last = PacketRepr::new(r.bth(0x0f, p.add(2)), &data[2048..]);
    last.aeth = first.aeth;
    r.deliver(&last);
    let out = r.sent();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].opcode, 0x0c);
    assert_eq!(out[0].psn, p.add(1).value());
    let reth = out[0].reth.unwrap();
    assert_eq!((reth.va, reth.dma_len), (0x7000 + 1024, 2048));
    // The responder re-executes from there: FIRST then LAST.
    let mut f2 = PacketRepr::new(r.bth(0x0d, p.add(1)), &data[1024..2048]);
    f2.aeth = first.aeth;
    r.deliver(&f2);
    r.deliver(&last);
    let wc = r.send_cq();
    assert_eq!(wc[0].status, WcStatus::Success);
    assert_eq!(r.read_mem(0, 3072), data);
}

#[test]
fn ack_past_a_read_means_its_response_was_lost() {
    let mut r = Rig::new(Setup::default());
    r.post_send(rdma(1, WrOpcode::RdmaRead, 0, 64, 0x7000));
    r.post_send(send(2, 0, 8));
    assert_eq!(r.sent().len(), 2);
    let p = r.dev_psn;
    r.ack(p.add(1), 2);
    let out = r.sent();
    assert_eq!(out[0].opcode, 0x0c, "the READ is asked again: {out:?}");
    assert_eq!(out[0].psn, p.value());
    assert!(r.send_cq().is_empty(), "nothing completes before the READ");
}

#[test]
fn atomic_result_lands_in_the_local_buffer() {
    let mut r = Rig::new(Setup::default());
    let mut wr = rdma(1, WrOpcode::AtomicCmpAndSwp, 8, 8, 0x7008);
    wr.compare_add = 3;
    wr.swap = 4;
    r.post_send(wr);
    let out = r.sent();
    let a = out[0].atomic.unwrap();
    assert_eq!(
        (out[0].opcode, a.swap_add, a.compare, a.va),
        (0x13, 4, 3, 0x7008)
    );
    let mut ack = PacketRepr::new(r.bth(0x12, r.dev_psn), &[]);
    ack.aeth = Some(AethRepr {
        syndrome: Syndrome::ACK,
        msn: Msn::new(1),
    });
    ack.atomic_ack = Some(0x1122_3344_5566_7788);
    r.deliver(&ack);
    let wc = r.send_cq();
    assert_eq!((wc[0].opcode, wc[0].byte_len), (WcOpcode::CompSwap, 8));
    assert_eq!(r.read_mem(8, 8), 0x1122_3344_5566_7788u64.to_ne_bytes());
}

#[test]
fn max_rd_atomic_limits_outstanding_reads() {
    let mut r = Rig::new(Setup {
        max_rd_atomic: 2,
        ..Default::default()
    });
    for i in 0..4 {
        r.post_send(rdma(i, WrOpcode::RdmaRead, i * 64, 64, 0x7000));
    }
    assert_eq!(r.sent().len(), 2);
    let p = r.dev_psn;
    let mut x = PacketRepr::new(r.bth(0x10, p), &[1; 64]);
    x.aeth = Some(AethRepr {
        syndrome: Syndrome::ACK,
        msn: Msn::new(1),
    });
    r.deliver(&x);
    let out = r.sent();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].psn, p.add(2).value());
}

#[test]
fn fence_waits_for_earlier_reads() {
    let mut r = Rig::new(Setup::default());
    r.post_send(rdma(1, WrOpcode::RdmaRead, 0, 64, 0x7000));
    let mut w = rdma(2, WrOpcode::RdmaWrite, 64, 8, 0x8000);
    w.flags = w.flags.with(SendFlags::FENCE);
    r.post_send(w);
    assert_eq!(r.sent().len(), 1, "the fenced WRITE waits");
    let mut x = PacketRepr::new(r.bth(0x10, r.dev_psn), &[1; 64]);
    x.aeth = Some(AethRepr {
        syndrome: Syndrome::ACK,
        msn: Msn::new(1),
    });
    r.deliver(&x);
    let out = r.sent();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].opcode, 0x0a);
}

#[test]
fn unsignaled_requests_complete_silently() {
    let mut r = Rig::new(Setup::default());
    let mut a = send(1, 0, 8);
    a.flags = SendFlags(0);
    r.post_send(a);
    r.post_send(send(2, 0, 8));
    r.sent();
    r.ack(r.dev_psn.add(1), 2);
    assert_eq!(
        r.send_cq().iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        vec![2]
    );
}

#[test]
fn local_protection_error_on_bad_lkey() {
    let mut r = Rig::new(Setup::default());
    let mut wr = send(1, 0, 8);
    wr.sg_list[0].lkey = 0xbad;
    r.dev.post_send(r.now, r.qpn, wr).unwrap();
    r.post_send(send(2, 0, 8));
    assert!(r.sent().is_empty());
    let wc = r.send_cq();
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::LocProtErr), (2, WcStatus::WrFlushErr)]
    );
    // READ into a region without local write: protection error too.
    let mut r = Rig::new(Setup::default());
    let ro = std::sync::Arc::new(VecMemory::new(64));
    let k = r.dev.reg_mr(r.pd, 0x900_0000, ro, Access(0)).unwrap();
    let mut wr = rdma(1, WrOpcode::RdmaRead, 0, 8, 0x7000);
    wr.sg_list[0] = Sge::new(0x900_0000, 8, k);
    r.dev.post_send(r.now, r.qpn, wr).unwrap();
    r.sent();
    assert_eq!(r.send_cq()[0].status, WcStatus::LocProtErr);
}

#[test]
fn inline_data_is_copied_at_post_time() {
    let mut r = Rig::new(Setup::default());
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.flags = wr.flags.with(SendFlags::INLINE);
    wr.inline_data = b"hello inline".to_vec();
    r.post_send(wr);
    assert_eq!(r.sent()[0].payload, b"hello inline");
}

#[test]
fn ud_send_carries_deth_and_uses_the_ah() {
    let mut r = Rig::new(Setup {
        qp_type: QpType::Ud,
        ..Default::default()
    });
    let ah = r
        .dev
        .create_ah(r.pd, AddressVector::to(ip(PEER_IP)))
        .unwrap();
    let mut wr = send(1, 0, 100);
    wr.opcode = WrOpcode::SendWithImm;
    wr.imm_data = 5;
    wr.ud = Some(UdDest {
        ah,
        remote_qpn: Qpn::new(0x77),
        remote_qkey: QKey(0x8000_0000), // high bit: use the QP's Q_Key
    });
    r.post_send(wr);
    let out = r.sent();
    assert_eq!(out[0].opcode, 0x65);
    assert_eq!(out[0].dest_qp, 0x77);
    assert!(!out[0].ack_req);
    assert_eq!(
        out[0].deth,
        Some(DethRepr {
            qkey: QKey(0x1111_1111),
            src_qp: r.qpn
        })
    );
    // Completes once sent.
    assert_eq!(r.send_cq()[0].status, WcStatus::Success);
    // Longer than the MTU: local length error.
    let mut wr = send(2, 0, 5000);
    wr.ud = Some(UdDest {
        ah,
        remote_qpn: Qpn::new(0x77),
        remote_qkey: QKey(1),
    });
    r.post_send(wr);
    assert!(r.sent().is_empty());
    assert_eq!(r.send_cq()[0].status, WcStatus::LocLenErr);
}

#[test]
fn uc_requests_complete_without_acks() {
    let mut r = Rig::new(Setup {
        qp_type: QpType::Uc,
        ..Default::default()
    });
    r.post_send(rdma(1, WrOpcode::RdmaWrite, 0, 1500, 0x100));
    let out = r.sent();
    assert_eq!(
        out.iter().map(|o| o.opcode).collect::<Vec<_>>(),
        vec![0x26, 0x28]
    );
    assert!(out.iter().all(|o| !o.ack_req));
    assert_eq!(r.send_cq()[0].status, WcStatus::Success);
    assert!(r.dev.poll_timeout().is_none(), "no transport timer on UC");
}

#[test]
fn a_long_message_goes_out_in_one_burst() {
    let mut r = Rig::new(Setup {
        mtu: Mtu::M4096,
        ..Default::default()
    });
    r.post_send(send(1, 0, 60_000));
    let out = r.sent();
    assert_eq!(out.len(), 15);
}

/// A QP that has both an ACK (of the peer's WRITE) and a request of its own
/// to send, after sending a response, sends the request first: in a
/// ping-pong the answer then travels ahead of the ACK nobody waits for.
/// Requests and responses take turns, so neither starves the other.
#[test]
fn requests_and_responses_take_turns() {
    let mut r = Rig::new(Setup::default());
    let ping = |r: &mut Rig, i: u8| {
        let psn = r.take_psn(1);
        let data = [i; 8];
        let mut p = PacketRepr::new(r.bth(0x0a, psn), &data);
        p.bth.ack_req = true;
        p.reth = Some(RethRepr {
            va: VA + 64,
            rkey: RKey(r.key),
            dma_len: 8,
        });
        r.deliver(&p);
    };
    // The peer writes; we answer with a WRITE of our own.
    ping(&mut r, 1);
    r.post_send(rdma(1, WrOpcode::RdmaWrite, 0, 8, 0x5000));
    let order: Vec<u8> = r.sent().iter().map(|o| o.opcode).collect();
    assert_eq!(order, vec![0x0a, 0x11], "our WRITE, then the ACK");
    // Next round, the same.
    ping(&mut r, 2);
    r.post_send(rdma(2, WrOpcode::RdmaWrite, 0, 8, 0x5000));
    let order: Vec<u8> = r.sent().iter().map(|o| o.opcode).collect();
    assert_eq!(order, vec![0x0a, 0x11]);
    // Three of each: the responder coalesces its ACK of the three WRITEs,
    // which leaves between our first and second request, not after all.
    for i in 0..3 {
        ping(&mut r, 3 + i);
        r.post_send(rdma(3 + i as u64, WrOpcode::RdmaWrite, 0, 8, 0x5000));
    }
    let order: Vec<u8> = r.sent().iter().map(|o| o.opcode).collect();
    assert_eq!(order, vec![0x0a, 0x11, 0x0a, 0x0a]);
}

#[test]
fn chunked_write_is_one_write_only_per_packet() {
    // WriteChunking: every packet of a multi-packet RC WRITE is a WRITE
    // ONLY with the RETH of its own bytes (equal-sized packets for GSO
    // runs); an ACK for the last one completes the request.
    let mut r = Rig::new(Setup {
        write_chunking: WriteChunking::Always,
        ..Default::default()
    });
    let data = pattern(5, 2100);
    r.mem.fill_from(0, &data);
    r.post_send(rdma(1, WrOpcode::RdmaWrite, 0, 2100, 0x5000));
    let out = r.sent();
    let v: Vec<_> = out
        .iter()
        .map(|o| {
            let reth = o.reth.expect("each packet has a RETH");
            (o.opcode, o.ack_req, reth.va, reth.dma_len, o.payload.len())
        })
        .collect();
    assert_eq!(
        v,
        vec![
            (0x0a, false, 0x5000, 1024, 1024),
            (0x0a, false, 0x5400, 1024, 1024),
            (0x0a, true, 0x5800, 52, 52),
        ]
    );
    assert_eq!(
        out.iter()
            .flat_map(|o| o.payload.clone())
            .collect::<Vec<_>>(),
        data
    );
    assert!(r.send_cq().is_empty());
    r.ack(r.dev_psn.add(2), 3);
    let wc = r.send_cq();
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].byte_len),
        (1, WcStatus::Success, 2100)
    );
    // With immediate, or on UC, the standard segmentation stays.
    r.post_send(rdma(2, WrOpcode::RdmaWriteWithImm, 0, 2100, 0x5000));
    let ops: Vec<u8> = r.sent().iter().map(|o| o.opcode).collect();
    assert_eq!(ops, vec![0x06, 0x07, 0x09]);
}

#[test]
fn notes_say_naks_received_retransmissions_and_timeouts() {
    use softrdma_proto::note::{Nak, Note};
    let mut r = Rig::new(Setup {
        timeout: 10,
        retry_cnt: 2,
        ..Default::default()
    });
    r.dev.set_notes(true);
    for i in 0..4 {
        r.post_send(send(i, 0, 8));
    }
    assert_eq!(r.sent().len(), 4);
    let p = r.dev_psn;
    r.nak(p.add(1), Syndrome::Nak(NakCode::PsnSequenceError));
    assert_eq!(r.sent().len(), 3);
    let mut notes = Vec::new();
    while let Some(n) = r.dev.poll_note() {
        notes.push(n);
    }
    assert_eq!(
        notes.first(),
        Some(&Note::NakReceived {
            qpn: r.qpn,
            psn: Some(p.add(1)),
            nak: Nak::PsnSequenceError
        }),
        "{notes:?}"
    );
    let resent: u64 = notes
        .iter()
        .map(|n| match n {
            Note::Retransmitted { qpn, packets } if *qpn == r.qpn => *packets,
            _ => 0,
        })
        .sum();
    assert_eq!(resent, 3, "{notes:?}");
    // The timer: its expiry, then the packets sent again.
    r.advance(timer(10));
    let _ = r.sent();
    let mut notes = Vec::new();
    while let Some(n) = r.dev.poll_note() {
        notes.push(n);
    }
    assert!(notes.contains(&Note::Timeout { qpn: r.qpn }), "{notes:?}");
}
