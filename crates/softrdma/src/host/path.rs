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
/// How long the sender's asker waits for the destination's device
/// process (no lock is held meanwhile and the datagrams go through UDP:
/// only the path's start waits).
const OPEN_WAIT: Duration = Duration::from_secs(2);
/// Questions to device processes waiting for the asker at most (one per
/// (destination, QPN) at a time; past it a destination stays on UDP and
/// is looked at again later).
const MAX_ASKING: usize = 256;
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
    /// Into ring `i`, as long as its epoch is the one the owner's device
    /// process said (`Ring::epoch`: it moves on when a QP number of that
    /// member is freed, which may make it another member's).
    Ring(usize, u64),
    /// Through UDP until then.
    Udp(Instant),
    /// Through UDP while the asker finds out (as a NIC resolves a
    /// neighbour, but with a way that works meanwhile: the device
    /// process routes UDP by QPN).
    Asking,
}

/// A question for the asker thread: who owns `qpn` at `dst`, with a new
/// ring offered if `offer`.
#[derive(Debug)]
struct Question {
    dst: SocketAddr,
    qpn: u32,
    offer: bool,
}

/// The asker's answer: the ring it offered, and what the device process
/// said (`Err`: no device process of ours answers for `dst`; `Ok(None)`:
/// no member takes `qpn` through the path).
struct Answer {
    dst: SocketAddr,
    qpn: u32,
    /// The question offered a ring.
    offered: bool,
    ring: Option<Ring>,
    said: io::Result<Option<Said>>,
}

/// A `Path` answer: owner, what became of the ring, the owner's wake-up
/// eventfd and pidfd, the ring's epoch.
struct Said {
    member: u64,
    state: PathRing,
    wake: EventFd,
    owner: Option<PidFd>,
    epoch: u64,
}

/// The thread that asks device processes for ways, so that no sender
/// waits for one (it used to be asked inline, under the engine's `tx`
/// lock, up to 200 ms per new destination: every posting thread and the
/// progress thread of the device waited meanwhile).
#[derive(Debug)]
struct Asker {
    questions: std::sync::mpsc::Sender<Question>,
    answers: std::sync::mpsc::Receiver<Answer>,
}

