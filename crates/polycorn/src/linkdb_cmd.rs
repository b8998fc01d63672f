//! `polycorn linkdb …`: import handover history, print statistics and the paper's analyses,
//! validate the predictors, ask one prediction. Every command takes `--db sqlite:PATH` or
//! `--db postgres://…`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use polycorn_linkdb::analysis;
use polycorn_linkdb::import::{relay, sim, ucc5g, wmnlab, ImportReport};
use polycorn_linkdb::predict::Predictor;
use polycorn_linkdb::record::{Direction, Source, TripData};
use polycorn_linkdb::store::{Imported, Store, TripFilter};
use polycorn_linkdb::validate::{self, ModelKind};
use polycorn_sched::predict::HandoverPredictor;
use polycorn_sched::{Instant, PathId};

/// Where the database is.
#[derive(Args, Debug, Clone)]
pub struct DbArgs {
    /// Database: `sqlite:PATH` (created if missing) or `postgres://user@host/db`.
    #[arg(long, default_value = "sqlite:linkdb.sqlite")]
    pub db: String,
}

/// Which trips an analysis reads.
#[derive(Args, Debug, Clone)]
pub struct FilterArgs {
    /// Only this source (sim, wmnlab, ucc5g, relay).
    #[arg(long)]
    pub source: Option<String>,
    /// Only this route (e.g. hsr/route1, wmnlab/taipei-metro).
    #[arg(long)]
    pub route: Option<String>,
}

impl FilterArgs {
    fn filter(&self) -> Result<TripFilter> {
        Ok(TripFilter {
            source: self
                .source
                .as_deref()
                .map(str::parse::<Source>)
                .transpose()
                .map_err(anyhow::Error::msg)?,
            route: self.route.clone(),
        })
    }
}

/// `linkdb` subcommands.
#[derive(Subcommand, Debug)]
pub enum LinkdbAction {
    /// Import trips: testbed trip directories, WMN Lab or UCC 5G CSVs, or simulated trips.
    Import(Box<ImportArgs>),
    /// Counts per source and route.
    Stats {
        #[command(flatten)]
        db: DbArgs,
    },
    /// EHP per cell, success rates by distance to EHP and RSRP (Table 1), SVM separability.
    Analyze {
        #[command(flatten)]
        db: DbArgs,
        #[command(flatten)]
        filter: FilterArgs,
        /// Also list every cell with its EHP.
        #[arg(long)]
        cells: bool,
    },
    /// Leave-one-ride-out validation of the predictors, per route, with the paper's categories;
    /// or learning from one set of trips (`--train-db`, `--train-source`, `--train-route`) and
    /// testing on another.
    Validate(Box<ValidateArgs>),
    /// One prediction: when does the next handover of a path on this cell fail?
    Predict(PredictArgs),
    /// Delete the rides that began more than N days ago (what proxy.toml's `[linkdb]
    /// keep_days` has the nightly import do). Rides of no known start (simulated trips, the
    /// datasets) are kept.
    Prune {
        #[command(flatten)]
        db: DbArgs,
        #[command(flatten)]
        filter: FilterArgs,
        /// Delete the rides that began more than this many days (of 24 h) ago.
        #[arg(long, value_name = "DAYS",
              value_parser = clap::value_parser!(u32).range(1..=polycorn_net::config::MAX_KEEP_DAYS as i64))]
        older_than_days: u32,
        /// Only list what would be deleted.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Options of `linkdb validate`.
#[derive(Args, Debug)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub db: DbArgs,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Predictors (paper, risk, loctable).
    #[arg(long, value_delimiter = ',', default_value = "paper,risk,loctable")]
    pub models: Vec<String>,
    /// Also show the risk model at these thresholds (sensitivity; default 0.1 is fixed a priori).
    #[arg(long, value_delimiter = ',')]
    pub risk_thresholds: Vec<f64>,
    /// Also judge the throttling HPR does: from t̂_HOF − L, L = RTT + E_GPS / speed, with
    /// this RTT (ms) and E_GPS = 20 m (NSDI'23 §4.3). Default: no such table.
    #[arg(long)]
    pub hpr_rtt_ms: Option<f64>,
    /// What a failure's Δ = t_HO − t̂_HOF is measured to: `loss`, the moment the UE lost
    /// the source cell (the blackout begins; the default), or `start`, the handover's
    /// recorded start. Successes are judged at their start either way.
    #[arg(long, default_value = "loss", value_parser = ["loss", "start"])]
    pub truth: String,
    /// Learn from the trips of this database (`sqlite:PATH`, a path to an SQLite file, or
    /// `postgres://…`) and test on `--db`'s: last month's rides against this month's, or one
    /// dataset against another. Its trips are chosen like the tested ones (`--source`,
    /// `--route`) unless `--train-source` or `--train-route` say otherwise. A ride in both
    /// databases is left out of the training while it is tested.
    #[arg(long, value_name = "URL")]
    pub train_db: Option<String>,
    /// Learn from this source's trips (sim, wmnlab, ucc5g, relay) instead of the tested
    /// source's, each tested ride left out: `--source sim --train-source relay` judges,
    /// against the ground truth, what LinkDB learns from the relays' own logs.
    #[arg(long)]
    pub train_source: Option<String>,
    /// Learn from this route's trips, whatever route is tested (default: each tested route
    /// from its own trips): one line's or dataset's history judged on another's.
    #[arg(long)]
    pub train_route: Option<String>,
}

