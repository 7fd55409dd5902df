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
//! destination QPN and gets that member's wake-up eventfd and pidfd; the
//! first time this sender reaches that member it hands over a ring
//! (single producer: this device; single consumer: that member) with the
//! request — one message each way, the device process never waits for a
//! sender — and the device process offers it to the member by raising
//! the flag beside the member's own ring (a full ring loses no offer),
//! which then takes it (`TakeRings`) with the sender's pidfd.
//!
//! Rings do not outlive their peers: each end lets go of a ring when the
//! other end closes it (`Ring::close`, at an orderly device close) or its
//! process exits (the pidfd, which a forked child holding copies of the
//! descriptors does not keep alive), looked at every [`REAP_EVERY`] from
//! the send path and before the progress thread sleeps. A sender's ways
//! to a freed ring are forgotten: its next datagram for that QP asks
//! again, and a QP that no member owns any more goes to UDP, where it is
//! lost — the transport retries and completes in error, as over a
//! network.
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

use super::daemon::{rec_header, REC_ICRC_LEFT, TAG_DATAGRAM};
use super::msg::{self, PathRing, Reply, Request};
use softrdma_io::{EventFd, IoPiece, PidFd, Ring, SeqPacket};
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
/// How often the ends of the path look for rings whose peer is gone.
pub(crate) const REAP_EVERY: Duration = Duration::from_millis(100);

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
    /// The receiving member's process (`None`: not visible).
    owner: Option<PidFd>,
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
    /// Rings it writes into now (opened and not yet let go of: their
    /// reader closed them or died).
    pub rings_out: u64,
    /// Rings other members write into for it now.
    pub rings_in: u64,
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
    /// The last way to a ring looked up (destination, QPN, ring): a copy
    /// of its `ways` entry, so a stream of datagrams to one QP skips the
    /// hash (SipHash of the key was ~10 % of a sender's time at WRITE
    /// 1 MiB). Cleared whenever `ways` loses entries (`reap`).
    last: Option<(SocketAddr, u32, usize)>,
    /// (destination device, its member) → ring.
    owners: HashMap<(SocketAddr, u64), usize>,
    /// Destinations with no device process here, until when.
    no_host: HashMap<SocketAddr, Instant>,
    /// Indexed by `Way::Ring`; `None`: let go of (reused by the next).
    rings: Vec<Option<OutRing>>,
    /// Rings opened so far.
    opened: u64,
    /// When the rings' readers were last looked at.
    last_reap: Instant,
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
            last: None,
            owners: HashMap::new(),
            no_host: HashMap::new(),
            rings: Vec::new(),
            opened: 0,
            last_reap: Instant::now(),
            sent: 0,
            refused: 0,
        }
    }

    /// Paths opened.
    pub fn paths(&self) -> u64 {
        self.opened
    }

    /// Rings written into now.
    pub fn rings_out(&self) -> u64 {
        self.rings.iter().flatten().count() as u64
    }

    /// Every [`REAP_EVERY`]: lets go of the rings whose reader closed them
    /// or whose process exited, and forgets the ways to them and the
    /// expired ways to UDP.
    pub fn reap(&mut self, now: Instant) {
        if now.saturating_duration_since(self.last_reap) < REAP_EVERY {
            return;
        }
        self.last_reap = now;
        let mut gone = Vec::new();
        for (i, slot) in self.rings.iter_mut().enumerate() {
            let dead = slot.as_ref().is_some_and(|r| {
                r.ring.peer_closed() || r.owner.as_ref().is_some_and(PidFd::exited)
            });
            if dead {
                // Unmapped here; the reader's end (if alive) is its own.
                *slot = None;
                gone.push(i);
            }
        }
        self.last = None;
        self.ways.retain(|_, w| match *w {
            Way::Ring(i) => !gone.contains(&i),
            Way::Udp(until) => now < until,
        });
        self.owners.retain(|_, i| !gone.contains(i));
        self.no_host.retain(|_, until| now < *until);
    }

    /// The device closes: tells the readers of its rings (they let go of
    /// them at once, and wake to do so).
    pub fn close(&mut self) {
        for r in self.rings.iter_mut().flatten() {
            if r.ring.close() {
                r.wake.signal();
            }
        }
    }

    /// The ring for a datagram to `dst` starting with `head` (its BTH), or
    /// `None`: UDP. Opens the path the first time (a round trip to the
    /// destination's device process).
    pub fn way(&mut self, dst: SocketAddr, head: &[u8], now: Instant) -> Option<usize> {
        let qpn = dest_qpn(head)?;
        if let Some((d, q, i)) = self.last {
            if d == dst && q == qpn {
                return Some(i);
            }
        }
        // QP 0 and 1 (MADs: the device process routes them by message)
        // and multicast never take the path.
        if qpn <= 1 || dst.ip().is_multicast() || qpn == 0xff_ffff {
            return None;
        }
        match self.ways.get(&(dst, qpn)) {
            Some(Way::Ring(i)) => {
                self.last = Some((dst, qpn, *i));
                return Some(*i);
            }
            Some(Way::Udp(until)) if now < *until => return None,
            _ => {}
        }
        let way = match self.open(dst, qpn, now) {
            Some(i) => Way::Ring(i),
            None => Way::Udp(now + NO_PATH_TTL),
        };
        self.ways.insert((dst, qpn), way);
        match way {
            Way::Ring(i) => {
                self.last = Some((dst, qpn, i));
                Some(i)
            }
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
        // A ring goes with the first request when we write to no member
        // of `dst` yet (the usual case: one peer process per address);
        // otherwise only when the device process asks for one.
        // A ring offered and not kept (no answer in time, or not taken)
        // is closed before it is dropped: if the device process did take
        // it, its member lets go of it at once.
        let abandon = |ring: Option<Ring>| {
            if let Some(mut r) = ring {
                r.close();
            }
        };
        let mut offer = !self.owners.keys().any(|(d, _)| *d == dst);
        for _ in 0..2 {
            let ring = offer
                .then(|| Ring::create("softrdma-path", self.ring_bytes))
                .transpose()?;
            let (member, state, wake, owner) = match self.ask(dst, qpn, ring.as_ref()) {
                Ok(Some(a)) => a,
                Ok(None) => {
                    abandon(ring);
                    return Ok(None);
                }
                Err(e) => {
                    abandon(ring);
                    return Err(e);
                }
            };
            let key = (dst, member);
            match (state, ring) {
                (PathRing::Have, ring) => {
                    abandon(ring);
                    match self.owners.get(&key) {
                        Some(&i) => return Ok(Some(i)),
                        // The device process has a ring of ours we do not
                        // (an answer that came too late): give another,
                        // which replaces it, rather than stay on UDP.
                        None => offer = true,
                    }
                }
                (PathRing::Taken, Some(ring)) => {
                    let r = OutRing {
                        ring,
                        wake,
                        owner,
                        dirty: false,
                        head: 0,
                        moved: Instant::now(),
                    };
                    let i = match self.rings.iter().position(Option::is_none) {
                        Some(i) => {
                            self.rings[i] = Some(r);
                            i
                        }
                        None => {
                            self.rings.push(Some(r));
                            self.rings.len() - 1
                        }
                    };
                    self.opened += 1;
                    // A device process that restarted numbers its members
                    // anew: the newest ring for a member number wins.
                    self.owners.insert(key, i);
                    return Ok(Some(i));
                }
                (PathRing::Need, None) => offer = true,
                (_, ring) => {
                    abandon(ring);
                    return Ok(None);
                }
            }
        }
        Ok(None)
    }

    /// One `OpenPath` exchange (a connection of its own): the owner of
    /// `qpn`, what became of `ring`, the owner's wake-up eventfd and
    /// pidfd. `Ok(None)`: no member takes `qpn` through the path.
    #[allow(clippy::type_complexity)]
    fn ask(
        &self,
        dst: SocketAddr,
        qpn: u32,
        ring: Option<&Ring>,
    ) -> io::Result<Option<(u64, PathRing, EventFd, Option<PidFd>)>> {
        let name = super::rendezvous_name(dst)?;
        let conn = SeqPacket::connect(&name)?;
        if conn.peer_cred()?.uid != softrdma_io::euid() {
            return Err(io::Error::from(io::ErrorKind::PermissionDenied));
        }
        let sender = self.sender;
        let fds: Vec<_> = ring.iter().map(|r| r.fd()).collect();
        conn.send(&Request::OpenPath { sender, qpn }.encode(), &fds)?;
        let mut buf = vec![0u8; msg::MAX_MSG];
        let mut fds = Vec::new();
        let n = conn.recv_wait(&mut buf, &mut fds, OPEN_WAIT)?;
        let mut fds = fds.into_iter();
        match (Reply::decode(&buf[..n]), fds.next()) {
            (
                Ok(Reply::Path {
                    member,
                    ring,
                    pidfd,
                }),
                Some(wake),
            ) => {
                let owner = if pidfd {
                    fds.next().map(PidFd::from_fd)
                } else {
                    None
                };
                Ok(Some((member, ring, EventFd::from_fd(wake), owner)))
            }
            _ => Ok(None),
        }
    }

    /// Writes a datagram (`pieces`: headers, payload, trailer) into ring
    /// `i`, unpublished.
    pub fn push(
        &mut self,
        i: usize,
        tos: u8,
        ttl: u8,
        pieces: &[IoPiece<'_>],
        icrc_left: bool,
        now: Instant,
    ) -> Pushed {
        let mut h = rec_header(self.local, tos, ttl);
        if icrc_left {
            h[3] |= REC_ICRC_LEFT;
        }
        let Some(r) = self.rings[i].as_mut() else {
            // (Never: ways to a ring let go of are forgotten with it.)
            self.refused += 1;
            return Pushed::Lost;
        };
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
        for r in self.rings.iter_mut().flatten().filter(|r| r.dirty) {
            r.dirty = false;
            if r.ring.publish() {
                r.wake.signal();
            }
        }
    }
}
