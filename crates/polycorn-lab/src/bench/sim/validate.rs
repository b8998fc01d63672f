//! `polycorn sim validate`: the simulator against the emulator on the same rides.
//!
//! The same trip seeds, windows and workloads run on the emulated testbed (`polycorn bench`,
//! or rides it already wrote, `--emulated-from`) and in the simulator; [`compare`] then puts
//! the two side by side per system:
//!
//! - **workload rows**: per bulk size the median flow completion time (a flow that failed
//!   counts at its timeout), per IM segment the mean delivery time of the answered messages;
//! - **subflow rows**, per path, the counters both record about its subflows: downlink and
//!   uplink megabytes carried per ride, the proxy's retransmitted segments per downlink
//!   megabyte, reinjected megabytes per ride and subflow reconnects per ride.
//!
//! Each row has simulated ÷ emulated and a mark: within ±[`TOLERANCE`] or a miss. A miss (or a
//! row one side has no value for) carries the known gaps of the model that bear on it
//! ([`KNOWN_GAPS`]), so what the model lacks is said in the table rather than hidden.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};

use super::{sim_systems, simulate_rides, threads_or_cores, SimPredictor};
use crate::bench::plan::{Plan, BULK_SIZES, IM_USERS};
use crate::bench::report::{self, Results};
use crate::bench::{pool, BenchArgs, PredictAt, RideArgs};
use crate::calibrate::{CalibrateArgs, SimColumns};

/// The systems `sim validate` compares unless `--systems` names others.
pub const VALIDATE_SYSTEMS: &[&str] = &["single", "vanilla", "hrsch"];

/// How far simulated ÷ emulated may be from 1 for a row to pass.
pub const TOLERANCE: f64 = 0.15;

/// Options of `polycorn sim validate`.
#[derive(Args, Debug, Clone)]
pub struct ValidateArgs {
    /// The rides, systems and workload, as `polycorn bench` takes them (default 8 rides of
    /// single, vanilla and hrsch).
    #[command(flatten)]
    pub ride: RideArgs,
    /// Take the emulated rides from this directory (the `results.json` of each ride, as
    /// `polycorn bench` wrote them: one ride's directory or a multi-ride run's `trip-*/`;
    /// repeat the option for rides of several runs) instead of running the emulator; the rides
    /// of trip seeds TRIP_SEED .. TRIP_SEED+N-1 found there are compared. Needs no root.
    #[arg(long, value_name = "DIR")]
    pub emulated_from: Vec<PathBuf>,
    /// Rides simulated at once (default: every core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Testbed name (namespace prefix) of the emulated rides; created and removed.
    #[arg(long)]
    pub name: Option<String>,
    /// The handover predictor of polycorn systems on both sides: `none` (the emulated rides
    /// run without LinkDB too) or `paper` (the emulated rides with the bench's LinkDB, the
    /// simulated ones with the same model trained in process on the same simulated rides of
    /// the route). With `--emulated-from`, name the predictor those rides ran with.
    #[arg(long, value_enum, default_value_t = SimPredictor::None)]
    pub predictor: SimPredictor,
    /// Also compute the testbed's calibration rows on both sides for the same trips, MINUTES
    /// of each from its first moment above 250 km/h: one download per carrier with BBR and
    /// CUBIC, kernel TCP on the emulated carriers beside the simulator's TCP model
    /// (`polycorn testbed calibrate --sim also --parallel`; root, also with
    /// `--emulated-from`). The table goes to `calibrate/` of the output directory.
    #[arg(long, value_name = "MINUTES")]
    pub calibrate_minutes: Option<f64>,
}

/// Which part of a ride a row measures (what a known gap bears on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Median FCT of a bulk size.
    Fct,
    /// Mean IM delivery time of a segment.
    Im,
    /// Megabytes a path carried per ride.
    Bytes,
    /// Retransmitted segments per downlink megabyte.
    Retransmissions,
    /// Reinjected megabytes per ride.
    Reinjected,
    /// Subflow reconnects per ride.
    Reconnects,
}

