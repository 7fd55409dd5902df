//! The CM driver: one `softrdma_cm::Cm` per device, fed by the engine
//! (MADs received on QP 1, timers) and by rdma_cm calls, its MADs sent as
//! UD SENDs from QP 1, its events turned into rdma_cm events on the
//! channels (what Linux's `cma_ib_handler` / `cma_ib_req_handler` do).

use super::channel::Queued;
use super::state::{lock, Guard, IdEntry, St};
use super::{EventType, UdParam};
use crate::engine::Shared;
use softrdma_cm::negotiate::conn_param_from_req;
use softrdma_cm::rdma::{self, request_sid, Admission, DeviceCm, Refused};
use softrdma_cm::{CmConfig, Event, Instant, ServiceId};
use softrdma_proto::QpType;
use softrdma_wire::cm::CMA_HDR_LEN;
use std::net::{IpAddr, SocketAddr};

/// A device's CM and what rdma_cm keeps beside it (the layer's sans-I/O
/// part, `softrdma_cm::rdma`).
pub(crate) type DevState = DeviceCm;

/// Logs requests the device's CM refused for their source's half-open
/// limit (reported at most once a second).
fn log_refused(ip: IpAddr, r: Option<Refused>) {
    if let Some(r) = r {
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
}

/// The CM's clock: the engine's.
pub(crate) fn now(shared: &Shared) -> Instant {
    Instant(shared.now().0)
}

/// The device's CM, made on first use.
pub(crate) fn dev_state<'a>(g: &'a mut Guard, shared: &Shared) -> &'a mut DevState {
    let serial = shared.serial;
    let st = g.st();
    st.devs.entry(serial).or_insert_with(|| {
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
        DeviceCm::new(CmConfig::new(guid, k), ip)
    })
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
    receive_mads(&mut g, shared, &mads);
    pump(&mut g, shared);
}

/// Hands received MADs to the device's CM (no pump).
fn receive_mads(g: &mut Guard, shared: &Shared, mads: &[softrdma_proto::GsiMad]) {
    let t = now(shared);
    let serial = shared.serial;
    dev_state(g, shared);
    for m in mads {
        // A request for a port a wildcard listener took before this device
        // opened: the device listens on it now (`cma_listen_on_dev` when
        // a device is added).
        if let Some(sid) = request_sid(&m.mad) {
            cm_listen(g, serial, sid);
        }
        let ds = dev_state(g, shared);
        tracing::debug!(target: "softrdma::rdma_cm", "softrdma cm {}: <- {} {}",
                ds.ip,
                m.src,
                softrdma_wire::pretty::mad_line(&m.mad));
        let r = ds.receive(t, m.src, m.src_qpn, &m.mad);
        log_refused(ds.ip, r);
    }
}

/// The CM's deadline passed (called by the progress thread).
pub(crate) fn on_timer(shared: &Shared) {
    let mut g = lock();
    let t = now(shared);
    if let Some(ds) = g.st().devs.get_mut(&shared.serial) {
        ds.handle_timeout(t);
    }
    pump(&mut g, shared);
}

/// The device is gone: drop its CM (called when the engine's state is
/// dropped, never under this module's lock).
pub(crate) fn forget_device(serial: u64) {
    let mut g = lock();
    if let Some(ds) = g.st().devs.remove(&serial) {
        g.defer_drop(ds);
    }
}

/// Runs the device's CM until it has nothing more to say: its events
/// become rdma_cm events, its MADs go out, its deadline is published.
pub(crate) fn pump(g: &mut Guard, shared: &Shared) {
    let serial = shared.serial;
    // Bounded: each round takes one event; handling one may produce more
    // (a reject of a bad request), never more than one per event.
    for _ in 0..100_000 {
        let Some(ds) = g.st().devs.get_mut(&serial) else {
            return;
        };
        let Some(ev) = ds.cm.poll_event() else {
            break;
        };
        tracing::debug!(target: "softrdma::rdma_cm", "softrdma cm {}: event {ev:?}", ds.ip);
        handle_event(g, shared, ev);
    }
    let Some(ds) = g.st().devs.get_mut(&serial) else {
        return;
    };
    let mut out = Vec::new();
    while let Some(t) = ds.cm.poll_transmit() {
        tracing::debug!(target: "softrdma::rdma_cm", "softrdma cm {}: -> {} {}",
                ds.ip,
                t.dst,
                softrdma_wire::pretty::mad_line(&t.mad));
        out.push((t.dst, t.dst_qpn, t.mad));
    }
    let deadline = ds.deadline().map(|t| softrdma_proto::Instant(t.0));
    shared.send_mads(&out);
    shared.set_cm_deadline(deadline);
}

/// The rdma_cm id of a CM id of this device.
fn id_of(g: &mut Guard, serial: u64, cm_id: softrdma_cm::CmId) -> Option<u64> {
    g.st().devs.get(&serial)?.id_of(cm_id)
}

