//! Pooled rides: per-flow ratios with intervals over every ride, the paper's targets, the pooled table.

use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::bench::analysis::{self as an, Dir, Summary};
use crate::bench::plan::{BULK_SIZES, IM_USERS};

use super::results::*;

/// Results of several rides pooled: per-flow goodput ratios (vs vanilla and vs kernel MPTCP,
/// each pair from the same ride), FCT ÷ oracle, IM delivery times (all messages of all rides)
/// and their change against single path and kernel MPTCP. Text table and JSON.
/// IM, per ride: each ride's mean delivery time of a system over a baseline's, as a change in %,
/// summarised by the geometric mean over rides with a 95% interval over rides (Student's t on
/// the rides' log ratios, [`an::RideCi`]), per user count and over the three counts together
/// (each ride's mean log ratio over the counts). The pooled change above weighs rides by their
/// messages and has no interval; a ride whose baseline user sat in a blackout moves it a lot.
///
/// When every ride has IM lower bounds (`bounded`), a `lower bound` row does the same with each
/// ride's mean bound in place of a system's mean: the most any scheduler could gain in this
/// statistic. Its JSON goes into `bound["ride_change_pct"]`.
pub(super) fn im_ride_changes(
    rides: &[Results],
    names: &[String],
    bounded: bool,
    o: &mut String,
    systems: &mut serde_json::Map<String, Value>,
    bound: &mut serde_json::Map<String, Value>,
) {
    let ride_mean = |r: &Results, name: &str, users: usize| -> Option<f64> {
        let m = an::im_stats(r.run(name)?, users).mean_s;
        (m.is_finite() && m > 0.0).then_some(m)
    };
    let ride_bound = |r: &Results, users: usize| -> Option<f64> {
        let b = r.im_bound_stats(users);
        (b.n > 0 && b.any_mean_s.is_finite() && b.any_mean_s > 0.0).then_some(b.any_mean_s)
    };
    let bases: Vec<&str> = ["single", "mptcp"]
        .into_iter()
        .filter(|b| names.iter().any(|n| n == b))
        .collect();
    if rides.len() < 2 || bases.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "\ninstant messaging, each ride's mean delivery time over the baseline's: change, geometric mean over rides [95% CI over rides]"
    );
    // Rows: every system, then the lower bound (`None`).
    let rows: Vec<Option<&str>> = names
        .iter()
        .map(|n| Some(n.as_str()))
        .chain(bounded.then_some(None))
        .collect();
    for row in rows {
        for &base in &bases {
            if row == Some(base) {
                continue;
            }
            // Per ride and user count: row / baseline; `None` when either has no value.
            let per_ride: Vec<[Option<f64>; 3]> = rides
                .iter()
                .map(|r| {
                    IM_USERS.map(|u| {
                        let top = match row {
                            Some(name) => ride_mean(r, name, u)?,
                            None => ride_bound(r, u)?,
                        };
                        Some(top / ride_mean(r, base, u)?)
                    })
                })
                .collect();
            let label = format!("{} vs {base}", row.unwrap_or("lower bound"));
            let _ = write!(o, "{label:<22}");
            let mut cols: Vec<(String, Vec<f64>)> = IM_USERS
                .iter()
                .enumerate()
                .map(|(i, u)| {
                    let v: Vec<f64> = per_ride.iter().filter_map(|r| r[i]).collect();
                    (format!("{u}u"), v)
                })
                .collect();
            // Over the three counts: a ride counts when it has all three.
            let all: Vec<f64> = per_ride
                .iter()
                .filter_map(|r| {
                    let l: Option<Vec<f64>> = r.iter().map(|x| x.map(f64::ln)).collect();
                    l.map(|l| (l.iter().sum::<f64>() / l.len() as f64).exp())
                })
                .collect();
            cols.push(("all".into(), all));
            for (label, v) in cols {
                let g = an::GeoSummary::of(&v);
                let ci = an::RideCi::of(&v.iter().map(|x| vec![*x]).collect::<Vec<_>>());
                let _ = write!(
                    o,
                    " {:<30}",
                    format!(
                        "{label} {}% [{}, {}]",
                        f(pct(g.gmean), 1),
                        f(pct(ci.ci_lo), 1),
                        f(pct(ci.ci_hi), 1)
                    )
                );
                let key = if label == "all" {
                    "all".to_string()
                } else {
                    label.trim_end_matches('u').to_string()
                };
                let cell = json!({
                    "gmean": num(pct(g.gmean)), "ci_lo": num(pct(ci.ci_lo)),
                    "ci_hi": num(pct(ci.ci_hi)), "rides": ci.rides,
                });
                match row {
                    Some(name) => systems[name]["im_ride_change_pct"][base][key] = cell,
                    None => {
                        let slot = bound.entry("ride_change_pct").or_insert_with(|| json!({}));
                        slot[base][key] = cell;
                    }
                }
            }
            o.truncate(o.trim_end_matches(' ').len());
            o.push('\n');
        }
    }
    if bounded {
        let _ = writeln!(
            o,
            "  lower bound: each ride's mean IM lower bound in place of a system's mean; the most any scheduler could gain in this statistic"
        );
    }
}

