//! Which devices exist (read once per process):
//!
//! 1. `SOFTRDMA_ADDR=IP` in the environment: one device, `softrdma0`, at
//!    that address.
//! 2. Otherwise the config file `$SOFTRDMA_CONFIG`, else `/etc/softrdma.conf`
//!    when it exists: one device per line, `NAME ADDRESS [mtu=BYTES]`, where
//!    ADDRESS is an IPv4/IPv6 address or `auto`; `#` starts a comment.
//! 3. Otherwise one device, `softrdma0`, that takes the first free loopback
//!    address 127.0.0.x when opened: several processes on one host need no
//!    setup and each gets its own address (and GID).
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
        let addr = if addr == "auto" {
            None
        } else {
            Some(
                addr.parse::<IpAddr>()
                    .map_err(|_| format!("line {}: bad address {addr:?}", i + 1))?,
            )
        };
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
        if let Ok(ip) = a.trim().parse::<IpAddr>() {
            return vec![DevConfig {
                name: "softrdma0".into(),
                addr: Some(ip),
                mtu,
            }];
        }
        eprintln!("softrdma: ignoring SOFTRDMA_ADDR={a:?}: not an IP address");
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
    }
}
