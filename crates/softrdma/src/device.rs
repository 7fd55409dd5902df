//! Opening a device: address selection, the socket, the progress thread.

use crate::config::{
    interfaces, AddrSpec, ConfigError, DeviceSettings, Setting, Source, MTU_RANGE,
};
use crate::engine::{self, Shared};
use crate::error::{Error, Result};
use crate::event::CompletionChannel;
use crate::sync::Mutex;
use crate::verbs::{CompletionQueue, ProtectionDomain};
use softrdma_io::{Poller, SocketConfig, UdpSocket};
use softrdma_proto::device::DeviceAttr;
use softrdma_proto::{AsyncEvent, Counters, DeviceConfig};
use softrdma_wire::grh::gid_of;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The UDP port of RoCE v2.
pub const ROCE_PORT: u16 = softrdma_wire::ROCE_V2_PORT;

/// How to open a device. Every `None` takes the configuration's value
/// ([`crate::config`]: `SOFTRDMA_*` variables, the config file, defaults).
#[derive(Clone, Debug)]
pub struct DeviceOptions {
    /// Which configured device (a name in the config file) supplies the
    /// address and MTU. `None`: the first one — `softrdma0` at
    /// `SOFTRDMA_ADDR`, else the config file's first line, else
    /// `softrdma0` on `auto`.
    pub device: Option<String>,
    /// Local address. `None`: the configured device's (`SOFTRDMA_ADDR` or
    /// the config file), by default the first free loopback address
    /// 127.0.0.1, 127.0.0.2, … (so several processes on one host each get
    /// their own, with no setup).
    pub addr: Option<IpAddr>,
    /// UDP port (4791: RoCE v2 peers always send there).
    pub port: u16,
    /// Active MTU of the port in bytes (256–4096). `None`: the configured
    /// device's (its `mtu=`, else `SOFTRDMA_MTU`), else the interface's:
    /// the port MTU then follows the MTU of the interface the address is
    /// on (less 80 bytes of RoCE headers, rounded down: 1500 → 1024, 9000
    /// → 4096; loopback 4096), also when it changes, as rxe's does.
    pub mtu: Option<u32>,
    /// Capture every packet to this pcap file (`SOFTRDMA_PCAP` when `None`);
    /// `{addr}` in the path is replaced by the device's address.
    pub pcap: Option<PathBuf>,
    /// Busy-poll window of the progress thread after activity
    /// (`SOFTRDMA_SPIN_US`, default 20 µs): while datagrams keep coming it
    /// polls instead of paying an epoll sleep and wake-up per burst (small
    /// messages: 1.1 → 1.5 M/s on the 2-core VM); 0 sleeps at once. While a
    /// program thread polls, the progress thread does not spin at all.
    pub spin: Option<Duration>,
    /// Use UDP GSO to send runs of equal-sized packets in one system call.
    pub gso: bool,
    /// Use UDP GRO to receive them.
    pub gro: bool,
    /// Socket send buffer in bytes (`SO_SNDBUF`; the kernel doubles it).
    /// What a burst may queue in the kernel before datagrams wait in the
    /// engine's own queue.
    pub send_buffer: usize,
    /// Socket receive buffer in bytes (`SO_RCVBUF`): what may arrive while
    /// nothing polls before the kernel drops datagrams.
    pub recv_buffer: usize,
    /// Addresses automatic selection skips (rdma_cm: a process reaching a
    /// loopback peer must not take the peer's address when it is free for
    /// a moment).
    pub avoid: Vec<IpAddr>,
    /// Fault injection for tests: the fraction of send calls the engine
    /// refuses as if the socket were full, so built datagrams wait in its
    /// queue (`SOFTRDMA_REFUSE_SENDS` when `None`; default 0). Nothing is
    /// lost: refused datagrams go with a later call.
    pub refuse_sends: Option<f64>,
    /// Faults to inject on the device's datagrams (the language of
    /// `SOFTRDMA_FAULTS`: [`crate::config::faults`]). `None`: the
    /// configured device's (its config file line's `faults=`, else
    /// `SOFTRDMA_FAULTS`); `Some(FaultSpec::default())`: none.
    pub faults: Option<crate::config::FaultSpec>,
    /// Send multi-packet RC RDMA WRITEs to loopback peers (softrdma devices
    /// of this host) as one WRITE ONLY per packet, so that the packets are
    /// equal-sized and go out as GSO runs (default true; see
    /// `softrdma_proto::WriteChunking`). Other peers always get FIRST …
    /// LAST, as rxe sends them.
    pub chunk_loopback_writes: bool,
    /// The device is this process's alone: it binds its address itself
    /// and fails (`AddrInUse`) when another device or device process
    /// holds it, instead of sharing it with the other processes that open
    /// devices on it (see the `host` module). `softrdma perf --loopback`
    /// wants its two ends on two addresses.
    pub exclusive: bool,
}

