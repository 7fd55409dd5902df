//! What a run does: the test, transport, sizes and iterations, checked once
//! here. The client sends its [`Params`] to the server as one text line, so
//! the server runs exactly what the client measures (perftest wants the same
//! options on both sides; here the client's win and the server says so).

use super::Error;
use std::fmt::Write as _;

/// Largest message size accepted by `-s` (a registered buffer of at least
/// this size is allocated on each side).
pub const MAX_SIZE: u64 = 1 << 30;
/// Largest size of `-a` (perftest: 2 … 2^23).
pub const ALL_MAX_SIZE: u64 = 1 << 23;
/// Queue pairs per run (`-q`).
pub const MAX_QPS: u32 = softrdma::limits::MAX_QP as u32;
/// Outstanding work requests per QP (`-t`, `-r`): the device's queue limit
/// (`max_qp_wr` of `softrdma devinfo`).
pub const MAX_DEPTH: u32 = 16 * 1024;
/// Outstanding READ/atomic requests per QP (`-o`): the device's
/// `max_qp_rd_atom`.
pub const MAX_OUTS: u32 = 128;
/// Iterations per size (`-n`).
pub const MAX_ITERS: u64 = 1 << 40;
/// Longest `-D`.
pub const MAX_DURATION_MS: u64 = 24 * 3600 * 1000;
/// Bytes of the GRH in front of every UD receive.
pub const GRH_LEN: u64 = 40;

/// With `-a` and no `-n`, bandwidth tests move at most this many bytes per
/// size (fewer iterations for big messages), so `-a` finishes quickly.
pub const ALL_BW_BYTES: u64 = 256 << 20;
/// With `-a` and no `-n`, latency tests move at most this many bytes per
/// size and direction.
pub const ALL_LAT_BYTES: u64 = 16 << 20;
/// Fewest iterations per size when `-a` caps them.
pub const ALL_MIN_ITERS: u64 = 5;

/// The eight tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    /// RDMA WRITE bandwidth.
    WriteBw,
    /// RDMA WRITE ping-pong latency.
    WriteLat,
    /// RDMA READ bandwidth.
    ReadBw,
    /// RDMA READ latency.
    ReadLat,
    /// SEND bandwidth.
    SendBw,
    /// SEND ping-pong latency.
    SendLat,
    /// Atomic bandwidth.
    AtomicBw,
    /// Atomic latency.
    AtomicLat,
}

/// The operation a test measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// SEND / RECV.
    Send,
    /// Atomic compare-and-swap or fetch-and-add.
    Atomic,
}

impl Test {
    /// Every test, in the order of `softrdma perf --help`.
    pub const ALL: [Test; 8] = [
        Test::WriteBw,
        Test::WriteLat,
        Test::ReadBw,
        Test::ReadLat,
        Test::SendBw,
        Test::SendLat,
        Test::AtomicBw,
        Test::AtomicLat,
    ];

