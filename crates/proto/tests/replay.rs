//! Replays of real Linux rxe traffic (`tests/data/*.pcap`, see its README):
//! the requester side of a capture is fed into a [`Device`] standing in for
//! the responder, and the core must answer exactly as rxe did.
//!
//! Method, for a capture and a direction A → B (A the requester):
//! - a device at B's address; one QP per captured request destination QPN,
//!   created with that number ([`Device::create_qp_with_qpn`]) and connected
//!   to the requester's QPN (the destination QP of B's responses);
//! - path MTU from the capture (the payload of FIRST/MIDDLE packets), the
//!   expected PSN from the first request (or from rxe's first PSN sequence
//!   NAK when that request was lost before the capture point), the RNR timer
//!   from rxe's RNR NAKs;
//! - memory regions under the captured R_Keys ([`Device::reg_mr_with_key`])
//!   covering every access rxe accepted, pre-filled with the bytes rxe's READ
//!   responses returned and, at atomic targets, with the original value of
//!   the first atomic ACK;
//! - a receive posted before each request that needs one, unless rxe's
//!   answer to it was an RNR NAK;
//! - every request datagram fed as captured (rxe's ICRC, rxe's UDP source
//!   port, the captured TOS/TTL) at its capture timestamp as virtual time;
//!   whatever the core sends after each is collected.
//!
//! Checks: per QP, the transport bytes (BTH through pad) of the core's
//! responses equal rxe's — syndromes, PSNs, MSNs, READ segmentation and
//! payload. The ICRC differs (other UDP source port and IP identification),
//! so each packet the core sends is checked to carry a valid ICRC for its own
//! headers. rxe's IPv4 identification is not 0, which a UDP socket receiver
//! cannot see: the core solves for it, and the counter
//! `icrc_ip_id_inferred` must count every IPv4 request. Receive completions
//! (length, immediate, invalidated key, the bytes) and the final contents of
//! every region (WRITEs and atomics applied in PSN order) are checked too.
//!
//! Captures with loss (`*_loss`): the capture point is the responder's tap,
//! so requests the requester's netem dropped never appear and responses the
//! responder's netem dropped never appear either. rxe saw exactly the
//! captured requests, so every captured response must appear in the core's
//! output, in order; the core may send more (the ones lost at rxe's egress),
//! a bounded number.
//!
//! UC and UD captures have no responses: the checks are the receive
//! completions, byte counts, immediate data and the UD GRH area.
//!
//! Not replayed: `rping_rdmacm` and `v6_rping_rdmacm`. Their connections are
//! set up by CM MADs on QP1 (UD SEND_ONLY, Q_Key 0x80010000), which the core
//! does not implement; without the CM exchange the RC part has no QP to land
//! on that behaves like rdma_cm's.
//!
//! Differences from rxe, where the core deliberately follows the IBA
//! (each is asserted where a capture shows it):
//! - receive completion of a SEND longer than the receive buffer
//!   (`nak_inv_req_op_err`): both answer NAK remote operational error (rxe's
//!   choice, which the core copies for wire compatibility), but rxe completes
//!   the receive with IBV_WC_LOC_QP_OP_ERR and the core with
//!   IBV_WC_LOC_LEN_ERR, the status the verbs specification names for a
//!   message longer than the receive buffer;
//! - receive completion of SEND with invalidate (`send_inv_mw`): rxe 6.1
//!   flags the invalidated R_Key with wc_flags bit 2 (libibverbs'
//!   IBV_WC_IP_CSUM_OK); the core sets IBV_WC_WITH_INV (bit 3);
//! - UD GRH area over IPv4: rxe copies the IPv4 header as received; the core
//!   reconstructs it from what a UDP socket reports, so the identification is
//!   0 (rxe: the sender's counter) and the header checksum is computed for
//!   that; every other byte is equal;
//! - acknowledgement coalescing: rxe answers every request that asks for an
//!   ACK, and every duplicate, with its own ACK; the core queues its answers
//!   and merges consecutive plain ACKs still queued (IBA 9.7.5.1.1 lets an
//!   ACK stand for all earlier requests). Polled after every datagram it
//!   sends exactly rxe's ACKs; an engine that handles a batch of datagrams
//!   before polling sends fewer — each replay without loss runs both ways
//!   (the batched run checks that only plain ACKs covered by a later one go
//!   missing);
//! - retry_cnt 7 means 7 retries in the core (IBA 9.7.6.1.1), forever in rxe
//!   (rxe_comp.c); no capture shows a requester give up, so no replay here
//!   depends on it (the requester tests cover the IBA behaviour).

