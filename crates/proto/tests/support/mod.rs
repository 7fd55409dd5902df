//! A scripted peer for Repr-level tests: one device under test with one QP
//! connected to a fictitious peer whose packets the test writes by hand, at
//! explicit virtual times.
#![allow(dead_code)]

use softrdma_proto::*;
use softrdma_wire::ip::DatagramRepr;
use softrdma_wire::*;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// Device address.
pub const DEV_IP: &str = "10.0.0.1";
/// The scripted peer's address.
pub const PEER_IP: &str = "10.0.0.2";
/// The scripted peer's QP number.
pub const PEER_QPN: u32 = 0x99;
/// Where the device's region starts.
pub const VA: u64 = 0x10_0000;
/// Region size.
pub const MEM: usize = 1 << 16;

/// An owned, parsed packet the device sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Out {
    pub opcode: u8,
    pub psn: u32,
    pub ack_req: bool,
    pub se: bool,
    pub dest_qp: u32,
    pub aeth: Option<(Syndrome, u32)>,
    pub reth: Option<RethRepr>,
    pub atomic: Option<AtomicEthRepr>,
    pub atomic_ack: Option<u64>,
    pub imm: Option<u32>,
    pub ieth: Option<u32>,
    pub deth: Option<DethRepr>,
    pub feth: Option<FethRepr>,
    pub payload: Vec<u8>,
}

/// The device, its QP and region.
pub struct Rig {
    pub dev: Device,
    pub now: Instant,
    pub qpn: Qpn,
    pub pd: PdId,
    pub scq: CqId,
    pub rcq: CqId,
    pub mem: Arc<VecMemory>,
    pub key: u32,
    pub mtu: Mtu,
    /// Next PSN the peer uses for requests.
    pub peer_psn: Psn,
    /// First PSN of the device's requests.
    pub dev_psn: Psn,
}

pub struct Setup {
    pub qp_type: QpType,
    pub mtu: Mtu,
    pub access: Access,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub peer_psn: u32,
    pub dev_psn: u32,
    pub srq: bool,
    pub cq_depth: u32,
    pub write_chunking: WriteChunking,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            qp_type: QpType::Rc,
            mtu: Mtu::M1024,
            access: Access::LOCAL_WRITE
                .with(Access::REMOTE_WRITE)
                .with(Access::REMOTE_READ)
                .with(Access::REMOTE_ATOMIC),
            timeout: 10,
            retry_cnt: 3,
            rnr_retry: 3,
            min_rnr_timer: 5,
            max_rd_atomic: 4,
            peer_psn: 0x100,
            dev_psn: 0x500,
            srq: false,
            cq_depth: 64,
            write_chunking: WriteChunking::Never,
        }
    }
}