fn push(g: &mut Guard, num: u64, q: Queued) {
    if let Some(e) = g.st().ids.get(&num) {
        e.chan.push(q);
    }
}

fn handle_event(g: &mut Guard, shared: &Shared, ev: Event) {
    let serial = shared.serial;
    match ev {
        Event::ConnectRequest(cr) => connect_request(g, shared, *cr),
        Event::SidrRequest(sr) => sidr_request(g, shared, *sr),
        ev => {
            let Some(num) = id_of(g, serial, ev.id()) else {
                return;
            };
            let Some(e) = g.st().ids.get_mut(&num) else {
                return;
            };
            let Some(r) = rdma::report(&mut e.st, e.path.as_ref(), &ev) else {
                return;
            };
            if r.remote_ud.is_some() {
                e.remote_ud = r.remote_ud;
            }
            let mut q = Queued::new(num, r.event, r.status);
            q.conn = r.conn;
            q.ud = r.ud;
            e.chan.push(q);
        }
    }
}

/// Whether id `e` listens and covers the device `serial` for `sid`.
fn covers(e: &IdEntry, serial: u64, sid: ServiceId) -> bool {
    e.listen.as_ref().is_some_and(|l| l.covers(serial, sid))
}

/// Makes the device listen on `sid` (one CM listener, shared) if an
/// rdma_cm listener covers it. Returns whether it listens.
pub(crate) fn cm_listen(g: &mut Guard, serial: u64, sid: ServiceId) -> bool {
    let st = g.st();
    let Some(ds) = st.devs.get(&serial) else {
        return false;
    };
    if ds.listens(sid) {
        return true;
    }
    if !st.ids.values().any(|e| covers(e, serial, sid)) {
        return false;
    }
    let Some(dev) = g.device(serial) else {
        return false;
    };
    // A device shared with other processes: connection requests for the
    // service come to this one (the device process routes them).
    if let Some(h) = &dev.shared().host {
        if let Err(e) = h.listen(sid.0) {
            tracing::debug!(target: "softrdma::rdma_cm", "softrdma cm: listen on {sid:?}: another process of the device listens (errno {e})");
            return false;
        }
    }
    let st = g.st();
    let ds = st.devs.get_mut(&serial).expect("checked");
    match ds.listen(now(dev.shared()), sid) {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!(target: "softrdma::rdma_cm", "softrdma cm {}: listen on {sid:?}: {e}", ds.ip);
            false
        }
    }
}

/// Stops the device's CM listener of `sid` once no rdma_cm listener
/// covers the device any more.
pub(crate) fn cm_unlisten(g: &mut Guard, serial: u64, sid: ServiceId, t: Instant) {
    let st = g.st();
    if st.ids.values().any(|e| covers(e, serial, sid)) {
        return;
    }
    if let Some(ds) = st.devs.get_mut(&serial) {
        if ds.unlisten(t, sid) {
            if let Some(h) =
                crate::device::Device::by_serial(serial).and_then(|d| d.shared().host.clone())
            {
                h.unlisten(sid.0);
            }
        }
    }
}

/// The rdma_cm listener a request for `sid` that reached device `serial`
/// for address `dst` belongs to (`softrdma_cm::rdma::find`).
fn find_listener(g: &mut Guard, serial: u64, sid: ServiceId, dst: IpAddr) -> Option<u64> {
    let ls = g
        .st()
        .ids
        .iter()
        .filter_map(|(&n, e)| Some((n, e.listen.as_ref()?)));
    rdma::find(ls, serial, sid, dst)
}

/// A request the listener it belongs to takes: the listener, the device
/// and what the new id inherits from the listener.
struct Admitted {
    lnum: u64,
    dev: crate::Device,
    chan: std::sync::Arc<super::channel::ChanInner>,
    ps: softrdma_cm::PortSpace,
    opts: super::state::Opts,
    lport: u16,
    qp_type: QpType,
    cma: softrdma_wire::cm::CmaHdrRepr,
}

/// The checks of a REQ or SIDR_REQ (`cma_ib_req_handler`): its rdma_cm
/// header, the listener of its destination, its transport and that
/// listener's backlog (`Listener::admit`). A full backlog drops the
/// request (no answer: the requester retries); any other failure rejects
/// it (the CM's destroy of an unanswered request sends REJ 28 or SIDR_REP
/// "reject", as Linux's handler error makes `cm_destroy_id` do).
fn admit(
    g: &mut Guard,
    shared: &Shared,
    id: softrdma_cm::CmId,
    sid: ServiceId,
    cma: Option<softrdma_wire::cm::CmaHdrRepr>,
    transport: Option<rdma::Transport>,
) -> Option<Admitted> {
    let serial = shared.serial;
    let t = now(shared);
    let found = (|| {
        let cma = cma?;
        let lnum = find_listener(g, serial, sid, cma.dst)?;
        let transport = transport?;
        let dev = g.device(serial)?;
        let l = g.st().ids.get_mut(&lnum)?;
        let verdict = l.listen.as_mut()?.admit(transport);
        let a = Admitted {
            lnum,
            dev,
            chan: l.chan.clone(),
            ps: l.ps,
            opts: l.opts,
            lport: l.src.map_or(0, |s| s.port()),
            qp_type: l.qp_type,
            cma,
        };
        Some((verdict, a))
    })();
    let ds = g.st().devs.get_mut(&serial)?;
    match found {
        Some((Admission::Take, a)) => return Some(a),
        Some((Admission::Drop, _)) => {
            let _ = ds.cm.drop_request(id);
        }
        Some((Admission::Reject, _)) | None => {
            let _ = ds.cm.destroy(t, id);
        }
    }
    None
}

