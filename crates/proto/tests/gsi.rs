//! QP 1 (the GSI): MADs the communication manager sends and receives.
//!
//! - what `emit_gsi` writes is rxe's packet byte for byte (the rping
//!   capture), but for the ICRC, which covers the IPv4 identification rxe
//!   set and we cannot see: ours checks with identification 0;
//! - every MAD of both rping captures, received, reaches the queue with
//!   its source and bytes;
//! - packets for QP 1 that are not MADs (another opcode, another Q_Key, a
//!   long payload) are dropped and counted, and the queue is bounded.

#[path = "../../wire/tests/common/pcap.rs"]
mod pcap;

use softrdma_proto::limits::GSI_RX_QUEUE;
use softrdma_proto::{Device, DeviceConfig, RecvMeta};
use softrdma_wire::mad::GSI_QKEY;
use softrdma_wire::{
    BthRepr, DatagramRepr, DethRepr, IpRepr, Opcode, PKey, PacketRepr, Psn, QKey, Qpn, RoceDatagram,
};
use std::net::{IpAddr, SocketAddr};

fn dev(ip: IpAddr, src_port: u16) -> Device {
    let mut cfg = DeviceConfig::new(ip, 7);
    cfg.udp_src_port = src_port;
    Device::new(cfg)
}

/// The IP/UDP datagrams of a capture that go to QP 1.
fn qp1_datagrams(name: &str) -> Vec<Vec<u8>> {
    let file = std::fs::read(pcap::data_dir().join(name)).unwrap();
    pcap::pcap_records(&file)
        .into_iter()
        .filter_map(|r| {
            let d = RoceDatagram::new_checked(&r[14..]).ok()?;
            let ib = d.ib();
            (ib.bth().dest_qp() == Qpn::GSI).then(|| d.datagram().to_vec())
        })
        .collect()
}

#[test]
fn emitted_mads_are_rxes_packets() {
    let dgrams = qp1_datagrams("rping_rdmacm.pcap");
    // Frame 1: the client's REQ, PSN 6 of its QP 1.
    let first = RoceDatagram::new_checked(&dgrams[0][..]).unwrap();
    let ip = DatagramRepr::parse(&first);
    let (src, dst) = (ip.ip.src(), ip.ip.dst());
    let want = first.ib();
    let mad = want.payload().to_vec();
    let mut d = dev(src, ip.udp.src_port);
    let mut buf = vec![0u8; 4096];
    for _ in 0..want.bth().psn().value() {
        d.emit_gsi(dst, Qpn::GSI, QKey(GSI_QKEY), &mad, &mut buf)
            .unwrap();
    }
    let t = d
        .emit_gsi(dst, Qpn::GSI, QKey(GSI_QKEY), &mad, &mut buf)
        .unwrap();
    assert_eq!(t.dst, SocketAddr::new(dst, 4791));
    assert_eq!((t.traffic_class, t.hop_limit, t.len), (0, 64, 280));
    let got = &buf[..t.len];
    let covered = want.icrc_covered();
    assert_eq!(&got[..covered.len()], covered, "BTH, DETH and MAD");
    // The ICRC: ours is right for identification 0 (what a UDP socket
    // with DF sends).
    let mut ours = ip;
    if let IpRepr::V4(v4) = &mut ours.ip {
        v4.ident = 0;
    }
    let icrc = u32::from_le_bytes(got[covered.len()..].try_into().unwrap());
    assert_eq!(icrc, ours.icrc(covered));
    assert_eq!(d.counters().gsi_tx, u64::from(want.bth().psn().value()) + 1);
}

#[test]
fn received_mads_reach_the_queue() {
    for file in ["rping_rdmacm.pcap", "v6_rping_rdmacm.pcap"] {
        let dgrams = qp1_datagrams(file);
        assert!(dgrams.len() >= 5, "{file}: {} MADs", dgrams.len());
        assert_eq!(dgrams.len(), pcap::qp1_mads(file).len());
        for raw in dgrams {
            let d = RoceDatagram::new_checked(&raw[..]).unwrap();
            let ip = DatagramRepr::parse(&d);
            let mut rx = dev(ip.ip.dst(), 4791);
            let meta = RecvMeta {
                src: SocketAddr::new(ip.ip.src(), ip.udp.src_port),
                dst: ip.ip.dst(),
                len: d.ib().len(),
                traffic_class: 0,
                hop_limit: 64,
            };
            assert!(!rx.gsi_pending());
            rx.handle_datagram(softrdma_proto::Instant(0), &meta, d.ib().into_inner());
            assert!(rx.gsi_pending(), "{file}: {:?}", rx.counters().nonzero());
            let m = rx.poll_gsi().unwrap();
            assert_eq!(m.src, ip.ip.src());
            assert_eq!(m.src_qpn, Qpn::GSI);
            assert_eq!(m.pkey, PKey::DEFAULT);
            assert_eq!(m.mad, d.ib().payload());
            assert!(rx.poll_gsi().is_none());
            assert_eq!(rx.counters().gsi_rx, 1);
        }
    }
}

