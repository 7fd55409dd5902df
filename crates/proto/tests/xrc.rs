//! XRC at the core, scripted: XRC domains and SRQs, a TGT QP taking a
//! scripted peer's XRC requests through the SRQ each XRCETH names (its
//! WQE, its CQ, its protection domain), XRC response opcodes, the
//! invalid-XRCETH NAK, RC sequencing on XRC, an INI QP's requests, the
//! modify-QP masks of IBA table 91 for both XRC types, and what holds what.

mod support;

use softrdma_proto::*;
use softrdma_wire::*;
use std::sync::Arc;
use support::{encode, ip, poll, DEV_IP, PEER_IP, PEER_QPN, VA};

const MEM: usize = 1 << 16;
const PEER_PSN: u32 = 0x2000;

/// A device with an XRC domain, two XRC SRQs (own CQs, one PD) and a TGT
/// QP in RTS connected to the scripted peer.
struct Tgt {
    dev: Device,
    now: Instant,
    pd: PdId,
    xrcd: XrcdId,
    qpn: Qpn,
    srq: [(SrqId, u32, CqId); 2],
    mem: Arc<VecMemory>,
    key: u32,
    psn: Psn,
}

fn bring_up(dev: &mut Device, now: Instant, qpn: Qpn, t: QpType) {
    let a = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: Access::REMOTE_WRITE
            .with(Access::REMOTE_READ)
            .with(Access::REMOTE_ATOMIC),
        ..Default::default()
    };
    let m = AttrMask::required(t, QpState::Reset, QpState::Init).unwrap();
    dev.modify_qp(now, qpn, &a, m).unwrap();
    let a = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Mtu::M1024,
        dest_qp_num: Qpn::new(PEER_QPN),
        rq_psn: Psn::new(PEER_PSN),
        max_dest_rd_atomic: 4,
        min_rnr_timer: 5,
        ah_attr: AddressVector::to(ip(PEER_IP)),
        ..Default::default()
    };
    let m = AttrMask::required(t, QpState::Init, QpState::Rtr).unwrap();
    dev.modify_qp(now, qpn, &a, m).unwrap();
    let a = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: Psn::new(0x500),
        timeout: 10,
        retry_cnt: 3,
        rnr_retry: 3,
        max_rd_atomic: 4,
        ..Default::default()
    };
    let m = AttrMask::required(t, QpState::Rtr, QpState::Rts).unwrap();
    dev.modify_qp(now, qpn, &a, m).unwrap();
}

impl Tgt {
    fn new() -> Tgt {
        let mut dev = Device::new(DeviceConfig::new(ip(DEV_IP), 7));
        let now = Instant(1_000_000);
        let pd = dev.alloc_pd().unwrap();
        let mem = Arc::new(VecMemory::new(MEM));
        let key = dev
            .reg_mr(pd, VA, mem.clone(), Access::ALL.with(Access::LOCAL_WRITE))
            .unwrap();
        let xrcd = dev.alloc_xrcd().unwrap();
        let mut srq = [(SrqId(0), 0, CqId(0)); 2];
        for s in &mut srq {
            let cq = dev.create_cq(16).unwrap();
            let (id, n) = dev.create_xrc_srq(pd, xrcd, cq, 16, 2, 0).unwrap();
            *s = (id, n, cq);
        }
        let qpn = dev.create_xrc_tgt_qp(xrcd).unwrap();
        bring_up(&mut dev, now, qpn, QpType::XrcRecv);
        Tgt {
            dev,
            now,
            pd,
            xrcd,
            qpn,
            srq,
            mem,
            key,
            psn: Psn::new(PEER_PSN),
        }
    }

    fn recv(&mut self, which: usize, id: u64, off: u64, len: u32) {
        let wr = RecvWr {
            wr_id: id,
            sg_list: vec![Sge::new(VA + off, len, self.key)],
        };
        self.dev.post_srq_recv(self.srq[which].0, wr).unwrap();
    }

