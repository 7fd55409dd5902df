//! The private directory views are materialized in.
//!
//! `$XDG_RUNTIME_DIR/softrdma` when the session has one, else
//! `$TMPDIR/softrdma-UID` (`/tmp/softrdma-UID`). It must be a directory of
//! this user that nobody else may write (mode 0700 when made here): a view
//! someone else could change would feed programs false devices, so a
//! directory that is not private is refused.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::PathBuf;

/// The directory, made if missing; an error if it is not private.
pub fn runtime_dir() -> io::Result<PathBuf> {
    let uid = softrdma_io::host::euid();
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(x) if std::path::Path::new(&x).is_dir() => PathBuf::from(x).join("softrdma"),
        _ => std::env::temp_dir().join(format!("softrdma-{uid}")),
    };
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let m = std::fs::symlink_metadata(&dir)?;
    if !m.is_dir() || m.uid() != uid || m.permissions().mode() & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{}: not a private directory of user {uid} (a directory, owned by it, not writable by others)",
                dir.display()
            ),
        ));
    }
    Ok(dir)
}
