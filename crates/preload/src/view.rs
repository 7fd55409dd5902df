//! Which view of softrdma's devices this process sees, if any.
//!
//! - softrdma's libibverbs is loaded: its `softrdma_sysfs_root` gives the
//!   view of the devices as the verbs report them now (addresses picked
//!   at open time included);
//! - another libibverbs is loaded (the system's rdma-core, one bundled by
//!   a Python wheel…): no view. That library cannot use softrdma's devices
//!   and would only trip over them (it walks sysfs looking for a provider
//!   for each device), so the program sees the real file system;
//! - no libibverbs (`ls`, `cat`, a shell, a harness script): the view of
//!   the configured devices as a process that opened none sees them
//!   (addresses the configuration fixes; the loopback default's is not
//!   known outside the process that opened it), built once.
//!
//! Looking the view up calls library functions (and, the first time,
//! writes files) that this library interposes: a thread-local flag makes
//! every interposed call made meanwhile go straight to libc.

use softrdma_sysfs::Overlay;
use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

thread_local! {
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with interposition off on this thread; `None` if it already
/// is (a call made while looking the view up).
pub fn outside<R>(f: impl FnOnce() -> R) -> Option<R> {
    if BUSY.with(|b| b.replace(true)) {
        return None;
    }
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            BUSY.with(|b| b.set(false));
        }
    }
    let _r = Reset;
    Some(f())
}

type RootFn = unsafe extern "C" fn(*mut c_char, usize) -> isize;

/// The libibverbs of the process.
#[derive(Clone, Copy)]
enum Lib {
    /// None loaded.
    None,
    /// softrdma's, with its view function.
    Ours(RootFn),
    /// Another one.
    Foreign,
}

/// The last scan of the loaded objects: (objects added, removed) as
/// `dl_iterate_phdr` counts them, and what it found.
static SCAN: Mutex<Option<((u64, u64), Lib)>> = Mutex::new(None);

struct Found {
    counts: (u64, u64),
    names: Vec<Vec<u8>>,
}

/// `dl_iterate_phdr`'s callback.
///
/// # Safety
/// The loader's contract: `info` a valid `dl_phdr_info` for the call,
/// `data` the `Found` its caller passed.
unsafe extern "C" fn each_object(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: `data` is the `Found` passed below; `info` is the loader's.
    let (found, info) = unsafe { (&mut *(data as *mut Found), &*info) };
    found.counts = (info.dlpi_adds, info.dlpi_subs);
    if !info.dlpi_name.is_null() {
        // SAFETY: a NUL-terminated path of a loaded object.
        let n = unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes();
        let base = n.rsplit(|&b| b == b'/').next().unwrap_or(n);
        // softrdma's file is also librdmacm.so.1, and the loader knows it
        // by the name it was first loaded under.
        if base.starts_with(b"libibverbs") || base.starts_with(b"librdmacm") {
            found.names.push(n.to_vec());
        }
    }
    0
}

/// softrdma's view function in the loaded object `name`, if it has it.
fn root_fn(name: &[u8]) -> Option<RootFn> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: a NUL-terminated path; RTLD_NOLOAD only finds an object
    // already loaded (no constructor runs), and the handle is closed.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    if h.is_null() {
        return None;
    }
    // SAFETY: a handle and NUL-terminated names.
    let f = unsafe {
        libc::dlvsym(
            h,
            c"softrdma_sysfs_root".as_ptr(),
            c"SOFTRDMA_PRIVATE_1".as_ptr(),
        )
    };
    // SAFETY: the handle from dlopen above; the object stays loaded (the
    // program holds it).
    unsafe { libc::dlclose(h) };
    // SAFETY: softrdma's `softrdma_sysfs_root` has this C type
    // (crates/ibverbs/src/sysfs.rs).
    (!f.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, RootFn>(f) })
}

fn libibverbs() -> Lib {
    let mut found = Found {
        counts: (0, 0),
        names: Vec::new(),
    };
    // SAFETY: the callback only reads the loader's entries.
    unsafe { libc::dl_iterate_phdr(Some(each_object), &mut found as *mut Found as *mut c_void) };
    if let Some((counts, lib)) = *SCAN.lock().unwrap_or_else(|e| e.into_inner()) {
        if counts == found.counts {
            return lib;
        }
    }
    // Not under the lock: `dlopen` waits for the loader, which may be
    // running a constructor that opens a path on another thread.
    let mut lib = Lib::None;
    for n in &found.names {
        let base = n.rsplit(|&b| b == b'/').next().unwrap_or(n);
        match root_fn(n) {
            Some(f) => {
                if matches!(lib, Lib::None) {
                    lib = Lib::Ours(f);
                }
            }
            // Another libibverbs. (Another librdmacm runs over whichever
            // libibverbs is loaded: that one decides.)
            None if base.starts_with(b"libibverbs") => {
                lib = Lib::Foreign;
                break;
            }
            None => {}
        }
    }
    *SCAN.lock().unwrap_or_else(|e| e.into_inner()) = Some((found.counts, lib));
    lib
}

/// Views handed out (the last ones), by their directory.
static VIEWS: Mutex<Vec<Arc<Overlay>>> = Mutex::new(Vec::new());
/// The view of a process without libibverbs, made once.
static OWN: OnceLock<Option<PathBuf>> = OnceLock::new();

fn warn_once(msg: &str) {
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !DONE.swap(true, std::sync::atomic::Ordering::Relaxed) {
        eprintln!("softrdma: {msg}; programs see no softrdma device in sysfs");
    }
}

fn own_root() -> Option<PathBuf> {
    OWN.get_or_init(|| {
        let c = softrdma_config::Config::global().ok()?;
        let views = softrdma_sysfs::configured_views(c, &softrdma_config::interfaces());
        match softrdma_sysfs::materialize(&views) {
            Ok(r) => Some(r),
            Err(e) => {
                warn_once(&format!("the sysfs view cannot be made: {e}"));
                None
            }
        }
    })
    .clone()
}

fn overlay_at(root: &Path) -> Option<Arc<Overlay>> {
    let mut g = VIEWS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(o) = g.iter().find(|o| o.root() == root) {
        return Some(o.clone());
    }
    let o = Arc::new(Overlay::load(root).ok()?);
    // A few views at most in a process's life (one per address its
    // devices had); keep the last ones for getcwd.
    if g.len() >= 16 {
        g.remove(0);
    }
    g.push(o.clone());
    Some(o)
}

/// The view this process sees now (`None`: none — the real file system).
/// Must be called with interposition off (see [`outside`]).
pub fn current() -> Option<Arc<Overlay>> {
    let root = match libibverbs() {
        Lib::Foreign => return None,
        Lib::Ours(f) => {
            let mut buf = vec![0u8; 4096];
            // SAFETY: softrdma's function with a buffer of its length.
            let n = unsafe { f(buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return None;
            }
            buf.truncate(n as usize);
            PathBuf::from(std::ffi::OsString::from(String::from_utf8(buf).ok()?))
        }
        Lib::None => own_root()?,
    };
    overlay_at(&root)
}

/// A path inside one of the views handed out, back in the program's terms.
pub fn unmap(os: &Path) -> Option<PathBuf> {
    let g = VIEWS.lock().unwrap_or_else(|e| e.into_inner());
    g.iter().rev().find_map(|o| o.unmap(os))
}
