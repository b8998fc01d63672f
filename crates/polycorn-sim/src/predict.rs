//! Handover predictors and train context in a ride: the context frames the relay sends (from
//! the trip's 1 Hz context log, as the emulator's gpsd replay gives them to the relay), the
//! predictors each end holds ([`Prediction`]: built by the caller, e.g. LinkDB's from
//! `polycorn-lab`, or none), and one that knows the trip's ground truth ([`GroundTruth`]).

use std::fmt;
use std::sync::Arc;

use polycorn_link::trip::{ContextRow, HandoverTruth, Outcome};
use polycorn_proto::frame::MAX_CONTEXT_CELLS;
use polycorn_proto::{CellInfo, ContextInfo, TrainPredictor};
use polycorn_sched::path::PathId;
use polycorn_sched::predict::{HandoverPredictor, NoPrediction};
use polycorn_sched::time::Instant;

/// Makes a session's predictor (one per ride and end).
pub type PredictorFactory = Arc<dyn Fn() -> Box<dyn TrainPredictor> + Send + Sync>;

/// Which predictors a ride's relay and proxy hold.
#[derive(Clone, Default)]
pub struct Prediction {
    /// What it is, for the ride's description (e.g. `paper`, `perfect`, `none`).
    pub name: String,
    /// The relay's (its uplink scheduler's); `None`: no prediction.
    pub relay: Option<PredictorFactory>,
    /// The proxy's (the downlink's); `None`: no prediction.
    pub proxy: Option<PredictorFactory>,
}

impl fmt::Debug for Prediction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prediction")
            .field("name", &self.name)
            .field("relay", &self.relay.is_some())
            .field("proxy", &self.proxy.is_some())
            .finish()
    }
}

impl Prediction {
    /// The same predictor at both ends.
    pub fn both(name: &str, factory: PredictorFactory) -> Prediction {
        Prediction {
            name: name.into(),
            relay: Some(factory.clone()),
            proxy: Some(factory),
        }
    }

    /// A predictor from `factory` (`None`: one that never predicts).
    pub(crate) fn make(factory: Option<&PredictorFactory>) -> Box<dyn TrainPredictor> {
        match factory {
            Some(f) => f(),
            None => Box::new(NoPrediction),
        }
    }
}

/// A context row as the relay sends it ([`polycorn_proto::Frame::Context`]): the fix, its
/// speed and heading, and each path's serving cell and RSRP (`None` in a blackout); the fix's
/// time is the trip's, in ms.
pub fn context_info(row: &ContextRow) -> ContextInfo {
    ContextInfo {
        unix_ms: row.t_ms,
        lat: row.lat.clamp(-90.0, 90.0),
        lon: row.lon.clamp(-180.0, 180.0),
        speed_mps: row.speed_mps.max(0.0) as f32,
        heading_deg: row.heading_deg as f32,
        cells: row
            .carriers
            .iter()
            .enumerate()
            .take(MAX_CONTEXT_CELLS)
            .map(|(i, c)| CellInfo {
                path: i as u8,
                cell: c.cell.map(u64::from),
                rsrp_dbm: c.rsrp_dbm.map(|r| r as f32),
            })
            .collect(),
    }
}

/// The perfect predictor: the trip's failed handovers, known in advance. A path's next
/// failure is when its next failed handover loses the source cell (until the UE is back on a
/// cell); its cell is lost from then until that moment.
#[derive(Clone, Debug)]
pub struct GroundTruth {
    /// Per path: (cell lost, back on a cell) of each failed handover, in time order.
    failures: Vec<Vec<(Instant, Instant)>>,
}

impl GroundTruth {
    /// From a trip's handovers (times in ms since the trip, or the window, began) for `paths`
    /// paths.
    pub fn new(handovers: &[HandoverTruth], paths: usize) -> GroundTruth {
        let mut failures = vec![Vec::new(); paths];
        for h in handovers {
            if h.outcome != Outcome::Failure || h.carrier >= paths {
                continue;
            }
            let lost = Instant::from_millis(h.disruption_ms());
            let back = Instant::from_millis(h.start_ms + h.interruption_ms);
            failures[h.carrier].push((lost, back.max(lost)));
        }
        for f in &mut failures {
            f.sort();
        }
        GroundTruth { failures }
    }

    fn next(&self, path: PathId, now: Instant) -> Option<(Instant, Instant)> {
        self.failures
            .get(path.index())?
            .iter()
            .find(|(_, back)| *back > now)
            .copied()
    }
}

impl HandoverPredictor for GroundTruth {
    fn next_failure(&self, path: PathId, now: Instant) -> Option<Instant> {
        self.next(path, now).map(|(lost, _)| lost)
    }
    fn cell_lost_since(&self, path: PathId, now: Instant) -> Option<Instant> {
        self.next(path, now)
            .filter(|(lost, _)| *lost <= now)
            .map(|(lost, _)| lost)
    }
}

impl TrainPredictor for GroundTruth {
    fn on_context(&mut self, _now: Instant, _ctx: &ContextInfo) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use polycorn_link::trip::SourceLoss;

    fn failure(carrier: usize, start_ms: u64, lost_ms: u64, interruption_ms: u64) -> HandoverTruth {
        HandoverTruth {
            carrier,
            from_cell: 1,
            to_cell: 2,
            start_ms,
            position_m: 0.0,
            lat: 0.0,
            lon: 0.0,
            rsrp_dbm: -100.0,
            outcome: Outcome::Failure,
            interruption_ms,
            lost: Some(SourceLoss {
                t_ms: lost_ms,
                position_m: 0.0,
                lat: 0.0,
                lon: 0.0,
                rsrp_dbm: -110.0,
            }),
        }
    }

    /// The ground truth names each failure's loss of the source cell ahead of it, reports the
    /// cell lost during the blackout, and moves on to the next failure once the UE is back.
    #[test]
    fn ground_truth_predicts_each_failure_until_the_path_is_back() {
        let mut success = failure(0, 500, 0, 50);
        success.outcome = Outcome::Success;
        success.lost = None;
        let g = GroundTruth::new(
            &[
                failure(0, 1_000, 1_400, 3_000),
                success,
                failure(0, 9_000, 9_100, 2_000),
            ],
            2,
        );
        let (p0, p1) = (PathId::new(0).unwrap(), PathId::new(1).unwrap());
        let ms = Instant::from_millis;
        assert_eq!(g.next_failure(p0, ms(0)), Some(ms(1_400)));
        assert_eq!(g.cell_lost_since(p0, ms(0)), None);
        assert_eq!(g.cell_lost_since(p0, ms(2_000)), Some(ms(1_400)));
        assert_eq!(g.next_failure(p0, ms(3_999)), Some(ms(1_400)));
        assert_eq!(g.next_failure(p0, ms(4_000)), Some(ms(9_100)));
        assert_eq!(g.next_failure(p0, ms(11_000)), None);
        assert_eq!(g.next_failure(p1, ms(0)), None);
    }
}
