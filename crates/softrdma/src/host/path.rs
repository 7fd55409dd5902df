//! The same-host path (issue 19 item 2): a member sends the datagrams for
//! a QP of another member on this host — of its own device or of another
//! address's, in this network namespace, of this user — straight into a
//! shared-memory ring that member reads, instead of through the kernel's
//! UDP and the device process.
//!
//! Finding the way: the destination's device process answers at the same
//! rendezvous as its members (`softrdma-device/UID/NETNS/IP/PORT`: an
//! address of another namespace or of another user, or one served by no
//! device process here — a remote host, rxe, a NIC — never answers, so
//! such peers stay on UDP). A path connection (`OpenPath`, the peer's uid
//! checked with `SO_PEERCRED` both ways) asks which member owns the
//! destination QPN and gets that member's wake-up eventfd; the first time
//! this sender reaches that member it creates a ring (single producer:
//! this device; single consumer: that member) and hands it over
//! (`GiveRing`); the device process offers it to the member through the
//! member's own ring (`TAG_OFFER`), which then takes it (`TakeRings`).
//!
//! What moves is the datagram itself, byte for byte what UDP would carry
//! (headers, payload, ICRC) behind the 24-byte source header the device
//! process's records have: the transport state machines, the captures,
//! the counters and the logs see the same packets. A full ring whose
//! reader reads holds the datagram back in the send queue, as a full
//! socket buffer does (a burst larger than the ring is not lost); a full
//! ring whose reader has not moved for `STALL` — a member stopped, dead
//! (nobody empties its ring), or starved — loses it, which the transport
//! recovers from (or gives up on) as from any loss. Wake-ups are
//! batched: a run of datagrams is published at once and the member's
//! eventfd written only when it sleeps.
//!
//! `SOFTRDMA_SAME_HOST=udp` (or `same_host = udp` in the config file)
//! turns the path off: the sender never looks for one, and the member
//! tells its device process, which then answers `OpenPath` for its QPs
//! with `ENOENT`.

use super::daemon::{rec_header, TAG_DATAGRAM};
use super::msg::{self, Reply, Request};
use softrdma_io::{EventFd, IoPiece, Ring, SeqPacket};
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Bytes of the data area of a path ring (one per sender and receiving
/// member): a 1 MiB message in 4 KiB packets with room to spare. Pages
/// are only touched as the ring is used.
pub const PATH_RING: usize = 4 << 20;
/// The environment variable that sets the data area of the rings a
/// device opens, in bytes (tests: a small ring fills; rounded up to a
/// power of two of at least 4 KiB).
pub const RING_ENV: &str = "SOFTRDMA_PATH_RING";
/// How long the sender waits for the destination's device process.
const OPEN_WAIT: Duration = Duration::from_millis(200);
/// A full ring whose reader moved within this time holds the datagram
/// back (as a full socket does: it waits in the send queue); one whose
/// reader has not — stopped, dead, starved — loses it.
const STALL: Duration = Duration::from_millis(5);
/// How long a destination without a path (no device process here, or a
/// QP no member of it owns) stays on UDP before the sender looks again.
const NO_PATH_TTL: Duration = Duration::from_secs(1);

/// Where a (destination, QPN) goes.
#[derive(Clone, Copy, Debug)]
enum Way {
    /// Into ring `i`.
    Ring(usize),
    /// Through UDP until then.
    Udp(Instant),
}

/// A ring this device writes into.
#[derive(Debug)]
struct OutRing {
    ring: Ring,
    /// The receiving member's wake-up eventfd.
    wake: EventFd,
    /// Records pushed and not yet published.
    dirty: bool,
    /// The reader's position when last seen, and when it last moved.
    head: u64,
    moved: Instant,
}

/// What became of a datagram pushed into a ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// In the ring.
    Ok,
    /// Full, and its reader is reading: try again soon (the datagram
    /// stays queued).
    Wait,
    /// Full, and its reader stopped: lost.
    Lost,
}

/// Counters of the same-host path of one device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SameHostCounters {
    /// Datagrams this device wrote into other members' rings.
    pub sent: u64,
    /// Datagrams it could not write (the ring was full): lost.
    pub refused: u64,
    /// Datagrams it read from rings other members wrote.
    pub received: u64,
    /// Paths (rings) it opened to other members.
    pub paths: u64,
}

/// A device's ways to other members (used under the engine's `tx` lock).
#[derive(Debug)]
pub(crate) struct Paths {
    /// Our token towards device processes (random).
    sender: u64,
    /// Data area of the rings we open.
    ring_bytes: usize,
    /// This device's address: the source of what it sends.
    local: SocketAddr,
    ways: HashMap<(SocketAddr, u32), Way>,
    /// (destination device, its member) → ring.
    owners: HashMap<(SocketAddr, u64), usize>,
    /// Destinations with no device process here, until when.
    no_host: HashMap<SocketAddr, Instant>,
    rings: Vec<OutRing>,
    pub sent: u64,
    pub refused: u64,
}

/// The 24-bit destination QP in a datagram's BTH (`None`: too short).
fn dest_qpn(head: &[u8]) -> Option<u32> {
    super::route::dest_qpn(head)
}

