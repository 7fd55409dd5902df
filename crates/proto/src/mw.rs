//! Memory windows (IBA 10.6.7): a range of a registered region lent to
//! peers under an R_Key of its own, with rights of its own.
//!
//! - A window belongs to a protection domain. Its R_Key is an index fixed
//!   for its life (the upper 24 bits) and a key byte the consumer picks at
//!   each bind (`ibv_inc_rkey`), so a key given out for an earlier binding
//!   stops working when the window is bound again.
//! - Type 1 windows start valid and unbound; any bind replaces the binding
//!   (length 0 unbinds); they are not invalidated by LOCAL_INV or
//!   SEND_WITH_INV (o10-37.2.26).
//! - Type 2 windows start free; a BIND_MW work request on a QP of their
//!   protection domain binds them to that QP (the window is then usable
//!   through that QP only: type 2A names it by number, 2B by the QP
//!   itself, which for RC and UC is the same, since a window bound to a
//!   QP is freed when the QP is destroyed); they must be free to be bound
//!   (o10-37.2.30), and LOCAL_INV or SEND_WITH_INV with their current key
//!   frees them.
//! - A bind checks the region (C10-73…C10-75): it has MW_BIND, it is in
//!   the window's protection domain, it grants local write when the window
//!   grants remote write or atomics, the window fits inside it, and a
//!   zero-based window goes on type 2 only (o10-36.2.2). A failed bind
//!   completes with `IBV_WC_MW_BIND_ERR` and takes the QP to the error
//!   state, as rxe's does.
//! - A region with windows bound cannot be deregistered, invalidated or
//!   re-registered (10.6.7.2.6); deallocating a window unbinds it.
//!
//! A remote access through a window must fall inside the window's range
//! and need only rights the window grants (rxe checks the region's range
//! only; the IBA and NICs check the window's).

use crate::memory::{AccessDenied, MrTable};
use crate::verbs::{Access, MwBind, MwId, MwType, PdId, VerbsError, VerbsResult};
use crate::KeyRng;
use softrdma_wire::{Qpn, RKey};

/// A memory window.
#[derive(Clone, Debug)]
pub(crate) struct Mw {
    pub pd: PdId,
    pub kind: MwType,
    /// The current R_Key (index << 8 | key byte of the last bind).
    pub rkey: RKey,
    /// What it is bound to; `None`: unbound (type 1) or free (type 2).
    pub binding: Option<Binding>,
}

/// A window's binding.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Binding {
    /// Key of the region.
    pub mr_key: u32,
    /// First address of the window, an address of the region.
    pub addr: u64,
    /// Length (> 0).
    pub len: u64,
    /// Rights granted.
    pub access: Access,
    /// The QP a type 2 window is bound to.
    pub qpn: Option<Qpn>,
}

/// Why a bind failed: each becomes a completion with `IBV_WC_MW_BIND_ERR`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindError {
    /// No such window, or not in the QP's protection domain (C10-72).
    Window,
    /// A type 2 window that is not free (o10-37.2.30).
    NotFree,
    /// No region with that key, or not in the window's protection domain.
    Region,
    /// The region does not allow windows (C10-73: no MW_BIND).
    NoBindRight,
    /// Remote write or atomics through a region without local write (C10-74).
    NeedsLocalWrite,
    /// The window does not fit in the region (C10-75).
    Range,
    /// Zero-based type 1 window (o10-36.2.2), length 0 for type 2
    /// (o10-37.2.40), or rights a window cannot grant.
    Invalid,
}

impl Mw {
    /// Checks a remote access through the window; returns the region's key
    /// and the region address the access starts at.
    pub(crate) fn check_access(
        &self,
        pd: PdId,
        qpn: Qpn,
        rkey: RKey,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<(u32, u64), AccessDenied> {
        let b = self.binding.as_ref().ok_or(AccessDenied)?;
        if self.rkey != rkey || self.pd != pd || !b.access.contains(need) {
            return Err(AccessDenied);
        }
        if self.kind == MwType::Type2 && b.qpn != Some(qpn) {
            return Err(AccessDenied);
        }
        let off = if b.access.contains(Access::ZERO_BASED) {
            va
        } else {
            va.checked_sub(b.addr).ok_or(AccessDenied)?
        };
        let end = off.checked_add(len).ok_or(AccessDenied)?;
        if end > b.len {
            return Err(AccessDenied);
        }
        Ok((b.mr_key, b.addr + off))
    }
}

impl MrTable {
    /// `ibv_alloc_mw`: a window of `kind` in `pd`, unbound (type 1) or
    /// free (type 2), with a fresh index and a random key byte.
    pub fn alloc_mw(&mut self, rng: &mut KeyRng, pd: PdId, kind: MwType) -> VerbsResult<RKey> {
        if self.mws.len() >= crate::limits::MAX_MW {
            return Err(VerbsError::NoMemory);
        }
        let index = self.fresh_mw_index(rng);
        let rkey = RKey(index << 8 | (rng.next_u32() & 0xff));
        self.mws.insert(
            index,
            Mw {
                pd,
                kind,
                rkey,
                binding: None,
            },
        );
        self.pd_hold(pd);
        Ok(rkey)
    }

