//! Loopback micro-benchmark for softrdma-io: throughput of RoCE-sized
//! datagrams (4 KiB payload) between two sockets in two threads, with and
//! without GSO/GRO, next to plain `std::net::UdpSocket` as the baseline;
//! then ping-pong latency with busy polling and with epoll sleeps.
//!
//! ```text
//! cargo run --release -p softrdma-io --example udp_bw -- [--secs S] [--payload BYTES] [--only NAME]
//! ```
//!
//! Every throughput run uses a credit window (the receiver publishes how
//! many datagrams it has taken; the sender keeps at most `WINDOW` in
//! flight), as the RDMA transport will, so figures are delivered datagrams
//! rather than what the kernel dropped. Drops are printed anyway.

use std::io::IoSliceMut;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use softrdma_io::{
    max_gso_segments_for, GatherTransmit, IoPiece, Poller, RecvMeta, SocketConfig, Transmit,
    UdpSocket, BATCH_SIZE, GRO_BUF_LEN,
};

/// RoCE overhead inside the UDP payload for an RDMA WRITE first packet:
/// BTH (12) + RETH (16) + ICRC (4).
const ROCE_OVERHEAD: usize = 32;
/// Datagrams the sender may have in flight (about 4 MiB at 4 KiB each).
const WINDOW: u64 = 1024;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// std::net::UdpSocket, one send_to / recv_from per datagram.
    Std,
    /// sendmmsg/recvmmsg, one datagram per message, no GSO/GRO.
    Batch,
    /// sendmmsg with GSO super-datagrams; receiver without GRO.
    Gso,
    /// GSO send, GRO receive.
    GsoGro,
    /// GSO send from header/payload/trailer slices, GRO receive.
    GatherGsoGro,
}

struct Args {
    secs: f64,
    payload: usize,
    only: Option<String>,
    /// How long the receiver keeps polling after running dry before it
    /// sleeps in epoll (the engine busy-polls while there is work).
    spin: Duration,
}

fn parse_args() -> Args {
    let mut a = Args {
        secs: 2.0,
        payload: 4096,
        only: None,
        spin: Duration::from_micros(50),
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it.next().unwrap_or_default();
        match k.as_str() {
            "--secs" => a.secs = v.parse().expect("--secs SECONDS"),
            "--payload" => a.payload = v.parse().expect("--payload BYTES"),
            "--only" => a.only = Some(v),
            "--spin-us" => a.spin = Duration::from_micros(v.parse().expect("--spin-us MICROS")),
            _ => {
                eprintln!("usage: udp_bw [--secs S] [--payload BYTES] [--spin-us US] [--only std|batch|gso|gso-gro|gather|timer|pingpong]");
                std::process::exit(2);
            }
        }
    }
    a
}

struct Outcome {
    datagrams: u64,
    elapsed: Duration,
    drops: u32,
    send_calls: u64,
    /// CPU time of the sending and the receiving thread.
    tx_cpu: Duration,
    rx_cpu: Duration,
}

