//! Persistence: one schema and one set of SQL statements for SQLite and PostgreSQL.
//!
//! * `sqlite:PATH` (or `sqlite::memory:`) — an embedded SQLite file (rusqlite, bundled SQLite):
//!   the default on a relay or a laptop.
//! * `postgres://…` / `postgresql://…` — a PostgreSQL server, for a fleet's shared history.
//!
//! Both engines get the *same* SQL text: `$N` placeholders (SQLite reads `$1` as a named
//! parameter bound by position), `BIGINT`/`DOUBLE PRECISION`/`TEXT` columns, `ON CONFLICT … DO
//! NOTHING`, no engine-specific auto-increment (rows are keyed by trip and sequence number).
//! The two backends differ only in how a statement is sent ([`Conn`]).
//!
//! Migrations are numbered; `schema_version` holds the highest applied. Opening a database
//! applies the missing ones in one transaction each; a database newer than this code is
//! refused. Importing a trip whose key is already stored inserts nothing (the insert of the trip
//! row does nothing, and its children are skipped) — also when two importers race, since the
//! loser blocks on the key until the winner commits.

use std::path::PathBuf;

use crate::record::{
    Direction, HandoverRecord, LossRecord, Outcome, RadioSample, Sample, Source, TripData, TripMeta,
};

/// Schema migrations: (version, statements). Append only; never edit an applied one.
pub const MIGRATIONS: &[(i64, &str)] = &[
    (
        1,
        "CREATE TABLE trips (
            trip_key TEXT PRIMARY KEY,
            source TEXT NOT NULL,
            name TEXT NOT NULL,
            route TEXT NOT NULL,
            direction TEXT NOT NULL,
            carriers TEXT NOT NULL,
            duration_ms BIGINT NOT NULL
        );
        CREATE TABLE handovers (
            trip_key TEXT NOT NULL REFERENCES trips (trip_key) ON DELETE CASCADE,
            seq BIGINT NOT NULL,
            carrier TEXT NOT NULL,
            from_cell TEXT NOT NULL,
            to_cell TEXT,
            direction TEXT NOT NULL,
            start_ms BIGINT NOT NULL,
            position_m DOUBLE PRECISION,
            lat DOUBLE PRECISION,
            lon DOUBLE PRECISION,
            rsrp_dbm DOUBLE PRECISION,
            outcome TEXT NOT NULL,
            interruption_ms BIGINT,
            PRIMARY KEY (trip_key, seq)
        );
        CREATE TABLE samples (
            trip_key TEXT NOT NULL REFERENCES trips (trip_key) ON DELETE CASCADE,
            seq BIGINT NOT NULL,
            t_ms BIGINT NOT NULL,
            lat DOUBLE PRECISION,
            lon DOUBLE PRECISION,
            position_m DOUBLE PRECISION,
            speed_mps DOUBLE PRECISION,
            heading_deg DOUBLE PRECISION,
            PRIMARY KEY (trip_key, seq)
        );
        CREATE TABLE radio_samples (
            trip_key TEXT NOT NULL REFERENCES trips (trip_key) ON DELETE CASCADE,
            seq BIGINT NOT NULL,
            t_ms BIGINT NOT NULL,
            carrier TEXT NOT NULL,
            cell TEXT,
            rsrp_dbm DOUBLE PRECISION,
            PRIMARY KEY (trip_key, seq)
        )",
    ),
    (
        2,
        "CREATE INDEX handovers_by_cell ON handovers (carrier, from_cell, direction);
        CREATE INDEX trips_by_route ON trips (source, route)",
    ),
    (
        3,
        // Where a failing handover lost its source cell, when not at its start.
        "ALTER TABLE handovers ADD COLUMN lost_ms BIGINT;
        ALTER TABLE handovers ADD COLUMN lost_position_m DOUBLE PRECISION;
        ALTER TABLE handovers ADD COLUMN lost_lat DOUBLE PRECISION;
        ALTER TABLE handovers ADD COLUMN lost_lon DOUBLE PRECISION;
        ALTER TABLE handovers ADD COLUMN lost_rsrp_dbm DOUBLE PRECISION",
    ),
];

/// The importer's own bookkeeping: context logs of finished days already imported (`linkdb
/// import --past-days`), by absolute path, with their size then, so a nightly import reads only
/// the new ones. Made on first use rather than by a numbered migration: the trips' schema, and
/// so the version a database has, stays the same, and binaries from before it (relays sharing
/// the database) still open it.
const IMPORTED_LOGS: &str = "CREATE TABLE IF NOT EXISTS imported_logs (
    path TEXT PRIMARY KEY,
    bytes BIGINT NOT NULL
)";

