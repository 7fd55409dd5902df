//! Transport core throughput with no I/O: two [`Device`]s wired back to back
//! in memory, one RC QP pair, the way an engine drives them — datagrams in
//! batches of 32 (one `recvmmsg`), `poll_transmit` until empty after each
//! batch, `poll_timeout` once per batch.
//!
//! - `requester/*`: posting work requests, emitting their packets
//!   (`poll_transmit`), consuming the responder's ACK and polling the send
//!   CQ. The responder's side runs untimed.
//! - `responder/*`: `handle_datagram` for each request packet (ICRC check,
//!   lookups, R_Key check, the copy into the region or receive buffer), the
//!   ACK out, the receive CQ. The requester's side runs untimed.
//!
//! `write_64` / `send_64` are RDMA WRITE / SEND of 64 B messages, one packet
//! each, in packets per second; `write_4k` is 4 KiB WRITEs at path MTU 4096
//! in bytes of payload per second (decimal: GB/s). `idle1k` variants add
//! 1024 idle connected QPs to each device.
//!
//! Regions are [`VecMemory`]: every payload copy takes its mutex (two
//! atomic operations the engine's raw regions do not pay), so the figures
//! are a little pessimistic for the copy. Instructions per packet, the
//! figure that does not depend on the machine's load, come from
//! `valgrind --tool=callgrind --toggle-collect='*Pair*emit*'` (requester)
//! or `'*Pair*receive*'` (responder) over `--profile-time`, divided by 32
//! packets per call.
//!
//! ```text
//! cargo bench -p softrdma-proto --bench core
//! ```

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use softrdma_proto::*;
use softrdma_wire::{Psn, Qpn, RKey};
use std::hint::black_box;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// Datagrams per engine round.
const BATCH: usize = 32;
/// Every this many work requests is signaled.
const SIGNAL_EVERY: u64 = 32;

struct Side {
    dev: Device,
    ip: IpAddr,
    qpn: Qpn,
    /// Every QP of the side, the measured one first.
    qpns: Vec<Qpn>,
    scq: CqId,
    rcq: CqId,
    key: u32,
    va: u64,
}

struct Pair {
    a: Side,
    b: Side,
    now: Instant,
    msg: usize,
    op: WrOpcode,
    bufs: Vec<Vec<u8>>,
    lens: Vec<usize>,
    ack: Vec<u8>,
    wcs: Vec<Wc>,
    posted: u64,
}

fn side(ip: &str, mem: usize, idle: usize) -> Side {
    let ip: IpAddr = ip.parse().unwrap();
    let mut dev = Device::new(DeviceConfig::new(ip, 1));
    let pd = dev.alloc_pd().unwrap();
    let scq = dev.create_cq(1 << 16).unwrap();
    let rcq = dev.create_cq(1 << 16).unwrap();
    let va = 0x10_0000;
    let access = Access::LOCAL_WRITE
        .with(Access::REMOTE_WRITE)
        .with(Access::REMOTE_READ);
    let key = dev
        .reg_mr(pd, va, Arc::new(VecMemory::new(mem)), access)
        .unwrap();
    let init = QpInit {
        qp_type: QpType::Rc,
        pd,
        send_cq: scq,
        recv_cq: rcq,
        srq: None,
        cap: QpCap {
            max_send_wr: 1024,
            max_recv_wr: 1024,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    };
    let mut qpns = Vec::new();
    for _ in 0..=idle {
        qpns.push(dev.create_qp(&init).unwrap().0);
    }
    Side {
        dev,
        ip,
        qpn: qpns[0],
        qpns,
        scq,
        rcq,
        key,
        va,
    }
}

/// Takes `qpn` of `s` to RTS towards `peer` on `dest`.
fn connect(s: &mut Side, qpn: Qpn, peer: IpAddr, dest: Qpn, mtu: Mtu) {
    let now = Instant(0);
    let access = Access::REMOTE_WRITE.with(Access::REMOTE_READ);
    let a = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: access,
        ..Default::default()
    };
    let m = AttrMask::STATE
        .with(AttrMask::PKEY_INDEX)
        .with(AttrMask::PORT)
        .with(AttrMask::ACCESS_FLAGS);
    s.dev.modify_qp(now, qpn, &a, m).unwrap();
    let a = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: mtu,
        dest_qp_num: dest,
        rq_psn: Psn::new(0x10),
        max_dest_rd_atomic: 16,
        min_rnr_timer: 1,
        ah_attr: AddressVector::to(peer),
        ..Default::default()
    };
    let m = AttrMask::RC_RTR;
    s.dev.modify_qp(now, qpn, &a, m).unwrap();
    let a = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: Psn::new(0x10),
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 16,
        ..Default::default()
    };
    let m = AttrMask::RC_RTS;
    s.dev.modify_qp(now, qpn, &a, m).unwrap();
}

