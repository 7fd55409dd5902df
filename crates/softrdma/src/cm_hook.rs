//! The one hook through which the engine reaches the connection manager
//! above it: MADs that arrived for QP 1, the CM's timers, a device that
//! goes. The engine calls these functions and names no upper layer;
//! rdma_cm installs its driver (`rdma_cm::driver::install_hook`) before a
//! device can receive anything (at `Device::open`). Without one, MADs stay
//! queued in the core and no CM deadline is ever published.

use crate::engine::Shared;
use std::sync::OnceLock;

/// What the CM above the engine does on each call.
pub(crate) struct CmHook {
    /// The device queued MADs for QP 1 (called with no engine lock held).
    pub on_gsi: fn(&Shared),
    /// The CM's deadline passed (on the progress thread).
    pub on_timer: fn(&Shared),
    /// The device with this serial is going.
    pub forget_device: fn(u64),
}

static HOOK: OnceLock<CmHook> = OnceLock::new();

/// Installs the CM's hook (the first one stays).
pub(crate) fn install(h: CmHook) {
    let _ = HOOK.set(h);
}

/// MADs for QP 1 arrived on `shared`.
pub(crate) fn on_gsi(shared: &Shared) {
    if let Some(h) = HOOK.get() {
        (h.on_gsi)(shared);
    }
}

/// The CM's deadline on `shared` passed.
pub(crate) fn on_timer(shared: &Shared) {
    if let Some(h) = HOOK.get() {
        (h.on_timer)(shared);
    }
}

/// The device with `serial` is going.
pub(crate) fn forget_device(serial: u64) {
    if let Some(h) = HOOK.get() {
        (h.forget_device)(serial);
    }
}
