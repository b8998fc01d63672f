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
use clap::Args;
use polycorn_emu::netns::{exec_in, ip_in, InNamespace};

use crate::bench::Daemon;
use crate::netbench::Topology;

/// Port of the soak server in the server namespace.
const PORT: u16 = 5202;
/// A daemon may hold this many more file descriptors after the load than before it.
pub const FD_SLACK: usize = 4;
/// `down_len` of an idle connection's request: the server echoes 8-byte pings until EOF.
const ECHO: u64 = u64::MAX;
/// Salt of the upload pattern (so an upload echoed back as a download would not verify).
const UP_SALT: u64 = 0x5eed_0f0a_d0ad_0001;
/// How long one connection may take before it counts as failed.
const CONN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long relay and proxy get to close every flow after the load.
const SETTLE: Duration = Duration::from_secs(20);
/// How long after a restarted daemon has every path up again a connection opened before may
/// still fail as cut by the restart, seconds.
pub const RESTART_GRACE: f64 = 5.0;
/// What `--restart-every` does, in turn: (daemon, killed rather than stopped in order).
const RESTARTS: [(&str, bool); 4] = [
    ("proxy", false),
    ("relay", false),
    ("proxy", true),
    ("relay", true),
];
/// No restart begins this close to the end of the load.
const RESTART_TAIL: Duration = Duration::from_secs(3);
/// How long a daemon gets to exit after SIGTERM, beyond its drain, before it counts as
/// hanging (its stop grace is 2 s).
const STOP_WITHIN: Duration = Duration::from_secs(10);
/// The proxy's `hold_time_s` in the soak's configurations (the default): how long it keeps a
/// killed relay's flows, which the settling after the load must cover.
const PROXY_HOLD_S: f64 = 30.0;

/// `polycorn net soak` options.
#[derive(Args, Debug, Clone)]
pub struct SoakArgs {
    /// Seconds of load.
    #[arg(long, default_value_t = 60.0)]
    pub secs: f64,
    /// Client threads opening connections one after another.
    #[arg(long, default_value_t = 16)]
    pub workers: usize,
    /// Long-lived connections open throughout (pinged every --sample-secs).
    #[arg(long, default_value_t = 32)]
    pub idle: usize,
    /// Passenger addresses the connections come from (round robin over workers).
    #[arg(long, default_value_t = 4)]
    pub users: usize,
    /// Scheduler of relay and proxy (a preset or a spec, as in `polycorn schedulers`).
    #[arg(long, default_value = "polycorn")]
    pub scheduler: String,
    /// Seconds between two samples of the daemons.
    #[arg(long, default_value_t = 5.0)]
    pub sample_secs: f64,
    /// Black one path out every this many seconds, the paths taking turns (0: never). Its
    /// packets are dropped in both directions at the relay, as in a failed handover.
    #[arg(long, default_value_t = 0.0)]
    pub blackout_every: f64,
    /// How long each blackout lasts, seconds.
    #[arg(long, default_value_t = 2.0)]
    pub blackout_secs: f64,
    /// Restart relay or proxy every this many seconds of the load (0: never), in turn: the
    /// proxy stopped in order (SIGTERM), the relay stopped, the proxy killed (SIGKILL), the
    /// relay killed; each started again at once. Connections a restart cuts must fail
    /// promptly and cleanly; every later one must complete.
    #[arg(long, default_value_t = 0.0)]
    pub restart_every: f64,
    /// Hold the relay's passenger listener and the proxy's subflow listener in this process
    /// and pass them to every relay and proxy started, as systemd does with `config example
    /// relay.socket` and `proxy.socket` (socket activation): connections made while the relay
    /// restarts wait in its backlog, and so do the relay's subflows while the proxy restarts.
    /// With --restart-every, a connection opened after a relay was signalled must then
    /// complete.
    #[arg(long)]
    pub hold_listeners: bool,
    /// `drain_s` of relay and proxy: on an orderly stop each lets the connections open at that
    /// moment finish for up to this many seconds before closing (0..=30).
    #[arg(long, default_value_t = 0)]
    pub drain_secs: u64,
    /// Namespace prefix (created and removed).
    #[arg(long, default_value = "pcsk")]
    pub name: String,
    /// Run over the emulated HSR trip (`--preset`, `--route-seed`, `--trip-seed`) instead of
    /// two unshaped veth paths: one path per carrier with the trip's capacity, delay,
    /// handovers and failed-handover blackouts, from the moment the train first passes
    /// 250 km/h; the relay replays the trip's context and both ends predict from a LinkDB of
    /// other rides of the route, as in `polycorn bench`.
    #[arg(long, conflicts_with = "blackout_every")]
    pub trip: bool,
    /// With --trip: both ends record the train context (`[context] record`), the relay into
    /// DIR/relay and the proxy into DIR/proxy (one directory per relay below it), for
    /// `polycorn linkdb import --ride-log`: what the proxy kept against what the relay saw.
    #[arg(long, value_name = "DIR", requires = "trip")]
    pub record: Option<std::path::PathBuf>,
    /// Attack relay and proxy beside the passengers, from a third of --secs on (the first
    /// third is the attack-free baseline): connections to the relay's own addresses from
    /// outside and from the LAN, passengers aiming at the proxy's host, one greedy passenger,
    /// spoofed DNS queries to a resolver that never answers, and a rogue relay with the train's
    /// credential sending data for flows it never opened. The relay runs its default
    /// per-passenger limits (at least 128 passenger addresses then carry the churn). Fails, on
    /// top of the usual checks, if an attack got through, if the passengers' connection set-up
    /// time (to the first byte) under attack exceeds twice the baseline's (median or p90), or
    /// if either end's memory kept growing through the attack.
    #[arg(long, conflicts_with_all = ["trip", "restart_every", "hold_listeners"])]
    pub attack: bool,
    /// The trip (with --trip).
    #[command(flatten)]
    pub trip_args: crate::tripgen::TripArgs,
}

/// Where the soak's traffic goes: two unshaped veth paths, or an emulated trip.
enum Net {
    Veth(Topology),
    Trip(TripNet),
}

