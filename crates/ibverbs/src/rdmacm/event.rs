//! Event channels and events: `rdma_create_event_channel`,
//! `rdma_get_cm_event`, `rdma_ack_cm_event`, `rdma_event_str`.
//!
//! A channel's `fd` is softrdma's eventfd (semaphore mode): readable while
//! events are queued, and the program may make it non-blocking, as with
//! the kernel's `/dev/infiniband/rdma_cm` descriptor. An event is a C
//! structure with a 256-byte private-data buffer after it (librdmacm's
//! `struct cma_event`), holding softrdma's event: freeing it is the
//! acknowledgement.

use super::ffi::*;
use super::id::{c_id_of_event, id_is_ud};
use crate::ffi::ibv_ah_attr;
use crate::handle::{Castable, Kind, Obj};
use crate::util::{guard, guard_neg, guard_ptr, guarded, neg};
use softrdma::rdma_cm::{AhAttr, CmEvent, EventChannel, EventType};
use std::ffi::{c_char, c_int};
use std::sync::Mutex;

/// An event channel.
pub struct Channel {
    pub ch: EventChannel,
}

impl Castable for Channel {
    fn release_uses(&self) {}
    type Repr = rdma_event_channel;
    type Api = rdma_event_channel;
    const KIND: Kind = Kind::CmChannel;
    const MAGIC: u64 = 0x5352_434d_4348_0011;
}

