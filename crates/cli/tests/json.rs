//! `softrdma dump --json`: every line is a JSON object, and the objects say
//! what the text dump says (same packets, fields, flows and summary).

mod common;

use serde_json::Value;
use softrdma_cli::dump::{dump_bytes, Options};

#[test]
fn json_lines_agree_with_the_text_dump() {
    let mut packets_seen = 0;
    for c in common::captures() {
        let bytes = std::fs::read(common::data_dir().join(&c)).unwrap();
        let (text, res) = dump_bytes(&bytes, &Options::default());
        let stats = res.unwrap();
        let (json, res) = dump_bytes(
            &bytes,
            &Options {
                json: true,
                ..Options::default()
            },
        );
        res.unwrap();
        let objs: Vec<Value> = json
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{c}: {e}: {l}")))
            .collect();
        let of = |t: &'static str| objs.iter().filter(move |o| o["type"] == t);
        // Packets: one per text line, same frame, same decoded fields.
        let text_pkts: Vec<&str> = text
            .lines()
            .filter(|l| l.trim_start().starts_with(|ch: char| ch.is_ascii_digit()))
            .collect();
        let pkts: Vec<&Value> = of("packet").collect();
        assert_eq!(pkts.len() as u64, stats.roce, "{c}");
        assert_eq!(pkts.len(), text_pkts.len(), "{c}");
        for p in &pkts {
            let frame = p["frame"].as_u64().unwrap();
            let line = text_pkts
                .iter()
                .find(|l| l.split_whitespace().next() == Some(&frame.to_string()))
                .unwrap_or_else(|| panic!("{c}: no text line for frame {frame}"));
            if let Some(t) = p["time"].as_str() {
                assert_eq!(line.split_whitespace().nth(1), Some(t), "{c} {frame}");
            }
            if let Some(m) = p["malformed"].as_str() {
                assert!(line.contains(&format!("malformed ({m})")), "{c} {frame}");
                continue;
            }
            let name = p["name"].as_str().unwrap();
            let want = [
                format!(" {name} "),
                format!("qp={:#08x}", p["qp"].as_u64().unwrap()),
                format!("psn={:#08x}", p["psn"].as_u64().unwrap()),
                format!(":{} > ", p["sport"].as_u64().unwrap()),
            ];
            for w in want {
                assert!(line.contains(&w), "{c} frame {frame}: {w:?} not in {line}");
            }
            // A MAD to QP 1 has its CM message after the ICRC verdict.
            assert_eq!(
                p["icrc_ok"].as_bool().unwrap(),
                line.ends_with("icrc=ok") || line.contains(" icrc=ok CM "),
                "{c} {frame}"
            );
            if let Some(r) = p.get("reth") {
                assert!(line.contains(&format!("len={})", r["len"])), "{c} {frame}");
                assert!(line.contains(&format!("va={}", r["va"].as_str().unwrap())));
            }
            if let Some(a) = p.get("aeth") {
                assert!(line.contains(&format!("msn={:#08x})", a["msn"].as_u64().unwrap())));
            }
            if line.contains(" payload=") {
                assert!(
                    line.contains(&format!(" payload={} ", p["payload"])),
                    "{c} {frame}"
                );
            }
            packets_seen += 1;
        }
        // Flows and summary.
        let flows: Vec<&Value> = of("flow").collect();
        assert_eq!(flows.len(), stats.flows.len(), "{c}");
        for (o, (k, f)) in flows.iter().zip(&stats.flows) {
            assert_eq!(o["src"], k.src.to_string());
            assert_eq!(o["qp"], k.qp);
            assert_eq!(o["packets"], f.packets);
            assert_eq!(o["distinct"], f.distinct() as u64);
            assert_eq!(o["psn_lo"], f.psn_range().0.value());
            let aeth: u64 = o["aeth"]
                .as_object()
                .unwrap()
                .values()
                .map(|v| v.as_u64().unwrap())
                .sum();
            assert_eq!(aeth, f.aeth.values().sum::<u64>());
        }
        let s: Vec<&Value> = of("summary").collect();
        assert_eq!(s.len(), 1, "{c}");
        assert_eq!(s[0]["frames"], stats.frames);
        assert_eq!(s[0]["roce"], stats.roce);
        let skipped: u64 = s[0]["skipped"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(skipped, stats.frames - stats.roce, "{c}");
        assert_eq!(
            objs.len(),
            pkts.len() + flows.len() + 1,
            "{c}: stray objects"
        );
    }
    assert!(packets_seen > 10_000, "{packets_seen}");
}
