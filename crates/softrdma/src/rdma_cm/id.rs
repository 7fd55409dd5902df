//! rdma_cm ids: the handle ([`CmId`]), creation, options, migration and
//! destruction. The other calls on an id live beside it, one file per
//! phase of its life:
//!
//! - `addr.rs`: the address side: ports of the four port spaces,
//!   `rdma_bind_addr`, `rdma_resolve_addr`, `rdma_resolve_route`,
//!   `rdma_listen`;
//! - `conn.rs`: the connection side: `rdma_connect`, `rdma_accept`,
//!   `rdma_reject`, `rdma_establish`, `rdma_notify`, `rdma_disconnect`;
//! - `qp.rs`: the id's QP: CM attributes as verbs attributes,
//!   `rdma_init_qp_attr`, attaching, using and detaching a QP;
//! - `deliver.rs`: a queued event turned into the program's event
//!   (`rdma_get_cm_event`), with librdmacm's part of it.
//!
//! Each call follows Linux's rdma_cm (core/cma.c) for the state it needs
//! and what it sends, and librdmacm (librdmacm/cma.c) for what it does to
//! the id's QP; the function names in the comments are theirs.

use super::driver::{call, flush, now, transport};
use super::state::{lock, Guard, IdSide, St};
use super::{Acks, EventChannel};
use crate::error::{Error, Result};
use crate::Device;
use softrdma_cm::rdma::Options;
use softrdma_cm::{Path, PortSpace};
use softrdma_proto::QpType;
use softrdma_wire::Psn;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The program's handle of an id: the last one to go destroys the id
/// (without waiting for acknowledgements), unless `destroy` did.
pub(crate) struct IdUser {
    pub num: u64,
    pub(super) acks: Arc<Acks>,
    pub(super) destroyed: AtomicBool,
}

impl Drop for IdUser {
    fn drop(&mut self) {
        if !self.destroyed.swap(true, Ordering::SeqCst) {
            let _ = destroy_num(self.num);
        }
    }
}

impl std::fmt::Debug for IdUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CmId({})", self.num)
    }
}

/// An rdma_cm id (`struct rdma_cm_id`). Clones are handles of one id; the
/// id is destroyed by [`CmId::destroy`] or when its last handle goes (a
/// [`CmEvent`] holds handles of its ids).
#[derive(Clone, Debug)]
pub struct CmId(pub(crate) Arc<IdUser>);

impl PartialEq for CmId {
    fn eq(&self, o: &CmId) -> bool {
        self.0.num == o.0.num
    }
}
impl Eq for CmId {}

/// What an id knows about its addresses (what librdmacm copies into
/// `id->verbs`, `id->route`, `id->port_num`).
#[derive(Clone, Debug)]
pub struct AddrInfo {
    /// The device (once bound to an address or resolved).
    pub device: Option<Device>,
    /// Local address and port (the IP unspecified for a wildcard).
    pub src: Option<SocketAddr>,
    /// The peer's address and port.
    pub dst: Option<SocketAddr>,
    /// The route (after `resolve_route`, or a request's path back).
    pub path: Option<Path>,
}

pub(super) fn einval(what: &str) -> Error {
    Error::cm(libc::EINVAL, what.to_string())
}

fn random_psn() -> Psn {
    let mut b = [0u8; 4];
    let _ = getrandom::fill(&mut b);
    Psn::new(u32::from_le_bytes(b))
}

/// The driver's side of an id.
pub(super) fn side(g: &mut Guard, num: u64) -> Result<&mut IdSide> {
    g.st()
        .ids
        .get_mut(&num)
        .ok_or_else(|| einval("no such rdma_cm id"))
}

/// The endpoint's id.
pub(super) fn ep_id(g: &mut Guard, num: u64) -> Result<softrdma_cm::rdma::Id> {
    g.ep()
        .id(num)
        .cloned()
        .ok_or_else(|| einval("no such rdma_cm id"))
}

