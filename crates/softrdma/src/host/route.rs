//! Who on a shared device a datagram is for, and what the device owes a
//! peer when a member dies: plain data, no I/O (unit-tested below).
//!
//! A datagram for a QP goes to the member that claimed the QP's number.
//! A MAD for QP 1 (the CM) goes, as the kernel's CM routes it
//! (drivers/infiniband/core/cm.c): a REQ or SIDR_REQ to the member
//! listening on its service ID; a SIDR_REP to the member that sent the
//! SIDR_REQ with its request ID; every other message to the member that
//! owns the communication ID the message names as its *remote* one (ours).
//!
//! The device process learns the members' connections from the MADs they
//! send (members send QP 1 traffic through it) and receive: enough to say
//! goodbye for a dead member as the kernel's CM does when it destroys a
//! dead process's IDs (`cm_destroy_id`): a DREQ for an established
//! connection, a DREP for one the peer was closing, a REJ for one half
//! set up.

use softrdma_wire::cm::{CmMadRepr, CmMsg, DrepRepr, DreqRepr, MsgRef, RejReason, RejRepr};
use softrdma_wire::mad::MAD_LEN;
use softrdma_wire::Qpn;
use std::collections::HashMap;
use std::net::IpAddr;

/// A member's number in the device process (never reused while it runs).
pub type MemberId = u32;

/// Offset of the destination QP (24 bits) in the BTH (IBA 9.2).
const BTH_DEST_QP: usize = 5;
/// BTH and DETH: where a QP 1 packet's MAD starts.
const GSI_MAD_OFFSET: usize = 12 + 8;
/// UD SEND_ONLY: the only opcode of MADs.
const UD_SEND_ONLY: u8 = 0x64;
/// The GSI's QP number.
const GSI_QPN: u32 = 1;
/// Connections remembered per device: beyond it a member's oldest
/// half-open ones are forgotten (it then only misses a farewell).
const MAX_CONNS: usize = 1 << 16;
/// REQs remembered until the member answers them.
const MAX_PENDING_REQS: usize = 4096;

/// Where a connection stands, as far as its farewell goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// The member sent a REQ (farewell: none; the peer times out).
    ReqSent,
    /// The peer answered our REQ with a REP (farewell: REJ of the REP).
    RepRcvd,
    /// The member answered a REQ with a REP (farewell: REJ).
    RepSent,
    /// RTU sent or received (farewell: DREQ).
    Established,
    /// The member sent a DREQ (farewell: none; the peer answers it).
    DreqSent,
    /// The peer sent a DREQ (farewell: DREP).
    DreqRcvd,
}

#[derive(Clone, Debug)]
struct Conn {
    member: MemberId,
    peer: IpAddr,
    remote_comm_id: u32,
    remote_qpn: Option<Qpn>,
    state: State,
}

/// A MAD to send for a dead member: to `dst`'s QP 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Farewell {
    /// The peer.
    pub dst: IpAddr,
    /// The MAD.
    pub mad: [u8; MAD_LEN],
}

/// The routing table.
#[derive(Debug, Default)]
pub struct Routes {
    qpns: HashMap<u32, MemberId>,
    listeners: HashMap<u64, MemberId>,
    /// By our (local) communication ID.
    conns: HashMap<u32, Conn>,
    /// SIDR_REQs sent: request ID → member.
    sidr: HashMap<u32, MemberId>,
    /// REQs received and not answered yet: (peer, its comm ID) → its
    /// QPN, and the listening member the REQ went to (`None`: no one
    /// listened; the oldest member's CM rejects it).
    pending_reqs: HashMap<(IpAddr, u32), (Qpn, Option<MemberId>)>,
    /// Members in the order they joined (the fallback for a MAD no one
    /// owns: the oldest member's CM answers it, with a REJ or a DREP, as a
    /// lone device would).
    members: Vec<MemberId>,
    tid: u64,
}

