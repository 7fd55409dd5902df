//! Memory windows at the core, rule by rule (IBA 10.6.7, rxe_mw.c): binds
//! as work requests in posting order, remote access through a window only
//! inside its range and rights, type 2 windows tied to one QP and freed by
//! LOCAL_INV or SEND_WITH_INV, and the completion statuses and NAKs rxe
//! gives when a rule is broken.

mod support;

use softrdma_proto::*;
use softrdma_wire::*;
use std::sync::Arc;
use support::*;

/// Where the bindable region lives.
const WVA: u64 = 0x40_0000;
const WLEN: usize = 0x4000;

/// A rig with a second region that allows windows.
fn rig() -> (Rig, Arc<VecMemory>, u32) {
    let mut r = Rig::new(Setup::default());
    let mem = Arc::new(VecMemory::new(WLEN));
    let access = Access::LOCAL_WRITE
        .with(Access::REMOTE_READ)
        .with(Access::REMOTE_WRITE)
        .with(Access::MW_BIND);
    let key = r.dev.reg_mr(r.pd, WVA, mem.clone(), access).unwrap();
    (r, mem, key)
}

fn bind_wr(id: u64, mw: MwId, rkey: RKey, mr: u32, addr: u64, len: u64, access: Access) -> SendWr {
    let mut wr = SendWr::new(id, WrOpcode::BindMw);
    wr.bind = Some(MwBind {
        mw,
        rkey: RKey(rkey.0.wrapping_add(1)),
        mr_lkey: mr,
        addr,
        length: len,
        access,
    });
    wr
}

fn write_only(r: &Rig, psn: Psn, va: u64, rkey: RKey, data: &[u8]) -> PacketRepr<'static> {
    let data: &'static [u8] = Box::leak(data.to_vec().into_boxed_slice());
    let mut p = PacketRepr::new(r.bth(0x0a, psn), data);
    p.reth = Some(RethRepr {
        va,
        rkey,
        dma_len: data.len() as u32,
    });
    p
}

fn read_req(r: &Rig, psn: Psn, va: u64, rkey: RKey, len: u32) -> PacketRepr<'static> {
    let mut p = PacketRepr::new(r.bth(0x0c, psn), &[]);
    p.reth = Some(RethRepr {
        va,
        rkey,
        dma_len: len,
    });
    p
}

/// Binds a window through the rig's QP and returns its new key.
fn bind(r: &mut Rig, kind: MwType, mr: u32, addr: u64, len: u64, access: Access) -> (MwId, RKey) {
    let (mw, rkey) = r.dev.alloc_mw(r.pd, kind).unwrap();
    let wr = bind_wr(1, mw, rkey, mr, addr, len, access);
    r.post_send(wr);
    assert!(r.sent().is_empty(), "a bind sends nothing");
    let wc = r.send_cq();
    assert_eq!(wc.len(), 1);
    assert_eq!(
        (wc[0].status, wc[0].opcode, wc[0].wr_id),
        (WcStatus::Success, WcOpcode::BindMw, 1)
    );
    let (now, _, _) = r.dev.mw(mw).unwrap();
    assert_eq!(now.0 >> 8, rkey.0 >> 8, "the index part stays");
    assert_eq!(
        now.0 & 0xff,
        rkey.0.wrapping_add(1) & 0xff,
        "the key byte is the bind's"
    );
    (mw, now)
}

