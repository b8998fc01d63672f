//! The HSR trip model: a seeded synthetic train ride over N independent carriers.
//!
//! Two seeds: the **route seed** fixes what does not change between rides on the same line
//! (cell layout, tower positions, shadowing, which cell boundaries are hard to hand over at);
//! the **trip seed** fixes one ride (speed profile jitter, fading, where each handover is
//! triggered, outcomes, capacity and delay processes). LinkDB learns across trips of one route;
//! the bench replays one trip for every system under test.
//!
//! ## Model (per carrier, on a 10 ms grid)
//! * **Trajectory.** Stations along a straight track; accelerate at `accel_mps2` to a per-trip
//!   cruise speed, brake at `decel_mps2`, dwell. GPS fixes at 1 Hz with Gaussian error.
//! * **Cells.** Boundaries every `cell_spacing_m` (± `spacing_jitter`), towers `tower_offset_m`
//!   from the track. RSRP = `tx_dbm − 10·n·log10(distance)` + route shadowing (spatially
//!   correlated) + fast fading (time-correlated).
//! * **Handovers.** At each boundary the handover starts at `boundary − ehp_lead_m + lateness`,
//!   lateness ~ Gamma(2) with mean `lateness_mean_m` (late triggering; what varies from ride to
//!   ride, with fading). Whether it fails is a property of the *place*, as measured on HSR
//!   (failures recur at the same spots of a cell; late and low-RSRP handovers fail more):
//!   a route-fixed share `hard_share` of cells have a **coverage edge** inside the range where
//!   their handovers start (a cutting, tunnel portal, end of the repeater chain). Its position
//!   is set per cell from a route-fixed late share (log-uniform in `late_share`): handovers
//!   starting later than that quantile of the lateness cannot complete before the edge, so the
//!   link degrades from the start until the train reaches the edge (± `edge_jitter_m` per ride)
//!   and is lost there — also when the handover had not started yet. Such a failure is recorded
//!   where and when the UE loses the source cell (the paper takes its SVM features at the moment
//!   the link to the source is gone), with the source's RSRP there (it fades out by
//!   `edge_drop_db` over `edge_ramp_m` before the edge). Anywhere, a handover can also fail
//!   because its command is lost in a fade: log-odds `weak_logit` + `weak_logit_per_5db` per
//!   5 dB of start RSRP below −95 dBm; recorded at its start. A success interrupts the carrier
//!   for an execution time drawn from measured LTE handovers (or a lognormal fitted to them,
//!   median 34 ms), during which the emulated links hold the carrier's packets by default
//!   ([`TripConfig::hold_interruptions`]); a failure blacks the link out for 1–10 s (packets
//!   lost), after which the UE re-establishes on the cell it is in (at the earliest the target,
//!   never a cell whose edge it has passed).
//! * **Capacity.** Log-capacity = log median + RSRP term + slow and fast Ornstein–Uhlenbeck
//!   components (trip-specific), so location explains little of the throughput (as measured).
//!   Uplink = downlink × `uplink_ratio`.
//! * **Delay.** One-way delay = floor + lognormal, OU-correlated; doubled while a failing
//!   handover degrades the link.
//!
//! Constants are in the presets ([`TripConfig::hsr`], [`TripConfig::ktx`]) with the published
//! statistic each one targets.

use core::f64::consts::PI;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;

/// Grid step of the generated processes, ms.
pub const STEP_MS: u64 = 10;
/// Bytes per delivery opportunity (mahimahi's MTU).
pub const OPPORTUNITY_BYTES: u64 = 1500;

mod config;
mod stats;
#[cfg(test)]
mod tests;

pub use config::{CarrierConfig, HandoverConfig, Interruption, TripConfig, TripError};
pub use stats::{quantile, quartiles, CarrierStats, PairStats};

/// Outcome of a handover.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Joined the target cell after a short interruption.
    Success,
    /// Lost the source cell before joining the target: a blackout of seconds.
    Failure,
}

