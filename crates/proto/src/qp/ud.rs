//! The UD responder (IBA 9.8.4): a datagram, unicast or one multicast copy
//! (see the crate's `mcast`), is checked against the QP's Q_Key, takes a
//! receive WQE, and lands as the 40-byte GRH area then the payload.

use super::{Ctx, Qp};
use crate::device::RecvMeta;
use crate::verbs::*;
use softrdma_wire::{OpcodeInfo, Operation, PacketRepr};

impl Qp {
    /// A UD request (IBA 9.8.4): Q_Key, a receive WQE, GRH area + payload.
    pub(super) fn handle_ud(
        &mut self,
        pkt: &PacketRepr<'_>,
        info: &OpcodeInfo,
        meta: &RecvMeta,
        ctx: &mut Ctx,
    ) {
        let Some(deth) = pkt.deth else { return };
        if info.operation != Operation::Send {
            return;
        }
        if deth.qkey != self.attr.qkey {
            self.counters.bad_qkey += 1;
            return;
        }
        let Some((wqe, _)) = self.take_recv(ctx) else {
            self.counters.ud_drops += 1;
            return;
        };
        let Some(sgl) = self.recv_sgl(&wqe, ctx) else {
            self.enter_error(ctx);
            return;
        };
        let grh = softrdma_wire::grh::GRH_LEN as u64;
        let total = grh + pkt.payload.len() as u64;
        if total > sgl.len() {
            self.recv_error(&wqe, WcStatus::LocLenErr, ctx);
            return;
        }
        if sgl.write(0, &meta.grh_area()).is_err() || sgl.write(grh, pkt.payload).is_err() {
            self.recv_error(&wqe, WcStatus::LocProtErr, ctx);
            self.enter_error(ctx);
            return;
        }
        let mut wc = self.recv_wc(&wqe, total as u32, WcOpcode::Recv, pkt);
        wc.src_qp = deth.src_qp;
        wc.wc_flags = WcFlags::GRH;
        if let Some(imm) = pkt.imm {
            wc.wc_flags = wc.wc_flags.with(WcFlags::WITH_IMM);
            wc.imm_or_inv = imm;
        }
        if !ctx.complete(self.recv_cq, wc) {
            self.enter_error(ctx);
        }
    }
}
