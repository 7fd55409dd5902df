//! A program's end of a shared device: joins the device process (starting
//! it if there is none), claims QP numbers and listeners, sends QP 1
//! traffic through it, and reads its datagrams from the ring.

use super::daemon::{
    parse_rec_header, rec_icrc_left, EXIT_BIND, EXIT_RUNNING, EXIT_TAKEN, REC_HDR, TAG_DATAGRAM,
};
use super::msg::{self, MemberInfo, Reply, Request};
use crate::sync::Mutex;
use softrdma_io::{EventFd, PidFd, RecvMeta as IoMeta, Ring, SeqPacket, UdpSocket};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a request waits for the device process's answer (a loaded
/// machine may not run the device process for a second or more; one that
/// is stopped or stuck makes the request fail after this, as a device
/// removed under a verb does, never hang).
const REPLY_WAIT: Duration = Duration::from_secs(5);
/// Messages without an answer that wait for room in the device process's
/// queue (`SendGsi`: MADs) at most; past it the oldest new MADs are
/// dropped — lost, which the CM retransmits — so a stuck device process
/// cannot make a member grow without bound. Other messages (`FreeQpn`,
/// `Unlisten`, `RingGone`) are never dropped: one per verb the program
/// called.
const MAX_QUEUED_MADS: usize = 1024;
/// Requests whose answer never came in time that are remembered, so that
/// a late `Ok` to a claim is undone.
const MAX_ABANDONED: usize = 64;

/// The sending side of `ctl`: request numbers and the messages waiting for
/// room in the device process's queue, in order. Held only for
/// non-blocking sends, never across a wait.
#[derive(Default)]
struct CtlTx {
    /// The last request number used.
    seq: u32,
    /// Messages (framed) the device process's queue had no room for yet,
    /// and whether each is a MAD.
    outbox: VecDeque<(Vec<u8>, bool)>,
    /// MADs in `outbox`.
    mads: usize,
    /// MADs dropped because `outbox` held [`MAX_QUEUED_MADS`].
    mads_dropped: u64,
    /// The device process is gone (a send failed other than for room).
    gone: bool,
}

impl CtlTx {
    /// The next request number (never `NO_ANSWER`).
    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        if self.seq == msg::NO_ANSWER {
            self.seq = 1;
        }
        self.seq
    }

    /// Sends what waits, without waiting: whether the outbox is empty.
    fn flush(&mut self, conn: &SeqPacket) -> io::Result<bool> {
        if self.gone {
            return Err(io::Error::from(io::ErrorKind::BrokenPipe));
        }
        while let Some((m, mad)) = self.outbox.front() {
            match conn.try_send(m, &[]) {
                Ok(()) => {
                    if *mad {
                        self.mads -= 1;
                    }
                    self.outbox.pop_front();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // The device process is gone: nothing will take these.
                    self.gone = true;
                    self.outbox.clear();
                    self.mads = 0;
                    return Err(e);
                }
            }
        }
        Ok(true)
    }
}
/// An answer read by another than its asker: its number, the answer, its
/// descriptors, the request given up on (if remembered).
type Answer = (u32, Reply, Vec<OwnedFd>, Option<Request>);

/// How long joining retries (a device process leaving as we arrive, one
/// starting).
const JOIN_WAIT: Duration = Duration::from_secs(5);

/// A member's link to its device process.
pub(crate) struct Member {
    /// The control connection (requests, answers, notices).
    conn: SeqPacket,
    /// Its sending side.
    ctl_tx: Mutex<CtlTx>,
    /// Taken by the one request waiting for its answer (requests are
    /// answered in order), with the requests given up on.
    ctl_rx: Mutex<Vec<(u32, Request)>>,
    /// Messages wait in `ctl_tx`'s outbox (the progress thread sends them).
    outbox_waiting: AtomicBool,
    /// How long a request waits for its answer ([`REPLY_WAIT`]).
    reply_wait: Duration,
    ring: Mutex<Ring>,
    /// The device process writes it when it fills the ring while we sleep.
    wake: EventFd,
    /// The device process's pid (as this process sees it).
    pub host_pid: i32,
    /// Rings of the same-host path: other processes' devices (or this
    /// one's) write our datagrams there, one ring per sender.
    inbound: Mutex<Inbound>,
    /// The device process said senders gave us rings.
    offered: AtomicBool,
    /// The number of the `TakeRings` whose answer has not been read yet
    /// (0: none).
    rings_asked: AtomicU32,
    /// Datagrams received through the same-host path.
    pub path_received: AtomicU64,
    /// We take part in the same-host path.
    pub same_host: bool,
    /// The counters were traced.
    traced: AtomicBool,
    /// The process's fork generation when it joined: a forked child's
    /// copy closes nothing of its parent's.
    generation: u64,
    /// Our ways to other members (the sending side of the path; taken
    /// under the engine's `tx` lock only). `None`: the path is off.
    pub(crate) paths: Option<Mutex<super::path::Paths>>,
    /// Receiving for the device process while it is late (`None`: a
    /// device process that gave no page).
    pub(crate) deputy: Option<super::deputy::Deputy>,
}

