//! The second predictor (beyond the paper): a logistic failure-risk model.
//!
//! The paper's predictor throttles at the *mean* failure location of the current cell. That is a
//! point estimate, so about half of the failures it has seen started before it, and it says
//! nothing about cells whose failures were rare. This model asks instead: *if* the handover
//! started at progress x, how likely would it fail? It is one logistic regression per carrier,
//! fitted on every recorded handover (successes too), with features known online:
//!
//! * offset of the start from the cell's EHP, per 100 m (late handovers fail more — Table 1);
//! * the cell's smoothed failure share, as log-odds (failures concentrate on some cells);
//! * RSRP relative to −95 dBm per 5 dB, and its trend over the last ~3 s, dB/s, from the radio
//!   reports *before* the handover (what the relay has; never the RSRP logged at the start);
//! * train speed relative to 300 km/h.
//!
//! Online, everything but the offset is fixed at its current value, so the risk is monotone in
//! x and the predicted failure position is where it crosses [`RISK_THRESHOLD`]. The threshold
//! is a cost ratio, fixed a priori: throttling a path that would have handed over fine wastes
//! about one second of it (until the new cell is reported), while sending into a failure costs
//! a blackout of 1–10 s plus TCP's recovery (paper §2.3) — call it nine times as much, so
//! throttling pays from a risk of 1/(1+9) = 0.1. `validate --risk-thresholds` prints how the
//! categories move with it; it was not tuned to them. Training features are leave-one-out (the EHP and the failure share
//! of a cell without the handover itself), so the model does not learn from a row's own label.

use std::collections::{BTreeMap, HashMap};

use crate::index::{CarrierId, CellKey, CellStats, LinkIndex, PRIOR_FAILURES, PRIOR_N};
use crate::record::TripData;

/// Risk at which a handover is predicted to fail.
pub const RISK_THRESHOLD: f64 = 0.1;
/// Window of radio reports for the RSRP trend, ms.
pub const TREND_WINDOW_MS: u64 = 3_000;
/// Reports older than this are stale and ignored, ms.
pub const RSRP_STALE_MS: u64 = 5_000;
/// Predictions further than this past the EHP are dropped (the handover happens long before), m.
pub const MAX_OFFSET_M: f64 = 2_000.0;
/// Ridge penalty of the fit (features are of unit scale).
const RIDGE: f64 = 1.0;
/// Reference speed for the speed feature, m/s.
const V_REF_MPS: f64 = 300.0 / 3.6;

/// Number of coefficients (intercept + 5 features).
pub const N_COEF: usize = 6;

/// Features besides the offset, as seen at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Context {
    /// Smoothed failure share of the cell, as log-odds.
    pub prior_logit: f64,
    /// (RSRP + 95) / 5.
    pub rsrp_rel: f64,
    /// RSRP trend, dB/s.
    pub rsrp_slope: f64,
    /// speed / (300 km/h) − 1.
    pub speed_rel: f64,
}

impl Context {
    fn row(&self, offset_100m: f64) -> [f64; N_COEF] {
        [
            1.0,
            offset_100m,
            self.prior_logit,
            self.rsrp_rel,
            self.rsrp_slope,
            self.speed_rel,
        ]
    }
}

