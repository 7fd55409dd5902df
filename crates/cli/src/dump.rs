//! `softrdma dump FILE`: one line per RoCE v2 packet of a capture, then
//! per-QP totals and a summary.
//!
//! ```text
//!     20    0.000000 198.18.0.2:49476 > 198.18.0.1:4791 RC_RDMA_WRITE_FIRST qp=0x000011 ... icrc=ok
//! ...
//! per-QP totals (class, source -> destination, destination QP):
//!   req  198.18.0.2 -> 198.18.0.1 qp 0x000011: 40 pkts, ... PSN 0x..-0x.. (40 distinct, span 40), ...
//! frames 99, RoCE v2 60 (ICRC bad 0, malformed 0), skipped 39: ipv4/tcp 37, arp 2
//! ```
//!
//! A packet line is the frame number, the time since the first frame of the
//! file, and `softrdma_wire::pretty`'s line. A flow is one direction of
//! traffic to one destination QP, split into requests (`req`: SEND, WRITE,
//! READ request, atomics), responses (`resp`: ACK/NAK, READ responses,
//! atomic ACKs) and `cnp`, because both peers of a connection may send both
//! (each flow then has a single PSN space). Per flow: packets, IP bytes,
//! payload bytes, the PSN range in serial order with the number of distinct
//! PSNs and the span, `repeats` (packets whose PSN the flow had already
//! carried: retransmissions, duplicate ACKs, RNR retries), `rewinds` (times
//! the PSN went backwards: go-back-N restarts), AETH syndromes by kind and
//! ICRC failures.

use crate::json;
use crate::traffic::{self, Transport};
use softrdma_pcap::link::{self, Network};
use softrdma_pcap::{self as capture, CaptureReader, Frame, Timestamp};
use softrdma_wire::opcode::Transport as IbTransport;
use softrdma_wire::{pretty, DatagramRepr, NakCode, Psn, RoceDatagram, Syndrome};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::path::PathBuf;

/// Arguments of `softrdma dump`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Capture file (pcap or pcapng; `-` reads standard input).
    pub file: PathBuf,
    /// Print only the per-QP totals and the summary, not every packet.
    #[arg(long, short)]
    pub quiet: bool,
    /// Write JSON lines instead of text: one object per packet
    /// (`"type":"packet"`), per flow (`"flow"`) and a `"summary"`.
    #[arg(long)]
    pub json: bool,
}

/// Why a dump stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The capture is damaged or unreadable (the packets before the damage
    /// and the totals were printed).
    #[error(transparent)]
    Capture(capture::Error),
    /// Writing the output failed.
    #[error("writing output: {0}")]
    Output(io::Error),
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Output(e)
    }
}

/// Runs the subcommand: opens the file and dumps it to `out`.
pub fn run(args: &Args, out: &mut impl Write) -> Result<Stats, Error> {
    let options = Options {
        quiet: args.quiet,
        json: args.json,
    };
    if args.file.as_os_str() == "-" {
        let stdin = io::stdin();
        return dump(stdin.lock(), None, &options, out);
    }
    let file = std::fs::File::open(&args.file).map_err(|e| {
        Error::Capture(capture::Error {
            offset: 0,
            kind: capture::ErrorKind::Io(e.to_string()),
        })
    })?;
    let size = file.metadata().ok().map(|m| m.len());
    dump(
        io::BufReader::with_capacity(1 << 16, file),
        size,
        &options,
        out,
    )
}

/// Output options.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Totals and summary only.
    pub quiet: bool,
    /// JSON lines instead of text.
    pub json: bool,
}

/// Dumps a capture read from `input` (`size`: its length, when known) and
/// returns its totals. On a damaged file, prints what came before the
/// damage and the totals, then returns the capture error.
pub fn dump(
    input: impl Read,
    size: Option<u64>,
    options: &Options,
    out: &mut impl Write,
) -> Result<Stats, Error> {
    let mut reader = CaptureReader::new(input, size).map_err(Error::Capture)?;
    let mut stats = Stats {
        json: options.json,
        ..Stats::default()
    };
    let mut line = String::new();
    let failure = loop {
        match reader.next_frame() {
            Ok(Some(frame)) => {
                line.clear();
                if stats.frame(&frame, &mut line) && !options.quiet {
                    out.write_all(line.as_bytes())?;
                }
            }
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    line.clear();
    stats.totals(&mut line);
    out.write_all(line.as_bytes())?;
    out.flush()?;
    match failure {
        Some(e) => Err(Error::Capture(e)),
        None => Ok(stats),
    }
}

/// Dumps a capture held in memory into a `String` (tests, fuzzing).
pub fn dump_bytes(bytes: &[u8], options: &Options) -> (String, Result<Stats, Error>) {
    let mut out = Vec::new();
    let res = dump(bytes, Some(bytes.len() as u64), options, &mut out);
    (String::from_utf8_lossy(&out).into_owned(), res)
}

/// Requests, responses or congestion notifications.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// SEND, RDMA WRITE, READ request, atomics.
    Req,
    /// ACK/NAK, READ responses, atomic ACKs.
    Resp,
    /// Congestion notification packets.
    Cnp,
}

impl Class {
    fn name(self) -> &'static str {
        match self {
            Class::Req => "req ",
            Class::Resp => "resp",
            Class::Cnp => "cnp ",
        }
    }
}

