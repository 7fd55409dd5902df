//! The port's active MTU follows the interface the device's address is on,
//! as rxe's follows its netdev: link MTU less 80 bytes of RoCE headers,
//! rounded down to an IB MTU (1500 → 1024, 9000 → 4096), read again when
//! the port is queried (an `ip link set … mtu` in between counts); an MTU
//! the program or the configuration sets stays as set.
//!
//! The role runs in a network namespace of its own with a veth whose MTU
//! it changes. Needs root and iproute2 (CI has them); fails without them
//! unless `SOFTRDMA_SKIP_NETNS=1`.

mod common;

use common::{need_root, Namespaces};
use softrdma::config::Source;
use softrdma::{Device, DeviceOptions};
use softrdma_testkit::ip;
use std::process::Command;

#[test]
#[ignore = "a role: port_mtu_follows_the_interface runs it in a namespace (with --ignored)"]
fn port_mtu_role() {
    let ifname = std::env::var("SOFTRDMA_MTU_IF")
        .expect("SOFTRDMA_MTU_IF unset: this role runs only when its parent test starts it");
    let dev = Device::open(DeviceOptions::at("10.66.3.1".parse().unwrap())).unwrap();
    let fixed = Device::open(DeviceOptions {
        addr: Some("10.66.3.2".parse().unwrap()),
        mtu: Some(2048),
        ..Default::default()
    })
    .unwrap();
    let lo = Device::open(DeviceOptions::at("127.66.3.1".parse().unwrap())).unwrap();
    assert_eq!(dev.settings().mtu.source, Source::Interface(ifname.clone()));
    assert_eq!(fixed.settings().mtu.source, Source::Option);
    // lo: 65536.
    assert_eq!(lo.query_port().active_mtu, 4096);
    for (link, want) in [
        (1500, 1024),
        (9000, 4096),
        (1280, 1024),
        (2200, 2048),
        (1000, 512),
        (1500, 1024),
    ] {
        ip(&["link", "set", &ifname, "mtu", &link.to_string()]);
        assert_eq!(dev.query_port().active_mtu, want, "link MTU {link}");
        assert_eq!(fixed.query_port().active_mtu, 2048, "link MTU {link}");
        assert_eq!(dev.query_port().max_mtu, 4096);
    }
    println!("ROLE OK");
}

#[test]
fn port_mtu_follows_the_interface() {
    if !need_root() {
        return;
    }
    let id = std::process::id() % 100_000;
    let ns = Namespaces(vec![format!("srmtu{id}")]);
    let name = &ns.0[0];
    let (va, vb) = (format!("srmtu{id}a"), format!("srmtu{id}b"));
    let _ = Command::new("ip").args(["netns", "del", name]).status();
    ip(&["netns", "add", name]);
    ip(&[
        "link", "add", &va, "netns", name, "type", "veth", "peer", "name", &vb, "netns", name,
    ]);
    for a in ["10.66.3.1/24", "10.66.3.2/24"] {
        ip(&["-n", name, "addr", "add", a, "dev", &va]);
    }
    ip(&["-n", name, "link", "set", &va, "up"]);
    ip(&["-n", name, "link", "set", &vb, "up"]);
    ip(&["-n", name, "link", "set", "lo", "up"]);
    let out = Command::new("ip")
        .args(["netns", "exec", name])
        .arg(std::env::current_exe().unwrap())
        .args(["port_mtu_role", "--exact", "--ignored", "--nocapture"])
        .env("SOFTRDMA_MTU_IF", &va)
        .env_remove("SOFTRDMA_MTU")
        .env_remove("SOFTRDMA_ADDR")
        .env_remove("SOFTRDMA_CONFIG")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success() && text.contains("ROLE OK"), "{text}");
}
