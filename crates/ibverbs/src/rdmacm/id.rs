//! rdma_cm ids: the C face of `softrdma::rdma_cm::CmId`.
//!
//! A C id is an `rdma_cm_id` we publish (the `Obj` pattern of `handle.rs`)
//! holding softrdma's id. After each call and for each event, its public
//! fields are brought up to date as librdmacm does: `verbs`, `pd` and
//! `port_num` once its device is known (one context and PD per device,
//! `device.rs`), `route.addr` and `route.path_rec`.
//!
//! Synchronous ids (created with a NULL channel) get a private channel;
//! each call that produces an event waits for it there and keeps it in
//! `id->event` (librdmacm's `ucma_complete`).

use super::device::{init, verbs_of};
use super::event::{ack_cm_event, get_event, new_channel, Channel};
use super::ffi::*;
use super::options::migrate_id;
use crate::ffi::*;
use crate::handle::{Castable, Kind, Obj};
use crate::qp::Qp;
use crate::util::{guard_neg, guarded, neg, zeroed};
use softrdma::rdma_cm::{CmEvent, CmId, ConnParam, EventType, PortSpace};
use softrdma::QpType;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};

/// Our side of a C id.
pub struct Id {
    pub cm: CmId,
    pub c: Mutex<IdC>,
}

/// librdmacm's private fields.
#[derive(Default)]
pub struct IdC {
    /// Created with a NULL channel: calls wait for their events.
    pub sync: bool,
    /// The private channel of a synchronous id.
    pub own_chan: usize,
    /// `rdma_create_ep`'s QP attributes for a passive id's requests.
    pub qp_init_attr: Option<Box<QpInitAttr>>,
    /// The `route.path_rec` allocation.
    pub path_rec: usize,
    /// `rdma_set_local_ece`.
    pub local_ece: (u32, u32),
    /// `rdma_create_ep`'s `ai_connect`: private data put before the
    /// caller's in the next connect (librdmacm's `id_priv->connect`).
    pub connect_data: Vec<u8>,
}

/// A copy of `ibv_qp_init_attr` (its pointers are the program's).
pub struct QpInitAttr(pub ibv_qp_init_attr);
// SAFETY: plain data; the pointers are only handed back to the program.
unsafe impl Send for QpInitAttr {}

impl Castable for Id {
    fn release_uses(&self) {}
    type Repr = rdma_cm_id;
    type Api = rdma_cm_id;
    const KIND: Kind = Kind::CmId;
    const MAGIC: u64 = 0x5352_434d_4944_0013;
}

/// softrdma id number → published C id.
static IDS: Mutex<Option<HashMap<u64, usize>>> = Mutex::new(None);

/// The id map, locked (for `crate::fork`'s handlers).
pub(crate) fn ids_for_fork() -> std::sync::MutexGuard<'static, Option<HashMap<u64, usize>>> {
    IDS.lock().unwrap_or_else(|e| e.into_inner())
}

fn ids_insert(num: u64, p: *mut rdma_cm_id) {
    IDS.lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(num, p as usize);
}

fn ids_get(num: u64) -> Option<*mut rdma_cm_id> {
    IDS.lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()?
        .get(&num)
        .map(|&p| p as *mut rdma_cm_id)
}

fn ids_remove(num: u64) {
    if let Some(m) = IDS.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        m.remove(&num);
    }
}

pub(crate) fn lock(o: &Obj<Id>) -> std::sync::MutexGuard<'_, IdC> {
    o.c.lock().unwrap_or_else(|e| e.into_inner())
}

/// The id behind a program's pointer, its public fields read back.
pub(super) fn get(p: *mut rdma_cm_id) -> Result<Arc<Obj<Id>>, i32> {
    init();
    let o = Obj::<Id>::get(p).ok_or(libc::EINVAL)?;
    read_back(&o);
    Ok(o)
}

