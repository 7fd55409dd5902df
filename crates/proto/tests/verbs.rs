//! The verbs contract: QP state machine and attribute validation, flushes,
//! CQ overrun, SRQ limit, object lifetimes.

mod support;

use softrdma_proto::*;
use softrdma_wire::*;
use std::sync::Arc;
use support::*;

fn fresh() -> (Device, PdId, CqId, Qpn) {
    let mut dev = Device::new(DeviceConfig::new(ip(DEV_IP), 1));
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8).unwrap();
    let (qpn, _) = dev.create_qp(&small_rc(pd, cq, cq)).unwrap();
    (dev, pd, cq, qpn)
}

const INIT_MASK: AttrMask = AttrMask(
    AttrMask::STATE.0 | AttrMask::PKEY_INDEX.0 | AttrMask::PORT.0 | AttrMask::ACCESS_FLAGS.0,
);

#[test]
fn modify_qp_validates_masks_and_values() {
    let (mut dev, _, _, qpn) = fresh();
    let t = Instant(0);
    let mut a = QpAttr::to(QpState::Init);
    // Missing ACCESS_FLAGS for RC RESET→INIT.
    let e = dev.modify_qp(t, qpn, &a, INIT_MASK.without(AttrMask::ACCESS_FLAGS));
    // (EINVAL at the C boundary: softrdma's error.rs tests the mapping.)
    assert!(matches!(e, Err(VerbsError::InvalidArgument(_))));
    // RESET→RTR is not a transition.
    a.qp_state = QpState::Rtr;
    assert!(dev.modify_qp(t, qpn, &a, AttrMask::STATE).is_err());
    // An attribute the transition does not allow.
    a.qp_state = QpState::Init;
    assert!(dev
        .modify_qp(t, qpn, &a, INIT_MASK.with(AttrMask::SQ_PSN))
        .is_err());
    // Bad port, bad pkey index.
    a.port_num = 2;
    assert!(dev.modify_qp(t, qpn, &a, INIT_MASK).is_err());
    a.port_num = 1;
    a.pkey_index = 5;
    assert!(dev.modify_qp(t, qpn, &a, INIT_MASK).is_err());
    a.pkey_index = 0;
    dev.modify_qp(t, qpn, &a, INIT_MASK).unwrap();
    assert_eq!(dev.qp_state(qpn).unwrap(), QpState::Init);
    // INIT→RTR needs AV, MTU, DEST_QPN, RQ_PSN, MAX_DEST_RD_ATOMIC, MIN_RNR_TIMER.
    let rtr_mask = AttrMask::RC_RTR;
    let mut r = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Mtu::M4096,
        dest_qp_num: Qpn::new(5),
        ah_attr: AddressVector::to(ip(PEER_IP)),
        min_rnr_timer: 12,
        max_dest_rd_atomic: 16,
        ..Default::default()
    };
    assert!(dev
        .modify_qp(t, qpn, &r, rtr_mask.without(AttrMask::MIN_RNR_TIMER))
        .is_err());
    r.min_rnr_timer = 32;
    assert!(
        dev.modify_qp(t, qpn, &r, rtr_mask).is_err(),
        "min_rnr_timer is 5 bits"
    );
    r.min_rnr_timer = 12;
    r.max_dest_rd_atomic = 200;
    assert!(dev.modify_qp(t, qpn, &r, rtr_mask).is_err());
    r.max_dest_rd_atomic = 16;
    r.ah_attr = AddressVector::to(ip("2001:db8::1"));
    assert!(
        dev.modify_qp(t, qpn, &r, rtr_mask).is_err(),
        "IPv6 peer for an IPv4 device"
    );
    r.ah_attr = AddressVector::to(ip(PEER_IP));
    dev.modify_qp(t, qpn, &r, rtr_mask).unwrap();
    // RTR→RTS needs TIMEOUT, RETRY_CNT, RNR_RETRY, SQ_PSN, MAX_QP_RD_ATOMIC.
    let mut s = QpAttr {
        qp_state: QpState::Rts,
        timeout: 14,
        retry_cnt: 8,
        rnr_retry: 7,
        max_rd_atomic: 1,
        ..Default::default()
    };
    let rts_mask = AttrMask::RC_RTS;
    assert!(
        dev.modify_qp(t, qpn, &s, rts_mask).is_err(),
        "retry_cnt is 3 bits"
    );
    s.retry_cnt = 7;
    assert!(dev
        .modify_qp(t, qpn, &s, rts_mask.without(AttrMask::TIMEOUT))
        .is_err());
    // cur_qp_state must match when given.
    s.cur_qp_state = QpState::Init;
    assert!(dev
        .modify_qp(t, qpn, &s, rts_mask.with(AttrMask::CUR_STATE))
        .is_err());
    s.cur_qp_state = QpState::Rtr;
    dev.modify_qp(t, qpn, &s, rts_mask.with(AttrMask::CUR_STATE))
        .unwrap();
    let (q, cap, ty) = dev.query_qp(qpn).unwrap();
    assert_eq!(
        (q.qp_state, q.path_mtu, q.timeout, q.min_rnr_timer, ty),
        (QpState::Rts, Mtu::M4096, 14, 12, QpType::Rc)
    );
    assert_eq!(cap.max_send_wr, 4);
    // Any state → ERR and ERR → RESET are allowed.
    dev.modify_qp(t, qpn, &QpAttr::to(QpState::Err), AttrMask::STATE)
        .unwrap();
    dev.modify_qp(t, qpn, &QpAttr::to(QpState::Reset), AttrMask::STATE)
        .unwrap();
    assert_eq!(dev.qp_state(qpn).unwrap(), QpState::Reset);
}

