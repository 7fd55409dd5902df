//! The messages between a device's processes and its device process, and
//! their encoding: one message per unix packet, a tag byte and fixed
//! little-endian fields, strings and byte strings with a `u16` length.
//! Descriptors travel beside them (`SCM_RIGHTS`); each message says which.
//!
//! Two connections per member: `ctl` carries requests from any thread of
//! the member and the device process's answer to each, in order; `evt`
//! carries what the device process says on its own (the lease) and the
//! member's acknowledgements, read by the member's progress thread.
//!
//! After the handshake (`Hello`/`Welcome`, which stay unframed so that
//! two versions can still tell each other theirs) every message on `ctl`
//! is [`frame`]d: a `u32` request number first, which the device process
//! echoes in its answer. A member that gave up waiting for an answer
//! (`REPLY_WAIT`) recognises it when it comes late and drops it, instead
//! of taking it for the answer to its next request.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Version of this protocol: a device process and a member of different
/// versions do not talk (the member says so and the program gets an
/// error naming both). 5: a ring record's header byte 3 says the sender
/// left the packet's ICRC out (`REC_ICRC_LEFT`), which a member of 4
/// would read as a corrupted packet. 6: messages on `ctl` after the
/// handshake carry a request number the answer echoes ([`frame`]), and
/// `Path` the epoch of the sender's ring to its owner.
pub const VERSION: u32 = 6;

/// The request number of messages that have no answer.
pub const NO_ANSWER: u32 = 0;

/// A message on `ctl` after the handshake: `seq` (the request number; the
/// answer echoes it) then the message.
pub fn frame(seq: u32, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + body.len());
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(body);
    v
}

/// The request number and the message of a [`frame`]d message.
pub fn unframe(b: &[u8]) -> Result<(u32, &[u8]), BadMsg> {
    if b.len() < 4 {
        return Err(BadMsg);
    }
    let (n, body) = b.split_at(4);
    Ok((u32::from_le_bytes(n.try_into().map_err(|_| BadMsg)?), body))
}

/// Longest message.
pub const MAX_MSG: usize = 4096;

/// What a member sends on `ctl`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// First message. Descriptor: the member's wake-up eventfd.
    Hello {
        /// [`VERSION`].
        version: u32,
        /// The member takes part in the same-host path.
        same_host: bool,
        /// The MTU the member was configured with (the device keeps the
        /// first member's).
        mtu: u32,
        /// The program's name (`/proc/self/comm`).
        comm: String,
    },
    /// The member drew this QP number (at random, as issue 21 wants):
    /// may it have it? Answer: `Ok`, or `Err(EBUSY)` when another member
    /// holds it.
    ClaimQpn(u32),
    /// A QP number is free again (no answer).
    FreeQpn(u32),
    /// Connection requests for this service ID are the member's (answer:
    /// `Ok`, or `Err(EADDRINUSE)` when another member listens on it).
    Listen(u64),
    /// No more (no answer).
    Unlisten(u64),
    /// Send this QP 1 datagram (a whole RoCE v2 UDP payload the member
    /// built, ICRC included) to `dst`'s QP 1 from the device's socket; the
    /// device process reads the MAD in it to learn the member's
    /// connections (no answer).
    SendGsi {
        /// Destination address (port: the device's UDP port).
        dst: IpAddr,
        /// The datagram.
        packet: Vec<u8>,
    },
    /// Who shares the device.
    Members,
    /// Receive what the device's socket already holds and hand it out
    /// before answering (`Ok`): the member is about to move a QP to ERR
    /// or RESET, and an ACK that reached the device first must complete
    /// its SEND rather than see it flushed (a NIC processes what reached
    /// it before the driver's modify).
    Receive,
    /// The member leaves (its device closes normally).
    Bye,
    /// First and only request of a *path* connection (the same-host path,
    /// not a member): which member owns QP `qpn`? Descriptor: none, or a
    /// ring the sender offers for that member (taken if the sender gave
    /// it none yet). Answer: `Path` with the owner's wake-up eventfd (and
    /// pidfd), or `Err(ENOENT)` (no member holds it, or its owner does not
    /// take part in the same-host path). One message each way: the device
    /// process never waits for a sender. A ring offered for a member the
    /// sender gave one before replaces it (the sender closed the old one).
    OpenPath {
        /// The sending device's token (random, per device and process).
        sender: u64,
        /// The destination QP.
        qpn: u32,
    },
    /// A member takes the rings senders gave it (the device process
    /// raised its ring's flag). Answer: `Rings`.
    TakeRings,
    /// A member let go of the ring `sender` gave it (its producer closed
    /// it or died): the device process forgets the pair (no answer).
    RingGone {
        /// As in `OpenPath`.
        sender: u64,
    },
}

