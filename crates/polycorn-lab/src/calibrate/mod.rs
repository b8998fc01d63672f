//! `polycorn testbed calibrate`: bulk TCP downloads over each emulated carrier of a trip preset,
//! with every measurable published HSR statistic (POLYCORN, NSDI'23, §2) printed beside its
//! published value.
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
use nix::sys::socket::{self, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn};
use polycorn_emu::forward::DirStats;
use polycorn_emu::models;
use polycorn_emu::netns::{self, InNamespace};
use polycorn_emu::testbed::{self, TestbedSpec};
use polycorn_link::link::QueueLimit;
use polycorn_link::trip::{quantile, quartiles, Outcome, Trip, TripConfig, STEP_MS};
use serde_json::{json, Value};

use crate::common::HSR_SPEED_MPS;

mod args;
mod mask;
mod measure;
mod model;
mod parse;
mod raw;
mod simulate;
mod stats;
mod table;

use args::*;
pub use args::{CalibrateArgs, SimColumns};
use mask::*;
use measure::*;
use model::*;
use parse::*;
use raw::*;
use simulate::*;
use stats::*;
use table::*;

// ----- entry point ---------------------------------------------------------------------------

/// Run the calibration.
pub fn run(args: &CalibrateArgs) -> Result<()> {
    let ccs = check_args(args)?;
    if args.model_only {
        return run_model_only(args);
    }
    let emulate = args.sim != SimColumns::Only;
    let runs: Vec<CalibrateArgs> = (0..ccs.len())
        .map(|k| run_args(args, k))
        .collect::<Result<_>>()?;
    if emulate {
        preflight()?;
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
    }
    // One column per congestion control and side: the emulated ones, then the simulated.
    let mut cols: Vec<String> = if emulate { ccs.clone() } else { Vec::new() };
    let (running, ran) = match args.sim {
        SimColumns::Off => ("emulating", "emulated"),
        SimColumns::Also => ("emulating and simulating", "emulated and simulated"),
        SimColumns::Only => ("simulating", "simulated"),
    };
    if args.sim != SimColumns::Off {
        cols.extend(ccs.iter().map(|cc| sim_column(cc)));
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
            "trip `{}` route {} {}: {running} {:.1} s from trip time {:.1} s ({:.1} s of it above 250 km/h after the warm-up); {} carriers; queue {}; output {}",
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
    let interrupted = if emulate {
        crate::testbed_cmd::stop_on_signals(
            "calibrate",
            runs.iter().map(|a| a.name.clone()).collect(),
        )?
    } else {
        Arc::new(AtomicBool::new(false))
    };
    let names: Vec<String> = first.trip.paths.iter().map(|p| p.name.clone()).collect();
    // Per congestion control, one entry per trip.
    let mut per_cc: Vec<Vec<RunSamples>> = vec![Vec::new(); cols.len()];
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
        let measured = if emulate {
            measure_all(args, &runs, &ccs, ride, &interrupted)
        } else {
            Ok(Vec::new())
        };
        let raws = measured.and_then(|mut raws| {
            if args.sim != SimColumns::Off {
                for cc in &ccs {
                    raws.push(simulate(args, &ride.trip, ride.seed, cc, ride.run_ms)?);
                }
            }
            Ok(raws)
        });
        let raws = match raws {
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
        for ((cc, raw), pooled) in cols.iter().zip(&raws).zip(&mut per_cc) {
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
                "ccs": cols,
                "rows": rows.iter().map(|r| r.to_json(&cols)).collect::<Vec<_>>(),
            });
            for (file, text) in [
                ("table.txt", render(&rows, &cols)),
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
    let text = render(&rows, &cols);
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
            "calibration of `{}` (trip model {model_id}; route {}, {}): {:.1} s {ran} from trip time {:.1} s, {:.1} s above 250 km/h measured; queue {}",
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
            "calibration of `{}` (trip model {model_id}; route {}, trips {}-{}{}, samples pooled): {:.1} s {ran}, {:.1} s above 250 km/h measured; queue {}",
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
        "ccs": cols,
        "rows": rows.iter().map(|r| r.to_json(&cols)).collect::<Vec<_>>(),
    });
    write_tables(&out_dir, &summary, &rows, &cols, &text)?;
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
        if args.sim != SimColumns::Off {
            sim_cc(cc)?;
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

#[cfg(test)]
mod tests;
