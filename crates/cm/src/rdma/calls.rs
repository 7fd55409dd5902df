//! The connection side of an [`Endpoint`]'s ids: `rdma_connect`,
//! `rdma_accept`, `rdma_reject`, `rdma_establish`, `rdma_notify`,
//! `rdma_disconnect`, and the id's QP (`rdma_init_qp_attr`, attaching
//! one). Each follows Linux's core/cma.c for the state it needs and what
//! the CM sends, and librdmacm's cma.c for the QP changes it queues.

use super::endpoint::{Endpoint, EndpointError, IdEvent};
use super::event::{ConnParam, EventType, IdState};
use super::listen::Transport;
use super::{init_qp_attr, to_rts, ud_setup, QpChange};
use crate::limits::RDMA_UDP_QKEY;
use crate::negotiate::{self, QpAttrs, QpState, RdmaCmOverrides};
use crate::{CmId, Instant, PortSpace, RejReason, SidrRepParams, SidrStatus};
use softrdma_wire::cm::CmaHdrRepr;
use softrdma_wire::{QKey, Qpn};

type R<T = ()> = Result<T, EndpointError>;

fn st(what: &'static str) -> EndpointError {
    EndpointError::State(what)
}

/// A READ depth asked for: 0xFF is the device's maximum (`dflt`).
fn depth(asked: u8, dflt: u8) -> u8 {
    if asked == 0xff {
        dflt
    } else {
        asked
    }
}

/// Depths over the device's limit (TCP ids, EINVAL).
fn over(p: Option<&ConnParam>, max: u8) -> bool {
    p.is_some_and(|p| {
        (p.responder_resources != 0xff && p.responder_resources > max)
            || (p.initiator_depth != 0xff && p.initiator_depth > max)
    })
}

impl Endpoint {
    /// The id's CM id and device.
    fn conn_of(&mut self, num: u64, what: &'static str) -> R<(CmId, u64)> {
        let e = self.entry(num)?;
        match (e.cm, e.dev) {
            (Some(c), Some(d)) => Ok((c, d)),
            _ => Err(st(what)),
        }
    }

    fn dev_cm(&mut self, dev: u64) -> R<&mut crate::Cm> {
        Ok(&mut self.devs.get_mut(&dev).ok_or(EndpointError::NoDevice)?.cm)
    }

    /// Queues a change of the id's QP.
    fn change(&mut self, num: u64, qpn: Qpn, c: QpChange) {
        self.changes.push_back((num, qpn, c));
    }

    /// `rdma_connect`: a REQ (UD ids: a SIDR_REQ) to the resolved peer.
    /// `param` `None` is librdmacm's NULL (device maxima `max`, retry
    /// counts 7; refused for TCP ids without a QP).
    pub fn connect(&mut self, num: u64, now: Instant, param: Option<&ConnParam>, max: u8) -> R {
        self.tick(now);
        let e = self.entry(num)?;
        let (IdState::RouteResolved, Some(src), Some(dst), Some(path), Some(dev)) =
            (e.st, e.src, e.dst, e.path, e.dev)
        else {
            return Err(st("rdma_connect: route not resolved"));
        };
        if e.ps == PortSpace::Tcp {
            if e.qp.is_none() && param.is_none() {
                return Err(st("rdma_connect: no QP and no conn_param"));
            }
            if over(param, max) {
                return Err(st("rdma_connect: more READs than the device allows"));
            }
        }
        let dflt = ConnParam::default();
        let p = param.unwrap_or(&dflt);
        e.init_depth = depth(p.initiator_depth, max);
        e.resp_res = depth(p.responder_resources, max);
        let cma = CmaHdrRepr {
            src_port: src.port(),
            src: src.ip(),
            dst: dst.ip(),
        };
        let sid = Endpoint::sid_of(e, dst);
        let (qp_num, srq) = match e.qp {
            Some((q, srq)) => (q, srq),
            None => (Qpn::new(p.qp_num), p.srq),
        };
        let (transport, seq) = (e.transport, e.seq);
        let conn = negotiate::ConnParam {
            private_data: p.private_data.clone(),
            responder_resources: e.resp_res,
            initiator_depth: e.init_depth,
            flow_control: p.flow_control,
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            srq,
            qp_num,
        };
        let cm = self.dev_cm(dev)?;
        let cm_id = if transport == Transport::Ud {
            let rp = negotiate::sidr_req_params(dst.ip(), sid, &cma, &p.private_data)?;
            cm.sidr_request(now, &rp)?
        } else {
            let t = if transport == Transport::Uc {
                crate::QpType::Uc
            } else {
                crate::QpType::Rc
            };
            let rp = negotiate::req_params(&path, sid, &cma, t, seq, &conn)?;
            cm.connect(now, &rp)?
        };
        if let Some(ds) = self.devs.get_mut(&dev) {
            ds.bind(cm_id, num);
        }
        let e = self.entry(num)?;
        e.cm = Some(cm_id);
        e.st = IdState::Connect;
        self.pump(dev);
        Ok(())
    }

