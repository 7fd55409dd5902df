// The body of the `core` fuzz target (fuzz/fuzz_targets/core.rs includes
// this file), of the corpus replay test (crates/proto/tests/fuzz_corpus.rs)
// and the harness of the property tests in crates/proto/tests/bad_input.rs,
// so CI replays the committed corpus through exactly the fuzzed code.
//
// A `Target` is a Device with a connected RC, UC and UD QP, receives posted
// on each, an RDMA WRITE, READ and FETCH_ADD of its own outstanding (so
// responses from the peer have somewhere to land), and five regions with
// different rights. Every datagram fed to it is checked for:
// - no panic;
// - memory: the read-only region and the region of another protection
//   domain never change; the remotely writable region changes only inside
//   a range some fed WRITE's RETH named with its key, in bounds; the atomic
//   region only at an aligned target some fed atomic named with its key;
//   the local region only inside posted receive buffers and the result
//   buffers of the device's own READ and atomic;
// - a datagram the device counts as dropped (bad ICRC, malformed, P_Key,
//   Q_Key, unknown QP, wrong peer, CNP) has no effect: nothing sent, no
//   byte written, no completion, no event;
// - everything the device sends is a well-formed RC packet with a valid
//   ICRC, to the RC peer's address and QP: a response, or one of its own
//   three requests.

use softrdma_proto::*;
use softrdma_wire::ip::{DatagramRepr, IpRepr};
use softrdma_wire::{IbPacket, Operation, PacketRepr, Psn, Qpn, RKey, Transport};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

pub const DEV_IP: &str = "10.0.0.1";
pub const PEER_IP: &str = "10.0.0.2";
pub const OTHER_IP: &str = "10.0.0.3";
/// The peer QPs the RC and UC QPs are connected to.
pub const PEER_RC: u32 = 0x99;
pub const PEER_UC: u32 = 0x9a;
/// The UD QP's Q_Key.
pub const QKEY: u32 = 0x1111_1111;
/// First PSN the device's RC and UC responders expect.
pub const RQ_PSN: u32 = 0x100;
/// First PSN of the device's own requests.
pub const SQ_PSN: u32 = 0x500;
/// Path MTU: small, so that multi-packet messages are short.
pub const MTU: usize = 256;
/// Receive buffers per QP and their size.
pub const RECVS: usize = 4;
pub const RECV_LEN: usize = 1024;

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// What may change a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Nothing: no remote write or atomic right, or another PD.
    Never,
    /// RDMA WRITEs with its key, inside the range their RETH names.
    RemoteWrite,
    /// Atomics with its key, at the aligned 8 bytes their AtomicETH names.
    Atomic,
    /// Receives and the device's own READ / atomic results.
    Local,
}

pub struct Region {
    pub name: &'static str,
    pub key: u32,
    pub va: u64,
    pub access: Access,
    pub rule: Rule,
    pub mem: Arc<VecMemory>,
    /// Protection domain 1 (the QPs') or 2.
    pub pd1: bool,
}

impl Region {
    pub fn len(&self) -> u64 {
        RegionMemory::len(&*self.mem) as u64
    }
    /// Offset of `[va, va+len)` when it lies inside.
    pub fn offset_of(&self, va: u64, len: u64) -> Option<usize> {
        let off = va.checked_sub(self.va)?;
        (off.checked_add(len)? <= self.len()).then_some(off as usize)
    }
}

pub const R_READ: usize = 0;
pub const R_WRITE: usize = 1;
pub const R_ATOMIC: usize = 2;
pub const R_OTHER_PD: usize = 3;
pub const R_LOCAL: usize = 4;

/// Where the device's own READ and FETCH_ADD land, in the local region.
pub const READ_AT: usize = 3 * RECVS * RECV_LEN;
pub const READ_LEN: usize = 300;
pub const FADD_AT: usize = READ_AT + 512;

