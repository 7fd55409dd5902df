// The structures of Debian 12's <rdma/rdma_cma.h> and <infiniband/sa.h>
// (rdma-core 44) as `repr(C)`, written by hand. build.rs checks every size
// and every listed member's offset and size against the real headers (the
// table at the bottom), as it does for verbs.h.

use crate::ffi::{
    ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_gid, ibv_pd, ibv_qp, ibv_srq,
};
use core::ffi::{c_char, c_int, c_void};

/// `enum rdma_port_space` (an int in the C ABI).
pub type rdma_port_space = c_int;
/// `enum rdma_cm_event_type` (an int in the C ABI).
pub type rdma_cm_event_type = c_int;

/// `struct sockaddr_storage` (128 bytes, 8-aligned).
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct sockaddr_storage(pub [u8; 128]);

impl Default for sockaddr_storage {
    fn default() -> Self {
        sockaddr_storage([0; 128])
    }
}

/// `struct rdma_ib_addr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ib_addr {
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
    /// `__be16`.
    pub pkey: u16,
}

/// The `addr` union of `struct rdma_addr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_addr_u {
    pub ibaddr: rdma_ib_addr,
}

/// `struct rdma_addr`: the source and destination unions are
/// `sockaddr_storage`-sized.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_addr {
    pub src_storage: sockaddr_storage,
    pub dst_storage: sockaddr_storage,
    pub addr: rdma_addr_u,
}

/// `struct ibv_sa_path_rec` (sa.h).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_sa_path_rec {
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: c_int,
    /// `__be32`.
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: c_int,
    pub numb_path: u8,
    /// `__be16`.
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct rdma_route`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_route {
    pub addr: rdma_addr,
    pub path_rec: *mut ibv_sa_path_rec,
    pub num_paths: c_int,
}

/// `struct rdma_event_channel`.
#[repr(C)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

/// `struct rdma_cm_id`.
#[repr(C)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    pub ps: c_int,
    pub port_num: u8,
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut ibv_comp_channel,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut ibv_comp_channel,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub pd: *mut ibv_pd,
    pub qp_type: c_int,
}

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct rdma_ud_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ud_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// The `param` union of `struct rdma_cm_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_event_param {
    pub conn: rdma_conn_param,
    pub ud: rdma_ud_param,
}

/// `struct rdma_cm_event`.
#[repr(C)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: c_int,
    pub status: c_int,
    pub param: rdma_cm_event_param,
}

/// `struct rdma_addrinfo`.
#[repr(C)]
pub struct rdma_addrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: u32,
    pub ai_dst_len: u32,
    pub ai_src_addr: *mut libc::sockaddr,
    pub ai_dst_addr: *mut libc::sockaddr,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut rdma_addrinfo,
}

/// `struct rdma_cm_join_mc_attr_ex`.
#[repr(C)]
pub struct rdma_cm_join_mc_attr_ex {
    pub comp_mask: u32,
    pub join_flags: u32,
    pub addr: *mut libc::sockaddr,
}

pub const RDMA_PS_IPOIB: c_int = 0x0002;
pub const RDMA_PS_TCP: c_int = 0x0106;
pub const RDMA_PS_UDP: c_int = 0x0111;
pub const RDMA_PS_IB: c_int = 0x013f;

pub const RAI_PASSIVE: c_int = 1;
pub const RAI_NUMERICHOST: c_int = 2;
pub const RAI_NOROUTE: c_int = 4;
pub const RAI_FAMILY: c_int = 8;

pub const RDMA_OPTION_ID: c_int = 0;
pub const RDMA_OPTION_IB: c_int = 1;
pub const RDMA_OPTION_ID_TOS: c_int = 0;
pub const RDMA_OPTION_ID_REUSEADDR: c_int = 1;
pub const RDMA_OPTION_ID_AFONLY: c_int = 2;
pub const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;
pub const RDMA_OPTION_IB_PATH: c_int = 1;

pub const RDMA_MAX_PRIVATE_DATA: usize = 256;

crate::ffi::layout_checks! {
    fn cm_layout_table;
    struct rdma_ib_addr { sgid, dgid, pkey }
    struct rdma_addr { src_storage, dst_storage, addr.ibaddr }
    struct ibv_sa_path_rec {
        dgid, sgid, dlid, slid, raw_traffic, flow_label, hop_limit, traffic_class,
        reversible, numb_path, pkey, sl, mtu_selector, mtu, rate_selector, rate,
        packet_life_time_selector, packet_life_time, preference
    }
    struct rdma_route { addr, path_rec, num_paths }
    struct rdma_event_channel { fd }
    struct rdma_cm_id {
        verbs, channel, context, qp, route, ps, port_num, event, send_cq_channel, send_cq,
        recv_cq_channel, recv_cq, srq, pd, qp_type
    }
    struct rdma_conn_param {
        private_data, private_data_len, responder_resources, initiator_depth, flow_control,
        retry_count, rnr_retry_count, srq, qp_num
    }
    struct rdma_ud_param { private_data, private_data_len, ah_attr, qp_num, qkey }
    struct rdma_cm_event {
        id, listen_id, event, status, param.conn, param.ud, param.conn.qp_num, param.ud.qkey
    }
    struct rdma_addrinfo {
        ai_flags, ai_family, ai_qp_type, ai_port_space, ai_src_len, ai_dst_len, ai_src_addr,
        ai_dst_addr, ai_src_canonname, ai_dst_canonname, ai_route_len, ai_route,
        ai_connect_len, ai_connect, ai_next
    }
    struct rdma_cm_join_mc_attr_ex { comp_mask, join_flags, addr }
}