/// A ratio as a change in %.
pub(super) fn pct(x: f64) -> f64 {
    (x - 1.0) * 100.0
}

/// The paper's targets (POLYCORN §6), in the paper's statistics: the mean of
/// per-flow goodput ratios at 256 KB / 1 MB / 4 MB, at least these times vanilla's …
pub(super) const TARGET_VS_VANILLA: [f64; 3] = [1.45, 1.28, 1.26];
/// … and above kernel MPTCP's at every size; IM's change of the pooled mean delivery time,
/// averaged over the three user counts, at most these percentages vs single path and vs kernel
/// MPTCP.
pub(super) const TARGET_IM_PCT: [(&str, f64); 2] = [("single", -45.0), ("mptcp", -16.0)];

/// Every system that is not one of the baselines the targets compare against (kernel MPTCP,
/// single path, vanilla — by the mode and spec its runs recorded, so suffixes and A/A copies
/// count too) against the paper's targets, read from the pooled summaries in `systems`.
/// Appends a text block to `o` when there is anything to judge and returns the verdicts as
/// JSON (`{system: [{what, size?, value, target, met}]}`).
pub(super) fn targets_block(
    rides: &[Results],
    names: &[String],
    systems: &serde_json::Map<String, Value>,
    bound: &Value,
    o: &mut String,
) -> Value {
    let is_baseline = |n: &str| {
        rides
            .iter()
            .flat_map(|r| r.runs.iter().filter(|x| x.system == n))
            .any(|x| x.mode != "polycorn" || x.spec == "vanilla")
    };
    let verdict = |met: bool, shortfall: String| {
        if met {
            "met".to_string()
        } else {
            format!("missed by {shortfall}")
        }
    };
    let w = name_width(names.iter().map(String::as_str));
    let (mut text, mut verdicts) = (String::new(), serde_json::Map::new());
    for name in names.iter().filter(|n| !is_baseline(n)) {
        let Some(s) = systems.get(name) else { continue };
        let (mut lines, mut checks) = (Vec::new(), Vec::new());
        // Bulk: ≥ target ("met" also when equal), vs MPTCP strictly above 1.
        for (reference, targets, strict) in [
            ("vanilla", TARGET_VS_VANILLA, false),
            ("mptcp", [1.0; 3], true),
        ] {
            let key = format!("goodput_ratio_vs_{reference}");
            let mut cells = Vec::new();
            for (&size, &target) in BULK_SIZES.iter().zip(&targets) {
                let Some(v) = s["bulk"][size.to_string()][&key]["mean"].as_f64() else {
                    continue;
                };
                let met = if strict { v > target } else { v >= target };
                let op = if strict { ">" } else { "≥" };
                cells.push(format!(
                    "{} {} ({op} {}: {})",
                    size_label(size),
                    f(v, 2),
                    f(target, 2),
                    verdict(met, f(target - v, 2))
                ));
                checks.push(json!({"what": format!("bulk_vs_{reference}"), "size": size,
                    "value": num(v), "target": target, "met": met}));
            }
            if !cells.is_empty() {
                lines.push(format!("bulk ÷ {reference}: {}", cells.join(", ")));
            }
        }
        // IM: the average over the user counts of the pooled mean's change; every count needed.
        let mut cells = Vec::new();
        for (base, target) in TARGET_IM_PCT {
            let key = format!("mean_change_vs_{base}_pct");
            let per_count: Option<Vec<f64>> = IM_USERS
                .iter()
                .map(|u| s["im"][u.to_string()][&key].as_f64())
                .collect();
            let Some(v) = per_count.map(|c| c.iter().sum::<f64>() / c.len() as f64) else {
                continue;
            };
            let met = v <= target;
            // The most any scheduler could reach here, in the same statistic.
            let reachable: Option<f64> = IM_USERS
                .iter()
                .map(|u| bound[u.to_string()][&key].as_f64())
                .collect::<Option<Vec<f64>>>()
                .map(|c| c.iter().sum::<f64>() / c.len() as f64);
            cells.push(format!(
                "vs {base} {}% (≤ {}%: {}{})",
                f(v, 1),
                f(target, 0),
                verdict(met, format!("{} points", f(v - target, 1))),
                reachable.map_or(String::new(), |b| format!("; lower bound {}%", f(b, 1)))
            ));
            checks.push(json!({"what": format!("im_vs_{base}"), "value": num(v),
                "target": target, "met": met, "lower_bound": reachable.map(num)}));
        }
        if !cells.is_empty() {
            lines.push(format!(
                "IM, mean delivery time averaged over {} users: {}",
                IM_USERS.map(|u| u.to_string()).join("/"),
                cells.join(", ")
            ));
        }
        for (i, line) in lines.iter().enumerate() {
            let label = if i == 0 { name.as_str() } else { "" };
            let _ = writeln!(text, "{label:<w$} {line}");
        }
        if !checks.is_empty() {
            verdicts.insert(name.clone(), Value::Array(checks));
        }
    }
    if !text.is_empty() {
        let _ = writeln!(
            o,
            "
against the paper's targets, in its statistics (mean of per-flow ratios; change of the pooled IM mean) — biased up by noise, so check the geometric means and intervals over rides above"
        );
        o.push_str(&text);
    }
    Value::Object(verdicts)
}

