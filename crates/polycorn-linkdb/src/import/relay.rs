//! Rides as a relay saw them: the context log it records (`[context] record`), one row per GPS
//! fix with every modem's serving cell and RSRP, in the format of the testbed's `context.csv`
//! (`t_ms,lat,lon,speed_mps,heading_deg`, then `cell_NAME,rsrp_dbm_NAME` per carrier).
//!
//! A relay knows no handover's ground truth; what it sees is each modem's serving cell once a
//! second. From that ([`infer_handovers`]), per carrier:
//!
//! * the serving cell changes from one row to the next: a **successful** handover, half-way
//!   between the two rows, with the last RSRP reported on the old cell;
//! * the modem reports no cell after it had one: the source cell is **lost**, half-way between
//!   the last row with the cell and the first without. The handover out of it **failed**; its
//!   target is the next cell reported (the same cell when the modem re-established on it), its
//!   interruption lasts until then. When the handover started before the loss cannot be seen,
//!   so a failure is recorded as lost at its start (`lost` empty): LinkDB's failure locations
//!   are where the link went dark, which is the moment HPR must act before.
//! * a modem not reported at a fix ([`UNREPORTED`], `?`) adds no row to its carrier;
//! * rows more than [`MAX_GAP_MS`] apart (the relay was down, gpsd stalled) break the sequence:
//!   no handover is made up across them, and a loss before them is a failure of unknown
//!   target and interruption.
//!
//! A successful handover's interruption (tens of ms) falls between two fixes and is not seen;
//! a failure's blackout (a second or more) always spans a fix. Two handovers of one modem
//! within a second look like one, and so does a failure whose modem re-establishes and hands
//! over again before the next fix (its target is then taken for the later cell).
//!
//! **Rides.** A relay records all day, both ways along its line. [`split_rides`] cuts a log where
//! the train turns: stops of at least [`STOP_MS`] split it into runs, each run moving at least
//! [`MIN_RIDE_M`] along the track has a direction, and consecutive runs of one direction (station
//! stops between them) are one ride. A ride's times start at 0 at its first row.

use std::path::Path;

pub use super::time::{log_day, log_start_ms};
use super::{csv_files, sealed, Csv, ImportError, ImportReport, Imported};
use crate::predict::Track;
use crate::record::{
    Direction, HandoverRecord, Outcome, RadioSample, Sample, Source, TripData, TripMeta,
};

/// Rows further apart than this break a carrier's cell sequence.
pub const MAX_GAP_MS: u64 = 5_000;
/// A cell column's value when the modem sent no report at that fix while others did: the row
/// is skipped for that carrier (a gap in its cells, not a lost cell).
pub const UNREPORTED: &str = "?";
/// Below this speed the train stands.
pub const STOP_SPEED_MPS: f64 = 1.0;
/// A stand at least this long separates two runs (where the train may turn).
pub const STOP_MS: u64 = 60_000;
/// A run shorter than this along the track (shunting, a GPS wander at a stand) has no direction
/// and belongs to no ride.
pub const MIN_RIDE_M: f64 = 1_000.0;

/// How to read a relay's context log.
#[derive(Clone, Debug)]
pub struct Options {
    /// The line the train runs on (its rides share cells and positions), e.g. `beijing-shanghai`.
    pub route: String,
    /// The line's frame: GPS fixes are projected on it.
    pub track: Track,
    /// Direction of every ride; `None`: cut the log into rides where the train turns
    /// ([`split_rides`]).
    pub direction: Option<Direction>,
    /// Carrier names for the log's `cell_NAME` columns in order (as LinkDB and the proxy's
    /// `[linkdb] carriers` name them); `None`: the columns' own names.
    pub carriers: Option<Vec<String>>,
    /// Only logs of UTC days before this one (`YYYYMMDD`, as their names give it:
    /// `context-YYYYMMDDT…`); the others are left for later, and so is a file whose name has
    /// no day. A log is written until its day ends; a ride imported in part, then whole,
    /// would be stored twice. `None`: every file.
    pub before_day: Option<String>,
    /// Logs imported before, by absolute path, with their size then
    /// ([`crate::store::Store::imported_logs`]): skipped while their size is the same.
    pub done: std::collections::BTreeMap<std::path::PathBuf, u64>,
    /// How late the relay's modem monitor reports a modem's cell and RSRP, ms: each radio
    /// sample is moved back by this much before handovers are inferred
    /// ([`undo_monitor_lag`]), its position interpolated between the fixes. A late report
    /// places every handover later along the line by the lag's travel, and a failure
    /// predicted late is one HPR does not act on in time.
    pub monitor_lag_ms: u64,
}

