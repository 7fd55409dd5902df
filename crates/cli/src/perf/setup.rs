//! One side of a run: the device, its verbs objects, the connection to the
//! peer's QPs, and where in each QP's buffer what lives.

use super::ctrl::Ctrl;
use super::params::{Conn, Op, Params, Test, ATOMIC_INIT, GRH_LEN};
use super::pattern;
use super::Error;
use softrdma::cm::{self, ConnInfo};
use softrdma::{
    Access, AddressHandle, CompletionQueue, ConnectOptions, Device, DeviceOptions, MemoryRegion,
    Mtu, ProtectionDomain, QKey, QueuePair, UdDest,
};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

/// Bytes of the WRITE/READ buffers of all QPs before messages share slots:
/// each outstanding message gets its own slot up to this total.
const BW_SLOT_BYTES: u64 = 16 << 20;
/// Bytes of the receive buffers of all QPs (SEND tests) before receives
/// share them.
const RECV_BYTES: u64 = 32 << 20;
/// Q_Key of the UD QPs.
pub const QKEY: QKey = QKey(0x1111_1111);

/// How to open the device.
#[derive(Clone, Debug, Default)]
pub struct DeviceChoice {
    /// Explicit address (`-d`); else `SOFTRDMA_ADDR`, else a free loopback one.
    pub addr: Option<IpAddr>,
    /// Ignore `SOFTRDMA_ADDR` and take a free loopback address (`--loopback`).
    pub loopback: bool,
    /// Port MTU.
    pub mtu: u32,
    /// Capture file.
    pub pcap: Option<PathBuf>,
}

/// Opens the device.
pub fn open_device(c: &DeviceChoice) -> Result<Device, Error> {
    let base = DeviceOptions {
        mtu: Some(c.mtu),
        pcap: c.pcap.clone(),
        ..Default::default()
    };
    if c.loopback && c.addr.is_none() {
        // Pick explicitly so that SOFTRDMA_ADDR cannot put both ends of a
        // loopback run on one address.
        for x in 1..=254u8 {
            let o = DeviceOptions {
                addr: Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, x))),
                // Two ends on two addresses, each the process's own.
                exclusive: true,
                ..base.clone()
            };
            match Device::open(o) {
                Ok(d) => return Ok(d),
                Err(softrdma::Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::AddrInUse =>
                {
                    continue
                }
                Err(e) => return Err(Error::Failed(format!("opening a device: {e}"))),
            }
        }
        return Err(Error::Failed(
            "no free loopback address 127.0.0.1..254 for a device".into(),
        ));
    }
    let o = DeviceOptions {
        addr: c.addr,
        ..base
    };
    Device::open(o).map_err(|e| Error::Failed(format!("opening a device: {e}")))
}

/// Where things live in each QP's buffer (the same on both sides).
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// Bytes of each QP's region.
    pub mr_len: usize,
    /// SEND tests: receive slots start here; WRITE latency: the peer's
    /// WRITEs land here.
    pub recv_off: usize,
    /// SEND tests: distance between receive slots.
    pub recv_stride: usize,
    /// SEND tests: receive slots per QP.
    pub recv_slots: usize,
}

fn round64(n: u64) -> u64 {
    n.div_ceil(64) * 64
}

/// Slots of a WRITE/READ bandwidth buffer for `size`: one per outstanding
/// message, as long as all QPs' fit in [`BW_SLOT_BYTES`].
pub fn bw_slots(p: &Params, size: u64) -> u64 {
    (BW_SLOT_BYTES / p.qps.max(1) as u64 / size).clamp(1, p.tx_depth as u64)
}

impl Layout {
    /// The layout of a run.
    pub fn of(p: &Params) -> Layout {
        let max = p.max_size();
        let mut l = Layout {
            mr_len: 0,
            recv_off: 0,
            recv_stride: 0,
            recv_slots: 0,
        };
        match (p.test.op(), p.test.is_lat()) {
            (Op::Write | Op::Read, false) => {
                l.mr_len = p
                    .sizes
                    .iter()
                    .map(|s| s.size * bw_slots(p, s.size))
                    .max()
                    .unwrap_or(0) as usize;
            }
            (Op::Write, true) => {
                l.recv_off = round64(max) as usize;
                l.mr_len = 2 * l.recv_off;
            }
            (Op::Read, true) => l.mr_len = max as usize,
            (Op::Send, _) => {
                let grh = if p.conn == Conn::Ud { GRH_LEN } else { 0 };
                let stride = round64(max + grh);
                l.recv_off = round64(max) as usize;
                l.recv_stride = stride as usize;
                l.recv_slots = (RECV_BYTES / p.qps.max(1) as u64 / stride)
                    .clamp(1, p.rx_depth as u64) as usize;
                l.mr_len = l.recv_off + l.recv_slots * l.recv_stride;
            }
            (Op::Atomic, _) => l.mr_len = (p.tx_depth as usize * 8).max(64),
        }
        l
    }
}

