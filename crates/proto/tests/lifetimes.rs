//! Buffer lifetimes, rule by rule: a send completion hands the buffer back
//! only once nothing reads it any more, and nothing touches a region after
//! it is deregistered — not a retransmission, not a READ response under
//! way, not a WRITE landing, not a duplicate READ.

mod support;

use softrdma_proto::*;
use softrdma_wire::*;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use support::*;

/// Where the tracked region is registered.
const TVA: u64 = 0x80_0000;
const TLEN: usize = 16 * 1024;

/// Region memory that counts every access, and lends an address (never
/// dereferenced by the core) so that zero-copy transmission applies.
struct Tracked {
    bytes: VecMemory,
    reads: AtomicUsize,
    writes: AtomicUsize,
    lend: bool,
}

impl Tracked {
    fn new(lend: bool) -> Arc<Tracked> {
        let t = Arc::new(Tracked {
            bytes: VecMemory::new(TLEN),
            reads: AtomicUsize::new(0),
            writes: AtomicUsize::new(0),
            lend,
        });
        t.bytes.fill_from(0, &pattern(3, TLEN));
        t
    }
    fn accesses(&self) -> usize {
        self.reads.load(Ordering::SeqCst) + self.writes.load(Ordering::SeqCst)
    }
}

impl RegionMemory for Tracked {
    fn len(&self) -> usize {
        TLEN
    }
    fn read(&self, offset: usize, dst: &mut [u8]) -> std::result::Result<(), Fault> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.bytes.read(offset, dst)
    }
    fn write(&self, offset: usize, src: &[u8]) -> std::result::Result<(), Fault> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.bytes.write(offset, src)
    }
    fn fetch_add(&self, offset: usize, add: u64) -> std::result::Result<u64, Fault> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.bytes.fetch_add(offset, add)
    }
    fn compare_swap(
        &self,
        offset: usize,
        compare: u64,
        swap: u64,
    ) -> std::result::Result<u64, Fault> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.bytes.compare_swap(offset, compare, swap)
    }
    fn atomic_write(&self, offset: usize, bytes: [u8; 8]) -> std::result::Result<(), Fault> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.bytes.atomic_write(offset, bytes)
    }
    fn address(&self) -> Option<NonNull<u8>> {
        self.lend.then(NonNull::dangling)
    }
}

fn all_access() -> Access {
    Access::LOCAL_WRITE
        .with(Access::REMOTE_WRITE)
        .with(Access::REMOTE_READ)
        .with(Access::REMOTE_ATOMIC)
}

/// A rig with a tracked region next to the usual one.
fn rig(s: Setup, lend: bool) -> (Rig, Arc<Tracked>, u32) {
    let mut r = Rig::new(s);
    let t = Tracked::new(lend);
    let key = r.dev.reg_mr(r.pd, TVA, t.clone(), all_access()).unwrap();
    (r, t, key)
}

fn send_from(key: u32, id: u64, op: WrOpcode, len: u32) -> SendWr {
    let mut wr = SendWr::new(id, op);
    wr.sg_list = vec![Sge::new(TVA, len, key)];
    wr.remote_addr = 0x5000;
    wr.rkey = RKey(0x4242);
    wr
}

/// The transport timer of `timeout`, in ns.
fn timer(t: u8) -> u64 {
    4096 << t
}

#[test]
fn retransmission_never_reads_a_deregistered_send_buffer() {
    let (mut r, t, key) = rig(Setup::default(), false);
    r.post_send(send_from(key, 1, WrOpcode::Send, 4000));
    assert_eq!(r.sent().len(), 4);
    // No ACK; the program deregisters the buffer of its pending request.
    r.dev.dereg_mr(key).unwrap();
    let before = t.accesses();
    r.advance(timer(10) + 1);
    assert!(r.sent().is_empty(), "nothing retransmitted from it");
    assert_eq!(t.accesses(), before, "the region is never read again");
    let wc = r.send_cq();
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::LocProtErr));
    assert_eq!(r.state(), QpState::Err);
}

#[test]
fn read_response_stops_when_its_region_is_deregistered() {
    let (mut r, t, key) = rig(Setup::default(), false);
    let psn = r.take_psn(4);
    let mut p = PacketRepr::new(r.bth(0x0c, psn), &[]);
    p.reth = Some(RethRepr {
        va: TVA,
        rkey: RKey(key),
        dma_len: 4096,
    });
    r.deliver(&p);
    let mut buf = vec![0u8; 8192];
    let first = r
        .dev
        .poll_transmit(r.now, &mut buf)
        .expect("first response");
    assert!(first.gather.is_none());
    r.dev.dereg_mr(key).unwrap();
    let before = t.accesses();
    let out = r.sent();
    assert_eq!(t.accesses(), before, "no byte read after deregistration");
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].opcode, 0x11);
    assert_eq!(out[0].psn, psn.add(1).value());
    assert_eq!(
        out[0].aeth.map(|a| a.0),
        Some(Syndrome::Nak(NakCode::RemoteAccessError))
    );
    assert_eq!(r.state(), QpState::Err);
    assert!(r
        .events()
        .contains(&Event::Async(AsyncEvent::QpAccessErr(r.qpn))));
}

