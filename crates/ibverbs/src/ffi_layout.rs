// The layout table: every structure and member with its offset and size as
// Rust lays them out; build.rs turns it into `_Static_assert`s against the
// real header.
// Part of `ffi` (ffi.rs includes this file, and build.rs includes ffi.rs):
// no `use` of its own, names as in C.

/// One member (or, with an empty `member`, a whole type) as Rust lays it
/// out: `(C type, member designator, offset, size)`.
pub type LayoutEntry = (&'static str, &'static str, usize, usize);

/// Size of what a raw pointer points to, without reading it.
pub(crate) fn size_of_pointee<T>(_: *const T) -> usize {
    core::mem::size_of::<T>()
}

macro_rules! layout_checks {
    (fn $name:ident; $($kind:ident $ty:ident { $($($f:ident).+),* $(,)? })*) => {
        /// Every checked member of every structure. The type entry's size
        /// is the structure's; member entries give offset and size.
        pub fn $name() -> Vec<$crate::ffi::LayoutEntry> {
            let mut v: Vec<$crate::ffi::LayoutEntry> = Vec::new();
            $(
                v.push((concat!(stringify!($kind), " ", stringify!($ty)), "", 0,
                        core::mem::size_of::<$ty>()));
                $({
                    let u = core::mem::MaybeUninit::<$ty>::uninit();
                    let base = u.as_ptr();
                    // SAFETY: only computes the address of a member inside
                    // `u`; nothing is read.
                    let p = unsafe { core::ptr::addr_of!((*base).$($f).+) };
                    v.push((
                        concat!(stringify!($kind), " ", stringify!($ty)),
                        stringify!($($f).+),
                        p as usize - base as usize,
                        $crate::ffi::size_of_pointee(p),
                    ));
                })*
            )*
            v
        }
    };
}
pub(crate) use layout_checks;

