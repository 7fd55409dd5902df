//! Address handles (UD destinations), also from a received work
//! completion and its GRH area.

use crate::context::context;
use crate::ffi::*;
use crate::handle::{Castable, Kind, Obj, Use};
use crate::pd::Pd;
use crate::util::{self, guard_errno, guard_ptr, zeroed};
use softrdma::grh::{addr_of_gid, gid_of, ud_grh_source, GRH_LEN};
use softrdma::AddressVector;
use std::ffi::c_int;

/// An address handle.
pub struct Ah {
    pub ah: softrdma::AddressHandle,
    _pd: Use<Pd>,
}

impl Castable for Ah {
    fn release_uses(&self) {
        self._pd.release();
    }
    type Repr = ibv_ah;
    type Api = ibv_ah;
    const KIND: Kind = Kind::Ah;
    const MAGIC: u64 = 0x5352_4148_0000_0009;
}

/// The address vector of a C `ibv_ah_attr` (RoCE: the GRH is mandatory).
pub fn address_vector(a: &ibv_ah_attr) -> Result<AddressVector, i32> {
    if a.is_global == 0 || a.grh.sgid_index != 0 {
        return Err(libc::EINVAL);
    }
    if a.port_num > 1 {
        return Err(libc::EINVAL);
    }
    let mut av = AddressVector::to(addr_of_gid(a.grh.dgid.raw));
    av.traffic_class = a.grh.traffic_class;
    // A hop limit of 0 would put TTL 0 on the packet; use the default.
    av.hop_limit = if a.grh.hop_limit == 0 {
        64
    } else {
        a.grh.hop_limit
    };
    av.flow_label = a.grh.flow_label & 0xf_ffff;
    av.sgid_index = 0;
    Ok(av)
}

pub fn ah_attr_of(av: &AddressVector) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid {
                raw: gid_of(av.dest),
            },
            flow_label: av.flow_label,
            sgid_index: av.sgid_index,
            hop_limit: av.hop_limit,
            traffic_class: av.traffic_class,
        },
        dlid: 0,
        sl: 0,
        src_path_bits: 0,
        static_rate: 0,
        is_global: 1,
        port_num: 1,
    }
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_create_ah`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn create_ah(p: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    guard_ptr(|| {
        let x = Obj::<Pd>::get_use(p).ok_or(libc::EINVAL)?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: valid attribute structure.
        let av = address_vector(unsafe { &*attr })?;
        x.ctx.check_peer(av.dest);
        let ah = x.pd.create_ah(av).map_err(|e| e.errno())?;
        let mut c: ibv_ah = zeroed();
        c.context = x.ctx.api();
        c.pd = x.api();
        c.handle = ah.id().0;
        Ok(Obj::new(c, Ah { ah, _pd: x }).publish())
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_destroy_ah`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn destroy_ah(a: *mut ibv_ah) -> c_int {
    guard_errno(|| Obj::<Ah>::take(a).map_or_else(|e| e, |_| 0))
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_init_ah_from_wc`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn init_ah_from_wc(
    ctx: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    attr: *mut ibv_ah_attr,
) -> c_int {
    util::guard_neg(|| {
        let c = context(ctx).ok_or(libc::EINVAL)?;
        if port != 1 || wc.is_null() || grh.is_null() || attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: valid work completion.
        let w = unsafe { &*wc };
        if w.wc_flags & IBV_WC_GRH == 0 {
            return Err(libc::EINVAL); // RoCE needs the GRH to answer
        }
        let mut area = [0u8; GRH_LEN];
        // SAFETY: the GRH area is the first 40 bytes of the receive buffer.
        unsafe { std::ptr::copy_nonoverlapping(grh.cast::<u8>(), area.as_mut_ptr(), GRH_LEN) };
        let src = ud_grh_source(&area);
        if src.is_ipv4() != c.dev.local_addr().ip().is_ipv4() {
            return Err(libc::EINVAL);
        }
        let tclass = if area[0] >> 4 == 6 {
            ((u32::from_be_bytes([area[0], area[1], area[2], area[3]]) >> 20) & 0xff) as u8
        } else {
            area[21] // IPv4 TOS
        };
        let mut av = AddressVector::to(src);
        av.traffic_class = tclass;
        av.hop_limit = 0xff;
        // SAFETY: valid output structure.
        unsafe { attr.write(ah_attr_of(&av)) };
        Ok(())
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `ibv_create_ah_from_wc`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn create_ah_from_wc(
    p: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port: u8,
) -> *mut ibv_ah {
    guard_ptr(|| {
        let x = Obj::<Pd>::get(p).ok_or(libc::EINVAL)?;
        let mut attr = ibv_ah_attr::default();
        // SAFETY: forwarded.
        if unsafe { init_ah_from_wc(x.ctx.api(), port, wc, grh, &mut attr) } != 0 {
            return Err(util::errno());
        }
        // SAFETY: forwarded.
        let a = unsafe { create_ah(p, &mut attr) };
        if a.is_null() {
            Err(util::errno())
        } else {
            Ok(a)
        }
    })
}
