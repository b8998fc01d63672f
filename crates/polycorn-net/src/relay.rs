//! The on-train relay: intercepts passengers' TCP (transparent TPROXY listeners and SOCKS5),
//! and carries it to the proxy.
//!
//! * `polycorn` mode: one session over one pinned, TLS-encrypted subflow per path; the relay
//!   schedules the uplink with the configured pipeline and sends train context on every path.
//! * `mptcp` / `single` modes (baselines, [`crate::direct`]): each passenger connection becomes
//!   its own kernel-MPTCP connection to the proxy, or its own TCP connection over the path
//!   assigned to that passenger (passengers round-robin over the SIMs).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use polycorn_proto::{
    CloseReason, ContextInfo, Destination, HelloOutcome, OpenStatus, Role, Session,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::activation::Inherited;
use crate::direct::{self, DirectMode};
use crate::engine::Engine;
use crate::guard::RelayGate;
use crate::proxy_addr::ProxyResolver;
use crate::random::random_u64;
use crate::socks5;
use crate::subflow;

pub use crate::carrier::Carrier;
pub(crate) use crate::path::path_target;
pub use crate::path::RelayPath;
pub use crate::tuning::Tuning;

/// How passengers' traffic is carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// polycorn: all flows over all paths, scheduled per chunk.
    Polycorn,
    /// Baseline: one kernel MPTCP connection per passenger connection (default scheduler).
    Mptcp,
    /// Baseline: one TCP connection per passenger connection over the passenger's SIM.
    Single,
}

/// Everything the relay needs, already validated.
#[derive(Clone)]
pub struct RelayOptions {
    /// Carriage mode.
    pub mode: Mode,
    /// Uplink pipeline spec (polycorn mode).
    pub pipeline: String,
    /// Paths, index = position.
    pub paths: Vec<RelayPath>,
    /// TLS client configuration (polycorn mode). A reload replaces it: paths connect with the
    /// latest, and each path replaces a subflow made with older credentials at its next idle
    /// moment ([`RENEW_WITHIN`] at the latest).
    pub tls: Option<crate::live::Live<rustls::ClientConfig>>,
    /// Transparent (TPROXY) listeners.
    pub transparent: Vec<SocketAddr>,
    /// The passengers' interface (`intercept.lan_device`): the transparent listeners take only
    /// connections that arrive on it (`SO_BINDTODEVICE`), never those from the cellular side.
    pub lan_device: Option<String>,
    /// Per-passenger limits (`[limits]`).
    pub passenger_limits: crate::guard::PassengerLimits,
    /// Where to count refused passenger connections.
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
    /// SOCKS5 listener.
    pub socks5: Option<SocketAddr>,
    /// DNS: UDP listen address and the resolver reached through the proxy.
    pub dns: Option<(SocketAddr, SocketAddr)>,
    /// Proxy port of the baselines' tunnels.
    pub tunnel_port: u16,
    /// Session tunables.
    pub tuning: Tuning,
    /// Which idle subflows are replaced with a fresh connection.
    pub idle_refresh: crate::config::IdleRefresh,
    /// Handover predictor of the uplink scheduler (LinkDB), fed with the relay's own context.
    /// None: no prediction (HPR never throttles).
    pub predictor: Option<crate::predictor::PredictorFactory>,
}

impl std::fmt::Debug for RelayOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayOptions")
            .field("mode", &self.mode)
            .field("pipeline", &self.pipeline)
            .field("paths", &self.paths)
            .finish_non_exhaustive()
    }
}

