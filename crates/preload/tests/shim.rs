//! libsoftrdma_preload.so in real processes: a C program calls every
//! interposed function the way programs do (through glibc's exported
//! symbols) with the library in `LD_PRELOAD`, and ordinary programs give
//! the same output with and without it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>`: two levels up from this test (`…/deps/shim-…`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// The library this crate builds (the newer of the two copies cargo
/// leaves).
fn preload() -> PathBuf {
    let prof = profile_dir();
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    [
        prof.join("libsoftrdma_preload.so"),
        prof.join("deps/libsoftrdma_preload.so"),
    ]
    .into_iter()
    .filter(|p| p.exists())
    .max_by_key(|p| mtime(p))
    .unwrap_or_else(|| {
        panic!(
            "libsoftrdma_preload.so is missing in {}: cargo build -p softrdma-preload",
            prof.display()
        )
    })
}

/// Builds tests/c/paths.c (under a private name, renamed over: other
/// test processes may be doing the same).
fn paths_program() -> PathBuf {
    let out = profile_dir().join("softrdma-preload-paths");
    let tmp = profile_dir().join(format!(".softrdma-preload-paths-{}", std::process::id()));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/paths.c");
    let st = Command::new("gcc")
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(&tmp)
        .arg(&src)
        .status()
        .expect("gcc not found: apt-get install -y gcc");
    assert!(st.success(), "building {}", src.display());
    std::fs::rename(&tmp, &out).expect("rename");
    out
}

fn clean(c: &mut Command) -> &mut Command {
    c.env_remove("SOFTRDMA_ADDR")
        .env_remove("SOFTRDMA_CONFIG")
        .env_remove("LD_PRELOAD")
}

fn run_paths(dev: &str, netdev: &str, env: &[(&str, &str)], with_preload: bool) -> (bool, String) {
    let mut c = Command::new(paths_program());
    clean(&mut c).args([dev, netdev]);
    if with_preload {
        c.env("LD_PRELOAD", preload());
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("run paths");
    let text =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    (o.status.success(), text)
}

#[test]
fn every_interposed_call_answers_the_device_paths() {
    // Nothing configured: softrdma0 on loopback.
    let (ok, out) = run_paths("softrdma0", "lo", &[], true);
    assert!(ok, "{out}");
    // An address given by interface, and an explicit loopback address.
    let (ok, out) = run_paths("softrdma0", "lo", &[("SOFTRDMA_ADDR", "if:lo")], true);
    assert!(ok, "{out}");
    let (ok, out) = run_paths("softrdma0", "lo", &[("SOFTRDMA_ADDR", "127.0.0.5")], true);
    assert!(ok, "{out}");
    // Devices named in a config file.
    let conf = profile_dir().join(format!("softrdma-preload-{}.conf", std::process::id()));
    std::fs::write(
        &conf,
        "# two devices\nroce7 127.0.0.217 mtu=2048\nroce8 if:lo\n",
    )
    .unwrap();
    let c = conf.to_str().unwrap();
    for dev in ["roce7", "roce8"] {
        let (ok, out) = run_paths(dev, "lo", &[("SOFTRDMA_CONFIG", c)], true);
        assert!(ok, "{dev}: {out}");
    }
    // Only configured names are answered.
    let (ok, out) = run_paths("softrdma0", "lo", &[("SOFTRDMA_CONFIG", c)], true);
    assert!(!ok && out.contains("FAIL"), "{out}");
    let _ = std::fs::remove_file(&conf);
}

#[test]
fn without_the_library_the_paths_do_not_exist() {
    // The check above is not vacuous: this host has no such device node.
    let (ok, out) = run_paths("softrdma0", "lo", &[], false);
    assert!(!ok && out.contains("FAIL"), "{out}");
}

#[test]
fn other_programs_are_unaffected() {
    let script = "ls -la / /dev/null >/dev/null && stat -c '%F %a' /dev/null / /etc/passwd \
                  && cat /etc/os-release | head -3 && find /etc -maxdepth 1 -name '*.conf' | sort \
                  | head -5 && test ! -e /sys/class/infiniband && echo done";
    let run = |pre: bool| {
        let mut c = Command::new("sh");
        clean(&mut c).args(["-c", script]);
        if pre {
            c.env("LD_PRELOAD", preload());
        }
        c.output().expect("sh")
    };
    let (a, b) = (run(false), run(true));
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert_eq!(b.status.code(), a.status.code());
    assert_eq!(
        String::from_utf8_lossy(&b.stdout),
        String::from_utf8_lossy(&a.stdout)
    );
    assert!(
        b.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&b.stderr)
    );
}
