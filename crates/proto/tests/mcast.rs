//! UD multicast at the core, scripted: attach and detach with rxe's and
//! uverbs' rules and limits, the joins and leaves the driver is told,
//! delivery of a packet for QPN 0xFFFFFF to every QP attached to the
//! group of its destination address (a copy each, each checking its own
//! Q_Key and taking its own receive WQE), unmatched groups, and sending to
//! a group.

mod support;

use softrdma_proto::limits::{MAX_MCAST_GRP, MAX_MCAST_QP_ATTACH};
use softrdma_proto::*;
use softrdma_wire::grh::{gid_of, ud_grh_source, GRH_LEN};
use softrdma_wire::*;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use support::{encode, ip, poll, VA};

const DEV: &str = "10.0.0.1";
const SENDER: &str = "10.0.0.7";
const GROUP: &str = "239.67.1.1";
const QKEY_A: u32 = 0x1111_1111;
const QKEY_B: u32 = 0x2222_2222;

struct Rig {
    dev: Device,
    now: Instant,
    pd: PdId,
    cq: CqId,
    mem: Arc<VecMemory>,
    key: u32,
}

impl Rig {
    fn new(addr: &str) -> Rig {
        let mut dev = Device::new(DeviceConfig::new(ip(addr), 11));
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(256).unwrap();
        let mem = Arc::new(VecMemory::new(1 << 16));
        let key = dev
            .reg_mr(pd, VA, mem.clone(), Access::LOCAL_WRITE)
            .unwrap();
        Rig {
            dev,
            now: Instant(1_000_000),
            pd,
            cq,
            mem,
            key,
        }
    }

    /// A UD QP in RTS with Q_Key `qkey`.
    fn ud_qp(&mut self, qkey: u32) -> Qpn {
        self.qp(QpType::Ud, qkey)
    }

    fn qp(&mut self, t: QpType, qkey: u32) -> Qpn {
        let (qpn, _) = self
            .dev
            .create_qp(&QpInit {
                cap: QpCap {
                    max_send_wr: 8,
                    max_recv_wr: 8,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 64,
                },
                ..QpInit::new(t, self.pd, self.cq)
            })
            .unwrap();
        if t == QpType::Ud {
            for (a, m) in QpAttr::ud_to_rts(QKey(qkey)) {
                self.dev.modify_qp(self.now, qpn, &a, m).unwrap();
            }
        }
        qpn
    }

    fn recv(&mut self, qpn: Qpn, id: u64, off: u64) {
        let wr = RecvWr {
            wr_id: id,
            sg_list: vec![Sge::new(VA + off, 256, self.key)],
        };
        self.dev.post_recv(self.now, qpn, wr).unwrap();
    }

    /// A UD SEND ONLY from `SENDER`'s QP 0x77 to `dst`, QPN `dest_qp`.
    fn deliver(&mut self, dst: &str, dest_qp: Qpn, qkey: u32, payload: &[u8]) {
        let mut p = PacketRepr::new(BthRepr::new(Opcode(0x64), dest_qp, Psn::new(1)), payload);
        p.deth = Some(DethRepr {
            qkey: QKey(qkey),
            src_qp: Qpn::new(0x77),
        });
        let bytes = encode(&p, ip(SENDER), ip(dst));
        let meta = RecvMeta {
            src: SocketAddr::new(ip(SENDER), 4791),
            dst: ip(dst),
            len: bytes.len(),
            traffic_class: 0,
            hop_limit: 64,
        };
        self.dev.handle_datagram(self.now, &meta, &bytes);
    }

    fn changes(&mut self) -> Vec<McastChange> {
        std::iter::from_fn(|| self.dev.poll_mcast()).collect()
    }
}

fn group() -> [u8; 16] {
    gid_of(ip(GROUP))
}

