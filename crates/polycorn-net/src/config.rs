//! Configuration files: one TOML file per role (`relay.toml`, `proxy.toml`), validated
//! completely at start.
//!
//! `polycorn config example relay|proxy` prints a commented example ([`RelayConfig::example`],
//! [`ProxyConfig::example`]); every key below appears there with its default.
//!
//! # Errors
//!
//! A bad file stops the process before anything is bound or installed, with one message that
//! names the file and the key:
//!
//! ```text
//! relay.toml: path[1].device: duplicate device "path0" (also used by path[0])
//! relay.toml:7:15: relay.hold_time_s: invalid type: string "30", expected u64
//! relay.toml:3:1: relay.shceduler: unknown field `shceduler`, expected one of `mode`, …
//! ```
//!
//! Messages from the TOML parser (syntax and type errors, unknown keys, missing keys) carry
//! `line:column`; checks made after parsing (ranges, duplicates, files) carry the key only.
//! Every table rejects unknown keys, so a typo is an error rather than a silently ignored
//! setting.
//!
//! # Files
//!
//! Relative file paths (`[tls]`, `context.replay`) are resolved against the directory of the
//! configuration file, not the working directory, so a unit file can start the process from
//! anywhere. Files in `[tls]` must exist when the configuration is loaded.
//!
//! # Naming
//!
//! The TOML array of tables is `[[path]]` (one entry reads naturally as "a path"); in Rust it
//! is [`RelayConfig::paths`].

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::policy::DestinationPolicy;
use crate::proxy_addr::ProxyAddr;

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
/// Longest path name (it appears in logs and metric labels).
pub const MAX_PATH_NAME_BYTES: usize = 32;

/// A configuration that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read: {cause}", file.display())]
    Read {
        /// The configuration file.
        file: PathBuf,
        /// The I/O error (in the message, so not also the error's source).
        cause: io::Error,
    },
    /// The TOML parser refused the file: syntax, a value of the wrong type, an unknown or a
    /// missing key.
    #[error("{origin}:{line}:{column}: {}{message}", key.as_deref().map(|k| format!("{k}: ")).unwrap_or_default())]
    Toml {
        /// The file's name as given.
        origin: String,
        /// 1-based line.
        line: usize,
        /// 1-based column (characters).
        column: usize,
        /// The key the error is about, when it can be told (`path[1].source`).
        key: Option<String>,
        /// What the parser said.
        message: String,
    },
    /// A value parsed but is not acceptable.
    #[error("{origin}: {key}: {message}")]
    Invalid {
        /// The file's name as given.
        origin: String,
        /// The key (`relay.scheduler`, `path[1].device`).
        key: String,
        /// What is wrong.
        message: String,
    },
}

impl ConfigError {
    /// The key the error is about, if known.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Read { .. } => None,
            ConfigError::Toml { key, .. } => key.as_deref(),
            ConfigError::Invalid { key, .. } => Some(key),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Shared sections
// ---------------------------------------------------------------------------------------------

/// `[tls]`: the PEM files of this end (see [`crate::tls`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// `flow_window_bytes`: per-flow receive window and send buffer (default 4 MiB).
    pub flow_window_bytes: u64,
    /// `user_window_bytes`: cap over all flows of one passenger (default 16 MiB); at least
    /// `flow_window_bytes`.
    pub user_window_bytes: u64,
    /// `max_flows`: passenger connections open at once (default 65536).
    pub max_flows: u32,
    /// `session_buffer_bytes`: most bytes one session (one relay's, at either end) holds in its
    /// flows' buffers together, received and not yet read plus sent and not yet acknowledged
    /// (default 2 GiB, 64 MiB..=64 GiB). Each open flow sets 320 KiB of it aside, so it also
    /// caps a session's open flows (6,553 by default): past it, new flows are refused (the
    /// passenger's connection is reset) until others end. What one stolen relay credential can
    /// make the proxy hold is bounded by it (times `proxy.max_sessions_per_relay` + 1).
    pub session_buffer_bytes: u64,
    /// `passenger_max_flows`: (relay) connections one passenger address may have open at once
    /// (default 512; 0: no limit). Past it the passenger's new connections are refused (reset;
    /// SOCKS5: "not allowed"), counted in `polycorn_passenger_refusals_total{reason="flows"}`
    /// and logged once per 10 s; other passengers are unaffected.
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// `listen`: address of the Prometheus endpoint (no authentication; keep it on loopback or
    /// a management network). None: no endpoint.
    pub listen: Option<SocketAddr>,
}

/// Log output format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// `[log]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
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

// ---------------------------------------------------------------------------------------------
// Relay
// ---------------------------------------------------------------------------------------------

/// How the relay carries passengers' connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
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

/// `[relay]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RelaySection {
    /// `mode`: `polycorn` (default), `mptcp` or `single`.
    #[serde(default)]
    pub mode: RelayMode,
    /// `scheduler`: uplink pipeline spec or preset (see `polycorn_sched::spec`); default
    /// `polycorn` (HRSCH whose ER also fires on a reported cell loss). Validated even when
    /// `mode` does not use it.
    #[serde(default = "default_scheduler")]
    pub scheduler: String,
    /// `proxy`: the proxy's subflow address (`IP:port`, or `host:port` resolved by the relay),
    /// for every path without its own `proxy`.
    pub proxy: ProxyAddr,
    /// `tunnel_port`: the proxy's port for the `mptcp` and `single` baselines (default 7701).
    #[serde(default = "default_tunnel_port")]
    pub tunnel_port: u16,
    /// `hold_time_s`: how long passenger connections survive an outage of every path
    /// (default 30, at most 3600).
    #[serde(default = "default_hold_time_s")]
    pub hold_time_s: u64,
    /// `congestion`: TCP congestion control of the subflows and baseline tunnels (`cubic`,
    /// `bbr`, `reno`, …; must be available in the kernel). None: the system default.
    #[serde(default)]
    pub congestion: Option<String>,
    /// `idle_refresh`: which idle subflows the relay replaces with a fresh connection
    /// (`collapsed`, default; `used`; `off`), see [`IdleRefresh`].
    #[serde(default)]
    pub idle_refresh: IdleRefresh,
    /// `slow_start_after_idle`: the relay sets `net.ipv4.tcp_slow_start_after_idle` of its
    /// network namespace to this at startup (uplink subflows keep their congestion window
    /// across idle gaps when false). None: the system's setting is left alone.
    #[serde(default)]
    pub slow_start_after_idle: Option<bool>,
    /// `rto_max_ms`: upper bound on the uplink subflows' retransmission timeout
    /// (`TCP_RTO_MAX_MS`, 1000..=120000; Linux 6.15 or later). None: the kernel's (120 s).
    #[serde(default)]
    pub rto_max_ms: Option<u32>,
    /// `drain_s`: on an orderly stop, how long the relay lets the passenger connections open at
    /// that moment finish before it closes the session and resets those left (default 0, at
    /// most [`MAX_DRAIN_S`]). It accepts no new connection meanwhile.
    #[serde(default)]
    pub drain_s: u64,
    /// `idle_probe_s`: once no passenger connection has been open for `idle_probe_after_s`,
    /// the relay probes each path this often instead of every 0.2 s (default 5, at most
    /// [`MAX_IDLE_PROBE_S`]; 0: every 0.2 s always). See
    /// [`polycorn_proto::SessionConfig::idle_ping_interval`].
    #[serde(default = "default_idle_probe_s")]
    pub idle_probe_s: u64,
    /// `idle_probe_after_s`: how long without a passenger connection before that (default 120,
    /// [`IDLE_PROBE_AFTER_S`]).
    #[serde(default = "default_idle_probe_after_s")]
    pub idle_probe_after_s: u64,
    /// `window_gain`: the uplink scheduler lets a path hold at most this many times the larger
    /// of its recent rate × smallest RTT and what it delivered in its last RTT, not more than
    /// its congestion window (default 2, [`WINDOW_GAIN`]; 0: the kernel's window as it is).
    /// See [`polycorn_sched::scheduler::SchedConfig::window_gain`].
    #[serde(default = "default_window_gain")]
    pub window_gain: f64,
}

/// Which idle subflows the relay replaces with a fresh connection (make before break), at most
/// once per 5 s per path, when the path is usable and nothing crossed it for a second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IdleRefresh {
    /// Only a subflow whose own slow-start threshold collapsed below 20 segments (a blackout
    /// hit it while it carried only probes).
    #[default]
    Collapsed,
    /// Also every subflow that carried 256 KB or more of passengers' downlink data since it
    /// came up: the proxy's congestion state for it (window, slow-start threshold) then
    /// describes a cell that is gone, and the fresh connection slow-starts to what the path
    /// carries now, as a new kernel MPTCP connection does.
    Used,
    /// Never.
    Off,
}

impl RelaySection {
    /// `hold_time_s` as a duration.
    pub fn hold_time(&self) -> Duration {
        Duration::from_secs(self.hold_time_s)
    }

    /// `drain_s` as a duration.
    pub fn drain(&self) -> Duration {
        Duration::from_secs(self.drain_s)
    }

    /// `idle_probe_s` as an interval (None for 0: no slower probing).
    pub fn idle_probe(&self) -> Option<Duration> {
        idle_probe(self.idle_probe_s)
    }

    /// `idle_probe_after_s` as a duration.
    pub fn idle_probe_after(&self) -> Duration {
        Duration::from_secs(self.idle_probe_after_s)
    }

    /// `window_gain` for the scheduler (None for 0: no cap).
    pub fn window_gain(&self) -> Option<f64> {
        window_gain(self.window_gain)
    }
}

