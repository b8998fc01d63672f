//! Limits of the settings, and the sections and defaults both roles' files share.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most paths a relay may have (the scheduler's path-set width).
pub const MAX_PATHS: usize = polycorn_sched::MAX_PATHS;
/// Longest allowed `drain_s` (the systemd units give a stop 40 s: the drain, then up to 2 s
/// to tell the other end).
pub const MAX_DRAIN_S: u64 = 30;
/// Longest allowed `hold_time_s`.
pub const MAX_HOLD_TIME_S: u64 = 3600;
/// Longest allowed `idle_probe_s` (carriers' NATs forget idle TCP mappings after a few minutes
/// at the earliest; a minute between probes stays well inside).
pub const MAX_IDLE_PROBE_S: u64 = 60;
/// Default `idle_probe_s`.
pub const DEFAULT_IDLE_PROBE_S: u64 = 5;
/// Default `idle_probe_after_s`.
pub const DEFAULT_IDLE_PROBE_AFTER_S: u64 = 120;
/// Allowed `idle_probe_after_s`.
pub const IDLE_PROBE_AFTER_S: std::ops::RangeInclusive<u64> = 10..=3600;
/// Allowed `window_gain` besides 0 (off).
pub const WINDOW_GAIN: std::ops::RangeInclusive<f64> = 1.0..=16.0;
/// Longest allowed `connect_timeout_s`.
pub const MAX_CONNECT_TIMEOUT_S: u64 = 300;
/// Largest allowed flow or user window.
pub const MAX_WINDOW_BYTES: u64 = 1 << 30;
/// Largest allowed `max_flows`.
pub const MAX_FLOWS: u32 = 1 << 20;
/// Longest congestion control name (the kernel's `TCP_CA_NAME_MAX` is 16 with the NUL).
pub const MAX_CONGESTION_NAME_BYTES: usize = 15;
/// The congestion control of subflows and tunnels when `congestion` is left out, where the
/// host can give sockets it; where it cannot, the daemon warns and keeps the system's default.
/// BBR shortened downloads over the HSR trip model against CUBIC in the simulator and the
/// emulated bench (the manual's "Limits and defaults").
pub const DEFAULT_CONGESTION: &str = "bbr";
/// The `congestion` value that leaves every socket on the system's default
/// (`net.ipv4.tcp_congestion_control`).
pub const SYSTEM_CONGESTION: &str = "system";
/// Longest path name (it appears in logs and metric labels).
pub const MAX_PATH_NAME_BYTES: usize = 32;

/// The longest `[context] keep_days` and `[linkdb] keep_days` (a century: "keep everything" is leaving it out).
pub const MAX_KEEP_DAYS: u32 = 36_500;

/// The largest `[context] monitor_lag_ms` (and `linkdb import --monitor-lag-ms`).
pub const MAX_MONITOR_LAG_MS: u64 = 60_000;

/// `[tls]`: the PEM files of this end (see [`crate::tls`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// `ca`: the CA certificate both ends trust.
    pub ca: PathBuf,
    /// `cert`: this end's certificate.
    pub cert: PathBuf,
    /// `key`: this end's private key (keep it mode 0600).
    pub key: PathBuf,
}

/// `[limits]`: memory bounds.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// `flow_window_bytes`: per-flow receive window and send buffer (default 4 MiB).
    #[schemars(range(min = 1, max = MAX_WINDOW_BYTES))]
    pub flow_window_bytes: u64,
    /// `user_window_bytes`: cap over all flows of one passenger (default 16 MiB); at least
    /// `flow_window_bytes`.
    #[schemars(range(min = 1, max = MAX_WINDOW_BYTES))]
    pub user_window_bytes: u64,
    /// `max_flows`: passenger connections open at once (default 65536).
    #[schemars(range(min = 1, max = MAX_FLOWS))]
    pub max_flows: u32,
    /// `session_buffer_bytes`: most bytes one session (one relay's, at either end) holds in its
    /// flows' buffers together, received and not yet read plus sent and not yet acknowledged
    /// (default 2 GiB, 64 MiB..=64 GiB). Each open flow sets 320 KiB of it aside, so it also
    /// caps a session's open flows (6,553 by default): past it, new flows are refused (the
    /// passenger's connection is reset) until others end. What one stolen relay credential can
    /// make the proxy hold is bounded by it (times `proxy.max_sessions_per_relay` + 1).
    #[schemars(range(min = 64u64 << 20, max = 64u64 << 30))]
    pub session_buffer_bytes: u64,
    /// `passenger_max_flows`: (relay) connections one passenger address may have open at once
    /// (default 512; 0: no limit). Past it the passenger's new connections are refused (reset;
    /// SOCKS5: "not allowed"), counted in `polycorn_passenger_refusals_total{reason="flows"}`
    /// and logged once per 10 s; other passengers are unaffected.
    #[schemars(range(max = MAX_FLOWS))]
    pub passenger_max_flows: u32,
    /// `passenger_flow_rate`: (relay) new connections per second one passenger address may
    /// open, sustained (default 50; 0: no limit). DNS queries count as connections.
    pub passenger_flow_rate: u32,
    /// `passenger_flow_burst`: (relay) new connections one passenger may open at once before
    /// the rate applies (default 200).
    pub passenger_flow_burst: u32,
}

