//! Random workloads through the harness, a few seeds each.

use softrdma_sim::harness::{run, Config, Report};
use softrdma_sim::LinkConfig;

fn check(cfg: Config) -> Report {
    let r = run(&cfg);
    eprintln!(
        "seed {}: ops {} bytes {} completions {} failed {} lost {} vt {} ms\n  net {:?}\n  {:?}",
        r.seed,
        r.ops,
        r.bytes,
        r.completions,
        r.failed_pairs,
        r.unreliable_lost,
        r.virtual_ns / 1_000_000,
        r.net,
        r.counters.nonzero()
    );
    assert!(r.ok(), "{}", r.violations.join("\n"));
    r
}

#[test]
fn clean_link() {
    for seed in 0..5 {
        let r = check(Config::new(seed));
        // A clean link injects nothing (the run checks that too).
        assert_eq!(r.net.lost + r.net.duplicated + r.net.corrupted, 0);
    }
}

/// 5 % loss, 1 % duplication and reordering, 0.1 % corruption, jitter.
fn lossy() -> LinkConfig {
    LinkConfig {
        loss: 0.05,
        duplicate: 0.01,
        reorder: 0.01,
        corrupt: 0.001,
        jitter_ns: 2000,
        ..Default::default()
    }
}

#[test]
fn lossy_link() {
    let mut net = softrdma_sim::NetStats::default();
    for seed in 100..105 {
        let mut c = Config::new(seed);
        c.link = lossy();
        let r = check(c);
        net.lost += r.net.lost;
        net.duplicated += r.net.duplicated;
        net.reordered += r.net.reordered;
        net.corrupted += r.net.corrupted;
    }
    // The run checks each count against what it asked for; over the five
    // seeds every kind of fault happened.
    assert!(
        net.lost > 0 && net.duplicated > 0 && net.reordered > 0 && net.corrupted > 0,
        "{net:?}"
    );
}

#[test]
#[ignore]
fn debug_one() {
    let seed: u64 = std::env::var("SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let mut c = Config::new(seed);
    if std::env::var("LOSSY").is_ok() {
        c.link = lossy();
    }
    if let Ok(p) = std::env::var("PAIRS") {
        c.pairs = p.parse().unwrap();
    }
    if let Ok(p) = std::env::var("OPS") {
        c.ops_per_pair = p.parse().unwrap();
    }
    check(c);
}
