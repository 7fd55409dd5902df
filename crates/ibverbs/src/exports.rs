//! Every symbol of rdma-core's libibverbs.so.1 and librdmacm.so.1 in the
//! releases `abi/rdma-core.txt` lists (44, 50, 56: Debian 12, Ubuntu
//! 24.04, Debian 13), bound to its symbol version (libibverbs.map) through
//! a `.symver` alias of a small jump (functions) or of a variable
//! (`export_data!`, the one data object: `verbs_allow_disassociate_destroy`).
//! build.rs checks this file and the map against that list.
//!
//! The Rust functions keep Rust-side names; each export is a global label
//! `__softrdma_<name>_<version>` that jumps to it, renamed by `.symver` to
//! `name@@VERSION` (the default a program links against) or `name@VERSION`
//! (an old ABI kept for binaries linked long ago: here those fail, like the
//! kernel-only `ibv_cmd_*` and provider entry points of
//! IBVERBS_PRIVATE_34, which exist so that providers rdma-core installs
//! alongside — libmlx5, librdmacm — still load against this library).
//! rustc's own export list of the cdylib never names these labels, so its
//! version script and ours do not collide.
//!
//! x86-64 only (lib.rs compiles this module on x86-64 and refuses to build
//! elsewhere): the jump is `endbr64; jmp`, the data an ELF `.bss` object.

use crate::{
    ah, channel, context, cq, device, import, misc, mr, pd, qp, query, rdmacm, srq, sysfs,
};

macro_rules! export {
    ($name:ident $at:literal $ver:literal => $f:path) => {
        #[cfg(not(test))]
        std::arch::global_asm!(
            ".text",
            ".p2align 4",
            concat!(".globl __softrdma_", stringify!($name), "_", $ver),
            concat!(".type __softrdma_", stringify!($name), "_", $ver, ",@function"),
            concat!("__softrdma_", stringify!($name), "_", $ver, ":"),
            "endbr64",
            "jmp {f}",
            concat!(".size __softrdma_", stringify!($name), "_", $ver, ", .-__softrdma_", stringify!($name), "_", $ver),
            concat!(".symver __softrdma_", stringify!($name), "_", $ver, ", ", stringify!($name), $at, $ver),
            f = sym $f,
        );
    };
}

/// A variable of `$size` zero bytes exported as `name@@VERSION` (an ELF
/// `OBJECT`, as rdma-core defines it: providers read it as data).
macro_rules! export_data {
    ($name:ident $at:literal $ver:literal, $size:literal) => {
        #[cfg(not(test))]
        std::arch::global_asm!(
            ".pushsection .bss",
            ".p2align 3",
            concat!(".globl __softrdma_", stringify!($name), "_", $ver),
            concat!(
                ".type __softrdma_",
                stringify!($name),
                "_",
                $ver,
                ",@object"
            ),
            concat!(
                ".size __softrdma_",
                stringify!($name),
                "_",
                $ver,
                ", ",
                $size
            ),
            concat!("__softrdma_", stringify!($name), "_", $ver, ":"),
            concat!(".zero ", $size),
            concat!(
                ".symver __softrdma_",
                stringify!($name),
                "_",
                $ver,
                ", ",
                stringify!($name),
                $at,
                $ver
            ),
            ".popsection",
        );
    };
}

