//! `polycorn testbed up|down` and `polycorn emu run`.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use clap::Args;
use polycorn_emu::context::GPSD_PORT;
use polycorn_emu::forward::{Emulator, PathModel};
use polycorn_emu::models::{self, DEFAULT_QUEUE_BYTES};
use polycorn_emu::testbed::{self, TestbedSpec};
use polycorn_link::link::QueueLimit;
use polycorn_link::trace::{DelaySeries, DeliveryTrace, Outages};
use polycorn_link::trip::Trip;

use crate::harness::TripPlayer;
use crate::tripgen::TripArgs;

/// One-way delay of constant and trace paths without one of their own, ms.
pub const DEFAULT_DELAY_MS: f64 = 20.0;

/// How the emulated paths behave.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// The trip whose carriers become the paths (unless --constant-mbit or --trace).
    #[command(flatten)]
    pub trip: TripArgs,
    /// Instead of a trip: every path a constant rate in Mbit/s (0 = unshaped).
    #[arg(long, conflicts_with_all = ["traces", "preset"])]
    pub constant_mbit: Option<f64>,
    /// Instead of a trip: one path per FILE replaying a recorded trace, looping: a mahimahi
    /// file (`X.down`, with `X.up` for the uplink when it exists) or a per-second throughput
    /// CSV with `Timestamp,DL_bitrate,UL_bitrate` columns (e.g. ucc5g; its downlink series is
    /// used in both directions, since UL of a download session is only ACKs). Delay:
    /// `--delay-ms`, else the recording's own (`X.delay.csv` beside `X.down`, or half the
    /// log's `PINGMIN`), else 20 ms. Outages: `X.outages.csv` beside `X.down` (packets
    /// dropped; held in the spans of `X.interruptions.csv`, per --handover-interruption),
    /// looping with the trace.
    #[arg(long = "trace", value_name = "FILE")]
    pub traces: Vec<std::path::PathBuf>,
    /// One-way delay, ms: one value for every path, or one per path (`--delay-ms 20,60`)
    /// [default: a trace's own delay, else 20].
    #[arg(long, value_name = "MS", value_delimiter = ',')]
    pub delay_ms: Vec<f64>,
    /// Number of constant paths.
    #[arg(long, default_value_t = 2)]
    pub paths: usize,
    /// Droptail queue per path and direction, bytes [default: a trip's carriers size theirs in
    /// time (the preset's `queue_ms` of the carrier's median capacity); constant and trace
    /// paths 175000].
    #[arg(long)]
    pub queue_bytes: Option<u64>,
}

impl ModelArgs {
    fn to_cli_args(&self) -> Vec<String> {
        let mut v = vec![
            format!("--route-seed={}", self.trip.route_seed),
            format!("--trip-seed={}", self.trip.trip_seed),
            format!("--interruptions={}", self.trip.interruptions),
            format!(
                "--handover-interruption={}",
                self.trip.handover_interruption.name()
            ),
            format!("--paths={}", self.paths),
        ];
        if !self.delay_ms.is_empty() {
            let d: Vec<String> = self.delay_ms.iter().map(f64::to_string).collect();
            v.push(format!("--delay-ms={}", d.join(",")));
        }
        if let Some(q) = self.queue_bytes {
            v.push(format!("--queue-bytes={q}"));
        }
        match self.constant_mbit {
            Some(m) => v.push(format!("--constant-mbit={m}")),
            None if self.traces.is_empty() => v.push(format!("--preset={}", self.trip.preset)),
            None => {}
        }
        for t in &self.traces {
            v.push(format!("--trace={}", t.display()));
        }
        v
    }

    /// Build the per-path models.
    pub fn models(&self) -> Result<Vec<PathModel>> {
        Ok(self.build()?.0)
    }

