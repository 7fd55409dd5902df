// The C structures of libibverbs (Debian 12, rdma-core 44: `infiniband/verbs.h`),
// written by hand as `repr(C)`.
//
// This file is also `include!`d by build.rs: the `LAYOUT` table (ffi_layout.rs)
// lists every structure and member with its offset and size as Rust lays
// them out, and build.rs turns it into `_Static_assert`s compiled against
// the real header, so any difference fails the build. It must therefore
// stay self-contained (no `use` of other crates).
//
// Names follow the C ones, hence the lint exceptions where it is declared.

use core::ffi::{c_char, c_int, c_uint, c_void};

/// `pthread_mutex_t` on x86-64 glibc (an opaque 40-byte, 8-aligned blob;
/// zeroed is `PTHREAD_MUTEX_INITIALIZER`).
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct pthread_mutex_t(pub [u8; 40]);
/// `pthread_cond_t` on x86-64 glibc (opaque, 48 bytes).
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct pthread_cond_t(pub [u8; 48]);

/// `union ibv_gid` (raw bytes; the `global` view is two big-endian u64s,
/// hence the alignment).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

#[repr(C)]
pub struct _ibv_device_ops {
    pub _dummy1: *mut c_void,
    pub _dummy2: *mut c_void,
}

pub const IBV_SYSFS_NAME_MAX: usize = 64;
pub const IBV_SYSFS_PATH_MAX: usize = 256;

#[repr(C)]
pub struct ibv_device {
    pub _ops: _ibv_device_ops,
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

/// C enums the exported functions take or return, by their verbs.h names
/// (32 bits; build.rs checks the prototypes as `enum NAME`).
pub type ibv_rate = c_int;
/// See [`ibv_rate`].
pub type ibv_event_type = c_int;
/// See [`ibv_rate`].
pub type ibv_port_state = c_int;
/// See [`ibv_rate`].
pub type ibv_wc_status = c_int;
/// See [`ibv_rate`].
pub type ibv_node_type = c_int;
/// See [`ibv_rate`].
pub type ibv_fork_status = c_int;
/// See [`ibv_rate`].
pub type ibv_wr_opcode = c_int;
/// See [`ibv_rate`].
pub type ibv_wc_opcode = c_int;
/// See [`ibv_rate`].
pub type ibv_mw_type = c_int;
/// See [`ibv_rate`].
pub type ibv_advise_mr_advice = c_int;
/// A big-endian 64-bit value (`__be64`).
pub type __be64 = u64;
/// The pre-`port_cap_flags2` `ibv_port_attr` that `ibv_query_port` fills
/// (only ever behind a pointer).
pub enum _compat_ibv_port_attr {}

pub type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
pub type ReqNotifyFn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
pub type PostSendFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
pub type PostRecvFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
pub type PostSrqRecvFn =
    unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
pub type AllocMwFn = unsafe extern "C" fn(*mut ibv_pd, ibv_mw_type) -> *mut ibv_mw;
pub type BindMwFn = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int;
pub type DeallocMwFn = unsafe extern "C" fn(*mut ibv_mw) -> c_int;
pub type CompatQueryDeviceFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int;
pub type CompatQueryPortFn =
    unsafe extern "C" fn(*mut ibv_context, u8, *mut _compat_ibv_port_attr) -> c_int;

/// `struct ibv_context_ops`: what verbs.h's inline `ibv_post_send`,
/// `ibv_poll_cq`, … call through. The `_compat_*` slots are never called by
/// programs built against rdma-core's headers.
#[repr(C)]
pub struct ibv_context_ops {
    pub _compat_query_device: Option<CompatQueryDeviceFn>,
    pub _compat_query_port: Option<CompatQueryPortFn>,
    pub _compat_alloc_pd: *mut c_void,
    pub _compat_dealloc_pd: *mut c_void,
    pub _compat_reg_mr: *mut c_void,
    pub _compat_rereg_mr: *mut c_void,
    pub _compat_dereg_mr: *mut c_void,
    pub alloc_mw: Option<AllocMwFn>,
    pub bind_mw: Option<BindMwFn>,
    pub dealloc_mw: Option<DeallocMwFn>,
    pub _compat_create_cq: *mut c_void,
    pub poll_cq: Option<PollCqFn>,
    pub req_notify_cq: Option<ReqNotifyFn>,
    pub _compat_cq_event: *mut c_void,
    pub _compat_resize_cq: *mut c_void,
    pub _compat_destroy_cq: *mut c_void,
    pub _compat_create_srq: *mut c_void,
    pub _compat_modify_srq: *mut c_void,
    pub _compat_query_srq: *mut c_void,
    pub _compat_destroy_srq: *mut c_void,
    pub post_srq_recv: Option<PostSrqRecvFn>,
    pub _compat_create_qp: *mut c_void,
    pub _compat_query_qp: *mut c_void,
    pub _compat_modify_qp: *mut c_void,
    pub _compat_destroy_qp: *mut c_void,
    pub post_send: Option<PostSendFn>,
    pub post_recv: Option<PostRecvFn>,
    pub _compat_create_ah: *mut c_void,
    pub _compat_destroy_ah: *mut c_void,
    pub _compat_attach_mcast: *mut c_void,
    pub _compat_detach_mcast: *mut c_void,
    pub _compat_async_event: *mut c_void,
}

#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: pthread_mutex_t,
    pub abi_compat: *mut c_void,
}

