//! The driver of the process's `softrdma_cm::rdma::Endpoint`: every call
//! on an id is lock, one endpoint call, then [`flush`], which does the
//! endpoint's I/O: the device processes' answers to its listen gate, the
//! QP changes it asks for (through the verbs `modify_qp` path), its
//! events onto the ids' channels, its MADs out as UD SENDs from each
//! device's QP 1 (through the device process for a shared device) and
//! each device's CM deadline to its progress thread. The engine feeds it
//! through its one hook (`crate::cm_hook`): MADs received on QP 1
//! ([`on_gsi`]) and timers ([`on_timer`]).
//!
//! The endpoint's clock is the process's ([`now`]); each device's engine
//! has its own, so a deadline is handed to a device as a delay from its
//! own now.

use super::channel::Queued;
use super::id::IdUser;
use super::state::{lock, Guard, IdSide};
use crate::engine::Shared;
use crate::error::{Error, Result};
use softrdma_cm::rdma::EventType;
use softrdma_cm::rdma::{self, GateAsk, IdEvent, Refused};
use softrdma_cm::{CmConfig, Instant, ServiceId};
use softrdma_proto::QpType;
use std::net::IpAddr;
use std::sync::OnceLock;

/// Logs requests the device's CM refused for their source's half-open
/// limit (reported at most once a second).
fn log_refused(ip: IpAddr, r: Refused) {
    tracing::warn!(
        target: "softrdma::rdma_cm",
        dev = %ip,
        last_from = %r.last_from,
        "refused {} connection requests (REJ no resources): their source had \
         {} requests waiting (counter rx_refused_half_open)",
        r.count,
        r.limit
    );
}

/// The endpoint's clock: the process's.
pub(crate) fn now() -> Instant {
    static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();
    Instant(
        EPOCH
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos() as u64,
    )
}

/// The endpoint knows the device (its CM made on first use: its GUID,
/// its address, a key from the OS; gated when the device is shared with
/// other processes).
pub(crate) fn ensure_dev(g: &mut Guard, shared: &Shared) {
    let serial = shared.serial;
    if g.ep().device(serial).is_some() {
        return;
    }
    let (guid, ip) = shared.peek_core(|c| (c.config().node_guid, c.config().local_ip));
    let mut key = [0u8; 16];
    let _ = getrandom::fill(&mut key);
    let k = [
        u64::from_le_bytes(key[..8].try_into().expect("8 bytes")),
        u64::from_le_bytes(key[8..].try_into().expect("8 bytes")),
    ];
    shared
        .cm_used
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let ep = g.ep();
    ep.add_device(serial, CmConfig::new(guid, k), ip, now());
    ep.set_gated(serial, shared.host.is_some());
}

/// MADs arrived on QP 1 (called by the engine, no engine lock held).
/// Installs this driver as the engine's CM hook ([`crate::cm_hook`]).
pub(crate) fn install_hook() {
    crate::cm_hook::install(crate::cm_hook::CmHook {
        on_gsi,
        on_timer,
        forget_device,
    });
}

pub(crate) fn on_gsi(shared: &Shared) {
    let mads = shared.take_gsi();
    if mads.is_empty() {
        return;
    }
    let mut g = lock();
    ensure_dev(&mut g, shared);
    let t = now();
    for m in &mads {
        tracing::debug!(target: "softrdma::rdma_cm", "softrdma cm {}: <- {} {}",
                shared.local.ip(),
                m.src,
                softrdma_wire::pretty::mad_line(&m.mad));
        g.ep().receive(shared.serial, t, m.src, m.src_qpn, &m.mad);
    }
    let _ = flush_with(&mut g, Some(shared));
}

/// The CM's deadline passed (called by the progress thread).
pub(crate) fn on_timer(shared: &Shared) {
    let mut g = lock();
    g.ep().handle_timeout(now());
    let _ = flush_with(&mut g, Some(shared));
}

/// The device is gone: drop its CM (called when the engine's state is
/// dropped, never under this module's lock).
pub(crate) fn forget_device(serial: u64) {
    let mut g = lock();
    if let Some(ds) = g.ep().remove_device(serial) {
        g.defer_drop(ds);
    }
}

/// What a [`flush`] met: listens the device processes refused, and the
/// first QP change that failed.
#[derive(Default)]
pub(crate) struct Flushed {
    pub refused: Vec<(u64, ServiceId)>,
    pub qp_error: Option<Error>,
}

/// A device the driver may use for the endpoint's I/O.
enum Dev<'a> {
    /// The device whose progress thread runs the hook now.
    Current(&'a Shared),
    /// A handle an id holds (or, on a program's thread, any open one).
    Held(crate::Device),
}

