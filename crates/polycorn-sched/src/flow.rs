//! Flows (one passenger TCP connection, one direction) and users (one passenger).
//!
//! The scheduler does not hold payload bytes: it tracks sequence numbers. A flow's sequence
//! space is its data bytes `[0, len)` followed, once the source closed, by one unit for the FIN
//! at `len` (as in TCP). Acknowledgements are cumulative in that space.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;
use core::fmt;

use crate::path::PathSet;

/// Identifies a flow; chosen by the caller, unique among open flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlowId(pub u64);

impl fmt::Display for FlowId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "flow{}", self.0)
    }
}

/// Identifies a user (a passenger, e.g. by source address); chosen by the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UserId(pub u64);

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "user{}", self.0)
    }
}

/// A range waiting to be sent again, with the paths that already carried it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pending {
    pub end: u64,
    pub carried_on: PathSet,
}

#[derive(Debug, Clone)]
pub(crate) struct Flow {
    pub id: FlowId,
    pub gen: u32,
    pub user_slot: u32,
    /// Sequence just past the last data byte the source has given us.
    pub buffered_end: u64,
    /// Sequence number of the FIN, once the source closed.
    pub fin_at: Option<u64>,
    /// Next sequence number never sent.
    pub next_new: u64,
    /// Cumulative acknowledgement.
    pub acked: u64,
    /// Data may be sent below this sequence number (receiver credit).
    pub credit_limit: u64,
    /// FIN or RST seen.
    pub tail: bool,
    /// Reinjections keyed by start sequence.
    pub pending: BTreeMap<u64, Pending>,
    pub pending_bytes: u64,
    /// Ranges below `next_new` never sent (`start → end`): left behind when a chunk was placed
    /// ahead of the lowest unsent byte (STMS), to be sent in order later.
    pub skipped: BTreeMap<u64, u64>,
    pub skipped_bytes: u64,
    /// In its user's round-robin ring.
    pub queued: bool,
}

impl Flow {
    pub fn new(id: FlowId, gen: u32, user_slot: u32, credit_limit: u64) -> Self {
        Flow {
            id,
            gen,
            user_slot,
            buffered_end: 0,
            fin_at: None,
            next_new: 0,
            acked: 0,
            credit_limit,
            tail: false,
            pending: BTreeMap::new(),
            pending_bytes: 0,
            skipped: BTreeMap::new(),
            skipped_bytes: 0,
            queued: false,
        }
    }

    /// Sequence just past everything the flow will have to send so far (FIN included).
    pub fn end_seq(&self) -> u64 {
        match self.fin_at {
            Some(f) => f + 1,
            None => self.buffered_end,
        }
    }

    /// Bytes not yet sent (new data, FIN, skipped ranges and pending reinjections).
    pub fn remaining(&self) -> u64 {
        (self.end_seq() - self.next_new)
            .saturating_add(self.pending_bytes)
            .saturating_add(self.skipped_bytes)
    }

    /// The lowest skipped range as a chunk `(offset, seq_len)` of at most `chunk_bytes`.
    pub fn next_skipped_chunk(&self, chunk_bytes: u64) -> Option<(u64, u64)> {
        let (&start, &end) = self.skipped.first_key_value()?;
        Some((start, chunk_bytes.min(end - start)))
    }

    /// A chunk of at most `chunk_bytes` data bytes starting at the first byte at or after
    /// `target` that was never sent: inside a skipped range, or new data at or beyond
    /// `next_new` (never past what the source gave and the receiver allows). `None` if there
    /// is no such byte.
    pub fn chunk_at_or_after(&self, target: u64, chunk_bytes: u64) -> Option<(u64, u64)> {
        let inside = self
            .skipped
            .range(..=target)
            .next_back()
            .filter(|(_, &e)| e > target)
            .map(|(_, &e)| (target, e));
        let later = || self.skipped.range(target..).next().map(|(&s, &e)| (s, e));
        if let Some((s, e)) = inside.or_else(later) {
            return Some((s, chunk_bytes.min(e - s)));
        }
        let start = target.max(self.next_new);
        let data_limit = self.buffered_end.min(self.credit_limit);
        if start >= data_limit {
            return None;
        }
        let len = chunk_bytes.min(data_limit - start);
        let fin = u64::from(self.fin_at == Some(start + len));
        Some((start, len + fin))
    }

