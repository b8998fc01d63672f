//! `polycorn relay`, `polycorn proxy`, `polycorn tls generate`, `polycorn config example`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use polycorn_net::activation::Inherited;
use polycorn_net::config::{
    ContextSource, LogConfig, LogFormat, MetricsConfig, ProxyConfig, RelayConfig, RelayMode,
    UdpPolicy,
};
use polycorn_net::engine::WeakEngine;
use polycorn_net::intercept::{InterceptionLock, NftTproxy, TproxyOptions};
use polycorn_net::live::Live;
use polycorn_net::metrics::Metrics;
use polycorn_net::proxy::{self, ProxyOptions};
use polycorn_net::relay::{self, Carrier, Mode, RelayOptions, RelayPath, Tuning};
use polycorn_net::subflow::HandshakeError;
use polycorn_net::{context, tls};
use polycorn_proto::ContextInfo;
use tracing::{error, info, warn};

fn init_logging(log: &LogConfig) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(&log.level))
        .with_context(|| format!("log.level: invalid filter `{}`", log.level))?;
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match log.format {
        LogFormat::Json => b.json().init(),
        LogFormat::Text => b.init(),
    }
    Ok(())
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("start the async runtime")
}

/// Wait for SIGINT or SIGTERM.
async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("install SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// A scheduler spec with its presets expanded (`polycorn` → `hpr,minrtt,…`), for the startup
/// log: a preset's meaning can change between versions, the log says what runs.
fn expanded(spec: &str) -> String {
    match polycorn_sched::Pipeline::from_spec(spec) {
        Ok(p) => crate::bench::spec_label(spec, Some(p.spec())),
        Err(e) => format!("{spec} (invalid: {e})"),
    }
}

/// Apply `slow_start_after_idle` of a daemon's config to its network namespace.
fn apply_slow_start_after_idle(key: &str, want: Option<bool>) -> Result<()> {
    let Some(on) = want else { return Ok(()) };
    let before = polycorn_net::sockopt::set_slow_start_after_idle(on)
        .with_context(|| format!("{key} = {on}"))?;
    info!(
        value = on as u8,
        was = before as u8,
        "net.ipv4.tcp_slow_start_after_idle set for this network namespace ({key})"
    );
    Ok(())
}

/// Stop startup if the configured congestion control cannot be set.
fn check_congestion(key: &str, name: Option<&str>) -> Result<()> {
    if let Some(cc) = name {
        polycorn_net::sockopt::check_congestion(cc).with_context(|| format!("{key} = {cc:?}"))?;
    }
    Ok(())
}

/// Whether subflow sockets take `rto_max_ms` (an old kernel refuses it), so that the daemon
/// stops at startup with the reason.
fn check_rto_max(key: &str, ms: Option<u32>) -> Result<()> {
    if let Some(ms) = ms {
        polycorn_net::sockopt::check_rto_max(ms).with_context(|| format!("{key} = {ms}"))?;
    }
    Ok(())
}

fn tuning(
    limits: &polycorn_net::config::Limits,
    hold: Duration,
    cc: Option<String>,
    rto_max_ms: Option<u32>,
    idle_probe: (Option<Duration>, Duration),
    window_gain: Option<f64>,
) -> Tuning {
    Tuning {
        flow_window: limits.flow_window_bytes,
        user_window: limits.user_window_bytes,
        max_flows: limits.max_flows as usize,
        hold_time: hold,
        congestion: cc,
        rto_max_ms,
        idle_probe: idle_probe.0,
        idle_after: idle_probe.1,
        window_gain,
        session_buffer: limits.session_buffer_bytes,
    }
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
        tokio::spawn(polycorn_net::metrics::serve(l, metrics));
    }
    Ok(())
}

/// Period of the `polycorn::paths` debug lines.
const PATH_TRACE_PERIOD: Duration = Duration::from_millis(100);

/// With `RUST_LOG=polycorn::paths=debug`, log every path's state as the scheduler sees it
/// every 100 ms (one line per session): how a carrier's RTT, window and queue evolve through a
/// handover or a fade, at a finer grain than the metrics' one-second samples. Stops when the
/// session is over (it holds no reference that would keep the session alive).
fn trace_paths(engine: WeakEngine, names: Vec<String>) -> Option<tokio::task::JoinHandle<()>> {
    if !tracing::enabled!(target: "polycorn::paths", tracing::Level::DEBUG) {
        return None;
    }
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(PATH_TRACE_PERIOD);
        loop {
            tick.tick().await;
            let Some(engine) = engine.upgrade() else {
                return;
            };
            let retrans: Vec<u64> = (0..names.len())
                .map(|i| engine.path_retransmissions(i as u8))
                .collect();
            // The kernel's slow-start threshold, segments (`-`: unset, no loss yet).
            let ssthresh: Vec<String> = (0..names.len())
                .map(|i| {
                    engine
                        .path_ssthresh(i as u8)
                        .map_or_else(|| "-".to_owned(), |s| s.to_string())
                })
                .collect();
            let line = engine.inspect(|s| {
                let mut out = String::new();
                for (i, name) in names.iter().enumerate() {
                    let id = polycorn_sched::PathId::new(i);
                    let Some(p) = id.and_then(|id| s.scheduler().path(id)) else {
                        continue;
                    };
                    let c = s.path_counters(i as u8).unwrap_or_default();
                    out.push_str(&format!(
                        " {name}[up={} srtt_ms={} age_ms={} min_rtt_ms={} cwnd={} kernel_cwnd={} ssthresh={} unacked={} \
                         notsent={} retrans={} data={} reinjected={} redundant={}]",
                        u8::from(p.alive),
                        p.srtt.as_millis(),
                        p.unacked_age.as_millis(),
                        p.min_rtt.as_millis(),
                        p.cwnd_bytes,
                        p.kernel_cwnd_bytes,
                        ssthresh[i],
                        p.unacked_bytes,
                        p.notsent_bytes,
                        retrans[i],
                        c.data_bytes,
                        c.reinjected_bytes,
                        c.redundant_bytes,
                    ));
                }
                out
            });
            drop(engine);
            tracing::debug!(target: "polycorn::paths", "paths{line}");
        }
    }))
}

