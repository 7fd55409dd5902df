//! `softrdma perf TEST [HOST]`: perftest's eight tools over softrdma.
//!
//! Like perftest, one program is both ends: without HOST it is the server
//! and waits for a client on TCP port `-p` (18515); with HOST it is the
//! client, connects, and measures. `--loopback` runs both ends in this
//! process, each with its own device. The client sends its parameters to
//! the server ([`params`]), both create their QPs and exchange them with
//! `softrdma::cm`, then for each size: the server prepares (clears the
//! buffers that will be written, posts receives), the client runs and
//! measures ([`bw`], [`lat`]), both check the data ([`pattern`]) and the
//! client prints perftest's table row ([`report`]). The control
//! conversation is in [`ctrl`].

pub mod bw;
pub mod ctrl;
pub mod lat;
pub mod ops;
pub mod params;
pub mod pattern;
pub mod report;
pub mod setup;

use ctrl::{Ctrl, REPLY_TIMEOUT};
use ops::Receives;
use params::{AtomicType, Conn, Op, Params, SizeRun, Test};
use pattern::Strict;
use report::{counters, document, num, obj, Json, Progress, RULE};
use setup::{bw_slots, DeviceChoice, Side, SpinMode};
use softrdma::cm;
use softrdma::Device;
use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Why a run failed.
#[derive(Debug)]
pub enum Error {
    /// Bad arguments (exit status 2, like clap's own errors).
    Usage(String),
    /// The peer went away or stopped answering.
    PeerGone(String),
    /// The data that arrived is wrong (every failure, one per line).
    Verify(Vec<String>),
    /// Anything else.
    Failed(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Usage(m) | Error::PeerGone(m) | Error::Failed(m) => f.write_str(m),
            Error::Verify(v) => write!(
                f,
                "data verification failed ({} problem(s), listed above)",
                v.len()
            ),
        }
    }
}

impl std::error::Error for Error {}

impl From<softrdma::Error> for Error {
    fn from(e: softrdma::Error) -> Self {
        match e {
            softrdma::Error::Connect(m) if m.contains("closed") => {
                Error::PeerGone(format!("connection setup: {m}"))
            }
            e => Error::Failed(e.to_string()),
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Failed(format!("writing output: {e}"))
    }
}

impl Error {
    /// The process exit status for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => 2,
            _ => 1,
        }
    }
}

