//! One line per packet, for humans: `softrdma dump`, logs and test failures.
//!
//! ```text
//! 198.18.0.2:49476 > 198.18.0.1:4791 RC_RDMA_WRITE_ONLY qp=0x000021 psn=0x8530ff A RETH(va=0x55a4ecf9d000 rkey=0x000014c6 len=64) payload=64 icrc=ok
//! ```
//!
//! Flags appear only when set: `SE` solicited event, `M` MigReq, `A` AckReq,
//! `FECN`, `BECN`; `pad=N` when PadCnt is not zero; `pkey=` when it is not
//! the default 0xffff. Never panics, whatever the input.
//!
//! [`write_qp1_mad`] / [`mad_line`] describe the MAD a UD SEND carries to
//! QP 1 (CM messages in detail), to be appended to a packet's line.

use crate::cm::{self, CmMsg};
use crate::ip::{DatagramRepr, IpRepr, RoceDatagram};
use crate::mad::{self, Mad, MadHeaderRepr};
use crate::opcode::{Operation, Transport};
use crate::packet::IbPacket;
use crate::types::{PKey, Qpn};
use core::fmt::{self, Write};

/// Writes the transport part of a packet: opcode, QP, PSN, flags, extension
/// headers, payload length.
pub fn write_packet<W: Write, T: AsRef<[u8]>>(out: &mut W, p: &IbPacket<T>) -> fmt::Result {
    let bth = p.bth();
    write!(
        out,
        "{} qp={} psn={}",
        bth.opcode(),
        bth.dest_qp(),
        bth.psn()
    )?;
    for (on, name) in [
        (bth.solicited(), "SE"),
        (bth.mig_req(), "M"),
        (bth.ack_req(), "A"),
        (bth.fecn(), "FECN"),
        (bth.becn(), "BECN"),
    ] {
        if on {
            write!(out, " {name}")?;
        }
    }
    if bth.pkey() != PKey::DEFAULT {
        write!(out, " pkey={}", bth.pkey())?;
    }
    if bth.pad_count() != 0 {
        write!(out, " pad={}", bth.pad_count())?;
    }
    if let Some(d) = p.deth() {
        write!(out, " DETH(qkey={} srcqp={})", d.qkey(), d.src_qp())?;
    }
    if let Some(x) = p.xrceth() {
        write!(out, " XRCETH(srqn={:#08x})", x.srqn())?;
    }
    if let Some(f) = p.feth() {
        write!(
            out,
            " FETH(type={} level={})",
            f.placement_type(),
            f.selectivity_level()
        )?;
    }
    if let Some(r) = p.reth() {
        write!(
            out,
            " RETH(va={:#x} rkey={} len={})",
            r.va(),
            r.rkey(),
            r.dma_len()
        )?;
    }
    if let Some(a) = p.atomic_eth() {
        write!(
            out,
            " AtomicETH(va={:#x} rkey={} swap_add={:#x} cmp={:#x})",
            a.va(),
            a.rkey(),
            a.swap_add(),
            a.compare()
        )?;
    }
    if let Some(a) = p.aeth() {
        write!(out, " AETH({} msn={})", a.syndrome(), a.msn())?;
    }
    if let Some(a) = p.atomic_ack_eth() {
        write!(out, " AtomicAckETH(orig={:#x})", a.orig())?;
    }
    if let Some(i) = p.imm() {
        write!(out, " ImmDt({:#010x})", i.imm())?;
    }
    if let Some(i) = p.ieth() {
        write!(out, " IETH(rkey={})", i.rkey())?;
    }
    if p.info().payload {
        write!(out, " payload={}", p.payload().len())?;
    }
    Ok(())
}

/// Writes a whole datagram (starting at its IP header): addresses and ports,
/// the transport line and whether the ICRC checks. Malformed input gives a
/// `malformed (...)` line instead.
pub fn write_datagram<W: Write>(out: &mut W, dgram: &[u8]) -> fmt::Result {
    let d = match RoceDatagram::new_checked(dgram) {
        Ok(d) => d,
        Err(e) => return write!(out, "malformed ({e}), {} bytes", dgram.len()),
    };
    let r = DatagramRepr::parse(&d);
    match r.ip {
        IpRepr::V4(ip) => write!(
            out,
            "{}:{} > {}:{} ",
            ip.src, r.udp.src_port, ip.dst, r.udp.dst_port
        )?,
        IpRepr::V6(ip) => write!(
            out,
            "[{}]:{} > [{}]:{} ",
            ip.src, r.udp.src_port, ip.dst, r.udp.dst_port
        )?,
    }
    write_packet(out, &d.ib())?;
    if d.icrc_ok() {
        out.write_str(" icrc=ok")
    } else {
        write!(
            out,
            " icrc=BAD(stored {:#010x}, computed {:#010x})",
            d.ib().icrc(),
            d.compute_icrc()
        )
    }
}