impl Dev<'_> {
    fn forked_away(&self) -> bool {
        match self {
            Dev::Current(s) => s.forked_away(),
            Dev::Held(d) => d.forked_away(),
        }
    }

    fn shared(&self) -> &Shared {
        match self {
            Dev::Current(s) => s,
            Dev::Held(d) => d.shared(),
        }
    }
}

/// Device `serial` for the endpoint's I/O. On a progress thread
/// (`current` given) only that device or one an id holds: a handle made
/// there could be the device's last, and dropping it would close the
/// device from its own progress thread; what another device has to send
/// then waits for its own progress thread (its deadline is due).
fn dev_for<'a>(g: &mut Guard, serial: u64, current: Option<&'a Shared>) -> Option<Dev<'a>> {
    if let Some(c) = current.filter(|c| c.serial == serial) {
        return Some(Dev::Current(c));
    }
    let held = g
        .st()
        .ids
        .values()
        .filter_map(|x| x.dev.as_ref())
        .find(|d| d.serial() == serial)
        .cloned();
    // A clone of an id's handle is never the device's last while the
    // lock is held: it is dropped under the lock, not in the trash (which
    // a progress thread would drop after unlocking, when the id may be
    // gone).
    if let Some(d) = held {
        return Some(Dev::Held(d));
    }
    if current.is_none() {
        return g.device(serial).map(Dev::Held);
    }
    None
}

/// [`flush_with`] on a program's thread.
pub(crate) fn flush(g: &mut Guard) -> Flushed {
    flush_with(g, None)
}

/// Does what the endpoint asked for (see the module), until it asks for
/// nothing more; `current`: the device whose progress thread runs this.
pub(crate) fn flush_with(g: &mut Guard, current: Option<&Shared>) -> Flushed {
    let mut out = Flushed::default();
    // Devices of the parent (this is a forked child) send nothing.
    let serials: Vec<u64> = g.ep().devices().collect();
    for s in serials {
        let away = dev_for(g, s, current).is_some_and(|d| d.forked_away());
        if away && !g.ep().forked_away(s) {
            g.ep().set_forked_away(s);
        }
    }
    // Bounded: each round handles what the previous one produced.
    for _ in 0..100 {
        let mut busy = false;
        while let Some(a) = g.ep().poll_gate() {
            busy = true;
            gate(g, a, current, &mut out);
        }
        while let Some((num, qpn, c)) = g.ep().poll_qp_change() {
            busy = true;
            let dev = g.st().ids.get(&num).and_then(|s| s.dev.clone());
            // Dropped under the lock (see `dev_for`).
            if let Some(dev) = dev {
                if let Err(e) = super::qp::apply(&dev, qpn, &c) {
                    out.qp_error.get_or_insert(e);
                }
            }
        }
        while let Some(q) = g.ep().poll_event() {
            busy = true;
            deliver_to_channel(g, q);
        }
        while let Some((dev, r)) = g.ep().poll_refused() {
            let ip = g.ep().device(dev).map(|d| d.ip);
            if let Some(ip) = ip {
                log_refused(ip, r);
            }
        }
        if !busy {
            break;
        }
    }
    transmit(g, current);
    out
}

/// The MADs of every device out, and its deadline to its progress thread.
fn transmit(g: &mut Guard, current: Option<&Shared>) {
    let serials: Vec<u64> = g.ep().devices().collect();
    let t = now();
    for s in serials {
        let Some(dev) = dev_for(g, s, current) else {
            continue;
        };
        let mut mads = Vec::new();
        while let Some(m) = g.ep().poll_device_transmit(s) {
            mads.push((m.dst, m.dst_qpn, m.mad));
        }
        let deadline = g.ep().device_deadline(s);
        if dev.forked_away() {
            continue;
        }
        let shared = dev.shared();
        for (dst, _, mad) in &mads {
            tracing::debug!(target: "softrdma::rdma_cm", "softrdma cm {}: -> {} {}",
                    shared.local.ip(),
                    dst,
                    softrdma_wire::pretty::mad_line(mad));
        }
        shared.send_mads(&mads);
        // The endpoint's deadline as a time of the device's clock.
        let d = deadline.map(|d| softrdma_proto::Instant(shared.now().0 + d.0.saturating_sub(t.0)));
        shared.set_cm_deadline(d);
    }
}

/// A question of the endpoint's listen gate to a device process.
fn gate(g: &mut Guard, a: GateAsk, current: Option<&Shared>, out: &mut Flushed) {
    let (GateAsk::Listen { dev, sid } | GateAsk::Unlisten { dev, sid }) = a;
    // A device out of reach here is asked again by its own next request.
    let Some(d) = dev_for(g, dev, current).filter(|d| !d.forked_away()) else {
        return;
    };
    let host = d.shared().host.clone();
    match a {
        GateAsk::Listen { .. } => {
            // A device shared with other processes: connection requests
            // for the service come to this one (the device process routes
            // them) if no other process of the device listens.
            let ok = match host {
                Some(h) => match h.listen(sid.0) {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::debug!(target: "softrdma::rdma_cm", "softrdma cm: listen on {sid:?}: another process of the device listens (errno {e})");
                        false
                    }
                },
                None => true,
            };
            // Refused by the device process, or by the device's CM (its
            // id table full): the `rdma_listen` fails (ENOMEM).
            let cm_ok = g.ep().gate_listen(dev, sid, ok, now()).is_ok();
            if !ok || !cm_ok {
                out.refused.push((dev, sid));
            }
        }
        GateAsk::Unlisten { .. } => {
            if let Some(h) = host {
                h.unlisten(sid.0);
            }
        }
    }
}

