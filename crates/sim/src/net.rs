//! The simulated network: nodes running a [`Device`], a virtual clock, and a
//! link model with seeded loss, duplication, reordering, single-bit
//! corruption, delay, jitter and an MTU. The dice and the wire are
//! softrdma-link's ([`softrdma_link::fate`], [`softrdma_link::DelayQueue`]),
//! which the engine's fault injector (`SOFTRDMA_FAULTS`) runs on real
//! sockets.

use softrdma_link::{fate, DelayQueue, Rates, Rng};
use softrdma_proto::{Device, DeviceConfig, Instant, RecvMeta};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Impairments applied to every datagram, each draw from the seeded RNG.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkConfig {
    /// Probability a datagram is lost.
    pub loss: f64,
    /// Probability a datagram is delivered twice.
    pub duplicate: f64,
    /// Probability a datagram is held back by `reorder_delay_ns`.
    pub reorder: f64,
    /// Extra delay of a reordered datagram.
    pub reorder_delay_ns: u64,
    /// Probability one random bit of the datagram is flipped.
    pub corrupt: f64,
    /// One-way delay.
    pub delay_ns: u64,
    /// Uniform extra delay in `0..=jitter_ns` (can reorder datagrams too).
    pub jitter_ns: u64,
    /// Largest IP datagram the link carries; larger ones are dropped.
    pub mtu: usize,
    /// When non-zero, every packet whose BTH PSN is a multiple of this is
    /// held back by `reorder_delay_ns` (a deterministic reordering, like a
    /// slow lane that a hash sends some packets through).
    pub reorder_psn_mod: u32,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay_ns: 20_000,
            corrupt: 0.0,
            delay_ns: 5_000,
            jitter_ns: 0,
            mtu: 9000,
            reorder_psn_mod: 0,
        }
    }
}

impl LinkConfig {
    /// The impairments as softrdma-link's rates (the MTU is the
    /// simulator's own).
    pub fn rates(&self) -> Rates {
        Rates {
            loss: self.loss,
            duplicate: self.duplicate,
            reorder: self.reorder,
            reorder_every: self.reorder_psn_mod,
            reorder_delay_ns: self.reorder_delay_ns,
            corrupt: self.corrupt,
            delay_ns: self.delay_ns,
            jitter_ns: self.jitter_ns,
        }
    }
}

/// What the link did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Datagrams handed to the link.
    pub sent: u64,
    /// Datagrams delivered (duplicates included).
    pub delivered: u64,
    /// Lost on purpose.
    pub lost: u64,
    /// Delivered twice.
    pub duplicated: u64,
    /// Held back.
    pub reordered: u64,
    /// Had a bit flipped.
    pub corrupted: u64,
    /// Dropped for exceeding the MTU.
    pub too_big: u64,
    /// Sent to an address no node has.
    pub no_route: u64,
    /// Dropped because the receiving node's queue was full
    /// ([`Sim::rx_queue_limit`]: a socket buffer's tail drop).
    pub queue_drops: u64,
    /// Dropped by [`Sim::drop_filter`].
    pub filtered: u64,
}

/// A node: one device at one address.
pub struct Node {
    /// The RNIC.
    pub dev: Device,
    /// Its address.
    pub ip: IpAddr,
}

/// IP + UDP header bytes counted against the link MTU.
fn overhead(ip: IpAddr) -> usize {
    if ip.is_ipv4() {
        28
    } else {
        48
    }
}

/// A datagram as handed to the link: time, source, destination, UDP payload.
pub type TraceEntry = (Instant, IpAddr, SocketAddr, Vec<u8>);

/// A simulated network.
pub struct Sim {
    /// Virtual time.
    pub now: Instant,
    /// The nodes.
    pub nodes: Vec<Node>,
    /// Link impairments (may be changed between steps).
    pub link: LinkConfig,
    /// What the link did.
    pub stats: NetStats,
    rng: Rng,
    /// Datagrams on the wire: (destination node, metadata).
    inflight: DelayQueue<(usize, RecvMeta)>,
    buf: Vec<u8>,
    /// When set, every datagram handed to the link (before impairments) is
    /// recorded: (time, source, destination, UDP payload).
    pub trace: Option<Vec<TraceEntry>>,
    /// Print every datagram and its fate to stderr (env `SOFTRDMA_SIM_TRACE`).
    pub print: bool,
    /// When set, a node holds at most this many datagrams on their way to
    /// it (its socket's receive buffer): more are dropped at the tail, as
    /// a kernel drops datagrams for a full socket. The link has no
    /// bandwidth limit, so a burst arrives all at once.
    pub rx_queue_limit: Option<usize>,
    /// When set, every datagram (UDP payload) for which it returns true is
    /// dropped: targeted losses.
    pub drop_filter: Option<DropFilter>,
    /// When set, every datagram (UDP payload) is delayed by the extra ns
    /// it returns: targeted lateness (an ACK held up by a peer that does
    /// not run).
    pub delay_filter: Option<DelayFilter>,
    /// Datagrams on their way to each node.
    queued: Vec<usize>,
    /// Per node: until when it is paused (see [`Sim::pause`]).
    paused_until: Vec<Instant>,
    /// Per node: datagrams that arrived while it was paused, in order.
    held: Vec<std::collections::VecDeque<(RecvMeta, Vec<u8>)>>,
    /// When a paused node resumes, its due timers run before it receives
    /// what arrived meanwhile (the engine's order before issue 22's fix:
    /// a program thread's poll ran timers first); otherwise the other
    /// way round (the simulator's order for a running node, and the
    /// engine's: it reads the socket before it runs a due timer).
    pub timers_first_after_pause: bool,
}

