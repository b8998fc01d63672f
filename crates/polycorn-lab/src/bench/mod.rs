//! `polycorn bench`: the paper's evaluation (§6) side by side, every system under test on the
//! same emulated trip.
//!
//! ## One run
//! The preset's trip is generated from its seeds and cut to a window starting at the first
//! moment above 250 km/h. For each system, in turn: a fresh testbed (`bch…` namespaces), the
//! emulator started in-process on the window (its start is `t0`), the trip's context served
//! gpsd-style to the relay, the IM, bulk and upload servers in the server namespace, `polycorn proxy` and
//! `polycorn relay` as child processes in their namespaces with the system's mode and scheduler,
//! then the [`plan::Plan`] played from the client namespace at fixed times after `t0`; then
//! everything is stopped and the testbed removed. So every system sees the same capacity,
//! delay and outages at the same moments of its workload. Daemons must be ready before the
//! plan's lead-in ends; a system whose daemons are late or die is reported as failed, not
//! silently dropped.
//!
//! ## Outputs (`--out`, default `results/bench-<preset>-r<route>-t<trip>-<quick|full>/`)
//! `flows.csv` (one row per bulk download and system), `uploads.csv` (the same for uploads, when
//! `--workloads upload` ran them), `im.csv` (one row per IM message and system), `results.json` (metadata, raw results, summaries), `summary.json` (the same without raw
//! samples, see [`summarize`]), `report.html` (self-contained:
//! tables and inline SVG plots), `logs/` (relay and proxy logs per system).

pub mod analysis;
pub mod budget;
pub(crate) mod configs;
pub mod plan;
pub mod pool;
pub mod report;
pub mod sim;
pub mod summarize;
pub mod traces;
pub mod workload;

use std::io::{IsTerminal, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use polycorn_emu::models;
use polycorn_emu::testbed::TestbedSpec;
use polycorn_link::link::QueueLimit;
use polycorn_link::trip::{Trip, STEP_MS};
use polycorn_net::config::LinkDbConfig;

use crate::common::{kernel, utc_now, HSR_SPEED_MPS};
use crate::harness::{build_linkdb, scrape_metrics, Daemon, Guard, TripPlayer, LINKDB_SEED_OFFSET};
use crate::tripgen::TripArgs;
use analysis::SystemRun;
use plan::{Plan, PlanParams};

pub(crate) use configs::write_configs;

/// What `polycorn bench`, `polycorn sim bench` and `polycorn sim validate` take alike: the
/// trip and its rides, the systems, the workload and where the outputs go.
#[derive(Args, Debug, Clone)]
pub struct RideArgs {
    /// Quick mode (for CI): a short trip window (about 65 s per system and ride) and four
    /// systems, mptcp, single, vanilla and hrsch (the simulator leaves out mptcp).
    #[arg(long)]
    pub quick: bool,
    /// The trip (preset and seeds) every system replays.
    #[command(flatten)]
    pub trip: TripArgs,
    /// Rides to replay: trip seeds TRIP_SEED .. TRIP_SEED+N-1 of the same route, each a whole
    /// bench in `trip-<seed>/` of the output directory; the per-flow ratios and IM times are
    /// then pooled over all rides (`pooled.txt`, `pooled.json`). With `--trace`: consecutive
    /// windows of the traces. [default: 1; `sim validate`: 8]
    #[arg(long, visible_alias = "trips", value_name = "N")]
    pub rides: Option<u64>,
    /// Workload seed (IM message times). Default: each ride's trip seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Systems to run, comma-separated (default: all in full mode, four in quick mode; `sim
    /// validate`: single, vanilla, hrsch). Known:
    /// mptcp, single, vanilla, blest, ecf, stms, musher, redundant, roundrobin, hrsch, polycorn (HRSCH that
    /// also reinjects a path's data when the relay reports its cell lost), hrsch-hpr, hrsch-tpr,
    /// hrsch-ori, hrsch-er (HRSCH without that stage), or `polycorn:SPEC` for any pipeline. A
    /// polycorn system with `+fresh` appended (e.g. `hrsch+fresh`) runs with the relay's
    /// `idle_refresh = "used"`, with `+warm` with `slow_start_after_idle = false` on relay and
    /// proxy (subflows keep their congestion window between flows). Polycorn systems run the
    /// daemons' default congestion control, BBR, and the baselines `mptcp` and `single` Linux's,
    /// CUBIC: any system with `+cubic` runs CUBIC on relay and proxy (subflows, or the
    /// baselines' tunnels), with `+bbr` BBR; a
    /// polycorn system with `+rto1s` with `rto_max_ms = 1000` on relay and proxy (subflows'
    /// retransmission timeout backs off to at most 1 s), with `+probe200` with `idle_probe_s = 0`
    /// on relay and proxy (probes every 200 ms also when no flow is open), with `+nocap` with
    /// `window_gain = 0` on relay and proxy (schedulers use the subflows' whole congestion
    /// window), with `+noask` with the proxy's `ask_refresh = false` (no fresh subflow after a
    /// timeout on an idle one); suffixes combine. A system named twice runs twice, the second as `NAME#2` (an A/A run
    /// measures the noise). A SPEC with commas needs `;` between the systems instead
    /// (`--systems 'vanilla;polycorn:minrtt,tpr'`), or a `--systems` of its own. The simulator
    /// refuses kernel MPTCP (`mptcp`) and runs `single` as the session with the `single`
    /// pipeline (one path per passenger, round robin), not as a tunnel.
    #[arg(long)]
    pub systems: Vec<String>,
    /// Bulk flows (cycled over 256 KB, 1 MB, 4 MB); default 6 quick, 12 full. With the
    /// `upload` workload, also the number of uploads.
    #[arg(long)]
    pub bulk_flows: Option<usize>,
    /// Seconds between bulk flow starts (default 4 quick, 6 full). Over 30 s, the sessions of
    /// polycorn systems go idle between flows and probe every `idle_probe_s` (see `+probe200`).
    #[arg(long)]
    pub bulk_gap_s: Option<f64>,
    /// Workloads to run, comma-separated: `bulk` (downloads), `im` (instant messaging), `upload`
    /// (bulk uploads, after the others; not run unless named). Leaving one out shortens every
    /// system's window, so more rides fit in the same time; the next workload's schedule is
    /// unchanged but starts earlier on the trip.
    #[arg(long, value_delimiter = ',', default_value = "bulk,im")]
    pub workloads: Vec<Workload>,
    /// Seconds into the trip where the window starts (default: first moment above 250 km/h).
    #[arg(long)]
    pub from_s: Option<f64>,
    /// Droptail queue per path and direction, bytes (default: each carrier's queue from the
    /// trip model, sized in time).
    #[arg(long)]
    pub queue_bytes: Option<u64>,
    /// Instead of the preset's trip: one path per FILE, a recorded trace replayed in a loop (as
    /// `testbed up --trace`): a mahimahi file (`X.down`, with `X.up` for the uplink when it
    /// exists) or a per-second throughput CSV with `Timestamp,DL_bitrate,UL_bitrate` columns
    /// (e.g. ucc5g). No train: no handovers, no context, no handover predictions (HPR never
    /// throttles); the window starts at `--from-s` (default 0) of the traces. With `--rides N`,
    /// ride k (0-based) replays the k-th window after that (trip seed = workload seed = k + 1
    /// unless `--seed`). Not taken by `sim validate`.
    #[arg(
        long = "trace",
        value_name = "FILE",
        conflicts_with_all = ["preset", "route_seed", "trip_seed", "interruptions", "handover_interruption"]
    )]
    pub traces: Vec<PathBuf>,
    /// One-way delay of the trace paths, ms (with --trace): one value for every path, or one
    /// per path (`--delay-ms 20,60`) [default: a trace's own delay — `X.delay.csv` beside
    /// `X.down`, or half a throughput log's `PINGMIN` — else 20].
    #[arg(long, value_name = "MS", value_delimiter = ',', requires = "traces")]
    pub delay_ms: Vec<f64>,
    /// Output directory (default `results/<bench|sim|validate>-<preset>-r<route>-t<trip>-<quick|full>/`,
    /// with `--trace` `results/<bench|sim>-traces-<quick|full>/`).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

