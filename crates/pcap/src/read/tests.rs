//! The reader on files written by the crate's writers: every container
//! variant, truncation at every offset, garbled lengths, streaming.

use super::ng::{ts_digits, ts_units_to_nanos};
use super::*;
use crate::linktype;
use crate::write::{IdbOptions, NgWriter, PcapHeader, PcapWriter};

/// Builds a classic pcap file in memory and notes where the file header
/// and each record end (all records hold packets).
struct Pcap {
    w: PcapWriter<Vec<u8>>,
    ends: Vec<(usize, bool)>,
}

impl Pcap {
    fn new(le: bool, nanosecond: bool, linktype: u32) -> Self {
        let header = PcapHeader {
            big_endian: !le,
            nanosecond,
            snaplen: 65535,
            linktype,
        };
        let w = PcapWriter::new(Vec::new(), header).unwrap();
        let ends = vec![(w.get_ref().len(), false)];
        Pcap { w, ends }
    }
    fn record(&mut self, sec: u32, frac: u32, data: &[u8], orig: u32) {
        self.w.record(sec, frac, data, orig).unwrap();
        self.ends.push((self.w.get_ref().len(), true));
    }
    fn out(&self) -> &[u8] {
        self.w.get_ref()
    }
}

/// Builds a pcapng file in memory and notes where each block ends and
/// whether it holds a packet. Interfaces carry an `if_name` and packets
/// an `epb_flags` option, so that option skipping is exercised.
struct Ng {
    w: NgWriter<Vec<u8>>,
    ends: Vec<(usize, bool)>,
}

impl Ng {
    fn new(le: bool) -> Self {
        let w = NgWriter::new(Vec::new(), !le).unwrap();
        let ends = vec![(w.get_ref().len(), false)];
        Ng { w, ends }
    }
    fn note(&mut self, r: io::Result<()>, packet: bool) {
        r.unwrap();
        self.ends.push((self.w.get_ref().len(), packet));
    }
    fn out(&self) -> &[u8] {
        self.w.get_ref()
    }
    /// Starts a new section, possibly switching byte order.
    fn shb(&mut self, le: bool) {
        let r = self.w.section(!le);
        self.note(r, false);
    }
    fn idb(&mut self, linktype: u16, snaplen: u32, tsresol: Option<u8>, tsoffset: Option<i64>) {
        let opts = IdbOptions {
            name: Some("lo"),
            tsresol,
            tsoffset,
        };
        let r = self.w.interface(linktype, snaplen, &opts);
        self.note(r, false);
    }
    fn epb(&mut self, iface: u32, ts: u64, data: &[u8], orig: u32) {
        let r = self.w.enhanced(iface, ts, data, orig, Some(1));
        self.note(r, true);
    }
    fn spb(&mut self, data: &[u8], orig: u32) {
        let r = self.w.simple(data, orig);
        self.note(r, true);
    }
    fn opb(&mut self, iface: u16, ts: u64, data: &[u8]) {
        let r = self.w.obsolete_packet(iface, ts, data);
        self.note(r, true);
    }
    /// Some block the reader skips (an Interface Statistics Block).
    fn isb(&mut self) {
        let r = self.w.block(5, &[0; 12]);
        self.note(r, false);
    }
}

/// Owned copy of a frame, for comparisons.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Owned {
    pub number: u64,
    pub interface: u32,
    pub linktype: u32,
    pub ts: Option<Timestamp>,
    pub orig_len: u32,
    pub data: Vec<u8>,
}

fn read_all(bytes: &[u8]) -> Result<Vec<Owned>> {
    let mut r = CaptureReader::from_bytes(bytes)?;
    let mut v = Vec::new();
    while let Some(f) = r.next_frame()? {
        v.push(Owned {
            number: f.number,
            interface: f.interface,
            linktype: f.linktype,
            ts: f.timestamp,
            orig_len: f.orig_len,
            data: f.data.to_vec(),
        });
    }
    Ok(v)
}

fn us(nanos: i128) -> Option<Timestamp> {
    Some(Timestamp { nanos, digits: 6 })
}

