//! Leave-one-ride-out validation with the paper's categories (NSDI'23 §3, Fig. 5/6).
//!
//! For every held-out ride, predictors are built from all *other* rides and the held-out ride is
//! replayed through the real online [`Predictor`] — the same calls a shell makes: the path's
//! serving cell when it enters a cell, each GPS fix and radio report as it arrives. For each
//! handover the replay finds t̂_HOF: the first moment at which the predictor, with what it knew
//! then, says the failure is due (`next_failure(now) ≤ now`, or comes due before the next
//! update). Then Δ = t_HO − t̂_HOF, and:
//!
//! | truth   | Δ < t1 (or never) | t1 ≤ Δ ≤ t2 | Δ > t2 |
//! |---------|-------------------|-------------|--------|
//! | failure | late              | correct     | early  |
//! | success | correct           | wrong       | wrong  |
//!
//! with t1 = 0 s and t2 = 2.5 s as in the paper. A failure never predicted before it happened is
//! late; the table also shows how many of those had no prediction at all.
//!
//! Every report also keeps the same categories over the handovers out of a cell that failed in
//! at least one training ride ([`Report::with_history`]): the failures a mean failure location
//! exists for. The paper's shares (80.6 / 1.3 / 18.1%) can only be of that kind — a failure
//! alone in its cell is never flagged by a mean-location predictor, and the paper's own counts
//! leave more such failures than its 1.3% late (docs/src/linkdb/accuracy.md).
//!
//! **t_HO** is when the handover disrupts the path for good: for a failure, the moment the UE
//! loses the source cell (the blackout begins; [`HandoverRecord::disruption_ms`]), for a
//! success its start. The throttle exists to drain the path before that moment (paper §3: the
//! path is throttled from t̂_HOF until the UE is on the next cell). L̂_HOF averages where the
//! recorded failures *started* — the point past which starting a handover is too late — so a
//! failure that starts late and loses the source at a coverage edge further on is caught ahead
//! of its loss. Judging a failure against its own start instead (`Truth::Start`) compares the
//! mean of a cell's failure starts with one more start: per cell the leave-one-out deviations
//! sum to zero, so about half of the failures come out late however tight the spot (the paper
//! reports 1.3% late, which that reading cannot produce).
//!
//! A *ride* is one pass of a train: for most sources one trip; for wmnlab, several phones on the
//! same run are separate trips (one per band lock) of one ride, held out together — otherwise a
//! co-located phone would leak the held-out run into the history.
//!
//! **Learning from one set, testing on another** ([`train_and_test`]): the predictors learn
//! from a training set (last month's rides, another source, another dataset) and are judged on
//! a test set. A ride in both sets (the same ride name) is left out of the training while it is
//! tested, so training and testing on the same trips is the leave-one-ride-out above, to the
//! count.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use polycorn_sched::predict::HandoverPredictor;
use polycorn_sched::time::Instant;
use polycorn_sched::PathId;

use crate::index::{CellKey, LinkIndex};
use crate::predict::{Model, Predictor};
use crate::record::{HandoverRecord, TripData};
use crate::risk::RiskModel;

/// The paper's t1, s.
pub const T1_S: f64 = 0.0;
/// The paper's t2, s.
pub const T2_S: f64 = 2.5;

/// How long before t̂_HOF the path is taken as throttled. [`Lead::NONE`] (the default) judges
/// the predictor itself: throttled from t̂_HOF. HPR (NSDI'23 §4.3) disables a path
/// once the predicted time to the failure is below L = RTT + E_GPS / V_HSR, so with a lead the
/// replay judges the throttling HPR would do: from t̂_HOF − L, V_HSR the fix's speed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lead {
    /// RTT term of L, ms.
    pub rtt_ms: f64,
    /// E_GPS, m (the paper uses 20 m).
    pub gps_error_m: f64,
}

