//! The empty poll (issue 22 item 2): a program spinning on a CQ where
//! nothing arrives takes no core lock per poll — counts, not timings
//! (`Device::lock_counts`).

use softrdma::cm::{connect_rc, Listener};
use softrdma::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);
const POLLS: u64 = 20_000;

fn access() -> Access {
    Access::LOCAL_WRITE.with(Access::REMOTE_WRITE)
}

#[test]
fn an_empty_cq_poll_takes_no_core_lock() {
    let listener = Listener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let opts = ConnectOptions::default();
    let o2 = opts;
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let server = std::thread::spawn(move || {
        let dev = Device::open_default().unwrap();
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(64, None).unwrap();
        let mr = pd.alloc_mr(1 << 16, access()).unwrap();
        let conn = listener
            .accept_rc(&pd, &cq, QpType::Rc, Some(&mr), &o2)
            .unwrap();
        // Kept alive until the client is done.
        rx.recv().unwrap();
        drop((conn, mr, cq, pd, dev));
    });
    let dev = Device::open_default().unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64, None).unwrap();
    let mr = pd.alloc_mr(1 << 16, access()).unwrap();
    let conn = connect_rc(&addr, &pd, &cq, QpType::Rc, Some(&mr), &opts).unwrap();
    // One WRITE, completed: the QP is idle, nothing more will arrive.
    let mut wr = SendWr::new(1, WrOpcode::RdmaWrite);
    wr.sg_list = vec![mr.sge(0, 64)];
    wr.remote_addr = conn.remote.va;
    wr.rkey = conn.remote.rkey;
    wr.flags = SendFlags::SIGNALED;
    conn.qp.post_send(wr).unwrap();
    let wc = cq.wait(1, T).unwrap();
    assert_eq!(wc.len(), 1, "{wc:?}");
    assert_eq!(wc[0].status, WcStatus::Success, "{wc:?}");

    let mut out = [EMPTY_WC; 16];
    let (gen0, cq0) = dev.lock_counts();
    for _ in 0..POLLS {
        assert_eq!(cq.poll(&mut out).unwrap(), 0);
    }
    let (gen1, cq1) = dev.lock_counts();
    let (others, polls) = (gen1 - gen0, cq1 - cq0);
    eprintln!("{POLLS} empty polls: {polls} CQ-poll core locks, {others} other core locks");
    // A poll takes the core lock only after something else took it (the
    // progress thread runs the timers every 300 µs while the program
    // polls): once per such change at most.
    assert!(
        polls <= others + 1,
        "{polls} poll locks for {others} changes of the core"
    );
    // And the empty polls themselves take none: the other locks are the
    // progress thread's, far fewer than the polls (it sleeps 300 µs
    // between its looks while the program polls).
    assert!(
        others < POLLS / 4,
        "{others} core locks during {POLLS} empty polls"
    );
    tx.send(()).unwrap();
    drop(conn);
    server.join().unwrap();
}
