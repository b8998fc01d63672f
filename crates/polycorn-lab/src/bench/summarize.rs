//! Compact results and the pages generated from them (`polycorn bench summarize`).
//!
//! Every bench ride writes `summary.json` beside its `results.json`: the same metadata, plan
//! and per-system summaries, without the raw samples (per-flow rows, 100 ms bins, IM messages,
//! the IM oracle, 1 s capacities, counters), a few KB instead of hundreds. `bench pool` and a
//! multi-ride bench write `summary.json` beside `pooled.json` too (the pooled summaries with
//! the build, command and date). Copies of these files are committed under `results/` at the
//! repository root as `NAME.summary.json`; `polycorn bench summarize` turns them into the
//! results pages (`docs/src/results/bench.md`, and `pooled.md` when a pooled summary is there)
//! and the README's results table between `<!-- results:begin -->` and `<!-- results:end -->`.
//! Pages and table are never edited by hand: `--check` fails when they differ from what the
//! committed summaries give.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

/// The compact file a ride (or a pool) writes beside `results.json` (or `pooled.json`).
pub const SUMMARY_FILE: &str = "summary.json";
/// How committed compact files are named under `results/`.
pub const SUMMARY_SUFFIX: &str = ".summary.json";
/// The line before the README's results table.
pub const README_BEGIN: &str = "<!-- results:begin -->";
/// The line after it.
pub const README_END: &str = "<!-- results:end -->";
/// The command that writes the pages, as the pages and the staleness messages name it.
pub const COMMAND: &str = "polycorn bench summarize";
/// Most rows of the README's table.
const README_ROWS: usize = 8;

/// Options of `polycorn bench summarize`.
#[derive(clap::Args, Debug, Clone)]
pub struct SummarizeArgs {
    /// Directory of the committed compact results (`*.summary.json`).
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// Directory the results pages are written to.
    #[arg(long, default_value = "docs/src/results")]
    pub docs: PathBuf,
    /// The README whose results table (between `<!-- results:begin -->` and
    /// `<!-- results:end -->`) is replaced.
    #[arg(long, default_value = "README.md")]
    pub readme: PathBuf,
    /// Write nothing; fail, naming each file, when a page or the README's table differs from
    /// what the summaries give.
    #[arg(long)]
    pub check: bool,
}

/// A ride's `results.json` without its raw samples: what `summary.json` holds.
pub fn compact(results: &Value) -> Value {
    let mut v = results.clone();
    let obj = v.as_object_mut().expect("results.json is an object");
    obj.insert("kind".into(), json!("ride"));
    if let Some(plan) = obj.get_mut("plan").and_then(Value::as_object_mut) {
        plan.remove("im_oracle");
    }
    if let Some(trip) = obj.get_mut("trip").and_then(Value::as_object_mut) {
        trip.remove("capacity_mbps_1s");
        if let Some(Value::Array(h)) = trip.remove("handovers") {
            let failed = h.iter().filter(|x| x["failed"] == json!(true)).count();
            trip.insert("handovers_total".into(), json!(h.len()));
            trip.insert("handovers_failed".into(), json!(failed));
        }
    }
    if let Some(Value::Array(runs)) = obj.get_mut("runs") {
        for r in runs.iter_mut().filter_map(Value::as_object_mut) {
            for raw in ["flows", "uploads", "im_messages", "counters"] {
                r.remove(raw);
            }
        }
    }
    v
}

/// A pool's `pooled.json` with what names it: the build and date of its rides, the command.
pub fn compact_pooled(pooled: &Value, build: Option<&str>, started: &str, command: &str) -> Value {
    let mut v = pooled.clone();
    if let Some(o) = v.as_object_mut() {
        o.insert("kind".into(), json!("pool"));
        o.insert("build".into(), json!(build));
        o.insert("started".into(), json!(started));
        o.insert("command".into(), json!(command));
    }
    v
}