    /// The subcommand name (`write-bw`).
    pub fn name(self) -> &'static str {
        match self {
            Test::WriteBw => "write-bw",
            Test::WriteLat => "write-lat",
            Test::ReadBw => "read-bw",
            Test::ReadLat => "read-lat",
            Test::SendBw => "send-bw",
            Test::SendLat => "send-lat",
            Test::AtomicBw => "atomic-bw",
            Test::AtomicLat => "atomic-lat",
        }
    }

    /// The test from its name.
    pub fn from_name(s: &str) -> Option<Test> {
        Test::ALL.into_iter().find(|t| t.name() == s)
    }

    /// The title perftest prints (`RDMA_Write BW Test`).
    pub fn title(self) -> &'static str {
        match self {
            Test::WriteBw => "RDMA_Write BW Test",
            Test::WriteLat => "RDMA_Write Latency Test",
            Test::ReadBw => "RDMA_Read BW Test",
            Test::ReadLat => "RDMA_Read Latency Test",
            Test::SendBw => "Send BW Test",
            Test::SendLat => "Send Latency Test",
            Test::AtomicBw => "Atomic BW Test",
            Test::AtomicLat => "Atomic Latency Test",
        }
    }

    /// A latency test (one operation at a time, times per operation).
    pub fn is_lat(self) -> bool {
        matches!(
            self,
            Test::WriteLat | Test::ReadLat | Test::SendLat | Test::AtomicLat
        )
    }

    /// The operation.
    pub fn op(self) -> Op {
        match self {
            Test::WriteBw | Test::WriteLat => Op::Write,
            Test::ReadBw | Test::ReadLat => Op::Read,
            Test::SendBw | Test::SendLat => Op::Send,
            Test::AtomicBw | Test::AtomicLat => Op::Atomic,
        }
    }

    /// Transports the operation exists on.
    pub fn transports(self) -> &'static [Conn] {
        match self.op() {
            Op::Write => &[Conn::Rc, Conn::Uc],
            Op::Send => &[Conn::Rc, Conn::Uc, Conn::Ud],
            Op::Read | Op::Atomic => &[Conn::Rc],
        }
    }

    /// perftest's default message size.
    pub fn default_size(self) -> u64 {
        match (self.op(), self.is_lat()) {
            (Op::Atomic, _) => 8,
            (_, true) => 2,
            (_, false) => 65536,
        }
    }

    /// perftest's default iterations.
    pub fn default_iters(self) -> u64 {
        match self {
            Test::AtomicBw => 1000,
            t if t.is_lat() => 1000,
            _ => 5000,
        }
    }

    /// Half the round trip (ping-pong tests) or the whole operation.
    pub fn halves_rtt(self) -> bool {
        matches!(self, Test::WriteLat | Test::SendLat)
    }
}

/// Transport (`-c`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "UPPER")]
pub enum Conn {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
}

impl Conn {
    /// `RC`, `UC`, `UD`.
    pub fn name(self) -> &'static str {
        match self {
            Conn::Rc => "RC",
            Conn::Uc => "UC",
            Conn::Ud => "UD",
        }
    }
    fn from_name(s: &str) -> Option<Conn> {
        [Conn::Rc, Conn::Uc, Conn::Ud]
            .into_iter()
            .find(|c| c.name() == s)
    }
    /// The verbs QP type.
    pub fn qp_type(self) -> softrdma::QpType {
        match self {
            Conn::Rc => softrdma::QpType::Rc,
            Conn::Uc => softrdma::QpType::Uc,
            Conn::Ud => softrdma::QpType::Ud,
        }
    }
}

/// Atomic operation (`-A`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AtomicType {
    /// Compare and swap: a chain, each one expects the value the one before
    /// it wrote.
    #[value(name = "CMP_AND_SWAP")]
    CmpAndSwap,
    /// Fetch and add.
    #[value(name = "FETCH_AND_ADD")]
    FetchAndAdd,
}

impl AtomicType {
    /// perftest's name.
    pub fn name(self) -> &'static str {
        match self {
            AtomicType::CmpAndSwap => "CMP_AND_SWAP",
            AtomicType::FetchAndAdd => "FETCH_AND_ADD",
        }
    }
    fn from_name(s: &str) -> Option<AtomicType> {
        [AtomicType::CmpAndSwap, AtomicType::FetchAndAdd]
            .into_iter()
            .find(|c| c.name() == s)
    }
}

/// Value added by each FETCH_AND_ADD.
pub const FETCH_ADD: u64 = 3;
/// First value of each server-side atomic counter (plus the QP index).
pub const ATOMIC_INIT: u64 = 0x5a5a_0000_0000_0000;

/// One size of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeRun {
    /// Message size in bytes.
    pub size: u64,
    /// Iterations per QP (ignored in duration mode).
    pub iters: u64,
}