impl RideArgs {
    /// The number of rides (`--rides`, else `default`), refused when 0.
    pub fn rides_or(&self, default: u64) -> Result<u64> {
        match self.rides.unwrap_or(default) {
            0 => bail!("--rides must be at least 1"),
            n => Ok(n),
        }
    }

    /// The systems named by `--systems`, else those of `quick` or full mode (`defaults`: the
    /// two lists, quick first), each resolved.
    pub fn systems_or(&self, defaults: (&[&str], &[&str])) -> Result<Vec<System>> {
        let names: Vec<String> = if self.systems.is_empty() {
            let d = if self.quick { defaults.0 } else { defaults.1 };
            d.iter().map(|s| s.to_string()).collect()
        } else {
            split_systems(&self.systems)?
        };
        systems_named(&names)
    }

    /// The workload plan's parameters: quick or full, with `--workloads`, `--bulk-flows` and
    /// `--bulk-gap-s` applied.
    pub fn plan_params(&self) -> Result<PlanParams> {
        let mut params = if self.quick {
            PlanParams::quick()
        } else {
            PlanParams::full()
        };
        apply_workloads(&mut params, &self.workloads, self.bulk_flows)?;
        if let Some(gap) = self.bulk_gap_s {
            if !(gap.is_finite() && (0.5..=600.0).contains(&gap)) {
                bail!("--bulk-gap-s {gap}: seconds between bulk flow starts must be 0.5 to 600");
            }
            params.bulk_gap_s = gap;
        }
        Ok(params)
    }

    /// The recorded paths of `--trace` (with `--delay-ms`), read and checked; None without
    /// `--trace`.
    pub fn load_traces(&self) -> Result<Option<traces::Traces>> {
        if self.traces.is_empty() {
            return Ok(None);
        }
        traces::Traces::load(&self.traces, &self.delay_ms).map(Some)
    }
}

/// Options of `polycorn bench`.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// The rides, systems and workload.
    #[command(flatten)]
    pub ride: RideArgs,
    /// Where polycorn systems get LinkDB's handover-failure predictions: `both` (proxy for the
    /// downlink and relay for the uplink, as in the paper), `proxy` (downlink only) or `none`.
    #[arg(long, value_enum, default_value_t = PredictAt::Both)]
    pub prediction: PredictAt,
    /// Testbed name (namespace prefix) used for every system; created and removed.
    #[arg(long)]
    pub name: Option<String>,
}

/// A workload of the bench.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Bulk downloads of 256 KB, 1 MB and 4 MB.
    Bulk,
    /// Instant messaging with 10, 20 and 30 users.
    Im,
    /// Bulk uploads of 256 KB, 1 MB and 4 MB (the relay schedules them).
    Upload,
}

/// Which ends of a polycorn system run LinkDB's predictor.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum PredictAt {
    /// Proxy (downlink) and relay (uplink).
    Both,
    /// Proxy only (downlink).
    Proxy,
    /// Neither: HPR never throttles.
    None,
}

