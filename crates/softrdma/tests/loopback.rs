//! Two devices in one process, over real UDP sockets on loopback.

use softrdma::cm::{connect_rc, Listener};
use softrdma::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

fn all_access() -> Access {
    Access::LOCAL_WRITE
        .with(Access::REMOTE_WRITE)
        .with(Access::REMOTE_READ)
        .with(Access::REMOTE_ATOMIC)
}

struct Side {
    dev: Device,
    _pd: ProtectionDomain,
    cq: CompletionQueue,
    mr: MemoryRegion,
    conn: softrdma::cm::Connection,
}

fn pair(qp_type: QpType, mtu: Mtu) -> (Side, Side) {
    let listener = Listener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let opts = ConnectOptions {
        mtu,
        ..Default::default()
    };
    let server = std::thread::spawn(move || {
        let dev = Device::open_default().unwrap();
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(1024, None).unwrap();
        let mr = pd.alloc_mr(4 << 20, all_access()).unwrap();
        let conn = listener
            .accept_rc(&pd, &cq, qp_type, Some(&mr), &opts)
            .unwrap();
        Side {
            dev,
            _pd: pd,
            cq,
            mr,
            conn,
        }
    });
    let dev = Device::open_default().unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(1024, None).unwrap();
    let mr = pd.alloc_mr(4 << 20, all_access()).unwrap();
    let conn = connect_rc(&addr, &pd, &cq, qp_type, Some(&mr), &opts).unwrap();
    let client = Side {
        dev,
        _pd: pd,
        cq,
        mr,
        conn,
    };
    (client, server.join().unwrap())
}

fn ok(wc: &[Wc], n: usize) {
    assert_eq!(wc.len(), n, "{wc:?}");
    for w in wc {
        assert_eq!(w.status, WcStatus::Success, "{w:?}");
    }
}

/// Posts a WRITE or READ of `len` bytes between the client's region at
/// `local` and the server's at `remote`, and waits for its success.
fn one_sided(c: &Side, id: u64, op: WrOpcode, local: usize, remote: u64, len: u32) {
    let mut wr = SendWr::new(id, op);
    wr.sg_list = vec![c.mr.sge(local, len)];
    wr.remote_addr = c.conn.remote.va + remote;
    wr.rkey = c.conn.remote.rkey;
    c.conn.qp.post_send(wr).unwrap();
    ok(&c.cq.wait(1, T).unwrap(), 1);
}