/// Options of `linkdb import`.
#[derive(Args, Debug)]
pub struct ImportArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// A directory written by `polycorn trip generate` (repeatable).
    #[arg(long)]
    pub trip_dir: Vec<PathBuf>,
    /// WMN Lab CSV file or directory.
    #[arg(long)]
    pub wmnlab: Option<PathBuf>,
    /// Location-grid bin standing in for a cell in WMN Lab data, m.
    #[arg(long, default_value_t = wmnlab::GRID_M)]
    pub wmnlab_grid_m: f64,
    /// UCC 5G CSV file or directory.
    #[arg(long)]
    pub ucc5g: Option<PathBuf>,
    /// Generate and import this many trips of `--preset` in process.
    #[arg(long)]
    pub simulate: Option<u64>,
    /// Trip preset for `--simulate` (hsr, ktx).
    #[arg(long, default_value = "hsr")]
    pub preset: String,
    /// Route seed for `--simulate` (all trips share the route).
    #[arg(long, default_value_t = 1)]
    pub route_seed: u64,
    /// First trip seed for `--simulate` (then +1 per trip).
    #[arg(long, default_value_t = 1)]
    pub first_trip_seed: u64,
    /// A relay's context log (`[context] record`), a file or a directory of them (repeatable):
    /// rides cut where the train turns, handovers inferred from the serving cells.
    #[arg(long)]
    pub ride_log: Vec<PathBuf>,
    /// Route of `--ride-log` rides (e.g. beijing-shanghai).
    #[arg(long)]
    pub route: Option<String>,
    /// Position 0 of the line for `--ride-log`, `LAT,LON` (as `[linkdb] track_origin`).
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    pub track_origin: Vec<f64>,
    /// Heading of the line for `--ride-log`, degrees clockwise from north.
    #[arg(long, allow_negative_numbers = true)]
    pub track_heading: Option<f64>,
    /// Carrier names for the `--ride-log` columns in order (as the proxy's `[linkdb] carriers`);
    /// default: the columns' own names.
    #[arg(long, value_delimiter = ',')]
    pub carriers: Vec<String>,
    /// Direction of every `--ride-log` file (one ride each); default: found from the fixes.
    #[arg(long, value_parser = ["up", "down"])]
    pub direction: Option<String>,
    /// Only `--ride-log` files of UTC days before today (named `context-YYYYMMDDT…`): today's
    /// are still being written, and a ride imported in part now and whole later would be
    /// stored twice. Files read are marked in the database and not read again (while their
    /// size stays). For a nightly import of a live `[context] record` directory.
    #[arg(long)]
    pub past_days: bool,
    /// Learn what a proxy recorded: its `[context] record` directory as `--ride-log`, stored in
    /// its `[linkdb] db`, on its `route`, line (`track_origin`, `track_heading_deg`) and
    /// `carriers`. With `--past-days`, what the nightly unit (`config example
    /// linkdb-learn.service`) runs.
    #[arg(
        long,
        value_name = "PROXY_TOML",
        conflicts_with_all = ["ride_log", "route", "track_origin", "track_heading", "carriers", "db"]
    )]
    pub proxy_config: Option<PathBuf>,
    /// Store `--simulate` and `--trip-dir` trips as their relay would have recorded them:
    /// source `relay`, handovers inferred from the context log instead of the ground truth,
    /// and print how the two compare.
    #[arg(long)]
    pub as_seen_by_relay: bool,
    /// With `--as-seen-by-relay`: the relay's modem monitor reports each modem's cell and
    /// RSRP this many seconds late (a sensitivity study: the trip model's modems report at
    /// once).
    #[arg(long, value_name = "SECONDS", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=60))]
    pub simulate_monitor_lag_s: u64,
    /// How late the relays' modem monitors report a modem's cell and RSRP, ms: `--ride-log`
    /// and `--as-seen-by-relay` move each radio sample back by this much before they infer the
    /// handovers (with `--proxy-config`, its `[context] monitor_lag_ms`).
    #[arg(long, value_name = "MS", default_value_t = 0, conflicts_with = "proxy_config",
          value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub monitor_lag_ms: u64,
    /// Copy the trips of another LinkDB (`sqlite:PATH` or `postgres://…`) into `--db`, ride by
    /// ride, with when each began and (without `--from-route`) the nightly import's list of
    /// logs read: a train's SQLite history moved into the fleet's PostgreSQL, or a backup.
    /// Trips already there are left as they are.
    #[arg(long, value_name = "URL")]
    pub from_db: Option<String>,
    /// With `--from-db`: only this route's trips.
    #[arg(long, requires = "from_db")]
    pub from_route: Option<String>,
    /// Bad rows to list (all are counted).
    #[arg(long, default_value_t = 20)]
    pub show_bad: usize,
}