#[path = "support/pcap.rs"]
mod pcap;

use pcap::{roce_frames, Frame};
use softrdma_proto::*;
use softrdma_wire::ip::{DatagramRepr, IpRepr};
use softrdma_wire::{
    IbPacket, NakCode, OpcodeInfo, Operation, PacketRepr, Position, Psn, Syndrome, Transport,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// The capture rig's addresses: guest b (the client) and guest a (the server).
const CLIENT4: &str = "198.18.0.2";
const SERVER4: &str = "198.18.0.1";
const CLIENT6: &str = "2001:db8::2";
const SERVER6: &str = "2001:db8::1";

/// UDP source port of the device under test (any; covered by its ICRC).
const DEV_PORT: u16 = 49999;
/// Where the receive buffers live.
const RECV_VA: u64 = 0x1000_0000;
/// Bytes per receive buffer (the largest message in the captures is 8 KiB;
/// a UD buffer holds the 40-byte GRH area and a 4 KiB payload).
const RECV_SLOT: u32 = 16 * 1024;
/// Every right a remotely accessed region can have.
const ALL_REMOTE: Access = Access(
    Access::LOCAL_WRITE.0
        | Access::REMOTE_WRITE.0
        | Access::REMOTE_READ.0
        | Access::REMOTE_ATOMIC.0,
);

/// A region the successful accesses do not reveal.
#[derive(Clone, Copy)]
struct ExtraMr {
    key: u32,
    /// The region starts `offset` bytes from the first VA a request with
    /// `anchor_key` names.
    anchor_key: u32,
    offset: i64,
    len: usize,
}

/// What a replay needs beyond the capture.
#[derive(Clone, Copy)]
struct Case {
    file: &'static str,
    /// The requester's address.
    requester: &'static str,
    /// QPs opened without remote atomic access.
    no_atomic: &'static [u32],
    /// Receive buffer length per QP (default `RECV_SLOT`).
    recv_len: &'static [(u32, u32)],
    /// Regions no successful access reveals.
    extra_mrs: &'static [ExtraMr],
    /// Responses the core may send beyond rxe's (loss captures).
    max_extra: usize,
    /// Feed every request before polling what the core sends.
    batched: bool,
}

impl Case {
    const fn new(file: &'static str) -> Case {
        Case {
            file,
            requester: CLIENT4,
            no_atomic: &[],
            recv_len: &[],
            extra_mrs: &[],
            max_extra: 0,
            batched: false,
        }
    }
    const fn from(mut self, requester: &'static str) -> Case {
        self.requester = requester;
        self
    }
}

/// A captured request or response with its parsed headers.
struct Pkt<'a> {
    f: &'a Frame,
    r: PacketRepr<'a>,
    info: &'static OpcodeInfo,
}

impl<'a> Pkt<'a> {
    fn new(f: &'a Frame) -> Pkt<'a> {
        let ib = IbPacket::new_checked(&f.payload[..]).expect("captured packet");
        let r = PacketRepr::parse(&ib).expect("captured packet parses");
        Pkt {
            f,
            r,
            info: ib.info(),
        }
    }
    fn psn(&self) -> Psn {
        self.r.bth.psn
    }
    fn dqp(&self) -> u32 {
        self.r.bth.dest_qp.value()
    }
    /// Transport bytes the comparison covers: BTH through pad.
    fn transport(&self) -> &'a [u8] {
        &self.f.payload[..self.f.payload.len() - 4]
    }
    /// A request that consumes a receive WQE (IBA 9.7.5.1.4; rxe's RWR mask).
    fn needs_wqe(&self) -> bool {
        match self.info.transport {
            Transport::Ud => true,
            _ => match self.info.operation {
                Operation::Send => self.info.position.starts(),
                Operation::RdmaWrite => self.info.immediate(),
                _ => false,
            },
        }
    }
}

