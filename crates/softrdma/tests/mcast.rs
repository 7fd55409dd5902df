//! UD multicast over real sockets: devices on loopback addresses of one
//! host (127.67.1.x), IPv6 devices on one interface of a namespace, and
//! devices in two namespaces joined by a veth pair (IPv4 and IPv6). A
//! sender's UD SENDs to a group reach every attached QP whose Q_Key
//! matches, on every device that joined — its own included — and no other;
//! detaching leaves the IP group.
//!
//! The namespace tests need root and iproute2 (CI runs as root); without
//! them they fail with a message, unless `SOFTRDMA_SKIP_NETNS=1` says to
//! skip.

mod common;

use common::{need_root, role, sh, wait_line, Namespaces};
use softrdma::grh::{gid_of, GRH_LEN};
use softrdma::*;
use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::process::Command;
use std::time::Duration;

const QKEY: u32 = 0x1111_1111;
const OTHER_QKEY: u32 = 0x2222_2222;
const N: usize = 20;
const T: Duration = Duration::from_secs(20);

struct Member {
    qp: QueuePair,
    cq: CompletionQueue,
    mr: MemoryRegion,
}

fn ud_qp(dev: &Device, pd: &ProtectionDomain, qkey: u32) -> Member {
    let cq = dev.create_cq(256, None).unwrap();
    let qp = pd
        .qp_builder(QpType::Ud, &cq, &cq)
        .max_recv_wr(128)
        .build()
        .unwrap();
    for (a, m) in QpAttr::ud_to_rts(QKey(qkey)) {
        qp.modify(&a, m).unwrap();
    }
    let mr = pd.alloc_mr(128 * 1024, Access::LOCAL_WRITE).unwrap();
    for i in 0..100u64 {
        qp.post_recv(RecvWr {
            wr_id: i,
            sg_list: vec![mr.sge(i as usize * 1024, 1024)],
        })
        .unwrap();
    }
    Member { qp, cq, mr }
}

/// Sends `n` SENDs with immediate `base + i` and payload `msg(base + i)`
/// from `m`'s QP to `group`.
fn send(m: &Member, pd: &ProtectionDomain, group: IpAddr, base: u32, n: usize) {
    let ah = pd.create_ah(AddressVector::to(group)).unwrap();
    for i in 0..n as u32 {
        let data = msg(base + i);
        m.mr.write(100 * 1024, &data);
        let mut wr = SendWr::new((base + i) as u64, WrOpcode::SendWithImm);
        wr.imm_data = base + i;
        wr.flags = SendFlags::SIGNALED.with(SendFlags::INLINE);
        wr.inline_data = data;
        wr.ud = Some(UdDest {
            ah: ah.id(),
            remote_qpn: Qpn::MULTICAST,
            remote_qkey: QKey(QKEY),
        });
        m.qp.post_send(wr).unwrap();
        let wc = m.cq.wait(1, T).unwrap();
        assert_eq!(wc.len(), 1);
        assert_eq!(wc[0].status, WcStatus::Success);
    }
}

fn msg(i: u32) -> Vec<u8> {
    format!("multicast message {i:04}").into_bytes()
}

/// Waits for `n` receive completions on `m` and checks each: immediate
/// `base + k` in order, the payload, the sender's QP, the group as the GRH
/// area's destination.
fn expect(m: &Member, n: usize, base: u32, from: Qpn, group: IpAddr) {
    let wc = m.cq.wait(n, T).unwrap();
    assert_eq!(wc.len(), n, "{:?} got {} of {n}", m.qp, wc.len());
    for (k, w) in wc.iter().enumerate() {
        assert_eq!(w.status, WcStatus::Success);
        assert_eq!(w.opcode, WcOpcode::Recv);
        assert_eq!(w.imm_or_inv, base + k as u32);
        assert_eq!(w.src_qp, from);
        let data = msg(base + k as u32);
        assert_eq!(w.byte_len as usize, GRH_LEN + data.len());
        let off = w.wr_id as usize * 1024;
        assert_eq!(m.mr.to_vec(off + GRH_LEN, data.len()), data);
        let area = m.mr.to_vec(off, GRH_LEN);
        let dst = match group {
            IpAddr::V4(g) => area[36..40] == g.octets(),
            IpAddr::V6(g) => area[24..40] == g.octets(),
        };
        assert!(dst, "GRH area {area:02x?} does not name {group}");
    }
}