/// Options of `linkdb predict`.
#[derive(Args, Debug)]
pub struct PredictArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// Route whose history to use.
    #[arg(long)]
    pub route: String,
    /// Predictor (paper, risk, loctable).
    #[arg(long, default_value = "paper")]
    pub model: String,
    /// Carrier of the path.
    #[arg(long)]
    pub carrier: String,
    /// Serving cell.
    #[arg(long)]
    pub cell: String,
    /// Train position along the line, m.
    #[arg(long, allow_hyphen_values = true)]
    pub position_m: f64,
    /// Train speed, m/s.
    #[arg(long)]
    pub speed_mps: f64,
    /// Direction of travel (up, down).
    #[arg(long, default_value = "up")]
    pub direction: String,
    /// Serving RSRP, dBm (risk model).
    #[arg(long, allow_hyphen_values = true)]
    pub rsrp_dbm: Option<f64>,
}

fn open(db: &DbArgs) -> Result<Store> {
    Store::open(&db.db).with_context(|| format!("open {}", db.db))
}

/// Run a `linkdb` subcommand.
pub fn run(action: LinkdbAction) -> Result<()> {
    match action {
        LinkdbAction::Import(a) => import(&a),
        LinkdbAction::Stats { db } => stats(&db),
        LinkdbAction::Analyze { db, filter, cells } => analyze(&db, &filter, cells),
        LinkdbAction::Validate(a) => validate_cmd(&a),
        LinkdbAction::Predict(a) => predict(&a),
        LinkdbAction::Prune {
            db,
            filter,
            older_than_days,
            dry_run,
        } => {
            let mut store = open(&db)?;
            println!("database: {} ({})", store.redacted_url(), store.engine());
            prune(&mut store, &filter.filter()?, older_than_days, dry_run)
        }
    }
}

/// Trips stored by one import, for its summary line.
#[derive(Default)]
struct Stored {
    new: usize,
    old: usize,
    handovers: usize,
    failed: usize,
}

impl Stored {
    /// Stores `t` and counts it.
    fn store(&mut self, store: &mut Store, t: &TripData) -> Result<()> {
        match store
            .import(t)
            .with_context(|| format!("store trip {}", t.meta.key))?
        {
            Imported::Inserted => self.new += 1,
            Imported::AlreadyPresent => self.old += 1,
        }
        self.handovers += t.handovers.len();
        self.failed += t.handovers.iter().filter(|h| h.outcome.failed()).count();
        Ok(())
    }

    /// `WHAT: N trips (n new, m already stored), H handovers (F failed)`.
    fn say(&self, what: &str) {
        println!(
            "{what}: {} trips ({} new, {} already stored), {} handovers ({} failed)",
            self.new + self.old,
            self.new,
            self.old,
            self.handovers,
            self.failed
        );
    }
}

fn store_all(
    store: &mut Store,
    what: &str,
    trips: &[TripData],
    rep: &ImportReport,
    show: usize,
) -> Result<()> {
    let mut stored = Stored::default();
    for t in trips {
        stored.store(store, t)?;
    }
    stored.say(what);
    if rep.files > 0 || !rep.bad.is_empty() || !rep.notes.is_empty() {
        println!("{}", rep.summary(show));
    }
    Ok(())
}

