//! `SOFTRDMA_PCAP` / `DeviceOptions::pcap`: every packet a device sends and
//! receives lands in a pcap that decodes with a valid ICRC — checked here
//! with softrdma's own parser and, when it is installed, with Wireshark's
//! dissector (`tshark -d udp.port==4791,infiniband`).

use softrdma::cm::{connect_rc, Listener};
use softrdma::*;
use softrdma_pcap::{linktype, CaptureReader, Format};
use softrdma_wire::ip::RoceDatagram;
use std::time::Duration;

/// The records of a capture softrdma wrote: nanosecond pcap of raw IP,
/// read to its clean end.
fn records(path: &std::path::Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(path).unwrap();
    let mut r = CaptureReader::from_bytes(&b).unwrap();
    assert_eq!(
        r.format(),
        Format::Pcap {
            big_endian: false,
            nanosecond: true
        }
    );
    assert_eq!(r.linktype(), Some(linktype::RAW));
    let mut out = Vec::new();
    while let Some(f) = r
        .next_frame()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    {
        out.push(f.data.to_vec());
    }
    out
}

#[test]
fn capture_decodes_with_valid_icrc() {
    let dir = std::env::temp_dir().join(format!("softrdma-cap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (pa, pb) = (dir.join("a.pcap"), dir.join("b.pcap"));
    let listener = Listener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let pb2 = pb.clone();
    let srv = std::thread::spawn(move || {
        let dev = Device::open(DeviceOptions {
            pcap: Some(pb2),
            ..Default::default()
        })
        .unwrap();
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(64, None).unwrap();
        let mr = pd
            .alloc_mr(
                1 << 20,
                Access::LOCAL_WRITE
                    .with(Access::REMOTE_WRITE)
                    .with(Access::REMOTE_READ),
            )
            .unwrap();
        let mut c = listener
            .accept_rc(&pd, &cq, QpType::Rc, Some(&mr), &ConnectOptions::default())
            .unwrap();
        c.qp.post_recv(RecvWr {
            wr_id: 1,
            sg_list: vec![mr.sge(0, 8192)],
        })
        .unwrap();
        softrdma::cm::barrier(&mut c.stream).unwrap();
        cq.wait(1, Duration::from_secs(10)).unwrap();
        softrdma::cm::barrier(&mut c.stream).unwrap();
    });
    let dev = Device::open(DeviceOptions {
        pcap: Some(pa.clone()),
        mtu: Some(1024),
        // The standard FIRST … LAST segmentation, whose opcodes are checked.
        chunk_loopback_writes: false,
        ..Default::default()
    })
    .unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64, None).unwrap();
    let mr = pd.alloc_mr(1 << 20, Access::LOCAL_WRITE).unwrap();
    let opts = ConnectOptions {
        mtu: Mtu::M1024,
        ..Default::default()
    };
    let mut c = connect_rc(&addr, &pd, &cq, QpType::Rc, Some(&mr), &opts).unwrap();
    softrdma::cm::barrier(&mut c.stream).unwrap();
    // SEND (multi-packet, odd length: PadCnt), WRITE with immediate-less
    // RETH, READ (responses), 13-byte WRITE (PadCnt 3).
    // Three SGEs: more pieces than a zero-copy datagram takes, so the
    // payload is copied; the WRITE below has two (zero-copy, gathered).
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sg_list = vec![mr.sge(0, 1000), mr.sge(1000, 1000), mr.sge(2000, 1001)];
    c.qp.post_send(wr).unwrap();
    let mut w = SendWr::new(2, WrOpcode::RdmaWrite);
    w.sg_list = vec![mr.sge(0, 1500), mr.sge(1500, 3500)];
    w.remote_addr = c.remote.va + 65536;
    w.rkey = c.remote.rkey;
    c.qp.post_send(w.clone()).unwrap();
    let mut r = w.clone();
    r.wr_id = 3;
    r.opcode = WrOpcode::RdmaRead;
    r.sg_list = vec![mr.sge(65536, 5000)];
    c.qp.post_send(r).unwrap();
    let mut s = w;
    s.wr_id = 4;
    s.sg_list = vec![mr.sge(0, 13)];
    c.qp.post_send(s).unwrap();
    let wc = cq.wait(4, Duration::from_secs(10)).unwrap();
    assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
    softrdma::cm::barrier(&mut c.stream).unwrap();
    srv.join().unwrap();
    // The device closes (and flushes its capture) when its last handle goes.
    drop((c, mr, cq, pd, dev));

    for p in [&pa, &pb] {
        let recs = records(p);
        assert!(
            recs.len() >= 15,
            "{}: only {} records",
            p.display(),
            recs.len()
        );
        for (i, r) in recs.iter().enumerate() {
            let d = RoceDatagram::new_checked(&r[..]).unwrap_or_else(|e| panic!("record {i}: {e}"));
            assert!(d.is_roce_port());
            assert!(d.icrc_ok(), "record {i} of {}: bad ICRC", p.display());
        }
    }
    // Both directions of the client's capture: requests out, responses in.
    let a = records(&pa);
    let ops: std::collections::BTreeSet<u8> = a.iter().map(|r| r[28]).collect();
    for op in [0x00u8, 0x02, 0x06, 0x08, 0x0a, 0x0c, 0x0d, 0x0f, 0x11] {
        assert!(ops.contains(&op), "opcode {op:#04x} missing from {ops:x?}");
    }

    // Wireshark's RoCE dissector, when available: no malformed packet.
    match std::process::Command::new("tshark")
        .args(["-r"])
        .arg(&pa)
        .args([
            "-d",
            "udp.port==4791,infiniband",
            "-T",
            "fields",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "_ws.malformed",
        ])
        .output()
    {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(
                lines.len(),
                a.len(),
                "tshark saw {} packets: {text}",
                lines.len()
            );
            assert!(
                !text.contains("Malformed") && lines.iter().all(|l| !l.trim().is_empty()),
                "{text}"
            );
            let errs = String::from_utf8_lossy(&out.stderr);
            assert!(!errs.contains("Malformed"), "{errs}");
        }
        Ok(out) => panic!("tshark failed: {}", String::from_utf8_lossy(&out.stderr)),
        Err(_) => eprintln!("tshark not installed: Wireshark decoding not checked"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn datagrams_that_wait_for_a_full_socket_are_captured_once() {
    // The sender's engine refuses half its send calls: datagrams wait in
    // its queue and go with a later call. Each is recorded once, when it
    // leaves: the file holds exactly the packets the device sent.
    let path = std::env::temp_dir().join(format!("softrdma-cap-once-{}.pcap", std::process::id()));
    let dev = Device::open(DeviceOptions {
        pcap: Some(path.clone()),
        refuse_sends: Some(0.5),
        ..Default::default()
    })
    .unwrap();
    let peer = Device::open_default().unwrap();
    let mk = |d: &Device| {
        let pd = d.alloc_pd().unwrap();
        let cq = d.create_cq(256, None).unwrap();
        let qp = pd.qp_builder(QpType::Ud, &cq, &cq).build().unwrap();
        (pd, cq, qp)
    };
    let (pda, cqa, qpa) = mk(&dev);
    let (_pdb, _cqb, qpb) = mk(&peer);
    let opts = ConnectOptions::default();
    qpa.connect(Psn::ZERO, &qpb.endpoint(Psn::ZERO), &opts)
        .unwrap();
    let mr = pda.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let ah = pda.create_ah_for_gid(peer.gid()).unwrap();
    for i in 0..200u64 {
        let mut wr = SendWr::new(i, WrOpcode::Send);
        wr.sg_list = vec![mr.sge(0, 1024)];
        wr.ud = Some(UdDest {
            ah: ah.id(),
            remote_qpn: qpb.qpn(),
            remote_qkey: opts.qkey,
        });
        qpa.post_send(wr).unwrap();
        if i % 32 == 31 {
            assert_eq!(cqa.wait(32, Duration::from_secs(10)).unwrap().len(), 32);
        }
    }
    cqa.wait(8, Duration::from_secs(10)).unwrap();
    let sent = dev.counters().tx_packets;
    drop((qpa, cqa, ah, mr, pda));
    drop(dev);
    let recs = records(&path);
    let _ = std::fs::remove_file(&path);
    assert_eq!(sent, 200);
    assert_eq!(recs.len() as u64, sent, "every sent datagram once");
}