/// A packet the device sent.
#[derive(Clone, Debug)]
pub struct Sent {
    pub bytes: Vec<u8>,
}

impl Sent {
    pub fn repr(&self) -> PacketRepr<'_> {
        PacketRepr::parse_bytes(&self.bytes).expect("checked when sent")
    }
}

/// What feeding one datagram did.
#[derive(Debug, Default)]
pub struct Effect {
    pub sent: Vec<Sent>,
    pub completions: Vec<Wc>,
    pub events: Vec<Event>,
    /// The device counted the datagram as dropped.
    pub dropped: bool,
    /// Bytes changed, per region.
    pub changed: Vec<usize>,
}

pub struct Target {
    pub dev: Device,
    pub now: Instant,
    pub rc: Qpn,
    pub uc: Qpn,
    pub ud: Qpn,
    pub cqs: Vec<CqId>,
    pub regions: Vec<Region>,
    /// (region, start, end) a fed request could legitimately write.
    allowed: Vec<(usize, usize, usize)>,
    snapshots: Vec<Vec<u8>>,
    buf: Vec<u8>,
    scratch: Vec<u8>,
}

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

impl Target {
    pub fn new() -> Target {
        let now = Instant(1_000_000_000);
        let mut dev = Device::new(DeviceConfig::new(ip(DEV_IP), 3));
        let pd1 = dev.alloc_pd().unwrap();
        let pd2 = dev.alloc_pd().unwrap();
        let lw = Access::LOCAL_WRITE;
        let specs: [(&str, u64, usize, Access, Rule, bool); 5] = [
            (
                "read",
                0x1_0000,
                4096,
                Access::REMOTE_READ,
                Rule::Never,
                true,
            ),
            (
                "write",
                0x1_1000,
                4096,
                lw.with(Access::REMOTE_WRITE).with(Access::REMOTE_READ),
                Rule::RemoteWrite,
                true,
            ),
            (
                "atomic",
                0x1_2000,
                64,
                lw.with(Access::REMOTE_ATOMIC),
                Rule::Atomic,
                true,
            ),
            ("other_pd", 0x1_3000, 4096, Access::ALL, Rule::Never, false),
            ("local", 0x2_0000, 16 * 1024, lw, Rule::Local, true),
        ];
        let mut regions = Vec::new();
        for (i, (name, va, len, access, rule, in_pd1)) in specs.into_iter().enumerate() {
            let mem = Arc::new(VecMemory::new(len));
            mem.fill_from(0, &pattern(i as u8 * 50, len));
            let pd = if in_pd1 { pd1 } else { pd2 };
            let key = dev.reg_mr(pd, va, mem.clone(), access).unwrap();
            regions.push(Region {
                name,
                key,
                va,
                access,
                rule,
                mem,
                pd1: in_pd1,
            });
        }
        let mut cqs = Vec::new();
        let mut qp = |dev: &mut Device, qp_type: QpType| {
            let cq = dev.create_cq(256).unwrap();
            cqs.push(cq);
            dev.create_qp(&QpInit {
                qp_type,
                pd: pd1,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 16,
                    max_recv_wr: 16,
                    max_send_sge: 2,
                    max_recv_sge: 2,
                    max_inline_data: 0,
                },
                sq_sig_all: true,
            })
            .unwrap()
            .0
        };
        let rc = qp(&mut dev, QpType::Rc);
        let uc = qp(&mut dev, QpType::Uc);
        let ud = qp(&mut dev, QpType::Ud);
        let remote = Access::REMOTE_WRITE
            .with(Access::REMOTE_READ)
            .with(Access::REMOTE_ATOMIC);
        for (q, t, peer) in [
            (rc, QpType::Rc, PEER_RC),
            (uc, QpType::Uc, PEER_UC),
            (ud, QpType::Ud, 0),
        ] {
            let attr = QpAttr {
                qp_access_flags: if t == QpType::Uc {
                    Access::REMOTE_WRITE
                } else {
                    remote
                },
                qkey: softrdma_wire::QKey(QKEY),
                path_mtu: Mtu::M256,
                dest_qp_num: Qpn::new(peer),
                rq_psn: Psn::new(RQ_PSN),
                sq_psn: Psn::new(SQ_PSN),
                max_dest_rd_atomic: 4,
                max_rd_atomic: 4,
                min_rnr_timer: 1,
                ah_attr: AddressVector::to(ip(PEER_IP)),
                timeout: 14,
                retry_cnt: 3,
                rnr_retry: 3,
                ..Default::default()
            };
            let base = AttrMask::STATE
                .with(AttrMask::PKEY_INDEX)
                .with(AttrMask::PORT);
            let masks = match t {
                // XRC: RC's masks (the fields an XRC QP has no use for
                // are ignored, as by the kernel).
                QpType::Rc | QpType::XrcSend | QpType::XrcRecv => [
                    base.with(AttrMask::ACCESS_FLAGS),
                    AttrMask::RC_RTR,
                    AttrMask::RC_RTS,
                ],
                QpType::Uc => [
                    base.with(AttrMask::ACCESS_FLAGS),
                    AttrMask::STATE
                        .with(AttrMask::AV)
                        .with(AttrMask::PATH_MTU)
                        .with(AttrMask::DEST_QPN)
                        .with(AttrMask::RQ_PSN),
                    AttrMask::STATE.with(AttrMask::SQ_PSN),
                ],
                QpType::Ud => [
                    base.with(AttrMask::QKEY),
                    AttrMask::STATE,
                    AttrMask::STATE.with(AttrMask::SQ_PSN),
                ],
            };
            for (state, m) in [QpState::Init, QpState::Rtr, QpState::Rts]
                .into_iter()
                .zip(masks)
            {
                let a = QpAttr {
                    qp_state: state,
                    ..attr
                };
                dev.modify_qp(now, q, &a, m).unwrap();
            }
        }
        // Receives: RECVS per QP, RECV_LEN bytes each, in the local region.
        let local = &regions[R_LOCAL];
        let mut allowed = Vec::new();
        for (n, q) in [rc, uc, ud].into_iter().enumerate() {
            for k in 0..RECVS {
                let off = (n * RECVS + k) * RECV_LEN;
                let wr = RecvWr {
                    wr_id: off as u64,
                    sg_list: vec![Sge::new(local.va + off as u64, RECV_LEN as u32, local.key)],
                };
                dev.post_recv(now, q, wr).unwrap();
                allowed.push((R_LOCAL, off, off + RECV_LEN));
            }
        }
        allowed.push((R_LOCAL, READ_AT, READ_AT + READ_LEN));
        allowed.push((R_LOCAL, FADD_AT, FADD_AT + 8));
        // The device's own requests: WRITE (from the read-only region), READ
        // and FETCH_ADD into the local region.
        let mut w = SendWr::new(1, WrOpcode::RdmaWrite);
        w.sg_list = vec![Sge::new(regions[R_READ].va, 64, regions[R_READ].key)];
        w.remote_addr = 0x7000;
        w.rkey = RKey(0x1234);
        dev.post_send(now, rc, w).unwrap();
        let mut r = SendWr::new(2, WrOpcode::RdmaRead);
        r.sg_list = vec![Sge::new(
            local.va + READ_AT as u64,
            READ_LEN as u32,
            local.key,
        )];
        r.remote_addr = 0x8000;
        r.rkey = RKey(0x1234);
        dev.post_send(now, rc, r).unwrap();
        let mut f = SendWr::rdma(
            3,
            WrOpcode::AtomicFetchAndAdd,
            Sge::new(local.va + FADD_AT as u64, 8, local.key),
            0x9000,
            RKey(0x1234),
        );
        f.compare_add = 5;
        dev.post_send(now, rc, f).unwrap();
        let snapshots = regions.iter().map(|r| r.mem.snapshot()).collect();
        let mut t = Target {
            dev,
            now,
            rc,
            uc,
            ud,
            cqs,
            regions,
            allowed,
            snapshots,
            buf: vec![0; device::MIN_TX_BUF],
            scratch: Vec::new(),
        };
        let sent = t.drain();
        assert_eq!(sent.len(), 3, "WRITE, READ (2 PSNs at MTU 256), FETCH_ADD");
        t
    }

    /// The PSN the QP's responder expects next.
    pub fn epsn(&self, q: Qpn) -> Psn {
        self.dev.query_qp(q).unwrap().0.rq_psn
    }

    /// Sets the ICRC of `ib` (BTH through ICRC) for a datagram from `src`.
    pub fn fix_icrc(src: IpAddr, ib: &mut [u8]) {
        if ib.len() < 4 {
            return;
        }
        let Ok(ip_repr) = IpRepr::between(src, ip(DEV_IP), 0) else {
            return;
        };
        let d = DatagramRepr::new(ip_repr, 4791, 4791);
        let n = ib.len();
        let icrc = d.icrc(&ib[..n - 4]);
        ib[n - 4..].copy_from_slice(&icrc.to_le_bytes());
    }

    /// Encodes a packet from `src` with its ICRC.
    pub fn encode(src: IpAddr, p: &PacketRepr<'_>) -> Vec<u8> {
        let mut p = *p;
        p.bth.pad_count = PacketRepr::pad_for(p.payload.len());
        let mut buf = vec![0u8; p.buffer_len()];
        p.emit(&mut buf).expect("a valid Repr");
        Self::fix_icrc(src, &mut buf);
        buf
    }

    /// Widens the set of bytes a valid request could write, from what the
    /// datagram names (whatever the device then decides).
    fn learn(&mut self, data: &[u8]) {
        let Ok(p) = PacketRepr::parse_bytes(data) else {
            return;
        };
        let Some(info) = p.bth.opcode.info() else {
            return;
        };
        if !matches!(info.transport, Transport::Rc | Transport::Uc) {
            return;
        }
        if info.operation == Operation::RdmaWrite {
            if let Some(r) = p.reth {
                let reg = &self.regions[R_WRITE];
                if r.rkey.0 == reg.key {
                    if let Some(off) = reg.offset_of(r.va, r.dma_len as u64) {
                        self.allowed.push((R_WRITE, off, off + r.dma_len as usize));
                    }
                }
            }
        }
        if let Some(a) = p.atomic_eth {
            let reg = &self.regions[R_ATOMIC];
            if a.rkey.0 == reg.key && a.va % 8 == 0 {
                if let Some(off) = reg.offset_of(a.va, 8) {
                    self.allowed.push((R_ATOMIC, off, off + 8));
                }
            }
        }
    }

    fn drain(&mut self) -> Vec<Sent> {
        let mut out = Vec::new();
        while let Some(tx) = self.dev.poll_transmit(self.now, &mut self.buf) {
            let b = &self.buf[..tx.len];
            assert_eq!(tx.dst, SocketAddr::new(ip(PEER_IP), 4791), "destination");
            let pkt = IbPacket::new_checked(b).expect("the device sends valid packets");
            let d = DatagramRepr::new(
                IpRepr::between(ip(DEV_IP), ip(PEER_IP), tx.traffic_class).unwrap(),
                self.dev.config().udp_src_port,
                4791,
            );
            assert_eq!(
                d.icrc(pkt.icrc_covered()),
                pkt.icrc(),
                "ICRC of a sent packet"
            );
            let r = PacketRepr::parse(&pkt).expect("sent packets parse");
            let info = pkt.info();
            assert_eq!(info.transport, Transport::Rc, "only the RC QP sends");
            assert_eq!(r.bth.dest_qp.value(), PEER_RC, "to the RC peer");
            let own_request = matches!(
                info.operation,
                Operation::RdmaWrite | Operation::ReadRequest | Operation::FetchAdd
            );
            assert!(
                info.is_response() || own_request,
                "sent {} which nobody asked for",
                info.name
            );
            out.push(Sent { bytes: b.to_vec() });
        }
        out
    }

    fn drop_count(c: &Counters) -> u64 {
        c.icrc_errors
            + c.malformed
            + c.bad_pkey
            + c.bad_qkey
            + c.unknown_qp
            + c.wrong_peer
            + c.cnp_rcvd
            + c.ud_drops
    }

    /// Lets `ns` pass: timers run (retransmissions, and in the end the
    /// retry limit: error completions).
    pub fn advance(&mut self, ns: u64) -> Effect {
        self.now = self.now.add_ns(ns);
        if self.dev.poll_timeout().is_some_and(|t| t <= self.now) {
            self.dev.handle_timeout(self.now);
        }
        let sent = self.drain();
        let (completions, events) = self.collect();
        let changed = self.check_memory(false);
        Effect {
            sent,
            completions,
            events,
            dropped: false,
            changed,
        }
    }

    /// Completions of every CQ and the events.
    fn collect(&mut self) -> (Vec<Wc>, Vec<Event>) {
        let mut completions = Vec::new();
        for &cq in &self.cqs {
            let mut wcs = [Wc::EMPTY; 16];
            loop {
                let n = self.dev.poll_cq(cq, &mut wcs).unwrap();
                completions.extend_from_slice(&wcs[..n]);
                if n < wcs.len() {
                    break;
                }
            }
        }
        let events = std::iter::from_fn(|| self.dev.poll_event()).collect();
        (completions, events)
    }

    /// Feeds one datagram from `src` and checks every invariant.
    pub fn feed(&mut self, src: IpAddr, data: &[u8]) -> Effect {
        self.learn(data);
        let before = Self::drop_count(&self.dev.counters());
        let meta = RecvMeta {
            src: SocketAddr::new(src, 4791),
            dst: ip(DEV_IP),
            len: data.len(),
            traffic_class: 0,
            hop_limit: 64,
        };
        self.dev.handle_datagram(self.now, &meta, data);
        let sent = self.drain();
        let (completions, events) = self.collect();
        let dropped = Self::drop_count(&self.dev.counters()) > before;
        let changed = self.check_memory(dropped);
        if dropped {
            assert!(sent.is_empty(), "a dropped datagram made the device send");
            assert!(completions.is_empty(), "a dropped datagram completed work");
            assert!(events.is_empty(), "a dropped datagram raised {events:?}");
        }
        Effect {
            sent,
            completions,
            events,
            dropped,
            changed,
        }
    }

    /// Compares every region with its last snapshot: changes only where
    /// allowed, none at all when `frozen`. Returns the bytes changed.
    fn check_memory(&mut self, frozen: bool) -> Vec<usize> {
        let mut changed = Vec::new();
        for (i, r) in self.regions.iter().enumerate() {
            let old = &self.snapshots[i];
            self.scratch.resize(old.len(), 0);
            r.mem
                .read(0, &mut self.scratch)
                .expect("vector memory never faults");
            if self.scratch == *old {
                changed.push(0);
                continue;
            }
            let now = self.scratch.clone();
            let mut n = 0;
            for (at, (a, b)) in old.iter().zip(&now).enumerate() {
                if a == b {
                    continue;
                }
                n += 1;
                assert!(
                    !frozen,
                    "region {} changed at {at} by a dropped datagram",
                    r.name
                );
                let ok = r.rule != Rule::Never
                    && self
                        .allowed
                        .iter()
                        .any(|&(reg, s, e)| reg == i && (s..e).contains(&at));
                assert!(
                    ok,
                    "region {} ({:?}) changed at offset {at}, where no request could write",
                    r.name, r.rule
                );
            }
            changed.push(n);
            self.snapshots[i] = now;
        }
        changed
    }
}

