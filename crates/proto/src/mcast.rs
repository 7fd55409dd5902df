//! UD multicast at the device (IBA 10.5, Linux's `ib_attach_mcast` and
//! rxe's rxe_mcast.c / rxe_recv.c): UD QPs attach to multicast groups
//! named by their multicast GID (for RoCE v2 an IP multicast address:
//! `::ffff:224.0.0.0/100` for IPv4, `ff00::/8` for IPv6); a received
//! packet for the multicast QPN (0xFFFFFF) whose destination address is a
//! group's goes, one copy each, to every QP of the device attached to that
//! group, each QP checking it as any UD packet (state, transport, Q_Key, a
//! receive WQE). Sending needs nothing here: a UD send to an address
//! handle whose destination is the group's address, remote QPN 0xFFFFFF.
//!
//! The driver joins and leaves the IP multicast groups the device's
//! interface must receive: [`Device::poll_mcast`] reports the first
//! attachment to a group and the last detachment from it.
//!
//! Rules, as rxe and the kernel's uverbs have them: attaching a QP to a
//! group it is attached to already succeeds and changes nothing; only UD
//! QPs attach, only to multicast GIDs (else `InvalidArgument`: EINVAL); a
//! new group past [`MAX_MCAST_GRP`](crate::limits::MAX_MCAST_GRP), a QP past
//! [`MAX_MCAST_QP_ATTACH`](crate::limits::MAX_MCAST_QP_ATTACH) in a group,
//! or an attachment past
//! [`MAX_TOTAL_MCAST_QP_ATTACH`](crate::limits::MAX_TOTAL_MCAST_QP_ATTACH)
//! is `NoMemory` (ENOMEM); detaching a QP that is not attached is
//! `InvalidArgument` (EINVAL); a destroyed QP leaves its groups (the kernel
//! refuses a user's destroy while groups are attached, EBUSY: the C
//! library checks [`Device::mcast_groups_of`] first).

use crate::device::{ctx, Device, RecvMeta};
use crate::limits::{MAX_MCAST_GRP, MAX_MCAST_QP_ATTACH, MAX_TOTAL_MCAST_QP_ATTACH};
use crate::note::DropReason;
use crate::verbs::*;
use crate::Instant;
use softrdma_wire::grh::{addr_of_gid, is_multicast_gid};
use softrdma_wire::{IbPacket, PacketRepr, Qpn, Transport};
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

/// A change in the IP multicast groups the device must receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum McastChange {
    /// The first QP attached to the group at this address: join it.
    Join(IpAddr),
    /// The last QP left it: leave it.
    Leave(IpAddr),
}

/// The device's multicast groups.
#[derive(Debug, Default)]
pub(crate) struct Groups {
    /// Group GID to its attached QPs, in attachment order.
    groups: HashMap<[u8; 16], Vec<Qpn>>,
    /// Attachments over all groups.
    total: usize,
    /// Joins and leaves not yet taken by the driver.
    changes: VecDeque<McastChange>,
}

impl Device {
    /// `ibv_attach_mcast`: attaches UD QP `qpn` to the multicast group
    /// `gid` (see the module's rules).
    pub fn attach_mcast(&mut self, qpn: Qpn, gid: [u8; 16]) -> VerbsResult<()> {
        if !is_multicast_gid(gid) {
            return Err(VerbsError::InvalidArgument("not a multicast GID"));
        }
        let idx = *self
            .qpn_map
            .get(&qpn.value())
            .ok_or(VerbsError::NoSuchObject)?;
        let qp = self.qps.get(idx).ok_or(VerbsError::NoSuchObject)?;
        if qp.qp_type != QpType::Ud {
            return Err(VerbsError::InvalidArgument("only UD QPs attach to groups"));
        }
        let addr = addr_of_gid(gid);
        if addr.is_ipv4() != self.cfg.local_ip.is_ipv4() {
            return Err(VerbsError::InvalidArgument(
                "group address family differs from the device's",
            ));
        }
        let g = &mut self.mcast;
        match g.groups.get_mut(&gid) {
            Some(qps) if qps.contains(&qpn) => return Ok(()),
            Some(qps) => {
                if qps.len() >= MAX_MCAST_QP_ATTACH || g.total >= MAX_TOTAL_MCAST_QP_ATTACH {
                    return Err(VerbsError::NoMemory);
                }
                qps.push(qpn);
            }
            None => {
                if g.groups.len() >= MAX_MCAST_GRP || g.total >= MAX_TOTAL_MCAST_QP_ATTACH {
                    return Err(VerbsError::NoMemory);
                }
                g.groups.insert(gid, vec![qpn]);
                g.changes.push_back(McastChange::Join(addr));
            }
        }
        g.total += 1;
        Ok(())
    }

