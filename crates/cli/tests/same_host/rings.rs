//! Rings do not outlive their peers; the device process never waits.

use super::*;

#[test]
fn rings_of_short_lived_peers_are_freed_whether_they_close_or_die() {
    const N: usize = 6;
    let port = free_port();
    let target_ip = "127.42.1.1";
    let mut target = role(
        "target_role",
        "shm",
        &[
            ("SH_ADDR", target_ip.to_string()),
            ("SH_PORT", port.to_string()),
            ("SH_MODE", "serve".to_string()),
            ("SH_N", N.to_string()),
        ],
    );
    let mut tout = BufReader::new(target.stdout.take().unwrap());
    wait_line(&mut tout, "LISTENING");
    for k in 0..N {
        // Half on the target's address (its device process), half on
        // another (a device process that leaves with its only member);
        // half killed, half closing their device.
        let ip = if k % 2 == 0 { target_ip } else { "127.42.1.2" };
        let end = if k < N / 2 { "kill" } else { "close" };
        let mut init = role(
            "initiator_role",
            "shm",
            &[
                ("SH_ADDR", ip.to_string()),
                ("SH_TARGET", format!("{target_ip}:{port}")),
                ("SH_MODE", "short".to_string()),
                ("SH_END", end.to_string()),
            ],
        );
        let mut iout = BufReader::new(init.stdout.take().unwrap());
        wait_line(&mut tout, "ACCEPTED");
        let ic = wait_line(&mut iout, "COUNTERS");
        let c = parse_counters(&ic).unwrap();
        assert!(c[0] > 0 && c[1] > 0 && c[3] == 1, "initiator {k}: {ic}");
        if end == "kill" {
            wait_line(&mut iout, "KILL ME");
            signal(&init, libc::SIGKILL);
            let _ = init.wait();
        } else {
            assert!(init.wait().unwrap().success());
        }
    }
    target.stdin.take().unwrap().write_all(b"check\n").unwrap();
    assert_eq!(wait_line(&mut tout, "MAPS"), "MAPS 0");
    let tc = wait_line(&mut tout, "COUNTERS");
    let c = parse_counters(&tc).unwrap();
    assert_eq!(c[3], N as u64, "a path to each initiator: {tc}");
    assert_eq!((c[4], c[5]), (0, 0), "rings kept: {tc}");
    assert!(target.wait().unwrap().success());
}

#[test]
fn a_forked_child_that_exits_leaves_its_parents_rings_alone() {
    let mut p = pair("shm", "fork", "127.42.4.1", "127.42.4.2");
    wait_line(&mut p.iout, "PHASE1");
    let mut tin = p.target.stdin.take().unwrap();
    tin.write_all(b"fork\n").unwrap();
    wait_line(&mut p.tout, "FORKED");
    p.init.stdin.take().unwrap().write_all(b"go\n").unwrap();
    wait_line(&mut p.iout, "DONE");
    let ic = wait_line(&mut p.iout, "COUNTERS");
    tin.write_all(b"check\n").unwrap();
    let check = wait_line(&mut p.tout, "CHECK");
    assert_eq!(check, "CHECK written=true counter=77 send=true");
    let tc = wait_line(&mut p.tout, "COUNTERS");
    assert!(p.init.wait().unwrap().success());
    assert!(p.target.wait().unwrap().success());
    // The same rings before and after the fork, nothing refused.
    assert_path_carried(&ic, &tc);
    for c in [&ic, &tc] {
        let v = parse_counters(c).unwrap();
        assert_eq!(v[2], 0, "refused: {c}");
        assert_eq!((v[4], v[5]), (1, 1), "{c}");
    }
}

#[test]
fn a_parent_killed_while_its_forked_child_lives_is_seen_dead() {
    let mut p = pair("shm", "kill", "127.42.5.1", "127.42.5.2");
    wait_line(&mut p.iout, "STREAMING");
    let mut tin = p.target.stdin.take().unwrap();
    tin.write_all(b"fork-and-stay\n").unwrap();
    let child: i32 = wait_line(&mut p.tout, "CHILD")[6..].parse().unwrap();
    signal(&p.target, libc::SIGKILL);
    let _ = p.target.wait();
    let e = wait_line(&mut p.iout, "ERROR");
    assert!(e.starts_with("ERROR RetryExcErr"), "{e}");
    assert_eq!(wait_line(&mut p.iout, "MAPS"), "MAPS 0");
    let ic = wait_line(&mut p.iout, "COUNTERS");
    let c = parse_counters(&ic).unwrap();
    assert_eq!((c[4], c[5]), (0, 0), "rings of a dead peer kept: {ic}");
    // The child held every descriptor all along.
    // Signal 0 only checks that the process exists.
    let alive = softrdma_testkit::signal(child, 0).is_ok();
    // The target's child (reparented): ours to end.
    let _ = softrdma_testkit::signal(child, libc::SIGKILL);
    assert!(alive, "the forked child was gone before the check");
    assert!(p.init.wait().unwrap().success());
}

