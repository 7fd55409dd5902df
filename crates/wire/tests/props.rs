//! Property tests of the wire format.
//!
//! - For every opcode in the table, every PadCnt 0..=3 (0 only where the
//!   opcode carries no payload), IPv4 and IPv6, random header fields and
//!   payload lengths: emit → parse gives back the same Reprs and the ICRC
//!   verifies.
//! - Flipping any one bit of such a datagram changes the ICRC result exactly
//!   when the bit lies outside the fields the ICRC masks (IPv4 TOS, TTL and
//!   header checksum; IPv6 traffic class, flow label and hop limit; UDP
//!   checksum; BTH byte 4). The ICRC is recomputed over the mutated bytes at
//!   the original offsets, so a flip in a length or version field (which may
//!   make parsing fail) is judged by the CRC, not skipped.
//! - Parsing arbitrary or mutated bytes never panics; when it succeeds,
//!   emit(parse(x)) parses to the same Reprs, and equals x byte for byte when
//!   x is canonical (zero reserved bits and pad, valid IPv4 checksum, right
//!   ICRC).

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use softrdma_wire::ip::{Ipv4Repr, Ipv6Repr, UdpRepr};
use softrdma_wire::opcode::Headers;
use softrdma_wire::{
    pretty, AethRepr, AtomicEthRepr, BthRepr, DatagramRepr, DethRepr, FethRepr, Icrc, IpRepr, Msn,
    Opcode, PKey, PacketRepr, Psn, QKey, Qpn, RKey, RethRepr, RoceDatagram, Syndrome,
};
use std::cell::Cell;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Random values for every field a packet of any opcode may carry.
#[derive(Clone, Debug)]
struct Fields {
    bth: (bool, bool, u16, bool, bool, u32, bool, u32),
    reth: (u64, u32, u32),
    atomic: (u64, u32, u64, u64),
    aeth: (u8, u32),
    deth: (u32, u32),
    misc: (u64, u32, u32),
    ip4: (u32, u32, u8, u16, bool, u8),
    ip6: (u128, u128, u8, u32, u8),
    udp: (u16, u16),
}

fn fields() -> impl Strategy<Value = Fields> {
    (
        any::<(bool, bool, u16, bool, bool, u32, bool, u32)>(),
        any::<(u64, u32, u32)>(),
        any::<(u64, u32, u64, u64)>(),
        any::<(u8, u32)>(),
        any::<(u32, u32)>(),
        any::<(u64, u32, u32)>(),
        any::<(u32, u32, u8, u16, bool, u8)>(),
        any::<(u128, u128, u8, u32, u8)>(),
        any::<(u16, u16)>(),
    )
        .prop_map(
            |(bth, reth, atomic, aeth, deth, misc, ip4, ip6, udp)| Fields {
                bth,
                reth,
                atomic,
                aeth,
                deth,
                misc,
                ip4,
                ip6,
                udp,
            },
        )
}

