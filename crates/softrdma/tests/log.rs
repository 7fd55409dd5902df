//! The log (`SOFTRDMA_LOG`, tracing): a packet the core drops is logged
//! at debug with its reason, its QP and its sender.

use softrdma::{Device, DeviceOptions};
use std::io::Write;
use std::net::UdpSocket;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A writer into a shared buffer, for the test's subscriber.
#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Buf {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// A RoCE v2 RC SEND ONLY to `qpn` with PSN 7 and an ICRC of zeros.
fn bad_icrc_packet(qpn: u32) -> Vec<u8> {
    let mut p = vec![0x04, 0x00, 0xff, 0xff, 0x00];
    p.extend_from_slice(&qpn.to_be_bytes()[1..]);
    p.extend_from_slice(&[0x00, 0x00, 0x00, 0x07]);
    p.extend_from_slice(b"payload!");
    p.extend_from_slice(&[0; 4]);
    p
}

#[test]
fn dropped_packet_with_bad_icrc_logs_its_reason_at_debug() {
    // The program's own subscriber receives softrdma's events (SOFTRDMA_LOG
    // installs the same kind when set).
    let buf = Buf::default();
    let w = buf.clone();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("softrdma=debug"))
        .with_writer(move || w.clone())
        .with_ansi(false)
        .init();
    let dev = Device::open(DeviceOptions::default()).unwrap();
    let peer = UdpSocket::bind((dev.local_addr().ip(), 0)).unwrap();
    let from = peer.local_addr().unwrap();
    peer.send_to(&bad_icrc_packet(0x1234), dev.local_addr())
        .unwrap();
    let want = "dropped packet: bad ICRC";
    let deadline = Instant::now() + Duration::from_secs(10);
    while !buf.text().contains(want) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let log = buf.text();
    let line = log
        .lines()
        .find(|l| l.contains(want))
        .unwrap_or_else(|| panic!("no {want:?} in the log:\n{log}"));
    println!("{line}");
    assert!(line.contains("DEBUG"), "{line}");
    assert!(line.contains("softrdma::engine"), "{line}");
    assert!(line.contains("qpn=0x001234"), "{line}");
    assert!(line.contains("psn=7"), "{line}");
    assert!(line.contains(&format!("from={from}")), "{line}");
    assert_eq!(dev.counters().icrc_errors, 1);
}
