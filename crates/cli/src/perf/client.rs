//! The client: connects, sends the parameters, runs and measures every
//! size ([`bw`](super::bw), [`lat`](super::lat)), checks its side, and
//! prints perftest's table, or one JSON document with `--json`.

use super::ctrl::{Ctrl, REPLY_TIMEOUT};
use super::describe::{counter_notes, failure_counters, header_text, params_json};
use super::ops::Receives;
use super::options::Config;
use super::params::{Op, Params, Test};
use super::report::{self, counters, document, num, obj, Json, Progress, RULE};
use super::setup::Side;
use super::verify::{prepare, restore, verdict, verify_local};
use super::{bw, lat, Error};
use softrdma::cm;
use softrdma::Device;
use std::io::Write;
use std::time::Duration;

/// The client: connects, runs every size, prints the report.
pub(super) fn client(
    cfg: &Config,
    dev: Device,
    addr: &str,
    out: &mut (dyn Write + Send),
) -> Result<(), Error> {
    let p = &cfg.params;
    let o = &cfg.opts;
    let wait = Duration::from_secs_f64(o.connect_timeout);
    let stream = cm::tcp_connect(addr, wait).map_err(|e| {
        let m = e.to_string();
        let m = m.trim_start_matches("connection setup: ");
        let m = m.trim_start_matches(&format!("cannot reach {addr}: ")[..]);
        Error::Failed(format!(
            "cannot reach the server at {addr}: {m} (is `softrdma perf {}` running there?)",
            p.test.name()
        ))
    })?;
    let mut ctrl = Ctrl::new(stream, "server");
    ctrl.send(&p.to_line())?;
    ctrl.expect("OK", Some(REPLY_TIMEOUT))?;
    let side = Side::connect(dev, &mut ctrl, p, false, o.spin)?;
    let r = run_sizes(cfg, &side, &mut ctrl, addr, out);
    if let Err(e) = &r {
        failure_counters(e, &side, "client");
    }
    r
}

/// The server's answer for one size.
#[derive(Clone, Debug, Default)]
struct SizeResult {
    ok: bool,
    received: u64,
    why: String,
}

/// Parses `RESULT ok|fail received why…`.
fn parse_result(line: &str) -> SizeResult {
    let mut w = line.splitn(4, ' ');
    let _ = w.next();
    let ok = w.next() == Some("ok");
    let received = w.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let why = w.next().unwrap_or("").to_string();
    SizeResult { ok, received, why }
}

/// `write-bw 65536 B`, for the progress line.
fn label(p: &Params, k: usize) -> String {
    format!("{} {} B", p.test.name(), p.sizes[k].size)
}

/// The client's report: text as it goes, or the JSON document at the end.
struct Reporter<'a> {
    out: &'a mut (dyn Write + Send),
    json: bool,
    gbits: bool,
    /// One object per size.
    rows: Vec<Json>,
    /// The document's first fields: who ran what.
    head: Vec<(String, Json)>,
}

impl<'a> Reporter<'a> {
    fn new(out: &'a mut (dyn Write + Send), cfg: &Config, side: &Side, peer: &str) -> Self {
        let mut head = vec![
            ("role".into(), Json::from(role(cfg))),
            ("device".into(), Json::from(side.dev.name())),
            (
                "address".into(),
                Json::from(side.dev.local_addr().to_string()),
            ),
            ("peer".into(), Json::from(peer)),
            ("path_mtu".into(), Json::from(side.path_mtu as u64)),
            ("yield_when_idle".into(), Json::Bool(side.yield_idle)),
            (
                "setup".into(),
                obj([
                    ("qps", Json::from(side.setup.qps as u64)),
                    ("seconds", num(side.setup.seconds)),
                    ("qps_per_s", num(side.setup.qps_per_s())),
                    ("rss_bytes_per_qp", Json::from(side.setup.rss_per_qp())),
                ]),
            ),
        ];
        head.extend(params_json(&cfg.params));
        Reporter {
            out,
            json: cfg.opts.json,
            gbits: cfg.opts.report_gbits,
            rows: Vec::new(),
            head,
        }
    }