/// Arguments of `softrdma perf`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Run the same test on two hosts: without HOST a test is the server and waits for a client on \
TCP port -p (18515); with HOST it is the client: it connects, sends its parameters (the server \
uses the client's), runs the test and prints the results. --loopback runs both ends in this \
process with no other setup. Every run checks its data and prints the counters of both sides.

Examples:
  softrdma perf write-bw --loopback -a          every size, 2 B .. 8 MiB, in one process
  softrdma perf send-lat                        server, on host A
  softrdma perf send-lat hostA -s 4K -n 10000   client, on host B")]
pub struct Args {
    /// The test.
    #[command(subcommand)]
    pub test: TestCmd,
}

/// The tests.
#[derive(Debug, clap::Subcommand)]
pub enum TestCmd {
    /// RDMA WRITE bandwidth (ib_write_bw): the client WRITEs into the
    /// server's memory, -t at a time per QP; the server's application does
    /// nothing. RC or UC.
    WriteBw(Opts),
    /// RDMA WRITE latency (ib_write_lat): WRITE ping-pong, each side spins on
    /// the last byte of its buffer; reports half the round trip. RC or UC.
    WriteLat(Opts),
    /// RDMA READ bandwidth (ib_read_bw): the client READs the server's
    /// memory, up to -o READs in flight per QP. RC only.
    ReadBw(Opts),
    /// RDMA READ latency (ib_read_lat): one READ at a time; reports the
    /// whole round trip. RC only.
    ReadLat(Opts),
    /// SEND bandwidth (ib_send_bw): the client SENDs, the server keeps -r
    /// receives posted. RC, UC or UD (UD: a message fits one MTU).
    SendBw(Opts),
    /// SEND latency (ib_send_lat): SEND ping-pong; reports half the round
    /// trip. RC, UC or UD.
    SendLat(Opts),
    /// Atomic bandwidth (ib_atomic_bw): FETCH_AND_ADD or CMP_AND_SWAP on an
    /// 8-byte counter in the server's memory, -t at a time. RC only.
    AtomicBw(Opts),
    /// Atomic latency (ib_atomic_lat): one atomic at a time. RC only.
    AtomicLat(Opts),
}

impl TestCmd {
    /// The test and its options.
    pub fn split(&self) -> (Test, &Opts) {
        match self {
            TestCmd::WriteBw(o) => (Test::WriteBw, o),
            TestCmd::WriteLat(o) => (Test::WriteLat, o),
            TestCmd::ReadBw(o) => (Test::ReadBw, o),
            TestCmd::ReadLat(o) => (Test::ReadLat, o),
            TestCmd::SendBw(o) => (Test::SendBw, o),
            TestCmd::SendLat(o) => (Test::SendLat, o),
            TestCmd::AtomicBw(o) => (Test::AtomicBw, o),
            TestCmd::AtomicLat(o) => (Test::AtomicLat, o),
        }
    }
}

/// Options of every test (perftest's letters).
#[derive(Debug, Clone, clap::Args)]
pub struct Opts {
    /// Server to connect to: this side is the client and measures. Without
    /// it this side is the server and waits for one client.
    pub host: Option<String>,
    /// TCP port of the connection setup (listen on it, or connect to it).
    #[arg(short = 'p', long, default_value_t = 18515)]
    pub port: u16,
    /// Message size in bytes; K, M, G suffixes are binary (4K = 4096).
    /// Default: 65536 for bandwidth tests, 2 for latency tests, 8 for
    /// atomics (always 8).
    #[arg(short = 's', long, value_name = "BYTES", value_parser = params::parse_size)]
    pub size: Option<u64>,
    /// Run every size from 2 B to 8 MiB, powers of two (UD: up to the MTU).
    /// Without -n, big sizes run fewer iterations (at most 256 MiB per size
    /// for bandwidth tests, 16 MiB for latency tests; at least 5).
    #[arg(short = 'a', long, conflicts_with = "size")]
    pub all: bool,
    /// Iterations per size and QP. Default: 5000 for bandwidth tests, 1000
    /// for latency and atomic bandwidth tests.
    #[arg(short = 'n', long = "iters", value_name = "N")]
    pub iters: Option<u64>,
    /// Run each size for this many seconds instead of a number of
    /// iterations (fractions allowed: 0.5).
    #[arg(short = 'D', long, value_name = "SECS", value_parser = params::parse_duration, conflicts_with = "iters")]
    pub duration: Option<u64>,
    /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096 (the smaller of the
    /// two sides' is used).
    #[arg(short = 'm', long, default_value_t = 4096)]
    pub mtu: u32,
    /// Number of QPs (bandwidth tests); each runs -n iterations.
    #[arg(short = 'q', long = "qp", value_name = "N", default_value_t = 1)]
    pub qps: u32,
    /// TX depth: operations kept outstanding per QP (bandwidth tests;
    /// default 128).
    #[arg(short = 't', long = "tx-depth", value_name = "N")]
    pub tx_depth: Option<u32>,
    /// RX depth: receives kept posted per QP (SEND tests; default 512 for
    /// send-bw, 16 for send-lat).
    #[arg(short = 'r', long = "rx-depth", value_name = "N")]
    pub rx_depth: Option<u32>,
    /// Outstanding READ/atomic requests per QP on the wire (read and
    /// atomic tests; default: the device's maximum, 128, as perftest).
    #[arg(short = 'o', long = "outs", value_name = "N")]
    pub outs: Option<u32>,
    /// Transport: RC, UC or UD. WRITE: RC/UC; SEND: RC/UC/UD; READ and
    /// atomics: RC only.
    #[arg(
        short = 'c',
        long = "connection",
        value_enum,
        ignore_case = true,
        default_value = "RC"
    )]
    pub conn: Conn,
    /// Atomic operation (atomic tests; default FETCH_AND_ADD).
    #[arg(short = 'A', long = "atomic-type", value_enum, value_name = "TYPE")]
    pub atomic: Option<AtomicType>,
    /// Report bandwidth in Gb/sec (10^9 bits) instead of MiB/sec.
    #[arg(long, alias = "report_gbits")]
    pub report_gbits: bool,
    /// Print one JSON document (results and counters of both sides)
    /// instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Do not check the data that arrived (by default every size ends with
    /// a check on both sides; a wrong byte fails the run).
    #[arg(long)]
    pub no_verify: bool,
    /// Address of this side's device (else SOFTRDMA_ADDR, else a free
    /// loopback address 127.0.0.x).
    #[arg(short = 'd', long = "addr", value_name = "ADDR")]
    pub addr: Option<IpAddr>,
    /// Capture this side's RoCE packets to a pcap file (open it with
    /// `softrdma dump` or Wireshark). With --loopback: the client's device,
    /// which sees both directions.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// Run server and client in this process (two devices on loopback
    /// addresses, an ephemeral TCP port): no other setup needed.
    #[arg(long, conflicts_with_all = ["host", "addr"])]
    pub loopback: bool,
    /// Print a progress line on stderr even when it is not a terminal
    /// (on a terminal it appears by itself on sizes that take over a second).
    #[arg(long)]
    pub progress: bool,
    /// How waiting loops wait: busy (spin, perftest's way), yield (spin but
    /// give up the CPU on idle rounds), auto (yield when both ends share a
    /// host with fewer than 4 cores, where busy spinning costs scheduler
    /// time slices of milliseconds).
    #[arg(long, value_enum, default_value = "auto")]
    pub spin: SpinMode,
    /// Client: how long to keep trying to reach the server (seconds).
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub connect_timeout: f64,
    /// Test hook: damage the data at its source so that verification must
    /// fail.
    #[arg(long, hide = true)]
    pub debug_corrupt: bool,
}

/// A checked configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// What both sides run.
    pub params: Params,
    /// The options.
    pub opts: Opts,
}

