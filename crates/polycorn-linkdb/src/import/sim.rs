//! The testbed's trips: in process ([`from_trip`]) or from `polycorn trip generate` output
//! ([`from_dir`]: `trip.json`, `handovers.csv`, `context.csv`).
//!
//! Handovers keep the model's ground truth (true start position, RSRP, outcome). GPS fixes are
//! the noisy 1 Hz fixes of the context log, projected on the track ([`Track`]) — what a relay
//! would report. The trip model drives one way, so every trip is `up`.

use std::path::Path;

use polycorn_link::trip::{Outcome as TruthOutcome, Trip, TripConfig};

use super::{read, sealed, Csv, ImportError, ImportReport};
use crate::predict::Track;
use crate::record::{
    Direction, HandoverRecord, LossRecord, Outcome, RadioSample, Sample, Source, TripData, TripMeta,
};

/// The route name shared by all trips of a preset and route seed.
pub fn route_name(preset: &str, route_seed: u64) -> String {
    format!("{preset}/route{route_seed}")
}

/// The trip name.
pub fn trip_name(preset: &str, route_seed: u64, trip_seed: u64) -> String {
    format!("{preset}-r{route_seed}-t{trip_seed}")
}

fn track(cfg: &TripConfig) -> Track {
    Track {
        origin: cfg.origin,
        heading_deg: cfg.heading_deg,
    }
}

/// A generated trip.
pub fn from_trip(trip: &Trip) -> TripData {
    let cfg = &trip.config;
    let carriers: Vec<String> = trip.paths.iter().map(|p| p.name.clone()).collect();
    let tr = track(cfg);
    let handovers = trip
        .handovers
        .iter()
        .map(|h| HandoverRecord {
            carrier: carriers[h.carrier].clone(),
            from_cell: h.from_cell.to_string(),
            to_cell: Some(h.to_cell.to_string()),
            direction: Direction::Up,
            start_ms: h.start_ms,
            position_m: Some(h.position_m),
            lat: Some(h.lat),
            lon: Some(h.lon),
            rsrp_dbm: Some(h.rsrp_dbm),
            outcome: match h.outcome {
                TruthOutcome::Success => Outcome::Success,
                TruthOutcome::Failure => Outcome::Failure,
            },
            interruption_ms: Some(h.interruption_ms),
            lost: h.lost.map(|l| LossRecord {
                t_ms: l.t_ms,
                position_m: Some(l.position_m),
                lat: Some(l.lat),
                lon: Some(l.lon),
                rsrp_dbm: Some(l.rsrp_dbm),
            }),
        })
        .collect();
    let mut samples = Vec::with_capacity(trip.context.len());
    let mut radio = Vec::with_capacity(trip.context.len() * carriers.len());
    for r in &trip.context {
        samples.push(Sample {
            t_ms: r.t_ms,
            lat: Some(r.lat),
            lon: Some(r.lon),
            position_m: Some(tr.position_m(r.lat, r.lon)),
            speed_mps: Some(r.speed_mps),
            heading_deg: Some(r.heading_deg),
        });
        for (c, name) in r.carriers.iter().zip(&carriers) {
            radio.push(RadioSample {
                t_ms: r.t_ms,
                carrier: name.clone(),
                cell: c.cell.map(|x| x.to_string()),
                rsrp_dbm: c.rsrp_dbm,
            });
        }
    }
    sealed(
        TripMeta {
            key: String::new(),
            source: Source::Sim,
            name: trip_name(&cfg.name, cfg.route_seed, cfg.trip_seed),
            route: route_name(&cfg.name, cfg.route_seed),
            direction: Direction::Up,
            carriers,
            duration_ms: trip.duration_ms,
            started_ms: None,
        },
        handovers,
        samples,
        radio,
    )
}

/// Generate trips `trip_seeds` of a preset and route in process.
pub fn simulate(
    preset: &str,
    route_seed: u64,
    trip_seeds: impl IntoIterator<Item = u64>,
) -> Result<Vec<TripData>, ImportError> {
    trip_seeds
        .into_iter()
        .map(|s| simulate_one(&TripConfig::preset(preset, route_seed, s)?))
        .collect()
}

/// Generate the trip `cfg` describes in process, as LinkDB imports it.
pub fn simulate_one(cfg: &TripConfig) -> Result<TripData, ImportError> {
    Ok(from_trip(&Trip::generate(cfg)?))
}

fn json_field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("\"{key}\"");
    let rest = &text[text.find(&pat)? + pat.len()..];
    let rest = rest.trim_start().strip_prefix(':')?.trim_start();
    let end = if let Some(s) = rest.strip_prefix('"') {
        return s.find('"').map(|e| &s[..e]);
    } else if rest.starts_with('[') {
        rest.find(']')? + 1
    } else {
        rest.find([',', '\n', '}']).unwrap_or(rest.len())
    };
    Some(rest[..end].trim())
}

