//! Figures and how they are printed: perftest's tables, a JSON document,
//! the counters of each side, and the progress line.

use softrdma::Device;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// MiB.
const MIB: f64 = (1u64 << 20) as f64;

/// perftest's dashed rule.
pub const RULE: &str =
    "---------------------------------------------------------------------------------------";

/// The figures of one size of a bandwidth test.
#[derive(Clone, Debug, PartialEq)]
pub struct BwFigures {
    /// Message size.
    pub size: u64,
    /// Iterations per QP (the smallest, in duration mode).
    pub iters: u64,
    /// Operations over all QPs.
    pub ops: u64,
    /// From the first post to the last completion.
    pub secs: f64,
    /// Best rate over a window (bytes per second).
    pub peak_bps: f64,
    /// Average rate (bytes per second).
    pub avg_bps: f64,
    /// Messages per second.
    pub msg_rate: f64,
}

/// Rates from `(seconds since the first post, operations completed)`
/// samples: the average over the whole run, and the peak — the best rate
/// over any stretch of at least `window` operations.
pub fn bw_figures(size: u64, iters: u64, samples: &[(f64, u64)], window: u64) -> BwFigures {
    let (secs, ops) = samples.last().copied().unwrap_or((0.0, 0));
    let rate = |ops: u64, s: f64| if s > 0.0 { ops as f64 / s } else { 0.0 };
    let avg_ops = rate(ops, secs);
    let w = window.clamp(1, ops.max(1));
    let mut peak_ops: f64 = 0.0;
    let mut a = 0;
    for b in 1..samples.len() {
        while a + 1 < b && samples[b].1 - samples[a + 1].1 >= w {
            a += 1;
        }
        let n = samples[b].1 - samples[a].1;
        if n >= w {
            peak_ops = peak_ops.max(rate(n, samples[b].0 - samples[a].0));
        }
    }
    let peak_ops = peak_ops.max(avg_ops);
    BwFigures {
        size,
        iters,
        ops,
        secs,
        peak_bps: peak_ops * size as f64,
        avg_bps: avg_ops * size as f64,
        msg_rate: avg_ops,
    }
}

/// The figures of one size of a latency test, in microseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct LatFigures {
    /// Message size.
    pub size: u64,
    /// Iterations.
    pub iters: u64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// Median.
    pub typical: f64,
    /// Mean.
    pub avg: f64,
    /// Standard deviation.
    pub stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