/// What [`infer_handovers`] saw besides the handovers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inferred {
    /// Gaps of more than [`MAX_GAP_MS`] between rows of one carrier.
    pub gaps: usize,
    /// Failures whose end was not seen (the log or a gap came first).
    pub open_failures: usize,
}

/// One carrier's row, with the fix it was reported with.
#[derive(Clone)]
struct Row<'a> {
    t_ms: u64,
    cell: Option<&'a str>,
    rsrp: Option<f64>,
    fix: Option<Sample>,
}

/// The train's fix at `t_ms`: the fix of that time, else one interpolated between the fixes
/// either side when they are at most [`MAX_GAP_MS`] apart (radio samples moved back by a
/// monitor's lag, [`Options::monitor_lag_ms`], fall between fixes).
fn fix_at(samples: &[Sample], t_ms: u64) -> Option<Sample> {
    let i = samples.partition_point(|s| s.t_ms < t_ms);
    let b = samples.get(i)?;
    if b.t_ms == t_ms {
        return Some(b.clone());
    }
    let a = &samples[i.checked_sub(1)?];
    if b.t_ms - a.t_ms > MAX_GAP_MS {
        return None;
    }
    let w = (t_ms - a.t_ms) as f64 / (b.t_ms - a.t_ms) as f64;
    let mix = |x: Option<f64>, y: Option<f64>| Some(x? + (y? - x?) * w);
    Some(Sample {
        t_ms,
        lat: mix(a.lat, b.lat),
        lon: mix(a.lon, b.lon),
        position_m: mix(a.position_m, b.position_m),
        speed_mps: mix(a.speed_mps, b.speed_mps),
        heading_deg: if w < 0.5 {
            a.heading_deg
        } else {
            b.heading_deg
        },
    })
}

/// Moves radio samples `lag_ms` back in time: each reports the state of that earlier moment
/// ([`Options::monitor_lag_ms`]). Those that would come before the log's start are dropped.
pub fn undo_monitor_lag(radio: &mut Vec<RadioSample>, lag_ms: u64) {
    if lag_ms == 0 {
        return;
    }
    radio.retain(|r| r.t_ms >= lag_ms);
    for r in radio.iter_mut() {
        r.t_ms -= lag_ms;
    }
}

/// Half-way between two rows: time, and position/lat/lon averaged over both fixes.
fn midway(a: &Row, b: &Row) -> (u64, Option<f64>, Option<f64>, Option<f64>) {
    let t = a.t_ms + (b.t_ms - a.t_ms) / 2;
    let avg = |f: fn(&Sample) -> Option<f64>| match (
        a.fix.as_ref().and_then(f),
        b.fix.as_ref().and_then(f),
    ) {
        (Some(x), Some(y)) => Some((x + y) / 2.0),
        (x, y) => x.or(y),
    };
    (t, avg(|s| s.position_m), avg(|s| s.lat), avg(|s| s.lon))
}

