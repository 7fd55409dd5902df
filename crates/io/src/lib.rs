//! Datagram I/O for softrdma: moves UDP datagrams and nothing else.
//!
//! (Linux only.) Work in progress; findings are documented below.

#![cfg_attr(not(test), deny(clippy::undocumented_unsafe_blocks))]

#[cfg(not(target_os = "linux"))]
compile_error!("softrdma-io supports Linux only (sendmmsg/recvmmsg, UDP GSO/GRO, epoll, eventfd)");

mod poll;
mod recv;
mod send;
mod socket;
mod sys;

pub use poll::{Poller, Readiness, Waker};
pub use recv::RecvMeta;
pub use send::{GatherTransmit, Transmit};
pub use socket::{
    max_gso_segments_for, SocketConfig, Stats, UdpSocket, BATCH_SIZE, GRO_BUF_LEN,
    MAX_GSO_SEGMENTS, MAX_UDP_PAYLOAD_V4, MAX_UDP_PAYLOAD_V6,
};