#[test]
fn post_checks() {
    let mut r = Rig::new(Setup::default());
    // Too many SGEs, inline too long, queue full, wrong opcode for the type.
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sg_list = vec![Sge::new(VA, 1, r.key); 5];
    assert!(r.dev.post_send(r.now, r.qpn, wr).is_err());
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.flags = SendFlags::INLINE;
    wr.inline_data = vec![0; 257]; // above the device limit (the QP reports 256)
    assert!(r.dev.post_send(r.now, r.qpn, wr).is_err());
    for i in 0..32 {
        r.dev
            .post_send(r.now, r.qpn, SendWr::new(i, WrOpcode::Send))
            .unwrap();
    }
    assert_eq!(
        r.dev
            .post_send(r.now, r.qpn, SendWr::new(99, WrOpcode::Send))
            .unwrap_err(),
        VerbsError::QueueFull
    );
    let mut u = Rig::new(Setup {
        qp_type: QpType::Uc,
        ..Default::default()
    });
    assert!(u
        .dev
        .post_send(u.now, u.qpn, SendWr::new(1, WrOpcode::RdmaRead))
        .is_err());
    assert!(u
        .dev
        .post_send(u.now, u.qpn, SendWr::new(1, WrOpcode::AtomicFetchAndAdd))
        .is_err());
    let ud = Rig::new(Setup {
        qp_type: QpType::Ud,
        ..Default::default()
    });
    let mut ud = ud;
    assert!(ud
        .dev
        .post_send(ud.now, ud.qpn, SendWr::new(1, WrOpcode::RdmaWrite))
        .is_err());
    assert!(
        ud.dev
            .post_send(ud.now, ud.qpn, SendWr::new(1, WrOpcode::Send))
            .is_err(),
        "UD needs an AH"
    );
    u.post_recv(1, 0, 8);
}

#[test]
fn error_state_flushes_everything_in_order() {
    let mut r = Rig::new(Setup::default());
    for i in 0..3 {
        r.post_recv(100 + i, 0, 64);
    }
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.flags = SendFlags(0); // unsignaled: flushed anyway
    r.post_send(wr);
    r.post_send(SendWr::new(2, WrOpcode::Send));
    let t = r.now;
    r.dev
        .modify_qp(t, r.qpn, &QpAttr::to(QpState::Err), AttrMask::STATE)
        .unwrap();
    let s: Vec<_> = r.send_cq().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        s,
        vec![(1, WcStatus::WrFlushErr), (2, WcStatus::WrFlushErr)]
    );
    let v: Vec<_> = r.recv_cq().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        v,
        vec![
            (100, WcStatus::WrFlushErr),
            (101, WcStatus::WrFlushErr),
            (102, WcStatus::WrFlushErr)
        ]
    );
    // Posting in ERR completes at once with a flush.
    r.post_send(SendWr::new(3, WrOpcode::Send));
    r.post_recv(103, 0, 8);
    assert_eq!(r.send_cq()[0].wr_id, 3);
    assert_eq!(r.recv_cq()[0].wr_id, 103);
    assert!(r.sent().is_empty());
}

