//! uDAPL: dtest and dapltest over the ofa-v2 provider on one host and over
//! a 1500-byte veth.

use super::*;

/// One side of a uDAPL pair: its namespace, its device's address, its
/// DAT_OVERRIDE file (where the provider's name resolves to its own
/// address).
pub(crate) struct DaplSide<'a> {
    ns: Option<&'a str>,
    addr: &'a str,
    conf: &'a Path,
}

/// dtest (RDMA WRITE and READ of 256 KiB both ways, checked, a ping-pong)
/// and dapltest (a transaction test with data validation, then its quit
/// command) with uDAPL provider `provider`, the client connecting to
/// `target` (the server's IA address).
pub(crate) fn udapl_pair(provider: &str, server: &DaplSide, client: &DaplSide, target: &str) {
    let (sns, saddr, sconf) = (server.ns, server.addr, server.conf);
    let (cns, caddr, cconf) = (client.ns, client.addr, client.conf);
    require("dtest", "dapl2-utils");
    let with = |mut c: Command, conf: &Path| {
        c.env("DAT_OVERRIDE", conf);
        c
    };
    // dtest: the server serves one client and exits.
    let mut server = spawn(
        with(
            sx(
                sns,
                saddr,
                "dtest",
                &["-P", provider, "-s", "-B", "10", "-b", "262144"],
            ),
            sconf,
        ),
        &format!("dtest-{provider}-server"),
    );
    assert!(
        server.wait_for("waiting for client", Duration::from_secs(30)),
        "{}",
        server.text()
    );
    // The scm provider exchanges QP data over TCP; dtest says it waits
    // before that port listens ("Couldn't connect to …" once on CI).
    if provider.contains("scm") {
        assert!(
            server.wait_listening(sns, Duration::from_secs(30)),
            "dtest {provider} server never listened on TCP:\n{}",
            server.text()
        );
    }
    let c = run(
        with(
            sx(
                cns,
                caddr,
                "dtest",
                &["-P", provider, "-h", target, "-B", "10", "-b", "262144"],
            ),
            cconf,
        ),
        &format!("dtest-{provider}-client"),
        LIMIT,
    );
    let sd = server.wait(Duration::from_secs(30));
    for (who, d, peer) in [("client", &c, "server"), ("server", &sd, "client")] {
        d.expect_ok();
        // dtest's READ phase: each side writes "<side> RDMA read data" into
        // its receive buffer and READs the peer's, with nothing between
        // the peer's strcpy and the READ (dtest.c do_rdma_read_with_msg):
        // a peer scheduled late still holds what this side's WRITE phase
        // put there ("<who> RDMA write data"), on a NIC as here. Either is
        // the peer's buffer read right; anything else is not.
        let read_ok = d.out.contains(&format!(
            "RCV RDMA read buffer contains: {peer} RDMA read data"
        )) || d.out.contains(&format!(
            "RCV RDMA read buffer contains: {who} RDMA write data"
        ));
        assert!(
            d.out.contains("DAPL Test Complete. PASSED")
                && d.out.contains(&format!(
                    "RDMA write buffer contains: {peer} RDMA write data"
                ))
                && read_ok,
            "dtest {provider} {who}:\n{}",
            d.out
        );
    }
    let pp = c
        .out
        .lines()
        .find(|l| l.contains("Message PingPong"))
        .unwrap_or("");
    println!("dtest {provider}: {}", pp.trim());

    // dapltest: a server, a transaction test against it, quit.
    let mut server = spawn(
        with(
            sx(sns, saddr, "dapltest", &["-T", "S", "-D", provider]),
            sconf,
        ),
        &format!("dapltest-{provider}-server"),
    );
    assert!(
        server.wait_for("Service Point Ready", Duration::from_secs(30)),
        "{}",
        server.text()
    );
    if provider.contains("scm") {
        assert!(
            server.wait_listening(sns, Duration::from_secs(30)),
            "dapltest {provider} server never listened on TCP:\n{}",
            server.text()
        );
    }
    let t = run(
        with(
            sx(
                cns,
                caddr,
                "dapltest",
                &[
                    "-T", "T", "-s", target, "-D", provider, "-i", "100", "-t", "2", "-w", "2",
                    "-V", "-P", "client", "SR", "4096", "server", "SR", "4096", "client", "RR",
                    "65536", "server", "RW", "65536",
                ],
            ),
            cconf,
        ),
        &format!("dapltest-{provider}-client"),
        LIMIT,
    );
    let q = run(
        with(
            sx(
                cns,
                caddr,
                "dapltest",
                &["-T", "Q", "-s", target, "-D", provider],
            ),
            cconf,
        ),
        &format!("dapltest-{provider}-quit"),
        LIMIT,
    );
    let sd = server.wait(Duration::from_secs(30));
    t.expect_ok();
    q.expect_ok();
    sd.expect_ok();
    assert!(
        t.out.contains("End of Work -- Client Exiting") && t.out.contains("Total RDMA Read"),
        "dapltest {provider}:\n{}",
        t.out
    );
    for d in [&t, &sd] {
        assert!(
            !d.out.contains("FAIL") && !d.out.contains("rror"),
            "dapltest {provider}:\n{}",
            d.out
        );
    }
}

