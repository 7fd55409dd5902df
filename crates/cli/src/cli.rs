//! The `softrdma` command's arguments (clap derive): `main.rs` parses them
//! and dispatches; `examples/package-docs.rs` renders the man pages and
//! shell completions of the Debian package (`scripts/package`) from them.

use crate::{devinfo, dump, exec, perf};
use clap::{Parser, Subcommand};

/// RDMA in software (RoCE v2 in user space): tools.
#[derive(Debug, Parser)]
#[command(name = "softrdma", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show a softrdma device like ibv_devinfo: name, node GUID, port state,
    /// MTU, GID table, link layer and limits.
    Devinfo(devinfo::Args),
    /// Bandwidth and latency tests on perftest's model: write-bw, write-lat,
    /// read-bw, read-lat, send-bw, send-lat, atomic-bw, atomic-lat.
    Perf(perf::Args),
    /// Decode the RoCE v2 packets of a pcap or pcapng capture: one line per
    /// packet, then per-QP totals and a summary.
    Dump(dump::Args),
    /// Run an unmodified verbs program (perftest, ibv_*_pingpong, …) over
    /// softrdma: softrdma's libibverbs.so.1 goes first on LD_LIBRARY_PATH.
    Exec(exec::Args),
    /// The device process of a shared device (started by the library on
    /// demand; not for people).
    #[command(name = "device-host", hide = true)]
    DeviceHost(DeviceHostArgs),
}

/// `softrdma device-host`'s arguments (see `softrdma::host`).
#[derive(Debug, clap::Args)]
pub struct DeviceHostArgs {
    /// The device's address.
    #[arg(long)]
    pub addr: std::net::IpAddr,
    /// Its UDP port.
    #[arg(long, default_value_t = 4791)]
    pub port: u16,
    /// Socket receive buffer (bytes).
    #[arg(long, default_value_t = 8 << 20)]
    pub recv_buffer: usize,
    /// Socket send buffer (bytes).
    #[arg(long, default_value_t = 8 << 20)]
    pub send_buffer: usize,
}

/// The whole command as clap sees it (help, man pages, completions).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_is_consistent() {
        super::command().debug_assert();
    }
}