/// The id's device handle (kept in the guard's trash).
pub(super) fn dev_of(g: &mut Guard, num: u64) -> Result<Option<Device>> {
    let d = side(g, num)?.dev.clone();
    if let Some(d) = &d {
        g.defer_drop(d.clone());
    }
    Ok(d)
}

impl CmId {
    /// `rdma_create_id`: a new id reporting to `channel`. The port space
    /// gives the QP type librdmacm gives it (UDP and IPoIB: UD; TCP and
    /// IB: RC) unless `qp_type` says otherwise.
    pub fn new(channel: &EventChannel, ps: PortSpace, qp_type: Option<QpType>) -> Result<CmId> {
        let qp_type = qp_type.unwrap_or(match softrdma_cm::rdma::Transport::of_port_space(ps) {
            softrdma_cm::rdma::Transport::Ud => QpType::Ud,
            _ => QpType::Rc,
        });
        super::state::cleanup_at_exit();
        crate::fork::watch();
        let mut g = lock();
        let num = g.ep().create_id(ps, transport(qp_type), random_psn());
        let s = IdSide::new(channel.0.clone(), qp_type);
        let acks = s.acks.clone();
        g.st().ids.insert(num, s);
        let user = Arc::new(IdUser {
            num,
            acks,
            destroyed: AtomicBool::new(false),
        });
        side(&mut g, num)?.user = Arc::downgrade(&user);
        Ok(CmId(user))
    }

    /// A number naming the id in this process.
    pub fn num(&self) -> u64 {
        self.0.num
    }

    /// Port space and QP type.
    pub fn kind(&self) -> Result<(PortSpace, QpType)> {
        let mut g = lock();
        let ps = ep_id(&mut g, self.0.num)?.ps;
        Ok((ps, side(&mut g, self.0.num)?.qp_type))
    }

    /// The id's addresses, device and route.
    pub fn addr_info(&self) -> Result<AddrInfo> {
        let mut g = lock();
        let e = ep_id(&mut g, self.0.num)?;
        let info = AddrInfo {
            device: dev_of(&mut g, self.0.num)?,
            src: e.src,
            dst: e.dst,
            path: e.path,
        };
        g.defer_drop(info.clone());
        Ok(info)
    }

    /// The device (after bind or resolve).
    pub fn device(&self) -> Option<Device> {
        self.addr_info().ok().and_then(|i| i.device)
    }

    /// Changes the id's options.
    fn options(&self, f: impl FnOnce(&mut Options)) -> Result<()> {
        let mut g = lock();
        let num = self.0.num;
        let mut o = ep_id(&mut g, num)?.opts;
        f(&mut o);
        call(&mut g, |ep| ep.set_options(num, o))
    }

    /// `RDMA_OPTION_ID_TOS`: the traffic class of the route (before
    /// `resolve_route`).
    pub fn set_tos(&self, tos: u8) -> Result<()> {
        self.options(|o| o.tos = Some(tos))
    }

    /// `RDMA_OPTION_ID_ACK_TIMEOUT`: the QP's transport timeout (and the
    /// path's packet life time, timeout − 1).
    pub fn set_ack_timeout(&self, timeout: u8) -> Result<()> {
        self.options(|o| o.ack_timeout = Some(timeout.min(31)))
    }

    /// `rdma_set_min_rnr_timer`.
    pub fn set_min_rnr_timer(&self, t: u8) -> Result<()> {
        self.options(|o| o.min_rnr_timer = Some(t.min(31)))
    }

    /// `RDMA_OPTION_ID_REUSEADDR` (before bind, or while bound).
    pub fn set_reuseaddr(&self, on: bool) -> Result<()> {
        self.options(|o| o.reuseaddr = on)
    }

    /// `RDMA_OPTION_ID_AFONLY` (before bind).
    pub fn set_afonly(&self, on: bool) -> Result<()> {
        let mut g = lock();
        if ep_id(&mut g, self.0.num)?.st != St::Idle {
            return Err(einval("AFONLY after bind"));
        }
        side(&mut g, self.0.num)?.afonly = Some(on);
        Ok(())
    }