impl Pair {
    fn new(op: WrOpcode, msg: usize, mtu: Mtu, idle: usize) -> Pair {
        let mem = msg.max(64);
        let mut a = side("10.0.0.1", mem, idle);
        let mut b = side("10.0.0.2", mem * BATCH, idle);
        // Idle QPs: connected pairwise, never used. (QP numbers are
        // random: taken as created.)
        let qa = a.qpns.clone();
        let qb = b.qpns.clone();
        for (&x, &y) in qa.iter().zip(&qb) {
            connect(&mut a, x, b.ip, y, mtu);
            connect(&mut b, y, a.ip, x, mtu);
        }
        Pair {
            a,
            b,
            now: Instant(1_000_000),
            msg,
            op,
            bufs: vec![vec![0; device::MIN_TX_BUF]; BATCH],
            lens: vec![0; BATCH],
            ack: vec![0; device::MIN_TX_BUF],
            wcs: vec![Wc::EMPTY; BATCH],
            posted: 0,
        }
    }

    fn wr(&mut self) -> SendWr {
        self.posted += 1;
        let mut wr = SendWr::new(self.posted, self.op);
        wr.flags = if self.posted % SIGNAL_EVERY == SIGNAL_EVERY - 1 {
            SendFlags::SIGNALED
        } else {
            SendFlags::default()
        };
        wr.sg_list = vec![Sge::new(self.a.va, self.msg as u32, self.a.key)];
        wr.remote_addr = self.b.va + ((self.posted as usize % BATCH) * self.msg) as u64;
        wr.rkey = RKey(self.b.key);
        wr
    }

    /// Requester: post a batch and emit its packets into `bufs`.
    #[inline(never)]
    fn emit(&mut self, wrs: Vec<SendWr>) {
        let now = self.now;
        for wr in wrs {
            self.a.dev.post_send(now, self.a.qpn, wr).unwrap();
        }
        let mut n = 0;
        while n < BATCH {
            let Some(tx) = self.a.dev.poll_transmit(now, &mut self.bufs[n]) else {
                break;
            };
            self.lens[n] = tx.len;
            n += 1;
        }
        assert_eq!(n, BATCH);
        // An engine polls until there is nothing more.
        assert!(self.a.dev.poll_transmit(now, &mut self.ack).is_none());
        let _ = black_box(self.a.dev.poll_timeout());
    }

    /// Responder: receive the batch, send the (coalesced) ACK into `ack`.
    #[inline(never)]
    fn receive(&mut self) -> usize {
        let now = self.now;
        let meta = |len| RecvMeta {
            src: SocketAddr::new(self.a.ip, 4791),
            dst: self.b.ip,
            len,
            traffic_class: 0,
            hop_limit: 64,
        };
        for i in 0..BATCH {
            let m = meta(self.lens[i]);
            self.b
                .dev
                .handle_datagram(now, &m, &self.bufs[i][..self.lens[i]]);
        }
        let mut acks = 0;
        let mut len = 0;
        while let Some(tx) = self.b.dev.poll_transmit(now, &mut self.ack) {
            len = tx.len;
            acks += 1;
        }
        assert_eq!(acks, 1);
        let n = self.b.dev.poll_cq(self.b.rcq, &mut self.wcs).unwrap();
        black_box(n);
        let _ = black_box(self.b.dev.poll_timeout());
        len
    }