/// A system under test.
#[derive(Debug, Clone, PartialEq)]
pub struct System {
    /// Short name.
    pub name: String,
    /// Relay mode: polycorn, mptcp, single.
    pub mode: String,
    /// Scheduler spec (ignored by mptcp and single modes, which do their own).
    pub spec: String,
    /// The relay's `idle_refresh` (None: the default).
    pub idle_refresh: Option<&'static str>,
    /// `slow_start_after_idle = false` for relay and proxy (`+warm`).
    pub warm: bool,
    /// TCP congestion control of relay and proxy (subflows or tunnels): polycorn systems run
    /// the daemons' default (`bbr`), the baselines (`mptcp`, `single`) Linux's (`cubic`);
    /// `+bbr` and `+cubic` choose.
    pub congestion: &'static str,
    /// `rto_max_ms` of relay and proxy subflows (`+rto1s`: 1000; None: the kernel's).
    pub rto_max_ms: Option<u32>,
    /// `idle_probe_s` of relay and proxy (`+probe200`: 0; None: the default).
    pub idle_probe_s: Option<u64>,
    /// `window_gain` of relay and proxy (`+nocap`: 0; None: the default).
    pub window_gain: Option<f64>,
    /// The proxy's `ask_refresh` (`+noask`: false).
    pub ask_refresh: bool,
}

impl System {
    /// The scheduler this build runs for the system, presets expanded (`polycorn` →
    /// `hpr,minrtt,…`), recorded beside the spec in the results; None for kernel MPTCP and
    /// single path, which schedule on their own.
    pub fn pipeline(&self) -> Option<String> {
        if self.mode != "polycorn" {
            return None;
        }
        polycorn_sched::Pipeline::from_spec(&self.spec)
            .ok()
            .map(|p| p.spec().to_string())
    }
}