impl Asker {
    fn start(sender: u64, ring_bytes: usize) -> io::Result<Asker> {
        let (qtx, qrx) = std::sync::mpsc::channel::<Question>();
        let (atx, arx) = std::sync::mpsc::channel::<Answer>();
        softrdma_io::with_signals_blocked(|| {
            std::thread::Builder::new()
                .name("softrdma-paths".into())
                .spawn(move || {
                    // Ends when the device's paths go (the sender drops).
                    while let Ok(q) = qrx.recv() {
                        let ring = match q
                            .offer
                            .then(|| Ring::create("softrdma-path", ring_bytes))
                            .transpose()
                        {
                            Ok(r) => r,
                            Err(e) => {
                                let a = Answer {
                                    dst: q.dst,
                                    qpn: q.qpn,
                                    offered: q.offer,
                                    ring: None,
                                    said: Err(e),
                                };
                                if atx.send(a).is_err() {
                                    return;
                                }
                                continue;
                            }
                        };
                        let said = ask(sender, q.dst, q.qpn, ring.as_ref());
                        let a = Answer {
                            dst: q.dst,
                            qpn: q.qpn,
                            offered: q.offer,
                            ring,
                            said,
                        };
                        if atx.send(a).is_err() {
                            return;
                        }
                    }
                })
        })?;
        Ok(Asker {
            questions: qtx,
            answers: arx,
        })
    }
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
    /// The last way to a ring looked up (destination, QPN, ring, epoch): a copy
    /// of its `ways` entry, so a stream of datagrams to one QP skips the
    /// hash (SipHash of the key was ~10 % of a sender's time at WRITE
    /// 1 MiB). Cleared whenever `ways` loses entries (`reap`).
    last: Option<(SocketAddr, u32, usize, u64)>,
    /// (destination device, its member) → ring.
    owners: HashMap<(SocketAddr, u64), usize>,
    /// Destinations with no device process here, until when.
    no_host: HashMap<SocketAddr, Instant>,
    /// Indexed by `Way::Ring`; `None`: let go of (reused by the next).
    rings: Vec<Option<OutRing>>,
    /// Rings opened so far.
    opened: u64,
    /// Asks device processes (started with the first question).
    asker: Option<Asker>,
    /// Questions out.
    asking: usize,
    /// Questions out that offer a ring, by destination: another question
    /// for that destination offers none meanwhile (the asker asks in
    /// order, so the device process has the ring by then and answers
    /// `Have`), or two rings would go to one member.
    offering: HashMap<SocketAddr, usize>,
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
            asker: None,
            asking: 0,
            offering: HashMap::new(),
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
            Way::Ring(i, _) => !gone.contains(&i),
            Way::Udp(until) => now < until,
            Way::Asking => true,
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
    /// `None`: UDP. Never waits: a destination not known yet goes through
    /// UDP while the asker thread asks its device process (the answer is
    /// taken here, at a later call).
    pub fn way(&mut self, dst: SocketAddr, head: &[u8], now: Instant) -> Option<usize> {
        let qpn = dest_qpn(head)?;
        if let Some((d, q, i, epoch)) = self.last {
            // (The ring's epoch too: a way is only as good as it.)
            if d == dst
                && q == qpn
                && self.rings[i]
                    .as_ref()
                    .is_some_and(|r| r.ring.epoch() == epoch)
            {
                return Some(i);
            }
        }
        // QP 0 and 1 (MADs: the device process routes them by message)
        // and multicast never take the path.
        if qpn <= 1 || dst.ip().is_multicast() || qpn == 0xff_ffff {
            return None;
        }
        if self.asking > 0 {
            self.take_answers(now);
        }
        match self.ways.get(&(dst, qpn)) {
            // (A ring let go of takes its ways with it. One whose epoch
            // moved: the owner's QP numbers changed hands since, ask
            // again.)
            Some(&Way::Ring(i, epoch))
                if self.rings[i]
                    .as_ref()
                    .is_some_and(|r| r.ring.epoch() == epoch) =>
            {
                self.last = Some((dst, qpn, i, epoch));
                return Some(i);
            }
            Some(Way::Udp(until)) if now < *until => return None,
            Some(Way::Asking) => return None,
            _ => {}
        }
        if self.no_host.get(&dst).is_some_and(|&t| now < t) {
            self.ways.insert((dst, qpn), Way::Udp(now + NO_PATH_TTL));
            return None;
        }
        // A ring goes with the first question when we write to no member
        // of `dst` yet (the usual case: one peer process per address);
        // otherwise only when the device process asks for one.
        let offer =
            !self.owners.keys().any(|(d, _)| *d == dst) && !self.offering.contains_key(&dst);
        let way = if self.ask_later(dst, qpn, offer) {
            Way::Asking
        } else {
            Way::Udp(now + NO_PATH_TTL)
        };
        self.ways.insert((dst, qpn), way);
        None
    }