/// Start the relay: bind listeners (errors name the address), start subflows; returns the
/// carrier (for metrics and context), the set of running tasks, and apart from those the
/// passenger listeners' tasks (transparent, SOCKS5, DNS): a relay that stops aborts those
/// first, so that no passenger connection is accepted only to be reset, before it closes its
/// session. Dropping either set stops its tasks.
///
/// A listener whose address is among the `inherited` sockets (systemd socket activation) uses
/// that socket instead of binding one; a passed socket no listener uses is an error.
pub async fn start(
    opts: RelayOptions,
    context: Option<mpsc::Receiver<ContextInfo>>,
    mut inherited: Inherited,
) -> Result<(Carrier, JoinSet<()>, JoinSet<()>), String> {
    // Match the passed sockets first: a socket unit that disagrees with the configuration
    // fails the start before any subflow is made.
    let mut configured = Vec::new();
    let mut transparent = Vec::new();
    for addr in &opts.transparent {
        configured.push(format!("TCP {addr} (transparent)"));
        transparent.push((*addr, inherited.take_listener(*addr, true)?));
    }
    let mut socks5 = None;
    if let Some(addr) = opts.socks5 {
        configured.push(format!("TCP {addr} (SOCKS5)"));
        socks5 = Some((addr, inherited.take_listener(addr, false)?));
    }
    let mut dns = None;
    if let Some((listen, upstream)) = opts.dns {
        configured.push(format!("UDP {listen} (DNS)"));
        dns = Some((listen, upstream, inherited.take_udp(listen)?));
    }
    inherited.check_all_used("relay", &configured)?;
    let mut tasks = JoinSet::new();
    let mut listeners = JoinSet::new();
    let carrier = match opts.mode {
        Mode::Polycorn => {
            let tls = opts
                .tls
                .clone()
                .ok_or("polycorn mode needs TLS credentials ([tls])")?;
            // Never the id a path check uses.
            let id = random_u64().max(polycorn_proto::CHECK_SESSION + 1);
            let mut cfg = opts.tuning.session_config(Role::Relay, id, &opts.pipeline);
            cfg.epoch = random_u64();
            let session =
                Session::new(cfg).map_err(|e| format!("scheduler `{}`: {e}", opts.pipeline))?;
            let predictor = crate::predictor::make_predictor(opts.predictor.as_ref());
            let (engine, events) = Engine::new(session, predictor);
            info!(session = format!("{id:016x}"), pipeline = %opts.pipeline, paths = opts.paths.len(), "relay session");
            tasks.spawn(engine.clone().run_timer());
            tasks.spawn(log_events(events));
            // Paths that name the same proxy share its resolver, so all reach the same proxy.
            let mut resolvers = std::collections::BTreeMap::new();
            for (i, p) in opts.paths.iter().enumerate() {
                let resolver = resolvers
                    .entry(p.proxy.clone())
                    .or_insert_with(|| {
                        let r = ProxyResolver::new(
                            p.proxy.clone(),
                            opts.tuning
                                .hold_time
                                .max(crate::proxy_addr::MIN_FAILOVER_AFTER),
                        );
                        let e = engine.downgrade();
                        r.on_failover(move || {
                            if let Some(e) = e.upgrade() {
                                e.fail_over();
                            }
                        });
                        // Paths may name different proxies' names: none may still work.
                        let e = engine.downgrade();
                        r.fail_over_only_if(move || {
                            e.upgrade()
                                .is_some_and(|e| e.inspect(|s| !s.any_path_usable()))
                        });
                        r
                    })
                    .clone();
                tasks.spawn(maintain_path(
                    engine.clone(),
                    i as u8,
                    p.clone(),
                    resolver,
                    tls.clone(),
                    opts.tuning.subflow_sockopts(),
                    opts.idle_refresh,
                ));
            }
            if let Some(mut rx) = context {
                let e = engine.clone();
                tasks.spawn(async move {
                    while let Some(ctx) = rx.recv().await {
                        // Our own predictor first (uplink), then the proxy's (downlink).
                        e.on_context(&ctx);
                        e.with(|s, now| s.send_context(now, &ctx));
                    }
                });
            }
            Carrier::Session(engine)
        }
        Mode::Mptcp | Mode::Single => {
            let mode = if opts.mode == Mode::Mptcp {
                DirectMode::Mptcp
            } else {
                DirectMode::Single
            };
            Carrier::Direct(Arc::new(direct::Tunnels::new(
                mode,
                opts.paths.clone(),
                opts.tunnel_port,
                opts.tuning.congestion.clone(),
            )?))
        }
    };
    let gate = crate::guard::RelayGate::new(opts.passenger_limits, opts.metrics.clone());
    let lan = opts.lan_device.as_deref();
    if lan.is_none() && !transparent.is_empty() {
        warn!(
            "the transparent listeners take connections from every interface, the carriers' \
             included: set intercept.lan_device to the passengers' interface (connections to \
             the relay's own addresses are refused either way)"
        );
    }
    for (addr, passed) in transparent {
        let l = match passed {
            Some(l) => {
                info!(%addr, lan_device = lan.unwrap_or("any"), "transparent (TPROXY) listener, passed by systemd");
                crate::intercept::bind_to_device(&l, lan).and_then(|()| TcpListener::from_std(l))
            }
            None => {
                info!(%addr, lan_device = lan.unwrap_or("any"), "transparent (TPROXY) listener");
                crate::intercept::transparent_listener(addr, lan)
            }
        }
        .map_err(|e| format!("transparent listener on {addr}: {e}"))?;
        listeners.spawn(accept_transparent(l, carrier.clone(), gate.clone()));
    }
    if let Some((addr, passed)) = socks5 {
        let l = match passed {
            Some(l) => {
                info!(%addr, "SOCKS5 listener, passed by systemd");
                TcpListener::from_std(l)
            }
            None => {
                info!(%addr, "SOCKS5 listener");
                TcpListener::bind(addr).await
            }
        }
        .map_err(|e| format!("SOCKS5 listener on {addr}: {e}"))?;
        listeners.spawn(accept_socks5(l, carrier.clone(), gate.clone()));
    }
    if let Some((listen, upstream, passed)) = dns {
        let sock = match passed {
            Some(s) => {
                info!(%listen, %upstream, "DNS relay, socket passed by systemd");
                tokio::net::UdpSocket::from_std(s)
            }
            None => {
                info!(%listen, %upstream, "DNS relay");
                tokio::net::UdpSocket::bind(listen).await
            }
        }
        .map_err(|e| format!("DNS listener on {listen}: {e}"))?;
        listeners.spawn(crate::dns::serve(
            sock,
            upstream,
            carrier.clone(),
            gate.clone(),
        ));
    }
    Ok((carrier, tasks, listeners))
}

async fn log_events(mut rx: mpsc::UnboundedReceiver<polycorn_proto::Event>) {
    while let Some(ev) = rx.recv().await {
        match ev {
            polycorn_proto::Event::SessionLost => {
                warn!("every path has been down longer than the hold time: passengers' connections were reset")
            }
            polycorn_proto::Event::PeerClosed {
                reason,
                message,
                flows_reset,
            } => {
                let why = match (reason, flows_reset) {
                    (CloseReason::Protocol | CloseReason::Limit, _) => {
                        "the proxy closed the session for a fault it found in what this relay \
                         sent (a bug, or another gateway using this relay's credentials)"
                    }
                    (_, 0) => {
                        "the proxy closed the session (a proxy restart or upgrade); no \
                         passenger connection was open"
                    }
                    _ => {
                        "the proxy closed the session (a proxy restart or upgrade): passengers' \
                         connections were reset"
                    }
                };
                warn!(?reason, message = %message, flows_reset, "{why}; reconnecting")
            }
            polycorn_proto::Event::PeerDraining => {
                info!(
                    "the proxy drains before it stops: new passenger connections wait for the \
                     next proxy (the open ones carry on)"
                )
            }
            polycorn_proto::Event::FlowOpened { flow, status } if status != OpenStatus::Ok => {
                debug!(flow, ?status, "proxy could not open flow")
            }
            _ => {}
        }
    }
}

/// How long a probe connection's TCP handshake may take on a silent path. Short: a SYN lost in
/// a blackout is better replaced by a fresh probe than retried after the kernel's 1 s, 2 s, 4 s.
const PROBE_CONNECT_TIMEOUT: Duration = Duration::from_millis(1500);
/// How long a probe may take for TLS and the Hello exchange once its TCP handshake got through.
/// Longer: the proxy drops the old subflow as soon as the probe's Hello arrives, so a probe
/// abandoned after that point leaves the path with no subflow at all until a new connection is
/// made (seconds on a path that was just recovering).
const PROBE_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// While a path's TCP handshake has not got through, a new attempt starts this often: after a
/// blackout the path is used again within this (plus a round trip), not when a SYN lost in it
/// is next retransmitted (1 s, 2 s, 4 s after the first).
const CONNECT_STAGGER: Duration = Duration::from_millis(250);
/// A probe's whole allowance.
const PROBE_TIMEOUTS: subflow::ConnectTimeouts = subflow::ConnectTimeouts {
    tcp: PROBE_CONNECT_TIMEOUT,
    handshake: PROBE_HANDSHAKE_TIMEOUT,
    tcp_stagger: Some(CONNECT_STAGGER),
};
/// A path without a subflow (at start, or after its subflow ended) connects with these.
const CONNECT_TIMEOUTS: subflow::ConnectTimeouts = subflow::ConnectTimeouts {
    tcp_stagger: Some(CONNECT_STAGGER),
    ..subflow::ConnectTimeouts::DEFAULT
};
/// How often the relay looks at an idle subflow's congestion state.
const REFRESH_CHECK: Duration = Duration::from_secs(1);
/// A subflow younger than this is never refreshed (at most one refresh per path this often).
const REFRESH_MIN_AGE: Duration = Duration::from_secs(5);
/// A slow-start threshold below this many segments means a loss hit the subflow while its
/// window was small (idle): worth a fresh connection.
const REFRESH_SSTHRESH_SEGMENTS: u32 = 20;
/// With [`IdleRefresh::Used`](crate::config::IdleRefresh::Used), an idle subflow that carried
/// this many bytes of downlink data frames since it came up is replaced.
const REFRESH_USED_BYTES: u64 = 256 << 10;
/// A path counts as idle when fewer bytes than this crossed it (either way) in the last
/// [`REFRESH_CHECK`] (probes and their answers are far below).
const REFRESH_QUIET_BYTES: u64 = 4096;