/// Reads back what the program may have set in the public structure and
/// softrdma's id uses, as librdmacm reads the structure in each call and
/// while processing each event: `id->qp` (the QP connect, accept, the REP
/// and disconnect move and whose number and SRQ the REQ/REP carry; uDAPL
/// assigns it itself). The other fields librdmacm reads — `verbs`, `pd`,
/// `send_cq`, `recv_cq`, their channels, `srq`, `context`, `event`,
/// `route.addr` — are read from the structure where they are used
/// (`qp.rs`, `c_id_of_event`, `get_src_port`). A pointer that is not a
/// live QP of this library counts as none.
fn read_back(o: &Obj<Id>) {
    // SAFETY: our allocation; the program may write `qp` at any time, as
    // with librdmacm (a pointer-sized read).
    let qp = unsafe { std::ptr::addr_of!((*o.repr()).qp).read_volatile() };
    let q = if qp.is_null() { None } else { qp_obj(qp) };
    // A QP of another device or type: the call that uses it fails as
    // librdmacm's modify would; until then the id keeps what it had.
    let _ = o.cm.use_qp(q.as_ref().map(|q| &q.qp));
}

/// [`read_back`] for softrdma's id number `num` (called before its events
/// are processed).
pub fn read_back_num(num: u64) {
    if let Some(o) = ids_get(num).and_then(Obj::<Id>::get) {
        read_back(&o);
    }
}

fn ps_of(ps: c_int) -> Option<PortSpace> {
    Some(match ps {
        RDMA_PS_TCP => PortSpace::Tcp,
        RDMA_PS_UDP => PortSpace::Udp,
        RDMA_PS_IB => PortSpace::Ib,
        RDMA_PS_IPOIB => PortSpace::Ipoib,
        _ => return None,
    })
}

/// A program's socket address.
///
/// # Safety
/// `a` is NULL or points to a `sockaddr` of the length its family says.
pub unsafe fn sockaddr_in(a: *const libc::sockaddr) -> Option<SocketAddr> {
    if a.is_null() {
        return None;
    }
    // SAFETY: per the contract.
    unsafe {
        match (*a).sa_family as c_int {
            libc::AF_INET => {
                let s = &*(a as *const libc::sockaddr_in);
                Some(SocketAddr::new(
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr))),
                    u16::from_be(s.sin_port),
                ))
            }
            libc::AF_INET6 => {
                let s = &*(a as *const libc::sockaddr_in6);
                Some(SocketAddr::new(
                    IpAddr::V6(Ipv6Addr::from(s.sin6_addr.s6_addr)),
                    u16::from_be(s.sin6_port),
                ))
            }
            _ => None,
        }
    }
}

/// Writes a socket address into a `sockaddr_storage`.
pub fn write_sockaddr(dst: &mut sockaddr_storage, a: SocketAddr) {
    *dst = sockaddr_storage::default();
    let p = dst.0.as_mut_ptr();
    match a {
        SocketAddr::V4(v4) => {
            let s = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: 128 bytes of storage, aligned to 8, hold a sockaddr_in.
            unsafe { (p as *mut libc::sockaddr_in).write(s) };
        }
        SocketAddr::V6(v6) => {
            let s = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: as above, for a sockaddr_in6.
            unsafe { (p as *mut libc::sockaddr_in6).write(s) };
        }
    }
}

fn gid(ip: IpAddr) -> ibv_gid {
    let raw = match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    };
    ibv_gid { raw }
}

/// Brings the C id's public fields up to date.
pub(super) fn refresh(o: &Obj<Id>) {
    let Ok(info) = o.cm.addr_info() else {
        return;
    };
    let mut st = lock(o);
    let r = o.repr();
    // SAFETY: fields of our own allocation; the program reads them (and
    // may set `context`, `pd`, which we only set while NULL), as with
    // librdmacm, which writes them during calls and event processing.
    unsafe {
        if let Some(dev) = &info.device {
            if (*r).verbs.is_null() {
                if let Some((ctx, pd)) = verbs_of(dev) {
                    (*r).verbs = ctx;
                    if (*r).pd.is_null() {
                        (*r).pd = pd;
                    }
                    (*r).port_num = 1;
                }
            }
        }
        let addr = &mut (*r).route.addr;
        if let Some(s) = info.src {
            write_sockaddr(&mut addr.src_storage, s);
            addr.addr.ibaddr.sgid = gid(s.ip());
        }
        if let Some(d) = info.dst {
            write_sockaddr(&mut addr.dst_storage, d);
            addr.addr.ibaddr.dgid = gid(d.ip());
        }
        addr.addr.ibaddr.pkey = 0xffffu16.to_be();
        if let Some(p) = info.path {
            if st.path_rec == 0 {
                st.path_rec = Box::into_raw(Box::new(ibv_sa_path_rec::default())) as usize;
            }
            let pr = &mut *(st.path_rec as *mut ibv_sa_path_rec);
            *pr = ibv_sa_path_rec {
                dgid: ibv_gid {
                    raw: p.dgid.octets(),
                },
                sgid: ibv_gid {
                    raw: p.sgid.octets(),
                },
                dlid: 0,
                slid: 0,
                raw_traffic: 0,
                flow_label: p.flow_label.to_be(),
                hop_limit: p.hop_limit,
                traffic_class: p.traffic_class,
                reversible: 1,
                numb_path: 1,
                pkey: p.pkey.0.to_be(),
                sl: p.sl,
                mtu_selector: 2,
                mtu: p.mtu,
                rate_selector: 2,
                rate: p.rate,
                packet_life_time_selector: 2,
                packet_life_time: p.packet_life_time,
                preference: 0,
            };
            (*r).route.path_rec = pr;
            (*r).route.num_paths = 1;
        }
    }
}