/// A behaviour the simulator is known to lack, and the rows it bears on.
#[derive(Debug)]
pub struct Gap {
    /// Short name, used in the table's note column; the table ends with what each means.
    pub tag: &'static str,
    /// Systems it concerns (empty: every system).
    pub systems: &'static [&'static str],
    /// Rows it bears on.
    pub kinds: &'static [Kind],
    /// What the model lacks.
    pub note: &'static str,
}

/// What the simulator leaves out (see the manual's *What it leaves out*), by the rows it can
/// move.
pub const KNOWN_GAPS: &[Gap] = &[
    Gap {
        tag: "single-pipeline",
        systems: &["single"],
        kinds: &[Kind::Fct, Kind::Im, Kind::Retransmissions],
        note: "single path runs as the session's `single` pipeline over long-lived subflows, \
               not as a fresh TCP connection (handshake, slow start) per passenger flow",
    },
    Gap {
        tag: "partial-upkeep",
        systems: &[],
        kinds: &[Kind::Fct, Kind::Im, Kind::Reinjected, Kind::Reconnects],
        note: "path upkeep in part: a fresh subflow costs one round trip (no TLS or Hello), \
               one probe per path at a time, no pauses after failed attempts",
    },
    Gap {
        tag: "no-handshakes",
        systems: &[],
        kinds: &[Kind::Fct],
        note: "subflows are up from the start: no TCP, TLS or Hello handshake after a \
               failed handover",
    },
    Gap {
        tag: "ideal-legs",
        systems: &[],
        kinds: &[Kind::Im],
        note: "the passengers' LAN and the servers' data-centre legs are ideal",
    },
    Gap {
        tag: "no-predictor",
        systems: &["hrsch", "polycorn", "hrsch-tpr", "hrsch-ori", "hrsch-er"],
        kinds: &[Kind::Fct, Kind::Im],
        note: "the simulator's LinkDB is built in process from simulated rides, and the \
               relay's modem-report lag is not modelled",
    },
    Gap {
        tag: "retrans-count",
        systems: &[],
        kinds: &[Kind::Retransmissions],
        note: "the emulator counts the kernel's retransmissions (`tcpi_total_retrans`, tail-loss \
               probes included), the model its own retransmitted segments",
    },
];

/// The known gaps of `kind` for `system` (its name before any `+` suffix or `#` copy).
pub fn gaps(system: &str, kind: Kind) -> Vec<&'static Gap> {
    let base = system.split(['+', '#']).next().unwrap_or(system);
    KNOWN_GAPS
        .iter()
        .filter(|g| g.kinds.contains(&kind))
        .filter(|g| g.systems.is_empty() || g.systems.contains(&base))
        .collect()
}

/// What each gap named in `rows`' notes means, one `tag: note` line each.
pub fn legend(rows: &[Row]) -> String {
    let mut out = String::new();
    for g in KNOWN_GAPS {
        if rows.iter().any(|r| r.gaps.contains(&g.tag)) {
            let _ = writeln!(out, "  {}: {}", g.tag, g.note);
        }
    }
    out
}

/// How a row came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Simulated ÷ emulated within 1 ± [`TOLERANCE`].
    Pass,
    /// Outside it.
    Miss,
    /// One side has no value (or the emulated one is 0 and the simulated not).
    NoData,
}

impl Mark {
    fn label(self) -> &'static str {
        match self {
            Mark::Pass => "ok",
            Mark::Miss => "MISS",
            Mark::NoData => "n/a",
        }
    }
}