pub type QueryPortFn =
    unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int;
pub type CreateCqExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex;
pub type QueryDeviceExFn = unsafe extern "C" fn(
    *mut ibv_context,
    *const ibv_query_device_ex_input,
    *mut ibv_device_attr_ex,
    usize,
) -> c_int;
pub type CreateQpExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp;
pub type CreateSrqExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_srq_init_attr_ex) -> *mut ibv_srq;
pub type GetSrqNumFn = unsafe extern "C" fn(*mut ibv_srq, *mut u32) -> c_int;
pub type QueryRtValuesFn = unsafe extern "C" fn(*mut ibv_context, *mut ibv_values_ex) -> c_int;
pub type ModifyCqFn = unsafe extern "C" fn(*mut ibv_cq, *mut ibv_modify_cq_attr) -> c_int;
pub type AllocParentDomainFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_parent_domain_init_attr) -> *mut ibv_pd;
pub type DeallocTdFn = unsafe extern "C" fn(*mut ibv_td) -> c_int;
pub type AllocTdFn = unsafe extern "C" fn(*mut ibv_context, *mut ibv_td_init_attr) -> *mut ibv_td;
/// A parent domain's allocator: `(pd, pd_context, size, alignment,
/// resource_type)`.
pub type PdAllocFn =
    unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, usize, u64) -> *mut c_void;
/// A parent domain's free: `(pd, pd_context, ptr, resource_type)`.
pub type PdFreeFn = unsafe extern "C" fn(*mut ibv_pd, *mut c_void, *mut c_void, u64);
pub type AdviseMrFn =
    unsafe extern "C" fn(*mut ibv_pd, ibv_advise_mr_advice, u32, *mut ibv_sge, u32) -> c_int;

