//! Delivery of a queued rdma_cm event (`rdma_get_cm_event`): the C
//! library's read-back of the id's public fields, then librdmacm's part
//! (the REP of an id with a QP moves the QP and sends the RTU, a REJ
//! moves it to ERR, a connection request gets its id's handle).

use super::channel::{ChanInner, Queued};
use super::driver::{call, errno, new_user as new_user_of, now};
use super::id::CmId;
use super::qp::{apply, modify_err};
use super::state::lock;
use super::{CmEvent, EventType};
use crate::error::Result;
use std::sync::Arc;

/// The C library's reader of an id's public fields (see
/// [`set_read_back`]).
static READ_BACK: std::sync::RwLock<Option<fn(u64)>> = std::sync::RwLock::new(None);

/// Installs `f`, called with an id's [`CmId::num`] before an event of
/// that id is processed (the REP of an id with a QP moves the QP, a REJ
/// moves it to ERR): the C library reads back what the program set in
/// `struct rdma_cm_id` (its `qp`) there, as librdmacm reads the structure
/// while it processes the event. It runs with no lock of rdma_cm held.
pub fn set_read_back(f: fn(u64)) {
    *READ_BACK.write().unwrap_or_else(|e| e.into_inner()) = Some(f);
}

/// Turns a queued event into the program's event (`rdma_get_cm_event`),
/// or `None` when its id is gone. Runs librdmacm's part: the REP of an id
/// with a QP moves the QP to RTR and RTS and sends the RTU (ESTABLISHED),
/// or moves it to ERR (CONNECT_ERROR); a REJ moves the QP to ERR.
pub(crate) fn deliver(chan: &Arc<ChanInner>, mut q: Queued) -> Option<CmEvent> {
    // What the program set in the id's public fields counts from here.
    if let Some(read_back) = *READ_BACK.read().unwrap_or_else(|e| e.into_inner()) {
        read_back(q.num);
    }
    let mut g = lock();
    let num = q.num;
    let s = g.st().ids.get_mut(&num)?;
    if !Arc::ptr_eq(&s.chan, chan) {
        // Migrated after it was queued here: it belongs to the new channel.
        let c = s.chan.clone();
        c.push(q);
        return None;
    }
    let user = s.user.upgrade()?;
    let acks = s.acks.clone();
    let dev = s.dev.clone();
    let qp = g.ep().id(num).and_then(|e| e.qp).map(|q| q.0);
    g.defer_drop(user.clone());
    if let Some(d) = &dev {
        g.defer_drop(d.clone());
    }
    let mut new_user = None;
    match q.event {
        EventType::ConnectRequest => {
            let child = q.new_id?;
            // The listener's backlog has room again.
            g.ep().claim(child);
            new_user = Some(new_user_of(&mut g, child)?);
        }
        EventType::ConnectResponse => {
            if let (Some(qpn), Some(dev)) = (qp, &dev) {
                // ucma_process_conn_resp.
                let r = (|| -> Result<()> {
                    let changes = g.ep().rep_changes(num).map_err(errno)?;
                    for c in changes {
                        apply(dev, qpn, &c)?;
                    }
                    call(&mut g, |ep| ep.establish(num, now()))
                })();
                match r {
                    Ok(()) => q.event = EventType::Established,
                    Err(err) => {
                        modify_err(dev, qpn);
                        q.event = EventType::ConnectError;
                        q.status = -err.errno();
                        if let Some(s) = g.st().ids.get_mut(&num) {
                            s.connect_error = true;
                        }
                    }
                }
            }
        }
        // librdmacm's ucma_process_join: the id's QP attaches.
        EventType::MulticastJoin => super::mcast::on_join(&mut g, num, &mut q),
        EventType::Rejected | EventType::Disconnected => {
            if g.st().ids.get(&num)?.connect_error {
                return None;
            }
            if q.event == EventType::Rejected {
                if let (Some(qpn), Some(dev)) = (qp, &dev) {
                    modify_err(dev, qpn);
                }
            }
        }
        _ => {}
    }
    acks.report();
    // A multicast event counts for its join too (the join's events are
    // what `rdma_leave_multicast` waits for).
    let mc_acks = q.mc.and_then(|(a, c)| {
        let s = g.st().ids.get(&num)?;
        let m = s.mc_acks.iter().find(|m| m.0 == a && m.1 == c)?;
        Some(m.2.clone())
    });
    if let Some(m) = &mc_acks {
        m.report();
    }
    let (id, listen_id) = match new_user {
        Some(u) => (CmId(u), Some(CmId(user))),
        None => (CmId(user), None),
    };
    tracing::debug!(target: "softrdma::rdma_cm", "softrdma cm: id {num} delivers {} status {}",
            q.event.as_str(),
            q.status);
    let ev = CmEvent {
        event: q.event,
        status: q.status,
        id,
        listen_id,
        conn: q.conn,
        ud: q.ud,
        mc: q.mc,
        acks,
        mc_acks,
    };
    drop(g);
    Some(ev)
}