/// The testbed of an emulated trip and the trip playing on it; stopped and removed on drop
/// (fields drop in order: the player, then the testbed).
struct TripNet {
    spec: polycorn_emu::testbed::TestbedSpec,
    _player: crate::bench::TripPlayer,
    _teardown: crate::bench::Teardown,
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
fn trip_net(
    args: &SoakArgs,
    dir: &std::path::Path,
) -> Result<(Net, std::path::PathBuf, std::path::PathBuf)> {
    use polycorn_emu::testbed::{self, TestbedSpec};
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
    let linkdb = crate::bench::build_linkdb(dir, t, &cfg, 8)?;
    let sys = crate::bench::system(&format!("polycorn:{}", args.scheduler))?;
    let (relay_cfg, proxy_cfg) =
        crate::bench::write_configs(dir, &sys, paths, Some((&linkdb, true)))?;
    if let Some(rec) = &args.record {
        let rec =
            std::path::absolute(rec).with_context(|| format!("--record {}", rec.display()))?;
        let edit = |file: &std::path::Path, f: &dyn Fn(String) -> Option<String>| -> Result<()> {
            let text = std::fs::read_to_string(file)?;
            let new = f(text).context("the configuration has no [context] to record with")?;
            Ok(std::fs::write(file, new)?)
        };
        let relay_line = format!("[context]\nrecord = {:?}\n", rec.join("relay"));
        edit(&relay_cfg, &|t| {
            t.contains("[context]\n")
                .then(|| t.replacen("[context]\n", &relay_line, 1))
        })?;
        let proxy_table = format!("\n[context]\nrecord = {:?}\n", rec.join("proxy"));
        edit(&proxy_cfg, &|t| Some(t + &proxy_table))?;
    }
    let _ = testbed::down(&spec.name);
    testbed::up(&spec).with_context(|| format!("build testbed `{}`", spec.name))?;
    let teardown = crate::bench::Teardown(spec.name.clone());
    let net = TripNet {
        _player: crate::bench::TripPlayer::start(&spec, &trip, None)?,
        _teardown: teardown,
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
    Ok((Net::Trip(net), relay_cfg, proxy_cfg))
}

/// One reading of a daemon.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Reading {
    /// Resident memory, MiB.
    pub rss_mib: f64,
    /// Open file descriptors.
    pub fds: usize,
    /// Threads.
    pub threads: usize,
    /// `polycorn_flows_open`.
    pub flows_open: f64,
    /// `polycorn_flows_total`.
    pub flows_total: f64,
    /// `polycorn_path_reconnects_total`, summed over paths.
    pub reconnects: f64,
    /// `polycorn_cell_loss_report_delay_seconds`: cumulative counts of the buckets
    /// ([`polycorn_net::metrics::CELL_LOSS_DELAY_BUCKETS`], then `+Inf`), and the sum.
    pub loss_delay: ([f64; LOSS_BUCKETS], f64),
}

/// `polycorn_cell_loss_report_delay_seconds`' buckets with `+Inf`.
const LOSS_BUCKETS: usize = polycorn_net::metrics::CELL_LOSS_DELAY_BUCKETS.len() + 1;

/// The upper bound of bucket `i` of [`Reading::loss_delay`].
fn loss_bucket_le(i: usize) -> f64 {
    polycorn_net::metrics::CELL_LOSS_DELAY_BUCKETS
        .get(i)
        .copied()
        .unwrap_or(f64::INFINITY)
}

/// What `polycorn_cell_loss_report_delay_seconds` says, in a line; `None` without a loss.
fn loss_delay_summary(counts: &[f64; LOSS_BUCKETS], sum: f64) -> Option<String> {
    let buckets: Vec<(f64, f64)> = counts
        .iter()
        .enumerate()
        .map(|(i, c)| (loss_bucket_le(i), *c))
        .collect();
    let n = buckets.last().map(|b| b.1).filter(|n| *n > 0.0)?;
    let within = |q: f64| {
        buckets
            .iter()
            .find(|b| b.1 >= q * n)
            .map_or(f64::INFINITY, |b| b.0)
    };
    let one = buckets.iter().find(|b| b.0 >= 1.0).map_or(n, |b| b.1);
    Some(format!(
        "{n:.0} cell losses reported by the modem monitor, each path silent by then for {:.2} s on average (median at most {} s, p90 at most {} s; {:.0}% within 1 s)",
        sum / n,
        within(0.5),
        within(0.9),
        100.0 * one / n
    ))
}

/// SplitMix64: the byte pattern's generator and the workers' dice.
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Byte `offset` of the pattern `seed`.
fn pattern_byte(seed: u64, offset: u64) -> u8 {
    splitmix(seed ^ (offset / 8).wrapping_mul(0x2545_f491_4f6c_dd1d)).to_le_bytes()
        [(offset % 8) as usize]
}

/// Fill `buf` with the pattern `seed` from `offset`.
fn fill(seed: u64, offset: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern_byte(seed, offset + i as u64);
    }
}

/// The first offset in `data` (which starts at `offset`) that does not match the pattern.
fn mismatch(seed: u64, offset: u64, data: &[u8]) -> Option<u64> {
    data.iter()
        .enumerate()
        .find(|(i, &b)| b != pattern_byte(seed, offset + *i as u64))
        .map(|(i, _)| offset + i as u64)
}

/// The request header: download length, upload length, seed.
fn header(down: u64, up: u64, seed: u64) -> [u8; 24] {
    let mut h = [0u8; 24];
    h[..8].copy_from_slice(&down.to_be_bytes());
    h[8..16].copy_from_slice(&up.to_be_bytes());
    h[16..].copy_from_slice(&seed.to_be_bytes());
    h
}

/// The server's side of one connection.
fn serve(mut s: TcpStream) -> std::io::Result<()> {
    let mut h = [0u8; 24];
    s.read_exact(&mut h)?;
    let word = |i: usize| u64::from_be_bytes(h[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    let (down, up, seed) = (word(0), word(1), word(2));
    if down == ECHO {
        // Idle between pings for as long as the client likes (`--sample-secs`).
        s.set_read_timeout(None)?;
        let mut p = [0u8; 8];
        loop {
            match s.read_exact(&mut p) {
                Ok(()) => s.write_all(&p)?,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0u64;
    while got < up {
        let n = s.read(&mut buf[..(up - got).min(64 * 1024) as usize])?;
        if n == 0 {
            return Ok(());
        }
        if mismatch(seed ^ UP_SALT, got, &buf[..n]).is_some() {
            // Close without an answer: the client reports the upload as corrupted.
            return Ok(());
        }
        got += n as u64;
    }
    let mut sent = 0u64;
    while sent < down {
        let n = (down - sent).min(buf.len() as u64) as usize;
        fill(seed, sent, &mut buf[..n]);
        s.write_all(&buf[..n])?;
        sent += n as u64;
    }
    Ok(())
}

fn start_server(ns: &str) -> Result<()> {
    let ns = ns.to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _g = InNamespace::enter(&ns).expect("enter server namespace");
        let l = TcpListener::bind(("10.0.2.2", PORT)).expect("bind soak server");
        tx.send(()).ok();
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(CONN_TIMEOUT));
                let _ = serve(s);
            });
        }
    });
    rx.recv_timeout(Duration::from_secs(5))
        .context("soak server did not start")?;
    Ok(())
}

/// A connection or idle connection that failed: seconds since the load started when it was
/// opened and when it failed, what failed and how.
#[derive(Debug, Clone, PartialEq)]
struct Failure {
    start: f64,
    end: f64,
    kind: &'static str,
    msg: String,
}

