//! What a bench run measured, and everything computed from it: per-size goodput and FCT,
//! per-flow goodput ratios with their spread and a confidence interval, the oracle FCT lower
//! bound from the emulated trip, IM delivery times, and the per-stage views of the paper's
//! Fig. 11. Pure: no I/O, no clock.

use std::collections::BTreeMap;

use polycorn_link::trip::{Outcome, PathProcess, Trip, STEP_MS};
use polycorn_sim::budget::{Budget, OracleSplit};

/// Width of a receive-progress bin, ms.
pub const BIN_MS: u64 = 100;
/// Share of a flow's bytes whose delivery counts as its "tail".
pub const TAIL_SHARE: f64 = 0.1;
/// Window after a failed handover for the Fig. 11a view, s.
pub const HOF_WINDOW_S: f64 = 2.0;

/// Which way a bulk flow's bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Server to passenger: the proxy schedules it.
    Down,
    /// Passenger to server: the relay schedules it.
    Up,
}

impl Dir {
    /// Both, downloads first.
    pub const BOTH: [Dir; 2] = [Dir::Down, Dir::Up];
    /// Key in `results.json` (`bulk`, `upload`).
    pub fn key(self) -> &'static str {
        match self {
            Dir::Down => "bulk",
            Dir::Up => "upload",
        }
    }
    /// Plural noun for tables (`downloads`, `uploads`).
    pub fn noun(self) -> &'static str {
        match self {
            Dir::Down => "downloads",
            Dir::Up => "uploads",
        }
    }
}

/// One bulk download as measured at the client, or one bulk upload as measured at the server
/// (times from the client's connect, bytes as they reached the server).
#[derive(Debug, Clone, PartialEq)]
pub struct FlowResult {
    /// Plan index.
    pub idx: usize,
    /// Size, bytes.
    pub size: u64,
    /// Planned start, s after the emulator started.
    pub start_s: f64,
    /// Completed and every byte verified.
    pub ok: bool,
    /// Why not, when not.
    pub error: Option<String>,
    /// Request start to first byte, s.
    pub first_byte_s: f64,
    /// Request start to last byte, s (for a failed flow: when it was given up).
    pub fct_s: f64,
    /// Time from the first (1 − TAIL_SHARE) of the bytes to the last byte, s.
    pub tail_s: f64,
    /// Bytes received per BIN_MS bin from the flow's start.
    pub bins: Vec<u64>,
    /// Where its FCT beyond the oracle's went, for a completed download whose parts were
    /// recorded.
    pub budget: Option<Budget>,
}

impl FlowResult {
    /// Goodput, Mbit/s (size / FCT).
    pub fn goodput_mbps(&self) -> f64 {
        if self.fct_s > 0.0 {
            self.size as f64 * 8.0 / self.fct_s / 1e6
        } else {
            0.0
        }
    }
}

/// One IM message.
#[derive(Debug, Clone, PartialEq)]
pub struct ImResult {
    /// Users in the segment.
    pub users: usize,
    /// This user.
    pub user: usize,
    /// Message index.
    pub msg: usize,
    /// Planned send time, s after the emulator started.
    pub send_s: f64,
    /// Send to answer, s; None if the answer never came.
    pub delivery_s: Option<f64>,
}

/// Everything measured for one system.
#[derive(Debug, Clone, PartialEq)]
pub struct SystemRun {
    /// Short name (`hrsch`, `mptcp`, …).
    pub system: String,
    /// Relay mode and scheduler spec.
    pub mode: String,
    /// Scheduler spec (polycorn modes) or "-".
    pub spec: String,
    /// The spec with every preset expanded, as the build that ran it defined them
    /// (`polycorn` → `hpr,minrtt,…`); None for the baselines' own modes and for rides recorded
    /// before results held it. Presets change between builds; this says what actually ran.
    pub pipeline: Option<String>,
    /// TCP congestion control of relay and proxy (`bbr`, `cubic`); None for rides recorded
    /// before results held it (see [`super::pool::congestion_ran`]).
    pub congestion: Option<String>,
    /// Seconds from emulator start until relay and proxy were ready.
    pub ready_s: f64,
    /// Paths whose subflow was not up when the workload started because their emulated link
    /// carried (almost) nothing during the lead-in (a recording that starts idle, a blackout):
    /// the relay connects them when the link comes back. Empty when every path was up.
    pub late_paths: Vec<String>,
    /// The run could not be carried out (daemon failed); results then are empty.
    pub error: Option<String>,
    /// Bulk downloads.
    pub flows: Vec<FlowResult>,
    /// IM messages.
    pub im: Vec<ImResult>,
    /// Bulk uploads (`--workloads upload`).
    pub uploads: Vec<FlowResult>,
    /// Downlink bytes the emulator delivered per path.
    pub path_down_bytes: Vec<u64>,
    /// Uplink bytes the emulator delivered per path (empty for rides recorded before it was).
    pub path_up_bytes: Vec<u64>,
    /// Relay and proxy metric samples at the end of the run (`relay:name{labels}` -> value;
    /// see `parse_counters`); empty for systems without them.
    pub counters: std::collections::BTreeMap<String, f64>,
}

