//! Turns a configuration file into a running relay or proxy: logging, the async runtime, the
//! shutdown signal, reload on SIGHUP, the certificate watch, LinkDB's predictor, metrics
//! serving, path tracing, and the relay's interception rules. The binary's `relay` and `proxy`
//! commands call [`relay()`] and [`proxy()`].

mod maintenance;
mod process;
mod trace;

pub use maintenance::{relay_check_paths, relay_remove_interception};

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::activation::Inherited;
use crate::carrier::Carrier;
use crate::config::{ContextSource, MetricsConfig, ProxyConfig, RelayConfig, RelayMode};
use crate::intercept::{InterceptionLock, NftTproxy};
use crate::live::Live;
use crate::metrics::Metrics;
use crate::proxy::{self, ProxyOptions};
use crate::relay::{self, Mode, RelayOptions};
use crate::tuning::Tuning;
use crate::{context, tls};
use anyhow::{bail, Context, Result};
use polycorn_proto::ContextInfo;
use tracing::{error, info, warn};

use maintenance::{relay_paths, tproxy_options, RELAY_LOCK_WAIT, RELAY_NFT_TABLE};
use process::{init_logging, runtime, shutdown_signal};
use trace::{sample_metrics, track_sessions, StartedSessions};

/// An error and its causes on one line (`what: why: root cause`), each cause once.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
    }
    text
}

/// A scheduler spec with its presets expanded (`polycorn` → `hpr,minrtt,…`), for the startup
/// log: a preset's meaning can change between versions, the log says what runs.
fn expanded(spec: &str) -> String {
    match polycorn_sched::Pipeline::from_spec(spec) {
        Ok(p) => polycorn_sched::spec::label(spec, Some(p.spec())),
        Err(e) => format!("{spec} (invalid: {e})"),
    }
}

/// Apply `slow_start_after_idle` of a daemon's config to its network namespace.
fn apply_slow_start_after_idle(key: &str, want: Option<bool>) -> Result<()> {
    let Some(on) = want else { return Ok(()) };
    let before =
        crate::sockopt::set_slow_start_after_idle(on).with_context(|| format!("{key} = {on}"))?;
    info!(
        value = on as u8,
        was = before as u8,
        "net.ipv4.tcp_slow_start_after_idle set for this network namespace ({key})"
    );
    Ok(())
}

/// The congestion control of this daemon's sockets, tried on a throwaway socket at startup:
/// the configured one (startup stops with the reason where the host cannot set it), none for
/// `"system"`, else [`crate::config::DEFAULT_CONGESTION`] — or, where the host cannot give
/// sockets that, the system's default with a warning.
/// Returns `tuning` with it.
fn settle_congestion(key: &str, configured: Option<&str>, mut tuning: Tuning) -> Result<Tuning> {
    settle_congestion_with(
        key,
        configured,
        &mut tuning,
        crate::sockopt::check_congestion,
    )?;
    Ok(tuning)
}

/// [`settle_congestion`] with `check` trying a congestion control on this host.
fn settle_congestion_with(
    key: &str,
    configured: Option<&str>,
    tuning: &mut Tuning,
    check: impl Fn(&str) -> std::io::Result<()>,
) -> Result<()> {
    let Some(cc) = tuning.congestion.clone() else {
        info!(
            congestion = %crate::sockopt::system_congestion(),
            "{key} = \"system\": sockets keep the system's congestion control"
        );
        return Ok(());
    };
    match check(&cc) {
        Ok(()) => {
            info!(congestion = %cc, "congestion control of subflows and tunnels ({key})");
            Ok(())
        }
        Err(e) if configured.is_none() => {
            warn!(
                error = %e,
                system = %crate::sockopt::system_congestion(),
                "{key} is not set and this host cannot give sockets the default `{cc}`: \
                 subflows and tunnels keep the system's congestion control (set {key} to \
                 silence this)"
            );
            tuning.congestion = None;
            Ok(())
        }
        Err(e) => Err(e).with_context(|| format!("{key} = {cc:?}")),
    }
}

/// Whether subflow sockets take `rto_max_ms` (an old kernel refuses it), so that the daemon
/// stops at startup with the reason.
fn check_rto_max(key: &str, ms: Option<u32>) -> Result<()> {
    if let Some(ms) = ms {
        crate::sockopt::check_rto_max(ms).with_context(|| format!("{key} = {ms}"))?;
    }
    Ok(())
}

/// Column names of the relay's context log: LinkDB's carrier of each path when the relay has
/// a LinkDB (`[linkdb] carriers`), else the path's name.
fn record_columns(cfg: &RelayConfig) -> Vec<String> {
    cfg.paths
        .iter()
        .enumerate()
        .map(
            |(i, p)| match (&cfg.linkdb.db, cfg.linkdb.carriers.get(i)) {
                (Some(_), Some(c)) => c.clone(),
                _ => p.name.clone(),
            },
        )
        .collect()
}

/// Where the proxy records its relays' context (`[context] record`), its columns named by
/// `[linkdb] carriers` when the proxy has a LinkDB (the relays' paths in that order).
fn ride_recording(cfg: &ProxyConfig) -> Option<proxy::RideRecording> {
    cfg.context.record.as_ref().map(|dir| proxy::RideRecording {
        dir: dir.clone(),
        carriers: if cfg.linkdb.db.is_some() {
            cfg.linkdb.carriers.clone()
        } else {
            Vec::new()
        },
        keep_days: cfg.context.keep_days,
    })
}