/// A member as `Members` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberInfo {
    /// Process ID (0: not visible from the device process's namespace).
    pub pid: i32,
    /// Program name.
    pub comm: String,
    /// QP numbers it holds.
    pub qps: u32,
    /// Reads the socket itself (the only member).
    pub leased: bool,
    /// Takes part in the same-host path.
    pub same_host: bool,
}

/// The device process's answers on `ctl`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// To `Hello`. Descriptors: the device's UDP socket, the ring the
    /// device process hands the member its datagrams in, and the member's
    /// `evt` connection.
    Welcome {
        /// [`VERSION`].
        version: u32,
        /// The device's MTU.
        mtu: u32,
        /// The device process's pid.
        host_pid: i32,
        /// The member reads the socket itself until told otherwise.
        leased: bool,
    },
    /// The versions differ.
    WrongVersion(u32),
    /// Done.
    Ok,
    /// A QP number.
    Qpn(u32),
    /// Refused, with an errno.
    Err(i32),
    /// The members.
    Members(Vec<MemberInfo>),
    /// To `OpenPath`. Descriptors: the owner's wake-up eventfd, then its
    /// pidfd if `pidfd`.
    Path {
        /// The owner (a member number of this device process).
        member: u64,
        /// What became of the sender's ring for this member.
        ring: PathRing,
        /// The owner's pidfd follows (not when its process is not
        /// visible from the device process's pid namespace).
        pidfd: bool,
        /// The ring's epoch as of this answer (`Ring::epoch`): the device
        /// process moves it on when a QP number of the owner is freed or
        /// the owner leaves, and the sender then asks again before it
        /// writes for that QP (the number may be another member's now).
        epoch: u64,
    },
    /// To `TakeRings`: one entry per ring; descriptors follow in order,
    /// each ring then its sender's pidfd if the entry says so. At most
    /// [`MAX_GIFTS`] per answer (the member asks again while it gets that
    /// many).
    Rings(Vec<RingGift>),
}

/// The rings one `Rings` answer carries at most (a ring and a pidfd
/// each, within `softrdma_io::MAX_FDS` descriptors).
pub const MAX_GIFTS: usize = softrdma_io::MAX_FDS / 2;

/// The sender's ring for the owner of a QP, as `Path` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathRing {
    /// The sender gave this member a ring before: write into that one.
    Have,
    /// The ring the request carried is now this member's.
    Taken,
    /// The sender has no ring for this member and the request carried
    /// none: ask again with one.
    Need,
}

/// A ring a sender gave a member, as `Rings` lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingGift {
    /// The sender's token (`OpenPath`'s).
    pub sender: u64,
    /// The sender's pidfd follows the ring.
    pub pidfd: bool,
}

/// What travels on `evt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Device process → member: read the socket yourself.
    Grant,
    /// Device process → member: stop reading the socket, then say
    /// [`Event::Released`].
    Revoke,
    /// Member → device process: no thread of the member reads the socket
    /// any more.
    Released,
}

/// A message that does not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadMsg;

struct W(Vec<u8>);

impl W {
    fn new(tag: u8) -> W {
        W(vec![tag])
    }
    fn u8(mut self, v: u8) -> W {
        self.0.push(v);
        self
    }
    fn u32(mut self, v: u32) -> W {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i32(self, v: i32) -> W {
        self.u32(v as u32)
    }
    fn u64(mut self, v: u64) -> W {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(mut self, v: &[u8]) -> W {
        let n = v.len().min(u16::MAX as usize);
        self.0.extend_from_slice(&(n as u16).to_le_bytes());
        self.0.extend_from_slice(&v[..n]);
        self
    }
    fn ip(self, ip: IpAddr) -> W {
        match ip {
            IpAddr::V4(a) => self.u8(4).bytes(&a.octets()),
            IpAddr::V6(a) => self.u8(6).bytes(&a.octets()),
        }
    }
}

struct R<'a>(&'a [u8]);

impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], BadMsg> {
        if self.0.len() < n {
            return Err(BadMsg);
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, BadMsg> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, BadMsg> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().map_err(|_| BadMsg)?,
        ))
    }
    fn i32(&mut self) -> Result<i32, BadMsg> {
        Ok(self.u32()? as i32)
    }
    fn u64(&mut self) -> Result<u64, BadMsg> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().map_err(|_| BadMsg)?,
        ))
    }
    fn bool(&mut self) -> Result<bool, BadMsg> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(BadMsg),
        }
    }
    fn bytes(&mut self) -> Result<&'a [u8], BadMsg> {
        let n = u16::from_le_bytes(self.take(2)?.try_into().map_err(|_| BadMsg)?);
        self.take(n as usize)
    }
    fn string(&mut self) -> Result<String, BadMsg> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| BadMsg)
    }
    fn ip(&mut self) -> Result<IpAddr, BadMsg> {
        match (self.u8()?, self.bytes()?) {
            (4, b) => Ok(IpAddr::V4(Ipv4Addr::from(
                <[u8; 4]>::try_from(b).map_err(|_| BadMsg)?,
            ))),
            (6, b) => Ok(IpAddr::V6(Ipv6Addr::from(
                <[u8; 16]>::try_from(b).map_err(|_| BadMsg)?,
            ))),
            _ => Err(BadMsg),
        }
    }
    fn end(self) -> Result<(), BadMsg> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(BadMsg)
        }
    }
}

