//! Online handover-failure predictors behind polycorn-sched's [`HandoverPredictor`].
//!
//! The shell (relay or proxy) owns the clock and feeds the predictor between scheduler polls:
//! * [`Predictor::map_path`] — which carrier (SIM) a scheduler path uses;
//! * [`Predictor::update_fix`] — a GPS fix as a position along the line (see [`Track`] for
//!   lat/lon), speed and direction of travel;
//! * [`Predictor::update_cell`] — a path's serving cell and RSRP, on every modem report.
//!
//! Between fixes the train's position is dead-reckoned at the last speed. The models:
//! * [`Model::Paper`] — POLYCORN §3: the failure is predicted at the mean start position of the
//!   recorded failures out of the current cell (L̂_HOF); t̂_HOF is when the train reaches it at
//!   its current speed. Cells without a recorded failure predict nothing.
//! * [`Model::LocationTable`] — Kim & Cho (KTX): a recorded handover zone of the path's
//!   carrier is predicted to disrupt the path when the train reaches it; no cells, no outcomes.
//!   [`HandoverPredictor::in_handover_zone`] answers from the same table for every model.
//! * [`Model::Risk`] — the logistic risk model of [`crate::risk`].
//!
//! Nothing here reads a clock or does I/O; every input carries `now`.

use std::fmt;

use polycorn_sched::predict::HandoverPredictor;
use polycorn_sched::time::Instant;
use polycorn_sched::{PathId, MAX_PATHS};

use crate::index::{CarrierId, CellKey, CellStats, LinkIndex};
use crate::record::Direction;
use crate::risk::{rsrp_features, RiskModel};

/// Below this speed the train is taken as stopped: no failure is imminent.
pub const MIN_SPEED_MPS: f64 = 0.5;
/// Radio reports kept per path for the RSRP trend.
const RSRP_HISTORY: usize = 8;

/// Which predictor.
#[derive(Clone, Debug, PartialEq)]
pub enum Model {
    /// Mean failure location of the current cell (POLYCORN, NSDI'23 §3).
    Paper,
    /// Recorded handover zones per carrier (Kim & Cho).
    LocationTable,
    /// Logistic risk on offset from EHP, cell failure share, RSRP and its trend, speed.
    Risk(RiskModel),
}

impl Model {
    /// Short name for tables.
    pub fn name(&self) -> &'static str {
        match self {
            Model::Paper => "paper",
            Model::LocationTable => "loctable",
            Model::Risk(_) => "risk",
        }
    }
}

/// The train's last fix.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fix {
    /// When it was taken.
    pub at: Instant,
    /// Position along the line, m.
    pub position_m: f64,
    /// Speed, m/s.
    pub speed_mps: f64,
    /// Direction of travel.
    pub direction: Direction,
}

#[derive(Clone, Debug, Default)]
struct PathState {
    carrier: Option<CarrierId>,
    /// Serving cell: `None` without service or when the history never saw the cell.
    cell: Option<u32>,
    /// Radio reports `(t_ms, rsrp)` of the current cell, oldest first.
    rsrp: Vec<(u64, f64)>,
    /// Progress when the path last changed cell: the location table skips the zone of the
    /// handover the path has already made.
    changed_at_m: Option<f64>,
    /// Whether the modem ever reported a serving cell for this path.
    reported: bool,
    /// Since when the modem has reported no serving cell after reporting one: the failure is
    /// under way, and the path stays failed until a cell is reported again.
    no_service_since: Option<Instant>,
}

/// An online predictor over a [`LinkIndex`].
#[derive(Clone)]
pub struct Predictor {
    index: LinkIndex,
    model: Model,
    fix: Option<Fix>,
    paths: Vec<PathState>,
}

impl fmt::Debug for Predictor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Predictor")
            .field("model", &self.model.name())
            .field("cells", &self.index.cells().len())
            .field("fix", &self.fix)
            .finish()
    }
}

