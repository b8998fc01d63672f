//! Statistics of measured runs: goodput windows, CT/RT shares, RTT ratios and leading runs.

use super::*;

#[derive(Clone, Debug, Default)]
pub(super) struct CarrierResult {
    pub(super) tput_mbps: [f64; 3],
    pub(super) windows: usize,
    pub(super) rtt_ms: [f64; 3],
    pub(super) rtt_samples: usize,
    pub(super) ct_rt_outside_pct: f64,
    pub(super) ct_rt_n: usize,
    pub(super) rto_episodes: usize,
    pub(super) rto_repeated: usize,
    pub(super) data_segs: u64,
}

#[derive(Clone, Debug, Default)]
pub(super) struct PairResult {
    pub(super) tput_ratio_pct: (f64, f64),
    pub(super) tput_n: usize,
    pub(super) rtt_ratio_pct: (f64, f64),
    pub(super) rtt_n: usize,
    pub(super) leading_ms: (f64, f64),
    pub(super) leading_runs: (usize, usize),
}

#[derive(Clone, Debug)]
pub(super) struct RunResult {
    pub(super) carriers: Vec<CarrierResult>,
    pub(super) pair: Option<PairResult>,
    /// TCPTimeouts / OutSegs, %.
    pub(super) rto_pct: f64,
    /// (TCPTimeouts + TCPSlowStartRetrans) / OutSegs, %.
    pub(super) rto_broad_pct: f64,
    pub(super) timeouts: u64,
    pub(super) out_segs: u64,
}

pub(super) fn pct(k: usize, n: usize) -> f64 {
    if n == 0 {
        f64::NAN
    } else {
        100.0 * k as f64 / n as f64
    }
}

/// Goodput of each valid 1 s window, Mbit/s (`None` for invalid windows).
pub(super) fn windows_mbps(bins: &[u64], valid_bin: &dyn Fn(usize) -> bool) -> Vec<Option<f64>> {
    (0..bins.len() / BINS_PER_S)
        .map(|k| {
            let r = k * BINS_PER_S..(k + 1) * BINS_PER_S;
            r.clone()
                .all(valid_bin)
                .then(|| bins[r].iter().sum::<u64>() as f64 * 8.0 / 1e6)
        })
        .collect()
}

/// CT/RT outside [0.5, 2]: (outside, evaluated).
pub(super) fn ct_rt(bins: &[u64], valid_bin: &dyn Fn(usize) -> bool) -> (usize, usize) {
    let (mut outside, mut n) = (0, 0);
    for j in BINS_PER_S..bins.len() {
        if !(j - BINS_PER_S..=j).all(valid_bin) {
            continue;
        }
        // Both as bytes per 0.2 s.
        let ct = bins[j] as f64;
        let rt = bins[j - BINS_PER_S..j].iter().sum::<u64>() as f64 / BINS_PER_S as f64;
        if rt == 0.0 && ct == 0.0 {
            continue;
        }
        n += 1;
        if rt == 0.0 || !(0.5..=2.0).contains(&(ct / rt)) {
            outside += 1;
        }
    }
    (outside, n)
}

/// Shares (%) of ratios a/b below 0.5 and above 2, skipping pairs that are both zero.
pub(super) fn ratio_shares(pairs: impl Iterator<Item = (f64, f64)>) -> ((f64, f64), usize) {
    let (mut lo, mut hi, mut n) = (0, 0, 0);
    for (a, b) in pairs {
        if a <= 0.0 && b <= 0.0 {
            continue;
        }
        n += 1;
        if b <= 0.0 {
            hi += 1;
        } else if a / b < 0.5 {
            lo += 1;
        } else if a / b > 2.0 {
            hi += 1;
        }
    }
    ((pct(lo, n), pct(hi, n)), n)
}

/// RTT leading runs from time-aligned samples `(t_s, Some((rtt_a, rtt_b)))`; `None` breaks the
/// sequence. Returns run durations (ms) led by A and by B; runs cut by a break are dropped.
pub(super) fn leading_runs(samples: &[(f64, Option<(f64, f64)>)]) -> (Vec<f64>, Vec<f64>) {
    let (mut lead_a, mut lead_b) = (Vec::new(), Vec::new());
    // (leader is A, start time, whether the run began at a leader change)
    let mut run: Option<(bool, f64, bool)> = None;
    for (t, s) in samples {
        let Some((a, b)) = s else {
            run = None;
            continue;
        };
        let leader = match run {
            Some((l, ..)) if a == b => l,
            _ => a < b,
        };
        run = match run {
            None => Some((leader, *t, false)),
            Some((l, start, complete_start)) if l != leader => {
                if complete_start {
                    let d = (t - start) * 1000.0;
                    if l {
                        lead_a.push(d);
                    } else {
                        lead_b.push(d);
                    }
                }
                Some((leader, *t, true))
            }
            same => same,
        };
    }
    (lead_a, lead_b)
}