fn window_gain(gain: f64) -> Option<f64> {
    (gain > 0.0).then_some(gain)
}

fn default_window_gain() -> f64 {
    polycorn_sched::scheduler::DEFAULT_WINDOW_GAIN
}

fn idle_probe(seconds: u64) -> Option<Duration> {
    (seconds > 0).then(|| Duration::from_secs(seconds))
}

fn default_idle_probe_s() -> u64 {
    DEFAULT_IDLE_PROBE_S
}

fn default_idle_probe_after_s() -> u64 {
    DEFAULT_IDLE_PROBE_AFTER_S
}

fn default_scheduler() -> String {
    "polycorn".into()
}

fn default_tunnel_port() -> u16 {
    7701
}

fn default_hold_time_s() -> u64 {
    30
}

fn default_connect_timeout_s() -> u64 {
    10
}

/// Whether a network interface of this name exists in the calling thread's network namespace.
fn interface_exists(name: &str) -> bool {
    nix::net::if_::if_nametoindex(name).is_ok()
}

/// One `[[path]]`: a cellular interface.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PathConfig {
    /// `name`: short unique name for logs and metrics (`[A-Za-z0-9_.-]`, at most 32 bytes).
    pub name: String,
    /// `device`: the network interface (`SO_BINDTODEVICE`).
    pub device: String,
    /// `source`: the interface's address the subflow binds to. Optional in mode `polycorn`:
    /// without it every connection attempt takes the interface's current address (a modem
    /// that gets a new address at every attach), preferring IPv4 when the proxy has an IPv4
    /// address, else IPv6.
    #[serde(default)]
    pub source: Option<IpAddr>,
    /// `proxy`: overrides `relay.proxy` for this path.
    #[serde(default)]
    pub proxy: Option<ProxyAddr>,
    /// `mtu`: the largest IP packet the carrier passes on this path, bytes. Set it when the
    /// carrier drops larger packets without saying so (a path-MTU black hole): the subflow's
    /// TCP then sends and asks for segments that fit (`TCP_MAXSEG`). Default: the interface's.
    /// The baselines' tunnels take it too (kernel MPTCP: the smallest of its paths').
    #[serde(default)]
    pub mtu: Option<u16>,
}

/// What the relay does with passengers' UDP.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UdpPolicy {
    /// Reject passengers' UDP except DNS, so QUIC falls back to TCP (which polycorn carries).
    #[default]
    Block,
    /// Leave UDP alone (it is routed, not carried by polycorn).
    Allow,
}

/// `[intercept]`: how passengers' connections reach the relay.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct InterceptConfig {
    /// `transparent`: IPv4 TPROXY listener.
    pub transparent: Option<SocketAddr>,
    /// `transparent6`: IPv6 TPROXY listener.
    pub transparent6: Option<SocketAddr>,
    /// `socks5`: explicit SOCKS5 listener.
    pub socks5: Option<SocketAddr>,
    /// `install_nft`: polycorn installs (and removes on exit) its nftables table and policy
    /// routing itself (default false: the operator provides them).
    pub install_nft: bool,
    /// `lan_device`: the passengers' interface; required when `install_nft` and a transparent
    /// listener are set.
    pub lan_device: Option<String>,
    /// `udp`: `block` (default) or `allow`.
    pub udp: UdpPolicy,
}

impl Default for InterceptConfig {
    fn default() -> Self {
        InterceptConfig {
            transparent: None,
            transparent6: None,
            socks5: None,
            install_nft: false,
            lan_device: None,
            udp: UdpPolicy::Block,
        }
    }
}

/// `[dns]`: a DNS service for passengers, answered by a resolver behind the proxy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DnsConfig {
    /// `listen`: UDP address passengers send queries to. None: no DNS service.
    pub listen: Option<SocketAddr>,
    /// `upstream`: the resolver, reached through the proxy over TCP (so the proxy's
    /// `[policy]` must allow it). Required with `listen`.
    pub upstream: Option<SocketAddr>,
}

/// Where train context (position, speed, serving cells) comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ContextSource {
    /// No context: handover prediction is off.
    #[default]
    None,
    /// A gpsd daemon at `context.gpsd`.
    Gpsd,
    /// A recorded context log at `context.replay` (testbed).
    Replay,
}

/// `[context]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContextConfig {
    /// `source`: `none` (default), `gpsd` or `replay`.
    pub source: ContextSource,
    /// `gpsd`: gpsd's address (default 127.0.0.1:2947).
    pub gpsd: SocketAddr,
    /// `replay`: the context log; required and must exist when `source = "replay"`.
    pub replay: Option<PathBuf>,
    /// `record`: a directory where the relay writes every fix it receives, with its modems'
    /// serving cells ([`crate::context::Recorder`]), for `polycorn linkdb import --ride-log`.
    /// None (default): nothing is recorded.
    pub record: Option<PathBuf>,
    /// `keep_days`: with `record`, the logs of this many finished UTC days are kept besides
    /// today's; older ones are removed when a log starts. None (default): every log is kept.
    pub keep_days: Option<u32>,
}

impl Default for ContextConfig {
    fn default() -> Self {
        ContextConfig {
            source: ContextSource::None,
            gpsd: SocketAddr::from(([127, 0, 0, 1], 2947)),
            replay: None,
            record: None,
            keep_days: None,
        }
    }
}

/// The longest `[context] keep_days` and `[linkdb] keep_days` (a century: "keep everything" is leaving it out).
pub const MAX_KEEP_DAYS: u32 = 36_500;

/// The largest `[context] monitor_lag_ms` (and `linkdb import --monitor-lag-ms`).
pub const MAX_MONITOR_LAG_MS: u64 = 60_000;

/// The proxy's `[context]`: what it keeps of the train context the relays send.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProxyContextConfig {
    /// `record`: a directory where the proxy writes every relay's fixes, with its modems'
    /// serving cells, one subdirectory per relay name ([`crate::proxy::RideRecording`]), for
    /// `polycorn linkdb import --ride-log`. None (default): nothing is recorded.
    pub record: Option<PathBuf>,
    /// `keep_days`: with `record`, each relay's logs of this many finished UTC days are kept
    /// besides today's; older ones are removed when one of its logs starts. Longer than the
    /// nightly import's interval, or logs go unread. None (default): every log is kept.
    pub keep_days: Option<u32>,
    /// `monitor_lag_ms`: how late the relays' modem monitors report a modem's cell, ms (0,
    /// the default: at once). `polycorn linkdb import --proxy-config` moves the recorded cells
    /// back by it before it infers the handovers.
    pub monitor_lag_ms: u64,
}

/// A relay's configuration (`relay.toml`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RelayConfig {
    /// `[relay]`.
    pub relay: RelaySection,
    /// `[[path]]`: 1 to 32 paths with unique names, devices and sources.
    #[serde(rename = "path", default)]
    pub paths: Vec<PathConfig>,
    /// `[intercept]`.
    #[serde(default)]
    pub intercept: InterceptConfig,
    /// `[dns]`.
    #[serde(default)]
    pub dns: DnsConfig,
    /// `[tls]`: required in `polycorn` mode.
    #[serde(default)]
    pub tls: Option<TlsFiles>,
    /// `[context]`.
    #[serde(default)]
    pub context: ContextConfig,
    /// `[linkdb]`: handover-failure prediction for the uplink scheduler (HPR on the relay).
    #[serde(default)]
    pub linkdb: LinkDbConfig,
    /// `[limits]`.
    #[serde(default)]
    pub limits: Limits,
    /// `[metrics]`.
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// `[log]`.
    #[serde(default)]
    pub log: LogConfig,
}

impl RelayConfig {
    /// What this host lacks for the configuration, as of now, each naming the key: a path's
    /// `device` or the `intercept.lan_device` that does not exist in this network namespace,
    /// a path's `source` address that is on none of its interfaces. Warnings, not errors: a
    /// modem may come up after the relay starts (the relay keeps connecting each path, and
    /// warns while one cannot), and the check may run on another machine than the train's.
    pub fn host_warnings(&self, file: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (i, p) in self.paths.iter().enumerate() {
            if !interface_exists(&p.device) {
                out.push(format!(
                    "{file}: path[{i}].device: no interface {:?} on this host (path {:?} cannot \
                     connect until it exists)",
                    p.device, p.name
                ));
            }
            let Some(source) = p.source else {
                continue;
            };
            if let Err(e) = std::net::UdpSocket::bind((source, 0)) {
                if e.kind() == io::ErrorKind::AddrNotAvailable {
                    out.push(format!(
                        "{file}: path[{i}].source: {source} is not an address of this host (path \
                         {:?} cannot connect until it is)",
                        p.name
                    ));
                }
            }
        }
        // Host names: does each resolve here, to an address of each path's family?
        let mut looked_up: BTreeMap<ProxyAddr, Result<Vec<SocketAddr>, String>> = BTreeMap::new();
        for (i, p) in self.paths.iter().enumerate() {
            let proxy = self.proxy_for(p);
            if proxy.ip().is_some() {
                continue;
            }
            let key = if p.proxy.is_some() {
                format!("path[{i}].proxy")
            } else {
                "relay.proxy".to_string()
            };
            let first = !looked_up.contains_key(&proxy);
            let answer = looked_up.entry(proxy.clone()).or_insert_with(|| {
                crate::proxy_addr::lookup_blocking(&proxy).map_err(|e| e.to_string())
            });
            match answer {
                Err(e) if first => out.push(format!(
                    "{file}: {key}: {proxy} does not resolve on this host now ({e}); the relay \
                     keeps trying"
                )),
                Err(_) => {}
                Ok(addrs) => {
                    let Some(source) = p.source else { continue };
                    if !addrs.iter().any(|a| a.is_ipv4() == source.is_ipv4()) {
                        let family = if source.is_ipv4() { "IPv4" } else { "IPv6" };
                        out.push(format!(
                            "{file}: {key}: {proxy} has no {family} address for path {:?} (source \
                             {source})",
                            p.name
                        ));
                    }
                }
            }
        }
        if let Some(dev) = &self.intercept.lan_device {
            if !interface_exists(dev) {
                out.push(format!(
                    "{file}: intercept.lan_device: no interface {dev:?} on this host \
                     (passengers' traffic cannot be intercepted until it exists)"
                ));
            }
        }
        out
    }