impl Config {
    /// Checks the options of `test`.
    pub fn new(test: Test, o: &Opts) -> Result<Config, Error> {
        let op = test.op();
        let usage = |m: &str| Err(Error::Usage(m.to_string()));
        if o.atomic.is_some() && op != Op::Atomic {
            return usage("-A applies to the atomic tests only");
        }
        if test.is_lat() && o.tx_depth.is_some() {
            return usage(
                "-t applies to bandwidth tests (latency tests keep one operation outstanding)",
            );
        }
        if o.rx_depth.is_some() && op != Op::Send {
            return usage("-r applies to the SEND tests only");
        }
        if o.outs.is_some() && !matches!(op, Op::Read | Op::Atomic) {
            return usage("-o applies to the READ and atomic tests only");
        }
        if test.is_lat() && o.report_gbits {
            return usage("--report-gbits applies to bandwidth tests");
        }
        if o.iters == Some(0) {
            return usage("-n must be at least 1");
        }
        if let Some(n) = o.iters {
            if n > params::MAX_ITERS {
                return Err(Error::Usage(format!("-n {n} is too large")));
            }
        }
        if !(o.connect_timeout.is_finite() && o.connect_timeout >= 0.0) {
            return usage("--connect-timeout must be a number of seconds");
        }
        if op == Op::Atomic {
            if let Some(s) = o.size {
                if s != 8 {
                    return Err(Error::Usage(format!(
                        "atomic operations move 8 bytes; -s {s} is not possible"
                    )));
                }
            }
        }
        let sizes: Vec<SizeRun> = if o.all {
            params::all_sizes(test, o.conn, o.mtu)
                .into_iter()
                .map(|size| SizeRun {
                    size,
                    iters: o.iters.unwrap_or_else(|| params::capped_iters(test, size)),
                })
                .collect()
        } else {
            vec![SizeRun {
                size: o.size.unwrap_or(test.default_size()),
                iters: o.iters.unwrap_or(test.default_iters()),
            }]
        };
        let tx_depth = if test.is_lat() {
            16
        } else {
            o.tx_depth.unwrap_or(128)
        };
        let rx_depth = match (op, test.is_lat()) {
            (Op::Send, false) => o.rx_depth.unwrap_or(512),
            (Op::Send, true) => o.rx_depth.unwrap_or(16),
            _ => 1,
        };
        let p = Params {
            test,
            conn: o.conn,
            qps: o.qps,
            mtu: o.mtu,
            tx_depth,
            rx_depth,
            outs: o.outs.unwrap_or(params::MAX_OUTS),
            cq_mod: if test.is_lat() { 1 } else { tx_depth.min(100) },
            atomic: o.atomic.unwrap_or(AtomicType::FetchAndAdd),
            sizes,
            duration_ms: o.duration,
            verify: !o.no_verify,
            corrupt: o.debug_corrupt,
        };
        p.check()?;
        Ok(Config {
            params: p,
            opts: o.clone(),
        })
    }

    fn device(&self, loopback: bool) -> DeviceChoice {
        DeviceChoice {
            addr: self.opts.addr,
            loopback,
            mtu: self.opts.mtu,
            pcap: self.opts.pcap.clone(),
        }
    }
}

/// Runs `softrdma perf`; the report goes to `out`.
pub fn run(args: &Args, out: &mut (dyn Write + Send)) -> Result<(), Error> {
    let (test, opts) = args.test.split();
    let cfg = Config::new(test, opts)?;
    if opts.loopback {
        loopback(&cfg, out)
    } else if let Some(host) = &opts.host {
        let dev = setup::open_device(&cfg.device(false))?;
        let addr = host_port(host, opts.port);
        client(&cfg, dev, &addr, out).map(|_| ())
    } else {
        let dev = setup::open_device(&cfg.device(false))?;
        let listener = cm::Listener::bind(&format!("0.0.0.0:{}", opts.port))
            .map_err(|e| Error::Failed(e.to_string()))?;
        server(&cfg, dev, listener, out, true).map(|_| ())
    }
}

