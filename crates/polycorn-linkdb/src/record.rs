//! What LinkDB stores: trips, their handovers, GPS fixes and per-carrier radio samples.
//!
//! These are plain values shared by the importers, the store and the analyses. Times are
//! milliseconds since the trip began; positions are metres along the line (`position_m`, the
//! line's own frame) — see [`Direction::progress`] for the direction-of-travel frame the
//! analyses use.

use core::fmt;
use core::str::FromStr;

/// Direction of travel of the train along its line (the paper keys cells by ⟨cell, direction⟩).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    /// Towards increasing `position_m`.
    Up,
    /// Towards decreasing `position_m`.
    Down,
}

impl Direction {
    /// Position in the direction-of-travel frame: larger = later along the ride.
    pub fn progress(self, position_m: f64) -> f64 {
        match self {
            Direction::Up => position_m,
            Direction::Down => -position_m,
        }
    }
    /// Inverse of [`Direction::progress`].
    pub fn position(self, progress_m: f64) -> f64 {
        self.progress(progress_m)
    }
    /// The name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Up => "up",
            Direction::Down => "down",
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Direction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "up" => Ok(Direction::Up),
            "down" => Ok(Direction::Down),
            other => Err(format!("direction `{other}` is not `up` or `down`")),
        }
    }
}

/// Outcome of a handover.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// Joined the target cell.
    Success,
    /// Left (lost) the source cell before joining a target: a blackout of seconds.
    Failure,
}

impl Outcome {
    /// The name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Failure => "failure",
        }
    }
    /// Whether this is a failure.
    pub fn failed(self) -> bool {
        self == Outcome::Failure
    }
}

impl FromStr for Outcome {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "success" => Ok(Outcome::Success),
            "failure" => Ok(Outcome::Failure),
            other => Err(format!("outcome `{other}` is not `success` or `failure`")),
        }
    }
}

/// Where a trip came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// polycorn's synthetic trip model (in process or `polycorn trip generate` output).
    Sim,
    /// WMN Lab metro measurements (handover and radio-link-failure labels, no cell IDs).
    Wmnlab,
    /// UCC 5G driving logs (cell IDs, no failure labels).
    Ucc5g,
    /// A relay's own context log (`[context] record`): handovers inferred from its modems'
    /// serving cells ([`crate::import::relay`]).
    Relay,
}

impl Source {
    /// The name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Sim => "sim",
            Source::Wmnlab => "wmnlab",
            Source::Ucc5g => "ucc5g",
            Source::Relay => "relay",
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Source {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sim" => Ok(Source::Sim),
            "wmnlab" => Ok(Source::Wmnlab),
            "ucc5g" => Ok(Source::Ucc5g),
            "relay" => Ok(Source::Relay),
            other => Err(format!(
                "source `{other}` is not one of sim, wmnlab, ucc5g, relay"
            )),
        }
    }
}

/// One ride.
#[derive(Clone, Debug, PartialEq)]
pub struct TripMeta {
    /// Unique key: `source:name:hash` of the content ([`TripData::seal`]). Importing the same
    /// trip twice finds the key and inserts nothing.
    pub key: String,
    /// Origin of the data.
    pub source: Source,
    /// Human name (file or directory name, seeds).
    pub name: String,
    /// The line: trips of one route share cells and positions (e.g. `hsr/route7`).
    pub route: String,
    /// Direction of travel.
    pub direction: Direction,
    /// Carrier names; a handover's `carrier` is one of them.
    pub carriers: Vec<String>,
    /// Duration, ms.
    pub duration_ms: u64,
    /// When the ride began (its first fix), ms since the Unix epoch, where the source says:
    /// a relay's ride log does ([`crate::import::relay`]); simulated trips and the datasets do
    /// not. Not part of [`TripMeta::key`]. What [`crate::store::Store::prune`] goes by.
    pub started_ms: Option<u64>,
}