    /// `ibv_detach_mcast`: detaches QP `qpn` from group `gid`.
    pub fn detach_mcast(&mut self, qpn: Qpn, gid: [u8; 16]) -> VerbsResult<()> {
        if !is_multicast_gid(gid) {
            return Err(VerbsError::InvalidArgument("not a multicast GID"));
        }
        if !self.qpn_map.contains_key(&qpn.value()) {
            return Err(VerbsError::NoSuchObject);
        }
        if !self.mcast.remove(gid, qpn) {
            return Err(VerbsError::InvalidArgument("QP not attached to the group"));
        }
        Ok(())
    }

    /// The groups QP `qpn` is attached to.
    pub fn mcast_groups_of(&self, qpn: Qpn) -> Vec<[u8; 16]> {
        let mut v: Vec<[u8; 16]> = self
            .mcast
            .groups
            .iter()
            .filter(|(_, q)| q.contains(&qpn))
            .map(|(g, _)| *g)
            .collect();
        v.sort_unstable();
        v
    }

    /// The group addresses the device receives (at least one QP attached).
    pub fn mcast_addresses(&self) -> Vec<IpAddr> {
        let mut v: Vec<IpAddr> = self.mcast.groups.keys().map(|g| addr_of_gid(*g)).collect();
        v.sort_unstable();
        v
    }

    /// The next IP multicast group to join or leave, oldest first.
    #[must_use]
    pub fn poll_mcast(&mut self) -> Option<McastChange> {
        self.mcast.changes.pop_front()
    }

    /// A destroyed QP leaves every group it was in.
    pub(crate) fn mcast_forget_qp(&mut self, qpn: Qpn) {
        if self.mcast.total == 0 {
            return;
        }
        for gid in self.mcast_groups_of(qpn) {
            self.mcast.remove(gid, qpn);
        }
    }

    /// A packet for the multicast QPN: a copy to each QP attached to the
    /// group of its destination address (rxe's `rxe_rcv_mcast_pkt`).
    pub(crate) fn handle_mcast(
        &mut self,
        now: Instant,
        meta: &RecvMeta,
        pkt: &IbPacket<&[u8]>,
        repr: &PacketRepr<'_>,
    ) {
        let gid = softrdma_wire::grh::gid_of(meta.dst);
        // The attached QPs, copied to the stack: delivering takes the QPs
        // mutably (and allocates nothing).
        let mut qpns = [Qpn::new(0); MAX_MCAST_QP_ATTACH];
        let n = match self.mcast.groups.get(&gid) {
            Some(q) if is_multicast_gid(gid) => {
                qpns[..q.len()].copy_from_slice(q);
                q.len()
            }
            _ => {
                self.counters.mcast_unmatched += 1;
                self.note_drop(meta, Some(pkt), DropReason::UnknownQp);
                return;
            }
        };
        if pkt.info().transport != Transport::Ud {
            self.counters.malformed += 1;
            self.refusals += 1;
            self.note_drop(meta, Some(pkt), DropReason::WrongTransport);
            return;
        }
        for qpn in &qpns[..n] {
            let Some(&idx) = self.qpn_map.get(&qpn.value()) else {
                continue;
            };
            let Some(qp) = self.qps.get_mut(idx) else {
                continue;
            };
            self.counters.mcast_copies += 1;
            qp.counters.rx_packets += 1;
            qp.counters.rx_bytes += meta.len as u64;
            let bad_qkey = qp.counters.bad_qkey;
            let mut ctx = ctx!(self, now);
            qp.handle_request(repr, meta, &mut ctx);
            self.refusals += qp.counters.bad_qkey - bad_qkey;
            Self::wake(&mut self.tx_ready, qp, idx);
            Self::sync_timer(&mut self.timers, &mut self.budget, qp, idx);
        }
    }
}

impl Groups {
    /// Removes `qpn` from group `gid`; the group goes with its last QP.
    /// False when the QP was not attached.
    fn remove(&mut self, gid: [u8; 16], qpn: Qpn) -> bool {
        let Some(qps) = self.groups.get_mut(&gid) else {
            return false;
        };
        let Some(at) = qps.iter().position(|q| *q == qpn) else {
            return false;
        };
        qps.remove(at);
        self.total -= 1;
        if qps.is_empty() {
            self.groups.remove(&gid);
            self.changes.push_back(McastChange::Leave(addr_of_gid(gid)));
        }
        true
    }
}
