//! A program's end of a shared device: joins the device process (starting
//! it if there is none), claims QP numbers and listeners, sends QP 1
//! traffic through it, and reads its datagrams from the ring.

use super::daemon::{
    parse_rec_header, rec_icrc_left, EXIT_BIND, EXIT_RUNNING, EXIT_TAKEN, REC_HDR, TAG_DATAGRAM,
};
use super::msg::{self, MemberInfo, Reply, Request};
use crate::sync::Mutex;
use softrdma_io::{EventFd, PidFd, RecvMeta as IoMeta, Ring, SeqPacket, UdpSocket};
use std::ffi::OsString;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a request waits for the device process's answer.
const REPLY_WAIT: Duration = Duration::from_secs(5);
/// How long joining retries (a device process leaving as we arrive, one
/// starting).
const JOIN_WAIT: Duration = Duration::from_secs(5);

/// A member's link to its device process.
pub(crate) struct Member {
    ctl: Mutex<SeqPacket>,
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
                        ctl: Mutex::new(conn),
                        ring: Mutex::new(ring),
                        wake,
                        host_pid,
                        inbound: Mutex::new(Inbound {
                            rings: Vec::new(),
                            last_reap: Instant::now(),
                            calls: 0,
                        }),
                        offered: AtomicBool::new(false),
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

    /// Sends a request and waits for its answer.
    fn request(&self, req: &Request) -> io::Result<Reply> {
        let asked = Instant::now();
        let ctl = self.ctl.lock();
        ctl.send(&req.encode(), &[])?;
        let mut buf = vec![0u8; msg::MAX_MSG];
        let mut fds = Vec::new();
        let n = ctl.recv_wait(&mut buf, &mut fds, REPLY_WAIT);
        let took = asked.elapsed();
        if n.is_err() || took > super::daemon::TRACE_LATE {
            super::daemon::trace(&format!(
                "member pid {}: the device process answered {req:?} after {took:?} ({})",
                std::process::id(),
                if n.is_err() { "no answer" } else { "late" }
            ));
        }
        let n = n?;
        Reply::decode(&buf[..n]).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))
    }

    /// Sends a message that has no answer.
    fn notify(&self, req: &Request) {
        let _ = self.ctl.lock().send(&req.encode(), &[]);
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
        let p = self.paths.as_ref()?.lock();
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
        empty && !self.offered.load(Ordering::SeqCst)
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

    /// Takes the rings senders gave us (the device process said so).
    fn take_rings(&self) {
        self.offered.store(false, Ordering::SeqCst);
        loop {
            let ctl = self.ctl.lock();
            if ctl.send(&Request::TakeRings.encode(), &[]).is_err() {
                return;
            }
            let mut buf = vec![0u8; msg::MAX_MSG];
            let mut fds = Vec::new();
            let Ok(n) = ctl.recv_wait(&mut buf, &mut fds, REPLY_WAIT) else {
                return;
            };
            drop(ctl);
            let Ok(Reply::Rings(gifts)) = Reply::decode(&buf[..n]) else {
                return;
            };
            let mut inbound = self.inbound.lock();
            let mut fds = fds.into_iter();
            for g in &gifts {
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
            if gifts.len() < msg::MAX_GIFTS {
                return;
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
        let mut ring = self.ring.lock();
        // Senders gave us rings: the device process raised the flag
        // beside our ring (taken here, not under the ring's lock).
        if ring.take_raised() {
            self.offered.store(true, Ordering::SeqCst);
        }
        let n = self.recv_from(&mut ring, bufs, meta, 0);
        drop(ring);
        if self.offered.load(Ordering::Relaxed) {
            self.take_rings();
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
