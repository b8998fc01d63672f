//! Handover predictors as the shells hold them: a `polycorn-sched` predictor that also takes
//! train context (GPS fix, speed, heading, serving cells) as it arrives.

use polycorn_linkdb::record::Direction;
use polycorn_linkdb::{Predictor, Track};
use polycorn_proto::ContextInfo;
use polycorn_sched::path::PathId;
use polycorn_sched::predict::{HandoverPredictor, NoPrediction};
use polycorn_sched::time::Instant;
use std::sync::Arc;

/// A handover predictor fed with train context (pure, in `polycorn-proto`, so that the
/// simulator holds the same predictors).
pub use polycorn_proto::TrainPredictor;

/// Builds a handover predictor for a new session (LinkDB in production).
pub type PredictorFactory = Arc<dyn Fn() -> Box<dyn TrainPredictor> + Send + Sync>;

/// The proxy's predictor factory, replaceable while it runs (a reload rebuilds LinkDB and gives
/// the sessions already up a predictor from it). `None`: no prediction.
pub type LivePredictor = crate::live::Live<Option<PredictorFactory>>;

/// A [`LivePredictor`] that never predicts (no LinkDB).
pub fn no_predictor() -> LivePredictor {
    crate::live::Live::new(Arc::new(None))
}

/// A session's predictor from `factory` (none: no prediction).
pub fn make_predictor(factory: Option<&PredictorFactory>) -> Box<dyn TrainPredictor> {
    match factory {
        Some(f) => f(),
        None => Box::new(NoPrediction),
    }
}

/// LinkDB's online predictor behind a straight-track projection of GPS fixes.
#[derive(Clone, Debug)]
pub struct LinkDbPredictor {
    inner: Predictor,
    track: Track,
}

impl LinkDbPredictor {
    /// Wrap `inner`; path `i` carries `carriers[i]`.
    pub fn new(mut inner: Predictor, track: Track, carriers: &[String]) -> LinkDbPredictor {
        for (i, c) in carriers.iter().enumerate() {
            if let Some(p) = PathId::new(i) {
                inner.map_path(p, c);
            }
        }
        LinkDbPredictor { inner, track }
    }
}

impl HandoverPredictor for LinkDbPredictor {
    fn next_failure(&self, path: PathId, now: Instant) -> Option<Instant> {
        self.inner.next_failure(path, now)
    }
    fn in_handover_zone(&self, path: PathId, now: Instant) -> bool {
        self.inner.in_handover_zone(path, now)
    }
    fn cell_lost_since(&self, path: PathId, now: Instant) -> Option<Instant> {
        self.inner.cell_lost_since(path, now)
    }
}

impl TrainPredictor for LinkDbPredictor {
    fn on_context(&mut self, now: Instant, ctx: &ContextInfo) {
        let pos = self.track.position_m(ctx.lat, ctx.lon);
        let diff = (f64::from(ctx.heading_deg) - self.track.heading_deg).to_radians();
        let dir = if diff.cos() >= 0.0 {
            Direction::Up
        } else {
            Direction::Down
        };
        self.inner
            .update_fix(now, pos, f64::from(ctx.speed_mps), dir);
        for c in &ctx.cells {
            if let Some(p) = PathId::new(usize::from(c.path)) {
                let cell = c.cell.map(|v| v.to_string());
                self.inner
                    .update_cell(now, p, cell.as_deref(), c.rsrp_dbm.map(f64::from));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use polycorn_proto::CellInfo;

    fn ctx(cell: Option<u64>) -> ContextInfo {
        ContextInfo {
            unix_ms: 0,
            lat: 31.0,
            lon: 121.0,
            speed_mps: 80.0,
            heading_deg: 90.0,
            cells: vec![CellInfo {
                path: 0,
                cell,
                rsrp_dbm: Some(-90.0),
            }],
        }
    }

    /// The wrapper answers every question of the interface from LinkDB, not the trait's
    /// defaults: a modem losing its cell is a failure under way and a known cell loss.
    #[test]
    fn the_wrapper_forwards_cell_losses_from_the_relay() {
        let predictor = polycorn_linkdb::ModelKind::Paper.build(&[]);
        let track = Track {
            origin: (31.0, 121.0),
            heading_deg: 90.0,
        };
        let mut p = LinkDbPredictor::new(predictor, track, &["A".into(), "B".into()]);
        let a = PathId::new(0).unwrap();
        let (t0, t1) = (Instant::from_millis(1_000), Instant::from_millis(2_000));
        p.on_context(t0, &ctx(Some(7)));
        assert_eq!(p.cell_lost_since(a, t0), None);
        assert_eq!(p.next_failure(a, t0), None);
        p.on_context(t1, &ctx(None));
        assert_eq!(p.cell_lost_since(a, t1), Some(t1));
        assert_eq!(p.next_failure(a, t1), Some(t1));
        let dynp: &dyn HandoverPredictor = &p;
        assert_eq!(dynp.cell_lost_since(a, t1), Some(t1));
        p.on_context(t1, &ctx(Some(8)));
        assert_eq!(p.cell_lost_since(a, t1), None);
    }
}
