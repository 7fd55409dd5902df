//! On-demand paging, implicit regions, `ibv_advise_mr` and `ibv_rereg_mr`
//! at the core: memory that is not there when an access happens is an
//! access error for that access (a NAK for a peer, a completion error for
//! a local request), never a touch of anything else.

mod support;

use softrdma_proto::*;
use softrdma_wire::*;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use support::*;

const PAGE: usize = 4096;

/// Memory made of pages that may be absent (unmapped): an access that
/// touches an absent page faults, as `process_vm_readv` on a hole does.
/// `len` may be the whole address space (implicit regions).
struct Sparse {
    len: usize,
    pages: Mutex<BTreeMap<usize, Vec<u8>>>,
    prefetched: Mutex<Vec<(usize, usize, bool)>>,
}

impl Sparse {
    fn new(len: usize, present: impl IntoIterator<Item = usize>) -> Arc<Sparse> {
        let pages = present.into_iter().map(|p| (p, vec![0u8; PAGE])).collect();
        Arc::new(Sparse {
            len,
            pages: Mutex::new(pages),
            prefetched: Mutex::new(Vec::new()),
        })
    }
    fn unmap(&self, page: usize) {
        self.pages.lock().unwrap().remove(&page);
    }
    fn present(&self, offset: usize, len: usize) -> bool {
        let p = self.pages.lock().unwrap();
        (offset / PAGE..=(offset + len.max(1) - 1) / PAGE).all(|i| p.contains_key(&i))
    }
    fn each(&self, offset: usize, len: usize, mut f: impl FnMut(&mut [u8], usize)) {
        let mut p = self.pages.lock().unwrap();
        let mut done = 0;
        while done < len {
            let at = offset + done;
            let page = p.get_mut(&(at / PAGE)).expect("checked");
            let o = at % PAGE;
            let n = (PAGE - o).min(len - done);
            f(&mut page[o..o + n], done);
            done += n;
        }
    }
    fn peek(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.each(offset, len, |s, at| v[at..at + s.len()].copy_from_slice(s));
        v
    }
}

impl RegionMemory for Sparse {
    fn len(&self) -> usize {
        self.len
    }
    fn read(&self, offset: usize, dst: &mut [u8]) -> std::result::Result<(), Fault> {
        if !self.present(offset, dst.len()) {
            return Err(Fault);
        }
        self.each(offset, dst.len(), |s, at| {
            dst[at..at + s.len()].copy_from_slice(s)
        });
        Ok(())
    }
    fn write(&self, offset: usize, src: &[u8]) -> std::result::Result<(), Fault> {
        if !self.present(offset, src.len()) {
            return Err(Fault);
        }
        self.each(offset, src.len(), |s, at| {
            s.copy_from_slice(&src[at..at + s.len()])
        });
        Ok(())
    }
    fn fetch_add(&self, offset: usize, add: u64) -> std::result::Result<u64, Fault> {
        let mut b = [0u8; 8];
        self.read(offset, &mut b)?;
        let old = u64::from_ne_bytes(b);
        self.write(offset, &old.wrapping_add(add).to_ne_bytes())?;
        Ok(old)
    }
    fn compare_swap(
        &self,
        offset: usize,
        compare: u64,
        swap: u64,
    ) -> std::result::Result<u64, Fault> {
        let mut b = [0u8; 8];
        self.read(offset, &mut b)?;
        let old = u64::from_ne_bytes(b);
        if old == compare {
            self.write(offset, &swap.to_ne_bytes())?;
        }
        Ok(old)
    }
    fn atomic_write(&self, offset: usize, bytes: [u8; 8]) -> std::result::Result<(), Fault> {
        self.write(offset, &bytes)
    }
    fn prefetch(&self, offset: usize, len: usize, write: bool) -> std::result::Result<(), Fault> {
        self.prefetched.lock().unwrap().push((offset, len, write));
        if self.present(offset, len) {
            Ok(())
        } else {
            Err(Fault)
        }
    }
}

const OVA: u64 = 0x4000_0000;

