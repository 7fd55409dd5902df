//! What a device looks like in sysfs: [`DeviceView`] (the attributes, as
//! the verbs report them) and [`render`] (the files, directories and
//! links a kernel RDMA device has, with the kernel's formats:
//! drivers/infiniband/core/sysfs.c and uverbs_main.c of Linux 6.1).

use crate::tree::{Node, Tree};
use softrdma_config::{AddrSpec, IfAddr};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// Where a device's folder (`DEV/device`, `DEV/../..`) is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Parent {
    /// The network interface's own device folder (`/sys/class/net/IF/device`
    /// resolved, e.g. a PCI function): the device appears under it, as a
    /// RoCE NIC's RDMA device does under its PCI function, so topology
    /// readers (NUMA node, PCI path) see the real hardware.
    Real(PathBuf),
    /// A folder of softrdma's, `/sys/devices/virtual/softrdma/KEY`, for
    /// interfaces without a device (loopback, veth, bridges): it holds
    /// `net/IF`, `numa_node` (-1) and the device.
    Virtual(String),
}

/// Where the folders of virtual parents live.
pub const VIRTUAL_PARENTS: &str = "/sys/devices/virtual/softrdma";

impl Parent {
    /// The parent of a device bound to interface `netdev` (`name`: the
    /// device, for a device without an interface), looked up under `sys`
    /// (`/sys`, or a test's copy).
    pub fn of(netdev: Option<&str>, name: &str, sys: &Path) -> Parent {
        if let Some(n) = netdev {
            let link = sys.join("class/net").join(n).join("device");
            if let Ok(p) = std::fs::canonicalize(&link) {
                if let Ok(rel) = p.strip_prefix(sys) {
                    return Parent::Real(Path::new("/sys").join(rel));
                }
            }
            return Parent::Virtual(n.to_string());
        }
        Parent::Virtual(name.to_string())
    }

    /// The parent folder's path in sysfs.
    pub fn path(&self) -> PathBuf {
        match self {
            Parent::Real(p) => p.clone(),
            Parent::Virtual(k) => Path::new(VIRTUAL_PARENTS).join(k),
        }
    }
}

/// Port 1's attributes as `ibv_query_port` reports them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PortView {
    /// `IBV_PORT_*` (4: ACTIVE).
    pub state: u32,
    /// Physical state (5: LinkUp).
    pub phys_state: u32,
    /// `active_width` (1: 1X).
    pub width: u8,
    /// `active_speed` (32: EDR).
    pub speed: u8,
    /// `port_cap_flags`.
    pub cap_mask: u32,
    /// Entries of the GID table.
    pub gid_tbl_len: u32,
    /// Entries of the P_Key table.
    pub pkey_tbl_len: u16,
    /// Active MTU in bytes (not in sysfs; part of the identity).
    pub active_mtu: u32,
}

impl Default for PortView {
    /// What softrdma's C library reports (crates/ibverbs/src/query.rs).
    fn default() -> Self {
        PortView {
            state: 4,
            phys_state: 5,
            width: 1,
            speed: 32,
            cap_mask: 1 << 26, // IBV_PORT_IP_BASED_GIDS
            gid_tbl_len: softrdma_config::GID_TABLE_LEN,
            pkey_tbl_len: 1,
            active_mtu: softrdma_config::DEFAULT_MTU,
        }
    }
}

/// One device as sysfs shows it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeviceView {
    /// `softrdma0`.
    pub name: String,
    /// N of `uverbsN` (its place in the device list).
    pub index: u32,
    /// The device's address, whose RoCE v2 GID is GID 0 (`None`: not known
    /// yet — a loopback default not opened in this process).
    pub addr: Option<IpAddr>,
    /// The interface of the address.
    pub netdev: Option<String>,
    /// The device's folder.
    pub parent: Parent,
    /// Node GUID (host order); 0 while the address is not known.
    pub node_guid: u64,
    /// `fw_ver` of `ibv_query_device`.
    pub fw_ver: String,
    /// `hw_ver`.
    pub hw_rev: u32,
    /// Port 1.
    pub port: PortView,
}