/// A REQ for one of our listeners (`cma_ib_req_handler`): checks the
/// rdma_cm header, the bound address and the QP type (else REJ 28), the
/// backlog (else no answer: the requester retries), then a new id and a
/// CONNECT_REQUEST on the listener's channel.
fn connect_request(g: &mut Guard, shared: &Shared, cr: softrdma_cm::ConnectRequest) {
    let serial = shared.serial;
    let req = cr.req();
    let transport = rdma::Transport::of_req(req.transport_service_type);
    let Some(Admitted {
        lnum,
        dev,
        chan,
        ps,
        opts,
        lport,
        qp_type,
        cma,
    }) = admit(g, shared, cr.id, req.service_id, cr.cma, transport)
    else {
        return;
    };
    let ds = g.st().devs.get_mut(&serial).expect("the device's CM");
    let info = ds.cm.info(cr.id);
    let seq = ds.cm.random_psn();
    let mut e = IdEntry::new(chan, ps, qp_type, seq);
    e.st = St::Connect;
    e.dev = Some(dev);
    e.src = Some(SocketAddr::new(cma.dst, lport));
    e.dst = Some(SocketAddr::new(cma.src, cma.src_port));
    e.path = info.map(|i| i.path);
    e.cm = Some(cr.id);
    e.listener = Some(lnum);
    e.opts.tos = opts.tos;
    let conn = conn_param_from_req(&req);
    e.resp_res = conn.responder_resources;
    e.init_depth = conn.initiator_depth;
    let num = g.st().insert(e);
    let ds = g.st().devs.get_mut(&serial).expect("the device's CM");
    ds.bind(cr.id, num);
    let mut q = Queued::new(lnum, EventType::ConnectRequest, 0);
    q.new_id = Some(num);
    q.conn = conn.into();
    push(g, lnum, q);
}

/// A SIDR_REQ for one of our listeners: the same checks for a UD listener,
/// a new id, a CONNECT_REQUEST with the UD parameters.
fn sidr_request(g: &mut Guard, shared: &Shared, sr: softrdma_cm::SidrRequest) {
    let serial = shared.serial;
    let ud = Some(rdma::Transport::Ud);
    let Some(Admitted {
        lnum,
        dev,
        chan,
        ps,
        lport,
        cma,
        ..
    }) = admit(g, shared, sr.id, sr.service_id, sr.cma, ud)
    else {
        return;
    };
    let ds = g.st().devs.get_mut(&serial).expect("the device's CM");
    let seq = ds.cm.random_psn();
    let local = ds.ip;
    let mut e = IdEntry::new(chan, ps, QpType::Ud, seq);
    e.st = St::Connect;
    e.dev = Some(dev);
    e.src = Some(SocketAddr::new(cma.dst, lport));
    e.dst = Some(SocketAddr::new(cma.src, cma.src_port));
    e.path = Some(softrdma_cm::negotiate::rdma_cm_path(
        local,
        cma.src,
        lport,
        cma.src_port,
        5,
        0,
        64,
    ));
    e.cm = Some(sr.id);
    e.listener = Some(lnum);
    let num = g.st().insert(e);
    let ds = g.st().devs.get_mut(&serial).expect("the device's CM");
    ds.bind(sr.id, num);
    let mut q = Queued::new(lnum, EventType::ConnectRequest, 0);
    q.new_id = Some(num);
    q.ud = Some(UdParam {
        private_data: sr.private_data.get(CMA_HDR_LEN..).unwrap_or(&[]).to_vec(),
        ..Default::default()
    });
    push(g, lnum, q);
}

/// The transport of an id's listener.
pub(crate) fn transport(t: QpType) -> rdma::Transport {
    match t {
        QpType::Rc => rdma::Transport::Rc,
        QpType::Uc => rdma::Transport::Uc,
        QpType::Ud => rdma::Transport::Ud,
        QpType::XrcSend | QpType::XrcRecv => rdma::Transport::Xrc,
    }
}

pub(crate) use softrdma_cm::rdma::service_id;