impl SystemRun {
    /// The bulk flows going `dir`.
    pub fn flows_of(&self, dir: Dir) -> &[FlowResult] {
        match dir {
            Dir::Down => &self.flows,
            Dir::Up => &self.uploads,
        }
    }
}

/// Sum of the counters of `role` (`relay` or `proxy`) whose sample name starts with `prefix`.
pub fn counter_sum(run: &SystemRun, role: &str, prefix: &str) -> f64 {
    let key = format!("{role}:{prefix}");
    run.counters
        .iter()
        .filter(|(k, _)| k.starts_with(&key))
        .map(|(_, v)| v)
        .sum::<f64>()
        + 0.0 // an empty sum is -0.0
}

/// One line on what the schedulers did: per role, the stages' decision counts, reinjected and
/// redundant MB, reconnects.
pub fn activity_line(run: &SystemRun) -> String {
    let mut out = Vec::new();
    for role in ["proxy", "relay"] {
        let key = format!("{role}:polycorn_stage_decisions_total{{stage=\"");
        let stages: Vec<String> = run
            .counters
            .iter()
            .filter_map(|(k, v)| {
                let stage = k.strip_prefix(&key)?.strip_suffix("\"}")?;
                Some(format!("{stage} {v:.0}"))
            })
            .collect();
        out.push(format!(
            "{role}: {}; reinjected {:.2} MB, redundant {:.2} MB, reconnects {:.0}",
            if stages.is_empty() {
                "no stage moves".to_string()
            } else {
                stages.join(", ")
            },
            counter_sum(run, role, "polycorn_path_reinjected_bytes_total") / 1e6,
            counter_sum(run, role, "polycorn_path_redundant_bytes_total") / 1e6,
            counter_sum(run, role, "polycorn_path_reconnects_total"),
        ));
    }
    out.join(" | ")
}

/// Mean out-of-order delay of the downlink (seconds per segment that waited for a gap at the
/// relay), or `None` without the relay's reorder histogram or without reordering.
pub fn out_of_order_delay_s(run: &SystemRun) -> Option<f64> {
    let n = *run
        .counters
        .get("relay:polycorn_reorder_wait_seconds_count")?;
    let sum = *run
        .counters
        .get("relay:polycorn_reorder_wait_seconds_sum")?;
    (n > 0.0).then(|| sum / n)
}

/// p-quantile (0..=1) of `v` by linear interpolation; NaN when empty.
pub fn quantile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let x = p.clamp(0.0, 1.0) * (s.len() - 1) as f64;
    let (lo, hi) = (x.floor() as usize, x.ceil() as usize);
    s[lo] + (s[hi] - s[lo]) * (x - lo as f64)
}

/// Mean; NaN when empty.
pub fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Sample standard deviation; NaN with fewer than two values.
pub fn stddev(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return f64::NAN;
    }
    let m = mean(v);
    (v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
}

/// Two-sided 97.5% quantile of Student's t with `df` degrees of freedom (table, then normal).
fn t975(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::NAN,
        d if d <= 30 => T[d - 1],
        _ => 1.96,
    }
}

/// Summary of a sample: n, mean, median, p10, p90, 95% CI of the mean (Student's t).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Sample size.
    pub n: usize,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub median: f64,
    /// 10th percentile.
    pub p10: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95% confidence interval of the mean, low end.
    pub ci_lo: f64,
    /// High end.
    pub ci_hi: f64,
}

impl Summary {
    /// Summarise `v`.
    pub fn of(v: &[f64]) -> Summary {
        let m = mean(v);
        let half = t975(v.len().saturating_sub(1)) * stddev(v) / (v.len() as f64).sqrt();
        Summary {
            n: v.len(),
            mean: m,
            median: quantile(v, 0.5),
            p10: quantile(v, 0.1),
            p90: quantile(v, 0.9),
            ci_lo: m - half,
            ci_hi: m + half,
        }
    }
}

/// Geometric mean of positive ratios with a 95% CI (Student's t on the logs): the summary to
/// judge "A is x times B" by. The arithmetic mean of per-flow ratios is biased upward by noise
/// alone (E[X/Y] > 1 for two equally fast systems with noisy X and Y: in an A/A run of the same
/// scheduler twice it read 1.50 at 256 KB, see the manual), while the geometric mean of A/B is
/// exactly the inverse of B/A's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GeoSummary {
    /// Ratios used (positive and finite).
    pub n: usize,
    /// exp(mean(ln x)).
    pub gmean: f64,
    /// 95% CI, low end.
    pub ci_lo: f64,
    /// High end.
    pub ci_hi: f64,
}

impl GeoSummary {
    /// Summarise the positive, finite values of `v` (others are left out).
    pub fn of(v: &[f64]) -> GeoSummary {
        let logs: Vec<f64> = v
            .iter()
            .filter(|x| x.is_finite() && **x > 0.0)
            .map(|x| x.ln())
            .collect();
        let m = mean(&logs);
        let half = t975(logs.len().saturating_sub(1)) * stddev(&logs) / (logs.len() as f64).sqrt();
        GeoSummary {
            n: logs.len(),
            gmean: m.exp(),
            ci_lo: (m - half).exp(),
            ci_hi: (m + half).exp(),
        }
    }
}

