//! Golden tests against real Linux rxe traffic (`tests/data/*.pcap`, see its
//! README): every RoCE v2 packet parses, its ICRC recomputes to the captured
//! value, and parse → Repr → emit gives back the datagram byte for byte.
//!
//! The counts come from `tests/data/README.md` (frames and RoCE packets per
//! file) and `tests/data/SUMMARY.txt` (opcode histogram, ICRC verdicts), both
//! written by the capture rig, not by this crate. The ICRC is also checked
//! against a bit-at-a-time CRC-32 written here from the spec, so the crate's
//! own ICRC code is not its only judge.

use softrdma_pcap::link::{self, Network};
use softrdma_pcap::{linktype, CaptureReader};
use softrdma_wire::{DatagramRepr, IbPacket, PacketRepr, RoceDatagram};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data")
}

/// The link type and frames of a capture (softrdma-pcap's reader).
fn pcap_records(file: &[u8]) -> Result<(u32, Vec<Vec<u8>>), String> {
    let mut r = CaptureReader::from_bytes(file).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    while let Some(f) = r.next_frame().map_err(|e| e.to_string())? {
        out.push(f.data.to_vec());
    }
    Ok((r.linktype().unwrap_or(0), out))
}

/// The IP datagram of an Ethernet frame, if it is IPv4 or IPv6.
fn ip_of_ethernet(frame: &[u8]) -> Option<&[u8]> {
    match link::network(linktype::ETHERNET, frame) {
        Network::Ip(ip) => Some(ip),
        Network::Other(_) => None,
    }
}

/// True when `ip` carries UDP to port 4791, decided from the raw bytes
/// without the wire crate.
fn is_roce_v2(ip: &[u8]) -> bool {
    let (proto, l4) = match ip.first().map(|b| b >> 4) {
        Some(4) => (ip[9], (ip[0] & 0x0f) as usize * 4),
        Some(6) => (ip[6], 40),
        _ => return false,
    };
    proto == 17 && ip.get(l4 + 2..l4 + 4) == Some(&[0x12, 0xb7][..])
}

/// CRC-32 (reflected 0xedb88320, init and final XOR all ones), one bit at a
/// time: the textbook definition, independent of crc32fast.
fn crc32_bitwise(data: impl IntoIterator<Item = u8>) -> u32 {
    let mut c = 0xffff_ffffu32;
    for b in data {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xedb8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// The ICRC of a datagram per IBA Annex A17.3.3, from the raw bytes: 8 x 0xff,
/// IP header with the variant fields set to ones, UDP with checksum 0xffff,
/// BTH with byte 4 set to 0xff, the rest up to the ICRC.
fn reference_icrc(dgram: &[u8]) -> u32 {
    let mut m = dgram[..dgram.len() - 4].to_vec();
    let ip_len = if m[0] >> 4 == 4 {
        m[1] = 0xff; // TOS
        m[8] = 0xff; // TTL
        m[10] = 0xff; // header checksum
        m[11] = 0xff;
        20
    } else {
        m[0] |= 0x0f; // traffic class
        m[1] = 0xff; // traffic class, flow label
        m[2] = 0xff;
        m[3] = 0xff;
        m[7] = 0xff; // hop limit
        40
    };
    m[ip_len + 6] = 0xff; // UDP checksum
    m[ip_len + 7] = 0xff;
    m[ip_len + 8 + 4] = 0xff; // BTH FECN/BECN/reserved
    crc32_bitwise([0xffu8; 8].into_iter().chain(m))
}

/// `file -> (frames, RoCE packets)` from the README's capture table.
fn readme_counts() -> BTreeMap<String, (usize, usize)> {
    let readme = std::fs::read_to_string(data_dir().join("README.md")).unwrap();
    let mut out = BTreeMap::new();
    for line in readme.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // | file | contents | frames | RoCE | bytes | wall time |
        if cells.len() == 8 && cells[1].ends_with(".pcap") {
            out.insert(
                cells[1].to_string(),
                (cells[3].parse().unwrap(), cells[4].parse().unwrap()),
            );
        }
    }
    out
}

/// Per file from SUMMARY.txt: opcode histogram and the rig's ICRC verdict.
#[derive(Default, Debug)]
struct Summary {
    opcodes: BTreeMap<u8, usize>,
    icrc_ok: usize,
    icrc_bad: usize,
}

fn summaries() -> BTreeMap<String, Summary> {
    let text = std::fs::read_to_string(data_dir().join("SUMMARY.txt")).unwrap();
    let mut out: BTreeMap<String, Summary> = BTreeMap::new();
    let mut cur = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("== ") {
            cur = rest.split(':').next().unwrap().to_string();
            out.entry(cur.clone()).or_default();
        } else if let Some(list) = line.trim().strip_prefix("opcodes: ") {
            // "100 RC_FETCH_ADD(0x14), 100 RC_ATOMIC_ACKNOWLEDGE(0x12)"
            for item in list.split(", ") {
                let (n, rest) = item.split_once(' ').unwrap();
                let hex = rest.rsplit_once("(0x").unwrap().1.trim_end_matches(')');
                let op = u8::from_str_radix(hex, 16).unwrap();
                out.get_mut(&cur)
                    .unwrap()
                    .opcodes
                    .insert(op, n.parse().unwrap());
            }
        } else if let Some(v) = line
            .trim()
            .strip_prefix("ICRC (recomputed, rig icrc_check.py): ")
        {
            // "200 ok, 0 bad"
            let nums: Vec<usize> = v
                .split(|c: char| !c.is_ascii_digit())
                .filter(|s| !s.is_empty())
                .map(|s| s.parse().unwrap())
                .collect();
            let s = out.get_mut(&cur).unwrap();
            s.icrc_ok = nums[0];
            s.icrc_bad = nums[1];
        }
    }
    out
}

