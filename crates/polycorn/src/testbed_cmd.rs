//! `polycorn testbed up|down` and `polycorn emu run`.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use polycorn_emu::forward::{Emulator, PathModel};
use polycorn_emu::models::{self, DEFAULT_QUEUE_BYTES};
use polycorn_emu::testbed::{self, TestbedSpec};
use polycorn_link::link::QueueLimit;
use polycorn_link::trip::{Trip, TripConfig};

/// How the emulated paths behave.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// Trip preset whose carriers become the paths (hsr, ktx).
    #[arg(long, default_value = "hsr", conflicts_with = "constant_mbit")]
    pub preset: String,
    /// Route seed (cell layout; shared by all trips of a route).
    #[arg(long, default_value_t = 1)]
    pub route_seed: u64,
    /// Trip seed (this ride).
    #[arg(long, default_value_t = 1)]
    pub trip_seed: u64,
    /// Instead of a trip: every path a constant rate in Mbit/s (0 = unshaped).
    #[arg(long)]
    pub constant_mbit: Option<f64>,
    /// One-way delay of constant paths, ms.
    #[arg(long, default_value_t = 20.0)]
    pub delay_ms: f64,
    /// Number of constant paths.
    #[arg(long, default_value_t = 2)]
    pub paths: usize,
    /// Droptail queue per path and direction, bytes.
    #[arg(long, default_value_t = DEFAULT_QUEUE_BYTES)]
    pub queue_bytes: u64,
}

impl ModelArgs {
    fn to_cli_args(&self) -> Vec<String> {
        let mut v = vec![
            format!("--route-seed={}", self.route_seed),
            format!("--trip-seed={}", self.trip_seed),
            format!("--delay-ms={}", self.delay_ms),
            format!("--paths={}", self.paths),
            format!("--queue-bytes={}", self.queue_bytes),
        ];
        match self.constant_mbit {
            Some(m) => v.push(format!("--constant-mbit={m}")),
            None => v.push(format!("--preset={}", self.preset)),
        }
        v
    }

    /// Build the per-path models.
    pub fn models(&self) -> Result<Vec<PathModel>> {
        let queue = QueueLimit::Bytes(self.queue_bytes);
        if let Some(m) = self.constant_mbit {
            if !(m.is_finite() && m >= 0.0) {
                bail!("--constant-mbit must be a number >= 0, got {m}");
            }
            if !(self.delay_ms.is_finite() && self.delay_ms >= 0.0) {
                bail!("--delay-ms must be a number >= 0, got {}", self.delay_ms);
            }
            let one = models::constant((m * 1e6) as u64, (self.delay_ms * 1000.0) as u64, queue)?;
            return Ok(vec![one; self.paths]);
        }
        let cfg = TripConfig::preset(&self.preset, self.route_seed, self.trip_seed)?;
        let trip = Trip::generate(&cfg)?;
        Ok(models::from_trip(&trip, queue)?)
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
    let log_path = format!("/run/polycorn/emu-{name}.log");
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
    println!("{} emulated paths (relay 10.100.i.1 <-> proxy 10.100.i.2, devices path0..path{}); emulator PID {}, log {log_path}", spec.paths, spec.paths - 1, child.id());
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
    let models = model.models()?;
    let spec = TestbedSpec {
        name: name.into(),
        paths: models.len(),
    };
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    let mut emu = Emulator::attach(&spec, &models, stop)?;
    eprintln!("emulating {} paths for testbed `{name}`", spec.paths);
    let stats = emu.run()?;
    for (i, (up, down)) in stats.iter().enumerate() {
        eprintln!("path{i}: uplink {up:?}; downlink {down:?}");
    }
    Ok(())
}