fn logit(p: f64) -> f64 {
    (p / (1.0 - p)).ln()
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// RSRP features from radio reports `(t_ms, rsrp_dbm)` (oldest first) at time `now_ms`:
/// `(rsrp_rel, slope)`; zeros without a fresh report.
pub fn rsrp_features(reports: &[(u64, f64)], now_ms: u64) -> (f64, f64) {
    let fresh: Vec<&(u64, f64)> = reports
        .iter()
        .filter(|(t, _)| *t <= now_ms && now_ms - *t <= RSRP_STALE_MS)
        .collect();
    let Some(&&(t1, r1)) = fresh.last() else {
        return (0.0, 0.0);
    };
    let slope = fresh
        .iter()
        .find(|(t, _)| t1 - *t <= TREND_WINDOW_MS && t1 > *t)
        .map_or(0.0, |&&(t0, r0)| (r1 - r0) / ((t1 - t0) as f64 / 1000.0));
    ((r1 + 95.0) / 5.0, slope.clamp(-20.0, 20.0))
}

/// Speed feature.
pub fn speed_rel(speed_mps: f64) -> f64 {
    speed_mps / V_REF_MPS - 1.0
}

/// [`RiskModel::train`] in two passes over the trips, each read one at a time: the first
/// ([`RiskTrainer::add_positions`]) takes every handover's position (each cell's leave-one-out
/// EHP needs them all), the second ([`RiskTrainer::add_rows`]) a training row per handover.
/// What it keeps grows with the handovers, not with the fixes and radio samples.
#[derive(Debug, Default)]
pub struct RiskTrainer {
    /// Per cell: progress of every handover, for leave-one-out EHPs.
    by_cell: BTreeMap<CellKey, Vec<f64>>,
    sorted: bool,
    rows: BTreeMap<CarrierId, (Vec<[f64; N_COEF]>, Vec<f64>)>,
}

impl RiskTrainer {
    /// First pass: the trip's handover positions; `key_of` names a cell as the index does
    /// ([`LinkIndex::key_of`], or [`crate::index::IndexBuilder::key_of`] while it is built).
    pub fn add_positions(
        &mut self,
        trip: &TripData,
        key_of: impl Fn(&str, &str, crate::record::Direction) -> Option<CellKey>,
    ) {
        for h in &trip.handovers {
            if let (Some(p), Some(k)) =
                (h.position_m, key_of(&h.carrier, &h.from_cell, h.direction))
            {
                self.by_cell
                    .entry(k)
                    .or_default()
                    .push(h.direction.progress(p));
            }
        }
    }

    /// Second pass, after every trip's positions: the trip's training rows.
    pub fn add_rows(&mut self, index: &LinkIndex, t: &TripData) {
        if !self.sorted {
            for v in self.by_cell.values_mut() {
                v.sort_by(f64::total_cmp);
            }
            self.sorted = true;
        }
        for h in &t.handovers {
            let (Some(p), Some(k)) = (
                h.position_m,
                index.key_of(&h.carrier, &h.from_cell, h.direction),
            ) else {
                continue;
            };
            let Some(stats) = index.get(k) else { continue };
            let progress = h.direction.progress(p);
            let Some(all) = self.by_cell.get(&k) else {
                continue;
            };
            if all.len() < 2 {
                continue; // no leave-one-out EHP
            }
            // Leave-one-out EHP: the smallest other start.
            let ehp = if progress <= all[0] { all[1] } else { all[0] };
            let y = if h.outcome.failed() { 1.0 } else { 0.0 };
            let share = (f64::from(stats.failures) - y + PRIOR_FAILURES)
                / (f64::from(stats.handovers) - 1.0 + PRIOR_N);
            let reports: Vec<(u64, f64)> = t
                .radio
                .iter()
                .filter(|r| r.carrier == h.carrier)
                .filter_map(|r| r.rsrp_dbm.map(|x| (r.t_ms, x)))
                .filter(|(ts, _)| *ts <= h.start_ms && h.start_ms - ts <= RSRP_STALE_MS)
                .collect();
            let (rsrp_rel, rsrp_slope) = rsrp_features(&reports, h.start_ms);
            let speed = crate::index::speed_at(t, h.start_ms).unwrap_or(V_REF_MPS);
            let ctx = Context {
                prior_logit: logit(share),
                rsrp_rel,
                rsrp_slope,
                speed_rel: speed_rel(speed),
            };
            let e = self.rows.entry(k.carrier).or_default();
            e.0.push(ctx.row((progress - ehp) / 100.0));
            e.1.push(y);
        }
    }

    /// The fitted model.
    pub fn finish(self) -> RiskModel {
        let mut weights = HashMap::new();
        for (c, (x, y)) in self.rows {
            if y.iter().any(|v| *v > 0.5) {
                weights.insert(c, fit_logistic(&x, &y));
            }
        }
        RiskModel {
            weights,
            threshold: RISK_THRESHOLD,
        }
    }
}

/// One logistic model per carrier.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RiskModel {
    weights: HashMap<CarrierId, [f64; N_COEF]>,
    threshold: f64,
}

impl RiskModel {
    /// Fit on `trips` (the index must have been built from the same trips). A carrier without
    /// a single recorded failure gets no model, so no predictions.
    pub fn train(index: &LinkIndex, trips: &[&TripData]) -> RiskModel {
        let mut tr = RiskTrainer::default();
        for t in trips {
            tr.add_positions(t, |c, cell, d| index.key_of(c, cell, d));
        }
        for t in trips {
            tr.add_rows(index, t);
        }
        tr.finish()
    }

    /// The same model with another decision threshold (for sensitivity tables).
    pub fn with_threshold(mut self, threshold: f64) -> Self {
        self.threshold = threshold.clamp(1e-6, 1.0 - 1e-6);
        self
    }

    /// The fitted coefficients of a carrier: intercept, offset/100 m, prior log-odds, RSRP/5 dB,
    /// RSRP trend (dB/s), speed.
    pub fn weights(&self, carrier: CarrierId) -> Option<&[f64; N_COEF]> {
        self.weights.get(&carrier)
    }