    /// Build the per-path models, and the trip they come from (if any).
    pub fn build(&self) -> Result<(Vec<PathModel>, Option<Trip>)> {
        let queue = QueueLimit::Bytes(self.queue_bytes.unwrap_or(DEFAULT_QUEUE_BYTES));
        if !self.traces.is_empty() {
            let recorded = self
                .traces
                .iter()
                .map(|f| read_trace(f))
                .collect::<Result<Vec<_>>>()?;
            let own: Vec<_> = recorded.iter().map(|r| r.delay.clone()).collect();
            let delays = path_delays(&self.delay_ms, &own, DEFAULT_DELAY_MS)?;
            let hold = self.trip.handover_interruption == crate::tripgen::InterruptionMode::Hold;
            let paths = recorded
                .into_iter()
                .zip(delays)
                .map(|(r, (d, _))| {
                    if let Some(what) = &r.outage_source {
                        eprintln!("outages: {what}");
                    }
                    let period = r.down.period_ms();
                    let outages = r.outages.looped(period, OUTAGE_HORIZON_MS);
                    let held = match hold {
                        true => r.interruptions.looped(period, OUTAGE_HORIZON_MS),
                        false => Outages::none(),
                    };
                    models::from_traces(r.down, r.up, d, outages, held, queue)
                })
                .collect();
            return Ok((paths, None));
        }
        if let Some(m) = self.constant_mbit {
            if !(m.is_finite() && m >= 0.0) {
                bail!("--constant-mbit must be a number >= 0, got {m}");
            }
            let delays = path_delays(&self.delay_ms, &vec![None; self.paths], DEFAULT_DELAY_MS)?;
            let paths = delays
                .into_iter()
                .map(|(d, _)| {
                    let us = d.delay_at_us(0);
                    models::constant((m * 1e6) as u64, us, queue)
                })
                .collect::<Result<Vec<_>, _>>()?;
            return Ok((paths, None));
        }
        let (cfg, source) = self.trip.config()?;
        eprintln!(
            "successful-handover interruptions: {source}; packets during them: {}",
            self.trip.handover_interruption.name()
        );
        let trip = Trip::generate(&cfg)?;
        let queue = self.queue_bytes.map(QueueLimit::Bytes);
        Ok((models::from_trip(&trip, queue)?, Some(trip)))
    }
}

/// `polycorn testbed up`.
pub fn up(name: &str, model: &ModelArgs) -> Result<()> {
    let models = model.models()?;
    let spec = TestbedSpec {
        name: name.into(),
        paths: models.len(),
    };
    testbed::up(&spec)?;
    let log_path = spec.emulator_log().display().to_string();
    let log = File::create(&log_path).with_context(|| format!("create {log_path}"))?;
    let exe = std::env::current_exe().context("locate the polycorn binary")?;
    let mut child = Command::new(exe)
        .args(["emu", "run", "--name", name])
        .args(model.to_cli_args())
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("start the emulator")?;
    testbed::record_emulator(name, Some(child.id()))?;
    std::thread::sleep(Duration::from_millis(500));
    if let Some(status) = child.try_wait()? {
        let msg = std::fs::read_to_string(&log_path).unwrap_or_default();
        let _ = testbed::down(name);
        bail!("the emulator exited ({status}) right after starting:\n{msg}");
    }
    println!("testbed `{name}` is up: namespaces {name}-client, {name}-relay, {name}-proxy, {name}-server");
    println!("{} emulated paths (relay 10.100.i.1 <-> proxy 10.100.i.2, fd00:100:i::1 <-> fd00:100:i::2, devices path0..path{}); emulator PID {}, log {log_path}", spec.paths, spec.paths - 1, child.id());
    if model.constant_mbit.is_none() && model.traces.is_empty() {
        println!("the trip's context (GPS, cells, RSRP) is served gpsd-style on 127.0.0.1:{GPSD_PORT} in {name}-relay");
    }
    println!("remove with: polycorn testbed down --name {name}");
    Ok(())
}

/// `polycorn testbed down`.
pub fn down(name: &str) -> Result<()> {
    testbed::down(name)?;
    println!("testbed `{name}` removed");
    Ok(())
}

