//! Hostile peers at the core (issue 21; ReDMArk, USENIX Security 2021):
//! what an attacker who knows a connection's QPN and PSN — the worst case
//! — can and cannot do to it from another source, from the peer's own
//! address and port, and with floods. Scripted at explicit virtual times;
//! the same attacks over real sockets are in softrdma's and the CLI's
//! `hostile` tests.

mod support;

use softrdma_proto::*;
use softrdma_wire::*;
use std::net::SocketAddr;
use support::*;

/// The port the scripted peer sends from (the device socket of a
/// softrdma peer, `support`'s default).
const PEER_PORT: u16 = 4791;
/// Another port on the peer's address: any local process may send from
/// one.
const OTHER_PORT: u16 = 40_000;

fn from(port: u16) -> SocketAddr {
    SocketAddr::new(ip(PEER_IP), port)
}

fn leak(data: &[u8]) -> &'static [u8] {
    Box::leak(data.to_vec().into_boxed_slice())
}

fn send_only(r: &Rig, psn: Psn, data: &[u8]) -> PacketRepr<'static> {
    PacketRepr::new(r.bth(0x04, psn), leak(data))
}

fn fetch_add(r: &Rig, psn: Psn, va: u64, rkey: u32) -> PacketRepr<'static> {
    let mut p = PacketRepr::new(r.bth(0x14, psn), &[]);
    p.atomic_eth = Some(AtomicEthRepr {
        va,
        rkey: RKey(rkey),
        swap_add: 1,
        compare: 0,
    });
    p
}

/// A key no region has.
fn bad_key(r: &Rig) -> u32 {
    r.key ^ 0x5a5a_0001
}

/// A signaled SEND of 64 bytes from the start of the region.
fn send_wr(id: u64) -> SendWr {
    let mut wr = SendWr::new(id, WrOpcode::Send);
    wr.sg_list = vec![Sge::new(VA, 64, 0)];
    wr.flags = wr.flags.with(SendFlags::SIGNALED);
    wr
}

fn counters(r: &Rig) -> Counters {
    r.dev.qp_counters(r.qpn).unwrap()
}

/// The QP has taken one SEND from its peer (so it knows the peer's port).
fn pinned_rig(s: Setup) -> Rig {
    let mut r = Rig::new(s);
    r.post_recv(100, 0x8000, 4096);
    let psn = r.take_psn(1);
    r.deliver_from_port(&send_only(&r, psn, b"hello"), from(PEER_PORT));
    assert_eq!(r.recv_cq().len(), 1);
    assert_eq!(r.sent().len(), 1, "the ACK");
    assert_eq!(r.dev.peer_port(r.qpn).unwrap(), Some(PEER_PORT));
    r
}

// ------------------------------------------------------ QP numbers ----

fn rc_qp(dev: &mut Device, pd: PdId, cq: CqId) -> std::result::Result<Qpn, VerbsError> {
    dev.create_qp(&QpInit {
        cap: QpCap {
            max_send_wr: 1,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        ..QpInit::new(QpType::Rc, pd, cq)
    })
    .map(|(q, _)| q)
}

fn device(seed: u64) -> (Device, PdId, CqId) {
    let mut dev = Device::new(DeviceConfig::new(ip(DEV_IP), seed));
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    (dev, pd, cq)
}

/// 256 QPs created one after another: their numbers must not tell the
/// next one (ReDMArk V5). Before: a random start, then +1 each time.
#[test]
fn qpns_are_drawn_at_random_from_the_24_bit_space() {
    let (mut dev, pd, cq) = device(7);
    let qpns: Vec<u32> = (0..256)
        .map(|_| rc_qp(&mut dev, pd, cq).unwrap().value())
        .collect();
    let mut sorted = qpns.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 256, "distinct");
    assert!(
        qpns.iter().all(|&q| q > 1 && q < 0xff_ffff),
        "no reserved QPN"
    );
    // No pattern in the deltas: the commonest delta appears at most a
    // few times (random 24-bit draws: all 255 deltas differ, almost
    // surely; sequential: 255 times +1).
    let mut deltas: Vec<u32> = qpns
        .windows(2)
        .map(|w| w[1].wrapping_sub(w[0]) & 0xff_ffff)
        .collect();
    deltas.sort_unstable();
    let commonest = deltas
        .chunk_by(|a, b| a == b)
        .map(<[u32]>::len)
        .max()
        .unwrap();
    assert!(commonest <= 2, "deltas repeat {commonest} times: {qpns:x?}");
    // Spread over the space: every bit of the number is used.
    let span = sorted[255] - sorted[0];
    assert!(span > 1 << 22, "span {span:#x}");
    for bit in 0..24 {
        let ones = qpns.iter().filter(|&&q| q >> bit & 1 == 1).count();
        assert!((64..=192).contains(&ones), "bit {bit} set in {ones}/256");
    }
    // Another device (another key) draws other numbers.
    let (mut other, pd2, cq2) = device(8);
    let theirs: Vec<u32> = (0..256)
        .map(|_| rc_qp(&mut other, pd2, cq2).unwrap().value())
        .collect();
    let common = theirs.iter().filter(|q| qpns.contains(q)).count();
    assert!(common <= 2, "{common} numbers in common");
}