/// For a UD SEND to QP 1 (a MAD), writes a space and [`write_mad`]'s
/// description of its payload; for any other packet, nothing. `softrdma
/// dump` can call it after [`write_datagram`] / [`write_packet`].
pub fn write_qp1_mad<W: Write, T: AsRef<[u8]>>(out: &mut W, p: &IbPacket<T>) -> fmt::Result {
    let bth = p.bth();
    let info = p.info();
    if info.transport != Transport::Ud
        || info.operation != Operation::Send
        || bth.dest_qp() != Qpn::GSI
    {
        return Ok(());
    }
    out.write_char(' ')?;
    write_mad(out, p.payload())
}

/// Describes one MAD: for the CM class, the message and its main fields
/// (comm IDs, service ID, QPNs, starting PSN, REJ reason, the rdma_cm
/// header's addresses and ports); for other classes the header. Never
/// panics, whatever the bytes.
///
/// ```text
/// CM REQ tid=0x000000023225fb6b comm=0x6bfb2532 sid=0x0000000001061c06(TCP:7174) qpn=0x000027 psn=0xccc3b7 mtu=1024 rr=1 id=1 retry=7 rnr=7 cma=198.18.0.2:54667>198.18.0.1:7174
/// ```
pub fn write_mad<W: Write>(out: &mut W, mad: &[u8]) -> fmt::Result {
    let view = match Mad::new_checked(mad) {
        Ok(v) => v,
        Err(e) => return write!(out, "MAD malformed ({e}), {} bytes", mad.len()),
    };
    let Ok(h) = MadHeaderRepr::parse(&view) else {
        return write!(out, "MAD malformed, {} bytes", mad.len());
    };
    if h.mgmt_class != mad::class::CM {
        return write!(
            out,
            "MAD class={:#04x} v{} method={:#04x} attr={:#06x} status={:#06x} tid={:#018x}",
            h.mgmt_class, h.class_version, h.method, h.attr_id, h.status, h.tid
        );
    }
    write!(out, "CM {} tid={:#018x}", cm::attr_name(h.attr_id), h.tid)?;
    if h.class_version != cm::CM_CLASS_VERSION {
        write!(out, " classver={}", h.class_version)?;
    }
    if h.method != mad::method::SEND {
        write!(out, " method={:#04x}", h.method)?;
    }
    if h.attr_mod != 0 {
        write!(out, " attrmod={:#010x}", h.attr_mod)?;
    }
    let Ok(msg) = CmMsg::parse(h.attr_id, view.data()) else {
        return Ok(());
    };
    match msg {
        CmMsg::Req(r) => {
            write!(
                out,
                " comm={:#010x} sid={} qpn={} psn={}",
                r.local_comm_id, r.service_id, r.local_qpn, r.starting_psn
            )?;
            match cm::mtu_bytes(r.path_mtu) {
                Some(m) => write!(out, " mtu={m}")?,
                None => write!(out, " mtu=?{}", r.path_mtu)?,
            }
            write!(
                out,
                " rr={} id={} retry={} rnr={}",
                r.responder_resources, r.initiator_depth, r.retry_count, r.rnr_retry_count
            )?;
            if r.transport_service_type != 0 {
                write!(out, " ts={}", r.transport_service_type)?;
            }
            if r.srq {
                out.write_str(" srq")?;
            }
            write_cma(out, r.private_data, r.service_id)
        }
        CmMsg::Rep(r) => write!(
            out,
            " comm={:#010x} remote={:#010x} qpn={} psn={} rr={} id={} rnr={}{}",
            r.local_comm_id,
            r.remote_comm_id,
            r.local_qpn,
            r.starting_psn,
            r.responder_resources,
            r.initiator_depth,
            r.rnr_retry_count,
            if r.srq { " srq" } else { "" }
        ),
        CmMsg::Rtu(r) => write!(
            out,
            " comm={:#010x} remote={:#010x}",
            r.local_comm_id, r.remote_comm_id
        ),
        CmMsg::Drep(r) => write!(
            out,
            " comm={:#010x} remote={:#010x}",
            r.local_comm_id, r.remote_comm_id
        ),
        CmMsg::Dreq(r) => write!(
            out,
            " comm={:#010x} remote={:#010x} qpn={}",
            r.local_comm_id, r.remote_comm_id, r.remote_qpn
        ),
        CmMsg::Rej(r) => write!(
            out,
            " comm={:#010x} remote={:#010x} msg={} reason={}",
            r.local_comm_id, r.remote_comm_id, r.message_rejected, r.reason
        ),
        CmMsg::Mra(r) => write!(
            out,
            " comm={:#010x} remote={:#010x} msg={} timeout={}",
            r.local_comm_id, r.remote_comm_id, r.message_mraed, r.service_timeout
        ),
        CmMsg::SidrReq(r) => {
            write!(out, " id={:#010x} sid={}", r.request_id, r.service_id)?;
            if r.pkey != PKey::DEFAULT {
                write!(out, " pkey={}", r.pkey)?;
            }
            write_cma(out, r.private_data, r.service_id)
        }
        CmMsg::SidrRep(r) => write!(
            out,
            " id={:#010x} status={} qpn={} qkey={} sid={}",
            r.request_id, r.status, r.qpn, r.qkey, r.service_id
        ),
    }
}

