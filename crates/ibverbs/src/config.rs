//! Which devices exist (read once per process):
//!
//! 1. `SOFTRDMA_ADDR=ADDRESS` in the environment: one device, `softrdma0`,
//!    at that address.
//! 2. Otherwise the config file `$SOFTRDMA_CONFIG`, else `/etc/softrdma.conf`
//!    when it exists: one device per line, `NAME ADDRESS [mtu=BYTES]`; `#`
//!    starts a comment.
//! 3. Otherwise one device, `softrdma0`, that takes the first free loopback
//!    address 127.0.0.x when opened: several processes on one host need no
//!    setup and each gets its own address (and GID).
//!
//! ADDRESS is an IPv4/IPv6 address, `auto` (case 3), `if:NAME` (the
//! address of interface NAME, IPv4 first) or `first` (the first
//! non-loopback interface that is up, IPv4 first): the last two let one
//! setting serve every host of an MPI job. (libsoftrdma_preload.so reads
//! the same settings: crates/preload/src/config.rs.)
//!
//! `SOFTRDMA_MTU=BYTES` sets the active MTU (256–4096, default 4096) of
//! devices that do not name one.

use crate::ffi::IBV_SYSFS_NAME_MAX;
use std::net::IpAddr;

/// One configured device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevConfig {
    /// Name reported by `ibv_get_device_name`.
    pub name: String,
    /// Address, or `None` for the first free loopback address.
    pub addr: Option<IpAddr>,
    /// Active MTU in bytes.
    pub mtu: u32,
}

/// Parses the config file format (see the module docs).
pub fn parse_config(text: &str, default_mtu: u32) -> Result<Vec<DevConfig>, String> {
    let mut out: Vec<DevConfig> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut it = line.split_whitespace();
        let name = it.next().unwrap_or_default().to_string();
        let addr = it
            .next()
            .ok_or_else(|| format!("line {}: missing address", i + 1))?;
        let addr = resolve_addr(addr).map_err(|e| format!("line {}: {e}", i + 1))?;
        let mut mtu = default_mtu;
        for opt in it {
            match opt.split_once('=') {
                Some(("mtu", v)) => {
                    mtu = v
                        .parse()
                        .ok()
                        .filter(|m| (256..=4096).contains(m))
                        .ok_or_else(|| format!("line {}: bad mtu {v:?}", i + 1))?
                }
                _ => return Err(format!("line {}: unknown option {opt:?}", i + 1)),
            }
        }
        if name.is_empty() || name.len() >= IBV_SYSFS_NAME_MAX {
            return Err(format!("line {}: bad device name", i + 1));
        }
        if out.iter().any(|d| d.name == name) {
            return Err(format!("line {}: duplicate device {name}", i + 1));
        }
        out.push(DevConfig { name, addr, mtu });
    }
    Ok(out)
}

/// An ADDRESS (see the module docs): `None` for `auto`.
pub fn resolve_addr(s: &str) -> Result<Option<IpAddr>, String> {
    let s = s.trim();
    if s == "auto" {
        return Ok(None);
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(Some(ip));
    }
    let ifs = interface_addrs();
    // A link-local IPv6 address needs a scope, which a GID cannot carry.
    let usable = |ip: &IpAddr| !matches!(ip, IpAddr::V6(a) if a.segments()[0] & 0xffc0 == 0xfe80);
    let pick = |c: Vec<IpAddr>| c.iter().find(|a| a.is_ipv4()).or(c.first()).copied();
    let names = || {
        let mut v: Vec<&str> = ifs.iter().map(|i| i.0.as_str()).collect();
        v.dedup();
        v.join(" ")
    };
    if s == "first" {
        let c = ifs
            .iter()
            .filter(|i| i.2 && !i.3 && usable(&i.1))
            .map(|i| i.1)
            .collect();
        return pick(c).map(Some).ok_or_else(|| {
            format!(
                "first: no interface other than loopback has an address (interfaces: {})",
                names()
            )
        });
    }
    if let Some(n) = s.strip_prefix("if:").filter(|n| !n.is_empty()) {
        let c = ifs
            .iter()
            .filter(|i| i.0 == n && usable(&i.1))
            .map(|i| i.1)
            .collect();
        return pick(c).map(Some).ok_or_else(|| {
            format!(
                "{s}: no interface {n} with an address (interfaces: {})",
                names()
            )
        });
    }
    Err(format!(
        "bad address {s:?}: want an IP address, auto, first or if:NAME"
    ))
}

