//! The calibration table: rows per statistic beside the published value, as text and CSV.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// A value: within tolerance if within ±25% of the published one.
    Value,
    /// A share in percent: within ±5 percentage points.
    Share,
    /// Printed for information, not judged.
    Info,
}

#[derive(Clone, Debug)]
pub(super) struct Row {
    pub(super) metric: String,
    pub(super) carrier: String,
    pub(super) published: Option<f64>,
    pub(super) kind: Kind,
    /// One per congestion control.
    pub(super) measured: Vec<f64>,
    /// Trip-model value; judged instead of `measured` when `judge_model`.
    pub(super) model: f64,
    pub(super) judge_model: bool,
    /// How many samples the measured values rest on, per congestion control.
    pub(super) n: Vec<usize>,
}

impl Row {
    pub(super) fn within(&self, v: f64) -> Option<bool> {
        let p = self.published?;
        if !v.is_finite() {
            // Nothing to judge (e.g. no RTO episode to look at): shown as "n/a".
            return None;
        }
        match self.kind {
            Kind::Value => Some((v - p).abs() <= VALUE_TOLERANCE * p.abs()),
            Kind::Share => Some((v - p).abs() <= SHARE_TOLERANCE_POINTS),
            Kind::Info => None,
        }
    }

    pub(super) fn to_json(&self, ccs: &[String]) -> Value {
        let num = |v: f64| if v.is_finite() { json!(v) } else { Value::Null };
        let mut measured = serde_json::Map::new();
        for (k, cc) in ccs.iter().enumerate() {
            if let Some(v) = self.measured.get(k) {
                measured.insert(
                    cc.clone(),
                    json!({
                        "value": num(*v),
                        "n": self.n.get(k),
                        "within_tolerance": if self.judge_model { None } else { self.within(*v) },
                    }),
                );
            }
        }
        json!({
            "metric": self.metric,
            "carrier": self.carrier,
            "published": self.published,
            "kind": format!("{:?}", self.kind).to_lowercase(),
            "measured": measured,
            "trip_model": num(self.model),
            "trip_model_within_tolerance": if self.judge_model { self.within(self.model) } else { None },
        })
    }
}