/// One row of the comparison.
#[derive(Debug, Clone)]
pub struct Row {
    /// System name.
    pub system: String,
    /// What is measured, e.g. `median FCT 1 MB`, `A down MB/ride`.
    pub what: String,
    /// Which part of the ride it measures.
    pub kind: Kind,
    /// Unit of the values.
    pub unit: &'static str,
    /// The emulated rides' value.
    pub emulated: Option<f64>,
    /// The simulated rides' value.
    pub simulated: Option<f64>,
    /// Samples behind each value (flows, messages or rides).
    pub n: (usize, usize),
    /// Within tolerance or not.
    pub mark: Mark,
    /// Why a value is missing, and the tags of the model's known gaps ([`KNOWN_GAPS`]) bearing
    /// on a row that missed or has no value.
    pub note: String,
    /// Those tags.
    pub gaps: Vec<&'static str>,
}

impl Row {
    /// Simulated ÷ emulated, when both exist and the emulated one is not 0.
    pub fn ratio(&self) -> Option<f64> {
        match (self.emulated, self.simulated) {
            (Some(e), Some(s)) if e != 0.0 => Some(s / e),
            _ => None,
        }
    }

    fn new(
        system: &str,
        what: String,
        kind: Kind,
        unit: &'static str,
        emulated: (Option<f64>, usize),
        simulated: (Option<f64>, usize),
    ) -> Row {
        let mut row = Row {
            system: system.to_string(),
            what,
            kind,
            unit,
            emulated: emulated.0,
            simulated: simulated.0,
            n: (emulated.1, simulated.1),
            mark: Mark::NoData,
            note: String::new(),
            gaps: Vec::new(),
        };
        row.mark = match (row.emulated, row.simulated) {
            // Both zero (no reinjection on either side) agree.
            (Some(e), Some(s)) if e == 0.0 && s == 0.0 => Mark::Pass,
            _ => match row.ratio() {
                Some(r) if (r - 1.0).abs() <= TOLERANCE + 1e-12 => Mark::Pass,
                Some(_) => Mark::Miss,
                None => Mark::NoData,
            },
        };
        let mut notes = Vec::new();
        match (row.emulated, row.simulated) {
            (None, _) => notes.push("no value in the emulated rides"),
            (_, None) => notes.push("no value in the simulated rides"),
            _ => {}
        }
        if row.mark != Mark::Pass {
            row.gaps = gaps(system, kind).iter().map(|g| g.tag).collect();
            notes.extend(&row.gaps);
        }
        row.note = notes.join("; ");
        row
    }

    /// Leaves gap `tag` out of the row's note: it does not bear on these rides (e.g. the
    /// emulated rides ran without a predictor either).
    pub fn drop_gap(&mut self, tag: &str) {
        self.gaps.retain(|t| *t != tag);
        self.note = self
            .note
            .split("; ")
            .filter(|n| *n != tag)
            .collect::<Vec<_>>()
            .join("; ");
    }

