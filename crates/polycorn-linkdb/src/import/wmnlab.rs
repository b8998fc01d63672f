//! WMN Lab metro measurements (`../shared/data/wmnlab`, Apache-2.0, NTU WMN Lab): Taipei metro
//! runs, up to eight phones per run, each locked to LTE bands, one CSV row per second with
//! 0/1 event columns (`LTE_HO`, `MN_HO`, `RLF`, …) and the serving RSRP. Not high-speed rail.
//!
//! The files have **no cell IDs and no usable GPS track**: every file carries at most two
//! distinct fixes (a frozen last fix; most rows of 2023-04-01 and 2023-06-12 have none). So:
//!
//! * **Trip, ride, carrier.** A file `<date>_<phone>[_<exp>]_#<run>_<bands>.csv` is one trip
//!   named `<date>[_<exp>]_#<run>/<phone>`; all phones of a run are one *ride* (held out
//!   together by the validation). The carrier is the band lock (`B1`, `B3`, `B7`, `B8`,
//!   `B1B3`, `LTE`, `All`, …): one operator, so the band is what distinguishes radio paths.
//! * **Direction.** Odd runs go one way (`up`), even runs the other (`down`). Evidence: the
//!   RSRP profiles of same-parity runs correlate (typically 0.4–0.8) and opposite-parity runs
//!   correlate once one is reversed in time, across days and phones.
//! * **Position.** Dead reckoning: `elapsed seconds × V_NOMINAL_MPS` from the file's first row,
//!   in the direction of travel (stored as `±`, so progress grows along the ride). The runs
//!   start at the same station (RSRP profiles align by elapsed time better than by run
//!   fraction), but stops and speed vary, so positions err by tens of seconds of travel
//!   towards the end of a run.
//! * **Cell.** A location grid: the source "cell" of a handover is the `GRID_M` bin of its
//!   position (`g<bin>`), keyed with band and direction like a real cell.
//! * **Handovers.** An `LTE_HO` or `MN_HO` event (the LTE anchor, in EN-DC the master node) is
//!   a successful handover; an `RLF` event is a failed one (the radio link dropped during
//!   mobility; the paper's failure). An `LTE_HO`/`MN_HO` within [`RLF_MERGE_S`] after an RLF
//!   is the re-establishment of that failure, not another handover (counted in the notes). NR
//!   events (`gNB_HO`, `SCG_RLF`, …) concern the secondary 5G leg and are not handovers of the
//!   path (counted in the notes).
//! * **Several events in one bin.** An event cell counts the events of its second: `0`, `1`,
//!   or more (`2`: two handovers in that second), or lists them, `a@b` (one event per part,
//!   each part a number above 0). Each event becomes its own record at that bin, in order: the
//!   bin's failures first, then its handovers ([`events`]). A cell that is none of these makes
//!   the row bad, with the column named.
//!
//! The `*-example_dataset.csv` file duplicates run #01 of its phone and is skipped with a note.

use std::collections::BTreeMap;
use std::path::Path;

use super::time::Clock;
use super::{csv_files, sealed, Csv, ImportError, ImportReport};
use crate::record::{
    Direction, HandoverRecord, Outcome, RadioSample, Sample, Source, TripData, TripMeta,
};

/// Assumed mean metro speed for dead reckoning, m/s (36 km/h; the manual infers ≤ 57 km/h).
pub const V_NOMINAL_MPS: f64 = 10.0;
/// Default location-grid bin standing in for a cell, m (30 s of travel at the nominal speed;
/// handovers come every ~15–20 s).
pub const GRID_M: f64 = 300.0;
/// A handover this soon after an RLF re-establishes that failure, s.
pub const RLF_MERGE_S: f64 = 3.0;
/// The route name of every wmnlab trip (one metro line, see the module docs).
pub const ROUTE: &str = "wmnlab/taipei-metro";

/// Options of the importer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Options {
    /// Grid bin, m.
    pub grid_m: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options { grid_m: GRID_M }
    }
}

/// Parts of a file name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileName {
    /// `2023-04-17`.
    pub date: String,
    /// `qc00`, `sm03`.
    pub phone: String,
    /// `exp2`, if any.
    pub exp: Option<String>,
    /// Run number.
    pub run: u32,
    /// Band lock.
    pub bands: String,
}

/// Parse `<date>_<phone>[_<exp>]_#<run>_<bands>.csv`.
pub fn parse_name(file_name: &str) -> Option<FileName> {
    let stem = file_name.strip_suffix(".csv")?;
    let (head, rest) = stem.split_once("_#")?;
    let (run, bands) = rest.split_once('_')?;
    let mut h = head.split('_');
    let date = h.next()?.to_string();
    let phone = h.next()?.to_string();
    let exp = h.next().map(String::from);
    if h.next().is_some() || date.len() != 10 || bands.is_empty() {
        return None;
    }
    Some(FileName {
        date,
        phone,
        exp,
        run: run.parse().ok()?,
        bands: bands.to_string(),
    })
}