/// The 24-bit destination QP of a RoCE datagram.
pub fn dest_qpn(dgram: &[u8]) -> Option<u32> {
    let b = dgram.get(BTH_DEST_QP..BTH_DEST_QP + 3)?;
    Some(u32::from_be_bytes([0, b[0], b[1], b[2]]))
}

/// The MAD of a QP 1 datagram (UD SEND_ONLY carrying exactly one MAD and
/// its ICRC).
fn gsi_mad(dgram: &[u8]) -> Option<&[u8]> {
    if *dgram.first()? != UD_SEND_ONLY {
        return None;
    }
    dgram.get(GSI_MAD_OFFSET..GSI_MAD_OFFSET + MAD_LEN)
}

impl Routes {
    /// A member joined.
    pub fn join(&mut self, m: MemberId) {
        self.members.push(m);
    }

    /// Members, oldest first.
    pub fn members(&self) -> &[MemberId] {
        &self.members
    }

    /// A member claims a QP number: `false` if another holds it (or it is
    /// one no QP may have).
    pub fn claim_qpn(&mut self, m: MemberId, qpn: u32) -> bool {
        if softrdma_proto::qpn::is_reserved(qpn) || qpn > 0xff_ffff {
            return false;
        }
        match self.qpns.get(&qpn) {
            Some(&o) => o == m,
            None => {
                self.qpns.insert(qpn, m);
                true
            }
        }
    }

    /// The member holding QP number `qpn` (never QP 0 or 1: their traffic
    /// is routed by message, not by number).
    pub fn owner_of(&self, qpn: u32) -> Option<MemberId> {
        if softrdma_proto::qpn::is_reserved(qpn) {
            return None;
        }
        self.qpns.get(&qpn).copied()
    }

    /// A member gives a QP number back.
    pub fn free_qpn(&mut self, m: MemberId, qpn: u32) {
        if self.qpns.get(&qpn) == Some(&m) {
            self.qpns.remove(&qpn);
        }
    }

    /// QP numbers a member holds.
    pub fn qpns_of(&self, m: MemberId) -> usize {
        self.qpns.values().filter(|&&o| o == m).count()
    }

    /// A member listens on a service ID: `false` if another does.
    pub fn listen(&mut self, m: MemberId, sid: u64) -> bool {
        match self.listeners.get(&sid) {
            Some(&o) => o == m,
            None => {
                self.listeners.insert(sid, m);
                true
            }
        }
    }

    /// A member stops listening.
    pub fn unlisten(&mut self, m: MemberId, sid: u64) {
        if self.listeners.get(&sid) == Some(&m) {
            self.listeners.remove(&sid);
        }
    }

    /// The member a received datagram is for (`None`: no one; dropped).
    pub fn route(&mut self, src: IpAddr, dgram: &[u8]) -> Option<MemberId> {
        let qpn = dest_qpn(dgram)?;
        if qpn != GSI_QPN {
            return self.qpns.get(&qpn).copied();
        }
        let fallback = self.members.first().copied();
        let Some(mad) = gsi_mad(dgram) else {
            return fallback;
        };
        let Ok(m) = CmMadRepr::parse(mad) else {
            return fallback;
        };
        let owner = |conns: &HashMap<u32, Conn>, id: u32| conns.get(&id).map(|c| c.member);
        let to = match m.msg {
            CmMsg::Req(r) => {
                let to = self.listeners.get(&r.service_id.0).copied();
                if self.pending_reqs.len() < MAX_PENDING_REQS {
                    self.pending_reqs
                        .insert((src, r.local_comm_id), (r.local_qpn, to));
                }
                to
            }
            CmMsg::SidrReq(r) => self.listeners.get(&r.service_id.0).copied(),
            CmMsg::SidrRep(r) => self.sidr.remove(&r.request_id),
            CmMsg::Rep(r) => {
                if let Some(c) = self.conns.get_mut(&r.remote_comm_id) {
                    c.remote_comm_id = r.local_comm_id;
                    c.remote_qpn = Some(r.local_qpn);
                    if c.state == State::ReqSent {
                        c.state = State::RepRcvd;
                    }
                }
                owner(&self.conns, r.remote_comm_id)
            }
            CmMsg::Rtu(r) => {
                if let Some(c) = self.conns.get_mut(&r.remote_comm_id) {
                    if c.state == State::RepSent {
                        c.state = State::Established;
                    }
                }
                owner(&self.conns, r.remote_comm_id)
            }
            CmMsg::Dreq(r) => {
                if let Some(c) = self.conns.get_mut(&r.remote_comm_id) {
                    if c.state == State::Established || c.state == State::RepSent {
                        c.state = State::DreqRcvd;
                    }
                }
                owner(&self.conns, r.remote_comm_id)
            }
            CmMsg::Drep(r) => {
                let o = owner(&self.conns, r.remote_comm_id);
                self.conns.remove(&r.remote_comm_id);
                o
            }
            CmMsg::Rej(r) => {
                let o = owner(&self.conns, r.remote_comm_id);
                self.conns.remove(&r.remote_comm_id);
                o
            }
            CmMsg::Mra(r) => owner(&self.conns, r.remote_comm_id),
        };
        to.or(fallback)
    }

