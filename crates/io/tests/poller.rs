//! The epoll poller and its eventfd waker.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::*;
use softrdma_io::{Poller, ReadySet, Transmit};
use std::os::fd::AsRawFd;

/// A poller sleeping without a timeout is woken by another thread.
#[test]
fn waker_wakes_a_sleeping_poller() {
    let sock = bind("127.0.0.40:0");
    let mut poller = Poller::new(&sock).unwrap();
    let waker = poller.waker();
    let posted = Arc::new(AtomicU64::new(0));
    let p2 = posted.clone();
    let t = thread::spawn(move || {
        // Give the main thread a chance to be asleep in epoll_wait; the
        // test's outcome does not depend on it.
        thread::sleep(Duration::from_millis(50));
        p2.store(42, Ordering::Relaxed);
        waker.wake();
    });
    let r = poller.wait(None).unwrap();
    assert!(r.woken && !r.readable, "{r:?}");
    assert_eq!(
        posted.load(Ordering::Relaxed),
        42,
        "work published before wake is visible"
    );
    t.join().unwrap();
    // Drained: a zero-timeout look finds nothing.
    assert!(poller.wait(Some(Duration::ZERO)).unwrap().is_empty());
}

/// Many wakes before a wait coalesce into one; the next wait sees nothing.
#[test]
fn wakes_coalesce() {
    let sock = bind("127.0.0.41:0");
    let mut poller = Poller::new(&sock).unwrap();
    let wakers: Vec<_> = (0..4).map(|_| poller.waker()).collect();
    let threads: Vec<_> = wakers
        .into_iter()
        .map(|w| {
            thread::spawn(move || {
                for _ in 0..1000 {
                    w.wake();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(poller.wait(Some(Duration::ZERO)).unwrap().woken);
    assert!(poller.wait(Some(Duration::ZERO)).unwrap().is_empty());
}

/// No wake is lost: a producer posts 20,000 items, waking after each; the
/// consumer sleeps without a timeout whenever it has seen everything posted
/// so far. A lost wake would leave it asleep forever (caught by the guard).
#[test]
fn no_lost_wakes_under_contention() {
    let sock = bind("127.0.0.42:0");
    let mut poller = Poller::new(&sock).unwrap();
    let waker = poller.waker();
    let posted = Arc::new(AtomicU64::new(0));
    let p2 = posted.clone();
    const N: u64 = 20_000;
    let producer = thread::spawn(move || {
        for _ in 0..N {
            p2.fetch_add(1, Ordering::Release);
            waker.wake();
        }
    });
    let mut seen = 0;
    while seen < N {
        let now = posted.load(Ordering::Acquire);
        if now > seen {
            seen = now;
            continue;
        }
        let r = poller.wait(Some(PATIENCE)).unwrap();
        assert!(!r.is_empty(), "lost wake: consumer saw {seen} of {N}");
    }
    producer.join().unwrap();
}

/// A datagram arriving makes the socket readable; writability is reported
/// only while asked for.
#[test]
fn readable_and_writable_readiness() {
    let rx = bind("127.0.0.43:0");
    let tx = bind("127.0.0.44:0");
    let mut poller = Poller::new(&rx).unwrap();
    assert!(poller.wait(Some(Duration::ZERO)).unwrap().is_empty());
    assert_eq!(
        tx.send(&[Transmit::new(rx.local_addr(), b"hi")]).unwrap(),
        1
    );
    let r = poller.wait(Some(PATIENCE)).unwrap();
    assert!(r.readable && !r.writable && !r.woken, "{r:?}");
    // Level-triggered: still readable until received.
    assert!(poller.wait(Some(Duration::ZERO)).unwrap().readable);
    assert_eq!(recv_queued(&rx).len(), 1);
    assert!(poller.wait(Some(Duration::ZERO)).unwrap().is_empty());

    poller.set_writable_interest(true).unwrap();
    assert!(poller.wait(Some(Duration::ZERO)).unwrap().writable);
    poller.set_writable_interest(false).unwrap();
    assert!(poller.wait(Some(Duration::ZERO)).unwrap().is_empty());
}

/// A timeout with nothing to report returns empty readiness.
#[test]
fn timeout_returns_empty() {
    let sock = bind("127.0.0.45:0");
    let mut poller = Poller::new(&sock).unwrap();
    assert!(poller
        .wait(Some(Duration::from_micros(10)))
        .unwrap()
        .is_empty());
}

/// A ready set answers which of its sockets have input, in one look that
/// never sleeps; registered in a poller, it wakes the poller for any of
/// them; a socket removed is no longer reported.
#[test]
fn ready_set_reports_its_readable_sockets() {
    let main = bind("127.0.0.46:0");
    let (a, b, c) = (
        bind("127.0.0.47:0"),
        bind("127.0.0.48:0"),
        bind("127.0.0.49:0"),
    );
    let tx = bind("127.0.0.50:0");
    let set = ReadySet::new().unwrap();
    for s in [&a, &b, &c] {
        set.add(s).unwrap();
    }
    let mut poller = Poller::new(&main).unwrap();
    poller.registry().add(&set).unwrap();
    let mut fds = [0; 8];
    assert_eq!(set.ready(&mut fds), 0);
    assert!(poller.wait(Some(Duration::ZERO)).unwrap().is_empty());

    assert_eq!(tx.send(&[Transmit::new(b.local_addr(), b"b")]).unwrap(), 1);
    let r = poller.wait(Some(PATIENCE)).unwrap();
    assert!(r.readable, "the set's socket wakes the poller: {r:?}");
    let n = set.ready(&mut fds);
    assert_eq!(&fds[..n], &[b.as_raw_fd()]);
    // Level-triggered until received; an empty output slice reports none.
    assert_eq!(set.ready(&mut fds), 1);
    assert_eq!(set.ready(&mut []), 0);
    assert_eq!(recv_queued(&b).len(), 1);
    assert_eq!(set.ready(&mut fds), 0);
    assert!(poller.wait(Some(Duration::ZERO)).unwrap().is_empty());

    // Two at once; then one removed is not reported (nor wakes the poller).
    for s in [&a, &c] {
        assert_eq!(tx.send(&[Transmit::new(s.local_addr(), b"x")]).unwrap(), 1);
    }
    for s in [&a, &c] {
        // Arrived (a poller of its own says so), hence in the set's answer.
        assert!(
            Poller::new(s)
                .unwrap()
                .wait(Some(PATIENCE))
                .unwrap()
                .readable
        );
    }
    let n = set.ready(&mut fds);
    let mut got = fds[..n].to_vec();
    got.sort();
    let mut want = vec![a.as_raw_fd(), c.as_raw_fd()];
    want.sort();
    assert_eq!(got, want);
    set.remove(&c).unwrap();
    let n = set.ready(&mut fds);
    assert_eq!(&fds[..n], &[a.as_raw_fd()]);
    assert_eq!(recv_queued(&a).len(), 1);
    assert_eq!(set.ready(&mut fds), 0);
    assert!(poller.wait(Some(Duration::ZERO)).unwrap().is_empty());
    assert_eq!(recv_queued(&c).len(), 1);
}
