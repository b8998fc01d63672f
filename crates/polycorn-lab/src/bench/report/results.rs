//! A finished run (`Results`): its JSON, the terminal table, the CSV files and the checks
//! of a written run (`verify`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use polycorn_link::trip::{Outcome, Trip};
use serde_json::{json, Value};

use crate::bench::analysis::{self as an, Dir, Summary, SystemRun};
use crate::bench::plan::{BulkFlow, Plan, BULK_SIZES, IM_USERS};
use crate::bench::Meta;

/// A finished run with everything the report needs from the trip precomputed.
#[derive(Debug, Clone)]
pub struct Results {
    /// Metadata.
    pub meta: Meta,
    /// The workload.
    pub plan: Plan,
    /// Oracle FCT per bulk flow index, s.
    pub oracle: BTreeMap<usize, Option<f64>>,
    /// Oracle FCT per upload index, s.
    pub upload_oracle: BTreeMap<usize, Option<f64>>,
    /// IM lower bounds per planned message, keyed by (users, user, message); empty for a
    /// ride read back from a file written before they existed (see `pool`).
    pub im_bounds: BTreeMap<(usize, usize, usize), an::ImBound>,
    /// Failed handovers inside the bulk phase (when the source was lost), s after t0.
    pub hofs_s: Vec<f64>,
    /// Failed handovers inside the upload phase, s after t0 (empty without uploads).
    pub upload_hofs_s: Vec<f64>,
    /// Every handover in the window: (s after t0 — a failure at the loss of its source —,
    /// carrier, failed).
    pub handovers: Vec<(f64, usize, bool)>,
    /// Downlink capacity per path, 1 s means, Mbit/s.
    pub capacity: Vec<Vec<f64>>,
    /// Index of the path with the lower mean capacity over the bulk phase.
    pub worse_path: usize,
    /// Per system.
    pub runs: Vec<SystemRun>,
}

/// A bulk size as the tables print it (`256 KB`, `1 MB`).
pub fn size_label(s: u64) -> String {
    if s >= 1024 * 1024 {
        format!("{} MB", s / 1024 / 1024)
    } else {
        format!("{} KB", s / 1024)
    }
}

