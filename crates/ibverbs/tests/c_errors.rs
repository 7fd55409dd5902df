//! The C error-path program (`tests/c/errors.c`), built with
//! `gcc -fsanitize=address,undefined` against Debian's `<infiniband/verbs.h>`
//! and run over our library: bad handles, sizes and attributes get the
//! return values and errno libibverbs gives; bad rkeys, RNR exhaustion and
//! flushes give the completion statuses they should; every verb, attribute
//! and librdmacm call softrdma refuses gives the errno README's "Verbs:
//! supported and refused" names; nothing crashes and the sanitizers stay
//! quiet. Its exit status is its number of failed checks.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn c_error_paths_under_asan_and_ubsan() {
    let exe_s = build_c_libs("errors", &["-lrdmacm"]);
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

/// An ACK that reached the device before the program moved its QP to ERR
/// completes its SEND (`tests/c/ack_before_err.c`, uDAPL dapltest's scm
/// quit in miniature: the peer receives, ACKs, says so over TCP; told over
/// TCP, the sender moves its QP to ERR). Before softrdma received what had
/// arrived first, 50-190 of 200 SENDs were flushed.
#[test]
fn an_ack_that_arrived_before_err_completes_its_send() {
    let exe = build_c("ack_before_err");
    let _s = serial();
    let r = pair(
        &exe,
        &["server", "18671", "200"],
        &["client", "18671", "200"],
        18671,
        &[],
        Duration::from_secs(120),
    );
    check_pair("ack_before_err", &r);
    assert!(r.0.out.contains("flushed 0 of 200"), "{}", r.0.out);
}
