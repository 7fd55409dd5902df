//! Across two network namespaces joined by a veth: MPI, an unreachable
//! peer, UCT over IPv6.

use super::*;
use softrdma_testkit::{ip, netns_del};

/// Two network namespaces ("hosts") joined by a veth pair, MTU 9000.
pub(crate) struct Netns {
    pub(crate) a: String,
    pub(crate) b: String,
    pub(crate) addr_a: String,
    pub(crate) addr_b: String,
}

impl Netns {
    fn new() -> Netns {
        require_root();
        require("ip");
        let id = std::process::id() % 100_000;
        let n = Netns {
            a: format!("sru{id}a"),
            b: format!("sru{id}b"),
            addr_a: "198.18.0.1".into(),
            addr_b: "198.18.0.2".into(),
        };
        let (va, vb) = (format!("sru{id}va"), format!("sru{id}vb"));
        for x in [&n.a, &n.b] {
            netns_del(x);
            ip(&["netns", "add", x]);
        }
        ip(&[
            "link", "add", &va, "netns", &n.a, "type", "veth", "peer", "name", &vb, "netns", &n.b,
        ]);
        for (ns, dev, addr) in [(&n.a, &va, &n.addr_a), (&n.b, &vb, &n.addr_b)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "mtu", "9000", "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        n
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for x in [&self.a, &self.b] {
            netns_del(x);
        }
    }
}

#[test]
fn openmpi_across_two_namespaces() {
    let _s = serial();
    let n = Netns::new();
    mpi_suite(Mpi::OpenMpi, Some(&n));
}

/// Several ranks per host on the host's one address (issue 19): the
/// ranks of a namespace share its device, as ranks share a NIC.
fn ranks_share_the_host_address(mpi: Mpi) {
    let n = Netns::new();
    let ar = mpi_program(mpi.mpicc(), "allreduce", mpi.tag());
    let d = mpirun_n(mpi, Some(&n), 4, &ar, &[], "allreduce-4x2");
    check_mpi(
        &format!("{mpi:?} allreduce, 4 ranks in each of two namespaces"),
        &d,
        "allreduce ok (8 ranks)",
    );
}

/// Known defect (issue 19, open): under load (a full `./scripts/test`
/// alongside, load average 5-12 on 2 cores) Open MPI's 8 ranks end with
/// "transport retry counter exceeded" on several ranks of one namespace at
/// once, about 20 s in (3 of 3 runs at the end of stop 24; it passed in
/// the helper's runs on a quieter machine). MPICH's twin below passes.
/// Measured since (sharedfix, 2026-12-04; 4 failures in 12 runs with 8
/// CPU hogs beside it, 0 in 5 with 3-5): the failing rank's requester
/// sends PSNs 278-300 and retransmits 278-279 every 1.07 s, 8 times; the
/// responder QP in the other namespace, which had just sent its own burst
/// (ACKed), never answers again — no ACK, no NAK (capture of the
/// namespace's UDP 4791). Nothing is dropped on the way: the device
/// processes' `SOFTRDMA_HOST_TRACE` shows 0 ring refusals, 0 unrouted
/// datagrams and 0 bytes left in any member's ring when it left (every
/// datagram was taken by its member), /proc/net/snmp 0 UDP receive
/// errors. A responder that saw PSN 370 after ACKing 369 acknowledges or
/// NAKs it (resp.rs, dup.rs), and the responder's process kept sending on
/// that QP afterwards: so its core drops the retransmissions silently
/// (suspects: `handle_request`'s out-of-sequence branch with `nak_sent`
/// left set, `responder_ready`, or a datagram handed to the wrong core of
/// the process). Measured since (respsilent, 2026-12-04): the responder
/// core's silent paths were read one by one; the one that bit the
/// transport soak (a duplicate READ/atomic whose responder resource a
/// FLUSH had taken, dozens of seeds at 1-10 % loss ending in retry
/// exhaustion) is fixed, but Open MPI uses no FLUSH and the test still
/// fails 4 of 4 runs with 8 CPU hogs. With `TEST_SOFTRDMA_LOG=softrdma=debug`
/// the ranks' notes show where to look next: after the last QP of
/// namespace A reached RTS (18:32:52.685 in the run measured) *no* rank
/// of namespace A logged anything for 4.1 s while namespace B's
/// requesters retransmitted every 1.07 s; then A's progress thread logged
/// 4 identical "duplicate PSN" notes per QP at one instant (56.777): the
/// four retransmissions had waited, unprocessed, until the member woke.
/// Every rank of A, the spinning ones too, fell silent at once: the
/// datagrams most likely waited in A's device process (its socket, not
/// yet handed to the rings) — a device process not scheduled or not
/// woken for seconds — rather than in one member's core. (No note is
/// logged for an ACK sent, so whether the duplicates were answered then
/// is not in the log; notes carry the time they are logged.)
/// Until that is found, run it by hand: `cargo nextest run --release --all-features
/// -p softrdma-cli --test ucx_mpi --run-ignored all -E
/// 'test(openmpi_four_ranks)'`.
#[test]
#[ignore = "known defect under load (issue 19): Open MPI 4x2 ranks on shared addresses hit RC retry exceeded"]
fn openmpi_four_ranks_per_namespace_share_its_address() {
    let _s = serial();
    ranks_share_the_host_address(Mpi::OpenMpi);
}

#[test]
fn mpich_four_ranks_per_namespace_share_its_address() {
    let _s = serial();
    ranks_share_the_host_address(Mpi::Mpich);
}

#[test]
fn mpich_across_two_namespaces() {
    let _s = serial();
    let n = Netns::new();
    mpi_suite(Mpi::Mpich, Some(&n));
}

#[test]
fn unreachable_peer_address_says_which_and_how_to_set_it() {
    require("ucx_perftest");
    let _s = serial();
    let n = Netns::new();
    let args = [
        "-d",
        "softrdma0:1",
        "-x",
        "rc_verbs",
        "-t",
        "am_lat",
        "-n",
        "1000",
        "-p",
        "14500",
    ];
    let in_ns = |ns: &str, addr: Option<&str>, host: Option<&str>| {
        let mut v = args.to_vec();
        v.extend(host);
        let inner = sx(addr, "ucx_perftest", &v);
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns])
            .arg(inner.get_program())
            .args(inner.get_args());
        clean_env(&mut c);
        c
    };
    // The server is bound to its namespace's address; the client was
    // left on loopback (the default), which the server cannot reach.
    let mut server = spawn(in_ns(&n.a, Some("first"), None), "unreach-server");
    assert!(
        server.wait_listen(14500, Duration::from_secs(20)),
        "{}",
        server.text()
    );
    let mut client = spawn(in_ns(&n.b, None, Some(&n.addr_a)), "unreach-client");
    let want = format!("cannot reach the peer at {}", n.addr_a);
    let seen = client.wait_for(&want, Duration::from_secs(30));
    let server_saw = server.wait_for(
        "no softrdma device of this host is at 127.0.0.1",
        Duration::from_secs(30),
    );
    let c = client.wait(Duration::from_secs(0));
    let s = server.wait(Duration::from_secs(0));
    assert!(
        seen,
        "client did not say which address is unreachable:\n{}",
        c.out
    );
    assert!(c.out.contains("--addr"), "{}", c.out);
    assert!(
        server_saw,
        "server did not say the peer is on loopback:\n{}",
        s.out
    );
    println!(
        "client: {}",
        c.out
            .lines()
            .find(|l| l.contains("softrdma:"))
            .unwrap_or("")
    );
    println!(
        "server: {}",
        s.out
            .lines()
            .find(|l| l.contains("softrdma:"))
            .unwrap_or("")
    );
}

