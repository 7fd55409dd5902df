//! The process's rdma_cm state: ids, port tables, per-device CMs, behind
//! one mutex.
//!
//! Lock order: this mutex, then the engine's (`core`, `tx`), then a
//! channel's queue. Nothing here runs while the engine holds a lock.
//!
//! Dropping a [`Device`](crate::Device) may close it (stop and join its
//! progress thread, which may be waiting for this very mutex), and dropping
//! the last handle of an id destroys it (which takes the mutex): neither
//! may happen while the mutex is held. [`Guard`] therefore keeps every
//! device handle and id handle that leaves the state in its trash, and
//! drops the trash after it unlocks.

use super::channel::ChanInner;
use super::driver::DevState;
use super::id::IdUser;
use super::Acks;
use crate::Device;
use softrdma_cm::{Path, PortSpace};
use softrdma_proto::QpType;
use softrdma_wire::{Psn, Qpn};
use std::any::Any;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// The rdma_cm state of an id (the layer's `IdState`).
pub(crate) use softrdma_cm::rdma::IdState as St;

/// Options set with `rdma_set_option` (and `rdma_set_min_rnr_timer`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Opts {
    pub tos: Option<u8>,
    pub ack_timeout: Option<u8>,
    pub min_rnr_timer: Option<u8>,
    pub reuseaddr: bool,
    /// `RDMA_OPTION_ID_AFONLY` as set; unset, binding decides
    /// ([`Opts::afonly`]).
    pub afonly: Option<bool>,
}

impl Opts {
    /// Whether the id takes only requests of its address family. Unset,
    /// the kernel's default when it binds (`rdma_bind_addr`): IPv4 ids
    /// yes, IPv6 ids as the `net.ipv6.bindv6only` sysctl says (0: no), so
    /// a program may listen on `0.0.0.0` and `[::]` (AFONLY) on one port.
    pub fn afonly(&self, v4: bool) -> bool {
        self.afonly
            .unwrap_or_else(|| v4 || super::resolve::bindv6only())
    }
}

/// One id.
pub(crate) struct IdEntry {
    /// The program's handle (none yet for a request's id nobody took).
    pub user: Weak<IdUser>,
    pub acks: Arc<Acks>,
    pub chan: Arc<ChanInner>,
    pub ps: PortSpace,
    pub qp_type: QpType,
    pub st: St,
    /// The device, once bound to an address or resolved.
    pub dev: Option<Device>,
    /// Local address (IP unspecified while bound to a wildcard).
    pub src: Option<SocketAddr>,
    /// Peer address.
    pub dst: Option<SocketAddr>,
    /// The id holds `src`'s port in its port space's table.
    pub port_held: bool,
    /// The resolved route (the path back to the requester for a passive id).
    pub path: Option<Path>,
    /// The CM id of the connection (on `dev`).
    pub cm: Option<softrdma_cm::CmId>,
    /// Listening (`St::Listen`): what it binds and its backlog. Its
    /// requests come through the CM listener of its service ID on each
    /// device it covers (its own, or every device for a wildcard address:
    /// those open now, and those that open later), which the rdma_cm
    /// listeners of one port share (`driver::cm_listen`).
    pub listen: Option<softrdma_cm::rdma::Listener>,
    /// A request's id: its listener.
    pub listener: Option<u64>,
    /// The QP rdma_cm drives (`rdma_create_qp`).
    pub qp: Option<Qpn>,
    /// That QP has an SRQ.
    pub qp_srq: bool,
    /// rdma_cm's own PSN (`seq_num`): our receive PSN.
    pub seq: Psn,
    /// librdmacm's `responder_resources` / `initiator_depth` of the id.
    pub resp_res: u8,
    pub init_depth: u8,
    pub opts: Opts,
    /// Moving the QP after the REP failed: a later REJ or DISCONNECTED is
    /// not reported (librdmacm `connect_error`).
    pub connect_error: bool,
    /// The peer's UD QP and Q_Key (UD, after ESTABLISHED).
    pub remote_ud: Option<(Qpn, u32)>,
    /// Multicast groups joined (`rdma_join_multicast`; see `mcast`).
    pub mcast: Vec<super::mcast::Join>,
}

impl IdEntry {
    pub fn new(chan: Arc<ChanInner>, ps: PortSpace, qp_type: QpType, seq: Psn) -> IdEntry {
        IdEntry {
            user: Weak::new(),
            acks: Arc::new(Acks::default()),
            chan,
            ps,
            qp_type,
            st: St::Idle,
            dev: None,
            src: None,
            dst: None,
            port_held: false,
            path: None,
            cm: None,
            listen: None,
            listener: None,
            qp: None,
            qp_srq: false,
            seq,
            resp_res: 0,
            init_depth: 0,
            opts: Opts::default(),
            connect_error: false,
            remote_ud: None,
            mcast: Vec::new(),
        }
    }

    /// The serial of the id's device.
    pub fn serial(&self) -> Option<u64> {
        self.dev.as_ref().map(Device::serial)
    }
}

/// The state.
#[derive(Default)]
pub(crate) struct State {
    next_num: u64,
    pub ids: HashMap<u64, IdEntry>,
    /// Per device (by serial): its CM.
    pub devs: HashMap<u64, DevState>,
    /// Ids holding each (port space, port).
    pub ports: softrdma_cm::rdma::Ports,
}

impl State {
    pub fn insert(&mut self, e: IdEntry) -> u64 {
        self.next_num += 1;
        let n = self.next_num;
        self.ids.insert(n, e);
        n
    }
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// The locked state and what must be dropped after unlocking.
pub(crate) struct Guard {
    g: Option<MutexGuard<'static, Option<State>>>,
    trash: Vec<Box<dyn Any + Send>>,
}

/// Locks the state.
pub(crate) fn lock() -> Guard {
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    g.get_or_insert_with(State::default);
    Guard {
        g: Some(g),
        trash: Vec::new(),
    }
}

/// The state's lock itself, for `crate::fork`'s handlers (held across a
/// fork).
pub(crate) fn lock_for_fork() -> MutexGuard<'static, Option<State>> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Locks the state unless another thread holds it.
pub(crate) fn try_lock() -> Option<Guard> {
    let mut g = match STATE.try_lock() {
        Ok(g) => g,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return None,
    };
    g.get_or_insert_with(State::default);
    Some(Guard {
        g: Some(g),
        trash: Vec::new(),
    })
}

/// Registers (once) the exit handler that destroys the ids still alive
/// ([`super::id::destroy_all_at_exit`]).
pub(crate) fn cleanup_at_exit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    extern "C" fn at_exit() {
        let _ = std::panic::catch_unwind(super::id::destroy_all_at_exit);
    }
    ONCE.call_once(|| {
        // `at_exit` never unwinds (the panic is caught). Without room
        // for another handler the ids are left as a killed process's are.
        let _ = softrdma_io::at_exit(at_exit);
    });
}

impl Guard {
    /// The state.
    pub fn st(&mut self) -> &mut State {
        self.g
            .as_mut()
            .and_then(|g| g.as_mut())
            .expect("locked and initialised")
    }

    /// Keeps `x` until the guard unlocks (devices, id handles).
    pub fn defer_drop<T: Send + 'static>(&mut self, x: T) {
        self.trash.push(Box::new(x));
    }

    /// A handle of the device with this serial, kept in the trash too.
    pub fn device(&mut self, serial: u64) -> Option<Device> {
        let d = Device::by_serial(serial)?;
        self.defer_drop(d.clone());
        Some(d)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.g.take();
        self.trash.clear();
    }
}
