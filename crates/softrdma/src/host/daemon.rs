//! The device process: owns a shared device's socket, hands each member
//! the datagrams for its QPs, says goodbye for members that die, and
//! leaves with the last member (see the module above).

use super::msg::{self, MemberInfo, PathRing, Reply, Request, RingGift};
use super::route::{MemberId, Routes};
use softrdma_io::{
    EventFd, PidFd, Poller, RecvMeta as IoMeta, Ring, SeqPacket, SocketConfig, Transmit, UdpSocket,
};
use softrdma_wire::Qpn;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Exit status: the device process runs (its first process's status).
pub const EXIT_RUNNING: i32 = 0;
/// Exit status: another device process already serves the address.
pub const EXIT_TAKEN: i32 = 3;
/// Exit status: the address could not be bound (an exclusive device or
/// another program holds it, or no interface has it).
pub const EXIT_BIND: i32 = 4;
/// Exit status: anything else went wrong.
pub const EXIT_ERROR: i32 = 5;

/// Members at once (the poller's tokens: 3..64).
pub const MAX_MEMBERS: usize = 61;
/// Bytes of each member's ring (datagrams waiting for it: a few hundred
/// 4 KiB packets; a full ring drops, which the transport recovers from as
/// from any loss).
pub const MEMBER_RING: usize = 8 << 20;
/// How long the device process waits for its first member.
const FIRST_MEMBER_WAIT: Duration = Duration::from_secs(10);
/// How long a new device process retries binding its address while
/// something holds it (its election name held, so joiners wait for it):
/// the socket of a device process just leaving, or the duplicate of a
/// member process still exiting, goes within moments; a NIC does not
/// refuse a program because the previous one just exited. Past it the
/// address is another program's (`EXIT_BIND`: the program's exclusive
/// bind says what holds it).
const BIND_WAIT: Duration = Duration::from_secs(2);
/// Between two tries of the bind.
const BIND_RETRY: Duration = Duration::from_millis(5);
/// Busy-polling after the last datagram before sleeping in the kernel.
const SPIN: Duration = Duration::from_micros(50);
/// How often the device process looks for members whose process exited
/// while a forked child keeps their unix socket open.
const REAP_EVERY: Duration = Duration::from_millis(100);
/// Unrouted datagrams `SOFTRDMA_HOST_TRACE` names one by one (the first
/// ones; after a member's death its peers' retransmissions follow).
const TRACE_UNROUTED: u64 = 32;
/// Least receive buffer of the device process's socket (`SO_RCVBUF`,
/// `SO_RCVBUFFORCE` where permitted; otherwise the kernel caps it at
/// `net.core.rmem_max`): the one socket takes the traffic of every
/// member, each of which would have had a program's whole buffer (8 MiB
/// by default) on a device of its own, and it fills whenever the device
/// process is not run — on a loaded 2-CPU machine for up to a second in
/// the 8+8-rank Open MPI test, overflowing 900-7,700 datagrams per run
/// with 8 MiB; each loss costs its QP an RC timeout and a go-back-N
/// burst that arrives while the backlog is still there.
const HOST_RECV_BUFFER: usize = 64 << 20;
/// Datagrams received per call.
const RX_BATCH: usize = 32;
/// Receive buffer (a GRO train).
const RX_BUF: usize = 64 * 1024;

/// Bytes before each datagram in a member's ring: address family (4 or
/// 6), traffic class, hop limit, a zero byte, the source port (big
/// endian), two zero bytes, the source address (16 bytes; IPv4 in the
/// first 4).
pub(crate) const REC_HDR: usize = 24;
/// Ring record tag of a datagram.
pub(crate) const TAG_DATAGRAM: u32 = 1;
/// How long an accepted connection may take to say its first message
/// (`Hello` or `OpenPath`, which its process sends at once) before the
/// device process closes it. Never waited for: such connections are
/// watched beside the others.
const FIRST_MESSAGE_WAIT: Duration = Duration::from_secs(5);
/// Accepted connections that have not said their first message yet, at
/// once; past that the oldest is closed.
const MAX_PENDING: usize = 64;
/// A loop of the device process that took longer than this (it was not
/// scheduled, or something blocked it) is named in `SOFTRDMA_HOST_TRACE`.
pub(crate) const TRACE_LATE: Duration = Duration::from_millis(250);

/// Poller token of the listening socket, and of the connections accepted
/// that have not said their first message yet.
const TOKEN_LISTEN: u32 = 2;
/// First poller token of the members.
const TOKEN_MEMBER0: u32 = 3;

/// How the device process's socket is set up.
#[derive(Clone, Debug)]
pub struct HostOptions {
    /// The device's address and port.
    pub addr: SocketAddr,
    /// Receive buffer of the socket (bytes).
    pub recv_buffer: usize,
    /// Send buffer of the socket (bytes).
    pub send_buffer: usize,
}

struct Member {
    id: MemberId,
    ctl: SeqPacket,
    ring: Ring,
    wake: EventFd,
    pid: i32,
    /// The member's process: its exit is the member's death even when a
    /// forked child still holds the unix socket (`None`: not visible).
    pidfd: Option<PidFd>,
    comm: String,
    /// Records pushed and not yet published.
    dirty: bool,
    /// Datagrams handed to it.
    pushed: u64,
    /// It takes part in the same-host path (not `SOFTRDMA_SAME_HOST=udp`).
    same_host: bool,
    /// Rings senders of the same-host path gave it, not yet taken.
    offers: Vec<Offer>,
}

/// A ring a sender of the same-host path gave a member.
struct Offer {
    ring: OwnedFd,
    sender: u64,
    /// The sender's process (the member lets go of the ring when it
    /// exits, whoever still holds copies of its descriptors).
    pidfd: Option<PidFd>,
}

/// Writes the ring header of a datagram from `src`.
pub(crate) fn rec_header(src: SocketAddr, tos: u8, ttl: u8) -> [u8; REC_HDR] {
    let mut h = [0u8; REC_HDR];
    h[1] = tos;
    h[2] = ttl;
    h[4..6].copy_from_slice(&src.port().to_be_bytes());
    match src.ip() {
        IpAddr::V4(a) => {
            h[0] = 4;
            h[8..12].copy_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            h[0] = 6;
            h[8..24].copy_from_slice(&a.octets());
        }
    }
    h
}

/// Flag in byte 3 of a ring header: the datagram's ICRC was left out
/// (its four bytes are 0; see `Gather::icrc_left`). Only the same-host
/// path's senders set it.
pub(crate) const REC_ICRC_LEFT: u8 = 1;

/// Whether a ring header says the datagram's ICRC was left out.
pub(crate) fn rec_icrc_left(h: &[u8]) -> bool {
    h.get(3).is_some_and(|f| f & REC_ICRC_LEFT != 0)
}

/// Reads a ring header: (source, traffic class, hop limit).
pub(crate) fn parse_rec_header(h: &[u8]) -> Option<(SocketAddr, u8, u8)> {
    let h: &[u8; REC_HDR] = h.get(..REC_HDR)?.try_into().ok()?;
    let port = u16::from_be_bytes([h[4], h[5]]);
    let ip = match h[0] {
        4 => IpAddr::from(<[u8; 4]>::try_from(&h[8..12]).ok()?),
        6 => IpAddr::from(<[u8; 16]>::try_from(&h[8..24]).ok()?),
        _ => return None,
    };
    Some((SocketAddr::new(ip, port), h[1], h[2]))
}

/// Appends a line to `SOFTRDMA_HOST_TRACE`'s file, if set (debugging the
/// device process, whose standard error is /dev/null).
pub(crate) fn trace(line: &str) {
    if let Some(p) = std::env::var_os("SOFTRDMA_HOST_TRACE") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(p)
        {
            // Several processes share the file: one write(2) per line
            // (O_APPEND), or their lines interleave (`writeln!` on a
            // File writes each piece of the format on its own).
            // (UTC time of day, as the `SOFTRDMA_LOG` lines say it, so
            // the two can be read side by side.)
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            let (s, us) = (t.as_secs() % 86_400, t.subsec_micros());
            let text = format!(
                "{:02}:{:02}:{:02}.{us:06} [{}] {line}\n",
                s / 3600,
                s / 60 % 60,
                s % 60,
                std::process::id()
            );
            let _ = f.write_all(text.as_bytes());
        }
    }
}