/// A ring of the same-host path that a sender writes into for us.
struct InRing {
    ring: Ring,
    /// The sender's token (told to the device process when we let go).
    sender: u64,
    /// The sender's process (`None`: not visible from the device
    /// process).
    producer: Option<PidFd>,
    /// Its producer closed it or died: read what it published, then let
    /// go of it.
    dying: bool,
}

/// The inbound rings, and when they were last looked at.
struct Inbound {
    rings: Vec<InRing>,
    last_reap: Instant,
    /// Receives since the clock was last read for that.
    calls: u32,
}

/// Receives between two looks at the clock for [`Inbound::reap`] (a
/// progress thread that sleeps looks before each sleep).
const REAP_CALLS: u32 = 1024;

impl Inbound {
    /// Every `REAP_EVERY`: marks the rings whose producer closed them or
    /// exited, and lets go of those that are empty. Returns their senders.
    fn reap(&mut self, now: Instant) -> Vec<u64> {
        if now.saturating_duration_since(self.last_reap) < super::path::REAP_EVERY {
            return Vec::new();
        }
        self.last_reap = now;
        let mut gone = Vec::new();
        self.rings.retain_mut(|r| {
            if !r.dying {
                r.dying = r.ring.peer_closed() || r.producer.as_ref().is_some_and(PidFd::exited);
            }
            if r.ring.is_broken() {
                // Garbage in the ring (a producer that broke the
                // protocol): it reads as empty for good, so let go of it
                // and say so — the sender lets go of its end too and
                // offers a new ring with its next datagram; what the
                // garbage cost was lost, as on a network.
                r.ring.close();
                gone.push(r.sender);
                return false;
            }
            if r.dying && !r.ring.has_data() {
                gone.push(r.sender);
                return false;
            }
            true
        });
        // (A sender that replaced its ring still writes into the new one.)
        gone.retain(|s| !self.rings.iter().any(|r| r.sender == *s));
        gone
    }
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("host_pid", &self.host_pid)
            .finish_non_exhaustive()
    }
}

/// Why joining did not happen.
#[derive(Debug)]
pub(crate) enum NoJoin {
    /// No device process can run here (no binary, sharing off, or the
    /// address is held by something else): bind exclusively, which says
    /// what holds it.
    Exclusive,
}