    fn bth(&self, op: u8, psn: Psn) -> BthRepr {
        BthRepr {
            ack_req: true,
            ..BthRepr::new(Opcode(op), self.qpn, psn)
        }
    }

    fn deliver(&mut self, p: &PacketRepr<'_>) {
        let bytes = encode(p, ip(PEER_IP), ip(DEV_IP));
        let meta = RecvMeta {
            src: std::net::SocketAddr::new(ip(PEER_IP), 4791),
            dst: ip(DEV_IP),
            len: bytes.len(),
            traffic_class: 0,
            hop_limit: 64,
        };
        self.dev.handle_datagram(self.now, &meta, &bytes);
    }

    /// A request to XRC SRQ number `srqn` at the next PSN.
    fn request(&mut self, op: u8, srqn: u32, payload: &[u8]) -> Psn {
        let psn = self.psn;
        self.psn = psn.next();
        let mut p = PacketRepr::new(self.bth(op, psn), payload);
        p.xrceth = Some(srqn);
        self.deliver(&p);
        psn
    }

    /// (opcode, psn, AETH) of everything sent.
    fn sent(&mut self) -> Vec<PacketRepr<'static>> {
        let mut buf = vec![0u8; 8192];
        let mut out = Vec::new();
        while let Some(tx) = self.dev.poll_transmit(self.now, &mut buf) {
            assert_eq!(tx.dst.ip(), ip(PEER_IP));
            let b: &'static [u8] = buf[..tx.len].to_vec().leak();
            out.push(PacketRepr::parse_bytes(b).unwrap());
        }
        out
    }
}

#[test]
fn a_send_goes_to_the_srq_its_xrceth_names() {
    let mut t = Tgt::new();
    t.recv(0, 10, 0, 64);
    t.recv(1, 11, 1024, 64);
    let n1 = t.srq[1].1;
    t.request(0xa4, n1, b"to srq one");
    let out = t.sent();
    assert_eq!(out.len(), 1);
    // XRC ACKNOWLEDGE, to the peer's QP, MSN 1.
    assert_eq!(out[0].bth.opcode, Opcode::XRC_ACKNOWLEDGE);
    assert_eq!(out[0].bth.dest_qp, Qpn::new(PEER_QPN));
    assert_eq!(out[0].bth.psn, Psn::new(PEER_PSN));
    assert_eq!(out[0].aeth.unwrap().msn, Msn::new(1));
    assert!(out[0].xrceth.is_none());
    // SRQ 1's WQE and CQ; SRQ 0 untouched.
    let wc = poll(&mut t.dev, t.srq[1].2);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].wr_id, 11);
    assert_eq!(wc[0].status, WcStatus::Success);
    assert_eq!(wc[0].byte_len, 10);
    assert_eq!(wc[0].qp_num, t.qpn);
    assert_eq!(wc[0].src_qp, Qpn::new(PEER_QPN));
    assert_eq!(&t.mem.snapshot()[1024..1034], b"to srq one");
    assert!(poll(&mut t.dev, t.srq[0].2).is_empty());
    // Then SRQ 0, with immediate data.
    let n0 = t.srq[0].1;
    let psn = t.psn;
    t.psn = psn.next();
    let mut p = PacketRepr::new(t.bth(0xa5, psn), b"zero");
    p.xrceth = Some(n0);
    p.imm = Some(0x1234_5678);
    t.deliver(&p);
    let wc = poll(&mut t.dev, t.srq[0].2);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].wr_id, 10);
    assert_eq!(wc[0].imm_or_inv, 0x1234_5678);
    assert!(wc[0].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(t.sent()[0].aeth.unwrap().msn, Msn::new(2));
}

