//! Device addresses as configured (`ADDRESS`: an IP, `auto`, `if:NAME`,
//! `first`) and their resolution against this host's interfaces.

use std::fmt;
use std::net::IpAddr;

/// What an `ADDRESS` accepts (for error messages).
pub const ADDR_WANT: &str = "an IP address, auto, first or if:NAME";

/// Longest interface name (`IFNAMSIZ` less the NUL).
const IFNAME_MAX: usize = 15;

/// Where a device's address comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AddrSpec {
    /// A free loopback address 127.0.0.x, picked when the device opens
    /// (several processes on one host need no setup).
    Auto,
    /// This address.
    Ip(IpAddr),
    /// The address of this interface (IPv4 first).
    Iface(String),
    /// The first non-loopback interface that is up (IPv4 first).
    First,
}

impl AddrSpec {
    /// Parses an `ADDRESS` (surrounding blanks ignored).
    pub fn parse(s: &str) -> Result<AddrSpec, &'static str> {
        let s = s.trim();
        if s == "auto" {
            Ok(AddrSpec::Auto)
        } else if s == "first" {
            Ok(AddrSpec::First)
        } else if let Some(n) = s.strip_prefix("if:") {
            let ok = !n.is_empty() && n.len() <= IFNAME_MAX && !n.contains(['/', ' ']);
            ok.then(|| AddrSpec::Iface(n.to_string())).ok_or(ADDR_WANT)
        } else {
            s.parse().map(AddrSpec::Ip).map_err(|_| ADDR_WANT)
        }
    }

    /// The address this spec gives on a host with interfaces `ifs`
    /// (`None` for [`AddrSpec::Auto`]), or why there is none.
    pub fn resolve(&self, ifs: &[IfAddr]) -> Result<Option<IpAddr>, String> {
        let names = || {
            let mut v: Vec<&str> = ifs.iter().map(|i| i.name.as_str()).collect();
            v.dedup();
            v.join(" ")
        };
        match self {
            AddrSpec::Auto => Ok(None),
            AddrSpec::Ip(ip) => Ok(Some(*ip)),
            AddrSpec::Iface(n) => pick(ifs.iter().filter(|i| &i.name == n))
                .map(Some)
                .ok_or_else(|| {
                    format!("no interface {n} with an address (interfaces: {})", names())
                }),
            AddrSpec::First => pick(ifs.iter().filter(|i| i.up && !i.loopback))
                .map(Some)
                .ok_or_else(|| {
                    format!(
                        "no interface other than loopback has an address (interfaces: {})",
                        names()
                    )
                }),
        }
    }

    /// The network interface a device's GID belongs to (sysfs `ndevs/0`):
    /// the interface holding its address; every 127/8 address is on
    /// loopback.
    pub fn netdev(&self, ifs: &[IfAddr]) -> Option<String> {
        if let AddrSpec::Iface(n) = self {
            return Some(n.clone());
        }
        let ip = self.resolve(ifs).ok()?;
        let hit = |i: &&IfAddr| match ip {
            None => i.loopback,
            Some(ip) if ip == i.ip => true,
            Some(IpAddr::V4(a)) => a.is_loopback() && i.loopback,
            Some(_) => false,
        };
        ifs.iter().find(hit).map(|i| i.name.clone())
    }
}

impl fmt::Display for AddrSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddrSpec::Auto => f.write_str("auto"),
            AddrSpec::Ip(ip) => write!(f, "{ip}"),
            AddrSpec::Iface(n) => write!(f, "if:{n}"),
            AddrSpec::First => f.write_str("first"),
        }
    }
}

/// The usable address among `c`, IPv4 first. A link-local IPv6 address
/// needs a scope, which a GID cannot carry.
fn pick<'a>(c: impl Iterator<Item = &'a IfAddr>) -> Option<IpAddr> {
    let c: Vec<IpAddr> = c
        .map(|i| i.ip)
        .filter(|ip| !matches!(ip, IpAddr::V6(a) if a.segments()[0] & 0xffc0 == 0xfe80))
        .collect();
    c.iter().find(|a| a.is_ipv4()).or(c.first()).copied()
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
    softrdma_io::host::addresses()
        .into_iter()
        .map(|a| IfAddr {
            name: a.name,
            ip: a.ip,
            loopback: a.loopback,
            up: a.up,
        })
        .collect()
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
        assert_eq!(AddrSpec::parse(" auto "), Ok(AddrSpec::Auto));
        assert_eq!(AddrSpec::parse(" first "), Ok(AddrSpec::First));
        assert_eq!(AddrSpec::parse("if:va"), Ok(AddrSpec::Iface("va".into())));
        assert_eq!(AddrSpec::parse("if:"), Err(ADDR_WANT));
        assert!(AddrSpec::parse("if:a-name-far-too-long").is_err());
        assert_eq!(
            AddrSpec::parse("10.0.0.1"),
            Ok(AddrSpec::Ip("10.0.0.1".parse().unwrap()))
        );
        assert!(AddrSpec::parse("10.0.0").is_err());
        for s in ["auto", "first", "if:eth0", "10.0.0.1", "::1"] {
            assert_eq!(AddrSpec::parse(s).unwrap().to_string(), s);
        }
        let l = ifs();
        let ip = |s: &str| Ok(Some(s.parse().unwrap()));
        assert_eq!(AddrSpec::First.resolve(&l), ip("10.0.0.5"));
        assert_eq!(AddrSpec::Iface("va".into()).resolve(&l), ip("198.18.0.1"));
        assert_eq!(AddrSpec::Iface("lo".into()).resolve(&l), ip("127.0.0.1"));
        let e = AddrSpec::Iface("nope".into()).resolve(&l).unwrap_err();
        assert!(
            e.contains("no interface nope") && e.contains("lo down0 eth0 va"),
            "{e}"
        );
        assert!(AddrSpec::First.resolve(&l[..2]).is_err());
        assert_eq!(AddrSpec::Auto.resolve(&l), Ok(None));
        let nd = |a: AddrSpec| a.netdev(&l);
        assert_eq!(nd(AddrSpec::Auto).as_deref(), Some("lo"));
        assert_eq!(
            nd(AddrSpec::parse("127.0.0.7").unwrap()).as_deref(),
            Some("lo")
        );
        assert_eq!(
            nd(AddrSpec::parse("10.0.0.5").unwrap()).as_deref(),
            Some("eth0")
        );
        assert_eq!(nd(AddrSpec::parse("10.0.0.6").unwrap()), None);
        assert_eq!(nd(AddrSpec::First).as_deref(), Some("eth0"));
        assert_eq!(nd(AddrSpec::Iface("va".into())).as_deref(), Some("va"));
        // This host: loopback has 127.0.0.1 (IPv4 first).
        assert_eq!(
            AddrSpec::Iface("lo".into()).resolve(&interfaces()),
            ip("127.0.0.1")
        );
        if let Ok(Some(a)) = AddrSpec::First.resolve(&interfaces()) {
            assert!(!a.is_loopback(), "{a}");
        }
    }
}