/// Whether a path carried fewer than [`REFRESH_QUIET_BYTES`] either way between two readings of
/// its counters (the refresh's and the renewal's measure of an idle path).
fn quiet_between(
    before: &polycorn_proto::PathCounters,
    now: &polycorn_proto::PathCounters,
) -> bool {
    now.rx_bytes.saturating_sub(before.rx_bytes) < REFRESH_QUIET_BYTES
        && now.tx_bytes.saturating_sub(before.tx_bytes) < REFRESH_QUIET_BYTES
}
/// After a reload replaced the TLS credentials, a path replaces its subflow (made with the
/// old ones) at its first idle moment, or after this long when it never is idle: so the proxy
/// soon sees the renewed certificate. Nothing in flight is lost (make before break).
pub const RENEW_WITHIN: Duration = Duration::from_secs(300);
/// Longest pause between a path's attempts to renew its subflow with credentials that fail.
const RENEW_RETRY_MAX: Duration = Duration::from_secs(60);

/// How often the relay looks for a subflow stuck in RTO back-off on a path that works.
const BACKOFF_CHECK: Duration = Duration::from_millis(250);
/// A subflow whose own TCP has stayed in RTO back-off this long, while frames from the proxy
/// keep arriving on its path, is replaced.
const BACKOFF_MIN: Duration = Duration::from_millis(500);

/// First pause after a failed connection attempt; it doubles with each failure in a row.
const RETRY_MIN: Duration = Duration::from_millis(100);
/// Longest pause between attempts that failed on coverage (timeouts, resets, no route): a
/// path coming out of a blackout is tried again within this.
const RETRY_MAX: Duration = Duration::from_secs(2);
/// Longest pause between attempts the proxy refused ([`subflow::HandshakeError::refused_by_proxy`]:
/// revoked, certificate, protocol version). Each costs the proxy a handshake and repeats until
/// an operator acts; a relay let in again (revocation lifted) is back within this.
const REFUSED_RETRY_MAX: Duration = Duration::from_secs(60);
/// A subflow replaced as silent sooner than this after it came up counts towards
/// [`SILENT_HINT_AFTER`].
const SHORT_LIVED: Duration = Duration::from_secs(10);
/// Short-lived silent subflows in a row of one path after which the relay warns of a path-MTU
/// black hole: the handshake's small packets get through, the data's full-sized ones do not,
/// so every new subflow falls silent as soon as it carries data.
const SILENT_HINT_AFTER: u32 = 4;

/// The pause between attempts that reached another proxy than the session's, while other
/// paths still reach the session's ([`subflow::HandshakeError::OtherProxy`]): each costs that
/// proxy a handshake, and the path needs it only once the session's proxy is gone (its other
/// paths then find that out themselves).
const OTHER_PROXY_RETRY: Duration = Duration::from_secs(5);
/// How often a path waiting after reaching another proxy looks whether it may join now.
const OTHER_PROXY_CHECK: Duration = Duration::from_millis(250);
/// What the relay tells another proxy than its session's when a path reaches it: that proxy
/// frees the session its Hello made at once (with an info line, not a subflow's warning).
const OTHER_PROXY_CLOSE: &str = "this relay's session is with another proxy; trying again later";

/// Sleeps `wait` after an attempt reached another proxy than the session's, or less: until no
/// path works with the session's proxy any more, or the session changed (renewed, or closed by
/// its proxy), so that the path tries again at once when it may join.
async fn other_proxy_pause(engine: &Engine, wait: Duration) {
    let (epoch, closed) = engine.inspect(|s| (s.epoch(), s.peer_closed()));
    let until = tokio::time::Instant::now() + wait;
    loop {
        let now = tokio::time::Instant::now();
        if now >= until {
            return;
        }
        tokio::time::sleep((until - now).min(OTHER_PROXY_CHECK)).await;
        let changed = engine
            .inspect(|s| s.epoch() != epoch || s.peer_closed() != closed || !s.any_path_usable());
        if changed {
            return;
        }
    }
}

/// The pause after the failed attempt `e`, given the pause after the previous one in the same
/// run of failures (`None` for the first failure). A refusal by the proxy starts at
/// [`RETRY_MAX`] and doubles up to [`REFUSED_RETRY_MAX`]; another proxy than the session's
/// gives [`OTHER_PROXY_RETRY`]; any other failure doubles from [`RETRY_MIN`] up to
/// [`RETRY_MAX`].
fn retry_pause(previous: Option<Duration>, e: &subflow::HandshakeError) -> Duration {
    if matches!(e, subflow::HandshakeError::OtherProxy(_)) {
        return OTHER_PROXY_RETRY;
    }
    let doubled = previous.map_or(RETRY_MIN, |p| p * 2);
    if e.refused_by_proxy() {
        doubled.clamp(RETRY_MAX, REFUSED_RETRY_MAX)
    } else {
        doubled.clamp(RETRY_MIN, RETRY_MAX)
    }
}

/// A path that has had no subflow this long, with every connection attempt failing, is
/// reported as a warning: shorter outages (blackouts, tunnels) are routine on a train.
const DOWN_WARN_AFTER: Duration = Duration::from_secs(30);
/// While the attempts keep failing, the warning is repeated this often.
const DOWN_REWARN: Duration = Duration::from_secs(300);