/// A trip directory written by `polycorn trip generate`. Bad rows of `handovers.csv` and
/// `context.csv` are reported with file:line; a missing file or column is an error.
pub fn from_dir(dir: &Path) -> Result<(TripData, ImportReport), ImportError> {
    let mut rep = ImportReport::default();
    let meta_path = dir.join("trip.json");
    let meta_text = read(&meta_path)?;
    let fmt_err = |problem: String| ImportError::Format {
        path: meta_path.clone(),
        line: 1,
        problem,
    };
    let field =
        |k: &str| json_field(&meta_text, k).ok_or_else(|| fmt_err(format!("no `{k}` field")));
    let preset = field("preset")?.to_string();
    let route_seed: u64 = field("route_seed")?
        .parse()
        .map_err(|e| fmt_err(format!("route_seed: {e}")))?;
    let trip_seed: u64 = field("trip_seed")?
        .parse()
        .map_err(|e| fmt_err(format!("trip_seed: {e}")))?;
    let duration_ms: u64 = field("duration_ms")?
        .parse()
        .map_err(|e| fmt_err(format!("duration_ms: {e}")))?;
    let carriers: Vec<String> = field("carriers")?
        .trim_matches(['[', ']'])
        .split(',')
        .map(|c| c.trim().trim_matches('"').to_string())
        .filter(|c| !c.is_empty())
        .collect();
    if carriers.is_empty() {
        return Err(fmt_err("no carriers".into()));
    }
    let cfg = TripConfig::preset(&preset, route_seed, trip_seed)?;
    let tr = track(&cfg);
    rep.files += 3;

    // handovers.csv
    let hpath = dir.join("handovers.csv");
    let csv = Csv::read(&hpath)?;
    let hc = |n: &str| csv.col(n);
    let (c_car, c_from, c_to, c_start, c_pos, c_lat, c_lon, c_rsrp, c_out, c_int) = (
        hc("carrier")?,
        hc("from_cell")?,
        hc("to_cell")?,
        hc("start_ms")?,
        hc("position_m")?,
        hc("lat")?,
        hc("lon")?,
        hc("rsrp_dbm")?,
        hc("outcome")?,
        hc("interruption_ms")?,
    );
    // Written since the loss of the source was recorded apart from the start; older files
    // have none (every failure then counts as lost at its start).
    let c_lost = [
        "lost_ms",
        "lost_position_m",
        "lost_lat",
        "lost_lon",
        "lost_rsrp_dbm",
    ]
    .map(|n| csv.col(n).ok());
    let mut handovers = Vec::new();
    csv.rows(&mut rep, |f| {
        let num = |i: usize| f[i].parse::<f64>().ok().filter(|x| x.is_finite());
        if !carriers.iter().any(|c| c == f[c_car]) {
            return Err(format!("carrier `{}` not in trip.json", f[c_car]));
        }
        if f[c_from].is_empty() {
            return Err("empty from_cell".into());
        }
        let lost_num = |k: usize| c_lost[k].and_then(num);
        let lost = match c_lost[0].map(|c| f[c]).filter(|v| !v.is_empty()) {
            None => None,
            Some(v) => Some(LossRecord {
                t_ms: v
                    .parse()
                    .map_err(|_| format!("lost_ms `{v}` is not a whole number"))?,
                position_m: lost_num(1),
                lat: lost_num(2),
                lon: lost_num(3),
                rsrp_dbm: lost_num(4),
            }),
        };
        let h = HandoverRecord {
            carrier: f[c_car].to_string(),
            from_cell: f[c_from].to_string(),
            to_cell: (!f[c_to].is_empty()).then(|| f[c_to].to_string()),
            direction: Direction::Up,
            start_ms: f[c_start]
                .parse()
                .map_err(|_| format!("start_ms `{}` is not a whole number", f[c_start]))?,
            position_m: Some(num(c_pos).ok_or(format!("position_m `{}`", f[c_pos]))?),
            lat: num(c_lat),
            lon: num(c_lon),
            rsrp_dbm: num(c_rsrp),
            outcome: f[c_out].parse()?,
            interruption_ms: f[c_int].parse().ok(),
            lost,
        };
        handovers.push(h);
        Ok(())
    });

    // context.csv
    let (_, samples, radio) = super::relay::read_context(
        &dir.join("context.csv"),
        Some(&carriers),
        None,
        &tr,
        &mut rep,
    )?;
    let data = sealed(
        TripMeta {
            key: String::new(),
            source: Source::Sim,
            name: trip_name(&preset, route_seed, trip_seed),
            route: route_name(&preset, route_seed),
            direction: Direction::Up,
            carriers,
            duration_ms,
            started_ms: None,
        },
        handovers,
        samples,
        radio,
    );
    Ok((data, rep))
}
