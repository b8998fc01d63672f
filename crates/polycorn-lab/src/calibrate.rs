//! `polycorn testbed calibrate`: bulk TCP downloads over each emulated carrier of a trip preset,
//! with every measurable statistic of DESIGN §6 printed beside its published value.
//!
//! ## What one run does
//! For each congestion control in `--cc`, a fresh testbed is built and the emulator plays the
//! preset's trip in-process (`models::from_trip`). One bulk TCP download per carrier runs
//! simultaneously: the sender in the proxy namespace, bound to `10.100.i.2`, with the congestion
//! control set per socket; the receiver in the relay namespace on `10.100.i.1`. A sampler thread
//! in the proxy namespace runs `ss -tinH` every `--sample-ms` and `nstat -asz` every second.
//! The testbed is always removed (a guard; Ctrl-C is caught — a second Ctrl-C exits at once).
//!
//! ## Which part of the trip
//! The trip starts at a standstill; the first ~140 s are acceleration below 250 km/h. By default
//! the emulated trip is the preset's trip *from the first 10 ms step above 250 km/h*, for
//! `--minutes` (so no acceleration is emulated at all), and every statistic uses only samples
//! whose trip time has the train above 250 km/h (the braking before the next station is cut
//! out) and that are at least `--warmup-secs` after the emulator started (slow start).
//!
//! ## Several trips
//! With `--trips N` the same is done for trips `--trip-seed` … `--trip-seed + N − 1` of the
//! route, one after the other, and every statistic is computed over all trips' samples
//! together (quartiles over every trip's windows, shares over every trip's counts, medians over
//! every trip's leading runs), not averaged over per-trip values: the published statistics come
//! from many rides, and one trip's window holds only a few independent values of the
//! capacity's slow component. Each trip's raw samples and its own table go to `trip-<seed>/`.
//!
//! With `--all-stretches` each trip contributes one run per stretch above 250 km/h (a route
//! with a slow-down in the middle has two), each emulated from the stretch's first moment at
//! speed for up to `--minutes` and never past its end; their samples pool the same way and go
//! to `trip-<seed>-stretch-<k>/`. The whole route at speed is measured, not only its first
//! stretch, and no time is spent emulating the slow-downs.
//!
//! ## The trip model alone
//! `--model-only` plans the same trips and stretches but builds no testbed and runs no TCP: it
//! prints only the "trip model" column (the windows' capacity, idle RTT, CT/RT and ratios, and
//! the handover and location statistics) in seconds, without root. It is for fitting a
//! preset's parameters; the TCP-level rows are judged only by a measured run.
//!
//! ## Definitions (all measured, none assumed)
//! * **Throughput**: receiver goodput (bytes returned by `read`) in 0.2 s bins; quartiles over
//!   1 s windows whose five bins are all valid.
//! * **RTT**: the sender's smoothed RTT (`ss` `rtt:` field) in samples where `bytes_acked` grew
//!   since the previous sample of that flow (a fresh ACK, so an RTT estimate that is not stale
//!   during an outage).
//! * **CT/RT**: every 0.2 s, CT = goodput of [t−0.2 s, t], RT = mean goodput of
//!   [t−1.2 s, t−0.2 s]; a ratio outside [0.5, 2] counts. RT = 0 with CT > 0 counts as > 2;
//!   both zero is undefined and skipped.
//! * **Throughput ratio A/B**: simultaneous 1 s windows; A = 0 < B counts as < 0.5, B = 0 < A
//!   as > 2, both zero is skipped.
//! * **RTT ratio A/B and RTT leading time**: time-aligned `ss` samples (both flows in the same
//!   `ss` call), each flow's current smoothed RTT. A leading run is a maximal sequence of
//!   consecutive samples in which the same carrier has the lower RTT (ties continue the run);
//!   its length is the time from its first sample to the first sample of the next run. Runs cut
//!   by the start or end of the valid period are dropped.
//! * **RTO share (approximation)**: the paper counts packets that experienced an RTO. The
//!   kernel counts RTO timer expiries per namespace (`TcpExtTCPTimeouts`, one retransmission
//!   each), so the primary value is TCPTimeouts / TcpOutSegs of the proxy namespace (both
//!   flows together; data segments dominate OutSegs), between the first and last 1 Hz `nstat`
//!   snapshot in the valid period. A broader value adds `TcpExtTCPSlowStartRetrans` (segments
//!   retransmitted in the loss state an RTO starts). Per carrier, RTO *episodes* are counted
//!   from `ss`: an episode starts when `backoff` leaves 0 and ends when it returns to 0; an
//!   episode whose backoff reached ≥ 2 is a packet that hit more than one RTO (paper: 24%).
//!   Episodes shorter than the sampling period can be missed, so the per-carrier value is a
//!   lower bound.
//!
//! Handover interval and failure share are trip-model statistics (`carrier_stats()` over
//! `--model-trips` trips of the same route), not TCP measurements; so is location
//! repeatability (`Trip::location_means`: per location on a 500 m grid, each trip's mean
//! capacity within ±1 km; p75/p25 over the trips with at least four, median over locations —
//! the paper's Fig. 2a statistic, there on TCP throughput).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use nix::sys::socket::{self, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn};
use polycorn_emu::forward::{DirStats, EmuError, Emulator};
use polycorn_emu::models;
use polycorn_emu::netns::{self, InNamespace};
use polycorn_emu::testbed::{self, TestbedSpec};
use polycorn_link::link::QueueLimit;
use polycorn_link::trip::{quantile, quartiles, Outcome, Trip, TripConfig, STEP_MS};
use serde_json::{json, Value};

use crate::common::HSR_SPEED_MPS;
use crate::tripgen::TripArgs;

/// Options of `polycorn testbed calibrate`.
#[derive(Args, Debug, Clone)]
pub struct CalibrateArgs {
    /// The trip to calibrate (preset, seeds, interruption source).
    #[command(flatten)]
    pub trip: TripArgs,
    /// Minutes of the trip to emulate (wall time per congestion control).
    #[arg(long, default_value_t = 5.0)]
    pub minutes: f64,
    /// Congestion controls of the senders, comma-separated; one full run each.
    #[arg(long, default_value = "bbr,cubic")]
    pub cc: String,
    /// Testbed name (namespace prefix); built and removed for every run.
    #[arg(long, default_value = "pccal")]
    pub name: String,
    /// Output directory [default: results/calibrate-<preset>-<route>-<trip>].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Droptail queue per path and direction, bytes [default: each carrier's time-sized queue,
    /// the preset's `queue_ms` of its median capacity].
    #[arg(long)]
    pub queue_bytes: Option<u64>,
    /// Seconds after the start excluded from statistics (connection setup, slow start).
    #[arg(long, default_value_t = 3.0)]
    pub warmup_secs: f64,
    /// Period of `ss` samples of the senders, ms (50-100 recommended).
    #[arg(long, default_value_t = 50)]
    pub sample_ms: u64,
    /// Trips of the same route for the trip-model handover statistics.
    #[arg(long, default_value_t = 8)]
    pub model_trips: u64,
    /// Trips to measure one after the other (trip seeds `--trip-seed`, +1, …), each with every
    /// congestion control; the statistics pool all trips' samples, as the published ones
    /// come from many rides. Raw samples and a table per trip go to `trip-<seed>/`.
    #[arg(long, default_value_t = 1)]
    pub trips: u64,
    /// Emulate the trip from its very start (standstill) instead of from 250 km/h.
    #[arg(long, conflicts_with = "all_stretches")]
    pub from_start: bool,
    /// Measure every stretch of each trip above 250 km/h, each emulated on its own from its
    /// first moment above 250 km/h for up to `--minutes`, instead of the first stretch only:
    /// the whole route at speed, without emulating the slow-downs between stretches.
    #[arg(long)]
    pub all_stretches: bool,
    /// Run the congestion controls at the same time, each in its own testbed
    /// (`<name><k>`, ports `port + 100·k`): the wall time of one run for all of them.
    #[arg(long)]
    pub parallel: bool,
    /// First TCP port; carrier i uses port + i.
    #[arg(long, default_value_t = 5400)]
    pub port: u16,
    /// Only the trip model: no testbed, no TCP and no root. The same trips and stretches are
    /// planned and the "trip model" column computed over them (capacity, idle RTT, ratios,
    /// handover statistics, location repeatability) in seconds instead of hours; for fitting a
    /// preset's parameters before a measured run, which alone judges the TCP-level rows.
    #[arg(long, conflicts_with = "parallel")]
    pub model_only: bool,
}

/// Receiver goodput bin, ms (the paper's Δt).
const BIN_MS: u64 = 200;
/// Bins per 1 s window.
const BINS_PER_S: usize = (1000 / BIN_MS) as usize;
/// `nstat` snapshot period, ms.
const NSTAT_MS: u64 = 1000;
/// Sender write size, bytes.
const WRITE_BYTES: usize = 128 * 1024;
/// Socket timeouts, so every thread sees the stop flag within this.
const IO_TIMEOUT: Duration = Duration::from_millis(200);
/// Counters kept from `nstat`.
const NSTAT_KEYS: [&str; 9] = [
    "TcpOutSegs",
    "TcpRetransSegs",
    "TcpExtTCPTimeouts",
    "TcpExtTCPSlowStartRetrans",
    "TcpExtTCPFastRetrans",
    "TcpExtTCPLossProbes",
    "TcpExtTCPSpuriousRTOs",
    "TcpExtTCPLostRetransmit",
    "TcpExtTCPSackRecovery",
];

/// Published values, DESIGN §6 (`papers/004` §2): carrier A, carrier B.
mod published {
    pub const TPUT_MBPS: [[f64; 3]; 2] = [[2.56, 6.48, 12.42], [4.60, 10.67, 19.73]];
    pub const RTT_MS: [[f64; 3]; 2] = [[123.0, 185.0, 315.0], [147.0, 191.0, 348.0]];
    pub const CT_RT_OUTSIDE_PCT: [f64; 2] = [26.4, 22.6];
    pub const RTO_PCT: f64 = 1.8;
    pub const RTO_REPEATED_PCT: f64 = 24.0;
    pub const TPUT_RATIO_PCT: (f64, f64) = (39.2, 37.0);
    pub const RTT_RATIO_PCT: (f64, f64) = (16.9, 23.2);
    pub const RTT_LEADING_MS: [f64; 2] = [457.0, 632.0];
    pub const HO_INTERVAL_S: [f64; 2] = [10.7, 7.6];
    pub const HO_FAILURE_PCT: [f64; 2] = [6.22, 5.47];
    pub const CELLS_WITH_FAILURE_PCT: [f64; 2] = [47.0, 40.0];
    /// Per location (±1 km), p75/p25 of the trips' mean throughput: median over locations.
    pub const LOCATION_P75_P25: [f64; 2] = [3.21, 3.24];
}

/// A value row passes within this fraction of the published value …
const VALUE_TOLERANCE: f64 = 0.25;
/// … and a share row within this many percentage points of it.
const SHARE_TOLERANCE_POINTS: f64 = 5.0;

/// The location-repeatability statistic: half-width of the window around a location, m …
const LOCATION_HALF_WINDOW_M: f64 = 1000.0;
/// … and the spacing of the locations, m.
const LOCATION_GRID_M: f64 = 500.0;
/// Locations need this many trips through them at speed for a p75/p25.
const LOCATION_MIN_TRIPS: usize = 4;

// ----- entry point ---------------------------------------------------------------------------