/// One side, connected.
pub struct Side {
    /// What connecting cost.
    pub setup: SetupCost,
    /// The device.
    pub dev: Device,
    /// The protection domain.
    pub pd: ProtectionDomain,
    /// One CQ for sends and receives of every QP.
    pub cq: CompletionQueue,
    /// The QPs.
    pub qps: Vec<QueuePair>,
    /// One region per QP.
    pub mrs: Vec<MemoryRegion>,
    /// What this side sent in the exchange.
    pub local: Vec<ConnInfo>,
    /// What the peer sent.
    pub remote: Vec<ConnInfo>,
    /// UD: the address handle of the peer.
    pub ah: Option<AddressHandle>,
    /// QP number → index.
    pub index: HashMap<u32, usize>,
    /// This side is the server.
    pub server: bool,
    /// The run.
    pub params: Params,
    /// Buffer layout.
    pub layout: Layout,
    /// Path MTU in bytes after the exchange.
    pub path_mtu: u32,
    /// Waiting loops yield the CPU while nothing happens (see
    /// [`SpinMode`]).
    pub yield_idle: bool,
}

/// How waiting loops wait (`--spin`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SpinMode {
    /// Yield when this host runs more spinning threads than it has cores:
    /// both ends on one host (`--loopback`, or a peer on this host) with
    /// fewer than 4 cores.
    Auto,
    /// Spin without ever giving up the CPU (perftest's way; best when every
    /// spinning thread has a core of its own).
    Busy,
    /// Spin, but yield the CPU on idle rounds.
    Yield,
}

impl SpinMode {
    /// Whether to yield, for a peer at `peer` seen from `local`.
    pub fn yields(self, local: IpAddr, peer: IpAddr) -> bool {
        match self {
            SpinMode::Busy => false,
            SpinMode::Yield => true,
            SpinMode::Auto => {
                let same_host = peer.is_loopback() || peer == local;
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                same_host && cores < 4
            }
        }
    }
}

/// What connecting the QPs cost: time (creation, the exchange with the
/// peer, the moves to RTS) and the resident memory it added, before any
/// buffer is touched.
#[derive(Clone, Copy, Debug)]
pub struct SetupCost {
    /// QPs connected.
    pub qps: usize,
    /// Seconds it took.
    pub seconds: f64,
    /// Resident memory it added.
    pub rss_bytes: u64,
}

impl SetupCost {
    /// Connection setup rate.
    pub fn qps_per_s(&self) -> f64 {
        self.qps as f64 / self.seconds.max(1e-9)
    }
    /// Resident memory per QP.
    pub fn rss_per_qp(&self) -> u64 {
        self.rss_bytes / self.qps.max(1) as u64
    }
}

/// The process's resident memory (/proc/self/statm), 0 when unknown.
fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