    /// Reads and validates `path`; relative file names in it resolve against its directory.
    pub fn load(path: &Path) -> Result<RelayConfig, ConfigError> {
        let (text, base) = read(path)?;
        Self::from_str(&text, &path.display().to_string(), &base)
    }

    /// Parses and validates `text`; `origin` names it in errors, relative file names resolve
    /// against `base_dir`.
    #[allow(clippy::should_implement_trait)]
    pub fn from_str(text: &str, origin: &str, base_dir: &Path) -> Result<RelayConfig, ConfigError> {
        let mut config: RelayConfig = parse(text, origin)?;
        let mut v = Validator { origin };
        config.validate(&mut v, base_dir)?;
        Ok(config)
    }

    /// The proxy address path `path` connects to: its own `proxy` or `relay.proxy`.
    pub fn proxy_for(&self, path: &PathConfig) -> ProxyAddr {
        path.proxy
            .clone()
            .unwrap_or_else(|| self.relay.proxy.clone())
    }

    /// What `config check` tells about each proxy host name that resolves here: its addresses
    /// and, where it lists several of one family, the failover between them.
    pub fn proxy_notes(&self) -> Vec<String> {
        let mut names: Vec<ProxyAddr> = self
            .paths
            .iter()
            .map(|p| self.proxy_for(p))
            .filter(|a| a.ip().is_none())
            .collect();
        names.sort();
        names.dedup();
        let after =
            Duration::from_secs(self.relay.hold_time_s).max(crate::proxy_addr::MIN_FAILOVER_AFTER);
        names
            .into_iter()
            .filter_map(|name| {
                let addrs = crate::proxy_addr::lookup_blocking(&name).ok()?;
                Some(describe_proxy_name(&name, &addrs, after))
            })
            .collect()
    }

    /// These settings as a `relay.toml` (no comments) that [`RelayConfig::from_str`] reads
    /// back as they are.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a relay configuration is TOML")
    }

    /// A commented example `relay.toml`.
    pub fn example() -> &'static str {
        RELAY_EXAMPLE
    }

    /// The example's settings, parsed but not validated (the files it names need not exist
    /// here): what units printed for the example are derived from.
    pub fn example_settings() -> RelayConfig {
        parse(RELAY_EXAMPLE, "the example relay.toml").expect("the example relay.toml parses")
    }

    fn validate(&mut self, v: &mut Validator<'_>, base: &Path) -> Result<(), ConfigError> {
        v.scheduler("relay.scheduler", &self.relay.scheduler)?;
        v.proxy("relay.proxy", &self.relay.proxy, self.relay.mode)?;
        if self.relay.tunnel_port == 0 {
            return Err(v.invalid("relay.tunnel_port", "must not be 0"));
        }
        v.hold_time("relay.hold_time_s", self.relay.hold_time_s)?;
        v.drain("relay.drain_s", self.relay.drain_s)?;
        v.idle_probe("relay.idle_probe_s", self.relay.idle_probe_s)?;
        v.idle_probe_after("relay.idle_probe_after_s", self.relay.idle_probe_after_s)?;
        v.window_gain("relay.window_gain", self.relay.window_gain)?;
        v.congestion("relay.congestion", self.relay.congestion.as_deref())?;
        v.rto_max("relay.rto_max_ms", self.relay.rto_max_ms)?;

        if self.paths.is_empty() {
            return Err(v.invalid(
                "path",
                "no [[path]] entries; the relay needs at least one path",
            ));
        }
        if self.paths.len() > MAX_PATHS {
            return Err(v.invalid(
                "path",
                format!(
                    "{} paths; at most {MAX_PATHS} are supported",
                    self.paths.len()
                ),
            ));
        }
        let mut names = BTreeMap::new();
        let mut devices = BTreeMap::new();
        let mut sources = BTreeMap::new();
        for (i, p) in self.paths.iter().enumerate() {
            let key = |field: &str| format!("path[{i}].{field}");
            path_name(&p.name).map_err(|m| v.invalid(key("name"), m))?;
            device_name(&p.device).map_err(|m| v.invalid(key("device"), m))?;
            match p.source {
                Some(s) if s.is_unspecified() || s.is_multicast() => {
                    return Err(v.invalid(
                        key("source"),
                        format!("{s} is not a unicast address of the path's interface"),
                    ));
                }
                None if self.relay.mode != RelayMode::Polycorn => {
                    return Err(v.invalid(
                        key("source"),
                        "required in the baseline modes (mptcp, single); only mode \"polycorn\" \
                         takes the interface's current address",
                    ));
                }
                _ => {}
            }
            if let Some(proxy) = &p.proxy {
                v.proxy(&key("proxy"), proxy, self.relay.mode)?;
            }
            if let Some(mtu) = p.mtu {
                // IPv6 needs 1280 (RFC 8200); IPv4 hosts must take 576 (RFC 791).
                let v6 = p.source.is_some_and(|s| s.is_ipv6());
                let min = if v6 { 1280 } else { 576 };
                if !(min..=9000).contains(&mtu) {
                    return Err(v.invalid(
                        key("mtu"),
                        format!(
                            "{mtu}: expected {min} to 9000 bytes for an {} path",
                            if v6 { "IPv6" } else { "IPv4" }
                        ),
                    ));
                }
            }
            if let Some(j) = names.insert(p.name.clone(), i) {
                return Err(v.invalid(
                    key("name"),
                    format!("duplicate name {:?} (also used by path[{j}])", p.name),
                ));
            }
            if let Some(j) = devices.insert(p.device.clone(), i) {
                return Err(v.invalid(
                    key("device"),
                    format!("duplicate device {:?} (also used by path[{j}])", p.device),
                ));
            }
            if let Some(j) = p.source.and_then(|s| sources.insert(s, i)) {
                return Err(v.invalid(
                    key("source"),
                    format!(
                        "duplicate source {} (also used by path[{j}])",
                        p.source.expect("inserted")
                    ),
                ));
            }
        }

        let ic = &self.intercept;
        if let Some(a) = ic.transparent {
            if !a.is_ipv4() {
                return Err(v.invalid(
                    "intercept.transparent",
                    format!("{a} is IPv6; put IPv6 listeners in intercept.transparent6"),
                ));
            }
        }
        if let Some(a) = ic.transparent6 {
            if !a.is_ipv6() {
                return Err(v.invalid(
                    "intercept.transparent6",
                    format!("{a} is IPv4; put IPv4 listeners in intercept.transparent"),
                ));
            }
        }
        if ic.transparent.is_none() && ic.transparent6.is_none() && ic.socks5.is_none() {
            return Err(v.invalid(
                "intercept",
                "no listener; set intercept.transparent, intercept.transparent6 or \
                 intercept.socks5",
            ));
        }
        if let Some(dev) = &ic.lan_device {
            device_name(dev).map_err(|m| v.invalid("intercept.lan_device", m))?;
        } else if ic.install_nft && (ic.transparent.is_some() || ic.transparent6.is_some()) {
            return Err(v.invalid(
                "intercept.lan_device",
                "required when install_nft = true and a transparent listener is set (the \
                 passengers' interface the TPROXY rule matches)",
            ));
        }
        v.distinct_listeners(&[
            ("intercept.transparent", ic.transparent),
            ("intercept.transparent6", ic.transparent6),
            ("intercept.socks5", ic.socks5),
            ("metrics.listen", self.metrics.listen),
        ])?;

        if self.dns.listen.is_some() {
            match self.dns.upstream {
                None => {
                    return Err(v.invalid(
                        "dns.upstream",
                        "required when dns.listen is set (the resolver behind the proxy)",
                    ))
                }
                Some(up) => v.remote("dns.upstream", up)?,
            }
        }

        match &mut self.tls {
            Some(tls) => v.tls_files(tls, base)?,
            None if self.relay.mode == RelayMode::Polycorn => {
                return Err(v.invalid(
                    "tls",
                    "missing [tls] section; mode \"polycorn\" needs ca, cert and key (see \
                     polycorn_net::tls::generate)",
                ))
            }
            None => {}
        }

        let ctx = &mut self.context;
        if let Some(replay) = &mut ctx.replay {
            *replay = resolve(base, replay);
        }
        if ctx.source == ContextSource::Replay {
            match &ctx.replay {
                None => {
                    return Err(v.invalid(
                        "context.replay",
                        "required when context.source = \"replay\"",
                    ))
                }
                Some(file) => v.existing_file("context.replay", file)?,
            }
        }
        if let Some(record) = &mut ctx.record {
            *record = resolve(base, record);
            if ctx.source == ContextSource::None {
                return Err(v.invalid(
                    "context.record",
                    "nothing to record without context.source (gpsd or replay)",
                ));
            }
            v.record_dir("context.record", record)?;
        }
        v.keep_days(ctx.keep_days, ctx.record.is_some())?;
        if self.linkdb.keep_days.is_some() {
            return Err(v.invalid(
                "linkdb.keep_days",
                "the proxy's nightly import prunes the history (proxy.toml), or run `polycorn \
                 linkdb prune`; remove it here",
            ));
        }
        v.linkdb(&self.linkdb)?;
        if self.linkdb.db.is_some() && ctx.source == ContextSource::None {
            return Err(v.invalid(
                "linkdb.db",
                "the uplink predictor follows the train's context; set context.source too",
            ));
        }

        v.limits(&self.limits)?;
        v.log(&self.log)
    }
}

