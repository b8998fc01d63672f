//! `polycorn status`: what a running relay or proxy is doing, read from its metrics endpoint
//! (`[metrics] listen`), as one table an operator can read on the train or on the proxy host:
//! every path of every relay (up or down, RTT, window, throughput each way over the last
//! interval, retransmissions, reconnections, reinjected bytes) and the passengers' flows.
//!
//! Two scrapes `--interval` apart give the rates; `--watch` keeps printing a fresh table every
//! interval. Nothing is written to the daemon: the endpoint is read-only.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};

/// Which daemon's configuration file is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Role {
    /// The on-train relay (`relay.toml`).
    Relay,
    /// The cloud proxy (`proxy.toml`).
    Proxy,
}

/// `polycorn status` options.
#[derive(Args, Debug, Clone)]
pub struct StatusArgs {
    /// `relay` or `proxy`: whose configuration FILE is.
    #[arg(value_enum, required_unless_present = "metrics", requires = "file")]
    pub role: Option<Role>,
    /// The daemon's configuration: the endpoint is its `[metrics] listen`.
    #[arg(required_unless_present = "metrics")]
    pub file: Option<PathBuf>,
    /// The metrics endpoint itself (`HOST:PORT`), instead of a configuration file.
    #[arg(long, conflicts_with_all = ["role", "file"])]
    pub metrics: Option<String>,
    /// Seconds between the two readings the rates are computed from (0: one reading, no rates).
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Print a fresh table every --interval until interrupted.
    #[arg(long)]
    pub watch: bool,
    /// Print each reading as one line of JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Health check for monitoring (the Nagios/Icinga plugin convention): one reading, one
    /// line, and the exit status says it: 0 OK, 1 WARNING (a path down, or the daemon's TLS
    /// certificate or CA file ending within 30 days), 2 CRITICAL (a relay with fewer than
    /// --min-paths paths up, a --relay not reporting, no relay at all, or a certificate that
    /// has ended), 3 UNKNOWN (the daemon could not be read).
    #[arg(long, conflicts_with_all = ["watch", "json"])]
    pub check: bool,
    /// With --check: a relay with fewer paths up than this is CRITICAL.
    #[arg(long, default_value_t = 1, requires = "check")]
    pub min_paths: usize,
    /// With --check: a relay (its certificate's name) that must be reporting; repeat for each
    /// train a proxy serves.
    #[arg(long = "relay", value_name = "NAME", requires = "check")]
    pub relays: Vec<String>,
    /// With --check: WARNING when the daemon's LinkDB predictor learnt from no ride that began
    /// within this many days (the nightly learning stopped: no recording, a failing import), or
    /// it has no predictor.
    #[arg(long, value_name = "DAYS", requires = "check",
          value_parser = clap::value_parser!(u32).range(1..=36_500))]
    pub max_ride_age_days: Option<u32>,
}

/// Exit status of `--check`, as monitoring systems read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Health {
    /// Every relay has every path up.
    Ok = 0,
    /// A path is down, but every relay has at least `--min-paths` up.
    Warning = 1,
    /// A relay below `--min-paths`, an expected relay missing, or no relay at all.
    Critical = 2,
    /// The daemon could not be read.
    Unknown = 3,
}

impl Health {
    fn word(self) -> &'static str {
        match self {
            Health::Ok => "OK",
            Health::Warning => "WARNING",
            Health::Critical => "CRITICAL",
            Health::Unknown => "UNKNOWN",
        }
    }
}

/// `polycorn status`: the exit status (0, or with `--check` the [`Health`]).
pub fn run(args: &StatusArgs) -> Result<u8> {
    if args.check {
        let (health, line) = match check_once(args) {
            Ok(v) => v,
            Err(e) => (Health::Unknown, format!("{e:#}")),
        };
        crate::emit(&format!("{}: {line}\n", health.word()))?;
        return Ok(health as u8);
    }
    if !(args.interval.is_finite() && args.interval >= 0.0) {
        bail!(
            "--interval {}: expected a number of seconds ≥ 0",
            args.interval
        );
    }
    if args.watch && args.interval <= 0.0 {
        bail!("--watch needs an --interval above 0");
    }
    let (addr, origin) = endpoint(args)?;
    let read = || -> Result<(Instant, Snapshot)> {
        let text =
            fetch_metrics(addr).with_context(|| format!("metrics endpoint {addr}{origin}"))?;
        let at = Instant::now();
        let snap = Snapshot::from_samples(
            &parse_samples(&text).with_context(|| format!("metrics from {addr}"))?,
        );
        Ok((at, snap))
    };
    let show = |prev: Option<(&Snapshot, f64)>, cur: &Snapshot| {
        if args.json {
            format!("{}\n", to_json(addr, prev, cur))
        } else {
            render(addr, prev, cur)
        }
    };
    let mut prev = read()?;
    if args.interval == 0.0 {
        crate::emit(&show(None, &prev.1))?;
        return Ok(0);
    }
    let interval = Duration::from_secs_f64(args.interval);
    loop {
        std::thread::sleep(interval);
        let cur = read()?;
        let dt = cur.0.duration_since(prev.0).as_secs_f64();
        let mut text = String::new();
        if args.watch && !args.json {
            use std::io::IsTerminal as _;
            if std::io::stdout().is_terminal() {
                text.push_str("\x1b[2J\x1b[H");
            }
        }
        text.push_str(&show(Some((&prev.1, dt)), &cur.1));
        crate::emit(&text)?;
        if !args.watch {
            return Ok(0);
        }
        prev = cur;
    }
}