    /// Requester: consume the ACK, poll the send CQ.
    #[inline(never)]
    fn complete(&mut self, len: usize) {
        let meta = RecvMeta {
            src: SocketAddr::new(self.b.ip, 4791),
            dst: self.a.ip,
            len,
            traffic_class: 0,
            hop_limit: 64,
        };
        self.a
            .dev
            .handle_datagram(self.now, &meta, &self.ack[..len]);
        let n = self.a.dev.poll_cq(self.a.scq, &mut self.wcs).unwrap();
        assert_eq!(n, 1);
        self.now = self.now.add_ns(1000);
    }

    fn post_recvs(&mut self) {
        if self.op != WrOpcode::Send {
            return;
        }
        for i in 0..BATCH {
            let wr = RecvWr {
                wr_id: i as u64,
                sg_list: vec![Sge::new(
                    self.b.va + (i * self.msg) as u64,
                    self.msg as u32,
                    self.b.key,
                )],
            };
            self.b.dev.post_recv(self.now, self.b.qpn, wr).unwrap();
        }
    }

    fn wrs(&mut self) -> Vec<SendWr> {
        (0..BATCH).map(|_| self.wr()).collect()
    }

    /// `iters` packets; only the requester's work is timed.
    fn time_requester(&mut self, iters: u64) -> Duration {
        let mut t = Duration::ZERO;
        for _ in 0..iters.div_ceil(BATCH as u64) {
            let wrs = self.wrs();
            self.post_recvs();
            let start = std::time::Instant::now();
            self.emit(wrs);
            t += start.elapsed();
            let len = self.receive();
            let start = std::time::Instant::now();
            self.complete(len);
            t += start.elapsed();
        }
        t
    }

    /// `iters` packets; only the responder's work is timed.
    fn time_responder(&mut self, iters: u64) -> Duration {
        let mut t = Duration::ZERO;
        for _ in 0..iters.div_ceil(BATCH as u64) {
            let wrs = self.wrs();
            self.post_recvs();
            self.emit(wrs);
            let start = std::time::Instant::now();
            let len = self.receive();
            t += start.elapsed();
            self.complete(len);
        }
        t
    }
}

fn bench(c: &mut Criterion) {
    let cases: [(&str, WrOpcode, usize, Mtu, usize); 5] = [
        ("write_64", WrOpcode::RdmaWrite, 64, Mtu::M1024, 0),
        ("send_64", WrOpcode::Send, 64, Mtu::M1024, 0),
        ("write_64_idle1k", WrOpcode::RdmaWrite, 64, Mtu::M1024, 1024),
        ("write_4k", WrOpcode::RdmaWrite, 4096, Mtu::M4096, 0),
        ("send_4k", WrOpcode::Send, 4096, Mtu::M4096, 0),
    ];
    for (role, responder) in [("requester", false), ("responder", true)] {
        let mut g = c.benchmark_group(role);
        g.sample_size(20);
        g.measurement_time(Duration::from_secs(3));
        g.warm_up_time(Duration::from_secs(1));
        for (name, op, msg, mtu, idle) in cases {
            if msg > 64 {
                g.throughput(Throughput::BytesDecimal(msg as u64));
            } else {
                g.throughput(Throughput::Elements(1));
            }
            let mut p = Pair::new(op, msg, mtu, idle);
            g.bench_function(BenchmarkId::from_parameter(name), |bch| {
                bch.iter_custom(|iters| {
                    if responder {
                        p.time_responder(iters)
                    } else {
                        p.time_requester(iters)
                    }
                })
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
