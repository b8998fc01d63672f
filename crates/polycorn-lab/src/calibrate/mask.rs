//! Which emulator times count: after the warm-up, before the end, above HSR speed.

use super::*;

/// Which emulator times count: after the warm-up, before the end, train above 250 km/h.
#[derive(Debug, Clone)]
pub(super) struct TimeMask {
    pub(super) speed_mps: Vec<f64>,
    pub(super) warmup_ms: u64,
    pub(super) end_ms: u64,
}

impl TimeMask {
    pub(super) fn valid_ms(&self, t_ms: u64) -> bool {
        t_ms >= self.warmup_ms
            && t_ms < self.end_ms
            && self
                .speed_mps
                .get((t_ms / STEP_MS) as usize)
                .is_some_and(|v| *v > HSR_SPEED_MPS)
    }
    pub(super) fn valid_s(&self, t_s: f64) -> bool {
        t_s >= 0.0 && self.valid_ms((t_s * 1000.0) as u64)
    }
    /// Every 10 ms step of `[a_ms, b_ms)` is valid.
    pub(super) fn valid_span(&self, a_ms: u64, b_ms: u64) -> bool {
        b_ms <= self.end_ms
            && (a_ms..b_ms)
                .step_by(STEP_MS as usize)
                .all(|t| self.valid_ms(t))
    }
    pub(super) fn bin_valid(&self, j: usize) -> bool {
        self.valid_span(j as u64 * BIN_MS, (j as u64 + 1) * BIN_MS)
    }
}