impl Paths {
    pub fn new(local: SocketAddr) -> Paths {
        let mut b = [0u8; 8];
        let _ = getrandom::fill(&mut b);
        Paths {
            sender: u64::from_le_bytes(b) | 1,
            ring_bytes: std::env::var(RING_ENV)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(PATH_RING),
            local,
            ways: HashMap::new(),
            owners: HashMap::new(),
            no_host: HashMap::new(),
            rings: Vec::new(),
            sent: 0,
            refused: 0,
        }
    }

    /// Paths opened.
    pub fn paths(&self) -> u64 {
        self.rings.len() as u64
    }

    /// The ring for a datagram to `dst` starting with `head` (its BTH), or
    /// `None`: UDP. Opens the path the first time (a round trip to the
    /// destination's device process).
    pub fn way(&mut self, dst: SocketAddr, head: &[u8], now: Instant) -> Option<usize> {
        let qpn = dest_qpn(head)?;
        // QP 0 and 1 (MADs: the device process routes them by message)
        // and multicast never take the path.
        if qpn <= 1 || dst.ip().is_multicast() || qpn == 0xff_ffff {
            return None;
        }
        match self.ways.get(&(dst, qpn)) {
            Some(Way::Ring(i)) => return Some(*i),
            Some(Way::Udp(until)) if now < *until => return None,
            _ => {}
        }
        let way = match self.open(dst, qpn, now) {
            Some(i) => Way::Ring(i),
            None => Way::Udp(now + NO_PATH_TTL),
        };
        self.ways.insert((dst, qpn), way);
        match way {
            Way::Ring(i) => Some(i),
            Way::Udp(_) => None,
        }
    }

    fn open(&mut self, dst: SocketAddr, qpn: u32, now: Instant) -> Option<usize> {
        if self.no_host.get(&dst).is_some_and(|&t| now < t) {
            return None;
        }
        match self.open_path(dst, qpn) {
            Ok(r) => r,
            Err(_) => {
                self.no_host.insert(dst, now + NO_PATH_TTL);
                None
            }
        }
    }

    /// `Err`: no device process of ours answers for `dst`; `Ok(None)`:
    /// it does, but no member of it takes `qpn` through the path.
    fn open_path(&mut self, dst: SocketAddr, qpn: u32) -> io::Result<Option<usize>> {
        let name = super::rendezvous_name(dst)?;
        let conn = SeqPacket::connect(&name)?;
        if conn.peer_cred()?.uid != softrdma_io::euid() {
            return Err(io::Error::from(io::ErrorKind::PermissionDenied));
        }
        let sender = self.sender;
        conn.send(&Request::OpenPath { sender, qpn }.encode(), &[])?;
        let mut buf = vec![0u8; msg::MAX_MSG];
        let mut fds = Vec::new();
        let n = conn.recv_wait(&mut buf, &mut fds, OPEN_WAIT)?;
        let (member, need_ring, wake) = match (Reply::decode(&buf[..n]), fds.pop()) {
            (Ok(Reply::Path { member, need_ring }), Some(wake)) => {
                (member, need_ring, EventFd::from_fd(wake))
            }
            _ => return Ok(None),
        };
        let key = (dst, member);
        if !need_ring {
            return Ok(self.owners.get(&key).copied());
        }
        let ring = Ring::create("softrdma-path", self.ring_bytes)?;
        conn.send(&Request::GiveRing { sender, member }.encode(), &[ring.fd()])?;
        let n = conn.recv_wait(&mut buf, &mut fds, OPEN_WAIT)?;
        if Reply::decode(&buf[..n]) != Ok(Reply::Ok) {
            return Ok(None);
        }
        let i = self.rings.len();
        self.rings.push(OutRing {
            ring,
            wake,
            dirty: false,
            head: 0,
            moved: Instant::now(),
        });
        // A device process that restarted numbers its members anew: the
        // newest ring for a member number wins.
        self.owners.insert(key, i);
        Ok(Some(i))
    }

    /// Writes a datagram (`pieces`: headers, payload, trailer) into ring
    /// `i`, unpublished.
    pub fn push(
        &mut self,
        i: usize,
        tos: u8,
        ttl: u8,
        pieces: &[IoPiece<'_>],
        now: Instant,
    ) -> Pushed {
        let h = rec_header(self.local, tos, ttl);
        let r = &mut self.rings[i];
        if r.ring.push_pieces_unpublished(TAG_DATAGRAM, &h, pieces) {
            r.dirty = true;
            self.sent += 1;
            return Pushed::Ok;
        }
        let head = r.ring.consumed();
        if head != r.head {
            r.head = head;
            r.moved = now;
        }
        if now.saturating_duration_since(r.moved) < STALL {
            return Pushed::Wait;
        }
        self.refused += 1;
        Pushed::Lost
    }

    /// Publishes what was pushed; wakes the members that sleep.
    pub fn publish(&mut self) {
        for r in self.rings.iter_mut().filter(|r| r.dirty) {
            r.dirty = false;
            if r.ring.publish() {
                r.wake.signal();
            }
        }
    }
}
