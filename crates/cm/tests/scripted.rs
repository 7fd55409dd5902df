//! Scripted exchanges between two CMs at explicit virtual times, one rule
//! of Linux's CM (or of the IBA) per test. Expected values are written out
//! from the kernel sources and the brief (rdmacm.md §3), not computed by
//! the crate.

mod support;

use softrdma_cm::negotiate::{AttrMask, QpState, RdmaCmOverrides};
use softrdma_cm::{
    CmError, CmId, Event, Instant, RejReason, SidrRepParams, SidrReqParams, SidrStatus, State,
    Unanswered,
};
use softrdma_wire::cm::{CmMsg, MsgRef, PortSpace, ServiceId};
use softrdma_wire::mad::{GSI_QKEY, MAD_LEN};
use softrdma_wire::{Gid, PKey, Psn, QKey, Qpn};
use support::*;

fn linux_tid(comm: u32) -> u64 {
    2u64 << 32 | comm.swap_bytes() as u64
}

#[path = "scripted/establish.rs"]
mod establish;
#[path = "scripted/lifecycle.rs"]
mod lifecycle;
#[path = "scripted/retries.rs"]
mod retries;
