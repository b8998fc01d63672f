//! `polycorn sim bench`: the bench's rides in the deterministic simulator (`polycorn-sim`)
//! instead of the emulated testbed — the same trip windows, plan, systems, relay and proxy
//! configurations (`configs`, turned into session configurations by `polycorn-net`'s
//! `Tuning`), and the same outputs (`results.json`, CSVs, `report.html`, `pooled.*`), so
//! `bench pool` and the report read simulated rides unchanged. Kernel MPTCP is not simulated.
//!
//! polycorn systems get what they get on the testbed: the trip's context once a second at the
//! relay, and LinkDB's predictor at both ends, trained in process on the same simulated rides
//! of the route as the bench's `linkdb.sqlite` (or another predictor, `--predictor`).
//!
//! With `--trace FILE …` the rides are windows of recorded paths ([`super::traces`]), cut as
//! `polycorn bench --trace` cuts them ([`super::ride_setup`]): no train, so no context and no
//! predictor.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use polycorn_link::link::QueueLimit;
use polycorn_link::trip::Trip;
use polycorn_linkdb::ModelKind;
use polycorn_net::predictor::LinkDbPredictor;
use polycorn_net::tuning::Tuning;
use polycorn_proto::{Role, TrainPredictor};
use polycorn_sim::tcp::{CongestionControl, Duration as SimDuration, TcpConfig};
use polycorn_sim::{
    GroundTruth, ImSegment, Prediction, PredictorFactory, RideConfig, RideResult, Transfer,
    TransferResult, Upkeep,
};

use polycorn_sim::budget::Budget;

use super::analysis::{oracle_split, FlowResult, ImResult, SystemRun, BIN_MS, TAIL_SHARE};
use super::plan::{Plan, PlanParams};
use super::traces::Traces;
use super::{configs, report, Meta, RideArgs, System, FULL_SYSTEMS, QUICK_SYSTEMS};
use crate::harness::LINKDB_SEED_OFFSET;

/// The handover predictor of polycorn systems in the simulator.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SimPredictor {
    /// LinkDB's paper model (the bench's).
    Paper,
    /// LinkDB's risk model.
    Risk,
    /// LinkDB's location table.
    LocationTable,
    /// The trip's ground truth: every failed handover known in advance.
    Perfect,
    /// None: HPR never throttles.
    #[default]
    None,
}

impl SimPredictor {
    /// Its name in `--predictor` and in `meta.prediction`.
    pub fn name(self) -> &'static str {
        match self {
            SimPredictor::Paper => "paper",
            SimPredictor::Risk => "risk",
            SimPredictor::LocationTable => "location-table",
            SimPredictor::Perfect => "perfect",
            SimPredictor::None => "none",
        }
    }

    fn linkdb(self) -> Option<ModelKind> {
        match self {
            SimPredictor::Paper => Some(ModelKind::Paper),
            SimPredictor::Risk => Some(ModelKind::Risk),
            SimPredictor::LocationTable => Some(ModelKind::LocationTable),
            SimPredictor::Perfect | SimPredictor::None => None,
        }
    }
}

/// Options of `polycorn sim bench`.
#[derive(Args, Debug, Clone)]
pub struct SimArgs {
    /// The rides, systems and workload, as `polycorn bench` takes them.
    #[command(flatten)]
    pub ride: RideArgs,
    /// Rides simulated at once (default: every core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// The handover predictor of polycorn systems' relay and proxy: LinkDB's (trained on 8
    /// quick or 20 full simulated rides of the route, trip seeds from TRIP_SEED + 1000, as
    /// `polycorn bench` trains it), the trip's ground truth, or none. Recorded traces
    /// (`--trace`) have no train: none.
    #[arg(long, value_enum, default_value_t = SimPredictor::Paper)]
    pub predictor: SimPredictor,
}

/// LinkDB's predictor of `kind`, trained as `polycorn bench` trains it (simulated rides of the
/// same route, trip seeds from `trip_seed + 1000`, 8 quick or 20 full), in process.
pub fn linkdb_predictor(args: &RideArgs, kind: ModelKind) -> Result<PredictorFactory> {
    let (cfg, _) = args.trip.config()?;
    let first = args.trip.trip_seed + LINKDB_SEED_OFFSET;
    let rides = if args.quick { 8 } else { 20 };
    let trips = (first..first + rides)
        .map(|s| {
            Ok(polycorn_linkdb::import::sim::simulate_one(
                &args.trip.preset_config(s)?,
            )?)
        })
        .collect::<Result<Vec<_>>>()
        .context("simulate LinkDB's training rides")?;
    let train: Vec<_> = trips.iter().collect();
    let track = polycorn_linkdb::Track {
        origin: cfg.origin,
        heading_deg: cfg.heading_deg,
    };
    let carriers: Vec<String> = cfg.carriers.iter().map(|c| c.name.clone()).collect();
    let p = LinkDbPredictor::new(kind.build(&train), track, &carriers);
    Ok(std::sync::Arc::new(move || {
        Box::new(p.clone()) as Box<dyn TrainPredictor>
    }))
}