/// Everything both sides need to agree on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    /// The test.
    pub test: Test,
    /// Transport.
    pub conn: Conn,
    /// Queue pairs.
    pub qps: u32,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// Outstanding sends per QP (bandwidth tests).
    pub tx_depth: u32,
    /// Receives posted per QP (SEND tests).
    pub rx_depth: u32,
    /// Outstanding READ/atomic per QP.
    pub outs: u32,
    /// A completion every this many sends.
    pub cq_mod: u32,
    /// The atomic operation.
    pub atomic: AtomicType,
    /// Sizes in order.
    pub sizes: Vec<SizeRun>,
    /// Duration per size instead of iterations.
    pub duration_ms: Option<u64>,
    /// Check the data at the end of each size.
    pub verify: bool,
    /// Test hook: damage one byte (or the atomic counter) so verification
    /// must fail.
    pub corrupt: bool,
}

impl Params {
    /// Largest size of the run.
    pub fn max_size(&self) -> u64 {
        self.sizes.iter().map(|s| s.size).max().unwrap_or(0)
    }

    /// The line the client sends.
    pub fn to_line(&self) -> String {
        let mut s = format!(
            "SOFTRDMA-PERF1 test={} conn={} qps={} mtu={} tx_depth={} rx_depth={} outs={} cq_mod={} atomic={} verify={} corrupt={}",
            self.test.name(),
            self.conn.name(),
            self.qps,
            self.mtu,
            self.tx_depth,
            self.rx_depth,
            self.outs,
            self.cq_mod,
            self.atomic.name(),
            self.verify as u8,
            self.corrupt as u8
        );
        if let Some(d) = self.duration_ms {
            let _ = write!(s, " duration_ms={d}");
        }
        s.push_str(" sizes=");
        for (i, r) in self.sizes.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(s, "{}x{}", r.size, r.iters);
        }
        s
    }

    /// Parses and checks a client's line (untrusted: every value is bounded).
    pub fn from_line(line: &str) -> Result<Params, String> {
        let mut it = line.split_whitespace();
        if it.next() != Some("SOFTRDMA-PERF1") {
            return Err(format!(
                "the client does not speak softrdma perf (got {:?})",
                truncate(line, 60)
            ));
        }
        let mut p = Params {
            test: Test::WriteBw,
            conn: Conn::Rc,
            qps: 1,
            mtu: 4096,
            tx_depth: 128,
            rx_depth: 512,
            outs: 16,
            cq_mod: 1,
            atomic: AtomicType::FetchAndAdd,
            sizes: Vec::new(),
            duration_ms: None,
            verify: true,
            corrupt: false,
        };
        let mut have_test = false;
        for kv in it {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("bad field {kv:?}"))?;
            let num = |max: u64| -> Result<u64, String> {
                v.parse::<u64>()
                    .ok()
                    .filter(|&n| n <= max)
                    .ok_or_else(|| format!("bad {k}={v}"))
            };
            match k {
                "test" => {
                    p.test = Test::from_name(v).ok_or_else(|| format!("unknown test {v:?}"))?;
                    have_test = true;
                }
                "conn" => {
                    p.conn = Conn::from_name(v).ok_or_else(|| format!("unknown transport {v:?}"))?
                }
                "qps" => p.qps = num(MAX_QPS as u64)? as u32,
                "mtu" => p.mtu = num(4096)? as u32,
                "tx_depth" => p.tx_depth = num(MAX_DEPTH as u64)? as u32,
                "rx_depth" => p.rx_depth = num(MAX_DEPTH as u64)? as u32,
                "outs" => p.outs = num(MAX_OUTS as u64)? as u32,
                "cq_mod" => p.cq_mod = num(MAX_DEPTH as u64)? as u32,
                "atomic" => {
                    p.atomic = AtomicType::from_name(v)
                        .ok_or_else(|| format!("unknown atomic type {v:?}"))?
                }
                "verify" => p.verify = num(1)? == 1,
                "corrupt" => p.corrupt = num(1)? == 1,
                "duration_ms" => p.duration_ms = Some(num(MAX_DURATION_MS)?),
                "sizes" => {
                    for r in v.split(',') {
                        if p.sizes.len() >= 64 {
                            return Err("too many sizes".into());
                        }
                        let (s, n) = r.split_once('x').ok_or_else(|| format!("bad size {r:?}"))?;
                        let size = s
                            .parse::<u64>()
                            .ok()
                            .filter(|&s| (1..=MAX_SIZE).contains(&s))
                            .ok_or_else(|| format!("bad size {r:?}"))?;
                        let iters = n
                            .parse::<u64>()
                            .ok()
                            .filter(|&n| (1..=MAX_ITERS).contains(&n))
                            .ok_or_else(|| format!("bad iterations {r:?}"))?;
                        p.sizes.push(SizeRun { size, iters });
                    }
                }
                _ => {} // forward compatible
            }
        }
        if !have_test {
            return Err("the client named no test".into());
        }
        p.check().map_err(|e| e.to_string())?;
        Ok(p)
    }

    /// The rules every run follows, for flags and for a client's line alike.
    pub fn check(&self) -> Result<(), Error> {
        let t = self.test;
        if !t.transports().contains(&self.conn) {
            let why = match t.op() {
                Op::Read => "RDMA READ exists on RC only",
                Op::Atomic => "atomic operations exist on RC only",
                Op::Write => "RDMA WRITE exists on RC and UC only",
                Op::Send => "SEND runs on RC, UC and UD",
            };
            let list: Vec<&str> = t.transports().iter().map(|c| c.name()).collect();
            return Err(Error::Usage(format!(
                "-c {} is not possible for {}: {why} (use -c {})",
                self.conn.name(),
                t.name(),
                list.join(" or ")
            )));
        }
        if !(256..=4096).contains(&self.mtu) || !self.mtu.is_power_of_two() {
            return Err(Error::Usage(format!(
                "MTU {} is not one of 256, 512, 1024, 2048, 4096",
                self.mtu
            )));
        }
        if self.qps == 0 || self.qps > MAX_QPS {
            return Err(Error::Usage(format!(
                "-q {}: the number of QPs must be 1..={MAX_QPS}",
                self.qps
            )));
        }
        if t.is_lat() && self.qps != 1 {
            return Err(Error::Usage(
                "latency tests use one QP (-q applies to bandwidth tests)".into(),
            ));
        }
        for (name, v) in [
            ("TX depth (-t)", self.tx_depth),
            ("RX depth (-r)", self.rx_depth),
            ("CQ moderation", self.cq_mod),
        ] {
            if v == 0 || v > MAX_DEPTH {
                return Err(Error::Usage(format!("{name} {v} outside 1..={MAX_DEPTH}")));
            }
        }
        if self.outs == 0 || self.outs > MAX_OUTS {
            return Err(Error::Usage(format!(
                "-o {}: outstanding READ/atomic requests must be 1..={MAX_OUTS}",
                self.outs
            )));
        }
        if self.sizes.is_empty() {
            return Err(Error::Usage("no message size".into()));
        }
        for r in &self.sizes {
            if r.size == 0 || r.size > MAX_SIZE {
                return Err(Error::Usage(format!(
                    "size {} outside 1..={MAX_SIZE} bytes",
                    r.size
                )));
            }
            if t.op() == Op::Atomic && r.size != 8 {
                return Err(Error::Usage(format!(
                    "atomic operations move 8 bytes; -s {} is not possible",
                    r.size
                )));
            }
            if self.conn == Conn::Ud && r.size > self.mtu as u64 {
                return Err(Error::Usage(format!(
                    "a UD message must fit one packet: size {} exceeds the MTU {} (use -m or a smaller -s)",
                    r.size, self.mtu
                )));
            }
            if r.iters == 0 {
                return Err(Error::Usage("-n must be at least 1".into()));
            }
        }
        Ok(())
    }
}

