//! Replays the committed `capture` fuzz corpus (`fuzz/corpus/capture/`)
//! through the fuzz target's own checks, on stable Rust.

#[path = "common/fuzz_capture.rs"]
mod fuzz_capture;

#[test]
fn replay_capture_corpus() {
    softrdma_testkit::replay_corpus("capture", 20, fuzz_capture::check);
}