/// The creation parameters of a small RC QP: 4 WRs and 1 SGE each way, no
/// inline data, completions only when asked for.
pub fn small_rc(pd: PdId, send_cq: CqId, recv_cq: CqId) -> QpInit {
    QpInit {
        qp_type: QpType::Rc,
        pd,
        send_cq,
        recv_cq,
        srq: None,
        cap: QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    }
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

impl Rig {
    pub fn new(s: Setup) -> Rig {
        let mut dev = Device::new(DeviceConfig {
            write_chunking: s.write_chunking,
            ..DeviceConfig::new(ip(DEV_IP), 42)
        });
        let now = Instant(1_000_000);
        let pd = dev.alloc_pd().unwrap();
        let scq = dev.create_cq(s.cq_depth).unwrap();
        let rcq = dev.create_cq(s.cq_depth).unwrap();
        let mem = Arc::new(VecMemory::new(MEM));
        let key = dev.reg_mr(pd, VA, mem.clone(), s.access).unwrap();
        let srq = s.srq.then(|| dev.create_srq(pd, 16, 4, 0).unwrap());
        let (qpn, _) = dev
            .create_qp(&QpInit {
                qp_type: s.qp_type,
                pd,
                send_cq: scq,
                recv_cq: rcq,
                srq,
                cap: QpCap {
                    max_send_wr: 32,
                    max_recv_wr: 32,
                    max_send_sge: 4,
                    max_recv_sge: 4,
                    max_inline_data: 64,
                },
                sq_sig_all: false,
            })
            .unwrap();
        let init = QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: s.access.remote(),
            qkey: QKey(0x1111_1111),
            ..Default::default()
        };
        let m = AttrMask::required(s.qp_type, QpState::Reset, QpState::Init)
            .expect("a bring-up transition");
        dev.modify_qp(now, qpn, &init, m).unwrap();
        let rtr = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: s.mtu,
            dest_qp_num: Qpn::new(PEER_QPN),
            rq_psn: Psn::new(s.peer_psn),
            max_dest_rd_atomic: s.max_rd_atomic,
            min_rnr_timer: s.min_rnr_timer,
            ah_attr: AddressVector::to(ip(PEER_IP)),
            ..Default::default()
        };
        let m = AttrMask::required(s.qp_type, QpState::Init, QpState::Rtr)
            .expect("a bring-up transition");
        dev.modify_qp(now, qpn, &rtr, m).unwrap();
        let rts = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: Psn::new(s.dev_psn),
            timeout: s.timeout,
            retry_cnt: s.retry_cnt,
            rnr_retry: s.rnr_retry,
            max_rd_atomic: s.max_rd_atomic,
            ..Default::default()
        };
        let m = AttrMask::required(s.qp_type, QpState::Rtr, QpState::Rts)
            .expect("a bring-up transition");
        dev.modify_qp(now, qpn, &rts, m).unwrap();
        Rig {
            dev,
            now,
            qpn,
            pd,
            scq,
            rcq,
            mem,
            key,
            mtu: s.mtu,
            peer_psn: Psn::new(s.peer_psn),
            dev_psn: Psn::new(s.dev_psn),
        }
    }

    pub fn advance(&mut self, ns: u64) {
        self.now = self.now.add_ns(ns);
        if self.dev.poll_timeout().is_some_and(|t| t <= self.now) {
            self.dev.handle_timeout(self.now);
        }
    }

    /// Delivers a packet from the peer (ICRC computed like the peer would).
    pub fn deliver(&mut self, p: &PacketRepr<'_>) {
        self.deliver_from(p, ip(PEER_IP));
    }

    pub fn deliver_from(&mut self, p: &PacketRepr<'_>, src: IpAddr) {
        let bytes = encode(p, src, ip(DEV_IP));
        self.deliver_raw(&bytes, src);
    }

    pub fn deliver_raw(&mut self, bytes: &[u8], src: IpAddr) {
        self.deliver_raw_from(bytes, SocketAddr::new(src, 4791));
    }

    /// Delivers a packet from `src` (address and UDP port: the ICRC covers
    /// both, so it is computed for them).
    pub fn deliver_from_port(&mut self, p: &PacketRepr<'_>, src: SocketAddr) {
        let bytes = encode_from(p, src, SocketAddr::new(ip(DEV_IP), 4791));
        self.deliver_raw_from(&bytes, src);
    }

    pub fn deliver_raw_from(&mut self, bytes: &[u8], src: SocketAddr) {
        let meta = RecvMeta {
            src,
            dst: ip(DEV_IP),
            len: bytes.len(),
            traffic_class: 0,
            hop_limit: 64,
        };
        self.dev.handle_datagram(self.now, &meta, bytes);
    }

    /// Everything the device sends now.
    pub fn sent(&mut self) -> Vec<Out> {
        let mut buf = vec![0u8; 8192];
        let mut out = Vec::new();
        while let Some(tx) = self.dev.poll_transmit(self.now, &mut buf) {
            assert_eq!(tx.dst.ip(), ip(PEER_IP));
            let b = &buf[..tx.len];
            // Every packet the device sends has a valid ICRC.
            let d = DatagramRepr::between(
                SocketAddr::new(ip(DEV_IP), 4791),
                SocketAddr::new(ip(PEER_IP), 4791),
            )
            .unwrap();
            let pkt = IbPacket::new_checked(b).expect("device sent a valid packet");
            assert_eq!(
                d.icrc(pkt.icrc_covered()),
                pkt.icrc(),
                "bad ICRC from the device"
            );
            let r = PacketRepr::parse(&pkt).unwrap();
            out.push(Out {
                opcode: r.bth.opcode.0,
                psn: r.bth.psn.value(),
                ack_req: r.bth.ack_req,
                se: r.bth.solicited,
                dest_qp: r.bth.dest_qp.value(),
                aeth: r.aeth.map(|a| (a.syndrome, a.msn.value())),
                reth: r.reth,
                atomic: r.atomic_eth,
                atomic_ack: r.atomic_ack,
                imm: r.imm,
                ieth: r.ieth.map(|k| k.0),
                deth: r.deth,
                feth: r.feth,
                payload: r.payload.to_vec(),
            });
        }
        out
    }

    pub fn post_recv(&mut self, id: u64, off: u64, len: u32) {
        let wr = RecvWr {
            wr_id: id,
            sg_list: vec![Sge::new(VA + off, len, self.key)],
        };
        self.dev.post_recv(self.now, self.qpn, wr).unwrap();
    }

    pub fn post_send(&mut self, mut wr: SendWr) {
        for s in wr.sg_list.iter_mut() {
            if s.lkey == 0 {
                s.lkey = self.key;
            }
        }
        self.dev.post_send(self.now, self.qpn, wr).unwrap();
    }

    pub fn send_cq(&mut self) -> Vec<Wc> {
        poll(&mut self.dev, self.scq)
    }
    pub fn recv_cq(&mut self) -> Vec<Wc> {
        poll(&mut self.dev, self.rcq)
    }
    pub fn state(&self) -> QpState {
        self.dev.qp_state(self.qpn).unwrap()
    }
    pub fn read_mem(&self, off: usize, len: usize) -> Vec<u8> {
        self.mem.snapshot()[off..off + len].to_vec()
    }
    pub fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.dev.poll_event()).collect()
    }

    /// A BTH from the peer to the device's QP.
    pub fn bth(&self, opcode: u8, psn: Psn) -> BthRepr {
        BthRepr {
            ack_req: true,
            ..BthRepr::new(Opcode(opcode), self.qpn, psn)
        }
    }

    /// The next request PSN of the peer, advancing it by `n`.
    pub fn take_psn(&mut self, n: u32) -> Psn {
        let p = self.peer_psn;
        self.peer_psn = p.add(n);
        p
    }

    /// An ACK from the peer for the device's request PSN `psn`.
    pub fn ack(&mut self, psn: Psn, msn: u32) {
        let mut r = PacketRepr::new(self.bth(0x11, psn), &[]);
        r.bth.ack_req = false;
        r.aeth = Some(AethRepr {
            syndrome: Syndrome::ACK,
            msn: Msn::new(msn),
        });
        self.deliver(&r);
    }

    pub fn nak(&mut self, psn: Psn, syndrome: Syndrome) {
        let mut r = PacketRepr::new(self.bth(0x11, psn), &[]);
        r.bth.ack_req = false;
        r.aeth = Some(AethRepr {
            syndrome,
            msn: Msn::new(0),
        });
        self.deliver(&r);
    }
}

