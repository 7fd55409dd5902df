//! What a CM run saw ([`Report`]) and the promises it must keep
//! ([`Report::check`]).

use super::{ClientPlan, Scenario, ServerPlan};
use crate::net::NetStats;
use softrdma_cm::{Instant, RejReason, SidrStatus};

/// What happened to one connection.
#[derive(Clone, Debug, Default)]
pub struct ConnLog {
    /// Client id.
    pub client_id: Option<u64>,
    /// Server ids created for it (a REQ that comes back after its id was
    /// destroyed makes a new one, as in Linux).
    pub server_ids: Vec<u64>,
    /// Successful RTUs of the client.
    pub client_established: u32,
    /// ESTABLISHED events of the server.
    pub server_established: u32,
    /// REP events of the client.
    pub reps: u32,
    /// REJ reasons the client saw.
    pub client_rejected: Vec<RejReason>,
    /// REJ reasons the server saw.
    pub server_rejected: Vec<RejReason>,
    /// The client's REQ went unanswered.
    pub client_unreachable: u32,
    /// The server's REP went unanswered.
    pub server_unreachable: u32,
    /// Private data of the client's first REJ.
    pub rej_private: Vec<u8>,
    /// The client destroyed its id before any answer.
    pub client_gave_up: bool,
    /// The server accepted (a REP went out).
    pub accepted: bool,
    /// DREQs that ran out of retries, either side.
    pub dreq_timeouts: u32,
    /// The ephemeral port the client's id bound (its cma header's source
    /// port).
    pub client_port: Option<u16>,
}

/// What happened to one SIDR plan.
#[derive(Clone, Debug, Default)]
pub struct SidrLog {
    /// Replies: status.
    pub replies: Vec<SidrStatus>,
    /// Unanswered.
    pub unreachable: u32,
    /// Requests the server saw.
    pub requests: u32,
}

/// The outcome of a run.
#[derive(Debug, Default)]
pub struct Report {
    /// Per connection.
    pub conns: Vec<ConnLog>,
    /// Per SIDR plan.
    pub sidrs: Vec<SidrLog>,
    /// Violations seen while running (events for unknown ids, two
    /// outcomes, …).
    pub violations: Vec<String>,
    /// What the link did.
    pub net: NetStats,
    /// The CMs' counters, summed.
    pub cm: softrdma_cm::Counters,
    /// Ids left on live nodes after the run drained.
    pub leftover_ids: usize,
    /// Non-quiescent live CMs.
    pub not_quiescent: Vec<usize>,
    /// The ids left: node, id, state, what the program held it for.
    pub leftovers: Vec<String>,
    /// Virtual time at the end.
    pub end: Instant,
    /// rdma_cm events the layer reported for the CM's events
    /// (`softrdma_cm::rdma::report`), each checked against its CM event.
    pub rdma_events: u64,
    /// QP changes the rdma_cm layer emitted, applied to the nodes' QPs.
    pub qp_changes: u64,
    /// MADs the nodes' devices sent from QP 1 (`emit_gsi`), summed.
    pub gsi_tx: u64,
    /// MADs their QP 1 received, summed.
    pub gsi_rx: u64,
    /// Packets their ICRC check dropped (corrupted on the link), summed.
    pub icrc_errors: u64,
}