/// The handovers a relay can tell from its modems' serving cells (see the module's rules), in
/// start order. `samples` and `radio` in time order, as [`TripData`] keeps them; a radio row's
/// fix is the sample of the same time.
pub fn infer_handovers(
    carriers: &[String],
    samples: &[Sample],
    radio: &[RadioSample],
    direction: Direction,
) -> (Vec<HandoverRecord>, Inferred) {
    let mut out = Vec::new();
    let mut stats = Inferred::default();
    for carrier in carriers {
        let record = |from: &str,
                      to: Option<&str>,
                      at: (u64, Option<f64>, Option<f64>, Option<f64>),
                      rsrp,
                      outcome,
                      interruption| HandoverRecord {
            carrier: carrier.clone(),
            from_cell: from.to_string(),
            to_cell: to.map(str::to_string),
            direction,
            start_ms: at.0,
            position_m: at.1,
            lat: at.2,
            lon: at.3,
            rsrp_dbm: rsrp,
            outcome,
            interruption_ms: interruption,
            lost: None,
        };
        let mut prev: Option<Row> = None;
        // The last row on a cell, while the modem still has it.
        let mut on: Option<Row> = None;
        // A loss not yet followed by a cell: (where, from cell, RSRP before).
        type Loss<'a> = (
            (u64, Option<f64>, Option<f64>, Option<f64>),
            &'a str,
            Option<f64>,
        );
        let mut lost: Option<Loss> = None;
        for r in radio.iter().filter(|r| r.carrier == *carrier) {
            let row = Row {
                t_ms: r.t_ms,
                cell: r.cell.as_deref(),
                rsrp: r.rsrp_dbm,
                fix: fix_at(samples, r.t_ms),
            };
            if prev
                .as_ref()
                .is_some_and(|p| row.t_ms.saturating_sub(p.t_ms) > MAX_GAP_MS)
            {
                stats.gaps += 1;
                if let Some((at, from, rsrp)) = lost.take() {
                    stats.open_failures += 1;
                    out.push(record(from, None, at, rsrp, Outcome::Failure, None));
                }
                on = None;
            }
            match row.cell {
                Some(c) => {
                    if let Some((at, from, rsrp)) = lost.take() {
                        let back = midway(prev.as_ref().expect("a loss follows a row"), &row).0;
                        out.push(record(
                            from,
                            Some(c),
                            at,
                            rsrp,
                            Outcome::Failure,
                            Some(back.saturating_sub(at.0)),
                        ));
                    } else if let Some(o) = on.as_ref().filter(|o| o.cell != Some(c)) {
                        let from = o.cell.expect("`on` rows have a cell");
                        out.push(record(
                            from,
                            Some(c),
                            midway(o, &row),
                            o.rsrp,
                            Outcome::Success,
                            None,
                        ));
                    }
                    on = Some(row.clone());
                }
                None => {
                    if let Some(o) = on.take() {
                        let from = o.cell.expect("`on` rows have a cell");
                        lost = Some((midway(&o, &row), from, o.rsrp));
                    }
                }
            }
            prev = Some(row);
        }
        if let Some((at, from, rsrp)) = lost {
            stats.open_failures += 1;
            out.push(record(from, None, at, rsrp, Outcome::Failure, None));
        }
    }
    out.sort_by(|a, b| a.start_ms.cmp(&b.start_ms).then(a.carrier.cmp(&b.carrier)));
    (out, stats)
}

/// Where a log's rides are: `(first row, last row, direction)` as indices into `samples`
/// (fixes in time order, positions projected), in order. See the module's *Rides*.
pub fn split_rides(samples: &[Sample]) -> Vec<(usize, usize, Direction)> {
    let n = samples.len();
    if n == 0 {
        return Vec::new();
    }
    // Whether the train stands at each fix: its speed, else the distance since the last fix.
    let standing: Vec<bool> = (0..n)
        .map(|i| match samples[i].speed_mps {
            Some(v) => v < STOP_SPEED_MPS,
            None => match (i.checked_sub(1).map(|j| &samples[j]), &samples[i]) {
                (Some(a), b) => match (a.position_m, b.position_m) {
                    (Some(x), Some(y)) if b.t_ms > a.t_ms => {
                        (y - x).abs() / ((b.t_ms - a.t_ms) as f64 / 1000.0) < STOP_SPEED_MPS
                    }
                    _ => false,
                },
                (None, _) => false,
            },
        })
        .collect();
    // Runs between long stands.
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut start: Option<usize> = None;
    let mut i = 0;
    while i < n {
        if standing[i] {
            let mut j = i;
            while j + 1 < n && standing[j + 1] {
                j += 1;
            }
            let long = samples[j].t_ms - samples[i].t_ms >= STOP_MS || i == 0 || j == n - 1;
            if long {
                if let Some(s) = start.take() {
                    runs.push((s, i.saturating_sub(1).max(s)));
                }
            } else if start.is_none() {
                start = Some(i);
            }
            i = j + 1;
        } else {
            start.get_or_insert(i);
            i += 1;
        }
    }
    if let Some(s) = start {
        runs.push((s, n - 1));
    }
    let pos = |i: usize| samples[i].position_m;
    let mut rides: Vec<(usize, usize, Direction)> = Vec::new();
    for (a, b) in runs {
        let (Some(x), Some(y)) = (pos(a), pos(b)) else {
            continue;
        };
        let d = if y - x >= MIN_RIDE_M {
            Direction::Up
        } else if x - y >= MIN_RIDE_M {
            Direction::Down
        } else {
            continue;
        };
        match rides.last_mut() {
            Some(last) if last.2 == d => last.1 = b,
            _ => rides.push((a, b, d)),
        }
    }
    rides
}

