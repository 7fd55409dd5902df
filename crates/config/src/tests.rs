use super::*;
use std::collections::HashMap;

/// Loads with these variables and files only.
fn load(vars: &[(&str, &str)], files: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let vars: HashMap<String, OsString> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), OsString::from(v)))
        .collect();
    let files: HashMap<PathBuf, String> = files
        .iter()
        .map(|(k, v)| (PathBuf::from(k), v.to_string()))
        .collect();
    Config::load_from(&|k| vars.get(k).cloned(), &|p| {
        files
            .get(p)
            .cloned()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    })
}

fn err(vars: &[(&str, &str)], files: &[(&str, &str)]) -> String {
    load(vars, files).unwrap_err().to_string()
}

#[test]
fn defaults() {
    let c = load(&[], &[]).unwrap();
    assert_eq!(c.devices.len(), 1);
    let d = &c.devices[0];
    assert_eq!(d.name, "softrdma0");
    assert_eq!(d.addr, Setting::default_value(AddrSpec::Auto));
    assert_eq!(d.mtu, Setting::default_value(4096));
    assert_eq!(c.config_file.value, None);
    assert_eq!(c.spin_us.value, 20);
    assert_eq!(c.refuse_sends.value, 0.0);
    assert_eq!(c.poll_yield.value, None);
    assert_eq!(c.log.value, None);
    // rxe's identity: a vendor, but no real one.
    assert_eq!(c.vendor_id.value, 0xff_ffff);
    assert_eq!(c.vendor_part_id.value, 0);
    assert!(c.describe().iter().all(|(_, _, s)| **s == Source::Default));
}

#[test]
fn environment() {
    let c = load(
        &[
            ("SOFTRDMA_ADDR", " if:va "),
            ("SOFTRDMA_MTU", "1024"),
            ("SOFTRDMA_SPIN_US", "0"),
            ("SOFTRDMA_REFUSE_SENDS", "0.3"),
            ("SOFTRDMA_POLL_YIELD", "never"),
            ("SOFTRDMA_VENDOR_ID", "0x02c9"),
            ("SOFTRDMA_VENDOR_PART_ID", "4119"),
            ("SOFTRDMA_PCAP", "/tmp/{addr}.pcap"),
            ("SOFTRDMA_LOG", "debug"),
            // An empty variable counts as unset.
            ("SOFTRDMA_CONFIG", ""),
        ],
        &[],
    )
    .unwrap();
    let d = &c.devices[0];
    assert_eq!(d.addr.value, AddrSpec::Iface("va".into()));
    assert_eq!(d.addr.source, Source::Env("SOFTRDMA_ADDR"));
    assert_eq!(d.mtu.value, 1024);
    assert_eq!(d.mtu.source, Source::Env("SOFTRDMA_MTU"));
    assert_eq!(c.spin_us.value, 0);
    assert_eq!(c.refuse_sends.value, 0.3);
    assert_eq!(c.poll_yield.value, Some(false));
    assert_eq!(c.vendor_id.value, 0x2c9);
    assert_eq!(c.vendor_part_id.value, 4119);
    assert_eq!(c.pcap.value, Some(PathBuf::from("/tmp/{addr}.pcap")));
    assert_eq!(c.log.value.as_deref(), Some("debug"));
    assert_eq!(c.config_file.value, None);
}

#[test]
fn bad_values_name_the_variable_and_what_it_accepts() {
    assert_eq!(
        err(&[("SOFTRDMA_MTU", "abc")], &[]),
        "SOFTRDMA_MTU=\"abc\": want an MTU in bytes from 256 to 4096 (e.g. 1024 or 4096)"
    );
    assert!(err(&[("SOFTRDMA_MTU", "8192")], &[]).starts_with("SOFTRDMA_MTU=\"8192\""));
    assert_eq!(
        err(&[("SOFTRDMA_ADDR", "10.0.0")], &[]),
        "SOFTRDMA_ADDR=\"10.0.0\": want an IP address, auto, first or if:NAME"
    );
    for (var, v) in [
        ("SOFTRDMA_SPIN_US", "-1"),
        ("SOFTRDMA_SPIN_US", "20us"),
        ("SOFTRDMA_REFUSE_SENDS", "2"),
        ("SOFTRDMA_REFUSE_SENDS", "x"),
        ("SOFTRDMA_POLL_YIELD", "maybe"),
        ("SOFTRDMA_VENDOR_ID", "0xzz"),
        ("SOFTRDMA_VENDOR_PART_ID", "-3"),
    ] {
        let e = err(&[(var, v)], &[]);
        assert!(e.starts_with(&format!("{var}={v:?}: want ")), "{e}");
    }
}

