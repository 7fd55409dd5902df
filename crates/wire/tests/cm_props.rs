//! Property tests of the MAD header and the CM messages.
//!
//! - For each of the nine messages, random bytes with the reserved bits
//!   cleared (the masks below are written from the IBA tables, not taken
//!   from the crate) parse, and emit(parse(x)) == x byte for byte: parse
//!   loses nothing the tables name, emit invents nothing.
//! - For random bytes with reserved bits set too, emit(parse(x)) parses to
//!   the same Repr and differs from x only inside the reserved masks.
//! - Any byte string, of any length, given to every parser, view and the
//!   pretty printer never panics.
//! - A Repr with a number too wide for its field is refused by emit.

use proptest::prelude::*;
use softrdma_wire::cm::{
    attr, CmMadRepr, CmMsg, CmaHdrRepr, MsgRef, RejReason, RejRepr, Req, ReqRepr,
};
use softrdma_wire::mad::{Mad, MadHeaderRepr, MAD_HEADER_LEN, MAD_LEN};
use softrdma_wire::{pretty, Error};

const H: usize = MAD_HEADER_LEN;

/// Reserved bits per message, as (offset in the MAD, mask).
fn reserved(attr_id: u16) -> Vec<(usize, u8)> {
    // MAD header bytes 18-19 are reserved in every MAD.
    let mut r = vec![(18, 0xff), (19, 0xff)];
    let d = |off: usize, mask: u8| (H + off, mask);
    match attr_id {
        attr::REQ => {
            r.push(d(4, 0xff));
            for o in 24..28 {
                r.push(d(o, 0xff));
            }
            // Per path (primary at 52, alternate at 96): the low nibble of
            // flow-label byte 3 and the top two bits of the rate byte, the
            // low three bits after SL/subnet-local, and the bits after the
            // ACK timeout (all three on the primary; the alternate keeps
            // bit 2 for SAP Supported).
            for base in [52usize, 96] {
                r.push(d(base + 38, 0x0f));
                r.push(d(base + 39, 0xc0));
                r.push(d(base + 42, 0x07));
            }
            r.push(d(52 + 43, 0x07));
            r.push(d(96 + 43, 0x03));
        }
        attr::MRA => {
            r.push(d(8, 0x3f));
            r.push(d(9, 0x07));
        }
        attr::REJ => {
            r.push(d(8, 0x3f));
            r.push(d(9, 0x01));
        }
        attr::REP => r.push(d(27, 0x0f)),
        attr::DREQ => r.push(d(11, 0xff)),
        attr::SIDR_REQ => {
            r.push(d(6, 0xff));
            r.push(d(7, 0xff));
        }
        _ => {}
    }
    r
}

const ATTRS: [u16; 9] = attr::CONNECTION;

/// A MAD of the CM class with the attribute and random everything else.
fn cm_mad(attr_id: u16, mut bytes: Vec<u8>) -> Vec<u8> {
    bytes[1] = 0x07;
    bytes[16..18].copy_from_slice(&attr_id.to_be_bytes());
    bytes
}

