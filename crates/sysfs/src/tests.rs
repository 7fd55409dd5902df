//! The view on disk and the resolver, against the real file system of
//! this host (`/sys/devices/virtual/net/lo` exists on every Linux host).

use super::*;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("softrdma-sysfs-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn lo_device(addr: u8) -> DeviceView {
    DeviceView::new(
        "softrdma0",
        0,
        Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, addr))),
        Some("lo".into()),
        PortView::default(),
        Path::new("/sys"),
    )
}

fn at(r: Resolved) -> (PathBuf, PathBuf, bool) {
    match r {
        Resolved::At { os, virt, in_view } => (os, virt, in_view),
        Resolved::Untouched => panic!("untouched"),
    }
}

#[test]
fn materialized_once_per_content_and_resolved_like_the_kernel() {
    let base = scratch("lo");
    let t = render(&[lo_device(9)]);
    let root = t.materialize(&base).unwrap();
    assert_eq!(
        t.materialize(&base).unwrap(),
        root,
        "same content, same view"
    );
    let other = render(&[lo_device(10)]).materialize(&base).unwrap();
    assert_ne!(other, root, "another address, another view");
    let o = Overlay::load(&root).unwrap();
    let r = |p: &str| o.resolve(p.as_bytes(), true);

    // The class folder and a file in it.
    let (os, virt, inv) = at(r("/sys/class/infiniband"));
    assert!(inv && os.is_dir() && virt == Path::new("/sys/class/infiniband"));
    let (os, virt, _) = at(r("/sys/class/infiniband/softrdma0/ports/1/gids/0"));
    assert_eq!(
        std::fs::read_to_string(&os).unwrap(),
        "0000:0000:0000:0000:0000:ffff:7f00:0009\n"
    );
    assert_eq!(
        virt,
        Path::new("/sys/devices/virtual/softrdma/lo/infiniband/softrdma0/ports/1/gids/0")
    );
    // Mooncake's realpath("/sys/class/infiniband/DEV/../..").
    let (os, virt, _) = at(r("/sys/class/infiniband/softrdma0/../.."));
    assert_eq!(virt, Path::new("/sys/devices/virtual/softrdma/lo"));
    assert_eq!(
        std::fs::read_to_string(os.join("numa_node")).unwrap(),
        "-1\n"
    );
    // Through the view into the real file system.
    let (os, virt, inv) = at(r("/sys/class/infiniband/softrdma0/device/net/lo/mtu"));
    assert_eq!(os, Path::new("/sys/devices/virtual/net/lo/mtu"));
    assert_eq!(virt, os);
    assert!(!inv);
    assert!(std::fs::read_to_string(&os)
        .unwrap()
        .trim()
        .parse::<u32>()
        .is_ok());
    // The link itself (lstat, readlink), shown relative like sysfs links.
    let (os, virt, _) = at(o.resolve(b"/sys/class/infiniband/softrdma0/device/net/lo", false));
    let text = std::fs::read_link(&os).unwrap();
    assert_eq!(text, Path::new("/sys/devices/virtual/net/lo"));
    assert_eq!(o.link_text(&virt, &text), Path::new("../../../net/lo"));
    // A trailing slash or `.` follows the last link, even for lstat.
    for p in [
        "/sys/class/infiniband/softrdma0/device/net/lo/",
        "/sys/class/infiniband/softrdma0/device/net/lo/.",
    ] {
        let (os, _, _) = at(o.resolve(p.as_bytes(), false));
        assert_eq!(os, Path::new("/sys/devices/virtual/net/lo"), "{p}");
    }
    // `..` out of the view, `.` and doubled slashes.
    let (os, _, inv) = at(r("/sys/class/infiniband/../net/lo"));
    assert_eq!(os, Path::new("/sys/devices/virtual/net/lo"));
    assert!(!inv);
    let (_, virt, inv) = at(r("//sys/./class//infiniband/softrdma0/"));
    assert!(inv);
    assert_eq!(
        virt,
        Path::new("/sys/devices/virtual/softrdma/lo/infiniband/softrdma0")
    );
    let (_, virt, _) = at(r("/usr/../sys/class/infiniband_verbs/uverbs0/ibdev"));
    assert_eq!(
        virt,
        Path::new("/sys/devices/virtual/softrdma/lo/infiniband_verbs/uverbs0/ibdev")
    );
    // Device nodes are /dev/null, whether the link is followed or not.
    for follow in [true, false] {
        let (os, virt, inv) = at(o.resolve(b"/dev/infiniband/uverbs0", follow));
        assert_eq!(os, Path::new("/dev/null"));
        assert_eq!(virt, Path::new("/dev/infiniband/uverbs0"));
        assert!(!inv);
    }
    let (os, _, _) = at(r("/dev/infiniband/uverbs0/x"));
    assert_eq!(os, Path::new("/dev/null/x"));
    // Absent paths of the view stay absent.
    let (os, _, inv) = at(r("/sys/class/infiniband/mlx5_0/node_guid"));
    assert!(inv && !os.exists());
    // Paths that never meet the view are not looked at.
    for p in [
        "/sys/class/net/lo",
        "/dev/shm/x",
        "/sys/devices/system/cpu/online",
        "sys/class/infiniband",
        "/etc/../etc/passwd",
        "/sys/class/infiniband_foo",
    ] {
        assert_eq!(o.resolve(p.as_bytes(), true), Resolved::Untouched, "{p}");
    }
    // Back from the view's directory (getcwd).
    assert_eq!(
        o.unmap(&root.join("sys/class/infiniband")),
        Some(PathBuf::from("/sys/class/infiniband"))
    );
    assert_eq!(o.unmap(Path::new("/etc")), None);
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_device_under_a_real_device_folder() {
    // A folder of the real file system stands for the interface's device
    // (a PCI function): the RDMA device appears under it.
    let base = scratch("real");
    let pci = base.join("pci0000:00/0000:00:03.0");
    std::fs::create_dir_all(pci.join("net/eth9")).unwrap();
    std::fs::write(pci.join("numa_node"), "1\n").unwrap();
    std::fs::create_dir_all(base.join("views")).unwrap();
    let mut d = lo_device(7);
    d.netdev = Some("eth9".into());
    d.parent = Parent::Real(pci.clone());
    let root = render(&[d]).materialize(&base.join("views")).unwrap();
    let o = Overlay::load(&root).unwrap();
    let (os, virt, _) = at(o.resolve(b"/sys/class/infiniband/softrdma0/../..", true));
    assert_eq!(virt, pci);
    assert_eq!(os, pci, "the real folder");
    assert_eq!(
        std::fs::read_to_string(os.join("numa_node")).unwrap(),
        "1\n"
    );
    let (os, _, _) = at(o.resolve(b"/sys/class/infiniband/softrdma0/device/net/eth9", true));
    assert_eq!(os, pci.join("net/eth9"));
    // And back into the view from the real folder.
    let (os, virt, inv) = at(o.resolve(
        b"/sys/class/infiniband/softrdma0/device/infiniband/softrdma0/node_guid",
        true,
    ));
    assert!(inv);
    assert_eq!(virt, pci.join("infiniband/softrdma0/node_guid"));
    assert_eq!(
        std::fs::read_to_string(os).unwrap(),
        "0250:56ff:fe00:0007\n"
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn the_configuration_gives_the_devices_before_they_open() {
    let c = softrdma_config::Config::load_from(
        &|v| match v {
            "SOFTRDMA_CONFIG" => Some("/cfg".into()),
            _ => None,
        },
        &|_| Ok("a 127.0.0.5 mtu=2048\nb auto\n".into()),
    )
    .unwrap();
    let v = configured_views(&c, &softrdma_config::interfaces());
    assert_eq!(v.len(), 2);
    assert_eq!(v[0].addr, Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 5))));
    assert_eq!(v[0].netdev.as_deref(), Some("lo"));
    assert_eq!(
        v[0].node_guid,
        softrdma_wire::grh::node_guid_of(v[0].addr.unwrap())
    );
    assert_eq!(v[0].port.active_mtu, 2048);
    assert_eq!((v[1].index, v[1].addr), (1, None), "auto: not known yet");
    assert_eq!(v[1].netdev.as_deref(), Some("lo"));
    assert_eq!(v[1].parent, Parent::Virtual("lo".into()));
}
