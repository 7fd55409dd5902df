//! softrdma: RDMA in software.
//!
//! The InfiniBand transport as RoCE v2 carries it (IBTA headers over UDP port
//! 4791, with ICRC), run in user space behind the verbs model: protection
//! domains, registered memory regions, completion queues, RC/UC/UD queue
//! pairs, SEND/RECV, RDMA WRITE/READ, atomics, immediate data, shared
//! receive queues. Its packets are the bytes a RoCE v2 NIC or Linux rxe
//! sends, so it talks to them.
//!
//! ```no_run
//! use softrdma::{Access, ConnectOptions, Device, DeviceOptions, QpType, SendWr, WrOpcode};
//! # fn main() -> softrdma::Result<()> {
//! let dev = Device::open(DeviceOptions::default())?;          // 127.0.0.x:4791, picked for you
//! let pd = dev.alloc_pd()?;
//! let mr = pd.alloc_mr(1 << 20, Access::LOCAL_WRITE)?;
//! let cq = dev.create_cq(256, None)?;
//! // Out-of-band exchange with a server started with `Listener::accept_rc`.
//! let conn = softrdma::cm::connect_rc("127.0.0.1:18515", &pd, &cq, QpType::Rc, Some(&mr),
//!                                     &ConnectOptions::default())?;
//! mr.write(0, b"hello");
//! let mut wr = SendWr::new(1, WrOpcode::RdmaWrite);
//! wr.sg_list = vec![mr.sge(0, 5)];
//! wr.remote_addr = conn.remote.va;
//! wr.rkey = conn.remote.rkey;
//! conn.qp.post_send(wr)?;
//! let wc = cq.wait(1, std::time::Duration::from_secs(5))?;
//! assert_eq!(wc[0].status, softrdma::WcStatus::Success);
//! # Ok(()) }
//! ```
//!
//! One-sided operations land while the target program does nothing: each
//! device has a progress thread (see [`engine`](crate) docs in the source).
//! Several processes on one host need no setup: each device takes its own
//! loopback address. `SOFTRDMA_ADDR` binds a real interface instead, and
//! `SOFTRDMA_PCAP=FILE` captures every packet.

#![warn(missing_docs)]

pub mod cm;
mod cm_hook;
pub mod config;
mod device;
mod engine;
mod error;
mod event;
mod fork;
pub mod host;
mod log;
mod mcast;
pub mod memory;
pub mod pcap;
mod privilege;
mod qp;
pub mod rdma_cm;
#[cfg(feature = "tokio")]
mod stream;
mod sync;
mod verbs;
mod xrc;

pub use device::{Device, DeviceOptions, PortAttr, GID_TABLE_LEN, ROCE_PORT};
pub use error::{ConnectError, Error, Result};
pub use event::CompletionChannel;
/// An epoll descriptor mirroring another one's readability with an
/// O_NONBLOCK flag of its own: what a C library hands a program for
/// [`CompletionChannel`]'s or [`Device::async_fd`]'s descriptor.
pub use softrdma_io::{at_fork, FdWatch, NoCancel};
pub use softrdma_proto::device::{guid_of as node_guid_of, DeviceAttr};
/// Limits of the device (queue depths, SGEs, inline data, message size).
pub use softrdma_proto::limits;
pub use softrdma_proto::{
    Access, AddressVector, Advice, AsyncEvent, AttrMask, Counters, CqId, FlushSpec, Mtu, MwBind,
    MwId, MwType, OdpCaps, QpAttr, QpCap, QpState, QpType, RecvWr, SendFlags, SendWr, Sge, UdDest,
    Wc, WcFlags, WcOpcode, WcStatus, WrOpcode, XrcdId,
};
/// GIDs and the GRH area of UD receives: `gid_of`, `addr_of_gid`,
/// `ud_grh_source`, `GRH_LEN`.
pub use softrdma_wire::grh;
pub use softrdma_wire::{Gid, PKey, Psn, QKey, Qpn, RKey};
#[cfg(feature = "tokio")]
pub use stream::WcStream;
pub use verbs::{
    AddressHandle, CompletionQueue, ConnectOptions, MemoryRegion, MemoryWindow, ProtectionDomain,
    QpBuilder, QpEndpoint, QueuePair, SharedReceiveQueue, EMPTY_WC,
};
pub use xrc::{XrcDomain, XrcTgtQp};