#[test]
fn duplicate_read_after_deregistration_is_a_remote_access_error() {
    let (mut r, t, key) = rig(Setup::default(), false);
    let psn = r.take_psn(1);
    let mut p = PacketRepr::new(r.bth(0x0c, psn), &[]);
    p.reth = Some(RethRepr {
        va: TVA,
        rkey: RKey(key),
        dma_len: 512,
    });
    r.deliver(&p);
    let out = r.sent();
    assert_eq!(out[0].payload, pattern(3, 512));
    r.dev.dereg_mr(key).unwrap();
    let before = t.accesses();
    // The requester lost the response and asks again.
    r.deliver(&p);
    let out = r.sent();
    assert_eq!(t.accesses(), before);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(
        out[0].aeth.map(|a| a.0),
        Some(Syndrome::Nak(NakCode::RemoteAccessError))
    );
    assert_eq!(r.state(), QpState::Err);
}

#[test]
fn write_landing_in_a_deregistered_region_is_naked() {
    let (mut r, t, key) = rig(Setup::default(), false);
    let psn = r.take_psn(3);
    let data = pattern(9, 3000);
    let mut f = PacketRepr::new(r.bth(0x06, psn), &data[..1024]);
    f.reth = Some(RethRepr {
        va: TVA,
        rkey: RKey(key),
        dma_len: 3000,
    });
    f.bth.ack_req = false;
    r.deliver(&f);
    r.dev.dereg_mr(key).unwrap();
    let before = t.accesses();
    let mut m = PacketRepr::new(r.bth(0x07, psn.add(1)), &data[1024..2048]);
    m.bth.ack_req = false;
    r.deliver(&m);
    assert_eq!(t.accesses(), before, "no byte written after deregistration");
    let out = r.sent();
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].psn, psn.add(1).value());
    assert_eq!(
        out[0].aeth.map(|a| a.0),
        Some(Syndrome::Nak(NakCode::RemoteAccessError))
    );
    assert_eq!(r.state(), QpState::Err);
}

#[test]
fn receive_into_a_deregistered_buffer_fails_locally() {
    let (mut r, t, key) = rig(Setup::default(), false);
    r.dev
        .post_recv(
            r.now,
            r.qpn,
            RecvWr {
                wr_id: 5,
                sg_list: vec![Sge::new(TVA, 4096, key)],
            },
        )
        .unwrap();
    let psn = r.take_psn(2);
    let data = pattern(4, 2000);
    let mut f = PacketRepr::new(r.bth(0x00, psn), &data[..1024]);
    f.bth.ack_req = false;
    r.deliver(&f);
    r.dev.dereg_mr(key).unwrap();
    let before = t.accesses();
    let l = PacketRepr::new(r.bth(0x02, psn.add(1)), &data[1024..]);
    r.deliver(&l);
    assert_eq!(t.accesses(), before);
    let wc = r.recv_cq();
    assert_eq!((wc[0].wr_id, wc[0].status), (5, WcStatus::LocProtErr));
    let out = r.sent();
    assert_eq!(
        out[0].aeth.map(|a| a.0),
        Some(Syndrome::Nak(NakCode::RemoteOperationalError))
    );
}

/// Every zero-copy datagram the device hands out now, with its sequence.
fn gathers(r: &mut Rig) -> Vec<(u64, usize)> {
    let mut buf = vec![0u8; 8192];
    let mut v = Vec::new();
    while let Some(tx) = r.dev.poll_transmit_gather(r.now, &mut buf) {
        let g = tx.gather.expect("payload left in registered memory");
        let n: usize = g.pieces.iter().flatten().map(|p| p.len).sum();
        v.push((g.seq, n));
    }
    v
}