#[test]
fn cq_overrun_raises_an_async_error() {
    let mut r = Rig::new(Setup {
        cq_depth: 2,
        ..Default::default()
    });
    for i in 0..3 {
        r.post_recv(i, 0, 64);
    }
    let psn = r.take_psn(3);
    for i in 0..3 {
        let p = PacketRepr::new(r.bth(0x04, psn.add(i)), &[1; 8]);
        r.deliver(&p);
    }
    let ev = r.events();
    assert!(
        ev.contains(&Event::Async(AsyncEvent::CqErr(r.rcq))),
        "{ev:?}"
    );
    assert_eq!(
        r.state(),
        QpState::Err,
        "the QP completing into an overrun CQ fails"
    );
    assert_eq!(r.recv_cq().len(), 2);
}

#[test]
fn completion_notification_fires_once_per_arm() {
    let mut r = Rig::new(Setup::default());
    r.dev.req_notify_cq(r.scq, false).unwrap();
    r.post_send(SendWr::new(1, WrOpcode::Send));
    r.post_send(SendWr::new(2, WrOpcode::Send));
    r.sent();
    r.ack(r.dev_psn.add(1), 2);
    let ev: Vec<_> = r
        .events()
        .into_iter()
        .filter(|e| matches!(e, Event::Completion(_)))
        .collect();
    assert_eq!(ev, vec![Event::Completion(r.scq)]);
    // Solicited-only: an unsolicited receive does not fire, a solicited one does.
    r.dev.req_notify_cq(r.rcq, true).unwrap();
    r.post_recv(1, 0, 64);
    r.post_recv(2, 0, 64);
    let psn = r.take_psn(2);
    r.deliver(&PacketRepr::new(r.bth(0x04, psn), &[1]));
    assert!(r.events().is_empty());
    let mut p = PacketRepr::new(r.bth(0x04, psn.add(1)), &[1]);
    p.bth.solicited = true;
    r.deliver(&p);
    assert_eq!(r.events(), vec![Event::Completion(r.rcq)]);
}

/// Posts receive `id` with `sg_list` to `srq`.
fn srq_recv(r: &mut Rig, srq: SrqId, id: u64, sg_list: Vec<Sge>) {
    r.dev
        .post_srq_recv(srq, RecvWr { wr_id: id, sg_list })
        .unwrap();
}

#[test]
fn srq_shares_receives_and_raises_the_limit_event() {
    let mut r = Rig::new(Setup {
        srq: true,
        ..Default::default()
    });
    let (qp_srq, ..) = (r.dev.query_qp(r.qpn).unwrap(),);
    assert_eq!(qp_srq.1.max_recv_wr, 0);
    let srq = SrqId(0);
    for i in 0..4 {
        let sge = Sge::new(VA + i * 128, 128, r.key);
        srq_recv(&mut r, srq, i, vec![sge]);
    }
    assert!(
        r.dev
            .post_recv(
                r.now,
                r.qpn,
                RecvWr {
                    wr_id: 9,
                    sg_list: vec![]
                }
            )
            .is_err(),
        "QP with an SRQ takes no receives"
    );
    r.dev.modify_srq(srq, None, Some(3)).unwrap();
    let psn = r.take_psn(2);
    r.deliver(&PacketRepr::new(r.bth(0x04, psn), &[1; 8]));
    assert!(r.events().is_empty(), "4 → 3 is not below the limit");
    r.deliver(&PacketRepr::new(r.bth(0x04, psn.add(1)), &[2; 8]));
    assert_eq!(
        r.events(),
        vec![Event::Async(AsyncEvent::SrqLimitReached(srq))]
    );
    assert_eq!(
        r.dev.query_srq(srq).unwrap(),
        (16, 4, 0, 2),
        "the limit disarms"
    );
    assert_eq!(
        r.recv_cq().iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        vec![0, 1]
    );
}

#[test]
fn srq_resizes_but_never_below_its_receives_or_its_limit() {
    let mut r = Rig::new(Setup {
        srq: true,
        ..Default::default()
    });
    let srq = SrqId(0);
    for i in 0..4 {
        srq_recv(&mut r, srq, i, vec![]);
    }
    r.dev.modify_srq(srq, Some(32), None).unwrap();
    assert_eq!(r.dev.query_srq(srq).unwrap(), (32, 4, 0, 4), "grown");
    r.dev.modify_srq(srq, Some(4), None).unwrap();
    assert_eq!(
        r.dev.query_srq(srq).unwrap().0,
        4,
        "shrunk to what it holds"
    );
    assert!(
        r.dev
            .post_srq_recv(
                srq,
                RecvWr {
                    wr_id: 9,
                    sg_list: vec![]
                }
            )
            .is_err(),
        "full at the new depth"
    );
    assert!(
        r.dev.modify_srq(srq, Some(3), None).is_err(),
        "below its receives"
    );
    assert!(r.dev.modify_srq(srq, Some(0), None).is_err());
    r.dev.modify_srq(srq, Some(16), Some(8)).unwrap();
    assert!(
        r.dev.modify_srq(srq, Some(6), None).is_err(),
        "below the armed limit"
    );
    assert_eq!(r.dev.query_srq(srq).unwrap(), (16, 4, 8, 4));
}