/// `host:port`, bracketing an IPv6 literal.
fn host_port(host: &str, port: u16) -> String {
    if host.parse::<std::net::Ipv6Addr>().is_ok() {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Parses `END k c0 c1 ...`.
pub fn parse_end(line: &str, k: usize, q: usize) -> Result<Vec<u64>, Error> {
    let mut w = line.split_whitespace();
    let bad = || Error::Failed(format!("lost step with the peer: {line:?}"));
    if w.next() != Some("END") || w.next().and_then(|s| s.parse::<usize>().ok()) != Some(k) {
        return Err(bad());
    }
    let v: Vec<u64> = w
        .map(|s| s.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    if v.len() != q {
        return Err(bad());
    }
    Ok(v)
}

/// The server's answer for one size.
#[derive(Clone, Debug, Default)]
struct SizeResult {
    ok: bool,
    received: u64,
    why: String,
}

fn parse_result(line: &str) -> SizeResult {
    let mut w = line.splitn(4, ' ');
    let _ = w.next();
    let ok = w.next() == Some("ok");
    let received = w.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let why = w.next().unwrap_or("").to_string();
    SizeResult { ok, received, why }
}

fn label(p: &Params, k: usize) -> String {
    format!("{} {} B", p.test.name(), p.sizes[k].size)
}

fn gid_text(gid: &[u8; 16]) -> String {
    let ip = softrdma_wire::grh::addr_of_gid(*gid);
    format!("{} ({ip})", crate::devinfo::gid_text(gid))
}

/// The client's report (what `--json` prints).
struct Reporter<'a> {
    out: &'a mut (dyn Write + Send),
    json: bool,
    gbits: bool,
    rows: Vec<Json>,
    head: Vec<(String, Json)>,
}

impl Reporter<'_> {
    fn text(&mut self, s: &str) -> Result<(), Error> {
        if !self.json {
            self.out.write_all(s.as_bytes())?;
            self.out.flush()?;
        }
        Ok(())
    }
}

fn header_text(side: &Side, peer: &str, role: &str) -> String {
    let p = &side.params;
    let mut s = String::new();
    let line = |s: &mut String, a: String, b: String| {
        s.push_str(format!(" {a:<40}{b}").trim_end());
        s.push('\n');
    };
    s.push_str(RULE);
    s.push('\n');
    s.push_str(&format!(
        "                    {}  (softrdma perf {}, {role})\n",
        p.test.title(),
        p.test.name()
    ));
    line(
        &mut s,
        format!("Device          : {}", side.dev.name()),
        format!("Address        : {}", side.dev.local_addr()),
    );
    line(
        &mut s,
        format!("Number of qps   : {}", p.qps),
        "Transport type : IB (RoCE v2)".to_string(),
    );
    line(
        &mut s,
        format!("Connection type : {}", p.conn.name()),
        format!("Peer           : {peer}"),
    );
    if p.test.is_lat() {
        line(
            &mut s,
            "TX depth        : 1 (latency)".to_string(),
            format!("Verification   : {}", if p.verify { "ON" } else { "OFF" }),
        );
    } else {
        line(
            &mut s,
            format!("TX depth        : {}", p.tx_depth),
            format!("CQ Moderation  : {}", p.cq_mod.min(p.tx_depth)),
        );
    }
    line(
        &mut s,
        format!("Mtu             : {}[B]", side.path_mtu),
        "Link type      : Ethernet".to_string(),
    );
    line(
        &mut s,
        format!(
            "Waiting         : {}",
            if side.yield_idle {
                "spin, yield when idle"
            } else {
                "busy spin"
            }
        ),
        String::new(),
    );
    match p.test.op() {
        Op::Send => line(
            &mut s,
            format!("RX depth        : {}", p.rx_depth),
            format!("Verification   : {}", if p.verify { "ON" } else { "OFF" }),
        ),
        Op::Read | Op::Atomic => line(
            &mut s,
            format!("Outstand reads  : {}", p.outs),
            if p.test.op() == Op::Atomic {
                format!("Atomic type    : {}", p.atomic.name())
            } else {
                format!("Verification   : {}", if p.verify { "ON" } else { "OFF" })
            },
        ),
        Op::Write if !p.test.is_lat() => line(
            &mut s,
            "GID index       : 0 (RoCE v2)".to_string(),
            format!("Verification   : {}", if p.verify { "ON" } else { "OFF" }),
        ),
        Op::Write => {}
    }
    if let Some(ms) = p.duration_ms {
        line(
            &mut s,
            format!("Duration        : {:.3} s per size", ms as f64 / 1000.0),
            String::new(),
        );
    }
    s.push_str(RULE);
    s.push('\n');
    for i in 0..side.qps.len() {
        let (l, r) = (&side.local[i], &side.remote[i]);
        s.push_str(&format!(
            " local address: QPN {:#08x} PSN {:#08x} RKey {:#010x} VAddr {:#018x}\n GID: {}\n",
            l.qpn.value(),
            l.psn.value(),
            l.rkey.0,
            l.va,
            gid_text(&l.gid)
        ));
        s.push_str(&format!(
            " remote address: QPN {:#08x} PSN {:#08x} RKey {:#010x} VAddr {:#018x}\n GID: {}\n",
            r.qpn.value(),
            r.psn.value(),
            r.rkey.0,
            r.va,
            gid_text(&r.gid)
        ));
    }
    s.push_str(RULE);
    s.push('\n');
    s
}

fn params_json(p: &Params) -> Vec<(String, Json)> {
    vec![
        ("test".into(), Json::from(p.test.name())),
        ("connection".into(), Json::from(p.conn.name())),
        ("qps".into(), Json::from(p.qps as u64)),
        ("mtu".into(), Json::from(p.mtu as u64)),
        ("tx_depth".into(), Json::from(p.tx_depth as u64)),
        ("rx_depth".into(), Json::from(p.rx_depth as u64)),
        ("outstanding_rd_atomic".into(), Json::from(p.outs as u64)),
        ("cq_moderation".into(), Json::from(p.cq_mod as u64)),
        (
            "atomic_type".into(),
            if p.test.op() == Op::Atomic {
                Json::from(p.atomic.name())
            } else {
                Json::Null
            },
        ),
        (
            "duration_s".into(),
            p.duration_ms
                .map_or(Json::Null, |ms| num(ms as f64 / 1000.0)),
        ),
        ("verify".into(), Json::Bool(p.verify)),
    ]
}

/// Checks what landed on this side at the end of size `k` (`done`:
/// operations per QP). Returns the failures.
fn verify_local(side: &Side, k: usize, done: &[u64], recvs: Option<&Receives>) -> Vec<String> {
    let p = &side.params;
    if !p.verify {
        return Vec::new();
    }
    let size = p.sizes[k].size;
    let mut bad = Vec::new();
    let mut check = |i: usize, off: usize, len: usize, strict: Strict| {
        if len == 0 {
            return;
        }
        if let Err(m) = pattern::check(&side.mrs[i], off, len, side.peer_seed(i), 0, strict) {
            bad.push(format!(
                "QP {i}, {size}-byte messages: byte {} of the {} bytes that {} is {:#04x}, expected {:#04x} ({} byte(s) wrong)",
                m.at,
                len,
                match p.test.op() {
                    Op::Read => "the READs brought back",
                    _ => "the peer wrote",
                },
                m.got,
                m.want,
                m.count
            ));
        }
    };
    match (p.test, side.server) {
        (Test::WriteBw, true) => {
            let strict = if p.conn == Conn::Rc {
                Strict::Exact
            } else {
                Strict::Landed
            };
            for (i, n) in done.iter().enumerate() {
                let slots = (*n).min(bw_slots(p, size));
                check(i, 0, (slots * size) as usize, strict);
            }
        }
        (Test::ReadBw, false) => {
            for (i, n) in done.iter().enumerate() {
                let slots = (*n).min(bw_slots(p, size));
                check(i, 0, (slots * size) as usize, Strict::Exact);
            }
        }
        (Test::ReadLat, false) if done[0] > 0 => check(0, 0, size as usize, Strict::Exact),
        (Test::WriteLat, _) if done[0] > 0 => {
            check(0, side.layout.recv_off, size as usize - 1, Strict::Exact)
        }
        (Test::SendBw, true) | (Test::SendLat, _) => {
            if let Some(r) = recvs {
                if let Err(e) = r.verify(side, size) {
                    bad.push(e);
                }
            }
        }
        (Test::AtomicBw | Test::AtomicLat, true) => {
            for (i, n) in done.iter().enumerate() {
                let got = side.mrs[i]
                    .atomic_u64(0)
                    .load(std::sync::atomic::Ordering::SeqCst);
                let want = ops::atomic_final(side, i, *n);
                if got != want {
                    bad.push(format!(
                        "QP {i}: the counter is {got:#018x} after {n} {}, expected {want:#018x}",
                        p.atomic.name()
                    ));
                }
            }
        }
        _ => {}
    }
    bad
}

/// Clears what the peer (or READs) will write during size `k`.
fn prepare(side: &Side, k: usize, recvs: Option<&mut Receives>) {
    let p = &side.params;
    let size = p.sizes[k].size;
    match (p.test, side.server) {
        (Test::WriteBw, true) | (Test::ReadBw, false) => {
            for mr in &side.mrs {
                pattern::clear(mr, 0, (bw_slots(p, size) * size) as usize);
            }
        }
        (Test::ReadLat, false) => pattern::clear(&side.mrs[0], 0, size as usize),
        (Test::WriteLat, _) => pattern::clear(&side.mrs[0], side.layout.recv_off, size as usize),
        _ => {}
    }
    if let Some(r) = recvs {
        r.reset(side);
    }
}

/// Puts back the pattern byte a WRITE ping-pong used as its round number.
fn restore(side: &Side, k: usize) {
    if side.params.test == Test::WriteLat {
        let at = side.params.sizes[k].size as usize - 1;
        pattern::write_pattern(&side.mrs[0], side.seed(0), at, 1);
    }
}

/// The client: connects, runs every size, prints the report.
fn client(
    cfg: &Config,
    dev: Device,
    addr: &str,
    out: &mut (dyn Write + Send),
) -> Result<(), Error> {
    let p = &cfg.params;
    let o = &cfg.opts;
    let wait = Duration::from_secs_f64(o.connect_timeout);
    let stream = cm::tcp_connect(addr, wait).map_err(|e| {
        let m = e.to_string();
        let m = m.trim_start_matches("connection setup: ");
        let m = m.trim_start_matches(&format!("cannot reach {addr}: ")[..]);
        Error::Failed(format!(
            "cannot reach the server at {addr}: {m} (is `softrdma perf {}` running there?)",
            p.test.name()
        ))
    })?;
    let mut ctrl = Ctrl::new(stream, "server");
    ctrl.send(&p.to_line())?;
    ctrl.expect("OK", Some(REPLY_TIMEOUT))?;
    let side = Side::connect(dev, &mut ctrl, p, false, o.spin)?;
    let r = client_sizes(cfg, &side, &mut ctrl, addr, out);
    if let Err(e) = &r {
        failure_counters(e, &side, "client");
    }
    r
}

/// Notes on what the counters of a side show went wrong on the way
/// (the figures then include it).
fn counter_notes(role: &str, c: &[(String, u64)]) -> Vec<String> {
    let get = |k: &str| c.iter().find(|(n, _)| n == k).map_or(0, |(_, v)| *v);
    let mut v = Vec::new();
    let dropped = get("socket_rx_dropped");
    if dropped > 0 {
        v.push(format!(
            "the {role}'s socket dropped {dropped} datagram(s) (its receive queue was full: the receiving side could not keep up)"
        ));
    }
    for (k, what) in [
        ("engine_tx_dropped", "datagram(s) the socket would not take"),
        ("retransmits", "packet(s) sent again (RC recovery)"),
        ("uc_msgs_dropped", "UC message(s) lost"),
        (
            "ud_drops",
            "UD message(s) dropped (no receive posted in time)",
        ),
    ] {
        let n = get(k);
        if n > 0 {
            v.push(format!("{role}: {n} {what}"));
        }
    }
    v
}

/// After a failure in the middle of a run, the device's counters say what
/// the transport saw (retransmissions, NAKs, drops): on stderr.
fn failure_counters(e: &Error, side: &Side, role: &str) {
    if matches!(e, Error::Verify(_)) {
        return;
    }
    eprint!(
        "{}",
        report::counters_text(
            &format!(
                "{role} counters at the failure ({} {})",
                side.dev.name(),
                side.dev.local_addr().ip()
            ),
            &report::device_counters(&side.dev)
        )
    );
}

/// The client's runs, once connected.
fn client_sizes(
    cfg: &Config,
    side: &Side,
    ctrl: &mut Ctrl,
    addr: &str,
    out: &mut (dyn Write + Send),
) -> Result<(), Error> {
    let p = &cfg.params;
    let o = &cfg.opts;
    let mut rep = Reporter {
        out,
        json: o.json,
        gbits: o.report_gbits,
        rows: Vec::new(),
        head: Vec::new(),
    };
    let role = if o.loopback { "loopback" } else { "client" };
    rep.head = vec![
        ("role".into(), Json::from(role)),
        ("device".into(), Json::from(side.dev.name())),
        (
            "address".into(),
            Json::from(side.dev.local_addr().to_string()),
        ),
        ("peer".into(), Json::from(addr)),
        ("path_mtu".into(), Json::from(side.path_mtu as u64)),
        ("yield_when_idle".into(), Json::Bool(side.yield_idle)),
    ];
    rep.head.extend(params_json(p));
    rep.text(&header_text(side, addr, role))?;
    let table_head = if p.test.is_lat() {
        report::lat_header()
    } else {
        report::bw_header(rep.gbits)
    };
    rep.text(&format!("{table_head}\n"))?;
    let mut recvs = if p.test == Test::SendLat {
        Some(Receives::new(side)?)
    } else {
        None
    };
    let mut progress = if o.json && !o.progress {
        Progress::off()
    } else {
        Progress::new(o.progress)
    };
    let mut failures: Vec<String> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    for k in 0..p.sizes.len() {
        let size = p.sizes[k].size;
        prepare(side, k, recvs.as_mut());
        ctrl.send(&format!("SIZE {k}"))?;
        ctrl.expect("READY", Some(REPLY_TIMEOUT))?;
        progress.begin(label(p, k));
        let measured = if p.test.is_lat() {
            lat::client(side, ctrl, k, recvs.as_mut(), &mut progress).map(|r| {
                let mut s = r.samples_ns;
                let f = report::lat_figures(size, &mut s, p.test.halves_rtt());
                (
                    vec![r.done],
                    r.problem,
                    report::lat_row(&f),
                    report::lat_json(&f),
                )
            })
        } else {
            bw::client(side, ctrl, k, &mut progress).map(|r| {
                (
                    r.done,
                    r.problem,
                    report::bw_row(&r.figures, rep.gbits),
                    report::bw_json(&r.figures),
                )
            })
        };
        progress.end();
        let (done, problem, row, mut json) = measured?;
        let mut end = format!("END {k}");
        for d in &done {
            end.push_str(&format!(" {d}"));
        }
        ctrl.send(&end)?;
        let mut bad = verify_local(side, k, &done, recvs.as_ref());
        if p.verify {
            bad.extend(problem);
        }
        let res = parse_result(&ctrl.expect("RESULT", Some(REPLY_TIMEOUT))?);
        restore(side, k);
        if !res.ok {
            bad.push(format!("server: {}", res.why));
        }
        let sent: u64 = done.iter().sum();
        if p.test == Test::SendBw && res.received < sent {
            let lost = sent - res.received;
            notes.push(format!(
                "{size} B: the server received {} of {sent} messages ({lost} lost: {} does not retransmit)",
                res.received,
                p.conn.name()
            ));
        }
        rep.text(&format!("{row}\n"))?;
        for b in &bad {
            eprintln!("softrdma perf {}: {size} B: {b}", p.test.name());
        }
        json.push((
            "verified".into(),
            Json::from(if !p.verify {
                "off"
            } else if bad.is_empty() {
                "ok"
            } else {
                "failed"
            }),
        ));
        if p.test.op() == Op::Send {
            json.push(("server_received".into(), Json::from(res.received)));
        }
        rep.rows.push(obj(json));
        failures.extend(bad.into_iter().map(|b| format!("{size} B: {b}")));
    }
    ctrl.send("BYE")?;
    let line = ctrl.expect("COUNTERS", Some(REPLY_TIMEOUT))?;
    let server_counters = report::parse_counters(line.trim_start_matches("COUNTERS"));
    let local = report::device_counters(&side.dev);
    notes.extend(counter_notes("client", &local));
    notes.extend(counter_notes("server", &server_counters));
    let mut tail = String::new();
    tail.push_str(RULE);
    tail.push('\n');
    for n in &notes {
        tail.push_str(&format!(" note: {n}\n"));
    }
    tail.push_str(&format!(
        " data verification: {}\n",
        if !p.verify {
            "off (--no-verify)".to_string()
        } else if failures.is_empty() {
            format!("ok ({} size(s), both sides)", p.sizes.len())
        } else {
            format!("FAILED ({} problem(s), see above)", failures.len())
        }
    ));
    tail.push_str(&report::counters_text(
        &format!(
            "client counters ({} {})",
            side.dev.name(),
            side.dev.local_addr().ip()
        ),
        &local,
    ));
    tail.push_str(&report::counters_text("server counters", &server_counters));
    tail.push_str(RULE);
    tail.push('\n');
    rep.text(&tail)?;
    if rep.json {
        let mut doc = rep.head.clone();
        doc.push(("results".into(), Json::Array(rep.rows.clone())));
        doc.push((
            "verification".into(),
            obj([
                (
                    "status",
                    Json::from(if !p.verify {
                        "off"
                    } else if failures.is_empty() {
                        "ok"
                    } else {
                        "failed"
                    }),
                ),
                (
                    "errors",
                    Json::Array(failures.iter().map(|f| Json::from(f.clone())).collect()),
                ),
            ]),
        ));
        doc.push((
            "notes".into(),
            Json::Array(notes.iter().map(|n| Json::from(n.clone())).collect()),
        ));
        doc.push((
            "counters".into(),
            obj([
                ("client", counters(&local)),
                ("server", counters(&server_counters)),
            ]),
        ));
        rep.out.write_all(document(&obj(doc)).as_bytes())?;
        rep.out.flush()?;
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Error::Verify(failures))
    }
}