/// Read one relay context log (a file) or every `.csv` under a directory (and its
/// subdirectories: a proxy keeps one per relay). Each file is cut into rides ([`split_rides`],
/// or one ride per file with [`Options::direction`]); each ride is named `<file>-<k>` (k from
/// 1; the file's stem, or its path below the directory) and gets the handovers
/// [`infer_handovers`] finds.
/// A row that cannot be read is counted and listed with file:line; a header without the base
/// columns or without carriers is an error naming the file.
pub fn import(path: &Path, opts: &Options) -> Result<Imported, ImportError> {
    let mut rep = ImportReport::default();
    let mut trips = Vec::new();
    let (mut gaps, mut open, mut unplaced) = (0usize, 0usize, 0usize);
    let (mut later, mut done) = (0usize, 0usize);
    for file in csv_files(path)? {
        if let Some(before) = &opts.before_day {
            if log_day(&file).is_none_or(|d| d >= before.as_str()) {
                later += 1;
                continue;
            }
        }
        let absolute = std::fs::canonicalize(&file).map_err(|source| ImportError::Io {
            path: file.clone(),
            source,
        })?;
        let bytes = std::fs::metadata(&absolute)
            .map_err(|source| ImportError::Io {
                path: file.clone(),
                source,
            })?
            .len();
        if opts.done.get(&absolute) == Some(&bytes) {
            done += 1;
            continue;
        }
        rep.logs_read.push((absolute, bytes));
        rep.files += 1;
        let (carriers, samples, mut radio) =
            read_context(&file, None, opts.carriers.as_deref(), &opts.track, &mut rep)?;
        undo_monitor_lag(&mut radio, opts.monitor_lag_ms);
        let rides = match opts.direction {
            Some(d) if !samples.is_empty() => vec![(0, samples.len() - 1, d)],
            Some(_) => Vec::new(),
            None => split_rides(&samples),
        };
        let in_rides: usize = rides.iter().map(|(a, b, _)| b - a + 1).sum();
        unplaced += samples.len() - in_rides;
        if rides.is_empty() {
            rep.notes.push(format!(
                "{}: no ride (the train never moved {MIN_RIDE_M} m one way between stands)",
                file.display()
            ));
        }
        // Under a directory, the file's path below it: a proxy's logs are one directory per
        // relay, whose files may share a name.
        let stem = match file.strip_prefix(path) {
            Ok(rel) if !rel.as_os_str().is_empty() => {
                rel.with_extension("").to_string_lossy().into_owned()
            }
            _ => file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "ride".into()),
        };
        let log_start = log_start_ms(&file);
        for (k, &(a, b, direction)) in rides.iter().enumerate() {
            let (t0, t1) = (samples[a].t_ms, samples[b].t_ms);
            let ride_samples: Vec<Sample> = samples[a..=b]
                .iter()
                .map(|s| Sample {
                    t_ms: s.t_ms - t0,
                    ..s.clone()
                })
                .collect();
            let ride_radio: Vec<RadioSample> = radio
                .iter()
                .filter(|r| (t0..=t1).contains(&r.t_ms))
                .map(|r| RadioSample {
                    t_ms: r.t_ms - t0,
                    ..r.clone()
                })
                .collect();
            let (handovers, st) = infer_handovers(&carriers, &ride_samples, &ride_radio, direction);
            gaps += st.gaps;
            open += st.open_failures;
            trips.push(sealed(
                TripMeta {
                    key: String::new(),
                    source: Source::Relay,
                    name: format!("{stem}-{}", k + 1),
                    route: opts.route.clone(),
                    direction,
                    carriers: carriers.clone(),
                    duration_ms: t1 - t0,
                    started_ms: log_start.map(|s| s + t0),
                },
                handovers,
                ride_samples,
                ride_radio,
            ));
        }
    }
    rep.notes.push(format!(
        "handovers inferred from the serving cells: a cell change is a success, a cell lost is \
         a failure ({gaps} gaps of more than {MAX_GAP_MS} ms broke a cell sequence, {open} \
         failures had no end in sight)"
    ));
    if done > 0 {
        rep.notes
            .push(format!("{done} files imported before, not read again"));
    }
    if later > 0 {
        rep.notes.push(format!(
            "{later} files left for later: not of a day before {} (or no day in the name)",
            opts.before_day.as_deref().unwrap_or_default()
        ));
    }
    if unplaced > 0 {
        rep.notes.push(format!(
            "{unplaced} fixes outside any ride (long stands, turns, runs under {MIN_RIDE_M} m)"
        ));
    }
    Ok((trips, rep))
}

