//! Queue pairs: the builder, connection parameters, and `QueuePair` (modify,
//! post, connect). Each QP frees itself when dropped.

use crate::error::{Error, Result};
use crate::verbs::{
    CompletionQueue, MemoryRegion, MemoryWindow, ProtectionDomain, SharedReceiveQueue,
};
use softrdma_proto::*;
use softrdma_wire::grh::addr_of_gid;
use softrdma_wire::{Psn, QKey, Qpn, RKey};

/// Builds a queue pair.
pub struct QpBuilder<'a> {
    pub(crate) pd: &'a ProtectionDomain,
    pub(crate) send_cq: &'a CompletionQueue,
    pub(crate) recv_cq: &'a CompletionQueue,
    pub(crate) srq: Option<&'a SharedReceiveQueue>,
    pub(crate) init: QpInit,
}

impl<'a> QpBuilder<'a> {
    /// Send queue depth.
    pub fn max_send_wr(mut self, n: u32) -> Self {
        self.init.cap.max_send_wr = n;
        self
    }
    /// Receive queue depth.
    pub fn max_recv_wr(mut self, n: u32) -> Self {
        self.init.cap.max_recv_wr = n;
        self
    }
    /// SGEs per send.
    pub fn max_send_sge(mut self, n: u32) -> Self {
        self.init.cap.max_send_sge = n;
        self
    }
    /// SGEs per receive.
    pub fn max_recv_sge(mut self, n: u32) -> Self {
        self.init.cap.max_recv_sge = n;
        self
    }
    /// Inline bytes per send.
    pub fn max_inline_data(mut self, n: u32) -> Self {
        self.init.cap.max_inline_data = n;
        self
    }
    /// Signal every send.
    pub fn sq_sig_all(mut self, on: bool) -> Self {
        self.init.sq_sig_all = on;
        self
    }
    /// Take receives from a shared receive queue.
    pub fn srq(mut self, srq: &'a SharedReceiveQueue) -> Self {
        self.init.srq = Some(srq.id());
        self.srq = Some(srq);
        self
    }
    /// Creates the QP (in RESET).
    pub fn build(self) -> Result<QueuePair> {
        let init = self.init;
        let (qpn, cap) = self
            .pd
            .inner
            .dev
            .shared()
            .with_core(|c, _| c.create_qp(&init))?;
        Ok(QueuePair {
            pd: self.pd.clone(),
            _send_cq: self.send_cq.clone(),
            _recv_cq: self.recv_cq.clone(),
            _srq: self.srq.cloned(),
            qpn,
            qp_type: init.qp_type,
            cap,
        })
    }
}

/// The bit of a controlled Q_Key (IBA's term: one a consumer may not
/// choose freely; the kernel's `IB_QP_SET_QKEY`).
const CONTROLLED_QKEY: u32 = 0x8000_0000;

/// What a peer needs to know to connect to a QP (exchanged out of band).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpEndpoint {
    /// GID of the device.
    pub gid: [u8; 16],
    /// QP number.
    pub qpn: Qpn,
    /// First PSN the QP sends.
    pub psn: Psn,
    /// The UDP port its packets come from, when the peer says so (a
    /// softrdma device sends from its socket's port): the QP then takes
    /// packets only from that port from the first on. `None`: learned from
    /// the first packet the QP expects (see `softrdma_proto`'s `qp::pin`).
    pub port: Option<u16>,
}

/// Connection parameters for [`QueuePair::connect`].
#[derive(Clone, Copy, Debug)]
pub struct ConnectOptions {
    /// Path MTU.
    pub mtu: Mtu,
    /// Remote rights granted on this QP.
    pub access: Access,
    /// Transport timer exponent (4.096 µs × 2^timeout).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = forever).
    pub rnr_retry: u8,
    /// RNR NAK timer code.
    pub min_rnr_timer: u8,
    /// Outstanding READ/atomic, both ways.
    pub max_rd_atomic: u8,
    /// Q_Key (UD).
    pub qkey: QKey,
    /// Traffic class.
    pub traffic_class: u8,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            mtu: Mtu::M4096,
            access: Access::REMOTE_WRITE
                .with(Access::REMOTE_READ)
                .with(Access::REMOTE_ATOMIC),
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            qkey: QKey(0x1111_1111),
            traffic_class: 0,
        }
    }
}

/// A queue pair.
pub struct QueuePair {
    pub(crate) pd: ProtectionDomain,
    pub(crate) _send_cq: CompletionQueue,
    pub(crate) _recv_cq: CompletionQueue,
    pub(crate) _srq: Option<SharedReceiveQueue>,
    pub(crate) qpn: Qpn,
    pub(crate) qp_type: QpType,
    pub(crate) cap: QpCap,
}

