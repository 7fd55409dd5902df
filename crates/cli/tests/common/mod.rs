//! Shared by the CLI's integration tests: where the captures are, the
//! perf tests' names.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The eight `softrdma perf` tests.
pub const PERF_TESTS: [&str; 8] = [
    "write-bw",
    "write-lat",
    "read-bw",
    "read-lat",
    "send-bw",
    "send-lat",
    "atomic-bw",
    "atomic-lat",
];

/// `tests/data` at the repository root.
pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data")
}

/// Every capture the dump snapshots cover: the rig's `tests/data/*.pcap`
/// and the format variants in `tests/data/formats/`, as paths relative to
/// `tests/data`, sorted.
pub fn captures() -> Vec<String> {
    let mut out = Vec::new();
    for sub in ["", "formats"] {
        let dir = data_dir().join(sub);
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if name.ends_with(".pcap") || name.ends_with(".pcapng") {
                out.push(if sub.is_empty() {
                    name
                } else {
                    format!("{sub}/{name}")
                });
            }
        }
    }
    out.sort();
    out
}
