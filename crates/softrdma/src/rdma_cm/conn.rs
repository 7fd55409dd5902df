//! The connection side of an rdma_cm id: `rdma_connect`, `rdma_accept`,
//! `rdma_reject`, `rdma_establish`, `rdma_notify` and `rdma_disconnect`,
//! following Linux's core/cma.c for what the CM sends and librdmacm's
//! cma.c for what happens to the id's QP. The id itself is in `id.rs`.

use super::driver::{dev_state, now, service_id};
use super::id::{einval, entry, pump_dev, CmId};
use super::qp::{apply, max_rd_atom, modify_err, rts_changes};
use super::state::{lock, St};
use super::ConnParam;
use crate::error::Result;
use softrdma_cm::negotiate;
use softrdma_cm::{PortSpace, RejReason, SidrRepParams, SidrStatus};
use softrdma_proto::QpType;
use softrdma_wire::cm::CmaHdrRepr;
use softrdma_wire::{QKey, Qpn};

impl CmId {
    /// `rdma_connect`: a REQ (UD ids: a SIDR_REQ) to the resolved peer.
    /// `param` `None` is librdmacm's NULL: device maxima, retry counts 7
    /// (refused for TCP ids without a QP, which must name their QP).
    pub fn connect(&self, param: Option<&ConnParam>) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        let e = entry(&mut g, num)?;
        if e.st != St::RouteResolved {
            return Err(einval("rdma_connect: route not resolved"));
        }
        let dev = e
            .dev
            .clone()
            .ok_or_else(|| einval("rdma_connect: no device"))?;
        g.defer_drop(dev.clone());
        let e = entry(&mut g, num)?;
        let max = max_rd_atom(&dev);
        if e.ps == PortSpace::Tcp {
            if e.qp.is_none() && param.is_none() {
                return Err(einval("rdma_connect: no QP and no conn_param"));
            }
            if let Some(p) = param {
                if (p.responder_resources != 0xff && p.responder_resources > max)
                    || (p.initiator_depth != 0xff && p.initiator_depth > max)
                {
                    return Err(einval("rdma_connect: more READs than the device allows"));
                }
            }
        }
        let dflt = ConnParam::default();
        let p = param.unwrap_or(&dflt);
        e.init_depth = if p.initiator_depth == 0xff {
            max
        } else {
            p.initiator_depth
        };
        e.resp_res = if p.responder_resources == 0xff {
            max
        } else {
            p.responder_resources
        };
        let (src, dst, path) = match (e.src, e.dst, e.path) {
            (Some(s), Some(d), Some(p)) => (s, d, p),
            _ => return Err(einval("rdma_connect: route not resolved")),
        };
        let cma = CmaHdrRepr {
            src_port: src.port(),
            src: src.ip(),
            dst: dst.ip(),
        };
        let sid = service_id(e.ps, dst.port());
        let qp_num = e.qp.unwrap_or(Qpn::new(p.qp_num));
        let srq = if e.qp.is_some() { e.qp_srq } else { p.srq };
        let (qp_type, seq, resp_res, init_depth) = (e.qp_type, e.seq, e.resp_res, e.init_depth);
        let t = now(dev.shared());
        let ds = dev_state(&mut g, dev.shared());
        let cm_id = if qp_type == QpType::Ud {
            let rp = negotiate::sidr_req_params(dst.ip(), sid, &cma, &p.private_data)
                .map_err(|e| einval(&e.to_string()))?;
            ds.cm.sidr_request(t, &rp)
        } else {
            let conn = negotiate::ConnParam {
                private_data: p.private_data.clone(),
                responder_resources: resp_res,
                initiator_depth: init_depth,
                flow_control: p.flow_control,
                retry_count: p.retry_count,
                rnr_retry_count: p.rnr_retry_count,
                srq,
                qp_num,
            };
            let t_qp = if qp_type == QpType::Uc {
                softrdma_cm::QpType::Uc
            } else {
                softrdma_cm::QpType::Rc
            };
            let rp = negotiate::req_params(&path, sid, &cma, t_qp, seq, &conn)
                .map_err(|e| einval(&e.to_string()))?;
            ds.cm.connect(t, &rp)
        }
        .map_err(|e| einval(&e.to_string()))?;
        ds.bind(cm_id, num);
        let e = entry(&mut g, num)?;
        e.cm = Some(cm_id);
        e.st = St::Connect;
        pump_dev(&mut g, &dev);
        Ok(())
    }

    /// `rdma_accept` of a request's id. RC: with a QP, librdmacm's INIT,
    /// RTR and RTS first (so the QP is ready when the RTU comes), then the
    /// REP; ESTABLISHED follows on the RTU. UD: the SIDR_REP (QPN, Q_Key
    /// 0x01234567), no event. `param` `None`: what the requester asked for,
    /// capped by the device.
    pub fn accept(&self, param: Option<&ConnParam>) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        let e = entry(&mut g, num)?;
        let (Some(cm_id), Some(dev), true) = (e.cm, e.dev.clone(), e.listener.is_some()) else {
            return Err(einval("rdma_accept: not a connection request"));
        };
        g.defer_drop(dev.clone());
        let e = entry(&mut g, num)?;
        if e.st != St::Connect {
            return Err(einval("rdma_accept: not a connection request"));
        }
        let max = max_rd_atom(&dev);
        let dflt = ConnParam::default();
        if e.ps == PortSpace::Tcp && e.qp.is_none() && param.is_none() {
            return Err(einval("rdma_accept: no QP and no conn_param"));
        }
        if let (PortSpace::Tcp, Some(p)) = (e.ps, param) {
            if (p.responder_resources != 0xff && p.responder_resources > max)
                || (p.initiator_depth != 0xff && p.initiator_depth > max)
            {
                return Err(einval("rdma_accept: more READs than the device allows"));
            }
        }
        let p = param.unwrap_or(&dflt);
        e.init_depth = if p.initiator_depth == 0xff {
            e.init_depth.min(max)
        } else {
            p.initiator_depth
        };
        e.resp_res = if p.responder_resources == 0xff {
            e.resp_res.min(max)
        } else {
            p.responder_resources
        };
        let (qp, srq, seq, qp_type, resp_res, init_depth) =
            (e.qp, e.qp_srq, e.seq, e.qp_type, e.resp_res, e.init_depth);
        let qp_num = qp.unwrap_or(Qpn::new(p.qp_num));
        let t = now(dev.shared());
        if qp_type == QpType::Ud {
            let rp = SidrRepParams {
                status: SidrStatus::SUCCESS,
                qpn: qp_num,
                qkey: QKey(softrdma_cm::limits::RDMA_UDP_QKEY),
                info: Vec::new(),
                private_data: p.private_data.clone(),
                ece: Default::default(),
            };
            let ds = dev_state(&mut g, dev.shared());
            ds.cm
                .sidr_reply(t, cm_id, &rp)
                .map_err(|e| einval(&e.to_string()))?;
            pump_dev(&mut g, &dev);
            return Ok(());
        }
        if let Some(q) = qp {
            // ucma_modify_qp_rtr / ucma_modify_qp_rts.
            for c in rts_changes(&mut g, num, Some((resp_res, init_depth)))? {
                apply(&dev, q, &c)?;
            }
        }
        let conn = negotiate::ConnParam {
            private_data: p.private_data.clone(),
            responder_resources: resp_res,
            initiator_depth: init_depth,
            flow_control: p.flow_control,
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            srq: if qp.is_some() { srq } else { p.srq },
            qp_num,
        };
        let rp = negotiate::rep_params(seq, &conn).map_err(|e| einval(&e.to_string()))?;
        let ds = dev_state(&mut g, dev.shared());
        if let Err(e) = ds.cm.accept(t, cm_id, &rp) {
            if let Some(q) = qp {
                modify_err(&dev, q);
            }
            return Err(einval(&e.to_string()));
        }
        pump_dev(&mut g, &dev);
        Ok(())
    }

    /// `rdma_reject`: REJ reason 28 with the private data (≤ 148 bytes) for
    /// a request or a REP taken as CONNECT_RESPONSE; UD: SIDR_REP "reject".
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        self.reject_with(private_data, RejReason::CONSUMER_DEFINED)
    }

    /// `rdma_reject_ece`: REJ reason 35 (vendor option not supported).
    pub fn reject_ece(&self, private_data: &[u8]) -> Result<()> {
        self.reject_with(private_data, RejReason(35))
    }

    fn reject_with(&self, private_data: &[u8], reason: RejReason) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        let e = entry(&mut g, num)?;
        let (Some(cm_id), Some(dev)) = (e.cm, e.dev.clone()) else {
            return Err(einval("rdma_reject: nothing to reject"));
        };
        g.defer_drop(dev.clone());
        let e = entry(&mut g, num)?;
        let ud = e.qp_type == QpType::Ud;
        let t = now(dev.shared());
        let ds = dev_state(&mut g, dev.shared());
        let r = if ud {
            let rp = SidrRepParams {
                status: SidrStatus::REJECT,
                qpn: Qpn::new(0),
                qkey: QKey(0),
                info: Vec::new(),
                private_data: private_data.to_vec(),
                ece: Default::default(),
            };
            ds.cm.sidr_reply(t, cm_id, &rp)
        } else {
            ds.cm.reject(t, cm_id, reason, &[], private_data)
        };
        r.map_err(|e| einval(&e.to_string()))?;
        pump_dev(&mut g, &dev);
        Ok(())
    }

    /// `rdma_establish`: after CONNECT_RESPONSE on an id without a QP (the
    /// program moved its own QP to RTS): the RTU.
    pub fn establish(&self) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        let e = entry(&mut g, num)?;
        if e.qp.is_some() {
            return Err(einval("rdma_establish: the id has a QP"));
        }
        let (Some(cm_id), Some(dev)) = (e.cm, e.dev.clone()) else {
            return Err(einval("rdma_establish: not connecting"));
        };
        g.defer_drop(dev.clone());
        let t = now(dev.shared());
        let ds = dev_state(&mut g, dev.shared());
        ds.cm
            .establish(t, cm_id, &[])
            .map_err(|e| einval(&e.to_string()))?;
        pump_dev(&mut g, &dev);
        Ok(())
    }

    /// `rdma_notify` with IBV_EVENT_COMM_EST: the QP received before the
    /// RTU; the passive side is connected (ESTABLISHED follows).
    pub fn notify_established(&self) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        let e = entry(&mut g, num)?;
        let (Some(cm_id), Some(dev)) = (e.cm, e.dev.clone()) else {
            return Err(einval("rdma_notify: not connecting"));
        };
        g.defer_drop(dev.clone());
        let ds = dev_state(&mut g, dev.shared());
        ds.cm
            .notify_established(cm_id)
            .map_err(|e| einval(&e.to_string()))?;
        pump_dev(&mut g, &dev);
        Ok(())
    }

    /// `rdma_disconnect`: the QP to ERR, then a DREQ, or the DREP of a DREQ
    /// received. DISCONNECTED follows (on the DREP, or at once for a DREQ
    /// already reported).
    pub fn disconnect(&self) -> Result<()> {
        let num = self.0.num;
        let mut g = lock();
        let e = entry(&mut g, num)?;
        let (Some(cm_id), Some(dev), qp) = (e.cm, e.dev.clone(), e.qp) else {
            return Err(einval("rdma_disconnect: not connected"));
        };
        g.defer_drop(dev.clone());
        if let Some(q) = qp {
            modify_err(&dev, q);
        }
        let t = now(dev.shared());
        let ds = dev_state(&mut g, dev.shared());
        // Linux tries a DREQ, then a DREP, and ignores a state that takes
        // neither.
        let _ = ds.cm.disconnect(t, cm_id, &[]);
        pump_dev(&mut g, &dev);
        Ok(())
    }
}
