//! One direction of a device's faulty link.
//!
//! The driver hands every datagram of that direction to
//! [`Injector::process`], which says what becomes of it now ([`Step`]),
//! keeps the copies it delays ([`Injector::poll_due`]) and the answers it
//! makes ([`Injector::poll_answer`], receive side), and counts everything.
//!
//! Per datagram, the rules whose direction and peer match act in the
//! order written: first the rule's targeted faults (a datagram one of them
//! takes is gone, and the rates no longer apply to it), then its rates
//! ([`fate`]). A datagram lost by one rule is gone; delays of several
//! rules add up, and so do their corruptions.

use crate::counters::FaultCounters;
use crate::fate::{fate, flip, Rng};
use crate::queue::DelayQueue;
use softrdma_config::faults::{Answer, FaultSpec, OpClass, Rates, Targeted};
use softrdma_wire::ext::{AethRepr, NakCode, Syndrome};
use softrdma_wire::ip::{DatagramRepr, IpRepr};
use softrdma_wire::opcode::{Operation, Transport};
use softrdma_wire::{BthRepr, IbPacket, Msn, Opcode, PacketRepr, Psn, Qpn, ICRC_LEN};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};

/// Bytes the injector holds at most (delayed, reordered, duplicated
/// copies); a datagram that would hold more is lost (and counted in
/// `held_overflow`), as a full queue of a real link drops it.
pub const MAX_HELD_BYTES: usize = 64 << 20;
/// Answers waiting for the driver at most (it takes them after every
/// batch; more means it does not).
const MAX_ANSWERS: usize = 1024;
/// Answered requests whose followers are being swallowed, at most.
const MAX_SWALLOW: usize = 64;
/// How long an answered request's followers are swallowed when the
/// requester does not send its PSN again (after an error NAK it never
/// does): longer than the longest RNR wait (655 ms).
const SWALLOW_NS: u64 = 2_000_000_000;
/// Fault events kept for the log at most between two drains.
const MAX_EVENTS: usize = 4096;

/// What the responder QP that a request was for would put in an answer
/// (the driver looks it up in its device: the injector sees only the
/// packet, whose BTH names the responder's QP, not the requester's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Responder {
    /// The requester's QP (the responder's destination QP).
    pub dest_qpn: Qpn,
    /// The requester's address and UDP port (RoCE v2: 4791).
    pub dest: SocketAddr,
    /// The responder's MSN (messages it completed).
    pub msn: Msn,
    /// The responder's RNR timer code (its `min_rnr_timer`).
    pub rnr_timer: u8,
    /// Traffic class of its packets.
    pub traffic_class: u8,
    /// Hop limit of its packets.
    pub hop_limit: u8,
}

/// A datagram the injector made: an answer to send, UDP payload with its
/// ICRC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnswerPacket {
    /// Where to.
    pub dst: SocketAddr,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// BTH through ICRC.
    pub data: Vec<u8>,
}

/// What becomes of a datagram now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// It goes on now (to the socket or the transport), with these bits
    /// flipped first (as [`crate::Fate::corrupt_bit`] numbers them; mostly
    /// none). A copy may also be held (duplication).
    Pass {
        /// Bits to flip.
        flip: Vec<u64>,
    },
    /// The injector holds a copy to deliver later ([`Injector::poll_due`]);
    /// the driver lets its own go.
    Held,
    /// Gone: lost, a dropped ACK, an answered or swallowed request.
    Gone,
}

/// A kind of fault, for the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// Lost by `loss`.
    Lost,
    /// Duplicated; the copy follows this much later, ns.
    Duplicated {
        /// Lag of the copy.
        after_ns: u64,
    },
    /// Held back by the reorder delay.
    Reordered,
    /// Delayed this long in all, ns.
    Delayed {
        /// Delay.
        ns: u64,
    },
    /// A bit flipped.
    Corrupted {
        /// Which.
        bit: u64,
    },
    /// An ACK lost by `drop-acks`.
    AckDropped,
    /// A request answered.
    Answered(Answer),
    /// A request after an answered one, lost.
    Swallowed,
    /// Lost: the injector held too much already.
    Overflow,
}

/// One fault, described for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultEvent {
    /// On a sent datagram (else a received one).
    pub send: bool,
    /// The peer (destination of a sent datagram, source of a received one).
    pub peer: IpAddr,
    /// What happened.
    pub kind: FaultKind,
    /// The packet (`softrdma_wire::pretty`'s line).
    pub packet: String,
}

struct RuleState {
    peer: Option<IpAddr>,
    /// Its rates, if it has any and acts on this direction.
    rates: Option<Rates>,
    /// Its targeted faults that act on this direction, with what is left
    /// of each.
    targeted: Vec<(Targeted, u32)>,
}