/// Write `summary` as `dir/summary.json`.
pub fn write_summary(dir: &Path, summary: &Value) -> Result<()> {
    let path = dir.join(SUMMARY_FILE);
    std::fs::write(&path, serde_json::to_string_pretty(summary)? + "\n")
        .with_context(|| format!("write {}", path.display()))
}

/// The committed summaries under `dir`, by file name (without `.summary.json`), sorted by it.
pub fn load_summaries(dir: &Path) -> Result<Vec<(String, Value)>> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).with_context(|| format!("read {}", dir.display())),
    };
    for e in entries {
        let path = e.with_context(|| format!("read {}", dir.display()))?.path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(SUMMARY_SUFFIX))
        else {
            continue;
        };
        let text =
            std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
        let v: Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
        match v["kind"].as_str() {
            Some("ride" | "pool" | "sweeps") => {}
            _ => bail!(
                "{}: `kind` is not \"ride\", \"pool\" or \"sweeps\" (not a bench or sweep summary)",
                path.display()
            ),
        }
        out.push((name.to_string(), v));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Every generated file: each results page under `docs` and the README with its table
/// replaced, as (path, content).
pub fn generate(
    summaries: &[(String, Value)],
    docs: &Path,
    readme_path: &Path,
    readme: &str,
) -> Result<Vec<(PathBuf, String)>> {
    let rides: Vec<&(String, Value)> = summaries.iter().filter(|s| s.1["kind"] == "ride").collect();
    let pools: Vec<&(String, Value)> = summaries.iter().filter(|s| s.1["kind"] == "pool").collect();
    let mut out = vec![(docs.join("bench.md"), bench_page(&rides)?)];
    if !pools.is_empty() {
        out.push((docs.join("pooled.md"), pooled_page(&pools)?));
    }
    // The newest sweeps summary (by name) renders the sweeps page.
    if let Some((_, s)) = summaries.iter().rev().find(|s| s.1["kind"] == "sweeps") {
        let mut page = header(
            "edit or add results/*.summary.json (written by `polycorn sim sweep`)",
            "file",
        );
        page.push_str(&super::sim::sweep::page(s)?);
        out.push((docs.join("sweeps.md"), page));
    }
    let block = readme_block(&rides, &pools)?;
    out.push((
        readme_path.to_path_buf(),
        splice_readme(readme, &block, readme_path)?,
    ));
    Ok(out)
}

