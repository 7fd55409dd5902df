//! What an [`Endpoint`]'s driver knows of its devices that the ids' state
//! depends on: a device shared with other processes (the device process
//! decides which process listens on a service: the *listen gate*), and a
//! device opened by the parent of a forked process (nothing of the
//! parent's is sent or torn down from the child).
//!
//! The listen gate is an input and an output of the endpoint, so that the
//! endpoint stays sans-I/O and the driver's one call to the device
//! process happens between two endpoint calls:
//!
//! - a gated device ([`Endpoint::set_gated`]) that should listen on a
//!   service (an rdma_cm listener covering it: `rdma_listen`, a device
//!   added under a wildcard listener, a request arriving for a wildcard
//!   listener's port) does not listen at once: it queues
//!   [`GateAsk::Listen`] ([`Endpoint::poll_gate`]);
//! - the driver asks the device process and answers with
//!   [`Endpoint::gate_listen`]: approved, the device's CM listens (the
//!   requests held for the service go to it); refused (another process of
//!   the device listens), nothing changes and the requests for the
//!   service keep going to that process — any that reach this one are
//!   held and rejected as for nobody listening;
//! - when a gated device's CM stops listening on a service (its last
//!   rdma_cm listener went), [`GateAsk::Unlisten`] tells the driver to
//!   give the service back to the device process.
//!
//! A device forked away ([`Endpoint::set_forked_away`]) sends nothing
//! (its CM's MADs are dropped), destroying an id on it sends no REJ, DREQ
//! or DREP, and its CM listeners stay as they are: in the parent they are
//! still the parent's.

use super::endpoint::{Endpoint, EndpointError};
use super::event::IdState;
use crate::{CmError, Instant, ServiceId};

/// What a gated device asks of its device process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateAsk {
    /// May device `dev` take the requests for `sid`? Answer with
    /// [`Endpoint::gate_listen`].
    Listen {
        /// The device.
        dev: u64,
        /// The service.
        sid: ServiceId,
    },
    /// Device `dev` no longer listens on `sid` (no answer).
    Unlisten {
        /// The device.
        dev: u64,
        /// The service.
        sid: ServiceId,
    },
}

impl Endpoint {
    /// Device `dev` is shared with other processes: its CM listens only
    /// where the device process agrees (see the module).
    pub fn set_gated(&mut self, dev: u64, gated: bool) {
        if let Some(d) = self.devs.get_mut(&dev) {
            d.gated = gated;
        }
    }

    /// Device `dev` is the parent's (this process is a forked child): from
    /// now on it sends nothing and its listeners are left alone.
    pub fn set_forked_away(&mut self, dev: u64) {
        if let Some(d) = self.devs.get_mut(&dev) {
            d.forked_away = true;
            while d.cm.poll_transmit().is_some() {}
        }
    }

    /// Whether device `dev` is forked away.
    pub fn forked_away(&self, dev: u64) -> bool {
        self.devs.get(&dev).is_some_and(|d| d.forked_away)
    }

    /// The next question for a device process.
    pub fn poll_gate(&mut self) -> Option<GateAsk> {
        self.gate.pop_front()
    }

    pub(super) fn ask(&mut self, a: GateAsk) {
        if !self.gate.contains(&a) {
            self.gate.push_back(a);
        }
    }

    /// The device process's answer to [`GateAsk::Listen`]: `approved`, the
    /// device's CM listens on `sid` if a listener still covers the device
    /// (none does any more: [`GateAsk::Unlisten`] gives it back). The
    /// CM's own refusal (its id table full) comes back: the driver fails
    /// the `rdma_listen` as for a refused listen (ENOMEM).
    pub fn gate_listen(
        &mut self,
        dev: u64,
        sid: ServiceId,
        approved: bool,
        now: Instant,
    ) -> Result<(), CmError> {
        self.tick(now);
        if !approved {
            return Ok(());
        }
        let covered = self
            .ids
            .values()
            .any(|e| e.listen.as_ref().is_some_and(|l| l.covers(dev, sid)));
        let Some(ds) = self.devs.get_mut(&dev) else {
            return Ok(());
        };
        if !covered {
            self.gate.push_back(GateAsk::Unlisten { dev, sid });
            return Ok(());
        }
        let r = ds.listen(now, sid);
        self.pump(dev);
        if r.is_err() {
            // The service stays the device process's to give back.
            self.gate.push_back(GateAsk::Unlisten { dev, sid });
        }
        r
    }

    /// A listen the device process refused on a device the listener
    /// needs (its own): the id is bound again, not listening, and the
    /// devices it made listen stop (the driver fails `rdma_listen`).
    pub fn stop_listening(&mut self, num: u64, now: Instant) -> Result<(), EndpointError> {
        self.tick(now);
        let e = self.entry(num)?;
        let Some(l) = e.listen.take() else {
            return Err(EndpointError::State("not listening"));
        };
        e.st = IdState::AddrBound;
        let sid = l.service_id();
        self.unlisten_uncovered(sid, now);
        let ids = &self.ids;
        self.gate.retain(|a| match a {
            GateAsk::Listen { dev, sid: s } if *s == sid => ids
                .values()
                .any(|o| o.listen.as_ref().is_some_and(|l| l.covers(*dev, sid))),
            _ => true,
        });
        Ok(())
    }

    /// The devices no rdma_cm listener of `sid` covers any more stop
    /// listening on it.
    pub(super) fn unlisten_uncovered(&mut self, sid: ServiceId, now: Instant) {
        let devs: Vec<u64> = self.devs.keys().copied().collect();
        for d in devs {
            let covered = self
                .ids
                .values()
                .any(|o| o.listen.as_ref().is_some_and(|l| l.covers(d, sid)));
            if !covered {
                self.cm_unlisten(d, sid, now);
            }
        }
    }

    /// Device `dev`'s CM stops listening on `sid` (no rdma_cm listener
    /// covers the device any more); a gated device gives the service
    /// back, a device forked away keeps it (it is the parent's).
    pub(super) fn cm_unlisten(&mut self, dev: u64, sid: ServiceId, now: Instant) {
        let Some(ds) = self.devs.get_mut(&dev) else {
            return;
        };
        if ds.forked_away {
            return;
        }
        if ds.unlisten(now, sid) && ds.gated {
            self.gate.push_back(GateAsk::Unlisten { dev, sid });
        }
        self.pump(dev);
    }
}
