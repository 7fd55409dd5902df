//! Which softrdma devices exist, and the network interface of each: read
//! from the environment and the config file by the rules of
//! softrdma-ibverbs (`crates/ibverbs/src/device.rs`; a test checks that
//! both read the same files alike).
//!
//! 1. `SOFTRDMA_ADDR=ADDRESS`: one device, `softrdma0`;
//! 2. else `$SOFTRDMA_CONFIG`, else `/etc/softrdma.conf` if it exists: one
//!    device per line, `NAME ADDRESS [mtu=BYTES]`;
//! 3. else `softrdma0` on a loopback address.
//!
//! ADDRESS is an IP address, `auto` (a free loopback address), `if:NAME`
//! (the address of interface NAME) or `first` (the first non-loopback
//! interface's address).

use std::ffi::CStr;
use std::net::IpAddr;

/// Where a device's address comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Addr {
    /// A free loopback address, picked when the device is opened.
    Auto,
    /// This address.
    Ip(IpAddr),
    /// The address of this interface.
    Iface(String),
    /// The first non-loopback interface's address.
    First,
}

impl Addr {
    /// Parses an ADDRESS; `None` when it is none of the forms.
    pub fn parse(s: &str) -> Option<Addr> {
        let s = s.trim();
        if s == "auto" {
            Some(Addr::Auto)
        } else if s == "first" {
            Some(Addr::First)
        } else if let Some(n) = s.strip_prefix("if:") {
            (!n.is_empty() && n.len() < 16).then(|| Addr::Iface(n.to_string()))
        } else {
            s.parse().ok().map(Addr::Ip)
        }
    }
}

/// One configured device: its name and where its address comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dev {
    /// `ibv_get_device_name`.
    pub name: String,
    /// Its address.
    pub addr: Addr,
}

/// The devices of a config file's text (lines that do not parse are
/// skipped here: the library reports them).
pub fn parse_config(text: &str) -> Vec<Dev> {
    let mut out: Vec<Dev> = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut it = line.split_whitespace();
        let (Some(name), Some(addr)) = (it.next(), it.next()) else {
            continue;
        };
        let Some(addr) = Addr::parse(addr) else {
            continue;
        };
        if name.len() < 64 && !out.iter().any(|d| d.name == name) {
            out.push(Dev {
                name: name.to_string(),
                addr,
            });
        }
    }
    out
}

/// The configured devices, as softrdma's libibverbs sees them in this
/// process. `env` reads a variable, `read` a file.
pub fn devices(
    env: &dyn Fn(&str) -> Option<String>,
    read: &dyn Fn(&str) -> Option<String>,
) -> Vec<Dev> {
    if let Some(a) = env("SOFTRDMA_ADDR") {
        if let Some(addr) = Addr::parse(&a) {
            return vec![Dev {
                name: "softrdma0".into(),
                addr,
            }];
        }
    }
    let path = env("SOFTRDMA_CONFIG").unwrap_or_else(|| "/etc/softrdma.conf".into());
    if let Some(text) = read(&path) {
        return parse_config(&text);
    }
    if env("SOFTRDMA_CONFIG").is_some() {
        return Vec::new();
    }
    vec![Dev {
        name: "softrdma0".into(),
        addr: Addr::Auto,
    }]
}

/// One address of a network interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfAddr {
    /// Interface name.
    pub name: String,
    /// The address.
    pub ip: IpAddr,
    /// `IFF_LOOPBACK`.
    pub loopback: bool,
    /// `IFF_UP`.
    pub up: bool,
}

