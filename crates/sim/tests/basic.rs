//! First smoke tests of the transport through the simulator.

use softrdma_proto::*;
use softrdma_sim::*;
use softrdma_wire::RKey;

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn run(sim: &mut Sim) {
    let limit = sim.now.add_ns(10_000_000_000);
    while sim.step(limit) {}
}

fn one_pair(loss: f64, seed: u64) {
    let mut sim = Sim::new(
        seed,
        LinkConfig {
            loss,
            ..Default::default()
        },
    );
    let a = sim.add_node(seed + 1, None);
    let b = sim.add_node(seed + 2, None);
    let o = PairOpts::default();
    let (ca, sb) = connect(&mut sim, a, b, &o);
    let now = sim.now;
    // Server posts a receive of 8 KiB at offset 0.
    sim.nodes[b]
        .dev
        .post_recv(
            now,
            sb.qpn,
            RecvWr {
                wr_id: 77,
                sg_list: vec![Sge::new(sb.va, 8192, sb.key)],
            },
        )
        .unwrap();
    // Client: SEND 5000 B from offset 0.
    let data = pattern(3, 5000);
    ca.mem.fill_from(0, &data);
    let wr = client_wr(&ca, 1, WrOpcode::Send, 0, 5000);
    sim.nodes[a].dev.post_send(now, ca.qpn, wr).unwrap();
    // WRITE 10000 B to server offset 16384.
    let wdata = pattern(9, 10000);
    ca.mem.fill_from(8192, &wdata);
    let mut wr = client_wr(&ca, 2, WrOpcode::RdmaWrite, 8192, 10000);
    wr.remote_addr = sb.va + 16384;
    wr.rkey = RKey(sb.key);
    sim.nodes[a].dev.post_send(now, ca.qpn, wr).unwrap();
    // READ 10000 B from server offset 40000 into client offset 30000.
    let rdata = pattern(5, 10000);
    sb.mem.fill_from(40000, &rdata);
    let mut wr = client_wr(&ca, 3, WrOpcode::RdmaRead, 30000, 10000);
    wr.remote_addr = sb.va + 40000;
    wr.rkey = RKey(sb.key);
    sim.nodes[a].dev.post_send(now, ca.qpn, wr).unwrap();
    // FETCH_ADD 5 at server offset 60000 (initially 100) into client offset 60000.
    sb.mem.fill_from(60000, &100u64.to_ne_bytes());
    let mut wr = client_wr(&ca, 4, WrOpcode::AtomicFetchAndAdd, 60000, 8);
    wr.remote_addr = sb.va + 60000;
    wr.rkey = RKey(sb.key);
    wr.compare_add = 5;
    sim.nodes[a].dev.post_send(now, ca.qpn, wr).unwrap();
    run(&mut sim);
    let wcs = drain_cq(&mut sim, a, ca.send_cq);
    let ids: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        ids,
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success),
            (4, WcStatus::Success)
        ],
        "seed {seed}"
    );
    let r = drain_cq(&mut sim, b, sb.recv_cq);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].byte_len, 5000);
    let smem = sb.mem.snapshot();
    assert_eq!(&smem[..5000], &data[..]);
    assert_eq!(&smem[16384..26384], &wdata[..]);
    assert_eq!(
        u64::from_ne_bytes(smem[60000..60008].try_into().unwrap()),
        105
    );
    let cmem = ca.mem.snapshot();
    assert_eq!(&cmem[30000..40000], &rdata[..]);
    assert_eq!(
        u64::from_ne_bytes(cmem[60000..60008].try_into().unwrap()),
        100
    );
    eprintln!(
        "seed {seed} loss {loss}: {:?}\n  a {:?}",
        sim.stats,
        sim.nodes[a].dev.counters().nonzero()
    );
}

#[test]
fn rc_basic_no_loss() {
    one_pair(0.0, 1);
}

#[test]
fn rc_basic_with_loss() {
    for seed in 0..50 {
        one_pair(0.1, seed);
    }
}

/// Large READs over a link that loses 5 % and delays every 8th PSN behind
/// the next ones (what the netns test's emulation does).
#[test]
fn large_reads_survive_systematic_reordering() {
    for seed in 0..4 {
        let mut sim = Sim::new(
            seed,
            LinkConfig {
                loss: 0.05,
                reorder_psn_mod: 8,
                reorder_delay_ns: 300_000,
                delay_ns: 1_000_000,
                ..Default::default()
            },
        );
        let a = sim.add_node(seed + 1, None);
        let b = sim.add_node(seed + 2, None);
        let o = PairOpts {
            mem_len: 4 << 20,
            timeout: 12,
            ..Default::default()
        };
        let (ca, sb) = connect(&mut sim, a, b, &o);
        let data = pattern(5, 2 << 20);
        sb.mem.fill_from(0, &data);
        let now = sim.now;
        for k in 0..4u64 {
            let wr = SendWr::rdma(
                k,
                WrOpcode::RdmaRead,
                Sge::new(ca.va + k * (512 << 10), 512 << 10, ca.key),
                sb.va + k * (512 << 10),
                RKey(sb.key),
            );
            sim.nodes[a].dev.post_send(now, ca.qpn, wr).unwrap();
        }
        run(&mut sim);
        let wcs = drain_cq(&mut sim, a, ca.send_cq);
        eprintln!(
            "seed {seed}: t={} ms {:?}\n  {:?}",
            sim.now.0 / 1_000_000,
            sim.stats,
            sim.nodes[a].dev.counters().nonzero()
        );
        assert_eq!(wcs.len(), 4, "{wcs:?}");
        assert!(
            wcs.iter().all(|w| w.status == WcStatus::Success),
            "seed {seed}: {wcs:?}"
        );
        assert_eq!(ca.mem.snapshot()[..2 << 20], data[..]);
    }
}

/// Work request `id` whose one SGE is `len` bytes at `off` in the client's
/// region.
fn client_wr(ca: &Endpoint, id: u64, op: WrOpcode, off: u64, len: u32) -> SendWr {
    let mut wr = SendWr::new(id, op);
    wr.sg_list = vec![Sge::new(ca.va + off, len, ca.key)];
    wr
}