/// One handover, as the ground truth records it.
#[derive(Clone, Debug, PartialEq)]
pub struct HandoverTruth {
    /// Carrier index.
    pub carrier: usize,
    /// Source cell.
    pub from_cell: u32,
    /// Target cell (for a failure: the cell the UE re-established on).
    pub to_cell: u32,
    /// Start time, ms since the trip began.
    pub start_ms: u64,
    /// Position along the track at the start, m.
    pub position_m: f64,
    /// True (not GPS-noised) latitude and longitude at the start.
    pub lat: f64,
    /// Longitude.
    pub lon: f64,
    /// Serving-cell RSRP at the start, dBm.
    pub rsrp_dbm: f64,
    /// Success or failure.
    pub outcome: Outcome,
    /// Time without delivery from the start: execution time (success), or degradation and
    /// blackout until the UE is back on a cell (failure), ms.
    pub interruption_ms: u64,
    /// For a failure: where and when the UE lost the source cell (the blackout begins). A
    /// handover started too late degrades the link from its start until the source's coverage
    /// edge; one whose command is lost in a fade declares the radio link failure 0.3–1 s after
    /// its start; a cell whose edge came before any handover started is lost at the recorded
    /// start. `None` for a success.
    pub lost: Option<SourceLoss>,
}

/// Where and when a failing handover lost its source cell.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SourceLoss {
    /// Time, ms since the trip began.
    pub t_ms: u64,
    /// Position along the track, m.
    pub position_m: f64,
    /// True latitude.
    pub lat: f64,
    /// True longitude.
    pub lon: f64,
    /// Source-cell RSRP at that moment, dBm.
    pub rsrp_dbm: f64,
}

impl HandoverTruth {
    /// When the handover disrupts the path for good: the loss of the source for a failure,
    /// the start for a success, ms.
    pub fn disruption_ms(&self) -> u64 {
        self.lost.map_or(self.start_ms, |l| l.t_ms)
    }
}

/// Per-carrier view in one context row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CarrierContext {
    /// Serving cell, or `None` during a blackout.
    pub cell: Option<u32>,
    /// Serving-cell RSRP, dBm, or `None` during a blackout.
    pub rsrp_dbm: Option<f64>,
}

/// One 1 Hz context sample, as the relay's GPS and modems report it.
#[derive(Clone, Debug, PartialEq)]
pub struct ContextRow {
    /// Time since the trip began, ms.
    pub t_ms: u64,
    /// GPS latitude (with GPS error).
    pub lat: f64,
    /// GPS longitude (with GPS error).
    pub lon: f64,
    /// Speed, m/s.
    pub speed_mps: f64,
    /// Heading, degrees.
    pub heading_deg: f64,
    /// Per carrier.
    pub carriers: Vec<CarrierContext>,
}

/// One carrier's generated link: processes on the 10 ms grid.
#[derive(Clone, Debug, PartialEq)]
pub struct PathProcess {
    /// Carrier name.
    pub name: String,
    /// Downlink capacity per step, bit/s (0 during outages).
    pub dl_bps: Vec<f64>,
    /// Uplink capacity per step, bit/s (0 during outages).
    pub ul_bps: Vec<f64>,
    /// One-way delay per step, µs.
    pub owd_us: Vec<u64>,
    /// Outage spans `[start_ms, end_ms)`: no delivery in either direction.
    pub outages_ms: Vec<(u64, u64)>,
    /// The successful handovers' interruptions among them, `[start_ms, end_ms)` (see
    /// [`TripConfig::hold_interruptions`]).
    pub interruptions_ms: Vec<(u64, u64)>,
}

impl PathProcess {
    /// Delivery opportunities (mahimahi semantics: ms timestamps of 1500-byte slots) for a
    /// capacity series, byte-accurate: fractional bytes carry over between steps.
    pub fn opportunities_ms(bps: &[f64]) -> Vec<u64> {
        let mut out = Vec::new();
        let mut carry = 0.0f64;
        for (i, &rate) in bps.iter().enumerate() {
            let per_ms = rate.max(0.0) / 8.0 / 1000.0;
            for ms in 0..STEP_MS {
                carry += per_ms;
                while carry >= OPPORTUNITY_BYTES as f64 {
                    carry -= OPPORTUNITY_BYTES as f64;
                    out.push(i as u64 * STEP_MS + ms + 1);
                }
            }
        }
        out
    }
}

