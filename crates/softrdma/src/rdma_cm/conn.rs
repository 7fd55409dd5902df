//! The connection side of an rdma_cm id: `rdma_connect`, `rdma_accept`,
//! `rdma_reject`, `rdma_establish`, `rdma_notify` and `rdma_disconnect`:
//! the endpoint's calls (Linux's core/cma.c for what the CM sends,
//! librdmacm's cma.c for the QP changes it queues), with the device's
//! READ limit. The id itself is in `id.rs`.

use super::driver::{call, errno, flush, now};
use super::id::{dev_of, einval, ep_id, CmId};
use super::qp::{apply, max_rd_atom};
use super::state::lock;
use super::ConnParam;
use crate::error::Result;
use softrdma_cm::rdma::EndpointError;
use softrdma_cm::RejReason;

impl CmId {
    /// The device's READ limit for the id (0 without a device: the
    /// endpoint refuses the call for its state first).
    fn max_rd(&self) -> Result<u8> {
        let mut g = lock();
        Ok(dev_of(&mut g, self.0.num)?.map_or(0, |d| max_rd_atom(&d)))
    }

    /// `rdma_connect`: a REQ (UD ids: a SIDR_REQ) to the resolved peer.
    /// `param` `None` is librdmacm's NULL: device maxima, retry counts 7
    /// (refused for TCP ids without a QP, which must name their QP).
    pub fn connect(&self, param: Option<&ConnParam>) -> Result<()> {
        let num = self.0.num;
        let max = self.max_rd()?;
        let mut g = lock();
        call(&mut g, |ep| ep.connect(num, now(), param, max))
    }

    /// `rdma_accept` of a request's id. RC: with a QP, librdmacm's INIT,
    /// RTR and RTS first (so the QP is ready when the RTU comes), then the
    /// REP; ESTABLISHED follows on the RTU. A move that fails fails the
    /// call before any REP is sent (as librdmacm's, whose ACCEPT never
    /// reaches the kernel then): the request can still be rejected. UD:
    /// the SIDR_REP (QPN, Q_Key 0x01234567), no event. `param` `None`:
    /// what the requester asked for, capped by the device.
    pub fn accept(&self, param: Option<&ConnParam>) -> Result<()> {
        let num = self.0.num;
        let max = self.max_rd()?;
        let mut g = lock();
        let changes = g.ep().accept_changes(num, param, max).map_err(errno)?;
        if let Some(dev) = dev_of(&mut g, num)?.filter(|_| !changes.is_empty()) {
            for (qpn, c) in &changes {
                apply(&dev, *qpn, c)?;
            }
        }
        call(&mut g, |ep| ep.accept(num, now(), param, max))
    }

    /// `rdma_reject`: REJ reason 28 with the private data (≤ 148 bytes) for
    /// a request or a REP taken as CONNECT_RESPONSE; UD: SIDR_REP "reject".
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        self.reject_with(private_data, RejReason::CONSUMER_DEFINED)
    }

    /// `rdma_reject_ece`: REJ reason 35 (vendor option not supported).
    pub fn reject_ece(&self, private_data: &[u8]) -> Result<()> {
        self.reject_with(private_data, RejReason(35))
    }

    fn reject_with(&self, private_data: &[u8], reason: RejReason) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        call(&mut g, |ep| ep.reject(num, now(), private_data, reason))
    }

    /// `rdma_establish`: after CONNECT_RESPONSE on an id without a QP (the
    /// program moved its own QP to RTS): the RTU.
    pub fn establish(&self) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        if ep_id(&mut g, num)?.qp.is_some() {
            return Err(einval("rdma_establish: the id has a QP"));
        }
        call(&mut g, |ep| ep.establish(num, now()))
    }

    /// `rdma_notify` with IBV_EVENT_COMM_EST: the QP received before the
    /// RTU; the passive side is connected (ESTABLISHED follows).
    pub fn notify_established(&self) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        call(&mut g, |ep| ep.notify_established(num))
    }

    /// `rdma_disconnect`: the QP to ERR, then a DREQ, or the DREP of a DREQ
    /// received. DISCONNECTED follows (on the DREP, or at once for a DREQ
    /// already reported). Linux tries a DREQ, then a DREP, and ignores a
    /// state that takes neither.
    pub fn disconnect(&self) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        let r = g.ep().disconnect(num, now());
        let _ = flush(&mut g);
        match r {
            Ok(()) | Err(EndpointError::Cm(_)) => Ok(()),
            Err(e) => Err(errno(e)),
        }
    }
}