/// One line per packet for failure messages.
fn line(transport: &[u8]) -> String {
    // Re-append a dummy ICRC so the view accepts the bytes.
    let mut b = transport.to_vec();
    b.extend_from_slice(&[0; 4]);
    let mut s = String::new();
    match IbPacket::new_checked(&b[..]) {
        Ok(p) => {
            let _ = softrdma_wire::pretty::write_packet(&mut s, &p);
        }
        Err(e) => s = format!("unparsable: {e}"),
    }
    s
}

/// What a replay produced, for checks specific to a capture.
struct Outcome {
    dev: Device,
    /// Per responder QPN: its receive completions, in order.
    recv_wcs: BTreeMap<u32, Vec<Wc>>,
    /// Responses the core sent beyond rxe's, per QP.
    extra: BTreeMap<u32, usize>,
    /// Responses compared, over all QPs.
    compared: usize,
    /// Region bytes compared with the captured WRITEs and atomics.
    bytes_checked: usize,
    /// Asynchronous events.
    events: Vec<Event>,
}

/// Everything the device sends now, checked (destination, ICRC for its own
/// headers) and filed by responder QP with the index of the frame after
/// which it went out.
fn drain(
    dev: &mut Device,
    now: Instant,
    buf: &mut [u8],
    (a_ip, b_ip): (IpAddr, IpAddr),
    b_of: &BTreeMap<u32, u32>,
    (file, index): (&str, usize),
    sent: &mut BTreeMap<u32, Vec<(usize, Vec<u8>)>>,
) {
    while let Some(tx) = dev.poll_transmit(now, buf) {
        let bytes = &buf[..tx.len];
        let ctx = format!("{file}: reply to frame {}", index + 1);
        assert_eq!(tx.dst, SocketAddr::new(a_ip, 4791), "{ctx}");
        let pkt = IbPacket::new_checked(bytes).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let d = DatagramRepr::new(
            IpRepr::between(b_ip, a_ip, tx.traffic_class).unwrap(),
            DEV_PORT,
            tx.dst.port(),
        );
        assert_eq!(d.icrc(pkt.icrc_covered()), pkt.icrc(), "{ctx}: ICRC");
        let a = pkt.bth().dest_qp().value();
        let b = *b_of
            .get(&a)
            .unwrap_or_else(|| panic!("{ctx}: response to QP {a:#x}"));
        sent.entry(b)
            .or_default()
            .push((index, pkt.icrc_covered().to_vec()));
    }
}

/// A receive the capture says must complete.
struct ExpRecv<'a> {
    opcode: WcOpcode,
    byte_len: u32,
    /// Payload (SEND, UD: after the GRH area).
    data: Option<Vec<u8>>,
    imm: Option<u32>,
    inv: Option<u32>,
    /// UD: DETH source QP.
    src_qp: Option<u32>,
    /// UD: the frame, for the GRH area.
    frame: Option<&'a Frame>,
    /// The solicited event bit of the last packet.
    se: bool,
}

fn poll(dev: &mut Device, cq: CqId) -> Vec<Wc> {
    let mut out = Vec::new();
    let mut b = [Wc::EMPTY; 16];
    loop {
        let n = dev.poll_cq(cq, &mut b).unwrap();
        out.extend_from_slice(&b[..n]);
        if n < b.len() {
            return out;
        }
    }
}

/// Replays and checks that something was compared; for captures without
/// loss, replays a second time feeding every request before polling.
fn replay(case: Case) -> Outcome {
    if case.max_extra == 0 {
        run(Case {
            batched: true,
            ..case
        });
    }
    let o = run(case);
    let recvs: usize = o.recv_wcs.values().map(Vec::len).sum();
    assert!(
        o.compared > 0 || recvs > 0 || o.bytes_checked > 0,
        "{}: nothing compared",
        case.file
    );
    o
}

// ------------------------------------------------------------ RC, simple ----