/// Run the calibration.
pub fn run(args: &CalibrateArgs) -> Result<()> {
    let ccs = check_args(args)?;
    if args.model_only {
        return run_model_only(args);
    }
    preflight()?;
    let runs: Vec<CalibrateArgs> = (0..ccs.len())
        .map(|k| run_args(args, k))
        .collect::<Result<_>>()?;
    let existing = netns::list_namespaces()?;
    for a in &runs {
        let probe = TestbedSpec {
            name: a.name.clone(),
            paths: 1,
        };
        if testbed::ROLES
            .iter()
            .any(|r| existing.contains(&probe.ns(r)))
            || testbed::read_state(&a.name)?.is_some()
        {
            bail!(
                "testbed `{0}` (or a namespace of it) already exists; run `polycorn testbed down --name {0}` first, or pass another --name",
                a.name
            );
        }
    }
    let (cfg, source) = args.trip.config()?;
    eprintln!(
        "successful-handover interruptions: {source}; packets during them: {}",
        args.trip.handover_interruption.name()
    );
    let model_id = crate::tripgen::trip_model_id(&cfg)?;
    let rides = plan_all(args, &cfg)?;
    let first = &rides[0];
    let n = first.trip.paths.len();
    let queue_desc = match args.queue_bytes {
        Some(b) => format!("{b} B"),
        None => first
            .trip
            .paths
            .iter()
            .enumerate()
            .map(|(i, p)| match models::trip_queue(&first.trip, i) {
                QueueLimit::Bytes(b) => format!("{} {b} B", p.name),
                QueueLimit::Packets(n) => format!("{} {n} packets", p.name),
            })
            .collect::<Vec<_>>()
            .join(", "),
    };
    let out_dir = out_dir(args);
    fs::create_dir_all(&out_dir).with_context(|| format!("create {}", out_dir.display()))?;
    for r in &rides {
        eprintln!(
            "trip `{}` route {} {}: emulating {:.1} s from trip time {:.1} s ({:.1} s of it above 250 km/h after the warm-up); {} carriers; queue {}; output {}",
            args.trip.preset,
            args.trip.route_seed,
            r.label(),
            r.run_ms as f64 / 1000.0,
            r.offset_ms as f64 / 1000.0,
            r.moving_s,
            n,
            queue_desc,
            r.dir(&out_dir, rides.len()).display()
        );
    }
    let model = model_stats(args)?;
    let interrupted = crate::testbed_cmd::stop_on_signals(
        "calibrate",
        runs.iter().map(|a| a.name.clone()).collect(),
    )?;
    let names: Vec<String> = first.trip.paths.iter().map(|p| p.name.clone()).collect();
    // Per congestion control, one entry per trip.
    let mut per_cc: Vec<Vec<RunSamples>> = vec![Vec::new(); ccs.len()];
    let mut wins = Vec::new();
    // A trip that fails after others completed ends the run, but the completed trips' table is
    // still written (marked partial) before the error is returned.
    let mut failed: Option<anyhow::Error> = None;
    for (k, ride) in rides.iter().enumerate() {
        if interrupted.load(Ordering::Relaxed) {
            failed = Some(anyhow!("interrupted before {}", ride.label()));
            break;
        }
        if rides.len() > 1 {
            eprintln!("run {} of {}: {}", k + 1, rides.len(), ride.label());
        }
        let raws = match measure_all(args, &runs, &ccs, ride, &interrupted) {
            Ok(r) => r,
            Err(e) if k > 0 => {
                failed = Some(e.context(ride.label()));
                break;
            }
            Err(e) => return Err(e),
        };
        let dir = ride.dir(&out_dir, rides.len());
        fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        let mut own = Vec::new();
        for ((cc, raw), pooled) in ccs.iter().zip(&raws).zip(&mut per_cc) {
            write_raw(&dir, raw, &ride.mask)?;
            let s = samples(raw, &ride.mask, n);
            let res = summarise(&[&s], n);
            eprintln!(
                "[{cc}] {} done: {}",
                ride.label(),
                res.carriers
                    .iter()
                    .zip(&names)
                    .map(|(c, p)| format!(
                        "{p} median {:.2} Mbit/s, median RTT {:.0} ms",
                        c.tput_mbps[1], c.rtt_ms[1]
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            own.push(res);
            pooled.push(s);
        }
        let win = window_samples(&ride.trip, &ride.mask);
        if rides.len() > 1 {
            // Each trip's own table beside its raw samples, to see the spread between trips.
            let rows = table(
                &names,
                &own,
                &model,
                &window_stats(std::slice::from_ref(&win)),
            );
            let own_json = json!({
                "trip_seed": ride.seed,
                "stretch": ride.stretch,
                "offset_ms": ride.offset_ms,
                "run_ms": ride.run_ms,
                "measured_s": ride.moving_s,
                "ccs": ccs,
                "rows": rows.iter().map(|r| r.to_json(&ccs)).collect::<Vec<_>>(),
            });
            for (file, text) in [
                ("table.txt", render(&rows, &ccs)),
                ("table.json", serde_json::to_string_pretty(&own_json)?),
            ] {
                fs::write(dir.join(file), text)
                    .with_context(|| format!("write {}", dir.join(file).display()))?;
            }
        }
        wins.push(win);
    }
    if wins.is_empty() {
        return Err(failed.unwrap_or_else(|| anyhow!("no trip was measured")));
    }
    let results: Vec<RunResult> = per_cc
        .iter()
        .map(|v| summarise(&v.iter().collect::<Vec<_>>(), n))
        .collect();
    let rows = table(&names, &results, &model, &window_stats(&wins));
    let text = render(&rows, &ccs);
    let planned = rides.len();
    let rides = &rides[..wins.len()];
    let run_ms: u64 = rides.iter().map(|r| r.run_ms).sum();
    let moving_s: f64 = rides.iter().map(|r| r.moving_s).sum();
    if failed.is_some() {
        println!(
            "PARTIAL: {} of {planned} runs completed; the table pools those only",
            rides.len()
        );
    }
    if rides.len() == 1 {
        println!(
            "calibration of `{}` (trip model {model_id}; route {}, {}): {:.1} s emulated from trip time {:.1} s, {:.1} s above 250 km/h measured; queue {}",
            args.trip.preset,
            args.trip.route_seed,
            first.label(),
            run_ms as f64 / 1000.0,
            first.offset_ms as f64 / 1000.0,
            moving_s,
            queue_desc
        );
    } else {
        println!(
            "calibration of `{}` (trip model {model_id}; route {}, trips {}-{}{}, samples pooled): {:.1} s emulated, {:.1} s above 250 km/h measured; queue {}",
            args.trip.preset,
            args.trip.route_seed,
            first.seed,
            rides[rides.len() - 1].seed,
            if args.all_stretches {
                format!(", {} stretches at speed", rides.len())
            } else {
                String::new()
            },
            run_ms as f64 / 1000.0,
            moving_s,
            queue_desc
        );
    }
    print!("{text}");
    let summary = json!({
        "polycorn_version": crate::VERSION,
        "kernel": crate::common::kernel(),
        "preset": args.trip.preset,
        "trip_model_id": model_id,
        "route_seed": args.trip.route_seed,
        "trip_seed": first.seed,
        "complete": failed.is_none(),
        "trips_planned": args.trips,
        "all_stretches": args.all_stretches,
        "runs_planned": planned,
        "trips": rides.iter().map(Ride::to_json).collect::<Vec<_>>(),
        "offset_ms": first.offset_ms,
        "run_ms": run_ms,
        "measured_s": moving_s,
        "warmup_secs": args.warmup_secs,
        "queue": queue_desc,
        "sample_ms": args.sample_ms,
        "model_trips": args.model_trips,
        "ccs": ccs,
        "rows": rows.iter().map(|r| r.to_json(&ccs)).collect::<Vec<_>>(),
    });
    write_tables(&out_dir, &summary, &rows, &ccs, &text)?;
    println!("raw samples and the table: {}", out_dir.display());
    match failed {
        Some(e) => Err(e.context(format!(
            "calibration stopped after {} of {planned} runs (their table is in {})",
            rides.len(),
            out_dir.display()
        ))),
        None => Ok(()),
    }
}

/// `--out`, or `results/calibrate-<preset>-<route>-<trip>[-model]`.
fn out_dir(args: &CalibrateArgs) -> PathBuf {
    args.out.clone().unwrap_or_else(|| {
        PathBuf::from(format!(
            "results/calibrate-{}-{}-{}{}",
            args.trip.preset,
            args.trip.route_seed,
            args.trip.trip_seed,
            if args.model_only { "-model" } else { "" }
        ))
    })
}

/// Every trip (and stretch) a run would measure, planned from the preset alone.
fn plan_all(args: &CalibrateArgs, cfg: &TripConfig) -> Result<Vec<Ride>> {
    let want_ms = (args.minutes * 60_000.0).round() as u64;
    let mut rides = Vec::new();
    for k in 0..args.trips {
        let mut c = cfg.clone();
        c.trip_seed = args.trip.trip_seed + k;
        rides.extend(plan_rides(args, &c, want_ms)?);
    }
    Ok(rides)
}

/// `--model-only`: the "trip model" column over the planned windows, without a testbed.
fn run_model_only(args: &CalibrateArgs) -> Result<()> {
    let (cfg, _) = args.trip.config()?;
    let model_id = crate::tripgen::trip_model_id(&cfg)?;
    let rides = plan_all(args, &cfg)?;
    let names: Vec<String> = rides[0].trip.paths.iter().map(|p| p.name.clone()).collect();
    let wins: Vec<WindowSamples> = rides
        .iter()
        .map(|r| window_samples(&r.trip, &r.mask))
        .collect();
    let model = model_stats(args)?;
    let rows = table(&names, &[], &model, &window_stats(&wins));
    let moving_s: f64 = rides.iter().map(|r| r.moving_s).sum();
    let mut text = render(&rows, &[]);
    text.push_str(
        "model only: no TCP was run; the published throughput and RTT rows are TCP-level, the (x) values are the emulated capacity and idle RTT the senders would get\n",
    );
    println!(
        "trip model of `{}` (trip model {model_id}; route {}, trips {}-{}{}): {:.1} s above 250 km/h after the warm-up",
        args.trip.preset,
        args.trip.route_seed,
        args.trip.trip_seed,
        args.trip.trip_seed + args.trips - 1,
        if args.all_stretches {
            format!(", {} stretches at speed", rides.len())
        } else {
            String::new()
        },
        moving_s,
    );
    print!("{text}");
    let out_dir = out_dir(args);
    fs::create_dir_all(&out_dir).with_context(|| format!("create {}", out_dir.display()))?;
    let summary = json!({
        "polycorn_version": crate::VERSION,
        "preset": args.trip.preset,
        "trip_model_id": model_id,
        "model_only": true,
        "route_seed": args.trip.route_seed,
        "trip_seed": args.trip.trip_seed,
        "trips_planned": args.trips,
        "all_stretches": args.all_stretches,
        "trips": rides.iter().map(Ride::to_json).collect::<Vec<_>>(),
        "measured_s": moving_s,
        "warmup_secs": args.warmup_secs,
        "model_trips": args.model_trips,
        "ccs": [],
        "rows": rows.iter().map(|r| r.to_json(&[])).collect::<Vec<_>>(),
    });
    write_tables(&out_dir, &summary, &rows, &[], &text)?;
    println!("the table: {}", out_dir.display());
    Ok(())
}

/// The pooled table as `table.json` (`summary`), `table.csv` and `table.txt` (`text`).
fn write_tables(
    dir: &Path,
    summary: &Value,
    rows: &[Row],
    ccs: &[String],
    text: &str,
) -> Result<()> {
    for (file, body) in [
        ("table.json", serde_json::to_string_pretty(summary)?),
        ("table.csv", table_csv(rows, ccs)),
        ("table.txt", text.to_string()),
    ] {
        fs::write(dir.join(file), body)
            .with_context(|| format!("write {}", dir.join(file).display()))?;
    }
    Ok(())
}

/// One measured trip: the emulated window and which of its times count.
struct Ride {
    seed: u64,
    /// Which stretch above 250 km/h (1 = the first); `None` unless `--all-stretches`.
    stretch: Option<usize>,
    trip: Trip,
    mask: TimeMask,
    offset_ms: u64,
    run_ms: u64,
    /// Seconds above 250 km/h after the warm-up.
    moving_s: f64,
}

impl Ride {
    /// Where this run's raw samples go: the output directory itself for a single run.
    fn dir(&self, out: &Path, runs: usize) -> PathBuf {
        match (runs, self.stretch) {
            (1, _) => out.to_path_buf(),
            (_, None) => out.join(format!("trip-{}", self.seed)),
            (_, Some(k)) => out.join(format!("trip-{}-stretch-{k}", self.seed)),
        }
    }
    /// What the pooled table records of this run.
    fn to_json(&self) -> Value {
        json!({
            "trip_seed": self.seed,
            "stretch": self.stretch,
            "offset_ms": self.offset_ms,
            "run_ms": self.run_ms,
            "measured_s": self.moving_s,
        })
    }
    fn label(&self) -> String {
        match self.stretch {
            None => format!("trip {}", self.seed),
            Some(k) => format!("trip {} stretch {k}", self.seed),
        }
    }
}

/// Maximal runs of 10 ms steps with the train above 250 km/h, as `(from_ms, to_ms)`.
fn stretches_at_speed(speed_mps: &[f64]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut start = None;
    for (s, v) in speed_mps.iter().enumerate() {
        match (start, *v > HSR_SPEED_MPS) {
            (None, true) => start = Some(s),
            (Some(a), false) => {
                out.push((a as u64 * STEP_MS, s as u64 * STEP_MS));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(a) = start {
        out.push((a as u64 * STEP_MS, speed_mps.len() as u64 * STEP_MS));
    }
    out
}

/// The parts of trip `cfg` to emulate. By default one: from the first moment above 250 km/h
/// (or the start with `--from-start`) for `want_ms`, clipped to the trip's end. With
/// `--all-stretches` one per stretch above 250 km/h, each for `want_ms` at most and never past
/// the stretch's end; stretches too short to measure after the warm-up are skipped with a note.
fn plan_rides(args: &CalibrateArgs, cfg: &TripConfig, want_ms: u64) -> Result<Vec<Ride>> {
    let full = Trip::generate(cfg)?;
    let stretches = stretches_at_speed(&full.speed_mps);
    if args.all_stretches {
        let mut rides = Vec::new();
        for (k, (a, b)) in stretches.iter().enumerate() {
            let run_ms = want_ms.min(b - a);
            if (run_ms as f64) < min_run_ms(args) {
                eprintln!(
                    "note: trip {} stretch {} is only {:.1} s above 250 km/h; skipped",
                    cfg.trip_seed,
                    k + 1,
                    (b - a) as f64 / 1000.0
                );
                continue;
            }
            rides.push(ride(args, &full, Some(k + 1), *a, run_ms));
        }
        if rides.is_empty() {
            bail!(
                "trip {} of the `{}` preset has no stretch above 250 km/h long enough to measure after a {:.1} s warm-up",
                cfg.trip_seed,
                args.trip.preset,
                args.warmup_secs
            );
        }
        return Ok(rides);
    }
    let offset_ms = if args.from_start {
        0
    } else {
        stretches.first().map(|s| s.0).with_context(|| {
            format!(
                "trip {} of the `{}` preset never exceeds 250 km/h; use --from-start",
                cfg.trip_seed, args.trip.preset
            )
        })?
    };
    let left_ms = full.duration_ms.saturating_sub(offset_ms);
    let run_ms = want_ms.min(left_ms);
    if run_ms < want_ms {
        eprintln!(
            "note: trip {} has only {:.1} s left after {:.1} s; running {:.1} s instead of {:.1} s",
            cfg.trip_seed,
            left_ms as f64 / 1000.0,
            offset_ms as f64 / 1000.0,
            run_ms as f64 / 1000.0,
            want_ms as f64 / 1000.0
        );
    }
    if (run_ms as f64) < min_run_ms(args) {
        bail!(
            "trip {}: only {:.1} s to measure after a {:.1} s warm-up; raise --minutes",
            cfg.trip_seed,
            run_ms as f64 / 1000.0,
            args.warmup_secs
        );
    }
    Ok(vec![ride(args, &full, None, offset_ms, run_ms)])
}

/// The shortest run worth measuring: the warm-up and 5 s more.
fn min_run_ms(args: &CalibrateArgs) -> f64 {
    args.warmup_secs * 1000.0 + 5_000.0
}

/// `run_ms` of `full` from `offset_ms`, with its time mask.
fn ride(
    args: &CalibrateArgs,
    full: &Trip,
    stretch: Option<usize>,
    offset_ms: u64,
    run_ms: u64,
) -> Ride {
    // A little slack so the link does not run dry while the flows are being stopped.
    let trip = full.window(offset_ms, run_ms + 5_000);
    let mask = TimeMask {
        speed_mps: trip.speed_mps.clone(),
        warmup_ms: (args.warmup_secs * 1000.0) as u64,
        end_ms: run_ms,
    };
    let moving_s = (0..run_ms / STEP_MS)
        .filter(|s| mask.valid_ms(s * STEP_MS))
        .count() as f64
        * STEP_MS as f64
        / 1000.0;
    Ride {
        seed: full.config.trip_seed,
        stretch,
        trip,
        mask,
        offset_ms,
        run_ms,
        moving_s,
    }
}

/// One trip with every congestion control: at the same time (`--parallel`) or one after the
/// other, each in its own fresh testbed.
fn measure_all(
    args: &CalibrateArgs,
    runs: &[CalibrateArgs],
    ccs: &[String],
    ride: &Ride,
    interrupted: &Arc<AtomicBool>,
) -> Result<Vec<RawRun>> {
    let mut raws = Vec::new();
    if args.parallel {
        let done: Vec<Result<RawRun>> = thread::scope(|scope| {
            let handles: Vec<_> = ccs
                .iter()
                .zip(runs)
                .map(|(cc, a)| {
                    eprintln!("[{cc}] building testbed `{}`", a.name);
                    scope.spawn(move || {
                        measure(a, &ride.trip, cc, ride.run_ms, interrupted)
                            .with_context(|| format!("calibration run with {cc}"))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow!("a calibration thread panicked")))
                })
                .collect()
        });
        for r in done {
            raws.push(r?);
        }
    } else {
        for (cc, a) in ccs.iter().zip(runs) {
            eprintln!("[{cc}] building testbed `{}`", a.name);
            raws.push(
                measure(a, &ride.trip, cc, ride.run_ms, interrupted)
                    .with_context(|| format!("calibration run with {cc}"))?,
            );
        }
    }
    Ok(raws)
}

/// The testbed name and ports of run `k`: all runs share `--name`/`--port` one after the
/// other, or get `<name><k>` and `port + 100·k` with `--parallel`.
fn run_args(args: &CalibrateArgs, k: usize) -> Result<CalibrateArgs> {
    let mut a = args.clone();
    if args.parallel {
        a.name = format!("{}{k}", args.name);
        a.port = u16::try_from(usize::from(args.port) + 100 * k)
            .ok()
            .filter(|p| p.checked_add(8).is_some())
            .with_context(|| format!("--port {} leaves no room for run {k}", args.port))?;
    }
    Ok(a)
}

fn check_args(args: &CalibrateArgs) -> Result<Vec<String>> {
    if !(args.minutes.is_finite() && args.minutes > 0.0 && args.minutes <= 120.0) {
        bail!("--minutes must be in (0, 120], got {}", args.minutes);
    }
    if !(args.warmup_secs.is_finite() && args.warmup_secs >= 0.0) {
        bail!("--warmup-secs must be >= 0, got {}", args.warmup_secs);
    }
    if !(1..=50).contains(&args.trips) {
        bail!("--trips must be in 1..=50, got {}", args.trips);
    }
    if args.trip.trip_seed.checked_add(args.trips).is_none() {
        bail!(
            "--trip-seed {} leaves no room for {} trips",
            args.trip.trip_seed,
            args.trips
        );
    }
    if !(20..=1000).contains(&args.sample_ms) {
        bail!("--sample-ms must be in 20..=1000, got {}", args.sample_ms);
    }
    if !(1..=1000).contains(&args.model_trips) {
        bail!(
            "--model-trips must be in 1..=1000, got {}",
            args.model_trips
        );
    }
    if args.queue_bytes.is_some_and(|q| q < 3000) {
        bail!(
            "--queue-bytes must be at least 3000, got {}",
            args.queue_bytes.unwrap_or_default()
        );
    }
    let ccs: Vec<String> = args
        .cc
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if ccs.is_empty() || ccs.len() > 8 {
        bail!("--cc must name 1 to 8 congestion controls, e.g. bbr,cubic");
    }
    for cc in &ccs {
        if !cc.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') || cc.len() > 15 {
            bail!("--cc: `{cc}` is not a congestion control name");
        }
    }
    TripConfig::preset(&args.trip.preset, args.trip.route_seed, args.trip.trip_seed)?;
    for k in 0..ccs.len() {
        TestbedSpec {
            name: run_args(args, k)?.name,
            paths: 1,
        }
        .validate()?;
    }
    Ok(ccs)
}

/// Root, the tools, and no leftover testbed — checked before anything is built.
fn preflight() -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("`polycorn testbed calibrate` needs root (network namespaces, TUN devices); run it with sudo");
    }
    for (tool, arg, package) in [
        ("ip", "-V", "iproute2"),
        ("ss", "-V", "iproute2"),
        ("nstat", "-V", "iproute2"),
    ] {
        match Command::new(tool).arg(arg).output() {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {
                bail!("`{tool}` not found; install it with `apt-get install {package}`")
            }
            Err(e) => bail!("cannot run `{tool}`: {e}"),
        }
    }
    Ok(())
}

// ----- trip window and time mask -------------------------------------------------------------

/// Which emulator times count: after the warm-up, before the end, train above 250 km/h.
#[derive(Debug, Clone)]
struct TimeMask {
    speed_mps: Vec<f64>,
    warmup_ms: u64,
    end_ms: u64,
}

impl TimeMask {
    fn valid_ms(&self, t_ms: u64) -> bool {
        t_ms >= self.warmup_ms
            && t_ms < self.end_ms
            && self
                .speed_mps
                .get((t_ms / STEP_MS) as usize)
                .is_some_and(|v| *v > HSR_SPEED_MPS)
    }
    fn valid_s(&self, t_s: f64) -> bool {
        t_s >= 0.0 && self.valid_ms((t_s * 1000.0) as u64)
    }
    /// Every 10 ms step of `[a_ms, b_ms)` is valid.
    fn valid_span(&self, a_ms: u64, b_ms: u64) -> bool {
        b_ms <= self.end_ms
            && (a_ms..b_ms)
                .step_by(STEP_MS as usize)
                .all(|t| self.valid_ms(t))
    }
    fn bin_valid(&self, j: usize) -> bool {
        self.valid_span(j as u64 * BIN_MS, (j as u64 + 1) * BIN_MS)
    }
}

// ----- one measured run ----------------------------------------------------------------------

/// One `ss` view of a sender socket.
#[derive(Clone, Debug, Default, PartialEq)]
struct SsInfo {
    cc: String,
    srtt_ms: f64,
    rttvar_ms: f64,
    rto_ms: f64,
    backoff: u32,
    retrans_now: u32,
    retrans_total: u64,
    cwnd: u64,
    ssthresh: Option<u64>,
    bytes_acked: u64,
    bytes_retrans: u64,
    data_segs_out: u64,
    lost: u64,
    unacked: u64,
    delivery_rate_bps: f64,
}

/// One `ss` call: time since the emulator started, and each carrier's sender (if seen).
#[derive(Clone, Debug)]
struct SsRow {
    t_s: f64,
    flows: Vec<Option<SsInfo>>,
}

/// One `nstat` snapshot of the proxy namespace.
#[derive(Clone, Debug)]
struct NstatRow {
    t_s: f64,
    counters: BTreeMap<String, u64>,
}

/// Everything one run recorded.
#[derive(Debug)]
struct RawRun {
    cc: String,
    /// Receiver goodput per 0.2 s bin since the emulator started, bytes, per carrier.
    bins: Vec<Vec<u64>>,
    ss: Vec<SsRow>,
    nstat: Vec<NstatRow>,
    nstat_before: BTreeMap<String, u64>,
    nstat_after: BTreeMap<String, u64>,
    sent_bytes: Vec<u64>,
    connect_s: Vec<f64>,
    emu: Vec<(DirStats, DirStats)>,
    cc_seen: bool,
}

type EmuHandle = JoinHandle<Result<Vec<(DirStats, DirStats)>, EmuError>>;
/// What the sampler thread recorded.
type Samples = (Vec<SsRow>, Vec<NstatRow>);

/// Owns a run's testbed and threads. Dropping it stops the flows, then the emulator, and
/// removes the testbed (by name; nothing else is touched).
struct Bed {
    name: String,
    flows_stop: Arc<AtomicBool>,
    emu_stop: Arc<AtomicBool>,
    receivers: Vec<JoinHandle<Result<Vec<u64>>>>,
    senders: Vec<JoinHandle<Result<u64>>>,
    sampler: Option<JoinHandle<Result<Samples>>>,
    emu: Option<EmuHandle>,
    removed: bool,
}

impl Bed {
    fn stop_flows(&mut self) {
        self.flows_stop.store(true, Ordering::Relaxed);
    }

    fn stop_emulator(&mut self) -> Option<Result<Vec<(DirStats, DirStats)>>> {
        self.emu_stop.store(true, Ordering::Relaxed);
        self.emu.take().map(|h| match h.join() {
            Ok(r) => r.map_err(anyhow::Error::from),
            Err(_) => Err(anyhow!("the emulator thread panicked")),
        })
    }

    fn remove(&mut self) -> Result<()> {
        self.stop_flows();
        for h in self.senders.drain(..) {
            let _ = h.join();
        }
        for h in self.receivers.drain(..) {
            let _ = h.join();
        }
        if let Some(h) = self.sampler.take() {
            let _ = h.join();
        }
        let _ = self.stop_emulator();
        self.removed = true;
        testbed::down(&self.name).with_context(|| {
            format!(
                "remove testbed `{0}`; run `polycorn testbed down --name {0}`",
                self.name
            )
        })
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        if !self.removed {
            if let Err(e) = self.remove() {
                eprintln!("error: {e:#}");
            }
        }
    }
}

fn join<T>(h: JoinHandle<Result<T>>, what: &str) -> Result<T> {
    h.join()
        .map_err(|_| anyhow!("the {what} thread panicked"))?
}

fn measure(
    args: &CalibrateArgs,
    trip: &Trip,
    cc: &str,
    run_ms: u64,
    interrupted: &Arc<AtomicBool>,
) -> Result<RawRun> {
    let n = trip.paths.len();
    let spec = TestbedSpec {
        name: args.name.clone(),
        paths: n,
    };
    let path_models = models::from_trip(trip, args.queue_bytes.map(QueueLimit::Bytes))?;
    testbed::up(&spec).with_context(|| format!("build testbed `{}`", spec.name))?;
    let mut bed = Bed {
        name: spec.name.clone(),
        flows_stop: Arc::new(AtomicBool::new(false)),
        emu_stop: Arc::new(AtomicBool::new(false)),
        receivers: Vec::new(),
        senders: Vec::new(),
        sampler: None,
        emu: None,
        removed: false,
    };
    let (relay, proxy) = (spec.ns("relay"), spec.ns("proxy"));
    let mut emu = Emulator::attach(&spec, &path_models, bed.emu_stop.clone())?;
    let t0 = Instant::now();
    bed.emu = Some(
        thread::Builder::new()
            .name("emulator".into())
            .spawn(move || emu.run())?,
    );
    let nstat_before = nstat_exec(&proxy)?;
    let totals: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    let bins_cap = (run_ms / BIN_MS) as usize + 50;
    let (ready_tx, ready_rx) = mpsc::channel::<(usize, Result<()>)>();
    for i in 0..n {
        let (ns, stop, ready, totals) = (
            relay.clone(),
            bed.flows_stop.clone(),
            ready_tx.clone(),
            totals.clone(),
        );
        let port = args.port + i as u16;
        bed.receivers.push(
            thread::Builder::new()
                .name(format!("recv{i}"))
                .spawn(move || receiver(&ns, i, port, &stop, t0, bins_cap, &totals[i], ready))?,
        );
    }
    drop(ready_tx);
    for _ in 0..n {
        let (i, r) = ready_rx
            .recv_timeout(Duration::from_secs(5))
            .context("a receiver did not start within 5 s")?;
        r.with_context(|| format!("receiver of path {i}"))?;
    }
    let connect_at: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    for i in 0..n {
        let (ns, stop, cc, connect_at) = (
            proxy.clone(),
            bed.flows_stop.clone(),
            cc.to_string(),
            connect_at.clone(),
        );
        let port = args.port + i as u16;
        bed.senders.push(
            thread::Builder::new()
                .name(format!("send{i}"))
                .spawn(move || sender(&ns, i, port, &cc, &stop, t0, &connect_at[i]))?,
        );
    }
    {
        let (ns, stop) = (proxy.clone(), bed.flows_stop.clone());
        let (period, port) = (Duration::from_millis(args.sample_ms), args.port);
        bed.sampler = Some(
            thread::Builder::new()
                .name("sampler".into())
                .spawn(move || sampler(&ns, n, port, period, &stop, t0))?,
        );
    }
    eprintln!(
        "[{cc}] {n} downloads running for {:.0} s (Ctrl-C stops and removes the testbed)",
        run_ms as f64 / 1000.0
    );
    let deadline = t0 + Duration::from_millis(run_ms);
    let mut next_report = t0 + Duration::from_secs(30);
    let mut last_totals = vec![0u64; n];
    while Instant::now() < deadline {
        if interrupted.load(Ordering::Relaxed) {
            // `bed` removes the testbed as this returns.
            bail!("interrupted; testbed `{}` removed", args.name);
        }
        if bed.emu.as_ref().is_some_and(|h| h.is_finished()) {
            return match bed.stop_emulator() {
                Some(Err(e)) => Err(e.context("the emulator stopped early")),
                _ => Err(anyhow!("the emulator stopped early")),
            };
        }
        if bed.sampler.as_ref().is_some_and(|h| h.is_finished()) {
            join(bed.sampler.take().expect("checked above"), "sampler")?;
            bail!("the sampler stopped early");
        }
        if let Some(i) = bed.senders.iter().position(|h| h.is_finished()) {
            let h = bed.senders.remove(i);
            join(h, "sender")?;
            bail!("sender {i} stopped early");
        }
        if Instant::now() >= next_report {
            let now: Vec<u64> = totals.iter().map(|t| t.load(Ordering::Relaxed)).collect();
            eprintln!(
                "[{cc}] t={:>4.0}s goodput over the last 30 s: {}",
                t0.elapsed().as_secs_f64(),
                now.iter()
                    .zip(&last_totals)
                    .zip(&trip.paths)
                    .map(|((a, b), p)| format!(
                        "{} {:.2} Mbit/s",
                        p.name,
                        (a - b) as f64 * 8.0 / 30e6
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            last_totals = now;
            next_report += Duration::from_secs(30);
        }
        thread::sleep(Duration::from_millis(100));
    }
    bed.stop_flows();
    let mut sent_bytes = Vec::new();
    for h in std::mem::take(&mut bed.senders) {
        sent_bytes.push(join(h, "sender")?);
    }
    let mut bins = Vec::new();
    for h in std::mem::take(&mut bed.receivers) {
        bins.push(join(h, "receiver")?);
    }
    let (ss, nstat) = join(bed.sampler.take().expect("started above"), "sampler")?;
    let nstat_after = nstat_exec(&proxy)?;
    let emu = bed
        .stop_emulator()
        .unwrap_or_else(|| Err(anyhow!("no emulator")))?;
    bed.remove()?;
    for (i, (up, down)) in emu.iter().enumerate() {
        eprintln!(
            "[{cc}] path{i} downlink: {} in, {} out, {} dropped by the model, {} TUN write failures; uplink: {} in, {} out, {} dropped",
            down.packets_in, down.packets_out, down.dropped, down.write_failures, up.packets_in, up.packets_out, up.dropped
        );
    }
    let cc_seen = ss
        .iter()
        .flat_map(|r| r.flows.iter().flatten())
        .any(|f| f.cc == cc);
    if !cc_seen {
        eprintln!("warning: `ss` never showed congestion control `{cc}` on the senders");
    }
    Ok(RawRun {
        cc: cc.to_string(),
        bins,
        ss,
        nstat,
        nstat_before,
        nstat_after,
        sent_bytes,
        connect_s: connect_at
            .iter()
            .map(|a| a.load(Ordering::Relaxed) as f64 / 1e6)
            .collect(),
        emu,
        cc_seen,
    })
}

fn path_addr(i: usize, host: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 100, i as u8, host)
}

/// Accept one connection on `10.100.i.1:port` in the relay namespace and count the bytes
/// received per 0.2 s bin since `t0`.
#[allow(clippy::too_many_arguments)]
fn receiver(
    ns: &str,
    i: usize,
    port: u16,
    stop: &AtomicBool,
    t0: Instant,
    bins_cap: usize,
    total: &AtomicU64,
    ready: mpsc::Sender<(usize, Result<()>)>,
) -> Result<Vec<u64>> {
    let listener = (|| -> Result<TcpListener> {
        let _inside = InNamespace::enter(ns)?;
        let l = TcpListener::bind(SocketAddrV4::new(path_addr(i, 1), port))
            .with_context(|| format!("bind {}:{port} in {ns}", path_addr(i, 1)))?;
        l.set_nonblocking(true)?;
        Ok(l)
    })();
    let listener = match listener {
        Ok(l) => {
            let _ = ready.send((i, Ok(())));
            l
        }
        Err(e) => {
            let msg = format!("{e:#}");
            let _ = ready.send((i, Err(e)));
            bail!(msg);
        }
    };
    let mut bins = vec![0u64; bins_cap];
    let mut stream = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if stop.load(Ordering::Relaxed) {
                    return Ok(bins);
                }
                thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e).context("accept"),
        }
    };
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    let mut buf = vec![0u8; 256 * 1024];
    while !stop.load(Ordering::Relaxed) {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => {
                let j = (t0.elapsed().as_millis() as u64 / BIN_MS) as usize;
                if j >= bins.len() {
                    bins.resize(j + 1, 0);
                }
                bins[j] += k as u64;
                total.fetch_add(k as u64, Ordering::Relaxed);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) if stop.load(Ordering::Relaxed) => break,
            Err(e) => return Err(e).context("read"),
        }
    }
    Ok(bins)
}

/// Connect from `10.100.i.2` in the proxy namespace with congestion control `cc` and send
/// until stopped. Returns the bytes handed to the socket.
fn sender(
    ns: &str,
    i: usize,
    port: u16,
    cc: &str,
    stop: &AtomicBool,
    t0: Instant,
    connect_at_us: &AtomicU64,
) -> Result<u64> {
    let mut stream = {
        let _inside = InNamespace::enter(ns)?;
        let fd = socket::socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .context("socket")?;
        socket::setsockopt(&fd, sockopt::TcpCongestion, &OsString::from(cc)).map_err(|e| {
            let avail = fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
                .unwrap_or_default();
            anyhow!(
                "congestion control `{cc}`: {e}; available: {} (others may need `modprobe tcp_{cc}`)",
                avail.trim()
            )
        })?;
        let local = path_addr(i, 2);
        socket::bind(
            fd.as_raw_fd(),
            &SockaddrIn::from(SocketAddrV4::new(local, 0)),
        )
        .with_context(|| format!("bind {local} in {ns}"))?;
        let stream = TcpStream::from(fd);
        // SO_SNDTIMEO also bounds a blocking connect, so the stop flag is seen while the SYN
        // is retried through an outage.
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        let peer = SockaddrIn::from(SocketAddrV4::new(path_addr(i, 1), port));
        loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(0);
            }
            match socket::connect(stream.as_raw_fd(), &peer) {
                Ok(()) | Err(nix::errno::Errno::EISCONN) => break,
                Err(
                    nix::errno::Errno::EINPROGRESS
                    | nix::errno::Errno::EALREADY
                    | nix::errno::Errno::EINTR
                    | nix::errno::Errno::EAGAIN,
                ) => {}
                Err(e) => {
                    return Err(anyhow!(
                        "connect {}:{port} from {local}: {e}",
                        path_addr(i, 1)
                    ))
                }
            }
        }
        stream
    };
    connect_at_us.store(t0.elapsed().as_micros() as u64, Ordering::Relaxed);
    let buf = vec![0x5au8; WRITE_BYTES];
    let mut sent = 0u64;
    while !stop.load(Ordering::Relaxed) {
        match stream.write(&buf) {
            Ok(k) => sent += k as u64,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            // The receiver may close first when both see the stop flag: not an error then.
            Err(_) if stop.load(Ordering::Relaxed) => break,
            Err(e) => return Err(e).context("write"),
        }
    }
    Ok(sent)
}

