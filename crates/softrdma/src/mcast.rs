//! UD multicast over IP multicast: the core keeps the groups and their
//! attached QPs (`softrdma_proto::mcast`) and says which IP groups to join
//! and leave; this module turns that into sockets (`softrdma_io`'s
//! `bind_multicast`: one per group, bound to the group's address and port,
//! joined on the device's interface) and receives on them; sending to a
//! group goes out of the device's own socket, whose multicast interface is
//! the device's (`set_multicast_interface`, loopback on so members on this
//! host — in any process — get it).
//!
//! The group sockets are one [`ReadySet`]: a poll asks it once which of
//! them have datagrams (one system call for all the groups), and the set
//! sits in the progress thread's poller, which sleeps on all of them.
//! Every receive path reads them — the progress thread's and a program
//! thread's (`Shared::progress_inline`, from a CQ poll): while a program
//! spins on its CQ the progress thread steps aside, so a group datagram
//! only the progress thread read would wait until the program paused.
//!
//! [`QueuePair::attach_mcast`] / [`QueuePair::detach_mcast`] are
//! `ibv_attach_mcast` / `ibv_detach_mcast`; a QP dropped leaves its groups.

use crate::engine::Shared;
use crate::error::{Error, Result};
use crate::sync::Mutex;
use crate::verbs::QueuePair;
use softrdma_io::{PollRegistry, ReadySet, SocketConfig, UdpSocket};
use softrdma_proto::{Device as Core, McastChange};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Datagrams taken from one group socket per poll.
const GROUP_RX_BATCH: usize = 8;

/// Group sockets read per poll at most (the others, still readable, are
/// read by the next poll: the set is level-triggered).
const GROUP_READY_MAX: usize = 8;

/// The joined groups by their socket's descriptor: (group address, socket).
type Groups = Arc<HashMap<RawFd, (IpAddr, Arc<UdpSocket>)>>;

/// The device's group sockets.
pub(crate) struct GroupSockets {
    /// (group address, socket), replaced as a whole on every change so a
    /// receiver takes a snapshot without holding the lock.
    socks: Mutex<Groups>,
    /// Some group is joined (the receive path's only cost otherwise).
    on: AtomicBool,
    /// The group sockets, asked at once which have input; in the
    /// progress thread's poller, so they wake it up too.
    ready: ReadySet,
    /// The device's address and interface.
    local: SocketAddr,
    ifindex: Option<u32>,
    /// Buffer sizes and the like, as the device's own socket.
    config: SocketConfig,
}

impl GroupSockets {
    /// The group sockets of a device whose socket is `socket` and whose
    /// progress thread sleeps on `registry`'s poller: sets its multicast
    /// interface (best effort: a device on an interface without one only
    /// fails when a group is joined).
    pub fn new(
        socket: &UdpSocket,
        registry: &PollRegistry,
        config: SocketConfig,
    ) -> std::io::Result<Self> {
        let ready = ReadySet::new()?;
        registry.add(&ready)?;
        let local = socket.local_addr();
        let ifindex = softrdma_io::interface_of(local.ip());
        if let Some(i) = ifindex {
            if let Err(e) = socket.set_multicast_interface(local.ip(), i) {
                tracing::debug!(target: "softrdma::engine",
                    "multicast interface {i} for {}: {e}", local.ip());
            }
        }
        Ok(GroupSockets {
            socks: Mutex::new(Arc::new(HashMap::new())),
            on: AtomicBool::new(false),
            ready,
            local,
            ifindex,
            config,
        })
    }

    /// Applies the core's joins and leaves, in order. Returns the first
    /// join that failed (the others are still applied).
    pub fn apply(&self, core: &mut Core) -> std::io::Result<()> {
        let mut first_err = None;
        let mut socks = self.socks.lock();
        while let Some(c) = core.poll_mcast() {
            let mut v: HashMap<RawFd, (IpAddr, Arc<UdpSocket>)> = (**socks).clone();
            match c {
                McastChange::Join(g) => match self.join(g) {
                    Ok(s) => {
                        v.insert(s.as_raw_fd(), (g, Arc::new(s)));
                    }
                    Err(e) => {
                        let e = std::io::Error::new(
                            e.kind(),
                            format!("joining {g} on {}: {e}", self.local.ip()),
                        );
                        first_err.get_or_insert(e);
                    }
                },
                McastChange::Leave(g) => {
                    if let Some(fd) = v.iter().find(|(_, (a, _))| *a == g).map(|(fd, _)| *fd) {
                        if let Some((_, s)) = v.remove(&fd) {
                            let _ = self.ready.remove(&*s);
                        }
                    }
                }
            }
            self.on.store(!v.is_empty(), Ordering::Relaxed);
            *socks = Arc::new(v);
        }
        drop(socks);
        first_err.map_or(Ok(()), Err)
    }