/// One direction of traffic to one destination QP, one class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlowKey {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Destination QP.
    pub qp: u32,
    /// Class of the packets.
    pub class: Class,
}

/// Totals of one flow.
#[derive(Clone, Debug, Default)]
pub struct Flow {
    /// Packets.
    pub packets: u64,
    /// IP datagram bytes.
    pub bytes: u64,
    /// Payload bytes (without pad).
    pub payload: u64,
    first_psn: u32,
    /// PSN offsets from the first PSN, accumulated in serial steps so a
    /// long capture never wraps: current, lowest, highest.
    cur: i64,
    lo: i64,
    hi: i64,
    distinct: HashSet<u32>,
    /// Packets whose PSN the flow had already carried.
    pub repeats: u64,
    /// Times the PSN went backwards.
    pub rewinds: u64,
    /// AETH syndromes by kind.
    pub aeth: BTreeMap<&'static str, u64>,
    /// Packets whose ICRC does not check.
    pub icrc_bad: u64,
}

impl Flow {
    /// Lowest and highest PSN (serial order).
    pub fn psn_range(&self) -> (Psn, Psn) {
        let at = |off: i64| Psn::new((self.first_psn as i64 + off).rem_euclid(1 << 24) as u32);
        (at(self.lo), at(self.hi))
    }
    /// Number of distinct PSNs.
    pub fn distinct(&self) -> usize {
        self.distinct.len()
    }
    /// Highest minus lowest PSN, plus one.
    pub fn span(&self) -> u64 {
        (self.hi - self.lo + 1) as u64
    }

    fn add_psn(&mut self, psn: Psn) {
        if self.packets == 0 {
            self.first_psn = psn.value();
        } else {
            let prev = Psn::new((self.first_psn as i64 + self.cur).rem_euclid(1 << 24) as u32);
            // Signed 24-bit step from the previous packet.
            let d = psn.distance_from(prev) as i64;
            let step = if d >= 1 << 23 { d - (1 << 24) } else { d };
            if step < 0 {
                self.rewinds += 1;
            }
            self.cur += step;
            self.lo = self.lo.min(self.cur);
            self.hi = self.hi.max(self.cur);
        }
        if !self.distinct.insert(psn.value()) {
            self.repeats += 1;
        }
        self.packets += 1;
    }
}

/// Short name of an AETH syndrome's kind.
pub fn syndrome_kind(s: Syndrome) -> &'static str {
    match s {
        Syndrome::Ack { .. } => "ACK",
        Syndrome::RnrNak { .. } => "RNR_NAK",
        Syndrome::Nak(NakCode::PsnSequenceError) => "NAK(PSN_SEQ_ERR)",
        Syndrome::Nak(NakCode::InvalidRequest) => "NAK(INV_REQ)",
        Syndrome::Nak(NakCode::RemoteAccessError) => "NAK(REM_ACCESS_ERR)",
        Syndrome::Nak(NakCode::RemoteOperationalError) => "NAK(REM_OP_ERR)",
        Syndrome::Nak(NakCode::InvalidRdRequest) => "NAK(INV_RD_REQ)",
        Syndrome::Nak(NakCode::Reserved(_)) => "NAK(reserved)",
        Syndrome::Reserved(_) => "AETH(reserved)",
    }
}

/// Everything counted over a capture.
#[derive(Debug, Default)]
pub struct Stats {
    /// Frames read.
    pub frames: u64,
    /// RoCE v2 packets (UDP destination port 4791), malformed ones included.
    pub roce: u64,
    /// RoCE v2 packets whose ICRC does not check.
    pub icrc_bad: u64,
    /// RoCE v2 packets the wire crate refused.
    pub malformed: u64,
    /// Other frames by kind.
    pub skipped: HashMap<String, u64>,
    /// Flows in order of first appearance.
    pub flows: Vec<(FlowKey, Flow)>,
    /// Write JSON lines instead of text.
    pub json: bool,
    index: HashMap<FlowKey, usize>,
    first_ts: Option<Timestamp>,
}