    /// Asks for the way to QP `qpn` at `dst` ahead of its first datagram
    /// (a QP that learnt its peer), without waiting.
    pub fn prepare(&mut self, dst: SocketAddr, qpn: u32, now: Instant) {
        let mut h = [0u8; 12];
        h[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        let _ = self.way(dst, &h, now);
    }

    /// Hands a question to the asker: whether it took it.
    fn ask_later(&mut self, dst: SocketAddr, qpn: u32, offer: bool) -> bool {
        if self.asking >= MAX_ASKING {
            return false;
        }
        if self.asker.is_none() {
            match Asker::start(self.sender, self.ring_bytes) {
                Ok(a) => self.asker = Some(a),
                Err(_) => return false,
            }
        }
        let asker = self.asker.as_ref().expect("started");
        if asker.questions.send(Question { dst, qpn, offer }).is_err() {
            return false;
        }
        self.asking += 1;
        if offer {
            *self.offering.entry(dst).or_default() += 1;
        }
        true
    }

    /// Takes what the asker found out so far (the send path does at each
    /// datagram; counters read by a program that sends nothing do too).
    pub fn take_answers(&mut self, now: Instant) {
        while let Some(a) = self.asker.as_ref().and_then(|k| k.answers.try_recv().ok()) {
            self.asking -= 1;
            self.settle(a, now);
        }
    }

    /// Waits (up to `wait`) until the asker has answered every question
    /// and takes the answers (tests).
    #[cfg(test)]
    pub(crate) fn settle_all(&mut self, wait: Duration) {
        let deadline = Instant::now() + wait;
        while self.asking > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(a) = self
                .asker
                .as_ref()
                .and_then(|k| k.answers.recv_timeout(left).ok())
            else {
                return;
            };
            self.asking -= 1;
            self.settle(a, Instant::now());
        }
    }