/// The server: waits for one client and serves its run. `talk`: print
/// the server's own report (not in `--loopback`, where the client prints).
fn server(
    cfg: &Config,
    dev: Device,
    listener: cm::Listener,
    out: &mut (dyn Write + Send),
    talk: bool,
) -> Result<(), Error> {
    let o = &cfg.opts;
    let test = cfg.params.test;
    let json = o.json;
    let say = |out: &mut (dyn Write + Send), s: &str| -> Result<(), Error> {
        if talk && !json {
            out.write_all(s.as_bytes())?;
            out.flush()?;
        }
        Ok(())
    };
    let listen = listener
        .local_addr()
        .map_or_else(|_| "?".to_string(), |a| a.to_string());
    say(
        out,
        &format!(
            "{RULE}\n softrdma perf {} server: device {} at {}, waiting for a client on TCP {listen}\n",
            test.name(),
            dev.name(),
            dev.local_addr()
        ),
    )?;
    let stream = listener.accept()?;
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "?".to_string(), |a| a.to_string());
    let mut ctrl = Ctrl::new(stream, "client");
    let line = ctrl.recv(Some(REPLY_TIMEOUT))?;
    let p = match Params::from_line(&line) {
        Ok(p) if p.test == test => p,
        Ok(p) => {
            let m = format!(
                "this server runs {}, the client asked for {}",
                test.name(),
                p.test.name()
            );
            let _ = ctrl.send(&format!("ERR {m}"));
            return Err(Error::Failed(m));
        }
        Err(m) => {
            let _ = ctrl.send(&format!("ERR {m}"));
            return Err(Error::Failed(format!("client {peer}: {m}")));
        }
    };
    ctrl.send("OK")?;
    let side = Side::connect(dev, &mut ctrl, &p, true, o.spin)?;
    let r = server_sizes(cfg, &side, &mut ctrl, &peer, out, talk);
    if let Err(e) = &r {
        if talk {
            failure_counters(e, &side, "server");
        }
    }
    r
}