/// The predictors of polycorn systems on `trip` with `predictor` (`linkdb`: LinkDB's, built
/// once for every ride).
pub fn prediction(
    predictor: SimPredictor,
    linkdb: Option<&PredictorFactory>,
    trip: &Trip,
) -> Prediction {
    let name = predictor.name();
    match (predictor, linkdb) {
        (SimPredictor::Perfect, _) => {
            let truth = GroundTruth::new(&trip.handovers, trip.paths.len());
            Prediction::both(
                name,
                std::sync::Arc::new(move || Box::new(truth.clone()) as Box<dyn TrainPredictor>),
            )
        }
        (SimPredictor::None, _) | (_, None) => Prediction {
            name: "none".into(),
            ..Prediction::default()
        },
        (_, Some(f)) => Prediction::both(name, f.clone()),
    }
}

/// The predictor the rides' polycorn systems get, with LinkDB's built once for every ride.
#[derive(Clone, Default)]
pub struct SimPrediction {
    /// Which predictor.
    pub predictor: SimPredictor,
    /// LinkDB's, when `predictor` is one of its models and a polycorn system runs.
    pub linkdb: Option<PredictorFactory>,
}

impl std::fmt::Debug for SimPrediction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimPrediction")
            .field("predictor", &self.predictor)
            .field("linkdb", &self.linkdb.is_some())
            .finish()
    }
}

impl SimPrediction {
    /// `predictor` for `systems` on the rides of `args` (LinkDB trained when a polycorn
    /// system needs it).
    pub fn new(predictor: SimPredictor, args: &RideArgs, systems: &[System]) -> Result<Self> {
        let linkdb = match predictor.linkdb() {
            Some(kind) if systems.iter().any(|s| s.mode == "polycorn") => {
                Some(linkdb_predictor(args, kind)?)
            }
            _ => None,
        };
        Ok(SimPrediction { predictor, linkdb })
    }

    /// No predictor: HPR never throttles.
    pub fn none() -> Self {
        SimPrediction::default()
    }
}