/// An endpoint event onto its id's channel; a CONNECT_REQUEST's new id
/// gets its driver side (the listener's channel and QP type, the device
/// that received the request) and the event counts against the listener,
/// whose channel it goes to.
fn deliver_to_channel(g: &mut Guard, q: IdEvent) {
    let (num, new_id) = match (q.event, q.listen_id) {
        (EventType::ConnectRequest, Some(l)) => (l, Some(q.id)),
        _ => (q.id, None),
    };
    if let Some(child) = new_id {
        let Some(l) = g.st().ids.get(&num) else {
            return;
        };
        let (chan, lqp) = (l.chan.clone(), l.qp_type);
        let ud = g
            .ep()
            .id(child)
            .is_some_and(|e| e.transport == rdma::Transport::Ud);
        // The id's handle is the only one made here: none is left in the
        // trash for a progress thread to drop (see `dev_for`).
        let dev = g.ep().id(child).and_then(|e| e.dev);
        let dev = dev.and_then(crate::Device::by_serial);
        let mut side = IdSide::new(chan, if ud { QpType::Ud } else { lqp });
        side.dev = dev;
        g.st().ids.insert(child, side);
    }
    let Some(side) = g.st().ids.get(&num) else {
        return;
    };
    side.chan.push(Queued {
        num,
        event: q.event,
        status: q.status,
        new_id,
        conn: q.conn,
        ud: q.ud,
        mc: q.mc,
    });
}

/// The transport of an id's QP type.
pub(crate) fn transport(t: QpType) -> rdma::Transport {
    match t {
        QpType::Rc => rdma::Transport::Rc,
        QpType::Uc => rdma::Transport::Uc,
        QpType::Ud => rdma::Transport::Ud,
        QpType::XrcSend | QpType::XrcRecv => rdma::Transport::Xrc,
    }
}

/// An endpoint error as the errno Linux gives.
pub(crate) fn errno(e: rdma::EndpointError) -> Error {
    use rdma::{EndpointError as E, PortError as P};
    match e {
        // Linux's CM ids are allocated (`ib_create_cm_id`): a failure is
        // ENOMEM; softrdma's CM has a table of `MAX_IDS` instead.
        E::Cm(c @ softrdma_cm::CmError::TooManyIds) => Error::cm(libc::ENOMEM, c.to_string()),
        E::Port(p @ P::InUse(..)) => Error::cm(libc::EADDRINUSE, p.to_string()),
        E::Port(p) => Error::cm(libc::EADDRNOTAVAIL, p.to_string()),
        E::NotJoined(a) => Error::cm(
            libc::EADDRNOTAVAIL,
            format!("rdma_leave_multicast: {a} not joined"),
        ),
        e => Error::cm(libc::EINVAL, e.to_string()),
    }
}

/// Runs an endpoint call on a locked state and flushes; the call's
/// error as an errno, or the first QP change that failed.
pub(crate) fn call<T>(
    g: &mut Guard,
    f: impl FnOnce(&mut rdma::Endpoint) -> std::result::Result<T, rdma::EndpointError>,
) -> Result<T> {
    let r = f(g.ep());
    let fl = flush(g);
    let v = r.map_err(errno)?;
    match fl.qp_error {
        Some(e) => Err(e),
        None => Ok(v),
    }
}

/// A new handle for an id (a request's id when the program takes it).
pub(crate) fn new_user(g: &mut Guard, num: u64) -> Option<std::sync::Arc<IdUser>> {
    let side = g.st().ids.get_mut(&num)?;
    let u = std::sync::Arc::new(IdUser {
        num,
        acks: side.acks.clone(),
        destroyed: std::sync::atomic::AtomicBool::new(false),
    });
    side.user = std::sync::Arc::downgrade(&u);
    Some(u)
}

#[cfg(test)]
mod tests {
    /// A device's CM without room for a listener fails `rdma_listen` with
    /// ENOMEM, as an allocation failure of Linux's CM id does.
    #[test]
    fn a_full_cm_table_is_enomem() {
        let e = super::errno(super::rdma::EndpointError::Cm(
            softrdma_cm::CmError::TooManyIds,
        ));
        assert_eq!(e.errno(), libc::ENOMEM, "{e}");
    }
}