/// The Reprs of one packet: the opcode's headers filled from `f`.
fn build<'a>(
    op: Opcode,
    pad: u8,
    payload: &'a [u8],
    f: &Fields,
    v6: bool,
) -> (DatagramRepr, PacketRepr<'a>) {
    let info = op.info().expect("opcode from the table");
    let (se, mig, pkey, fecn, becn, qp, ack, psn) = f.bth;
    let bth = BthRepr {
        opcode: op,
        solicited: se,
        mig_req: mig,
        pad_count: pad,
        pkey: PKey(pkey),
        fecn,
        becn,
        dest_qp: Qpn::new(qp),
        ack_req: ack,
        psn: Psn::new(psn),
    };
    let mut p = PacketRepr::new(bth, if info.payload { payload } else { &[] });
    let h = info.headers;
    if h.contains(Headers::RETH) {
        p.reth = Some(RethRepr {
            va: f.reth.0,
            rkey: RKey(f.reth.1),
            dma_len: f.reth.2,
        });
    }
    if h.contains(Headers::FETH) {
        // The FETH's two fields (4 + 2 bits) come from the misc word.
        p.feth = Some(FethRepr {
            placement_type: (f.misc.1 & 0xf) as u8,
            selectivity_level: (f.misc.1 >> 4 & 3) as u8,
        });
    }
    if h.contains(Headers::ATOMIC_ETH) {
        p.atomic_eth = Some(AtomicEthRepr {
            va: f.atomic.0,
            rkey: RKey(f.atomic.1),
            swap_add: f.atomic.2,
            compare: f.atomic.3,
        });
    }
    if h.contains(Headers::AETH) {
        p.aeth = Some(AethRepr {
            syndrome: Syndrome::from_byte(f.aeth.0),
            msn: Msn::new(f.aeth.1),
        });
    }
    if h.contains(Headers::DETH) {
        p.deth = Some(DethRepr {
            qkey: QKey(f.deth.0),
            src_qp: Qpn::new(f.deth.1),
        });
    }
    if h.contains(Headers::ATOMIC_ACK_ETH) {
        p.atomic_ack = Some(f.misc.0);
    }
    if h.contains(Headers::IMM) {
        p.imm = Some(f.misc.1);
    }
    if h.contains(Headers::IETH) {
        p.ieth = Some(RKey(f.misc.2));
    }
    if h.contains(Headers::XRCETH) {
        // 24 bits; the reserved byte is not carried (reused from DETH's
        // random source QP word).
        p.xrceth = Some(f.deth.1 & 0x00ff_ffff);
    }
    let ip = if v6 {
        let (s, d, tc, fl, hl) = f.ip6;
        IpRepr::V6(Ipv6Repr {
            src: Ipv6Addr::from(s),
            dst: Ipv6Addr::from(d),
            traffic_class: tc,
            flow_label: fl & 0xfffff,
            hop_limit: hl,
        })
    } else {
        let (s, d, tos, ident, df, ttl) = f.ip4;
        IpRepr::V4(Ipv4Repr {
            src: Ipv4Addr::from(s),
            dst: Ipv4Addr::from(d),
            tos,
            ident,
            dont_frag: df,
            ttl,
        })
    };
    let d = DatagramRepr {
        ip,
        udp: UdpRepr {
            src_port: f.udp.0,
            dst_port: 4791,
            checksum: f.udp.1,
        },
    };
    (d, p)
}

fn emit(d: &DatagramRepr, p: &PacketRepr<'_>) -> Vec<u8> {
    let mut buf = vec![0xa5; d.header_len() + p.buffer_len()];
    let n = d.emit(p, &mut buf).expect("emit of a well-formed Repr");
    assert_eq!(n, buf.len());
    buf
}

/// Byte ranges and bit masks the ICRC replaces with ones, written from
/// IBA Annex A17.3.3 (not taken from the crate).
fn masked_bits(v6: bool) -> Vec<(usize, u8)> {
    let (ip, ip_len) = if v6 {
        (
            vec![(0, 0x0f), (1, 0xff), (2, 0xff), (3, 0xff), (7, 0xff)],
            40,
        )
    } else {
        (vec![(1, 0xff), (8, 0xff), (10, 0xff), (11, 0xff)], 20)
    };
    let mut m = ip;
    m.push((ip_len + 6, 0xff)); // UDP checksum
    m.push((ip_len + 7, 0xff));
    m.push((ip_len + 8 + 4, 0xff)); // BTH byte 4
    m
}