#[test]
fn a_packet_for_the_group_reaches_every_attached_qp_with_its_qkey() {
    let mut r = Rig::new(DEV);
    let a = r.ud_qp(QKEY_A);
    let b = r.ud_qp(QKEY_A);
    let c = r.ud_qp(QKEY_B);
    let lone = r.ud_qp(QKEY_A); // not attached
    for (i, q) in [a, b, c, lone].into_iter().enumerate() {
        r.recv(q, i as u64, i as u64 * 1024);
    }
    for q in [a, b, c] {
        r.dev.attach_mcast(q, group()).unwrap();
    }
    r.deliver(GROUP, Qpn::MULTICAST, QKEY_A, b"to the group");
    let wc = poll(&mut r.dev, r.cq);
    // A and B (Q_Key A) got their copy; C's Q_Key differs; the lone QP
    // is not attached.
    let mut got: Vec<(u64, Qpn)> = wc.iter().map(|w| (w.wr_id, w.qp_num)).collect();
    got.sort();
    assert_eq!(got, vec![(0, a), (1, b)]);
    for w in &wc {
        assert_eq!(w.status, WcStatus::Success);
        assert_eq!(w.byte_len as usize, GRH_LEN + 12);
        assert_eq!(w.src_qp, Qpn::new(0x77));
        assert!(w.wc_flags.contains(WcFlags::GRH));
        let off = w.wr_id as usize * 1024;
        let snap = r.mem.snapshot();
        let mut area = [0u8; GRH_LEN];
        area.copy_from_slice(&snap[off..off + GRH_LEN]);
        // The GRH area: from the sender, to the group's address.
        assert_eq!(ud_grh_source(&area), ip(SENDER));
        assert_eq!(&snap[off + 36..off + 40], &[239, 67, 1, 1]);
        assert_eq!(&snap[off + GRH_LEN..off + GRH_LEN + 12], b"to the group");
    }
    let counters = r.dev.counters();
    assert_eq!(counters.mcast_copies, 3);
    assert_eq!(r.dev.qp_counters(c).unwrap().bad_qkey, 1);
    // With C's Q_Key: C's copy only.
    r.deliver(GROUP, Qpn::MULTICAST, QKEY_B, b"for c");
    let wc = poll(&mut r.dev, r.cq);
    assert_eq!((wc.len(), wc[0].qp_num, wc[0].wr_id), (1, c, 2));
}

#[test]
fn packets_no_group_takes_are_dropped_and_counted() {
    let mut r = Rig::new(DEV);
    let a = r.ud_qp(QKEY_A);
    r.recv(a, 0, 0);
    r.dev.attach_mcast(a, group()).unwrap();
    // Another group; the device's own address with QPN 0xFFFFFF.
    r.deliver("239.67.1.2", Qpn::MULTICAST, QKEY_A, b"x");
    r.deliver(DEV, Qpn::MULTICAST, QKEY_A, b"x");
    assert!(poll(&mut r.dev, r.cq).is_empty());
    assert_eq!(r.dev.counters().mcast_unmatched, 2);
    // The group's address but the QP's own number: a unicast UD packet,
    // which rxe delivers too (its address checks are RC's and UC's).
    r.deliver(GROUP, a, QKEY_A, b"x");
    assert_eq!(poll(&mut r.dev, r.cq).len(), 1);
    assert_eq!(r.dev.counters().mcast_copies, 0);
    // An RC opcode to the group: refused.
    let before = r.dev.counters().malformed;
    let mut p = PacketRepr::new(
        BthRepr::new(Opcode(0x04), Qpn::MULTICAST, Psn::new(1)),
        b"rc",
    );
    p.bth.pad_count = 2;
    let bytes = encode(&p, ip(SENDER), ip(GROUP));
    let meta = RecvMeta {
        src: SocketAddr::new(ip(SENDER), 4791),
        dst: ip(GROUP),
        len: bytes.len(),
        traffic_class: 0,
        hop_limit: 64,
    };
    r.dev.handle_datagram(r.now, &meta, &bytes);
    assert_eq!(r.dev.counters().malformed, before + 1);
    assert!(poll(&mut r.dev, r.cq).is_empty());
    // Once detached, the group takes nothing (a receive is posted).
    r.recv(a, 1, 1024);
    r.dev.detach_mcast(a, group()).unwrap();
    r.deliver(GROUP, Qpn::MULTICAST, QKEY_A, b"x");
    assert!(poll(&mut r.dev, r.cq).is_empty());
}

#[test]
fn the_driver_joins_on_the_first_attach_and_leaves_after_the_last() {
    let mut r = Rig::new(DEV);
    let a = r.ud_qp(QKEY_A);
    let b = r.ud_qp(QKEY_A);
    let g: IpAddr = ip(GROUP);
    r.dev.attach_mcast(a, group()).unwrap();
    assert_eq!(r.changes(), vec![McastChange::Join(g)]);
    // Twice the same: no change, success (rxe).
    r.dev.attach_mcast(a, group()).unwrap();
    r.dev.attach_mcast(b, group()).unwrap();
    assert!(r.changes().is_empty());
    assert_eq!(r.dev.mcast_addresses(), vec![g]);
    assert_eq!(r.dev.mcast_groups_of(a), vec![group()]);
    r.dev.detach_mcast(a, group()).unwrap();
    assert!(r.changes().is_empty());
    // Not attached any more: EINVAL (uverbs).
    assert!(matches!(
        r.dev.detach_mcast(a, group()),
        Err(VerbsError::InvalidArgument(_))
    ));
    // Destroying the last attached QP leaves the group.
    r.dev.destroy_qp(b).unwrap();
    assert_eq!(r.changes(), vec![McastChange::Leave(g)]);
    assert!(r.dev.mcast_addresses().is_empty());
}

