//! `polycorn bench pool`: pool rides that earlier invocations wrote, without running anything.
//!
//! One `polycorn bench --rides N` invocation pools its own rides (`pooled.txt`). Between
//! invocations the whole run can move by more than one run's intervals, so a researcher runs
//! more rides later (other trip seeds, or the same command again on another day) and pools
//! everything. Each ride is read back from its `results.json` (which holds every flow and
//! message raw), checked against the others — same preset, route, mode and interruption
//! source; no ride twice, since the intervals treat rides as independent — and handed to the
//! same pooling code the bench itself uses.
//!
//! A ride that appears in several directories with *different* systems (a system added to
//! earlier rides later: same trip seed, workload and window) is one ride with the systems of
//! all of them; a system twice in one ride is refused. `--systems` keeps only the named
//! systems, so a system measured in two runs can be taken from one of them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::analysis::ImBound;
use super::analysis::{FlowResult, ImResult, SystemRun};
use super::plan::{BulkFlow, ImSegment, Plan};
use super::report::{self, Results};
use super::Meta;
use crate::tripgen::TripArgs;
use polycorn_link::trip::{Interruption, Trip, TripConfig};

/// Options of `polycorn bench pool`.
#[derive(clap::Args, Debug, Clone)]
pub struct PoolArgs {
    /// Bench output directories: a multi-ride run (its `trip-*/` rides are read) or one ride's
    /// directory (holding `results.json`). Rides of every directory are pooled together.
    #[arg(required = true, num_args = 1..)]
    pub dirs: Vec<PathBuf>,
    /// Also write `pooled.txt` and `pooled.json` here (created if missing).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Pool only these systems (as named in the results: `hrsch`, `mptcp+bbr`, `hrsch#2`, …;
    /// `,`- or `;`-separated, repeatable). Default: every system of every ride.
    #[arg(long)]
    pub systems: Vec<String>,
}

/// `polycorn bench pool`.
pub fn run(args: &PoolArgs) -> Result<()> {
    let only = super::split_systems(&args.systems)?;
    let loaded = load_dirs_only(&args.dirs, &only)?;
    for (seed, files) in &loaded.merged {
        let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
        println!(
            "note: ride (trip seed {seed}) combines the systems of {} runs ({}); systems from different runs were not measured in one invocation, so their comparison also carries the noise between runs",
            files.len(),
            names.join(", ")
        );
    }
    let rides = loaded.rides;
    let versions = loaded.versions;
    if versions.len() > 1 {
        println!(
            "note: the rides come from {} builds ({}); compare like with like",
            versions.len(),
            versions.join(", ")
        );
    }
    for (system, kinds) in &loaded.pipelines {
        let known: Vec<&(String, Vec<u64>)> = kinds
            .iter()
            .filter(|(p, _)| p != PIPELINE_NOT_RECORDED)
            .collect();
        if known.len() > 1 {
            println!(
                "WARNING: system `{system}` ran different schedulers or congestion controls in these rides: {}; its pooled numbers mix them (pass the directories of one)",
                on_rides(known.iter().copied())
            );
        } else if let Some((_, old)) = kinds.iter().find(|(p, _)| p == PIPELINE_NOT_RECORDED) {
            println!(
                "note: system `{system}` ran {} but {} older rides ({}) did not record their scheduler; presets changed over time (`polycorn` gained thin-flow copies on 2026-11-26), so check those rides ran the same",
                on_rides(known.iter().copied()),
                old.len(),
                seed_list(old)
            );
        }
    }
    if loaded.trip_models.len() > 1 {
        println!(
            "WARNING: the rides come from {} trip models: {}; each ride compares its systems under one set of conditions, but the pool mixes rides of different models (pool the rides of one)",
            loaded.trip_models.len(),
            on_rides(&loaded.trip_models)
        );
    }
    for (seed, why) in &loaded.unbounded {
        println!("note: ride (trip seed {seed}) has no IM lower bound: {why}");
    }
    let results: Vec<Results> = rides.into_iter().map(|(_, r)| r).collect();
    super::print_pooled(&results, args.out.as_deref())
}