/// Kinds of failure no restart excuses: data that arrived wrong, connections left hanging (a
/// cut connection must be told at once), and an orderly close in the middle of the data, which
/// a passenger cannot tell from the end of a complete answer (a cut connection must be reset,
/// also when the relay crashed: it closes its flows' sockets abortively unless they ended in
/// order).
const NEVER_EXCUSED: [&str; 9] = [
    "wrong byte",
    "extra bytes",
    "wrong ping",
    "upload hung",
    "download hung",
    "close hung",
    "ping hung",
    "short download",
    "ping closed",
];

/// One restart of relay or proxy during the load, seconds since the load started.
#[derive(Debug, Clone, PartialEq)]
struct Restart {
    who: &'static str,
    killed: bool,
    /// The signal.
    at: f64,
    /// The restarted daemon running with every path up again.
    back: Option<f64>,
    /// The first connection opened after the signal that completed.
    first_ok: Option<f64>,
    /// The relay's listener was held across the restart (`--hold-listeners`).
    held: bool,
}

/// With the relay's listener held, how long after the signal a connection may still have been
/// accepted by the relay that was stopping, seconds (its listener closes when the signal is
/// handled).
const HELD_SLACK: f64 = 0.1;

impl Restart {
    /// Whether `f` is what this restart may do to a connection: one open during the restart
    /// (or opened up to [`RESTART_GRACE`] after it was over) that failed as a cut connection
    /// should.
    ///
    /// With the relay's listener held, only connections open at the signal may be cut: later
    /// ones wait in the backlog for the next relay.
    fn excuses(&self, f: &Failure) -> bool {
        let until = if self.held {
            self.at + HELD_SLACK
        } else {
            self.back.unwrap_or(f64::INFINITY) + RESTART_GRACE
        };
        !NEVER_EXCUSED.contains(&f.kind) && f.start <= until && f.end >= self.at
    }
}

/// The failures no restart excuses, and per restart those it excused (a failure goes to the
/// last restart that excuses it).
fn sort_failures(failures: &[Failure], restarts: &[Restart]) -> (Vec<Failure>, Vec<Vec<Failure>>) {
    let mut cut = vec![Vec::new(); restarts.len()];
    let mut left = Vec::new();
    for f in failures {
        match restarts.iter().rposition(|r| r.excuses(f)) {
            Some(i) => cut[i].push(f.clone()),
            None => left.push(f.clone()),
        }
    }
    (left, cut)
}

/// Per kind, the count and the first message of `failures`.
fn error_kinds(failures: &[Failure]) -> Vec<String> {
    let mut kinds: BTreeMap<&str, (u64, &str)> = BTreeMap::new();
    for f in failures {
        kinds.entry(f.kind).or_insert((0, &f.msg)).0 += 1;
    }
    kinds
        .iter()
        .map(|(k, (n, first))| format!("{k}: {n} (first: {first})"))
        .collect()
}

/// What the clients counted.
struct Counts {
    /// When the load started.
    t0: Instant,
    started: AtomicU64,
    done: AtomicU64,
    failed: AtomicU64,
    bytes: AtomicU64,
    pings: AtomicU64,
    ping_failures: AtomicU64,
    /// Idle connections that answered every ping.
    idle_ok: AtomicU64,
    /// Idle connections opened again after one failed.
    idle_reopened: AtomicU64,
    /// Every failure.
    failures: Mutex<Vec<Failure>>,
    /// Completion times of connections that downloaded ≤ 16 KiB, µs.
    small_us: Mutex<Vec<u64>>,
    /// Per completed connection: when it started (seconds into the load) and its set-up time
    /// until the first byte of its download, µs.
    setup_us: Mutex<Vec<(f64, u64)>>,
    /// The restarts so far.
    restarts: Mutex<Vec<Restart>>,
}

impl Counts {
    fn new(t0: Instant) -> Counts {
        Counts {
            t0,
            started: AtomicU64::new(0),
            done: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            pings: AtomicU64::new(0),
            ping_failures: AtomicU64::new(0),
            idle_ok: AtomicU64::new(0),
            idle_reopened: AtomicU64::new(0),
            failures: Mutex::new(Vec::new()),
            small_us: Mutex::new(Vec::new()),
            setup_us: Mutex::new(Vec::new()),
            restarts: Mutex::new(Vec::new()),
        }
    }

    /// Seconds since the load started.
    fn secs(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.t0).as_secs_f64()
    }

    /// A connection opened at `start` failed now.
    fn fail(&self, start: Instant, kind: &'static str, msg: String) {
        let f = Failure {
            start: self.secs(start),
            end: self.secs(Instant::now()),
            kind,
            msg,
        };
        self.failures.lock().expect("not poisoned").push(f);
    }

    /// A connection opened at `start` completed now: the first since a restart's signal?
    fn completed(&self, start: Instant) {
        let (start, now) = (self.secs(start), self.secs(Instant::now()));
        for r in self.restarts.lock().expect("not poisoned").iter_mut().rev() {
            if r.first_ok.is_some() {
                break;
            }
            if start >= r.at {
                r.first_ok = Some(now);
            }
        }
    }
}

/// The failure kind of an I/O error in `stage`: a time-out means the connection hung.
fn io_kind(stage: &'static str, e: &std::io::Error) -> &'static str {
    use std::io::ErrorKind::{TimedOut, UnexpectedEof, WouldBlock};
    match (stage, e.kind()) {
        ("upload", WouldBlock | TimedOut) => "upload hung",
        ("download", WouldBlock | TimedOut) => "download hung",
        ("no close", WouldBlock | TimedOut) => "close hung",
        ("ping", WouldBlock | TimedOut) => "ping hung",
        ("ping", UnexpectedEof) => "ping closed",
        _ => stage,
    }
}

fn user_addr(u: usize) -> String {
    format!("10.0.1.{}", 10 + u)
}

fn connect(from: &str) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    let src: SocketAddr = format!("{from}:0").parse().expect("literal address");
    s.bind(&src.into())?;
    let dst: SocketAddr = SocketAddr::from(([10, 0, 2, 2], PORT));
    s.connect_timeout(&dst.into(), Duration::from_secs(10))?;
    let s: TcpStream = s.into();
    s.set_read_timeout(Some(CONN_TIMEOUT))?;
    s.set_write_timeout(Some(CONN_TIMEOUT))?;
    Ok(s)
}

/// Download sizes (bytes, weight) and upload sizes of the churn.
const DOWN_SIZES: [(u64, u64); 4] = [(1 << 10, 50), (16 << 10, 30), (256 << 10, 15), (1 << 20, 5)];
const UP_SIZES: [(u64, u64); 3] = [(100, 70), (4 << 10, 25), (64 << 10, 5)];

fn pick(sizes: &[(u64, u64)], die: u64) -> u64 {
    let total: u64 = sizes.iter().map(|s| s.1).sum();
    let mut r = die % total;
    for &(v, w) in sizes {
        if r < w {
            return v;
        }
        r -= w;
    }
    sizes[0].0
}