/// Runs the device process for `opts.addr`: wins the election, binds the
/// address, detaches (its first process exits with [`EXIT_RUNNING`]) and
/// serves until the last member leaves. Returns the exit status when it
/// does not run (see the `EXIT_` constants).
pub fn serve(opts: &HostOptions) -> i32 {
    let name = match super::rendezvous_name(opts.addr) {
        Ok(n) => n,
        Err(_) => return EXIT_ERROR,
    };
    let listener = match SeqPacket::listen(&name) {
        Ok(l) => l,
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => return EXIT_TAKEN,
        Err(_) => return EXIT_ERROR,
    };
    let mut cfg = SocketConfig::default();
    cfg.recv_buffer = opts.recv_buffer.max(HOST_RECV_BUFFER);
    cfg.send_buffer = opts.send_buffer;
    cfg.recv_dst_ip = false;
    let socket = match bind_waiting(opts.addr, &cfg, BIND_WAIT) {
        Ok(s) => s,
        Err(_) => return EXIT_BIND,
    };
    // Listening and bound: the program that started us may connect.
    if softrdma_io::detach().is_err() {
        return EXIT_ERROR;
    }
    // (No raised priority: nice -10, tried on 2026-12-05, made MPICH's
    // 8+8 shared-address ranks fail with RC retry exceeded in 2 of 6 runs
    // here and once in CI; 0 of 6 at the parent's nice.)
    trace(&format!(
        "device process {} for {}: receive buffer {:?} (SO_SNDBUF, SO_RCVBUF)",
        std::process::id(),
        opts.addr,
        socket.buffer_sizes().ok()
    ));
    let r = Host::new(listener, socket).and_then(|mut h| h.run());
    trace(&format!(
        "device process {} ends: {r:?}",
        std::process::id()
    ));
    match r {
        Ok(()) => 0,
        Err(_) => EXIT_ERROR,
    }
}

