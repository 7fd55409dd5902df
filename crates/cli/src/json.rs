//! `softrdma dump --json`: JSON lines, one object per RoCE v2 packet, one
//! per flow, then a summary, each a serde structure written by serde_json.
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
use serde::Serialize;
use softrdma_wire::{DatagramRepr, RoceDatagram};
use std::collections::BTreeMap;

/// A 64-bit value (or ICRC) as a hex string.
fn hex(v: u64) -> String {
    format!("{v:#x}")
}

/// `type`, `frame` and `time`, the start of every packet object.
#[derive(Serialize)]
struct Head<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    frame: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    time: Option<&'a str>,
}

impl<'a> Head<'a> {
    fn packet(frame: u64, time: Option<&'a str>) -> Self {
        Head {
            ty: "packet",
            frame,
            time,
        }
    }
}

#[derive(Serialize)]
struct Deth {
    qkey: u32,
    src_qp: u32,
}

#[derive(Serialize)]
struct Reth {
    va: String,
    rkey: u32,
    len: u32,
}

#[derive(Serialize)]
struct AtomicEth {
    va: String,
    rkey: u32,
    swap_add: String,
    compare: String,
}

#[derive(Serialize)]
struct Aeth {
    syndrome: u8,
    kind: &'static str,
    msn: u32,
}

/// A decoded RoCE v2 packet.
#[derive(Serialize)]
struct Packet<'a> {
    #[serde(flatten)]
    head: Head<'a>,
    src: String,
    sport: u16,
    dst: String,
    dport: u16,
    opcode: u8,
    name: &'static str,
    qp: u32,
    psn: u32,
    se: bool,
    mig: bool,
    ackreq: bool,
    fecn: bool,
    becn: bool,
    pkey: u16,
    pad: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    deth: Option<Deth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reth: Option<Reth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    atomic_eth: Option<AtomicEth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    aeth: Option<Aeth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    atomic_ack: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    imm: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ieth: Option<u32>,
    payload: usize,
    len: usize,
    icrc: String,
    icrc_ok: bool,
}

/// A UDP/4791 datagram the wire crate refused.
#[derive(Serialize)]
struct Malformed<'a> {
    #[serde(flatten)]
    head: Head<'a>,
    malformed: String,
    len: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    captured: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    orig_len: Option<u32>,
}

/// One flow's totals.
#[derive(Serialize)]
struct FlowLine<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    class: &'static str,
    src: String,
    dst: String,
    qp: u32,
    packets: u64,
    bytes: u64,
    payload: u64,
    psn_lo: u32,
    psn_hi: u32,
    distinct: usize,
    span: u64,
    repeats: u64,
    rewinds: u64,
    icrc_bad: u64,
    aeth: &'a BTreeMap<&'static str, u64>,
}

/// The summary.
#[derive(Serialize)]
struct Summary<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    frames: u64,
    roce: u64,
    icrc_bad: u64,
    malformed: u64,
    skipped: BTreeMap<&'a str, u64>,
}

/// Appends `v` as one line of JSON (no newline).
fn push(out: &mut String, v: &impl Serialize) {
    // Serialising these plain structures to a String cannot fail.
    if let Ok(s) = serde_json::to_string(v) {
        out.push_str(&s);
    }
}

/// One RoCE v2 packet.
pub fn packet(out: &mut String, frame: u64, time: Option<&str>, d: &RoceDatagram<&[u8]>) {
    let r = DatagramRepr::parse(d);
    let ib = d.ib();
    let bth = ib.bth();
    let p = Packet {
        head: Head::packet(frame, time),
        src: r.ip.src().to_string(),
        sport: r.udp.src_port,
        dst: r.ip.dst().to_string(),
        dport: r.udp.dst_port,
        opcode: bth.opcode().0,
        name: bth.opcode().name(),
        qp: bth.dest_qp().value(),
        psn: bth.psn().value(),
        se: bth.solicited(),
        mig: bth.mig_req(),
        ackreq: bth.ack_req(),
        fecn: bth.fecn(),
        becn: bth.becn(),
        pkey: bth.pkey().value(),
        pad: bth.pad_count(),
        deth: ib.deth().map(|x| Deth {
            qkey: x.qkey().value(),
            src_qp: x.src_qp().value(),
        }),
        reth: ib.reth().map(|x| Reth {
            va: hex(x.va()),
            rkey: x.rkey().value(),
            len: x.dma_len(),
        }),
        atomic_eth: ib.atomic_eth().map(|x| AtomicEth {
            va: hex(x.va()),
            rkey: x.rkey().value(),
            swap_add: hex(x.swap_add()),
            compare: hex(x.compare()),
        }),
        aeth: ib.aeth().map(|x| Aeth {
            syndrome: x.syndrome().to_byte(),
            kind: syndrome_kind(x.syndrome()),
            msn: x.msn().value(),
        }),
        atomic_ack: ib.atomic_ack_eth().map(|x| hex(x.orig())),
        imm: ib.imm().map(|x| x.imm()),
        ieth: ib.ieth().map(|x| x.rkey().value()),
        payload: ib.payload().len(),
        len: d.datagram().len(),
        icrc: format!("{:#010x}", ib.icrc()),
        icrc_ok: d.icrc_ok(),
    };
    push(out, &p);
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
    let m = Malformed {
        head: Head::packet(frame, time),
        malformed: err.to_string(),
        len: ip.len(),
        captured: cut.map(|c| c.0),
        orig_len: cut.map(|c| c.1),
    };
    push(out, &m);
}

/// One flow's totals.
pub fn flow(out: &mut String, k: &FlowKey, f: &Flow) {
    let (lo, hi) = f.psn_range();
    let line = FlowLine {
        ty: "flow",
        class: match k.class {
            Class::Req => "req",
            Class::Resp => "resp",
            Class::Cnp => "cnp",
        },
        src: k.src.to_string(),
        dst: k.dst.to_string(),
        qp: k.qp,
        packets: f.packets,
        bytes: f.bytes,
        payload: f.payload,
        psn_lo: lo.value(),
        psn_hi: hi.value(),
        distinct: f.distinct(),
        span: f.span(),
        repeats: f.repeats,
        rewinds: f.rewinds,
        icrc_bad: f.icrc_bad,
        aeth: &f.aeth,
    };
    push(out, &line);
    out.push('\n');
}

/// The summary object.
pub fn summary(out: &mut String, s: &Stats) {
    let line = Summary {
        ty: "summary",
        frames: s.frames,
        roce: s.roce,
        icrc_bad: s.icrc_bad,
        malformed: s.malformed,
        skipped: s.skipped.iter().map(|(k, n)| (k.as_str(), *n)).collect(),
    };
    push(out, &line);
    out.push('\n');
}
