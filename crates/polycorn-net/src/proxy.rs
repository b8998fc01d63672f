//! The cloud proxy: terminates relays' subflows (mutual TLS), demultiplexes flows, connects to
//! destinations allowed by its policy, and schedules the downlink.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use polycorn_proto::{Event, Role, Session};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::activation::Inherited;
use crate::engine::Engine;
use crate::metrics::{Metrics, SessionEnd};
use crate::policy::DestinationPolicy;
use crate::subflow;
use crate::tuning::Tuning;

pub use crate::connector::Connector;
pub use crate::predictor::{make_predictor, no_predictor, LivePredictor, PredictorFactory};

/// Where the proxy keeps the train context its relays send (`[context] record`): each relay's
/// fixes go to `dir/RELAY/` ([`relay_log_dir`]) as a relay's own context log
/// ([`crate::context::Recorder`]), ready for `polycorn linkdb import --ride-log`.
///
/// The relay sends each fix on every path, so the proxy keeps the first copy and drops the
/// others, and any fix older than one it has (a copy held up on a slower path); a fix more
/// than [`CLOCK_STEP_BACK`] older is kept, as the relay's clock was set back. A fix is
/// missing where every path was down when the relay sent it.
#[derive(Clone, Debug, PartialEq)]
pub struct RideRecording {
    /// The directory (created if missing).
    pub dir: std::path::PathBuf,
    /// Column names, by path index: LinkDB's carriers (`[linkdb] carriers`). Empty: `path0`,
    /// `path1`, … for as many paths as the relay's first fix with cells reports.
    pub carriers: Vec<String>,
    /// Finished days of logs kept per relay (`[context] keep_days`); `None`: all.
    pub keep_days: Option<u32>,
}

/// [`RideRecording`], replaceable while the proxy runs (a reload); `None`: nothing recorded.
pub type LiveRecording = crate::live::Live<Option<RideRecording>>;

/// A [`LiveRecording`] that records nothing.
pub fn no_recording() -> LiveRecording {
    crate::live::Live::new(Arc::new(None))
}

/// A fix this much older than the newest one of its session means the relay's clock went
/// back: the proxy takes it (and the ones after it) rather than drop them all as stale.
pub const CLOCK_STEP_BACK: Duration = Duration::from_secs(60);

/// The subdirectory of `[context] record` for the relay named `relay` in its certificate: the
/// name itself when it is a valid relay name (`polycorn tls relay --name`), else the name
/// with every character other than a-z, 0-9 and '-' replaced by '_' (`unnamed` when empty).
pub fn relay_log_dir(relay: &str) -> String {
    if crate::tls::check_relay_name(relay).is_ok() {
        return relay.to_string();
    }
    let safe: String = relay
        .chars()
        .take(crate::tls::MAX_RELAY_NAME)
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if safe.is_empty() {
        "unnamed".into()
    } else {
        safe
    }
}

/// What one session keeps of its relay's context: which fixes are new, and its log.
struct ContextLog {
    relay: Arc<str>,
    live: LiveRecording,
    /// The recording generation `rec` follows (None: not set up yet).
    generation: Option<u64>,
    rec: Option<crate::context::Recorder>,
    newest_ms: Option<u64>,
    metrics: Option<Arc<Metrics>>,
}

impl ContextLog {
    fn new(relay: Arc<str>, live: LiveRecording, metrics: Option<Arc<Metrics>>) -> ContextLog {
        ContextLog {
            relay,
            live,
            generation: None,
            rec: None,
            newest_ms: None,
            metrics,
        }
    }

    /// Whether `ctx` is news: not a copy of a fix already seen, nor older than one.
    fn fresh(&mut self, ctx: &polycorn_proto::ContextInfo) -> bool {
        let step = CLOCK_STEP_BACK.as_millis() as u64;
        let fresh = match self.newest_ms {
            None => true,
            Some(n) => ctx.unix_ms > n || ctx.unix_ms.saturating_add(step) < n,
        };
        if fresh {
            self.newest_ms = Some(ctx.unix_ms);
        }
        fresh
    }

    /// Writes `ctx` when recording is on (set up, or changed by a reload, first), and counts it
    /// (`polycorn_context_fixes_total`, `…_recorded_total`).
    fn record(&mut self, ctx: &polycorn_proto::ContextInfo) {
        let recorded = self.write(ctx);
        if let Some(m) = &self.metrics {
            m.context_fix(&self.relay, recorded);
        }
    }