fn odp_access() -> Access {
    Access::LOCAL_WRITE
        .with(Access::REMOTE_WRITE)
        .with(Access::REMOTE_READ)
        .with(Access::REMOTE_ATOMIC)
        .with(Access::ON_DEMAND)
}

/// A rig with a 4-page on-demand region whose page 2 is absent.
fn rig() -> (Rig, Arc<Sparse>, u32) {
    let mut r = Rig::new(Setup::default());
    let mem = Sparse::new(4 * PAGE, [0, 1, 3]);
    let key = r.dev.reg_mr(r.pd, OVA, mem.clone(), odp_access()).unwrap();
    (r, mem, key)
}

fn nak(code: NakCode, msn: u32) -> Option<(Syndrome, u32)> {
    Some((Syndrome::Nak(code), msn))
}

#[test]
fn a_write_reaching_an_unmapped_page_is_a_remote_access_error() {
    let (mut r, mem, key) = rig();
    let psn = r.take_psn(1);
    r.deliver(&write_only(&r, psn, OVA + 0x10, key, &[5; 64]));
    assert_eq!(r.sent()[0].aeth, Some((Syndrome::ACK, 1)));
    assert_eq!(mem.peek(0x10, 64), [5; 64]);
    let psn = r.take_psn(1);
    r.deliver(&write_only(
        &r,
        psn,
        OVA + 2 * PAGE as u64 + 8,
        key,
        &[6; 64],
    ));
    let out = r.sent();
    assert_eq!(out[0].aeth, nak(NakCode::RemoteAccessError, 1));
    assert_eq!(r.state(), QpState::Err);
}

#[test]
fn a_read_of_an_unmapped_page_ends_with_a_remote_access_error() {
    let (mut r, mem, key) = rig();
    // Three packets at MTU 1024: the first from page 1, the rest from the
    // absent page 2.
    mem.each(PAGE + 3072, 1024, |s, _| s.fill(7));
    let psn = r.take_psn(3);
    r.deliver(&read_req(&r, psn, OVA + PAGE as u64 + 3072, key, 3072));
    let out = r.sent();
    assert_eq!(out[0].opcode, 0x0d);
    assert_eq!(out[0].payload, [7; 1024]);
    assert_eq!(out[1].opcode, 0x11);
    assert_eq!(out[1].psn, psn.add(1).value());
    assert_eq!(out[1].aeth, nak(NakCode::RemoteAccessError, 1));
    assert_eq!(out.len(), 2);
}

#[test]
fn an_atomic_on_an_unmapped_page_is_a_remote_access_error() {
    let (mut r, _mem, key) = rig();
    let psn = r.take_psn(1);
    let mut p = PacketRepr::new(r.bth(0x14, psn), &[]);
    p.atomic_eth = Some(AtomicEthRepr {
        va: OVA + 2 * PAGE as u64,
        rkey: RKey(key),
        swap_add: 1,
        compare: 0,
    });
    r.deliver(&p);
    assert_eq!(r.sent()[0].aeth, nak(NakCode::RemoteAccessError, 0));
}

#[test]
fn local_requests_and_receives_on_unmapped_pages_fail_locally() {
    let (mut r, _mem, key) = rig();
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sg_list = vec![Sge::new(OVA + 2 * PAGE as u64, 100, key)];
    r.post_send(wr);
    assert!(r.sent().is_empty());
    assert_eq!(r.send_cq()[0].status, WcStatus::LocProtErr);

    let (mut r, _mem, key) = rig();
    let wr = RecvWr {
        wr_id: 2,
        sg_list: vec![Sge::new(OVA + 2 * PAGE as u64, 100, key)],
    };
    r.dev.post_recv(r.now, r.qpn, wr).unwrap();
    let psn = r.take_psn(1);
    let p = PacketRepr::new(r.bth(0x04, psn), &[1; 16]);
    r.deliver(&p);
    assert_eq!(r.sent()[0].aeth, nak(NakCode::RemoteOperationalError, 0));
    assert_eq!(r.recv_cq()[0].status, WcStatus::LocProtErr);
}

