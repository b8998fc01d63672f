//! UCC 5G G-NetTrack logs (`../shared/data/ucc5g`, GPL-3.0, Raca et al., MMSys'20): an Irish
//! operator, driving (≤ 105 km/h) and static, about one row per second with GPS, speed, the
//! serving cell (`RAWCELLID`) and RSRP. Not high-speed rail, and no failure labels.
//!
//! * One file is one trip (and ride), named `<folder>-<file stem>`, route `ucc5g/<folder>`; the
//!   carrier is the `Operatorname` column.
//! * A change of `RAWCELLID` between consecutive rows that both have one is a handover,
//!   recorded as a success (nothing in the logs marks a failure). Its start is the first row on
//!   the new cell; its RSRP the last report on the old cell (the RSRP when it started).
//! * Roads are not a line: there is no along-line position and no direction (trips are stored
//!   as `up`), so EHP, Table 1's distance rows and the validation do not apply; the store keeps
//!   lat/lon, speed and RSRP for statistics.
//! * Rows without a cell ID (`-`) keep their GPS fix but break the cell sequence (a change
//!   across them is still a handover); they are counted in the notes.

use std::path::Path;

use super::time::Clock;
use super::{csv_files, sealed, Csv, ImportError, ImportReport};
use crate::record::{
    Direction, HandoverRecord, Outcome, RadioSample, Sample, Source, TripData, TripMeta,
};

/// Import every UCC 5G CSV under `path` (a file or a directory).
pub fn import(path: &Path) -> Result<super::Imported, ImportError> {
    let mut rep = ImportReport::default();
    let mut trips = Vec::new();
    let mut no_cell = 0usize;
    for file in csv_files(path)? {
        rep.files += 1;
        let (t, n) = import_file(&file, &mut rep)?;
        no_cell += n;
        trips.push(t);
    }
    rep.notes.push(format!(
        "{no_cell} rows without a cell ID (kept as GPS fixes, not in the cell sequence)"
    ));
    rep.notes.push(
        "ucc5g has no failure labels: every cell change is recorded as a successful handover"
            .into(),
    );
    Ok((trips, rep))
}

fn import_file(file: &Path, rep: &mut ImportReport) -> Result<(TripData, usize), ImportError> {
    let csv = Csv::read(file)?;
    let col = |n: &str| csv.col(n);
    let (c_ts, c_lon, c_lat, c_speed, c_op, c_rsrp, c_cell) = (
        col("Timestamp")?,
        col("Longitude")?,
        col("Latitude")?,
        col("Speed")?,
        col("Operatorname")?,
        col("RSRP")?,
        col("RAWCELLID")?,
    );
    let folder = file
        .parent()
        .and_then(|p| p.file_name())
        .map_or_else(|| "ucc5g".into(), |f| f.to_string_lossy().into_owned());
    let stem = file
        .file_stem()
        .map_or_else(String::new, |f| f.to_string_lossy().into_owned());
    let mut carrier: Option<String> = None;
    let mut clock = Clock::default();
    let mut samples = Vec::new();
    let mut radio = Vec::new();
    let mut handovers = Vec::new();
    let mut prev: Option<(String, Option<f64>)> = None;
    let mut no_cell = 0usize;
    csv.rows(rep, |f| {
        let t = clock.check(f[c_ts])?;
        let op = f[c_op].to_string();
        match &carrier {
            None => carrier = Some(op),
            Some(c) if *c != op => {
                return Err(format!("operator `{op}` differs from `{c}` of the file"));
            }
            Some(_) => {}
        }
        let t_ms = (clock.take(t) * 1000.0).round() as u64;
        let num = |i: usize| f[i].parse::<f64>().ok().filter(|x| x.is_finite());
        let (lat, lon) = match (num(c_lat), num(c_lon)) {
            (Some(la), Some(lo))
                if (-90.0..=90.0).contains(&la) && (-180.0..=180.0).contains(&lo) =>
            {
                (Some(la), Some(lo))
            }
            _ => (None, None),
        };
        let rsrp = num(c_rsrp).filter(|r| (-160.0..=-20.0).contains(r));
        samples.push(Sample {
            t_ms,
            lat,
            lon,
            position_m: None,
            speed_mps: num(c_speed).map(|k| k / 3.6),
            heading_deg: None,
        });
        let cell = f[c_cell];
        let cell = (!cell.is_empty() && cell != "-" && cell.chars().all(|c| c.is_ascii_digit()))
            .then(|| cell.to_string());
        let name = carrier.clone().unwrap_or_default();
        radio.push(RadioSample {
            t_ms,
            carrier: name.clone(),
            cell: cell.clone(),
            rsrp_dbm: rsrp,
        });
        let Some(cell) = cell else {
            no_cell += 1;
            return Ok(());
        };
        if let Some((p, prsrp)) = &prev {
            if *p != cell {
                handovers.push(HandoverRecord {
                    carrier: name,
                    from_cell: p.clone(),
                    to_cell: Some(cell.clone()),
                    direction: Direction::Up,
                    start_ms: t_ms,
                    position_m: None,
                    lat,
                    lon,
                    rsrp_dbm: *prsrp,
                    outcome: Outcome::Success,
                    interruption_ms: None,
                    lost: None,
                });
            }
        }
        prev = Some((cell, rsrp));
        Ok(())
    });
    let duration_ms = samples.last().map_or(0, |s| s.t_ms);
    let data = sealed(
        TripMeta {
            key: String::new(),
            source: Source::Ucc5g,
            name: format!("{folder}-{stem}"),
            route: format!("ucc5g/{folder}"),
            direction: Direction::Up,
            carriers: vec![carrier.unwrap_or_else(|| "unknown".into())],
            duration_ms,
            started_ms: None,
        },
        handovers,
        samples,
        radio,
    );
    Ok((data, no_cell))
}
