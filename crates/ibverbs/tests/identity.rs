//! What a program sees of softrdma's device beyond the basic verbs
//! (`tests/c/identity.c`, built with AddressSanitizer and UBSan against
//! Debian's `<infiniband/verbs.h>`): the vendor ID (rxe's by default,
//! `SOFTRDMA_VENDOR_ID` overrides it), a real command descriptor and the
//! imports it allows, thread and parent domains whose allocators provide
//! the objects' memory, and completion timestamps.

mod common;

use common::*;
use std::time::Duration;

fn run_identity(args: &[&str], env: &[(&str, &str)]) {
    let exe = build_c("identity");
    let mut e = vec![("ASAN_OPTIONS", "abort_on_error=0:detect_leaks=1")];
    e.extend_from_slice(env);
    let o = run(&exe, args, &e, Duration::from_secs(120));
    println!("{}", o.out);
    assert!(!o.out.contains("Sanitizer"), "sanitizer report:\n{}", o.out);
    assert!(o.out.contains(" checks, 0 failures"), "{}", o.out);
    assert_eq!(o.status, Some(0), "{}", o.out);
}

#[test]
fn identity_imports_domains_and_timestamps() {
    let _s = serial();
    run_identity(&[], &[]);
    // SOFTRDMA_VENDOR_ID stays an override.
    run_identity(&["0x02c9"], &[("SOFTRDMA_VENDOR_ID", "0x02c9")]);
}