#[test]
fn rc_pingpong_64() {
    let o = replay(Case::new("rc_pingpong_64.pcap"));
    assert_eq!(o.compared, 5);
    replay(Case::new("rc_pingpong_64.pcap").from(SERVER4));
}

#[test]
fn rc_pingpong_8k() {
    let o = replay(Case::new("rc_pingpong_8k.pcap"));
    assert_eq!(o.compared, 3);
    replay(Case::new("rc_pingpong_8k.pcap").from(SERVER4));
}

#[test]
fn write_bw_64() {
    assert_eq!(replay(Case::new("write_bw_64.pcap")).compared, 100);
}

#[test]
fn write_bw_8k() {
    assert_eq!(replay(Case::new("write_bw_8k.pcap")).compared, 50);
}

#[test]
fn write_bw_1027_padcnt() {
    assert_eq!(replay(Case::new("write_bw_1027.pcap")).compared, 20);
}

#[test]
fn write_lat_64() {
    replay(Case::new("write_lat_64.pcap"));
    replay(Case::new("write_lat_64.pcap").from(SERVER4));
}

#[test]
fn read_bw_64() {
    assert_eq!(replay(Case::new("read_bw_64.pcap")).compared, 100);
}

#[test]
fn read_bw_8k() {
    assert_eq!(replay(Case::new("read_bw_8k.pcap")).compared, 400);
}

#[test]
fn read_lat_64() {
    assert_eq!(replay(Case::new("read_lat_64.pcap")).compared, 100);
}

#[test]
fn send_bw_64() {
    assert_eq!(replay(Case::new("send_bw_64.pcap")).compared, 100);
}

#[test]
fn send_bw_8k() {
    replay(Case::new("send_bw_8k.pcap"));
}

#[test]
fn send_bw_13_padcnt() {
    assert_eq!(replay(Case::new("send_bw_13.pcap")).compared, 20);
}

#[test]
fn send_lat_64() {
    replay(Case::new("send_lat_64.pcap"));
    replay(Case::new("send_lat_64.pcap").from(SERVER4));
}

#[test]
fn atomic_bw_fadd() {
    assert_eq!(replay(Case::new("atomic_bw_fadd.pcap")).compared, 100);
}

#[test]
fn atomic_lat_fadd() {
    assert_eq!(replay(Case::new("atomic_lat_fadd.pcap")).compared, 100);
}

#[test]
fn mtu4k_write_bw_16k() {
    assert_eq!(replay(Case::new("mtu4k_write_bw_16k.pcap")).compared, 20);
}

#[test]
fn mtu4k_read_bw_16k() {
    assert_eq!(replay(Case::new("mtu4k_read_bw_16k.pcap")).compared, 80);
}

#[test]
fn mtu4k_v6_write_bw_16k() {
    assert_eq!(
        replay(Case::new("mtu4k_v6_write_bw_16k.pcap").from(CLIENT6)).compared,
        10
    );
}

#[test]
fn v6_rc_pingpong_64() {
    replay(Case::new("v6_rc_pingpong_64.pcap").from(CLIENT6));
    replay(Case::new("v6_rc_pingpong_64.pcap").from(SERVER6));
}

#[test]
fn v6_rc_pingpong_8k() {
    replay(Case::new("v6_rc_pingpong_8k.pcap").from(CLIENT6));
    replay(Case::new("v6_rc_pingpong_8k.pcap").from(SERVER6));
}

#[test]
fn v6_write_bw_64() {
    assert_eq!(
        replay(Case::new("v6_write_bw_64.pcap").from(CLIENT6)).compared,
        100
    );
}

#[test]
fn v6_write_bw_8k() {
    assert_eq!(
        replay(Case::new("v6_write_bw_8k.pcap").from(CLIENT6)).compared,
        20
    );
}

#[test]
fn v6_read_bw_64() {
    assert_eq!(
        replay(Case::new("v6_read_bw_64.pcap").from(CLIENT6)).compared,
        100
    );
}

#[test]
fn v6_write_bw_1027_tc() {
    assert_eq!(
        replay(Case::new("v6_write_bw_1027_tc.pcap").from(CLIENT6)).compared,
        20
    );
}

