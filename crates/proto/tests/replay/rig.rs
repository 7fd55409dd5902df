//! One replay: the capture's requests and responses fed to the device under
//! test, everything it sends compared with what rxe sent.

use super::*;

pub(crate) fn run(case: Case) -> Outcome {
    let frames = roce_frames(case.file);
    assert!(!frames.is_empty(), "{}: no RoCE frames", case.file);
    let a_ip: IpAddr = case.requester.parse().unwrap();
    let pkts: Vec<Pkt> = frames.iter().map(Pkt::new).collect();
    assert!(
        pkts.iter().all(|p| p.dqp() != 1),
        "{}: CM MADs on QP1 are not replayed",
        case.file
    );
    let b_ip = pkts
        .iter()
        .find(|p| p.f.src == a_ip && p.info.is_request())
        .map(|p| p.f.dst)
        .expect("requests from the requester");
    let is_req = |p: &Pkt| p.f.src == a_ip && p.f.dst == b_ip && p.info.is_request();
    let is_resp = |p: &Pkt| p.f.src == b_ip && p.f.dst == a_ip && p.info.is_response();
    let reqs: Vec<&Pkt> = pkts.iter().filter(|p| is_req(p)).collect();
    let transport = reqs[0].info.transport;
    assert!(reqs.iter().all(|p| p.info.transport == transport));
    let qp_type = match transport {
        Transport::Rc => QpType::Rc,
        Transport::Uc => QpType::Uc,
        Transport::Ud => QpType::Ud,
        t => panic!("{}: transport {t:?}", case.file),
    };

    // Responder QPNs in order of appearance, and each one's requester QPN:
    // the destination of the first response whose PSN one of its requests
    // carried (the most recently active QP wins when PSNs repeat).
    let mut bs: Vec<u32> = Vec::new();
    for p in &reqs {
        if !bs.contains(&p.dqp()) {
            bs.push(p.dqp());
        }
    }
    let mut a_of: BTreeMap<u32, u32> = BTreeMap::new();
    let mut b_of: BTreeMap<u32, u32> = BTreeMap::new();
    {
        let mut seen: HashMap<u32, (HashSet<u32>, usize)> = HashMap::new();
        for (i, p) in pkts.iter().enumerate() {
            if is_req(p) {
                let e = seen.entry(p.dqp()).or_default();
                e.0.insert(p.psn().value());
                e.1 = i;
            } else if is_resp(p) && !b_of.contains_key(&p.dqp()) {
                let b = seen
                    .iter()
                    .filter(|(_, (psns, _))| psns.contains(&p.psn().value()))
                    .max_by_key(|(_, (_, last))| *last)
                    .map(|(b, _)| *b);
                if let Some(b) = b {
                    assert!(
                        !a_of.contains_key(&b),
                        "{}: QP {b:#x} answered twice",
                        case.file
                    );
                    a_of.insert(b, p.dqp());
                    b_of.insert(p.dqp(), b);
                }
            }
        }
    }
    let resps: Vec<&Pkt> = pkts.iter().filter(|p| is_resp(p)).collect();
    for p in &resps {
        assert!(
            b_of.contains_key(&p.dqp()),
            "{}: response to unknown QP",
            case.file
        );
    }
    for &b in &bs {
        // UC and UD QPs are never answered; the peer QPN only matters for
        // what the QP sends, and nothing is sent here.
        a_of.entry(b).or_insert(b);
    }

    // Path MTU: the payload of FIRST and MIDDLE packets.
    let mtu = pkts
        .iter()
        .filter(|p| matches!(p.info.position, Position::First | Position::Middle))
        .map(|p| p.r.payload.len() as u32)
        .max()
        .unwrap_or(1024);
    assert!(mtu == 1024 || mtu == 4096, "{}: MTU {mtu}", case.file);
    assert_eq!(mtu == 4096, case.file.starts_with("mtu4k"), "{}", case.file);

    // Answers by (requester QPN, PSN).
    let mut rnr_naks: HashMap<(u32, u32), usize> = HashMap::new();
    let mut rnr_timer: HashMap<u32, u8> = HashMap::new();
    let mut fatal_naks: HashSet<(u32, u32)> = HashSet::new();
    let mut first_seq_nak: HashMap<u32, Psn> = HashMap::new();
    let mut read_data: HashMap<(u32, u32), &[u8]> = HashMap::new();
    let mut atomic_orig: HashMap<(u32, u32), u64> = HashMap::new();
    for p in &resps {
        let key = (p.dqp(), p.psn().value());
        match p.r.aeth.map(|a| a.syndrome) {
            Some(Syndrome::RnrNak { timer }) => {
                *rnr_naks.entry(key).or_default() += 1;
                rnr_timer.entry(p.dqp()).or_insert(timer);
            }
            Some(Syndrome::Nak(NakCode::PsnSequenceError)) => {
                first_seq_nak.entry(p.dqp()).or_insert(p.psn());
            }
            Some(Syndrome::Nak(_)) => {
                fatal_naks.insert(key);
            }
            _ => {}
        }
        if p.info.operation == Operation::ReadResponse {
            read_data.entry(key).or_insert(p.r.payload);
        }
        if let Some(orig) = p.r.atomic_ack {
            atomic_orig.entry(key).or_insert(orig);
        }
    }
    let rq_psn: BTreeMap<u32, Psn> = bs
        .iter()
        .map(|&b| {
            let first = reqs.iter().find(|p| p.dqp() == b).unwrap().psn();
            let psn = match first_seq_nak.get(&a_of[&b]) {
                Some(&n) if n.before(first) => n,
                _ => first,
            };
            (b, psn)
        })
        .collect();

    // Regions: every access rxe accepted, by R_Key.
    let mut ranges: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    let mut first_va: HashMap<u32, u64> = HashMap::new();
    for p in &reqs {
        let (key, va, len) = if let Some(r) = p.r.reth {
            (r.rkey.0, r.va, r.dma_len as u64)
        } else if let Some(a) = p.r.atomic_eth {
            (a.rkey.0, a.va, 8)
        } else {
            continue;
        };
        first_va.entry(key).or_insert(va);
        if len == 0 || fatal_naks.contains(&(a_of[&p.dqp()], p.psn().value())) {
            continue;
        }
        let e = ranges.entry(key).or_insert((va, va + len));
        e.0 = e.0.min(va);
        e.1 = e.1.max(va + len);
    }
    for x in case.extra_mrs {
        let anchor = first_va[&x.anchor_key];
        let lo = anchor.wrapping_add_signed(x.offset);
        ranges.insert(x.key, (lo, lo + x.len as u64));
    }

    let mut cfg = DeviceConfig::new(b_ip, 7);
    cfg.udp_src_port = DEV_PORT;
    cfg.port_mtu = mtu;
    let mut dev = Device::new(cfg);
    let pd = dev.alloc_pd().unwrap();
    let mut regions: BTreeMap<u32, (u64, Arc<VecMemory>)> = BTreeMap::new();
    for (&key, &(lo, hi)) in &ranges {
        let mem = Arc::new(VecMemory::new((hi - lo) as usize));
        dev.reg_mr_with_key(pd, lo, mem.clone(), ALL_REMOTE, key)
            .unwrap();
        regions.insert(key, (lo, mem));
    }
    // Pre-fill: what rxe's READ responses returned and atomic originals.
    let region_at = |key: u32, va: u64| -> Option<(Arc<VecMemory>, usize)> {
        let (lo, mem) = regions.get(&key)?;
        Some((mem.clone(), va.checked_sub(*lo)? as usize))
    };
    let mut atomic_done: HashSet<(u32, u64)> = HashSet::new();
    for p in &reqs {
        let a = a_of[&p.dqp()];
        if p.info.operation == Operation::ReadRequest {
            let r = p.r.reth.unwrap();
            let n = (r.dma_len as u64).div_ceil(mtu as u64).max(1) as u32;
            for k in 0..n {
                if let Some(data) = read_data.get(&(a, p.psn().add(k).value())) {
                    if let Some((mem, off)) = region_at(r.rkey.0, r.va + k as u64 * mtu as u64) {
                        mem.fill_from(off, data);
                    }
                }
            }
        }
        if let Some(ae) = p.r.atomic_eth {
            if let Some(&orig) = atomic_orig.get(&(a, p.psn().value())) {
                if atomic_done.insert((ae.rkey.0, ae.va)) {
                    let (mem, off) = region_at(ae.rkey.0, ae.va).unwrap();
                    mem.fill_from(off, &orig.to_ne_bytes());
                }
            }
        }
    }
    let mut shadow: BTreeMap<u32, Vec<u8>> = regions
        .iter()
        .map(|(&k, (_, m))| (k, m.snapshot()))
        .collect();

    // Receive buffers: one slot per request that may consume a WQE.
    let slots = reqs.iter().filter(|p| p.needs_wqe()).count().max(1);
    let recv_mem = Arc::new(VecMemory::new(slots * RECV_SLOT as usize));
    let recv_key = dev
        .reg_mr(pd, RECV_VA, recv_mem.clone(), Access::LOCAL_WRITE)
        .unwrap();

    // The QPs.
    let now0 = Instant(frames[0].ts_ns);
    let mut cqs: BTreeMap<u32, (CqId, CqId)> = BTreeMap::new();
    let first_resp = |b: u32| resps.iter().find(|p| b_of[&p.dqp()] == b);
    for &b in &bs {
        let scq = dev.create_cq(1 << 16).unwrap();
        let rcq = dev.create_cq(1 << 16).unwrap();
        cqs.insert(b, (scq, rcq));
        let init = QpInit {
            qp_type,
            pd,
            send_cq: scq,
            recv_cq: rcq,
            srq: None,
            cap: QpCap {
                max_send_wr: 16,
                max_recv_wr: limits::MAX_QP_WR,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        };
        let qpn = softrdma_wire::Qpn::new(b);
        dev.create_qp_with_qpn(&init, qpn).unwrap();
        // The same number again is refused.
        assert_eq!(dev.create_qp_with_qpn(&init, qpn), Err(VerbsError::Busy));
        let mut access = Access::REMOTE_WRITE
            .with(Access::REMOTE_READ)
            .with(Access::REMOTE_ATOMIC);
        if case.no_atomic.contains(&b) {
            access = Access::REMOTE_WRITE.with(Access::REMOTE_READ);
        }
        let (tclass, hop) = first_resp(b)
            .map(|p| (p.f.tclass, p.f.hop))
            .unwrap_or((0, 64));
        let mut av = AddressVector::to(a_ip);
        av.traffic_class = tclass;
        av.hop_limit = hop;
        let qkey = reqs
            .iter()
            .find(|p| p.dqp() == b)
            .and_then(|p| p.r.deth)
            .map_or(softrdma_wire::QKey(0), |d| d.qkey);
        let attr = QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: access,
            qkey,
            path_mtu: Mtu::from_bytes_floor(mtu).unwrap(),
            dest_qp_num: softrdma_wire::Qpn::new(a_of[&b]),
            rq_psn: rq_psn[&b],
            sq_psn: Psn::new(0x1234),
            max_dest_rd_atomic: 16,
            max_rd_atomic: 16,
            min_rnr_timer: rnr_timer.get(&a_of[&b]).copied().unwrap_or(12),
            ah_attr: av,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            ..Default::default()
        };
        let [m_init, m_rtr, m_rts] = [
            (QpState::Reset, QpState::Init),
            (QpState::Init, QpState::Rtr),
            (QpState::Rtr, QpState::Rts),
        ]
        .map(|(from, to)| AttrMask::required(qp_type, from, to).unwrap());
        for (state, mask) in [
            (QpState::Init, m_init),
            (QpState::Rtr, m_rtr),
            (QpState::Rts, m_rts),
        ] {
            let a = QpAttr {
                qp_state: state,
                ..attr
            };
            dev.modify_qp(now0, qpn, &a, mask).unwrap();
        }
    }

    // Feed the requests.
    let mut rnr_left = rnr_naks.clone();
    let mut outstanding: BTreeMap<u32, usize> = BTreeMap::new();
    let mut next_slot = 0usize;
    let mut sent: BTreeMap<u32, Vec<(usize, Vec<u8>)>> = BTreeMap::new();
    let mut recv_wcs: BTreeMap<u32, Vec<Wc>> = BTreeMap::new();
    let mut events = Vec::new();
    let mut buf = vec![0u8; device::MIN_TX_BUF];
    let mut now = now0;
    let mut fed_v4 = 0usize;
    let mut fed_v4_nonzero_id = 0usize;
    // Batched: READ/atomic requests fed since the core's output was last
    // taken. The requester of the capture never had more than
    // max_dest_rd_atomic (16) outstanding; without draining, their
    // responses would pile up beyond that and the core would refuse the
    // next one (too_many_rd_atomic), which a real requester cannot cause.
    let mut rd_atomic_fed: BTreeMap<u32, usize> = BTreeMap::new();
    for p in &reqs {
        let b = p.dqp();
        let qpn = softrdma_wire::Qpn::new(b);
        let t = Instant(p.f.ts_ns).max(now);
        now = t;
        let rd_atomic = matches!(
            p.info.operation,
            Operation::ReadRequest | Operation::CompareSwap | Operation::FetchAdd
        );
        if case.batched && rd_atomic {
            let n = rd_atomic_fed.entry(b).or_default();
            if *n == 16 {
                let at = (case.file, p.f.index);
                drain(&mut dev, now, &mut buf, (a_ip, b_ip), &b_of, at, &mut sent);
                rd_atomic_fed.clear();
            }
            *rd_atomic_fed.entry(b).or_default() += 1;
        }
        if dev.poll_timeout().is_some_and(|d| d <= now) {
            dev.handle_timeout(now);
        }
        if p.needs_wqe() && outstanding.get(&b).copied().unwrap_or(0) == 0 {
            let expected = dev.query_qp(qpn).unwrap().0.rq_psn;
            let post = match qp_type {
                QpType::Rc if p.psn() != expected => false,
                QpType::Rc => match rnr_left.get_mut(&(a_of[&b], p.psn().value())) {
                    Some(n) if *n > 0 => {
                        *n -= 1;
                        false
                    }
                    _ => true,
                },
                _ => true,
            };
            if post {
                let len = case
                    .recv_len
                    .iter()
                    .find(|(q, _)| *q == b)
                    .map_or(RECV_SLOT, |(_, l)| *l);
                let slot = next_slot as u64;
                next_slot += 1;
                let wr = RecvWr {
                    wr_id: slot,
                    sg_list: vec![Sge::new(RECV_VA + slot * RECV_SLOT as u64, len, recv_key)],
                };
                dev.post_recv(now, qpn, wr).unwrap();
                *outstanding.entry(b).or_default() += 1;
            }
        }
        let meta = RecvMeta {
            src: SocketAddr::new(p.f.src, p.f.sport),
            dst: p.f.dst,
            len: p.f.payload.len(),
            traffic_class: p.f.tclass,
            hop_limit: p.f.hop,
        };
        if let Some(id) = p.f.ip_id {
            fed_v4 += 1;
            fed_v4_nonzero_id += (id != 0) as usize;
        }
        dev.handle_datagram(now, &meta, &p.f.payload);
        if !case.batched {
            let at = (case.file, p.f.index);
            drain(&mut dev, now, &mut buf, (a_ip, b_ip), &b_of, at, &mut sent);
        }
        for (&b, &(scq, rcq)) in &cqs {
            let wcs = poll(&mut dev, rcq);
            *outstanding.entry(b).or_default() -= wcs.len();
            recv_wcs.entry(b).or_default().extend(wcs);
            assert!(
                poll(&mut dev, scq).is_empty(),
                "{}: send completion",
                case.file
            );
        }
        events.extend(std::iter::from_fn(|| dev.poll_event()));
    }
    if case.batched {
        let at = (case.file, reqs.last().unwrap().f.index);
        drain(&mut dev, now, &mut buf, (a_ip, b_ip), &b_of, at, &mut sent);
    }
    // Long after the capture: nothing more goes out (a responder has no timers).
    let later = now.add_ns(10_000_000_000);
    if dev.poll_timeout().is_some_and(|d| d <= later) {
        dev.handle_timeout(later);
    }
    assert!(dev.poll_transmit(later, &mut buf).is_none());

    // Responses, per QP.
    let mut compared = 0;
    let mut extra = BTreeMap::new();
    for &b in &bs {
        let a = a_of[&b];
        let want: Vec<&Pkt> = resps.iter().filter(|p| p.dqp() == a).copied().collect();
        let got = sent.remove(&b).unwrap_or_default();
        let ctx = format!("{} QP {b:#x}", case.file);
        if case.batched {
            // Fed without polling: consecutive ACKs merge in the core's
            // queue, rxe sends one per request. The core's responses are
            // rxe's minus ACKs a later ACK covers; the last ones agree.
            let mut i = 0;
            for (k, g) in got.iter().enumerate() {
                while i < want.len() && want[i].transport() != g.1.as_slice() {
                    let w = want[i];
                    let plain_ack = w.info.operation == Operation::Acknowledge
                        && matches!(w.r.aeth.map(|a| a.syndrome), Some(Syndrome::Ack { .. }));
                    assert!(
                        plain_ack,
                        "{ctx}: batched: rxe's response {i} (frame {}) {} missing before the \
                         core's {k} {}",
                        w.f.index + 1,
                        line(w.transport()),
                        line(&g.1)
                    );
                    i += 1;
                }
                assert!(
                    i < want.len(),
                    "{ctx}: batched: core's {k} {} not rxe's",
                    line(&g.1)
                );
                i += 1;
            }
            assert_eq!(
                i,
                want.len(),
                "{ctx}: batched: rxe's last responses missing"
            );
            extra.insert(b, 0);
        } else if case.max_extra == 0 {
            for (i, (w, g)) in want.iter().zip(&got).enumerate() {
                assert!(
                    w.transport() == g.1.as_slice(),
                    "{ctx}: response {i} differs\n  rxe  (frame {}): {}\n  core (after frame {}): {}",
                    w.f.index + 1,
                    line(w.transport()),
                    g.0 + 1,
                    line(&g.1)
                );
            }
            assert_eq!(
                got.len(),
                want.len(),
                "{ctx}: number of responses; core's extra/missing: {:?}",
                if got.len() > want.len() {
                    got[want.len()..]
                        .iter()
                        .map(|g| line(&g.1))
                        .collect::<Vec<_>>()
                } else {
                    want[got.len()..]
                        .iter()
                        .map(|w| line(w.transport()))
                        .collect()
                }
            );
            extra.insert(b, 0);
        } else {
            // rxe's responses are a subsequence of the core's.
            let mut j = 0;
            for (i, w) in want.iter().enumerate() {
                let start = j;
                while j < got.len() && got[j].1 != w.transport() {
                    j += 1;
                }
                assert!(
                    j < got.len(),
                    "{ctx}: rxe's response {i} (frame {}) {} not in the core's output after its \
                     response {start} {}",
                    w.f.index + 1,
                    line(w.transport()),
                    got.get(start)
                        .map_or(String::from("(none)"), |g| line(&g.1))
                );
                j += 1;
            }
            let n = got.len() - want.len();
            eprintln!(
                "{ctx}: {} responses, rxe's {} all among them in order, {n} more",
                got.len(),
                want.len()
            );
            assert!(
                n <= case.max_extra,
                "{ctx}: {n} responses beyond rxe's (at most {})",
                case.max_extra
            );
            extra.insert(b, n);
        }
        compared += want.len();
    }

    // ICRC: IPv4 requests carry rxe's non-zero identification.
    let c = dev.counters();
    assert_eq!(c.icrc_errors, 0, "{}", case.file);
    assert_eq!(c.malformed, 0, "{}", case.file);
    assert_eq!(c.wrong_peer, 0, "{}", case.file);
    assert_eq!(
        c.icrc_ip_id_inferred as usize, fed_v4_nonzero_id,
        "{}",
        case.file
    );
    if fed_v4 > 0 {
        assert_eq!(
            fed_v4_nonzero_id, fed_v4,
            "{}: rxe's IP ID is never 0",
            case.file
        );
    }

    // Delivery and memory: the messages in PSN order (UD: capture order).
    let mut expect_recv: BTreeMap<u32, Vec<ExpRecv>> = BTreeMap::new();
    for &b in &bs {
        let a = a_of[&b];
        let exp = expect_recv.entry(b).or_default();
        if qp_type == QpType::Ud {
            for p in reqs.iter().filter(|p| p.dqp() == b) {
                exp.push(ExpRecv {
                    opcode: WcOpcode::Recv,
                    data: Some(p.r.payload.to_vec()),
                    byte_len: 40 + p.r.payload.len() as u32,
                    imm: p.r.imm,
                    inv: None,
                    src_qp: p.r.deth.map(|d| d.src_qp.value()),
                    frame: Some(p.f),
                    se: p.r.bth.solicited,
                });
            }
            continue;
        }
        let mut by_psn: HashMap<u32, &Pkt> = HashMap::new();
        for p in reqs.iter().filter(|p| p.dqp() == b) {
            by_psn.entry(p.psn().value()).or_insert(p);
        }
        let mut psn = rq_psn[&b];
        let mut send: Option<Vec<u8>> = None;
        let mut write: Option<(u32, u64, u32)> = None; // key, va, total
        let mut woff = 0u64;
        while let Some(p) = by_psn.get(&psn.value()) {
            if fatal_naks.contains(&(a, psn.value())) {
                break;
            }
            let mut step = 1;
            match p.info.operation {
                Operation::Send => {
                    let data = send.get_or_insert_with(Vec::new);
                    data.extend_from_slice(p.r.payload);
                    if p.info.position.ends() {
                        let data = send.take().unwrap();
                        exp.push(ExpRecv {
                            opcode: WcOpcode::Recv,
                            byte_len: data.len() as u32,
                            data: Some(data),
                            imm: p.r.imm,
                            inv: p.r.ieth.map(|k| k.0),
                            src_qp: None,
                            frame: None,
                            se: p.r.bth.solicited,
                        });
                    }
                }
                Operation::RdmaWrite => {
                    if let Some(r) = p.r.reth {
                        write = Some((r.rkey.0, r.va, r.dma_len));
                        woff = 0;
                    }
                    let (key, va, total) = write.unwrap();
                    if !p.r.payload.is_empty() {
                        let lo = ranges[&key].0;
                        let at = (va + woff - lo) as usize;
                        shadow.get_mut(&key).unwrap()[at..at + p.r.payload.len()]
                            .copy_from_slice(p.r.payload);
                    }
                    woff += p.r.payload.len() as u64;
                    if p.info.position.ends() && p.info.immediate() {
                        exp.push(ExpRecv {
                            opcode: WcOpcode::RecvRdmaWithImm,
                            byte_len: total,
                            data: None,
                            imm: p.r.imm,
                            inv: None,
                            src_qp: None,
                            frame: None,
                            se: p.r.bth.solicited,
                        });
                    }
                }
                Operation::ReadRequest => {
                    let r = p.r.reth.unwrap();
                    step = (r.dma_len as u64).div_ceil(mtu as u64).max(1) as u32;
                }
                Operation::FetchAdd | Operation::CompareSwap => {
                    let ae = p.r.atomic_eth.unwrap();
                    let lo = ranges[&ae.rkey.0].0;
                    let at = (ae.va - lo) as usize;
                    let m = shadow.get_mut(&ae.rkey.0).unwrap();
                    let old = u64::from_ne_bytes(m[at..at + 8].try_into().unwrap());
                    let new = if p.info.operation == Operation::FetchAdd {
                        old.wrapping_add(ae.swap_add)
                    } else if old == ae.compare {
                        ae.swap_add
                    } else {
                        old
                    };
                    m[at..at + 8].copy_from_slice(&new.to_ne_bytes());
                    // The core's answer carried the same original value.
                    if let Some(&orig) = atomic_orig.get(&(a, psn.value())) {
                        assert_eq!(orig, old, "{}: atomic at PSN {psn}", case.file);
                    }
                }
                _ => unreachable!(),
            }
            psn = psn.add(step);
        }
    }
    let mut bytes_checked = 0;
    for (&key, (_, mem)) in &regions {
        let got = mem.snapshot();
        bytes_checked += got.len();
        let want = &shadow[&key];
        if let Some(at) = got.iter().zip(want).position(|(g, w)| g != w) {
            panic!(
                "{}: region {key:#010x} differs from the captured WRITEs/atomics at offset {at}",
                case.file
            );
        }
    }
    let recv_snapshot = recv_mem.snapshot();
    for &b in &bs {
        let ok: Vec<&Wc> = recv_wcs
            .get(&b)
            .map(|v| v.iter().filter(|w| w.status == WcStatus::Success).collect())
            .unwrap_or_default();
        let exp = &expect_recv[&b];
        let ctx = format!("{} QP {b:#x}", case.file);
        assert_eq!(ok.len(), exp.len(), "{ctx}: successful receive completions");
        for (i, (wc, e)) in ok.iter().zip(exp).enumerate() {
            let ctx = format!("{ctx}: receive {i}");
            assert_eq!(wc.opcode, e.opcode, "{ctx}");
            assert_eq!(wc.byte_len, e.byte_len, "{ctx}");
            assert_eq!(wc.qp_num.value(), b, "{ctx}");
            assert_eq!(wc.solicited, e.se, "{ctx}: solicited event");
            assert_eq!(
                wc.wc_flags.contains(WcFlags::WITH_IMM),
                e.imm.is_some(),
                "{ctx}"
            );
            assert_eq!(
                wc.wc_flags.contains(WcFlags::WITH_INV),
                e.inv.is_some(),
                "{ctx}"
            );
            if let Some(v) = e.imm.or(e.inv) {
                assert_eq!(wc.imm_or_inv, v, "{ctx}");
            }
            let at = (wc.wr_id * RECV_SLOT as u64) as usize;
            if let Some(data) = &e.data {
                let skip = if qp_type == QpType::Ud { 40 } else { 0 };
                assert_eq!(
                    &recv_snapshot[at + skip..at + skip + data.len()],
                    &data[..],
                    "{ctx}: bytes"
                );
            }
            if let Some(src) = e.src_qp {
                assert_eq!(wc.src_qp.value(), src, "{ctx}");
                assert!(wc.wc_flags.contains(WcFlags::GRH), "{ctx}");
            }
            if let Some(f) = e.frame {
                // The GRH area: the IPv6 header as received; over IPv4, 20
                // zero bytes and the IPv4 header, except the identification
                // and the header checksum (see the module documentation).
                let area = &recv_snapshot[at..at + 40];
                let mut want = vec![0u8; 40 - f.ip_header.len()];
                want.extend_from_slice(&f.ip_header);
                let mut got = area.to_vec();
                if f.ip_id.is_some() {
                    for i in [24, 25, 30, 31] {
                        want[i] = 0;
                        got[i] = 0;
                    }
                    assert_eq!(&area[24..26], &[0, 0], "{ctx}: identification 0");
                }
                assert_eq!(got, want, "{ctx}: GRH area");
            }
        }
    }

    Outcome {
        dev,
        recv_wcs,
        extra,
        compared,
        bytes_checked,
        events,
    }
}
