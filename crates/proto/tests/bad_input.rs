//! Hostile and broken datagrams against the core (proptest).
//!
//! The harness is the `core` fuzz target's (`common/fuzz_core.rs`): a
//! Device with a connected RC, UC and UD QP, receives posted, requests of
//! its own outstanding, and five regions — read-only, remotely writable,
//! atomic, one in another protection domain, one local — filled with a
//! pattern. After every datagram it checks that the process is alive, that
//! memory changed only where a valid request could have written (the
//! read-only and other-PD regions never; the writable one only inside a
//! range some WRITE named with its key, in bounds; the atomic one only at an
//! aligned target named with its key; the local one only in receive buffers
//! and the device's own READ/atomic results), that a datagram the device
//! counts as dropped had no effect at all, and that everything sent is a
//! valid RC packet to the peer.
//!
//! On top of that, the properties below check the verdicts the IBA asks for:
//! drops (ICRC, P_Key, Q_Key, source address, QP number), the R_Key / VA /
//! length checks of WRITE, READ and atomics (NAK remote access error, or
//! invalid request for a bad length or alignment), the opcode sequence
//! (NAK invalid request), the PSN check (execute, NAK sequence error once,
//! or acknowledge a duplicate again), UC's silent drops, and what ACKs for
//! PSNs never sent do to the device's own requests.

#[path = "common/fuzz_core.rs"]
#[allow(dead_code)]
mod fuzz_core;

use fuzz_core::*;
use proptest::prelude::*;
use softrdma_proto::{AsyncEvent, Event, QpState, WcFlags, WcStatus};
use softrdma_wire::{
    AethRepr, AtomicEthRepr, DethRepr, NakCode, PacketRepr, Psn, QKey, Qpn, RKey, RethRepr,
    Syndrome,
};
use std::net::IpAddr;