pub fn pooled(rides: &[Results]) -> (String, Value) {
    let summ = |s: &Summary| {
        json!({"n": s.n, "mean": num(s.mean), "median": num(s.median), "p10": num(s.p10),
               "p90": num(s.p90), "ci95": [num(s.ci_lo), num(s.ci_hi)]})
    };
    let mut names: Vec<String> = Vec::new();
    for r in rides {
        for run in &r.runs {
            if !names.contains(&run.system) {
                names.push(run.system.clone());
            }
        }
    }
    let seeds: Vec<u64> = rides.iter().map(|r| r.meta.trip_seed).collect();
    let mut o = String::new();
    if let Some(first) = rides.first().filter(|r| r.meta.preset == TRACES_PRESET) {
        let _ = writeln!(
            o,
            "\npooled over {} rides ({:?}) of recorded traces ({}: {})",
            rides.len(),
            seeds,
            first.meta.trip_model.as_deref().unwrap_or("not recorded"),
            first.meta.carriers.join(", ")
        );
    } else {
        let _ = writeln!(
        o,
        "\npooled over {} rides (trip seeds {:?}), route {} of preset {}, successful-handover packets {}",
        rides.len(),
        seeds,
        rides.first().map_or(0, |r| r.meta.route_seed),
        rides.first().map_or("", |r| r.meta.preset.as_str()),
        rides
            .first()
            .map_or("", |r| r.meta.handover_interruption.as_str())
    );
    }
    let mut systems = serde_json::Map::new();
    for name in &names {
        systems.insert(name.clone(), json!({"bulk": {}, "im": {}}));
    }
    let w = name_width(names.iter().map(String::as_str));
    // A run of one workload prints no empty tables for the other.
    let has_im = rides
        .iter()
        .any(|r| r.runs.iter().any(|x| !x.im.is_empty()));
    for dir in Dir::BOTH {
        let has = rides
            .iter()
            .any(|r| r.runs.iter().any(|x| !x.flows_of(dir).is_empty()));
        if has && dir == Dir::Up {
            for name in &names {
                systems[name]["upload"] = json!({});
            }
        }
        for reference in ["vanilla", "mptcp"] {
            if !has || !rides.iter().any(|r| r.run(reference).is_some()) {
                continue;
            }
            let _ = writeln!(
                o,
                "\nper-flow goodput ratio{} vs {reference}, pooled: mean [95% CI] median (pairs)",
                of_uploads(dir)
            );
            // The geometric means of the same ratios, printed as a second block below.
            let mut geo = String::new();
            for name in names.iter().filter(|n| *n != reference) {
                let _ = write!(o, "{name:<w$}");
                let _ = write!(geo, "{name:<w$}");
                for &size in &BULK_SIZES {
                    let per_ride: Vec<Vec<f64>> = rides
                        .iter()
                        .filter_map(|r| {
                            Some(an::goodput_ratios(
                                dir,
                                r.run(name)?,
                                r.run(reference)?,
                                size,
                            ))
                        })
                        .collect();
                    let v = per_ride.concat();
                    let s = Summary::of(&v);
                    let cell = format!(
                        "{} [{},{}] {} ({})",
                        f(s.mean, 2),
                        f(s.ci_lo, 2),
                        f(s.ci_hi, 2),
                        f(s.median, 2),
                        s.n
                    );
                    let _ = write!(o, " {cell:>28}");
                    let mut sv = summ(&s);
                    let g = geo_into(&mut sv, &v);
                    let rc = an::RideCi::of(&per_ride);
                    sv["geomean_ride_ci95"] = json!([num(rc.ci_lo), num(rc.ci_hi)]);
                    sv["rides"] = json!(rc.rides);
                    let cell = format!(
                        "{} [{},{}] [{},{}]",
                        f(g.gmean, 2),
                        f(g.ci_lo, 2),
                        f(g.ci_hi, 2),
                        f(rc.ci_lo, 2),
                        f(rc.ci_hi, 2)
                    );
                    let _ = write!(geo, " {cell:>32}");
                    systems[name][dir.key()][size.to_string()]
                        [format!("goodput_ratio_vs_{reference}")] = sv;
                }
                o.push('\n');
                geo.push('\n');
            }
            let _ = writeln!(
                o,
                "  geometric mean [95% CI over flows] [95% CI over rides] of the same ratios (symmetric: A/B = 1/(B/A); the mean above is biased up by noise; flows of one ride share its luck, so judge by the interval over rides)"
            );
            o.push_str(&geo);
        }
        if has {
            let _ = writeln!(
                o,
                "\nFCT / oracle{}, pooled: median (completed/flows)",
                of_uploads(dir)
            );
        }
        for name in names.iter().filter(|_| has) {
            let _ = write!(o, "{name:<w$}");
            for &size in &BULK_SIZES {
                let v: Vec<f64> = rides
                    .iter()
                    .filter_map(|r| Some(r.fct_over_oracle(dir, r.run(name)?, size)))
                    .flatten()
                    .collect();
                let flows = rides
                    .iter()
                    .filter_map(|r| r.runs.iter().find(|x| &x.system == name))
                    .flat_map(|x| x.flows_of(dir).iter().filter(|f| f.size == size))
                    .count();
                let _ = write!(
                    o,
                    " {:>16}",
                    format!("{} ({}/{})", f(an::quantile(&v, 0.5), 1), v.len(), flows)
                );
                systems[name][dir.key()][size.to_string()]["fct_over_oracle"] =
                    summ(&Summary::of(&v));
                systems[name][dir.key()][size.to_string()]["flows"] = json!(flows);
            }
            o.push('\n');
        }
        if dir == Dir::Down {
            let mut lines = String::new();
            for name in &names {
                for &size in &BULK_SIZES {
                    let b: Vec<_> = rides
                        .iter()
                        .filter_map(|r| r.run(name))
                        .flat_map(|run| an::budgets(run, dir, size))
                        .collect();
                    let s = budget_summary(&b);
                    if let Some((n, mean, _)) = s {
                        let _ = write!(lines, "{name:<w$} {:>6}", size_label(size));
                        for v in mean {
                            let _ = write!(lines, " {:>8}", f(v, 0));
                        }
                        let _ = writeln!(lines, " ({n})");
                    }
                    systems[name][dir.key()][size.to_string()]["budget"] = budget_summary_json(s);
                }
            }
            if !lines.is_empty() {
                let _ = writeln!(
                    o,
                    "\nbulk download budget, pooled: mean ms per flow of FCT − oracle = set-up + window-bound + queueing + reordering + stalls + rest (flows)\n{:<w$} {:>6} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
                    "system", "size", "FCT−orc", "setup", "window", "queue", "reorder", "stalls", "rest"
                );
                o.push_str(&lines);
            }
        }
    }
    // IM: every delivered answer of every ride.
    let im = |name: &str, users: usize| -> (Vec<f64>, usize, Vec<f64>) {
        let mut d = Vec::new();
        let mut sent = 0;
        let mut cvs = Vec::new();
        for r in rides {
            if let Some(run) = r.run(name) {
                let st = an::im_stats(run, users);
                sent += st.sent;
                if st.cv.is_finite() {
                    cvs.push(st.cv);
                }
                d.extend(
                    run.im
                        .iter()
                        .filter(|m| m.users == users)
                        .filter_map(|m| m.delivery_s),
                );
            }
        }
        (d, sent, cvs)
    };
    // Change of a pooled mean `m` against another system's pooled mean, %.
    let change =
        |m: f64, other: &str, users: usize| (m / an::mean(&im(other, users).0) - 1.0) * 100.0;
    if has_im {
        let _ = writeln!(
            o,
            "\ninstant messaging, pooled: mean / p90 delivery ms, mean CV; change of the mean vs single and vs mptcp"
        );
    }
    for name in names.iter().filter(|_| has_im) {
        let _ = write!(o, "{name:<w$}");
        for &u in &IM_USERS {
            let (d, sent, cvs) = im(name, u);
            let m = an::mean(&d);
            let (vs_single, vs_mptcp) = (change(m, "single", u), change(m, "mptcp", u));
            let _ = write!(
                o,
                " {:>40}",
                format!(
                    "{u}u {}/{} cv {}{}",
                    f(m * 1e3, 0),
                    f(an::quantile(&d, 0.9) * 1e3, 0),
                    f(an::mean(&cvs), 2),
                    changes(vs_single, vs_mptcp)
                )
            );
            systems[name]["im"][u.to_string()] = json!({
                "mean_s": num(m), "p90_s": num(an::quantile(&d, 0.9)), "cv_mean": num(an::mean(&cvs)),
                "delivered": d.len(), "sent": sent,
                "mean_change_vs_single_pct": num(vs_single), "mean_change_vs_mptcp_pct": num(vs_mptcp),
            });
        }
        o.push('\n');
    }
    // The lower bound, only when every ride has it (else its means would cover other rides).
    let mut bound = serde_json::Map::new();
    let bounded = rides.iter().all(|r| !r.im_bounds.is_empty());
    if has_im && bounded {
        let _ = write!(o, "{:<w$}", "lower bound");
        for &u in &IM_USERS {
            let (mut any, mut single) = (Vec::new(), Vec::new());
            for r in rides {
                let (a, s) = r.im_bound_values(u);
                any.extend(a);
                single.extend(s);
            }
            let m = an::mean(&any);
            let (vs_single, vs_mptcp) = (change(m, "single", u), change(m, "mptcp", u));
            let _ = write!(
                o,
                " {:>40}",
                format!(
                    "{u}u {}/{} [{}]{}",
                    f(m * 1e3, 0),
                    f(an::quantile(&any, 0.9) * 1e3, 0),
                    f(an::mean(&single) * 1e3, 0),
                    changes(vs_single, vs_mptcp)
                )
            );
            bound.insert(
                u.to_string(),
                json!({"mean_s": num(m), "p90_s": num(an::quantile(&any, 0.9)),
                       "single_path_mean_s": num(an::mean(&single)), "messages": any.len(),
                       "mean_change_vs_single_pct": num(vs_single),
                       "mean_change_vs_mptcp_pct": num(vs_mptcp)}),
            );
        }
        let _ = writeln!(
            o,
            "\n  lower bound: each message and its answer over whichever path delivers first, no queueing, no TCP (in brackets: both on one SIM); its change is the most any scheduler could gain"
        );
        let _ = writeln!(
            o,
            "\ninstant messaging, delivery time ÷ lower bound, pooled: median per message"
        );
        for name in &names {
            let _ = write!(o, "{name:<w$}");
            for &u in &IM_USERS {
                let v: Vec<f64> = rides
                    .iter()
                    .filter_map(|r| Some(r.im_over_bound(r.run(name)?, u)))
                    .flatten()
                    .collect();
                let q = an::quantile(&v, 0.5);
                let _ = write!(o, " {:>12}", format!("{u}u {}", f(q, 2)));
                systems[name.as_str()]["im"][u.to_string()]["over_oracle_median"] = num(q);
            }
            o.push('\n');
        }
    } else if has_im {
        let _ = writeln!(
            o,
            "  (no IM lower bound: some rides were read without one and their trip could not be rebuilt)"
        );
    }
    if has_im {
        im_ride_changes(rides, &names, bounded, &mut o, &mut systems, &mut bound);
    }
    let bound = Value::Object(bound);
    let targets = targets_block(rides, &names, &systems, &bound, &mut o);
    let failed: Vec<String> = rides
        .iter()
        .flat_map(|r| {
            r.runs
                .iter()
                .filter(|x| x.error.is_some())
                .map(move |x| format!("{} in ride {}", x.system, r.meta.trip_seed))
        })
        .collect();
    if !failed.is_empty() {
        let _ = writeln!(
            o,
            "\nnot run (see the ride's report): {}",
            failed.join(", ")
        );
    }
    let mut trip_models: Vec<Option<&str>> =
        rides.iter().map(|r| r.meta.trip_model.as_deref()).collect();
    trip_models.sort_unstable();
    trip_models.dedup();
    let j = json!({
        "rides": seeds,
        "route_seed": rides.first().map(|r| r.meta.route_seed),
        "preset": rides.first().map(|r| r.meta.preset.clone()),
        "trip_models": trip_models,
        "mode": rides.first().map(|r| r.meta.mode.clone()),
        "version": rides.first().map(|r| r.meta.version.clone()),
        "systems": systems,
        "targets": targets,
        "im_lower_bound": bound,
        "failed": failed,
    });
    (o, j)
}
