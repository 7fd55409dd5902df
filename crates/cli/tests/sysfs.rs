//! What programs started by `softrdma exec` see of softrdma's devices
//! outside the verbs, as they would see a kernel device: sysfs consistent
//! with what the verbs report (a C program compares them for the address
//! its device got at open time), the device's folder as Mooncake and
//! Python resolve it, `rdma link show -j` (iproute2's RDMA tool, which
//! rdma-core 56's tests call first), and Open MPI's openib BTL staying
//! quiet now that `/sys/class/infiniband` exists.
//!
//! Needs gcc, libibverbs-dev, python3, iproute2 and Open MPI (scripts/deps);
//! a missing tool fails the test.

#[path = "common/libs.rs"]
mod libs;

use libs::profile_dir;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `softrdma exec --lib` with this build's libraries (libs.rs).
fn lib_dir() -> PathBuf {
    libs::lib_dir("softrdma-sysfs-test-lib", false)
}

fn require(tool: &str) {
    let path = std::env::var_os("PATH").unwrap_or_default();
    assert!(
        std::env::split_paths(&path).any(|d| d.join(tool).is_file()),
        "{tool} not found: apt-get install -y gcc libibverbs-dev python3 iproute2 openmpi-bin \
         libopenmpi-dev (scripts/deps)"
    );
}

