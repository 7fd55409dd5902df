//! An rdma_cm id's QP: the CM's attribute sets as softrdma verbs
//! attributes, the moves librdmacm makes (`rdma_init_qp_attr`,
//! `ucma_modify_qp_*`), and attaching, using and detaching the QP.

use super::driver::call;
use super::id::{dev_of, einval, ep_id, side, CmId};
use super::state::{lock, Guard};
use crate::error::{Error, Result};
use crate::{Device, QueuePair};
use softrdma_cm::negotiate::{QpAttrs, QpState};
use softrdma_cm::rdma::QpChange;
use softrdma_proto::QpType;
use softrdma_wire::Qpn;

pub(super) fn modify(dev: &Device, qpn: Qpn, a: &QpAttrs) -> Result<()> {
    // The CM's attributes as verbs attributes (proto's `cm_attr`, which
    // the simulator's CM runs use too).
    let (attr, mask) = softrdma_proto::cm_attr::from_cm(a, dev.local_addr().port());
    dev.shared()
        .modify_qp(qpn, &attr, mask)
        .map_err(Error::from)
}

pub(super) fn modify_err(dev: &Device, qpn: Qpn) {
    let a = crate::QpAttr {
        qp_state: crate::QpState::Err,
        ..Default::default()
    };
    // What the QP can send now leaves first (`Shared::modify_qp`): the
    // peer gets a SEND posted right before `rdma_disconnect`.
    let _ = dev.shared().modify_qp(qpn, &a, crate::AttrMask::STATE);
}

/// The device's limit of RDMA READ/atomics in flight (librdmacm's
/// `max_responder_resources` / `max_initiator_depth`).
pub(super) fn max_rd_atom(dev: &Device) -> u8 {
    dev.query_device().max_qp_rd_atom.min(255) as u8
}

/// Applies a QP change the layer computed.
pub(super) fn apply(dev: &Device, qpn: Qpn, c: &QpChange) -> Result<()> {
    match c {
        QpChange::Modify(a) => modify(dev, qpn, a),
        QpChange::ToErr => {
            modify_err(dev, qpn);
            Ok(())
        }
    }
}

impl CmId {
    /// `rdma_init_qp_attr`: the attributes and mask for moving the
    /// program's own QP to `state` (INIT, RTR, RTS).
    pub fn init_qp_attr(&self, state: QpState) -> Result<QpAttrs> {
        let mut g = lock();
        g.ep()
            .init_qp_attr(self.0.num, state)
            .map_err(super::driver::errno)
    }

    /// The checks of a QP the id is to drive: on the id's device, of the
    /// id's kind (UD or connected).
    fn check_qp(&self, g: &mut Guard, qp: &QueuePair, need_dev: bool) -> Result<()> {
        let num = self.0.num;
        match dev_of(g, num)? {
            Some(d) if !d.same_device(qp.pd().device()) => {
                return Err(einval("the QP is on another device"))
            }
            None if need_dev => return Err(einval("the id has no device yet")),
            _ => {}
        }
        let ud = side(g, num)?.qp_type == QpType::Ud;
        if ud != (qp.qp_type() == QpType::Ud) {
            return Err(einval("the QP's type is not the id's"));
        }
        Ok(())
    }

    /// Makes `qp` the id's QP (`rdma_create_qp` after creating it): moves
    /// it to INIT (UD: INIT with Q_Key 0x01234567, RTR, RTS), and from now
    /// on connect/accept/REP/REJ/disconnect drive it.
    pub fn attach_qp(&self, qp: &QueuePair) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        if ep_id(&mut g, num)?.qp.is_some() {
            return Err(einval("the id has a QP already"));
        }
        self.check_qp(&mut g, qp, true)?;
        let r = call(&mut g, |ep| ep.attach_qp(num, qp.qpn(), qp.has_srq()));
        if r.is_err() {
            let _ = g.ep().use_qp(num, None);
        }
        r
    }

    /// The QP the program put in the id itself (the C library reads
    /// `id->qp` back before each call and each event, as librdmacm reads
    /// it whenever it needs it: uDAPL assigns `cm_id->qp` and then calls
    /// `rdma_accept`). Unlike [`CmId::attach_qp`] the QP is not moved: the
    /// next connect, accept or REP moves it from whatever state it is in
    /// (INIT, RTR, RTS), as librdmacm does. `None`: the id has no QP.
    pub fn use_qp(&self, qp: Option<&QueuePair>) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        let cur = ep_id(&mut g, num)?.qp;
        let Some(qp) = qp else {
            return g.ep().use_qp(num, None).map_err(super::driver::errno);
        };
        if cur.map(|q| q.0) == Some(qp.qpn()) {
            return Ok(());
        }
        self.check_qp(&mut g, qp, false)?;
        g.ep()
            .use_qp(num, Some((qp.qpn(), qp.has_srq())))
            .map_err(super::driver::errno)
    }

    /// The id no longer drives its QP (`rdma_destroy_qp`).
    pub fn detach_qp(&self) {
        let mut g = lock();
        let _ = g.ep().use_qp(self.0.num, None);
    }
}
