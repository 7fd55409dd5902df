//! The C error-path program (`tests/c/errors.c`), built with
//! `gcc -fsanitize=address,undefined` against Debian's `<infiniband/verbs.h>`
//! and run over our library: bad handles, sizes and attributes get the
//! return values and errno libibverbs gives; bad rkeys, RNR exhaustion and
//! flushes give the completion statuses they should; nothing crashes and
//! the sanitizers stay quiet. Its exit status is its number of failed
//! checks.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn c_error_paths_under_asan_and_ubsan() {
    let exe_s = build_c("errors");
    let _s = serial();
    // Leak checking stays on: the library frees what a program frees.
    let o = run_path(
        &exe_s,
        &[("ASAN_OPTIONS", "abort_on_error=0:detect_leaks=1")],
    );
    println!("{}", o.out);
    assert!(!o.out.contains("Sanitizer"), "sanitizer report:\n{}", o.out);
    assert!(o.out.contains(" checks, 0 failures"), "{}", o.out);
    assert_eq!(o.status, Some(0), "{}", o.out);
}

fn run_path(exe: &str, env: &[(&str, &str)]) -> Output {
    run(exe, &[], env, Duration::from_secs(120))
}