/// Kinds (schedulers, trip models) with their rides for a message: `` `a` on 3 rides (1-3) ``.
fn on_rides<'a>(kinds: impl IntoIterator<Item = &'a (String, Vec<u64>)>) -> String {
    kinds
        .into_iter()
        .map(|(k, seeds)| format!("`{k}` on {} rides ({})", seeds.len(), seed_list(seeds)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Adds `seed` to the group named `key` (created at the end if new).
fn add_seed(groups: &mut Vec<(String, Vec<u64>)>, key: String, seed: u64) {
    match groups.iter_mut().find(|(k, _)| *k == key) {
        Some((_, seeds)) => seeds.push(seed),
        None => groups.push((key, vec![seed])),
    }
}

/// Trip seeds for a message: `1-20, 23, 25`.
fn seed_list(seeds: &[u64]) -> String {
    let mut sorted = seeds.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        out.push(if j > i {
            format!("{}-{}", sorted[i], sorted[j])
        } else {
            sorted[i].to_string()
        });
        i = j + 1;
    }
    out.join(", ")
}

/// Every ride under `dirs`, in the order given (rides of a multi-ride directory by trip seed),
/// each with the `results.json` it came from. Errors name the file or directory at fault.
pub fn load_dirs(dirs: &[PathBuf]) -> Result<Vec<(PathBuf, Results)>> {
    Ok(load_dirs_only(dirs, &[])?.rides)
}

/// What [`load_dirs_only`] read.
#[derive(Debug)]
pub struct Loaded {
    /// Every ride, with the first `results.json` it came from.
    pub rides: Vec<(PathBuf, Results)>,
    /// Rides whose systems came from several runs: trip seed and every file.
    pub merged: Vec<(u64, Vec<PathBuf>)>,
    /// The builds (versions) of every file that contributed a system, sorted.
    pub versions: Vec<String>,
    /// Rides written before IM lower bounds were recorded whose trip could not be rebuilt to
    /// compute them: trip seed and why.
    pub unbounded: Vec<(u64, String)>,
    /// Systems that ran different schedulers under one name (see [`mixed_pipelines`]).
    pub pipelines: Vec<MixedPipelines>,
    /// The trip models the rides came from, each with its rides (trip seeds), in the order first
    /// seen. A ride written before the model was recorded is generated again: if this build
    /// generates what it recorded, it counts as this build's model; if not, as
    /// [`MODEL_EARLIER`]; if it cannot be generated (a missing interruption file), as "not
    /// recorded" with the reason.
    pub trip_models: Vec<(String, Vec<u64>)>,
}

/// [`load_dirs`] keeping only the systems in `only` (every system when empty); a ride found
/// in several directories with different systems becomes one ride with all of them.
pub fn load_dirs_only(dirs: &[PathBuf], only: &[String]) -> Result<Loaded> {
    let mut files = Vec::new();
    for dir in dirs {
        files.extend(ride_files(dir)?);
    }
    let mut rides: Vec<(PathBuf, Results)> = Vec::new();
    let mut merged: Vec<(u64, Vec<PathBuf>)> = Vec::new();
    let mut seen_systems: Vec<String> = Vec::new();
    let mut versions: Vec<String> = Vec::new();
    for file in files {
        let text =
            std::fs::read_to_string(&file).with_context(|| format!("read {}", file.display()))?;
        let v: Value = serde_json::from_str(&text)
            .with_context(|| format!("{}: not valid JSON", file.display()))?;
        let mut r = from_json(&v).with_context(|| format!("{}", file.display()))?;
        seen_systems.extend(r.runs.iter().map(|x| x.system.clone()));
        if !only.is_empty() {
            r.runs.retain(|x| only.contains(&x.system));
            if r.runs.is_empty() {
                continue;
            }
        }
        if !versions.contains(&r.meta.version) {
            versions.push(r.meta.version.clone());
        }
        if let Some((first, f)) = rides.first() {
            for (what, a, b) in [
                ("preset", &f.meta.preset, &r.meta.preset),
                ("mode (quick/full)", &f.meta.mode, &r.meta.mode),
                (
                    "interruption source",
                    &f.meta.interruptions,
                    &r.meta.interruptions,
                ),
                (
                    "handover interruption (packets held or dropped)",
                    &f.meta.handover_interruption,
                    &r.meta.handover_interruption,
                ),
            ] {
                if a != b {
                    bail!(
                        "{}: {what} `{b}` differs from `{a}` in {}; only rides of one preset, mode, testbed and route pool",
                        file.display(),
                        first.display()
                    );
                }
            }
            // Recorded traces play the part of a route: another set of traces is other
            // conditions (its identity hashes the paths' opportunities and delays).
            if r.meta.preset == report::TRACES_PRESET && f.meta.trip_model != r.meta.trip_model {
                bail!(
                    "{}: recorded traces `{}` differ from `{}` in {}; only rides of one set of traces pool",
                    file.display(),
                    r.meta.trip_model.as_deref().unwrap_or("not recorded"),
                    f.meta.trip_model.as_deref().unwrap_or("not recorded"),
                    first.display()
                );
            }
            if f.meta.route_seed != r.meta.route_seed {
                bail!(
                    "{}: route {} differs from route {} in {}; only rides of one route pool",
                    file.display(),
                    r.meta.route_seed,
                    f.meta.route_seed,
                    first.display()
                );
            }
        }
        let seed = r.meta.trip_seed;
        if let Some((other, x)) = rides.iter_mut().find(|(_, x)| x.meta.trip_seed == seed) {
            if let Some(dup) = r
                .runs
                .iter()
                .find(|a| x.runs.iter().any(|b| b.system == a.system))
            {
                bail!(
                    "{}: ride (trip seed {seed}) is already pooled from {} with system `{}`; the intervals treat rides as independent, so a ride counts once (leave that system out with --systems, or leave out one of the directories)",
                    file.display(),
                    other.display(),
                    dup.system
                );
            }
            let same = x.meta.seed == r.meta.seed
                && x.meta.from_s == r.meta.from_s
                && x.meta.window_s == r.meta.window_s
                && x.plan == r.plan;
            if !same {
                bail!(
                    "{}: ride (trip seed {seed}) is also in {}, but with another workload seed, window or plan; only runs of the same conditions combine",
                    file.display(),
                    other.display()
                );
            }
            // The same seeds give other conditions after the trip model changed: compare what
            // each run recorded it emulated, not only how it was asked for.
            let models = (x.meta.trip_model.as_deref(), r.meta.trip_model.as_deref());
            if let (Some(a), Some(b)) = models {
                if a != b {
                    bail!(
                        "{}: ride (trip seed {seed}) is also in {}, but from trip model `{b}` there and `{a}` here; the trip model changed between the two runs, so their systems did not see the same conditions and do not combine",
                        file.display(),
                        other.display()
                    );
                }
            }
            if !same_capacity(&x.capacity, &r.capacity) || x.handovers != r.handovers {
                bail!(
                    "{}: ride (trip seed {seed}) is also in {}, but the two runs recorded different emulated conditions (capacity or handovers; trip model {} and {}): the trip model changed between them, so their systems do not combine",
                    file.display(),
                    other.display(),
                    r.meta.trip_model.as_deref().unwrap_or("not recorded"),
                    x.meta.trip_model.as_deref().unwrap_or("not recorded")
                );
            }
            match merged.iter_mut().find(|(s, _)| *s == seed) {
                Some((_, fs)) => fs.push(file.clone()),
                None => merged.push((seed, vec![other.clone(), file.clone()])),
            }
            x.runs.extend(r.runs);
            if x.im_bounds.is_empty() {
                x.im_bounds = r.im_bounds;
            }
            continue;
        }
        rides.push((file, r));
    }
    if let Some(missing) = only.iter().find(|s| !seen_systems.contains(s)) {
        seen_systems.sort_unstable();
        seen_systems.dedup();
        bail!(
            "--systems: no ride has system `{missing}` (the rides have: {})",
            seen_systems.join(", ")
        );
    }
    if rides.is_empty() {
        bail!("no ride left to pool");
    }
    versions.sort_unstable();
    let pipelines = mixed_pipelines(&rides);
    // Rides from before their trip model or IM bounds were recorded are generated again, once
    // each; the model's identity depends on the configuration, not the ride, so it is
    // computed once per configuration.
    let mut sources = BTreeMap::new();
    let mut ids: BTreeMap<String, String> = BTreeMap::new();
    let mut trip_models = Vec::new();
    let mut unbounded = Vec::new();
    for (file, r) in &mut rides {
        let needs_bounds = r.runs.iter().any(|x| !x.im.is_empty()) && r.im_bounds.is_empty();
        let again =
            (r.meta.trip_model.is_none() || needs_bounds).then(|| regenerate(r, &mut sources));
        let model = match (&r.meta.trip_model, &again) {
            (Some(m), _) => m.clone(),
            (None, Some(Ok(Some((_, cfg))))) => {
                let mut key = cfg.clone();
                key.trip_seed = 0;
                let key = format!("{key:?}");
                match ids.get(&key) {
                    Some(id) => id.clone(),
                    None => {
                        let id = crate::tripgen::trip_model_id(cfg).unwrap_or_else(|e| {
                            format!("not recorded, and no identity computed: {e:#}")
                        });
                        ids.insert(key, id.clone());
                        id
                    }
                }
            }
            (None, Some(Ok(None))) => MODEL_EARLIER.to_string(),
            (None, Some(Err(e))) => format!("not recorded, and not generated again: {e:#}"),
            (None, None) => unreachable!("a ride without a recorded model is generated again"),
        };
        add_seed(&mut trip_models, model, r.meta.trip_seed);
        if needs_bounds {
            let bounds = match again.expect("generated when bounds are needed") {
                Ok(Some((trip, _))) => Ok(bounds_for(r, &trip)),
                Ok(None) => Err(not_recorded(r)),
                Err(e) => Err(e),
            };
            match bounds {
                Ok(b) => r.im_bounds = b,
                Err(e) => unbounded.push((r.meta.trip_seed, format!("{}: {e:#}", file.display()))),
            }
        }
    }
    Ok(Loaded {
        rides,
        merged,
        versions,
        unbounded,
        pipelines,
        trip_models,
    })
}

/// A system name and the pipelines it ran under, each with its rides (trip seeds).
pub type MixedPipelines = (String, Vec<(String, Vec<u64>)>);

/// What a ride that did not record its expanded pipeline shows in [`mixed_pipelines`].
pub const PIPELINE_NOT_RECORDED: &str = "not recorded (the ride predates the field)";

/// The congestion control a run's relay and proxy ran: as recorded, else what every system
/// ran before results recorded it — CUBIC, unless the system's name carries `+bbr`.
pub fn congestion_ran(run: &SystemRun) -> &str {
    match &run.congestion {
        Some(c) => c,
        None if run.system.contains("+bbr") => "bbr",
        None => "cubic",
    }
}

/// Systems whose rides ran different schedulers or congestion controls under one name — a
/// preset such as `polycorn` that a later build defines differently, or a default that
/// changed — with each kind (`PIPELINE with CC`) and its rides (trip seeds), in the order first
/// seen. A ride that did not record its pipeline counts as its own kind,
/// [`PIPELINE_NOT_RECORDED`], when others of the same system did.
pub fn mixed_pipelines(rides: &[(PathBuf, Results)]) -> Vec<MixedPipelines> {
    let mut by_system: Vec<MixedPipelines> = Vec::new();
    for (_, r) in rides {
        for run in r.runs.iter().filter(|x| x.mode == "polycorn") {
            let kind = match &run.pipeline {
                Some(p) => format!("{p} with {}", congestion_ran(run)),
                None => PIPELINE_NOT_RECORDED.to_string(),
            };
            let kinds = match by_system.iter_mut().find(|(n, _)| *n == run.system) {
                Some((_, k)) => k,
                None => {
                    by_system.push((run.system.clone(), Vec::new()));
                    &mut by_system.last_mut().expect("just pushed").1
                }
            };
            add_seed(kinds, kind, r.meta.trip_seed);
        }
    }
    by_system.retain(|(_, kinds)| kinds.len() > 1);
    by_system
}

/// Whether two recorded capacity series (per path, 1 s means) are the same, up to rounding;
/// a second without a value (NaN) matches only another one.
fn same_capacity(a: &[Vec<f64>], b: &[Vec<f64>]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(a, b)| {
            a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| {
                    (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-9 * x.abs().max(1.0)
                })
        })
}

/// How [`Loaded::trip_models`] names the model of a ride that did not record one and that
/// this build generates differently: an earlier trip model, which one unknown.
pub const MODEL_EARLIER: &str = "an earlier trip model (not recorded)";

/// A ride's trip generated again by this build from the recorded preset, seeds, interruption
/// source and window, with the configuration that generated it — or `None` when that trip's
/// handovers and capacity are not the ones the ride recorded (an earlier trip model).
/// `sources` caches the interruption distributions already read (by recorded source), so a pool
/// of many rides reads each once.
fn regenerate(
    r: &Results,
    sources: &mut BTreeMap<String, Interruption>,
) -> Result<Option<(Trip, TripConfig)>> {
    let m = &r.meta;
    let interruptions = if let Some(path) = m
        .interruptions
        .strip_prefix("SIGCOMM'22 measurements (")
        .and_then(|x| x.strip_suffix(')'))
    {
        path.to_string()
    } else if m.interruptions == "builtin" || m.interruptions.starts_with("built-in") {
        "builtin".to_string()
    } else {
        bail!("unknown interruption source `{}`", m.interruptions);
    };
    let mut cfg = TripConfig::preset(&m.preset, m.route_seed, m.trip_seed)?;
    if !m.carriers.is_empty() && m.carriers.len() != cfg.carriers.len() {
        cfg = cfg.with_carriers(m.carriers.len())?;
    }
    cfg.hold_interruptions = m.handover_interruption == "hold";
    cfg.interruption = match sources.get(&m.interruptions) {
        Some(i) => i.clone(),
        None => {
            let args = TripArgs {
                preset: m.preset.clone(),
                route_seed: m.route_seed,
                trip_seed: m.trip_seed,
                interruptions,
                handover_interruption: crate::tripgen::InterruptionMode::Hold,
                carriers: None,
            };
            let i = args.config()?.0.interruption;
            sources.insert(m.interruptions.clone(), i.clone());
            i
        }
    };
    let full = Trip::generate(&cfg)?;
    let ms = |s: f64| (s * 1000.0).round() as u64;
    let trip = full.window(ms(m.from_s), ms(m.window_s));
    let again = report::capacity_1s(&trip, r.plan.end_s);
    if report::window_handovers(&trip, r.plan.end_s) != r.handovers
        || !same_capacity(&again, &r.capacity)
    {
        return Ok(None);
    }
    Ok(Some((trip, cfg)))
}

/// The error for a ride whose trip this build generates differently.
fn not_recorded(r: &Results) -> anyhow::Error {
    anyhow::anyhow!(
        "the trip generated again from preset {} route {} trip {} is not the one recorded (an earlier trip model)",
        r.meta.preset,
        r.meta.route_seed,
        r.meta.trip_seed
    )
}

/// IM lower bounds of the messages `r`'s systems sent, over `trip` (the ride's own).
fn bounds_for(r: &Results, trip: &Trip) -> BTreeMap<(usize, usize, usize), ImBound> {
    let mut msgs = BTreeMap::new();
    for run in &r.runs {
        for x in &run.im {
            msgs.insert((x.users, x.user, x.msg), x.send_s);
        }
    }
    report::im_bounds(
        trip,
        msgs.into_iter()
            .map(|((u, user, msg), t)| (u, user, msg, t)),
    )
}

/// IM lower bounds for a ride written before they were recorded: its trip is generated again
/// ([`regenerate`]; a trip other than the recorded one is refused, not used), and the bounds
/// computed for the messages its systems sent.
#[cfg(test)]
fn rebuild_im_bounds(r: &mut Results, sources: &mut BTreeMap<String, Interruption>) -> Result<()> {
    let Some((trip, _)) = regenerate(r, sources)? else {
        return Err(not_recorded(r));
    };
    r.im_bounds = bounds_for(r, &trip);
    Ok(())
}

/// The `results.json` files of one directory: its own, or those of its `trip-<seed>/` rides
/// in trip-seed order.
fn ride_files(dir: &Path) -> Result<Vec<PathBuf>> {
    if !dir.is_dir() {
        bail!("{}: no such directory", dir.display());
    }
    let own = dir.join("results.json");
    if own.is_file() {
        return Ok(vec![own]);
    }
    let mut rides: Vec<(u64, PathBuf)> = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("list {}", dir.display()))? {
        let e = e.with_context(|| format!("list {}", dir.display()))?;
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(seed) = name.strip_prefix("trip-").and_then(|s| s.parse().ok()) else {
            continue;
        };
        let f = e.path().join("results.json");
        if !f.is_file() {
            bail!(
                "{}: ride directory without results.json (an interrupted run?)",
                e.path().display()
            );
        }
        rides.push((seed, f));
    }
    if rides.is_empty() {
        bail!(
            "{}: neither results.json nor trip-<seed>/results.json: not a bench output directory",
            dir.display()
        );
    }
    rides.sort();
    Ok(rides.into_iter().map(|(_, f)| f).collect())
}

