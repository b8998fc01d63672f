//! `polycorn net soak`: relay and proxy under connection churn for a while, then checked for
//! what they leave behind — what an operator wants to know before a train runs them all day.
//!
//! Same topology as `polycorn net bench` (namespaces `{name}-c/-r/-p/-s`, two unshaped veth
//! paths, TLS subflows, transparent interception), with `--users` passenger addresses on the
//! client side; with `--trip`, the bench's testbed instead (`{name}-client/-relay/-proxy/-server`,
//! one emulated path per carrier of the trip, played from the moment the train first passes
//! 250 km/h, its context replayed to the relay, LinkDB trained on 8 other rides of the route),
//! so the churn meets the trip's capacity, delay and handovers. For `--secs`:
//! * `--workers` threads each open passenger connections one after another: every connection
//!   uploads a request of 100 B – 64 KiB and downloads 1 KiB – 1 MiB (mostly small), both as a
//!   seeded byte pattern that the other end checks byte by byte, then waits for the server's
//!   close;
//! * `--idle` long-lived connections stay open throughout and exchange an 8-byte ping every
//!   `--sample-secs`, as chat apps do;
//! * with `--blackout-every S`, one path at a time (in turn) drops every packet at the relay for
//!   `--blackout-secs`, as in a failed handover, so reinjection and subflows coming back are
//!   exercised under the same load;
//! * with `--restart-every S`, relay or proxy is restarted every S seconds, in turn: the proxy
//!   stopped in order (SIGTERM, as `systemctl stop` and upgrades do), the relay stopped, the
//!   proxy killed (SIGKILL, a crash), the relay killed — each started again at once.
//!   Connections a restart cuts are excused only if they failed as a cut connection should
//!   (reset, refused, not connected, or closed before their first byte); a wrong byte, a
//!   connection left hanging or one closed in order in the middle of its data is a failure
//!   whenever it happens, and so is any failure of a connection opened once the restarted
//!   daemon had every path up again (plus [`RESTART_GRACE`]). Each restart's cost to
//!   passengers is printed.
//!
//! Every `--sample-secs` it prints the relay's and proxy's resident memory, open file
//! descriptors and open passenger flows (`polycorn_flows_open`). After the load it closes
//! everything and waits for both daemons to settle. The run **fails** (exit status 1, saying
//! what) if any connection or ping failed or carried a wrong byte, if relay and proxy did not
//! each count exactly the connections the clients opened (`polycorn_flows_total`), if a flow is
//! still open at the end, if a daemon holds more file descriptors than before the load
//! (beyond [`FD_SLACK`]), or if either daemon logged a protocol violation (relay and proxy
//! talk only to each other here: reinjection may hide one from the passengers, but it tears a
//! subflow down). Each daemon's subflow reconnections are reported. Memory is reported, not
//! judged: the allocator keeps freed pages, so read its trend over the samples (and over a
//! longer `--secs`).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use polycorn_emu::netns::{exec_in, ip_in, InNamespace};
use polycorn_net::config::{ContextSource, ProxyConfig, RelayConfig};

use crate::harness::Daemon;
use crate::harness::Topology;

mod args;
mod daemons;
mod failures;
mod load;
mod reading;
mod traffic;
mod verdict;

use args::*;
pub use args::{SoakArgs, FD_SLACK, RESTART_GRACE};
use daemons::*;
use failures::*;
use load::*;
pub use reading::Reading;
use reading::*;
use traffic::*;
use verdict::*;

/// Where the soak's traffic goes: two unshaped veth paths, or an emulated trip.
enum Net {
    Veth(Topology),
    Trip(TripNet),
}

/// The testbed of an emulated trip and the trip playing on it; stopped and removed on drop
/// (fields drop in order: the player, then the testbed).
struct TripNet {
    spec: polycorn_emu::testbed::TestbedSpec,
    _player: crate::harness::TripPlayer,
    _testbed: crate::harness::Guard,
    /// What the soak runs over, for its first line.
    about: String,
}