/// Counter delta between the first and last valid snapshot.
pub(super) fn nstat_delta(rows: &[NstatRow], mask: &TimeMask, key: &str) -> u64 {
    let valid: Vec<&NstatRow> = rows.iter().filter(|r| mask.valid_s(r.t_s)).collect();
    match (valid.first(), valid.last()) {
        (Some(a), Some(b)) => {
            let get = |r: &NstatRow| r.counters.get(key).copied().unwrap_or(0);
            get(b).saturating_sub(get(a))
        }
        _ => 0,
    }
}

/// What one carrier of one run contributes; the samples of several trips are pooled.
#[derive(Clone, Debug, Default)]
pub(super) struct CarrierSamples {
    pub(super) windows_mbps: Vec<f64>,
    pub(super) rtt_ms: Vec<f64>,
    /// (outside [0.5, 2], evaluated)
    pub(super) ct_rt: (usize, usize),
    pub(super) rto_episodes: usize,
    pub(super) rto_repeated: usize,
    pub(super) data_segs: u64,
}

/// What one run (one trip, one congestion control) contributes to the statistics.
#[derive(Clone, Debug, Default)]
pub(super) struct RunSamples {
    pub(super) carriers: Vec<CarrierSamples>,
    /// Simultaneous valid 1 s windows of carriers 0 and 1, Mbit/s.
    pub(super) tput_pairs: Vec<(f64, f64)>,
    /// Time-aligned smoothed RTTs of carriers 0 and 1, ms.
    pub(super) rtt_pairs: Vec<(f64, f64)>,
    /// Complete leading runs of carrier 0 and of carrier 1, ms.
    pub(super) leading_ms: (Vec<f64>, Vec<f64>),
    pub(super) timeouts: u64,
    pub(super) ss_retrans: u64,
    pub(super) out_segs: u64,
}

pub(super) fn samples(raw: &RawRun, mask: &TimeMask, n: usize) -> RunSamples {
    let valid_bin = |j: usize| mask.bin_valid(j);
    let mut carriers = Vec::new();
    for i in 0..n {
        let bins = &raw.bins[i];
        let mut rtts = Vec::new();
        let mut prev_acked = 0u64;
        let (mut episodes, mut repeated) = (0usize, 0usize);
        let mut episode: Option<(u32, bool)> = None; // (max backoff, started in valid time)
        let (mut segs_first, mut segs_last) = (None, 0u64);
        for row in &raw.ss {
            let Some(f) = &row.flows[i] else { continue };
            let valid = mask.valid_s(row.t_s);
            if valid && f.bytes_acked > prev_acked && f.srtt_ms > 0.0 {
                rtts.push(f.srtt_ms);
            }
            prev_acked = prev_acked.max(f.bytes_acked);
            if valid {
                segs_first.get_or_insert(f.data_segs_out);
                segs_last = f.data_segs_out;
            }
            episode = match (episode, f.backoff) {
                (None, 0) => None,
                (None, b) => Some((b, valid)),
                (Some((m, v)), 0) => {
                    if v {
                        episodes += 1;
                        repeated += usize::from(m >= 2);
                    }
                    None
                }
                (Some((m, v)), b) => Some((m.max(b), v)),
            };
        }
        if let Some((m, true)) = episode {
            episodes += 1;
            repeated += usize::from(m >= 2);
        }
        carriers.push(CarrierSamples {
            windows_mbps: windows_mbps(bins, &valid_bin)
                .into_iter()
                .flatten()
                .collect(),
            rtt_ms: rtts,
            ct_rt: ct_rt(bins, &valid_bin),
            rto_episodes: episodes,
            rto_repeated: repeated,
            data_segs: segs_last.saturating_sub(segs_first.unwrap_or(0)),
        });
    }
    let mut s = RunSamples {
        carriers,
        timeouts: nstat_delta(&raw.nstat, mask, "TcpExtTCPTimeouts"),
        ss_retrans: nstat_delta(&raw.nstat, mask, "TcpExtTCPSlowStartRetrans"),
        out_segs: nstat_delta(&raw.nstat, mask, "TcpOutSegs"),
        ..RunSamples::default()
    };
    if n >= 2 {
        let wa = windows_mbps(&raw.bins[0], &valid_bin);
        let wb = windows_mbps(&raw.bins[1], &valid_bin);
        s.tput_pairs = wa
            .iter()
            .zip(&wb)
            .filter_map(|(a, b)| Some(((*a)?, (*b)?)))
            .collect();
        let aligned: Vec<(f64, Option<(f64, f64)>)> = raw
            .ss
            .iter()
            .map(|r| {
                let both = match (&r.flows[0], &r.flows[1]) {
                    (Some(a), Some(b))
                        if mask.valid_s(r.t_s) && a.srtt_ms > 0.0 && b.srtt_ms > 0.0 =>
                    {
                        Some((a.srtt_ms, b.srtt_ms))
                    }
                    _ => None,
                };
                (r.t_s, both)
            })
            .collect();
        s.rtt_pairs = aligned.iter().filter_map(|(_, p)| *p).collect();
        s.leading_ms = leading_runs(&aligned);
    }
    s
}