#[test]
fn config_file() {
    let t = "# devices\nsoftrdma0 127.0.0.9 mtu=1024\n\nroce1 auto # comment\nroce2 if:lo\n";
    let c = load(&[("SOFTRDMA_CONFIG", "/c.conf")], &[("/c.conf", t)]).unwrap();
    assert_eq!(c.config_file.value, Some(PathBuf::from("/c.conf")));
    assert_eq!(c.config_file.source, Source::Env("SOFTRDMA_CONFIG"));
    let names: Vec<_> = c.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["softrdma0", "roce1", "roce2"]);
    let d = &c.devices[0];
    assert_eq!(d.addr.value, AddrSpec::Ip("127.0.0.9".parse().unwrap()));
    let line2 = Source::File {
        path: "/c.conf".into(),
        line: 2,
    };
    assert_eq!(d.addr.source, line2);
    assert_eq!(d.addr.source.to_string(), "/c.conf:2");
    assert_eq!(d.mtu.value, 1024);
    assert_eq!(d.mtu.source, line2);
    assert_eq!(c.devices[1].addr.value, AddrSpec::Auto);
    assert_eq!(c.devices[1].mtu, Setting::default_value(4096));
    // SOFTRDMA_MTU is the MTU of lines without one; a line's own wins.
    let c = load(
        &[("SOFTRDMA_CONFIG", "/c.conf"), ("SOFTRDMA_MTU", "2048")],
        &[("/c.conf", t)],
    )
    .unwrap();
    assert_eq!(c.devices[0].mtu.value, 1024);
    assert_eq!(c.devices[1].mtu.value, 2048);
    assert_eq!(c.devices[1].mtu.source, Source::Env("SOFTRDMA_MTU"));
    // The default file, when it exists; SOFTRDMA_ADDR wins over any file.
    let c = load(&[], &[(DEFAULT_CONFIG_FILE, "x 10.1.1.1\n")]).unwrap();
    assert_eq!(c.devices[0].name, "x");
    assert_eq!(c.config_file.source, Source::Default);
    let c = load(
        &[("SOFTRDMA_ADDR", "auto")],
        &[(DEFAULT_CONFIG_FILE, "x 10.1.1.1\n")],
    )
    .unwrap();
    assert_eq!(c.devices[0].name, "softrdma0");
    assert_eq!(c.config_file.value, None);
    // An empty file: no devices.
    let c = load(&[("SOFTRDMA_CONFIG", "/e")], &[("/e", "# none\n")]).unwrap();
    assert!(c.devices.is_empty());
    // ... but the default file without a device line (the package's
    // example, all comments) counts as absent: softrdma0 on auto.
    let example = include_str!("../../../packaging/softrdma.conf");
    let c = load(&[], &[(DEFAULT_CONFIG_FILE, example)]).unwrap();
    assert_eq!(c.devices.len(), 1);
    assert_eq!(c.devices[0].name, DEFAULT_DEVICE);
    assert_eq!(c.devices[0].addr.value, AddrSpec::Auto);
    assert_eq!(c.devices[0].addr.source, Source::Default);
    assert_eq!(c.config_file.value, None);
    // Each of its example lines, uncommented, parses.
    let lines: Vec<&str> = example
        .lines()
        .filter_map(|l| l.strip_prefix("#softrdma0 "))
        .collect();
    assert_eq!(lines.len(), 3, "the example's device lines");
    for l in lines {
        let text = format!("softrdma0 {l}\n");
        let c = load(&[], &[(DEFAULT_CONFIG_FILE, &text)]).unwrap();
        assert_eq!(c.devices[0].name, DEFAULT_DEVICE, "{l}");
        assert!(matches!(c.devices[0].addr.source, Source::File { .. }));
    }
}

#[test]
fn bad_config_files() {
    let conf = |text: &str| err(&[("SOFTRDMA_CONFIG", "/c")], &[("/c", text)]);
    assert_eq!(
        conf("ok auto\nx 1.2.3\n"),
        "/c:2: bad address \"1.2.3\": want an IP address, auto, first or if:NAME"
    );
    assert_eq!(
        conf("x auto mtu=99"),
        "/c:1: bad mtu \"99\": want an MTU in bytes from 256 to 4096 (e.g. 1024 or 4096)"
    );
    assert!(conf("x auto\nx auto").starts_with("/c:2: duplicate device x"));
    assert!(conf("x").starts_with("/c:1: missing address"));
    assert!(conf("x auto speed=9").starts_with("/c:1: unknown option \"speed=9\""));
    assert!(conf(&format!("{} auto", "n".repeat(64))).starts_with("/c:1: bad device name"));
    // A named file that cannot be read.
    let e = err(&[("SOFTRDMA_CONFIG", "/nope")], &[]);
    assert!(e.starts_with("/nope (env SOFTRDMA_CONFIG): "), "{e}");
}