/// Encodes a packet from `src` to `dst` with its ICRC.
pub fn encode(p: &PacketRepr<'_>, src: IpAddr, dst: IpAddr) -> Vec<u8> {
    encode_from(p, SocketAddr::new(src, 4791), SocketAddr::new(dst, 4791))
}

/// Encodes a packet between two UDP endpoints with its ICRC.
pub fn encode_from(p: &PacketRepr<'_>, src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    DatagramRepr::between(src, dst)
        .unwrap()
        .udp_payload(p)
        .unwrap()
}

pub fn poll(dev: &mut Device, cq: CqId) -> Vec<Wc> {
    let mut v = Vec::new();
    let mut b = [Wc::EMPTY; 16];
    loop {
        let n = dev.poll_cq(cq, &mut b).unwrap();
        v.extend_from_slice(&b[..n]);
        if n < b.len() {
            return v;
        }
    }
}

pub fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

pub fn ack_syn() -> Syndrome {
    Syndrome::ACK
}

/// A WRITE ONLY from the rig's peer: `data` to `va` under `rkey`.
pub fn write_only(r: &Rig, psn: Psn, va: u64, rkey: u32, data: &[u8]) -> PacketRepr<'static> {
    let data: &'static [u8] = Box::leak(data.to_vec().into_boxed_slice());
    let mut p = PacketRepr::new(r.bth(0x0a, psn), data);
    p.reth = Some(RethRepr {
        va,
        rkey: RKey(rkey),
        dma_len: data.len() as u32,
    });
    p
}

/// A READ REQUEST from the rig's peer: `len` bytes at `va` under `rkey`.
pub fn read_req(r: &Rig, psn: Psn, va: u64, rkey: u32, len: u32) -> PacketRepr<'static> {
    let mut p = PacketRepr::new(r.bth(0x0c, psn), &[]);
    p.reth = Some(RethRepr {
        va,
        rkey: RKey(rkey),
        dma_len: len,
    });
    p
}