/// ICRC over `b` as laid out when it was emitted (IP header length
/// `ip_len`), via the crate's incremental API, without parsing `b`.
fn icrc_at_layout(b: &[u8], v6: bool) -> u32 {
    let mut c = Icrc::new();
    let ip_len = if v6 {
        c.ipv6_header(b[..40].try_into().unwrap());
        40
    } else {
        c.ipv4_header(b[..20].try_into().unwrap());
        20
    };
    c.udp_header(b[ip_len..ip_len + 8].try_into().unwrap());
    c.transport(&b[ip_len + 8..b.len() - 4]);
    // Linux rxe's FLUSH (opcode 0x1C): the transport bytes once more,
    // unmasked (its opcode table gives FLUSH no payload offset; see the
    // crate's icrc module).
    if b[ip_len + 8] == 0x1c {
        c.update(&b[ip_len + 8..b.len() - 4]);
    }
    c.finish()
}

fn stored_icrc(b: &[u8]) -> u32 {
    u32::from_le_bytes(b[b.len() - 4..].try_into().unwrap())
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

fn pads(op: Opcode) -> std::ops::RangeInclusive<u8> {
    if op.info().unwrap().payload {
        0..=3
    } else {
        0..=0
    }
}

#[test]
fn emit_then_parse_is_identity_for_every_opcode_pad_and_ip_version() {
    let mut combos = 0;
    for op in Opcode::all() {
        for pad in pads(op) {
            for v6 in [false, true] {
                combos += 1;
                let strat = (fields(), proptest::collection::vec(any::<u8>(), 0..1500));
                runner(24)
                    .run(&strat, |(f, payload)| {
                        let (d, p) = build(op, pad, &payload, &f, v6);
                        let bytes = emit(&d, &p);
                        let dg = RoceDatagram::new_checked(&bytes[..])
                            .map_err(|e| TestCaseError::fail(format!("{op:?}: {e}")))?;
                        prop_assert!(dg.is_roce_port());
                        prop_assert_eq!(dg.is_v6(), v6);
                        prop_assert_eq!(dg.datagram().len(), bytes.len());
                        prop_assert_eq!(DatagramRepr::parse(&dg), d);
                        let parsed = PacketRepr::parse(&dg.ib())
                            .map_err(|e| TestCaseError::fail(format!("{op:?}: {e}")))?;
                        prop_assert_eq!(parsed, p);
                        prop_assert!(dg.icrc_ok());
                        prop_assert_eq!(icrc_at_layout(&bytes, v6), stored_icrc(&bytes));
                        // Pad bytes are zero, the payload is where it should be.
                        let ib = dg.ib();
                        prop_assert_eq!(ib.pad(), &[0u8, 0, 0][..pad as usize]);
                        prop_assert_eq!(ib.payload(), p.payload);
                        // The printer agrees with the parse.
                        let line = pretty::datagram_line(&bytes);
                        prop_assert!(line.contains(op.name()), "{}", line);
                        prop_assert!(line.ends_with("icrc=ok"), "{}", line);
                        Ok(())
                    })
                    .unwrap_or_else(|e| panic!("{op:?} pad {pad} v6 {v6}: {e}"));
            }
        }
    }
    // 33 opcodes with payload (ATOMIC WRITE among them) x 4 pads + 7
    // without (READ request, ACK, atomic ACK, the two atomics, FLUSH, CNP)
    // x 1, and XRC's 18 with payload and 5 without, times 2 IP versions.
    assert_eq!(combos, ((33 + 18) * 4 + 7 + 5) * 2);
}

#[test]
fn a_pad_count_on_an_opcode_without_payload_is_refused() {
    for op in Opcode::all().filter(|o| !o.info().unwrap().payload) {
        let f = fields().new_tree(&mut runner(1)).unwrap().current();
        let (d, p) = build(op, 2, &[], &f, false);
        let mut buf = vec![0u8; 200];
        assert!(d.emit(&p, &mut buf).is_err(), "{op:?}");
    }
}

#[test]
fn any_single_bit_flip_outside_the_masked_fields_breaks_the_icrc() {
    for op in Opcode::all() {
        for pad in pads(op) {
            for v6 in [false, true] {
                let strat = (fields(), proptest::collection::vec(any::<u8>(), 0..48));
                runner(4)
                    .run(&strat, |(f, payload)| {
                        let (d, p) = build(op, pad, &payload, &f, v6);
                        let bytes = emit(&d, &p);
                        let mut masked = masked_bits(v6);
                        if op == Opcode(0x1c) {
                            // rxe's FLUSH form covers the BTH a second
                            // time, byte 4 unmasked.
                            let bth4 = if v6 { 40 } else { 20 } + 8 + 4;
                            masked.retain(|&(o, _)| o != bth4);
                        }
                        let n = bytes.len();
                        for bit in 0..n * 8 {
                            let (at, m) = (bit / 8, 1u8 << (bit % 8));
                            let mut x = bytes.clone();
                            x[at] ^= m;
                            let is_masked = masked.iter().any(|&(o, mm)| o == at && mm & m != 0);
                            // Over the mutated bytes at the emitted layout. A
                            // flip in the stored ICRC counts: the comparison
                            // fails on the other side.
                            let ok = icrc_at_layout(&x, v6) == stored_icrc(&x);
                            prop_assert_eq!(ok, is_masked, "{:?} byte {} mask {:#04x}", op, at, m);
                            // When the mutated bytes still parse, the parsed
                            // view's verdict is the same.
                            if let Ok(dg) = RoceDatagram::new_checked(&x[..]) {
                                if dg.datagram().len() == n {
                                    prop_assert_eq!(dg.icrc_ok(), is_masked, "byte {}", at);
                                }
                            }
                        }
                        Ok(())
                    })
                    .unwrap_or_else(|e| panic!("{op:?} pad {pad} v6 {v6}: {e}"));
            }
        }
    }
}

/// True when `x` (a datagram that parsed) is the one canonical encoding of
/// its Reprs: no reserved bit set, zero pad, valid IPv4 header checksum, no
/// bytes after the IP length, and the right ICRC. Written from the specs.
fn canonical(x: &[u8]) -> bool {
    let v6 = x[0] >> 4 == 6;
    let ip_len = if v6 { 40 } else { 20 };
    let ip_total = if v6 {
        40 + u16::from_be_bytes([x[4], x[5]]) as usize
    } else {
        u16::from_be_bytes([x[2], x[3]]) as usize
    };
    if ip_total != x.len() {
        return false;
    }
    if !v6 {
        // Reserved flag bit, and the RFC 1071 sum over the header is 0xffff.
        if x[6] & 0x80 != 0 {
            return false;
        }
        let mut sum: u32 = x[..20]
            .chunks(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]) as u32)
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        if sum != 0xffff {
            return false;
        }
    }
    let bth = ip_len + 8;
    let info = Opcode(x[bth]).info().unwrap();
    if x[bth + 4] & 0x3f != 0 || x[bth + 8] & 0x7f != 0 {
        return false;
    }
    let ext = bth + 12;
    if let Some(o) = info.headers.offset_of(Headers::DETH) {
        if x[ext + o + 4] != 0 {
            return false;
        }
    }
    // The XRCETH's reserved byte (IBA 9.3.7) is not carried by the Repr.
    if let Some(o) = info.headers.offset_of(Headers::XRCETH) {
        if x[ext + o] != 0 {
            return false;
        }
    }
    if let Some(o) = info.headers.offset_of(Headers::CNP_PAD) {
        if x[ext + o..ext + o + 16].iter().any(|&b| b != 0) {
            return false;
        }
    }
    // FETH bits 31:6 are reserved.
    if let Some(o) = info.headers.offset_of(Headers::FETH) {
        if x[ext + o..ext + o + 3] != [0, 0, 0] || x[ext + o + 3] & 0xc0 != 0 {
            return false;
        }
    }
    let pad = ((x[bth + 1] >> 4) & 3) as usize;
    if x[x.len() - 4 - pad..x.len() - 4].iter().any(|&b| b != 0) {
        return false;
    }
    icrc_at_layout(x, v6) == stored_icrc(x)
}