pub(super) fn table(
    names: &[String],
    results: &[RunResult],
    model: &ModelStats,
    win: &WindowModel,
) -> Vec<Row> {
    let mut rows = Vec::new();
    let name = |c: usize| names.get(c).cloned().unwrap_or_else(|| c.to_string());
    let per_carrier = names.len().min(2);
    let row = |metric: &str,
               carrier: String,
               published: Option<f64>,
               kind: Kind,
               measured: Vec<f64>,
               n: Vec<usize>,
               model: f64| Row {
        metric: metric.into(),
        carrier,
        published,
        kind,
        measured,
        model,
        judge_model: false,
        n,
    };
    let q = ["p25", "p50", "p75"];
    for c in 0..names.len() {
        let pubc = |v: &[f64]| (c < per_carrier).then(|| v[c]);
        for (k, qn) in q.iter().enumerate() {
            rows.push(row(
                &format!("downlink throughput {qn} (Mbit/s)"),
                name(c),
                (c < per_carrier).then(|| published::TPUT_MBPS[c][k]),
                Kind::Value,
                results.iter().map(|r| r.carriers[c].tput_mbps[k]).collect(),
                results.iter().map(|r| r.carriers[c].windows).collect(),
                win.capacity_mbps[c][k],
            ));
        }
        for (k, qn) in q.iter().enumerate() {
            rows.push(row(
                &format!("RTT {qn} (ms)"),
                name(c),
                (c < per_carrier).then(|| published::RTT_MS[c][k]),
                Kind::Value,
                results.iter().map(|r| r.carriers[c].rtt_ms[k]).collect(),
                results.iter().map(|r| r.carriers[c].rtt_samples).collect(),
                win.idle_rtt_ms[c][k],
            ));
        }
        rows.push(row(
            "CT/RT outside [0.5,2] (%)",
            name(c),
            pubc(&published::CT_RT_OUTSIDE_PCT),
            Kind::Share,
            results
                .iter()
                .map(|r| r.carriers[c].ct_rt_outside_pct)
                .collect(),
            results.iter().map(|r| r.carriers[c].ct_rt_n).collect(),
            win.ct_rt_pct[c],
        ));
        rows.push(row(
            "RTO episodes / data segs, ss (%)",
            name(c),
            None,
            Kind::Info,
            results
                .iter()
                .map(|r| {
                    let cr = &r.carriers[c];
                    if cr.data_segs == 0 {
                        f64::NAN
                    } else {
                        100.0 * cr.rto_episodes as f64 / cr.data_segs as f64
                    }
                })
                .collect(),
            results.iter().map(|r| r.carriers[c].rto_episodes).collect(),
            f64::NAN,
        ));
        rows.push(row(
            "RTO episodes with >1 RTO, ss (%)",
            name(c),
            Some(published::RTO_REPEATED_PCT),
            Kind::Share,
            results
                .iter()
                .map(|r| pct(r.carriers[c].rto_repeated, r.carriers[c].rto_episodes))
                .collect(),
            results.iter().map(|r| r.carriers[c].rto_episodes).collect(),
            f64::NAN,
        ));
    }
    let both = if names.len() >= 2 {
        format!("{}+{}", name(0), name(1))
    } else {
        name(0)
    };
    rows.push(row(
        "RTO share: TCPTimeouts/OutSegs (%)",
        both.clone(),
        Some(published::RTO_PCT),
        Kind::Share,
        results.iter().map(|r| r.rto_pct).collect(),
        results.iter().map(|r| r.timeouts as usize).collect(),
        f64::NAN,
    ));
    rows.push(row(
        "  (Timeouts+SlowStartRetrans)/OutSegs",
        both,
        Some(published::RTO_PCT),
        Kind::Info,
        results.iter().map(|r| r.rto_broad_pct).collect(),
        results.iter().map(|r| r.out_segs as usize).collect(),
        f64::NAN,
    ));
    if names.len() >= 2 {
        let ab = format!("{}/{}", name(0), name(1));
        let pair = |f: &dyn Fn(&PairResult) -> f64| -> Vec<f64> {
            results
                .iter()
                .map(|r| r.pair.as_ref().map_or(f64::NAN, f))
                .collect()
        };
        let pair_n = |f: &dyn Fn(&PairResult) -> usize| -> Vec<usize> {
            results
                .iter()
                .map(|r| r.pair.as_ref().map_or(0, f))
                .collect()
        };
        rows.push(row(
            "throughput ratio < 0.5 (%)",
            ab.clone(),
            Some(published::TPUT_RATIO_PCT.0),
            Kind::Share,
            pair(&|p| p.tput_ratio_pct.0),
            pair_n(&|p| p.tput_n),
            win.cap_ratio_pct.0,
        ));
        rows.push(row(
            "throughput ratio > 2 (%)",
            ab.clone(),
            Some(published::TPUT_RATIO_PCT.1),
            Kind::Share,
            pair(&|p| p.tput_ratio_pct.1),
            pair_n(&|p| p.tput_n),
            win.cap_ratio_pct.1,
        ));
        rows.push(row(
            "RTT ratio < 0.5 (%)",
            ab.clone(),
            Some(published::RTT_RATIO_PCT.0),
            Kind::Share,
            pair(&|p| p.rtt_ratio_pct.0),
            pair_n(&|p| p.rtt_n),
            win.rtt_ratio_pct.0,
        ));
        rows.push(row(
            "RTT ratio > 2 (%)",
            ab,
            Some(published::RTT_RATIO_PCT.1),
            Kind::Share,
            pair(&|p| p.rtt_ratio_pct.1),
            pair_n(&|p| p.rtt_n),
            win.rtt_ratio_pct.1,
        ));
        rows.push(row(
            "median RTT leading time (ms)",
            name(0),
            Some(published::RTT_LEADING_MS[0]),
            Kind::Value,
            pair(&|p| p.leading_ms.0),
            pair_n(&|p| p.leading_runs.0),
            win.leading_ms.0,
        ));
        rows.push(row(
            "median RTT leading time (ms)",
            name(1),
            Some(published::RTT_LEADING_MS[1]),
            Kind::Value,
            pair(&|p| p.leading_ms.1),
            pair_n(&|p| p.leading_runs.1),
            win.leading_ms.1,
        ));
    }
    let model_row = |metric: String, c: usize, published: Option<f64>, kind: Kind, v: f64| Row {
        metric,
        carrier: name(c),
        published,
        kind,
        measured: Vec::new(),
        model: v,
        judge_model: true,
        n: Vec::new(),
    };
    for c in 0..names.len() {
        let pubc = |v: &[f64; 2]| (c < per_carrier).then(|| v[c]);
        rows.push(model_row(
            format!("handover interval (s), {} trips", model.trips),
            c,
            pubc(&published::HO_INTERVAL_S),
            Kind::Value,
            model.interval_s[c],
        ));
        rows.push(model_row(
            format!("handover failures (%), {} HOs", model.handovers[c]),
            c,
            pubc(&published::HO_FAILURE_PCT),
            Kind::Share,
            model.failure_pct[c],
        ));
        rows.push(model_row(
            format!("cells with >=1 failure (%), {} trips", model.trips),
            c,
            pubc(&published::CELLS_WITH_FAILURE_PCT),
            Kind::Info,
            model.cells_with_failure_pct[c],
        ));
        let (ratio, locations) = model
            .location_p75_p25
            .get(c)
            .copied()
            .unwrap_or((f64::NAN, 0));
        rows.push(model_row(
            format!("capacity p75/p25 per location, {locations} loc."),
            c,
            pubc(&published::LOCATION_P75_P25),
            Kind::Value,
            ratio,
        ));
    }
    rows
}

