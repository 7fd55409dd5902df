//! A view as data ([`Tree`]: paths of the real file system and what is
//! there) and on disk ([`Tree::materialize`]: a directory of real files
//! and links, named by a hash of its contents, made once and never
//! changed).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Component, Path, PathBuf};

/// What a path of the view is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Node {
    /// A directory.
    Dir,
    /// A read-only file with this text.
    File(String),
    /// A symbolic link to this absolute path (written relative when the
    /// target is in the view, absolute when it leaves it).
    Link(PathBuf),
    /// A device node: stands for `/dev/null` (a character device anyone
    /// may open).
    Device,
}

/// The view: every path, and the prefixes it covers (a path under a
/// prefix is the view's; everything else is the real file system's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tree {
    entries: BTreeMap<PathBuf, Node>,
    prefixes: BTreeSet<PathBuf>,
}

/// The file in a materialized view listing its prefixes and device nodes.
pub const INDEX: &str = ".softrdma-view";
/// What device nodes stand for.
pub const DEV_NULL: &str = "/dev/null";

impl Tree {
    /// Adds `node` at `p` (absolute), and the directories above it.
    pub fn insert(&mut self, p: &Path, node: Node) {
        let mut a = p.parent();
        while let Some(d) = a {
            if d == Path::new("/") {
                break;
            }
            self.entries.entry(d.to_path_buf()).or_insert(Node::Dir);
            a = d.parent();
        }
        self.entries.insert(p.to_path_buf(), node);
    }

    /// Adds a device node at `p`.
    pub fn node(&mut self, p: &Path) {
        self.insert(p, Node::Device);
    }

    /// Makes `p` and everything under it the view's.
    pub fn prefix(&mut self, p: &Path) {
        self.prefixes.insert(p.to_path_buf());
    }

    /// What is at `p`.
    pub fn get(&self, p: &Path) -> Option<&Node> {
        self.entries.get(p)
    }

    /// Every path and what is there, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&Path, &Node)> {
        self.entries.iter().map(|(p, n)| (p.as_path(), n))
    }

    /// The prefixes.
    pub fn prefixes(&self) -> impl Iterator<Item = &Path> {
        self.prefixes.iter().map(|p| p.as_path())
    }

    /// Whether `p` is under a prefix of the view.
    pub fn covers(&self, p: &Path) -> bool {
        self.prefixes.iter().any(|x| p.starts_with(x))
    }

    /// A stable 64-bit hash of the contents (FNV-1a over a canonical
    /// listing: the same in every build, so processes share a view).
    pub fn fingerprint(&self) -> u64 {
        let mut h = Fnv::default();
        for p in &self.prefixes {
            h.write(b"P");
            h.write(p.as_os_str().as_encoded_bytes());
            h.write(b"\0");
        }
        for (p, n) in &self.entries {
            h.write(p.as_os_str().as_encoded_bytes());
            match n {
                Node::Dir => h.write(b"\0D"),
                Node::File(s) => {
                    h.write(b"\0F");
                    h.write(&(s.len() as u64).to_le_bytes());
                    h.write(s.as_bytes());
                }
                Node::Link(t) => {
                    h.write(b"\0L");
                    h.write(t.as_os_str().as_encoded_bytes());
                    h.write(b"\0");
                }
                Node::Device => h.write(b"\0N"),
            }
        }
        h.0
    }

    /// The link text written for a link at `at` to `target`: relative
    /// inside the view, absolute (the real file system's) outside it.
    pub fn link_text(&self, at: &Path, target: &Path) -> PathBuf {
        if self.covers(target) {
            crate::view::relative(at.parent().unwrap_or(Path::new("/")), target)
        } else {
            target.to_path_buf()
        }
    }

    /// The view on disk under `base` (a private directory): `base/sysfs-HASH`,
    /// made (in a temporary directory renamed into place) unless a process
    /// made it before. Returns its path.
    pub fn materialize(&self, base: &Path) -> io::Result<PathBuf> {
        let fin = base.join(format!("sysfs-{:016x}", self.fingerprint()));
        if fin.join(INDEX).exists() {
            return Ok(fin);
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let tmp = base.join(format!(
            ".sysfs-{:016x}-{}-{nanos}",
            self.fingerprint(),
            std::process::id()
        ));
        let r = self.write_to(&tmp).and_then(|()| {
            match std::fs::rename(&tmp, &fin) {
                Ok(()) => Ok(()),
                // Another process made it meanwhile.
                Err(_) if fin.join(INDEX).exists() => {
                    let _ = std::fs::remove_dir_all(&tmp);
                    Ok(())
                }
                Err(e) => Err(e),
            }
        });
        if r.is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        r.map(|()| fin)
    }

    fn write_to(&self, dir: &Path) -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir(dir)?;
        let under = |p: &Path| dir.join(p.strip_prefix("/").unwrap_or(p));
        for (p, n) in &self.entries {
            let at = under(p);
            match n {
                Node::Dir => std::fs::create_dir_all(&at)?,
                Node::File(s) => {
                    std::fs::write(&at, s)?;
                    std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o444))?;
                }
                Node::Link(t) => std::os::unix::fs::symlink(self.link_text(p, t), &at)?,
                Node::Device => std::os::unix::fs::symlink(DEV_NULL, &at)?,
            }
        }
        let mut index = String::new();
        for p in &self.prefixes {
            index.push_str(&format!("prefix {}\n", p.display()));
            std::fs::create_dir_all(under(p))?;
        }
        for (p, n) in &self.entries {
            if *n == Node::Device {
                index.push_str(&format!("node {}\n", p.display()));
            }
        }
        // Written last: its presence says the view is complete.
        std::fs::write(dir.join(INDEX), index)
    }
}

/// FNV-1a, 64 bits.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, b: &[u8]) {
        for &x in b {
            self.0 ^= u64::from(x);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// Whether `p` is absolute and made of normal components only.
pub fn is_plain(p: &Path) -> bool {
    p.is_absolute()
        && p.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}
