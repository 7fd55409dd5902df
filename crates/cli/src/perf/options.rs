//! The options of `softrdma perf` (clap derive, one [`Opts`] for all
//! eight tests) and their check into [`Params`] ([`Config::new`]): an
//! option that does not apply is an error, exit status 2.

use super::params::{self, AtomicType, Conn, Op, Params, SizeRun, Test};
use super::setup::{DeviceChoice, SpinMode};
use super::Error;
use std::net::IpAddr;
use std::path::PathBuf;

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

    pub(super) fn device(&self, loopback: bool) -> DeviceChoice {
        DeviceChoice {
            addr: self.opts.addr,
            loopback,
            mtu: self.opts.mtu,
            pcap: self.opts.pcap.clone(),
        }
    }
}

/// `host:port`, bracketing an IPv6 literal.
pub(super) fn host_port(host: &str, port: u16) -> String {
    if host.parse::<std::net::Ipv6Addr>().is_ok() {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}
