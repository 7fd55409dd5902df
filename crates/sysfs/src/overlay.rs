//! The view over the real file system: which paths are the view's, and
//! where a path a program names really is.
//!
//! A path is resolved component by component as the kernel does it
//! (`.`, `..`, symbolic links with their targets spliced in, at most 40
//! links), except that a path under one of the view's prefixes is looked
//! up in the materialized view (`ROOT/path`) and everything else in the
//! real file system; links of the view that leave it carry absolute
//! targets, so a walk can go from the view to the real file system and
//! back (`/sys/class/infiniband/DEV/device/net/lo/mtu`,
//! `/sys/class/infiniband/DEV/../..`). Device nodes stand for `/dev/null`.
//! The lookups are raw system calls: no library function a preload
//! library interposes is called.

use crate::tree::{DEV_NULL, INDEX};
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// A materialized view, ready to resolve paths.
#[derive(Clone, Debug)]
pub struct Overlay {
    root: PathBuf,
    prefixes: Vec<PathBuf>,
    nodes: Vec<PathBuf>,
}

/// Where a path is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// The path never meets the view: use it as the program gave it.
    Untouched,
    /// Use `os` for the system call; `virt` is the path it stands for
    /// (`realpath`'s answer), `in_view` whether `os` is in the view.
    At {
        /// The path to hand the system call.
        os: PathBuf,
        /// The path in the program's terms.
        virt: PathBuf,
        /// `os` is a file of the view (read-only).
        in_view: bool,
    },
}

/// At most this many links in one resolution (the kernel's limit).
const MAX_LINKS: u32 = 40;

enum Kind {
    Missing,
    Link(PathBuf),
    Other,
}

fn lstat_kind(p: &Path) -> Kind {
    let Ok(c) = CString::new(p.as_os_str().as_bytes()) else {
        return Kind::Missing;
    };
    // Raw system calls: no library function this process interposes.
    match softrdma_io::host::raw_lstat(&c) {
        softrdma_io::host::RawKind::Missing => Kind::Missing,
        softrdma_io::host::RawKind::Link(t) => Kind::Link(t),
        softrdma_io::host::RawKind::Other => Kind::Other,
    }
}

/// The components of `p` (bytes), without empty ones and `.`.
fn components(p: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    p.split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
}

fn join(stack: &[Vec<u8>]) -> PathBuf {
    if stack.is_empty() {
        return PathBuf::from("/");
    }
    let mut v = Vec::new();
    for c in stack {
        v.push(b'/');
        v.extend_from_slice(c);
    }
    PathBuf::from(OsString::from_vec(v))
}

impl Overlay {
    /// The view materialized at `root` (see [`crate::Tree::materialize`]).
    pub fn load(root: &Path) -> io::Result<Overlay> {
        let index = std::fs::read_to_string(root.join(INDEX))?;
        let mut o = Overlay {
            root: root.to_path_buf(),
            prefixes: Vec::new(),
            nodes: Vec::new(),
        };
        for line in index.lines() {
            match line.split_once(' ') {
                Some(("prefix", p)) => o.prefixes.push(PathBuf::from(p)),
                Some(("node", p)) => o.nodes.push(PathBuf::from(p)),
                _ => {}
            }
        }
        Ok(o)
    }

    /// The directory the view is materialized in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The view's prefixes.
    pub fn prefixes(&self) -> &[PathBuf] {
        &self.prefixes
    }

    /// Whether `v` (a path in the program's terms) is the view's.
    pub fn covers(&self, v: &Path) -> bool {
        self.prefixes.iter().any(|p| v.starts_with(p))
    }

    fn location(&self, v: &Path) -> PathBuf {
        if self.covers(v) {
            self.root.join(v.strip_prefix("/").unwrap_or(v))
        } else {
            v.to_path_buf()
        }
    }

    /// Whether the cheap test says `path` may meet the view: it is
    /// absolute and, read as text, under a prefix, or it has a `..` (which
    /// may climb into the view from anywhere).
    pub fn may_meet(&self, path: &[u8]) -> bool {
        if path.first() != Some(&b'/') {
            return false;
        }
        if components(path).any(|c| c == b"..") {
            return true;
        }
        let mut clean = Vec::with_capacity(path.len());
        for c in components(path) {
            clean.push(b'/');
            clean.extend_from_slice(c);
        }
        let clean = Path::new(OsStr::from_bytes(&clean));
        self.covers(clean)
    }

