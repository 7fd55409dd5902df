//! The device's objects other than QPs: protection domains, memory
//! regions and windows, completion queues, address handles.

use super::*;

impl Device {
    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&mut self) -> VerbsResult<PdId> {
        if self.pds.len() >= limits::MAX_PD {
            return Err(VerbsError::NoMemory);
        }
        Ok(PdId(self.pds.insert(())))
    }

    /// `ibv_dealloc_pd`: fails with `Busy` while anything uses it.
    pub fn dealloc_pd(&mut self, pd: PdId) -> VerbsResult<()> {
        self.pds.get(pd.0).ok_or(VerbsError::NoSuchObject)?;
        // An XRC TGT QP's PD is that of the SRQ of its current request:
        // not its own.
        let used = self.mrs.count_in_pd(pd) > 0
            || self
                .qps
                .iter()
                .any(|(_, q)| q.pd == pd && q.qp_type != QpType::XrcRecv)
            || self.srqs.iter().any(|(_, s)| s.pd == pd)
            || self.ah_pd.values().any(|p| *p == pd);
        if used {
            return Err(VerbsError::Busy);
        }
        self.pds.remove(pd.0);
        Ok(())
    }

    pub(crate) fn check_pd(&self, pd: PdId) -> VerbsResult<()> {
        self.pds
            .get(pd.0)
            .map(|_| ())
            .ok_or(VerbsError::NoSuchObject)
    }

    // ---------------------------------------------------------- MRs ----

    /// `ibv_reg_mr`: registers `mem`, addressed by peers and SGEs at `va`.
    /// Returns the key (lkey = rkey).
    pub fn reg_mr(
        &mut self,
        pd: PdId,
        va: u64,
        mem: Arc<dyn RegionMemory>,
        access: Access,
    ) -> VerbsResult<u32> {
        self.check_pd(pd)?;
        self.mrs.register(&mut self.rng, pd, va, mem, access)
    }

    /// [`Device::reg_mr`] with a key the caller chooses (lkey = rkey = `key`).
    ///
    /// For replaying captured traffic and for tests, where the peer's
    /// requests already carry the R_Key; applications use `reg_mr`, whose
    /// keys are unguessable. Fails with `InvalidArgument` for key 0 and with
    /// `Busy` when a region already has the key.
    pub fn reg_mr_with_key(
        &mut self,
        pd: PdId,
        va: u64,
        mem: Arc<dyn RegionMemory>,
        access: Access,
        key: u32,
    ) -> VerbsResult<u32> {
        self.check_pd(pd)?;
        self.mrs.register_with_key(key, pd, va, mem, access)
    }

    /// `ibv_dereg_mr`. Refused while memory windows are bound to the
    /// region.
    pub fn dereg_mr(&mut self, key: u32) -> VerbsResult<()> {
        self.mrs.deregister(key)
    }

    /// `ibv_rereg_mr` (see [`MrTable::reregister`]): returns the region's
    /// key, new when the memory changed.
    pub fn rereg_mr(&mut self, key: u32, change: Rereg) -> VerbsResult<u32> {
        if let Some(pd) = change.pd {
            self.check_pd(pd)?;
        }
        self.mrs.reregister(&mut self.rng, key, change)
    }

    /// `ibv_advise_mr`: prefetches the ranges of on-demand paging regions
    /// that `sges` name (lkeys of regions in `pd`). With `flush`
    /// (IBV_ADVISE_MR_FLAG_FLUSH) a range that cannot be brought in is an
    /// error (`Fault`); without it, advice is best effort. Errors as the
    /// man page: a key that names no region `Fault` (EFAULT), another
    /// protection domain or a write prefetch of a region without local
    /// write `PermissionDenied` (EPERM), a region without on-demand paging
    /// `InvalidArgument` (EINVAL, as rxe), a range outside the region
    /// `Fault`.
    pub fn advise_mr(
        &mut self,
        pd: PdId,
        advice: Advice,
        flush: bool,
        sges: &[Sge],
    ) -> VerbsResult<()> {
        self.check_pd(pd)?;
        if sges.is_empty() {
            return Err(VerbsError::InvalidArgument("no scatter/gather entry"));
        }
        let write = advice == Advice::PrefetchWrite;
        let mut todo = Vec::with_capacity(sges.len());
        for s in sges {
            let mr = self.mrs.get(s.lkey).ok_or(VerbsError::Fault)?;
            if mr.pd != pd {
                return Err(VerbsError::PermissionDenied);
            }
            if !mr.access.contains(Access::ON_DEMAND) {
                return Err(VerbsError::InvalidArgument(
                    "not an on-demand paging region",
                ));
            }
            if write && !mr.access.contains(Access::LOCAL_WRITE) {
                return Err(VerbsError::PermissionDenied);
            }
            let off = mr
                .offset_of(s.addr, s.length as u64)
                .ok_or(VerbsError::Fault)?;
            todo.push((mr.region.clone(), off, s.length as usize));
        }
        if advice == Advice::PrefetchNoFault {
            return Ok(());
        }
        for (region, off, len) in todo {
            if region.prefetch(off, len, write).is_err() && flush {
                return Err(VerbsError::Fault);
            }
        }
        Ok(())
    }

    // ---------------------------------------------------------- MWs ----

    /// `ibv_alloc_mw`: a window of type `kind` in `pd`; returns its handle
    /// and R_Key. (Type 3 and other numbers are refused by the caller:
    /// [`MwType`] has 1 and 2 only.)
    pub fn alloc_mw(&mut self, pd: PdId, kind: MwType) -> VerbsResult<(MwId, softrdma_wire::RKey)> {
        self.check_pd(pd)?;
        let rkey = self.mrs.alloc_mw(&mut self.rng, pd, kind)?;
        Ok((MwId(rkey.0 >> 8), rkey))
    }

    /// `ibv_dealloc_mw`: unbinds (if bound) and frees the window; its keys
    /// stop working at once.
    pub fn dealloc_mw(&mut self, mw: MwId) -> VerbsResult<()> {
        self.mrs.dealloc_mw(mw)
    }

    /// Unbinds the windows bound to the region `key` (for a deregistration
    /// that cannot be refused, as a handle's drop in Rust).
    pub fn unbind_region(&mut self, key: u32) {
        self.mrs.unbind_region(key)
    }

    /// A window's current R_Key, type and protection domain.
    pub fn mw(&self, mw: MwId) -> Option<(softrdma_wire::RKey, MwType, PdId)> {
        self.mrs.mw_info(mw)
    }

    /// Region lookup (for the API layers).
    pub fn mr(&self, key: u32) -> Option<&crate::memory::Mr> {
        self.mrs.get(key)
    }

    // ---------------------------------------------------------- CQs ----

    /// `ibv_create_cq`.
    pub fn create_cq(&mut self, depth: u32) -> VerbsResult<CqId> {
        if depth == 0 || depth > limits::MAX_CQE {
            return Err(VerbsError::InvalidArgument("cqe out of range"));
        }
        if self.cqs.len() >= limits::MAX_CQ {
            return Err(VerbsError::NoMemory);
        }
        Ok(CqId(self.cqs.insert(Cq::new(depth as usize))))
    }

    /// `ibv_destroy_cq`: `Busy` while a QP uses it.
    pub fn destroy_cq(&mut self, cq: CqId) -> VerbsResult<()> {
        let c = self.cqs.get(cq.0).ok_or(VerbsError::NoSuchObject)?;
        if c.users > 0 {
            return Err(VerbsError::Busy);
        }
        self.gated -= c.gated_len();
        self.cqs.remove(cq.0);
        Ok(())
    }

    /// `ibv_resize_cq`.
    pub fn resize_cq(&mut self, cq: CqId, depth: u32) -> VerbsResult<()> {
        if depth == 0 || depth > limits::MAX_CQE {
            return Err(VerbsError::InvalidArgument("cqe out of range"));
        }
        let c = self.cqs.get_mut(cq.0).ok_or(VerbsError::NoSuchObject)?;
        if c.resize(depth as usize) {
            Ok(())
        } else {
            Err(VerbsError::InvalidArgument(
                "fewer entries than queued completions",
            ))
        }
    }

    /// Depth of a CQ.
    pub fn cq_depth(&self, cq: CqId) -> VerbsResult<u32> {
        Ok(self.cqs.get(cq.0).ok_or(VerbsError::NoSuchObject)?.depth() as u32)
    }

    /// `ibv_poll_cq`: moves completions into `out`, returns how many.
    pub fn poll_cq(&mut self, cq: CqId, out: &mut [Wc]) -> VerbsResult<usize> {
        let c = self.cqs.get_mut(cq.0).ok_or(VerbsError::NoSuchObject)?;
        Ok(c.poll(out))
    }

    /// [`Device::poll_cq`] with the time each completion was generated at
    /// (`at` as long as `out`).
    pub fn poll_cq_stamped(
        &mut self,
        cq: CqId,
        out: &mut [Wc],
        at: &mut [Instant],
    ) -> VerbsResult<usize> {
        let c = self.cqs.get_mut(cq.0).ok_or(VerbsError::NoSuchObject)?;
        Ok(c.poll_stamped(out, at))
    }

    /// `ibv_req_notify_cq`.
    pub fn req_notify_cq(&mut self, cq: CqId, solicited_only: bool) -> VerbsResult<()> {
        let c = self.cqs.get_mut(cq.0).ok_or(VerbsError::NoSuchObject)?;
        c.arm(solicited_only);
        Ok(())
    }

    // ---------------------------------------------------------- AHs ----

    /// `ibv_create_ah`.
    pub fn create_ah(&mut self, pd: PdId, av: AddressVector) -> VerbsResult<AhId> {
        self.check_pd(pd)?;
        if av.dest.is_ipv4() != self.cfg.local_ip.is_ipv4() || av.dest.is_unspecified() {
            return Err(VerbsError::InvalidArgument(
                "address family differs from the device's",
            ));
        }
        if self.ahs.len() >= limits::MAX_AH {
            return Err(VerbsError::NoMemory);
        }
        let id = self.ahs.insert(av);
        self.ah_pd.insert(id, pd);
        Ok(AhId(id))
    }

    /// `ibv_destroy_ah`.
    pub fn destroy_ah(&mut self, ah: AhId) -> VerbsResult<()> {
        self.ahs.remove(ah.0).ok_or(VerbsError::NoSuchObject)?;
        self.ah_pd.remove(&ah.0);
        Ok(())
    }
}
