//! A flood of bad packets costs the device no memory: dropping one
//! allocates nothing (issue 21; ReDMArk's injection runs at 1.5 M
//! packets/s). A counting global allocator watches the receive path of a
//! device with a connected RC QP and a UD QP while every kind of bad
//! packet arrives, after one round to warm up the queues the good path
//! uses.

mod support;

use softrdma_proto::*;
use softrdma_wire::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use support::*;

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn note_alloc() {
    if COUNTING.with(Cell::get) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards every call to the system allocator unchanged; only
// counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note_alloc();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        note_alloc();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        note_alloc();
        // SAFETY: as above.
        unsafe { System.realloc(p, l, n) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by `f` on this thread.
fn allocations(f: impl FnOnce()) -> u64 {
    let before = ALLOCS.load(Ordering::Relaxed);
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCS.load(Ordering::Relaxed) - before
}

fn meta(src: SocketAddr, len: usize) -> RecvMeta {
    RecvMeta {
        src,
        dst: ip(DEV_IP),
        len,
        traffic_class: 0,
        hop_limit: 64,
    }
}

#[test]
fn bad_packets_allocate_nothing() {
    let mut r = Rig::new(Setup::default());
    let peer = SocketAddr::new(ip(PEER_IP), 4791);
    let dev_addr = SocketAddr::new(ip(DEV_IP), 4791);
    r.post_recv(1, 0, 4096);
    let psn = r.take_psn(1);
    let first = PacketRepr::new(r.bth(0x04, psn), b"pin");
    r.deliver_from_port(&first, peer);
    let qpn = r.qpn;
    let epsn = r.peer_psn;

    // Every kind of packet that is dropped or refused, as bytes.
    let mut bad: Vec<(&str, SocketAddr, Vec<u8>)> = Vec::new();
    let enc = |p: &PacketRepr<'_>, src: SocketAddr| encode_from(p, src, dev_addr);
    bad.push(("empty", peer, Vec::new()));
    bad.push(("short", peer, vec![0x04; 11]));
    let mut garbage = vec![0u8; 300];
    let mut g = Rng::new(3);
    for b in garbage.iter_mut() {
        *b = g.next_u32() as u8;
    }
    bad.push(("garbage", peer, garbage));
    let send = PacketRepr::new(r.bth(0x04, epsn), &[7; 32]);
    let mut icrc = enc(&send, peer);
    let n = icrc.len();
    icrc[n - 1] ^= 0xff;
    bad.push(("bad ICRC", peer, icrc));
    let mut pkey = send;
    pkey.bth.pkey = PKey(0x7001);
    bad.push(("bad P_Key", peer, enc(&pkey, peer)));
    let mut unknown = send;
    unknown.bth.dest_qp = Qpn::new(qpn.value() ^ 0x40_0000);
    bad.push(("unknown QPN", peer, enc(&unknown, peer)));
    let mut ud = PacketRepr::new(r.bth(0x64, epsn), &[0; 8]);
    ud.deth = Some(DethRepr {
        qkey: QKey(1),
        src_qp: Qpn::new(9),
    });
    bad.push(("UD opcode to an RC QP", peer, enc(&ud, peer)));
    bad.push((
        "another port",
        SocketAddr::new(ip(PEER_IP), 40_000),
        enc(&send, SocketAddr::new(ip(PEER_IP), 40_000)),
    ));
    bad.push((
        "another address",
        SocketAddr::new(ip("10.0.0.9"), 4791),
        enc(&send, SocketAddr::new(ip("10.0.0.9"), 4791)),
    ));
    let ahead = PacketRepr::new(r.bth(0x04, epsn.add(100)), &[1; 8]);
    bad.push(("ahead of the window", peer, enc(&ahead, peer)));
    let old = PacketRepr::new(r.bth(0x04, epsn.sub(100)), &[1; 8]);
    bad.push(("duplicate", peer, enc(&old, peer)));
    let mut ghost = PacketRepr::new(r.bth(0x11, Psn::new(0x12_3456)), &[]);
    ghost.aeth = Some(AethRepr {
        syndrome: Syndrome::ACK,
        msn: Msn::new(1),
    });
    bad.push(("ACK of nothing sent", peer, enc(&ghost, peer)));
    let mut gsi = PacketRepr::new(r.bth(0x64, epsn), &[0; 8]);
    gsi.bth.dest_qp = Qpn::GSI;
    gsi.deth = Some(DethRepr {
        qkey: QKey(0x8001_0000),
        src_qp: Qpn::GSI,
    });
    bad.push(("not a MAD on QP 1", peer, enc(&gsi, peer)));
    let mut reserved = enc(&send, peer);
    reserved[0] = 0x1f; // an RC opcode IBA reserves
    bad.push(("reserved opcode", peer, reserved));

    let mut buf = vec![0u8; 8192];
    let mut round = |r: &mut Rig| {
        for (_, src, bytes) in &bad {
            r.dev
                .handle_datagram(r.now, &meta(*src, bytes.len()), bytes);
            while r.dev.poll_transmit(r.now, &mut buf).is_some() {}
        }
    };
    // Warm up: the queues of answers (the sequence NAK, the duplicate's
    // ACK) get their capacity once.
    round(&mut r);
    let before = r.dev.counters();
    let n = allocations(|| {
        for _ in 0..1000 {
            round(&mut r);
        }
    });
    let after = r.dev.counters();
    assert_eq!(n, 0, "{n} allocations for {} bad packets", 1000 * bad.len());
    // Every one was seen and dropped, none accepted.
    assert_eq!(after.rx_packets - before.rx_packets, 3000);
    assert!(after.wrong_peer - before.wrong_peer >= 2000);
    assert_eq!(r.state(), QpState::Rts);
    for (what, ..) in &bad {
        assert!(!what.is_empty());
    }
}