fn mad_bytes() -> impl Strategy<Value = (u16, Vec<u8>)> {
    (
        proptest::sample::select(&ATTRS[..]),
        proptest::collection::vec(any::<u8>(), MAD_LEN),
    )
        .prop_map(|(a, b)| (a, cm_mad(a, b)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn canonical_messages_round_trip_byte_for_byte((attr_id, mut mad) in mad_bytes()) {
        for (at, mask) in reserved(attr_id) {
            mad[at] &= !mask;
        }
        let r = CmMadRepr::parse(&mad).expect("every CM attribute parses");
        prop_assert_eq!(r.msg.attr_id(), attr_id);
        let out = r.to_bytes().expect("a parsed Repr emits");
        prop_assert_eq!(&out[..], &mad[..]);
    }

    #[test]
    fn reserved_bits_are_the_only_loss((attr_id, mad) in mad_bytes()) {
        let r = CmMadRepr::parse(&mad).unwrap();
        let out = r.to_bytes().unwrap();
        prop_assert_eq!(CmMadRepr::parse(&out).unwrap(), r);
        let masks = reserved(attr_id);
        for i in 0..MAD_LEN {
            let m = masks.iter().filter(|(at, _)| *at == i).fold(0u8, |a, (_, m)| a | m);
            prop_assert_eq!(out[i] & !m, mad[i] & !m, "byte {} outside the reserved bits", i);
            prop_assert_eq!(out[i] & m, 0, "reserved bits of byte {} are written as zero", i);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400),
                                   attr_id in 0u16..0x30) {
        let _ = pretty::mad_line(&bytes);
        let _ = CmMadRepr::parse(&bytes);
        let _ = CmMsg::parse(attr_id, &bytes);
        let _ = CmaHdrRepr::parse_private(&bytes);
        if let Ok(m) = Mad::new_checked(&bytes[..]) {
            let h = MadHeaderRepr::parse(&m).unwrap();
            let _ = (m.data().len(), h.tid);
        }
        let mut b = bytes.clone();
        if b.len() >= MAD_LEN {
            b[1] = 0x07;
            b[16..18].copy_from_slice(&attr_id.to_be_bytes());
            let _ = pretty::mad_line(&b);
            if let Ok(r) = CmMadRepr::parse(&b) {
                let out = r.to_bytes().unwrap();
                prop_assert_eq!(CmMadRepr::parse(&out).unwrap(), r);
            }
        }
    }
}

#[test]
fn emit_refuses_values_wider_than_their_field() {
    let mut mad = [0u8; MAD_LEN];
    mad[1] = 0x07;
    mad[17] = 0x10;
    let base = match CmMadRepr::parse(&mad).unwrap().msg {
        CmMsg::Req(r) => r,
        _ => unreachable!(),
    };
    let mut out = [0u8; 232];
    let emit = |r: &ReqRepr| {
        let mut scratch = out;
        r.emit(&mut Req::new_unchecked(&mut scratch[..]))
    };
    assert_eq!(emit(&base), Ok(()));
    for bad in [
        ReqRepr {
            retry_count: 8,
            ..base
        },
        ReqRepr {
            max_cm_retries: 16,
            ..base
        },
        ReqRepr {
            local_cm_response_timeout: 32,
            ..base
        },
        ReqRepr {
            path_mtu: 16,
            ..base
        },
        ReqRepr {
            vendor_id: 1 << 24,
            ..base
        },
        ReqRepr {
            private_data: &[0u8; 93],
            ..base
        },
    ] {
        assert_eq!(emit(&bad), Err(Error::BadRepr), "{bad:?}");
    }
    let mut p = base;
    p.primary.flow_label = 1 << 20;
    assert_eq!(emit(&p), Err(Error::BadRepr));
    assert_eq!(
        base.emit(&mut Req::new_unchecked(&mut out[..100])),
        Err(Error::Truncated)
    );
    let rej = RejRepr {
        local_comm_id: 1,
        remote_comm_id: 2,
        message_rejected: MsgRef(4),
        reject_info_len: 0,
        reason: RejReason::CONSUMER_DEFINED,
        ari: &[],
        private_data: &[],
    };
    assert_eq!(
        CmMadRepr::new(0, 0, CmMsg::Rej(rej)).to_bytes(),
        Err(Error::BadRepr)
    );
    let short = RejRepr {
        message_rejected: MsgRef::REQ,
        private_data: &[1, 2, 3],
        ari: &[9; 8],
        reject_info_len: 8,
        ..rej
    };
    let bytes = CmMadRepr::new(0, 0, CmMsg::Rej(short)).to_bytes().unwrap();
    let back = match CmMadRepr::parse(&bytes).unwrap().msg {
        CmMsg::Rej(r) => r,
        _ => unreachable!(),
    };
    assert_eq!(&back.private_data[..4], &[1, 2, 3, 0]);
    assert_eq!(back.private_data.len(), 148);
    assert_eq!(back.ari_bytes(), &[9; 8]);
}

#[test]
fn non_cm_classes_and_unknown_attributes_do_not_parse() {
    let mut mad = [0u8; MAD_LEN];
    mad[1] = 0x04;
    mad[17] = 0x10;
    assert_eq!(CmMadRepr::parse(&mad), Err(Error::Malformed));
    mad[1] = 0x07;
    mad[17] = 0x19; // LAP
    assert_eq!(CmMadRepr::parse(&mad), Err(Error::Malformed));
    mad[17] = 0x10;
    assert!(CmMadRepr::parse(&mad).is_ok());
    assert_eq!(CmMadRepr::parse(&mad[..255]), Err(Error::Truncated));
}
