//! XRC in the safe API: XRC domains, XRC SRQs, XRC TGT QPs (opened again by
//! number in their domain, `ibv_open_qp`), over the core's `xrc` module.
//! XRC INI QPs are built like any QP (`qp_builder(QpType::XrcSend, …)`)
//! and name the target's XRC SRQ in each work request
//! (`SendWr::remote_srqn`).
//!
//! A domain lives while a handle, an XRC SRQ or a TGT QP of it does; a TGT
//! QP while one of its handles does (the kernel's rule: the QP a process
//! created is destroyed with the last handle, whoever opened it).

use crate::device::Device;
use crate::error::{Error, Result};
use crate::sync::Mutex;
use crate::verbs::{CompletionQueue, ProtectionDomain, SharedReceiveQueue, SrqInner};
use softrdma_proto::{AttrMask, Counters, QpAttr, QpState, XrcdId};
use softrdma_wire::Qpn;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

struct XrcdInner {
    dev: Device,
    id: XrcdId,
    /// Its TGT QPs by number, for `open_tgt_qp`.
    tgt: Mutex<HashMap<u32, Weak<TgtInner>>>,
}

impl Drop for XrcdInner {
    fn drop(&mut self) {
        let id = self.id;
        let _ = self.dev.release(|c| c.dealloc_xrcd(id));
    }
}

/// An XRC domain (`ibv_xrcd`).
#[derive(Clone)]
pub struct XrcDomain {
    inner: Arc<XrcdInner>,
}

impl std::fmt::Debug for XrcDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "XrcDomain({:?})", self.inner.id)
    }
}

/// What an XRC SRQ holds besides its PD.
pub(crate) struct XrcSrqParts {
    _xrcd: XrcDomain,
    _cq: CompletionQueue,
    srqn: u32,
}

impl Device {
    /// A new XRC domain (`ibv_open_xrcd` without sharing).
    pub fn alloc_xrcd(&self) -> Result<XrcDomain> {
        let id = self.shared().with_core(|c, _| c.alloc_xrcd())?;
        Ok(XrcDomain {
            inner: Arc::new(XrcdInner {
                dev: self.clone(),
                id,
                tgt: Mutex::new(HashMap::new()),
            }),
        })
    }
}

impl XrcDomain {
    /// The core's handle.
    pub fn id(&self) -> XrcdId {
        self.inner.id
    }

    /// Its device.
    pub fn device(&self) -> &Device {
        &self.inner.dev
    }

    /// Whether two handles are the same domain.
    pub fn same(&self, other: &XrcDomain) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// `ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`: a TGT QP of this domain,
    /// in RESET.
    pub fn create_tgt_qp(&self) -> Result<XrcTgtQp> {
        let x = self.inner.id;
        let qpn = self
            .inner
            .dev
            .shared()
            .with_core(|c, _| c.create_xrc_tgt_qp(x))?;
        let inner = Arc::new(TgtInner {
            xrcd: self.clone(),
            qpn,
        });
        let mut t = self.inner.tgt.lock();
        t.retain(|_, w| w.strong_count() > 0);
        t.insert(qpn.value(), Arc::downgrade(&inner));
        Ok(XrcTgtQp { inner })
    }

    /// `ibv_open_qp`: another handle on TGT QP `qpn` of this domain
    /// (`InvalidArgument`, EINVAL, when the domain has no such QP).
    pub fn open_tgt_qp(&self, qpn: Qpn) -> Result<XrcTgtQp> {
        self.inner
            .tgt
            .lock()
            .get(&qpn.value())
            .and_then(Weak::upgrade)
            .map(|inner| XrcTgtQp { inner })
            .ok_or_else(|| Error::InvalidArgument(format!("no XRC TGT QP {qpn} in the domain")))
    }
}

impl ProtectionDomain {
    /// `ibv_create_srq_ex` with `IBV_SRQT_XRC`: an XRC SRQ of this PD in
    /// `xrcd`, completing to `cq`. Its number ([`SharedReceiveQueue::srq_num`])
    /// is what the peer's XRC requests name.
    pub fn create_xrc_srq(
        &self,
        xrcd: &XrcDomain,
        cq: &CompletionQueue,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
    ) -> Result<SharedReceiveQueue> {
        let dev = self.device();
        if !dev.same_device(xrcd.device()) || !dev.same_device(&cq.inner.dev) {
            return Err(Error::InvalidArgument(
                "the PD, XRC domain and CQ of an XRC SRQ are one device's".into(),
            ));
        }
        let (pd, x, c) = (self.id(), xrcd.id(), cq.id());
        let (id, srqn) = self
            .device()
            .shared()
            .with_core(|core, _| core.create_xrc_srq(pd, x, c, max_wr, max_sge, limit))?;
        Ok(SharedReceiveQueue {
            inner: Arc::new(SrqInner {
                pd: self.clone(),
                id,
                xrc: Some(XrcSrqParts {
                    _xrcd: xrcd.clone(),
                    _cq: cq.clone(),
                    srqn,
                }),
            }),
        })
    }
}

impl SharedReceiveQueue {
    /// `ibv_get_srq_num`: an XRC SRQ's number (`None` for a basic SRQ).
    pub fn srq_num(&self) -> Option<u32> {
        self.inner.xrc.as_ref().map(|x| x.srqn)
    }
}

struct TgtInner {
    xrcd: XrcDomain,
    qpn: Qpn,
}

impl Drop for TgtInner {
    fn drop(&mut self) {
        if self.xrcd.inner.dev.forked_away() {
            return; // the parent's (see `Device::forked_away`)
        }
        let q = self.qpn;
        let sh = self.xrcd.inner.dev.shared();
        sh.flush_now();
        let _ = sh.with_core(|c, _| c.destroy_qp(q));
        self.xrcd.inner.tgt.lock().remove(&q.value());
    }
}

/// A handle on an XRC TGT QP (`IBV_QPT_XRC_RECV`). Clones and
/// [`XrcDomain::open_tgt_qp`] give more handles; the QP is destroyed with
/// the last.
#[derive(Clone)]
pub struct XrcTgtQp {
    inner: Arc<TgtInner>,
}

impl std::fmt::Debug for XrcTgtQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "XrcTgtQp({})", self.inner.qpn)
    }
}

impl XrcTgtQp {
    /// QP number.
    pub fn qpn(&self) -> Qpn {
        self.inner.qpn
    }

    /// Its domain.
    pub fn xrcd(&self) -> &XrcDomain {
        &self.inner.xrcd
    }

    /// `ibv_modify_qp` (IBA table 91's XRC TGT masks; the requester's
    /// attributes are ignored, as by the kernel).
    pub fn modify(&self, attr: &QpAttr, mask: AttrMask) -> Result<()> {
        let q = self.inner.qpn;
        Ok(self
            .inner
            .xrcd
            .inner
            .dev
            .shared()
            .modify_qp(q, attr, mask)?)
    }

    /// `ibv_query_qp`.
    pub fn query(&self) -> Result<QpAttr> {
        let q = self.inner.qpn;
        Ok(self
            .inner
            .xrcd
            .inner
            .dev
            .shared()
            .peek_core(|c| c.query_qp(q))?
            .0)
    }

    /// Current state.
    pub fn state(&self) -> Result<QpState> {
        Ok(self.query()?.qp_state)
    }

    /// Counters of this QP.
    pub fn counters(&self) -> Result<Counters> {
        let q = self.inner.qpn;
        Ok(self
            .inner
            .xrcd
            .inner
            .dev
            .shared()
            .peek_core(|c| c.qp_counters(q))?)
    }
}