fn import(a: &ImportArgs) -> Result<()> {
    let mut learn = proxy_learning(a)?;
    let mut relay_opts = ride_log_options(a)?;
    if a.trip_dir.is_empty()
        && a.wmnlab.is_none()
        && a.ucc5g.is_none()
        && a.simulate.is_none()
        && a.ride_log.is_empty()
        && learn.is_none()
        && a.from_db.is_none()
    {
        bail!(
            "nothing to import: give --trip-dir, --wmnlab, --ucc5g, --simulate, --ride-log, \
             --proxy-config or --from-db"
        );
    }
    if a.simulate_monitor_lag_s > 0 && !a.as_seen_by_relay {
        bail!("--simulate-monitor-lag-s applies with --as-seen-by-relay");
    }
    if a.monitor_lag_ms > 0 && !a.as_seen_by_relay && a.ride_log.is_empty() {
        bail!("--monitor-lag-ms applies with --ride-log or --as-seen-by-relay");
    }
    if a.as_seen_by_relay && a.trip_dir.is_empty() && a.simulate.is_none() {
        bail!("--as-seen-by-relay applies to --simulate and --trip-dir (trips with ground truth)");
    }
    let db = match &learn {
        Some(l) => DbArgs { db: l.db.clone() },
        None => a.db.clone(),
    };
    let mut store = open(&db)?;
    println!("database: {} ({})", store.redacted_url(), store.engine());
    if a.past_days {
        // Logs of past days are finished: those stored before are not read again.
        let done = store.imported_logs()?;
        for o in learn
            .iter_mut()
            .map(|l| &mut l.opts)
            .chain(relay_opts.iter_mut())
        {
            o.done = done.clone();
        }
    }
    let mut truth_vs_relay = relay::Comparison::default();
    let mut as_relay = |trips: Vec<TripData>, rep: &mut ImportReport| -> Vec<TripData> {
        if !a.as_seen_by_relay {
            return trips;
        }
        trips
            .iter()
            .map(|t| {
                let (seen, st) = relay::as_seen_by_relay_lagged(
                    t,
                    a.simulate_monitor_lag_s * 1000,
                    a.monitor_lag_ms,
                );
                truth_vs_relay.merge(relay::compare(&t.handovers, &seen.handovers));
                if st.gaps > 0 {
                    rep.notes.push(format!(
                        "{}: {} gaps in the context log",
                        t.meta.name, st.gaps
                    ));
                }
                seen
            })
            .collect()
    };
    for dir in &a.trip_dir {
        let (trip, mut rep) =
            sim::from_dir(dir).with_context(|| format!("import {}", dir.display()))?;
        let trips = as_relay(vec![trip], &mut rep);
        store_all(
            &mut store,
            &format!("trip {}", dir.display()),
            &trips,
            &rep,
            a.show_bad,
        )?;
    }
    if let Some(n) = a.simulate {
        let seeds = a.first_trip_seed..a.first_trip_seed.saturating_add(n);
        let mut rep = ImportReport::default();
        let trips = as_relay(sim::simulate(&a.preset, a.route_seed, seeds)?, &mut rep);
        store_all(
            &mut store,
            &format!("simulated {} route {}", a.preset, a.route_seed),
            &trips,
            &rep,
            a.show_bad,
        )?;
    }
    if a.as_seen_by_relay {
        print_comparison(&truth_vs_relay);
    }
    if let Some(l) = &learn {
        if l.dir.exists() {
            let what = format!("recorded by the proxy {}", l.dir.display());
            store_ride_logs(&mut store, &l.dir, &l.opts, &what, a)?;
        } else {
            println!(
                "nothing recorded yet in {} (the proxy makes it at its first fix)",
                l.dir.display()
            );
        }
        if let Some(days) = l.keep_days {
            let route = TripFilter {
                source: None,
                route: Some(l.opts.route.clone()),
            };
            prune(&mut store, &route, days, false)?;
        }
    }
    if let Some(opts) = &relay_opts {
        for p in &a.ride_log {
            store_ride_logs(&mut store, p, opts, &format!("ride log {}", p.display()), a)?;
        }
    }
    if let Some(p) = &a.wmnlab {
        if !(a.wmnlab_grid_m.is_finite() && a.wmnlab_grid_m >= 10.0) {
            bail!("--wmnlab-grid-m must be at least 10 m");
        }
        let (trips, rep) = wmnlab::import(
            p,
            wmnlab::Options {
                grid_m: a.wmnlab_grid_m,
            },
        )
        .with_context(|| format!("import {}", p.display()))?;
        store_all(&mut store, "wmnlab", &trips, &rep, a.show_bad)?;
    }
    if let Some(p) = &a.ucc5g {
        let (trips, rep) = ucc5g::import(p).with_context(|| format!("import {}", p.display()))?;
        store_all(&mut store, "ucc5g", &trips, &rep, a.show_bad)?;
    }
    if let Some(url) = &a.from_db {
        copy_from(&mut store, url, a.from_route.as_deref())?;
    }
    Ok(())
}

/// `--from-db`: the trips of the database at `url` (of `route`, if given) stored in `store`,
/// one at a time; without a route, the logs its nightly imports read are marked read here too.
fn copy_from(store: &mut Store, url: &str, route: Option<&str>) -> Result<()> {
    let mut from = Store::open(url).with_context(|| format!("open --from-db {url}"))?;
    let what = format!("from {}", from.redacted_url());
    let filter = TripFilter {
        source: None,
        route: route.map(String::from),
    };
    let metas = from
        .trips(&filter)
        .with_context(|| format!("list the trips {what}"))?;
    let mut stored = Stored::default();
    for meta in metas {
        let key = meta.key.clone();
        let trip = from
            .load_one(meta)
            .with_context(|| format!("read trip {key} {what}"))?;
        stored.store(store, &trip)?;
    }
    stored.say(&what);
    if route.is_none() {
        let logs: Vec<(PathBuf, u64)> = from.imported_logs()?.into_iter().collect();
        store.mark_logs_imported(&logs)?;
        if !logs.is_empty() {
            println!(
                "{what}: {} context logs marked read by its nightly imports",
                logs.len()
            );
        }
    }
    Ok(())
}

/// Deletes the rides of `filter` that began more than `days` days ago, and says what it did.
fn prune(store: &mut Store, filter: &TripFilter, days: u32, dry_run: bool) -> Result<()> {
    let now = polycorn_net::tls::unix_now().max(0) as u64 * 1000;
    let before = now.saturating_sub(u64::from(days) * 86_400_000);
    let p = store
        .prune(filter, before, dry_run)
        .context("prune the history")?;
    let verb = if dry_run { "would delete" } else { "deleted" };
    println!(
        "pruned: {verb} {} rides that began before {} ({days} days ago); kept {} newer and {} of \
         no known start",
        p.deleted.len(),
        iso_time(before),
        p.kept,
        p.undated
    );
    if dry_run {
        for m in &p.deleted {
            let start = m.start_ms().map_or_else(String::new, iso_time);
            println!("  {} {} {start}", m.route, m.name);
        }
    }
    Ok(())
}

