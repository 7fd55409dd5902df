//! QP 1, the general services interface (GSI): the one special QP a RoCE
//! device has. Communication-manager MADs travel on it as UD SEND_ONLY
//! packets with Q_Key 0x80010000 from source QP 1 to destination QP 1.
//!
//! The core does not interpret MADs. A packet for QP 1 that passes rxe's
//! checks (UD SEND_ONLY, the GSI Q_Key, a P_Key of the table — checked
//! before — and a payload of exactly one MAD, 256 bytes, as the CM wants)
//! is queued, bounded, for the driver
//! ([`Device::poll_gsi`](crate::Device::poll_gsi)); the driver sends a MAD
//! with [`Device::emit_gsi`](crate::Device::emit_gsi), which writes the
//! packet as rxe does (captured in `tests/data/rping_rdmacm.pcap`): BTH
//! with AckReq set, P_Key 0xFFFF, QP 1's own PSN counter; DETH with the
//! Q_Key and source QP 1; the 256-byte MAD; the ICRC.
//!
//! The data path never looks here: a datagram reaches the GSI check only
//! after its destination QP was not found among the device's QPs (no QP
//! is ever numbered 0 or 1), so an ordinary packet pays nothing for it.

use crate::device::{RecvMeta, Transmit};
use crate::limits;
use softrdma_wire::ip::{DatagramRepr, IpRepr};
use softrdma_wire::mad::{GSI_QKEY, MAD_LEN};
use softrdma_wire::{BthRepr, DethRepr, Opcode, PKey, PacketRepr, Psn, QKey, Qpn, ICRC_LEN};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};

/// UD SEND_ONLY, the only opcode of MADs.
const UD_SEND_ONLY: Opcode = Opcode(0x64);

/// A MAD received on QP 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GsiMad {
    /// The sender's address (its GID).
    pub src: IpAddr,
    /// The sender's QP (DETH source QP; 1 for CM traffic).
    pub src_qpn: Qpn,
    /// The P_Key of the packet.
    pub pkey: PKey,
    /// The MAD (the UD payload: [`MAD_LEN`] bytes).
    pub mad: Vec<u8>,
}

/// QP 1's state: the receive queue and the send PSN.
#[derive(Debug, Default)]
pub(crate) struct Gsi {
    rx: VecDeque<GsiMad>,
    psn: u32,
}

impl Gsi {
    /// Takes a packet addressed to QP 1 (`repr` parsed and its ICRC and
    /// P_Key checked). Returns whether it was queued.
    pub fn receive(&mut self, meta: &RecvMeta, repr: &PacketRepr<'_>) -> bool {
        let ok = repr.bth.opcode == UD_SEND_ONLY
            && repr.deth.is_some_and(|d| d.qkey == QKey(GSI_QKEY))
            && repr.payload.len() == MAD_LEN
            && self.rx.len() < limits::GSI_RX_QUEUE;
        if ok {
            self.rx.push_back(GsiMad {
                src: meta.src.ip(),
                src_qpn: repr.deth.map_or(Qpn::GSI, |d| d.src_qp),
                pkey: repr.bth.pkey,
                mad: repr.payload.to_vec(),
            });
        }
        ok
    }

    pub fn pop(&mut self) -> Option<GsiMad> {
        self.rx.pop_front()
    }

    pub fn pending(&self) -> bool {
        !self.rx.is_empty()
    }

    /// Writes a UD SEND_ONLY from QP 1 carrying `mad` into `buf`.
    #[allow(clippy::too_many_arguments)]
    pub fn emit(
        &mut self,
        local: IpAddr,
        src_port: u16,
        dst: SocketAddr,
        dst_qpn: Qpn,
        qkey: QKey,
        mad: &[u8],
        buf: &mut [u8],
    ) -> Option<Transmit> {
        if mad.len() > MAD_LEN || !mad.len().is_multiple_of(4) {
            return None;
        }
        let psn = Psn::new(self.psn);
        let bth = BthRepr {
            // rxe sets AckReq on every packet it sends from QP 1.
            ack_req: true,
            ..BthRepr::new(UD_SEND_ONLY, dst_qpn, psn)
        };
        let mut repr = PacketRepr::new(bth, mad);
        repr.deth = Some(DethRepr {
            qkey,
            src_qp: Qpn::GSI,
        });
        let total = repr.buffer_len();
        if buf.len() < total {
            return None;
        }
        let hlen = repr.emit_headers(buf).ok()?;
        buf[hlen..hlen + mad.len()].copy_from_slice(mad);
        let ip = IpRepr::between(local, dst.ip(), 0).ok()?;
        let d = DatagramRepr::new(ip, src_port, dst.port());
        let end = total - ICRC_LEN;
        let icrc = d.icrc(&buf[..end]);
        buf[end..total].copy_from_slice(&icrc.to_le_bytes());
        self.psn = (self.psn + 1) & 0xff_ffff;
        Some(Transmit {
            dst,
            len: total,
            traffic_class: 0,
            hop_limit: 64,
            gather: None,
        })
    }
}

impl crate::device::Device {
    /// The next MAD received on QP 1 (see the `gsi` module).
    #[must_use]
    pub fn poll_gsi(&mut self) -> Option<GsiMad> {
        self.gsi.pop()
    }

    /// Whether MADs wait in QP 1's queue.
    pub fn gsi_pending(&self) -> bool {
        self.gsi.pending()
    }

    /// Writes a UD SEND_ONLY from QP 1 to QP `dst_qpn` at `dst` (port
    /// `udp_dst_port`) carrying `mad` (a multiple of 4 bytes, at most 256)
    /// with Q_Key `qkey` into `buf`, as rxe does. `None` when it cannot be
    /// built (a MAD of another length, addresses of two IP versions).
    #[must_use]
    pub fn emit_gsi(
        &mut self,
        dst: IpAddr,
        dst_qpn: Qpn,
        qkey: softrdma_wire::QKey,
        mad: &[u8],
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let dst = SocketAddr::new(dst, self.cfg.udp_dst_port);
        let t = self.gsi.emit(
            self.cfg.local_ip,
            self.cfg.udp_src_port,
            dst,
            dst_qpn,
            qkey,
            mad,
            buf,
        )?;
        self.counters.gsi_tx += 1;
        Some(t)
    }
}
