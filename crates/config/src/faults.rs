//! The fault-injection language of `SOFTRDMA_FAULTS` and of a config
//! file line's `faults=` option: what a device's links do to the
//! datagrams it sends and receives (softrdma-link runs it).
//!
//! ```text
//! SPEC  = RULE { ";" RULE }          (spaces around ";" and "," are ignored)
//! RULE  = ITEM { "," ITEM }
//! ITEM  = seed=N                      the dice's seed (once per SPEC; decimal or 0x hex)
//!       | on=send|recv|both           datagrams the rule's rates and drop-acks act on (default send)
//!       | peer=IP                     only datagrams to (send) or from (recv) this address
//!       | loss=P | dup=P | reorder=P | corrupt=P
//!       | reorder-every=N             hold back every datagram whose PSN is a multiple of N
//!       | reorder-delay=T             how long a reordered datagram is held (default 100us)
//!       | delay=T | jitter=T          one-way delay, plus uniform 0..=jitter
//!       | drop-acks=N                 the next N RC ACKs (not NAKs) are lost
//!       | rem-access=[OP:]N           answer the next N requests of OP received with a
//!                                     NAK remote access error (OP default read)
//!       | rem-inv-req=[OP:]N          … with a NAK invalid request (OP default any)
//!       | rem-op=[OP:]N               … with a NAK remote operational error (OP default any)
//!       | rnr=N                       answer the next N SENDs received with RNR NAKs
//! P     = a probability: 0.05 or 5%
//! T     = a time with its unit: 500ns, 200us, 1.5ms, 1s (at most 10s)
//! N     = a whole number from 1 (seed: from 0)
//! OP    = read | write | atomic | send | any
//! ```
//!
//! Every rule whose `on=` and `peer=` match a datagram acts on it, in the
//! order written (a datagram one rule loses is gone; delays add up). The
//! answers (`rem-*`, `rnr`) act on requests the device *receives*: they
//! answer as its responder would, so a rule holding one is a receive rule
//! unless it says `on=both` (`on=send` with an answer is an error).
//! Corruption flips one bit of the UDP payload, which the receiver's ICRC
//! check catches. Without `seed=` the device draws one from the operating
//! system and prints it, so a run can be replayed.

use std::fmt;
use std::net::IpAddr;

/// What `SOFTRDMA_FAULTS` accepts (for error messages).
pub const FAULTS_WANT: &str = "fault rules ITEM,ITEM;ITEM,… with items seed=N, on=send|recv|both, \
     peer=IP, loss=P, dup=P, reorder=P, reorder-every=N, reorder-delay=T, delay=T, jitter=T, \
     corrupt=P, drop-acks=N, rem-access=[OP:]N, rem-inv-req=[OP:]N, rem-op=[OP:]N, rnr=N \
     (P: 0.05 or 5%; T: 200us, 1ms; OP: read, write, atomic, send or any), \
     e.g. seed=7,loss=5%,dup=1%";

/// Default hold of a reordered datagram, ns.
pub const DEFAULT_REORDER_DELAY_NS: u64 = 100_000;
/// Longest delay, jitter or reorder delay, ns.
pub const MAX_DELAY_NS: u64 = 10_000_000_000;

/// The datagrams a rule acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Direction {
    /// What the device sends.
    #[default]
    Send,
    /// What it receives.
    Recv,
    /// Both.
    Both,
}

impl Direction {
    /// Whether the rule acts on sent (`true`) or received datagrams.
    pub fn covers(self, send: bool) -> bool {
        match self {
            Direction::Send => send,
            Direction::Recv => !send,
            Direction::Both => true,
        }
    }
}

/// Rates of impairments of a link, each applied per datagram with its own
/// throw of the dice (the simulator's link and the engine's injector use
/// the same model: `softrdma_link::fate`).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct Rates {
    /// Probability a datagram is lost.
    pub loss: f64,
    /// Probability a datagram is delivered twice.
    pub duplicate: f64,
    /// Probability a datagram is held back by `reorder_delay_ns`.
    pub reorder: f64,
    /// When non-zero, every datagram whose BTH PSN is a multiple of this
    /// is held back by `reorder_delay_ns` (a slow lane).
    pub reorder_every: u32,
    /// How long a reordered datagram is held back, ns.
    pub reorder_delay_ns: u64,
    /// Probability one random bit of the datagram is flipped.
    pub corrupt: f64,
    /// Delay of every datagram, ns.
    pub delay_ns: u64,
    /// Uniform extra delay in `0..=jitter_ns`.
    pub jitter_ns: u64,
}