impl Side {
    /// Creates the QPs and regions, exchanges with the peer over `ctrl`,
    /// and moves every QP to RTS.
    pub fn connect(
        dev: Device,
        ctrl: &mut Ctrl,
        p: &Params,
        server: bool,
        spin: SpinMode,
    ) -> Result<Side, Error> {
        let layout = Layout::of(p);
        let pd = dev.alloc_pd()?;
        let q = p.qps as usize;
        let cqe = (q as u64 * (p.tx_depth as u64 + p.rx_depth as u64) + 64).min(1 << 20);
        let cq = dev.create_cq(cqe as u32, None)?;
        let access = Access::LOCAL_WRITE
            .with(Access::REMOTE_WRITE)
            .with(Access::REMOTE_READ)
            .with(Access::REMOTE_ATOMIC);
        let mut qps = Vec::with_capacity(q);
        let mut mrs = Vec::with_capacity(q);
        let mut local = Vec::with_capacity(q);
        let mtu_wish = p.mtu.min(dev.query_port().active_mtu);
        let mtu = Mtu::from_bytes_floor(mtu_wish).unwrap_or(Mtu::M256);
        // The buffers first: the setup figures are the QPs' own.
        for _ in 0..q {
            let mr = pd.alloc_mr(layout.mr_len, access).map_err(|e| {
                Error::Failed(format!("allocating a {} byte buffer: {e}", layout.mr_len))
            })?;
            mrs.push(mr);
        }
        let started = std::time::Instant::now();
        let rss_before = resident_bytes();
        for mr in &mrs {
            let qp = pd
                .qp_builder(p.conn.qp_type(), &cq, &cq)
                .max_send_wr(p.tx_depth.max(2))
                .max_recv_wr(p.rx_depth)
                .max_send_sge(1)
                .max_recv_sge(1)
                .build()?;
            let psn = dev.random_psn();
            local.push(cm::local_info(&dev, &qp, psn, Some(mr), mtu));
            qps.push(qp);
        }
        let remote = cm::exchange(&mut ctrl.stream, &local)?;
        if remote.len() != q {
            return Err(Error::Failed(format!(
                "the peer offered {} QPs, expected {q}",
                remote.len()
            )));
        }
        let dev_attr = dev.query_device();
        let path_mtu = remote
            .iter()
            .map(|r| r.mtu)
            .chain([mtu.bytes()])
            .min()
            .unwrap_or(256);
        let opts = ConnectOptions {
            mtu: Mtu::from_bytes_floor(path_mtu).unwrap_or(Mtu::M256),
            max_rd_atomic: {
                let a = dev_attr;
                p.outs.min(a.max_qp_rd_atom).min(a.max_qp_init_rd_atom) as u8
            },
            qkey: QKEY,
            ..Default::default()
        };
        for (i, qp) in qps.iter().enumerate() {
            if p.conn != Conn::Ud && (remote[i].len as usize) < layout.mr_len {
                return Err(Error::Failed(format!(
                    "the peer's buffer of QP {i} has {} bytes, {} needed (different versions?)",
                    remote[i].len, layout.mr_len
                )));
            }
            qp.connect(local[i].psn, &remote[i].endpoint(), &opts)?;
        }
        let ah = if p.conn == Conn::Ud {
            if p.max_size() > path_mtu as u64 {
                return Err(Error::Usage(format!(
                    "a UD message must fit one packet: size {} exceeds the path MTU {path_mtu}",
                    p.max_size()
                )));
            }
            Some(pd.create_ah_for_gid(remote[0].gid)?)
        } else {
            None
        };
        let index = qps
            .iter()
            .enumerate()
            .map(|(i, qp)| (qp.qpn().value(), i))
            .collect();
        // Before `fill` touches the buffers: what the QPs themselves cost.
        let setup = SetupCost {
            qps: q,
            seconds: started.elapsed().as_secs_f64(),
            rss_bytes: resident_bytes().saturating_sub(rss_before),
        };
        let side = Side {
            setup,
            dev,
            pd,
            cq,
            qps,
            mrs,
            local,
            remote,
            ah,
            index,
            server,
            params: p.clone(),
            layout,
            path_mtu,
            yield_idle: match (ctrl.stream.local_addr(), ctrl.stream.peer_addr()) {
                (Ok(l), Ok(r)) => spin.yields(l.ip(), r.ip()),
                _ => spin == SpinMode::Yield,
            },
        };
        side.fill();
        cm::barrier(&mut ctrl.stream)?;
        Ok(side)
    }

    /// The seed of this side's data on QP `i`.
    pub fn seed(&self, i: usize) -> u64 {
        pattern::seed(self.server, i)
    }

    /// The seed of the peer's data on QP `i`.
    pub fn peer_seed(&self, i: usize) -> u64 {
        pattern::seed(!self.server, i)
    }

    /// Puts the data each test sends into place (and, with the test hook,
    /// damages it).
    fn fill(&self) {
        let p = &self.params;
        let max = p.max_size() as usize;
        for (i, mr) in self.mrs.iter().enumerate() {
            let s = self.seed(i);
            match (p.test, self.server) {
                (Test::WriteBw, false) | (Test::ReadBw | Test::ReadLat, true) => {
                    pattern::write_pattern(mr, s, 0, mr.len())
                }
                (Test::WriteLat, _) | (Test::SendLat, _) | (Test::SendBw, false) => {
                    pattern::write_pattern(mr, s, 0, max)
                }
                (Test::AtomicBw | Test::AtomicLat, true) => {
                    mr.atomic_u64(0)
                        .store(atomic_init(i), std::sync::atomic::Ordering::SeqCst);
                }
                _ => {}
            }
        }
        if p.corrupt {
            // The test hook: the source of the data is wrong, so whoever
            // checks it must notice.
            let mr = &self.mrs[0];
            let source_here = match p.test.op() {
                Op::Write | Op::Send => !self.server,
                Op::Read | Op::Atomic => self.server,
            };
            if source_here {
                if p.test.op() == Op::Atomic {
                    mr.atomic_u64(0)
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                } else {
                    let b = mr.load_u8(0);
                    mr.write(0, &[b ^ 0x5a]);
                }
            }
        }
    }

    /// The UD destination of QP `i`'s peer.
    pub fn ud_dest(&self, i: usize) -> Option<UdDest> {
        self.ah.as_ref().map(|ah| UdDest {
            ah: ah.id(),
            remote_qpn: self.remote[i].qpn,
            remote_qkey: QKEY,
        })
    }
}

/// First value of the atomic counter of QP `i`.
pub fn atomic_init(i: usize) -> u64 {
    ATOMIC_INIT + ((i as u64) << 32)
}