impl Lead {
    /// No lead: t̂_HOF itself.
    pub const NONE: Lead = Lead {
        rtt_ms: 0.0,
        gps_error_m: 0.0,
    };

    /// L at `speed_mps`, ms.
    pub fn ms(&self, speed_mps: f64) -> f64 {
        let gps = if speed_mps > 0.0 {
            1000.0 * self.gps_error_m / speed_mps
        } else {
            0.0
        };
        (self.rtt_ms + gps).max(0.0)
    }
}

/// Which moment of a held-out handover a prediction is judged against (t_HO).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Truth {
    /// When the handover disrupts the path for good: a failure's loss of the source cell, a
    /// success's start (the default; see the module docs).
    #[default]
    Disruption,
    /// The recorded start of every handover, failures included.
    Start,
}

impl Truth {
    /// t_HO of `h` under this reading, ms.
    pub fn t_ho_ms(self, h: &HandoverRecord) -> u64 {
        match self {
            Truth::Disruption => h.disruption_ms().max(h.start_ms),
            Truth::Start => h.start_ms,
        }
    }
}

/// Which predictor to validate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ModelKind {
    /// [`Model::Paper`].
    Paper,
    /// [`Model::LocationTable`].
    LocationTable,
    /// [`Model::Risk`].
    Risk,
}

impl ModelKind {
    /// All kinds, in table order.
    pub const ALL: [ModelKind; 3] = [ModelKind::Paper, ModelKind::Risk, ModelKind::LocationTable];

    /// Name as in the CLI and tables.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Paper => "paper",
            ModelKind::LocationTable => "loctable",
            ModelKind::Risk => "risk",
        }
    }

    /// Parse a name.
    pub fn parse(s: &str) -> Option<ModelKind> {
        ModelKind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// How long before each handover's start this predictor reads the carrier's radio samples
    /// of a training ride; `None`: none at all. For [`TripData::for_prediction`].
    pub fn radio_before_ms(self) -> Option<u64> {
        match self {
            ModelKind::Paper | ModelKind::LocationTable => None,
            ModelKind::Risk => Some(crate::risk::RSRP_STALE_MS),
        }
    }

    /// This predictor from an index alone, for the kinds that need nothing else (`None` for
    /// [`ModelKind::Risk`], which is fitted on the rides themselves).
    pub fn from_index(self, index: LinkIndex) -> Option<Predictor> {
        match self {
            ModelKind::Paper => Some(Predictor::new(index, Model::Paper)),
            ModelKind::LocationTable => Some(Predictor::new(index, Model::LocationTable)),
            ModelKind::Risk => None,
        }
    }

    /// Build this predictor from training rides.
    pub fn build(self, train: &[&TripData]) -> Predictor {
        let index = LinkIndex::build(train.iter().copied());
        let model = match self {
            ModelKind::Paper => Model::Paper,
            ModelKind::LocationTable => Model::LocationTable,
            ModelKind::Risk => Model::Risk(RiskModel::train(&index, train)),
        };
        Predictor::new(index, model)
    }
}

/// Counts per category.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Categories {
    /// Failed handovers.
    pub failures: usize,
    /// … predicted within [t1, t2] before they started.
    pub fail_correct: usize,
    /// … predicted more than t2 before.
    pub fail_early: usize,
    /// … predicted after they started, or never.
    pub fail_late: usize,
    /// … of the late ones: never predicted.
    pub fail_unpredicted: usize,
    /// Successful handovers.
    pub successes: usize,
    /// … with no failure predicted at or before their start.
    pub success_correct: usize,
}

impl Categories {
    fn add(&mut self, failed: bool, delta_s: Option<f64>) {
        if failed {
            self.failures += 1;
            match delta_s {
                None => {
                    self.fail_late += 1;
                    self.fail_unpredicted += 1;
                }
                Some(d) if d < T1_S => self.fail_late += 1,
                Some(d) if d <= T2_S => self.fail_correct += 1,
                Some(_) => self.fail_early += 1,
            }
        } else {
            self.successes += 1;
            if delta_s.is_none_or(|d| d < T1_S) {
                self.success_correct += 1;
            }
        }
    }

