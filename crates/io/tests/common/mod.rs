//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::io::IoSliceMut;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use softrdma_io::{Poller, RecvMeta, SocketConfig, UdpSocket, BATCH_SIZE, GRO_BUF_LEN};

/// Upper bound on waiting for datagrams that must arrive; only a guard
/// against hanging, never a pass/fail criterion for speed.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// One received buffer, split into its datagrams (GRO strides).
#[derive(Debug, Clone)]
pub struct Received {
    pub meta: RecvMeta,
    pub data: Vec<u8>,
}

impl Received {
    pub fn datagrams(&self) -> Vec<Vec<u8>> {
        self.meta
            .datagrams(&self.data)
            .map(|d| d.to_vec())
            .collect()
    }
}

/// Receives until `want` datagrams (counting GRO segments) have arrived.
/// Panics if they do not arrive within [`PATIENCE`].
pub fn recv_datagrams(sock: &UdpSocket, want: usize) -> Vec<Received> {
    let mut poller = Poller::new(sock).unwrap();
    let mut storage = vec![vec![0u8; GRO_BUF_LEN]; BATCH_SIZE];
    let mut meta = [RecvMeta::default(); BATCH_SIZE];
    let mut out = Vec::new();
    let mut count = 0;
    let deadline = Instant::now() + PATIENCE;
    while count < want {
        let mut bufs: Vec<IoSliceMut<'_>> =
            storage.iter_mut().map(|b| IoSliceMut::new(b)).collect();
        match sock.recv(&mut bufs, &mut meta) {
            Ok(n) => {
                for i in 0..n {
                    count += meta[i].segments();
                    out.push(Received {
                        meta: meta[i],
                        data: storage[i][..meta[i].len].to_vec(),
                    });
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let left = deadline.saturating_duration_since(Instant::now());
                assert!(
                    !left.is_zero(),
                    "only {count} of {want} datagrams arrived in {PATIENCE:?}"
                );
                poller.wait(Some(left)).unwrap();
            }
            Err(e) => panic!("recv: {e}"),
        }
    }
    assert_eq!(count, want, "more datagrams arrived than were sent");
    out
}

/// Receives whatever is queued right now, without waiting.
pub fn recv_queued(sock: &UdpSocket) -> Vec<Received> {
    let mut storage = vec![vec![0u8; GRO_BUF_LEN]; BATCH_SIZE];
    let mut meta = [RecvMeta::default(); BATCH_SIZE];
    let mut out = Vec::new();
    loop {
        let mut bufs: Vec<IoSliceMut<'_>> =
            storage.iter_mut().map(|b| IoSliceMut::new(b)).collect();
        match sock.recv(&mut bufs, &mut meta) {
            Ok(n) => {
                for i in 0..n {
                    out.push(Received {
                        meta: meta[i],
                        data: storage[i][..meta[i].len].to_vec(),
                    });
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return out,
            Err(e) => panic!("recv: {e}"),
        }
    }
}

pub fn bind(addr: &str) -> UdpSocket {
    UdpSocket::bind(addr.parse::<SocketAddr>().unwrap()).unwrap()
}

pub fn bind_with(addr: &str, cfg: &SocketConfig) -> UdpSocket {
    UdpSocket::bind_with(addr.parse::<SocketAddr>().unwrap(), cfg).unwrap()
}

/// A payload whose bytes identify its sequence number and length.
pub fn payload(seq: u32, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(seq) as u8)
        .collect();
    if len >= 4 {
        v[..4].copy_from_slice(&seq.to_be_bytes());
    }
    v
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Prints a loud skip notice. Written to the stderr handle directly, which
/// libtest's output capture (it only intercepts the print macros) lets
/// through; nextest shows it with `--success-output immediate`.
/// A test that cannot run here: skipped with a loud notice only when the
/// user opted out with `SOFTRDMA_SKIP_NETNS` (as softrdma's netns test
/// does); otherwise it fails, so that CI (root, everything installed)
/// never passes it unseen.
pub fn skip(test: &str, why: &str) {
    use std::io::Write;
    if std::env::var_os("SOFTRDMA_SKIP_NETNS").is_none() {
        panic!("{test}: {why}; set SOFTRDMA_SKIP_NETNS=1 to skip it");
    }
    let _ = writeln!(
        std::io::stderr(),
        "\n*** SKIPPED {test}: {why} (SOFTRDMA_SKIP_NETNS set) ***\n"
    );
}