impl Stats {
    /// Counts a frame; for a RoCE v2 packet writes its line into `line` and
    /// returns true.
    pub fn frame(&mut self, f: &Frame<'_>, line: &mut String) -> bool {
        self.frames += 1;
        if self.frames == 1 {
            self.first_ts = f.timestamp;
        }
        let ip = match link::network(f.linktype, f.data) {
            Network::Ip(ip) => ip,
            Network::Other(kind) => {
                *self.skipped.entry(kind.to_string()).or_default() += 1;
                return false;
            }
        };
        if let Transport::Other(kind) = traffic::transport(ip) {
            *self.skipped.entry(kind.to_string()).or_default() += 1;
            return false;
        }
        self.roce += 1;
        let time = rel_time(self.first_ts, f.timestamp);
        let cut = ((f.data.len() as u64) < f.orig_len as u64).then_some((f.data.len(), f.orig_len));
        match RoceDatagram::new_checked(ip) {
            Ok(d) => {
                if self.json {
                    json::packet(line, f.number, time.as_deref(), &d);
                } else {
                    frame_prefix(line, f.number, time.as_deref());
                    let _ = pretty::write_datagram(line, d.datagram());
                    // A MAD to QP 1: the CM message (REQ, REP, REJ …).
                    let _ = pretty::write_qp1_mad(line, &d.ib());
                }
                self.count(&d);
            }
            Err(e) => {
                self.malformed += 1;
                if self.json {
                    json::malformed(line, f.number, time.as_deref(), ip, &e, cut);
                } else {
                    frame_prefix(line, f.number, time.as_deref());
                    write_addresses(line, ip);
                    let _ = write!(line, "malformed ({e})");
                    if let Some((got, orig)) = cut {
                        let _ = write!(line, ", frame cut to {got} of {orig} bytes by the capture");
                    }
                }
            }
        }
        line.push('\n');
        true
    }

    fn count(&mut self, d: &RoceDatagram<&[u8]>) {
        let r = DatagramRepr::parse(d);
        let ib = d.ib();
        let info = ib.info();
        let bth = ib.bth();
        let class = if info.transport == IbTransport::Cnp {
            Class::Cnp
        } else if info.is_request() {
            Class::Req
        } else {
            Class::Resp
        };
        let key = FlowKey {
            src: r.ip.src(),
            dst: r.ip.dst(),
            qp: bth.dest_qp().value(),
            class,
        };
        let i = *self.index.entry(key).or_insert_with(|| {
            self.flows.push((key, Flow::default()));
            self.flows.len() - 1
        });
        let flow = &mut self.flows[i].1;
        flow.add_psn(bth.psn());
        flow.bytes += d.datagram().len() as u64;
        flow.payload += ib.payload().len() as u64;
        if let Some(a) = ib.aeth() {
            *flow.aeth.entry(syndrome_kind(a.syndrome())).or_default() += 1;
        }
        if !d.icrc_ok() {
            flow.icrc_bad += 1;
            self.icrc_bad += 1;
        }
    }

    /// Writes the per-QP totals and the summary line.
    pub fn totals(&self, out: &mut String) {
        if self.json {
            for (k, f) in &self.flows {
                json::flow(out, k, f);
            }
            json::summary(out, self);
            return;
        }
        if !self.flows.is_empty() {
            out.push_str("per-QP totals (class, source -> destination, destination QP):\n");
        }
        for (k, f) in &self.flows {
            let (lo, hi) = f.psn_range();
            let _ = write!(
                out,
                "  {} {} -> {} qp {:#08x}: {} pkts, {} bytes, payload {}, PSN {}..{} \
                 ({} distinct, span {}), repeats {}, rewinds {}, icrc bad {}",
                k.class.name(),
                k.src,
                k.dst,
                k.qp,
                f.packets,
                f.bytes,
                f.payload,
                lo,
                hi,
                f.distinct(),
                f.span(),
                f.repeats,
                f.rewinds,
                f.icrc_bad
            );
            if !f.aeth.is_empty() {
                out.push_str(", AETH");
                let mut kinds: Vec<_> = f.aeth.iter().collect();
                kinds.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
                for (i, (kind, n)) in kinds.into_iter().enumerate() {
                    let _ = write!(out, "{} {kind} {n}", if i == 0 { "" } else { "," });
                }
            }
            out.push('\n');
        }
        let skipped = self.frames - self.roce;
        let _ = write!(
            out,
            "frames {}, RoCE v2 {} (ICRC bad {}, malformed {}), skipped {}",
            self.frames, self.roce, self.icrc_bad, self.malformed, skipped
        );
        let mut kinds: Vec<_> = self.skipped.iter().collect();
        kinds.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        for (i, (kind, n)) in kinds.into_iter().enumerate() {
            let _ = write!(out, "{} {kind} {n}", if i == 0 { ":" } else { "," });
        }
        out.push('\n');
    }
}