/// A 95% CI for the geometric mean of ratios pooled over rides that treats the *ride*, not the
/// flow, as the independent unit: Student's t over the rides' mean log ratios. Flows of one ride
/// share that ride's luck (which system ran first, what else the two cores were doing, where
/// TCP's chaos went), so the per-flow interval of [`GeoSummary`] is too narrow when pooled
/// over rides; this one is wider and honest about it. Rides without a usable ratio are left out;
/// fewer than two rides give NaN ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RideCi {
    /// Rides with at least one usable ratio.
    pub rides: usize,
    /// The geometric mean over rides of each ride's geometric mean (the interval's centre).
    pub gmean: f64,
    /// 95% CI, low end.
    pub ci_lo: f64,
    /// High end.
    pub ci_hi: f64,
}

impl RideCi {
    /// From each ride's ratios (positive, finite values used).
    pub fn of(per_ride: &[Vec<f64>]) -> RideCi {
        let means: Vec<f64> = per_ride
            .iter()
            .filter_map(|v| {
                let logs: Vec<f64> = v
                    .iter()
                    .filter(|x| x.is_finite() && **x > 0.0)
                    .map(|x| x.ln())
                    .collect();
                (!logs.is_empty()).then(|| mean(&logs))
            })
            .collect();
        let m = mean(&means);
        let half =
            t975(means.len().saturating_sub(1)) * stddev(&means) / (means.len() as f64).sqrt();
        RideCi {
            rides: means.len(),
            gmean: m.exp(),
            ci_lo: (m - half).exp(),
            ci_hi: (m + half).exp(),
        }
    }
}

/// Oracle lower bound on the FCT of a `size`-byte download requested at `start_s` (seconds into
/// the emulated trip): the request crosses the first path that is not in an outage with that
/// path's one-way delay, then every path sends at its full emulated downlink capacity from that
/// moment (no slow start, no queueing, no header bytes, zero capacity during outages), each
/// 10 ms step's bytes arriving one one-way delay later. `None` if the trip ends first.
pub fn oracle_fct_s(trip: &Trip, start_s: f64, size: u64) -> Option<f64> {
    oracle_split(trip, start_s, size).map(|o| o.fct_s())
}

/// [`oracle_fct_s`] in its three legs (request one-way delay, sending at full capacity until
/// the last byte leaves, the last byte's one-way delay), for a flow's
/// [`Budget`](polycorn_sim::budget::Budget).
pub fn oracle_split(trip: &Trip, start_s: f64, size: u64) -> Option<OracleSplit> {
    let steps = trip.speed_mps.len();
    let in_outage = |p: usize, t_ms: u64| {
        trip.paths[p]
            .outages_ms
            .iter()
            .any(|(a, b)| (*a..*b).contains(&t_ms))
    };
    let start_ms = (start_s * 1000.0) as u64;
    // Request: earliest arrival at the proxy over any path.
    let mut req_us: Option<u64> = None;
    let first = (start_ms / STEP_MS) as usize;
    for k in first..steps {
        let t_ms = (k as u64 * STEP_MS).max(start_ms);
        for (p, path) in trip.paths.iter().enumerate() {
            if !in_outage(p, t_ms) {
                let at = t_ms * 1000 + path.owd_us[k];
                req_us = Some(req_us.map_or(at, |r: u64| r.min(at)));
            }
        }
        if req_us.is_some() {
            break;
        }
    }
    let req_us = req_us?;
    let (last, owd) =
        last_byte_arrival_us(trip, (req_us / 1000 / STEP_MS) as usize, size, |k, path| {
            let bytes = path.dl_bps[k].max(0.0) * STEP_MS as f64 / 1000.0 / 8.0;
            let send_us = (k as u64 * STEP_MS * 1000).max(req_us);
            (bytes > 0.0).then(|| {
                (
                    send_us + STEP_MS * 1000 + path.owd_us[k],
                    bytes,
                    path.owd_us[k],
                )
            })
        })?;
    let request_s = req_us as f64 / 1e6 - start_s;
    let owd_s = owd as f64 / 1e6;
    Some(OracleSplit {
        request_s,
        send_s: last as f64 / 1e6 - start_s - request_s - owd_s,
        owd_s,
    })
}

/// When the last of `size` bytes arrives, µs into the trip, and its one-way delay, µs, if it
/// does: `sent(k, path)` is when what `path` sends in 10 ms step `k` arrives (µs), how many
/// bytes it is and its one-way delay, for every step from `first` on.
fn last_byte_arrival_us(
    trip: &Trip,
    first: usize,
    size: u64,
    sent: impl Fn(usize, &PathProcess) -> Option<(u64, f64, u64)>,
) -> Option<(u64, u64)> {
    let mut arrivals: Vec<(u64, f64, u64)> = Vec::new();
    for k in first..trip.speed_mps.len() {
        arrivals.extend(trip.paths.iter().filter_map(|p| sent(k, p)));
        // Enough in flight for certain: stop collecting.
        if arrivals.iter().map(|a| a.1).sum::<f64>() >= size as f64 * 2.0 + 1e6 {
            break;
        }
    }
    arrivals.sort_by_key(|a| a.0);
    let mut got = 0.0;
    for (at_us, b, owd_us) in arrivals {
        got += b;
        if got >= size as f64 {
            return Some((at_us, owd_us));
        }
    }
    None
}

