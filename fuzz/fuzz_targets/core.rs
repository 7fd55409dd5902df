//! Fuzz target: arbitrary datagrams into a Device with a connected RC, UC
//! and UD QP (the transport core's receive path, responder, completer and
//! memory checks). The harness and its invariants live in
//! crates/proto/tests/common/fuzz_core.rs, shared with the corpus replay
//! test that runs in CI and with crates/proto/tests/bad_input.rs.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
mod checks {
    include!("../../crates/proto/tests/common/fuzz_core.rs");
}

fuzz_target!(|data: &[u8]| checks::check(data));
