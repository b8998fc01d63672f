//! Train context for the relay: where the train is, how fast it goes, and which cell each
//! modem is on. The relay forwards it to the proxy, whose handover predictions need it.
//!
//! Two sources, one output: a stream of [`ContextFix`]es on a `tokio::sync::mpsc` channel.
//!
//! * **gpsd** ([`follow_gpsd`]): the train's GNSS receiver through gpsd's JSON protocol (TCP,
//!   port 2947). The client sends `?WATCH={"enable":true,"json":true};` and reads one JSON
//!   object per line. `TPV` objects give time, position, speed (m/s) and track (degrees).
//!   Objects of class `POLYCORN` carry what gpsd does not know, the serving cell and RSRP of
//!   each modem; polycorn's trip replay server (`polycorn emu run`) emits them after each `TPV`
//!   and a modem monitor on a real train can do the same:
//!
//!   ```text
//!   {"class":"TPV","mode":3,"time":"2026-11-21T06:00:01.000Z","lat":39.86,"lon":116.37,"speed":83.3,"track":160.0}
//!   {"class":"POLYCORN","time":"2026-11-21T06:00:01.000Z","t_ms":1000,"carriers":[{"path":0,"name":"A","cell":1203000,"rsrp":-85.6},{"path":1,"name":"B","cell":null,"rsrp":null}]}
//!   ```
//!
//!   Each `TPV` with a fix becomes one [`ContextFix`], merged with the latest `POLYCORN`
//!   carriers. A `TPV` waits up to [`CARRIER_MERGE_WAIT`] for the `POLYCORN` of the same
//!   second (unless that came first), so fixes do not carry the previous second's cells; from
//!   a server that has never sent a `POLYCORN` object, any other line ends the wait too (plain
//!   gpsd follows a `TPV` with a `SKY`). Carriers more than [`MAX_CARRIER_AGE_MS`] away from a
//!   fix are not attached.
//!   Other classes (`VERSION`, `DEVICES`, `WATCH`, `SKY`, …) are ignored; a line that is not
//!   JSON, lacks a class, has mistyped fields, or is longer than [`MAX_LINE_BYTES`] is
//!   counted and logged with its line number, and skipped. When the connection fails or
//!   drops, the client reconnects after 100 ms, doubling up to [`MAX_BACKOFF`]. It ends when
//!   the receiver is dropped.
//!
//! * **A trip's context log** ([`read_replay_csv`], [`replay`]): the `context.csv` that
//!   `polycorn trip generate` writes, paced in real time (or faster), for runs without gpsd.
//!
//! Units: positions in degrees (WGS 84), speed in m/s, heading in degrees clockwise from
//! north, RSRP in dBm. Speed or heading that gpsd does not report are NaN (as in gpsd's own
//! C API).

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// What gpsd is asked to stream.
pub const GPSD_WATCH: &str = "?WATCH={\"enable\":true,\"json\":true};\n";
/// Longest JSON line accepted from gpsd (its `SKY` reports are a few KiB).
pub const MAX_LINE_BYTES: usize = 64 * 1024;
/// First reconnect delay.
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// Longest reconnect delay.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Longest wait for gpsd to accept a connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a `TPV` waits for the `POLYCORN` object of the same second.
pub const CARRIER_MERGE_WAIT: Duration = Duration::from_millis(250);
/// Carriers reported this much before (or after) a fix are too stale to attach to it.
pub const MAX_CARRIER_AGE_MS: u64 = 3_000;
/// Most carriers in one report or context row (the scheduler's path limit).
pub const MAX_CARRIERS: usize = polycorn_sched::path::MAX_PATHS;
/// Largest context CSV read.
pub const MAX_REPLAY_BYTES: u64 = 64 * 1024 * 1024;

/// One modem's serving cell at the time of a fix.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellReport {
    /// The path (modem) index, as in the relay's path configuration.
    pub path: u8,
    /// Serving cell identity; `None` when the modem has no cell (blackout).
    pub cell: Option<u64>,
    /// Serving cell RSRP, dBm; `None` when unknown or in a blackout.
    pub rsrp_dbm: Option<f32>,
}

/// Where the train is, at one moment, with each modem's serving cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContextFix {
    /// When the fix is for, ms since the Unix epoch (UTC). From gpsd: the `TPV` time (the
    /// local clock if gpsd sent none). From [`read_replay_csv`]: ms since the trip began,
    /// restamped to wall-clock time by [`replay`].
    pub unix_ms: u64,
    /// Latitude, degrees.
    pub lat: f64,
    /// Longitude, degrees.
    pub lon: f64,
    /// Ground speed, m/s (NaN if not reported).
    pub speed_mps: f64,
    /// Course over ground, degrees clockwise from true north (NaN if not reported).
    pub heading_deg: f64,
    /// Serving cells by path; empty when no carrier report is at hand.
    pub cells: Vec<CellReport>,
}

impl ContextFix {
    /// The fix as the relay sends it to the proxy: at most
    /// [`polycorn_proto::frame::MAX_CONTEXT_CELLS`] cells; a position out of range is clamped,
    /// and a speed or heading not reported is sent as 0.
    pub fn to_info(&self) -> polycorn_proto::ContextInfo {
        let finite = |v: f64| if v.is_finite() { v as f32 } else { 0.0 };
        polycorn_proto::ContextInfo {
            unix_ms: self.unix_ms,
            lat: self.lat.clamp(-90.0, 90.0),
            lon: self.lon.clamp(-180.0, 180.0),
            speed_mps: finite(self.speed_mps).max(0.0),
            heading_deg: finite(self.heading_deg),
            cells: self
                .cells
                .iter()
                .take(polycorn_proto::frame::MAX_CONTEXT_CELLS)
                .map(|c| polycorn_proto::CellInfo {
                    path: c.path,
                    cell: c.cell,
                    rsrp_dbm: c.rsrp_dbm.filter(|r| r.is_finite()),
                })
                .collect(),
        }
    }