fn no_more(m: &Member) {
    let mut b = [EMPTY_WC; 4];
    assert_eq!(m.cq.poll(&mut b).unwrap(), 0, "{:?}", &b[..1]);
}

/// Three devices on loopback: a sender (also a member), a device with two
/// members, a device with a member and a QP of another Q_Key.
fn three_devices(addrs: [&str; 3], group: &str) {
    let group: IpAddr = group.parse().unwrap();
    let gid = gid_of(group);
    let devs: Vec<Device> = addrs
        .iter()
        .map(|a| Device::open(DeviceOptions::at(a.parse().unwrap())).unwrap())
        .collect();
    let pds: Vec<ProtectionDomain> = devs.iter().map(|d| d.alloc_pd().unwrap()).collect();
    let sender = ud_qp(&devs[0], &pds[0], QKEY);
    let own = ud_qp(&devs[0], &pds[0], QKEY);
    let two = [
        ud_qp(&devs[1], &pds[1], QKEY),
        ud_qp(&devs[1], &pds[1], QKEY),
    ];
    let third = ud_qp(&devs[2], &pds[2], QKEY);
    let other_key = ud_qp(&devs[2], &pds[2], OTHER_QKEY);
    for m in [&own, &two[0], &two[1], &third, &other_key] {
        m.qp.attach_mcast(gid).unwrap();
    }
    assert!(devs.iter().all(|d| d.mcast_groups() == vec![group]));
    send(&sender, &pds[0], group, 0, N);
    let from = sender.qp.qpn();
    for m in [&own, &two[0], &two[1], &third] {
        expect(m, N, 0, from, group);
    }
    no_more(&sender);
    no_more(&other_key);
    assert_eq!(devs[2].counters().bad_qkey, N as u64);
    assert_eq!(devs[1].counters().mcast_copies, 2 * N as u64);
    // The second device leaves: its QPs get nothing more, the others do.
    for m in &two {
        m.qp.detach_mcast(gid).unwrap();
    }
    assert!(devs[1].mcast_groups().is_empty());
    let before = devs[1].counters().rx_packets;
    send(&sender, &pds[0], group, 100, N);
    expect(&third, N, 100, from, group);
    expect(&own, N, 100, from, group);
    for m in &two {
        no_more(m);
    }
    assert_eq!(devs[1].counters().rx_packets, before);
    // Detaching again: EINVAL.
    let e = two[0].qp.detach_mcast(gid).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL, "{e}");
    // A dropped QP leaves its groups; the device leaves the IP group with
    // its last member.
    drop(other_key);
    assert_eq!(devs[2].mcast_groups(), vec![group]);
    drop(third);
    assert!(devs[2].mcast_groups().is_empty());
}

#[test]
fn ipv4_members_on_loopback_each_get_a_copy() {
    three_devices(["127.67.1.1", "127.67.1.2", "127.67.1.3"], "239.67.1.1");
}

#[test]
fn attach_errors() {
    let dev = Device::open(DeviceOptions::at("127.67.1.9".parse().unwrap())).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let m = ud_qp(&dev, &pd, QKEY);
    let cq = dev.create_cq(4, None).unwrap();
    let rc = pd.qp_builder(QpType::Rc, &cq, &cq).build().unwrap();
    let einval = |r: softrdma::Result<()>| r.unwrap_err().errno() == libc::EINVAL;
    assert!(einval(
        m.qp.attach_mcast(gid_of("10.0.0.1".parse().unwrap()))
    ));
    assert!(einval(
        m.qp.attach_mcast(gid_of("ff0e::1".parse().unwrap()))
    ));
    assert!(einval(
        rc.attach_mcast(gid_of("239.67.1.9".parse().unwrap()))
    ));
    // Attaching twice is fine; one IP group either way.
    let g = gid_of("239.67.1.9".parse().unwrap());
    m.qp.attach_mcast(g).unwrap();
    m.qp.attach_mcast(g).unwrap();
    assert_eq!(m.qp.mcast_groups(), vec![g]);
    assert_eq!(dev.mcast_groups().len(), 1);
}