/// The addresses of this host's (this network namespace's) interfaces.
pub fn interfaces() -> Vec<IfAddr> {
    let mut out = Vec::new();
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list that is freed below.
    if unsafe { libc::getifaddrs(&mut ifa) } != 0 {
        return out;
    }
    let mut p = ifa;
    while !p.is_null() {
        // SAFETY: a node of the list getifaddrs returned.
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
        let name = unsafe { CStr::from_ptr(i.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let flags = i.ifa_flags as libc::c_int;
        out.push(IfAddr {
            name,
            ip,
            loopback: flags & libc::IFF_LOOPBACK != 0,
            up: flags & libc::IFF_UP != 0,
        });
    }
    // SAFETY: the list from getifaddrs, freed once.
    unsafe { libc::freeifaddrs(ifa) };
    out
}

/// Whether an IPv6 address is link-local (fe80::/10: it needs a scope,
/// which a GID cannot carry).
fn link_local(ip: &IpAddr) -> bool {
    matches!(ip, IpAddr::V6(a) if a.segments()[0] & 0xffc0 == 0xfe80)
}

/// The address a device gets for `if:NAME` or `first` (IPv4 preferred),
/// from the interface list: softrdma-ibverbs picks it the same way.
pub fn pick(addr: &Addr, ifs: &[IfAddr]) -> Option<IpAddr> {
    let ok = |i: &&IfAddr| !link_local(&i.ip);
    let best = |c: Vec<&IfAddr>| {
        c.iter()
            .find(|i| i.ip.is_ipv4())
            .or_else(|| c.first())
            .map(|i| i.ip)
    };
    match addr {
        Addr::Ip(ip) => Some(*ip),
        Addr::Auto => None,
        Addr::Iface(n) => best(ifs.iter().filter(|i| &i.name == n).filter(ok).collect()),
        Addr::First => {
            let c: Vec<&IfAddr> = ifs
                .iter()
                .filter(|i| i.up && !i.loopback)
                .filter(ok)
                .collect();
            let v4 = c.iter().find(|i| i.ip.is_ipv4()).copied();
            v4.or_else(|| c.first().copied()).map(|i| i.ip)
        }
    }
}

/// The network interface a device's GID belongs to (sysfs `ndevs/0`): the
/// interface holding its address; every 127/8 address is on loopback.
pub fn netdev(addr: &Addr, ifs: &[IfAddr]) -> Option<String> {
    if let Addr::Iface(n) = addr {
        return Some(n.clone());
    }
    let ip = match addr {
        Addr::Auto => None,
        a => Some(pick(a, ifs)?),
    };
    let hit = |i: &&IfAddr| match ip {
        None => i.loopback,
        Some(ip) if ip == i.ip => true,
        Some(IpAddr::V4(a)) => a.is_loopback() && i.loopback,
        Some(_) => false,
    };
    ifs.iter().find(hit).map(|i| i.name.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ifs() -> Vec<IfAddr> {
        let a = |name: &str, ip: &str, loopback, up| IfAddr {
            name: name.into(),
            ip: ip.parse().unwrap(),
            loopback,
            up,
        };
        vec![
            a("lo", "127.0.0.1", true, true),
            a("lo", "::1", true, true),
            a("down0", "10.9.9.9", false, false),
            a("eth0", "fe80::1", false, true),
            a("eth0", "2001:db8::5", false, true),
            a("eth0", "10.0.0.5", false, true),
            a("va", "198.18.0.1", false, true),
        ]
    }

    #[test]
    fn addresses() {
        assert_eq!(Addr::parse("auto"), Some(Addr::Auto));
        assert_eq!(Addr::parse(" first "), Some(Addr::First));
        assert_eq!(Addr::parse("if:va"), Some(Addr::Iface("va".into())));
        assert_eq!(Addr::parse("if:"), None);
        assert_eq!(
            Addr::parse("10.0.0.1"),
            Some(Addr::Ip("10.0.0.1".parse().unwrap()))
        );
        assert_eq!(Addr::parse("10.0.0"), None);
        let l = ifs();
        assert_eq!(pick(&Addr::First, &l), Some("10.0.0.5".parse().unwrap()));
        assert_eq!(
            pick(&Addr::Iface("va".into()), &l),
            Some("198.18.0.1".parse().unwrap())
        );
        assert_eq!(pick(&Addr::Iface("nope".into()), &l), None);
        assert_eq!(netdev(&Addr::Auto, &l).as_deref(), Some("lo"));
        assert_eq!(
            netdev(&Addr::Ip("127.0.0.7".parse().unwrap()), &l).as_deref(),
            Some("lo")
        );
        assert_eq!(
            netdev(&Addr::Ip("10.0.0.5".parse().unwrap()), &l).as_deref(),
            Some("eth0")
        );
        assert_eq!(netdev(&Addr::Ip("10.0.0.6".parse().unwrap()), &l), None);
        assert_eq!(netdev(&Addr::First, &l).as_deref(), Some("eth0"));
        assert_eq!(netdev(&Addr::Iface("va".into()), &l).as_deref(), Some("va"));
    }

    #[test]
    fn device_lists() {
        let none = |_: &str| None;
        let env = |k: &str| (k == "SOFTRDMA_ADDR").then(|| "if:va".to_string());
        assert_eq!(
            devices(&env, &none),
            vec![Dev {
                name: "softrdma0".into(),
                addr: Addr::Iface("va".into())
            }]
        );
        let conf = "# x\nroce7 127.0.0.217 mtu=2048\nroce8 auto\nbad\nroce9 first # c\n";
        let env = |k: &str| (k == "SOFTRDMA_CONFIG").then(|| "/c".to_string());
        let read = |p: &str| (p == "/c").then(|| conf.to_string());
        let l = devices(&env, &read);
        let names: Vec<_> = l.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["roce7", "roce8", "roce9"]);
        // A named config file that cannot be read: no devices.
        assert!(devices(&env, &none).is_empty());
        // Nothing configured: softrdma0 on loopback.
        assert_eq!(devices(&none, &none)[0].addr, Addr::Auto);
    }
}