    /// The row as JSON (`validate.json`).
    pub fn to_json(&self) -> Value {
        json!({
            "system": self.system,
            "what": self.what,
            "kind": format!("{:?}", self.kind).to_lowercase(),
            "unit": self.unit,
            "emulated": self.emulated,
            "simulated": self.simulated,
            "n_emulated": self.n.0,
            "n_simulated": self.n.1,
            "ratio": self.ratio(),
            "mark": self.mark.label(),
            "note": self.note,
            "gaps": self.gaps.iter().map(|t| {
                let note = KNOWN_GAPS.iter().find(|g| g.tag == *t).map(|g| g.note);
                json!({"tag": t, "note": note})
            }).collect::<Vec<_>>(),
        })
    }
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Flow completion times of `system`'s downloads of `size` over `rides` (a failed flow at its
/// timeout).
fn fcts(rides: &[Results], system: &str, size: u64) -> Vec<f64> {
    rides
        .iter()
        .filter_map(|r| r.run(system).map(|run| (r, run)))
        .filter(|(_, run)| run.error.is_none())
        .flat_map(|(r, run)| {
            run.flows
                .iter()
                .filter(move |f| f.size == size)
                .map(move |f| if f.ok { f.fct_s } else { r.plan.bulk_timeout_s })
        })
        .collect()
}

/// Delivery times of `system`'s answered IM messages with `users` users over `rides`.
fn deliveries(rides: &[Results], system: &str, users: usize) -> Vec<f64> {
    rides
        .iter()
        .filter_map(|r| r.run(system))
        .flat_map(|run| run.im.iter())
        .filter(|m| m.users == users)
        .filter_map(|m| m.delivery_s)
        .collect()
}

/// Sum of the counters `role:family{…path="pP"…}` of `system` over `rides`, with the rides
/// that had any of them.
fn counter(rides: &[Results], system: &str, role: &str, family: &str, p: usize) -> (f64, usize) {
    let prefix = format!("{role}:{family}{{");
    let label = format!("path=\"p{p}\"");
    let (mut sum, mut n) = (0.0, 0);
    for run in rides.iter().filter_map(|r| r.run(system)) {
        let mut any = false;
        for (k, v) in &run.counters {
            if k.starts_with(&prefix) && k.contains(&label) {
                sum += v;
                any = true;
            }
        }
        n += usize::from(any);
    }
    (sum, n)
}

/// Bytes path `p` carried for `system` over `rides` (down, up), with the rides that recorded it.
fn path_bytes(rides: &[Results], system: &str, p: usize) -> ((f64, f64), usize) {
    let (mut d, mut u, mut n) = (0.0, 0.0, 0);
    for run in rides.iter().filter_map(|r| r.run(system)) {
        if let (Some(a), Some(b)) = (run.path_down_bytes.get(p), run.path_up_bytes.get(p)) {
            d += *a as f64;
            u += *b as f64;
            n += 1;
        }
    }
    ((d, u), n)
}

/// The comparison of `emulated` and `simulated` (the same rides) for `systems`.
pub fn compare(emulated: &[Results], simulated: &[Results], systems: &[String]) -> Vec<Row> {
    let mut rows = Vec::new();
    let carriers: Vec<String> = emulated
        .first()
        .or(simulated.first())
        .map(|r| r.meta.carriers.clone())
        .unwrap_or_default();
    for sys in systems {
        for size in BULK_SIZES {
            let (mut e, mut s) = (fcts(emulated, sys, size), fcts(simulated, sys, size));
            if e.is_empty() && s.is_empty() {
                continue;
            }
            let (ne, ns) = (e.len(), s.len());
            rows.push(Row::new(
                sys,
                format!("median FCT {}", report::size_label(size)),
                Kind::Fct,
                "s",
                (median(&mut e), ne),
                (median(&mut s), ns),
            ));
        }
        for users in IM_USERS {
            let (e, s) = (
                deliveries(emulated, sys, users),
                deliveries(simulated, sys, users),
            );
            if e.is_empty() && s.is_empty() {
                continue;
            }
            rows.push(Row::new(
                sys,
                format!("IM mean, {users} users"),
                Kind::Im,
                "s",
                (mean(&e), e.len()),
                (mean(&s), s.len()),
            ));
        }
        for (p, carrier) in carriers.iter().enumerate() {
            let ((ed, eu), ne) = path_bytes(emulated, sys, p);
            let ((sd, su), ns) = path_bytes(simulated, sys, p);
            let per_ride = |v: f64, n: usize| (n > 0).then(|| v / n as f64 / 1e6);
            for (dir, e, s) in [("down", ed, sd), ("up", eu, su)] {
                rows.push(Row::new(
                    sys,
                    format!("{carrier} {dir} MB/ride"),
                    Kind::Bytes,
                    "MB",
                    (per_ride(e, ne), ne),
                    (per_ride(s, ns), ns),
                ));
            }
            let fam = "polycorn_path_retransmissions_total";
            let (er, ern) = counter(emulated, sys, "proxy", fam, p);
            let (sr, srn) = counter(simulated, sys, "proxy", fam, p);
            let per_mb = |v: f64, n: usize, mb: f64| (n > 0 && mb > 0.0).then(|| v / mb);
            rows.push(Row::new(
                sys,
                format!("{carrier} retransmitted segments per down MB"),
                Kind::Retransmissions,
                "/MB",
                (per_mb(er, ern, ed / 1e6), ern),
                (per_mb(sr, srn, sd / 1e6), srn),
            ));
            for (what, fam, kind, scale, unit) in [
                (
                    "reinjected MB/ride",
                    "polycorn_path_reinjected_bytes_total",
                    Kind::Reinjected,
                    1e6,
                    "MB",
                ),
                (
                    "reconnects/ride",
                    "polycorn_path_reconnects_total",
                    Kind::Reconnects,
                    1.0,
                    "",
                ),
            ] {
                let side = |rides: &[Results]| {
                    let (up, nu) = counter(rides, sys, "relay", fam, p);
                    let (down, nd) = counter(rides, sys, "proxy", fam, p);
                    let n = nu.max(nd);
                    ((n > 0).then(|| (up + down) / n as f64 / scale), n)
                };
                let (e, s) = (side(emulated), side(simulated));
                rows.push(Row::new(sys, format!("{carrier} {what}"), kind, unit, e, s));
            }
        }
    }
    rows
}

fn fmt_value(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(0.0) => "0".into(),
        Some(v) if v.abs() >= 100.0 => format!("{v:.0}"),
        Some(v) if v.abs() >= 10.0 => format!("{v:.1}"),
        Some(v) if v.abs() >= 0.1 => format!("{v:.2}"),
        Some(v) => format!("{v:.3}"),
    }
}