/// How the relay's paths name their modems (`[context] cells = "modemmanager"`).
pub fn modem_options(cfg: &RelayConfig) -> crate::modem::mm::MmOptions {
    crate::modem::mm::MmOptions {
        bus: cfg.context.dbus.clone(),
        paths: cfg
            .paths
            .iter()
            .enumerate()
            .map(|(i, p)| crate::modem::ModemPath {
                index: i as u8,
                name: p.name.clone(),
                device: p.device.clone(),
                modem: p.modem.clone(),
            })
            .collect(),
        rate: cfg.context.signal_rate(),
        gnss: cfg.context.source == ContextSource::ModemManager,
    }
}

/// Hands each fix of the context source to the session (`out`), after writing it to the
/// context log when there is one; on a write error the relay says so once and records no more
/// (the fixes still reach the schedulers).
async fn forward_fixes(
    mut fixes: tokio::sync::mpsc::Receiver<context::ContextFix>,
    out: tokio::sync::mpsc::Sender<ContextInfo>,
    mut rec: Option<context::Recorder>,
) {
    while let Some(f) = fixes.recv().await {
        if let Some(r) = rec.as_mut() {
            match r.record(&f) {
                Ok(Some(file)) => info!(file = %file.display(), "context log started"),
                Ok(None) => {}
                Err(e) => {
                    error!(error = %e, "context.record: cannot write the context log; recording stops");
                    rec = None;
                }
            }
        }
        let _ = out.send(f.to_info()).await;
    }
}

async fn serve_metrics(cfg: &MetricsConfig, metrics: Arc<Metrics>) -> Result<()> {
    if let Some(addr) = cfg.listen {
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("metrics.listen: bind {addr}"))?;
        info!(%addr, "metrics on http://{addr}/metrics");
        tokio::spawn(crate::metrics::serve(l, metrics));
    }
    Ok(())
}

/// Logs how many sockets systemd passed, if any; returns whether it passed any.
fn announce(inherited: &Inherited) -> bool {
    if inherited.is_empty() {
        return false;
    }
    info!(
        sockets = inherited.len(),
        "listeners passed by systemd (socket activation)"
    );
    true
}

/// The TLS files' validity: logged at the start and after a reload (a warning when it ends
/// within [`tls::EXPIRY_WARNING`] or has ended, and again every day while so), and exported as
/// `polycorn_tls_not_after_seconds` for monitoring. (Nothing else changes: a certificate past
/// its end fails in the handshakes, which say so.)
#[derive(Clone)]
struct CertWatch {
    files: Arc<std::sync::Mutex<[tls::Validity; 2]>>,
    metrics: Arc<Metrics>,
}

impl CertWatch {
    /// Reads `cert` and `ca`, says how long they stay valid and starts the daily warning.
    fn start(cert: &Path, ca: &Path, metrics: &Arc<Metrics>) -> Result<CertWatch> {
        let files = tls::validity_of(cert, ca)?;
        let watch = CertWatch {
            files: Arc::new(std::sync::Mutex::new(files.clone())),
            metrics: metrics.clone(),
        };
        watch.set(files);
        let daily = watch.clone();
        tokio::spawn(async move {
            let day = Duration::from_secs(86_400);
            loop {
                tokio::time::sleep(day).await;
                let files = daily
                    .files
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                Self::say(&files, false);
            }
        });
        Ok(watch)
    }

    /// The files in use are now these (at the start, and after a reload replaced them).
    fn set(&self, files: [tls::Validity; 2]) {
        self.metrics.set_tls_not_after("cert", files[0].not_after);
        self.metrics.set_tls_not_after("ca", files[1].not_after);
        Self::say(&files, true);
        *self.files.lock().unwrap_or_else(|p| p.into_inner()) = files;
    }

    fn say(files: &[tls::Validity], always: bool) {
        let now = tls::unix_now();
        for v in files {
            if v.needs_warning(now) {
                warn!("{}", v.describe(now));
            } else if always {
                info!("{}", v.describe(now));
            }
        }
    }
}

/// A daemon's TLS credentials as a reload (SIGHUP) replaces them: the configuration new
/// handshakes take, the bytes of the files it was built from (a reload that finds the same
/// bytes changes nothing), and the validity watch.
struct TlsReload<C> {
    live: Live<C>,
    contents: [Vec<u8>; 3],
    watch: CertWatch,
}

impl<C> TlsReload<C> {
    fn new(live: Live<C>, files: &crate::config::TlsFiles, watch: CertWatch) -> Result<Self> {
        Ok(TlsReload {
            live,
            contents: tls::file_contents(&files.ca, &files.cert, &files.key)?,
            watch,
        })
    }

    /// Reads `files` again; when their bytes differ from those in use, builds the configuration
    /// with `build` and puts it in use for every later handshake. `Ok(false)`: nothing changed.
    /// An error (naming the file) leaves the credentials in use as they were.
    fn reload(
        &mut self,
        files: &crate::config::TlsFiles,
        build: impl FnOnce() -> Result<Arc<C>>,
    ) -> Result<bool> {
        let contents = tls::file_contents(&files.ca, &files.cert, &files.key)?;
        if contents == self.contents {
            return Ok(false);
        }
        let config = build()?;
        let validity = tls::validity_of(&files.cert, &files.ca)?;
        self.live.replace(config);
        self.contents = contents;
        self.watch.set(validity);
        Ok(true)
    }