impl Member {
    /// Joins the shared device at `addr`, starting its device process if
    /// needed. Returns the device's socket (a duplicate) and the link.
    pub fn join(
        addr: SocketAddr,
        opts: &crate::DeviceOptions,
    ) -> Result<(UdpSocket, Member), NoJoin> {
        if !super::sharing_enabled() {
            return Err(NoJoin::Exclusive);
        }
        let name = super::rendezvous_name(addr).map_err(|_| NoJoin::Exclusive)?;
        let deadline = Instant::now() + JOIN_WAIT;
        let mut started = false;
        loop {
            match SeqPacket::connect(&name) {
                Ok(conn) => match Self::hello(conn, crate::engine::same_host_enabled()) {
                    Ok(j) => return Ok(j),
                    // The device process left as we came: start again.
                    Err(_) if Instant::now() < deadline => {}
                    Err(_) => return Err(NoJoin::Exclusive),
                },
                Err(_) if !started || Instant::now() < deadline => {
                    let Some(bin) = super::daemon_binary() else {
                        return Err(NoJoin::Exclusive);
                    };
                    started = true;
                    let args: Vec<OsString> = vec![
                        super::SUBCOMMAND.into(),
                        "--addr".into(),
                        addr.ip().to_string().into(),
                        "--port".into(),
                        addr.port().to_string().into(),
                        "--recv-buffer".into(),
                        opts.recv_buffer.to_string().into(),
                        "--send-buffer".into(),
                        opts.send_buffer.to_string().into(),
                    ];
                    match softrdma_io::spawn_detached(&bin, &args, &[]) {
                        Ok(EXIT_RUNNING | EXIT_TAKEN) => {}
                        Ok(EXIT_BIND) | Ok(_) | Err(_) => return Err(NoJoin::Exclusive),
                    }
                }
                Err(_) => return Err(NoJoin::Exclusive),
            }
            if Instant::now() >= deadline {
                return Err(NoJoin::Exclusive);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn hello(conn: SeqPacket, same_host: bool) -> io::Result<(UdpSocket, Member)> {
        let cred = conn.peer_cred()?;
        if cred.uid != softrdma_io::euid() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the device process is another user's",
            ));
        }
        let wake = EventFd::new()?;
        let comm = std::fs::read_to_string("/proc/self/comm")
            .map(|s| s.trim_end().to_string())
            .unwrap_or_default();
        conn.send(
            &Request::Hello {
                version: msg::VERSION,
                same_host,
                mtu: 0,
                comm,
            }
            .encode(),
            &[wake_fd(&wake)],
        )?;
        let mut buf = vec![0u8; msg::MAX_MSG];
        let mut fds = Vec::new();
        let n = conn.recv_wait(&mut buf, &mut fds, REPLY_WAIT)?;
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
        match Reply::decode(&buf[..n]) {
            Ok(Reply::Welcome { host_pid, .. }) if (2..=3).contains(&fds.len()) => {
                let mut fds = fds.into_iter();
                let sock_fd = fds.next().expect("2");
                let ring_fd = fds.next().expect("2");
                // (The deputy page: see `deputy`.)
                let deputy = fds
                    .next()
                    .and_then(|fd| super::deputy::Page::attach(fd).ok())
                    .map(super::deputy::Deputy::new);
                let socket = UdpSocket::from_fd(sock_fd)?;
                let local = socket.local_addr();
                let ring = Ring::attach(ring_fd)?;
                Ok((
                    socket,
                    Member {
                        conn,
                        ctl_tx: Mutex::new(CtlTx::default()),
                        ctl_rx: Mutex::new(Vec::new()),
                        outbox_waiting: AtomicBool::new(false),
                        reply_wait: REPLY_WAIT,
                        ring: Mutex::new(ring),
                        wake,
                        host_pid,
                        inbound: Mutex::new(Inbound {
                            rings: Vec::new(),
                            last_reap: Instant::now(),
                            calls: 0,
                        }),
                        offered: AtomicBool::new(false),
                        rings_asked: AtomicU32::new(0),
                        path_received: AtomicU64::new(0),
                        same_host,
                        traced: AtomicBool::new(false),
                        generation: softrdma_io::fork_generation(),
                        paths: same_host.then(|| Mutex::new(super::path::Paths::new(local))),
                        deputy,
                    },
                ))
            }
            Ok(Reply::WrongVersion(v)) => Err(bad(&format!(
                "the device process speaks version {v}, this library {}",
                msg::VERSION
            ))),
            _ => Err(bad("unexpected answer from the device process")),
        }
    }

    /// Sends a request and waits for its answer (at most `reply_wait`
    /// in all, the wait for room in the device process's queue included).
    /// No lock the engine or the verbs hold is taken meanwhile, nor the
    /// sending side of `ctl` (notices from other threads go on).
    fn request(&self, req: &Request) -> io::Result<Reply> {
        let asked = Instant::now();
        let deadline = asked + self.reply_wait;
        let mut abandoned = self.ctl_rx.lock();
        let mut late = Vec::new();
        let r = self.exchange(req, deadline, &mut abandoned, &mut late);
        drop(abandoned);
        // Answers to others that must not be lost: rings given to us,
        // claims to undo (after the lock: they take other locks, send
        // notices).
        for (seq, reply, fds, asked_for) in late {
            self.other_answer(seq, reply, fds, asked_for);
        }
        let took = asked.elapsed();
        if r.is_err() || took > super::daemon::TRACE_LATE {
            super::daemon::trace(&format!(
                "member pid {}: the device process answered {req:?} after {took:?} ({})",
                std::process::id(),
                if r.is_err() { "no answer" } else { "late" }
            ));
        }
        r.map(|(reply, _)| reply)
    }

