//! Statistics of a generated trip's processes.

use super::{HandoverTruth, Outcome, Trip, STEP_MS};

/// Statistics of the generated processes themselves (capacity, not TCP throughput; idle RTT,
/// not RTT under load). The calibration command measures the TCP-level ones over the emulator.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CarrierStats {
    /// Carrier name.
    pub name: String,
    /// Handovers.
    pub handovers: usize,
    /// Failed handovers.
    pub failures: usize,
    /// Mean time between handovers while moving faster than 250 km/h, s.
    pub handover_interval_s: f64,
    /// Downlink capacity quartiles over 1 s bins while moving, Mbit/s.
    pub capacity_mbps: [f64; 3],
    /// Idle RTT (2 × one-way delay) quartiles, ms.
    pub idle_rtt_ms: [f64; 3],
    /// Share of 0.2 s windows whose mean capacity is below half or above twice the mean of the
    /// preceding 1 s (the paper's CT/RT).
    pub ct_rt_outside: f64,
    /// Share of time in outages.
    pub outage_share: f64,
}

/// Statistics between the first two carriers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PairStats {
    /// Share of 1 s bins with capacity ratio A/B below 0.5, and above 2.
    pub capacity_ratio_outside: (f64, f64),
    /// Share of 10 ms samples with idle-RTT ratio A/B below 0.5, and above 2.
    pub rtt_ratio_outside: (f64, f64),
    /// Median "RTT leading time" (longest runs in which one carrier has the lower RTT), ms,
    /// for runs led by A and by B.
    pub rtt_leading_median_ms: (f64, f64),
}

/// The `q`-quantile of `v` (nearest rank, after sorting `v` in place); NaN for an empty slice.
pub fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// p25, p50 and p75 of `v` (see [`quantile`]).
pub fn quartiles(mut v: Vec<f64>) -> [f64; 3] {
    [
        quantile(&mut v, 0.25),
        quantile(&mut v, 0.5),
        quantile(&mut v, 0.75),
    ]
}

impl Trip {
    fn moving_steps(&self) -> Vec<bool> {
        self.speed_mps.iter().map(|v| *v > 250.0 / 3.6).collect()
    }

    /// Per-carrier statistics of the generated processes.
    pub fn carrier_stats(&self) -> Vec<CarrierStats> {
        let moving = self.moving_steps();
        let moving_s = moving.iter().filter(|m| **m).count() as f64 * STEP_MS as f64 / 1000.0;
        let per_s = (1000 / STEP_MS) as usize;
        let win = (200 / STEP_MS) as usize;
        self.paths
            .iter()
            .enumerate()
            .map(|(ci, p)| {
                let hos: Vec<&HandoverTruth> =
                    self.handovers.iter().filter(|h| h.carrier == ci).collect();
                let moving_hos = hos
                    .iter()
                    .filter(|h| moving[(h.start_ms / STEP_MS) as usize])
                    .count();
                let bins: Vec<f64> = p
                    .dl_bps
                    .chunks(per_s)
                    .zip(moving.chunks(per_s))
                    .filter(|(_, m)| m.iter().all(|x| *x))
                    .map(|(c, _)| c.iter().sum::<f64>() / c.len() as f64 / 1e6)
                    .collect();
                let rtts: Vec<f64> = p
                    .owd_us
                    .iter()
                    .zip(&moving)
                    .filter(|(_, m)| **m)
                    .map(|(o, _)| 2.0 * *o as f64 / 1000.0)
                    .collect();
                let (mut outside, mut total) = (0usize, 0usize);
                let mut t = 6 * win;
                while t <= p.dl_bps.len() {
                    if moving[t - 6 * win..t].iter().all(|m| *m) {
                        let ct: f64 = p.dl_bps[t - win..t].iter().sum::<f64>() / win as f64;
                        let rt: f64 =
                            p.dl_bps[t - 6 * win..t - win].iter().sum::<f64>() / (5 * win) as f64;
                        if rt > 0.0 {
                            total += 1;
                            let r = ct / rt;
                            if !(0.5..=2.0).contains(&r) {
                                outside += 1;
                            }
                        }
                    }
                    t += win;
                }
                let out_ms: u64 = p.outages_ms.iter().map(|(s, e)| e - s).sum();
                CarrierStats {
                    name: p.name.clone(),
                    handovers: hos.len(),
                    failures: hos.iter().filter(|h| h.outcome == Outcome::Failure).count(),
                    handover_interval_s: if moving_hos > 0 {
                        moving_s / moving_hos as f64
                    } else {
                        f64::NAN
                    },
                    capacity_mbps: quartiles(bins),
                    idle_rtt_ms: quartiles(rtts),
                    ct_rt_outside: if total > 0 {
                        outside as f64 / total as f64
                    } else {
                        f64::NAN
                    },
                    outage_share: out_ms as f64 / self.duration_ms.max(1) as f64,
                }
            })
            .collect()
    }

