// The body of the `datagram` fuzz target (fuzz/fuzz_targets/datagram.rs
// includes this file) and of the corpus replay test
// (crates/wire/tests/fuzz_corpus.rs), so CI replays the committed corpus
// through exactly the fuzzed code without nightly.
//
// Properties, for any input bytes:
// - nothing panics: RoceDatagram / IbPacket checks, Repr parsing, the
//   pretty printer, ICRC computation;
// - a datagram that parses re-emits (DatagramRepr::emit) into a datagram
//   that parses to the same Reprs with a good ICRC, and emitting that again
//   gives the same bytes (emit . parse is a projection);
// - the same for the bytes taken as a bare transport packet
//   (BTH through ICRC, PacketRepr::parse_bytes / emit).

use softrdma_wire::{pretty, DatagramRepr, IbPacket, PacketRepr, RoceDatagram};

/// Runs every check on `data`; panics on a violated property.
pub fn check(data: &[u8]) {
    let line = pretty::datagram_line(data);
    assert!(!line.is_empty());

    if let Ok(d) = RoceDatagram::new_checked(data) {
        let dr = DatagramRepr::parse(&d);
        let ib = d.ib();
        let _ = d.icrc_ok();
        assert!(d.datagram().len() <= data.len());
        let p = PacketRepr::parse(&ib).expect("a checked datagram's packet parses");
        let mut out = vec![0u8; dr.header_len() + p.buffer_len()];
        let n = dr.emit(&p, &mut out).expect("parsed Reprs emit");
        assert_eq!(n, out.len());
        let d2 = RoceDatagram::new_checked(&out[..]).expect("emitted datagram parses");
        assert!(d2.icrc_ok(), "emitted ICRC");
        assert_eq!(DatagramRepr::parse(&d2), dr);
        let p2 = PacketRepr::parse(&d2.ib()).expect("emitted packet parses");
        assert_eq!(p2, p);
        let mut again = vec![0u8; out.len()];
        dr.emit(&p2, &mut again).expect("second emit");
        assert_eq!(again, out, "emit . parse is a projection");
        assert!(pretty::datagram_line(&out).ends_with("icrc=ok"));
    }

    if let Ok(ib) = IbPacket::new_checked(data) {
        let mut s = String::new();
        let _ = pretty::write_packet(&mut s, &ib);
        let p = PacketRepr::parse(&ib).expect("a checked packet parses");
        let mut out = vec![0u8; p.buffer_len()];
        p.emit(&mut out).expect("parsed Repr emits");
        assert_eq!(
            PacketRepr::parse_bytes(&out).expect("emitted packet parses"),
            p
        );
        assert_eq!(p.buffer_len(), data.len());
    }
}