#[test]
fn a_multi_packet_send_write_read_and_atomic_on_xrc() {
    let mut t = Tgt::new();
    let n = t.srq[0].1;
    t.recv(0, 1, 0, 4096);
    // SEND FIRST, MIDDLE, LAST (MTU 1024).
    let data: Vec<u8> = (0..2500u32).map(|i| (i * 7) as u8).collect();
    t.request(0xa0, n, &data[..1024]);
    t.request(0xa1, n, &data[1024..2048]);
    t.request(0xa2, n, &data[2048..]);
    let wc = poll(&mut t.dev, t.srq[0].2);
    assert_eq!((wc.len(), wc[0].byte_len), (1, 2500));
    assert_eq!(&t.mem.snapshot()[..2500], &data[..]);
    // RDMA WRITE ONLY into the SRQ's PD's region.
    let psn = t.psn;
    t.psn = psn.next();
    let mut p = PacketRepr::new(t.bth(0xaa, psn), b"written!");
    p.xrceth = Some(n);
    p.reth = Some(RethRepr {
        va: VA + 8192,
        rkey: RKey(t.key),
        dma_len: 8,
    });
    t.deliver(&p);
    assert_eq!(&t.mem.snapshot()[8192..8200], b"written!");
    // RDMA READ of 2048 bytes: XRC READ RESPONSE FIRST, LAST.
    let psn = t.psn;
    t.psn = psn.add(2);
    let mut p = PacketRepr::new(t.bth(0xac, psn), &[]);
    p.xrceth = Some(n);
    p.reth = Some(RethRepr {
        va: VA,
        rkey: RKey(t.key),
        dma_len: 2048,
    });
    t.deliver(&p);
    // FetchAdd: XRC ATOMIC ACKNOWLEDGE with the original value.
    let psn = t.psn;
    t.psn = psn.next();
    let mut p = PacketRepr::new(t.bth(0xb4, psn), &[]);
    p.xrceth = Some(n);
    p.atomic_eth = Some(AtomicEthRepr {
        va: VA + 16384,
        rkey: RKey(t.key),
        swap_add: 5,
        compare: 0,
    });
    t.deliver(&p);
    let ops: Vec<u8> = t.sent().iter().map(|p| p.bth.opcode.0).collect();
    // The ACKs of the SEND's last packet and of the WRITE may coalesce.
    assert!(ops.ends_with(&[0xad, 0xaf, 0xb2]), "{ops:x?}");
    assert!(ops[..ops.len() - 3].iter().all(|&o| o == 0xb1), "{ops:x?}");
    assert_eq!(t.mem.snapshot()[16384], 5);
}

#[test]
fn an_xrceth_naming_no_srq_of_the_domain_is_an_invalid_request() {
    for foreign_domain in [true, false] {
        let mut t = Tgt::new();
        // An XRC SRQ of another domain, or a number no SRQ has.
        let other = t.dev.alloc_xrcd().unwrap();
        let cq = t.dev.create_cq(4).unwrap();
        let (_, foreign) = t.dev.create_xrc_srq(t.pd, other, cq, 4, 1, 0).unwrap();
        let bad = if foreign_domain {
            foreign
        } else {
            (1..)
                .find(|n| ![t.srq[0].1, t.srq[1].1, foreign].contains(n))
                .unwrap()
        };
        t.recv(0, 1, 0, 64);
        // Out of sequence with a bad number: dropped, no NAK.
        let mut p = PacketRepr::new(t.bth(0xa4, Psn::new(PEER_PSN + 5)), b"x");
        p.xrceth = Some(bad);
        t.deliver(&p);
        assert!(t.sent().is_empty());
        // At the expected PSN: NAK invalid request, the QP in error.
        let psn = t.request(0xa4, bad, b"x");
        let out = t.sent();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].bth.opcode, Opcode::XRC_ACKNOWLEDGE);
        assert_eq!(out[0].bth.psn, psn);
        assert_eq!(
            out[0].aeth.unwrap().syndrome,
            Syndrome::Nak(NakCode::InvalidRequest)
        );
        assert_eq!(t.dev.qp_state(t.qpn).unwrap(), QpState::Err);
        let c = t.dev.qp_counters(t.qpn).unwrap();
        assert_eq!((c.xrc_bad_srqn, c.inv_req_nak_sent), (2, 1));
        let ev: Vec<Event> = std::iter::from_fn(|| t.dev.poll_event()).collect();
        assert!(ev.contains(&Event::Async(AsyncEvent::QpReqErr(t.qpn))));
        // The SRQ's WQE was not consumed.
        assert_eq!(t.dev.query_srq(t.srq[0].0).unwrap().3, 1);
    }
}