impl Rates {
    /// No impairment at all.
    pub fn is_none(&self) -> bool {
        self.loss == 0.0
            && self.duplicate == 0.0
            && self.reorder == 0.0
            && self.reorder_every == 0
            && self.corrupt == 0.0
            && self.delay_ns == 0
            && self.jitter_ns == 0
    }
}

/// The requests an answer acts on (the first packet of each message).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpClass {
    /// RDMA READ requests.
    Read,
    /// RDMA WRITEs (with or without immediate).
    Write,
    /// Atomics (compare-and-swap, fetch-and-add).
    Atomic,
    /// SENDs (with immediate or invalidate too).
    Send,
    /// Any request.
    Any,
}

impl OpClass {
    fn parse(s: &str) -> Option<OpClass> {
        Some(match s {
            "read" => OpClass::Read,
            "write" => OpClass::Write,
            "atomic" => OpClass::Atomic,
            "send" => OpClass::Send,
            "any" => OpClass::Any,
            _ => return None,
        })
    }

    /// Its name in the language.
    pub fn name(self) -> &'static str {
        match self {
            OpClass::Read => "read",
            OpClass::Write => "write",
            OpClass::Atomic => "atomic",
            OpClass::Send => "send",
            OpClass::Any => "any",
        }
    }
}

/// How an answered request is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// NAK remote access error (the requester completes with
    /// `IBV_WC_REM_ACCESS_ERR`).
    RemoteAccess,
    /// NAK invalid request (`IBV_WC_REM_INV_REQ_ERR`).
    InvalidRequest,
    /// NAK remote operational error (`IBV_WC_REM_OP_ERR`).
    RemoteOperational,
    /// RNR NAK with the responder QP's RNR timer (the requester waits and
    /// sends again; `IBV_WC_RNR_RETRY_EXC_ERR` when its `rnr_retry` runs
    /// out).
    Rnr,
}

impl Answer {
    /// Its item name.
    pub fn name(self) -> &'static str {
        match self {
            Answer::RemoteAccess => "rem-access",
            Answer::InvalidRequest => "rem-inv-req",
            Answer::RemoteOperational => "rem-op",
            Answer::Rnr => "rnr",
        }
    }
}

/// A fault aimed at particular packets, each applied `count` times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Targeted {
    /// The next `count` RC ACKs (AETH syndrome ACK) are lost.
    DropAcks {
        /// How many.
        count: u32,
    },
    /// The next `count` requests of `ops` received are answered (and
    /// never reach the transport).
    Answer {
        /// With what.
        answer: Answer,
        /// Which requests.
        ops: OpClass,
        /// How many.
        count: u32,
    },
}

/// One rule.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct FaultRule {
    /// Datagrams it acts on (rates and `drop-acks`; answers act on
    /// received requests).
    pub on: Direction,
    /// Whether `on=` was written (an answer in a rule without it makes the
    /// rule a receive rule).
    pub on_given: bool,
    /// Only datagrams to or from this address.
    pub peer: Option<IpAddr>,
    /// Its rates.
    pub rates: Rates,
    /// Its targeted faults, in the order written.
    pub targeted: Vec<Targeted>,
}

impl FaultRule {
    /// Whether the rule acts on datagrams sent (`send`) or received, to or
    /// from `peer`, for its rates and `drop-acks`.
    pub fn matches(&self, send: bool, peer: IpAddr) -> bool {
        self.on.covers(send) && self.peer.is_none_or(|p| p == peer)
    }
}

/// A whole `SOFTRDMA_FAULTS` value.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct FaultSpec {
    /// The dice's seed; `None`: drawn when the device opens (and printed).
    pub seed: Option<u64>,
    /// The rules, in order.
    pub rules: Vec<FaultRule>,
}