/// `polycorn emu run`: forward until SIGINT or SIGTERM.
pub fn run(name: &str, model: &ModelArgs) -> Result<()> {
    let (models, trip) = model.build()?;
    let spec = TestbedSpec {
        name: name.into(),
        paths: models.len(),
    };
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    let mut player = TripPlayer::start_links(&spec, &models)?;
    // The trip's context log, replayed to the relay over gpsd's protocol in step with the links.
    if let Some(t) = &trip {
        player.serve_context(&spec, t)?;
        eprintln!(
            "replaying the trip's context (gpsd JSON) on 127.0.0.1:{GPSD_PORT} in {}",
            spec.ns("relay")
        );
    }
    eprintln!("emulating {} paths for testbed `{name}`", spec.paths);
    while !stop.load(Ordering::Relaxed) && !player.is_finished() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = player.finish()?;
    for (i, (up, down)) in stats.iter().enumerate() {
        eprintln!("path{i}: uplink {up:?}; downlink {down:?}");
    }
    Ok(())
}

/// `polycorn emu bench`: bulk TCP (cubic) from relay to proxy through one unshaped emulated path;
/// prints goodput, packets/s through the forwarder and the forwarder's CPU use.
pub fn bench(name: &str, secs: u32) -> Result<()> {
    use polycorn_emu::netns::exec_in;
    if !nix::unistd::geteuid().is_root() {
        bail!("the emulator benchmark needs root (network namespaces and TUN devices)");
    }
    if secs == 0 {
        bail!("--secs must be at least 1");
    }
    let model = models::constant(0, 0, QueueLimit::Packets(1000))?;
    let spec = TestbedSpec {
        name: name.into(),
        paths: 1,
    };
    let _guard = testbed::Guard::up(&spec)?;
    // The emulator runs on a thread of its own here, not in a `TripPlayer`: the benchmark
    // reports that thread's CPU time.
    let stop = Arc::new(AtomicBool::new(false));
    let mut emu = Emulator::attach(&spec, &[model], stop.clone())?;
    let emu_thread = std::thread::spawn(move || -> Result<(Vec<(polycorn_emu::forward::DirStats, polycorn_emu::forward::DirStats)>, f64)> {
        let stats = emu.run()?;
        let ru = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD)?;
        let cpu = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        Ok((stats, cpu(ru.user_time()) + cpu(ru.system_time())))
    });
    let proxy = spec.ns("proxy");
    let server = std::thread::spawn(move || {
        exec_in(
            &proxy,
            "iperf3",
            &["-s", "-1", "-B", "10.100.0.2", "-p", "5399"],
        )
    });
    std::thread::sleep(Duration::from_millis(300));
    let started = std::time::Instant::now();
    let out = exec_in(
        &spec.ns("relay"),
        "iperf3",
        &[
            "-c",
            "10.100.0.2",
            "-B",
            "10.100.0.1",
            "-p",
            "5399",
            "-t",
            &secs.to_string(),
            "-C",
            "cubic",
            "-J",
        ],
    );
    let wall = started.elapsed().as_secs_f64();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (stats, cpu_s) = emu_thread
        .join()
        .map_err(|_| anyhow::anyhow!("emulator thread panicked"))??;
    let _ = server.join();
    let out = out?;
    let v: serde_json::Value = serde_json::from_str(&out).context("parse iperf3 JSON")?;
    let gbit = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .context("iperf3 reported no received rate")?
        / 1e9;
    let (up, down) = stats[0];
    let pps = (up.packets_out + down.packets_out) as f64 / wall;
    println!("unshaped emulated path, bulk TCP (cubic) relay -> proxy for {secs} s:");
    println!("  goodput            {gbit:.2} Gbit/s");
    println!(
        "  forwarded          {:.0} packets/s ({} data + {} ack packets), {} write failures",
        pps,
        up.packets_out,
        down.packets_out,
        up.write_failures + down.write_failures
    );
    println!(
        "  forwarder CPU      {:.0}% of one core ({cpu_s:.2} s over {wall:.2} s)",
        100.0 * cpu_s / wall
    );
    Ok(())
}

