//! Which device an address belongs to, which device reaches a
//! destination, and the path MTU (Linux: `rdma_translate_ip`, the route
//! lookup of `rdma_resolve_ip`, `iboe_get_mtu` of the egress netdev).

use crate::error::{Error, Result};
use crate::{Device, DeviceOptions};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::{Arc, RwLock};

/// Where rdma_cm finds its devices.
pub trait DeviceProvider: Send + Sync {
    /// The device whose address is `ip`, opened if it is not yet: `None`
    /// when no device can have that address.
    fn device_at(&self, ip: IpAddr) -> Result<Option<Device>>;
    /// The device to reach `dst` from, opened if needed: the one at the
    /// address the kernel's route to `dst` leaves from; for a loopback
    /// destination the process's own device (every process on a host has
    /// its own loopback address); `None` when there is none.
    fn source_for(&self, dst: IpAddr) -> Result<Option<Device>>;
    /// Every device, opened (a listener on a wildcard address listens on
    /// all of them; `rdma_get_devices`).
    fn all_devices(&self) -> Result<Vec<Device>>;
}

static PROVIDER: RwLock<Option<Arc<dyn DeviceProvider>>> = RwLock::new(None);

/// Installs the device provider of this process (the C library installs
/// one over libibverbs' device list). The default is [`DefaultProvider`].
pub fn set_device_provider(p: Arc<dyn DeviceProvider>) {
    *PROVIDER.write().unwrap_or_else(|e| e.into_inner()) = Some(p);
}

pub(crate) fn provider() -> Arc<dyn DeviceProvider> {
    PROVIDER
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .unwrap_or_else(|| Arc::new(DefaultProvider))
}

/// The default provider: the devices this process has open
/// ([`Device::open_devices`]); for a local address none has, a new device
/// bound to it; for a loopback destination with no device of our own, a
/// device on the first free loopback address (or `SOFTRDMA_ADDR`).
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultProvider;

impl DeviceProvider for DefaultProvider {
    fn device_at(&self, ip: IpAddr) -> Result<Option<Device>> {
        if let Some(d) = Device::open_devices()
            .into_iter()
            .find(|d| d.local_addr().ip() == ip)
        {
            return Ok(Some(d));
        }
        if !is_local(ip) {
            return Ok(None);
        }
        Device::open(DeviceOptions::at(ip)).map(Some)
    }

    fn source_for(&self, dst: IpAddr) -> Result<Option<Device>> {
        let devs = Device::open_devices();
        let same_family = |d: &&Device| d.local_addr().is_ipv4() == dst.is_ipv4();
        if dst.is_loopback() {
            if let Some(d) = devs
                .iter()
                .filter(same_family)
                .find(|d| d.local_addr().ip().is_loopback() && d.local_addr().ip() != dst)
            {
                return Ok(Some(d.clone()));
            }
            if dst.is_ipv4() {
                let o = DeviceOptions {
                    avoid: vec![dst],
                    ..Default::default()
                };
                return Device::open(o).map(Some);
            }
        }
        let Some(src) = route_source(dst) else {
            return Ok(None);
        };
        if let Some(d) = devs.iter().find(|d| d.local_addr().ip() == src) {
            return Ok(Some(d.clone()));
        }
        if !src.is_loopback() {
            if let Some(d) = self.device_at(src)? {
                return Ok(Some(d));
            }
        }
        let mut fam = devs.iter().filter(same_family);
        Ok(match (fam.next(), fam.next()) {
            (Some(d), None) => Some(d.clone()),
            _ => None,
        })
    }

    fn all_devices(&self) -> Result<Vec<Device>> {
        let devs = Device::open_devices();
        if !devs.is_empty() {
            return Ok(devs);
        }
        Ok(vec![Device::open(DeviceOptions::default())?])
    }
}

/// Whether `ip` is an address of this host (a socket can bind it).
pub fn is_local(ip: IpAddr) -> bool {
    UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// The `net.ipv6.bindv6only` sysctl of this network namespace: whether an
/// IPv6 wildcard takes IPv6 only when the program did not say (0, the
/// default: it takes both families).
pub(crate) fn bindv6only() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv6/bindv6only").is_ok_and(|s| s.trim() == "1")
}

/// The source address of the kernel's route to `dst`.
pub fn route_source(dst: IpAddr) -> Option<IpAddr> {
    let any: IpAddr = if dst.is_ipv4() {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    };
    let s = UdpSocket::bind(SocketAddr::new(any, 0)).ok()?;
    s.connect(SocketAddr::new(dst, crate::ROCE_PORT)).ok()?;
    Some(s.local_addr().ok()?.ip())
}

/// The MTU of the route from `src` to `dst` (the egress interface's, or a
/// smaller path MTU the kernel learnt), `None` when there is no route.
pub(crate) fn route_mtu(src: IpAddr, dst: IpAddr) -> Option<u32> {
    let s = UdpSocket::bind(SocketAddr::new(src, 0)).ok()?;
    s.connect(SocketAddr::new(dst, crate::ROCE_PORT)).ok()?;
    softrdma_io::path_mtu(&s).ok().filter(|&m| m > 0)
}

/// The RoCE path MTU (libibverbs code, 1 = 256 … 5 = 4096) an interface
/// MTU carries (`iboe_get_mtu`: 96 bytes of IP, UDP, BTH, extension
/// headers and ICRC taken off, rounded down; 1500 → 1024).
pub fn iboe_mtu(netdev_mtu: u32) -> u8 {
    let room = netdev_mtu.saturating_sub(96);
    match room {
        4096.. => 5,
        2048.. => 4,
        1024.. => 3,
        512.. => 2,
        _ => 1,
    }
}

/// The libibverbs code of an MTU in bytes.
pub(crate) fn mtu_code(bytes: u32) -> u8 {
    match bytes {
        4096.. => 5,
        2048.. => 4,
        1024.. => 3,
        512.. => 2,
        _ => 1,
    }
}

/// The error of an address no device has: EADDRNOTAVAIL when it is not
/// local at all, ENODEV when it is but no device may use it.
pub(crate) fn no_device(ip: IpAddr) -> Error {
    if is_local(ip) {
        Error::cm(libc::ENODEV, format!("no RDMA device at {ip}"))
    } else {
        Error::cm(libc::EADDRNOTAVAIL, format!("{ip} is not a local address"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iboe_mtus() {
        assert_eq!(iboe_mtu(1500), 3);
        assert_eq!(iboe_mtu(65536), 5);
        assert_eq!(iboe_mtu(4200), 5);
        assert_eq!(iboe_mtu(4191), 4);
        assert_eq!(iboe_mtu(9000), 5);
        assert_eq!(mtu_code(1024), 3);
    }
}