/// One reading judged for `--check`: its health and the line saying why.
fn check_once(args: &StatusArgs) -> Result<(Health, String)> {
    let (addr, origin) = endpoint(args)?;
    let text = fetch_metrics(addr).with_context(|| format!("metrics endpoint {addr}{origin}"))?;
    let snap = Snapshot::from_samples(
        &parse_samples(&text).with_context(|| format!("metrics from {addr}"))?,
    );
    let now = polycorn_net::tls::unix_now();
    let (health, line) = judge(&snap, args.min_paths, &args.relays, now);
    Ok(match args.max_ride_age_days {
        Some(days) => match judge_learning(&snap, days, now) {
            Some(said) => (health.max(Health::Warning), format!("{said}, {line}")),
            None => (health, line),
        },
        None => (health, line),
    })
}

/// `--max-ride-age-days`: what is wrong with the daemon's learning at `now`, if anything (a
/// WARNING): no predictor, none of its rides of known start, or the newest begun more than
/// `days` days ago.
fn judge_learning(cur: &Snapshot, days: u32, now: i64) -> Option<String> {
    let l = &cur.linkdb;
    if l.rides <= 0.0 {
        return Some("no LinkDB predictor".to_string());
    }
    if l.newest_ride <= 0.0 {
        return Some(format!(
            "LinkDB learnt from {} rides, none of known start",
            l.rides
        ));
    }
    let age = (now - l.newest_ride as i64) / 86_400;
    (age > i64::from(days)).then(|| format!("LinkDB's newest ride began {age} days ago"))
}