#[test]
fn unreliable_send_completes_only_once_its_datagrams_are_released() {
    let (mut r, _t, key) = rig(
        Setup {
            qp_type: QpType::Uc,
            ..Default::default()
        },
        true,
    );
    r.dev.req_notify_cq(r.scq, false).unwrap();
    r.post_send(send_from(key, 1, WrOpcode::RdmaWrite, 2048));
    r.post_send(send_from(key, 2, WrOpcode::RdmaWrite, 1024));
    let g = gathers(&mut r);
    assert_eq!(g, vec![(1, 1024), (2, 1024), (3, 1024)]);
    // Built and "sent" as far as the core knows, but the driver still
    // holds the payload: the buffers are not the program's yet.
    assert!(r.send_cq().is_empty());
    assert!(r.events().is_empty());
    assert_eq!(r.dev.release_wanted(), Some(2));
    r.dev.handle_released(1);
    assert!(r.send_cq().is_empty(), "the first WR's last datagram waits");
    r.dev.handle_released(2);
    let wc = r.send_cq();
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::Success));
    assert_eq!(
        r.events(),
        vec![Event::Completion(r.scq)],
        "the armed CQ fires when the completion becomes visible"
    );
    r.dev.handle_released(3);
    assert_eq!(r.send_cq()[0].wr_id, 2);
    assert_eq!(r.dev.release_wanted(), None);
}

#[test]
fn copied_payloads_complete_at_once() {
    // Without zero copy the payload is in the datagram: nothing to wait for.
    let (mut r, _t, key) = rig(
        Setup {
            qp_type: QpType::Uc,
            ..Default::default()
        },
        false,
    );
    r.post_send(send_from(key, 1, WrOpcode::RdmaWrite, 2048));
    assert_eq!(r.sent().len(), 2);
    assert_eq!(r.send_cq()[0].wr_id, 1);
}

#[test]
fn reliable_completion_waits_for_a_retransmission_still_held() {
    let (mut r, _t, key) = rig(Setup::default(), true);
    r.post_send(send_from(key, 1, WrOpcode::Send, 1024));
    assert_eq!(gathers(&mut r), vec![(1, 1024)]);
    r.dev.handle_released(1);
    // The timer fires: the retransmission is handed out, and the ACK of
    // the first copy arrives while the driver still holds the second.
    r.advance(timer(10) + 1);
    assert_eq!(gathers(&mut r), vec![(2, 1024)]);
    r.ack(r.dev_psn, 1);
    assert!(r.send_cq().is_empty(), "the buffer is still being read");
    r.dev.handle_released(2);
    assert_eq!(r.send_cq()[0].status, WcStatus::Success);
}

#[test]
fn flushed_completions_keep_their_order_behind_held_datagrams() {
    let (mut r, _t, key) = rig(
        Setup {
            qp_type: QpType::Uc,
            ..Default::default()
        },
        true,
    );
    r.post_send(send_from(key, 1, WrOpcode::RdmaWrite, 1024));
    assert_eq!(gathers(&mut r).len(), 1);
    // QP to error with the first WR's datagram still held, then a post
    // that is flushed at once: it must not overtake the first.
    r.dev
        .modify_qp(r.now, r.qpn, &QpAttr::to(QpState::Err), AttrMask::STATE)
        .unwrap();
    r.post_send(send_from(key, 2, WrOpcode::RdmaWrite, 8));
    assert!(r.send_cq().is_empty());
    r.dev.handle_released(1);
    let ids: Vec<_> = r.send_cq().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(ids, vec![(1, WcStatus::Success), (2, WcStatus::WrFlushErr)]);
}

#[test]
fn keys_are_never_the_invalid_key_and_come_from_the_given_key() {
    let mut r = Rig::new(Setup::default());
    let mut keys = Vec::new();
    for _ in 0..2000 {
        let k = r
            .dev
            .reg_mr(r.pd, TVA, Arc::new(VecMemory::new(8)), Access::LOCAL_WRITE)
            .unwrap();
        assert_ne!(k, 0);
        assert_ne!(k, u32::MAX, "UCX's invalid key");
        keys.push(k);
        r.dev.dereg_mr(k).unwrap();
    }
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), 2000, "keys do not repeat");
    // Two devices with other 256-bit keys give other sequences.
    let mut a = Device::new(DeviceConfig {
        key: Some([1; 32]),
        ..DeviceConfig::new(ip(DEV_IP), 7)
    });
    let mut b = Device::new(DeviceConfig {
        key: Some([2; 32]),
        ..DeviceConfig::new(ip(DEV_IP), 7)
    });
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let ka = a
        .reg_mr(pa, 0, Arc::new(VecMemory::new(8)), Access::LOCAL_WRITE)
        .unwrap();
    let kb = b
        .reg_mr(pb, 0, Arc::new(VecMemory::new(8)), Access::LOCAL_WRITE)
        .unwrap();
    assert_ne!(
        ka, kb,
        "the seed does not decide the keys when a key is given"
    );
}
