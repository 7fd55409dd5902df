//! `softrdma devinfo`: what `ibv_devinfo` shows for an RDMA device, for a
//! softrdma device.
//!
//! ```text
//! hca_id: softrdma0
//!     transport:          InfiniBand (0)
//!     node_guid:          0250:56ff:fe00:0001
//!     ...
//!         port:   1
//!             state:          PORT_ACTIVE (4)
//!             active_mtu:     4096 (5)
//!             link_layer:     Ethernet
//!             GID[  0]:       0000:0000:0000:0000:0000:ffff:7f00:0001, RoCE v2 (127.0.0.1)
//! ```
//!
//! The device is opened like any program opens one: `-d ADDR`, else
//! `SOFTRDMA_ADDR`, else the config file's first device, else the first
//! free loopback address. Opening it binds UDP port 4791 on that address
//! for as long as the command runs. `-v` also prints the effective
//! configuration and where each value came from.

use crate::perf::report::{document, Json};
use serde_json::json;
use softrdma::{Device, DeviceAttr, DeviceOptions};
use std::fmt::Write as _;
use std::io::{self, Write};
use std::net::IpAddr;

/// Arguments of `softrdma devinfo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address of the device to open (else SOFTRDMA_ADDR, else a free
    /// loopback address 127.0.0.x).
    #[arg(short = 'd', long = "addr", value_name = "ADDR")]
    pub addr: Option<IpAddr>,
    /// Print every limit of the device (ibv_devinfo -v), not only the main
    /// ones.
    #[arg(short, long)]
    pub verbose: bool,
    /// Print one JSON document (always with every limit).
    #[arg(long)]
    pub json: bool,
}

/// Why devinfo failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The device did not open.
    #[error("opening a device: {0}")]
    Open(softrdma::Error),
    /// Writing the output failed.
    #[error("writing output: {0}")]
    Output(io::Error),
}

/// The `ibv_mtu` number of an MTU in bytes.
fn mtu_enum(bytes: u32) -> u32 {
    match bytes {
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        _ => 5,
    }
}

/// A GUID as ibv_devinfo prints it (four groups of 16 bits).
pub fn guid_text(g: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        (g >> 48) & 0xffff,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    )
}

/// A GID as ibv_devinfo prints it (eight groups of 16 bits).
pub fn gid_text(gid: &[u8; 16]) -> String {
    let mut s = String::new();
    for (i, c) in gid.chunks(2).enumerate() {
        if i > 0 {
            s.push(':');
        }
        let _ = write!(s, "{:02x}{:02x}", c[0], c[1]);
    }
    s
}

/// Every limit: (name as in `ibv_device_attr`, value, shown without `-v`).
fn limits(a: &DeviceAttr) -> Vec<(&'static str, u64, bool)> {
    vec![
        ("max_mr_size", a.max_mr_size, true),
        ("max_qp", a.max_qp as u64, true),
        ("max_qp_wr", a.max_qp_wr as u64, true),
        ("max_sge", a.max_sge as u64, true),
        ("max_sge_rd", a.max_sge_rd as u64, false),
        ("max_cq", a.max_cq as u64, true),
        ("max_cqe", a.max_cqe as u64, true),
        ("max_mr", a.max_mr as u64, true),
        ("max_pd", a.max_pd as u64, true),
        ("max_qp_rd_atom", a.max_qp_rd_atom as u64, true),
        ("max_qp_init_rd_atom", a.max_qp_init_rd_atom as u64, false),
        ("max_srq", a.max_srq as u64, false),
        ("max_srq_wr", a.max_srq_wr as u64, false),
        ("max_srq_sge", a.max_srq_sge as u64, false),
        ("max_ah", a.max_ah as u64, false),
        ("max_pkeys", a.max_pkeys as u64, false),
        ("max_inline_data", a.max_inline_data as u64, false),
    ]
}

/// Opens the device and describes it.
pub fn run(args: &Args, out: &mut impl Write) -> Result<(), Error> {
    let dev = Device::open(DeviceOptions {
        addr: args.addr,
        ..Default::default()
    })
    .map_err(Error::Open)?;
    let text = if args.json {
        json(&dev)
    } else {
        text(&dev, args.verbose)
    };
    out.write_all(text.as_bytes()).map_err(Error::Output)?;
    out.flush().map_err(Error::Output)
}

/// Who shares the device (`-v`): the device process and one line per
/// process's open device.
pub fn sharers_text(dev: &Device) -> String {
    let mut s = String::new();
    match dev.sharers() {
        None => {
            let _ = writeln!(s, "\tshared:\t\t\t\tno (this process's alone)");
        }
        Some(Err(e)) => {
            let _ = writeln!(s, "\tshared:\t\t\t\tyes ({e})");
        }
        Some(Ok(ms)) => {
            let _ = writeln!(
                s,
                "\tshared:\t\t\t\tyes, device process pid {}, {} open device(s)",
                dev.host_pid().unwrap_or(0),
                ms.len()
            );
            for m in ms {
                let _ = writeln!(
                    s,
                    "\t\tpid {}\t{}\tqps {}\tsame-host path {}",
                    m.pid,
                    m.comm,
                    m.qps,
                    if m.same_host { "shm" } else { "udp" }
                );
            }
        }
    }
    s
}