/// `YYYY-MM-DD HH:MM:SSZ` of a time in ms since the Unix epoch.
fn iso_time(unix_ms: u64) -> String {
    let day = polycorn_net::context::record_day(unix_ms);
    let s = (unix_ms / 1000) % 86_400;
    format!(
        "{}-{}-{} {:02}:{:02}:{:02}Z",
        &day[..4],
        &day[4..6],
        &day[6..],
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// Imports the context logs at `path` and stores their rides; with `--past-days`, marks the
/// logs read so the next night skips them.
fn store_ride_logs(
    store: &mut Store,
    path: &std::path::Path,
    opts: &relay::Options,
    what: &str,
    a: &ImportArgs,
) -> Result<()> {
    let (trips, rep) =
        relay::import(path, opts).with_context(|| format!("import {}", path.display()))?;
    store_all(store, what, &trips, &rep, a.show_bad)?;
    if a.past_days {
        store.mark_logs_imported(&rep.logs_read)?;
    }
    Ok(())
}

/// What `--proxy-config` makes of a proxy's configuration.
struct ProxyLearning {
    /// `[linkdb] db`.
    db: String,
    /// `[context] record`.
    dir: PathBuf,
    opts: relay::Options,
    /// `[linkdb] keep_days`.
    keep_days: Option<u32>,
}

/// `--proxy-config`: the proxy's recorded rides and where they go, or why there are none.
fn proxy_learning(a: &ImportArgs) -> Result<Option<ProxyLearning>> {
    let Some(file) = &a.proxy_config else {
        return Ok(None);
    };
    let cfg = polycorn_net::config::ProxyConfig::load(file)?;
    let f = file.display();
    let dir = cfg.context.record.clone().with_context(|| {
        format!("--proxy-config {f}: no [context] record, so the proxy keeps no rides to learn")
    })?;
    let l = &cfg.linkdb;
    let db =
        l.db.clone()
            .with_context(|| format!("--proxy-config {f}: no [linkdb] db to store the rides in"))?;
    let route = l
        .route
        .clone()
        .filter(|r| !r.trim().is_empty())
        .with_context(|| format!("--proxy-config {f}: no [linkdb] route for the rides"))?;
    let [lat, lon] = l
        .track_origin
        .with_context(|| format!("--proxy-config {f}: no [linkdb] track_origin"))?;
    let direction = direction_arg(a)?;
    Ok(Some(ProxyLearning {
        db,
        dir,
        opts: relay::Options {
            route,
            track: polycorn_linkdb::predict::Track {
                origin: (lat, lon),
                heading_deg: l.track_heading_deg,
            },
            direction,
            carriers: (!l.carriers.is_empty()).then(|| l.carriers.clone()),
            before_day: a.past_days.then(today),
            done: Default::default(),
            monitor_lag_ms: cfg.context.monitor_lag_ms,
        },
        keep_days: l.keep_days,
    }))
}

/// `--direction`, if given.
fn direction_arg(a: &ImportArgs) -> Result<Option<Direction>> {
    a.direction
        .as_deref()
        .map(str::parse::<Direction>)
        .transpose()
        .map_err(anyhow::Error::msg)
}

/// Today (UTC) as context logs' names give it.
fn today() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    polycorn_net::context::record_day(now.as_millis() as u64)
}

/// `--ride-log`'s options, checked before anything is stored; `None` without `--ride-log`.
fn ride_log_options(a: &ImportArgs) -> Result<Option<relay::Options>> {
    if a.ride_log.is_empty() {
        if a.route.is_some()
            || !a.track_origin.is_empty()
            || a.track_heading.is_some()
            || (a.direction.is_some() && a.proxy_config.is_none())
            || !a.carriers.is_empty()
            || (a.past_days && a.proxy_config.is_none())
        {
            bail!(
                "--route, --track-origin, --track-heading, --direction, --carriers and \
                 --past-days go with --ride-log (--direction and --past-days also with \
                 --proxy-config)"
            );
        }
        return Ok(None);
    }
    let route =
        a.route.clone().filter(|r| !r.trim().is_empty()).context(
            "--ride-log needs --route: the line the rides were on (their cells are its)",
        )?;
    let [lat, lon] = a.track_origin[..] else {
        bail!("--ride-log needs --track-origin LAT,LON: position 0 of the line");
    };
    if !(-90.0..=90.0).contains(&lat) || !(-180.0..=180.0).contains(&lon) {
        bail!("--track-origin {lat},{lon} is not a latitude and longitude");
    }
    let heading = a
        .track_heading
        .context("--ride-log needs --track-heading DEG: the line's heading")?;
    if !heading.is_finite() {
        bail!("--track-heading {heading} is not a number of degrees");
    }
    let direction = direction_arg(a)?;
    Ok(Some(relay::Options {
        route,
        track: polycorn_linkdb::predict::Track {
            origin: (lat, lon),
            heading_deg: heading,
        },
        direction,
        carriers: (!a.carriers.is_empty()).then(|| a.carriers.clone()),
        before_day: a.past_days.then(today),
        done: Default::default(),
        monitor_lag_ms: a.monitor_lag_ms,
    }))
}

/// How the handovers a relay would have inferred compare with the truth.
fn print_comparison(c: &relay::Comparison) {
    let mut err: Vec<f64> = c.position_error_m.iter().map(|e| e.abs()).collect();
    err.sort_by(f64::total_cmp);
    let q = |p: f64| {
        if err.is_empty() {
            f64::NAN
        } else {
            err[((err.len() - 1) as f64 * p).round() as usize]
        }
    };
    let signed: f64 =
        c.position_error_m.iter().sum::<f64>() / c.position_error_m.len().max(1) as f64;
    println!(
        "as the relay saw them: {} of {} failures found within {} s of the loss ({:.1}%), {} \
         failures inferred in all; {} successes inferred for {} true ones",
        c.matched_failures,
        c.true_failures,
        relay::MATCH_MS / 1000,
        100.0 * c.matched_failures as f64 / c.true_failures.max(1) as f64,
        c.inferred_failures,
        c.inferred_successes,
        c.true_successes
    );
    println!(
        "  where the loss was placed: |error| median {:.0} m, p90 {:.0} m, mean error {:+.0} m \
         (inferred − true, along the line)",
        q(0.5),
        q(0.9),
        signed
    );
}

fn stats(db: &DbArgs) -> Result<()> {
    let mut store = open(db)?;
    let [trips, hos, fails, samples, radio] = store.counts()?;
    println!(
        "database: {} ({}, schema v{})",
        store.redacted_url(),
        store.engine(),
        store.schema_version()?
    );
    println!("{trips} trips, {hos} handovers ({fails} failed), {samples} GPS fixes, {radio} radio samples");
    // Each ride's handovers, not its fixes and radio samples (the bulk of a database).
    let all = store.load_for_prediction(&TripFilter::default(), ModelKind::Paper)?;
    let mut by_route: BTreeMap<(String, String), Vec<&TripData>> = BTreeMap::new();
    for t in &all {
        by_route
            .entry((t.meta.source.to_string(), t.meta.route.clone()))
            .or_default()
            .push(t);
    }
    println!(
        "{:<7} {:<22} {:>5} {:>6} {:>9} {:>8} {:>7} {:>12} {:>11}",
        "source",
        "route",
        "trips",
        "rides",
        "handovers",
        "failed",
        "cells",
        "cells w/fail",
        "h per HO"
    );
    let mut dated = Vec::new();
    for ((source, route), trips) in by_route {
        let starts: Vec<u64> = trips.iter().filter_map(|t| t.meta.start_ms()).collect();
        if let (Some(first), Some(last)) = (starts.iter().min(), starts.iter().max()) {
            dated.push(format!(
                "{source} {route}: rides began from {} to {} ({} of no known start)",
                iso_time(*first),
                iso_time(*last),
                trips.len() - starts.len()
            ));
        }
        let rides: std::collections::BTreeSet<&str> =
            trips.iter().map(|t| validate::ride_of(t)).collect();
        let owned: Vec<TripData> = trips.iter().map(|t| (*t).clone()).collect();
        let cells = analysis::cell_summaries(&owned);
        let n: usize = cells.iter().map(|c| c.handovers).sum();
        let f: usize = cells.iter().map(|c| c.failures).sum();
        let with_fail = cells.iter().filter(|c| c.failures > 0).count();
        let secs: f64 = trips
            .iter()
            .map(|t| t.meta.duration_ms as f64 / 1000.0 * t.meta.carriers.len() as f64)
            .sum();
        println!(
            "{:<7} {:<22} {:>5} {:>6} {:>9} {:>8} {:>7} {:>12} {:>11}",
            source,
            route,
            trips.len(),
            rides.len(),
            n,
            format!("{:.2}%", 100.0 * f as f64 / n.max(1) as f64),
            cells.len(),
            format!(
                "{:.1}%",
                100.0 * with_fail as f64 / cells.len().max(1) as f64
            ),
            if n == 0 {
                "-".to_string()
            } else {
                format!("{:.1}", secs / n as f64)
            },
        );
    }
    for line in dated {
        println!("{line}");
    }
    Ok(())
}

fn by_route(trips: Vec<TripData>) -> BTreeMap<String, Vec<TripData>> {
    let mut m: BTreeMap<String, Vec<TripData>> = BTreeMap::new();
    for t in trips {
        m.entry(t.meta.route.clone()).or_default().push(t);
    }
    m
}

fn analyze(db: &DbArgs, filter: &FilterArgs, list_cells: bool) -> Result<()> {
    let mut store = open(db)?;
    let trips = store.load(&filter.filter()?)?;
    if trips.is_empty() {
        bail!("no trips match; import some first (polycorn linkdb import …)");
    }
    for (route, trips) in by_route(trips) {
        let cells = analysis::cell_summaries(&trips);
        println!(
            "== route {route}: {} trips, {} cells",
            trips.len(),
            cells.len()
        );
        if list_cells {
            println!(
                "{:<10} {:<12} {:<5} {:>9} {:>7} {:>12} {:>14}",
                "carrier", "cell", "dir", "handovers", "failed", "EHP m", "fail start m"
            );
            for c in &cells {
                let m = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.0}"));
                println!(
                    "{:<10} {:<12} {:<5} {:>9} {:>7} {:>12} {:>14}",
                    c.carrier,
                    c.cell,
                    c.direction,
                    c.handovers,
                    c.failures,
                    m(c.ehp_position_m),
                    m(c.mean_failure_position_m)
                );
            }
        }
        println!("handover success rate (paper Table 1; handovers in brackets):");
        print!("{}", analysis::format_table1(&analysis::table1(&trips)));
        println!("cells whose successes and failures a linear SVM separates (paper §3):");
        print!(
            "{}",
            analysis::format_separability(&analysis::svm_separability(&trips))
        );
    }
    Ok(())
}