#[test]
fn write_and_read_through_a_type1_window_inside_its_range_only() {
    let (mut r, mem, mr) = rig();
    let rw = Access::REMOTE_WRITE.with(Access::REMOTE_READ);
    let (_mw, key) = bind(&mut r, MwType::Type1, mr, WVA + 0x1000, 0x100, rw);
    // A WRITE into the window lands where it says.
    let psn = r.take_psn(1);
    r.deliver(&write_only(&r, psn, WVA + 0x1010, key, &pattern(5, 32)));
    let out = r.sent();
    assert_eq!(out[0].aeth, Some((Syndrome::ACK, 1)));
    assert_eq!(mem.snapshot()[0x1010..0x1030], pattern(5, 32)[..]);
    // A READ of the window comes back.
    let psn = r.take_psn(1);
    r.deliver(&read_req(&r, psn, WVA + 0x1000, key, 0x100));
    let out = r.sent();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].opcode, 0x10);
    assert_eq!(out[0].payload, mem.snapshot()[0x1000..0x1100]);
    // One byte past the window — inside the region — is a remote access
    // error (NAK 0x62) and takes the QP to the error state.
    let psn = r.take_psn(1);
    r.deliver(&write_only(&r, psn, WVA + 0x10f8, key, &[1; 9]));
    let out = r.sent();
    assert_eq!(
        out[0].aeth,
        Some((Syndrome::Nak(NakCode::RemoteAccessError), 2))
    );
    assert_eq!(out[0].psn, psn.value());
    assert_eq!(r.state(), QpState::Err);
    assert_eq!(mem.snapshot()[0x10f8..0x1101], [0; 9], "nothing written");
}

#[test]
fn window_rights_are_the_windows_not_the_regions() {
    let (mut r, _mem, mr) = rig();
    let (_mw, key) = bind(&mut r, MwType::Type1, mr, WVA, 0x100, Access::REMOTE_READ);
    let psn = r.take_psn(1);
    r.deliver(&write_only(&r, psn, WVA, key, &[1; 8]));
    let out = r.sent();
    assert_eq!(
        out[0].aeth,
        Some((Syndrome::Nak(NakCode::RemoteAccessError), 0))
    );
}

#[test]
fn a_rebind_retires_the_old_key_and_a_zero_length_bind_unbinds() {
    let (mut r, mem, mr) = rig();
    let rw = Access::REMOTE_WRITE;
    let (mw, old) = bind(&mut r, MwType::Type1, mr, WVA, 0x100, rw);
    let wr = bind_wr(2, mw, old, mr, WVA + 0x200, 0x100, rw);
    r.post_send(wr);
    assert!(r.sent().is_empty());
    assert_eq!(r.send_cq()[0].status, WcStatus::Success);
    let (new, _, _) = r.dev.mw(mw).unwrap();
    assert_ne!(new, old);
    let psn = r.take_psn(1);
    r.deliver(&write_only(&r, psn, WVA + 0x200, new, &[7; 4]));
    assert_eq!(r.sent()[0].aeth, Some((Syndrome::ACK, 1)));
    assert_eq!(mem.snapshot()[0x200..0x204], [7; 4]);
    // Unbind (length 0, as pyverbs' invalidate_mw_type1), then the key is dead.
    r.post_send(bind_wr(3, mw, new, mr, WVA, 0, Access(0)));
    assert!(r.sent().is_empty());
    assert_eq!(r.send_cq()[0].status, WcStatus::Success);
    let (dead, _, _) = r.dev.mw(mw).unwrap();
    let psn = r.take_psn(1);
    r.deliver(&write_only(&r, psn, WVA + 0x200, dead, &[8; 4]));
    assert_eq!(
        r.sent()[0].aeth,
        Some((Syndrome::Nak(NakCode::RemoteAccessError), 1))
    );
}

#[test]
fn type2_window_local_invalidate_then_remote_access_error() {
    let (mut r, _mem, mr) = rig();
    let (_mw, key) = bind(&mut r, MwType::Type2, mr, WVA, 0x100, Access::REMOTE_WRITE);
    let mut inv = SendWr::new(9, WrOpcode::LocalInv);
    inv.invalidate_rkey = key;
    r.post_send(inv);
    assert!(r.sent().is_empty());
    let wc = r.send_cq();
    assert_eq!(
        (wc[0].status, wc[0].opcode),
        (WcStatus::Success, WcOpcode::LocalInv)
    );
    let psn = r.take_psn(1);
    r.deliver(&write_only(&r, psn, WVA, key, &[1; 8]));
    assert_eq!(
        r.sent()[0].aeth,
        Some((Syndrome::Nak(NakCode::RemoteAccessError), 0))
    );
}