/// The ibv_devinfo-style text.
pub fn text(dev: &Device, verbose: bool) -> String {
    let a = dev.query_device();
    let port = dev.query_port();
    let gid = dev.gid();
    let mut s = String::new();
    let _ = writeln!(s, "hca_id:\t{}", dev.name());
    let _ = writeln!(s, "\ttransport:\t\t\tInfiniBand (0)");
    let _ = writeln!(s, "\tfw_ver:\t\t\t\t{}", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(s, "\tnode_guid:\t\t\t{}", guid_text(a.node_guid));
    let _ = writeln!(s, "\tsys_image_guid:\t\t\t{}", guid_text(a.node_guid));
    let _ = writeln!(
        s,
        "\tdriver:\t\t\t\tsoftrdma (RoCE v2 over UDP, user space)"
    );
    let _ = writeln!(s, "\taddress:\t\t\t{}", dev.local_addr());
    let _ = writeln!(s, "\tphys_port_cnt:\t\t\t1");
    for (name, v, main) in limits(&a) {
        if main || verbose {
            let tabs = if name.len() >= 15 { "\t\t" } else { "\t\t\t" };
            let _ = writeln!(s, "\t{name}:{tabs}{v}");
        }
    }
    let _ = writeln!(s, "\t\tport:\t1");
    let _ = writeln!(s, "\t\t\tstate:\t\t\tPORT_ACTIVE (4)");
    let _ = writeln!(
        s,
        "\t\t\tmax_mtu:\t\t{} ({})",
        port.max_mtu,
        mtu_enum(port.max_mtu)
    );
    let _ = writeln!(
        s,
        "\t\t\tactive_mtu:\t\t{} ({})",
        port.active_mtu,
        mtu_enum(port.active_mtu)
    );
    let _ = writeln!(s, "\t\t\tsm_lid:\t\t\t0");
    let _ = writeln!(s, "\t\t\tport_lid:\t\t0");
    let _ = writeln!(s, "\t\t\tport_lmc:\t\t0x00");
    let _ = writeln!(s, "\t\t\tlink_layer:\t\tEthernet");
    if verbose {
        let _ = writeln!(s, "\t\t\tgid_tbl_len:\t\t{}", port.gid_tbl_len);
        let _ = writeln!(s, "\t\t\tpkey_tbl_len:\t\t{}", port.pkey_tbl_len);
        s.push_str(&sharers_text(dev));
    }
    let _ = writeln!(
        s,
        "\t\t\tGID[  0]:\t\t{}, RoCE v2 ({})",
        gid_text(&gid),
        dev.local_addr().ip()
    );
    if verbose {
        s.push_str(&configuration(dev));
    }
    s
}

/// The effective configuration and where each value came from (an option,
/// a `SOFTRDMA_*` variable, a line of the config file, the default).
pub fn configuration(dev: &Device) -> String {
    let mut s = String::from("configuration:\n");
    let mut row = |name: &str, value: &str, source: &dyn std::fmt::Display| {
        let _ = writeln!(s, "\t{name:<16}{value:<23} ({source})");
    };
    let dev_settings = dev.settings().describe();
    for (name, value, source) in &dev_settings {
        row(name, value, source);
    }
    if let Ok(cfg) = softrdma::config::global() {
        for (name, value, source) in cfg.describe() {
            // The device's own rows above are what it runs with.
            if !dev_settings.iter().any(|(n, ..)| *n == name) {
                row(name, &value, source);
            }
        }
    }
    s
}

/// The same as one JSON document (every limit).
pub fn json(dev: &Device) -> String {
    let a = dev.query_device();
    let port = dev.query_port();
    let gid = dev.gid();
    let limits: serde_json::Map<String, Json> = limits(&a)
        .into_iter()
        .map(|(k, v, _)| (k.to_string(), Json::from(v)))
        .collect();
    let address = dev.local_addr().ip().to_string();
    document(&json!({
        "name": dev.name(),
        "transport": "InfiniBand",
        "fw_ver": env!("CARGO_PKG_VERSION"),
        "node_guid": guid_text(a.node_guid),
        "address": address,
        "udp_port": dev.local_addr().port(),
        "ports": [{
            "port": 1,
            "state": "PORT_ACTIVE",
            "max_mtu": port.max_mtu,
            "active_mtu": port.active_mtu,
            "link_layer": "Ethernet",
            "gid_tbl_len": port.gid_tbl_len,
            "pkey_tbl_len": port.pkey_tbl_len,
            "gids": [{
                "index": 0,
                "gid": gid_text(&gid),
                "type": "RoCE v2",
                "address": address,
            }],
        }],
        "limits": limits,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_and_gid_text() {
        assert_eq!(guid_text(0x0011_2233_4455_6677), "0011:2233:4455:6677");
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&[127, 0, 0, 1]);
        assert_eq!(gid_text(&g), "0000:0000:0000:0000:0000:ffff:7f00:0001");
    }
}