impl Default for DeviceOptions {
    fn default() -> Self {
        DeviceOptions {
            device: None,
            addr: None,
            port: ROCE_PORT,
            mtu: None,
            pcap: None,
            spin: None,
            gso: true,
            gro: true,
            send_buffer: SocketConfig::default().send_buffer,
            recv_buffer: SocketConfig::default().recv_buffer,
            avoid: Vec::new(),
            refuse_sends: None,
            faults: None,
            chunk_loopback_writes: true,
            exclusive: false,
        }
    }
}

impl DeviceOptions {
    /// Options for a device bound to `addr`.
    pub fn at(addr: IpAddr) -> Self {
        DeviceOptions {
            addr: Some(addr),
            ..Default::default()
        }
    }
}

/// The devices opened in this process (weak: a device closes with its last
/// handle), for rdma_cm's address resolution. A std lock: held across
/// `fork` (see `crate::fork`), it is released in the child by an atomic
/// store (parking_lot's may reach its global parking table).
static OPEN: std::sync::Mutex<Vec<(u64, std::sync::Weak<DeviceInner>)>> =
    std::sync::Mutex::new(Vec::new());

/// The list of open devices, locked.
pub(crate) fn open_list() -> std::sync::MutexGuard<'static, Vec<(u64, std::sync::Weak<DeviceInner>)>>
{
    OPEN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Poller token of a shared device's wake-up eventfd.
const HOST_WAKE_TOKEN: u32 = 2;

/// Highest loopback address tried by automatic selection.
const LOOPBACK_TRIES: u32 = 4096;

fn socket_config(opts: &DeviceOptions) -> SocketConfig {
    let mut cfg = SocketConfig::default();
    cfg.gso = opts.gso;
    cfg.gro = opts.gro;
    cfg.send_buffer = opts.send_buffer;
    cfg.recv_buffer = opts.recv_buffer;
    // Devices bind one address, never a wildcard: every datagram's
    // destination is that address, so asking the kernel costs a control
    // message per datagram for nothing.
    cfg.recv_dst_ip = false;
    cfg
}

/// The address the settings name (`None`: pick a free loopback one).
fn resolve(addr: &Setting<AddrSpec>) -> Result<Option<IpAddr>> {
    Ok(match &addr.value {
        AddrSpec::Ip(ip) => Some(*ip),
        spec => spec
            .resolve(&interfaces())
            .map_err(|msg| ConfigError::Resolve {
                from: addr.source.clone(),
                spec: spec.clone(),
                msg,
            })?,
    })
}

fn bind(opts: &DeviceOptions, explicit: Option<IpAddr>) -> Result<UdpSocket> {
    let cfg = socket_config(opts);
    if let Some(ip) = explicit {
        let a = SocketAddr::new(ip, opts.port);
        return UdpSocket::bind_with(a, &cfg).map_err(|e| {
            let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
                " (another device already uses it; pick another address)"
            } else if e.kind() == std::io::ErrorKind::AddrNotAvailable {
                " (no interface has this address)"
            } else {
                ""
            };
            Error::io(format!("binding {a}{hint}"), e)
        });
    }
    for i in 0..LOOPBACK_TRIES {
        let n = i + 1;
        let ip = Ipv4Addr::new(127, (n >> 16) as u8, (n >> 8) as u8, (n & 0xff) as u8);
        if ip.octets()[3] == 0 || ip.octets()[3] == 255 || opts.avoid.contains(&IpAddr::V4(ip)) {
            continue;
        }
        match UdpSocket::bind_with(SocketAddr::new(IpAddr::V4(ip), opts.port), &cfg) {
            Ok(s) => return Ok(s),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(Error::io(format!("binding {ip}:{}", opts.port), e)),
        }
    }
    Err(Error::InvalidArgument(
        "no free loopback address for a device (set SOFTRDMA_ADDR)".into(),
    ))
}