impl FaultSpec {
    /// Parses the language above; the error says which item is wrong and
    /// why.
    pub fn parse(text: &str) -> Result<FaultSpec, String> {
        let mut spec = FaultSpec::default();
        for rule_text in text.split(';') {
            let rule_text = rule_text.trim();
            if rule_text.is_empty() {
                return Err("an empty rule (two `;` in a row, or one at an end)".into());
            }
            let mut rule = FaultRule::default();
            rule.rates.reorder_delay_ns = DEFAULT_REORDER_DELAY_NS;
            let mut answers = false;
            let mut seen: Vec<&str> = Vec::new();
            for item in rule_text.split(',') {
                let item = item.trim();
                let Some((key, value)) = item.split_once('=') else {
                    return Err(format!("{item:?} is not KEY=VALUE"));
                };
                let (key, value) = (key.trim(), value.trim());
                let bad = |want: &str| format!("{key}={value:?}: want {want}");
                let repeatable = matches!(
                    key,
                    "drop-acks" | "rem-access" | "rem-inv-req" | "rem-op" | "rnr"
                );
                if !repeatable {
                    if seen.contains(&key) {
                        return Err(format!("{key} given twice in one rule"));
                    }
                    seen.push(key);
                }
                match key {
                    "seed" => {
                        if spec.seed.is_some() {
                            return Err("seed given twice".into());
                        }
                        spec.seed = Some(
                            parse_u64(value).ok_or_else(|| bad("a number, decimal or 0x hex"))?,
                        );
                    }
                    "on" => {
                        rule.on = match value {
                            "send" => Direction::Send,
                            "recv" => Direction::Recv,
                            "both" => Direction::Both,
                            _ => return Err(bad("send, recv or both")),
                        };
                        rule.on_given = true;
                    }
                    "peer" => {
                        rule.peer = Some(value.parse().map_err(|_| bad("an IP address"))?);
                    }
                    "loss" => rule.rates.loss = prob(value).ok_or_else(|| bad(P_WANT))?,
                    "dup" => rule.rates.duplicate = prob(value).ok_or_else(|| bad(P_WANT))?,
                    "reorder" => rule.rates.reorder = prob(value).ok_or_else(|| bad(P_WANT))?,
                    "corrupt" => rule.rates.corrupt = prob(value).ok_or_else(|| bad(P_WANT))?,
                    "reorder-every" => {
                        rule.rates.reorder_every = count(value).ok_or_else(|| bad(N_WANT))?
                    }
                    "reorder-delay" => {
                        rule.rates.reorder_delay_ns = time_ns(value).ok_or_else(|| bad(T_WANT))?
                    }
                    "delay" => rule.rates.delay_ns = time_ns(value).ok_or_else(|| bad(T_WANT))?,
                    "jitter" => rule.rates.jitter_ns = time_ns(value).ok_or_else(|| bad(T_WANT))?,
                    "drop-acks" => rule.targeted.push(Targeted::DropAcks {
                        count: count(value).ok_or_else(|| bad(N_WANT))?,
                    }),
                    "rem-access" | "rem-inv-req" | "rem-op" | "rnr" => {
                        let (answer, default_ops) = match key {
                            "rem-access" => (Answer::RemoteAccess, OpClass::Read),
                            "rem-inv-req" => (Answer::InvalidRequest, OpClass::Any),
                            "rem-op" => (Answer::RemoteOperational, OpClass::Any),
                            _ => (Answer::Rnr, OpClass::Send),
                        };
                        let (ops, n) = match value.split_once(':') {
                            Some((op, n)) if answer != Answer::Rnr => (
                                OpClass::parse(op.trim()).ok_or_else(|| {
                                    bad("[OP:]N with OP read, write, atomic, send or any")
                                })?,
                                n.trim(),
                            ),
                            Some(_) => {
                                return Err(bad("a number of SENDs (RNR NAKs answer SENDs only)"))
                            }
                            None => (default_ops, value),
                        };
                        let count = count(n).ok_or_else(|| bad(N_WANT))?;
                        rule.targeted.push(Targeted::Answer { answer, ops, count });
                        answers = true;
                    }
                    _ => {
                        return Err(format!(
                            "unknown item {key:?} (items: seed on peer loss dup reorder \
                             reorder-every reorder-delay delay jitter corrupt drop-acks \
                             rem-access rem-inv-req rem-op rnr)"
                        ))
                    }
                }
            }
            if answers {
                if !rule.on_given {
                    rule.on = Direction::Recv;
                } else if rule.on == Direction::Send {
                    return Err(
                        "rem-access, rem-inv-req, rem-op and rnr answer requests the device \
                         receives: not in a rule with on=send"
                            .into(),
                    );
                }
            }
            spec.rules.push(rule);
        }
        Ok(spec)
    }

    /// Whether the spec does anything (a seed alone does not).
    pub fn is_active(&self) -> bool {
        self.rules
            .iter()
            .any(|r| !r.rates.is_none() || !r.targeted.is_empty())
    }

    /// Whether any rule acts on sent (`true`) or received datagrams.
    pub fn acts_on(&self, send: bool) -> bool {
        self.rules.iter().any(|r| {
            (!r.rates.is_none()
                || r.targeted
                    .iter()
                    .any(|t| matches!(t, Targeted::DropAcks { .. })))
                && r.on.covers(send)
                || !send
                    && r.targeted
                        .iter()
                        .any(|t| matches!(t, Targeted::Answer { .. }))
        })
    }