    /// [`TlsReload::reload`], with what happened logged; what `who` says new handshakes do.
    fn reload_logged(
        &mut self,
        files: &crate::config::TlsFiles,
        who: &str,
        build: impl FnOnce() -> Result<Arc<C>>,
    ) {
        match self.reload(files, build) {
            Ok(true) => {
                info!(cert = %files.cert.display(), "reload: TLS credentials replaced: {who}")
            }
            Ok(false) => info!("reload: the TLS files are unchanged"),
            Err(e) => error!(
                "reload: TLS credentials not replaced, the ones in use stay: {}",
                error_text(&e)
            ),
        }
    }
}

/// Runs the relay of the configuration file `path` until SIGINT or SIGTERM (`polycorn relay
/// --config FILE`); `version` is the binary's, for the build-info metric.
pub fn relay(path: &Path, version: &str) -> Result<()> {
    // Listeners systemd passed (socket activation): taken before any thread or child starts.
    let inherited = Inherited::from_env()?;
    let cfg = RelayConfig::load(path)?;
    init_logging(&cfg.log)?;
    let activated = announce(&inherited);
    // The uplink's handover predictor (HPR on the relay), loaded before the runtime starts.
    let linkdb = if cfg.relay.mode == RelayMode::Polycorn {
        load_predictor(&cfg.linkdb)?
    } else {
        if cfg.linkdb.db.is_some() {
            warn!("linkdb.db is ignored: only mode \"polycorn\" schedules the uplink");
        }
        if cfg.relay.rto_max_ms.is_some() {
            warn!(
                "relay.rto_max_ms is ignored: only mode \"polycorn\" has subflows (the \
                 baselines' tunnels keep the kernel's timeout, as their operators run them)"
            );
        }
        LinkDbLoad::default()
    };
    let predictor = linkdb.factory.clone();
    apply_slow_start_after_idle(
        "relay.slow_start_after_idle",
        cfg.relay.slow_start_after_idle,
    )?;
    let c = cfg.relay.congestion.as_deref();
    let tuning = settle_congestion("relay.congestion", c, Tuning::of_relay(&cfg))?;
    if cfg.relay.mode == RelayMode::Polycorn {
        // Only subflows take it (the baselines' tunnels do not; see the warning above).
        check_rto_max("relay.rto_max_ms", cfg.relay.rto_max_ms)?;
    }
    let rt = runtime()?;
    rt.block_on(async move {
        let mode = match cfg.relay.mode {
            RelayMode::Polycorn => Mode::Polycorn,
            RelayMode::Mptcp => Mode::Mptcp,
            RelayMode::Single => Mode::Single,
        };
        let paths = relay_paths(&cfg);
        // The name the proxy knows this relay by (its certificate's), for its own metrics.
        let relay_name = match &cfg.tls {
            Some(t) => tls::relay_name_of_file(&t.cert)?,
            None => tls::RELAY_NAME.to_string(),
        };
        let running = cfg.clone();
        let tls_cfg = match (&cfg.tls, mode) {
            (Some(t), _) => Some(Live::new(tls::client_config(&t.ca, &t.cert, &t.key)?)),
            (None, Mode::Polycorn) => bail!("[tls]: required in polycorn mode"),
            (None, _) => None,
        };
        // Interception rules first: a half-configured relay should fail before it starts.
        // Declared first, so dropped last: held until the rules are dealt with.
        let mut _lock = None;
        let mut nft = None;
        if let Some(o) = tproxy_options(&cfg)? {
            // A removal still running (the socket unit's, at a restart of both) finishes first.
            _lock = Some(
                InterceptionLock::acquire(&o.table, RELAY_LOCK_WAIT)
                    .context("take the interception lock")?
                    .with_context(|| {
                        format!(
                            "another relay manages the interception (nftables table inet {}) \
                             in this network namespace: one relay per namespace",
                            o.table
                        )
                    })?,
            );
            nft = Some(NftTproxy::install(o).context("install the TPROXY rules (nftables)")?);
            info!("TPROXY rules installed (nftables table inet {RELAY_NFT_TABLE})");
        }
        let mut endpoints = None;
        if mode == Mode::Mptcp {
            endpoints = Some(
                crate::direct::MptcpEndpoints::install(&paths, paths.len())
                    .context("configure kernel MPTCP endpoints (ip mptcp)")?,
            );
        }
        let (ctx_tx, ctx_rx) = tokio::sync::mpsc::channel::<ContextInfo>(64);
        let mut recorder = match &cfg.context.record {
            None => None,
            Some(dir) => {
                // Recording is for later; a relay that cannot record still carries passengers.
                let names = record_columns(&cfg);
                match context::Recorder::new(dir, names.clone()) {
                    Ok(r) => {
                        info!(dir = %dir.display(), carriers = ?names, keep_days = ?cfg.context.keep_days, "recording the train's context");
                        Some(r.keep_days(cfg.context.keep_days))
                    }
                    Err(e) => {
                        error!(error = %e, "context.record: cannot record there; the context is not recorded");
                        None
                    }
                }
            }
        };
        // Positions: gpsd, a replayed log, or (None here) the modems' GNSS.
        let positions = match cfg.context.source {
            ContextSource::None | ContextSource::ModemManager => None,
            ContextSource::Gpsd => {
                let (tx, rx) = tokio::sync::mpsc::channel(64);
                let addr = cfg.context.gpsd;
                tokio::spawn(async move {
                    let _ = context::follow_gpsd(addr, tx).await;
                });
                info!(%addr, "context from gpsd");
                Some(rx)
            }
            ContextSource::Replay => {
                let file = cfg
                    .context
                    .replay
                    .clone()
                    .context("context.replay: required with source = \"replay\"")?;
                let fixes = context::read_replay_csv(&file)?;
                let (tx, rx) = tokio::sync::mpsc::channel(64);
                tokio::spawn(async move {
                    let _ = context::replay(fixes, tx, 1.0).await;
                });
                info!(file = %file.display(), "context replayed from a log");
                Some(rx)
            }
        };
        let metrics = Arc::new(Metrics::with_build("relay", version));
        linkdb.show(&metrics);
        if cfg.context.cells_from_modemmanager() {
            let opts = modem_options(&cfg);
            // A modem that is there but on another interface than its path's is a mistake in
            // the file; one not there (yet) may still come, and is waited for.
            match crate::modem::mm::check(&opts).await {
                Ok(radios) => {
                    for r in radios {
                        match r {
                            Ok(r) => info!(path = %opts.paths[usize::from(r.path)].name, "modem: {r}"),
                            Err(e @ crate::modem::MatchError::WrongDevice { .. }) => {
                                anyhow::bail!("context.cells = \"modemmanager\": {e}")
                            }
                            Err(e) => error!("context.cells = \"modemmanager\": {e}; waiting for it"),
                        }
                    }
                }
                Err(e) => error!("context.cells = \"modemmanager\": {e}; retrying"),
            }
            let (tx, rx) = tokio::sync::mpsc::channel(64);
            let names: Vec<String> = opts.paths.iter().map(|p| p.name.clone()).collect();
            let m = metrics.clone();
            info!(bus = opts.bus.as_deref().unwrap_or("system"), rate = ?opts.rate, "serving cells and signal from ModemManager");
            tokio::spawn(crate::modem::mm::run(opts, positions, tx, move |r| {
                if let Some(name) = names.get(usize::from(r.path)) {
                    m.set_radio(name, r.tech.map(|t| t.as_str()), r.cell(), r.signal.rsrp_dbm);
                }
            }));
            tokio::spawn(forward_fixes(rx, ctx_tx.clone(), recorder.take()));
        } else if cfg.context.cells == crate::config::CellSource::At {
            let ports: Vec<crate::modem::at_port::AtPort> = cfg
                .paths
                .iter()
                .enumerate()
                .filter_map(|(i, p)| {
                    Some(crate::modem::at_port::AtPort {
                        path: i as u8,
                        name: p.name.clone(),
                        port: p.at_port.clone()?,
                    })
                })
                .collect();
            let positions = positions.context("context.cells = \"at\" needs context.source = \"gpsd\"")?;
            let (tx, rx) = tokio::sync::mpsc::channel(64);
            let names: Vec<String> = cfg.paths.iter().map(|p| p.name.clone()).collect();
            let m = metrics.clone();
            info!(rate = ?cfg.context.signal_rate(), "serving cells and signal from the modems' AT ports");
            tokio::spawn(crate::modem::at_port::run(ports, cfg.context.signal_rate(), positions, tx, move |r| {
                if let Some(name) = names.get(usize::from(r.path)) {
                    m.set_radio(name, r.tech.map(|t| t.as_str()), r.cell(), r.signal.rsrp_dbm);
                }
            }));
            tokio::spawn(forward_fixes(rx, ctx_tx.clone(), recorder.take()));
        } else if let Some(rx) = positions {
            tokio::spawn(forward_fixes(rx, ctx_tx.clone(), recorder.take()));
        }
        let opts = RelayOptions {
            mode,
            pipeline: cfg.relay.scheduler.clone(),
            paths: paths.clone(),
            tls: tls_cfg.clone(),
            transparent: cfg
                .intercept
                .transparent
                .into_iter()
                .chain(cfg.intercept.transparent6)
                .collect(),
            lan_device: cfg.intercept.lan_device.clone(),
            passenger_limits: cfg.limits.passenger_limits(),
            metrics: Some(metrics.clone()),
            socks5: cfg.intercept.socks5,
            dns: cfg.dns.listen.zip(cfg.dns.upstream),
            tunnel_port: cfg.relay.tunnel_port,
            tuning,
            idle_refresh: cfg.relay.idle_refresh,
            predictor,
        };
        let tls_reload = match (&cfg.tls, tls_cfg) {
            (Some(t), Some(live)) => Some(TlsReload::new(
                live,
                t,
                CertWatch::start(&t.cert, &t.ca, &metrics)?,
            )?),
            _ => None,
        };
        // LinkDB rebuilt at a reload goes to the session once it exists (polycorn mode only).
        let (linkdb_tx, linkdb_rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(reload_relay_on_hangup(
            path.to_path_buf(),
            running,
            tls_reload,
            relay_name.clone(),
            (mode == Mode::Polycorn).then_some(linkdb_tx),
        ));
        serve_metrics(&cfg.metrics, metrics.clone()).await?;
        let (carrier, mut tasks, mut listeners) = relay::start(opts, Some(ctx_rx), inherited)
            .await
            .map_err(anyhow::Error::msg)?;
        if let Carrier::Session(engine) = &carrier {
            let e = engine.clone();
            tokio::spawn(rebuild_linkdb(linkdb_rx, metrics.clone(), move |factory| {
                e.replace_predictor(proxy::make_predictor(factory.as_ref()));
                1
            }));
            engine.set_metrics(metrics.clone(), &relay_name);
            sample_metrics(
                engine.downgrade(),
                relay_name.into(),
                paths.iter().map(|p| p.name.clone()).collect(),
                false,
                metrics,
            );
        }
        info!(mode = ?mode, scheduler = %expanded(&cfg.relay.scheduler), protocol = polycorn_proto::VERSION, "relay running");
        tokio::select! {
            _ = shutdown_signal() => {
                info!("shutting down");
                // Accept no more passengers: a connection accepted now would only be reset. Their
                // SYNs go unanswered instead, and a relay started again in time takes their retry.
                listeners.abort_all();
                while listeners.join_next().await.is_some() {}
                // The connections open now may finish, for at most relay.drain_s.
                let drain = cfg.relay.drain();
                if let (false, Carrier::Session(engine)) = (drain.is_zero(), &carrier) {
                    info!(drain_s = drain.as_secs(), "draining: the passengers' connections open now may finish");
                    let left = engine.drain(drain).await;
                    info!(flows_reset = left, "drained");
                }
                // Then tell the proxy: it resets its side of the passengers' connections now
                // instead of holding them for its hold time.
                if let Carrier::Session(engine) = &carrier {
                    engine
                        .shut_down("the relay is shutting down", crate::proxy::SHUTDOWN_GRACE)
                        .await;
                }
            }
            Some(r) = tasks.join_next() => warn!(?r, "a relay task ended"),
            Some(r) = listeners.join_next() => warn!(?r, "a relay listener ended"),
        }
        listeners.abort_all();
        tasks.abort_all();
        drop(endpoints);
        if let Some(mut n) = nft {
            if activated {
                // systemd keeps the listeners open: with the rules in place, passengers'
                // connections wait in their backlog for the next relay instead of bypassing it.
                // `polycorn relay --remove-interception` (the socket unit's ExecStopPost) removes
                // them when the socket unit stops.
                n.leave_installed();
                info!("TPROXY rules left installed: the listeners are systemd's and stay open");
            } else if let Err(e) = n.uninstall() {
                warn!(error = %e, "removing the TPROXY rules failed");
            }
        }
        Ok(())
    })
}

/// Runs the proxy of the configuration file `path` until SIGINT or SIGTERM (`polycorn proxy
/// --config FILE`); `version` is the binary's, for the build-info metric.
pub fn proxy(path: &Path, version: &str) -> Result<()> {
    // Listeners systemd passed (socket activation): taken before any thread or child starts.
    let inherited = Inherited::from_env()?;
    let cfg = ProxyConfig::load(path)?;
    init_logging(&cfg.log)?;
    announce(&inherited);
    // LinkDB is loaded before the async runtime starts (its PostgreSQL client blocks); a
    // reload rebuilds it on a thread of its own ([`rebuild_linkdb`]).
    let linkdb = load_predictor(&cfg.linkdb)?;
    let predictor: proxy::LivePredictor = Live::new(Arc::new(linkdb.factory.clone()));
    apply_slow_start_after_idle(
        "proxy.slow_start_after_idle",
        cfg.proxy.slow_start_after_idle,
    )?;
    let c = cfg.proxy.congestion.as_deref();
    let tuning = settle_congestion("proxy.congestion", c, Tuning::of_proxy(&cfg))?;
    check_rto_max("proxy.rto_max_ms", cfg.proxy.rto_max_ms)?;
    let rt = runtime()?;
    rt.block_on(async move {
        let revoked = Arc::new(proxy::Revoked::new(cfg.proxy.revoked_relays.clone()));
        let tls_cfg = Live::new(tls::server_config_revoking(
            &cfg.tls.ca,
            &cfg.tls.cert,
            &cfg.tls.key,
            revoked.clone(),
        )?);
        let policy = Live::new(Arc::new(cfg.policy.destination_policy()));
        let record: proxy::LiveRecording = Live::new(Arc::new(ride_recording(&cfg)));
        if let Some(r) = ride_recording(&cfg) {
            info!(dir = %r.dir.display(), "recording the relays' train context");
        }
        let metrics = Arc::new(Metrics::with_build("proxy", version));
        for reason in crate::proxy::FRAME_REJECT_REASONS {
            metrics.frame_rejected(reason);
        }
        linkdb.show(&metrics);
        let tls_reload = TlsReload::new(
            tls_cfg.clone(),
            &cfg.tls,
            CertWatch::start(&cfg.tls.cert, &cfg.tls.ca, &metrics)?,
        )?;
        let opts = ProxyOptions {
            listen: cfg.proxy.listen.clone(),
            tunnel_listen: cfg.proxy.tunnel_listen,
            tunnel_peers: cfg.proxy.tunnel_peers.clone(),
            tls: tls_cfg,
            pipeline: cfg.proxy.scheduler.clone(),
            tuning,
            policy: policy.clone(),
            connect_timeout: cfg.proxy.connect_timeout(),
            predictor: predictor.clone(),
            record: record.clone(),
            metrics: Some(metrics.clone()),
            revoked_relays: revoked.clone(),
            ask_refresh: cfg.proxy.ask_refresh,
            max_sessions_per_relay: cfg.proxy.max_sessions_per_relay as usize,
        };
        if !cfg.proxy.revoked_relays.is_empty() {
            info!(relays = ?cfg.proxy.revoked_relays, "revoked relays will be refused");
        }
        serve_metrics(&cfg.metrics, metrics.clone()).await?;
        let (mut tasks, sessions) = proxy::start(opts, inherited)
            .await
            .map_err(anyhow::Error::msg)?;
        let (linkdb_tx, linkdb_rx) = tokio::sync::mpsc::unbounded_channel();
        {
            let sessions = sessions.clone();
            tokio::spawn(rebuild_linkdb(linkdb_rx, metrics.clone(), move |factory| {
                // Later sessions first, then the live ones (a session opened in between is
                // given the new one twice).
                predictor.replace(Arc::new(factory.clone()));
                proxy::replace_predictors(&sessions, factory.as_ref())
            }));
        }
        tokio::spawn(reload_on_hangup(
            path.to_path_buf(),
            cfg.clone(),
            sessions.clone(),
            revoked,
            tls_reload,
            ProxyLive { policy, record },
            linkdb_tx,
        ));
        {
            // Per-path metrics of every live session (paths are named by index on the proxy).
            let m = metrics.clone();
            let sessions = sessions.clone();
            tokio::spawn(async move {
                let mut started = StartedSessions::new();
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    let live: Vec<(u64, crate::proxy::LiveSession)> = sessions
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .iter()
                        .map(|(k, v)| (*k, v.clone()))
                        .collect();
                    track_sessions(&mut started, live, &m);
                }
            });
        }
        info!(scheduler = %expanded(&cfg.proxy.scheduler), protocol = polycorn_proto::VERSION, "proxy running");
        let stop = tokio::select! {
            _ = shutdown_signal() => true,
            Some(r) = tasks.join_next() => {
                warn!(?r, "a proxy task ended");
                false
            }
        };
        // The listeners first: a relay that reconnects must not find this proxy again.
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
        if stop {
            // Then tell every relay: each resets its passengers' connections at once and
            // reconnects to the next proxy instead of waiting for this one.
            let drain = cfg.proxy.drain();
            if !drain.is_zero() {
                info!(
                    drain_s = drain.as_secs(),
                    "draining: the flows open now may finish"
                );
            }
            let (closed, cut) = proxy::shut_down(&sessions, proxy::SHUTDOWN_GRACE, drain).await;
            info!(
                sessions = closed,
                flows_reset = cut,
                "shutting down"
            );
        }
        Ok(())
    })
}