/// Import every wmnlab CSV under `path` (a file or a directory).
pub fn import(path: &Path, opt: Options) -> Result<super::Imported, ImportError> {
    let mut rep = ImportReport::default();
    let mut trips = Vec::new();
    let mut merged = 0usize;
    let mut nr_events = 0usize;
    let mut skipped_files = Vec::new();
    for file in csv_files(path)? {
        let fname = file
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Some(name) = parse_name(&fname) else {
            skipped_files.push(fname);
            continue;
        };
        rep.files += 1;
        let (trip, m, nr) = import_file(&file, &name, opt, &mut rep)?;
        merged += m;
        nr_events += nr;
        trips.push(trip);
    }
    if !skipped_files.is_empty() {
        rep.notes.push(format!(
            "{} file(s) not named <date>_<phone>[_<exp>]_#<run>_<bands>.csv were skipped: {}",
            skipped_files.len(),
            skipped_files.join(", ")
        ));
    }
    rep.notes.push(format!(
        "{merged} LTE_HO/MN_HO events within {RLF_MERGE_S} s after an RLF counted as that failure's re-establishment"
    ));
    rep.notes.push(format!(
        "{nr_events} NR secondary-leg events (gNB_HO, gNB_Rel, SCG_RLF, eNB_to_ENDC) are not path handovers"
    ));
    rep.notes.push(format!(
        "positions are dead-reckoned at {V_NOMINAL_MPS} m/s (no usable GPS track); cells are {} m grid bins per band and direction",
        opt.grid_m
    ));
    Ok((trips, rep))
}

fn import_file(
    file: &Path,
    name: &FileName,
    opt: Options,
    rep: &mut ImportReport,
) -> Result<(TripData, usize, usize), ImportError> {
    let csv = Csv::read(file)?;
    let col = |n: &str| csv.col(n);
    let (c_ts, c_lte, c_mn, c_rlf, c_rsrp) = (
        col("Timestamp")?,
        col("LTE_HO")?,
        col("MN_HO")?,
        col("RLF")?,
        col("RSRP")?,
    );
    let nr_cols: Vec<usize> = ["gNB_HO", "gNB_Rel", "SCG_RLF", "eNB_to_ENDC"]
        .iter()
        .filter_map(|n| col(n).ok())
        .collect();
    let direction = if name.run % 2 == 1 {
        Direction::Up
    } else {
        Direction::Down
    };
    let ride = match &name.exp {
        Some(e) => format!("{}_{}_#{:02}", name.date, e, name.run),
        None => format!("{}_#{:02}", name.date, name.run),
    };
    let carrier = name.bands.clone();
    let mut clock = Clock::default();
    let mut samples = Vec::new();
    let mut radio = Vec::new();
    let mut handovers: Vec<HandoverRecord> = Vec::new();
    let mut last_rlf_s: Option<f64> = None;
    let (mut merged, mut nr) = (0usize, 0usize);
    let columns = csv.columns();
    let count = |f: &[&str], i: usize| -> Result<usize, String> {
        events(f[i]).map_err(|e| format!("column `{}`: {e}", columns[i]))
    };
    csv.rows(rep, |f| {
        let t = clock.check(f[c_ts])?;
        let (lte, mn, rlf) = (count(f, c_lte)?, count(f, c_mn)?, count(f, c_rlf)?);
        let mut nr_here = 0;
        for &c in &nr_cols {
            nr_here += count(f, c)?;
        }
        let rsrp = f[c_rsrp]
            .parse::<f64>()
            .ok()
            .filter(|r| r.is_finite() && (-160.0..=-20.0).contains(r));
        let elapsed = clock.take(t);
        let t_ms = (elapsed * 1000.0).round() as u64;
        let progress = elapsed * V_NOMINAL_MPS;
        let position = direction.position(progress);
        let cell = format!("g{}", (progress / opt.grid_m).floor() as i64);
        nr += nr_here;
        samples.push(Sample {
            t_ms,
            lat: None,
            lon: None,
            position_m: Some(position),
            speed_mps: Some(V_NOMINAL_MPS),
            heading_deg: None,
        });
        radio.push(RadioSample {
            t_ms,
            carrier: carrier.clone(),
            cell: Some(cell.clone()),
            rsrp_dbm: rsrp,
        });
        let record = |outcome| HandoverRecord {
            carrier: carrier.clone(),
            from_cell: cell.clone(),
            to_cell: None,
            direction,
            start_ms: t_ms,
            position_m: Some(position),
            lat: None,
            lon: None,
            rsrp_dbm: rsrp,
            outcome,
            interruption_ms: None,
            lost: None,
        };
        for _ in 0..rlf {
            handovers.push(record(Outcome::Failure));
            last_rlf_s = Some(elapsed);
        }
        for _ in 0..lte + mn {
            if last_rlf_s.is_some_and(|r| elapsed - r <= RLF_MERGE_S) {
                merged += 1;
            } else {
                handovers.push(record(Outcome::Success));
            }
        }
        Ok(())
    });
    let duration_ms = samples.last().map_or(0, |s| s.t_ms);
    let data = sealed(
        TripMeta {
            key: String::new(),
            source: Source::Wmnlab,
            name: format!("{ride}/{}", name.phone),
            route: ROUTE.into(),
            direction,
            carriers: vec![carrier],
            duration_ms,
            started_ms: None,
        },
        handovers,
        samples,
        radio,
    );
    Ok((data, merged, nr))
}

