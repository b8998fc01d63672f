//! `relay.toml`: the relay's sections and their validation.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::proxy_addr::ProxyAddr;

use super::common::*;
use super::error::*;
use super::examples::*;
use super::parse::*;
use super::validate::*;

/// `[relay]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
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
    #[schemars(with = "String")]
    pub proxy: ProxyAddr,
    /// `tunnel_port`: the proxy's port for the `mptcp` and `single` baselines (default 7701).
    #[serde(default = "default_tunnel_port")]
    #[schemars(range(min = 1))]
    pub tunnel_port: u16,
    /// `hold_time_s`: how long passenger connections survive an outage of every path
    /// (default 30, at most 3600).
    #[serde(default = "default_hold_time_s")]
    #[schemars(range(max = MAX_HOLD_TIME_S))]
    pub hold_time_s: u64,
    /// `congestion`: TCP congestion control of the subflows and baseline tunnels (`bbr`,
    /// `cubic`, `reno`, …; startup stops where the kernel lacks it; `"system"`: the system's
    /// default). None: [`DEFAULT_CONGESTION`] (BBR) where the host can set it, else the
    /// system's default with a warning.
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
    #[schemars(range(min = *crate::sockopt::RTO_MAX_RANGE_MS.start(), max = *crate::sockopt::RTO_MAX_RANGE_MS.end()))]
    pub rto_max_ms: Option<u32>,
    /// `drain_s`: on an orderly stop, how long the relay lets the passenger connections open at
    /// that moment finish before it closes the session and resets those left (default 0, at
    /// most [`MAX_DRAIN_S`]). It accepts no new connection meanwhile.
    #[serde(default)]
    #[schemars(range(max = MAX_DRAIN_S))]
    pub drain_s: u64,
    /// `idle_probe_s`: once no passenger connection has been open for `idle_probe_after_s`,
    /// the relay probes each path this often instead of every 0.2 s (default 5, at most
    /// [`MAX_IDLE_PROBE_S`]; 0: every 0.2 s always). See
    /// [`polycorn_proto::SessionConfig::idle_ping_interval`].
    #[serde(default = "default_idle_probe_s")]
    #[schemars(range(max = MAX_IDLE_PROBE_S))]
    pub idle_probe_s: u64,
    /// `idle_probe_after_s`: how long without a passenger connection before that (default 120,
    /// [`IDLE_PROBE_AFTER_S`]).
    #[serde(default = "default_idle_probe_after_s")]
    #[schemars(range(min = *IDLE_PROBE_AFTER_S.start(), max = *IDLE_PROBE_AFTER_S.end()))]
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
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

impl From<IdleRefresh> for polycorn_proto::path_policy::IdleRefresh {
    fn from(v: IdleRefresh) -> Self {
        match v {
            IdleRefresh::Collapsed => Self::Collapsed,
            IdleRefresh::Used => Self::Used,
            IdleRefresh::Off => Self::Off,
        }
    }
}

impl RelaySection {
    /// A `[relay]` with every key at its default and `proxy` set (the one required key).
    pub fn new(proxy: ProxyAddr) -> RelaySection {
        RelaySection {
            mode: RelayMode::default(),
            scheduler: default_scheduler(),
            proxy,
            tunnel_port: default_tunnel_port(),
            hold_time_s: default_hold_time_s(),
            congestion: None,
            idle_refresh: IdleRefresh::default(),
            slow_start_after_idle: None,
            rto_max_ms: None,
            drain_s: 0,
            idle_probe_s: default_idle_probe_s(),
            idle_probe_after_s: default_idle_probe_after_s(),
            window_gain: default_window_gain(),
        }
    }

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

/// One `[[path]]`: a cellular interface.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
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
    #[schemars(with = "Option<String>")]
    pub proxy: Option<ProxyAddr>,
    /// `mtu`: the largest IP packet the carrier passes on this path, bytes. Set it when the
    /// carrier drops larger packets without saying so (a path-MTU black hole): the subflow's
    /// TCP then sends and asks for segments that fit (`TCP_MAXSEG`). Default: the interface's.
    /// The baselines' tunnels take it too (kernel MPTCP: the smallest of its paths').
    #[serde(default)]
    #[schemars(range(min = 576, max = 9000))]
    pub mtu: Option<u16>,
    /// `modem`: with `context.cells = "modemmanager"`, the path's modem by its IMEI,
    /// `EquipmentIdentifier` or `DeviceIdentifier` (as `mmcli -m N` shows them). None
    /// (default): the modem whose network interface (a net port or a bearer's interface) is
    /// `device`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modem: Option<String>,
    /// `at_port`: with `context.cells = "at"`, the serial device of the path's modem's AT
    /// command port (`/dev/ttyUSB2`; one ModemManager does not hold).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_port: Option<PathBuf>,
}

