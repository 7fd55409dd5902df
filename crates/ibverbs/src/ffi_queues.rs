// libibverbs' structures of memory, address handles, shared receive
// queues, queue pairs, work requests and completion queues (Debian 12's
// <infiniband/verbs.h>, rdma-core 44), as `repr(C)`, written by hand.
// Part of `ffi` (ffi.rs includes this file, and build.rs includes ffi.rs):
// no `use` of its own, names as in C.

/// `ibv_async_event.element` (a union of pointers and an int).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_async_event {
    pub element: *mut c_void,
    pub event_type: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: c_int,
    pub opcode: c_int,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// Union with `invalidated_rkey` (same size).
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

#[repr(C)]
pub struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: c_uint,
}

#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

#[repr(C)]
pub struct ibv_mw {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub rkey: u32,
    pub handle: u32,
    pub type_: c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_grh {
    pub version_tclass_flow: u32,
    pub paylen: u16,
    pub next_hdr: u8,
    pub hop_limit: u8,
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

#[repr(C)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

#[repr(C)]
pub struct ibv_tm_cap {
    pub max_num_tags: u32,
    pub max_ops: u32,
}

#[repr(C)]
pub struct ibv_srq_init_attr_ex {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
    pub comp_mask: u32,
    pub srq_type: c_int,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut ibv_xrcd,
    pub cq: *mut ibv_cq,
    pub tm_cap: ibv_tm_cap,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

#[repr(C)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

#[repr(C)]
pub struct ibv_rx_hash_conf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

#[repr(C)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut ibv_xrcd,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: ibv_rx_hash_conf,
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_attr {
    pub qp_state: c_int,
    pub cur_qp_state: c_int,
    pub path_mtu: c_int,
    pub path_mig_state: c_int,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// `ibv_send_wr.wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    pub rdma: ibv_send_wr_rdma,
    pub atomic: ibv_send_wr_atomic,
    pub ud: ibv_send_wr_ud,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_xrc {
    pub remote_srqn: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_qp_type {
    pub xrc: ibv_send_wr_xrc,
}

/// The bind_mw member of `ibv_send_wr`'s last (anonymous) union, the
/// larger of its two members.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_bind_mw {
    pub mw: *mut ibv_mw,
    pub rkey: u32,
    pub bind_info_mr: *mut ibv_mr,
    pub bind_info_addr: u64,
    pub bind_info_length: u64,
    pub bind_info_mw_access_flags: c_uint,
}

#[repr(C)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_int,
    pub send_flags: c_uint,
    /// Union with `invalidate_rkey`.
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    pub qp_type: ibv_send_wr_qp_type,
    pub bind_mw: ibv_send_wr_bind_mw,
}

#[repr(C)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

#[repr(C)]
pub struct ibv_mw_bind {
    pub wr_id: u64,
    pub send_flags: c_uint,
    pub bind_info: ibv_mw_bind_info,
}

#[repr(C)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_int,
    pub qp_type: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

pub type WrAtomicCmpSwpFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64, u64);
pub type WrAtomicFetchAddFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64);
pub type WrBindMwFn =
    unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_mw, u32, *const ibv_mw_bind_info);
pub type WrRkeyFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32);
pub type WrRdmaFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64);
pub type WrRdmaImmFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32);
pub type WrSendFn = unsafe extern "C" fn(*mut ibv_qp_ex);
pub type WrSendImmFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32);
pub type WrSendTsoFn = unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, u16, u16);
pub type WrSetUdAddrFn = unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_ah, u32, u32);
pub type WrSetInlineFn = unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, usize);
pub type WrSetInlineListFn = unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_data_buf);
pub type WrSetSgeFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32);
pub type WrSetSgeListFn = unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_sge);
pub type WrCompleteFn = unsafe extern "C" fn(*mut ibv_qp_ex) -> c_int;
pub type WrAtomicWriteFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, *const c_void);
/// rdma-core 45+'s `wr_flush` (Debian 12's header has none; build.rs
/// checks it against newer headers when it has them).
pub type WrFlushFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, usize, u8, u8);