/// In the proxy namespace: `ss -tinH` every `period`, `nstat -asz` every second.
fn sampler(
    ns: &str,
    n: usize,
    port: u16,
    period: Duration,
    stop: &AtomicBool,
    t0: Instant,
) -> Result<Samples> {
    // Children inherit the network namespace of the thread that spawns them.
    let _inside = InNamespace::enter(ns)?;
    let (mut ss, mut nstat) = (Vec::new(), Vec::new());
    let mut next = Instant::now();
    let mut next_nstat = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let before = t0.elapsed().as_secs_f64();
        let out = Command::new("ss").arg("-tinH").output().context("run ss")?;
        let t_s = (before + t0.elapsed().as_secs_f64()) / 2.0;
        ss.push(SsRow {
            t_s,
            flows: parse_ss(&String::from_utf8_lossy(&out.stdout), n, port),
        });
        if Instant::now() >= next_nstat {
            let t_s = t0.elapsed().as_secs_f64();
            let out = Command::new("nstat")
                .arg("-asz")
                .output()
                .context("run nstat")?;
            nstat.push(NstatRow {
                t_s,
                counters: parse_nstat(&String::from_utf8_lossy(&out.stdout)),
            });
            next_nstat += Duration::from_millis(NSTAT_MS);
        }
        next += period;
        let now = Instant::now();
        if next > now {
            thread::sleep(next - now);
        } else {
            next = now;
        }
    }
    Ok((ss, nstat))
}

