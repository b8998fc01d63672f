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
use polycorn_proto::path_policy::{
    self as path_policy, BackoffWatch, Failure, OtherProxyPause, PathPolicy, Refresh, Renewal,
    Replace, SocketState, Watchdog, BACKOFF_CHECK, OTHER_PROXY_RETRY, WATCHDOG_CHECK,
};
use polycorn_sched::time::Duration as PolicyDuration;

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
const PROBE_CONNECT_TIMEOUT: Duration = std_time(path_policy::PROBE_CONNECT_TIMEOUT);
/// How long a probe may take for TLS and the Hello exchange once its TCP handshake got through.
/// Longer: the proxy drops the old subflow as soon as the probe's Hello arrives, so a probe
/// abandoned after that point leaves the path with no subflow at all until a new connection is
/// made (seconds on a path that was just recovering).
const PROBE_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// While a path's TCP handshake has not got through, a new attempt starts this often
/// ([`path_policy::CONNECT_STAGGER`]).
const CONNECT_STAGGER: Duration = std_time(path_policy::CONNECT_STAGGER);
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
pub use polycorn_proto::path_policy::RENEW_WITHIN;

/// A path policy's span of time as tokio sleeps it.
const fn std_time(d: PolicyDuration) -> Duration {
    Duration::from_micros(d.as_micros())
}

/// A subflow's `TCP_INFO` as the path policy reads it.
fn socket_state(i: &crate::sockopt::TcpInfoRaw) -> SocketState {
    SocketState {
        ssthresh_segments: i.snd_ssthresh,
        unacked_segments: i.unacked,
        notsent_bytes: u64::from(i.notsent_bytes),
        backoff: i.backoff,
    }
}

/// What the relay tells another proxy than its session's when a path reaches it: that proxy
/// frees the session its Hello made at once (with an info line, not a subflow's warning).
const OTHER_PROXY_CLOSE: &str = "this relay's session is with another proxy; trying again later";

/// Sleeps `wait` after an attempt reached another proxy than the session's, or less, as
/// [`OtherProxyPause`] decides: the path tries again at once when it may join.
async fn other_proxy_pause(engine: &Engine, wait: PolicyDuration) {
    let (epoch, closed) = engine.inspect(|s| (s.epoch(), s.peer_closed()));
    let pause = OtherProxyPause::new(engine.now(), wait, epoch, closed);
    while let Some(sleep) = pause.sleep(engine.now()) {
        tokio::time::sleep(std_time(sleep)).await;
        let join =
            engine.inspect(|s| pause.may_join(s.epoch(), s.peer_closed(), s.any_path_usable()));
        if join {
            return;
        }
    }
}