/// A destroyed QP's number is not given to a new QP soon after: packets
/// of the old connection still on their way reach no one.
#[test]
fn destroyed_qpns_are_not_reused_soon() {
    let (mut dev, pd, cq) = device(9);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..50_000 {
        let q = rc_qp(&mut dev, pd, cq).unwrap();
        assert!(seen.insert(q.value()), "{q:?} reused");
        dev.destroy_qp(q).unwrap();
    }
}

/// With the whole table live (65,536 QPs) a QP is still created at once,
/// destroyed numbers stay out, and the limit is the table's, not the
/// allocator's.
#[test]
fn a_full_table_still_allocates() {
    let (mut dev, pd, cq) = device(10);
    let mut live: Vec<Qpn> = (0..limits::MAX_QP)
        .map(|_| rc_qp(&mut dev, pd, cq).unwrap())
        .collect();
    assert_eq!(rc_qp(&mut dev, pd, cq), Err(VerbsError::NoMemory));
    let gone: Vec<Qpn> = live.drain(..1000).collect();
    for q in &gone {
        dev.destroy_qp(*q).unwrap();
    }
    for _ in 0..1000 {
        let q = rc_qp(&mut dev, pd, cq).unwrap();
        assert!(!gone.contains(&q), "{q:?} reused at once");
    }
    // Creating with a chosen number refuses the reserved ones.
    let init = QpInit::new(QpType::Ud, pd, cq);
    dev.destroy_qp(live[0]).unwrap();
    for q in [0, 1, 0xff_ffff] {
        assert!(matches!(
            dev.create_qp_with_qpn(&init, Qpn::new(q)),
            Err(VerbsError::InvalidArgument(_))
        ));
    }
}

// --------------------------------------------------- source pinning ----

/// After the peer's first packet, packets from another UDP port of the
/// peer's address — in window, with the right QPN — are dropped before
/// any check: no delivery, no NAK, no state change. Before: the source
/// check covered the IP only; the SEND was delivered and each bad request
/// was NAKed and killed the QP.
#[test]
fn injection_from_another_port_is_dropped_before_any_check() {
    let mut r = pinned_rig(Setup::default());
    r.post_recv(1, 0, 4096);
    let psn = r.peer_psn;
    let va = VA;
    let mtu = r.mtu.bytes() as usize;
    let forged = [
        // A SEND the program would take for its peer's.
        send_only(&r, psn, b"forged"),
        // A WRITE with a bad R_Key, a READ, an atomic.
        write_only(&r, psn, va, bad_key(&r), &[0xee; 16]),
        read_req(&r, psn, va, bad_key(&r), 64),
        fetch_add(&r, psn, va, bad_key(&r)),
        // Opcode sequence: a MIDDLE with no FIRST.
        PacketRepr::new(r.bth(0x01, psn), leak(&vec![1; mtu])),
        // Length: a SEND ONLY longer than the MTU.
        send_only(&r, psn, &vec![2; mtu + 4]),
        // Ahead of the window: would make the QP NAK its peer.
        send_only(&r, psn.add(5), b"ahead"),
        // A WRITE with the right key: would land in the region.
        write_only(&r, psn, va, r.key, &[0xee; 16]),
    ];
    let before = r.mem.snapshot();
    for p in &forged {
        r.deliver_from_port(p, from(OTHER_PORT));
    }
    assert!(r.sent().is_empty(), "nothing answers a forged packet");
    assert!(r.recv_cq().is_empty());
    assert_eq!(r.mem.snapshot(), before, "no byte written");
    assert_eq!(r.state(), QpState::Rts);
    let c = counters(&r);
    assert_eq!(c.wrong_peer, forged.len() as u64);
    assert_eq!(c.inv_req_nak_sent + c.rem_access_nak_sent, 0);
    // The peer carries on.
    r.deliver_from_port(&send_only(&r, psn, b"real"), from(PEER_PORT));
    let wc = r.recv_cq();
    assert_eq!((wc.len(), wc[0].byte_len), (1, 4));
    assert_eq!(r.read_mem(0, 4), b"real");
}