/// The proxy's settings a reload replaces in place, besides TLS and the revoked relays.
struct ProxyLive {
    /// `[policy]`.
    policy: Live<crate::policy::DestinationPolicy>,
    /// `[context] record`.
    record: proxy::LiveRecording,
}

/// `systemctl reload polycorn-proxy` (SIGHUP): reads the configuration file again and applies
/// `proxy.revoked_relays` — new subflows of a revoked relay are refused and its live sessions'
/// subflows are cut at once —, the TLS files (`tls.cert`, `tls.key`, `tls.ca`), which later
/// handshakes use (subflows up keep theirs), `[policy]`, which later connections to
/// destinations follow (those open stay), `[context] record`, which the live sessions follow
/// from their next fix, and `[linkdb]`: the predictor is built again from the database (rides
/// imported since are learnt) for the live sessions and later ones ([`rebuild_linkdb`]). Other changes need a restart (said in a warning); a file that does not
/// load, or credentials that do not, change nothing.
async fn reload_on_hangup(
    path: std::path::PathBuf,
    mut running: ProxyConfig,
    sessions: proxy::Sessions,
    revoked: Arc<proxy::Revoked>,
    mut tls: TlsReload<tls::ServerConfig>,
    live: ProxyLive,
    linkdb: tokio::sync::mpsc::UnboundedSender<crate::config::LinkDbConfig>,
) {
    let ProxyLive { policy, record } = live;
    on_hangup(&path, ProxyConfig::load, |new| {
        let mut rest = new.clone();
        rest.proxy.revoked_relays = running.proxy.revoked_relays.clone();
        rest.tls = running.tls.clone();
        rest.policy = running.policy.clone();
        rest.context = running.context.clone();
        rest.linkdb = running.linkdb.clone();
        if rest != running {
            warn!(
                "reload: only proxy.revoked_relays, the TLS files, [policy], [context] and \
                 [linkdb] are applied while running; restart the proxy for the other changes \
                 in {}",
                path.display()
            );
        }
        let recording = ride_recording(&new);
        if recording != ride_recording(&running) {
            match &recording {
                Some(r) => info!(
                    dir = %r.dir.display(),
                    "reload: recording the relays' train context (live sessions from their next fix)"
                ),
                None => info!("reload: the relays' train context is no longer recorded"),
            }
            record.replace(Arc::new(recording));
            running.context = new.context.clone();
        }
        if new.linkdb.db.is_some() || running.linkdb.db.is_some() {
            let _ = linkdb.send(new.linkdb.clone());
            running.linkdb = new.linkdb.clone();
        }
        let names = new.proxy.revoked_relays.clone();
        let cut = proxy::revoke(&sessions, &revoked, names.clone());
        info!(revoked_relays = ?names, "reload: revoked relays applied");
        for (relay, n) in cut {
            warn!(
                relay = %relay,
                sessions = n,
                "relay revoked: its subflows were cut; its passengers' flows end at the hold time"
            );
        }
        running.proxy.revoked_relays = new.proxy.revoked_relays;
        if new.policy != running.policy {
            let p = &new.policy;
            policy.replace(Arc::new(p.destination_policy()));
            info!(
                allow = ?p.allow,
                deny = ?p.deny,
                allow_private = p.allow_private,
                "reload: destination policy applied to new connections (those open stay)"
            );
            running.policy = new.policy.clone();
        }
        let t = &new.tls;
        let build = || {
            Ok(tls::server_config_revoking(
                &t.ca,
                &t.cert,
                &t.key,
                revoked.clone(),
            )?)
        };
        tls.reload_logged(
            t,
            "relays' new subflows get the new certificate; subflows up keep theirs",
            build,
        );
        // Whatever the outcome, the files named now are the ones a later reload compares
        // with (their bytes decide whether anything changed).
        running.tls = new.tls;
    })
    .await;
}