    /// The fix a relay sent (the proxy records it, [`Recorder`]).
    pub fn from_info(info: &polycorn_proto::ContextInfo) -> ContextFix {
        ContextFix {
            unix_ms: info.unix_ms,
            lat: info.lat,
            lon: info.lon,
            speed_mps: f64::from(info.speed_mps),
            heading_deg: f64::from(info.heading_deg),
            cells: info
                .cells
                .iter()
                .map(|c| CellReport {
                    path: c.path,
                    cell: c.cell,
                    rsrp_dbm: c.rsrp_dbm,
                })
                .collect(),
        }
    }
}

impl fmt::Display for ContextFix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "t={}ms {:.6},{:.6} {:.1}m/s {:.0}°",
            self.unix_ms, self.lat, self.lon, self.speed_mps, self.heading_deg
        )?;
        for c in &self.cells {
            match (c.cell, c.rsrp_dbm) {
                (Some(cell), Some(r)) => write!(f, " p{}:{cell}@{r:.1}dBm", c.path)?,
                (Some(cell), None) => write!(f, " p{}:{cell}", c.path)?,
                (None, _) => write!(f, " p{}:-", c.path)?,
            }
        }
        Ok(())
    }
}

/// Why a context source failed.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    /// The file could not be read.
    #[error("{path}: {source}", path = .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The header line is not the expected one.
    #[error("{path}:1: bad header: {reason}", path = .path.display())]
    Header {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A row has the wrong number of fields.
    #[error("{path}:{line}: {found} fields, the header has {expected}", path = .path.display())]
    FieldCount {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// Fields in the header.
        expected: usize,
        /// Fields in this row.
        found: usize,
    },
    /// A field does not hold a valid value.
    #[error("{path}:{line}: column {column} (`{name}`): {reason}", path = .path.display())]
    Field {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// 1-based column number.
        column: usize,
        /// Column name from the header.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The replay speed-up is not a positive finite number.
    #[error("replay speed-up must be positive and finite, not {0}")]
    InvalidSpeedup(f64),
}

/// Counters of one [`follow_gpsd`] run, returned when it ends.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpsdStats {
    /// Connections established.
    pub connections: u64,
    /// Fixes delivered.
    pub fixes: u64,
    /// Lines skipped as malformed.
    pub malformed_lines: u64,
    /// `TPV` reports without a 2D fix (no position), skipped.
    pub tpv_without_fix: u64,
}

// ---------------------------------------------------------------------------------------------
// gpsd

#[derive(Deserialize)]
struct Tpv {
    #[serde(default)]
    mode: Option<u8>,
    #[serde(default)]
    time: Option<String>,
    #[serde(default)]
    lat: Option<f64>,
    #[serde(default)]
    lon: Option<f64>,
    #[serde(default)]
    speed: Option<f64>,
    #[serde(default)]
    track: Option<f64>,
}

#[derive(Deserialize)]
struct PolycornReport {
    #[serde(default)]
    time: Option<String>,
    carriers: Vec<CarrierJson>,
}

#[derive(Deserialize)]
struct CarrierJson {
    path: u8,
    #[serde(default)]
    cell: Option<u64>,
    #[serde(default)]
    rsrp: Option<f32>,
}

/// One parsed line.
#[derive(Debug, PartialEq)]
enum Report {
    /// A position (`TPV` with a fix).
    Fix(ContextFix),
    /// A `TPV` without position.
    NoFix,
    /// Carrier state at `unix_ms`.
    Carriers(u64, Vec<CellReport>),
    /// A class we do not use.
    Other,
}

fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Parse one line of gpsd JSON; `Err` says why it is malformed.
fn parse_line(line: &str) -> Result<Report, String> {
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let class = v
        .get("class")
        .and_then(|c| c.as_str())
        .ok_or("no \"class\" string")?;
    match class {
        "TPV" => {
            let t: Tpv = serde_json::from_value(v).map_err(|e| format!("TPV: {e}"))?;
            let (Some(lat), Some(lon)) = (t.lat, t.lon) else {
                return Ok(Report::NoFix);
            };
            if t.mode.is_some_and(|m| m < 2) {
                return Ok(Report::NoFix);
            }
            if !(lat.is_finite() && (-90.0..=90.0).contains(&lat)) {
                return Err(format!("TPV: latitude {lat} out of range"));
            }
            if !(lon.is_finite() && (-180.0..=180.0).contains(&lon)) {
                return Err(format!("TPV: longitude {lon} out of range"));
            }
            let unix_ms = match &t.time {
                Some(s) => parse_iso8601_ms(s).ok_or_else(|| format!("TPV: bad time {s:?}"))?,
                None => now_unix_ms(),
            };
            Ok(Report::Fix(ContextFix {
                unix_ms,
                lat,
                lon,
                speed_mps: t.speed.unwrap_or(f64::NAN),
                heading_deg: t.track.unwrap_or(f64::NAN),
                cells: Vec::new(),
            }))
        }
        "POLYCORN" => {
            let p: PolycornReport =
                serde_json::from_value(v).map_err(|e| format!("POLYCORN: {e}"))?;
            if p.carriers.len() > MAX_CARRIERS {
                return Err(format!(
                    "POLYCORN: {} carriers, at most {MAX_CARRIERS}",
                    p.carriers.len()
                ));
            }
            if let Some(c) = p
                .carriers
                .iter()
                .find(|c| usize::from(c.path) >= MAX_CARRIERS)
            {
                return Err(format!(
                    "POLYCORN: path {} not below {MAX_CARRIERS}",
                    c.path
                ));
            }
            let unix_ms = match &p.time {
                Some(s) => {
                    parse_iso8601_ms(s).ok_or_else(|| format!("POLYCORN: bad time {s:?}"))?
                }
                None => now_unix_ms(),
            };
            let cells = p
                .carriers
                .into_iter()
                .map(|c| CellReport {
                    path: c.path,
                    cell: c.cell,
                    rsrp_dbm: c.rsrp.filter(|r| r.is_finite()),
                })
                .collect();
            Ok(Report::Carriers(unix_ms, cells))
        }
        _ => Ok(Report::Other),
    }
}

