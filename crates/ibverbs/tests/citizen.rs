//! softrdma as a good citizen of the program's process (DESIGN promise 7),
//! through libibverbs.so.1 / librdmacm.so.1 and C programs built with
//! AddressSanitizer (`tests/c/`):
//!
//! - `signals.c`: threads softrdma starts block every signal. The program
//!   blocks SIGUSR2 in its own threads and reads it from a signalfd while
//!   its threads `kill(getpid(), SIGUSR2)` (tgtd's pattern); it must never
//!   die of it, and every `softrdma*` thread's blocked mask holds every
//!   signal.

mod common;

use common::*;
use std::path::PathBuf;
use std::time::Duration;

fn no_sanitizer_report(o: &Output) {
    assert!(!o.out.contains("Sanitizer"), "sanitizer report:\n{}", o.out);
    assert!(!o.out.contains("runtime error"), "UBSan report:\n{}", o.out);
}

/// A configuration file naming `n` devices `cit0…` at `127.61.<net>.1…`.
fn config(tag: &str, net: u8, n: u8) -> PathBuf {
    let conf = profile_dir().join(format!(
        "softrdma-citizen-{tag}-{}.conf",
        std::process::id()
    ));
    let lines: String = (0..n)
        .map(|i| format!("cit{i} 127.61.{net}.{}\n", i + 1))
        .collect();
    std::fs::write(&conf, lines).expect("config file");
    conf
}

#[test]
fn c_signals_the_program_blocks_never_reach_softrdma_threads() {
    let exe = build_c("signals");
    let conf = config("signals", 1, 2);
    let _s = serial();
    let o = run(
        &exe,
        &["4", "5000"],
        &[("SOFTRDMA_CONFIG", conf.to_str().unwrap())],
        Duration::from_secs(120),
    );
    println!("{}", o.out.trim_end());
    no_sanitizer_report(&o);
    assert!(
        o.out.contains("OK: the process survived every signal"),
        "exit {:?}: {}",
        o.status,
        o.out
    );
    assert_eq!(o.status, Some(0), "{}", o.out);
}