/// Sizes of `-a`: powers of two from 2 to 8 MiB (perftest's range), only up
/// to the MTU for UD, only 8 for atomics.
pub fn all_sizes(test: Test, conn: Conn, mtu: u32) -> Vec<u64> {
    if test.op() == Op::Atomic {
        return vec![8];
    }
    let max = if conn == Conn::Ud {
        mtu as u64
    } else {
        ALL_MAX_SIZE
    };
    (1..=23).map(|e| 1u64 << e).filter(|&s| s <= max).collect()
}

/// Iterations for `size` under `-a` without `-n`: the default, fewer for
/// big messages so that each size moves at most a fixed number of bytes.
pub fn capped_iters(test: Test, size: u64) -> u64 {
    let budget = if test.is_lat() {
        ALL_LAT_BYTES
    } else {
        ALL_BW_BYTES
    };
    (budget / size.max(1)).clamp(ALL_MIN_ITERS, test.default_iters())
}

/// Parses a size: a number of bytes, optionally with a binary suffix
/// (`K`/`KiB`, `M`/`MiB`, `G`/`GiB`; `4K` is 4096).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (bytes, or with K, M, G: 4K, 64KiB, 1M)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use K, M or G)")),
    };
    let v = n
        .checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))?;
    if v == 0 {
        return Err("the size must be at least 1 byte".into());
    }
    if v > MAX_SIZE {
        return Err(format!("{s:?} is larger than the limit of 1 GiB"));
    }
    Ok(v)
}