/// Milliseconds since the Unix epoch of a UTC time as gpsd writes it
/// (`2026-11-21T06:00:01.000Z`; any number of fraction digits, or none).
fn parse_iso8601_ms(s: &str) -> Option<u64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.splitn(3, '-');
    let year: i64 = d.next()?.parse().ok()?;
    let month: i64 = d.next()?.parse().ok()?;
    let day: i64 = d.next()?.parse().ok()?;
    let (hms, frac) = match time.split_once('.') {
        Some((hms, frac)) => (hms, frac),
        None => (time, ""),
    };
    let mut t = hms.splitn(3, ':');
    let hour: i64 = t.next()?.parse().ok()?;
    let minute: i64 = t.next()?.parse().ok()?;
    let second: i64 = t.next()?.parse().ok()?;
    if !(1970..=9999).contains(&year)
        || !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let millis: i64 = frac
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(3)
        .fold(0, |acc, b| acc * 10 + i64::from(b - b'0'));
    // Days since 1970-01-01: to the first of the month, then on (a day past the month's end
    // runs into the next, as the hour, minute and second do).
    let first = time::Date::from_calendar_date(
        i32::try_from(year).ok()?,
        time::Month::try_from(u8::try_from(month).ok()?).ok()?,
        1,
    )
    .ok()?;
    let days = (first - time::OffsetDateTime::UNIX_EPOCH.date()).whole_days() + day - 1;
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second;
    u64::try_from(secs * 1000 + millis).ok()
}

/// Joins `TPV` fixes with the carrier reports that belong to them.
#[derive(Debug, Default)]
struct Merger {
    /// The latest carrier report: its time and cells.
    carriers: Option<(u64, Vec<CellReport>)>,
    /// Has the server ever sent carriers? Until then, any other line ends a fix's wait.
    expect_carriers: bool,
    /// A fix waiting for its carriers, and until when.
    pending: Option<(ContextFix, Instant)>,
}

impl Merger {
    fn attach(&self, mut fix: ContextFix) -> ContextFix {
        if let Some((t, cells)) = &self.carriers {
            if t.abs_diff(fix.unix_ms) <= MAX_CARRIER_AGE_MS {
                fix.cells = cells.clone();
            }
        }
        fix
    }

    /// A fix arrived; returns the fixes ready to send.
    fn on_fix(&mut self, fix: ContextFix, now: Instant) -> Vec<ContextFix> {
        let mut out: Vec<ContextFix> = self.flush().into_iter().collect();
        let fresh = self
            .carriers
            .as_ref()
            .is_some_and(|(t, _)| *t == fix.unix_ms);
        if fresh {
            out.push(self.attach(fix));
        } else {
            self.pending = Some((fix, now + CARRIER_MERGE_WAIT));
        }
        out
    }

    /// A line other than a fix or carriers arrived: a waiting fix goes out if this server
    /// does not send carriers.
    fn on_other(&mut self) -> Option<ContextFix> {
        if self.expect_carriers {
            None
        } else {
            self.flush()
        }
    }

    /// A carrier report arrived; returns the waiting fix, if any, now complete.
    fn on_carriers(&mut self, unix_ms: u64, cells: Vec<CellReport>) -> Option<ContextFix> {
        self.carriers = Some((unix_ms, cells));
        self.expect_carriers = true;
        self.flush()
    }

    /// Send the waiting fix with whatever carriers are at hand.
    fn flush(&mut self) -> Option<ContextFix> {
        let (fix, _) = self.pending.take()?;
        Some(self.attach(fix))
    }

    fn deadline(&self) -> Option<Instant> {
        self.pending.as_ref().map(|(_, d)| *d)
    }
}

/// Reads newline-terminated lines of bounded length. Cancel-safe: partial lines stay in
/// `buf` when a `select!` drops [`LineReader::next_line`].
struct LineReader<R> {
    inner: R,
    buf: Vec<u8>,
    /// Skipping the rest of an overlong line.
    discarding: bool,
}

/// One line from [`LineReader`].
enum Line {
    Text(Vec<u8>),
    TooLong,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    fn new(inner: R) -> Self {
        LineReader {
            inner,
            buf: Vec::new(),
            discarding: false,
        }
    }

    /// The next line, or `None` at end of stream (a last unterminated line is dropped).
    async fn next_line(&mut self) -> io::Result<Option<Line>> {
        loop {
            let chunk = self.inner.fill_buf().await?;
            if chunk.is_empty() {
                return Ok(None);
            }
            let (take, complete) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            if !self.discarding {
                let room = MAX_LINE_BYTES + 1 - self.buf.len();
                self.buf.extend_from_slice(&chunk[..take.min(room)]);
                if self.buf.len() > MAX_LINE_BYTES {
                    self.discarding = true;
                    self.buf.clear();
                }
            }
            self.inner.consume(take);
            if complete {
                if std::mem::take(&mut self.discarding) {
                    return Ok(Some(Line::TooLong));
                }
                let mut line = std::mem::take(&mut self.buf);
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(Some(Line::Text(line)));
            }
        }
    }
}