/// A new C id for a softrdma id.
fn publish(
    cm: CmId,
    ch: *mut rdma_event_channel,
    context: *mut c_void,
    ps: c_int,
    qp_type: c_int,
    sync: bool,
    own_chan: usize,
) -> *mut rdma_cm_id {
    let mut c: rdma_cm_id = zeroed();
    c.channel = ch;
    c.context = context;
    c.ps = ps;
    c.qp_type = qp_type;
    let num = cm.num();
    let o = Obj::new(
        c,
        Id {
            cm,
            c: Mutex::new(IdC {
                sync,
                own_chan,
                ..Default::default()
            }),
        },
    );
    let p = o.clone().publish();
    ids_insert(num, p);
    refresh(&o);
    p
}

/// `rdma_create_id2`: an id of this port space and QP type.
pub fn create_id2(
    ch: *mut rdma_event_channel,
    context: *mut c_void,
    ps: c_int,
    qp_type: c_int,
) -> Result<*mut rdma_cm_id, i32> {
    init();
    let space = ps_of(ps).ok_or(libc::EINVAL)?;
    let t = match qp_type {
        IBV_QPT_RC => QpType::Rc,
        IBV_QPT_UC => QpType::Uc,
        IBV_QPT_UD => QpType::Ud,
        _ => return Err(libc::EINVAL),
    };
    let (ch, sync) = if ch.is_null() {
        (new_channel()?, true)
    } else {
        (ch, false)
    };
    let chan = Obj::<Channel>::get(ch).ok_or(libc::EINVAL)?;
    let cm = CmId::new(&chan.ch, space, Some(t)).map_err(|e| e.errno())?;
    Ok(publish(
        cm,
        ch,
        context,
        ps,
        qp_type,
        sync,
        if sync { ch as usize } else { 0 },
    ))
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_create_id`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn create_id(
    ch: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: super::ffi::rdma_port_space,
) -> c_int {
    guard_neg(|| {
        if id.is_null() {
            return Err(libc::EINVAL);
        }
        let t = if ps == RDMA_PS_IPOIB || ps == RDMA_PS_UDP {
            IBV_QPT_UD
        } else {
            IBV_QPT_RC
        };
        let p = create_id2(ch, context, ps, t)?;
        // SAFETY: the caller's output pointer.
        unsafe { *id = p };
        Ok(())
    })
}

/// Frees a C id's own allocations after softrdma's id is destroyed.
fn free_c(o: &Obj<Id>) {
    let mut st = lock(o);
    if st.path_rec != 0 {
        // SAFETY: allocated by Box::into_raw in `refresh`, freed once; the
        // program's pointer to it dies with the id.
        unsafe {
            (*o.repr()).route.path_rec = std::ptr::null_mut();
            drop(Box::from_raw(st.path_rec as *mut ibv_sa_path_rec));
        }
        st.path_rec = 0;
    }
    if st.sync && st.own_chan != 0 {
        drop(Obj::<Channel>::take(st.own_chan as *mut rdma_event_channel));
        st.own_chan = 0;
    }
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_destroy_id`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn destroy_id(id: *mut rdma_cm_id) -> c_int {
    guard_neg(|| {
        init();
        let o = Obj::<Id>::take(id)?;
        ids_remove(o.cm.num());
        // SAFETY: our allocation.
        let ev = unsafe { std::mem::replace(&mut (*o.repr()).event, std::ptr::null_mut()) };
        if !ev.is_null() {
            // SAFETY: an event we handed out.
            unsafe { ack_cm_event(ev) };
        }
        o.cm.destroy().map_err(|e| e.errno())?;
        free_c(&o);
        Ok(())
    })
}

/// librdmacm's `ucma_complete`: for a synchronous id, waits for the id's
/// event and keeps it in `id->event` (acknowledging the previous one); an
/// event with an error fails the call. The wait is a cancellation point,
/// outside any guard (see `util`): call this outside `guard`.
pub(super) fn complete(o: &Obj<Id>) -> Result<(), i32> {
    let ch = guarded(|| {
        let own = {
            let st = lock(o);
            if !st.sync {
                return Ok(None);
            }
            st.own_chan
        };
        let r = o.repr();
        // SAFETY: our allocation; a synchronous id's event field is ours.
        let old = unsafe { std::mem::replace(&mut (*r).event, std::ptr::null_mut()) };
        if !old.is_null() {
            // SAFETY: an event we handed out.
            unsafe { ack_cm_event(old) };
        }
        Obj::<Channel>::get(own as *mut rdma_event_channel)
            .ok_or(libc::EINVAL)
            .map(Some)
    })?;
    let Some(ch) = ch else {
        return Ok(());
    };
    let ev = get_event(&ch)?;
    guarded(|| {
        let r = o.repr();
        // SAFETY: as above; `ev` is a live event.
        unsafe {
            (*r).event = ev;
            let (kind, status) = ((*ev).event, (*ev).status);
            if status != 0 {
                return Err(if kind == EventType::Rejected as c_int {
                    libc::ECONNREFUSED
                } else if status < 0 {
                    -status
                } else {
                    status
                });
            }
        }
        Ok(())
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_bind_addr`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn bind_addr(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int {
    guard_neg(|| {
        let o = get(id)?;
        // SAFETY: the caller's address.
        let a = unsafe { sockaddr_in(addr) }.ok_or(libc::EINVAL)?;
        o.cm.bind_addr(a).map_err(|e| e.errno())?;
        refresh(&o);
        Ok(())
    })
}

/// `rdma_resolve_addr`; a synchronous id waits for the result (a
/// cancellation point).
///
/// # Safety
/// The C contract of `rdma_resolve_addr`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C-unwind" fn resolve_addr(
    id: *mut rdma_cm_id,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    let o = guarded(|| {
        let o = get(id)?;
        // SAFETY: the caller's addresses.
        let d = unsafe { sockaddr_in(dst) }.ok_or(libc::EINVAL)?;
        let s = if src.is_null() {
            None
        } else {
            // SAFETY: as above.
            Some(unsafe { sockaddr_in(src) }.ok_or(libc::EINVAL)?)
        };
        o.cm.resolve_addr(s, d).map_err(|e| e.errno())?;
        refresh(&o);
        Ok(o)
    });
    neg(o.and_then(|o| complete(&o)))
}

/// `rdma_resolve_route`; a synchronous id waits (a cancellation point).
///
/// # Safety
/// The C contract of `rdma_resolve_route`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C-unwind" fn resolve_route(id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    let o = guarded(|| {
        let o = get(id)?;
        o.cm.resolve_route().map_err(|e| e.errno())?;
        refresh(&o);
        Ok(o)
    });
    neg(o.and_then(|o| complete(&o)))
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_listen`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    guard_neg(|| {
        let o = get(id)?;
        o.cm.listen(backlog).map_err(|e| e.errno())?;
        refresh(&o);
        Ok(())
    })
}

/// A program's `rdma_conn_param`.
///
/// # Safety
/// `p` is NULL or a valid parameter structure whose private data pointer
/// covers its length.
unsafe fn conn_param(p: *const rdma_conn_param) -> Option<ConnParam> {
    if p.is_null() {
        return None;
    }
    // SAFETY: per the contract.
    let p = unsafe { &*p };
    let data = if p.private_data.is_null() || p.private_data_len == 0 {
        Vec::new()
    } else {
        // SAFETY: per the contract.
        unsafe {
            std::slice::from_raw_parts(p.private_data.cast::<u8>(), p.private_data_len.into())
        }
        .to_vec()
    };
    Some(ConnParam {
        private_data: data,
        responder_resources: p.responder_resources,
        initiator_depth: p.initiator_depth,
        flow_control: p.flow_control != 0,
        retry_count: p.retry_count,
        rnr_retry_count: p.rnr_retry_count,
        srq: p.srq != 0,
        qp_num: p.qp_num,
    })
}

/// `rdma_connect`; a synchronous id waits (a cancellation point).
///
/// # Safety
/// The C contract of `rdma_connect`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C-unwind" fn connect(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    let o = guarded(|| {
        let o = get(id)?;
        // SAFETY: the caller's parameters.
        let mut p = unsafe { conn_param(param) };
        // ucma_copy_conn_param_to_kern: rdma_create_ep's connect data
        // first, then the caller's.
        let pre = std::mem::take(&mut lock(&o).connect_data);
        if !pre.is_empty() {
            let q = p.get_or_insert_with(ConnParam::default);
            let mut d = pre;
            d.extend_from_slice(&q.private_data);
            q.private_data = d;
        }
        o.cm.connect(p.as_ref()).map_err(|e| e.errno())?;
        Ok(o)
    });
    neg(o.and_then(|o| complete(&o)))
}