/// Parses `x`; on success checks emit∘parse as the module doc says.
/// Returns whether `x` parsed and whether it was canonical.
fn parse_emit_check(x: &[u8]) -> Result<(bool, bool), TestCaseError> {
    let _ = pretty::datagram_line(x);
    let Ok(dg) = RoceDatagram::new_checked(x) else {
        return Ok((false, false));
    };
    let d = DatagramRepr::parse(&dg);
    let _ = dg.icrc_ok();
    let p = PacketRepr::parse(&dg.ib()).map_err(|e| TestCaseError::fail(format!("{e}")))?;
    let mut out = vec![0u8; d.header_len() + p.buffer_len()];
    let n = d
        .emit(&p, &mut out)
        .map_err(|e| TestCaseError::fail(format!("emit: {e}")))?;
    prop_assert_eq!(n, out.len());
    let dg2 =
        RoceDatagram::new_checked(&out[..]).map_err(|e| TestCaseError::fail(format!("{e}")))?;
    prop_assert_eq!(DatagramRepr::parse(&dg2), d);
    prop_assert_eq!(PacketRepr::parse(&dg2.ib()).unwrap(), p);
    prop_assert!(dg2.icrc_ok());
    let canon = canonical(x);
    if canon {
        prop_assert_eq!(&out[..], x);
    }
    Ok((true, canon))
}

