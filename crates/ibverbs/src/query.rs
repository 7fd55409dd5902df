//! The queries: device, port, GID and P_Key attributes, real-time values.
//!
//! softrdma has one port (1), one GID (index 0: the device's address as a
//! RoCE v2 GID) in a table of `softrdma::GID_TABLE_LEN` entries whose
//! others are empty (rdma-core's behaviour for an empty entry: zeros from
//! `ibv_query_gid`, ENODATA from `ibv_query_gid_ex`, RoCE v1 from
//! `ibv_query_gid_type`), and one P_Key (the default, 0xffff).

use crate::context::{context, Context};
use crate::ffi::*;
use crate::util::{self, copy_cstr, guard_errno, guard_neg};
use std::ffi::c_int;
use std::net::IpAddr;

/// The PCI identity the configuration gives (`SOFTRDMA_VENDOR_ID`,
/// `SOFTRDMA_VENDOR_PART_ID`); by default rxe's (see
/// `softrdma_config::DEFAULT_VENDOR_ID`).
pub fn vendor_ids() -> (u32, u32) {
    use softrdma::config::{DEFAULT_VENDOR_ID, DEFAULT_VENDOR_PART_ID};
    softrdma::config::global().map_or((DEFAULT_VENDOR_ID, DEFAULT_VENDOR_PART_ID), |c| {
        (c.vendor_id.value, c.vendor_part_id.value)
    })
}

/// `fw_ver` (also sysfs's).
pub const FW_VER: &str = concat!("softrdma ", env!("CARGO_PKG_VERSION"));