/// A generated trip.
#[derive(Clone, Debug, PartialEq)]
pub struct Trip {
    /// The configuration it came from.
    pub config: TripConfig,
    /// Duration, ms.
    pub duration_ms: u64,
    /// True position along the track per step, m.
    pub position_m: Vec<f64>,
    /// True speed per step, m/s.
    pub speed_mps: Vec<f64>,
    /// One link per carrier.
    pub paths: Vec<PathProcess>,
    /// 1 Hz context log.
    pub context: Vec<ContextRow>,
    /// Every handover.
    pub handovers: Vec<HandoverTruth>,
}

// ----- randomness --------------------------------------------------------------------------

struct Rand(Pcg64);

impl Rand {
    fn new(seed: u64, stream: u64) -> Self {
        Rand(Pcg64::seed_from_u64(
            seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        ))
    }
    fn uniform(&mut self) -> f64 {
        self.0.gen::<f64>()
    }
    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }
    fn normal(&mut self) -> f64 {
        // Box–Muller; u1 in (0, 1] so the log is finite.
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * PI * u2).cos()
    }
    fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.uniform()).ln()
    }
}

/// Ornstein–Uhlenbeck process with stationary σ and correlation time τ, sampled every `dt`.
struct Ou {
    x: f64,
    a: f64,
    b: f64,
}

impl Ou {
    fn new(rng: &mut Rand, sigma: f64, tau_s: f64, dt_s: f64) -> Self {
        let a = if tau_s > 0.0 {
            (-dt_s / tau_s).exp()
        } else {
            0.0
        };
        Ou {
            x: sigma * rng.normal(),
            a,
            b: sigma * (1.0 - a * a).sqrt(),
        }
    }
    fn step(&mut self, rng: &mut Rand) -> f64 {
        self.x = self.a * self.x + self.b * rng.normal();
        self.x
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// The `p`-quantile of a Gamma distribution with shape 2 and scale `scale`
/// (CDF 1 − e^(−t)(1 + t), t = x / scale), by bisection.
fn gamma2_quantile(p: f64, scale: f64) -> f64 {
    let cdf = |t: f64| 1.0 - (-t).exp() * (1.0 + t);
    let (mut lo, mut hi) = (0.0f64, 60.0f64);
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if cdf(mid) < p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi) * scale
}

// ----- route -------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Cell {
    id: u32,
    /// End boundary of the cell along the track (handover out of it happens near here).
    end_m: f64,
    tower_x_m: f64,
    tower_offset_m: f64,
    /// Lateness beyond which a handover out of this cell cannot complete (∞: easy cell), m.
    critical_late_m: f64,
    /// Where the source's coverage ends (∞: easy cell), m along the track.
    edge_m: f64,
    /// Attenuation of the source beyond the edge, dB.
    edge_drop_db: f64,
}

struct Route {
    cells: Vec<Cell>,
    /// Shadowing on a 10 m grid, dB.
    shadow_db: Vec<f64>,
}

const SHADOW_GRID_M: f64 = 10.0;
/// Fractional part of the golden ratio: consecutive multiples are evenly spread over [0, 1).
const GOLDEN_FRACTION: f64 = 0.618_033_988_749_895;