#[test]
fn an_implicit_region_reaches_any_address() {
    let mut r = Rig::new(Setup::default());
    let far = 0x7ffd_1234_5000u64;
    let mem = Sparse::new(usize::MAX, [far as usize / PAGE]);
    let key = r.dev.reg_mr(r.pd, 0, mem.clone(), odp_access()).unwrap();
    assert_eq!(r.dev.mr(key).unwrap().len, u64::MAX);
    let psn = r.take_psn(1);
    r.deliver(&write_only(&r, psn, far + 0x10, key, &[3; 32]));
    assert_eq!(r.sent()[0].aeth, Some((Syndrome::ACK, 1)));
    assert_eq!(mem.peek(far as usize + 0x10, 32), [3; 32]);
    let psn = r.take_psn(1);
    r.deliver(&read_req(&r, psn, 0x1000, key, 8));
    // The MSN counts the READ from its request on (C9-148), as rxe's.
    assert_eq!(r.sent()[0].aeth, nak(NakCode::RemoteAccessError, 2));
    // Without on-demand paging the whole address space is no region.
    let mut r = Rig::new(Setup::default());
    let mem = Sparse::new(usize::MAX, []);
    assert!(r.dev.reg_mr(r.pd, 0, mem, Access::LOCAL_WRITE).is_err());
}

#[test]
fn advise_prefetches_on_demand_ranges_with_the_man_page_errors() {
    let (mut r, mem, key) = rig();
    let sge = |addr: u64, length: u32, lkey: u32| Sge::new(addr, length, lkey);
    r.dev
        .advise_mr(r.pd, Advice::PrefetchWrite, true, &[sge(OVA, 8192, key)])
        .unwrap();
    assert_eq!(*mem.prefetched.lock().unwrap(), [(0, 8192, true)]);
    // The hole: an error only when the caller asked for a synchronous
    // prefetch (IBV_ADVISE_MR_FLAG_FLUSH).
    let hole = [sge(OVA + 2 * PAGE as u64, 8, key)];
    assert_eq!(
        r.dev.advise_mr(r.pd, Advice::Prefetch, true, &hole),
        Err(VerbsError::Fault)
    );
    r.dev
        .advise_mr(r.pd, Advice::Prefetch, false, &hole)
        .unwrap();
    r.dev
        .advise_mr(r.pd, Advice::PrefetchNoFault, true, &hole)
        .unwrap();
    assert_eq!(
        r.dev
            .advise_mr(r.pd, Advice::Prefetch, true, &[sge(OVA, 8, key ^ 1)]),
        Err(VerbsError::Fault),
        "a key that names no region"
    );
    assert_eq!(
        r.dev.advise_mr(
            r.pd,
            Advice::Prefetch,
            true,
            &[sge(OVA + 4 * PAGE as u64 - 4, 8, key)]
        ),
        Err(VerbsError::Fault),
        "out of the region"
    );
    let rkey = r.key;
    assert!(matches!(
        r.dev
            .advise_mr(r.pd, Advice::Prefetch, true, &[sge(VA, 8, rkey)]),
        Err(VerbsError::InvalidArgument(_))
    ));
    let pd2 = r.dev.alloc_pd().unwrap();
    assert_eq!(
        r.dev
            .advise_mr(pd2, Advice::Prefetch, true, &[sge(OVA, 8, key)]),
        Err(VerbsError::PermissionDenied)
    );
    let ro = r
        .dev
        .reg_mr(
            r.pd,
            0x9000_0000,
            Sparse::new(PAGE, [0]),
            Access::REMOTE_READ.with(Access::ON_DEMAND),
        )
        .unwrap();
    assert_eq!(
        r.dev.advise_mr(
            r.pd,
            Advice::PrefetchWrite,
            true,
            &[sge(0x9000_0000, 8, ro)]
        ),
        Err(VerbsError::PermissionDenied)
    );
    assert!(r.dev.advise_mr(r.pd, Advice::Prefetch, true, &[]).is_err());
    mem.unmap(0);
}

