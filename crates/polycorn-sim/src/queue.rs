//! The event queue: timed events in virtual time, popped in time order and, at equal times, in
//! the order they were pushed, so a ride never depends on anything but its inputs.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Events of type `T` at virtual times (µs).
#[derive(Debug)]
pub struct EventQueue<T> {
    heap: BinaryHeap<Reverse<(u64, u64, Slot<T>)>>,
    seq: u64,
}

/// An event with an ordering that ignores it (time and sequence number order the heap).
#[derive(Debug)]
struct Slot<T>(T);

impl<T> PartialEq for Slot<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl<T> Eq for Slot<T> {}
impl<T> PartialOrd for Slot<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Slot<T> {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl<T> Default for EventQueue<T> {
    fn default() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }
}

impl<T> EventQueue<T> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedule `event` at `at_us`.
    pub fn push(&mut self, at_us: u64, event: T) {
        self.heap.push(Reverse((at_us, self.seq, Slot(event))));
        self.seq += 1;
    }

    /// When the next event is due.
    pub fn next_us(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((t, _, _))| *t)
    }

    /// The next event due at or before `now_us`, with its time.
    pub fn pop_due(&mut self, now_us: u64) -> Option<(u64, T)> {
        if self.next_us()? > now_us {
            return None;
        }
        self.heap.pop().map(|Reverse((t, _, Slot(e)))| (t, e))
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_time_order_and_fifo_at_equal_times() {
        let mut q = EventQueue::new();
        q.push(30, "c");
        q.push(10, "a1");
        q.push(20, "b");
        q.push(10, "a2");
        assert_eq!(q.next_us(), Some(10));
        assert_eq!(q.pop_due(5), None, "nothing due before 10");
        let order: Vec<_> = std::iter::from_fn(|| q.pop_due(25)).collect();
        assert_eq!(order, vec![(10, "a1"), (10, "a2"), (20, "b")]);
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop_due(u64::MAX), Some((30, "c")));
        assert!(q.is_empty());
    }
}
