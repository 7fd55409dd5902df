//! softrdma's exports against a distribution's libibverbs.so.1 and
//! librdmacm.so.1, read from the ELF files (`readelf --dyn-syms`): every
//! symbol the distribution's libraries define, under every version (the
//! default `name@@VER` and the old `name@VER` alike), must be defined by
//! softrdma's library with the same version, the same default-ness and
//! the same kind (function or data, and a data object's size). Programs
//! and rdma-core's providers (libmlx5, pulled in by perftest, pyverbs and
//! UCX) are linked BIND_NOW: one missing symbol and they do not start.
//!
//! The references: `SOFTRDMA_ABI_REFS`, `LABEL=DIR;LABEL=DIR…` (each DIR
//! holds both libraries; tests/distro/run.sh passes Debian 12's and
//! Debian 13's), else this host's `/usr/lib/x86_64-linux-gnu` (Debian 12:
//! rdma-core 44, installed by scripts/deps). `SOFTRDMA_ABI_LIB` names the
//! library to check (tests/distro/run.sh: the packaged one), else this
//! build's. A reference that is missing fails the test.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What a defined dynamic symbol is.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Def {
    /// `name@@VER` (what new links bind to) rather than `name@VER`.
    default: bool,
    /// `FUNC` or `OBJECT`.
    kind: String,
    /// The size of an `OBJECT` (0 for functions: code sizes differ).
    size: u64,
}

/// Every defined, versioned, global symbol of `lib`: (name, version) → Def.
fn exports(lib: &Path) -> BTreeMap<(String, String), Def> {
    let out = Command::new(common::require_tool("readelf"))
        .args(["--dyn-syms", "-W"])
        .arg(lib)
        .output()
        .expect("readelf");
    assert!(out.status.success(), "readelf {}", lib.display());
    let mut m = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // Num: Value Size Type Bind Vis Ndx Name [(verno)]
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() < 8 || !w[0].ends_with(':') || w[6] == "UND" || w[6] == "ABS" {
            continue;
        }
        if !matches!(w[4], "GLOBAL" | "WEAK") || !matches!(w[3], "FUNC" | "OBJECT" | "IFUNC") {
            continue;
        }
        let (name, version, default) = if let Some((n, v)) = w[7].split_once("@@") {
            (n, v, true)
        } else if let Some((n, v)) = w[7].split_once('@') {
            (n, v, false)
        } else {
            // Unversioned: nothing a versioned reference can bind to.
            continue;
        };
        let kind = if w[3] == "IFUNC" { "FUNC" } else { w[3] };
        let size = if kind == "OBJECT" {
            w[2].parse::<u64>()
                .ok()
                .or_else(|| u64::from_str_radix(w[2].trim_start_matches("0x"), 16).ok())
                .unwrap_or(0)
        } else {
            0
        };
        m.insert(
            (name.to_string(), version.to_string()),
            Def {
                default,
                kind: kind.to_string(),
                size,
            },
        );
    }
    m
}

fn ours() -> PathBuf {
    match std::env::var_os("SOFTRDMA_ABI_LIB") {
        Some(p) => PathBuf::from(p),
        None => common::lib_dir().join("libibverbs.so.1"),
    }
}

fn references() -> Vec<(String, PathBuf)> {
    match std::env::var("SOFTRDMA_ABI_REFS") {
        Ok(v) if !v.is_empty() => v
            .split(';')
            .map(|r| {
                let (label, dir) = r
                    .split_once('=')
                    .unwrap_or_else(|| panic!("SOFTRDMA_ABI_REFS: {r:?} is not LABEL=DIR"));
                (label.to_string(), PathBuf::from(dir))
            })
            .collect(),
        _ => vec![(
            "this host".to_string(),
            PathBuf::from("/usr/lib/x86_64-linux-gnu"),
        )],
    }
}

/// What `theirs` defines that `ours` lacks or defines differently.
fn differences(
    theirs: &BTreeMap<(String, String), Def>,
    ours: &BTreeMap<(String, String), Def>,
) -> Vec<String> {
    let mut v = Vec::new();
    for ((name, ver), d) in theirs {
        let at = if d.default { "@@" } else { "@" };
        match ours.get(&(name.clone(), ver.clone())) {
            None => v.push(format!("missing {name}{at}{ver} ({})", d.kind)),
            Some(o) if o != d => v.push(format!(
                "{name}{at}{ver}: theirs {} {}{}, ours {} {}{}",
                if d.default { "default" } else { "old" },
                d.kind,
                if d.size > 0 {
                    format!(" of {} bytes", d.size)
                } else {
                    String::new()
                },
                if o.default { "default" } else { "old" },
                o.kind,
                if o.size > 0 {
                    format!(" of {} bytes", o.size)
                } else {
                    String::new()
                },
            )),
            Some(_) => {}
        }
    }
    v
}

#[test]
fn exports_every_symbol_and_version_of_the_distributions_libraries() {
    let lib = ours();
    assert!(
        lib.exists(),
        "{} missing: cargo build -p softrdma-ibverbs",
        lib.display()
    );
    let ours = exports(&lib);
    assert!(
        ours.len() > 200,
        "{}: only {} versioned exports",
        lib.display(),
        ours.len()
    );
    let mut problems = Vec::new();
    let mut covered = std::collections::BTreeSet::new();
    for (label, dir) in references() {
        for so in ["libibverbs.so.1", "librdmacm.so.1"] {
            let theirs_path = dir.join(so);
            assert!(
                theirs_path.exists(),
                "{label}: {} missing (apt-get install libibverbs1 librdmacm1)",
                theirs_path.display()
            );
            let theirs = exports(&theirs_path);
            assert!(
                !theirs.is_empty(),
                "{}: no versioned exports",
                theirs_path.display()
            );
            covered.extend(theirs.keys().cloned());
            let d = differences(&theirs, &ours);
            let versions: std::collections::BTreeSet<&str> =
                theirs.keys().map(|(_, v)| v.as_str()).collect();
            println!(
                "{label}: {so}: {} symbols under {} versions ({}): {}",
                theirs.len(),
                versions.len(),
                versions.into_iter().collect::<Vec<_>>().join(" "),
                if d.is_empty() {
                    "all exported by softrdma".to_string()
                } else {
                    format!("{} differences", d.len())
                }
            );
            problems.extend(d.into_iter().map(|p| format!("{label} {so}: {p}")));
        }
    }
    let extra: Vec<String> = ours
        .keys()
        .filter(|k| !covered.contains(*k))
        .map(|(n, v)| format!("{n}@{v}"))
        .collect();
    println!(
        "extra (softrdma exports them, these references do not): {}",
        if extra.is_empty() {
            "none".to_string()
        } else {
            extra.join(" ")
        }
    );
    assert!(
        problems.is_empty(),
        "softrdma's {} differs from the distribution's libraries:\n  {}",
        lib.display(),
        problems.join("\n  ")
    );
}
