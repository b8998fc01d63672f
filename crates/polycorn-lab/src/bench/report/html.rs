//! report.html: the tables and plots of one bench run.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::bench::analysis::{self as an, Dir, Summary, SystemRun};
use crate::bench::plan::{BULK_SIZES, IM_USERS};

use super::results::*;
use super::svg::*;

/// Render report.html into `dir`; returns its path.
pub fn write_html(dir: &Path, r: &Results) -> Result<PathBuf> {
    let path = dir.join("report.html");
    std::fs::write(&path, html(r)).with_context(|| format!("write {}", path.display()))?;
    Ok(path)
}

/// "Download" or "Upload", for plot titles.
pub(super) fn dir_title(dir: Dir) -> &'static str {
    match dir {
        Dir::Down => "Download",
        Dir::Up => "Upload",
    }
}

/// The report's section on the bulk flows going `dir`: FCT CDFs per size with the oracle,
/// goodput-ratio bars against vanilla and kernel MPTCP, and a table.
pub(super) fn bulk_html(h: &mut String, r: &Results, ok_runs: &[&SystemRun], dir: Dir) {
    // FCT CDFs.
    let _ = write!(h, "<h2>Bulk {}</h2>", dir.noun());
    if dir == Dir::Up {
        h.push_str("<p>Uploads are timed from the passenger's connect to the last byte's arrival at the server; the relay schedules them over the carriers' uplinks, the oracle sends at every uplink's full capacity.</p>");
    }
    h.push_str("<div class=\"plots\">");
    let prefix = match dir {
        Dir::Down => "",
        Dir::Up => "upload-",
    };
    for &size in &BULK_SIZES {
        let series: Vec<LineSeries> = ok_runs
            .iter()
            .map(|run| {
                let v: Vec<f64> = run
                    .flows_of(dir)
                    .iter()
                    .filter(|x| x.ok && x.size == size)
                    .map(|x| x.fct_s)
                    .collect();
                (run.system.clone(), cdf(&v))
            })
            .chain(std::iter::once((
                "oracle".to_string(),
                cdf(&r
                    .planned(dir)
                    .iter()
                    .filter(|b| b.size == size)
                    .filter_map(|b| r.oracle_of(dir).get(&b.idx).copied().flatten())
                    .collect::<Vec<_>>()),
            )))
            .collect();
        h.push_str(&lines(
            &format!("{prefix}fct-cdf-{}", size / 1024),
            &format!("{} FCT CDF, {}", dir_title(dir), size_label(size)),
            "flow completion time, s",
            "share of flows",
            &series,
            false,
        ));
    }
    let groups: Vec<String> = BULK_SIZES.iter().map(|s| size_label(*s)).collect();
    for reference in ["vanilla", "mptcp"] {
        let refr = r.run(reference);
        let series: Vec<BarSeries> = ok_runs
            .iter()
            .filter(|x| x.system != reference)
            .filter_map(|x| refr.map(|refr| (*x, refr)))
            .map(|(run, refr)| {
                (
                    run.system.clone(),
                    BULK_SIZES
                        .iter()
                        .map(|&s| {
                            let v = Summary::of(&an::goodput_ratios(dir, run, refr, s));
                            (v.mean, v.ci_lo, v.ci_hi)
                        })
                        .collect(),
                )
            })
            .collect();
        h.push_str(&bars(
            &format!("{prefix}ratio-vs-{reference}"),
            &if refr.is_some() {
                format!(
                    "{} per-flow goodput ratio vs {reference} (mean, 95% CI)",
                    dir_title(dir)
                )
            } else {
                format!("Goodput ratio vs {reference}: {reference} was not run")
            },
            "goodput ratio",
            &groups,
            &series,
            Some(1.0),
        ));
    }
    if dir == Dir::Down {
        budget_plot(h, ok_runs);
    }
    h.push_str("</div>");
    // Bulk table.
    h.push_str("<table><tr><th>system</th><th>size</th><th>completed</th><th>goodput median Mbit/s</th><th>FCT mean s</th><th>FCT median s</th><th>FCT p90 s</th><th>FCT÷oracle median</th><th>ratio vs vanilla mean [95% CI] / median / p10 / p90</th><th>ratio vs mptcp mean [95% CI] / median / p10 / p90</th></tr>");
    for run in ok_runs {
        for &s in &BULK_SIZES {
            let ok: Vec<&an::FlowResult> = run
                .flows_of(dir)
                .iter()
                .filter(|x| x.ok && x.size == s)
                .collect();
            let gp: Vec<f64> = ok.iter().map(|x| x.goodput_mbps()).collect();
            let fct = Summary::of(&ok.iter().map(|x| x.fct_s).collect::<Vec<_>>());
            let ratio = |name: &str| {
                r.run(name).map_or("-".to_string(), |refr| {
                    let v = Summary::of(&an::goodput_ratios(dir, run, refr, s));
                    format!(
                        "{} [{}, {}] / {} / {} / {} (n={})",
                        f(v.mean, 2),
                        f(v.ci_lo, 2),
                        f(v.ci_hi, 2),
                        f(v.median, 2),
                        f(v.p10, 2),
                        f(v.p90, 2),
                        v.n
                    )
                })
            };
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}/{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&run.system),
                size_label(s),
                ok.len(),
                run.flows_of(dir).iter().filter(|x| x.size == s).count(),
                f(an::quantile(&gp, 0.5), 2),
                f(fct.mean, 2),
                f(fct.median, 2),
                f(fct.p90, 2),
                f(an::quantile(&r.fct_over_oracle(dir, run, s), 0.5), 2),
                ratio("vanilla"),
                ratio("mptcp"),
            );
        }
    }
    h.push_str("</table>");
}