fn nstat_exec(ns: &str) -> Result<BTreeMap<String, u64>> {
    Ok(parse_nstat(&netns::exec_in(ns, "nstat", &["-asz"])?))
}

fn parse_nstat(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (k, v) = (it.next()?, it.next()?);
            NSTAT_KEYS
                .contains(&k)
                .then(|| v.parse().ok().map(|v| (k.to_string(), v)))
                .flatten()
        })
        .collect()
}

/// Sender sockets of carrier 0..n in `ss -tinH` output: local `10.100.i.2:*`, peer
/// `10.100.i.1:port+i`.
fn parse_ss(text: &str, n: usize, port: u16) -> Vec<Option<SsInfo>> {
    let mut flows = vec![None; n];
    let mut current: Option<usize> = None;
    for line in text.lines() {
        if line.starts_with(char::is_whitespace) {
            if let Some(i) = current.take() {
                flows[i] = Some(parse_ss_info(line));
            }
            continue;
        }
        current = None;
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 5 {
            continue;
        }
        let (local, peer) = (f[3], f[4]);
        for (i, slot) in flows.iter().enumerate() {
            if slot.is_none()
                && local.starts_with(&format!("{}:", path_addr(i, 2)))
                && peer == format!("{}:{}", path_addr(i, 1), port as usize + i)
            {
                current = Some(i);
            }
        }
    }
    flows
}

fn parse_ss_info(line: &str) -> SsInfo {
    let mut s = SsInfo::default();
    let toks: Vec<&str> = line.split_whitespace().collect();
    let num = |v: &str| v.parse::<f64>().unwrap_or(f64::NAN);
    let int = |v: &str| v.parse::<u64>().unwrap_or(0);
    for (k, tok) in toks.iter().enumerate() {
        let Some((key, val)) = tok.split_once(':') else {
            if *tok == "delivery_rate" {
                s.delivery_rate_bps = toks.get(k + 1).map_or(f64::NAN, |v| parse_rate(v));
            } else if k < 4
                && s.cc.is_empty()
                && tok.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !matches!(*tok, "ts" | "sack" | "ecn" | "ecnseen" | "fastopen")
            {
                s.cc = tok.to_string();
            }
            continue;
        };
        match key {
            "rtt" => {
                let (a, b) = val.split_once('/').unwrap_or((val, "nan"));
                s.srtt_ms = num(a);
                s.rttvar_ms = num(b);
            }
            "rto" => s.rto_ms = num(val),
            "backoff" => s.backoff = int(val) as u32,
            "retrans" => {
                let (a, b) = val.split_once('/').unwrap_or(("0", val));
                s.retrans_now = int(a) as u32;
                s.retrans_total = int(b);
            }
            "cwnd" => s.cwnd = int(val),
            "ssthresh" => s.ssthresh = Some(int(val)),
            "bytes_acked" => s.bytes_acked = int(val),
            "bytes_retrans" => s.bytes_retrans = int(val),
            "data_segs_out" => s.data_segs_out = int(val),
            "lost" => s.lost = int(val),
            "unacked" => s.unacked = int(val),
            _ => {}
        }
    }
    s
}