impl Report {
    /// Checks every promise against the plans; the first failure.
    pub fn check(&self, sc: &Scenario) -> Result<(), String> {
        if let Some(v) = self.violations.first() {
            return Err(format!("{} violations, first: {v}", self.violations.len()));
        }
        if !self.not_quiescent.is_empty() || self.leftover_ids != 0 {
            return Err(format!(
                "nodes {:?} not quiescent, {} ids left: {:?}",
                self.not_quiescent, self.leftover_ids, self.leftovers
            ));
        }
        let dead = |n: usize| sc.dead_node == Some(n) || sc.dies.is_some_and(|(d, _)| d == n);
        for (i, (p, l)) in sc.conns.iter().zip(&self.conns).enumerate() {
            let who = format!("conn {i} {p:?}: {l:?}");
            if l.client_established > 1 || l.server_established > 1 {
                return Err(format!("ESTABLISHED twice: {who}"));
            }
            if l.client_established == 1 && l.reps == 0 {
                return Err(format!("RTU without a REP: {who}"));
            }
            let involved_dead = dead(p.client) || dead(p.server);
            if !involved_dead && l.dreq_timeouts != 0 {
                // 16 DREQs or their DREPs all lost: 10^-16 at 10 % loss.
                return Err(format!("a DREQ to a live peer went unanswered: {who}"));
            }
            if involved_dead {
                if sc.dead_node == Some(p.server) && !dead(p.client) {
                    // Nobody ever answers: the REQ runs out.
                    if l.client_unreachable != 1 && !l.client_gave_up {
                        return Err(format!("a dead server is not unreachable: {who}"));
                    }
                }
                continue;
            }
            match (p.server_plan, p.client_plan) {
                (ServerPlan::NoListener, ClientPlan::DestroyEarly { .. }) => {}
                (ServerPlan::NoListener, _) => {
                    if l.client_rejected != [RejReason::INVALID_SERVICE_ID] {
                        return Err(format!("no listener but not REJ 8: {who}"));
                    }
                }
                (ServerPlan::Reject { .. } | ServerPlan::Destroy { .. }, c) => {
                    if l.client_established != 0 || l.server_established != 0 {
                        return Err(format!("established though declined: {who}"));
                    }
                    if !matches!(c, ClientPlan::DestroyEarly { .. }) {
                        if l.client_rejected.first() != Some(&RejReason::CONSUMER_DEFINED) {
                            return Err(format!("declined but not REJ 28: {who}"));
                        }
                        if matches!(p.server_plan, ServerPlan::Reject { .. })
                            && !l.rej_private.starts_with(b"no thanks")
                        {
                            return Err(format!("REJ private data lost: {who}"));
                        }
                    }
                }
                (ServerPlan::Accept { .. }, ClientPlan::Establish { .. }) => {
                    if l.client_established != 1 || l.server_established != 1 {
                        return Err(format!(
                            "accepted on both sides but not established once each: {who}"
                        ));
                    }
                }
                (ServerPlan::Accept { .. }, ClientPlan::Reject { .. }) => {
                    if l.client_established != 0 || l.server_established != 0 {
                        return Err(format!("established though the client rejected: {who}"));
                    }
                    if l.reps == 1
                        && l.server_rejected.first() != Some(&RejReason::CONSUMER_DEFINED)
                        && l.server_unreachable == 0
                    {
                        return Err(format!(
                            "the client's REJ of the REP never ended the server: {who}"
                        ));
                    }
                }
                (ServerPlan::Accept { .. }, ClientPlan::DestroyEarly { .. }) => {
                    if l.server_established != 0 {
                        return Err(format!("server established with a vanished client: {who}"));
                    }
                }
            }
        }
        for (i, (p, l)) in sc.sidrs.iter().zip(&self.sidrs).enumerate() {
            let who = format!("sidr {i} {p:?}: {l:?}");
            if l.replies.len() + l.unreachable as usize > 1 {
                return Err(format!("two outcomes: {who}"));
            }
            if dead(p.client) {
                continue;
            }
            if sc.dead_node == Some(p.server) {
                if l.unreachable != 1 {
                    return Err(format!("dead server, not unreachable: {who}"));
                }
            } else if !dead(p.server) {
                let want = if p.listening {
                    SidrStatus::SUCCESS
                } else {
                    SidrStatus::UNSUPPORTED
                };
                if l.replies != [want] {
                    return Err(format!("wrong SIDR outcome: {who}"));
                }
            }
        }
        Ok(())
    }
}
