//! The TCP control connection between client and server: text lines, so a
//! capture of it reads like a transcript.
//!
//! ```text
//! client: SOFTRDMA-PERF1 test=write-bw conn=RC qps=1 ... sizes=65536x5000
//! server: OK
//! both:   (softrdma::cm::exchange: one line per QP) and a barrier
//! client: SIZE 0                 (index into the sizes)
//! server: READY                  (buffers cleared, receives posted)
//!         ... the client measures, the server serves ...
//! client: END 0 5000             (size index, operations per QP)
//! server: RESULT ok 5000         (or: RESULT fail 4999 <why>)
//! client: BYE
//! server: COUNTERS tx_packets=... (its device's counters), then closes
//! ```

use super::Error;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Longest line accepted.
const MAX_LINE: usize = 64 * 1024;

/// How long a reply may take before the peer counts as gone.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// The control connection.
pub struct Ctrl {
    /// The stream (also used for `softrdma::cm::exchange` and `barrier`).
    pub stream: TcpStream,
    /// "server" or "client": who is at the other end, for messages.
    pub peer: &'static str,
}

fn gone(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::UnexpectedEof
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::BrokenPipe
    )
}

impl Ctrl {
    /// Wraps a connected stream to the `peer` ("server" or "client").
    pub fn new(stream: TcpStream, peer: &'static str) -> Ctrl {
        let _ = stream.set_nodelay(true);
        Ctrl { stream, peer }
    }

    /// Sends one line (a newline is added).
    pub fn send(&mut self, line: &str) -> Result<(), Error> {
        let mut b = Vec::with_capacity(line.len() + 1);
        b.extend_from_slice(line.as_bytes());
        b.push(b'\n');
        self.stream.write_all(&b).map_err(|e| {
            if gone(&e) {
                self.closed()
            } else {
                Error::Failed(format!("sending to the peer: {e}"))
            }
        })
    }

    /// Receives one line, waiting at most `timeout` (`None`: forever).
    /// Reads byte by byte so nothing after the newline is consumed.
    pub fn recv(&mut self, timeout: Option<Duration>) -> Result<String, Error> {
        let _ = self.stream.set_nonblocking(false);
        let _ = self.stream.set_read_timeout(timeout);
        let mut bytes = Vec::with_capacity(64);
        let mut b = [0u8; 1];
        loop {
            match self.stream.read(&mut b) {
                Ok(0) => return Err(self.closed()),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(Error::PeerGone(format!(
                        "the {} did not answer within {} s",
                        self.peer,
                        timeout.map_or(0, |t| t.as_secs())
                    )))
                }
                Err(e) if gone(&e) => return Err(self.closed()),
                Err(e) => {
                    return Err(Error::Failed(format!(
                        "reading from the {}: {e}",
                        self.peer
                    )))
                }
            }
            if b[0] == b'\n' {
                break;
            }
            if bytes.len() >= MAX_LINE {
                return Err(Error::Failed(format!(
                    "the {} sent an overlong line",
                    self.peer
                )));
            }
            bytes.push(b[0]);
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Receives a line and checks its first word.
    pub fn expect(&mut self, word: &str, timeout: Option<Duration>) -> Result<String, Error> {
        let line = self.recv(timeout)?;
        if let Some(why) = line.strip_prefix("ERR ") {
            return Err(Error::Failed(format!("the {} reports: {why}", self.peer)));
        }
        if line.split_whitespace().next() != Some(word) {
            return Err(Error::Failed(format!(
                "lost step with the {}: expected {word}, got {:?}",
                self.peer,
                line.chars().take(80).collect::<String>()
            )));
        }
        Ok(line)
    }

    /// Whether a line (or part of one) is waiting, without blocking.
    /// A closed connection is an error.
    pub fn pending(&mut self) -> Result<bool, Error> {
        let _ = self.stream.set_nonblocking(true);
        let mut b = [0u8; 1];
        let r = self.stream.peek(&mut b);
        let _ = self.stream.set_nonblocking(false);
        match r {
            Ok(0) => Err(self.closed()),
            Ok(_) => Ok(true),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                Ok(false)
            }
            Err(e) if gone(&e) => Err(self.closed()),
            Err(e) => Err(Error::PeerGone(format!("the {} went away: {e}", self.peer))),
        }
    }

    fn closed(&self) -> Error {
        Error::PeerGone(format!(
            "the {} closed the connection (did it exit or fail?)",
            self.peer
        ))
    }
}

/// Parses `END k c0 c1 ...`.
pub fn parse_end(line: &str, k: usize, q: usize) -> Result<Vec<u64>, Error> {
    let mut w = line.split_whitespace();
    let bad = || Error::Failed(format!("lost step with the peer: {line:?}"));
    if w.next() != Some("END") || w.next().and_then(|s| s.parse::<usize>().ok()) != Some(k) {
        return Err(bad());
    }
    let v: Vec<u64> = w
        .map(|s| s.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    if v.len() != q {
        return Err(bad());
    }
    Ok(v)
}