/// What the operator hears of one path's failed connection attempts. A failure that points at
/// configuration or credentials ([`subflow::HandshakeError::is_setup`]: a device that does
/// not exist, an address not on this host, a certificate the proxy rejects, another protocol
/// version) is a warning at once, once per distinct error; any failure becomes a warning once
/// the path has been without a subflow for [`DOWN_WARN_AFTER`], then every [`DOWN_REWARN`].
/// The rest stays at debug. Pure: the caller passes the time.
#[derive(Debug, Default)]
struct ConnectFailures {
    /// First failure of the current run of failures.
    since: Option<std::time::Instant>,
    /// Failed attempts in the current run.
    attempts: u32,
    /// Last warning of this run: when, and the error it named.
    warned: Option<(std::time::Instant, String)>,
}

/// A warning to log about a path's failed attempts.
#[derive(Debug, PartialEq)]
struct DownWarning {
    /// Failed attempts so far in this run.
    attempts: u32,
    /// Since the first of them.
    down: Duration,
}

impl ConnectFailures {
    /// Record a failed attempt at `now`; `Some` when it is worth a warning.
    fn failed(&mut self, now: std::time::Instant, setup: bool, error: &str) -> Option<DownWarning> {
        let since = *self.since.get_or_insert(now);
        self.attempts += 1;
        let down = now.saturating_duration_since(since);
        let warn = match &self.warned {
            None => setup || down >= DOWN_WARN_AFTER,
            Some((at, said)) => {
                (setup && said != error) || now.saturating_duration_since(*at) >= DOWN_REWARN
            }
        };
        if !warn {
            return None;
        }
        self.warned = Some((now, error.to_string()));
        Some(DownWarning {
            attempts: self.attempts,
            down,
        })
    }

    /// A connection got through at `now`: the run is over. `Some` (how long the path was
    /// without a subflow, and how many attempts failed) when a warning had been logged, so the
    /// recovery is worth saying too.
    fn connected(&mut self, now: std::time::Instant) -> Option<DownWarning> {
        let run = std::mem::take(self);
        run.warned.map(|_| DownWarning {
            attempts: run.attempts,
            down: run
                .since
                .map_or(Duration::ZERO, |s| now.saturating_duration_since(s)),
        })
    }
}

/// Why a subflow was replaced by a fresh connection.
enum Replace {
    /// The path stayed silent.
    Silent,
    /// Refresh of an idle subflow whose slow-start threshold collapsed (segments).
    Refresh(u32),
    /// Refresh of an idle subflow that carried this many downlink bytes.
    Used(u64),
    /// Refresh the proxy asked for: a timeout cut its end's slow-start threshold (segments)
    /// while the path was idle ([`polycorn_proto::Frame::Refresh`]).
    Asked(u32),
    /// The path carries the proxy's frames again but this subflow's TCP still waits out an
    /// exponentially backed-off retransmission timer (consecutive back-offs).
    BackedOff(u8),
    /// The subflow was made with TLS credentials a reload has since replaced.
    Renewed,
}

/// The end of the proxy's certificate that was warned about last (one warning per value, not
/// per subflow).
static PROXY_CERT_TOLD: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// A subflow's proxy presented a certificate ending at `end` (seconds since 1970): exported as
/// `polycorn_proxy_tls_not_after_seconds`, and a warning when that is within
/// [`crate::tls::EXPIRY_WARNING`] or over.
fn note_proxy_certificate(engine: &Engine, end: i64, addr: SocketAddr) {
    if let Some(m) = engine.metrics() {
        m.proxy_tls_not_after.set(end);
    }
    let v = crate::tls::Validity {
        key: "the proxy's certificate",
        file: addr.to_string().into(),
        not_after: end,
    };
    let now = crate::tls::unix_now();
    if v.needs_warning(now)
        && PROXY_CERT_TOLD.swap(end, std::sync::atomic::Ordering::Relaxed) != end
    {
        warn!("{} (on the proxy)", v.describe(now));
    }
}

