//! The relay's and proxy's per-session samplers: path tracing (`polycorn::paths` debug lines)
//! and the session metrics.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::WeakEngine;
use crate::metrics::Metrics;

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
pub(super) fn sample_metrics(
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
    engine: &crate::engine::Engine,
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

/// The proxy's sessions whose metrics are sampled: id -> (relay name, paths sampled).
pub(super) type StartedSessions = std::collections::HashMap<u64, Arc<str>>;

/// One round of the proxy's metrics bookkeeping over the `live` sessions: a new session gets
/// a sampler ([`sample_metrics`]) for its paths; a session that is over is forgotten (its
/// sampler stops by itself), and a relay left with no session shows its paths down.
pub(super) fn track_sessions(
    started: &mut StartedSessions,
    live: Vec<(u64, crate::proxy::LiveSession)>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Engine;
    use polycorn_proto::{Role, Session, SessionConfig};

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
                crate::proxy::LiveSession {
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