#[test]
fn srq_resizes_with_receives_posted() {
    let mut r = Rig::new(Setup {
        srq: true,
        ..Default::default()
    });
    let srq = SrqId(0);
    let (max_wr, ..) = r.dev.query_srq(srq).unwrap();
    let wr = |i: u64| RecvWr {
        wr_id: i,
        sg_list: vec![Sge::new(VA + (i % 8) * 128, 128, r.key)],
    };
    for i in 0..u64::from(max_wr) {
        r.dev.post_srq_recv(srq, wr(i)).unwrap();
    }
    assert_eq!(
        r.dev.post_srq_recv(srq, wr(99)).unwrap_err(),
        VerbsError::QueueFull
    );
    // Too small for what is posted, zero, past the device: refused, unchanged.
    for bad in [max_wr - 1, 0, limits::MAX_SRQ_WR + 1] {
        assert!(r.dev.modify_srq(srq, Some(bad), None).is_err(), "{bad}");
    }
    assert_eq!(r.dev.query_srq(srq).unwrap().0, max_wr);
    // Grow: the posted receives stay, more fit.
    r.dev.modify_srq(srq, Some(2 * max_wr), None).unwrap();
    assert_eq!(r.dev.query_srq(srq).unwrap(), (2 * max_wr, 4, 0, max_wr));
    for i in u64::from(max_wr)..u64::from(2 * max_wr) {
        r.dev.post_srq_recv(srq, wr(i)).unwrap();
    }
    assert_eq!(
        r.dev.post_srq_recv(srq, wr(99)).unwrap_err(),
        VerbsError::QueueFull
    );
    // Traffic consumes them in order.
    let psn = r.take_psn(3);
    for k in 0..3u32 {
        r.deliver(&PacketRepr::new(r.bth(0x04, psn.add(k)), &[k as u8; 8]));
    }
    assert_eq!(
        r.recv_cq().iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    // An armed limit bounds a shrink; a limit and a depth change together.
    r.dev.modify_srq(srq, None, Some(10)).unwrap();
    let queued = 2 * max_wr - 3;
    assert!(r
        .dev
        .modify_srq(srq, Some(queued), Some(queued + 1))
        .is_err());
    assert_eq!(r.dev.query_srq(srq).unwrap(), (2 * max_wr, 4, 10, queued));
    r.dev.modify_srq(srq, Some(queued), Some(0)).unwrap();
    assert_eq!(r.dev.query_srq(srq).unwrap(), (queued, 4, 0, queued));
}

#[test]
fn objects_in_use_cannot_be_destroyed() {
    let (mut dev, pd, cq, qpn) = fresh();
    assert_eq!(dev.destroy_cq(cq).unwrap_err(), VerbsError::Busy);
    assert_eq!(dev.dealloc_pd(pd).unwrap_err(), VerbsError::Busy);
    let k = dev
        .reg_mr(pd, 0, Arc::new(VecMemory::new(8)), Access::LOCAL_WRITE)
        .unwrap();
    dev.destroy_qp(qpn).unwrap();
    dev.destroy_cq(cq).unwrap();
    assert_eq!(dev.dealloc_pd(pd).unwrap_err(), VerbsError::Busy);
    dev.dereg_mr(k).unwrap();
    dev.dealloc_pd(pd).unwrap();
    assert_eq!(dev.destroy_qp(qpn).unwrap_err(), VerbsError::NoSuchObject);
    assert!(dev
        .reg_mr(PdId(77), 0, Arc::new(VecMemory::new(8)), Access(0))
        .is_err());
    assert!(dev.create_cq(0).is_err());
}

#[test]
fn memory_keys_are_not_a_counter() {
    let (mut dev, pd, ..) = fresh();
    let keys: Vec<u32> = (0..64)
        .map(|_| {
            dev.reg_mr(pd, 0, Arc::new(VecMemory::new(8)), Access::LOCAL_WRITE)
                .unwrap()
        })
        .collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 64);
    let sequential = keys
        .windows(2)
        .filter(|w| w[1].wrapping_sub(w[0]) < 0x1000)
        .count();
    assert!(sequential < 4, "keys look sequential: {keys:x?}");
    // Each key's high bits vary too.
    let highs: std::collections::HashSet<u32> = keys.iter().map(|k| k >> 24).collect();
    assert!(highs.len() > 16);
    let _ = RKey(keys[0]);
}