/// Builds the LinkDB predictor again for each `[linkdb]` a reload hands over, one at a time,
/// on a thread of its own (the PostgreSQL client blocks, and must not run on the async
/// runtime), then hands it to `apply`, which puts it in use and says for how many sessions:
/// the proxy's later sessions and every live one, the relay's session. Each live session is
/// given the train context it last had. A database that cannot be read leaves the predictor
/// in use as it was.
async fn rebuild_linkdb(
    mut requests: tokio::sync::mpsc::UnboundedReceiver<crate::config::LinkDbConfig>,
    metrics: Arc<Metrics>,
    mut apply: impl FnMut(Option<proxy::PredictorFactory>) -> usize,
) {
    while let Some(cfg) = requests.recv().await {
        let (tx, built) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let _ = tx.send(load_predictor(&cfg));
        });
        match built.await {
            Ok(Ok(load)) => {
                let on = load.factory.is_some();
                load.show(&metrics);
                let n = apply(load.factory);
                if on {
                    info!(sessions = n, "reload: LinkDB predictor rebuilt, in use by the live sessions and later ones");
                } else {
                    info!(
                        sessions = n,
                        "reload: no linkdb.db any more; handover prediction is off"
                    );
                }
            }
            Ok(Err(e)) => {
                metrics.linkdb_rebuild_failures.inc();
                error!(
                    error = format!("{e:#}"),
                    "reload: LinkDB not rebuilt; the predictor in use stays"
                )
            }
            Err(_) => {
                metrics.linkdb_rebuild_failures.inc();
                error!("reload: rebuilding LinkDB failed; the predictor in use stays")
            }
        }
    }
}