    /// Record that `[offset, offset + seq_len)`, never sent before, was sent: it leaves the
    /// skipped ranges, or, beyond `next_new`, moves `next_new` past it and leaves the bytes it
    /// jumped over skipped.
    pub fn mark_new_sent(&mut self, offset: u64, seq_len: u64) {
        let end = offset + seq_len;
        if offset >= self.next_new {
            if offset > self.next_new {
                self.skipped.insert(self.next_new, offset);
                self.skipped_bytes += offset - self.next_new;
            }
            self.next_new = end;
            return;
        }
        let Some((&s, &e)) = self.skipped.range(..=offset).next_back() else {
            debug_assert!(
                false,
                "new chunk at {offset} below next_new and not skipped"
            );
            return;
        };
        debug_assert!(
            e >= end,
            "new chunk [{offset}, {end}) leaves skipped [{s}, {e})"
        );
        let end = end.min(e);
        self.skipped.remove(&s);
        self.skipped_bytes -= e - s;
        if s < offset {
            self.skipped.insert(s, offset);
            self.skipped_bytes += offset - s;
        }
        if end < e {
            self.skipped.insert(end, e);
            self.skipped_bytes += e - end;
        }
    }

    /// The next new chunk `(offset, seq_len)` of at most `chunk_bytes` data bytes, if any may be
    /// sent now.
    pub fn next_new_chunk(&self, chunk_bytes: u64) -> Option<(u64, u64)> {
        let start = self.next_new;
        let data_limit = self.buffered_end.min(self.credit_limit);
        if start < data_limit {
            let len = chunk_bytes.min(data_limit - start);
            let fin = u64::from(self.fin_at == Some(start + len));
            Some((start, len + fin))
        } else if self.fin_at == Some(start) {
            Some((start, 1))
        } else {
            None
        }
    }

    /// Has the flow anything it might send (ignoring path state)?
    pub fn backlogged(&self) -> bool {
        !self.pending.is_empty() || !self.skipped.is_empty() || self.next_new_chunk(1).is_some()
    }

    /// Does `[offset, offset+seq_len)` carry the FIN?
    pub fn carries_fin(&self, offset: u64, seq_len: u64) -> bool {
        matches!(self.fin_at, Some(f) if f >= offset && f < offset + seq_len)
    }

    /// Queue `[start, end)` for reinjection (trimmed to what is unacknowledged).
    ///
    /// Pending ranges stay disjoint: where the new range overlaps queued ones, the overlap is
    /// one range carried on the union of both path sets, and the rest keeps its own set. So
    /// every byte claims exactly the paths that hold a copy of it (a range never claims a path
    /// that carried only part of it, which would hold the rest back when that path is the
    /// only one left), and a cumulative ack cuts at most one range.
    pub fn add_pending(&mut self, start: u64, end: u64, carried_on: PathSet) {
        let start = start.max(self.acked);
        if start >= end {
            return;
        }
        let first = self
            .pending
            .range(..start)
            .next_back()
            .filter(|(_, p)| p.end > start)
            .map_or(start, |(&k, _)| k);
        let overlapping: Vec<(u64, Pending)> = self
            .pending
            .range(first..end)
            .map(|(&k, &p)| (k, p))
            .collect();
        let mut pieces: Vec<(u64, u64, PathSet)> = Vec::with_capacity(2 * overlapping.len() + 1);
        let mut cursor = start;
        for (k, p) in overlapping {
            self.pending.remove(&k);
            self.pending_bytes -= p.end - k;
            if k < start {
                pieces.push((k, start, p.carried_on));
            }
            let (lo, hi) = (k.max(start), p.end.min(end));
            if lo > cursor {
                pieces.push((cursor, lo, carried_on));
            }
            pieces.push((lo, hi, p.carried_on.union(carried_on)));
            if p.end > end {
                pieces.push((end, p.end, p.carried_on));
            }
            cursor = hi;
        }
        if cursor < end {
            pieces.push((cursor, end, carried_on));
        }
        // Insert, joining neighbours that claim the same paths.
        let mut run: Option<(u64, u64, PathSet)> = None;
        for (s, e, c) in pieces {
            run = match run {
                Some((rs, re, rc)) if re == s && rc == c => Some((rs, e, c)),
                Some((rs, re, rc)) => {
                    self.insert_pending(rs, re, rc);
                    Some((s, e, c))
                }
                None => Some((s, e, c)),
            };
        }
        if let Some((rs, re, rc)) = run {
            self.insert_pending(rs, re, rc);
        }
    }

    fn insert_pending(&mut self, start: u64, end: u64, carried_on: PathSet) {
        debug_assert!(start < end && !self.pending.contains_key(&start));
        self.pending.insert(start, Pending { end, carried_on });
        self.pending_bytes += end - start;
    }

