//! XRC and UD multicast seen from C, through libibverbs.so.1 with
//! AddressSanitizer and UBSan: `tests/c/xrc.c` (XRC domains and their file
//! sharing, XRC SRQs, INI and TGT QPs, `ibv_open_qp`, traffic through the
//! named SRQs) and `tests/c/mcast.c` (attach/detach rules, SENDs to a
//! group reaching each attached QP of the device with a matching Q_Key).
//! Each program prints one line per check and exits with its number of
//! failures; the device sits on its own loopback address (127.67.7.x).

mod common;

use common::*;
use std::time::Duration;

fn run_c(name: &str, addr: &str) {
    let exe = build_c(name);
    let _s = serial();
    let o = run(
        &exe,
        &[],
        &[
            ("ASAN_OPTIONS", "abort_on_error=0:detect_leaks=1"),
            ("SOFTRDMA_ADDR", addr),
        ],
        Duration::from_secs(120),
    );
    println!("{}", o.out);
    assert!(!o.out.contains("Sanitizer"), "sanitizer report:\n{}", o.out);
    assert!(o.out.contains(" checks, 0 failures"), "{}", o.out);
    assert_eq!(o.status, Some(0), "{}", o.out);
}

#[test]
fn c_xrc() {
    run_c("xrc", "127.67.7.1");
}

#[test]
fn c_multicast() {
    run_c("mcast", "127.67.7.2");
}