    /// `rdma_set_option(RDMA_OPTION_IB, RDMA_OPTION_IB_PATH)`: the route
    /// given instead of resolved (the kernel's `ucma_set_ib_path` and
    /// `rdma_set_ib_path`): only once the address is resolved, the path
    /// taken as given; queues ROUTE_RESOLVED as `rdma_resolve_route` does.
    pub fn set_ib_path(&self, path: Path) -> Result<()> {
        let mut g = lock();
        let num = self.0.num;
        call(&mut g, |ep| ep.set_path(num, path))
    }

    /// `rdma_migrate_id`: the id's events (queued ones too) go to
    /// `channel` from now on; waits until the events already reported on
    /// the old channel are acknowledged.
    pub fn migrate(&self, channel: &EventChannel) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        let s = side(&mut g, num)?;
        let old = std::mem::replace(&mut s.chan, channel.0.clone());
        if !Arc::ptr_eq(&old, &channel.0) {
            for q in old.take_of(num) {
                channel.0.push(q);
            }
        }
        drop(g);
        self.0.acks.wait();
        Ok(())
    }

    /// `rdma_destroy_id`: tells the peer what Linux tells it in the id's
    /// state (REJ, DREQ, DREP…), frees the port, destroys the ids of
    /// requests nobody took, then waits until every event reported for
    /// the id was acknowledged.
    pub fn destroy(&self) -> Result<()> {
        if self.0.destroyed.swap(true, Ordering::SeqCst) {
            return Err(einval("rdma_destroy_id: destroyed already"));
        }
        destroy_num(self.0.num)?;
        self.0.acks.wait();
        Ok(())
    }
}

/// At process exit: every id still alive is destroyed, as the kernel's
/// rdma_cm does when a process's rdma_cm descriptor closes (`ucma_close`):
/// the peer of a connection gets its DREQ (or the DREP it waits for), a
/// pending request its REJ. Programs rely on it (qperf's server never
/// destroys its connection's id).
pub(crate) fn destroy_all_at_exit() {
    // Another thread may hold the lock forever (blocked in a call, or
    // killed by exit itself): a few tries, then nothing.
    for _ in 0..50 {
        if let Some(mut g) = super::state::try_lock() {
            let nums: Vec<u64> = g.st().ids.keys().copied().collect();
            for n in nums {
                let _ = destroy_locked(&mut g, n);
            }
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// Destroys an id (and the untaken ids of a listener's requests).
fn destroy_num(num: u64) -> Result<()> {
    let mut g = lock();
    destroy_locked(&mut g, num)
}

/// The endpoint's `destroy` (in a forked child, the parent's devices send
/// nothing: no DREQ, no REJ, their listeners left alone), then the
/// driver's side of the id and of the ids that went with it: their queued
/// events go, with their counts (`ucma_cleanup_ctx_events`).
fn destroy_locked(g: &mut Guard, num: u64) -> Result<()> {
    let s = g
        .st()
        .ids
        .remove(&num)
        .ok_or_else(|| einval("no such rdma_cm id"))?;
    tracing::debug!(target: "softrdma::rdma_cm", "softrdma cm: destroy id {num} ({:?})",
            g.ep().id(num).map(|e| (e.st, e.cm)));
    drop(s.chan.take_of(num));
    let serials: Vec<u64> = g.ep().devices().collect();
    for serial in serials {
        if g.device(serial).is_some_and(|d| d.forked_away()) {
            g.ep().set_forked_away(serial);
        }
    }
    let _ = g.ep().destroy(num, now());
    // The ids of requests the listener never gave the program went too.
    let st = g.st();
    let gone: Vec<u64> = st
        .ids
        .keys()
        .copied()
        .filter(|&n| st.ep.id(n).is_none())
        .collect();
    for n in gone {
        if let Some(o) = g.st().ids.remove(&n) {
            drop(o.chan.take_of(n));
            g.defer_drop(o);
        }
    }
    g.defer_drop(s);
    let _ = flush(g);
    Ok(())
}