/// `n` cases per property, or `BAD_INPUT_CASES` for a longer hunt; no
/// regression files (a failure prints its minimal input).
fn config(n: u32) -> ProptestConfig {
    let cases = std::env::var("BAD_INPUT_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(n);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn peer() -> IpAddr {
    ip(PEER_IP)
}

/// Each seed packet, alone on a fresh target (multi-packet messages in
/// order), is accepted and answered as a valid packet must be.
#[test]
fn seed_packets_are_valid() {
    let t = Target::new();
    let seeds = valid_packets(&t);
    assert_eq!(seeds.len(), 24);
    let mut t = Target::new();
    let mut fresh = true;
    for (name, bytes) in &seeds {
        let continues =
            name.ends_with("_middle") || name.ends_with("_last") || *name == "rc_send_last_imm";
        if !continues && !fresh {
            t = Target::new();
        }
        fresh = false;
        let e = t.feed(peer(), bytes);
        if *name == "cnp" {
            assert!(e.dropped && e.sent.is_empty(), "{name}");
            continue;
        }
        assert!(!e.dropped, "{name} dropped");
        let c = t.dev.counters();
        assert_eq!(
            (c.inv_req_nak_sent, c.rem_access_nak_sent, c.rem_op_nak_sent),
            (0, 0, 0),
            "{name} NAKed"
        );
    }
}

// ------------------------------------------------------------ mutations ----

/// A key a mutated packet names: one of the target's regions or any value.
#[derive(Clone, Copy, Debug)]
enum Key {
    Region(usize),
    Raw(u32),
}

impl Key {
    fn resolve(self, t: &Target) -> u32 {
        match self {
            Key::Region(i) => t.regions[i % t.regions.len()].key,
            Key::Raw(k) => k,
        }
    }
}

fn key() -> impl Strategy<Value = Key> {
    prop_oneof![
        3 => (0..5usize).prop_map(Key::Region),
        1 => any::<u32>().prop_map(Key::Raw),
    ]
}

/// A key, often region `i`'s.
fn key_for(i: usize) -> impl Strategy<Value = Key> {
    prop_oneof![1 => Just(Key::Region(i)), 1 => key()]
}

/// A VA, often around the start or the end of region `i`.
fn va_for(i: usize) -> impl Strategy<Value = Va> {
    prop_oneof![
        2 => (-2i64..=2).prop_map(move |d| Va::End(i, d)),
        1 => (-2i64..=2).prop_map(move |d| Va::Near(i, d.max(0))),
        2 => va(),
    ]
}

/// A VA near a region's edges, one that puts the end of an access of
/// `len` bytes just around a region's end, or anywhere.
#[derive(Clone, Copy, Debug)]
enum Va {
    Near(usize, i64),
    End(usize, i64),
    Raw(u64),
}

impl Va {
    fn resolve(self, t: &Target) -> u64 {
        self.resolve_for(t, 0)
    }
    fn resolve_for(self, t: &Target, len: u64) -> u64 {
        match self {
            Va::End(i, delta) => {
                let r = &t.regions[i % t.regions.len()];
                r.va.wrapping_add(r.len())
                    .wrapping_sub(len)
                    .wrapping_add_signed(delta)
            }
            Va::Near(i, off) => {
                let r = &t.regions[i % t.regions.len()];
                // Offsets around the start and around the end.
                if off >= 0 {
                    r.va.wrapping_add(off as u64)
                } else {
                    r.va.wrapping_add(r.len()).wrapping_add_signed(off)
                }
            }
            Va::Raw(v) => v,
        }
    }
}

fn va() -> impl Strategy<Value = Va> {
    prop_oneof![
        4 => (0..5usize, -80i64..80).prop_map(|(i, o)| Va::Near(i, o)),
        3 => (0..5usize, -2i64..=2).prop_map(|(i, d)| Va::End(i, d)),
        1 => any::<u64>().prop_map(Va::Raw),
    ]
}

#[derive(Clone, Debug)]
enum Mutation {
    /// Flip bits (positions taken modulo the length).
    Flip(Vec<u16>),
    /// Cut to this length (modulo the length).
    Truncate(u16),
    /// Append bytes.
    Extend(Vec<u8>),
    /// Replace the opcode.
    Opcode(u8),
    /// Replace the PSN, the destination QP, the P_Key.
    Psn(u32),
    Qpn(u32),
    PKey(u16),
    /// Replace the RETH (if the packet has one).
    Reth(Key, Va, u32),
    /// Replace the AtomicETH's R_Key and VA (if the packet has one).
    Atomic(Key, Va),
    /// Set one byte.
    Byte(u16, u8),
    /// Set the PSN to what the destination QP expects now (so that
    /// sequences of mutated packets reach execution, not the PSN check).
    PsnExpected,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => prop::collection::vec(any::<u16>(), 1..4).prop_map(Mutation::Flip),
        1 => any::<u16>().prop_map(Mutation::Truncate),
        1 => prop::collection::vec(any::<u8>(), 1..40).prop_map(Mutation::Extend),
        2 => any::<u8>().prop_map(Mutation::Opcode),
        1 => any::<u32>().prop_map(Mutation::Psn),
        1 => any::<u32>().prop_map(Mutation::Qpn),
        1 => any::<u16>().prop_map(Mutation::PKey),
        3 => (key(), va(), prop_oneof![0..700u32, any::<u32>()])
            .prop_map(|(k, v, l)| Mutation::Reth(k, v, l)),
        2 => (key(), va()).prop_map(|(k, v)| Mutation::Atomic(k, v)),
        2 => (any::<u16>(), any::<u8>()).prop_map(|(a, b)| Mutation::Byte(a, b)),
        3 => Just(Mutation::PsnExpected),
    ]
}

/// Offset of the RETH / AtomicETH in a packet with this opcode, if any.
fn ext_offset(bytes: &[u8], which: softrdma_wire::Headers) -> Option<usize> {
    let info = softrdma_wire::Opcode(*bytes.first()?).info()?;
    Some(12 + info.headers.offset_of(which)?)
}