impl Predictor {
    /// A predictor with no fix and no path mapped yet.
    pub fn new(index: LinkIndex, model: Model) -> Self {
        Predictor {
            index,
            model,
            fix: None,
            paths: vec![PathState::default(); MAX_PATHS],
        }
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The index.
    pub fn index(&self) -> &LinkIndex {
        &self.index
    }

    /// Path `path` uses carrier `carrier`; a carrier the history never saw predicts nothing.
    pub fn map_path(&mut self, path: PathId, carrier: &str) {
        let st = &mut self.paths[path.index()];
        st.carrier = self.index.carrier_id(carrier);
        st.cell = None;
        st.rsrp.clear();
        st.changed_at_m = None;
        st.reported = false;
        st.no_service_since = None;
    }

    /// A GPS fix: position along the line, speed, direction of travel.
    pub fn update_fix(&mut self, now: Instant, position_m: f64, speed_mps: f64, dir: Direction) {
        let speed_mps = if speed_mps.is_finite() {
            speed_mps.max(0.0)
        } else {
            0.0
        };
        if position_m.is_finite() {
            self.fix = Some(Fix {
                at: now,
                position_m,
                speed_mps,
                direction: dir,
            });
        }
    }

    /// A modem report for `path`: serving cell (`None` without service) and RSRP.
    ///
    /// A path whose modem had a cell and now reports none has lost its connection (a failed
    /// handover's blackout): from then until a cell is reported again, [`next_failure`] says
    /// the failure began at that moment, so HPR keeps the path out — the paper re-enables a
    /// rejected path only once it is connected to the next cell. (Before, losing the cell
    /// also dropped the cell's prediction and released the path at the very moment it went
    /// dark.) A path that never reported a cell (no modem reports at all) is unaffected.
    ///
    /// [`next_failure`]: HandoverPredictor::next_failure
    pub fn update_cell(
        &mut self,
        now: Instant,
        path: PathId,
        cell: Option<&str>,
        rsrp_dbm: Option<f64>,
    ) {
        let id = cell.and_then(|c| self.index.cell_id(c));
        let here = self.progress_at(now);
        let st = &mut self.paths[path.index()];
        match cell {
            Some(_) => {
                st.reported = true;
                st.no_service_since = None;
            }
            None if st.reported && st.no_service_since.is_none() => {
                st.no_service_since = Some(now);
            }
            None => {}
        }
        if st.cell != id {
            st.rsrp.clear();
            if id.is_some() {
                st.changed_at_m = here;
            }
        }
        st.cell = id;
        if let Some(r) = rsrp_dbm.filter(|r| r.is_finite()) {
            if st.rsrp.len() == RSRP_HISTORY {
                st.rsrp.remove(0);
            }
            st.rsrp.push((now.as_micros() / 1000, r));
        }
    }

    /// The last fix.
    pub fn fix(&self) -> Option<Fix> {
        self.fix
    }

    fn cell_stats(&self, st: &PathState, dir: Direction) -> Option<&CellStats> {
        self.index.get(CellKey {
            carrier: st.carrier?,
            cell: st.cell?,
            direction: dir,
        })
    }

    /// Progress (m, direction of travel) at which the path's next failure is predicted.
    pub fn failure_progress(&self, path: PathId, now: Instant) -> Option<f64> {
        let fix = self.fix?;
        let st = self.paths.get(path.index())?;
        match &self.model {
            Model::Paper => self.cell_stats(st, fix.direction)?.mean_failure_progress_m,
            Model::LocationTable => {
                let here = self.progress_at(now)?;
                let carrier = st.carrier?;
                let zone = self.index.zone_at_or_ahead(carrier, fix.direction, here)?;
                match st.changed_at_m {
                    // The zone of the handover already made: the next one is ahead of it.
                    Some(c) if zone.0 <= c && c < zone.1 => self
                        .index
                        .zone_at_or_ahead(carrier, fix.direction, zone.1)
                        .map(|z| z.0),
                    _ => Some(zone.0),
                }
            }
            Model::Risk(m) => {
                let stats = self.cell_stats(st, fix.direction)?;
                let rsrp = rsrp_features(&st.rsrp, now.as_micros() / 1000);
                m.failure_progress(stats, &RiskModel::context(stats, rsrp, fix.speed_mps))
            }
        }
    }

    /// Dead-reckoned progress at `now`.
    pub fn progress_at(&self, now: Instant) -> Option<f64> {
        let fix = self.fix?;
        let dt = (now.as_micros() as f64 - fix.at.as_micros() as f64) / 1e6;
        Some(fix.direction.progress(fix.position_m) + fix.speed_mps * dt)
    }
}

impl HandoverPredictor for Predictor {
    fn cell_lost_since(&self, path: PathId, _now: Instant) -> Option<Instant> {
        self.paths.get(path.index())?.no_service_since
    }

    fn next_failure(&self, path: PathId, now: Instant) -> Option<Instant> {
        if let Some(t) = self.paths.get(path.index())?.no_service_since {
            return Some(t);
        }
        let fix = self.fix?;
        if fix.speed_mps < MIN_SPEED_MPS {
            return None;
        }
        let target = self.failure_progress(path, now)?;
        let dt_s = (target - fix.direction.progress(fix.position_m)) / fix.speed_mps;
        let at_us = fix.at.as_micros() as f64 + dt_s * 1e6;
        Some(Instant::from_micros(
            at_us.clamp(0.0, u64::MAX as f64) as u64
        ))
    }

    fn in_handover_zone(&self, path: PathId, now: Instant) -> bool {
        let (Some(fix), Some(here)) = (self.fix, self.progress_at(now)) else {
            return false;
        };
        let Some(carrier) = self.paths.get(path.index()).and_then(|s| s.carrier) else {
            return false;
        };
        self.index
            .zone_at_or_ahead(carrier, fix.direction, here)
            .is_some_and(|(s, e)| s <= here && here < e)
    }
}

/// A straight track: converts GPS fixes to positions along the line (what the synthetic trip
/// model lays out: an origin and a heading). A real line needs a polyline and map matching; the
/// predictor only ever sees `position_m`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Track {
    /// Latitude and longitude of position 0.
    pub origin: (f64, f64),
    /// Heading of increasing position, degrees clockwise from north.
    pub heading_deg: f64,
}

impl Track {
    /// Position along the track of the point (lat, lon), m (its projection on the track).
    pub fn position_m(&self, lat: f64, lon: f64) -> f64 {
        let north = (lat - self.origin.0) * 111_320.0;
        let east = (lon - self.origin.1) * 111_320.0 * self.origin.0.to_radians().cos();
        let h = self.heading_deg.to_radians();
        north * h.cos() + east * h.sin()
    }
}
