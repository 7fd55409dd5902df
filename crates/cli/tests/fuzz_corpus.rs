//! Replays the committed `capture` fuzz corpus (`fuzz/corpus/capture/`)
//! through the fuzz target's own checks, on stable Rust.

#[path = "common/fuzz_capture.rs"]
mod fuzz_capture;

use std::path::Path;

#[test]
fn replay_capture_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/capture");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if !p.is_file() {
            continue;
        }
        let data = std::fs::read(&p).unwrap();
        let r = std::panic::catch_unwind(|| fuzz_capture::check(&data));
        assert!(r.is_ok(), "corpus file {} fails", p.display());
        n += 1;
    }
    assert!(n >= 20, "only {n} corpus files in {}", dir.display());
}