    /// Where `path` (absolute) is. `follow_last`: whether a link in the
    /// last component is followed (`stat`, `open`) or not (`lstat`,
    /// `readlink`, `O_NOFOLLOW`).
    pub fn resolve(&self, path: &[u8], follow_last: bool) -> Resolved {
        if !self.may_meet(path) {
            return Resolved::Untouched;
        }
        // A trailing slash, `.` or `..` asks for a directory: the last link
        // is followed.
        let tail = path.rsplit(|&b| b == b'/').next().unwrap_or(b"");
        let follow_last = follow_last || matches!(tail, b"" | b"." | b"..");
        let mut todo: Vec<Vec<u8>> = components(path).rev().map(<[u8]>::to_vec).collect();
        let mut stack: Vec<Vec<u8>> = Vec::new();
        let mut touched = false;
        let mut links = 0;
        while let Some(c) = todo.pop() {
            if c == b".." {
                stack.pop();
                continue;
            }
            stack.push(c);
            let v = join(&stack);
            let in_view = self.covers(&v);
            touched |= in_view;
            let last = todo.is_empty();
            if in_view && self.nodes.contains(&v) {
                if last {
                    return Resolved::At {
                        os: PathBuf::from(DEV_NULL),
                        virt: v,
                        in_view: false,
                    };
                }
                // Below a device node: the system call says ENOTDIR.
                return self.at_rest(PathBuf::from(DEV_NULL), v, &todo, false);
            }
            if last && !follow_last {
                break;
            }
            let loc = self.location(&v);
            match lstat_kind(&loc) {
                Kind::Other => {}
                Kind::Missing => {
                    if !touched {
                        return Resolved::Untouched;
                    }
                    return self.at_rest(loc, v, &todo, in_view);
                }
                Kind::Link(t) => {
                    links += 1;
                    if links > MAX_LINKS {
                        if !touched {
                            return Resolved::Untouched;
                        }
                        // The system call meets the loop itself (ELOOP).
                        return self.at_rest(loc, v, &todo, in_view);
                    }
                    stack.pop();
                    let tb = t.as_os_str().as_bytes();
                    if tb.first() == Some(&b'/') {
                        stack.clear();
                    }
                    todo.extend(components(tb).rev().map(<[u8]>::to_vec));
                }
            }
        }
        if !touched {
            return Resolved::Untouched;
        }
        let v = join(&stack);
        let in_view = self.covers(&v);
        Resolved::At {
            os: self.location(&v),
            virt: v,
            in_view,
        }
    }

    /// `base` with the components still to walk (`todo`, reversed).
    fn at_rest(&self, base: PathBuf, virt: PathBuf, todo: &[Vec<u8>], in_view: bool) -> Resolved {
        let (mut os, mut v) = (base, virt);
        for c in todo.iter().rev() {
            let c = OsStr::from_bytes(c);
            os.push(c);
            v.push(c);
        }
        Resolved::At {
            os,
            virt: v,
            in_view,
        }
    }

    /// A link's text as the program sees it: a link of the view that
    /// leaves it holds an absolute target; shown relative to the link's
    /// folder (`virt`: the link's path in the program's terms), as sysfs
    /// shows its links.
    pub fn link_text(&self, virt: &Path, text: &Path) -> PathBuf {
        if text.is_absolute() && self.covers(virt) && text != Path::new(DEV_NULL) {
            crate::view::relative(virt.parent().unwrap_or(Path::new("/")), text)
        } else {
            text.to_path_buf()
        }
    }

    /// A path of the file system back in the program's terms: a path
    /// inside the materialized view (a directory the program changed
    /// into) becomes the path it stands for.
    pub fn unmap(&self, os: &Path) -> Option<PathBuf> {
        os.strip_prefix(&self.root)
            .ok()
            .map(|rest| Path::new("/").join(rest))
    }
}
