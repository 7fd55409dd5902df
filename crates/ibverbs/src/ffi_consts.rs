// libibverbs' constants, and the thread and parent domain structures.
// Part of `ffi` (ffi.rs includes this file, and build.rs includes ffi.rs):
// no `use` of its own, names as in C.

pub const IBV_NODE_CA: c_int = 1;
pub const IBV_TRANSPORT_IB: c_int = 0;

pub const IBV_ATOMIC_HCA: c_int = 1;

pub const IBV_DEVICE_BAD_PKEY_CNTR: c_uint = 1 << 1;
pub const IBV_DEVICE_BAD_QKEY_CNTR: c_uint = 1 << 2;
pub const IBV_DEVICE_CURR_QP_STATE_MOD: c_uint = 1 << 7;
pub const IBV_DEVICE_SYS_IMAGE_GUID: c_uint = 1 << 11;
pub const IBV_DEVICE_RC_RNR_NAK_GEN: c_uint = 1 << 12;
pub const IBV_DEVICE_SRQ_RESIZE: c_uint = 1 << 13;
pub const IBV_DEVICE_N_NOTIFY_CQ: c_uint = 1 << 14;
pub const IBV_DEVICE_MEM_WINDOW: c_uint = 1 << 17;
pub const IBV_DEVICE_MEM_WINDOW_TYPE_2A: c_uint = 1 << 23;
pub const IBV_DEVICE_MEM_WINDOW_TYPE_2B: c_uint = 1 << 24;
/// `device_cap_flags_ex` bits of the Memory Placement Extensions
/// (IB_UVERBS_DEVICE_FLUSH_GLOBAL, _FLUSH_PERSISTENT, _ATOMIC_WRITE).
pub const IBV_DEVICE_FLUSH_GLOBAL: u64 = 1 << 38;
pub const IBV_DEVICE_FLUSH_PERSISTENT: u64 = 1 << 39;
pub const IBV_DEVICE_ATOMIC_WRITE: u64 = 1 << 40;

pub const IBV_PORT_ACTIVE: c_int = 4;
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;
pub const IBV_PORT_CM_SUP: u32 = 1 << 16;
pub const IBV_PORT_IP_BASED_GIDS: u32 = 1 << 26;

pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;

pub const IBV_EVENT_CQ_ERR: c_int = 0;
pub const IBV_EVENT_QP_FATAL: c_int = 1;
pub const IBV_EVENT_QP_REQ_ERR: c_int = 2;
pub const IBV_EVENT_QP_ACCESS_ERR: c_int = 3;
pub const IBV_EVENT_COMM_EST: c_int = 4;
pub const IBV_EVENT_SQ_DRAINED: c_int = 5;
pub const IBV_EVENT_PATH_MIG: c_int = 6;
pub const IBV_EVENT_PATH_MIG_ERR: c_int = 7;
pub const IBV_EVENT_SRQ_ERR: c_int = 14;
pub const IBV_EVENT_SRQ_LIMIT_REACHED: c_int = 15;
pub const IBV_EVENT_QP_LAST_WQE_REACHED: c_int = 16;

pub const IBV_WC_GRH: c_uint = 1;
pub const IBV_WC_WITH_IMM: c_uint = 1 << 1;
pub const IBV_WC_WITH_INV: c_uint = 1 << 3;

pub const IBV_WC_EX_WITH_BYTE_LEN: u64 = 1 << 0;
pub const IBV_WC_EX_WITH_IMM: u64 = 1 << 1;
pub const IBV_WC_EX_WITH_QP_NUM: u64 = 1 << 2;
pub const IBV_WC_EX_WITH_SRC_QP: u64 = 1 << 3;
pub const IBV_WC_EX_WITH_SLID: u64 = 1 << 4;
pub const IBV_WC_EX_WITH_SL: u64 = 1 << 5;
pub const IBV_WC_EX_WITH_DLID_PATH_BITS: u64 = 1 << 6;
pub const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP: u64 = 1 << 7;
pub const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK: u64 = 1 << 11;
pub const IBV_WC_STANDARD_FLAGS: u64 = 0x7f;

pub const IBV_CQ_INIT_ATTR_MASK_FLAGS: u32 = 1 << 0;
pub const IBV_CQ_INIT_ATTR_MASK_PD: u32 = 1 << 1;
pub const IBV_CREATE_CQ_ATTR_SINGLE_THREADED: u32 = 1 << 0;

pub const IBV_SEND_FENCE: c_uint = 1;
pub const IBV_SEND_SIGNALED: c_uint = 1 << 1;
pub const IBV_SEND_SOLICITED: c_uint = 1 << 2;
pub const IBV_SEND_INLINE: c_uint = 1 << 3;

pub const IBV_QPT_RC: c_int = 2;
pub const IBV_QPT_UC: c_int = 3;
pub const IBV_QPT_UD: c_int = 4;

pub const IBV_QP_INIT_ATTR_PD: u32 = 1 << 0;
pub const IBV_QP_INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
pub const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;