/// See [`Sim::drop_filter`].
pub type DropFilter = Box<dyn FnMut(&[u8]) -> bool>;
/// See [`Sim::delay_filter`].
pub type DelayFilter = Box<dyn FnMut(&[u8]) -> u64>;

impl Sim {
    /// An empty network with a seed for the link's dice.
    pub fn new(seed: u64, link: LinkConfig) -> Self {
        Sim {
            now: Instant(0),
            nodes: Vec::new(),
            link,
            stats: NetStats::default(),
            rng: Rng::new(seed ^ 0x5eed_0f11_7e57_1e55),
            inflight: DelayQueue::new(),
            buf: vec![0; softrdma_proto::device::MIN_TX_BUF],
            trace: None,
            print: std::env::var_os("SOFTRDMA_SIM_TRACE").is_some(),
            rx_queue_limit: None,
            drop_filter: None,
            delay_filter: None,
            queued: Vec::new(),
            paused_until: Vec::new(),
            held: Vec::new(),
            timers_first_after_pause: false,
        }
    }

    /// Adds a node at 10.0.0.(index+1) (or `ip`), with a device seeded from
    /// `seed`; returns its index.
    pub fn add_node(&mut self, seed: u64, ip: Option<IpAddr>) -> usize {
        let i = self.nodes.len();
        let ip = ip.unwrap_or(IpAddr::V4(Ipv4Addr::new(
            10,
            0,
            (i >> 8) as u8,
            (i & 0xff) as u8 + 1,
        )));
        let mut cfg = DeviceConfig::new(ip, seed);
        // The simulator delivers exactly what was sent, identification 0
        // included: keep the ICRC at full strength against its corruption.
        cfg.infer_ipv4_ident = false;
        // Half the nodes send multi-packet RC WRITEs as one WRITE ONLY per
        // packet (what the engine does towards loopback peers): both
        // segmentations meet every responder.
        if (seed >> 7) & 1 == 1 {
            cfg.write_chunking = softrdma_proto::WriteChunking::Always;
        }
        let dev = Device::new(cfg);
        self.nodes.push(Node { dev, ip });
        self.queued.push(0);
        self.paused_until.push(Instant(0));
        self.held.push(std::collections::VecDeque::new());
        i
    }

    /// Node `node` does nothing until `until`: it neither sends, nor
    /// receives, nor runs its timers (a process the scheduler does not
    /// run). What reaches it meanwhile waits in its queue, where
    /// [`Sim::rx_queue_limit`] drops the excess at the tail, and is
    /// received when it resumes.
    pub fn pause(&mut self, node: usize, until: Instant) {
        let p = &mut self.paused_until[node];
        *p = (*p).max(until);
    }

    fn paused(&self, node: usize) -> bool {
        self.paused_until[node] > self.now
    }

    fn node_of(&self, ip: IpAddr) -> Option<usize> {
        self.nodes.iter().position(|n| n.ip == ip)
    }

    fn schedule(&mut self, at: Instant, to: usize, meta: RecvMeta, data: Vec<u8>) {
        self.queued[to] += 1;
        self.inflight.push(at.0, (to, meta), data);
    }

    /// Hands one datagram (a UDP payload) from node `from` to the link, as
    /// [`Sim::flush`] does for what a device transmits; the CM runs
    /// (`cm_pairs`) send their MADs, built by [`Device::emit_gsi`], this way.
    pub fn send(&mut self, from: usize, dst: SocketAddr, tclass: u8, hop: u8, mut data: Vec<u8>) {
        let src_ip = self.nodes[from].ip;
        if let Some(t) = &mut self.trace {
            t.push((self.now, src_ip, dst, data.clone()));
        }
        self.stats.sent += 1;
        if self.print {
            eprintln!(
                "{:>12} {}",
                self.now.0,
                describe(
                    src_ip,
                    self.nodes[from].dev.config().udp_src_port,
                    dst,
                    &data
                )
            );
        }
        let Some(to) = self.node_of(dst.ip()) else {
            self.stats.no_route += 1;
            return;
        };
        let l = self.link;
        if data.len() + overhead(dst.ip()) > l.mtu {
            self.stats.too_big += 1;
            return;
        }
        if self.drop_filter.as_mut().is_some_and(|f| f(&data)) {
            self.stats.filtered += 1;
            return;
        }
        if let Some(limit) = self.rx_queue_limit {
            if self.queued[to] >= limit {
                self.stats.queue_drops += 1;
                return;
            }
        }
        let f = fate(&l.rates(), &mut self.rng, &data);
        if f.lost {
            if self.print {
                eprintln!("{:>12}   ^ lost", self.now.0);
            }
            self.stats.lost += 1;
            return;
        }
        if let Some(bit) = f.corrupt_bit {
            data[(bit / 8) as usize] ^= 1 << (bit % 8);
            self.stats.corrupted += 1;
        }
        let delay = f.delay_ns + self.delay_filter.as_mut().map_or(0, |f| f(&data));
        if f.reordered {
            self.stats.reordered += 1;
        }
        let meta = RecvMeta {
            src: SocketAddr::new(src_ip, self.nodes[from].dev.config().udp_src_port),
            dst: dst.ip(),
            len: data.len(),
            traffic_class: tclass,
            hop_limit: hop,
        };
        if let Some(extra) = f.duplicate_after_ns {
            self.stats.duplicated += 1;
            self.schedule(self.now.add_ns(delay + extra), to, meta, data.clone());
        }
        self.schedule(self.now.add_ns(delay), to, meta, data);
    }

