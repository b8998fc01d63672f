//! Trip-model statistics: the same rows computed from the trip model alone, without TCP.

use super::*;

#[derive(Clone, Debug)]
pub(super) struct ModelStats {
    pub(super) trips: u64,
    pub(super) interval_s: Vec<f64>,
    pub(super) failure_pct: Vec<f64>,
    pub(super) cells_with_failure_pct: Vec<f64>,
    pub(super) handovers: Vec<usize>,
    /// Per carrier: median over locations of p75/p25 of the trips' mean capacity there, and
    /// the number of locations.
    pub(super) location_p75_p25: Vec<(f64, usize)>,
}

/// Handover statistics of the trip model over `--model-trips` trips of the route.
pub(super) fn model_stats(args: &CalibrateArgs) -> Result<ModelStats> {
    let mut interval: Vec<Vec<f64>> = Vec::new();
    let mut hos: Vec<usize> = Vec::new();
    let mut fails: Vec<usize> = Vec::new();
    let mut cells: Vec<BTreeMap<u32, bool>> = Vec::new();
    // Per carrier, per location: the trips' mean capacity there.
    let mut at_location: Vec<Vec<Vec<f64>>> = Vec::new();
    for k in 0..args.model_trips {
        let cfg = TripConfig::preset(
            &args.trip.preset,
            args.trip.route_seed,
            args.trip.trip_seed.wrapping_add(k),
        )?;
        let t = Trip::generate(&cfg)?;
        let stats = t.carrier_stats();
        if interval.is_empty() {
            interval = vec![Vec::new(); stats.len()];
            hos = vec![0; stats.len()];
            fails = vec![0; stats.len()];
            cells = vec![BTreeMap::new(); stats.len()];
        }
        for (c, s) in stats.iter().enumerate() {
            if s.handover_interval_s.is_finite() {
                interval[c].push(s.handover_interval_s);
            }
            hos[c] += s.handovers;
            fails[c] += s.failures;
        }
        for h in &t.handovers {
            *cells[h.carrier].entry(h.from_cell).or_default() |= h.outcome == Outcome::Failure;
        }
        let means = t.location_means(LOCATION_HALF_WINDOW_M, LOCATION_GRID_M);
        at_location.resize(means.len(), Vec::new());
        for (c, per_point) in means.iter().enumerate() {
            let len = per_point.len().max(at_location[c].len());
            at_location[c].resize(len, Vec::new());
            for (j, m) in per_point.iter().enumerate() {
                at_location[c][j].extend(*m);
            }
        }
    }
    let location_p75_p25 = at_location
        .iter()
        .map(|points| {
            let mut ratios: Vec<f64> = points
                .iter()
                .filter(|v| v.len() >= LOCATION_MIN_TRIPS)
                .filter_map(|v| {
                    let mut v = v.clone();
                    let (p25, p75) = (quantile(&mut v, 0.25), quantile(&mut v, 0.75));
                    (p25 > 0.0).then(|| p75 / p25)
                })
                .collect();
            let n = ratios.len();
            (quantile(&mut ratios, 0.5), n)
        })
        .collect();
    Ok(ModelStats {
        trips: args.model_trips,
        interval_s: interval
            .iter()
            .map(|v| {
                if v.is_empty() {
                    f64::NAN
                } else {
                    v.iter().sum::<f64>() / v.len() as f64
                }
            })
            .collect(),
        failure_pct: hos.iter().zip(&fails).map(|(h, f)| pct(*f, *h)).collect(),
        cells_with_failure_pct: cells
            .iter()
            .map(|m| pct(m.values().filter(|f| **f).count(), m.len()))
            .collect(),
        handovers: hos,
        location_p75_p25,
    })
}

/// Capacity-level statistics of the emulated window itself (what TCP had to work with), for
/// the "trip model" column: same mask as the measurements.
#[derive(Clone, Debug, Default)]
pub(super) struct WindowModel {
    pub(super) capacity_mbps: Vec<[f64; 3]>,
    pub(super) idle_rtt_ms: Vec<[f64; 3]>,
    pub(super) ct_rt_pct: Vec<f64>,
    pub(super) cap_ratio_pct: (f64, f64),
    pub(super) rtt_ratio_pct: (f64, f64),
    pub(super) leading_ms: (f64, f64),
}