/// When each ride began ([`TripMeta::started_ms`]), for the rides whose source says. A side
/// table made when a database is opened, like `imported_logs` and for the same reason: the
/// version stays, so relays of an older release sharing the database still open it (their
/// imports store no start, and [`Store::prune`] then reads it from the ride's name).
const TRIP_STARTS: &str = "CREATE TABLE IF NOT EXISTS trip_starts (
    trip_key TEXT PRIMARY KEY,
    started_ms BIGINT NOT NULL
)";

/// The schema version this code writes.
pub fn latest_version() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.0)
}

/// Store errors; each names the statement's purpose or the key involved.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The `--db` URL is not understood.
    #[error(
        "database URL `{0}`: expected sqlite:PATH, sqlite::memory:, postgres://… or postgresql://…"
    )]
    BadUrl(String),
    /// SQLite failed.
    #[error("sqlite ({what}): {source}")]
    Sqlite {
        /// What was being done.
        what: String,
        /// The error.
        source: rusqlite::Error,
    },
    /// PostgreSQL failed.
    #[error("postgres ({what}): {detail}")]
    Postgres {
        /// What was being done.
        what: String,
        /// The server's message when it sent one (`db error` alone says nothing), else the
        /// error's own.
        detail: String,
        /// The error.
        source: postgres::Error,
    },
    /// The database was written by newer code.
    #[error(
        "database schema version {found} is newer than this polycorn's ({known}); upgrade polycorn"
    )]
    TooNew {
        /// In the database.
        found: i64,
        /// Known here.
        known: i64,
    },
    /// A stored value does not parse.
    #[error("stored trip `{key}`: {problem}")]
    Corrupt {
        /// Trip key.
        key: String,
        /// What is wrong.
        problem: String,
    },
}

/// A bound parameter or a read column (typed even when NULL: PostgreSQL checks types).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// BIGINT.
    Int(Option<i64>),
    /// DOUBLE PRECISION.
    Real(Option<f64>),
    /// TEXT.
    Text(Option<String>),
}

/// Column types of a query's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Col {
    /// BIGINT.
    Int,
    /// DOUBLE PRECISION.
    Real,
    /// TEXT.
    Text,
}

impl Value {
    fn int(&self) -> Option<i64> {
        match self {
            Value::Int(v) => *v,
            _ => None,
        }
    }
    fn real(&self) -> Option<f64> {
        match self {
            Value::Real(v) => *v,
            _ => None,
        }
    }
    fn text(&self) -> Option<&str> {
        match self {
            Value::Text(v) => v.as_deref(),
            _ => None,
        }
    }
}

/// The two engines behind one interface.
enum Conn {
    Sqlite(rusqlite::Connection),
    Postgres(Box<postgres::Client>),
}

/// A LinkDB database.
pub struct Store {
    conn: Conn,
    url: String,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("url", &self.redacted_url())
            .finish()
    }
}

/// Which trips to load.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TripFilter {
    /// Only this source.
    pub source: Option<Source>,
    /// Only this route.
    pub route: Option<String>,
}

/// The trips a predictor was built from ([`Store::predictor`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct History {
    /// How many.
    pub rides: usize,
    /// When the newest of those with a known start began ([`TripMeta::start_ms`]).
    pub newest_start_ms: Option<u64>,
}

/// What [`Store::prune`] found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pruned {
    /// The trips that began before the cut: deleted (or, dry, to be).
    pub deleted: Vec<TripMeta>,
    /// Trips that began at the cut or later.
    pub kept: usize,
    /// Trips of no known start, kept.
    pub undated: usize,
}

/// Result of an import.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Imported {
    /// New trip stored.
    Inserted,
    /// The trip's key was already stored; nothing written.
    AlreadyPresent,
}

fn sq(what: &str) -> impl FnOnce(rusqlite::Error) -> StoreError + '_ {
    move |source| StoreError::Sqlite {
        what: what.to_string(),
        source,
    }
}

fn pg(what: &str) -> impl FnOnce(postgres::Error) -> StoreError + '_ {
    move |source| StoreError::Postgres {
        what: what.to_string(),
        detail: match source.as_db_error() {
            Some(db) => format!("{} ({})", db.message(), db.code().code()),
            None => source.to_string(),
        },
        source,
    }
}

/// Rows per multi-row INSERT (well under both engines' parameter limits).
const BATCH_ROWS: usize = 200;

