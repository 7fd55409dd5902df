//! Links that wrap links (DESIGN.md; smoltcp's `phy::FaultInjector` has
//! the idea): what a faulty network does to datagrams, as a sans-I/O piece
//! any driver puts between a device and its socket.
//!
//! - [`Rng`], [`fate`]: the dice and the per-datagram model of a lossy,
//!   duplicating, reordering, corrupting, delaying link — the simulator's
//!   link (softrdma-sim) and the engine's injector throw the same dice in
//!   the same order.
//! - [`DelayQueue`]: datagrams held until a time (the simulator's wire,
//!   the injector's delayed and reordered datagrams).
//! - [`Injector`]: one direction (send or receive) of a device running a
//!   [`FaultSpec`] (softrdma-config's language, `SOFTRDMA_FAULTS`): the
//!   rates, and the targeted faults that act on RoCE packets parsed with
//!   softrdma-wire — lose the next N ACKs, answer the next N requests of a
//!   kind with a NAK or an RNR NAK (valid packets with their ICRC, sent as
//!   the device's responder would), never inside the transport's state
//!   machines. Every fault is counted ([`FaultCounters`]) and, when asked
//!   for, described ([`FaultEvent`]) for the log.
//!
//! No I/O, no clock (the driver passes nanoseconds), no `unsafe`.
#![forbid(unsafe_code)]

mod counters;
mod fate;
mod injector;
mod queue;

pub use counters::FaultCounters;
pub use fate::{fate, Fate, Rng};
pub use injector::{
    AnswerPacket, FaultEvent, FaultKind, Injector, Responder, Step, MAX_HELD_BYTES,
};
pub use queue::DelayQueue;
pub use softrdma_config::faults::{
    Answer, Direction, FaultRule, FaultSpec, OpClass, Rates, Targeted,
};