/// What one emulated trip window contributes to the "trip model" column.
#[derive(Clone, Debug, Default)]
pub(super) struct WindowSamples {
    pub(super) capacity_mbps: Vec<Vec<f64>>,
    pub(super) idle_rtt_ms: Vec<Vec<f64>>,
    pub(super) ct_rt: Vec<(usize, usize)>,
    pub(super) cap_pairs: Vec<(f64, f64)>,
    pub(super) owd_pairs: Vec<(f64, f64)>,
    pub(super) leading_ms: (Vec<f64>, Vec<f64>),
}

pub(super) fn window_samples(trip: &Trip, mask: &TimeMask) -> WindowSamples {
    let steps_per_bin = (BIN_MS / STEP_MS) as usize;
    // Capacity as "bytes per 0.2 s bin" so the same window and CT/RT code applies.
    let cap_bins: Vec<Vec<u64>> = trip
        .paths
        .iter()
        .map(|p| {
            p.dl_bps
                .chunks(steps_per_bin)
                .map(|c| (c.iter().sum::<f64>() * STEP_MS as f64 / 1000.0 / 8.0) as u64)
                .collect()
        })
        .collect();
    let valid_bin = |j: usize| mask.bin_valid(j);
    let mut w = WindowSamples::default();
    for (p, bins) in trip.paths.iter().zip(&cap_bins) {
        w.capacity_mbps.push(
            windows_mbps(bins, &valid_bin)
                .into_iter()
                .flatten()
                .collect(),
        );
        w.idle_rtt_ms.push(
            p.owd_us
                .iter()
                .enumerate()
                .filter(|(s, _)| mask.valid_ms(*s as u64 * STEP_MS))
                .map(|(_, o)| 2.0 * *o as f64 / 1000.0)
                .collect(),
        );
        w.ct_rt.push(ct_rt(bins, &valid_bin));
    }
    if trip.paths.len() >= 2 {
        let wa = windows_mbps(&cap_bins[0], &valid_bin);
        let wb = windows_mbps(&cap_bins[1], &valid_bin);
        w.cap_pairs = wa
            .iter()
            .zip(&wb)
            .filter_map(|(a, b)| Some(((*a)?, (*b)?)))
            .collect();
        let (a, b) = (&trip.paths[0].owd_us, &trip.paths[1].owd_us);
        let aligned: Vec<(f64, Option<(f64, f64)>)> = a
            .iter()
            .zip(b)
            .enumerate()
            .map(|(s, (x, y))| {
                let t = s as u64 * STEP_MS;
                (
                    t as f64 / 1000.0,
                    mask.valid_ms(t).then_some((*x as f64, *y as f64)),
                )
            })
            .collect();
        w.owd_pairs = aligned.iter().filter_map(|(_, s)| *s).collect();
        w.leading_ms = leading_runs(&aligned);
    }
    w
}

/// The "trip model" column over every measured trip's window, samples pooled.
pub(super) fn window_stats(wins: &[WindowSamples]) -> WindowModel {
    let n = wins.first().map_or(0, |w| w.capacity_mbps.len());
    let mut m = WindowModel::default();
    for i in 0..n {
        m.capacity_mbps.push(quartiles(
            wins.iter()
                .flat_map(|w| w.capacity_mbps[i].iter().copied())
                .collect(),
        ));
        m.idle_rtt_ms.push(quartiles(
            wins.iter()
                .flat_map(|w| w.idle_rtt_ms[i].iter().copied())
                .collect(),
        ));
        let (o, k) = wins
            .iter()
            .fold((0, 0), |(o, k), w| (o + w.ct_rt[i].0, k + w.ct_rt[i].1));
        m.ct_rt_pct.push(pct(o, k));
    }
    if n >= 2 {
        m.cap_ratio_pct = ratio_shares(wins.iter().flat_map(|w| w.cap_pairs.iter().copied())).0;
        m.rtt_ratio_pct = ratio_shares(wins.iter().flat_map(|w| w.owd_pairs.iter().copied())).0;
        m.leading_ms = pooled_leading(wins.iter().map(|w| &w.leading_ms)).0;
    }
    m
}