#[test]
fn accesses_are_checked_against_the_srqs_protection_domain() {
    let mut t = Tgt::new();
    // A region of another PD: the SRQ's PD does not own it.
    let pd2 = t.dev.alloc_pd().unwrap();
    let mem2 = Arc::new(VecMemory::new(4096));
    let key2 = t
        .dev
        .reg_mr(pd2, 0x90_0000, mem2.clone(), Access::ALL)
        .unwrap();
    let n = t.srq[0].1;
    let psn = t.psn;
    let mut p = PacketRepr::new(t.bth(0xaa, psn), b"nope");
    p.xrceth = Some(n);
    p.reth = Some(RethRepr {
        va: 0x90_0000,
        rkey: RKey(key2),
        dma_len: 4,
    });
    t.deliver(&p);
    let out = t.sent();
    assert_eq!(
        out[0].aeth.unwrap().syndrome,
        Syndrome::Nak(NakCode::RemoteAccessError)
    );
    assert_eq!(mem2.snapshot()[..4], [0, 0, 0, 0]);
    assert_eq!(t.dev.qp_state(t.qpn).unwrap(), QpState::Err);
}

#[test]
fn xrc_sequencing_is_rcs() {
    let mut t = Tgt::new();
    let n = t.srq[0].1;
    t.recv(0, 1, 0, 64);
    t.recv(0, 2, 64, 64);
    let first = t.request(0xa4, n, b"one");
    assert_eq!(t.sent().len(), 1);
    // A duplicate: acknowledged again, not delivered again.
    let mut p = PacketRepr::new(t.bth(0xa4, first), b"one");
    p.xrceth = Some(n);
    t.deliver(&p);
    let out = t.sent();
    assert_eq!(out[0].bth.opcode, Opcode::XRC_ACKNOWLEDGE);
    assert_eq!(out[0].aeth.unwrap().syndrome, Syndrome::ACK);
    assert_eq!(poll(&mut t.dev, t.srq[0].2).len(), 1);
    // A gap: one PSN sequence NAK for the expected PSN.
    let expected = t.psn;
    t.psn = expected.add(1);
    t.request(0xa4, n, b"three");
    t.request(0xa4, n, b"four");
    let out = t.sent();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].bth.psn, expected);
    assert_eq!(
        out[0].aeth.unwrap().syndrome,
        Syndrome::Nak(NakCode::PsnSequenceError)
    );
    // No receive WQE: RNR NAK, with the TGT QP's min_rnr_timer.
    t.psn = expected;
    t.request(0xa4, n, b"two");
    assert_eq!(poll(&mut t.dev, t.srq[0].2).len(), 1);
    t.request(0xa4, n, b"three");
    let out = t.sent();
    assert_eq!(
        out.last().unwrap().aeth.unwrap().syndrome,
        Syndrome::RnrNak { timer: 5 }
    );
}