/// Binds `addr`, retrying while it is in use, up to `wait` (see
/// [`BIND_WAIT`]).
fn bind_waiting(addr: SocketAddr, cfg: &SocketConfig, wait: Duration) -> io::Result<UdpSocket> {
    let deadline = Instant::now() + wait;
    let mut tries = 0u32;
    loop {
        match UdpSocket::bind_with(addr, cfg) {
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                if tries == 0 {
                    trace(&format!("{addr} in use: waiting up to {wait:?} for it"));
                }
                tries += 1;
                std::thread::sleep(BIND_RETRY);
            }
            r => {
                if tries > 0 {
                    trace(&format!("{addr}: bound after {tries} tries: {}", r.is_ok()));
                }
                return r;
            }
        }
    }
}

struct Host {
    /// (Before the listener: fields drop in order, and a device process
    /// leaving frees its address before its election name, so the next
    /// device process finds the address free.)
    socket: UdpSocket,
    listener: SeqPacket,
    poller: Poller,
    members: Vec<Option<Member>>,
    routes: Routes,
    next_id: MemberId,
    /// Emits farewell MADs (QP 1 packets) as a device would.
    core: softrdma_proto::Device,
    euid: u32,
    bufs: Vec<Vec<u8>>,
    meta: Vec<IoMeta>,
    /// Datagrams no member wanted.
    unrouted: u64,
    /// Same-host path: (sender, member) pairs whose ring was given.
    path_rings: std::collections::HashSet<(u64, MemberId)>,
    /// Connections accepted whose first message has not come yet, and
    /// since when (watched with [`TOKEN_LISTEN`]).
    pending: Vec<(SeqPacket, Instant)>,
    /// How long they have ([`FIRST_MESSAGE_WAIT`]; longer in tests).
    first_wait: Duration,
    /// The page shared with the members: our beat, the receive lock, the
    /// pool of datagrams deputies took for others (see `deputy`).
    page: super::deputy::Page,
}

impl Host {
    fn new(listener: SeqPacket, socket: UdpSocket) -> io::Result<Host> {
        let mut poller = Poller::new(&socket)?;
        poller.add(listener.as_raw_fd(), TOKEN_LISTEN)?;
        let local = socket.local_addr();
        let mut cfg = softrdma_proto::DeviceConfig::new(local.ip(), 0);
        cfg.udp_src_port = local.port();
        cfg.udp_dst_port = local.port();
        Ok(Host {
            listener,
            socket,
            poller,
            members: (0..MAX_MEMBERS).map(|_| None).collect(),
            routes: Routes::default(),
            next_id: 1,
            core: softrdma_proto::Device::new(cfg),
            euid: softrdma_io::euid(),
            bufs: (0..RX_BATCH).map(|_| vec![0u8; RX_BUF]).collect(),
            meta: vec![IoMeta::default(); RX_BATCH],
            unrouted: 0,
            path_rings: Default::default(),
            pending: Vec::new(),
            first_wait: FIRST_MESSAGE_WAIT,
            page: super::deputy::Page::create()?,
        })
    }