// ---------------------------------------------------------------------------------------------
// Proxy
// ---------------------------------------------------------------------------------------------

/// `[proxy]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProxySection {
    /// `listen`: subflow (TLS) address, or a list of addresses (default 0.0.0.0:7700).
    #[serde(deserialize_with = "one_or_many_addrs")]
    pub listen: Vec<SocketAddr>,
    /// `tunnel_listen`: address for the baselines' per-connection tunnels (kernel MPTCP,
    /// single path). None: baselines are not served.
    pub tunnel_listen: Option<SocketAddr>,
    /// `tunnel_peers`: source networks (CIDRs) allowed to open baseline tunnels; required
    /// with `tunnel_listen`, because tunnels carry no TLS and no client certificate.
    pub tunnel_peers: Vec<IpNet>,
    /// `scheduler`: downlink pipeline spec or preset (default `polycorn`).
    pub scheduler: String,
    /// `hold_time_s`: how long a relay's flows survive while it has no subflow (default 30, at
    /// most 3600).
    pub hold_time_s: u64,
    /// `connect_timeout_s`: limit on connecting to a server (default 10, 1..=300).
    pub connect_timeout_s: u64,
    /// `congestion`: TCP congestion control of accepted subflows and tunnels. None: the system
    /// default.
    pub congestion: Option<String>,
    /// `slow_start_after_idle`: the proxy sets `net.ipv4.tcp_slow_start_after_idle` of its
    /// network namespace to this at startup (downlink subflows keep their congestion window
    /// across idle gaps when false). None: the system's setting is left alone.
    pub slow_start_after_idle: Option<bool>,
    /// `rto_max_ms`: upper bound on the downlink subflows' retransmission timeout
    /// (`TCP_RTO_MAX_MS`, 1000..=120000; Linux 6.15 or later). None: the kernel's (120 s).
    pub rto_max_ms: Option<u32>,
    /// `revoked_relays`: relay names (their certificates' common names, see
    /// [`crate::tls::issue_relay`]) whose subflows are refused in the TLS handshake (alert
    /// `certificate_revoked`).
    pub revoked_relays: Vec<String>,
    /// `drain_s`: on an orderly stop, how long the proxy lets the flows open at that moment
    /// finish before it closes every session and resets those left (default 0, at most
    /// [`MAX_DRAIN_S`]). Relays are told and hold the passenger connections they accept
    /// meanwhile for the next proxy (a relay from before 2026-11-29 opens them here; they are
    /// carried, not waited for).
    pub drain_s: u64,
    /// `idle_probe_s`: once a relay's session has had no flow open for `idle_probe_after_s`,
    /// the proxy probes its paths this often instead of every 0.2 s (default 5, at most
    /// [`MAX_IDLE_PROBE_S`]; 0: every 0.2 s always).
    pub idle_probe_s: u64,
    /// `idle_probe_after_s`: how long without a flow before that (default 120,
    /// [`IDLE_PROBE_AFTER_S`]).
    pub idle_probe_after_s: u64,
    /// `window_gain`: as the relay's, for the downlink scheduler (default 2, [`WINDOW_GAIN`];
    /// 0: the kernel's window as it is).
    pub window_gain: f64,
    /// `ask_refresh`: when a retransmission timeout cut the slow-start threshold of an idle
    /// downlink subflow, ask the relay (protocol 4 or later) for a fresh connection on that
    /// path, so the next download slow-starts (default true).
    pub ask_refresh: bool,
    /// `max_sessions_per_relay`: live sessions one relay name (certificate) may hold at once,
    /// besides the one replacing them when the relay restarts (default 1, 1..=64). Further
    /// sessions are refused, so one stolen credential cannot open sessions without end.
    pub max_sessions_per_relay: u32,
}

impl Default for ProxySection {
    fn default() -> Self {
        ProxySection {
            listen: vec![SocketAddr::from(([0, 0, 0, 0], 7700))],
            tunnel_listen: None,
            tunnel_peers: Vec::new(),
            scheduler: default_scheduler(),
            hold_time_s: default_hold_time_s(),
            connect_timeout_s: default_connect_timeout_s(),
            congestion: None,
            slow_start_after_idle: None,
            rto_max_ms: None,
            revoked_relays: Vec::new(),
            drain_s: 0,
            idle_probe_s: DEFAULT_IDLE_PROBE_S,
            idle_probe_after_s: DEFAULT_IDLE_PROBE_AFTER_S,
            window_gain: default_window_gain(),
            ask_refresh: true,
            max_sessions_per_relay: 1,
        }
    }
}

impl ProxySection {
    /// `hold_time_s` as a duration.
    pub fn hold_time(&self) -> Duration {
        Duration::from_secs(self.hold_time_s)
    }

    /// `drain_s` as a duration.
    pub fn drain(&self) -> Duration {
        Duration::from_secs(self.drain_s)
    }

    /// `connect_timeout_s` as a duration.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_secs(self.connect_timeout_s)
    }

    /// `idle_probe_s` as an interval (None for 0: no slower probing).
    pub fn idle_probe(&self) -> Option<Duration> {
        idle_probe(self.idle_probe_s)
    }

    /// `idle_probe_after_s` as a duration.
    pub fn idle_probe_after(&self) -> Duration {
        Duration::from_secs(self.idle_probe_after_s)
    }

    /// `window_gain` for the scheduler (None for 0: no cap).
    pub fn window_gain(&self) -> Option<f64> {
        window_gain(self.window_gain)
    }
}

/// `[policy]`: which destinations the proxy connects to (see [`crate::policy`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// `allow`: CIDRs. Empty: every public address. Entries inside a special range
    /// (private, loopback, …) open that part of it.
    pub allow: Vec<IpNet>,
    /// `deny`: CIDRs refused whatever else says.
    pub deny: Vec<IpNet>,
    /// `allow_private`: open private, CGNAT, link-local and ULA space (not loopback).
    pub allow_private: bool,
}

impl PolicyConfig {
    /// The policy these settings describe.
    pub fn destination_policy(&self) -> DestinationPolicy {
        DestinationPolicy::new(&self.allow, &self.deny, self.allow_private)
    }
}

/// `[linkdb]`: handover-failure prediction for HRSCH's HPR stage: on the proxy for the
/// downlink, on the relay for the uplink.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
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

/// A proxy's configuration (`proxy.toml`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// `[proxy]`.
    #[serde(default)]
    pub proxy: ProxySection,
    /// `[tls]`: required.
    pub tls: TlsFiles,
    /// `[policy]`.
    #[serde(default)]
    pub policy: PolicyConfig,
    /// `[context]`.
    #[serde(default)]
    pub context: ProxyContextConfig,
    /// `[linkdb]`.
    #[serde(default)]
    pub linkdb: LinkDbConfig,
    /// `[limits]`.
    #[serde(default)]
    pub limits: Limits,
    /// `[metrics]`.
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// `[log]`.
    #[serde(default)]
    pub log: LogConfig,
}

impl ProxyConfig {
    /// Reads and validates `path`; relative file names in it resolve against its directory.
    pub fn load(path: &Path) -> Result<ProxyConfig, ConfigError> {
        let (text, base) = read(path)?;
        Self::from_str(&text, &path.display().to_string(), &base)
    }

    /// Parses and validates `text`; `origin` names it in errors, relative file names resolve
    /// against `base_dir`.
    #[allow(clippy::should_implement_trait)]
    pub fn from_str(text: &str, origin: &str, base_dir: &Path) -> Result<ProxyConfig, ConfigError> {
        let mut config: ProxyConfig = parse(text, origin)?;
        let mut v = Validator { origin };
        config.validate(&mut v, base_dir)?;
        Ok(config)
    }

