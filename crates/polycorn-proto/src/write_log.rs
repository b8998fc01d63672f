//! When the bytes written to a subflow were handed to its socket: the shell's half of
//! [`TcpInfoSample::unacked_age`](polycorn_sched::path::TcpInfoSample::unacked_age), which the
//! kernel does not report. Shared by the relay/proxy engine and the simulator.

use std::collections::VecDeque;

use polycorn_sched::time::{Duration, Instant};

/// When the bytes written to one subflow were handed to its socket, to tell how long the
/// oldest of them not yet acknowledged by the peer's TCP have waited
/// ([`TcpInfoSample::unacked_age`]).
#[derive(Debug, Default)]
pub struct WriteLog {
    /// (end offset of the bytes written, when), offsets increasing; writes within
    /// [`WriteLog::MERGE`] of the last mark extend it (their age is then overstated by at
    /// most that much).
    marks: VecDeque<(u64, Instant)>,
}

impl WriteLog {
    /// Marks kept at most; writes beyond are not marked (their age reads as zero, so the
    /// scheduler falls back on the smoothed RTT).
    pub const CAP: usize = 4096;
    /// Writes this close to the last mark extend it.
    pub const MERGE: Duration = Duration::from_millis(1);

    /// The socket has taken everything up to `end` by `at`.
    pub fn wrote(&mut self, end: u64, at: Instant) {
        let full = self.marks.len() >= Self::CAP;
        match self.marks.back_mut() {
            Some((e, _)) if end <= *e => {}
            Some((e, t)) if at - *t < Self::MERGE => *e = end,
            _ if full => {}
            _ => self.marks.push_back((end, at)),
        }
    }

    /// How long the oldest bytes beyond `acked` have waited at `now` (zero: none marked).
    pub fn unacked_age(&mut self, acked: u64, now: Instant) -> Duration {
        while self.marks.front().is_some_and(|(e, _)| *e <= acked) {
            self.marks.pop_front();
        }
        self.marks.front().map_or(Duration::ZERO, |(_, t)| now - *t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_write_log_ages_the_oldest_unacknowledged_bytes() {
        let t = |ms: u64| Instant::ZERO + Duration::from_millis(ms);
        let mut log = WriteLog::default();
        assert_eq!(log.unacked_age(0, t(5)), Duration::ZERO);
        log.wrote(1000, t(10));
        log.wrote(1500, t(10)); // within a millisecond: the same mark
        log.wrote(1500, t(30)); // nothing new written
        log.wrote(3000, t(40));
        assert_eq!(log.marks.len(), 2);
        // Nothing acknowledged: the first bytes have waited since 10 ms.
        assert_eq!(log.unacked_age(0, t(110)), Duration::from_millis(100));
        // Part of the first write acknowledged: its rest is still as old.
        assert_eq!(log.unacked_age(999, t(110)), Duration::from_millis(100));
        // The first write acknowledged: the oldest bytes are the second write's.
        assert_eq!(log.unacked_age(1500, t(110)), Duration::from_millis(70));
        // Everything acknowledged: nothing waits.
        assert_eq!(log.unacked_age(3000, t(120)), Duration::ZERO);
        assert!(log.marks.is_empty());
        // At the cap, new writes go unmarked (read as zero rather than as too old).
        for k in 0..WriteLog::CAP as u64 + 10 {
            log.wrote(4000 + k, t(200 + 2 * k));
        }
        assert_eq!(log.marks.len(), WriteLog::CAP);
        let last_marked = 4000 + WriteLog::CAP as u64 - 1;
        assert_eq!(log.unacked_age(last_marked, t(100_000)), Duration::ZERO);
    }
}