pub const IBV_QP_EX_WITH_RDMA_WRITE: u64 = 1 << 0;
pub const IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
pub const IBV_QP_EX_WITH_SEND: u64 = 1 << 2;
pub const IBV_QP_EX_WITH_SEND_WITH_IMM: u64 = 1 << 3;
pub const IBV_QP_EX_WITH_RDMA_READ: u64 = 1 << 4;
pub const IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
pub const IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
pub const IBV_QP_EX_WITH_LOCAL_INV: u64 = 1 << 7;
pub const IBV_QP_EX_WITH_BIND_MW: u64 = 1 << 8;
pub const IBV_QP_EX_WITH_SEND_WITH_INV: u64 = 1 << 9;
/// rdma-core 47+.
pub const IBV_QP_EX_WITH_FLUSH: u64 = 1 << 11;
pub const IBV_QP_EX_WITH_ATOMIC_WRITE: u64 = 1 << 12;

pub const IBV_WR_BIND_MW: c_int = 8;
/// rdma-core 47+ (no `ibv_send_wr` fields: only `ibv_wr_flush` posts it).
pub const IBV_WR_FLUSH: c_int = 14;
pub const IBV_WR_ATOMIC_WRITE: c_int = 15;

pub const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
pub const IBV_ACCESS_MW_BIND: c_int = 1 << 4;
pub const IBV_ACCESS_ZERO_BASED: c_int = 1 << 5;
pub const IBV_ACCESS_ON_DEMAND: c_int = 1 << 6;
pub const IBV_ACCESS_HUGETLB: c_int = 1 << 7;
/// rdma-core 47+.
pub const IBV_ACCESS_FLUSH_GLOBAL: c_int = 1 << 8;
pub const IBV_ACCESS_FLUSH_PERSISTENT: c_int = 1 << 9;

pub const IBV_MW_TYPE_1: c_int = 1;
pub const IBV_MW_TYPE_2: c_int = 2;

pub const IBV_REREG_MR_CHANGE_TRANSLATION: c_int = 1;
pub const IBV_REREG_MR_CHANGE_PD: c_int = 1 << 1;
pub const IBV_REREG_MR_CHANGE_ACCESS: c_int = 1 << 2;
pub const IBV_REREG_MR_ERR_INPUT: c_int = -1;
pub const IBV_REREG_MR_ERR_CMD: c_int = -4;

pub const IBV_ADVISE_MR_ADVICE_PREFETCH: c_int = 0;
pub const IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE: c_int = 1;
pub const IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT: c_int = 2;
pub const IBV_ADVISE_MR_FLAG_FLUSH: u32 = 1;

pub const IBV_SRQ_MAX_WR: c_int = 1 << 0;
pub const IBV_SRQ_LIMIT: c_int = 1 << 1;
pub const IBV_SRQ_INIT_ATTR_TYPE: u32 = 1 << 0;
pub const IBV_SRQ_INIT_ATTR_PD: u32 = 1 << 1;
pub const IBV_SRQT_BASIC: c_int = 0;

pub const IBV_QP_STATE: c_int = 1 << 0;
pub const IBV_QP_CUR_STATE: c_int = 1 << 1;
pub const IBV_QP_EN_SQD_ASYNC_NOTIFY: c_int = 1 << 2;
pub const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
pub const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub const IBV_QP_PORT: c_int = 1 << 5;
pub const IBV_QP_QKEY: c_int = 1 << 6;
pub const IBV_QP_AV: c_int = 1 << 7;
pub const IBV_QP_PATH_MTU: c_int = 1 << 8;
pub const IBV_QP_TIMEOUT: c_int = 1 << 9;
pub const IBV_QP_RETRY_CNT: c_int = 1 << 10;
pub const IBV_QP_RNR_RETRY: c_int = 1 << 11;
pub const IBV_QP_RQ_PSN: c_int = 1 << 12;
pub const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
pub const IBV_QP_ALT_PATH: c_int = 1 << 14;
pub const IBV_QP_MIN_RNR_TIMER: c_int = 1 << 15;
pub const IBV_QP_SQ_PSN: c_int = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
pub const IBV_QP_PATH_MIG_STATE: c_int = 1 << 18;
pub const IBV_QP_CAP: c_int = 1 << 19;
pub const IBV_QP_DEST_QPN: c_int = 1 << 20;
pub const IBV_QP_RATE_LIMIT: c_int = 1 << 25;

pub const IBV_ACCESS_OPTIONAL_RANGE: c_int = 0x3ff0_0000;

pub const IBV_FORK_UNNEEDED: c_int = 2;

// ------------------------------------ thread and parent domains (verbs.h) ----

#[repr(C)]
pub struct ibv_td_init_attr {
    pub comp_mask: u32,
}

#[repr(C)]
pub struct ibv_td {
    pub context: *mut ibv_context,
}

#[repr(C)]
pub struct ibv_parent_domain_init_attr {
    pub pd: *mut ibv_pd,
    pub td: *mut ibv_td,
    pub comp_mask: u32,
    pub alloc: Option<PdAllocFn>,
    pub free: Option<PdFreeFn>,
    pub pd_context: *mut c_void,
}

pub const IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS: u32 = 1 << 0;
pub const IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT: u32 = 1 << 1;
/// `IBV_ALLOCATOR_USE_DEFAULT`: an allocator's "use your own".
pub const IBV_ALLOCATOR_USE_DEFAULT: usize = usize::MAX;