    /// `ibv_dealloc_mw`: unbinds the window (if bound) and frees it.
    pub fn dealloc_mw(&mut self, mw: MwId) -> VerbsResult<()> {
        if !self.mws.contains_key(&mw.0) {
            return Err(VerbsError::NoSuchObject);
        }
        self.unbind(mw);
        let w = self.mws.remove(&mw.0).ok_or(VerbsError::NoSuchObject)?;
        self.pd_drop(w.pd);
        Ok(())
    }

    /// The window's current R_Key, type and protection domain.
    pub fn mw_info(&self, mw: MwId) -> Option<(RKey, MwType, PdId)> {
        self.mws.get(&mw.0).map(|w| (w.rkey, w.kind, w.pd))
    }

    /// Whether the window is bound (type 1) or valid (type 2).
    pub fn mw_bound(&self, mw: MwId) -> bool {
        self.mws.get(&mw.0).is_some_and(|w| w.binding.is_some())
    }

    /// Removes a window's binding and releases its region.
    pub(crate) fn unbind(&mut self, mw: MwId) {
        let Some(w) = self.mws.get_mut(&mw.0) else {
            return;
        };
        if let Some(b) = w.binding.take() {
            if let Some(mr) = self.get_mut(b.mr_key) {
                mr.windows = mr.windows.saturating_sub(1);
            }
        }
    }

    /// Unbinds every window bound to the region with key `mr_key` (a
    /// deregistration that cannot be refused: a Rust drop).
    pub(crate) fn unbind_region(&mut self, mr_key: u32) {
        let bound: Vec<u32> = self
            .mws
            .iter()
            .filter(|(_, w)| w.binding.as_ref().is_some_and(|b| b.mr_key == mr_key))
            .map(|(&i, _)| i)
            .collect();
        for i in bound {
            self.unbind(MwId(i));
        }
    }

    /// Frees every type 2 window bound to a QP that goes away.
    pub(crate) fn unbind_qp(&mut self, qpn: Qpn) {
        let bound: Vec<u32> = self
            .mws
            .iter()
            .filter(|(_, w)| w.binding.as_ref().is_some_and(|b| b.qpn == Some(qpn)))
            .map(|(&i, _)| i)
            .collect();
        for i in bound {
            self.unbind(MwId(i));
        }
    }

