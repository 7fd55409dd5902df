//! The invariant CRC of RoCE v2 (IBA Annex A17.3.3).
//!
//! The ICRC is CRC-32 (the Ethernet polynomial, reflected, initial value and
//! final XOR all ones) over:
//!
//! 1. 8 bytes of 0xff, standing in for the LRH of native InfiniBand;
//! 2. the IP header with the fields routers may change set to all ones —
//!    IPv4: type of service, time to live, header checksum; IPv6: traffic
//!    class, flow label, hop limit;
//! 3. the UDP header with the checksum set to 0xffff;
//! 4. the BTH with byte 4 (FECN, BECN, reserved) set to 0xff;
//! 5. everything after the BTH up to the ICRC: extension headers, payload, pad.
//!
//! The result is stored after the pad, least significant byte first.
//!
//! The IPv4 *identification* and *flags* are covered. A receiver on a plain
//! UDP socket never sees them; [`solve_ipv4_id`] recovers an identification
//! that makes a packet check, for peers that do not send 0.
//!
//! # FLUSH as Linux rxe computes it
//!
//! rxe (Linux 6.2 and later, checked on Debian 13's 6.12) gives FLUSH
//! (opcode 0x1C) no payload offset in its opcode table, so its ICRC code
//! takes the "payload" to start at the BTH: after the masked headers it
//! feeds BTH, FETH and RETH a second time, unmasked (`rxe_icrc_generate` /
//! `rxe_icrc_check` with `payload_addr() == pkt->hdr`). Its receiver drops a
//! FLUSH with the IBA ICRC, silently. [`icrc_datagram`] therefore computes a
//! FLUSH's ICRC rxe's way (what softrdma sends); [`icrc_datagram_iba`] is the
//! annex's; a receiver accepts either ([`icrc_forms`]). Every other opcode
//! has one ICRC, the annex's. Measured against rxe in the rxe VM
//! (`tests/rxe-vm/interop.sh placement`, `rig.sh capture` with
//! `RIG_SUITE=trixie`).

use crate::bth;
use crate::ip::{IPV4_HEADER_LEN, IPV6_HEADER_LEN, UDP_HEADER_LEN};

/// A fresh CRC-32 hasher. `crc32fast::Hasher::new` detects the CPU's
/// features each time; cloning a prototype does it once per process.
fn hasher() -> crc32fast::Hasher {
    static PROTO: std::sync::OnceLock<crc32fast::Hasher> = std::sync::OnceLock::new();
    PROTO.get_or_init(crc32fast::Hasher::new).clone()
}

/// Running ICRC computation. Feed the parts in wire order. This is the
/// annex's ICRC; for a FLUSH as Linux rxe computes it, feed the transport
/// bytes a second time with [`Icrc::update`] (module documentation).
#[derive(Clone)]
pub struct Icrc(crc32fast::Hasher);

impl Default for Icrc {
    fn default() -> Self {
        Self::new()
    }
}

impl Icrc {
    /// Starts a computation: feeds the 8 bytes of 0xff.
    pub fn new() -> Self {
        let mut h = hasher();
        h.update(&[0xff; 8]);
        Icrc(h)
    }

    /// Feeds a 20-byte IPv4 header, masking TOS, TTL and header checksum.
    /// `hdr` must be exactly the header (no options).
    pub fn ipv4_header(&mut self, hdr: &[u8; IPV4_HEADER_LEN]) {
        let mut m = *hdr;
        mask_ipv4(&mut m);
        self.0.update(&m);
    }

    /// Feeds a 40-byte IPv6 header, masking traffic class, flow label and
    /// hop limit.
    pub fn ipv6_header(&mut self, hdr: &[u8; IPV6_HEADER_LEN]) {
        let mut m = *hdr;
        mask_ipv6(&mut m);
        self.0.update(&m);
    }

    /// Feeds the UDP header with its checksum masked.
    pub fn udp_header(&mut self, hdr: &[u8; UDP_HEADER_LEN]) {
        let mut m = *hdr;
        mask_udp(&mut m);
        self.0.update(&m);
    }

    /// Feeds the BTH with byte 4 masked, then any bytes after it.
    pub fn transport(&mut self, bytes: &[u8]) {
        let n = bytes.len().min(bth::HEADER_LEN);
        let mut b = [0u8; bth::HEADER_LEN];
        b[..n].copy_from_slice(&bytes[..n]);
        if n > bth::ICRC_MASKED_BYTE {
            b[bth::ICRC_MASKED_BYTE] = 0xff;
        }
        self.0.update(&b[..n]);
        self.0.update(&bytes[n..]);
    }

