//! The connections' QPs: each RC connection's client and accepted server
//! id gets a real QP on its node's simulated device (`rdma_create_qp`:
//! the plan's QPN, `Endpoint::attach_qp`), and every QP change the
//! rdma_cm layer emits — `attach_qp`'s INIT, the accept's INIT/RTR/RTS,
//! the REP's INIT/RTR/RTS before the RTU, `disconnect`'s ERR — is applied
//! to it through the device's `modify_qp` (proto's `cm_attr` converts
//! the CM's attributes, as softrdma's driver does). A change the device
//! refuses, or an established side whose QP is not in RTS towards its
//! peer's QPN, is a violation.

use super::world::World;
use softrdma_cm::rdma::QpChange;
use softrdma_proto::cm_attr::from_cm;
use softrdma_proto::{AttrMask, QpAttr, QpInit, QpState, QpType};
use softrdma_wire::ip::ROCE_V2_PORT;
use softrdma_wire::Qpn;

impl World<'_> {
    /// `rdma_create_qp` on id `id` of `node`: an RC QP numbered `qpn`.
    pub(super) fn create_qp(&mut self, node: usize, id: u64, qpn: u32) {
        let (pd, cq) = (self.nodes[node].pd, self.nodes[node].cq);
        let dev = &mut self.sim.nodes[node].dev;
        let qpn = Qpn::new(qpn);
        if let Err(e) = dev.create_qp_with_qpn(&QpInit::new(QpType::Rc, pd, cq), qpn) {
            return self.violation(format!("node {node}: QP {qpn:?}: {e}"));
        }
        self.qps.insert((node, id), qpn);
        if let Err(e) = self.nodes[node].ep.attach_qp(id, qpn, false) {
            self.violation(format!("node {node}: attach QP {qpn:?} to id {id}: {e}"));
        }
        self.apply_qp_changes(node);
    }

    /// `rdma_destroy_qp` with the id.
    pub(super) fn destroy_qp(&mut self, node: usize, id: u64) {
        if let Some(q) = self.qps.remove(&(node, id)) {
            let _ = self.sim.nodes[node].dev.destroy_qp(q);
        }
    }

    /// Applies the QP changes the node's endpoint emitted.
    pub(super) fn apply_qp_changes(&mut self, node: usize) {
        while let Some((id, qpn, c)) = self.nodes[node].ep.poll_qp_change() {
            self.apply(node, id, qpn, &c);
        }
    }

    /// Applies one change to a QP.
    pub(super) fn apply(&mut self, node: usize, id: u64, qpn: Qpn, c: &QpChange) {
        let (attr, mask) = match c {
            QpChange::Modify(a) => from_cm(a, ROCE_V2_PORT),
            QpChange::ToErr => (
                QpAttr {
                    qp_state: QpState::Err,
                    ..Default::default()
                },
                AttrMask::STATE,
            ),
        };
        let now = softrdma_proto::Instant(self.now.0);
        if let Err(e) = self.sim.nodes[node].dev.modify_qp(now, qpn, &attr, mask) {
            let s = attr.qp_state;
            self.violation(format!("node {node} id {id}: QP {qpn:?} to {s:?}: {e}"));
        }
        self.report.qp_changes += 1;
    }

    /// An established side: its QP is in RTS towards the peer's QPN.
    pub(super) fn check_rts(&mut self, node: usize, id: u64, peer: u32) {
        let Some(&q) = self.qps.get(&(node, id)) else {
            return self.violation(format!("node {node} id {id}: established without a QP"));
        };
        match self.sim.nodes[node].dev.query_qp(q) {
            Ok((a, _, _)) if a.qp_state == QpState::Rts && a.dest_qp_num == Qpn::new(peer) => {}
            r => self.violation(format!(
                "node {node} id {id}: QP {q:?} not in RTS towards {peer:#x}: {:?}",
                r.map(|(a, _, _)| (a.qp_state, a.dest_qp_num))
            )),
        }
    }
}