/// `v[path]` by a dotted path, for error messages.
fn at<'a>(v: &'a Value, path: &str) -> Result<&'a Value> {
    let mut cur = v;
    for key in path.split('.') {
        cur = cur
            .get(key)
            .with_context(|| format!("lacks `{path}` (not a polycorn bench results.json?)"))?;
    }
    Ok(cur)
}

fn string(v: &Value, path: &str) -> Result<String> {
    at(v, path)?
        .as_str()
        .map(str::to_string)
        .with_context(|| format!("`{path}` is not a string"))
}

fn uint(v: &Value, path: &str) -> Result<u64> {
    at(v, path)?
        .as_u64()
        .with_context(|| format!("`{path}` is not a non-negative integer"))
}

/// A number; JSON `null` (how a non-finite value is written) reads as NaN.
fn float(v: &Value, path: &str) -> Result<f64> {
    let x = at(v, path)?;
    if x.is_null() {
        return Ok(f64::NAN);
    }
    x.as_f64()
        .with_context(|| format!("`{path}` is not a number"))
}

/// A list of strings that results written before it existed lack (absent or `null`: empty).
fn strings(v: &Value, path: &str) -> Result<Vec<String>> {
    let mut cur = v;
    for key in path.split('.') {
        match cur.get(key) {
            None | Some(Value::Null) => return Ok(vec![]),
            Some(x) => cur = x,
        }
    }
    cur.as_array()
        .with_context(|| format!("`{path}` is not a list"))?
        .iter()
        .map(|x| x.as_str().map(str::to_string))
        .collect::<Option<_>>()
        .with_context(|| format!("`{path}` holds a non-string"))
}