/// CPU time consumed by the calling thread so far.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live timespec the kernel fills in.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(r, 0);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn main() {
    let args = parse_args();
    let dgram = args.payload + ROCE_OVERHEAD;
    let want = |name: &str| !matches!(args.only.as_deref(), Some(o) if o != name);
    println!(
        "udp_bw: {} B payload + {} B RoCE headers = {} B datagrams, {:.1} s per run, window {} datagrams, receiver spins {:?} before sleeping",
        args.payload, ROCE_OVERHEAD, dgram, args.secs, WINDOW, args.spin
    );
    let runs = [
        ("std", Mode::Std),
        ("batch", Mode::Batch),
        ("gso", Mode::Gso),
        ("gso-gro", Mode::GsoGro),
        ("gather", Mode::GatherGsoGro),
    ];
    let mut baseline = None;
    for (name, mode) in runs {
        if !want(name) {
            continue;
        }
        let o = throughput(mode, dgram, Duration::from_secs_f64(args.secs), args.spin);
        let secs = o.elapsed.as_secs_f64();
        let payload_gbs = (o.datagrams as f64 * args.payload as f64) / secs / 1e9;
        let wire_gbs = (o.datagrams as f64 * dgram as f64) / secs / 1e9;
        let ratio = match (mode, baseline) {
            (Mode::Std, _) => {
                baseline = Some(payload_gbs);
                String::new()
            }
            (_, Some(b)) => format!("  x{:.2} vs std", payload_gbs / b),
            _ => String::new(),
        };
        let bytes = o.datagrams as f64 * args.payload as f64;
        println!(
            "{name:>8}: {payload_gbs:6.2} GB/s payload ({wire_gbs:5.2} GB/s datagrams), {:5.0} k datagrams/s, {:6.1} k send calls/s, {} drops{ratio}",
            o.datagrams as f64 / secs / 1e3,
            o.send_calls as f64 / secs / 1e3,
            o.drops,
        );
        println!(
            "{:>8}  CPU: sender {:3.0}% ({:5.2} GB per CPU-second), receiver {:3.0}% ({:5.2} GB per CPU-second)",
            "",
            o.tx_cpu.as_secs_f64() / secs * 100.0,
            bytes / o.tx_cpu.as_secs_f64() / 1e9,
            o.rx_cpu.as_secs_f64() / secs * 100.0,
            bytes / o.rx_cpu.as_secs_f64() / 1e9,
        );
    }
    if want("timer") {
        let sock = UdpSocket::bind(addr("127.0.0.1:0")).unwrap();
        let mut poller = Poller::new(&sock).unwrap();
        for us in [50u64, 200, 1500] {
            let t = Duration::from_micros(us);
            let n = 200;
            let start = Instant::now();
            for _ in 0..n {
                poller.wait(Some(t)).unwrap();
            }
            let per = start.elapsed().as_secs_f64() * 1e6 / f64::from(n);
            println!(
                "   timer: wait({us} us) with nothing to do returns after {per:6.1} us on average"
            );
        }
    }
    if want("pingpong") {
        for size in [64, dgram] {
            for (busy, ancillary) in [(true, true), (true, false), (false, true)] {
                let (p50, p99, mean) = ping_pong(size, busy, ancillary, 20_000);
                println!(
                    "pingpong {size:>5} B {}: RTT p50 {:5.1} us, p99 {:5.1} us, mean {:5.1} us (one-way p50 {:4.1} us)",
                    match (busy, ancillary) {
                        (true, true) => "busy-poll ",
                        (true, false) => "busy, bare",
                        _ => "epoll wait",
                    },
                    p50,
                    p99,
                    mean,
                    p50 / 2.0
                );
            }
            let (p50, p99, mean) = ping_pong_std(size, 20_000);
            println!(
                "pingpong {size:>5} B std busy : RTT p50 {p50:5.1} us, p99 {p99:5.1} us, mean {mean:5.1} us (std::net::UdpSocket, nonblocking recv_from spin)"
            );
        }
    }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn throughput(mode: Mode, dgram: usize, dur: Duration, spin: Duration) -> Outcome {
    let gro = matches!(mode, Mode::GsoGro | Mode::GatherGsoGro);
    let mut rx_cfg = SocketConfig::default();
    rx_cfg.gro = gro;
    let rx = Arc::new(UdpSocket::bind_with(addr("127.0.0.1:0"), &rx_cfg).unwrap());
    let dst = rx.local_addr();
    let received = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));

    let receiver = {
        let rx = rx.clone();
        let received = received.clone();
        let stop = stop.clone();
        thread::spawn(move || receive_loop(mode, &rx, &received, &stop, spin))
    };

    let mut send_calls = 0u64;
    let mut sent = 0u64;
    let cpu0 = thread_cpu();
    let start = Instant::now();
    let deadline = start + dur;
    match mode {
        Mode::Std => {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let buf = vec![0x5au8; dgram];
            while Instant::now() < deadline {
                if sent - received.load(Ordering::Acquire) >= WINDOW {
                    thread::yield_now();
                    continue;
                }
                s.send_to(&buf, dst).unwrap();
                sent += 1;
                send_calls += 1;
            }
        }
        _ => {
            let tx = UdpSocket::bind(addr("127.0.0.1:0")).unwrap();
            let gso = !matches!(mode, Mode::Batch);
            let segs = if gso {
                max_gso_segments_for(&dst, dgram).min(tx.max_gso_segments())
            } else {
                1
            };
            let run = vec![0x5au8; segs * dgram];
            // Gather form: per datagram a 28-byte header, the payload from a
            // separate "registered" buffer, and a 4-byte trailer.
            let hdr = [0x11u8; ROCE_OVERHEAD - 4];
            let trailer = [0x22u8; 4];
            let mr = vec![0x33u8; segs * (dgram - ROCE_OVERHEAD)];
            let pay = dgram - ROCE_OVERHEAD;
            let slices: Vec<IoPiece<'_>> = (0..segs)
                .flat_map(|i| {
                    [
                        IoPiece::new(&hdr),
                        IoPiece::new(&mr[i * pay..(i + 1) * pay]),
                        IoPiece::new(&trailer),
                    ]
                })
                .collect();
            let mut t = Transmit::new(dst, &run);
            t.segment_size = gso.then_some(dgram);
            let mut g = GatherTransmit::new(dst, &slices);
            g.segment_size = Some(dgram);
            let batch = vec![t; BATCH_SIZE];
            let gbatch = vec![g; BATCH_SIZE];
            let per = segs as u64;
            while Instant::now() < deadline {
                let room = WINDOW.saturating_sub(sent - received.load(Ordering::Acquire)) / per;
                if room == 0 {
                    thread::yield_now();
                    continue;
                }
                let k = (room as usize).min(BATCH_SIZE);
                let n = if mode == Mode::GatherGsoGro {
                    tx.send_gather(&gbatch[..k]).unwrap()
                } else {
                    tx.send(&batch[..k]).unwrap()
                };
                send_calls += 1;
                sent += n as u64 * per;
            }
            let s = tx.stats();
            assert_eq!(s.send_errors, 0, "{s:?}");
        }
    }
    let elapsed = start.elapsed();
    let tx_cpu = thread_cpu() - cpu0;
    let datagrams = received.load(Ordering::Acquire);
    stop.store(true, Ordering::Release);
    let rx_cpu = receiver.join().unwrap();
    Outcome {
        datagrams,
        elapsed,
        drops: rx.stats().recv_dropped,
        send_calls,
        tx_cpu,
        rx_cpu,
    }
}