/// Statistics of per-operation times in nanoseconds (`halve`: report half
/// of each, the one-way time of a ping-pong, as perftest does).
pub fn lat_figures(size: u64, samples_ns: &mut [u64], halve: bool) -> LatFigures {
    samples_ns.sort_unstable();
    let div = if halve { 2000.0 } else { 1000.0 };
    let us: Vec<f64> = samples_ns.iter().map(|&n| n as f64 / div).collect();
    let n = us.len();
    if n == 0 {
        return LatFigures {
            size,
            iters: 0,
            min: 0.0,
            max: 0.0,
            typical: 0.0,
            avg: 0.0,
            stdev: 0.0,
            p99: 0.0,
            p999: 0.0,
        };
    }
    let avg = us.iter().sum::<f64>() / n as f64;
    let var = us.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
    // Nearest rank.
    let pct = |p: f64| us[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
    LatFigures {
        size,
        iters: n as u64,
        min: us[0],
        max: us[n - 1],
        typical: us[n / 2],
        avg,
        stdev: var.sqrt(),
        p99: pct(0.99),
        p999: pct(0.999),
    }
}

/// Bandwidth table header.
pub fn bw_header(gbits: bool) -> String {
    let u = if gbits { "Gb/sec" } else { "MiB/sec" };
    format!(" #bytes     #iterations    BW peak[{u}]    BW average[{u}]   MsgRate[Mpps]")
}

/// Bytes per second in the unit of the table.
pub fn bw_unit(bps: f64, gbits: bool) -> f64 {
    if gbits {
        bps * 8.0 / 1e9
    } else {
        bps / MIB
    }
}

/// One bandwidth row.
pub fn bw_row(f: &BwFigures, gbits: bool) -> String {
    format!(
        " {:<10} {:<14} {:<18.2} {:<21.2} {:.6}",
        f.size,
        f.iters,
        bw_unit(f.peak_bps, gbits),
        bw_unit(f.avg_bps, gbits),
        f.msg_rate / 1e6
    )
}

/// Latency table header.
pub fn lat_header() -> String {
    " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]".into()
}

/// One latency row.
pub fn lat_row(f: &LatFigures) -> String {
    format!(
        " {:<7} {:<14} {:<14.2} {:<12.2} {:<18.2} {:<14.2} {:<15.2} {:<22.2} {:.2}",
        f.size, f.iters, f.min, f.max, f.typical, f.avg, f.stdev, f.p99, f.p999
    )
}

/// The counters of a device worth printing: the main ones always, the
/// others when not zero, the faults injected (`fault_*`, when not zero),
/// then the socket's drops.
pub fn device_counters(dev: &Device) -> Vec<(String, u64)> {
    let c = dev.counters();
    let naks_sent = c.rnr_nak_sent
        + c.seq_nak_sent
        + c.inv_req_nak_sent
        + c.rem_access_nak_sent
        + c.rem_op_nak_sent;
    let naks_rcvd = c.rnr_nak_rcvd
        + c.seq_nak_rcvd
        + c.inv_req_nak_rcvd
        + c.rem_access_nak_rcvd
        + c.rem_op_nak_rcvd;
    let always = [
        ("tx_packets", c.tx_packets),
        ("rx_packets", c.rx_packets),
        ("tx_bytes", c.tx_bytes),
        ("rx_bytes", c.rx_bytes),
        ("retransmits", c.retransmits),
        ("timeouts", c.timeouts),
        ("naks_sent", naks_sent),
        ("naks_rcvd", naks_rcvd),
    ];
    let mut v: Vec<(String, u64)> = always.iter().map(|(k, n)| (k.to_string(), *n)).collect();
    for (k, n) in c.nonzero() {
        if !always.iter().any(|(a, _)| *a == k) {
            v.push((k.to_string(), n));
        }
    }
    // Faults injected (SOFTRDMA_FAULTS): what the figures went through.
    for (k, n) in dev.fault_counters().nonzero() {
        v.push((k.to_string(), n));
    }
    let s = dev.socket_stats();
    v.push(("socket_send_errors".into(), s.send_errors));
    v.push(("socket_rx_dropped".into(), s.recv_dropped as u64));
    v.push(("engine_tx_dropped".into(), dev.tx_dropped()));
    if s.recv_truncated > 0 {
        v.push(("socket_rx_truncated".into(), s.recv_truncated));
    }
    v
}

/// Counters as `key=value` words (the wire form of the COUNTERS line).
pub fn counters_words(v: &[(String, u64)]) -> String {
    let mut s = String::new();
    for (k, n) in v {
        if !s.is_empty() {
            s.push(' ');
        }
        let _ = write!(s, "{k}={n}");
    }
    s
}

/// Parses `key=value` words; anything else is skipped.
pub fn parse_counters(words: &str) -> Vec<(String, u64)> {
    words
        .split_whitespace()
        .filter_map(|w| {
            let (k, v) = w.split_once('=')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// Counters as text lines, wrapped.
pub fn counters_text(label: &str, v: &[(String, u64)]) -> String {
    let mut out = format!(" {label}:\n");
    let mut line = String::from("  ");
    for (k, n) in v {
        let w = format!("{k} {n}");
        if line.len() + w.len() + 2 > RULE.len() && line.len() > 2 {
            out.push_str(line.trim_end_matches([',', ' ']));
            out.push('\n');
            line = String::from("  ");
        }
        line.push_str(&w);
        line.push_str(", ");
    }
    out.push_str(line.trim_end_matches([',', ' ']));
    out.push('\n');
    out
}

/// A JSON value: serde_json's, keys in insertion order.
pub type Json = serde_json::Value;

/// An object from pairs, in their order.
pub fn obj<K: Into<String>>(fields: impl IntoIterator<Item = (K, Json)>) -> Json {
    Json::Object(fields.into_iter().map(|(k, v)| (k.into(), v)).collect())
}

/// A number rounded to six decimals (plenty for µs and MiB/s); a
/// non-finite one becomes null.
pub fn num(x: f64) -> Json {
    Json::from((x * 1e6).round() / 1e6)
}

/// Counters as an object.
pub fn counters(v: &[(String, u64)]) -> Json {
    obj(v.iter().map(|(k, n)| (k.clone(), Json::from(*n))))
}

/// The document as text, indented by two spaces per level, with a final
/// newline.
pub fn document(v: &Json) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s
}

/// Bandwidth figures as JSON.
pub fn bw_json(f: &BwFigures) -> Vec<(String, Json)> {
    vec![
        ("bytes".into(), Json::from(f.size)),
        ("iterations".into(), Json::from(f.iters)),
        ("operations".into(), Json::from(f.ops)),
        ("seconds".into(), num(f.secs)),
        ("bw_peak_mib_s".into(), num(bw_unit(f.peak_bps, false))),
        ("bw_average_mib_s".into(), num(bw_unit(f.avg_bps, false))),
        ("bw_peak_gbit_s".into(), num(bw_unit(f.peak_bps, true))),
        ("bw_average_gbit_s".into(), num(bw_unit(f.avg_bps, true))),
        ("msg_rate_mpps".into(), num(f.msg_rate / 1e6)),
    ]
}

/// Latency figures as JSON.
pub fn lat_json(f: &LatFigures) -> Vec<(String, Json)> {
    vec![
        ("bytes".into(), Json::from(f.size)),
        ("iterations".into(), Json::from(f.iters)),
        ("t_min_us".into(), num(f.min)),
        ("t_max_us".into(), num(f.max)),
        ("t_typical_us".into(), num(f.typical)),
        ("t_avg_us".into(), num(f.avg)),
        ("t_stdev_us".into(), num(f.stdev)),
        ("p99_us".into(), num(f.p99)),
        ("p99_9_us".into(), num(f.p999)),
    ]
}

/// The progress line on stderr: on a terminal after the first second of a
/// size (rewritten in place), or with `--progress` twice a second (one line
/// each).
pub struct Progress {
    tty: bool,
    forced: bool,
    label: String,
    start: Instant,
    next: Instant,
    shown: bool,
    calls: u32,
}

impl Progress {
    /// `forced`: `--progress` was given.
    pub fn new(forced: bool) -> Progress {
        let now = Instant::now();
        Progress {
            tty: std::io::stderr().is_terminal(),
            forced,
            label: String::new(),
            start: now,
            next: now,
            shown: false,
            calls: 0,
        }
    }

    /// A progress line that never prints.
    pub fn off() -> Progress {
        let mut p = Progress::new(false);
        p.tty = false;
        p
    }

    /// Starts a size.
    pub fn begin(&mut self, label: String) {
        self.label = label;
        self.start = Instant::now();
        let first = if self.forced {
            Duration::from_millis(500)
        } else {
            Duration::from_secs(1)
        };
        self.next = self.start + first;
        self.shown = false;
    }

    /// Reports `done` operations of `total` (`None` in duration mode, with
    /// `of_secs` the duration).
    pub fn tick(&mut self, done: u64, total: Option<u64>, of_secs: Option<f64>) {
        if !(self.tty || self.forced) {
            return;
        }
        self.calls = self.calls.wrapping_add(1);
        if !self.calls.is_multiple_of(64) {
            return;
        }
        let now = Instant::now();
        if now < self.next {
            return;
        }
        let el = now.duration_since(self.start).as_secs_f64();
        let what = match (total, of_secs) {
            (Some(t), _) => format!(
                "{done}/{t} operations ({:.0}%)",
                100.0 * done as f64 / t.max(1) as f64
            ),
            (None, Some(d)) => format!("{done} operations, {el:.1}/{d:.1} s"),
            (None, None) => format!("{done} operations"),
        };
        let rate = if el > 0.0 { done as f64 / el } else { 0.0 };
        let line = format!("{}: {what}, {:.0} ops/s", self.label, rate);
        if self.tty && !self.forced {
            eprint!("\r\x1b[K{line}");
            self.next = now + Duration::from_millis(250);
        } else {
            eprintln!("{line}");
            self.next = now + Duration::from_millis(500);
        }
        self.shown = true;
    }

    /// Ends a size (clears the line on a terminal).
    pub fn end(&mut self) {
        if self.shown && self.tty && !self.forced {
            eprint!("\r\x1b[K");
        }
        self.shown = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_from_samples() {
        // 100 ops of 1 MiB in 1 s, steady, then a burst of 100 in 0.1 s.
        let mut s = vec![(0.0, 0)];
        for i in 1..=10 {
            s.push((i as f64 * 0.1, i * 10));
        }
        s.push((1.1, 200));
        let f = bw_figures(1 << 20, 200, &s, 50);
        assert!((f.avg_bps / MIB - 200.0 / 1.1).abs() < 1e-6, "{f:?}");
        // Best window of at least 50 ops: the last 100 in 0.1 s ... with the
        // sample before it (1.0 s, 100): 100 ops in 0.1 s.
        assert!((f.peak_bps / MIB - 1000.0).abs() < 1e-6, "{f:?}");
        assert!((f.msg_rate - 200.0 / 1.1).abs() < 1e-6);
        // A window larger than the run: the average.
        let g = bw_figures(8, 200, &s, 10_000);
        assert_eq!(g.peak_bps, g.avg_bps);
    }

    #[test]
    fn latency_statistics() {
        let mut v: Vec<u64> = (1..=1000).rev().map(|i| i * 1000).collect();
        let f = lat_figures(2, &mut v, false);
        assert_eq!((f.min, f.max, f.iters), (1.0, 1000.0, 1000));
        assert_eq!(f.typical, 501.0);
        assert_eq!(f.p99, 990.0);
        assert_eq!(f.p999, 999.0);
        assert!((f.avg - 500.5).abs() < 1e-9);
        let h = lat_figures(2, &mut [4000, 2000], true);
        assert_eq!((h.min, h.max), (1.0, 2.0));
    }

    #[test]
    fn json_is_well_formed() {
        let j = obj([
            ("a", Json::from(1u64)),
            ("b", num(0.000_000_1)),
            ("c", num(f64::NAN)),
            ("d", Json::from("q\"\\\n\u{1}")),
            ("e", Json::Array(vec![Json::Bool(true), Json::Null])),
            ("f", obj(Vec::<(String, Json)>::new())),
            ("g", num(1234.5)),
        ]);
        let s = document(&j);
        assert!(s.ends_with("}\n") && s.contains("\n  \"a\": 1,"), "{s}");
        let back: Json = serde_json::from_str(&s).unwrap();
        assert_eq!(back, j);
        assert_eq!(back["b"], 0.0);
        assert!(back["c"].is_null());
        assert_eq!(back["d"], "q\"\\\n\u{1}");
        assert_eq!(back["g"], 1234.5);
        let keys: Vec<&String> = back.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["a", "b", "c", "d", "e", "f", "g"], "in order");
    }

    #[test]
    fn counters_round_trip() {
        let v = vec![("tx_packets".to_string(), 5), ("x".to_string(), 0)];
        assert_eq!(parse_counters(&counters_words(&v)), v);
    }
}
