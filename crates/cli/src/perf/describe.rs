//! What each side says about itself and its run: the header (perftest's
//! block of settings and the QP addresses), the parameters in JSON, notes
//! drawn from the counters, the counters at a failure.

use super::params::{Op, Params};
use super::report::{self, num, Json, RULE};
use super::setup::Side;
use super::Error;

/// `GID (address)`.
fn gid_text(gid: &[u8; 16]) -> String {
    let ip = softrdma_wire::grh::addr_of_gid(*gid);
    format!("{} ({ip})", crate::devinfo::gid_text(gid))
}

/// perftest's header: the settings in two columns, then each QP's local
/// and remote address.
pub(super) fn header_text(side: &Side, peer: &str, role: &str) -> String {
    let p = &side.params;
    let verification = format!("Verification   : {}", if p.verify { "ON" } else { "OFF" });
    let waiting = if side.yield_idle {
        "spin, yield when idle"
    } else {
        "busy spin"
    };
    let mut rows: Vec<(String, String)> = vec![
        (
            format!("Device          : {}", side.dev.name()),
            format!("Address        : {}", side.dev.local_addr()),
        ),
        (
            format!("Number of qps   : {}", p.qps),
            "Transport type : IB (RoCE v2)".into(),
        ),
        (
            format!("Connection type : {}", p.conn.name()),
            format!("Peer           : {peer}"),
        ),
        if p.test.is_lat() {
            ("TX depth        : 1 (latency)".into(), verification.clone())
        } else {
            (
                format!("TX depth        : {}", p.tx_depth),
                format!("CQ Moderation  : {}", p.cq_mod.min(p.tx_depth)),
            )
        },
        (
            format!("Mtu             : {}[B]", side.path_mtu),
            "Link type      : Ethernet".into(),
        ),
        (format!("Waiting         : {waiting}"), String::new()),
        (
            format!("Setup           : {:.3} s", side.setup.seconds),
            format!("Setup rate     : {:.0} QPs/s", side.setup.qps_per_s()),
        ),
        (
            format!("Memory per QP   : {} B", side.setup.rss_per_qp()),
            String::new(),
        ),
    ];
    let reads = format!("Outstand reads  : {}", p.outs);
    match p.test.op() {
        Op::Send => rows.push((format!("RX depth        : {}", p.rx_depth), verification)),
        Op::Read => rows.push((reads, verification)),
        Op::Atomic => rows.push((reads, format!("Atomic type    : {}", p.atomic.name()))),
        Op::Write if !p.test.is_lat() => {
            rows.push(("GID index       : 0 (RoCE v2)".into(), verification))
        }
        Op::Write => {}
    }
    if let Some(ms) = p.duration_ms {
        let d = format!("Duration        : {:.3} s per size", ms as f64 / 1000.0);
        rows.push((d, String::new()));
    }
    let mut s = format!(
        "{RULE}\n                    {}  (softrdma perf {}, {role})\n",
        p.test.title(),
        p.test.name()
    );
    for (a, b) in rows {
        s.push_str(format!(" {a:<40}{b}").trim_end());
        s.push('\n');
    }
    s.push_str(RULE);
    s.push('\n');
    // Every QP's addresses when there are few; the first ones otherwise.
    let shown = if side.qps.len() > 16 {
        8
    } else {
        side.qps.len()
    };
    for i in 0..shown {
        for (which, a) in [("local", &side.local[i]), ("remote", &side.remote[i])] {
            s.push_str(&format!(
                " {which} address: QPN {:#08x} PSN {:#08x} RKey {:#010x} VAddr {:#018x}\n GID: {}\n",
                a.qpn.value(),
                a.psn.value(),
                a.rkey.0,
                a.va,
                gid_text(&a.gid)
            ));
        }
    }
    if shown < side.qps.len() {
        s.push_str(&format!(" … and {} more QPs\n", side.qps.len() - shown));
    }
    s.push_str(RULE);
    s.push('\n');
    s
}

/// The parameters both sides run with, for `--json`.
pub(super) fn params_json(p: &Params) -> Vec<(String, Json)> {
    vec![
        ("test".into(), Json::from(p.test.name())),
        ("connection".into(), Json::from(p.conn.name())),
        ("qps".into(), Json::from(p.qps as u64)),
        ("mtu".into(), Json::from(p.mtu as u64)),
        ("tx_depth".into(), Json::from(p.tx_depth as u64)),
        ("rx_depth".into(), Json::from(p.rx_depth as u64)),
        ("outstanding_rd_atomic".into(), Json::from(p.outs as u64)),
        ("cq_moderation".into(), Json::from(p.cq_mod as u64)),
        (
            "atomic_type".into(),
            if p.test.op() == Op::Atomic {
                Json::from(p.atomic.name())
            } else {
                Json::Null
            },
        ),
        (
            "duration_s".into(),
            p.duration_ms
                .map_or(Json::Null, |ms| num(ms as f64 / 1000.0)),
        ),
        ("verify".into(), Json::Bool(p.verify)),
    ]
}

/// Notes on what the counters of a side show went wrong on the way
/// (the figures then include it).
pub(super) fn counter_notes(role: &str, c: &[(String, u64)]) -> Vec<String> {
    let get = |k: &str| c.iter().find(|(n, _)| n == k).map_or(0, |(_, v)| *v);
    let mut v = Vec::new();
    let dropped = get("socket_rx_dropped");
    if dropped > 0 {
        v.push(format!(
            "the {role}'s socket dropped {dropped} datagram(s) (its receive queue was full: the receiving side could not keep up)"
        ));
    }
    let injected: u64 = c
        .iter()
        .filter(|(k, _)| k.starts_with("fault_"))
        .map(|(_, n)| n)
        .sum();
    if injected > 0 {
        v.push(format!(
            "{role}: {injected} fault(s) injected (SOFTRDMA_FAULTS; the fault_* counters)"
        ));
    }
    for (k, what) in [
        ("engine_tx_dropped", "datagram(s) the socket would not take"),
        ("retransmits", "packet(s) sent again (RC recovery)"),
        ("uc_msgs_dropped", "UC message(s) lost"),
        (
            "ud_drops",
            "UD message(s) dropped (no receive posted in time)",
        ),
    ] {
        let n = get(k);
        if n > 0 {
            v.push(format!("{role}: {n} {what}"));
        }
    }
    v
}

/// After a failure in the middle of a run, the device's counters say what
/// the transport saw (retransmissions, NAKs, drops): on stderr.
pub(super) fn failure_counters(e: &Error, side: &Side, role: &str) {
    if matches!(e, Error::Verify(_)) {
        return;
    }
    eprint!(
        "{}",
        report::counters_text(
            &format!(
                "{role} counters at the failure ({} {})",
                side.dev.name(),
                side.dev.local_addr().ip()
            ),
            &report::device_counters(&side.dev)
        )
    );
}