/// Pass counts: (workload rows within tolerance, workload rows with both values, subflow rows
/// within tolerance, subflow rows with both values).
pub fn tally(rows: &[Row]) -> (usize, usize, usize, usize) {
    let mut t = (0, 0, 0, 0);
    for r in rows {
        let workload = matches!(r.kind, Kind::Fct | Kind::Im);
        let (pass, judged) = if workload {
            (&mut t.0, &mut t.1)
        } else {
            (&mut t.2, &mut t.3)
        };
        if r.mark != Mark::NoData {
            *judged += 1;
        }
        if r.mark == Mark::Pass {
            *pass += 1;
        }
    }
    t
}

fn cells(r: &Row) -> [String; 7] {
    let unit = |v: Option<f64>| {
        let s = fmt_value(v);
        if v.is_some() && !r.unit.is_empty() && r.unit != "/MB" {
            format!("{s} {}", r.unit)
        } else {
            s
        }
    };
    [
        r.system.clone(),
        r.what.clone(),
        format!("{} ({})", unit(r.emulated), r.n.0),
        format!("{} ({})", unit(r.simulated), r.n.1),
        r.ratio().map_or("-".into(), |x| format!("{x:.2}")),
        r.mark.label().to_string(),
        r.note.clone(),
    ]
}

const HEADER: [&str; 7] = [
    "system",
    "row",
    "emulated (n)",
    "simulated (n)",
    "sim/emu",
    "±15%",
    "note",
];

fn summary_line(rows: &[Row]) -> String {
    let (wp, wn, sp, sn) = tally(rows);
    format!(
        "within ±{:.0}%: {wp} of {wn} workload rows (median FCT, IM mean), {sp} of {sn} subflow rows",
        TOLERANCE * 100.0
    )
}

/// The table as plain text (aligned columns; the note last, unpadded).
pub fn render_text(rows: &[Row]) -> String {
    let all: Vec<[String; 7]> = std::iter::once(HEADER.map(String::from))
        .chain(rows.iter().map(cells))
        .collect();
    let mut width = [0usize; 6];
    for c in &all {
        for (w, s) in width.iter_mut().zip(c) {
            *w = (*w).max(s.chars().count());
        }
    }
    let mut out = String::new();
    for (k, c) in all.iter().enumerate() {
        if k > 0 && c[0] != all[k - 1][0] {
            out.push('\n');
        }
        for (w, s) in width.iter().zip(c) {
            let _ = write!(out, "{s:<w$}  ");
        }
        out.push_str(&c[6]);
        out.truncate(out.trim_end().len());
        out.push('\n');
    }
    let _ = writeln!(out, "\n{}", summary_line(rows));
    let l = legend(rows);
    if !l.is_empty() {
        let _ = write!(out, "what the model lacks (note column):\n{l}");
    }
    out
}