/// `12345bps`, `1.2Mbps`, `800Kbps` → bit/s.
fn parse_rate(v: &str) -> f64 {
    let v = v.trim_end_matches("bps");
    let (num, mult) = match v.chars().last() {
        Some('K' | 'k') => (&v[..v.len() - 1], 1e3),
        Some('M') => (&v[..v.len() - 1], 1e6),
        Some('G') => (&v[..v.len() - 1], 1e9),
        _ => (v, 1.0),
    };
    num.parse::<f64>().map_or(f64::NAN, |x| x * mult)
}

// ----- analysis ------------------------------------------------------------------------------

#[derive(Clone, Debug, Default)]
struct CarrierResult {
    tput_mbps: [f64; 3],
    windows: usize,
    rtt_ms: [f64; 3],
    rtt_samples: usize,
    ct_rt_outside_pct: f64,
    ct_rt_n: usize,
    rto_episodes: usize,
    rto_repeated: usize,
    data_segs: u64,
}

#[derive(Clone, Debug, Default)]
struct PairResult {
    tput_ratio_pct: (f64, f64),
    tput_n: usize,
    rtt_ratio_pct: (f64, f64),
    rtt_n: usize,
    leading_ms: (f64, f64),
    leading_runs: (usize, usize),
}

#[derive(Clone, Debug)]
struct RunResult {
    carriers: Vec<CarrierResult>,
    pair: Option<PairResult>,
    /// TCPTimeouts / OutSegs, %.
    rto_pct: f64,
    /// (TCPTimeouts + TCPSlowStartRetrans) / OutSegs, %.
    rto_broad_pct: f64,
    timeouts: u64,
    out_segs: u64,
}

fn pct(k: usize, n: usize) -> f64 {
    if n == 0 {
        f64::NAN
    } else {
        100.0 * k as f64 / n as f64
    }
}

/// Goodput of each valid 1 s window, Mbit/s (`None` for invalid windows).
fn windows_mbps(bins: &[u64], valid_bin: &dyn Fn(usize) -> bool) -> Vec<Option<f64>> {
    (0..bins.len() / BINS_PER_S)
        .map(|k| {
            let r = k * BINS_PER_S..(k + 1) * BINS_PER_S;
            r.clone()
                .all(valid_bin)
                .then(|| bins[r].iter().sum::<u64>() as f64 * 8.0 / 1e6)
        })
        .collect()
}

/// CT/RT outside [0.5, 2]: (outside, evaluated).
fn ct_rt(bins: &[u64], valid_bin: &dyn Fn(usize) -> bool) -> (usize, usize) {
    let (mut outside, mut n) = (0, 0);
    for j in BINS_PER_S..bins.len() {
        if !(j - BINS_PER_S..=j).all(valid_bin) {
            continue;
        }
        // Both as bytes per 0.2 s.
        let ct = bins[j] as f64;
        let rt = bins[j - BINS_PER_S..j].iter().sum::<u64>() as f64 / BINS_PER_S as f64;
        if rt == 0.0 && ct == 0.0 {
            continue;
        }
        n += 1;
        if rt == 0.0 || !(0.5..=2.0).contains(&(ct / rt)) {
            outside += 1;
        }
    }
    (outside, n)
}

/// Shares (%) of ratios a/b below 0.5 and above 2, skipping pairs that are both zero.
fn ratio_shares(pairs: impl Iterator<Item = (f64, f64)>) -> ((f64, f64), usize) {
    let (mut lo, mut hi, mut n) = (0, 0, 0);
    for (a, b) in pairs {
        if a <= 0.0 && b <= 0.0 {
            continue;
        }
        n += 1;
        if b <= 0.0 {
            hi += 1;
        } else if a / b < 0.5 {
            lo += 1;
        } else if a / b > 2.0 {
            hi += 1;
        }
    }
    ((pct(lo, n), pct(hi, n)), n)
}

/// RTT leading runs from time-aligned samples `(t_s, Some((rtt_a, rtt_b)))`; `None` breaks the
/// sequence. Returns run durations (ms) led by A and by B; runs cut by a break are dropped.
fn leading_runs(samples: &[(f64, Option<(f64, f64)>)]) -> (Vec<f64>, Vec<f64>) {
    let (mut lead_a, mut lead_b) = (Vec::new(), Vec::new());
    // (leader is A, start time, whether the run began at a leader change)
    let mut run: Option<(bool, f64, bool)> = None;
    for (t, s) in samples {
        let Some((a, b)) = s else {
            run = None;
            continue;
        };
        let leader = match run {
            Some((l, ..)) if a == b => l,
            _ => a < b,
        };
        run = match run {
            None => Some((leader, *t, false)),
            Some((l, start, complete_start)) if l != leader => {
                if complete_start {
                    let d = (t - start) * 1000.0;
                    if l {
                        lead_a.push(d);
                    } else {
                        lead_b.push(d);
                    }
                }
                Some((leader, *t, true))
            }
            same => same,
        };
    }
    (lead_a, lead_b)
}

/// Counter delta between the first and last valid snapshot.
fn nstat_delta(rows: &[NstatRow], mask: &TimeMask, key: &str) -> u64 {
    let valid: Vec<&NstatRow> = rows.iter().filter(|r| mask.valid_s(r.t_s)).collect();
    match (valid.first(), valid.last()) {
        (Some(a), Some(b)) => {
            let get = |r: &NstatRow| r.counters.get(key).copied().unwrap_or(0);
            get(b).saturating_sub(get(a))
        }
        _ => 0,
    }
}

/// What one carrier of one run contributes; the samples of several trips are pooled.
#[derive(Clone, Debug, Default)]
struct CarrierSamples {
    windows_mbps: Vec<f64>,
    rtt_ms: Vec<f64>,
    /// (outside [0.5, 2], evaluated)
    ct_rt: (usize, usize),
    rto_episodes: usize,
    rto_repeated: usize,
    data_segs: u64,
}

/// What one run (one trip, one congestion control) contributes to the statistics.
#[derive(Clone, Debug, Default)]
struct RunSamples {
    carriers: Vec<CarrierSamples>,
    /// Simultaneous valid 1 s windows of carriers 0 and 1, Mbit/s.
    tput_pairs: Vec<(f64, f64)>,
    /// Time-aligned smoothed RTTs of carriers 0 and 1, ms.
    rtt_pairs: Vec<(f64, f64)>,
    /// Complete leading runs of carrier 0 and of carrier 1, ms.
    leading_ms: (Vec<f64>, Vec<f64>),
    timeouts: u64,
    ss_retrans: u64,
    out_segs: u64,
}

fn samples(raw: &RawRun, mask: &TimeMask, n: usize) -> RunSamples {
    let valid_bin = |j: usize| mask.bin_valid(j);
    let mut carriers = Vec::new();
    for i in 0..n {
        let bins = &raw.bins[i];
        let mut rtts = Vec::new();
        let mut prev_acked = 0u64;
        let (mut episodes, mut repeated) = (0usize, 0usize);
        let mut episode: Option<(u32, bool)> = None; // (max backoff, started in valid time)
        let (mut segs_first, mut segs_last) = (None, 0u64);
        for row in &raw.ss {
            let Some(f) = &row.flows[i] else { continue };
            let valid = mask.valid_s(row.t_s);
            if valid && f.bytes_acked > prev_acked && f.srtt_ms > 0.0 {
                rtts.push(f.srtt_ms);
            }
            prev_acked = prev_acked.max(f.bytes_acked);
            if valid {
                segs_first.get_or_insert(f.data_segs_out);
                segs_last = f.data_segs_out;
            }
            episode = match (episode, f.backoff) {
                (None, 0) => None,
                (None, b) => Some((b, valid)),
                (Some((m, v)), 0) => {
                    if v {
                        episodes += 1;
                        repeated += usize::from(m >= 2);
                    }
                    None
                }
                (Some((m, v)), b) => Some((m.max(b), v)),
            };
        }
        if let Some((m, true)) = episode {
            episodes += 1;
            repeated += usize::from(m >= 2);
        }
        carriers.push(CarrierSamples {
            windows_mbps: windows_mbps(bins, &valid_bin)
                .into_iter()
                .flatten()
                .collect(),
            rtt_ms: rtts,
            ct_rt: ct_rt(bins, &valid_bin),
            rto_episodes: episodes,
            rto_repeated: repeated,
            data_segs: segs_last.saturating_sub(segs_first.unwrap_or(0)),
        });
    }
    let mut s = RunSamples {
        carriers,
        timeouts: nstat_delta(&raw.nstat, mask, "TcpExtTCPTimeouts"),
        ss_retrans: nstat_delta(&raw.nstat, mask, "TcpExtTCPSlowStartRetrans"),
        out_segs: nstat_delta(&raw.nstat, mask, "TcpOutSegs"),
        ..RunSamples::default()
    };
    if n >= 2 {
        let wa = windows_mbps(&raw.bins[0], &valid_bin);
        let wb = windows_mbps(&raw.bins[1], &valid_bin);
        s.tput_pairs = wa
            .iter()
            .zip(&wb)
            .filter_map(|(a, b)| Some(((*a)?, (*b)?)))
            .collect();
        let aligned: Vec<(f64, Option<(f64, f64)>)> = raw
            .ss
            .iter()
            .map(|r| {
                let both = match (&r.flows[0], &r.flows[1]) {
                    (Some(a), Some(b))
                        if mask.valid_s(r.t_s) && a.srtt_ms > 0.0 && b.srtt_ms > 0.0 =>
                    {
                        Some((a.srtt_ms, b.srtt_ms))
                    }
                    _ => None,
                };
                (r.t_s, both)
            })
            .collect();
        s.rtt_pairs = aligned.iter().filter_map(|(_, p)| *p).collect();
        s.leading_ms = leading_runs(&aligned);
    }
    s
}

/// Median leading time of carriers 0 and 1 over every run's complete leading runs, and how
/// many runs each led.
fn pooled_leading<'a>(
    runs: impl Iterator<Item = &'a (Vec<f64>, Vec<f64>)>,
) -> ((f64, f64), (usize, usize)) {
    let (mut la, mut lb) = (Vec::new(), Vec::new());
    for (a, b) in runs {
        la.extend_from_slice(a);
        lb.extend_from_slice(b);
    }
    let n = (la.len(), lb.len());
    ((quantile(&mut la, 0.5), quantile(&mut lb, 0.5)), n)
}

/// The statistics of one congestion control over its runs (one per trip), samples pooled: the
/// quartiles, shares and medians are taken over every trip's samples together.
fn summarise(runs: &[&RunSamples], n: usize) -> RunResult {
    let carriers = (0..n)
        .map(|i| {
            let all = || runs.iter().map(|r| &r.carriers[i]);
            let windows: Vec<f64> = all().flat_map(|c| c.windows_mbps.iter().copied()).collect();
            let rtts: Vec<f64> = all().flat_map(|c| c.rtt_ms.iter().copied()).collect();
            let (out, ctn) = all().fold((0, 0), |(o, k), c| (o + c.ct_rt.0, k + c.ct_rt.1));
            CarrierResult {
                windows: windows.len(),
                tput_mbps: quartiles(windows),
                rtt_samples: rtts.len(),
                rtt_ms: quartiles(rtts),
                ct_rt_outside_pct: pct(out, ctn),
                ct_rt_n: ctn,
                rto_episodes: all().map(|c| c.rto_episodes).sum(),
                rto_repeated: all().map(|c| c.rto_repeated).sum(),
                data_segs: all().map(|c| c.data_segs).sum(),
            }
        })
        .collect();
    let pair = (n >= 2).then(|| {
        let (tput_ratio_pct, tput_n) =
            ratio_shares(runs.iter().flat_map(|r| r.tput_pairs.iter().copied()));
        let (rtt_ratio_pct, rtt_n) =
            ratio_shares(runs.iter().flat_map(|r| r.rtt_pairs.iter().copied()));
        let (leading_ms, leading_runs) = pooled_leading(runs.iter().map(|r| &r.leading_ms));
        PairResult {
            tput_ratio_pct,
            tput_n,
            rtt_ratio_pct,
            rtt_n,
            leading_runs,
            leading_ms,
        }
    });
    let timeouts: u64 = runs.iter().map(|r| r.timeouts).sum();
    let ss_retrans: u64 = runs.iter().map(|r| r.ss_retrans).sum();
    let out_segs: u64 = runs.iter().map(|r| r.out_segs).sum();
    let share = |k: u64| {
        if out_segs == 0 {
            f64::NAN
        } else {
            100.0 * k as f64 / out_segs as f64
        }
    };
    RunResult {
        carriers,
        pair,
        rto_pct: share(timeouts),
        rto_broad_pct: share(timeouts + ss_retrans),
        timeouts,
        out_segs,
    }
}

// ----- trip-model statistics -----------------------------------------------------------------

#[derive(Clone, Debug)]
struct ModelStats {
    trips: u64,
    interval_s: Vec<f64>,
    failure_pct: Vec<f64>,
    cells_with_failure_pct: Vec<f64>,
    handovers: Vec<usize>,
    /// Per carrier: median over locations of p75/p25 of the trips' mean capacity there, and
    /// the number of locations.
    location_p75_p25: Vec<(f64, usize)>,
}