/// The server's runs, once connected.
fn server_sizes(
    cfg: &Config,
    side: &Side,
    ctrl: &mut Ctrl,
    peer: &str,
    out: &mut (dyn Write + Send),
    talk: bool,
) -> Result<(), Error> {
    let p = &side.params;
    let json = cfg.opts.json;
    let say = |out: &mut (dyn Write + Send), s: &str| -> Result<(), Error> {
        if talk && !json {
            out.write_all(s.as_bytes())?;
            out.flush()?;
        }
        Ok(())
    };
    say(
        out,
        &format!(
            " client {peer}: the client's parameters are used: {} {} QP(s), {} size(s)\n{}",
            p.conn.name(),
            p.qps,
            p.sizes.len(),
            header_text(side, peer, "server")
        ),
    )?;
    let mut recvs = if p.test.op() == Op::Send {
        Some(Receives::new(side)?)
    } else {
        None
    };
    let mut failures = Vec::new();
    let mut sizes_json = Vec::new();
    loop {
        let line = ctrl.recv(None)?;
        let mut w = line.split_whitespace();
        match w.next() {
            Some("SIZE") => {}
            Some("BYE") => break,
            _ => {
                return Err(Error::Failed(format!(
                    "lost step with the client: {line:?}"
                )))
            }
        }
        let k: usize = w
            .next()
            .and_then(|s| s.parse().ok())
            .filter(|&k| k < p.sizes.len())
            .ok_or_else(|| Error::Failed(format!("the client asked for {line:?}")))?;
        prepare(side, k, recvs.as_mut());
        ctrl.send("READY")?;
        let (done, problem) = if p.test.is_lat() {
            lat::server(side, ctrl, k, recvs.as_mut())?
        } else {
            (bw::server(side, ctrl, k, recvs.as_mut())?, None)
        };
        let mut bad = verify_local(side, k, &done, recvs.as_ref());
        if p.verify {
            bad.extend(problem);
        }
        restore(side, k);
        let received: u64 = match &recvs {
            Some(r) => r.count.iter().sum(),
            None => done.iter().sum(),
        };
        let size = p.sizes[k].size;
        if bad.is_empty() {
            ctrl.send(&format!("RESULT ok {received}"))?;
        } else {
            let why = bad.join("; ").replace('\n', " ");
            ctrl.send(&format!("RESULT fail {received} {why}"))?;
        }
        let status = if !p.verify {
            "off"
        } else if bad.is_empty() {
            "ok"
        } else {
            "failed"
        };
        say(
            out,
            &format!(" {size} B: {received} operations served, data verification {status}\n"),
        )?;
        for b in &bad {
            if talk {
                eprintln!("softrdma perf {} server: {size} B: {b}", p.test.name());
            }
        }
        sizes_json.push(obj([
            ("bytes", Json::from(size)),
            ("operations", Json::from(received)),
            ("verified", Json::from(status)),
        ]));
        failures.extend(bad.into_iter().map(|b| format!("{size} B: {b}")));
    }
    let counters = report::device_counters(&side.dev);
    ctrl.send(&format!("COUNTERS {}", report::counters_words(&counters)))?;
    say(
        out,
        &format!(
            "{RULE}\n{}{RULE}\n",
            report::counters_text(
                &format!(
                    "server counters ({} {})",
                    side.dev.name(),
                    side.dev.local_addr().ip()
                ),
                &counters
            )
        ),
    )?;
    if talk && json {
        let mut doc = vec![
            ("role".to_string(), Json::from("server")),
            ("device".into(), Json::from(side.dev.name())),
            (
                "address".into(),
                Json::from(side.dev.local_addr().to_string()),
            ),
            ("peer".into(), Json::from(peer)),
        ];
        doc.extend(params_json(p));
        doc.push(("sizes".into(), Json::Array(sizes_json)));
        doc.push((
            "errors".into(),
            Json::Array(failures.iter().map(|f| Json::from(f.clone())).collect()),
        ));
        doc.push(("counters".into(), report::counters(&counters)));
        out.write_all(document(&obj(doc)).as_bytes())?;
        out.flush()?;
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Error::Verify(failures))
    }
}

