//! Duplicate requests at the responder (IBA 9.7.5.1.3): SENDs and WRITEs
//! acknowledged again, READs executed again from the duplicate's PSN,
//! atomics answered from the saved result, FLUSH and ATOMIC WRITE
//! acknowledged again — never executed twice.

use super::resp::{ReadJob, RespJob};
use super::{Ctx, Qp};
use crate::verbs::*;
use softrdma_wire::{NakCode, OpcodeInfo, Operation, PacketRepr, Syndrome};

impl Qp {
    /// A request with a PSN before `epsn` (IBA 9.7.5.1.3).
    pub(super) fn handle_duplicate(
        &mut self,
        pkt: &PacketRepr<'_>,
        info: &OpcodeInfo,
        ctx: &mut Ctx,
    ) {
        let psn = pkt.bth.psn;
        if psn.distance_from(self.resp.epsn) < softrdma_wire::types::HALF_24 {
            return;
        }
        self.counters.duplicate_requests += 1;
        match info.operation {
            Operation::Send | Operation::RdmaWrite => {
                // C9-105: acknowledge again, do not execute again.
                let last = self.resp.epsn.sub(1);
                self.resp.queue_ack(last);
            }
            Operation::ReadRequest => {
                let Some(reth) = pkt.reth else { return };
                let Some(res) = self
                    .resp
                    .resources
                    .iter()
                    .find(|r| {
                        r.atomic.is_none()
                            && !r.placement
                            && psn.distance_from(r.first_psn) < r.npkts
                    })
                    .copied()
                else {
                    return;
                };
                // Re-execute from the duplicate's PSN with its own RETH,
                // checked again: a region deregistered since is a remote
                // access error now.
                let Ok(span) = self.check_rkey(
                    reth.rkey,
                    reth.va,
                    reth.dma_len as u64,
                    Access::REMOTE_READ,
                    ctx,
                ) else {
                    self.counters.rem_access_nak_sent += 1;
                    ctx.event(AsyncEvent::QpAccessErr(self.qpn));
                    self.resp
                        .queue_nak(psn, Syndrome::Nak(NakCode::RemoteAccessError));
                    self.enter_error(ctx);
                    return;
                };
                let remaining = res.npkts - psn.distance_from(res.first_psn);
                let mtu = self.mtu() as u64;
                if reth.dma_len as u64 > remaining as u64 * mtu {
                    return;
                }
                self.resp
                    .out
                    .retain(|j| !matches!(j, RespJob::Read(r) if r.res_id == res.id));
                self.resp.out.push_back(RespJob::Read(ReadJob {
                    res_id: res.id,
                    psn,
                    span,
                    offset: 0,
                    len: reth.dma_len as usize,
                    msn: res.msn,
                    replay: true,
                }));
            }
            Operation::Flush | Operation::AtomicWrite => {
                // Acknowledge again; never execute again (oA19-14, -15).
                if let Some(res) = self
                    .resp
                    .resources
                    .iter()
                    .find(|r| r.first_psn == psn && r.placement)
                {
                    let msn = res.msn;
                    self.resp.out.push_back(RespJob::PlacementAck { psn, msn });
                }
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                // Replay the saved result; never execute twice.
                if let Some(res) = self
                    .resp
                    .resources
                    .iter()
                    .find(|r| r.first_psn == psn && r.atomic.is_some())
                {
                    let orig = res.atomic.unwrap_or(0);
                    let msn = res.msn;
                    // Once in the queue is enough.
                    let queued = self
                        .resp
                        .out
                        .iter()
                        .any(|j| matches!(j, RespJob::AtomicAck { psn: p, .. } if *p == psn));
                    if queued || !self.resp.has_room() {
                        self.resp.dropped += 1;
                        return;
                    }
                    self.resp.out.push_back(RespJob::AtomicAck {
                        psn,
                        msn,
                        orig,
                        replay: true,
                    });
                }
            }
            _ => {}
        }
    }
}