layout_checks! {
    fn layout_table;
    union ibv_gid { raw }
    struct ibv_gid_entry { gid, gid_index, port_num, gid_type, ndev_ifindex }
    struct ibv_device { _ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path }
    struct ibv_context_ops {
        _compat_query_device, _compat_query_port, alloc_mw, bind_mw, dealloc_mw,
        poll_cq, req_notify_cq, post_srq_recv, post_send, post_recv, _compat_async_event
    }
    struct ibv_context { device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat }
    struct verbs_context {
        query_port, advise_mr, alloc_parent_domain, dealloc_td, alloc_td, modify_cq, query_rt_values, create_cq_ex, query_device_ex,
        ibv_destroy_flow, ibv_create_flow, open_qp, create_qp_ex, get_srq_num,
        create_srq_ex, open_xrcd, close_xrcd, _ABI_placeholder3, sz, context
    }
    struct ibv_device_attr {
        fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id,
        vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd,
        max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom,
        max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw,
        max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach,
        max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr,
        max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt
    }
    struct ibv_query_device_ex_input { comp_mask }
    struct ibv_odp_caps { general_caps, per_transport_caps.rc_odp_caps,
        per_transport_caps.uc_odp_caps, per_transport_caps.ud_odp_caps }
    struct ibv_tso_caps { max_tso, supported_qpts }
    struct ibv_rss_caps { supported_qpts, max_rwq_indirection_tables,
        max_rwq_indirection_table_size, rx_hash_fields_mask, rx_hash_function }
    struct ibv_packet_pacing_caps { qp_rate_limit_min, qp_rate_limit_max, supported_qpts }
    struct ibv_tm_caps { max_rndv_hdr_size, max_num_tags, flags, max_ops, max_sge }
    struct ibv_cq_moderation_caps { max_cq_count, max_cq_period }
    struct ibv_pci_atomic_caps { fetch_add, swap, compare_swap }
    struct ibv_device_attr_ex {
        orig_attr, comp_mask, odp_caps, completion_timestamp_mask, hca_core_clock,
        device_cap_flags_ex, tso_caps, rss_caps, max_wq_type_rq, packet_pacing_caps,
        raw_packet_caps, tm_caps, cq_mod_caps, max_dm_size, pci_atomic_caps, xrc_odp_caps,
        phys_port_cnt_ex
    }
    struct ibv_port_attr {
        state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr,
        qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout,
        init_type_reply, active_width, active_speed, phys_state, link_layer, flags,
        port_cap_flags2, active_speed_ex
    }
    struct ibv_async_event { element, event_type }
    struct ibv_wc {
        wr_id, status, opcode, vendor_err, byte_len, imm_data, qp_num, src_qp, wc_flags,
        pkey_index, slid, sl, dlid_path_bits
    }
    struct ibv_mw_bind_info { mr, addr, length, mw_access_flags }
    struct ibv_pd { context, handle }
    struct ibv_mr { context, pd, addr, length, handle, lkey, rkey }
    struct ibv_mw { context, pd, rkey, handle }
    struct ibv_global_route { dgid, flow_label, sgid_index, hop_limit, traffic_class }
    struct ibv_grh { version_tclass_flow, paylen, next_hdr, hop_limit, sgid, dgid }
    struct ibv_ah_attr { grh, dlid, sl, src_path_bits, static_rate, is_global, port_num }
    struct ibv_srq_attr { max_wr, max_sge, srq_limit }
    struct ibv_srq_init_attr { srq_context, attr }
    struct ibv_tm_cap { max_num_tags, max_ops }
    struct ibv_srq_init_attr_ex { srq_context, attr, comp_mask, srq_type, pd, xrcd, cq, tm_cap }
    struct ibv_qp_cap { max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data }
    struct ibv_qp_init_attr { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all }
    struct ibv_rx_hash_conf { rx_hash_function, rx_hash_key_len, rx_hash_key, rx_hash_fields_mask }
    struct ibv_qp_init_attr_ex {
        qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all, comp_mask, pd, xrcd,
        create_flags, max_tso_header, rwq_ind_tbl, rx_hash_conf, source_qpn, send_ops_flags
    }
    struct ibv_qp_attr {
        qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num,
        qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index, alt_pkey_index,
        en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer,
        port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, rate_limit
    }
    struct ibv_sge { addr, length, lkey }
    struct ibv_data_buf { addr, length }
    struct ibv_send_wr {
        wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data,
        wr.rdma.remote_addr, wr.rdma.rkey,
        wr.atomic.remote_addr, wr.atomic.compare_add, wr.atomic.swap, wr.atomic.rkey,
        wr.ud.ah, wr.ud.remote_qpn, wr.ud.remote_qkey,
        qp_type.xrc.remote_srqn,
        bind_mw.mw, bind_mw.rkey
    }
    struct ibv_recv_wr { wr_id, next, sg_list, num_sge }
    struct ibv_mw_bind { wr_id, send_flags, bind_info }
    struct ibv_srq { context, srq_context, pd, handle, mutex, cond, events_completed }
    struct ibv_qp {
        context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type,
        mutex, cond, events_completed
    }
    struct ibv_qp_ex {
        qp_base, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp, wr_atomic_fetch_add,
        wr_bind_mw, wr_local_inv, wr_rdma_read, wr_rdma_write, wr_rdma_write_imm, wr_send,
        wr_send_imm, wr_send_inv, wr_send_tso, wr_set_ud_addr, wr_set_xrc_srqn,
        wr_set_inline_data, wr_set_inline_data_list, wr_set_sge, wr_set_sge_list, wr_start,
        wr_complete, wr_abort, wr_atomic_write, wr_flush
    }
    struct ibv_ece { vendor_id, options, comp_mask }
    struct ibv_comp_channel { context, fd, refcnt }
    struct ibv_cq {
        context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
        async_events_completed
    }
    struct ibv_poll_cq_attr { comp_mask }
    struct ibv_cq_ex {
        context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
        async_events_completed, comp_mask, status, wr_id, start_poll, next_poll, end_poll,
        read_opcode, read_vendor_err, read_byte_len, read_imm_data, read_qp_num, read_src_qp,
        read_wc_flags, read_slid, read_sl, read_dlid_path_bits, read_completion_ts,
        read_cvlan, read_flow_tag, read_tm_info, read_completion_wallclock_ns
    }
    struct ibv_moderate_cq { cq_count, cq_period }
    struct ibv_modify_cq_attr { attr_mask, moderate }
    struct ibv_ah { context, pd, handle }
    struct ibv_cq_init_attr_ex {
        cqe, cq_context, channel, comp_vector, wc_flags, comp_mask, flags, parent_domain
    }
    struct ibv_values_ex { comp_mask, raw_clock }
    struct ibv_alloc_dm_attr { length, log_align_req, comp_mask }
    struct ibv_td_init_attr { comp_mask }
    struct ibv_td { context }
    struct ibv_parent_domain_init_attr { pd, td, comp_mask, alloc, free, pd_context }
}