#[test]
fn type2_window_invalidated_by_send_with_invalidate() {
    let (mut r, _mem, mr) = rig();
    let (_mw, key) = bind(&mut r, MwType::Type2, mr, WVA, 0x100, Access::REMOTE_WRITE);
    r.post_recv(5, 0, 64);
    let psn = r.take_psn(1);
    let mut p = PacketRepr::new(r.bth(0x17, psn), &[]);
    p.ieth = Some(key);
    r.deliver(&p);
    assert_eq!(r.sent()[0].aeth, Some((Syndrome::ACK, 1)));
    let wc = r.recv_cq();
    assert_eq!(wc[0].status, WcStatus::Success);
    assert!(wc[0].wc_flags.contains(WcFlags::WITH_INV));
    assert_eq!(wc[0].imm_or_inv, key.0);
    let psn = r.take_psn(1);
    r.deliver(&write_only(&r, psn, WVA, key, &[1; 8]));
    assert_eq!(
        r.sent()[0].aeth,
        Some((Syndrome::Nak(NakCode::RemoteAccessError), 1))
    );
}

#[test]
fn type2_window_works_through_its_qp_only() {
    let (mut r, _mem, mr) = rig();
    // A second QP of the same protection domain binds the window.
    let (other, _) = r.dev.create_qp(&small_rc(r.pd, r.scq, r.rcq)).unwrap();
    let (mw, rkey) = r.dev.alloc_mw(r.pd, MwType::Type2).unwrap();
    // Bring the other QP to RTS so it may post.
    for (to, attr) in [
        (
            QpState::Init,
            QpAttr {
                qp_state: QpState::Init,
                qp_access_flags: Access::REMOTE_WRITE,
                ..Default::default()
            },
        ),
        (
            QpState::Rtr,
            QpAttr {
                qp_state: QpState::Rtr,
                dest_qp_num: Qpn::new(0x77),
                ah_attr: AddressVector::to(ip(PEER_IP)),
                max_dest_rd_atomic: 1,
                ..Default::default()
            },
        ),
        (
            QpState::Rts,
            QpAttr {
                qp_state: QpState::Rts,
                timeout: 10,
                max_rd_atomic: 1,
                ..Default::default()
            },
        ),
    ] {
        let from = r.dev.qp_state(other).unwrap();
        let m = AttrMask::required(QpType::Rc, from, to).unwrap();
        r.dev.modify_qp(r.now, other, &attr, m).unwrap();
    }
    let wr = bind_wr(4, mw, rkey, mr, WVA, 0x100, Access::REMOTE_WRITE);
    r.dev.post_send(r.now, other, wr).unwrap();
    let mut buf = vec![0u8; 8192];
    while r.dev.poll_transmit(r.now, &mut buf).is_some() {}
    assert_eq!(r.send_cq()[0].status, WcStatus::Success);
    let (key, _, _) = r.dev.mw(mw).unwrap();
    // Through the rig's QP: refused.
    let psn = r.take_psn(1);
    r.deliver(&write_only(&r, psn, WVA, key, &[1; 8]));
    assert_eq!(
        r.sent()[0].aeth,
        Some((Syndrome::Nak(NakCode::RemoteAccessError), 0))
    );
    // The window is bound: the region cannot go; destroying its QP frees it.
    assert!(r.dev.dereg_mr(mr).is_err());
    r.dev.destroy_qp(other).unwrap();
    r.dev.dereg_mr(mr).unwrap();
    r.dev.dealloc_mw(mw).unwrap();
}