/// At every SIGHUP: reads `path` with `load` and hands what loaded to `apply`; a file that
/// does not load is reported and changes nothing.
async fn on_hangup<C, E: std::fmt::Display>(
    path: &Path,
    load: impl Fn(&Path) -> Result<C, E>,
    mut apply: impl FnMut(C),
) {
    let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
        warn!("cannot install the SIGHUP handler: reload needs a restart");
        return;
    };
    while hup.recv().await.is_some() {
        match load(path) {
            Ok(c) => apply(c),
            Err(e) => error!(error = %e, "reload: configuration not loaded; nothing changed"),
        }
    }
}

/// `systemctl reload polycorn-relay` (SIGHUP): reads the configuration file again and applies
/// the TLS files (`tls.cert`, `tls.key`, `tls.ca`): new subflows use them, and each path
/// replaces its subflow at its next idle moment (make before break, within
/// [`relay::RENEW_WITHIN`]) so that the proxy sees the new certificate. The relay's name (its
/// certificate's) cannot change this way: the proxy binds the session to it. In mode
/// `polycorn` it also applies `[linkdb]`: the uplink's predictor is built again from the
/// database ([`rebuild_linkdb`]). Other changes need a restart (said in a warning); a file that
/// does not load, or credentials that do not, change nothing.
async fn reload_relay_on_hangup(
    path: std::path::PathBuf,
    mut running: RelayConfig,
    mut tls: Option<TlsReload<tls::ClientConfig>>,
    relay_name: String,
    linkdb: Option<tokio::sync::mpsc::UnboundedSender<crate::config::LinkDbConfig>>,
) {
    on_hangup(&path, RelayConfig::load, |new| {
        let mut rest = new.clone();
        if tls.is_some() && new.tls.is_some() {
            rest.tls = running.tls.clone();
        }
        if linkdb.is_some() {
            rest.linkdb = running.linkdb.clone();
        }
        if rest != running {
            warn!(
                "reload: only the TLS files and [linkdb] are applied while running; restart the \
                 relay for the other changes in {}",
                path.display()
            );
        }
        if let Some(tx) = &linkdb {
            if new.linkdb.db.is_some() || running.linkdb.db.is_some() {
                let _ = tx.send(new.linkdb.clone());
                running.linkdb = new.linkdb.clone();
            }
        }
        let (Some(live), Some(t)) = (tls.as_mut(), new.tls.as_ref()) else {
            info!("reload: no TLS credentials in use (mode without subflows): nothing to apply");
            return;
        };
        let build = || {
            let name = tls::relay_name_of_file(&t.cert)?;
            if name != relay_name {
                bail!(
                    "tls.cert ({}) names relay `{name}`, this relay runs as `{relay_name}`: \
                     another name needs a restart (the proxy binds the session to the relay's \
                     name)",
                    t.cert.display()
                );
            }
            Ok(tls::client_config(&t.ca, &t.cert, &t.key)?)
        };
        live.reload_logged(
            t,
            "new subflows use them; each path replaces its subflow when next idle",
            build,
        );
        running.tls = new.tls;
    })
    .await;
}

