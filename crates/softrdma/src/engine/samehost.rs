//! The engine's side of the same-host path (`crate::host::path`): the
//! datagrams at the front of the send queue whose destination QP belongs
//! to another member of a device on this host go into that member's ring
//! instead of the socket, in order, then the rest through UDP as before.
//! Everything else — capture, counters, the release of registered memory
//! — happens to them as to datagrams the socket took.

use super::{Pending, Shared, TxQueue};
use crate::host::path::Pushed;
use softrdma_io::IoPiece;

/// Whether this process lets the same-host path carry its packets
/// (`SOFTRDMA_SAME_HOST`, the config file's `same_host =`).
pub(crate) fn same_host_enabled() -> bool {
    crate::config::global().map_or(true, |c| c.same_host.value)
}

/// Datagrams looked at ahead for the length of a UDP run.
const LOOKAHEAD: usize = 1024;

/// What the front of the send queue is.
pub(super) enum Lead {
    /// That many datagrams went into rings (or were lost to full ones).
    Ring(usize),
    /// The first one's ring is full and its reader busy: wait, as for a
    /// full socket.
    Full,
    /// Up to that many go through UDP.
    Udp(usize),
}

/// The first bytes of a datagram (its BTH) as queued.
fn head(d: &Pending) -> &[u8] {
    match &d.gather {
        Some(g) => &d.buf[..g.header_len],
        None => &d.buf[..d.len],
    }
}

impl Shared {
    /// A connected QP learnt its peer (RTR): the same-host path's way to
    /// it is asked for now (the asker thread asks the peer's device
    /// process), so that the answer is likely there by its first
    /// datagrams. Never waits: a QP reaches RTR at once, and until the
    /// answer comes its datagrams go through UDP (the device socket,
    /// always correct). Waiting here (1 s at most, as host19 did) held a
    /// rank's 15 RTR transitions for seconds under load while its peers
    /// spent their RC retry budget on first WRs sent to a QP not in RTR
    /// yet (MPICH 8+8 in CI; test `shared_device`
    /// `modify_qp_to_rtr_never_waits_for_a_stopped_device_process`).
    pub(crate) fn ask_way(&self, dst: std::net::SocketAddr, qpn: softrdma_wire::Qpn) {
        if let Some(p) = self.host.as_ref().and_then(|h| h.paths.as_ref()) {
            p.lock()
                .prepare(dst, qpn.value(), std::time::Instant::now());
        }
    }

    /// Sends the leading run of datagrams that have a same-host path
    /// through it, or says how long the run without one is.
    pub(super) fn same_host_lead(&self, tx: &TxQueue) -> Lead {
        let Some(paths) = self.host.as_ref().and_then(|h| h.paths.as_ref()) else {
            return Lead::Udp(usize::MAX);
        };
        let mut paths = paths.lock();
        let now = std::time::Instant::now();
        // Rings whose reader is gone are let go of (every REAP_EVERY).
        paths.reap(now);
        let mut pieces: Vec<IoPiece<'_>> = Vec::with_capacity(4);
        let mut n = 0;
        for d in tx.pending.iter() {
            let Some(ring) = paths.way(d.dst, head(d), now) else {
                break;
            };
            pieces.clear();
            d.pieces(&mut pieces);
            // A full ring whose reader stopped: the datagram is lost, as
            // on a network; one whose reader reads: it waits its turn.
            let icrc_left = d.gather.as_ref().is_some_and(|g| g.icrc_left.is_some());
            if paths.push(ring, d.tos, d.ttl, &pieces, icrc_left, now) == Pushed::Wait {
                if n == 0 {
                    paths.publish();
                    return Lead::Full;
                }
                break;
            }
            n += 1;
        }
        if n > 0 {
            paths.publish();
            return Lead::Ring(n);
        }
        let udp = tx
            .pending
            .iter()
            .take(LOOKAHEAD)
            .take_while(|d| paths.way(d.dst, head(d), now).is_none())
            .count();
        Lead::Udp(udp.max(1))
    }
}
