//! What `query_device` reports: the device's attributes and on-demand
//! paging capabilities, and `ibv_advise_mr`'s advice.

/// Device attributes (`ibv_device_attr`, the parts that mean something here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Node GUID.
    pub node_guid: u64,
    /// Largest region.
    pub max_mr_size: u64,
    /// Queue pairs.
    pub max_qp: u32,
    /// Work requests per queue.
    pub max_qp_wr: u32,
    /// SGEs per work request.
    pub max_sge: u32,
    /// SGEs per READ.
    pub max_sge_rd: u32,
    /// CQs.
    pub max_cq: u32,
    /// Entries per CQ.
    pub max_cqe: u32,
    /// Regions.
    pub max_mr: u32,
    /// Protection domains.
    pub max_pd: u32,
    /// Outstanding READ/atomic per QP as responder.
    pub max_qp_rd_atom: u32,
    /// Outstanding READ/atomic per QP as requester.
    pub max_qp_init_rd_atom: u32,
    /// SRQs.
    pub max_srq: u32,
    /// Work requests per SRQ.
    pub max_srq_wr: u32,
    /// SGEs per SRQ work request.
    pub max_srq_sge: u32,
    /// Address handles.
    pub max_ah: u32,
    /// P_Keys.
    pub max_pkeys: u16,
    /// Inline bytes.
    pub max_inline_data: u32,
    /// Memory windows.
    pub max_mw: u32,
    /// On-demand paging (`odp_caps`).
    pub odp: OdpCaps,
}

/// On-demand paging capabilities (`ibv_odp_caps`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OdpCaps {
    /// `IBV_ODP_SUPPORT` | `IBV_ODP_SUPPORT_IMPLICIT`.
    pub general: u64,
    /// What RC QPs do on ODP regions (`IBV_ODP_SUPPORT_*` bits).
    pub rc: u32,
    /// What UC QPs do.
    pub uc: u32,
    /// What UD QPs do.
    pub ud: u32,
    /// Largest implicit region (`max_size` of `ibv_odp_caps`' implicit
    /// caps in the extended query; the whole 64-bit space).
    pub implicit_max: u64,
}

impl OdpCaps {
    /// IBV_ODP_SUPPORT.
    pub const SUPPORT: u64 = 1;
    /// IBV_ODP_SUPPORT_IMPLICIT.
    pub const SUPPORT_IMPLICIT: u64 = 2;
    /// IBV_ODP_SUPPORT_SEND.
    pub const SEND: u32 = 1;
    /// IBV_ODP_SUPPORT_RECV.
    pub const RECV: u32 = 2;
    /// IBV_ODP_SUPPORT_WRITE.
    pub const WRITE: u32 = 4;
    /// IBV_ODP_SUPPORT_READ.
    pub const READ: u32 = 8;
    /// IBV_ODP_SUPPORT_ATOMIC.
    pub const ATOMIC: u32 = 16;
    /// IBV_ODP_SUPPORT_SRQ_RECV.
    pub const SRQ_RECV: u32 = 32;
    /// IBV_ODP_SUPPORT_FLUSH (rdma-core 56).
    pub const FLUSH: u32 = 64;
    /// IBV_ODP_SUPPORT_ATOMIC_WRITE (rdma-core 56).
    pub const ATOMIC_WRITE: u32 = 128;

    /// softrdma's: every operation of every transport reaches on-demand
    /// regions the same way as pinned ones, and implicit regions exist.
    pub const fn softrdma() -> OdpCaps {
        OdpCaps {
            general: Self::SUPPORT | Self::SUPPORT_IMPLICIT,
            rc: Self::SEND
                | Self::RECV
                | Self::WRITE
                | Self::READ
                | Self::ATOMIC
                | Self::SRQ_RECV
                | Self::FLUSH
                | Self::ATOMIC_WRITE,
            uc: Self::SEND | Self::RECV | Self::WRITE | Self::SRQ_RECV,
            ud: Self::SEND | Self::RECV | Self::SRQ_RECV,
            implicit_max: u64::MAX,
        }
    }
}

/// `ibv_advise_mr`'s advice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// IBV_ADVISE_MR_ADVICE_PREFETCH: bring the pages in, readable.
    Prefetch,
    /// IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE: readable and writable.
    PrefetchWrite,
    /// IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT: only pages already present
    /// (nothing to do: softrdma keeps no translation to update).
    PrefetchNoFault,
}
