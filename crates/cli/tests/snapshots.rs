//! The `softrdma dump` output of every capture in `tests/data` (and
//! `tests/data/formats`) is locked in `tests/snapshots/<name>.txt`.
//!
//! After an intended change of the output, regenerate them with
//!
//! ```text
//! UPDATE_SNAPSHOTS=1 cargo test -p softrdma-cli --test snapshots
//! ```
//!
//! and review the diff (`git diff crates/cli/tests/snapshots`) before
//! committing.

mod common;

use softrdma_cli::dump::{dump_bytes, Options};
use std::path::{Path, PathBuf};

fn snapshot_path(capture: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(format!("{}.txt", capture.replace('/', "__")))
}

#[test]
fn dump_output_matches_the_snapshots() {
    let update = std::env::var_os("UPDATE_SNAPSHOTS").is_some_and(|v| v != "0");
    let captures = common::captures();
    assert!(captures.len() >= 49, "{} captures", captures.len());
    let mut failures = Vec::new();
    for c in &captures {
        let bytes = std::fs::read(common::data_dir().join(c)).unwrap();
        let (out, res) = dump_bytes(&bytes, &Options::default());
        res.unwrap_or_else(|e| panic!("{c}: {e}"));
        let path = snapshot_path(c);
        if update {
            std::fs::write(&path, &out).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_SNAPSHOTS=1 creates it)", path.display()));
        if out != want {
            let (i, (got, exp)) = out
                .lines()
                .chain(std::iter::repeat("<end>"))
                .zip(want.lines().chain(std::iter::repeat("<end>")))
                .enumerate()
                .find(|(_, (a, b))| a != b)
                .unwrap();
            failures.push(format!(
                "{c}: line {}:\n  got:  {got}\n  want: {exp}",
                i + 1
            ));
        }
    }
    // No snapshot without its capture.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots");
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let capture = name.trim_end_matches(".txt").replace("__", "/");
        if !captures.contains(&capture) {
            failures.push(format!("stale snapshot {name}: no capture {capture}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n(if the change is intended: UPDATE_SNAPSHOTS=1 cargo test -p softrdma-cli --test snapshots)",
        failures.join("\n")
    );
}
