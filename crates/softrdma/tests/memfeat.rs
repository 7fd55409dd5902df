//! Memory windows, FLUSH, ATOMIC WRITE, on-demand paging and
//! re-registration through the Rust API, between two devices over real
//! UDP sockets on loopback (127.63.2.x): the engine, the socket path and
//! the program's real memory, not the simulator's vectors.

use softrdma::*;
use std::net::IpAddr;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

fn dev(last: u8) -> Device {
    let ip: IpAddr = format!("127.63.2.{last}").parse().unwrap();
    Device::open(DeviceOptions::at(ip)).unwrap()
}

struct Side {
    dev: Device,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
}

fn side(d: Device) -> Side {
    let pd = d.alloc_pd().unwrap();
    let cq = d.create_cq(256, None).unwrap();
    let qp = pd.qp_builder(QpType::Rc, &cq, &cq).build().unwrap();
    Side { dev: d, pd, cq, qp }
}

/// Two connected RC QPs on two devices (`a` requests, `b` serves).
fn pair(base: u8, access: Access) -> (Side, Side) {
    let a = side(dev(base));
    let b = side(dev(base + 1));
    let o = ConnectOptions {
        access,
        mtu: Mtu::M1024,
        timeout: 10,
        ..Default::default()
    };
    let (pa, pb) = (Psn::new(100), Psn::new(900));
    a.qp.connect(pa, &b.qp.endpoint(pb), &o).unwrap();
    b.qp.connect(pb, &a.qp.endpoint(pa), &o).unwrap();
    (a, b)
}

fn one(cq: &CompletionQueue) -> Wc {
    let w = cq.wait(1, T).unwrap();
    assert_eq!(w.len(), 1, "no completion");
    w[0]
}

/// Posts `wr` on `side`'s QP: the status of its completion.
fn status_of(side: &Side, wr: SendWr) -> WcStatus {
    side.qp.post_send(wr).unwrap();
    one(&side.cq).status
}

fn rdma(op: WrOpcode, local: Sge, remote: u64, rkey: RKey) -> SendWr {
    SendWr::rdma(7, op, local, remote, rkey)
}

fn rw() -> Access {
    Access::LOCAL_WRITE
        .with(Access::REMOTE_WRITE)
        .with(Access::REMOTE_READ)
}

#[test]
fn memory_windows_over_sockets() {
    let (a, b) = pair(1, rw().remote());
    let src = a.pd.alloc_mr(8192, Access::LOCAL_WRITE).unwrap();
    let win = b.pd.alloc_mr(16384, rw().with(Access::MW_BIND)).unwrap();
    // Type 1, bound through b's QP to 4 KiB in the middle.
    let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
    let key =
        b.qp.bind_mw(
            1,
            &mw,
            Some(&win),
            win.addr() + 4096,
            4096,
            Access::REMOTE_WRITE.with(Access::REMOTE_READ),
            SendFlags::SIGNALED,
        )
        .unwrap();
    let w = one(&b.cq);
    assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::BindMw));
    assert_eq!(mw.rkey(), key);
    src.write(0, &[0x5a; 4096]);
    assert_eq!(
        status_of(
            &a,
            rdma(
                WrOpcode::RdmaWrite,
                src.sge(0, 4096),
                win.addr() + 4096,
                key,
            )
        ),
        WcStatus::Success
    );
    assert_eq!(win.to_vec(4096, 4096), vec![0x5a; 4096]);
    assert_eq!(win.to_vec(4095, 1), [0]);
    assert_eq!(
        status_of(
            &a,
            rdma(
                WrOpcode::RdmaRead,
                src.sge(4096, 4096),
                win.addr() + 4096,
                key,
            )
        ),
        WcStatus::Success
    );
    assert_eq!(src.to_vec(4096, 4096), vec![0x5a; 4096]);
    // One byte before the window: a remote access error.
    assert_eq!(
        status_of(
            &a,
            rdma(WrOpcode::RdmaWrite, src.sge(0, 8), win.addr() + 4095, key,)
        ),
        WcStatus::RemAccessErr
    );
    assert_eq!(win.to_vec(4088, 8), [0; 8]);
    // The region cannot go while the window is bound (the Rust drop would
    // unbind it; deregister reports it).
    let Err(back) = win.deregister() else {
        panic!("deregistered with a bound window");
    };
    let (win, e) = *back;
    assert_eq!(e.errno(), libc::EINVAL);
    drop(mw);
    drop(win);
}

#[test]
fn type2_window_invalidated_by_the_peer() {
    let (a, b) = pair(3, rw().remote());
    let win = b.pd.alloc_mr(8192, rw().with(Access::MW_BIND)).unwrap();
    let rbuf = b.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let src = a.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let key =
        b.qp.bind_mw(
            2,
            &mw,
            Some(&win),
            win.addr(),
            8192,
            Access::REMOTE_WRITE,
            SendFlags::SIGNALED,
        )
        .unwrap();
    assert_eq!(one(&b.cq).status, WcStatus::Success);
    b.qp.post_recv(RecvWr {
        wr_id: 3,
        sg_list: vec![rbuf.sge(0, 64)],
    })
    .unwrap();
    let mut inv = SendWr::new(4, WrOpcode::SendWithInv);
    inv.invalidate_rkey = key;
    a.qp.post_send(inv).unwrap();
    assert_eq!(one(&a.cq).status, WcStatus::Success);
    let r = one(&b.cq);
    assert!(r.wc_flags.contains(WcFlags::WITH_INV) && r.imm_or_inv == key.0);
    assert_eq!(
        status_of(
            &a,
            rdma(WrOpcode::RdmaWrite, src.sge(0, 8), win.addr(), key)
        ),
        WcStatus::RemAccessErr
    );
}

