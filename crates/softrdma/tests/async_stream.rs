//! Completions awaited through tokio (feature `tokio`).
#![cfg(feature = "tokio")]

use softrdma::*;
use std::time::Duration;

#[tokio::test(flavor = "current_thread")]
async fn completions_arrive_as_a_stream() {
    let a = Device::open_default().unwrap();
    let b = Device::open_default().unwrap();
    let ch = a.create_comp_channel().unwrap();
    let pda = a.alloc_pd().unwrap();
    let cqa = a.create_cq(64, Some(&ch)).unwrap();
    let qpa = pda.qp_builder(QpType::Rc, &cqa, &cqa).build().unwrap();
    let mra = pda.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let pdb = b.alloc_pd().unwrap();
    let cqb = b.create_cq(64, None).unwrap();
    let qpb = pdb.qp_builder(QpType::Rc, &cqb, &cqb).build().unwrap();
    let mrb = pdb.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let o = ConnectOptions::default();
    qpa.connect(Psn::new(1), &qpb.endpoint(Psn::new(2)), &o)
        .unwrap();
    qpb.connect(Psn::new(2), &qpa.endpoint(Psn::new(1)), &o)
        .unwrap();
    let mut stream = cqa.stream().unwrap();
    for i in 0..5u64 {
        qpa.post_recv(RecvWr {
            wr_id: i,
            sg_list: vec![mra.sge(0, 64)],
        })
        .unwrap();
    }
    // The peer sends from another thread while this task awaits.
    let sender = std::thread::spawn(move || {
        for i in 0..5u64 {
            std::thread::sleep(Duration::from_millis(20));
            let mut wr = SendWr::new(100 + i, WrOpcode::Send);
            wr.sg_list = vec![mrb.sge(0, 64)];
            qpb.post_send(wr).unwrap();
            cqb.wait(1, Duration::from_secs(5)).unwrap();
        }
    });
    for i in 0..5u64 {
        let wc = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("a completion within 5 s")
            .unwrap();
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (i, WcStatus::Success, WcOpcode::Recv)
        );
    }
    sender.join().unwrap();
}