/// Everything this test asserts about one RoCE v2 datagram; returns its opcode.
fn check_datagram(name: &str, idx: usize, ip: &[u8]) -> u8 {
    let ctx = format!("{name} frame {}", idx + 1);
    let d = RoceDatagram::new_checked(ip).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert!(d.is_roce_port(), "{ctx}");
    let dgram = d.datagram();
    // The datagram ends where the IP length says; only Ethernet padding may follow.
    assert!(dgram.len() <= ip.len(), "{ctx}");

    // ICRC: the crate, the stored value and the reference agree.
    let stored = d.ib().icrc();
    assert_eq!(
        stored,
        u32::from_le_bytes(dgram[dgram.len() - 4..].try_into().unwrap()),
        "{ctx}"
    );
    assert_eq!(reference_icrc(dgram), stored, "{ctx}: reference ICRC");
    assert_eq!(d.compute_icrc(), stored, "{ctx}: crate ICRC");
    assert!(d.icrc_ok(), "{ctx}");

    // Parse into Reprs through both entry points.
    let ib = d.ib();
    let repr = PacketRepr::parse(&ib).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert_eq!(
        PacketRepr::parse_bytes(ib.into_inner()).unwrap(),
        repr,
        "{ctx}"
    );
    let info = repr.check().unwrap_or_else(|e| panic!("{ctx}: check {e}"));
    assert_eq!(
        info.name,
        IbPacket::new_checked(ib.into_inner()).unwrap().info().name
    );
    let drepr = DatagramRepr::parse(&d);

    // Emit reproduces the datagram byte for byte, ICRC included.
    let mut out = vec![0x5au8; dgram.len() + 16];
    let n = drepr
        .emit(&repr, &mut out)
        .unwrap_or_else(|e| panic!("{ctx}: emit {e}"));
    assert_eq!(n, dgram.len(), "{ctx}: emitted length");
    if out[..n] != *dgram {
        let at = out.iter().zip(dgram).position(|(a, b)| a != b).unwrap();
        panic!("{ctx}: emitted bytes differ from byte {at}");
    }
    // The ICRC the emitter computed through the headers-only path agrees too.
    let covered = &dgram[drepr.header_len()..dgram.len() - 4];
    assert_eq!(drepr.icrc(covered), stored, "{ctx}: DatagramRepr::icrc");
    repr.bth.opcode.0
}

#[test]
fn every_capture_parses_checks_and_reemits() {
    let counts = readme_counts();
    let summaries = summaries();
    assert!(counts.len() >= 43, "README table: {} rows", counts.len());
    let mut files: Vec<_> = std::fs::read_dir(data_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    files.sort();
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        counts.keys().cloned().collect::<Vec<_>>(),
        "tests/data holds exactly the README's captures"
    );

    let mut total_roce = 0;
    for (path, name) in files.iter().zip(&names) {
        let bytes = std::fs::read(path).unwrap();
        let (linktype, frames) = pcap_records(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(linktype, 1, "{name}: Ethernet");
        let (want_frames, want_roce) = counts[name];
        assert_eq!(frames.len(), want_frames, "{name}: frames");

        let mut opcodes = BTreeMap::new();
        let mut roce = 0;
        for (i, f) in frames.iter().enumerate() {
            let Some(ip) = ip_of_ethernet(f) else {
                continue;
            };
            if !is_roce_v2(ip) {
                continue;
            }
            roce += 1;
            *opcodes.entry(check_datagram(name, i, ip)).or_insert(0) += 1;
        }
        assert_eq!(roce, want_roce, "{name}: RoCE packets");
        let s = &summaries[name];
        assert_eq!(
            opcodes, s.opcodes,
            "{name}: opcode histogram vs SUMMARY.txt"
        );
        assert_eq!((s.icrc_ok, s.icrc_bad), (roce, 0), "{name}: SUMMARY ICRC");
        total_roce += roce;
    }
    // Sum of the README's RoCE column.
    assert_eq!(total_roce, counts.values().map(|c| c.1).sum::<usize>());
}

#[test]
fn reference_icrc_matches_a_known_value() {
    // The CRC-32 catalogue check value, so the reference itself is checked.
    assert_eq!(crc32_bitwise(*b"123456789"), 0xcbf4_3926);
}

#[test]
fn a_flipped_payload_bit_fails_the_icrc() {
    let bytes = std::fs::read(data_dir().join("write_bw_1027.pcap")).unwrap();
    let (_, frames) = pcap_records(&bytes).unwrap();
    let ip = frames
        .iter()
        .filter_map(|f| ip_of_ethernet(f))
        .find(|ip| is_roce_v2(ip))
        .unwrap();
    let mut m = ip.to_vec();
    let n = m.len();
    m[n - 10] ^= 0x10;
    let d = RoceDatagram::new_checked(&m[..]).unwrap();
    assert!(!d.icrc_ok());
    assert_ne!(reference_icrc(&m), d.ib().icrc());
}