impl Request {
    /// The bytes of the message.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Request::Hello {
                version,
                same_host,
                mtu,
                comm,
            } => W::new(1)
                .u32(*version)
                .u8(u8::from(*same_host))
                .u32(*mtu)
                .bytes(comm.as_bytes()),
            Request::ClaimQpn(q) => W::new(2).u32(*q),
            Request::FreeQpn(q) => W::new(3).u32(*q),
            Request::Listen(s) => W::new(4).u64(*s),
            Request::Unlisten(s) => W::new(5).u64(*s),
            Request::SendGsi { dst, packet } => W::new(6).ip(*dst).bytes(packet),
            Request::Members => W::new(8),
            Request::Bye => W::new(9),
            Request::OpenPath { sender, qpn } => W::new(10).u64(*sender).u32(*qpn),
            Request::TakeRings => W::new(12),
            Request::RingGone { sender } => W::new(14).u64(*sender),
            Request::Receive => W::new(13),
        }
        .0
    }

    /// The message in `b`.
    pub fn decode(b: &[u8]) -> Result<Request, BadMsg> {
        let mut r = R(b);
        let m = match r.u8()? {
            1 => Request::Hello {
                version: r.u32()?,
                same_host: r.bool()?,
                mtu: r.u32()?,
                comm: r.string()?,
            },
            2 => Request::ClaimQpn(r.u32()?),
            3 => Request::FreeQpn(r.u32()?),
            4 => Request::Listen(r.u64()?),
            5 => Request::Unlisten(r.u64()?),
            6 => Request::SendGsi {
                dst: r.ip()?,
                packet: r.bytes()?.to_vec(),
            },
            8 => Request::Members,
            9 => Request::Bye,
            10 => Request::OpenPath {
                sender: r.u64()?,
                qpn: r.u32()?,
            },
            12 => Request::TakeRings,
            14 => Request::RingGone { sender: r.u64()? },
            13 => Request::Receive,
            _ => return Err(BadMsg),
        };
        r.end()?;
        Ok(m)
    }
}

impl Reply {
    /// The bytes of the message.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Reply::Welcome {
                version,
                mtu,
                host_pid,
                leased,
            } => W::new(1)
                .u32(*version)
                .u32(*mtu)
                .i32(*host_pid)
                .u8(u8::from(*leased)),
            Reply::WrongVersion(v) => W::new(2).u32(*v),
            Reply::Ok => W::new(3),
            Reply::Qpn(q) => W::new(4).u32(*q),
            Reply::Err(e) => W::new(5).i32(*e),
            Reply::Members(ms) => {
                let mut w = W::new(6).u32(ms.len() as u32);
                for m in ms {
                    w = w
                        .i32(m.pid)
                        .bytes(m.comm.as_bytes())
                        .u32(m.qps)
                        .u8(u8::from(m.leased))
                        .u8(u8::from(m.same_host));
                }
                w
            }
            Reply::Path {
                member,
                ring,
                pidfd,
                epoch,
            } => W::new(7)
                .u64(*member)
                .u8(match ring {
                    PathRing::Have => 0,
                    PathRing::Taken => 1,
                    PathRing::Need => 2,
                })
                .u8(u8::from(*pidfd))
                .u64(*epoch),
            Reply::Rings(v) => {
                let mut w = W::new(8).u32(v.len() as u32);
                for g in v {
                    w = w.u64(g.sender).u8(u8::from(g.pidfd));
                }
                w
            }
        }
        .0
    }

    /// The message in `b`.
    pub fn decode(b: &[u8]) -> Result<Reply, BadMsg> {
        let mut r = R(b);
        let m = match r.u8()? {
            1 => Reply::Welcome {
                version: r.u32()?,
                mtu: r.u32()?,
                host_pid: r.i32()?,
                leased: r.bool()?,
            },
            2 => Reply::WrongVersion(r.u32()?),
            3 => Reply::Ok,
            4 => Reply::Qpn(r.u32()?),
            5 => Reply::Err(r.i32()?),
            6 => {
                let n = r.u32()? as usize;
                let mut v = Vec::with_capacity(n.min(256));
                for _ in 0..n {
                    v.push(MemberInfo {
                        pid: r.i32()?,
                        comm: r.string()?,
                        qps: r.u32()?,
                        leased: r.bool()?,
                        same_host: r.bool()?,
                    });
                }
                Reply::Members(v)
            }
            7 => Reply::Path {
                member: r.u64()?,
                ring: match r.u8()? {
                    0 => PathRing::Have,
                    1 => PathRing::Taken,
                    2 => PathRing::Need,
                    _ => return Err(BadMsg),
                },
                pidfd: r.bool()?,
                epoch: r.u64()?,
            },
            8 => {
                let n = r.u32()? as usize;
                if n > MAX_GIFTS {
                    return Err(BadMsg);
                }
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(RingGift {
                        sender: r.u64()?,
                        pidfd: r.bool()?,
                    });
                }
                Reply::Rings(v)
            }
            _ => return Err(BadMsg),
        };
        r.end()?;
        Ok(m)
    }
}

