//! The epoll poller and its eventfd waker.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::*;
use softrdma_io::{Poller, Transmit};

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