/// What the relay does with passengers' UDP.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum UdpPolicy {
    /// Reject passengers' UDP except DNS, so QUIC falls back to TCP (which polycorn carries).
    #[default]
    Block,
    /// Leave UDP alone (it is routed, not carried by polycorn).
    Allow,
}

/// `[intercept]`: how passengers' connections reach the relay.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct DnsConfig {
    /// `listen`: UDP address passengers send queries to. None: no DNS service.
    pub listen: Option<SocketAddr>,
    /// `upstream`: the resolver, reached through the proxy over TCP (so the proxy's
    /// `[policy]` must allow it). Required with `listen`.
    pub upstream: Option<SocketAddr>,
}

/// Where train context (position, speed, serving cells) comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ContextSource {
    /// No context: handover prediction is off.
    #[default]
    None,
    /// A gpsd daemon at `context.gpsd`.
    Gpsd,
    /// A recorded context log at `context.replay` (testbed).
    Replay,
    /// The modems' GNSS receivers through ModemManager's Location interface (for trains
    /// without gpsd); serving cells from ModemManager too.
    #[serde(rename = "modemmanager")]
    ModemManager,
}

/// Where each path's serving cell and signal come from (`[context] cells`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CellSource {
    /// gpsd's stream: `POLYCORN` objects from a modem monitor or the testbed's replay.
    #[default]
    Gpsd,
    /// ModemManager over the system D-Bus: one modem per path (`crate::modem`).
    #[serde(rename = "modemmanager")]
    ModemManager,
    /// Each path's `at_port`, polled with its module's serving-cell AT commands
    /// (`crate::modem::at`).
    At,
}

/// `[context]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ContextConfig {
    /// `source`: `none` (default), `gpsd`, `replay` or `modemmanager` (positions from the
    /// modems' GNSS through ModemManager).
    pub source: ContextSource,
    /// `cells`: where the paths' serving cells come from, `gpsd` (default: gpsd's `POLYCORN`
    /// objects), `modemmanager` (implied by `source = "modemmanager"`) or `at` (each path's
    /// `at_port`).
    pub cells: CellSource,
    /// `dbus`: the D-Bus address ModemManager is reached at (`unix:path=…`). None (default):
    /// the system bus (`DBUS_SYSTEM_BUS_ADDRESS`, else `/run/dbus/system_bus_socket`).
    pub dbus: Option<String>,
    /// `signal_rate_s`: with ModemManager, how often the modems refresh their signal readings
    /// (`Signal.Setup`) and the relay reads them; with `at`, how often the ports are polled;
    /// seconds (default 1, 1 to 60).
    #[schemars(range(min = 1, max = 60))]
    pub signal_rate_s: u32,
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
    #[schemars(range(min = 1, max = MAX_KEEP_DAYS))]
    pub keep_days: Option<u32>,
}

impl ContextConfig {
    /// Do the paths' cells come from ModemManager?
    pub fn cells_from_modemmanager(&self) -> bool {
        self.cells == CellSource::ModemManager || self.source == ContextSource::ModemManager
    }