    /// Context features for a cell at this moment.
    pub fn context(stats: &CellStats, rsrp: (f64, f64), speed_mps: f64) -> Context {
        Context {
            prior_logit: logit(stats.failure_share_smoothed()),
            rsrp_rel: rsrp.0,
            rsrp_slope: rsrp.1,
            speed_rel: speed_rel(speed_mps),
        }
    }

    /// Risk of failure if the handover out of `stats`' cell started at `progress_m`.
    pub fn risk(&self, stats: &CellStats, ctx: &Context, progress_m: f64) -> Option<f64> {
        let w = self.weights.get(&stats.key.carrier)?;
        let x = ctx.row((progress_m - stats.ehp_progress_m) / 100.0);
        Some(sigmoid(x.iter().zip(w).map(|(a, b)| a * b).sum()))
    }

    /// Progress from which a handover out of `stats`' cell is predicted to fail, or `None`.
    pub fn failure_progress(&self, stats: &CellStats, ctx: &Context) -> Option<f64> {
        let w = self.weights.get(&stats.key.carrier)?;
        let x = ctx.row(0.0);
        let rest: f64 = x.iter().zip(w).map(|(a, b)| a * b).sum();
        let target = logit(self.threshold);
        let offset_m = if w[1] > 1e-9 {
            ((target - rest) / w[1] * 100.0).max(0.0)
        } else if rest >= target {
            0.0
        } else {
            return None;
        };
        (offset_m <= MAX_OFFSET_M).then_some(stats.ehp_progress_m + offset_m)
    }
}

/// Ridge-penalised logistic regression by Newton's method (IRLS); the intercept is not
/// penalised. Deterministic; at most 50 iterations.
pub fn fit_logistic(x: &[[f64; N_COEF]], y: &[f64]) -> [f64; N_COEF] {
    let mut w = [0.0; N_COEF];
    for _ in 0..50 {
        let mut g = [0.0; N_COEF];
        let mut h = [[0.0; N_COEF]; N_COEF];
        for (xi, yi) in x.iter().zip(y) {
            let p = sigmoid(xi.iter().zip(&w).map(|(a, b)| a * b).sum());
            let s = (p * (1.0 - p)).max(1e-9);
            for a in 0..N_COEF {
                g[a] += (p - yi) * xi[a];
                for b in 0..N_COEF {
                    h[a][b] += s * xi[a] * xi[b];
                }
            }
        }
        for a in 1..N_COEF {
            g[a] += RIDGE * w[a];
            h[a][a] += RIDGE;
        }
        h[0][0] += 1e-9;
        let Some(step) = solve(h, g) else { break };
        let mut max = 0.0f64;
        for a in 0..N_COEF {
            w[a] -= step[a];
            max = max.max(step[a].abs());
        }
        if max < 1e-8 {
            break;
        }
    }
    w
}

#[allow(clippy::needless_range_loop)] // index arithmetic reads clearer here
/// Solve `a · x = b` by Gaussian elimination with partial pivoting; `None` if singular.
fn solve(mut a: [[f64; N_COEF]; N_COEF], mut b: [f64; N_COEF]) -> Option<[f64; N_COEF]> {
    for col in 0..N_COEF {
        let piv = (col..N_COEF).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[piv][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, piv);
        b.swap(col, piv);
        for r in col + 1..N_COEF {
            let f = a[r][col] / a[col][col];
            for c in col..N_COEF {
                a[r][c] -= f * a[col][c];
            }
            b[r] -= f * b[col];
        }
    }
    let mut x = [0.0; N_COEF];
    for r in (0..N_COEF).rev() {
        let s: f64 = (r + 1..N_COEF).map(|c| a[r][c] * x[c]).sum();
        x[r] = (b[r] - s) / a[r][r];
    }
    Some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logistic_recovers_a_threshold() {
        // y = 1 iff offset > 2 (200 m), with some overlap.
        let mut x = Vec::new();
        let mut y = Vec::new();
        for i in 0..200 {
            let off = i as f64 / 40.0;
            x.push([1.0, off, 0.0, 0.0, 0.0, 0.0]);
            y.push(if (off > 2.0) ^ (i % 17 == 0) {
                1.0
            } else {
                0.0
            });
        }
        let w = fit_logistic(&x, &y);
        assert!(w[1] > 0.5, "{w:?}");
        let crossing = -w[0] / w[1];
        assert!((crossing - 2.0).abs() < 0.5, "crossing {crossing}");
    }

    #[test]
    fn rsrp_trend_uses_only_fresh_past_reports() {
        let r = [(0, -90.0), (1000, -92.0), (2000, -94.0), (9000, -80.0)];
        let (rel, slope) = rsrp_features(&r, 2500);
        assert!((rel - 0.2).abs() < 1e-9);
        assert!((slope + 2.0).abs() < 1e-9);
        assert_eq!(rsrp_features(&r, 20_000), (0.0, 0.0));
    }
}