pub(crate) fn dat_conf(dir: &Path, name: &str, lines: &[String]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    p
}

/// uDAPL over a veth with the default 1500-byte MTU and no MTU setting:
/// the port MTU follows the interface (1024), so the scm provider (which
/// takes its path MTU from the port) and the cma provider (whose accept
/// assigns `cm_id->qp` itself) both run.
#[test]
fn udapl_dtest_and_dapltest_over_a_1500_byte_veth() {
    let _s = serial();
    let n = Netns::new(17, 1, None);
    let dev = run(
        sx(Some(&n.a), &n.addrs_a[0], "ibv_devinfo", &[]),
        "ibv_devinfo",
        LIMIT,
    );
    dev.expect_ok();
    assert!(dev.out.contains("active_mtu:\t\t1024 (3)"), "{}", dev.out);
    let dir = work_dir("udapl-veth");
    // The same names on both sides: the veth's ends share their name.
    let conf = dat_conf(
        &dir,
        "dat.conf",
        &[
            format!(
                "ofa-v2-cma u2.0 nonthreadsafe default libdaplofa.so.2 dapl.2.0 \"{} 0\" \"\"",
                n.ifname
            ),
            "ofa-v2-scm u2.0 nonthreadsafe default libdaploscm.so.2 dapl.2.0 \"softrdma0 1\" \"\""
                .into(),
        ],
    );
    let server = DaplSide {
        ns: Some(&n.a),
        addr: &n.addrs_a[0],
        conf: &conf,
    };
    let client = DaplSide {
        ns: Some(&n.b),
        addr: &n.addrs_b[0],
        conf: &conf,
    };
    for p in ["ofa-v2-cma", "ofa-v2-scm"] {
        udapl_pair(p, &server, &client, &n.addrs_a[0]);
    }
}

#[test]
fn udapl_dtest_and_dapltest_on_one_host() {
    let _s = serial();
    let dir = work_dir("udapl-host");
    // Each process its own file: the provider's name is the same on both
    // sides (dtest's client takes the server's), its address each one's.
    let conf = |k: u8| {
        dat_conf(
            &dir,
            &format!("dat{k}.conf"),
            &[
                format!(
                    "ofa-v2-cma u2.0 nonthreadsafe default libdaplofa.so.2 dapl.2.0 \"127.66.15.{k} 0\" \"\""
                ),
                "ofa-v2-scm u2.0 nonthreadsafe default libdaploscm.so.2 dapl.2.0 \"softrdma0 1\" \"\""
                    .into(),
            ],
        )
    };
    let (c1, c2) = (conf(1), conf(2));
    let server = DaplSide {
        ns: None,
        addr: "127.66.15.1",
        conf: &c1,
    };
    let client = DaplSide {
        ns: None,
        addr: "127.66.15.2",
        conf: &c2,
    };
    udapl_pair("ofa-v2-cma", &server, &client, "127.66.15.1");
    // The scm provider exchanges QP numbers over TCP on the address of
    // the host's first interface other than loopback (getifaddrs), not on
    // the device's: the client must name that address. Both processes
    // then have the same IA address, which the provider does not mind.
    let host = first_host_ipv4()
        .expect("the scm provider needs an interface other than loopback with an IPv4 address");
    udapl_pair("ofa-v2-scm", &server, &client, &host);
}

/// The address uDAPL's scm provider takes as its own: the first IPv4
/// address of an interface other than `lo`, in getifaddrs order.
pub(crate) fn first_host_ipv4() -> Option<String> {
    let o = Command::new("ip")
        .args(["-4", "-o", "addr", "show"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.split_whitespace().nth(1) != Some("lo"))
        .find_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let i = w.iter().position(|x| *x == "inet")?;
            Some(w.get(i + 1)?.split('/').next()?.to_string())
        })
}