/// UC is pinned the same way: after the peer's first packet a forged
/// WRITE from another port lands nowhere, and the peer's next message
/// is delivered.
#[test]
fn uc_is_pinned_too() {
    let mut r = Rig::new(Setup {
        qp_type: QpType::Uc,
        ..Setup::default()
    });
    r.post_recv(1, 0x8000, 4096);
    let psn = r.take_psn(1);
    let mut hello = send_only(&r, psn, b"hello");
    hello.bth.opcode = Opcode(0x24); // UC SEND ONLY
    r.deliver_from_port(&hello, from(PEER_PORT));
    assert_eq!(r.recv_cq().len(), 1);
    assert_eq!(r.dev.peer_port(r.qpn).unwrap(), Some(PEER_PORT));
    let before = r.mem.snapshot();
    let psn = r.peer_psn;
    let mut w = write_only(&r, psn, VA, r.key, &[0xee; 16]);
    w.bth.opcode = Opcode(0x2a); // UC WRITE ONLY
    r.deliver_from_port(&w, from(OTHER_PORT));
    assert_eq!(r.mem.snapshot(), before);
    assert_eq!(counters(&r).wrong_peer, 1);
    let mut w = write_only(&r, psn, VA, r.key, b"peer");
    w.bth.opcode = Opcode(0x2a);
    r.deliver_from_port(&w, from(PEER_PORT));
    assert_eq!(r.read_mem(0, 4), b"peer");
}

/// The port is learned from the first packet the QP expects (a request
/// at the expected PSN), not from packets out of the window; RESET
/// forgets it.
#[test]
fn the_peer_port_is_learned_from_the_first_expected_packet() {
    let mut r = Rig::new(Setup::default());
    r.post_recv(1, 0, 4096);
    let psn = r.peer_psn;
    // Out of the window from one port, a duplicate from another: no pin.
    r.deliver_from_port(&send_only(&r, psn.add(3), b"ahead"), from(1111));
    r.deliver_from_port(&send_only(&r, psn.sub(3), b"old"), from(2222));
    assert_eq!(r.dev.peer_port(r.qpn).unwrap(), None);
    let _ = r.sent();
    // The expected one pins its port.
    r.deliver_from_port(&send_only(&r, psn, b"first"), from(3333));
    assert_eq!(r.dev.peer_port(r.qpn).unwrap(), Some(3333));
    assert_eq!(r.recv_cq().len(), 1);
    r.deliver_from_port(&send_only(&r, psn.add(1), b"x"), from(PEER_PORT));
    assert_eq!(counters(&r).wrong_peer, 1);
    // Back to RESET: a new connection learns again.
    let reset = QpAttr::to(QpState::Reset);
    r.dev
        .modify_qp(r.now, r.qpn, &reset, AttrMask::STATE)
        .unwrap();
    assert_eq!(r.dev.peer_port(r.qpn).unwrap(), None);
}

/// A port given before the first packet (softrdma's own exchange says
/// it) closes the window in which an injector could be first.
#[test]
fn a_given_port_pins_from_the_first_packet() {
    let mut r = Rig::new(Setup::default());
    r.dev.set_peer_port(r.qpn, PEER_PORT).unwrap();
    let psn = r.peer_psn;
    r.deliver_from_port(
        &write_only(&r, psn, VA, bad_key(&r), &[1; 8]),
        from(OTHER_PORT),
    );
    assert!(r.sent().is_empty());
    assert_eq!(r.state(), QpState::Rts);
    assert_eq!(counters(&r).wrong_peer, 1);
    // Without it, the first expected packet wins, whoever sent it: the
    // price of learning (both QPN and PSN are random, 48 bits).
    let mut r = Rig::new(Setup::default());
    let psn = r.peer_psn;
    r.deliver_from_port(
        &write_only(&r, psn, VA, bad_key(&r), &[1; 8]),
        from(OTHER_PORT),
    );
    assert_eq!(r.state(), QpState::Err);
}