    /// Mean downlink capacity (bit/s) per carrier around each point of a `grid_m` grid along
    /// the track (from `grid_m`): the mean over the steps within `half_window_m` of the point,
    /// `None` where the train was not above 250 km/h for the whole window or never there. Over
    /// several trips of a route this is the paper's location repeatability (§2.2: per location,
    /// the p75/p25 ratio of the trips' means within ±1 km).
    pub fn location_means(&self, half_window_m: f64, grid_m: f64) -> Vec<Vec<Option<f64>>> {
        let moving = self.moving_steps();
        let length = self.position_m.last().copied().unwrap_or(0.0);
        let points: Vec<f64> = (1..)
            .map(|j| j as f64 * grid_m)
            .take_while(|x| *x <= length && grid_m > 0.0)
            .collect();
        self.paths
            .iter()
            .map(|p| {
                points
                    .iter()
                    .map(|x| {
                        let (lo, hi) = (x - half_window_m, x + half_window_m);
                        // Positions never decrease: the window is one run of steps.
                        let a = self.position_m.partition_point(|q| *q < lo);
                        let b = self.position_m.partition_point(|q| *q <= hi);
                        let whole = a > 0 && b < self.position_m.len();
                        (whole && b > a && moving[a..b].iter().all(|m| *m))
                            .then(|| p.dl_bps[a..b].iter().sum::<f64>() / (b - a) as f64)
                    })
                    .collect()
            })
            .collect()
    }

    /// Statistics between carriers 0 and 1, or `None` with fewer than two carriers.
    pub fn pair_stats(&self) -> Option<PairStats> {
        let (a, b) = (self.paths.first()?, self.paths.get(1)?);
        let moving = self.moving_steps();
        let per_s = (1000 / STEP_MS) as usize;
        let (mut lo, mut hi, mut n) = (0usize, 0usize, 0usize);
        for ((ca, cb), m) in a
            .dl_bps
            .chunks(per_s)
            .zip(b.dl_bps.chunks(per_s))
            .zip(moving.chunks(per_s))
        {
            if !m.iter().all(|x| *x) {
                continue;
            }
            let (sa, sb): (f64, f64) = (ca.iter().sum(), cb.iter().sum());
            if sa <= 0.0 || sb <= 0.0 {
                continue;
            }
            n += 1;
            let r = sa / sb;
            lo += usize::from(r < 0.5);
            hi += usize::from(r > 2.0);
        }
        let (mut rlo, mut rhi, mut rn) = (0usize, 0usize, 0usize);
        let (mut lead_a, mut lead_b) = (Vec::new(), Vec::new());
        let mut run: Option<(bool, usize)> = None;
        for ((oa, ob), m) in a.owd_us.iter().zip(&b.owd_us).zip(&moving) {
            if !*m {
                continue;
            }
            rn += 1;
            let r = *oa as f64 / (*ob).max(1) as f64;
            rlo += usize::from(r < 0.5);
            rhi += usize::from(r > 2.0);
            let a_leads = oa < ob;
            run = match run {
                Some((l, len)) if l == a_leads => Some((l, len + 1)),
                Some((l, len)) => {
                    if l {
                        lead_a.push(len as f64 * STEP_MS as f64)
                    } else {
                        lead_b.push(len as f64 * STEP_MS as f64)
                    }
                    Some((a_leads, 1))
                }
                None => Some((a_leads, 1)),
            };
        }
        let share = |k: usize, n: usize| if n > 0 { k as f64 / n as f64 } else { f64::NAN };
        Some(PairStats {
            capacity_ratio_outside: (share(lo, n), share(hi, n)),
            rtt_ratio_outside: (share(rlo, rn), share(rhi, rn)),
            rtt_leading_median_ms: (quantile(&mut lead_a, 0.5), quantile(&mut lead_b, 0.5)),
        })
    }
}