/// Most events one cell may hold: a second holds a few handovers at most, so a larger count
/// is a broken cell, not events.
pub const MAX_EVENTS_PER_BIN: usize = 16;

/// The events of one event cell: a count (`0`, `1`, `2`, …; a number in (0, 1], the event's
/// time within the bin, is one event) or a list `a@b[@c…]` of one event per part, each part a
/// number above 0. Anything else is an error saying what the cell holds.
pub fn events(cell: &str) -> Result<usize, String> {
    let bad =
        |why: &str| format!("`{cell}` is not an event count (0, 1, 2, …) or list (`a@b`): {why}");
    let n = if cell.contains('@') {
        for part in cell.split('@') {
            match part.trim().parse::<f64>() {
                Ok(v) if v.is_finite() && v > 0.0 => {}
                Ok(_) => return Err(bad(&format!("part `{part}` is not above 0"))),
                Err(_) => return Err(bad(&format!("part `{part}` is not a number"))),
            }
        }
        cell.split('@').count()
    } else {
        let v: f64 = cell.parse().map_err(|_| bad("not a number"))?;
        if !(v.is_finite() && v >= 0.0) {
            return Err(bad("negative or not finite"));
        }
        if v == 0.0 {
            0
        } else if v <= 1.0 {
            1
        } else if v.fract() == 0.0 {
            v as usize
        } else {
            return Err(bad("a count above 1 is a whole number"));
        }
    };
    if n > MAX_EVENTS_PER_BIN {
        return Err(bad(&format!(
            "more than {MAX_EVENTS_PER_BIN} events in one second"
        )));
    }
    Ok(n)
}

/// Number of trips per ride (for reports).
pub fn rides(trips: &[TripData]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for t in trips {
        *m.entry(crate::validate::ride_of(t).to_string())
            .or_default() += 1;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let n = parse_name("2023-04-17_qc02_exp3_#04_B1B8.csv").unwrap();
        assert_eq!(
            (
                n.date.as_str(),
                n.phone.as_str(),
                n.exp.as_deref(),
                n.run,
                n.bands.as_str()
            ),
            ("2023-04-17", "qc02", Some("exp3"), 4, "B1B8")
        );
        let n = parse_name("2023-06-12_sm00_#10_All(wo_B1).csv").unwrap();
        assert_eq!((n.exp, n.run, n.bands.as_str()), (None, 10, "All(wo_B1)"));
        assert!(parse_name("2023-03-26_qc00-example_dataset.csv").is_none());
    }

    #[test]
    fn event_cells() {
        for (cell, n) in [
            ("0", 0),
            ("0.0", 0),
            ("1", 1),
            ("0.25", 1),
            ("2", 2),
            ("3", 3),
            ("1@1", 2),
            ("0.2@0.7", 2),
            ("1@1@1", 3),
        ] {
            assert_eq!(events(cell), Ok(n), "{cell}");
        }
        for (cell, why) in [
            ("x", "not a number"),
            ("", "not a number"),
            ("-1", "negative or not finite"),
            ("NaN", "negative or not finite"),
            ("1.5", "whole number"),
            ("1@", "part `` is not a number"),
            ("@1", "part `` is not a number"),
            ("1@0", "part `0` is not above 0"),
            ("1@b", "part `b` is not a number"),
            ("99", "more than 16 events"),
        ] {
            let e = events(cell).unwrap_err();
            assert!(
                e.contains(&format!("`{cell}`")) && e.contains(why),
                "{cell}: {e}"
            );
        }
    }
}
