//! `softrdma perf TEST [HOST]`: perftest's eight tools over softrdma.
//!
//! Like perftest, one program is both ends: without HOST it is the server
//! and waits for a client on TCP port `-p` (18515); with HOST it is the
//! client, connects, and measures. `--loopback` runs both ends in this
//! process, each with its own device. The client sends its parameters to
//! the server ([`params`]), both create their QPs and exchange them with
//! `softrdma::cm`, then for each size: the server prepares (clears the
//! buffers that will be written, posts receives), the client runs and
//! measures ([`bw`], [`lat`]), both check the data ([`pattern`]) and the
//! client prints perftest's table row ([`report`]). The control
//! conversation is in [`ctrl`].
//!
//! The options are [`options`]; the two ends are [`client`] and
//! [`server`] (`--loopback` runs both, here); [`verify`] checks each side's
//! data at the end of a size, and [`describe`] is what each side says
//! about itself.

pub mod bw;
pub mod client;
pub mod ctrl;
pub mod describe;
pub mod lat;
pub mod ops;
pub mod options;
pub mod params;
pub mod pattern;
pub mod report;
pub mod server;
pub mod setup;
pub mod verify;

pub use options::{Args, Config, Opts, TestCmd};
use setup::DeviceChoice;
use softrdma::cm;
use std::io::Write;

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad arguments (exit status 2, like clap's own errors).
    #[error("{0}")]
    Usage(String),
    /// The peer went away or stopped answering.
    #[error("{0}")]
    PeerGone(String),
    /// The data that arrived is wrong (every failure, one per line).
    #[error("data verification failed ({} problem(s), listed above)", .0.len())]
    Verify(Vec<String>),
    /// Writing the report failed (`softrdma perf … | head`: a closed pipe).
    #[error("writing output: {0}")]
    Output(#[from] std::io::Error),
    /// Anything else.
    #[error("{0}")]
    Failed(String),
}

impl From<softrdma::Error> for Error {
    fn from(e: softrdma::Error) -> Self {
        match e {
            softrdma::Error::Connect(c @ softrdma::ConnectError::PeerClosed) => {
                Error::PeerGone(format!("connection setup: {c}"))
            }
            e => Error::Failed(e.to_string()),
        }
    }
}

impl Error {
    /// The process exit status for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => 2,
            _ => 1,
        }
    }
}

/// Runs `softrdma perf`; the report goes to `out`.
pub fn run(args: &Args, out: &mut (dyn Write + Send)) -> Result<(), Error> {
    let (test, opts) = args.test.split();
    let cfg = Config::new(test, opts)?;
    if opts.loopback {
        loopback(&cfg, out)
    } else if let Some(host) = &opts.host {
        let dev = setup::open_device(&cfg.device(false))?;
        let addr = options::host_port(host, opts.port);
        client::client(&cfg, dev, &addr, out).map(|_| ())
    } else {
        let dev = setup::open_device(&cfg.device(false))?;
        let listener = cm::Listener::bind(&format!("0.0.0.0:{}", opts.port))
            .map_err(|e| Error::Failed(e.to_string()))?;
        server::server(&cfg, dev, listener, out, true).map(|_| ())
    }
}

/// Both ends in this process: the server in one thread with its device,
/// the client in another with its own.
fn loopback(cfg: &Config, out: &mut (dyn Write + Send)) -> Result<(), Error> {
    let listener = cm::Listener::bind("127.0.0.1:0").map_err(|e| Error::Failed(e.to_string()))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::Failed(e.to_string()))?
        .to_string();
    let server_dev = setup::open_device(&DeviceChoice {
        pcap: None,
        ..cfg.device(true)
    })?;
    let client_dev = setup::open_device(&cfg.device(true))?;
    let (c, s) = std::thread::scope(|scope| {
        let srv = std::thread::Builder::new()
            .name("perf-server".into())
            .spawn_scoped(scope, || {
                server::server(cfg, server_dev, listener, &mut std::io::sink(), false)
            });
        let srv = match srv {
            Ok(h) => h,
            Err(e) => {
                return (
                    Err(Error::Failed(format!("starting the server thread: {e}"))),
                    Ok(()),
                )
            }
        };
        let cli = std::thread::Builder::new()
            .name("perf-client".into())
            .spawn_scoped(scope, || client::client(cfg, client_dev, &addr, out));
        let c = match cli {
            Ok(h) => h
                .join()
                .unwrap_or_else(|_| Err(Error::Failed("the client thread panicked".into()))),
            Err(e) => Err(Error::Failed(format!("starting the client thread: {e}"))),
        };
        if c.is_err() && !srv.is_finished() {
            // A server still waiting in accept() for a client that never
            // came: a connection that closes at once ends its wait.
            let _ = std::net::TcpStream::connect(&addr);
        }
        let s = srv
            .join()
            .unwrap_or_else(|_| Err(Error::Failed("the server thread panicked".into())));
        (c, s)
    });
    match (c, s) {
        (Ok(()), Ok(())) => Ok(()),
        // The client reports the server's verification failures too.
        (Err(e @ Error::Verify(_)), _) => Err(e),
        (Ok(()), Err(Error::Verify(v))) => Err(Error::Verify(v)),
        (Ok(()), Err(e)) => Err(Error::Failed(format!("server: {e}"))),
        (Err(e), Ok(())) | (Err(e), Err(Error::PeerGone(_))) => Err(e),
        (Err(Error::PeerGone(_)), Err(e)) => Err(Error::Failed(format!("server: {e}"))),
        (Err(e), Err(se)) => Err(Error::Failed(format!("client: {e}\nserver: {se}"))),
    }
}