#[test]
fn write_imm() {
    // 64 B, 3000 B in three packets, 0 B: one receive each (byte_len = the
    // write's length, immediate data), ACKs with MSN 1, 2, 3.
    let o = replay(Case::new("write_imm.pcap"));
    assert_eq!(o.compared, 3);
    let wcs = &o.recv_wcs[&0x1d];
    let lens: Vec<(u32, u32)> = wcs.iter().map(|w| (w.byte_len, w.imm_or_inv)).collect();
    assert_eq!(
        lens,
        [(64, 0x1122_3344), (3000, 0x5566_7788), (0, 0x99aa_bbcc)]
    );
    assert!(wcs.iter().all(|w| w.opcode == WcOpcode::RecvRdmaWithImm));
}

#[test]
fn send_imm() {
    let o = replay(Case::new("send_imm.pcap"));
    let wcs = &o.recv_wcs[&0x1e];
    let lens: Vec<(u32, u32)> = wcs.iter().map(|w| (w.byte_len, w.imm_or_inv)).collect();
    assert_eq!(lens, [(64, 0xcafe_0001), (3000, 0xcafe_0002)]);
}

#[test]
fn send_inv_mw() {
    // The two type 2 windows are regions here (the core has no windows on
    // the wire side: an R_Key is an R_Key). WRITE through 0x08000198: ACK;
    // SEND with invalidate of each: ACKs, receive completions with the key;
    // WRITE through the invalidated 0x08000198: NAK remote access error.
    let o = replay(Case {
        extra_mrs: &[ExtraMr {
            key: 0x0800_0233,
            anchor_key: 0x0800_0198,
            offset: 4096,
            len: 4096,
        }],
        ..Case::new("send_inv_mw.pcap")
    });
    let wcs = &o.recv_wcs[&0x1f];
    let inv: Vec<(u32, u32)> = wcs.iter().map(|w| (w.byte_len, w.imm_or_inv)).collect();
    assert_eq!(inv, [(64, 0x0800_0198), (3000, 0x0800_0233)]);
    // rxe flags these with wc_flags bit 2; the core with IBV_WC_WITH_INV.
    assert!(wcs.iter().all(|w| w.wc_flags.contains(WcFlags::WITH_INV)));
    for key in [0x0800_0198, 0x0800_0233] {
        assert!(!o.dev.mr(key).unwrap().valid, "{key:#x} invalidated");
    }
    let q = softrdma_wire::Qpn::new(0x1f);
    assert_eq!(o.dev.qp_state(q), Ok(QpState::Err));
    assert!(o.events.contains(&Event::Async(AsyncEvent::QpAccessErr(q))));
}

#[test]
fn rnr_nak() {
    // min_rnr_timer 1 (from rxe's AETH 0x21); the receive is posted only
    // before the 15th copy, the one rxe ACKed.
    let o = replay(Case::new("rnr_nak.pcap"));
    let c = o.dev.counters();
    assert_eq!((c.rnr_nak_sent, c.acks_sent), (14, 1));
    assert_eq!(o.recv_wcs[&0x20].len(), 1);
}

#[test]
fn nak_rem_access() {
    // The MR is 64 KiB; the second QP's WRITE starts 65504 bytes into it.
    let o = replay(Case {
        extra_mrs: &[ExtraMr {
            key: 0x1439,
            anchor_key: 0x1439,
            offset: -65504,
            len: 65536,
        }],
        ..Case::new("nak_rem_access.pcap")
    });
    // Wrong key on the first QP, 32 bytes past the end on the second: both
    // NAKed (0x62), both QPs in the error state, the region untouched (the
    // region check compares it with the pre-fill).
    for q in [0x21, 0x22] {
        let q = softrdma_wire::Qpn::new(q);
        assert_eq!(o.dev.qp_state(q), Ok(QpState::Err));
        assert!(o.events.contains(&Event::Async(AsyncEvent::QpAccessErr(q))));
    }
    assert_eq!(o.dev.counters().rem_access_nak_sent, 2);
}