    /// Feeds unmasked bytes (extension headers, payload, pad).
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The ICRC value; store it with `to_le_bytes()`.
    pub fn finish(self) -> u32 {
        self.0.finalize()
    }
}

/// Sets the IPv4 fields routers may change (TOS, TTL, checksum) to ones.
fn mask_ipv4(h: &mut [u8; IPV4_HEADER_LEN]) {
    h[1] = 0xff;
    h[8] = 0xff;
    h[10] = 0xff;
    h[11] = 0xff;
}

/// Sets the IPv6 traffic class, flow label and hop limit to ones.
fn mask_ipv6(h: &mut [u8; IPV6_HEADER_LEN]) {
    h[0] |= 0x0f;
    h[1] = 0xff;
    h[2] = 0xff;
    h[3] = 0xff;
    h[7] = 0xff;
}

/// Sets the UDP checksum to ones.
fn mask_udp(h: &mut [u8; UDP_HEADER_LEN]) {
    h[6] = 0xff;
    h[7] = 0xff;
}

/// Longest masked prefix: 8 bytes of 0xff, IPv6, UDP, BTH.
const PREFIX_MAX: usize = 8 + IPV6_HEADER_LEN + UDP_HEADER_LEN + bth::HEADER_LEN;
/// Transport bytes after the BTH copied next to the prefix so that small
/// packets take a single CRC call.
const SMALL_TAIL: usize = 128;

/// BTH opcode of RC FLUSH, whose ICRC rxe computes its own way.
const RC_FLUSH: u8 = 0x1c;

/// True when rxe computes the ICRC of this transport packet (BTH through
/// pad) differently from the annex: FLUSH (see the module documentation).
pub fn rxe_covers_headers_twice(covered: &[u8]) -> bool {
    covered.first() == Some(&RC_FLUSH)
}

/// The ICRC of a datagram from its raw IP + UDP headers (`hdr`: 28 bytes
/// for IPv4, 48 for IPv6) and its transport bytes BTH through pad
/// (`covered`), as Linux rxe computes it: the annex's for every opcode but
/// FLUSH, whose transport bytes rxe feeds twice (module documentation).
pub(crate) fn icrc_datagram(hdr: &[u8], covered: &[u8]) -> u32 {
    if rxe_covers_headers_twice(covered) {
        icrc_datagram_with(hdr, covered, true)
    } else {
        icrc_datagram_with(hdr, covered, false)
    }
}

/// The ICRC of IBA annex A17.3.3 for every opcode, FLUSH included.
pub(crate) fn icrc_datagram_iba(hdr: &[u8], covered: &[u8]) -> u32 {
    icrc_datagram_with(hdr, covered, false)
}

/// The ICRCs a receiver accepts for a datagram, each with the number of
/// ICRC input bytes after the IPv4 identification field (for
/// [`solve_ipv4_id`]): rxe's (the one softrdma sends) first, then, for
/// FLUSH, the annex's. `hdr` and `covered` as for [`icrc_datagram`].
pub(crate) fn icrc_forms(hdr: &[u8], covered: &[u8]) -> impl Iterator<Item = (u32, usize)> {
    let ip_after_id = if hdr.len() == IPV6_HEADER_LEN + UDP_HEADER_LEN {
        // IPv6 has no identification; the count is never used for it.
        hdr.len()
    } else {
        hdr.len() - 6
    };
    let twice = rxe_covers_headers_twice(covered);
    let first = (
        icrc_datagram_with(hdr, covered, twice),
        ip_after_id + covered.len() * if twice { 2 } else { 1 },
    );
    let second = twice.then(|| {
        (
            icrc_datagram_with(hdr, covered, false),
            ip_after_id + covered.len(),
        )
    });
    std::iter::once(first).chain(second)
}