pub(crate) struct DeviceInner {
    pub shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    pub name: String,
    settings: DeviceSettings,
    /// The interface whose MTU the port's follows (no MTU configured).
    link: Option<String>,
}

/// The interface `ip` is on (every 127/8 address is on loopback).
fn netdev_of(ip: IpAddr) -> Option<String> {
    AddrSpec::Ip(ip).netdev(&interfaces())
}

/// The port MTU in bytes interface `name` carries now (rxe's rule).
fn link_port_mtu(name: &str) -> Option<u32> {
    softrdma_io::interface_mtu(name)
        .ok()
        .map(|m| softrdma_proto::Mtu::of_link(m).bytes())
}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        if self.shared.forked_away() {
            // The parent's device in a forked child: its thread does not
            // exist here (a join would wait forever), its locks may be
            // held by threads that do not either, and what it would send
            // is the parent's to send. Leave it all.
            if let Some(t) = self.thread.lock().take() {
                std::mem::forget(t);
            }
            return;
        }
        self.shared.flush_now();
        self.shared.stop();
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
        // A backlog of a full socket leaves too (bounded), not with the
        // device's memory.
        self.shared.drain();
        self.shared.materialize_queued();
        self.shared.say_faults(&self.name);
        if let Some(h) = &self.shared.host {
            h.trace_counters();
        }
    }
}

/// A softrdma device: one address, one UDP socket, one progress thread,
/// and the RNIC state machine. Cloning is cheap; the device closes when the
/// last clone and every object created from it are gone.
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Device({} at {})",
            self.inner.name, self.inner.shared.local
        )
    }
}

/// Entries of a port's GID table (see [`softrdma_config::GID_TABLE_LEN`]).
pub const GID_TABLE_LEN: u32 = softrdma_config::GID_TABLE_LEN;

/// Port attributes (`ibv_port_attr`, the parts that mean something here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortAttr {
    /// Active MTU in bytes.
    pub active_mtu: u32,
    /// Largest MTU in bytes.
    pub max_mtu: u32,
    /// Entries of the GID table ([`GID_TABLE_LEN`]; only index 0, the
    /// device's address, is populated).
    pub gid_tbl_len: u32,
    /// Entries of the P_Key table (one: 0xffff).
    pub pkey_tbl_len: u16,
}

