//! `softrdma dump --json`: JSON lines, one object per RoCE v2 packet, one
//! per flow, then a summary. Written by hand (a handful of flat objects).
//!
//! ```text
//! {"type":"packet","frame":14,"time":"0.062329","src":"198.18.0.2","sport":49441,
//!  "dst":"198.18.0.1","dport":4791,"opcode":4,"name":"RC_SEND_ONLY","qp":17,
//!  "psn":15861492,"se":false,"mig":false,"ackreq":true,"fecn":false,"becn":false,
//!  "pkey":65535,"pad":0,"payload":64,"len":110,"icrc":"0x…","icrc_ok":true}
//! {"type":"flow","class":"req","src":…,"dst":…,"qp":17,"packets":5,…}
//! {"type":"summary","frames":33,"roce":20,"icrc_bad":0,"malformed":0,"skipped":{"ipv4/tcp":11}}
//! ```
//!
//! Extension headers appear as nested objects (`reth`, `aeth`, `atomic_eth`,
//! `deth`) or numbers (`atomic_ack` as a hex string, `imm`, `ieth`) only when
//! the opcode carries them. 64-bit values (virtual addresses, atomic
//! operands) are hex strings so JSON readers with 53-bit numbers keep them
//! exact. `time` is a string of seconds since the first frame with the
//! capture's precision, absent when the frame has no timestamp.

use crate::dump::{syndrome_kind, Class, Flow, FlowKey, Stats};
use softrdma_wire::{DatagramRepr, IpRepr, RoceDatagram};
use std::fmt::Write as _;

/// A JSON string literal.
fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn head(out: &mut String, ty: &str, frame: u64, time: Option<&str>) {
    let _ = write!(out, "{{\"type\":\"{ty}\",\"frame\":{frame}");
    if let Some(t) = time {
        out.push_str(",\"time\":");
        string(out, t);
    }
}

/// One RoCE v2 packet.
pub fn packet(out: &mut String, frame: u64, time: Option<&str>, d: &RoceDatagram<&[u8]>) {
    head(out, "packet", frame, time);
    let r = DatagramRepr::parse(d);
    let (src, dst) = match r.ip {
        IpRepr::V4(ip) => (ip.src.to_string(), ip.dst.to_string()),
        IpRepr::V6(ip) => (ip.src.to_string(), ip.dst.to_string()),
    };
    out.push_str(",\"src\":");
    string(out, &src);
    let _ = write!(out, ",\"sport\":{},\"dst\":", r.udp.src_port);
    string(out, &dst);
    let ib = d.ib();
    let bth = ib.bth();
    let _ = write!(
        out,
        ",\"dport\":{},\"opcode\":{},\"name\":\"{}\",\"qp\":{},\"psn\":{},\"se\":{},\
         \"mig\":{},\"ackreq\":{},\"fecn\":{},\"becn\":{},\"pkey\":{},\"pad\":{}",
        r.udp.dst_port,
        bth.opcode().0,
        bth.opcode().name(),
        bth.dest_qp().value(),
        bth.psn().value(),
        bth.solicited(),
        bth.mig_req(),
        bth.ack_req(),
        bth.fecn(),
        bth.becn(),
        bth.pkey().value(),
        bth.pad_count()
    );
    if let Some(x) = ib.deth() {
        let _ = write!(
            out,
            ",\"deth\":{{\"qkey\":{},\"src_qp\":{}}}",
            x.qkey().value(),
            x.src_qp().value()
        );
    }
    if let Some(x) = ib.reth() {
        let _ = write!(
            out,
            ",\"reth\":{{\"va\":\"{:#x}\",\"rkey\":{},\"len\":{}}}",
            x.va(),
            x.rkey().value(),
            x.dma_len()
        );
    }
    if let Some(x) = ib.atomic_eth() {
        let _ = write!(
            out,
            ",\"atomic_eth\":{{\"va\":\"{:#x}\",\"rkey\":{},\"swap_add\":\"{:#x}\",\"compare\":\"{:#x}\"}}",
            x.va(),
            x.rkey().value(),
            x.swap_add(),
            x.compare()
        );
    }
    if let Some(x) = ib.aeth() {
        let s = x.syndrome();
        let _ = write!(
            out,
            ",\"aeth\":{{\"syndrome\":{},\"kind\":\"{}\",\"msn\":{}}}",
            s.to_byte(),
            syndrome_kind(s),
            x.msn().value()
        );
    }
    if let Some(x) = ib.atomic_ack_eth() {
        let _ = write!(out, ",\"atomic_ack\":\"{:#x}\"", x.orig());
    }
    if let Some(x) = ib.imm() {
        let _ = write!(out, ",\"imm\":{}", x.imm());
    }
    if let Some(x) = ib.ieth() {
        let _ = write!(out, ",\"ieth\":{}", x.rkey().value());
    }
    let _ = write!(
        out,
        ",\"payload\":{},\"len\":{},\"icrc\":\"{:#010x}\",\"icrc_ok\":{}}}",
        ib.payload().len(),
        d.datagram().len(),
        ib.icrc(),
        d.icrc_ok()
    );
}

/// A UDP/4791 datagram the wire crate refused.
pub fn malformed(
    out: &mut String,
    frame: u64,
    time: Option<&str>,
    ip: &[u8],
    err: &softrdma_wire::Error,
    cut: Option<(usize, u32)>,
) {
    head(out, "packet", frame, time);
    out.push_str(",\"malformed\":");
    string(out, &err.to_string());
    let _ = write!(out, ",\"len\":{}", ip.len());
    if let Some((got, orig)) = cut {
        let _ = write!(out, ",\"captured\":{got},\"orig_len\":{orig}");
    }
    out.push('}');
}

/// One flow's totals.
pub fn flow(out: &mut String, k: &FlowKey, f: &Flow) {
    let class = match k.class {
        Class::Req => "req",
        Class::Resp => "resp",
        Class::Cnp => "cnp",
    };
    let (lo, hi) = f.psn_range();
    let _ = write!(out, "{{\"type\":\"flow\",\"class\":\"{class}\",\"src\":");
    string(out, &k.src.to_string());
    out.push_str(",\"dst\":");
    string(out, &k.dst.to_string());
    let _ = write!(
        out,
        ",\"qp\":{},\"packets\":{},\"bytes\":{},\"payload\":{},\"psn_lo\":{},\"psn_hi\":{},\
         \"distinct\":{},\"span\":{},\"repeats\":{},\"rewinds\":{},\"icrc_bad\":{},\"aeth\":{{",
        k.qp,
        f.packets,
        f.bytes,
        f.payload,
        lo.value(),
        hi.value(),
        f.distinct(),
        f.span(),
        f.repeats,
        f.rewinds,
        f.icrc_bad
    );
    for (i, (kind, n)) in f.aeth.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        string(out, kind);
        let _ = write!(out, ":{n}");
    }
    out.push_str("}}\n");
}

/// The summary object.
pub fn summary(out: &mut String, s: &Stats) {
    let _ = write!(
        out,
        "{{\"type\":\"summary\",\"frames\":{},\"roce\":{},\"icrc_bad\":{},\"malformed\":{},\"skipped\":{{",
        s.frames, s.roce, s.icrc_bad, s.malformed
    );
    let mut kinds: Vec<_> = s.skipped.iter().collect();
    kinds.sort();
    for (i, (kind, n)) in kinds.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        string(out, kind);
        let _ = write!(out, ":{n}");
    }
    out.push_str("}}\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped() {
        let mut s = String::new();
        string(&mut s, "a\"b\\c\nd");
        assert_eq!(s, r#""a\"b\\c\u000ad""#);
    }
}