/// The addresses of this host's interfaces: (name, address, up, loopback).
pub fn interface_addrs() -> Vec<(String, IpAddr, bool, bool)> {
    let mut out = Vec::new();
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we free below.
    if unsafe { libc::getifaddrs(&mut ifa) } != 0 {
        return out;
    }
    let mut p = ifa;
    while !p.is_null() {
        // SAFETY: a node of the list returned by getifaddrs.
        let i = unsafe { &*p };
        p = i.ifa_next;
        if i.ifa_addr.is_null() || i.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_addr points to a sockaddr of the family it names.
        let ip = unsafe {
            match (*i.ifa_addr).sa_family as i32 {
                libc::AF_INET => {
                    let s = &*(i.ifa_addr as *const libc::sockaddr_in);
                    IpAddr::from(u32::from_be(s.sin_addr.s_addr).to_be_bytes())
                }
                libc::AF_INET6 => {
                    let s = &*(i.ifa_addr as *const libc::sockaddr_in6);
                    IpAddr::from(s.sin6_addr.s6_addr)
                }
                _ => continue,
            }
        };
        // SAFETY: ifa_name is a NUL-terminated interface name.
        let name = unsafe { std::ffi::CStr::from_ptr(i.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let flags = i.ifa_flags as std::ffi::c_int;
        out.push((
            name,
            ip,
            flags & libc::IFF_UP != 0,
            flags & libc::IFF_LOOPBACK != 0,
        ));
    }
    // SAFETY: the list from getifaddrs, freed once.
    unsafe { libc::freeifaddrs(ifa) };
    out
}

fn env_mtu() -> u32 {
    std::env::var("SOFTRDMA_MTU")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .filter(|m| (256..=4096).contains(m))
        .unwrap_or(4096)
}

/// The configured devices, from the environment or the config file.
pub fn configured_devices() -> Vec<DevConfig> {
    let mtu = env_mtu();
    if let Ok(a) = std::env::var("SOFTRDMA_ADDR") {
        match resolve_addr(&a) {
            Ok(addr) => {
                return vec![DevConfig {
                    name: "softrdma0".into(),
                    addr,
                    mtu,
                }]
            }
            Err(e) => eprintln!("softrdma: ignoring SOFTRDMA_ADDR: {e}"),
        }
    }
    let path = std::env::var_os("SOFTRDMA_CONFIG")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            let p = std::path::PathBuf::from("/etc/softrdma.conf");
            p.exists().then_some(p)
        });
    if let Some(p) = path {
        match std::fs::read_to_string(&p)
            .map_err(|e| e.to_string())
            .and_then(|t| parse_config(&t, mtu))
        {
            Ok(list) => return list,
            Err(e) => eprintln!("softrdma: {}: {e}; no devices", p.display()),
        }
        return Vec::new();
    }
    vec![DevConfig {
        name: "softrdma0".into(),
        addr: None,
        mtu,
    }]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_file() {
        let t = "# devices\nsoftrdma0 127.0.0.9 mtu=1024\n\nroce1 auto # comment\n";
        let l = parse_config(t, 4096).unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].addr, Some("127.0.0.9".parse().unwrap()));
        assert_eq!(l[0].mtu, 1024);
        assert_eq!(l[1].name, "roce1");
        assert_eq!(l[1].addr, None);
        assert_eq!(l[1].mtu, 4096);
        assert!(parse_config("x 1.2.3", 4096).is_err());
        assert!(parse_config("x auto mtu=99", 4096).is_err());
        assert!(parse_config("x auto\nx auto", 4096).is_err());
        assert!(parse_config("x", 4096).is_err());
        // Addresses by interface: loopback has 127.0.0.1 (IPv4 first).
        let l = parse_config("a if:lo\n", 4096).unwrap();
        assert_eq!(l[0].addr, Some("127.0.0.1".parse().unwrap()));
        assert!(parse_config("a if:no-such-if0\n", 4096).is_err());
        assert!(resolve_addr("if:").is_err());
        assert_eq!(resolve_addr(" auto "), Ok(None));
        if let Ok(Some(a)) = resolve_addr("first") {
            assert!(!a.is_loopback(), "{a}");
        }
    }
}
