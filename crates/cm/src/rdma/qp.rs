//! QP changes as data: the attribute sets an rdma_cm id's QP goes through
//! (`rdma_init_qp_attr`, librdmacm's `ucma_modify_qp_rtr` /
//! `ucma_modify_qp_rts` / `ucma_init_ud_qp`), which the driver applies
//! through its verbs.

use crate::limits::RDMA_UDP_QKEY;
use crate::negotiate::{create_qp_attrs, QpAttrs, QpState, RdmaCmOverrides, RdmaQpType};
use crate::{Cm, CmError, CmId};
use softrdma_wire::Psn;

/// A change of the QP an rdma_cm id drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpChange {
    /// Modify it with these attributes and mask.
    Modify(QpAttrs),
    /// Move it to ERR (a REJ, `rdma_disconnect`, a failed accept).
    ToErr,
}

/// `rdma_init_qp_attr` for an id: with a connection (`conn`: the device's
/// CM and the id's CM id), the CM's attributes for `state`
/// (`ib_cm_init_qp_attr`); without one, or for UD, what `rdma_create_qp`
/// applies (`cma_ib_init_qp_attr`) with `state`; then rdma_cm's
/// `overrides` (its own PSN, ACK_TIMEOUT, min RNR timer).
pub fn init_qp_attr(
    conn: Option<(&Cm, CmId)>,
    ud: bool,
    state: QpState,
    overrides: &RdmaCmOverrides,
) -> Result<QpAttrs, CmError> {
    let mut a = match conn {
        Some((cm, c)) if !ud => cm.init_qp_attr(c, state)?,
        _ => {
            let t = if ud {
                RdmaQpType::Ud {
                    qkey: RDMA_UDP_QKEY,
                }
            } else {
                RdmaQpType::Connected
            };
            let mut a = create_qp_attrs(t)[0];
            a.attr.qp_state = state;
            a
        }
    };
    overrides.apply(&mut a);
    Ok(a)
}

/// INIT, RTR and RTS for a connected id's QP once the REP came (active
/// side) or at `rdma_accept` (passive side, `depths`: the accept's
/// responder resources for RTR and initiator depth for RTS).
pub fn to_rts(
    cm: &Cm,
    conn: CmId,
    overrides: &RdmaCmOverrides,
    depths: Option<(u8, u8)>,
) -> Result<[QpChange; 3], CmError> {
    let at = |s| init_qp_attr(Some((cm, conn)), false, s, overrides);
    let init = at(QpState::Init)?;
    let mut rtr = at(QpState::Rtr)?;
    let mut rts = at(QpState::Rts)?;
    if let Some((resp_res, init_depth)) = depths {
        rtr.attr.max_dest_rd_atomic = resp_res;
        rts.attr.max_rd_atomic = init_depth;
    }
    Ok([
        QpChange::Modify(init),
        QpChange::Modify(rtr),
        QpChange::Modify(rts),
    ])
}

/// What attaching a UD QP to an id does (`ucma_init_ud_qp`): INIT with
/// Q_Key 0x01234567, RTR, RTS with send PSN 0.
pub fn ud_setup() -> Vec<QpChange> {
    create_qp_attrs(RdmaQpType::Ud {
        qkey: RDMA_UDP_QKEY,
    })
    .into_iter()
    .enumerate()
    .map(|(i, mut a)| {
        if i == 2 {
            a.attr.sq_psn = Psn::ZERO;
        }
        QpChange::Modify(a)
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CmConfig;

    #[test]
    fn ud_goes_to_rts_with_psn_0() {
        let c = ud_setup();
        let states: Vec<_> = c
            .iter()
            .map(|c| match c {
                QpChange::Modify(a) => (a.attr.qp_state, a.attr.qkey, a.attr.sq_psn),
                QpChange::ToErr => panic!("no ERR"),
            })
            .collect();
        assert_eq!(
            states.iter().map(|s| s.0).collect::<Vec<_>>(),
            [QpState::Init, QpState::Rtr, QpState::Rts]
        );
        assert_eq!(states[0].1, RDMA_UDP_QKEY);
        assert_eq!(states[2].2, Psn::ZERO);
    }

    #[test]
    fn without_a_connection_the_create_attributes_and_the_overrides() {
        let cm = Cm::new(CmConfig::new(1, [1, 2]));
        let o = RdmaCmOverrides {
            rq_psn: Some(Psn::new(77)),
            ..Default::default()
        };
        let a = init_qp_attr(None, false, QpState::Init, &o).expect("INIT");
        assert_eq!(a.attr.qp_state, QpState::Init);
        // An unknown CM id is the CM's error.
        let bad = CmId::from_comm_id(5);
        assert_eq!(
            init_qp_attr(Some((&cm, bad)), false, QpState::Rtr, &o),
            Err(CmError::UnknownId)
        );
        assert!(to_rts(&cm, bad, &o, None).is_err());
        // UD ignores the connection.
        let u = init_qp_attr(Some((&cm, bad)), true, QpState::Rts, &o).expect("UD");
        assert_eq!(u.attr.qp_state, QpState::Rts);
    }
}