type Log = (Vec<String>, Vec<Sample>, Vec<RadioSample>);

/// Read a context log in the testbed's `context.csv` format (a relay's own, or `trip
/// generate`'s): its carriers, fixes (projected on `track`) and radio samples. The carriers are
/// the `expect`ed ones (each must have its two columns) or, with `None`, every `cell_NAME`
/// column's; `rename` gives them other names, in order. A row that cannot be used is counted
/// and reported with file:line: not a number, not a position, or not after the row before.
pub(crate) fn read_context(
    file: &Path,
    expect: Option<&[String]>,
    rename: Option<&[String]>,
    track: &Track,
    rep: &mut ImportReport,
) -> Result<Log, ImportError> {
    let csv = Csv::read(file)?;
    let col = |n: &str| csv.col(n);
    let (c_t, c_lat, c_lon, c_speed, c_head) = (
        col("t_ms")?,
        col("lat")?,
        col("lon")?,
        col("speed_mps")?,
        col("heading_deg")?,
    );
    let carriers: Vec<String> = match expect {
        Some(names) => names.to_vec(),
        None => csv
            .columns()
            .iter()
            .filter_map(|c| c.strip_prefix("cell_"))
            .map(str::to_string)
            .collect(),
    };
    if carriers.is_empty() {
        return Err(ImportError::Format {
            path: file.to_path_buf(),
            line: 1,
            problem: "no `cell_NAME` column: the log has no carrier".into(),
        });
    }
    let per_carrier: Vec<(usize, usize)> = carriers
        .iter()
        .map(|c| Ok((col(&format!("cell_{c}"))?, col(&format!("rsrp_dbm_{c}"))?)))
        .collect::<Result<_, ImportError>>()?;
    let carriers = match rename {
        None => carriers,
        Some(names) if names.len() == carriers.len() => names.to_vec(),
        Some(names) => {
            return Err(ImportError::Format {
                path: file.to_path_buf(),
                line: 1,
                problem: format!(
                    "{} carriers in the header ({}), {} names given for them",
                    carriers.len(),
                    carriers.join(", "),
                    names.len()
                ),
            })
        }
    };
    let mut samples: Vec<Sample> = Vec::new();
    let mut radio = Vec::new();
    csv.rows(rep, |f| {
        let num = |i: usize| f[i].parse::<f64>().ok().filter(|x| x.is_finite());
        let (Ok(t), Some(lat), Some(lon)) = (f[c_t].parse::<u64>(), num(c_lat), num(c_lon)) else {
            return Err("t_ms, lat or lon is not a number".into());
        };
        if !(-90.0..=90.0).contains(&lat) || !(-180.0..=180.0).contains(&lon) {
            return Err(format!("{lat},{lon} is not a position"));
        }
        if samples.last().is_some_and(|s| t <= s.t_ms) {
            return Err(format!("t_ms {t} is not after the row before"));
        }
        samples.push(Sample {
            t_ms: t,
            lat: Some(lat),
            lon: Some(lon),
            position_m: Some(track.position_m(lat, lon)),
            speed_mps: num(c_speed).filter(|v| *v >= 0.0),
            heading_deg: num(c_head),
        });
        for (name, &(ccell, crsrp)) in carriers.iter().zip(&per_carrier) {
            if f[ccell] == UNREPORTED {
                // The modem sent no report at this fix: a gap in its cells, not a lost cell.
                continue;
            }
            radio.push(RadioSample {
                t_ms: t,
                carrier: name.clone(),
                cell: (!f[ccell].is_empty()).then(|| f[ccell].to_string()),
                rsrp_dbm: num(crsrp),
            });
        }
        Ok(())
    });
    Ok((carriers, samples, radio))
}