    /// Executes a BIND_MW work request of QP `qpn` in `pd` (rxe_bind_mw's
    /// checks, in its order). On success the window's key byte becomes
    /// the request's and the window is bound (or, type 1 with length 0,
    /// unbound).
    pub fn bind_mw(&mut self, pd: PdId, qpn: Qpn, bind: &MwBind) -> Result<RKey, BindError> {
        let w = self.mws.get(&bind.mw.0).ok_or(BindError::Window)?;
        let (kind, mw_pd, free) = (w.kind, w.pd, w.binding.is_none());
        if bind.access.0 & !Access::MW_SUPPORTED != 0 {
            return Err(BindError::Invalid);
        }
        let zero_based = bind.access.contains(Access::ZERO_BASED);
        match kind {
            MwType::Type1 => {
                if zero_based {
                    return Err(BindError::Invalid);
                }
            }
            MwType::Type2 => {
                if !free {
                    return Err(BindError::NotFree);
                }
                if bind.length == 0 {
                    return Err(BindError::Invalid);
                }
            }
        }
        // C10-72: the QP and the window share a protection domain.
        if mw_pd != pd {
            return Err(BindError::Window);
        }
        if bind.length > 0 {
            let mr = self.get(bind.mr_lkey).ok_or(BindError::Region)?;
            if mr.pd != mw_pd || !mr.valid {
                return Err(BindError::Region);
            }
            if !mr.access.contains(Access::MW_BIND) {
                return Err(BindError::NoBindRight);
            }
            if bind
                .access
                .intersects(Access::REMOTE_WRITE.with(Access::REMOTE_ATOMIC))
                && !mr.access.contains(Access::LOCAL_WRITE)
            {
                return Err(BindError::NeedsLocalWrite);
            }
            if mr.offset_of(bind.addr, bind.length).is_none() {
                return Err(BindError::Range);
            }
        }
        self.unbind(bind.mw);
        let binding = (bind.length > 0).then_some(Binding {
            mr_key: bind.mr_lkey,
            addr: bind.addr,
            len: bind.length,
            access: bind.access,
            qpn: (kind == MwType::Type2).then_some(qpn),
        });
        if binding.is_some() {
            if let Some(mr) = self.get_mut(bind.mr_lkey) {
                mr.windows += 1;
            }
        }
        let w = self.mws.get_mut(&bind.mw.0).ok_or(BindError::Window)?;
        w.rkey = RKey(w.rkey.0 & !0xff | bind.rkey.0 & 0xff);
        w.binding = binding;
        Ok(w.rkey)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{RegionMemory, VecMemory};
    use std::sync::Arc;

    const QA: Qpn = Qpn::new(0x20);
    const QB: Qpn = Qpn::new(0x21);

    fn table() -> (MrTable, KeyRng, u32) {
        let mut rng = KeyRng::from_seed(7);
        let mut t = MrTable::default();
        let mem: Arc<dyn RegionMemory> = Arc::new(VecMemory::new(0x1000));
        let access = Access::LOCAL_WRITE
            .with(Access::REMOTE_READ)
            .with(Access::MW_BIND);
        let k = t.register(&mut rng, PdId(1), 0x10000, mem, access).unwrap();
        (t, rng, k)
    }

    fn bind(mw: RKey, mr: u32, addr: u64, length: u64, access: Access) -> MwBind {
        MwBind {
            mw: MwId(mw.0 >> 8),
            rkey: RKey(mw.0.wrapping_add(1)),
            mr_lkey: mr,
            addr,
            length,
            access,
        }
    }

    #[test]
    fn type1_window_limits_range_and_rights_and_rebinds() {
        let (mut t, mut rng, k) = table();
        let pd = PdId(1);
        let rk = t.alloc_mw(&mut rng, pd, MwType::Type1).unwrap();
        assert!(t.get(rk.0).is_none(), "window keys never name regions");
        // Unbound: nothing reaches through it.
        assert!(t.resolve_remote(pd, QA, rk, 0x10000, 8, Access(0)).is_err());
        let b = bind(rk, k, 0x10100, 0x100, Access::REMOTE_READ);
        let rk2 = t.bind_mw(pd, QA, &b).unwrap();
        assert_eq!(rk2.0 >> 8, rk.0 >> 8);
        assert_eq!(rk2.0 & 0xff, (rk.0 + 1) & 0xff);
        assert_eq!(t.get(k).unwrap().windows, 1);
        // The old key no longer works, the new one within the window only.
        assert!(t
            .resolve_remote(pd, QA, rk, 0x10100, 8, Access::REMOTE_READ)
            .is_err());
        let s = t
            .resolve_remote(pd, QB, rk2, 0x10100, 0x100, Access::REMOTE_READ)
            .unwrap();
        assert_eq!((s.offset, s.len), (0x100, 0x100));
        for (va, len) in [(0x100ff, 1), (0x10100, 0x101), (0x101ff, 2), (u64::MAX, 2)] {
            assert!(t
                .resolve_remote(pd, QA, rk2, va, len, Access::REMOTE_READ)
                .is_err());
        }
        // Rights of the window, not the region's.
        assert!(t
            .resolve_remote(pd, QA, rk2, 0x10100, 8, Access::REMOTE_WRITE)
            .is_err());
        assert!(t
            .resolve_remote(PdId(2), QA, rk2, 0x10100, 8, Access::REMOTE_READ)
            .is_err());
        // Deregistration is refused while bound; LOCAL_INV of a type 1
        // window fails; a zero-length bind unbinds.
        assert!(t.deregister(k).is_err());
        assert!(t.invalidate(rk2.0, pd, QA, false).is_err());
        assert!(
            t.invalidate(k, pd, QA, false).is_err(),
            "region with windows"
        );
        let rk3 = t.bind_mw(pd, QA, &bind(rk2, k, 0, 0, Access(0))).unwrap();
        assert_eq!(t.get(k).unwrap().windows, 0);
        assert!(t
            .resolve_remote(pd, QA, rk3, 0x10100, 8, Access::REMOTE_READ)
            .is_err());
        t.deregister(k).unwrap();
        t.dealloc_mw(MwId(rk.0 >> 8)).unwrap();
        assert_eq!(t.count_in_pd(pd), 0);
    }

    #[test]
    fn type2_window_is_bound_to_one_qp_and_invalidated() {
        let (mut t, mut rng, k) = table();
        let pd = PdId(1);
        let rk = t.alloc_mw(&mut rng, pd, MwType::Type2).unwrap();
        assert_eq!(
            t.bind_mw(pd, QA, &bind(rk, k, 0x10000, 0, Access::REMOTE_READ)),
            Err(BindError::Invalid),
            "o10-37.2.40: length 0"
        );
        let zb = Access::REMOTE_READ.with(Access::ZERO_BASED);
        let rk2 = t.bind_mw(pd, QA, &bind(rk, k, 0x10800, 0x800, zb)).unwrap();
        // Zero-based: the address is an offset in the window.
        let s = t
            .resolve_remote(pd, QA, rk2, 0x10, 0x20, Access::REMOTE_READ)
            .unwrap();
        assert_eq!(s.offset, 0x810);
        assert!(t
            .resolve_remote(pd, QA, rk2, 0x7f9, 8, Access::REMOTE_READ)
            .is_err());
        // Through another QP: refused.
        assert!(t
            .resolve_remote(pd, QB, rk2, 0, 8, Access::REMOTE_READ)
            .is_err());
        assert_eq!(
            t.bind_mw(pd, QA, &bind(rk2, k, 0x10000, 8, Access::REMOTE_READ)),
            Err(BindError::NotFree)
        );
        // SEND_WITH_INV from another QP or with a stale key: refused.
        assert!(t.invalidate(rk2.0, pd, QB, true).is_err());
        assert!(t.invalidate(rk.0, pd, QA, true).is_err());
        t.invalidate(rk2.0, pd, QA, true).unwrap();
        assert!(t
            .resolve_remote(pd, QA, rk2, 0, 8, Access::REMOTE_READ)
            .is_err());
        assert!(t.invalidate(rk2.0, pd, QA, false).is_err(), "already free");
        // Free again: bindable; a destroyed QP frees it.
        let rk3 = t
            .bind_mw(pd, QB, &bind(rk2, k, 0x10000, 8, Access::REMOTE_READ))
            .unwrap();
        assert_eq!(t.get(k).unwrap().windows, 1);
        t.unbind_qp(QB);
        assert_eq!(t.get(k).unwrap().windows, 0);
        assert!(t
            .resolve_remote(pd, QB, rk3, 0x10000, 8, Access::REMOTE_READ)
            .is_err());
    }

    #[test]
    fn bind_checks_the_region() {
        let (mut t, mut rng, k) = table();
        let pd = PdId(1);
        let mem: Arc<dyn RegionMemory> = Arc::new(VecMemory::new(64));
        let plain = t
            .register(&mut rng, pd, 0x90000, mem, Access::LOCAL_WRITE)
            .unwrap();
        let rk = t.alloc_mw(&mut rng, pd, MwType::Type1).unwrap();
        let r = Access::REMOTE_READ;
        assert_eq!(
            t.bind_mw(pd, QA, &bind(rk, plain, 0x90000, 8, r)),
            Err(BindError::NoBindRight)
        );
        assert_eq!(
            t.bind_mw(pd, QA, &bind(rk, k ^ 0x8000_0000, 0x10000, 8, r)),
            Err(BindError::Region)
        );
        assert_eq!(
            t.bind_mw(pd, QA, &bind(rk, k, 0x10f00, 0x101, r)),
            Err(BindError::Range)
        );
        assert_eq!(
            t.bind_mw(pd, QA, &bind(rk, k, 0x10000, 8, r.with(Access::ZERO_BASED))),
            Err(BindError::Invalid),
            "o10-36.2.2: zero-based type 1"
        );
        assert_eq!(
            t.bind_mw(PdId(2), QA, &bind(rk, k, 0x10000, 8, r)),
            Err(BindError::Window),
            "C10-72"
        );
        assert_eq!(
            t.bind_mw(pd, QA, &bind(rk, k, 0x10000, 8, Access(1 << 12))),
            Err(BindError::Invalid)
        );
        // Writable window on a region without local write (C10-74).
        let mem: Arc<dyn RegionMemory> = Arc::new(VecMemory::new(64));
        let ro = t
            .register(
                &mut rng,
                pd,
                0xa0000,
                mem,
                Access::REMOTE_READ.with(Access::MW_BIND),
            )
            .unwrap();
        assert_eq!(
            t.bind_mw(pd, QA, &bind(rk, ro, 0xa0000, 8, Access::REMOTE_WRITE)),
            Err(BindError::NeedsLocalWrite)
        );
        assert!(t.bind_mw(pd, QA, &bind(rk, ro, 0xa0000, 8, r)).is_ok());
        // Window and region keys never collide.
        for _ in 0..100 {
            let w = t.alloc_mw(&mut rng, pd, MwType::Type2).unwrap();
            assert!((0..=255).all(|b| t.get(w.0 & !0xff | b).is_none()));
        }
    }
}
