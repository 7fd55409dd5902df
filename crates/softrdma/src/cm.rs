//! Connection setup: a small out-of-band exchange over TCP.
//!
//! Each side sends one line per QP — GID, QPN, first PSN, and the region it
//! offers (rkey, address, length) — and reads the peer's, like perftest and
//! the rdma-core examples do. The format is text so it can be read in a
//! packet capture:
//!
//! ```text
//! SOFTRDMA1 gid=00000000000000000000ffff7f000001 qpn=0x000123 psn=0x45a6b7 rkey=0x1a2b3c4d va=0x7f00c0000000 len=1048576 mtu=4096 port=4791
//! ```
//!
//! `port` is the UDP port the side's packets come from (its device's
//! socket): the peer's QP takes packets from that port only, from the
//! first on. A line without it (0) leaves the QP to learn the port from
//! the first packet it expects.
//!
//! [`Listener::accept_rc`] / [`connect_rc`] do the whole job for one RC (or
//! UC) QP: create it, exchange, move it to RTS.

use crate::device::Device;
use crate::error::{ConnectError, Error, Result};
use crate::verbs::{
    CompletionQueue, ConnectOptions, MemoryRegion, ProtectionDomain, QpEndpoint, QueuePair,
};
use softrdma_proto::{Mtu, QpType};
use softrdma_wire::{Psn, Qpn, RKey};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// One QP's side of the exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnInfo {
    /// GID of the device.
    pub gid: [u8; 16],
    /// QP number.
    pub qpn: Qpn,
    /// First PSN this side sends.
    pub psn: Psn,
    /// Remote key of the offered region (0 if none).
    pub rkey: RKey,
    /// Address of the offered region.
    pub va: u64,
    /// Length of the offered region.
    pub len: u64,
    /// Path MTU this side wants (the smaller of the two is used).
    pub mtu: u32,
    /// UDP port this side's packets come from (0: not said).
    pub port: u16,
}

impl ConnInfo {
    /// The QP part.
    pub fn endpoint(&self) -> QpEndpoint {
        QpEndpoint {
            gid: self.gid,
            qpn: self.qpn,
            psn: self.psn,
            port: (self.port != 0).then_some(self.port),
        }
    }

    fn to_line(self) -> String {
        let gid: String = self.gid.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "SOFTRDMA1 gid={gid} qpn={:#08x} psn={:#08x} rkey={:#010x} va={:#x} len={} mtu={} \
             port={}\n",
            self.qpn.value(),
            self.psn.value(),
            self.rkey.0,
            self.va,
            self.len,
            self.mtu,
            self.port
        )
    }

    fn from_line(line: &str) -> Result<ConnInfo> {
        let bad = |what: &'static str| {
            Error::Connect(ConnectError::BadField {
                what,
                line: line.trim_end().to_string(),
            })
        };
        let mut it = line.split_whitespace();
        if it.next() != Some("SOFTRDMA1") {
            return Err(ConnectError::NotSoftrdma(line.trim_end().to_string()).into());
        }
        let mut info = ConnInfo {
            gid: [0; 16],
            qpn: Qpn::new(0),
            psn: Psn::ZERO,
            rkey: RKey(0),
            va: 0,
            len: 0,
            mtu: 4096,
            port: 0,
        };
        let hex = |v: &str| u64::from_str_radix(v.trim_start_matches("0x"), 16);
        for kv in it {
            let (k, v) = kv.split_once('=').ok_or_else(|| bad("field"))?;
            match k {
                "gid" => {
                    if v.len() != 32 {
                        return Err(bad("gid"));
                    }
                    for i in 0..16 {
                        info.gid[i] =
                            u8::from_str_radix(&v[2 * i..2 * i + 2], 16).map_err(|_| bad("gid"))?;
                    }
                }
                "qpn" => info.qpn = Qpn::new(hex(v).map_err(|_| bad("qpn"))? as u32),
                "psn" => info.psn = Psn::new(hex(v).map_err(|_| bad("psn"))? as u32),
                "rkey" => info.rkey = RKey(hex(v).map_err(|_| bad("rkey"))? as u32),
                "va" => info.va = hex(v).map_err(|_| bad("va"))?,
                "len" => info.len = v.parse().map_err(|_| bad("len"))?,
                "mtu" => info.mtu = v.parse().map_err(|_| bad("mtu"))?,
                "port" => info.port = v.parse().map_err(|_| bad("port"))?,
                _ => {} // forward compatible
            }
        }
        Ok(info)
    }
}