    /// Text output (nothing with `--json`).
    fn text(&mut self, s: &str) -> Result<(), Error> {
        if !self.json {
            self.out.write_all(s.as_bytes())?;
            self.out.flush()?;
        }
        Ok(())
    }

    /// The JSON document, with `--json`.
    fn document(&mut self, p: &Params, end: &End) -> Result<(), Error> {
        if !self.json {
            return Ok(());
        }
        let strings =
            |v: &[String]| Json::Array(v.iter().map(|s| Json::from(s.as_str())).collect());
        let mut doc = std::mem::take(&mut self.head);
        doc.push((
            "results".into(),
            Json::Array(std::mem::take(&mut self.rows)),
        ));
        doc.push((
            "verification".into(),
            obj([
                ("status", Json::from(verdict(p.verify, &end.failures))),
                ("errors", strings(&end.failures)),
            ]),
        ));
        doc.push(("notes".into(), strings(&end.notes)));
        doc.push((
            "counters".into(),
            obj([
                ("client", counters(&end.client)),
                ("server", counters(&end.server)),
            ]),
        ));
        self.out.write_all(document(&obj(doc)).as_bytes())?;
        self.out.flush()?;
        Ok(())
    }
}

/// `loopback` or `client`, as the report says.
fn role(cfg: &Config) -> &'static str {
    if cfg.opts.loopback {
        "loopback"
    } else {
        "client"
    }
}

/// What one size's run gave on the client's side.
struct Measured {
    /// Operations completed per QP.
    done: Vec<u64>,
    /// What the run itself found wrong (e.g. a latency reply's data).
    problem: Option<String>,
    /// The table row.
    row: String,
    /// The row in JSON.
    json: Vec<(String, Json)>,
}

/// Runs size `k` and computes its figures.
fn measure(
    side: &Side,
    ctrl: &mut Ctrl,
    k: usize,
    recvs: Option<&mut Receives>,
    progress: &mut Progress,
    gbits: bool,
) -> Result<Measured, Error> {
    let p = &side.params;
    if p.test.is_lat() {
        let r = lat::client(side, ctrl, k, recvs, progress)?;
        let mut samples = r.samples_ns;
        let f = report::lat_figures(p.sizes[k].size, &mut samples, p.test.halves_rtt());
        Ok(Measured {
            done: vec![r.done],
            problem: r.problem,
            row: report::lat_row(&f),
            json: report::lat_json(&f),
        })
    } else {
        let r = bw::client(side, ctrl, k, progress)?;
        Ok(Measured {
            done: r.done,
            problem: r.problem,
            row: report::bw_row(&r.figures, gbits),
            json: report::bw_json(&r.figures),
        })
    }
}

/// One size, from `SIZE k` to the server's `RESULT`: prints its row and
/// returns what failed (`notes` gets what was lost without failing).
fn run_size(
    side: &Side,
    ctrl: &mut Ctrl,
    k: usize,
    recvs: &mut Option<Receives>,
    progress: &mut Progress,
    rep: &mut Reporter,
    notes: &mut Vec<String>,
) -> Result<Vec<String>, Error> {
    let p = &side.params;
    let size = p.sizes[k].size;
    prepare(side, k, recvs.as_mut());
    ctrl.send(&format!("SIZE {k}"))?;
    ctrl.expect("READY", Some(REPLY_TIMEOUT))?;
    progress.begin(label(p, k));
    let measured = measure(side, ctrl, k, recvs.as_mut(), progress, rep.gbits);
    progress.end();
    let Measured {
        done,
        problem,
        row,
        mut json,
    } = measured?;
    let counts: Vec<String> = done.iter().map(|d| d.to_string()).collect();
    ctrl.send(&format!("END {k} {}", counts.join(" ")))?;
    let mut bad = verify_local(side, k, &done, recvs.as_ref());
    if p.verify {
        bad.extend(problem);
    }
    let res = parse_result(&ctrl.expect("RESULT", Some(REPLY_TIMEOUT))?);
    restore(side, k);
    if !res.ok {
        bad.push(format!("server: {}", res.why));
    }
    let sent: u64 = done.iter().sum();
    if p.test == Test::SendBw && res.received < sent {
        let lost = sent - res.received;
        notes.push(format!(
            "{size} B: the server received {} of {sent} messages ({lost} lost: {} does not retransmit)",
            res.received,
            p.conn.name()
        ));
    }
    rep.text(&format!("{row}\n"))?;
    for b in &bad {
        eprintln!("softrdma perf {}: {size} B: {b}", p.test.name());
    }
    json.push(("verified".into(), Json::from(verdict(p.verify, &bad))));
    if p.test.op() == Op::Send {
        json.push(("server_received".into(), Json::from(res.received)));
    }
    rep.rows.push(obj(json));
    Ok(bad.into_iter().map(|b| format!("{size} B: {b}")).collect())
}