    /// Sum of two tables.
    pub fn merge(&mut self, o: &Categories) {
        self.failures += o.failures;
        self.fail_correct += o.fail_correct;
        self.fail_early += o.fail_early;
        self.fail_late += o.fail_late;
        self.fail_unpredicted += o.fail_unpredicted;
        self.successes += o.successes;
        self.success_correct += o.success_correct;
    }

    /// Share of failures predicted correctly.
    pub fn fail_correct_share(&self) -> f64 {
        share(self.fail_correct, self.failures)
    }
}

fn share(k: usize, n: usize) -> f64 {
    if n == 0 {
        f64::NAN
    } else {
        k as f64 / n as f64
    }
}

/// Result of one handover in the replay.
#[derive(Clone, Debug, PartialEq)]
pub struct Judged {
    /// Carrier.
    pub carrier: String,
    /// Whether it failed.
    pub failed: bool,
    /// Δ = t_HO − t̂_HOF, s (`None`: no failure predicted for it at all).
    pub delta_s: Option<f64>,
    /// Whether the history the predictor was built from holds a failure out of this
    /// handover's ⟨carrier, source cell, direction⟩ — whether a mean failure location exists.
    pub history: bool,
}

/// Replay one trip through a predictor built without it.
pub fn replay(pred: &mut Predictor, trip: &TripData) -> Vec<Judged> {
    replay_with(pred, trip, Lead::NONE)
}

/// [`replay`] with the path throttled `lead` before t̂_HOF.
pub fn replay_with(pred: &mut Predictor, trip: &TripData, lead: Lead) -> Vec<Judged> {
    replay_judged(pred, trip, lead, Truth::default())
}

