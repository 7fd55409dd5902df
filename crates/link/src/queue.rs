//! Datagrams held until a time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

struct Held<M> {
    at: u64,
    seq: u64,
    meta: M,
    data: Vec<u8>,
}

impl<M> PartialEq for Held<M> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl<M> Eq for Held<M> {}
impl<M> PartialOrd for Held<M> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<M> Ord for Held<M> {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// Datagrams (with whatever the driver needs to deliver them, `M`) held
/// until their time; those due at the same time leave in the order they
/// were held.
pub struct DelayQueue<M> {
    heap: BinaryHeap<Reverse<Held<M>>>,
    seq: u64,
    bytes: usize,
}

impl<M> Default for DelayQueue<M> {
    fn default() -> Self {
        DelayQueue {
            heap: BinaryHeap::new(),
            seq: 0,
            bytes: 0,
        }
    }
}

impl<M> DelayQueue<M> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Holds `data` until `at` (ns on the driver's clock).
    pub fn push(&mut self, at: u64, meta: M, data: Vec<u8>) {
        self.seq += 1;
        self.bytes += data.len();
        self.heap.push(Reverse(Held {
            at,
            seq: self.seq,
            meta,
            data,
        }));
    }

    /// When the next datagram is due.
    pub fn next_due(&self) -> Option<u64> {
        self.heap.peek().map(|h| h.0.at)
    }

    /// The next datagram due at `now` or earlier.
    pub fn pop_due(&mut self, now: u64) -> Option<(M, Vec<u8>)> {
        if self.heap.peek()?.0.at > now {
            return None;
        }
        self.pop_any()
    }

    /// The next datagram whatever its time (a device closing).
    pub fn pop_any(&mut self) -> Option<(M, Vec<u8>)> {
        let Reverse(h) = self.heap.pop()?;
        self.bytes -= h.data.len();
        Some((h.meta, h.data))
    }

    /// Datagrams held.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_in_time_then_fifo() {
        let mut q = DelayQueue::new();
        q.push(20, 'a', vec![1]);
        q.push(10, 'b', vec![2, 2]);
        q.push(20, 'c', vec![3]);
        assert_eq!((q.len(), q.bytes(), q.next_due()), (3, 4, Some(10)));
        assert_eq!(q.pop_due(9), None);
        assert_eq!(q.pop_due(10), Some(('b', vec![2, 2])));
        assert_eq!(q.pop_due(19), None);
        assert_eq!(q.pop_due(30).map(|x| x.0), Some('a'));
        assert_eq!(q.pop_any().map(|x| x.0), Some('c'));
        assert!(q.is_empty() && q.bytes() == 0 && q.next_due().is_none());
    }
}