    /// The checks of `rdma_accept` and the READ depths it settles
    /// (librdmacm's, before anything is sent): the id's CM id, device,
    /// QP and depths (responder resources, initiator depth).
    fn accept_checks(
        &mut self,
        num: u64,
        param: Option<&ConnParam>,
        max: u8,
    ) -> R<(CmId, u64, (u8, u8))> {
        let (cm_id, dev) = self.conn_of(num, "rdma_accept: not a connection request")?;
        let e = self.entry(num)?;
        if e.st != IdState::Connect || e.listener.is_none() {
            return Err(st("rdma_accept: not a connection request"));
        }
        if e.ps == PortSpace::Tcp && e.qp.is_none() && param.is_none() {
            return Err(st("rdma_accept: no QP and no conn_param"));
        }
        if e.ps == PortSpace::Tcp && over(param, max) {
            return Err(st("rdma_accept: more READs than the device allows"));
        }
        let dflt = ConnParam::default();
        let p = param.unwrap_or(&dflt);
        e.init_depth = depth(p.initiator_depth, e.init_depth.min(max));
        e.resp_res = depth(p.responder_resources, e.resp_res.min(max));
        Ok((cm_id, dev, (e.resp_res, e.init_depth)))
    }

    /// The first half of `rdma_accept` of a request's id: the changes
    /// that move its QP to RTS (librdmacm's `ucma_modify_qp_rtr` and
    /// `ucma_modify_qp_rts`: INIT, RTR, RTS), for the driver to apply
    /// *before* [`Endpoint::accept`]; none for a UD id or one without a
    /// QP. Nothing is sent: a change that fails fails the accept with no
    /// REP out (librdmacm returns before its ACCEPT reaches the kernel),
    /// and the request stays acceptable or rejectable.
    pub fn accept_changes(
        &mut self,
        num: u64,
        param: Option<&ConnParam>,
        max: u8,
    ) -> R<Vec<(Qpn, QpChange)>> {
        let (cm_id, dev, depths) = self.accept_checks(num, param, max)?;
        let e = self.entry(num)?;
        let (Some((q, _)), false) = (e.qp, e.transport == Transport::Ud) else {
            return Ok(Vec::new());
        };
        let o = self.overrides(num)?;
        let cm = self.dev_cm(dev)?;
        Ok(to_rts(cm, cm_id, &o, Some(depths))?
            .into_iter()
            .map(|c| (q, c))
            .collect())
    }

    /// `rdma_accept` of a request's id, once the driver applied
    /// [`Endpoint::accept_changes`]: RC, the REP (a REP the CM refuses
    /// queues the QP's move to ERR, as librdmacm's `ucma_modify_qp_err`);
    /// UD, the SIDR_REP (the QP's number, Q_Key 0x01234567). `param`
    /// `None`: what the requester asked for, capped by `max`.
    pub fn accept(&mut self, num: u64, now: Instant, param: Option<&ConnParam>, max: u8) -> R {
        self.tick(now);
        let (cm_id, dev, depths) = self.accept_checks(num, param, max)?;
        let e = self.entry(num)?;
        let dflt = ConnParam::default();
        let p = param.unwrap_or(&dflt);
        let (qp, seq, ud) = (e.qp, e.seq, e.transport == Transport::Ud);
        let (qp_num, srq) = match qp {
            Some((q, srq)) => (q, srq),
            None => (Qpn::new(p.qp_num), p.srq),
        };
        if ud {
            let rp = SidrRepParams {
                status: SidrStatus::SUCCESS,
                qpn: qp_num,
                qkey: QKey(RDMA_UDP_QKEY),
                info: Vec::new(),
                private_data: p.private_data.clone(),
                ece: Default::default(),
            };
            self.dev_cm(dev)?.sidr_reply(now, cm_id, &rp)?;
            self.pump(dev);
            return Ok(());
        }
        let conn = negotiate::ConnParam {
            private_data: p.private_data.clone(),
            responder_resources: depths.0,
            initiator_depth: depths.1,
            flow_control: p.flow_control,
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            srq,
            qp_num,
        };
        let rp = negotiate::rep_params(seq, &conn)?;
        if let Err(e) = self.dev_cm(dev)?.accept(now, cm_id, &rp) {
            if let Some((q, _)) = qp {
                self.change(num, q, QpChange::ToErr);
            }
            return Err(e.into());
        }
        self.pump(dev);
        Ok(())
    }

    /// `rdma_reject` (reason 28) or `rdma_reject_ece` (35): a REJ with the
    /// private data; UD: SIDR_REP "reject".
    pub fn reject(&mut self, num: u64, now: Instant, data: &[u8], reason: RejReason) -> R {
        self.tick(now);
        let (cm_id, dev) = self.conn_of(num, "rdma_reject: nothing to reject")?;
        let ud = self.entry(num)?.transport == Transport::Ud;
        let cm = self.dev_cm(dev)?;
        if ud {
            let rp = SidrRepParams {
                status: SidrStatus::REJECT,
                qpn: Qpn::new(0),
                qkey: QKey(0),
                info: Vec::new(),
                private_data: data.to_vec(),
                ece: Default::default(),
            };
            cm.sidr_reply(now, cm_id, &rp)?;
        } else {
            cm.reject(now, cm_id, reason, &[], data)?;
        }
        self.pump(dev);
        Ok(())
    }