#[test]
fn atomic_write_and_flush_over_sockets() {
    let qp_access = rw().remote().with(Access::FLUSH);
    let (a, b) = pair(5, qp_access);
    let target =
        b.pd.alloc_mr(4096, rw().with(Access::FLUSH_GLOBAL))
            .unwrap();
    let mut wr = SendWr::new(8, WrOpcode::AtomicWrite);
    wr.flags = wr.flags.with(SendFlags::INLINE);
    wr.inline_data = vec![1, 2, 3, 4, 5, 6, 7, 8];
    wr.remote_addr = target.addr() + 64;
    wr.rkey = target.rkey();
    a.qp.post_send(wr).unwrap();
    let w = one(&a.cq);
    assert_eq!(
        (w.status, w.opcode, w.byte_len),
        (WcStatus::Success, WcOpcode::AtomicWrite, 8)
    );
    assert_eq!(target.to_vec(64, 8), [1, 2, 3, 4, 5, 6, 7, 8]);
    let mut f = SendWr::new(9, WrOpcode::Flush);
    f.remote_addr = target.addr();
    f.rkey = target.rkey();
    f.flush = FlushSpec {
        placement_type: 1,
        level: 0,
    };
    f.flush_len = 4096;
    a.qp.post_send(f).unwrap();
    let w = one(&a.cq);
    assert_eq!(
        (w.status, w.opcode, w.byte_len),
        (WcStatus::Success, WcOpcode::Flush, 4096)
    );
    // Persistent: the region has no such right.
    let mut f = SendWr::new(10, WrOpcode::Flush);
    f.remote_addr = target.addr();
    f.rkey = target.rkey();
    f.flush = FlushSpec {
        placement_type: 2,
        level: 0,
    };
    f.flush_len = 8;
    a.qp.post_send(f).unwrap();
    assert_eq!(one(&a.cq).status, WcStatus::RemAccessErr);
    assert!(a.dev.query_device().odp.general & OdpCaps::SUPPORT_IMPLICIT != 0);
}

use softrdma_testkit::mem::Mapping as Map;

#[test]
fn on_demand_region_survives_an_unmapped_page() {
    let (a, b) = pair(7, rw().remote().with(Access::REMOTE_ATOMIC));
    let src = a.pd.alloc_mr(8192, Access::LOCAL_WRITE).unwrap();
    let m = Map::new(4);
    // SAFETY: the mapping outlives the region (dropped first, below).
    let odp = unsafe {
        b.pd.register_mr(
            m.ptr(),
            m.len(),
            rw().with(Access::REMOTE_ATOMIC).with(Access::ON_DEMAND),
        )
    }
    .unwrap();
    src.write(0, &[0x77; 8192]);
    assert_eq!(
        status_of(
            &a,
            rdma(
                WrOpcode::RdmaWrite,
                src.sge(0, 8192),
                odp.addr() + 100,
                odp.rkey(),
            )
        ),
        WcStatus::Success
    );
    // SAFETY: our mapping, written by the device: a copy through a pointer.
    assert_eq!(unsafe { *m.ptr().add(100 + 8191) }, 0x77);
    m.unmap_page(2);
    assert_eq!(
        status_of(
            &a,
            rdma(
                WrOpcode::RdmaWrite,
                src.sge(0, 64),
                odp.addr() + 2 * 4096 + 8,
                odp.rkey(),
            )
        ),
        WcStatus::RemAccessErr
    );
    assert_eq!(b.qp.state().unwrap(), QpState::Err);
    drop(odp);
}

#[test]
fn rereg_translation_while_a_read_is_under_way() {
    let (a, b) = pair(9, rw().remote());
    let dst = a.pd.alloc_mr(4 << 20, Access::LOCAL_WRITE).unwrap();
    let old = Map::new(1024); // 4 MiB
    let new = Map::new(16);
    // SAFETY: `old` is unmapped only after the rereg returned (nothing
    // touches it then); `new` outlives the region.
    let mut mr = unsafe { b.pd.register_mr(old.ptr(), old.len(), rw()) }.unwrap();
    let (old_key, old_addr) = (mr.rkey(), mr.addr());
    a.qp.post_send(rdma(
        WrOpcode::RdmaRead,
        dst.sge(0, 4 << 20),
        old_addr,
        old_key,
    ))
    .unwrap();
    // SAFETY: as above.
    unsafe { mr.rereg(None, Some((new.ptr(), new.len(), new.ptr() as u64)), None) }.unwrap();
    assert_ne!(mr.rkey(), old_key);
    // The old memory goes at once: a READ response still under way must
    // not read it any more (it ends with a remote access error instead).
    drop(old);
    let w = one(&a.cq);
    assert!(
        matches!(w.status, WcStatus::Success | WcStatus::RemAccessErr),
        "{w:?}"
    );
    let _ = b.dev.counters();
    drop(mr);
}