#[test]
fn required_masks_follow_table_91() {
    let r = |t, a, b| AttrMask::required(t, a, b);
    use QpState::*;
    assert_eq!(
        r(QpType::Rc, Reset, Init),
        Some(INIT_MASK),
        "RC RESET→INIT: state, P_Key index, port, access"
    );
    let ud_init = r(QpType::Ud, Reset, Init).unwrap();
    assert!(ud_init.contains(AttrMask::QKEY) && !ud_init.contains(AttrMask::ACCESS_FLAGS));
    let rc_rtr = r(QpType::Rc, Init, Rtr).unwrap();
    assert!(rc_rtr.contains(AttrMask::MIN_RNR_TIMER.with(AttrMask::MAX_DEST_RD_ATOMIC)));
    let uc_rtr = r(QpType::Uc, Init, Rtr).unwrap();
    assert!(uc_rtr.contains(AttrMask::DEST_QPN) && !uc_rtr.contains(AttrMask::MIN_RNR_TIMER));
    assert_eq!(r(QpType::Ud, Init, Rtr), Some(AttrMask::STATE));
    assert_eq!(
        r(QpType::Uc, Rtr, Rts),
        Some(AttrMask::STATE.with(AttrMask::SQ_PSN))
    );
    assert!(r(QpType::Rc, Rtr, Rts)
        .unwrap()
        .contains(AttrMask::RETRY_CNT));
    assert_eq!(r(QpType::Rc, Reset, Rts), None);
    // The constants tests and programs pass are exactly the table's.
    assert_eq!(r(QpType::Rc, Init, Rtr), Some(AttrMask::RC_RTR));
    assert_eq!(r(QpType::Rc, Rtr, Rts), Some(AttrMask::RC_RTS));
    let ud = QpAttr::ud_to_rts(QKey(7));
    assert_eq!(ud[0].1, ud_init);
    assert_eq!(Some(ud[1].1), r(QpType::Ud, Init, Rtr));
    assert_eq!(Some(ud[2].1), r(QpType::Ud, Rtr, Rts));
    assert!(ud.iter().all(|(a, _)| a.qkey == QKey(7)));
}

/// The port MTU of a link, as rxe derives it from its netdev's MTU
/// (80 bytes of RoCE headers): 1500 → 1024, 9000 → 4096, and the edges.
#[test]
fn port_mtu_of_a_link() {
    use softrdma_proto::Mtu;
    for (link, want) in [
        (1500, Mtu::M1024),
        (9000, Mtu::M4096),
        (65536, Mtu::M4096),
        (4176, Mtu::M4096),
        (4175, Mtu::M2048),
        (2128, Mtu::M2048),
        (2127, Mtu::M1024),
        (1104, Mtu::M1024),
        (1103, Mtu::M512),
        (1280, Mtu::M1024),
        (68, Mtu::M256),
        (0, Mtu::M256),
    ] {
        assert_eq!(Mtu::of_link(link), want, "link MTU {link}");
    }
}

/// A device's first QP number is spread over the whole 24-bit space: a
/// process that reconnects from the same address (the same CA GUID) would
/// otherwise reuse, often, a QPN its peer still holds in timewait and get
/// REJ 10 (stale connection; with first QPNs among 1024 values, 6 of 80
/// iSER logins in a row from new processes did). Among 64 seeds, the
/// first QPNs are all different, none is 0, 1 or the multicast QPN, and
/// they are not bunched in a low range.
#[test]
fn first_qpns_spread_over_24_bits() {
    let mut firsts = Vec::new();
    for seed in 0..64 {
        let mut dev = Device::new(DeviceConfig::new(ip(DEV_IP), seed));
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(8).unwrap();
        let (qpn, _) = dev.create_qp(&QpInit::new(QpType::Rc, pd, cq)).unwrap();
        assert!((2..0xff_ffff).contains(&qpn.value()), "{qpn:?}");
        firsts.push(qpn.value());
    }
    firsts.sort_unstable();
    firsts.dedup();
    assert_eq!(firsts.len(), 64, "{firsts:x?}");
    let high = firsts.iter().filter(|&&q| q > 0x10_0000).count();
    assert!(high >= 32, "first QPNs bunched low: {firsts:x?}");
}
