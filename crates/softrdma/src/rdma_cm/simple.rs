//! One call to get a connected RC QP by IP address and port: [`connect`]
//! and [`listen`] + [`Listener::accept`] do the whole rdma_cm exchange
//! (resolve, REQ/REP/RTU) with a PD, a CQ and a QP of their own.

use super::{CmEvent, CmId, ConnParam, EventChannel, EventType};
use crate::error::{Error, Result};
use crate::{CompletionQueue, Device, ProtectionDomain, QpType, QueuePair};
use softrdma_cm::PortSpace;
use std::net::SocketAddr;
use std::time::Duration;

/// What [`connect`] and [`Listener::accept`] create and send.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// The connection parameters (private data, READ depths, retries).
    pub conn: ConnParam,
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per work request.
    pub max_sge: u32,
    /// CQ depth (shared by sends and receives).
    pub cq_depth: u32,
    /// How long each step may take.
    pub timeout: Duration,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            conn: ConnParam {
                responder_resources: 16,
                initiator_depth: 16,
                ..ConnParam::default()
            },
            max_send_wr: 128,
            max_recv_wr: 128,
            max_sge: 4,
            cq_depth: 512,
            timeout: Duration::from_secs(10),
        }
    }
}

/// A connected RC QP and what it came with. Dropping it disconnects
/// (the id's destroy sends the DREQ) and frees everything.
#[derive(Debug)]
pub struct Connection {
    /// The rdma_cm id.
    pub id: CmId,
    /// The QP, in RTS.
    pub qp: QueuePair,
    /// Its CQ (sends and receives).
    pub cq: CompletionQueue,
    /// Its protection domain.
    pub pd: ProtectionDomain,
    /// The private data the peer sent (the whole field: 56 bytes from a
    /// requester, 196 from an acceptor).
    pub peer_private_data: Vec<u8>,
    /// The channel of the id's events.
    pub channel: EventChannel,
}

impl Connection {
    /// The device.
    pub fn device(&self) -> &Device {
        self.pd.device()
    }

    /// `rdma_disconnect`, then waits for DISCONNECTED.
    pub fn disconnect(&self, timeout: Duration) -> Result<()> {
        self.id.disconnect()?;
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.channel.get_event_timeout(left)? {
                Some(ev) if ev.event == EventType::Disconnected => return Ok(()),
                Some(_) => continue,
                None => return Err(Error::cm(libc::ETIMEDOUT, "waiting for DISCONNECTED")),
            }
        }
    }
}

/// Waits for the next event of `chan` and wants `want`.
fn expect(chan: &EventChannel, want: EventType, timeout: Duration) -> Result<CmEvent> {
    let ev = chan
        .get_event_timeout(timeout)?
        .ok_or_else(|| Error::cm(libc::ETIMEDOUT, format!("waiting for {}", want.as_str())))?;
    if ev.event == want {
        return Ok(ev);
    }
    let errno = match ev.event {
        EventType::Rejected => libc::ECONNREFUSED,
        EventType::Unreachable => libc::ETIMEDOUT,
        _ if ev.status < 0 => -ev.status,
        _ => libc::EPROTO,
    };
    Err(Error::cm(
        errno,
        format!(
            "{} (status {}) instead of {}",
            ev.event.as_str(),
            ev.status,
            want.as_str()
        ),
    ))
}

fn make_qp(
    id: &CmId,
    o: &ConnectOptions,
) -> Result<(ProtectionDomain, CompletionQueue, QueuePair)> {
    let dev = id
        .device()
        .ok_or_else(|| Error::cm(libc::ENODEV, "the id has no device"))?;
    let pd = dev.alloc_pd()?;
    let cq = dev.create_cq(o.cq_depth, None)?;
    let qp = pd
        .qp_builder(QpType::Rc, &cq, &cq)
        .max_send_wr(o.max_send_wr)
        .max_recv_wr(o.max_recv_wr)
        .max_send_sge(o.max_sge)
        .max_recv_sge(o.max_sge)
        .build()?;
    id.attach_qp(&qp)?;
    Ok((pd, cq, qp))
}

/// Connects an RC QP to the listener at `addr` (TCP port space): resolve
/// address and route, REQ, REP, RTU. Receives should be posted on
/// `Connection::qp` before the peer sends: the QP is in RTS when this
/// returns.
pub fn connect(addr: SocketAddr, o: &ConnectOptions) -> Result<Connection> {
    let channel = EventChannel::new()?;
    let id = CmId::new(&channel, PortSpace::Tcp, None)?;
    id.resolve_addr(None, addr)?;
    drop(expect(&channel, EventType::AddrResolved, o.timeout)?);
    id.resolve_route()?;
    drop(expect(&channel, EventType::RouteResolved, o.timeout)?);
    let (pd, cq, qp) = make_qp(&id, o)?;
    id.connect(Some(&o.conn))?;
    let ev = expect(&channel, EventType::Established, o.timeout)?;
    let peer_private_data = ev.conn.private_data.clone();
    drop(ev);
    Ok(Connection {
        id,
        qp,
        cq,
        pd,
        peer_private_data,
        channel,
    })
}

/// A listening id (TCP port space).
#[derive(Debug)]
pub struct Listener {
    /// The id.
    pub id: CmId,
    /// Its channel (CONNECT_REQUEST events).
    pub channel: EventChannel,
}

/// Listens on `addr` (port 0: an ephemeral port, see
/// [`Listener::local_addr`]; IP 0.0.0.0: every device).
pub fn listen(addr: SocketAddr) -> Result<Listener> {
    let channel = EventChannel::new()?;
    let id = CmId::new(&channel, PortSpace::Tcp, None)?;
    id.bind_addr(addr)?;
    id.listen(0)?;
    Ok(Listener { id, channel })
}

impl Listener {
    /// The bound address and port.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.id
            .addr_info()?
            .src
            .ok_or_else(|| Error::cm(libc::EINVAL, "not bound"))
    }

    /// Waits for a request and accepts it with a new RC QP; returns once
    /// the RTU came (ESTABLISHED).
    pub fn accept(&self, o: &ConnectOptions) -> Result<Connection> {
        let ev = expect(&self.channel, EventType::ConnectRequest, o.timeout)?;
        let id = ev.id.clone();
        let peer_private_data = ev.conn.private_data.clone();
        drop(ev);
        let channel = EventChannel::new()?;
        id.migrate(&channel)?;
        let (pd, cq, qp) = match make_qp(&id, o) {
            Ok(x) => x,
            Err(e) => {
                let _ = id.reject(&[]);
                return Err(e);
            }
        };
        let mut conn = o.conn.clone();
        // What the requester asked for, capped by the device.
        conn.responder_resources = 0xff;
        conn.initiator_depth = 0xff;
        id.accept(Some(&conn))?;
        drop(expect(&channel, EventType::Established, o.timeout)?);
        Ok(Connection {
            id,
            qp,
            cq,
            pd,
            peer_private_data,
            channel,
        })
    }
}