impl Net {
    /// The namespace of `role` (`c`lient, `r`elay, `p`roxy, `s`erver).
    fn ns(&self, role: &str) -> String {
        match self {
            Net::Veth(t) => t.ns(role),
            Net::Trip(t) => t.spec.ns(match role {
                "c" => "client",
                "r" => "relay",
                "p" => "proxy",
                _ => "server",
            }),
        }
    }

    fn paths(&self) -> usize {
        match self {
            Net::Veth(_) => 2,
            Net::Trip(t) => t.spec.paths,
        }
    }

    fn about(&self) -> String {
        match self {
            Net::Veth(_) => "2 unshaped veth paths".into(),
            Net::Trip(t) => t.about.clone(),
        }
    }
}

/// Seconds of the trip the soak may use beyond `--secs`: daemons starting, flows settling.
const TRIP_SLACK_S: f64 = 30.0;

/// Build the testbed of `args.trip_args`'s trip, start its emulator and context replay, and
/// write relay and proxy configurations for it into `dir`.
fn trip_net(args: &SoakArgs, dir: &std::path::Path) -> Result<(Net, RelayConfig, ProxyConfig)> {
    use polycorn_emu::testbed::TestbedSpec;
    let t = &args.trip_args;
    let (cfg, _) = t.config()?;
    let full = polycorn_link::trip::Trip::generate(&cfg)?;
    let from_ms = crate::bench::at_speed_from_ms(&full)
        .with_context(|| format!("the `{}` trip never exceeds 250 km/h", t.preset))?;
    let need_s = args.secs + SETTLE.as_secs_f64() + TRIP_SLACK_S;
    let left_s = full.duration_ms.saturating_sub(from_ms) as f64 / 1000.0;
    if need_s > left_s {
        bail!(
            "--trip: the `{}` trip (route {}, trip {}) has {left_s:.0} s after the train first \
             passes 250 km/h, and --secs {} needs {need_s:.0} s with the daemons' start and the \
             flows' settling: give --secs at most {:.0}",
            t.preset,
            t.route_seed,
            t.trip_seed,
            args.secs,
            (left_s - SETTLE.as_secs_f64() - TRIP_SLACK_S).max(0.0)
        );
    }
    let trip = full.window(from_ms, (need_s * 1000.0) as u64);
    let (handovers, failed) = crate::bench::report::window_handovers(&trip, args.secs)
        .iter()
        .fold((0, 0), |(n, f), h| (n + 1, f + usize::from(h.2)));
    let paths = trip.paths.len();
    let spec = TestbedSpec {
        name: args.name.clone(),
        paths,
    };
    let linkdb = crate::harness::build_linkdb(dir, t, &cfg, 8)?;
    let sys = crate::bench::system(&format!("polycorn:{}", args.scheduler))?;
    let (mut relay, mut proxy) =
        crate::bench::configs::configs(&sys, paths, Some((&linkdb, true)))?;
    if let Some(rec) = &args.record {
        let rec =
            std::path::absolute(rec).with_context(|| format!("--record {}", rec.display()))?;
        if relay.context.source == ContextSource::None {
            bail!("the configuration has no [context] to record with");
        }
        relay.context.record = Some(rec.join("relay"));
        proxy.context.record = Some(rec.join("proxy"));
    }
    let testbed = crate::harness::Guard::replace(&spec)
        .with_context(|| format!("build testbed `{}`", spec.name))?;
    let net = TripNet {
        _player: crate::harness::TripPlayer::start(&spec, &trip, None)?,
        _testbed: testbed,
        spec,
        about: format!(
            "the emulated `{}` trip (route {}, trip {}) from {:.0} s, the train past 250 km/h: \
             {paths} carriers, {handovers} handovers ({failed} failed) in the load's {:.0} s",
            t.preset,
            t.route_seed,
            t.trip_seed,
            from_ms as f64 / 1000.0,
            args.secs
        ),
    };
    Ok((Net::Trip(net), relay, proxy))
}