    /// A member sends a QP 1 datagram to `dst`: learn from it.
    pub fn sent(&mut self, m: MemberId, dst: IpAddr, dgram: &[u8]) {
        let Some(mad) = gsi_mad(dgram) else { return };
        let Ok(mad) = CmMadRepr::parse(mad) else {
            return;
        };
        let add = |conns: &mut HashMap<u32, Conn>, id: u32, c: Conn| {
            if conns.len() >= MAX_CONNS && !conns.contains_key(&id) {
                return;
            }
            conns.insert(id, c);
        };
        match mad.msg {
            CmMsg::Req(r) => add(
                &mut self.conns,
                r.local_comm_id,
                Conn {
                    member: m,
                    peer: dst,
                    remote_comm_id: 0,
                    remote_qpn: None,
                    state: State::ReqSent,
                },
            ),
            CmMsg::Rep(r) => {
                let qpn = self
                    .pending_reqs
                    .remove(&(dst, r.remote_comm_id))
                    .map(|(q, _)| q);
                add(
                    &mut self.conns,
                    r.local_comm_id,
                    Conn {
                        member: m,
                        peer: dst,
                        remote_comm_id: r.remote_comm_id,
                        remote_qpn: qpn,
                        state: State::RepSent,
                    },
                );
            }
            CmMsg::Rtu(r) => {
                if let Some(c) = self.conns.get_mut(&r.local_comm_id) {
                    c.state = State::Established;
                }
            }
            CmMsg::Dreq(r) => {
                if let Some(c) = self.conns.get_mut(&r.local_comm_id) {
                    c.state = State::DreqSent;
                }
            }
            CmMsg::Drep(r) => {
                self.conns.remove(&r.local_comm_id);
            }
            CmMsg::Rej(r) => {
                self.conns.remove(&r.local_comm_id);
                self.pending_reqs.remove(&(dst, r.remote_comm_id));
            }
            CmMsg::SidrReq(r) => {
                self.sidr.insert(r.request_id, m);
            }
            CmMsg::SidrRep(_) | CmMsg::Mra(_) => {}
        }
    }

