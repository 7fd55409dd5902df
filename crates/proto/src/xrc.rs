//! XRC at the device (IBA 11.x XRC domains and XRC SRQs; libibverbs'
//! `ibv_open_xrcd`, `ibv_create_srq_ex` with `IBV_SRQT_XRC`,
//! `ibv_get_srq_num`, `ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`): XRC
//! domains, XRC SRQs with their numbers, XRC TGT QPs. The transport side
//! (the XRCETH, TGT QPs taking requests through the SRQ it names) is in
//! `qp::xrc`; XRC INI QPs are created like RC QPs (`create_qp` with
//! `QpType::XrcSend`).
//!
//! Sharing an XRC domain between users (`ibv_open_xrcd`'s file
//! descriptor) and opening a TGT QP by number (`ibv_open_qp`) are the API
//! layers' (a domain or TGT QP here lives until its last user destroys
//! it).

use crate::device::Device;
use crate::limits;
use crate::qp::{Qp, Srq, XrcSrq};
use crate::verbs::*;
use softrdma_wire::Qpn;
use std::collections::VecDeque;

/// An XRC domain: what uses it.
#[derive(Debug, Default)]
pub(crate) struct Xrcd {
    /// XRC SRQs in the domain.
    pub srqs: u32,
    /// XRC TGT QPs in the domain.
    pub tgt_qps: u32,
}

/// The PD and CQ handle an XRC TGT QP holds before a request names its
/// SRQ (it has none of its own): they name no object.
pub(crate) const NO_OBJECT: u32 = u32::MAX;

impl Device {
    /// `ibv_open_xrcd` (a new domain).
    pub fn alloc_xrcd(&mut self) -> VerbsResult<XrcdId> {
        if self.xrcds.len() >= limits::MAX_XRCD {
            return Err(VerbsError::NoMemory);
        }
        Ok(XrcdId(self.xrcds.insert(Xrcd::default())))
    }

    /// `ibv_close_xrcd`: `Busy` while XRC SRQs or TGT QPs are in it.
    pub fn dealloc_xrcd(&mut self, xrcd: XrcdId) -> VerbsResult<()> {
        let x = self.xrcds.get(xrcd.0).ok_or(VerbsError::NoSuchObject)?;
        if x.srqs > 0 || x.tgt_qps > 0 {
            return Err(VerbsError::Busy);
        }
        self.xrcds.remove(xrcd.0);
        Ok(())
    }

    /// `ibv_create_srq_ex` with `IBV_SRQT_XRC`: an SRQ of protection domain
    /// `pd` in XRC domain `xrcd`, completing to `cq`. Returns its handle
    /// and its number (drawn at random from the 24-bit space, never 0: what
    /// a peer's XRCETH names).
    pub fn create_xrc_srq(
        &mut self,
        pd: PdId,
        xrcd: XrcdId,
        cq: CqId,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
    ) -> VerbsResult<(SrqId, u32)> {
        if self.xrcds.get(xrcd.0).is_none() {
            return Err(VerbsError::InvalidArgument("unknown XRC domain"));
        }
        if self.cqs.get(cq.0).is_none() {
            return Err(VerbsError::InvalidArgument("unknown CQ"));
        }
        let srq = self.create_srq(pd, max_wr, max_sge, limit)?;
        let mut srqn = None;
        for _ in 0..limits::SRQN_DRAW_TRIES {
            let n = self.rng.next_u32() & 0x00ff_ffff;
            if n != 0 && !self.xrc_srqns.contains_key(&n) {
                srqn = Some(n);
                break;
            }
        }
        let Some(srqn) = srqn else {
            let _ = self.destroy_srq(srq);
            return Err(VerbsError::NoMemory);
        };
        if let Some(s) = self.srqs.get_mut(srq.0) {
            s.xrc = Some(XrcSrq { xrcd, cq, srqn });
        }
        self.xrc_srqns.insert(srqn, srq.0);
        if let Some(c) = self.cqs.get_mut(cq.0) {
            c.users += 1;
        }
        if let Some(x) = self.xrcds.get_mut(xrcd.0) {
            x.srqs += 1;
        }
        Ok((srq, srqn))
    }

