//! The same real packets in every container and link type the dump reads
//! must give the same packet lines and totals: each test rewrites a rig
//! capture (Ethernet, classic pcap) into another encapsulation and compares
//! the dumps.

use crate::dump::{dump_bytes, Options};
use softrdma_pcap::{linktype, CaptureReader, IdbOptions, NgWriter, PcapHeader, PcapWriter};
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

/// The Ethernet frame with `tags` (802.1Q / 802.1ad) before its ethertype.
fn tagged(p: &Pkt, tags: &[u8]) -> Vec<u8> {
    let mut e = p.eth[..12].to_vec();
    e.extend_from_slice(tags);
    e.extend_from_slice(&p.eth[12..]);
    e
}

/// The IP datagram after a 4-byte BSD address family (IPv4 2, IPv6 `v6`,
/// anything else 99) in the given byte order.
fn with_family(p: &Pkt, v6: u32, big_endian: bool) -> Vec<u8> {
    let af: u32 = match ethertype(p) {
        0x0800 => 2,
        0x86dd => v6,
        _ => 99,
    };
    let mut h = if big_endian {
        af.to_be_bytes()
    } else {
        af.to_le_bytes()
    }
    .to_vec();
    h.extend_from_slice(l3(p));
    h
}

fn pcap(le: bool, nanosecond: bool, linktype: u32) -> PcapWriter<Vec<u8>> {
    let header = PcapHeader {
        big_endian: !le,
        nanosecond,
        snaplen: 65535,
        linktype,
    };
    PcapWriter::new(Vec::new(), header).unwrap()
}

fn pcapng(le: bool, interfaces: &[(u32, Option<u8>)]) -> NgWriter<Vec<u8>> {
    let mut w = NgWriter::new(Vec::new(), !le).unwrap();
    for &(lt, tsresol) in interfaces {
        let opts = IdbOptions {
            tsresol,
            ..Default::default()
        };
        w.interface(lt as u16, 0, &opts).unwrap();
    }
    w
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

/// pcapng Interface Statistics Block: a block the reader skips.
const ISB: u32 = 5;

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
    let mut w = pcap(le, false, lt);
    for p in pkts {
        let d = f(p);
        w.record(p.sec, p.usec, &d, d.len() as u32).unwrap();
    }
    w.into_inner()
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
                    tagged(p, &[0x81, 0x00, 0x20, 0x07])
                }),
            ),
            (
                "802.1ad + 802.1Q",
                as_pcap(&pkts, true, linktype::ETHERNET, |p| {
                    tagged(p, &[0x88, 0xa8, 0x00, 0x64, 0x81, 0x00, 0x00, 0x07])
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
                as_pcap(&pkts, true, linktype::NULL, |p| with_family(p, 30, false)),
            ),
            (
                "null, big-endian writer",
                as_pcap(&pkts, false, linktype::NULL, |p| with_family(p, 10, true)),
            ),
            (
                "loop",
                as_pcap(&pkts, true, linktype::LOOP, |p| with_family(p, 24, true)),
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
        let mut w = pcap(true, true, linktype::ETHERNET);
        for p in &pkts {
            let len = p.eth.len() as u32;
            w.record(p.sec, p.usec * 1000, &p.eth, len).unwrap();
        }
        let (lines, flows, sum) = dump(w.get_ref());
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
            let mut w = pcapng(le, &[(linktype::ETHERNET, None)]);
            for p in &pkts {
                let len = p.eth.len() as u32;
                w.enhanced(0, ts(p), &p.eth, len, None).unwrap();
            }
            assert_eq!(dump(w.get_ref()), want, "{name} pcapng le={le}");

            // Three interfaces: raw IPv4 (228), raw IPv6 (229) and Ethernet
            // for the rest, if_tsresol 6 given explicitly, and statistics
            // blocks the reader must skip.
            let mut w = pcapng(le, &[(linktype::ETHERNET, Some(6))]);
            w.block(ISB, &[0; 12]).unwrap();
            let us = IdbOptions {
                tsresol: Some(6),
                ..Default::default()
            };
            for lt in [linktype::IPV4, linktype::IPV6] {
                w.interface(lt as u16, 0, &us).unwrap();
            }
            for p in &pkts {
                let (iface, data) = match ethertype(p) {
                    0x0800 => (1, l3(p)),
                    0x86dd => (2, l3(p)),
                    _ => (0, &p.eth[..]),
                };
                let len = data.len() as u32;
                w.enhanced(iface, ts(p), data, len, None).unwrap();
            }
            w.block(ISB, &[0; 12]).unwrap();
            assert_eq!(
                dump(w.get_ref()),
                want,
                "{name} pcapng 3 interfaces le={le}"
            );
        }
    }
}

#[test]
fn simple_packet_blocks_have_no_time() {
    for name in CAPTURES {
        let (pkts_want, flows_want, sum_want) = original(name);
        let pkts = load(name);
        let mut w = pcapng(true, &[(linktype::ETHERNET, None)]);
        for p in &pkts {
            w.simple(&p.eth, p.eth.len() as u32).unwrap();
        }
        let (lines, flows, sum) = dump(w.get_ref());
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
    let mut w = pcap(true, false, linktype::ETHERNET);
    for p in &pkts {
        let n = p.eth.len().min(200);
        w.record(p.sec, p.usec, &p.eth[..n], p.eth.len() as u32)
            .unwrap();
    }
    let (text, res) = dump_bytes(w.get_ref(), &Options::default());
    let stats = res.unwrap();
    assert!(stats.malformed > 0);
    assert!(
        text.contains(
            "malformed (truncated packet), frame cut to 200 of 1098 bytes by the capture"
        ),
        "{text}"
    );
}
