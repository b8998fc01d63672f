//! The calibration's options, constants and the published statistics it compares with.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

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
    /// Also measure on the simulator (`also`: a `sim-<cc>` column beside each emulated one;
    /// `only`: the simulated columns alone, with no testbed and no root). The simulator runs
    /// the same trips, windows, queues and sample period with its own TCP model (the one that
    /// carries `polycorn sim`'s subflows), so its rows show how far that model is from kernel
    /// TCP on the same carriers. Simulated: `cubic` and `bbr`.
    #[arg(long, value_enum, default_value_t = SimColumns::Off, conflicts_with = "model_only")]
    pub sim: SimColumns,
}

impl CalibrateArgs {
    /// The calibration of `trips` trips of `trip` (from its trip seed), `minutes` each, with
    /// every other option at its default.
    pub fn of_trips(trip: TripArgs, trips: u64, minutes: f64) -> CalibrateArgs {
        #[derive(clap::Parser)]
        struct Defaults {
            #[command(flatten)]
            args: CalibrateArgs,
        }
        let mut a = <Defaults as clap::Parser>::parse_from(["calibrate"]).args;
        a.trip = trip;
        a.trips = trips;
        a.minutes = minutes;
        a
    }
}

/// Which columns `--sim` adds.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimColumns {
    /// Emulated columns only.
    Off,
    /// Simulated columns beside the emulated ones.
    Also,
    /// Simulated columns only.
    Only,
}

/// Receiver goodput bin, ms (the paper's Δt).
pub(super) const BIN_MS: u64 = 200;
/// Bins per 1 s window.
pub(super) const BINS_PER_S: usize = (1000 / BIN_MS) as usize;
/// `nstat` snapshot period, ms.
pub(super) const NSTAT_MS: u64 = 1000;
/// Sender write size, bytes.
pub(super) const WRITE_BYTES: usize = 128 * 1024;
/// Socket timeouts, so every thread sees the stop flag within this.
pub(super) const IO_TIMEOUT: Duration = Duration::from_millis(200);
/// Counters kept from `nstat`.
pub(super) const NSTAT_KEYS: [&str; 9] = [
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

/// Published values (POLYCORN, NSDI'23, §2): carrier A, carrier B.
pub(super) mod published {
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
pub(super) const VALUE_TOLERANCE: f64 = 0.25;
/// … and a share row within this many percentage points of it.
pub(super) const SHARE_TOLERANCE_POINTS: f64 = 5.0;

/// The location-repeatability statistic: half-width of the window around a location, m …
pub(super) const LOCATION_HALF_WINDOW_M: f64 = 1000.0;
/// … and the spacing of the locations, m.
pub(super) const LOCATION_GRID_M: f64 = 500.0;
/// Locations need this many trips through them at speed for a p75/p25.
pub(super) const LOCATION_MIN_TRIPS: usize = 4;
