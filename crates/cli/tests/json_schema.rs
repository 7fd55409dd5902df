//! The schema of every JSON document the CLI prints is pinned here: each
//! key path (in document order) with the JSON types it takes. Objects whose
//! keys are data (counter names, AETH kinds, skipped traffic kinds) appear
//! as `*`. A change here is a change of the interface scripts rely on.

mod common;

use serde_json::Value;
use softrdma_cli::dump::{dump_bytes, Options};
use softrdma_pcap::{linktype, CaptureReader, PcapHeader, PcapWriter};
use std::process::Command;

/// Key paths (first-seen order) and the types seen at each.
#[derive(Default)]
struct Schema(Vec<(String, Vec<&'static str>)>);

impl Schema {
    /// Adds `v`, found at `path`; objects under a path in `maps` have data
    /// for keys.
    fn add(&mut self, path: &str, v: &Value, maps: &[&str]) {
        let ty = match v {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(n) if n.is_u64() || n.is_i64() => "integer",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        match self.0.iter_mut().find(|(p, _)| p == path) {
            Some((_, types)) if !types.contains(&ty) => types.push(ty),
            Some(_) => {}
            None => self.0.push((path.to_string(), vec![ty])),
        }
        match v {
            Value::Array(items) => {
                for x in items {
                    self.add(&format!("{path}[]"), x, maps);
                }
            }
            Value::Object(fields) => {
                let is_map = maps.contains(&path);
                for (k, x) in fields {
                    let key = if is_map { "*" } else { k };
                    let p = if path.is_empty() {
                        key.to_string()
                    } else {
                        format!("{path}.{key}")
                    };
                    self.add(&p, x, maps);
                }
            }
            _ => {}
        }
    }

    fn text(&self) -> String {
        let mut s = String::new();
        for (p, types) in &self.0 {
            let mut t = types.clone();
            t.sort();
            // An integer that is sometimes fractional is a number.
            if t.contains(&"number") {
                t.retain(|x| *x != "integer");
            }
            s.push_str(&format!("{p}: {}\n", t.join("|")));
        }
        s
    }
}

/// Compares the paths and their types, in any order: a path is listed
/// where a run first shows it, and which run first shows, e.g., a note
/// depends on what went wrong in which run.
fn assert_schema(what: &str, got: &Schema, want: &str) {
    let sorted = |t: &str| {
        let mut v: Vec<String> = t
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|l| format!("{l}\n"))
            .collect();
        v.sort();
        v.concat()
    };
    let got = sorted(&got.text());
    let want = sorted(want);
    assert_eq!(got, want, "{what}: the schema changed:\n{got}");
}

fn softrdma(args: &[&str]) -> Value {
    softrdma_with(args, &[])
}

/// [`softrdma`] with extra environment variables.
fn softrdma_with(args: &[&str], env: &[(&str, &str)]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .args(args)
        .env_remove("SOFTRDMA_ADDR")
        .env_remove("SOFTRDMA_PCAP")
        .env_remove("SOFTRDMA_FAULTS")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?}: {e}\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn dump_json_schema() {
    let mut schema = Schema::default();
    for c in common::captures() {
        let bytes = std::fs::read(common::data_dir().join(&c)).unwrap();
        let opts = Options {
            json: true,
            ..Options::default()
        };
        let (json, res) = dump_bytes(&bytes, &opts);
        res.unwrap();
        for l in json.lines() {
            let v: Value = serde_json::from_str(l).unwrap();
            let ty = v["type"].as_str().unwrap().to_string();
            schema.add(&ty, &v, &["flow.aeth", "summary.skipped"]);
        }
    }
    // A packet cut by the snapshot length: a malformed packet's fields.
    let bytes = std::fs::read(common::data_dir().join("write_imm.pcap")).unwrap();
    let mut r = CaptureReader::from_bytes(&bytes).unwrap();
    let mut w = PcapWriter::new(Vec::new(), PcapHeader::new(linktype::ETHERNET)).unwrap();
    while let Some(f) = r.next_frame().unwrap() {
        let n = f.data.len().min(200);
        w.record(1, 0, &f.data[..n], f.data.len() as u32).unwrap();
    }
    let opts = Options {
        json: true,
        ..Options::default()
    };
    let (json, res) = dump_bytes(w.get_ref(), &opts);
    res.unwrap();
    let lines = json
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap());
    let cut: Vec<Value> = lines.filter(|v| v["malformed"].is_string()).collect();
    assert!(!cut.is_empty(), "{json}");
    for v in &cut {
        schema.add("packet", v, &[]);
    }
    assert_schema(
        "softrdma dump --json",
        &schema,
        "
        packet: object
        packet.type: string
        packet.frame: integer
        packet.time: string
        packet.src: string
        packet.sport: integer
        packet.dst: string
        packet.dport: integer
        packet.opcode: integer
        packet.name: string
        packet.qp: integer
        packet.psn: integer
        packet.se: bool
        packet.mig: bool
        packet.ackreq: bool
        packet.fecn: bool
        packet.becn: bool
        packet.pkey: integer
        packet.pad: integer
        packet.atomic_eth: object
        packet.atomic_eth.va: string
        packet.atomic_eth.rkey: integer
        packet.atomic_eth.swap_add: string
        packet.atomic_eth.compare: string
        packet.payload: integer
        packet.len: integer
        packet.icrc: string
        packet.icrc_ok: bool
        packet.aeth: object
        packet.aeth.syndrome: integer
        packet.aeth.kind: string
        packet.aeth.msn: integer
        packet.atomic_ack: string
        flow: object
        flow.type: string
        flow.class: string
        flow.src: string
        flow.dst: string
        flow.qp: integer
        flow.packets: integer
        flow.bytes: integer
        flow.payload: integer
        flow.psn_lo: integer
        flow.psn_hi: integer
        flow.distinct: integer
        flow.span: integer
        flow.repeats: integer
        flow.rewinds: integer
        flow.icrc_bad: integer
        flow.aeth: object
        flow.aeth.*: integer
        summary: object
        summary.type: string
        summary.frames: integer
        summary.roce: integer
        summary.icrc_bad: integer
        summary.malformed: integer
        summary.skipped: object
        summary.skipped.*: integer
        packet.reth: object
        packet.reth.va: string
        packet.reth.rkey: integer
        packet.reth.len: integer
        packet.imm: integer
        packet.deth: object
        packet.deth.qkey: integer
        packet.deth.src_qp: integer
        packet.ieth: integer
        packet.malformed: string
        packet.captured: integer
        packet.orig_len: integer
        ",
    );
}

#[test]
fn devinfo_json_schema() {
    let mut schema = Schema::default();
    schema.add("", &softrdma(&["devinfo", "--json"]), &[]);
    assert_schema(
        "softrdma devinfo --json",
        &schema,
        "
        : object
        name: string
        transport: string
        fw_ver: string
        node_guid: string
        address: string
        udp_port: integer
        ports: array
        ports[]: object
        ports[].port: integer
        ports[].state: string
        ports[].max_mtu: integer
        ports[].active_mtu: integer
        ports[].link_layer: string
        ports[].gid_tbl_len: integer
        ports[].pkey_tbl_len: integer
        ports[].gids: array
        ports[].gids[]: object
        ports[].gids[].index: integer
        ports[].gids[].gid: string
        ports[].gids[].type: string
        ports[].gids[].address: string
        limits: object
        limits.max_mr_size: integer
        limits.max_qp: integer
        limits.max_qp_wr: integer
        limits.max_sge: integer
        limits.max_sge_rd: integer
        limits.max_cq: integer
        limits.max_cqe: integer
        limits.max_mr: integer
        limits.max_pd: integer
        limits.max_qp_rd_atom: integer
        limits.max_qp_init_rd_atom: integer
        limits.max_srq: integer
        limits.max_srq_wr: integer
        limits.max_srq_sge: integer
        limits.max_ah: integer
        limits.max_pkeys: integer
        limits.max_inline_data: integer
        ",
    );
}

#[test]
fn perf_json_schema() {
    let mut schema = Schema::default();
    let maps = ["counters.client", "counters.server"];
    for args in [
        &["perf", "write-bw", "--loopback", "-n", "20", "--json"][..],
        &["perf", "atomic-lat", "--loopback", "-n", "20", "--json"],
        &["perf", "write-lat", "--loopback", "-n", "20", "--json"],
        &["perf", "read-bw", "--loopback", "-D", "0.1", "--json"],
        &["perf", "write-bw", "--loopback", "-n", "10", "--json"],
        &[
            "perf",
            "write-bw",
            "--loopback",
            "-n",
            "10",
            "--json",
            "--debug-corrupt",
        ],
    ] {
        schema.add("", &softrdma(args), &maps);
    }
    // Notes (what the counters show went wrong: drops, retransmissions,
    // injected faults) appear whenever a run had any, as a loaded machine's
    // may: one run with faults injected has them every time.
    schema.add(
        "",
        &softrdma_with(
            &["perf", "write-bw", "--loopback", "-n", "20", "--json"],
            &[("SOFTRDMA_FAULTS", "seed=7,loss=5%")],
        ),
        &maps,
    );
    assert_schema(
        "softrdma perf --json",
        &schema,
        "
        : object
        role: string
        device: string
        address: string
        peer: string
        path_mtu: integer
        yield_when_idle: bool
        setup: object
        setup.qps: integer
        setup.seconds: number
        setup.qps_per_s: number
        setup.rss_bytes_per_qp: integer
        test: string
        connection: string
        qps: integer
        mtu: integer
        tx_depth: integer
        rx_depth: integer
        outstanding_rd_atomic: integer
        cq_moderation: integer
        atomic_type: null|string
        duration_s: null|number
        verify: bool
        results: array
        results[]: object
        results[].bytes: integer
        results[].iterations: integer
        results[].operations: integer
        results[].seconds: number
        results[].bw_peak_mib_s: number
        results[].bw_average_mib_s: number
        results[].bw_peak_gbit_s: number
        results[].bw_average_gbit_s: number
        results[].msg_rate_mpps: number
        results[].verified: string
        verification: object
        verification.status: string
        verification.errors: array
        notes: array
        counters: object
        counters.client: object
        counters.client.*: integer
        counters.server: object
        counters.server.*: integer
        results[].t_min_us: number
        results[].t_max_us: number
        results[].t_typical_us: number
        results[].t_avg_us: number
        results[].t_stdev_us: number
        results[].p99_us: number
        results[].p99_9_us: number
        notes[]: string
        verification.errors[]: string
        ",
    );
}