/// ` cma=SRC:PORT>DST:PORT` when the private data starts with a valid
/// rdma_cm header (the destination port comes from the service ID).
fn write_cma<W: Write>(out: &mut W, private: &[u8], sid: cm::ServiceId) -> fmt::Result {
    let Ok(h) = cm::CmaHdrRepr::parse_private(private) else {
        return Ok(());
    };
    let dport = sid.rdma_cm_parts().map(|(_, p)| p);
    let sock = |ip: core::net::IpAddr| match ip {
        core::net::IpAddr::V4(a) => format!("{a}"),
        core::net::IpAddr::V6(a) => format!("[{a}]"),
    };
    write!(out, " cma={}:{}>{}", sock(h.src), h.src_port, sock(h.dst))?;
    match dport {
        Some(p) => write!(out, ":{p}"),
        None => Ok(()),
    }
}

/// [`write_mad`] into a new `String`.
pub fn mad_line(mad: &[u8]) -> String {
    let mut s = String::new();
    let _ = write_mad(&mut s, mad);
    s
}

/// [`write_datagram`] into a new `String`.
pub fn datagram_line(dgram: &[u8]) -> String {
    let mut s = String::new();
    let _ = write_datagram(&mut s, dgram);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bth::BthRepr;
    use crate::ext::{AethRepr, RethRepr, Syndrome};
    use crate::opcode::Opcode;
    use crate::packet::PacketRepr;
    use crate::types::{Msn, Psn, Qpn, RKey};

    /// The REQ of rping_rdmacm.pcap frame 1.
    const RPING_REQ: [&str; 8] = [
        "0107020300000000000000023225fb6b00100000000000006bfb253200000000",
        "0000000001061c06505400fffe12000200000000000000000000270100000001",
        "000000a0ccc3b7a7ffff37f0ffffffff00000000000000000000ffffc6120002",
        "00000000000000000000ffffc61200019f7db000004000980000000000000000",
        "0000000000000000000000000000000000000000000000000000000000000000",
        "000000000040d58b000000000000000000000000c61200020000000000000000",
        "00000000c6120001000000000000000000000000000000000000000000000000",
        "0000000000000000000000000000000000000000000000000000000000000000",
    ];

    fn unhex(parts: &[&str]) -> Vec<u8> {
        let s: String = parts.concat();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn describes_cm_mads() {
        let mad = unhex(&RPING_REQ);
        assert_eq!(
            mad_line(&mad),
            "CM REQ tid=0x000000023225fb6b comm=0x6bfb2532 sid=0x0000000001061c06(TCP:7174) \
             qpn=0x000027 psn=0xccc3b7 mtu=1024 rr=1 id=1 retry=7 rnr=7 \
             cma=198.18.0.2:54667>198.18.0.1:7174"
        );
        let rej = crate::cm::CmMadRepr::new(
            7,
            0,
            CmMsg::Rej(crate::cm::RejRepr {
                local_comm_id: 0,
                remote_comm_id: 0x6bfb2532,
                message_rejected: crate::cm::MsgRef::REQ,
                reject_info_len: 0,
                reason: crate::cm::RejReason::INVALID_SERVICE_ID,
                ari: &[],
                private_data: &[],
            }),
        )
        .to_bytes()
        .unwrap();
        assert_eq!(
            mad_line(&rej),
            "CM REJ tid=0x0000000000000007 comm=0x00000000 remote=0x6bfb2532 msg=REQ \
             reason=8(INVALID_SERVICE_ID)"
        );
        let mut v1 = rej;
        v1[2] = 1;
        v1[3] = 0x01;
        assert!(mad_line(&v1).starts_with("CM REJ tid=0x0000000000000007 classver=1 method=0x01"));
        let mut perf = rej;
        perf[1] = 0x04;
        assert!(mad_line(&perf).starts_with("MAD class=0x04"));
        assert_eq!(
            mad_line(&rej[..10]),
            "MAD malformed (truncated packet), 10 bytes"
        );
    }

    #[test]
    fn qp1_sends_get_the_mad_appended() {
        let mad = unhex(&RPING_REQ);
        let bth = BthRepr {
            ack_req: true,
            ..BthRepr::new(Opcode(0x64), Qpn::GSI, Psn::new(1))
        };
        let mut p = PacketRepr::new(bth, &mad);
        p.deth = Some(crate::ext::DethRepr {
            qkey: crate::types::QKey(mad::GSI_QKEY),
            src_qp: Qpn::GSI,
        });
        let mut buf = vec![0u8; p.buffer_len()];
        p.emit(&mut buf).unwrap();
        let ib = IbPacket::new_checked(&buf[..]).unwrap();
        let mut line = String::new();
        write_qp1_mad(&mut line, &ib).unwrap();
        assert!(line.starts_with(" CM REQ tid=0x000000023225fb6b"), "{line}");
        // Another QP: nothing.
        p.bth.dest_qp = Qpn::new(2);
        p.emit(&mut buf).unwrap();
        let mut line = String::new();
        write_qp1_mad(&mut line, &IbPacket::new_checked(&buf[..]).unwrap()).unwrap();
        assert_eq!(line, "");
    }

    #[test]
    fn prints_a_write_and_an_ack() {
        let d = DatagramRepr::new(
            IpRepr::between(
                "198.18.0.2".parse().unwrap(),
                "198.18.0.1".parse().unwrap(),
                0,
            )
            .unwrap(),
            49476,
            4791,
        );
        let bth = BthRepr {
            ack_req: true,
            ..BthRepr::new(Opcode(0x0a), Qpn::new(0x21), Psn::new(0x8530ff))
        };
        let data = [0u8; 64];
        let mut p = PacketRepr::new(bth, &data);
        p.reth = Some(RethRepr {
            va: 0x55a4_ecf9_d000,
            rkey: RKey(0x14c6),
            dma_len: 64,
        });
        let mut buf = [0u8; 256];
        let n = d.emit(&p, &mut buf).unwrap();
        assert_eq!(
            datagram_line(&buf[..n]),
            "198.18.0.2:49476 > 198.18.0.1:4791 RC_RDMA_WRITE_ONLY qp=0x000021 psn=0x8530ff A \
             RETH(va=0x55a4ecf9d000 rkey=0x000014c6 len=64) payload=64 icrc=ok"
        );
        buf[n - 10] ^= 1;
        assert!(datagram_line(&buf[..n]).contains("icrc=BAD"));

        let mut ack = PacketRepr::new(
            BthRepr {
                opcode: Opcode::RC_ACKNOWLEDGE,
                ack_req: false,
                ..bth
            },
            &[],
        );
        ack.aeth = Some(AethRepr {
            syndrome: Syndrome::ACK,
            msn: Msn::new(1),
        });
        let n = d.emit(&ack, &mut buf).unwrap();
        assert!(datagram_line(&buf[..n]).ends_with(
            "RC_ACKNOWLEDGE qp=0x000021 psn=0x8530ff AETH(ACK(credits=31) msn=0x000001) icrc=ok"
        ));
        assert_eq!(
            datagram_line(&[1, 2, 3]),
            "malformed (malformed packet), 3 bytes"
        );
    }
}