impl std::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QueuePair({:?} {})", self.qp_type, self.qpn)
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        if self.pd.inner.dev.forked_away() {
            return; // the parent's (see `Device::forked_away`)
        }
        let q = self.qpn;
        let sh = self.pd.inner.dev.shared();
        // ACKs and responses a polling thread received but left for its next
        // poll go out first: the peer must not retry for what we have.
        sh.flush_now();
        let _ = sh.with_core(|c, _| c.destroy_qp(q));
        sh.materialize_queued();
    }
}

impl QueuePair {
    /// QP number.
    pub fn qpn(&self) -> Qpn {
        self.qpn
    }
    /// Transport type.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }
    /// Queue sizes granted.
    pub fn cap(&self) -> QpCap {
        self.cap
    }
    /// Whether it receives through a shared receive queue.
    pub fn has_srq(&self) -> bool {
        self._srq.is_some()
    }
    /// Its protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    fn core<R>(
        &self,
        f: impl FnOnce(&mut softrdma_proto::Device, softrdma_proto::Instant) -> R,
    ) -> R {
        self.pd.inner.dev.shared().with_core(f)
    }

    /// `ibv_modify_qp`. A controlled Q_Key (most significant bit set)
    /// needs CAP_NET_RAW, as the kernel has required of user
    /// programs since 2023 ("RDMA/uverbs: Restrict usage of privileged
    /// QKEYs"): without it the call fails with EPERM
    /// ([`Error::Permission`]).
    pub fn modify(&self, attr: &QpAttr, mask: AttrMask) -> Result<()> {
        if mask.contains(AttrMask::QKEY)
            && attr.qkey.0 & CONTROLLED_QKEY != 0
            && !crate::privilege::has_cap_net_raw()
        {
            return Err(Error::Permission(format!(
                "Q_Key {:#010x} is a controlled Q_Key (most significant bit set): \
                 setting one needs CAP_NET_RAW",
                attr.qkey.0
            )));
        }
        // What the QP can send now leaves, and what has arrived is taken,
        // before it goes to ERR or RESET (`Shared::modify_qp`).
        Ok(self.pd.inner.dev.shared().modify_qp(self.qpn, attr, mask)?)
    }

    /// The UDP port this RC/UC QP takes packets from: given at connect
    /// time or learned from the first packet it expected after RTR;
    /// `None` before (see [`QueuePair::set_peer_port`]).
    pub fn peer_port(&self) -> Result<Option<u16>> {
        let q = self.qpn;
        Ok(self.pd.inner.dev.shared().peek_core(|c| c.peer_port(q))?)
    }

    /// Takes packets only from UDP port `port` of the peer's address from
    /// now on, as when the peer said where it sends from (connect does it
    /// when the endpoint has a port). Packets from another port are
    /// dropped and counted (`wrong_peer`). Cleared by RESET or an address
    /// vector naming another peer. A peer that later sends from another
    /// port is cut off: its packets are dropped until the QP is connected
    /// again.
    pub fn set_peer_port(&self, port: u16) -> Result<()> {
        let q = self.qpn;
        Ok(self.core(|c, _| c.set_peer_port(q, port))?)
    }

    /// `ibv_query_qp`.
    pub fn query(&self) -> Result<QpAttr> {
        let q = self.qpn;
        Ok(self.pd.inner.dev.shared().peek_core(|c| c.query_qp(q))?.0)
    }

    /// Current state.
    pub fn state(&self) -> Result<QpState> {
        let q = self.qpn;
        Ok(self.pd.inner.dev.shared().peek_core(|c| c.qp_state(q))?)
    }

    /// Counters of this QP.
    pub fn counters(&self) -> Result<Counters> {
        let q = self.qpn;
        Ok(self.pd.inner.dev.shared().peek_core(|c| c.qp_counters(q))?)
    }

    /// `ibv_post_send` of one work request. Its packets are on their way
    /// when this returns, or — while this program is spinning on a CQ — go
    /// out with its next poll, batched with the other requests posted
    /// meanwhile.
    pub fn post_send(&self, wr: SendWr) -> Result<()> {
        let q = self.qpn;
        Ok(self
            .pd
            .inner
            .dev
            .shared()
            .with_core_post(|c, now| c.post_send(now, q, wr))?)
    }

    /// Posts several work requests under one lock; stops at the first
    /// failure and returns its index with the error (`bad_wr`).
    pub fn post_send_batch(
        &self,
        wrs: impl IntoIterator<Item = SendWr>,
    ) -> std::result::Result<(), (usize, Error)> {
        let q = self.qpn;
        self.pd.inner.dev.shared().with_core_post(|c, now| {
            for (i, wr) in wrs.into_iter().enumerate() {
                c.post_send(now, q, wr).map_err(|e| (i, Error::from(e)))?;
            }
            Ok(())
        })
    }

    /// Binds `mw` to `len` bytes of `mr` at `addr` with rights `access`
    /// through this QP (type 1 as `ibv_bind_mw` does it, type 2 as a
    /// BIND_MW work request), with the key byte after the window's current
    /// one (`ibv_inc_rkey`); returns that key. The bind happens in posting
    /// order and completes with `WcOpcode::BindMw` (signaled with
    /// `flags`), or `WcStatus::MwBindErr` when a rule of IBA 10.6.7 is
    /// broken (the QP then goes to the error state). `len` 0 unbinds a
    /// type 1 window.
    #[allow(clippy::too_many_arguments)]
    pub fn bind_mw(
        &self,
        wr_id: u64,
        mw: &MemoryWindow,
        mr: Option<&MemoryRegion>,
        addr: u64,
        len: u64,
        access: Access,
        flags: SendFlags,
    ) -> Result<RKey> {
        let cur = mw.rkey();
        let rkey = RKey(cur.0 & !0xff | (cur.0.wrapping_add(1) & 0xff));
        let mut wr = SendWr::new(wr_id, WrOpcode::BindMw);
        wr.flags = flags;
        wr.bind = Some(MwBind {
            mw: mw.id(),
            rkey,
            mr_lkey: mr.map_or(0, |m| m.lkey()),
            addr,
            length: len,
            access,
        });
        self.post_send(wr)?;
        Ok(rkey)
    }

    /// `ibv_post_recv`.
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        let q = self.qpn;
        Ok(self.core(|c, now| c.post_recv(now, q, wr))?)
    }

    /// What a peer needs to connect to this QP, sending from `psn`.
    pub fn endpoint(&self, psn: Psn) -> QpEndpoint {
        QpEndpoint {
            gid: self.pd.inner.dev.gid(),
            qpn: self.qpn,
            psn,
            port: Some(self.pd.inner.dev.local_addr().port()),
        }
    }

    /// RESET → INIT → RTR → RTS towards `remote` (for UD, `remote` only
    /// supplies nothing: UD QPs have no peer). `local_psn` is the first PSN
    /// this QP sends; the remote's is the first it expects.
    pub fn connect(&self, local_psn: Psn, remote: &QpEndpoint, o: &ConnectOptions) -> Result<()> {
        let init = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            pkey_index: 0,
            // The remote rights, MW_BIND and the FLUSH rights.
            qp_access_flags: Access(o.access.0 & Access::QP_SUPPORTED),
            qkey: o.qkey,
            ..Default::default()
        };
        let m = AttrMask::required(self.qp_type, QpState::Reset, QpState::Init)
            .expect("a bring-up transition");
        self.modify(&init, m)?;
        let mut av = AddressVector::to(addr_of_gid(remote.gid));
        av.traffic_class = o.traffic_class;
        let rtr = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: o.mtu,
            dest_qp_num: remote.qpn,
            rq_psn: remote.psn,
            max_dest_rd_atomic: o.max_rd_atomic,
            min_rnr_timer: o.min_rnr_timer,
            ah_attr: av,
            ..Default::default()
        };
        let m = AttrMask::required(self.qp_type, QpState::Init, QpState::Rtr)
            .expect("a bring-up transition");
        let q = self.qpn;
        let pin = remote.port.filter(|_| self.qp_type != QpType::Ud);
        // RTR and the peer's port in one step: no packet is taken between.
        self.core(|c, now| {
            c.modify_qp(now, q, &rtr, m)?;
            match pin {
                Some(port) => c.set_peer_port(q, port),
                None => Ok(()),
            }
        })?;
        // (The same-host path's way to the peer is asked for, as
        // `modify_qp` does: never waited for.)
        self.pd.inner.dev.shared().ask_way(
            std::net::SocketAddr::new(rtr.ah_attr.dest, pin.unwrap_or(rtr.ah_attr.dest_port)),
            remote.qpn,
        );
        let rts = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: local_psn,
            timeout: o.timeout,
            retry_cnt: o.retry_cnt,
            rnr_retry: o.rnr_retry,
            max_rd_atomic: o.max_rd_atomic,
            ..Default::default()
        };
        let m = AttrMask::required(self.qp_type, QpState::Rtr, QpState::Rts)
            .expect("a bring-up transition");
        self.modify(&rts, m)
    }
}