/// The health of a reading at `now` (seconds since 1970): every relay with at least
/// `min_paths` paths up and every `expected` relay reporting, whether any path is down, and
/// whether the daemon's certificate or CA file ends within 30 days (WARNING) or has ended
/// (CRITICAL). The line names every relay and file that is not OK, then the flows, then
/// Nagios performance data.
pub fn judge(cur: &Snapshot, min_paths: usize, expected: &[String], now: i64) -> (Health, String) {
    let relays = cur.relays();
    let mut health = Health::Ok;
    let mut said = Vec::new();
    if relays.is_empty() && expected.is_empty() {
        health = Health::Critical;
        said.push(
            "no paths reported (a relay not connected to its proxy, or a proxy no relay has reached)"
                .to_string(),
        );
    }
    for name in expected {
        if !relays.contains_key(name.as_str()) {
            health = Health::Critical;
            said.push(format!("{name} not reporting"));
        }
    }
    for (relay, &(up, all)) in &relays {
        let h = if up < min_paths {
            Health::Critical
        } else if up < all {
            Health::Warning
        } else {
            continue;
        };
        health = health.max(h);
        said.push(format!("{relay} {up} of {all} paths up"));
    }
    let mut certs_said = Vec::new();
    for (file, &end) in &cur.tls_not_after {
        let left = end as i64 - now;
        let warn = polycorn_net::tls::EXPIRY_WARNING.as_secs() as i64;
        let days = |d: i64| {
            if d == 1 {
                "1 day".to_string()
            } else {
                format!("{d} days")
            }
        };
        if left <= 0 {
            health = Health::Critical;
            certs_said.push(format!("TLS {file} ended {} ago", days(-left / 86_400)));
        } else if left < warn {
            health = health.max(Health::Warning);
            certs_said.push(format!("TLS {file} ends in {}", days(left / 86_400)));
        }
    }
    if said.is_empty() {
        said.push(
            relays
                .iter()
                .map(|(relay, (up, all))| format!("{relay} {up} of {all} paths up"))
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
    said.extend(certs_said);
    let (up, all) = relays
        .values()
        .fold((0, 0), |(u, a), &(up, all)| (u + up, a + all));
    let line = format!(
        "{}; passenger flows {} open | paths_up={up} paths={all} flows_open={}",
        said.join(", "),
        cur.flows_open,
        cur.flows_open
    );
    (health, line)
}

/// The same path in the reading before, with the seconds between the two readings.
fn row_before<'a>(
    prev: Option<(&'a Snapshot, f64)>,
    key: &(String, String),
) -> Option<(&'a PathRow, f64)> {
    prev.and_then(|(p, dt)| p.paths.get(key).map(|b| (b, dt)))
}

/// Rate in Mbit/s of a counter read `dt` seconds apart (none across a restart).
fn rate_mbps(now: f64, then: Option<f64>, dt: f64) -> Option<f64> {
    match then {
        Some(t) if now >= t && dt > 0.0 => Some((now - t) * 8.0 / dt / 1e6),
        _ => None,
    }
}

/// One reading as JSON (what `--json` prints, one object per line): the endpoint, the
/// interval the rates are over (null on one reading), every path (rates null where the table
/// shows `-`), each relay's paths up, and the flow counters.
pub fn to_json(addr: SocketAddr, prev: Option<(&Snapshot, f64)>, cur: &Snapshot) -> String {
    let paths: Vec<serde_json::Value> = cur
        .paths
        .iter()
        .map(|(key @ (relay, path), r)| {
            let before = row_before(prev, key);
            let rate = |now: f64, then: fn(&PathRow) -> f64| {
                before.and_then(|(b, dt)| rate_mbps(now, Some(then(b)), dt))
            };
            let gauge = |v: Option<f64>| v.filter(|_| r.up);
            serde_json::json!({
                "relay": relay,
                "path": path,
                "up": r.up,
                "rtt_ms": gauge(r.rtt_s).map(|s| s * 1e3),
                "cwnd_bytes": gauge(r.cwnd_bytes),
                "sent_mbps": rate(r.sent, |b| b.sent),
                "received_mbps": rate(r.received, |b| b.received),
                "sent_bytes": r.sent,
                "received_bytes": r.received,
                "retransmissions": r.retransmissions,
                "reconnects": r.reconnects,
                "reinjected_bytes": r.reinjected,
            })
        })
        .collect();
    let relays: Vec<serde_json::Value> = cur
        .relays()
        .iter()
        .map(|(relay, (up, all))| serde_json::json!({"relay": relay, "paths_up": up, "paths": all}))
        .collect();
    serde_json::json!({
        "endpoint": format!("http://{addr}/metrics"),
        "role": cur.build.as_ref().map(|(role, _)| role),
        "version": cur.build.as_ref().map(|(_, version)| version),
        "interval_s": prev.map(|(_, dt)| dt),
        "paths": paths,
        "radios": cur.radios.iter().map(|(path, r)| serde_json::json!({
            "path": path,
            "technology": r.tech,
            "cell": r.cell,
            "rsrp_dbm": r.rsrp_dbm,
        })).collect::<Vec<_>>(),
        "relays": relays,
        "flows_open": cur.flows_open,
        "flows_total": cur.flows_total,
        "flows_reset": cur.flows_reset,
        "flows_held": cur.flows_held,
        "proxy_failovers": cur.proxy_failovers,
        "session_renewals": cur.session_renewals,
        "passenger_addresses": cur.passengers,
        "subflows_refused": cur.peers_rejected,
        "tls_not_after": cur.tls_not_after,
        "linkdb": (cur.linkdb.rides > 0.0 || cur.linkdb.rebuild_failures > 0.0).then(|| {
            serde_json::json!({
                "rides": cur.linkdb.rides,
                "cells": cur.linkdb.cells,
                "built": (cur.linkdb.built > 0.0).then_some(cur.linkdb.built),
                "newest_ride": (cur.linkdb.newest_ride > 0.0).then_some(cur.linkdb.newest_ride),
                "rebuild_failures": cur.linkdb.rebuild_failures,
            })
        }),
    })
    .to_string()
}

/// The endpoint to read, and where it came from (for errors).
fn endpoint(args: &StatusArgs) -> Result<(SocketAddr, String)> {
    if let Some(m) = &args.metrics {
        let hostport = m
            .strip_prefix("http://")
            .unwrap_or(m)
            .trim_end_matches("/metrics");
        let addr = hostport
            .to_socket_addrs()
            .with_context(|| format!("--metrics {m}: expected HOST:PORT"))?
            .next()
            .with_context(|| format!("--metrics {m}: no address"))?;
        return Ok((addr, String::new()));
    }
    let (Some(role), Some(file)) = (args.role, &args.file) else {
        bail!("give `relay FILE`, `proxy FILE` or --metrics HOST:PORT");
    };
    let listen = match role {
        Role::Relay => {
            polycorn_net::config::RelayConfig::load(file)?
                .metrics
                .listen
        }
        Role::Proxy => {
            polycorn_net::config::ProxyConfig::load(file)?
                .metrics
                .listen
        }
    };
    let Some(listen) = listen else {
        bail!(
            "{}: no `[metrics] listen`, and status reads the metrics endpoint: add \
             `[metrics]` `listen = \"127.0.0.1:9100\"` and restart the {}",
            file.display(),
            match role {
                Role::Relay => "relay",
                Role::Proxy => "proxy",
            }
        );
    };
    Ok((
        connectable(listen),
        format!(" (metrics.listen of {})", file.display()),
    ))
}

/// A listen address one can connect to: the wildcard means this host's loopback.
fn connectable(listen: SocketAddr) -> SocketAddr {
    match listen.ip() {
        IpAddr::V4(a) if a.is_unspecified() => {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), listen.port())
        }
        IpAddr::V6(a) if a.is_unspecified() => {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), listen.port())
        }
        _ => listen,
    }
}

pub use polycorn_net::scrape::{fetch_metrics, parse_samples, Sample};

/// One path of one relay, as its daemon reports it.
#[derive(Debug, Clone, Default, PartialEq)]
struct PathRow {
    up: bool,
    rtt_s: Option<f64>,
    cwnd_bytes: Option<f64>,
    sent: f64,
    received: f64,
    retransmissions: f64,
    reconnects: f64,
    reinjected: f64,
}

/// (relay, `[context] cells = "modemmanager"`) One path's radio as its modem reports it.
#[derive(Debug, Clone, Default, PartialEq)]
struct RadioRow {
    /// `gsm`, `umts`, `lte`, `nr` (None: none).
    tech: Option<String>,
    /// Serving cell (None: no cell).
    cell: Option<u64>,
    /// RSRP, dBm.
    rsrp_dbm: Option<f64>,
}