#[test]
fn an_ini_qp_sends_xrc_requests_to_the_remote_srq() {
    let mut dev = Device::new(DeviceConfig::new(ip(DEV_IP), 9));
    let now = Instant(1_000_000);
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let mem = Arc::new(VecMemory::new(4096));
    mem.fill_from(0, b"xrc payload");
    let key = dev.reg_mr(pd, VA, mem, Access::LOCAL_WRITE).unwrap();
    let (qpn, cap) = dev
        .create_qp(&QpInit {
            cap: QpCap {
                max_send_wr: 8,
                max_recv_wr: 8,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            ..QpInit::new(QpType::XrcSend, pd, cq)
        })
        .unwrap();
    // No receive queue.
    assert_eq!((cap.max_recv_wr, cap.max_recv_sge), (0, 0));
    bring_up(&mut dev, now, qpn, QpType::XrcSend);
    let rwr = RecvWr {
        wr_id: 1,
        sg_list: vec![],
    };
    assert!(dev.post_recv(now, qpn, rwr).is_err());
    // FLUSH and ATOMIC WRITE have no XRC opcode.
    let mut f = SendWr::new(5, WrOpcode::Flush);
    f.flush.placement_type = 1;
    assert!(dev.post_send(now, qpn, f).is_err());
    let mut wr = SendWr::new(9, WrOpcode::Send);
    wr.sg_list = vec![Sge::new(VA, 11, key)];
    wr.remote_srqn = 0x00c0_ffee;
    dev.post_send(now, qpn, wr).unwrap();
    let mut buf = vec![0u8; 8192];
    let tx = dev.poll_transmit(now, &mut buf).unwrap();
    let p = PacketRepr::parse_bytes(&buf[..tx.len]).unwrap();
    assert_eq!(p.bth.opcode.name(), "XRC_SEND_ONLY");
    assert_eq!(p.xrceth, Some(0xc0_ffee));
    assert_eq!(p.bth.dest_qp, Qpn::new(PEER_QPN));
    assert!(p.bth.ack_req);
    assert_eq!(p.payload, b"xrc payload");
    let psn = p.bth.psn;
    let deliver = |dev: &mut Device, op: u8| {
        let mut a = PacketRepr::new(BthRepr::new(Opcode(op), qpn, psn), &[]);
        a.aeth = Some(AethRepr {
            syndrome: Syndrome::ACK,
            msn: Msn::new(1),
        });
        let bytes = encode(&a, ip(PEER_IP), ip(DEV_IP));
        let meta = RecvMeta {
            src: std::net::SocketAddr::new(ip(PEER_IP), 4791),
            dst: ip(DEV_IP),
            len: bytes.len(),
            traffic_class: 0,
            hop_limit: 64,
        };
        dev.handle_datagram(now, &meta, &bytes);
    };
    // An RC ACK is another transport's: refused.
    deliver(&mut dev, 0x11);
    assert!(poll(&mut dev, cq).is_empty());
    assert_eq!(dev.qp_counters(qpn).unwrap().malformed, 1);
    // The XRC ACK completes the SEND.
    deliver(&mut dev, 0xb1);
    let wc = poll(&mut dev, cq);
    assert_eq!(
        (wc.len(), wc[0].wr_id, wc[0].status),
        (1, 9, WcStatus::Success)
    );
}

#[test]
fn modify_masks_follow_iba_table_91_for_xrc() {
    let mut dev = Device::new(DeviceConfig::new(ip(DEV_IP), 3));
    let now = Instant(0);
    let xrcd = dev.alloc_xrcd().unwrap();
    let tgt = dev.create_xrc_tgt_qp(xrcd).unwrap();
    let init = QpAttr::to(QpState::Init);
    let base = AttrMask::STATE
        .with(AttrMask::PKEY_INDEX)
        .with(AttrMask::PORT);
    // RESET→INIT needs the access flags.
    assert!(dev.modify_qp(now, tgt, &init, base).is_err());
    dev.modify_qp(now, tgt, &init, base.with(AttrMask::ACCESS_FLAGS))
        .unwrap();
    // INIT→RTR: a TGT QP needs MAX_DEST_RD_ATOMIC and MIN_RNR_TIMER …
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Mtu::M1024,
        dest_qp_num: Qpn::new(PEER_QPN),
        ah_attr: AddressVector::to(ip(PEER_IP)),
        ..Default::default()
    };
    let conn = AttrMask::STATE
        .with(AttrMask::AV)
        .with(AttrMask::PATH_MTU)
        .with(AttrMask::DEST_QPN)
        .with(AttrMask::RQ_PSN);
    assert!(dev.modify_qp(now, tgt, &rtr, conn).is_err());
    // … and the requester's fields are ignored, as uverbs drops them.
    let m = conn
        .with(AttrMask::MAX_DEST_RD_ATOMIC)
        .with(AttrMask::MIN_RNR_TIMER)
        .with(AttrMask::RETRY_CNT);
    dev.modify_qp(now, tgt, &rtr, m).unwrap();
    // RTR→RTS: TIMEOUT and SQ_PSN only (RETRY/RNR/MAX_QP_RD_ATOMIC
    // ignored).
    let rts = QpAttr::to(QpState::Rts);
    let m = AttrMask::STATE.with(AttrMask::SQ_PSN);
    assert!(dev.modify_qp(now, tgt, &rts, m).is_err());
    let m = m
        .with(AttrMask::TIMEOUT)
        .with(AttrMask::RNR_RETRY)
        .with(AttrMask::MAX_QP_RD_ATOMIC);
    dev.modify_qp(now, tgt, &rts, m).unwrap();
    assert_eq!(dev.qp_state(tgt).unwrap(), QpState::Rts);
    assert_eq!(
        AttrMask::required(QpType::XrcRecv, QpState::Rtr, QpState::Rts),
        Some(
            AttrMask::STATE
                .with(AttrMask::TIMEOUT)
                .with(AttrMask::SQ_PSN)
        )
    );
    // INI: RTR without the responder's fields, RTS with RC's requester ones.
    assert_eq!(
        AttrMask::required(QpType::XrcSend, QpState::Init, QpState::Rtr),
        Some(conn)
    );
    assert_eq!(
        AttrMask::required(QpType::XrcSend, QpState::Rtr, QpState::Rts),
        AttrMask::required(QpType::Rc, QpState::Rtr, QpState::Rts)
    );
    // A TGT QP sends nothing and receives through SRQs only.
    assert!(dev
        .post_send(now, tgt, SendWr::new(1, WrOpcode::Send))
        .is_err());
    let rwr = RecvWr {
        wr_id: 1,
        sg_list: vec![],
    };
    assert!(dev.post_recv(now, tgt, rwr).is_err());
}