impl Route {
    fn build(c: &CarrierConfig, carrier: usize, length_m: f64, seed: u64) -> Route {
        let mut rng = Rand::new(seed, 1000 + carrier as u64);
        let id_base = 10_000 * (carrier as u32 + 1) + (rng.uniform() * 1000.0) as u32 * 10;
        let mut cells = Vec::new();
        let hard_offset = Rand::new(seed, 2000 + carrier as u64).uniform();
        let mut start = -rng.range(0.0, c.cell_spacing_m);
        let mut i = 0u32;
        while start < length_m + c.cell_spacing_m {
            let len = c.cell_spacing_m * (1.0 + c.spacing_jitter * rng.range(-1.0, 1.0));
            let end = start + len;
            let h = &c.handover;
            let tower_x_m = start + len * rng.range(0.35, 0.65);
            let tower_offset_m = rng.range(c.tower_offset_m.0, c.tower_offset_m.1);
            // Hard cells are spread by a golden-ratio sequence (random offset per route and
            // carrier) rather than drawn one by one: the share of hard cells is a property of
            // the line, and ~90 independent draws per 60 km would move it by ±5 points between
            // routes. The draw is kept so the other route draws stay in place.
            let _ = rng.uniform();
            let hard = (hard_offset + f64::from(i) * GOLDEN_FRACTION).fract() < h.hard_share;
            let (ln_lo, ln_hi) = (h.late_share.0.ln(), h.late_share.1.ln());
            let late_share = (ln_lo + (ln_hi - ln_lo) * rng.uniform()).exp();
            let after_m = rng.range(h.edge_after_m.0, h.edge_after_m.1);
            let drop_db = rng.range(h.edge_drop_db.0, h.edge_drop_db.1);
            let (critical_late_m, edge_m) = if hard {
                let crit = gamma2_quantile(1.0 - late_share, h.lateness_mean_m / 2.0);
                (crit, end - h.ehp_lead_m + crit + after_m)
            } else {
                (f64::INFINITY, f64::INFINITY)
            };
            cells.push(Cell {
                id: id_base * 100 + i,
                end_m: end,
                tower_x_m,
                tower_offset_m,
                critical_late_m,
                edge_m,
                edge_drop_db: drop_db,
            });
            start = end;
            i += 1;
        }
        let n = (length_m / SHADOW_GRID_M) as usize + 2;
        let mut ou = Ou::new(&mut rng, c.shadow_sigma_db, c.shadow_corr_m, SHADOW_GRID_M);
        let shadow_db = (0..n).map(|_| ou.step(&mut rng)).collect();
        Route { cells, shadow_db }
    }

    fn cell_index_at(&self, x: f64) -> usize {
        self.cells
            .partition_point(|c| c.end_m <= x)
            .min(self.cells.len() - 1)
    }

    fn shadow_at(&self, x: f64) -> f64 {
        let i = ((x.max(0.0)) / SHADOW_GRID_M) as usize;
        self.shadow_db[i.min(self.shadow_db.len() - 1)]
    }

    fn rsrp(&self, c: &CarrierConfig, cell: usize, x: f64, fading_db: f64) -> f64 {
        let cl = &self.cells[cell];
        let d = ((x - cl.tower_x_m).powi(2) + cl.tower_offset_m.powi(2))
            .sqrt()
            .max(1.0);
        // The source fades out over the ramp before a coverage edge.
        let ramp = c.handover.edge_ramp_m;
        let edge = cl.edge_drop_db * ((x - (cl.edge_m - ramp)) / ramp).clamp(0.0, 1.0);
        (c.tx_dbm - 10.0 * c.path_loss_exp * d.log10() + self.shadow_at(x) + fading_db - edge)
            .clamp(-140.0, -44.0)
    }
}

// ----- trajectory --------------------------------------------------------------------------

fn trajectory(cfg: &TripConfig, rng: &mut Rand) -> (Vec<f64>, Vec<f64>) {
    let dt = STEP_MS as f64 / 1000.0;
    let cruise = (cfg.cruise_mps + cfg.cruise_jitter_mps * rng.range(-1.0, 1.0)).max(1.0);
    let (mut pos, mut speed) = (Vec::new(), Vec::new());
    let (mut x, mut v) = (0.0f64, 0.0f64);
    for (k, w) in cfg.stations_m.windows(2).enumerate() {
        let target = w[1];
        if k > 0 {
            for _ in 0..(cfg.dwell_s / dt) as usize {
                pos.push(x);
                speed.push(0.0);
            }
        }
        // Drive to the next station: accelerate to cruise, brake to stop exactly at `target`.
        let mut guard = 0usize;
        while x < target - 1e-6 && guard < 100_000_000 {
            guard += 1;
            let remaining = target - x;
            let brake_dist = v * v / (2.0 * cfg.decel_mps2);
            if remaining <= brake_dist + v * dt {
                v = (v - cfg.decel_mps2 * dt)
                    .max((2.0 * cfg.decel_mps2 * remaining).sqrt().min(v))
                    .max(0.5);
            } else {
                v = (v + cfg.accel_mps2 * dt).min(cruise);
            }
            x = (x + v * dt).min(target);
            pos.push(x);
            speed.push(v);
        }
        v = 0.0;
    }
    (pos, speed)
}

