//! Damaged captures, property-tested: real pcap and pcapng files with a few
//! bytes overwritten, cut short or both, through the same checks as the
//! `capture` fuzz target (no panic, consistent frames and offsets, the dump
//! and the reader agree on what is readable).

mod common;

#[path = "common/fuzz_capture.rs"]
mod fuzz_capture;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestRunner};

fn samples() -> Vec<Vec<u8>> {
    let d = common::data_dir();
    let read = |p: &str| std::fs::read(d.join(p)).unwrap();
    vec![
        read("rc_pingpong_64.pcap"),
        read("formats/rc_pingpong_64.pcapng"),
        read("formats/v6_rc_pingpong_64.ns.pcap"),
        read("formats/loopback_sll2.pcap")[..4000].to_vec(),
        read("formats/merged_eth_sll2.pcapng")[..6000].to_vec(),
    ]
}

#[test]
fn damaged_captures_never_panic_and_stay_consistent() {
    let samples = samples();
    let strat = (
        0..samples.len(),
        proptest::collection::vec((any::<Index>(), any::<u8>()), 0..6),
        proptest::option::of(any::<Index>()),
    );
    let mut runner = TestRunner::new(Config {
        cases: 3000,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&strat, |(which, edits, cut)| {
            let mut b = samples[which].clone();
            for (at, v) in edits {
                let i = at.index(b.len());
                b[i] = v;
            }
            if let Some(c) = cut {
                let n = c.index(b.len());
                b.truncate(n);
            }
            fuzz_capture::check(&b);
            Ok(())
        })
        .unwrap();
}