/// `rdma_accept`; a synchronous id waits (a cancellation point).
///
/// # Safety
/// The C contract of `rdma_accept`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C-unwind" fn accept(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    let o = guarded(|| {
        let o = get(id)?;
        // SAFETY: the caller's parameters.
        let p = unsafe { conn_param(param) };
        o.cm.accept(p.as_ref()).map_err(|e| e.errno())?;
        Ok((!id_is_ud(id)).then_some(o))
    });
    neg(o.and_then(|o| o.map_or(Ok(()), |o| complete(&o))))
}

fn private(p: *const c_void, len: u8) -> Vec<u8> {
    if p.is_null() || len == 0 {
        return Vec::new();
    }
    // SAFETY: the caller's buffer of `len` bytes.
    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len.into()) }.to_vec()
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_reject`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn reject(id: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int {
    guard_neg(|| {
        let o = get(id)?;
        o.cm.reject(&private(data, len)).map_err(|e| e.errno())
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_reject_ece`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn reject_ece(id: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int {
    guard_neg(|| {
        let o = get(id)?;
        o.cm.reject_ece(&private(data, len)).map_err(|e| e.errno())
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_notify`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn notify(id: *mut rdma_cm_id, event: crate::ffi::ibv_event_type) -> c_int {
    guard_neg(|| {
        let o = get(id)?;
        if event != IBV_EVENT_COMM_EST {
            return Err(libc::EINVAL);
        }
        o.cm.notify_established().map_err(|e| e.errno())
    })
}

/// `rdma_disconnect`; a synchronous id waits (a cancellation point).
///
/// # Safety
/// The C contract of `rdma_disconnect`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C-unwind" fn disconnect(id: *mut rdma_cm_id) -> c_int {
    let o = guarded(|| {
        let o = get(id)?;
        o.cm.disconnect().map_err(|e| e.errno())?;
        Ok(o)
    });
    neg(o.and_then(|o| complete(&o)))
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_establish`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn establish(id: *mut rdma_cm_id) -> c_int {
    guard_neg(|| {
        let o = get(id)?;
        o.cm.establish().map_err(|e| e.errno())
    })
}

/// `rdma_get_request`: a synchronous listener's next connection request
/// (a cancellation point while it waits).
///
/// # Safety
/// The C contract of `rdma_get_request`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C-unwind" fn get_request(
    listen: *mut rdma_cm_id,
    id: *mut *mut rdma_cm_id,
) -> c_int {
    let prep = guarded(|| {
        let o = get(listen)?;
        if id.is_null() {
            return Err(libc::EINVAL);
        }
        let (sync, own) = {
            let st = lock(&o);
            (st.sync, st.own_chan)
        };
        if !sync {
            return Err(libc::EINVAL);
        }
        let r = o.repr();
        // SAFETY: our allocation.
        let old = unsafe { std::mem::replace(&mut (*r).event, std::ptr::null_mut()) };
        if !old.is_null() {
            // SAFETY: an event we handed out.
            unsafe { ack_cm_event(old) };
        }
        let ch = Obj::<Channel>::get(own as *mut rdma_event_channel).ok_or(libc::EINVAL)?;
        Ok((o, ch))
    });
    let (o, ch) = match prep {
        Ok(x) => x,
        Err(e) => return neg(Err(e)),
    };
    let ev = match get_event(&ch) {
        Ok(ev) => ev,
        Err(e) => return neg(Err(e)),
    };
    neg(guarded(|| {
        let r = o.repr();
        // SAFETY: a live event we made.
        let (kind, status, new) = unsafe { ((*ev).event, (*ev).status, (*ev).id) };
        let fail = |e: i32| {
            // SAFETY: our allocation.
            unsafe { (*r).event = ev };
            Err(e)
        };
        if kind == EventType::Rejected as c_int {
            return fail(libc::ECONNREFUSED);
        }
        if status != 0 {
            return fail(-status);
        }
        if kind != EventType::ConnectRequest as c_int {
            return fail(libc::EINVAL);
        }
        let attr = lock(&o)
            .qp_init_attr
            .as_ref()
            .map(|a| QpInitAttr(a.0.clone_attr()));
        if let Some(mut a) = attr {
            // SAFETY: the listener's PD and the new id are ours.
            let pd = unsafe { (*r).pd };
            if let Err(e) = super::qp::create_qp_on(new, pd, &mut a.0) {
                return fail(e);
            }
        }
        // SAFETY: the new id is live; the caller's output pointer.
        unsafe {
            *id = new;
            (*new).event = ev;
        }
        Ok(())
    }))
}

trait CloneAttr {
    fn clone_attr(&self) -> Self;
}
impl CloneAttr for ibv_qp_init_attr {
    fn clone_attr(&self) -> Self {
        ibv_qp_init_attr {
            qp_context: self.qp_context,
            send_cq: self.send_cq,
            recv_cq: self.recv_cq,
            srq: self.srq,
            cap: self.cap,
            qp_type: self.qp_type,
            sq_sig_all: self.sq_sig_all,
        }
    }
}

/// Whether a C id is a UD one (its events carry `param.ud`).
pub fn id_is_ud(id: *mut rdma_cm_id) -> bool {
    Obj::<Id>::get(id).is_some_and(|o| {
        // SAFETY: our allocation.
        unsafe { (*o.repr()).qp_type == IBV_QPT_UD }
    })
}

/// The C ids of an event: its id (a request's new id gets its C id now,
/// on the listener's channel with its context — a synchronous listener's
/// on a private channel) and the listener. `None` when the id is gone.
pub fn c_id_of_event(ev: &CmEvent) -> Option<(*mut rdma_cm_id, *mut rdma_cm_id)> {
    let Some(l) = &ev.listen_id else {
        let p = ids_get(ev.id.num())?;
        if let Some(o) = Obj::<Id>::get(p) {
            refresh(&o);
        }
        return Some((p, std::ptr::null_mut()));
    };
    let lp = ids_get(l.num())?;
    let lo = Obj::<Id>::get(lp)?;
    if let Some(p) = ids_get(ev.id.num()) {
        return Some((p, lp));
    }
    // SAFETY: the listener is live.
    let (ch, context, ps, qp_type) = unsafe {
        let r = lo.repr();
        ((*r).channel, (*r).context, (*r).ps, (*r).qp_type)
    };
    let sync = lock(&lo).sync;
    let p = publish(ev.id.clone(), ch, context, ps, qp_type, false, 0);
    if sync {
        // ucma_process_conn_req: a synchronous listener's request gets a
        // private channel of its own.
        // SAFETY: `p` was just published.
        if unsafe { migrate_id(p, std::ptr::null_mut()) } != 0 {
            return None;
        }
    }
    Some((p, lp))
}

/// For `qp.rs`: the QP object of a C QP pointer.
pub fn qp_obj(q: *mut ibv_qp) -> Option<Arc<Obj<Qp>>> {
    Obj::<Qp>::get(q)
}