    /// Apply a cumulative ack: drop reinjections (and skipped ranges) it covers.
    pub fn apply_ack(&mut self, acked: u64) {
        if acked <= self.acked {
            return;
        }
        self.acked = acked;
        // The receiver cannot acknowledge bytes never sent; a peer that does is believed.
        while let Some((&start, &end)) = self.skipped.first_key_value() {
            if start >= acked {
                break;
            }
            self.skipped.remove(&start);
            self.skipped_bytes -= end - start;
            if end > acked {
                self.skipped.insert(acked, end);
                self.skipped_bytes += end - acked;
                break;
            }
        }
        while let Some((&start, &p)) = self.pending.first_key_value() {
            if start >= acked {
                break;
            }
            self.pending.remove(&start);
            self.pending_bytes -= p.end - start;
            if p.end > acked {
                self.pending.insert(acked, p);
                self.pending_bytes += p.end - acked;
                break;
            }
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct User {
    pub id: UserId,
    pub gen: u32,
    /// Round-robin ring of backlogged flows (slot, generation).
    pub ring: VecDeque<(u32, u32)>,
    pub flows: u32,
    /// Exponentially weighted scheduled bytes, scaled by the PF clock (see `scheduler`).
    pub pf_acc: f64,
    /// In the scheduler's active-user list.
    pub active: bool,
}

impl User {
    pub fn new(id: UserId, gen: u32) -> Self {
        User {
            id,
            gen,
            ring: VecDeque::new(),
            flows: 0,
            pf_acc: 0.0,
            active: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_respect_credit_and_carry_fin() {
        let mut f = Flow::new(FlowId(1), 0, 0, 3000);
        assert_eq!(f.next_new_chunk(1000), None);
        f.buffered_end = 5000;
        assert_eq!(f.next_new_chunk(1000), Some((0, 1000)));
        f.next_new = 2500;
        assert_eq!(f.next_new_chunk(1000), Some((2500, 500)), "credit-limited");
        f.credit_limit = u64::MAX;
        f.fin_at = Some(5000);
        f.next_new = 4500;
        assert_eq!(
            f.next_new_chunk(1000),
            Some((4500, 501)),
            "last data carries FIN"
        );
        assert!(f.carries_fin(4500, 501));
        f.next_new = 5000;
        assert_eq!(f.next_new_chunk(1000), Some((5000, 1)), "FIN alone");
        f.next_new = 5001;
        assert_eq!(f.next_new_chunk(1000), None);
        assert_eq!(f.remaining(), 0);
    }

    #[test]
    fn pending_merges_and_trims_on_ack() {
        let mut f = Flow::new(FlowId(1), 0, 0, u64::MAX);
        f.buffered_end = 1000;
        f.next_new = 1000;
        f.add_pending(100, 200, PathSet::from_bits(1));
        f.add_pending(100, 200, PathSet::from_bits(2));
        f.add_pending(300, 400, PathSet::from_bits(1));
        assert_eq!(f.pending_bytes, 200);
        assert_eq!(f.pending[&100].carried_on, PathSet::from_bits(3));
        f.apply_ack(150);
        assert_eq!(f.pending_bytes, 150);
        assert!(f.pending.contains_key(&150));
        f.apply_ack(1000);
        assert!(f.pending.is_empty());
        assert_eq!(f.pending_bytes, 0);
        f.add_pending(10, 20, PathSet::EMPTY);
        assert!(f.pending.is_empty(), "acked ranges are not reinjected");
    }

    #[test]
    fn chunks_placed_ahead_leave_skipped_ranges_sent_once_in_order() {
        let mut f = Flow::new(FlowId(1), 0, 0, 10_000);
        f.buffered_end = 8000;
        f.fin_at = Some(8000);
        // Ahead at 5000: bytes 0..5000 skipped.
        assert_eq!(f.chunk_at_or_after(5000, 1000), Some((5000, 1000)));
        f.mark_new_sent(5000, 1000);
        assert_eq!((f.next_new, f.skipped_bytes), (6000, 5000));
        assert_eq!(f.remaining(), 5000 + 2001);
        // Inside the skipped range the chunk starts at the target and stops at the range's end.
        assert_eq!(f.chunk_at_or_after(4500, 1000), Some((4500, 500)));
        // The in-order chunk is the lowest skipped byte.
        assert_eq!(f.next_skipped_chunk(1000), Some((0, 1000)));
        f.mark_new_sent(0, 1000);
        f.mark_new_sent(2000, 1000);
        assert_eq!(
            f.skipped.iter().map(|(&s, &e)| (s, e)).collect::<Vec<_>>(),
            [(1000, 2000), (3000, 5000)]
        );
        assert_eq!(f.skipped_bytes, 3000);
        // Past the skipped ranges: new data, the last chunk with the FIN.
        assert_eq!(f.chunk_at_or_after(7500, 1000), Some((7500, 501)));
        assert_eq!(f.chunk_at_or_after(8000, 1000), None);
        // An ack trims skipped ranges like reinjections.
        f.apply_ack(1500);
        assert_eq!(f.next_skipped_chunk(1000), Some((1500, 500)));
        assert_eq!(f.skipped_bytes, 2500);
        assert!(f.backlogged());
    }

    proptest::proptest! {
        /// Any sequence of reinjections and acks: ranges stay disjoint and above the ack, the
        /// byte count adds up, and every unacknowledged byte that was queued is still queued,
        /// claiming exactly the union of the paths of the reinjections that covered it.
        #[test]
        fn pending_ranges_track_every_byte(
            ops in proptest::collection::vec((0u64..60, 1u64..25, 1u32..8, proptest::bool::ANY), 1..40)
        ) {
            let mut f = Flow::new(FlowId(1), 0, 0, u64::MAX);
            f.buffered_end = 100;
            f.next_new = 100;
            // Model: the path set each byte is queued with, if queued.
            let mut model: Vec<Option<u32>> = alloc::vec![None; 100];
            for (a, len, bits, is_ack) in ops {
                if is_ack {
                    f.apply_ack(a);
                    for m in model.iter_mut().take(f.acked as usize) {
                        *m = None;
                    }
                } else {
                    f.add_pending(a, a + len, PathSet::from_bits(bits));
                    for x in a.max(f.acked)..a + len {
                        let m = &mut model[x as usize];
                        *m = Some(m.unwrap_or(0) | bits);
                    }
                }
                let mut end_prev = f.acked;
                let mut bytes = 0;
                for (&s, p) in &f.pending {
                    proptest::prop_assert!(s >= end_prev && p.end > s, "{:?}", f.pending);
                    end_prev = p.end;
                    bytes += p.end - s;
                }
                proptest::prop_assert_eq!(f.pending_bytes, bytes);
                for (x, m) in model.iter().enumerate() {
                    let x = x as u64;
                    let got = f
                        .pending
                        .range(..=x)
                        .next_back()
                        .filter(|(_, p)| p.end > x)
                        .map(|(_, p)| p.carried_on.bits());
                    proptest::prop_assert_eq!(got, *m, "byte {}: {:?}", x, f.pending);
                }
            }
        }
    }

    /// Reinjections of differently cut chunks overlap. An ack inside the first one must leave
    /// no range starting below it (the session cannot send from below its acked base) and lose
    /// no unacknowledged byte of any of them.
    #[test]
    fn an_ack_inside_overlapping_reinjections_keeps_every_unacked_byte() {
        let mut f = Flow::new(FlowId(1), 0, 0, u64::MAX);
        f.buffered_end = 1000;
        f.next_new = 1000;
        f.add_pending(100, 300, PathSet::from_bits(1));
        f.add_pending(200, 600, PathSet::from_bits(2));
        f.add_pending(250, 280, PathSet::from_bits(3));
        f.add_pending(700, 800, PathSet::from_bits(1));
        f.apply_ack(250);
        assert!(
            f.pending.keys().all(|&k| k >= 250),
            "ranges start at or above the ack: {:?}",
            f.pending
        );
        let covered = |x: u64| f.pending.iter().any(|(&s, p)| s <= x && x < p.end);
        for x in (250..600).chain(700..800) {
            assert!(covered(x), "byte {x} lost: {:?}", f.pending);
        }
        assert!(!covered(600) && !covered(650));
        let bytes: u64 = f.pending.iter().map(|(&s, p)| p.end - s).sum();
        assert_eq!(f.pending_bytes, bytes);
        // Each byte claims the paths that carried it: 250..300 was on both (bits 1 and 2),
        // 300..600 only on the second.
        assert_eq!(
            f.pending[&250],
            Pending {
                end: 300,
                carried_on: PathSet::from_bits(3)
            }
        );
        assert_eq!(
            f.pending[&300],
            Pending {
                end: 600,
                carried_on: PathSet::from_bits(2)
            }
        );
    }
}
