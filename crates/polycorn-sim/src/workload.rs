//! What a ride carries and what it measured: bulk downloads and uploads at planned times and
//! IM segments (users exchanging small messages with an echo server), as `polycorn bench`'s
//! plan lays them out, and per transfer / per message results in virtual time.

/// A bulk transfer: a download (server → passenger) or an upload (passenger → server).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    /// Index in its plan.
    pub idx: usize,
    /// Start, µs of virtual time.
    pub start_us: u64,
    /// Bytes.
    pub size: u64,
}

/// `users` IM users, each on its own connection opened at `start_us`, sending 100-byte
/// messages the server answers with 4 bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImSegment {
    /// Users (each its own passenger address).
    pub users: usize,
    /// When the users connect, µs.
    pub start_us: u64,
    /// Per user, each message's send time, µs after `start_us`.
    pub sends_us: Vec<Vec<u64>>,
    /// An answer later than this after `start_us` does not count.
    pub deadline_us: u64,
}

/// Bytes of an IM message.
pub const IM_UP_BYTES: usize = 100;
/// Bytes of an IM answer.
pub const IM_DOWN_BYTES: usize = 4;

/// Everything a ride carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Workload {
    /// Bulk downloads.
    pub downloads: Vec<Transfer>,
    /// A download not complete this long after its start has failed.
    pub download_timeout_us: u64,
    /// Bulk uploads.
    pub uploads: Vec<Transfer>,
    /// An upload not complete this long after its start has failed.
    pub upload_timeout_us: u64,
    /// IM segments.
    pub im: Vec<ImSegment>,
}

/// One transfer as measured: a download at the passenger, an upload at the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferResult {
    /// Plan index.
    pub idx: usize,
    /// Bytes.
    pub size: u64,
    /// Planned start, µs.
    pub start_us: u64,
    /// Why it failed (reset, timeout), if it did.
    pub error: Option<String>,
    /// (µs after the start, bytes) per arrival of data, in order.
    pub marks: Vec<(u64, u64)>,
    /// µs after the start when the last byte arrived (and, for a download, the end of the
    /// stream was seen); `None` if it never completed.
    pub done_us: Option<u64>,
}

impl TransferResult {
    pub(crate) fn new(t: &Transfer) -> Self {
        TransferResult {
            idx: t.idx,
            size: t.size,
            start_us: t.start_us,
            error: None,
            marks: Vec::new(),
            done_us: None,
        }
    }

    /// Bytes arrived so far.
    pub fn bytes(&self) -> u64 {
        self.marks.iter().map(|(_, n)| n).sum()
    }

    /// Whether every byte arrived in time.
    pub fn ok(&self) -> bool {
        self.error.is_none() && self.done_us.is_some()
    }

    pub(crate) fn arrived(&mut self, now_us: u64, n: u64) {
        if n > 0 && self.done_us.is_none() {
            self.marks.push((now_us.saturating_sub(self.start_us), n));
        }
    }

    pub(crate) fn fail(&mut self, why: impl Into<String>) {
        if self.done_us.is_none() && self.error.is_none() {
            self.error = Some(why.into());
        }
    }
}

/// One IM message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImAnswer {
    /// Users in its segment.
    pub users: usize,
    /// Its user.
    pub user: usize,
    /// Its index among the user's messages.
    pub msg: usize,
    /// When it was sent, µs.
    pub send_us: u64,
    /// Send to answer, µs; `None` if no answer came by the deadline.
    pub delivery_us: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transfer_counts_arrivals_until_done_and_keeps_its_first_error() {
        let t = Transfer {
            idx: 1,
            start_us: 1_000,
            size: 10,
        };
        let mut r = TransferResult::new(&t);
        r.arrived(1_500, 4);
        r.arrived(2_000, 6);
        assert_eq!(r.marks, vec![(500, 4), (1_000, 6)]);
        assert_eq!(r.bytes(), 10);
        assert!(!r.ok(), "not done yet");
        r.done_us = Some(1_000);
        assert!(r.ok());
        r.fail("late");
        assert!(r.ok(), "a finished transfer does not fail afterwards");
        let mut s = TransferResult::new(&t);
        s.fail("reset");
        s.fail("timeout");
        assert_eq!(s.error.as_deref(), Some("reset"));
    }
}
