//! The in-memory index the online predictors read: per ⟨carrier, cell, direction⟩ handover
//! statistics, and per ⟨carrier, direction⟩ the recorded handover zones (the location table of
//! Kim & Cho, "Enhancing MPTCP Performance on High-Speed Trains with Predictive Handover-Aware
//! Packet Scheduling").
//!
//! Built once from the store's trips ([`LinkIndex::build`]); lookups are hash lookups on
//! interned ids, so a prediction costs well under a microsecond (see `benches/predict.rs`).
//! All positions here are *progress* in metres: the position along the line in the direction of
//! travel ([`Direction::progress`]), so "earliest" is always "smallest".

use std::collections::{BTreeMap, HashMap};

use crate::record::{Direction, TripData};

/// Interned carrier id.
pub type CarrierId = u16;
/// Interned cell id.
pub type CellId = u32;

/// Key of a cell in the paper's sense: the cell and the direction it is traversed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CellKey {
    /// Carrier.
    pub carrier: CarrierId,
    /// Cell.
    pub cell: CellId,
    /// Direction of travel.
    pub direction: Direction,
}

/// What the history says about handovers out of one cell.
#[derive(Clone, Debug, PartialEq)]
pub struct CellStats {
    /// The cell.
    pub key: CellKey,
    /// Handovers out of it with a known position.
    pub handovers: u32,
    /// Of which failed.
    pub failures: u32,
    /// Earliest Handover Position: smallest progress at which any handover out of it started.
    pub ehp_progress_m: f64,
    /// Mean progress of the failed handovers' starts (the paper's L̂_HOF), if any failed.
    pub mean_failure_progress_m: Option<f64>,
}

impl CellStats {
    /// Smoothed failure share (one pseudo-failure in 17, about the HSR base rate), used as a
    /// prior by the risk model so a cell with 1 of 1 failed does not look certain.
    pub fn failure_share_smoothed(&self) -> f64 {
        (f64::from(self.failures) + PRIOR_FAILURES) / (f64::from(self.handovers) + PRIOR_N)
    }
}

/// Pseudo-counts of the smoothed failure share.
pub const PRIOR_FAILURES: f64 = 1.0;
/// See [`PRIOR_FAILURES`].
pub const PRIOR_N: f64 = 17.0;

/// Extent of a recorded handover zone when the interruption or the speed is unknown, m.
pub const MIN_ZONE_M: f64 = 10.0;

/// The index.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LinkIndex {
    carriers: BTreeMap<String, CarrierId>,
    cells: HashMap<String, CellId>,
    stats: Vec<CellStats>,
    by_key: HashMap<CellKey, usize>,
    /// Merged zones `[start, end)` in progress metres, sorted, per (carrier, direction).
    zones: HashMap<(CarrierId, Direction), Vec<(f64, f64)>>,
}

impl LinkIndex {
    /// Build from trips. Handovers without a position (sources without a line frame) count in
    /// no statistic here.
    pub fn build<'a>(trips: impl IntoIterator<Item = &'a TripData>) -> LinkIndex {
        let mut b = IndexBuilder::default();
        for trip in trips {
            b.add(trip);
        }
        b.finish()
    }

    fn intern_carrier(&mut self, name: &str) -> CarrierId {
        if let Some(id) = self.carriers.get(name) {
            return *id;
        }
        let id = CarrierId::try_from(self.carriers.len()).expect("fewer than 65536 carriers");
        self.carriers.insert(name.to_string(), id);
        id
    }

    fn intern_cell(&mut self, name: &str) -> CellId {
        if let Some(id) = self.cells.get(name) {
            return *id;
        }
        let id = CellId::try_from(self.cells.len()).expect("fewer than 2^32 cells");
        self.cells.insert(name.to_string(), id);
        id
    }

    /// The key of a cell seen in the history.
    pub fn key_of(&self, carrier: &str, cell: &str, direction: Direction) -> Option<CellKey> {
        Some(CellKey {
            carrier: self.carrier_id(carrier)?,
            cell: self.cell_id(cell)?,
            direction,
        })
    }

    /// The id of a carrier seen in the history.
    pub fn carrier_id(&self, name: &str) -> Option<CarrierId> {
        self.carriers.get(name).copied()
    }

    /// The id of a cell seen in the history.
    pub fn cell_id(&self, name: &str) -> Option<CellId> {
        self.cells.get(name).copied()
    }

    /// Statistics of a cell.
    pub fn get(&self, key: CellKey) -> Option<&CellStats> {
        self.by_key.get(&key).map(|&i| &self.stats[i])
    }

    /// Every cell, in key order.
    pub fn cells(&self) -> &[CellStats] {
        &self.stats
    }

    /// The recorded zone containing `progress_m`, or else the next one ahead: `(start, end)`.
    pub fn zone_at_or_ahead(
        &self,
        carrier: CarrierId,
        direction: Direction,
        progress_m: f64,
    ) -> Option<(f64, f64)> {
        let z = self.zones.get(&(carrier, direction))?;
        let i = z.partition_point(|(_, end)| *end <= progress_m);
        z.get(i).copied()
    }
}