/// Oracle lower bound on the FCT of a `size`-byte upload started at `start_s` (seconds into the
/// emulated trip) and counted when its last byte reaches the server: every path sends at its
/// full emulated uplink capacity from `start_s` (no handshake, no slow start, no queueing, no
/// header bytes, zero capacity during outages), each 10 ms step's bytes arriving one one-way
/// delay later. `None` if the trip ends first.
pub fn oracle_upload_fct_s(trip: &Trip, start_s: f64, size: u64) -> Option<f64> {
    let start_us = (start_s * 1e6) as u64;
    let first = (start_us / 1000 / STEP_MS) as usize;
    let (last, _) = last_byte_arrival_us(trip, first, size, |k, path| {
        let step_us = k as u64 * STEP_MS * 1000;
        // The step the upload starts in counts only from the start on.
        let share = if k == first {
            1.0 - (start_us - step_us) as f64 / (STEP_MS * 1000) as f64
        } else {
            1.0
        };
        let bytes = path.ul_bps[k].max(0.0) * STEP_MS as f64 / 1000.0 / 8.0 * share;
        (bytes > 0.0).then(|| {
            (
                step_us + STEP_MS * 1000 + path.owd_us[k],
                bytes,
                path.owd_us[k],
            )
        })
    })?;
    Some(last as f64 / 1e6 - start_s)
}

/// The JSON keys of a [`Budget`], in order: the excess, then the parts (ms).
pub const BUDGET_KEYS: [&str; 7] = [
    "excess_ms",
    "setup_ms",
    "window_ms",
    "queueing_ms",
    "reorder_ms",
    "stalls_ms",
    "rest_ms",
];

/// A budget's values in [`BUDGET_KEYS`] order.
pub fn budget_values(b: &Budget) -> [f64; 7] {
    let p = b.parts();
    [b.excess_ms, p[0], p[1], p[2], p[3], p[4], p[5]]
}

/// A budget as results.json holds it: its values under [`BUDGET_KEYS`], ms.
pub fn budget_json(b: &Budget) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    for (k, v) in BUDGET_KEYS.iter().zip(budget_values(b)) {
        m.insert(k.to_string(), serde_json::json!(v));
    }
    serde_json::Value::Object(m)
}

/// A budget back from [`budget_json`]; `None` if a key is missing or not a number.
pub fn budget_from_json(v: &serde_json::Value) -> Option<Budget> {
    let g = |k: &str| v.get(k)?.as_f64();
    Some(Budget {
        excess_ms: g(BUDGET_KEYS[0])?,
        setup_ms: g(BUDGET_KEYS[1])?,
        window_ms: g(BUDGET_KEYS[2])?,
        queueing_ms: g(BUDGET_KEYS[3])?,
        reorder_ms: g(BUDGET_KEYS[4])?,
        stalls_ms: g(BUDGET_KEYS[5])?,
        rest_ms: g(BUDGET_KEYS[6])?,
    })
}

/// The budgets of `run`'s completed flows going `dir` of `size`.
pub fn budgets(run: &SystemRun, dir: Dir, size: u64) -> Vec<Budget> {
    run.flows_of(dir)
        .iter()
        .filter(|f| f.ok && f.size == size)
        .filter_map(|f| f.budget)
        .collect()
}

/// The oracle FCT of a flow going `dir`.
pub fn oracle_fct_in(dir: Dir, trip: &Trip, start_s: f64, size: u64) -> Option<f64> {
    match dir {
        Dir::Down => oracle_fct_s(trip, start_s, size),
        Dir::Up => oracle_upload_fct_s(trip, start_s, size),
    }
}

/// Lower bounds on IM exchanges over the emulated paths of a trip: a message handed to the
/// relay at `t` and answered at once by the server arrives back no earlier than
/// [`ImOracle::exchange_s`] says.
///
/// Each direction of each path is served as the emulator serves it: at the trip's delivery
/// opportunities (the same trace the emulator plays, with its spreading within a millisecond),
/// none inside an outage, a packet leaving at opportunity `o` arriving one one-way delay
/// (`owd_us` at `o`) later. The message and its answer each fit in one opportunity. The bound
/// lets the sender hold the packet for a later opportunity when that arrives earlier (a delay
/// drop), ignores queueing behind other traffic, the bearer's no-reordering rule, headers,
/// TCP and the relay/proxy hops (unshaped here), so no system can beat it.
#[derive(Debug, Clone)]
pub struct ImOracle {
    /// Per path: uplink and downlink.
    dirs: Vec<[OracleDir; 2]>,
}

#[derive(Debug, Clone)]
struct OracleDir {
    /// Usable opportunity times, µs after the window's start, ascending.
    times_us: Vec<u64>,
    /// One-way delay per 10 ms step, µs.
    owd_us: Vec<u64>,
}

