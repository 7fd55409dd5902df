//! softrdma's RNIC as a sans-I/O state machine.
//!
//! A [`Device`] owns protection domains, memory regions, completion queues,
//! shared receive queues, address handles and RC/UC/UD queue pairs, and runs
//! the InfiniBand transport (IBA vol. 1 ch. 9–11, RoCE v2 Annex A17) for
//! them. It does no I/O, owns no thread and reads no clock.
//!
//! # Contract
//!
//! Inputs:
//! - verbs calls (`create_qp`, `modify_qp`, `post_send`, `poll_cq`, …);
//! - [`Device::handle_datagram`]: a received UDP payload with its addresses;
//! - [`Device::handle_timeout`]: the time has reached the last deadline.
//!
//! Outputs, polled after every input until they return `None`:
//! - [`Device::poll_transmit`]: the next UDP payload to send, written into
//!   the caller's buffer (BTH through ICRC), with its destination;
//! - [`Device::poll_timeout`]: the next deadline;
//! - [`Device::poll_event`]: asynchronous events and CQ notifications.
//!
//! Time is an [`Instant`] the driver supplies; the same inputs at the same
//! instants always give the same outputs (the simulator relies on it).
//! Application memory is reached through [`memory::RegionMemory`], so the
//! core needs no `unsafe`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod attr;
#[cfg(feature = "cm")]
pub mod cm_attr;
pub mod counters;
pub mod cq;
pub mod datagram;
pub mod device;
mod gsi;
pub mod limits;
pub mod mcast;
pub mod memory;
pub mod mw;
pub mod note;
mod qp;
pub mod qpn;
mod srq;
pub mod verbs;
mod xrc;

pub use counters::Counters;
pub use device::{
    Advice, Device, DeviceConfig, Event, Gather, OdpCaps, RecvMeta, ResponderView, Transmit,
    WriteChunking, MAX_GATHER,
};
pub use gsi::GsiMad;
pub use mcast::McastChange;
pub use memory::{Fault, RegionMemory, Rereg, VecMemory};
pub use mw::BindError;
pub use verbs::*;

/// A point in time in nanoseconds since an arbitrary origin chosen by the
/// driver (the engine's start, or the simulator's zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(pub u64);

impl Instant {
    /// `self + ns`, saturating.
    pub const fn add_ns(self, ns: u64) -> Instant {
        Instant(self.0.saturating_add(ns))
    }
    /// Nanoseconds from `earlier` to `self` (0 if `earlier` is later).
    pub const fn since(self, earlier: Instant) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

/// Unguessable numbers: memory keys, initial PSNs, QP numbers. ChaCha20
/// keyed with 256 bits the driver supplies (the engine from the operating
/// system, the simulator and tests from their seed), so one key observed on
/// the wire tells nothing about the next — SplitMix64 and its kind are
/// invertible.
pub struct KeyRng(chacha20::ChaCha20Rng);

impl KeyRng {
    /// A generator keyed with `key` (256 bits; the engine's from the OS).
    pub fn new(key: [u8; 32]) -> Self {
        use rand_core::SeedableRng;
        KeyRng(chacha20::ChaCha20Rng::from_seed(key))
    }
    /// A generator keyed from a 64-bit seed: deterministic, for the
    /// simulator and tests.
    pub fn from_seed(seed: u64) -> Self {
        let mut key = [0u8; 32];
        let mut s = Rng::new(seed);
        for c in key.chunks_exact_mut(8) {
            c.copy_from_slice(&s.next_u64().to_le_bytes());
        }
        KeyRng::new(key)
    }
    /// Next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        rand_core::Rng::next_u32(&mut self.0)
    }
}

impl std::fmt::Debug for KeyRng {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyRng")
    }
}

/// A small deterministic PRNG (SplitMix64) for the simulator and tests.
/// Not for anything a peer must not guess: see [`KeyRng`].
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub const fn new(seed: u64) -> Self {
        Rng(seed)
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64) < p
    }
}

/// Hasher of the core's tables keyed by a `u32` (QP numbers, memory keys):
/// one multiplication and a fold, instead of SipHash on every packet. The
/// keys in the tables are the device's own (QP numbers it assigned, memory
/// keys from its generator or the application), so a peer cannot fill a
/// table with colliding keys; it can only look keys up.
#[derive(Clone, Copy, Default)]
pub(crate) struct U32Hasher(u64);

impl std::hash::Hasher for U32Hasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u32(b as u32);
        }
    }
    fn write_u32(&mut self, n: u32) {
        let h = (self.0 ^ n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = h ^ (h >> 32);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A hash map keyed by `u32` with [`U32Hasher`].
pub(crate) type U32Map<V> =
    std::collections::HashMap<u32, V, std::hash::BuildHasherDefault<U32Hasher>>;

/// A vector of optional slots with reuse: object tables indexed by handle.
#[derive(Debug)]
pub(crate) struct Slab<T> {
    slots: Vec<Option<T>>,
    free: Vec<u32>,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Slab<T> {
    pub fn insert(&mut self, v: T) -> u32 {
        self.len += 1;
        if let Some(i) = self.free.pop() {
            self.slots[i as usize] = Some(v);
            i
        } else {
            self.slots.push(Some(v));
            (self.slots.len() - 1) as u32
        }
    }
    pub fn remove(&mut self, i: u32) -> Option<T> {
        let v = self.slots.get_mut(i as usize)?.take()?;
        self.free.push(i);
        self.len -= 1;
        Some(v)
    }
    pub fn get(&self, i: u32) -> Option<&T> {
        self.slots.get(i as usize)?.as_ref()
    }
    pub fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        self.slots.get_mut(i as usize)?.as_mut()
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|v| (i as u32, v)))
    }
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut T)> {
        self.slots
            .iter_mut()
            .enumerate()
            .filter_map(|(i, s)| s.as_mut().map(|v| (i as u32, v)))
    }
}
