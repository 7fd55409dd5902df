//! What one core moves, into a 1 MiB destination, by the receiver's two
//! ways of taking a same-host peer's payload (issue 19): copying 4 KiB
//! packets out of a 4 MiB ring in this process (today's path: the sender
//! copied them in) vs `process_vm_readv` straight from the peer's memory
//! (`softrdma_io::cma`), at several sizes per call. Rounds alternate; the
//! medians and each round's ratio to the ring copy are printed. The ring
//! copy here reads lines this core wrote (warm caches), where the real
//! path's receiver reads lines the sender's core just wrote: it is an
//! upper bound of the receiver's copy, not its figure.
//!
//! ```text
//! cargo run --release -p softrdma-io --example cma_bw -- [--secs S] [--rounds N]
//! ```
//! The peer is this program run again (`--peer`): it fills 4 MiB, prints
//! its pid and the buffer's address, and waits for its stdin to close.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PEER_BYTES: usize = 4 << 20;
const DEST: usize = 1 << 20;
const PACKET: usize = 4096;
/// A ring record's header in front of each packet (as the path's ring).
const RECORD: usize = PACKET + 64;

fn peer() {
    let buf: Vec<u8> = (0..PEER_BYTES).map(|i| i as u8).collect();
    println!("{} {}", std::process::id(), buf.as_ptr() as usize);
    std::io::stdout().flush().unwrap();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop(buf);
}

/// GB/s of copying 4 KiB packets from a ring into `dest` for `secs`.
fn ring_copy(dest: &mut [u8], ring: &[u8], secs: Duration) -> f64 {
    let t = Instant::now();
    let (mut moved, mut at) = (0usize, 0usize);
    while t.elapsed() < secs {
        for o in (0..DEST).step_by(PACKET) {
            dest[o..o + PACKET].copy_from_slice(&ring[at + 64..at + 64 + PACKET]);
            at += RECORD;
            if at + RECORD > ring.len() {
                at = 0;
            }
            moved += PACKET;
        }
        std::hint::black_box(&mut *dest);
    }
    moved as f64 / t.elapsed().as_secs_f64() / 1e9
}

/// GB/s of `process_vm_readv` from the peer into `dest`, `chunk` bytes a call.
fn cma(dest: &mut [u8], pid: i32, addr: usize, chunk: usize, secs: Duration) -> f64 {
    let t = Instant::now();
    let (mut moved, mut at) = (0usize, 0usize);
    while t.elapsed() < secs {
        for o in (0..DEST).step_by(chunk) {
            softrdma_io::cma::read_into(pid, addr + at, &mut dest[o..o + chunk]).expect("readv");
            at = (at + chunk) % PEER_BYTES;
            moved += chunk;
        }
    }
    moved as f64 / t.elapsed().as_secs_f64() / 1e9
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--peer") {
        return peer();
    }
    let opt = |name: &str, dflt: f64| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(dflt)
    };
    let secs = Duration::from_secs_f64(opt("--secs", 1.0));
    let rounds = opt("--rounds", 5.0) as usize;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .arg("--peer")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("peer");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let mut it = line.split_whitespace().map(|x| x.parse::<usize>().unwrap());
    let (pid, addr) = (it.next().unwrap() as i32, it.next().unwrap());
    println!(
        "yama ptrace_scope {:?}; allowed: {:?}",
        softrdma_io::cma::yama_scope(),
        softrdma_io::cma::probe(pid, addr + 1, &[1, 2, 3])
    );
    let ring = vec![7u8; PEER_BYTES];
    let mut dest = vec![0u8; DEST];
    let chunks = [4096usize, 16384, 65536, 262144, DEST];
    let mut base = Vec::new();
    let mut figs = vec![Vec::new(); chunks.len()];
    for r in 0..rounds {
        let order: Vec<usize> = if r % 2 == 0 {
            (0..=chunks.len()).collect()
        } else {
            (0..=chunks.len()).rev().collect()
        };
        for k in order {
            if k == chunks.len() {
                base.push(ring_copy(&mut dest, &ring, secs));
            } else {
                figs[k].push(cma(&mut dest, pid, addr, chunks[k], secs));
            }
        }
    }
    let b = median(&mut base.clone());
    println!(
        "ring copy, 4 KiB a packet (warm caches: an upper bound): {b:.2} GB/s (rounds {base:.2?})"
    );
    for (c, f) in chunks.iter().zip(&figs) {
        let ratios: Vec<f64> = f.iter().zip(&base).map(|(x, y)| x / y).collect();
        println!(
            "process_vm_readv {:>7} B a call: {:.2} GB/s, vs ring copy median ratio {:.2} (rounds {:.2?})",
            c,
            median(&mut f.clone()),
            median(&mut ratios.clone()),
            f
        );
    }
    drop(child.stdin.take());
    let _ = child.wait();
}