    /// `signal_rate_s` as a duration.
    pub fn signal_rate(&self) -> Duration {
        Duration::from_secs(u64::from(self.signal_rate_s.max(1)))
    }
}

impl Default for ContextConfig {
    fn default() -> Self {
        ContextConfig {
            source: ContextSource::None,
            cells: CellSource::Gpsd,
            dbus: None,
            signal_rate_s: 1,
            gpsd: SocketAddr::from(([127, 0, 0, 1], 2947)),
            replay: None,
            record: None,
            keep_days: None,
        }
    }
}

/// A relay's configuration (`relay.toml`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
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

    /// A configuration that reads as a file holding only `[relay] proxy = …` does: no path,
    /// no `[tls]`, every other key at its default (not valid until paths are added).
    pub fn new(proxy: ProxyAddr) -> RelayConfig {
        RelayConfig {
            relay: RelaySection::new(proxy),
            paths: Vec::new(),
            intercept: InterceptConfig::default(),
            dns: DnsConfig::default(),
            tls: None,
            context: ContextConfig::default(),
            linkdb: LinkDbConfig::default(),
            limits: Limits::default(),
            metrics: MetricsConfig::default(),
            log: LogConfig::default(),
        }
    }

    /// Parses `text` without validating it (the files it names need not exist); `origin`
    /// names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<RelayConfig, ConfigError> {
        parse(text, origin)
    }

    /// Reads and validates `path`; relative file names in it resolve against its directory.
    pub fn load(path: &Path) -> Result<RelayConfig, ConfigError> {
        load(path)
    }

    /// Parses and validates `text`; `origin` names it in errors, relative file names resolve
    /// against `base_dir`.
    #[allow(clippy::should_implement_trait)]
    pub fn from_str(text: &str, origin: &str, base_dir: &Path) -> Result<RelayConfig, ConfigError> {
        checked(text, origin, base_dir)
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
}

impl Checked for RelayConfig {
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
        if ctx.cells == CellSource::ModemManager
            && matches!(ctx.source, ContextSource::None | ContextSource::Replay)
        {
            return Err(v.invalid(
                "context.cells",
                "cells from ModemManager go with positions from context.source = \"gpsd\" or \
                 \"modemmanager\"",
            ));
        }
        if ctx.cells == CellSource::At {
            if ctx.source != ContextSource::Gpsd {
                return Err(v.invalid(
                    "context.cells",
                    "cells from AT ports go with positions from context.source = \"gpsd\"",
                ));
            }
            if let Some((i, _)) = self
                .paths
                .iter()
                .enumerate()
                .find(|(_, p)| p.at_port.is_none())
            {
                return Err(v.invalid(
                    format!("path[{i}].at_port"),
                    "required with context.cells = \"at\": the modem's AT command port",
                ));
            }
        } else if let Some((i, _)) = self
            .paths
            .iter()
            .enumerate()
            .find(|(_, p)| p.at_port.is_some())
        {
            return Err(v.invalid(
                format!("path[{i}].at_port"),
                "used only with context.cells = \"at\"",
            ));
        }
        if !(1..=60).contains(&ctx.signal_rate_s) {
            return Err(v.invalid("context.signal_rate_s", "1 to 60 seconds"));
        }
        if let Some(bus) = &ctx.dbus {
            if let Err(e) = zbus::Address::try_from(bus.as_str()) {
                return Err(v.invalid(
                    "context.dbus",
                    format!("{bus:?} is not a D-Bus address: {e}"),
                ));
            }
        }
        if !ctx.cells_from_modemmanager() {
            if let Some((i, _)) = self
                .paths
                .iter()
                .enumerate()
                .find(|(_, p)| p.modem.is_some())
            {
                return Err(v.invalid(
                    format!("path[{i}].modem"),
                    "names a ModemManager modem, used only with context.cells = \"modemmanager\"",
                ));
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