/// What one session's sampler last wrote into the (shared) metrics, so each sample adds only
/// this session's change: a proxy carries several relays' sessions into one set of metrics.
#[derive(Default)]
struct Sampled {
    paths: Vec<polycorn_proto::PathCounters>,
    open: i64,
    buffered: i64,
    totals: polycorn_proto::FlowTotals,
    stages: Vec<(&'static str, u64)>,
}

/// Copy the session's counters into the metrics every second, until the session is over (the
/// sampler holds no reference that would keep the session alive). Its flows then leave
/// `polycorn_flows_open`.
///
/// `names` name the session's path indices. With `only_connected` (the proxy, which learns the
/// relay's paths as they connect) a path gets series once its subflow has connected; without it
/// (the relay, which names its configured paths) every path has series from the start.
fn sample_metrics(
    engine: WeakEngine,
    relay: Arc<str>,
    names: Vec<String>,
    only_connected: bool,
    metrics: Arc<Metrics>,
) -> tokio::task::JoinHandle<()> {
    trace_paths(engine.clone(), names.clone());
    tokio::spawn(async move {
        let mut last = Sampled {
            paths: vec![polycorn_proto::PathCounters::default(); names.len()],
            ..Sampled::default()
        };
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut waits = Vec::new();
        loop {
            tick.tick().await;
            let Some(engine) = engine.upgrade() else {
                metrics.flows_open.dec_by(last.open);
                metrics.session_buffered.dec_by(last.buffered);
                return;
            };
            sample_once(
                &engine,
                &relay,
                &names,
                only_connected,
                &metrics,
                &mut last,
                &mut waits,
            );
        }
    })
}

/// One sample of [`sample_metrics`]: `last` holds what the previous one wrote.
#[allow(clippy::too_many_arguments)]
fn sample_once(
    engine: &polycorn_net::engine::Engine,
    relay: &str,
    names: &[String],
    only_connected: bool,
    metrics: &Metrics,
    last: &mut Sampled,
    waits: &mut Vec<polycorn_sched::Duration>,
) {
    engine.with(|s, _| s.take_reorder_waits(waits));
    for w in waits.drain(..) {
        metrics.reorder_wait.observe(w.as_micros() as f64 / 1e6);
    }
    let snapshot = engine.inspect(|s| {
        let paths: Vec<_> = (0..names.len())
            .map(|i| {
                let c = s.path_counters(i as u8).unwrap_or_default();
                let st = polycorn_sched::PathId::new(i)
                    .and_then(|id| s.scheduler().path(id))
                    .map(|p| (p.srtt, p.cwnd_bytes));
                // The proxy names a path as the relay's Hello did (relays of protocol 3 on).
                let named = s.path_name(i as u8).map(str::to_owned);
                (c, st, s.path_usable(i as u8), named)
            })
            .collect();
        (
            paths,
            (s.open_flows(), s.buffered_bytes()),
            s.flow_totals(),
            s.stage_moves().to_vec(),
        )
    });
    let (paths, (open, buffered), totals, stages) = snapshot;
    for (i, (c, st, up, named)) in paths.into_iter().enumerate() {
        if only_connected && c.attaches == 0 {
            continue;
        }
        let m = metrics.path(relay, named.as_deref().unwrap_or(&names[i]));
        let l = last.paths[i];
        m.sent_bytes.inc_by(c.tx_bytes.saturating_sub(l.tx_bytes));
        m.received_bytes
            .inc_by(c.rx_bytes.saturating_sub(l.rx_bytes));
        m.reinjected_bytes
            .inc_by(c.reinjected_bytes.saturating_sub(l.reinjected_bytes));
        m.redundant_bytes
            .inc_by(c.redundant_bytes.saturating_sub(l.redundant_bytes));
        if let Some((srtt, cwnd)) = st {
            m.set_rtt(Duration::from_micros(srtt.as_micros()));
            m.set_cwnd_bytes(cwnd);
        }
        m.up.set(i64::from(up));
        if c.attaches > l.attaches {
            // A new subflow connection: its kernel counters start from zero.
            if l.attaches == 0 {
                m.connected();
            } else {
                m.reconnected();
            }
        }
        m.set_kernel_retransmissions(engine.path_retransmissions(i as u8));
        last.paths[i] = c;
    }
    let open = open as i64;
    metrics.flows_open.inc_by(open - last.open);
    last.open = open;
    let buffered = buffered as i64;
    metrics.session_buffered.inc_by(buffered - last.buffered);
    last.buffered = buffered;
    metrics
        .flows_total
        .inc_by(totals.opened.saturating_sub(last.totals.opened));
    metrics
        .flows_reset
        .inc_by(totals.reset.saturating_sub(last.totals.reset));
    last.totals = totals;
    for &(stage, n) in &stages {
        let before = last
            .stages
            .iter()
            .find(|(s, _)| *s == stage)
            .map_or(0, |(_, b)| *b);
        metrics.stage(stage).inc_by(n.saturating_sub(before));
    }
    last.stages = stages;
}

/// The nftables table of the relay's interception.
const RELAY_NFT_TABLE: &str = "polycorn_relay";

/// The relay's interception rules, when its configuration installs them.
fn tproxy_options(cfg: &RelayConfig) -> Result<Option<TproxyOptions>> {
    let ic = &cfg.intercept;
    if !ic.install_nft || (ic.transparent.is_none() && ic.transparent6.is_none()) {
        return Ok(None);
    }
    let lan = ic
        .lan_device
        .clone()
        .context("intercept.lan_device: required with install_nft")?;
    let mut o = TproxyOptions::new(RELAY_NFT_TABLE, lan);
    o.v4_port = ic.transparent.map(|a| a.port());
    o.v6_port = ic.transparent6.map(|a| a.port());
    o.udp_block = ic.udp == UdpPolicy::Block;
    Ok(Some(o))
}

/// How long a starting relay waits for a removal of the interception to finish.
const RELAY_LOCK_WAIT: Duration = Duration::from_secs(5);
/// How long `--remove-interception` waits for a running relay to exit (the relay unit's
/// `TimeoutStopSec` is 40 s).
const REMOVE_WAIT: Duration = Duration::from_secs(45);

/// `polycorn relay --config FILE --remove-interception`: remove the interception rules a relay
/// with this configuration installs (nftables table, policy rules and routes), e.g. after the
/// relay's socket unit stopped (a socket-activated relay leaves them for its next start) or
/// after a crash. Idempotent.
pub fn relay_remove_interception(path: &Path) -> Result<()> {
    let cfg = RelayConfig::load(path)?;
    match tproxy_options(&cfg)? {
        Some(o) => {
            // A relay that still runs (or drains, as systemd stops it beside its socket unit)
            // keeps its rules until it has exited.
            let lock = match InterceptionLock::acquire(&o.table, Duration::ZERO)
                .context("take the interception lock")?
            {
                Some(l) => Some(l),
                None => {
                    println!(
                        "a relay still runs in this network namespace: waiting up to {} s for it \
                         to exit before removing its interception",
                        REMOVE_WAIT.as_secs()
                    );
                    InterceptionLock::acquire(&o.table, REMOVE_WAIT)
                        .context("take the interception lock")?
                }
            };
            if lock.is_none() {
                println!(
                    "the relay still runs after {} s: its interception stays (nftables table inet \
                     {RELAY_NFT_TABLE}); stop polycorn-relay.service too, then run this again",
                    REMOVE_WAIT.as_secs()
                );
                return Ok(());
            }
            polycorn_net::intercept::remove_leftovers(&o)
                .context("remove the TPROXY rules (nftables)")?;
            println!(
                "removed the relay's interception, if it was installed (nftables table inet \
                 {RELAY_NFT_TABLE}, fwmark rules and local routes)"
            );
        }
        None => println!(
            "{}: the relay installs no interception (intercept.install_nft or no transparent \
             listener); nothing to remove",
            path.display()
        ),
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

/// The relay's paths as its configuration describes them.
fn relay_paths(cfg: &RelayConfig) -> Vec<RelayPath> {
    cfg.paths
        .iter()
        .map(|p| RelayPath {
            name: p.name.clone(),
            device: Some(p.device.clone()),
            source: p.source,
            proxy: cfg.proxy_for(p),
            mtu: p.mtu,
        })
        .collect()
}

/// `polycorn relay --config FILE --check-paths`: over every path, as the relay would, reach the
/// proxy (TCP pinned to the path, TLS with the relay's certificate, Hello) and say how it went;
/// the proxy answers without opening a session, so this may run beside a working relay.
/// Returns the exit status: 0 every path reached the proxy, 1 some did not, 2 none did.
/// With `json`, one JSON object per check instead of the lines.
pub fn relay_check_paths(path: &Path, json: bool) -> Result<u8> {
    let cfg = RelayConfig::load(path)?;
    if cfg.relay.mode != RelayMode::Polycorn {
        bail!(
            "{}: relay.mode is not \"polycorn\": only polycorn's subflows reach a proxy (the \
             baselines' tunnels go to tunnel_port)",
            path.display()
        );
    }
    let t = cfg
        .tls
        .as_ref()
        .with_context(|| format!("{}: [tls] is required in polycorn mode", path.display()))?;
    let relay_name = tls::relay_name_of_file(&t.cert)?;
    let tls_cfg = tls::client_config(&t.ca, &t.cert, &t.key)?;
    let paths = relay_paths(&cfg);
    let sockopts = tuning(
        &cfg.limits,
        cfg.relay.hold_time(),
        cfg.relay.congestion.clone(),
        cfg.relay.rto_max_ms,
        (cfg.relay.idle_probe(), cfg.relay.idle_probe_after()),
        cfg.relay.window_gain(),
    )
    .subflow_sockopts();
    if !json {
        println!(
            "checking {} path(s) as relay `{relay_name}`: TCP over the path, TLS, Hello",
            paths.len()
        );
    }
    let results = runtime()?.block_on(polycorn_net::check::check_paths(&paths, tls_cfg, sockopts));
    let ok = results.iter().filter(|r| r.ok()).count();
    let status = match ok {
        n if n == results.len() => 0,
        0 => 2,
        _ => 1,
    };
    if json {
        for r in &results {
            println!("{}", check_json(r));
        }
        return Ok(status);
    }
    for r in &results {
        println!("{}", check_line(r));
    }
    let proxies: std::collections::BTreeSet<_> = results.iter().filter_map(|r| r.addr).collect();
    if results.len() == paths.len() {
        println!("{ok} of {} path(s) reach the proxy", results.len());
    } else {
        println!(
            "{ok} of {} checks passed ({} path(s), {} proxy address(es))",
            results.len(),
            paths.len(),
            proxies.len()
        );
    }
    Ok(status)
}

/// One check of `relay --check-paths --json`.
fn check_json(r: &polycorn_net::check::PathCheck) -> serde_json::Value {
    use polycorn_net::check::Answer;
    let ms = |d: Duration| (d.as_secs_f64() * 1e4).round() / 10.0;
    let mut v = serde_json::json!({
        "path": r.path,
        "device": r.device,
        "proxy": r.proxy,
        "addr": r.addr.map(|a| a.to_string()),
        "ok": r.ok(),
    });
    match &r.outcome {
        Ok(ok) => {
            let (answer, says) = match &ok.answer {
                Answer::Checked(w) => ("checked", Some(w)),
                Answer::ProbeLost(w) => ("probe_lost", Some(w)),
                Answer::AnswerLost => ("answer_lost", None),
                Answer::Older => ("older_proxy", None),
            };
            v["source"] = serde_json::json!(ok.local.map(|a| a.ip().to_string()));
            v["setup_ms"] = serde_json::json!(ms(ok.setup));
            v["rtt_ms"] = serde_json::json!(ok.rtt.map(ms));
            v["mss"] = serde_json::json!(ok.mss);
            v["proxy_cert_not_after"] = serde_json::json!(ok.proxy_cert_not_after);
            v["answer"] = serde_json::json!(answer);
            v["proxy_says"] = serde_json::json!(says);
        }
        Err(e) => v["error"] = serde_json::json!(e.to_string()),
    }
    v
}

/// One path's line of `relay --check-paths`.
fn check_line(r: &polycorn_net::check::PathCheck) -> String {
    use polycorn_net::check::{Answer, ANSWER_WAIT, PROBE_BYTES};
    let device = r.device.as_deref().unwrap_or("-");
    let kib = PROBE_BYTES / 1024;
    let black_hole = "full-size packets are lost on this path (a path-MTU black hole: set the \
                      path's `mtu`, e.g. 1400)";
    match &r.outcome {
        Ok(ok) => {
            let source = ok.local.map_or_else(|| "-".into(), |a| a.ip().to_string());
            let ms = |d: Duration| match d.as_secs_f64() * 1e3 {
                ms if ms < 10.0 => format!("{ms:.1} ms"),
                ms => format!("{ms:.0} ms"),
            };
            let mut facts = format!("proxy {} reached in {}", ok.proxy, ms(ok.setup));
            if let Some(rtt) = ok.rtt {
                facts.push_str(&format!(", RTT {}", ms(rtt)));
            }
            if let Some(mss) = ok.mss {
                facts.push_str(&format!(", MSS {mss}"));
            }
            let head = format!("{} ({device}, {source})", r.path);
            // The proxy's certificate only when it ends soon.
            let now = tls::unix_now();
            let cert = ok
                .proxy_cert_not_after
                .map(|not_after| tls::Validity {
                    key: "the proxy's certificate",
                    file: ok.proxy.to_string().into(),
                    not_after,
                })
                .filter(|v| v.needs_warning(now))
                .map(|v| format!("; {}", v.describe(now)))
                .unwrap_or_default();
            let line = match &ok.answer {
                Answer::Checked(words) => {
                    format!("{head}: ok, {facts}, {kib} KiB each way; {words}")
                }
                Answer::Older => format!(
                    "{head}: ok, {facts}; the proxy is of an earlier build without path checks \
                     (no data sent; it opened a session for the check, which the check closed)"
                ),
                Answer::ProbeLost(words) => format!(
                    "{head}: FAILED: {facts}, but the {kib} KiB sent to it did not arrive: \
                     {black_hole}; {words}"
                ),
                Answer::AnswerLost => format!(
                    "{head}: FAILED: {facts}, but its {kib} KiB answer did not arrive within {} \
                     s: {black_hole}, or the path lost coverage just then",
                    ANSWER_WAIT.as_secs()
                ),
            };
            line + &cert
        }
        Err(e) => {
            let target = r.addr.map_or_else(|| r.proxy.clone(), |a| a.to_string());
            let mut line = format!("{} ({device}): FAILED to reach {target}: {e}", r.path);
            if e.is_setup() {
                line.push_str(
                    " (configuration or credentials: the relay's attempts fail the same way \
                     until that is fixed)",
                );
            } else if e.is_refused() {
                line.push_str(" (the proxy's host answered, but no proxy listens there)");
            } else if matches!(e, HandshakeError::Timeout(_)) {
                line.push_str(
                    " (nothing came back over this path: no coverage, a carrier or firewall \
                     dropping the port, or the proxy's host is down)",
                );
            }
            line
        }
    }
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
    fn new(
        live: Live<C>,
        files: &polycorn_net::config::TlsFiles,
        watch: CertWatch,
    ) -> Result<Self> {
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
        files: &polycorn_net::config::TlsFiles,
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
        files: &polycorn_net::config::TlsFiles,
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
                crate::error_text(&e)
            ),
        }
    }
}

/// `polycorn relay --config FILE`.
pub fn relay(path: &Path) -> Result<()> {
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
    check_congestion("relay.congestion", cfg.relay.congestion.as_deref())?;
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
                polycorn_net::direct::MptcpEndpoints::install(&paths, paths.len())
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
        match cfg.context.source {
            ContextSource::None => {}
            ContextSource::Gpsd => {
                let (tx, rx) = tokio::sync::mpsc::channel(64);
                let addr = cfg.context.gpsd;
                tokio::spawn(async move {
                    let _ = context::follow_gpsd(addr, tx).await;
                });
                tokio::spawn(forward_fixes(rx, ctx_tx.clone(), recorder.take()));
                info!(%addr, "context from gpsd");
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
                tokio::spawn(forward_fixes(rx, ctx_tx.clone(), recorder.take()));
                info!(file = %file.display(), "context replayed from a log");
            }
        }
        let metrics = Arc::new(Metrics::with_build("relay", crate::VERSION));
        linkdb.show(&metrics);
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
            tuning: tuning(
                &cfg.limits,
                cfg.relay.hold_time(),
                cfg.relay.congestion.clone(),
                cfg.relay.rto_max_ms,
                (cfg.relay.idle_probe(), cfg.relay.idle_probe_after()),
                cfg.relay.window_gain(),
            ),
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
                        .shut_down("the relay is shutting down", polycorn_net::proxy::SHUTDOWN_GRACE)
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

/// `polycorn proxy --config FILE`.
pub fn proxy(path: &Path) -> Result<()> {
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
    check_congestion("proxy.congestion", cfg.proxy.congestion.as_deref())?;
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
        let metrics = Arc::new(Metrics::with_build("proxy", crate::VERSION));
        for reason in polycorn_net::proxy::FRAME_REJECT_REASONS {
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
            tuning: tuning(
                &cfg.limits,
                cfg.proxy.hold_time(),
                cfg.proxy.congestion.clone(),
                cfg.proxy.rto_max_ms,
                (cfg.proxy.idle_probe(), cfg.proxy.idle_probe_after()),
                cfg.proxy.window_gain(),
            ),
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
                    let live: Vec<(u64, polycorn_net::proxy::LiveSession)> = sessions
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
    policy: Live<polycorn_net::policy::DestinationPolicy>,
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
    linkdb: tokio::sync::mpsc::UnboundedSender<polycorn_net::config::LinkDbConfig>,
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
    mut requests: tokio::sync::mpsc::UnboundedReceiver<polycorn_net::config::LinkDbConfig>,
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
    linkdb: Option<tokio::sync::mpsc::UnboundedSender<polycorn_net::config::LinkDbConfig>>,
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

/// The proxy's sessions whose metrics are sampled: id -> (relay name, paths sampled).
type StartedSessions = std::collections::HashMap<u64, Arc<str>>;

/// One round of the proxy's metrics bookkeeping over the `live` sessions: a new session gets
/// a sampler ([`sample_metrics`]) for its paths; a session that is over is forgotten (its
/// sampler stops by itself), and a relay left with no session shows its paths down.
fn track_sessions(
    started: &mut StartedSessions,
    live: Vec<(u64, polycorn_net::proxy::LiveSession)>,
    m: &Arc<Metrics>,
) {
    let (gone, kept): (Vec<_>, Vec<_>) = started
        .drain()
        .partition(|(id, _)| !live.iter().any(|(l, _)| l == id));
    started.extend(kept);
    for (_, relay) in gone {
        if !live.iter().any(|(_, l)| l.relay == relay) {
            m.relay_paths_down(&relay);
        }
    }
    for (id, live) in live {
        if let std::collections::hash_map::Entry::Vacant(slot) = started.entry(id) {
            slot.insert(live.relay.clone());
            // Every path index a relay may use, named by index unless its Hello named it; a
            // path gets series once it has connected (a relay's paths come up one by one).
            sample_metrics(
                live.engine.downgrade(),
                live.relay,
                (0..polycorn_sched::MAX_PATHS)
                    .map(|i| i.to_string())
                    .collect(),
                true,
                m.clone(),
            );
        }
    }
}

/// Build a handover predictor from LinkDB, if configured (proxy: downlink, relay: uplink).
/// A LinkDB predictor as [`load_predictor`] built it (none without `linkdb.db`).
#[derive(Default)]
struct LinkDbLoad {
    factory: Option<polycorn_net::proxy::PredictorFactory>,
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

fn load_predictor(cfg: &polycorn_net::config::LinkDbConfig) -> Result<LinkDbLoad> {
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
    let wrapped = polycorn_net::predictor::LinkDbPredictor::new(predictor, track, &cfg.carriers);
    Ok(LinkDbLoad {
        factory: Some(Arc::new(move || {
            Box::new(wrapped.clone()) as Box<dyn polycorn_net::predictor::TrainPredictor>
        })),
        history,
        cells,
        built_secs: tls::unix_now(),
    })
}

/// `polycorn tls generate DIR`.
pub fn tls_generate(dir: &Path, san: &[String], force: bool) -> Result<()> {
    let g = tls::generate(dir, san, force)?;
    println!("wrote {}", dir.display());
    println!(
        "  proxy: {} {}",
        g.proxy_cert.display(),
        g.proxy_key.display()
    );
    println!(
        "  relay: {} {}",
        g.relay_cert.display(),
        g.relay_key.display()
    );
    println!("  CA:    {} (give to both)", g.ca_cert.display());
    println!(
        "  keep {} off the train and off the proxy: whoever has it can mint relays",
        g.ca_key.display()
    );
    Ok(())
}

/// `polycorn tls relay DIR --name NAME`.
pub fn tls_relay(name: &str, a: &crate::IssueArgs) -> Result<()> {
    let out = a.out.as_deref().unwrap_or(&a.dir);
    let issued = tls::issue_relay_valid_for(&a.dir, name, out, a.force, a.valid_days)?;
    print_issued(&format!("relay `{name}`"), &issued.cert, &issued.key)?;
    println!(
        "  give them and {} to the train, as [tls] cert and key of its relay.toml",
        a.dir.join("ca.pem").display()
    );
    println!(
        "  the proxy names this relay `{name}` in its logs and metrics; to shut it out, add it \
         to proxy.revoked_relays"
    );
    Ok(())
}

/// `polycorn tls proxy DIR`: a new proxy certificate and key from the CA in `dir`.
pub fn tls_proxy(san: &[String], a: &crate::IssueArgs) -> Result<()> {
    let out = a.out.as_deref().unwrap_or(&a.dir);
    let issued = tls::issue_proxy(&a.dir, san, out, a.force, a.valid_days)?;
    print_issued("proxy certificate", &issued.cert, &issued.key)?;
    println!(
        "  put them in place of the proxy's [tls] cert and key, then `systemctl reload \
         polycorn-proxy`: relays' new subflows get it; the trains' files stay as they are"
    );
    Ok(())
}

/// What `tls relay` and `tls proxy` wrote, and how long it is valid.
fn print_issued(what: &str, cert: &Path, key: &Path) -> Result<()> {
    println!("{what}: {} {}", cert.display(), key.display());
    let v = tls::validity_of_file("certificate", cert)?;
    println!("  {}", v.describe(tls::unix_now()));
    Ok(())
}

/// `config check --reload PID`: SIGHUP to the daemon `pid`, after its file passed the check.
pub fn signal_reload(pid: i32) -> Result<()> {
    if pid <= 0 {
        bail!("--reload {pid}: not a process id (is the service running?)");
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGHUP,
    )
    .with_context(|| format!("--reload: cannot signal process {pid}"))
}

/// `polycorn config example relay|proxy|relay.service|proxy.service|relay.socket|proxy.socket`
/// (or `linkdb-learn.service|linkdb-learn.timer`, or `alerts`);
/// `config`: the configuration whose listeners a socket unit binds (default: the example's).
pub fn config_example(role: &str, config: Option<&Path>) -> Result<()> {
    if config.is_some() && !role.ends_with(".socket") {
        bail!(
            "--config goes with `relay.socket` or `proxy.socket` only (the unit binds that \
             file's listeners)"
        );
    }
    match role {
        "relay" => print!("{}", RelayConfig::example()),
        "proxy" => print!("{}", ProxyConfig::example()),
        "relay.service" | "proxy.service" => {
            let bin = std::env::current_exe().context("find this program's path")?;
            let daemon = role.trim_end_matches(".service");
            print!("{}", systemd_unit(daemon, &bin)?);
        }
        "relay.socket" => {
            let bin = std::env::current_exe().context("find this program's path")?;
            let cfg = match config {
                Some(p) => RelayConfig::load(p)?,
                None => RelayConfig::example_settings(),
            };
            print!("{}", systemd_socket_unit(&cfg, &bin)?);
        }
        "linkdb-learn.service" => {
            let bin = std::env::current_exe().context("find this program's path")?;
            print!("{}", linkdb_learn_unit(&bin)?);
        }
        "linkdb-learn.timer" => print!("{LINKDB_LEARN_TIMER}"),
        "alerts" => print!("{ALERTS}"),
        "proxy.socket" => {
            let cfg = match config {
                Some(p) => ProxyConfig::load(p)?,
                None => ProxyConfig::example_settings(),
            };
            print!("{}", systemd_proxy_socket_unit(&cfg));
        }
        other => bail!(
            "unknown example `{other}`: expected `relay`, `proxy` (configuration files) or \
             `relay.service`, `proxy.service`, `relay.socket`, `proxy.socket`, \
             `linkdb-learn.service`, `linkdb-learn.timer` (systemd units) or `alerts` \
             (Prometheus alerting rules)"
        ),
    }
    Ok(())
}

/// Prometheus alerting rules for relays and proxies (`polycorn config example alerts`), written
/// against the metrics of `polycorn_net::metrics`.
pub(crate) const ALERTS: &str = include_str!("alerts.yml");

/// A oneshot unit on the proxy's host: LinkDB learns the rides the proxy recorded on past days
/// (`linkdb import --proxy-config … --past-days`), then the proxy rebuilds its predictor (a
/// reload), if it runs.
pub fn linkdb_learn_unit(bin: &Path) -> Result<String> {
    let bin = unit_bin(bin)?;
    Ok(format!(
        r#"# LinkDB learns the rides polycorn-proxy recorded ([context] record in proxy.toml), then the
# proxy rebuilds its predictor from them. Started each night by polycorn-linkdb-learn.timer:
#   polycorn config example linkdb-learn.service > /etc/systemd/system/polycorn-linkdb-learn.service
#   polycorn config example linkdb-learn.timer > /etc/systemd/system/polycorn-linkdb-learn.timer
#   systemctl daemon-reload && systemctl enable --now polycorn-linkdb-learn.timer
# Run it at once with `systemctl start polycorn-linkdb-learn`; its report is in
# `journalctl -u polycorn-linkdb-learn`. Only logs of past UTC days are taken (today's are still
# being written); a file imported before stores nothing again.
[Unit]
Description=polycorn: LinkDB learns the rides the proxy recorded
After=network-online.target polycorn-proxy.service
Wants=network-online.target

[Service]
Type=oneshot
ExecStart={bin} linkdb import --proxy-config /etc/polycorn/proxy.toml --past-days
# The proxy's sessions take the new predictor without a restart; nothing if it is not running.
ExecStartPost=systemctl try-reload-or-restart polycorn-proxy.service
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
# /var/lib/polycorn stays writable (a LinkDB SQLite file); PostgreSQL is reached over the network.
StateDirectory=polycorn
"#
    ))
}

/// When `linkdb-learn.service` runs: every night, after the UTC day's logs are closed.
const LINKDB_LEARN_TIMER: &str = r#"# Starts polycorn-linkdb-learn.service every night, after the UTC day's context logs close
# (see `polycorn config example linkdb-learn.service`). A night missed while the host was down
# is made up at the next boot.
[Unit]
Description=polycorn: LinkDB learns the past day's rides every night

[Timer]
OnCalendar=*-*-* 00:30:00 UTC
RandomizedDelaySec=30min
Persistent=true

[Install]
WantedBy=timers.target
"#;

/// A systemd socket unit holding the relay's passenger listeners (those of `cfg`) across
/// restarts of `polycorn-relay.service` (socket activation; `polycorn_net::activation`).
pub fn systemd_socket_unit(cfg: &RelayConfig, bin: &Path) -> Result<String> {
    let bin = unit_bin(bin)?;
    let ic = &cfg.intercept;
    let mut listen = String::new();
    if let Some(a) = ic.transparent {
        listen += &format!("# intercept.transparent\nListenStream={a}\n");
    }
    if let Some(a) = ic.transparent6 {
        listen += &format!("# intercept.transparent6\nListenStream={a}\n");
    }
    if let Some(a) = ic.socks5 {
        listen += &format!("# intercept.socks5\nListenStream={a}\n");
    }
    if let Some(a) = cfg.dns.listen {
        listen += &format!("# dns.listen\nListenDatagram={a}\n");
    }
    if let Some(dev) = &ic.lan_device {
        listen += &format!(
            "# Passengers' connections only, never the carriers' side (intercept.lan_device;\n\
             # the relay binds its transparent listeners to it too).\nBindToDevice={dev}\n"
        );
    }
    Ok(format!(
        r#"# The polycorn relay's passenger listeners, held by systemd across restarts of the relay
# (socket activation). Without it a restarted or crashed relay's listeners are gone until the
# next process binds them, and passengers' new connections wait for their SYN retransmission
# (about 1 s); with it they wait in the listeners' backlog and the next relay takes them. The
# relay then leaves its nftables rules installed when it stops; this unit removes them when
# it stops itself. Install it beside polycorn-relay.service (`config example relay.service`):
#   polycorn config example relay.socket --config /etc/polycorn/relay.toml > /etc/systemd/system/polycorn-relay.socket
#   systemctl daemon-reload && systemctl enable --now polycorn-relay.socket && systemctl restart polycorn-relay
# The addresses must be exactly the relay's listeners; the relay refuses to start otherwise,
# naming both. Print this again after changing them in relay.toml.

[Unit]
Description=polycorn relay: passengers' listeners

[Socket]
{listen}# TPROXY listeners must be transparent (the relay also sets it on the sockets it is given).
Transparent=yes
# IPv6 listeners take IPv6 only, as the relay's own do (an IPv4 one may share the port).
BindIPv6Only=ipv6-only
Backlog=1024
Service=polycorn-relay.service
ExecStopPost={bin} relay --config /etc/polycorn/relay.toml --remove-interception

[Install]
WantedBy=sockets.target
"#
    ))
}

/// A systemd socket unit holding the proxy's subflow listeners (`proxy.listen` of `cfg`)
/// across restarts of `polycorn-proxy.service`. The baselines' tunnel listener (an MPTCP
/// socket) stays the proxy's own.
pub fn systemd_proxy_socket_unit(cfg: &ProxyConfig) -> String {
    let all = &cfg.proxy.listen;
    let mut listen = String::new();
    for a in all {
        listen += &format!("ListenStream={a}\n");
    }
    // As the proxy binds its own: an IPv6 listener is IPv6-only when an IPv4 one shares its
    // port, and otherwise follows the system's default (on Linux it takes both families).
    let shared = all
        .iter()
        .any(|a| a.is_ipv6() && all.iter().any(|b| b.is_ipv4() && b.port() == a.port()));
    let v6only = if shared {
        "# An IPv4 listener shares an IPv6 one's port: IPv6 listeners take IPv6 only.\n\
         BindIPv6Only=ipv6-only\n"
    } else {
        ""
    };
    format!(
        r#"# The polycorn proxy's subflow listeners (proxy.listen), held by systemd across restarts of
# the proxy (socket activation). Without it relays' subflows are refused while no proxy
# listens and each relay tries again on its next attempt (every 250 ms); with it they wait in
# the listeners' backlog and the next proxy takes them. Passengers' open connections are still
# reset by a restart: the proxy's sessions do not survive it. proxy.tunnel_listen (kernel
# MPTCP baselines) is not held: the proxy binds that MPTCP socket itself. Install it beside
# polycorn-proxy.service (`config example proxy.service`):
#   polycorn config example proxy.socket --config /etc/polycorn/proxy.toml > /etc/systemd/system/polycorn-proxy.socket
#   systemctl daemon-reload && systemctl enable --now polycorn-proxy.socket && systemctl restart polycorn-proxy
# The addresses must be exactly the proxy's listen addresses; the proxy refuses to start
# otherwise, naming both. Print this again after changing them in proxy.toml.

[Unit]
Description=polycorn proxy: relays' subflow listeners

[Socket]
# proxy.listen
{listen}{v6only}Backlog=1024
Service=polycorn-proxy.service

[Install]
WantedBy=sockets.target
"#
    )
}

/// This program's path for a unit: UTF-8 without whitespace.
fn unit_bin(bin: &Path) -> Result<&str> {
    bin.to_str()
        .filter(|b| !b.contains(char::is_whitespace))
        .with_context(|| {
            format!(
                "{}: this program's path must be UTF-8 without spaces to go in a unit; \
                 install it elsewhere (e.g. /usr/local/bin/polycorn)",
                bin.display()
            )
        })
}

/// A systemd unit that runs `bin relay|proxy --config /etc/polycorn/ROLE.toml`: checked
/// before every start, restarted whenever it stops, with the network powers the daemon needs
/// and little else.
pub fn systemd_unit(role: &str, bin: &Path) -> Result<String> {
    let (what, after, caps) = match role {
        "relay" => (
            "passengers' TCP over every cellular path to the proxy",
            // Modems may come up later: the relay keeps connecting each path (and warns about a
            // path that stays without a subflow).
            "network-online.target gpsd.service",
            // nftables TPROXY and policy routing, SO_BINDTODEVICE, IP_TRANSPARENT, DNS on :53.
            "CAP_NET_ADMIN CAP_NET_RAW CAP_NET_BIND_SERVICE",
        ),
        "proxy" => (
            "terminates relays' subflows and connects to servers",
            "network-online.target",
            // A listen port below 1024; the sysctl of `slow_start_after_idle` when set.
            "CAP_NET_ADMIN CAP_NET_BIND_SERVICE",
        ),
        other => bail!("no systemd unit for `{other}`: expected `relay` or `proxy`"),
    };
    let bin = unit_bin(bin)?;
    // Both apply some changes on SIGHUP, which `config check --reload` sends once the file
    // passes (no `kill` program needed).
    let applies = if role == "proxy" {
        "proxy.revoked_relays, the TLS files, [policy], [context] and [linkdb] (LinkDB rebuilt from its database)"
    } else {
        "the TLS files (renewed certificates) and [linkdb] (LinkDB rebuilt from its database)"
    };
    let reload = format!(
        "# systemctl reload polycorn-{role}: applies {applies}; other keys need a restart.\n\
         ExecReload={bin} config check {role} /etc/polycorn/{role}.toml --reload $MAINPID\n"
    );
    Ok(format!(
        r#"# polycorn {role} as a systemd service. Install it with:
#   install -m 0755 {bin} /usr/local/bin/polycorn    # if not there already (then print this again)
#   mkdir -p /etc/polycorn && polycorn config example {role} > /etc/polycorn/{role}.toml   # edit it
#   polycorn config example {role}.service > /etc/systemd/system/polycorn-{role}.service
#   systemctl daemon-reload && systemctl enable --now polycorn-{role}
# Logs: journalctl -u polycorn-{role} (set [log] format = "json" for structured logs).
# Relative file names in {role}.toml resolve against /etc/polycorn; keep the TLS key there
# readable by root only.

[Unit]
Description=polycorn {role}: {what}
Wants=network-online.target
After={after}
# Never give up restarting (a train runs for days without anyone to log in).
StartLimitIntervalSec=0

[Service]
Type=exec
ExecStartPre={bin} config check {role} /etc/polycorn/{role}.toml
ExecStart={bin} {role} --config /etc/polycorn/{role}.toml
{reload}Restart=always
RestartSec=2
# On SIGTERM the {role} lets open connections finish for {role}.drain_s (default 0, at most
# 30 s), tells the other end it is leaving (within two seconds), closes its connections and
# removes what it installed (the relay: its nftables table and policy routes, unless
# polycorn-relay.socket holds its listeners); after a harder kill the next start removes
# leftovers.
KillSignal=SIGTERM
TimeoutStopSec=40
# One socket per passenger connection (and, on the proxy, per server connection).
LimitNOFILE=1048576
# Root's network powers and nothing else.
CapabilityBoundingSet={caps}
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
# /var/lib/polycorn stays writable (e.g. a LinkDB SQLite file, [context] record).
StateDirectory=polycorn
ProtectKernelModules=yes
ProtectControlGroups=yes
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
RestrictNamespaces=yes
RestrictRealtime=yes
LockPersonality=yes
SystemCallArchitectures=native

[Install]
WantedBy=multi-user.target
"#
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use polycorn_net::engine::Engine;
    use polycorn_proto::{Role, Session, SessionConfig};

    /// Every series the shipped alerting rules name is one the daemons export (a renamed metric
    /// would leave its alert silent for good), and each end says which it is.
    #[test]
    fn the_alerting_rules_name_only_exported_series() {
        let text = Metrics::with_build("relay", "0.1.0 (abc1234)").encode();
        assert!(
            text.contains("polycorn_build_info{role=\"relay\",version=\"0.1.0 (abc1234)\"} 1"),
            "{text}"
        );
        // The sample names each family's `# TYPE` line stands for.
        let mut exported = std::collections::BTreeSet::new();
        for l in text.lines() {
            let mut w = l.split_whitespace();
            let (Some("#"), Some("TYPE"), Some(name), Some(kind)) =
                (w.next(), w.next(), w.next(), w.next())
            else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                "info" => &["_info"],
                _ => &[""],
            };
            for s in suffixes {
                exported.insert(format!("{name}{s}"));
            }
        }
        let mut named = std::collections::BTreeSet::new();
        let mut rest = ALERTS;
        while let Some(i) = rest.find("polycorn_") {
            let name: String = rest[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[i + name.len()..];
            named.insert(name);
        }
        assert!(named.len() >= 10, "{named:?}");
        let unknown: Vec<_> = named.difference(&exported).collect();
        assert!(unknown.is_empty(), "not exported: {unknown:?}\n{text}");
        // Every alert has a severity and a summary.
        let alerts = ALERTS.matches("- alert: ").count();
        assert_eq!(ALERTS.matches("severity: ").count(), alerts);
        assert_eq!(ALERTS.matches("summary: ").count(), alerts);
    }

    /// The proxy's socket unit binds its listen addresses as the proxy would: an IPv6 one
    /// IPv6-only only when an IPv4 one shares its port.
    #[test]
    fn the_proxy_socket_unit_lists_every_listener_and_splits_families_on_a_shared_port() {
        let mut cfg = ProxyConfig::example_settings();
        cfg.proxy.listen = vec!["0.0.0.0:7700".parse().unwrap()];
        let unit = systemd_proxy_socket_unit(&cfg);
        assert!(
            unit.lines().any(|l| l == "ListenStream=0.0.0.0:7700"),
            "{unit}"
        );
        assert!(!unit.contains("BindIPv6Only"), "{unit}");
        cfg.proxy.listen = vec!["[::]:7700".parse().unwrap()];
        assert!(!systemd_proxy_socket_unit(&cfg).contains("BindIPv6Only"));
        cfg.proxy.listen = vec![
            "0.0.0.0:7700".parse().unwrap(),
            "[::]:7700".parse().unwrap(),
        ];
        let unit = systemd_proxy_socket_unit(&cfg);
        for line in [
            "ListenStream=0.0.0.0:7700",
            "ListenStream=[::]:7700",
            "BindIPv6Only=ipv6-only",
        ] {
            assert!(unit.lines().any(|l| l == line), "{line} in\n{unit}");
        }
    }

    /// A proxy runs for weeks and sees many relay sessions come and go: a session's metrics
    /// sampler must stop with it, not keep the session (and its timer) alive.
    #[tokio::test(start_paused = true)]
    async fn the_metrics_sampler_stops_when_its_session_is_over() {
        let session = Session::new(SessionConfig::new(Role::Proxy, 1, "minrtt")).unwrap();
        let (engine, _events) =
            Engine::new(session, Box::new(polycorn_sched::predict::NoPrediction));
        let metrics = Arc::new(Metrics::new());
        let names = vec!["0".to_string(), "1".to_string()];
        let weak = engine.downgrade();
        let sampler = sample_metrics(
            engine.downgrade(),
            "r".into(),
            names,
            false,
            metrics.clone(),
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!sampler.is_finished(), "sampling while the session lives");
        assert!(
            metrics.encode().contains("polycorn_path_up"),
            "the sampler wrote path metrics"
        );
        drop(engine);
        tokio::time::timeout(Duration::from_secs(5), sampler)
            .await
            .expect("the sampler ended after its session")
            .unwrap();
        assert!(weak.upgrade().is_none(), "nothing else holds the session");
    }

    /// A proxy serving several trains: each session is sampled once under its relay's name,
    /// and a relay whose last session is over shows its paths down, while a relay that still
    /// has a session (it restarted) keeps them.
    #[tokio::test(start_paused = true)]
    async fn a_relay_without_sessions_shows_its_paths_down() {
        let metrics = Arc::new(Metrics::new());
        let live = |id: u64, relay: &str| {
            let session = Session::new(SessionConfig::new(Role::Proxy, id, "minrtt")).unwrap();
            let (engine, _events) =
                Engine::new(session, Box::new(polycorn_sched::predict::NoPrediction));
            (
                id,
                polycorn_net::proxy::LiveSession {
                    relay: relay.into(),
                    engine,
                },
            )
        };
        let (a, b1, b2) = (live(1, "train-a"), live(2, "train-b"), live(3, "train-b"));
        let mut started = StartedSessions::new();
        track_sessions(&mut started, vec![a.clone(), b1.clone()], &metrics);
        assert_eq!(started.len(), 2);
        assert_eq!(&*started[&1], "train-a");
        // Sampled, but no path of theirs has connected: no path series yet.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let text = metrics.encode();
        assert!(text.contains("polycorn_flows_open"), "{text}");
        assert!(!text.contains("polycorn_path_up{"), "{text}");
        // As if both trains' paths were up.
        for relay in ["train-a", "train-b"] {
            metrics.path(relay, "0").up.set(1);
        }
        // train-a's session ends; train-b's first one too, but it has a new one.
        track_sessions(&mut started, vec![b2.clone()], &metrics);
        assert_eq!(started.keys().copied().collect::<Vec<_>>(), [3]);
        assert_eq!(metrics.path("train-a", "0").up.get(), 0);
        assert_eq!(metrics.path("train-b", "0").up.get(), 1);
        // Only existing series are set down.
        metrics.relay_paths_down("train-z");
        assert!(!metrics.encode().contains("train-z"));
        drop((a, b1, b2));
    }

    /// A proxy serves several relays' sessions into one set of metrics: open flows add up over
    /// the sessions, a session that ends takes its flows out of the gauge, and the counters
    /// count every session's flows once.
    #[tokio::test(start_paused = true)]
    async fn flow_metrics_add_up_over_sessions_and_leave_with_them() {
        use polycorn_proto::{Destination, ResetReason};
        let metrics = Arc::new(Metrics::new());
        let names = vec!["0".to_string()];
        let user: std::net::IpAddr = "10.0.1.2".parse().unwrap();
        let dst = Destination::Addr("198.51.100.7:80".parse().unwrap());
        let mut engines = Vec::new();
        let mut samplers = Vec::new();
        for (id, n) in [(1, 2), (2, 3)] {
            let session = Session::new(SessionConfig::new(Role::Relay, id, "minrtt")).unwrap();
            let (engine, events) =
                Engine::new(session, Box::new(polycorn_sched::predict::NoPrediction));
            for _ in 0..n {
                engine.with(|s, now| s.open_flow(now, user, dst.clone()).unwrap());
            }
            samplers.push(sample_metrics(
                engine.downgrade(),
                format!("r{id}").into(),
                names.clone(),
                false,
                metrics.clone(),
            ));
            engines.push((engine, events));
        }
        let value = |name: &str| -> f64 {
            metrics
                .encode()
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
                .unwrap_or_else(|| panic!("no {name}"))
        };
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(value("polycorn_flows_open"), 5.0);
        assert_eq!(value("polycorn_flows_total"), 5.0);
        assert_eq!(value("polycorn_flows_reset_total"), 0.0);
        engines[1]
            .0
            .with(|s, now| s.reset_flow(now, 1, ResetReason::PeerReset).unwrap());
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(value("polycorn_flows_open"), 4.0);
        assert_eq!(value("polycorn_flows_total"), 5.0, "counted once");
        assert_eq!(value("polycorn_flows_reset_total"), 1.0);
        drop(engines.remove(0));
        let first = samplers.remove(0);
        tokio::time::timeout(Duration::from_secs(5), first)
            .await
            .expect("the first session's sampler ended")
            .unwrap();
        assert_eq!(value("polycorn_flows_open"), 2.0, "its 2 flows left");
        assert_eq!(value("polycorn_flows_total"), 5.0);
    }
}
