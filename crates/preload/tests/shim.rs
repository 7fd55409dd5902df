//! libsoftrdma_preload.so in real processes: a C program (`tests/c/view.c`)
//! calls every interposed function the way programs do, with the library
//! in `LD_PRELOAD`, and finds softrdma's device in sysfs and
//! `/dev/infiniband` as a kernel device is found — and nothing without the
//! library, or once a libibverbs other than softrdma's is loaded.
//! Ordinary programs give the same output with and without it.

use softrdma_testkit::profile_dir;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The library this crate builds (the newer of the two copies cargo
/// leaves).
fn preload() -> PathBuf {
    softrdma_testkit::newest_built("libsoftrdma_preload.so").unwrap_or_else(|| {
        panic!(
            "libsoftrdma_preload.so is missing in {}: cargo build -p softrdma-preload",
            profile_dir().display()
        )
    })
}

/// Builds tests/c/view.c (under a private name, renamed over: other test
/// processes may be doing the same), fortified so that `realpath` is
/// `__realpath_chk`.
fn view_program() -> PathBuf {
    let out = profile_dir().join("softrdma-preload-view");
    let tmp = profile_dir().join(format!(".softrdma-preload-view-{}", std::process::id()));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/view.c");
    let st = Command::new("gcc")
        .args(["-O2", "-D_FORTIFY_SOURCE=2", "-Wall", "-Werror", "-o"])
        .arg(&tmp)
        .arg(&src)
        .arg("-ldl")
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
        .env_remove("LD_LIBRARY_PATH")
}

fn run_view(args: &[&str], env: &[(&str, &str)], with_preload: bool) -> (bool, String) {
    let mut c = Command::new(view_program());
    clean(&mut c).args(args);
    if with_preload {
        c.env("LD_PRELOAD", preload());
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("run view");
    let text =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    (o.status.success(), text)
}

#[test]
fn a_configured_device_is_shown_as_a_kernel_device() {
    // A fixed address: its GID and node GUID are known to every process.
    let (ok, out) = run_view(
        &[
            "shown",
            "softrdma0",
            "0",
            "lo",
            "0000:0000:0000:0000:0000:ffff:7f41:0001",
            "0250:56ff:fe41:0001",
            "softrdma0",
        ],
        &[("SOFTRDMA_ADDR", "127.65.0.1")],
        true,
    );
    assert!(ok, "{out}");
    // The loopback default: its address is picked when a process opens it,
    // so a process that did not shows an empty GID table.
    let zero = "0000:0000:0000:0000:0000:0000:0000:0000";
    let (ok, out) = run_view(
        &[
            "shown",
            "softrdma0",
            "0",
            "lo",
            zero,
            "0000:0000:0000:0000",
            "softrdma0",
        ],
        &[],
        true,
    );
    assert!(ok, "{out}");
    // Devices named in a config file.
    let conf = profile_dir().join(format!("softrdma-preload-{}.conf", std::process::id()));
    std::fs::write(
        &conf,
        "# two devices\nroce7 127.65.0.7 mtu=2048\nroce8 if:lo\n",
    )
    .unwrap();
    let c = conf.to_str().unwrap();
    let (ok, out) = run_view(
        &[
            "shown",
            "roce7",
            "0",
            "lo",
            "0000:0000:0000:0000:0000:ffff:7f41:0007",
            "0250:56ff:fe41:0007",
            "roce7 roce8",
        ],
        &[("SOFTRDMA_CONFIG", c)],
        true,
    );
    assert!(ok, "{out}");
    // roce8 is on `lo` by name (if:lo): its address is lo's (127.0.0.1).
    let (ok, out) = run_view(
        &[
            "shown",
            "roce8",
            "1",
            "lo",
            "0000:0000:0000:0000:0000:ffff:7f00:0001",
            "0250:56ff:fe00:0001",
            "roce7 roce8",
        ],
        &[("SOFTRDMA_CONFIG", c)],
        true,
    );
    let _ = std::fs::remove_file(&conf);
    assert!(ok, "{out}");
}

#[test]
fn without_the_library_nothing_is_shown() {
    // The checks above are not vacuous: this host has no RDMA device.
    let (ok, out) = run_view(&["absent"], &[("SOFTRDMA_ADDR", "127.65.0.1")], false);
    assert!(ok, "{out}");
}

#[test]
fn a_program_running_another_libibverbs_sees_none() {
    let sys = Path::new("/usr/lib/x86_64-linux-gnu/libibverbs.so.1");
    assert!(
        sys.exists(),
        "{} is missing: apt-get install -y libibverbs1",
        sys.display()
    );
    let (ok, out) = run_view(&["foreign"], &[("SOFTRDMA_ADDR", "127.65.0.1")], true);
    assert!(ok, "{out}");
    assert!(!out.contains("libibverbs: Warning"), "{out}");
}

#[test]
fn a_runtime_directory_others_may_write_is_refused() {
    let d = profile_dir().join(format!("softrdma-preload-xdg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("softrdma")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(d.join("softrdma"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let (ok, out) = run_view(
        &["absent"],
        &[
            ("SOFTRDMA_ADDR", "127.65.0.1"),
            ("XDG_RUNTIME_DIR", d.to_str().unwrap()),
        ],
        true,
    );
    let _ = std::fs::remove_dir_all(&d);
    assert!(ok, "{out}");
    assert!(out.contains("not a private directory"), "{out}");
}

#[test]
fn other_programs_are_unaffected() {
    let script = "ls -la / /dev/null >/dev/null && stat -c '%F %a' /dev/null / /etc/passwd \
                  && cat /etc/os-release | head -3 && find /etc -maxdepth 1 -name '*.conf' | sort \
                  | head -5 && cd /usr/lib/../bin && pwd && ls /sys/class/net | sort && echo done";
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