/// How a connection ended.
enum SessionEnd {
    /// The receiver is gone: stop.
    ReceiverGone,
    /// The connection ended or failed; reconnect. Whether any line was read.
    Dropped { got_lines: bool, why: String },
}

async fn send_all(
    tx: &mpsc::Sender<ContextFix>,
    fixes: impl IntoIterator<Item = ContextFix>,
    stats: &mut GpsdStats,
) -> bool {
    for fix in fixes {
        if tx.send(fix).await.is_err() {
            return false;
        }
        stats.fixes += 1;
    }
    true
}

async fn session(
    stream: TcpStream,
    addr: SocketAddr,
    tx: &mpsc::Sender<ContextFix>,
    stats: &mut GpsdStats,
    merger: &mut Merger,
) -> SessionEnd {
    let (read, mut write) = stream.into_split();
    if let Err(e) = write.write_all(GPSD_WATCH.as_bytes()).await {
        return SessionEnd::Dropped {
            got_lines: false,
            why: format!("sending ?WATCH: {e}"),
        };
    }
    let mut lines = LineReader::new(BufReader::new(read));
    let mut line_no: u64 = 0;
    loop {
        let deadline = merger.deadline();
        let line = tokio::select! {
            _ = tx.closed() => return SessionEnd::ReceiverGone,
            _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                if !send_all(tx, merger.flush(), stats).await {
                    return SessionEnd::ReceiverGone;
                }
                continue;
            }
            line = lines.next_line() => line,
        };
        let text = match line {
            Ok(Some(Line::Text(t))) => t,
            Ok(Some(Line::TooLong)) => {
                line_no += 1;
                stats.malformed_lines += 1;
                tracing::warn!(%addr, line = line_no, "gpsd line longer than {MAX_LINE_BYTES} bytes, skipped");
                continue;
            }
            Ok(None) => {
                // A fix waiting for its carriers goes out before reconnecting.
                let ok = send_all(tx, merger.flush(), stats).await;
                if !ok {
                    return SessionEnd::ReceiverGone;
                }
                return SessionEnd::Dropped {
                    got_lines: line_no > 0,
                    why: "gpsd closed the connection".into(),
                };
            }
            Err(e) => {
                let _ = send_all(tx, merger.flush(), stats).await;
                return SessionEnd::Dropped {
                    got_lines: line_no > 0,
                    why: format!("reading: {e}"),
                };
            }
        };
        line_no += 1;
        let Ok(text) = std::str::from_utf8(&text) else {
            stats.malformed_lines += 1;
            tracing::warn!(%addr, line = line_no, "gpsd line is not UTF-8, skipped");
            continue;
        };
        if text.trim().is_empty() {
            continue;
        }
        let ready: Vec<ContextFix> = match parse_line(text) {
            Ok(Report::Fix(fix)) => merger.on_fix(fix, Instant::now()),
            Ok(Report::Carriers(t, cells)) => merger.on_carriers(t, cells).into_iter().collect(),
            Ok(Report::NoFix) => {
                stats.tpv_without_fix += 1;
                tracing::debug!(%addr, line = line_no, "gpsd TPV without a fix");
                merger.on_other().into_iter().collect()
            }
            Ok(Report::Other) => merger.on_other().into_iter().collect(),
            Err(why) => {
                stats.malformed_lines += 1;
                tracing::warn!(%addr, line = line_no, "malformed gpsd line skipped: {why}");
                Vec::new()
            }
        };
        if !send_all(tx, ready, stats).await {
            return SessionEnd::ReceiverGone;
        }
    }
}

/// Follow gpsd at `addr` and send a [`ContextFix`] per position report to `tx`, reconnecting
/// whenever the connection fails or drops, until the receiver is dropped. Returns the
/// counters of the run. See the module documentation for the protocol and the merging of
/// carrier reports.
pub async fn follow_gpsd(addr: SocketAddr, tx: mpsc::Sender<ContextFix>) -> GpsdStats {
    let mut stats = GpsdStats::default();
    let mut merger = Merger::default();
    let mut backoff = INITIAL_BACKOFF;
    loop {
        let connected = tokio::select! {
            _ = tx.closed() => return stats,
            r = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)) => r,
        };
        match connected {
            Ok(Ok(stream)) => {
                stats.connections += 1;
                tracing::info!(%addr, "connected to gpsd");
                match session(stream, addr, &tx, &mut stats, &mut merger).await {
                    SessionEnd::ReceiverGone => return stats,
                    SessionEnd::Dropped { got_lines, why } => {
                        tracing::warn!(%addr, "gpsd connection lost: {why}");
                        if got_lines {
                            backoff = INITIAL_BACKOFF;
                        }
                    }
                }
            }
            Ok(Err(e)) => tracing::warn!(%addr, "cannot connect to gpsd: {e}"),
            Err(_) => tracing::warn!(%addr, "connecting to gpsd timed out"),
        }
        tracing::debug!(%addr, "reconnecting to gpsd in {backoff:?}");
        tokio::select! {
            _ = tx.closed() => return stats,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

// ---------------------------------------------------------------------------------------------
// Replay CSV

/// The fixed leading columns of `context.csv`.
pub const CSV_BASE_COLUMNS: [&str; 5] = ["t_ms", "lat", "lon", "speed_mps", "heading_deg"];

/// Read the context log `polycorn trip generate` writes (`context.csv`):
///
/// ```text
/// t_ms,lat,lon,speed_mps,heading_deg,cell_A,rsrp_dbm_A,cell_B,rsrp_dbm_B
/// 0,39.8650000,116.3780000,0.00,160.0,1203000,-85.6,2201000,-92.1
/// 1000,39.8649000,116.3781000,8.33,160.0,,,2201000,-92.4
/// ```
///
/// After the five fixed columns come one `cell_NAME,rsrp_dbm_NAME` pair per carrier, in path
/// order (path 0 first; at most [`MAX_CARRIERS`]); empty fields mean no cell (blackout), an
/// empty speed or heading one the receiver did not report. A relay's own log ([`Recorder`])
/// has the same format.
/// `t_ms` is time since the trip began and must not decrease; it becomes
/// [`ContextFix::unix_ms`] as is ([`replay`] restamps it). Blank lines are skipped. Errors
/// name the file, line and column.
pub fn read_replay_csv(path: impl AsRef<Path>) -> Result<Vec<ContextFix>, ContextError> {
    let path = path.as_ref();
    let io_err = |source| ContextError::Io {
        path: path.to_path_buf(),
        source,
    };
    let size = std::fs::metadata(path).map_err(io_err)?.len();
    if size > MAX_REPLAY_BYTES {
        return Err(io_err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{size} bytes, more than the {MAX_REPLAY_BYTES} accepted"),
        )));
    }
    let text = std::fs::read_to_string(path).map_err(io_err)?;
    parse_replay_csv(path, &text)
}