    /// Queues `req` behind the notices before it, sends them and it,
    /// and reads answers until the one with its number (earlier ones are
    /// answers to requests given up on, or to a `TakeRings`: into
    /// `late`).
    fn exchange(
        &self,
        req: &Request,
        deadline: Instant,
        abandoned: &mut Vec<(u32, Request)>,
        late: &mut Vec<Answer>,
    ) -> io::Result<(Reply, Vec<OwnedFd>)> {
        let seq = {
            let mut tx = self.ctl_tx.lock();
            let seq = tx.next_seq();
            tx.outbox.push_back((msg::frame(seq, &req.encode()), false));
            seq
        };
        let timed_out = || {
            io::Error::new(
                io::ErrorKind::TimedOut,
                "the device process does not answer",
            )
        };
        // Sent once the queue has room: waited for without the lock.
        loop {
            let empty = self.ctl_tx.lock().flush(&self.conn)?;
            if empty {
                break;
            }
            self.outbox_waiting.store(true, Ordering::SeqCst);
            if !self.conn.wait_writable(deadline)? {
                // (Still queued: it goes later, and its answer is
                // recognised as late.)
                remember(abandoned, seq, req);
                return Err(timed_out());
            }
        }
        let mut buf = vec![0u8; msg::MAX_MSG];
        loop {
            let mut fds = Vec::new();
            let left = deadline.saturating_duration_since(Instant::now());
            let n = match self.conn.recv_wait(&mut buf, &mut fds, left) {
                Ok(0) if fds.is_empty() => {
                    return Err(io::Error::from(io::ErrorKind::ConnectionAborted))
                }
                Ok(n) => n,
                Err(e) => {
                    if e.kind() == io::ErrorKind::TimedOut {
                        remember(abandoned, seq, req);
                    }
                    return Err(e);
                }
            };
            let bad = || io::Error::from(io::ErrorKind::InvalidData);
            let (got, body) = msg::unframe(&buf[..n]).map_err(|_| bad())?;
            let reply = Reply::decode(body).map_err(|_| bad())?;
            if got == seq {
                return Ok((reply, fds));
            }
            // The answer to a request given up on: not ours.
            let asked_for = abandoned
                .iter()
                .position(|(s, _)| *s == got)
                .map(|i| abandoned.swap_remove(i).1);
            late.push((got, reply, fds, asked_for));
        }
    }

    /// An answer read by another than its asker: the rings of a `TakeRings`
    /// (asked without waiting, [`Self::ask_rings`]), or a late one.
    fn other_answer(&self, seq: u32, reply: Reply, fds: Vec<OwnedFd>, asked_for: Option<Request>) {
        match reply {
            Reply::Rings(gifts) if seq == self.rings_asked.load(Ordering::SeqCst) => {
                // The device process gives MAX_GIFTS at a time: ask again
                // while it gives that many.
                if gifts.len() >= msg::MAX_GIFTS {
                    self.offered.store(true, Ordering::SeqCst);
                }
                self.adopt_rings(&gifts, fds);
                self.rings_asked.store(0, Ordering::SeqCst);
            }
            reply => self.late_answer(reply, fds, asked_for),
        }
    }

    /// An answer that came after its request gave up: rings are taken as
    /// if in time (the device process gave them away), a claim that was
    /// granted is given back (the core drew another number). A late
    /// `Listen` grant is kept: the program may have asked again for the
    /// same service meanwhile, and an `Unlisten` would take that away; a
    /// listener the driver does not know answers requests with a REJ.
    /// Requests are numbered after the handshake.
    fn late_answer(&self, reply: Reply, fds: Vec<OwnedFd>, asked_for: Option<Request>) {
        super::daemon::trace(&format!(
            "member pid {}: a late answer {reply:?} to {asked_for:?} set aside",
            std::process::id()
        ));
        match (reply, asked_for) {
            (Reply::Rings(gifts), _) => self.adopt_rings(&gifts, fds),
            (Reply::Ok, Some(Request::ClaimQpn(q))) => self.notify(&Request::FreeQpn(q)),
            _ => {}
        }
    }

