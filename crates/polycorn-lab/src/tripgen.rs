//! `polycorn trip generate`: write a synthetic trip as files an operator or LinkDB can use.
//!
//! Output directory:
//! * `<carrier>.down`, `<carrier>.up` — mahimahi delivery traces (played once);
//! * `<carrier>.delay.csv` — one-way delay series (`t_ms,delay_ms`);
//! * `<carrier>.outages.csv` — spans without delivery (`start_ms,end_ms`);
//! * `<carrier>.interruptions.csv` — the successful handovers' interruptions among them, whose
//!   packets the testbed holds rather than drops (`--handover-interruption`);
//! * `context.csv` — 1 Hz GPS fix, speed, heading, serving cell and RSRP per carrier;
//! * `handovers.csv` — ground truth: every handover with position, RSRP and outcome;
//! * `trip.json` — what was generated (preset, seeds, trip-model identity, version, durations,
//!   counts).

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use polycorn_link::trace::{DelaySeries, DeliveryTrace, Outages};
use polycorn_link::trip::{Interruption, Outcome, PathProcess, Trip, TripConfig, STEP_MS};

/// Which trip: preset, seeds, and where successful-handover interruptions come from.
#[derive(Args, Debug, Clone)]
pub struct TripArgs {
    /// Trip preset (hsr, ktx).
    #[arg(long, default_value = "hsr")]
    pub preset: String,
    /// Route seed (cells, shadowing; shared by all trips of a route).
    #[arg(long, default_value_t = 1)]
    pub route_seed: u64,
    /// Trip seed (this ride).
    #[arg(long, default_value_t = 1)]
    pub trip_seed: u64,
    /// Successful-handover interruption times: `auto` (the SIGCOMM'22 measurements in
    /// ../shared/data/sigcomm22/HO-exec-duration.csv when present, else `builtin`), `builtin`
    /// (a lognormal fitted to them, median 34 ms), or the path of such a CSV.
    #[arg(long, default_value = "auto")]
    pub interruptions: String,
    /// Packets reaching a carrier during a successful handover's interruption: `hold` (they
    /// wait for the target cell, as LTE's X2 data forwarding does) or `drop` (lost, as in a
    /// failed handover's blackout).
    #[arg(long, value_enum, default_value_t = InterruptionMode::Hold)]
    pub handover_interruption: InterruptionMode,
    /// Carriers of the trip instead of the preset's ([`TripConfig::with_carriers`]); set by
    /// `polycorn sim sweep`, not a command-line option.
    #[arg(skip)]
    pub carriers: Option<usize>,
}

/// What the emulated links do with packets during a successful handover's interruption.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterruptionMode {
    /// Queue them until the interruption ends.
    Hold,
    /// Drop them.
    Drop,
}

impl InterruptionMode {
    /// The name used on the command line and in results.
    pub fn name(self) -> &'static str {
        match self {
            InterruptionMode::Hold => "hold",
            InterruptionMode::Drop => "drop",
        }
    }
}

/// Where `auto` looks for the SIGCOMM'22 file.
fn sigcomm22_candidates() -> Vec<PathBuf> {
    let rel = "shared/data/sigcomm22/HO-exec-duration.csv";
    vec![
        Path::new("..").join(rel),
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../..")
            .join(rel),
    ]
}

impl TripArgs {
    /// A ride of `preset` with the built-in interruption times and their packets held.
    pub fn builtin(preset: &str, route_seed: u64, trip_seed: u64) -> Self {
        TripArgs {
            preset: preset.into(),
            route_seed,
            trip_seed,
            interruptions: "builtin".into(),
            handover_interruption: InterruptionMode::Hold,
            carriers: None,
        }
    }

    /// The preset of ride `trip_seed` of this route, over [`TripArgs::carriers`] carriers when
    /// set, with the preset's own interruption times.
    pub fn preset_config(&self, trip_seed: u64) -> Result<TripConfig> {
        let cfg = TripConfig::preset(&self.preset, self.route_seed, trip_seed)?;
        Ok(match self.carriers {
            Some(n) => cfg.with_carriers(n)?,
            None => cfg,
        })
    }

    /// The trip configuration, and a description of the interruption source used.
    pub fn config(&self) -> Result<(TripConfig, String)> {
        let mut cfg = self.preset_config(self.trip_seed)?;
        cfg.hold_interruptions = self.handover_interruption == InterruptionMode::Hold;
        let file = match self.interruptions.as_str() {
            "builtin" => None,
            "auto" => sigcomm22_candidates().into_iter().find(|p| p.exists()),
            path => Some(PathBuf::from(path)),
        };
        let source = match file {
            Some(p) => {
                cfg.interruption = Interruption::Empirical(read_sigcomm22(&p)?);
                format!("SIGCOMM'22 measurements ({})", p.display())
            }
            None => "built-in lognormal fit (median 34 ms)".to_string(),
        };
        Ok((cfg, source))
    }
}

