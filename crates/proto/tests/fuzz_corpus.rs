//! Replays the committed `core` fuzz corpus (`fuzz/corpus/core/`) through
//! the fuzz target's own checks, so every CI run re-tests the inputs the
//! fuzzer found interesting, on stable Rust.
//!
//! `write_core_seeds` (ignored) writes the seed inputs the corpus started
//! from: `SEED_DIR=/tmp/seeds cargo test -p softrdma-proto --test
//! fuzz_corpus write_core_seeds -- --ignored` (see fuzz/README.md).

#[path = "common/fuzz_core.rs"]
#[allow(dead_code)]
mod fuzz_core;

#[test]
fn replay_core_corpus() {
    softrdma_testkit::replay_corpus("core", 50, fuzz_core::check);
}

/// One fuzz record: the two rewrite bytes, little-endian length, bytes.
fn record(out: &mut Vec<u8>, h: u8, k: u8, bytes: &[u8]) {
    out.push(h);
    out.push(k);
    out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
    out.extend_from_slice(bytes);
}

#[test]
#[ignore = "writes seed files; run by hand (see the module documentation)"]
fn write_core_seeds() {
    let dir = std::env::var("SEED_DIR").expect("SEED_DIR");
    std::fs::create_dir_all(&dir).unwrap();
    let t = fuzz_core::Target::new();
    let seeds = fuzz_core::valid_packets(&t);
    let mut files: Vec<Vec<u8>> = Vec::new();
    // Each packet alone: as built, with the ICRC recomputed after the
    // rewrites, and with the QP and PSN rewritten to RC / UC.
    // With the key of each region, rebased on it.
    for (_, p) in &seeds {
        for (h, k) in [(0x00, 0), (0x04 | 0x40 | 0x10, 0), (0x04 | 0x40 | 0x20, 0)] {
            let mut f = Vec::new();
            record(&mut f, h, k, p);
            files.push(f);
        }
        let has_key = matches!(p[0], 0x0a | 0x0b | 0x06 | 0x0c | 0x13 | 0x14 | 0x17 | 0x2a);
        if has_key {
            // Rebased 8 bytes after each region's start, and ending at,
            // one byte before and one byte after each region's end.
            let info = softrdma_wire::Opcode(p[0]).info().unwrap();
            for (off, from_end) in [(8i16, false), (0, true), (-1, true), (1, true)] {
                let mut p = p.clone();
                for which in [
                    softrdma_wire::Headers::RETH,
                    softrdma_wire::Headers::ATOMIC_ETH,
                ] {
                    if let Some(o) = info.headers.offset_of(which) {
                        p[12 + o + 6..12 + o + 8].copy_from_slice(&off.to_be_bytes());
                    }
                }
                for region in 1..=5u8 {
                    let k = region | 8 | if from_end { 0x10 } else { 0 };
                    let mut f = Vec::new();
                    record(&mut f, 0x04 | 0x40 | 0x10, k, &p);
                    files.push(f);
                }
            }
        }
    }
    // Whole multi-packet messages and a mixed run.
    let by = |n: &str| seeds.iter().find(|(m, _)| *m == n).unwrap().1.clone();
    for group in [
        &["rc_write_first", "rc_write_middle", "rc_write_last"][..],
        &["rc_send_first", "rc_send_middle", "rc_send_last_imm"],
        &["read_resp_first", "read_resp_last", "ack", "atomic_ack"],
        &[
            "rc_write_only",
            "rc_read",
            "rc_fetch_add",
            "rc_send_only",
            "nak_seq",
        ],
        &["rnr_nak", "uc_send_only", "ud_send_only", "cnp"],
    ] {
        let mut f = Vec::new();
        for n in group {
            record(&mut f, 0x04, 0, &by(n));
        }
        files.push(f);
    }
    for f in files {
        let name = format!("{dir}/seed-{:016x}", fnv(&f));
        std::fs::write(name, &f).unwrap();
    }
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}
