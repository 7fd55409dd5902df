//! The same real packets in every container and link type the dump reads
//! must give the same packet lines and totals: each test rewrites a rig
//! capture (Ethernet, classic pcap) into another encapsulation and compares
//! the dumps.

use crate::capture::linktype;
use crate::capture::tests::{NgWriter, PcapWriter};
use crate::capture::CaptureReader;
use crate::dump::{dump_bytes, Options};
use std::path::Path;

struct Pkt {
    sec: u32,
    usec: u32,
    eth: Vec<u8>,
}

fn load(name: &str) -> Vec<Pkt> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data")
        .join(name);
    let bytes = std::fs::read(path).unwrap();
    let mut r = CaptureReader::from_bytes(&bytes).unwrap();
    let mut v = Vec::new();
    while let Some(f) = r.next_frame().unwrap() {
        let ts = f.timestamp.unwrap().nanos;
        v.push(Pkt {
            sec: (ts / 1_000_000_000) as u32,
            usec: (ts % 1_000_000_000 / 1000) as u32,
            eth: f.data.to_vec(),
        });
    }
    v
}

fn ethertype(p: &Pkt) -> u16 {
    u16::from_be_bytes([p.eth[12], p.eth[13]])
}

fn l3(p: &Pkt) -> &[u8] {
    &p.eth[14..]
}

/// (packet lines, per-QP lines, summary up to the skipped kinds).
fn parts(text: &str) -> (Vec<String>, Vec<String>, String) {
    let mut pkts = Vec::new();
    let mut flows = Vec::new();
    let mut summary = String::new();
    for l in text.lines() {
        if l.starts_with("  ") && (l.contains(" req  ") || l.contains(" resp ")) {
            flows.push(l.to_string());
        } else if l.starts_with("frames ") {
            summary = l.split(", skipped").next().unwrap().to_string();
        } else if l.starts_with(' ') {
            pkts.push(l.to_string());
        }
    }
    (pkts, flows, summary)
}

fn dump(bytes: &[u8]) -> (Vec<String>, Vec<String>, String) {
    let (text, res) = dump_bytes(bytes, &Options::default());
    res.unwrap();
    parts(&text)
}

const CAPTURES: [&str; 3] = [
    "rc_pingpong_64.pcap",
    "v6_rc_pingpong_64.pcap",
    "write_imm.pcap",
];

fn original(name: &str) -> (Vec<String>, Vec<String>, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data")
        .join(name);
    let o = dump(&std::fs::read(path).unwrap());
    assert!(!o.0.is_empty() && !o.1.is_empty());
    o
}

/// Rewrites every frame with `f` into a classic pcap of `lt`.
fn as_pcap(pkts: &[Pkt], le: bool, lt: u32, f: impl Fn(&Pkt) -> Vec<u8>) -> Vec<u8> {
    let mut w = PcapWriter::new(le, false, lt);
    for p in pkts {
        let d = f(p);
        w.record(p.sec, p.usec, &d, d.len() as u32);
    }
    w.out
}

#[test]
fn classic_pcap_link_types() {
    for name in CAPTURES {
        let want = original(name);
        let pkts = load(name);
        let variants: Vec<(&str, Vec<u8>)> = vec![
            (
                "big-endian ethernet",
                as_pcap(&pkts, false, linktype::ETHERNET, |p| p.eth.clone()),
            ),
            (
                "802.1Q",
                as_pcap(&pkts, true, linktype::ETHERNET, |p| {
                    let mut e = p.eth[..12].to_vec();
                    e.extend_from_slice(&[0x81, 0x00, 0x20, 0x07]);
                    e.extend_from_slice(&p.eth[12..]);
                    e
                }),
            ),
            (
                "802.1ad + 802.1Q",
                as_pcap(&pkts, true, linktype::ETHERNET, |p| {
                    let mut e = p.eth[..12].to_vec();
                    e.extend_from_slice(&[0x88, 0xa8, 0x00, 0x64, 0x81, 0x00, 0x00, 0x07]);
                    e.extend_from_slice(&p.eth[12..]);
                    e
                }),
            ),
            // Raw IP: non-IP frames stay, as bytes that are not IP.
            (
                "raw",
                as_pcap(&pkts, true, linktype::RAW, |p| l3(p).to_vec()),
            ),
            (
                "sll",
                as_pcap(&pkts, true, linktype::LINUX_SLL, |p| {
                    let mut h = vec![0, 4, 0, 1, 0, 6];
                    h.extend_from_slice(&p.eth[6..12]);
                    h.extend_from_slice(&[0, 0]);
                    h.extend_from_slice(&p.eth[12..]);
                    h
                }),
            ),
            (
                "sll2",
                as_pcap(&pkts, false, linktype::LINUX_SLL2, |p| {
                    let mut h = p.eth[12..14].to_vec();
                    h.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 1, 4, 6]);
                    h.extend_from_slice(&p.eth[6..12]);
                    h.extend_from_slice(&[0, 0]);
                    h.extend_from_slice(&p.eth[14..]);
                    h
                }),
            ),
            (
                "null, little-endian writer",
                as_pcap(&pkts, true, linktype::NULL, |p| {
                    let af: u32 = match ethertype(p) {
                        0x0800 => 2,
                        0x86dd => 30,
                        _ => 99,
                    };
                    let mut h = af.to_le_bytes().to_vec();
                    h.extend_from_slice(l3(p));
                    h
                }),
            ),
            (
                "null, big-endian writer",
                as_pcap(&pkts, false, linktype::NULL, |p| {
                    let af: u32 = match ethertype(p) {
                        0x0800 => 2,
                        0x86dd => 10,
                        _ => 99,
                    };
                    let mut h = af.to_be_bytes().to_vec();
                    h.extend_from_slice(l3(p));
                    h
                }),
            ),
            (
                "loop",
                as_pcap(&pkts, true, linktype::LOOP, |p| {
                    let af: u32 = match ethertype(p) {
                        0x0800 => 2,
                        0x86dd => 24,
                        _ => 99,
                    };
                    let mut h = af.to_be_bytes().to_vec();
                    h.extend_from_slice(l3(p));
                    h
                }),
            ),
        ];
        for (what, bytes) in variants {
            assert_eq!(dump(&bytes), want, "{name} as {what}");
        }
    }
}