    /// Sends a message that has no answer, without waiting: queued when
    /// the device process's queue is full (sent by the next request, the
    /// next notice or the progress thread). Never blocks the caller, who
    /// may hold the engine's locks (`send_mads`) or the core's.
    fn notify(&self, req: &Request) {
        let mad = matches!(req, Request::SendGsi { .. });
        let mut tx = self.ctl_tx.lock();
        if tx.gone {
            return;
        }
        if mad && tx.mads >= MAX_QUEUED_MADS {
            tx.mads_dropped += 1;
            return;
        }
        tx.outbox
            .push_back((msg::frame(msg::NO_ANSWER, &req.encode()), mad));
        if mad {
            tx.mads += 1;
        }
        if let Ok(false) = tx.flush(&self.conn) {
            self.outbox_waiting.store(true, Ordering::SeqCst);
        }
    }

    /// Sends the notices that waited for room (the progress thread, now
    /// and then; never waits, never blocks on a request in progress).
    pub fn flush_notices(&self) {
        if !self.outbox_waiting.load(Ordering::Relaxed) {
            return;
        }
        if let Some(mut tx) = self.ctl_tx.try_lock() {
            if !matches!(tx.flush(&self.conn), Ok(false)) {
                self.outbox_waiting.store(false, Ordering::SeqCst);
            }
        }
    }

    /// MADs dropped because the device process did not take them.
    #[cfg(test)]
    fn mads_dropped(&self) -> u64 {
        self.ctl_tx.lock().mads_dropped
    }

    /// Claims (`true`) or gives back a QP number; whether the claim holds.
    pub fn claim_qpn(&self, qpn: u32, claim: bool) -> bool {
        let held = if claim {
            matches!(self.request(&Request::ClaimQpn(qpn)), Ok(Reply::Ok))
        } else {
            self.notify(&Request::FreeQpn(qpn));
            true
        };
        if let Some(d) = &self.deputy {
            d.own(qpn, claim && held);
        }
        held
    }

    /// Takes connection requests for `sid`: `Err(errno)` when another
    /// process of the device listens on it.
    pub fn listen(&self, sid: u64) -> Result<(), i32> {
        match self.request(&Request::Listen(sid)) {
            Ok(Reply::Ok) => Ok(()),
            Ok(Reply::Err(e)) => Err(e),
            _ => Err(libc::EIO),
        }
    }

    /// Stops taking them.
    pub fn unlisten(&self, sid: u64) {
        self.notify(&Request::Unlisten(sid));
    }

    /// Sends a QP 1 datagram through the device process.
    pub fn send_gsi(&self, dst: IpAddr, packet: &[u8]) {
        self.notify(&Request::SendGsi {
            dst,
            packet: packet.to_vec(),
        });
    }

    /// Has the device process receive what the device's socket holds and
    /// hand it out (this member's share lands in its ring) before
    /// returning. `false`: it did not answer.
    pub fn receive_arrived(&self) -> bool {
        matches!(self.request(&Request::Receive), Ok(Reply::Ok))
    }

    /// Who shares the device.
    pub fn members(&self) -> io::Result<Vec<MemberInfo>> {
        match self.request(&Request::Members)? {
            Reply::Members(v) => Ok(v),
            _ => Err(io::Error::from(io::ErrorKind::InvalidData)),
        }
    }

    /// The same-host path's counters (`None`: the path is off).
    pub fn same_host_counters(&self) -> Option<super::path::SameHostCounters> {
        let mut p = self.paths.as_ref()?.lock();
        // (Ways the asker found: a program that sends nothing yet sees
        // the paths it has.)
        p.take_answers(Instant::now());
        Some(super::path::SameHostCounters {
            sent: p.sent,
            refused: p.refused,
            received: self.path_received.load(Ordering::Relaxed),
            paths: p.paths(),
            rings_out: p.rings_out(),
            rings_in: self.inbound.lock().rings.len() as u64,
        })
    }

    /// The descriptor the device process writes to wake us.
    pub fn wake_fd(&self) -> RawFd {
        self.wake.as_fd().as_raw_fd()
    }