/// A new channel, published.
pub fn new_channel() -> Result<*mut rdma_event_channel, i32> {
    let ch = EventChannel::new().map_err(|e| e.errno())?;
    let c = rdma_event_channel { fd: ch.fd() };
    Ok(Obj::new(c, Channel { ch }).publish())
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_create_event_channel`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn create_event_channel() -> *mut rdma_event_channel {
    guard_ptr(|| {
        super::device::init();
        new_channel()
    })
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_destroy_event_channel`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn destroy_event_channel(ch: *mut rdma_event_channel) {
    // Ids on it keep softrdma's channel (and its descriptor) alive.
    guard((), || drop(Obj::<Channel>::take(ch)))
}

/// `struct cma_event`: the event, then room for its private data.
#[repr(C)]
pub struct EventRepr {
    pub ev: rdma_cm_event,
    pub private_data: [u8; RDMA_MAX_PRIVATE_DATA],
}

/// A delivered event: acknowledged when dropped.
pub struct Event {
    _ev: Mutex<CmEvent>,
}

impl Castable for Event {
    fn release_uses(&self) {}
    type Repr = EventRepr;
    type Api = rdma_cm_event;
    const KIND: Kind = Kind::CmEvent;
    const MAGIC: u64 = 0x5352_434d_4556_0012;
}

fn ah_attr(a: &AhAttr) -> ibv_ah_attr {
    let mut o = ibv_ah_attr::default();
    o.grh.dgid.raw = a.dgid.octets();
    o.grh.flow_label = a.flow_label;
    o.grh.sgid_index = 0;
    o.grh.hop_limit = a.hop_limit;
    o.grh.traffic_class = a.traffic_class;
    o.sl = a.sl;
    o.is_global = 1;
    o.port_num = a.port_num.max(1);
    o
}

/// The C event of a softrdma event (its ids made C ids first).
fn to_c(ev: CmEvent) -> Option<*mut rdma_cm_event> {
    let (id, listen) = c_id_of_event(&ev)?;
    let ud = id_is_ud(id) || ev.mc.is_some();
    let mc = ev.mc;
    let mut repr = EventRepr {
        ev: rdma_cm_event {
            id,
            listen_id: listen,
            event: ev.event as c_int,
            status: ev.status,
            param: rdma_cm_event_param {
                ud: rdma_ud_param {
                    private_data: std::ptr::null(),
                    private_data_len: 0,
                    ah_attr: ibv_ah_attr::default(),
                    qp_num: 0,
                    qkey: 0,
                },
            },
        },
        private_data: [0; RDMA_MAX_PRIVATE_DATA],
    };
    let data: &[u8] = if ud {
        ev.ud.as_ref().map_or(&[], |u| &u.private_data)
    } else {
        &ev.conn.private_data
    };
    let n = data.len().min(RDMA_MAX_PRIVATE_DATA - 1);
    repr.private_data[..n].copy_from_slice(&data[..n]);
    if ud {
        let u = ev.ud.clone().unwrap_or_default();
        repr.ev.param.ud = rdma_ud_param {
            private_data: std::ptr::null(),
            private_data_len: n as u8,
            ah_attr: u.ah_attr.as_ref().map(ah_attr).unwrap_or_default(),
            qp_num: u.qp_num,
            qkey: u.qkey,
        };
    } else {
        let c = &ev.conn;
        repr.ev.param.conn = rdma_conn_param {
            private_data: std::ptr::null(),
            private_data_len: n as u8,
            responder_resources: c.responder_resources,
            initiator_depth: c.initiator_depth,
            flow_control: c.flow_control as u8,
            retry_count: c.retry_count,
            rnr_retry_count: c.rnr_retry_count,
            srq: c.srq as u8,
            qp_num: c.qp_num,
        };
    }
    let o = Obj::new(
        repr,
        Event {
            _ev: Mutex::new(ev),
        },
    );
    if let Some((_, context)) = mc {
        // Multicast events carry the join's context (librdmacm's
        // `param.ud.private_data = mc->context`), no private data.
        let r = o.repr();
        // SAFETY: our own allocation, not shared yet.
        unsafe {
            (*r).ev.param.ud.private_data = context as *const std::ffi::c_void;
            (*r).ev.param.ud.private_data_len = 0;
        }
    } else if n > 0 {
        let r = o.repr();
        // SAFETY: our own allocation, not shared yet; the pointer stays
        // valid as long as the event (the buffer is inside it). The
        // private data pointer is the first member of both union arms.
        unsafe {
            let p = std::ptr::addr_of!((*r).private_data).cast();
            if ud {
                (*r).ev.param.ud.private_data = p;
            } else {
                (*r).ev.param.conn.private_data = p;
            }
        }
    }
    Some(o.publish())
}

/// Waits for the next event of a channel (per its descriptor's flags) and
/// hands it out as a C event. It blocks outside any guard — a cancellation
/// point, as librdmacm's `read()` (see `util`) — so callers call it
/// outside `guard` too, holding only `Arc`s.
pub fn get_event(ch: &Obj<Channel>) -> Result<*mut rdma_cm_event, i32> {
    loop {
        ch.ch.wait_count().map_err(|e| e.errno())?;
        if let Some(p) = guarded(|| Ok(ch.ch.take_counted().and_then(to_c)))? {
            return Ok(p);
        }
        // The counted event's id was destroyed meanwhile: the next one.
    }
}

/// `rdma_get_cm_event`: a cancellation point (see `util`).
///
/// # Safety
/// The C contract of `rdma_get_cm_event`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C-unwind" fn get_cm_event(
    ch: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    let c = match guarded(|| {
        if event.is_null() {
            return Err(libc::EINVAL);
        }
        Obj::<Channel>::get(ch).ok_or(libc::EINVAL)
    }) {
        Ok(c) => c,
        Err(e) => return neg(Err(e)),
    };
    neg(get_event(&c).map(|p| {
        // SAFETY: the caller's output pointer (checked non-NULL).
        unsafe { *event = p };
    }))
}

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_ack_cm_event`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    guard_neg(|| {
        Obj::<Event>::take(event)
            .map(drop)
            .map_err(|_| libc::EINVAL)
    })
}

/// The names, NUL-terminated, indexed by event number.
const NAMES: [&str; 16] = [
    "RDMA_CM_EVENT_ADDR_RESOLVED\0",
    "RDMA_CM_EVENT_ADDR_ERROR\0",
    "RDMA_CM_EVENT_ROUTE_RESOLVED\0",
    "RDMA_CM_EVENT_ROUTE_ERROR\0",
    "RDMA_CM_EVENT_CONNECT_REQUEST\0",
    "RDMA_CM_EVENT_CONNECT_RESPONSE\0",
    "RDMA_CM_EVENT_CONNECT_ERROR\0",
    "RDMA_CM_EVENT_UNREACHABLE\0",
    "RDMA_CM_EVENT_REJECTED\0",
    "RDMA_CM_EVENT_ESTABLISHED\0",
    "RDMA_CM_EVENT_DISCONNECTED\0",
    "RDMA_CM_EVENT_DEVICE_REMOVAL\0",
    "RDMA_CM_EVENT_MULTICAST_JOIN\0",
    "RDMA_CM_EVENT_MULTICAST_ERROR\0",
    "RDMA_CM_EVENT_ADDR_CHANGE\0",
    "RDMA_CM_EVENT_TIMEWAIT_EXIT\0",
];

/// A C entry point of softrdma's libibverbs.so.1.
///
/// # Safety
/// The C contract of `rdma_event_str`, as the crate docs state it
/// ("The C boundary"): pointers valid as the prototype says, objects
/// this library made and not yet destroyed.
pub unsafe extern "C" fn event_str(e: super::ffi::rdma_cm_event_type) -> *const c_char {
    let s = usize::try_from(e)
        .ok()
        .and_then(|i| NAMES.get(i))
        .copied()
        .unwrap_or("UNKNOWN EVENT\0");
    debug_assert_eq!(
        NAMES[EventType::TimewaitExit as usize],
        "RDMA_CM_EVENT_TIMEWAIT_EXIT\0"
    );
    s.as_ptr().cast()
}