    /// `rdma_establish` after CONNECT_RESPONSE (an id without a QP, or the
    /// driver's move of the id's QP to RTS done): the RTU.
    pub fn establish(&mut self, num: u64, now: Instant) -> R {
        self.tick(now);
        let (cm_id, dev) = self.conn_of(num, "rdma_establish: not connecting")?;
        self.dev_cm(dev)?.establish(now, cm_id, &[])?;
        self.pump(dev);
        Ok(())
    }

    /// `rdma_notify` with IBV_EVENT_COMM_EST: the QP received before the
    /// RTU; ESTABLISHED follows.
    pub fn notify_established(&mut self, num: u64) -> R {
        let (cm_id, dev) = self.conn_of(num, "rdma_notify: not connecting")?;
        self.dev_cm(dev)?.notify_established(cm_id)?;
        self.pump(dev);
        Ok(())
    }

    /// `rdma_disconnect`: the QP to ERR, then a DREQ or the DREP of a DREQ
    /// received. A state that takes neither comes back as the CM's error
    /// after the QP change is queued (Linux ignores it; so may a driver).
    pub fn disconnect(&mut self, num: u64, now: Instant) -> R {
        self.tick(now);
        let (cm_id, dev) = self.conn_of(num, "rdma_disconnect: not connected")?;
        if let Some((q, _)) = self.entry(num)?.qp {
            self.change(num, q, QpChange::ToErr);
        }
        let r = self.dev_cm(dev)?.disconnect(now, cm_id, &[]);
        self.pump(dev);
        Ok(r?)
    }

    /// The overrides rdma_cm applies to the id's QP attributes.
    fn overrides(&mut self, num: u64) -> R<RdmaCmOverrides> {
        let e = self.entry(num)?;
        Ok(RdmaCmOverrides {
            rq_psn: Some(e.seq),
            timeout: e.opts.ack_timeout,
            min_rnr_timer: e.opts.min_rnr_timer,
            ..Default::default()
        })
    }

    /// `rdma_init_qp_attr`: the attributes and mask that move the id's QP
    /// to `state`.
    pub fn init_qp_attr(&mut self, num: u64, state: QpState) -> R<QpAttrs> {
        let o = self.overrides(num)?;
        let e = self.entry(num)?;
        let (ud, cm, dev) = (e.transport == Transport::Ud, e.cm, e.dev);
        let dev = dev.ok_or(st("the id has no device yet"))?;
        let ds = self.devs.get(&dev).ok_or(EndpointError::NoDevice)?;
        let conn = cm.filter(|_| !ud).map(|c| (&ds.cm, c));
        Ok(init_qp_attr(conn, ud, state, &o)?)
    }

    /// The REP's INIT, RTR and RTS for the id's QP (librdmacm's part of
    /// CONNECT_RESPONSE), queued; then the driver applies them and calls
    /// [`Endpoint::establish`] (or reports CONNECT_ERROR and rejects).
    pub fn rep_changes(&mut self, num: u64) -> R<[QpChange; 3]> {
        let o = self.overrides(num)?;
        let (cm_id, dev) = self.conn_of(num, "no CM id")?;
        let cm = &self.devs.get(&dev).ok_or(EndpointError::NoDevice)?.cm;
        Ok(to_rts(cm, cm_id, &o, None)?)
    }

    /// `rdma_create_qp`: `qpn` becomes the id's QP; queued: INIT (UD: INIT
    /// with Q_Key 0x01234567, RTR, RTS). From now on accept and disconnect
    /// queue its changes.
    pub fn attach_qp(&mut self, num: u64, qpn: Qpn, srq: bool) -> R {
        let e = self.entry(num)?;
        if e.qp.is_some() {
            return Err(st("the id has a QP already"));
        }
        let changes = if e.transport == Transport::Ud {
            ud_setup()
        } else {
            vec![QpChange::Modify(self.init_qp_attr(num, QpState::Init)?)]
        };
        self.entry(num)?.qp = Some((qpn, srq));
        for c in changes {
            self.change(num, qpn, c);
        }
        Ok(())
    }

    /// The QP the id drives without moving it (`id->qp` set by the
    /// program), or none (`rdma_destroy_qp`).
    pub fn use_qp(&mut self, num: u64, qp: Option<(Qpn, bool)>) -> R {
        self.entry(num)?.qp = qp;
        Ok(())
    }

    /// `RDMA_OPTION_IB_PATH`: the route given instead of resolved, once
    /// the address is; ROUTE_RESOLVED queued.
    pub fn set_path(&mut self, num: u64, path: crate::Path) -> R {
        let e = self.entry(num)?;
        if e.st != IdState::AddrResolved || e.dev.is_none() {
            return Err(st("RDMA_OPTION_IB_PATH: address not resolved"));
        }
        e.path = Some(path);
        e.st = IdState::RouteResolved;
        self.push(IdEvent::new(num, EventType::RouteResolved, 0));
        Ok(())
    }
}
