//! The memory features seen from C, through libibverbs.so.1 with
//! AddressSanitizer and UBSan: memory windows (`tests/c/mw.c`), FLUSH and
//! ATOMIC WRITE (`tests/c/placement.c`), on-demand paging, implicit
//! regions, `ibv_advise_mr` and `ibv_rereg_mr` (`tests/c/odp.c`). Each
//! program prints one line per check and exits with its number of
//! failures; the device sits on its own loopback address (127.63.0.x).

mod common;

use common::*;

#[test]
fn c_memory_windows() {
    run_c("mw", "127.63.0.1");
}

#[test]
fn c_flush_and_atomic_write() {
    run_c("placement", "127.63.0.2");
}

#[test]
fn c_on_demand_paging_advise_and_rereg() {
    run_c("odp", "127.63.0.3");
}