    /// A member is gone: forget everything of it; returns the MADs to
    /// send for its connections.
    pub fn leave(&mut self, m: MemberId) -> Vec<Farewell> {
        self.members.retain(|&o| o != m);
        self.qpns.retain(|_, o| *o != m);
        self.listeners.retain(|_, o| *o != m);
        self.sidr.retain(|_, o| *o != m);
        let mine: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| c.member == m)
            .map(|(&id, _)| id)
            .collect();
        let mut out = Vec::new();
        // REQs it received and never answered: a REJ, as the kernel's CM
        // sends for a connection request whose listener's process died
        // before accepting or rejecting it (the requester's rdma_connect
        // then fails at once instead of after its REQ retries).
        let unanswered: Vec<(IpAddr, u32)> = self
            .pending_reqs
            .iter()
            .filter(|(_, &(_, to))| to == Some(m))
            .map(|(&k, _)| k)
            .collect();
        for (peer, comm_id) in unanswered {
            self.pending_reqs.remove(&(peer, comm_id));
            self.tid = self.tid.wrapping_add(1);
            let rej = CmMsg::Rej(RejRepr {
                // Our side never got a communication ID on the wire.
                local_comm_id: 0,
                remote_comm_id: comm_id,
                message_rejected: MsgRef::REQ,
                reject_info_len: 0,
                reason: RejReason::CONSUMER_DEFINED,
                ari: &[],
                private_data: &[],
            });
            if let Ok(mad) = CmMadRepr::new(self.tid, 0, rej).to_bytes() {
                out.push(Farewell { dst: peer, mad });
            }
        }
        for id in mine {
            let Some(c) = self.conns.remove(&id) else {
                continue;
            };
            self.tid = self.tid.wrapping_add(1);
            let tid = self.tid;
            let msg = match c.state {
                State::Established => CmMsg::Dreq(DreqRepr {
                    local_comm_id: id,
                    remote_comm_id: c.remote_comm_id,
                    remote_qpn: c.remote_qpn.unwrap_or(Qpn::new(0)),
                    private_data: &[],
                }),
                State::DreqRcvd => CmMsg::Drep(DrepRepr {
                    local_comm_id: id,
                    remote_comm_id: c.remote_comm_id,
                    private_data: &[],
                }),
                State::RepRcvd | State::RepSent => CmMsg::Rej(RejRepr {
                    local_comm_id: id,
                    remote_comm_id: c.remote_comm_id,
                    message_rejected: if c.state == State::RepRcvd {
                        MsgRef::REP
                    } else {
                        MsgRef::OTHER
                    },
                    reject_info_len: 0,
                    reason: RejReason::CONSUMER_DEFINED,
                    ari: &[],
                    private_data: &[],
                }),
                State::ReqSent | State::DreqSent => continue,
            };
            if let Ok(mad) = CmMadRepr::new(tid, 0, msg).to_bytes() {
                out.push(Farewell { dst: c.peer, mad });
            }
        }
        out
    }
}

/// The MAD in a farewell, parsed (tests, logs).
pub fn farewell_name(f: &Farewell) -> &'static str {
    CmMadRepr::parse(&f.mad).map_or("?", |m| m.msg.name())
}

