//! 2 MiB huge pages for a test, reserved machine-wide. Test runs of
//! several checkouts (each with its own target directory, so its own
//! interop lock) can overlap on one machine; the pool
//! (`/proc/sys/vm/nr_hugepages`) is one. So every process holding a
//! reservation is listed in one registry ([`REGISTRY`], changed only under
//! the `flock` of [`LOCK`]), the pool is raised to cover all of them, and it
//! goes back to what it was before the first of them only when the last
//! one ends. A holder that died without giving its pages back (killed at a
//! timeout) is dropped from the list by the next one to look (its pid is
//! gone or has another start time).
//!
//! Another program may take the pool's free pages meanwhile: UCX maps its
//! shared memory from huge pages when there are any (its `HUGETLB_MODE`s
//! are `try`), so MPI jobs running next to the test emptied the pool it
//! had just made ("Failed to allocate MR buffer", "Failed to mmap
//! memory"). So the holders also allow [`SURPLUS`] pages each beyond the
//! pool (`nr_overcommit_hugepages`): an allocation the pool cannot serve
//! takes a new page from the kernel, given back when freed.
//!
//! Included with `#[path = "common/huge_pages.rs"] mod huge_pages;`.

#![allow(dead_code)]

use std::io::Write;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};

/// The pool of default-size (2 MiB) huge pages.
pub const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";
/// Pages allowed beyond the pool, on demand (surplus pages).
pub const NR_OVERCOMMIT: &str = "/proc/sys/vm/nr_overcommit_hugepages";
/// Surplus pages each holder allows per page it reserves.
pub const SURPLUS: u64 = 4;
/// The holders: `base N O` (the pool and the surplus allowed before the
/// first), then a line `pid start-time serial pages` per holder.
pub const REGISTRY: &str = "/tmp/softrdma-huge-pages";
const LOCK: &str = "/tmp/softrdma-huge-pages.lock";

/// Held while a test uses huge pages; gives them back when dropped.
pub struct HugePages {
    me: Holder,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Holder {
    pid: u32,
    start: u64,
    serial: u64,
    pages: u64,
}

struct Registry {
    base: u64,
    base_surplus: u64,
    holders: Vec<Holder>,
}

fn read_number(path: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// The pool's size now.
pub fn pool() -> u64 {
    read_number(NR_HUGEPAGES)
}

/// The surplus pages allowed now.
pub fn surplus() -> u64 {
    read_number(NR_OVERCOMMIT)
}

/// A process's start time (field 22 of `/proc/PID/stat`), or `None` if it
/// is gone.
fn start_time(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count after its `)`.
    s[s.rfind(')')? + 1..]
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// The registry's lock, held until the file is closed.
fn lock() -> std::fs::File {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK)
        .unwrap_or_else(|e| panic!("{LOCK}: {e}"));
    // SAFETY: flock on a descriptor this function owns.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(r, 0, "flock {LOCK}: {}", std::io::Error::last_os_error());
    f
}

/// The registry without the holders that are gone; `None` if there is none.
fn read() -> Option<Registry> {
    let text = std::fs::read_to_string(REGISTRY).ok()?;
    let mut lines = text.lines();
    let mut first = lines.next()?.strip_prefix("base ")?.split_whitespace();
    let base = first.next()?.parse().ok()?;
    let base_surplus = first.next()?.parse().ok()?;
    let holders = lines
        .filter_map(|l| {
            let n: Vec<u64> = l
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            (n.len() == 4).then(|| Holder {
                pid: n[0] as u32,
                start: n[1],
                serial: n[2],
                pages: n[3],
            })
        })
        .filter(|h| start_time(h.pid) == Some(h.start))
        .collect();
    Some(Registry {
        base,
        base_surplus,
        holders,
    })
}

fn write(r: &Registry) {
    let mut text = format!("base {} {}\n", r.base, r.base_surplus);
    for h in &r.holders {
        text.push_str(&format!("{} {} {} {}\n", h.pid, h.start, h.serial, h.pages));
    }
    let tmp = format!("{REGISTRY}.{}", std::process::id());
    let mut f = std::fs::File::create(&tmp).unwrap_or_else(|e| panic!("{tmp}: {e}"));
    f.write_all(text.as_bytes()).unwrap();
    drop(f);
    std::fs::rename(&tmp, REGISTRY).unwrap();
}

/// The pool the holders need: what it was before them, and at least their
/// pages together.
fn wanted(r: &Registry) -> u64 {
    r.base.max(r.holders.iter().map(|h| h.pages).sum())
}

/// The surplus the holders allow: as before them, and at least theirs.
fn wanted_surplus(r: &Registry) -> u64 {
    r.base_surplus
        .max(r.holders.iter().map(|h| h.pages * SURPLUS).sum())
}

/// Sets `path` to `n` unless it is that already; whether it is now.
fn set(path: &str, n: u64) -> Result<(), String> {
    if read_number(path) == n {
        return Ok(());
    }
    let w = std::fs::write(path, n.to_string());
    let now = read_number(path);
    if now == n {
        Ok(())
    } else {
        Err(format!("{path} = {now} after writing {n}: {w:?}"))
    }
}

/// The pool and the surplus the holders want (back to the base without
/// holders); setting neither lower than it is when `grow_only`.
fn apply(r: &Registry, grow_only: bool) -> Result<(), String> {
    let (p, s) = if r.holders.is_empty() {
        (r.base, r.base_surplus)
    } else {
        (wanted(r), wanted_surplus(r))
    };
    if !grow_only || pool() < p {
        set(NR_HUGEPAGES, p)?;
    }
    // The surplus only guards against other programs: without root, a
    // pool set by hand does without it.
    if !grow_only || surplus() < s {
        let _ = set(NR_OVERCOMMIT, s);
    }
    Ok(())
}

/// Reserves `pages` 2 MiB huge pages for as long as the result lives,
/// next to those of the other holders on the machine. Fails loudly if the
/// pool cannot grow to hold them (not root, or no memory).
pub fn reserve(pages: u64) -> HugePages {
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    let pid = std::process::id();
    let me = Holder {
        pid,
        start: start_time(pid).expect("own /proc/PID/stat"),
        serial: SERIAL.fetch_add(1, Ordering::Relaxed),
        pages,
    };
    let _l = lock();
    let mut r = read().unwrap_or_else(|| Registry {
        base: pool(),
        base_surplus: surplus(),
        holders: Vec::new(),
    });
    r.holders.push(me);
    let want = wanted(&r);
    // A pool big enough already (set by hand, say) does without root.
    if let Err(e) = apply(&r, true) {
        r.holders.pop();
        let _ = apply(&r, false);
        if r.holders.is_empty() {
            let _ = std::fs::remove_file(REGISTRY);
        } else {
            write(&r);
        }
        panic!(
            "\n\n*** cannot allocate {want} huge pages of 2 MiB ({pages} for this test; {e}): \
             run this test as root (CI does), or `echo {want} > {NR_HUGEPAGES}` first; \
             rdma-core's huge-page tests would be skipped otherwise ***\n"
        );
    }
    write(&r);
    HugePages { me }
}

impl Drop for HugePages {
    fn drop(&mut self) {
        let _l = lock();
        let Some(mut r) = read() else { return };
        r.holders.retain(|h| *h != self.me);
        let _ = apply(&r, false);
        if r.holders.is_empty() {
            let _ = std::fs::remove_file(REGISTRY);
        } else {
            write(&r);
        }
    }
}