/// `fw_ver` of softrdma's devices (`ibv_query_device`).
pub const FW_VER: &str = concat!("softrdma ", env!("CARGO_PKG_VERSION"));
/// `hca_type` of softrdma's devices.
pub const HCA_TYPE: &str = "softrdma";

impl DeviceView {
    /// A device of the configuration as a process that has not opened it
    /// sees it: the address when the configuration fixes one, the loopback
    /// interface for the loopback default, softrdma's port attributes.
    /// `sys` is where sysfs is (`/sys`).
    pub fn configured(
        name: &str,
        index: u32,
        spec: &AddrSpec,
        mtu: u32,
        ifs: &[IfAddr],
        sys: &Path,
    ) -> DeviceView {
        let addr = spec.resolve(ifs).ok().flatten();
        let netdev = match spec {
            AddrSpec::Auto => Some("lo".to_string()),
            s => s.netdev(ifs),
        };
        let port = PortView {
            active_mtu: mtu,
            ..PortView::default()
        };
        DeviceView::new(name, index, addr, netdev, port, sys)
    }

    /// A device with these attributes (the node GUID from the address).
    pub fn new(
        name: &str,
        index: u32,
        addr: Option<IpAddr>,
        netdev: Option<String>,
        port: PortView,
        sys: &Path,
    ) -> DeviceView {
        let parent = Parent::of(netdev.as_deref(), name, sys);
        DeviceView {
            name: name.to_string(),
            index,
            addr,
            netdev,
            parent,
            node_guid: addr.map_or(0, softrdma_wire::grh::node_guid_of),
            fw_ver: FW_VER.to_string(),
            hw_rev: 0,
            port,
        }
    }
}