/// What the soak changes in the configurations of its topology: `drain_s` of both ends
/// (`--drain-secs`, when not 0) and, with `--attack`, the relay's default per-passenger limits
/// and a DNS service whose resolver never answers.
fn soak_settings(
    relay: &mut RelayConfig,
    proxy: &mut ProxyConfig,
    drain_secs: u64,
    attack: bool,
) -> Result<()> {
    if drain_secs > 0 {
        relay.relay.drain_s = drain_secs;
        proxy.proxy.drain_s = drain_secs;
    }
    if attack {
        let limits = polycorn_net::config::Limits::default();
        relay.limits.passenger_max_flows = limits.passenger_max_flows;
        relay.limits.passenger_flow_rate = limits.passenger_flow_rate;
        relay.dns.listen = Some(crate::attack::RELAY_DNS.parse()?);
        relay.dns.upstream = Some(crate::attack::SILENT_DNS.parse()?);
    }
    Ok(())
}

/// Run the soak; `Err` names every check that failed.
pub fn run(args: &SoakArgs) -> Result<()> {
    if !(args.secs.is_finite() && args.secs > 0.0 && args.secs <= 86_400.0) {
        bail!(
            "--secs must be more than 0 and at most 86400, got {}",
            args.secs
        );
    }
    if !(args.sample_secs.is_finite() && args.sample_secs >= 0.5) {
        bail!(
            "--sample-secs must be at least 0.5, got {}",
            args.sample_secs
        );
    }
    if args.workers == 0 && args.idle == 0 {
        bail!("--workers and --idle are both 0: nothing would load the daemons");
    }
    let blackout = args.blackout_every != 0.0;
    if !(args.blackout_every.is_finite() && args.blackout_every >= 0.0) {
        bail!(
            "--blackout-every must be 0 (never) or a number of seconds, got {}",
            args.blackout_every
        );
    }
    if blackout && !(args.blackout_secs > 0.0 && args.blackout_secs < args.blackout_every) {
        bail!(
            "--blackout-secs must be more than 0 and less than --blackout-every ({} s), got {}",
            args.blackout_every,
            args.blackout_secs
        );
    }
    if !(args.restart_every == 0.0 || args.restart_every.is_finite() && args.restart_every >= 3.0) {
        bail!(
            "--restart-every must be 0 (never) or at least 3 seconds (a restart takes a few), got {}",
            args.restart_every
        );
    }
    if args.drain_secs > polycorn_net::config::MAX_DRAIN_S {
        bail!(
            "--drain-secs must be 0 to {}, got {}",
            polycorn_net::config::MAX_DRAIN_S,
            args.drain_secs
        );
    }
    if !(1..=200).contains(&args.users) {
        bail!("--users must be 1 to 200, got {}", args.users);
    }
    if args.workers + args.idle > 4000 {
        bail!("--workers + --idle must be at most 4000 (one thread or socket each)");
    }
    polycorn_sched::Pipeline::from_spec(&args.scheduler)
        .with_context(|| format!("--scheduler `{}`", args.scheduler))?;
    // A second signal removes a trip's testbed at once (veth namespaces go with the process's
    // Topology on the first).
    let testbeds = if args.trip {
        vec![args.name.clone()]
    } else {
        Vec::new()
    };
    let stop = crate::testbed_cmd::stop_on_signals("net soak", testbeds)?;
    let dir = std::env::temp_dir().join(format!("polycorn-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let result = soak(args, &dir, stop);
    // Keep the daemons' logs of a failed soak; a soak that failed before starting them has none.
    let logs = ["relay.log", "proxy.log"]
        .iter()
        .any(|f| dir.join(f).exists());
    if result.is_err() && logs {
        eprintln!("relay and proxy logs kept in {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

/// Passenger addresses that carry the churn under the relay's default per-passenger limits.
const ATTACK_MIN_USERS: usize = 128;

fn soak(args: &SoakArgs, dir: &std::path::Path, stop: Arc<AtomicBool>) -> Result<()> {
    let mut args = args.clone();
    if args.attack && args.users < ATTACK_MIN_USERS {
        println!(
            "--attack: {ATTACK_MIN_USERS} passenger addresses instead of {}, so that each stays \
             under the relay's default limit of new connections",
            args.users
        );
        args.users = ATTACK_MIN_USERS;
    }
    let args = &args;
    let blackout = args.blackout_every != 0.0;
    let restarting = args.restart_every != 0.0;
    polycorn_net::tls::generate(dir, &[], true)?;
    let (topo, mut relay, mut proxy) = if args.trip {
        trip_net(args, dir)?
    } else {
        let (relay, proxy) = crate::netbench::configs(
            "polycorn",
            &args.scheduler,
            Some(crate::harness::METRICS_ADDR),
        )?;
        (Net::Veth(Topology::up(&args.name)?), relay, proxy)
    };
    soak_settings(&mut relay, &mut proxy, args.drain_secs, args.attack)?;
    let relay_file = if args.trip {
        "relay.toml"
    } else {
        "relay-polycorn.toml"
    };
    let (relay_cfg, proxy_cfg) =
        crate::bench::configs::write_pair(dir, relay_file, &relay, &proxy)?;
    let (c, r, p) = (topo.ns("c"), topo.ns("r"), topo.ns("p"));
    let targets = crate::attack::Targets {
        client: c.clone(),
        relay: r.clone(),
        proxy: p.clone(),
        server: topo.ns("s"),
        paths: topo.paths(),
        credentials: dir.to_path_buf(),
    };
    let host_reached = if args.attack {
        Some(crate::attack::Attacks::prepare(&targets)?)
    } else {
        None
    };
    for u in 0..args.users {
        ip_in(
            &c,
            &[
                "addr",
                "add",
                &format!("{}/24", user_addr(u)),
                "dev",
                "lan0",
            ],
        )?;
    }
    start_server(&topo.ns("s"))?;
    // A carrier of a trip may start in a failed handover's blackout (up to 10 s).
    let ready_s = if args.trip { 40 } else { 20 };
    let until = Instant::now() + Duration::from_secs(ready_s);
    let held_proxy = if args.hold_listeners {
        Some(hold_listener(&p, PROXY_LISTEN, false)?)
    } else {
        None
    };
    let proxy = start_daemon(
        &p,
        "proxy",
        &proxy_cfg,
        run_log(dir, "proxy", 1),
        held_proxy.as_ref(),
        until,
    )?;
    let held = if args.hold_listeners {
        Some(hold_listener(&r, RELAY_TPROXY, true)?)
    } else {
        None
    };
    let until = Instant::now() + Duration::from_secs(ready_s);
    let mut relay = start_daemon(
        &r,
        "relay",
        &relay_cfg,
        run_log(dir, "relay", 1),
        held.as_ref(),
        until,
    )?;
    relay.wait_for("subflow up", topo.paths(), until)?;
    let mut pair = Pair {
        relay,
        proxy,
        relay_ns: r.clone(),
        proxy_ns: p.clone(),
        relay_cfg,
        proxy_cfg,
        dir: dir.to_path_buf(),
        paths: topo.paths(),
        ready_s,
        runs: [1, 1],
        counted: [(0.0, 0.0); 2],
        held,
        held_proxy,
        drain_s: args.drain_secs,
    };
    std::thread::sleep(Duration::from_secs(1));
    let (relay0, proxy0) = (pair.read("relay")?, pair.read("proxy")?);
    // Where each daemon's current run started counting flows.
    let (mut relay_base, mut proxy_base) = (relay0, proxy0);
    println!(
        "soak: {} workers, {} idle connections, {} passengers, scheduler `{}`, {:.0} s over {} ({} cores)",
        args.workers,
        args.idle,
        args.users,
        args.scheduler,
        args.secs,
        topo.about(),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    if blackout {
        println!(
            "blackouts: every {} s one path (in turn) drops everything for {} s",
            args.blackout_every, args.blackout_secs
        );
    }
    if restarting {
        println!(
            "restarts: every {} s, in turn: proxy stopped (SIGTERM), relay stopped, proxy killed (SIGKILL), relay killed",
            args.restart_every
        );
    }
    if args.drain_secs > 0 {
        println!(
            "drain: relay and proxy let the connections open at a stop finish for up to {} s",
            args.drain_secs
        );
    }
    if args.hold_listeners {
        println!(
            "the relay's listener ({RELAY_TPROXY}) and the proxy's ({PROXY_LISTEN}) are held by \
             the soak and passed to every relay and proxy (socket activation): connections \
             opened after a relay's signal must complete"
        );
    }
    println!(
        "{:>6} {:>8} {:>6} {:>8} {:>5} {:>6} {:>8} {:>5} {:>6}",
        "t s", "conns", "failed", "relayMiB", "fds", "flows", "proxyMiB", "fds", "flows"
    );
    let t0 = Instant::now();
    let counts = Arc::new(Counts::new(t0));
    row(0.0, &counts, &relay0, &proxy0);
    let until = t0 + Duration::from_secs_f64(args.secs);
    let every = Duration::from_secs_f64(args.sample_secs);
    let load_stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    let blackout_thread = blackout.then(|| {
        let (ns, st) = (r.clone(), load_stop.clone());
        let (every, secs) = (
            Duration::from_secs_f64(args.blackout_every),
            Duration::from_secs_f64(args.blackout_secs),
        );
        std::thread::spawn(move || blackouts(ns, every, secs, st))
    });
    if args.idle > 0 {
        let (ns, st, co) = (c.clone(), load_stop.clone(), counts.clone());
        let (n, users) = (args.idle, args.users);
        threads.push(std::thread::spawn(move || {
            idle_conns(ns, n, users, every, st, co)
        }));
    }
    for w in 0..args.workers {
        let (ns, st, co) = (c.clone(), stop.clone(), counts.clone());
        let (workers, users) = (args.workers, args.users);
        threads.push(std::thread::spawn(move || {
            worker(ns, (w as u64, workers), users, until, st, co)
        }));
    }
    let (mut relay_peak, mut proxy_peak) = (relay0, proxy0);
    let mut next = t0 + every;
    let restart_every = Duration::from_secs_f64(args.restart_every);
    let mut next_restart = restarting.then(|| t0 + restart_every);
    let mut problems = Vec::new();
    let mut restart_lines = Vec::new();
    let mut restart_error = None;
    let attack_at = args.secs / 3.0;
    let mut attacks = None;
    // (seconds into the load, relay MiB, proxy MiB) at every sample.
    let mut memory: Vec<(f64, f64, f64)> = Vec::new();
    while Instant::now() < until && !stop.load(Ordering::Relaxed) {
        if let (Some(reached), None) = (&host_reached, &attacks) {
            if t0.elapsed().as_secs_f64() >= attack_at {
                println!("{:>6.1} attacks start", t0.elapsed().as_secs_f64());
                attacks = Some(crate::attack::Attacks::start(&targets, reached.clone()));
            }
        }
        std::thread::sleep(
            Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())),
        );
        // No restart in the load's last seconds: the load must show that passengers got through
        // again after each one.
        let late = Instant::now() + RESTART_TAIL >= until;
        if next_restart.is_some_and(|at| Instant::now() >= at) && !late {
            let n = restart_lines.len();
            let (who, killed) = RESTARTS[n % RESTARTS.len()];
            let base = if who == "relay" {
                &mut relay_base
            } else {
                &mut proxy_base
            };
            match pair.restart(who, killed, base, &counts) {
                Ok((problem, line)) => {
                    println!("{line}");
                    problems.extend(problem);
                    restart_lines.push(line);
                }
                Err(e) => {
                    // Stop the load: nothing runs any more to judge it by.
                    restart_error = Some(e);
                    break;
                }
            }
            next_restart = Some(Instant::now().max(t0 + restart_every * (n as u32 + 2)));
        }
        if Instant::now() >= next {
            next += every;
            let (rr, pp) = (pair.read("relay")?, pair.read("proxy")?);
            relay_peak.rss_mib = relay_peak.rss_mib.max(rr.rss_mib);
            proxy_peak.rss_mib = proxy_peak.rss_mib.max(pp.rss_mib);
            relay_peak.fds = relay_peak.fds.max(rr.fds);
            proxy_peak.fds = proxy_peak.fds.max(pp.fds);
            memory.push((t0.elapsed().as_secs_f64(), rr.rss_mib, pp.rss_mib));
            row(t0.elapsed().as_secs_f64(), &counts, &rr, &pp);
        }
    }
    let load_secs = t0.elapsed().as_secs_f64();
    load_stop.store(true, Ordering::Relaxed);
    let attacked = attacks.map(crate::attack::Attacks::stop);
    if restart_error.is_some() {
        stop.store(true, Ordering::Relaxed);
    }
    for t in threads {
        t.join()
            .map_err(|_| anyhow::anyhow!("a client thread panicked"))??;
    }
    let blackouts_done = match blackout_thread {
        Some(t) => t
            .join()
            .map_err(|_| anyhow::anyhow!("the blackout thread panicked"))??,
        None => 0,
    };
    if let Some(e) = restart_error {
        return Err(e);
    }
    // Every client socket is closed now; give relay and proxy time to close their flows — a
    // killed relay's flows the proxy keeps for its hold time.
    let settle_from = Instant::now();
    let restarts = counts.restarts.lock().expect("not poisoned").clone();
    let settle_until = restarts
        .iter()
        .filter(|r| r.killed && r.who == "relay")
        .filter_map(|r| r.back)
        .map(|back| t0 + Duration::from_secs_f64(back + PROXY_HOLD_S + 5.0))
        .fold(settle_from + SETTLE, Instant::max);
    let (relay1, proxy1) = loop {
        let (rr, pp) = (pair.read("relay")?, pair.read("proxy")?);
        let settled = rr.flows_open == 0.0
            && pp.flows_open == 0.0
            && rr.fds <= relay0.fds + FD_SLACK
            && pp.fds <= proxy0.fds + FD_SLACK;
        if settled || Instant::now() >= settle_until {
            break (rr, pp);
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let settle_secs = settle_from.elapsed().as_secs_f64();
    row(t0.elapsed().as_secs_f64(), &counts, &relay1, &proxy1);
    let logs = [pair.logs("relay"), pair.logs("proxy")];
    let (runs, counted) = (pair.runs, pair.counted);
    drop(pair);
    drop(topo);

    let started = counts.started.load(Ordering::Relaxed);
    let done = counts.done.load(Ordering::Relaxed);
    let failures = counts.failures.lock().expect("not poisoned").clone();
    let (left, cut) = sort_failures(&failures, &restarts);
    let bytes = counts.bytes.load(Ordering::Relaxed);
    let mut small = counts.small_us.lock().expect("not poisoned").clone();
    small.sort_unstable();
    println!(
        "load {load_secs:.1} s: {done} connections completed ({:.0}/s), {:.1} MB checked byte by byte, {} failed; {} pings on {} idle connections ({} answered every one), {} failed",
        done as f64 / load_secs,
        bytes as f64 / 1e6,
        counts.failed.load(Ordering::Relaxed),
        counts.pings.load(Ordering::Relaxed),
        args.idle,
        counts.idle_ok.load(Ordering::Relaxed),
        counts.ping_failures.load(Ordering::Relaxed),
    );
    println!(
        "connections downloading <= 16 KiB: completion p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} connections)",
        percentile(&small, 0.5),
        percentile(&small, 0.99),
        percentile(&small, 1.0),
        small.len()
    );
    for (i, (who, before, peak, after, base)) in [
        ("relay", relay0, relay_peak, relay1, relay_base),
        ("proxy", proxy0, proxy_peak, proxy1, proxy_base),
    ]
    .into_iter()
    .enumerate()
    {
        let runs_note = if runs[i] > 1 {
            format!(
                " (over its {} runs; a killed run's last flows uncounted)",
                runs[i]
            )
        } else {
            String::new()
        };
        println!(
            "{who}: memory {:.1} MiB before, {:.1} peak, {:.1} after ({:+.1}); file descriptors {} before, {} peak, {} after; threads {} before, {} after; flows opened {:.0}{runs_note}, open at the end {:.0}; subflow reconnections {:.0}",
            before.rss_mib,
            peak.rss_mib,
            after.rss_mib,
            after.rss_mib - before.rss_mib,
            before.fds,
            peak.fds,
            after.fds,
            before.threads,
            after.threads,
            counted[i].0 + after.flows_total - base.flows_total,
            after.flows_open,
            counted[i].1 + after.reconnects - base.reconnects,
        );
        if let Some(line) = loss_delay_summary(&after.loss_delay.0, after.loss_delay.1) {
            println!("{who}: {line}");
        }
    }
    println!("settled {settle_secs:.1} s after the load ended");
    if blackout {
        println!("{blackouts_done} blackouts of {} s", args.blackout_secs);
    }
    for (r, cut) in restarts.iter().zip(&cut) {
        let first = r.first_ok.map_or("none".to_string(), |t| {
            format!("{:.2} s after the signal", t - r.at)
        });
        let mut kinds: BTreeMap<&str, u64> = BTreeMap::new();
        for f in cut {
            *kinds.entry(f.kind).or_default() += 1;
        }
        let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
        println!(
            "restart at {:.1} s ({} {}): {} connections cut ({}); first connection opened after the signal completed {first}",
            r.at,
            r.who,
            if r.killed { "killed" } else { "stopped" },
            cut.len(),
            kinds.join(", "),
        );
    }
    if restarting {
        println!(
            "{} restarts; idle connections opened again {} times",
            restarts.len(),
            counts.idle_reopened.load(Ordering::Relaxed)
        );
    }

    let left_pings = left.iter().filter(|f| f.kind.contains("ping")).count() as u64;
    let readings = [
        (
            "relay",
            relay0,
            relay1,
            counted[0].0 + relay1.flows_total - relay_base.flows_total,
        ),
        (
            "proxy",
            proxy0,
            proxy1,
            counted[1].0 + proxy1.flows_total - proxy_base.flows_total,
        ),
    ];
    // The attacks' own connections count at the relay too (those it admitted): the count
    // must then lie between the passengers' and the passengers' plus every attack attempt.
    let attack_flows = attacked.as_ref().map_or(0, |a| a.flows_bound());
    problems.extend(judge(
        started + attack_flows,
        left.len() as u64 - left_pings,
        left_pings,
        &error_kinds(&left),
        &readings,
        restarting || attacked.is_some(),
    ));
    if let Some(a) = &attacked {
        let limit = polycorn_net::guard::PassengerLimits::default().max_flows;
        for line in a.report(limit) {
            println!("{line}");
        }
        problems.extend(a.problems(limit));
        let setup = counts.setup_us.lock().expect("not poisoned").clone();
        let (line, problem) = setup_under_attack(&setup, attack_at, load_secs);
        println!("{line}");
        problems.extend(problem);
        let (line, problem) = memory_under_attack(&memory, attack_at);
        println!("{line}");
        problems.extend(problem);
    }
    for r in restarts.iter().filter(|r| r.first_ok.is_none()) {
        problems.push(format!(
            "no connection opened after the {} restart at {:.1} s completed before the load ended",
            r.who, r.at
        ));
    }
    for (who, logs) in ["relay", "proxy"].into_iter().zip(&logs) {
        for log in logs {
            let found = protocol_violations(who, log)?;
            // Under attack the rogue relay's violations are the proxy's to refuse.
            match found {
                Some(line) if attacked.is_some() && who == "proxy" => {
                    println!("under attack (the rogue relay's, expected): {line}")
                }
                other => problems.extend(other),
            }
        }
    }
    if stop.load(Ordering::Relaxed) {
        problems.push("stopped by a signal before --secs were up".into());
    }
    if problems.is_empty() {
        if restarting {
            println!("ok: every connection and ping completed with the right bytes or was cut by a restart as it should be; relay and proxy closed every flow and hold no more descriptors than before");
        } else {
            println!("ok: every connection and ping completed with the right bytes; relay and proxy counted them all, closed every flow and hold no more descriptors than before");
        }
        Ok(())
    } else {
        bail!("soak failed:\n  {}", problems.join("\n  "))
    }
}

#[cfg(test)]
mod tests;
