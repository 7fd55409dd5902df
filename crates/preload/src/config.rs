//! Which softrdma devices exist, and the network interface of each: the
//! configuration of softrdma-config (`SOFTRDMA_ADDR`, `$SOFTRDMA_CONFIG`
//! or `/etc/softrdma.conf`), read once per process, the same code
//! libibverbs.so.1 reads it with. A configuration that does not parse
//! gives no devices here; the library reports it.

pub use softrdma_config::{interfaces, AddrSpec, Config, DeviceEntry, IfAddr};

/// The configured devices of this process.
pub fn devices() -> &'static [DeviceEntry] {
    Config::global().map_or(&[], |c| c.devices.as_slice())
}

/// The network interface a device's GID belongs to (sysfs `ndevs/0`).
pub fn netdev(addr: &AddrSpec, ifs: &[IfAddr]) -> Option<String> {
    addr.netdev(ifs)
}