/// Handover statistics of the trip model over `--model-trips` trips of the route.
fn model_stats(args: &CalibrateArgs) -> Result<ModelStats> {
    let mut interval: Vec<Vec<f64>> = Vec::new();
    let mut hos: Vec<usize> = Vec::new();
    let mut fails: Vec<usize> = Vec::new();
    let mut cells: Vec<BTreeMap<u32, bool>> = Vec::new();
    // Per carrier, per location: the trips' mean capacity there.
    let mut at_location: Vec<Vec<Vec<f64>>> = Vec::new();
    for k in 0..args.model_trips {
        let cfg = TripConfig::preset(
            &args.trip.preset,
            args.trip.route_seed,
            args.trip.trip_seed.wrapping_add(k),
        )?;
        let t = Trip::generate(&cfg)?;
        let stats = t.carrier_stats();
        if interval.is_empty() {
            interval = vec![Vec::new(); stats.len()];
            hos = vec![0; stats.len()];
            fails = vec![0; stats.len()];
            cells = vec![BTreeMap::new(); stats.len()];
        }
        for (c, s) in stats.iter().enumerate() {
            if s.handover_interval_s.is_finite() {
                interval[c].push(s.handover_interval_s);
            }
            hos[c] += s.handovers;
            fails[c] += s.failures;
        }
        for h in &t.handovers {
            *cells[h.carrier].entry(h.from_cell).or_default() |= h.outcome == Outcome::Failure;
        }
        let means = t.location_means(LOCATION_HALF_WINDOW_M, LOCATION_GRID_M);
        at_location.resize(means.len(), Vec::new());
        for (c, per_point) in means.iter().enumerate() {
            let len = per_point.len().max(at_location[c].len());
            at_location[c].resize(len, Vec::new());
            for (j, m) in per_point.iter().enumerate() {
                at_location[c][j].extend(*m);
            }
        }
    }
    let location_p75_p25 = at_location
        .iter()
        .map(|points| {
            let mut ratios: Vec<f64> = points
                .iter()
                .filter(|v| v.len() >= LOCATION_MIN_TRIPS)
                .filter_map(|v| {
                    let mut v = v.clone();
                    let (p25, p75) = (quantile(&mut v, 0.25), quantile(&mut v, 0.75));
                    (p25 > 0.0).then(|| p75 / p25)
                })
                .collect();
            let n = ratios.len();
            (quantile(&mut ratios, 0.5), n)
        })
        .collect();
    Ok(ModelStats {
        trips: args.model_trips,
        interval_s: interval
            .iter()
            .map(|v| {
                if v.is_empty() {
                    f64::NAN
                } else {
                    v.iter().sum::<f64>() / v.len() as f64
                }
            })
            .collect(),
        failure_pct: hos.iter().zip(&fails).map(|(h, f)| pct(*f, *h)).collect(),
        cells_with_failure_pct: cells
            .iter()
            .map(|m| pct(m.values().filter(|f| **f).count(), m.len()))
            .collect(),
        handovers: hos,
        location_p75_p25,
    })
}

/// Capacity-level statistics of the emulated window itself (what TCP had to work with), for
/// the "trip model" column: same mask as the measurements.
#[derive(Clone, Debug, Default)]
struct WindowModel {
    capacity_mbps: Vec<[f64; 3]>,
    idle_rtt_ms: Vec<[f64; 3]>,
    ct_rt_pct: Vec<f64>,
    cap_ratio_pct: (f64, f64),
    rtt_ratio_pct: (f64, f64),
    leading_ms: (f64, f64),
}

/// What one emulated trip window contributes to the "trip model" column.
#[derive(Clone, Debug, Default)]
struct WindowSamples {
    capacity_mbps: Vec<Vec<f64>>,
    idle_rtt_ms: Vec<Vec<f64>>,
    ct_rt: Vec<(usize, usize)>,
    cap_pairs: Vec<(f64, f64)>,
    owd_pairs: Vec<(f64, f64)>,
    leading_ms: (Vec<f64>, Vec<f64>),
}

fn window_samples(trip: &Trip, mask: &TimeMask) -> WindowSamples {
    let steps_per_bin = (BIN_MS / STEP_MS) as usize;
    // Capacity as "bytes per 0.2 s bin" so the same window and CT/RT code applies.
    let cap_bins: Vec<Vec<u64>> = trip
        .paths
        .iter()
        .map(|p| {
            p.dl_bps
                .chunks(steps_per_bin)
                .map(|c| (c.iter().sum::<f64>() * STEP_MS as f64 / 1000.0 / 8.0) as u64)
                .collect()
        })
        .collect();
    let valid_bin = |j: usize| mask.bin_valid(j);
    let mut w = WindowSamples::default();
    for (p, bins) in trip.paths.iter().zip(&cap_bins) {
        w.capacity_mbps.push(
            windows_mbps(bins, &valid_bin)
                .into_iter()
                .flatten()
                .collect(),
        );
        w.idle_rtt_ms.push(
            p.owd_us
                .iter()
                .enumerate()
                .filter(|(s, _)| mask.valid_ms(*s as u64 * STEP_MS))
                .map(|(_, o)| 2.0 * *o as f64 / 1000.0)
                .collect(),
        );
        w.ct_rt.push(ct_rt(bins, &valid_bin));
    }
    if trip.paths.len() >= 2 {
        let wa = windows_mbps(&cap_bins[0], &valid_bin);
        let wb = windows_mbps(&cap_bins[1], &valid_bin);
        w.cap_pairs = wa
            .iter()
            .zip(&wb)
            .filter_map(|(a, b)| Some(((*a)?, (*b)?)))
            .collect();
        let (a, b) = (&trip.paths[0].owd_us, &trip.paths[1].owd_us);
        let aligned: Vec<(f64, Option<(f64, f64)>)> = a
            .iter()
            .zip(b)
            .enumerate()
            .map(|(s, (x, y))| {
                let t = s as u64 * STEP_MS;
                (
                    t as f64 / 1000.0,
                    mask.valid_ms(t).then_some((*x as f64, *y as f64)),
                )
            })
            .collect();
        w.owd_pairs = aligned.iter().filter_map(|(_, s)| *s).collect();
        w.leading_ms = leading_runs(&aligned);
    }
    w
}

/// The "trip model" column over every measured trip's window, samples pooled.
fn window_stats(wins: &[WindowSamples]) -> WindowModel {
    let n = wins.first().map_or(0, |w| w.capacity_mbps.len());
    let mut m = WindowModel::default();
    for i in 0..n {
        m.capacity_mbps.push(quartiles(
            wins.iter()
                .flat_map(|w| w.capacity_mbps[i].iter().copied())
                .collect(),
        ));
        m.idle_rtt_ms.push(quartiles(
            wins.iter()
                .flat_map(|w| w.idle_rtt_ms[i].iter().copied())
                .collect(),
        ));
        let (o, k) = wins
            .iter()
            .fold((0, 0), |(o, k), w| (o + w.ct_rt[i].0, k + w.ct_rt[i].1));
        m.ct_rt_pct.push(pct(o, k));
    }
    if n >= 2 {
        m.cap_ratio_pct = ratio_shares(wins.iter().flat_map(|w| w.cap_pairs.iter().copied())).0;
        m.rtt_ratio_pct = ratio_shares(wins.iter().flat_map(|w| w.owd_pairs.iter().copied())).0;
        m.leading_ms = pooled_leading(wins.iter().map(|w| &w.leading_ms)).0;
    }
    m
}

// ----- the table -----------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A value: within tolerance if within ±25% of the published one.
    Value,
    /// A share in percent: within ±5 percentage points.
    Share,
    /// Printed for information, not judged.
    Info,
}

#[derive(Clone, Debug)]
struct Row {
    metric: String,
    carrier: String,
    published: Option<f64>,
    kind: Kind,
    /// One per congestion control.
    measured: Vec<f64>,
    /// Trip-model value; judged instead of `measured` when `judge_model`.
    model: f64,
    judge_model: bool,
    /// How many samples the measured values rest on, per congestion control.
    n: Vec<usize>,
}

impl Row {
    fn within(&self, v: f64) -> Option<bool> {
        let p = self.published?;
        if !v.is_finite() {
            // Nothing to judge (e.g. no RTO episode to look at): shown as "n/a".
            return None;
        }
        match self.kind {
            Kind::Value => Some((v - p).abs() <= VALUE_TOLERANCE * p.abs()),
            Kind::Share => Some((v - p).abs() <= SHARE_TOLERANCE_POINTS),
            Kind::Info => None,
        }
    }

    fn to_json(&self, ccs: &[String]) -> Value {
        let num = |v: f64| if v.is_finite() { json!(v) } else { Value::Null };
        let mut measured = serde_json::Map::new();
        for (k, cc) in ccs.iter().enumerate() {
            if let Some(v) = self.measured.get(k) {
                measured.insert(
                    cc.clone(),
                    json!({
                        "value": num(*v),
                        "n": self.n.get(k),
                        "within_tolerance": if self.judge_model { None } else { self.within(*v) },
                    }),
                );
            }
        }
        json!({
            "metric": self.metric,
            "carrier": self.carrier,
            "published": self.published,
            "kind": format!("{:?}", self.kind).to_lowercase(),
            "measured": measured,
            "trip_model": num(self.model),
            "trip_model_within_tolerance": if self.judge_model { self.within(self.model) } else { None },
        })
    }
}

fn table(
    names: &[String],
    results: &[RunResult],
    model: &ModelStats,
    win: &WindowModel,
) -> Vec<Row> {
    let mut rows = Vec::new();
    let name = |c: usize| names.get(c).cloned().unwrap_or_else(|| c.to_string());
    let per_carrier = names.len().min(2);
    let row = |metric: &str,
               carrier: String,
               published: Option<f64>,
               kind: Kind,
               measured: Vec<f64>,
               n: Vec<usize>,
               model: f64| Row {
        metric: metric.into(),
        carrier,
        published,
        kind,
        measured,
        model,
        judge_model: false,
        n,
    };
    let q = ["p25", "p50", "p75"];
    for c in 0..names.len() {
        let pubc = |v: &[f64]| (c < per_carrier).then(|| v[c]);
        for (k, qn) in q.iter().enumerate() {
            rows.push(row(
                &format!("downlink throughput {qn} (Mbit/s)"),
                name(c),
                (c < per_carrier).then(|| published::TPUT_MBPS[c][k]),
                Kind::Value,
                results.iter().map(|r| r.carriers[c].tput_mbps[k]).collect(),
                results.iter().map(|r| r.carriers[c].windows).collect(),
                win.capacity_mbps[c][k],
            ));
        }
        for (k, qn) in q.iter().enumerate() {
            rows.push(row(
                &format!("RTT {qn} (ms)"),
                name(c),
                (c < per_carrier).then(|| published::RTT_MS[c][k]),
                Kind::Value,
                results.iter().map(|r| r.carriers[c].rtt_ms[k]).collect(),
                results.iter().map(|r| r.carriers[c].rtt_samples).collect(),
                win.idle_rtt_ms[c][k],
            ));
        }
        rows.push(row(
            "CT/RT outside [0.5,2] (%)",
            name(c),
            pubc(&published::CT_RT_OUTSIDE_PCT),
            Kind::Share,
            results
                .iter()
                .map(|r| r.carriers[c].ct_rt_outside_pct)
                .collect(),
            results.iter().map(|r| r.carriers[c].ct_rt_n).collect(),
            win.ct_rt_pct[c],
        ));
        rows.push(row(
            "RTO episodes / data segs, ss (%)",
            name(c),
            None,
            Kind::Info,
            results
                .iter()
                .map(|r| {
                    let cr = &r.carriers[c];
                    if cr.data_segs == 0 {
                        f64::NAN
                    } else {
                        100.0 * cr.rto_episodes as f64 / cr.data_segs as f64
                    }
                })
                .collect(),
            results.iter().map(|r| r.carriers[c].rto_episodes).collect(),
            f64::NAN,
        ));
        rows.push(row(
            "RTO episodes with >1 RTO, ss (%)",
            name(c),
            Some(published::RTO_REPEATED_PCT),
            Kind::Share,
            results
                .iter()
                .map(|r| pct(r.carriers[c].rto_repeated, r.carriers[c].rto_episodes))
                .collect(),
            results.iter().map(|r| r.carriers[c].rto_episodes).collect(),
            f64::NAN,
        ));
    }
    let both = if names.len() >= 2 {
        format!("{}+{}", name(0), name(1))
    } else {
        name(0)
    };
    rows.push(row(
        "RTO share: TCPTimeouts/OutSegs (%)",
        both.clone(),
        Some(published::RTO_PCT),
        Kind::Share,
        results.iter().map(|r| r.rto_pct).collect(),
        results.iter().map(|r| r.timeouts as usize).collect(),
        f64::NAN,
    ));
    rows.push(row(
        "  (Timeouts+SlowStartRetrans)/OutSegs",
        both,
        Some(published::RTO_PCT),
        Kind::Info,
        results.iter().map(|r| r.rto_broad_pct).collect(),
        results.iter().map(|r| r.out_segs as usize).collect(),
        f64::NAN,
    ));
    if names.len() >= 2 {
        let ab = format!("{}/{}", name(0), name(1));
        let pair = |f: &dyn Fn(&PairResult) -> f64| -> Vec<f64> {
            results
                .iter()
                .map(|r| r.pair.as_ref().map_or(f64::NAN, f))
                .collect()
        };
        let pair_n = |f: &dyn Fn(&PairResult) -> usize| -> Vec<usize> {
            results
                .iter()
                .map(|r| r.pair.as_ref().map_or(0, f))
                .collect()
        };
        rows.push(row(
            "throughput ratio < 0.5 (%)",
            ab.clone(),
            Some(published::TPUT_RATIO_PCT.0),
            Kind::Share,
            pair(&|p| p.tput_ratio_pct.0),
            pair_n(&|p| p.tput_n),
            win.cap_ratio_pct.0,
        ));
        rows.push(row(
            "throughput ratio > 2 (%)",
            ab.clone(),
            Some(published::TPUT_RATIO_PCT.1),
            Kind::Share,
            pair(&|p| p.tput_ratio_pct.1),
            pair_n(&|p| p.tput_n),
            win.cap_ratio_pct.1,
        ));
        rows.push(row(
            "RTT ratio < 0.5 (%)",
            ab.clone(),
            Some(published::RTT_RATIO_PCT.0),
            Kind::Share,
            pair(&|p| p.rtt_ratio_pct.0),
            pair_n(&|p| p.rtt_n),
            win.rtt_ratio_pct.0,
        ));
        rows.push(row(
            "RTT ratio > 2 (%)",
            ab,
            Some(published::RTT_RATIO_PCT.1),
            Kind::Share,
            pair(&|p| p.rtt_ratio_pct.1),
            pair_n(&|p| p.rtt_n),
            win.rtt_ratio_pct.1,
        ));
        rows.push(row(
            "median RTT leading time (ms)",
            name(0),
            Some(published::RTT_LEADING_MS[0]),
            Kind::Value,
            pair(&|p| p.leading_ms.0),
            pair_n(&|p| p.leading_runs.0),
            win.leading_ms.0,
        ));
        rows.push(row(
            "median RTT leading time (ms)",
            name(1),
            Some(published::RTT_LEADING_MS[1]),
            Kind::Value,
            pair(&|p| p.leading_ms.1),
            pair_n(&|p| p.leading_runs.1),
            win.leading_ms.1,
        ));
    }
    let model_row = |metric: String, c: usize, published: Option<f64>, kind: Kind, v: f64| Row {
        metric,
        carrier: name(c),
        published,
        kind,
        measured: Vec::new(),
        model: v,
        judge_model: true,
        n: Vec::new(),
    };
    for c in 0..names.len() {
        let pubc = |v: &[f64; 2]| (c < per_carrier).then(|| v[c]);
        rows.push(model_row(
            format!("handover interval (s), {} trips", model.trips),
            c,
            pubc(&published::HO_INTERVAL_S),
            Kind::Value,
            model.interval_s[c],
        ));
        rows.push(model_row(
            format!("handover failures (%), {} HOs", model.handovers[c]),
            c,
            pubc(&published::HO_FAILURE_PCT),
            Kind::Share,
            model.failure_pct[c],
        ));
        rows.push(model_row(
            format!("cells with >=1 failure (%), {} trips", model.trips),
            c,
            pubc(&published::CELLS_WITH_FAILURE_PCT),
            Kind::Info,
            model.cells_with_failure_pct[c],
        ));
        let (ratio, locations) = model
            .location_p75_p25
            .get(c)
            .copied()
            .unwrap_or((f64::NAN, 0));
        rows.push(model_row(
            format!("capacity p75/p25 per location, {locations} loc."),
            c,
            pubc(&published::LOCATION_P75_P25),
            Kind::Value,
            ratio,
        ));
    }
    rows
}

fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn mark(w: Option<bool>, published: Option<f64>, kind: Kind) -> &'static str {
    match w {
        Some(true) => "ok",
        Some(false) => "MISS",
        None if published.is_some() && kind != Kind::Info => "n/a",
        None => "",
    }
}

fn render(rows: &[Row], ccs: &[String]) -> String {
    let mut s = String::new();
    let _ = write!(s, "{:<40} {:<5} {:>9}", "metric", "path", "published");
    for cc in ccs {
        let _ = write!(s, " {:>13}", cc);
    }
    let _ = writeln!(s, " {:>14}", "trip model");
    let width = 40 + 6 + 10 + 14 * ccs.len() + 15;
    let _ = writeln!(s, "{}", "-".repeat(width));
    let (mut ok, mut judged) = (vec![0usize; ccs.len() + 1], vec![0usize; ccs.len() + 1]);
    for r in rows {
        let _ = write!(
            s,
            "{:<40} {:<5} {:>9}",
            r.metric,
            r.carrier,
            r.published.map_or("-".into(), fmt_num)
        );
        for k in 0..ccs.len() {
            let cell = match r.measured.get(k) {
                Some(v) if !r.judge_model => {
                    let w = r.within(*v);
                    if let Some(w) = w {
                        judged[k] += 1;
                        ok[k] += usize::from(w);
                    }
                    format!("{} {:<4}", fmt_num(*v), mark(w, r.published, r.kind))
                }
                _ => String::new(),
            };
            let _ = write!(s, " {cell:>13}");
        }
        let model_cell = if r.judge_model {
            let w = r.within(r.model);
            if let Some(w) = w {
                judged[ccs.len()] += 1;
                ok[ccs.len()] += usize::from(w);
            }
            format!("{} {:<4}", fmt_num(r.model), mark(w, r.published, r.kind))
        } else if r.model.is_finite() {
            format!("({})     ", fmt_num(r.model))
        } else {
            String::new()
        };
        let _ = writeln!(s, " {model_cell:>14}");
    }
    let _ = writeln!(s, "{}", "-".repeat(width));
    let _ = write!(
        s,
        "{:<56}",
        "within tolerance (±25% values, ±5 points shares; n/a not counted)"
    );
    for k in 0..=ccs.len() {
        let _ = write!(s, " {:>13}", format!("{}/{}", ok[k], judged[k]));
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "trip model column: (x) = the emulated window's capacity / idle RTT / capacity ratios (context, not judged); judged rows = trip-model handover statistics"
    );
    s
}

fn table_csv(rows: &[Row], ccs: &[String]) -> String {
    let mut s = String::from("metric,carrier,kind,published");
    for cc in ccs {
        let _ = write!(s, ",{cc},{cc}_n,{cc}_within");
    }
    s.push_str(",trip_model,trip_model_within\n");
    let num = |v: f64| {
        if v.is_finite() {
            format!("{v}")
        } else {
            String::new()
        }
    };
    let w = |x: Option<bool>| x.map_or(String::new(), |b| b.to_string());
    for r in rows {
        let _ = write!(
            s,
            "\"{}\",{},{:?},{}",
            r.metric,
            r.carrier,
            r.kind,
            r.published.map_or(String::new(), num)
        );
        for k in 0..ccs.len() {
            match r.measured.get(k) {
                Some(v) if !r.judge_model => {
                    let _ = write!(
                        s,
                        ",{},{},{}",
                        num(*v),
                        r.n.get(k).copied().unwrap_or(0),
                        w(r.within(*v))
                    );
                }
                _ => s.push_str(",,,"),
            }
        }
        let _ = writeln!(
            s,
            ",{},{}",
            num(r.model),
            if r.judge_model {
                w(r.within(r.model))
            } else {
                String::new()
            }
        );
    }
    s
}

// ----- raw output ----------------------------------------------------------------------------