/// `struct ibv_qp_ex`: the new post-send API (`ibv_wr_*` call these).
#[repr(C)]
pub struct ibv_qp_ex {
    pub qp_base: ibv_qp,
    pub comp_mask: u64,
    pub wr_id: u64,
    pub wr_flags: c_uint,
    pub wr_atomic_cmp_swp: Option<WrAtomicCmpSwpFn>,
    pub wr_atomic_fetch_add: Option<WrAtomicFetchAddFn>,
    pub wr_bind_mw: Option<WrBindMwFn>,
    pub wr_local_inv: Option<WrRkeyFn>,
    pub wr_rdma_read: Option<WrRdmaFn>,
    pub wr_rdma_write: Option<WrRdmaFn>,
    pub wr_rdma_write_imm: Option<WrRdmaImmFn>,
    pub wr_send: Option<WrSendFn>,
    pub wr_send_imm: Option<WrSendImmFn>,
    pub wr_send_inv: Option<WrRkeyFn>,
    pub wr_send_tso: Option<WrSendTsoFn>,
    pub wr_set_ud_addr: Option<WrSetUdAddrFn>,
    pub wr_set_xrc_srqn: Option<WrRkeyFn>,
    pub wr_set_inline_data: Option<WrSetInlineFn>,
    pub wr_set_inline_data_list: Option<WrSetInlineListFn>,
    pub wr_set_sge: Option<WrSetSgeFn>,
    pub wr_set_sge_list: Option<WrSetSgeListFn>,
    pub wr_start: Option<WrSendFn>,
    pub wr_complete: Option<WrCompleteFn>,
    pub wr_abort: Option<WrSendFn>,
    pub wr_atomic_write: Option<WrAtomicWriteFn>,
    /// rdma-core 45+ (abi/rdma-core.txt).
    pub wr_flush: Option<WrFlushFn>,
}

#[repr(C)]
pub struct ibv_ece {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

#[repr(C)]
pub struct ibv_poll_cq_attr {
    pub comp_mask: u32,
}

#[repr(C)]
pub struct ibv_wc_tm_info {
    pub tag: u64,
    pub priv_: u32,
}

pub type StartPollFn = unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_poll_cq_attr) -> c_int;
pub type NextPollFn = unsafe extern "C" fn(*mut ibv_cq_ex) -> c_int;
pub type EndPollFn = unsafe extern "C" fn(*mut ibv_cq_ex);
pub type ReadU32Fn = unsafe extern "C" fn(*mut ibv_cq_ex) -> u32;
pub type ReadOpcodeFn = unsafe extern "C" fn(*mut ibv_cq_ex) -> ibv_wc_opcode;
pub type ReadUintFn = unsafe extern "C" fn(*mut ibv_cq_ex) -> c_uint;
pub type ReadU8Fn = unsafe extern "C" fn(*mut ibv_cq_ex) -> u8;
pub type ReadU16Fn = unsafe extern "C" fn(*mut ibv_cq_ex) -> u16;
pub type ReadU64Fn = unsafe extern "C" fn(*mut ibv_cq_ex) -> u64;
pub type ReadTmInfoFn = unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_wc_tm_info);

/// `struct ibv_cq_ex`: starts with the fields of `ibv_cq`.
#[repr(C)]
pub struct ibv_cq_ex {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
    pub comp_mask: u32,
    pub status: c_int,
    pub wr_id: u64,
    pub start_poll: Option<StartPollFn>,
    pub next_poll: Option<NextPollFn>,
    pub end_poll: Option<EndPollFn>,
    pub read_opcode: Option<ReadOpcodeFn>,
    pub read_vendor_err: Option<ReadU32Fn>,
    pub read_byte_len: Option<ReadU32Fn>,
    pub read_imm_data: Option<ReadU32Fn>,
    pub read_qp_num: Option<ReadU32Fn>,
    pub read_src_qp: Option<ReadU32Fn>,
    pub read_wc_flags: Option<ReadUintFn>,
    pub read_slid: Option<ReadU32Fn>,
    pub read_sl: Option<ReadU8Fn>,
    pub read_dlid_path_bits: Option<ReadU8Fn>,
    pub read_completion_ts: Option<ReadU64Fn>,
    pub read_cvlan: Option<ReadU16Fn>,
    pub read_flow_tag: Option<ReadU32Fn>,
    pub read_tm_info: Option<ReadTmInfoFn>,
    pub read_completion_wallclock_ns: Option<ReadU64Fn>,
}

#[repr(C)]
pub struct ibv_moderate_cq {
    pub cq_count: u16,
    pub cq_period: u16,
}

#[repr(C)]
pub struct ibv_modify_cq_attr {
    pub attr_mask: u32,
    pub moderate: ibv_moderate_cq,
}

#[repr(C)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

#[repr(C)]
pub struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

#[repr(C)]
pub struct timespec_ {
    pub tv_sec: i64,
    pub tv_nsec: i64,
}

#[repr(C)]
pub struct ibv_values_ex {
    pub comp_mask: u32,
    pub raw_clock: timespec_,
}

#[repr(C)]
pub struct ibv_alloc_dm_attr {
    pub length: usize,
    pub log_align_req: u32,
    pub comp_mask: u32,
}