/// One reading of a daemon's metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// path → its radio (a relay reading cells from ModemManager).
    radios: BTreeMap<String, RadioRow>,
    /// (relay, path) → the path.
    paths: BTreeMap<(String, String), PathRow>,
    flows_open: f64,
    flows_total: f64,
    flows_reset: f64,
    /// (relay) Held while the proxy drained.
    flows_held: f64,
    /// (relay) Moves to another of the proxy name's addresses.
    proxy_failovers: f64,
    session_renewals: f64,
    peers_rejected: f64,
    /// Passenger addresses with a byte counter.
    passengers: usize,
    /// `polycorn_tls_not_after_seconds` by file (`cert`, `ca`): seconds since 1970.
    tls_not_after: BTreeMap<String, f64>,
    /// The handover predictor in use (`polycorn_linkdb_…`).
    linkdb: LinkDbRow,
    /// `polycorn_build_info`: which end (`relay`, `proxy`) and the binary's version; `None`
    /// from a daemon older than that family.
    build: Option<(String, String)>,
}

/// What the handover predictor in use was built from (all 0: none).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct LinkDbRow {
    rides: f64,
    cells: f64,
    /// Seconds since 1970.
    built: f64,
    /// Seconds since 1970; 0 when no ride's start is known.
    newest_ride: f64,
    rebuild_failures: f64,
}

impl Snapshot {
    /// The families `status` shows, from the samples of one scrape.
    pub fn from_samples(samples: &[Sample]) -> Snapshot {
        let mut s = Snapshot::default();
        let mut passengers = std::collections::BTreeSet::new();
        for x in samples {
            if let Some(kind) = x.name.strip_prefix("polycorn_path_radio_") {
                let Some(path) = x.label("path") else {
                    continue;
                };
                let row = s.radios.entry(path.to_string()).or_default();
                let known = x.value.is_finite().then_some(x.value);
                match kind {
                    "rsrp_dbm" => row.rsrp_dbm = known,
                    "cell" => row.cell = known.map(|c| c as u64),
                    "technology" if x.value > 0.0 => {
                        row.tech = x.label("tech").filter(|t| *t != "none").map(String::from)
                    }
                    _ => {}
                }
                continue;
            }
            if let Some(p) = x.name.strip_prefix("polycorn_path_") {
                let (Some(relay), Some(path)) = (x.label("relay"), x.label("path")) else {
                    continue;
                };
                let row = s
                    .paths
                    .entry((relay.to_string(), path.to_string()))
                    .or_default();
                match p {
                    "up" => row.up = x.value > 0.0,
                    "rtt_seconds" => row.rtt_s = Some(x.value),
                    "cwnd_bytes" => row.cwnd_bytes = Some(x.value),
                    "sent_bytes_total" => row.sent = x.value,
                    "received_bytes_total" => row.received = x.value,
                    "retransmissions_total" => row.retransmissions = x.value,
                    "reconnects_total" => row.reconnects = x.value,
                    "reinjected_bytes_total" => row.reinjected = x.value,
                    _ => {}
                }
                continue;
            }
            match x.name.as_str() {
                "polycorn_flows_open" => s.flows_open = x.value,
                "polycorn_flows_total" => s.flows_total = x.value,
                "polycorn_flows_reset_total" => s.flows_reset = x.value,
                "polycorn_flows_held_total" => s.flows_held = x.value,
                "polycorn_proxy_failovers_total" => s.proxy_failovers = x.value,
                "polycorn_session_renewals_total" => s.session_renewals = x.value,
                "polycorn_peers_rejected_total" => s.peers_rejected = x.value,
                "polycorn_linkdb_rides" => s.linkdb.rides = x.value,
                "polycorn_linkdb_cells" => s.linkdb.cells = x.value,
                "polycorn_linkdb_built_seconds" => s.linkdb.built = x.value,
                "polycorn_linkdb_newest_ride_seconds" => s.linkdb.newest_ride = x.value,
                "polycorn_linkdb_rebuild_failures_total" => s.linkdb.rebuild_failures = x.value,
                "polycorn_tls_not_after_seconds" => {
                    if let Some(f) = x.label("file") {
                        s.tls_not_after.insert(f.to_string(), x.value);
                    }
                }
                // 0 until a proxy presented one.
                "polycorn_proxy_tls_not_after_seconds" if x.value > 0.0 => {
                    s.tls_not_after
                        .insert("proxy's certificate".to_string(), x.value);
                }
                "polycorn_relay_tls_not_after_seconds" => {
                    if let Some(r) = x.label("relay") {
                        s.tls_not_after
                            .insert(format!("certificate of relay {r}"), x.value);
                    }
                }
                "polycorn_user_bytes_total" => {
                    if let Some(u) = x.label("user") {
                        passengers.insert(u.to_string());
                    }
                }
                "polycorn_build_info" => {
                    if let (Some(role), Some(version)) = (x.label("role"), x.label("version")) {
                        s.build = Some((role.to_string(), version.to_string()));
                    }
                }
                _ => {}
            }
        }
        s.passengers = passengers.len();
        s
    }

    /// Per relay: (paths up, paths reported).
    fn relays(&self) -> BTreeMap<&str, (usize, usize)> {
        let mut relays: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
        for ((relay, _), r) in &self.paths {
            let e = relays.entry(relay).or_default();
            e.0 += usize::from(r.up);
            e.1 += 1;
        }
        relays
    }
}

