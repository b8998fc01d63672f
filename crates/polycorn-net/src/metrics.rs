//! Prometheus metrics for relay and proxy, and a minimal HTTP endpoint serving them.
//!
//! Enable with `[metrics] listen = "127.0.0.1:9100"` and scrape `http://ADDR/metrics`. The body
//! is OpenMetrics text (`application/openmetrics-text; version=1.0.0`), which Prometheus reads
//! natively. The listener has no authentication: bind it to loopback or a management network.
//!
//! # Families
//!
//! | metric | type | labels | meaning |
//! |---|---|---|---|
//! | `polycorn_path_rtt_seconds` | gauge | `path`, `relay` | smoothed RTT of the path's subflow (kernel `tcpi_rtt`) |
//! | `polycorn_path_cwnd_bytes` | gauge | `path`, `relay` | congestion window in bytes |
//! | `polycorn_path_sent_bytes_total` | counter | `path`, `relay` | payload bytes written to the subflow |
//! | `polycorn_path_received_bytes_total` | counter | `path`, `relay` | payload bytes read from the subflow |
//! | `polycorn_path_retransmissions_total` | counter | `path`, `relay` | kernel TCP retransmissions (`tcpi_total_retrans`, summed over reconnects) |
//! | `polycorn_path_reinjected_bytes_total` | counter | `path`, `relay` | bytes sent again after another path failed them (reinjection) |
//! | `polycorn_path_redundant_bytes_total` | counter | `path`, `relay` | bytes sent as a redundant copy (several paths in one decision) |
//! | `polycorn_path_up` | gauge | `path`, `relay` | 1 while the subflow is connected, else 0 |
//! | `polycorn_path_reconnects_total` | counter | `path`, `relay` | subflow reconnections after the first connect |
//! | `polycorn_user_bytes_total` | counter | `user`, `direction` | passenger payload bytes, `up` (to servers) or `down` |
//! | `polycorn_stage_decisions_total` | counter | `stage` | scheduling decisions in which the stage moved a path |
//! | `polycorn_reorder_wait_seconds` | histogram | | per data segment that arrived out of order: time until it could be delivered in order (the receive side's out-of-order delay) |
//! | `polycorn_cell_loss_report_delay_seconds` | histogram | `relay` | per cell loss a modem reported (a cell at one fix, none at the next), while paths were probed every 200 ms: how long that path had been silent (its modem monitor's lag, plus up to a fix interval and a probe interval; `[context] monitor_lag_ms`) |
//! | `polycorn_flows_open` | gauge | | passenger connections open now |
//! | `polycorn_session_buffered_bytes` | gauge | | bytes the sessions hold in their flows' buffers (received and not yet read, sent and not yet acknowledged); each session's is bounded by `limits.session_buffer_bytes` |
//! | `polycorn_flows_total` | counter | | passenger connections opened |
//! | `polycorn_flows_reset_total` | counter | | passenger connections ended by a reset |
//! | `polycorn_flows_held_total` | counter | | (relay) passenger connections held while the proxy drained, then opened at the next proxy |
//! | `polycorn_proxy_failovers_total` | counter | | (relay) moves to another of the proxy name's addresses after no path reached the one in use for the hold time |
//! | `polycorn_session_renewals_total` | counter | | (relay) fresh starts of the session, under a new epoch, with a proxy that answered with another epoch than the one before (another proxy, or a restarted one) |
//! | `polycorn_refresh_requests_total` | counter | | (proxy) requests to the relay for a fresh subflow, made when a retransmission timeout cut the slow-start threshold of an idle subflow (relays of protocol 4) |
//! | `polycorn_frames_rejected_total` | counter | `reason` | frames refused by the session (malformed, unknown flow, …) |
//! | `polycorn_passenger_refusals_total` | counter | `reason` | (relay) passenger connections refused before they were carried: `flows` (the passenger had `limits.passenger_max_flows` open), `rate` (faster than `limits.passenger_flow_rate`), `own_address` (aimed at one of the relay's own addresses), `dns_flows` and `dns_rate` (DNS queries, counted apart: their sources can be spoofed) |
//! | `polycorn_sessions_refused_total` | counter | `relay` | (proxy) sessions refused because the relay name had `proxy.max_sessions_per_relay` live sessions and one replacing them |
//! | `polycorn_tls_not_after_seconds` | gauge | `file` | when the process's own certificate (`cert`) and its CA file (`ca`) stop being valid, seconds since 1970 (alert on it minus `time()`) |
//! | `polycorn_relay_tls_not_after_seconds` | gauge | `relay` | (proxy) when the relay's certificate stops being valid, as it presented it last |
//! | `polycorn_proxy_tls_not_after_seconds` | gauge | | (relay) when the proxy's certificate stops being valid, as it presented it last |
//! | `polycorn_peers_rejected_total` | counter | | subflow connections refused (TLS or hello failure, revoked relay, session of another relay) |
//! | `polycorn_relay_sessions_total` | counter | `relay` | (proxy) sessions the relay opened: one per start of the relay process |
//! | `polycorn_relay_sessions_ended_total` | counter | `relay`, `how` | (proxy) sessions that ended: `closed` (the relay stopped in order), `restarted` (ended when the relay opened a new one, its paths all down: a crash or a power cut), `lost` (every path down longer than the hold time) |
//! | `polycorn_context_fixes_total` | counter | `relay` | (proxy) train context fixes received from the relay, each once (the copies on its other paths not counted) |
//! | `polycorn_context_fixes_recorded_total` | counter | `relay` | (proxy) of those, fixes written to the relay's context log (`[context] record`; fixes without any cell report are not written) |
//! | `polycorn_path_radio_rsrp_dbm` | gauge | `path` | (relay, `[context] cells = "modemmanager"`) the serving cell's RSRP as the path's modem reports it, dBm (NaN: unknown or no cell) |
//! | `polycorn_path_radio_cell` | gauge | `path` | (relay, same) the serving cell's identity (E-UTRAN/NR cell id; NaN: no cell — not registered, no bearer connected, or no modem) |
//! | `polycorn_path_radio_technology` | gauge | `path`, `tech` | (relay, same) 1 for the access technology the path's modem is on (`gsm`, `umts`, `lte`, `nr`, `none`), 0 for the others |
//! | `polycorn_linkdb_rides` | gauge | | rides the handover predictor in use was built from (0: no predictor) |
//! | `polycorn_linkdb_cells` | gauge | | cells it knows |
//! | `polycorn_linkdb_built_seconds` | gauge | | when it was built (at start, then at each reload), seconds since 1970 |
//! | `polycorn_linkdb_newest_ride_seconds` | gauge | | when the newest of its rides of known start began, seconds since 1970 (0: none known): alert when the nightly learning stops adding rides |
//! | `polycorn_linkdb_rebuild_failures_total` | counter | | reloads whose rebuild failed (the database could not be read), the predictor in use kept |
//! | `polycorn_build_info` | info (always 1) | `role`, `version` | (relay and proxy, [`Metrics::with_build`]) which end this is (`relay` or `proxy`) and the version and commit of its binary: the shipped alerting rules (`polycorn config example alerts`) tell the ends apart by it |
//!
//! `relay` is the relay's name, the common name of its certificate (`polycorn-relay` for the
//! certificate of `tls generate`, the train's name for one from `tls relay --name`): on a
//! proxy serving several trains each train's paths are series of their own, and on the relay
//! it is its own name, so dashboards of both ends match. `path` is the path's name from the
//! relay's `[[path]]` section at both ends (the proxy learns it from the relay's Hello; for a
//! relay of protocol 2, which sends none, the proxy uses the path's index).
//!
//! # Bounded labels
//!
//! Label values come from the network (passenger addresses, the relays' path names) or from
//! code (stage and reason names). Each label dimension has a cap ([`MAX_PATHS`], [`MAX_RELAYS`], [`MAX_USERS`],
//! [`MAX_STAGES`], [`MAX_REASONS`]); values beyond it share the series labelled
//! [`OVERFLOW_LABEL`] (`other`), so a flood of passenger addresses cannot grow memory or the
//! scrape without bound. Values are sanitised to `[A-Za-z0-9_.:/-]` (others become `_`) and
//! cut to 64 bytes, because the text encoder does not escape quotes or newlines.
//! [`Metrics::remove_user`] drops a passenger's series when they leave.
//!
//! # Handles
//!
//! [`Metrics::path`], [`Metrics::user`], [`Metrics::stage`] and [`Metrics::frame_rejected`]
//! look the series up (a lock and a map lookup) and return cheap clonable handles sharing the
//! series' atomics. Hot paths should keep the handle (one per path, per user) instead of
//! looking it up per packet.
//!
//! # HTTP endpoint
//!
//! [`serve`] answers `GET /metrics` (and `HEAD`) with 200, other paths with 404, other methods
//! on `/metrics` with 405, malformed requests with 400 and request heads over
//! [`MAX_REQUEST_HEAD_BYTES`] with 431. Every response closes the connection. At most
//! [`MAX_CONNECTIONS`] connections are served at once and each must send its request within
//! [`REQUEST_TIMEOUT`].

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Most distinct `path` label values. A relay has at most 32 paths; a proxy labels them with
/// the names the relays' Hellos give them, which a fleet may choose per train.
pub const MAX_PATHS: usize = 1024;
/// Most distinct `relay` label values (trains served by one proxy).
pub const MAX_RELAYS: usize = 256;
/// Most distinct `user` label values.
pub const MAX_USERS: usize = 4096;
/// Most distinct `stage` label values.
pub const MAX_STAGES: usize = 64;
/// Most distinct `reason` label values.
pub const MAX_REASONS: usize = 64;
/// The label value shared by everything beyond a cap.
pub const OVERFLOW_LABEL: &str = "other";
/// Longest label value kept; longer ones are cut.
pub const MAX_LABEL_BYTES: usize = 64;

