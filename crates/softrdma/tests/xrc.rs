//! XRC over real sockets (devices at 127.67.3.x): an XRC INI QP on one
//! device sends to a TGT QP on another, naming in each request one of two
//! XRC SRQs of the TGT's domain; SENDs land in the named SRQ's WQEs and
//! complete on its CQ; WRITE, READ and atomics are checked against the
//! SRQ's protection domain; a TGT QP opened again by number outlives its
//! creator's handle; several INI QPs share one SRQ (what XRC is for).

use softrdma::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

fn access() -> Access {
    Access::LOCAL_WRITE
        .with(Access::REMOTE_WRITE)
        .with(Access::REMOTE_READ)
        .with(Access::REMOTE_ATOMIC)
}

/// Connects an INI QP (on `ini_dev`) and a TGT QP to each other.
fn connect(ini: &QueuePair, ini_dev: &Device, tgt: &XrcTgtQp, tgt_dev: &Device) {
    let gid_of = |d: &Device| softrdma::grh::gid_of(d.local_addr().ip());
    let init = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: access().remote(),
        ..Default::default()
    };
    let m = AttrMask::required(QpType::XrcSend, QpState::Reset, QpState::Init).unwrap();
    ini.modify(&init, m).unwrap();
    tgt.modify(&init, m).unwrap();
    let rtr = |dest: Qpn, to: &Device| QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Mtu::M1024,
        dest_qp_num: dest,
        rq_psn: Psn::new(0x100),
        max_dest_rd_atomic: 8,
        min_rnr_timer: 5,
        ah_attr: AddressVector::to(softrdma::grh::addr_of_gid(gid_of(to))),
        ..Default::default()
    };
    // Every attribute a program passes: each type ignores what it has no
    // use for, as the kernel does.
    let all = AttrMask::RC_RTR;
    ini.modify(&rtr(tgt.qpn(), tgt_dev), all).unwrap();
    tgt.modify(&rtr(ini.qpn(), ini_dev), all).unwrap();
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: Psn::new(0x100),
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 8,
        ..Default::default()
    };
    let all = AttrMask::RC_RTS;
    ini.modify(&rts, all).unwrap();
    tgt.modify(&rts, all).unwrap();
}

fn one(cq: &CompletionQueue) -> Wc {
    let wc = cq.wait(1, T).unwrap();
    assert_eq!(wc.len(), 1, "no completion");
    assert_eq!(wc[0].status, WcStatus::Success, "{:?}", wc[0]);
    wc[0]
}