    /// Clears the wake-up.
    pub fn drain_wake(&self) {
        self.wake.drain();
    }

    /// About to sleep: `false` when datagrams wait (do not sleep). Every
    /// ring gets its flag first, then each is looked at: a sender that
    /// publishes after our look sees the flag and writes the eventfd.
    /// Also lets go of the same-host path's rings whose other end is
    /// gone (an idle device looks here, not in the send and receive paths).
    pub fn prepare_sleep(&self) -> bool {
        let now = Instant::now();
        if let Some(mut p) = self.paths.as_ref().and_then(|p| p.try_lock()) {
            p.reap(now);
        }
        let gone = self.inbound.lock().reap(now);
        self.forget_senders(gone);
        let mut empty = self.ring.lock().prepare_sleep();
        for r in self.inbound.lock().rings.iter() {
            empty &= r.ring.prepare_sleep();
        }
        // (Rings offered and asked for: the answer wakes us.)
        empty
            && (!self.offered.load(Ordering::SeqCst)
                || self.rings_asked.load(Ordering::SeqCst) != 0)
    }

    /// Back from sleeping.
    pub fn awake(&self) {
        self.ring.lock().awake();
        for r in self.inbound.lock().rings.iter() {
            r.ring.awake();
        }
    }

    /// Tells the device process we let go of these senders' rings.
    fn forget_senders(&self, gone: Vec<u64>) {
        for sender in gone {
            self.notify(&Request::RingGone { sender });
        }
    }

    /// Asks for the rings senders gave us (the device process said so),
    /// without waiting for the answer: [`Self::take_answers`] takes it
    /// at a later receive, or a request that reads it first does
    /// ([`Self::other_answer`]); the device process writes our wake-up
    /// eventfd once it has sent it. A program's `ibv_poll_cq` gets here
    /// (`progress_inline`), holding the device's receive side: it used
    /// to wait up to `REPLY_WAIT` for the answer of a device process a
    /// loaded machine did not run. One question at a time (the flag
    /// stays raised meanwhile).
    fn ask_rings(&self) {
        if self.rings_asked.load(Ordering::SeqCst) != 0 {
            return;
        }
        self.offered.store(false, Ordering::SeqCst);
        let mut tx = self.ctl_tx.lock();
        if tx.gone {
            return;
        }
        let seq = tx.next_seq();
        tx.outbox
            .push_back((msg::frame(seq, &Request::TakeRings.encode()), false));
        // (Before it can be answered.)
        self.rings_asked.store(seq, Ordering::SeqCst);
        if let Ok(false) = tx.flush(&self.conn) {
            self.outbox_waiting.store(true, Ordering::SeqCst);
        }
    }

    /// Reads the answers waiting on the connection, never waiting, while
    /// a `TakeRings` is unanswered and no request reads them itself.
    fn take_answers(&self) {
        if self.rings_asked.load(Ordering::Relaxed) == 0 {
            return;
        }
        let Some(mut abandoned) = self.ctl_rx.try_lock() else {
            return;
        };
        let mut late = Vec::new();
        let mut buf = [0u8; msg::MAX_MSG];
        loop {
            let mut fds = Vec::new();
            let n = match self.conn.try_recv(&mut buf, &mut fds) {
                Ok(None) => break,
                Ok(Some(n)) if n > 0 || !fds.is_empty() => n,
                // The device process is gone (or out of step): no answer
                // will come.
                _ => {
                    self.rings_asked.store(0, Ordering::SeqCst);
                    break;
                }
            };
            let Some((got, reply)) = msg::unframe(&buf[..n])
                .ok()
                .and_then(|(got, body)| Some((got, Reply::decode(body).ok()?)))
            else {
                self.rings_asked.store(0, Ordering::SeqCst);
                break;
            };
            let asked_for = abandoned
                .iter()
                .position(|(s, _)| *s == got)
                .map(|i| abandoned.swap_remove(i).1);
            late.push((got, reply, fds, asked_for));
        }
        drop(abandoned);
        for (seq, reply, fds, asked_for) in late {
            self.other_answer(seq, reply, fds, asked_for);
        }
    }

