//! HPR — handover-failure-aware path rejection (candidate filter).
//!
//! Source: POLYCORN (NSDI'23) §4.3. A path whose next handover is predicted to fail within
//! `L = RTT + E_GPS / V_HSR` is moved from C to U, so no new data is committed to a path that is
//! about to black out for seconds. The path comes back by itself when the predictor stops
//! predicting a failure (the relay reported the new cell). If every path is rejected, nothing
//! is sent: traffic waits for a new cell, as the paper prescribes.
//!
//! The paper leaves open how sure a prediction must be before it may leave a passenger with no
//! path at all. With `keep=1`, when every candidate would be rejected, those whose failure is
//! only predicted — their serving cell not reported lost — stay candidates: a passenger then
//! waits no longer than on the best single SIM, which would send there. A path whose cell is
//! gone stays rejected. The case this is for: one carrier's handover has failed (its cell is
//! lost) and the other's next handover is predicted to fail too; a false prediction held every
//! passenger's bytes until the second carrier's handover was over (1.6 s), and with messaging
//! users starting at that moment every one of them waited that long.
//!
//! Constants:
//! * `E_GPS = 20 m` — the paper's conservative bound on GPS error; the train may be up to this far
//!   ahead of its reported fix.
//! * `RTT` — the path's smoothed RTT: any byte sent later than one RTT before the failure risks
//!   its data or its acknowledgement being caught by the blackout.
//! * `V_HSR` below [`MIN_SPEED_MPS`] is clamped to it, so a stopped or unknown-speed train gives a
//!   finite (20 s) margin rather than an infinite one.

use crate::sets::{Moves, Reason, StageKind};
use crate::stage::{Schedulerlet, StageCtx};
use crate::time::Duration;

/// Default maximum GPS error (paper §4.3).
pub const DEFAULT_E_GPS_M: f64 = 20.0;
/// Floor for the train speed in the GPS-error term.
pub const MIN_SPEED_MPS: f64 = 1.0;

/// Handover-failure-aware path rejection.
#[derive(Debug, Clone)]
pub struct Hpr {
    /// Maximum GPS error, metres.
    pub e_gps_m: f64,
    /// When every candidate would be rejected, keep those whose cell is not reported lost.
    pub keep: bool,
}

impl Default for Hpr {
    fn default() -> Self {
        Hpr {
            e_gps_m: DEFAULT_E_GPS_M,
            keep: false,
        }
    }
}

impl Hpr {
    /// The threshold L for a path with smoothed RTT `srtt` at speed `speed_mps`.
    pub fn threshold(&self, srtt: Duration, speed_mps: Option<f64>) -> Duration {
        let v = speed_mps.unwrap_or(0.0).max(MIN_SPEED_MPS);
        srtt + Duration::from_secs_f64(self.e_gps_m / v)
    }
}

impl Schedulerlet for Hpr {
    fn name(&self) -> &'static str {
        "hpr"
    }
    fn params(&self) -> alloc::string::String {
        let mut out = alloc::vec::Vec::new();
        if self.e_gps_m != DEFAULT_E_GPS_M {
            out.push(alloc::format!("e_gps_m={}", self.e_gps_m));
        }
        if self.keep {
            out.push("keep=1".into());
        }
        out.join(",")
    }
    fn kind(&self) -> StageKind {
        StageKind::CandidateFilter
    }
    fn apply(&mut self, ctx: &StageCtx<'_>, moves: &mut Moves<'_>) {
        let candidates = moves.candidates();
        let mut doomed = alloc::vec::Vec::new();
        for p in candidates.iter() {
            let Some(at) = ctx.predictor.next_failure(p, ctx.now) else {
                continue;
            };
            let t_hof = at - ctx.now;
            let threshold = self.threshold(ctx.paths.get(p).srtt, ctx.train.speed_mps);
            if t_hof < threshold {
                doomed.push((p, Reason::HandoverFailureSoon { t_hof, threshold }));
            }
        }
        let spare = |p| ctx.predictor.cell_lost_since(p, ctx.now).is_none();
        let keep =
            self.keep && doomed.len() == candidates.len() && doomed.iter().any(|&(p, _)| spare(p));
        for (p, why) in doomed {
            if !(keep && spare(p)) {
                moves.reject(p, why);
            }
        }
    }
}