#[test]
fn ini_to_tgt_through_the_named_srq() {
    let a = Device::open(DeviceOptions::at("127.67.3.1".parse().unwrap())).unwrap();
    let b = Device::open(DeviceOptions::at("127.67.3.2".parse().unwrap())).unwrap();
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let scq = a.create_cq(64, None).unwrap();
    let ini = pa
        .qp_builder(QpType::XrcSend, &scq, &scq)
        .max_recv_wr(16)
        .build()
        .unwrap();
    // No receive queue on an INI QP.
    assert_eq!(ini.cap().max_recv_wr, 0);
    let xrcd = b.alloc_xrcd().unwrap();
    let (cq0, cq1) = (
        b.create_cq(64, None).unwrap(),
        b.create_cq(64, None).unwrap(),
    );
    let srq0 = pb.create_xrc_srq(&xrcd, &cq0, 64, 1, 0).unwrap();
    let srq1 = pb.create_xrc_srq(&xrcd, &cq1, 64, 1, 0).unwrap();
    let (n0, n1) = (srq0.srq_num().unwrap(), srq1.srq_num().unwrap());
    assert_ne!(n0, n1);
    let tgt = xrcd.create_tgt_qp().unwrap();
    connect(&ini, &a, &tgt, &b);
    assert_eq!(tgt.state().unwrap(), QpState::Rts);

    let src = pa.alloc_mr(1 << 20, access()).unwrap();
    let dst = pb.alloc_mr(1 << 20, access()).unwrap();
    for (i, srq) in [&srq0, &srq1].into_iter().enumerate() {
        for k in 0..8u64 {
            srq.post_recv(RecvWr {
                wr_id: i as u64 * 100 + k,
                sg_list: vec![dst.sge((i * 8 + k as usize) * 16384, 16384)],
            })
            .unwrap();
        }
    }
    // SENDs to alternating SRQs; a 10 KiB one takes ten packets.
    for k in 0..8u32 {
        let which = (k % 2) as usize;
        let len = if k == 3 { 10_000 } else { 100 + k as usize };
        let data: Vec<u8> = (0..len).map(|i| (i as u32 * 31 + k) as u8).collect();
        src.write(0, &data);
        let mut wr = SendWr::new(k as u64, WrOpcode::SendWithImm);
        wr.imm_data = k;
        wr.sg_list = vec![src.sge(0, len as u32)];
        wr.remote_srqn = [n0, n1][which];
        ini.post_send(wr).unwrap();
        assert_eq!(one(&scq).wr_id, k as u64);
        let w = one([&cq0, &cq1][which]);
        assert_eq!(w.imm_or_inv, k);
        assert_eq!(w.byte_len as usize, len);
        assert_eq!(w.qp_num, tgt.qpn());
        let slot = which * 8 + (w.wr_id % 100) as usize;
        assert_eq!(w.wr_id / 100, which as u64);
        assert_eq!(dst.to_vec(slot * 16384, len), data);
    }
    // WRITE, READ, FetchAdd: R_Keys of the SRQ's PD.
    src.write(0, b"written over xrc");
    let mut wr = SendWr::rdma(
        20,
        WrOpcode::RdmaWrite,
        src.sge(0, 16),
        dst.addr() + 900_000,
        dst.rkey(),
    );
    wr.remote_srqn = n1;
    ini.post_send(wr).unwrap();
    one(&scq);
    assert_eq!(dst.to_vec(900_000, 16), b"written over xrc");
    dst.write(800_000, &[7u8; 5000]);
    let mut wr = SendWr::rdma(
        21,
        WrOpcode::RdmaRead,
        src.sge(4096, 5000),
        dst.addr() + 800_000,
        dst.rkey(),
    );
    wr.remote_srqn = n0;
    ini.post_send(wr).unwrap();
    one(&scq);
    assert_eq!(src.to_vec(4096, 5000), vec![7u8; 5000]);
    let mut wr = SendWr::rdma(
        22,
        WrOpcode::AtomicFetchAndAdd,
        src.sge(65536, 8),
        dst.addr() + 700_000,
        dst.rkey(),
    );
    wr.compare_add = 41;
    wr.remote_srqn = n0;
    ini.post_send(wr).unwrap();
    one(&scq);
    assert_eq!(
        dst.atomic_u64(700_000)
            .load(std::sync::atomic::Ordering::SeqCst),
        41
    );

    // A region of another PD of the target: remote access error, and the
    // INI QP in error.
    let other_pd = b.alloc_pd().unwrap();
    let foreign = other_pd.alloc_mr(4096, access()).unwrap();
    let mut wr = SendWr::rdma(
        23,
        WrOpcode::RdmaWrite,
        src.sge(0, 16),
        foreign.addr(),
        foreign.rkey(),
    );
    wr.remote_srqn = n0;
    ini.post_send(wr).unwrap();
    let wc = scq.wait(1, T).unwrap();
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
    assert_eq!(foreign.to_vec(0, 16), vec![0u8; 16]);
    assert_eq!(tgt.state().unwrap(), QpState::Err);
}

#[test]
fn a_tgt_qp_lives_while_a_handle_does_and_many_inis_share_an_srq() {
    let a = Device::open(DeviceOptions::at("127.67.3.3".parse().unwrap())).unwrap();
    let b = Device::open(DeviceOptions::at("127.67.3.4".parse().unwrap())).unwrap();
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let xrcd = b.alloc_xrcd().unwrap();
    let rcq = b.create_cq(256, None).unwrap();
    let srq = pb.create_xrc_srq(&xrcd, &rcq, 256, 1, 0).unwrap();
    let dst = pb.alloc_mr(1 << 16, access()).unwrap();
    for k in 0..64u64 {
        srq.post_recv(RecvWr {
            wr_id: k,
            sg_list: vec![dst.sge(k as usize * 1024, 1024)],
        })
        .unwrap();
    }
    let scq = a.create_cq(256, None).unwrap();
    let src = pa.alloc_mr(4096, access()).unwrap();
    let mut pairs = Vec::new();
    for _ in 0..4 {
        let ini = pa.qp_builder(QpType::XrcSend, &scq, &scq).build().unwrap();
        let created = xrcd.create_tgt_qp().unwrap();
        // Opened by number, then the creator's handle goes: the QP stays.
        let opened = xrcd.open_tgt_qp(created.qpn()).unwrap();
        assert_eq!(opened.qpn(), created.qpn());
        connect(&ini, &a, &created, &b);
        drop(created);
        pairs.push((ini, opened));
    }
    let n = srq.srq_num().unwrap();
    for (i, (ini, tgt)) in pairs.iter().enumerate() {
        let mut wr = SendWr::new(i as u64, WrOpcode::Send);
        src.write(0, format!("from INI {i}").as_bytes());
        wr.sg_list = vec![src.sge(0, 10)];
        wr.remote_srqn = n;
        ini.post_send(wr).unwrap();
        one(&scq);
        let w = one(&rcq);
        assert_eq!(w.qp_num, tgt.qpn());
        assert_eq!(
            dst.to_vec(w.wr_id as usize * 1024, 10),
            format!("from INI {i}").as_bytes()
        );
    }
    // The last handle gone, the number opens nothing.
    let q = pairs[0].1.qpn();
    pairs.remove(0);
    let e = xrcd.open_tgt_qp(q).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    // A number naming no SRQ: the INI gets an invalid request NAK.
    let (ini, tgt) = &pairs[0];
    let mut wr = SendWr::new(99, WrOpcode::Send);
    wr.sg_list = vec![src.sge(0, 4)];
    wr.remote_srqn = (n + 1) & 0xff_ffff;
    ini.post_send(wr).unwrap();
    let wc = scq.wait(1, T).unwrap();
    assert_eq!(wc[0].status, WcStatus::RemInvReqErr);
    assert_eq!(tgt.counters().unwrap().xrc_bad_srqn, 1);
}

