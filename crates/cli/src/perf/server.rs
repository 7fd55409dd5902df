//! The server: waits for one client, takes its parameters, and serves each
//! size (posts receives, lets the device answer, checks what landed); it
//! reports to the client (`RESULT`, `COUNTERS`) and, run alone, prints its
//! own summary or JSON document.

use super::ctrl::{Ctrl, REPLY_TIMEOUT};
use super::describe::{failure_counters, header_text, params_json};
use super::ops::Receives;
use super::options::Config;
use super::params::{Op, Params};
use super::report::{self, document, obj, Json, RULE};
use super::setup::Side;
use super::verify::{prepare, restore, verdict, verify_local};
use super::{bw, lat, Error};
use softrdma::cm;
use softrdma::Device;
use std::io::Write;

/// The server's own text output: only when it talks and not in JSON.
struct Say<'a> {
    out: &'a mut (dyn Write + Send),
    on: bool,
}

impl Say<'_> {
    fn text(&mut self, s: &str) -> Result<(), Error> {
        if self.on {
            self.out.write_all(s.as_bytes())?;
            self.out.flush()?;
        }
        Ok(())
    }
}

/// The server: waits for one client and serves its run. `talk`: print
/// the server's own report (not in `--loopback`, where the client prints).
pub(super) fn server(
    cfg: &Config,
    dev: Device,
    listener: cm::Listener,
    out: &mut (dyn Write + Send),
    talk: bool,
) -> Result<(), Error> {
    let o = &cfg.opts;
    let test = cfg.params.test;
    let mut say = Say {
        out,
        on: talk && !o.json,
    };
    let listen = listener
        .local_addr()
        .map_or_else(|_| "?".to_string(), |a| a.to_string());
    say.text(&format!(
        "{RULE}\n softrdma perf {} server: device {} at {}, waiting for a client on TCP {listen}\n",
        test.name(),
        dev.name(),
        dev.local_addr()
    ))?;
    let stream = listener.accept()?;
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "?".to_string(), |a| a.to_string());
    let mut ctrl = Ctrl::new(stream, "client");
    let line = ctrl.recv(Some(REPLY_TIMEOUT))?;
    let p = match Params::from_line(&line) {
        Ok(p) if p.test == test => p,
        Ok(p) => {
            let m = format!(
                "this server runs {}, the client asked for {}",
                test.name(),
                p.test.name()
            );
            let _ = ctrl.send(&format!("ERR {m}"));
            return Err(Error::Failed(m));
        }
        Err(m) => {
            let _ = ctrl.send(&format!("ERR {m}"));
            return Err(Error::Failed(format!("client {peer}: {m}")));
        }
    };
    ctrl.send("OK")?;
    let side = Side::connect(dev, &mut ctrl, &p, true, o.spin)?;
    let r = serve_sizes(cfg, &side, &mut ctrl, &peer, say.out, talk);
    if let Err(e) = &r {
        if talk {
            failure_counters(e, &side, "server");
        }
    }
    r
}

/// What one size gave on the server's side.
struct Served {
    /// Operations (messages received, or done) over all QPs.
    received: u64,
    /// What failed.
    bad: Vec<String>,
}

/// Waits for `SIZE k` (`None` at `BYE`).
fn next_size(ctrl: &mut Ctrl, p: &Params) -> Result<Option<usize>, Error> {
    let line = ctrl.recv(None)?;
    let mut w = line.split_whitespace();
    match w.next() {
        Some("SIZE") => {}
        Some("BYE") => return Ok(None),
        _ => {
            return Err(Error::Failed(format!(
                "lost step with the client: {line:?}"
            )))
        }
    }
    w.next()
        .and_then(|s| s.parse().ok())
        .filter(|&k| k < p.sizes.len())
        .map(Some)
        .ok_or_else(|| Error::Failed(format!("the client asked for {line:?}")))
}

/// Serves size `k`: prepares, answers `READY`, lets the client run, checks
/// and answers `RESULT`.
fn serve_size(
    side: &Side,
    ctrl: &mut Ctrl,
    k: usize,
    recvs: &mut Option<Receives>,
) -> Result<Served, Error> {
    let p = &side.params;
    prepare(side, k, recvs.as_mut());
    ctrl.send("READY")?;
    let (done, problem) = if p.test.is_lat() {
        lat::server(side, ctrl, k, recvs.as_mut())?
    } else {
        (bw::server(side, ctrl, k, recvs.as_mut())?, None)
    };
    let mut bad = verify_local(side, k, &done, recvs.as_ref());
    if p.verify {
        bad.extend(problem);
    }
    restore(side, k);
    let received: u64 = match recvs {
        Some(r) => r.count.iter().sum(),
        None => done.iter().sum(),
    };
    if bad.is_empty() {
        ctrl.send(&format!("RESULT ok {received}"))?;
    } else {
        let why = bad.join("; ").replace('\n', " ");
        ctrl.send(&format!("RESULT fail {received} {why}"))?;
    }
    Ok(Served { received, bad })
}

/// The server's runs, once connected.
fn serve_sizes(
    cfg: &Config,
    side: &Side,
    ctrl: &mut Ctrl,
    peer: &str,
    out: &mut (dyn Write + Send),
    talk: bool,
) -> Result<(), Error> {
    let p = &side.params;
    let mut say = Say {
        out,
        on: talk && !cfg.opts.json,
    };
    say.text(&format!(
        " client {peer}: the client's parameters are used: {} {} QP(s), {} size(s)\n{}",
        p.conn.name(),
        p.qps,
        p.sizes.len(),
        header_text(side, peer, "server")
    ))?;
    let mut recvs = if p.test.op() == Op::Send {
        Some(Receives::new(side)?)
    } else {
        None
    };
    let mut failures = Vec::new();
    let mut sizes_json = Vec::new();
    while let Some(k) = next_size(ctrl, p)? {
        let Served { received, bad } = serve_size(side, ctrl, k, &mut recvs)?;
        let size = p.sizes[k].size;
        let status = verdict(p.verify, &bad);
        say.text(&format!(
            " {size} B: {received} operations served, data verification {status}\n"
        ))?;
        for b in &bad {
            if talk {
                eprintln!("softrdma perf {} server: {size} B: {b}", p.test.name());
            }
        }
        sizes_json.push(obj([
            ("bytes", Json::from(size)),
            ("operations", Json::from(received)),
            ("verified", Json::from(status)),
        ]));
        failures.extend(bad.into_iter().map(|b| format!("{size} B: {b}")));
    }
    let counters = report::device_counters(&side.dev);
    ctrl.send(&format!("COUNTERS {}", report::counters_words(&counters)))?;
    let mine = format!(
        "server counters ({} {})",
        side.dev.name(),
        side.dev.local_addr().ip()
    );
    say.text(&format!(
        "{RULE}\n{}{RULE}\n",
        report::counters_text(&mine, &counters)
    ))?;
    if talk && cfg.opts.json {
        let mut doc = vec![
            ("role".to_string(), Json::from("server")),
            ("device".into(), Json::from(side.dev.name())),
            (
                "address".into(),
                Json::from(side.dev.local_addr().to_string()),
            ),
            ("peer".into(), Json::from(peer)),
        ];
        doc.extend(params_json(p));
        doc.push(("sizes".into(), Json::Array(sizes_json)));
        let errors = failures.iter().map(|f| Json::from(f.as_str())).collect();
        doc.push(("errors".into(), Json::Array(errors)));
        doc.push(("counters".into(), report::counters(&counters)));
        say.out.write_all(document(&obj(doc)).as_bytes())?;
        say.out.flush()?;
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Error::Verify(failures))
    }
}