/// `--train-db`: a URL, or a path to an SQLite file, which must exist (opening one that does
/// not would create an empty database).
fn train_db_url(arg: &str) -> Result<String> {
    let url = if arg.starts_with("sqlite:") || arg.contains("://") {
        arg.to_string()
    } else {
        format!("sqlite:{arg}")
    };
    if let Some(path) = url.strip_prefix("sqlite:") {
        let path = path.strip_prefix("//").unwrap_or(path);
        if path != ":memory:" && !std::path::Path::new(path).exists() {
            bail!("--train-db {arg}: no such database file");
        }
    }
    Ok(url)
}

/// `source S` / `all sources`, `route R` / `all routes`: which trips a filter picks.
fn describe(source: Option<Source>, route: Option<&str>) -> String {
    format!(
        "{}, {}",
        source.map_or("all sources".into(), |s| format!("source {s}")),
        route.map_or("all routes".into(), |r| format!("route {r}"))
    )
}

fn validate_cmd(a: &ValidateArgs) -> Result<()> {
    if let Some(r) = a.hpr_rtt_ms {
        if !(r.is_finite() && r >= 0.0) {
            bail!("--hpr-rtt-ms must be a number >= 0, got {r}");
        }
    }
    let truth = if a.truth == "start" {
        validate::Truth::Start
    } else {
        validate::Truth::Disruption
    };
    let parse_source = |s: &Option<String>, what: &str| {
        s.as_deref()
            .map(str::parse::<Source>)
            .transpose()
            .map_err(anyhow::Error::msg)
            .context(what.to_string())
    };
    let train_source = parse_source(&a.train_source, "--train-source")?;
    let explicit = a.train_db.is_some() || train_source.is_some() || a.train_route.is_some();
    if explicit && !a.risk_thresholds.is_empty() {
        bail!(
            "--risk-thresholds and --train-db, --train-source or --train-route do not go together"
        );
    }
    let kinds: Vec<ModelKind> = a
        .models
        .iter()
        .map(|m| {
            ModelKind::parse(m)
                .with_context(|| format!("unknown predictor `{m}`; valid: paper, risk, loctable"))
        })
        .collect::<Result<_>>()?;
    let filter = a.filter.filter()?;
    let train_url = a.train_db.as_deref().map(train_db_url).transpose()?;
    let mut store = open(&a.db)?;
    let trips = store.load(&filter)?;
    if trips.is_empty() {
        bail!("no trips match; import some first (polycorn linkdb import …)");
    }
    let tested_db = store.redacted_url();
    // The training set: all of it, and by route unless `--train-route` names one for all.
    let train_filter = TripFilter {
        source: train_source.or(filter.source),
        route: a.train_route.clone().or(filter.route.clone()),
    };
    let (train_db, mut history, train_all) = if explicit {
        let (name, loaded) = match &train_url {
            Some(url) => {
                let mut ts = Store::open(url).with_context(|| format!("open --train-db {url}"))?;
                (ts.redacted_url(), ts.load(&train_filter)?)
            }
            None => (tested_db.clone(), store.load(&train_filter)?),
        };
        if a.train_route.is_some() {
            (name, BTreeMap::new(), Some(loaded))
        } else {
            (name, by_route(loaded), None)
        }
    } else {
        (tested_db.clone(), BTreeMap::new(), None)
    };
    for (route, trips) in by_route(trips) {
        let rides: std::collections::BTreeSet<&str> = trips.iter().map(validate::ride_of).collect();
        let judged = match truth {
            validate::Truth::Disruption => "failures judged at the loss of the source cell",
            validate::Truth::Start => "failures judged at their start",
        };
        let tested_on = format!(
            "{tested_db}, {}: {}",
            describe(filter.source, Some(&route)),
            validate::SetSize::of(&trips)
        );
        if !explicit {
            println!(
                "== route {route}: {} trips in {} rides, leave-one-ride-out; t1 = {} s, t2 = {} s; {judged}",
                trips.len(),
                rides.len(),
                validate::T1_S,
                validate::T2_S,
            );
            println!("trained on the other rides of the tested trips; tested on {tested_on}");
            if rides.len() < 2 {
                println!("(needs at least two rides; skipped)");
                continue;
            }
            let run =
                |lead| validate::leave_one_ride_out_across(&trips, &trips, &kinds, lead, truth);
            print_reports(&run(validate::Lead::NONE));
            print_hpr(a.hpr_rtt_ms, |lead| Ok(run(lead)))?;
            print_risk_thresholds(&trips, &a.risk_thresholds, truth);
            continue;
        }
        let train_route = a.train_route.as_deref().unwrap_or(&route);
        let train: Vec<TripData> = match &train_all {
            Some(t) => t.clone(),
            None => history.remove(&route).unwrap_or_default(),
        };
        let trained_on = format!(
            "{train_db}, {}",
            describe(train_filter.source, Some(train_route))
        );
        println!(
            "== route {route}: {} trips in {} rides, judged by predictors learned from another set; t1 = {} s, t2 = {} s; {judged}",
            trips.len(),
            rides.len(),
            validate::T1_S,
            validate::T2_S,
        );
        let run = |lead| {
            validate::train_and_test(&train, &trips, &kinds, lead, truth)
                .with_context(|| format!("route {route}: training set {trained_on}"))
        };
        let (reports, info) = run(validate::Lead::NONE)?;
        println!(
            "trained on {trained_on}: {}; tested on {tested_on}; {} rides in both, each left out of the training while it is tested",
            info.train, info.shared_rides
        );
        print_reports(&reports);
        print_hpr(a.hpr_rtt_ms, |lead| Ok(run(lead)?.0))?;
    }
    Ok(())
}