/// Median leading time of carriers 0 and 1 over every run's complete leading runs, and how
/// many runs each led.
pub(super) fn pooled_leading<'a>(
    runs: impl Iterator<Item = &'a (Vec<f64>, Vec<f64>)>,
) -> ((f64, f64), (usize, usize)) {
    let (mut la, mut lb) = (Vec::new(), Vec::new());
    for (a, b) in runs {
        la.extend_from_slice(a);
        lb.extend_from_slice(b);
    }
    let n = (la.len(), lb.len());
    ((quantile(&mut la, 0.5), quantile(&mut lb, 0.5)), n)
}

/// The statistics of one congestion control over its runs (one per trip), samples pooled: the
/// quartiles, shares and medians are taken over every trip's samples together.
pub(super) fn summarise(runs: &[&RunSamples], n: usize) -> RunResult {
    let carriers = (0..n)
        .map(|i| {
            let all = || runs.iter().map(|r| &r.carriers[i]);
            let windows: Vec<f64> = all().flat_map(|c| c.windows_mbps.iter().copied()).collect();
            let rtts: Vec<f64> = all().flat_map(|c| c.rtt_ms.iter().copied()).collect();
            let (out, ctn) = all().fold((0, 0), |(o, k), c| (o + c.ct_rt.0, k + c.ct_rt.1));
            CarrierResult {
                windows: windows.len(),
                tput_mbps: quartiles(windows),
                rtt_samples: rtts.len(),
                rtt_ms: quartiles(rtts),
                ct_rt_outside_pct: pct(out, ctn),
                ct_rt_n: ctn,
                rto_episodes: all().map(|c| c.rto_episodes).sum(),
                rto_repeated: all().map(|c| c.rto_repeated).sum(),
                data_segs: all().map(|c| c.data_segs).sum(),
            }
        })
        .collect();
    let pair = (n >= 2).then(|| {
        let (tput_ratio_pct, tput_n) =
            ratio_shares(runs.iter().flat_map(|r| r.tput_pairs.iter().copied()));
        let (rtt_ratio_pct, rtt_n) =
            ratio_shares(runs.iter().flat_map(|r| r.rtt_pairs.iter().copied()));
        let (leading_ms, leading_runs) = pooled_leading(runs.iter().map(|r| &r.leading_ms));
        PairResult {
            tput_ratio_pct,
            tput_n,
            rtt_ratio_pct,
            rtt_n,
            leading_runs,
            leading_ms,
        }
    });
    let timeouts: u64 = runs.iter().map(|r| r.timeouts).sum();
    let ss_retrans: u64 = runs.iter().map(|r| r.ss_retrans).sum();
    let out_segs: u64 = runs.iter().map(|r| r.out_segs).sum();
    let share = |k: u64| {
        if out_segs == 0 {
            f64::NAN
        } else {
            100.0 * k as f64 / out_segs as f64
        }
    };
    RunResult {
        carriers,
        pair,
        rto_pct: share(timeouts),
        rto_broad_pct: share(timeouts + ss_retrans),
        timeouts,
        out_segs,
    }
}