fn parse_replay_csv(path: &Path, text: &str) -> Result<Vec<ContextFix>, ContextError> {
    let header_err = |reason: String| ContextError::Header {
        path: path.to_path_buf(),
        reason,
    };
    let mut lines = text.lines().enumerate();
    let header = lines
        .next()
        .map(|(_, l)| l.trim_end_matches('\r'))
        .ok_or_else(|| header_err("empty file".into()))?;
    let names: Vec<&str> = header.split(',').map(str::trim).collect();
    if names.len() < CSV_BASE_COLUMNS.len() || names[..5] != CSV_BASE_COLUMNS {
        return Err(header_err(format!(
            "must start with `{}`, found `{header}`",
            CSV_BASE_COLUMNS.join(",")
        )));
    }
    let carrier_cols = &names[5..];
    if carrier_cols.len() % 2 != 0 {
        return Err(header_err(format!(
            "carrier columns come in pairs `cell_NAME,rsrp_dbm_NAME`; found {} columns",
            carrier_cols.len()
        )));
    }
    let carriers = carrier_cols.len() / 2;
    if carriers > MAX_CARRIERS {
        return Err(header_err(format!(
            "{carriers} carriers, at most {MAX_CARRIERS}"
        )));
    }
    for (i, pair) in carrier_cols.chunks(2).enumerate() {
        let cell = pair[0].strip_prefix("cell_");
        let rsrp = pair[1].strip_prefix("rsrp_dbm_");
        match (cell, rsrp) {
            (Some(a), Some(b)) if !a.is_empty() && a == b => {}
            _ => {
                return Err(header_err(format!(
                    "columns {} and {}: expected `cell_NAME,rsrp_dbm_NAME` for carrier {i}, found `{},{}`",
                    6 + 2 * i,
                    7 + 2 * i,
                    pair[0],
                    pair[1]
                )))
            }
        }
    }

    let mut fixes = Vec::new();
    let mut last_t: Option<u64> = None;
    for (idx, raw) in lines {
        let line = idx + 1;
        let row = raw.trim_end_matches('\r');
        if row.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = row.split(',').map(str::trim).collect();
        if fields.len() != names.len() {
            return Err(ContextError::FieldCount {
                path: path.to_path_buf(),
                line,
                expected: names.len(),
                found: fields.len(),
            });
        }
        let field_err = |col: usize, reason: String| ContextError::Field {
            path: path.to_path_buf(),
            line,
            column: col + 1,
            name: names[col].to_string(),
            reason,
        };
        let num = |col: usize| -> Result<f64, ContextError> {
            let v: f64 = fields[col]
                .parse()
                .map_err(|_| field_err(col, format!("`{}` is not a number", fields[col])))?;
            if v.is_finite() {
                Ok(v)
            } else {
                Err(field_err(col, format!("`{}` is not finite", fields[col])))
            }
        };
        let t_ms: u64 = fields[0].parse().map_err(|_| {
            field_err(
                0,
                format!("`{}` is not a whole number of milliseconds", fields[0]),
            )
        })?;
        if let Some(prev) = last_t {
            if t_ms < prev {
                return Err(field_err(0, format!("goes back in time ({t_ms} < {prev})")));
            }
        }
        last_t = Some(t_ms);
        let lat = num(1)?;
        if !(-90.0..=90.0).contains(&lat) {
            return Err(field_err(1, format!("{lat} is not a latitude")));
        }
        let lon = num(2)?;
        if !(-180.0..=180.0).contains(&lon) {
            return Err(field_err(2, format!("{lon} is not a longitude")));
        }
        // Empty: not reported (a relay's own log, [`Recorder`], of a receiver without them).
        let speed_mps = if fields[3].is_empty() {
            f64::NAN
        } else {
            num(3)?
        };
        if speed_mps < 0.0 {
            return Err(field_err(3, format!("negative speed {speed_mps}")));
        }
        let heading_deg = if fields[4].is_empty() {
            f64::NAN
        } else {
            num(4)?
        };
        let mut cells = Vec::with_capacity(carriers);
        for k in 0..carriers {
            let (ci, ri) = (5 + 2 * k, 6 + 2 * k);
            let cell = match fields[ci] {
                "" => None,
                UNREPORTED => {
                    // No report from this modem at this fix ([`Recorder`]): nothing is known.
                    if !fields[ri].is_empty() {
                        return Err(field_err(
                            ri,
                            format!("an RSRP (`{}`) for a cell not reported (`?`)", fields[ri]),
                        ));
                    }
                    continue;
                }
                s => Some(s.parse::<u64>().map_err(|_| {
                    field_err(
                        ci,
                        format!("`{s}` is not a cell identity (or empty, or `{UNREPORTED}`)"),
                    )
                })?),
            };
            let rsrp_dbm = match fields[ri] {
                "" => None,
                s => {
                    let v: f32 = s
                        .parse()
                        .map_err(|_| field_err(ri, format!("`{s}` is not a number (or empty)")))?;
                    if !v.is_finite() {
                        return Err(field_err(ri, format!("`{s}` is not finite")));
                    }
                    Some(v)
                }
            };
            cells.push(CellReport {
                path: k as u8,
                cell,
                rsrp_dbm,
            });
        }
        fixes.push(ContextFix {
            unix_ms: t_ms,
            lat,
            lon,
            speed_mps,
            heading_deg,
            cells,
        });
    }
    Ok(fixes)
}