    /// The same spec with this seed.
    pub fn with_seed(&self, seed: u64) -> FaultSpec {
        FaultSpec {
            seed: Some(seed),
            rules: self.rules.clone(),
        }
    }
}

const P_WANT: &str = "a probability from 0 to 1, or a percentage (0.05 or 5%)";
const T_WANT: &str = "a time with its unit, at most 10s (500ns, 200us, 1.5ms, 1s)";
const N_WANT: &str = "a whole number from 1";

fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

fn prob(s: &str) -> Option<f64> {
    let v: f64 = match s.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().ok()? / 100.0,
        None => s.parse().ok()?,
    };
    (0.0..=1.0).contains(&v).then_some(v)
}

fn count(s: &str) -> Option<u32> {
    s.parse().ok().filter(|&n| n >= 1)
}

fn time_ns(s: &str) -> Option<u64> {
    let (num, scale) = [
        ("ns", 1.0),
        ("us", 1e3),
        ("µs", 1e3),
        ("ms", 1e6),
        ("s", 1e9),
    ]
    .iter()
    .find_map(|(u, k)| s.strip_suffix(u).map(|n| (n.trim(), *k)))?;
    let v: f64 = num.parse().ok()?;
    let ns = v * scale;
    (v.is_finite() && ns >= 0.0 && ns <= MAX_DELAY_NS as f64).then(|| ns.round() as u64)
}

/// A time in the language's units (the largest that keeps it whole).
fn fmt_time(ns: u64) -> String {
    for (k, u) in [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")] {
        if ns >= k && ns.is_multiple_of(k) {
            return format!("{}{u}", ns / k);
        }
    }
    format!("{ns}ns")
}

