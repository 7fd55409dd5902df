//! The formats of our messages: REJ, MRA, RTU, DREQ and DREP MADs built
//! from an id's state (Linux cm.c's `cm_format_*`).

use super::*;

impl Cm {
    /// `cm_format_rej`: the Local Comm ID and Message REJected depend on
    /// the state the id was in.
    pub(super) fn rej_mad(
        c: &Conn,
        state: State,
        reason: RejReason,
        ari: &[u8],
        private: &[u8],
    ) -> Option<[u8; MAD_LEN]> {
        let (local, msg) = match state {
            State::ReqRcvd => (0, MsgRef::REQ),
            State::MraReqSent => (c.local_id, MsgRef::REQ),
            State::RepRcvd | State::MraRepSent => (c.local_id, MsgRef::REP),
            _ => (c.local_id, MsgRef::OTHER),
        };
        Self::build(
            c.tid,
            0,
            CmMsg::Rej(RejRepr {
                local_comm_id: local,
                remote_comm_id: c.remote_id,
                message_rejected: msg,
                reject_info_len: ari.len() as u8,
                reason,
                ari,
                private_data: private,
            }),
        )
    }

    pub(super) fn mra_mad(
        c: &Conn,
        msg: MsgRef,
        service_timeout: u8,
        private: &[u8],
    ) -> Option<[u8; MAD_LEN]> {
        Self::build(
            c.tid,
            0,
            CmMsg::Mra(MraRepr {
                local_comm_id: c.local_id,
                remote_comm_id: c.remote_id,
                message_mraed: msg,
                service_timeout: service_timeout & 0x1f,
                private_data: private,
            }),
        )
    }

    pub(super) fn rtu_mad(c: &Conn, private: &[u8]) -> Option<[u8; MAD_LEN]> {
        Self::build(
            c.tid,
            0,
            CmMsg::Rtu(RtuRepr {
                local_comm_id: c.local_id,
                remote_comm_id: c.remote_id,
                private_data: private,
            }),
        )
    }

    pub(super) fn dreq_mad(&self, c: &Conn, private: &[u8]) -> Option<[u8; MAD_LEN]> {
        Self::build(
            self.form_tid(c.local_id),
            0,
            CmMsg::Dreq(DreqRepr {
                local_comm_id: c.local_id,
                remote_comm_id: c.remote_id,
                remote_qpn: c.remote_qpn,
                private_data: private,
            }),
        )
    }

    pub(super) fn drep_mad(c: &Conn, private: &[u8]) -> Option<[u8; MAD_LEN]> {
        Self::build(
            c.tid,
            0,
            CmMsg::Drep(DrepRepr {
                local_comm_id: c.local_id,
                remote_comm_id: c.remote_id,
                private_data: private,
            }),
        )
    }

    /// `cm_issue_rej`: a REJ to a MAD we keep no id for. Like Linux it reads
    /// the comm IDs at offsets 0 and 4 of whatever message it answers: the
    /// REJ's Local Comm ID is the received bytes 4..8 (0 in a REQ from
    /// rxe: reserved + Vendor ID), its Remote Comm ID the sender's.
    pub(super) fn issue_rej(&mut self, rx: &Rx<'_>, reason: RejReason, msg: MsgRef) {
        // "Cast to any message": the received bytes read as a REJ.
        let Ok(any) = Rej::new_checked(&rx.mad[MAD_HEADER_LEN..MAD_LEN]) else {
            return;
        };
        let rej = RejRepr {
            local_comm_id: any.remote_comm_id(),
            remote_comm_id: any.local_comm_id(),
            message_rejected: msg,
            reject_info_len: 0,
            reason,
            ari: &[],
            private_data: &[],
        };
        if let Some(m) = Self::build(rx.hdr.tid, 0, CmMsg::Rej(rej)) {
            self.send(rx.src, rx.src_qpn, m);
        }
    }
}