#[test]
fn rc_send_write_read_atomics() {
    let (c, s) = pair(QpType::Rc, Mtu::M4096);
    assert_ne!(c.dev.local_addr(), s.dev.local_addr());
    // SEND 100 KiB into a posted receive.
    let data = pattern(1, 100_000);
    s.conn
        .qp
        .post_recv(RecvWr {
            wr_id: 9,
            sg_list: vec![s.mr.sge(0, 200_000)],
        })
        .unwrap();
    c.mr.write(0, &data);
    let mut wr = SendWr::new(1, WrOpcode::SendWithImm);
    wr.sg_list = vec![c.mr.sge(0, 100_000)];
    wr.imm_data = 0xfeed;
    c.conn.qp.post_send(wr).unwrap();
    ok(&c.cq.wait(1, T).unwrap(), 1);
    let r = s.cq.wait(1, T).unwrap();
    ok(&r, 1);
    assert_eq!(
        (r[0].wr_id, r[0].byte_len, r[0].imm_or_inv),
        (9, 100_000, 0xfeed)
    );
    assert_eq!(s.mr.to_vec(0, 100_000), data);

    // WRITE 1 MiB to the server's region at offset 1 MiB.
    let w = pattern(2, 1 << 20);
    c.mr.write(1 << 20, &w);
    one_sided(&c, 2, WrOpcode::RdmaWrite, 1 << 20, 1 << 20, 1 << 20);
    assert_eq!(s.mr.to_vec(1 << 20, 1 << 20), w);

    // READ it back into the client's region at 2 MiB.
    one_sided(&c, 3, WrOpcode::RdmaRead, 2 << 20, 1 << 20, 1 << 20);
    assert_eq!(c.mr.to_vec(2 << 20, 1 << 20), w);

    // FETCH_ADD and COMPARE_SWAP on the server's first 8 bytes.
    s.mr.atomic_u64(3 << 20)
        .store(40, std::sync::atomic::Ordering::SeqCst);
    let mut wr = SendWr::rdma(
        4,
        WrOpcode::AtomicFetchAndAdd,
        c.mr.sge(3 << 20, 8),
        c.conn.remote.va + (3 << 20),
        c.conn.remote.rkey,
    );
    wr.compare_add = 2;
    c.conn.qp.post_send(wr.clone()).unwrap();
    let mut cas = wr.clone();
    cas.wr_id = 5;
    cas.opcode = WrOpcode::AtomicCmpAndSwp;
    cas.sg_list = vec![c.mr.sge((3 << 20) + 8, 8)];
    cas.compare_add = 42;
    cas.swap = 7;
    c.conn.qp.post_send(cas).unwrap();
    ok(&c.cq.wait(2, T).unwrap(), 2);
    assert_eq!(
        c.mr.atomic_u64(3 << 20)
            .load(std::sync::atomic::Ordering::SeqCst),
        40
    );
    assert_eq!(
        c.mr.atomic_u64((3 << 20) + 8)
            .load(std::sync::atomic::Ordering::SeqCst),
        42
    );
    assert_eq!(
        s.mr.atomic_u64(3 << 20)
            .load(std::sync::atomic::Ordering::SeqCst),
        7
    );

    // Bad rkey: remote access error, QP in error.
    let bad = SendWr::rdma(
        6,
        WrOpcode::RdmaWrite,
        c.mr.sge(0, 8),
        c.conn.remote.va,
        RKey(c.conn.remote.rkey.0 ^ 0x100),
    );
    c.conn.qp.post_send(bad).unwrap();
    let r = c.cq.wait(1, T).unwrap();
    assert_eq!(r[0].status, WcStatus::RemAccessErr);
    assert_eq!(c.conn.qp.state().unwrap(), QpState::Err);
    let cc = c.dev.counters();
    eprintln!(
        "client {:?} {:?}\nserver {:?} {:?}",
        cc.nonzero(),
        c.dev.socket_stats(),
        s.dev.counters().nonzero(),
        s.dev.socket_stats()
    );
    assert!(cc.tx_packets > 270 && cc.rem_access_nak_rcvd == 1, "{cc:?}");
}

#[test]
fn ud_send_with_grh() {
    let dev_a = Device::open_default().unwrap();
    let dev_b = Device::open_default().unwrap();
    let mk = |d: &Device| {
        let pd = d.alloc_pd().unwrap();
        let cq = d.create_cq(64, None).unwrap();
        let qp = pd.qp_builder(QpType::Ud, &cq, &cq).build().unwrap();
        let mr = pd.alloc_mr(1 << 16, Access::LOCAL_WRITE).unwrap();
        (pd, cq, qp, mr)
    };
    let (pda, cqa, qpa, mra) = mk(&dev_a);
    let (_pdb, cqb, qpb, mrb) = mk(&dev_b);
    let opts = ConnectOptions::default();
    let pa = dev_a.random_psn();
    qpa.connect(pa, &qpb.endpoint(Psn::ZERO), &opts).unwrap();
    qpb.connect(Psn::ZERO, &qpa.endpoint(pa), &opts).unwrap();
    qpb.post_recv(RecvWr {
        wr_id: 1,
        sg_list: vec![mrb.sge(0, 4096)],
    })
    .unwrap();
    let ah = pda.create_ah_for_gid(dev_b.gid()).unwrap();
    mra.write(0, &pattern(3, 1000));
    let mut wr = SendWr::new(7, WrOpcode::SendWithImm);
    wr.sg_list = vec![mra.sge(0, 1000)];
    wr.imm_data = 0xd0d0;
    wr.ud = Some(UdDest {
        ah: ah.id(),
        remote_qpn: qpb.qpn(),
        remote_qkey: QKey(0x1111_1111),
    });
    qpa.post_send(wr).unwrap();
    ok(&cqa.wait(1, T).unwrap(), 1);
    let r = cqb.wait(1, T).unwrap();
    ok(&r, 1);
    assert_eq!(r[0].byte_len, 1040);
    assert_eq!(r[0].src_qp, qpa.qpn());
    assert!(r[0].wc_flags.contains(WcFlags::GRH));
    let grh = mrb.to_vec(0, 40);
    assert_eq!(
        softrdma_wire::grh::ud_grh_source(&grh.try_into().unwrap()),
        dev_a.local_addr().ip()
    );
    assert_eq!(mrb.to_vec(40, 1000), pattern(3, 1000));
}

