//! Fuzz target: RoceDatagram / IbPacket / PacketRepr parsing, the pretty
//! printer and the emit round trip. The checks live in
//! crates/wire/tests/common/fuzz_datagram.rs, shared with the corpus replay
//! test that runs in CI.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod checks {
    include!("../../crates/wire/tests/common/fuzz_datagram.rs");
}

fuzz_target!(|data: &[u8]| checks::check(data));