impl Default for Limits {
    fn default() -> Self {
        let p = crate::guard::PassengerLimits::default();
        Limits {
            flow_window_bytes: 4 << 20,
            user_window_bytes: 16 << 20,
            max_flows: 65_536,
            session_buffer_bytes: 2 << 30,
            passenger_max_flows: p.max_flows,
            passenger_flow_rate: p.rate as u32,
            passenger_flow_burst: p.burst,
        }
    }
}

impl Limits {
    /// The relay's per-passenger limits.
    pub fn passenger_limits(&self) -> crate::guard::PassengerLimits {
        crate::guard::PassengerLimits {
            max_flows: self.passenger_max_flows,
            rate: f64::from(self.passenger_flow_rate),
            burst: self.passenger_flow_burst,
        }
    }
}

/// `[metrics]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// `listen`: address of the Prometheus endpoint (no authentication; keep it on loopback or
    /// a management network). None: no endpoint.
    pub listen: Option<SocketAddr>,
}

/// Log output format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// `[log]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `format`: `text` (default) or `json`.
    pub format: LogFormat,
    /// `level`: a level (`trace`, `debug`, `info`, `warn`, `error`, `off`) or a comma-separated
    /// list of `level` and `target=level` directives (`info,polycorn_net::subflow=debug`).
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::Text,
            level: "info".into(),
        }
    }
}

/// How the relay carries passengers' connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RelayMode {
    /// polycorn: every flow multiplexed over all paths, scheduled by `relay.scheduler`.
    #[default]
    Polycorn,
    /// Baseline: one kernel MPTCP connection per passenger connection to the proxy's
    /// `tunnel_port`, subflows over every path.
    Mptcp,
    /// Baseline: one TCP connection per passenger connection over a single path; passengers
    /// are assigned to paths round robin (today's one-SIM-per-coach setup).
    Single,
}

/// `[linkdb]`: handover-failure prediction for HRSCH's HPR stage: on the proxy for the
/// downlink, on the relay for the uplink.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LinkDbConfig {
    /// `db`: handover database URL (`sqlite:PATH` or `postgres://…`), passed to LinkDB as is.
    /// None: no handover prediction on the downlink.
    pub db: Option<String>,
    /// `model`: `paper` (default: mean start of the serving cell's recorded failures), `risk` or
    /// `loctable`.
    pub model: String,
    /// `route`: only rides of this route are loaded (None: all).
    pub route: Option<String>,
    /// `carriers`: carrier name of each path index as LinkDB knows it (default `["A", "B"]`).
    pub carriers: Vec<String>,
    /// `track_origin`: `[lat, lon]` of position 0 of the line; GPS fixes are projected on the
    /// straight line from there along `track_heading_deg` (required with `db`).
    pub track_origin: Option<[f64; 2]>,
    /// `track_heading_deg`: heading of increasing position, degrees from north.
    pub track_heading_deg: f64,
    /// `keep_days` (proxy only): the nightly import (`linkdb import --proxy-config`) then
    /// deletes the route's rides that began more than this many days ago, so the history, and
    /// the time a predictor takes to build, stop growing. Rides of no known start (simulated,
    /// datasets) are kept. None: every ride is kept.
    #[schemars(range(min = 1, max = MAX_KEEP_DAYS))]
    pub keep_days: Option<u32>,
}

impl Default for LinkDbConfig {
    fn default() -> Self {
        LinkDbConfig {
            db: None,
            model: "paper".into(),
            route: None,
            carriers: vec!["A".into(), "B".into()],
            track_origin: None,
            track_heading_deg: 0.0,
            keep_days: None,
        }
    }
}

impl LinkDbConfig {
    /// The `[linkdb]` table of the TOML document `text` (the default when it has none), not
    /// validated; any other table is an error. `origin` names the text in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<LinkDbConfig, super::ConfigError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Document {
            #[serde(default)]
            linkdb: LinkDbConfig,
        }
        super::parse::parse::<Document>(text, origin).map(|d| d.linkdb)
    }
}

impl TlsFiles {
    /// `[tls]` naming `ca`, `cert` and `key`.
    pub fn new(
        ca: impl Into<PathBuf>,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> TlsFiles {
        TlsFiles {
            ca: ca.into(),
            cert: cert.into(),
            key: key.into(),
        }
    }
}

pub(super) fn window_gain(gain: f64) -> Option<f64> {
    (gain > 0.0).then_some(gain)
}

pub(super) fn default_window_gain() -> f64 {
    polycorn_sched::scheduler::DEFAULT_WINDOW_GAIN
}

pub(super) fn idle_probe(seconds: u64) -> Option<Duration> {
    (seconds > 0).then(|| Duration::from_secs(seconds))
}

pub(super) fn default_idle_probe_s() -> u64 {
    DEFAULT_IDLE_PROBE_S
}

pub(super) fn default_idle_probe_after_s() -> u64 {
    DEFAULT_IDLE_PROBE_AFTER_S
}

pub(super) fn default_scheduler() -> String {
    "polycorn".into()
}

pub(super) fn default_tunnel_port() -> u16 {
    7701
}

pub(super) fn default_hold_time_s() -> u64 {
    30
}

pub(super) fn default_connect_timeout_s() -> u64 {
    10
}

/// Whether a network interface of this name exists in the calling thread's network namespace.
pub(super) fn interface_exists(name: &str) -> bool {
    nix::net::if_::if_nametoindex(name).is_ok()
}