fn apply(t: &Target, bytes: &mut Vec<u8>, m: &Mutation) {
    let n = bytes.len();
    match m {
        Mutation::Flip(bits) => {
            for &b in bits {
                let b = b as usize % (n * 8);
                bytes[b / 8] ^= 1 << (b % 8);
            }
        }
        Mutation::Truncate(l) => bytes.truncate(*l as usize % n),
        Mutation::Extend(x) => {
            let icrc = bytes.split_off(n - 4);
            bytes.extend_from_slice(x);
            bytes.extend_from_slice(&icrc);
        }
        Mutation::Opcode(o) => bytes[0] = *o,
        Mutation::Psn(p) => bytes[9..12].copy_from_slice(&p.to_be_bytes()[1..]),
        Mutation::Qpn(q) => bytes[5..8].copy_from_slice(&q.to_be_bytes()[1..]),
        Mutation::PKey(k) => bytes[2..4].copy_from_slice(&k.to_be_bytes()),
        Mutation::Reth(k, v, l) => {
            if let Some(o) = ext_offset(bytes, softrdma_wire::Headers::RETH) {
                if o + 16 <= n {
                    bytes[o..o + 8].copy_from_slice(&v.resolve(t).to_be_bytes());
                    bytes[o + 8..o + 12].copy_from_slice(&k.resolve(t).to_be_bytes());
                    bytes[o + 12..o + 16].copy_from_slice(&l.to_be_bytes());
                }
            }
        }
        Mutation::Atomic(k, v) => {
            if let Some(o) = ext_offset(bytes, softrdma_wire::Headers::ATOMIC_ETH) {
                if o + 12 <= n {
                    bytes[o..o + 8].copy_from_slice(&v.resolve(t).to_be_bytes());
                    bytes[o + 8..o + 12].copy_from_slice(&k.resolve(t).to_be_bytes());
                }
            }
        }
        Mutation::Byte(at, b) => bytes[*at as usize % n] = *b,
        Mutation::PsnExpected => {
            let dest = u32::from_be_bytes([0, bytes[5], bytes[6], bytes[7]]);
            if let Some(&q) = [t.rc, t.uc].iter().find(|q| q.value() == dest) {
                bytes[9..12].copy_from_slice(&t.epsn(q).value().to_be_bytes()[1..]);
            }
        }
    }
}

#[derive(Clone, Debug)]
struct Step {
    seed: usize,
    mutations: Vec<Mutation>,
    /// Recompute the ICRC after mutating (so the packet reaches the
    /// transport checks).
    fix_icrc: bool,
    /// 0: the peer, 1: another address, 2: IPv6.
    src: u8,
    /// Let 100 ms pass first.
    wait: bool,
}

fn step() -> impl Strategy<Value = Step> {
    (
        0..64usize,
        prop::collection::vec(mutation(), 0..3),
        prop::bool::weighted(0.85),
        prop_oneof![8 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)],
        prop::bool::weighted(0.1),
    )
        .prop_map(|(seed, mutations, fix_icrc, src, wait)| Step {
            seed,
            mutations,
            fix_icrc,
            src,
            wait,
        })
}

fn src_of(s: u8) -> IpAddr {
    match s {
        0 => ip(PEER_IP),
        1 => ip(OTHER_IP),
        _ => ip("2001:db8::2"),
    }
}

proptest! {
    #![proptest_config(config(400))]

    /// Random bytes: never a panic, never a write, never an answer.
    #[test]
    fn random_bytes(
        dgrams in prop::collection::vec(
            (prop::collection::vec(any::<u8>(), 0..600), any::<bool>(), 0..3u8), 1..6),
    ) {
        let mut t = Target::new();
        for (mut d, fix, s) in dgrams {
            let src = src_of(s);
            if fix {
                Target::fix_icrc(src, &mut d);
            }
            let e = t.feed(src, &d);
            // Whatever got through the parser, no region moved outside the
            // rules (checked in feed); random bytes are no valid request to
            // this device's QP numbers except by a 2^-24 chance.
            prop_assert!(e.changed.iter().all(|&n| n == 0) || !e.dropped);
        }
        t.advance(10_000_000_000);
    }

    /// Sequences of mutated valid packets: bit flips (mostly with the ICRC
    /// recomputed), truncations, opcode swaps, random PSNs, QPNs, P_Keys,
    /// R_Keys, VAs and lengths, other sources.
    #[test]
    fn mutated_packets(steps in prop::collection::vec(step(), 1..10)) {
        let mut t = Target::new();
        let seeds = valid_packets(&t);
        for s in &steps {
            if s.wait {
                t.advance(100_000_000);
            }
            let mut bytes = seeds[s.seed % seeds.len()].1.clone();
            for m in &s.mutations {
                if bytes.len() < 16 {
                    break;
                }
                apply(&t, &mut bytes, m);
            }
            let src = src_of(s.src);
            if s.fix_icrc {
                Target::fix_icrc(src, &mut bytes);
            }
            t.feed(src, &bytes);
        }
        t.advance(10_000_000_000);
    }
}

// ------------------------------------------------------------- verdicts ----

/// One packet, alone on a fresh target.
fn one(name: &str) -> (Target, Vec<u8>) {
    let t = Target::new();
    let bytes = valid_packets(&t)
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap()
        .1;
    (t, bytes)
}