    /// Maps the rings of a `Rings` answer (`fds`: as it lists them).
    fn adopt_rings(&self, gifts: &[msg::RingGift], fds: Vec<OwnedFd>) {
        let mut inbound = self.inbound.lock();
        let mut fds = fds.into_iter();
        for g in gifts {
            let Some(fd) = fds.next() else { break };
            let producer = if g.pidfd {
                fds.next().map(PidFd::from_fd)
            } else {
                None
            };
            // A ring that is not one is ignored (the sender's loss).
            if let Ok(ring) = Ring::attach(fd) {
                inbound.rings.push(InRing {
                    ring,
                    sender: g.sender,
                    producer,
                    dying: false,
                });
            }
        }
    }

    /// Takes up to `bufs.len()` datagrams from the ring, as a socket's
    /// receive would (the device process's ring, then the same-host
    /// path's, copied: for the receive fault injector, which may hold
    /// datagrams back).
    /// A datagram whose sender left its ICRC out gets it computed here
    /// (`local`: this device's address), before the injector may corrupt
    /// it: the core then checks it as any other.
    pub fn recv(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [IoMeta],
        local: SocketAddr,
    ) -> usize {
        let mut n = self.recv_device(bufs, meta);
        let mut inbound = self.inbound.lock();
        let before = n;
        for r in inbound.rings.iter_mut() {
            if n == bufs.len() {
                break;
            }
            let from = n;
            let mut left = 0u64;
            n = self.recv_from_flagged(&mut r.ring, bufs, meta, n, Some(&mut left));
            for i in from..n {
                if left & (1 << (i - from)) != 0 {
                    fill_icrc(&mut bufs[i][..meta[i].len], meta[i].addr, local);
                }
            }
        }
        self.path_received
            .fetch_add((n - before) as u64, Ordering::Relaxed);
        n
    }