/// Sends `local` (one line per QP, after a count line saying how many and
/// how many bytes follow) and reads the peer's. Both directions run at
/// once: thousands of QPs are more than the socket buffers hold.
pub fn exchange(stream: &mut TcpStream, local: &[ConnInfo]) -> Result<Vec<ConnInfo>> {
    let io = |e| Error::io("out-of-band exchange", e);
    let body: String = local.iter().map(|l| l.to_line()).collect();
    let head = format!("SOFTRDMA1 count={} bytes={}\n", local.len(), body.len());
    let mut writer = stream.try_clone().map_err(io)?;
    std::thread::scope(|s| {
        // A thread of ours in the program's process: every signal blocked.
        let sent = softrdma_io::with_signals_blocked(|| {
            s.spawn(move || {
                writer.write_all(head.as_bytes())?;
                writer.write_all(body.as_bytes())
            })
        });
        let got = read_infos(stream);
        sent.join()
            .unwrap_or_else(|_| Err(std::io::Error::other("writer panicked")))
            .map_err(io)?;
        got
    })
}

fn read_infos(stream: &mut TcpStream) -> Result<Vec<ConnInfo>> {
    let mut line = String::new();
    read_line(stream, &mut line)?;
    let bad = || Error::from(ConnectError::Greeting(line.trim_end().to_string()));
    let rest = line
        .trim_end()
        .strip_prefix("SOFTRDMA1 count=")
        .ok_or_else(bad)?;
    let (count, bytes) = match rest.split_once(" bytes=") {
        Some((c, b)) => (c.parse().ok(), b.parse::<usize>().ok()),
        None => (rest.parse().ok(), None),
    };
    let count: usize = count
        .filter(|&c| c <= softrdma_proto::limits::MAX_QP)
        .ok_or_else(bad)?;
    let mut out = Vec::with_capacity(count);
    match bytes {
        // Read in one go (at most 1 KiB a line).
        Some(n) if n <= count * 1024 => {
            let mut buf = vec![0u8; n];
            stream
                .read_exact(&mut buf)
                .map_err(|e| Error::io("out-of-band exchange", e))?;
            let text = String::from_utf8(buf).map_err(|_| ConnectError::NotUtf8)?;
            for l in text.lines() {
                out.push(ConnInfo::from_line(l)?);
            }
            if out.len() != count {
                return Err(ConnectError::Miscounted {
                    announced: count,
                    sent: out.len(),
                }
                .into());
            }
        }
        Some(_) => return Err(bad()),
        // An older peer: one line at a time.
        None => {
            for _ in 0..count {
                line.clear();
                read_line(stream, &mut line)?;
                out.push(ConnInfo::from_line(&line)?);
            }
        }
    }
    Ok(out)
}

/// Reads one line byte by byte: nothing after the newline is consumed, so
/// the stream stays usable for barriers and later exchanges. Bounded at 4 KiB.
fn read_line(r: &mut impl Read, line: &mut String) -> Result<()> {
    let mut bytes = Vec::with_capacity(160);
    let mut b = [0u8; 1];
    loop {
        let n = r
            .read(&mut b)
            .map_err(|e| Error::io("out-of-band exchange", e))?;
        if n == 0 {
            return Err(ConnectError::PeerClosed.into());
        }
        if b[0] == b'\n' {
            break;
        }
        if bytes.len() >= 4096 {
            return Err(ConnectError::Overlong.into());
        }
        bytes.push(b[0]);
    }
    line.push_str(&String::from_utf8_lossy(&bytes));
    Ok(())
}

/// Waits for the peer to reach the same point (one byte each way).
pub fn barrier(stream: &mut TcpStream) -> Result<()> {
    let io = |e| Error::io("synchronising with the peer", e);
    stream.write_all(b"B").map_err(io)?;
    let mut b = [0u8; 1];
    stream.read_exact(&mut b).map_err(io)?;
    if b[0] != b'B' {
        return Err(ConnectError::LostStep.into());
    }
    Ok(())
}