/// `struct verbs_context`: the extended context, laid out *before* the
/// `ibv_context` a program sees. verbs.h's `verbs_get_ctx_op` finds an
/// entry only when `abi_compat` is `__VERBS_ABI_IS_EXTENDED`, `sz` covers it
/// and it is non-NULL; every slot we leave NULL makes the inline wrapper
/// return EOPNOTSUPP itself.
#[repr(C)]
pub struct verbs_context {
    pub query_port: Option<QueryPortFn>,
    pub advise_mr: Option<AdviseMrFn>,
    pub alloc_null_mr: *mut c_void,
    pub read_counters: *mut c_void,
    pub attach_counters_point_flow: *mut c_void,
    pub create_counters: *mut c_void,
    pub destroy_counters: *mut c_void,
    pub reg_dm_mr: *mut c_void,
    pub alloc_dm: *mut c_void,
    pub free_dm: *mut c_void,
    pub modify_flow_action_esp: *mut c_void,
    pub destroy_flow_action: *mut c_void,
    pub create_flow_action_esp: *mut c_void,
    pub modify_qp_rate_limit: *mut c_void,
    pub alloc_parent_domain: Option<AllocParentDomainFn>,
    pub dealloc_td: Option<DeallocTdFn>,
    pub alloc_td: Option<AllocTdFn>,
    pub modify_cq: Option<ModifyCqFn>,
    pub post_srq_ops: *mut c_void,
    pub destroy_rwq_ind_table: *mut c_void,
    pub create_rwq_ind_table: *mut c_void,
    pub destroy_wq: *mut c_void,
    pub modify_wq: *mut c_void,
    pub create_wq: *mut c_void,
    pub query_rt_values: Option<QueryRtValuesFn>,
    pub create_cq_ex: Option<CreateCqExFn>,
    pub priv_: *mut c_void,
    pub query_device_ex: Option<QueryDeviceExFn>,
    pub ibv_destroy_flow: *mut c_void,
    pub ABI_placeholder2: *mut c_void,
    pub ibv_create_flow: *mut c_void,
    pub ABI_placeholder1: *mut c_void,
    pub open_qp: Option<OpenQpFn>,
    pub create_qp_ex: Option<CreateQpExFn>,
    pub get_srq_num: Option<GetSrqNumFn>,
    pub create_srq_ex: Option<CreateSrqExFn>,
    pub open_xrcd: Option<OpenXrcdFn>,
    pub close_xrcd: Option<CloseXrcdFn>,
    pub _ABI_placeholder3: u64,
    pub sz: usize,
    pub context: ibv_context,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_int,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

#[repr(C)]
pub struct ibv_query_device_ex_input {
    pub comp_mask: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_odp_per_transport_caps {
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_odp_caps {
    pub general_caps: u64,
    pub per_transport_caps: ibv_odp_per_transport_caps,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_tso_caps {
    pub max_tso: u32,
    pub supported_qpts: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_rss_caps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub rx_hash_fields_mask: u64,
    pub rx_hash_function: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_packet_pacing_caps {
    pub qp_rate_limit_min: u32,
    pub qp_rate_limit_max: u32,
    pub supported_qpts: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_tm_caps {
    pub max_rndv_hdr_size: u32,
    pub max_num_tags: u32,
    pub flags: u32,
    pub max_ops: u32,
    pub max_sge: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_cq_moderation_caps {
    pub max_cq_count: u16,
    pub max_cq_period: u16,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_pci_atomic_caps {
    pub fetch_add: u16,
    pub swap: u16,
    pub compare_swap: u16,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    pub odp_caps: ibv_odp_caps,
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    pub tso_caps: ibv_tso_caps,
    pub rss_caps: ibv_rss_caps,
    pub max_wq_type_rq: u32,
    pub packet_pacing_caps: ibv_packet_pacing_caps,
    pub raw_packet_caps: u32,
    pub tm_caps: ibv_tm_caps,
    pub cq_mod_caps: ibv_cq_moderation_caps,
    pub max_dm_size: u64,
    pub pci_atomic_caps: ibv_pci_atomic_caps,
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_port_attr {
    pub state: c_int,
    pub max_mtu: c_int,
    pub active_mtu: c_int,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
    /// rdma-core 49+ (abi/rdma-core.txt): the speed when it does not fit
    /// `active_speed`; 0 means "see active_speed".
    pub active_speed_ex: u32,
}

include!("ffi_queues.rs");
include!("ffi_consts.rs");
include!("ffi_layout.rs");
include!("ffi_xrc.rs");