struct Swallow {
    qpn: Qpn,
    psn: Psn,
    peer: IpAddr,
    until: u64,
}

/// One direction of a device's faulty link; `M` is what the driver needs
/// to deliver a held datagram (its destination, or its source and
/// headers).
pub struct Injector<M> {
    send: bool,
    local: SocketAddr,
    rules: Vec<RuleState>,
    rng: Rng,
    held: DelayQueue<M>,
    answers: VecDeque<AnswerPacket>,
    swallow: Vec<Swallow>,
    counters: FaultCounters,
    events: Option<VecDeque<FaultEvent>>,
    /// Targeted faults left (packets must be parsed while there are).
    targets_left: u64,
}

/// The stream of dice for a seed and a direction (send and receive
/// draw from separate streams, so what a device sends does not change the
/// fate of what it receives).
fn stream(seed: u64, send: bool) -> Rng {
    Rng::new(
        seed ^ if send {
            0x7e1e_5e11_d0f1_5e7d
        } else {
            0x0ecf_17e5_bad1_1a57
        },
    )
}

impl<M: Clone> Injector<M> {
    /// The injector of `spec`'s rules for the datagrams a device at `local`
    /// sends (`send`) or receives, throwing dice seeded with `seed`; `None`
    /// when no rule acts on that direction.
    pub fn new(spec: &FaultSpec, seed: u64, send: bool, local: SocketAddr) -> Option<Self> {
        let mut rules = Vec::new();
        let mut targets_left = 0u64;
        for r in &spec.rules {
            let covers = r.on.covers(send);
            let rates = (covers && !r.rates.is_none()).then_some(r.rates);
            let targeted: Vec<(Targeted, u32)> = r
                .targeted
                .iter()
                .filter(|t| match t {
                    Targeted::DropAcks { .. } => covers,
                    Targeted::Answer { .. } => !send,
                })
                .map(|t| {
                    let n = match *t {
                        Targeted::DropAcks { count } | Targeted::Answer { count, .. } => count,
                    };
                    targets_left += n as u64;
                    (*t, n)
                })
                .collect();
            if rates.is_some() || !targeted.is_empty() {
                rules.push(RuleState {
                    peer: r.peer,
                    rates,
                    targeted,
                });
            }
        }
        (!rules.is_empty()).then(|| Injector {
            send,
            local,
            rules,
            rng: stream(seed, send),
            held: DelayQueue::new(),
            answers: VecDeque::new(),
            swallow: Vec::new(),
            counters: FaultCounters::default(),
            events: None,
            targets_left,
        })
    }

    /// Keeps a [`FaultEvent`] per fault for [`Self::poll_event`] (the log
    /// wants them), or not (the default: then describing costs nothing).
    pub fn set_events(&mut self, on: bool) {
        self.events = on.then(VecDeque::new);
    }

    /// What has been injected so far.
    pub fn counters(&self) -> FaultCounters {
        self.counters
    }

    /// The next fault event, oldest first.
    pub fn poll_event(&mut self) -> Option<FaultEvent> {
        self.events.as_mut()?.pop_front()
    }

    /// The next answer to send (receive side).
    pub fn poll_answer(&mut self) -> Option<AnswerPacket> {
        self.answers.pop_front()
    }

    /// When the next held datagram is due (ns on the driver's clock).
    pub fn next_due(&self) -> Option<u64> {
        self.held.next_due()
    }

    /// The next held datagram due at `now`.
    pub fn poll_due(&mut self, now: u64) -> Option<(M, Vec<u8>)> {
        self.held.pop_due(now)
    }

    /// The next held datagram whatever its time (the device closes).
    pub fn take_held(&mut self) -> Option<(M, Vec<u8>)> {
        self.held.pop_any()
    }

