//! One line per packet, for humans: `softrdma dump`, logs and test failures.
//!
//! ```text
//! 198.18.0.2:49476 > 198.18.0.1:4791 RC_RDMA_WRITE_ONLY qp=0x000021 psn=0x8530ff A RETH(va=0x55a4ecf9d000 rkey=0x000014c6 len=64) payload=64 icrc=ok
//! ```
//!
//! Flags appear only when set: `SE` solicited event, `M` MigReq, `A` AckReq,
//! `FECN`, `BECN`; `pad=N` when PadCnt is not zero; `pkey=` when it is not
//! the default 0xffff. Never panics, whatever the input.

use crate::ip::{DatagramRepr, IpRepr, RoceDatagram};
use crate::packet::IbPacket;
use crate::types::PKey;
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
    use crate::ip::UdpRepr;
    use crate::opcode::Opcode;
    use crate::packet::PacketRepr;
    use crate::types::{Msn, Psn, Qpn, RKey};

    #[test]
    fn prints_a_write_and_an_ack() {
        let d = DatagramRepr {
            ip: IpRepr::between(
                "198.18.0.2".parse().unwrap(),
                "198.18.0.1".parse().unwrap(),
                0,
            )
            .unwrap(),
            udp: UdpRepr {
                src_port: 49476,
                dst_port: 4791,
                checksum: 0,
            },
        };
        let bth = BthRepr {
            opcode: Opcode(0x0a),
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: PKey::DEFAULT,
            fecn: false,
            becn: false,
            dest_qp: Qpn::new(0x21),
            ack_req: true,
            psn: Psn::new(0x8530ff),
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