    /// These settings as a `proxy.toml` (no comments) that [`ProxyConfig::from_str`] reads
    /// back as they are.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a proxy configuration is TOML")
    }

    /// A commented example `proxy.toml`.
    pub fn example() -> &'static str {
        PROXY_EXAMPLE
    }

    /// The example's settings, parsed but not validated (the files it names need not exist
    /// here): what units printed for the example are derived from.
    pub fn example_settings() -> ProxyConfig {
        parse(PROXY_EXAMPLE, "the example proxy.toml").expect("the example proxy.toml parses")
    }

    fn validate(&mut self, v: &mut Validator<'_>, base: &Path) -> Result<(), ConfigError> {
        let p = &self.proxy;
        if p.listen.is_empty() {
            return Err(v.invalid("proxy.listen", "no address; give one or a list"));
        }
        let mut listeners: Vec<(String, Option<SocketAddr>)> = p
            .listen
            .iter()
            .enumerate()
            .map(|(i, a)| (format!("proxy.listen[{i}]"), Some(*a)))
            .collect();
        listeners.push(("proxy.tunnel_listen".into(), p.tunnel_listen));
        listeners.push(("metrics.listen".into(), self.metrics.listen));
        let named: Vec<(&str, Option<SocketAddr>)> =
            listeners.iter().map(|(k, a)| (k.as_str(), *a)).collect();
        v.distinct_listeners(&named)?;
        v.scheduler("proxy.scheduler", &p.scheduler)?;
        v.hold_time("proxy.hold_time_s", p.hold_time_s)?;
        v.drain("proxy.drain_s", p.drain_s)?;
        v.idle_probe("proxy.idle_probe_s", p.idle_probe_s)?;
        v.idle_probe_after("proxy.idle_probe_after_s", p.idle_probe_after_s)?;
        v.window_gain("proxy.window_gain", p.window_gain)?;
        v.congestion("proxy.congestion", p.congestion.as_deref())?;
        v.rto_max("proxy.rto_max_ms", p.rto_max_ms)?;
        if p.tunnel_listen.is_some() && p.tunnel_peers.is_empty() {
            return Err(v.invalid(
                "proxy.tunnel_peers",
                "required when proxy.tunnel_listen is set: baseline tunnels are not \
                 authenticated, so list the relays' source networks (e.g. [\"10.100.0.0/16\"])",
            ));
        }
        if !(1..=MAX_CONNECT_TIMEOUT_S).contains(&p.connect_timeout_s) {
            return Err(v.invalid(
                "proxy.connect_timeout_s",
                format!(
                    "{} is out of range 1..={MAX_CONNECT_TIMEOUT_S}",
                    p.connect_timeout_s
                ),
            ));
        }
        if !(1..=64).contains(&p.max_sessions_per_relay) {
            return Err(v.invalid(
                "proxy.max_sessions_per_relay",
                format!("{} is out of range 1..=64", p.max_sessions_per_relay),
            ));
        }
        for (i, name) in p.revoked_relays.iter().enumerate() {
            crate::tls::check_relay_name(name).map_err(|e| {
                let why = match e {
                    crate::tls::TlsError::InvalidRelayName { why, .. } => why,
                    _ => "not a relay name",
                };
                v.invalid(
                    format!("proxy.revoked_relays[{i}]"),
                    format!("\"{name}\": {why} (relay names are what `polycorn tls relay --name` accepts)"),
                )
            })?;
        }
        v.tls_files(&mut self.tls, base)?;
        for (list, nets) in [
            ("proxy.tunnel_peers", &self.proxy.tunnel_peers),
            ("policy.allow", &self.policy.allow),
            ("policy.deny", &self.policy.deny),
        ] {
            for (i, net) in nets.iter().enumerate() {
                if net.trunc() != *net {
                    return Err(v.invalid(
                        format!("{list}[{i}]"),
                        format!(
                            "\"{net}\" has host bits set; write \"{}\" (or \"{}/{}\" for the \
                             single address)",
                            net.trunc(),
                            net.addr(),
                            net.max_prefix_len()
                        ),
                    ));
                }
            }
        }
        if let Some(record) = &mut self.context.record {
            *record = resolve(base, record);
            v.record_dir("context.record", record)?;
        }
        v.keep_days(self.context.keep_days, self.context.record.is_some())?;
        if self.context.monitor_lag_ms > MAX_MONITOR_LAG_MS {
            return Err(v.invalid(
                "context.monitor_lag_ms",
                format!(
                    "{} ms: at most {MAX_MONITOR_LAG_MS} ms (a modem monitor a minute late \
                     says nothing of where a handover was)",
                    self.context.monitor_lag_ms
                ),
            ));
        }
        v.linkdb(&self.linkdb)?;
        v.limits(&self.limits)?;
        v.log(&self.log)
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing and validation helpers
// ---------------------------------------------------------------------------------------------

fn read(path: &Path) -> Result<(String, PathBuf), ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|cause| ConfigError::Read {
        file: path.to_path_buf(),
        cause,
    })?;
    let base = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((text, base))
}

fn resolve(base: &Path, file: &Path) -> PathBuf {
    if file.is_relative() {
        base.join(file)
    } else {
        file.to_path_buf()
    }
}

fn parse<T: for<'de> Deserialize<'de>>(text: &str, origin: &str) -> Result<T, ConfigError> {
    toml::from_str(text).map_err(|e| {
        let offset = e.span().map(|s| s.start).unwrap_or(0);
        let (line, column) = line_column(text, offset);
        let mut key = e.span().and_then(|s| locate_key(text, s));
        let message = e.message().trim_end().replace('\n', "; ");
        // "missing field `x`" is reported on the table; name the key that is missing.
        if let Some(field) = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.strip_suffix('`'))
        {
            key = Some(match key {
                Some(table) => join(&table, field),
                None => field.to_owned(),
            });
        }
        let message = hint(&message, key.as_deref());
        ConfigError::Toml {
            origin: origin.to_owned(),
            line,
            column,
            key,
            message,
        }
    })
}

/// Adds the expected form to the standard library's terse address parse errors (`ipnet`
/// reuses the IP address message for CIDRs, so the key tells them apart).
fn hint(message: &str, key: Option<&str>) -> String {
    let cidr = key.is_some_and(|k| k.starts_with("policy.") || k.starts_with("proxy.tunnel_peers"));
    let extra = match message {
        "invalid socket address syntax" => {
            " (expected IP:PORT such as \"10.0.2.1:7700\" or \"[2001:db8::1]:7700\"; host names \
             are not resolved)"
        }
        "invalid IP address syntax" if cidr => {
            " (expected a CIDR such as \"10.0.0.0/8\" or \"2001:db8::/32\")"
        }
        "invalid IP address syntax" => " (expected an IPv4 or IPv6 address, no port)",
        _ => "",
    };
    format!("{message}{extra}")
}

/// 1-based line and column (in characters) of byte `offset`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

/// The dotted key path (`path[1].device`) whose key or value is the narrowest span containing
/// the start of `span`, found by re-parsing `text` with spans kept.
fn locate_key(text: &str, span: Range<usize>) -> Option<String> {
    let doc = toml_edit::ImDocument::parse(text).ok()?;
    let mut best: Option<(usize, String)> = None;
    walk_table(doc.as_table(), "", span.start, &mut best);
    best.map(|(_, path)| path)
}

fn consider(
    span: Option<Range<usize>>,
    offset: usize,
    path: &str,
    best: &mut Option<(usize, String)>,
) {
    let Some(s) = span else { return };
    if s.start <= offset && offset < s.end.max(s.start + 1) {
        let width = s.end - s.start;
        if best.as_ref().is_none_or(|(w, _)| width <= *w) {
            *best = Some((width, path.to_owned()));
        }
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

fn walk_table(
    table: &dyn toml_edit::TableLike,
    prefix: &str,
    offset: usize,
    best: &mut Option<(usize, String)>,
) {
    for (name, item) in table.iter() {
        let path = join(prefix, name);
        if let Some((key, _)) = table.get_key_value(name) {
            consider(key.span(), offset, &path, best);
        }
        consider(item.span(), offset, &path, best);
        match item {
            toml_edit::Item::Table(t) => walk_table(t, &path, offset, best),
            toml_edit::Item::ArrayOfTables(a) => {
                for (i, t) in a.iter().enumerate() {
                    let p = format!("{path}[{i}]");
                    consider(t.span(), offset, &p, best);
                    walk_table(t, &p, offset, best);
                }
            }
            toml_edit::Item::Value(v) => walk_value(v, &path, offset, best),
            toml_edit::Item::None => {}
        }
    }
}

fn walk_value(
    value: &toml_edit::Value,
    path: &str,
    offset: usize,
    best: &mut Option<(usize, String)>,
) {
    match value {
        toml_edit::Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                let p = format!("{path}[{i}]");
                consider(v.span(), offset, &p, best);
                walk_value(v, &p, offset, best);
            }
        }
        toml_edit::Value::InlineTable(t) => walk_table(t, path, offset, best),
        _ => {}
    }
}

/// `listen` as one address or a list of addresses.
fn one_or_many_addrs<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<SocketAddr>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Vec<SocketAddr>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an address \"IP:PORT\" or a list of them")
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
            s.parse()
                .map(|a| vec![a])
                .map_err(|_| E::custom(format!("{s:?}: invalid socket address syntax")))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(a) = seq.next_element::<SocketAddr>()? {
                out.push(a);
            }
            Ok(out)
        }
    }
    d.deserialize_any(V)
}

/// A path name: `[A-Za-z0-9_.-]`, 1 to 32 bytes.
fn path_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_PATH_NAME_BYTES {
        return Err(format!(
            "{name:?} must be 1 to {MAX_PATH_NAME_BYTES} characters"
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(format!(
            "{name:?} contains {c:?}; use letters, digits, '_', '.' and '-'"
        ));
    }
    Ok(())
}

/// A Linux interface name: 1 to 15 bytes, no '/', ':' or whitespace, not "." or "..".
fn device_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 15 {
        return Err(format!("{name:?} is not an interface name (1 to 15 bytes)"));
    }
    if name == "."
        || name == ".."
        || name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace())
    {
        return Err(format!(
            "{name:?} is not an interface name (no '/', ':' or spaces)"
        ));
    }
    Ok(())
}

/// One validation run over one file: builds errors naming the file.
struct Validator<'a> {
    origin: &'a str,
}