/// Build a handover predictor from LinkDB, if configured (proxy: downlink, relay: uplink).
/// A LinkDB predictor as [`load_predictor`] built it (none without `linkdb.db`).
#[derive(Default)]
struct LinkDbLoad {
    factory: Option<crate::proxy::PredictorFactory>,
    /// The rides it was built from.
    history: polycorn_linkdb::store::History,
    /// The cells it knows.
    cells: usize,
    /// When it was built, seconds since 1970 (0: no predictor).
    built_secs: i64,
}

impl LinkDbLoad {
    /// Puts what it was built from in `metrics` (`polycorn_linkdb_…`).
    fn show(&self, metrics: &Metrics) {
        metrics.linkdb_in_use(
            self.history.rides,
            self.cells,
            self.built_secs,
            self.history.newest_start_ms.map(|ms| (ms / 1000) as i64),
        );
    }
}

fn load_predictor(cfg: &crate::config::LinkDbConfig) -> Result<LinkDbLoad> {
    let Some(url) = &cfg.db else {
        return Ok(LinkDbLoad::default());
    };
    let mut store = polycorn_linkdb::store::Store::open(url)
        .with_context(|| format!("linkdb.db: open {url}"))?;
    let filter = polycorn_linkdb::store::TripFilter {
        source: None,
        route: cfg.route.clone(),
    };
    let kind = polycorn_linkdb::ModelKind::parse(&cfg.model)
        .with_context(|| format!("linkdb.model: unknown `{}`", cfg.model))?;
    let (predictor, history) = store
        .predictor(&filter, kind)
        .with_context(|| format!("linkdb.db: load rides from {url}"))?;
    let cells = predictor.index().cells().len();
    let [lat, lon] = cfg
        .track_origin
        .context("linkdb.track_origin: required with linkdb.db")?;
    let track = polycorn_linkdb::Track {
        origin: (lat, lon),
        heading_deg: cfg.track_heading_deg,
    };
    info!(
        rides = history.rides,
        cells,
        model = kind.name(),
        "LinkDB predictor loaded"
    );
    let wrapped = crate::predictor::LinkDbPredictor::new(predictor, track, &cfg.carriers);
    Ok(LinkDbLoad {
        factory: Some(Arc::new(move || {
            Box::new(wrapped.clone()) as Box<dyn crate::predictor::TrainPredictor>
        })),
        history,
        cells,
        built_secs: tls::unix_now(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DEFAULT_CONGESTION, SYSTEM_CONGESTION};

    /// A host whose kernel offers only `cubic` and `reno`.
    fn without_bbr(cc: &str) -> std::io::Result<()> {
        match cc {
            "cubic" | "reno" => Ok(()),
            _ => Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("the kernel has no `{cc}`"),
            )),
        }
    }

    fn settled(configured: Option<&str>) -> Result<Option<String>> {
        let mut t = Tuning {
            congestion: Tuning::congestion_of(configured),
            ..Tuning::default()
        };
        settle_congestion_with("proxy.congestion", configured, &mut t, without_bbr)?;
        Ok(t.congestion)
    }

    #[test]
    fn the_default_congestion_control_falls_back_to_the_systems_where_the_host_lacks_it() {
        assert_eq!(
            Tuning::congestion_of(None).as_deref(),
            Some(DEFAULT_CONGESTION)
        );
        assert_eq!(Tuning::congestion_of(Some(SYSTEM_CONGESTION)), None);
        // Left out: BBR where it can be set, else the system's default, and startup goes on.
        assert_eq!(settled(None).unwrap(), None);
        let mut t = Tuning {
            congestion: Tuning::congestion_of(None),
            ..Tuning::default()
        };
        settle_congestion_with("relay.congestion", None, &mut t, |_| Ok(())).unwrap();
        assert_eq!(t.congestion.as_deref(), Some("bbr"));
        // Named: set, or startup stops naming the key.
        assert_eq!(settled(Some("cubic")).unwrap().as_deref(), Some("cubic"));
        assert_eq!(settled(Some("system")).unwrap(), None);
        let e = format!("{:#}", settled(Some("bbr")).unwrap_err());
        assert!(
            e.contains("proxy.congestion = \"bbr\"") && e.contains("no `bbr`"),
            "{e}"
        );
    }
}