    fn run(&mut self) -> io::Result<()> {
        let started = Instant::now();
        let mut ever = false;
        let mut last_rx = Instant::now() - SPIN;
        let mut last_reap = Instant::now();
        loop {
            self.page.tick();
            if last_reap.elapsed() >= REAP_EVERY {
                last_reap = Instant::now();
                for slot in 0..MAX_MEMBERS {
                    let dead = self.members[slot]
                        .as_ref()
                        .and_then(|m| m.pidfd.as_ref())
                        .is_some_and(PidFd::exited);
                    if dead {
                        self.leave(slot);
                    }
                }
                self.drop_silent_pending();
            }
            if self.receive(false) > 0 {
                last_rx = Instant::now();
            }
            let timeout = if last_rx.elapsed() < SPIN {
                Duration::ZERO
            } else {
                REAP_EVERY
            };
            let slept = Instant::now();
            let r = self.poller.wait(Some(timeout))?;
            let late = slept.elapsed().saturating_sub(timeout);
            if late > TRACE_LATE {
                trace(&format!(
                    "device process {} ran {late:?} after its wait ended (timeout {timeout:?})",
                    std::process::id()
                ));
            }
            if r.others & (1 << TOKEN_LISTEN) != 0 {
                self.accept();
                self.serve_pending();
            }
            for slot in 0..MAX_MEMBERS {
                if r.others & (1u64 << (TOKEN_MEMBER0 as usize + slot)) != 0 {
                    self.serve_member(slot);
                }
            }
            let any = self.members.iter().any(Option::is_some);
            ever |= any;
            // (A connection still in its handshake keeps it: a program
            // joining as the last member leaves.)
            if !any && self.pending.is_empty() && (ever || started.elapsed() > FIRST_MEMBER_WAIT) {
                // The last member left: so does the device. A program
                // connecting just now finds the name free and starts a
                // new device process.
                return Ok(());
            }
        }
    }