fn single_response(e: &Effect) -> (u8, Psn, Syndrome) {
    assert_eq!(e.sent.len(), 1, "one response: {:?}", e.sent);
    let r = e.sent[0].repr();
    let aeth = r.aeth.expect("an AETH");
    (r.bth.opcode.0, r.bth.psn, aeth.syndrome)
}

proptest! {
    #![proptest_config(config(200))]

    /// A flipped bit without a new ICRC: dropped (icrc_errors), unless the
    /// IPv4 identification search finds an identification that explains it
    /// (a 2^-16 chance per corrupted packet, the price of not seeing the IP
    /// header); either way the transport never sees a corrupted packet
    /// whose ICRC does not check.
    #[test]
    fn bad_icrc_is_dropped(seed in 0..64usize, bit in any::<u16>()) {
        let mut t = Target::new();
        let seeds = valid_packets(&t);
        let mut bytes = seeds[seed % seeds.len()].1.clone();
        let b = bit as usize % (bytes.len() * 8);
        // BTH byte 4 (FECN, BECN, reserved) is masked out of the ICRC
        // (IBA Annex A17.3.3): flipping it keeps the ICRC valid.
        prop_assume!(b / 8 != 4);
        bytes[b / 8] ^= 1 << (b % 8);
        let before = t.dev.counters();
        let e = t.feed(peer(), &bytes);
        let c = t.dev.counters();
        if c.icrc_ip_id_inferred == before.icrc_ip_id_inferred {
            prop_assert!(e.dropped);
            // Dropped by the ICRC check, or before it when the flip left
            // no valid packet (an opcode whose headers do not fit).
            prop_assert_eq!(
                c.icrc_errors + c.malformed,
                before.icrc_errors + before.malformed + 1
            );
        }
    }

    /// Wrong P_Key (not the default partition): dropped, counted.
    #[test]
    fn wrong_pkey_is_dropped(seed in 0..64usize, pkey in any::<u16>()) {
        prop_assume!(pkey & 0x7fff != 0x7fff);
        let mut t = Target::new();
        let seeds = valid_packets(&t);
        let mut bytes = seeds[seed % seeds.len()].1.clone();
        bytes[2..4].copy_from_slice(&pkey.to_be_bytes());
        Target::fix_icrc(peer(), &mut bytes);
        let is_cnp = bytes[0] == 0x81;
        let e = t.feed(peer(), &bytes);
        prop_assert!(e.dropped);
        if !is_cnp {
            prop_assert_eq!(t.dev.counters().bad_pkey, 1);
        }
    }

    /// Wrong Q_Key on UD: dropped, counted, the receive stays posted.
    #[test]
    fn wrong_qkey_is_dropped(qkey in any::<u32>()) {
        prop_assume!(qkey != QKEY);
        let (mut t, _) = one("ud_send_only");
        let mut p = PacketRepr::new(bth(0x64, t.ud, 1), &[1, 2, 3]);
        p.deth = Some(DethRepr { qkey: QKey(qkey), src_qp: Qpn::new(0x77) });
        let e = t.feed(peer(), &Target::encode(peer(), &p));
        prop_assert!(e.dropped);
        prop_assert_eq!(t.dev.counters().bad_qkey, 1);
        // The right Q_Key then completes the first receive.
        p.deth = Some(DethRepr { qkey: QKey(QKEY), src_qp: Qpn::new(0x77) });
        let e = t.feed(peer(), &Target::encode(peer(), &p));
        prop_assert_eq!(e.completions.len(), 1);
        prop_assert_eq!(e.completions[0].byte_len, 43);
        prop_assert!(e.completions[0].wc_flags.contains(WcFlags::GRH));
    }

    /// RC and UC packets from an address other than the connected peer's:
    /// dropped, counted (the ICRC is right for the address they came from).
    #[test]
    fn wrong_source_is_dropped(seed in 0..64usize, last in 3..255u8) {
        let mut t = Target::new();
        let seeds: Vec<_> = valid_packets(&t)
            .into_iter()
            .filter(|(n, _)| !n.starts_with("ud") && *n != "cnp")
            .collect();
        let mut bytes = seeds[seed % seeds.len()].1.clone();
        let src = IpAddr::from([10, 0, 0, last]);
        Target::fix_icrc(src, &mut bytes);
        let e = t.feed(src, &bytes);
        prop_assert!(e.dropped);
        prop_assert_eq!(t.dev.counters().wrong_peer, 1);
    }

    /// A QP number the device does not have: dropped, counted.
    #[test]
    fn unknown_qpn_is_dropped(seed in 0..64usize, qpn in 0..0x100_0000u32) {
        let mut t = Target::new();
        prop_assume!(![t.rc, t.uc, t.ud].iter().any(|q| q.value() == qpn));
        let seeds = valid_packets(&t);
        let (name, mut bytes) = seeds[seed % seeds.len()].clone();
        prop_assume!(name != "cnp");
        bytes[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        Target::fix_icrc(peer(), &mut bytes);
        let e = t.feed(peer(), &bytes);
        prop_assert!(e.dropped);
        prop_assert_eq!(t.dev.counters().unknown_qp, 1);
    }

    /// RC RDMA WRITE ONLY at the expected PSN with any R_Key, VA and
    /// lengths (IBA 9.7.5.1.1 length, 9.7.5.1.6 / C9-88 R_Key): a payload
    /// over the MTU or other than the RETH length is an invalid request
    /// (NAK 0x61); length 0 needs no R_Key; a key of a region of this PD
    /// with remote write, VA range inside it, is executed and ACKed; every
    /// other key, right, PD or range is a remote access error (NAK 0x62).
    /// A NAKed request writes nothing and takes the QP to the error state.
    #[test]
    fn rc_write_rkey_va_length(k in key_for(R_WRITE), v in va_for(R_WRITE), dma_len in 0..400u32, extra in prop_oneof![4 => Just(0i32), 1 => -3i32..3]) {
        let mut t = Target::new();
        let (rkey, va) = (k.resolve(&t), v.resolve_for(&t, dma_len as u64));
        let plen = (dma_len as i32 + extra).max(0) as usize;
        let payload: Vec<u8> = (0..plen).map(|i| (i * 7 + 1) as u8).collect();
        let mut p = PacketRepr::new(bth(0x0a, t.rc, RQ_PSN), &payload);
        p.reth = Some(RethRepr { va, rkey: RKey(rkey), dma_len });
        let e = t.feed(peer(), &Target::encode(peer(), &p));
        let (op, psn, syn) = single_response(&e);
        prop_assert_eq!(op, 0x11);
        prop_assert_eq!(psn, Psn::new(RQ_PSN));
        let w = &t.regions[R_WRITE];
        let target = (rkey == w.key).then(|| w.offset_of(va, dma_len as u64)).flatten();
        let expect = if plen > MTU || plen != dma_len as usize {
            Syndrome::Nak(NakCode::InvalidRequest)
        } else if dma_len == 0 || target.is_some() {
            Syndrome::ACK
        } else {
            Syndrome::Nak(NakCode::RemoteAccessError)
        };
        prop_assert_eq!(syn, expect);
        if syn == Syndrome::ACK {
            if let Some(off) = target {
                prop_assert_eq!(&w.mem.snapshot()[off..off + plen], &payload[..]);
            }
            prop_assert_eq!(t.dev.qp_state(t.rc), Ok(QpState::Rts));
        } else {
            prop_assert!(e.changed.iter().all(|&n| n == 0));
            prop_assert_eq!(t.dev.qp_state(t.rc), Ok(QpState::Err));
            let ev = if expect == Syndrome::Nak(NakCode::InvalidRequest) {
                AsyncEvent::QpReqErr(t.rc)
            } else {
                AsyncEvent::QpAccessErr(t.rc)
            };
            prop_assert!(e.events.contains(&Event::Async(ev)));
        }
    }

    /// RC RDMA READ at the expected PSN: a DMA length over 2^31 is an invalid
    /// request; length 0 is one empty READ RESPONSE ONLY; a key with remote
    /// read, this PD and the range inside gives the region's bytes in
    /// MTU-sized responses (FIRST/MIDDLE/LAST, AETH on the first and last);
    /// anything else is NAK 0x62.
    #[test]
    fn rc_read_rkey_va_length(k in key_for(R_READ), v in va_for(R_READ), dma_len in prop_oneof![8 => 0..1100u32, 1 => any::<u32>()]) {
        let mut t = Target::new();
        let (rkey, va) = (k.resolve(&t), v.resolve_for(&t, dma_len as u64));
        let mut p = PacketRepr::new(bth(0x0c, t.rc, RQ_PSN), &[]);
        p.reth = Some(RethRepr { va, rkey: RKey(rkey), dma_len });
        let e = t.feed(peer(), &Target::encode(peer(), &p));
        let readable = t.regions.iter().find(|r| {
            r.key == rkey && r.pd1 && r.access.contains(softrdma_proto::Access::REMOTE_READ)
        });
        let source = readable.and_then(|r| r.offset_of(va, dma_len as u64).map(|o| (r, o)));
        if dma_len > 1 << 31 {
            prop_assert_eq!(single_response(&e).2, Syndrome::Nak(NakCode::InvalidRequest));
        } else if dma_len == 0 {
            prop_assert_eq!(e.sent.len(), 1);
            let r = e.sent[0].repr();
            prop_assert_eq!(r.bth.opcode.0, 0x10);
            prop_assert!(r.payload.is_empty());
        } else if let Some((region, off)) = source {
            let n = (dma_len as usize).div_ceil(MTU);
            prop_assert_eq!(e.sent.len(), n);
            let mut got = Vec::new();
            for (i, s) in e.sent.iter().enumerate() {
                let r = s.repr();
                let want = match (i == 0, i + 1 == n) {
                    (true, true) => 0x10,
                    (true, false) => 0x0d,
                    (false, true) => 0x0f,
                    (false, false) => 0x0e,
                };
                prop_assert_eq!(r.bth.opcode.0, want);
                prop_assert_eq!(r.bth.psn, Psn::new(RQ_PSN + i as u32));
                prop_assert_eq!(r.aeth.is_some(), i == 0 || i + 1 == n);
                got.extend_from_slice(r.payload);
            }
            prop_assert_eq!(&got[..], &region.mem.snapshot()[off..off + dma_len as usize]);
        } else {
            prop_assert_eq!(single_response(&e).2, Syndrome::Nak(NakCode::RemoteAccessError));
            prop_assert_eq!(t.dev.qp_state(t.rc), Ok(QpState::Err));
        }
    }

    /// RC FETCH_ADD / COMPARE_SWAP at the expected PSN: a VA not 8-byte
    /// aligned is an invalid request; a key with remote atomic, this PD and
    /// the 8 bytes inside executes once and returns the original value in an
    /// ATOMIC ACKNOWLEDGE; anything else is NAK 0x62 and changes nothing.
    #[test]
    fn rc_atomic_rkey_va(k in key_for(R_ATOMIC), v in va_for(R_ATOMIC), cmp_swap in any::<bool>(), operand in any::<u64>()) {
        let mut t = Target::new();
        let (rkey, va) = (k.resolve(&t), v.resolve_for(&t, 8));
        let op = if cmp_swap { 0x13 } else { 0x14 };
        let mut p = PacketRepr::new(bth(op, t.rc, RQ_PSN), &[]);
        let a = &t.regions[R_ATOMIC];
        let target = (rkey == a.key).then(|| a.offset_of(va, 8)).flatten();
        let before = a.mem.snapshot();
        let orig = target.map(|o| u64::from_ne_bytes(before[o..o + 8].try_into().unwrap()));
        p.atomic_eth = Some(AtomicEthRepr {
            va,
            rkey: RKey(rkey),
            swap_add: operand,
            compare: orig.unwrap_or(0),
        });
        let e = t.feed(peer(), &Target::encode(peer(), &p));
        if va % 8 != 0 {
            prop_assert_eq!(single_response(&e).2, Syndrome::Nak(NakCode::InvalidRequest));
        } else if let (Some(off), Some(orig)) = (target, orig) {
            prop_assert_eq!(e.sent.len(), 1);
            let r = e.sent[0].repr();
            prop_assert_eq!(r.bth.opcode.0, 0x12);
            prop_assert_eq!(r.atomic_ack, Some(orig));
            let new = if cmp_swap { operand } else { orig.wrapping_add(operand) };
            let now = t.regions[R_ATOMIC].mem.snapshot();
            prop_assert_eq!(u64::from_ne_bytes(now[off..off + 8].try_into().unwrap()), new);
        } else {
            prop_assert_eq!(single_response(&e).2, Syndrome::Nak(NakCode::RemoteAccessError));
        }
        if va % 8 != 0 || target.is_none() {
            prop_assert!(e.changed.iter().all(|&n| n == 0));
        }
    }

    /// RC PSN check (IBA 9.7.5.1.2/3): the expected PSN executes; a later one
    /// (up to 2^23 ahead) is answered by one NAK PSN sequence error carrying
    /// the expected PSN, then silence, and nothing executes; an earlier one
    /// is a duplicate, acknowledged again with the last PSN executed and not
    /// executed again.
    #[test]
    fn rc_psn_check(ahead in prop_oneof![Just(0i64), 1i64..0x80_0000, -0x80_0000i64..0]) {
        let mut t = Target::new();
        let w_key = t.regions[R_WRITE].key;
        let w_va = t.regions[R_WRITE].va;
        let rc = t.rc;
        let write = |psn: u32, fill: u8| {
            let payload = [fill; 32];
            let mut p = PacketRepr::new(bth(0x0a, rc, psn), &payload);
            p.reth = Some(RethRepr { va: w_va, rkey: RKey(w_key), dma_len: 32 });
            Target::encode(peer(), &p)
        };
        let psn = Psn::new(RQ_PSN).add(ahead as u32).value();
        let e = t.feed(peer(), &write(psn, 0xaa));
        let (_, got_psn, syn) = single_response(&e);
        let written = t.regions[R_WRITE].mem.snapshot()[0] == 0xaa;
        if ahead == 0 {
            prop_assert_eq!((got_psn, syn), (Psn::new(RQ_PSN), Syndrome::ACK));
            prop_assert!(written);
        } else if ahead > 0 {
            prop_assert_eq!(
                (got_psn, syn),
                (Psn::new(RQ_PSN), Syndrome::Nak(NakCode::PsnSequenceError))
            );
            prop_assert!(!written);
            // Only one NAK per gap.
            let e = t.feed(peer(), &write(psn, 0xbb));
            prop_assert!(e.sent.is_empty());
            // The expected PSN still executes.
            let e = t.feed(peer(), &write(RQ_PSN, 0xcc));
            prop_assert_eq!(single_response(&e).2, Syndrome::ACK);
        } else {
            prop_assert_eq!(
                (got_psn, syn),
                (Psn::new(RQ_PSN).sub(1), Syndrome::ACK)
            );
            prop_assert!(!written);
        }
    }

    /// RC opcode sequence (IBA 9.8.3.1 / C9-79): after nothing, a SEND
    /// FIRST or a WRITE FIRST, the next packet at the expected PSN must
    /// start a new message or continue that one with the same operation;
    /// anything else is NAK invalid request and the QP goes to the error
    /// state.
    #[test]
    fn rc_opcode_sequence(first in 0..3usize, next in 0..8usize) {
        let mut t = Target::new();
        let w = (t.regions[R_WRITE].va, t.regions[R_WRITE].key);
        let rc = t.rc;
        let data = [3u8; MTU];
        let mut psn = RQ_PSN;
        let started = match first {
            1 => Some(0x00),
            2 => Some(0x06),
            _ => None,
        };
        if let Some(op) = started {
            let mut p = PacketRepr::new(bth(op, rc, psn), &data);
            if op == 0x06 {
                p.reth = Some(RethRepr { va: w.0, rkey: RKey(w.1), dma_len: 2 * MTU as u32 });
            }
            let e = t.feed(peer(), &Target::encode(peer(), &p));
            prop_assert!(e.sent.iter().all(|s| s.repr().aeth.map(|a| a.syndrome) == Some(Syndrome::ACK)));
            psn += 1;
        }
        // SEND MIDDLE, SEND LAST, WRITE MIDDLE, WRITE LAST, SEND ONLY,
        // WRITE ONLY, READ, FETCH_ADD.
        let ops = [0x01u8, 0x02, 0x07, 0x08, 0x04, 0x0a, 0x0c, 0x14];
        let op = ops[next];
        let payload: &[u8] = match op {
            0x01 | 0x07 | 0x02 | 0x08 => &data,
            0x04 | 0x0a => &data[..16],
            _ => &[],
        };
        let mut p = PacketRepr::new(bth(op, rc, psn), payload);
        match op {
            0x0a => p.reth = Some(RethRepr { va: w.0, rkey: RKey(w.1), dma_len: 16 }),
            0x0c => p.reth = Some(RethRepr { va: w.0, rkey: RKey(w.1), dma_len: 16 }),
            0x14 => {
                let a = &t.regions[R_ATOMIC];
                p.atomic_eth = Some(AtomicEthRepr { va: a.va, rkey: RKey(a.key), swap_add: 1, compare: 0 });
            }
            _ => {}
        }
        let e = t.feed(peer(), &Target::encode(peer(), &p));
        let continues = matches!(op, 0x01 | 0x02 | 0x07 | 0x08);
        let valid = match started {
            None => !continues,
            Some(0x00) => matches!(op, 0x01 | 0x02),
            _ => matches!(op, 0x07 | 0x08),
        };
        let naks: Vec<Syndrome> = e
            .sent
            .iter()
            .filter_map(|s| s.repr().aeth.map(|a| a.syndrome))
            .filter(|s| matches!(s, Syndrome::Nak(_)))
            .collect();
        if valid {
            prop_assert!(naks.is_empty(), "{naks:?}");
            prop_assert_eq!(t.dev.qp_state(rc), Ok(QpState::Rts));
        } else {
            prop_assert_eq!(naks, vec![Syndrome::Nak(NakCode::InvalidRequest)]);
            prop_assert_eq!(t.dev.qp_state(rc), Ok(QpState::Err));
        }
    }

    /// UC: a WRITE with a bad R_Key or range is dropped silently (no NAK on
    /// UC) and the QP keeps working; the next message is delivered.
    #[test]
    fn uc_bad_write_is_silent(k in key_for(R_WRITE), v in va_for(R_WRITE)) {
        let mut t = Target::new();
        let (rkey, va) = (k.resolve(&t), v.resolve_for(&t, 16));
        let w = &t.regions[R_WRITE];
        prop_assume!(!(rkey == w.key && w.offset_of(va, 16).is_some()));
        let mut p = PacketRepr::new(bth(0x2a, t.uc, RQ_PSN), &[5; 16]);
        p.reth = Some(RethRepr { va, rkey: RKey(rkey), dma_len: 16 });
        let e = t.feed(peer(), &Target::encode(peer(), &p));
        prop_assert!(e.sent.is_empty());
        prop_assert!(e.changed.iter().all(|&n| n == 0));
        let e = t.feed(peer(), &Target::encode(peer(), &PacketRepr::new(bth(0x24, t.uc, RQ_PSN + 1), &[6; 16])));
        prop_assert_eq!(e.completions.len(), 1);
        prop_assert_eq!(e.completions[0].status, WcStatus::Success);
        prop_assert_eq!(e.completions[0].byte_len, 16);
    }
}

/// ACKs with PSNs around what the device sent (a WRITE at SQ_PSN, a READ
/// at +1 and +2, a FETCH_ADD at +3): one before its oldest outstanding
/// request is a duplicate and completes nothing; one at the last PSN it
/// sent acknowledges the WRITE, but never a READ or atomic, which need
/// their responses: the READ goes out again. One after the last PSN sent
/// is ignored: no responder acknowledges a packet it never received, so it
/// is forged or stray, and it must not complete requests (rxe's
/// check_psn completes a fully sent SEND/WRITE for any later PSN in half
/// the PSN space, which lets an injected ACK lose data).
#[test]
fn acks_for_unsent_psns() {
    for (psn, completes) in [
        (SQ_PSN - 1, false),
        (Psn::new(SQ_PSN).sub(0x40_0000).value(), false),
        (SQ_PSN + 3, true),
        (SQ_PSN + 4, false),
        (SQ_PSN + 10, false),
        (SQ_PSN + 0x40_0000, false),
    ] {
        let mut t = Target::new();
        let mut p = PacketRepr::new(bth(0x11, t.rc, psn), &[]);
        p.aeth = Some(AethRepr {
            syndrome: Syndrome::ACK,
            msn: softrdma_wire::Msn::new(9),
        });
        let e = t.feed(peer(), &Target::encode(peer(), &p));
        let ids: Vec<u64> = e.completions.iter().map(|w| w.wr_id).collect();
        if completes {
            assert_eq!(ids, [1], "PSN {psn:#x}: the WRITE only");
            assert_eq!(e.completions[0].status, WcStatus::Success);
            // Go-back-N from the READ: the READ and the FETCH_ADD again.
            let ops: Vec<u8> = e.sent.iter().map(|s| s.repr().bth.opcode.0).collect();
            assert_eq!(ops, [0x0c, 0x14], "PSN {psn:#x}");
        } else {
            assert!(ids.is_empty(), "PSN {psn:#x}");
            assert!(e.sent.is_empty(), "PSN {psn:#x}");
        }
    }
}