fn device_attr(c: &Context) -> ibv_device_attr {
    let a = c.dev.query_device();
    let i = |v: u32| v.min(i32::MAX as u32) as c_int;
    let mut d: ibv_device_attr = crate::util::zeroed();
    copy_cstr(&mut d.fw_ver, FW_VER);
    d.node_guid = a.node_guid.to_be();
    d.sys_image_guid = a.node_guid.to_be();
    d.max_mr_size = a.max_mr_size;
    d.page_size_cap = 0xffff_f000; // any multiple of 4 KiB
                                   // rxe's identity unless SOFTRDMA_VENDOR_ID / SOFTRDMA_VENDOR_PART_ID say
                                   // otherwise: some programs key features on it (perftest turns on its
                                   // ibv_wr_* path only for parts it recognises).
    (d.vendor_id, d.vendor_part_id) = vendor_ids();
    d.hw_ver = 0;
    d.max_qp = i(a.max_qp);
    d.max_qp_wr = i(a.max_qp_wr);
    d.device_cap_flags = IBV_DEVICE_BAD_PKEY_CNTR
        | IBV_DEVICE_BAD_QKEY_CNTR
        | IBV_DEVICE_CURR_QP_STATE_MOD
        | IBV_DEVICE_SYS_IMAGE_GUID
        | IBV_DEVICE_RC_RNR_NAK_GEN
        // ibv_modify_srq(IBV_SRQ_MAX_WR), as rxe (see `srq::modify_srq`).
        | IBV_DEVICE_SRQ_RESIZE
        | IBV_DEVICE_N_NOTIFY_CQ
        // Memory windows of type 1 and 2; a type 2 window is bound to one
        // QP, by number (2A) and as that QP (2B): on RC and UC, where a
        // window is freed with its QP, the two are one.
        | IBV_DEVICE_MEM_WINDOW
        | IBV_DEVICE_MEM_WINDOW_TYPE_2A
        | IBV_DEVICE_MEM_WINDOW_TYPE_2B
        // XRC domains, SRQs and INI/TGT QPs (see `xrc`).
        | IBV_DEVICE_XRC;
    d.max_sge = i(a.max_sge);
    d.max_sge_rd = i(a.max_sge_rd);
    d.max_cq = i(a.max_cq);
    d.max_cqe = i(a.max_cqe);
    d.max_mr = i(a.max_mr);
    d.max_pd = i(a.max_pd);
    d.max_qp_rd_atom = i(a.max_qp_rd_atom);
    d.max_qp_init_rd_atom = i(a.max_qp_init_rd_atom);
    d.max_res_rd_atom = i(a.max_qp_rd_atom.saturating_mul(a.max_qp));
    d.atomic_cap = IBV_ATOMIC_HCA;
    d.max_ah = i(a.max_ah);
    // UD multicast: rxe's limits (see softrdma_proto::mcast).
    d.max_mcast_grp = softrdma::limits::MAX_MCAST_GRP as c_int;
    d.max_mcast_qp_attach = softrdma::limits::MAX_MCAST_QP_ATTACH as c_int;
    d.max_total_mcast_qp_attach = softrdma::limits::MAX_TOTAL_MCAST_QP_ATTACH as c_int;
    d.max_mw = i(a.max_mw);
    d.max_srq = i(a.max_srq);
    d.max_srq_wr = i(a.max_srq_wr);
    d.max_srq_sge = i(a.max_srq_sge);
    d.max_pkeys = a.max_pkeys;
    d.local_ca_ack_delay = 15;
    d.phys_port_cnt = 1;
    d
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_query_device`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn query_device(ctx: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int {
    guard_errno(|| {
        let Some(c) = context(ctx) else {
            return libc::EINVAL;
        };
        if attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller passes a valid ibv_device_attr.
        unsafe { attr.write(device_attr(&c)) };
        0
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn compat_query_device(
    ctx: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    // SAFETY: same contract.
    unsafe { query_device(ctx, attr) }
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn query_device_ex(
    ctx: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    guard_errno(|| {
        let Some(c) = context(ctx) else {
            return libc::EINVAL;
        };
        // SAFETY: NULL or a valid input structure.
        if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
            return libc::EINVAL;
        }
        if attr.is_null() || attr_size < std::mem::size_of::<ibv_device_attr>() {
            return libc::EINVAL;
        }
        let mut x: ibv_device_attr_ex = crate::util::zeroed();
        x.orig_attr = device_attr(&c);
        x.device_cap_flags_ex = u64::from(x.orig_attr.device_cap_flags);
        // Completion timestamps: a 64-bit nanosecond clock.
        x.completion_timestamp_mask = u64::MAX;
        x.hca_core_clock = HCA_CORE_CLOCK_KHZ;
        x.phys_port_cnt_ex = 1;
        let odp = c.dev.query_device().odp;
        x.odp_caps = ibv_odp_caps {
            general_caps: odp.general,
            per_transport_caps: ibv_odp_per_transport_caps {
                rc_odp_caps: odp.rc,
                uc_odp_caps: odp.uc,
                ud_odp_caps: odp.ud,
            },
        };
        // XRC reaches on-demand regions through RC's paths (SENDs land in
        // XRC SRQs' WQEs).
        x.xrc_odp_caps = odp.rc;
        // The 32 flags of ibv_device_attr and the Memory Placement
        // Extensions (FLUSH both ways, ATOMIC WRITE).
        x.device_cap_flags_ex = x.orig_attr.device_cap_flags as u64
            | IBV_DEVICE_FLUSH_GLOBAL
            | IBV_DEVICE_FLUSH_PERSISTENT
            | IBV_DEVICE_ATOMIC_WRITE;
        // SAFETY: the caller states `attr` holds `attr_size` bytes.
        unsafe { util::write_prefix(attr, &x, attr_size) };
        0
    })
}

/// `hca_core_clock` in kHz: the device clock counts nanoseconds.
pub const HCA_CORE_CLOCK_KHZ: u64 = 1_000_000;

/// The wall clock (CLOCK_REALTIME) in nanoseconds since the epoch.
pub fn realtime_ns() -> u64 {
    softrdma_io::host::realtime_ns()
}

/// `IBV_VALUES_MASK_RAW_CLOCK`.
const IBV_VALUES_MASK_RAW_CLOCK: u32 = 1;

/// `ibv_query_rt_values_ex`: the raw clock is the device clock that
/// completion timestamps use, in `hca_core_clock` cycles (ns), reported
/// as mlx5 does (`tv_sec` 0, the cycles in `tv_nsec`).
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn query_rt_values(
    ctx: *mut ibv_context,
    values: *mut ibv_values_ex,
) -> c_int {
    guard_errno(|| {
        let Some(c) = context(ctx) else {
            return libc::EINVAL;
        };
        if values.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: valid output structure.
        let v = unsafe { &mut *values };
        if v.comp_mask & !IBV_VALUES_MASK_RAW_CLOCK != 0 {
            return libc::EINVAL;
        }
        if v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK != 0 {
            v.raw_clock.tv_sec = 0;
            v.raw_clock.tv_nsec = c.dev.clock_ns() as i64;
        }
        0
    })
}

/// Port attributes of port 1.
pub fn port_attr(c: &Context) -> ibv_port_attr {
    port_attr_of(&c.dev)
}

/// Port attributes of port 1 of `dev` (also what sysfs shows of it).
pub fn port_attr_of(dev: &softrdma::Device) -> ibv_port_attr {
    let p = dev.query_port();
    let mtu_enum = |b: u32| softrdma::Mtu::from_bytes_floor(b).map_or(5, |m| m as c_int);
    let mut a: ibv_port_attr = crate::util::zeroed();
    a.state = IBV_PORT_ACTIVE;
    a.max_mtu = mtu_enum(p.max_mtu);
    a.active_mtu = mtu_enum(p.active_mtu);
    a.gid_tbl_len = p.gid_tbl_len as c_int;
    a.port_cap_flags = IBV_PORT_IP_BASED_GIDS;
    a.max_msg_sz = softrdma::limits::MAX_MSG_SIZE;
    // The violation counters of the port: packets dropped for a P_Key
    // or (UD) Q_Key that is not theirs.
    let k = dev.counters();
    a.bad_pkey_cntr = k.bad_pkey.min(u32::MAX as u64) as u32;
    a.qkey_viol_cntr = k.bad_qkey.min(u32::MAX as u64) as u32;
    a.pkey_tbl_len = p.pkey_tbl_len;
    a.lid = 0;
    a.sm_lid = 0;
    a.lmc = 0;
    a.max_vl_num = 1;
    a.sm_sl = 0;
    a.subnet_timeout = 0;
    a.init_type_reply = 0;
    a.active_width = 1; // 1X
    a.active_speed = 32; // EDR (25 Gb/s per lane): a figure, not a limit
    a.phys_state = 5; // LinkUp
    a.link_layer = IBV_LINK_LAYER_ETHERNET;
    a.flags = 0;
    a.port_cap_flags2 = 0;
    // rdma-core 49+ callers: what the kernel reports for rxe (its
    // active_speed again).
    a.active_speed_ex = u32::from(a.active_speed);
    a
}

/// The attributes of port `port` of `ctx` for a caller whose output
/// `out_null` says is null: EINVAL for an unknown context, a port other
/// than 1 or no output.
fn port1_attr(ctx: *mut ibv_context, port: u8, out_null: bool) -> Result<ibv_port_attr, c_int> {
    let Some(c) = context(ctx) else {
        return Err(libc::EINVAL);
    };
    if port != 1 || out_null {
        return Err(libc::EINVAL);
    }
    Ok(port_attr(&c))
}

/// `ibv_query_port` as exported: the caller's structure is the
/// pre-`port_cap_flags2` layout, so only that prefix is written.
///
/// # Safety
/// The C contract of `ibv_query_port`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn query_port(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut _compat_ibv_port_attr,
) -> c_int {
    guard_errno(|| {
        let a = match port1_attr(ctx, port, attr.is_null()) {
            Ok(a) => a,
            Err(e) => return e,
        };
        // SAFETY: the compat structure is `ibv_port_attr` up to `flags`.
        unsafe {
            util::write_prefix(
                attr.cast::<ibv_port_attr>(),
                &a,
                std::mem::offset_of!(ibv_port_attr, port_cap_flags2),
            )
        };
        0
    })
}

/// The interface that holds `ip` (0: none), as the GID entry reports it.
fn ifindex_of(ip: IpAddr) -> u32 {
    softrdma_io::interface_of(ip).unwrap_or(0)
}

fn gid_entry(c: &Context) -> ibv_gid_entry {
    ibv_gid_entry {
        gid: ibv_gid { raw: c.dev.gid() },
        gid_index: 0,
        port_num: 1,
        gid_type: IBV_GID_TYPE_ROCE_V2,
        ndev_ifindex: ifindex_of(c.dev.local_addr().ip()),
    }
}

/// Whether `index` is inside the GID table (populated or not).
fn in_gid_table(index: i64) -> bool {
    (0..i64::from(softrdma::GID_TABLE_LEN)).contains(&index)
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_query_gid`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn query_gid(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    guard_neg(|| {
        let c = context(ctx).ok_or(libc::EINVAL)?;
        if port != 1 || !in_gid_table(index.into()) || gid.is_null() {
            return Err(libc::EINVAL);
        }
        // An empty entry reads as zeros.
        let raw = if index == 0 { c.dev.gid() } else { [0; 16] };
        // SAFETY: the caller passes a valid gid.
        unsafe { gid.write(ibv_gid { raw }) };
        Ok(())
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `_ibv_query_gid_ex`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn query_gid_ex(
    ctx: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    guard_errno(|| {
        let Some(c) = context(ctx) else {
            return libc::EINVAL;
        };
        if flags != 0 || entry.is_null() || entry_size < std::mem::size_of::<ibv_gid_entry>() {
            return libc::EINVAL;
        }
        if port != 1 || !in_gid_table(index.into()) {
            return libc::EINVAL;
        }
        if index != 0 {
            return libc::ENODATA;
        }
        // SAFETY: the caller passes a valid entry of at least our size.
        unsafe { entry.write(gid_entry(&c)) };
        0
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `_ibv_query_gid_table`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn query_gid_table(
    ctx: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    // A negative errno, set in errno too (as the failed ioctl does).
    let r = util::guard(-(libc::EIO as isize), || {
        let Some(c) = context(ctx) else {
            return -(libc::EINVAL as isize);
        };
        if flags != 0 || entry_size < std::mem::size_of::<ibv_gid_entry>() {
            return -(libc::EINVAL as isize);
        }
        if max < 1 || entries.is_null() {
            return -(libc::EINVAL as isize);
        }
        // SAFETY: the caller passes at least one entry of `entry_size`.
        unsafe { entries.write(gid_entry(&c)) };
        1
    });
    if r < 0 {
        util::set_errno(-r as i32);
    }
    r
}

/// `ibv_query_gid_type` (IBVERBS_PRIVATE_34): rdma-core's sysfs numbering,
/// where RoCE v2 is 1 (`IBV_GID_TYPE_SYSFS_ROCE_V2`).
///
/// # Safety
/// The C contract of `ibv_query_gid_type`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn query_gid_type(
    ctx: *mut ibv_context,
    port: u8,
    index: u32,
    ty: *mut c_int,
) -> c_int {
    guard_neg(|| {
        context(ctx).ok_or(libc::EINVAL)?;
        if port != 1 || !in_gid_table(index.into()) || ty.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: valid output pointer. An empty entry: RoCE v1 (0), as
        // rdma-core answers.
        unsafe { *ty = if index == 0 { 1 } else { 0 } };
        Ok(())
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_query_pkey`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn query_pkey(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    guard_neg(|| {
        context(ctx).ok_or(libc::EINVAL)?;
        if port != 1 || index != 0 || pkey.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: valid output pointer; __be16 0xffff.
        unsafe { *pkey = 0xffff_u16.to_be() };
        Ok(())
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_get_pkey_index`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn get_pkey_index(ctx: *mut ibv_context, port: u8, pkey: u16) -> c_int {
    util::guard(-1, || {
        if context(ctx).is_none() || port != 1 {
            return -1;
        }
        if u16::from_be(pkey) & 0x7fff == 0x7fff {
            0
        } else {
            -1
        }
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of the C entry point this implements (exports.rs, context ops), as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn query_port_ex(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    guard_errno(|| {
        let a = match port1_attr(ctx, port, attr.is_null()) {
            Ok(a) => a,
            Err(e) => return e,
        };
        // SAFETY: the caller states `attr` holds `len` bytes: ours, and
        // zeros for members of a newer rdma-core than ours.
        unsafe { util::write_prefix_zero_rest(attr, &a, len) };
        0
    })
}
