//! `polycorn sim bench`: the bench's rides in the deterministic simulator (`polycorn-sim`)
//! instead of the emulated testbed — the same trip windows, plan, systems, relay and proxy
//! configurations (`configs`, turned into session configurations by `polycorn-net`'s
//! `Tuning`), and the same outputs (`results.json`, CSVs, `report.html`, `pooled.*`), so
//! `bench pool` and the report read simulated rides unchanged. Kernel MPTCP is not simulated.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use clap::Args;
use polycorn_link::link::QueueLimit;
use polycorn_link::trip::{Trip, STEP_MS};
use polycorn_net::tuning::Tuning;
use polycorn_proto::Role;
use polycorn_sim::tcp::{CongestionControl, Duration as SimDuration, TcpConfig};
use polycorn_sim::{ImSegment, RideConfig, RideResult, Transfer, TransferResult};

use polycorn_sim::budget::Budget;

use super::analysis::{oracle_split, FlowResult, ImResult, SystemRun, BIN_MS, TAIL_SHARE};
use super::plan::{Plan, PlanParams};
use super::{
    apply_workloads, at_speed_from_ms, configs, report, split_systems, systems_named, Meta, System,
    Workload, FULL_SYSTEMS, QUICK_SYSTEMS,
};
use crate::common::utc_now;
use crate::tripgen::TripArgs;

/// Options of `polycorn sim bench`.
#[derive(Args, Debug, Clone)]
pub struct SimArgs {
    /// Quick mode: the quick bench's plan (about 65 s per ride) and systems.
    #[arg(long)]
    pub quick: bool,
    /// The trip (preset and seeds); ride k replays trip seed TRIP_SEED + k.
    #[command(flatten)]
    pub trip: TripArgs,
    /// Rides (trip seeds TRIP_SEED .. TRIP_SEED+N-1 of the same route), pooled at the end.
    #[arg(long, default_value_t = 1)]
    pub rides: u64,
    /// Workload seed (IM message times). Default: each ride's trip seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Systems, as `polycorn bench --systems` names them (default: the bench's, without
    /// mptcp). Kernel MPTCP (`mptcp`) is not simulated and is refused. `single` runs the
    /// session with the `single` pipeline (one path per passenger, round robin), not a tunnel.
    #[arg(long)]
    pub systems: Vec<String>,
    /// Bulk flows (cycled over 256 KB, 1 MB, 4 MB); default 6 quick, 12 full.
    #[arg(long)]
    pub bulk_flows: Option<usize>,
    /// Workloads: bulk, im, upload.
    #[arg(long, value_delimiter = ',', default_value = "bulk,im")]
    pub workloads: Vec<Workload>,
    /// Seconds into the trip where the window starts (default: first moment above 250 km/h).
    #[arg(long)]
    pub from_s: Option<f64>,
    /// Droptail queue per path and direction, bytes (default: each carrier's, from the trip
    /// model).
    #[arg(long)]
    pub queue_bytes: Option<u64>,
    /// Output directory (default `results/sim-<preset>-r<route>-t<trip>-<quick|full>/`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Rides simulated at once (default: every core).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// The systems of `args`, refusing kernel MPTCP.
pub fn sim_systems(args: &SimArgs) -> Result<Vec<System>> {
    let names: Vec<String> = if args.systems.is_empty() {
        let d = if args.quick {
            QUICK_SYSTEMS
        } else {
            FULL_SYSTEMS
        };
        d.iter()
            .filter(|s| **s != "mptcp")
            .map(|s| s.to_string())
            .collect()
    } else {
        split_systems(&args.systems)?
    };
    let systems = systems_named(&names)?;
    if let Some(s) = systems.iter().find(|s| s.mode == "mptcp") {
        bail!(
            "`{}`: kernel MPTCP is not simulated; run it with `polycorn bench`",
            s.name
        );
    }
    Ok(systems)
}

/// The plan of `args`.
pub fn plan_params(args: &SimArgs) -> Result<PlanParams> {
    let mut p = if args.quick {
        PlanParams::quick()
    } else {
        PlanParams::full()
    };
    apply_workloads(&mut p, &args.workloads, args.bulk_flows)?;
    Ok(p)
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
/// from the bench's configuration files, over `trip`'s links.
pub fn ride_config(
    sys: &System,
    trip: &Trip,
    plan: &Plan,
    window_s: f64,
    queue_bytes: Option<u64>,
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
    })
}