/// Keep `path`'s subflow up: connect with backoff, run, and replace it when it stalls (or
/// was made with credentials a reload replaced).
async fn maintain_path(
    engine: Engine,
    path: u8,
    p: RelayPath,
    resolver: Arc<ProxyResolver>,
    tls: crate::live::Live<rustls::ClientConfig>,
    sockopts: subflow::SubflowSockopts,
    idle_refresh: crate::config::IdleRefresh,
) {
    // The path's name in the engine's log lines (the proxy learns it from the Hello).
    let session = engine.with(|s, _| {
        s.set_path_name(path, Some(p.name.clone()));
        s.session_id()
    });
    let sockopts = subflow::SubflowSockopts {
        mtu: p.mtu,
        ..sockopts
    };
    // Whether this path's latest attempt failed (a failing path may look the proxy up again).
    let failing = std::sync::atomic::AtomicBool::new(false);
    // Whether the path's attempts reaching another proxy than the session's were logged.
    let other = std::sync::atomic::AtomicBool::new(false);
    // The generation of TLS credentials the latest connection was made with.
    let made_with = std::sync::atomic::AtomicU64::new(0);
    let (tls, p_ref, sockopts, resolver, failing_ref, engine_ref, other_told, made_with_ref) = (
        &tls, &p, &sockopts, &resolver, &failing, &engine, &other, &made_with,
    );
    let connect = move |timeouts| async move {
        let failed = failing_ref.load(std::sync::atomic::Ordering::Relaxed);
        let target = path_target(p_ref, resolver, failed).await;
        let r = match target {
            Err(e) => Err(e),
            Ok((source, addr)) => {
                // Built at each attempt: a failover (in the resolver, just now) renews the
                // session's epoch.
                let (hello, epoch) =
                    engine_ref.inspect(|s| (s.named_hello(path, &p_ref.name).to_vec(), s.epoch()));
                let (generation, credentials) = tls.current();
                let r = subflow::relay_connect(
                    &subflow::connector(credentials),
                    addr,
                    source,
                    p_ref.device.as_deref(),
                    sockopts,
                    &hello,
                    (session, path, epoch),
                    timeouts,
                )
                .await;
                match r {
                    Ok(est)
                        if engine_ref.inspect(|s| s.hello_outcome(epoch, est.peer_epoch))
                            == HelloOutcome::Elsewhere =>
                    {
                        // Said once until the path has a subflow again; a warning if it lasts.
                        if !other_told.swap(true, std::sync::atomic::Ordering::Relaxed) {
                            info!(
                                path = %p_ref.name,
                                proxy = %p_ref.proxy,
                                addr = %est.peer,
                                "the path reached another proxy than the session's, which \
                                 other paths still reach: it waits (and keeps trying) until \
                                 none does"
                            );
                        }
                        let addr = est.peer;
                        subflow::close_session(est.stream, OTHER_PROXY_CLOSE).await;
                        Err(subflow::HandshakeError::OtherProxy(addr))
                    }
                    r => {
                        if r.is_ok() {
                            made_with_ref.store(generation, std::sync::atomic::Ordering::Relaxed);
                        }
                        r
                    }
                }
            }
        };
        failing_ref.store(r.is_err(), std::sync::atomic::Ordering::Relaxed);
        r
    };
    let failures = std::sync::Mutex::new(ConnectFailures::default());
    // The pause `wait` after the failed attempt `e`.
    let pause_after = |e: &subflow::HandshakeError, wait: Duration| {
        let other = matches!(e, subflow::HandshakeError::OtherProxy(_));
        let engine = &engine;
        async move {
            if other {
                other_proxy_pause(engine, wait).await;
            } else {
                tokio::time::sleep(wait).await;
            }
        }
    };
    // Log a failed attempt of a path without a working subflow, as a warning when worth one.
    // (`retry`: the pause before the next attempt)
    let report = |e: &subflow::HandshakeError, what: &str, retry: Duration| {
        let w = failures.lock().expect("connect failures").failed(
            std::time::Instant::now(),
            e.is_setup(),
            &e.to_string(),
        );
        match w {
            Some(w) => warn!(
                path = %p.name,
                device = p.device.as_deref().unwrap_or("-"),
                proxy = %p.proxy,
                attempts = w.attempts,
                down_s = w.down.as_secs(),
                retry_in_s = retry.as_secs_f64(),
                error = %e,
                "path has no subflow: connection attempts fail"
            ),
            None => debug!(path = %p.name, error = %e, "{what} failed"),
        }
    };
    // The pause after the last of the failed attempts in a row, if any.
    let mut pause: Option<Duration> = None;
    let mut next: Option<subflow::Established> = None;
    // Subflows in a row replaced as silent within SHORT_LIVED of coming up.
    let mut silent_streak = 0u32;
    loop {
        let est = match next.take() {
            Some(e) => e,
            None => match connect(CONNECT_TIMEOUTS).await {
                Ok(e) => e,
                Err(e) => {
                    let wait = retry_pause(pause, &e);
                    report(&e, "subflow connect", wait);
                    pause_after(&e, wait).await;
                    pause = Some(wait);
                    continue;
                }
            },
        };
        pause = None;
        other.store(false, std::sync::atomic::Ordering::Relaxed);
        let up_at = std::time::Instant::now();
        let recovered = failures
            .lock()
            .expect("connect failures")
            .connected(std::time::Instant::now());
        // After a warning, how long the path was down and how many attempts failed.
        let source = est.stream.get_ref().0.local_addr().ok().map(|a| a.ip());
        info!(
            path = %p.name,
            proxy = %p.proxy,
            addr = %est.peer,
            source = source.map(tracing::field::display),
            down_s = recovered.as_ref().map(|w| w.down.as_secs()),
            failed_attempts = recovered.as_ref().map(|w| w.attempts),
            "subflow up"
        );
        if let Some(end) = est.peer_cert_not_after {
            note_proxy_certificate(&engine, end, est.peer);
        }
        // Counted as reaching the proxy at this address until it falls silent or ends.
        let reaching = resolver.subflow_up(est.peer);
        let (r, w) = tokio::io::split(est.stream);
        let raw_info = est.raw_info;
        let epochs = (est.epoch, est.peer_epoch);
        let run = engine.run_subflow(path, epochs, est.initial, r, w, est.tcp_info);
        let probing = std::sync::atomic::AtomicBool::new(false);
        let probe = || async {
            probing.store(true, std::sync::atomic::Ordering::Relaxed);
            let r = connect(PROBE_TIMEOUTS).await;
            probing.store(false, std::sync::atomic::Ordering::Relaxed);
            r
        };
        // A probe that replaces a working subflow (refresh, back-off) failed: the path still
        // has its subflow, nothing to warn about.
        let spare_probe = || async {
            match probe().await {
                Ok(e) => Some(e),
                Err(e) => {
                    debug!(path = %p.name, error = %e, "probe connection failed");
                    if matches!(e, subflow::HandshakeError::OtherProxy(_)) {
                        // Not again before the pause (each costs that proxy a handshake).
                        other_proxy_pause(&engine, OTHER_PROXY_RETRY).await;
                    }
                    None
                }
            }
        };
        // Watchdog: a path that stays silent (no frame for the session's stall time) is
        // probed with a fresh connection; when the probe gets through, it replaces the old
        // subflow, whose TCP may sit in exponential RTO back-off for a long time.
        let watchdog = async {
            let mut silent = 0u32;
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let stalled = engine.inspect(|s| s.path_attached(path) && !s.path_usable(path));
                silent = if stalled { silent + 1 } else { 0 };
                if silent >= 2 {
                    reaching.silent();
                    // A path silent this long went through a blackout: both ends' TCP on the
                    // old subflow sit in retransmission back-off with a collapsed window, and
                    // the proxy's end cannot be seen from here. Probe, with no pause between
                    // probes, until a fresh subflow is up, also when the old one speaks again
                    // meanwhile (keeping it gave 2-3x slower answers for a second or two).
                    let mut pause = None;
                    loop {
                        match probe().await {
                            Ok(e) => return (e, Replace::Silent),
                            // A path in a blackout: no pause (a probe bounds itself). A
                            // refusal, or another proxy than the session's: the proxy answers
                            // at once, so pause as between attempts.
                            Err(e)
                                if e.refused_by_proxy()
                                    || matches!(e, subflow::HandshakeError::OtherProxy(_)) =>
                            {
                                let wait = retry_pause(pause, &e);
                                report(&e, "probe connection", wait);
                                pause_after(&e, wait).await;
                                pause = Some(wait);
                            }
                            Err(e) => report(&e, "probe connection", Duration::ZERO),
                        }
                    }
                }
            }
        };
        // Refresh: a blackout that hits an idle subflow (only probes in flight) cuts its
        // slow-start threshold to a few segments, and loss-based congestion control then
        // grows the window linearly for many seconds when passengers' data comes back. Such a
        // subflow is replaced, while the path is idle, by a fresh connection that starts in
        // slow start (make before break: nothing in flight is lost). The proxy asks for the
        // same when a timeout cut its own end's threshold (the downlink's), which this end
        // cannot see.
        let refresher = async {
            use crate::config::IdleRefresh;
            let started = std::time::Instant::now();
            let mut last = engine.inspect(|s| s.path_counters(path).unwrap_or_default());
            let rx_at_start = last.rx_bytes;
            // The proxy's request not yet acted on: its threshold, segments.
            let mut asked = None;
            loop {
                if idle_refresh == IdleRefresh::Off {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(REFRESH_CHECK).await;
                let now = engine.inspect(|s| s.path_counters(path).unwrap_or_default());
                let quiet = quiet_between(&last, &now);
                last = now;
                if let Some(ssthresh) = engine.with(|s, _| s.take_refresh_request(path)) {
                    asked = Some(ssthresh);
                }
                if !quiet {
                    // Data crossed the path since: it ran with the window it had.
                    asked = None;
                }
                if started.elapsed() < REFRESH_MIN_AGE || !quiet {
                    continue;
                }
                let Ok(i) = raw_info() else { continue };
                let collapsed = i.snd_ssthresh < REFRESH_SSTHRESH_SEGMENTS;
                let carried = now.rx_bytes.saturating_sub(rx_at_start);
                let used = idle_refresh == IdleRefresh::Used && carried >= REFRESH_USED_BYTES;
                // Probes only: on a path whose RTT exceeds the probe interval a probe is always
                // in flight, and nothing in flight was never seen there. What the old subflow
                // has in flight is sent again on the fresh one.
                let idle =
                    crate::sockopt::probes_only(u64::from(i.unacked), u64::from(i.notsent_bytes))
                        && i.backoff == 0;
                if (collapsed || used || asked.is_some())
                    && idle
                    && engine.inspect(|s| s.path_usable(path))
                {
                    if let Some(e) = spare_probe().await {
                        let why = match asked {
                            _ if collapsed => Replace::Refresh(i.snd_ssthresh),
                            Some(theirs) => Replace::Asked(theirs),
                            None => Replace::Used(carried),
                        };
                        return (e, why);
                    }
                }
            }
        };
        // Back-off: after a blackout the proxy's retransmission may get through first; its
        // frames then arrive again (the path is not silent), while this end's own
        // retransmission timer, doubled at every RTO of the blackout, can hold everything the
        // relay sends on the path for seconds more. Once frames have arrived during such a
        // back-off, the subflow is replaced (what it had in flight is sent again on the other
        // paths and on the fresh connection).
        let backed_off = async {
            // (when the back-off was first seen, frames received by then)
            let mut since: Option<(std::time::Instant, u64)> = None;
            loop {
                tokio::time::sleep(BACKOFF_CHECK).await;
                let rx = engine.inspect(|s| s.path_counters(path).unwrap_or_default().rx_frames);
                let Ok(i) = raw_info() else { continue };
                if i.backoff == 0 || i.unacked == 0 {
                    since = None;
                    continue;
                }
                let (first, rx0) = *since.get_or_insert((std::time::Instant::now(), rx));
                if first.elapsed() >= BACKOFF_MIN
                    && rx > rx0
                    && !probing.load(std::sync::atomic::Ordering::Relaxed)
                {
                    if let Some(e) = spare_probe().await {
                        return (e, Replace::BackedOff(i.backoff));
                    }
                    // Probe failed: wait for more frames from the proxy before the next one.
                    since = Some((std::time::Instant::now(), rx));
                }
            }
        };
        // Renewal: a reload replaced the TLS credentials since this subflow was made. It is
        // replaced at the path's first idle second (no passengers' data either way), or
        // after RENEW_WITHIN when there is none, so that the proxy sees the new certificate.
        // A proxy that refuses the new credentials is told about once per reload, and tried
        // again less and less often; the subflow made before the reload stays meanwhile.
        let renewed = async {
            let made = made_with.load(std::sync::atomic::Ordering::Relaxed);
            tls.newer_than(made).await;
            let mut since = std::time::Instant::now();
            let (mut wait, mut generation, mut told) = (REFRESH_CHECK, tls.generation(), false);
            let mut last = engine.inspect(|s| s.path_counters(path).unwrap_or_default());
            loop {
                tokio::time::sleep(wait).await;
                if tls.generation() != generation {
                    // Reloaded again (e.g. with the files fixed): from the start.
                    (since, wait, generation, told) = (
                        std::time::Instant::now(),
                        REFRESH_CHECK,
                        tls.generation(),
                        false,
                    );
                }
                // Idle: the path carried less than REFRESH_QUIET_BYTES either way since the
                // last look (its probes and their answers are far below).
                let now = engine.inspect(|s| s.path_counters(path).unwrap_or_default());
                let idle = quiet_between(&last, &now);
                last = now;
                if !((idle || since.elapsed() >= RENEW_WITHIN)
                    && engine.inspect(|s| s.path_usable(path))
                    && !probing.load(std::sync::atomic::Ordering::Relaxed))
                {
                    continue;
                }
                match probe().await {
                    Ok(e) => return (e, Replace::Renewed),
                    Err(e) => {
                        if (e.is_setup() || e.refused_by_proxy())
                            && !std::mem::replace(&mut told, true)
                        {
                            warn!(
                                path = %p.name,
                                error = %e,
                                "the TLS credentials loaded at the reload do not get through: \
                                 the path keeps its subflow made before the reload, but its \
                                 next connection will fail like this; fix the files (check \
                                 them with --check-paths) and reload again"
                            );
                        } else {
                            debug!(path = %p.name, error = %e, "renewal probe failed");
                        }
                        wait = (wait * 2).min(RENEW_RETRY_MAX);
                    }
                }
            }
        };
        let fresh = async {
            tokio::select! {
                f = watchdog => f,
                f = refresher => f,
                f = backed_off => f,
                f = renewed => f,
            }
        };
        tokio::pin!(run, fresh);
        let mut streak = |silent: bool| {
            if up_at.elapsed() >= SHORT_LIVED {
                silent_streak = 0;
            } else if silent {
                silent_streak += 1;
                if silent_streak == SILENT_HINT_AFTER {
                    warn!(
                        path = %p.name,
                        in_a_row = silent_streak,
                        mtu = p.mtu,
                        "the path's subflows connect but fall silent within seconds, again and \
                         again: a carrier that drops full-sized packets without an ICMP answer \
                         (a path-MTU black hole) does this; if it goes on, set (or lower) this \
                         path's `mtu`, e.g. mtu = 1400"
                    );
                }
            }
        };
        let log_replace = |why: &Replace| match why {
            Replace::Silent => info!(path = %p.name, "path silent; replaced its subflow"),
            Replace::Refresh(ssthresh) => info!(
                path = %p.name,
                ssthresh,
                "idle subflow's congestion state collapsed; replaced it with a fresh connection"
            ),
            Replace::Used(bytes) => info!(
                path = %p.name,
                bytes,
                "idle subflow carried data under past conditions; replaced it with a fresh connection"
            ),
            Replace::Asked(ssthresh) => info!(
                path = %p.name,
                proxy_ssthresh = ssthresh,
                "the proxy's end of the idle subflow lost its congestion state to a timeout; \
                 replaced it with a fresh connection as the proxy asked"
            ),
            Replace::BackedOff(backoff) => info!(
                path = %p.name,
                backoff,
                "path works again but the subflow waits in RTO back-off; replaced it with a fresh connection"
            ),
            Replace::Renewed => info!(
                path = %p.name,
                "subflow made with the TLS credentials before the reload; replaced it with a \
                 connection made with the new ones"
            ),
        };
        tokio::select! {
            e = &mut run => {
                if let crate::engine::SubflowError::Ended(why) = e {
                    // The relay shuts down (Engine::shut_down): no reconnecting.
                    debug!(path = %p.name, why, "subflow ended");
                    return;
                }
                // The proxy drops the old subflow as soon as the probe's Hello arrives, which
                // can end this one before the probe's connect returns here: keep the probe.
                // Wait for the probe under way, not longer (a probe bounds itself).
                let f = if probing.load(std::sync::atomic::Ordering::Relaxed) {
                    let probe_over = async {
                        while probing.load(std::sync::atomic::Ordering::Relaxed) {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    };
                    tokio::select! {
                        biased;
                        f = &mut fresh => Some(f),
                        _ = probe_over => None,
                    }
                } else {
                    None
                };
                match f {
                    Some((f, why)) => {
                        log_replace(&why);
                        streak(matches!(why, Replace::Silent));
                        next = Some(f);
                    }
                    None => {
                        if matches!(
                            e,
                            crate::engine::SubflowError::Renewed
                                | crate::engine::SubflowError::Stale
                                | crate::engine::SubflowError::OtherProxy
                        ) {
                            // Said once, as a warning, by the subflow that renewed the epoch;
                            // another proxy: the next attempt says it.
                            info!(path = %p.name, error = %e, "subflow ended");
                        } else if engine.peer_closed() {
                            // Said once, as a warning, when the proxy's Close arrived.
                            info!(path = %p.name, error = %e, "subflow ended by the proxy; reconnecting");
                        } else {
                            warn!(path = %p.name, error = %e, "subflow ended; reconnecting");
                        }
                        streak(false);
                    }
                }
            }
            (f, why) = &mut fresh => {
                log_replace(&why);
                streak(matches!(why, Replace::Silent));
                // The old subflow's chunks may go on the new one (attached next iteration).
                engine.hand_over(path);
                next = Some(f);
            }
        }
    }
}

async fn accept_transparent(l: TcpListener, carrier: Carrier, gate: Arc<RelayGate>) {
    let mut backoff = crate::guard::AcceptBackoff::default();
    loop {
        let (stream, peer) = crate::guard::accept(&l, "transparent", &mut backoff).await;
        let dst = match stream.local_addr() {
            Ok(a) => a,
            Err(e) => {
                warn!(%peer, error = %e, "no original destination");
                continue;
            }
        };
        let dst = Destination::Addr(dst);
        let Some(permit) = gate.admit(peer.ip(), &dst) else {
            refuse(stream, None).await;
            continue;
        };
        let c = carrier.clone();
        tokio::spawn(async move {
            carry(c, permit, stream, peer.ip(), dst, None).await;
        });
    }
}

/// Refuse a passenger's connection: a SOCKS5 client is told "not allowed" first; the
/// connection is then reset.
async fn refuse(mut stream: TcpStream, socks: Option<()>) {
    if socks.is_some() {
        let _ = socks5::reply(&mut stream, socks5::Reply::NotAllowed).await;
    }
    let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
}

async fn accept_socks5(l: TcpListener, carrier: Carrier, gate: Arc<RelayGate>) {
    let mut backoff = crate::guard::AcceptBackoff::default();
    loop {
        let (mut stream, peer) = crate::guard::accept(&l, "SOCKS5", &mut backoff).await;
        // Counted from the accept on: a passenger's handshakes in progress hold descriptors too.
        let Some(permit) = gate.admit_passenger(peer.ip()) else {
            let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
            continue;
        };
        let (c, g) = (carrier.clone(), gate.clone());
        tokio::spawn(async move {
            let req =
                match tokio::time::timeout(Duration::from_secs(10), socks5::handshake(&mut stream))
                    .await
                {
                    Ok(Ok(r)) => r,
                    Ok(Err(e)) => {
                        debug!(%peer, error = %e, "SOCKS5 handshake failed");
                        return;
                    }
                    Err(_) => return,
                };
            let dst = match req.target {
                socks5::Target::Addr(a) => Destination::Addr(a),
                socks5::Target::Name(n, p) => Destination::Name(n, p),
            };
            if !g.destination_ok(peer.ip(), &dst) {
                refuse(stream, Some(())).await;
                return;
            }
            carry(c, permit, stream, peer.ip(), dst, Some(())).await;
        });
    }
}

/// Longest a passenger connection waits for a draining proxy to close its session: its drain
/// lasts at most [`crate::config::MAX_DRAIN_S`], its close [`crate::proxy::SHUTDOWN_GRACE`].
const DRAIN_WAIT: Duration = Duration::from_secs(crate::config::MAX_DRAIN_S + 5);

/// While the proxy drains ([`Engine::peer_draining`]), wait until it has closed the session (a
/// flow opened after that goes to the next proxy), at most [`DRAIN_WAIT`]. Returns how long it
/// waited, if at all.
async fn wait_out_drain(engine: &Engine) -> Option<Duration> {
    if !engine.peer_draining() {
        return None;
    }
    let start = tokio::time::Instant::now();
    while engine.peer_draining() && start.elapsed() < DRAIN_WAIT {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Some(start.elapsed())
}

/// Carry one passenger connection. `socks` = answer the SOCKS5 client once the proxy answered.
/// `permit` is held until the connection is over: it counts among the passenger's open
/// connections.
async fn carry(
    carrier: Carrier,
    permit: crate::guard::Permit,
    mut stream: TcpStream,
    user: IpAddr,
    dst: Destination,
    socks: Option<()>,
) {
    let _permit = permit;
    match carrier {
        Carrier::Session(engine) => {
            if let Some(waited) = wait_out_drain(&engine).await {
                engine.note_held();
                debug!(%user, %dst, ?waited, "held while the proxy drained");
            }
            let (flow, sig, opened) = match engine.open_flow(user, dst.clone()) {
                Ok(x) => x,
                Err(e) => {
                    warn!(%user, %dst, error = %e, "cannot open flow");
                    if socks.is_some() {
                        let _ = socks5::reply(&mut stream, socks5::Reply::GeneralFailure).await;
                    }
                    let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
                    return;
                }
            };
            debug!(flow, %user, %dst, "flow opened");
            if socks.is_some() {
                let status = opened.await.unwrap_or(OpenStatus::Failed);
                if socks5::reply(&mut stream, socks5::status_reply(status))
                    .await
                    .is_err()
                    || status != OpenStatus::Ok
                {
                    if status == OpenStatus::Ok {
                        engine.reset_flow(flow, polycorn_proto::ResetReason::PeerReset);
                    }
                    return;
                }
            }
            engine.pump(flow, sig, stream, user, true).await;
        }
        Carrier::Direct(t) => {
            t.carry(stream, user, dst, socks.is_some()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// Blackouts and tunnels are routine: a path that fails to connect for less than
    /// `DOWN_WARN_AFTER` stays quiet, then warns, then repeats only every `DOWN_REWARN`.
    #[test]
    fn coverage_failures_warn_after_30_s_and_then_every_5_min() {
        let t0 = Instant::now();
        let mut f = ConnectFailures::default();
        for s in 0..30 {
            assert_eq!(f.failed(t0 + secs(s), false, "TCP connect timed out"), None);
        }
        assert_eq!(
            f.failed(t0 + secs(30), false, "TCP connect timed out"),
            Some(DownWarning {
                attempts: 31,
                down: secs(30)
            })
        );
        for s in 31..330 {
            assert_eq!(
                f.failed(t0 + secs(s), false, "TCP connect timed out"),
                None,
                "{s}"
            );
        }
        assert!(f
            .failed(t0 + secs(330), false, "TCP connect timed out")
            .is_some());
        assert_eq!(
            f.connected(t0 + secs(340)),
            Some(DownWarning {
                attempts: 331,
                down: secs(340)
            }),
            "the recovery of a path that was warned about is reported"
        );
        // A new run starts from scratch.
        assert_eq!(
            f.failed(t0 + secs(400), false, "TCP connect timed out"),
            None
        );
        assert_eq!(f.connected(t0 + secs(401)), None, "nothing was warned");
    }

    /// A missing device or a rejected certificate does not go away by waiting: the first
    /// failure warns, the same error again does not, a different one does.
    #[test]
    fn setup_failures_warn_at_once_and_once_per_error() {
        let t0 = Instant::now();
        let mut f = ConnectFailures::default();
        let nodev = "pin socket to lte9 (10.0.0.1): No such device (os error 19)";
        assert_eq!(
            f.failed(t0, true, nodev),
            Some(DownWarning {
                attempts: 1,
                down: Duration::ZERO
            })
        );
        assert_eq!(f.failed(t0 + secs(2), true, nodev), None);
        assert!(f
            .failed(t0 + secs(4), true, "read Hello: bad certificate")
            .is_some());
        assert_eq!(
            f.failed(t0 + secs(40), false, "TCP connect timed out"),
            None
        );
        assert!(
            f.failed(t0 + secs(304), true, nodev).is_some(),
            "repeated after 5 min"
        );
    }

    /// Coverage failures are retried within 2 s; refusals back off to a minute, and a refusal
    /// after coverage failures starts at 2 s; another proxy than the session's is tried again
    /// every 5 s.
    #[test]
    fn refused_attempts_back_off_to_a_minute_others_to_two_seconds() {
        use subflow::HandshakeError as E;
        let run = |errors: &[fn() -> E]| {
            let mut pause = None;
            errors
                .iter()
                .map(|e| {
                    let p = retry_pause(pause, &e());
                    pause = Some(p);
                    p.as_millis()
                })
                .collect::<Vec<_>>()
        };
        let cov: fn() -> E = || E::Closed;
        let refused: fn() -> E = || E::Revoked;
        let other: fn() -> E = || E::OtherProxy("10.0.0.1:7700".parse().unwrap());
        assert_eq!(run(&[cov; 7]), [100, 200, 400, 800, 1600, 2000, 2000]);
        assert_eq!(
            run(&[refused; 7]),
            [2000, 4000, 8000, 16000, 32000, 60000, 60000]
        );
        assert_eq!(run(&[cov, cov, refused, cov]), [100, 200, 2000, 2000]);
        assert_eq!(run(&[cov, other, other, cov]), [100, 5000, 5000, 2000]);
    }

    #[test]
    fn handshake_errors_are_told_apart_by_cause() {
        use subflow::HandshakeError as H;
        let io = |kind| std::io::Error::new(kind, "x");
        let setup = H::Setup {
            what: "bind to device lte9".into(),
            source: io(std::io::ErrorKind::NotFound),
        };
        assert!(setup.is_setup());
        let tls = H::Io {
            what: "TLS handshake".into(),
            source: io(std::io::ErrorKind::InvalidData),
        };
        assert!(tls.is_setup(), "a certificate or TLS alert problem");
        assert!(H::Revoked.is_setup(), "revoked: repeats until someone acts");
        assert!(H::Revoked.refused_by_proxy() && tls.refused_by_proxy());
        assert!(
            !setup.refused_by_proxy(),
            "a local failure: the proxy never saw it"
        );
        let refused = H::Io {
            what: "connect".into(),
            source: io(std::io::ErrorKind::ConnectionRefused),
        };
        assert!(!refused.is_setup());
        assert!(
            !refused.refused_by_proxy(),
            "TCP refused: a proxy restarting, back within seconds"
        );
        assert!(!H::Timeout("TCP connect").is_setup());
        assert!(!H::Timeout("TCP connect").refused_by_proxy());
        assert!(!H::Closed.is_setup());
    }
}
