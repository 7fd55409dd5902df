//! `softrdma`: command line tools for softrdma. See `softrdma --help`.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use softrdma_cli::dump;
use std::io::{self, Write};
use std::process::ExitCode;

/// RDMA in software (RoCE v2 in user space): tools.
#[derive(Debug, Parser)]
#[command(name = "softrdma", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Decode the RoCE v2 packets of a pcap or pcapng capture: one line per
    /// packet, then per-QP totals and a summary.
    Dump(dump::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Dump(args) => {
            let stdout = io::stdout();
            let mut out = io::BufWriter::with_capacity(1 << 16, stdout.lock());
            match dump::run(&args, &mut out) {
                Ok(_) => ExitCode::SUCCESS,
                // `softrdma dump x | head`: a closed pipe is not an error.
                Err(dump::Error::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => {
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    let _ = out.flush();
                    eprintln!("softrdma dump: {}: {e}", args.file.display());
                    ExitCode::FAILURE
                }
            }
        }
    }
}