    /// [`ContextLog::record`]'s writing: whether `ctx` went into the log.
    fn write(&mut self, ctx: &polycorn_proto::ContextInfo) -> bool {
        let (generation, spec) = self.live.current();
        if self.generation != Some(generation) {
            self.rec = None;
            if let Some(r) = spec.as_ref() {
                let carriers = if r.carriers.is_empty() {
                    let Some(n) = ctx.cells.iter().map(|c| usize::from(c.path) + 1).max() else {
                        // No cells yet: the column count is not known.
                        return false;
                    };
                    (0..n).map(|k| format!("path{k}")).collect()
                } else {
                    r.carriers.clone()
                };
                let dir = r.dir.join(relay_log_dir(&self.relay));
                match crate::context::Recorder::new(&dir, carriers) {
                    Ok(rec) => self.rec = Some(rec.keep_days(r.keep_days)),
                    Err(e) => tracing::error!(
                        relay = %self.relay,
                        error = %e,
                        "context.record: cannot record this relay's context"
                    ),
                }
            }
            self.generation = Some(generation);
        }
        let Some(rec) = self.rec.as_mut() else {
            return false;
        };
        let before = rec.rows();
        match rec.record(&crate::context::ContextFix::from_info(ctx)) {
            Ok(started) => {
                if let Some(file) = started {
                    info!(relay = %self.relay, file = %file.display(), "context log started");
                }
                rec.rows() > before
            }
            Err(e) => {
                tracing::error!(
                    relay = %self.relay,
                    error = %e,
                    "context.record: cannot write the context log; recording stops for \
                     this session"
                );
                self.rec = None;
                false
            }
        }
    }
}

/// Everything the proxy needs, already validated.
#[derive(Clone)]
pub struct ProxyOptions {
    /// Subflow listeners (TLS).
    pub listen: Vec<SocketAddr>,
    /// Baselines' tunnel listener (kernel MPTCP capable), if any.
    pub tunnel_listen: Option<SocketAddr>,
    /// Source networks allowed to open tunnels.
    pub tunnel_peers: Vec<ipnet::IpNet>,
    /// TLS server configuration (client certificates required); a reload replaces it for
    /// later subflows.
    pub tls: crate::live::Live<rustls::ServerConfig>,
    /// Downlink pipeline spec.
    pub pipeline: String,
    /// Session tunables.
    pub tuning: Tuning,
    /// Destination policy; a reload replaces it for later connections (those open stay).
    pub policy: crate::live::Live<DestinationPolicy>,
    /// Connect timeout towards destinations.
    pub connect_timeout: Duration,
    /// Predictor per session; a reload may replace it ([`replace_predictors`]).
    pub predictor: LivePredictor,
    /// Whether and where the relays' context is recorded; a reload may change it, for the
    /// live sessions too.
    pub record: LiveRecording,
    /// Where to count bytes, refusals and flows.
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
    /// Relay names refused (`proxy.revoked_relays`), replaceable while the proxy runs
    /// ([`revoke`]). Pass the same list to [`crate::tls::server_config_revoking`] for `tls`, so
    /// the handshake refuses them with the alert `certificate_revoked` and the relay learns why;
    /// the proxy checks again after the handshake (a list changed meanwhile, or a TLS
    /// configuration built without it).
    pub revoked_relays: Arc<Revoked>,
    /// Ask relays for a fresh subflow where a timeout cut an idle subflow's slow-start
    /// threshold (`proxy.ask_refresh`, see [`Engine::ask_refresh_after_idle_cuts`]).
    pub ask_refresh: bool,
    /// Live sessions one relay name may hold at once, besides the one replacing them
    /// (`proxy.max_sessions_per_relay`).
    pub max_sessions_per_relay: usize,
}

pub use crate::tls::Revoked;

/// How long a stopping relay or proxy gives its sessions to tell the peer and end their
/// subflows ([`Engine::shut_down`]): the Close frame waits behind what the subflow's TCP has
/// queued, and the peer closes its side once it has read it.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// The sessions live now (a copy: the lock is not held while they are acted on).
fn live_sessions(sessions: &Sessions) -> Vec<LiveSession> {
    sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .cloned()
        .collect()
}