impl OracleDir {
    fn new(bps: &[f64], owd_us: &[u64], outages_ms: &[(u64, u64)]) -> OracleDir {
        let ops = polycorn_link::trip::PathProcess::opportunities_ms(bps);
        let times_us = match polycorn_link::trace::DeliveryTrace::from_opportunities_ms(ops) {
            Ok(tr) => (0..tr.opportunity_count())
                .filter_map(|i| tr.opportunity_us(i, 0, false))
                .filter(|o| {
                    !outages_ms
                        .iter()
                        .any(|(a, b)| (a * 1000..b * 1000).contains(o))
                })
                .collect(),
            Err(_) => Vec::new(), // no capacity at all
        };
        OracleDir {
            times_us,
            owd_us: owd_us.to_vec(),
        }
    }

    /// Earliest arrival of a packet available at `t_us`, over every later opportunity.
    fn earliest_us(&self, t_us: u64) -> Option<u64> {
        let step_us = STEP_MS * 1000;
        let mut best: Option<u64> = None;
        let mut i = self.times_us.partition_point(|o| *o <= t_us);
        while let Some(&o) = self.times_us.get(i) {
            if best.is_some_and(|b| o >= b) {
                break;
            }
            let k = (o / step_us) as usize;
            let Some(&d) = self.owd_us.get(k) else { break };
            best = Some(best.map_or(o + d, |b: u64| b.min(o + d)));
            // The delay is constant within a step: only its first opportunity matters.
            let next_step = (k as u64 + 1) * step_us;
            i += self.times_us[i..].partition_point(|x| *x < next_step);
        }
        best
    }
}

impl ImOracle {
    /// The bounds for `trip` (time 0 = the trip's start, as the emulator plays it).
    pub fn new(trip: &Trip) -> ImOracle {
        let dirs = trip
            .paths
            .iter()
            .map(|p| {
                [
                    OracleDir::new(&p.ul_bps, &p.owd_us, &p.outages_ms),
                    OracleDir::new(&p.dl_bps, &p.owd_us, &p.outages_ms),
                ]
            })
            .collect();
        ImOracle { dirs }
    }

    /// Number of paths.
    pub fn paths(&self) -> usize {
        self.dirs.len()
    }

    /// Send-to-answer lower bound, s, for a message sent at `send_s` when the message and its
    /// answer may each use any path of `paths`; `None` if the trip ends first.
    pub fn exchange_s(&self, send_s: f64, paths: &[usize]) -> Option<f64> {
        let t = (send_s.max(0.0) * 1e6) as u64;
        let best = |dir: usize, at: u64| {
            paths
                .iter()
                .filter_map(|p| self.dirs.get(*p)?[dir].earliest_us(at))
                .min()
        };
        let at_server = best(0, t)?;
        let back = best(1, at_server)?;
        Some((back - t) as f64 / 1e6)
    }
}

/// The IM lower bounds of one planned message: over any path, and on each path alone.
#[derive(Debug, Clone, PartialEq)]
pub struct ImBound {
    /// Message and answer each over whichever path is best (a perfect multipath scheduler).
    pub any_s: Option<f64>,
    /// Both over path `i` (a perfect single-path connection on SIM `i`).
    pub path_s: Vec<Option<f64>>,
}

impl ImBound {
    /// The bounds of a message sent at `send_s`.
    pub fn of(oracle: &ImOracle, send_s: f64) -> ImBound {
        let all: Vec<usize> = (0..oracle.paths()).collect();
        ImBound {
            any_s: oracle.exchange_s(send_s, &all),
            path_s: all
                .iter()
                .map(|p| oracle.exchange_s(send_s, &[*p]))
                .collect(),
        }
    }

    /// The single-path bound averaged over the paths (a user's SIM is assigned round-robin,
    /// so which one is not known in advance); `None` if a path has no bound.
    pub fn single_mean_s(&self) -> Option<f64> {
        let v: Option<Vec<f64>> = self.path_s.iter().copied().collect();
        let v = v?;
        (!v.is_empty()).then(|| mean(&v))
    }
}

/// Mean downlink capacity per path over `[from_s, to_s)`, Mbit/s.
pub fn mean_capacity_mbps(trip: &Trip, from_s: f64, to_s: f64) -> Vec<f64> {
    let a = ((from_s * 1000.0) as u64 / STEP_MS) as usize;
    let b = (((to_s * 1000.0) as u64 / STEP_MS) as usize).min(trip.speed_mps.len());
    trip.paths
        .iter()
        .map(|p| mean(&p.dl_bps[a.min(b)..b]) / 1e6)
        .collect()
}

/// Times inside `[from_s, to_s)` at which failed handovers lost their source cell (the
/// blackout begins; a handover started too late degrades the link before that), s.
pub fn failed_handovers_s(trip: &Trip, from_s: f64, to_s: f64) -> Vec<f64> {
    trip.handovers
        .iter()
        .filter(|h| h.outcome == Outcome::Failure)
        .map(|h| h.disruption_ms() as f64 / 1000.0)
        .filter(|t| (from_s..to_s).contains(t))
        .collect()
}