/// `xxxx:xxxx:xxxx:xxxx`, as sysfs shows GUIDs.
pub fn guid_text(g: u64) -> String {
    let b = g.to_be_bytes();
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

/// A GID as sysfs shows it: eight groups of four hex digits.
pub fn gid_text(g: &[u8; 16]) -> String {
    g.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

/// The kernel's `rate` file (`rate_show`): Gb/s of the width and speed.
pub fn rate_text(width: u8, speed: u8) -> String {
    let (tenths, name) = match speed {
        2 => (50, " DDR"),
        4 => (100, " QDR"),
        8 => (100, " FDR10"),
        16 => (140, " FDR"),
        32 => (250, " EDR"),
        64 => (500, " HDR"),
        128 => (1000, " NDR"),
        _ => (25, ""),
    };
    let lanes = match width {
        1 => 1,
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => 0,
    };
    let r = tenths * lanes;
    let half = if r % 10 != 0 { ".5" } else { "" };
    format!("{}{half} Gb/sec ({lanes}X{name})", r / 10)
}

fn port_state_text(s: u32) -> String {
    let n = match s {
        1 => "DOWN",
        2 => "INIT",
        3 => "ARMED",
        4 => "ACTIVE",
        5 => "ACTIVE_DEFER",
        _ => "NOP",
    };
    format!("{s}: {n}")
}

fn phys_state_text(s: u32) -> String {
    let n = match s {
        1 => "Sleep",
        2 => "Polling",
        3 => "Disabled",
        4 => "PortConfigurationTraining",
        5 => "LinkUp",
        6 => "LinkErrorRecovery",
        7 => "Phy Test",
        _ => "<unknown>",
    };
    format!("{s}: {n}")
}

/// `to` as a path relative to directory `from` (both absolute, no `..`).
pub fn relative(from: &Path, to: &Path) -> PathBuf {
    let f: Vec<_> = from.components().collect();
    let t: Vec<_> = to.components().collect();
    let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let mut r = PathBuf::new();
    for _ in common..f.len() {
        r.push("..");
    }
    for c in &t[common..] {
        r.push(c);
    }
    r
}

fn file(t: &mut Tree, p: &Path, text: impl AsRef<str>) {
    let mut s = text.as_ref().to_string();
    if !s.is_empty() {
        s.push('\n');
    }
    t.insert(p, Node::File(s));
}

/// A link (its absolute target: the tree writes it relative when the
/// target is in the view, absolute when it leaves it).
fn link(t: &mut Tree, p: &Path, target: &Path) {
    t.insert(p, Node::Link(target.to_path_buf()));
}

/// The files of `devs`: `/sys/class/infiniband/DEV` (a link to the device
/// under its parent folder, as a kernel device's is), its attributes and
/// port 1 (`gids/N`, `gid_attrs/{types,ndevs}/N`, `pkeys/N`, `state`,
/// `phys_state`, `rate`, `link_layer`, `lid`, `sm_lid`, …),
/// `/sys/class/infiniband_verbs/uverbsN` (`ibdev`, `abi_version`, `dev`),
/// `/dev/infiniband/uverbsN` and `rdma_cm` (device nodes: `/dev/null`).
pub fn render(devs: &[DeviceView]) -> Tree {
    let mut t = Tree::default();
    let class = Path::new("/sys/class/infiniband");
    let vclass = Path::new("/sys/class/infiniband_verbs");
    let dev = Path::new("/dev/infiniband");
    for p in [class, vclass, dev] {
        t.prefix(p);
        t.insert(p, Node::Dir);
    }
    // The verbs ABI of the uverbs class (kernel: 6).
    file(&mut t, &vclass.join("abi_version"), "6");
    t.node(&dev.join("rdma_cm"));
    for d in devs {
        let parent = d.parent.path();
        match &d.parent {
            Parent::Real(_) => {
                t.prefix(&parent.join("infiniband"));
                t.prefix(&parent.join("infiniband_verbs"));
            }
            Parent::Virtual(_) => {
                t.prefix(Path::new(VIRTUAL_PARENTS));
                file(&mut t, &parent.join("numa_node"), "-1");
                file(&mut t, &parent.join("uevent"), "");
                if let Some(n) = &d.netdev {
                    // The interface itself is the real one.
                    link(
                        &mut t,
                        &parent.join("net").join(n),
                        &Path::new("/sys/devices/virtual/net").join(n),
                    );
                }
            }
        }
        let ib = parent.join("infiniband").join(&d.name);
        link(&mut t, &class.join(&d.name), &ib);
        link(&mut t, &ib.join("device"), &parent);
        link(&mut t, &ib.join("subsystem"), class);
        file(&mut t, &ib.join("node_type"), "1: CA");
        file(&mut t, &ib.join("node_guid"), guid_text(d.node_guid));
        file(&mut t, &ib.join("sys_image_guid"), guid_text(d.node_guid));
        file(&mut t, &ib.join("fw_ver"), &d.fw_ver);
        file(&mut t, &ib.join("hca_type"), HCA_TYPE);
        file(&mut t, &ib.join("hw_rev"), format!("0x{:x}", d.hw_rev));
        file(
            &mut t,
            &ib.join("node_desc"),
            format!("softrdma {}", d.name),
        );
        file(&mut t, &ib.join("uevent"), format!("NAME={}", d.name));
        let port = ib.join("ports/1");
        let p = &d.port;
        file(&mut t, &port.join("state"), port_state_text(p.state));
        file(
            &mut t,
            &port.join("phys_state"),
            phys_state_text(p.phys_state),
        );
        file(&mut t, &port.join("rate"), rate_text(p.width, p.speed));
        file(&mut t, &port.join("link_layer"), "Ethernet");
        file(&mut t, &port.join("lid"), "0x0");
        file(&mut t, &port.join("sm_lid"), "0x0");
        file(&mut t, &port.join("lid_mask_count"), "0");
        file(&mut t, &port.join("sm_sl"), "0");
        file(
            &mut t,
            &port.join("cap_mask"),
            format!("0x{:08x}", p.cap_mask),
        );
        for i in 0..p.gid_tbl_len {
            let gid = match (i, d.addr) {
                (0, Some(a)) => Some(softrdma_wire::grh::gid_of(a)),
                _ => None,
            };
            file(
                &mut t,
                &port.join(format!("gids/{i}")),
                gid_text(&gid.unwrap_or([0; 16])),
            );
            // An empty entry has neither (the kernel fails their read).
            let (ty, nd) = match gid {
                Some(_) => ("RoCE v2", d.netdev.clone().unwrap_or_default()),
                None => ("", String::new()),
            };
            file(&mut t, &port.join(format!("gid_attrs/types/{i}")), ty);
            file(&mut t, &port.join(format!("gid_attrs/ndevs/{i}")), nd);
        }
        for i in 0..p.pkey_tbl_len {
            let k = if i == 0 { 0xffff } else { 0 };
            file(
                &mut t,
                &port.join(format!("pkeys/{i}")),
                format!("0x{k:04x}"),
            );
        }
        let uv = format!("uverbs{}", d.index);
        let uvd = parent.join("infiniband_verbs").join(&uv);
        link(&mut t, &vclass.join(&uv), &uvd);
        link(&mut t, &uvd.join("device"), &parent);
        link(&mut t, &uvd.join("subsystem"), vclass);
        file(&mut t, &uvd.join("ibdev"), &d.name);
        file(&mut t, &uvd.join("abi_version"), "1");
        // The device node is /dev/null (character device 1:3).
        file(&mut t, &uvd.join("dev"), "1:3");
        file(
            &mut t,
            &uvd.join("uevent"),
            format!("MAJOR=1\nMINOR=3\nDEVNAME=infiniband/{uv}"),
        );
        t.node(&dev.join(&uv));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn formats_are_the_kernels() {
        assert_eq!(rate_text(1, 32), "25 Gb/sec (1X EDR)");
        assert_eq!(rate_text(2, 16), "56 Gb/sec (4X FDR)");
        assert_eq!(rate_text(1, 1), "2.5 Gb/sec (1X)");
        assert_eq!(guid_text(0x0250_56ff_fe00_0001), "0250:56ff:fe00:0001");
        let g = softrdma_wire::grh::gid_of(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)));
        assert_eq!(gid_text(&g), "0000:0000:0000:0000:0000:ffff:7f00:0002");
        assert_eq!(port_state_text(4), "4: ACTIVE");
        assert_eq!(phys_state_text(5), "5: LinkUp");
        assert_eq!(
            relative(
                Path::new("/sys/class/infiniband"),
                Path::new("/sys/devices/virtual/softrdma/lo/infiniband/softrdma0")
            ),
            Path::new("../../devices/virtual/softrdma/lo/infiniband/softrdma0")
        );
        assert_eq!(
            relative(
                Path::new("/sys/devices/x/infiniband/d"),
                Path::new("/sys/devices/x")
            ),
            Path::new("../..")
        );
    }

    #[test]
    fn a_device_renders_as_a_kernel_device() {
        let d = DeviceView::new(
            "softrdma0",
            0,
            Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 9))),
            Some("lo".into()),
            PortView::default(),
            Path::new("/nonexistent-sys"),
        );
        assert_eq!(d.parent, Parent::Virtual("lo".into()));
        let t = render(&[d]);
        let f = |p: &str| match t.get(Path::new(p)) {
            Some(Node::File(s)) => s.clone(),
            other => panic!("{p}: {other:?}"),
        };
        // Links as readlink shows them: relative to their folder.
        let l = |p: &str| match t.get(Path::new(p)) {
            Some(Node::Link(s)) => relative(Path::new(p).parent().unwrap(), s)
                .to_string_lossy()
                .into_owned(),
            other => panic!("{p}: {other:?}"),
        };
        assert_eq!(
            l("/sys/class/infiniband/softrdma0"),
            "../../devices/virtual/softrdma/lo/infiniband/softrdma0"
        );
        let dev = "/sys/devices/virtual/softrdma/lo/infiniband/softrdma0";
        assert_eq!(l(&format!("{dev}/device")), "../..");
        assert_eq!(
            l(&format!("{dev}/subsystem")),
            "../../../../../../class/infiniband"
        );
        assert_eq!(f(&format!("{dev}/node_guid")), "0250:56ff:fe00:0009\n");
        assert_eq!(
            f(&format!("{dev}/ports/1/gids/0")),
            "0000:0000:0000:0000:0000:ffff:7f00:0009\n"
        );
        assert_eq!(
            f(&format!("{dev}/ports/1/gids/1")),
            "0000:0000:0000:0000:0000:0000:0000:0000\n"
        );
        assert_eq!(f(&format!("{dev}/ports/1/gid_attrs/types/0")), "RoCE v2\n");
        assert_eq!(f(&format!("{dev}/ports/1/gid_attrs/types/1")), "");
        assert_eq!(f(&format!("{dev}/ports/1/gid_attrs/ndevs/0")), "lo\n");
        assert_eq!(f(&format!("{dev}/ports/1/pkeys/0")), "0xffff\n");
        assert_eq!(f(&format!("{dev}/ports/1/state")), "4: ACTIVE\n");
        assert_eq!(f(&format!("{dev}/ports/1/rate")), "25 Gb/sec (1X EDR)\n");
        assert_eq!(f(&format!("{dev}/ports/1/link_layer")), "Ethernet\n");
        assert_eq!(f("/sys/devices/virtual/softrdma/lo/numa_node"), "-1\n");
        assert_eq!(
            l("/sys/devices/virtual/softrdma/lo/net/lo"),
            "../../../net/lo"
        );
        assert_eq!(
            l("/sys/class/infiniband_verbs/uverbs0"),
            "../../devices/virtual/softrdma/lo/infiniband_verbs/uverbs0"
        );
        assert_eq!(
            f("/sys/devices/virtual/softrdma/lo/infiniband_verbs/uverbs0/ibdev"),
            "softrdma0\n"
        );
        assert!(matches!(
            t.get(Path::new("/dev/infiniband/uverbs0")),
            Some(Node::Device)
        ));
        // Every file's directories exist.
        for (p, _) in t.iter() {
            let mut a = p.parent();
            while let Some(d) = a {
                if d == Path::new("/") {
                    break;
                }
                assert!(
                    matches!(t.get(d), Some(Node::Dir)),
                    "{} has no directory {}",
                    p.display(),
                    d.display()
                );
                a = d.parent();
            }
        }
    }

    #[test]
    fn unknown_address_leaves_the_gid_table_empty() {
        let d = DeviceView::new(
            "x",
            3,
            None,
            None,
            PortView::default(),
            Path::new("/nonexistent-sys"),
        );
        assert_eq!(d.parent, Parent::Virtual("x".into()));
        let t = render(&[d]);
        let dev = "/sys/devices/virtual/softrdma/x/infiniband/x";
        assert!(matches!(
            t.get(Path::new(&format!("{dev}/node_guid"))),
            Some(Node::File(s)) if s == "0000:0000:0000:0000\n"
        ));
        assert!(matches!(
            t.get(Path::new(&format!("{dev}/ports/1/gid_attrs/types/0"))),
            Some(Node::File(s)) if s.is_empty()
        ));
        // No interface: no net/ folder (programs take its presence for a
        // RoCE interface).
        assert!(t
            .get(Path::new("/sys/devices/virtual/softrdma/x/net"))
            .is_none());
        assert!(t
            .get(Path::new("/sys/class/infiniband_verbs/uverbs3"))
            .is_some());
    }
}
