//! `rdma` (iproute2's RDMA tool) for softrdma's devices: what
//! `rdma link show` and `rdma dev show` print for a RoCE device, text or
//! JSON (`-j`, `-p`), from the configuration.
//!
//! iproute2's `rdma` asks the kernel over netlink (NETLINK_RDMA), which
//! knows nothing of softrdma; programs and test suites call it to find a
//! device's network interface (rdma-core's tests run `rdma link show -j`
//! first). `softrdma exec` puts a directory first on `PATH` whose `rdma`
//! is this binary: run under that name, `main.rs` comes here. The fields
//! and their order are iproute2's (rdma/link.c `link_parse_cb`,
//! rdma/dev.c `dev_parse_cb`) for a RoCE port: no subnet prefix, LID or
//! LMC (the kernel sends those for InfiniBand ports only). Every other
//! command (`rdma resource`, `rdma statistic`, `rdma link add`, …) goes to
//! the real `rdma` further on `PATH`.

use softrdma_sysfs::DeviceView;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

/// What a command line asks for.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    /// `rdma link [show|list] [DEV[/PORT]]`.
    Link(Option<String>, Option<u32>),
    /// `rdma dev [show|list] [DEV]`.
    Dev(Option<String>),
}

/// Output options.
#[derive(Debug, Default, PartialEq, Eq)]
struct Opts {
    json: bool,
    pretty: bool,
    details: bool,
}

/// The request and options, or `None` for anything this shim does not
/// answer (the real tool does).
fn parse(args: &[String]) -> Option<(Request, Opts)> {
    let mut o = Opts::default();
    let mut words = Vec::new();
    for a in args {
        match a.as_str() {
            "-j" | "-json" | "--json" => o.json = true,
            "-p" | "-pretty" | "--pretty" => o.pretty = true,
            "-d" | "-details" | "--details" => o.details = true,
            "-jp" | "-pj" => {
                o.json = true;
                o.pretty = true;
            }
            s if s.starts_with('-') => return None,
            s => words.push(s),
        }
    }
    let (obj, rest) = words.split_first()?;
    let (verb, rest) = match rest.split_first() {
        Some((v, r)) => (*v, r),
        None => ("show", rest),
    };
    if !matches!(verb, "show" | "list") || rest.len() > 1 {
        return None;
    }
    let target = rest.first().map(|s| s.to_string());
    // iproute2 accepts any prefix of the object's name.
    let is = |full: &str| !obj.is_empty() && full.starts_with(*obj);
    if is("link") {
        let (dev, port) = match target {
            None => (None, None),
            Some(t) => match t.split_once('/') {
                Some((d, p)) => (Some(d.to_string()), Some(p.parse().ok()?)),
                None => (Some(t), None),
            },
        };
        Some((Request::Link(dev, port), o))
    } else if is("dev") {
        if target.as_deref().is_some_and(|t| t.contains('/')) {
            return None;
        }
        Some((Request::Dev(target), o))
    } else {
        None
    }
}

/// A JSON string.
fn js(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// One value of an object.
enum Val {
    U(u64),
    S(String),
}

/// Objects as iproute2's json_writer writes them (compact, or pretty
/// with four-space indents).
fn json_array(objs: &[Vec<(&str, Val)>], pretty: bool) -> String {
    let v = |x: &Val| match x {
        Val::U(n) => n.to_string(),
        Val::S(s) => js(s),
    };
    if !pretty {
        let items: Vec<String> = objs
            .iter()
            .map(|o| {
                let f: Vec<String> = o
                    .iter()
                    .map(|(k, x)| format!("{}:{}", js(k), v(x)))
                    .collect();
                format!("{{{}}}", f.join(","))
            })
            .collect();
        return format!("[{}]\n", items.join(","));
    }
    if objs.is_empty() {
        return "[ ]\n".to_string();
    }
    let items: Vec<String> = objs
        .iter()
        .map(|o| {
            let f: Vec<String> = o
                .iter()
                .map(|(k, x)| format!("        {}: {}", js(k), v(x)))
                .collect();
            format!("{{\n{}\n    }}", f.join(",\n"))
        })
        .collect();
    format!("[ {} ]\n", items.join(","))
}

fn phys_state_name(s: u32) -> &'static str {
    match s {
        1 => "SLEEP",
        2 => "POLLING",
        3 => "DISABLED",
        4 => "ARMED",
        5 => "LINK_UP",
        6 => "LINK_ERROR_RECOVER",
        7 => "PHY_TEST",
        _ => "UNKNOWN",
    }
}