fn latlon(cfg: &TripConfig, x: f64, across_m: f64) -> (f64, f64) {
    let h = cfg.heading_deg.to_radians();
    let (north, east) = (
        x * h.cos() - across_m * h.sin(),
        x * h.sin() + across_m * h.cos(),
    );
    let lat = cfg.origin.0 + north / 111_320.0;
    let lon = cfg.origin.1 + east / (111_320.0 * cfg.origin.0.to_radians().cos());
    (lat, lon)
}

// ----- recorded traces ---------------------------------------------------------------------

/// One path of [`Trip::from_traces`]: a recorded trace per direction and a one-way delay.
#[derive(Clone, Debug)]
pub struct TracePath<'a> {
    /// Display name (e.g. the file's stem).
    pub name: String,
    /// Downlink delivery opportunities (looped).
    pub down: &'a crate::trace::DeliveryTrace,
    /// Uplink delivery opportunities (looped).
    pub up: &'a crate::trace::DeliveryTrace,
    /// One-way delay in both directions, read at the start of each step (loop it with the
    /// trace, [`DelaySeries::looped`](crate::trace::DelaySeries::looped), if it should repeat).
    pub delay: &'a crate::trace::DelaySeries,
    /// Outages (both directions dark, packets dropped) within one period of the downlink
    /// trace; they loop with it ([`Outages::looped`](crate::trace::Outages::looped)).
    pub outages: &'a crate::trace::Outages,
    /// The outages during which packets are held rather than dropped (a successful handover's
    /// interruption), looped alike.
    pub interruptions: &'a crate::trace::Outages,
}

/// Per-step capacity (bit/s) of `trace` played in a loop for `steps` steps of [`STEP_MS`]:
/// every opportunity stamped in `(k·STEP_MS, (k+1)·STEP_MS]` counts for step `k`, so each
/// step carries exactly the trace's bytes of that step (mahimahi's timing within a step is
/// evened out).
fn looped_step_bps(trace: &crate::trace::DeliveryTrace, steps: usize) -> Vec<f64> {
    let mut count = vec![0u32; steps];
    let period = trace.period_ms();
    let end_ms = steps as u64 * STEP_MS;
    if period > 0 {
        let mut base = 0u64;
        'outer: while base < end_ms {
            for &m in trace.opportunities_ms() {
                let t = base + m;
                if t > end_ms {
                    break 'outer;
                }
                // A stamp of 0 (which recorded traces have) counts for the first step.
                count[(t.saturating_sub(1) / STEP_MS) as usize] += 1;
            }
            base += period;
        }
    }
    let per_opportunity_bps = (OPPORTUNITY_BYTES * 8) as f64 * 1000.0 / STEP_MS as f64;
    count
        .into_iter()
        .map(|c| f64::from(c) * per_opportunity_bps)
        .collect()
}