export!(ibv_ack_async_event "@" "IBVERBS_1.0" => misc::nothing);
export!(ibv_ack_cq_events "@" "IBVERBS_1.0" => misc::nothing);
export!(ibv_alloc_pd "@" "IBVERBS_1.0" => misc::unsupported_null);
export!(ibv_attach_mcast "@" "IBVERBS_1.0" => misc::unsupported_errno);
export!(ibv_close_device "@" "IBVERBS_1.0" => misc::unsupported_errno);
export!(ibv_create_ah "@" "IBVERBS_1.0" => misc::unsupported_null);
export!(ibv_create_cq "@" "IBVERBS_1.0" => misc::unsupported_null);
export!(ibv_create_qp "@" "IBVERBS_1.0" => misc::unsupported_null);
export!(ibv_create_srq "@" "IBVERBS_1.0" => misc::unsupported_null);
export!(ibv_dealloc_pd "@" "IBVERBS_1.0" => misc::unsupported_errno);
export!(ibv_dereg_mr "@" "IBVERBS_1.0" => misc::unsupported_errno);
export!(ibv_destroy_ah "@" "IBVERBS_1.0" => misc::unsupported_errno);
export!(ibv_destroy_cq "@" "IBVERBS_1.0" => misc::unsupported_errno);
export!(ibv_destroy_qp "@" "IBVERBS_1.0" => misc::unsupported_errno);
export!(ibv_destroy_srq "@" "IBVERBS_1.0" => misc::unsupported_errno);
export!(ibv_detach_mcast "@" "IBVERBS_1.0" => misc::unsupported_errno);
export!(ibv_free_device_list "@" "IBVERBS_1.0" => misc::nothing);
export!(ibv_get_async_event "@" "IBVERBS_1.0" => misc::unsupported_errno);
export!(ibv_get_cq_event "@" "IBVERBS_1.0" => misc::unsupported_errno);
export!(ibv_get_device_guid "@" "IBVERBS_1.0" => misc::zero);
export!(ibv_get_device_list "@" "IBVERBS_1.0" => misc::unsupported_null);
export!(ibv_get_device_name "@" "IBVERBS_1.0" => misc::unsupported_null);
export!(ibv_modify_qp "@" "IBVERBS_1.0" => misc::unsupported_errno);
export!(ibv_modify_srq "@" "IBVERBS_1.0" => misc::unsupported_errno);
export!(ibv_open_device "@" "IBVERBS_1.0" => misc::unsupported_null);
export!(ibv_query_device "@" "IBVERBS_1.0" => misc::unsupported_errno);
export!(ibv_query_gid "@" "IBVERBS_1.0" => misc::unsupported_errno);
export!(ibv_query_pkey "@" "IBVERBS_1.0" => misc::unsupported_errno);
export!(ibv_query_port "@" "IBVERBS_1.0" => misc::unsupported_errno);
export!(ibv_query_qp "@" "IBVERBS_1.0" => misc::unsupported_errno);
export!(ibv_query_srq "@" "IBVERBS_1.0" => misc::unsupported_errno);
export!(ibv_reg_mr "@" "IBVERBS_1.0" => misc::unsupported_null);
export!(ibv_resize_cq "@" "IBVERBS_1.0" => misc::unsupported_errno);
export!(ibv_register_driver "@" "IBVERBS_1.1" => misc::unsupported_errno);
export!(ibv_copy_path_rec_from_kern "@@" "IBVERBS_1.0" => misc::nothing);
export!(ibv_copy_path_rec_to_kern "@@" "IBVERBS_1.0" => misc::nothing);
export!(ibv_copy_qp_attr_from_kern "@@" "IBVERBS_1.0" => misc::nothing);
export!(ibv_create_comp_channel "@@" "IBVERBS_1.0" => channel::create_comp_channel);
export!(ibv_destroy_comp_channel "@@" "IBVERBS_1.0" => channel::destroy_comp_channel);
export!(ibv_get_sysfs_path "@@" "IBVERBS_1.0" => misc::get_sysfs_path);
export!(ibv_rate_to_mult "@@" "IBVERBS_1.0" => misc::rate_to_mult);
export!(ibv_read_sysfs_file "@@" "IBVERBS_1.0" => misc::read_sysfs_file);
export!(mult_to_ibv_rate "@@" "IBVERBS_1.0" => misc::mult_to_rate);
export!(ibv_ack_async_event "@@" "IBVERBS_1.1" => context::ack_async_event);
export!(ibv_ack_cq_events "@@" "IBVERBS_1.1" => channel::ack_cq_events);
export!(ibv_alloc_pd "@@" "IBVERBS_1.1" => pd::alloc_pd);
export!(ibv_attach_mcast "@@" "IBVERBS_1.1" => qp::attach_mcast);
export!(ibv_close_device "@@" "IBVERBS_1.1" => context::close_device);
export!(ibv_copy_ah_attr_from_kern "@@" "IBVERBS_1.1" => misc::nothing);
export!(ibv_create_ah "@@" "IBVERBS_1.1" => ah::create_ah);
export!(ibv_create_ah_from_wc "@@" "IBVERBS_1.1" => ah::create_ah_from_wc);
export!(ibv_create_cq "@@" "IBVERBS_1.1" => cq::create_cq);
export!(ibv_create_qp "@@" "IBVERBS_1.1" => qp::create_qp);
export!(ibv_create_srq "@@" "IBVERBS_1.1" => srq::create_srq);
export!(ibv_dealloc_pd "@@" "IBVERBS_1.1" => pd::dealloc_pd);
export!(ibv_dereg_mr "@@" "IBVERBS_1.1" => mr::dereg_mr);
export!(ibv_destroy_ah "@@" "IBVERBS_1.1" => ah::destroy_ah);
export!(ibv_destroy_cq "@@" "IBVERBS_1.1" => cq::destroy_cq);
export!(ibv_destroy_qp "@@" "IBVERBS_1.1" => qp::destroy_qp);
export!(ibv_destroy_srq "@@" "IBVERBS_1.1" => srq::destroy_srq);
export!(ibv_detach_mcast "@@" "IBVERBS_1.1" => qp::detach_mcast);
export!(ibv_dofork_range "@@" "IBVERBS_1.1" => misc::fork_range);
export!(ibv_dontfork_range "@@" "IBVERBS_1.1" => misc::fork_range);
export!(ibv_event_type_str "@@" "IBVERBS_1.1" => misc::event_type_str);
export!(ibv_fork_init "@@" "IBVERBS_1.1" => misc::fork_init);
export!(ibv_free_device_list "@@" "IBVERBS_1.1" => device::free_device_list);
export!(ibv_get_async_event "@@" "IBVERBS_1.1" => context::get_async_event);
export!(ibv_get_cq_event "@@" "IBVERBS_1.1" => channel::get_cq_event);
export!(ibv_get_device_guid "@@" "IBVERBS_1.1" => device::get_device_guid);
export!(ibv_get_device_list "@@" "IBVERBS_1.1" => device::get_device_list);
export!(ibv_get_device_name "@@" "IBVERBS_1.1" => device::get_device_name);
export!(ibv_init_ah_from_wc "@@" "IBVERBS_1.1" => ah::init_ah_from_wc);
export!(ibv_modify_qp "@@" "IBVERBS_1.1" => qp::modify_qp);
export!(ibv_modify_srq "@@" "IBVERBS_1.1" => srq::modify_srq);
export!(ibv_node_type_str "@@" "IBVERBS_1.1" => misc::node_type_str);
export!(ibv_open_device "@@" "IBVERBS_1.1" => device::open_device);
export!(ibv_port_state_str "@@" "IBVERBS_1.1" => misc::port_state_str);
export!(ibv_query_device "@@" "IBVERBS_1.1" => query::query_device);
export!(ibv_query_gid "@@" "IBVERBS_1.1" => query::query_gid);
export!(ibv_query_pkey "@@" "IBVERBS_1.1" => query::query_pkey);
export!(ibv_query_port "@@" "IBVERBS_1.1" => query::query_port);
export!(ibv_query_qp "@@" "IBVERBS_1.1" => qp::query_qp);
export!(ibv_query_srq "@@" "IBVERBS_1.1" => srq::query_srq);
export!(ibv_rate_to_mbps "@@" "IBVERBS_1.1" => misc::rate_to_mbps);
export!(ibv_reg_mr "@@" "IBVERBS_1.1" => mr::reg_mr);
export!(ibv_rereg_mr "@@" "IBVERBS_1.1" => mr::rereg_mr);
export!(ibv_resize_cq "@@" "IBVERBS_1.1" => cq::resize_cq);
export!(ibv_resolve_eth_l2_from_gid "@@" "IBVERBS_1.1" => misc::unsupported_neg);
export!(ibv_wc_status_str "@@" "IBVERBS_1.1" => misc::wc_status_str);
export!(mbps_to_ibv_rate "@@" "IBVERBS_1.1" => misc::mbps_to_rate);
export!(ibv_import_device "@@" "IBVERBS_1.10" => import::import_device);
export!(ibv_import_mr "@@" "IBVERBS_1.10" => import::import_mr);
export!(ibv_import_pd "@@" "IBVERBS_1.10" => import::import_pd);
export!(ibv_query_ece "@@" "IBVERBS_1.10" => misc::unsupported_errno);
export!(ibv_set_ece "@@" "IBVERBS_1.10" => misc::unsupported_errno);
export!(ibv_unimport_mr "@@" "IBVERBS_1.10" => import::unimport_mr);
export!(ibv_unimport_pd "@@" "IBVERBS_1.10" => import::unimport_pd);
export!(_ibv_query_gid_ex "@@" "IBVERBS_1.11" => query::query_gid_ex);
export!(_ibv_query_gid_table "@@" "IBVERBS_1.11" => query::query_gid_table);
export!(ibv_reg_dmabuf_mr "@@" "IBVERBS_1.12" => misc::unsupported_null);
export!(ibv_import_dm "@@" "IBVERBS_1.13" => misc::unsupported_null);
export!(ibv_is_fork_initialized "@@" "IBVERBS_1.13" => misc::is_fork_initialized);
export!(ibv_unimport_dm "@@" "IBVERBS_1.13" => misc::nothing);
export!(ibv_query_qp_data_in_order "@@" "IBVERBS_1.14" => misc::data_in_order);
export!(ibv_get_pkey_index "@@" "IBVERBS_1.5" => query::get_pkey_index);
export!(ibv_qp_to_qp_ex "@@" "IBVERBS_1.6" => qp::qp_to_qp_ex);
export!(ibv_reg_mr_iova "@@" "IBVERBS_1.7" => mr::reg_mr_iova);
export!(ibv_reg_mr_iova2 "@@" "IBVERBS_1.8" => mr::reg_mr_iova2);
export!(ibv_get_device_index "@@" "IBVERBS_1.9" => device::get_device_index);
export!(__ioctl_final_num_attrs "@@" "IBVERBS_PRIVATE_34" => misc::zero);
export!(__verbs_log "@@" "IBVERBS_PRIVATE_34" => misc::nothing);
export!(_verbs_init_and_alloc_context "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_null);
export!(execute_ioctl "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_advise_mr "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_alloc_dm "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_alloc_mw "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_alloc_pd "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_attach_mcast "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_close_xrcd "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_create_ah "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_create_counters "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_create_cq "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_create_cq_ex "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
// rdma-core 53+ (Debian 13's libmlx5 imports it).
export!(ibv_cmd_create_cq_ex2 "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_create_flow "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_create_flow_action_esp "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_create_qp "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_create_qp_ex "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_create_qp_ex2 "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_create_rwq_ind_table "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_create_srq "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_create_srq_ex "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_create_wq "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_dealloc_mw "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_dealloc_pd "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_dereg_mr "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_destroy_ah "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_destroy_counters "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_destroy_cq "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_destroy_flow "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_destroy_flow_action "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_destroy_qp "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_destroy_rwq_ind_table "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_destroy_srq "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_destroy_wq "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_detach_mcast "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_free_dm "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_get_context "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_modify_cq "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_modify_flow_action_esp "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_modify_qp "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_modify_qp_ex "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_modify_srq "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_modify_wq "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_open_qp "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_open_xrcd "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_poll_cq "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_post_recv "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_post_send "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_post_srq_recv "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_query_context "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_query_device_any "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_query_mr "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_query_port "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_query_qp "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_query_srq "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_read_counters "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_reg_dm_mr "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_reg_dmabuf_mr "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_reg_mr "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_req_notify_cq "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_rereg_mr "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_cmd_resize_cq "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_errno);
export!(ibv_query_gid_type "@@" "IBVERBS_PRIVATE_34" => query::query_gid_type);
export!(ibv_read_ibdev_sysfs_file "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_neg);
// A `bool` variable in rdma-core (false unless RDMAV_ALLOW_DISASSOC_DESTROY).
export_data!(verbs_allow_disassociate_destroy "@@" "IBVERBS_PRIVATE_34", 1);
// Public since rdma-core 49 (verbs.h), under the private version.
export!(ibv_wr_opcode_str "@@" "IBVERBS_PRIVATE_34" => misc::wr_opcode_str);
export!(verbs_init_cq "@@" "IBVERBS_PRIVATE_34" => misc::nothing);
export!(verbs_open_device "@@" "IBVERBS_PRIVATE_34" => misc::unsupported_null);
export!(verbs_register_driver_34 "@@" "IBVERBS_PRIVATE_34" => misc::nothing);
export!(verbs_set_ops "@@" "IBVERBS_PRIVATE_34" => misc::nothing);
export!(verbs_uninit_context "@@" "IBVERBS_PRIVATE_34" => misc::nothing);

// -------------------------------------------------------------- softrdma ----
// softrdma's own: the sysfs view for libsoftrdma_preload.so (src/sysfs.rs).

export!(softrdma_sysfs_root "@@" "SOFTRDMA_PRIVATE_1" => sysfs::sysfs_root);

// ------------------------------------------------------------ librdmacm ----
// rdma-core 44's librdmacm.so.1: 68 functions under RDMACM_1.0 … 1.3, all
// default versions (`name@@VER`). See `rdmacm/mod.rs` for why they live here.

export!(rdma_create_event_channel "@@" "RDMACM_1.0" => rdmacm::event::create_event_channel);
export!(rdma_destroy_event_channel "@@" "RDMACM_1.0" => rdmacm::event::destroy_event_channel);
export!(rdma_create_id "@@" "RDMACM_1.0" => rdmacm::id::create_id);
export!(rdma_destroy_id "@@" "RDMACM_1.0" => rdmacm::id::destroy_id);
export!(rdma_bind_addr "@@" "RDMACM_1.0" => rdmacm::id::bind_addr);
export!(rdma_resolve_addr "@@" "RDMACM_1.0" => rdmacm::id::resolve_addr);
export!(rdma_resolve_route "@@" "RDMACM_1.0" => rdmacm::id::resolve_route);
export!(rdma_create_qp "@@" "RDMACM_1.0" => rdmacm::qp::create_qp);
export!(rdma_destroy_qp "@@" "RDMACM_1.0" => rdmacm::qp::destroy_qp);
export!(rdma_connect "@@" "RDMACM_1.0" => rdmacm::id::connect);
export!(rdma_listen "@@" "RDMACM_1.0" => rdmacm::id::listen);
export!(rdma_accept "@@" "RDMACM_1.0" => rdmacm::id::accept);
export!(rdma_reject "@@" "RDMACM_1.0" => rdmacm::id::reject);
export!(rdma_notify "@@" "RDMACM_1.0" => rdmacm::id::notify);
export!(rdma_disconnect "@@" "RDMACM_1.0" => rdmacm::id::disconnect);
export!(rdma_get_cm_event "@@" "RDMACM_1.0" => rdmacm::event::get_cm_event);
export!(rdma_ack_cm_event "@@" "RDMACM_1.0" => rdmacm::event::ack_cm_event);
export!(rdma_get_src_port "@@" "RDMACM_1.0" => rdmacm::options::get_src_port);
export!(rdma_get_dst_port "@@" "RDMACM_1.0" => rdmacm::options::get_dst_port);
export!(rdma_join_multicast "@@" "RDMACM_1.0" => rdmacm::mcast::join_multicast);
export!(rdma_leave_multicast "@@" "RDMACM_1.0" => rdmacm::mcast::leave_multicast);
export!(rdma_get_devices "@@" "RDMACM_1.0" => rdmacm::device::get_devices);
export!(rdma_free_devices "@@" "RDMACM_1.0" => rdmacm::device::free_devices);
export!(rdma_event_str "@@" "RDMACM_1.0" => rdmacm::event::event_str);
export!(rdma_set_option "@@" "RDMACM_1.0" => rdmacm::options::set_option);
export!(rdma_migrate_id "@@" "RDMACM_1.0" => rdmacm::options::migrate_id);
export!(rdma_getaddrinfo "@@" "RDMACM_1.0" => rdmacm::addrinfo::getaddrinfo);
export!(rdma_freeaddrinfo "@@" "RDMACM_1.0" => rdmacm::addrinfo::freeaddrinfo);
export!(rdma_get_request "@@" "RDMACM_1.0" => rdmacm::id::get_request);
export!(rdma_create_ep "@@" "RDMACM_1.0" => rdmacm::qp::create_ep);
export!(rdma_destroy_ep "@@" "RDMACM_1.0" => rdmacm::qp::destroy_ep);
export!(rdma_create_srq "@@" "RDMACM_1.0" => rdmacm::qp::create_srq);
export!(rdma_destroy_srq "@@" "RDMACM_1.0" => rdmacm::qp::destroy_srq);
export!(rdma_create_srq_ex "@@" "RDMACM_1.0" => rdmacm::qp::create_srq_ex);
export!(rdma_create_qp_ex "@@" "RDMACM_1.0" => rdmacm::qp::create_qp_ex);
export!(rsocket "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(rbind "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(rlisten "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(raccept "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(rconnect "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(rshutdown "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(rclose "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(rrecv "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(rrecvfrom "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(rrecvmsg "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(rsend "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(rsendto "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(rsendmsg "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(rread "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(rreadv "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(rwrite "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(rwritev "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(rpoll "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(rselect "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(rgetpeername "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(rgetsockname "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(rsetsockopt "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(rgetsockopt "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(rfcntl "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(riomap "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(riounmap "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(riowrite "@@" "RDMACM_1.0" => rdmacm::rsocket_unsupported);
export!(rdma_join_multicast_ex "@@" "RDMACM_1.1" => rdmacm::mcast::join_multicast_ex);
export!(rdma_establish "@@" "RDMACM_1.2" => rdmacm::id::establish);
export!(rdma_init_qp_attr "@@" "RDMACM_1.2" => rdmacm::options::init_qp_attr);
export!(rdma_get_remote_ece "@@" "RDMACM_1.3" => rdmacm::options::get_remote_ece);
export!(rdma_reject_ece "@@" "RDMACM_1.3" => rdmacm::id::reject_ece);
export!(rdma_set_local_ece "@@" "RDMACM_1.3" => rdmacm::options::set_local_ece);