/// [`replay_with`], judged against `truth`.
pub fn replay_judged(
    pred: &mut Predictor,
    trip: &TripData,
    lead: Lead,
    truth: Truth,
) -> Vec<Judged> {
    let mut out = Vec::new();
    let fixes: Vec<(u64, f64, f64)> = trip
        .samples
        .iter()
        .filter_map(|s| Some((s.t_ms, s.position_m?, s.speed_mps?)))
        .collect();
    let dir = trip.meta.direction;
    for (ci, carrier) in trip.meta.carriers.iter().enumerate() {
        let Some(path) = PathId::new(ci) else { break };
        pred.map_path(path, carrier);
        let radio: Vec<(u64, Option<&str>, Option<f64>)> = trip
            .radio
            .iter()
            .filter(|r| &r.carrier == carrier)
            .map(|r| (r.t_ms, r.cell.as_deref(), r.rsrp_dbm))
            .collect();
        let hos: Vec<_> = trip
            .handovers
            .iter()
            .filter(|h| &h.carrier == carrier)
            .collect();
        let mut enter_ms = 0u64;
        for h in hos {
            let t_ho = truth.t_ho_ms(h);
            let start = enter_ms.min(h.start_ms);
            enter_ms = (h.start_ms + h.interruption_ms.unwrap_or(0)).max(t_ho);
            // Updates in [start, t_ho], merged by time: fixes first, then radio reports.
            let mut times: Vec<u64> = fixes
                .iter()
                .map(|f| f.0)
                .chain(radio.iter().map(|r| r.0))
                .filter(|t| (start..=t_ho).contains(t))
                .collect();
            times.push(start);
            times.sort_unstable();
            times.dedup();
            let us = |ms: u64| Instant::from_micros(ms * 1000);
            // State as of `start`: last fix at or before it, the handover's source cell.
            let mut fi = fixes.partition_point(|f| f.0 <= start);
            if let Some(f) = fi.checked_sub(1).map(|i| fixes[i]) {
                pred.update_fix(us(f.0), f.1, f.2, dir);
            }
            pred.update_cell(us(start), path, Some(&h.from_cell), None);
            let mut ri = radio.partition_point(|r| r.0 < start);
            let mut thr: Option<u64> = None;
            let mut last_pred: Option<u64> = None;
            for (k, &tau) in times.iter().enumerate() {
                while fi < fixes.len() && fixes[fi].0 <= tau {
                    let f = fixes[fi];
                    pred.update_fix(us(f.0), f.1, f.2, dir);
                    fi += 1;
                }
                while ri < radio.len() && radio[ri].0 <= tau {
                    let (t, cell, rsrp) = radio[ri];
                    if t >= start {
                        pred.update_cell(us(t), path, cell.or(Some(&h.from_cell)), rsrp);
                    }
                    ri += 1;
                }
                let next = times.get(k + 1).copied().unwrap_or(t_ho);
                let Some(at) = pred.next_failure(path, us(tau)) else {
                    last_pred = None;
                    continue;
                };
                let speed = pred.fix().map_or(0.0, |f| f.speed_mps);
                let at_ms = ((at.as_micros() / 1000) as f64 - lead.ms(speed)).max(0.0) as u64;
                last_pred = Some(at_ms);
                let due = at_ms.max(tau);
                if due < next || (k + 1 == times.len() && due <= t_ho) {
                    thr = Some(due);
                    break;
                }
            }
            let delta_s = match (thr, last_pred) {
                (Some(t), _) => Some((t_ho as f64 - t as f64) / 1000.0),
                (None, Some(p)) => Some(((t_ho as f64 - p as f64) / 1000.0).min(-0.001)),
                (None, None) => None,
            };
            let index = pred.index();
            let history = index
                .carrier_id(carrier)
                .zip(index.cell_id(&h.from_cell))
                .and_then(|(carrier, cell)| {
                    index.get(CellKey {
                        carrier,
                        cell,
                        direction: dir,
                    })
                })
                .is_some_and(|c| c.failures > 0);
            out.push(Judged {
                carrier: carrier.clone(),
                failed: h.outcome.failed(),
                delta_s,
                history,
            });
        }
    }
    out
}

/// The ride a trip belongs to (its name up to the first `/`).
pub fn ride_of(trip: &TripData) -> &str {
    trip.meta
        .name
        .split_once('/')
        .map_or(trip.meta.name.as_str(), |(r, _)| r)
}

/// Validation result of one predictor.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Per carrier.
    pub per_carrier: BTreeMap<String, Categories>,
    /// All carriers.
    pub total: Categories,
    /// Per carrier, only the handovers out of a cell with a failure in the training rides.
    pub with_history: BTreeMap<String, Categories>,
    /// All carriers, only those handovers.
    pub with_history_total: Categories,
    /// Every Δ of a failure that was predicted, s.
    pub failure_deltas_s: Vec<f64>,
}

/// Leave-one-ride-out over `trips` (all of one route) for each model kind.
pub fn leave_one_ride_out(trips: &[TripData], kinds: &[ModelKind]) -> Vec<(ModelKind, Report)> {
    leave_one_ride_out_with(trips, kinds, Lead::NONE)
}

/// [`leave_one_ride_out`] with the path throttled `lead` before t̂_HOF.
pub fn leave_one_ride_out_with(
    trips: &[TripData],
    kinds: &[ModelKind],
    lead: Lead,
) -> Vec<(ModelKind, Report)> {
    leave_one_ride_out_judged(trips, kinds, lead, Truth::default())
}

/// [`leave_one_ride_out_with`], judged against `truth`.
pub fn leave_one_ride_out_judged(
    trips: &[TripData],
    kinds: &[ModelKind],
    lead: Lead,
    truth: Truth,
) -> Vec<(ModelKind, Report)> {
    leave_one_ride_out_across(trips, trips, kinds, lead, truth)
}

