//! XRC at the queue pair (IBA 9.2.1, 9.3.7, 9.4 and 11.x, Linux's
//! `IB_QPT_XRC_INI` / `IB_QPT_XRC_TGT`): the transport of an XRC QP is
//! RC's — PSNs, ACKs, NAKs, retries, READ and atomic responses — with two
//! differences:
//!
//! - an XRC INI QP (`QpType::XrcSend`) puts an XRCETH naming the XRC SRQ
//!   at the target (the work request's `remote_srqn`) in every request,
//!   and uses the XRC opcodes (RC's + 0xa0); it has no receive queue;
//! - an XRC TGT QP (`QpType::XrcRecv`) belongs to an XRC domain and has
//!   no receive queue, CQ or PD of its own: each request goes to the XRC
//!   SRQ its XRCETH names, which must be of the same domain — that SRQ's
//!   receive WQE takes a SEND, its CQ gets the completion, and its
//!   protection domain is the one R_Keys and receive buffers are checked
//!   against (as the rxe XRC patches and the NICs do). A number naming no
//!   SRQ of the domain is an invalid request (NAK, QP to the error
//!   state). Its ACKs and responses carry XRC opcodes.
//!
//! The device side (XRC domains, XRC SRQs and their numbers, TGT QPs) is
//! in the crate's `xrc` module.

use super::{Ctx, Qp};
use crate::verbs::*;
use softrdma_wire::{NakCode, Opcode, PacketRepr, Syndrome, Transport};

impl Qp {
    /// The transport of this QP's responses: XRC for an XRC TGT QP (RC's
    /// response opcodes + 0xa0), else RC.
    pub(super) fn resp_transport(&self) -> Transport {
        if self.qp_type == QpType::XrcRecv {
            Transport::Xrc
        } else {
            Transport::Rc
        }
    }

    /// ACKNOWLEDGE in this QP's transport.
    pub(super) fn ack_opcode(&self) -> Opcode {
        if self.qp_type == QpType::XrcRecv {
            Opcode::XRC_ACKNOWLEDGE
        } else {
            Opcode::RC_ACKNOWLEDGE
        }
    }

    /// ATOMIC ACKNOWLEDGE in this QP's transport.
    pub(super) fn atomic_ack_opcode(&self) -> Opcode {
        if self.qp_type == QpType::XrcRecv {
            Opcode::XRC_ATOMIC_ACKNOWLEDGE
        } else {
            Opcode::RC_ATOMIC_ACKNOWLEDGE
        }
    }

    /// An XRC TGT QP: makes the XRC SRQ the request's XRCETH names the
    /// QP's SRQ, CQ and PD for this request. False when it names no XRC
    /// SRQ of the QP's domain: the request at the expected PSN gets an
    /// invalid request NAK and the QP goes to the error state; any other
    /// is dropped (counted in `xrc_bad_srqn` either way).
    pub(super) fn select_xrc_srq(&mut self, pkt: &PacketRepr<'_>, ctx: &mut Ctx) -> bool {
        let found = pkt.xrceth.and_then(|n| {
            let idx = *ctx.xrc_srqns.get(&n)?;
            let s = ctx.srqs.get(idx)?;
            let x = s.xrc?;
            (Some(x.xrcd) == self.xrcd).then_some((SrqId(idx), s.pd, x.cq))
        });
        if let Some((srq, pd, cq)) = found {
            self.srq = Some(srq);
            self.pd = pd;
            self.recv_cq = cq;
            return true;
        }
        self.counters.xrc_bad_srqn += 1;
        if pkt.bth.psn == self.resp.epsn && self.state != QpState::Err {
            self.counters.inv_req_nak_sent += 1;
            ctx.event(AsyncEvent::QpReqErr(self.qpn));
            self.resp
                .queue_nak_fatal(pkt.bth.psn, Syndrome::Nak(NakCode::InvalidRequest));
            self.enter_error(ctx);
        }
        false
    }
}