impl Device {
    /// Opens a device (binds the socket, starts the progress thread).
    pub fn open(opts: DeviceOptions) -> Result<Device> {
        let mut settings = DeviceSettings::new(&opts, crate::config::global()?)?;
        let mtu = settings.mtu.value;
        if !MTU_RANGE.contains(&mtu) {
            return Err(Error::InvalidArgument(format!(
                "MTU {mtu} outside 256..=4096"
            )));
        }
        crate::fork::watch();
        let explicit = resolve(&settings.addr)?;
        // An address named: shared with the other processes that name it
        // (see `host`), or this process's alone when no device process
        // can run. A free loopback address picked for us: ours alone.
        let (socket, host) = match explicit
            .filter(|_| !opts.exclusive)
            .map(|ip| crate::host::member::Member::join(SocketAddr::new(ip, opts.port), &opts))
        {
            Some(Ok((socket, member))) => (socket, Some(Arc::new(member))),
            _ => (bind(&opts, explicit)?, None),
        };
        let local = socket.local_addr();
        // Nothing set the MTU: the port's follows the interface's.
        let link = (settings.mtu.source == Source::Default)
            .then(|| netdev_of(local.ip()))
            .flatten();
        if let Some((name, m)) = link
            .as_ref()
            .and_then(|n| Some((n.clone(), link_port_mtu(n)?)))
        {
            settings.mtu = Setting {
                value: m,
                source: Source::Interface(name),
            };
        }
        let mtu = settings.mtu.value;
        // Memory keys, initial PSNs and QP numbers come from a generator
        // keyed by the operating system's randomness.
        let mut key = [0u8; 32];
        getrandom::fill(&mut key)
            .map_err(|e| Error::io("reading OS randomness", std::io::Error::other(e)))?;
        let mut cfg = DeviceConfig::new(local.ip(), 0);
        cfg.key = Some(key);
        // Equal-sized packets towards loopback peers: the GSO runs the
        // engine sends them (see softrdma_proto::WriteChunking).
        if opts.chunk_loopback_writes {
            cfg.write_chunking = softrdma_proto::WriteChunking::LoopbackPeers;
        }
        // SOFTRDMA_TAIL_PROBE=0: no tail-loss probes (a lost tail waits
        // for the transport timer, as before issue 22).
        if std::env::var("SOFTRDMA_TAIL_PROBE").is_ok_and(|v| v == "0") {
            cfg.tail_probe = false;
        }
        cfg.udp_src_port = local.port();
        cfg.udp_dst_port = local.port();
        cfg.port_mtu = mtu;
        let mut core = softrdma_proto::Device::new(cfg);
        if let Some(h) = &host {
            let h = h.clone();
            core.set_qpn_claim(Box::new(move |qpn, claim| h.claim_qpn(qpn, claim)));
        }
        // The core keeps notes (drops, NAKs, state changes) only when the
        // log wants them: off, they cost nothing on the data path.
        core.set_notes(crate::log::notes_wanted());
        // `{addr}` in the path becomes the device's address, so several
        // devices of one process can capture to separate files.
        let pcap_path = settings.pcap.value.as_ref().map(|p| {
            PathBuf::from(
                p.to_string_lossy()
                    .replace("{addr}", &local.ip().to_string()),
            )
        });
        let pcap = match &pcap_path {
            Some(p) => Some(
                crate::pcap::open_shared(p)
                    .map_err(|e| Error::io(format!("creating {}", p.display()), e))?,
            ),
            None => None,
        };
        let name = format!("softrdma{}", device_index(local.ip()));
        // Faults to inject: with the seed they run with (the spec's, else
        // this process's), recorded in the settings and said once.
        let faults = settings
            .faults
            .value
            .as_ref()
            .filter(|f| f.is_active())
            .map(|f| f.with_seed(f.seed.unwrap_or_else(process_fault_seed)));
        if let Some(f) = &faults {
            settings.faults.value = Some(f.clone());
            announce_faults(&name, local, f, &settings.faults.source);
        }
        let mut poller = Poller::new(&socket).map_err(|e| Error::io("creating the poller", e))?;
        if let Some(h) = &host {
            // The device process reads the socket; we read our ring and
            // sleep on the eventfd it writes.
            poller
                .watch_socket(false)
                .and_then(|()| poller.add(h.wake_fd(), HOST_WAKE_TOKEN))
                .map_err(|e| Error::io("creating the poller", e))?;
        }
        let waker = poller.waker();
        let mut group_cfg = SocketConfig::default();
        group_cfg.send_buffer = opts.send_buffer;
        group_cfg.recv_buffer = opts.recv_buffer;
        group_cfg.gro = opts.gro;
        let mcast = crate::mcast::GroupSockets::new(&socket, &poller.registry(), group_cfg)
            .map_err(|e| Error::io("creating the poller", e))?;
        // MADs this device receives go to rdma_cm's driver.
        crate::rdma_cm::driver::install_hook();
        let shared = Arc::new(
            Shared::new(
                core,
                socket,
                waker,
                pcap,
                engine::Tuning {
                    spin: settings.spin.value,
                    gso: opts.gso,
                    refuse_sends: settings.refuse_sends.value,
                    faults,
                },
                mcast,
                host,
            )
            .map_err(|e| Error::io("creating the device", e))?,
        );
        let s2 = shared.clone();
        let serial = shared.serial;
        // Every signal blocked from its first instruction: the program's
        // signals are the program's (DESIGN promise 7).
        let thread = softrdma_io::with_signals_blocked(|| {
            std::thread::Builder::new()
                .name(format!("{name}-progress"))
                .spawn(move || engine::run(s2, poller))
        })
        .map_err(|e| Error::io("starting the progress thread", e))?;
        let dev = Device {
            inner: Arc::new(DeviceInner {
                shared,
                thread: Mutex::new(Some(thread)),
                name,
                settings,
                link,
            }),
        };
        let mut open = open_list();
        open.retain(|(_, w)| w.strong_count() > 0);
        open.push((serial, Arc::downgrade(&dev.inner)));
        drop(open);
        static AT_EXIT: std::sync::Once = std::sync::Once::new();
        AT_EXIT.call_once(|| {
            softrdma_io::at_exit(flush_all_at_exit);
        });
        Ok(dev)
    }