/// A short identity of the trip model behind `cfg`: the preset's name and 12 hex digits of a
/// SHA-256 over the configuration with the trip seed left out and over a reference ride of its
/// route generated from it (trip seed 0: every step's capacity and delay, every outage and
/// handover). Two builds give rides of one preset and route the same identity exactly when they
/// generate them alike, so a changed parameter *or* a changed generator shows. Benches record it
/// with every ride, so `bench pool` can tell rides of different trip-model revisions apart.
pub fn trip_model_id(cfg: &TripConfig) -> Result<String> {
    use sha2::{Digest, Sha256};
    let mut reference = cfg.clone();
    reference.trip_seed = 0;
    let trip = Trip::generate(&reference)
        .with_context(|| format!("generate the reference ride of preset `{}`", cfg.name))?;
    let mut h = Sha256::new();
    h.update(format!("{reference:?}").as_bytes());
    for p in &trip.paths {
        for v in p.dl_bps.iter().chain(&p.ul_bps) {
            h.update(v.to_bits().to_le_bytes());
        }
        for v in &p.owd_us {
            h.update(v.to_le_bytes());
        }
        for (a, b) in p.outages_ms.iter().chain(&p.interruptions_ms) {
            h.update(a.to_le_bytes());
            h.update(b.to_le_bytes());
        }
    }
    h.update(format!("{:?}", trip.handovers).as_bytes());
    let digest = h.finalize();
    let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{}-{hex}", cfg.name))
}

/// Options of `polycorn trip generate`.
#[derive(Args, Debug, Clone)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub trip: TripArgs,
    /// Output directory (created; existing files with the same names are replaced).
    #[arg(long)]
    pub out: PathBuf,
}

/// Durations (ms) of LTE handovers in a SIGCOMM'22 `HO-exec-duration.csv`. Rows that are not
/// LTE are skipped; malformed LTE rows are counted and reported with file:line, not dropped
/// silently; a file with no usable row is an error.
pub fn read_sigcomm22(path: &Path) -> Result<Vec<f64>> {
    let text = fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    let mut lines = text.lines();
    let header = lines
        .next()
        .with_context(|| format!("{}: empty file", path.display()))?;
    let cols: Vec<&str> = header.split(',').map(str::trim).collect();
    let col = |name: &str| {
        cols.iter().position(|c| *c == name).with_context(|| {
            format!(
                "{}:1: no `{name}` column in header `{header}`",
                path.display()
            )
        })
    };
    let (full, tech) = (col("FULL")?, col("Tech")?);
    let mut out = Vec::new();
    let mut bad = Vec::new();
    let mut unmeasured = 0usize;
    for (i, line) in lines.enumerate() {
        let lineno = i + 2;
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        if f.get(tech).map(|t| t.trim()) != Some("LTE") {
            continue;
        }
        let cell = f.get(full).map_or("", |v| v.trim());
        if cell.is_empty() {
            // Not measured for this handover (the dataset leaves the cell empty).
            unmeasured += 1;
            continue;
        }
        match cell.parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 && s < 10.0 => out.push(s * 1000.0),
            _ => bad.push(lineno),
        }
    }
    // A process that reads the file for every ride says what it skipped once.
    static REPORTED: std::sync::Mutex<std::collections::BTreeSet<PathBuf>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let first = REPORTED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(path.to_path_buf());
    if unmeasured > 0 && first {
        eprintln!("note: {unmeasured} LTE rows have no FULL duration (empty in the dataset) and were not used");
    }
    if !bad.is_empty() && first {
        let shown: Vec<String> = bad
            .iter()
            .take(10)
            .map(|l| format!("{}:{l}", path.display()))
            .collect();
        eprintln!("warning: {} LTE rows with an invalid FULL duration (not a number of seconds in (0, 10)) were skipped: {}{}", bad.len(), shown.join(", "), if bad.len() > 10 { ", …" } else { "" });
    }
    if out.is_empty() {
        bail!(
            "{}: no LTE handover with a usable FULL duration",
            path.display()
        );
    }
    Ok(out)
}

fn write(dir: &Path, name: &str, contents: &str) -> Result<()> {
    let p = dir.join(name);
    fs::write(&p, contents).with_context(|| format!("write {}", p.display()))
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(String::new, |x| x.to_string())
}