// ------------------------------------------------------ namespaces ----

/// In a namespace (started by the tests below): runs `MCAST_ROLE`.
#[test]
#[ignore = "a role: the test that needs it runs it in its own process (with --ignored)"]
fn mcast_role() {
    let role = std::env::var("MCAST_ROLE")
        .expect("MCAST_ROLE unset: this role runs only when its parent test starts it");
    let group: IpAddr = std::env::var("MCAST_GROUP").unwrap().parse().unwrap();
    let addr: IpAddr = std::env::var("MCAST_ADDR").unwrap().parse().unwrap();
    match role.as_str() {
        // Two devices on one interface of this namespace.
        "one-host" => {
            let b: IpAddr = std::env::var("MCAST_ADDR2").unwrap().parse().unwrap();
            let c: IpAddr = std::env::var("MCAST_ADDR3").unwrap().parse().unwrap();
            three_devices(
                [&addr.to_string(), &b.to_string(), &c.to_string()],
                &group.to_string(),
            );
            println!("ONE-HOST ok");
        }
        "receiver" => {
            let dev = Device::open(DeviceOptions::at(addr)).unwrap();
            let pd = dev.alloc_pd().unwrap();
            let m = ud_qp(&dev, &pd, QKEY);
            m.qp.attach_mcast(gid_of(group)).unwrap();
            println!("JOINED");
            let from = Qpn::new(
                std::io::stdin()
                    .lock()
                    .lines()
                    .next()
                    .unwrap()
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap(),
            );
            expect(&m, N, 0, from, group);
            println!("RECEIVED {N}");
        }
        "sender" => {
            let dev = Device::open(DeviceOptions::at(addr)).unwrap();
            let pd = dev.alloc_pd().unwrap();
            let m = ud_qp(&dev, &pd, QKEY);
            println!("QPN {}", m.qp.qpn().value());
            std::io::stdin().lock().lines().next();
            send(&m, &pd, group, 0, N);
            println!("SENT {N}");
        }
        r => panic!("unknown role {r}"),
    }
}

/// Waits until IPv6 multicast can leave `dev` in namespace `ns`: the
/// kernel adds the `ff00::/8` route of an interface when its carrier comes
/// up, which the link watcher reports up to a second late (a readiness
/// check, bounded at 20 s; no timing decides the test).
fn wait_v6_multicast_route(ns: &str, dev: &str) {
    let want = format!("ff00::/8 dev {dev} ");
    for _ in 0..2000 {
        let out = Command::new("ip")
            .args(["-n", ns, "-6", "route", "show", "table", "local"])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&out.stdout).contains(&want) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("no IPv6 multicast route on {dev} in {ns}");
}

/// IPv6 has no multicast on Linux's `lo`: three IPv6 devices on one
/// interface (a veth whose peer is in a second namespace) of a namespace:
/// one host, one process.
#[test]
fn ipv6_members_on_one_host_each_get_a_copy() {
    if !need_root() {
        return;
    }
    let pid = std::process::id();
    let ns = Namespaces(vec![format!("xrcmc-v6-{pid}"), format!("xrcmc-p6-{pid}")]);
    let (n, peer) = (&ns.0[0], &ns.0[1]);
    let dev = format!("xm{pid}");
    let setup = || -> std::result::Result<(), String> {
        sh(&["ip", "netns", "add", n])?;
        sh(&["ip", "netns", "add", peer])?;
        sh(&["ip", "-n", n, "link", "set", "lo", "up"])?;
        sh(&[
            "ip",
            "link",
            "add",
            &dev,
            "netns",
            n,
            "type",
            "veth",
            "peer",
            "name",
            &format!("xp{pid}"),
            "netns",
            peer,
        ])?;
        for a in ["fd67:1::1/64", "fd67:1::2/64", "fd67:1::3/64"] {
            sh(&["ip", "-n", n, "addr", "add", a, "dev", &dev, "nodad"])?;
        }
        sh(&["ip", "-n", n, "link", "set", &dev, "up"])?;
        sh(&["ip", "-n", peer, "link", "set", &format!("xp{pid}"), "up"])?;
        Ok(())
    };
    setup().unwrap_or_else(|e| panic!("namespace setup failed: {e}"));
    wait_v6_multicast_route(n, &dev);
    let mut r = role(
        n,
        "mcast_role",
        &[
            ("MCAST_ROLE", "one-host".into()),
            ("MCAST_GROUP", "ff0e::67:1".into()),
            ("MCAST_ADDR", "fd67:1::1".into()),
            ("MCAST_ADDR2", "fd67:1::2".into()),
            ("MCAST_ADDR3", "fd67:1::3".into()),
        ],
    );
    let mut out = BufReader::new(r.stdout.take().unwrap());
    wait_line(&mut out, "ONE-HOST ok");
    assert!(r.wait().unwrap().success());
}

