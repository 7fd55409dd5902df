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
use super::id::{einval, entry};
use super::state::{lock, Guard, St};
use super::{CmId, EventType, UdParam};
use crate::error::{Error, Result};
use softrdma_cm::negotiate::AhAttr;
use softrdma_proto::QpType;
use softrdma_wire::{Gid, Qpn};
use std::net::IpAddr;

/// The hop limit of a group's address handle (`IPV6_DEFAULT_HOPLIMIT`,
/// what cma gives IPv4 groups on RoCE v2).
const MCAST_HOP_LIMIT: u8 = 64;

/// A group an id joined.
#[derive(Clone, Debug)]
pub(crate) struct Join {
    pub addr: IpAddr,
    pub send_only: bool,
    /// The program's context for the join (its events carry it).
    pub context: u64,
    /// The QP attached to the group for this join.
    pub attached: Option<Qpn>,
}

impl CmId {
    /// `rdma_join_multicast` / `rdma_join_multicast_ex`: joins group
    /// `addr` (see the module); `send_only` is
    /// `RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER` (the QP does not attach);
    /// `context` comes back with the events.
    pub fn join_multicast(&self, addr: IpAddr, send_only: bool, context: u64) -> Result<()> {
        let mut g = lock();
        let num = self.0.num;
        let e = entry(&mut g, num)?;
        let dev = e
            .dev
            .clone()
            .ok_or_else(|| einval("rdma_join_multicast: the id has no device"))?;
        g.defer_drop(dev.clone());
        let e = entry(&mut g, num)?;
        if !matches!(e.st, St::AddrBound | St::AddrResolved) {
            return Err(einval(
                "rdma_join_multicast: the id is not bound or resolved",
            ));
        }
        if e.qp_type != QpType::Ud {
            return Err(einval("rdma_join_multicast: not a UD port space"));
        }
        let local = dev.local_addr().ip();
        if !addr.is_multicast() || addr.is_ipv4() != local.is_ipv4() {
            return Err(einval(
                "rdma_join_multicast: not a multicast address of the device's family",
            ));
        }
        e.mcast.push(Join {
            addr,
            send_only,
            context,
            attached: None,
        });
        let mut q = Queued::new(num, EventType::MulticastJoin, 0);
        q.ud = Some(UdParam {
            private_data: Vec::new(),
            ah_attr: Some(AhAttr {
                dgid: Gid::from_ip(addr),
                sgid: Gid::from_ip(local),
                flow_label: 0,
                hop_limit: MCAST_HOP_LIMIT,
                traffic_class: 0,
                sl: 0,
                port_num: 1,
            }),
            qp_num: Qpn::MULTICAST.value(),
            qkey: softrdma_cm::limits::RDMA_UDP_QKEY,
        });
        q.mc = Some((addr, context));
        e.chan.push(q);
        Ok(())
    }

    /// `rdma_leave_multicast`: leaves group `addr` (the first join of it);
    /// its QP detaches. EADDRNOTAVAIL when the id has not joined it.
    pub fn leave_multicast(&self, addr: IpAddr) -> Result<()> {
        let mut g = lock();
        let num = self.0.num;
        let e = entry(&mut g, num)?;
        let Some(at) = e.mcast.iter().position(|j| j.addr == addr) else {
            return Err(Error::cm(
                libc::EADDRNOTAVAIL,
                format!("rdma_leave_multicast: {addr} not joined"),
            ));
        };
        let j = e.mcast.remove(at);
        if let (Some(qpn), Some(dev)) = (j.attached, e.dev.clone()) {
            g.defer_drop(dev.clone());
            let _ = crate::mcast::detach(&dev, qpn, Gid::from_ip(addr).octets());
        }
        Ok(())
    }
}

/// A MULTICAST_JOIN being delivered: the id's QP attaches to the group
/// unless the join was send-only (librdmacm's `ucma_process_join`).
pub(crate) fn on_join(g: &mut Guard, num: u64, q: &mut Queued) {
    let Some((addr, context)) = q.mc else { return };
    let Ok(e) = entry(g, num) else { return };
    let (qp, dev) = (e.qp, e.dev.clone());
    let Some(j) = e
        .mcast
        .iter_mut()
        .find(|j| j.addr == addr && j.context == context && j.attached.is_none())
    else {
        return;
    };
    let (Some(qpn), Some(dev)) = (qp, dev) else {
        return;
    };
    if j.send_only {
        return;
    }
    match crate::mcast::attach(&dev, qpn, Gid::from_ip(addr).octets()) {
        Ok(()) => j.attached = Some(qpn),
        Err(err) => {
            tracing::debug!(target: "softrdma::rdma_cm", "joining {addr}: {err}");
            q.event = EventType::MulticastError;
            q.status = -1;
        }
    }
    g.defer_drop(dev);
}