/// Fig. 11a view: goodput (Mbit/s) of the system's bulk flows going `dir` in the HOF_WINDOW_S
/// after each failed handover during which at least one of them was running throughout.
pub fn goodput_after_hof(dir: Dir, run: &SystemRun, hofs_s: &[f64]) -> Vec<f64> {
    let mut out = Vec::new();
    for &h in hofs_s {
        let (a, b) = (h, h + HOF_WINDOW_S);
        let active = run
            .flows_of(dir)
            .iter()
            .any(|f| f.start_s <= a && f.start_s + f.fct_s >= b);
        if !active {
            continue;
        }
        let mut bytes = 0u64;
        for f in run.flows_of(dir) {
            for (j, n) in f.bins.iter().enumerate() {
                let t = f.start_s + (j as u64 * BIN_MS) as f64 / 1000.0;
                if t >= a && t < b {
                    bytes += n;
                }
            }
        }
        out.push(bytes as f64 * 8.0 / HOF_WINDOW_S / 1e6);
    }
    out
}

/// Per-flow goodput ratios `sys / reference` of the `dir` flows that completed in both.
pub fn goodput_ratios(dir: Dir, sys: &SystemRun, reference: &SystemRun, size: u64) -> Vec<f64> {
    let r: BTreeMap<usize, &FlowResult> = reference
        .flows_of(dir)
        .iter()
        .filter(|f| f.ok && f.size == size)
        .map(|f| (f.idx, f))
        .collect();
    sys.flows_of(dir)
        .iter()
        .filter(|f| f.ok && f.size == size)
        .filter_map(|f| r.get(&f.idx).map(|g| f.goodput_mbps() / g.goodput_mbps()))
        .filter(|x| x.is_finite())
        .collect()
}

/// IM statistics of one segment: mean and p90 delivery time (s), coefficient of variation of
/// the per-user mean delivery times, delivered and sent counts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImStats {
    /// Users.
    pub users: usize,
    /// Mean delivery time, s.
    pub mean_s: f64,
    /// p90 delivery time, s.
    pub p90_s: f64,
    /// Standard deviation / mean of the users' mean delivery times.
    pub cv: f64,
    /// Answers received.
    pub delivered: usize,
    /// Messages planned.
    pub sent: usize,
}

/// IM statistics for `users`.
pub fn im_stats(run: &SystemRun, users: usize) -> ImStats {
    let msgs: Vec<&ImResult> = run.im.iter().filter(|m| m.users == users).collect();
    let d: Vec<f64> = msgs.iter().filter_map(|m| m.delivery_s).collect();
    let per_user: Vec<f64> = (0..users)
        .map(|u| {
            let v: Vec<f64> = msgs
                .iter()
                .filter(|m| m.user == u)
                .filter_map(|m| m.delivery_s)
                .collect();
            mean(&v)
        })
        .filter(|x| x.is_finite())
        .collect();
    ImStats {
        users,
        mean_s: mean(&d),
        p90_s: quantile(&d, 0.9),
        cv: stddev(&per_user) / mean(&per_user),
        delivered: d.len(),
        sent: msgs.len(),
    }
}

