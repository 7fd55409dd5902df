//! QEMU: RDMA live migration between two QEMUs.

use super::*;

/// A QMP connection (one JSON document per line).
pub(crate) struct Qmp {
    r: std::io::BufReader<std::os::unix::net::UnixStream>,
    w: std::os::unix::net::UnixStream,
}

impl Qmp {
    fn connect(path: &Path, p: &mut Proc) -> Qmp {
        let t = Instant::now();
        let w = loop {
            match std::os::unix::net::UnixStream::connect(path) {
                Ok(w) => break w,
                Err(e) => {
                    assert!(
                        p.running() && t.elapsed() < Duration::from_secs(30),
                        "QMP {}: {e}\n{}",
                        path.display(),
                        p.text()
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        };
        w.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut q = Qmp {
            r: std::io::BufReader::new(w.try_clone().unwrap()),
            w,
        };
        let greeting = q.line();
        assert!(greeting.get("QMP").is_some(), "{greeting}");
        q.cmd("qmp_capabilities", serde_json::json!({}));
        q
    }

    fn line(&mut self) -> serde_json::Value {
        use std::io::BufRead;
        let mut l = String::new();
        self.r.read_line(&mut l).expect("QMP read");
        serde_json::from_str(&l).unwrap_or_else(|e| panic!("QMP {l:?}: {e}"))
    }

    /// Runs a command; events that come meanwhile are skipped.
    fn cmd(&mut self, name: &str, args: serde_json::Value) -> serde_json::Value {
        use std::io::Write;
        let c = serde_json::json!({"execute": name, "arguments": args});
        writeln!(self.w, "{c}").expect("QMP write");
        loop {
            let v = self.line();
            if let Some(r) = v.get("return") {
                return r.clone();
            }
            assert!(v.get("error").is_none(), "QMP {name}: {v}");
        }
    }
}

/// QEMU 7.2's RDMA live migration (`-incoming rdma:`, `migrate rdma:`)
/// of a small TCG guest whose RAM holds 8 MiB of random bytes at 32 MiB:
/// the destination's RAM is the source's, byte for byte.
#[test]
fn qemu_rdma_live_migration() {
    let _s = serial();
    let qemu = require("qemu-system-x86_64", "qemu-system-x86");
    let qemu = qemu.display().to_string();
    let dir = work_dir("qemu");
    let random: Vec<u8> = {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        (0..8 << 20)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect()
    };
    let rfile = dir.join("random.bin");
    std::fs::write(&rfile, &random).unwrap();
    let machine = [
        "-M",
        "pc",
        "-m",
        "64",
        "-nodefaults",
        "-display",
        "none",
        "-accel",
        "tcg",
    ];
    let (src_addr, dst_addr) = ("127.66.12.2", "127.66.12.1");
    let uri = format!("rdma:{dst_addr}:4444");
    let dsock = dir.join("dst.qmp");
    let ssock = dir.join("src.qmp");
    let qmp_arg = |p: &Path| format!("unix:{},server=on,wait=off", p.display());

    let mut dargs: Vec<String> = s(&machine);
    dargs.extend(s(&["-S", "-qmp", &qmp_arg(&dsock), "-incoming", &uri]));
    let dargs: Vec<&str> = dargs.iter().map(String::as_str).collect();
    let mut dst = spawn(sx(None, dst_addr, &qemu, &dargs), "qemu-dst");
    let mut dq = Qmp::connect(&dsock, &mut dst);
    let st = dq.cmd("query-status", serde_json::json!({}));
    assert_eq!(st["status"], "inmigrate", "{st}");

    let loader = format!(
        "loader,file={},addr=0x2000000,force-raw=on",
        rfile.display()
    );
    let mut sargs: Vec<String> = s(&machine);
    sargs.extend(s(&["-qmp", &qmp_arg(&ssock), "-device", &loader]));
    let sargs: Vec<&str> = sargs.iter().map(String::as_str).collect();
    let mut src = spawn(sx(None, src_addr, &qemu, &sargs), "qemu-src");
    let mut sq = Qmp::connect(&ssock, &mut src);

    sq.cmd("migrate", serde_json::json!({ "uri": uri }));
    let t = Instant::now();
    let info = loop {
        let m = sq.cmd("query-migrate", serde_json::json!({}));
        match m["status"].as_str() {
            Some("completed") => break m,
            Some("failed") | Some("cancelled") => panic!(
                "migration {m}\n--- source ---\n{}\n--- destination ---\n{}",
                src.text(),
                dst.text()
            ),
            _ => {}
        }
        assert!(
            t.elapsed() < LIMIT,
            "migration still {m} after {LIMIT:?}\n{}\n{}",
            src.text(),
            dst.text()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // The destination is paused (-S): its RAM stays as it arrived; so is
    // the source (post-migrate).
    let st = dq.cmd("query-status", serde_json::json!({}));
    assert_eq!(st["status"], "paused", "{st}");
    let (sram, dram) = (dir.join("src.ram"), dir.join("dst.ram"));
    for (q, f) in [(&mut sq, &sram), (&mut dq, &dram)] {
        q.cmd(
            "pmemsave",
            serde_json::json!({"val": 0, "size": LUN_BYTES, "filename": f.display().to_string()}),
        );
    }
    let (a, b) = (std::fs::read(&sram).unwrap(), std::fs::read(&dram).unwrap());
    assert_eq!(a.len() as u64, LUN_BYTES);
    assert_eq!(&a[32 << 20..40 << 20], &random[..], "the source's RAM");
    if let Some(i) = a.iter().zip(&b).position(|(x, y)| x != y) {
        panic!("RAM differs from byte {i:#x} on");
    }
    assert_eq!(a.len(), b.len());
    println!(
        "QEMU RDMA migration: total {} ms, downtime {} ms, {} bytes of RAM sent",
        info["total-time"], info["downtime"], info["ram"]["transferred"]
    );
    drop(sq);
    drop(dq);
    src.stop(libc::SIGKILL, Duration::from_secs(10));
    dst.stop(libc::SIGKILL, Duration::from_secs(10));
}