/// Closes every live session because the proxy shuts down ([`Engine::shut_down`], all at once,
/// within `grace`): each relay resets its passengers' connections at once and reconnects to
/// the next proxy, instead of holding them for a proxy that will not answer. First, for at
/// most `drain`, the flows open at the call may finish ([`Engine::drain`]); meanwhile each
/// relay has been told ([`Engine::announce_draining`]) and holds the passenger connections it
/// accepts for the next proxy rather than open them here (a relay that does not know the
/// announcement ignores it and opens them here, to be reset at the drain's end if still
/// running). Returns how many sessions were closed and how many of those flows were still open
/// then (and so reset).
pub async fn shut_down(sessions: &Sessions, grace: Duration, drain: Duration) -> (usize, usize) {
    let live = live_sessions(sessions);
    let mut closing = JoinSet::new();
    for l in &live {
        let e = l.engine.clone();
        closing.spawn(async move {
            if !drain.is_zero() {
                e.announce_draining();
            }
            // With no drain: how many flows are open, all to be reset.
            let left = e.drain(drain).await;
            e.shut_down("the proxy is shutting down", grace).await;
            left
        });
    }
    let mut cut = 0;
    while let Some(r) = closing.join_next().await {
        cut += r.unwrap_or(0);
    }
    (live.len(), cut)
}

/// Gives every live session a predictor from `factory` (a LinkDB rebuilt by a reload, or none),
/// in place of the one it had; later sessions take theirs from the [`LivePredictor`], which the
/// caller replaces first. Returns how many sessions were given one.
pub fn replace_predictors(sessions: &Sessions, factory: Option<&PredictorFactory>) -> usize {
    let live = live_sessions(sessions);
    for l in &live {
        l.engine.replace_predictor(make_predictor(factory));
    }
    live.len()
}

/// Replaces the revoked names with `names` and ends the subflows of every live session whose
/// relay is now revoked (its new subflows are refused; the session then ends at its hold time,
/// resetting its passengers' flows). Returns the relays whose sessions were cut, with how many
/// sessions each.
pub fn revoke(sessions: &Sessions, revoked: &Revoked, names: Vec<String>) -> Vec<(String, usize)> {
    revoked.replace(names);
    let mut cut: Vec<(String, usize)> = Vec::new();
    for l in live_sessions(sessions) {
        if revoked.contains(&l.relay) {
            l.engine.end_subflows("its relay was revoked");
            match cut.iter_mut().find(|(r, _)| **r == *l.relay) {
                Some((_, n)) => *n += 1,
                None => cut.push((l.relay.to_string(), 1)),
            }
        }
    }
    cut
}

impl std::fmt::Debug for ProxyOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyOptions")
            .field("listen", &self.listen)
            .field("pipeline", &self.pipeline)
            .finish_non_exhaustive()
    }
}

/// A relay's session on the proxy.
#[derive(Clone)]
#[allow(missing_debug_implementations)] // the engine is a handle on a session, not data
pub struct LiveSession {
    /// The relay's name (its certificate's common name): every subflow of the session must
    /// present it.
    pub relay: Arc<str>,
    /// The session.
    pub engine: Engine,
}

/// The live sessions by id.
pub type Sessions = Arc<Mutex<HashMap<u64, LiveSession>>>;

/// A refused peer is warned about again after this long (with how many of its attempts were
/// refused meanwhile); in between its refusals go to debug.
const REFUSAL_REWARN: Duration = Duration::from_secs(300);
/// Peers and causes remembered; past this (a scan from many addresses) the memory starts
/// afresh, so it stays bounded.
const REFUSAL_MEMORY: usize = 4096;

/// Which refused subflows are worth a warning. A relay with the wrong certificate or another
/// protocol version retries every few seconds for as long as it runs: the first refusal of
/// each address and cause is a warning, then one every [`REFUSAL_REWARN`] while they go on.
/// Pure: the caller passes the time.
#[derive(Debug, Default)]
struct Refusals {
    /// (address, cause) → (last warning, refusals since it).
    seen: HashMap<(std::net::IpAddr, String), (std::time::Instant, u64)>,
}