/// Same result as feeding [`Icrc`] part by part (then, with `twice`, the
/// transport bytes again unmasked), but the masked prefix (at most 68
/// bytes) is built once on the stack and the CRC runs in two calls, so
/// small packets do not pay for five short updates.
fn icrc_datagram_with(hdr: &[u8], covered: &[u8], twice: bool) -> u32 {
    let mut p = [0xffu8; PREFIX_MAX + SMALL_TAIL];
    let ip_len = if hdr.len() == IPV6_HEADER_LEN + UDP_HEADER_LEN {
        IPV6_HEADER_LEN
    } else {
        IPV4_HEADER_LEN
    };
    let hl = ip_len + UDP_HEADER_LEN;
    p[8..8 + hl].copy_from_slice(&hdr[..hl]);
    if ip_len == IPV6_HEADER_LEN {
        let mut a = [0u8; IPV6_HEADER_LEN];
        a.copy_from_slice(&p[8..8 + IPV6_HEADER_LEN]);
        mask_ipv6(&mut a);
        p[8..8 + IPV6_HEADER_LEN].copy_from_slice(&a);
    } else {
        let mut a = [0u8; IPV4_HEADER_LEN];
        a.copy_from_slice(&p[8..8 + IPV4_HEADER_LEN]);
        mask_ipv4(&mut a);
        p[8..8 + IPV4_HEADER_LEN].copy_from_slice(&a);
    }
    p[8 + ip_len + 6] = 0xff;
    p[8 + ip_len + 7] = 0xff;
    let n = covered.len().min(bth::HEADER_LEN);
    let at = 8 + hl;
    p[at..at + n].copy_from_slice(&covered[..n]);
    if n > bth::ICRC_MASKED_BYTE {
        p[at + bth::ICRC_MASKED_BYTE] = 0xff;
    }
    let mut h = hasher();
    let rest = &covered[n..];
    if rest.len() <= SMALL_TAIL {
        p[at + n..at + n + rest.len()].copy_from_slice(rest);
        h.update(&p[..at + n + rest.len()]);
    } else {
        h.update(&p[..at + n]);
        h.update(rest);
    }
    if twice {
        h.update(covered);
    }
    h.finalize()
}

// --- GF(2) helpers for the unknown-identification case ---------------------

/// Reflected CRC-32 polynomial.
const POLY: u32 = 0xedb8_8320;