/// Generate and write the trip.
pub fn run(args: &GenerateArgs) -> Result<()> {
    let (cfg, source) = args.trip.config()?;
    eprintln!("successful-handover interruptions: {source}");
    let trip = Trip::generate(&cfg)?;
    fs::create_dir_all(&args.out).with_context(|| format!("create {}", args.out.display()))?;
    let dir = args.out.as_path();
    for p in &trip.paths {
        for (suffix, bps) in [("down", &p.dl_bps), ("up", &p.ul_bps)] {
            let ops = PathProcess::opportunities_ms(bps);
            if ops.is_empty() {
                bail!("carrier {}: the {suffix}link never has capacity", p.name);
            }
            write(
                dir,
                &format!("{}.{suffix}", p.name),
                &DeliveryTrace::from_opportunities_ms(ops)?.to_mahimahi(),
            )?;
        }
        let mut points: Vec<(u64, u64)> = Vec::new();
        for (i, &d) in p.owd_us.iter().enumerate() {
            if points.last().is_none_or(|(_, last)| *last != d) {
                points.push((i as u64 * STEP_MS, d));
            }
        }
        write(
            dir,
            &format!("{}.delay.csv", p.name),
            &DelaySeries::new(points)?.to_csv(),
        )?;
        write(
            dir,
            &format!("{}.outages.csv", p.name),
            &Outages::new(p.outages_ms.clone())?.to_csv(),
        )?;
        write(
            dir,
            &format!("{}.interruptions.csv", p.name),
            &Outages::new(p.interruptions_ms.clone())?.to_csv(),
        )?;
    }
    let mut ctx = String::from("t_ms,lat,lon,speed_mps,heading_deg");
    for p in &trip.paths {
        let _ = write!(ctx, ",cell_{0},rsrp_dbm_{0}", p.name);
    }
    ctx.push('\n');
    for r in &trip.context {
        let _ = write!(
            ctx,
            "{},{:.7},{:.7},{:.2},{:.1}",
            r.t_ms, r.lat, r.lon, r.speed_mps, r.heading_deg
        );
        for c in &r.carriers {
            let _ = write!(ctx, ",{},{}", opt(c.cell), opt(c.rsrp_dbm));
        }
        ctx.push('\n');
    }
    write(dir, "context.csv", &ctx)?;
    let mut ho = String::from(
        "carrier,from_cell,to_cell,start_ms,position_m,lat,lon,rsrp_dbm,outcome,interruption_ms,\
         lost_ms,lost_position_m,lost_lat,lost_lon,lost_rsrp_dbm\n",
    );
    for h in &trip.handovers {
        let outcome = match h.outcome {
            Outcome::Success => "success",
            Outcome::Failure => "failure",
        };
        let lost = h.lost.map_or(",,,,".to_string(), |l| {
            format!(
                "{},{:.1},{:.7},{:.7},{:.1}",
                l.t_ms, l.position_m, l.lat, l.lon, l.rsrp_dbm
            )
        });
        let _ = writeln!(
            ho,
            "{},{},{},{},{:.1},{:.7},{:.7},{:.1},{outcome},{},{lost}",
            trip.paths[h.carrier].name,
            h.from_cell,
            h.to_cell,
            h.start_ms,
            h.position_m,
            h.lat,
            h.lon,
            h.rsrp_dbm,
            h.interruption_ms
        );
    }
    write(dir, "handovers.csv", &ho)?;
    let failures = trip
        .handovers
        .iter()
        .filter(|h| h.outcome == Outcome::Failure)
        .count();
    let meta = format!(
        "{{\n  \"polycorn_version\": \"{}\",\n  \"preset\": \"{}\",\n  \"trip_model\": \"{}\",\n  \"route_seed\": {},\n  \"trip_seed\": {},\n  \"interruptions\": \"{}\",\n  \"duration_ms\": {},\n  \"carriers\": [{}],\n  \"handovers\": {},\n  \"failed_handovers\": {}\n}}\n",
        env!("CARGO_PKG_VERSION"),
        cfg.name,
        trip_model_id(&cfg)?,
        cfg.route_seed,
        cfg.trip_seed,
        source.replace('\\', "\\\\").replace('"', "'"),
        trip.duration_ms,
        trip.paths.iter().map(|p| format!("\"{}\"", p.name)).collect::<Vec<_>>().join(", "),
        trip.handovers.len(),
        failures
    );
    write(dir, "trip.json", &meta)?;
    println!(
        "wrote {}: {:.1} min, {} carriers, {} handovers ({} failed)",
        dir.display(),
        trip.duration_ms as f64 / 60_000.0,
        trip.paths.len(),
        trip.handovers.len(),
        failures
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trip_model_id_names_the_model_not_the_ride() {
        let id = |cfg: &TripConfig| trip_model_id(cfg).unwrap();
        let base = id(&TripConfig::hsr(1, 1));
        assert!(base.starts_with("hsr-") && base.len() == 16, "{base}");
        assert_eq!(base, id(&TripConfig::hsr(1, 1)), "deterministic");
        assert_eq!(
            base,
            id(&TripConfig::hsr(1, 42)),
            "every ride of a route shares it"
        );
        assert_ne!(
            base,
            id(&TripConfig::hsr(7, 1)),
            "another route is another model"
        );
        let mut retuned = TripConfig::hsr(1, 1);
        retuned.carriers[0].cap_slow.1 *= 1.01;
        assert_ne!(base, id(&retuned), "a changed parameter changes it");
        assert!(id(&TripConfig::ktx(1, 1)).starts_with("ktx-"));
    }
}