impl Refusals {
    /// Record a refusal at `now`; `Some(n)` when it is worth a warning, `n` refusals of the
    /// same peer and cause having gone unwarned since the last one.
    fn refused(
        &mut self,
        now: std::time::Instant,
        peer: std::net::IpAddr,
        cause: &str,
    ) -> Option<u64> {
        let key = (peer, cause.to_string());
        if self.seen.len() >= REFUSAL_MEMORY && !self.seen.contains_key(&key) {
            self.seen.clear();
        }
        match self.seen.get_mut(&key) {
            Some((at, quiet)) if now.saturating_duration_since(*at) < REFUSAL_REWARN => {
                *quiet += 1;
                None
            }
            Some((at, quiet)) => {
                let n = std::mem::take(quiet);
                *at = now;
                Some(n)
            }
            None => {
                self.seen.insert(key, (now, 0));
                Some(0)
            }
        }
    }
}

/// The TLS subflow listener on `addr`, one of `all` the proxy listens on. An IPv6 listener
/// takes IPv6 only (`IPV6_V6ONLY`) when `all` also has an IPv4 address on its port — so
/// `["0.0.0.0:7700", "[::]:7700"]` binds both — and otherwise keeps the system's default
/// (on Linux `[::]:7700` alone takes both families).
fn subflow_listener(addr: SocketAddr, all: &[SocketAddr]) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    sock.set_reuse_address(true)?;
    if addr.is_ipv6() && all.iter().any(|a| a.is_ipv4() && a.port() == addr.port()) {
        sock.set_only_v6(true)?;
    }
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    sock.listen(1024)?;
    TcpListener::from_std(sock.into())
}

/// Start the proxy: bind listeners (errors name the address); returns the running tasks and
/// the live sessions (for metrics).
///
/// A subflow listener whose address is among the `inherited` sockets (systemd socket
/// activation) uses that socket instead of binding one; a passed socket no subflow listener
/// uses is an error, and so is one for the baselines' tunnel listener, an MPTCP socket the
/// proxy always binds itself.
pub async fn start(
    opts: ProxyOptions,
    mut inherited: Inherited,
) -> Result<(JoinSet<()>, Sessions), String> {
    // Match the passed sockets first: a socket unit that disagrees with the configuration
    // fails the start before anything listens.
    let mut configured = Vec::new();
    let mut passed = Vec::new();
    for addr in &opts.listen {
        configured.push(format!("TCP {addr} (subflows)"));
        passed.push(inherited.take_listener(*addr, false)?);
    }
    if let Some(addr) = opts.tunnel_listen {
        if inherited.take_listener(addr, false)?.is_some() {
            return Err(format!(
                "systemd passed a socket for proxy.tunnel_listen ({addr}): that listener is an \
                 MPTCP socket the proxy binds itself; remove its ListenStream= line from the \
                 socket unit"
            ));
        }
    }
    inherited.check_all_used("proxy", &configured)?;
    let mut tasks = JoinSet::new();
    let sessions: Sessions = Arc::new(Mutex::new(HashMap::new()));
    let connector = Arc::new(Connector::new(opts.policy.clone(), opts.connect_timeout));
    let opts = Arc::new(opts);
    let refusals = Arc::new(Mutex::new(Refusals::default()));
    for (addr, passed) in opts.listen.iter().zip(passed) {
        let l = match passed {
            Some(l) => {
                info!(%addr, pipeline = %opts.pipeline, "proxy listening, socket passed by systemd");
                TcpListener::from_std(l)
            }
            None => {
                info!(%addr, pipeline = %opts.pipeline, "proxy listening");
                subflow_listener(*addr, &opts.listen)
            }
        }
        .map_err(|e| format!("subflow listener on {addr}: {e}"))?;
        let (a, s, o, c) = (
            opts.tls.clone(),
            sessions.clone(),
            opts.clone(),
            connector.clone(),
        );
        tasks.spawn(accept_loop(l, a, s, o, c, refusals.clone()));
    }
    if let Some(addr) = opts.tunnel_listen {
        let _ = crate::direct::MptcpEndpoints::limits(8);
        let l = crate::direct::mptcp_listener(addr)
            .map_err(|e| format!("tunnel listener on {addr}: {e}"))?;
        info!(%addr, "baseline tunnel listener (kernel MPTCP / TCP)");
        tasks.spawn(crate::direct::serve_tunnels(
            l,
            Arc::new(opts.tunnel_peers.clone()),
            connector.clone(),
            opts.tuning.congestion.clone(),
        ));
    }
    Ok((tasks, sessions))
}