    /// Acts on an answer: a way, a second question (with a ring), or UDP
    /// for a while.
    fn settle(&mut self, a: Answer, now: Instant) {
        if a.offered {
            if let Some(n) = self.offering.get_mut(&a.dst) {
                *n -= 1;
                if *n == 0 {
                    self.offering.remove(&a.dst);
                }
            }
        }
        // A ring offered and not kept (not taken, or a question that
        // failed) is closed before it is dropped: if the device process
        // did take it, its member lets go of it at once.
        let abandon = |ring: Option<Ring>| {
            if let Some(mut r) = ring {
                r.close();
            }
        };
        let key = (a.dst, a.qpn);
        let udp = Way::Udp(now + NO_PATH_TTL);
        let said = match a.said {
            Ok(Some(said)) => said,
            Ok(None) => {
                abandon(a.ring);
                self.ways.insert(key, udp);
                return;
            }
            Err(_) => {
                abandon(a.ring);
                self.no_host.insert(a.dst, now + NO_PATH_TTL);
                self.ways.insert(key, udp);
                return;
            }
        };
        let owner_key = (a.dst, said.member);
        let way = match (said.state, a.ring) {
            (PathRing::Have, ring) => {
                abandon(ring);
                match self.owners.get(&owner_key).copied() {
                    Some(i) => Way::Ring(i, said.epoch),
                    // The device process has a ring of ours we do not
                    // (an answer that came too late, or two questions
                    // that crossed): give another, which replaces it,
                    // rather than stay on UDP.
                    None if self.ask_later(a.dst, a.qpn, true) => Way::Asking,
                    None => udp,
                }
            }
            (PathRing::Taken, Some(ring)) => {
                let r = OutRing {
                    ring,
                    wake: said.wake,
                    owner: said.owner,
                    dirty: false,
                    head: 0,
                    moved: now,
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
                // anew, and two questions with rings for one member may
                // cross: the newest ring for a member wins, the one it
                // replaces is closed (its reader lets go of it) and its
                // ways are asked again.
                if let Some(old) = self.owners.insert(owner_key, i) {
                    if let Some(mut o) = self.rings[old].take() {
                        o.ring.close();
                    }
                    self.ways
                        .retain(|_, w| !matches!(*w, Way::Ring(j, _) if j == old));
                    self.last = None;
                }
                Way::Ring(i, said.epoch)
            }
            (PathRing::Need, None) if self.ask_later(a.dst, a.qpn, true) => Way::Asking,
            (_, ring) => {
                abandon(ring);
                udp
            }
        };
        self.ways.insert(key, way);
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

/// One `OpenPath` exchange (a connection of its own, on the asker
/// thread): what the owner of `qpn` at `dst` is and what became of
/// `ring`. `Ok(None)`: no member takes `qpn` through the path.
fn ask(sender: u64, dst: SocketAddr, qpn: u32, ring: Option<&Ring>) -> io::Result<Option<Said>> {
    let name = super::rendezvous_name(dst)?;
    let conn = SeqPacket::connect(&name)?;
    if conn.peer_cred()?.uid != softrdma_io::euid() {
        return Err(io::Error::from(io::ErrorKind::PermissionDenied));
    }
    let fds: Vec<_> = ring.iter().map(|r| r.fd()).collect();
    let deadline = Instant::now() + OPEN_WAIT;
    conn.send_until(&Request::OpenPath { sender, qpn }.encode(), &fds, deadline)?;
    let mut buf = vec![0u8; msg::MAX_MSG];
    let mut fds = Vec::new();
    let left = deadline.saturating_duration_since(Instant::now());
    let n = conn.recv_wait(&mut buf, &mut fds, left)?;
    let mut fds = fds.into_iter();
    match (Reply::decode(&buf[..n]), fds.next()) {
        (
            Ok(Reply::Path {
                member,
                ring,
                pidfd,
                epoch,
            }),
            Some(wake),
        ) => {
            let owner = if pidfd {
                fds.next().map(PidFd::from_fd)
            } else {
                None
            };
            Ok(Some(Said {
                member,
                state: ring,
                wake: EventFd::from_fd(wake),
                owner,
                epoch,
            }))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// A BTH for QP `qpn`.
    pub(crate) fn head(qpn: u32) -> [u8; 12] {
        let mut h = [0u8; 12];
        h[0] = 0x04;
        h[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        h
    }

    /// Issue 19: the first datagram to a destination asked its device
    /// process inline, waiting up to 200 ms for the answer under the
    /// engine's send lock (every posting thread and the progress thread
    /// of the device waited too). `way` now answers at once (UDP) and the
    /// asker thread waits; the answer, given here only after `way`
    /// returned, still reaches it (the inline wait had given up and
    /// closed its connection: the answer's send failed) and the next
    /// datagram takes the ring. Nothing is timed: the fake device process
    /// answers after `way` returned, however long that took.
    #[test]
    fn a_new_destination_never_waits_for_its_device_process() {
        let port = 20_000 + (std::process::id() % 40_000) as u16;
        let dst: SocketAddr = format!("127.23.1.1:{port}").parse().unwrap();
        let listener = SeqPacket::listen(&super::super::rendezvous_name(dst).unwrap()).unwrap();
        let mut paths = Paths::new("127.23.1.2:4791".parse().unwrap());
        const Q: u32 = 0x23_1001;
        assert_eq!(paths.way(dst, &head(Q), Instant::now()), None);
        // Asked once, whatever the caller does meanwhile.
        assert_eq!(paths.way(dst, &head(Q), Instant::now()), None);
        let deadline = Instant::now() + Duration::from_secs(60);
        let conn = loop {
            if let Some(c) = listener.accept().unwrap() {
                break c;
            }
            assert!(Instant::now() < deadline, "the asker never asked");
            std::thread::sleep(Duration::from_millis(1));
        };
        let mut buf = vec![0u8; msg::MAX_MSG];
        let mut fds = Vec::new();
        let n = conn
            .recv_wait(&mut buf, &mut fds, Duration::from_secs(60))
            .unwrap();
        assert!(matches!(
            Request::decode(&buf[..n]),
            Ok(Request::OpenPath { qpn: Q, .. })
        ));
        let ring = Ring::attach(fds.pop().expect("a ring offered")).unwrap();
        let wake = EventFd::new().unwrap();
        let said = Reply::Path {
            member: 1,
            ring: PathRing::Taken,
            pidfd: false,
            epoch: 0,
        };
        conn.send(&said.encode(), &[wake.as_fd()])
            .expect("the asker still waits for the answer");
        paths.settle_all(Duration::from_secs(60));
        let i = paths.way(dst, &head(Q), Instant::now()).expect("the ring");
        // The ring is the one offered.
        let h = head(Q);
        assert_eq!(
            paths.push(i, 0, 64, &[IoPiece::new(&h)], false, Instant::now()),
            Pushed::Ok
        );
        paths.publish();
        assert!(ring.has_data());
        // The listener took one question.
        assert!(listener.accept().unwrap().is_none());
    }
}
