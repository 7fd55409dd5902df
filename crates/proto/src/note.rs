//! Notes: what the core did that someone debugging interoperability wants
//! to read — a packet dropped and why, a QP changing state, a NAK sent or
//! received, a retransmission. The core does no logging (it has no I/O):
//! the driver turns them on with [`Device::set_notes`] and takes them with
//! [`Device::poll_note`] (softrdma logs them through `tracing`).
//!
//! Off by default, and then they cost one branch per packet: nothing is
//! compared or queued. On, the notes of one QP are derived from its
//! counters and state before and after each input, so every counter the
//! core keeps has its reason here without a second bookkeeping.
//!
//! [`Device::set_notes`]: crate::device::Device::set_notes
//! [`Device::poll_note`]: crate::device::Device::poll_note

use crate::counters::Counters;
use crate::verbs::QpState;
use softrdma_wire::{Psn, Qpn};
use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;

/// Notes kept until the driver takes them; beyond, they are counted
/// ([`Device::notes_lost`](crate::device::Device::notes_lost)).
pub const MAX_NOTES: usize = 1024;

/// Why a received packet was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// Too short, or headers that do not parse.
    Malformed,
    /// The ICRC does not match (IBTA 9.8.2).
    BadIcrc,
    /// The BTH's P_Key is not the port's (IBTA 9.2.5; 10.9.3).
    BadPkey,
    /// No QP with the destination QPN, or not one that receives.
    UnknownQp,
    /// The opcode's transport is not the QP's type (RC/UC/UD).
    WrongTransport,
    /// From an address other than the connected peer's.
    WrongPeer,
    /// A UD packet with another Q_Key (IBTA 10.2.4).
    BadQkey,
    /// A UD SEND with no receive posted, or longer than the receive.
    NoReceive,
    /// A request ahead of the expected PSN (IBTA 9.7.5.1.2).
    OutOfSequence,
    /// A request with an old PSN, already received: not executed again
    /// (RC answers it again where IBA says so; UC drops it).
    Duplicate,
    /// A UC message of which a packet was lost (IBTA 9.8.3).
    UcMessageLost,
    /// A response the requester does not expect (stale, duplicate).
    StaleResponse,
    /// A packet for QP 1 that is not a MAD, or the MAD queue was full.
    GsiRejected,
    /// A request whose answer the responder did not queue: its queue was
    /// full, or already held the same answer.
    ResponseQueueFull,
}

impl DropReason {
    /// Lower-case words for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Malformed => "malformed packet",
            DropReason::BadIcrc => "bad ICRC",
            DropReason::BadPkey => "wrong P_Key",
            DropReason::UnknownQp => "unknown QPN",
            DropReason::WrongTransport => "opcode of another transport than the QP's",
            DropReason::WrongPeer => "not from the connected peer (address or UDP port)",
            DropReason::BadQkey => "wrong Q_Key",
            DropReason::NoReceive => "no receive posted (UD)",
            DropReason::OutOfSequence => "PSN out of sequence",
            DropReason::Duplicate => "duplicate PSN (already received)",
            DropReason::UcMessageLost => "UC message with a lost packet",
            DropReason::StaleResponse => "unexpected response",
            DropReason::GsiRejected => "not a MAD for QP 1, or the MAD queue is full",
            DropReason::ResponseQueueFull => "answer not queued: the responder's queue is full",
        }
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A NAK's kind (IBTA 9.7.5.2.8, table 45).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nak {
    /// PSN sequence error.
    PsnSequenceError,
    /// Receiver not ready.
    Rnr,
    /// Invalid request.
    InvalidRequest,
    /// Remote access error (a bad R_Key, bounds or rights).
    RemoteAccessError,
    /// Remote operational error.
    RemoteOperationalError,
}

impl fmt::Display for Nak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Nak::PsnSequenceError => "PSN sequence error",
            Nak::Rnr => "RNR",
            Nak::InvalidRequest => "invalid request",
            Nak::RemoteAccessError => "remote access error (R_Key, bounds or rights)",
            Nak::RemoteOperationalError => "remote operational error",
        })
    }
}

/// One thing the core did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Note {
    /// A received packet was dropped.
    Dropped {
        /// Its destination QP (`None` when the BTH did not parse).
        qpn: Option<Qpn>,
        /// Its PSN, when known.
        psn: Option<Psn>,
        /// Its sender.
        from: SocketAddr,
        /// Why.
        reason: DropReason,
    },
    /// A QP changed state.
    StateChanged {
        /// The QP.
        qpn: Qpn,
        /// Its state before.
        from: QpState,
        /// Its state now.
        to: QpState,
    },
    /// The responder sent a NAK.
    NakSent {
        /// The QP.
        qpn: Qpn,
        /// The PSN of the request it answers.
        psn: Option<Psn>,
        /// Which.
        nak: Nak,
    },
    /// The requester received a NAK.
    NakReceived {
        /// The QP.
        qpn: Qpn,
        /// The NAK's PSN.
        psn: Option<Psn>,
        /// Which.
        nak: Nak,
    },
    /// The requester sent request packets again.
    Retransmitted {
        /// The QP.
        qpn: Qpn,
        /// How many packets, in one call.
        packets: u64,
    },
    /// The requester's retransmission timer expired.
    Timeout {
        /// The QP.
        qpn: Qpn,
    },
}