impl TripMeta {
    /// When the ride began, ms since the Unix epoch: [`TripMeta::started_ms`], else, for a
    /// relay's ride stored without it (by a release before it), the start of the context log
    /// its name comes from (`…context-YYYYMMDDTHHMMSSZ-k`; the ride began then or later).
    pub fn start_ms(&self) -> Option<u64> {
        self.started_ms.or_else(|| {
            (self.source == Source::Relay)
                .then(|| crate::import::time::log_start_ms(std::path::Path::new(&self.name)))
                .flatten()
        })
    }
}

/// One handover as recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct HandoverRecord {
    /// Carrier name (one of the trip's carriers).
    pub carrier: String,
    /// Source cell.
    pub from_cell: String,
    /// Target cell (for a failure: the cell re-established on, when known).
    pub to_cell: Option<String>,
    /// Direction of travel.
    pub direction: Direction,
    /// Start, ms since the trip began.
    pub start_ms: u64,
    /// Position along the line at the start, m (`None` when the source has no line frame).
    pub position_m: Option<f64>,
    /// Latitude at the start (`None` when unknown).
    pub lat: Option<f64>,
    /// Longitude at the start.
    pub lon: Option<f64>,
    /// Serving-cell RSRP at the start, dBm.
    pub rsrp_dbm: Option<f64>,
    /// Success or failure.
    pub outcome: Outcome,
    /// Interruption of delivery from the start, ms (`None` when unknown).
    pub interruption_ms: Option<u64>,
    /// For a failure: when and where the UE lost the source cell, if that is known and differs
    /// from the start (a handover that starts too late degrades the link until the source is
    /// lost). `None`: lost at the start, or not known.
    pub lost: Option<LossRecord>,
}

/// When and where a failing handover lost its source cell.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossRecord {
    /// Time, ms since the trip began.
    pub t_ms: u64,
    /// Position along the line, m.
    pub position_m: Option<f64>,
    /// Latitude.
    pub lat: Option<f64>,
    /// Longitude.
    pub lon: Option<f64>,
    /// Source-cell RSRP then, dBm.
    pub rsrp_dbm: Option<f64>,
}

impl HandoverRecord {
    /// When the handover disrupts the path for good, ms: for a failure the loss of the source
    /// (what a throttle must come before), for a success its start.
    pub fn disruption_ms(&self) -> u64 {
        self.lost.map_or(self.start_ms, |l| l.t_ms)
    }

    /// Position when the UE disconnected from the source (the loss for a failure, else the
    /// start): the paper's SVM features are taken there.
    pub fn disconnect_position_m(&self) -> Option<f64> {
        self.lost.map_or(self.position_m, |l| l.position_m)
    }

    /// Latitude and longitude when the UE disconnected from the source.
    pub fn disconnect_lat_lon(&self) -> Option<(f64, f64)> {
        match self.lost {
            Some(l) => Some((l.lat?, l.lon?)),
            None => Some((self.lat?, self.lon?)),
        }
    }

    /// RSRP when the UE disconnected from the source.
    pub fn disconnect_rsrp_dbm(&self) -> Option<f64> {
        self.lost.map_or(self.rsrp_dbm, |l| l.rsrp_dbm)
    }
}

/// One GPS fix.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Time, ms since the trip began.
    pub t_ms: u64,
    /// Latitude (`None` without a fix).
    pub lat: Option<f64>,
    /// Longitude.
    pub lon: Option<f64>,
    /// Position along the line, m.
    pub position_m: Option<f64>,
    /// Speed, m/s.
    pub speed_mps: Option<f64>,
    /// Heading, degrees clockwise from north.
    pub heading_deg: Option<f64>,
}

/// One carrier's serving cell and RSRP at one time.
#[derive(Clone, Debug, PartialEq)]
pub struct RadioSample {
    /// Time, ms since the trip began.
    pub t_ms: u64,
    /// Carrier name.
    pub carrier: String,
    /// Serving cell (`None` without service).
    pub cell: Option<String>,
    /// RSRP, dBm.
    pub rsrp_dbm: Option<f64>,
}

