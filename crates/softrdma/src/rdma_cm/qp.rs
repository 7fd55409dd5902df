//! An rdma_cm id's QP: the CM's attribute sets as softrdma verbs
//! attributes, the moves librdmacm makes (`rdma_init_qp_attr`,
//! `ucma_modify_qp_*`), and attaching, using and detaching the QP.

use super::id::{einval, entry, CmId};
use super::state::{lock, Guard};
use crate::error::{Error, Result};
use crate::{Device, QueuePair};
use softrdma_cm::negotiate::{QpAttrs, QpState, RdmaCmOverrides};
use softrdma_cm::rdma::{self, QpChange};
use softrdma_cm::Cm;
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

/// An id's side of its QP: its device's CM and its CM id (a connection),
/// whether it is UD, rdma_cm's overrides.
type QpSide<'a> = (Option<(&'a Cm, softrdma_cm::CmId)>, bool, RdmaCmOverrides);

/// The id's side of its QP.
fn qp_side(g: &mut Guard, num: u64) -> Result<QpSide<'_>> {
    let e = entry(g, num)?;
    let (ud, cm, seq, opts) = (e.qp_type == QpType::Ud, e.cm, e.seq, e.opts);
    let serial = e
        .serial()
        .ok_or_else(|| einval("the id has no device yet"))?;
    let o = RdmaCmOverrides {
        rq_psn: Some(seq),
        timeout: opts.ack_timeout,
        min_rnr_timer: opts.min_rnr_timer,
        ..Default::default()
    };
    let conn = match cm {
        Some(c) if !ud => {
            let ds = g
                .st()
                .devs
                .get(&serial)
                .ok_or_else(|| einval("no CM on the device"))?;
            Some((&ds.cm, c))
        }
        _ => None,
    };
    Ok((conn, ud, o))
}

/// `rdma_init_qp_attr` for an id (under the lock).
pub(super) fn init_attrs(g: &mut Guard, num: u64, state: QpState) -> Result<QpAttrs> {
    let (conn, ud, o) = qp_side(g, num)?;
    rdma::init_qp_attr(conn, ud, state, &o).map_err(|e| einval(&e.to_string()))
}

/// INIT, RTR, RTS for a connected id's QP (`depths`: an accept's).
pub(super) fn rts_changes(
    g: &mut Guard,
    num: u64,
    depths: Option<(u8, u8)>,
) -> Result<[QpChange; 3]> {
    let (conn, _, o) = qp_side(g, num)?;
    let (cm, c) = conn.ok_or_else(|| einval("no CM id"))?;
    rdma::to_rts(cm, c, &o, depths).map_err(|e| einval(&e.to_string()))
}

impl CmId {
    /// `rdma_init_qp_attr`: the attributes and mask for moving the
    /// program's own QP to `state` (INIT, RTR, RTS).
    pub fn init_qp_attr(&self, state: QpState) -> Result<QpAttrs> {
        let mut g = lock();
        init_attrs(&mut g, self.0.num, state)
    }

    /// Makes `qp` the id's QP (`rdma_create_qp` after creating it): moves
    /// it to INIT (UD: INIT with Q_Key 0x01234567, RTR, RTS), and from now
    /// on connect/accept/REP/REJ/disconnect drive it.
    pub fn attach_qp(&self, qp: &QueuePair) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        let e = entry(&mut g, num)?;
        if e.qp.is_some() {
            return Err(einval("the id has a QP already"));
        }
        let dev = e
            .dev
            .clone()
            .ok_or_else(|| einval("the id has no device yet"))?;
        g.defer_drop(dev.clone());
        if !dev.same_device(qp.pd().device()) {
            return Err(einval("the QP is on another device"));
        }
        let e = entry(&mut g, num)?;
        let ud = e.qp_type == QpType::Ud;
        if ud != (qp.qp_type() == QpType::Ud) {
            return Err(einval("the QP's type is not the id's"));
        }
        if ud {
            for c in rdma::ud_setup() {
                apply(&dev, qp.qpn(), &c)?;
            }
        } else {
            let a = init_attrs(&mut g, num, QpState::Init)?;
            modify(&dev, qp.qpn(), &a)?;
        }
        let e = entry(&mut g, num)?;
        e.qp = Some(qp.qpn());
        e.qp_srq = qp.has_srq();
        Ok(())
    }

    /// The QP the program put in the id itself (the C library reads
    /// `id->qp` back before each call and each event, as librdmacm reads
    /// it whenever it needs it: uDAPL assigns `cm_id->qp` and then calls
    /// `rdma_accept`). Unlike [`CmId::attach_qp`] the QP is not moved: the
    /// next connect, accept or REP moves it from whatever state it is in
    /// (INIT, RTR, RTS), as librdmacm does. `None`: the id has no QP.
    pub fn use_qp(&self, qp: Option<&QueuePair>) -> Result<()> {
        let mut g = lock();
        let e = entry(&mut g, self.0.num)?;
        let Some(qp) = qp else {
            e.qp = None;
            return Ok(());
        };
        if e.qp == Some(qp.qpn()) {
            return Ok(());
        }
        if let Some(d) = &e.dev {
            if !d.same_device(qp.pd().device()) {
                return Err(einval("the QP is on another device"));
            }
        }
        if (e.qp_type == QpType::Ud) != (qp.qp_type() == QpType::Ud) {
            return Err(einval("the QP's type is not the id's"));
        }
        e.qp = Some(qp.qpn());
        e.qp_srq = qp.has_srq();
        Ok(())
    }

    /// The id no longer drives its QP (`rdma_destroy_qp`).
    pub fn detach_qp(&self) {
        let mut g = lock();
        if let Ok(e) = entry(&mut g, self.0.num) {
            e.qp = None;
        }
    }
}