    /// [`Self::recv`] from the device process's ring only (the same-host
    /// path's rings: [`Self::recv_paths_in_place`]); takes the rings
    /// senders offered, and now and then lets go of those whose sender
    /// is gone.
    pub fn recv_device(&self, bufs: &mut [IoSliceMut<'_>], meta: &mut [IoMeta]) -> usize {
        // Notices that waited for room in the device process's queue.
        self.flush_notices();
        let mut ring = self.ring.lock();
        // Senders gave us rings: the device process raised the flag
        // beside our ring (taken here, not under the ring's lock).
        if ring.take_raised() {
            self.offered.store(true, Ordering::SeqCst);
        }
        let n = self.recv_from(&mut ring, bufs, meta, 0);
        drop(ring);
        self.take_answers();
        if self.offered.load(Ordering::Relaxed) {
            self.ask_rings();
        }
        let mut inbound = self.inbound.lock();
        if inbound.rings.is_empty() {
            return n;
        }
        inbound.calls = inbound.calls.wrapping_add(1);
        if inbound.calls.is_multiple_of(REAP_CALLS) {
            let gone = inbound.reap(Instant::now());
            drop(inbound);
            self.forget_senders(gone);
        }
        n
    }

    /// Whether a same-host path ring holds a datagram.
    pub fn paths_have_data(&self) -> bool {
        self.inbound.lock().rings.iter().any(|r| r.ring.has_data())
    }

    /// Hands up to `max` datagrams of the same-host path's rings to
    /// `deliver` (source, TOS, TTL, the datagram) where they lie in the
    /// ring — no copy before the core places the payload — and frees
    /// their space after. Returns how many it handed over.
    pub fn recv_paths_in_place(
        &self,
        max: usize,
        mut deliver: impl FnMut(SocketAddr, u8, u8, bool, &[u8]),
    ) -> usize {
        let mut inbound = self.inbound.lock();
        let (mut n, mut delivered) = (0, 0);
        for r in inbound.rings.iter_mut() {
            while n < max {
                let popped = r.ring.pop_in_place(|tag, body| {
                    // (A record too short for a header and a datagram is
                    // garbage.)
                    if tag != TAG_DATAGRAM || body.len() <= REC_HDR {
                        return;
                    }
                    let (h, dgram) = body.split_at(REC_HDR);
                    if let Some((src, tos, ttl)) = parse_rec_header(h) {
                        deliver(src, tos, ttl, rec_icrc_left(h), dgram);
                        delivered += 1;
                    }
                });
                if popped.is_none() {
                    break;
                }
                n += 1;
            }
            r.ring.release();
            if n == max {
                break;
            }
        }
        self.path_received.fetch_add(delivered, Ordering::Relaxed);
        n
    }

    /// [`Self::recv`] from one ring, into `bufs[n..]`.
    fn recv_from(
        &self,
        ring: &mut Ring,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [IoMeta],
        n: usize,
    ) -> usize {
        self.recv_from_flagged(ring, bufs, meta, n, None)
    }

    /// [`Self::recv_from`]; `left`: bit `i` set for the `i`th datagram
    /// taken whose ICRC its sender left out (at most 64 are taken then).
    fn recv_from_flagged(
        &self,
        ring: &mut Ring,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [IoMeta],
        mut n: usize,
        mut left: Option<&mut u64>,
    ) -> usize {
        let first = n;
        let end = if left.is_some() {
            bufs.len().min(first + 64)
        } else {
            bufs.len()
        };
        while n < end {
            let buf = &mut bufs[n];
            // The source header apart, the datagram straight at the start
            // of the buffer (one copy out of the ring).
            let mut h = [0u8; REC_HDR];
            let Some((tag, dlen)) = ring.pop_split_unreleased(&mut h, buf) else {
                break;
            };
            // (A record too short for a header and a datagram is garbage.)
            if tag != TAG_DATAGRAM || dlen == 0 {
                continue;
            }
            let Some((src, tos, ttl)) = parse_rec_header(&h) else {
                continue;
            };
            if let Some(l) = left.as_deref_mut() {
                if rec_icrc_left(&h) {
                    *l |= 1 << (n - first);
                }
            }
            meta[n] = IoMeta {
                addr: src,
                len: dlen,
                stride: dlen,
                dst_ip: None,
                tos,
                ttl: Some(ttl),
            };
            n += 1;
        }
        ring.release();
        n
    }
}

impl Member {
    /// `SOFTRDMA_HOST_TRACE=FILE`: says once what the same-host path
    /// carried (at device close, or at exit for a device still open), for
    /// tests of programs that cannot ask.
    pub fn trace_counters(&self) {
        if std::env::var_os("SOFTRDMA_HOST_TRACE").is_some()
            && !self.traced.swap(true, Ordering::SeqCst)
        {
            let c = self.same_host_counters().unwrap_or_default();
            super::daemon::trace(&format!(
                "member pid {} same-host {}: sent {} refused {} received {} paths {}",
                std::process::id(),
                if self.same_host { "shm" } else { "udp" },
                c.sent,
                c.refused,
                c.received,
                c.paths
            ));
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if softrdma_io::fork_generation() != self.generation {
            // A forked child's copy: the rings are its parent's.
            return;
        }
        self.trace_counters();
        // The other ends let go of our rings at once (a process that dies
        // instead is seen by its pidfd).
        if let Some(p) = &self.paths {
            p.lock().close();
        }
        for r in self.inbound.lock().rings.iter_mut() {
            r.ring.close();
        }
    }
}

/// Remembers a request given up on (the oldest forgotten past
/// [`MAX_ABANDONED`]).
fn remember(abandoned: &mut Vec<(u32, Request)>, seq: u32, req: &Request) {
    if abandoned.len() >= MAX_ABANDONED {
        abandoned.remove(0);
    }
    abandoned.push((seq, req.clone()));
}

fn wake_fd(e: &EventFd) -> std::os::fd::BorrowedFd<'_> {
    e.as_fd()
}

/// Writes the ICRC of a datagram (BTH through ICRC) received through a
/// ring from `src`, whose sender left it out.
pub(crate) fn fill_icrc(dgram: &mut [u8], src: SocketAddr, local: SocketAddr) {
    let Some(end) = dgram.len().checked_sub(softrdma_wire::ICRC_LEN) else {
        return;
    };
    let meta = softrdma_proto::RecvMeta {
        src,
        dst: local.ip(),
        len: dgram.len(),
        traffic_class: 0,
        hop_limit: 64,
    };
    if let Some(d) = meta.datagram(local.port()) {
        let icrc = d.icrc(&dgram[..end]);
        dgram[end..].copy_from_slice(&icrc.to_le_bytes());
    }
}

#[cfg(test)]
#[path = "member_tests.rs"]
mod tests;