/// Share of all emulated downlink bytes carried by path `worse`.
pub fn path_share(run: &SystemRun, worse: usize) -> f64 {
    let total: u64 = run.path_down_bytes.iter().sum();
    if total == 0 {
        return f64::NAN;
    }
    run.path_down_bytes.get(worse).copied().unwrap_or(0) as f64 / total as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use polycorn_link::trip::TripConfig;

    #[test]
    fn quantiles_and_summary() {
        let v: Vec<f64> = (1..=11).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 6.0);
        assert_eq!(quantile(&v, 0.1), 2.0);
        assert_eq!(quantile(&v, 0.9), 10.0);
        let s = Summary::of(&v);
        assert_eq!(s.n, 11);
        assert!((s.mean - 6.0).abs() < 1e-12);
        assert!(s.ci_lo < 6.0 && s.ci_hi > 6.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn geometric_mean_of_ratios_is_symmetric_where_the_mean_is_not() {
        let ab = [2.0, 0.5, 4.0, 0.25, 1.0];
        let ba: Vec<f64> = ab.iter().map(|x| 1.0 / x).collect();
        // Two equally fast systems: the mean says both are 55% faster than the other.
        assert!((Summary::of(&ab).mean - 1.55).abs() < 1e-12);
        assert!((Summary::of(&ba).mean - 1.55).abs() < 1e-12);
        let (g, h) = (GeoSummary::of(&ab), GeoSummary::of(&ba));
        assert!((g.gmean - 1.0).abs() < 1e-12 && (h.gmean - 1.0).abs() < 1e-12);
        assert!(g.ci_lo < 1.0 && g.ci_hi > 1.0);
        assert!((g.ci_lo * h.ci_hi - 1.0).abs() < 1e-9);
        // Zero, negative and non-finite ratios are left out, not turned into NaN.
        let s = GeoSummary::of(&[4.0, 0.0, -1.0, f64::NAN, 1.0]);
        assert_eq!(s.n, 2);
        assert!((s.gmean - 2.0).abs() < 1e-12);
        assert!(GeoSummary::of(&[]).gmean.is_nan());
    }

    #[test]
    fn ride_clustered_interval_is_wider_when_rides_disagree() {
        // Two rides, each internally consistent, that disagree with each other: the per-flow
        // interval (40 flows) is narrow, the ride-level one must not be.
        let a = vec![1.6; 20];
        let b = vec![1.1; 20];
        let all: Vec<f64> = a.iter().chain(&b).copied().collect();
        let flows = GeoSummary::of(&all);
        let rides = RideCi::of(&[a.clone(), b.clone(), vec![], vec![f64::NAN]]);
        assert_eq!(rides.rides, 2);
        assert!(flows.ci_lo > 1.0, "{flows:?}");
        assert!(rides.ci_lo < 1.0 && rides.ci_hi > 1.6, "{rides:?}");
        // Rides that agree give an interval around their common value.
        let same = RideCi::of(&[vec![1.2, 1.3], vec![1.25, 1.25], vec![1.3, 1.2]]);
        assert!(
            same.ci_lo < 1.25 && same.ci_hi > 1.24 && same.ci_hi < 1.3,
            "{same:?}"
        );
        assert!(RideCi::of(&[a]).ci_lo.is_nan());
    }

    #[test]
    fn oracle_is_at_least_one_way_delays_and_grows_with_size() {
        let cfg = TripConfig::preset("hsr", 1, 1).unwrap();
        let trip = Trip::generate(&cfg).unwrap();
        let t = 200.0;
        let small = oracle_fct_s(&trip, t, 256 * 1024).unwrap();
        let big = oracle_fct_s(&trip, t, 4 * 1024 * 1024).unwrap();
        let k = (t * 100.0) as usize;
        let min_owd = trip.paths.iter().map(|p| p.owd_us[k]).min().unwrap() as f64 / 1e6;
        assert!(small >= 2.0 * min_owd * 0.9, "{small} vs owd {min_owd}");
        assert!(big > small);
        // 4 MB cannot arrive faster than the summed peak capacity allows.
        let peak: f64 = trip
            .paths
            .iter()
            .map(|p| p.dl_bps.iter().cloned().fold(0.0, f64::max))
            .sum();
        assert!(big >= 4.0 * 1024.0 * 1024.0 * 8.0 / peak);
    }

    #[test]
    fn upload_oracle_sends_at_every_paths_uplink_capacity_from_the_start() {
        let cfg = TripConfig::preset("hsr", 1, 1).unwrap();
        let mut trip = Trip::generate(&cfg).unwrap();
        // Two paths of 8 Mbit/s uplink (10 kB per 10 ms step), 20 ms one way.
        for p in &mut trip.paths {
            p.ul_bps.iter_mut().for_each(|b| *b = 8e6);
            p.owd_us.iter_mut().for_each(|d| *d = 20_000);
        }
        // 100 kB = five steps of both paths; the fifth step's bytes arrive one step and one
        // one-way delay after it began: 4 × 10 + 10 + 20 ms.
        let fct = oracle_upload_fct_s(&trip, 100.0, 100_000).unwrap();
        assert!((fct - 0.070).abs() < 1e-9, "{fct}");
        // Half a step late: the first step carries half as much.
        let fct = oracle_upload_fct_s(&trip, 100.005, 100_000).unwrap();
        assert!((fct - 0.075).abs() < 1e-9, "{fct}");
        // No uplink capacity for a second: the upload waits it out.
        let k = 10_000;
        for p in &mut trip.paths {
            p.ul_bps[k..k + 100].iter_mut().for_each(|b| *b = 0.0);
        }
        let fct = oracle_upload_fct_s(&trip, 100.0, 100_000).unwrap();
        assert!((fct - 1.070).abs() < 1e-9, "{fct}");
        // Past the trip's end there is no bound.
        let end = trip.speed_mps.len() as f64 * STEP_MS as f64 / 1000.0;
        assert_eq!(oracle_upload_fct_s(&trip, end - 0.02, 100_000_000), None);
        assert_eq!(
            oracle_fct_in(Dir::Up, &trip, 100.0, 1000),
            oracle_upload_fct_s(&trip, 100.0, 1000)
        );
    }

    #[test]
    fn im_bound_follows_opportunities_delays_and_outages() {
        // Two paths of 12 Mbit/s (one 1500-byte opportunity at the end of every millisecond),
        // 30 ms each way, for one second.
        let cfg = TripConfig::preset("hsr", 1, 1).unwrap();
        let mut trip = Trip::generate(&cfg).unwrap().window(200_000, 1_000);
        for p in &mut trip.paths {
            p.dl_bps = vec![12e6; 100];
            p.ul_bps = vec![12e6; 100];
            p.owd_us = vec![30_000; 100];
            p.outages_ms.clear();
        }
        let exact = |o: &ImOracle, paths: &[usize]| {
            (o.exchange_s(0.0005, paths).unwrap() * 1e6).round() as u64
        };
        // Sent at 0.5 ms: out at 1 ms, at the server at 31 ms, back out at 32 ms, in at 62 ms.
        let o = ImOracle::new(&trip);
        assert_eq!(exact(&o, &[0]), 61_500);
        assert_eq!(exact(&o, &[0, 1]), 61_500);
        // Path 0 down for the first 100 ms: nothing leaves before 100 ms on it alone.
        trip.paths[0].outages_ms = vec![(0, 100)];
        // Path 1: 200 ms each way for the first 50 ms, then 30 ms. Holding the message until
        // 50 ms arrives at 80 ms, earlier than sending at once (201 ms): the bound holds it.
        trip.paths[1].owd_us[..5].fill(200_000);
        let o = ImOracle::new(&trip);
        assert_eq!(exact(&o, &[0]), 160_500);
        assert_eq!(exact(&o, &[1]), 110_500);
        assert_eq!(exact(&o, &[0, 1]), 110_500);
        let b = ImBound::of(&o, 0.0005);
        assert_eq!(b.path_s.len(), 2);
        assert!((b.single_mean_s().unwrap() - (0.1605 + 0.1105) / 2.0).abs() < 1e-9);
        // After the last opportunity nothing is delivered: no bound.
        assert_eq!(o.exchange_s(0.999, &[0, 1]), None);
        assert_eq!(ImBound::of(&o, 0.999).single_mean_s(), None);

        // On a generated trip: the bound over both paths is never above either path's, and
        // never below the two one-way delay floors.
        let trip = Trip::generate(&cfg).unwrap().window(150_000, 100_000);
        let o = ImOracle::new(&trip);
        let floor = cfg
            .carriers
            .iter()
            .map(|c| c.owd_floor_ms)
            .fold(f64::INFINITY, f64::min);
        for k in 0..400 {
            let t = 0.2 * k as f64 + 0.013;
            let b = ImBound::of(&o, t);
            let any = b.any_s.unwrap();
            assert!(any >= 2.0 * floor / 1000.0, "{t}: {any}");
            for p in b.path_s.iter().flatten() {
                assert!(any <= *p, "{t}: {any} > {p}");
            }
        }
    }

    #[test]
    fn ratios_pair_by_index_and_skip_failures() {
        let flow = |idx, fct_s: f64, ok| FlowResult {
            idx,
            size: 1000,
            start_s: 0.0,
            ok,
            error: None,
            first_byte_s: 0.1,
            fct_s,
            tail_s: 0.0,
            bins: vec![],
            budget: None,
        };
        let run = |flows| SystemRun {
            system: "x".into(),
            mode: "polycorn".into(),
            spec: "-".into(),
            pipeline: None,
            congestion: None,
            ready_s: 1.0,
            late_paths: vec![],
            error: None,
            flows,
            im: vec![],
            uploads: vec![],
            path_down_bytes: vec![1, 3],
            path_up_bytes: vec![],
            counters: Default::default(),
        };
        let a = run(vec![
            flow(0, 1.0, true),
            flow(1, 1.0, true),
            flow(2, 1.0, false),
        ]);
        let b = run(vec![
            flow(0, 2.0, true),
            flow(1, 1.0, false),
            flow(2, 1.0, true),
        ]);
        assert_eq!(goodput_ratios(Dir::Down, &a, &b, 1000), vec![2.0]);
        // Uploads pair with uploads only, by their own index.
        let mut a = a;
        let mut b = b;
        a.uploads = vec![flow(0, 4.0, true), flow(1, 1.0, true)];
        b.uploads = vec![flow(0, 1.0, true)];
        assert_eq!(goodput_ratios(Dir::Up, &a, &b, 1000), vec![0.25]);
        assert_eq!(goodput_ratios(Dir::Down, &a, &b, 1000), vec![2.0]);
        assert_eq!(a.flows_of(Dir::Up).len(), 2);
        assert_eq!(path_share(&a, 1), 0.75);
    }
}

#[cfg(test)]
mod counter_tests {
    use super::*;

    #[test]
    fn metrics_become_counters_ooo_delay_and_activity() {
        let body = "# TYPE polycorn_stage_decisions counter\n\
            polycorn_stage_decisions_total{stage=\"hpr\"} 12\n\
            polycorn_stage_decisions_total{stage=\"minrtt\"} 900\n\
            polycorn_path_reinjected_bytes_total{path=\"p0\"} 1500000\n\
            polycorn_path_reinjected_bytes_total{path=\"p1\"} 500000\n\
            polycorn_path_rtt_seconds{path=\"p0\"} 0.2\n\
            polycorn_reorder_wait_seconds_sum 1.5\n\
            polycorn_reorder_wait_seconds_count 30\n\
            polycorn_reorder_wait_seconds_bucket{le=\"0.005\"} 3\n\
            # EOF\n";
        let parsed = crate::bench::parse_counters(body);
        assert_eq!(parsed.len(), 6, "{parsed:?}");
        assert!(!parsed
            .keys()
            .any(|k| k.contains("rtt_seconds") || k.contains("bucket")));
        let mut run = SystemRun {
            system: "hrsch".into(),
            mode: "polycorn".into(),
            spec: "hrsch".into(),
            pipeline: None,
            congestion: None,
            ready_s: 1.0,
            late_paths: vec![],
            error: None,
            flows: vec![],
            im: vec![],
            uploads: vec![],
            path_down_bytes: vec![],
            path_up_bytes: vec![],
            counters: Default::default(),
        };
        assert_eq!(out_of_order_delay_s(&run), None);
        for role in ["relay", "proxy"] {
            run.counters
                .extend(parsed.iter().map(|(k, v)| (format!("{role}:{k}"), *v)));
        }
        assert_eq!(out_of_order_delay_s(&run), Some(0.05));
        assert_eq!(
            counter_sum(&run, "proxy", "polycorn_path_reinjected_bytes_total"),
            2e6
        );
        let line = activity_line(&run);
        assert!(
            line.starts_with("proxy: hpr 12, minrtt 900; reinjected 2.00 MB"),
            "{line}"
        );
    }
}