/// Parses `-D`: seconds, fractions allowed (`0.5`).
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(v.is_finite() && v > 0.0) {
        return Err("the duration must be more than 0 seconds".into());
    }
    let ms = (v * 1000.0).round() as u64;
    if ms == 0 || ms > MAX_DURATION_MS {
        return Err(format!("{s}: duration outside 1 ms .. 24 h"));
    }
    Ok(ms)
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(test: Test) -> Params {
        Params {
            test,
            conn: Conn::Rc,
            qps: 2,
            mtu: 1024,
            tx_depth: 64,
            rx_depth: 256,
            outs: 8,
            cq_mod: 16,
            atomic: AtomicType::CmpAndSwap,
            sizes: vec![
                SizeRun { size: 8, iters: 10 },
                SizeRun { size: 8, iters: 3 },
            ],
            duration_ms: Some(1500),
            verify: false,
            corrupt: true,
        }
    }

    #[test]
    fn line_round_trips() {
        let p = base(Test::AtomicBw);
        assert_eq!(Params::from_line(&p.to_line()).unwrap(), p);
        let mut p = base(Test::SendBw);
        p.conn = Conn::Ud;
        p.duration_ms = None;
        assert_eq!(Params::from_line(&p.to_line()).unwrap(), p);
    }

    #[test]
    fn bad_lines_are_refused() {
        for l in [
            "HELLO",
            "SOFTRDMA-PERF1",
            "SOFTRDMA-PERF1 test=nope sizes=8x1",
            "SOFTRDMA-PERF1 test=read-bw conn=UD sizes=8x1",
            "SOFTRDMA-PERF1 test=write-bw sizes=0x1",
            "SOFTRDMA-PERF1 test=write-bw sizes=8x0",
            "SOFTRDMA-PERF1 test=write-bw sizes=99999999999x1",
            "SOFTRDMA-PERF1 test=write-bw qps=70000 sizes=8x1",
            "SOFTRDMA-PERF1 test=atomic-bw sizes=16x1",
            "SOFTRDMA-PERF1 test=write-bw mtu=1000 sizes=8x1",
            "SOFTRDMA-PERF1 test=write-bw sizes",
        ] {
            assert!(Params::from_line(l).is_err(), "{l}");
        }
    }

    #[test]
    fn sizes_and_caps() {
        let a = all_sizes(Test::WriteBw, Conn::Rc, 4096);
        assert_eq!((a[0], a.len(), *a.last().unwrap()), (2, 23, 8 << 20));
        assert_eq!(
            *all_sizes(Test::SendBw, Conn::Ud, 1024).last().unwrap(),
            1024
        );
        assert_eq!(all_sizes(Test::AtomicLat, Conn::Rc, 4096), vec![8]);
        assert_eq!(capped_iters(Test::WriteBw, 2), 5000);
        assert_eq!(capped_iters(Test::WriteBw, 8 << 20), 32);
        assert_eq!(capped_iters(Test::WriteLat, 8 << 20), 5);
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert!(parse_size("0").is_err());
        assert!(parse_size("2G").is_err());
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("-1").is_err());
        assert_eq!(parse_duration("0.5"), Ok(500));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("x").is_err());
    }
}