/// The window of `full` a ride replays: `window_ms` from `from_ms`, or from where the train
/// first runs at speed ([`at_speed_from_ms`]); refused when the trip is too short. Returns the
/// window's start and the window.
pub fn ride_window(
    full: &Trip,
    from_ms: Option<u64>,
    window_ms: u64,
    preset: &str,
) -> Result<(u64, Trip)> {
    let from_ms = match from_ms {
        Some(ms) => ms,
        None => at_speed_from_ms(full).with_context(|| {
            format!("the `{preset}` trip never exceeds 250 km/h; pass --from-s")
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
    Ok((from_ms, full.window(from_ms, window_ms)))
}

/// Ride `trip_seed` of `args` as `polycorn bench` and `polycorn sim bench` both cut it: the
/// workload plan (seed `--seed`, else the trip seed), the window it plays on and the results'
/// metadata. The window runs `bulk_timeout_s + 5` s past the plan's end, so late flows still
/// see the trip, not a dead link. On the preset's trip (`traces` None) it starts at `--from-s`,
/// else where the train first runs at speed ([`ride_window`]). On recorded traces, ride k
/// (trip seed `--trip-seed` + k) is the k-th consecutive window from `--from-s` (default 0),
/// with a [`models::DEFAULT_QUEUE_BYTES`] queue unless `--queue-bytes`, the traces' files,
/// delays and outages in the metadata, and no predictor. `kernel` and `prediction` (what the
/// ride's polycorn systems predict handovers with on a trip) are the caller's.
pub fn ride_setup(
    args: &RideArgs,
    traces: Option<&traces::Traces>,
    trip_seed: u64,
    params: &PlanParams,
    kernel: String,
    prediction: String,
) -> Result<(Trip, Plan, Meta)> {
    let seed = args.seed.unwrap_or(trip_seed);
    let plan = Plan::new(params, seed);
    let window_ms = ((plan.end_s + plan.bulk_timeout_s + 5.0) * 1000.0) as u64;
    let from_ms = match args.from_s {
        Some(s) if s.is_finite() && s >= 0.0 => Some((s * 1000.0) as u64 / STEP_MS * STEP_MS),
        Some(s) => bail!("--from-s must be >= 0, got {s}"),
        None => None,
    };
    let mut targs = args.trip.clone();
    targs.trip_seed = trip_seed;
    // (trip, its model's identity, where interruptions came from, the window's start)
    let (full, model, source, from_ms) = match traces {
        Some(t) => {
            // Rides of recorded traces are consecutive windows of them.
            let Some(ride) = trip_seed.checked_sub(args.trip.trip_seed) else {
                bail!(
                    "trip seed {trip_seed}: the rides of recorded traces are trip seeds {} on",
                    args.trip.trip_seed
                );
            };
            let stride = window_ms.div_ceil(STEP_MS) * STEP_MS;
            let from_ms = from_ms.unwrap_or(0) + ride * stride;
            // Traces loop: they cover whatever window is asked for.
            let full = t.trip(from_ms + window_ms);
            (
                full,
                t.id.clone(),
                "none: recorded traces".to_string(),
                Some(from_ms),
            )
        }
        None => {
            let (cfg, source) = targs.config()?;
            let model = crate::tripgen::trip_model_id(&cfg)?;
            (Trip::generate(&cfg)?, model, source, from_ms)
        }
    };
    let (from_ms, trip) = ride_window(&full, from_ms, window_ms, &targs.preset)?;
    let on_traces = traces.is_some();
    let meta = Meta {
        version: crate::VERSION.to_string(),
        build: Some(crate::BUILD.to_string()).filter(|b| !b.is_empty()),
        command: Some(command_line()),
        kernel,
        preset: if on_traces {
            report::TRACES_PRESET.to_string()
        } else {
            targs.preset.clone()
        },
        trip_model: Some(model),
        route_seed: if on_traces { 0 } else { targs.route_seed },
        trip_seed,
        seed,
        mode: if args.quick { "quick" } else { "full" }.into(),
        from_s: from_ms as f64 / 1000.0,
        window_s: window_ms as f64 / 1000.0,
        queue_bytes: match traces {
            Some(_) => Some(args.queue_bytes.unwrap_or(models::DEFAULT_QUEUE_BYTES)),
            None => args.queue_bytes,
        },
        carriers: trip.paths.iter().map(|p| p.name.clone()).collect(),
        interruptions: source,
        handover_interruption: match traces {
            Some(_) if trip.paths.iter().any(|p| !p.interruptions_ms.is_empty()) => {
                "hold".to_string()
            }
            Some(_) => "none".to_string(),
            None => targs.handover_interruption.name().to_string(),
        },
        prediction: if on_traces {
            "none: recorded traces carry no train position for LinkDB; HPR never throttles"
                .to_string()
        } else {
            prediction
        },
        started: utc_now(),
        trace_files: traces.map_or_else(Vec::new, |t| {
            t.files.iter().map(|f| f.display().to_string()).collect()
        }),
        path_delays: traces.map_or_else(Vec::new, |t| t.delays()),
        path_outages: traces.map_or_else(Vec::new, |t| t.outages()),
    };
    Ok((trip, plan, meta))
}

/// The systems of full mode, in report order.
pub const FULL_SYSTEMS: &[&str] = &[
    "mptcp",
    "single",
    "vanilla",
    "blest",
    "ecf",
    "stms",
    "musher",
    "redundant",
    "hrsch",
    "polycorn",
    "hrsch-hpr",
    "hrsch-tpr",
    "hrsch-ori",
    "hrsch-er",
];
/// The systems of quick mode.
pub const QUICK_SYSTEMS: &[&str] = &["mptcp", "single", "vanilla", "hrsch"];

/// Resolve a system name.
pub fn system(name: &str) -> Result<System> {
    // Option suffixes: (suffix, what it sets, polycorn systems only, how it changes the system).
    type Apply = fn(&mut System);
    const SUFFIXES: [(&str, &str, bool, Apply); 8] = [
        ("+fresh", "idle_refresh = \"used\"", true, |s| {
            s.idle_refresh = Some("used")
        }),
        ("+warm", "slow_start_after_idle = false", true, |s| {
            s.warm = true
        }),
        ("+bbr", "congestion = \"bbr\"", false, |s| {
            s.congestion = "bbr"
        }),
        ("+cubic", "congestion = \"cubic\"", false, |s| {
            s.congestion = "cubic"
        }),
        ("+rto1s", "rto_max_ms = 1000", true, |s| {
            s.rto_max_ms = Some(1000)
        }),
        ("+probe200", "idle_probe_s = 0", true, |s| {
            s.idle_probe_s = Some(0)
        }),
        ("+nocap", "window_gain = 0", true, |s| {
            s.window_gain = Some(0.0)
        }),
        ("+noask", "ask_refresh = false", true, |s| {
            s.ask_refresh = false
        }),
    ];
    for (suffix, what, polycorn_only, apply) in SUFFIXES {
        if let Some(base) = name.strip_suffix(suffix) {
            let mut sys = system(base)?;
            if polycorn_only && sys.mode != "polycorn" {
                bail!(
                    "`{name}`: {suffix} ({what}) applies to polycorn systems only: a baseline's \
                     connections live as long as the passenger's"
                );
            }
            sys.name = name.into();
            apply(&mut sys);
            return Ok(sys);
        }
    }
    let pc = |spec: &str| System {
        name: name.into(),
        mode: "polycorn".into(),
        spec: spec.into(),
        idle_refresh: None,
        warm: false,
        congestion: polycorn_net::config::DEFAULT_CONGESTION,
        rto_max_ms: None,
        idle_probe_s: None,
        window_gain: None,
        ask_refresh: true,
    };
    Ok(match name {
        "mptcp" | "single" => System {
            name: name.into(),
            mode: name.into(),
            spec: "-".into(),
            idle_refresh: None,
            warm: false,
            congestion: "cubic",
            rto_max_ms: None,
            idle_probe_s: None,
            window_gain: None,
            ask_refresh: true,
        },
        "vanilla" | "blest" | "ecf" | "stms" | "musher" | "redundant" | "roundrobin" | "hrsch"
        | "minrtt" | "polycorn" => pc(name),
        "hrsch-hpr" => pc("minrtt,tpr,ori+er(k=3)"),
        "hrsch-tpr" => pc("hpr,minrtt,ori+er(k=3)"),
        "hrsch-ori" => pc("hpr,minrtt,tpr+er(k=3)"),
        "hrsch-er" => pc("hpr,minrtt,tpr,ori+rto"),
        other => match other.strip_prefix("polycorn:") {
            Some(spec) => {
                polycorn_sched::Pipeline::from_spec(spec)?;
                pc(spec)
            }
            None => bail!(
                "unknown system `{other}`; known: {}, roundrobin, or polycorn:SPEC (separate \
                 systems with `;` when a SPEC has commas)",
                FULL_SYSTEMS.join(", ")
            ),
        },
    })
}

/// The system names of the `--systems` values: each value is a list separated by `;` when it
/// holds one (a `polycorn:SPEC` has commas of its own), else by `,`, or one `polycorn:SPEC`.
pub fn split_systems(values: &[String]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for v in values {
        let parts: Vec<&str> = if v.contains(';') {
            v.split(';').collect()
        } else if v.trim_start().starts_with("polycorn:") {
            vec![v.as_str()]
        } else {
            v.split(',').collect()
        };
        for part in parts {
            let part = part.trim();
            if part.is_empty() {
                bail!("--systems `{v}`: an empty system name");
            }
            if part.contains(',') && !part.starts_with("polycorn:") {
                bail!("--systems `{v}`: `{part}` is not a system name");
            }
            out.push(part.to_string());
        }
    }
    Ok(out)
}

/// Resolve the `--systems` list. A system named again runs again under `NAME#2`, `NAME#3`, …
/// (an A/A run: the same system twice on the same ride measures the bench's own noise).
pub fn systems_named(names: &[String]) -> Result<Vec<System>> {
    let mut out: Vec<System> = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let mut sys = system(n)?;
        let seen = names[..i].iter().filter(|m| *m == n).count();
        if seen > 0 {
            sys.name = format!("{}#{}", sys.name, seen + 1);
        }
        out.push(sys);
    }
    Ok(out)
}

/// Metadata recorded with every result.
#[derive(Debug, Clone)]
pub struct Meta {
    /// polycorn version (and git commit when known).
    pub version: String,
    /// `git describe` of the build ([`crate::BUILD`]); None where it was not recorded.
    pub build: Option<String>,
    /// The command line of the run (`polycorn bench …`); None where it was not recorded.
    pub command: Option<String>,
    /// Kernel release.
    pub kernel: String,
    /// Trip preset.
    pub preset: String,
    /// Identity of the trip model that generated the ride ([`crate::tripgen::trip_model_id`]);
    /// `None` for rides written before it was recorded (2026-11-26).
    pub trip_model: Option<String>,
    /// Route seed.
    pub route_seed: u64,
    /// Trip seed.
    pub trip_seed: u64,
    /// Workload seed.
    pub seed: u64,
    /// quick or full.
    pub mode: String,
    /// Window start in the trip, s.
    pub from_s: f64,
    /// Window length, s.
    pub window_s: f64,
    /// Queue per path and direction, bytes (None: per carrier, from the trip model).
    pub queue_bytes: Option<u64>,
    /// Carrier names.
    pub carriers: Vec<String>,
    /// Where successful-handover interruption times came from (part of the trip's identity).
    pub interruptions: String,
    /// What the emulated links did with packets during a successful handover's interruption:
    /// `hold` or `drop` (results written before this was recorded: `drop`).
    pub handover_interruption: String,
    /// Whether HRSCH's HPR had a handover predictor.
    pub prediction: String,
    /// Recorded-trace runs (`--trace`): the files, as given; empty otherwise.
    pub trace_files: Vec<String>,
    /// Recorded-trace runs: each path's one-way delay and where it came from (`name: 20 ms`,
    /// `name: half the log's PINGMIN (…)`); empty otherwise.
    pub path_delays: Vec<String>,
    /// Recorded-trace runs: the paths with outages (`X.outages.csv`) and where they came from;
    /// empty otherwise.
    pub path_outages: Vec<String>,
    /// Wall-clock start (UTC, RFC 3339-ish).
    pub started: String,
}

/// `polycorn bench`: every ride's results, in trip-seed order.
pub fn run(args: &BenchArgs) -> Result<Vec<report::Results>> {
    if !nix::unistd::geteuid().is_root() {
        bail!("the bench needs root (network namespaces, TUN devices, kernel MPTCP endpoints)");
    }
    let systems = args.ride.systems_or((QUICK_SYSTEMS, FULL_SYSTEMS))?;
    let params = args.ride.plan_params()?;
    let trips = args.ride.rides_or(1)?;
    if trips >= LINKDB_SEED_OFFSET {
        bail!("--rides must be 1 to {}", LINKDB_SEED_OFFSET - 1);
    }
    let traces = args.ride.load_traces()?;
    let top = out_dir_for(args);
    std::fs::create_dir_all(&top).with_context(|| format!("create {}", top.display()))?;
    // HRSCH's HPR stage needs LinkDB: train it on other rides of the same route (trip seeds
    // disjoint from every replayed one), never on a ride being replayed.
    let training = (
        if args.ride.quick { 8 } else { 20 },
        args.ride.trip.trip_seed + LINKDB_SEED_OFFSET,
    );
    // Recorded traces have no train whose position LinkDB could predict from.
    let linkdb = match args.prediction {
        _ if traces.is_some() => None,
        PredictAt::None => None,
        _ => {
            let (cfg, _) = args.ride.trip.config()?;
            Some(build_linkdb(&top, &args.ride.trip, &cfg, training.0)?)
        }
    };
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| format!("bch{}", std::process::id() % 100_000));
    let interrupted = crate::testbed_cmd::stop_on_signals("bench", vec![name.clone()])?;
    let mut all = Vec::new();
    for k in 0..trips {
        let trip_seed = args.ride.trip.trip_seed + k;
        let out = if trips == 1 {
            top.clone()
        } else {
            top.join(format!("trip-{trip_seed}"))
        };
        if trips > 1 {
            eprintln!("== ride {}/{} (trip seed {trip_seed})", k + 1, trips);
        }
        all.push(run_trip(
            args,
            &systems,
            k as usize,
            trip_seed,
            &params,
            &out,
            linkdb.as_ref(),
            training,
            traces.as_ref(),
            &name,
            &interrupted,
        )?);
    }
    if trips > 1 {
        print_pooled(&all, Some(&top))?;
    }
    Ok(all)
}

/// Set which workloads `params` plays, and how many bulk flows (`--workloads`, `--bulk-flows`).
fn apply_workloads(
    params: &mut PlanParams,
    workloads: &[Workload],
    bulk_flows: Option<usize>,
) -> Result<()> {
    if workloads.is_empty() {
        bail!("--workloads needs at least one of: bulk, im, upload");
    }
    let bulk = workloads.contains(&Workload::Bulk);
    let upload = workloads.contains(&Workload::Upload);
    params.im = workloads.contains(&Workload::Im);
    let n = match bulk_flows {
        Some(_) if !bulk && !upload => {
            bail!("--bulk-flows needs the bulk or the upload workload (--workloads)")
        }
        Some(0) => bail!("--bulk-flows must be at least 1"),
        Some(n) => n,
        None => params.bulk_flows,
    };
    params.bulk_flows = if bulk { n } else { 0 };
    params.uploads = if upload { n } else { 0 };
    Ok(())
}

/// Print the rides pooled (`report::pooled`) and, with `out`, write `pooled.txt`,
/// `pooled.json` and the compact `summary.json` ([`summarize::compact_pooled`]) there. Shared by `--rides N` and `bench pool`.
pub fn print_pooled(rides: &[report::Results], out: Option<&Path>) -> Result<()> {
    let (text, json) = report::pooled(rides);
    let Some(out) = out else {
        return crate::emit(&text);
    };
    let first = rides.first().map(|r| &r.meta);
    let summary = summarize::compact_pooled(
        &json,
        first.and_then(|m| m.build.as_deref()),
        first.map_or("", |m| m.started.as_str()),
        &command_line(),
    );
    // Files first: a reader that stops early (`| head`) must not cost the outputs.
    std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
    let (txt, js) = (out.join("pooled.txt"), out.join("pooled.json"));
    std::fs::write(&txt, &text).with_context(|| format!("write {}", txt.display()))?;
    std::fs::write(&js, serde_json::to_string_pretty(&json)?)
        .with_context(|| format!("write {}", js.display()))?;
    summarize::write_summary(out, &summary)?;
    crate::emit(&format!(
        "{text}pooled over {} rides: {}\n",
        rides.len(),
        txt.display()
    ))
}

/// This process's command line as `polycorn ARGS…` (the program's path left out), arguments
/// with spaces or quotes in single quotes.
pub fn command_line() -> String {
    let mut line = String::from("polycorn");
    for a in std::env::args().skip(1) {
        line.push(' ');
        if a.is_empty() || a.contains(|c: char| c.is_whitespace() || "'\"$;&|`\\".contains(c)) {
            line.push_str(&format!("'{}'", a.replace('\'', "'\\''")));
        } else {
            line.push_str(&a);
        }
    }
    line
}

/// The order in which ride number `ride` (from 0) runs `n` systems: rotated by one per ride, so
/// over `n` rides every system runs once in every position. Systems run one after another in
/// real time; rotating keeps any drift along a ride's run order out of the comparisons.
pub fn run_order(n: usize, ride: usize) -> Vec<usize> {
    (0..n).map(|j| (j + ride) % n.max(1)).collect()
}

/// One ride (`ride`, from 0, of trip seed `trip_seed`): every system on the same window of
/// the trip or traces, outputs in `out`.
#[allow(clippy::too_many_arguments)]
fn run_trip(
    args: &BenchArgs,
    systems: &[System],
    ride: usize,
    trip_seed: u64,
    params: &PlanParams,
    out: &Path,
    linkdb: Option<&LinkDbConfig>,
    training: (u64, u64),
    traces: Option<&traces::Traces>,
    name: &str,
    interrupted: &AtomicBool,
) -> Result<report::Results> {
    let prediction = match args.prediction {
        PredictAt::None => "none: LinkDB not loaded, HPR never throttles".to_string(),
        at => format!(
            "LinkDB paper predictor in {}, trained on {} simulated rides of route {} with trip seeds from {} (never the replayed ride)",
            if at == PredictAt::Both {
                "the proxy (downlink) and the relay (uplink)"
            } else {
                "the proxy (downlink); the relay's uplink runs without prediction"
            },
            training.0,
            args.ride.trip.route_seed,
            training.1
        ),
    };
    let (trip, plan, meta) =
        ride_setup(&args.ride, traces, trip_seed, params, kernel(), prediction)?;
    let (mode, seed, source) = (&meta.mode, meta.seed, &meta.interruptions);
    std::fs::create_dir_all(out.join("logs"))
        .with_context(|| format!("create {}", out.display()))?;
    if traces.is_some() {
        eprintln!(
            "bench ({mode}): recorded traces ({}: {}), window {:.1}-{:.1} s of the traces, workload seed {seed}, {} systems x {:.0} s, testbed `{name}`, output {}",
            meta.trip_model.as_deref().unwrap_or("?"),
            meta.carriers.join(", "),
            meta.from_s,
            meta.from_s + plan.end_s,
            systems.len(),
            plan.end_s,
            out.display()
        );
    } else {
        eprintln!(
            "bench ({mode}): preset {} (trip model {}) route {} trip {} (interruptions: {source}, {}), window {:.1}-{:.1} s of the trip, workload seed {seed}, {} systems x {:.0} s, testbed `{name}`, output {}",
            meta.preset,
            meta.trip_model.as_deref().unwrap_or("?"),
            meta.route_seed,
            meta.trip_seed,
            meta.handover_interruption,
            meta.from_s,
            meta.from_s + plan.end_s,
            systems.len(),
            plan.end_s,
            out.display()
        );
    }
    eprintln!("note: {}", meta.prediction);
    if !meta.path_delays.is_empty() {
        eprintln!("one-way delay: {}", meta.path_delays.join("; "));
    }
    if !meta.path_outages.is_empty() {
        eprintln!("outages: {}", meta.path_outages.join("; "));
    }
    let mut runs = Vec::new();
    for (k, idx) in run_order(systems.len(), ride).into_iter().enumerate() {
        let sys = &systems[idx];
        if interrupted.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        let label = format!("[{}/{}] {}", k + 1, systems.len(), sys.name);
        let r = run_system(
            name,
            sys,
            linkdb.map(|l| (l, args.prediction == PredictAt::Both)),
            &trip,
            &plan,
            args.ride.queue_bytes,
            out,
            &label,
        )
        .unwrap_or_else(|e| SystemRun {
            error: Some(format!("{e:#}")),
            ..sys.empty_run()
        });
        match &r.error {
            Some(e) => eprintln!("{label}: FAILED: {e}"),
            None => eprintln!(
                "{label}: {}/{} bulk flows complete, {}/{} IM answers{}",
                r.flows.iter().filter(|f| f.ok).count(),
                r.flows.len(),
                r.im.iter().filter(|m| m.delivery_s.is_some()).count(),
                r.im.len(),
                if plan.uploads.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", {}/{} uploads complete",
                        r.uploads.iter().filter(|f| f.ok).count(),
                        r.uploads.len()
                    )
                }
            ),
        }
        runs.push((idx, r));
    }
    // Results keep the order of `--systems`, whatever order they ran in.
    runs.sort_by_key(|(idx, _)| *idx);
    let runs = runs.into_iter().map(|(_, r)| r).collect();
    let results = report::Results::new(meta, plan, &trip, runs);
    results.write_all(out)?;
    summarize::write_summary(out, &summarize::compact(&results.to_json()))?;
    print!("{}", report::table(&results));
    let html = report::write_html(out, &results)?;
    println!(
        "raw: {} {} {}{}",
        out.join("flows.csv").display(),
        out.join("im.csv").display(),
        out.join("results.json").display(),
        if results.plan.uploads.is_empty() {
            String::new()
        } else {
            format!(" {}", out.join("uploads.csv").display())
        }
    );
    println!("report: {}", html.display());
    report::verify(out, &results).context("the outputs are incomplete or inconsistent")?;
    println!(
        "outputs complete and consistent ({} systems)",
        results.runs.len()
    );
    Ok(results)
}