/// ACKs and NAKs from another port do not reach the requester once the
/// peer's port is known. Before: an in-window NAK from any port of the
/// peer's address failed the request.
#[test]
fn responses_from_another_port_are_ignored() {
    let mut r = pinned_rig(Setup::default());
    r.post_send(send_wr(1));
    let out = r.sent();
    assert_eq!(out.len(), 1);
    let psn = Psn::new(out[0].psn);
    for syn in [
        Syndrome::Nak(NakCode::RemoteAccessError),
        Syndrome::Nak(NakCode::InvalidRequest),
        Syndrome::Nak(NakCode::PsnSequenceError),
        Syndrome::RnrNak { timer: 31 },
        Syndrome::ACK,
    ] {
        let mut p = PacketRepr::new(r.bth(0x11, psn), &[]);
        p.aeth = Some(AethRepr {
            syndrome: syn,
            msn: Msn::new(1),
        });
        r.deliver_from_port(&p, from(OTHER_PORT));
    }
    assert!(r.send_cq().is_empty());
    assert!(r.sent().is_empty(), "no retransmission either");
    assert_eq!(counters(&r).wrong_peer, 5);
    r.ack(psn, 1);
    let wc = r.send_cq();
    assert_eq!((wc.len(), wc[0].status), (1, WcStatus::Success));
}

// ---------------------------------------------------- order of checks ----

/// The responder's order (IBA 9.7.5.1, rxe_resp.c): PSN, opcode sequence,
/// the QP's access (NAK invalid request), length, and only then the R_Key
/// (NAK remote access error). The peer's bad requests are NAKed at once.
#[test]
fn checks_in_iba_order_and_naks_at_once() {
    // Access before R_Key: a WRITE to a QP without remote write and with
    // a bad key is an invalid request.
    let mut r = pinned_rig(Setup {
        access: Access::LOCAL_WRITE.with(Access::REMOTE_READ),
        ..Setup::default()
    });
    let psn = r.take_psn(1);
    r.deliver(&write_only(&r, psn, VA, bad_key(&r), &[1; 8]));
    let out = r.sent();
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].psn, psn.value());
    assert_eq!(
        out[0].aeth.unwrap().0,
        Syndrome::Nak(NakCode::InvalidRequest)
    );
    assert_eq!(r.state(), QpState::Err);

    // Length before R_Key: a WRITE ONLY whose payload is not its length.
    let mut r = pinned_rig(Setup::default());
    let psn = r.take_psn(1);
    let mut p = write_only(&r, psn, VA, bad_key(&r), &[1; 8]);
    p.reth.as_mut().unwrap().dma_len = 100;
    r.deliver(&p);
    let out = r.sent();
    assert_eq!(
        out[0].aeth.unwrap().0,
        Syndrome::Nak(NakCode::InvalidRequest)
    );

    // Opcode sequence before R_Key: a WRITE LAST with no FIRST.
    let mut r = pinned_rig(Setup::default());
    let psn = r.take_psn(1);
    r.deliver(&PacketRepr::new(r.bth(0x08, psn), leak(&[1; 8])));
    let out = r.sent();
    assert_eq!(
        out[0].aeth.unwrap().0,
        Syndrome::Nak(NakCode::InvalidRequest)
    );

    // PSN before everything: a bad request ahead of the window is a
    // sequence error, behind it a duplicate; the QP lives.
    let mut r = pinned_rig(Setup::default());
    let psn = r.peer_psn;
    r.deliver(&write_only(&r, psn.add(2), VA, bad_key(&r), &[1; 8]));
    r.deliver(&write_only(&r, psn.sub(1), VA, bad_key(&r), &[1; 8]));
    let out = r.sent();
    assert_eq!(
        out[0].aeth.unwrap().0,
        Syndrome::Nak(NakCode::PsnSequenceError)
    );
    assert_eq!(r.state(), QpState::Rts);

    // Finally the R_Key: remote access error.
    r.deliver(&write_only(&r, psn, VA, bad_key(&r), &[1; 8]));
    let out = r.sent();
    assert_eq!(
        out.last().unwrap().aeth.unwrap().0,
        Syndrome::Nak(NakCode::RemoteAccessError)
    );
    assert_eq!(r.state(), QpState::Err);
}

// ------------------------------------------------------- PSN sweeps ----

