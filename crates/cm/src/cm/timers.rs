//! Timers: retransmissions, their exhaustion, timewait expiry.

use super::*;

impl Cm {
    /// Runs every timer due at `now`: retransmissions, their exhaustion,
    /// timewait expiry.
    pub fn handle_timeout(&mut self, now: Instant) {
        // Bounded: each pass removes a timer; a retransmission re-arms
        // later than `now` (timeouts are at least 1 ms).
        while let Some(&(at, timer)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.remove(&(at, timer));
            match timer {
                Timer::Msg(local) => self.on_msg_timeout(now, local),
                Timer::Timewait(seq) => self.on_timewait_end(seq),
            }
        }
    }

    pub(super) fn on_msg_timeout(&mut self, now: Instant, local: u32) {
        let Some(c) = self.ids.get_mut(&local) else {
            return;
        };
        let Some(m) = c.msg.as_mut() else {
            return;
        };
        if m.retries_left > 0 {
            m.retries_left -= 1;
            // A zero timeout would spin; Linux's is at least 1 ms.
            m.deadline = now.add_ns(m.timeout_ns.max(1_000_000));
            let (deadline, mad, peer) = (m.deadline, m.mad, c.peer);
            self.timers.insert((deadline, Timer::Msg(local)));
            self.counters.tx_retransmits += 1;
            self.send(peer, Qpn::GSI, mad);
            return;
        }
        c.msg = None;
        let id = CmId(local);
        // cm_process_send_error.
        match c.state {
            State::ReqSent | State::MraReqRcvd => {
                self.reset_to_idle(local);
                self.push_event(Event::Unreachable {
                    id,
                    what: Unanswered::Req,
                });
            }
            State::RepSent | State::MraRepRcvd => {
                self.reset_to_idle(local);
                self.push_event(Event::Unreachable {
                    id,
                    what: Unanswered::Rep,
                });
            }
            State::DreqSent => {
                self.enter_timewait(now, local);
                self.push_event(Event::Disconnected {
                    id,
                    timed_out: true,
                    private_data: Vec::new(),
                });
            }
            State::SidrReqSent => {
                c.state = State::Idle;
                self.push_event(Event::Unreachable {
                    id,
                    what: Unanswered::SidrReq,
                });
            }
            _ => {}
        }
    }

    /// `cm_timewait_handler`.
    pub(super) fn on_timewait_end(&mut self, seq: u64) {
        let Some(tw) = self.timewait.remove(&seq) else {
            return;
        };
        self.tw_qps.remove(&(tw.remote_guid, tw.remote_qpn, seq));
        self.tw_locals.remove(&tw.local_id);
        if let Some(c) = self.ids.get_mut(&tw.local_id) {
            if c.state == State::Timewait && c.timewait == Some(seq) {
                c.state = State::Idle;
                c.timewait = None;
                self.push_event(Event::TimewaitExit {
                    id: CmId(tw.local_id),
                });
            }
        }
    }
}