/// [`LinkIndex::build`] one trip at a time, so a history larger than memory can be read trip
/// by trip and dropped ([`crate::store::Store::predictor`]): what it keeps grows with the cells
/// and the handover zones, not with the fixes.
#[derive(Debug, Default)]
pub struct IndexBuilder {
    ix: LinkIndex,
    /// (handovers, failures, ehp, failure sum) per cell.
    acc: BTreeMap<CellKey, (u32, u32, f64, f64)>,
    zones: BTreeMap<(CarrierId, Direction), Vec<(f64, f64)>>,
    trips: usize,
}

impl IndexBuilder {
    /// Adds a trip's handovers.
    pub fn add(&mut self, trip: &TripData) {
        self.trips += 1;
        for h in &trip.handovers {
            let Some(pos) = h.position_m else { continue };
            let key = CellKey {
                carrier: self.ix.intern_carrier(&h.carrier),
                cell: self.ix.intern_cell(&h.from_cell),
                direction: h.direction,
            };
            let p = h.direction.progress(pos);
            let e = self.acc.entry(key).or_insert((0, 0, f64::INFINITY, 0.0));
            e.0 += 1;
            e.2 = e.2.min(p);
            if h.outcome.failed() {
                e.1 += 1;
                e.3 += p;
            }
            let speed = speed_at(trip, h.start_ms).unwrap_or(0.0);
            let len = h
                .interruption_ms
                .map_or(0.0, |ms| ms as f64 / 1000.0 * speed)
                .max(MIN_ZONE_M);
            self.zones
                .entry((key.carrier, key.direction))
                .or_default()
                .push((p, p + len));
        }
    }

    /// The key of a cell of the trips added so far, as the finished index will have it.
    pub fn key_of(&self, carrier: &str, cell: &str, direction: Direction) -> Option<CellKey> {
        self.ix.key_of(carrier, cell, direction)
    }

    /// Trips added so far.
    pub fn trips(&self) -> usize {
        self.trips
    }

    /// The index of every trip added.
    pub fn finish(self) -> LinkIndex {
        let mut ix = self.ix;
        for (key, (n, f, ehp, fsum)) in self.acc {
            ix.by_key.insert(key, ix.stats.len());
            ix.stats.push(CellStats {
                key,
                handovers: n,
                failures: f,
                ehp_progress_m: ehp,
                mean_failure_progress_m: (f > 0).then(|| fsum / f64::from(f)),
            });
        }
        for (k, mut v) in self.zones {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            let mut merged: Vec<(f64, f64)> = Vec::with_capacity(v.len());
            for (s, e) in v {
                match merged.last_mut() {
                    Some(last) if s <= last.1 => last.1 = last.1.max(e),
                    _ => merged.push((s, e)),
                }
            }
            ix.zones.insert(k, merged);
        }
        ix
    }
}

/// Train speed at `t_ms` from the trip's fixes (nearest fix at or before, else the first after).
pub fn speed_at(trip: &TripData, t_ms: u64) -> Option<f64> {
    let i = trip.samples.partition_point(|s| s.t_ms <= t_ms);
    let before = i.checked_sub(1).and_then(|j| trip.samples[j].speed_mps);
    before.or_else(|| trip.samples.get(i).and_then(|s| s.speed_mps))
}