#[test]
fn rereg_access_and_pd_take_effect_at_once_and_keep_the_key() {
    let mut r = Rig::new(Setup::default());
    let key = r.key;
    let psn = r.take_psn(1);
    r.deliver(&write_only(&r, psn, VA, key, &[1; 8]));
    assert_eq!(r.sent()[0].aeth, Some((Syndrome::ACK, 1)));
    // No remote write any more.
    let k = r
        .dev
        .rereg_mr(
            key,
            Rereg {
                access: Some(Access::LOCAL_WRITE.with(Access::REMOTE_READ)),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(k, key);
    let psn = r.take_psn(1);
    r.deliver(&write_only(&r, psn, VA, key, &[2; 8]));
    assert_eq!(r.sent()[0].aeth, nak(NakCode::RemoteAccessError, 1));

    // Another protection domain: the QP's receive buffer no longer fits.
    let mut r = Rig::new(Setup::default());
    let pd2 = r.dev.alloc_pd().unwrap();
    let key = r.key;
    r.post_recv(1, 0, 64);
    r.dev
        .rereg_mr(
            key,
            Rereg {
                pd: Some(pd2),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(r.dev.dealloc_pd(pd2).is_err(), "the region is in it now");
    let psn = r.take_psn(1);
    r.deliver(&PacketRepr::new(r.bth(0x04, psn), &[1; 8]));
    assert_eq!(r.sent()[0].aeth, nak(NakCode::RemoteOperationalError, 0));
    assert_eq!(r.recv_cq()[0].status, WcStatus::LocProtErr);
    // A PD that does not exist, or rights that break IBA 10.6.3.1: refused,
    // nothing changed.
    assert!(r
        .dev
        .rereg_mr(
            key,
            Rereg {
                pd: Some(PdId(999)),
                ..Default::default()
            }
        )
        .is_err());
    assert!(r
        .dev
        .rereg_mr(
            key,
            Rereg {
                access: Some(Access::REMOTE_WRITE),
                ..Default::default()
            }
        )
        .is_err());
    assert_eq!(r.dev.mr(key).unwrap().pd, pd2);
}

/// Re-registers region `key` over `new` at 0x50_0000: its new key.
fn move_to(r: &mut Rig, key: u32, new: &Arc<VecMemory>) -> u32 {
    r.dev
        .rereg_mr(
            key,
            Rereg {
                translation: Some((0x50_0000, new.clone())),
                ..Default::default()
            },
        )
        .unwrap()
}

#[test]
fn rereg_translation_revokes_the_old_memory_and_changes_the_key() {
    let mut r = Rig::new(Setup::default());
    let key = r.key;
    // A SEND is posted from the old memory, not yet sent.
    r.mem.fill_from(0, &[4; 64]);
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sg_list = vec![Sge::new(VA, 64, key)];
    let new = Arc::new(VecMemory::new(4096));
    new.fill_from(0, &[9; 64]);
    r.post_send(wr);
    let k = move_to(&mut r, key, &new);
    assert_ne!(k, key);
    assert!(r.dev.mr(key).is_none());
    // The request that named the old memory fails locally; the old key is
    // dead for peers; the new one reaches the new memory.
    assert!(r.sent().is_empty());
    assert_eq!(r.send_cq()[0].status, WcStatus::LocProtErr);

    let mut r = Rig::new(Setup::default());
    let key = r.key;
    let k = move_to(&mut r, key, &new);
    let psn = r.take_psn(1);
    r.deliver(&write_only(&r, psn, VA, key, &[1; 8]));
    assert_eq!(r.sent()[0].aeth, nak(NakCode::RemoteAccessError, 0));
    let mut r = Rig::new(Setup::default());
    let key = r.key;
    let k2 = move_to(&mut r, key, &new);
    let psn = r.take_psn(1);
    r.deliver(&write_only(&r, psn, 0x50_0010, k2, &[8; 8]));
    assert_eq!(r.sent()[0].aeth, Some((Syndrome::ACK, 1)));
    assert_eq!(new.snapshot()[0x10..0x18], [8; 8]);
    let _ = k;
}
