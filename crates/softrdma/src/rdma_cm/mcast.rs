//! rdma_cm's multicast over RoCE (`rdma_join_multicast`,
//! `rdma_join_multicast_ex`, `rdma_leave_multicast`), as Linux's cma does
//! it for RoCE with no subnet administrator (`cma_iboe_join_multicast`,
//! `cma_iboe_set_mgid`, `cma_make_mc_event`) and librdmacm completes it
//! (`ucma_process_join`, `rdma_leave_multicast`):
//!
//! - the id must be bound or resolved to a device, and of a UD port space;
//!   the address must be a multicast address of the device's family
//!   (EINVAL otherwise);
//! - the group's MGID is the address as a RoCE v2 GID (`::ffff:a.b.c.d`,
//!   or the IPv6 address);
//! - a MULTICAST_JOIN event follows at once, its `param.ud` the address
//!   handle attributes of the group (DGID the MGID, SGID the device's,
//!   hop limit 64, traffic class and flow label 0), QP number 0xFFFFFF and
//!   Q_Key `RDMA_UDP_QKEY`; when it is delivered the id's QP, if it has
//!   one and the join is not send-only, attaches to the group (the device
//!   joins the IP group on its interface with its first QP); an attach
//!   that fails makes it MULTICAST_ERROR (status -1, as librdmacm's);
//! - leaving detaches the QP; an address not joined is EADDRNOTAVAIL.
//!
//! Linux 6.1's cma refuses IPv6 groups on RoCE v2 (`-ENOTSUPP`);
//! softrdma joins them as it joins IPv4 ones.

use super::channel::Queued;
use super::driver::{call, errno};
use super::id::{dev_of, einval, side, CmId};
use super::state::{lock, Guard};
use super::{Acks, EventType};
use crate::error::Result;
use softrdma_wire::Gid;
use std::net::IpAddr;
use std::sync::Arc;

impl CmId {
    /// `rdma_join_multicast` / `rdma_join_multicast_ex`: joins group
    /// `addr` (see the module); `send_only` is
    /// `RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER` (the QP does not attach);
    /// `context` comes back with the events.
    pub fn join_multicast(&self, addr: IpAddr, send_only: bool, context: u64) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        if dev_of(&mut g, num)?.is_none() {
            return Err(einval("rdma_join_multicast: the id has no device"));
        }
        // Its events' count, before the join queues its event.
        let acks = Arc::new(Acks::default());
        side(&mut g, num)?.mc_acks.push((addr, context, acks));
        let r = call(&mut g, |ep| {
            ep.join_multicast(num, addr, send_only, context)
        });
        if r.is_err() {
            side(&mut g, num)?.mc_acks.pop();
        }
        r
    }

    /// `rdma_leave_multicast`: leaves group `addr` (the first join of it);
    /// its QP detaches. EADDRNOTAVAIL when the id has not joined it. Then
    /// waits until the join's events delivered to the program are
    /// acknowledged, as librdmacm's (`mc->events_completed`).
    pub fn leave_multicast(&self, addr: IpAddr) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        let attached = g.ep().leave_multicast(num, addr).map_err(errno)?;
        if let (Some(qpn), Some(dev)) = (attached, dev_of(&mut g, num)?) {
            let _ = crate::mcast::detach(&dev, qpn, Gid::from_ip(addr).octets());
        }
        let s = side(&mut g, num)?;
        let acks = s
            .mc_acks
            .iter()
            .position(|m| m.0 == addr)
            .map(|at| s.mc_acks.remove(at).2);
        drop(g);
        if let Some(a) = acks {
            a.wait();
        }
        Ok(())
    }
}

/// A MULTICAST_JOIN being delivered: the id's QP attaches to the group
/// unless the join was send-only (librdmacm's `ucma_process_join`).
pub(crate) fn on_join(g: &mut Guard, num: u64, q: &mut Queued) {
    let Some((addr, context)) = q.mc else { return };
    let Some(qpn) = g.ep().join_target(num, addr, context) else {
        return;
    };
    let Ok(Some(dev)) = dev_of(g, num) else {
        return;
    };
    match crate::mcast::attach(&dev, qpn, Gid::from_ip(addr).octets()) {
        Ok(()) => g.ep().mcast_attached(num, addr, context, qpn),
        Err(err) => {
            tracing::debug!(target: "softrdma::rdma_cm", "joining {addr}: {err}");
            q.event = EventType::MulticastError;
            q.status = -1;
        }
    }
}