/// One counter of a [`Counters`].
type Field = fn(&Counters) -> u64;

/// The queue of notes, and whether they are kept at all.
#[derive(Debug, Default)]
pub(crate) struct Notes {
    pub on: bool,
    q: VecDeque<Note>,
    pub lost: u64,
}

impl Notes {
    pub fn push(&mut self, n: Note) {
        if self.q.len() < MAX_NOTES {
            self.q.push_back(n);
        } else {
            self.lost += 1;
        }
    }

    pub fn pop(&mut self) -> Option<Note> {
        self.q.pop_front()
    }

    /// The notes of one QP's input: what its counters and state say
    /// happened between `before` and `after`. `psn` and `from` are the
    /// packet's, when the input was one.
    pub fn derive(
        &mut self,
        qpn: Qpn,
        before: (&Counters, QpState),
        after: (&Counters, QpState),
        psn: Option<Psn>,
        from: Option<SocketAddr>,
    ) {
        let (b, a) = (before.0, after.0);
        let grew = |f: fn(&Counters) -> u64| f(a) > f(b);
        if let Some(from) = from {
            let drops: [(Field, DropReason); 7] = [
                (|c| c.resp_dropped, DropReason::ResponseQueueFull),
                (|c| c.bad_qkey, DropReason::BadQkey),
                (|c| c.ud_drops, DropReason::NoReceive),
                (|c| c.out_of_sequence, DropReason::OutOfSequence),
                (|c| c.uc_msgs_dropped, DropReason::UcMessageLost),
                (|c| c.stale_responses, DropReason::StaleResponse),
                (|c| c.duplicate_requests, DropReason::Duplicate),
            ];
            for (f, reason) in drops {
                // An RC duplicate is answered, not dropped.
                if grew(f) && !(reason == DropReason::Duplicate && a.acks_sent > b.acks_sent) {
                    self.push(Note::Dropped {
                        qpn: Some(qpn),
                        psn,
                        from,
                        reason,
                    });
                }
            }
        }
        let naks: [(Field, Field, Nak); 5] = [
            (
                |c| c.seq_nak_sent,
                |c| c.seq_nak_rcvd,
                Nak::PsnSequenceError,
            ),
            (|c| c.rnr_nak_sent, |c| c.rnr_nak_rcvd, Nak::Rnr),
            (
                |c| c.inv_req_nak_sent,
                |c| c.inv_req_nak_rcvd,
                Nak::InvalidRequest,
            ),
            (
                |c| c.rem_access_nak_sent,
                |c| c.rem_access_nak_rcvd,
                Nak::RemoteAccessError,
            ),
            (
                |c| c.rem_op_nak_sent,
                |c| c.rem_op_nak_rcvd,
                Nak::RemoteOperationalError,
            ),
        ];
        for (sent, rcvd, nak) in naks {
            if grew(sent) {
                self.push(Note::NakSent { qpn, psn, nak });
            }
            if grew(rcvd) {
                self.push(Note::NakReceived { qpn, psn, nak });
            }
        }
        if grew(|c| c.timeouts) {
            self.push(Note::Timeout { qpn });
        }
        if grew(|c| c.retransmits) {
            self.push(Note::Retransmitted {
                qpn,
                packets: a.retransmits - b.retransmits,
            });
        }
        if before.1 != after.1 {
            self.push(Note::StateChanged {
                qpn,
                from: before.1,
                to: after.1,
            });
        }
    }
}

use crate::device::RecvMeta;
use crate::qp::Qp;
use softrdma_wire::IbPacket;

impl crate::device::Device {
    /// A QP's counters and state before an input, when notes are on (a
    /// copy of the counters only then).
    #[inline]
    pub(crate) fn notes_before(notes: &Notes, qp: &Qp) -> Option<(Counters, QpState)> {
        if notes.on {
            Some((qp.counters, qp.state))
        } else {
            None
        }
    }

    /// A note of a packet dropped before it reached a QP.
    #[cold]
    pub(crate) fn note_drop(
        &mut self,
        meta: &RecvMeta,
        pkt: Option<&IbPacket<&[u8]>>,
        reason: DropReason,
    ) {
        if self.notes.on {
            let bth = pkt.map(|p| p.bth());
            self.notes.push(Note::Dropped {
                qpn: bth.as_ref().map(|b| b.dest_qp()),
                psn: bth.as_ref().map(|b| b.psn()),
                from: meta.src,
                reason,
            });
        }
    }

    /// Keeps [notes](crate::note) for [`Device::poll_note`] (`true`), or
    /// not (`false`, the default: they then cost one branch per input).
    pub fn set_notes(&mut self, on: bool) {
        self.notes.on = on;
    }

    /// The next note, oldest first.
    #[must_use]
    pub fn poll_note(&mut self) -> Option<Note> {
        self.notes.pop()
    }

    /// Notes not kept because the queue was full
    /// ([`MAX_NOTES`](crate::note::MAX_NOTES)).
    pub fn notes_lost(&self) -> u64 {
        self.notes.lost
    }
}