/// The fuzz input: a sequence of records `[h, k, len_lo, len_hi, bytes...]`,
/// one datagram each (BTH through ICRC).
///
/// `h` bits 0–1: source (0, 1: the peer; 2: another address; 3: the peer
/// over IPv6, a family the device does not speak); bit 2: recompute the
/// ICRC; bit 3: let 50 ms pass first (timers); bits 4–5: rewrite the
/// destination QP (0: keep, 1: RC, 2: UC, 3: UD); bit 6: rewrite the PSN to
/// what that QP expects; bit 7: rewrite the P_Key to the default.
///
/// `k` bits 0–2: 1 to 5 write the key of region `k - 1` into the RETH,
/// AtomicETH and IETH (whichever the opcode has); bit 3: rebase the VA of
/// the RETH / AtomicETH on that region (or the writable one): its low 16
/// bits become a signed offset from the region's start, or with bit 4 from
/// where an access of the RETH's length (8 for an atomic) would end at the
/// region's end.
///
/// Without these rewrites a mutated packet would almost never name one of
/// the device's QPs, PSNs or 32-bit keys, and would stop at the first check.
pub fn check(data: &[u8]) {
    let mut t = Target::new();
    let mut rest = data;
    let mut records = 0;
    while rest.len() >= 4 && records < 64 {
        let (h, k) = (rest[0], rest[1]);
        let len = (u16::from_le_bytes([rest[2], rest[3]]) as usize).min(rest.len() - 4);
        let mut pkt = rest[4..4 + len].to_vec();
        rest = &rest[4 + len..];
        records += 1;
        let src = match h & 3 {
            0 | 1 => ip(PEER_IP),
            2 => ip(OTHER_IP),
            _ => ip("2001:db8::2"),
        };
        if h & 8 != 0 {
            t.advance(50_000_000);
        }
        let q = match (h >> 4) & 3 {
            1 => Some(t.rc),
            2 => Some(t.uc),
            3 => Some(t.ud),
            _ => None,
        };
        if pkt.len() >= 12 {
            if let Some(q) = q {
                pkt[5..8].copy_from_slice(&q.value().to_be_bytes()[1..]);
                if h & 0x40 != 0 {
                    let psn = t.epsn(q).value();
                    pkt[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
                }
            }
            if h & 0x80 != 0 {
                pkt[2..4].copy_from_slice(&[0xff, 0xff]);
            }
            rewrite_keys(&t, &mut pkt, k);
        }
        if h & 4 != 0 {
            Target::fix_icrc(src, &mut pkt);
        }
        t.feed(src, &pkt);
    }
    t.advance(10_000_000_000);
}

/// The `k` rewrites of [`check`].
fn rewrite_keys(t: &Target, pkt: &mut [u8], k: u8) {
    use softrdma_wire::Headers;
    let Some(info) = softrdma_wire::Opcode(pkt[0]).info() else {
        return;
    };
    let region = match k & 7 {
        n @ 1..=5 => Some(&t.regions[n as usize - 1]),
        _ => None,
    };
    let n = pkt.len();
    // (offset of the header, offset of the key in it, VA in it)
    for (which, key_at, va) in [
        (Headers::RETH, 8, true),
        (Headers::ATOMIC_ETH, 8, true),
        (Headers::IETH, 0, false),
    ] {
        let Some(o) = info.headers.offset_of(which).map(|o| 12 + o) else {
            continue;
        };
        if let Some(r) = region {
            if o + key_at + 4 <= n {
                pkt[o + key_at..o + key_at + 4].copy_from_slice(&r.key.to_be_bytes());
            }
        }
        if va && k & 8 != 0 && o + 8 <= n {
            let r = region.unwrap_or(&t.regions[R_WRITE]);
            let mut base = r.va;
            if k & 0x10 != 0 {
                let len = if which == Headers::RETH && o + 16 <= n {
                    u32::from_be_bytes([pkt[o + 12], pkt[o + 13], pkt[o + 14], pkt[o + 15]]) as u64
                } else {
                    8
                };
                base = base.wrapping_add(r.len()).wrapping_sub(len);
            }
            let off = i16::from_be_bytes([pkt[o + 6], pkt[o + 7]]) as i64;
            pkt[o..o + 8].copy_from_slice(&base.wrapping_add_signed(off).to_be_bytes());
        }
    }
}

/// A BTH from the peer.
pub fn bth(opcode: u8, dest: Qpn, psn: u32) -> softrdma_wire::BthRepr {
    softrdma_wire::BthRepr {
        opcode: softrdma_wire::Opcode(opcode),
        solicited: false,
        mig_req: false,
        pad_count: 0,
        pkey: softrdma_wire::PKey::DEFAULT,
        fecn: false,
        becn: false,
        dest_qp: dest,
        ack_req: true,
        psn: Psn::new(psn),
    }
}

/// Valid packets from the peer for every path of a fresh [`Target`]: RC
/// WRITE, SEND (with immediate, with invalidate), READ and atomic requests
/// at the expected PSNs, ACKs, NAKs and responses for the device's own
/// requests, UC SEND and WRITE, UD SEND, a CNP. Each is valid on its own
/// against a fresh target (multi-packet messages in order).
pub fn valid_packets(t: &Target) -> Vec<(&'static str, Vec<u8>)> {
    use softrdma_wire::{AethRepr, AtomicEthRepr, DethRepr, Msn, QKey, RethRepr, Syndrome};
    let peer = ip(PEER_IP);
    let w = &t.regions[R_WRITE];
    let a = &t.regions[R_ATOMIC];
    let r = &t.regions[R_READ];
    let data = pattern(9, 600);
    let mut out: Vec<(&'static str, Vec<u8>)> = Vec::new();
    let mut add =
        |name: &'static str, p: PacketRepr<'_>| out.push((name, Target::encode(peer, &p)));
    let reth = |va: u64, key: u32, len: u32| {
        Some(RethRepr {
            va,
            rkey: RKey(key),
            dma_len: len,
        })
    };
    // RC WRITE ONLY, and FIRST/MIDDLE/LAST of 600 bytes.
    let mut p = PacketRepr::new(bth(0x0a, t.rc, RQ_PSN), &data[..64]);
    p.reth = reth(w.va + 128, w.key, 64);
    add("rc_write_only", p);
    let mut p = PacketRepr::new(bth(0x06, t.rc, RQ_PSN), &data[..256]);
    p.bth.ack_req = false;
    p.reth = reth(w.va + 1000, w.key, 600);
    add("rc_write_first", p);
    let mut p = PacketRepr::new(bth(0x07, t.rc, RQ_PSN + 1), &data[256..512]);
    p.bth.ack_req = false;
    add("rc_write_middle", p);
    add(
        "rc_write_last",
        PacketRepr::new(bth(0x08, t.rc, RQ_PSN + 2), &data[512..600]),
    );
    let mut p = PacketRepr::new(bth(0x0b, t.rc, RQ_PSN), &data[..40]);
    p.reth = reth(w.va, w.key, 40);
    p.imm = Some(0xdead_beef);
    add("rc_write_only_imm", p);
    // RC SENDs.
    add(
        "rc_send_only",
        PacketRepr::new(bth(0x04, t.rc, RQ_PSN), &data[..100]),
    );
    let mut p = PacketRepr::new(bth(0x00, t.rc, RQ_PSN), &data[..256]);
    p.bth.ack_req = false;
    add("rc_send_first", p);
    let mut p = PacketRepr::new(bth(0x01, t.rc, RQ_PSN + 1), &data[256..512]);
    p.bth.ack_req = false;
    add("rc_send_middle", p);
    let mut p = PacketRepr::new(bth(0x03, t.rc, RQ_PSN + 2), &data[512..513]);
    p.imm = Some(7);
    add("rc_send_last_imm", p);
    let mut p = PacketRepr::new(bth(0x17, t.rc, RQ_PSN), &data[..13]);
    p.ieth = Some(RKey(w.key));
    add("rc_send_only_inv", p);
    // RC READ and atomics.
    let mut p = PacketRepr::new(bth(0x0c, t.rc, RQ_PSN), &[]);
    p.reth = reth(r.va + 100, r.key, 300);
    add("rc_read", p);
    let mut p = PacketRepr::new(bth(0x14, t.rc, RQ_PSN), &[]);
    p.atomic_eth = Some(AtomicEthRepr {
        va: a.va + 8,
        rkey: RKey(a.key),
        swap_add: 3,
        compare: 0,
    });
    add("rc_fetch_add", p);
    let mut p = PacketRepr::new(bth(0x13, t.rc, RQ_PSN), &[]);
    p.atomic_eth = Some(AtomicEthRepr {
        va: a.va + 16,
        rkey: RKey(a.key),
        swap_add: 1,
        compare: 2,
    });
    add("rc_compare_swap", p);
    // Responses to the device's WRITE (SQ_PSN), READ (+1, +2), FETCH_ADD (+3).
    let aeth = |syndrome, msn| {
        Some(AethRepr {
            syndrome,
            msn: Msn::new(msn),
        })
    };
    let mut p = PacketRepr::new(bth(0x11, t.rc, SQ_PSN), &[]);
    p.bth.ack_req = false;
    p.aeth = aeth(Syndrome::ACK, 1);
    add("ack", p);
    let mut p = PacketRepr::new(bth(0x11, t.rc, SQ_PSN), &[]);
    p.aeth = aeth(Syndrome::Nak(softrdma_wire::NakCode::PsnSequenceError), 0);
    add("nak_seq", p);
    let mut p = PacketRepr::new(bth(0x11, t.rc, SQ_PSN), &[]);
    p.aeth = aeth(Syndrome::RnrNak { timer: 1 }, 0);
    add("rnr_nak", p);
    let mut p = PacketRepr::new(bth(0x0d, t.rc, SQ_PSN + 1), &data[..256]);
    p.aeth = aeth(Syndrome::ACK, 2);
    add("read_resp_first", p);
    let mut p = PacketRepr::new(bth(0x0f, t.rc, SQ_PSN + 2), &data[256..300]);
    p.aeth = aeth(Syndrome::ACK, 2);
    add("read_resp_last", p);
    let mut p = PacketRepr::new(bth(0x12, t.rc, SQ_PSN + 3), &[]);
    p.aeth = aeth(Syndrome::ACK, 3);
    p.atomic_ack = Some(0x1122_3344_5566_7788);
    add("atomic_ack", p);
    // UC and UD.
    add(
        "uc_send_only",
        PacketRepr::new(bth(0x24, t.uc, RQ_PSN), &data[..64]),
    );
    let mut p = PacketRepr::new(bth(0x2a, t.uc, RQ_PSN), &data[..64]);
    p.reth = reth(w.va + 2048, w.key, 64);
    add("uc_write_only", p);
    let mut p = PacketRepr::new(bth(0x64, t.ud, 0x42), &data[..200]);
    p.deth = Some(DethRepr {
        qkey: QKey(QKEY),
        src_qp: Qpn::new(0x77),
    });
    add("ud_send_only", p);
    let mut p = PacketRepr::new(bth(0x65, t.ud, 0x43), &data[..8]);
    p.deth = Some(DethRepr {
        qkey: QKey(QKEY),
        src_qp: Qpn::new(0x77),
    });
    p.imm = Some(0x0102_0304);
    add("ud_send_only_imm", p);
    // A congestion notification.
    add("cnp", PacketRepr::new(bth(0x81, t.rc, 0), &[]));
    out
}
