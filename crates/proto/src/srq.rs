//! Shared receive queues at the device: the verbs (XRC SRQs are in the
//! `xrc` module).

use crate::device::Device;
use crate::limits;
use crate::qp::RecvWqe;
use crate::verbs::*;

impl Device {
    /// `ibv_create_srq`.
    pub fn create_srq(
        &mut self,
        pd: PdId,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
    ) -> VerbsResult<SrqId> {
        self.check_pd(pd)?;
        if max_wr == 0
            || max_wr > limits::MAX_SRQ_WR
            || max_sge > limits::MAX_SRQ_SGE
            || limit > max_wr
        {
            return Err(VerbsError::InvalidArgument("SRQ attributes out of range"));
        }
        if self.srqs.len() >= limits::MAX_SRQ {
            return Err(VerbsError::NoMemory);
        }
        Ok(SrqId(
            self.srqs
                .insert(crate::xrc::new_srq(pd, max_wr, max_sge, limit)),
        ))
    }

    /// `ibv_modify_srq`: a new depth (resize) and/or the limit (0 disarms).
    ///
    /// As rxe: the depth may grow or shrink, up to `MAX_SRQ_WR`, but never
    /// below the receives already posted (they stay queued, in order) nor
    /// below an armed limit; a limit above the (new) depth is refused. The
    /// whole request is checked before anything changes.
    pub fn modify_srq(
        &mut self,
        srq: SrqId,
        max_wr: Option<u32>,
        limit: Option<u32>,
    ) -> VerbsResult<()> {
        let s = self.srqs.get_mut(srq.0).ok_or(VerbsError::NoSuchObject)?;
        let new_max = max_wr.unwrap_or(s.max_wr);
        let new_limit = limit.unwrap_or(s.limit);
        if max_wr.is_some() {
            if new_max == 0 || new_max > limits::MAX_SRQ_WR {
                return Err(VerbsError::InvalidArgument("max_wr out of range"));
            }
            if (new_max as usize) < s.queue.len() {
                return Err(VerbsError::InvalidArgument(
                    "max_wr below the receives posted",
                ));
            }
        }
        if new_limit > new_max {
            return Err(VerbsError::InvalidArgument("srq_limit above max_wr"));
        }
        s.max_wr = new_max;
        s.limit = new_limit;
        Ok(())
    }

    /// `ibv_query_srq`: (max_wr, max_sge, limit, queued).
    pub fn query_srq(&self, srq: SrqId) -> VerbsResult<(u32, u32, u32, u32)> {
        let s = self.srqs.get(srq.0).ok_or(VerbsError::NoSuchObject)?;
        Ok((s.max_wr, s.max_sge, s.limit, s.queue.len() as u32))
    }

    /// `ibv_destroy_srq`.
    pub fn destroy_srq(&mut self, srq: SrqId) -> VerbsResult<()> {
        let s = self.srqs.get(srq.0).ok_or(VerbsError::NoSuchObject)?;
        if s.users > 0 {
            return Err(VerbsError::Busy);
        }
        if let Some(s) = self.srqs.remove(srq.0) {
            self.forget_xrc_srq(&s);
        }
        Ok(())
    }

    /// `ibv_post_srq_recv`.
    pub fn post_srq_recv(&mut self, srq: SrqId, wr: RecvWr) -> VerbsResult<()> {
        let s = self.srqs.get_mut(srq.0).ok_or(VerbsError::NoSuchObject)?;
        if s.queue.len() as u32 >= s.max_wr {
            return Err(VerbsError::QueueFull);
        }
        if wr.sg_list.len() as u32 > s.max_sge {
            return Err(VerbsError::InvalidArgument("too many SGEs"));
        }
        s.queue.push_back(RecvWqe { wr });
        // Receivers waiting on RNR retry on their own timers; nothing to wake.
        Ok(())
    }
}