/// A trip with ground truth as its relay would have recorded it: the same fixes and radio
/// samples, source [`Source::Relay`], and the handovers [`infer_handovers`] finds in place of
/// the true ones.
pub fn as_seen_by_relay(trip: &TripData) -> (TripData, Inferred) {
    let (handovers, st) = infer_handovers(
        &trip.meta.carriers,
        &trip.samples,
        &trip.radio,
        trip.meta.direction,
    );
    let mut t = trip.clone();
    t.meta.source = Source::Relay;
    t.handovers = handovers;
    t.seal();
    (t, st)
}

/// [`as_seen_by_relay`] with a modem monitor that reports each modem's state `lag_ms` late,
/// imported with `undo_ms` of it undone ([`Options::monitor_lag_ms`]): the radio sample at `t`
/// carries the cell and RSRP of the carrier's latest sample at or before `t − lag_ms` (none
/// before the ride's first `lag_ms`: not reported). The fixes are not delayed (gpsd is
/// timely). With the trip model's 1 Hz samples, a lag between two whole seconds acts as the
/// next whole second.
pub fn as_seen_by_relay_lagged(trip: &TripData, lag_ms: u64, undo_ms: u64) -> (TripData, Inferred) {
    if lag_ms == 0 && undo_ms == 0 {
        return as_seen_by_relay(trip);
    }
    let mut lagged = trip.clone();
    lagged.radio = trip
        .radio
        .iter()
        .filter_map(|r| {
            let at = r.t_ms.checked_sub(lag_ms)?;
            // The carrier's latest sample at or before `at` (radio is in time order).
            let upto = trip.radio.partition_point(|x| x.t_ms <= at);
            let then = trip.radio[..upto]
                .iter()
                .rev()
                .find(|x| x.carrier == r.carrier)?;
            Some(RadioSample {
                t_ms: r.t_ms,
                ..then.clone()
            })
        })
        .collect();
    undo_monitor_lag(&mut lagged.radio, undo_ms);
    as_seen_by_relay(&lagged)
}

/// How inferred handovers compare with the truth of the same ride.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Comparison {
    /// Failures in the truth.
    pub true_failures: usize,
    /// Failures inferred.
    pub inferred_failures: usize,
    /// True failures with an inferred failure of the same carrier and source cell whose time is
    /// within [`MATCH_MS`] of the true loss.
    pub matched_failures: usize,
    /// For each match: inferred position − true position of the loss, m.
    pub position_error_m: Vec<f64>,
    /// Successes in the truth.
    pub true_successes: usize,
    /// Successes inferred.
    pub inferred_successes: usize,
}

impl Comparison {
    /// Add another ride's comparison to this one.
    pub fn merge(&mut self, o: Comparison) {
        self.true_failures += o.true_failures;
        self.inferred_failures += o.inferred_failures;
        self.matched_failures += o.matched_failures;
        self.position_error_m.extend(o.position_error_m);
        self.true_successes += o.true_successes;
        self.inferred_successes += o.inferred_successes;
    }
}

/// How far apart in time an inferred and a true failure may be to be the same one.
pub const MATCH_MS: u64 = 2_000;

/// Compare `inferred` with `truth` (both of one ride): which true failures were found, where.
pub fn compare(truth: &[HandoverRecord], inferred: &[HandoverRecord]) -> Comparison {
    let mut c = Comparison::default();
    let mut used = vec![false; inferred.len()];
    for t in truth {
        if !t.outcome.failed() {
            c.true_successes += 1;
            continue;
        }
        c.true_failures += 1;
        let at = t.disruption_ms();
        let best = inferred
            .iter()
            .enumerate()
            .filter(|(i, h)| {
                !used[*i]
                    && h.outcome.failed()
                    && h.carrier == t.carrier
                    && h.from_cell == t.from_cell
                    && h.start_ms.abs_diff(at) <= MATCH_MS
            })
            .min_by_key(|(_, h)| h.start_ms.abs_diff(at));
        if let Some((i, h)) = best {
            used[i] = true;
            c.matched_failures += 1;
            if let (Some(x), Some(y)) = (h.position_m, t.disconnect_position_m()) {
                c.position_error_m.push(x - y);
            }
        }
    }
    for h in inferred {
        if h.outcome.failed() {
            c.inferred_failures += 1;
        } else {
            c.inferred_successes += 1;
        }
    }
    c
}