fn state_name(s: u32) -> &'static str {
    match s {
        0 => "NOP",
        1 => "DOWN",
        2 => "INIT",
        3 => "ARMED",
        4 => "ACTIVE",
        5 => "ACTIVE_DEFER",
        _ => "UNKNOWN",
    }
}

fn ifindex(name: &str) -> u32 {
    std::fs::read_to_string(format!("/sys/class/net/{name}/ifindex"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// `rdma link show`.
fn link(
    devs: &[DeviceView],
    dev: Option<&str>,
    port: Option<u32>,
    o: &Opts,
) -> Result<String, String> {
    let mut objs = Vec::new();
    let mut text = String::new();
    for d in devs {
        if dev.is_some_and(|n| n != d.name) || port.is_some_and(|p| p != 1) {
            continue;
        }
        let mut obj = vec![
            ("ifindex", Val::U(u64::from(d.index))),
            ("ifname", Val::S(d.name.clone())),
            ("port", Val::U(1)),
            ("state", Val::S(state_name(d.port.state).into())),
            (
                "physical_state",
                Val::S(phys_state_name(d.port.phys_state).into()),
            ),
        ];
        let mut line = format!(
            "link {}/1 state {} physical_state {} ",
            d.name,
            state_name(d.port.state),
            phys_state_name(d.port.phys_state)
        );
        if let Some(n) = &d.netdev {
            let idx = ifindex(n);
            obj.push(("netdev", Val::S(n.clone())));
            obj.push(("netdev_index", Val::U(u64::from(idx))));
            line.push_str(&format!("netdev {n} "));
            if o.details {
                line.push_str(&format!("netdev_index {idx} "));
            }
        }
        objs.push(obj);
        text.push_str(&line);
        text.push('\n');
    }
    if objs.is_empty() {
        if let Some(n) = dev {
            return Err(format!("Wrong device name {n}"));
        }
        return Err("Wrong port".into());
    }
    Ok(if o.json {
        json_array(&objs, o.pretty)
    } else {
        text
    })
}

/// `rdma dev show`.
fn dev(devs: &[DeviceView], dev: Option<&str>, o: &Opts) -> Result<String, String> {
    let mut objs = Vec::new();
    let mut text = String::new();
    for d in devs {
        if dev.is_some_and(|n| n != d.name) {
            continue;
        }
        let guid = softrdma_sysfs::guid_text(d.node_guid);
        objs.push(vec![
            ("ifindex", Val::U(u64::from(d.index))),
            ("ifname", Val::S(d.name.clone())),
            ("node_type", Val::S("ca".into())),
            ("protocol", Val::S("roce".into())),
            ("fw", Val::S(d.fw_ver.clone())),
            ("node_guid", Val::S(guid.clone())),
            ("sys_image_guid", Val::S(guid.clone())),
        ]);
        text.push_str(&format!(
            "{}: {}: node_type ca protocol roce fw {} node_guid {guid} sys_image_guid {guid} \n",
            d.index, d.name, d.fw_ver
        ));
    }
    if objs.is_empty() {
        return Err(format!("Wrong device name {}", dev.unwrap_or("")));
    }
    Ok(if o.json {
        json_array(&objs, o.pretty)
    } else {
        text
    })
}

/// The devices as a process that opened none sees them (the
/// configuration; the sysfs view's data).
fn devices() -> Result<Vec<DeviceView>, String> {
    let c = softrdma::config::global().map_err(|e| e.to_string())?;
    let mut v = softrdma_sysfs::configured_views(c, &softrdma::config::interfaces());
    for d in &mut v {
        // What ibv_query_device says (crates/ibverbs/src/query.rs).
        d.fw_ver = softrdma_sysfs::FW_VER.to_string();
    }
    Ok(v)
}

/// The real `rdma`: the first on `PATH` that is not this shim.
fn real_rdma() -> Option<PathBuf> {
    let me = std::env::current_exe().ok()?.canonicalize().ok()?;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("rdma"))
        .find(|p| p.is_file() && p.canonicalize().ok().as_deref() != Some(me.as_path()))
}

/// Runs `rdma ARGS`; returns the exit status.
pub fn main(args: &[OsString], out: &mut dyn Write) -> i32 {
    let words: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let Some((req, opts)) = parse(&words) else {
        return exec_real(args);
    };
    let r = devices().and_then(|devs| match &req {
        Request::Link(d, p) => link(&devs, d.as_deref(), *p, &opts),
        Request::Dev(d) => dev(&devs, d.as_deref(), &opts),
    });
    match r {
        Ok(s) => {
            let _ = out.write_all(s.as_bytes());
            0
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

fn exec_real(args: &[OsString]) -> i32 {
    use std::os::unix::process::CommandExt;
    match real_rdma() {
        Some(p) => {
            let e = std::process::Command::new(&p).args(args).exec();
            eprintln!("rdma: running {}: {e}", p.display());
            127
        }
        None => {
            eprintln!(
                "rdma: softrdma answers `rdma link show` and `rdma dev show`; for anything else \
                 iproute2's rdma is needed (apt-get install iproute2)"
            );
            127
        }
    }
}

/// Whether the program was run as `rdma` (the shim's link).
pub fn invoked_as_rdma(argv0: &Path) -> bool {
    argv0.file_name().is_some_and(|n| n == "rdma")
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrdma_sysfs::PortView;
    use std::net::{IpAddr, Ipv4Addr};

    fn w(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn command_lines() {
        let o = |j, p, d| Opts {
            json: j,
            pretty: p,
            details: d,
        };
        assert_eq!(
            parse(&w("link show -j")),
            Some((Request::Link(None, None), o(true, false, false)))
        );
        assert_eq!(
            parse(&w("-j -p link")),
            Some((Request::Link(None, None), o(true, true, false)))
        );
        assert_eq!(
            parse(&w("l show softrdma0/1")),
            Some((
                Request::Link(Some("softrdma0".into()), Some(1)),
                o(false, false, false)
            ))
        );
        assert_eq!(
            parse(&w("dev -d")),
            Some((Request::Dev(None), o(false, false, true)))
        );
        assert_eq!(parse(&w("resource show")), None);
        assert_eq!(parse(&w("link add rxe0 type rxe netdev eth0")), None);
        assert_eq!(parse(&w("statistic")), None);
        assert_eq!(parse(&w("-V")), None);
        assert_eq!(parse(&w("")), None);
    }

    fn dv() -> DeviceView {
        DeviceView::new(
            "softrdma0",
            0,
            Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3))),
            Some("lo".into()),
            PortView::default(),
            Path::new("/sys"),
        )
    }

    #[test]
    fn iproute2s_output() {
        let d = [dv()];
        let lo = ifindex("lo");
        assert_ne!(lo, 0, "lo has an index");
        assert_eq!(
            link(&d, None, None, &Opts::default()).unwrap(),
            "link softrdma0/1 state ACTIVE physical_state LINK_UP netdev lo \n"
        );
        let j = Opts {
            json: true,
            ..Opts::default()
        };
        assert_eq!(
            link(&d, None, None, &j).unwrap(),
            format!(
                "[{{\"ifindex\":0,\"ifname\":\"softrdma0\",\"port\":1,\"state\":\"ACTIVE\",\
                 \"physical_state\":\"LINK_UP\",\"netdev\":\"lo\",\"netdev_index\":{lo}}}]\n"
            )
        );
        let p = Opts {
            json: true,
            pretty: true,
            ..Opts::default()
        };
        let pretty = link(&d, None, None, &p).unwrap();
        assert!(
            pretty.starts_with("[ {\n        \"ifindex\": 0,\n"),
            "{pretty}"
        );
        assert!(pretty.ends_with("\n    } ]\n"), "{pretty}");
        let two = json_array(
            &[vec![("a", Val::U(1))], vec![("b", Val::S("x".into()))]],
            true,
        );
        assert_eq!(
            two,
            "[ {\n        \"a\": 1\n    },{\n        \"b\": \"x\"\n    } ]\n"
        );
        assert_eq!(json_array(&[], true), "[ ]\n");
        assert_eq!(json_array(&[], false), "[]\n");
        assert!(link(&d, Some("mlx5_0"), None, &j).is_err());
        assert!(link(&d, Some("softrdma0"), Some(2), &j).is_err());
        assert_eq!(
            dev(&d, None, &Opts::default()).unwrap(),
            format!(
                "0: softrdma0: node_type ca protocol roce fw {} node_guid 0250:56ff:fe00:0003 \
                 sys_image_guid 0250:56ff:fe00:0003 \n",
                softrdma_sysfs::FW_VER
            )
        );
        assert!(dev(&d, None, &j).unwrap().contains("\"node_type\":\"ca\""));
    }
}
