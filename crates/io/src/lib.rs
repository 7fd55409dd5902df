//! Datagram I/O for softrdma: moves UDP datagrams and nothing else.
//!
//! One RDMA device's progress thread owns a [`UdpSocket`] and a [`Poller`].
//! It receives batches with [`UdpSocket::recv`], hands them to the sans-I/O
//! core, sends what the core produces with [`UdpSocket::send`] or
//! [`UdpSocket::send_gather`], busy-polls while there is work, and sleeps
//! in [`Poller::wait`] when idle; application threads wake it through a
//! [`Waker`]. Linux only (`sendmmsg`, `recvmmsg`, UDP GSO/GRO, epoll,
//! eventfd); this crate is the project's only home for socket `unsafe`,
//! each block with a `SAFETY` comment. The design follows quinn-udp's
//! `unix.rs` (fixed batch size, GSO/GRO with fallback, send errors counted
//! and dropped).
//!
//! ```
//! use std::io::IoSliceMut;
//! use softrdma_io::{Poller, RecvMeta, Transmit, UdpSocket, BATCH_SIZE, GRO_BUF_LEN};
//!
//! let a = UdpSocket::bind("127.0.0.1:0".parse()?)?;
//! let b = UdpSocket::bind("127.0.0.1:0".parse()?)?;
//! let run = vec![7u8; 3 * 1000 + 10]; // three 1000-byte datagrams and a 10-byte one
//! let mut t = Transmit::new(b.local_addr(), &run);
//! t.segment_size = Some(1000); // one GSO send
//! t.tos = 0x02; // ECT(0)
//! assert_eq!(a.send(&[t])?, 1);
//!
//! let mut poller = Poller::new(&b)?;
//! let mut storage = vec![vec![0u8; GRO_BUF_LEN]; BATCH_SIZE];
//! let mut meta = [RecvMeta::default(); BATCH_SIZE];
//! let mut datagrams = Vec::new();
//! while datagrams.len() < 4 {
//!     let mut bufs: Vec<_> = storage.iter_mut().map(|s| IoSliceMut::new(s)).collect();
//!     match b.recv(&mut bufs, &mut meta) {
//!         Ok(n) => {
//!             for (m, buf) in meta[..n].iter().zip(&storage) {
//!                 assert_eq!((m.addr, m.tos), (a.local_addr(), 0x02));
//!                 datagrams.extend(m.datagrams(buf).map(<[u8]>::len));
//!             }
//!         }
//!         Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
//!             poller.wait(Some(std::time::Duration::from_secs(5)))?;
//!         }
//!         Err(e) => return Err(e.into()),
//!     }
//! }
//! assert_eq!(datagrams, [1000, 1000, 1000, 10]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Sending
//!
//! A [`Transmit`] is one datagram, or with `segment_size` a run of
//! equal-sized datagrams (the last may be shorter) to one destination that
//! goes to the kernel as one UDP GSO super-datagram. A [`GatherTransmit`]
//! is the same with the payload in several slices (header, payload straight
//! from registered memory, ICRC), so nothing is copied together; segment
//! boundaries are byte offsets of the concatenation. Per datagram: TOS /
//! traffic class, TTL / hop limit and source address, as control messages.
//!
//! `send` returns how many transmits it consumed. Fewer than given means the
//! socket buffer is full; anything else that fails (no route, EMSGSIZE, ...)
//! is counted in [`Stats`] and dropped, because the RDMA transport
//! retransmits. If the kernel refuses a GSO send (EIO / EINVAL), GSO is
//! switched off for the socket and the run is split in user space.
//!
//! # Receiving
//!
//! `recv` fills up to [`BATCH_SIZE`] buffers with one `recvmmsg`. With GRO,
//! one buffer may hold several datagrams of one sender, `stride` bytes each
//! (the last may be shorter); [`RecvMeta::datagrams`] splits them. Each
//! [`RecvMeta`] also gives the destination address (which GID), TOS and TTL.
//!
//! # What the kernel puts on the wire (measured)
//!
//! The RoCE v2 ICRC covers the IPv4 *identification* and *flags* fields
//! (TOS, TTL and the header checksum are masked), so whoever computes an
//! ICRC must know the identification the kernel will write. Test
//! `tests/netns.rs::ipv4_identification_on_the_wire` (root; skips loudly
//! otherwise) captures our own sends with an AF_PACKET socket; on Linux
//! 6.18 it finds, for an unconnected socket with `IP_PMTUDISC_DO`:
//!
//! | path | single datagram | UDP GSO run (4 × 1000 B + 500 B) |
//! | --- | --- | --- |
//! | loopback (`lo`, sender's outgoing frames) | id 0, DF | one 4,500-byte frame, id 0, DF (never segmented) |
//! | veth between two namespaces (frames at the peer) | id 0, DF | one 4,500-byte frame, id 0, DF (veth passes GSO packets whole) |
//! | veth with `gso_max_segs 1` (software segmentation, like a NIC without USO) | id 0, DF | five frames, ids 0, 1, 2, 3, 4, each DF |
//!
//! So: **a single DF datagram from an unconnected socket carries
//! identification 0; segment *i* of a GSO run carries identification *i*
//! (the run's base, 0, plus the segment index), DF on every segment.** The
//! kernel's `ip_select_ident_segs` gives 0 to DF datagrams of unconnected
//! sockets and `inet_gso_segment` numbers segments upward from the base.
//! Without DF (`IP_PMTUDISC_DONT`, checked by hand with the same test) the
//! identifications come from the kernel's hashed per-destination counter
//! (e.g. 5661, 5662, ...), unpredictable for the sender. A *connected*
//! socket uses a per-socket counter instead; this crate never connects.
//!
//! Consequence for the engine: **the ICRC of GSO segment *i* must be
//! computed with identification *i***, not 0. Whether a run reaches the peer
//! segmented depends on the path: a NIC without UDP segmentation offload,
//! or a receiving socket without GRO (Linux rxe's tunnel socket, for
//! instance: the kernel then segments on receive, `udp_rcv_segment`, with
//! the same numbering — read from the kernel source, not captured), sees
//! ids 0, 1, 2, ...; a peer that verifies the ICRC over the real header
//! drops every segment after the first if all were computed with 0.
//!
//! A receiver on a UDP socket never sees the identification, and peers such
//! as Linux rxe fill it from the kernel's hashed generator, not 0; GRO also
//! hides the identifications of the datagrams it merges. The receiving side
//! therefore cannot assume a value: `softrdma_wire::icrc::solve_ipv4_id`
//! recovers the identification that makes the ICRC match.
//!
//! IPv6: with `UDP_NO_CHECK6_TX` (the default, [`SocketConfig::ipv6_zero_checksum_tx`])
//! the UDP checksum on the wire is 0, like rxe's (test
//! `ipv6_zero_udp_checksum_on_the_wire`), and `UDP_NO_CHECK6_RX` makes the
//! socket accept such datagrams, which a default Linux socket drops
//! (`tests/loopback.rs::ipv6_zero_checksum_datagrams_are_accepted`). But
//! the kernel refuses UDP GSO on a socket with zero IPv6 checksums
//! (EINVAL), so a default IPv6 socket has no GSO; turn the option off to
//! get GSO with real checksums (a Linux receiver, rxe included, verifies
//! and accepts a non-zero checksum; RFC 6935 zero-checksum receivers are
//! expected to as well).
//!
//! # Intra-host path (not built)
//!
//! Two softrdma processes on one host still pay for two kernel crossings
//! and two copies per datagram. A shared-memory path could bypass the
//! kernel: at connection setup, when both ends find the peer address is
//! local, one side creates a `memfd` holding two single-producer /
//! single-consumer rings of fixed-size slots (datagram bytes plus a small
//! `RecvMeta`) and passes it over a Unix socket (`SCM_RIGHTS`) together
//! with one eventfd per direction for wake-ups when the consumer sleeps.
//! Slots carry the same RoCE datagrams, so the core and ICRC logic are
//! unchanged and a capture still reads as RoCE. The link would implement
//! the same send/recv/wait interface as [`UdpSocket`]; the wake protocol is
//! the one [`Waker`] uses (set a flag, write the eventfd only if it was
//! clear). Going further, payloads of RDMA WRITE/READ could be copied
//! directly between registered regions if both processes map each other's
//! memory (`process_vm_writev`, or regions allocated from shared memfds),
//! which keeps "zero copies beyond the wire" with a single copy in total.
//!
//! # Measured
//!
//! `cargo run --release -p softrdma-io --example udp_bw` on the project's
//! 2-vCPU VM (Linux 6.18), two threads, 127.0.0.1, datagrams of 4,096 B
//! payload + 32 B RoCE headers, at most 1,024 datagrams in flight, other
//! builds sharing the machine (best run / typical under load):
//!
//! | mode | payload GB/s | sender GB per CPU-s | receiver GB per CPU-s |
//! | --- | --- | --- | --- |
//! | `std::net::UdpSocket`, one datagram per syscall | 1.3 / 0.7-1.6 | 2.3-2.6 | 2.4-2.8 |
//! | `sendmmsg`/`recvmmsg`, 32 per call | 1.4 / 0.9-1.4 | 2.6-2.8 | 2.7-2.9 |
//! | GSO (15 × 4,128 B per send), receiver without GRO | 3.1 / 1.7-2.8 | 5-6 | 4.6-5.1 |
//! | GSO + GRO | 7.9 / 4.4-5.1 | 8-14 | 8.3-8.8 |
//! | GSO + GRO, gathered header / payload / ICRC slices | 7.0 / 4.3-5.1 | 7-12 | 7.2-7.4 |
//!
//! The receiver's copy out of the kernel is the bound: one core takes about
//! 8.5 GB/s with GRO. Ping-pong RTT, 64 B / 4,128 B, both threads
//! busy-polling: 5.1-5.5 / 5.6-7.4 µs (std sockets spinning on `recv_from`:
//! 4.1-4.3 / 4.6-6.6 µs; the difference is `recvmmsg` and control-message
//! work per poll); sleeping in [`Poller::wait`] instead: 11-90 µs.

