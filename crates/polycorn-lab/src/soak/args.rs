//! The soak's options and constants.

use std::time::Duration;

use clap::Args;

/// Port of the soak server in the server namespace.
pub(super) const PORT: u16 = 5202;
/// A daemon may hold this many more file descriptors after the load than before it.
pub const FD_SLACK: usize = 4;
/// `down_len` of an idle connection's request: the server echoes 8-byte pings until EOF.
pub(super) const ECHO: u64 = polycorn_net::loadgen::ECHO;
/// How long one connection may take before it counts as failed.
pub(super) const CONN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long relay and proxy get to close every flow after the load.
pub(super) const SETTLE: Duration = Duration::from_secs(20);
/// How long after a restarted daemon has every path up again a connection opened before may
/// still fail as cut by the restart, seconds.
pub const RESTART_GRACE: f64 = 5.0;
/// What `--restart-every` does, in turn: (daemon, killed rather than stopped in order).
pub(super) const RESTARTS: [(&str, bool); 4] = [
    ("proxy", false),
    ("relay", false),
    ("proxy", true),
    ("relay", true),
];
/// No restart begins this close to the end of the load.
pub(super) const RESTART_TAIL: Duration = Duration::from_secs(3);
/// How long a daemon gets to exit after SIGTERM, beyond its drain, before it counts as
/// hanging (its stop grace is 2 s).
pub(super) const STOP_WITHIN: Duration = Duration::from_secs(10);
/// The proxy's `hold_time_s` in the soak's configurations (the default): how long it keeps a
/// killed relay's flows, which the settling after the load must cover.
pub(super) const PROXY_HOLD_S: f64 = 30.0;

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
