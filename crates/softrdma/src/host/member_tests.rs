//! Unit tests of the member's side of the device-process protocol
//! (`member.rs`), against a fake device process over a socket pair.

use super::*;
use std::sync::mpsc;

/// A member joined to a fake device process at the other end of a
/// socket pair (its end returned: it answers what the test says).
fn fake_join() -> (Member, SeqPacket) {
    let (m_end, d_end) = SeqPacket::pair().unwrap();
    let t = std::thread::spawn(move || {
        let mut buf = vec![0u8; msg::MAX_MSG];
        let mut fds = Vec::new();
        let n = d_end
            .recv_wait(&mut buf, &mut fds, Duration::from_secs(60))
            .unwrap();
        assert!(matches!(
            Request::decode(&buf[..n]),
            Ok(Request::Hello { .. })
        ));
        let sock = std::net::UdpSocket::bind("127.23.0.1:0").unwrap();
        let ring = Ring::create("t", 4096).unwrap();
        let welcome = Reply::Welcome {
            version: msg::VERSION,
            mtu: 0,
            host_pid: 1,
            leased: false,
        };
        d_end
            .send(&welcome.encode(), &[sock.as_fd(), ring.fd()])
            .unwrap();
        d_end
    });
    let (_, m) = Member::hello(m_end, false).unwrap();
    (m, t.join().unwrap())
}

/// The fake device process reads the next message: its number and
/// request.
fn read_req(dev: &SeqPacket) -> (u32, Request) {
    let mut buf = vec![0u8; msg::MAX_MSG];
    let mut fds = Vec::new();
    let n = dev
        .recv_wait(&mut buf, &mut fds, Duration::from_secs(60))
        .expect("a message from the member");
    let (seq, body) = msg::unframe(&buf[..n]).expect("framed");
    (seq, Request::decode(body).expect("a request"))
}

/// Issue 19: a request whose answer came after the member gave up
/// waiting (`REPLY_WAIT`) left that answer in the connection, and
/// the next request read it as its own — here a `Listen` another
/// process holds would have "succeeded" with the claim's `Ok`. The
/// answers now echo the request's number: the late one is set aside,
/// and the claim it granted is given back. (Nothing is timed: the
/// fake device process answers the claim only after the member gave
/// up on it.)
#[test]
fn a_late_answer_is_never_taken_for_the_next_requests() {
    let (mut m, dev) = fake_join();
    const Q: u32 = 0x23_0001;
    m.reply_wait = Duration::from_millis(20);
    assert!(!m.claim_qpn(Q, true), "no answer: the claim failed");
    m.reply_wait = Duration::from_secs(60);
    let t = std::thread::spawn(move || {
        let (late, req) = read_req(&dev);
        assert_eq!(req, Request::ClaimQpn(Q));
        dev.send(&msg::frame(late, &Reply::Ok.encode()), &[])
            .unwrap();
        let (seq, req) = read_req(&dev);
        assert_eq!(req, Request::Listen(7));
        assert_ne!(seq, late);
        dev.send(
            &msg::frame(seq, &Reply::Err(libc::EADDRINUSE).encode()),
            &[],
        )
        .unwrap();
        // The late grant is undone: the number goes back.
        assert_eq!(read_req(&dev), (msg::NO_ANSWER, Request::FreeQpn(Q)));
        dev
    });
    assert_eq!(m.listen(7), Err(libc::EADDRINUSE));
    let dev = t.join().unwrap();
    // And the connection is in step: the next request gets its own.
    let t = std::thread::spawn(move || {
        let (seq, req) = read_req(&dev);
        assert_eq!(req, Request::ClaimQpn(Q + 1));
        dev.send(&msg::frame(seq, &Reply::Ok.encode()), &[])
            .unwrap();
        dev
    });
    assert!(m.claim_qpn(Q + 1, true));
    drop(t.join().unwrap());
    // A device process that is gone fails requests at once.
    assert!(!m.claim_qpn(Q + 2, true));
}

