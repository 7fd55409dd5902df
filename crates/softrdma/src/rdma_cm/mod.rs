//! rdma_cm: connections by IP address and port, as librdmacm makes them,
//! over the InfiniBand communication manager on QP 1 (`softrdma-cm`).
//!
//! The model is librdmacm's: an [`EventChannel`] delivers [`CmEvent`]s for
//! the [`CmId`]s created on it. An active id resolves an address and a
//! route, then connects (a REQ; for UD ids a SIDR_REQ); a passive id binds
//! a port and listens, and each request arrives as a `ConnectRequest`
//! event carrying a new id to accept or reject. The messages are the ones
//! Linux's rdma_cm sends over rxe, byte for byte, so either side may be the
//! kernel.
//!
//! ```no_run
//! use softrdma::rdma_cm;
//! # fn main() -> softrdma::Result<()> {
//! // Server: listen on 127.0.0.1:7471, accept one RC connection.
//! let listener = rdma_cm::listen("127.0.0.1:7471".parse().unwrap())?;
//! let conn = listener.accept(&Default::default())?;
//! // conn.qp is connected (RTS); conn.pd / conn.cq are its PD and CQ.
//! # Ok(()) }
//! ```
//!
//! # How it runs
//!
//! - State: one `softrdma_cm::rdma::Endpoint` per process (`state`): the
//!   ids, the port tables of the four port spaces, the listeners and per
//!   device a `softrdma_cm::Cm`, all sans-I/O; beside each id the driver
//!   keeps its I/O side (the program's handle, the channel, the device
//!   handle). One mutex guards both; it is taken before any lock of the
//!   engine and never while the engine holds one. Every call is: lock,
//!   one endpoint call, then `driver::flush`, which does what the endpoint
//!   asked for (the device process's listen gate, QP changes through the
//!   verbs `modify_qp` path, events onto the channels, MADs out, each
//!   device's deadline).
//! - The engine feeds the CM through its one hook (`crate::cm_hook`, which
//!   `driver::install_hook` fills at `Device::open`; the engine names no
//!   rdma_cm item): `driver::on_gsi` for MADs to QP 1, received by the
//!   progress thread or by a program thread polling a CQ;
//!   `driver::on_timer` when the CM's deadline passes. It sends what it
//!   produces as UD SENDs from QP 1. Events reach the channels without the
//!   program calling in.
//! - A channel is an eventfd in semaphore mode counting queued events: it
//!   polls like the kernel's rdma_cm descriptor, and [`EventChannel::get_event`]
//!   reads one count (blocking, or EAGAIN if the program made the
//!   descriptor non-blocking) and takes one event.
//! - As in librdmacm, the active side turns the REP into ESTABLISHED when
//!   the program takes the event: its QP goes to RTR and RTS and the RTU
//!   leaves then (CONNECT_ERROR and no RTU if that fails); without a QP the
//!   program gets CONNECT_RESPONSE and calls [`CmId::establish`].
//! - [`CmId::destroy`] waits until every event reported for the id was
//!   acknowledged (dropping a [`CmEvent`] acknowledges it), and discards
//!   its queued ones (destroying the ids of connection requests nobody
//!   took).
//!
//! Devices come from a [`DeviceProvider`]: by default the devices this
//! process opened, and, for a local address no device has, a new device
//! bound to it (the C library installs one that shares libibverbs' devices).
//!
//! No `unsafe` here: the OS calls (the channel's eventfd, a route's path
//! MTU, the exit handler) are softrdma-io's.

#![forbid(unsafe_code)]

mod addr;
mod channel;
mod conn;
mod deliver;
pub(crate) mod driver;
mod id;
mod mcast;
mod qp;
mod resolve;
mod simple;
pub(crate) mod state;

pub use channel::EventChannel;
pub use deliver::set_read_back;
pub use id::{AddrInfo, CmId};
pub use resolve::{
    iboe_mtu, is_local, route_source, set_device_provider, DefaultProvider, DeviceProvider,
};
pub use simple::{connect, listen, ConnectOptions, Connection, Listener};
pub use softrdma_cm::negotiate::{AhAttr, AttrMask, QpAttr, QpAttrs, QpState};
pub use softrdma_cm::rdma::{ConnParam, EventType, UdParam};
pub use softrdma_cm::{Path, PortSpace};

use std::sync::{Arc, Condvar, Mutex};

/// An rdma_cm event. Dropping it acknowledges it (`rdma_ack_cm_event`).
#[derive(Debug)]
pub struct CmEvent {
    /// What happened.
    pub event: EventType,
    /// 0, a negative errno, or the IB reject reason / SIDR status.
    pub status: i32,
    /// The id (for `ConnectRequest`, the new one).
    pub id: CmId,
    /// The listener, for `ConnectRequest`.
    pub listen_id: Option<CmId>,
    /// Connection parameters (RC events).
    pub conn: ConnParam,
    /// UD parameters (events of UD ids).
    pub ud: Option<UdParam>,
    /// Multicast events: the group's address and the context given to
    /// `join_multicast` (librdmacm reports it as `param.ud.private_data`).
    pub mc: Option<(std::net::IpAddr, u64)>,
    acks: Arc<Acks>,
    /// A multicast event's: its join's count too.
    mc_acks: Option<Arc<Acks>>,
}

impl Drop for CmEvent {
    fn drop(&mut self) {
        if let Some(m) = &self.mc_acks {
            m.ack();
        }
        self.acks.ack();
    }
}

/// Events reported for an id and acknowledged (`rdma_destroy_id` and
/// `rdma_migrate_id` wait until the two agree), or for one of its
/// multicast joins (`rdma_leave_multicast` waits).
#[derive(Debug, Default)]
pub(crate) struct Acks {
    counts: Mutex<(u64, u64)>,
    cv: Condvar,
}

impl Acks {
    pub fn report(&self) {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).0 += 1;
    }
    pub fn ack(&self) {
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        c.1 += 1;
        drop(c);
        self.cv.notify_all();
    }
    /// Waits until every reported event was acknowledged.
    pub fn wait(&self) {
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        while c.1 < c.0 {
            c = self.cv.wait(c).unwrap_or_else(|e| e.into_inner());
        }
    }
}