    /// Datagrams held.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    fn event(&mut self, peer: IpAddr, kind: FaultKind, data: &[u8]) {
        let Some(ev) = &mut self.events else { return };
        if ev.len() >= MAX_EVENTS {
            return;
        }
        let mut packet = String::new();
        match IbPacket::new_checked(data) {
            Ok(p) => {
                let _ = softrdma_wire::pretty::write_packet(&mut packet, &p);
            }
            Err(_) => packet = format!("{} bytes (not a RoCE packet)", data.len()),
        }
        ev.push_back(FaultEvent {
            send: self.send,
            peer,
            kind,
            packet,
        });
    }

    /// Decides the fate of a datagram of UDP payload `data` sent to or
    /// received from `peer` at `now` (ns); `meta` is what the driver needs
    /// to deliver a copy the injector holds. `responder` looks up, for a
    /// request received for a local QP, what its answer needs (`None`: not
    /// an RC QP that answers, or no such QP: the request is left alone).
    pub fn process(
        &mut self,
        now: u64,
        peer: IpAddr,
        meta: &M,
        data: &[u8],
        responder: &mut dyn FnMut(Qpn) -> Option<Responder>,
    ) -> Step {
        if self.targets_left > 0 || !self.swallow.is_empty() {
            if let Ok(pkt) = IbPacket::new_checked(data) {
                if self.targeted(now, peer, &pkt, responder) {
                    return Step::Gone;
                }
            }
        }
        let mut flips: Vec<u64> = Vec::new();
        let mut delay = 0u64;
        let mut dup_after: Option<u64> = None;
        for i in 0..self.rules.len() {
            let Some(rates) = self.rules[i].rates else {
                continue;
            };
            if self.rules[i].peer.is_some_and(|p| p != peer) {
                continue;
            }
            let f = fate(&rates, &mut self.rng, data);
            if f.lost {
                *self.count_lost() += 1;
                self.event(peer, FaultKind::Lost, data);
                return Step::Gone;
            }
            if let Some(b) = f.corrupt_bit {
                *self.pick(|c| &mut c.tx_corrupted, |c| &mut c.rx_corrupted) += 1;
                self.event(peer, FaultKind::Corrupted { bit: b }, data);
                flips.push(b);
            }
            let held_back = if f.reordered {
                rates.reorder_delay_ns
            } else {
                0
            };
            if f.reordered {
                *self.pick(|c| &mut c.tx_reordered, |c| &mut c.rx_reordered) += 1;
                self.event(peer, FaultKind::Reordered, data);
            }
            if f.delay_ns > held_back {
                *self.pick(|c| &mut c.tx_delayed, |c| &mut c.rx_delayed) += 1;
                self.event(peer, FaultKind::Delayed { ns: f.delay_ns }, data);
            }
            if let Some(after) = f.duplicate_after_ns {
                *self.pick(|c| &mut c.tx_duplicated, |c| &mut c.rx_duplicated) += 1;
                self.event(peer, FaultKind::Duplicated { after_ns: after }, data);
                dup_after = Some(delay + f.delay_ns + after);
            }
            delay += f.delay_ns;
        }
        if delay == 0 && dup_after.is_none() {
            return Step::Pass { flip: flips };
        }
        let copies = dup_after.is_some() as usize + (delay > 0) as usize;
        if self.held.bytes() + copies * data.len() > MAX_HELD_BYTES {
            self.counters.held_overflow += 1;
            self.event(peer, FaultKind::Overflow, data);
            return Step::Gone;
        }
        let mut copy = data.to_vec();
        for &b in &flips {
            flip(&mut copy, b);
        }
        if let Some(after) = dup_after {
            self.held
                .push(now.saturating_add(after), meta.clone(), copy.clone());
        }
        if delay == 0 {
            return Step::Pass { flip: flips };
        }
        self.held
            .push(now.saturating_add(delay), meta.clone(), copy);
        Step::Held
    }

    fn pick(
        &mut self,
        tx: impl FnOnce(&mut FaultCounters) -> &mut u64,
        rx: impl FnOnce(&mut FaultCounters) -> &mut u64,
    ) -> &mut u64 {
        if self.send {
            tx(&mut self.counters)
        } else {
            rx(&mut self.counters)
        }
    }

    fn count_lost(&mut self) -> &mut u64 {
        self.pick(|c| &mut c.tx_lost, |c| &mut c.rx_lost)
    }

    /// The targeted faults and the swallowing of answered requests'
    /// followers. Returns whether the packet is gone.
    fn targeted(
        &mut self,
        now: u64,
        peer: IpAddr,
        pkt: &IbPacket<&[u8]>,
        responder: &mut dyn FnMut(Qpn) -> Option<Responder>,
    ) -> bool {
        let info = pkt.info();
        let bth = pkt.bth();
        let rc_request = info.transport == Transport::Rc && info.is_request();
        if !self.send && rc_request && !self.swallow.is_empty() {
            self.swallow.retain(|s| s.until > now);
            let (qpn, psn) = (bth.dest_qp(), bth.psn());
            if let Some(i) = self
                .swallow
                .iter()
                .position(|s| s.qpn == qpn && s.peer == peer)
            {
                if psn.after(self.swallow[i].psn) {
                    self.counters.swallowed += 1;
                    self.event(peer, FaultKind::Swallowed, (*pkt).into_inner());
                    return true;
                }
                // The requester went back to the answered PSN (or before):
                // the responder takes it as it comes.
                self.swallow.swap_remove(i);
            }
        }
        if self.targets_left == 0 {
            return false;
        }
        let is_ack = info.operation == Operation::Acknowledge
            && info.transport == Transport::Rc
            && pkt
                .aeth()
                .is_some_and(|a| matches!(a.syndrome(), Syndrome::Ack { .. }));
        let starts_request = !self.send && rc_request && info.position.starts();
        if !is_ack && !starts_request {
            return false;
        }
        for r in 0..self.rules.len() {
            if self.rules[r].peer.is_some_and(|p| p != peer) {
                continue;
            }
            for t in 0..self.rules[r].targeted.len() {
                let (target, left) = self.rules[r].targeted[t];
                if left == 0 {
                    continue;
                }
                match target {
                    Targeted::DropAcks { .. } if is_ack => {
                        self.use_target(r, t);
                        self.counters.acks_dropped += 1;
                        self.event(peer, FaultKind::AckDropped, (*pkt).into_inner());
                        return true;
                    }
                    Targeted::Answer { answer, ops, .. }
                        if starts_request && class_matches(ops, info.operation) =>
                    {
                        let Some(resp) = responder(bth.dest_qp()) else {
                            continue;
                        };
                        if resp.dest.ip() != peer || self.answers.len() >= MAX_ANSWERS {
                            continue;
                        }
                        let Some(a) = self.answer(pkt, &resp, answer) else {
                            continue;
                        };
                        self.use_target(r, t);
                        self.answers.push_back(a);
                        *match answer {
                            Answer::RemoteAccess => &mut self.counters.answered_rem_access,
                            Answer::InvalidRequest => &mut self.counters.answered_inv_req,
                            Answer::RemoteOperational => &mut self.counters.answered_rem_op,
                            Answer::Rnr => &mut self.counters.answered_rnr,
                        } += 1;
                        self.event(peer, FaultKind::Answered(answer), (*pkt).into_inner());
                        // What follows the answered request is lost until
                        // the requester sends its PSN again, as a
                        // responder that NAKed drops it.
                        self.swallow
                            .retain(|s| !(s.qpn == bth.dest_qp() && s.peer == peer));
                        if self.swallow.len() >= MAX_SWALLOW {
                            self.swallow.remove(0);
                        }
                        self.swallow.push(Swallow {
                            qpn: bth.dest_qp(),
                            psn: bth.psn(),
                            peer,
                            until: now.saturating_add(SWALLOW_NS),
                        });
                        return true;
                    }
                    _ => {}
                }
            }
        }
        false
    }

    fn use_target(&mut self, rule: usize, t: usize) {
        self.rules[rule].targeted[t].1 -= 1;
        self.targets_left -= 1;
    }

    /// The answer to request `req` that the responder `r` would send: an
    /// ACKNOWLEDGE with the request's PSN and P_Key and an AETH with the
    /// NAK (or RNR NAK with the responder's timer) and its MSN, with the
    /// ICRC of the datagram the device will send it in.
    fn answer(&self, req: &IbPacket<&[u8]>, r: &Responder, answer: Answer) -> Option<AnswerPacket> {
        let bth = BthRepr::parse(&req.bth()).ok()?;
        let syndrome = match answer {
            Answer::RemoteAccess => Syndrome::Nak(NakCode::RemoteAccessError),
            Answer::InvalidRequest => Syndrome::Nak(NakCode::InvalidRequest),
            Answer::RemoteOperational => Syndrome::Nak(NakCode::RemoteOperationalError),
            Answer::Rnr => Syndrome::RnrNak { timer: r.rnr_timer },
        };
        let mut repr = PacketRepr::new(
            BthRepr {
                opcode: Opcode::RC_ACKNOWLEDGE,
                solicited: false,
                mig_req: false,
                pad_count: 0,
                pkey: bth.pkey,
                fecn: false,
                becn: false,
                dest_qp: r.dest_qpn,
                ack_req: false,
                psn: bth.psn,
            },
            &[],
        );
        repr.aeth = Some(AethRepr {
            syndrome,
            msn: r.msn,
        });
        let mut data = vec![0u8; repr.buffer_len()];
        let n = repr.emit(&mut data).ok()?;
        let d = DatagramRepr::new(
            IpRepr::between(self.local.ip(), r.dest.ip(), r.traffic_class).ok()?,
            self.local.port(),
            r.dest.port(),
        );
        let icrc = d.icrc(&data[..n - ICRC_LEN]);
        data[n - ICRC_LEN..n].copy_from_slice(&icrc.to_le_bytes());
        Some(AnswerPacket {
            dst: r.dest,
            traffic_class: r.traffic_class,
            hop_limit: r.hop_limit,
            data,
        })
    }
}

/// Whether a request of `op` is of class `c`.
fn class_matches(c: OpClass, op: Operation) -> bool {
    match c {
        OpClass::Any => true,
        OpClass::Read => op == Operation::ReadRequest,
        OpClass::Write => op == Operation::RdmaWrite,
        OpClass::Atomic => op.is_atomic(),
        OpClass::Send => op == Operation::Send,
    }
}

#[cfg(test)]
mod tests;
