//! The C error-path program (`tests/c/errors.c`), built with
//! `gcc -fsanitize=address,undefined` against Debian's `<infiniband/verbs.h>`
//! and run over our library: bad handles, sizes and attributes get the
//! return values and errno libibverbs gives; bad rkeys, RNR exhaustion and
//! flushes give the completion statuses they should; nothing crashes and
//! the sanitizers stay quiet. Its exit status is its number of failed
//! checks.

mod common;

use common::*;
use std::process::Command;
use std::time::Duration;

#[test]
fn c_error_paths_under_asan_and_ubsan() {
    let gcc = require_tool("gcc");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/c/errors.c");
    let exe = profile_dir().join("softrdma-ibverbs-c-errors");
    let out = Command::new(gcc)
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-g", "-O1"])
        .args([
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=undefined",
        ])
        .args(["-fno-omit-frame-pointer", src, "-o"])
        .arg(&exe)
        .arg("-libverbs")
        .output()
        .expect("gcc");
    assert!(
        out.status.success(),
        "gcc failed (needs libibverbs-dev):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _s = serial();
    let exe_s = exe.to_str().unwrap();
    // Leak checking stays on: the library frees what a program frees.
    let o = run_path(
        exe_s,
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
