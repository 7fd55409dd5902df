//! Replays the committed `datagram` fuzz corpus (`fuzz/corpus/datagram/`)
//! through the fuzz target's own checks, so every CI run re-tests the inputs
//! the fuzzer found interesting, on stable Rust.

#[path = "common/fuzz_datagram.rs"]
mod fuzz_datagram;

use std::path::Path;

#[test]
fn replay_datagram_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/datagram");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if !p.is_file() {
            continue;
        }
        let data = std::fs::read(&p).unwrap();
        let r = std::panic::catch_unwind(|| fuzz_datagram::check(&data));
        assert!(r.is_ok(), "corpus file {} fails", p.display());
        n += 1;
    }
    assert!(n >= 50, "only {n} corpus files in {}", dir.display());
}