    /// The devices of this process that are open now, in the order they
    /// were opened.
    pub fn open_devices() -> Vec<Device> {
        let open = open_list();
        let v: Vec<Device> = open
            .iter()
            .filter_map(|(_, w)| w.upgrade().map(|inner| Device { inner }))
            .collect();
        drop(open);
        v
    }

    /// The open device with this serial number.
    pub(crate) fn by_serial(serial: u64) -> Option<Device> {
        let open = open_list();
        let d = open
            .iter()
            .find(|(s, _)| *s == serial)
            .and_then(|(_, w)| w.upgrade().map(|inner| Device { inner }));
        drop(open);
        d
    }

    /// Whether the device is shared with other processes (a device
    /// process owns its socket; see the `host` module), and if so who
    /// shares it: one entry per open device, this one included. `None`: the
    /// device is this process's alone.
    pub fn sharers(&self) -> Option<Result<Vec<crate::host::MemberInfo>>> {
        let h = self.inner.shared.host.as_ref()?;
        Some(
            h.members()
                .map_err(|e| Error::io("asking the device process", e)),
        )
    }

    /// What the same-host path carried for this device (see
    /// `host::path`): `None` when the device is not shared or the path is
    /// off (`SOFTRDMA_SAME_HOST=udp`).
    pub fn same_host_counters(&self) -> Option<crate::host::SameHostCounters> {
        self.inner.shared.host.as_ref()?.same_host_counters()
    }

    /// The pid of the device process of a shared device.
    pub fn host_pid(&self) -> Option<i32> {
        self.inner.shared.host.as_ref().map(|h| h.host_pid)
    }

    /// The device's number in this process (never reused).
    pub(crate) fn serial(&self) -> u64 {
        self.inner.shared.serial
    }

    /// Whether two handles are the same device.
    pub fn same_device(&self, other: &Device) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Opens a device with default options.
    pub fn open_default() -> Result<Device> {
        Device::open(DeviceOptions::default())
    }

    /// The engine. In a forked child, the parent's device cannot be used:
    /// this panics (the C library turns the panic into EIO), before any
    /// lock of it is taken.
    pub(crate) fn shared(&self) -> &Shared {
        let s = &self.inner.shared;
        if s.forked_away() {
            parent_device_in_child(&self.inner.name);
        }
        s
    }

    /// Whether the device belongs to the parent of this (forked) process:
    /// then nothing of it may be used (rdma-core's rule for a child:
    /// resources created before `fork` are the parent's). A child opens
    /// devices of its own.
    pub fn forked_away(&self) -> bool {
        self.inner.shared.forked_away()
    }

    /// What the destructor of one of the device's objects does: `f` on the
    /// core, under its lock; nothing in a forked child (the objects are the
    /// parent's, see [`Device::forked_away`]).
    pub(crate) fn release<R>(&self, f: impl FnOnce(&mut softrdma_proto::Device) -> R) -> Option<R> {
        if self.forked_away() {
            return None;
        }
        Some(self.shared().with_core(|c, _| f(c)))
    }

    /// Name, `softrdma<N>`.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// What the device was opened with, and where each value came from.
    pub fn settings(&self) -> &DeviceSettings {
        &self.inner.settings
    }