/// Time since the first frame, in seconds with the file's precision.
/// The frame number and time that start a packet line.
fn frame_prefix(line: &mut String, number: u64, time: Option<&str>) {
    let _ = write!(line, "{number:>6} {:>11} ", time.unwrap_or("-"));
}

fn rel_time(first: Option<Timestamp>, ts: Option<Timestamp>) -> Option<String> {
    let (first, ts) = (first?, ts?);
    let d = ts.nanos - first.nanos;
    let digits = ts.digits.clamp(1, 9) as u32;
    let abs = d.unsigned_abs();
    let frac = (abs % 1_000_000_000) / 10u128.pow(9 - digits);
    Some(format!(
        "{}{}.{:0w$}",
        if d < 0 { "-" } else { "" },
        abs / 1_000_000_000,
        frac,
        w = digits as usize
    ))
}

/// `src:port > dst:port ` from raw IP/UDP bytes, as far as they go.
fn write_addresses(out: &mut String, ip: &[u8]) {
    let port = |at: usize| ip.get(at..at + 2).map(|p| u16::from_be_bytes([p[0], p[1]]));
    let (src, dst, l4): (Option<IpAddr>, Option<IpAddr>, usize) = match ip.first().map(|b| b >> 4) {
        Some(4) => {
            let a = |at: usize| {
                ip.get(at..at + 4)
                    .map(|b| IpAddr::from([b[0], b[1], b[2], b[3]]))
            };
            (a(12), a(16), (ip[0] & 0x0f) as usize * 4)
        }
        Some(6) => {
            let a = |at: usize| {
                ip.get(at..at + 16).map(|b| {
                    let mut x = [0u8; 16];
                    x.copy_from_slice(b);
                    IpAddr::from(x)
                })
            };
            (a(8), a(24), 40)
        }
        _ => (None, None, 0),
    };
    let fmt = |a: Option<IpAddr>, p: Option<u16>| {
        let a = match a {
            Some(IpAddr::V6(v6)) => format!("[{v6}]"),
            Some(v4) => v4.to_string(),
            None => "?".to_string(),
        };
        match p {
            Some(p) => format!("{a}:{p}"),
            None => format!("{a}:?"),
        }
    };
    let _ = write!(out, "{} > {} ", fmt(src, port(l4)), fmt(dst, port(l4 + 2)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_time_formatting() {
        let t = |nanos, digits| Some(Timestamp { nanos, digits });
        assert_eq!(
            rel_time(t(1_000_000_000, 6), t(3_500_001_999, 6)).unwrap(),
            "2.500001"
        );
        assert_eq!(rel_time(t(10, 9), t(5, 9)).unwrap(), "-0.000000005");
        assert_eq!(rel_time(None, t(5, 9)), None);
        assert_eq!(rel_time(t(5, 9), None), None);
    }

    #[test]
    fn psn_accounting_in_serial_order() {
        let mut f = Flow::default();
        // Across the 2^24 wrap, a go-back-N rewind, and a duplicate.
        for p in [0xff_fffe, 0xff_ffff, 0, 1, 0xff_ffff, 0, 1, 2, 2] {
            f.add_psn(Psn::new(p));
        }
        assert_eq!(f.psn_range(), (Psn::new(0xff_fffe), Psn::new(2)));
        assert_eq!((f.distinct(), f.span()), (5, 5));
        assert_eq!((f.packets, f.repeats, f.rewinds), (9, 4, 1));
    }

    #[test]
    fn addresses_of_cut_datagrams() {
        let mut s = String::new();
        write_addresses(
            &mut s,
            &[0x45, 0, 0, 0, 0, 0, 0, 0, 0, 17, 0, 0, 1, 2, 3, 4, 5, 6, 7],
        );
        assert_eq!(s, "1.2.3.4:? > ?:? ");
        s.clear();
        write_addresses(&mut s, &[]);
        assert_eq!(s, "?:? > ?:? ");
    }
}
