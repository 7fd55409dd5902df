//! softrdma-ibverbs: a libibverbs-compatible C library over softrdma.
//!
//! Built as `libibverbs.so` with soname `libibverbs.so.1` and the symbol
//! versions of rdma-core 44 (Debian 12), so an unmodified verbs program —
//! rdma-core's `ibv_*_pingpong`, perftest's `ib_*_bw`/`ib_*_lat` — runs
//! over softrdma when this library comes first on `LD_LIBRARY_PATH`
//! (`softrdma exec -- PROGRAM ARGS…` arranges it).
//!
//! - `ffi`: the C structures of `<infiniband/verbs.h>`, checked against the
//!   real header at build time (build.rs).
//! - `handle`: the one handle type behind every pointer we hand out
//!   (registry, magic word, lookup, destroy, parent references, EBUSY).
//! - `config`, `device`: which devices exist (`SOFTRDMA_ADDR`,
//!   `$SOFTRDMA_CONFIG` or `/etc/softrdma.conf`, else a loopback address
//!   per process) and the device list.
//! - `context`: `ibv_open_device`/`ibv_close_device`, asynchronous events;
//!   `query`: device, port, GID and P_Key queries.
//! - one module per object: `pd`, `mr`, `channel`, `cq`, `srq`, `ah`, `qp`;
//!   `domain`: thread and parent domains; `import`: `ibv_import_*`;
//!   `post`: the data path (`ibv_post_send`/`recv`; `ibv_poll_cq` is in
//!   `cq` and, like softrdma's `CompletionQueue::poll`, drives progress
//!   inline, so a spinning poller makes progress itself).
//! - `qpex`, `cqex`: the `ibv_wr_*` post-send API and extended CQ polling.
//! - `rdmacm`: librdmacm (rdma_cm) in the same library, exported under
//!   RDMACM_1.x; `librdmacm.so.1` is a symlink to this file.
//! - `sysfs`: the view of the devices the preload library shows in sysfs
//!   (`softrdma_sysfs_root`, softrdma's own export).
//! - `misc`, `exports`: everything else exported, and the symbol versions.
//!
//! Every exported function stops panics at the boundary (`util::guard`)
//! and checks its pointers: control-path verbs against the registry of
//! live objects, data-path verbs by the magic word.
//!
//! # The C boundary
//!
//! Every exported function is `unsafe`: its `# Safety` section names the
//! C function whose contract it keeps, which is rdma-core's (the
//! prototype in `<infiniband/verbs.h>` / `<rdma/rdma_cma.h>`, and the man
//! page). In short: each pointer argument is NULL where the prototype
//! allows it, else valid for reads (and writes, where the function fills
//! it) of what it points to, with the lengths the call gives, for the
//! duration of the call; objects passed in were made by this library and
//! are not yet destroyed. What the library checks beyond that — a NULL
//! where none is allowed, a foreign or already destroyed handle that the
//! registry or the magic word does not know — is an error return (errno,
//! NULL), never a crash; a handle freed and its memory reused by the
//! program is a use-after-free, as with rdma-core.

// Unit tests build without the exports (their `.symver`s need the version
// script of the shared library), so most functions are unused there.
#![cfg_attr(test, allow(dead_code, unused_imports))]

#[allow(non_camel_case_types, non_snake_case, missing_docs, dead_code)]
pub mod ffi;

mod acks;
#[allow(missing_docs)]
mod ah;
#[allow(missing_docs)]
mod channel;
#[allow(missing_docs)]
pub mod config;
#[allow(missing_docs)]
mod context;
#[allow(missing_docs)]
mod cq;
#[allow(missing_docs)]
mod cqex;
#[allow(missing_docs)]
mod device;
#[allow(missing_docs)]
mod domain;
// The versioned exports are jumps written in x86-64 assembly (`endbr64`,
// `jmp`, ELF `.symver`): on another architecture the library would load
// but bind no versioned symbol, so it refuses to build instead.
#[cfg(target_arch = "x86_64")]
#[allow(missing_docs)]
mod exports;
#[cfg(not(target_arch = "x86_64"))]
compile_error!(
    "softrdma-ibverbs: src/exports.rs (the versioned C exports) is x86-64 \
     assembly; port its two macros (`export!`, `export_data!`) to this \
     architecture first"
);
mod fork;
#[allow(missing_docs)]
mod handle;
#[allow(missing_docs)]
mod import;
#[allow(missing_docs)]
mod misc;
#[allow(missing_docs)]
mod mr;
#[allow(missing_docs)]
mod mw;
#[allow(missing_docs)]
mod pd;
#[allow(missing_docs)]
mod post;
#[allow(missing_docs)]
mod qp;
#[allow(missing_docs)]
mod qpex;
#[allow(missing_docs)]
mod query;
#[allow(missing_docs)]
mod rdmacm;
mod reach;
#[allow(missing_docs)]
mod srq;
#[allow(missing_docs)]
mod sysfs;
#[allow(missing_docs)]
mod util;
mod xrc;