/// Progress bar on stderr: redrawn in place on a terminal, one line per 15 s otherwise.
fn progress(
    label: String,
    t0: Instant,
    total_s: f64,
    done: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let tty = std::io::stderr().is_terminal();
        let mut last_line = Instant::now();
        while !done.load(Ordering::Relaxed) {
            let el = t0.elapsed().as_secs_f64();
            let frac = (el / total_s).clamp(0.0, 1.0);
            let w = 30usize;
            let fill = (frac * w as f64) as usize;
            let bar = format!(
                "{label} [{}{}] {:>3.0} / {:.0} s",
                "#".repeat(fill),
                "-".repeat(w - fill),
                el.min(total_s),
                total_s
            );
            if tty {
                eprint!("\r{bar}");
                let _ = std::io::stderr().flush();
            } else if last_line.elapsed() >= Duration::from_secs(15) {
                eprintln!("{bar}");
                last_line = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        if tty {
            eprint!("\r{}\r", " ".repeat(label.len() + 50));
        }
    })
}

#[allow(clippy::too_many_arguments)]
fn run_system(
    name: &str,
    sys: &System,
    linkdb: Option<(&LinkDbConfig, bool)>,
    trip: &Trip,
    plan: &Plan,
    queue_bytes: Option<u64>,
    out: &Path,
    label: &str,
) -> Result<SystemRun> {
    let n = trip.paths.len();
    let spec = TestbedSpec {
        name: name.into(),
        paths: n,
    };
    let _testbed = Guard::replace(&spec).with_context(|| format!("build testbed `{name}`"))?;
    // Replies to a relay path address leave on that path: `testbed::up` adds the rule.
    let dir = out.join("logs").join(&sys.name);
    std::fs::create_dir_all(&dir)?;
    polycorn_net::tls::generate(&dir, &[], true)?;
    let (relay_cfg, proxy_cfg) = write_configs(&dir, sys, n, linkdb)?;
    let max_users = plan.im.iter().map(|s| s.users).max().unwrap_or(0);
    workload::add_user_addresses(&spec.ns("client"), max_users)?;
    let servers = workload::Servers::start(&spec.ns("server"))?;
    // Relay and proxy in polycorn's mode note where each flow's last byte went, and the
    // emulator records each downlink packet's way: the downloads' time budgets.
    let budgets = sys.mode == "polycorn";
    // Stops the emulator however this function ends.
    let queue = queue_bytes.map(QueueLimit::Bytes);
    let player = if budgets {
        TripPlayer::start_recording(&spec, trip, queue)?
    } else {
        TripPlayer::start(&spec, trip, queue)?
    };
    let t0 = player.t0;
    let clock = budget::RideClock {
        t0,
        started_at: player.started_at,
    };
    let marks = format!("{}=debug", polycorn_net::engine::marks::TARGET);
    let start_daemon = |role: &str, cfg: &Path| {
        let log = dir.join(format!("{role}.log"));
        let ns = spec.ns(role);
        if budgets {
            Daemon::start_adding(&ns, role, cfg, log, &marks)
        } else {
            Daemon::start(&ns, role, cfg, log)
        }
    };
    let lead_end = t0 + Duration::from_secs_f64(plan.lead_s);
    let mut proxy = start_daemon("proxy", &proxy_cfg)?;
    proxy
        .wait_for("proxy running", 1, lead_end)
        .context("proxy")?;
    let mut relay = start_daemon("relay", &relay_cfg)?;
    relay
        .wait_for("relay running", 1, lead_end)
        .context("relay")?;
    let mut late_paths = Vec::new();
    if sys.mode == "polycorn" {
        if let Err(e) = relay.wait_for("subflow up", n, lead_end) {
            late_paths = late_subflows(&relay.log(), trip, plan.lead_s)
                .map_err(|why| e.context(format!("relay: {why}")))?;
            eprintln!(
                "{label}: note: {} not connected when the workload started: no capacity in the {:.0} s lead-in; the relay connects {} when {} link carries data",
                late_paths.join(", "),
                plan.lead_s,
                if late_paths.len() == 1 { "it" } else { "them" },
                if late_paths.len() == 1 { "its" } else { "their" },
            );
        }
    }
    let ready_s = t0.elapsed().as_secs_f64();
    let done = Arc::new(AtomicBool::new(false));
    let bar = progress(label.to_string(), t0, plan.end_s, done.clone());
    let res = workload::run_client(&spec.ns("client"), plan, t0, &servers.arrivals);
    done.store(true, Ordering::Relaxed);
    let _ = bar.join();
    let mut played = res?;
    // The daemons copy session counters into their metrics once a second.
    std::thread::sleep(Duration::from_millis(1200));
    let mut counters = std::collections::BTreeMap::new();
    for role in ["relay", "proxy"] {
        match scrape_metrics(&spec.ns(role)) {
            Ok(body) => counters.extend(
                parse_counters(&body)
                    .into_iter()
                    .map(|(k, v)| (format!("{role}:{k}"), v)),
            ),
            Err(e) => eprintln!("{}: {role} metrics not collected: {e:#}", sys.name),
        }
    }
    drop(relay);
    drop(proxy);
    let forwarded = player.finish_all()?;
    let stats = forwarded.stats;
    if budgets {
        let read = |role: &str| {
            std::fs::read_to_string(dir.join(format!("{role}.log")))
                .map(|l| budget::parse_marks(&l))
                .unwrap_or_default()
        };
        let (relay, proxy) = (read("relay"), read("proxy"));
        let marks = budget::RideMarks {
            ports: &played.download_ports,
            relay: &relay,
            proxy: &proxy,
            transits: &forwarded.downlink_transits,
            trip,
            clock,
        };
        let (set, missing) = budget::set_budgets(&mut played.flows, &marks);
        if !missing.is_empty() {
            let mut why: Vec<_> = missing.into_iter().collect();
            why.sort();
            let why: Vec<String> = why
                .iter()
                .map(|(m, n)| format!("{n} {}", m.describe()))
                .collect();
            eprintln!(
                "{label}: note: {set} completed downloads have a time budget, not the others ({})",
                why.join(", ")
            );
        }
    }
    Ok(SystemRun {
        ready_s,
        late_paths,
        flows: played.flows,
        im: played.im,
        uploads: played.uploads,
        path_down_bytes: stats.iter().map(|(_, d)| d.bytes_out).collect(),
        path_up_bytes: stats.iter().map(|(u, _)| u.bytes_out).collect(),
        counters,
        ..sys.empty_run()
    })
}