#[test]
fn nanosecond_pcap_keeps_the_lines_with_nine_digits() {
    for name in CAPTURES {
        let (pkts_want, flows_want, sum_want) = original(name);
        let pkts = load(name);
        let mut w = PcapWriter::new(true, true, linktype::ETHERNET);
        for p in &pkts {
            w.record(p.sec, p.usec * 1000, &p.eth, p.eth.len() as u32);
        }
        let (lines, flows, sum) = dump(&w.out);
        assert_eq!((flows, sum), (flows_want, sum_want));
        assert_eq!(lines.len(), pkts_want.len());
        for (l, w) in lines.iter().zip(&pkts_want) {
            // "    14    0.062329 ..." vs "    14 0.062329000 ..."
            let (ln, lt, lrest) = split3(l);
            let (wn, wt, wrest) = split3(w);
            assert_eq!((ln, lrest), (wn, wrest));
            assert_eq!(lt, format!("{wt}000"));
        }
    }
}

fn split3(l: &str) -> (&str, &str, &str) {
    let mut it = l.split_whitespace();
    let n = it.next().unwrap();
    let t = it.next().unwrap();
    let rest = &l[l.find(t).unwrap() + t.len()..];
    (n, t, rest)
}

#[test]
fn pcapng_in_both_byte_orders_and_with_interfaces_per_ip_version() {
    for name in CAPTURES {
        let want = original(name);
        let pkts = load(name);
        let ts = |p: &Pkt| p.sec as u64 * 1_000_000 + p.usec as u64;
        for le in [true, false] {
            // One Ethernet interface, µs timestamps (the default tsresol).
            let mut w = NgWriter::new(le);
            w.idb(linktype::ETHERNET as u16, 0, None, None);
            for p in &pkts {
                w.epb(0, ts(p), &p.eth, p.eth.len() as u32);
            }
            assert_eq!(dump(&w.out), want, "{name} pcapng le={le}");

            // Three interfaces: raw IPv4 (228), raw IPv6 (229) and Ethernet
            // for the rest, if_tsresol 6 given explicitly, and statistics
            // blocks the reader must skip.
            let mut w = NgWriter::new(le);
            w.idb(linktype::ETHERNET as u16, 0, Some(6), None);
            w.isb();
            w.idb(linktype::IPV4 as u16, 0, Some(6), None);
            w.idb(linktype::IPV6 as u16, 0, Some(6), None);
            for p in &pkts {
                match ethertype(p) {
                    0x0800 => w.epb(1, ts(p), l3(p), l3(p).len() as u32),
                    0x86dd => w.epb(2, ts(p), l3(p), l3(p).len() as u32),
                    _ => w.epb(0, ts(p), &p.eth, p.eth.len() as u32),
                }
            }
            w.isb();
            assert_eq!(dump(&w.out), want, "{name} pcapng 3 interfaces le={le}");
        }
    }
}

#[test]
fn simple_packet_blocks_have_no_time() {
    for name in CAPTURES {
        let (pkts_want, flows_want, sum_want) = original(name);
        let pkts = load(name);
        let mut w = NgWriter::new(true);
        w.idb(linktype::ETHERNET as u16, 0, None, None);
        for p in &pkts {
            w.spb(&p.eth, p.eth.len() as u32);
        }
        let (lines, flows, sum) = dump(&w.out);
        assert_eq!((flows, sum), (flows_want, sum_want));
        for (l, w) in lines.iter().zip(&pkts_want) {
            let (ln, lt, lrest) = split3(l);
            let (wn, _, wrest) = split3(w);
            assert_eq!((ln, lt, lrest), (wn, "-", wrest));
        }
    }
}

#[test]
fn snapshot_length_cuts_are_reported() {
    // write_imm's WRITE_FIRST (1098-byte frame: 14 Ethernet + 20 IPv4 + 8 UDP
    // + 12 BTH + 16 RETH + 1024 payload + 4 ICRC): a 200-byte snapshot
    // length cuts it, and the line says so instead of failing the file.
    let pkts = load("write_imm.pcap");
    let mut w = PcapWriter::new(true, false, linktype::ETHERNET);
    for p in &pkts {
        let n = p.eth.len().min(200);
        w.record(p.sec, p.usec, &p.eth[..n], p.eth.len() as u32);
    }
    let (text, res) = dump_bytes(&w.out, &Options::default());
    let stats = res.unwrap();
    assert!(stats.malformed > 0);
    assert!(
        text.contains(
            "malformed (truncated packet), frame cut to 200 of 1098 bytes by the capture"
        ),
        "{text}"
    );
}
