//! Newtypes for the numbers the transport carries.
//!
//! PSNs and MSNs are 24-bit sequence numbers compared with serial-number
//! arithmetic (IBA 9.7.1: a PSN is "ahead" of another when it lies less than
//! half the space, 2^23, after it). QPNs are 24-bit too; keys are 32-bit. Each
//! is its own type so a key never ends up where a PSN belongs.

use core::cmp::Ordering;
use core::fmt;
use core::net::{IpAddr, Ipv6Addr};

/// Mask of the 24 bits used by PSNs, MSNs and QPNs.
pub const MASK_24: u32 = 0x00ff_ffff;
/// Half of the 24-bit sequence space: the serial comparison window.
pub const HALF_24: u32 = 0x0080_0000;

macro_rules! seq24 {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(u32);

        impl $name {
            /// Zero.
            pub const ZERO: Self = Self(0);
            /// Builds the value from the low 24 bits of `v` (higher bits are dropped).
            #[inline]
            pub const fn new(v: u32) -> Self {
                Self(v & MASK_24)
            }
            /// The 24-bit value.
            #[inline]
            pub const fn value(self) -> u32 {
                self.0
            }
            /// `self + n`, wrapping at 2^24.
            #[inline]
            #[must_use]
            pub const fn add(self, n: u32) -> Self {
                Self(self.0.wrapping_add(n) & MASK_24)
            }
            /// `self - n`, wrapping at 2^24.
            #[inline]
            #[must_use]
            pub const fn sub(self, n: u32) -> Self {
                Self(self.0.wrapping_sub(n) & MASK_24)
            }
            /// The next value.
            #[inline]
            #[must_use]
            pub const fn next(self) -> Self {
                self.add(1)
            }
            /// Forward distance from `earlier` to `self`, modulo 2^24.
            #[inline]
            pub const fn distance_from(self, earlier: Self) -> u32 {
                self.0.wrapping_sub(earlier.0) & MASK_24
            }
            /// Serial-number comparison: `Less` when `self` is behind `other`
            /// (within half the sequence space), `Greater` when ahead.
            #[inline]
            pub fn serial_cmp(self, other: Self) -> Ordering {
                let d = self.distance_from(other);
                if d == 0 {
                    Ordering::Equal
                } else if d < HALF_24 {
                    Ordering::Greater
                } else {
                    Ordering::Less
                }
            }
            /// `self` is strictly behind `other` in serial order.
            #[inline]
            pub fn before(self, other: Self) -> bool {
                self.serial_cmp(other) == Ordering::Less
            }
            /// `self` is strictly ahead of `other` in serial order.
            #[inline]
            pub fn after(self, other: Self) -> bool {
                self.serial_cmp(other) == Ordering::Greater
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:#08x})"), self.0)
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:#08x}", self.0)
            }
        }
    };
}

seq24!(
    /// Packet sequence number (24 bits, serial arithmetic).
    Psn
);
seq24!(
    /// Message sequence number carried in the AETH (24 bits, serial arithmetic).
    Msn
);

/// Queue pair number (24 bits). QP 1 is the general services QP (CM MADs).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Qpn(u32);

impl Qpn {
    /// QP1, the general services interface (connection manager MADs).
    pub const GSI: Qpn = Qpn(1);
    /// The destination QP of every multicast packet (IBA's multicast QPN,
    /// Linux's `IB_MULTICAST_QPN`): the packet goes to each QP of the
    /// device attached to the group its destination GID names.
    pub const MULTICAST: Qpn = Qpn(MASK_24);
    /// Builds a QPN from the low 24 bits of `v`.
    #[inline]
    pub const fn new(v: u32) -> Self {
        Self(v & MASK_24)
    }
    /// The 24-bit value.
    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }
}
impl fmt::Debug for Qpn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Qpn({:#08x})", self.0)
    }
}
impl fmt::Display for Qpn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#08x}", self.0)
    }
}

macro_rules! key32 {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
        pub struct $name(pub u32);
        impl $name {
            /// The raw 32-bit value.
            #[inline]
            pub const fn value(self) -> u32 {
                self.0
            }
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:#010x})"), self.0)
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:#010x}", self.0)
            }
        }
    };
}