impl fmt::Display for FaultSpec {
    /// The spec in the language (what parses back to it).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, rule) in self.rules.iter().enumerate() {
            let mut items: Vec<String> = Vec::new();
            if i == 0 {
                if let Some(s) = self.seed {
                    items.push(format!("seed={s}"));
                }
            }
            if rule.on_given {
                let on = match rule.on {
                    Direction::Send => "send",
                    Direction::Recv => "recv",
                    Direction::Both => "both",
                };
                items.push(format!("on={on}"));
            }
            if let Some(p) = rule.peer {
                items.push(format!("peer={p}"));
            }
            let r = &rule.rates;
            for (k, v) in [
                ("loss", r.loss),
                ("dup", r.duplicate),
                ("reorder", r.reorder),
                ("corrupt", r.corrupt),
            ] {
                if v > 0.0 {
                    items.push(format!("{k}={v}"));
                }
            }
            if r.reorder_every > 0 {
                items.push(format!("reorder-every={}", r.reorder_every));
            }
            if (r.reorder > 0.0 || r.reorder_every > 0)
                && r.reorder_delay_ns != DEFAULT_REORDER_DELAY_NS
            {
                items.push(format!("reorder-delay={}", fmt_time(r.reorder_delay_ns)));
            }
            if r.delay_ns > 0 {
                items.push(format!("delay={}", fmt_time(r.delay_ns)));
            }
            if r.jitter_ns > 0 {
                items.push(format!("jitter={}", fmt_time(r.jitter_ns)));
            }
            for t in &rule.targeted {
                items.push(match *t {
                    Targeted::DropAcks { count } => format!("drop-acks={count}"),
                    Targeted::Answer { answer, ops, count } => {
                        if answer == Answer::Rnr {
                            format!("rnr={count}")
                        } else {
                            format!("{}={}:{count}", answer.name(), ops.name())
                        }
                    }
                });
            }
            if items.is_empty() {
                // A rule with nothing but defaults: `on=send` says so.
                items.push("on=send".into());
            }
            if i > 0 {
                f.write_str(";")?;
            }
            f.write_str(&items.join(","))?;
        }
        if self.rules.is_empty() {
            if let Some(s) = self.seed {
                write!(f, "seed={s}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_item() {
        let s = FaultSpec::parse(
            " seed=0x2a , loss=5% ,dup=0.01,reorder=2%,reorder-every=8,reorder-delay=1ms,\
             corrupt=0.5%,delay=200us,jitter=1.5ms ; on=recv,peer=10.0.0.2,loss=1,drop-acks=3;\
             rem-access=1,rnr=5,rem-inv-req=write:2,rem-op=2",
        )
        .unwrap();
        assert_eq!(s.seed, Some(42));
        assert_eq!(s.rules.len(), 3);
        let r = &s.rules[0];
        assert_eq!(r.on, Direction::Send);
        assert_eq!(r.rates.loss, 0.05);
        assert_eq!(r.rates.duplicate, 0.01);
        assert_eq!(r.rates.reorder, 0.02);
        assert_eq!(r.rates.reorder_every, 8);
        assert_eq!(r.rates.reorder_delay_ns, 1_000_000);
        assert_eq!(r.rates.corrupt, 0.005);
        assert_eq!(r.rates.delay_ns, 200_000);
        assert_eq!(r.rates.jitter_ns, 1_500_000);
        let r = &s.rules[1];
        assert_eq!(r.on, Direction::Recv);
        assert_eq!(r.peer, Some("10.0.0.2".parse().unwrap()));
        assert_eq!(r.rates.loss, 1.0);
        assert_eq!(r.targeted, [Targeted::DropAcks { count: 3 }]);
        let r = &s.rules[2];
        // Answers make a rule without on= a receive rule.
        assert_eq!(r.on, Direction::Recv);
        assert_eq!(
            r.targeted,
            [
                Targeted::Answer {
                    answer: Answer::RemoteAccess,
                    ops: OpClass::Read,
                    count: 1
                },
                Targeted::Answer {
                    answer: Answer::Rnr,
                    ops: OpClass::Send,
                    count: 5
                },
                Targeted::Answer {
                    answer: Answer::InvalidRequest,
                    ops: OpClass::Write,
                    count: 2
                },
                Targeted::Answer {
                    answer: Answer::RemoteOperational,
                    ops: OpClass::Any,
                    count: 2
                },
            ]
        );
        assert!(s.is_active());
        assert!(s.acts_on(true) && s.acts_on(false));
        // Display parses back to the same spec.
        let again = FaultSpec::parse(&s.to_string()).unwrap();
        assert_eq!(again, s, "{s}");
    }

    #[test]
    fn directions() {
        let s = FaultSpec::parse("loss=1%").unwrap();
        assert!(s.acts_on(true) && !s.acts_on(false));
        let s = FaultSpec::parse("on=recv,dup=1%").unwrap();
        assert!(!s.acts_on(true) && s.acts_on(false));
        let s = FaultSpec::parse("rnr=2").unwrap();
        assert!(!s.acts_on(true) && s.acts_on(false));
        let s = FaultSpec::parse("on=both,rnr=2,drop-acks=1").unwrap();
        assert!(s.acts_on(true) && s.acts_on(false));
        let s = FaultSpec::parse("seed=9").unwrap();
        assert!(!s.is_active() && !s.acts_on(true) && !s.acts_on(false));
        assert_eq!(s.to_string(), "seed=9");
        assert_eq!(FaultSpec::parse("on=send").unwrap().to_string(), "on=send");
    }

    #[test]
    fn errors_say_what_is_wrong() {
        for (text, want) in [
            ("loss=2", "loss=\"2\": want a probability"),
            ("loss=x%", "loss=\"x%\": want a probability"),
            ("delay=5", "delay=\"5\": want a time with its unit"),
            ("delay=11s", "delay=\"11s\": want a time"),
            ("jitter=-1ms", "jitter=\"-1ms\": want a time"),
            ("drop-acks=0", "drop-acks=\"0\": want a whole number from 1"),
            ("rem-access=write:x", "want a whole number"),
            ("rem-access=fly:1", "OP read, write, atomic, send or any"),
            ("rnr=send:1", "RNR NAKs answer SENDs only"),
            ("on=up", "on=\"up\": want send, recv or both"),
            ("peer=host", "peer=\"host\": want an IP address"),
            ("speed=9", "unknown item \"speed\""),
            ("loss", "\"loss\" is not KEY=VALUE"),
            ("loss=1%,loss=2%", "loss given twice"),
            ("seed=1;seed=2", "seed given twice"),
            ("loss=1%;", "an empty rule"),
            ("on=send,rnr=1", "not in a rule with on=send"),
        ] {
            let e = FaultSpec::parse(text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn times_and_rates() {
        assert_eq!(time_ns("500ns"), Some(500));
        assert_eq!(time_ns("200us"), Some(200_000));
        assert_eq!(time_ns("1.5ms"), Some(1_500_000));
        assert_eq!(time_ns("2s"), Some(2_000_000_000));
        assert_eq!(time_ns("10s"), Some(MAX_DELAY_NS));
        assert_eq!(time_ns("2"), None);
        assert_eq!(prob("100%"), Some(1.0));
        assert_eq!(prob("0"), Some(0.0));
        assert_eq!(prob("101%"), None);
        assert_eq!(fmt_time(1_500_000), "1500us");
        assert_eq!(fmt_time(7), "7ns");
    }
}