/// The table for reading `cur` of `addr`; with the reading before it and the seconds between
/// them, also each path's throughput (a counter that went back — a restart — shows `-`).
pub fn render(addr: SocketAddr, prev: Option<(&Snapshot, f64)>, cur: &Snapshot) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "polycorn status · {}http://{addr}/metrics{}",
        match &cur.build {
            Some((role, version)) => format!("{role} {version} · "),
            None => String::new(),
        },
        match prev {
            Some((_, dt)) => format!(" · rates over {dt:.1} s"),
            None => String::new(),
        }
    );
    if cur.paths.is_empty() {
        o.push_str("no paths reported yet (a relay that has not connected, or a proxy no relay has reached)\n");
    } else {
        let widest = |len: fn(&(String, String)) -> usize, min: usize| {
            cur.paths.keys().map(len).max().unwrap_or(0).max(min)
        };
        let relay_w = widest(|(r, _)| r.len(), 5);
        let path_w = widest(|(_, p)| p.len(), 4);
        let _ = writeln!(
            o,
            "{:<relay_w$}  {:<path_w$}  {:>4}  {:>7}  {:>8}  {:>11}  {:>11}  {:>8}  {:>10}  {:>13}",
            "relay",
            "path",
            "up",
            "rtt ms",
            "cwnd KB",
            "sent Mbit/s",
            "recv Mbit/s",
            "retrans",
            "reconnects",
            "reinjected MB"
        );
        for (key @ (relay, path), r) in &cur.paths {
            let before = row_before(prev, key);
            let rate = |now: f64, then: Option<f64>| match before
                .and_then(|(_, dt)| rate_mbps(now, then, dt))
            {
                Some(r) => format!("{r:.2}"),
                None => "-".into(),
            };
            let gauge = |v: Option<f64>, scale: f64| match v {
                Some(v) if r.up => format!("{:.1}", v / scale),
                _ => "-".into(),
            };
            let _ = writeln!(
                o,
                "{:<relay_w$}  {:<path_w$}  {:>4}  {:>7}  {:>8}  {:>11}  {:>11}  {:>8}  {:>10}  {:>13.2}",
                relay,
                path,
                if r.up { "yes" } else { "no" },
                gauge(r.rtt_s, 1e-3),
                gauge(r.cwnd_bytes, 1024.0),
                rate(r.sent, before.map(|(b, _)| b.sent)),
                rate(r.received, before.map(|(b, _)| b.received)),
                r.retransmissions,
                r.reconnects,
                r.reinjected / 1e6,
            );
        }
        let summary: Vec<String> = cur
            .relays()
            .iter()
            .map(|(relay, (up, all))| format!("{relay} {up} of {all} paths up"))
            .collect();
        let _ = writeln!(o, "{}", summary.join(", "));
    }
    for (path, r) in &cur.radios {
        let _ = writeln!(
            o,
            "radio {path}: {}, {}, {}",
            r.tech.as_deref().unwrap_or("no technology"),
            r.cell
                .map_or("no cell".to_string(), |c| format!("cell {c}")),
            r.rsrp_dbm
                .map_or("RSRP -".to_string(), |v| format!("RSRP {v:.1} dBm")),
        );
    }
    let _ = writeln!(
        o,
        "passenger flows: {} open, {} since start, {} reset{}; {} passenger address{}; {} subflow{} refused",
        cur.flows_open,
        cur.flows_total,
        cur.flows_reset,
        [
            (cur.flows_held > 0.0)
                .then(|| format!(", {} held through a proxy's drain", cur.flows_held)),
            (cur.proxy_failovers > 0.0).then(|| {
                format!(
                    ", {} move{} to another proxy",
                    cur.proxy_failovers,
                    if cur.proxy_failovers == 1.0 { "" } else { "s" }
                )
            }),
            (cur.session_renewals > 0.0).then(|| {
                format!(
                    ", {} fresh start{} with a new proxy",
                    cur.session_renewals,
                    if cur.session_renewals == 1.0 { "" } else { "s" }
                )
            }),
        ]
        .into_iter()
        .flatten()
        .collect::<String>(),
        cur.passengers,
        if cur.passengers == 1 { "" } else { "es" },
        cur.peers_rejected,
        if cur.peers_rejected == 1.0 { "" } else { "s" },
    );
    if !cur.tls_not_after.is_empty() {
        let now = polycorn_net::tls::unix_now();
        // Its own files always; peers' certificates (one per relay on a proxy) when they end
        // soon.
        let soon = now + polycorn_net::tls::EXPIRY_WARNING.as_secs() as i64;
        let files: Vec<String> = cur
            .tls_not_after
            .iter()
            .filter(|(file, &end)| matches!(file.as_str(), "cert" | "ca") || (end as i64) < soon)
            .map(|(file, &end)| match (end as i64 - now) / 86_400 {
                d if end as i64 <= now => format!("{file} ENDED {} days ago", -d),
                d if d < 30 => format!("{file} {d} days left: renew it"),
                d => format!("{file} {d} days left"),
            })
            .collect();
        let _ = writeln!(o, "TLS validity: {}", files.join(", "));
    }
    if let Some(line) = linkdb_line(&cur.linkdb, polycorn_net::tls::unix_now()) {
        let _ = writeln!(o, "{line}");
    }
    o
}