/// Send `fixes` to `tx` paced by their times: the first at once, each next one when its time
/// (relative to the first) has come, `speedup` times faster than real time. Each fix is
/// restamped with the wall-clock time it stands for (replay start + trip time / `speedup`),
/// so receivers see current Unix times. Returns how many were delivered: all of them, or
/// fewer if the receiver was dropped.
pub async fn replay(
    fixes: Vec<ContextFix>,
    tx: mpsc::Sender<ContextFix>,
    speedup: f64,
) -> Result<usize, ContextError> {
    if !(speedup.is_finite() && speedup > 0.0) {
        return Err(ContextError::InvalidSpeedup(speedup));
    }
    let Some(t0) = fixes.first().map(|f| f.unix_ms) else {
        return Ok(0);
    };
    let start = Instant::now();
    let wall0 = now_unix_ms();
    let mut sent = 0;
    for mut fix in fixes {
        let offset = Duration::from_millis(fix.unix_ms.saturating_sub(t0)).div_f64(speedup);
        tokio::select! {
            _ = tx.closed() => return Ok(sent),
            _ = tokio::time::sleep_until(start + offset) => {}
        }
        fix.unix_ms = wall0 + offset.as_millis() as u64;
        if tx.send(fix).await.is_err() {
            return Ok(sent);
        }
        sent += 1;
    }
    Ok(sent)
}

// ---------------------------------------------------------------------------------------------
// Cell losses against the paths' silence

/// Finds the cell losses the modem monitor reports (a path's modem with a cell at one fix,
/// without at the next) and how long that path had then been silent. A path that goes dark
/// stops delivering the peer's frames at once; its modem is reported without a cell the
/// monitor's lag later, plus up to one fix interval (the monitor's reports are merged with the
/// fixes), so the silence at the report estimates the lag `linkdb import --monitor-lag-ms`
/// undoes, within about a second. A loss while the path still delivers frames (the report
/// is wrong, or the blackout is elsewhere) shows as a silence under the probe interval.
#[derive(Debug, Default)]
pub struct CellLossDelay {
    /// Per path: the cell last reported (`Some(None)`: no cell).
    last: [Option<Option<u64>>; MAX_CARRIERS],
}