    /// The address and UDP port the device sends from and receives on.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.shared.local
    }

    /// GID index 0: the RoCE v2 GID of the address (`::ffff:a.b.c.d` for IPv4).
    pub fn gid(&self) -> [u8; 16] {
        gid_of(self.local_addr().ip())
    }

    /// Device attributes.
    pub fn query_device(&self) -> DeviceAttr {
        self.shared().peek_core(|c| c.query_device())
    }

    /// Port attributes. The active MTU follows the interface's now, unless
    /// an MTU was configured ([`DeviceOptions::mtu`]).
    pub fn query_port(&self) -> PortAttr {
        if let Some(m) = self.inner.link.as_deref().and_then(link_port_mtu) {
            if self.shared().peek_core(|c| c.config().port_mtu) != m {
                self.shared().peek_core_mut(|c| c.set_port_mtu(m));
            }
        }
        let mtu = self.shared().peek_core(|c| c.config().port_mtu);
        PortAttr {
            active_mtu: mtu,
            max_mtu: 4096,
            gid_tbl_len: GID_TABLE_LEN,
            pkey_tbl_len: 1,
        }
    }

    /// The device's clock: nanoseconds since it was opened, the time base
    /// of completion timestamps ([`CompletionQueue::poll_stamped`]); a
    /// 64-bit counter that never wraps in practice.
    ///
    /// [`CompletionQueue::poll_stamped`]: crate::CompletionQueue::poll_stamped
    pub fn clock_ns(&self) -> u64 {
        self.shared().now().0
    }

    /// Counters of the device (every QP's included).
    pub fn counters(&self) -> Counters {
        self.shared().peek_core(|c| c.counters())
    }

    /// The faults injected so far on the device's datagrams
    /// (`SOFTRDMA_FAULTS`; all zero without). Counted apart from
    /// [`Device::counters`], which are the transport's.
    pub fn fault_counters(&self) -> softrdma_link::FaultCounters {
        self.shared().fault_counters()
    }

    /// Datagrams the socket refused and the engine had to drop.
    pub fn tx_dropped(&self) -> u64 {
        self.shared()
            .tx_dropped
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Statistics of the device's socket (send errors, receive-queue drops,
    /// GSO state).
    pub fn socket_stats(&self) -> softrdma_io::Stats {
        self.shared().socket.stats()
    }

    /// A random 24-bit PSN for a new connection.
    pub fn random_psn(&self) -> softrdma_wire::Psn {
        self.shared().with_core(|c, _| c.random_psn())
    }

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        let id = self.shared().with_core(|c, _| c.alloc_pd())?;
        Ok(ProtectionDomain::new(self.clone(), id))
    }

    /// `ibv_create_cq` (with a completion channel, if given).
    pub fn create_cq(
        &self,
        depth: u32,
        channel: Option<&CompletionChannel>,
    ) -> Result<CompletionQueue> {
        let id = self.shared().with_core(|c, _| c.create_cq(depth))?;
        if let Some(ch) = channel {
            self.shared().channels.lock().insert(id, ch.inner.clone());
        }
        Ok(CompletionQueue::new(self.clone(), id, channel.cloned()))
    }

    /// `ibv_create_comp_channel`.
    pub fn create_comp_channel(&self) -> Result<CompletionChannel> {
        CompletionChannel::new(Arc::downgrade(&self.inner.shared))
    }

    /// The next asynchronous event, if any (`ibv_get_async_event` without
    /// blocking).
    pub fn poll_async_event(&self) -> Option<AsyncEvent> {
        self.shared().async_events.pop()
    }

    /// Waits up to `timeout` for an asynchronous event.
    pub fn get_async_event(&self, timeout: Option<Duration>) -> Result<Option<AsyncEvent>> {
        crate::event::take_blocking(
            timeout,
            || self.poll_async_event(),
            |left| {
                self.about_to_block();
                self.wait_async_event(left)
            },
        )
    }

    /// Tells the device a program thread is about to block (on one of its
    /// descriptors): the progress thread takes over at once.
    pub fn about_to_block(&self) {
        self.shared().app_idle();
    }

    /// Waits up to `timeout` (forever with `None`) until an asynchronous
    /// event is pending, without taking it; returns whether one is. Holds
    /// no lock while it waits and is a cancellation point, as libibverbs'
    /// `ibv_get_async_event` (see [`CompletionChannel::wait`]).
    pub fn wait_async_event(&self, timeout: Option<Duration>) -> Result<bool> {
        self.shared()
            .async_events
            .fd
            .wait(timeout)
            .map_err(|e| Error::io("waiting for an async event", e))
    }

    /// A file descriptor readable while an asynchronous event is pending.
    pub fn async_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.shared().async_events.fd)
    }

    /// Receives and processes whatever has arrived, in the calling thread.
    /// Returns the number of datagrams processed. Programs that spin on
    /// memory rather than on a CQ may call this in their loop; it is never
    /// needed for correctness (the progress thread does the same).
    pub fn progress(&self) -> usize {
        self.shared().progress_inline()
    }

    /// For tests of the poll path: how many times the device's core lock
    /// was taken, (by anything but CQ polls, by CQ polls), since it opened.
    #[doc(hidden)]
    pub fn lock_counts(&self) -> (u64, u64) {
        self.shared().lock_counts()
    }
}