/// One churn connection: its set-up time (connect to the first byte of the download), or the
/// error kind and message if it failed.
fn one_connection(
    from: &str,
    seed: u64,
    down: u64,
    up: u64,
) -> Result<Duration, (&'static str, String)> {
    let t = Instant::now();
    let mut first_byte = None;
    let mut s = connect(from).map_err(|e| ("connect", e.to_string()))?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut req = header(down, up, seed).to_vec();
    let mut off = 0u64;
    while off < up {
        let n = (up - off).min(buf.len() as u64) as usize;
        fill(seed ^ UP_SALT, off, &mut buf[..n]);
        req.extend_from_slice(&buf[..n]);
        off += n as u64;
    }
    s.write_all(&req)
        .map_err(|e| (io_kind("upload", &e), e.to_string()))?;
    let mut got = 0u64;
    while got < down {
        let n = s.read(&mut buf).map_err(|e| {
            (
                io_kind("download", &e),
                format!("after {got} of {down} bytes: {e}"),
            )
        })?;
        if n == 0 && got == 0 {
            return Err((
                "no answer",
                format!("closed before the first of {down} bytes (upload of {up} bytes rejected?)"),
            ));
        }
        if n == 0 {
            return Err((
                "short download",
                format!("closed in order after {got} of {down} bytes"),
            ));
        }
        if n as u64 > down - got {
            return Err((
                "extra bytes",
                format!("{} bytes past {down}", n as u64 - (down - got)),
            ));
        }
        if let Some(at) = mismatch(seed, got, &buf[..n]) {
            return Err(("wrong byte", format!("at offset {at} of {down}")));
        }
        first_byte.get_or_insert_with(|| t.elapsed());
        got += n as u64;
    }
    match s.read(&mut buf) {
        Ok(0) => Ok(first_byte.unwrap_or_else(|| t.elapsed())),
        Ok(n) => Err(("extra bytes", format!("{n} bytes past {down}"))),
        Err(e) => Err((io_kind("no close", &e), format!("after {down} bytes: {e}"))),
    }
}

/// A worker opening connections one after another until `until`, from the passenger
/// addresses `id`, `id + workers`, `id + 2 × workers`, … in turn (modulo `users`).
fn worker(
    ns: String,
    (id, workers): (u64, usize),
    users: usize,
    until: Instant,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
) -> Result<()> {
    let _g = InNamespace::enter(&ns)?;
    let mut k = 0u64;
    while Instant::now() < until && !stop.load(Ordering::Relaxed) {
        let from = user_addr((id as usize + k as usize * workers) % users);
        let seed = splitmix((id << 40) ^ k);
        k += 1;
        let down = pick(&DOWN_SIZES, splitmix(seed ^ 1));
        let up = pick(&UP_SIZES, splitmix(seed ^ 2));
        counts.started.fetch_add(1, Ordering::Relaxed);
        let t = Instant::now();
        match one_connection(&from, seed, down, up) {
            Ok(setup) => {
                counts
                    .setup_us
                    .lock()
                    .expect("not poisoned")
                    .push((counts.secs(t), setup.as_micros() as u64));
                counts.done.fetch_add(1, Ordering::Relaxed);
                counts.completed(t);
                counts.bytes.fetch_add(down + up, Ordering::Relaxed);
                if down <= 16 << 10 {
                    let us = t.elapsed().as_micros() as u64;
                    counts.small_us.lock().expect("not poisoned").push(us);
                }
            }
            Err((kind, msg)) => {
                counts.failed.fetch_add(1, Ordering::Relaxed);
                counts.fail(t, kind, format!("{from}: {msg}"));
            }
        }
    }
    Ok(())
}

/// One long-lived connection of [`idle_conns`].
struct Idle {
    conn: Option<TcpStream>,
    opened: Instant,
    /// Every ping of every connection in this slot answered so far.
    clean: bool,
}

/// Open idle connection `i`, counting a failure.
fn open_idle(i: usize, users: usize, counts: &Counts) -> Option<TcpStream> {
    counts.started.fetch_add(1, Ordering::Relaxed);
    let from = user_addr(i % users);
    let t = Instant::now();
    let c = connect(&from).and_then(|mut s| {
        s.write_all(&header(ECHO, 0, i as u64))?;
        Ok(s)
    });
    match c {
        Ok(s) => Some(s),
        Err(e) => {
            counts.failed.fetch_add(1, Ordering::Relaxed);
            counts.fail(t, "idle connect", format!("{from}: {e}"));
            None
        }
    }
}