/// [`leave_one_ride_out_judged`] with the history and the judged rides from two sets: each ride
/// of `judge` is replayed through predictors built from the trips of `train` that belong to
/// other rides (rides matched by [`ride_of`]). With `train` the rides as their relays inferred
/// them and `judge` the same rides' ground truth, it measures what LinkDB learns from relays
/// alone.
pub fn leave_one_ride_out_across(
    train: &[TripData],
    judge: &[TripData],
    kinds: &[ModelKind],
    lead: Lead,
    truth: Truth,
) -> Vec<(ModelKind, Report)> {
    let mut rides: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, t) in judge.iter().enumerate() {
        rides.entry(ride_of(t)).or_default().push(i);
    }
    let mut reports: Vec<(ModelKind, Report)> =
        kinds.iter().map(|k| (*k, Report::default())).collect();
    // The predictors from the whole training set, built once for the rides it does not hold.
    let mut whole: BTreeMap<ModelKind, Predictor> = BTreeMap::new();
    for (ride, held) in &rides {
        let history: Vec<&TripData> = train.iter().filter(|t| ride_of(t) != *ride).collect();
        let disjoint = history.len() == train.len();
        for (kind, rep) in &mut reports {
            let mut pred = if disjoint {
                whole
                    .entry(*kind)
                    .or_insert_with(|| kind.build(&history))
                    .clone()
            } else {
                kind.build(&history)
            };
            for &i in held {
                for j in replay_judged(&mut pred, &judge[i], lead, truth) {
                    let mut c = Categories::default();
                    c.add(j.failed, j.delta_s);
                    rep.per_carrier
                        .entry(j.carrier.clone())
                        .or_default()
                        .merge(&c);
                    rep.total.merge(&c);
                    if j.history {
                        rep.with_history
                            .entry(j.carrier.clone())
                            .or_default()
                            .merge(&c);
                        rep.with_history_total.merge(&c);
                    }
                    if j.failed {
                        if let Some(d) = j.delta_s {
                            rep.failure_deltas_s.push(d);
                        }
                    }
                }
            }
        }
    }
    reports
}

/// Size of a training or test set, for checks and reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetSize {
    /// Trips.
    pub trips: usize,
    /// Rides ([`ride_of`]).
    pub rides: usize,
    /// Handovers.
    pub handovers: usize,
    /// Failed handovers.
    pub failures: usize,
}

impl SetSize {
    /// The size of `trips`.
    pub fn of(trips: &[TripData]) -> SetSize {
        let rides: std::collections::BTreeSet<&str> = trips.iter().map(ride_of).collect();
        let handovers = trips.iter().map(|t| t.handovers.len()).sum();
        let failures = trips
            .iter()
            .flat_map(|t| &t.handovers)
            .filter(|h| h.outcome.failed())
            .count();
        SetSize {
            trips: trips.len(),
            rides: rides.len(),
            handovers,
            failures,
        }
    }
}

impl std::fmt::Display for SetSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} trips in {} rides, {} handovers, {} failed",
            self.trips, self.rides, self.handovers, self.failures
        )
    }
}

/// Why a training set cannot be learned from.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TrainingError {
    /// No trip at all.
    #[error("the training set is empty: no trips to learn from")]
    Empty,
    /// Trips, but not one failed handover: no failure location or risk to learn.
    #[error(
        "the training set has no failed handover to learn from ({0}); every prediction would \
         be \"no failure\""
    )]
    NoFailures(SetSize),
}

/// What [`train_and_test`] did besides the reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrainTest {
    /// The training set.
    pub train: SetSize,
    /// The test set.
    pub test: SetSize,
    /// Rides of the test set also in the training set, each left out of the training while
    /// it was tested.
    pub shared_rides: usize,
}