/// The systems of `args` (default: the bench's, without kernel MPTCP), refusing kernel MPTCP.
pub fn sim_systems(args: &RideArgs) -> Result<Vec<System>> {
    let without_mptcp = |d: &[&'static str]| -> Vec<&'static str> {
        d.iter().copied().filter(|s| *s != "mptcp").collect()
    };
    let (quick, full) = (without_mptcp(QUICK_SYSTEMS), without_mptcp(FULL_SYSTEMS));
    let systems = args.systems_or((&quick, &full))?;
    if let Some(s) = systems.iter().find(|s| s.mode == "mptcp") {
        bail!(
            "`{}`: kernel MPTCP is not simulated; run it with `polycorn bench`",
            s.name
        );
    }
    Ok(systems)
}

fn us(s: f64) -> u64 {
    (s * 1e6).round() as u64
}

/// The plan as the simulator's workload.
pub fn workload(plan: &Plan) -> polycorn_sim::Workload {
    let transfers = |v: &[super::plan::BulkFlow]| {
        v.iter()
            .map(|f| Transfer {
                idx: f.idx,
                start_us: us(f.start_s),
                size: f.size,
            })
            .collect()
    };
    polycorn_sim::Workload {
        downloads: transfers(&plan.bulk),
        download_timeout_us: us(plan.bulk_timeout_s),
        uploads: transfers(&plan.uploads),
        upload_timeout_us: us(plan.upload_timeout_s),
        im: plan
            .im
            .iter()
            .map(|s| ImSegment {
                users: s.users,
                start_us: us(s.start_s),
                sends_us: s
                    .sends_s
                    .iter()
                    .map(|u| u.iter().map(|t| us(*t)).collect())
                    .collect(),
                deadline_us: us(s.deadline_s),
            })
            .collect(),
    }
}

/// One system's ride: its relay's and proxy's session configurations as the daemons make them
/// from the bench's configuration files, over `trip`'s links; polycorn systems with the trip's
/// context and `prediction`.
pub fn ride_config(
    sys: &System,
    trip: &Trip,
    plan: &Plan,
    window_s: f64,
    queue_bytes: Option<u64>,
    prediction: &Prediction,
) -> Result<RideConfig> {
    let (relay, proxy) = configs::configs(sys, trip.paths.len(), None)?;
    let spec = if sys.mode == "single" {
        "single"
    } else {
        relay.relay.scheduler.as_str()
    };
    let links = polycorn_link::trip_links::from_trip(trip, queue_bytes.map(QueueLimit::Bytes))?;
    let (rt, pt) = (Tuning::of_relay(&relay), Tuning::of_proxy(&proxy));
    Ok(RideConfig {
        relay: rt.session_config(Role::Relay, 1, spec),
        proxy: pt.session_config(Role::Proxy, 1, spec),
        relay_tcp: tcp_config(&rt, relay.relay.slow_start_after_idle)?,
        proxy_tcp: tcp_config(&pt, proxy.proxy.slow_start_after_idle)?,
        links,
        workload: workload(plan),
        end_us: us(window_s),
        // The bench gives polycorn systems the testbed's gpsd and LinkDB (`configs`).
        context: if sys.mode == "polycorn" {
            trip.context.clone()
        } else {
            Vec::new()
        },
        prediction: if sys.mode == "polycorn" {
            prediction.clone()
        } else {
            Prediction::default()
        },
        upkeep: Upkeep {
            on: true,
            idle_refresh: relay.relay.idle_refresh.into(),
            ask_refresh: proxy.proxy.ask_refresh,
        },
    })
}

/// A side's subflow sockets as its tunables and `slow_start_after_idle` set them (Linux's
/// defaults otherwise).
pub fn tcp_config(t: &Tuning, slow_start_after_idle: Option<bool>) -> Result<TcpConfig> {
    let cc = match t.congestion.as_deref() {
        None => CongestionControl::Cubic,
        Some(name) => CongestionControl::from_name(name).with_context(|| {
            format!(
                "congestion control `{name}` is not simulated ({})",
                CongestionControl::NAMES
            )
        })?,
    };
    let mut c = TcpConfig {
        cc,
        ..TcpConfig::default()
    };
    if let Some(ms) = t.rto_max_ms {
        c.rto_max = SimDuration::from_millis(u64::from(ms));
        c.rto_initial = c.rto_initial.min(c.rto_max);
    }
    if let Some(on) = slow_start_after_idle {
        c.slow_start_after_idle = on;
    }
    c.check()?;
    Ok(c)
}

fn flow_result(t: &TransferResult, timeout_s: f64) -> FlowResult {
    let ok = t.ok();
    let s = |u: u64| u as f64 / 1e6;
    let mut got = 0;
    let mut tail = None;
    let mut bins: Vec<u64> = Vec::new();
    for &(at, n) in &t.marks {
        got += n;
        if tail.is_none() && got as f64 >= t.size as f64 * (1.0 - TAIL_SHARE) {
            tail = Some(at);
        }
        let j = (at / 1000 / BIN_MS) as usize;
        if bins.len() <= j {
            bins.resize(j + 1, 0);
        }
        bins[j] += n;
    }
    FlowResult {
        idx: t.idx,
        size: t.size,
        start_s: s(t.start_us),
        ok,
        error: t.error.clone(),
        first_byte_s: t.marks.first().map_or(f64::NAN, |(at, _)| s(*at)),
        fct_s: match t.done_us {
            Some(d) if ok => s(d),
            _ => timeout_s,
        },
        tail_s: match (tail, t.done_us) {
            (Some(a), Some(b)) if ok => s(b - a),
            _ => f64::NAN,
        },
        bins,
        budget: None,
    }
}

/// A simulated ride over `trip` as the bench's per-system results, each completed download
/// with its [`Budget`] against the oracle.
pub fn system_run(sys: &System, plan: &Plan, trip: &Trip, r: &RideResult) -> SystemRun {
    let mut counters = std::collections::BTreeMap::new();
    for (k, role) in ["relay", "proxy"].iter().enumerate() {
        for (stage, n) in &r.stage_moves[k] {
            counters.insert(
                format!("{role}:polycorn_stage_decisions_total{{stage=\"{stage}\"}}"),
                *n as f64,
            );
        }
        for (p, (c, tcp)) in r.paths[k].iter().enumerate() {
            let mut put = |name: &str, v: u64| {
                counters.insert(format!("{role}:{name}{{path=\"p{p}\"}}"), v as f64);
            };
            put("polycorn_path_sent_bytes_total", c.tx_bytes);
            put("polycorn_path_received_bytes_total", c.rx_bytes);
            put("polycorn_path_reinjected_bytes_total", c.reinjected_bytes);
            put("polycorn_path_redundant_bytes_total", c.redundant_bytes);
            put(
                "polycorn_path_retransmissions_total",
                tcp.segments_retransmitted,
            );
            let replaced = r.replacements.iter().filter(|x| x.path == p).count();
            put("polycorn_path_reconnects_total", replaced as u64);
        }
    }
    SystemRun {
        system: sys.name.clone(),
        mode: sys.mode.clone(),
        spec: sys.spec.clone(),
        pipeline: sys.pipeline(),
        congestion: Some(sys.congestion.to_string()),
        ready_s: 0.0,
        late_paths: vec![],
        error: None,
        flows: r
            .downloads
            .iter()
            .zip(&r.last_bytes)
            .map(|(t, lb)| {
                let mut f = flow_result(t, plan.bulk_timeout_s);
                f.budget = lb.as_ref().filter(|_| f.ok).and_then(|lb| {
                    let o = oracle_split(trip, f.start_s, f.size)?;
                    Some(Budget::of(lb, &o))
                });
                f
            })
            .collect(),
        im: r
            .im
            .iter()
            .map(|m| ImResult {
                users: m.users,
                user: m.user,
                msg: m.msg,
                send_s: m.send_us as f64 / 1e6,
                delivery_s: m.delivery_us.map(|d| d as f64 / 1e6),
            })
            .collect(),
        uploads: r
            .uploads
            .iter()
            .map(|t| flow_result(t, plan.upload_timeout_s))
            .collect(),
        path_down_bytes: r.wires.iter().map(|(_, d)| d.bytes_out).collect(),
        path_up_bytes: r.wires.iter().map(|(u, _)| u.bytes_out).collect(),
        counters,
    }
}

/// The trip window, plan and metadata of ride `trip_seed`, on the preset's trip or on
/// `traces` (as `polycorn bench` cuts it: [`super::ride_setup`]).
pub fn ride_trip(
    args: &RideArgs,
    traces: Option<&Traces>,
    predictor: SimPredictor,
    trip_seed: u64,
    params: &PlanParams,
) -> Result<(Trip, Plan, Meta)> {
    let prediction = match predictor {
        SimPredictor::None => "none: HPR never throttles".to_string(),
        SimPredictor::Perfect => {
            "perfect (the trip's ground truth) at the proxy (downlink) and the relay (uplink)"
                .to_string()
        }
        p => format!(
            "LinkDB ({}, {} simulated rides of the route, built in process) at the proxy \
             (downlink) and the relay (uplink)",
            p.name(),
            if args.quick { 8 } else { 20 }
        ),
    };
    super::ride_setup(
        args,
        traces,
        trip_seed,
        params,
        "simulated (polycorn-sim)".into(),
        prediction,
    )
}

/// Simulate every system on ride `trip_seed` (of `traces` when given); returns its results.
/// On recorded traces polycorn systems run without a predictor, whatever `prediction` says.
pub fn simulate_ride(
    args: &RideArgs,
    traces: Option<&Traces>,
    systems: &[System],
    trip_seed: u64,
    params: &PlanParams,
    prediction: &SimPrediction,
) -> Result<report::Results> {
    let predictor = match traces {
        Some(_) => SimPredictor::None,
        None => prediction.predictor,
    };
    let (trip, plan, meta) = ride_trip(args, traces, predictor, trip_seed, params)?;
    let pred = self::prediction(predictor, prediction.linkdb.as_ref(), &trip);
    let mut runs = Vec::new();
    for sys in systems {
        let cfg = ride_config(sys, &trip, &plan, meta.window_s, args.queue_bytes, &pred)?;
        let r = polycorn_sim::run(&cfg).with_context(|| format!("simulate {}", sys.name))?;
        runs.push(system_run(sys, &plan, &trip, &r));
    }
    Ok(report::Results::new(meta, plan, &trip, runs))
}

fn write_ride(out: &Path, r: &report::Results) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
    r.write_all(out)?;
    report::write_html(out, r)?;
    report::verify(out, r).context("the outputs are incomplete or inconsistent")
}