async fn accept_loop(
    l: TcpListener,
    tls: crate::live::Live<rustls::ServerConfig>,
    sessions: Sessions,
    opts: Arc<ProxyOptions>,
    connector: Arc<Connector>,
    refusals: Arc<Mutex<Refusals>>,
) {
    let mut backoff = crate::guard::AcceptBackoff::default();
    loop {
        let (tcp, peer) = crate::guard::accept(&l, "subflows", &mut backoff).await;
        // The credentials in use at this moment (a reload replaces them for later subflows).
        let (a, s, o, c, refusals) = (
            subflow::acceptor(tls.current().1),
            sessions.clone(),
            opts.clone(),
            connector.clone(),
            refusals.clone(),
        );
        tokio::spawn(async move {
            let sockopts = o.tuning.subflow_sockopts();
            let acc = match subflow::proxy_accept(&a, tcp, &sockopts).await {
                Ok(x) => x,
                Err(subflow::HandshakeError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::UnexpectedEof =>
                {
                    // Closed before the TLS handshake was over, without sending anything wrong:
                    // mostly a relay's spare connection attempt that lost the race to another
                    // one (or a port scan). Not counted as a refused peer.
                    debug!(%peer, "connection closed during its TLS handshake");
                    return;
                }
                Err(e) if e.is_revoked_refusal() => {
                    // The TLS verifier refused a revoked relay (and logged its name, at most
                    // once a minute); the relay got the alert `certificate_revoked`.
                    debug!(%peer, error = %e, "subflow refused: revoked relay");
                    if let Some(m) = &o.metrics {
                        m.peers_rejected.inc();
                    }
                    return;
                }
                Err(e) => {
                    let warn = refusals.lock().expect("refusals").refused(
                        std::time::Instant::now(),
                        peer.ip(),
                        &e.to_string(),
                    );
                    match warn {
                        Some(n) => warn!(
                            %peer,
                            error = %e,
                            refused_since_last_warning = (n > 0).then_some(n),
                            "subflow refused"
                        ),
                        None => debug!(%peer, error = %e, "subflow refused"),
                    }
                    if let Some(m) = &o.metrics {
                        m.peers_rejected.inc();
                    }
                    return;
                }
            };
            // Refused after the handshake: a revoked relay, or a subflow naming a session
            // that another relay holds.
            let refuse = |cause: String| {
                let warn = refusals.lock().expect("refusals").refused(
                    std::time::Instant::now(),
                    peer.ip(),
                    &cause,
                );
                match warn {
                    Some(n) => warn!(
                        %peer,
                        relay = %acc.relay,
                        error = %cause,
                        refused_since_last_warning = (n > 0).then_some(n),
                        "subflow refused"
                    ),
                    None => debug!(%peer, relay = %acc.relay, error = %cause, "subflow refused"),
                }
                if let Some(m) = &o.metrics {
                    m.peers_rejected.inc();
                }
            };
            let revoked = |relay: &str| o.revoked_relays.contains(relay);
            if revoked(&acc.relay) {
                refuse(format!(
                    "relay certificate `{}` is revoked (proxy.revoked_relays)",
                    acc.relay
                ));
                return;
            }
            if acc.session == polycorn_proto::CHECK_SESSION {
                crate::check::answer(acc, peer).await;
                return;
            }
            let (engine, created, same_name) = {
                let mut map = s.lock().unwrap_or_else(|p| p.into_inner());
                match map.get(&acc.session) {
                    Some(live) if *live.relay != *acc.relay => {
                        let owner = live.relay.clone();
                        drop(map);
                        refuse(format!(
                            "session {:016x} belongs to relay `{owner}`, not `{}`",
                            acc.session, acc.relay
                        ));
                        return;
                    }
                    Some(live) => (live.engine.clone(), false, 0),
                    None => {
                        let mut cfg =
                            o.tuning
                                .session_config(Role::Proxy, acc.session, &o.pipeline);
                        // A new incarnation: a relay that spoke to an earlier one resets what
                        // it said there (see `Session::on_peer_hello`).
                        cfg.epoch = crate::random::random_u64();
                        let session = match Session::new(cfg) {
                            Ok(s) => s,
                            Err(e) => {
                                warn!(error = %e, "bad pipeline");
                                return;
                            }
                        };
                        let pred = make_predictor(o.predictor.current().1.as_ref().as_ref());
                        let (engine, events) = Engine::new(session, pred);
                        engine.ask_refresh_after_idle_cuts(o.ask_refresh);
                        if let Some(m) = &o.metrics {
                            engine.set_metrics(m.clone(), &acc.relay);
                        }
                        // The same relay's earlier sessions: one whose paths are all down (its
                        // subflows gone, or silent) belongs to a relay that crashed or lost
                        // power and started again, which will never come back to it; end it
                        // now rather than hold its flows for the hold time.
                        let ended: Vec<u64> = map
                            .iter()
                            .filter(|(_, l)| *l.relay == *acc.relay)
                            .filter(|(_, l)| l.engine.with(|s, now| s.end_if_all_paths_down(now)))
                            .map(|(id, _)| *id)
                            .collect();
                        for id in &ended {
                            if let Some(l) = map.remove(id) {
                                l.engine.end_subflows(
                                    "the relay opened a new session while every path of this \
                                     one was down",
                                );
                            }
                            if let Some(m) = &o.metrics {
                                m.relay_session_ended(&acc.relay, SessionEnd::Restarted);
                            }
                            info!(
                                session = format!("{id:016x}"),
                                relay = %acc.relay,
                                "the relay opened a new session and its earlier one had every \
                                 path down: ended that one now, resetting its passengers' \
                                 connections"
                            );
                        }
                        let same_name = map.values().filter(|l| *l.relay == *acc.relay).count();
                        // One session per relay name, and the one replacing it when the relay
                        // restarts: one stolen credential cannot open sessions without end.
                        if same_name > o.max_sessions_per_relay {
                            drop(map);
                            if let Some(m) = &o.metrics {
                                m.session_refused(&acc.relay).inc();
                            }
                            refuse(format!(
                                "relay `{}` already has {same_name} live sessions \
                                 (proxy.max_sessions_per_relay = {}, and one replacing them): \
                                 a new one waits until one ends",
                                acc.relay, o.max_sessions_per_relay
                            ));
                            return;
                        }
                        if let Some(m) = &o.metrics {
                            m.relay_session_opened(&acc.relay);
                        }
                        map.insert(
                            acc.session,
                            LiveSession {
                                relay: acc.relay.as_str().into(),
                                engine: engine.clone(),
                            },
                        );
                        tokio::spawn(engine.clone().run_timer());
                        tokio::spawn(session_events(
                            engine.clone(),
                            acc.session,
                            ContextLog::new(
                                acc.relay.as_str().into(),
                                o.record.clone(),
                                o.metrics.clone(),
                            ),
                            events,
                            s.clone(),
                            c.clone(),
                            o.metrics.clone(),
                        ));
                        (engine, true, same_name)
                    }
                }
            };
            if let Some(end) = acc.cert_not_after {
                if let Some(m) = &o.metrics {
                    m.set_relay_tls_not_after(&acc.relay, end);
                }
                let now = crate::tls::unix_now();
                let v = crate::tls::Validity {
                    key: "the relay's certificate",
                    file: acc.relay.clone().into(),
                    not_after: end,
                };
                if created && v.needs_warning(now) {
                    warn!(
                        relay = %acc.relay,
                        "{} (`polycorn tls relay --name {}` issues a new one)",
                        v.describe(now),
                        acc.relay
                    );
                }
            }
            if created {
                info!(
                    session = format!("{:016x}", acc.session),
                    relay = %acc.relay,
                    %peer,
                    "new relay session"
                );
                if same_name > 0 {
                    // Another session of this name with a path still up: two gateways
                    // sharing one certificate, which keep theirs for as long as both run, or a
                    // relay back within the stall time of a power cut (that session lives on
                    // until its hold time).
                    warn!(
                        relay = %acc.relay,
                        other_sessions = same_name,
                        "this relay name already has a session: a relay that restarted, or \
                         one certificate on two gateways (issue one per train)"
                    );
                }
            }
            // Answered in the relay's protocol version; the path's name, when its Hello gave
            // one, names the path in this proxy's metrics and logs.
            let (hello, ours) = engine.with(|x, _| {
                x.set_path_name(acc.path, acc.name.clone());
                x.set_peer_version(acc.path, acc.version);
                (x.answer_hello(acc.path, acc.version).to_vec(), x.epoch())
            });
            let mut stream = acc.stream;
            if let Err(e) = subflow::send_hello(&mut stream, &hello).await {
                warn!(%peer, error = %e, "cannot answer Hello");
                return;
            }
            if revoked(&acc.relay) {
                // Revoked while this subflow was being set up.
                refuse(format!(
                    "relay certificate `{}` is revoked (proxy.revoked_relays)",
                    acc.relay
                ));
                return;
            }
            info!(
                %peer,
                relay = %acc.relay,
                path = acc.path,
                path_name = %acc.name.as_deref().unwrap_or("-"),
                protocol = acc.version,
                "subflow up"
            );
            // While it runs, no passenger flow may connect to the address it comes from.
            let _relay_peer = c.relay_peers().register(peer.ip());
            let (r, w) = tokio::io::split(stream);
            let err = engine
                .run_subflow(acc.path, (ours, acc.epoch), acc.initial, r, w, acc.tcp_info)
                .await;
            match err {
                // Routine: the relay replaced the subflow (after a blackout, or a refresh), or
                // this side ended the session's subflows (and said why), or the subflow was
                // one the relay opened just before it renewed its epoch.
                crate::engine::SubflowError::Replaced
                | crate::engine::SubflowError::Ended(_)
                | crate::engine::SubflowError::Stale => {
                    info!(%peer, relay = %acc.relay, path = acc.path, error = %err, "subflow ended")
                }
                // The relay said it is leaving (a Close frame) before it went.
                _ if engine.peer_closed() => {
                    info!(%peer, relay = %acc.relay, path = acc.path, error = %err, "subflow ended after the relay closed the session")
                }
                _ => {
                    warn!(%peer, relay = %acc.relay, path = acc.path, error = %err, "subflow ended")
                }
            }
            if let (Some(m), crate::engine::SubflowError::Proto(e)) = (&o.metrics, &err) {
                m.frame_rejected(proto_reason(e)).inc();
            }
        });
    }
}

/// Every `reason` of `polycorn_frames_rejected_total` ([`proto_reason`]; keep the two alike).
/// The proxy makes their series at 0 when it starts, so the first rejection shows as an increase.
pub const FRAME_REJECT_REASONS: [&str; 7] = [
    "bad_frame",
    "version",
    "hello",
    "flow_control",
    "too_many_flows",
    "unopened_flow",
    "protocol",
];

fn proto_reason(e: &polycorn_proto::ProtoError) -> &'static str {
    use polycorn_proto::ProtoError as P;
    match e {
        P::Frame(_) => "bad_frame",
        P::Version { .. } => "version",
        P::Hello(_) => "hello",
        P::FlowControl { .. } => "flow_control",
        P::TooManyFlows(_) => "too_many_flows",
        P::UnopenedFlow { .. } => "unopened_flow",
        _ => "protocol",
    }
}

