//! The lab's harness, shared by bench, soak, netbench, calibrate, the testbed commands and the
//! relay/proxy integration tests: a testbed removed on drop ([`Guard`]), relay and proxy
//! daemons in its namespaces (stopped on drop), their metrics, a trip played on the testbed in
//! real time, and the LinkDB a run's proxy reads.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};
use polycorn_emu::context::{ContextServer, GPSD_PORT};
use polycorn_emu::forward::{Delivered, DirStats, EmuError, Emulator, PathModel};
use polycorn_emu::models;
use polycorn_emu::netns::{ip, ip_in};
use polycorn_emu::testbed::TestbedSpec;
use polycorn_link::link::QueueLimit;
use polycorn_link::trip::Trip;
use polycorn_net::config::LinkDbConfig;

pub use polycorn_emu::testbed::Guard;

/// Environment variable holding the relay's and proxy's log filter (`RUST_LOG` syntax) in
/// `polycorn bench` and `polycorn net bench`; default `info`. For example
/// `info,polycorn::paths=debug` adds every path's state every 100 ms to their logs.
pub const BENCH_LOG_ENV: &str = "POLYCORN_BENCH_LOG";

pub use nix::sys::signal::Signal;

/// The log filter in environment variable `env`, `info` if unset.
fn log_filter(env: &str) -> String {
    std::env::var(env).unwrap_or_else(|_| "info".into())
}

/// A `polycorn relay|proxy` child in a namespace, its stderr going to a log file; SIGTERM,
/// then SIGKILL after 5 s, on drop. [`Daemon::start`] runs this executable (the lab's commands
/// are the `polycorn` binary); tests, whose own executable is the test binary, name the binary
/// with [`Daemon::start_exe`]. Another long-running program beside them (a Prometheus
/// scraping one) starts with [`Daemon::start_program`].
#[derive(Debug)]
pub struct Daemon {
    /// The process (`ip netns exec`, which execs the daemon, so the PID is the daemon's).
    pub child: Child,
    /// Where its stderr goes.
    pub log: PathBuf,
}

impl Daemon {
    /// Start `role` (`relay` or `proxy`) of this executable in namespace `ns` with `config`,
    /// logging to `log` with [`BENCH_LOG_ENV`]'s filter.
    pub fn start(ns: &str, role: &str, config: &Path, log: PathBuf) -> Result<Daemon> {
        Daemon::start_passing(ns, role, config, log, None)
    }

    /// [`Daemon::start`], handing the daemon `listener` as systemd's socket activation does:
    /// file descriptor 3, `LISTEN_FDS=1`, `LISTEN_PID` the daemon's own (a shell sets it to
    /// its PID and execs `ip netns exec`, which execs the daemon, so the PID stays).
    pub fn start_passing(
        ns: &str,
        role: &str,
        config: &Path,
        log: PathBuf,
        listener: Option<&std::os::fd::OwnedFd>,
    ) -> Result<Daemon> {
        let exe = std::env::current_exe()?;
        Daemon::spawn(
            &exe,
            log_filter(BENCH_LOG_ENV),
            ns,
            role,
            config,
            log,
            listener,
        )
    }

    /// [`Daemon::start`] with `directive` (`target=level`) added to [`BENCH_LOG_ENV`]'s filter.
    pub fn start_adding(
        ns: &str,
        role: &str,
        config: &Path,
        log: PathBuf,
        directive: &str,
    ) -> Result<Daemon> {
        let exe = std::env::current_exe()?;
        let filter = format!("{},{directive}", log_filter(BENCH_LOG_ENV));
        Daemon::spawn(&exe, filter, ns, role, config, log, None)
    }

    /// Start `role` of the `polycorn` binary `exe` in namespace `ns` with `config`, logging to
    /// `log` with the filter in environment variable `log_env` (default `info`).
    pub fn start_exe(
        exe: &Path,
        log_env: &str,
        ns: &str,
        role: &str,
        config: &Path,
        log: PathBuf,
    ) -> Result<Daemon> {
        Daemon::spawn(exe, log_filter(log_env), ns, role, config, log, None)
    }

    /// Start `program` with `args` in namespace `ns`, its stderr going to `log`: a
    /// long-running program other than relay and proxy, stopped on drop as they are.
    pub fn start_program<S: AsRef<std::ffi::OsStr>>(
        ns: &str,
        program: &Path,
        args: &[S],
        log: PathBuf,
    ) -> Result<Daemon> {
        let f = std::fs::File::create(&log).with_context(|| format!("create {}", log.display()))?;
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(f)
            .spawn()
            .with_context(|| format!("start {} in {ns}", program.display()))?;
        Ok(Daemon { child, log })
    }