key32!(
    /// Remote key: names a memory region (or window) to a remote peer.
    RKey
);
key32!(
    /// Local key: names a memory region in a local scatter/gather entry.
    LKey
);
key32!(
    /// Queue key of UD (and RD) queue pairs, carried in the DETH.
    QKey
);

/// Partition key (16 bits): bit 15 is the membership bit (1 = full member).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PKey(pub u16);

impl PKey {
    /// The default partition key, full membership (what RoCE v2 stacks use).
    pub const DEFAULT: PKey = PKey(0xffff);
    /// The raw 16-bit value.
    #[inline]
    pub const fn value(self) -> u16 {
        self.0
    }
    /// The 15-bit partition number without the membership bit.
    #[inline]
    pub const fn base(self) -> u16 {
        self.0 & 0x7fff
    }
    /// True for a full member (bit 15 set).
    #[inline]
    pub const fn full_member(self) -> bool {
        self.0 & 0x8000 != 0
    }
    /// IBA 10.9.3 / C9-42: two keys match when their 15-bit bases are equal,
    /// they are not the invalid key (base 0), and at least one is a full member.
    #[inline]
    pub const fn matches(self, other: PKey) -> bool {
        self.base() == other.base()
            && self.base() != 0
            && (self.full_member() || other.full_member())
    }
}
impl Default for PKey {
    fn default() -> Self {
        PKey::DEFAULT
    }
}
impl fmt::Debug for PKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PKey({:#06x})", self.0)
    }
}
impl fmt::Display for PKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#06x}", self.0)
    }
}

/// A 128-bit global identifier (IBA 4.1.1). Under RoCE v2 a GID is an IP
/// address: IPv6 as it is, IPv4 as the mapped address `::ffff:a.b.c.d`
/// (what Linux's `rdma_ip2gid` writes), which is how the GIDs in CM messages
/// look on the wire.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The all-zero GID (an absent path in a CM message).
    pub const ZERO: Gid = Gid([0; 16]);
    /// The GID of an IP address (IPv4 mapped into IPv6).
    pub const fn from_ip(ip: IpAddr) -> Gid {
        match ip {
            IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }
    /// The IP address of the GID: an IPv4-mapped GID gives the IPv4
    /// address, anything else the IPv6 address.
    pub fn to_ip(self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }
    /// The 16 bytes.
    pub const fn octets(self) -> [u8; 16] {
        self.0
    }
}
impl From<IpAddr> for Gid {
    fn from(ip: IpAddr) -> Gid {
        Gid::from_ip(ip)
    }
}
impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({})", Ipv6Addr::from(self.0))
    }
}
impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Ipv6Addr::from(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_wraps_and_compares_serially() {
        let a = Psn::new(0xff_fffe);
        let b = a.add(3);
        assert_eq!(b.value(), 1);
        assert!(a.before(b));
        assert!(b.after(a));
        assert_eq!(b.distance_from(a), 3);
        assert_eq!(a.sub(0xff_ffff).value(), 0xff_ffff);
        assert_eq!(Psn::new(0x1234_5678).value(), 0x34_5678);
        // Exactly half the space away counts as behind (distance >= 2^23).
        let h = Psn::new(0).add(HALF_24);
        assert!(h.before(Psn::new(0)));
        assert_eq!(Psn::new(7).serial_cmp(Psn::new(7)), Ordering::Equal);
    }

    #[test]
    fn gid_of_ip_addresses() {
        let v4: IpAddr = "198.18.0.2".parse().unwrap();
        let g = Gid::from_ip(v4);
        assert_eq!(
            g.0,
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 2]
        );
        assert_eq!(g.to_ip(), v4);
        assert_eq!(g.to_string(), "::ffff:198.18.0.2");
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(Gid::from_ip(v6).to_ip(), v6);
        assert_eq!(Gid::ZERO.to_ip(), "::".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn pkey_matching() {
        assert!(PKey(0xffff).matches(PKey(0x7fff)));
        assert!(!PKey(0x7fff).matches(PKey(0x7fff)));
        assert!(!PKey(0x8000).matches(PKey(0x8000)));
        assert!(!PKey(0xffff).matches(PKey(0x8001)));
    }
}