#[test]
fn nak_inv_req_op_err() {
    let o = replay(Case {
        no_atomic: &[0x23],
        recv_len: &[(0x24, 64)],
        ..Case::new("nak_inv_req_op_err.pcap")
    });
    let (q23, q24) = (softrdma_wire::Qpn::new(0x23), softrdma_wire::Qpn::new(0x24));
    assert_eq!(o.dev.qp_state(q23), Ok(QpState::Err));
    assert_eq!(o.dev.qp_state(q24), Ok(QpState::Err));
    assert!(o.events.contains(&Event::Async(AsyncEvent::QpReqErr(q23))));
    assert!(o.events.contains(&Event::Async(AsyncEvent::QpFatal(q24))));
    // The 128-byte SEND into the 64-byte receive: rxe completes the receive
    // with IBV_WC_LOC_QP_OP_ERR, the core with IBV_WC_LOC_LEN_ERR (the
    // status the verbs define for a message longer than the buffer).
    let wcs = &o.recv_wcs[&0x24];
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, WcStatus::LocLenErr);
}

#[test]
fn write_bw_q4_64() {
    assert_eq!(replay(Case::new("write_bw_q4_64.pcap")).compared, 400);
}

// 3% netem loss at each guest's egress; rxe sent about 70 responses, so a
// handful were lost before the capture point (1 and 3 in these files).

#[test]
fn write_bw_8k_loss() {
    let o = replay(Case {
        max_extra: 6,
        ..Case::new("write_bw_8k_loss.pcap")
    });
    assert_eq!(o.compared, 69);
    assert_eq!(o.extra[&0x28], 3, "ACKs rxe lost at its egress");
    assert!(o.dev.counters().seq_nak_sent >= 14);
}

#[test]
fn send_bw_8k_loss() {
    let o = replay(Case {
        max_extra: 6,
        ..Case::new("send_bw_8k_loss.pcap")
    });
    assert_eq!(o.compared, 64);
    // Among them the ACK of the first message (MSN 1): rxe's first captured
    // ACK has MSN 2.
    assert_eq!(o.extra[&0x2a], 1, "ACKs rxe lost at its egress");
    assert!(o.dev.counters().seq_nak_sent >= 15);
}

/// Every capture in tests/data is replayed above, or skipped for a reason.
#[test]
fn every_capture_is_covered() {
    let src = include_str!("replay.rs");
    let mut missing = Vec::new();
    for e in std::fs::read_dir(pcap::data_dir()).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if !name.ends_with(".pcap") {
            continue;
        }
        let replayed = src.contains(&format!("Case::new(\"{name}\")"));
        let skipped = name.ends_with("rping_rdmacm.pcap");
        if !replayed && !skipped {
            missing.push(name);
        }
    }
    assert!(missing.is_empty(), "not replayed: {missing:?}");
}

// ------------------------------------------------------------ UC and UD ----

#[test]
fn uc_pingpong_64() {
    replay(Case::new("uc_pingpong_64.pcap"));
    replay(Case::new("uc_pingpong_64.pcap").from(SERVER4));
}

#[test]
fn uc_write_bw_64() {
    replay(Case::new("uc_write_bw_64.pcap"));
}

#[test]
fn ud_pingpong_64() {
    replay(Case::new("ud_pingpong_64.pcap"));
    replay(Case::new("ud_pingpong_64.pcap").from(SERVER4));
}

#[test]
fn ud_send_bw_64() {
    replay(Case::new("ud_send_bw_64.pcap"));
}

#[test]
fn ud_send_bw_1k() {
    replay(Case::new("ud_send_bw_1k.pcap"));
}

#[test]
fn ud_send_imm() {
    replay(Case::new("ud_send_imm.pcap"));
}

#[test]
fn v6_ud_pingpong_64() {
    replay(Case::new("v6_ud_pingpong_64.pcap").from(CLIENT6));
    replay(Case::new("v6_ud_pingpong_64.pcap").from(SERVER6));
}

#[test]
fn v6_ud_send_imm() {
    replay(Case::new("v6_ud_send_imm.pcap").from(CLIENT6));
}

#[path = "replay/rig.rs"]
mod rig;
use rig::run;