/// A recorded path read by [`read_trace`].
#[derive(Debug, Clone)]
pub(crate) struct RecordedPath {
    pub down: DeliveryTrace,
    pub up: DeliveryTrace,
    /// The delay the recording carries, looped with the downlink trace, and where it came
    /// from: a throughput log's `PINGMIN` column, or `X.delay.csv` beside `X.down` (the
    /// format `polycorn trip generate` writes).
    pub delay: Option<(DelaySeries, String)>,
    /// Outages within one period of the downlink trace (`X.outages.csv` beside `X.down`, the
    /// format `polycorn trip generate` writes; none otherwise), packets dropped during them.
    pub outages: Outages,
    /// Of those, where packets are held (`X.interruptions.csv`).
    pub interruptions: Outages,
    /// What was read for them, for the run's header (`None`: no outage file).
    pub outage_source: Option<String>,
}

/// How far ahead the outages of a looping trace path are laid out in the testbed: 7 days.
const OUTAGE_HORIZON_MS: u64 = 7 * 86_400_000;

/// `X.outages.csv` / `X.interruptions.csv` beside the trace `X.down`: one period of outages
/// and interruptions, and a description (spans that would never play are dropped and said).
fn read_outages(
    down_path: &std::path::Path,
    period_ms: u64,
) -> Result<Option<(Outages, Outages, String)>> {
    let o_path = down_path.with_extension("outages.csv");
    let i_path = down_path.with_extension("interruptions.csv");
    if !o_path.exists() {
        if i_path.exists() {
            bail!(
                "{} has no {} beside it: interruptions are the outages during which packets are held, so they need the outages",
                i_path.display(),
                o_path.display()
            );
        }
        return Ok(None);
    }
    let read = |p: &std::path::Path| -> Result<Outages> {
        let name = p.display().to_string();
        let text = std::fs::read_to_string(p).with_context(|| format!("read {name}"))?;
        Ok(Outages::parse(&name, &text)?)
    };
    let outages = read(&o_path)?;
    let interruptions = if i_path.exists() {
        read(&i_path)?
    } else {
        Outages::none()
    };
    let late = outages
        .spans_ms()
        .iter()
        .filter(|s| s.0 >= period_ms)
        .count();
    let mut what = format!(
        "{} ({} outages, {:.1} s dark per {:.1} s loop",
        o_path.display(),
        outages.spans_ms().len() - late,
        outages.looped(period_ms, period_ms).dark_ms() as f64 / 1000.0,
        period_ms as f64 / 1000.0
    );
    if !interruptions.is_empty() {
        what += &format!(
            "; packets held in the {} interruptions of {}",
            interruptions.spans_ms().len(),
            i_path.display()
        );
    }
    what.push(')');
    if late > 0 {
        eprintln!(
            "note: {late} outages in {} start after the trace's last opportunity ({period_ms} ms) and never play",
            o_path.display()
        );
    }
    Ok(Some((outages, interruptions, what)))
}