/// A capture of XRC traffic: softrdma's parser finds the XRCETH naming the
/// SRQ on every request and none on responses, with valid ICRCs; Wireshark
/// (tshark, needed: scripts/deps installs it) names the XRC opcodes of the
/// BTH and finds nothing malformed. Wireshark 4.0 (Debian 12) has no
/// XRCETH dissector: it shows the headers after the BTH as an unknown
/// header sequence.
#[test]
fn an_xrc_capture_decodes() {
    let dir = std::env::temp_dir().join(format!("softrdma-xrc-cap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cap = dir.join("a.pcap");
    let a = Device::open(DeviceOptions {
        pcap: Some(cap.clone()),
        ..DeviceOptions::at("127.67.3.5".parse().unwrap())
    })
    .unwrap();
    let b = Device::open(DeviceOptions::at("127.67.3.6".parse().unwrap())).unwrap();
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let scq = a.create_cq(16, None).unwrap();
    let ini = pa.qp_builder(QpType::XrcSend, &scq, &scq).build().unwrap();
    let xrcd = b.alloc_xrcd().unwrap();
    let rcq = b.create_cq(16, None).unwrap();
    let srq = pb.create_xrc_srq(&xrcd, &rcq, 16, 1, 0).unwrap();
    let tgt = xrcd.create_tgt_qp().unwrap();
    connect(&ini, &a, &tgt, &b);
    let dst = pb.alloc_mr(8192, access()).unwrap();
    srq.post_recv(RecvWr {
        wr_id: 1,
        sg_list: vec![dst.sge(0, 4096)],
    })
    .unwrap();
    let src = pa.alloc_mr(8192, access()).unwrap();
    let n = srq.srq_num().unwrap();
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sg_list = vec![src.sge(0, 2500)];
    wr.remote_srqn = n;
    ini.post_send(wr).unwrap();
    one(&scq);
    one(&rcq);
    let mut wr = SendWr::rdma(
        2,
        WrOpcode::RdmaRead,
        src.sge(4096, 100),
        dst.addr(),
        dst.rkey(),
    );
    wr.remote_srqn = n;
    ini.post_send(wr).unwrap();
    one(&scq);
    drop((ini, tgt, srq));
    drop(a);

    let bytes = std::fs::read(&cap).unwrap();
    let mut r = softrdma_pcap::CaptureReader::from_bytes(&bytes).unwrap();
    let mut ops = Vec::new();
    while let Some(f) = r.next_frame().unwrap() {
        let d = softrdma_wire::ip::RoceDatagram::new_checked(f.data).unwrap();
        assert!(d.icrc_ok());
        let p = d.ib();
        let info = p.info();
        assert_eq!(info.transport, softrdma_wire::Transport::Xrc);
        match p.xrceth() {
            Some(x) => {
                assert!(info.is_request());
                assert_eq!(x.srqn(), n);
            }
            None => assert!(!info.is_request()),
        }
        ops.push(p.bth().opcode().0);
    }
    // SEND FIRST, MIDDLE, LAST (MTU 1024), READ request; ACKs, READ
    // RESPONSE ONLY.
    for op in [0xa0u8, 0xa1, 0xa2, 0xac, 0xb1, 0xb0] {
        assert!(ops.contains(&op), "{op:#04x} missing from {ops:x?}");
    }
    let out = std::process::Command::new("tshark")
        .arg("-r")
        .arg(&cap)
        .args(["-d", "udp.port==4791,infiniband", "-V"])
        .output()
        .expect("tshark (apt-get install tshark; scripts/deps)");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for name in [
        "Extended Reliable Connection (XRC) - SEND First",
        "Extended Reliable Connection (XRC) - SEND Middle",
        "Extended Reliable Connection (XRC) - SEND Last",
        "Extended Reliable Connection (XRC) - RDMA READ Request",
        "Extended Reliable Connection (XRC) - RDMA READ response Only",
        "Extended Reliable Connection (XRC) - Acknowledge",
    ] {
        assert!(text.contains(name), "tshark did not name {name}");
    }
    assert!(!text.contains("Malformed"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