#![cfg_attr(not(test), deny(clippy::undocumented_unsafe_blocks))]

#[cfg(not(target_os = "linux"))]
compile_error!("softrdma-io supports Linux only (sendmmsg/recvmmsg, UDP GSO/GRO, epoll, eventfd)");

pub mod cma;
mod fd;
pub mod host;
mod mcast;
pub mod mem;
mod netdev;
mod poll;
mod process;
mod recv;
mod ring;
mod send;
mod socket;
mod spawn;
mod sys;
mod unix;

pub use fd::{EventFd, FdWatch};
pub use mcast::interface_of;
pub use netdev::{interface_mtu, path_mtu};
pub use poll::{PollRegistry, Poller, Readiness, ReadySet, Waker};
pub use process::{
    at_exit, at_fork, fork_generation, is_nonblocking, read_blocking, readable_now, signal,
    sys_read, sys_write, wait_readable, watch_forks, with_signals_blocked, NoCancel,
};
pub use recv::RecvMeta;
pub use ring::{Ring, RingFull, Shm, RING_MAX, RING_MIN};
pub use send::{GatherTransmit, IoPiece, Transmit};
pub use socket::{
    max_gso_segments_for, SocketConfig, Stats, UdpSocket, BATCH_SIZE, GRO_BUF_LEN,
    MAX_GSO_SEGMENTS, MAX_UDP_PAYLOAD_V4, MAX_UDP_PAYLOAD_V6,
};
pub use spawn::{detach, euid, spawn_detached};
pub use unix::{netns_id, poll_fd, PeerCred, PidFd, SeqPacket, MAX_FDS, MAX_NAME};