/// Largest request head (request line and headers) the endpoint reads.
pub const MAX_REQUEST_HEAD_BYTES: usize = 8 * 1024;
/// Time a client has to send its request head.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once; further ones wait in the listen backlog.
pub const MAX_CONNECTIONS: usize = 16;
/// The `Content-Type` of `/metrics`.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds of the `polycorn_reorder_wait_seconds` buckets.
pub const REORDER_WAIT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Upper bounds of the `polycorn_cell_loss_report_delay_seconds` buckets.
pub const CELL_LOSS_DELAY_BUCKETS: [f64; 10] =
    [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0];

/// A gauge holding an `f64`.
pub type GaugeF64 = Gauge<f64, AtomicU64>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PathLabels {
    path: String,
    relay: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RelayLabels {
    relay: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SessionEndLabels {
    relay: String,
    how: &'static str,
}

/// How a relay's session on the proxy ended (`how` of `polycorn_relay_sessions_ended_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionEnd {
    /// The relay closed it (it stopped in order).
    Closed,
    /// The relay opened a new session while every path of this one was down.
    Restarted,
    /// Every path was down longer than the hold time.
    Lost,
}

impl SessionEnd {
    fn label(self) -> &'static str {
        match self {
            SessionEnd::Closed => "closed",
            SessionEnd::Restarted => "restarted",
            SessionEnd::Lost => "lost",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RadioLabels {
    path: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TechLabels {
    path: String,
    tech: &'static str,
}

/// The access technologies `polycorn_path_radio_technology` has a series for.
pub const RADIO_TECHS: [&str; 5] = ["gsm", "umts", "lte", "nr", "none"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UserLabels {
    user: String,
    direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageLabels {
    stage: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FileLabels {
    file: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

/// The series of one path.
#[derive(Clone, Debug)]
pub struct PathMetrics {
    /// `polycorn_path_rtt_seconds`.
    pub rtt_seconds: GaugeF64,
    /// `polycorn_path_cwnd_bytes`.
    pub cwnd_bytes: Gauge,
    /// `polycorn_path_sent_bytes_total`.
    pub sent_bytes: Counter,
    /// `polycorn_path_received_bytes_total`.
    pub received_bytes: Counter,
    /// `polycorn_path_retransmissions_total`; feed it with
    /// [`PathMetrics::set_kernel_retransmissions`].
    pub retransmissions: Counter,
    /// `polycorn_path_reinjected_bytes_total`.
    pub reinjected_bytes: Counter,
    /// `polycorn_path_redundant_bytes_total`.
    pub redundant_bytes: Counter,
    /// `polycorn_path_up` (0 or 1); see [`PathMetrics::connected`].
    pub up: Gauge,
    /// `polycorn_path_reconnects_total`.
    pub reconnects: Counter,
    /// The current subflow's `tcpi_total_retrans` last seen, shared by all handles of the path.
    kernel_retrans_seen: Arc<AtomicU64>,
}

impl PathMetrics {
    /// Sets the RTT gauge.
    pub fn set_rtt(&self, rtt: Duration) {
        self.rtt_seconds.set(rtt.as_secs_f64());
    }

    /// Sets the congestion window gauge.
    pub fn set_cwnd_bytes(&self, cwnd_bytes: u64) {
        self.cwnd_bytes
            .set(i64::try_from(cwnd_bytes).unwrap_or(i64::MAX));
    }

    /// Feeds the kernel's cumulative retransmission count of the current subflow connection
    /// (`tcpi_total_retrans`); the counter grows by the difference to the last value seen.
    /// A value below the last one means a new connection whose count restarted at zero.
    pub fn set_kernel_retransmissions(&self, total: u64) {
        let prev = self.kernel_retrans_seen.swap(total, Ordering::Relaxed);
        let delta = if total >= prev { total - prev } else { total };
        self.retransmissions.inc_by(delta);
    }

    /// The subflow is connected: `up` = 1 and the kernel retransmission baseline restarts at
    /// zero (a new socket counts from zero). Call on the first connect and every reconnect.
    pub fn connected(&self) {
        self.kernel_retrans_seen.store(0, Ordering::Relaxed);
        self.up.set(1);
    }

    /// The subflow reconnected: counts a reconnect, then [`PathMetrics::connected`].
    pub fn reconnected(&self) {
        self.reconnects.inc();
        self.connected();
    }

    /// The subflow is down: `up` = 0.
    pub fn disconnected(&self) {
        self.up.set(0);
    }
}

/// Direction of passenger bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From passengers towards servers.
    Up,
    /// From servers towards passengers.
    Down,
}

impl Direction {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Up => "up",
            Direction::Down => "down",
        }
    }
}

/// The series of one passenger.
#[derive(Clone, Debug)]
pub struct UserMetrics {
    /// `polycorn_user_bytes_total{direction="up"}`.
    pub up_bytes: Counter,
    /// `polycorn_user_bytes_total{direction="down"}`.
    pub down_bytes: Counter,
}

impl UserMetrics {
    /// The counter for `direction`.
    pub fn bytes(&self, direction: Direction) -> &Counter {
        match direction {
            Direction::Up => &self.up_bytes,
            Direction::Down => &self.down_bytes,
        }
    }
}

/// Label values seen per dimension, for the caps.
#[derive(Debug, Default)]
struct Seen {
    paths: BTreeMap<String, ()>,
    relays: BTreeMap<String, ()>,
    /// Kernel retransmissions already counted, per (relay, path) label pair.
    retrans_seen: BTreeMap<(String, String), Arc<AtomicU64>>,
    users: BTreeMap<String, ()>,
    stages: BTreeMap<String, ()>,
    reasons: BTreeMap<String, ()>,
}

/// A handle on the series `labels` of `family`, created if new.
///
/// The family's lock guard is dropped before returning. Holding one guard while a second
/// lookup in the same family needs the write lock (a new label set) deadlocks, which is easy
/// to do by accident inside one struct literal.
fn series<S, M>(family: &Family<S, M>, labels: &S) -> M
where
    S: Clone + std::hash::Hash + Eq,
    M: Clone + Default,
{
    family.get_or_create(labels).clone()
}

/// Admits `value` into `seen` unless the cap is reached; returns the label to use.
fn admit<V: Default>(seen: &mut BTreeMap<String, V>, value: String, cap: usize) -> String {
    if seen.contains_key(&value) || seen.len() < cap {
        seen.entry(value.clone()).or_default();
        value
    } else {
        OVERFLOW_LABEL.to_owned()
    }
}

/// A label value safe for the text format: `[A-Za-z0-9_.:/-]`, at most
/// [`MAX_LABEL_BYTES`], never empty.
fn sanitize(value: &str) -> String {
    let mut out: String = value
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '/' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(MAX_LABEL_BYTES)
        .collect();
    if out.is_empty() {
        out.push('_');
    }
    out
}

/// Every metric of one relay or proxy process. `Send + Sync`; share it as `Arc<Metrics>`.
pub struct Metrics {
    registry: Registry,
    seen: Mutex<Seen>,
    path_rtt: Family<PathLabels, GaugeF64>,
    path_cwnd: Family<PathLabels, Gauge>,
    path_sent: Family<PathLabels, Counter>,
    path_received: Family<PathLabels, Counter>,
    path_retrans: Family<PathLabels, Counter>,
    path_reinjected: Family<PathLabels, Counter>,
    path_redundant: Family<PathLabels, Counter>,
    path_up: Family<PathLabels, Gauge>,
    path_reconnects: Family<PathLabels, Counter>,
    user_bytes: Family<UserLabels, Counter>,
    stage_decisions: Family<StageLabels, Counter>,
    frames_rejected: Family<ReasonLabels, Counter>,
    passenger_refusals: Family<ReasonLabels, Counter>,
    sessions_refused: Family<RelayLabels, Counter>,
    tls_not_after: Family<FileLabels, Gauge>,
    relay_tls_not_after: Family<RelayLabels, Gauge>,
    /// `polycorn_proxy_tls_not_after_seconds` (relay): when the proxy's certificate ends.
    pub proxy_tls_not_after: Gauge,
    /// `polycorn_reorder_wait_seconds`.
    pub reorder_wait: Histogram,
    /// `polycorn_cell_loss_report_delay_seconds`.
    cell_loss_report_delay: Family<RelayLabels, Histogram, fn() -> Histogram>,
    /// `polycorn_linkdb_rides`.
    linkdb_rides: Gauge,
    /// `polycorn_linkdb_cells`.
    linkdb_cells: Gauge,
    /// `polycorn_linkdb_built_seconds`.
    linkdb_built: Gauge,
    /// `polycorn_linkdb_newest_ride_seconds`.
    linkdb_newest_ride: Gauge,
    /// `polycorn_linkdb_rebuild_failures_total`.
    pub linkdb_rebuild_failures: Counter,
    /// `polycorn_flows_open`.
    pub flows_open: Gauge,
    /// `polycorn_session_buffered_bytes`.
    pub session_buffered: Gauge,
    /// `polycorn_flows_total`.
    pub flows_total: Counter,
    /// `polycorn_flows_reset_total`.
    pub flows_reset: Counter,
    /// `polycorn_flows_held_total`.
    pub flows_held: Counter,
    /// `polycorn_proxy_failovers_total`.
    pub proxy_failovers: Counter,
    /// `polycorn_session_renewals_total`.
    pub session_renewals: Counter,
    /// `polycorn_refresh_requests_total`.
    pub refresh_asked: Counter,
    /// `polycorn_peers_rejected_total`.
    pub peers_rejected: Counter,
    relay_sessions: Family<RelayLabels, Counter>,
    relay_sessions_ended: Family<SessionEndLabels, Counter>,
    context_fixes: Family<RelayLabels, Counter>,
    context_recorded: Family<RelayLabels, Counter>,
    radio_rsrp: Family<RadioLabels, GaugeF64>,
    radio_cell: Family<RadioLabels, GaugeF64>,
    radio_tech: Family<TechLabels, Gauge>,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics")
            .field("flows_open", &self.flows_open.get())
            .field("flows_total", &self.flows_total.get())
            .finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// All families registered, no series yet.
    pub fn new() -> Self {
        let mut m = Metrics {
            registry: Registry::default(),
            seen: Mutex::new(Seen::default()),
            path_rtt: Family::default(),
            path_cwnd: Family::default(),
            path_sent: Family::default(),
            path_received: Family::default(),
            path_retrans: Family::default(),
            path_reinjected: Family::default(),
            path_redundant: Family::default(),
            path_up: Family::default(),
            path_reconnects: Family::default(),
            user_bytes: Family::default(),
            stage_decisions: Family::default(),
            frames_rejected: Family::default(),
            passenger_refusals: Family::default(),
            sessions_refused: Family::default(),
            tls_not_after: Family::default(),
            relay_tls_not_after: Family::default(),
            proxy_tls_not_after: Gauge::default(),
            reorder_wait: Histogram::new(REORDER_WAIT_BUCKETS.iter().copied()),
            cell_loss_report_delay: Family::new_with_constructor(|| {
                Histogram::new(CELL_LOSS_DELAY_BUCKETS.iter().copied())
            }),
            linkdb_rides: Gauge::default(),
            linkdb_cells: Gauge::default(),
            linkdb_built: Gauge::default(),
            linkdb_newest_ride: Gauge::default(),
            linkdb_rebuild_failures: Counter::default(),
            flows_open: Gauge::default(),
            session_buffered: Gauge::default(),
            flows_total: Counter::default(),
            flows_reset: Counter::default(),
            flows_held: Counter::default(),
            proxy_failovers: Counter::default(),
            session_renewals: Counter::default(),
            refresh_asked: Counter::default(),
            peers_rejected: Counter::default(),
            relay_sessions: Family::default(),
            relay_sessions_ended: Family::default(),
            context_fixes: Family::default(),
            context_recorded: Family::default(),
            radio_rsrp: Family::default(),
            radio_cell: Family::default(),
            radio_tech: Family::default(),
        };
        let r = &mut m.registry;
        r.register_with_unit(
            "polycorn_path_rtt",
            "Smoothed RTT of the path's subflow",
            Unit::Seconds,
            m.path_rtt.clone(),
        );
        r.register_with_unit(
            "polycorn_path_cwnd",
            "Congestion window of the path's subflow",
            Unit::Bytes,
            m.path_cwnd.clone(),
        );
        r.register_with_unit(
            "polycorn_path_sent",
            "Payload bytes written to the path's subflow",
            Unit::Bytes,
            m.path_sent.clone(),
        );
        r.register_with_unit(
            "polycorn_path_received",
            "Payload bytes read from the path's subflow",
            Unit::Bytes,
            m.path_received.clone(),
        );
        r.register(
            "polycorn_path_retransmissions",
            "Kernel TCP retransmissions on the path's subflows",
            m.path_retrans.clone(),
        );
        r.register_with_unit(
            "polycorn_path_reinjected",
            "Bytes sent again on this path after another path failed them",
            Unit::Bytes,
            m.path_reinjected.clone(),
        );
        r.register_with_unit(
            "polycorn_path_redundant",
            "Bytes sent on this path as a redundant copy",
            Unit::Bytes,
            m.path_redundant.clone(),
        );
        r.register(
            "polycorn_path_up",
            "1 while the path's subflow is connected",
            m.path_up.clone(),
        );
        r.register(
            "polycorn_path_reconnects",
            "Reconnections of the path's subflow",
            m.path_reconnects.clone(),
        );
        r.register_with_unit(
            "polycorn_user",
            "Passenger payload bytes by direction",
            Unit::Bytes,
            m.user_bytes.clone(),
        );
        r.register(
            "polycorn_stage_decisions",
            "Scheduling decisions in which the stage moved a path",
            m.stage_decisions.clone(),
        );
        r.register_with_unit(
            "polycorn_reorder_wait",
            "Per out-of-order data segment, time until it could be delivered in order",
            Unit::Seconds,
            m.reorder_wait.clone(),
        );
        r.register_with_unit(
            "polycorn_cell_loss_report_delay",
            "Per cell loss a modem reported, how long its path had been silent then",
            Unit::Seconds,
            m.cell_loss_report_delay.clone(),
        );
        r.register(
            "polycorn_linkdb_rides",
            "Rides the handover predictor in use was built from",
            m.linkdb_rides.clone(),
        );
        r.register(
            "polycorn_linkdb_cells",
            "Cells the handover predictor in use knows",
            m.linkdb_cells.clone(),
        );
        r.register_with_unit(
            "polycorn_linkdb_built",
            "When the handover predictor in use was built, since 1970",
            Unit::Seconds,
            m.linkdb_built.clone(),
        );
        r.register_with_unit(
            "polycorn_linkdb_newest_ride",
            "When the newest ride of known start the predictor learnt from began, since 1970",
            Unit::Seconds,
            m.linkdb_newest_ride.clone(),
        );
        r.register(
            "polycorn_linkdb_rebuild_failures",
            "Reloads whose LinkDB rebuild failed, the predictor in use kept",
            m.linkdb_rebuild_failures.clone(),
        );
        r.register(
            "polycorn_flows_open",
            "Passenger connections open",
            m.flows_open.clone(),
        );
        r.register_with_unit(
            "polycorn_session_buffered",
            "Bytes the sessions hold in their flows' buffers",
            Unit::Bytes,
            m.session_buffered.clone(),
        );
        r.register(
            "polycorn_flows",
            "Passenger connections opened",
            m.flows_total.clone(),
        );
        r.register(
            "polycorn_flows_reset",
            "Passenger connections ended by a reset",
            m.flows_reset.clone(),
        );
        r.register(
            "polycorn_flows_held",
            "Passenger connections held while the proxy drained, then opened at the next proxy",
            m.flows_held.clone(),
        );
        r.register(
            "polycorn_proxy_failovers",
            "Moves to another of the proxy name's addresses, after no path reached the one in use for the hold time",
            m.proxy_failovers.clone(),
        );
        r.register(
            "polycorn_session_renewals",
            "Fresh starts of the session with a proxy that answered with another epoch (another proxy, or a restarted one)",
            m.session_renewals.clone(),
        );
        r.register(
            "polycorn_refresh_requests",
            "Requests to the relay for a fresh subflow after a timeout cut an idle subflow's slow-start threshold",
            m.refresh_asked.clone(),
        );
        r.register(
            "polycorn_frames_rejected",
            "Frames refused by the session, by reason",
            m.frames_rejected.clone(),
        );
        r.register(
            "polycorn_passenger_refusals",
            "Passenger connections refused before they were carried, by reason",
            m.passenger_refusals.clone(),
        );
        r.register(
            "polycorn_sessions_refused",
            "Sessions refused because their relay name had as many live sessions as allowed",
            m.sessions_refused.clone(),
        );
        r.register_with_unit(
            "polycorn_tls_not_after",
            "When the certificate (file=cert) and the CA file (file=ca) stop being valid, since 1970",
            Unit::Seconds,
            m.tls_not_after.clone(),
        );
        r.register_with_unit(
            "polycorn_relay_tls_not_after",
            "When the relay's certificate stops being valid, since 1970 (proxy)",
            Unit::Seconds,
            m.relay_tls_not_after.clone(),
        );
        r.register_with_unit(
            "polycorn_proxy_tls_not_after",
            "When the proxy's certificate stops being valid, since 1970 (relay)",
            Unit::Seconds,
            m.proxy_tls_not_after.clone(),
        );
        r.register(
            "polycorn_peers_rejected",
            "Subflow connections refused",
            m.peers_rejected.clone(),
        );
        r.register(
            "polycorn_relay_sessions",
            "Sessions the relay opened (one per start of the relay process)",
            m.relay_sessions.clone(),
        );
        r.register(
            "polycorn_relay_sessions_ended",
            "Relay sessions that ended, by how",
            m.relay_sessions_ended.clone(),
        );
        r.register(
            "polycorn_context_fixes",
            "Train context fixes received from the relay (each once)",
            m.context_fixes.clone(),
        );
        r.register(
            "polycorn_context_fixes_recorded",
            "Train context fixes written to the relay's context log",
            m.context_recorded.clone(),
        );
        r.register(
            "polycorn_path_radio_rsrp_dbm",
            "Serving cell RSRP the path's modem reports, dBm (NaN: none)",
            m.radio_rsrp.clone(),
        );
        r.register(
            "polycorn_path_radio_cell",
            "Serving cell identity the path's modem reports (NaN: no cell)",
            m.radio_cell.clone(),
        );
        r.register(
            "polycorn_path_radio_technology",
            "1 for the access technology the path's modem is on",
            m.radio_tech.clone(),
        );
        m
    }

    /// [`Metrics::new`] with `polycorn_build_info{role, version} 1`: what a relay
    /// (`role = "relay"`) or proxy (`"proxy"`) serves, so that monitoring can tell the two ends
    /// apart (and see which binary runs where) whatever its scrape jobs are called.
    pub fn with_build(role: &str, version: &str) -> Self {
        let mut m = Self::new();
        m.registry.register(
            "polycorn_build",
            "Which end of polycorn this is, and its binary's version",
            Info::new(vec![
                ("role".to_string(), sanitize(role)),
                // Kept whole (a version with its commit: "0.1.0 (abc1234)"), but without
                // characters the text encoder would not escape.
                (
                    "version".to_string(),
                    version
                        .chars()
                        .filter(|c| !matches!(c, '"' | '\\' | '\n'))
                        .take(MAX_LABEL_BYTES)
                        .collect(),
                ),
            ]),
        );
        m
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        // A panic elsewhere while holding the lock leaves the maps consistent (inserts only).
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets `polycorn_path_up` of every path series of relay `relay` to 0 (the proxy, when a
    /// relay has no session left). Creates no series.
    pub fn relay_paths_down(&self, relay: &str) {
        let relay = sanitize(relay);
        let paths: Vec<String> = self
            .seen()
            .retrans_seen
            .keys()
            .filter(|(r, _)| *r == relay)
            .map(|(_, p)| p.clone())
            .collect();
        for path in paths {
            let l = PathLabels {
                path,
                relay: relay.clone(),
            };
            series(&self.path_up, &l).set(0);
        }
    }

    /// The series of path `name` of relay `relay` (created on first use).
    pub fn path(&self, relay: &str, name: &str) -> PathMetrics {
        let (l, baseline) = {
            let mut seen = self.seen();
            let path = admit(&mut seen.paths, sanitize(name), MAX_PATHS);
            let relay = admit(&mut seen.relays, sanitize(relay), MAX_RELAYS);
            let baseline = seen
                .retrans_seen
                .entry((relay.clone(), path.clone()))
                .or_default()
                .clone();
            (PathLabels { path, relay }, baseline)
        };
        PathMetrics {
            rtt_seconds: series(&self.path_rtt, &l),
            cwnd_bytes: series(&self.path_cwnd, &l),
            sent_bytes: series(&self.path_sent, &l),
            received_bytes: series(&self.path_received, &l),
            retransmissions: series(&self.path_retrans, &l),
            reinjected_bytes: series(&self.path_reinjected, &l),
            redundant_bytes: series(&self.path_redundant, &l),
            up: series(&self.path_up, &l),
            reconnects: series(&self.path_reconnects, &l),
            kernel_retrans_seen: baseline,
        }
    }

    /// The series of passenger `ip` (created on first use; [`OVERFLOW_LABEL`] beyond
    /// [`MAX_USERS`]).
    pub fn user(&self, ip: IpAddr) -> UserMetrics {
        let label = admit(&mut self.seen().users, ip.to_string(), MAX_USERS);
        let up = UserLabels {
            user: label.clone(),
            direction: Direction::Up.as_str(),
        };
        let down = UserLabels {
            user: label,
            direction: Direction::Down.as_str(),
        };
        UserMetrics {
            up_bytes: series(&self.user_bytes, &up),
            down_bytes: series(&self.user_bytes, &down),
        }
    }

    /// Drops passenger `ip`'s series (for example when their last flow closed long ago), which
    /// frees a place under [`MAX_USERS`]. Handles still held keep counting into nothing.
    pub fn remove_user(&self, ip: IpAddr) {
        let label = ip.to_string();
        if self.seen().users.remove(&label).is_some() {
            for direction in [Direction::Up, Direction::Down] {
                self.user_bytes.remove(&UserLabels {
                    user: label.clone(),
                    direction: direction.as_str(),
                });
            }
        }
    }

    /// `polycorn_stage_decisions_total{stage=name}`.
    pub fn stage(&self, name: &str) -> Counter {
        let label = admit(&mut self.seen().stages, sanitize(name), MAX_STAGES);
        series(&self.stage_decisions, &StageLabels { stage: label })
    }

    /// (proxy) Relay `relay` opened a session. Its `polycorn_relay_sessions_ended_total` series
    /// exist from then on, at 0 until a session ends so: a counter born at 1 would show no
    /// increase, and an alert on the first crash would stay silent.
    pub fn relay_session_opened(&self, relay: &str) {
        let relay = admit(&mut self.seen().relays, sanitize(relay), MAX_RELAYS);
        for how in [SessionEnd::Closed, SessionEnd::Restarted, SessionEnd::Lost] {
            let l = SessionEndLabels {
                relay: relay.clone(),
                how: how.label(),
            };
            series(&self.relay_sessions_ended, &l);
        }
        series(&self.relay_sessions, &RelayLabels { relay }).inc();
    }

    /// (proxy) A session of relay `relay` ended, `how`.
    pub fn relay_session_ended(&self, relay: &str, how: SessionEnd) {
        let relay = admit(&mut self.seen().relays, sanitize(relay), MAX_RELAYS);
        let l = SessionEndLabels {
            relay,
            how: how.label(),
        };
        series(&self.relay_sessions_ended, &l).inc();
    }

    /// A cell loss the modem monitor of relay `relay` reported after its path had been silent
    /// for `silent_secs` (`polycorn_cell_loss_report_delay_seconds`).
    pub fn cell_loss_reported(&self, relay: &str, silent_secs: f64) {
        let relay = admit(&mut self.seen().relays, sanitize(relay), MAX_RELAYS);
        self.cell_loss_report_delay
            .get_or_create(&RelayLabels { relay })
            .observe(silent_secs);
    }

    /// The handover predictor now in use: built at `built_secs` (since 1970) from `rides`
    /// rides, the newest of known start begun at `newest_ride_secs`, knowing `cells` cells.
    /// All zero: no predictor.
    pub fn linkdb_in_use(
        &self,
        rides: usize,
        cells: usize,
        built_secs: i64,
        newest_ride_secs: Option<i64>,
    ) {
        self.linkdb_rides.set(rides as i64);
        self.linkdb_cells.set(cells as i64);
        self.linkdb_built.set(built_secs);
        self.linkdb_newest_ride.set(newest_ride_secs.unwrap_or(0));
    }

    /// (relay) Path `path`'s radio as its modem reports it: technology (`gsm`, `umts`, `lte`,
    /// `nr`; None: none), serving cell and RSRP (None: none).
    pub fn set_radio(
        &self,
        path: &str,
        tech: Option<&str>,
        cell: Option<u64>,
        rsrp_dbm: Option<f64>,
    ) {
        let path = admit(&mut self.seen().paths, sanitize(path), MAX_PATHS);
        let l = RadioLabels { path: path.clone() };
        series(&self.radio_rsrp, &l).set(rsrp_dbm.unwrap_or(f64::NAN));
        series(&self.radio_cell, &l).set(cell.map_or(f64::NAN, |c| c as f64));
        let tech = tech.unwrap_or("none");
        for t in RADIO_TECHS {
            series(
                &self.radio_tech,
                &TechLabels {
                    path: path.clone(),
                    tech: t,
                },
            )
            .set(i64::from(t == tech));
        }
    }

    /// (proxy) A new train context fix from relay `relay`; `recorded`: written to its log.
    pub fn context_fix(&self, relay: &str, recorded: bool) {
        let relay = admit(&mut self.seen().relays, sanitize(relay), MAX_RELAYS);
        let l = RelayLabels { relay };
        series(&self.context_fixes, &l).inc();
        if recorded {
            series(&self.context_recorded, &l).inc();
        }
    }

    /// `polycorn_tls_not_after_seconds{file=file}` (`cert` or `ca`): seconds since 1970.
    pub fn set_tls_not_after(&self, file: &str, secs: i64) {
        series(
            &self.tls_not_after,
            &FileLabels {
                file: sanitize(file),
            },
        )
        .set(secs);
    }

    /// (proxy) `polycorn_relay_tls_not_after_seconds{relay=relay}`: seconds since 1970.
    pub fn set_relay_tls_not_after(&self, relay: &str, secs: i64) {
        let relay = admit(&mut self.seen().relays, sanitize(relay), MAX_RELAYS);
        series(&self.relay_tls_not_after, &RelayLabels { relay }).set(secs);
    }

    /// `polycorn_frames_rejected_total{reason=reason}`.
    pub fn frame_rejected(&self, reason: &str) -> Counter {
        let label = admit(&mut self.seen().reasons, sanitize(reason), MAX_REASONS);
        series(&self.frames_rejected, &ReasonLabels { reason: label })
    }

    /// (relay) `polycorn_passenger_refusals_total{reason=reason}`.
    pub fn passenger_refused(&self, reason: &str) -> Counter {
        let label = admit(&mut self.seen().reasons, sanitize(reason), MAX_REASONS);
        series(&self.passenger_refusals, &ReasonLabels { reason: label })
    }

    /// (proxy) `polycorn_sessions_refused_total{relay=relay}`.
    pub fn session_refused(&self, relay: &str) -> Counter {
        let relay = admit(&mut self.seen().relays, sanitize(relay), MAX_RELAYS);
        series(&self.sessions_refused, &RelayLabels { relay })
    }

    /// The OpenMetrics text exposition of every series, ending in `# EOF`.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

/// Serves `GET /metrics` on `listener` until the task is dropped. Never returns; accept
/// errors (such as running out of file descriptors) are logged and retried after a pause.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = permits
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "metrics endpoint: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = handle(stream, &metrics).await {
                tracing::debug!(%peer, error = %e, "metrics endpoint: connection failed");
            }
        });
    }
}

/// What the connection sent before the blank line.
enum Head {
    /// A complete head (without the blank line).
    Complete(Vec<u8>),
    /// The client closed before the head was complete.
    Truncated { empty: bool },
    /// More than [`MAX_REQUEST_HEAD_BYTES`] without a blank line.
    TooLarge,
}

async fn read_head(stream: &mut TcpStream) -> std::io::Result<Head> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(Head::Truncated {
                empty: buf.is_empty(),
            });
        }
        let searched_from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = find_blank_line(&buf[searched_from..]) {
            buf.truncate(searched_from + end);
            return Ok(Head::Complete(buf));
        }
        if buf.len() > MAX_REQUEST_HEAD_BYTES {
            return Ok(Head::TooLarge);
        }
    }
}