/// A plain socket connected to a device's rendezvous name (non-blocking),
/// saying nothing.
fn silent_connection(ip: &str, port: u16) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    use std::os::unix::fs::MetadataExt;
    let ns = std::fs::metadata("/proc/self/ns/net").unwrap().ino();
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let name = format!("softrdma-device/{uid}/{ns:x}/{ip}/{port}");
    // SAFETY: plain socket calls on a descriptor we own; the address is a
    // zeroed sockaddr_un with the abstract name written in bounds.
    unsafe {
        let fd = libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        );
        assert!(fd >= 0);
        let fd = std::os::fd::OwnedFd::from_raw_fd(fd);
        let mut a: libc::sockaddr_un = std::mem::zeroed();
        a.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (i, b) in name.bytes().enumerate() {
            a.sun_path[i + 1] = b as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sa_family_t>() + 1 + name.len();
        use std::os::fd::AsRawFd;
        let r = libc::connect(
            fd.as_raw_fd(),
            &a as *const libc::sockaddr_un as *const libc::sockaddr,
            len as libc::socklen_t,
        );
        (r == 0).then_some(fd)
    }
}

#[test]
fn connections_that_never_speak_do_not_stop_the_device_process() {
    // Path off: every datagram goes through the device process, and the
    // initiator joins it (on the target's address) while connections that
    // say nothing keep arriving.
    let ip = "127.42.2.1";
    let port = free_port();
    let mut target = role(
        "target_role",
        "udp",
        &[
            ("SH_ADDR", ip.to_string()),
            ("SH_PORT", port.to_string()),
            ("SH_MODE", "ops".to_string()),
        ],
    );
    let mut tout = BufReader::new(target.stdout.take().unwrap());
    wait_line(&mut tout, "LISTENING");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let staller = std::thread::spawn(move || {
        let mut held = Vec::new();
        while !s2.load(Ordering::SeqCst) {
            if let Some(c) = silent_connection(ip, 4791) {
                held.push(c);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        held.len()
    });
    std::thread::sleep(Duration::from_millis(200));
    let mut init = role(
        "initiator_role",
        "udp",
        &[
            ("SH_ADDR", ip.to_string()),
            ("SH_TARGET", format!("{ip}:{port}")),
            ("SH_MODE", "ops".to_string()),
        ],
    );
    let mut iout = BufReader::new(init.stdout.take().unwrap());
    // (The initiator first: one that cannot join exits, and says so.)
    wait_line(&mut iout, "DONE");
    wait_line(&mut tout, "READY");
    stop.store(true, Ordering::SeqCst);
    let held = staller.join().unwrap();
    assert!(held > 0, "no silent connection was made");
    target.stdin.take().unwrap().write_all(b"check\n").unwrap();
    let check = wait_line(&mut tout, "CHECK");
    assert_eq!(check, "CHECK written=true counter=77 send=true");
    assert!(init.wait().unwrap().success());
    assert!(target.wait().unwrap().success());
}

#[test]
fn an_offer_that_meets_a_full_member_ring_is_not_lost() {
    let dir = std::env::temp_dir().join(format!("softrdma-samehost-offer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("trace");
    let ip = "127.42.3.1";
    let mut p = pair_with(
        "shm",
        "offer",
        ip,
        ip,
        &[("SOFTRDMA_HOST_TRACE", trace.display().to_string())],
    );
    wait_line(&mut p.iout, "STREAMING");
    // The target stops; datagrams for its QP fill its device-process
    // ring (8 MiB) from a plain UDP socket.
    signal(&p.target, libc::SIGSTOP);
    let sock = std::net::UdpSocket::bind("127.42.3.9:0").unwrap();
    let mut d = vec![0u8; 4000];
    d[0] = 0x04; // RC SEND ONLY; garbage after the BTH (a bad ICRC).
    d[5..8].copy_from_slice(&p.target_qpn.to_be_bytes()[1..]);
    for k in 0..6000 {
        let _ = sock.send_to(&d, (ip, 4791));
        if k % 64 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // Now the initiator's first WRITE asks for the path: the device
    // process offers the target its ring while the target's ring is full.
    p.init.stdin.take().unwrap().write_all(b"go\n").unwrap();
    wait_line(&mut p.iout, "POSTED");
    std::thread::sleep(Duration::from_millis(100));
    signal(&p.target, libc::SIGCONT);
    wait_line(&mut p.iout, "DONE");
    let ic = wait_line(&mut p.iout, "COUNTERS");
    let i = parse_counters(&ic).unwrap();
    assert_eq!(i[3], 1, "{ic}");
    p.ask_target_to_check();
    let check = wait_line(&mut p.tout, "CHECK");
    assert!(check.starts_with("CHECK written=true"), "{check}");
    let tc = wait_line(&mut p.tout, "COUNTERS");
    let t = parse_counters(&tc).unwrap();
    assert!(t[1] > 0, "the target never read the path: {tc}");
    assert!(p.init.wait().unwrap().success());
    assert!(p.target.wait().unwrap().success());
    // The target's ring was full indeed (the device process says so when
    // the target leaves).
    let deadline = std::time::Instant::now() + T;
    let refused = loop {
        let text = std::fs::read_to_string(&trace).unwrap_or_default();
        let line = text
            .lines()
            .find(|l| l.contains(&format!("pid {} left", p.target.id())))
            .map(str::to_string);
        if let Some(l) = line {
            let r: u64 = l
                .split("ring refused ")
                .nth(1)
                .unwrap()
                .split(',')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            break r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no leave line:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(refused > 0, "the target's ring never filled");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The path rings the initiator holds (memfds named `softrdma-path`: the
/// one it writes into, and the one its target writes into for it, in no
/// particular order), mapped here through `/proc/PID/fd`: their starts
/// and lengths.
fn map_path_rings(pid: u32) -> Vec<(*mut u8, usize)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let path = e.unwrap().path();
        let Ok(link) = std::fs::read_link(&path) else {
            continue;
        };
        if !link.to_string_lossy().contains("softrdma-path") {
            continue;
        }
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let len = f.metadata().unwrap().len() as usize;
        // SAFETY: a shared mapping of a file we opened, of its length;
        // the test writes only within it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&f),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        v.push((p.cast(), len));
    }
    assert!(!v.is_empty(), "the initiator maps no path ring");
    v
}

#[test]
fn a_garbled_ring_record_is_loss_and_the_sender_gets_a_new_ring() {
    // The target stopped, the initiator fills its ring; the test then
    // writes garbage over the length of the first record the target has
    // not read (as a producer breaking the ring's protocol would). The
    // target finds the ring malformed, lets go of it and closes it; the
    // initiator lets go of its end, offers a new ring, and its transport
    // sends again what the garbled ring swallowed: the data arrives whole.
    let mut p = pair("shm", "garble", "127.72.4.1", "127.72.4.1");
    wait_line(&mut p.iout, "STREAMING");
    signal(&p.target, libc::SIGSTOP);
    p.init.stdin.take().unwrap().write_all(b"go\n").unwrap();
    wait_line(&mut p.iout, "POSTED");
    let rings = map_path_rings(p.init.id());
    // softrdma_io::ring's layout: tail at 64, head at 128, the data
    // area after 4096 bytes; a record starts with its length (u32 LE).
    let word = |base: *mut u8, off: usize| {
        // SAFETY: aligned, within the mapping; the ring's counters are
        // 8-byte atomics.
        unsafe { &*base.add(off).cast::<std::sync::atomic::AtomicU64>() }
    };
    // The initiator's own ring is the one with records the stopped
    // target has not read.
    let t0 = std::time::Instant::now();
    let (base, len) = loop {
        if let Some(&r) = rings.iter().find(|&&(b, _)| {
            word(b, 64).load(Ordering::Acquire) != word(b, 128).load(Ordering::Acquire)
        }) {
            break r;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "nothing published");
        std::thread::sleep(Duration::from_millis(5));
    };
    let word = |off: usize| word(base, off);
    let cap = len - 4096;
    let head = word(128).load(Ordering::Acquire) as usize & (cap - 1);
    // SAFETY: within the mapping (a record header is 8 bytes, 8-aligned
    // in the data area); the producer does not write published records.
    unsafe {
        base.add(4096 + head)
            .cast::<u32>()
            .write_volatile(0xffff_fff0)
    };
    for (b, l) in rings {
        // SAFETY: our mappings, unmapped once.
        unsafe { libc::munmap(b.cast(), l) };
    }
    signal(&p.target, libc::SIGCONT);
    wait_line(&mut p.iout, "DONE");
    let ic = wait_line(&mut p.iout, "COUNTERS");
    let i = parse_counters(&ic).unwrap();
    assert!(i[3] >= 2, "no new ring after the garbage: {ic}");
    p.ask_target_to_check();
    let check = wait_line(&mut p.tout, "CHECK");
    assert!(check.starts_with("CHECK written=true"), "{check}");
    assert!(p.init.wait().unwrap().success());
    let _ = p.target.kill();
    let _ = p.target.wait();
}