/// How the run ended: its failures and notes, both sides' counters.
struct End {
    failures: Vec<String>,
    notes: Vec<String>,
    client: Vec<(String, u64)>,
    server: Vec<(String, u64)>,
}

/// The lines after the table: notes, the verdict, both sides' counters.
fn tail_text(side: &Side, end: &End) -> String {
    let p = &side.params;
    let mut tail = format!("{RULE}\n");
    for n in &end.notes {
        tail.push_str(&format!(" note: {n}\n"));
    }
    let verification = match verdict(p.verify, &end.failures) {
        "off" => "off (--no-verify)".to_string(),
        "ok" => format!("ok ({} size(s), both sides)", p.sizes.len()),
        _ => format!("FAILED ({} problem(s), see above)", end.failures.len()),
    };
    tail.push_str(&format!(" data verification: {verification}\n"));
    let mine = format!(
        "client counters ({} {})",
        side.dev.name(),
        side.dev.local_addr().ip()
    );
    tail.push_str(&report::counters_text(&mine, &end.client));
    tail.push_str(&report::counters_text("server counters", &end.server));
    tail.push_str(RULE);
    tail.push('\n');
    tail
}

/// The client's runs, once connected.
fn run_sizes(
    cfg: &Config,
    side: &Side,
    ctrl: &mut Ctrl,
    addr: &str,
    out: &mut (dyn Write + Send),
) -> Result<(), Error> {
    let p = &cfg.params;
    let o = &cfg.opts;
    let mut rep = Reporter::new(out, cfg, side, addr);
    rep.text(&header_text(side, addr, role(cfg)))?;
    let table_head = if p.test.is_lat() {
        report::lat_header()
    } else {
        report::bw_header(rep.gbits)
    };
    rep.text(&format!("{table_head}\n"))?;
    let mut recvs = if p.test == Test::SendLat {
        Some(Receives::new(side)?)
    } else {
        None
    };
    let mut progress = if o.json && !o.progress {
        Progress::off()
    } else {
        Progress::new(o.progress)
    };
    let mut failures = Vec::new();
    let mut notes = Vec::new();
    for k in 0..p.sizes.len() {
        let bad = run_size(
            side,
            ctrl,
            k,
            &mut recvs,
            &mut progress,
            &mut rep,
            &mut notes,
        )?;
        failures.extend(bad);
    }
    ctrl.send("BYE")?;
    let line = ctrl.expect("COUNTERS", Some(REPLY_TIMEOUT))?;
    let server = report::parse_counters(line.trim_start_matches("COUNTERS"));
    let client = report::device_counters(&side.dev);
    notes.extend(counter_notes("client", &client));
    notes.extend(counter_notes("server", &server));
    let end = End {
        failures,
        notes,
        client,
        server,
    };
    rep.text(&tail_text(side, &end))?;
    rep.document(p, &end)?;
    if end.failures.is_empty() {
        Ok(())
    } else {
        Err(Error::Verify(end.failures))
    }
}