fn array<'a>(v: &'a Value, path: &str) -> Result<&'a Vec<Value>> {
    at(v, path)?
        .as_array()
        .with_context(|| format!("`{path}` is not an array"))
}

/// A ride back from what [`Results::to_json`] wrote. IM send schedules are not stored (only
/// each message's planned send time), so the plan's IM segments come back without them.
pub fn from_json(v: &Value) -> Result<Results> {
    let meta = Meta {
        version: string(v, "meta.version")?,
        // Absent from older results.json files.
        build: v
            .pointer("/meta/build")
            .and_then(Value::as_str)
            .map(str::to_string),
        command: v
            .pointer("/meta/command")
            .and_then(Value::as_str)
            .map(str::to_string),
        kernel: string(v, "meta.kernel")?,
        preset: string(v, "meta.preset")?,
        // Absent from older results.json files.
        trip_model: match v.pointer("/meta/trip_model") {
            None | Some(Value::Null) => None,
            Some(Value::String(m)) => Some(m.clone()),
            Some(other) => bail!("`meta.trip_model` is not a string: {other}"),
        },
        route_seed: uint(v, "meta.route_seed")?,
        trip_seed: uint(v, "meta.trip_seed")?,
        seed: uint(v, "meta.workload_seed")?,
        mode: string(v, "meta.mode")?,
        from_s: float(v, "meta.window_from_s")?,
        window_s: float(v, "meta.window_s")?,
        queue_bytes: at(v, "meta.queue_bytes")?.as_u64(),
        carriers: array(v, "meta.carriers")?
            .iter()
            .map(|c| c.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .context("`meta.carriers` holds a non-string")?,
        interruptions: string(v, "meta.interruptions")?,
        // Absent from rides that predate the field; those rides dropped them.
        handover_interruption: match v.pointer("/meta/handover_interruption") {
            None => "drop".to_string(),
            Some(_) => string(v, "meta.handover_interruption")?,
        },
        prediction: string(v, "meta.handover_prediction")?,
        started: string(v, "meta.started")?,
        // Absent from older results.json files; their trace rides name them in the prediction
        // text.
        trace_files: strings(v, "meta.trace_files")?,
        path_delays: strings(v, "meta.path_delays")?,
        path_outages: strings(v, "meta.path_outages")?,
    };
    let (bulk, oracle) = planned_flows(v, "bulk")?;
    // Absent (older results.json files): no uploads.
    let (uploads, upload_oracle) = match v.pointer("/plan/uploads") {
        None | Some(Value::Null) => (Vec::new(), BTreeMap::new()),
        Some(_) => planned_flows(v, "uploads")?,
    };
    let mut im = Vec::new();
    for (k, s) in array(v, "plan.im")?.iter().enumerate() {
        let p = |f: &str| format!("plan.im.{k}.{f}");
        im.push(ImSegment {
            users: uint(s, "users").with_context(|| p("users"))? as usize,
            start_s: float(s, "start_s").with_context(|| p("start_s"))?,
            sends_s: Vec::new(),
            deadline_s: float(s, "deadline_s").with_context(|| p("deadline_s"))?,
        });
    }
    let mut im_bounds = BTreeMap::new();
    if let Some(rows) = v.get("plan").and_then(|p| p.get("im_oracle")) {
        let rows = rows
            .as_array()
            .context("`plan.im_oracle` is not an array")?;
        for (k, row) in rows.iter().enumerate() {
            let bad =
                || format!("plan.im_oracle.{k}: expected [users, user, msg, any_s, [path_s, …]]");
            let a = row.as_array().filter(|a| a.len() == 5).with_context(bad)?;
            let u = |i: usize| a[i].as_u64().map(|x| x as usize).with_context(bad);
            let opt = |x: &Value| -> Result<Option<f64>> {
                if x.is_null() {
                    Ok(None)
                } else {
                    Ok(Some(x.as_f64().with_context(bad)?))
                }
            };
            let path_s = a[4]
                .as_array()
                .with_context(bad)?
                .iter()
                .map(opt)
                .collect::<Result<_>>()?;
            im_bounds.insert(
                (u(0)?, u(1)?, u(2)?),
                ImBound {
                    any_s: opt(&a[3])?,
                    path_s,
                },
            );
        }
    }
    let plan = Plan {
        lead_s: float(v, "plan.lead_s")?,
        bulk,
        bulk_timeout_s: float(v, "plan.bulk_timeout_s")?,
        im,
        upload_timeout_s: match v.pointer("/plan/upload_timeout_s") {
            None => 0.0,
            Some(_) => float(v, "plan.upload_timeout_s")?,
        },
        uploads,
        end_s: float(v, "plan.end_s")?,
    };
    let hofs_s = array(v, "trip.failed_handovers_in_bulk_phase_s")?
        .iter()
        .map(|x| x.as_f64().unwrap_or(f64::NAN))
        .collect();
    // Absent (older results.json files): no uploads.
    let upload_hofs_s = match v.pointer("/trip/failed_handovers_in_upload_phase_s") {
        None | Some(Value::Null) => Vec::new(),
        Some(_) => array(v, "trip.failed_handovers_in_upload_phase_s")?
            .iter()
            .map(|x| x.as_f64().unwrap_or(f64::NAN))
            .collect(),
    };
    let handovers = array(v, "trip.handovers")?
        .iter()
        .enumerate()
        .map(|(k, h)| -> Result<(f64, usize, bool)> {
            let c = || format!("trip.handovers.{k}");
            Ok((
                float(h, "t_s").with_context(c)?,
                uint(h, "carrier").with_context(c)? as usize,
                at(h, "failed").with_context(c)?.as_bool().with_context(c)?,
            ))
        })
        .collect::<Result<_>>()?;
    let capacity = array(v, "trip.capacity_mbps_1s")?
        .iter()
        .map(|p| {
            p.as_array()
                .map(|s| s.iter().map(|x| x.as_f64().unwrap_or(f64::NAN)).collect())
        })
        .collect::<Option<_>>()
        .context("`trip.capacity_mbps_1s` is not an array of arrays")?;
    let worse_path = uint(v, "trip.worse_path")? as usize;
    let runs = array(v, "runs")?
        .iter()
        .enumerate()
        .map(|(k, r)| run_from_json(r).with_context(|| format!("runs.{k}")))
        .collect::<Result<_>>()?;
    Ok(Results {
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
    })
}

/// Oracle FCT per flow index, s.
type Oracle = BTreeMap<usize, Option<f64>>;

/// The planned flows under `plan.{key}` and their oracle FCTs.
fn planned_flows(v: &Value, key: &str) -> Result<(Vec<BulkFlow>, Oracle)> {
    let mut oracle = BTreeMap::new();
    let mut flows = Vec::new();
    for (k, b) in array(v, &format!("plan.{key}"))?.iter().enumerate() {
        let p = |f: &str| format!("plan.{key}.{k}.{f}");
        let idx = uint(b, "idx").with_context(|| p("idx"))? as usize;
        let o = b.get("oracle_fct_s").and_then(Value::as_f64);
        oracle.insert(idx, o);
        flows.push(BulkFlow {
            idx,
            start_s: float(b, "start_s").with_context(|| p("start_s"))?,
            size: uint(b, "size").with_context(|| p("size"))?,
        });
    }
    Ok((flows, oracle))
}

/// The flows under `key` of a run (`flows`, `uploads`).
fn flows_from_json(r: &Value, key: &str) -> Result<Vec<FlowResult>> {
    array(r, key)?
        .iter()
        .enumerate()
        .map(|(k, f)| -> Result<FlowResult> {
            let c = || format!("{key}.{k}");
            Ok(FlowResult {
                idx: uint(f, "idx").with_context(c)? as usize,
                size: uint(f, "size").with_context(c)?,
                start_s: float(f, "start_s").with_context(c)?,
                ok: at(f, "ok")
                    .with_context(c)?
                    .as_bool()
                    .with_context(|| format!("{key}.{k}.ok is not a boolean"))?,
                error: f.get("error").and_then(Value::as_str).map(str::to_string),
                first_byte_s: float(f, "first_byte_s").with_context(c)?,
                fct_s: float(f, "fct_s").with_context(c)?,
                tail_s: float(f, "tail_s").with_context(c)?,
                bins: array(f, "bins_100ms")
                    .with_context(c)?
                    .iter()
                    .map(Value::as_u64)
                    .collect::<Option<_>>()
                    .with_context(|| format!("{key}.{k}.bins_100ms holds a non-integer"))?,
                budget: match f.get("budget") {
                    None | Some(Value::Null) => None,
                    Some(b) => Some(super::analysis::budget_from_json(b).with_context(|| {
                        format!(
                            "{key}.{k}.budget: not an object of numbers (ms) named {:?}",
                            super::analysis::BUDGET_KEYS
                        )
                    })?),
                },
            })
        })
        .collect()
}

fn run_from_json(r: &Value) -> Result<SystemRun> {
    let flows = flows_from_json(r, "flows")?;
    // Absent (older results.json files): no uploads.
    let uploads = match r.get("uploads") {
        None | Some(Value::Null) => Vec::new(),
        Some(_) => flows_from_json(r, "uploads")?,
    };
    let im = array(r, "im_messages")?
        .iter()
        .enumerate()
        .map(|(k, m)| -> Result<ImResult> {
            let bad =
                || format!("im_messages.{k}: expected [users, user, msg, send_s, delivery_s]");
            let a = m.as_array().with_context(bad)?;
            if a.len() != 5 {
                bail!(bad());
            }
            let u = |i: usize| a[i].as_u64().map(|x| x as usize).with_context(bad);
            Ok(ImResult {
                users: u(0)?,
                user: u(1)?,
                msg: u(2)?,
                send_s: a[3].as_f64().with_context(bad)?,
                delivery_s: if a[4].is_null() {
                    None
                } else {
                    Some(a[4].as_f64().with_context(bad)?)
                },
            })
        })
        .collect::<Result<_>>()?;
    Ok(SystemRun {
        system: string(r, "system")?,
        mode: string(r, "mode")?,
        spec: string(r, "spec")?,
        pipeline: match r.get("pipeline") {
            None | Some(Value::Null) => None,
            Some(Value::String(p)) => Some(p.clone()),
            Some(other) => bail!("`pipeline` is not a string: {other}"),
        },
        congestion: match r.get("congestion") {
            None | Some(Value::Null) => None,
            Some(Value::String(c)) => Some(c.clone()),
            Some(other) => bail!("`congestion` is not a string: {other}"),
        },
        ready_s: float(r, "ready_s")?,
        // Absent in rides recorded before it existed: every path was up (or the run failed).
        late_paths: strings(r, "late_paths")?,
        error: r.get("error").and_then(Value::as_str).map(str::to_string),
        flows,
        im,
        uploads,
        path_down_bytes: array(r, "path_down_bytes")?
            .iter()
            .map(Value::as_u64)
            .collect::<Option<_>>()
            .context("`path_down_bytes` holds a non-integer")?,
        path_up_bytes: match r.get("path_up_bytes") {
            None | Some(Value::Null) => Vec::new(),
            Some(_) => array(r, "path_up_bytes")?
                .iter()
                .map(Value::as_u64)
                .collect::<Option<_>>()
                .context("`path_up_bytes` holds a non-integer")?,
        },
        counters: at(r, "counters")?
            .as_object()
            .context("`counters` is not an object")?
            .iter()
            .map(|(k, x)| (k.clone(), x.as_f64().unwrap_or(f64::NAN)))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report;

    fn ride(seed: u64) -> Results {
        let mut r = report::tests::synthetic();
        r.meta.trip_seed = seed;
        r
    }

    fn write(dir: &Path, r: &Results) {
        std::fs::create_dir_all(dir).unwrap();
        r.write_all(dir).unwrap();
    }

    #[test]
    fn uploads_read_back_pool_apart_from_downloads_and_older_rides_have_none() {
        let with = |seed| {
            let mut r = report::tests::synthetic_with(crate::bench::plan::PlanParams {
                uploads: 3,
                ..crate::bench::plan::PlanParams::quick()
            });
            r.meta.trip_seed = seed;
            r
        };
        let (a, mut b) = (with(1), with(2));
        b.runs[3].uploads[2].ok = false;
        b.runs[3].uploads[2].error = Some("not complete after 40 s".into());
        let text =
            |r: &Results| -> Value { serde_json::from_str(&r.to_json().to_string()).unwrap() };
        let back = from_json(&text(&b)).unwrap();
        assert_eq!(back.runs, b.runs);
        assert_eq!(back.plan.uploads, b.plan.uploads);
        assert_eq!(back.plan.upload_timeout_s, b.plan.upload_timeout_s);
        assert_eq!(back.plan.end_s, b.plan.end_s);
        assert_eq!(back.upload_oracle, b.upload_oracle);
        assert_eq!(back.upload_hofs_s, b.upload_hofs_s);
        assert!(back.upload_oracle.values().all(Option::is_some));
        let (pooled, j) = report::pooled(&[from_json(&text(&a)).unwrap(), back]);
        assert!(
            pooled.contains("per-flow goodput ratio of uploads vs vanilla"),
            "{pooled}"
        );
        assert!(pooled.contains("FCT / oracle of uploads"), "{pooled}");
        // One upload per size and ride; the failed one (ride 2's 4 MB) is paired nowhere.
        let up = &j["systems"]["hrsch"]["upload"]["1048576"]["goodput_ratio_vs_vanilla"];
        assert_eq!(up["n"], 2, "{up}");
        assert!(up["mean"].as_f64().unwrap() > 1.0, "{up}");
        let up = &j["systems"]["hrsch"]["upload"]["4194304"]["goodput_ratio_vs_vanilla"];
        assert_eq!(up["n"], 1, "{up}");
        let down = &j["systems"]["hrsch"]["bulk"]["1048576"]["goodput_ratio_vs_vanilla"];
        assert_eq!(down["n"], 4, "{down}");
        // A ride written before uploads existed has none, and pools without upload tables.
        let mut old = text(&ride(3));
        old["plan"].as_object_mut().unwrap().remove("uploads");
        old["plan"]
            .as_object_mut()
            .unwrap()
            .remove("upload_timeout_s");
        for run in old["runs"].as_array_mut().unwrap() {
            let run = run.as_object_mut().unwrap();
            run.remove("uploads");
            run.remove("path_up_bytes");
            run.remove("upload");
        }
        let old = from_json(&old).unwrap();
        assert!(old.plan.uploads.is_empty() && old.runs.iter().all(|r| r.uploads.is_empty()));
        // …and joins a ride of the same conditions written now.
        assert_eq!(old.plan, from_json(&text(&ride(3))).unwrap().plan);
        assert!(!report::pooled(&[old]).0.contains("uploads"));
    }

    #[test]
    fn a_ride_reads_back_as_written() {
        let mut r = ride(4);
        // A failed flow and an unanswered message survive the trip through JSON too.
        r.runs[1].flows[0].ok = false;
        r.runs[1].flows[0].error = Some("timed out".into());
        r.runs[2].im[0].delivery_s = None;
        // Through text, as on disk: every number must come back bit for bit.
        let text = |r: &Results| serde_json::from_str(&r.to_json().to_string()).unwrap();
        let back = from_json(&text(&r)).unwrap();
        assert_eq!(back.runs, r.runs);
        assert_eq!(back.oracle, r.oracle);
        assert!(!r.im_bounds.is_empty());
        assert_eq!(back.im_bounds, r.im_bounds);
        assert_eq!(back.plan.bulk, r.plan.bulk);
        assert_eq!(back.hofs_s, r.hofs_s);
        assert_eq!(back.handovers, r.handovers);
        assert_eq!(back.worse_path, r.worse_path);
        assert_eq!(back.meta.trip_seed, 4);
        assert_eq!(back.meta.queue_bytes, r.meta.queue_bytes);
        // Pooling what was read gives what pooling the originals gives.
        let mut r2 = ride(5);
        r2.runs[3].flows[1].fct_s *= 2.0;
        let back2 = from_json(&text(&r2)).unwrap();
        assert_eq!(report::pooled(&[back, back2]).0, report::pooled(&[r, r2]).0);
    }

    #[test]
    fn a_ride_without_im_bounds_gets_them_from_its_trip_generated_again() {
        // As a bench writes it: every system sent the planned messages at the planned times.
        let mut r = report::tests::synthetic();
        let plan = r.plan.clone();
        for run in &mut r.runs {
            for m in &mut run.im {
                let seg = plan.im.iter().find(|s| s.users == m.users).unwrap();
                m.send_s = seg.start_s + seg.sends_s[m.user][m.msg];
            }
        }
        // Written by a build before the bounds were recorded.
        let mut v = r.to_json();
        v["plan"].as_object_mut().unwrap().remove("im_oracle");
        let v: Value = serde_json::from_str(&v.to_string()).unwrap();
        let mut back = from_json(&v).unwrap();
        assert!(back.im_bounds.is_empty());
        rebuild_im_bounds(&mut back, &mut BTreeMap::new()).unwrap();
        assert_eq!(back.im_bounds, r.im_bounds);
        // A ride whose recorded trip is not the one its seeds give now is refused, not used.
        let mut other = from_json(&v).unwrap();
        other.meta.trip_seed = 2;
        let e = format!(
            "{:#}",
            rebuild_im_bounds(&mut other, &mut BTreeMap::new()).unwrap_err()
        );
        assert!(e.contains("not the one recorded"), "{e}");
        assert!(other.im_bounds.is_empty());
        // Pooled, such a ride leaves the lower bound out instead of mixing rides.
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("old");
        std::fs::create_dir_all(&d).unwrap();
        let mut bad = v.clone();
        bad["meta"]["trip_seed"] = serde_json::json!(7);
        std::fs::write(d.join("results.json"), bad.to_string()).unwrap();
        let loaded = load_dirs_only(&[d], &[]).unwrap();
        assert_eq!(loaded.unbounded.len(), 1, "{:?}", loaded.unbounded);
        assert!(loaded.unbounded[0].1.contains("results.json"));
        let rides: Vec<Results> = loaded.rides.into_iter().map(|(_, r)| r).collect();
        let (text, j) = report::pooled(&rides);
        assert!(text.contains("no IM lower bound"), "{text}");
        assert_eq!(j["im_lower_bound"], serde_json::json!({}));
    }

    #[test]
    fn rides_of_several_invocations_pool_together() {
        let dir = tempfile::tempdir().unwrap();
        let (multi, single) = (dir.path().join("multi"), dir.path().join("one"));
        write(&multi.join("trip-10"), &ride(10));
        write(&multi.join("trip-9"), &ride(9));
        write(&single, &ride(30));
        let rides = load_dirs(&[single.clone(), multi.clone()]).unwrap();
        let seeds: Vec<u64> = rides.iter().map(|(_, r)| r.meta.trip_seed).collect();
        assert_eq!(seeds, [30, 9, 10], "given order, rides by seed");
        let out = dir.path().join("pooled");
        run(&PoolArgs {
            dirs: vec![multi.clone(), single.clone()],
            out: Some(out.clone()),
            systems: Vec::new(),
        })
        .unwrap();
        let text = std::fs::read_to_string(out.join("pooled.txt")).unwrap();
        assert!(
            text.contains("pooled over 3 rides (trip seeds [9, 10, 30])"),
            "{text}"
        );
        let j: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("pooled.json")).unwrap())
                .unwrap();
        assert_eq!(
            j["systems"]["hrsch"]["bulk"]["262144"]["goodput_ratio_vs_vanilla"]["rides"],
            3
        );
    }

    #[test]
    fn a_preset_that_changed_between_builds_is_flagged_and_its_pipeline_survives_the_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let d = |n: &str| dir.path().join(n);
        // Rides 1-2 from before results held the pipeline, 3-4 with one, 5 with another.
        for seed in 1..=5u64 {
            let mut r = ride(seed);
            for x in r.runs.iter_mut().filter(|x| x.system == "hrsch") {
                x.pipeline = match seed {
                    1 | 2 => None,
                    3 | 4 => Some("hpr,minrtt,tpr,ori+er(k=3)".into()),
                    _ => Some("hpr,minrtt,tpr,ori(thin_bytes=5600)+er(k=3)".into()),
                };
            }
            write(&d(&format!("runs/trip-{seed}")), &r);
        }
        let back = load_dirs(&[d("runs/trip-3")]).unwrap();
        let hrsch = back[0].1.runs.iter().find(|x| x.system == "hrsch").unwrap();
        assert_eq!(
            hrsch.pipeline.as_deref(),
            Some("hpr,minrtt,tpr,ori+er(k=3)")
        );
        let mixed = load_dirs_only(&[d("runs")], &[]).unwrap().pipelines;
        assert_eq!(
            mixed,
            [(
                "hrsch".to_string(),
                vec![
                    (PIPELINE_NOT_RECORDED.to_string(), vec![1, 2]),
                    ("hpr,minrtt,tpr,ori+er(k=3) with cubic".to_string(), vec![3, 4]),
                    (
                        "hpr,minrtt,tpr,ori(thin_bytes=5600)+er(k=3) with cubic".to_string(),
                        vec![5]
                    ),
                ]
            )],
            "only the system whose scheduler differs; vanilla (no pipeline anywhere) is not flagged"
        );
        assert!(load_dirs_only(&[d("runs/trip-3"), d("runs/trip-4")], &[])
            .unwrap()
            .pipelines
            .is_empty());
        assert_eq!(seed_list(&[5, 1, 2, 3, 9, 10, 3]), "1-3, 5, 9-10");
        // The same scheduler under another congestion control: rides that did not record it
        // ran CUBIC (or BBR with `+bbr` in the name), rides 7-8 recorded BBR.
        for seed in 6..=8u64 {
            let mut r = ride(seed);
            for x in r.runs.iter_mut() {
                x.pipeline = Some("hpr,minrtt,tpr,ori+er(k=3)".into());
                x.congestion = (seed > 6).then(|| "bbr".to_string());
            }
            r.runs[2].system = "vanilla+bbr".into();
            write(&d(&format!("cc/trip-{seed}")), &r);
        }
        let back = load_dirs(&[d("cc/trip-7")]).unwrap();
        assert_eq!(back[0].1.runs[1].congestion.as_deref(), Some("bbr"));
        let mixed = load_dirs_only(&[d("cc")], &[]).unwrap().pipelines;
        let names: Vec<&str> = mixed.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["hrsch"],
            "`vanilla+bbr` ran BBR also before it was recorded: {mixed:?}"
        );
        for (_, kinds) in &mixed {
            assert_eq!(
                kinds
                    .iter()
                    .map(|(k, s)| (k.as_str(), s.clone()))
                    .collect::<Vec<_>>(),
                [
                    ("hpr,minrtt,tpr,ori+er(k=3) with cubic", vec![6]),
                    ("hpr,minrtt,tpr,ori+er(k=3) with bbr", vec![7, 8])
                ]
            );
        }
        // A pipeline that is not a string is refused, naming the key.
        let mut v = ride(6).to_json();
        v["runs"][3]["pipeline"] = serde_json::json!(7);
        std::fs::create_dir_all(d("bad")).unwrap();
        std::fs::write(d("bad/results.json"), v.to_string()).unwrap();
        let e = format!("{:#}", load_dirs(&[d("bad")]).unwrap_err());
        assert!(
            e.contains("`pipeline` is not a string") && e.contains("results.json"),
            "{e}"
        );
    }

    /// Ride 1 with only the systems `keep` (of mptcp, single, vanilla, hrsch).
    fn ride_with(seed: u64, keep: &[&str]) -> Results {
        let mut r = ride(seed);
        r.runs.retain(|x| keep.contains(&x.system.as_str()));
        r
    }

    #[test]
    fn a_system_added_to_a_ride_later_joins_the_ride() {
        let dir = tempfile::tempdir().unwrap();
        let d = |n: &str| dir.path().join(n);
        write(&d("first/trip-1"), &ride_with(1, &["mptcp", "single"]));
        write(&d("first/trip-2"), &ride_with(2, &["mptcp", "single"]));
        for seed in [1, 2] {
            let mut later = ride_with(seed, &["vanilla", "hrsch"]);
            later.meta.version = "0.1.0 (later)".into();
            write(&d(&format!("later/trip-{seed}")), &later);
        }
        let loaded = load_dirs_only(&[d("first"), d("later")], &[]).unwrap();
        assert_eq!(loaded.rides.len(), 2, "two rides, not four");
        assert_eq!(
            loaded.versions.len(),
            2,
            "both builds: {:?}",
            loaded.versions
        );
        assert_eq!(
            loaded.merged,
            [
                (
                    1,
                    vec![
                        d("first/trip-1/results.json"),
                        d("later/trip-1/results.json")
                    ]
                ),
                (
                    2,
                    vec![
                        d("first/trip-2/results.json"),
                        d("later/trip-2/results.json")
                    ]
                ),
            ]
        );
        // The same tables as if every system had run in one invocation.
        let rides: Vec<Results> = loaded.rides.into_iter().map(|(_, r)| r).collect();
        assert!(rides.iter().all(|r| r.meta.version != "0.1.0 (later)"));
        assert_eq!(
            report::pooled(&rides).0,
            report::pooled(&[ride(1), ride(2)]).0
        );

        // hrsch in both runs of ride 1: refused, naming the system, unless --systems picks.
        write(&d("again/trip-1"), &ride_with(1, &["hrsch", "single"]));
        let e = format!(
            "{:#}",
            load_dirs_only(&[d("first"), d("again")], &[]).unwrap_err()
        );
        assert!(
            e.contains("system `single`") && e.contains("--systems"),
            "{e}"
        );
        let only = ["mptcp".to_string(), "hrsch".to_string()];
        let loaded = load_dirs_only(&[d("first"), d("again")], &only).unwrap();
        let systems: Vec<&str> = loaded.rides[0]
            .1
            .runs
            .iter()
            .map(|x| x.system.as_str())
            .collect();
        assert_eq!(systems, ["mptcp", "hrsch"]);
        assert_eq!(loaded.rides.len(), 2, "ride 2 keeps its mptcp");

        // A name no ride has is an error listing what the rides have.
        let e = format!(
            "{:#}",
            load_dirs_only(&[d("first")], &["polycorn".to_string()]).unwrap_err()
        );
        assert!(
            e.contains("no ride has system `polycorn`") && e.contains("mptcp, single"),
            "{e}"
        );

        // Another workload on the same trip is another experiment: refused.
        let mut other = ride_with(1, &["vanilla"]);
        other.meta.seed = 99;
        write(&d("other/trip-1"), &other);
        let e = format!(
            "{:#}",
            load_dirs_only(&[d("first"), d("other")], &[]).unwrap_err()
        );
        assert!(e.contains("another workload seed"), "{e}");
    }

    /// Rides of recorded traces pool with rides of the same traces only; what a ride records
    /// (trace files, per-path delays, late paths) survives the round trip.
    #[test]
    fn rides_of_other_traces_do_not_pool() {
        let dir = tempfile::tempdir().unwrap();
        let d = |n: &str| dir.path().join(n);
        for (name, seed, model) in [
            ("a/trip-1", 1, "traces-aaaaaaaaaaaa"),
            ("a/trip-2", 2, "traces-aaaaaaaaaaaa"),
            ("b/trip-3", 3, "traces-bbbbbbbbbbbb"),
        ] {
            let mut r = ride(seed);
            r.meta.preset = report::TRACES_PRESET.into();
            r.meta.trip_model = Some(model.into());
            r.meta.trace_files = vec!["x.down".into(), "y.csv".into()];
            r.meta.path_delays = vec!["x: 20 ms".into(), "y: half the log's PINGMIN".into()];
            r.meta.path_outages = vec!["x: x.outages.csv (2 outages)".into()];
            r.runs[0].late_paths = vec!["y".into()];
            write(&d(name), &r);
        }
        let back = load_dirs(&[d("a")]).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].1.meta.trace_files, ["x.down", "y.csv"]);
        assert_eq!(back[0].1.meta.path_delays[1], "y: half the log's PINGMIN");
        assert_eq!(
            back[0].1.meta.path_outages,
            ["x: x.outages.csv (2 outages)"]
        );
        assert_eq!(back[0].1.runs[0].late_paths, ["y"]);
        let e = format!("{:#}", load_dirs(&[d("a"), d("b")]).unwrap_err());
        assert!(
            e.contains("recorded traces `traces-bbbbbbbbbbbb` differ from `traces-aaaaaaaaaaaa`"),
            "{e}"
        );
    }

    #[test]
    fn rides_of_another_trip_model_are_flagged_and_never_combined_into_one_ride() {
        let dir = tempfile::tempdir().unwrap();
        let d = |n: &str| dir.path().join(n);
        // Rides 1-2 older (no model recorded), 3-4 one model, 5 another.
        for seed in 1..=5u64 {
            let mut r = ride(seed);
            r.meta.trip_model = match seed {
                1 | 2 => None,
                3 | 4 => Some("hsr-aaaaaaaaaaaa".into()),
                _ => Some("hsr-bbbbbbbbbbbb".into()),
            };
            write(&d(&format!("runs/trip-{seed}")), &r);
        }
        let back = load_dirs(&[d("runs/trip-5")]).unwrap();
        assert_eq!(
            back[0].1.meta.trip_model.as_deref(),
            Some("hsr-bbbbbbbbbbbb")
        );
        // Ride 1's trip is what this build generates for it (the synthetic ride is trip 1);
        // ride 2 recorded trip 1's conditions under seed 2, so to this build it is a ride of
        // an earlier model.
        let this_build =
            crate::tripgen::trip_model_id(&TripArgs::builtin("hsr", 1, 1).config().unwrap().0)
                .unwrap();
        assert_eq!(
            load_dirs_only(&[d("runs")], &[]).unwrap().trip_models,
            [
                (this_build, vec![1]),
                (MODEL_EARLIER.to_string(), vec![2]),
                ("hsr-aaaaaaaaaaaa".to_string(), vec![3, 4]),
                ("hsr-bbbbbbbbbbbb".to_string(), vec![5]),
            ]
        );
        assert_eq!(
            load_dirs_only(&[d("runs/trip-3"), d("runs/trip-4")], &[])
                .unwrap()
                .trip_models
                .len(),
            1
        );

        // One ride's systems from two runs of different models: refused, naming both.
        write(&d("first/trip-1"), &{
            let mut r = ride_with(1, &["mptcp", "single"]);
            r.meta.trip_model = Some("hsr-aaaaaaaaaaaa".into());
            r
        });
        write(&d("later/trip-1"), &{
            let mut r = ride_with(1, &["vanilla", "hrsch"]);
            r.meta.trip_model = Some("hsr-bbbbbbbbbbbb".into());
            r
        });
        let e = format!(
            "{:#}",
            load_dirs_only(&[d("first"), d("later")], &[]).unwrap_err()
        );
        assert!(
            e.contains("hsr-aaaaaaaaaaaa")
                && e.contains("hsr-bbbbbbbbbbbb")
                && e.contains("do not combine"),
            "{e}"
        );
        // Without a recorded model, the recorded conditions decide: other capacity, refused.
        write(&d("old/trip-1"), &{
            let mut r = ride_with(1, &["vanilla", "hrsch"]);
            r.meta.trip_model = None;
            r.capacity[0][3] *= 1.5;
            r
        });
        let e = format!(
            "{:#}",
            load_dirs_only(&[d("first"), d("old")], &[]).unwrap_err()
        );
        assert!(e.contains("different emulated conditions"), "{e}");
        // The same conditions, one run older: they combine.
        write(&d("same/trip-1"), &{
            let mut r = ride_with(1, &["vanilla", "hrsch"]);
            r.meta.trip_model = None;
            r
        });
        assert_eq!(
            load_dirs_only(&[d("first"), d("same")], &[])
                .unwrap()
                .rides
                .len(),
            1
        );
    }

    #[test]
    fn what_cannot_pool_is_refused_with_the_file_named() {
        let dir = tempfile::tempdir().unwrap();
        let d = |n: &str| dir.path().join(n);
        write(&d("a"), &ride(1));
        write(&d("again"), &ride(1));
        let refused = |dirs: &[&str], needles: &[&str]| {
            let dirs: Vec<PathBuf> = dirs.iter().map(|n| d(n)).collect();
            let e = format!("{:#}", load_dirs(&dirs).unwrap_err());
            for n in needles {
                assert!(e.contains(n), "`{n}` not in: {e}");
            }
        };
        refused(&["a", "again"], &["already pooled", "again"]);

        let mut other = ride(2);
        other.meta.route_seed = 7;
        write(&d("route7"), &other);
        refused(&["a", "route7"], &["route 7 differs from route 1"]);

        let mut full = ride(3);
        full.meta.mode = "full".into();
        write(&d("full"), &full);
        refused(&["a", "full"], &["mode", "full"]);

        // Rides on a testbed that dropped successful handovers' packets do not pool with
        // rides that held them; results written before the field existed dropped them.
        let mut dropped = ride(4);
        dropped.meta.handover_interruption = "drop".into();
        write(&d("dropped"), &dropped);
        refused(&["a", "dropped"], &["held or dropped", "`drop`", "`hold`"]);
        let mut old = serde_json::from_str::<Value>(
            &std::fs::read_to_string(d("dropped/results.json")).unwrap(),
        )
        .unwrap();
        old["meta"]
            .as_object_mut()
            .unwrap()
            .remove("handover_interruption");
        let old = from_json(&old).unwrap();
        assert_eq!(old.meta.handover_interruption, "drop");

        std::fs::create_dir_all(d("empty")).unwrap();
        refused(&["empty"], &["not a bench output directory"]);
        refused(&["missing"], &["no such directory"]);

        std::fs::create_dir_all(d("broken/trip-4")).unwrap();
        std::fs::write(d("broken/trip-4/results.json"), "{\"meta\": ").unwrap();
        refused(&["broken"], &["trip-4/results.json", "not valid JSON"]);

        std::fs::create_dir_all(d("partial/trip-5")).unwrap();
        std::fs::write(d("partial/trip-5/results.json"), "{\"meta\": {}}").unwrap();
        refused(&["partial"], &["trip-5/results.json", "meta.version"]);

        std::fs::create_dir_all(d("cut/trip-6")).unwrap();
        refused(&["cut"], &["without results.json"]);
    }
}