    fn join(&self, group: IpAddr) -> std::io::Result<UdpSocket> {
        let ifindex = self.ifindex.ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::AddrNotAvailable,
                "no interface holds the device's address",
            )
        })?;
        let s = UdpSocket::bind_multicast(
            SocketAddr::new(group, self.local.port()),
            self.local.ip(),
            ifindex,
            &self.config,
        )?;
        self.ready.add(&s)?;
        Ok(s)
    }

    /// Receives on the group sockets that have datagrams; with `send`,
    /// sends what that produced before returning (the progress thread),
    /// else leaves it for the caller's next call (a program thread's poll,
    /// as for the device socket). Returns the datagrams processed.
    pub fn poll(&self, sh: &Shared, send: bool) -> usize {
        if !self.on.load(Ordering::Relaxed) {
            return 0;
        }
        let mut fds = [0; GROUP_READY_MAX];
        let n = self.ready.ready(&mut fds);
        if n == 0 {
            return 0;
        }
        // A descriptor is looked up in the groups as they are now, which
        // pair each socket with its own group: a group left since is
        // skipped, and a number reused by a new group's socket reads that
        // socket (with its group), at worst finding it empty.
        let socks = self.socks.lock().clone();
        fds[..n]
            .iter()
            .filter_map(|fd| socks.get(fd))
            .map(|(g, s)| sh.rx_from(s, Some(*g), GROUP_RX_BATCH, send))
            .sum()
    }

    /// The groups joined now.
    pub fn groups(&self) -> Vec<IpAddr> {
        self.socks.lock().values().map(|(g, _)| *g).collect()
    }
}

/// Attaches QP `qpn` of `dev` to group `gid`, joining the IP group with
/// its first QP (a join the OS refuses undoes the attach).
pub(crate) fn attach(dev: &crate::Device, qpn: softrdma_wire::Qpn, gid: [u8; 16]) -> Result<()> {
    let sh = dev.shared();
    sh.with_core(|c, _| -> Result<()> {
        c.attach_mcast(qpn, gid)?;
        if let Err(e) = sh.mcast.apply(c) {
            let _ = c.detach_mcast(qpn, gid);
            let _ = sh.mcast.apply(c);
            return Err(Error::io("ibv_attach_mcast", e));
        }
        Ok(())
    })
}

/// Detaches QP `qpn` of `dev` from group `gid`.
pub(crate) fn detach(dev: &crate::Device, qpn: softrdma_wire::Qpn, gid: [u8; 16]) -> Result<()> {
    Ok(dev.shared().with_core(|c, _| c.detach_mcast(qpn, gid))?)
}

impl crate::Device {
    /// The IP multicast groups the device has joined (some QP of it is
    /// attached to each).
    pub fn mcast_groups(&self) -> Vec<IpAddr> {
        self.shared().mcast.groups()
    }
}

impl QueuePair {
    /// `ibv_attach_mcast`: this UD QP receives what is sent to multicast
    /// group `gid` (an IP multicast address as a GID: `::ffff:239.x.y.z`
    /// or `ff0x::…`). The device joins the IP group on its interface with
    /// the first QP attached. Attaching twice succeeds. Errors: a GID that
    /// is not multicast, another QP type, a group of the other IP family
    /// (`InvalidArgument`, EINVAL); more than 8,192 groups or 56 QPs in a
    /// group (`Verbs(NoMemory)`, ENOMEM); a join the OS refuses (`Io`).
    pub fn attach_mcast(&self, gid: [u8; 16]) -> Result<()> {
        attach(self.pd().device(), self.qpn(), gid)
    }

    /// `ibv_detach_mcast`: the QP leaves group `gid` (EINVAL when it is
    /// not attached); the device leaves the IP group with its last QP.
    pub fn detach_mcast(&self, gid: [u8; 16]) -> Result<()> {
        detach(self.pd().device(), self.qpn(), gid)
    }

    /// The groups this QP is attached to.
    pub fn mcast_groups(&self) -> Vec<[u8; 16]> {
        let q = self.qpn();
        self.pd()
            .device()
            .shared()
            .peek_core(|c| c.mcast_groups_of(q))
    }
}
