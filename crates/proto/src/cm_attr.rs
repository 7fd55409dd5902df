//! The QP attribute sets of the communication manager (softrdma-cm's
//! `negotiate::QpAttrs`: what `rdma_init_qp_attr` and rdma_cm's INIT, RTR
//! and RTS give, IBA 12.7 / Linux's `ib_cm_init_qp_attr`) as this crate's
//! [`QpAttr`] and [`AttrMask`], for whoever applies the rdma_cm layer's QP
//! changes to a QP: softrdma's rdma_cm driver and the simulator's CM runs
//! (feature `cm`).

use crate::verbs::{Access, AddressVector, AttrMask, Mtu, QpAttr, QpState};
use softrdma_cm::negotiate::{QpAttrs, QpState as CmQpState};
use softrdma_wire::QKey;

/// A CM attribute set as verbs attributes; `dest_port` is the UDP port
/// the peer's RoCE packets go to (the device's own).
pub fn from_cm(a: &QpAttrs, dest_port: u16) -> (QpAttr, AttrMask) {
    let s = &a.attr;
    let state = match s.qp_state {
        CmQpState::Init => QpState::Init,
        CmQpState::Rtr => QpState::Rtr,
        CmQpState::Rts => QpState::Rts,
        CmQpState::Err => QpState::Err,
    };
    let mut av = AddressVector::to(s.ah_attr.dgid.to_ip());
    av.dest_port = dest_port;
    av.traffic_class = s.ah_attr.traffic_class;
    av.hop_limit = s.ah_attr.hop_limit;
    av.flow_label = s.ah_attr.flow_label;
    let attr = QpAttr {
        qp_state: state,
        path_mtu: Mtu::from_ibv(u32::from(s.path_mtu)).unwrap_or(Mtu::M1024),
        qkey: QKey(s.qkey),
        rq_psn: s.rq_psn,
        sq_psn: s.sq_psn,
        dest_qp_num: s.dest_qp_num,
        qp_access_flags: Access(s.qp_access_flags),
        ah_attr: av,
        pkey_index: s.pkey_index,
        max_rd_atomic: s.max_rd_atomic,
        max_dest_rd_atomic: s.max_dest_rd_atomic,
        min_rnr_timer: s.min_rnr_timer,
        port_num: s.port_num.max(1),
        timeout: s.timeout,
        retry_cnt: s.retry_cnt,
        rnr_retry: s.rnr_retry,
        ..Default::default()
    };
    (attr, AttrMask(a.mask.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrdma_cm::negotiate::{create_qp_attrs, RdmaQpType};

    #[test]
    fn ud_init_keeps_its_qkey_and_mask() {
        let a = create_qp_attrs(RdmaQpType::Ud { qkey: 0x0123_4567 })[0];
        let (v, m) = from_cm(&a, 4791);
        assert_eq!(v.qp_state, QpState::Init);
        assert_eq!(v.qkey, QKey(0x0123_4567));
        assert_eq!(m, AttrMask(a.mask.0));
        assert_eq!(v.port_num, 1);
    }
}
