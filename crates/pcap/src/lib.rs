//! Packet capture files, in one place for softrdma: the reader behind
//! `softrdma dump` and every test that looks into a capture, the writer
//! behind `SOFTRDMA_PCAP`, and the link-layer headers between a captured
//! frame and its IP datagram.
//!
//! - [`CaptureReader`] ([`read`]): classic pcap (both byte orders, µs and
//!   ns) and pcapng (sections in either byte order, several interfaces with
//!   their link types, `if_tsresol` / `if_tsoffset`, Enhanced, Simple and
//!   obsolete Packet Blocks). It never allocates from a length in the file,
//!   and every error carries the byte offset of the record or field at
//!   fault.
//! - [`PcapWriter`] and [`NgWriter`] ([`write`]), and [`create_private`]
//!   for the file: captures hold payloads, keys and PSNs, so they are
//!   their owner's only (mode 0600).
//! - [`link::network`]: from a frame of any of the [`linktype`]s the reader
//!   meets to its IP datagram.
//!
//! Why not the `pcap-file` crate: its 2.0 release reads every pcapng
//! timestamp as nanoseconds whatever the interface's `if_tsresol`; its 3.0
//! candidate scales binary resolutions wrongly, panics on a negative
//! `if_tsoffset` or an `if_tsresol` of 2^-30, allocates 8 MB per reader,
//! and its errors say nothing of where in the file they are.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod link;
pub mod read;
pub mod write;

pub use read::{
    CaptureReader, Error, ErrorKind, Format, Frame, Interface, Timestamp, MAX_RECORD_LEN,
};
#[cfg(unix)]
pub use write::create_private;
pub use write::{IdbOptions, NgWriter, PcapHeader, PcapWriter, PRIVATE_MODE};

/// Link-layer header types (the LINKTYPE_* registry of tcpdump.org).
pub mod linktype {
    /// BSD loopback: a 4-byte address family in the writer's byte order.
    pub const NULL: u32 = 0;
    /// Ethernet (possibly with 802.1Q / 802.1ad tags).
    pub const ETHERNET: u32 = 1;
    /// Raw IP, version from the first nibble.
    pub const RAW: u32 = 101;
    /// OpenBSD loopback: a 4-byte big-endian address family.
    pub const LOOP: u32 = 108;
    /// Linux "cooked" capture, version 1 (16-byte header).
    pub const LINUX_SLL: u32 = 113;
    /// Raw IPv4.
    pub const IPV4: u32 = 228;
    /// Raw IPv6.
    pub const IPV6: u32 = 229;
    /// Linux "cooked" capture, version 2 (20-byte header).
    pub const LINUX_SLL2: u32 = 276;
}

const PCAP_MAGIC_US: u32 = 0xa1b2_c3d4;
const PCAP_MAGIC_NS: u32 = 0xa1b2_3c4d;
const PCAP_HEADER_LEN: usize = 24;
const PCAP_RECORD_HEADER_LEN: usize = 16;

const NG_SHB: u32 = 0x0a0d_0d0a;
const NG_BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;
const NG_IDB: u32 = 1;
const NG_OPB: u32 = 2;
const NG_SPB: u32 = 3;
const NG_EPB: u32 = 6;
const NG_OPT_END: u16 = 0;
const NG_OPT_IF_TSRESOL: u16 = 9;
const NG_OPT_IF_TSOFFSET: u16 = 14;
/// Default `if_tsresol`: microseconds.
const NG_DEFAULT_TSRESOL: u8 = 6;