/// Connects to `addr` (host:port), retrying for up to `wait` while the
/// server is not listening yet.
pub fn tcp_connect(addr: &str, wait: Duration) -> Result<TcpStream> {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|source| ConnectError::Resolve {
            addr: addr.to_string(),
            source,
        })?
        .collect();
    let deadline = std::time::Instant::now() + wait;
    loop {
        let mut last = None;
        for a in &addrs {
            match TcpStream::connect_timeout(a, Duration::from_secs(2)) {
                Ok(s) => {
                    prepare(&s);
                    return Ok(s);
                }
                Err(e) => last = Some(e),
            }
        }
        if std::time::Instant::now() >= deadline {
            return Err(ConnectError::Unreachable {
                addr: addr.to_string(),
                last,
            }
            .into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// No Nagle delay; a peer that stops answering fails the exchange after a
/// minute instead of hanging it.
fn prepare(s: &TcpStream) {
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
}

/// A TCP listener for the out-of-band exchange.
pub struct Listener {
    tcp: TcpListener,
}

/// One connected QP and what the peer offered.
pub struct Connection {
    /// The QP, in RTS.
    pub qp: QueuePair,
    /// The peer's side of the exchange (its region's rkey/address/length).
    pub remote: ConnInfo,
    /// The out-of-band stream (for barriers, or more exchanges).
    pub stream: TcpStream,
}

impl Listener {
    /// Listens on `addr` (e.g. `0.0.0.0:18515`).
    pub fn bind(addr: &str) -> Result<Listener> {
        let tcp = TcpListener::bind(addr).map_err(|e| {
            let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
                " (port in use: is another server running? pick another port)"
            } else {
                ""
            };
            Error::io(format!("listening on {addr}{hint}"), e)
        })?;
        Ok(Listener { tcp })
    }

    /// The bound address.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.tcp
            .local_addr()
            .map_err(|e| Error::io("listener address", e))
    }

    /// Waits for one client.
    pub fn accept(&self) -> Result<TcpStream> {
        let (s, _) = self
            .tcp
            .accept()
            .map_err(|e| Error::io("accepting a client", e))?;
        let _ = s.set_nodelay(true);
        Ok(s)
    }

    /// Accepts one client and connects a new QP of `qp_type` to the one it
    /// offers, offering `mr` in return.
    pub fn accept_rc(
        &self,
        pd: &ProtectionDomain,
        cq: &CompletionQueue,
        qp_type: QpType,
        mr: Option<&MemoryRegion>,
        opts: &ConnectOptions,
    ) -> Result<Connection> {
        let stream = self.accept()?;
        setup(stream, pd, cq, qp_type, mr, opts)
    }
}

/// Connects to a server at `addr` and connects a new QP to the one it
/// offers, offering `mr` in return.
pub fn connect_rc(
    addr: &str,
    pd: &ProtectionDomain,
    cq: &CompletionQueue,
    qp_type: QpType,
    mr: Option<&MemoryRegion>,
    opts: &ConnectOptions,
) -> Result<Connection> {
    let stream = tcp_connect(addr, Duration::from_secs(10))?;
    setup(stream, pd, cq, qp_type, mr, opts)
}

/// Local description of a QP and region for the exchange.
pub fn local_info(
    dev: &Device,
    qp: &QueuePair,
    psn: Psn,
    mr: Option<&MemoryRegion>,
    mtu: Mtu,
) -> ConnInfo {
    ConnInfo {
        gid: dev.gid(),
        qpn: qp.qpn(),
        psn,
        rkey: mr.map_or(RKey(0), |m| m.rkey()),
        va: mr.map_or(0, |m| m.addr()),
        len: mr.map_or(0, |m| m.len() as u64),
        mtu: mtu.bytes(),
        port: dev.local_addr().port(),
    }
}

fn setup(
    mut stream: TcpStream,
    pd: &ProtectionDomain,
    cq: &CompletionQueue,
    qp_type: QpType,
    mr: Option<&MemoryRegion>,
    opts: &ConnectOptions,
) -> Result<Connection> {
    let dev = pd.device().clone();
    let qp = pd.qp_builder(qp_type, cq, cq).build()?;
    let psn = dev.random_psn();
    let local = local_info(&dev, &qp, psn, mr, opts.mtu);
    let remote = exchange(&mut stream, &[local])?
        .pop()
        .ok_or(ConnectError::NoQp)?;
    let mut o = *opts;
    o.mtu = Mtu::from_bytes_floor(remote.mtu.min(opts.mtu.bytes())).unwrap_or(Mtu::M256);
    qp.connect(psn, &remote.endpoint(), &o)?;
    barrier(&mut stream)?;
    Ok(Connection { qp, remote, stream })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_round_trip_and_rejects() {
        let i = ConnInfo {
            gid: [1; 16],
            qpn: Qpn::new(0x123),
            psn: Psn::new(0xabcdef),
            rkey: RKey(0xdead_beef),
            va: 0x7f00_0000_1000,
            len: 1 << 20,
            mtu: 1024,
            port: 4791,
        };
        assert_eq!(ConnInfo::from_line(&i.to_line()).unwrap(), i);
        assert!(ConnInfo::from_line("HELLO").is_err());
        assert!(ConnInfo::from_line("SOFTRDMA1 gid=zz").is_err());
        assert!(ConnInfo::from_line("SOFTRDMA1 qpn=0xqq").is_err());
    }
}