impl Trip {
    /// A "trip" made of recorded traces instead of the HSR model, for replaying measured
    /// paths in the bench: each path's capacity is its trace looped over `duration_ms`
    /// (per [`STEP_MS`] step, byte-accurate), its delay the path's series read at each step's
    /// start; no train moves (position
    /// and speed 0), no context, no handovers, no outages beyond what the traces hold (steps
    /// with no opportunity). `config` is the `hsr` preset's with the name `traces` and no
    /// carriers: nothing here was generated from it.
    pub fn from_traces(paths: &[TracePath<'_>], duration_ms: u64) -> Trip {
        let steps = duration_ms.div_ceil(STEP_MS) as usize;
        let mut config = TripConfig::hsr(0, 0);
        config.name = "traces".into();
        config.carriers.clear();
        Trip {
            config,
            duration_ms: steps as u64 * STEP_MS,
            position_m: vec![0.0; steps],
            speed_mps: vec![0.0; steps],
            paths: paths
                .iter()
                .map(|p| PathProcess {
                    name: p.name.clone(),
                    dl_bps: looped_step_bps(p.down, steps),
                    ul_bps: looped_step_bps(p.up, steps),
                    owd_us: (0..steps as u64)
                        .map(|k| p.delay.delay_at_us(k * STEP_MS * 1000))
                        .collect(),
                    outages_ms: p
                        .outages
                        .looped(p.down.period_ms(), steps as u64 * STEP_MS)
                        .spans_ms()
                        .to_vec(),
                    interruptions_ms: p
                        .interruptions
                        .looped(p.down.period_ms(), steps as u64 * STEP_MS)
                        .spans_ms()
                        .to_vec(),
                })
                .collect(),
            context: Vec::new(),
            handovers: Vec::new(),
        }
    }
}

// ----- generation --------------------------------------------------------------------------

impl Trip {
    /// Generate the trip `cfg` describes. Deterministic in `cfg` (seeds included).
    pub fn generate(cfg: &TripConfig) -> Result<Trip, TripError> {
        cfg.validate()?;
        let mut rng = Rand::new(cfg.trip_seed, 1);
        let (position_m, speed_mps) = trajectory(cfg, &mut rng);
        let steps = position_m.len();
        let length_m = *cfg.stations_m.last().expect("validated");
        let dt = STEP_MS as f64 / 1000.0;
        let mut paths = Vec::new();
        let mut handovers: Vec<HandoverTruth> = Vec::new();
        let mut serving_log: Vec<Vec<(Option<u32>, Option<f64>)>> = Vec::new();
        for (ci, c) in cfg.carriers.iter().enumerate() {
            let route = Route::build(c, ci, length_m, cfg.route_seed);
            let mut r = Rand::new(cfg.trip_seed, 100 + ci as u64);
            let mut fading = Ou::new(&mut r, c.fading_sigma_db, c.fading_tau_s, dt);
            let mut slow = Ou::new(&mut r, c.cap_slow.0, c.cap_slow.1, dt);
            let mut fast = Ou::new(&mut r, c.cap_fast.0, c.cap_fast.1, dt);
            let mut owd_ou = Ou::new(&mut r, c.owd_var.0, c.owd_var.1, dt);
            // Interruption lengths draw from their own stream, so the choice of interruption
            // source changes only them, not which handovers fail or the capacity processes.
            let mut ri = Rand::new(cfg.trip_seed, 200 + ci as u64);
            let h = &c.handover;
            // Where this ride starts each cell's outgoing handover, and where it loses the
            // cell if it has not handed over by then (∞ for a cell without a coverage edge).
            let arm = |r: &mut Rand, cell: usize| {
                let cl = &route.cells[cell];
                let late = r.exp(h.lateness_mean_m / 2.0) + r.exp(h.lateness_mean_m / 2.0);
                let jitter = h.edge_jitter_m * r.normal();
                (cl.end_m - h.ehp_lead_m + late, cl.edge_m + jitter)
            };
            let blackout = |r: &mut Rand| {
                let s = (h.blackout_median_s * (h.blackout_sigma * r.normal()).exp())
                    .clamp(h.blackout_range_s.0, h.blackout_range_s.1);
                (s * 1000.0) as u64
            };
            let mut serving = route.cell_index_at(position_m[0]);
            let (mut trigger_at, mut lose_at) = arm(&mut r, serving);
            let (mut dl, mut ul, mut owd) = (
                Vec::with_capacity(steps),
                Vec::with_capacity(steps),
                Vec::with_capacity(steps),
            );
            let mut outages: Vec<(u64, u64)> = Vec::new();
            let mut interruptions: Vec<(u64, u64)> = Vec::new();
            let mut serve_log = Vec::with_capacity(steps);
            let mut state = Link::Connected;
            // A handover started too late, recorded once the source is lost.
            let mut started: Option<HandoverTruth> = None;
            for (t, &x) in position_m.iter().enumerate() {
                let now_ms = t as u64 * STEP_MS;
                let fade = fading.step(&mut r);
                let (s, f) = (slow.step(&mut r), fast.step(&mut r));
                let ow = owd_ou.step(&mut r);
                // This moment of the ride, with the serving cell's RSRP.
                let loss_here = |serving: usize| {
                    let (lat, lon) = latlon(cfg, x, 0.0);
                    SourceLoss {
                        t_ms: now_ms,
                        position_m: x,
                        lat,
                        lon,
                        rsrp_dbm: route.rsrp(c, serving, x, fade),
                    }
                };
                let record = |serving: usize, outcome, to_cell, interruption_ms| {
                    let at = loss_here(serving);
                    HandoverTruth {
                        carrier: ci,
                        from_cell: route.cells[serving].id,
                        to_cell,
                        start_ms: at.t_ms,
                        position_m: at.position_m,
                        lat: at.lat,
                        lon: at.lon,
                        rsrp_dbm: at.rsrp_dbm,
                        outcome,
                        interruption_ms,
                        lost: None,
                    }
                };
                // Leave finished states.
                state = match state {
                    Link::Failing {
                        blackout_at,
                        blackout_ms,
                    } if t >= blackout_at => {
                        let end = t + (blackout_ms / STEP_MS) as usize;
                        outages.push((now_ms, end as u64 * STEP_MS));
                        // The radio link failure is declared: the source is lost now.
                        if let Some(last) = handovers.iter_mut().rev().find(|h| h.carrier == ci) {
                            last.lost = Some(loss_here(serving));
                        }
                        Link::Blackout { until: end }
                    }
                    Link::Fading { blackout_ms } if x >= lose_at => {
                        // Too late: the source is lost at its edge before the handover
                        // completes. Recorded with where it started and where it was lost.
                        let end = t + (blackout_ms / STEP_MS) as usize;
                        outages.push((now_ms, end as u64 * STEP_MS));
                        if let Some(mut h) = started.take() {
                            h.lost = Some(loss_here(serving));
                            h.interruption_ms = now_ms - h.start_ms + blackout_ms;
                            handovers.push(h);
                        }
                        Link::Blackout { until: end }
                    }
                    Link::Blackout { until } if t >= until => {
                        // Re-establish on the cell the train is in now, at the earliest on the
                        // target of the failed handover (the source is behind or lost).
                        // A cell whose coverage edge is behind the train cannot serve it.
                        let mut next = route.cell_index_at(x).max(serving + 1);
                        while next + 1 < route.cells.len() && route.cells[next].edge_m <= x {
                            next += 1;
                        }
                        serving = next.min(route.cells.len() - 1);
                        (trigger_at, lose_at) = arm(&mut r, serving);
                        if let Some(last) = handovers
                            .iter_mut()
                            .rev()
                            .find(|h: &&mut HandoverTruth| h.carrier == ci)
                        {
                            last.to_cell = route.cells[serving].id;
                        }
                        Link::Connected
                    }
                    Link::Interrupted { until } if t >= until => Link::Connected,
                    other => other,
                };
                if state == Link::Connected && serving + 1 < route.cells.len() {
                    if x >= lose_at {
                        // The edge came before the handover even started.
                        let black_ms = blackout(&mut r);
                        let end = t + (black_ms / STEP_MS) as usize;
                        outages.push((now_ms, end as u64 * STEP_MS));
                        let id = route.cells[serving].id;
                        let mut h = record(serving, Outcome::Failure, id, black_ms);
                        h.lost = Some(loss_here(serving));
                        handovers.push(h);
                        state = Link::Blackout { until: end };
                    } else if x >= trigger_at {
                        // The handover starts.
                        let rsrp = route.rsrp(c, serving, x, fade);
                        let late_m = x - (route.cells[serving].end_m - h.ehp_lead_m);
                        if late_m >= route.cells[serving].critical_late_m {
                            // Too late to complete before the edge: degrade until it.
                            state = Link::Fading {
                                blackout_ms: blackout(&mut r),
                            };
                            let id = route.cells[serving].id;
                            started = Some(record(serving, Outcome::Failure, id, 0));
                        } else if r.uniform()
                            < sigmoid(h.weak_logit + h.weak_logit_per_5db * (-95.0 - rsrp) / 5.0)
                        {
                            // The handover command is lost in a fade: radio link failure.
                            let detect_ms = (r.range(h.detect_s.0, h.detect_s.1) * 1000.0) as u64;
                            let black_ms = blackout(&mut r);
                            state = Link::Failing {
                                blackout_at: t + (detect_ms / STEP_MS) as usize,
                                blackout_ms: black_ms,
                            };
                            let id = route.cells[serving].id;
                            handovers.push(record(
                                serving,
                                Outcome::Failure,
                                id,
                                detect_ms + black_ms,
                            ));
                        } else {
                            let ms = match &cfg.interruption {
                                Interruption::LogNormal { median_ms, sigma } => {
                                    median_ms * (sigma * ri.normal()).exp()
                                }
                                Interruption::Empirical(v) => {
                                    v[((ri.uniform() * v.len() as f64) as usize).min(v.len() - 1)]
                                }
                            };
                            let ms = (ms.round() as u64).max(1);
                            let end = t + ms.div_ceil(STEP_MS) as usize;
                            outages.push((now_ms, end as u64 * STEP_MS));
                            interruptions.push((now_ms, end as u64 * STEP_MS));
                            state = Link::Interrupted { until: end };
                            let from = serving;
                            serving += 1;
                            (trigger_at, lose_at) = arm(&mut r, serving);
                            handovers.push(record(
                                from,
                                Outcome::Success,
                                route.cells[serving].id,
                                ms,
                            ));
                        }
                    }
                }
                let rsrp = route.rsrp(c, serving, x, fade);
                let mut log_cap = c.dl_median_bps.ln() + c.rsrp_gain_per_db * (rsrp + 95.0) + s + f;
                let mut owd_ms = c.owd_floor_ms + c.owd_var_median_ms * ow.exp();
                if matches!(state, Link::Failing { .. } | Link::Fading { .. }) {
                    // The source cell fades out before the radio link is declared lost.
                    log_cap += DEGRADED_CAPACITY.ln();
                    owd_ms *= 2.0;
                }
                let deep_fade = -fade > c.deep_fade_db;
                if deep_fade {
                    outages.push((now_ms, now_ms + STEP_MS));
                }
                let cap = match state {
                    Link::Blackout { .. } | Link::Interrupted { .. } => 0.0,
                    _ if deep_fade => 0.0,
                    _ => log_cap.exp().min(c.cap_max_bps),
                };
                dl.push(cap);
                ul.push(cap * c.uplink_ratio);
                owd.push((owd_ms * 1000.0) as u64);
                serve_log.push(match state {
                    Link::Blackout { .. } => (None, None),
                    _ => (Some(route.cells[serving].id), Some(rsrp)),
                });
            }
            paths.push(PathProcess {
                name: c.name.clone(),
                dl_bps: dl,
                ul_bps: ul,
                owd_us: owd,
                outages_ms: merge_spans(outages),
                interruptions_ms: merge_spans(interruptions),
            });
            serving_log.push(serve_log);
        }
        handovers.sort_by_key(|h| (h.start_ms, h.carrier));
        // 1 Hz context with GPS error.
        let mut gps = Rand::new(cfg.trip_seed, 7);
        let mut context = Vec::new();
        let per_s = (1000 / STEP_MS) as usize;
        for t in (0..steps).step_by(per_s) {
            let x = position_m[t] + cfg.gps_sigma_m * gps.normal();
            let (lat, lon) = latlon(cfg, x, cfg.gps_sigma_m * gps.normal());
            context.push(ContextRow {
                t_ms: t as u64 * STEP_MS,
                lat,
                lon,
                speed_mps: speed_mps[t],
                heading_deg: cfg.heading_deg,
                carriers: serving_log
                    .iter()
                    .map(|l| CarrierContext {
                        cell: l[t].0,
                        rsrp_dbm: l[t].1.map(|r| (r * 10.0).round() / 10.0),
                    })
                    .collect(),
            });
        }
        Ok(Trip {
            config: cfg.clone(),
            duration_ms: steps as u64 * STEP_MS,
            position_m,
            speed_mps,
            paths,
            context,
            handovers,
        })
    }
}

/// Capacity factor while a failing handover degrades the link.
const DEGRADED_CAPACITY: f64 = 0.2;

/// A carrier's link state during generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    /// A handover started too late: degraded until the train reaches the source's edge.
    Fading {
        blackout_ms: u64,
    },
    Connected,
    /// A successful handover's execution: no delivery until `until` (step).
    Interrupted {
        until: usize,
    },
    /// A failing handover: degraded until the blackout starts at step `blackout_at`.
    Failing {
        blackout_at: usize,
        blackout_ms: u64,
    },
    /// No service until step `until`.
    Blackout {
        until: usize,
    },
}

fn merge_spans(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (s, e) in v {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}
