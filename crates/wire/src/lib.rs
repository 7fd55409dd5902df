//! RoCE v2 on the wire: the InfiniBand transport headers (IBA vol. 1 ch. 9),
//! their encapsulation in IPv4/IPv6 + UDP (IBA Annex A17) and the invariant
//! CRC that protects them.
//!
//! Every header comes in two forms, after smoltcp:
//! - a zero-copy *view* (`Bth<T>`, `Reth<T>`, …) over any `T: AsRef<[u8]>`,
//!   with getters (and setters when `T: AsMut<[u8]>`); `new_checked` validates
//!   the length once, after which no accessor panics;
//! - a `Copy` *Repr* (`BthRepr`, …) with `parse`, `emit` and `buffer_len`.
//!
//! [`packet`] puts the headers of one transport packet together using the
//! [`opcode`] table; [`ip`] wraps a packet in IP/UDP and [`icrc`] computes the
//! ICRC; [`pretty`] prints one line per packet.
//!
//! [`mad`] is the management datagram header that QP 1 traffic starts with,
//! and [`cm`] the communication manager's messages (REQ, REP, RTU, …) with
//! the rdma_cm private-data header and service IDs.
//!
//! The crate does no I/O and has no `unsafe`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bth;
pub mod cm;
pub mod ext;
pub mod grh;
pub mod icrc;
pub mod ip;
pub mod mad;
pub mod opcode;
pub mod packet;
pub mod pretty;
pub mod types;

pub use bth::{Bth, BthRepr};
pub use ext::{
    Aeth, AethRepr, AtomicAckEth, AtomicEth, AtomicEthRepr, Deth, DethRepr, Feth, FethRepr,
    NakCode, Reth, RethRepr, Syndrome, XrcEth,
};
pub use grh::{Grh, GrhRepr};
pub use icrc::Icrc;
pub use ip::{DatagramRepr, IpRepr, RoceDatagram, ROCE_V2_PORT};
pub use mad::{Mad, MadHeaderRepr, MAD_LEN};
pub use opcode::{Headers, Opcode, OpcodeInfo, Operation, Position, Transport};
pub use packet::{IbPacket, PacketRepr, ICRC_LEN};
pub use types::{Gid, LKey, Msn, PKey, Psn, QKey, Qpn, RKey};

/// Why a buffer is not a valid packet or header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The buffer is shorter than the headers it must hold.
    #[error("truncated packet")]
    Truncated,
    /// The BTH opcode is not one softrdma knows.
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// A field holds a value the format forbids (wrong IP version, a length
    /// field that disagrees with the buffer, a UDP port that is not RoCE v2…).
    #[error("malformed packet")]
    Malformed,
    /// The BTH transport version is not 0.
    #[error("unsupported BTH transport version")]
    BadTver,
    /// A PadCnt that does not fit the payload.
    #[error("pad count larger than payload")]
    BadPad,
    /// The Repr cannot be emitted: a header the opcode requires is missing,
    /// or one it forbids is present; or a value does not fit its field.
    #[error("headers do not match the opcode")]
    BadRepr,
}

/// Result type of this crate.
pub type Result<T> = core::result::Result<T, Error>;

/// Big-endian field helpers shared by the header views. Callers have checked
/// the length, so the slicing below cannot fail.
pub(crate) mod be {
    #[inline]
    pub fn u16(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }
    #[inline]
    pub fn u24(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
    }
    #[inline]
    pub fn u32(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }
    #[inline]
    pub fn u64(b: &[u8], at: usize) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[at..at + 8]);
        u64::from_be_bytes(a)
    }
    #[inline]
    pub fn set_u16(b: &mut [u8], at: usize, v: u16) {
        b[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn set_u24(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
    }
    #[inline]
    pub fn set_u32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn set_u64(b: &mut [u8], at: usize, v: u64) {
        b[at..at + 8].copy_from_slice(&v.to_be_bytes());
    }
}

/// Declares a header view type with its constructors and `check_len`.
macro_rules! view {
    ($(#[$m:meta])* $name:ident, $len:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Length of the header in bytes.
            pub const LEN: usize = $len;
            /// Wraps a buffer without checking its length; accessors may
            /// panic if it is too short. Prefer [`Self::new_checked`].
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }
            /// Wraps a buffer after checking that it holds the whole header.
            pub fn new_checked(buffer: T) -> $crate::Result<Self> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }
            /// Fails with [`Error::Truncated`](crate::Error::Truncated) when
            /// the buffer is shorter than the header.
            pub fn check_len(&self) -> $crate::Result<()> {
                if self.buffer.as_ref().len() < Self::LEN {
                    Err($crate::Error::Truncated)
                } else {
                    Ok(())
                }
            }
            /// Returns the underlying buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}
pub(crate) use view;