/// The predictor's line of [`render`] at `now` (seconds since 1970); none without a predictor
/// and without a failed rebuild.
fn linkdb_line(l: &LinkDbRow, now: i64) -> Option<String> {
    if l.rides <= 0.0 && l.rebuild_failures <= 0.0 {
        return None;
    }
    let ago = |t: f64| {
        let s = (now - t as i64).max(0);
        match s {
            s if s < 2 * 3600 => format!("{} min ago", s / 60),
            s if s < 2 * 86_400 => format!("{} h ago", s / 3600),
            s => format!("{} days ago", s / 86_400),
        }
    };
    let mut line = if l.rides > 0.0 {
        format!(
            "LinkDB: predictor built {} from {} rides ({} cells)",
            ago(l.built),
            l.rides,
            l.cells
        )
    } else {
        "LinkDB: no predictor".to_string()
    };
    if l.newest_ride > 0.0 {
        line += &format!(", the newest begun {}", ago(l.newest_ride));
    }
    if l.rebuild_failures > 0.0 {
        line += &format!(
            "; {} rebuild{} failed (the log says why)",
            l.rebuild_failures,
            if l.rebuild_failures == 1.0 { "" } else { "s" }
        );
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use polycorn_net::metrics::{Direction, Metrics};

    /// The clock of the judged readings: 2030-01-01.
    const NOW: i64 = 1_893_456_000;

    fn snapshot(m: &Metrics) -> Snapshot {
        Snapshot::from_samples(&parse_samples(&m.encode()).expect("our own metrics parse"))
    }

    const ADDR: &str = "127.0.0.1:9100";

    /// The columns of `table`'s first row that starts with `start`.
    fn columns<'a>(table: &'a str, start: &str) -> Vec<&'a str> {
        table
            .lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no row {start}:\n{table}"))
            .split_whitespace()
            .collect()
    }

    /// The daemon's own encoder, read back: paths of two trains, rates from two readings,
    /// a path that is down shows no RTT.
    #[test]
    fn a_proxy_with_two_trains_reads_as_one_table() {
        let m = Metrics::new();
        let a = m.path("train-1", "lte0");
        a.connected();
        a.set_rtt(Duration::from_millis(45));
        a.set_cwnd_bytes(120 * 1024);
        let b = m.path("train-2", "lte1");
        b.connected();
        b.disconnected();
        b.set_rtt(Duration::from_millis(300));
        m.flows_open.set(3);
        m.flows_total.inc_by(10);
        m.user("10.0.1.2".parse().unwrap())
            .bytes(Direction::Down)
            .inc_by(5);
        let before = snapshot(&m);
        a.sent_bytes.inc_by(1_250_000); // 10 Mbit
        a.received_bytes.inc_by(125_000);
        a.reinjected_bytes.inc_by(2_000_000);
        let after = snapshot(&m);
        let t = render(ADDR.parse().unwrap(), Some((&before, 2.0)), &after);
        assert_eq!(
            columns(&t, "train-1 "),
            ["train-1", "lte0", "yes", "45.0", "120.0", "5.00", "0.50", "0", "0", "2.00"],
            "{t}"
        );
        assert_eq!(
            columns(&t, "train-2 "),
            ["train-2", "lte1", "no", "-", "-", "0.00", "0.00", "0", "0", "0.00"],
            "{t}"
        );
        assert!(t.contains("rates over 2.0 s"), "{t}");
        assert!(
            t.contains("train-1 1 of 1 paths up, train-2 0 of 1 paths up"),
            "{t}"
        );
        assert!(
            t.contains("passenger flows: 3 open, 10 since start, 0 reset; 1 passenger address;"),
            "{t}"
        );
        // A relay that held connections through a proxy's drain says so.
        m.flows_held.inc_by(2);
        let t = render(ADDR.parse().unwrap(), None, &snapshot(&m));
        assert!(
            t.contains("0 reset, 2 held through a proxy's drain; 1 passenger address;"),
            "{t}"
        );
        // And one that moved to another of the proxy name's addresses.
        m.proxy_failovers.inc();
        let t = render(ADDR.parse().unwrap(), None, &snapshot(&m));
        assert!(
            t.contains("0 reset, 2 held through a proxy's drain, 1 move to another proxy; 1"),
            "{t}"
        );
        // And one that started afresh with a proxy of another epoch, twice.
        m.session_renewals.inc_by(2);
        let t = render(ADDR.parse().unwrap(), None, &snapshot(&m));
        assert!(
            t.contains(
                "2 held through a proxy's drain, 1 move to another proxy, 2 fresh starts with a \
                 new proxy; 1"
            ),
            "{t}"
        );
    }

    /// A relay reading its modems through ModemManager: one radio line per path, from the
    /// daemon's own encoder.
    #[test]
    fn radios_show_technology_cell_and_rsrp() {
        let m = Metrics::new();
        m.set_radio("A", Some("lte"), Some(0x1A2B), Some(-97.5));
        m.set_radio("B", None, None, None);
        let s = snapshot(&m);
        let t = render(ADDR.parse().unwrap(), None, &s);
        assert!(t.contains("radio A: lte, cell 6699, RSRP -97.5 dBm"), "{t}");
        assert!(t.contains("radio B: no technology, no cell, RSRP -"), "{t}");
        // The technology moves: only the current one shows.
        m.set_radio("A", Some("nr"), Some(7), Some(-80.0));
        let t = render(ADDR.parse().unwrap(), None, &snapshot(&m));
        assert!(t.contains("radio A: nr, cell 7, RSRP -80.0 dBm"), "{t}");
        let j: serde_json::Value =
            serde_json::from_str(&to_json(ADDR.parse().unwrap(), None, &snapshot(&m))).unwrap();
        assert_eq!(j["radios"][0]["technology"], "nr");
        assert_eq!(j["radios"][1]["cell"], serde_json::Value::Null);
    }

    /// The predictor's line: what it learnt from and how long ago, failed rebuilds; nothing
    /// without a predictor.
    #[test]
    fn the_predictor_in_use_is_one_line() {
        let m = Metrics::new();
        assert_eq!(linkdb_line(&snapshot(&m).linkdb, NOW), None);
        m.linkdb_in_use(123, 160, NOW - 3 * 3600, Some(NOW - 20 * 86_400));
        let s = snapshot(&m);
        assert_eq!(
            linkdb_line(&s.linkdb, NOW).as_deref(),
            Some("LinkDB: predictor built 3 h ago from 123 rides (160 cells), the newest begun 20 days ago")
        );
        m.linkdb_rebuild_failures.inc();
        assert!(linkdb_line(&snapshot(&m).linkdb, NOW)
            .unwrap()
            .ends_with("; 1 rebuild failed (the log says why)"));
        m.linkdb_in_use(0, 0, 0, None);
        assert_eq!(
            linkdb_line(&snapshot(&m).linkdb, NOW).as_deref(),
            Some("LinkDB: no predictor; 1 rebuild failed (the log says why)")
        );
        // --check --max-ride-age-days: learning that stopped is a warning.
        assert_eq!(judge_learning(&s, 30, NOW), None);
        assert_eq!(
            judge_learning(&s, 14, NOW).as_deref(),
            Some("LinkDB's newest ride began 20 days ago")
        );
        assert_eq!(
            judge_learning(&snapshot(&m), 14, NOW).as_deref(),
            Some("no LinkDB predictor")
        );
        m.linkdb_in_use(5, 160, NOW, None);
        assert_eq!(
            judge_learning(&snapshot(&m), 14, NOW).as_deref(),
            Some("LinkDB learnt from 5 rides, none of known start")
        );
        let j: serde_json::Value =
            serde_json::from_str(&to_json(ADDR.parse().unwrap(), None, &s)).unwrap();
        assert_eq!(j["linkdb"]["rides"], 123.0);
        assert_eq!(j["linkdb"]["newest_ride"], (NOW - 20 * 86_400) as f64);
    }

    /// One reading: no rates. A counter that went back (the daemon restarted between the
    /// readings) gives no rate rather than a negative one.
    #[test]
    fn no_rate_without_two_readings_or_across_a_restart() {
        let m = Metrics::new();
        let a = m.path("polycorn-relay", "A");
        a.connected();
        a.sent_bytes.inc_by(1000);
        let one = render(ADDR.parse().unwrap(), None, &snapshot(&m));
        assert!(!one.contains("rates over"), "{one}");
        assert_eq!(columns(&one, "polycorn-relay ")[5], "-", "{one}");
        let later = snapshot(&m);
        let restarted = snapshot(&Metrics::new());
        let mut fresh = restarted.clone();
        fresh.paths.insert(
            ("polycorn-relay".into(), "A".into()),
            PathRow {
                up: true,
                sent: 10.0,
                ..PathRow::default()
            },
        );
        let t = render(ADDR.parse().unwrap(), Some((&later, 1.0)), &fresh);
        assert_eq!(columns(&t, "polycorn-relay ")[5], "-", "{t}");
        assert!(render(ADDR.parse().unwrap(), None, &restarted).contains("no paths reported yet"));
    }

    /// `--check`: every path up is OK; a path down a WARNING; a relay below the minimum, a
    /// relay expected but absent, or no relay at all CRITICAL — and the line names which.
    #[test]
    fn check_judges_each_relay_against_the_minimum() {
        let m = Metrics::new();
        for (relay, path) in [("train-1", "a"), ("train-1", "b"), ("train-2", "a")] {
            m.path(relay, path).connected();
        }
        m.flows_open.set(7);
        let none: &[String] = &[];
        let (h, line) = judge(&snapshot(&m), 1, none, NOW);
        assert_eq!(h, Health::Ok, "{line}");
        assert_eq!(
            line,
            "train-1 2 of 2 paths up, train-2 1 of 1 paths up; passenger flows 7 open \
             | paths_up=3 paths=3 flows_open=7"
        );
        m.path("train-1", "b").disconnected();
        let (h, line) = judge(&snapshot(&m), 1, none, NOW);
        assert_eq!(h, Health::Warning, "{line}");
        assert!(line.starts_with("train-1 1 of 2 paths up; "), "{line}");
        let (h, line) = judge(&snapshot(&m), 2, none, NOW);
        assert_eq!(h, Health::Critical, "{line}");
        assert!(line.contains("train-1 1 of 2 paths up"), "{line}");
        let (h, line) = judge(&snapshot(&m), 1, &["train-3".to_string()], NOW);
        assert_eq!(h, Health::Critical, "{line}");
        assert!(
            line.starts_with("train-3 not reporting, train-1 1 of 2"),
            "{line}"
        );
        m.path("train-2", "a").disconnected();
        assert_eq!(judge(&snapshot(&m), 1, none, NOW).0, Health::Critical);
        let (h, line) = judge(&snapshot(&Metrics::new()), 1, none, NOW);
        assert_eq!(h, Health::Critical);
        assert!(line.starts_with("no paths reported"), "{line}");
    }

    /// `--check` on a daemon whose certificate ends soon: WARNING within 30 days, CRITICAL once
    /// it has ended, each naming the file; far from its end it changes nothing.
    #[test]
    fn check_warns_before_a_certificate_ends() {
        let m = Metrics::new();
        m.path("train-1", "a").connected();
        m.set_tls_not_after("cert", NOW + 400 * 86_400);
        m.set_tls_not_after("ca", NOW + 4000 * 86_400);
        let none: &[String] = &[];
        let (h, line) = judge(&snapshot(&m), 1, none, NOW);
        assert_eq!(h, Health::Ok, "{line}");
        m.set_tls_not_after("cert", NOW + 9 * 86_400 + 60);
        let (h, line) = judge(&snapshot(&m), 1, none, NOW);
        assert_eq!(h, Health::Warning, "{line}");
        assert!(
            line.starts_with("train-1 1 of 1 paths up, TLS cert ends in 9 days; "),
            "{line}"
        );
        m.set_tls_not_after("cert", NOW - 2 * 86_400);
        let (h, line) = judge(&snapshot(&m), 1, none, NOW);
        assert_eq!(h, Health::Critical, "{line}");
        assert!(line.contains("TLS cert ended 2 days ago"), "{line}");
        let text = render("127.0.0.1:9100".parse().unwrap(), None, &snapshot(&m));
        assert!(text.contains("TLS validity: ca "), "{text}");
        // On a proxy, each relay's certificate as it presented it; far from its end it is no
        // news, a few days before it a warning naming the relay.
        m.set_tls_not_after("cert", NOW + 400 * 86_400);
        m.set_relay_tls_not_after("train-1", NOW + 400 * 86_400);
        assert_eq!(judge(&snapshot(&m), 1, none, NOW).0, Health::Ok);
        m.set_relay_tls_not_after("train-1", NOW + 5 * 86_400 + 60);
        let (h, line) = judge(&snapshot(&m), 1, none, NOW);
        assert_eq!(h, Health::Warning, "{line}");
        assert!(
            line.contains("TLS certificate of relay train-1 ends in 5 days"),
            "{line}"
        );
        // A relay's gauge of the proxy's certificate reads 0 until one was presented.
        let relay = Metrics::new();
        relay.path("train-1", "a").connected();
        assert_eq!(judge(&snapshot(&relay), 1, none, NOW).0, Health::Ok);
        relay.proxy_tls_not_after.set(NOW - 86_400);
        let (h, line) = judge(&snapshot(&relay), 1, none, NOW);
        assert_eq!(h, Health::Critical, "{line}");
        assert!(
            line.contains("TLS proxy's certificate ended 1 day ago"),
            "{line}"
        );
    }

    /// `--json`: the table's content, rates null where the table shows `-`.
    #[test]
    fn json_has_what_the_table_has() {
        let m = Metrics::new();
        let a = m.path("train-1", "lte0");
        a.connected();
        a.set_rtt(Duration::from_millis(45));
        let b = m.path("train-1", "lte1");
        b.connected();
        b.set_rtt(Duration::from_millis(80));
        b.disconnected();
        m.flows_total.inc_by(4);
        let before = snapshot(&m);
        a.sent_bytes.inc_by(1_250_000);
        let after = snapshot(&m);
        let addr = ADDR.parse().unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&to_json(addr, Some((&before, 2.0)), &after)).unwrap();
        assert_eq!(v["endpoint"], "http://127.0.0.1:9100/metrics");
        assert_eq!(v["interval_s"], 2.0);
        assert_eq!(v["flows_total"], 4.0);
        assert_eq!(v["flows_held"], 0.0);
        assert_eq!(v["proxy_failovers"], 0.0);
        assert_eq!(v["session_renewals"], 0.0);
        assert_eq!(v["paths"][0]["path"], "lte0");
        assert_eq!(v["paths"][0]["rtt_ms"], 45.0);
        assert_eq!(v["paths"][0]["sent_mbps"], 5.0);
        assert_eq!(v["paths"][1]["up"], false);
        assert!(v["paths"][1]["rtt_ms"].is_null(), "{v}");
        assert_eq!(
            v["relays"],
            serde_json::json!([{"relay": "train-1", "paths_up": 1, "paths": 2}])
        );
        let one: serde_json::Value = serde_json::from_str(&to_json(addr, None, &after)).unwrap();
        assert!(one["interval_s"].is_null() && one["paths"][0]["sent_mbps"].is_null());
    }

    /// The daemon's end and version (`polycorn_build_info`) head the table and are in the
    /// JSON; a daemon without that family (an older one) shows neither.
    #[test]
    fn the_daemons_end_and_version_are_shown() {
        let addr = ADDR.parse().unwrap();
        let cur = snapshot(&Metrics::with_build("proxy", "0.1.0 (abc1234)"));
        let table = render(addr, None, &cur);
        assert!(
            table.starts_with(
                "polycorn status · proxy 0.1.0 (abc1234) · http://127.0.0.1:9100/metrics\n"
            ),
            "{table}"
        );
        let v: serde_json::Value = serde_json::from_str(&to_json(addr, None, &cur)).unwrap();
        assert_eq!(v["role"], "proxy");
        assert_eq!(v["version"], "0.1.0 (abc1234)");
        let old = snapshot(&Metrics::new());
        assert!(render(addr, None, &old).starts_with("polycorn status · http://"));
        let v: serde_json::Value = serde_json::from_str(&to_json(addr, None, &old)).unwrap();
        assert!(v["role"].is_null() && v["version"].is_null(), "{v}");
    }

    #[test]
    fn a_wildcard_listen_address_is_read_on_loopback() {
        assert_eq!(
            connectable("0.0.0.0:9100".parse().unwrap()),
            "127.0.0.1:9100".parse().unwrap()
        );
        assert_eq!(
            connectable("[::]:9100".parse().unwrap()),
            "[::1]:9100".parse().unwrap()
        );
        assert_eq!(
            connectable("10.0.0.1:9100".parse().unwrap()),
            "10.0.0.1:9100".parse().unwrap()
        );
    }
}