/// Offset of the end of the head (start of `\r\n\r\n` or `\n\n`) in `buf`.
fn find_blank_line(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n");
    let lf = buf.windows(2).position(|w| w == b"\n\n");
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

async fn handle(mut stream: TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    let head = match tokio::time::timeout(REQUEST_TIMEOUT, read_head(&mut stream)).await {
        Ok(head) => head?,
        Err(_) => return respond(&mut stream, &Response::status(408, "Request Timeout")).await,
    };
    let response = match head {
        Head::Complete(head) => route(&head, metrics),
        Head::Truncated { empty: true } => return Ok(()),
        Head::Truncated { empty: false } => Response::status(400, "Bad Request"),
        Head::TooLarge => Response::status(431, "Request Header Fields Too Large"),
    };
    respond(&mut stream, &response).await
}

/// Writes the response, closes our side, then discards what the client still sends (briefly),
/// so unread request bytes do not turn our close into a reset that destroys the response.
async fn respond(stream: &mut TcpStream, response: &Response) -> std::io::Result<()> {
    stream.write_all(&response.to_bytes()).await?;
    stream.shutdown().await?;
    let drain = async {
        let mut sink = [0u8; 4096];
        let mut total = 0usize;
        while total < 64 * 1024 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
    Ok(())
}

/// One HTTP response.
#[derive(Debug)]
struct Response {
    code: u16,
    reason: &'static str,
    content_type: &'static str,
    body: String,
    /// HEAD: send the headers only.
    head_only: bool,
    allow: bool,
}

impl Response {
    fn status(code: u16, reason: &'static str) -> Self {
        Response {
            code,
            reason,
            content_type: "text/plain; charset=utf-8",
            body: format!("{code} {reason}\n"),
            head_only: false,
            allow: false,
        }
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.code,
            self.reason,
            self.content_type,
            self.body.len()
        );
        if self.allow {
            out.push_str("Allow: GET, HEAD\r\n");
        }
        out.push_str("\r\n");
        let mut bytes = out.into_bytes();
        if !self.head_only {
            bytes.extend_from_slice(self.body.as_bytes());
        }
        bytes
    }
}

/// Parses a request head and decides the response. Never panics on any input.
fn route(head: &[u8], metrics: &Metrics) -> Response {
    let bad = || Response::status(400, "Bad Request");
    let Ok(head) = std::str::from_utf8(head) else {
        return bad();
    };
    let mut lines = head.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let Some(request_line) = lines.next() else {
        return bad();
    };
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return bad();
    };
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    if !token(method)
        || !matches!(version, "HTTP/1.0" | "HTTP/1.1")
        || !target.starts_with('/')
        || target.bytes().any(|b| b.is_ascii_control())
    {
        return bad();
    }
    for line in lines {
        let Some((name, _)) = line.split_once(':') else {
            return bad();
        };
        if !token(name) {
            return bad();
        }
    }
    let path = target.split(['?', '#']).next().unwrap_or(target);
    if path != "/metrics" {
        return Response::status(404, "Not Found");
    }
    match method {
        "GET" | "HEAD" => Response {
            code: 200,
            reason: "OK",
            content_type: CONTENT_TYPE,
            body: metrics.encode(),
            head_only: method == "HEAD",
            allow: false,
        },
        _ => Response {
            allow: true,
            ..Response::status(405, "Method Not Allowed")
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_never_panics_and_classifies() {
        let m = Metrics::new();
        let code = |head: &[u8]| route(head, &m).code;
        assert_eq!(code(b"GET /metrics HTTP/1.1\r\nHost: x"), 200);
        assert_eq!(code(b"GET /metrics?x=1 HTTP/1.0"), 200);
        assert_eq!(code(b"HEAD /metrics HTTP/1.1"), 200);
        assert_eq!(code(b"POST /metrics HTTP/1.1"), 405);
        assert_eq!(code(b"GET / HTTP/1.1"), 404);
        assert_eq!(code(b"GET /metrics HTTP/2.0"), 400);
        assert_eq!(code(b"GET  /metrics HTTP/1.1"), 400);
        assert_eq!(code(b"GET /metrics HTTP/1.1\r\nno colon"), 400);
        assert_eq!(code(b"GET /metrics HTTP/1.1\r\n folded: x"), 400);
        assert_eq!(code(b"\xff\xfe"), 400);
        assert_eq!(code(b""), 400);
        // Deterministic garbage.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for len in 0..2000usize {
            let bytes: Vec<u8> = (0..len % 97)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % 256) as u8
                })
                .collect();
            let _ = route(&bytes, &m);
        }
    }

    #[test]
    fn blank_line_detection() {
        assert_eq!(find_blank_line(b"GET / HTTP/1.1\r\n\r\n"), Some(14));
        assert_eq!(find_blank_line(b"GET / HTTP/1.1\n\n"), Some(14));
        assert_eq!(find_blank_line(b"GET / HTTP/1.1\r\n"), None);
    }

    #[test]
    fn relay_sessions_are_counted_by_relay_and_how_they_ended() {
        let m = Metrics::new();
        m.relay_session_opened("train-1");
        m.relay_session_opened("train-1");
        m.relay_session_ended("train-1", SessionEnd::Restarted);
        m.relay_session_opened("train-2");
        m.relay_session_ended("train-2", SessionEnd::Closed);
        m.relay_session_ended("train-2", SessionEnd::Lost);
        m.context_fix("train-1", true);
        m.context_fix("train-1", false);
        m.cell_loss_reported("train-1", 0.4);
        m.cell_loss_reported("train-1", 0.9);
        m.cell_loss_reported("train-2", 2.5);
        m.linkdb_in_use(120, 160, 1_796_040_000, Some(1_795_950_000));
        m.linkdb_rebuild_failures.inc();
        let text = m.encode();
        for want in [
            "polycorn_relay_sessions_total{relay=\"train-1\"} 2",
            "polycorn_relay_sessions_total{relay=\"train-2\"} 1",
            "polycorn_relay_sessions_ended_total{relay=\"train-1\",how=\"restarted\"} 1",
            "polycorn_relay_sessions_ended_total{relay=\"train-2\",how=\"closed\"} 1",
            "polycorn_relay_sessions_ended_total{relay=\"train-2\",how=\"lost\"} 1",
            "polycorn_context_fixes_total{relay=\"train-1\"} 2",
            "polycorn_context_fixes_recorded_total{relay=\"train-1\"} 1",
            "polycorn_cell_loss_report_delay_seconds_count{relay=\"train-1\"} 2",
            "polycorn_cell_loss_report_delay_seconds_bucket{le=\"0.5\",relay=\"train-1\"} 1",
            "polycorn_cell_loss_report_delay_seconds_bucket{le=\"1.0\",relay=\"train-1\"} 2",
            "polycorn_cell_loss_report_delay_seconds_count{relay=\"train-2\"} 1",
            "polycorn_linkdb_rides 120",
            "polycorn_linkdb_cells 160",
            "polycorn_linkdb_built_seconds 1796040000",
            "polycorn_linkdb_newest_ride_seconds 1795950000",
            "polycorn_linkdb_rebuild_failures_total 1",
            "polycorn_cell_loss_report_delay_seconds_bucket{le=\"2.0\",relay=\"train-2\"} 0",
            "polycorn_cell_loss_report_delay_seconds_bucket{le=\"3.0\",relay=\"train-2\"} 1",
        ] {
            assert!(text.lines().any(|l| l == want), "no `{want}` in:\n{text}");
        }
    }

    #[test]
    fn labels_are_sanitised_and_capped() {
        assert_eq!(sanitize("a\"b\nc"), "a_b_c");
        assert_eq!(sanitize(""), "_");
        assert_eq!(sanitize(&"x".repeat(100)).len(), MAX_LABEL_BYTES);
        let m = Metrics::new();
        for i in 0..(MAX_USERS as u32 + 10) {
            m.user(IpAddr::from(i.to_be_bytes())).up_bytes.inc();
        }
        let text = m.encode();
        assert!(text.contains("user=\"other\""), "overflow series present");
        let series = text
            .lines()
            .filter(|l| l.starts_with("polycorn_user_bytes_total{"))
            .count();
        assert_eq!(series, 2 * (MAX_USERS + 1));
        m.remove_user(IpAddr::from(0u32.to_be_bytes()));
        m.user(IpAddr::from(u32::MAX.to_be_bytes())).up_bytes.inc();
        assert!(m.encode().contains("user=\"255.255.255.255\""));
    }
}
