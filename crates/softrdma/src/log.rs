//! The log: `tracing` events from the engine and the core (QP state
//! changes, retransmissions, NAKs sent and received, every dropped packet
//! with its reason and QP), written to stderr when `SOFTRDMA_LOG` holds a
//! filter in tracing-subscriber's EnvFilter syntax (`SOFTRDMA_LOG=debug`,
//! `SOFTRDMA_LOG=softrdma::engine=debug,info`).
//!
//! Installed once per process, by the first device opened or the C
//! library's first device list. Without `SOFTRDMA_LOG` nothing is
//! installed and every event costs one load and a branch. A program that
//! installed its own subscriber keeps it (and receives softrdma's events).

use softrdma_config::{Config, ConfigError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// Installs the subscriber `cfg.log` asks for, once.
pub(crate) fn install(cfg: &Config) -> Result<(), ConfigError> {
    static DONE: OnceLock<Result<(), ConfigError>> = OnceLock::new();
    DONE.get_or_init(|| {
        let Some(directives) = &cfg.log.value else {
            return Ok(());
        };
        let filter = tracing_subscriber::EnvFilter::builder()
            .parse(directives)
            .map_err(|e| ConfigError::Var {
                var: "SOFTRDMA_LOG",
                value: directives.clone(),
                want: format!(
                    "a log filter in tracing-subscriber's EnvFilter syntax, e.g. debug or \
                     softrdma::engine=debug,info ({e})"
                ),
            })?;
        use tracing_subscriber::prelude::*;
        // Global filters (no per-layer ones: those keep their state in
        // thread-local storage too).
        let out = tracing_subscriber::fmt::layer()
            .with_writer(Stderr::default)
            .with_thread_names(true);
        // Asked at every event (a plain `filter_fn` is cached per callsite).
        let live =
            tracing_subscriber::filter::dynamic_filter_fn(|_, _| !AT_EXIT.load(Ordering::Relaxed));
        // Fails only when the program installed a subscriber already.
        let _ = tracing_subscriber::registry()
            .with(live)
            .with(filter)
            .with(out)
            .try_init();
        Ok(())
    })
    .clone()
}

/// Set once the process is exiting: the formatter keeps its line buffer
/// in thread-local storage, which `exit` has already destroyed when our
/// exit handlers run, and an event then would panic inside them (and stop
/// their work: the ids' DREQs, the captures' flushes).
static AT_EXIT: AtomicBool = AtomicBool::new(false);

/// Called first by our exit handlers: no more log lines from this process.
pub(crate) fn exiting() {
    AT_EXIT.store(true, Ordering::Relaxed);
}

/// Standard error for the log, written with thread cancellation disabled:
/// a log line inside a program's verb is no cancellation point (see
/// `softrdma_io::NoCancel`).
#[derive(Default)]
struct Stderr {
    _nc: softrdma_io::NoCancel,
}

impl std::io::Write for Stderr {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        std::io::stderr().write(b)
    }
    fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        std::io::stderr().write_all(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// The target of the engine's events (`SOFTRDMA_LOG=softrdma::engine=debug`).
pub(crate) const ENGINE: &str = "softrdma::engine";

/// Whether the core's notes are wanted: the engine's debug events pass the
/// filter. Asked once per device; when not, the core keeps no notes.
pub(crate) fn notes_wanted() -> bool {
    tracing::enabled!(target: ENGINE, tracing::Level::DEBUG)
}

/// Logs one of the core's notes for the device at `dev`.
pub(crate) fn note(dev: std::net::IpAddr, n: softrdma_proto::note::Note) {
    use softrdma_proto::note::Note;
    let psn = |p: Option<softrdma_wire::Psn>| {
        p.map_or_else(|| "-".to_string(), |p| p.value().to_string())
    };
    match n {
        Note::Dropped {
            qpn,
            psn: p,
            from,
            reason,
        } => tracing::debug!(
            target: ENGINE,
            dev = %dev,
            qpn = %qpn.map_or_else(|| "-".to_string(), |q| q.to_string()),
            psn = %psn(p),
            from = %from,
            "dropped packet: {reason}"
        ),
        Note::StateChanged { qpn, from, to } => tracing::debug!(
            target: ENGINE,
            dev = %dev,
            qpn = %qpn,
            "QP state {from:?} -> {to:?}"
        ),
        Note::NakSent { qpn, psn: p, nak } => nak_note(dev, qpn, psn(p), nak, "sent"),
        Note::NakReceived { qpn, psn: p, nak } => nak_note(dev, qpn, psn(p), nak, "received"),
        Note::Retransmitted { qpn, packets } => tracing::debug!(
            target: ENGINE,
            dev = %dev,
            qpn = %qpn,
            packets,
            "retransmitted request packets"
        ),
        Note::Timeout { qpn } => tracing::debug!(
            target: ENGINE,
            dev = %dev,
            qpn = %qpn,
            "retransmission timer expired"
        ),
    }
}

/// A NAK the device `dev` sent or received (`way`) on QP `qpn` for the
/// request at `psn`.
fn nak_note(
    dev: std::net::IpAddr,
    qpn: softrdma_wire::Qpn,
    psn: String,
    nak: softrdma_proto::note::Nak,
    way: &str,
) {
    tracing::debug!(
        target: ENGINE,
        dev = %dev,
        qpn = %qpn,
        psn = %psn,
        "NAK {way}: {nak}"
    );
}

/// How often at most a device reports refused packets.
pub(crate) const REFUSALS_EVERY_NS: u64 = 1_000_000_000;

/// The counters that grow when a peer — or someone posing as one — sends
/// what the device refuses: (name, value) of a device's counters.
pub(crate) fn refusal_counters(c: &softrdma_proto::Counters) -> [(&'static str, u64); 7] {
    [
        ("wrong_peer", c.wrong_peer),
        ("too_many_rd_atomic", c.too_many_rd_atomic),
        ("resp_dropped", c.resp_dropped),
        ("bad_qkey", c.bad_qkey),
        ("bad_pkey", c.bad_pkey),
        ("icrc_errors", c.icrc_errors),
        ("malformed", c.malformed),
    ]
}

/// Refusals logged at most once per [`REFUSALS_EVERY_NS`] per device: a
/// flood of forged packets makes one warning a second, not one per packet
/// (every packet has its own debug line in the notes, when they are on).
/// The first refusal is logged at once; what comes within the period
/// after a report waits for the next one, or for the device's close.
#[derive(Default)]
pub(crate) struct RefusalLog {
    /// The core's refusal total at the last report (one load to compare).
    total: std::sync::atomic::AtomicU64,
    /// When the next report may be made (ns on the engine's clock).
    next_ns: std::sync::atomic::AtomicU64,
    /// The counters at the last report.
    last: crate::sync::Mutex<[u64; 7]>,
}

impl RefusalLog {
    /// Whether a report is due: the core refused something since the last
    /// one (`total`: `Device::refusals`) and the period is over (`now_ns`;
    /// `None`: now, whatever the period — the device closes).
    pub(crate) fn due(&self, total: u64, now_ns: Option<u64>) -> bool {
        use std::sync::atomic::Ordering;
        total != self.total.load(Ordering::Relaxed)
            && now_ns.is_none_or(|n| n >= self.next_ns.load(Ordering::Relaxed))
    }

    /// Logs what grew since the last report and starts a period.
    pub(crate) fn report(
        &self,
        dev: std::net::IpAddr,
        total: u64,
        now_ns: u64,
        c: &softrdma_proto::Counters,
    ) {
        use std::sync::atomic::Ordering;
        self.total.store(total, Ordering::Relaxed);
        self.next_ns
            .store(now_ns.saturating_add(REFUSALS_EVERY_NS), Ordering::Relaxed);
        let now = refusal_counters(c);
        let mut last = self.last.lock();
        let grew: Vec<String> = now
            .iter()
            .zip(last.iter())
            .filter(|((_, n), l)| n > l)
            .map(|((name, n), l)| format!("{name}+{}", n - l))
            .collect();
        for (l, (_, n)) in last.iter_mut().zip(now.iter()) {
            *l = *n;
        }
        drop(last);
        if !grew.is_empty() {
            tracing::warn!(
                target: ENGINE,
                dev = %dev,
                "refused packets (counters since the last report: {}); \
                 wrong_peer: not from a connected QP's peer address and port",
                grew.join(" ")
            );
        }
    }
}

/// Logs one injected fault (`SOFTRDMA_FAULTS`) of the device at `dev`.
pub(crate) fn fault(dev: std::net::IpAddr, e: &softrdma_link::FaultEvent) {
    use softrdma_link::FaultKind;
    let dir = if e.send { "sent to" } else { "received from" };
    let what = match e.kind {
        FaultKind::Lost => "lost".to_string(),
        FaultKind::Duplicated { after_ns } => format!("duplicated (copy {after_ns} ns later)"),
        FaultKind::Reordered => "held back (reordered)".to_string(),
        FaultKind::Delayed { ns } => format!("delayed {ns} ns"),
        FaultKind::Corrupted { bit } => format!("corrupted (bit {bit} flipped)"),
        FaultKind::AckDropped => "ACK dropped".to_string(),
        FaultKind::Answered(a) => format!("answered ({})", a.name()),
        FaultKind::Swallowed => "dropped after an answered request".to_string(),
        FaultKind::Overflow => "lost (the injector holds too much)".to_string(),
    };
    tracing::debug!(
        target: ENGINE,
        dev = %dev,
        peer = %e.peer,
        "fault injected: {what}: {dir} peer: {}",
        e.packet
    );
}