/// A side's subflow sockets as its tunables and `slow_start_after_idle` set them (Linux's
/// defaults otherwise).
pub fn tcp_config(t: &Tuning, slow_start_after_idle: Option<bool>) -> Result<TcpConfig> {
    let cc = match t.congestion.as_deref() {
        None | Some("cubic") => CongestionControl::Cubic,
        Some("bbr") => CongestionControl::Bbr,
        Some(other) => bail!("congestion control `{other}` is not simulated (cubic, bbr)"),
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
            put("polycorn_path_reconnects_total", 0);
        }
    }
    SystemRun {
        system: sys.name.clone(),
        mode: sys.mode.clone(),
        spec: sys.spec.clone(),
        pipeline: sys.pipeline(),
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

/// The trip window and plan of ride `trip_seed` (as `polycorn bench` cuts it).
pub fn ride_trip(
    args: &SimArgs,
    trip_seed: u64,
    params: &PlanParams,
) -> Result<(Trip, Plan, Meta)> {
    let seed = args.seed.unwrap_or(trip_seed);
    let plan = Plan::new(params, seed);
    let window_ms = ((plan.end_s + plan.bulk_timeout_s + 5.0) * 1000.0) as u64;
    let mut targs = args.trip.clone();
    targs.trip_seed = trip_seed;
    let (cfg, source) = targs.config()?;
    let model = crate::tripgen::trip_model_id(&cfg)?;
    let full = Trip::generate(&cfg)?;
    let from_ms = match args.from_s {
        Some(s) if s.is_finite() && s >= 0.0 => (s * 1000.0) as u64 / STEP_MS * STEP_MS,
        Some(s) => bail!("--from-s must be >= 0, got {s}"),
        None => at_speed_from_ms(&full).with_context(|| {
            format!(
                "the `{}` trip never exceeds 250 km/h; pass --from-s",
                targs.preset
            )
        })?,
    };
    if from_ms + window_ms > full.duration_ms {
        bail!(
            "the trip has {:.0} s after {:.0} s; the plan needs {:.0} s",
            full.duration_ms.saturating_sub(from_ms) as f64 / 1000.0,
            from_ms as f64 / 1000.0,
            window_ms as f64 / 1000.0
        );
    }
    let trip = full.window(from_ms, window_ms);
    let meta = Meta {
        version: crate::VERSION.to_string(),
        kernel: "simulated (polycorn-sim)".into(),
        preset: targs.preset.clone(),
        trip_model: Some(model),
        route_seed: targs.route_seed,
        trip_seed,
        seed,
        mode: if args.quick { "quick" } else { "full" }.into(),
        from_s: from_ms as f64 / 1000.0,
        window_s: window_ms as f64 / 1000.0,
        queue_bytes: args.queue_bytes,
        carriers: trip.paths.iter().map(|p| p.name.clone()).collect(),
        interruptions: source,
        handover_interruption: targs.handover_interruption.name().to_string(),
        prediction: "none: the simulator runs without LinkDB, HPR never throttles".into(),
        trace_files: vec![],
        path_delays: vec![],
        path_outages: vec![],
        started: utc_now(),
        build: Some(crate::BUILD.to_string()).filter(|b| !b.is_empty()),
        command: Some(super::command_line()),
    };
    Ok((trip, plan, meta))
}

/// Simulate every system on ride `trip_seed`; returns its results.
pub fn simulate_ride(
    args: &SimArgs,
    systems: &[System],
    trip_seed: u64,
    params: &PlanParams,
) -> Result<report::Results> {
    let (trip, plan, meta) = ride_trip(args, trip_seed, params)?;
    let mut runs = Vec::new();
    for sys in systems {
        let cfg = ride_config(sys, &trip, &plan, meta.window_s, args.queue_bytes)?;
        let r = polycorn_sim::run(&cfg).with_context(|| format!("simulate {}", sys.name))?;
        runs.push(system_run(sys, &plan, &trip, &r));
    }
    Ok(report::Results::new(meta, plan, &trip, runs))
}

fn out_dir(args: &SimArgs) -> PathBuf {
    args.out
        .clone()
        .unwrap_or_else(|| super::ride_dir("sim", &args.trip, args.quick))
}

fn write_ride(out: &Path, r: &report::Results) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
    r.write_all(out)?;
    report::write_html(out, r)?;
    report::verify(out, r).context("the outputs are incomplete or inconsistent")
}

/// `polycorn sim bench`.
pub fn run(args: &SimArgs) -> Result<()> {
    let systems = sim_systems(args)?;
    let params = plan_params(args)?;
    if args.rides == 0 {
        bail!("--rides must be at least 1");
    }
    let top = out_dir(args);
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, args.rides as usize);
    eprintln!(
        "sim bench: preset {} route {} trip seeds {}..{}, {} systems, {} rides on {threads} threads, output {}",
        args.trip.preset,
        args.trip.route_seed,
        args.trip.trip_seed,
        args.trip.trip_seed + args.rides - 1,
        systems.len(),
        args.rides,
        top.display()
    );
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, Result<report::Results>)>> = Mutex::new(Vec::new());
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= args.rides as usize {
                    return;
                }
                let seed = args.trip.trip_seed + k as u64;
                let t = std::time::Instant::now();
                let r = simulate_ride(args, &systems, seed, &params);
                let took = t.elapsed().as_secs_f64();
                let r = r.and_then(|r| {
                    let out = if args.rides == 1 {
                        top.clone()
                    } else {
                        top.join(format!("trip-{seed}"))
                    };
                    write_ride(&out, &r)?;
                    Ok(r)
                });
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                let what = match &r {
                    Ok(r) => format!(
                        "{} systems x {:.0} s of trip simulated in {took:.1} s on one thread",
                        r.runs.len(),
                        r.meta.window_s
                    ),
                    Err(_) => "FAILED".into(),
                };
                eprintln!(
                    "[{n}/{}] ride {seed}: {what} ({:.1} s elapsed)",
                    args.rides,
                    started.elapsed().as_secs_f64()
                );
                results
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((k, r));
            });
        }
    });
    let mut all = results.into_inner().unwrap_or_else(|p| p.into_inner());
    all.sort_by_key(|(k, _)| *k);
    let rides = all
        .into_iter()
        .map(|(k, r)| r.with_context(|| format!("ride {}", args.trip.trip_seed + k as u64)))
        .collect::<Result<Vec<_>>>()?;
    if rides.len() == 1 {
        print!("{}", report::table(&rides[0]));
        println!("results: {}", top.join("results.json").display());
    } else {
        super::print_pooled(&rides, Some(&top))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
