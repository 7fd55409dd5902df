//! The repeatable cost of softrdma's operations (for `scripts/cost`).
//!
//! Two devices in one process run either a ping-pong of 8-byte RDMA
//! WRITEs with immediate (`lat N`: N round trips) or a stream of RDMA
//! WRITEs (`bw N SIZE`: N writes of SIZE bytes, 16 in flight). Every wait
//! blocks on a completion channel and the progress threads do not
//! busy-poll, so no instruction is spent spinning: under valgrind the
//! instruction count per operation is the work softrdma does for it,
//! whatever the scheduler did. `scripts/cost` runs it for two values of N
//! and divides the difference, so device setup does not count.

use softrdma::*;
use std::time::Duration;

const DEPTH: usize = 16;
const T: Duration = Duration::from_secs(30);

struct Side {
    dev: Device,
    _pd: ProtectionDomain,
    ch: CompletionChannel,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
}

fn side(len: usize) -> Result<Side> {
    let dev = Device::open(DeviceOptions {
        spin: Some(Duration::ZERO),
        ..Default::default()
    })?;
    let pd = dev.alloc_pd()?;
    let ch = dev.create_comp_channel()?;
    let send_cq = dev.create_cq(256, Some(&ch))?;
    let recv_cq = dev.create_cq(256, Some(&ch))?;
    let qp = pd
        .qp_builder(QpType::Rc, &send_cq, &recv_cq)
        .max_send_wr(DEPTH as u32 * 2)
        .build()?;
    let mr = pd.alloc_mr(
        len,
        Access::LOCAL_WRITE
            .with(Access::REMOTE_WRITE)
            .with(Access::REMOTE_READ),
    )?;
    Ok(Side {
        dev,
        _pd: pd,
        ch,
        send_cq,
        recv_cq,
        qp,
        mr,
    })
}

/// Waits (blocking on the channel) until `cq` has a completion; returns it.
fn next(s: &Side, cq: &CompletionQueue) -> Result<Wc> {
    let mut wc = [EMPTY_WC; 1];
    loop {
        if cq.poll(&mut wc)? == 1 {
            return Ok(wc[0]);
        }
        cq.req_notify(false)?;
        // A completion may have arrived between the poll and the arming.
        if cq.poll(&mut wc)? == 1 {
            return Ok(wc[0]);
        }
        if s.ch.get_event(Some(T))?.is_none() {
            return Err(Error::InvalidArgument("no completion in 30 s".into()));
        }
    }
}

fn write_imm(s: &Side, peer: &Side, id: u64, len: u32, signaled: bool) -> Result<()> {
    let mut wr = SendWr::new(
        id,
        if signaled {
            WrOpcode::RdmaWrite
        } else {
            WrOpcode::RdmaWriteWithImm
        },
    );
    wr.sg_list = vec![s.mr.sge(0, len)];
    wr.remote_addr = peer.mr.addr();
    wr.rkey = peer.mr.rkey();
    wr.imm_data = id as u32;
    if signaled {
        wr.flags = SendFlags::SIGNALED;
    }
    s.qp.post_send(wr)
}

fn post_recv(s: &Side) -> Result<()> {
    s.qp.post_recv(RecvWr {
        wr_id: 0,
        sg_list: vec![],
    })
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("lat");
    let n: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let size: u32 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(65536);
    let (a, b) = (side(size as usize)?, side(size as usize)?);
    let o = ConnectOptions::default();
    let (pa, pb) = (a.dev.random_psn(), b.dev.random_psn());
    a.qp.connect(pa, &b.qp.endpoint(pb), &o)?;
    b.qp.connect(pb, &a.qp.endpoint(pa), &o)?;
    match mode {
        "lat" => {
            for _ in 0..4 {
                post_recv(&a)?;
                post_recv(&b)?;
            }
            std::thread::scope(|sc| -> Result<()> {
                let pong = sc.spawn(|| -> Result<()> {
                    for i in 0..n {
                        next(&b, &b.recv_cq)?;
                        post_recv(&b)?;
                        write_imm(&b, &a, i, 8, false)?;
                    }
                    Ok(())
                });
                for i in 0..n {
                    write_imm(&a, &b, i, 8, false)?;
                    next(&a, &a.recv_cq)?;
                    post_recv(&a)?;
                }
                pong.join().expect("pong thread")
            })?;
        }
        "bw" => {
            let mut outstanding = 0;
            for i in 0..n {
                if outstanding == DEPTH {
                    let wc = next(&a, &a.send_cq)?;
                    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
                    outstanding -= 1;
                }
                write_imm(&a, &b, i, size, true)?;
                outstanding += 1;
            }
            while outstanding > 0 {
                next(&a, &a.send_cq)?;
                outstanding -= 1;
            }
        }
        _ => {
            eprintln!("usage: cost lat N | cost bw N SIZE");
            std::process::exit(2);
        }
    }
    println!("{mode} {n} done");
    Ok(())
}
