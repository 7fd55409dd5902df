//! Fuzz target: the CLI's pcap/pcapng reader and the whole `softrdma dump`
//! pipeline over arbitrary files. The checks live in
//! crates/cli/tests/common/fuzz_capture.rs, shared with the corpus replay
//! test that runs in CI.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod checks {
    include!("../../crates/cli/tests/common/fuzz_capture.rs");
}

fuzz_target!(|data: &[u8]| checks::check(data));