impl Results {
    /// Precompute the trip-derived views.
    pub fn new(meta: Meta, plan: Plan, trip: &Trip, runs: Vec<SystemRun>) -> Results {
        let oracle_of = |dir: Dir, flows: &[BulkFlow]| {
            flows
                .iter()
                .map(|f| (f.idx, an::oracle_fct_in(dir, trip, f.start_s, f.size)))
                .collect()
        };
        let oracle = oracle_of(Dir::Down, &plan.bulk);
        let upload_oracle = oracle_of(Dir::Up, &plan.uploads);
        let im_bounds = im_bounds(
            trip,
            plan.im.iter().flat_map(|seg| {
                seg.sends_s
                    .iter()
                    .enumerate()
                    .flat_map(move |(user, sends)| {
                        sends
                            .iter()
                            .enumerate()
                            .map(move |(msg, s)| (seg.users, user, msg, seg.start_s + s))
                    })
            }),
        );
        let bulk_end = plan
            .bulk
            .last()
            .map_or(plan.lead_s, |f| f.start_s + plan.bulk_timeout_s);
        let hofs_s = an::failed_handovers_s(trip, plan.lead_s, bulk_end);
        let upload_hofs_s = match (plan.uploads.first(), plan.uploads.last()) {
            (Some(a), Some(b)) => {
                an::failed_handovers_s(trip, a.start_s, b.start_s + plan.upload_timeout_s)
            }
            _ => Vec::new(),
        };
        let handovers = window_handovers(trip, plan.end_s);
        let capacity = capacity_1s(trip, plan.end_s);
        let cap = an::mean_capacity_mbps(trip, plan.lead_s, bulk_end);
        let worse_path = cap
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(i, _)| i);
        Results {
            meta,
            plan,
            oracle,
            upload_oracle,
            im_bounds,
            hofs_s,
            upload_hofs_s,
            handovers,
            capacity,
            worse_path,
            runs,
        }
    }

    pub(crate) fn run(&self, name: &str) -> Option<&SystemRun> {
        self.runs
            .iter()
            .find(|r| r.system == name && r.error.is_none())
    }

    /// The Fig. 11 views of `run`'s flows going `dir`: goodput in the windows after the failed
    /// handovers of their phase (Mbit/s), and each completed flow's tail delay (s).
    pub fn stage_views(&self, dir: Dir, run: &SystemRun) -> (Vec<f64>, Vec<f64>) {
        let hofs = match dir {
            Dir::Down => &self.hofs_s,
            Dir::Up => &self.upload_hofs_s,
        };
        let tails = run
            .flows_of(dir)
            .iter()
            .filter(|x| x.ok)
            .map(|x| x.tail_s)
            .collect();
        (an::goodput_after_hof(dir, run, hofs), tails)
    }

    /// The oracle FCTs of the flows going `dir`, by index.
    pub fn oracle_of(&self, dir: Dir) -> &BTreeMap<usize, Option<f64>> {
        match dir {
            Dir::Down => &self.oracle,
            Dir::Up => &self.upload_oracle,
        }
    }

    /// The planned flows going `dir`.
    pub fn planned(&self, dir: Dir) -> &[BulkFlow] {
        match dir {
            Dir::Down => &self.plan.bulk,
            Dir::Up => &self.plan.uploads,
        }
    }

    /// Whether download `fl`'s budget (if it has one) adds up: its parts sum to its FCT − the
    /// oracle's FCT (as [`Self::oracle`] has it, computed apart from the budget) within 5%
    /// (or 1 ms), and no part but the rest is negative.
    pub fn check_budget(&self, fl: &an::FlowResult) -> Result<()> {
        let Some(b) = &fl.budget else {
            return Ok(());
        };
        let Some(oracle) = self.oracle.get(&fl.idx).copied().flatten() else {
            anyhow::bail!("a budget but no oracle");
        };
        let excess = (fl.fct_s - oracle) * 1e3;
        let sum = b.sum_ms();
        anyhow::ensure!(
            (sum - excess).abs() <= (0.05 * excess.abs()).max(1.0),
            "budget parts sum to {sum:.1} ms, FCT − oracle is {excess:.1} ms ({b:?})"
        );
        let parts = b.parts();
        anyhow::ensure!(
            parts[..5].iter().all(|p| *p >= -1.0),
            "a negative budget part other than the rest ({b:?})"
        );
        Ok(())
    }

    /// FCT / oracle for every completed flow of `run` going `dir` of `size`.
    pub fn fct_over_oracle(&self, dir: Dir, run: &SystemRun, size: u64) -> Vec<f64> {
        run.flows_of(dir)
            .iter()
            .filter(|f| f.ok && f.size == size)
            .filter_map(|f| {
                self.oracle_of(dir)
                    .get(&f.idx)
                    .copied()
                    .flatten()
                    .map(|o| f.fct_s / o)
            })
            .collect()
    }

    /// The IM lower bounds for `users` over the planned messages that have one: mean and p90
    /// of the any-path bound, and mean of the single-path bound (averaged over the SIMs).
    pub fn im_bound_stats(&self, users: usize) -> ImBoundStats {
        let (any, single) = self.im_bound_values(users);
        ImBoundStats {
            n: any.len(),
            any_mean_s: an::mean(&any),
            any_p90_s: an::quantile(&any, 0.9),
            single_mean_s: an::mean(&single),
        }
    }

    /// The any-path and the single-path (averaged over the SIMs) bounds of the planned messages
    /// for `users` that have one, s.
    pub fn im_bound_values(&self, users: usize) -> (Vec<f64>, Vec<f64>) {
        let b = || {
            self.im_bounds
                .iter()
                .filter(move |((u, ..), _)| *u == users)
                .map(|(_, b)| b)
        };
        (
            b().filter_map(|b| b.any_s).collect(),
            b().filter_map(|b| b.single_mean_s()).collect(),
        )
    }

    /// Delivery time ÷ any-path lower bound for every answered message of `run` with `users`.
    pub fn im_over_bound(&self, run: &SystemRun, users: usize) -> Vec<f64> {
        run.im
            .iter()
            .filter(|m| m.users == users)
            .filter_map(|m| {
                let b = self.im_bounds.get(&(m.users, m.user, m.msg))?.any_s?;
                Some(m.delivery_s? / b)
            })
            .collect()
    }

    /// Write flows.csv, im.csv, uploads.csv (when the plan has uploads) and results.json. The
    /// CSVs follow RFC 4180 (the `csv` crate): a system named by a spec with commas
    /// (`polycorn:hpr,minrtt`) or an error with quotes or line breaks is quoted, not split into
    /// extra columns.
    pub fn write_all(&self, dir: &Path) -> Result<()> {
        std::fs::write(dir.join("flows.csv"), self.flows_csv(Dir::Down)?)?;
        if !self.plan.uploads.is_empty() {
            std::fs::write(dir.join("uploads.csv"), self.flows_csv(Dir::Up)?)?;
        }
        let mut m = csv::Writer::from_writer(Vec::new());
        m.write_record(IM_CSV_HEADER)?;
        for r in &self.runs {
            for x in &r.im {
                m.write_record([
                    r.system.clone(),
                    x.users.to_string(),
                    x.user.to_string(),
                    x.msg.to_string(),
                    format!("{:.4}", x.send_s),
                    x.delivery_s.map_or(String::new(), |d| format!("{d:.5}")),
                ])?;
            }
        }
        std::fs::write(dir.join("im.csv"), m.into_inner()?)?;
        let j = self.to_json();
        std::fs::write(dir.join("results.json"), serde_json::to_string_pretty(&j)?)
            .context("write results.json")?;
        Ok(())
    }

    /// `flows.csv` (downloads) or `uploads.csv`: one row per flow and system.
    fn flows_csv(&self, dir: Dir) -> Result<Vec<u8>> {
        let mut f = csv::Writer::from_writer(Vec::new());
        f.write_record(FLOWS_CSV_HEADER)?;
        for r in &self.runs {
            for x in r.flows_of(dir) {
                let o = self.oracle_of(dir).get(&x.idx).copied().flatten();
                f.write_record([
                    r.system.clone(),
                    r.mode.clone(),
                    r.spec.clone(),
                    x.idx.to_string(),
                    x.size.to_string(),
                    format!("{:.3}", x.start_s),
                    x.ok.to_string(),
                    format!("{:.4}", x.first_byte_s),
                    format!("{:.4}", x.fct_s),
                    format!("{:.4}", x.goodput_mbps()),
                    format!("{:.4}", x.tail_s),
                    o.map_or(String::new(), |o| format!("{o:.4}")),
                    x.error.clone().unwrap_or_default(),
                ])?;
            }
        }
        Ok(f.into_inner()?)
    }

    /// Everything as JSON (metadata, plan, raw results, summaries).
    pub fn to_json(&self) -> Value {
        let m = &self.meta;
        let summ = |s: &Summary| {
            json!({"n": s.n, "mean": num(s.mean), "median": num(s.median), "p10": num(s.p10),
                   "p90": num(s.p90), "ci95": [num(s.ci_lo), num(s.ci_hi)]})
        };
        let runs: Vec<Value> = self
            .runs
            .iter()
            .map(|r| {
                let per_size = |dir: Dir| {
                    let mut per_size = serde_json::Map::new();
                    let flows = r.flows_of(dir);
                    for &size in &BULK_SIZES {
                        let ok: Vec<&an::FlowResult> =
                            flows.iter().filter(|f| f.ok && f.size == size).collect();
                        let gp: Vec<f64> = ok.iter().map(|f| f.goodput_mbps()).collect();
                        let fct: Vec<f64> = ok.iter().map(|f| f.fct_s).collect();
                        let mut v = json!({
                            "flows": flows.iter().filter(|f| f.size == size).count(),
                            "completed": ok.len(),
                            "goodput_mbps": summ(&Summary::of(&gp)),
                            "fct_s": summ(&Summary::of(&fct)),
                            "fct_over_oracle": summ(&Summary::of(&self.fct_over_oracle(dir, r, size))),
                        });
                        if dir == Dir::Down {
                            v["budget"] = budget_summary_json(budget_stats(r, size));
                        }
                        for reference in ["vanilla", "mptcp"] {
                            if let Some(refr) = self.run(reference) {
                                let ratios = an::goodput_ratios(dir, r, refr, size);
                                let mut sv = summ(&Summary::of(&ratios));
                                geo_into(&mut sv, &ratios);
                                v[format!("goodput_ratio_vs_{reference}")] = sv;
                            }
                        }
                        per_size.insert(size.to_string(), v);
                    }
                    Value::Object(per_size)
                };
                let flow_rows = |flows: &[an::FlowResult]| {
                    flows.iter().map(|f| json!({
                        "idx": f.idx, "size": f.size, "start_s": f.start_s, "ok": f.ok,
                        "error": f.error, "first_byte_s": num(f.first_byte_s), "fct_s": num(f.fct_s),
                        "goodput_mbps": num(f.goodput_mbps()), "tail_s": num(f.tail_s),
                        "bins_100ms": f.bins,
                        "budget": f.budget.as_ref().map_or(Value::Null, an::budget_json),
                    })).collect::<Vec<_>>()
                };
                let im: Vec<Value> = IM_USERS
                    .iter()
                    .map(|&u| {
                        let s = an::im_stats(r, u);
                        let ob = self.im_over_bound(r, u);
                        json!({"users": u, "mean_s": num(s.mean_s), "p90_s": num(s.p90_s),
                               "cv": num(s.cv), "delivered": s.delivered, "sent": s.sent,
                               "over_oracle_median": num(an::quantile(&ob, 0.5))})
                    })
                    .collect();
                let (after_hof, tails) = self.stage_views(Dir::Down, r);
                json!({
                    "system": r.system, "mode": r.mode, "spec": r.spec, "pipeline": r.pipeline,
                    "congestion": r.congestion,
                    "ready_s": num(r.ready_s), "late_paths": r.late_paths, "error": r.error,
                    "path_down_bytes": r.path_down_bytes,
                    "path_up_bytes": r.path_up_bytes,
                    "counters": r.counters,
                    "bulk": per_size(Dir::Down),
                    "upload": if self.plan.uploads.is_empty() { Value::Null } else { per_size(Dir::Up) },
                    "upload_stage_views": if self.plan.uploads.is_empty() { Value::Null } else {
                        let (g, tails) = self.stage_views(Dir::Up, r);
                        json!({
                            "goodput_after_hof_mbps": summ(&Summary::of(&g)),
                            "tail_delay_s": {"mean": num(an::mean(&tails)), "p95": num(an::quantile(&tails, 0.95))},
                        })
                    },
                    "im": im,
                    "stage_views": {
                        "goodput_after_hof_mbps": summ(&Summary::of(&after_hof)),
                        "tail_delay_s": {"mean": num(an::mean(&tails)), "p95": num(an::quantile(&tails, 0.95))},
                        "out_of_order_delay_s": an::out_of_order_delay_s(r).map_or(Value::Null, num),
                        "worse_path_share": num(an::path_share(r, self.worse_path)),
                    },
                    "flows": flow_rows(&r.flows),
                    "uploads": flow_rows(&r.uploads),
                    "im_messages": r.im.iter().map(|x| json!([x.users, x.user, x.msg, x.send_s, x.delivery_s])).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({
            "meta": {
                "version": m.version, "build": m.build, "command": m.command, "kernel": m.kernel, "preset": m.preset, "trip_model": m.trip_model,
                "route_seed": m.route_seed, "trip_seed": m.trip_seed, "workload_seed": m.seed,
                "mode": m.mode, "window_from_s": m.from_s, "window_s": m.window_s,
                "queue_bytes": m.queue_bytes, "carriers": m.carriers,
                "handover_prediction": m.prediction, "started": m.started,
                "trace_files": m.trace_files, "path_delays": m.path_delays,
                "path_outages": m.path_outages,
                "interruptions": m.interruptions,
                "handover_interruption": m.handover_interruption,
            },
            "plan": {
                "lead_s": self.plan.lead_s, "bulk_timeout_s": self.plan.bulk_timeout_s,
                "end_s": self.plan.end_s,
                "bulk": self.plan.bulk.iter().map(|f| json!({"idx": f.idx, "start_s": f.start_s, "size": f.size,
                    "oracle_fct_s": self.oracle.get(&f.idx).copied().flatten()})).collect::<Vec<_>>(),
                "upload_timeout_s": self.plan.upload_timeout_s,
                "uploads": self.plan.uploads.iter().map(|f| json!({"idx": f.idx, "start_s": f.start_s, "size": f.size,
                    "oracle_fct_s": self.upload_oracle.get(&f.idx).copied().flatten()})).collect::<Vec<_>>(),
                "im": self.plan.im.iter().map(|s| {
                    let b = self.im_bound_stats(s.users);
                    json!({"users": s.users, "start_s": s.start_s, "deadline_s": s.deadline_s,
                           "oracle_mean_s": num(b.any_mean_s), "oracle_p90_s": num(b.any_p90_s),
                           "oracle_single_path_mean_s": num(b.single_mean_s)})
                }).collect::<Vec<_>>(),
                "im_oracle": self.im_bounds.iter().map(|((u, user, msg), b)| json!([u, user, msg, b.any_s, b.path_s])).collect::<Vec<_>>(),
            },
            "trip": {
                "failed_handovers_in_bulk_phase_s": self.hofs_s,
                "failed_handovers_in_upload_phase_s": self.upload_hofs_s,
                "handovers": self.handovers.iter().map(|h| json!({"t_s": h.0, "carrier": h.1, "failed": h.2})).collect::<Vec<_>>(),
                "capacity_mbps_1s": self.capacity,
                "worse_path": self.worse_path,
            },
            "runs": runs,
        })
    }
}

/// Every handover of `trip` up to `end_s`: (s — a failure at the loss of its source —,
/// carrier, failed).
pub fn window_handovers(trip: &Trip, end_s: f64) -> Vec<(f64, usize, bool)> {
    trip.handovers
        .iter()
        .map(|h| {
            (
                h.disruption_ms() as f64 / 1000.0,
                h.carrier,
                h.outcome == Outcome::Failure,
            )
        })
        .filter(|h| h.0 <= end_s)
        .collect()
}

/// Downlink capacity per path of `trip` up to `end_s`, 1 s means, Mbit/s.
pub fn capacity_1s(trip: &Trip, end_s: f64) -> Vec<Vec<f64>> {
    let secs = end_s.ceil() as usize;
    let per_s = (1000 / polycorn_link::trip::STEP_MS) as usize;
    trip.paths
        .iter()
        .map(|p| {
            (0..secs)
                .map(|s| {
                    let a = (s * per_s).min(p.dl_bps.len());
                    let b = ((s + 1) * per_s).min(p.dl_bps.len());
                    an::mean(&p.dl_bps[a..b]) / 1e6
                })
                .collect()
        })
        .collect()
}

/// ` (change vs single% / vs mptcp%)` for the pooled IM rows; nothing when neither baseline ran.
pub(super) fn changes(vs_single: f64, vs_mptcp: f64) -> String {
    if vs_single.is_finite() || vs_mptcp.is_finite() {
        format!(" ({}% / {}%)", f(vs_single, 1), f(vs_mptcp, 1))
    } else {
        String::new()
    }
}

/// IM lower bounds of one user count (see [`Results::im_bound_stats`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImBoundStats {
    /// Messages with a bound.
    pub n: usize,
    /// Mean any-path bound, s.
    pub any_mean_s: f64,
    /// p90 any-path bound, s.
    pub any_p90_s: f64,
    /// Mean single-path bound (averaged over the SIMs), s.
    pub single_mean_s: f64,
}

/// The IM lower bounds of `msgs` — (users, user, message, send time s after the trip's start)
/// — over `trip`.
pub fn im_bounds(
    trip: &Trip,
    msgs: impl Iterator<Item = (usize, usize, usize, f64)>,
) -> BTreeMap<(usize, usize, usize), an::ImBound> {
    let oracle = an::ImOracle::new(trip);
    msgs.map(|(u, user, msg, t)| ((u, user, msg), an::ImBound::of(&oracle, t)))
        .collect()
}

/// A JSON number, or `null` for NaN and infinities (JSON has neither).
pub(super) fn num(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        Value::Null
    }
}

pub(super) fn f(x: f64, prec: usize) -> String {
    if x.is_finite() {
        format!("{x:.prec$}")
    } else {
        "-".into()
    }
}

/// `meta.preset` of a bench on recorded traces (`bench --trace`).
pub const TRACES_PRESET: &str = "traces";

/// Goodput after failed handovers (mean/median, windows) and tail delay (mean/p95), for the
/// terminal's per-stage views.
pub(super) fn stage_cells(after_hof: &[f64], tails: &[f64]) -> String {
    format!(
        "{:>6}/{:<6} ({:>2})  tail {:>6}/{:<6}",
        f(an::mean(after_hof), 2),
        f(an::quantile(after_hof, 0.5), 2),
        after_hof.len(),
        f(an::mean(tails), 3),
        f(an::quantile(tails, 0.95), 3),
    )
}

/// The terminal tables of the bulk flows going `dir`: per size goodput, FCT and FCT÷oracle;
/// per-flow goodput ratios against vanilla and kernel MPTCP.
pub(super) fn bulk_tables(o: &mut String, r: &Results, dir: Dir, w: usize) {
    let _ = writeln!(
        o,
        "\nbulk {}: median goodput Mbit/s / median FCT s / median FCT÷oracle (completed/flows)",
        dir.noun()
    );
    let _ = write!(o, "{:<w$}", "system");
    for &s in &BULK_SIZES {
        let _ = write!(o, " {:>26}", size_label(s));
    }
    o.push('\n');
    for run in &r.runs {
        let _ = write!(o, "{:<w$}", run.system);
        if let Some(e) = &run.error {
            let _ = writeln!(o, " FAILED: {e}");
            continue;
        }
        for &s in &BULK_SIZES {
            let flows = run.flows_of(dir);
            let ok: Vec<&an::FlowResult> = flows.iter().filter(|x| x.ok && x.size == s).collect();
            let n = flows.iter().filter(|x| x.size == s).count();
            let gp: Vec<f64> = ok.iter().map(|x| x.goodput_mbps()).collect();
            let fct: Vec<f64> = ok.iter().map(|x| x.fct_s).collect();
            let orc = an::quantile(&r.fct_over_oracle(dir, run, s), 0.5);
            let cell = format!(
                "{}/{}/{} ({}/{})",
                f(an::quantile(&gp, 0.5), 1),
                f(an::quantile(&fct, 0.5), 2),
                f(orc, 1),
                ok.len(),
                n
            );
            let _ = write!(o, " {cell:>26}");
        }
        o.push('\n');
    }
    for reference in ["vanilla", "mptcp"] {
        let Some(refr) = r.run(reference) else {
            continue;
        };
        let _ = writeln!(
            o,
            "\nper-flow goodput ratio{} vs {reference}: mean [95% CI] median p10-p90 (pairs)",
            of_uploads(dir)
        );
        for run in r
            .runs
            .iter()
            .filter(|x| x.error.is_none() && x.system != reference)
        {
            let _ = write!(o, "{:<w$}", run.system);
            for &s in &BULK_SIZES {
                let v = Summary::of(&an::goodput_ratios(dir, run, refr, s));
                let cell = format!(
                    "{} [{},{}] {} {}-{} ({})",
                    f(v.mean, 2),
                    f(v.ci_lo, 2),
                    f(v.ci_hi, 2),
                    f(v.median, 2),
                    f(v.p10, 2),
                    f(v.p90, 2),
                    v.n
                );
                let _ = write!(o, " {cell:>34}");
            }
            o.push('\n');
        }
    }
    if dir == Dir::Up {
        let _ = writeln!(
            o,
            "\nper-stage views of uploads: goodput 2 s after a failed handover mean/median Mbit/s (windows), tail delay (last 10%) mean/p95 s"
        );
        for run in r.runs.iter().filter(|x| x.error.is_none()) {
            let (g, tails) = r.stage_views(dir, run);
            let _ = writeln!(o, "{:<w$} {}", run.system, stage_cells(&g, &tails));
        }
    }
}

/// A budget summary: how many budgets, then per [`an::BUDGET_KEYS`] key their mean and their
/// median.
pub(super) type BudgetStats = (usize, [f64; 7], [f64; 7]);

/// Per-key means and medians (in [`an::BUDGET_KEYS`] order) of the budgets of `run`'s
/// completed downloads of `size`, and how many there were; `None` without any.
pub(super) fn budget_stats(run: &SystemRun, size: u64) -> Option<BudgetStats> {
    budget_summary(&an::budgets(run, Dir::Down, size))
}

/// Per-key means and medians (in [`an::BUDGET_KEYS`] order) of budgets `b`, and how many;
/// `None` without any.
pub(super) fn budget_summary(b: &[polycorn_sim::budget::Budget]) -> Option<BudgetStats> {
    if b.is_empty() {
        return None;
    }
    let (mut mean, mut median) = ([0.0; 7], [0.0; 7]);
    for k in 0..7 {
        let v: Vec<f64> = b.iter().map(|x| an::budget_values(x)[k]).collect();
        mean[k] = an::mean(&v);
        median[k] = an::quantile(&v, 0.5);
    }
    Some((b.len(), mean, median))
}

/// A [`budget_summary`] as JSON: `n`, and `mean` and `median` objects keyed by
/// [`an::BUDGET_KEYS`]; null without budgets.
pub(super) fn budget_summary_json(s: Option<BudgetStats>) -> Value {
    let Some((n, mean, median)) = s else {
        return Value::Null;
    };
    let obj = |vals: [f64; 7]| {
        an::BUDGET_KEYS
            .iter()
            .zip(vals)
            .map(|(k, x)| (k.to_string(), num(x)))
            .collect::<serde_json::Map<_, _>>()
    };
    json!({"n": n, "mean": obj(mean), "median": obj(median)})
}

/// The terminal table of the downloads' budgets: per system and size, the mean FCT − oracle
/// and the mean of each part (means add up as the parts do).
pub(super) fn budget_table(o: &mut String, r: &Results, w: usize) {
    let rows: Vec<(&SystemRun, u64, BudgetStats)> = r
        .runs
        .iter()
        .filter(|x| x.error.is_none())
        .flat_map(|run| {
            BULK_SIZES
                .iter()
                .filter_map(move |&s| budget_stats(run, s).map(|b| (run, s, b)))
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "
bulk download budget: mean ms per flow of FCT − oracle = set-up + window-bound + queueing + reordering + stalls + rest (flows)"
    );
    let _ = writeln!(
        o,
        "{:<w$} {:>6} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "system", "size", "FCT−orc", "setup", "window", "queue", "reorder", "stalls", "rest"
    );
    for (run, s, (n, mean, _)) in rows {
        let _ = write!(o, "{:<w$} {:>6}", run.system, size_label(s));
        for v in mean {
            let _ = write!(o, " {:>8}", f(v, 0));
        }
        let _ = writeln!(o, " ({n})");
    }
}

/// The terminal tables of instant messaging: per user count the delivery times and the lower
/// bound.
pub(super) fn im_tables(o: &mut String, r: &Results, w: usize) {
    let _ = writeln!(
        o,
        "\ninstant messaging: mean / p90 delivery time ms, CV across users (answers/messages)"
    );
    let _ = write!(o, "{:<w$}", "system");
    for &u in &IM_USERS {
        let _ = write!(o, " {:>28}", format!("{u} users"));
    }
    o.push('\n');
    for run in r.runs.iter().filter(|x| x.error.is_none()) {
        let _ = write!(o, "{:<w$}", run.system);
        for &u in &IM_USERS {
            let s = an::im_stats(run, u);
            let cell = format!(
                "{}/{}/{} ({}/{})",
                f(s.mean_s * 1000.0, 0),
                f(s.p90_s * 1000.0, 0),
                f(s.cv, 2),
                s.delivered,
                s.sent
            );
            let _ = write!(o, " {cell:>28}");
        }
        o.push('\n');
    }
    if !r.im_bounds.is_empty() {
        let _ = write!(o, "{:<w$}", "lower bound");
        for &u in &IM_USERS {
            let b = r.im_bound_stats(u);
            let cell = format!(
                "{}/{} ({}/{})",
                f(b.any_mean_s * 1000.0, 0),
                f(b.any_p90_s * 1000.0, 0),
                f(b.single_mean_s * 1000.0, 0),
                b.n
            );
            let _ = write!(o, " {cell:>28}");
        }
        let _ = writeln!(
            o,
            "\n  lower bound = each message and its answer over whichever path is best, no queueing and no TCP: mean/p90 (in brackets: mean when both stay on one SIM)"
        );
    }
}

/// The terminal summary.
pub fn table(r: &Results) -> String {
    let mut o = String::new();
    let m = &r.meta;
    let model = m.trip_model.as_deref().unwrap_or("not recorded");
    if m.preset == TRACES_PRESET {
        let _ = writeln!(
            o,
            "\npolycorn bench ({}) {} | recorded traces ({model}: {}) ride {} seed {} | kernel {} | window {:.0} s from trace time {:.0} s",
            m.mode, m.version, m.carriers.join(", "), m.trip_seed, m.seed, m.kernel, r.plan.end_s, m.from_s
        );
    } else {
        let _ = writeln!(
            o,
            "\npolycorn bench ({}) {} | preset {} (trip model {model}) route {} trip {} seed {} | kernel {} | window {:.0} s from trip time {:.0} s | successful-handover packets {}",
            m.mode, m.version, m.preset, m.route_seed, m.trip_seed, m.seed, m.kernel, r.plan.end_s, m.from_s, m.handover_interruption
        );
    }
    let _ = writeln!(o, "handover prediction: {}", m.prediction);
    if !m.path_delays.is_empty() {
        let _ = writeln!(
            o,
            "traces: {}; one-way delay: {}",
            m.trace_files.join(", "),
            m.path_delays.join("; ")
        );
    }
    if !m.path_outages.is_empty() {
        let _ = writeln!(o, "outages: {}", m.path_outages.join("; "));
    }
    for run in r.runs.iter().filter(|x| !x.late_paths.is_empty()) {
        let _ = writeln!(
            o,
            "{}: {} not connected when the workload started (no capacity in the lead-in)",
            run.system,
            run.late_paths.join(", ")
        );
    }
    let w = name_width(r.runs.iter().map(|x| x.system.as_str()));
    // A run without a workload prints no empty tables for it.
    if !r.plan.bulk.is_empty() {
        bulk_tables(&mut o, r, Dir::Down, w);
    }
    if !r.plan.bulk.is_empty() {
        budget_table(&mut o, r, w);
    }
    if !r.plan.im.is_empty() {
        im_tables(&mut o, r, w);
    }
    // The downlink's views (an uploads-only run has none of its own: those follow).
    let downlink = !r.plan.bulk.is_empty() || !r.plan.im.is_empty();
    if downlink {
        let _ = writeln!(
            o,
            "\nper-stage views (Fig. 11): goodput 2 s after a failed handover mean/median Mbit/s (windows), tail delay (last 10%) mean/p95 s, out-of-order delay, share of downlink bytes on the worse path ({})",
            r.meta.carriers.get(r.worse_path).cloned().unwrap_or_default()
        );
    }
    for run in r.runs.iter().filter(|x| downlink && x.error.is_none()) {
        let (g, tails) = r.stage_views(Dir::Down, run);
        let _ = writeln!(
            o,
            "{:<w$} {}  ooo {:>6} ms  worse path {:>5}%",
            run.system,
            stage_cells(&g, &tails),
            f(an::out_of_order_delay_s(run).unwrap_or(f64::NAN) * 1e3, 1),
            f(100.0 * an::path_share(run, r.worse_path), 1)
        );
    }
    if !r.plan.uploads.is_empty() {
        bulk_tables(&mut o, r, Dir::Up, w);
    }
    let with_counters: Vec<_> = r
        .runs
        .iter()
        .filter(|x| x.mode == "polycorn" && !x.counters.is_empty())
        .collect();
    if !with_counters.is_empty() {
        let _ = writeln!(
            o,
            "
scheduler activity (proxy = downlink, relay = uplink): decisions in which each stage moved a path; reinjected and redundant MB; subflow reconnects"
        );
        for run in with_counters {
            let _ = writeln!(o, "{:<w$} {}", run.system, an::activity_line(run));
        }
    }
    o
}

/// Width of the system-name column: the longest name (a `polycorn:SPEC` can be long), at least
/// 11 characters.
pub(super) fn name_width<'a>(names: impl Iterator<Item = &'a str>) -> usize {
    names.map(|n| n.chars().count()).max().unwrap_or(0).max(11)
}

/// Columns of `flows.csv`.
pub const FLOWS_CSV_HEADER: [&str; 13] = [
    "system",
    "mode",
    "spec",
    "idx",
    "size_bytes",
    "start_s",
    "ok",
    "first_byte_s",
    "fct_s",
    "goodput_mbps",
    "tail_s",
    "oracle_fct_s",
    "error",
];

/// Columns of `im.csv`.
pub const IM_CSV_HEADER: [&str; 6] = ["system", "users", "user", "msg", "send_s", "delivery_s"];

/// Records of a written CSV, after checking its header and that every record has every column
/// (errors name the file and the line).
pub(super) fn csv_records(text: &str, name: &str, header: &[&str]) -> Result<usize> {
    let mut rd = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(text.as_bytes());
    let got = rd.headers().with_context(|| format!("{name}: header"))?;
    anyhow::ensure!(
        got.iter().eq(header.iter().copied()),
        "{name}:1: header is `{}`, expected `{}`",
        got.iter().collect::<Vec<_>>().join(","),
        header.join(",")
    );
    let mut n = 0;
    for rec in rd.records() {
        let rec = rec.with_context(|| format!("{name}: record {}", n + 1))?;
        let line = rec.position().map_or(0, |p| p.line());
        anyhow::ensure!(
            rec.len() == header.len(),
            "{name}:{line}: {} fields, expected {}",
            rec.len(),
            header.len()
        );
        n += 1;
    }
    Ok(n)
}

/// Read the written outputs back and check they are complete and consistent with the run:
/// one CSV row per planned flow and message of every system, every system in the JSON, every
/// plot in the HTML, and every system able to carry traffic at all (it does not check who is
/// faster). Used by `polycorn bench` before it reports success, so CI checks the pipeline.
pub fn verify(dir: &Path, r: &Results) -> Result<()> {
    let read =
        |f: &str| std::fs::read_to_string(dir.join(f)).with_context(|| format!("read back {f}"));
    let systems = r.runs.len();
    let msgs: usize = r
        .plan
        .im
        .iter()
        .map(|s| s.users * s.sends_s.first().map_or(0, Vec::len))
        .sum();
    let ran = r.runs.iter().filter(|x| x.error.is_none()).count();
    let flows = csv_records(&read("flows.csv")?, "flows.csv", &FLOWS_CSV_HEADER)?;
    let want = ran * r.plan.bulk.len();
    anyhow::ensure!(flows == want, "flows.csv has {flows} rows, expected {want}");
    if !r.plan.uploads.is_empty() {
        let ups = csv_records(&read("uploads.csv")?, "uploads.csv", &FLOWS_CSV_HEADER)?;
        let want = ran * r.plan.uploads.len();
        anyhow::ensure!(ups == want, "uploads.csv has {ups} rows, expected {want}");
    }
    let im = csv_records(&read("im.csv")?, "im.csv", &IM_CSV_HEADER)?;
    let want = ran * msgs;
    anyhow::ensure!(im == want, "im.csv has {im} rows, expected {want}");
    let j: Value = serde_json::from_str(&read("results.json")?).context("parse results.json")?;
    anyhow::ensure!(
        j["runs"].as_array().map_or(0, Vec::len) == systems,
        "results.json lacks systems"
    );
    for key in [
        "version",
        "kernel",
        "preset",
        "route_seed",
        "trip_seed",
        "workload_seed",
    ] {
        anyhow::ensure!(!j["meta"][key].is_null(), "results.json meta lacks {key}");
    }
    let html = read("report.html")?;
    let upload_plots = UPLOAD_PLOT_IDS
        .iter()
        .filter(|_| !r.plan.uploads.is_empty());
    for id in PLOT_IDS.iter().chain(upload_plots) {
        anyhow::ensure!(
            html.contains(&format!("id=\"{id}\"")),
            "report.html lacks plot {id}"
        );
    }
    for run in &r.runs {
        if let Some(e) = &run.error {
            anyhow::bail!("{}: not run: {e}", run.system);
        }
        for fl in &run.flows {
            if let Err(e) = r.check_budget(fl) {
                anyhow::bail!("{}: bulk flow {}: {e}", run.system, fl.idx);
            }
        }
        anyhow::ensure!(
            run.flows.len() == r.plan.bulk.len(),
            "{}: {} bulk results for {} planned flows",
            run.system,
            run.flows.len(),
            r.plan.bulk.len()
        );
        anyhow::ensure!(
            run.im.len() == msgs,
            "{}: IM results incomplete",
            run.system
        );
        anyhow::ensure!(
            r.plan.bulk.is_empty() || run.flows.iter().any(|f| f.ok),
            "{}: no bulk download completed",
            run.system
        );
        anyhow::ensure!(
            run.uploads.len() == r.plan.uploads.len(),
            "{}: {} upload results for {} planned uploads",
            run.system,
            run.uploads.len(),
            r.plan.uploads.len()
        );
        anyhow::ensure!(
            r.plan.uploads.is_empty() || run.uploads.iter().any(|f| f.ok),
            "{}: no bulk upload completed",
            run.system
        );
        anyhow::ensure!(
            msgs == 0 || run.im.iter().any(|m| m.delivery_s.is_some()),
            "{}: no IM answer arrived",
            run.system
        );
        anyhow::ensure!(
            run.path_down_bytes.iter().sum::<u64>() > 0,
            "{}: the emulator carried nothing",
            run.system
        );
        anyhow::ensure!(
            run.mode != "polycorn"
                || run
                    .counters
                    .keys()
                    .any(|k| k.starts_with("proxy:polycorn_stage_decisions_total")),
            "{}: the proxy's scheduler metrics were not collected",
            run.system
        );
    }
    Ok(())
}

/// The plots a report with uploads must contain besides [`PLOT_IDS`].
pub const UPLOAD_PLOT_IDS: &[&str] = &[
    "upload-fct-cdf-256",
    "upload-fct-cdf-1024",
    "upload-fct-cdf-4096",
    "upload-ratio-vs-vanilla",
    "upload-ratio-vs-mptcp",
];

/// The plots the report must contain.
pub const PLOT_IDS: &[&str] = &[
    "trip-series",
    "fct-cdf-256",
    "fct-cdf-1024",
    "fct-cdf-4096",
    "ratio-vs-vanilla",
    "ratio-vs-mptcp",
    "im-delivery",
    "im-delivery-p90",
    "stage-views",
    "budget",
];

/// Add the geometric mean of `ratios` and its 95% CI to a ratio summary's JSON; returns it.
pub(super) fn geo_into(v: &mut Value, ratios: &[f64]) -> an::GeoSummary {
    let g = an::GeoSummary::of(ratios);
    v["geomean"] = num(g.gmean);
    v["geomean_ci95"] = json!([num(g.ci_lo), num(g.ci_hi)]);
    g
}

/// Nothing for downloads (the tables' names since the first bench), " of uploads" for uploads.
pub(super) fn of_uploads(dir: Dir) -> &'static str {
    match dir {
        Dir::Down => "",
        Dir::Up => " of uploads",
    }
}
