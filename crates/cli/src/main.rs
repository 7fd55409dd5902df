//! `softrdma`: command line tools for softrdma. See `softrdma --help`.
#![forbid(unsafe_code)]

use clap::Parser;
use softrdma_cli::cli::{Cli, Command};
use softrdma_cli::{devinfo, dump, exec, perf, rdma};
use std::io::{self, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    // Run as `rdma` (the link `softrdma exec` puts first on PATH):
    // iproute2's RDMA tool for softrdma's devices.
    let mut argv = std::env::args_os();
    if argv
        .next()
        .is_some_and(|a0| rdma::invoked_as_rdma(std::path::Path::new(&a0)))
    {
        let args: Vec<_> = argv.collect();
        let code = rdma::main(&args, &mut io::stdout().lock());
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Exec(args) => match exec::run(&args, &mut io::stdout()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("softrdma exec: {e}");
                ExitCode::from(127)
            }
        },
        Command::Devinfo(args) => match devinfo::run(&args, &mut io::stdout().lock()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("softrdma devinfo: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Perf(args) => {
            let (test, _) = args.test.split();
            match perf::run(&args, &mut io::stdout()) {
                Ok(()) => ExitCode::SUCCESS,
                // `softrdma perf … | head`: a closed pipe is not an error.
                Err(perf::Error::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => {
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    let _ = io::stdout().flush();
                    eprintln!("softrdma perf {}: {e}", test.name());
                    ExitCode::from(e.exit_code())
                }
            }
        }
        Command::DeviceHost(a) => {
            let code = softrdma::host::serve(&softrdma::host::HostOptions {
                addr: std::net::SocketAddr::new(a.addr, a.port),
                recv_buffer: a.recv_buffer,
                send_buffer: a.send_buffer,
            });
            ExitCode::from(code.clamp(0, 255) as u8)
        }
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