    fn spawn(
        exe: &Path,
        filter: String,
        ns: &str,
        role: &str,
        config: &Path,
        log: PathBuf,
        listener: Option<&std::os::fd::OwnedFd>,
    ) -> Result<Daemon> {
        let f = std::fs::File::create(&log).with_context(|| format!("create {}", log.display()))?;
        let mut cmd = match listener {
            None => Command::new("ip"),
            Some(_) => {
                let mut c = Command::new("sh");
                c.args([
                    "-c",
                    "export LISTEN_PID=$$ LISTEN_FDS=1; exec \"$@\"",
                    "sh",
                    "ip",
                ]);
                c
            }
        };
        cmd.args(["netns", "exec", ns])
            .arg(exe)
            .args([role, "--config"])
            .arg(config)
            .env("RUST_LOG", filter)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(f);
        if let Some(l) = listener {
            polycorn_net::activation::pass_sockets(&mut cmd, &[std::os::fd::AsRawFd::as_raw_fd(l)])
                .map_err(anyhow::Error::msg)?;
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("start {role} in {ns}"))?;
        Ok(Daemon { child, log })
    }
    /// What it has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    /// The child's PID (CPU accounting).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
    /// Send `sig` now (SIGHUP: what `systemctl reload` sends). Only while the child has not
    /// been reaped ([`Daemon::signal_and_wait`] checks that), or its PID may be another's.
    pub fn signal(&self, sig: Signal) -> Result<()> {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), sig)
            .with_context(|| format!("send {sig} to {}", self.child.id()))
    }
    /// Send `sig` (SIGTERM: what `systemctl stop` sends; SIGKILL: a crash) and wait up to
    /// `within` for the exit: its status, or `None` when the daemon was still running then
    /// (it is killed on drop). The child is reaped, so its PID is never signalled again.
    pub fn signal_and_wait(
        &mut self,
        sig: Signal,
        within: Duration,
    ) -> Result<Option<std::process::ExitStatus>> {
        if let Some(st) = self.child.try_wait()? {
            return Ok(Some(st));
        }
        self.signal(sig)?;
        self.wait_exit(within)
    }
    /// Wait up to `within` for the exit: its status, or `None` when still running then.
    pub fn wait_exit(&mut self, within: Duration) -> Result<Option<std::process::ExitStatus>> {
        let t = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait()? {
                return Ok(Some(st));
            }
            if t.elapsed() >= within {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    /// Wait until the log holds `what` at least `count` times; an error if the daemon exits
    /// first or `until` passes.
    pub fn wait_for(&mut self, what: &str, count: usize, until: Instant) -> Result<()> {
        loop {
            if self.log().matches(what).count() >= count {
                return Ok(());
            }
            if let Some(st) = self.child.try_wait()? {
                bail!("exited ({st}) before `{what}`; log {}", self.log.display());
            }
            if Instant::now() >= until {
                bail!(
                    "no `{what}` x{count} before the workload started; log {}",
                    self.log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // Already reaped (or exited): its PID may belong to another process by now.
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let pid = self.child.id() as i32;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where relay and proxy serve metrics inside their namespaces.
pub const METRICS_ADDR: &str = "127.0.0.1:9100";

/// `GET /metrics` from the daemon listening on [`METRICS_ADDR`] inside namespace `ns`.
pub fn scrape_metrics(ns: &str) -> Result<String> {
    let ns = ns.to_string();
    std::thread::spawn(move || -> Result<String> {
        let _in = polycorn_emu::netns::InNamespace::enter(&ns)?;
        let addr: std::net::SocketAddr = METRICS_ADDR.parse()?;
        polycorn_net::scrape::fetch_metrics(addr)
            .with_context(|| format!("metrics at {addr} in {ns}"))
    })
    .join()
    .map_err(|_| anyhow::anyhow!("metrics scrape thread panicked"))?
}

/// What the emulator forwarded per path (uplink, downlink) and the transits its downlinks
/// recorded, or why it stopped.
type EmuResult = std::result::Result<Forwarded, EmuError>;

/// What a [`TripPlayer`]'s emulator did.
#[derive(Debug, Default)]
pub struct Forwarded {
    /// Counters per path: (uplink, downlink).
    pub stats: Vec<(DirStats, DirStats)>,
    /// Per path, every packet its downlink delivered, in order (empty unless the player was
    /// started with [`TripPlayer::start_recording`]); µs since [`TripPlayer::started_at`].
    pub downlink_transits: Vec<Vec<Delivered>>,
}

/// A trip played in real time on a built testbed: the emulator on its own thread from `t0`, and
/// the trip's context served to the relay over gpsd. Both stop when this is finished or
/// dropped. (`polycorn bench` and `polycorn net soak --trip`.)
pub struct TripPlayer {
    /// When the trip's time 0 was played.
    pub t0: Instant,
    /// The wall-clock time of the emulator's time 0.
    pub started_at: SystemTime,
    stop: Arc<AtomicBool>,
    emulator: Option<std::thread::JoinHandle<EmuResult>>,
    _context: Option<ContextServer>,
}

impl std::fmt::Debug for TripPlayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TripPlayer")
            .field("t0", &self.t0)
            .field("running", &self.emulator.is_some())
            .finish_non_exhaustive()
    }
}

impl TripPlayer {
    /// Start playing `trip` on testbed `spec` (each path's queue `queue`, else the trip's).
    pub fn start(spec: &TestbedSpec, trip: &Trip, queue: Option<QueueLimit>) -> Result<TripPlayer> {
        TripPlayer::play(spec, trip, queue, false)
    }

    /// [`TripPlayer::start`], the emulator recording the transit of every packet each
    /// downlink delivers (for the bench's time budgets; [`TripPlayer::finish_all`] returns
    /// them).
    pub fn start_recording(
        spec: &TestbedSpec,
        trip: &Trip,
        queue: Option<QueueLimit>,
    ) -> Result<TripPlayer> {
        TripPlayer::play(spec, trip, queue, true)
    }

    fn play(
        spec: &TestbedSpec,
        trip: &Trip,
        queue: Option<QueueLimit>,
        record: bool,
    ) -> Result<TripPlayer> {
        let models = models::from_trip(trip, queue)?;
        // Built first, so a context that fails to start still stops the emulator (drop).
        let mut player = TripPlayer::links(spec, &models, record)?;
        player.serve_context(spec, trip)?;
        Ok(player)
    }

    /// Serve `trip`'s context log to the relay of `spec` over gpsd's protocol on
    /// 127.0.0.1:[`GPSD_PORT`], in step with the links, until this player stops.
    pub fn serve_context(&mut self, spec: &TestbedSpec, trip: &Trip) -> Result<()> {
        self._context = Some(ContextServer::start(
            Some(&spec.ns("relay")),
            std::net::SocketAddr::from(([127, 0, 0, 1], GPSD_PORT)),
            trip.context.clone(),
            trip.paths.iter().map(|p| p.name.clone()).collect(),
            self.stop.clone(),
        )?);
        Ok(())
    }

    /// Play only the links `models` on testbed `spec` (no context is served).
    pub fn start_links(spec: &TestbedSpec, models: &[PathModel]) -> Result<TripPlayer> {
        TripPlayer::links(spec, models, false)
    }

    fn links(spec: &TestbedSpec, models: &[PathModel], record: bool) -> Result<TripPlayer> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut emu = Emulator::attach(spec, models, stop.clone())?;
        if record {
            emu.record_downlink_transits();
        }
        let t0 = Instant::now();
        let started_at = emu.started_at();
        let emulator = std::thread::Builder::new()
            .name("emulator".into())
            .spawn(move || {
                let stats = emu.run()?;
                Ok(Forwarded {
                    stats,
                    downlink_transits: emu.take_downlink_transits(),
                })
            })?;
        Ok(TripPlayer {
            t0,
            started_at,
            stop,
            emulator: Some(emulator),
            _context: None,
        })
    }

    /// Whether the emulator has stopped on its own (an error; [`TripPlayer::finish`] says
    /// which).
    pub fn is_finished(&self) -> bool {
        self.emulator.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Stop the emulator and return what it forwarded per path (uplink, downlink).
    pub fn finish(self) -> Result<Vec<(DirStats, DirStats)>> {
        Ok(self.finish_all()?.stats)
    }

    /// Stop the emulator and return what it forwarded and recorded.
    pub fn finish_all(mut self) -> Result<Forwarded> {
        self.stop.store(true, Ordering::Relaxed);
        let t = self.emulator.take().expect("joined once");
        Ok(t.join()
            .map_err(|_| anyhow::anyhow!("emulator thread panicked"))??)
    }
}

impl Drop for TripPlayer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.emulator.take() {
            let _ = t.join();
        }
    }
}

/// Trip seeds of LinkDB's training rides start this far above the replayed trip seed.
pub const LINKDB_SEED_OFFSET: u64 = 1000;

/// Build a LinkDB of `rides` simulated rides of the replayed trip's route (trip seeds from
/// `trip_seed + 1000`, so never the replayed ride) and return the `[linkdb]` settings that read
/// it for the trip's route, carriers and track.
pub fn build_linkdb(
    out: &Path,
    t: &crate::tripgen::TripArgs,
    cfg: &polycorn_link::trip::TripConfig,
    rides: u64,
) -> Result<LinkDbConfig> {
    let db = std::fs::canonicalize(out)?.join("linkdb.sqlite");
    let _ = std::fs::remove_file(&db);
    let url = format!("sqlite:{}", db.display());
    let exe = std::env::current_exe().context("find the polycorn binary")?;
    let first = t.trip_seed.saturating_add(LINKDB_SEED_OFFSET).to_string();
    let o = std::process::Command::new(exe)
        .args([
            "linkdb",
            "import",
            "--db",
            &url,
            "--simulate",
            &rides.to_string(),
        ])
        .args([
            "--preset",
            &t.preset,
            "--route-seed",
            &t.route_seed.to_string(),
        ])
        .args(["--first-trip-seed", &first])
        .output()
        .context("run polycorn linkdb import")?;
    if !o.status.success() {
        bail!(
            "linkdb import failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    Ok(LinkDbConfig {
        db: Some(url),
        model: "paper".into(),
        route: Some(format!("{}/route{}", t.preset, t.route_seed)),
        carriers: cfg.carriers.iter().map(|c| c.name.clone()).collect(),
        track_origin: Some([cfg.origin.0, cfg.origin.1]),
        track_heading_deg: cfg.heading_deg,
        ..LinkDbConfig::default()
    })
}

/// Four namespaces `{name}-c` (passengers), `-r` (relay), `-p` (proxy) and `-s` (server) joined
/// by veth pairs, the relay and proxy by two unshaped paths (`path0`, `path1`): the relay/proxy
/// benchmark's and the soak's network. Any earlier one of that name is removed first; dropping
/// it removes the namespaces.
#[derive(Debug)]
pub struct Topology {
    name: String,
}

impl Topology {
    /// Namespace of role `r` (`c`, `r`, `p` or `s`).
    pub fn ns(&self, r: &str) -> String {
        format!("{}-{r}", self.name)
    }
    /// Build it, first removing an earlier one of that name.
    pub fn up(name: &str) -> Result<Topology> {
        let t = Topology { name: name.into() };
        t.down();
        for r in ["c", "r", "p", "s"] {
            ip(&["netns", "add", &t.ns(r)])?;
            ip_in(&t.ns(r), &["link", "set", "lo", "up"])?;
        }
        let pair = |a: &str, b: &str, dev: &str| -> Result<()> {
            ip(&[
                "link",
                "add",
                "pcnb-tmp-a",
                "netns",
                a,
                "type",
                "veth",
                "peer",
                "name",
                "pcnb-tmp-b",
                "netns",
                b,
            ])?;
            ip_in(a, &["link", "set", "pcnb-tmp-a", "name", dev])?;
            ip_in(b, &["link", "set", "pcnb-tmp-b", "name", dev])?;
            ip_in(a, &["link", "set", dev, "up"])?;
            ip_in(b, &["link", "set", dev, "up"])?;
            Ok(())
        };
        let (c, r, p, s) = (t.ns("c"), t.ns("r"), t.ns("p"), t.ns("s"));
        pair(&c, &r, "lan0")?;
        pair(&p, &s, "wan0")?;
        for i in 0..2 {
            pair(&r, &p, &format!("path{i}"))?;
        }
        ip_in(&c, &["addr", "add", "10.0.1.2/24", "dev", "lan0"])?;
        ip_in(&r, &["addr", "add", "10.0.1.1/24", "dev", "lan0"])?;
        ip_in(&c, &["route", "add", "default", "via", "10.0.1.1"])?;
        ip_in(&p, &["addr", "add", "10.0.2.1/24", "dev", "wan0"])?;
        ip_in(&s, &["addr", "add", "10.0.2.2/24", "dev", "wan0"])?;
        ip_in(&s, &["route", "add", "default", "via", "10.0.2.1"])?;
        for i in 0..2 {
            let dev = format!("path{i}");
            let table = (100 + i).to_string();
            ip_in(
                &r,
                &["addr", "add", &format!("10.100.{i}.1/24"), "dev", &dev],
            )?;
            ip_in(
                &p,
                &["addr", "add", &format!("10.100.{i}.2/24"), "dev", &dev],
            )?;
            ip_in(
                &r,
                &["route", "add", "default", "dev", &dev, "table", &table],
            )?;
            ip_in(
                &r,
                &[
                    "rule",
                    "add",
                    "from",
                    &format!("10.100.{i}.1"),
                    "table",
                    &table,
                ],
            )?;
            ip_in(&r, &["rule", "add", "oif", &dev, "table", &table])?;
        }
        Ok(t)
    }
    fn down(&self) {
        for r in ["c", "r", "p", "s"] {
            let _ = ip(&["netns", "del", &self.ns(r)]);
        }
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        self.down();
    }
}