#[test]
fn uct_over_ipv6_between_namespaces() {
    // UD and RC between IPv6 GIDs (UD receives report wc.sl = 1; UCX then
    // compares the whole destination GID of the GRH with its own).
    require("ucx_perftest");
    let _s = serial();
    let n = Netns::new();
    for (ns, dev, a) in [(&n.a, "a", "fd00:5::1"), (&n.b, "b", "fd00:5::2")] {
        let id = std::process::id() % 100_000;
        let dev = format!("sru{id}v{dev}");
        ip(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("{a}/64"),
            "dev",
            &dev,
            "nodad",
        ]);
    }
    for (i, tl) in ["ud_verbs", "rc_verbs"].into_iter().enumerate() {
        let port = (14600 + i as u16).to_string();
        let args = [
            "-d",
            "softrdma0:1",
            "-x",
            tl,
            "-t",
            "am_lat",
            "-n",
            "2000",
            "-p",
            &port,
        ];
        let in_ns = |ns: &str, addr: &str, host: Option<&str>| {
            let mut v = args.to_vec();
            v.extend(host);
            let inner = sx(Some(addr), "ucx_perftest", &v);
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns])
                .arg(inner.get_program())
                .args(inner.get_args());
            clean_env(&mut c);
            c
        };
        let mut server = spawn(in_ns(&n.a, "fd00:5::1", None), &format!("v6-server-{tl}"));
        assert!(
            server.wait_listen(14600 + i as u16, Duration::from_secs(20)),
            "{}",
            server.text()
        );
        // The control connection runs over IPv4; RoCE over IPv6.
        let c = run(
            in_ns(&n.b, "fd00:5::2", Some(&n.addr_a)),
            &format!("v6-client-{tl}"),
            LIMIT,
        );
        let s = server.wait(Duration::from_secs(30));
        assert!(
            c.ok() && s.ok(),
            "{tl} over IPv6:\n{}\n--- server:\n{}",
            c.out,
            s.out
        );
        assert_no_ucx_warnings(tl, &c.out);
        let f = final_line(&c.out).unwrap_or_else(|| panic!("{tl}: no Final line:\n{}", c.out));
        assert_eq!(f.0, 2000, "{tl}: {f:?}");
        println!("{tl} am_lat over IPv6: {:.2} us", f.1);
    }
}