/// ReDMArk sweeps the PSN space (2^24 packets in 10.6 s on a NIC) to hit
/// the window with one deadly packet. From another port, every PSN is
/// dropped at the address check and counted; the QP never notices.
/// Before: the packet at the expected PSN killed the QP.
#[test]
fn a_psn_sweep_from_another_port_is_counted_and_harmless() {
    let mut r = pinned_rig(Setup::default());
    let key = bad_key(&r);
    let epsn = r.peer_psn;
    // Every PSN of the 24-bit space, starting half a space before the
    // expected one (about 8 s: the packets are built, ICRC and all).
    let n: u32 = 1 << 24;
    let start = epsn.sub(n / 2);
    let mut p = write_only(&r, start, VA, key, &[0xee; 8]);
    for i in 0..n {
        p.bth.psn = start.add(i);
        r.deliver_from_port(&p, from(OTHER_PORT));
    }
    assert_eq!(counters(&r).wrong_peer, n as u64);
    assert!(r.sent().is_empty());
    assert_eq!(r.state(), QpState::Rts);
}

// ----------------------------------------------------- R_Key sweeps ----

/// An attacker with a legitimate connection of its own sweeps R_Keys
/// over it: the first wrong key is a remote access error and its own QP
/// dies; nothing answers its later tries (no oracle), and the other
/// connections of the device carry on.
#[test]
fn an_rkey_sweep_kills_only_the_attackers_qp() {
    let mut r = pinned_rig(Setup::default());
    // The attacker: a second QP of the device, connected to 10.0.0.3.
    let attacker_ip = ip("10.0.0.3");
    let (aq, _) = r.dev.create_qp(&small_rc(r.pd, r.scq, r.rcq)).unwrap();
    let all = Access::REMOTE_WRITE
        .with(Access::REMOTE_READ)
        .with(Access::REMOTE_ATOMIC);
    for (st, attr) in [
        (
            QpState::Init,
            QpAttr {
                qp_state: QpState::Init,
                qp_access_flags: all,
                ..Default::default()
            },
        ),
        (
            QpState::Rtr,
            QpAttr {
                qp_state: QpState::Rtr,
                path_mtu: Mtu::M1024,
                dest_qp_num: Qpn::new(0x77),
                rq_psn: Psn::new(0x1000),
                max_dest_rd_atomic: 4,
                ah_attr: AddressVector::to(attacker_ip),
                ..Default::default()
            },
        ),
    ] {
        let from_state = if st == QpState::Init {
            QpState::Reset
        } else {
            QpState::Init
        };
        let m = AttrMask::required(QpType::Rc, from_state, st).unwrap();
        r.dev.modify_qp(r.now, aq, &attr, m).unwrap();
    }
    let before = r.mem.snapshot();
    let mut rng = Rng::new(5);
    let mut answers = 0;
    for i in 0..10_000u32 {
        let mut key = rng.next_u32();
        if key == r.key {
            key ^= 1;
        }
        let mut p = write_only(&r, Psn::new(0x1000 + i), VA, key, &[0xee; 8]);
        p.bth.dest_qp = aq;
        r.deliver_from_port(&p, SocketAddr::new(attacker_ip, 4791));
        let mut buf = vec![0u8; 8192];
        while let Some(tx) = r.dev.poll_transmit(r.now, &mut buf) {
            assert_eq!(tx.dst.ip(), attacker_ip);
            answers += 1;
        }
    }
    assert_eq!(answers, 1, "one NAK (remote access error), then silence");
    assert_eq!(r.dev.qp_state(aq), Ok(QpState::Err));
    assert_eq!(r.mem.snapshot(), before);
    // The victim's connection is untouched.
    assert_eq!(r.state(), QpState::Rts);
    let psn = r.take_psn(1);
    r.deliver(&write_only(&r, psn, VA + 64, r.key, b"victim"));
    assert_eq!(r.read_mem(64, 6), b"victim");
}

// ----------------------------------------------- ACK and NAK forgery ----

/// An ACK for a PSN the device never sent is ignored: it must not
/// complete requests (their packets may never have reached the peer).
/// Before: it completed every fully sent SEND/WRITE before it, as rxe's
/// check_psn does.
#[test]
fn acks_beyond_the_last_psn_sent_are_ignored() {
    let mut r = pinned_rig(Setup::default());
    r.post_send(send_wr(1));
    r.post_send(send_wr(2));
    let out = r.sent();
    assert_eq!(out.len(), 2);
    let last = Psn::new(out[1].psn);
    for ahead in [1, 2, 1000, 0x7f_ffff] {
        r.ack(last.add(ahead), 2);
    }
    assert!(r.send_cq().is_empty(), "nothing completed");
    assert_eq!(counters(&r).stale_responses, 4);
    r.ack(last, 2);
    assert_eq!(r.send_cq().len(), 2);
}

