//! A send completion hands the buffer back to the program: a program that
//! refills a buffer the moment its send completes changes nothing that was
//! sent. Zero copy leaves UC/UD payloads in registered memory until the
//! datagram is handed to the kernel; the completion waits for that.
//!
//! Each test sends 20,000 messages over real sockets on loopback, from a
//! ring of buffers that the sender overwrites with another pattern as soon
//! as each send completes, and checks that every message arrives with the
//! bytes it had when it was posted. Lossless: the sender keeps at most a
//! window of messages ahead of what the receiver has taken, so no receive
//! queue runs dry.
//!
//! The sender's engine refuses 30 % of its send calls as if the socket
//! were full (`DeviceOptions::refuse_sends`, a fault injector), so built
//! datagrams wait in its queue with their payload still in the program's
//! buffers — the moment a completion must not be visible yet. Nothing is
//! lost that way, so every message must arrive.

use softrdma::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MESSAGES: u64 = 20_000;

/// `SOFTRDMA_REUSE_MESSAGES` runs fewer (scripts/sanitize, where every
/// access is checked and slow).
fn messages() -> u64 {
    std::env::var("SOFTRDMA_REUSE_MESSAGES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(MESSAGES)
}
/// Sender buffers in the ring.
const SLOTS: usize = 128;
/// Receive buffers (and, for WRITEs, target slots).
const RSLOTS: usize = 256;
/// Messages in flight beyond what the receiver has taken.
const WINDOW: u64 = 200;
const DEADLINE: Duration = Duration::from_secs(120);
/// A lost message stalls the sender's window: give up after this long
/// without progress.
const STALL: Duration = Duration::from_secs(5);

/// The bytes of message `i`: every message differs everywhere.
fn fill(i: u64, out: &mut [u8]) {
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for b in out.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
}

fn access() -> Access {
    Access::LOCAL_WRITE.with(Access::REMOTE_WRITE)
}

/// Sends `messages()` messages of `size` bytes from `qp_type` (UD: SEND with
/// immediate; UC: RDMA WRITE with immediate) and checks each one.
fn run(qp_type: QpType, size: usize) {
    let total = messages();
    let dev_a = Device::open(DeviceOptions {
        refuse_sends: Some(0.3),
        ..Default::default()
    })
    .unwrap();
    let dev_b = Device::open_default().unwrap();
    let pd_a = dev_a.alloc_pd().unwrap();
    let pd_b = dev_b.alloc_pd().unwrap();
    let cq_a = dev_a.create_cq(1024, None).unwrap();
    let cq_b = dev_b.create_cq(1024, None).unwrap();
    let qa = pd_a.qp_builder(qp_type, &cq_a, &cq_a).build().unwrap();
    let qb = pd_b
        .qp_builder(qp_type, &cq_b, &cq_b)
        .max_recv_wr(RSLOTS as u32)
        .build()
        .unwrap();
    let ud = qp_type == QpType::Ud;
    let grh = if ud { 40 } else { 0 };
    let send_mr = pd_a.alloc_mr(SLOTS * size, access()).unwrap();
    let recv_mr = pd_b.alloc_mr(RSLOTS * (size + grh), access()).unwrap();
    let opts = ConnectOptions {
        mtu: Mtu::M1024,
        access: Access::REMOTE_WRITE,
        ..Default::default()
    };
    let (pa, pb) = (dev_a.random_psn(), dev_b.random_psn());
    qa.connect(pa, &qb.endpoint(pb), &opts).unwrap();
    qb.connect(pb, &qa.endpoint(pa), &opts).unwrap();
    let slot_len = size + grh;
    let post_recv = |slot: usize| {
        qb.post_recv(RecvWr {
            wr_id: slot as u64,
            sg_list: vec![recv_mr.sge(slot * slot_len, slot_len as u32)],
        })
        .unwrap();
    };
    for s in 0..RSLOTS {
        post_recv(s);
    }
    let ah = pd_a.create_ah_for_gid(dev_b.gid()).unwrap();
    let received = Arc::new(AtomicU64::new(0));
    let start = Instant::now();

    std::thread::scope(|sc| {
        let rx = received.clone();
        let receiver = sc.spawn(|| {
            let rx = rx;
            let mut wcs = [EMPTY_WC; 32];
            let mut expect = vec![0u8; size];
            let mut got = vec![0u8; size];
            let mut bad = Vec::new();
            let mut last = Instant::now();
            while rx.load(Ordering::Relaxed) < total
                && start.elapsed() < DEADLINE
                && last.elapsed() < STALL
            {
                let n = cq_b.poll(&mut wcs).unwrap();
                if n > 0 {
                    last = Instant::now();
                }
                for w in &wcs[..n] {
                    assert_eq!(w.status, WcStatus::Success, "{w:?}");
                    let i = w.imm_or_inv as u64;
                    // UD: in the receive buffer after the GRH area; UC:
                    // where the WRITE put it.
                    let at = if ud {
                        assert_eq!(w.byte_len as usize, size + grh);
                        w.wr_id as usize * slot_len + grh
                    } else {
                        (i as usize % RSLOTS) * slot_len
                    };
                    fill(i, &mut expect);
                    recv_mr.read(at, &mut got[..]);
                    if got != expect && bad.len() < 5 {
                        bad.push(i);
                    }
                    post_recv(w.wr_id as usize);
                    rx.fetch_add(1, Ordering::Release);
                }
                if n == 0 {
                    std::thread::yield_now();
                }
            }
            bad
        });

        // The sender: a ring of buffers, each refilled with garbage the
        // moment its send completes.
        let mut busy = [false; SLOTS];
        let mut wcs = [EMPTY_WC; 32];
        let mut garbage = vec![0u8; size];
        let mut msg = vec![0u8; size];
        let mut i = 0u64;
        let mut done = 0u64;
        let mut last = Instant::now();
        while done < total && start.elapsed() < DEADLINE && last.elapsed() < STALL {
            let n = cq_a.poll(&mut wcs).unwrap();
            if n > 0 {
                last = Instant::now();
            }
            for w in &wcs[..n] {
                assert_eq!(w.status, WcStatus::Success, "{w:?}");
                let slot = w.wr_id as usize % SLOTS;
                // The buffer is ours again: reuse it at once.
                fill(w.wr_id ^ 0xdead_beef, &mut garbage);
                send_mr.write(slot * size, &garbage);
                busy[slot] = false;
                done += 1;
            }
            let slot = i as usize % SLOTS;
            if i < total && !busy[slot] && i < received.load(Ordering::Acquire) + WINDOW {
                fill(i, &mut msg);
                send_mr.write(slot * size, &msg);
                let mut wr = if ud {
                    let mut wr = SendWr::new(i, WrOpcode::SendWithImm);
                    wr.ud = Some(UdDest {
                        ah: ah.id(),
                        remote_qpn: qb.qpn(),
                        remote_qkey: opts.qkey,
                    });
                    wr
                } else {
                    let mut wr = SendWr::new(i, WrOpcode::RdmaWriteWithImm);
                    wr.remote_addr = recv_mr.addr() + ((i as usize % RSLOTS) * slot_len) as u64;
                    wr.rkey = recv_mr.rkey();
                    wr
                };
                wr.imm_data = i as u32;
                wr.sg_list = vec![send_mr.sge(slot * size, size as u32)];
                qa.post_send(wr).unwrap();
                busy[slot] = true;
                i += 1;
            } else if n == 0 {
                std::thread::yield_now();
            }
        }
        let bad = receiver.join().unwrap();
        let got = received.load(Ordering::Acquire);
        assert!(
            bad.is_empty() && got == total,
            "{qp_type:?} {size} B: {got} of {total} messages arrived, wrong bytes in {bad:?}; \
             sender {:?} {:?}, receiver {:?} {:?}",
            dev_a.counters(),
            dev_a.socket_stats(),
            dev_b.counters(),
            dev_b.socket_stats(),
        );
    });
}

#[test]
fn ud_send_4k_buffers_reused_at_completion() {
    run(QpType::Ud, 4096);
}

#[test]
fn ud_send_1k_buffers_reused_at_completion() {
    run(QpType::Ud, 1024);
}

#[test]
fn uc_write_4k_buffers_reused_at_completion() {
    run(QpType::Uc, 4096);
}