/// The downloads' budgets as stacked bars: per system and size, the mean of each part, the
/// mean FCT − oracle marked across each bar.
fn budget_plot(h: &mut String, ok_runs: &[&SystemRun]) {
    let (mut groups, mut values, mut totals) = (Vec::new(), Vec::new(), Vec::new());
    for run in ok_runs {
        for &s in &BULK_SIZES {
            if let Some((n, mean, _)) = budget_stats(run, s) {
                groups.push(format!("{} {} ({n})", run.system, size_label(s)));
                totals.push(mean[0]);
                values.push(mean[1..].to_vec());
            }
        }
    }
    let title = if groups.is_empty() {
        "Download budget: not recorded for these runs".to_string()
    } else {
        "Download budget: where FCT − oracle goes (mean per flow; line: FCT − oracle)".to_string()
    };
    h.push_str(&stacked(
        "budget",
        &title,
        "ms",
        &groups,
        &polycorn_sim::budget::PARTS,
        &values,
        &totals,
    ));
}

/// The whole report as one HTML document.
pub fn html(r: &Results) -> String {
    let m = &r.meta;
    let ok_runs: Vec<&SystemRun> = r.runs.iter().filter(|x| x.error.is_none()).collect();
    let mut h = String::from(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>polycorn bench</title><style>body{font-family:sans-serif;max-width:1200px;margin:1em auto;padding:0 1em;color:#222}table{border-collapse:collapse;font-size:12px;margin:.5em 0 1.2em}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#f4f4f4}td:first-child{text-align:left}.plots{display:flex;flex-wrap:wrap;gap:8px}.note{background:#fff8e1;border-left:4px solid #f0b400;padding:.4em .8em}pre{background:#f6f6f6;padding:.5em;overflow-x:auto;font-size:11px}</style></head><body>",
    );
    let queue = m
        .queue_bytes
        .map_or("per carrier (trip model)".to_string(), |q| format!("{q} B"));
    if m.preset == TRACES_PRESET {
        let _ = write!(
            h,
            "<h1>polycorn bench — {} mode</h1><p>polycorn {} · kernel {} · <b>recorded traces</b> ({}), ride {}, workload seed {} · window {:.0}–{:.0} s of the traces ({} paths: {}) · one-way delay {} · queue {} · {} · started {}</p>",
            esc(&m.mode), esc(&m.version), esc(&m.kernel), esc(m.trip_model.as_deref().unwrap_or("not recorded")), m.trip_seed, m.seed,
            m.from_s, m.from_s + r.plan.end_s, m.carriers.len(), esc(&m.carriers.join(", ")),
            esc(&if m.path_delays.is_empty() { "not recorded".to_string() } else { m.path_delays.join("; ") }),
            esc(&queue),
            esc(&if m.path_outages.is_empty() { "no outages, no handovers".to_string() } else { format!("outages {}", m.path_outages.join("; ")) }),
            esc(&m.started)
        );
    } else {
        let _ = write!(
            h,
            "<h1>polycorn bench — {} mode</h1><p>polycorn {} · kernel {} · preset <b>{}</b> (trip model {}), route seed {}, trip seed {}, workload seed {} · trip window {:.0}–{:.0} s ({} carriers: {}) · queue {} · handover interruptions: {} (packets {}) · started {}</p>",
            esc(&m.mode), esc(&m.version), esc(&m.kernel), esc(&m.preset), esc(m.trip_model.as_deref().unwrap_or("not recorded")), m.route_seed, m.trip_seed, m.seed,
            m.from_s, m.from_s + r.plan.end_s, m.carriers.len(), esc(&m.carriers.join(", ")), esc(&queue), esc(&m.interruptions), esc(&m.handover_interruption), esc(&m.started)
        );
    }
    let _ = write!(
        h,
        "<p class=\"note\"><b>Handover prediction:</b> {}. Every system replayed the same emulated trip from the same start; bulk flows and IM messages started at the same times after the emulator started. Same preset and seeds give the same emulated conditions.</p>",
        esc(&m.prediction)
    );
    let failed: Vec<&SystemRun> = r.runs.iter().filter(|x| x.error.is_some()).collect();
    if !failed.is_empty() {
        h.push_str("<p class=\"note\"><b>Systems that could not be run:</b> ");
        for x in failed {
            let _ = write!(
                h,
                "{}: {}; ",
                esc(&x.system),
                esc(x.error.as_deref().unwrap_or(""))
            );
        }
        h.push_str("</p>");
    }
    h.push_str("<h2>Trip</h2><div class=\"plots\">");
    h.push_str(&trip_plot(r));
    h.push_str("</div>");
    bulk_html(&mut h, r, &ok_runs, Dir::Down);
    if !r.plan.uploads.is_empty() {
        bulk_html(&mut h, r, &ok_runs, Dir::Up);
    }
    // IM.
    h.push_str("<h2>Instant messaging</h2><div class=\"plots\">");
    let mut im_series: Vec<LineSeries> = ok_runs
        .iter()
        .map(|run| {
            (
                run.system.clone(),
                IM_USERS
                    .iter()
                    .map(|&u| (u as f64, an::im_stats(run, u).mean_s * 1000.0))
                    .collect(),
            )
        })
        .collect();
    let has_bounds = !r.im_bounds.is_empty();
    if has_bounds {
        im_series.push((
            "lower bound".to_string(),
            IM_USERS
                .iter()
                .map(|&u| (u as f64, r.im_bound_stats(u).any_mean_s * 1000.0))
                .collect(),
        ));
    }
    h.push_str(&lines(
        "im-delivery",
        "IM mean delivery time vs users",
        "users",
        "mean delivery time, ms",
        &im_series,
        false,
    ));
    let mut im_p90: Vec<LineSeries> = ok_runs
        .iter()
        .map(|run| {
            (
                run.system.clone(),
                IM_USERS
                    .iter()
                    .map(|&u| (u as f64, an::im_stats(run, u).p90_s * 1000.0))
                    .collect(),
            )
        })
        .collect();
    if has_bounds {
        im_p90.push((
            "lower bound".to_string(),
            IM_USERS
                .iter()
                .map(|&u| (u as f64, r.im_bound_stats(u).any_p90_s * 1000.0))
                .collect(),
        ));
    }
    h.push_str(&lines(
        "im-delivery-p90",
        "IM p90 delivery time vs users",
        "users",
        "p90 delivery time, ms",
        &im_p90,
        false,
    ));
    h.push_str("</div>");
    if has_bounds {
        h.push_str("<p>Lower bound: each message and its answer cross whichever emulated path delivers them first (the trip's delivery opportunities, delays and outages; no queueing behind other traffic, no TCP) — no scheduler can beat it. Delivery ÷ bound is the median over a system's answered messages; <em>one SIM</em> is the bound when message and answer stay on one path, averaged over the SIMs (a perfect single-path connection).</p>");
    }
    h.push_str("<table><tr><th>system</th><th>users</th><th>answers</th><th>mean ms</th><th>p90 ms</th><th>CV across users</th><th>delivery ÷ bound</th></tr>");
    for run in &ok_runs {
        for &u in &IM_USERS {
            let s = an::im_stats(run, u);
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{u}</td><td>{}/{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&run.system),
                s.delivered,
                s.sent,
                f(s.mean_s * 1000.0, 1),
                f(s.p90_s * 1000.0, 1),
                f(s.cv, 3),
                f(an::quantile(&r.im_over_bound(run, u), 0.5), 2)
            );
        }
    }
    if has_bounds {
        for &u in &IM_USERS {
            let b = r.im_bound_stats(u);
            let _ = write!(
                h,
                "<tr><td>lower bound</td><td>{u}</td><td>{}</td><td>{}</td><td>{}</td><td>-</td><td>one SIM: {} ms</td></tr>",
                b.n,
                f(b.any_mean_s * 1000.0, 1),
                f(b.any_p90_s * 1000.0, 1),
                f(b.single_mean_s * 1000.0, 1)
            );
        }
    }
    h.push_str("</table>");
    // Stage views.
    let _ = write!(
        h,
        "<h2>Per-stage views (Fig. 11)</h2><p>Goodput of the system's bulk downloads in the 2 s after each of the {} failed handovers in the bulk phase (only windows with a flow running throughout); tail delay = time from 90% to 100% of a flow's bytes; out-of-order delay = mean wait, at the relay, of the downlink segments that arrived ahead of a gap until they could be delivered in order (kernel MPTCP and single path: not measured); worse path = {} (lower mean capacity in the bulk phase), share of all emulated downlink bytes it carried.</p>",
        r.hofs_s.len(),
        esc(&r.meta.carriers.get(r.worse_path).cloned().unwrap_or_default())
    );
    let hof_series: Vec<BarSeries> = ok_runs
        .iter()
        .map(|run| {
            let (g, t) = r.stage_views(Dir::Down, run);
            let g = Summary::of(&g);
            (
                run.system.clone(),
                vec![
                    (g.mean, g.ci_lo, g.ci_hi),
                    (an::mean(&t), f64::NAN, f64::NAN),
                    (an::quantile(&t, 0.95), f64::NAN, f64::NAN),
                    (an::path_share(run, r.worse_path) * 10.0, f64::NAN, f64::NAN),
                ],
            )
        })
        .collect();
    h.push_str("<div class=\"plots\">");
    h.push_str(&bars(
        "stage-views",
        "Fig. 11 views",
        "value",
        &[
            "goodput after HOF, Mbit/s".into(),
            "tail delay mean, s".into(),
            "tail delay p95, s".into(),
            "worse-path share ×10".into(),
        ],
        &hof_series,
        None,
    ));
    h.push_str("</div><table><tr><th>system</th><th>goodput after HOF mean / median Mbit/s (windows)</th><th>tail delay mean / p95 s</th><th>out-of-order delay</th><th>worse-path share</th></tr>");
    for run in &ok_runs {
        let (g, t) = r.stage_views(Dir::Down, run);
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{} / {} ({})</td><td>{} / {}</td><td>{}</td><td>{}%</td></tr>",
            esc(&run.system),
            f(an::mean(&g), 2),
            f(an::quantile(&g, 0.5), 2),
            g.len(),
            f(an::mean(&t), 3),
            f(an::quantile(&t, 0.95), 3),
            an::out_of_order_delay_s(run).map_or("n/a".into(), |d| format!("{} ms", f(d * 1e3, 1))),
            f(100.0 * an::path_share(run, r.worse_path), 1)
        );
    }
    h.push_str("</table><h2>Scheduler activity</h2><p>From the relay's and proxy's metrics at the end of each run: decisions in which each stage moved a path (proxy = downlink, relay = uplink), reinjected and redundant megabytes, subflow reconnects.</p><table><tr><th>system</th><th>activity</th></tr>");
    for run in r
        .runs
        .iter()
        .filter(|x| x.mode == "polycorn" && !x.counters.is_empty())
    {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td></tr>",
            esc(&run.system),
            esc(&an::activity_line(run))
        );
    }
    h.push_str("</table><h2>Systems</h2><table><tr><th>system</th><th>relay mode</th><th>scheduler</th><th>ready after s</th><th>paths not up at the start</th></tr>");
    for run in &r.runs {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&run.system),
            esc(&run.mode),
            esc(&polycorn_sched::spec::label(
                &run.spec,
                run.pipeline.as_deref()
            )),
            f(run.ready_s, 2),
            esc(&run.late_paths.join(", "))
        );
    }
    let _ = write!(
        h,
        "</table><h2>Terminal summary</h2><pre>{}</pre></body></html>",
        esc(&table(r))
    );
    h
}
