//! The multicast state of an [`Endpoint`]'s ids (`rdma_join_multicast`,
//! `rdma_join_multicast_ex`, `rdma_leave_multicast`) as Linux's cma keeps
//! it for RoCE with no subnet administrator (`cma_iboe_join_multicast`,
//! `cma_iboe_set_mgid`, `cma_make_mc_event`) and librdmacm completes it
//! (`ucma_process_join`, `rdma_leave_multicast`). The I/O — attaching
//! the QP to the group, the device joining the IP group on its
//! interface — is the driver's: the endpoint says which QP attaches
//! ([`Endpoint::join_target`]) and which detaches (what
//! [`Endpoint::leave_multicast`] returns).
//!
//! - the id must be bound or resolved to a device, and UD; the address a
//!   multicast address of the device's family (else EINVAL);
//! - the group's MGID is the address as a RoCE v2 GID (`::ffff:a.b.c.d`,
//!   or the IPv6 address);
//! - a MULTICAST_JOIN event follows at once, its `ud` the address handle
//!   attributes of the group (DGID the MGID, SGID the device's, hop limit
//!   64, traffic class and flow label 0), QP number 0xFFFFFF and Q_Key
//!   `RDMA_UDP_QKEY`; when the driver delivers it, the id's QP (if it has
//!   one and the join is not send-only) attaches; an attach that fails
//!   makes it MULTICAST_ERROR (status -1, as librdmacm's), the driver's
//!   change of the event;
//! - leaving an address not joined is [`EndpointError::NotJoined`]
//!   (EADDRNOTAVAIL).
//!
//! Linux 6.1's cma refuses IPv6 groups on RoCE v2 (`-ENOTSUPP`);
//! softrdma joins them as it joins IPv4 ones.

use super::endpoint::{Endpoint, EndpointError, IdEvent};
use super::event::{EventType, IdState, UdParam};
use super::listen::Transport;
use crate::limits::RDMA_UDP_QKEY;
use crate::negotiate::AhAttr;
use softrdma_wire::{Gid, Qpn};
use std::net::IpAddr;

/// The hop limit of a group's address handle (`IPV6_DEFAULT_HOPLIMIT`,
/// what cma gives IPv4 groups on RoCE v2).
pub const MCAST_HOP_LIMIT: u8 = 64;

/// A group an id joined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Join {
    /// The group's address.
    pub addr: IpAddr,
    /// `RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER`: the QP does not attach.
    pub send_only: bool,
    /// The program's context for the join (its events carry it).
    pub context: u64,
    /// The QP attached to the group for this join.
    pub attached: Option<Qpn>,
}

fn einval(what: &'static str) -> EndpointError {
    EndpointError::State(what)
}

impl Endpoint {
    /// `rdma_join_multicast`: id `num` joins group `addr` (see the
    /// module); MULTICAST_JOIN queued.
    pub fn join_multicast(
        &mut self,
        num: u64,
        addr: IpAddr,
        send_only: bool,
        context: u64,
    ) -> Result<(), EndpointError> {
        let e = self.entry(num)?;
        let dev = e
            .dev
            .ok_or(einval("rdma_join_multicast: the id has no device"))?;
        if !matches!(e.st, IdState::AddrBound | IdState::AddrResolved) {
            return Err(einval(
                "rdma_join_multicast: the id is not bound or resolved",
            ));
        }
        if e.transport != Transport::Ud {
            return Err(einval("rdma_join_multicast: not a UD port space"));
        }
        let local = self.devs.get(&dev).ok_or(EndpointError::NoDevice)?.ip;
        if !addr.is_multicast() || addr.is_ipv4() != local.is_ipv4() {
            return Err(einval(
                "rdma_join_multicast: not a multicast address of the device's family",
            ));
        }
        self.entry(num)?.mcast.push(Join {
            addr,
            send_only,
            context,
            attached: None,
        });
        let mut q = IdEvent::new(num, EventType::MulticastJoin, 0);
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
            qkey: RDMA_UDP_QKEY,
        });
        q.mc = Some((addr, context));
        self.push(q);
        Ok(())
    }

    /// A MULTICAST_JOIN of id `num` being delivered: the QP to attach to
    /// the group (the id's, unless the join is send-only or attached
    /// already). The driver attaches it and calls
    /// [`Endpoint::mcast_attached`], or turns the event into
    /// MULTICAST_ERROR.
    pub fn join_target(&self, num: u64, addr: IpAddr, context: u64) -> Option<Qpn> {
        let e = self.ids.get(&num)?;
        let (qpn, _) = e.qp?;
        e.mcast
            .iter()
            .find(|j| j.addr == addr && j.context == context && j.attached.is_none())
            .filter(|j| !j.send_only)
            .map(|_| qpn)
    }

    /// The driver attached `qpn` to the group of id `num`'s join.
    pub fn mcast_attached(&mut self, num: u64, addr: IpAddr, context: u64, qpn: Qpn) {
        let Some(e) = self.ids.get_mut(&num) else {
            return;
        };
        if let Some(j) = e
            .mcast
            .iter_mut()
            .find(|j| j.addr == addr && j.context == context && j.attached.is_none())
        {
            j.attached = Some(qpn);
        }
    }

    /// `rdma_leave_multicast`: id `num` leaves group `addr` (its first
    /// join of it). Returns the QP the driver detaches from the group.
    pub fn leave_multicast(
        &mut self,
        num: u64,
        addr: IpAddr,
    ) -> Result<Option<Qpn>, EndpointError> {
        let e = self.entry(num)?;
        let at = e
            .mcast
            .iter()
            .position(|j| j.addr == addr)
            .ok_or(EndpointError::NotJoined(addr))?;
        Ok(e.mcast.remove(at).attached)
    }
}
