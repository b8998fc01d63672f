//! `proxy.toml`: the proxy's sections and their validation.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::policy::DestinationPolicy;

use super::common::*;
use super::error::*;
use super::examples::*;
use super::parse::*;
use super::validate::*;

/// The proxy's `[context]`: what it keeps of the train context the relays send.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ProxyContextConfig {
    /// `record`: a directory where the proxy writes every relay's fixes, with its modems'
    /// serving cells, one subdirectory per relay name ([`crate::proxy::RideRecording`]), for
    /// `polycorn linkdb import --ride-log`. None (default): nothing is recorded.
    pub record: Option<PathBuf>,
    /// `keep_days`: with `record`, each relay's logs of this many finished UTC days are kept
    /// besides today's; older ones are removed when one of its logs starts. Longer than the
    /// nightly import's interval, or logs go unread. None (default): every log is kept.
    #[schemars(range(min = 1, max = MAX_KEEP_DAYS))]
    pub keep_days: Option<u32>,
    /// `monitor_lag_ms`: how late the relays' modem monitors report a modem's cell, ms (0,
    /// the default: at once). `polycorn linkdb import --proxy-config` moves the recorded cells
    /// back by it before it infers the handovers.
    #[schemars(range(max = MAX_MONITOR_LAG_MS))]
    pub monitor_lag_ms: u64,
}

/// `[proxy]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ProxySection {
    /// `listen`: subflow (TLS) address, or a list of addresses (default 0.0.0.0:7700).
    #[serde(deserialize_with = "one_or_many_addrs")]
    #[schemars(with = "Vec<SocketAddr>")]
    pub listen: Vec<SocketAddr>,
    /// `tunnel_listen`: address for the baselines' per-connection tunnels (kernel MPTCP,
    /// single path). None: baselines are not served.
    pub tunnel_listen: Option<SocketAddr>,
    /// `tunnel_peers`: source networks (CIDRs) allowed to open baseline tunnels; required
    /// with `tunnel_listen`, because tunnels carry no TLS and no client certificate.
    #[schemars(with = "Vec<String>")]
    pub tunnel_peers: Vec<IpNet>,
    /// `scheduler`: downlink pipeline spec or preset (default `polycorn`).
    pub scheduler: String,
    /// `hold_time_s`: how long a relay's flows survive while it has no subflow (default 30, at
    /// most 3600).
    #[schemars(range(max = MAX_HOLD_TIME_S))]
    pub hold_time_s: u64,
    /// `connect_timeout_s`: limit on connecting to a server (default 10, 1..=300).
    #[schemars(range(min = 1, max = MAX_CONNECT_TIMEOUT_S))]
    pub connect_timeout_s: u64,
    /// `congestion`: TCP congestion control of accepted subflows and tunnels (`bbr`, `cubic`,
    /// …; startup stops where the kernel lacks it; `"system"`: the system's default). None:
    /// [`DEFAULT_CONGESTION`] (BBR) where the host can set it, else the system's default with
    /// a warning.
    pub congestion: Option<String>,
    /// `slow_start_after_idle`: the proxy sets `net.ipv4.tcp_slow_start_after_idle` of its
    /// network namespace to this at startup (downlink subflows keep their congestion window
    /// across idle gaps when false). None: the system's setting is left alone.
    pub slow_start_after_idle: Option<bool>,
    /// `rto_max_ms`: upper bound on the downlink subflows' retransmission timeout
    /// (`TCP_RTO_MAX_MS`, 1000..=120000; Linux 6.15 or later). None: the kernel's (120 s).
    #[schemars(range(min = *crate::sockopt::RTO_MAX_RANGE_MS.start(), max = *crate::sockopt::RTO_MAX_RANGE_MS.end()))]
    pub rto_max_ms: Option<u32>,
    /// `revoked_relays`: relay names (their certificates' common names, see
    /// [`crate::tls::issue_relay`]) whose subflows are refused in the TLS handshake (alert
    /// `certificate_revoked`).
    pub revoked_relays: Vec<String>,
    /// `drain_s`: on an orderly stop, how long the proxy lets the flows open at that moment
    /// finish before it closes every session and resets those left (default 0, at most
    /// [`MAX_DRAIN_S`]). Relays are told and hold the passenger connections they accept
    /// meanwhile for the next proxy (a relay that does not know the announcement opens them here;
    /// they are carried, not waited for).
    #[schemars(range(max = MAX_DRAIN_S))]
    pub drain_s: u64,
    /// `idle_probe_s`: once a relay's session has had no flow open for `idle_probe_after_s`,
    /// the proxy probes its paths this often instead of every 0.2 s (default 5, at most
    /// [`MAX_IDLE_PROBE_S`]; 0: every 0.2 s always).
    #[schemars(range(max = MAX_IDLE_PROBE_S))]
    pub idle_probe_s: u64,
    /// `idle_probe_after_s`: how long without a flow before that (default 120,
    /// [`IDLE_PROBE_AFTER_S`]).
    #[schemars(range(min = *IDLE_PROBE_AFTER_S.start(), max = *IDLE_PROBE_AFTER_S.end()))]
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
    #[schemars(range(min = 1, max = 64))]
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// `allow`: CIDRs. Empty: every public address. Entries inside a special range
    /// (private, loopback, …) open that part of it.
    #[schemars(with = "Vec<String>")]
    pub allow: Vec<IpNet>,
    /// `deny`: CIDRs refused whatever else says.
    #[schemars(with = "Vec<String>")]
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

/// A proxy's configuration (`proxy.toml`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
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
    /// A configuration that reads as a file holding only `[tls]` with these files does: every
    /// other key at its default.
    pub fn new(tls: TlsFiles) -> ProxyConfig {
        ProxyConfig {
            proxy: ProxySection::default(),
            tls,
            policy: PolicyConfig::default(),
            context: ProxyContextConfig::default(),
            linkdb: LinkDbConfig::default(),
            limits: Limits::default(),
            metrics: MetricsConfig::default(),
            log: LogConfig::default(),
        }
    }

    /// Parses `text` without validating it (the files it names need not exist); `origin`
    /// names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<ProxyConfig, ConfigError> {
        parse(text, origin)
    }

    /// Reads and validates `path`; relative file names in it resolve against its directory.
    pub fn load(path: &Path) -> Result<ProxyConfig, ConfigError> {
        load(path)
    }

    /// Parses and validates `text`; `origin` names it in errors, relative file names resolve
    /// against `base_dir`.
    #[allow(clippy::should_implement_trait)]
    pub fn from_str(text: &str, origin: &str, base_dir: &Path) -> Result<ProxyConfig, ConfigError> {
        checked(text, origin, base_dir)
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
}

impl Checked for ProxyConfig {
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
