//! The `softrdma dump` output of every capture in `tests/data` (and
//! `tests/data/formats`) is locked in `tests/snapshots/<name>.snap`
//! (insta; `/` in a capture's path is `__` in its name).
//!
//! After an intended change of the output, review the new output with
//! `cargo insta test -p softrdma-cli --test snapshots --review`, or accept
//! it all with
//!
//! ```text
//! INSTA_UPDATE=always cargo test -p softrdma-cli --test snapshots
//! ```
//!
//! and read the diff (`git diff crates/cli/tests/snapshots`) before
//! committing.

mod common;

use softrdma_cli::dump::{dump_bytes, Options};
use std::path::Path;

fn snapshot_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots")
}

#[test]
fn dump_output_matches_the_snapshots() {
    let captures = common::captures();
    assert!(captures.len() >= 49, "{} captures", captures.len());
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(snapshot_dir());
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    settings.bind(|| {
        for c in &captures {
            let bytes = std::fs::read(common::data_dir().join(c)).unwrap();
            let (out, res) = dump_bytes(&bytes, &Options::default());
            res.unwrap_or_else(|e| panic!("{c}: {e}"));
            insta::assert_snapshot!(c.replace('/', "__"), out);
        }
    });
    // No snapshot without its capture.
    for e in std::fs::read_dir(snapshot_dir()).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        let capture = name.trim_end_matches(".snap").replace("__", "/");
        assert!(
            captures.contains(&capture),
            "stale snapshot {name}: no capture {capture}"
        );
    }
}