/// Issue 19: notices (MADs, freed QP numbers) went out with a
/// blocking send that waited up to 5 s while the device process did
/// not read — in `send_mads`, under the engine's core and send locks.
/// They never wait now: what the device process's queue cannot take
/// is queued (MADs beyond `MAX_QUEUED_MADS` dropped, as a network
/// loses them), a request fails after its wait instead of hanging,
/// and once the device process reads, everything queued reaches it
/// in order. (5000 MADs with a 5 s send each would hang the test.)
#[test]
fn notices_never_wait_for_a_device_process_that_does_not_read() {
    let (mut m, dev) = fake_join();
    m.reply_wait = Duration::from_millis(20);
    let ip: IpAddr = "127.23.0.9".parse().unwrap();
    const MADS: u64 = 5000;
    for i in 0..MADS {
        let mut p = vec![0u8; 300];
        p[..8].copy_from_slice(&i.to_le_bytes());
        m.send_gsi(ip, &p);
    }
    let dropped = m.mads_dropped();
    assert!(dropped > 0, "the queue is bounded");
    assert!(!m.claim_qpn(5, true), "no answer: the claim failed in time");
    m.claim_qpn(9, false);
    // The device process reads now.
    let (done_tx, done_rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let mut next_mad = 0u64;
        let mut mads = 0u64;
        loop {
            match read_req(&dev).1 {
                Request::SendGsi { packet, .. } => {
                    let i = u64::from_le_bytes(packet[..8].try_into().unwrap());
                    assert!(i >= next_mad, "MADs in order");
                    next_mad = i + 1;
                    mads += 1;
                }
                Request::ClaimQpn(5) => assert_eq!(mads, MADS - dropped),
                Request::FreeQpn(9) => break,
                r => panic!("unexpected {r:?}"),
            }
        }
        done_tx.send(()).unwrap();
    });
    // The progress thread's part: sends what waited, never waiting.
    while done_rx.try_recv().is_err() {
        m.flush_notices();
        std::thread::sleep(Duration::from_millis(1));
    }
    t.join().unwrap();
}

/// Issue 19: a member's receive — which a program's `ibv_poll_cq`
/// drives — took the rings senders offered with a request that waited
/// up to `REPLY_WAIT` for the device process's answer, holding the
/// device's receive side meanwhile. It asks now, returns, and reads the
/// answer at a later receive; an answer with `MAX_GIFTS` rings makes it
/// ask again. The fake device process answers only once the receive
/// that asked has returned, and the member's wait is an hour: a receive
/// that waits for the answer fails the test (at its 60 s limit), one
/// that does not returns at once.
#[test]
fn a_receive_never_waits_for_the_rings_it_asks_for() {
    let (mut m, dev) = fake_join();
    m.reply_wait = Duration::from_secs(3600);
    let m = std::sync::Arc::new(m);
    let (returned_tx, returned_rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let (seq, req) = read_req(&dev);
        assert_eq!(req, Request::TakeRings);
        returned_rx.recv().unwrap();
        let rings: Vec<Ring> = (0..=msg::MAX_GIFTS)
            .map(|_| Ring::create("t", 4096).unwrap())
            .collect();
        let gifts = (0..msg::MAX_GIFTS)
            .map(|i| msg::RingGift {
                sender: i as u64 + 1,
                pidfd: false,
            })
            .collect();
        let fds: Vec<_> = rings[..msg::MAX_GIFTS].iter().map(Ring::fd).collect();
        dev.send(&msg::frame(seq, &Reply::Rings(gifts).encode()), &fds)
            .unwrap();
        // As many as it gives at a time: the member asks again.
        let (again, req) = read_req(&dev);
        assert_eq!(req, Request::TakeRings);
        assert_ne!(again, seq);
        let last = vec![msg::RingGift {
            sender: 99,
            pidfd: false,
        }];
        dev.send(
            &msg::frame(again, &Reply::Rings(last).encode()),
            &[rings[msg::MAX_GIFTS].fd()],
        )
        .unwrap();
        (dev, rings)
    });
    let recv = |m: &Member| {
        let mut b = vec![0u8; 2048];
        let mut bufs = [IoSliceMut::new(&mut b)];
        let mut meta = [IoMeta::default()];
        m.recv_device(&mut bufs, &mut meta)
    };
    // The device process raised the flag: this receive asks.
    m.offered.store(true, Ordering::SeqCst);
    let (done_tx, done_rx) = mpsc::channel();
    let m2 = m.clone();
    std::thread::spawn(move || done_tx.send(recv(&m2)).unwrap());
    let got = done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the receive waits for the device process's answer");
    assert_eq!(got, 0);
    returned_tx.send(()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while m.inbound.lock().rings.len() < msg::MAX_GIFTS + 1 {
        assert!(
            Instant::now() < deadline,
            "the rings never came: {} of {}",
            m.inbound.lock().rings.len(),
            msg::MAX_GIFTS + 1
        );
        recv(&m);
        std::thread::sleep(Duration::from_millis(1));
    }
    let (_dev, _rings) = t.join().unwrap();
    assert_eq!(
        m.rings_asked.load(Ordering::SeqCst),
        0,
        "nothing unanswered"
    );
    assert!(!m.offered.load(Ordering::SeqCst));
}