/// NAKs make the requester go back, but only so often: a stream of
/// sequence NAKs costs at most `retry_cnt` + 1 retransmissions of the
/// request before it fails, whatever their number.
#[test]
fn forged_sequence_naks_cause_bounded_retries() {
    let mut r = pinned_rig(Setup {
        retry_cnt: 3,
        ..Setup::default()
    });
    r.post_send(send_wr(1));
    let psn = Psn::new(r.sent()[0].psn);
    let mut resent = 0;
    for _ in 0..100 {
        r.nak(psn, Syndrome::Nak(NakCode::PsnSequenceError));
        resent += r.sent().len();
        r.advance(1_000_000_000);
        resent += r.sent().len();
    }
    assert!(resent <= 4, "{resent} retransmissions");
    let wc = r.send_cq();
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].status, WcStatus::RetryExcErr);
}

// ------------------------------------------------------------ floods ----

/// A READ beyond the negotiated `max_dest_rd_atomic` (responses of that
/// many still waiting) is an invalid request, as rxe's
/// RESPST_ERR_TOO_MANY_RDMA_ATM_REQ: the responder's READ work per QP is
/// bounded by what was negotiated. Before: every READ was queued.
#[test]
fn reads_beyond_max_dest_rd_atomic_are_invalid_requests() {
    let mut r = pinned_rig(Setup {
        max_rd_atomic: 4,
        ..Setup::default()
    });
    // A requester that keeps to the limit is served.
    for _ in 0..3 {
        for _ in 0..4 {
            let psn = r.take_psn(16);
            r.deliver(&read_req(&r, psn, VA, r.key, 16 * 1024));
        }
        assert_eq!(r.sent().len(), 4 * 16);
    }
    // One more than negotiated while four wait.
    for _ in 0..4 {
        let psn = r.take_psn(16);
        r.deliver(&read_req(&r, psn, VA, r.key, 16 * 1024));
    }
    let psn = r.take_psn(1);
    r.deliver(&fetch_add(&r, psn, VA, r.key));
    let out = r.sent();
    let nak = out.iter().find(|o| o.opcode == 0x11).expect("a NAK");
    assert_eq!(nak.psn, psn.value());
    assert_eq!(nak.aeth.unwrap().0, Syndrome::Nak(NakCode::InvalidRequest));
    assert_eq!(r.state(), QpState::Err);
    let c = counters(&r);
    assert_eq!((c.too_many_rd_atomic, c.inv_req_nak_sent), (1, 1));

    // max_dest_rd_atomic 0: no READ at all (rxe's check_resource).
    let mut r = pinned_rig(Setup {
        max_rd_atomic: 0,
        ..Setup::default()
    });
    let psn = r.take_psn(1);
    r.deliver(&read_req(&r, psn, VA, r.key, 8));
    assert_eq!(
        r.sent()[0].aeth.unwrap().0,
        Syndrome::Nak(NakCode::InvalidRequest)
    );
}

/// A peer that floods without taking its answers — repeated atomics,
/// SENDs with no receive posted, duplicates — fills the responder's queue
/// up to a bound, and no further. Before: one queued answer per packet.
#[test]
fn the_responders_queue_stays_bounded_under_a_flood() {
    let mut r = pinned_rig(Setup::default());
    // An atomic, then 10,000 duplicates of it.
    let psn = r.take_psn(1);
    let fa = fetch_add(&r, psn, VA, r.key);
    for _ in 0..10_001 {
        r.deliver(&fa);
    }
    // SENDs with no receive: an RNR NAK each.
    let psn = r.take_psn(1);
    let s = send_only(&r, psn, b"x");
    for _ in 0..10_000 {
        r.deliver(&s);
    }
    let out = r.sent();
    assert!(out.len() <= limits::MAX_RESP_QUEUE, "{} answers", out.len());
    assert_eq!(out[0].atomic_ack, Some(0), "the atomic ran once");
    assert_eq!(r.read_mem(0, 8), 1u64.to_ne_bytes());
    let c = counters(&r);
    assert!(c.resp_dropped >= 20_000 - limits::MAX_RESP_QUEUE as u64);
    assert_eq!(r.state(), QpState::Rts);
}
