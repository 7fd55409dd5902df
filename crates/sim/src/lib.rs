//! A deterministic network simulator for softrdma's transport core.
//!
//! [`Sim`] runs any number of [`Device`](softrdma_proto::Device)s on a
//! virtual clock over a link with seeded loss, duplication, reordering,
//! single-bit corruption, delay, jitter and an MTU. The same seed always gives
//! the same run, so a failure is reproduced by its seed.
//!
//! [`connect`] sets up queue pairs between two nodes the way an application
//! would (PD, CQ, region, QP, RESET→INIT→RTR→RTS); [`harness`] runs random
//! workloads over many QPs and checks the transport's promises after every
//! run.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cm_pairs;
pub mod harness;
pub mod net;

pub use net::{LinkConfig, NetStats, Node, Sim};

use softrdma_proto::*;
use softrdma_wire::{Psn, QKey, Qpn};
use std::sync::Arc;

/// One end of a connection: the objects an application would hold.
#[derive(Clone)]
pub struct Endpoint {
    /// Node index.
    pub node: usize,
    /// Protection domain.
    pub pd: PdId,
    /// Send CQ.
    pub send_cq: CqId,
    /// Receive CQ.
    pub recv_cq: CqId,
    /// Queue pair.
    pub qpn: Qpn,
    /// The region's bytes.
    pub mem: Arc<VecMemory>,
    /// Its key (lkey = rkey).
    pub key: u32,
    /// Its virtual address.
    pub va: u64,
    /// Shared receive queue, if used.
    pub srq: Option<SrqId>,
}

/// How to build a connection.
#[derive(Clone, Copy, Debug)]
pub struct PairOpts {
    /// Transport.
    pub qp_type: QpType,
    /// Path MTU.
    pub mtu: Mtu,
    /// Retransmission timer exponent.
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries.
    pub rnr_retry: u8,
    /// RNR NAK timer code.
    pub min_rnr_timer: u8,
    /// Outstanding READ/atomic, both directions.
    pub max_rd_atomic: u8,
    /// Remote access the QP and region grant.
    pub access: Access,
    /// Region size on each side.
    pub mem_len: usize,
    /// Send queue depth.
    pub sq_depth: u32,
    /// Receive queue depth.
    pub rq_depth: u32,
    /// CQ depth.
    pub cq_depth: u32,
    /// Use an SRQ on both sides.
    pub srq: bool,
    /// Q_Key (UD).
    pub qkey: u32,
}

impl Default for PairOpts {
    fn default() -> Self {
        PairOpts {
            qp_type: QpType::Rc,
            mtu: Mtu::M1024,
            timeout: 8,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 16,
            access: Access::LOCAL_WRITE
                .with(Access::REMOTE_WRITE)
                .with(Access::REMOTE_READ)
                .with(Access::REMOTE_ATOMIC),
            mem_len: 1 << 16,
            sq_depth: 256,
            rq_depth: 256,
            cq_depth: 4096,
            srq: false,
            qkey: 0x1111_1111,
        }
    }
}

/// Creates PD, CQs, region and QP on `node` and takes the QP to INIT.
pub fn endpoint(sim: &mut Sim, node: usize, o: &PairOpts, va: u64) -> Endpoint {
    let now = sim.now;
    let dev = &mut sim.nodes[node].dev;
    let pd = dev.alloc_pd().expect("pd");
    let send_cq = dev.create_cq(o.cq_depth).expect("cq");
    let recv_cq = dev.create_cq(o.cq_depth).expect("cq");
    let mem = Arc::new(VecMemory::new(o.mem_len));
    let key = dev.reg_mr(pd, va, mem.clone(), o.access).expect("mr");
    let srq = o
        .srq
        .then(|| dev.create_srq(pd, o.rq_depth, 4, 0).expect("srq"));
    let (qpn, _) = dev
        .create_qp(&QpInit {
            qp_type: o.qp_type,
            pd,
            send_cq,
            recv_cq,
            srq,
            cap: QpCap {
                max_send_wr: o.sq_depth,
                max_recv_wr: o.rq_depth,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 64,
            },
            sq_sig_all: false,
        })
        .expect("qp");
    let mut a = QpAttr {
        qp_state: QpState::Init,
        pkey_index: 0,
        port_num: 1,
        qp_access_flags: o.access.remote().with(Access(o.access.0 & Access::FLUSH.0)),
        qkey: QKey(o.qkey),
        ..Default::default()
    };
    if o.qp_type != QpType::Ud {
        a.qkey = QKey(0);
    }
    let mask = AttrMask::required(o.qp_type, QpState::Reset, QpState::Init)
        .expect("a bring-up transition");
    dev.modify_qp(now, qpn, &a, mask).expect("INIT");
    Endpoint {
        node,
        pd,
        send_cq,
        recv_cq,
        qpn,
        mem,
        key,
        va,
        srq,
    }
}

/// Takes an INIT QP to RTR and RTS towards `peer`.
pub fn to_rts(
    sim: &mut Sim,
    e: &Endpoint,
    peer: &Endpoint,
    o: &PairOpts,
    rq_psn: Psn,
    sq_psn: Psn,
) {
    let now = sim.now;
    let peer_ip = sim.nodes[peer.node].ip;
    let dev = &mut sim.nodes[e.node].dev;
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: o.mtu,
        dest_qp_num: peer.qpn,
        rq_psn,
        max_dest_rd_atomic: o.max_rd_atomic,
        min_rnr_timer: o.min_rnr_timer,
        ah_attr: AddressVector::to(peer_ip),
        ..Default::default()
    };
    let mask =
        AttrMask::required(o.qp_type, QpState::Init, QpState::Rtr).expect("a bring-up transition");
    dev.modify_qp(now, e.qpn, &rtr, mask).expect("RTR");
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn,
        timeout: o.timeout,
        retry_cnt: o.retry_cnt,
        rnr_retry: o.rnr_retry,
        max_rd_atomic: o.max_rd_atomic,
        ..Default::default()
    };
    let mask =
        AttrMask::required(o.qp_type, QpState::Rtr, QpState::Rts).expect("a bring-up transition");
    dev.modify_qp(now, e.qpn, &rts, mask).expect("RTS");
}

/// Connects a new QP on `a` with a new QP on `b` (random PSNs from the
/// devices) and returns both ends in RTS.
pub fn connect(sim: &mut Sim, a: usize, b: usize, o: &PairOpts) -> (Endpoint, Endpoint) {
    let ea = endpoint(sim, a, o, 0x1000_0000);
    let eb = endpoint(sim, b, o, 0x2000_0000);
    let pa = sim.nodes[a].dev.random_psn();
    let pb = sim.nodes[b].dev.random_psn();
    to_rts(sim, &ea, &eb, o, pb, pa);
    to_rts(sim, &eb, &ea, o, pa, pb);
    (ea, eb)
}

/// Polls every completion of a CQ.
pub fn drain_cq(sim: &mut Sim, node: usize, cq: CqId) -> Vec<Wc> {
    let mut out = Vec::new();
    let mut buf = [Wc::EMPTY; 64];
    loop {
        let n = sim.nodes[node].dev.poll_cq(cq, &mut buf).expect("cq");
        out.extend_from_slice(&buf[..n]);
        if n < buf.len() {
            return out;
        }
    }
}