#[test]
fn completion_channel_wakes_a_waiter() {
    let (c, s) = pair(QpType::Rc, Mtu::M1024);
    let ch = s.dev.create_comp_channel().unwrap();
    let cq = s.dev.create_cq(16, Some(&ch)).unwrap();
    drop(cq);
    // The pair's CQ has no channel; make a fresh connection-independent check:
    // arm the server's CQ through a channel-backed one on a new QP pair.
    let pd = s.mr.pd().clone();
    let cq2 = s.dev.create_cq(16, Some(&ch)).unwrap();
    let qp = pd.qp_builder(QpType::Rc, &cq2, &cq2).build().unwrap();
    let cpd = c.mr.pd().clone();
    let ccq = c.dev.create_cq(16, None).unwrap();
    let cqp = cpd.qp_builder(QpType::Rc, &ccq, &ccq).build().unwrap();
    let o = ConnectOptions::default();
    qp.connect(Psn::new(5), &cqp.endpoint(Psn::new(9)), &o)
        .unwrap();
    cqp.connect(Psn::new(9), &qp.endpoint(Psn::new(5)), &o)
        .unwrap();
    qp.post_recv(RecvWr {
        wr_id: 1,
        sg_list: vec![s.mr.sge(0, 64)],
    })
    .unwrap();
    cq2.req_notify(false).unwrap();
    let waiter = std::thread::spawn(move || ch.get_event(Some(T)).unwrap());
    std::thread::sleep(Duration::from_millis(50));
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sg_list = vec![c.mr.sge(0, 64)];
    cqp.post_send(wr).unwrap();
    assert_eq!(waiter.join().unwrap(), Some(cq2.id()));
    ok(&cq2.wait(1, T).unwrap(), 1);
}

#[test]
fn operations_the_target_qp_does_not_allow_fail_at_once() {
    // IBA 9.7.5.1.2 / rxe: a WRITE, READ or atomic arriving on an RC QP
    // whose access flags do not allow it is NAKed invalid request, and the
    // requester completes with a remote invalid request error at once —
    // not after its retries run out.
    let dev_a = Device::open_default().unwrap();
    let dev_b = Device::open_default().unwrap();
    for (op, missing) in [
        (WrOpcode::RdmaWrite, Access::REMOTE_WRITE),
        (WrOpcode::RdmaRead, Access::REMOTE_READ),
        (WrOpcode::AtomicFetchAndAdd, Access::REMOTE_ATOMIC),
    ] {
        let (pda, pdb) = (dev_a.alloc_pd().unwrap(), dev_b.alloc_pd().unwrap());
        let (cqa, cqb) = (
            dev_a.create_cq(16, None).unwrap(),
            dev_b.create_cq(16, None).unwrap(),
        );
        let qpa = pda.qp_builder(QpType::Rc, &cqa, &cqa).build().unwrap();
        let qpb = pdb.qp_builder(QpType::Rc, &cqb, &cqb).build().unwrap();
        let mra = pda.alloc_mr(4096, all_access()).unwrap();
        let mrb = pdb.alloc_mr(4096, all_access()).unwrap();
        let o = ConnectOptions {
            timeout: 14,
            retry_cnt: 7,
            ..Default::default()
        };
        let ob = ConnectOptions {
            access: Access(o.access.0 & !missing.0),
            ..o
        };
        let (pa, pb) = (dev_a.random_psn(), dev_b.random_psn());
        qpa.connect(pa, &qpb.endpoint(pb), &o).unwrap();
        qpb.connect(pb, &qpa.endpoint(pa), &ob).unwrap();
        let mut wr = SendWr::new(1, op);
        wr.sg_list = vec![mra.sge(0, 8)];
        wr.remote_addr = mrb.addr();
        wr.rkey = mrb.rkey();
        wr.compare_add = 1;
        qpa.post_send(wr).unwrap();
        let wc = cqa.wait(1, T).unwrap();
        assert_eq!(wc.len(), 1, "{op:?}");
        assert_eq!(wc[0].status, WcStatus::RemInvReqErr, "{op:?}: {wc:?}");
        // The first NAK ended it: no transport timeout, no retransmission.
        let ca = qpa.counters().unwrap();
        assert_eq!((ca.timeouts, ca.retransmits), (0, 0), "{op:?}: {ca:?}");
        let cb = dev_b.counters();
        assert!(cb.inv_req_nak_sent >= 1, "{op:?}: {cb:?}");
        assert_eq!(
            mrb.to_vec(0, 8),
            vec![0; 8],
            "{op:?}: the target is untouched"
        );
    }
}