/// A recorded path: a mahimahi file (`X.down` + `X.up` if present, + `X.delay.csv` if present)
/// or a per-second throughput CSV (with its ping column as delay, if it has one).
pub(crate) fn read_trace(path: &std::path::Path) -> Result<RecordedPath> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).with_context(|| format!("read {name}"))?;
    if path.extension().is_some_and(|e| e == "csv") {
        // What a throughput log's UL column holds depends on the session: in a download
        // session it is ACK traffic, not uplink capacity. Use the downlink series both ways.
        let series = polycorn_link::throughput::parse(&name, &text)?;
        let down = DeliveryTrace::from_rate_series(&series.downlink).with_context(|| {
            format!(
                "{name}: no usable downlink series (DL_bitrate, {} rows)",
                series.rows
            )
        })?;
        let delay = series.delay_series().map(|d| {
            let what = format!(
                "half the log's PINGMIN ({} of {} rows have one)",
                series.ping_rows, series.rows
            );
            (d.looped(down.period_ms()), what)
        });
        return Ok(RecordedPath {
            up: down.clone(),
            down,
            delay,
            outages: Outages::none(),
            interruptions: Outages::none(),
            outage_source: None,
        });
    }
    let down = DeliveryTrace::parse(&name, &text)?;
    let is_down = path.extension().is_some_and(|e| e == "down");
    let up_path = path.with_extension("up");
    let up = if is_down && up_path.exists() {
        let up_name = up_path.display().to_string();
        let up_text =
            std::fs::read_to_string(&up_path).with_context(|| format!("read {up_name}"))?;
        DeliveryTrace::parse(&up_name, &up_text)?
    } else {
        down.clone()
    };
    let (outages, interruptions, outage_source) = match is_down {
        true => match read_outages(path, down.period_ms())? {
            Some((o, i, what)) => (o, i, Some(what)),
            None => (Outages::none(), Outages::none(), None),
        },
        false => (Outages::none(), Outages::none(), None),
    };
    let delay_path = path.with_extension("delay.csv");
    let delay = if is_down && delay_path.exists() {
        let d_name = delay_path.display().to_string();
        let d_text =
            std::fs::read_to_string(&delay_path).with_context(|| format!("read {d_name}"))?;
        let d = DelaySeries::parse(&d_name, &d_text)?;
        Some((d.looped(down.period_ms()), d_name))
    } else {
        None
    };
    Ok(RecordedPath {
        down,
        up,
        delay,
        outages,
        interruptions,
        outage_source,
    })
}

/// Per-path one-way delay from `--delay-ms` values: none (each path its recording's delay,
/// else `default_ms`), one (every path), or one per path. `recorded[i]` is path i's own
/// delay, if any. Returns each path's series and a description of it.
pub(crate) fn path_delays(
    delay_ms: &[f64],
    recorded: &[Option<(DelaySeries, String)>],
    default_ms: f64,
) -> Result<Vec<(DelaySeries, String)>> {
    for &d in delay_ms {
        if !(d.is_finite() && (0.0..=10_000.0).contains(&d)) {
            bail!("--delay-ms must be a number of ms from 0 to 10000, got {d}");
        }
    }
    let constant = |ms: f64| {
        (
            DelaySeries::constant((ms * 1000.0).round() as u64),
            format!("{ms} ms"),
        )
    };
    match delay_ms {
        [] => Ok(recorded
            .iter()
            .map(|r| r.clone().unwrap_or_else(|| constant(default_ms)))
            .collect()),
        [one] => Ok(recorded.iter().map(|_| constant(*one)).collect()),
        many if many.len() == recorded.len() => Ok(many.iter().map(|&d| constant(d)).collect()),
        many => bail!(
            "--delay-ms has {} values for {} paths: give one for every path, or one per path",
            many.len(),
            recorded.len()
        ),
    }
}

/// Stop a long run on SIGINT/SIGTERM without leaving anything behind. The first signal sets
/// the returned flag, which the run checks between steps (it then tears its testbed down as
/// usual); a second signal does not wait: it removes the `testbeds` (their namespaces and every
/// process inside them, the emulator included) and exits with 128 + the signal number.
pub fn stop_on_signals(what: &'static str, testbeds: Vec<String>) -> Result<Arc<AtomicBool>> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    use std::sync::atomic::Ordering;
    let flag = Arc::new(AtomicBool::new(false));
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .context("install SIGINT/SIGTERM handlers")?;
    let f = flag.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if !f.swap(true, Ordering::SeqCst) {
                    eprintln!(
                        "\n{what}: stopping after the current step; signal again to stop now"
                    );
                    continue;
                }
                eprintln!(
                    "\n{what}: stopping now; removing testbed {}",
                    testbeds.join(", ")
                );
                for t in &testbeds {
                    if let Err(e) = testbed::down(t) {
                        eprintln!("testbed `{t}`: {e}; run `polycorn testbed down --name {t}`");
                    }
                }
                std::process::exit(128 + sig);
            }
        })
        .context("start the signal thread")?;
    Ok(flag)
}