/// Both ends in this process: the server in one thread with its device,
/// the client in another with its own.
fn loopback(cfg: &Config, out: &mut (dyn Write + Send)) -> Result<(), Error> {
    let listener = cm::Listener::bind("127.0.0.1:0").map_err(|e| Error::Failed(e.to_string()))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::Failed(e.to_string()))?
        .to_string();
    let server_dev = setup::open_device(&DeviceChoice {
        pcap: None,
        ..cfg.device(true)
    })?;
    let client_dev = setup::open_device(&cfg.device(true))?;
    let (c, s) = std::thread::scope(|scope| {
        let srv = std::thread::Builder::new()
            .name("perf-server".into())
            .spawn_scoped(scope, || {
                server(cfg, server_dev, listener, &mut std::io::sink(), false)
            });
        let srv = match srv {
            Ok(h) => h,
            Err(e) => {
                return (
                    Err(Error::Failed(format!("starting the server thread: {e}"))),
                    Ok(()),
                )
            }
        };
        let cli = std::thread::Builder::new()
            .name("perf-client".into())
            .spawn_scoped(scope, || client(cfg, client_dev, &addr, out));
        let c = match cli {
            Ok(h) => h
                .join()
                .unwrap_or_else(|_| Err(Error::Failed("the client thread panicked".into()))),
            Err(e) => Err(Error::Failed(format!("starting the client thread: {e}"))),
        };
        if c.is_err() && !srv.is_finished() {
            // A server still waiting in accept() for a client that never
            // came: a connection that closes at once ends its wait.
            let _ = std::net::TcpStream::connect(&addr);
        }
        let s = srv
            .join()
            .unwrap_or_else(|_| Err(Error::Failed("the server thread panicked".into())));
        (c, s)
    });
    match (c, s) {
        (Ok(()), Ok(())) => Ok(()),
        // The client reports the server's verification failures too.
        (Err(e @ Error::Verify(_)), _) => Err(e),
        (Ok(()), Err(Error::Verify(v))) => Err(Error::Verify(v)),
        (Ok(()), Err(e)) => Err(Error::Failed(format!("server: {e}"))),
        (Err(e), Ok(())) | (Err(e), Err(Error::PeerGone(_))) => Err(e),
        (Err(Error::PeerGone(_)), Err(e)) => Err(Error::Failed(format!("server: {e}"))),
        (Err(e), Err(se)) => Err(Error::Failed(format!("client: {e}\nserver: {se}"))),
    }
}
