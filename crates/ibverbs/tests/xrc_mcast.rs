//! XRC and UD multicast seen from C, through libibverbs.so.1 with
//! AddressSanitizer and UBSan: `tests/c/xrc.c` (XRC domains and their file
//! sharing, XRC SRQs, INI and TGT QPs, `ibv_open_qp`, traffic through the
//! named SRQs) and `tests/c/mcast.c` (attach/detach rules, SENDs to a
//! group reaching each attached QP of the device with a matching Q_Key).
//! Each program prints one line per check and exits with its number of
//! failures; the device sits on its own loopback address (127.67.7.x).

mod common;

use common::*;

#[test]
fn c_xrc() {
    run_c("xrc", "127.67.7.1");
}

#[test]
fn c_multicast() {
    run_c("mcast", "127.67.7.2");
}
