//! Replays the committed `datagram` fuzz corpus (`fuzz/corpus/datagram/`)
//! through the fuzz target's own checks, so every CI run re-tests the inputs
//! the fuzzer found interesting, on stable Rust.

#[path = "common/fuzz_datagram.rs"]
mod fuzz_datagram;

#[test]
fn replay_datagram_corpus() {
    softrdma_testkit::replay_corpus("datagram", 50, fuzz_datagram::check);
}