/// A packet to QP 1 from 10.0.0.2 to 10.0.0.1, as bytes.
fn packet(opcode: u8, qkey: u32, payload: &[u8]) -> Vec<u8> {
    let bth = BthRepr {
        pad_count: PacketRepr::pad_for(payload.len()),
        ack_req: true,
        ..BthRepr::new(Opcode(opcode), Qpn::GSI, Psn::new(1))
    };
    let mut r = PacketRepr::new(bth, payload);
    if Opcode(opcode)
        .info()
        .is_some_and(|i| i.transport == softrdma_wire::Transport::Ud)
    {
        r.deth = Some(DethRepr {
            qkey: QKey(qkey),
            src_qp: Qpn::GSI,
        });
    }
    if Opcode(opcode)
        .info()
        .is_some_and(|i| i.headers.contains(softrdma_wire::Headers::IMM))
    {
        r.imm = Some(0);
    }
    let ip = IpRepr::between("10.0.0.2".parse().unwrap(), "10.0.0.1".parse().unwrap(), 0).unwrap();
    let d = DatagramRepr::new(ip, 4791, 4791);
    let mut buf = vec![0u8; 2048];
    let n = d.emit(&r, &mut buf).unwrap();
    let dg = RoceDatagram::new_checked(&buf[..n]).unwrap();
    dg.ib().into_inner().to_vec()
}

fn deliver(d: &mut Device, ib: &[u8]) {
    let meta = RecvMeta {
        src: "10.0.0.2:4791".parse().unwrap(),
        dst: "10.0.0.1".parse().unwrap(),
        len: ib.len(),
        traffic_class: 0,
        hop_limit: 64,
    };
    d.handle_datagram(softrdma_proto::Instant(0), &meta, ib);
}

#[test]
fn what_is_not_a_mad_is_dropped() {
    let mut d = dev("10.0.0.1".parse().unwrap(), 4791);
    let mad = [7u8; 256];
    deliver(&mut d, &packet(0x64, 0x1111, &mad)); // wrong Q_Key
    deliver(&mut d, &packet(0x65, GSI_QKEY, &mad)); // SEND_ONLY with immediate
    deliver(&mut d, &packet(0x04, 0, &mad)); // RC SEND_ONLY to QP 1
    deliver(&mut d, &packet(0x64, GSI_QKEY, &[0u8; 260])); // longer than a MAD
    assert!(!d.gsi_pending());
    let c = d.counters();
    assert_eq!((c.gsi_rx, c.gsi_dropped, c.unknown_qp), (0, 4, 0));
    deliver(&mut d, &packet(0x64, GSI_QKEY, &mad));
    assert_eq!(d.poll_gsi().unwrap().mad, mad);
}

#[test]
fn the_queue_is_bounded() {
    let mut d = dev("10.0.0.1".parse().unwrap(), 4791);
    let p = packet(0x64, GSI_QKEY, &[1u8; 256]);
    for _ in 0..GSI_RX_QUEUE + 10 {
        deliver(&mut d, &p);
    }
    let c = d.counters();
    assert_eq!(c.gsi_rx, GSI_RX_QUEUE as u64);
    assert_eq!(c.gsi_dropped, 10);
    let mut n = 0;
    while d.poll_gsi().is_some() {
        n += 1;
    }
    assert_eq!(n, GSI_RX_QUEUE);
}

#[test]
fn emit_refuses_what_is_not_a_mad() {
    let mut d = dev("10.0.0.1".parse().unwrap(), 4791);
    let mut buf = vec![0u8; 4096];
    let dst: IpAddr = "10.0.0.2".parse().unwrap();
    assert!(d
        .emit_gsi(dst, Qpn::GSI, QKey(GSI_QKEY), &[0; 257], &mut buf)
        .is_none());
    assert!(d
        .emit_gsi(
            "::1".parse().unwrap(),
            Qpn::GSI,
            QKey(GSI_QKEY),
            &[0; 256],
            &mut buf
        )
        .is_none());
    // What it emits, a second device takes.
    let t = d
        .emit_gsi(dst, Qpn::GSI, QKey(GSI_QKEY), &[9; 256], &mut buf)
        .unwrap();
    let mut rx = dev(dst, 4791);
    let meta = RecvMeta {
        src: "10.0.0.1:4791".parse().unwrap(),
        dst,
        len: t.len,
        traffic_class: 0,
        hop_limit: 64,
    };
    rx.handle_datagram(softrdma_proto::Instant(0), &meta, &buf[..t.len]);
    assert_eq!(rx.poll_gsi().unwrap().mad, vec![9; 256]);
}