fn receive_loop(
    mode: Mode,
    rx: &UdpSocket,
    received: &AtomicU64,
    stop: &AtomicBool,
    spin: Duration,
) -> Duration {
    let cpu0 = thread_cpu();
    let mut idle_since: Option<Instant> = None;
    let mut idle = |poller: &mut Poller| {
        let now = Instant::now();
        let since = *idle_since.get_or_insert(now);
        if now - since >= spin {
            poller.wait(Some(Duration::from_millis(1))).unwrap();
            idle_since = None;
        }
    };
    let mut poller = Poller::new(rx).unwrap();
    let buf_len = if rx.gro_enabled() { GRO_BUF_LEN } else { 8192 };
    let mut storage = vec![vec![0u8; buf_len]; BATCH_SIZE];
    let mut meta = [RecvMeta::default(); BATCH_SIZE];
    let std_sock = (mode == Mode::Std).then(|| {
        // The baseline receives with std too: a dup of the same socket.
        let fd = std::os::fd::AsFd::as_fd(rx).try_clone_to_owned().unwrap();
        std::net::UdpSocket::from(fd)
    });
    while !stop.load(Ordering::Acquire) {
        if let Some(s) = &std_sock {
            match s.recv_from(&mut storage[0]) {
                Ok(_) => {
                    received.fetch_add(1, Ordering::Release);
                }
                Err(_) => idle(&mut poller),
            }
            continue;
        }
        let mut bufs: Vec<IoSliceMut<'_>> =
            storage.iter_mut().map(|b| IoSliceMut::new(b)).collect();
        match rx.recv(&mut bufs, &mut meta) {
            Ok(n) => {
                let segs: usize = meta[..n].iter().map(RecvMeta::segments).sum();
                received.fetch_add(segs as u64, Ordering::Release);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => idle(&mut poller),
            Err(e) => panic!("recv: {e}"),
        }
    }
    thread_cpu() - cpu0
}

/// Returns RTT p50, p99 and mean in microseconds.
/// With `ancillary` off, no control messages are received ("bare").
fn ping_pong(size: usize, busy: bool, ancillary: bool, iters: usize) -> (f64, f64, f64) {
    let mut cfg = SocketConfig::default();
    cfg.recv_dst_ip = ancillary;
    cfg.recv_tos = ancillary;
    cfg.recv_ttl = ancillary;
    cfg.recv_drop_count = ancillary;
    let a = UdpSocket::bind_with(addr("127.0.0.1:0"), &cfg).unwrap();
    let b = Arc::new(UdpSocket::bind_with(addr("127.0.0.1:0"), &cfg).unwrap());
    let a_addr = a.local_addr();
    let b_addr = b.local_addr();
    let warmup = 2_000;
    let total = warmup + iters;
    let echo = {
        let b = b.clone();
        thread::spawn(move || {
            let mut poller = Poller::new(&*b).unwrap();
            let mut buf = vec![0u8; GRO_BUF_LEN];
            let mut meta = [RecvMeta::default(); 1];
            let mut n = 0;
            while n < total {
                match b.recv(&mut [IoSliceMut::new(&mut buf)], &mut meta) {
                    Ok(_) => {
                        let t = Transmit::new(a_addr, &buf[..meta[0].len]);
                        while b.send(&[t]).unwrap() == 0 {}
                        n += 1;
                    }
                    Err(_) if busy => std::hint::spin_loop(),
                    Err(_) => {
                        poller.wait(Some(Duration::from_secs(5))).unwrap();
                    }
                }
            }
        })
    };
    let mut poller = Poller::new(&a).unwrap();
    let msg = vec![0x77u8; size];
    let mut buf = vec![0u8; GRO_BUF_LEN];
    let mut meta = [RecvMeta::default(); 1];
    let mut rtts = Vec::with_capacity(iters);
    for i in 0..total {
        let t0 = Instant::now();
        while a.send(&[Transmit::new(b_addr, &msg)]).unwrap() == 0 {}
        loop {
            match a.recv(&mut [IoSliceMut::new(&mut buf)], &mut meta) {
                Ok(_) => break,
                Err(_) if busy => std::hint::spin_loop(),
                Err(_) => {
                    poller.wait(Some(Duration::from_secs(5))).unwrap();
                }
            }
        }
        if i >= warmup {
            rtts.push(t0.elapsed().as_nanos() as f64 / 1e3);
        }
    }
    echo.join().unwrap();
    median_p99_mean(rtts)
}

/// The median, 99th percentile and mean of round trips `rtts` (µs).
fn median_p99_mean(mut rtts: Vec<f64>) -> (f64, f64, f64) {
    rtts.sort_by(f64::total_cmp);
    let mean = rtts.iter().sum::<f64>() / rtts.len() as f64;
    (rtts[rtts.len() / 2], rtts[rtts.len() * 99 / 100], mean)
}

/// The baseline: std::net::UdpSocket, nonblocking `recv_from` spinning.
fn ping_pong_std(size: usize, iters: usize) -> (f64, f64, f64) {
    let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    let a_addr = a.local_addr().unwrap();
    let b_addr = b.local_addr().unwrap();
    let warmup = 2_000;
    let total = warmup + iters;
    let echo = thread::spawn(move || {
        let mut buf = vec![0u8; GRO_BUF_LEN];
        let mut n = 0;
        while n < total {
            if let Ok((len, _)) = b.recv_from(&mut buf) {
                b.send_to(&buf[..len], a_addr).unwrap();
                n += 1;
            }
        }
    });
    let msg = vec![0x77u8; size];
    let mut buf = vec![0u8; GRO_BUF_LEN];
    let mut rtts = Vec::with_capacity(iters);
    for i in 0..total {
        let t0 = Instant::now();
        a.send_to(&msg, b_addr).unwrap();
        while a.recv_from(&mut buf).is_err() {}
        if i >= warmup {
            rtts.push(t0.elapsed().as_nanos() as f64 / 1e3);
        }
    }
    echo.join().unwrap();
    median_p99_mean(rtts)
}