/// A trip with everything recorded on it.
#[derive(Clone, Debug, PartialEq)]
pub struct TripData {
    /// The trip.
    pub meta: TripMeta,
    /// Handovers in start order.
    pub handovers: Vec<HandoverRecord>,
    /// GPS fixes in time order.
    pub samples: Vec<Sample>,
    /// Radio samples in time order.
    pub radio: Vec<RadioSample>,
}

impl TripData {
    /// The part of this trip a predictor is built from ([`crate::ModelKind::build`]): every
    /// handover, the fixes either side of each handover's start (its speed,
    /// [`crate::index::speed_at`]) and, with `radio_before_ms`, each carrier's radio samples
    /// in that window before its handovers' starts (the risk model's RSRP trend); no other
    /// radio sample. Built from it, every predictor is the same as from the whole trip, at a
    /// fraction of the memory: a line's history of a year does not fit otherwise. Only for
    /// building predictors: `meta.key` no longer matches the content.
    pub fn for_prediction(mut self, radio_before_ms: Option<u64>) -> TripData {
        let n = self.samples.len();
        let mut keep = vec![false; n];
        for h in &self.handovers {
            let i = self.samples.partition_point(|s| s.t_ms <= h.start_ms);
            if i > 0 {
                keep[i - 1] = true;
            }
            if i < n {
                keep[i] = true;
            }
        }
        let mut k = keep.into_iter();
        self.samples.retain(|_| k.next().unwrap_or(false));
        match radio_before_ms {
            None => self.radio = Vec::new(),
            Some(w) => {
                let mut starts: Vec<(&str, u64)> = self
                    .handovers
                    .iter()
                    .map(|h| (h.carrier.as_str(), h.start_ms))
                    .collect();
                starts.sort_unstable();
                let radio = std::mem::take(&mut self.radio);
                self.radio = radio
                    .into_iter()
                    .filter(|r| {
                        // The first handover of this carrier at or after the sample.
                        let i =
                            starts.partition_point(|&(c, t)| (c, t) < (r.carrier.as_str(), r.t_ms));
                        starts
                            .get(i)
                            .is_some_and(|&(c, t)| c == r.carrier && t - r.t_ms <= w)
                    })
                    .collect();
            }
        }
        self
    }

    /// Sort the records, and set `meta.key` to `source:name:hash`, the hash (FNV-1a, 64 bit) taken
    /// over the exact parts of the content (names, times, cells, outcomes), so a re-import of the
    /// same file or seeds finds the same key and a changed file gets a new one.
    pub fn seal(&mut self) {
        self.handovers
            .sort_by(|a, b| a.start_ms.cmp(&b.start_ms).then(a.carrier.cmp(&b.carrier)));
        self.samples.sort_by_key(|s| s.t_ms);
        self.radio
            .sort_by(|a, b| a.t_ms.cmp(&b.t_ms).then(a.carrier.cmp(&b.carrier)));
        let mut h = Fnv::new();
        h.str(self.meta.source.as_str());
        h.str(&self.meta.name);
        h.str(&self.meta.route);
        h.str(self.meta.direction.as_str());
        for c in &self.meta.carriers {
            h.str(c);
        }
        // Only exact fields: a trip read back from rounded CSV hashes like the original.
        for x in &self.handovers {
            h.str(&x.carrier);
            h.str(&x.from_cell);
            h.str(&x.start_ms.to_string());
            h.str(x.outcome.as_str());
            if let Some(l) = x.lost {
                h.str(&l.t_ms.to_string());
            }
        }
        for x in &self.samples {
            h.str(&x.t_ms.to_string());
        }
        h.str(&self.radio.len().to_string());
        self.meta.key = format!("{}:{}:{:016x}", self.meta.source, self.meta.name, h.0);
    }
}

struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn str(&mut self, s: &str) {
        for b in s.bytes().chain(core::iter::once(0xff)) {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}