impl Store {
    /// Open (creating an SQLite file if needed) and migrate to the latest schema.
    pub fn open(url: &str) -> Result<Store, StoreError> {
        let conn = if let Some(path) = url.strip_prefix("sqlite:") {
            let c = if path == ":memory:" {
                rusqlite::Connection::open_in_memory()
            } else {
                if path.is_empty() {
                    return Err(StoreError::BadUrl(url.into()));
                }
                let path = PathBuf::from(path.strip_prefix("//").unwrap_or(path));
                rusqlite::Connection::open(path)
            }
            .map_err(sq("open"))?;
            c.execute_batch("PRAGMA foreign_keys = ON; PRAGMA journal_mode = WAL;")
                .map_err(sq("pragmas"))?;
            c.busy_timeout(std::time::Duration::from_secs(30))
                .map_err(sq("busy timeout"))?;
            Conn::Sqlite(c)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Conn::Postgres(Box::new(
                postgres::Client::connect(url, postgres::NoTls).map_err(pg("connect"))?,
            ))
        } else {
            return Err(StoreError::BadUrl(url.into()));
        };
        let mut s = Store {
            conn,
            url: url.to_string(),
        };
        s.migrate()?;
        s.create_if_missing("create trip_starts", TRIP_STARTS, "trip_starts")?;
        Ok(s)
    }

    /// The URL without a password.
    pub fn redacted_url(&self) -> String {
        match (self.url.find("://"), self.url.rfind('@')) {
            (Some(a), Some(b)) if b > a => {
                let userinfo = &self.url[a + 3..b];
                let user = userinfo.split(':').next().unwrap_or("");
                format!("{}{}@{}", &self.url[..a + 3], user, &self.url[b + 1..])
            }
            _ => self.url.clone(),
        }
    }