#[test]
fn classic_pcap_both_byte_orders_and_resolutions() {
    for le in [true, false] {
        for ns in [false, true] {
            let mut w = Pcap::new(le, ns, linktype::RAW);
            w.record(10, 5, &[0x45, 1, 2], 3);
            w.record(11, 999_999, &[6; 7], 70);
            let f = read_all(w.out()).unwrap();
            assert_eq!(f.len(), 2);
            let unit = if ns { 1 } else { 1000 };
            assert_eq!(f[0].ts.unwrap().nanos, 10_000_000_000 + 5 * unit);
            assert_eq!(f[0].ts.unwrap().digits, if ns { 9 } else { 6 });
            assert_eq!(f[1].ts.unwrap().nanos, 11_000_000_000 + 999_999 * unit);
            assert_eq!(f[0].data, [0x45, 1, 2]);
            assert_eq!((f[1].orig_len, f[1].data.len()), (70, 7));
            assert_eq!(f[1].linktype, linktype::RAW);
            assert_eq!(f[1].number, 2);
            let r = CaptureReader::from_bytes(w.out()).unwrap();
            assert_eq!(
                r.format(),
                Format::Pcap {
                    big_endian: !le,
                    nanosecond: ns
                }
            );
        }
    }
}

fn sample_pcapng(le: bool) -> Vec<u8> {
    sample_pcapng_writer(le).out().to_vec()
}

fn sample_pcapng_writer(le: bool) -> Ng {
    let mut w = Ng::new(le);
    w.idb(linktype::ETHERNET as u16, 0, None, None);
    w.idb(linktype::LINUX_SLL2 as u16, 4, Some(9), Some(-2));
    w.epb(0, 1_500_000, &[1, 2, 3, 4, 5], 5);
    w.isb();
    w.epb(1, 3_000_000_123, &[9; 6], 60);
    w.spb(&[7; 6], 6);
    w.opb(1, 7, &[8; 3]);
    w
}

#[test]
fn pcapng_interfaces_block_kinds_and_timestamps() {
    for le in [true, false] {
        let f = read_all(&sample_pcapng(le)).unwrap();
        assert_eq!(f.len(), 4);
        assert_eq!(
            (f[0].interface, f[0].linktype, f[0].ts),
            (0, linktype::ETHERNET, us(1_500_000_000))
        );
        assert_eq!(f[0].data, [1, 2, 3, 4, 5]);
        // Interface 1: nanoseconds, offset -2 s, its own link type.
        assert_eq!(f[1].linktype, linktype::LINUX_SLL2);
        assert_eq!(
            f[1].ts,
            Some(Timestamp {
                nanos: 3_000_000_123 - 2_000_000_000,
                digits: 9
            })
        );
        assert_eq!((f[1].orig_len, f[1].data.len()), (60, 6));
        // SPB: interface 0, no time, the implied length.
        assert_eq!((f[2].interface, f[2].ts), (0, None));
        assert_eq!(f[2].data, [7; 6]);
        // Obsolete packet block.
        assert_eq!((f[3].interface, f[3].data.len()), (1, 3));
        assert_eq!(f[3].ts.unwrap().nanos, 7 - 2_000_000_000);
    }
}

#[test]
fn pcapng_sections_may_switch_byte_order_and_reset_interfaces() {
    let mut w = Ng::new(true);
    w.idb(linktype::RAW as u16, 0, None, None);
    w.epb(0, 1, &[0x45], 1);
    w.shb(false);
    w.idb(linktype::NULL as u16, 0, Some(0x80 | 10), None);
    w.epb(0, 1024, &[2, 0, 0, 0], 4);
    let f = read_all(w.out()).unwrap();
    assert_eq!(f.len(), 2);
    assert_eq!(f[1].linktype, linktype::NULL);
    // 1024 units of 2^-10 s = 1 s.
    assert_eq!(f[1].ts.unwrap().nanos, 1_000_000_000);
    // A section without an IDB cannot have packets.
    let mut w = Ng::new(true);
    w.idb(1, 0, None, None);
    w.shb(true);
    let n = w.out().len();
    w.epb(0, 1, &[0], 1);
    assert_eq!(
        read_all(w.out()).unwrap_err(),
        Error {
            offset: n as u64 + 8,
            kind: ErrorKind::UnknownInterface(0)
        }
    );
}