impl System {
    /// A run of this system with nothing in it yet: not ready (`ready_s` NaN), no error, no
    /// flows, messages, uploads, path bytes or counters.
    fn empty_run(&self) -> SystemRun {
        SystemRun {
            system: self.name.clone(),
            mode: self.mode.clone(),
            spec: self.spec.clone(),
            pipeline: self.pipeline(),
            congestion: Some(self.congestion.to_string()),
            ready_s: f64::NAN,
            late_paths: vec![],
            error: None,
            flows: vec![],
            im: vec![],
            uploads: vec![],
            path_down_bytes: vec![],
            path_up_bytes: vec![],
            counters: Default::default(),
        }
    }
}

/// Where `trip` first runs faster than 250 km/h, ms from its start.
pub(crate) fn at_speed_from_ms(trip: &Trip) -> Option<u64> {
    trip.speed_mps
        .iter()
        .position(|v| *v > HSR_SPEED_MPS)
        .map(|s| s as u64 * STEP_MS)
}

/// Most emulated bytes (either direction) a path may carry during the lead-in and still count as
/// "could not connect" when its subflow is not up by then: a TLS 1.3 handshake with this
/// bench's certificates needs ~6 kB; 32 kB leaves room for retransmissions.
const LATE_PATH_LEAD_BYTES: f64 = 32_000.0;

