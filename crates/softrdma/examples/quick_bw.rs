//! Quick RDMA WRITE bandwidth between two devices in one process (engine
//! tuning aid; the real tool is `softrdma perf write-bw`).
use softrdma::cm::{connect_rc, Listener};
use softrdma::*;
use std::time::{Duration, Instant};

fn main() -> Result<()> {
    let size: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(65536);
    let depth: usize = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(64);
    let secs: f64 = std::env::args()
        .nth(3)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let op = std::env::var("OP").unwrap_or_else(|_| "write".into());
    let listener = Listener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?.to_string();
    let access = Access::LOCAL_WRITE
        .with(Access::REMOTE_WRITE)
        .with(Access::REMOTE_READ);
    let buf = size * depth;
    let srv = std::thread::spawn(move || -> Result<()> {
        let dev = Device::open_default()?;
        let pd = dev.alloc_pd()?;
        let cq = dev.create_cq(1024, None)?;
        let mr = pd.alloc_mr(buf, access)?;
        let mut c =
            listener.accept_rc(&pd, &cq, QpType::Rc, Some(&mr), &ConnectOptions::default())?;
        cm::barrier(&mut c.stream)?;
        eprintln!(
            "server {:?} {:?}",
            dev.counters().nonzero(),
            dev.socket_stats()
        );
        Ok(())
    });
    let dev = Device::open_default()?;
    let pd = dev.alloc_pd()?;
    let cq = dev.create_cq(4096, None)?;
    let mr = pd.alloc_mr(buf, access)?;
    let mut c = connect_rc(
        &addr,
        &pd,
        &cq,
        QpType::Rc,
        Some(&mr),
        &ConnectOptions::default(),
    )?;
    let mut wcs = [EMPTY_WC; 64];
    let cpu0 = cpu_secs();
    let t0 = Instant::now();
    let (mut posted, mut done) = (0usize, 0usize);
    while t0.elapsed() < Duration::from_secs_f64(secs) {
        while posted - done < depth {
            let slot = posted % depth;
            let mut wr = SendWr::new(
                posted as u64,
                if op == "read" {
                    WrOpcode::RdmaRead
                } else {
                    WrOpcode::RdmaWrite
                },
            );
            wr.sg_list = vec![mr.sge(slot * size, size as u32)];
            wr.remote_addr = c.remote.va + (slot * size) as u64;
            wr.rkey = c.remote.rkey;
            c.qp.post_send(wr)?;
            posted += 1;
        }
        let n = cq.poll(&mut wcs)?;
        for w in &wcs[..n] {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
        }
        done += n;
    }
    while done < posted {
        done += cq.poll(&mut wcs)?;
    }
    let el = t0.elapsed().as_secs_f64();
    let cpu = cpu_secs() - cpu0;
    let gb = (done * size) as f64 / 1e9;
    println!(
        "{op} size {size} depth {depth}: {:.3} GB/s, {:.3} Mmsg/s, {:.2} CPU-s per GB",
        gb / el,
        done as f64 / el / 1e6,
        cpu / gb
    );
    eprintln!(
        "client {:?} {:?}",
        dev.counters().nonzero(),
        dev.socket_stats()
    );
    cm::barrier(&mut c.stream)?;
    srv.join().unwrap()?;
    Ok(())
}

/// User + system CPU time of the whole process (both devices).
fn cpu_secs() -> f64 {
    let t = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let f: Vec<&str> = t
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: f64 = f.get(11).and_then(|u| u.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
    ticks / 100.0
}