#[test]
fn arbitrary_bytes_never_panic() {
    let strat = (
        prop_oneof![Just(None), Just(Some(0x45u8)), Just(Some(0x60u8))],
        proptest::collection::vec(any::<u8>(), 0..160),
    );
    runner(20_000)
        .run(&strat, |(first, mut x)| {
            if let (Some(b), Some(x0)) = (first, x.first_mut()) {
                *x0 = b;
            }
            parse_emit_check(&x).map(|_| ())
        })
        .unwrap();
}

#[test]
fn mutated_packets_parse_emit_back_or_are_rejected() {
    let ops: Vec<Opcode> = Opcode::all().collect();
    let strat = (
        0..ops.len(),
        0u8..4,
        any::<bool>(),
        fields(),
        proptest::collection::vec(any::<u8>(), 0..64),
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        any::<bool>(),
    );
    let (parsed, canon) = (Cell::new(0u32), Cell::new(0u32));
    runner(8_000)
        .run(&strat, |(oi, pad, v6, f, payload, edits, repair)| {
            let op = ops[oi];
            let pad = if op.info().unwrap().payload { pad } else { 0 };
            let (d, p) = build(op, pad, &payload, &f, v6);
            let mut x = emit(&d, &p);
            for (i, v) in &edits {
                let at = i.index(x.len());
                x[at] = *v;
            }
            if repair && x.len() >= 48 {
                // Recompute the IPv4 checksum and the ICRC over the edited
                // bytes, so canonical mutants (e.g. another opcode with a
                // valid layout) occur often.
                if !v6 {
                    x[10] = 0;
                    x[11] = 0;
                    let c = softrdma_wire::ip::ipv4_checksum(&x[..20]);
                    x[10..12].copy_from_slice(&c.to_be_bytes());
                }
                let c = icrc_at_layout(&x, v6);
                let n = x.len();
                x[n - 4..].copy_from_slice(&c.to_le_bytes());
            }
            let (ok, c) = parse_emit_check(&x)?;
            parsed.set(parsed.get() + ok as u32);
            canon.set(canon.get() + c as u32);
            Ok(())
        })
        .unwrap();
    // The generator must actually reach both branches of the property.
    let (parsed, canon) = (parsed.get(), canon.get());
    assert!(parsed > 2_000, "only {parsed} mutants parsed");
    assert!(canon > 1_000, "only {canon} canonical mutants");
}