/// When not every subflow came up in the lead-in: the paths that did not (by the relay's
/// `subflow up path=pI` lines), if at least one did and each missing one's emulated link carried
/// less than [`LATE_PATH_LEAD_BYTES`] in some direction during the lead-in — a link, not a
/// setup, problem; every system meets it. Otherwise why the run counts as failed.
fn late_subflows(relay_log: &str, trip: &Trip, lead_s: f64) -> Result<Vec<String>, String> {
    let steps = ((lead_s * 1000.0) as u64 / STEP_MS) as usize;
    let bytes = |bps: &[f64]| bps.iter().take(steps).sum::<f64>() * STEP_MS as f64 / 1000.0 / 8.0;
    let mut late = Vec::new();
    let mut why = Vec::new();
    for (i, p) in trip.paths.iter().enumerate() {
        if relay_log.contains(&format!("subflow up path=p{i} ")) {
            continue;
        }
        let (down, up) = (bytes(&p.dl_bps), bytes(&p.ul_bps));
        if down.min(up) >= LATE_PATH_LEAD_BYTES {
            why.push(format!(
                "path {} (p{i}) did not connect although its link carried {:.0} kB down / {:.0} kB up in the {lead_s:.0} s lead-in",
                p.name,
                down / 1000.0,
                up / 1000.0
            ));
        }
        late.push(p.name.clone());
    }
    if late.len() == trip.paths.len() {
        why.push("no path connected".into());
    }
    if why.is_empty() {
        Ok(late)
    } else {
        Err(why.join("; "))
    }
}

