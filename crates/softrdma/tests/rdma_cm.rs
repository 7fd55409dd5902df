//! rdma_cm over real sockets: two devices of this process on loopback
//! addresses, the whole exchange through the engine (MADs on QP 1, the
//! progress threads' timers).

use softrdma::rdma_cm::{self, CmId, ConnParam, EventChannel, EventType, PortSpace};
use softrdma::{Device, DeviceOptions, RecvWr, SendWr, WcStatus, WrOpcode};
use std::net::SocketAddr;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

fn two_devices() -> (Device, Device) {
    let a = Device::open(DeviceOptions::default()).unwrap();
    let b = Device::open(DeviceOptions::default()).unwrap();
    (a, b)
}

#[test]
fn connect_send_and_disconnect() {
    let (a, _b) = two_devices();
    let l = rdma_cm::listen(SocketAddr::new(a.local_addr().ip(), 0)).unwrap();
    let addr = l.local_addr().unwrap();
    assert_eq!(addr.ip(), a.local_addr().ip());
    assert!(addr.port() >= 32768);
    let server = std::thread::spawn(move || {
        let c = l.accept(&Default::default()).unwrap();
        let mr = c.pd.alloc_mr(64, softrdma::Access::LOCAL_WRITE).unwrap();
        c.qp.post_recv(RecvWr {
            wr_id: 7,
            sg_list: vec![mr.sge(0, 64)],
        })
        .unwrap();
        let wc = c.cq.wait(1, T).unwrap();
        assert_eq!(wc[0].status, WcStatus::Success);
        assert_eq!(&mr.to_vec(0, 5), b"hello");
        // The client disconnects: DISCONNECTED here, then our DREP.
        let ev = c.channel.get_event_timeout(T).unwrap().unwrap();
        assert_eq!(ev.event, EventType::Disconnected);
        drop(ev);
        c.id.disconnect().unwrap();
        c.peer_private_data
    });
    let mut o = rdma_cm::ConnectOptions::default();
    o.conn.private_data = b"from the client".to_vec();
    let c = rdma_cm::connect(addr, &o).unwrap();
    assert_eq!(c.peer_private_data.len(), 196);
    let mr = c.pd.alloc_mr(64, softrdma::Access::LOCAL_WRITE).unwrap();
    mr.write(0, b"hello");
    // The server posts its receive after accepting: RNR retries cover it.
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sg_list = vec![mr.sge(0, 5)];
    c.qp.post_send(wr).unwrap();
    let wc = c.cq.wait(1, T).unwrap();
    assert_eq!(wc[0].status, WcStatus::Success);
    c.disconnect(T).unwrap();
    let pd = server.join().unwrap();
    assert_eq!(pd.len(), 56);
    assert_eq!(&pd[..15], b"from the client");
}

fn events(ch: &EventChannel) -> rdma_cm::CmEvent {
    ch.get_event_timeout(T).unwrap().expect("an event")
}

#[test]
fn nobody_listens_gets_reject_8() {
    let (a, _b) = two_devices();
    let ch = EventChannel::new().unwrap();
    let id = CmId::new(&ch, PortSpace::Tcp, None).unwrap();
    id.resolve_addr(None, SocketAddr::new(a.local_addr().ip(), 9))
        .unwrap();
    assert_eq!(events(&ch).event, EventType::AddrResolved);
    id.resolve_route().unwrap();
    assert_eq!(events(&ch).event, EventType::RouteResolved);
    id.connect(Some(&ConnParam {
        qp_num: 0x123,
        ..Default::default()
    }))
    .unwrap();
    let ev = events(&ch);
    assert_eq!((ev.event, ev.status), (EventType::Rejected, 8));
    drop(ev);
    id.destroy().unwrap();
}

#[test]
fn reject_with_private_data() {
    let (a, _b) = two_devices();
    let lch = EventChannel::new().unwrap();
    let lid = CmId::new(&lch, PortSpace::Tcp, None).unwrap();
    lid.bind_addr(SocketAddr::new(a.local_addr().ip(), 0))
        .unwrap();
    lid.listen(4).unwrap();
    let port = lid.addr_info().unwrap().src.unwrap().port();
    let ch = EventChannel::new().unwrap();
    let id = CmId::new(&ch, PortSpace::Tcp, None).unwrap();
    id.resolve_addr(None, SocketAddr::new(a.local_addr().ip(), port))
        .unwrap();
    drop(events(&ch));
    id.resolve_route().unwrap();
    drop(events(&ch));
    id.connect(Some(&ConnParam {
        qp_num: 0x456,
        private_data: vec![1, 2, 3],
        ..Default::default()
    }))
    .unwrap();
    let req = events(&lch);
    assert_eq!(req.event, EventType::ConnectRequest);
    assert_eq!(req.listen_id.as_ref(), Some(&lid));
    assert_eq!(req.conn.qp_num, 0x456);
    assert_eq!(&req.conn.private_data[..3], &[1, 2, 3]);
    req.id.reject(b"no thanks").unwrap();
    let child = req.id.clone();
    drop(req);
    let ev = events(&ch);
    assert_eq!((ev.event, ev.status), (EventType::Rejected, 28));
    assert_eq!(ev.conn.private_data.len(), 148);
    assert_eq!(&ev.conn.private_data[..9], b"no thanks");
    drop(ev);
    child.destroy().unwrap();
    id.destroy().unwrap();
    lid.destroy().unwrap();
}