fn write_raw(dir: &Path, raw: &RawRun, mask: &TimeMask) -> Result<()> {
    let cc = &raw.cc;
    let mut s = String::from("t_end_s,carrier,bytes,mbps,valid\n");
    for (i, bins) in raw.bins.iter().enumerate() {
        for (j, b) in bins.iter().enumerate() {
            let _ = writeln!(
                s,
                "{:.1},{i},{b},{:.4},{}",
                (j + 1) as f64 * BIN_MS as f64 / 1000.0,
                *b as f64 * 8.0 / (BIN_MS as f64 * 1000.0),
                u8::from(mask.bin_valid(j))
            );
        }
    }
    let p = dir.join(format!("goodput-{cc}.csv"));
    fs::write(&p, s).with_context(|| format!("write {}", p.display()))?;
    let mut s = String::from(
        "t_s,carrier,valid,cc,srtt_ms,rttvar_ms,rto_ms,backoff,retrans_now,retrans_total,cwnd,ssthresh,bytes_acked,bytes_retrans,data_segs_out,lost,unacked,delivery_rate_bps\n",
    );
    for r in &raw.ss {
        for (i, f) in r.flows.iter().enumerate() {
            let Some(f) = f else { continue };
            let _ = writeln!(
                s,
                "{:.3},{i},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                r.t_s,
                u8::from(mask.valid_s(r.t_s)),
                f.cc,
                f.srtt_ms,
                f.rttvar_ms,
                f.rto_ms,
                f.backoff,
                f.retrans_now,
                f.retrans_total,
                f.cwnd,
                f.ssthresh.map_or(String::new(), |v| v.to_string()),
                f.bytes_acked,
                f.bytes_retrans,
                f.data_segs_out,
                f.lost,
                f.unacked,
                f.delivery_rate_bps
            );
        }
    }
    let p = dir.join(format!("ss-{cc}.csv"));
    fs::write(&p, s).with_context(|| format!("write {}", p.display()))?;
    let mut s = format!("t_s,valid,{}\n", NSTAT_KEYS.join(","));
    for r in &raw.nstat {
        let _ = write!(s, "{:.3},{}", r.t_s, u8::from(mask.valid_s(r.t_s)));
        for k in NSTAT_KEYS {
            let _ = write!(s, ",{}", r.counters.get(k).copied().unwrap_or(0));
        }
        s.push('\n');
    }
    let p = dir.join(format!("nstat-{cc}.csv"));
    fs::write(&p, s).with_context(|| format!("write {}", p.display()))?;
    let dir_json = |d: &DirStats| {
        json!({
            "packets_in": d.packets_in,
            "packets_out": d.packets_out,
            "bytes_out": d.bytes_out,
            "dropped": d.dropped,
            "write_failures": d.write_failures,
        })
    };
    let run = json!({
        "cc": cc,
        "cc_seen_in_ss": raw.cc_seen,
        "nstat_before": raw.nstat_before,
        "nstat_after": raw.nstat_after,
        "sent_bytes": raw.sent_bytes,
        "received_bytes": raw.bins.iter().map(|b| b.iter().sum::<u64>()).collect::<Vec<_>>(),
        "connected_at_s": raw.connect_s,
        "ss_samples": raw.ss.len(),
        "emulator": raw.emu.iter().map(|(u, d)| json!({"uplink": dir_json(u), "downlink": dir_json(d)})).collect::<Vec<_>>(),
    });
    let p = dir.join(format!("run-{cc}.json"));
    fs::write(&p, serde_json::to_string_pretty(&run)?)
        .with_context(|| format!("write {}", p.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SS: &str = "ESTAB 0      812345       10.100.0.2:41234      10.100.0.1:5400 \n\t cubic wscale:10,10 rto:616 backoff:2 rtt:212.5/40.25 mss:1448 cwnd:37 ssthresh:20 bytes_sent:9000 bytes_retrans:2896 bytes_acked:6000 segs_out:9 data_segs_out:8 retrans:1/5 lost:3 unacked:12 delivery_rate 5.2Mbps\nESTAB 0 0 10.100.1.2:50000 10.100.1.1:5401\n\t ts sack bbr rto:204 rtt:90/4 cwnd:50 bytes_acked:100 data_segs_out:3 delivery_rate 800000bps\nESTAB 0 0 10.100.1.2:50001 10.100.1.1:22\n\t cubic rtt:1/1\n";

    /// `CalibrateArgs` from command-line arguments, as clap parses them.
    fn parse(args: &[&str]) -> Result<CalibrateArgs, clap::Error> {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            a: CalibrateArgs,
        }
        Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied())).map(|c| c.a)
    }

    /// The published shares of the A/B throughput ratio (< 0.5: 39.2%, > 2: 37.0%) against
    /// the published quartiles. Over every pair of carriers with lognormal throughput whose
    /// quartiles all lie within the calibration's ±25%, and which are independent (issue #4's
    /// trip model), one of the two shares is always more than 5 points off: the closest pair
    /// misses by about 5.9 points, with B's median at the tolerance's lower edge. Carriers that
    /// move against each other (correlation −0.85) can meet both. So the two ratio rows and the
    /// six quartile rows cannot all pass for independent lognormal carriers, whatever a model's
    /// parameters (positive correlation narrows the ratio's spread and only widens the miss).
    #[test]
    fn published_ratio_shares_need_carriers_that_move_against_each_other() {
        let phi = |x: f64| 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2);
        // The standard normal's upper quartile.
        let z = 0.674_489_750_196_081_7;
        let grid = |lo: f64, hi: f64, n: usize| {
            (0..n).map(move |i| lo + (hi - lo) * i as f64 / (n - 1) as f64)
        };
        // (mean, SD) of ln(Mbit/s) for every carrier on the grid whose quartiles all lie
        // within ±25% of the published ones.
        let carriers = |p: [f64; 3]| -> Vec<(f64, f64)> {
            let tol = VALUE_TOLERANCE;
            grid(((1.0 - tol) * p[1]).ln(), ((1.0 + tol) * p[1]).ln(), 41)
                .flat_map(|mu| grid(0.3, 2.0, 69).map(move |sd| (mu, sd)))
                .filter(|&(mu, sd)| {
                    let q = [(mu - z * sd).exp(), mu.exp(), (mu + z * sd).exp()];
                    q.iter().zip(p).all(|(m, p)| (m / p - 1.0).abs() <= tol)
                })
                .collect()
        };
        let (a, b) = (
            carriers(published::TPUT_MBPS[0]),
            carriers(published::TPUT_MBPS[1]),
        );
        assert!(a.len() > 100 && b.len() > 100, "{} / {}", a.len(), b.len());
        let (below, above) = published::TPUT_RATIO_PCT;
        // The smallest, over all pairs, of the larger of the two shares' misses (points).
        let closest = |rho: f64| -> f64 {
            let mut best = f64::INFINITY;
            for &(ma, sa) in &a {
                for &(mb, sb) in &b {
                    let sd = (sa * sa + sb * sb - 2.0 * rho * sa * sb).max(1e-12).sqrt();
                    let m = ma - mb;
                    let lo = 100.0 * phi((0.5f64.ln() - m) / sd);
                    let hi = 100.0 * (1.0 - phi((2f64.ln() - m) / sd));
                    best = best.min((lo - below).abs().max((hi - above).abs()));
                }
            }
            best
        };
        let (independent, opposed) = (closest(0.0), closest(-0.85));
        eprintln!(
            "closest miss: independent {independent:.2} points, correlation -0.85 {opposed:.2}"
        );
        assert!(
            independent > SHARE_TOLERANCE_POINTS && independent < 6.5,
            "independent carriers: closest miss {independent:.2} points"
        );
        assert!(
            opposed <= SHARE_TOLERANCE_POINTS,
            "carriers moving against each other: closest miss {opposed:.2} points"
        );
        let together = closest(0.3);
        assert!(
            together > independent,
            "carriers moving together: closest miss {together:.2} points"
        );
    }

    #[test]
    fn parallel_runs_get_their_own_testbed_and_ports() {
        let seq = parse(&["--name", "cal", "--port", "5400"]).unwrap();
        assert_eq!(
            (
                run_args(&seq, 1).unwrap().name,
                run_args(&seq, 1).unwrap().port
            ),
            ("cal".into(), 5400)
        );
        let par = parse(&["--name", "cal", "--port", "5400", "--parallel"]).unwrap();
        let r: Vec<(String, u16)> = (0..2)
            .map(|k| run_args(&par, k).map(|a| (a.name, a.port)).unwrap())
            .collect();
        assert_eq!(r, vec![("cal0".into(), 5400), ("cal1".into(), 5500)]);
        let high = parse(&["--port", "65500", "--parallel"]).unwrap();
        assert!(run_args(&high, 1).is_err());
        let long = parse(&["--name", "a-twenty-char-name-x", "--parallel"]).unwrap();
        assert!(
            check_args(&long).is_err(),
            "name + run index exceeds the testbed name limit"
        );
    }

    #[test]
    fn stretches_are_the_maximal_runs_above_250_kmh() {
        let v = HSR_SPEED_MPS;
        let speed = [0.0, v + 1.0, v + 2.0, v, v - 5.0, v + 1.0, v + 1.0, v + 3.0];
        let ms = STEP_MS;
        assert_eq!(
            stretches_at_speed(&speed),
            vec![(ms, 3 * ms), (5 * ms, 8 * ms)],
            "exactly 250 km/h is not above it; a stretch running to the end is closed"
        );
        assert!(stretches_at_speed(&[0.0, v]).is_empty());
    }

    #[test]
    fn all_stretches_plans_one_run_per_stretch_at_speed_and_never_past_it() {
        let first = parse(&["--minutes", "4.5"]).unwrap();
        let all = parse(&["--minutes", "4.5", "--all-stretches"]).unwrap();
        let (cfg, _) = first.trip.config().unwrap();
        let full = Trip::generate(&cfg).unwrap();
        let stretches = stretches_at_speed(&full.speed_mps);
        assert!(
            stretches.len() >= 2,
            "route 1 has a slow-down between two stretches at speed: {stretches:?}"
        );
        let want = 270_000;
        let one = plan_rides(&first, &cfg, want).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!((one[0].offset_ms, one[0].stretch), (stretches[0].0, None));
        let rides = plan_rides(&all, &cfg, want).unwrap();
        assert_eq!(rides.len(), stretches.len());
        for (k, (r, (a, b))) in rides.iter().zip(&stretches).enumerate() {
            assert_eq!((r.offset_ms, r.stretch), (*a, Some(k + 1)));
            assert_eq!(
                r.run_ms,
                want.min(b - a),
                "stretch {k} runs to its end at most"
            );
            // Every counted moment of the run is at speed, and the run counts all but the
            // warm-up.
            let expect = (r.run_ms - 3_000) as f64 / 1000.0;
            assert!(
                (r.moving_s - expect).abs() < 0.02,
                "{} vs {expect}",
                r.moving_s
            );
        }
        let out = Path::new("/o");
        assert_eq!(rides[1].dir(out, 2), out.join("trip-1-stretch-2"));
        assert_eq!(one[0].dir(out, 2), out.join("trip-1"));
        assert_eq!(one[0].dir(out, 1), out);
        let both = parse(&["--all-stretches", "--from-start"]);
        assert!(
            both.is_err(),
            "--from-start and --all-stretches exclude each other"
        );
    }

    #[test]
    fn ss_lines_map_to_carriers() {
        let f = parse_ss(SS, 3, 5400);
        let a = f[0].as_ref().unwrap();
        assert_eq!(a.cc, "cubic");
        assert_eq!((a.srtt_ms, a.rttvar_ms, a.rto_ms), (212.5, 40.25, 616.0));
        assert_eq!((a.backoff, a.retrans_now, a.retrans_total), (2, 1, 5));
        assert_eq!((a.cwnd, a.ssthresh, a.bytes_acked), (37, Some(20), 6000));
        assert_eq!(
            (a.data_segs_out, a.lost, a.unacked, a.bytes_retrans),
            (8, 3, 12, 2896)
        );
        assert_eq!(a.delivery_rate_bps, 5.2e6);
        let b = f[1].as_ref().unwrap();
        assert_eq!((b.cc.as_str(), b.srtt_ms, b.backoff), ("bbr", 90.0, 0));
        assert_eq!(b.delivery_rate_bps, 800_000.0);
        assert!(f[2].is_none(), "a socket to another port is not a sender");
    }

    #[test]
    fn nstat_keeps_the_named_counters() {
        let m = parse_nstat(
            "#kernel\nTcpOutSegs  1000  0.0\nTcpExtTCPTimeouts 7 0.0\nIpInReceives 5 0.0\n",
        );
        assert_eq!(m.get("TcpOutSegs"), Some(&1000));
        assert_eq!(m.get("TcpExtTCPTimeouts"), Some(&7));
        assert!(!m.contains_key("IpInReceives"));
    }

    #[test]
    fn ct_rt_counts_drops_jumps_and_skips_silence() {
        let all = |_: usize| true;
        // Steady, then a halving (0.4 < 0.5), then back up, then silence.
        let bins = [10, 10, 10, 10, 10, 10, 4, 10, 0, 0, 0, 0, 0, 0];
        let (out, n) = ct_rt(&bins, &all);
        // j=5: 10/10 in; j=6: 4/10 out; j=7: 10/8.8 in; j=8: 0 out; j=9..12: 0 vs >0 out;
        // j=13: RT = 0 and CT = 0: skipped.
        assert_eq!(n, 8);
        assert_eq!(out, 6);
    }

    #[test]
    fn ratios_treat_zero_as_extreme_and_skip_double_zero() {
        let ((lo, hi), n) = ratio_shares(
            [
                (1.0, 4.0),
                (4.0, 1.0),
                (1.0, 1.0),
                (0.0, 1.0),
                (1.0, 0.0),
                (0.0, 0.0),
            ]
            .into_iter(),
        );
        assert_eq!(n, 5);
        assert_eq!((lo, hi), (40.0, 40.0));
    }

    #[test]
    fn leading_runs_drop_truncated_runs() {
        let s = |t: f64, a: f64, b: f64| (t, Some((a, b)));
        let samples = [
            s(0.0, 1.0, 2.0), // A leads (truncated at the start: dropped)
            s(0.1, 3.0, 2.0), // B from 0.1
            s(0.2, 2.0, 2.0), // tie continues B
            s(0.3, 1.0, 2.0), // A from 0.3: B ran 200 ms
            s(0.8, 5.0, 2.0), // B from 0.8: A ran 500 ms
            (0.9, None),      // break: B's run is cut and dropped
            s(1.0, 1.0, 2.0),
            s(1.1, 3.0, 2.0),
        ];
        let (a, b) = leading_runs(&samples);
        assert_eq!(a.len(), 1);
        assert!((a[0] - 500.0).abs() < 1e-6);
        assert_eq!(b.len(), 1);
        assert!((b[0] - 200.0).abs() < 1e-6);
    }

    #[test]
    fn window_rebases_time_and_mask_skips_acceleration() {
        let trip = Trip::generate(&TripConfig::hsr(1, 1)).unwrap();
        let off = trip
            .speed_mps
            .iter()
            .position(|v| *v > HSR_SPEED_MPS)
            .unwrap() as u64
            * STEP_MS;
        let w = trip.window(off, 60_000);
        assert_eq!(w.duration_ms, 60_000);
        assert!(w.speed_mps[0] > HSR_SPEED_MPS);
        assert!(w.handovers.iter().all(|h| h.start_ms < 60_000));
        for p in &w.paths {
            assert_eq!(p.dl_bps.len(), 6000);
            assert!(p.outages_ms.iter().all(|(a, b)| a < b && *b <= 60_000));
        }
        let mask = TimeMask {
            speed_mps: w.speed_mps.clone(),
            warmup_ms: 3000,
            end_ms: 60_000,
        };
        assert!(!mask.valid_ms(2_990));
        assert!(mask.valid_ms(3_000));
        assert!(mask.bin_valid(299));
        assert!(!mask.bin_valid(300));
        assert!(mask.bin_valid(15));
    }

    fn run_samples(windows: &[f64], ct_rt: (usize, usize), rto: (u64, u64)) -> RunSamples {
        RunSamples {
            carriers: vec![CarrierSamples {
                windows_mbps: windows.to_vec(),
                rtt_ms: windows.iter().map(|w| 100.0 * w).collect(),
                ct_rt,
                rto_episodes: 2,
                rto_repeated: 1,
                data_segs: 10,
            }],
            timeouts: rto.0,
            out_segs: rto.1,
            ..RunSamples::default()
        }
    }

    #[test]
    fn several_trips_pool_their_samples_not_their_statistics() {
        let a = run_samples(&[1.0, 2.0, 3.0], (1, 10), (1, 100));
        let b = run_samples(&[10.0, 20.0, 30.0, 40.0, 50.0], (9, 10), (0, 900));
        let one = summarise(&[&a], 1);
        assert_eq!(one.carriers[0].tput_mbps[1], 2.0);
        assert_eq!(one.carriers[0].ct_rt_outside_pct, 10.0);
        let both = summarise(&[&a, &b], 1);
        let c = &both.carriers[0];
        // The median of all eight windows, not the mean of the two medians (2 and 30).
        assert_eq!(c.windows, 8);
        assert_eq!(
            c.tput_mbps[1],
            quartiles(vec![1.0, 2.0, 3.0, 10.0, 20.0, 30.0, 40.0, 50.0])[1]
        );
        assert_eq!(c.rtt_samples, 8);
        // Shares over the pooled counts: 3 of 40 = 7.5%, not the mean of 10% and 6.7%.
        let b2 = run_samples(&[5.0], (2, 30), (0, 900));
        let c2 = summarise(&[&a, &b2], 1);
        assert!((c2.carriers[0].ct_rt_outside_pct - 7.5).abs() < 1e-9);
        assert_eq!((c.rto_episodes, c.rto_repeated, c.data_segs), (4, 2, 20));
        assert!(
            (both.rto_pct - 0.1).abs() < 1e-9,
            "1 timeout in 1000 segments"
        );
        assert!(both.pair.is_none(), "one carrier has no pair statistics");
    }

    #[test]
    fn window_model_pools_trips() {
        let trip = Trip::generate(&TripConfig::hsr(1, 1)).unwrap();
        let w = trip.window(150_000, 120_000);
        let mask = TimeMask {
            speed_mps: w.speed_mps.clone(),
            warmup_ms: 3000,
            end_ms: 120_000,
        };
        let s = window_samples(&w, &mask);
        let one = window_stats(std::slice::from_ref(&s));
        let twice = window_stats(&[s.clone(), s]);
        // The same window twice gives the same quartiles and shares.
        assert_eq!(one.capacity_mbps, twice.capacity_mbps);
        assert_eq!(one.ct_rt_pct, twice.ct_rt_pct);
        assert_eq!(one.cap_ratio_pct, twice.cap_ratio_pct);
        assert!(one.capacity_mbps[0][1] > 0.0);
    }

    #[test]
    fn tolerance_is_relative_for_values_and_absolute_for_shares() {
        let mut r = Row {
            metric: String::new(),
            carrier: String::new(),
            published: Some(100.0),
            kind: Kind::Value,
            measured: vec![],
            model: f64::NAN,
            judge_model: false,
            n: vec![],
        };
        assert_eq!(r.within(124.0), Some(true));
        assert_eq!(r.within(126.0), Some(false));
        r.kind = Kind::Share;
        r.published = Some(26.4);
        assert_eq!(r.within(21.5), Some(true));
        assert_eq!(r.within(21.3), Some(false));
        assert_eq!(r.within(f64::NAN), None, "no data is not judged");
        r.kind = Kind::Info;
        assert_eq!(r.within(0.0), None);
    }
}
