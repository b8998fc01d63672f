//! The handover-predictor interface HPR and the location-table blocker ask.
//!
//! LinkDB implements it in production; tests use [`FixedPredictions`]. The scheduler passes a
//! `&dyn HandoverPredictor` into each poll, so the shell keeps ownership and can update the
//! predictor with GPS fixes and cell reports between polls.

use alloc::vec::Vec;

use crate::path::{PathId, PathSet, MAX_PATHS};
use crate::time::Instant;

/// Answers, per path, when its next handover is expected to fail.
pub trait HandoverPredictor {
    /// Predicted time at which the next handover of `path` fails (it may lie in the past while
    /// the path is still on the old cell), or `None` if no failure is expected.
    fn next_failure(&self, path: PathId, now: Instant) -> Option<Instant>;

    /// Whether the train is now inside a recorded handover zone of `path` (the location table
    /// of Kim & Cho). Default: never.
    fn in_handover_zone(&self, _path: PathId, _now: Instant) -> bool {
        false
    }

    /// Since when `path`'s modem has reported no serving cell (a handover failure under way,
    /// known from the relay's cell reports rather than predicted), or `None` while it is
    /// connected or nothing is known. ER with `cell_loss` reinjects the path's unacknowledged
    /// data once per such loss. Default: never known.
    fn cell_lost_since(&self, _path: PathId, _now: Instant) -> Option<Instant> {
        None
    }
}

/// A predictor that never predicts anything (no LinkDB, or a baseline without prediction).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoPrediction;

impl HandoverPredictor for NoPrediction {
    fn next_failure(&self, _path: PathId, _now: Instant) -> Option<Instant> {
        None
    }
}

/// A predictor with explicitly set answers, for tests, simulations and replay of ground truth.
#[derive(Clone, Debug)]
pub struct FixedPredictions {
    failures: Vec<Option<Instant>>,
    lost: Vec<Option<Instant>>,
    zones: PathSet,
}

impl FixedPredictions {
    /// No predictions for any path.
    pub fn new() -> Self {
        FixedPredictions {
            failures: alloc::vec![None; MAX_PATHS],
            lost: alloc::vec![None; MAX_PATHS],
            zones: PathSet::EMPTY,
        }
    }
    /// Predict that `path`'s next handover fails at `at` (`None`: no failure expected).
    pub fn set_failure(&mut self, path: PathId, at: Option<Instant>) {
        self.failures[path.index()] = at;
    }
    /// Report that `path` has had no serving cell since `since` (`None`: connected).
    pub fn set_cell_lost(&mut self, path: PathId, since: Option<Instant>) {
        self.lost[path.index()] = since;
    }
    /// Mark whether the train is inside a handover zone of `path`.
    pub fn set_in_zone(&mut self, path: PathId, inside: bool) {
        if inside {
            self.zones.insert(path);
        } else {
            self.zones.remove(path);
        }
    }
}

impl Default for FixedPredictions {
    fn default() -> Self {
        FixedPredictions::new()
    }
}

impl HandoverPredictor for FixedPredictions {
    fn next_failure(&self, path: PathId, _now: Instant) -> Option<Instant> {
        self.failures.get(path.index()).copied().flatten()
    }
    fn in_handover_zone(&self, path: PathId, _now: Instant) -> bool {
        self.zones.contains(path)
    }
    fn cell_lost_since(&self, path: PathId, _now: Instant) -> Option<Instant> {
        self.lost.get(path.index()).copied().flatten()
    }
}