/// The table as Markdown.
pub fn render_markdown(rows: &[Row]) -> String {
    let mut out = format!("| {} |\n", HEADER.join(" | "));
    out.push_str(&format!("|{}\n", "---|".repeat(HEADER.len())));
    for r in rows {
        let c = cells(r).map(|s| s.replace('|', "\\|"));
        out.push_str(&format!("| {} |\n", c.join(" | ")));
    }
    let _ = writeln!(out, "\n{}", summary_line(rows));
    let l = legend(rows);
    if !l.is_empty() {
        let _ = write!(out, "\nWhat the model lacks (note column):\n\n");
        for line in l.lines() {
            let _ = writeln!(out, "- {}", line.trim_start());
        }
    }
    out
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0)
}

/// Whether two plans schedule the same workload (float times compared to a micro-second).
fn same_plan(a: &Plan, b: &Plan) -> Option<&'static str> {
    let flows = |x: &[crate::bench::plan::BulkFlow], y: &[crate::bench::plan::BulkFlow]| {
        x.len() == y.len()
            && x.iter()
                .zip(y)
                .all(|(f, g)| f.idx == g.idx && f.size == g.size && close(f.start_s, g.start_s))
    };
    if !flows(&a.bulk, &b.bulk) {
        return Some("bulk downloads (--bulk-flows, --bulk-gap-s, --workloads)");
    }
    if !flows(&a.uploads, &b.uploads) {
        return Some("uploads (--workloads)");
    }
    // A plan read back from `results.json` has no send times (the workload seed, compared
    // beside, decides them); they are compared when both sides have them.
    let im_same = a.im.len() == b.im.len()
        && a.im.iter().zip(&b.im).all(|(s, t)| {
            s.users == t.users
                && close(s.start_s, t.start_s)
                && (s.sends_s.is_empty()
                    || t.sends_s.is_empty()
                    || s.sends_s.len() == t.sends_s.len())
                && s.sends_s
                    .iter()
                    .zip(&t.sends_s)
                    .all(|(x, y)| x.len() == y.len() && x.iter().zip(y).all(|(p, q)| close(*p, *q)))
        });
    if !im_same {
        return Some("IM messages (--workloads, --seed)");
    }
    None
}

/// Refuses to compare an emulated ride with a simulated one of another trip window, model or
/// workload; the error names what differs.
pub fn check_same_ride(emulated: &Results, simulated: &Results) -> Result<()> {
    let (e, s) = (&emulated.meta, &simulated.meta);
    let mut diff = Vec::new();
    if e.preset != s.preset || e.route_seed != s.route_seed || e.trip_seed != s.trip_seed {
        diff.push(format!(
            "trip ({} route {} trip {} against {} route {} trip {})",
            e.preset, e.route_seed, e.trip_seed, s.preset, s.route_seed, s.trip_seed
        ));
    }
    if e.trip_model != s.trip_model {
        diff.push(format!(
            "trip model ({} against {})",
            e.trip_model.as_deref().unwrap_or("not recorded"),
            s.trip_model.as_deref().unwrap_or("not recorded")
        ));
    }
    if e.mode != s.mode {
        diff.push(format!("mode ({} against {}: --quick)", e.mode, s.mode));
    }
    if !close(e.from_s, s.from_s) || !close(e.window_s, s.window_s) {
        diff.push(format!(
            "window ({:.2} s for {:.0} s against {:.2} s for {:.0} s: --from-s, --workloads)",
            e.from_s, e.window_s, s.from_s, s.window_s
        ));
    }
    if e.seed != s.seed {
        diff.push(format!("workload seed ({} against {})", e.seed, s.seed));
    }
    if e.queue_bytes != s.queue_bytes {
        diff.push(format!(
            "queue ({:?} against {:?}: --queue-bytes)",
            e.queue_bytes, s.queue_bytes
        ));
    }
    if let Some(what) = same_plan(&emulated.plan, &simulated.plan) {
        diff.push(format!("workload: {what}"));
    }
    if diff.is_empty() {
        Ok(())
    } else {
        bail!(
            "the emulated ride of trip seed {} is not the ride simulated for it: {}; pass the \
             options the emulated rides ran with",
            e.trip_seed,
            diff.join("; ")
        )
    }
}