impl CellLossDelay {
    /// The losses `cells` report, each with its path's silence (`silent_for`, `None` for a
    /// path never heard: not counted).
    pub fn on_fix(
        &mut self,
        cells: &[polycorn_proto::CellInfo],
        mut silent_for: impl FnMut(u8) -> Option<polycorn_sched::Duration>,
    ) -> Vec<(u8, polycorn_sched::Duration)> {
        let mut out = Vec::new();
        for c in cells {
            let Some(slot) = self.last.get_mut(usize::from(c.path)) else {
                continue;
            };
            let before = slot.replace(c.cell);
            if matches!(before, Some(Some(_))) && c.cell.is_none() {
                if let Some(d) = silent_for(c.path) {
                    out.push((c.path, d));
                }
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Recording

/// Prefix of a relay's context log files (`context-20261130T111639Z.csv`).
pub const RECORD_PREFIX: &str = "context-";

/// The UTC day of `unix_ms` as a context log's name gives it (`YYYYMMDD`): logs of days before
/// [`record_day`] of now are no longer written (`linkdb import --ride-log --past-days`).
pub fn record_day(unix_ms: u64) -> String {
    let (y, m, d) = crate::tls::civil_from_days((unix_ms / 86_400_000) as i64);
    format!("{y:04}{m:02}{d:02}")
}

/// A context log's cell column for a modem that sent no report at that fix, while others did
/// (its RSRP column is then empty). Unlike an empty cell, which says the modem had no cell,
/// it says nothing: [`read_replay_csv`] leaves the modem out of that fix, and LinkDB's import
/// sees a gap in that modem's cells.
pub const UNREPORTED: &str = polycorn_linkdb::import::relay::UNREPORTED;

/// The relay's own context log (`[context] record`): every fix it receives, with each modem's
/// serving cell and RSRP, in the format [`read_replay_csv`] reads (so a day on the train can be
/// replayed in the testbed) and `polycorn linkdb import --ride-log` turns into handover history.
///
/// One file per UTC day and per start, named after its first fix
/// (`context-YYYYMMDDTHHMMSSZ.csv`); `t_ms` counts from that fix. A fix no later than the one
/// before is skipped (gpsd repeats a `TPV` when nothing changed); a clock that goes back starts
/// a new file. A fix without any carrier report (the modem monitor is silent, or a plain gpsd)
/// is not written either: an empty cell column says the modem had no cell, which a missing
/// report does not (LinkDB would take it for a failed handover on every carrier). A fix with
/// reports for some modems only writes [`UNREPORTED`] for the others. Each row is written
/// through at once, so a crash loses at most the row being written.
///
/// With [`Recorder::keep_days`], starting a file removes the directory's logs of days that
/// ended more than that many days ago (by their names; nothing else in the directory).
#[derive(Debug)]
pub struct Recorder {
    dir: PathBuf,
    carriers: Vec<String>,
    open: Option<OpenLog>,
    rows: u64,
    keep_days: Option<u32>,
}

#[derive(Debug)]
struct OpenLog {
    file: std::io::BufWriter<std::fs::File>,
    path: PathBuf,
    day: u64,
    start_ms: u64,
    last_ms: u64,
}

impl Recorder {
    /// A recorder writing into `dir` (created if missing), with one `cell_NAME,rsrp_dbm_NAME`
    /// column pair per carrier in path order.
    pub fn new(dir: &Path, carriers: Vec<String>) -> Result<Self, ContextError> {
        if carriers.is_empty() || carriers.len() > MAX_CARRIERS {
            return Err(ContextError::Io {
                path: dir.to_path_buf(),
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{} carriers: 1 to {MAX_CARRIERS}", carriers.len()),
                ),
            });
        }
        if let Some(bad) = carriers
            .iter()
            .find(|c| c.is_empty() || c.contains([',', '\n', '\r', '"']))
        {
            return Err(ContextError::Io {
                path: dir.to_path_buf(),
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("carrier name `{bad}` cannot be a column name"),
                ),
            });
        }
        std::fs::create_dir_all(dir).map_err(|source| ContextError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        Ok(Recorder {
            dir: dir.to_path_buf(),
            carriers,
            open: None,
            rows: 0,
            keep_days: None,
        })
    }

    /// Keep the logs of the last `days` finished days (`[context] keep_days`), plus today's;
    /// `None`: keep every log.
    pub fn keep_days(mut self, days: Option<u32>) -> Self {
        self.keep_days = days;
        self
    }

    /// Removes the logs of days before `keep_days` days ago, the day counted from `unix_ms` or
    /// the system clock, whichever is earlier (a GPS time in the future must not empty the
    /// directory). Returns how many were removed; a file that cannot be removed is logged and
    /// left.
    fn prune(&self, unix_ms: u64) -> usize {
        let Some(days) = self.keep_days else {
            return 0;
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let Some(cutoff_ms) = unix_ms.min(now).checked_sub(u64::from(days) * 86_400_000) else {
            return 0;
        };
        let cutoff = record_day(cutoff_ms);
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut removed = 0;
        for e in entries.flatten() {
            let path = e.path();
            let old = path.extension().is_some_and(|x| x == "csv")
                && polycorn_linkdb::import::relay::log_day(&path)
                    .is_some_and(|d| d < cutoff.as_str());
            if !old || !e.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => removed += 1,
                Err(e) => tracing::warn!(
                    file = %path.display(),
                    error = %e,
                    "context.keep_days: cannot remove an old context log"
                ),
            }
        }
        if removed > 0 {
            tracing::info!(
                dir = %self.dir.display(),
                removed,
                keep_days = days,
                "context logs of days before {cutoff} removed"
            );
        }
        removed
    }

    /// Rows written so far (fixes, not headers), over all files.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Append `fix`. Returns the file it started, when it started one.
    pub fn record(&mut self, fix: &ContextFix) -> Result<Option<PathBuf>, ContextError> {
        if fix.cells.is_empty() {
            return Ok(None);
        }
        let day = fix.unix_ms / 86_400_000;
        let continues = match &self.open {
            Some(o) if o.day == day && fix.unix_ms >= o.last_ms => {
                if fix.unix_ms == o.last_ms {
                    return Ok(None);
                }
                true
            }
            _ => false,
        };
        let started = if continues {
            None
        } else {
            Some(self.start(fix.unix_ms)?)
        };
        let o = self.open.as_mut().expect("a log is open");
        let mut row = format!(
            "{},{:.7},{:.7},",
            fix.unix_ms - o.start_ms,
            fix.lat,
            fix.lon
        );
        if fix.speed_mps.is_finite() {
            row.push_str(&format!("{:.2}", fix.speed_mps.max(0.0)));
        }
        row.push(',');
        if fix.heading_deg.is_finite() {
            row.push_str(&format!("{:.1}", fix.heading_deg));
        }
        for k in 0..self.carriers.len() {
            let c = fix.cells.iter().find(|c| usize::from(c.path) == k);
            row.push(',');
            if c.is_none() {
                row.push_str(UNREPORTED);
                row.push(',');
                continue;
            }
            if let Some(cell) = c.and_then(|c| c.cell) {
                row.push_str(&cell.to_string());
            }
            row.push(',');
            if let Some(r) = c.and_then(|c| c.rsrp_dbm).filter(|r| r.is_finite()) {
                row.push_str(&format!("{r:.1}"));
            }
        }
        row.push('\n');
        let io_err = |source| ContextError::Io {
            path: o.path.clone(),
            source,
        };
        use std::io::Write as _;
        o.file.write_all(row.as_bytes()).map_err(io_err)?;
        o.file.flush().map_err(io_err)?;
        o.last_ms = fix.unix_ms;
        self.rows += 1;
        Ok(started)
    }

    fn start(&mut self, unix_ms: u64) -> Result<PathBuf, ContextError> {
        let secs = unix_ms / 1000;
        let sod = secs % 86_400;
        let stamp = format!(
            "{}T{:02}{:02}{:02}Z",
            record_day(unix_ms),
            sod / 3600,
            sod / 60 % 60,
            sod % 60
        );
        let mut n = 1;
        let (path, file) = loop {
            let name = if n == 1 {
                format!("{RECORD_PREFIX}{stamp}.csv")
            } else {
                format!("{RECORD_PREFIX}{stamp}-{n}.csv")
            };
            let path = self.dir.join(name);
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(f) => break (path, f),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
                Err(source) => return Err(ContextError::Io { path, source }),
            }
        };
        let mut file = std::io::BufWriter::new(file);
        let mut header = CSV_BASE_COLUMNS.join(",");
        for c in &self.carriers {
            header.push_str(&format!(",cell_{c},rsrp_dbm_{c}"));
        }
        header.push('\n');
        use std::io::Write as _;
        file.write_all(header.as_bytes())
            .and_then(|()| file.flush())
            .map_err(|source| ContextError::Io {
                path: path.clone(),
                source,
            })?;
        self.open = Some(OpenLog {
            file,
            path: path.clone(),
            day: unix_ms / 86_400_000,
            start_ms: unix_ms,
            last_ms: unix_ms,
        });
        self.prune(unix_ms);
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso8601() {
        assert_eq!(parse_iso8601_ms("1970-01-01T00:00:00.000Z"), Some(0));
        assert_eq!(
            parse_iso8601_ms("2026-11-21T00:00:00.250Z"),
            Some(1_795_219_200_250)
        );
        assert_eq!(
            parse_iso8601_ms("2000-02-29T00:00:00Z"),
            Some(951_782_400_000)
        );
        assert_eq!(
            parse_iso8601_ms("2000-02-29T00:00:01.5Z"),
            Some(951_782_401_500)
        );
        for bad in [
            "",
            "2000-02-29",
            "2000-02-29T00:00:00",
            "2000-13-01T00:00:00Z",
            "2000-02-29T24:00:00Z",
            "x-02-29T00:00:00Z",
            "2000-02-29T00:00:00.1a2Z",
        ] {
            assert_eq!(parse_iso8601_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn parse_lines() {
        let tpv = r#"{"class":"TPV","device":"x","mode":3,"time":"1970-01-01T00:00:01.000Z","lat":39.86,"lon":116.37,"speed":83.3,"track":160.0}"#;
        match parse_line(tpv).unwrap() {
            Report::Fix(f) => {
                assert_eq!(f.unix_ms, 1000);
                assert_eq!(
                    (f.lat, f.lon, f.speed_mps, f.heading_deg),
                    (39.86, 116.37, 83.3, 160.0)
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            parse_line(r#"{"class":"TPV","mode":1}"#).unwrap(),
            Report::NoFix
        );
        assert_eq!(
            parse_line(r#"{"class":"SKY","satellites":[]}"#).unwrap(),
            Report::Other
        );
        let pc = r#"{"class":"POLYCORN","time":"1970-01-01T00:00:01.000Z","t_ms":1000,"carriers":[{"path":0,"name":"A","cell":1203000,"rsrp":-85.6},{"path":1,"name":"B","cell":null,"rsrp":null}]}"#;
        match parse_line(pc).unwrap() {
            Report::Carriers(t, cells) => {
                assert_eq!(t, 1000);
                assert_eq!(cells[0].cell, Some(1_203_000));
                assert_eq!(
                    cells[1],
                    CellReport {
                        path: 1,
                        cell: None,
                        rsrp_dbm: None
                    }
                );
            }
            other => panic!("{other:?}"),
        }
        for bad in [
            "{",
            "[]",
            r#"{"class":5}"#,
            r#"{"class":"TPV","lat":"north","lon":1}"#,
            r#"{"class":"TPV","lat":91,"lon":1}"#,
            r#"{"class":"TPV","lat":1,"lon":1,"time":"yesterday"}"#,
            r#"{"class":"POLYCORN","carriers":[{"path":-1}]}"#,
            r#"{"class":"POLYCORN"}"#,
            r#"{"class":"POLYCORN","carriers":[{"path":32,"cell":null,"rsrp":null}]}"#,
        ] {
            assert!(parse_line(bad).is_err(), "{bad}");
        }
    }

    fn fix(t: u64) -> ContextFix {
        ContextFix {
            unix_ms: t,
            lat: 1.0,
            lon: 2.0,
            speed_mps: 3.0,
            heading_deg: 4.0,
            cells: Vec::new(),
        }
    }

    fn cells(cell: u64) -> Vec<CellReport> {
        vec![CellReport {
            path: 0,
            cell: Some(cell),
            rsrp_dbm: Some(-90.0),
        }]
    }

    #[test]
    fn merger_joins_fixes_with_their_carriers() {
        let now = Instant::now();
        let mut m = Merger::default();
        // Plain gpsd: a fix waits for the next line (or the deadline), then goes without cells.
        assert!(m.on_fix(fix(500), now).is_empty());
        assert_eq!(m.deadline(), Some(now + CARRIER_MERGE_WAIT));
        let out = m.on_other().unwrap();
        assert!(out.cells.is_empty());
        assert!(m.on_fix(fix(1000), now).is_empty());
        // The emulator's order: the fix, then its carriers.
        assert_eq!(m.on_carriers(1000, cells(6)).unwrap().cells, cells(6));
        // From now on other lines do not end the wait.
        assert!(m.on_fix(fix(2000), now).is_empty());
        assert_eq!(m.on_other(), None);
        assert_eq!(m.deadline(), Some(now + CARRIER_MERGE_WAIT));
        let done = m.on_carriers(2000, cells(8)).unwrap();
        assert_eq!(done.cells, cells(8));
        // Carriers first, fix of the same time second: out at once.
        assert_eq!(m.on_carriers(3000, cells(9)), None);
        let out = m.on_fix(fix(3000), now);
        assert_eq!(out[0].cells, cells(9));
        // A fix whose carriers never come is flushed by the next fix with the latest ones...
        assert!(m.on_fix(fix(4000), now).is_empty());
        let out = m.on_fix(fix(5000), now);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].unix_ms, out[0].cells.clone()), (4000, cells(9)));
        // ...and carriers too old are not attached.
        assert!(m.on_fix(fix(9000), now).len() == 1);
        let late = m.flush().unwrap();
        assert_eq!(late.unix_ms, 9000);
        assert!(late.cells.is_empty());
    }
}
