//! `softrdma dump`'s totals against what the capture rig computed with its
//! own tools (`tests/data/SUMMARY.txt`, `tests/data/README.md`): frame and
//! RoCE counts, other frames by kind, and per flow (class, direction,
//! destination QP) the packet count, PSN range, distinct PSNs, span and the
//! AETH syndromes.

mod common;

use softrdma_cli::dump::{dump_bytes, Class, Options, Stats};
use std::collections::BTreeMap;

/// (class, source, destination, destination QP).
type FlowId = (String, String, String, u32);
/// (packets, lowest PSN, highest PSN, distinct PSNs, span).
type FlowTotals = (u64, u32, u32, usize, u64);

#[derive(Default, Debug)]
struct Rig {
    frames: u64,
    /// "RoCEv2", "TCP", "ICMP", "ARP" -> count.
    kinds: BTreeMap<String, u64>,
    flows: BTreeMap<FlowId, FlowTotals>,
    /// Syndrome kind as the dump names it -> count.
    syndromes: BTreeMap<String, u64>,
}

fn num(s: &str) -> u64 {
    s.trim().parse().unwrap_or_else(|_| panic!("number {s:?}"))
}

fn hex(s: &str) -> u32 {
    u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).unwrap()
}

fn rig_summaries() -> BTreeMap<String, Rig> {
    let text = std::fs::read_to_string(common::data_dir().join("SUMMARY.txt")).unwrap();
    let mut out: BTreeMap<String, Rig> = BTreeMap::new();
    let mut cur = String::new();
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = line.strip_prefix("== ") {
            // "== x.pcap: 239 frames (RoCEv2 200, TCP 39)"
            let Some((name, rest)) = rest.split_once(": ") else {
                continue;
            };
            let Some((frames, kinds)) = rest.split_once(" frames (") else {
                continue;
            };
            cur = name.to_string();
            let r = out.entry(cur.clone()).or_default();
            r.frames = num(frames);
            for k in kinds.trim_end_matches(')').split(", ") {
                let (kind, n) = k.rsplit_once(' ').unwrap();
                r.kinds.insert(kind.to_string(), num(n));
            }
        } else if let Some(list) = t.strip_prefix("AETH syndromes: ") {
            for item in list.split(", ") {
                let (n, s) = item.split_once(' ').unwrap();
                let kind = match s {
                    s if s.starts_with("ACK(") => "ACK",
                    s if s.starts_with("RNR_NAK(") => "RNR_NAK",
                    "NAK(code=0)" => "NAK(PSN_SEQ_ERR)",
                    "NAK(code=1)" => "NAK(INV_REQ)",
                    "NAK(code=2)" => "NAK(REM_ACCESS_ERR)",
                    "NAK(code=3)" => "NAK(REM_OP_ERR)",
                    other => panic!("syndrome {other}"),
                };
                *out.get_mut(&cur)
                    .unwrap()
                    .syndromes
                    .entry(kind.into())
                    .or_default() += num(n);
            }
        } else if t.starts_with("req ") || t.starts_with("resp ") {
            // "req  198.18.0.2 -> 198.18.0.1 dQP 0x000022: 100 pkts, PSN
            //  0x644b53..0x644bb6 (100 distinct, span 100)"
            let (head, tail) = t.split_once(": ").unwrap();
            let h: Vec<&str> = head.split_whitespace().collect();
            let (class, src, dst, qp) = (h[0], h[1], h[3], hex(h[5]));
            let (pkts, rest) = tail.split_once(" pkts, PSN ").unwrap();
            let (range, rest) = rest.split_once(" (").unwrap();
            let (lo, hi) = range.split_once("..").unwrap();
            let (distinct, rest) = rest.split_once(" distinct, span ").unwrap();
            let span = rest.trim_end_matches(')');
            out.get_mut(&cur).unwrap().flows.insert(
                (class.into(), src.into(), dst.into(), qp),
                (
                    num(pkts),
                    hex(lo),
                    hex(hi),
                    num(distinct) as usize,
                    num(span),
                ),
            );
        }
    }
    out
}

fn dump_flows(s: &Stats) -> BTreeMap<FlowId, FlowTotals> {
    s.flows
        .iter()
        .map(|(k, f)| {
            let class = match k.class {
                Class::Req => "req",
                Class::Resp => "resp",
                Class::Cnp => "cnp",
            };
            let (lo, hi) = f.psn_range();
            (
                (class.into(), k.src.to_string(), k.dst.to_string(), k.qp),
                (f.packets, lo.value(), hi.value(), f.distinct(), f.span()),
            )
        })
        .collect()
}

#[test]
fn dump_totals_agree_with_the_rig_summary() {
    let rig = rig_summaries();
    let rig_files: Vec<&String> = rig.keys().collect();
    let captures: Vec<String> = common::captures()
        .into_iter()
        .filter(|c| !c.contains('/'))
        .collect();
    assert_eq!(captures.len(), 43);
    assert_eq!(rig_files, captures.iter().collect::<Vec<_>>());
    for c in &captures {
        let bytes = std::fs::read(common::data_dir().join(c)).unwrap();
        let (_, res) = dump_bytes(
            &bytes,
            &Options {
                quiet: true,
                ..Options::default()
            },
        );
        let s = res.unwrap();
        let r = &rig[c];
        assert_eq!(s.frames, r.frames, "{c}: frames");
        assert_eq!((s.icrc_bad, s.malformed), (0, 0), "{c}");
        // Other frames by the rig's kinds.
        let mut kinds = BTreeMap::new();
        kinds.insert("RoCEv2".to_string(), s.roce);
        for (k, n) in &s.skipped {
            let rig_kind = if k.ends_with("/tcp") {
                "TCP"
            } else if k.ends_with("/icmp") || k.ends_with("/icmpv6") {
                "ICMP"
            } else if k == "arp" {
                "ARP"
            } else {
                panic!("{c}: kind {k} unknown to the rig")
            };
            *kinds.entry(rig_kind.to_string()).or_default() += n;
        }
        assert_eq!(kinds, r.kinds, "{c}: frame kinds");
        assert_eq!(dump_flows(&s), r.flows, "{c}: flows");
        let mut syn: BTreeMap<String, u64> = BTreeMap::new();
        for (_, f) in &s.flows {
            for (k, n) in &f.aeth {
                *syn.entry(k.to_string()).or_default() += n;
            }
        }
        assert_eq!(syn, r.syndromes, "{c}: AETH syndromes");
    }
}

#[test]
fn loss_captures_show_retransmissions() {
    let bytes = std::fs::read(common::data_dir().join("write_bw_8k_loss.pcap")).unwrap();
    let s = dump_bytes(
        &bytes,
        &Options {
            quiet: true,
            ..Options::default()
        },
    )
    .1
    .unwrap();
    let req = &s
        .flows
        .iter()
        .find(|(k, _)| k.class == Class::Req)
        .unwrap()
        .1;
    // 1960 packets over 400 PSNs: every packet beyond the first of its PSN
    // is a retransmission, and each go-back-N restart rewinds the PSN.
    assert_eq!(req.repeats, req.packets - req.distinct() as u64);
    assert!(
        req.rewinds > 0 && req.rewinds <= req.repeats,
        "{}",
        req.rewinds
    );
    // The responder answered with PSN sequence error NAKs.
    let resp = &s
        .flows
        .iter()
        .find(|(k, _)| k.class == Class::Resp)
        .unwrap()
        .1;
    assert!(resp.aeth.get("NAK(PSN_SEQ_ERR)").is_some_and(|&n| n > 0));
}