#[test]
fn attach_refuses_what_rxe_and_uverbs_refuse() {
    let mut r = Rig::new(DEV);
    let ud = r.ud_qp(QKEY_A);
    let rc = r.qp(QpType::Rc, 0);
    let inval = |e: VerbsResult<()>| matches!(e, Err(VerbsError::InvalidArgument(_)));
    // A unicast GID; a QP that is not UD; an IPv6 group on an IPv4 device.
    assert!(inval(r.dev.attach_mcast(ud, gid_of(ip("10.0.0.9")))));
    assert!(inval(r.dev.attach_mcast(rc, group())));
    assert!(inval(r.dev.attach_mcast(ud, gid_of(ip("ff0e::67:1")))));
    assert_eq!(
        r.dev.attach_mcast(Qpn::new(0x123), group()),
        Err(VerbsError::NoSuchObject)
    );
    // 56 QPs per group, the 57th ENOMEM.
    let qps: Vec<Qpn> = (0..MAX_MCAST_QP_ATTACH).map(|_| r.ud_qp(QKEY_A)).collect();
    for q in &qps {
        r.dev.attach_mcast(*q, group()).unwrap();
    }
    assert_eq!(r.dev.attach_mcast(ud, group()), Err(VerbsError::NoMemory));
    // 8,192 groups, then ENOMEM for a new one (an old one still takes).
    for i in 0..MAX_MCAST_GRP - 1 {
        let g = IpAddr::from([239, 100, (i >> 8) as u8, i as u8]);
        r.dev.attach_mcast(ud, gid_of(g)).unwrap();
    }
    assert_eq!(
        r.dev.attach_mcast(ud, gid_of(ip("239.200.0.1"))),
        Err(VerbsError::NoMemory)
    );
    r.dev.detach_mcast(qps[0], group()).unwrap();
    r.dev.attach_mcast(ud, group()).unwrap();
    assert_eq!(r.dev.mcast_addresses().len(), MAX_MCAST_GRP);
    assert_eq!(r.changes().len(), MAX_MCAST_GRP);
}

#[test]
fn a_ud_send_to_a_group_goes_to_its_address_with_qpn_0xffffff() {
    for (dev_addr, grp) in [(DEV, GROUP), ("fd67::1", "ff0e::67:1")] {
        let mut r = Rig::new(dev_addr);
        let q = r.ud_qp(QKEY_A);
        let ah = r.dev.create_ah(r.pd, AddressVector::to(ip(grp))).unwrap();
        r.mem.fill_from(0, b"hello group");
        let mut wr = SendWr::new(5, WrOpcode::SendWithImm);
        wr.imm_data = 0xabcd;
        wr.sg_list = vec![Sge::new(VA, 11, r.key)];
        wr.ud = Some(UdDest {
            ah,
            remote_qpn: Qpn::MULTICAST,
            remote_qkey: QKey(QKEY_A),
        });
        r.dev.post_send(r.now, q, wr).unwrap();
        let mut buf = vec![0u8; 8192];
        let tx = r.dev.poll_transmit(r.now, &mut buf).unwrap();
        assert_eq!(tx.dst, SocketAddr::new(ip(grp), 4791));
        let p = PacketRepr::parse_bytes(&buf[..tx.len]).unwrap();
        assert_eq!(p.bth.opcode.name(), "UD_SEND_ONLY_WITH_IMMEDIATE");
        assert_eq!(p.bth.dest_qp, Qpn::MULTICAST);
        assert_eq!(p.deth.unwrap().src_qp, q);
        assert_eq!(p.deth.unwrap().qkey, QKey(QKEY_A));
        assert_eq!(p.payload, b"hello group");
        // And a QP of the same device attached to the group takes it back
        // (the IP layer loops it back to the sender's host).
        let rx = r.ud_qp(QKEY_A);
        r.recv(rx, 1, 2048);
        r.dev.attach_mcast(rx, gid_of(ip(grp))).unwrap();
        let meta = RecvMeta {
            src: SocketAddr::new(ip(dev_addr), 4791),
            dst: ip(grp),
            len: tx.len,
            traffic_class: 0,
            hop_limit: 1,
        };
        let bytes = buf[..tx.len].to_vec();
        r.dev.handle_datagram(r.now, &meta, &bytes);
        let wc = poll(&mut r.dev, r.cq);
        let recv: Vec<&Wc> = wc.iter().filter(|w| w.opcode == WcOpcode::Recv).collect();
        assert_eq!(recv.len(), 1, "{dev_addr}");
        assert_eq!(recv[0].imm_or_inv, 0xabcd);
        assert_eq!(recv[0].src_qp, q);
    }
}
