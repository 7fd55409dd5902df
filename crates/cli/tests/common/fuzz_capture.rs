// The body of the `capture` fuzz target (fuzz/fuzz_targets/capture.rs
// includes this file) and of the corpus replay test
// (crates/cli/tests/fuzz_corpus.rs).
//
// Properties, for any input bytes taken as a capture file:
// - neither the reader nor the whole dump panics;
// - frames come with increasing numbers and offsets inside the file, each
//   frame's data lies inside the file, and an error's offset is inside the
//   file too;
// - the dump's frame count is the number of frames the reader yields.

use softrdma_cli::dump::{dump_bytes, Options};
use softrdma_pcap::CaptureReader;

/// Runs every check on `data`; panics on a violated property.
pub fn check(data: &[u8]) {
    let len = data.len() as u64;
    let mut frames = 0u64;
    let mut failed = false;
    match CaptureReader::from_bytes(data) {
        Ok(mut r) => {
            let mut last_offset = None;
            loop {
                match r.next_frame() {
                    Ok(Some(f)) => {
                        frames += 1;
                        assert_eq!(f.number, frames);
                        assert!(f.offset < len);
                        assert!(last_offset.is_none_or(|o| f.offset > o));
                        last_offset = Some(f.offset);
                        assert!(f.data.len() as u64 <= len);
                    }
                    Ok(None) => break,
                    Err(e) => {
                        assert!(e.offset <= len, "{e}");
                        assert!(!e.to_string().is_empty());
                        failed = true;
                        break;
                    }
                }
            }
            assert!(r.offset() <= len);
        }
        Err(e) => {
            assert!(e.offset <= len, "{e}");
            failed = true;
        }
    }
    let (text, res) = dump_bytes(data, &Options::default());
    match res {
        Ok(stats) => {
            assert!(!failed, "the dump read a file the reader refused");
            assert_eq!(stats.frames, frames);
            assert!(text.contains(&format!("frames {frames}, ")));
        }
        Err(_) => assert!(failed, "the dump failed on a file the reader read"),
    }
}