    /// Sends everything the devices want to send now.
    pub fn flush(&mut self) {
        // Bounded: each round drains every device; devices produce a finite
        // number of packets per input (windows and queues are bounded).
        loop {
            let mut any = false;
            for i in 0..self.nodes.len() {
                if self.paused(i) {
                    continue;
                }
                while let Some(tx) = self.nodes[i].dev.poll_transmit(self.now, &mut self.buf) {
                    let data = self.buf[..tx.len].to_vec();
                    self.send(i, tx.dst, tx.traffic_class, tx.hop_limit, data);
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
    }

    /// The time of the next thing that will happen, if anything will.
    pub fn next_event(&self) -> Option<Instant> {
        let net = self.inflight.next_due().map(Instant);
        // A paused node's timers and held datagrams wait for its resumption.
        let timers = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| {
                let t = if self.held[i].is_empty() && !n.dev.wants_transmit() {
                    n.dev.poll_timeout()?
                } else {
                    self.now
                };
                Some(t.max(self.paused_until[i]))
            })
            .min();
        match (net, timers) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Sends what is pending, then advances the clock to the next event (no
    /// further than `limit`) and processes everything due then. Returns false
    /// when nothing is left to happen before `limit`.
    pub fn step(&mut self, limit: Instant) -> bool {
        self.flush();
        let Some(t) = self.next_event() else {
            return false;
        };
        if t > limit {
            self.now = limit;
            return false;
        }
        self.now = self.now.max(t);
        // Every datagram due now is delivered before anyone answers, so a
        // burst arriving together gets one coalesced ACK, as a batch receive
        // would.
        while let Some(((to, meta), data)) = self.inflight.pop_due(self.now.0) {
            if self.paused(to) || !self.held[to].is_empty() {
                self.held[to].push_back((meta, data));
                continue;
            }
            self.stats.delivered += 1;
            self.queued[to] -= 1;
            self.nodes[to].dev.handle_datagram(self.now, &meta, &data);
        }
        for i in 0..self.nodes.len() {
            if self.paused(i) {
                continue;
            }
            let resumed = !self.held[i].is_empty();
            if resumed && !self.timers_first_after_pause {
                self.deliver_held(i);
            }
            let n = &mut self.nodes[i];
            if n.dev.poll_timeout().is_some_and(|d| d <= self.now) {
                n.dev.handle_timeout(self.now);
            }
            if resumed {
                self.deliver_held(i);
            }
        }
        true
    }

    /// Hands node `i` what arrived while it was paused.
    fn deliver_held(&mut self, i: usize) {
        while let Some((meta, data)) = self.held[i].pop_front() {
            self.stats.delivered += 1;
            self.queued[i] -= 1;
            self.nodes[i].dev.handle_datagram(self.now, &meta, &data);
        }
    }

    /// Steps until `done` holds (checked after every step) or `limit` passes.
    /// Returns whether `done` held.
    pub fn run_until(&mut self, limit: Instant, mut done: impl FnMut(&mut Sim) -> bool) -> bool {
        loop {
            if done(self) {
                return true;
            }
            if !self.step(limit) {
                self.flush();
                return done(self);
            }
        }
    }

    /// Datagrams on the wire.
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }
}

/// One line for a UDP payload sent from `src:sport` to `dst`.
pub fn describe(src: IpAddr, sport: u16, dst: SocketAddr, payload: &[u8]) -> String {
    use softrdma_wire::ip::{DatagramRepr, IpRepr};
    let Ok(ip) = IpRepr::between(src, dst.ip(), 0) else {
        return "mixed address families".into();
    };
    let d = DatagramRepr::new(ip, sport, dst.port());
    let mut buf = vec![0u8; d.header_len() + payload.len()];
    if d.emit_headers(&mut buf, payload.len()).is_err() {
        return "unencodable".into();
    }
    let h = d.header_len();
    buf[h..].copy_from_slice(payload);
    softrdma_wire::pretty::datagram_line(&buf)
}