impl Validator<'_> {
    fn invalid(&self, key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            origin: self.origin.to_owned(),
            key: key.into(),
            message: message.into(),
        }
    }

    fn scheduler(&self, key: &str, spec: &str) -> Result<(), ConfigError> {
        polycorn_sched::Pipeline::from_spec(spec)
            .map(|_| ())
            .map_err(|e| self.invalid(key, e.to_string()))
    }

    /// An address to connect to: a real host and port.
    /// A relay's proxy: a literal address must be one to connect to; a host name needs the
    /// polycorn mode (the baselines take addresses, as their operators configure them).
    fn proxy(&self, key: &str, proxy: &ProxyAddr, mode: RelayMode) -> Result<(), ConfigError> {
        match proxy {
            ProxyAddr::Ip(a) => self.remote(key, *a),
            ProxyAddr::Name { .. } if mode != RelayMode::Polycorn => Err(self.invalid(
                key,
                format!(
                    "{proxy}: mode {:?} needs an IP address (host names are resolved in \
                     mode \"polycorn\" only)",
                    format!("{mode:?}").to_lowercase()
                ),
            )),
            ProxyAddr::Name { .. } => Ok(()),
        }
    }

    fn remote(&self, key: &str, addr: SocketAddr) -> Result<(), ConfigError> {
        if addr.ip().is_unspecified() || addr.ip().is_multicast() {
            return Err(self.invalid(key, format!("{addr} is not an address to connect to")));
        }
        if addr.port() == 0 {
            return Err(self.invalid(key, format!("{addr}: port must not be 0")));
        }
        Ok(())
    }

    fn hold_time(&self, key: &str, seconds: u64) -> Result<(), ConfigError> {
        if seconds > MAX_HOLD_TIME_S {
            return Err(self.invalid(
                key,
                format!("{seconds} is out of range 0..={MAX_HOLD_TIME_S}"),
            ));
        }
        Ok(())
    }

    fn idle_probe(&self, key: &str, seconds: u64) -> Result<(), ConfigError> {
        if seconds > MAX_IDLE_PROBE_S {
            return Err(self.invalid(
                key,
                format!(
                    "{seconds} is out of range 0..={MAX_IDLE_PROBE_S} (seconds between probes of \
                     an idle path; 0 probes every 0.2 s always)"
                ),
            ));
        }
        Ok(())
    }

    fn window_gain(&self, key: &str, gain: f64) -> Result<(), ConfigError> {
        if gain != 0.0 && !WINDOW_GAIN.contains(&gain) {
            return Err(self.invalid(
                key,
                format!(
                    "{gain} is out of range {}..={} (times a path's recent rate and smallest \
                     RTT the scheduler lets it hold; 0 uses the kernel's window as it is)",
                    WINDOW_GAIN.start(),
                    WINDOW_GAIN.end()
                ),
            ));
        }
        Ok(())
    }

    fn idle_probe_after(&self, key: &str, seconds: u64) -> Result<(), ConfigError> {
        if !IDLE_PROBE_AFTER_S.contains(&seconds) {
            return Err(self.invalid(
                key,
                format!(
                    "{seconds} is out of range {}..={} (seconds without a connection before \
                     probes slow down)",
                    IDLE_PROBE_AFTER_S.start(),
                    IDLE_PROBE_AFTER_S.end()
                ),
            ));
        }
        Ok(())
    }

    fn drain(&self, key: &str, seconds: u64) -> Result<(), ConfigError> {
        if seconds > MAX_DRAIN_S {
            return Err(self.invalid(key, format!("{seconds} is out of range 0..={MAX_DRAIN_S}")));
        }
        Ok(())
    }

    fn congestion(&self, key: &str, name: Option<&str>) -> Result<(), ConfigError> {
        let Some(name) = name else { return Ok(()) };
        let ok = !name.is_empty()
            && name.len() <= MAX_CONGESTION_NAME_BYTES
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !ok {
            return Err(self.invalid(
                key,
                format!(
                    "{name:?} is not a congestion control name (lowercase letters, digits, '_'; \
                     see /proc/sys/net/ipv4/tcp_available_congestion_control)"
                ),
            ));
        }
        Ok(())
    }

    fn rto_max(&self, key: &str, ms: Option<u32>) -> Result<(), ConfigError> {
        let range = crate::sockopt::RTO_MAX_RANGE_MS;
        match ms {
            Some(ms) if !range.contains(&ms) => Err(self.invalid(
                key,
                format!(
                    "{ms} is out of range {}..={} (the kernel's limits for TCP_RTO_MAX_MS)",
                    range.start(),
                    range.end()
                ),
            )),
            _ => Ok(()),
        }
    }

    /// TCP listeners must not share an address (and none may use port 0, which would bind a
    /// random port nobody can be told about).
    fn distinct_listeners(&self, list: &[(&str, Option<SocketAddr>)]) -> Result<(), ConfigError> {
        let mut seen: BTreeMap<SocketAddr, &str> = BTreeMap::new();
        for (key, addr) in list {
            let Some(addr) = addr else { continue };
            if addr.port() == 0 {
                return Err(self.invalid(*key, format!("{addr}: port must not be 0")));
            }
            if let Some(other) = seen.insert(*addr, key) {
                return Err(self.invalid(*key, format!("{addr} is already used by {other}")));
            }
        }
        Ok(())
    }

    /// A directory the daemon may create files in: it is one, or it does not exist yet and
    /// its nearest existing ancestor is a directory (the daemon creates the rest at start).
    fn keep_days(&self, days: Option<u32>, recording: bool) -> Result<(), ConfigError> {
        let key = "context.keep_days";
        match days {
            None => Ok(()),
            Some(_) if !recording => Err(self.invalid(
                key,
                "nothing to keep without context.record (the directory of the logs)",
            )),
            Some(d) if !(1..=MAX_KEEP_DAYS).contains(&d) => Err(self.invalid(
                key,
                format!(
                    "{d}: 1 to {MAX_KEEP_DAYS} finished days (1 keeps yesterday's log for the \
                     nightly import; leave it out to keep every log)"
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    fn record_dir(&self, key: &str, dir: &Path) -> Result<(), ConfigError> {
        for a in dir.ancestors().filter(|a| !a.as_os_str().is_empty()) {
            match std::fs::metadata(a) {
                Ok(m) if m.is_dir() => return Ok(()),
                Ok(_) => return Err(self.invalid(key, format!("{}: not a directory", a.display()))),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(self.invalid(key, format!("{}: {e}", a.display()))),
            }
        }
        Ok(())
    }

    fn existing_file(&self, key: &str, file: &Path) -> Result<(), ConfigError> {
        match std::fs::metadata(file) {
            Ok(m) if m.is_file() => Ok(()),
            Ok(_) => Err(self.invalid(key, format!("{}: not a regular file", file.display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Err(self.invalid(key, format!("{}: file not found", file.display())))
            }
            Err(e) => Err(self.invalid(key, format!("{}: {e}", file.display()))),
        }
    }

    fn tls_files(&self, tls: &mut TlsFiles, base: &Path) -> Result<(), ConfigError> {
        for (key, file) in [
            ("tls.ca", &mut tls.ca),
            ("tls.cert", &mut tls.cert),
            ("tls.key", &mut tls.key),
        ] {
            *file = resolve(base, file);
            self.existing_file(key, file)?;
        }
        Ok(())
    }

    fn linkdb(&self, l: &LinkDbConfig) -> Result<(), ConfigError> {
        if let Some(db) = &l.db {
            if db.trim().is_empty() {
                return Err(
                    self.invalid("linkdb.db", "empty; remove the key to run without LinkDB")
                );
            }
            if !["paper", "risk", "loctable"].contains(&l.model.as_str()) {
                return Err(self.invalid(
                    "linkdb.model",
                    format!(
                        "unknown model `{}`: expected paper, risk or loctable",
                        l.model
                    ),
                ));
            }
            match l.track_origin {
                Some([lat, lon])
                    if (-90.0..=90.0).contains(&lat) && (-180.0..=180.0).contains(&lon) => {}
                Some(_) => {
                    return Err(self.invalid("linkdb.track_origin", "must be [lat, lon] in degrees"))
                }
                None => {
                    return Err(self.invalid(
                        "linkdb.track_origin",
                        "required with linkdb.db: [lat, lon] of position 0 of the line",
                    ))
                }
            }
            if !l.track_heading_deg.is_finite() {
                return Err(self.invalid("linkdb.track_heading_deg", "must be a number of degrees"));
            }
            if l.carriers.is_empty() || l.carriers.len() > 32 {
                return Err(self.invalid(
                    "linkdb.carriers",
                    "1 to 32 carrier names, one per path index",
                ));
            }
        }
        match l.keep_days {
            None => Ok(()),
            Some(_) if l.db.is_none() => {
                Err(self.invalid("linkdb.keep_days", "nothing to prune without linkdb.db"))
            }
            Some(d) if !(1..=MAX_KEEP_DAYS).contains(&d) => Err(self.invalid(
                "linkdb.keep_days",
                format!("{d}: 1 to {MAX_KEEP_DAYS} days; leave it out to keep every ride"),
            )),
            Some(_) => Ok(()),
        }
    }

    fn limits(&self, l: &Limits) -> Result<(), ConfigError> {
        for (key, value) in [
            ("limits.flow_window_bytes", l.flow_window_bytes),
            ("limits.user_window_bytes", l.user_window_bytes),
        ] {
            if value == 0 || value > MAX_WINDOW_BYTES {
                return Err(self.invalid(
                    key,
                    format!("{value} is out of range 1..={MAX_WINDOW_BYTES}"),
                ));
            }
        }
        if l.user_window_bytes < l.flow_window_bytes {
            return Err(self.invalid(
                "limits.user_window_bytes",
                format!(
                    "{} is smaller than limits.flow_window_bytes ({}); a passenger's cap must \
                     hold at least one flow's window",
                    l.user_window_bytes, l.flow_window_bytes
                ),
            ));
        }
        if l.max_flows == 0 || l.max_flows > MAX_FLOWS {
            return Err(self.invalid(
                "limits.max_flows",
                format!("{} is out of range 1..={MAX_FLOWS}", l.max_flows),
            ));
        }
        if !(64 << 20..=64 << 30).contains(&l.session_buffer_bytes) {
            return Err(self.invalid(
                "limits.session_buffer_bytes",
                format!(
                    "{} is out of range {}..={} (64 MiB to 64 GiB)",
                    l.session_buffer_bytes,
                    64u64 << 20,
                    64u64 << 30
                ),
            ));
        }
        if l.passenger_max_flows > MAX_FLOWS {
            return Err(self.invalid(
                "limits.passenger_max_flows",
                format!(
                    "{} is out of range 0..={MAX_FLOWS} (0: no limit)",
                    l.passenger_max_flows
                ),
            ));
        }
        if l.passenger_flow_rate > 0 && l.passenger_flow_burst == 0 {
            return Err(self.invalid(
                "limits.passenger_flow_burst",
                "0 with a passenger_flow_rate would refuse every connection; at least 1",
            ));
        }
        Ok(())
    }

    fn log(&self, log: &LogConfig) -> Result<(), ConfigError> {
        const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
        let bad = |what: &str| {
            self.invalid(
                "log.level",
                format!(
                    "{:?}: {what}; expected a level ({}) or `target=level` directives \
                     separated by commas",
                    log.level,
                    LEVELS.join(", ")
                ),
            )
        };
        if log.level.trim().is_empty() {
            return Err(bad("empty"));
        }
        for directive in log.level.split(',') {
            let directive = directive.trim();
            let (target, level) = match directive.split_once('=') {
                Some((t, l)) => (Some(t.trim()), l.trim()),
                None => (None, directive),
            };
            if let Some(t) = target {
                if t.is_empty()
                    || !t
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':' || c == '-')
                {
                    return Err(bad(&format!("bad target {t:?}")));
                }
            }
            if !LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
                return Err(bad(&format!("unknown level {level:?}")));
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Examples
// ---------------------------------------------------------------------------------------------

/// The `[linkdb]` keys, commented out, shared by the relay's and the proxy's example.
macro_rules! linkdb_example_keys {
    () => {
        r#"# db = "sqlite:/var/lib/polycorn/linkdb.sqlite"
# model = "paper"                 # paper | risk | loctable
# route = "hsr-1"                 # only rides of this route
# carriers = ["A", "B"]           # carrier of path 0, path 1, ... as LinkDB names them
# track_origin = [39.86, 116.37]  # [lat, lon] of position 0 of the line (required with db)
# track_heading_deg = 160.0       # heading of increasing position
"#
    };
}

const RELAY_EXAMPLE: &str = concat!(
    r#"# polycorn relay configuration (on the train's gateway).
# Relative file names are resolved against this file's directory.

[relay]
# polycorn | mptcp | single
#   polycorn: every passenger flow multiplexed over all paths (needs [tls])
#   mptcp:    baseline, one kernel MPTCP connection per passenger connection
#   single:   baseline, one path per passenger, passengers round robin over the paths
mode = "polycorn"
# Uplink scheduler: a preset (polycorn, hrsch, minrtt, roundrobin, redundant, blest, ecf,
# single, loctable) or a pipeline such as "hpr,minrtt,tpr,ori+er(k=3)". polycorn is the
# paper's HRSCH whose reinjection also fires when a modem reports its cell lost.
scheduler = "polycorn"
# The proxy's subflow address, for every path that does not set its own: IP:port, or
# host:port resolved by the relay (mode "polycorn"; kept while the name still lists it, looked
# up again when a path fails to connect, at most every 10 s). A name with one address per
# proxy host gives failover: when no path has reached the proxy in use for hold_time_s (at
# least 10 s), the relay moves to the name's next address.
proxy = "10.0.2.1:7700"
# Proxy port of the mptcp / single baselines' tunnels.
tunnel_port = 7701
# Passenger connections survive an outage of all paths this long (0..=3600 s).
hold_time_s = 30
# On an orderly stop (systemctl stop/restart), let the passenger connections open at that
# moment finish for up to this long before closing (0..=30 s); no new connection is accepted
# meanwhile (with polycorn-relay.socket they wait for the next relay). 0: close at once.
# drain_s = 0
# With no passenger connection open for idle_probe_after_s (10..=3600), probe each path every
# idle_probe_s seconds instead of every 0.2 s (0..=60; 0: every 0.2 s always): an idle train
# then costs each SIM a few MB a day instead of over a hundred. The first connection after
# such a spell gets its first byte 50-100 ms later (measured on the emulated HSR trip).
# idle_probe_s = 5
# idle_probe_after_s = 120
# The uplink scheduler lets a path hold (in flight and queued) at most window_gain times the
# larger of its recent rate (10 s kept) times its smallest RTT and what it delivered in its
# last RTT, not the subflow's whole congestion window: a window grown in a busy moment would
# otherwise take a new upload in one burst on one path (1.0..=16.0; 0: the kernel's window as
# it is).
# window_gain = 2
# TCP congestion control of the subflows and tunnels (default: the system's, often cubic).
# "bbr" is what we recommend over cellular paths (README, "congestion control").
# congestion = "bbr"
# Idle subflows replaced with a fresh connection: "collapsed" (slow-start threshold below 20
# segments after a blackout), "used" (also after carrying 256 KB of downlink data), "off".
# idle_refresh = "collapsed"
# Set net.ipv4.tcp_slow_start_after_idle in the relay's network namespace at startup (affects
# every TCP socket there). false: uplink subflows keep their congestion window across idle
# gaps instead of restarting from 10 segments. Default: leave the system's setting (1).
# slow_start_after_idle = false
# Cap on the uplink subflows' retransmission timeout, ms (TCP_RTO_MAX_MS, 1000..=120000,
# Linux 6.15 or later). After a failed handover's blackout of several seconds a subflow
# otherwise waits out a timer that doubled with every timeout (up to about as long again as
# the blackout) before it sends again. Default: the kernel's (120 s).
# rto_max_ms = 1000

# One [[path]] per cellular interface (1 to 32); names, devices and sources must be unique.
[[path]]
name = "A"
device = "path0"
source = "10.100.0.1"
# proxy = "10.100.0.2:7700"   # optional: overrides relay.proxy for this path
# mtu = 1400                   # optional: for a carrier that drops larger packets silently
# A modem that gets a new address at every attach: leave `source` out (mode polycorn); each
# connection attempt then takes the interface's current address (IPv4 first, IPv6 when the
# proxy has no IPv4 address).

[[path]]
name = "B"
device = "path1"
source = "10.101.0.1"

[intercept]
# TPROXY listeners for passengers' TCP (IPv4 and IPv6); at least one listener is required.
# With lan_device set they take connections arriving on that interface only (SO_BINDTODEVICE),
# never from the carriers' side; a connection aimed at one of the relay's own addresses is
# refused either way (carried, it would loop back to the train through the proxy).
transparent = "0.0.0.0:7070"
# transparent6 = "[::]:7070"
# Explicit SOCKS5 listener, an alternative to transparent interception.
# socks5 = "10.0.1.1:1080"
# true: polycorn installs (and removes on exit) its nftables table and policy routing.
install_nft = true
# The passengers' interface; required with install_nft and a transparent listener, and
# recommended without it: the transparent listeners are bound to it.
lan_device = "lan0"
# block: passengers' UDP except DNS is rejected so QUIC falls back to TCP | allow
udp = "block"

[dns]
# Optional DNS service for passengers; queries go over TCP through the proxy to upstream
# (the proxy's [policy] must allow that address).
# listen = "10.0.1.1:53"
# upstream = "10.0.2.2:53"

[tls]
# CA, certificate and key from `polycorn tls generate` (or `tls relay --name` for this train).
# The CA's private key (ca.key) must stay off the train. Renewed files take effect with
# `systemctl reload polycorn-relay` (SIGHUP), without a restart.
ca = "ca.pem"
cert = "relay.pem"
key = "relay.key"

[context]
# Train context for handover prediction: none | gpsd | replay
source = "none"
gpsd = "127.0.0.1:2947"
# replay = "context.csv"     # required with source = "replay"
# Keep every fix with the modems' serving cells, one CSV per day, for
# `polycorn linkdb import --ride-log` (LinkDB learns this train's handovers):
# record = "/var/lib/polycorn/context"
# Remove the logs of days older than this many finished days (about 6 MB a day); left out,
# every log is kept:
# keep_days = 30

[linkdb]
# Optional handover database (see `polycorn linkdb`), the same one the proxy uses: the uplink
# scheduler's HPR stage stops sending on a path before a predicted handover failure. Needs
# context.source; the paths' order must match `carriers`.
"#,
    linkdb_example_keys!(),
    r#"
[limits]
flow_window_bytes = 4194304     # per-flow receive window / send buffer
user_window_bytes = 16777216    # per-passenger cap (>= flow_window_bytes)
max_flows = 65536
# Most bytes the session holds in its flows' buffers (each open flow sets 320 KiB aside, so
# this also caps the flows open at once: 6553 with 2 GiB).
session_buffer_bytes = 2147483648
# Per passenger address: connections open at once, and new connections per second (sustained,
# after a burst). Past them that passenger's new connections are refused, others carry on.
# 0 turns a limit off.
passenger_max_flows = 512
passenger_flow_rate = 50
passenger_flow_burst = 200

[metrics]
# Prometheus endpoint (GET /metrics), no authentication: keep it on loopback. `polycorn
# status relay relay.toml` reads it; remove the line to serve no endpoint. Alerting rules for
# Prometheus: `polycorn config example alerts`.
listen = "127.0.0.1:9100"

[log]
format = "text"                 # text | json
level = "info"                  # or e.g. "info,polycorn_net::subflow=debug"
"#
);

const PROXY_EXAMPLE: &str = concat!(
    r#"# polycorn proxy configuration (in the cloud).
# Relative file names are resolved against this file's directory.

[proxy]
# Subflow (TLS) listener; may also be a list: ["0.0.0.0:7700", "[::]:7700"]
listen = "0.0.0.0:7700"
# Optional: the mptcp / single baselines' per-connection tunnels. They have no TLS, so
# tunnel_peers (the relays' source networks) is required with tunnel_listen.
# tunnel_listen = "0.0.0.0:7701"
# tunnel_peers = ["10.100.0.0/16", "10.101.0.0/16"]
# Downlink scheduler, same syntax as the relay's.
scheduler = "polycorn"
# A relay's flows survive this long while it has no subflow (0..=3600 s).
hold_time_s = 30
# On an orderly stop, let the flows open at that moment finish for up to this long before
# closing every session (0..=30 s); relays hold new passenger connections meanwhile for the
# next proxy. 0: at once.
# drain_s = 0
# With no flow of a relay open for idle_probe_after_s (10..=3600), probe its paths every
# idle_probe_s seconds instead of every 0.2 s (0..=60; 0: every 0.2 s always).
# idle_probe_s = 5
# idle_probe_after_s = 120
# The downlink scheduler lets a path hold at most window_gain times the larger of its recent
# rate times its smallest RTT and what it delivered in its last RTT, not the subflow's whole
# congestion window (which keeps the size of its busiest moment through pauses and would take
# a new download in one burst on one path, past what the carrier's queue holds). 1.0..=16.0;
# 0: the kernel's window.
# window_gain = 2
# When a retransmission timeout (a probe lost in a handover's gap) cut the slow-start
# threshold of an idle downlink subflow, ask the relay for a fresh connection on that path,
# so the next download slow-starts instead of growing its window linearly (relays of
# protocol 4 or later; a relay set to idle_refresh "off" declines).
# ask_refresh = true
# Limit on connecting to a server (1..=300 s).
connect_timeout_s = 10
# TCP congestion control of accepted subflows and tunnels, so of the downlink (default: the
# system's, often cubic). "bbr" is what we recommend over cellular paths (README, "congestion
# control"): with cubic, a long-lived subflow keeps the slow-start threshold of cells it has
# left, and 4 MB downloads took 1.4x longer in the bench.
# congestion = "bbr"
# Set net.ipv4.tcp_slow_start_after_idle in the proxy's network namespace at startup (affects
# every TCP socket there). false: downlink subflows keep their congestion window across idle
# gaps instead of restarting from 10 segments. Default: leave the system's setting (1).
# slow_start_after_idle = false
# Cap on the downlink subflows' retransmission timeout, ms (TCP_RTO_MAX_MS, 1000..=120000,
# Linux 6.15 or later; see relay.toml). Default: the kernel's (120 s).
# rto_max_ms = 1000
# Relays refused in the TLS handshake, by the name in their certificate (`polycorn tls
# relay --name train-017` issues one per train): a lost or stolen gateway is shut out without
# redistributing every file. `systemctl reload polycorn-proxy` (SIGHUP) applies a change to this
# list while running: a revoked relay's live subflows are cut at once.
# revoked_relays = ["train-017"]
# Live sessions one relay name may hold at once, besides the one replacing them when it
# restarts (1..=64); one certificate per train keeps this at 1.
# max_sessions_per_relay = 1

[tls]
# Renewed files (`polycorn tls proxy` issues a certificate from the same CA) take effect with
# `systemctl reload polycorn-proxy` (SIGHUP), for relays' new subflows, without a restart.
ca = "ca.pem"
cert = "proxy.pem"
key = "proxy.key"

[policy]
# The proxy is not an open proxy. Loopback, private, CGNAT, link-local, ULA, multicast and
# similar ranges are refused unless an allow entry inside the range opens them.
# Empty allow: every public address. A non-empty allow ALSO restricts public space, so to
# open one private resolver and keep the Internet: ["0.0.0.0/0", "::/0", "10.0.2.2/32"]
allow = []
deny = []
# true opens private, CGNAT, link-local and ULA space (never loopback: list it in allow).
# `systemctl reload polycorn-proxy` applies changes here to later connections.
allow_private = false

[context]
# Keep the train context every relay sends (its GPS fixes with each modem's serving cell and
# RSRP), one CSV per relay and day under record/RELAY-NAME/, for `polycorn linkdb import
# --ride-log` (LinkDB learns every train's handovers without copying files off the trains).
# `systemctl reload polycorn-proxy` applies a change here to the live sessions.
# record = "/var/lib/polycorn/context"
# Remove each relay's logs of days older than this many finished days (about 6 MB per train
# and day); longer than the nightly import's interval. Left out, every log is kept:
# keep_days = 30
# How late the relays' modem monitors report a modem's cell, in ms; the nightly import
# (`linkdb import --proxy-config`) moves the recorded cells back by it. Even 1 s unaccounted
# for places failures about 70 m late at 300 km/h, too late for HPR (docs/MEASUREMENTS.md):
# monitor_lag_ms = 0

[linkdb]
# Optional handover database (see `polycorn linkdb`): the downlink scheduler's HPR stage uses
# its failure predictions, fed with the train context the relay sends.
"#,
    linkdb_example_keys!(),
    r#"# The nightly import (`linkdb import --proxy-config`) deletes the route's rides that began
# more than this many days ago (each adds about 0.4 MB, and time to every predictor build);
# left out, every ride is kept:
# keep_days = 365

[limits]
flow_window_bytes = 4194304
user_window_bytes = 16777216
max_flows = 65536
# Most bytes one relay's session holds in its flows' buffers; bounds what one relay
# credential can make this proxy hold (times max_sessions_per_relay + 1).
session_buffer_bytes = 2147483648

[metrics]
# Prometheus endpoint, no authentication: keep it on loopback or a management network
# (`polycorn status proxy proxy.toml` reads it; remove the line to serve no endpoint).
# Alerting rules for Prometheus: `polycorn config example alerts`.
listen = "127.0.0.1:9100"

[log]
format = "text"
level = "info"
"#
);
/// One line of [`RelayConfig::proxy_notes`]: `name`, the addresses it resolved to, and the
/// failover between those of one family (after `after` without a path reaching the one in use).
pub fn describe_proxy_name(name: &ProxyAddr, addrs: &[SocketAddr], after: Duration) -> String {
    let list: Vec<String> = addrs.iter().map(|a| a.ip().to_string()).collect();
    let mut line = format!("proxy {name} resolves here to {}", list.join(", "));
    let failover: Vec<String> = [(true, "IPv4"), (false, "IPv6")]
        .into_iter()
        .filter_map(|(v4, family)| {
            let n = addrs.iter().filter(|a| a.is_ipv4() == v4).count();
            (n > 1).then(|| format!("{n} {family} addresses"))
        })
        .collect();
    if failover.is_empty() {
        line += " (one proxy: no failover)";
    } else {
        line += &format!(
            " (failover between the {}: the relay moves to the next when no path has reached \
             the one in use for {} s)",
            failover.join(" and between the "),
            after.as_secs()
        );
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A configuration written with `to_toml` reads back as it was: the same key names, and
    /// every value in a form the parser takes.
    #[test]
    fn the_example_configurations_survive_a_round_trip_through_toml() {
        let relay = RelayConfig::example_settings();
        let text = relay.to_toml();
        let back: RelayConfig = parse(&text, "relay.toml written back").expect(&text);
        assert_eq!(back, relay, "{text}");
        let proxy = ProxyConfig::example_settings();
        let text = proxy.to_toml();
        let back: ProxyConfig = parse(&text, "proxy.toml written back").expect(&text);
        assert_eq!(back, proxy, "{text}");
    }

    /// Settings the examples leave out (several listen addresses, per-path proxies and
    /// sources, optional sections) are written back too.
    #[test]
    fn settings_beyond_the_examples_survive_a_round_trip_through_toml() {
        let mut relay = RelayConfig::example_settings();
        relay.paths[0].proxy = Some("proxy.example.net:7701".parse().unwrap());
        relay.paths[0].source = Some("10.0.0.2".parse().unwrap());
        relay.paths[0].mtu = Some(1400);
        relay.relay.congestion = Some("bbr".into());
        relay.relay.slow_start_after_idle = Some(false);
        relay.linkdb.track_origin = Some([52.5, 13.25]);
        relay.dns.listen = Some("127.0.0.1:5353".parse().unwrap());
        let text = relay.to_toml();
        let back: RelayConfig = parse(&text, "relay.toml written back").expect(&text);
        assert_eq!(back, relay, "{text}");
        let mut proxy = ProxyConfig::example_settings();
        proxy.proxy.listen = vec![
            "0.0.0.0:7700".parse().unwrap(),
            "[::]:7700".parse().unwrap(),
        ];
        proxy.proxy.tunnel_peers = vec!["10.0.0.0/8".parse().unwrap()];
        proxy.policy.deny = vec!["192.0.2.0/24".parse().unwrap()];
        proxy.proxy.revoked_relays = vec!["train-7".into()];
        let text = proxy.to_toml();
        let back: ProxyConfig = parse(&text, "proxy.toml written back").expect(&text);
        assert_eq!(back, proxy, "{text}");
    }
}