#[test]
fn what_holds_what() {
    let mut t = Tgt::new();
    // The domain while SRQs and the TGT QP live; the CQ while its SRQ does.
    assert_eq!(t.dev.dealloc_xrcd(t.xrcd), Err(VerbsError::Busy));
    assert_eq!(t.dev.destroy_cq(t.srq[0].2), Err(VerbsError::Busy));
    assert_eq!(t.dev.srq_num(t.srq[1].0), Ok(t.srq[1].1));
    assert_ne!(t.srq[0].1, t.srq[1].1);
    assert!(t.srq.iter().all(|s| s.1 != 0 && s.1 < 1 << 24));
    assert_eq!(t.dev.xrc_srq(t.srq[0].0), Ok(Some((t.xrcd, t.srq[0].2))));
    // An XRC SRQ is no SRQ of an ordinary QP.
    let cq = t.dev.create_cq(4).unwrap();
    let init = QpInit {
        qp_type: QpType::Rc,
        pd: t.pd,
        send_cq: cq,
        recv_cq: cq,
        srq: Some(t.srq[0].0),
        cap: QpCap::default(),
        sq_sig_all: false,
    };
    assert!(t.dev.create_qp(&init).is_err());
    // A TGT QP is made in a domain, not by create_qp.
    let init = QpInit {
        qp_type: QpType::XrcRecv,
        srq: None,
        ..init
    };
    assert!(t.dev.create_qp(&init).is_err());
    // The TGT QP does not hold the PD its last request used.
    t.recv(0, 1, 0, 8);
    let n = t.srq[0].1;
    t.request(0xa4, n, b"hi");
    t.dev.destroy_qp(t.qpn).unwrap();
    for (srq, _, cq) in t.srq {
        t.dev.destroy_srq(srq).unwrap();
        t.dev.destroy_cq(cq).unwrap();
    }
    t.dev.dereg_mr(t.key).unwrap();
    t.dev.dealloc_pd(t.pd).unwrap();
    t.dev.dealloc_xrcd(t.xrcd).unwrap();
    // A basic SRQ has no number.
    let pd = t.dev.alloc_pd().unwrap();
    let s = t.dev.create_srq(pd, 4, 1, 0).unwrap();
    assert!(t.dev.srq_num(s).is_err());
}