/// Unwinds out of a call on a parent's device in a forked child (the C
/// library's guard turns it into EIO), after one line on stderr. Not a
/// `panic!`: the panic hook (a backtrace takes the dynamic loader's lock)
/// has no place in a child that may hold a copy of a lock taken by a
/// thread of its parent.
#[cold]
#[inline(never)]
fn parent_device_in_child(name: &str) -> ! {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        let line = format!(
            "softrdma: {name} belongs to the parent of this forked process and cannot be used \
             here (open a device of the child's own)\n"
        );
        let _ = softrdma_io::sys_write(2, line.as_bytes());
    }
    std::panic::resume_unwind(Box::new("a device of the parent process"))
}

/// At normal process exit, every open device sends what it still holds
/// (see `Shared::drain`): a program that exits right after a poll
/// that received a request must not take the answer — an ACK, a READ
/// response, the NAK that moved its QP to the error state — with it.
extern "C" fn flush_all_at_exit() {
    crate::log::exiting();
    let _ = std::panic::catch_unwind(|| {
        // Another thread may hold the list (it never blocks while holding
        // it): a few tries.
        for _ in 0..50 {
            if let Ok(open) = OPEN.try_lock() {
                let devs: Vec<Arc<DeviceInner>> =
                    open.iter().filter_map(|(_, w)| w.upgrade()).collect();
                drop(open);
                for d in &devs {
                    // (Not a forked child's copy of its parent's.)
                    d.shared.drain();
                    d.shared.say_faults(&d.name);
                    if let (Some(h), false) = (&d.shared.host, d.shared.forked_away()) {
                        h.trace_counters();
                    }
                }
                // Dropping the last handle here would close the device from
                // an exit handler: leave them to the process's end.
                for d in devs {
                    std::mem::forget(d);
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// The seed of fault specs that name none: drawn from the operating
/// system once per process, so every device of a process replays with the
/// one seed it prints.
fn process_fault_seed() -> u64 {
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SEED.get_or_init(|| {
        let mut b = [0u8; 8];
        // Without OS randomness the time still varies from run to run.
        if getrandom::fill(&mut b).is_err() {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            b = (t.as_nanos() as u64 ^ std::process::id() as u64).to_le_bytes();
        }
        u64::from_le_bytes(b)
    })
}

/// Says on stderr, once per process and spec, that a device injects
/// faults, and with which seed: a user sees that a run was not on a clean
/// link, and how to replay it (`seed=N` in `SOFTRDMA_FAULTS`).
fn announce_faults(
    name: &str,
    local: SocketAddr,
    spec: &crate::config::FaultSpec,
    source: &crate::config::Source,
) {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let text = spec.to_string();
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if said.contains(&text) {
        return;
    }
    said.push(text.clone());
    drop(said);
    let line = format!(
        "softrdma: {name} ({}) injects faults: {text} ({source}; replay with this seed=)\n",
        local.ip()
    );
    let _ = softrdma_io::sys_write(2, line.as_bytes());
}

/// A small number derived from the address, for the device name.
fn device_index(ip: IpAddr) -> u32 {
    match ip {
        IpAddr::V4(a) if a.is_loopback() => u32::from(a) & 0x00ff_ffff,
        _ => 0,
    }
    .saturating_sub(1)
}
