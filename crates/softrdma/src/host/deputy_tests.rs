use super::*;

fn hdr() -> [u8; super::super::daemon::REC_HDR] {
    super::super::daemon::rec_header("127.61.0.2:4791".parse().unwrap(), 3, 60)
}

#[test]
fn a_device_process_that_moves_is_never_late() {
    let mut l = Lateness::default();
    // Data waits, but the beat moves between looks: not late however
    // long it goes on.
    for t in 0..100u64 {
        assert!(!l.check(t * CHECK_MS, t + 1, || true));
    }
}

#[test]
fn waiting_data_and_a_still_beat_make_a_deputy_until_the_beat_moves() {
    let mut l = Lateness::default();
    // A new beat: the device process ran since the last look; the socket
    // is not even asked.
    assert!(!l.check(996, 7, || panic!("asked")));
    assert!(!l.check(1000, 7, || true));
    assert!(!l.check(1000 + LATE_MS - 1, 7, || true));
    assert!(l.check(1000 + LATE_MS, 7, || true));
    // Once a deputy, the socket is not asked again.
    assert!(l.check(1000 + LATE_MS + 1, 7, || panic!("asked")));
    assert!(!l.check(1000 + LATE_MS + 2, 8, || true));
    assert!(!l.check(1000 + LATE_MS + 3, 8, || true));
}

#[test]
fn an_idle_device_process_is_not_late_when_data_just_arrived() {
    let mut l = Lateness::default();
    l.check(0, 5, || false);
    // The beat stood still for long with an empty socket (it sleeps).
    for t in 0..50u64 {
        assert!(!l.check(t * 100, 5, || false));
    }
    // A datagram arrives: counted from when it was first seen.
    assert!(!l.check(5000, 5, || true));
    assert!(!l.check(5000 + LATE_MS / 2, 5, || true));
    // Taken meanwhile: the count starts again.
    assert!(!l.check(5000 + LATE_MS / 2 + 1, 5, || false));
    assert!(!l.check(5000 + LATE_MS + 1, 5, || true));
    assert!(l.check(5000 + 2 * LATE_MS + 1, 5, || true));
}

#[test]
fn the_receive_lock_is_exclusive_and_taken_over_when_held_too_long() {
    let p = Page::create().unwrap();
    let a = p.try_lock(100, 5000).expect("free");
    assert!(p.try_lock(200, 5000 + u64::from(STEAL_MS) - 1).is_none());
    let b = p
        .try_lock(200, 5000 + u64::from(STEAL_MS))
        .expect("taken over");
    // The first holder's unlock does not free the new holder's lock.
    p.unlock(a);
    assert!(p.try_lock(300, 5000 + u64::from(STEAL_MS) + 1).is_none());
    p.unlock(b);
    assert!(p.try_lock(300, 5000 + u64::from(STEAL_MS) + 1).is_some());
}

#[test]
fn the_pool_hands_each_member_its_datagrams_in_order() {
    let p = Page::create().unwrap();
    let h = hdr();
    for i in 0..10u8 {
        let qpn = if i % 2 == 0 { 0x11 } else { 0x22 };
        assert!(p.put(qpn, &h, &[i; 100]));
    }
    assert_eq!(p.pooled(), 10);
    let mut scratch = Vec::new();
    let mut got = Vec::new();
    let n = p.take(
        3,
        |q| q == 0x22,
        &mut scratch,
        |hd, d| {
            assert_eq!(hd, &h[..]);
            assert_eq!(d.len(), 100);
            got.push(d[0]);
        },
    );
    assert_eq!((n, got.clone()), (3, vec![1, 3, 5]));
    got.clear();
    p.take(usize::MAX, |_| true, &mut scratch, |_, d| got.push(d[0]));
    assert_eq!(got, vec![0, 2, 4, 6, 7, 8, 9]);
    assert_eq!(p.pooled(), 0);
    // Too large for a slot: lost, counted.
    assert!(!p.put(1, &h, &vec![0u8; SLOT_MAX + 1]));
    assert!(p.put(1, &h, &vec![9u8; SLOT_MAX]));
    assert_eq!(p.counts(), (0, 11, 1));
}

#[test]
fn a_full_pool_refuses() {
    let p = Page::create().unwrap();
    let h = hdr();
    for i in 0..SLOTS {
        // A deputy leaves datagrams in the socket once its batch might
        // not fit.
        assert_eq!(p.has_room(), i + ROOM <= SLOTS, "{i}");
        assert!(p.put(5, &h, &[1, 2, 3]));
    }
    assert!(!p.put(5, &h, &[1, 2, 3]));
    let mut s = Vec::new();
    assert_eq!(p.take(1, |q| q == 5, &mut s, |_, _| {}), 1);
    assert!(p.put(5, &h, &[1, 2, 3]));
}

#[test]
fn a_page_attaches_by_its_descriptor_and_a_wrong_one_does_not() {
    let p = Page::create().unwrap();
    let q = Page::attach(p.fd().try_clone_to_owned().unwrap()).unwrap();
    p.tick();
    assert_eq!(q.beat(), 1);
    let other = Shm::create("x", 8192).unwrap();
    use std::os::fd::AsFd;
    assert!(Page::attach(other.as_fd().try_clone_to_owned().unwrap()).is_err());
}