/// a(x)·b(x) mod P(x), both in the reflected bit order of CRC-32.
fn mul_mod_p(a: u32, mut b: u32) -> u32 {
    // Without this the loop below never ends: it stops on a's last set bit.
    if a == 0 {
        return 0;
    }
    let mut m = 1u32 << 31;
    let mut p = 0u32;
    loop {
        if a & m != 0 {
            p ^= b;
            if a & (m - 1) == 0 {
                break;
            }
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    p
}

/// x^(8n) mod P: the operator that appends `n` zero bytes to a raw CRC state.
fn x8n_mod_p(mut n: usize) -> u32 {
    let mut result = 1u32 << 31; // x^0
    let mut sq = 1u32 << 23; // x^8
    while n != 0 {
        if n & 1 != 0 {
            result = mul_mod_p(sq, result);
        }
        sq = mul_mod_p(sq, sq);
        n >>= 1;
    }
    result
}

/// Raw (no init, no final XOR) CRC state of two bytes.
fn raw_crc_2(b: [u8; 2]) -> u32 {
    let mut c = 0u32;
    for byte in b {
        c ^= byte as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
        }
    }
    c
}

/// Finds the IPv4 identification that makes `computed_with_id0` (the ICRC
/// computed with identification 0) equal `stored`, for a datagram whose
/// identification field is followed by `bytes_after_id` bytes of ICRC input
/// (everything after IP header byte 5, through the pad).
///
/// The ICRC is affine in the identification bits, so this solves 32 linear
/// equations in 16 unknowns over GF(2). A solution exists for a genuine
/// packet; for a corrupted one only with probability 2^-16, so a receiver
/// that cannot see the IP header keeps a 16-bit check where it would
/// otherwise have none.
pub fn solve_ipv4_id(computed_with_id0: u32, stored: u32, bytes_after_id: usize) -> Option<u16> {
    let target = computed_with_id0 ^ stored;
    if target == 0 {
        return Some(0);
    }
    let shift = x8n_mod_p(bytes_after_id);
    // Column i: effect on the final CRC of identification bit i (bit 15 is
    // the MSB of the first byte on the wire).
    let mut rows: [(u32, u16); 16] = [(0, 0); 16];
    for (i, row) in rows.iter_mut().enumerate() {
        let id = 1u16 << i;
        *row = (mul_mod_p(raw_crc_2(id.to_be_bytes()), shift), id);
    }
    // Gaussian elimination over GF(2) on the 32-bit effects. On the
    // stack: this runs for every IPv4 packet whose ICRC fails at first,
    // damaged and forged ones included, and must not allocate.
    let mut basis_buf: [(u32, u16); 16] = [(0, 0); 16];
    let mut n = 0;
    for (mut v, mut id) in rows {
        for &(bv, bid) in &basis_buf[..n] {
            let pivot = 31 - bv.leading_zeros();
            if v >> pivot & 1 != 0 {
                v ^= bv;
                id ^= bid;
            }
        }
        if v != 0 {
            // Keep the basis reduced so each pivot bit appears once.
            let pivot = 31 - v.leading_zeros();
            for b in basis_buf[..n].iter_mut() {
                if b.0 >> pivot & 1 != 0 {
                    b.0 ^= v;
                    b.1 ^= id;
                }
            }
            basis_buf[n] = (v, id);
            n += 1;
        }
    }
    let (mut t, mut id) = (target, 0u16);
    for &(bv, bid) in &basis_buf[..n] {
        let pivot = 31 - bv.leading_zeros();
        if t >> pivot & 1 != 0 {
            t ^= bv;
            id ^= bid;
        }
    }
    (t == 0).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_check_value() {
        // The CRC-32 catalogue check value over "123456789".
        let mut h = crc32fast::Hasher::new();
        h.update(b"123456789");
        assert_eq!(h.finalize(), 0xcbf4_3926);
    }

    #[test]
    fn one_shot_prefix_equals_part_by_part() {
        // Transport lengths up to 200 bytes: both sides of SMALL_TAIL.
        let mut data = [0u8; 48 + 200];
        for (i, b) in data.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37).wrapping_add(11);
        }
        for v6 in [false, true] {
            let hl = if v6 { 48 } else { 28 };
            let (hdr, rest) = data.split_at(hl);
            // Every transport length: around the BTH and its masked byte,
            // and around the one-call limit.
            for n in 0..rest.len() {
                let covered = &rest[..n];
                let mut c = Icrc::new();
                if v6 {
                    c.ipv6_header(hdr[..40].try_into().unwrap());
                    c.udp_header(hdr[40..48].try_into().unwrap());
                } else {
                    c.ipv4_header(hdr[..20].try_into().unwrap());
                    c.udp_header(hdr[20..28].try_into().unwrap());
                }
                c.transport(covered);
                assert_eq!(icrc_datagram(hdr, covered), c.finish(), "v6 {v6} n {n}");
            }
        }
    }

    #[test]
    fn multiplying_by_zero_terminates() {
        assert_eq!(mul_mod_p(0, 0x1234_5678), 0);
        assert_eq!(mul_mod_p(0x1234_5678, 0), 0);
        // x^0 (bit 31 in reflected order) is the identity.
        assert_eq!(mul_mod_p(1 << 31, 0xdead_beef), 0xdead_beef);
    }

    #[test]
    fn zero_shift_matches_direct_computation() {
        for n in [0usize, 1, 7, 100, 4096] {
            // Two bytes then n zeros, raw CRC, equals raw_crc_2 shifted.
            let mut c = raw_crc_2([0x12, 0x34]);
            let direct = {
                for _ in 0..n * 8 {
                    c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
                }
                c
            };
            assert_eq!(mul_mod_p(raw_crc_2([0x12, 0x34]), x8n_mod_p(n)), direct);
        }
    }

    #[test]
    fn solves_identification() {
        let mut msg = vec![0u8; 300];
        for (i, b) in msg.iter_mut().enumerate() {
            *b = (i * 7) as u8;
        }
        let id_at = 12;
        let crc = |m: &[u8]| {
            let mut h = crc32fast::Hasher::new();
            h.update(m);
            h.finalize()
        };
        msg[id_at] = 0;
        msg[id_at + 1] = 0;
        let zero = crc(&msg);
        for id in [1u16, 0x8000, 0xbeef, 0xffff, 0x1234] {
            msg[id_at..id_at + 2].copy_from_slice(&id.to_be_bytes());
            let stored = crc(&msg);
            assert_eq!(solve_ipv4_id(zero, stored, msg.len() - id_at - 2), Some(id));
        }
        // A corrupted payload: the solver finds an identification exactly
        // when brute force over all 65536 does.
        let stored = crc(&msg); // sender's ICRC, identification 0x1234
        let mut rx = msg.clone();
        rx[200] ^= 1;
        rx[id_at] = 0;
        rx[id_at + 1] = 0;
        let zero_rx = crc(&rx);
        let solved = solve_ipv4_id(zero_rx, stored, rx.len() - id_at - 2);
        let brute = (0..=u16::MAX).find(|id| {
            rx[id_at..id_at + 2].copy_from_slice(&id.to_be_bytes());
            crc(&rx) == stored
        });
        assert_eq!(solved, brute);
        assert_eq!(solved, None);
    }
}
