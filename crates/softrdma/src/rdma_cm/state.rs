//! The process's rdma_cm state: one `softrdma_cm::rdma::Endpoint` (the
//! ids, their ports, listeners and per-device CMs, sans-I/O) and what the
//! driver keeps beside each id (the program's handle, the channel, the
//! device handle), behind one mutex.
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
use super::id::IdUser;
use super::Acks;
use crate::Device;
use softrdma_cm::rdma::Endpoint;
use softrdma_proto::QpType;
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// The rdma_cm state of an id (the layer's `IdState`).
pub(crate) use softrdma_cm::rdma::IdState as St;

/// Whether an id bound to an address of this family takes only requests
/// of it, unless `RDMA_OPTION_ID_AFONLY` said: the kernel's default when
/// it binds (`rdma_bind_addr`): IPv4 ids yes, IPv6 ids as the
/// `net.ipv6.bindv6only` sysctl says (0: no), so a program may listen on
/// `0.0.0.0` and `[::]` (AFONLY) on one port.
pub(crate) fn afonly(set: Option<bool>, v4: bool) -> bool {
    set.unwrap_or_else(|| v4 || super::resolve::bindv6only())
}

/// What the driver keeps beside an endpoint id: the I/O side of it.
pub(crate) struct IdSide {
    /// The program's handle (none yet for a request's id nobody took).
    pub user: Weak<IdUser>,
    pub acks: Arc<Acks>,
    pub chan: Arc<ChanInner>,
    pub qp_type: QpType,
    /// The device, once bound to an address or resolved (the handle keeps
    /// it open while the id lives).
    pub dev: Option<Device>,
    /// `RDMA_OPTION_ID_AFONLY` as set (unset: [`afonly`] decides when the
    /// id binds).
    pub afonly: Option<bool>,
    /// Moving the QP after the REP failed: a later REJ or DISCONNECTED is
    /// not reported (librdmacm `connect_error`).
    pub connect_error: bool,
    /// Each multicast join (group, context) in join order, with its events
    /// reported and acknowledged: `rdma_leave_multicast` waits for them
    /// (librdmacm's `mc->events_completed`).
    pub mc_acks: Vec<(std::net::IpAddr, u64, Arc<Acks>)>,
}

impl IdSide {
    pub fn new(chan: Arc<ChanInner>, qp_type: QpType) -> IdSide {
        IdSide {
            user: Weak::new(),
            acks: Arc::new(Acks::default()),
            chan,
            qp_type,
            dev: None,
            afonly: None,
            connect_error: false,
            mc_acks: Vec::new(),
        }
    }
}

/// The state.
#[derive(Default)]
pub(crate) struct State {
    /// The ids, ports, listeners and devices' CMs (devices by serial).
    pub ep: Endpoint,
    /// The driver's side of each of the endpoint's ids.
    pub ids: HashMap<u64, IdSide>,
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
        crate::log::exiting();
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

    /// The endpoint.
    pub fn ep(&mut self) -> &mut Endpoint {
        &mut self.st().ep
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
