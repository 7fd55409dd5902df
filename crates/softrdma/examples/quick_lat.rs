//! 8-byte RDMA WRITE ping-pong between two devices in one process, each
//! side spinning on its last byte and driving progress itself (engine
//! tuning aid; the real tool is `softrdma perf write-lat`).
use softrdma::cm::{connect_rc, Connection, Listener};
use softrdma::*;
use std::time::Instant;

fn pong(
    dev: &Device,
    mr: &MemoryRegion,
    qp: &QueuePair,
    cq: &CompletionQueue,
    remote: (u64, RKey),
    iters: u32,
    first: bool,
) -> Result<Vec<u64>> {
    let mut wcs = [EMPTY_WC; 16];
    let mut lat = Vec::with_capacity(iters as usize);
    let mut t = Instant::now();
    for i in 1..=iters {
        let v = (i % 250) as u8 + 1;
        if !first {
            while mr.load_u8(7) != v {
                dev.progress();
            }
        }
        mr.write(8, &[0, 0, 0, 0, 0, 0, 0, v]);
        let mut wr = SendWr::new(i as u64, WrOpcode::RdmaWrite);
        wr.flags = SendFlags::INLINE;
        wr.inline_data = mr.to_vec(8, 8);
        wr.remote_addr = remote.0;
        wr.rkey = remote.1;
        if i % 64 == 0 {
            wr.flags = wr.flags.with(SendFlags::SIGNALED);
        }
        qp.post_send(wr)?;
        if first {
            while mr.load_u8(7) != v {
                dev.progress();
            }
            let now = Instant::now();
            lat.push(now.duration_since(t).as_nanos() as u64 / 2);
            t = now;
        }
        while cq.poll(&mut wcs)? > 0 {}
    }
    Ok(lat)
}

/// [`pong`] over connection `c`, between two barriers (both sides start
/// together, and neither leaves while the other still writes).
fn ping_pong(
    dev: &Device,
    mr: &MemoryRegion,
    c: &mut Connection,
    cq: &CompletionQueue,
    iters: u32,
    first: bool,
) -> Result<Vec<u64>> {
    cm::barrier(&mut c.stream)?;
    let remote = (c.remote.va, c.remote.rkey);
    let lat = pong(dev, mr, &c.qp, cq, remote, iters, first)?;
    cm::barrier(&mut c.stream)?;
    Ok(lat)
}

fn main() -> Result<()> {
    let iters: u32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20000);
    let listener = Listener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?.to_string();
    let access = Access::LOCAL_WRITE.with(Access::REMOTE_WRITE);
    let srv = std::thread::spawn(move || -> Result<()> {
        let dev = Device::open_default()?;
        let pd = dev.alloc_pd()?;
        let cq = dev.create_cq(1024, None)?;
        let mr = pd.alloc_mr(4096, access)?;
        let mut c =
            listener.accept_rc(&pd, &cq, QpType::Rc, Some(&mr), &ConnectOptions::default())?;
        ping_pong(&dev, &mr, &mut c, &cq, iters, false)?;
        Ok(())
    });
    let dev = Device::open_default()?;
    let pd = dev.alloc_pd()?;
    let cq = dev.create_cq(1024, None)?;
    let mr = pd.alloc_mr(4096, access)?;
    let mut c = connect_rc(
        &addr,
        &pd,
        &cq,
        QpType::Rc,
        Some(&mr),
        &ConnectOptions::default(),
    )?;
    let mut lat = ping_pong(&dev, &mr, &mut c, &cq, iters, true)?;
    srv.join().unwrap()?;
    lat.sort_unstable();
    let p = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)] as f64 / 1000.0;
    println!(
        "write-lat 8 B one-way: min {:.2} median {:.2} p99 {:.2} us",
        p(0.0),
        p(0.5),
        p(0.99)
    );
    Ok(())
}