pub(super) fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

pub(super) fn mark(w: Option<bool>, published: Option<f64>, kind: Kind) -> &'static str {
    match w {
        Some(true) => "ok",
        Some(false) => "MISS",
        None if published.is_some() && kind != Kind::Info => "n/a",
        None => "",
    }
}

pub(super) fn render(rows: &[Row], ccs: &[String]) -> String {
    let mut s = String::new();
    let _ = write!(s, "{:<40} {:<5} {:>9}", "metric", "path", "published");
    for cc in ccs {
        let _ = write!(s, " {:>13}", cc);
    }
    let _ = writeln!(s, " {:>14}", "trip model");
    let width = 40 + 6 + 10 + 14 * ccs.len() + 15;
    let _ = writeln!(s, "{}", "-".repeat(width));
    let (mut ok, mut judged) = (vec![0usize; ccs.len() + 1], vec![0usize; ccs.len() + 1]);
    for r in rows {
        let _ = write!(
            s,
            "{:<40} {:<5} {:>9}",
            r.metric,
            r.carrier,
            r.published.map_or("-".into(), fmt_num)
        );
        for k in 0..ccs.len() {
            let cell = match r.measured.get(k) {
                Some(v) if !r.judge_model => {
                    let w = r.within(*v);
                    if let Some(w) = w {
                        judged[k] += 1;
                        ok[k] += usize::from(w);
                    }
                    format!("{} {:<4}", fmt_num(*v), mark(w, r.published, r.kind))
                }
                _ => String::new(),
            };
            let _ = write!(s, " {cell:>13}");
        }
        let model_cell = if r.judge_model {
            let w = r.within(r.model);
            if let Some(w) = w {
                judged[ccs.len()] += 1;
                ok[ccs.len()] += usize::from(w);
            }
            format!("{} {:<4}", fmt_num(r.model), mark(w, r.published, r.kind))
        } else if r.model.is_finite() {
            format!("({})     ", fmt_num(r.model))
        } else {
            String::new()
        };
        let _ = writeln!(s, " {model_cell:>14}");
    }
    let _ = writeln!(s, "{}", "-".repeat(width));
    let _ = write!(
        s,
        "{:<56}",
        "within tolerance (±25% values, ±5 points shares; n/a not counted)"
    );
    for k in 0..=ccs.len() {
        let _ = write!(s, " {:>13}", format!("{}/{}", ok[k], judged[k]));
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "trip model column: (x) = the emulated window's capacity / idle RTT / capacity ratios (context, not judged); judged rows = trip-model handover statistics"
    );
    s
}

pub(super) fn table_csv(rows: &[Row], ccs: &[String]) -> String {
    let mut s = String::from("metric,carrier,kind,published");
    for cc in ccs {
        let _ = write!(s, ",{cc},{cc}_n,{cc}_within");
    }
    s.push_str(",trip_model,trip_model_within\n");
    let num = |v: f64| {
        if v.is_finite() {
            format!("{v}")
        } else {
            String::new()
        }
    };
    let w = |x: Option<bool>| x.map_or(String::new(), |b| b.to_string());
    for r in rows {
        let _ = write!(
            s,
            "\"{}\",{},{:?},{}",
            r.metric,
            r.carrier,
            r.kind,
            r.published.map_or(String::new(), num)
        );
        for k in 0..ccs.len() {
            match r.measured.get(k) {
                Some(v) if !r.judge_model => {
                    let _ = write!(
                        s,
                        ",{},{},{}",
                        num(*v),
                        r.n.get(k).copied().unwrap_or(0),
                        w(r.within(*v))
                    );
                }
                _ => s.push_str(",,,"),
            }
        }
        let _ = writeln!(
            s,
            ",{},{}",
            num(r.model),
            if r.judge_model {
                w(r.within(r.model))
            } else {
                String::new()
            }
        );
    }
    s
}