/// Service ID of rdma_cm's TCP port space for `port` (tests).
#[cfg(test)]
fn tcp_sid(port: u16) -> softrdma_wire::cm::ServiceId {
    softrdma_wire::cm::ServiceId::rdma_cm(softrdma_wire::cm::PortSpace::Tcp, port)
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrdma_wire::cm::{RepRepr, ReqRepr, RtuRepr, ServiceId};
    use softrdma_wire::mad::MAD_HEADER_LEN;

    const PEER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    /// A QP 1 datagram carrying `msg` (BTH, DETH, MAD, ICRC space).
    fn gsi(msg: CmMsg<'_>) -> Vec<u8> {
        let mut d = vec![0u8; GSI_MAD_OFFSET + MAD_LEN + 4];
        d[0] = UD_SEND_ONLY;
        d[7] = 1;
        let mad = CmMadRepr::new(7, 0, msg).to_bytes().unwrap();
        d[GSI_MAD_OFFSET..GSI_MAD_OFFSET + MAD_LEN].copy_from_slice(&mad);
        d
    }

    fn data(qpn: u32) -> Vec<u8> {
        let mut d = vec![0u8; 40];
        d[0] = 0x04; // RC SEND_ONLY
        d[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        d
    }

    fn req(local: u32, sid: ServiceId, qpn: u32) -> Vec<u8> {
        let mut r = ReqRepr::parse(
            &softrdma_wire::cm::Req::new_checked(&[0u8; MAD_LEN - MAD_HEADER_LEN][..]).unwrap(),
        )
        .unwrap();
        r.local_comm_id = local;
        r.service_id = sid;
        r.local_qpn = Qpn::new(qpn);
        r.path_mtu = 5;
        r.transport_service_type = 0;
        gsi(CmMsg::Req(r))
    }

    fn rep(local: u32, remote: u32, qpn: u32) -> Vec<u8> {
        let mut r = RepRepr::parse(
            &softrdma_wire::cm::Rep::new_checked(&[0u8; MAD_LEN - MAD_HEADER_LEN][..]).unwrap(),
        )
        .unwrap();
        r.local_comm_id = local;
        r.remote_comm_id = remote;
        r.local_qpn = Qpn::new(qpn);
        gsi(CmMsg::Rep(r))
    }

    fn rtu(local: u32, remote: u32) -> Vec<u8> {
        gsi(CmMsg::Rtu(RtuRepr {
            local_comm_id: local,
            remote_comm_id: remote,
            private_data: &[],
        }))
    }

    #[test]
    fn data_goes_to_the_qpn_owner_and_numbers_are_unique() {
        let mut r = Routes::default();
        r.join(1);
        r.join(2);
        assert!(r.claim_qpn(1, 0x1234));
        assert!(!r.claim_qpn(2, 0x1234), "another member's number");
        assert!(r.claim_qpn(2, 0x5678));
        assert!(!r.claim_qpn(2, 1) && !r.claim_qpn(2, 0) && !r.claim_qpn(2, 0xff_ffff));
        assert_eq!(r.route(PEER, &data(0x1234)), Some(1));
        assert_eq!(r.route(PEER, &data(0x5678)), Some(2));
        assert_eq!(r.route(PEER, &data(0x9999)), None);
        r.free_qpn(2, 0x1234); // not 2's: ignored
        assert_eq!(r.route(PEER, &data(0x1234)), Some(1));
        assert!(r.leave(1).is_empty());
        assert_eq!(
            r.route(PEER, &data(0x1234)),
            None,
            "a dead member's QPs are gone"
        );
        assert!(r.claim_qpn(2, 0x1234));
        assert_eq!(r.qpns_of(2), 2);
    }

    #[test]
    fn cm_mads_follow_listeners_and_comm_ids() {
        let mut r = Routes::default();
        r.join(1);
        r.join(2);
        assert!(r.listen(2, tcp_sid(7000).0));
        assert!(
            !r.listen(1, tcp_sid(7000).0),
            "port taken by another process"
        );
        // A REQ for 2's service goes to 2, one for no one to the oldest.
        assert_eq!(r.route(PEER, &req(0xaaaa, tcp_sid(7000), 0x77)), Some(2));
        assert_eq!(r.route(PEER, &req(0xbbbb, tcp_sid(9), 0x78)), Some(1));
        // 2 answers with a REP: the RTU for its comm ID comes back to it.
        r.sent(2, PEER, &rep(0x2222, 0xaaaa, 0x1234));
        assert_eq!(r.route(PEER, &rtu(0xaaaa, 0x2222)), Some(2));
        // 1 connects out: REQ, REP in, RTU out.
        r.sent(1, PEER, &req(0x1111, tcp_sid(5), 0x4321));
        assert_eq!(r.route(PEER, &rep(0xcccc, 0x1111, 0x99)), Some(1));
        r.sent(1, PEER, &rtu(0x1111, 0xcccc));
        // 2 dies: its established connection gets a DREQ naming the
        // peer's QP, and 1's stays.
        let f = r.leave(2);
        assert_eq!(f.len(), 1);
        assert_eq!(farewell_name(&f[0]), "DREQ");
        let m = CmMadRepr::parse(&f[0].mad).unwrap();
        match m.msg {
            CmMsg::Dreq(d) => {
                assert_eq!(
                    (d.local_comm_id, d.remote_comm_id, d.remote_qpn.value()),
                    (0x2222, 0xaaaa, 0x77)
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(f[0].dst, PEER);
        assert_eq!(
            r.route(PEER, &req(0xdddd, tcp_sid(7000), 1)),
            Some(1),
            "listener gone"
        );
        let f = r.leave(1);
        assert_eq!(f.len(), 1);
        match CmMadRepr::parse(&f[0].mad).unwrap().msg {
            CmMsg::Dreq(d) => assert_eq!((d.remote_comm_id, d.remote_qpn.value()), (0xcccc, 0x99)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn half_open_connections_get_a_rej_closed_ones_nothing() {
        let mut r = Routes::default();
        r.join(1);
        r.listen(1, 42);
        r.route(PEER, &req(0xa, ServiceId(42), 0x10));
        r.sent(1, PEER, &rep(0x1, 0xa, 0x20));
        // Another connection: established, then closed by a REJ / DREP.
        r.sent(1, PEER, &req(0x2, ServiceId(43), 0x21));
        r.route(PEER, &rep(0xb, 0x2, 0x11));
        r.sent(1, PEER, &rtu(0x2, 0xb));
        r.route(
            PEER,
            &gsi(CmMsg::Drep(DrepRepr {
                local_comm_id: 0xb,
                remote_comm_id: 0x2,
                private_data: &[],
            })),
        );
        let f = r.leave(1);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(farewell_name(&f[0]), "REJ");
        assert!(r.members().is_empty());
    }

    /// A member killed between receiving a REQ and answering it: the
    /// requester gets a REJ naming its REQ (it used to get nothing and
    /// waited out its REQ retries). A REQ that found no listener (the
    /// oldest member's CM rejects it) and one answered get none.
    #[test]
    fn unanswered_reqs_of_a_dead_listener_get_a_rej() {
        let mut r = Routes::default();
        r.join(1);
        r.join(2);
        r.listen(2, 42);
        assert_eq!(r.route(PEER, &req(0xa, ServiceId(42), 0x10)), Some(2));
        assert_eq!(r.route(PEER, &req(0xb, ServiceId(42), 0x11)), Some(2));
        assert_eq!(r.route(PEER, &req(0xc, ServiceId(9), 0x12)), Some(1));
        r.sent(2, PEER, &rep(0x2, 0xb, 0x20));
        let f = r.leave(2);
        let names: Vec<_> = f.iter().map(farewell_name).collect();
        assert_eq!(names, ["REJ", "REJ"], "{f:?}");
        let mut rejected: Vec<_> = f
            .iter()
            .map(|f| match CmMadRepr::parse(&f.mad).unwrap().msg {
                CmMsg::Rej(j) => {
                    assert_eq!(f.dst, PEER);
                    (j.remote_comm_id, j.message_rejected)
                }
                other => panic!("{other:?}"),
            })
            .collect();
        rejected.sort_by_key(|x| x.0);
        // 0xa's REQ (never answered), then 0xb's REP-sent connection.
        assert_eq!(rejected, [(0xa, MsgRef::REQ), (0xb, MsgRef::OTHER)]);
        assert!(r.leave(1).is_empty(), "1 never took 0xc's REQ as listener");
    }

    #[test]
    fn garbage_is_routed_safely() {
        let mut r = Routes::default();
        assert_eq!(r.route(PEER, &[]), None);
        assert_eq!(r.route(PEER, &[0; 7]), None);
        r.join(3);
        let mut d = data(1);
        d.truncate(8);
        assert_eq!(
            r.route(PEER, &d),
            Some(3),
            "QP 1 junk: the oldest member's CM drops it"
        );
        r.sent(3, PEER, &d);
        assert!(r.leave(3).is_empty());
    }
}