/// The samples of the metric families the bench keeps (per-stage decisions, per-path
/// reinjected/redundant bytes, retransmissions and reconnects, the reorder-wait histogram's
/// sum and count, reset flows), as `name{labels}` -> value.
pub(crate) fn parse_counters(body: &str) -> std::collections::BTreeMap<String, f64> {
    const KEEP: [&str; 7] = [
        "polycorn_stage_decisions_total",
        "polycorn_path_reinjected_bytes_total",
        "polycorn_path_redundant_bytes_total",
        "polycorn_path_retransmissions_total",
        "polycorn_path_reconnects_total",
        "polycorn_reorder_wait_seconds_",
        "polycorn_flows_reset_total",
    ];
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.contains("_bucket{"))
        .filter(|l| KEEP.iter().any(|k| l.starts_with(k)))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

fn out_dir_for(args: &BenchArgs) -> PathBuf {
    args.ride
        .out
        .clone()
        .unwrap_or_else(|| ride_dir("bench", &args.ride))
}

/// The default output directory of rides of `kind` (`bench`, `sim`, `validate`):
/// `results/<kind>-<preset>-r<route>-t<trip>-<quick|full>`, or on recorded traces
/// `results/<kind>-traces-<quick|full>`.
pub(crate) fn ride_dir(kind: &str, ride: &RideArgs) -> PathBuf {
    let mode = if ride.quick { "quick" } else { "full" };
    if !ride.traces.is_empty() {
        return PathBuf::from(format!("results/{kind}-traces-{mode}"));
    }
    let trip = &ride.trip;
    PathBuf::from(format!(
        "results/{kind}-{}-r{}-t{}-{mode}",
        trip.preset, trip.route_seed, trip.trip_seed
    ))
}

#[cfg(test)]
mod tests;