#[test]
fn failed_binds_complete_with_mw_bind_error_and_stop_the_qp() {
    // The rig's own region has no MW_BIND right (C10-73).
    let mut r = Rig::new(Setup::default());
    let (mw, rkey) = r.dev.alloc_mw(r.pd, MwType::Type1).unwrap();
    let key = r.key;
    r.post_send(bind_wr(1, mw, rkey, key, VA, 64, Access::REMOTE_READ));
    r.post_send(SendWr::new(2, WrOpcode::Send));
    assert!(r.sent().is_empty());
    let wc = r.send_cq();
    assert_eq!(wc.len(), 2);
    assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::MwBindErr));
    assert_eq!((wc[1].wr_id, wc[1].status), (2, WcStatus::WrFlushErr));
    assert_eq!(r.state(), QpState::Err);
}

#[test]
fn local_invalidate_of_a_type1_window_is_a_local_qp_operation_error() {
    // o10-37.2.26; rxe completes a failed LOCAL_INV with LOC_QP_OP_ERR.
    let (mut r, _mem, mr) = rig();
    let (_mw, key) = bind(&mut r, MwType::Type1, mr, WVA, 0x100, Access::REMOTE_WRITE);
    let mut inv = SendWr::new(3, WrOpcode::LocalInv);
    inv.invalidate_rkey = key;
    r.post_send(inv);
    assert!(r.sent().is_empty());
    let wc = r.send_cq();
    assert_eq!(wc[0].status, WcStatus::LocQpOpErr);
    assert_eq!(r.state(), QpState::Err);
}

#[test]
fn a_bound_region_stays_and_a_deallocated_window_is_dead() {
    let (mut r, _mem, mr) = rig();
    let (mw, key) = bind(&mut r, MwType::Type2, mr, WVA, 0x100, Access::REMOTE_WRITE);
    // IBA 10.6.7.2.6: no deregistration while a window is bound; and a
    // LOCAL_INV of the region fails too.
    assert!(matches!(
        r.dev.dereg_mr(mr),
        Err(VerbsError::InvalidArgument(_))
    ));
    assert!(r.dev.dealloc_pd(r.pd).is_err());
    r.dev.dealloc_mw(mw).unwrap();
    let psn = r.take_psn(1);
    r.deliver(&write_only(&r, psn, WVA, key, &[1; 8]));
    assert_eq!(
        r.sent()[0].aeth,
        Some((Syndrome::Nak(NakCode::RemoteAccessError), 0))
    );
    r.dev.dereg_mr(mr).unwrap();
}

#[test]
fn zero_based_type2_window_takes_offsets() {
    let (mut r, mem, mr) = rig();
    let zb = Access::REMOTE_WRITE.with(Access::ZERO_BASED);
    let (_mw, key) = bind(&mut r, MwType::Type2, mr, WVA + 0x800, 0x100, zb);
    let psn = r.take_psn(1);
    r.deliver(&write_only(&r, psn, 0x10, key, &[6; 16]));
    assert_eq!(r.sent()[0].aeth, Some((Syndrome::ACK, 1)));
    assert_eq!(mem.snapshot()[0x810..0x820], [6; 16]);
    // The window's own start address is not an offset inside it.
    let psn = r.take_psn(1);
    r.deliver(&write_only(&r, psn, WVA + 0x800, key, &[6; 16]));
    assert_eq!(
        r.sent()[0].aeth,
        Some((Syndrome::Nak(NakCode::RemoteAccessError), 1))
    );
}

#[test]
fn binds_are_refused_at_post_on_ud_and_with_data() {
    let mut r = Rig::new(Setup {
        qp_type: QpType::Ud,
        ..Default::default()
    });
    let (mw, rkey) = r.dev.alloc_mw(r.pd, MwType::Type1).unwrap();
    let wr = bind_wr(1, mw, rkey, r.key, VA, 8, Access::REMOTE_READ);
    assert!(r.dev.post_send(r.now, r.qpn, wr).is_err());
    let mut r = Rig::new(Setup::default());
    let (mw, rkey) = r.dev.alloc_mw(r.pd, MwType::Type1).unwrap();
    let mut wr = bind_wr(1, mw, rkey, r.key, VA, 8, Access::REMOTE_READ);
    wr.sg_list.push(Sge::new(VA, 4, r.key));
    assert!(r.dev.post_send(r.now, r.qpn, wr).is_err());
}
