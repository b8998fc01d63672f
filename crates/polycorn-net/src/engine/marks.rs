//! Where each flow's last data byte went through this end, for the bench's time budgets.
//!
//! Off unless the log filter enables [`TARGET`] at debug level (`polycorn bench` does): then
//! the engine notes, per flow, the data frames it hands to subflows and the ones it reads from
//! them, and when the flow's pump ends logs one line with
//!
//! - `sent_end`, `sent`: the highest flow offset it sent and, per path that carried a copy of
//!   the frame ending there, when the engine took that frame from the session for the path
//!   (`path:µs,…`);
//! - `recv_end`, `recv_path`, `recv_us`: the highest flow offset it read and the path and time
//!   of the frame that first brought it;
//! - `first_write_us`: when the pump first wrote the flow's bytes into its local socket (at
//!   the proxy: the request reaching the server);
//! - `peer`: the local socket's peer (the passenger at the relay, the server at the proxy).
//!
//! Times are µs since the Unix epoch (the wall clock every namespace of a testbed shares). The
//! bench matches the relay's and the proxy's line by flow, the relay's to its passenger by
//! `peer`, and puts the emulator's record of the packet that carried the frame between them.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use polycorn_proto::frame::data_ends;

/// The tracing target of the marks lines.
pub const TARGET: &str = "polycorn::marks";

/// Now, µs since the Unix epoch.
pub fn wall_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// One flow's marks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowMarks {
    /// Highest flow offset sent (one past the byte), and when each path's copy of that frame
    /// was taken for it.
    pub sent_end: u64,
    /// (path, µs) per copy of the frame ending at `sent_end`, first copy first.
    pub sent: Vec<(u8, u64)>,
    /// Highest flow offset read from a subflow.
    pub recv_end: u64,
    /// Path and time of the frame that first brought `recv_end`.
    pub recv: Option<(u8, u64)>,
}

impl FlowMarks {
    /// A data frame ending at `end` was taken for `path` at `us`.
    fn sent(&mut self, path: u8, end: u64, us: u64) {
        if end > self.sent_end {
            self.sent_end = end;
            self.sent.clear();
        }
        if end == self.sent_end && !self.sent.iter().any(|&(p, _)| p == path) {
            self.sent.push((path, us));
        }
    }

    /// A data frame ending at `end` was read from `path` at `us`.
    fn received(&mut self, path: u8, end: u64, us: u64) {
        if end > self.recv_end {
            self.recv_end = end;
            self.recv = Some((path, us));
        }
    }

    /// `path:µs` per copy, comma-separated (`-` for none).
    pub fn sent_field(&self) -> String {
        if self.sent.is_empty() {
            return "-".into();
        }
        self.sent
            .iter()
            .map(|(p, us)| format!("{p}:{us}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The marks of every flow this end carries.
#[derive(Debug, Default)]
pub struct Marks(HashMap<u64, FlowMarks>);

impl Marks {
    /// Note the data frames in `frames` (whole encoded frames) taken for `path` at `us`.
    pub fn taken(&mut self, path: u8, frames: &[u8], us: u64) {
        for d in data_ends(frames).filter(|d| d.len > 0) {
            self.0.entry(d.flow).or_default().sent(path, d.end, us);
        }
    }

    /// Note a data frame of `flow` ending at `end` read from `path` at `us`.
    pub fn read(&mut self, flow: u64, path: u8, end: u64, us: u64) {
        self.0.entry(flow).or_default().received(path, end, us);
    }

    /// The marks of `flow`, forgetting them.
    pub fn take(&mut self, flow: u64) -> FlowMarks {
        self.0.remove(&flow).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use polycorn_proto::frame::Frame;

    fn data(flow: u64, offset: u64, len: usize) -> Vec<u8> {
        let payload = vec![7u8; len];
        Frame::Data {
            flow,
            offset,
            fin: false,
            data: &payload,
        }
        .to_vec()
    }

    #[test]
    fn the_last_frame_sent_keeps_every_paths_first_copy() {
        let mut m = Marks::default();
        let mut frames = data(1, 0, 100);
        frames.extend(data(2, 0, 10));
        frames.extend(data(1, 100, 50));
        m.taken(0, &frames, 10);
        m.taken(1, &data(1, 100, 50), 20); // a reinjected copy on path 1
        m.taken(0, &data(1, 100, 50), 30); // path 0 again: not its first copy
        m.taken(1, &data(1, 0, 100), 40); // an earlier frame: not the last
        let f = m.take(1);
        assert_eq!((f.sent_end, f.sent.clone()), (150, vec![(0, 10), (1, 20)]));
        assert_eq!(f.sent_field(), "0:10,1:20");
        assert_eq!(m.take(2).sent_end, 10);
        assert_eq!(m.take(1), FlowMarks::default(), "taken once");
    }

    #[test]
    fn the_first_arrival_of_the_highest_offset_counts() {
        let mut m = Marks::default();
        m.read(5, 0, 100, 10);
        m.read(5, 1, 300, 20);
        m.read(5, 0, 300, 30); // the same end again, later, on another path
        m.read(5, 0, 200, 40); // an earlier frame arriving late
        let f = m.take(5);
        assert_eq!((f.recv_end, f.recv), (300, Some((1, 20))));
        assert_eq!(f.sent_field(), "-");
    }
}