/// The emulated rides of trip seeds `seeds` under `dir`, in seed order; the seeds missing
/// there are left out with a note on stderr, and none found is an error.
fn load_emulated(dirs: &[PathBuf], seeds: &[u64]) -> Result<Vec<Results>> {
    let loaded = pool::load_dirs(dirs)?;
    let dir = dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let found: Vec<u64> = loaded.iter().map(|(_, r)| r.meta.trip_seed).collect();
    let mut rides: Vec<Results> = loaded
        .into_iter()
        .map(|(_, r)| r)
        .filter(|r| seeds.contains(&r.meta.trip_seed))
        .collect();
    rides.sort_by_key(|r| r.meta.trip_seed);
    if rides.is_empty() {
        bail!(
            "{dir}: no emulated ride of trip seeds {}..{} (found trip seeds {found:?}); pass \
             --trip-seed and --rides to match",
            seeds.first().copied().unwrap_or(0),
            seeds.last().copied().unwrap_or(0)
        );
    }
    if rides.len() < seeds.len() {
        eprintln!(
            "note: {dir} holds {} of the {} rides asked for; comparing those",
            rides.len(),
            seeds.len()
        );
    }
    Ok(rides)
}

/// `polycorn sim validate`.
pub fn run(args: &ValidateArgs) -> Result<()> {
    let mut ride = args.ride.clone();
    if !ride.traces.is_empty() {
        bail!(
            "--trace: `sim validate` compares rides of the trip model; simulate recorded traces \
             with `polycorn sim bench --trace`"
        );
    }
    let n = ride.rides_or(8)?;
    if ride.systems.is_empty() {
        ride.systems = vec![VALIDATE_SYSTEMS.join(",")];
    }
    let systems = sim_systems(&ride)?;
    let names: Vec<String> = systems.iter().map(|s| s.name.clone()).collect();
    let params = ride.plan_params()?;
    let top = ride
        .out
        .clone()
        .unwrap_or_else(|| crate::bench::ride_dir("validate", &ride));
    let seeds: Vec<u64> = (0..n).map(|k| ride.trip.trip_seed + k).collect();
    let at = match args.predictor {
        SimPredictor::None => PredictAt::None,
        SimPredictor::Paper => PredictAt::Both,
        other => bail!(
            "--predictor {}: the emulated bench runs LinkDB's paper model or none; validate with `paper` or `none`",
            other.name()
        ),
    };
    let emulated = match args.emulated_from.as_slice() {
        [] => {
            // Both sides with the same predictor (or none).
            let bench = BenchArgs {
                ride: RideArgs {
                    rides: Some(n),
                    out: Some(top.join("emulated")),
                    ..ride.clone()
                },
                prediction: at,
                name: args.name.clone(),
            };
            eprintln!(
                "sim validate: {n} emulated rides of {} (predictor: {}, as in the simulator)",
                names.join(", "),
                args.predictor.name()
            );
            crate::bench::run(&bench).context("the emulated rides")?
        }
        dirs => load_emulated(dirs, &seeds)?,
    };
    let seeds: Vec<u64> = emulated.iter().map(|r| r.meta.trip_seed).collect();
    let threads = threads_or_cores(args.threads);
    eprintln!(
        "sim validate: simulating the {} rides (trip seeds {seeds:?}) on {} threads",
        seeds.len(),
        threads.min(seeds.len())
    );
    let sim_dir = top.join("simulated");
    let dir = |seed: u64| sim_dir.join(format!("trip-{seed}"));
    let simulated = simulate_rides(
        &ride,
        None,
        &systems,
        &seeds,
        &params,
        threads,
        &super::SimPrediction::new(args.predictor, &ride, &systems)?,
        Some(&dir),
    )?;
    for (e, s) in emulated.iter().zip(&simulated) {
        check_same_ride(e, s)?;
    }
    let mut rows = compare(&emulated, &simulated, &names);
    let predicted = |r: &Results| !r.meta.prediction.starts_with("none");
    if !emulated.iter().any(predicted) || args.predictor != SimPredictor::None {
        // Both sides had the same predictor, or neither: its absence explains nothing here.
        rows.iter_mut().for_each(|r| r.drop_gap("no-predictor"));
    }
    // A predictor in the emulated rides only is a difference of configuration, not of the model.
    let only_emulated = args.predictor == SimPredictor::None;
    if let Some(e) = emulated
        .iter()
        .find(|r| predicted(r))
        .filter(|_| only_emulated)
    {
        for r in rows.iter_mut().filter(|r| r.mark != Mark::Pass) {
            let predicts = r.system.starts_with("hrsch") || r.system.starts_with("polycorn");
            if matches!(r.kind, Kind::Fct | Kind::Im) && predicts {
                r.note = format!(
                    "the emulated rides ran with a predictor ({}), the simulated without; {}",
                    e.meta.prediction, r.note
                );
            }
        }
    }
    let head = format!(
        "sim validate: {} rides of preset {} route {} (trip seeds {seeds:?}, {}), systems {}; \
         emulated {}, simulated {}",
        seeds.len(),
        ride.trip.preset,
        ride.trip.route_seed,
        if ride.quick { "quick" } else { "full" },
        names.join(", "),
        if args.emulated_from.is_empty() {
            top.join("emulated").display().to_string()
        } else {
            args.emulated_from
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        },
        sim_dir.display()
    );
    let text = render_text(&rows);
    let md = format!(
        "{head}\n\n```sh\n{}\n```\n\n{}",
        crate::bench::command_line(),
        render_markdown(&rows)
    );
    std::fs::create_dir_all(&top).with_context(|| format!("create {}", top.display()))?;
    let (wp, wn, sp, sn) = tally(&rows);
    let j = json!({
        "command": crate::bench::command_line(),
        "build": crate::BUILD,
        "tolerance": TOLERANCE,
        "trip_seeds": seeds,
        "systems": names,
        "emulated": emulated.iter().map(|r| json!({
            "trip_seed": r.meta.trip_seed,
            "started": r.meta.started,
            "prediction": r.meta.prediction,
            "build": r.meta.build,
        })).collect::<Vec<_>>(),
        "workload_rows_within": wp,
        "workload_rows_judged": wn,
        "subflow_rows_within": sp,
        "subflow_rows_judged": sn,
        "rows": rows.iter().map(Row::to_json).collect::<Vec<_>>(),
    });
    for (file, body) in [
        ("validate.json", serde_json::to_string_pretty(&j)?),
        ("validate.md", md),
    ] {
        let p = top.join(file);
        std::fs::write(&p, body).with_context(|| format!("write {}", p.display()))?;
    }
    crate::emit(&format!(
        "{head}\n\n{text}table: {}\n",
        top.join("validate.md").display()
    ))?;
    if let Some(minutes) = args.calibrate_minutes {
        // The asked trips (the rides compared above are those found of them).
        let mut cal = CalibrateArgs::of_trips(ride.trip.clone(), n, minutes);
        cal.sim = SimColumns::Also;
        cal.parallel = true;
        cal.out = Some(top.join("calibrate"));
        if let Some(name) = &args.name {
            cal.name = name.clone();
        }
        eprintln!(
            "sim validate: calibration rows of {n} trips, {minutes} min each, kernel TCP beside the simulator's"
        );
        crate::calibrate::run(&cal).context("the calibration rows")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