/// With `--hpr-rtt-ms`, the tables again as HPR throttles.
fn print_hpr(
    hpr_rtt_ms: Option<f64>,
    run: impl Fn(validate::Lead) -> Result<Vec<(ModelKind, validate::Report)>>,
) -> Result<()> {
    if let Some(rtt_ms) = hpr_rtt_ms {
        let lead = validate::Lead {
            rtt_ms,
            gps_error_m: 20.0,
        };
        println!(
            "as HPR throttles: from t̂_HOF − L, L = {rtt_ms} ms + 20 m / speed ({:.0} ms at 300 km/h):",
            lead.ms(300.0 / 3.6)
        );
        print_reports(&run(lead)?);
    }
    Ok(())
}

/// With `--risk-thresholds`, the risk model's totals at each.
fn print_risk_thresholds(trips: &[TripData], thresholds: &[f64], truth: validate::Truth) {
    if thresholds.is_empty() {
        return;
    }
    println!("risk model, sensitivity to its threshold (all carriers):");
    println!(
        "{:>9} {:>8} {:>8} {:>8} {:>10}",
        "threshold", "correct", "early", "late", "succ. ok"
    );
    for &th in thresholds {
        let c = validate::leave_one_ride_out_risk(trips, th, truth);
        let p = |k: usize, n: usize| format!("{:.1}%", 100.0 * k as f64 / n.max(1) as f64);
        println!(
            "{:>9} {:>8} {:>8} {:>8} {:>10}",
            th,
            p(c.fail_correct, c.failures),
            p(c.fail_early, c.failures),
            p(c.fail_late, c.failures),
            p(c.success_correct, c.successes)
        );
    }
}

