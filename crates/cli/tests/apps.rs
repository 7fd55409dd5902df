//! Real applications nobody here wrote, unmodified, over softrdma: both ends
//! of each run under `softrdma exec`, on this host (loopback addresses
//! 127.66.x.y) and, for iSER, Gloo and Mooncake, across two network
//! namespaces joined by a veth (10.66.x.y).
//!
//! - storage: tgt 1.0.85's iSER target with libiscsi 1.19 (discovery,
//!   inquiry, capacity, `iscsi-perf`, 16 MiB written and read back byte
//!   for byte by our `tests/apps/iscsi_rw.c`), and libiscsi's SCSI suite
//!   `iscsi-test-cu` over iSER against what it passes over TCP;
//! - AI: Gloo's ibverbs transport (allreduce, ring and halving-doubling,
//!   2 and 4 ranks, `tests/apps/gloo_allreduce.cc`), Mooncake's transfer
//!   engine (PyPI, in a virtual environment cached in
//!   `/var/cache/softrdma-tests`, `tests/apps/mooncake_transfer.py`);
//! - the cloud: QEMU 7.2's RDMA live migration (the guest's RAM compared);
//! - persistent memory: librpma 1.2.0 in the 15 scenarios of its upstream
//!   examples (`tests/apps/rpma_scenarios.c`, written anew), 10 runs each;
//! - HPC: uDAPL 2.1.10's dtest and dapltest, cma and scm providers, over a
//!   1500-byte veth with no MTU setting and on one host.
//!
//! Needs the Debian packages scripts/deps installs (tgt libiscsi-bin
//! libiscsi-dev libgloo-dev g++ qemu-system-x86 librpma-dev dapl2-utils
//! python3-venv), root (namespaces, tgtd), and PyPI for Mooncake's first
//! run; a missing piece fails the test, it never passes by running
//! nothing. One test at a time (the lock the interop and UCX/MPI tests
//! take). Where an application's own bug shows, the test says which and
//! how it is fixed upstream.

#[path = "apps/harness.rs"]
mod harness;
#[path = "common/libs.rs"]
mod libs;

use harness::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(120);

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[path = "apps/gloo.rs"]
mod gloo;
#[path = "apps/iser.rs"]
mod iser;
#[path = "apps/mooncake.rs"]
mod mooncake;
#[path = "apps/qemu.rs"]
mod qemu;
#[path = "apps/rpma.rs"]
mod rpma;
#[path = "apps/udapl.rs"]
mod udapl;
#[allow(unused_imports)]
use {gloo::*, iser::*, mooncake::*, qemu::*, rpma::*, udapl::*};