#[test]
fn tsresol_conversions() {
    assert_eq!(ts_units_to_nanos(5, 6), Some(5_000));
    assert_eq!(ts_units_to_nanos(5, 9), Some(5));
    assert_eq!(ts_units_to_nanos(12_345, 12), Some(12));
    assert_eq!(
        ts_units_to_nanos(u64::MAX, 0),
        Some(u64::MAX as i128 * 1_000_000_000)
    );
    assert_eq!(ts_units_to_nanos(3, 0x80 | 1), Some(1_500_000_000));
    assert_eq!(ts_units_to_nanos(u64::MAX, 0x80 | 127), Some(0));
    assert_eq!(ts_units_to_nanos(1, 47), Some(0));
    assert_eq!(ts_units_to_nanos(1, 48), None);
    assert_eq!(ts_digits(3), 6);
    assert_eq!(ts_digits(6), 6);
    assert_eq!(ts_digits(9), 9);
    assert_eq!(ts_digits(0x80 | 19), 6);
    assert_eq!(ts_digits(0x80 | 20), 9);
    assert_eq!(ts_digits(0x80 | 30), 9);
}

/// Truncates a file at every offset. `ends` lists where each header,
/// record or block ends and whether it held a packet. A prefix that ends
/// on one of them reads cleanly with the packets before it; any other
/// prefix reads those packets, then fails with a truncation error at or
/// before the cut. Never a panic.
fn check_every_truncation(bytes: &[u8], ends: &[(usize, bool)]) {
    assert_eq!(ends.last().unwrap().0, bytes.len());
    let header_end = ends[0].0;
    for cut in 0..bytes.len() {
        let prefix = &bytes[..cut];
        let complete = ends.iter().filter(|(end, pkt)| *pkt && *end <= cut).count();
        let at_boundary = ends.iter().any(|(end, _)| *end == cut);
        let mut r = match CaptureReader::from_bytes(prefix) {
            Ok(r) => r,
            Err(e) => {
                assert!(cut < header_end, "cut {cut}: {e}");
                assert!(e.offset <= cut as u64);
                if cut == 0 {
                    assert_eq!(e.kind, ErrorKind::Empty);
                } else {
                    assert!(matches!(e.kind, ErrorKind::Truncated { .. }), "{e}");
                }
                continue;
            }
        };
        assert!(cut >= header_end, "cut {cut}: opened a cut header");
        let mut n = 0;
        let res = loop {
            match r.next_frame() {
                Ok(Some(_)) => n += 1,
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        assert_eq!(n, complete, "cut {cut}");
        match res {
            Ok(()) => assert!(at_boundary, "cut {cut} read cleanly mid-record"),
            Err(e) => {
                assert!(!at_boundary, "cut {cut}: {e}");
                assert!(e.offset <= cut as u64, "cut {cut}: {e}");
                assert!(
                    matches!(e.kind, ErrorKind::Truncated { .. }),
                    "cut {cut}: {e}"
                );
                // Once failed, the reader stays quiet.
                assert_eq!(r.next_frame(), Ok(None));
            }
        }
    }
}

#[test]
fn truncation_at_every_offset_pcap() {
    for le in [true, false] {
        let mut w = Pcap::new(le, false, linktype::ETHERNET);
        w.record(1, 2, &[1; 5], 5);
        w.record(1, 3, &[], 0);
        w.record(1, 4, &[2; 9], 100);
        check_every_truncation(w.out(), &w.ends);
    }
}

#[test]
fn truncation_at_every_offset_pcapng() {
    for le in [true, false] {
        let w = sample_pcapng_writer(le);
        check_every_truncation(w.out(), &w.ends);
    }
}

#[test]
fn garbled_lengths_are_refused_with_offsets() {
    // A record claiming 4 GiB in a small file: refused before reading.
    let mut w = Pcap::new(true, false, 1);
    w.record(0, 0, &[1, 2, 3], 3);
    let mut bad = w.out().to_vec();
    bad[24 + 8..24 + 12].copy_from_slice(&u32::MAX.to_le_bytes());
    let e = read_all(&bad).unwrap_err();
    assert_eq!(e.offset, 32);
    assert!(matches!(e.kind, ErrorKind::BadLength { .. }), "{e}");
    // 1 MiB claimed with 3 bytes present.
    bad[24 + 8..24 + 12].copy_from_slice(&(1u32 << 20).to_le_bytes());
    let e = read_all(&bad).unwrap_err();
    assert_eq!(
        e.kind,
        ErrorKind::Truncated {
            what: "packet record",
            needed: 16 + (1 << 20),
            available: 16 + 3
        }
    );
    assert_eq!(
        e.to_string(),
        "at byte offset 24: file truncated in packet record: needs 1048592 bytes, 19 left"
    );

    // pcapng: wrong trailing length, length not a multiple of 4, too small.
    let ng = sample_pcapng(true);
    let idb = 28; // first IDB after the 28-byte SHB
    let mut bad = ng.clone();
    let len = u32::from_le_bytes(bad[idb + 4..idb + 8].try_into().unwrap()) as usize;
    bad[idb + len - 4] ^= 4;
    let e = read_all(&bad).unwrap_err();
    assert_eq!(e.offset, (idb + len - 4) as u64);
    for l in [3u32, 13, 0xffff_fff0] {
        let mut bad = ng.clone();
        bad[idb + 4..idb + 8].copy_from_slice(&l.to_le_bytes());
        let e = read_all(&bad).unwrap_err();
        assert_eq!(e.offset, (idb + 4) as u64, "{l}: {e}");
    }
    // EPB whose captured length overruns its block.
    let mut w = Ng::new(true);
    w.idb(1, 0, None, None);
    let epb = w.out().len();
    w.epb(0, 0, &[1, 2, 3, 4], 4);
    let mut bad = w.out().to_vec();
    bad[epb + 20..epb + 24].copy_from_slice(&100u32.to_le_bytes());
    let e = read_all(&bad).unwrap_err();
    assert_eq!(e.offset, epb as u64 + 20, "{e}");
    // Wrong magic, wrong versions.
    assert!(matches!(
        read_all(b"GIF89a......").unwrap_err().kind,
        ErrorKind::UnknownMagic(_)
    ));
    let mut v = Pcap::new(true, false, 1).out().to_vec();
    v[4] = 3;
    assert!(matches!(
        read_all(&v).unwrap_err().kind,
        ErrorKind::Unsupported(_)
    ));
    let mut v = sample_pcapng(true);
    v[12] = 2;
    assert!(matches!(
        read_all(&v).unwrap_err().kind,
        ErrorKind::Unsupported(_)
    ));
}

/// A reader that hands out one byte per call and reports no size: the
/// streaming path must give the same frames as the in-memory one.
struct Dribble<'a>(&'a [u8]);
impl Read for Dribble<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        match (self.0.split_first(), out.first_mut()) {
            (Some((b, rest)), Some(o)) => {
                *o = *b;
                self.0 = rest;
                Ok(1)
            }
            _ => Ok(0),
        }
    }
}

#[test]
fn streaming_without_size_reads_the_same() {
    for bytes in [sample_pcapng(false), {
        let mut w = Pcap::new(false, true, 1);
        w.record(1, 2, &[3; 33], 33);
        w.out().to_vec()
    }] {
        let mut r = CaptureReader::new(Dribble(&bytes), None).unwrap();
        let mut n = 0;
        let want = read_all(&bytes).unwrap();
        while let Some(f) = r.next_frame().unwrap() {
            assert_eq!(f.data, &want[n].data[..]);
            assert_eq!(f.timestamp, want[n].ts);
            n += 1;
        }
        assert_eq!(n, want.len());
        // Truncated streams fail the same way without a known size.
        let cut = &bytes[..bytes.len() - 3];
        let mut r = CaptureReader::new(Dribble(cut), None).unwrap();
        let err = loop {
            match r.next_frame() {
                Ok(Some(_)) => {}
                Ok(None) => panic!("clean end on a cut stream"),
                Err(e) => break e,
            }
        };
        assert!(matches!(err.kind, ErrorKind::Truncated { .. }));
    }
}