/// `softrdma exec [--addr A] -- ARGS`, its status and output.
fn exec(addr: Option<&str>, args: &[&str]) -> (bool, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_softrdma"));
    c.arg("exec").arg("--lib").arg(lib_dir());
    if let Some(a) = addr {
        c.args(["--addr", a]);
    }
    c.arg("--")
        .args(args)
        .env_remove("SOFTRDMA_ADDR")
        .env_remove("SOFTRDMA_CONFIG")
        .env_remove("OMPI_MCA_btl_openib_if_exclude")
        .env_remove("OMPI_MCA_btl_openib_if_include");
    let o = c.output().expect("softrdma exec");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Builds `tests/sysfs/NAME.c` (plus `extra` flags).
fn build(name: &str, extra: &[&str]) -> PathBuf {
    require("gcc");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/sysfs/{name}.c"));
    let out = profile_dir().join(format!("softrdma-sysfs-{name}"));
    let tmp = profile_dir().join(format!(".softrdma-sysfs-{name}-{}", std::process::id()));
    let o = Command::new("gcc")
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(&tmp)
        .arg(&src)
        .args(extra)
        .output()
        .expect("gcc");
    assert!(
        o.status.success(),
        "gcc {}: {}",
        src.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::rename(&tmp, &out).expect("rename");
    out
}

#[test]
fn a_verbs_program_finds_in_sysfs_what_the_verbs_report() {
    let prog = build("verbs_view", &["-libverbs"]);
    let p = prog.to_str().unwrap();
    // The loopback default: the address is picked when the device opens.
    let (ok, out, err) = exec(None, &[p]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("verbs_view: ok"), "{out}{err}");
    // A fixed address.
    let (ok, out, err) = exec(Some("127.65.1.2"), &[p]);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("sysfs 0000:0000:0000:0000:0000:ffff:7f41:0102"),
        "{out}"
    );
}

#[test]
fn children_and_python_see_the_device() {
    require("python3");
    // A child without libibverbs (a shell, cat, ls) sees the configured
    // device; with a fixed address its GID too.
    let (ok, out, err) = exec(
        Some("127.65.1.3"),
        &[
            "sh",
            "-c",
            "ls /sys/class/infiniband/; ls /sys/class/infiniband/softrdma0/device/net/; \
             cat /sys/class/infiniband/softrdma0/ports/1/gids/0 \
             /sys/class/infiniband/softrdma0/ports/1/pkeys/0 \
             /sys/class/infiniband_verbs/uverbs0/ibdev; \
             cd /sys/class/infiniband/softrdma0/ports/1 && pwd -P && cat gid_attrs/types/0",
        ],
    );
    assert!(ok, "{out}{err}");
    assert_eq!(
        out,
        "softrdma0\nlo\n0000:0000:0000:0000:0000:ffff:7f41:0103\n0xffff\nsoftrdma0\n\
         /sys/devices/virtual/softrdma/lo/infiniband/softrdma0/ports/1\nRoCE v2\n"
    );
    assert!(err.is_empty(), "{err}");
    // Mooncake's discovery: list the class, resolve DEV/../.., read its
    // NUMA node; and Python's own realpath (lstat and readlink).
    let script = "import os\n\
        devs = os.listdir('/sys/class/infiniband')\n\
        print(devs)\n\
        p = os.path.realpath('/sys/class/infiniband/%s/../..' % devs[0])\n\
        print(p, open(p + '/numa_node').read().strip())\n\
        print(os.path.realpath('/sys/class/infiniband/%s/device/net/lo' % devs[0]))\n\
        print(os.readlink('/sys/class/infiniband/' + devs[0]))\n";
    let (ok, out, err) = exec(Some("127.65.1.3"), &["python3", "-c", script]);
    assert!(ok, "{out}{err}");
    assert_eq!(
        out,
        "['softrdma0']\n/sys/devices/virtual/softrdma/lo -1\n/sys/devices/virtual/net/lo\n\
         ../../devices/virtual/softrdma/lo/infiniband/softrdma0\n"
    );
}

#[test]
fn rdma_link_show_answers_for_softrdma() {
    require("rdma");
    let (ok, out, err) = exec(Some("127.65.1.4"), &["rdma", "link", "show", "-j"]);
    assert!(ok, "{out}{err}");
    let lo = std::fs::read_to_string("/sys/class/net/lo/ifindex").unwrap();
    assert_eq!(
        out,
        format!(
            "[{{\"ifindex\":0,\"ifname\":\"softrdma0\",\"port\":1,\"state\":\"ACTIVE\",\
             \"physical_state\":\"LINK_UP\",\"netdev\":\"lo\",\"netdev_index\":{}}}]\n",
            lo.trim()
        )
    );
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v[0]["netdev"], "lo");
    let (ok, out, _) = exec(Some("127.65.1.4"), &["rdma", "dev"]);
    assert!(ok);
    assert!(
        out.starts_with("0: softrdma0: node_type ca protocol roce fw softrdma ")
            && out.contains("node_guid 0250:56ff:fe41:0104"),
        "{out}"
    );
    // Everything else is iproute2's (which asks the kernel: here it has
    // no RDMA netlink to ask).
    let (_, out, err) = exec(Some("127.65.1.4"), &["rdma", "-V"]);
    assert!(
        out.contains("iproute2") || err.contains("iproute2"),
        "{out}{err}"
    );
}

#[test]
fn open_mpis_openib_stays_quiet() {
    require("mpicc.openmpi");
    require("mpirun.openmpi");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ucx/pingpong.c");
    let exe = profile_dir().join("softrdma-sysfs-pingpong");
    let st = Command::new("mpicc.openmpi")
        .arg("-O2")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("mpicc");
    assert!(st.success());
    // openib included, as Open MPI's own default does (Debian's
    // configuration excludes it): it finds softrdma0 in sysfs, and must
    // leave it alone without a word. (Each rank its own loopback
    // address: two processes cannot share one device address yet.)
    let (ok, out, err) = exec(
        None,
        &[
            "mpirun.openmpi",
            "--allow-run-as-root",
            "--oversubscribe",
            "-np",
            "2",
            "--mca",
            "btl",
            "self,vader,tcp,openib",
            "--mca",
            "pml",
            "ob1",
            exe.to_str().unwrap(),
        ],
    );
    assert!(ok, "{out}{err}");
    assert!(out.contains("pingpong ok"), "{out}{err}");
    let all = format!("{out}{err}");
    for bad in ["WARNING", "OpenFabrics", "openib", "ORTE_ERROR_LOG"] {
        assert!(!all.contains(bad), "{bad}:\n{all}");
    }
}
