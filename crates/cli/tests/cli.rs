//! The `softrdma dump` binary end to end: a capture against its snapshot, damaged files
//! (message with the byte offset, exit status 1), usage errors.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

fn softrdma(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .args(args)
        .output()
        .expect("run softrdma")
}

fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("softrdma-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn dump_of_write_bw_capture_matches_its_snapshot() {
    let file = common::data_dir().join("write_bw_1027.pcap");
    let out = softrdma(&["dump", file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stderr.is_empty());
    let want = snapshot("write_bw_1027.pcap");
    assert_eq!(String::from_utf8(out.stdout).unwrap(), want);
}

#[test]
fn quiet_prints_only_the_totals() {
    let file = common::data_dir().join("rnr_nak.pcap");
    let out = softrdma(&["dump", "--quiet", file.to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 4, "{text}");
    assert!(text
        .lines()
        .last()
        .unwrap()
        .starts_with("frames 47, RoCE v2 30"));
}

#[test]
fn truncated_file_reports_the_offset_and_fails() {
    let bytes = std::fs::read(common::data_dir().join("rc_pingpong_64.pcap")).unwrap();
    // Cut inside frame 16's data; frames 14 and 15 (RoCE) are whole.
    let mut at = 24;
    for _ in 0..15 {
        let incl = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        at += 16 + incl;
    }
    let cut = at + 16 + 10;
    let p = temp_file("cut.pcap", &bytes[..cut]);
    let out = softrdma(&["dump", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(&format!(
            "at byte offset {at}: file truncated in packet record"
        )),
        "{err}"
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.lines().any(|l| l.trim_start().starts_with("15 ")),
        "{text}"
    );
    assert!(text.contains("frames 15, RoCE v2 2 "), "{text}");
}

#[test]
fn garbage_missing_and_usage_errors() {
    let p = temp_file("garbage.pcap", b"this is not a capture file at all");
    let out = softrdma(&["dump", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("at byte offset 0: not a pcap or pcapng file"),
        "{err}"
    );

    let out = softrdma(&["dump", "/nonexistent/x.pcap"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("/nonexistent/x.pcap"));

    let out = softrdma(&["dump"]);
    assert_eq!(out.status.code(), Some(2));
    let out = softrdma(&["--help"]);
    assert!(out.status.success());
    assert!(String::from_utf8(out.stdout).unwrap().contains("dump"));
}

#[test]
fn reads_standard_input() {
    let file = common::data_dir().join("formats/rc_pingpong_64.pcapng");
    let out = Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .args(["dump", "-"])
        .stdin(std::fs::File::open(file).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success());
    let want = snapshot("formats__rc_pingpong_64.pcapng");
    assert_eq!(String::from_utf8(out.stdout).unwrap(), want);
}

/// The dump locked in `tests/snapshots/<name>.snap` (after insta's header).
fn snapshot(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(format!("{name}.snap"));
    let text = std::fs::read_to_string(&path).unwrap();
    let body = text.splitn(3, "---\n").nth(2);
    body.unwrap_or_else(|| panic!("{}: no insta header", path.display()))
        .to_string()
}
