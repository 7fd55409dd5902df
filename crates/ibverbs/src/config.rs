//! Which devices exist: those of softrdma's configuration
//! ([`softrdma::config`], read once per process from `SOFTRDMA_ADDR`,
//! `SOFTRDMA_MTU`, the config file `$SOFTRDMA_CONFIG` or
//! `/etc/softrdma.conf`), each with its address resolved on this host.
//!
//! A configuration that does not parse, or an address that does not
//! resolve, is an error: `ibv_get_device_list` then fails (`EINVAL`) and
//! the message, naming the variable or line and what it accepts, is
//! printed once to stderr.

use softrdma::config::{self, DeviceEntry};
use std::net::IpAddr;

/// One configured device.
#[derive(Clone, Debug, PartialEq)]
pub struct DevConfig {
    /// Name reported by `ibv_get_device_name`.
    pub name: String,
    /// Address, or `None` for the first free loopback address.
    pub addr: Option<IpAddr>,
    /// Active MTU in bytes.
    pub mtu: u32,
}

impl DevConfig {
    /// The device `entry` on a host with interfaces `ifs`.
    pub fn resolve(entry: &DeviceEntry, ifs: &[config::IfAddr]) -> Result<DevConfig, String> {
        Ok(DevConfig {
            name: entry.name.clone(),
            addr: entry.resolve(ifs).map_err(|e| e.to_string())?,
            mtu: entry.mtu.value,
        })
    }
}

/// The configured devices of this process, or why there are none.
pub fn configured_devices() -> Result<Vec<DevConfig>, String> {
    let cfg = config::global().map_err(|e| e.to_string())?;
    let ifs = config::interfaces();
    cfg.devices
        .iter()
        .map(|d| DevConfig::resolve(d, &ifs))
        .collect()
}

/// Whether `ip` is an address of one of this host's interfaces.
pub fn is_local(ip: IpAddr) -> bool {
    config::interfaces().iter().any(|i| i.ip == ip)
}
