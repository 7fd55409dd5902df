//! The host-wide device: every process of one user that opens a softrdma
//! device on the same address shares it, as programs share a NIC.
//!
//! One process, the *device process* (`softrdma device-host`, started on
//! demand by the first program and gone with the last), owns the device's
//! `IP:4791` socket. Every program's device (a *member*) connects to it
//! over a unix socket whose abstract name holds the user, the network
//! namespace and the address (binding it is the election: the first wins;
//! two containers that reuse an address never meet), proves it is the same
//! user (`SO_PEERCRED`), and receives a duplicate of the socket — its
//! packets leave from `IP:4791` straight from its own threads, as before —
//! and a shared-memory ring ([`softrdma_io::Ring`]) in which the device
//! process hands it the datagrams addressed to its QPs, waking it with an
//! eventfd when it sleeps. Each member keeps its own transport core: the
//! state machines, the memory and one-sided operations stay in the process
//! that registered the memory.
//!
//! The device process ([`daemon`]) routes by destination QPN (members
//! claim their random QP numbers from it, so they are unique per device)
//! and, for QP 1, by CM message ([`route`]): a REQ to the member listening
//! on its service ID, every other message to the member owning the
//! communication ID it names. Members send QP 1 traffic through the device
//! process, which so learns their connections; when a member dies — its
//! unix socket closes, however it died — the device process forgets its
//! QPs and listeners and sends what the kernel's CM would for its
//! connections (DREQ, DREP or REJ); the other members carry on.
//!
//! When the device process's binary cannot be found (a program using the
//! Rust API with no `softrdma` installed), or `SOFTRDMA_SHARE=0`, a device
//! binds the address itself, exclusively, as before this existed.

pub(crate) mod daemon;
pub(crate) mod deputy;
pub(crate) mod member;
pub mod msg;
pub(crate) mod path;
pub mod route;

use std::net::SocketAddr;
use std::path::PathBuf;

pub use daemon::{serve, HostOptions};
pub use msg::MemberInfo;
pub use path::SameHostCounters;

/// The environment variable naming the `softrdma` binary that runs the
/// device process (`softrdma exec` sets it to itself).
pub const BIN_ENV: &str = "SOFTRDMA_BIN";
/// The environment variable that turns sharing off (`0`): each device
/// binds its address exclusively.
pub const SHARE_ENV: &str = "SOFTRDMA_SHARE";
/// The hidden subcommand of `softrdma` that runs the device process.
pub const SUBCOMMAND: &str = "device-host";

/// The abstract unix name of the device at `addr` for this user in this
/// network namespace.
pub(crate) fn rendezvous_name(addr: SocketAddr) -> std::io::Result<Vec<u8>> {
    let ns = softrdma_io::netns_id()?;
    Ok(format!(
        "softrdma-device/{}/{ns:x}/{}/{}",
        softrdma_io::euid(),
        addr.ip(),
        addr.port()
    )
    .into_bytes())
}

/// Whether devices share their address (not `SOFTRDMA_SHARE=0`).
pub(crate) fn sharing_enabled() -> bool {
    !matches!(
        std::env::var(SHARE_ENV).as_deref(),
        Ok("0" | "off" | "no" | "exclusive")
    )
}

/// The `softrdma` binary to start the device process with: `SOFTRDMA_BIN`,
/// this program if it is `softrdma`, or `softrdma` on `PATH`.
pub(crate) fn daemon_binary() -> Option<PathBuf> {
    let ok = |p: &std::path::Path| p.is_file();
    if let Some(p) = std::env::var_os(BIN_ENV).map(PathBuf::from) {
        if ok(&p) {
            return Some(p);
        }
    }
    if let Ok(exe) = std::env::current_exe() {
        if exe.file_name().is_some_and(|n| n == "softrdma") && ok(&exe) {
            return Some(exe);
        }
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("softrdma"))
        .find(|p| ok(p))
}