    /// Which engine.
    pub fn engine(&self) -> &'static str {
        match self.conn {
            Conn::Sqlite(_) => "sqlite",
            Conn::Postgres(_) => "postgres",
        }
    }

    fn batch(&mut self, what: &str, sql: &str) -> Result<(), StoreError> {
        match &mut self.conn {
            Conn::Sqlite(c) => c.execute_batch(sql).map_err(sq(what)),
            Conn::Postgres(c) => c.batch_execute(sql).map_err(pg(what)),
        }
    }

    /// Runs `create` (a `CREATE TABLE IF NOT EXISTS` of `table`). Processes that open a
    /// database without the table at the same moment race on PostgreSQL, where that statement
    /// is not atomic: the losers fail on the catalog's unique index, then find the winner's
    /// table, which is all they needed.
    fn create_if_missing(
        &mut self,
        what: &str,
        create: &str,
        table: &str,
    ) -> Result<(), StoreError> {
        match self.batch(what, create) {
            Ok(()) => Ok(()),
            Err(e) => {
                let probe = format!("SELECT COUNT(*) FROM {table}");
                match self.query(what, &probe, &[], &[Col::Int]) {
                    Ok(_) => Ok(()),
                    Err(_) => Err(e),
                }
            }
        }
    }

    fn exec(&mut self, what: &str, sql: &str, params: &[Value]) -> Result<u64, StoreError> {
        match &mut self.conn {
            Conn::Sqlite(c) => {
                let p: Vec<rusqlite::types::Value> = params.iter().map(to_sqlite).collect();
                c.execute(sql, rusqlite::params_from_iter(p))
                    .map(|n| n as u64)
                    .map_err(sq(what))
            }
            Conn::Postgres(c) => {
                let boxed: Vec<Box<dyn postgres::types::ToSql + Sync>> =
                    params.iter().map(to_pg).collect();
                let refs: Vec<&(dyn postgres::types::ToSql + Sync)> =
                    boxed.iter().map(|b| b.as_ref()).collect();
                c.execute(sql, &refs).map_err(pg(what))
            }
        }
    }

    fn query(
        &mut self,
        what: &str,
        sql: &str,
        params: &[Value],
        cols: &[Col],
    ) -> Result<Vec<Vec<Value>>, StoreError> {
        match &mut self.conn {
            Conn::Sqlite(c) => {
                let p: Vec<rusqlite::types::Value> = params.iter().map(to_sqlite).collect();
                let mut st = c.prepare_cached(sql).map_err(sq(what))?;
                let rows = st
                    .query_map(rusqlite::params_from_iter(p), |r| {
                        cols.iter()
                            .enumerate()
                            .map(|(i, col)| {
                                Ok(match col {
                                    Col::Int => Value::Int(r.get(i)?),
                                    Col::Real => Value::Real(r.get(i)?),
                                    Col::Text => Value::Text(r.get(i)?),
                                })
                            })
                            .collect::<Result<Vec<_>, rusqlite::Error>>()
                    })
                    .map_err(sq(what))?;
                rows.collect::<Result<Vec<_>, _>>().map_err(sq(what))
            }
            Conn::Postgres(c) => {
                let boxed: Vec<Box<dyn postgres::types::ToSql + Sync>> =
                    params.iter().map(to_pg).collect();
                let refs: Vec<&(dyn postgres::types::ToSql + Sync)> =
                    boxed.iter().map(|b| b.as_ref()).collect();
                let rows = c.query(sql, &refs).map_err(pg(what))?;
                rows.iter()
                    .map(|r| {
                        cols.iter()
                            .enumerate()
                            .map(|(i, col)| {
                                Ok(match col {
                                    Col::Int => Value::Int(r.try_get(i).map_err(pg(what))?),
                                    Col::Real => Value::Real(r.try_get(i).map_err(pg(what))?),
                                    Col::Text => Value::Text(r.try_get(i).map_err(pg(what))?),
                                })
                            })
                            .collect()
                    })
                    .collect()
            }
        }
    }

    /// The applied schema version (0 for an empty database).
    pub fn schema_version(&mut self) -> Result<i64, StoreError> {
        let v = self.query(
            "read schema version",
            "SELECT MAX(version) FROM schema_version",
            &[],
            &[Col::Int],
        )?;
        Ok(v.first().and_then(|r| r[0].int()).unwrap_or(0))
    }

    /// Apply missing migrations; returns the version now in force.
    pub fn migrate(&mut self) -> Result<i64, StoreError> {
        self.create_if_missing(
            "create schema_version",
            "CREATE TABLE IF NOT EXISTS schema_version (version BIGINT PRIMARY KEY)",
            "schema_version",
        )?;
        let current = self.schema_version()?;
        if current > latest_version() {
            return Err(StoreError::TooNew {
                found: current,
                known: latest_version(),
            });
        }
        for (version, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
            let what = format!("migration {version}");
            self.batch(&what, "BEGIN")?;
            let r = self.batch(&what, sql).and_then(|()| {
                self.exec(
                    &what,
                    "INSERT INTO schema_version (version) VALUES ($1) ON CONFLICT (version) DO NOTHING",
                    &[Value::Int(Some(*version))],
                )
            });
            match r {
                Ok(_) => self.batch(&what, "COMMIT")?,
                Err(e) => {
                    let _ = self.batch(&what, "ROLLBACK");
                    // Another process may have migrated concurrently: re-read before failing.
                    if self.schema_version()? >= *version {
                        continue;
                    }
                    return Err(e);
                }
            }
        }
        self.schema_version()
    }

    /// Store a trip; nothing is written if its key is already stored.
    pub fn import(&mut self, trip: &TripData) -> Result<Imported, StoreError> {
        let what = format!("import trip {}", trip.meta.key);
        self.batch(&what, "BEGIN")?;
        match self.import_in_tx(trip, &what) {
            Ok(r) => {
                self.batch(&what, "COMMIT")?;
                Ok(r)
            }
            Err(e) => {
                let _ = self.batch(&what, "ROLLBACK");
                Err(e)
            }
        }
    }

    fn import_in_tx(&mut self, trip: &TripData, what: &str) -> Result<Imported, StoreError> {
        let m = &trip.meta;
        let key = || Value::Text(Some(m.key.clone()));
        let n = self.exec(
            what,
            "INSERT INTO trips (trip_key, source, name, route, direction, carriers, duration_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (trip_key) DO NOTHING",
            &[
                key(),
                Value::Text(Some(m.source.as_str().into())),
                Value::Text(Some(m.name.clone())),
                Value::Text(Some(m.route.clone())),
                Value::Text(Some(m.direction.as_str().into())),
                Value::Text(Some(m.carriers.join(","))),
                Value::Int(Some(m.duration_ms as i64)),
            ],
        )?;
        if n == 0 {
            return Ok(Imported::AlreadyPresent);
        }
        if let Some(started) = m.started_ms {
            // A row left by a wipe or a deletion of an older release is replaced.
            self.exec(
                what,
                "INSERT INTO trip_starts (trip_key, started_ms) VALUES ($1, $2)
                 ON CONFLICT (trip_key) DO UPDATE SET started_ms = excluded.started_ms",
                &[key(), Value::Int(Some(started as i64))],
            )?;
        }
        let t = |s: &str| Value::Text(Some(s.to_string()));
        let ot = |s: &Option<String>| Value::Text(s.clone());
        let hos: Vec<Vec<Value>> = trip
            .handovers
            .iter()
            .enumerate()
            .map(|(i, h)| {
                vec![
                    key(),
                    Value::Int(Some(i as i64)),
                    t(&h.carrier),
                    t(&h.from_cell),
                    ot(&h.to_cell),
                    t(h.direction.as_str()),
                    Value::Int(Some(h.start_ms as i64)),
                    Value::Real(h.position_m),
                    Value::Real(h.lat),
                    Value::Real(h.lon),
                    Value::Real(h.rsrp_dbm),
                    t(h.outcome.as_str()),
                    Value::Int(h.interruption_ms.map(|x| x as i64)),
                    Value::Int(h.lost.map(|l| l.t_ms as i64)),
                    Value::Real(h.lost.and_then(|l| l.position_m)),
                    Value::Real(h.lost.and_then(|l| l.lat)),
                    Value::Real(h.lost.and_then(|l| l.lon)),
                    Value::Real(h.lost.and_then(|l| l.rsrp_dbm)),
                ]
            })
            .collect();
        self.insert_rows(
            what,
            "handovers (trip_key, seq, carrier, from_cell, to_cell, direction, start_ms, position_m, lat, lon, rsrp_dbm, outcome, interruption_ms, lost_ms, lost_position_m, lost_lat, lost_lon, lost_rsrp_dbm)",
            &hos,
        )?;
        let samples: Vec<Vec<Value>> = trip
            .samples
            .iter()
            .enumerate()
            .map(|(i, s)| {
                vec![
                    key(),
                    Value::Int(Some(i as i64)),
                    Value::Int(Some(s.t_ms as i64)),
                    Value::Real(s.lat),
                    Value::Real(s.lon),
                    Value::Real(s.position_m),
                    Value::Real(s.speed_mps),
                    Value::Real(s.heading_deg),
                ]
            })
            .collect();
        self.insert_rows(
            what,
            "samples (trip_key, seq, t_ms, lat, lon, position_m, speed_mps, heading_deg)",
            &samples,
        )?;
        let radio: Vec<Vec<Value>> = trip
            .radio
            .iter()
            .enumerate()
            .map(|(i, r)| {
                vec![
                    key(),
                    Value::Int(Some(i as i64)),
                    Value::Int(Some(r.t_ms as i64)),
                    t(&r.carrier),
                    ot(&r.cell),
                    Value::Real(r.rsrp_dbm),
                ]
            })
            .collect();
        self.insert_rows(
            what,
            "radio_samples (trip_key, seq, t_ms, carrier, cell, rsrp_dbm)",
            &radio,
        )?;
        Ok(Imported::Inserted)
    }

    fn insert_rows(
        &mut self,
        what: &str,
        table_cols: &str,
        rows: &[Vec<Value>],
    ) -> Result<(), StoreError> {
        for chunk in rows.chunks(BATCH_ROWS) {
            let width = chunk[0].len();
            let mut sql = format!("INSERT INTO {table_cols} VALUES ");
            let mut n = 1;
            for (i, _) in chunk.iter().enumerate() {
                if i > 0 {
                    sql.push(',');
                }
                sql.push('(');
                for j in 0..width {
                    if j > 0 {
                        sql.push(',');
                    }
                    sql.push_str(&format!("${n}"));
                    n += 1;
                }
                sql.push(')');
            }
            let params: Vec<Value> = chunk.iter().flatten().cloned().collect();
            self.exec(what, &sql, &params)?;
        }
        Ok(())
    }

    /// Trips matching `filter`, in key order.
    pub fn trips(&mut self, filter: &TripFilter) -> Result<Vec<TripMeta>, StoreError> {
        let rows = self.query(
            "list trips",
            "SELECT t.trip_key, t.source, t.name, t.route, t.direction, t.carriers, t.duration_ms,
                    s.started_ms
             FROM trips t LEFT JOIN trip_starts s ON s.trip_key = t.trip_key
             WHERE ($1 = '' OR t.source = $1) AND ($2 = '' OR t.route = $2) ORDER BY t.trip_key",
            &[
                Value::Text(Some(
                    filter.source.map_or(String::new(), |s| s.as_str().into()),
                )),
                Value::Text(Some(filter.route.clone().unwrap_or_default())),
            ],
            &[
                Col::Text,
                Col::Text,
                Col::Text,
                Col::Text,
                Col::Text,
                Col::Text,
                Col::Int,
                Col::Int,
            ],
        )?;
        rows.into_iter()
            .map(|r| {
                let key = r[0].text().unwrap_or_default().to_string();
                let bad = |problem: String| StoreError::Corrupt {
                    key: key.clone(),
                    problem,
                };
                Ok(TripMeta {
                    source: r[1].text().unwrap_or_default().parse().map_err(bad)?,
                    name: r[2].text().unwrap_or_default().into(),
                    route: r[3].text().unwrap_or_default().into(),
                    direction: r[4].text().unwrap_or_default().parse().map_err(bad)?,
                    carriers: r[5]
                        .text()
                        .unwrap_or_default()
                        .split(',')
                        .filter(|c| !c.is_empty())
                        .map(String::from)
                        .collect(),
                    duration_ms: r[6].int().unwrap_or(0).max(0) as u64,
                    started_ms: r[7].int().map(|x| x.max(0) as u64),
                    key,
                })
            })
            .collect()
    }

    /// Trips matching `filter` with all their records.
    pub fn load(&mut self, filter: &TripFilter) -> Result<Vec<TripData>, StoreError> {
        let metas = self.trips(filter)?;
        let mut out = Vec::with_capacity(metas.len());
        for meta in metas {
            out.push(self.load_one(meta)?);
        }
        Ok(out)
    }

    /// Trips matching `filter` as a predictor of `kind` needs them
    /// ([`TripData::for_prediction`]): the same predictor as from [`Store::load`]'s, with a
    /// trip's other fixes and radio samples dropped as it is read (the paper's model reads no
    /// radio sample at all).
    pub fn load_for_prediction(
        &mut self,
        filter: &TripFilter,
        kind: crate::ModelKind,
    ) -> Result<Vec<TripData>, StoreError> {
        let metas = self.trips(filter)?;
        let window = kind.radio_before_ms();
        let mut out = Vec::with_capacity(metas.len());
        for meta in metas {
            out.push(self.load_for(meta, window)?);
        }
        Ok(out)
    }

    /// The predictor `kind` built from the trips matching `filter`, and what they were. The
    /// same predictor as from [`Store::load`]'s trips, in bounded memory: one trip is read at a
    /// time into the index ([`crate::index::IndexBuilder`]) and dropped, so what stays
    /// grows with the cells and handover zones, not with the fixes. The risk model reads the
    /// trips a second time, for its rows ([`crate::risk::RiskTrainer`]), with each trip's
    /// radio samples before its handovers only, and no others.
    pub fn predictor(
        &mut self,
        filter: &TripFilter,
        kind: crate::ModelKind,
    ) -> Result<(crate::predict::Predictor, History), StoreError> {
        let metas = self.trips(filter)?;
        let history = History {
            rides: metas.len(),
            newest_start_ms: metas.iter().filter_map(TripMeta::start_ms).max(),
        };
        let mut b = crate::index::IndexBuilder::default();
        let mut risk = crate::risk::RiskTrainer::default();
        let window = kind.radio_before_ms();
        for meta in &metas {
            let trip = self.load_parts(meta.clone(), false)?;
            b.add(&trip);
            if window.is_some() {
                risk.add_positions(&trip, |c, cell, d| b.key_of(c, cell, d));
            }
        }
        let index = b.finish();
        let p = match window {
            None => kind
                .from_index(index)
                .expect("a kind that reads no radio sample is built from the index"),
            Some(_) => {
                // The rows: a second pass, with each trip's radio samples before its handovers.
                for meta in metas.iter().cloned() {
                    risk.add_rows(&index, &self.load_for(meta, window)?);
                }
                crate::predict::Predictor::new(index, crate::predict::Model::Risk(risk.finish()))
            }
        };
        Ok((p, history))
    }

    /// One trip as a predictor reading radio samples `radio_before_ms` before its handovers
    /// needs it ([`TripData::for_prediction`]); no radio sample is read without.
    fn load_for(
        &mut self,
        meta: TripMeta,
        radio_before_ms: Option<u64>,
    ) -> Result<TripData, StoreError> {
        Ok(self
            .load_parts(meta, radio_before_ms.is_some())?
            .for_prediction(radio_before_ms))
    }

    /// One trip of [`Store::trips`] with all its records (as [`Store::load`] gives it).
    pub fn load_one(&mut self, meta: TripMeta) -> Result<TripData, StoreError> {
        self.load_parts(meta, true)
    }

    fn load_parts(&mut self, meta: TripMeta, with_radio: bool) -> Result<TripData, StoreError> {
        let key = [Value::Text(Some(meta.key.clone()))];
        let bad = |problem: String| StoreError::Corrupt {
            key: meta.key.clone(),
            problem,
        };
        let u = |v: &Value| v.int().unwrap_or(0).max(0) as u64;
        let s = |v: &Value| v.text().map(String::from);
        let hos = self.query(
            "load handovers",
            "SELECT carrier, from_cell, to_cell, direction, start_ms, position_m, lat, lon, rsrp_dbm, outcome, interruption_ms,
                    lost_ms, lost_position_m, lost_lat, lost_lon, lost_rsrp_dbm
             FROM handovers WHERE trip_key = $1 ORDER BY seq",
            &key,
            &[Col::Text, Col::Text, Col::Text, Col::Text, Col::Int, Col::Real, Col::Real, Col::Real, Col::Real, Col::Text, Col::Int,
              Col::Int, Col::Real, Col::Real, Col::Real, Col::Real],
        )?;
        let handovers = hos
            .iter()
            .map(|r| {
                Ok(HandoverRecord {
                    carrier: s(&r[0]).unwrap_or_default(),
                    from_cell: s(&r[1]).unwrap_or_default(),
                    to_cell: s(&r[2]),
                    direction: r[3]
                        .text()
                        .unwrap_or_default()
                        .parse::<Direction>()
                        .map_err(bad)?,
                    start_ms: u(&r[4]),
                    position_m: r[5].real(),
                    lat: r[6].real(),
                    lon: r[7].real(),
                    rsrp_dbm: r[8].real(),
                    outcome: r[9]
                        .text()
                        .unwrap_or_default()
                        .parse::<Outcome>()
                        .map_err(bad)?,
                    interruption_ms: r[10].int().map(|x| x.max(0) as u64),
                    lost: r[11].int().map(|t| LossRecord {
                        t_ms: t.max(0) as u64,
                        position_m: r[12].real(),
                        lat: r[13].real(),
                        lon: r[14].real(),
                        rsrp_dbm: r[15].real(),
                    }),
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let samples = self
            .query(
                "load samples",
                "SELECT t_ms, lat, lon, position_m, speed_mps, heading_deg FROM samples
                 WHERE trip_key = $1 ORDER BY seq",
                &key,
                &[
                    Col::Int,
                    Col::Real,
                    Col::Real,
                    Col::Real,
                    Col::Real,
                    Col::Real,
                ],
            )?
            .iter()
            .map(|r| Sample {
                t_ms: u(&r[0]),
                lat: r[1].real(),
                lon: r[2].real(),
                position_m: r[3].real(),
                speed_mps: r[4].real(),
                heading_deg: r[5].real(),
            })
            .collect();
        if !with_radio {
            return Ok(TripData {
                meta,
                handovers,
                samples,
                radio: Vec::new(),
            });
        }
        let radio = self
            .query(
                "load radio samples",
                "SELECT t_ms, carrier, cell, rsrp_dbm FROM radio_samples
                 WHERE trip_key = $1 ORDER BY seq",
                &key,
                &[Col::Int, Col::Text, Col::Text, Col::Real],
            )?
            .iter()
            .map(|r| RadioSample {
                t_ms: u(&r[0]),
                carrier: s(&r[1]).unwrap_or_default(),
                cell: s(&r[2]),
                rsrp_dbm: r[3].real(),
            })
            .collect();
        Ok(TripData {
            meta,
            handovers,
            samples,
            radio,
        })
    }

    /// Counts of stored rows: trips, handovers, failed handovers, samples, radio samples.
    pub fn counts(&mut self) -> Result<[i64; 5], StoreError> {
        let mut out = [0; 5];
        for (i, sql) in [
            "SELECT COUNT(*) FROM trips",
            "SELECT COUNT(*) FROM handovers",
            "SELECT COUNT(*) FROM handovers WHERE outcome = 'failure'",
            "SELECT COUNT(*) FROM samples",
            "SELECT COUNT(*) FROM radio_samples",
        ]
        .iter()
        .enumerate()
        {
            let r = self.query("count rows", sql, &[], &[Col::Int])?;
            out[i] = r.first().and_then(|r| r[0].int()).unwrap_or(0);
        }
        Ok(out)
    }

    /// The context logs marked imported ([`Store::mark_logs_imported`]): path → size in bytes.
    pub fn imported_logs(
        &mut self,
    ) -> Result<std::collections::BTreeMap<PathBuf, u64>, StoreError> {
        self.ensure_imported_logs()?;
        let rows = self.query(
            "read imported logs",
            "SELECT path, bytes FROM imported_logs",
            &[],
            &[Col::Text, Col::Int],
        )?;
        Ok(rows
            .iter()
            .filter_map(|r| Some((PathBuf::from(r[0].text()?), r[1].int()?.max(0) as u64)))
            .collect())
    }

    /// Makes `imported_logs` if it is missing.
    fn ensure_imported_logs(&mut self) -> Result<(), StoreError> {
        self.create_if_missing("create imported_logs", IMPORTED_LOGS, "imported_logs")
    }

    /// Marks context logs (absolute path, size) as imported, in one transaction.
    pub fn mark_logs_imported(&mut self, logs: &[(PathBuf, u64)]) -> Result<(), StoreError> {
        let what = "mark logs imported";
        self.ensure_imported_logs()?;
        self.batch(what, "BEGIN")?;
        let r = logs.iter().try_for_each(|(path, bytes)| {
            self.exec(
                what,
                "INSERT INTO imported_logs (path, bytes) VALUES ($1, $2)
                 ON CONFLICT (path) DO UPDATE SET bytes = excluded.bytes",
                &[
                    Value::Text(Some(path.to_string_lossy().into_owned())),
                    Value::Int(Some(*bytes as i64)),
                ],
            )
            .map(|_| ())
        });
        match r {
            Ok(()) => self.batch(what, "COMMIT"),
            Err(e) => {
                let _ = self.batch(what, "ROLLBACK");
                Err(e)
            }
        }
    }

    /// Drop every LinkDB table and migrate again: an empty database at the latest schema.
    pub fn wipe(&mut self) -> Result<i64, StoreError> {
        self.batch(
            "wipe",
            "DROP TABLE IF EXISTS radio_samples; DROP TABLE IF EXISTS samples;
             DROP TABLE IF EXISTS handovers; DROP TABLE IF EXISTS trips;
             DROP TABLE IF EXISTS imported_logs; DROP TABLE IF EXISTS trip_starts;
             DROP TABLE IF EXISTS schema_version",
        )?;
        let v = self.migrate()?;
        self.create_if_missing("create trip_starts", TRIP_STARTS, "trip_starts")?;
        Ok(v)
    }

    /// Deletes the trips matching `filter` that began before `before_ms` (ms since the Unix
    /// epoch, [`TripMeta::start_ms`]), with their records, in one transaction; with `dry_run`,
    /// only says which. Trips of no known start are kept.
    pub fn prune(
        &mut self,
        filter: &TripFilter,
        before_ms: u64,
        dry_run: bool,
    ) -> Result<Pruned, StoreError> {
        let mut out = Pruned::default();
        for meta in self.trips(filter)? {
            match meta.start_ms() {
                None => out.undated += 1,
                Some(t) if t >= before_ms => out.kept += 1,
                Some(_) => out.deleted.push(meta),
            }
        }
        if dry_run || out.deleted.is_empty() {
            return Ok(out);
        }
        let what = format!("prune {} trips", out.deleted.len());
        self.batch(&what, "BEGIN")?;
        let r = out.deleted.iter().try_for_each(|m| {
            let key = [Value::Text(Some(m.key.clone()))];
            for t in [
                "handovers",
                "samples",
                "radio_samples",
                "trip_starts",
                "trips",
            ] {
                self.exec(&what, &format!("DELETE FROM {t} WHERE trip_key = $1"), &key)?;
            }
            Ok(())
        });
        match r {
            Ok(()) => {
                self.batch(&what, "COMMIT")?;
                Ok(out)
            }
            Err(e) => {
                let _ = self.batch(&what, "ROLLBACK");
                Err(e)
            }
        }
    }

    /// Delete every trip of a source (and its records).
    pub fn delete_source(&mut self, source: Source) -> Result<u64, StoreError> {
        let what = format!("delete source {source}");
        self.batch(&what, "BEGIN")?;
        let r = (|| {
            let src = [Value::Text(Some(source.as_str().into()))];
            for t in ["handovers", "samples", "radio_samples", "trip_starts"] {
                self.exec(
                    &what,
                    &format!(
                        "DELETE FROM {t} WHERE trip_key IN (SELECT trip_key FROM trips WHERE source = $1)"
                    ),
                    &src,
                )?;
            }
            self.exec(&what, "DELETE FROM trips WHERE source = $1", &src)
        })();
        match r {
            Ok(n) => {
                self.batch(&what, "COMMIT")?;
                Ok(n)
            }
            Err(e) => {
                let _ = self.batch(&what, "ROLLBACK");
                Err(e)
            }
        }
    }
}

fn to_sqlite(v: &Value) -> rusqlite::types::Value {
    use rusqlite::types::Value as S;
    match v {
        Value::Int(Some(x)) => S::Integer(*x),
        Value::Real(Some(x)) => S::Real(*x),
        Value::Text(Some(x)) => S::Text(x.clone()),
        _ => S::Null,
    }
}

fn to_pg(v: &Value) -> Box<dyn postgres::types::ToSql + Sync> {
    match v {
        Value::Int(x) => Box::new(*x),
        Value::Real(x) => Box::new(*x),
        Value::Text(x) => Box::new(x.clone()),
    }
}