#[test]
fn resolving() {
    let c = load(&[("SOFTRDMA_ADDR", "if:no-such-if0")], &[]).unwrap();
    let e = c.devices[0].resolve(&interfaces()).unwrap_err().to_string();
    assert!(
        e.starts_with("env SOFTRDMA_ADDR if:no-such-if0: no interface no-such-if0"),
        "{e}"
    );
    let c = load(&[("SOFTRDMA_ADDR", "if:lo")], &[]).unwrap();
    assert_eq!(
        c.devices[0].resolve(&interfaces()),
        Ok(Some("127.0.0.1".parse().unwrap()))
    );
}

#[test]
fn option_wins() {
    let s = Setting {
        value: 1024,
        source: Source::Env("SOFTRDMA_MTU"),
    };
    assert_eq!(s.clone().or_option(None), s);
    assert_eq!(
        s.or_option(Some(2048)),
        Setting {
            value: 2048,
            source: Source::Option
        }
    );
}

#[test]
fn faults_variable_and_file_option() {
    let c = load(&[("SOFTRDMA_FAULTS", "seed=7,loss=5%")], &[]).unwrap();
    let f = c.faults.value.as_ref().unwrap();
    assert_eq!(f.seed, Some(7));
    assert_eq!(f.rules[0].rates.loss, 0.05);
    assert_eq!(c.faults.source, Source::Env("SOFTRDMA_FAULTS"));
    // The variable is every device's, unless its line says otherwise.
    assert_eq!(c.devices[0].faults, c.faults);
    assert!(c
        .describe()
        .iter()
        .any(|(k, v, _)| *k == "faults" && v == "seed=7,loss=0.05"));
    let t = "a auto faults=seed=1,on=recv,dup=1%;rnr=2\nb auto\n";
    let c = load(
        &[("SOFTRDMA_CONFIG", "/c"), ("SOFTRDMA_FAULTS", "loss=1%")],
        &[("/c", t)],
    )
    .unwrap();
    let a = &c.devices[0].faults;
    assert_eq!(
        a.source,
        Source::File {
            path: "/c".into(),
            line: 1
        }
    );
    let spec = a.value.as_ref().unwrap();
    assert_eq!((spec.seed, spec.rules.len()), (Some(1), 2));
    assert_eq!(c.devices[1].faults.source, Source::Env("SOFTRDMA_FAULTS"));
    // Defaults: none.
    let c = load(&[], &[]).unwrap();
    assert_eq!(c.faults, Setting::default_value(None));
}

#[test]
fn bad_faults_name_the_variable_or_line() {
    let e = err(&[("SOFTRDMA_FAULTS", "loss=20")], &[]);
    assert!(
        e.starts_with(
            "SOFTRDMA_FAULTS=\"loss=20\": want fault rules ITEM,ITEM;ITEM,… with items seed=N"
        ),
        "{e}"
    );
    assert!(
        e.ends_with("(loss=\"20\": want a probability from 0 to 1, or a percentage (0.05 or 5%))"),
        "{e}"
    );
    let e = err(
        &[("SOFTRDMA_CONFIG", "/c")],
        &[("/c", "x auto faults=delay=9")],
    );
    assert!(
        e.starts_with("/c:1: bad faults \"delay=9\": delay=\"9\": want a time with its unit"),
        "{e}"
    );
}

#[test]
fn same_host_from_the_environment_and_the_file() {
    assert!(load(&[], &[]).unwrap().same_host.value, "on by default");
    let c = load(&[("SOFTRDMA_SAME_HOST", "udp")], &[]).unwrap();
    assert!(!c.same_host.value);
    assert_eq!(c.same_host.source, Source::Env("SOFTRDMA_SAME_HOST"));
    let file = [("/c", "same_host = udp\nd0 127.0.0.9\n")];
    let c = load(&[("SOFTRDMA_CONFIG", "/c")], &file).unwrap();
    assert!(!c.same_host.value);
    assert!(matches!(c.same_host.source, Source::File { line: 1, .. }));
    assert_eq!(c.devices.len(), 1);
    // The environment wins over the file.
    let c = load(
        &[("SOFTRDMA_CONFIG", "/c"), ("SOFTRDMA_SAME_HOST", "shm")],
        &file,
    )
    .unwrap();
    assert!(c.same_host.value);
    assert!(err(&[("SOFTRDMA_SAME_HOST", "tcp")], &[]).contains("shm (or on) or udp (or off)"));
    let bad = [("/c", "same_host = maybe\n")];
    assert!(err(&[("SOFTRDMA_CONFIG", "/c")], &bad).contains("bad same_host"));
}
