//! Random workloads through the harness, a few seeds each.

use softrdma_sim::harness::{run, Config};
use softrdma_sim::LinkConfig;

fn check(cfg: Config) {
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
}

#[test]
fn clean_link() {
    for seed in 0..5 {
        check(Config::new(seed));
    }
}

#[test]
fn lossy_link() {
    for seed in 100..105 {
        let mut c = Config::new(seed);
        c.link = LinkConfig {
            loss: 0.05,
            duplicate: 0.01,
            reorder: 0.01,
            corrupt: 0.001,
            jitter_ns: 2000,
            ..Default::default()
        };
        check(c);
    }
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
        c.link = LinkConfig {
            loss: 0.05,
            duplicate: 0.01,
            reorder: 0.01,
            corrupt: 0.001,
            jitter_ns: 2000,
            ..Default::default()
        };
    }
    if let Ok(p) = std::env::var("PAIRS") {
        c.pairs = p.parse().unwrap();
    }
    if let Ok(p) = std::env::var("OPS") {
        c.ops_per_pair = p.parse().unwrap();
    }
    check(c);
}
