//! softrdma-sysfs: what programs see of softrdma's devices in the file
//! system, as they see a kernel RDMA device.
//!
//! Programs and test harnesses find RDMA devices without the verbs: they
//! list `/sys/class/infiniband/`, resolve `DEV/device` or `DEV/../..` to
//! the device's folder (NUMA node, PCI path, `net/IF`), read
//! `ports/1/gids/N`, `gid_attrs/{types,ndevs}/N`, `pkeys/N`, `node_guid`,
//! `/sys/class/infiniband_verbs/uverbsN/ibdev`, and check
//! `/dev/infiniband/uverbsN`. softrdma has no kernel device, so this crate
//! makes one out of files:
//!
//! - [`DeviceView`]: a device's attributes as the verbs report them (the
//!   C library fills them from the open device; [`DeviceView::configured`]
//!   from the configuration, for a process that has not opened it);
//! - [`render`]: the files, folders and links a kernel device has, in the
//!   kernel's formats, as a [`Tree`] of paths of the real file system
//!   under a few prefixes (`/sys/class/infiniband`,
//!   `/sys/class/infiniband_verbs`, `/dev/infiniband`, the device's folder
//!   under its interface's device or `/sys/devices/virtual/softrdma`);
//! - [`Tree::materialize`]: that tree as real files and links in a private
//!   directory ([`runtime_dir`]), named by a hash of its contents (made
//!   once, never changed, shared by the processes that see the same view);
//! - [`Overlay`]: the resolver that tells, for any path a program names,
//!   where it really is — in the view or in the real file system — walking
//!   it as the kernel does, so that `realpath`, `readlink`, `opendir`,
//!   `stat`, `open` and `..` agree.
//!
//! The preload library (`libsoftrdma_preload.so`) routes the file
//! functions of the programs `softrdma exec` starts through the
//! [`Overlay`]; it asks softrdma's libibverbs in the process for the view
//! of its devices as they are (addresses picked at open time), or builds
//! one from the configuration when no libibverbs is loaded.

mod overlay;
mod runtime;
mod tree;
mod view;

pub use overlay::{Overlay, Resolved};
pub use runtime::runtime_dir;
pub use tree::{is_plain, Node, Tree, DEV_NULL, INDEX};
pub use view::{
    gid_text, guid_text, rate_text, relative, render, DeviceView, Parent, PortView, FW_VER,
    HCA_TYPE, VIRTUAL_PARENTS,
};

use softrdma_config::{Config, IfAddr};
use std::path::Path;

/// Renders `devs`, materializes the view in the runtime directory (once
/// per content) and returns its directory.
pub fn materialize(devs: &[DeviceView]) -> std::io::Result<std::path::PathBuf> {
    render(devs).materialize(&runtime_dir()?)
}

/// The devices of `config` as a process that has opened none sees them
/// (see [`DeviceView::configured`]).
pub fn configured_views(config: &Config, ifs: &[IfAddr]) -> Vec<DeviceView> {
    config
        .devices
        .iter()
        .enumerate()
        .map(|(i, d)| {
            DeviceView::configured(
                &d.name,
                i as u32,
                &d.addr.value,
                d.mtu.value,
                ifs,
                Path::new("/sys"),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests;
