// XRC's structures of Debian 12's <infiniband/verbs.h> (rdma-core 44) as
// `repr(C)`, written by hand; part of `ffi` (ffi.rs includes this file,
// and so does build.rs with it), which checks every size and listed
// member against the header (the table at the bottom) and the entry
// points' signatures.

/// `struct ibv_xrcd`: an XRC domain.
#[repr(C)]
pub struct ibv_xrcd {
    pub context: *mut ibv_context,
}

/// `enum ibv_xrcd_init_attr_mask` bits.
pub const IBV_XRCD_INIT_ATTR_FD: u32 = 1 << 0;
pub const IBV_XRCD_INIT_ATTR_OFLAGS: u32 = 1 << 1;
pub const IBV_XRCD_INIT_ATTR_RESERVED: u32 = 1 << 2;

/// `struct ibv_xrcd_init_attr`.
#[repr(C)]
pub struct ibv_xrcd_init_attr {
    pub comp_mask: u32,
    pub fd: c_int,
    pub oflags: c_int,
}

/// `enum ibv_qp_open_attr_mask` bits.
pub const IBV_QP_OPEN_ATTR_NUM: u32 = 1 << 0;
pub const IBV_QP_OPEN_ATTR_XRCD: u32 = 1 << 1;
pub const IBV_QP_OPEN_ATTR_CONTEXT: u32 = 1 << 2;
pub const IBV_QP_OPEN_ATTR_TYPE: u32 = 1 << 3;
pub const IBV_QP_OPEN_ATTR_RESERVED: u32 = 1 << 4;

/// `struct ibv_qp_open_attr`.
#[repr(C)]
pub struct ibv_qp_open_attr {
    pub comp_mask: u32,
    pub qp_num: u32,
    pub xrcd: *mut ibv_xrcd,
    pub qp_context: *mut c_void,
    pub qp_type: c_int,
}

/// `verbs_context->open_xrcd`.
pub type OpenXrcdFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd;
/// `verbs_context->close_xrcd`.
pub type CloseXrcdFn = unsafe extern "C" fn(*mut ibv_xrcd) -> c_int;
/// `verbs_context->open_qp`.
pub type OpenQpFn = unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_open_attr) -> *mut ibv_qp;

/// `IBV_DEVICE_XRC` of `device_cap_flags`: the device has XRC.
pub const IBV_DEVICE_XRC: c_uint = 1 << 20;

/// `enum ibv_srq_type`: XRC.
pub const IBV_SRQT_XRC: c_int = 1;
/// `enum ibv_srq_init_attr_mask`: the XRC domain and CQ members.
pub const IBV_SRQ_INIT_ATTR_XRCD: u32 = 1 << 2;
pub const IBV_SRQ_INIT_ATTR_CQ: u32 = 1 << 3;
/// `enum ibv_qp_init_attr_mask`: the XRC domain member.
pub const IBV_QP_INIT_ATTR_XRCD: u32 = 1 << 1;
/// `enum ibv_qp_type`: XRC.
pub const IBV_QPT_XRC_SEND: c_int = 9;
pub const IBV_QPT_XRC_RECV: c_int = 10;

layout_checks! {
    fn xrc_layout_table;
    struct ibv_xrcd { context }
    struct ibv_xrcd_init_attr { comp_mask, fd, oflags }
    struct ibv_qp_open_attr { comp_mask, qp_num, xrcd, qp_context, qp_type }
}