/// The kind of the failed attempt `e` that sets the pause after it
/// ([`retry_pause`](path_policy::retry_pause)).
fn failure(e: &subflow::HandshakeError) -> Failure {
    if matches!(e, subflow::HandshakeError::OtherProxy(_)) {
        Failure::OtherProxy
    } else if e.refused_by_proxy() {
        Failure::Refused
    } else {
        Failure::Coverage
    }
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
    // The path's decisions across its subflows: pauses, warnings, the silent streak.
    let policy = std::sync::Mutex::new(PathPolicy::default());
    let policy_lock = || policy.lock().unwrap_or_else(|e| e.into_inner());
    // The generation of TLS credentials the latest connection was made with.
    let made_with = std::sync::atomic::AtomicU64::new(0);
    let (tls, p_ref, sockopts, resolver, failing_ref, engine_ref, policy_ref, made_with_ref) = (
        &tls,
        &p,
        &sockopts,
        &resolver,
        &failing,
        &engine,
        &policy_lock,
        &made_with,
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
                        if policy_ref().met_other_proxy() {
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
    // The pause `wait` after the failed attempt `e`.
    let pause_after = |e: &subflow::HandshakeError, wait: PolicyDuration| {
        let other = matches!(e, subflow::HandshakeError::OtherProxy(_));
        let engine = &engine;
        async move {
            if other {
                other_proxy_pause(engine, wait).await;
            } else {
                tokio::time::sleep(std_time(wait)).await;
            }
        }
    };
    // Log a failed attempt of a path without a working subflow, as a warning when worth one.
    // (`retry`: the pause before the next attempt)
    let report = |e: &subflow::HandshakeError, what: &str, retry: PolicyDuration| {
        let w = policy_lock().report(engine.now(), e.is_setup(), &e.to_string());
        match w {
            Some(w) => warn!(
                path = %p.name,
                device = p.device.as_deref().unwrap_or("-"),
                proxy = %p.proxy,
                attempts = w.attempts,
                down_s = w.down.as_millis() / 1000,
                retry_in_s = retry.as_secs_f64(),
                error = %e,
                "path has no subflow: connection attempts fail"
            ),
            None => debug!(path = %p.name, error = %e, "{what} failed"),
        }
    };
    let mut next: Option<subflow::Established> = None;
    loop {
        let est = match next.take() {
            Some(e) => e,
            None => match connect(CONNECT_TIMEOUTS).await {
                Ok(e) => e,
                Err(e) => {
                    let wait = policy_lock().connect_failed(failure(&e));
                    report(&e, "subflow connect", wait);
                    pause_after(&e, wait).await;
                    continue;
                }
            },
        };
        let up_at = engine.now();
        let recovered = policy_lock().connected(up_at);
        // After a warning, how long the path was down and how many attempts failed.
        let source = est.stream.get_ref().0.local_addr().ok().map(|a| a.ip());
        info!(
            path = %p.name,
            proxy = %p.proxy,
            addr = %est.peer,
            source = source.map(tracing::field::display),
            down_s = recovered.as_ref().map(|w| w.down.as_millis() / 1000),
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
            let mut watch = Watchdog::default();
            loop {
                tokio::time::sleep(std_time(WATCHDOG_CHECK)).await;
                let stalled = engine.inspect(|s| s.path_attached(path) && !s.path_usable(path));
                if watch.on_look(stalled) {
                    reaching.silent();
                    // A path silent this long went through a blackout: both ends' TCP on the
                    // old subflow sit in retransmission back-off with a collapsed window, and
                    // the proxy's end cannot be seen from here. Probe, with no pause between
                    // probes, until a fresh subflow is up, also when the old one speaks again
                    // meanwhile (keeping it gave 2-3x slower answers for a second or two).
                    let mut retry = path_policy::Retry::default();
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
                                let wait = retry.failed(failure(&e));
                                report(&e, "probe connection", wait);
                                pause_after(&e, wait).await;
                            }
                            Err(e) => report(&e, "probe connection", PolicyDuration::ZERO),
                        }
                    }
                }
            }
        };
        // Refresh: an idle subflow whose congestion state is stale ([`Refresh`]) is
        // replaced by a fresh connection while the path is idle (make before break).
        let refresher = async {
            let counters = engine.inspect(|s| s.path_counters(path).unwrap_or_default());
            let mut refresh = Refresh::new(idle_refresh.into(), engine.now(), counters);
            loop {
                if !refresh.enabled() {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(std_time(path_policy::REFRESH_CHECK)).await;
                let counters = engine.inspect(|s| s.path_counters(path).unwrap_or_default());
                let request = engine.with(|s, _| s.take_refresh_request(path));
                let why = refresh.on_look(
                    engine.now(),
                    counters,
                    request,
                    || raw_info().ok().map(|i| socket_state(&i)),
                    || engine.inspect(|s| s.path_usable(path)),
                );
                if let Some(why) = why {
                    if let Some(e) = spare_probe().await {
                        return (e, why);
                    }
                }
            }
        };
        // Back-off: a subflow whose TCP waits out a backed-off retransmission timer while the
        // proxy's frames arrive again ([`BackoffWatch`]) is replaced (what it had in flight is
        // sent again on the other paths and on the fresh connection).
        let backed_off = async {
            let mut watch = BackoffWatch::default();
            loop {
                tokio::time::sleep(std_time(BACKOFF_CHECK)).await;
                let rx = engine.inspect(|s| s.path_counters(path).unwrap_or_default().rx_frames);
                let socket = raw_info().ok().map(|i| socket_state(&i));
                let busy = probing.load(std::sync::atomic::Ordering::Relaxed);
                if let Some(backoff) = watch.on_look(engine.now(), rx, socket, busy) {
                    if let Some(e) = spare_probe().await {
                        return (e, Replace::BackedOff(backoff));
                    }
                    watch.probe_failed(engine.now(), rx);
                }
            }
        };
        // Renewal: a reload replaced the TLS credentials since this subflow was made
        // ([`Renewal`]); the subflow made before the reload stays until a probe gets through.
        let renewed = async {
            let made = made_with.load(std::sync::atomic::Ordering::Relaxed);
            tls.newer_than(made).await;
            let counters = engine.inspect(|s| s.path_counters(path).unwrap_or_default());
            let mut renewal = Renewal::new(engine.now(), tls.generation(), counters);
            loop {
                tokio::time::sleep(std_time(renewal.wait())).await;
                let generation = tls.generation();
                let counters = engine.inspect(|s| s.path_counters(path).unwrap_or_default());
                let go = renewal.on_look(
                    engine.now(),
                    generation,
                    counters,
                    || engine.inspect(|s| s.path_usable(path)),
                    probing.load(std::sync::atomic::Ordering::Relaxed),
                );
                if !go {
                    continue;
                }
                match probe().await {
                    Ok(e) => return (e, Replace::Renewed),
                    Err(e) => {
                        if renewal.probe_failed(e.is_setup() || e.refused_by_proxy()) {
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
        let streak = |silent: bool| {
            let hint = policy_lock().subflow_over(engine.now() - up_at, silent);
            if let Some(in_a_row) = hint {
                warn!(
                    path = %p.name,
                    in_a_row,
                    mtu = p.mtu,
                    "the path's subflows connect but fall silent within seconds, again and \
                     again: a carrier that drops full-sized packets without an ICMP answer \
                     (a path-MTU black hole) does this; if it goes on, set (or lower) this \
                     path's `mtu`, e.g. mtu = 1400"
                );
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
                    let p = path_policy::retry_pause(pause, failure(&e()));
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