/// A progress bar of `total` rides on stderr (rides done, elapsed, estimated time left),
/// hidden when stderr is not a terminal.
pub fn ride_bar(total: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "[{bar:30}] {pos}/{len} rides, {elapsed_precise} elapsed, about {eta_precise} left",
    ) {
        bar.set_style(style.progress_chars("#>-"));
    }
    bar
}

/// Simulate every system on the rides of trip seeds `seeds` (of `traces` when given),
/// `threads` rides at once (a ride is single-threaded), with a progress bar; each ride written
/// to `out(seed)` when given. The rides' results in the order of `seeds`.
#[allow(clippy::too_many_arguments)]
pub fn simulate_rides(
    args: &RideArgs,
    traces: Option<&Traces>,
    systems: &[System],
    seeds: &[u64],
    params: &PlanParams,
    threads: usize,
    prediction: &SimPrediction,
    out: Option<&(dyn Fn(u64) -> PathBuf + Sync)>,
) -> Result<Vec<report::Results>> {
    let threads = threads.clamp(1, seeds.len().max(1));
    let bar = ride_bar(seeds.len() as u64);
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, Result<report::Results>)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(&seed) = seeds.get(k) else {
                    return;
                };
                let t = std::time::Instant::now();
                let r = simulate_ride(args, traces, systems, seed, params, prediction);
                let took = t.elapsed().as_secs_f64();
                let r = r.and_then(|r| {
                    if let Some(out) = out {
                        write_ride(&out(seed), &r)?;
                    }
                    Ok(r)
                });
                let what = match &r {
                    Ok(r) => format!(
                        "{} systems x {:.0} s of trip simulated in {took:.1} s on one thread",
                        r.runs.len(),
                        r.meta.window_s
                    ),
                    Err(_) => "FAILED".into(),
                };
                bar.inc(1);
                let line = format!(
                    "[{}/{}] ride {seed}: {what} ({:.1} s elapsed)",
                    bar.position(),
                    seeds.len(),
                    bar.elapsed().as_secs_f64()
                );
                if bar.is_hidden() {
                    eprintln!("{line}");
                } else {
                    bar.println(line);
                }
                results
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((k, r));
            });
        }
    });
    bar.finish_and_clear();
    let mut all = results.into_inner().unwrap_or_else(|p| p.into_inner());
    all.sort_by_key(|(k, _)| *k);
    all.into_iter()
        .map(|(k, r)| r.with_context(|| format!("ride {}", seeds[k])))
        .collect()
}