async fn session_events(
    engine: Engine,
    id: u64,
    mut context: ContextLog,
    mut events: tokio::sync::mpsc::UnboundedReceiver<Event>,
    sessions: Sessions,
    connector: Arc<Connector>,
    metrics: Option<Arc<Metrics>>,
) {
    let ended = |relay: &str, how| {
        if let Some(m) = &metrics {
            m.relay_session_ended(relay, how);
        }
    };
    let mut first_context = true;
    while let Some(ev) = events.recv().await {
        match ev {
            Event::FlowRequested { flow, user, dst } => {
                let (e, c) = (engine.clone(), connector.clone());
                tokio::spawn(async move {
                    match c.connect(&dst).await {
                        Ok(stream) => {
                            debug!(flow, %user, %dst, "connected");
                            let Some(sig) = e.flow_signal(flow) else {
                                return;
                            };
                            if e.with(|s, now| s.accept_flow(now, flow)).is_err() {
                                return;
                            }
                            e.pump(flow, sig, stream, user, false).await;
                        }
                        Err(status) => {
                            debug!(flow, %user, %dst, ?status, "open refused");
                            let _ = e.with(|s, now| s.refuse_flow(now, flow, status));
                        }
                    }
                });
            }
            Event::Context(ctx) => {
                if !context.fresh(&ctx) {
                    continue;
                }
                context.record(&ctx);
                if first_context {
                    first_context = false;
                    info!(
                        lat = ctx.lat,
                        lon = ctx.lon,
                        speed = ctx.speed_mps,
                        cells = ctx.cells.len(),
                        "first train context from the relay"
                    );
                }
                debug!(
                    lat = ctx.lat,
                    lon = ctx.lon,
                    speed = ctx.speed_mps,
                    "train context"
                );
                engine.on_context(&ctx);
            }
            Event::PeerClosed {
                reason,
                message,
                flows_reset,
            } => {
                let gone = sessions
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
                if let Some(l) = &gone {
                    ended(&l.relay, SessionEnd::Closed);
                }
                let session = format!("{id:016x}");
                let relay = gone.as_ref().map(|l| tracing::field::display(&l.relay));
                if flows_reset == 0 {
                    info!(session, relay, ?reason, message = %message,
                        "the relay closed the session; no passenger connection was open");
                } else {
                    info!(session, relay, ?reason, message = %message, flows_reset,
                        "the relay closed the session; its passengers' connections were reset");
                }
                return;
            }
            Event::SessionLost => {
                // A relay silent on every path (not gone: its subflows may still be connected)
                // keeps nothing here: its subflows end with the session.
                engine.end_subflows("no path of the session was heard from within the hold time");
                let gone = sessions
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
                // Not listed any more: ended when its relay opened a new one (logged there).
                if let Some(l) = &gone {
                    ended(&l.relay, SessionEnd::Lost);
                    warn!(
                        session = format!("{id:016x}"),
                        "relay gone longer than the hold time; session closed"
                    );
                }
                return;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// `listen = ["0.0.0.0:P", "[::]:P"]` binds both (the IPv6 one IPv6-only); `[::]:P` alone
    /// keeps the system's dual-stack default.
    #[tokio::test]
    async fn both_families_on_one_port_bind_side_by_side() {
        let v6_works = std::net::TcpListener::bind("[::1]:0").is_ok();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let v4 = SocketAddr::from(([0, 0, 0, 0], port));
        let v6: SocketAddr = format!("[::]:{port}").parse().unwrap();
        let all = [v4, v6];
        let _a = subflow_listener(v4, &all).expect("IPv4 listener");
        if !v6_works {
            eprintln!("skipping the IPv6 half: no IPv6 on this host");
            return;
        }
        let b = subflow_listener(v6, &all).expect("IPv6 listener beside the IPv4 one");
        assert!(socket2::SockRef::from(&b).only_v6().unwrap());
        drop((_a, b));
        let alone = subflow_listener(v6, &[v6]).expect("IPv6 listener alone");
        let default =
            std::fs::read_to_string("/proc/sys/net/ipv6/bindv6only").is_ok_and(|v| v.trim() == "1");
        assert_eq!(socket2::SockRef::from(&alone).only_v6().unwrap(), default);
    }

    /// A misconfigured relay retrying every 2 s for an hour: warned about once, then once per
    /// 5 minutes with the count in between; another cause or another address is warned at once.
    #[test]
    fn repeated_refusals_warn_once_then_every_5_min_with_a_count() {
        let t0 = Instant::now();
        let relay: std::net::IpAddr = "192.0.2.7".parse().unwrap();
        let cause = "TLS handshake (client certificate required): invalid peer certificate";
        let mut r = Refusals::default();
        let warned: Vec<(u64, u64)> = (0..1800)
            .filter_map(|i| {
                r.refused(t0 + Duration::from_secs(2 * i), relay, cause)
                    .map(|n| (2 * i, n))
            })
            .collect();
        assert_eq!(
            warned,
            [0, 300, 600, 900, 1200, 1500, 1800, 2100, 2400, 2700, 3000, 3300]
                .iter()
                .enumerate()
                .map(|(k, &s)| (s, if k == 0 { 0 } else { 149 }))
                .collect::<Vec<_>>()
        );
        let t = t0 + Duration::from_secs(10);
        assert_eq!(
            r.refused(t, relay, "read Hello: protocol version 1"),
            Some(0)
        );
        let other: std::net::IpAddr = "192.0.2.8".parse().unwrap();
        assert_eq!(r.refused(t, other, cause), Some(0));
    }

    /// Many addresses (a scan) do not grow the memory without bound.
    #[test]
    fn refusal_memory_stays_bounded() {
        let t0 = Instant::now();
        let mut r = Refusals::default();
        for i in 0..(3 * REFUSAL_MEMORY as u32) {
            let ip = std::net::IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            assert_eq!(r.refused(t0, ip, "TLS and Hello timed out"), Some(0));
            assert!(r.seen.len() <= REFUSAL_MEMORY);
        }
    }
}