/// The category table over every handover, then over the handovers out of cells with a failure
/// in the other rides (the population the paper's Fig. 6 shares can refer to; see the manual).
fn print_reports(reports: &[(ModelKind, validate::Report)]) {
    print!("{}", validate::format_table(reports));
    println!("only handovers out of a cell with a failure in the other rides (a failure location exists):");
    print!("{}", validate::format_history_table(reports));
}

fn predict(a: &PredictArgs) -> Result<()> {
    let kind = ModelKind::parse(&a.model).with_context(|| {
        format!(
            "unknown predictor `{}`; valid: paper, risk, loctable",
            a.model
        )
    })?;
    let dir: Direction = a.direction.parse().map_err(anyhow::Error::msg)?;
    let mut store = open(&a.db)?;
    let (mut p, history): (Predictor, _) = store.predictor(
        &TripFilter {
            source: None,
            route: Some(a.route.clone()),
        },
        kind,
    )?;
    if history.rides == 0 {
        bail!("no trips on route `{}`", a.route);
    }
    if p.index().carrier_id(&a.carrier).is_none() {
        bail!(
            "carrier `{}` has no history on route `{}`",
            a.carrier,
            a.route
        );
    }
    let path = PathId::new(0).expect("path 0");
    let now = Instant::ZERO;
    p.map_path(path, &a.carrier);
    p.update_fix(now, a.position_m, a.speed_mps, dir);
    p.update_cell(now, path, Some(&a.cell), a.rsrp_dbm);
    match (p.next_failure(path, now), p.failure_progress(path, now)) {
        (Some(at), Some(prog)) => {
            let dt = at.as_micros() as f64 / 1e6;
            println!(
                "{}: next handover predicted to fail at position {:.0} m, {}",
                kind.name(),
                dir.position(prog),
                if at == Instant::ZERO {
                    "already due (the train is past it)".to_string()
                } else {
                    format!("in {dt:.2} s")
                }
            );
        }
        _ => println!("{}: no failure predicted", kind.name()),
    }
    println!(
        "inside a recorded handover zone: {}",
        p.in_handover_zone(path, now)
    );
    Ok(())
}