    /// Receives what waits on the socket, and what deputies left in the
    /// pool, and hands it out. Under the page's receive lock: while a
    /// member receives for us (we were late), nothing (or, with `wait`,
    /// once it is done or its lock is stale: `Request::Receive` answers
    /// only when the socket's datagrams were handed out).
    fn receive(&mut self, wait: bool) -> usize {
        let held = loop {
            let now = softrdma_io::host::coarse_ms();
            match self.page.try_lock(std::process::id(), now) {
                Some(h) => break h,
                None if wait => std::thread::yield_now(),
                None => return 0,
            }
        };
        let mut total = 0;
        if self.page.pooled() > 0 {
            let mut pooled = Vec::new();
            let mut scratch = Vec::new();
            self.page.take(
                usize::MAX,
                |_| true,
                &mut scratch,
                |h, d| pooled.push((h.to_vec(), d.to_vec())),
            );
            for (h, d) in &pooled {
                if let Some((src, tos, ttl)) = parse_rec_header(h) {
                    total += 1;
                    hand_out(
                        &mut self.routes,
                        &mut self.members,
                        &mut self.unrouted,
                        (src, tos, ttl),
                        d,
                    );
                }
            }
        }
        loop {
            self.page.tick();
            let mut it = self.bufs.iter_mut();
            let mut slices: [IoSliceMut<'_>; RX_BATCH] =
                std::array::from_fn(|_| IoSliceMut::new(it.next().expect("RX_BATCH")));
            let n = self
                .socket
                .recv(&mut slices, &mut self.meta)
                .unwrap_or_default();
            for (m, buf) in self.meta[..n].iter().zip(self.bufs.iter()) {
                for dgram in m.datagrams(&buf[..m.len]) {
                    total += 1;
                    hand_out(
                        &mut self.routes,
                        &mut self.members,
                        &mut self.unrouted,
                        (m.addr, m.tos, m.ttl.unwrap_or(64)),
                        dgram,
                    );
                }
            }
            for member in self.members.iter_mut().flatten() {
                if std::mem::take(&mut member.dirty) && member.ring.publish() {
                    member.wake.signal();
                }
            }
            if n < RX_BATCH {
                break;
            }
        }
        self.page.unlock(held);
        total
    }

    /// Accepts new connections: each is watched until its first message
    /// comes (never waited for: a process stopped between its connect and
    /// its first message must not stop the device's traffic).
    fn accept(&mut self) {
        while let Ok(Some(conn)) = self.listener.accept() {
            match conn.peer_cred() {
                // Another user's program: the abstract name is visible to
                // every process of the namespace; the device is this
                // user's.
                Ok(c) if c.uid == self.euid => {}
                _ => continue,
            }
            if self.pending.len() >= MAX_PENDING {
                let (old, _) = self.pending.remove(0);
                let _ = self.poller.remove(old.as_raw_fd());
            }
            if self.poller.add(conn.as_raw_fd(), TOKEN_LISTEN).is_ok() {
                self.pending.push((conn, Instant::now()));
            }
        }
    }

    /// Reads the first message of the accepted connections that have one.
    fn serve_pending(&mut self) {
        let mut i = 0;
        let mut buf = vec![0u8; msg::MAX_MSG];
        while i < self.pending.len() {
            let mut fds = Vec::new();
            let n = match self.pending[i].0.try_recv(&mut buf, &mut fds) {
                Ok(None) => {
                    i += 1;
                    continue;
                }
                Ok(Some(n)) => Some(n),
                Err(_) => None,
            };
            let (conn, _) = self.pending.swap_remove(i);
            let _ = self.poller.remove(conn.as_raw_fd());
            if let Some(n) = n.filter(|&n| n > 0) {
                let _ = self.first_message(conn, &buf[..n], fds);
            }
        }
    }

    /// Closes the accepted connections that said nothing for
    /// [`FIRST_MESSAGE_WAIT`].
    fn drop_silent_pending(&mut self) {
        let wait = self.first_wait;
        let (silent, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(_, t)| t.elapsed() >= wait);
        for (conn, _) in silent {
            let _ = self.poller.remove(conn.as_raw_fd());
        }
        self.pending = kept;
    }

    /// A new connection's first message: a member's `Hello` (answered
    /// with `Welcome`) or a sender's `OpenPath`.
    fn first_message(
        &mut self,
        conn: SeqPacket,
        msg: &[u8],
        mut fds: Vec<OwnedFd>,
    ) -> io::Result<()> {
        let cred = conn.peer_cred()?;
        let (version, comm, same_host) = match Request::decode(msg) {
            Ok(Request::Hello {
                version,
                comm,
                same_host,
                ..
            }) => (version, comm, same_host),
            Ok(Request::OpenPath { sender, qpn }) => {
                return self.open_path(&conn, cred.pid, sender, qpn, fds.pop())
            }
            _ => return Ok(()),
        };
        let Some(slot) = self.members.iter().position(Option::is_none) else {
            let _ = conn.send(&Reply::Err(libc::EUSERS).encode(), &[]);
            return Ok(());
        };
        if version != msg::VERSION {
            let _ = conn.send(&Reply::WrongVersion(msg::VERSION).encode(), &[]);
            return Ok(());
        }
        let Some(wake) = fds.pop() else {
            return Ok(());
        };
        let ring = Ring::create("softrdma-member", MEMBER_RING)?;
        let sock: OwnedFd = self.socket.dup_fd()?;
        conn.send(
            &Reply::Welcome {
                version: msg::VERSION,
                mtu: 0,
                host_pid: std::process::id() as i32,
                leased: false,
            }
            .encode(),
            &[sock.as_fd(), ring.fd(), self.page.fd()],
        )?;
        self.poller
            .add(conn.as_raw_fd(), TOKEN_MEMBER0 + slot as u32)?;
        let id = self.next_id;
        self.next_id += 1;
        self.routes.join(id);
        trace(&format!("member {id} pid {} ({comm}) joined", cred.pid));
        self.members[slot] = Some(Member {
            id,
            ctl: conn,
            ring,
            wake: EventFd::from_fd(wake),
            pid: cred.pid,
            pidfd: (cred.pid > 0).then(|| PidFd::open(cred.pid).ok()).flatten(),
            comm,
            dirty: false,
            pushed: 0,
            same_host,
            offers: Vec::new(),
        });
        Ok(())
    }

    /// A sender of the same-host path (a member of this or another device
    /// of this user in this namespace: the name and `SO_PEERCRED` said so)
    /// asks who owns `qpn`; gives it the owner's wake-up eventfd and
    /// pidfd and, on its first path to that owner, takes the ring it
    /// offers (`ring`; without one it is told to ask again with one) and
    /// offers it to the owner. Answers at once, whatever the sender does.
    fn open_path(
        &mut self,
        conn: &SeqPacket,
        pid: i32,
        sender: u64,
        qpn: u32,
        ring: Option<OwnedFd>,
    ) -> io::Result<()> {
        let owner = self.routes.owner_of(qpn).and_then(|id| {
            self.members
                .iter()
                .position(|s| s.as_ref().is_some_and(|m| m.id == id && m.same_host))
        });
        let Some(slot) = owner else {
            return conn.send(&Reply::Err(libc::ENOENT).encode(), &[]);
        };
        let id = self.members[slot].as_ref().expect("owner").id;
        let state = match ring {
            // (A ring given when one was given before replaces it: the
            // sender lost its end, e.g. our answer came too late; the
            // member lets go of the old one when its producer closes it.)
            None if self.path_rings.contains(&(sender, id)) => PathRing::Have,
            Some(ring) => {
                self.path_rings.insert((sender, id));
                let m = self.members[slot].as_mut().expect("owner");
                m.offers.push(Offer {
                    ring,
                    sender,
                    pidfd: (pid > 0).then(|| PidFd::open(pid).ok()).flatten(),
                });
                // Told by the flag beside its ring's records (a full ring
                // must not lose the offer); woken if it sleeps.
                if m.ring.raise() {
                    m.wake.signal();
                }
                PathRing::Taken
            }
            None => PathRing::Need,
        };
        let m = self.members[slot].as_ref().expect("owner");
        let mut fds = vec![m.wake.as_fd()];
        fds.extend(m.pidfd.as_ref().map(AsFd::as_fd));
        conn.send(
            &Reply::Path {
                member: u64::from(id),
                ring: state,
                pidfd: fds.len() == 2,
            }
            .encode(),
            &fds,
        )
    }

    /// Reads a member's requests; its end closing is its death.
    fn serve_member(&mut self, slot: usize) {
        let mut buf = vec![0u8; msg::MAX_MSG];
        loop {
            let Some(m) = self.members[slot].as_ref() else {
                return;
            };
            let id = m.id;
            let mut fds = Vec::new();
            let n = match m.ctl.try_recv(&mut buf, &mut fds) {
                Ok(None) => return,
                Ok(Some(0)) | Err(_) => {
                    self.leave(slot);
                    return;
                }
                Ok(Some(n)) => n,
            };
            let Ok(req) = Request::decode(&buf[..n]) else {
                self.leave(slot);
                return;
            };
            let reply = match req {
                Request::Hello { .. } => Some(Reply::Err(libc::EISCONN)),
                Request::ClaimQpn(q) => Some(if self.routes.claim_qpn(id, q) {
                    Reply::Ok
                } else {
                    Reply::Err(libc::EBUSY)
                }),
                Request::FreeQpn(q) => {
                    self.routes.free_qpn(id, q);
                    None
                }
                Request::Listen(s) => Some(if self.routes.listen(id, s) {
                    Reply::Ok
                } else {
                    Reply::Err(libc::EADDRINUSE)
                }),
                Request::Unlisten(s) => {
                    self.routes.unlisten(id, s);
                    None
                }
                Request::SendGsi { dst, packet } => {
                    self.routes.sent(id, dst, &packet);
                    let to = SocketAddr::new(dst, self.socket.local_addr().port());
                    let _ = self.socket.send(&[Transmit::new(to, &packet)]);
                    None
                }
                Request::Members => Some(Reply::Members(self.member_list())),
                Request::Receive => {
                    // Everything the socket held when the request came is
                    // in the members' rings (or refused by a full one,
                    // as loss) before the answer leaves.
                    self.receive(true);
                    Some(Reply::Ok)
                }
                Request::TakeRings => {
                    let m = self.members[slot].as_mut().expect("member");
                    // At most MAX_GIFTS at a time: the member asks again
                    // while it gets that many.
                    let k = m.offers.len().min(msg::MAX_GIFTS);
                    let offers: Vec<Offer> = m.offers.drain(..k).collect();
                    let mut fds = Vec::new();
                    let mut gifts = Vec::new();
                    for o in &offers {
                        fds.push(o.ring.as_fd());
                        fds.extend(o.pidfd.as_ref().map(AsFd::as_fd));
                        gifts.push(RingGift {
                            sender: o.sender,
                            pidfd: o.pidfd.is_some(),
                        });
                    }
                    let r = Reply::Rings(gifts).encode();
                    if m.ctl.send(&r, &fds).is_err() {
                        self.leave(slot);
                        return;
                    }
                    None
                }
                Request::RingGone { sender } => {
                    self.path_rings.remove(&(sender, id));
                    None
                }
                Request::OpenPath { .. } => Some(Reply::Err(libc::EINVAL)),
                Request::Bye => {
                    self.leave(slot);
                    return;
                }
            };
            if let Some(r) = reply {
                let m = self.members[slot].as_ref().expect("member");
                if m.ctl.send(&r.encode(), &[]).is_err() {
                    self.leave(slot);
                    return;
                }
            }
        }
    }

    fn member_list(&self) -> Vec<MemberInfo> {
        self.members
            .iter()
            .flatten()
            .map(|m| MemberInfo {
                pid: m.pid,
                comm: m.comm.clone(),
                qps: self.routes.qpns_of(m.id) as u32,
                leased: false,
                same_host: m.same_host,
            })
            .collect()
    }

    /// A member is gone: its QPs and listeners with it; its peers told.
    fn leave(&mut self, slot: usize) {
        let Some(mut m) = self.members[slot].take() else {
            return;
        };
        trace(&format!(
            "member {} pid {} left: pushed {}, ring refused {}, bytes it never took {}, \
             unrouted so far {}, socket overflows so far {}, deputies (took, pooled, lost) {:?}",
            m.id,
            m.pid,
            m.pushed,
            m.ring.refused_count(),
            m.ring.in_flight(),
            self.unrouted,
            self.socket.stats().recv_dropped,
            self.page.counts()
        ));
        let _ = self.poller.remove(m.ctl.as_raw_fd());
        self.path_rings.retain(|&(_, id)| id != m.id);
        let port = self.socket.local_addr().port();
        let mut buf = vec![0u8; 512];
        for f in self.routes.leave(m.id) {
            if let Some(t) = self.core.emit_gsi(
                f.dst,
                Qpn::GSI,
                softrdma_wire::QKey(softrdma_wire::mad::GSI_QKEY),
                &f.mad,
                &mut buf,
            ) {
                let to = SocketAddr::new(f.dst, port);
                let _ = self.socket.send(&[Transmit::new(to, &buf[..t.len])]);
            }
        }
    }
}

/// Hands a datagram from `src` (with its TOS and TTL) to the member its
/// route names, in its ring (published by the caller).
fn hand_out(
    routes: &mut Routes,
    members: &mut [Option<Member>],
    unrouted: &mut u64,
    (src, tos, ttl): (SocketAddr, u8, u8),
    dgram: &[u8],
) {
    let to = routes.route(src.ip(), dgram);
    let slot = to.and_then(|id| {
        members
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.id == id))
    });
    let Some(member) = slot.and_then(|i| members[i].as_mut()) else {
        *unrouted += 1;
        if *unrouted <= TRACE_UNROUTED {
            let q = super::route::dest_qpn(dgram).map_or_else(|| "?".into(), |q| format!("{q:#x}"));
            trace(&format!(
                "unrouted datagram from {src} to QPN {q} ({} bytes)",
                dgram.len()
            ));
        }
        return;
    };
    let h = rec_header(src, tos, ttl);
    // A full ring is loss (counted in the ring).
    if member.ring.push_unpublished(TAG_DATAGRAM, &[&h, dgram]) {
        member.dirty = true;
        member.pushed += 1;
    }
}

#[cfg(test)]
#[path = "daemon_tests.rs"]
mod tests;