/// A sender in one namespace, a receiver in another, over a veth pair.
fn across_namespaces(v6: bool) {
    let pid = std::process::id();
    let tag = if v6 { "6" } else { "4" };
    let ns = Namespaces(vec![
        format!("xrcmc-a{tag}-{pid}"),
        format!("xrcmc-b{tag}-{pid}"),
    ]);
    let (a, b) = (&ns.0[0], &ns.0[1]);
    let (va, vb) = (format!("xa{tag}{pid}"), format!("xb{tag}{pid}"));
    let (ip_a, ip_b, group) = if v6 {
        ("fd67:2::1", "fd67:2::2", "ff0e::67:2")
    } else {
        ("10.67.2.1", "10.67.2.2", "239.67.2.1")
    };
    let plen = if v6 { "64" } else { "24" };
    let setup = || -> std::result::Result<(), String> {
        sh(&["ip", "netns", "add", a])?;
        sh(&["ip", "netns", "add", b])?;
        sh(&[
            "ip", "link", "add", &va, "netns", a, "type", "veth", "peer", "name", &vb, "netns", b,
        ])?;
        for (n, d, ip) in [(a, &va, ip_a), (b, &vb, ip_b)] {
            let cidr = format!("{ip}/{plen}");
            let mut add = vec!["ip", "-n", n, "addr", "add", &cidr, "dev", d];
            if v6 {
                add.push("nodad");
            }
            sh(&add)?;
            sh(&["ip", "-n", n, "link", "set", d, "up"])?;
            sh(&["ip", "-n", n, "link", "set", "lo", "up"])?;
        }
        Ok(())
    };
    setup().unwrap_or_else(|e| panic!("namespace setup failed: {e}"));
    if v6 {
        wait_v6_multicast_route(a, &va);
        wait_v6_multicast_route(b, &vb);
    }
    let mut rx = role(
        b,
        "mcast_role",
        &[
            ("MCAST_ROLE", "receiver".into()),
            ("MCAST_GROUP", group.into()),
            ("MCAST_ADDR", ip_b.into()),
        ],
    );
    let mut rx_out = BufReader::new(rx.stdout.take().unwrap());
    wait_line(&mut rx_out, "JOINED");
    let mut tx = role(
        a,
        "mcast_role",
        &[
            ("MCAST_ROLE", "sender".into()),
            ("MCAST_GROUP", group.into()),
            ("MCAST_ADDR", ip_a.into()),
        ],
    );
    let mut tx_out = BufReader::new(tx.stdout.take().unwrap());
    let qpn = wait_line(&mut tx_out, "QPN ");
    use std::io::Write;
    let mut rx_in = rx.stdin.take().unwrap();
    writeln!(rx_in, "{}", &qpn[4..]).unwrap();
    let mut tx_in = tx.stdin.take().unwrap();
    writeln!(tx_in, "go").unwrap();
    wait_line(&mut tx_out, "SENT");
    wait_line(&mut rx_out, "RECEIVED");
    assert!(tx.wait().unwrap().success());
    assert!(rx.wait().unwrap().success());
}

#[test]
fn ipv4_across_namespaces() {
    if need_root() {
        across_namespaces(false);
    }
}

#[test]
fn ipv6_across_namespaces() {
    if need_root() {
        across_namespaces(true);
    }
}