/// `polycorn bench summarize`.
pub fn run(args: &SummarizeArgs) -> Result<()> {
    let summaries = load_summaries(&args.results)?;
    let readme = std::fs::read_to_string(&args.readme)
        .with_context(|| format!("read {}", args.readme.display()))?;
    let files = generate(&summaries, &args.docs, &args.readme, &readme)?;
    if args.check {
        let stale = stale_files(&files);
        if !stale.is_empty() {
            bail!(
                "{} stale with respect to {}: regenerate with `{COMMAND}`",
                stale
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                args.results.display()
            );
        }
        return Ok(());
    }
    std::fs::create_dir_all(&args.docs)
        .with_context(|| format!("create {}", args.docs.display()))?;
    for (path, text) in &files {
        std::fs::write(path, text).with_context(|| format!("write {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// The generated files whose content on disk differs from `files` (or that are missing).
pub fn stale_files(files: &[(PathBuf, String)]) -> Vec<PathBuf> {
    files
        .iter()
        .filter(|(p, text)| std::fs::read_to_string(p).ok().as_deref() != Some(text.as_str()))
        .map(|(p, _)| p.clone())
        .collect()
}

/// `readme` with the lines between the markers replaced by `block`.
pub fn splice_readme(readme: &str, block: &str, path: &Path) -> Result<String> {
    let lines: Vec<&str> = readme.lines().collect();
    let find = |m: &str| lines.iter().position(|l| l.trim() == m);
    let (Some(b), Some(e)) = (find(README_BEGIN), find(README_END)) else {
        bail!(
            "{}: no `{README_BEGIN}` … `{README_END}` lines around the results table",
            path.display()
        );
    };
    if e < b {
        bail!(
            "{}: `{README_END}` comes before `{README_BEGIN}`",
            path.display()
        );
    }
    let mut out = String::new();
    for l in &lines[..=b] {
        out.push_str(l);
        out.push('\n');
    }
    out.push_str(block);
    for l in &lines[e..] {
        out.push_str(l);
        out.push('\n');
    }
    Ok(out)
}

fn header(what: &str, this: &str) -> String {
    format!("<!-- generated by: {COMMAND} from results/*{SUMMARY_SUFFIX}; {what}, not this {this} -->\n")
}

/// `x` with `prec` decimals, `–` when absent or not a number.
fn n(x: &Value, prec: usize) -> String {
    match x.as_f64() {
        Some(v) if v.is_finite() => format!("{v:.prec$}"),
        _ => "–".into(),
    }
}

/// Fewest samples for which a table shows the 95% interval of the mean; with fewer, the
/// t-interval spans far more than the data and the cell gives the count instead.
pub const MIN_CI_SAMPLES: u64 = 5;

/// A summary (`{median, ci95: [lo, hi], n}`) as `median [lo–hi]`, or `median (n=N)` when it
/// has fewer than [`MIN_CI_SAMPLES`] samples.
fn median_ci(s: &Value, prec: usize) -> String {
    match s["n"].as_u64() {
        Some(0) => return "–".into(),
        Some(k) if k < MIN_CI_SAMPLES => return format!("{} (n={k})", n(&s["median"], prec)),
        _ => {}
    }
    let ci = match (&s["ci95"][0], &s["ci95"][1]) {
        (lo, hi) if lo.is_number() && hi.is_number() => {
            format!(" [{}–{}]", n(lo, prec), n(hi, prec))
        }
        _ => String::new(),
    };
    format!("{}{ci}", n(&s["median"], prec))
}

fn size_label(bytes: &str) -> String {
    match bytes.parse::<u64>() {
        Ok(b) if b >= 1 << 20 => format!("{} MB", b >> 20),
        Ok(b) => format!("{} KB", b >> 10),
        Err(_) => bytes.to_string(),
    }
}

/// The date of an RFC 3339-ish time (`2026-12-02T09:40:00Z` → `2026-12-02`).
fn date(started: &Value) -> String {
    started
        .as_str()
        .map_or("date not recorded".into(), |s| s.chars().take(10).collect())
}

fn str_or<'a>(v: &'a Value, absent: &'a str) -> &'a str {
    v.as_str().filter(|s| !s.is_empty()).unwrap_or(absent)
}

/// The caption line of a ride's tables: its command, build and date.
pub fn caption(meta: &Value) -> String {
    format!(
        "`{}` · build `{}` · {}",
        str_or(&meta["command"], "command not recorded"),
        str_or(&meta["build"], str_or(&meta["version"], "not recorded")),
        date(&meta["started"])
    )
}

fn ok_runs(summary: &Value) -> impl Iterator<Item = &Value> {
    summary["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["error"].is_null())
}

/// `docs/src/results/bench.md`: every committed ride.
pub fn bench_page(rides: &[&(String, Value)]) -> Result<String> {
    let mut o = header(
        "edit or add results/*.summary.json (written by `polycorn bench`)",
        "file",
    );
    o.push_str("# Bench results\n\n");
    o.push_str(
        "Each section is one `polycorn bench` ride: every system on the same emulated trip. \
         FCT is a download's flow completion time; FCT ÷ oracle divides it by the time the \
         trip's capacity allowed (1 is the best possible). Cells show the median and, in \
         brackets, the 95% confidence interval of the mean (with fewer than five flows, their \
         count instead). IM latency is the time from a \
         message's send to its answer.\n",
    );
    if rides.is_empty() {
        o.push_str("\nNo ride is committed under `results/`.\n");
    }
    for (name, s) in rides {
        ride_section(&mut o, name, s).with_context(|| format!("results/{name}{SUMMARY_SUFFIX}"))?;
    }
    Ok(o)
}

fn ride_section(o: &mut String, name: &str, s: &Value) -> Result<()> {
    let m = &s["meta"];
    let _ = writeln!(o, "\n## {name}\n");
    let _ =
        writeln!(
        o,
        "Trip preset `{}`, route seed {}, trip seed {}, workload seed {}, {} mode; window of {} s \
         from {} s; carriers {}; handover prediction: {}. In the window: {} handovers, {} failed \
         ({} in the bulk phase). Kernel {}.\n",
        str_or(&m["preset"], "?"),
        m["route_seed"],
        m["trip_seed"],
        m["workload_seed"],
        str_or(&m["mode"], "?"),
        n(&m["window_s"], 0),
        n(&m["window_from_s"], 0),
        m["carriers"]
            .as_array()
            .map(|c| c.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))
            .unwrap_or_default(),
        str_or(&m["handover_prediction"], "?"),
        s["trip"]["handovers_total"],
        s["trip"]["handovers_failed"],
        s["trip"]["failed_handovers_in_bulk_phase_s"]
            .as_array()
            .map_or(0, Vec::len),
        str_or(&m["kernel"], "?"),
    );
    let cap = caption(m);
    let failed: Vec<String> = s["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| !r["error"].is_null())
        .map(|r| {
            format!(
                "`{}` ({})",
                str_or(&r["system"], "?"),
                str_or(&r["error"], "?")
            )
        })
        .collect();
    if !failed.is_empty() {
        let _ = writeln!(o, "Failed systems: {}.\n", failed.join("; "));
    }

    // A ride of one workload shows no empty table for the other.
    let planned = |key: &str| {
        ok_runs(s).any(|r| {
            r[key]
                .as_object()
                .into_iter()
                .flatten()
                .any(|(_, b)| b["flows"].as_u64().is_some_and(|n| n > 0))
        })
    };
    let uploads = planned("upload");
    if planned("bulk") || !uploads {
        ride_flows_table(o, s, "bulk", "Bulk downloads", &cap);
    }
    if uploads {
        ride_flows_table(o, s, "upload", "Bulk uploads", &cap);
    }

    let budgets: Vec<(&str, &String, &Value)> = ok_runs(s)
        .flat_map(|r| {
            let sys = str_or(&r["system"], "?");
            r["bulk"]
                .as_object()
                .into_iter()
                .flatten()
                .map(move |(size, b)| (sys, size, &b["budget"]))
        })
        .collect();
    budget_section(o, &cap, &budgets);

    let refs: Vec<&str> = ["vanilla", "mptcp"]
        .into_iter()
        .filter(|r| {
            ok_runs(s).any(|x| {
                x["bulk"].as_object().is_some_and(|b| {
                    b.values()
                        .any(|v| v.get(format!("goodput_ratio_vs_{r}")).is_some())
                })
            })
        })
        .collect();
    for reference in refs {
        let _ = writeln!(
            o,
            "\n### Goodput ÷ {reference}, per flow\n\n{cap}\n\nGeometric mean of the per-flow \
             ratios [95% interval] (flows).\n"
        );
        o.push_str("| system | 256 KB | 1 MB | 4 MB |\n| --- | --- | --- | --- |\n");
        for r in ok_runs(s).filter(|r| r["system"] != reference) {
            let cell = |size: &str| {
                let g = &r["bulk"][size][format!("goodput_ratio_vs_{reference}")];
                if g.is_null() || g["n"].as_u64() == Some(0) {
                    return "–".to_string();
                }
                format!(
                    "{} [{}–{}] ({})",
                    n(&g["geomean"], 2),
                    n(&g["geomean_ci95"][0], 2),
                    n(&g["geomean_ci95"][1], 2),
                    g["n"]
                )
            };
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} |",
                str_or(&r["system"], "?"),
                cell("262144"),
                cell("1048576"),
                cell("4194304")
            );
        }
    }

    let has_im = ok_runs(s).any(|r| {
        r["im"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["sent"].as_u64() > Some(0)))
    });
    if has_im {
        let _ = writeln!(o, "\n### IM latency\n\n{cap}\n");
        o.push_str(
            "| system | users | answered | mean, s | p90, s | CV | ÷ lower bound, median |\n\
             | --- | --- | --- | --- | --- | --- | --- |\n",
        );
        for r in ok_runs(s) {
            for x in r["im"].as_array().into_iter().flatten() {
                let _ = writeln!(
                    o,
                    "| {} | {} | {}/{} | {} | {} | {} | {} |",
                    str_or(&r["system"], "?"),
                    x["users"],
                    x["delivered"],
                    x["sent"],
                    n(&x["mean_s"], 3),
                    n(&x["p90_s"], 3),
                    n(&x["cv"], 2),
                    n(&x["over_oracle_median"], 2),
                );
            }
        }
        let bounds: Vec<String> = s["plan"]["im"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|b| {
                format!(
                    "{} users {} s (one SIM: {} s)",
                    b["users"],
                    n(&b["oracle_mean_s"], 3),
                    n(&b["oracle_single_path_mean_s"], 3)
                )
            })
            .collect();
        if !bounds.is_empty() {
            let _ = writeln!(
                o,
                "\nMean lower bound of an exchange over any path: {}.",
                bounds.join("; ")
            );
        }
    }

    let _ = writeln!(o, "\n### Around failed handovers\n\n{cap}\n");
    o.push_str(
        "| system | goodput after a failed handover, Mbit/s | tail delay mean / p95, s | \
         out-of-order delay, s | worse path's share |\n| --- | --- | --- | --- | --- |\n",
    );
    for r in ok_runs(s) {
        let v = &r["stage_views"];
        let _ = writeln!(
            o,
            "| {} | {} | {} / {} | {} | {} |",
            str_or(&r["system"], "?"),
            median_ci(&v["goodput_after_hof_mbps"], 1),
            n(&v["tail_delay_s"]["mean"], 3),
            n(&v["tail_delay_s"]["p95"], 3),
            n(&v["out_of_order_delay_s"], 3),
            n(&v["worse_path_share"], 2),
        );
    }
    Ok(())
}

/// One ride's flows of `key` (`bulk`, `upload`) under `title`: per system and size the flows
/// completed, the FCT, FCT ÷ oracle and goodput.
fn ride_flows_table(o: &mut String, s: &Value, key: &str, title: &str, cap: &str) {
    if !o.ends_with("\n\n") {
        o.push('\n');
    }
    let _ = writeln!(o, "### {title}\n\n{cap}\n");
    o.push_str("| system | size | completed | FCT, s | FCT ÷ oracle | goodput, Mbit/s |\n");
    o.push_str("| --- | --- | --- | --- | --- | --- |\n");
    for r in ok_runs(s) {
        for (size, b) in by_size(&r[key]) {
            let _ = writeln!(
                o,
                "| {} | {} | {}/{} | {} | {} | {} |",
                str_or(&r["system"], "?"),
                size_label(size),
                b["completed"],
                b["flows"],
                median_ci(&b["fct_s"], 2),
                median_ci(&b["fct_over_oracle"], 2),
                median_ci(&b["goodput_mbps"], 1),
            );
        }
    }
}

/// The downloads' time budgets (`### Time budget of downloads`), if any row has one: per
/// system and size, the mean FCT − oracle and the mean of each part, ms. `rows` are (system,
/// size in bytes, the size's `budget` summary).
fn budget_section(o: &mut String, cap: &str, rows: &[(&str, &String, &Value)]) {
    let rows: Vec<_> = rows
        .iter()
        .filter(|(_, _, b)| b["n"].as_u64().is_some_and(|n| n > 0))
        .collect();
    if rows.is_empty() {
        return;
    }
    // Systems in their order, sizes ascending within each.
    let first = |sys: &str| rows.iter().position(|r| r.0 == sys).unwrap_or(usize::MAX);
    let mut keyed: Vec<_> = rows
        .iter()
        .map(|r| ((first(r.0), r.1.parse::<u64>().unwrap_or(u64::MAX)), *r))
        .collect();
    keyed.sort_by_key(|(k, _)| *k);
    let rows: Vec<_> = keyed.into_iter().map(|(_, r)| r).collect();
    let _ = writeln!(
        o,
        "\n### Time budget of downloads\n\n{cap}\n\nMean ms per download of FCT − oracle and its \
         parts ([what each part is](../lab/simulator.md#the-time-budget-of-a-download)).\n"
    );
    o.push_str(
        "| system | size | downloads | FCT − oracle | set-up | window-bound | queueing | \
         reordering | stalls | rest |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for (sys, size, b) in rows {
        let m = &b["mean"];
        let _ = writeln!(
            o,
            "| {sys} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            size_label(size),
            b["n"],
            n(&m["excess_ms"], 0),
            n(&m["setup_ms"], 0),
            n(&m["window_ms"], 0),
            n(&m["queueing_ms"], 0),
            n(&m["reorder_ms"], 0),
            n(&m["stalls_ms"], 0),
            n(&m["rest_ms"], 0),
        );
    }
}

/// `docs/src/results/pooled.md`: every committed pool.
pub fn pooled_page(pools: &[&(String, Value)]) -> Result<String> {
    let mut o = header(
        "edit or add results/*.summary.json (written by `polycorn bench pool`)",
        "file",
    );
    o.push_str("# Pooled bench results\n\n");
    o.push_str(
        "Each section pools the rides of one or more `polycorn bench` runs. Cells: median \
         [95% confidence interval of the mean] over the pooled flows, or (n=flows) when fewer than five.\n",
    );
    for (name, p) in pools {
        let _ = writeln!(
            o,
            "\n## {name}\n\nRides (trip seeds) {}, route seed {}, preset `{}`, {} mode.",
            p["rides"],
            p["route_seed"],
            str_or(&p["preset"], "?"),
            str_or(&p["mode"], "?"),
        );
        let systems: Vec<(&String, &Value)> =
            p["systems"].as_object().into_iter().flatten().collect();
        // A pool of one workload shows no empty table for the other.
        let measured = |dir: &str| {
            systems.iter().any(|(_, v)| {
                v[dir]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .any(|(_, b)| b["fct_over_oracle"]["n"].as_u64().is_some_and(|n| n > 0))
            })
        };
        let (downloads, uploads) = (measured("bulk"), measured("upload"));
        if downloads || !uploads {
            let _ = writeln!(o, "\n### Bulk downloads\n\n{}\n", pool_caption(p));
            o.push_str("| system | size | FCT ÷ oracle |\n| --- | --- | --- |\n");
            for (sys, v) in &systems {
                for (size, b) in by_size(&v["bulk"]) {
                    let _ = writeln!(
                        o,
                        "| {sys} | {} | {} |",
                        size_label(size),
                        median_ci(&b["fct_over_oracle"], 2)
                    );
                }
            }
        }
        if uploads {
            upload_section(&mut o, p, &systems);
        }
        let budgets: Vec<(&str, &String, &Value)> = systems
            .iter()
            .flat_map(|(sys, v)| {
                v["bulk"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(move |(size, b)| (sys.as_str(), size, &b["budget"]))
            })
            .collect();
        budget_section(&mut o, &pool_caption(p), &budgets);
    }
    Ok(o)
}

/// The sizes of one system's `bulk` or `upload` object, ascending.
fn by_size(per_size: &Value) -> Vec<(&String, &Value)> {
    let mut sizes: Vec<(&String, &Value)> = per_size.as_object().into_iter().flatten().collect();
    sizes.sort_by_key(|(k, _)| k.parse::<u64>().unwrap_or(u64::MAX));
    sizes
}

/// A pool's uploads: per system and size the FCT ÷ oracle and, for each reference the pool
/// compared against (kernel MPTCP, vanilla), the geometric mean of the per-flow goodput ratios
/// with its 95% interval over rides.
fn upload_section(o: &mut String, p: &Value, systems: &[(&String, &Value)]) {
    let references: Vec<&str> = ["mptcp", "vanilla"]
        .into_iter()
        .filter(|r| {
            let key = format!("goodput_ratio_vs_{r}");
            systems.iter().any(|(_, v)| {
                v["upload"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .any(|(_, b)| b[&key].is_object())
            })
        })
        .collect();
    let _ = writeln!(o, "\n### Bulk uploads\n\n{}\n", pool_caption(p));
    if !references.is_empty() {
        let _ = writeln!(
            o,
            "Goodput ÷ a reference: geometric mean of the per-flow ratios [95% interval over \
             rides].\n"
        );
    }
    o.push_str("| system | size | FCT ÷ oracle |");
    for r in &references {
        let _ = write!(o, " goodput ÷ {r} |");
    }
    o.push_str("\n| --- | --- | --- |");
    o.push_str(&" --- |".repeat(references.len()));
    o.push('\n');
    for (sys, v) in systems {
        for (size, b) in by_size(&v["upload"]) {
            let _ = write!(
                o,
                "| {sys} | {} | {} |",
                size_label(size),
                median_ci(&b["fct_over_oracle"], 2)
            );
            for r in &references {
                let g = &b[format!("goodput_ratio_vs_{r}")];
                let cell = if g["geomean"].is_number() {
                    format!(
                        "{} [{}–{}]",
                        n(&g["geomean"], 2),
                        n(&g["geomean_ride_ci95"][0], 2),
                        n(&g["geomean_ride_ci95"][1], 2)
                    )
                } else {
                    "–".into()
                };
                let _ = write!(o, " {cell} |");
            }
            o.push('\n');
        }
    }
}

fn pool_caption(p: &Value) -> String {
    format!(
        "`{}` · build `{}` · {}",
        str_or(&p["command"], "command not recorded"),
        str_or(&p["build"], str_or(&p["version"], "not recorded")),
        date(&p["started"])
    )
}

/// The README's results table: one row per system of the first ride (at most eight), each
/// linking to its section of `bench.md`.
pub fn readme_block(rides: &[&(String, Value)], pools: &[&(String, Value)]) -> Result<String> {
    let mut o = header("edit or add results/*.summary.json", "table");
    let Some((name, s)) = rides.first() else {
        o.push_str("\nNo bench results are committed yet (`results/`).\n\n");
        return Ok(o);
    };
    let _ = writeln!(o, "\n{}\n", caption(&s["meta"]));
    o.push_str(
        "| system | FCT ÷ oracle, 1 MB | FCT ÷ oracle, 4 MB | IM latency, 10 users | details |\n\
         | --- | --- | --- | --- | --- |\n",
    );
    for r in ok_runs(s).take(README_ROWS) {
        let im10 = r["im"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|x| x["users"] == 10)
            .map_or("–".to_string(), |x| format!("{} s", n(&x["mean_s"], 3)));
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | [{name}](docs/src/results/bench.md#{}) |",
            str_or(&r["system"], "?"),
            median_ci(&r["bulk"]["1048576"]["fct_over_oracle"], 2),
            median_ci(&r["bulk"]["4194304"]["fct_over_oracle"], 2),
            im10,
            anchor(name),
        );
    }
    o.push_str(
        "\nMedian [95% confidence interval of the mean], or (n=flows) when fewer than five; 1 \
         is the trip's best possible completion time.",
    );
    if !pools.is_empty() {
        o.push_str(" Pooled rides: [pooled.md](docs/src/results/pooled.md).");
    }
    o.push_str("\n\n");
    Ok(o)
}

/// The anchor mdBook gives a heading (lower case; letters, digits, `-` and `_` kept, spaces
/// to `-`).
fn anchor(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            ' ' => Some('-'),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests;