/// Rides simulated at once: `threads`, else every core.
pub fn threads_or_cores(threads: Option<usize>) -> usize {
    threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1)
}

/// `polycorn sim bench`.
pub fn run(args: &SimArgs) -> Result<()> {
    let ride = &args.ride;
    let systems = sim_systems(ride)?;
    let params = ride.plan_params()?;
    let rides = ride.rides_or(1)?;
    let traces = ride.load_traces()?;
    let top = ride
        .out
        .clone()
        .unwrap_or_else(|| super::ride_dir("sim", ride));
    let threads = threads_or_cores(args.threads).min(rides as usize);
    let first = ride.trip.trip_seed;
    match &traces {
        Some(t) => {
            eprintln!(
                "sim bench: recorded traces ({}: {}), {rides} consecutive windows from {:.1} s (trip seeds {first}..{}), {} systems, {threads} threads, output {}",
                t.id,
                t.names().join(", "),
                ride.from_s.unwrap_or(0.0),
                first + rides - 1,
                systems.len(),
                top.display()
            );
            eprintln!("one-way delay: {}", t.delays().join("; "));
            if !t.outages().is_empty() {
                eprintln!("outages: {}", t.outages().join("; "));
            }
            eprintln!("note: recorded traces carry no train position: polycorn systems run without a handover predictor");
        }
        None => eprintln!(
            "sim bench: preset {} route {} trip seeds {first}..{}, {} systems, {rides} rides on {threads} threads, output {}",
            ride.trip.preset,
            ride.trip.route_seed,
            first + rides - 1,
            systems.len(),
            top.display()
        ),
    }
    let seeds: Vec<u64> = (0..rides).map(|k| first + k).collect();
    let dir = |seed: u64| {
        if rides == 1 {
            top.clone()
        } else {
            top.join(format!("trip-{seed}"))
        }
    };
    // Recorded traces have no train whose position a predictor could use.
    let prediction = match traces {
        Some(_) => SimPrediction::none(),
        None => SimPrediction::new(args.predictor, ride, &systems)?,
    };
    let rides = simulate_rides(
        ride,
        traces.as_ref(),
        &systems,
        &seeds,
        &params,
        threads,
        &prediction,
        Some(&dir),
    )?;
    if rides.len() == 1 {
        print!("{}", report::table(&rides[0]));
        println!("results: {}", top.join("results.json").display());
    } else {
        super::print_pooled(&rides, Some(&top))?;
    }
    Ok(())
}

pub mod sweep;
pub mod validate;

#[cfg(test)]
mod tests;