    /// `ibv_get_srq_num`: the number of an XRC SRQ.
    pub fn srq_num(&self, srq: SrqId) -> VerbsResult<u32> {
        let s = self.srqs.get(srq.0).ok_or(VerbsError::NoSuchObject)?;
        s.xrc
            .map(|x| x.srqn)
            .ok_or(VerbsError::InvalidArgument("not an XRC SRQ"))
    }

    /// The XRC domain and CQ of an XRC SRQ (`None` for a basic SRQ).
    pub fn xrc_srq(&self, srq: SrqId) -> VerbsResult<Option<(XrcdId, CqId)>> {
        let s = self.srqs.get(srq.0).ok_or(VerbsError::NoSuchObject)?;
        Ok(s.xrc.map(|x| (x.xrcd, x.cq)))
    }

    /// What destroying an XRC SRQ releases (called by `destroy_srq`).
    pub(crate) fn forget_xrc_srq(&mut self, s: &Srq) {
        if let Some(x) = s.xrc {
            self.xrc_srqns.remove(&x.srqn);
            if let Some(c) = self.cqs.get_mut(x.cq.0) {
                c.users -= 1;
            }
            if let Some(d) = self.xrcds.get_mut(x.xrcd.0) {
                d.srqs -= 1;
            }
        }
    }

    /// `ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`: an XRC TGT QP in
    /// `xrcd` (in RESET). Its number is drawn like any QP's.
    pub fn create_xrc_tgt_qp(&mut self, xrcd: XrcdId) -> VerbsResult<Qpn> {
        if self.xrcds.get(xrcd.0).is_none() {
            return Err(VerbsError::InvalidArgument("unknown XRC domain"));
        }
        if self.qps.len() >= limits::MAX_QP {
            return Err(VerbsError::NoMemory);
        }
        let map = &self.qpn_map;
        let qpn = self
            .qpns
            .alloc(&mut self.rng, |n| map.contains_key(&n))
            .ok_or(VerbsError::NoMemory)?;
        let init = QpInit {
            qp_type: QpType::XrcRecv,
            pd: PdId(NO_OBJECT),
            send_cq: CqId(NO_OBJECT),
            recv_cq: CqId(NO_OBJECT),
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        };
        let mut qp = Qp::new(qpn, &init);
        qp.xrcd = Some(xrcd);
        let idx = self.qps.insert(qp);
        self.qpn_map.insert(qpn.value(), idx);
        if let Some(x) = self.xrcds.get_mut(xrcd.0) {
            x.tgt_qps += 1;
        }
        Ok(qpn)
    }

    /// The XRC domain of an XRC TGT QP.
    pub fn qp_xrcd(&self, qpn: Qpn) -> VerbsResult<Option<XrcdId>> {
        let idx = *self
            .qpn_map
            .get(&qpn.value())
            .ok_or(VerbsError::NoSuchObject)?;
        Ok(self.qps.get(idx).ok_or(VerbsError::NoSuchObject)?.xrcd)
    }

    /// What destroying a QP releases that is XRC's (called by
    /// `destroy_qp`): a TGT QP's place in its domain. Returns whether the
    /// QP was a TGT QP (which holds no CQ, SRQ or PD of its own).
    pub(crate) fn forget_xrc_qp(&mut self, qp: &Qp) -> bool {
        let Some(x) = qp.xrcd else { return false };
        if let Some(d) = self.xrcds.get_mut(x.0) {
            d.tgt_qps -= 1;
        }
        true
    }
}

/// An empty queue for a new SRQ (kept here so `srq` and `xrc` build SRQs
/// the same way).
pub(crate) fn new_srq(pd: PdId, max_wr: u32, max_sge: u32, limit: u32) -> Srq {
    Srq {
        xrc: None,
        pd,
        queue: VecDeque::new(),
        max_wr,
        max_sge: max_sge.max(1),
        limit,
        users: 0,
    }
}