impl Event {
    /// The bytes of the message.
    pub fn encode(self) -> Vec<u8> {
        vec![match self {
            Event::Grant => 1,
            Event::Revoke => 2,
            Event::Released => 3,
        }]
    }

    /// The message in `b`.
    pub fn decode(b: &[u8]) -> Result<Event, BadMsg> {
        match b {
            [1] => Ok(Event::Grant),
            [2] => Ok(Event::Revoke),
            [3] => Ok(Event::Released),
            _ => Err(BadMsg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_round_trips_and_garbage_is_refused() {
        let reqs = [
            Request::Hello {
                version: VERSION,
                same_host: true,
                mtu: 4096,
                comm: "prog".into(),
            },
            Request::ClaimQpn(0x12345),
            Request::FreeQpn(0xabcdef),
            Request::Listen(0x0106_0000_0000_1d4f),
            Request::Unlisten(7),
            Request::SendGsi {
                dst: "::1".parse().unwrap(),
                packet: vec![9; 296],
            },
            Request::SendGsi {
                dst: "127.0.0.1".parse().unwrap(),
                packet: vec![],
            },
            Request::Members,
            Request::Bye,
            Request::OpenPath {
                sender: 0x1234_5678_9abc_def0,
                qpn: 0xab_cdef,
            },
            Request::TakeRings,
            Request::RingGone { sender: 7 },
            Request::Receive,
        ];
        for m in &reqs {
            let b = m.encode();
            assert_eq!(&Request::decode(&b).unwrap(), m);
            // Every truncation and an extra byte fail.
            for n in 0..b.len() {
                assert_eq!(Request::decode(&b[..n]), Err(BadMsg), "{m:?} cut at {n}");
            }
            let mut longer = b.clone();
            longer.push(0);
            assert_eq!(Request::decode(&longer), Err(BadMsg));
        }
        let reps = [
            Reply::Welcome {
                version: 1,
                mtu: 1024,
                host_pid: 42,
                leased: true,
            },
            Reply::WrongVersion(9),
            Reply::Ok,
            Reply::Qpn(5),
            Reply::Err(libc::EADDRINUSE),
            Reply::Members(vec![MemberInfo {
                pid: 1,
                comm: "a".into(),
                qps: 2,
                leased: false,
                same_host: true,
            }]),
            Reply::Path {
                member: 9,
                ring: PathRing::Need,
                pidfd: true,
                epoch: 0,
            },
            Reply::Path {
                member: 1,
                ring: PathRing::Taken,
                pidfd: false,
                epoch: u64::MAX - 1,
            },
            Reply::Rings(vec![
                RingGift {
                    sender: 3,
                    pidfd: true,
                },
                RingGift {
                    sender: u64::MAX,
                    pidfd: false,
                },
            ]),
            Reply::Rings(vec![]),
        ];
        for m in &reps {
            let b = m.encode();
            assert_eq!(&Reply::decode(&b).unwrap(), m);
            for n in 0..b.len() {
                assert_eq!(Reply::decode(&b[..n]), Err(BadMsg));
            }
        }
        for e in [Event::Grant, Event::Revoke, Event::Released] {
            assert_eq!(Event::decode(&e.encode()), Ok(e));
        }
        assert_eq!(Event::decode(&[]), Err(BadMsg));
        assert_eq!(Request::decode(&[200]), Err(BadMsg));
        let f = frame(0xdead_beef, &Request::Members.encode());
        assert_eq!(
            unframe(&f),
            Ok((0xdead_beef, &Request::Members.encode()[..]))
        );
        assert_eq!(unframe(&f[..3]), Err(BadMsg));
    }
}