/// Learn from `train`, test on `test`: each ride of `test` is replayed through predictors
/// built from `train` less that ride (by [`ride_of`]; a ride only in `test` is judged by
/// predictors from the whole of `train`, built once). With `train` and `test` the same trips
/// this is [`leave_one_ride_out_judged`]. A training set with no trip or no failed handover
/// is refused: nothing can be learned from it.
pub fn train_and_test(
    train: &[TripData],
    test: &[TripData],
    kinds: &[ModelKind],
    lead: Lead,
    truth: Truth,
) -> Result<(Vec<(ModelKind, Report)>, TrainTest), TrainingError> {
    let size = SetSize::of(train);
    if size.trips == 0 {
        return Err(TrainingError::Empty);
    }
    if size.failures == 0 {
        return Err(TrainingError::NoFailures(size));
    }
    let trained: std::collections::BTreeSet<&str> = train.iter().map(ride_of).collect();
    let tested: std::collections::BTreeSet<&str> = test.iter().map(ride_of).collect();
    let info = TrainTest {
        train: size,
        test: SetSize::of(test),
        shared_rides: tested.intersection(&trained).count(),
    };
    Ok((
        leave_one_ride_out_across(train, test, kinds, lead, truth),
        info,
    ))
}

/// Leave-one-ride-out totals of the risk model at another decision threshold (sensitivity).
pub fn leave_one_ride_out_risk(trips: &[TripData], threshold: f64, truth: Truth) -> Categories {
    let mut rides: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, t) in trips.iter().enumerate() {
        rides.entry(ride_of(t)).or_default().push(i);
    }
    let mut total = Categories::default();
    for held in rides.values() {
        let train: Vec<&TripData> = trips
            .iter()
            .enumerate()
            .filter(|(i, _)| !held.contains(i))
            .map(|(_, t)| t)
            .collect();
        let index = LinkIndex::build(train.iter().copied());
        let model = RiskModel::train(&index, &train).with_threshold(threshold);
        let mut pred = Predictor::new(index, Model::Risk(model));
        for &i in held {
            for j in replay_judged(&mut pred, &trips[i], Lead::NONE, truth) {
                total.add(j.failed, j.delta_s);
            }
        }
    }
    total
}

fn pct(k: usize, n: usize) -> String {
    if n == 0 {
        "-".into()
    } else {
        format!("{:.1}%", 100.0 * k as f64 / n as f64)
    }
}

/// The category table, one row per predictor and carrier (plus "all").
pub fn format_table(reports: &[(ModelKind, Report)]) -> String {
    format_rows(reports, |rep| (&rep.per_carrier, &rep.total))
}

/// The same table over the handovers out of cells with a failure in the training rides only
/// (`Report::with_history`): the failures a mean failure location exists for, and the
/// successes such a prediction can disturb.
pub fn format_history_table(reports: &[(ModelKind, Report)]) -> String {
    format_rows(reports, |rep| (&rep.with_history, &rep.with_history_total))
}

type View<'a> = (&'a BTreeMap<String, Categories>, &'a Categories);

fn format_rows(reports: &[(ModelKind, Report)], view: impl Fn(&Report) -> View<'_>) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<9} {:<9} {:>8} {:>8} {:>8} {:>8} {:>10} {:>9} {:>10}",
        "predictor",
        "carrier",
        "failures",
        "correct",
        "early",
        "late",
        "(never)",
        "successes",
        "correct"
    );
    for (kind, rep) in reports {
        let (per_carrier, total) = view(rep);
        let rows = per_carrier
            .iter()
            .map(|(c, v)| (c.as_str(), v))
            .chain(std::iter::once(("all", total)));
        for (carrier, c) in rows {
            let _ = writeln!(
                s,
                "{:<9} {:<9} {:>8} {:>8} {:>8} {:>8} {:>10} {:>9} {:>10}",
                kind.name(),
                carrier,
                c.failures,
                pct(c.fail_correct, c.failures),
                pct(c.fail_early, c.failures),
                pct(c.fail_late, c.failures),
                pct(c.fail_unpredicted, c.failures),
                c.successes,
                pct(c.success_correct, c.successes)
            );
        }
    }
    s
}