/// The long-lived connections: opened at once, pinged every `every` until `stop`. One that
/// failed is opened again at the next round, as a chat app reconnects (and the failure
/// counted).
fn idle_conns(
    ns: String,
    n: usize,
    users: usize,
    every: Duration,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
) -> Result<()> {
    let _g = InNamespace::enter(&ns)?;
    let mut slots: Vec<Idle> = (0..n)
        .map(|i| Idle {
            opened: Instant::now(),
            conn: open_idle(i, users, &counts),
            clean: true,
        })
        .collect();
    for s in &mut slots {
        s.clean = s.conn.is_some();
    }
    let mut round = 0u64;
    loop {
        let next = Instant::now() + every;
        while Instant::now() < next {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let last = stop.load(Ordering::Relaxed);
        round += 1;
        for (i, slot) in slots.iter_mut().enumerate() {
            let Some(s) = slot.conn.as_mut() else {
                // Failed before: open it again (not after the load: nothing would ping it).
                if !last {
                    slot.opened = Instant::now();
                    slot.conn = open_idle(i, users, &counts);
                    counts.idle_reopened.fetch_add(1, Ordering::Relaxed);
                    if slot.conn.is_none() {
                        // No connection gets through now: the others would wait as long.
                        break;
                    }
                }
                continue;
            };
            let ping = (round << 32 | i as u64).to_be_bytes();
            let mut back = [0u8; 8];
            let r = s.write_all(&ping).and_then(|()| s.read_exact(&mut back));
            counts.pings.fetch_add(1, Ordering::Relaxed);
            let failed = match r {
                Ok(()) if back == ping => None,
                Ok(()) => Some(("wrong ping", String::new())),
                Err(e) => Some((io_kind("ping", &e), format!(": {e}"))),
            };
            if let Some((kind, e)) = failed {
                counts.ping_failures.fetch_add(1, Ordering::Relaxed);
                counts.fail(
                    slot.opened,
                    kind,
                    format!("connection {i}, round {round}{e}"),
                );
                slot.conn = None;
                slot.clean = false;
            }
        }
        if last {
            break;
        }
    }
    let clean = slots.iter().filter(|s| s.clean).count() as u64;
    counts.idle_ok.store(clean, Ordering::Relaxed);
    Ok(())
}

/// Every `every`, drop everything on one path (in turn) at the relay for `secs`, until `stop`.
/// Returns how many blackouts there were.
fn blackouts(
    relay_ns: String,
    every: Duration,
    secs: Duration,
    stop: Arc<AtomicBool>,
) -> Result<u64> {
    let nft = |args: &str| -> Result<()> {
        exec_in(&relay_ns, "nft", &[args])
            .map(drop)
            .with_context(|| format!("nft {args} in {relay_ns}"))
    };
    nft("add table inet polycorn_soak")?;
    nft("add chain inet polycorn_soak out { type filter hook output priority 0 ; }")?;
    nft("add chain inet polycorn_soak in { type filter hook input priority 0 ; }")?;
    let wait = |d: Duration| -> bool {
        let until = Instant::now() + d;
        while Instant::now() < until {
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    };
    let mut n = 0u64;
    while wait(every.saturating_sub(secs)) {
        let dev = format!("path{}", n % 2);
        nft(&format!(
            "add rule inet polycorn_soak out oifname \"{dev}\" drop"
        ))?;
        nft(&format!(
            "add rule inet polycorn_soak in iifname \"{dev}\" drop"
        ))?;
        n += 1;
        wait(secs);
        nft("flush chain inet polycorn_soak out")?;
        nft("flush chain inet polycorn_soak in")?;
    }
    Ok(n)
}

/// Resident memory, descriptors and threads of `pid` from /proc; flows from its metrics.
fn read_daemon(pid: u32, ns: &str) -> Result<Reading> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status (did the daemon exit?)"))?;
    let field = |name: &str| -> f64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .with_context(|| format!("list /proc/{pid}/fd"))?
        .count();
    let samples = polycorn_net::scrape::parse_samples(&crate::bench::scrape_metrics(ns)?)
        .with_context(|| format!("metrics of the daemon in {ns}"))?;
    let named = |name: &'static str| samples.iter().filter(move |x| x.name == name);
    // NaN when the daemon did not report it, so it never passes for a match.
    let metric = |name| named(name).next().map_or(f64::NAN, |x| x.value);
    Ok(Reading {
        rss_mib: field("VmRSS:") / 1024.0,
        fds,
        threads: field("Threads:") as usize,
        flows_open: metric("polycorn_flows_open"),
        flows_total: metric("polycorn_flows_total"),
        reconnects: named("polycorn_path_reconnects_total")
            .map(|x| x.value)
            .sum(),
        loss_delay: {
            let mut counts = [0.0; LOSS_BUCKETS];
            for x in named("polycorn_cell_loss_report_delay_seconds_bucket") {
                let le = match x.label("le") {
                    Some("+Inf") => f64::INFINITY,
                    Some(v) => v.parse().unwrap_or(f64::NAN),
                    None => f64::NAN,
                };
                // One series per relay: summed.
                if let Some(i) = (0..LOSS_BUCKETS).find(|&i| loss_bucket_le(i) == le) {
                    counts[i] += x.value;
                }
            }
            (
                counts,
                named("polycorn_cell_loss_report_delay_seconds_sum")
                    .map(|x| x.value)
                    .sum(),
            )
        },
    })
}

/// The `q`-quantile of durations in µs, in ms ([`polycorn_link::trip::quantile`]'s nearest rank; NaN when empty).
fn percentile(us: &[u64], q: f64) -> f64 {
    let mut ms: Vec<f64> = us.iter().map(|&u| u as f64 / 1000.0).collect();
    polycorn_link::trip::quantile(&mut ms, q)
}

fn row(t: f64, counts: &Counts, relay: &Reading, proxy: &Reading) {
    println!(
        "{t:>6.0} {:>8} {:>6} {:>8.1} {:>5} {:>6} {:>8.1} {:>5} {:>6}",
        counts.done.load(Ordering::Relaxed),
        counts.failed.load(Ordering::Relaxed) + counts.ping_failures.load(Ordering::Relaxed),
        relay.rss_mib,
        relay.fds,
        relay.flows_open,
        proxy.rss_mib,
        proxy.fds,
        proxy.flows_open,
    );
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

/// Relay and proxy of a soak, restarted in place by `--restart-every`.
struct Pair {
    relay: Daemon,
    proxy: Daemon,
    relay_ns: String,
    proxy_ns: String,
    relay_cfg: std::path::PathBuf,
    proxy_cfg: std::path::PathBuf,
    dir: std::path::PathBuf,
    paths: usize,
    /// Seconds given a (re)started daemon to run with every path up.
    ready_s: u64,
    /// Per daemon (relay, proxy): runs so far, and the flows and subflow reconnections the
    /// runs before the current one counted (up to their last reading).
    runs: [u32; 2],
    counted: [(f64, f64); 2],
    /// The relay's listener, held across its restarts (`--hold-listeners`).
    held: Option<std::os::fd::OwnedFd>,
    /// The proxy's subflow listener, likewise.
    held_proxy: Option<std::os::fd::OwnedFd>,
    /// Both daemons' `drain_s`.
    drain_s: u64,
}

/// The log of `who`'s `run`-th run in `dir`: `relay.log`, then `relay.2.log`, …
fn run_log(dir: &std::path::Path, who: &str, run: u32) -> std::path::PathBuf {
    dir.join(if run == 1 {
        format!("{who}.log")
    } else {
        format!("{who}.{run}.log")
    })
}

/// Start `who` (relay or proxy) in `ns`, handing it `held` if given, and wait until it runs
/// (and took the listener it was handed).
fn start_daemon(
    ns: &str,
    who: &str,
    config: &std::path::Path,
    log: std::path::PathBuf,
    held: Option<&std::os::fd::OwnedFd>,
    until: Instant,
) -> Result<Daemon> {
    let mut d = Daemon::start_passing(ns, who, config, log, held)?;
    d.wait_for(&format!("{who} running"), 1, until)?;
    if held.is_some() {
        // The line of the listener that took it (not the start's "listeners passed by …").
        let took = if who == "proxy" {
            "proxy listening, socket passed by systemd"
        } else {
            "listener, passed by systemd"
        };
        d.wait_for(took, 1, until)
            .with_context(|| format!("the {who} did not take the listener it was passed"))?;
    }
    Ok(d)
}

impl Pair {
    fn start(&mut self, who: &str) -> Result<()> {
        let i = usize::from(who == "proxy");
        self.runs[i] += 1;
        let log = run_log(&self.dir, who, self.runs[i]);
        let until = Instant::now() + Duration::from_secs(self.ready_s);
        if who == "proxy" {
            let held = self.held_proxy.as_ref();
            self.proxy = start_daemon(&self.proxy_ns, who, &self.proxy_cfg, log, held, until)?;
            if self.runs[i] > 1 {
                // The relay's paths back on the new proxy.
                self.proxy.wait_for("subflow up", self.paths, until)?;
            }
        } else {
            let held = self.held.as_ref();
            self.relay = start_daemon(&self.relay_ns, who, &self.relay_cfg, log, held, until)?;
            self.relay.wait_for("subflow up", self.paths, until)?;
        }
        Ok(())
    }

    fn read(&self, who: &str) -> Result<Reading> {
        if who == "proxy" {
            read_daemon(self.proxy.pid(), &self.proxy_ns)
        } else {
            read_daemon(self.relay.pid(), &self.relay_ns)
        }
    }

    /// Restart `who` (`killed`: SIGKILL, else SIGTERM and a wait for the exit). `base` is the
    /// reading its flow count started from. Returns a problem with the stop, if any, and the
    /// line that describes it.
    fn restart(
        &mut self,
        who: &'static str,
        killed: bool,
        base: &mut Reading,
        counts: &Counts,
    ) -> Result<(Option<String>, String)> {
        use nix::sys::signal::Signal;
        let i = usize::from(who == "proxy");
        let before = self.read(who)?;
        self.counted[i].0 += before.flows_total - base.flows_total;
        self.counted[i].1 += before.reconnects - base.reconnects;
        // A new process counts from 0.
        *base = Reading {
            flows_total: 0.0,
            reconnects: 0.0,
            ..before
        };
        let t = Instant::now();
        counts.restarts.lock().expect("not poisoned").push(Restart {
            who,
            killed,
            at: counts.secs(t),
            back: None,
            first_ok: None,
            held: who == "relay" && self.held.is_some(),
        });
        let d = if who == "proxy" {
            &mut self.proxy
        } else {
            &mut self.relay
        };
        let mut problem = None;
        let how = if killed {
            d.signal_and_wait(Signal::SIGKILL, Duration::from_secs(5))?
                .context("no exit within 5 s of SIGKILL")?;
            "killed (SIGKILL)".to_string()
        } else {
            let within = STOP_WITHIN + Duration::from_secs(self.drain_s);
            match d.signal_and_wait(Signal::SIGTERM, within)? {
                Some(st) => {
                    if !st.success() {
                        problem = Some(format!("the {who} exited with {st} when stopped"));
                    }
                    format!(
                        "stopped (SIGTERM): exited in {:.2} s, {st}",
                        t.elapsed().as_secs_f64()
                    )
                }
                None => {
                    problem = Some(format!(
                        "the {who} did not exit within {} s of SIGTERM",
                        within.as_secs()
                    ));
                    d.signal_and_wait(Signal::SIGKILL, Duration::from_secs(5))?;
                    format!("did not exit within {} s of SIGTERM", within.as_secs())
                }
            }
        };
        self.start(who)
            .with_context(|| format!("restart the {who} after it was {how}"))?;
        let back = Instant::now();
        if let Some(r) = counts.restarts.lock().expect("not poisoned").last_mut() {
            r.back = Some(counts.secs(back));
        }
        let line = format!(
            "restart at {:.1} s: {who} {how}; running with every path up {:.2} s after the signal",
            counts.secs(t),
            (back - t).as_secs_f64()
        );
        Ok((problem, line))
    }

    /// Every log file of `who`'s runs.
    fn logs(&self, who: &str) -> Vec<std::path::PathBuf> {
        let i = usize::from(who == "proxy");
        (1..=self.runs[i])
            .map(|n| run_log(&self.dir, who, n))
            .collect()
    }
}

/// Adds `drain_s = SECS` to `section` of the configuration file `file`.
fn set_drain(file: &std::path::Path, section: &str, secs: u64) -> Result<()> {
    let text = std::fs::read_to_string(file)?;
    let head = format!("{section}\n");
    if !text.contains(&head) {
        bail!("{}: no {section} section to add drain_s to", file.display());
    }
    let text = text.replacen(&head, &format!("{head}drain_s = {secs}\n"), 1);
    std::fs::write(file, text)?;
    Ok(())
}

/// The transparent listener of the relays the soak starts (`bench::write_configs`).
const RELAY_TPROXY: &str = "0.0.0.0:7070";
/// The subflow listener of the proxies the soak starts (both topologies' configurations).
const PROXY_LISTEN: &str = "0.0.0.0:7700";

/// A listener on `addr` in namespace `ns`, as systemd's socket unit makes it (`Backlog=1024`;
/// `transparent`: `Transparent=yes`), for relays or proxies to be handed.
fn hold_listener(ns: &str, addr: &str, transparent: bool) -> Result<std::os::fd::OwnedFd> {
    use socket2::{Domain, Socket, Type};
    let addr: std::net::SocketAddr = addr.parse()?;
    let _in = polycorn_emu::netns::InNamespace::enter(ns)?;
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    if transparent {
        s.set_ip_transparent(true)?;
    }
    s.bind(&addr.into())
        .with_context(|| format!("bind {addr} in {ns}"))?;
    s.listen(1024)?;
    Ok(s.into())
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
    let (topo, relay_cfg, proxy_cfg) = if args.trip {
        trip_net(args, dir)?
    } else {
        let (relay_cfg, proxy_cfg) = crate::netbench::write_configs(
            dir,
            "polycorn",
            &args.scheduler,
            Some(crate::bench::METRICS_ADDR),
        )?;
        (Net::Veth(Topology::up(&args.name)?), relay_cfg, proxy_cfg)
    };
    if args.drain_secs > 0 {
        set_drain(&relay_cfg, "[relay]", args.drain_secs)?;
        set_drain(&proxy_cfg, "[proxy]", args.drain_secs)?;
    }
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
        // The relay's default limits, and a DNS service whose resolver never answers.
        let text = std::fs::read_to_string(&relay_cfg)?;
        let text = text.replace(crate::netbench::PASSENGER_LIMITS_OFF, "\n")
            + &format!(
                "\n[dns]\nlisten = \"{}\"\nupstream = \"{}\"\n",
                crate::attack::RELAY_DNS,
                crate::attack::SILENT_DNS
            );
        std::fs::write(&relay_cfg, text)?;
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

/// The passengers' connection set-up times (to the first byte) before the attacks and under
/// them (from 5 s after they started): one line, and a problem when the median or the p90
/// under attack is more than twice the baseline's.
fn setup_under_attack(
    setup: &[(f64, u64)],
    attack_at: f64,
    load_secs: f64,
) -> (String, Option<String>) {
    let window = |from: f64, to: f64| {
        let mut v: Vec<u64> = setup
            .iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .map(|(_, us)| *us)
            .collect();
        v.sort_unstable();
        v
    };
    let (base, hit) = (window(0.0, attack_at), window(attack_at + 5.0, load_secs));
    // `percentile` turns µs into ms.
    let ms = |v: &[u64], q: f64| percentile(v, q);
    let line = format!(
        "connection set-up (to the first byte): before the attacks p50 {:.1} ms, p90 {:.1} ms \
         ({} connections); under them p50 {:.1} ms, p90 {:.1} ms ({} connections)",
        ms(&base, 0.5),
        ms(&base, 0.9),
        base.len(),
        ms(&hit, 0.5),
        ms(&hit, 0.9),
        hit.len()
    );
    let problem = if base.is_empty() || hit.is_empty() {
        Some("too few connections before or under the attacks to compare set-up times".into())
    } else {
        [("p50", 0.5), ("p90", 0.9)]
            .into_iter()
            .find(|&(_, q)| ms(&hit, q) > 2.0 * ms(&base, q))
            .map(|(name, q)| {
                format!(
                    "connection set-up {name} under attack {:.1} ms, more than twice the \
                     baseline's {:.1} ms",
                    ms(&hit, q),
                    ms(&base, q)
                )
            })
    };
    (line, problem)
}

/// Each end's resident memory through the attacks: the peak of their second half against
/// the first's. A problem when it grew by more than a quarter plus 16 MiB (a leak, or a
/// buffer without a bound, grows with the attack's length; an allocator keeping its peak
/// does not).
fn memory_under_attack(memory: &[(f64, f64, f64)], attack_at: f64) -> (String, Option<String>) {
    let under: Vec<_> = memory.iter().filter(|m| m.0 >= attack_at).collect();
    let (first, second) = under.split_at(under.len() / 2);
    let peak = |v: &[&(f64, f64, f64)], relay: bool| {
        v.iter()
            .map(|m| if relay { m.1 } else { m.2 })
            .fold(0.0, f64::max)
    };
    let mut line = String::from("memory under attack (peak of its first half → second half):");
    let mut problem = None;
    for (who, relay) in [("relay", true), ("proxy", false)] {
        let (a, b) = (peak(first, relay), peak(second, relay));
        line += &format!(" {who} {a:.1} → {b:.1} MiB;");
        if !first.is_empty() && b > a * 1.25 + 16.0 {
            problem = Some(format!(
                "{who}'s memory kept growing under attack: {a:.1} MiB, then {b:.1} MiB"
            ));
        }
    }
    (line, problem)
}

/// Relay and proxy speak only to each other here, so a protocol violation in `who`'s log
/// (a subflow torn down for a frame the session refused) is a bug, even when reinjection
/// hid it from the passengers: one problem naming how many and the first.
fn protocol_violations(who: &str, log: &std::path::Path) -> Result<Option<String>> {
    let text = std::fs::read_to_string(log)
        .with_context(|| format!("read {who} log {}", log.display()))?;
    let mut hits = text.lines().filter(|l| l.contains("protocol violation"));
    Ok(hits.next().map(|first| {
        format!(
            "{who} logged {} protocol violation(s) between relay and proxy (first: {})",
            1 + hits.count(),
            first.trim()
        )
    }))
}

/// What went wrong in a soak: failed connections or pings (`errors`: per kind, count and the
/// first message), and per daemon (`name`, reading before the load, reading after it settled,
/// passenger connections it counted over all its runs) a count of connections other than the
/// clients' (more than the clients' when `restarted`: a killed run's last flows go uncounted),
/// flows left open, or more descriptors.
fn judge(
    started: u64,
    failed: u64,
    ping_failures: u64,
    errors: &[String],
    daemons: &[(&str, Reading, Reading, f64)],
    restarted: bool,
) -> Vec<String> {
    let mut problems = Vec::new();
    if failed + ping_failures > 0 {
        problems.push(format!(
            "{failed} of {started} connections and {ping_failures} pings failed — {}",
            errors.join("; ")
        ));
    }
    for &(who, before, after, opened) in daemons {
        if restarted && opened.is_finite() && opened <= started as f64 {
            // What a killed run counted after its last reading is lost with it.
        } else if opened != started as f64 {
            problems.push(format!(
                "{who} counted {opened:.0} passenger connections, the clients opened {started}"
            ));
        }
        if after.flows_open != 0.0 {
            problems.push(format!(
                "{who} still had {:.0} flows open {} s after every connection closed",
                after.flows_open,
                SETTLE.as_secs()
            ));
        }
        if after.fds > before.fds + FD_SLACK {
            problems.push(format!(
                "{who} holds {} file descriptors after the load, {} before",
                after.fds, before.fds
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_is_checked_from_any_offset() {
        let mut a = vec![0u8; 100];
        fill(7, 0, &mut a);
        assert_eq!(mismatch(7, 0, &a), None);
        assert_eq!(mismatch(7, 30, &a[30..]), None);
        // A different seed, a shifted offset or one flipped byte is caught where it is.
        assert_eq!(mismatch(8, 0, &a), Some(0));
        assert!(mismatch(7, 1, &a[..50]).is_some());
        a[42] ^= 1;
        assert_eq!(mismatch(7, 0, &a), Some(42));
        // The upload's salt makes it a different pattern.
        let mut up = vec![0u8; 16];
        fill(7 ^ UP_SALT, 0, &mut up);
        assert_ne!(&up[..], &a[..16]);
    }

    #[test]
    fn sizes_follow_their_weights() {
        let mut n = BTreeMap::new();
        for k in 0..10_000u64 {
            *n.entry(pick(&DOWN_SIZES, splitmix(k))).or_insert(0u32) += 1;
        }
        // 50 / 30 / 15 / 5 %, within 2 points.
        for (size, w) in DOWN_SIZES {
            let share = f64::from(n[&size]) / 100.0;
            assert!((share - w as f64).abs() < 2.0, "{size}: {share}% for {w}%");
        }
    }

    #[test]
    fn cell_loss_delays_are_summarised_from_the_histogram() {
        // Buckets 0.25, 0.5, 0.75, 1, 1.25, 1.5, 2, 3, 5, 10, +Inf (cumulative).
        let counts = [0.0, 1.0, 4.0, 8.0, 9.0, 9.0, 10.0, 10.0, 10.0, 10.0, 10.0];
        assert_eq!(
            loss_delay_summary(&counts, 8.0).unwrap(),
            "10 cell losses reported by the modem monitor, each path silent by then for 0.80 s \
             on average (median at most 1 s, p90 at most 1.25 s; 80% within 1 s)"
        );
        assert_eq!(loss_delay_summary(&[0.0; LOSS_BUCKETS], 0.0), None);
    }

    #[test]
    fn judge_names_every_leak_and_miscount() {
        let before = Reading {
            rss_mib: 10.0,
            fds: 20,
            threads: 3,
            flows_open: 0.0,
            flows_total: 5.0,
            reconnects: 0.0,
            loss_delay: Default::default(),
        };
        let clean = Reading {
            fds: 20 + FD_SLACK,
            flows_total: 105.0,
            ..before
        };
        let d = |who, after: Reading| (who, before, after, after.flows_total - before.flows_total);
        assert!(judge(100, 0, 0, &[], &[d("relay", clean)], false).is_empty());
        let leaky = Reading {
            fds: 21 + FD_SLACK,
            flows_open: 2.0,
            flows_total: 104.0,
            ..before
        };
        let p = judge(
            100,
            1,
            0,
            &["connect: 1 (first: refused)".into()],
            &[d("relay", clean), d("proxy", leaky)],
            false,
        );
        assert_eq!(p.len(), 4, "{p:?}");
        assert!(
            p[0].contains("1 of 100 connections") && p[0].contains("refused"),
            "{p:?}"
        );
        assert!(p[1].contains("proxy counted 99"), "{p:?}");
        assert!(p[2].contains("2 flows open"), "{p:?}");
        assert!(
            p[3].contains(&format!("{} file descriptors", 21 + FD_SLACK)),
            "{p:?}"
        );
        // A metric the daemon did not report (NaN) never passes for a match.
        let silent = Reading {
            flows_open: f64::NAN,
            flows_total: f64::NAN,
            ..before
        };
        assert_eq!(judge(1, 0, 0, &[], &[d("relay", silent)], false).len(), 2);
        assert_eq!(judge(1, 0, 0, &[], &[d("relay", silent)], true).len(), 2);
        // Restarted: a killed run's last flows go uncounted, so fewer pass; more never do.
        assert!(judge(100, 0, 0, &[], &[d("proxy", leaky)], true).len() == 2);
        let more = Reading {
            flows_total: 106.0,
            ..clean
        };
        let p = judge(100, 0, 0, &[], &[d("proxy", more)], true);
        assert!(p.len() == 1 && p[0].contains("proxy counted 101"), "{p:?}");
    }

    fn failure(start: f64, end: f64, kind: &'static str) -> Failure {
        Failure {
            start,
            end,
            kind,
            msg: String::new(),
        }
    }

    #[test]
    fn a_restart_excuses_only_what_it_may_do_to_a_connection() {
        let stop = Restart {
            who: "proxy",
            killed: false,
            at: 10.0,
            back: Some(11.0),
            first_ok: None,
            held: false,
        };
        // Open across the restart, or opened up to RESTART_GRACE after it: cut, excused.
        assert!(stop.excuses(&failure(9.0, 10.2, "download")));
        assert!(stop.excuses(&failure(2.0, 15.0, "ping")));
        assert!(stop.excuses(&failure(10.5, 12.0, "connect")));
        assert!(stop.excuses(&failure(11.0 + RESTART_GRACE, 20.0, "upload")));
        // Over before the signal, or opened once the restart was long over: not this one's.
        assert!(!stop.excuses(&failure(5.0, 9.9, "download")));
        assert!(!stop.excuses(&failure(11.1 + RESTART_GRACE, 20.0, "download")));
        // Wrong data or a connection left hanging: never.
        for kind in NEVER_EXCUSED {
            assert!(!stop.excuses(&failure(9.0, 10.5, kind)), "{kind}");
        }
        // Not even after a crash.
        let crash = Restart {
            killed: true,
            ..stop.clone()
        };
        for kind in NEVER_EXCUSED {
            assert!(!crash.excuses(&failure(9.0, 10.5, kind)), "{kind}");
        }
        // A connection closed before its first byte: a cut like any other.
        assert!(crash.excuses(&failure(9.0, 10.5, "no answer")));
        // A restart that never got back excuses everything cut after its signal.
        let lost = Restart {
            back: None,
            ..stop.clone()
        };
        assert!(lost.excuses(&failure(500.0, 501.0, "connect")));
        // With the relay's listener held, a connection opened after the signal waits for the
        // next relay: it may not fail at all.
        let held = Restart {
            who: "relay",
            held: true,
            ..stop.clone()
        };
        assert!(held.excuses(&failure(9.0, 10.2, "download")));
        assert!(held.excuses(&failure(10.0 + HELD_SLACK, 10.5, "no answer")));
        assert!(!held.excuses(&failure(10.5, 12.0, "connect")));
        assert!(!held.excuses(&failure(10.2, 12.0, "download")));
    }

    #[test]
    fn failures_are_sorted_into_restarts_and_the_rest() {
        let r = |at: f64| Restart {
            who: "relay",
            killed: false,
            at,
            back: Some(at + 1.0),
            first_ok: None,
            held: false,
        };
        let restarts = [r(10.0), r(30.0)];
        let failures = [
            failure(9.0, 10.1, "download"),
            failure(29.0, 30.5, "connect"),
            failure(29.5, 31.0, "ping"),
            failure(20.0, 20.1, "download"),
            failure(9.5, 10.5, "wrong byte"),
        ];
        let (left, cut) = sort_failures(&failures, &restarts);
        assert_eq!(
            cut,
            vec![
                vec![failures[0].clone()],
                vec![failures[1].clone(), failures[2].clone()]
            ]
        );
        assert_eq!(left, vec![failures[3].clone(), failures[4].clone()]);
        let kinds = error_kinds(&[
            failure(1.0, 2.0, "download"),
            Failure {
                msg: "second".into(),
                ..failure(3.0, 4.0, "download")
            },
        ]);
        assert_eq!(kinds, vec!["download: 2 (first: )".to_string()]);
    }

    #[test]
    fn a_time_out_is_a_hung_connection() {
        use std::io::{Error, ErrorKind};
        let e = |k| Error::from(k);
        assert_eq!(
            io_kind("download", &e(ErrorKind::WouldBlock)),
            "download hung"
        );
        assert_eq!(io_kind("ping", &e(ErrorKind::TimedOut)), "ping hung");
        assert_eq!(io_kind("ping", &e(ErrorKind::UnexpectedEof)), "ping closed");
        assert_eq!(
            io_kind("download", &e(ErrorKind::ConnectionReset)),
            "download"
        );
        for k in ["upload", "download", "no close", "ping"] {
            let hung = io_kind(k, &e(ErrorKind::TimedOut));
            assert!(NEVER_EXCUSED.contains(&hung), "{k}: {hung}");
        }
    }

    #[test]
    fn a_protocol_violation_in_a_log_fails_the_soak() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("relay.log");
        std::fs::write(&log, "INFO subflow up\nINFO relay running\n").unwrap();
        assert_eq!(protocol_violations("relay", &log).unwrap(), None);
        std::fs::write(
            &log,
            "INFO subflow up\nWARN subflow ended; reconnecting path=p0 error=protocol violation: \
             flow 7: data up to sequence 262145 exceeds the granted credit 262144\n\
             WARN subflow ended; reconnecting path=p1 error=protocol violation: x\n",
        )
        .unwrap();
        let p = protocol_violations("relay", &log).unwrap().unwrap();
        assert!(
            p.starts_with("relay logged 2 protocol violation(s)") && p.contains("flow 7: data"),
            "{p}"
        );
        assert!(protocol_violations("proxy", &dir.path().join("none.log")).is_err());
    }
}
