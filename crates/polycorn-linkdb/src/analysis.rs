//! Offline analyses of the paper's §2.3 and §3: EHP per cell, success rate by distance to EHP
//! and by RSRP (Table 1), and per-cell linear-SVM separability of successes and failures.
//!
//! A *cell* is ⟨carrier, cell, direction⟩ (the paper's footnote 4). Distances are measured in
//! the direction of travel ([`crate::record::Direction::progress`]). Handovers without a
//! position (UCC 5G) have no EHP and count in no row that needs one.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::record::{HandoverRecord, TripData};
use crate::svm;

/// Table 1's split of distance to EHP, m.
pub const EHP_NEAR_M: f64 = 200.0;
/// Table 1's split of RSRP, dBm.
pub const RSRP_SPLIT_DBM: f64 = -95.0;

type Key = (String, String, crate::record::Direction);

fn cells(trips: &[TripData]) -> BTreeMap<Key, Vec<&HandoverRecord>> {
    let mut m: BTreeMap<Key, Vec<&HandoverRecord>> = BTreeMap::new();
    for t in trips {
        for h in &t.handovers {
            m.entry((h.carrier.clone(), h.from_cell.clone(), h.direction))
                .or_default()
                .push(h);
        }
    }
    m
}

/// One cell's handover history.
#[derive(Clone, Debug, PartialEq)]
pub struct CellSummary {
    /// Carrier.
    pub carrier: String,
    /// Cell.
    pub cell: String,
    /// Direction.
    pub direction: crate::record::Direction,
    /// Handovers out of it.
    pub handovers: usize,
    /// Of which failed.
    pub failures: usize,
    /// EHP as a line position, m (`None` without positions).
    pub ehp_position_m: Option<f64>,
    /// Mean start of the failed handovers as a line position, m (the paper's L̂_HOF).
    pub mean_failure_position_m: Option<f64>,
}

/// EHP and counts per cell.
pub fn cell_summaries(trips: &[TripData]) -> Vec<CellSummary> {
    cells(trips)
        .into_iter()
        .map(|((carrier, cell, direction), hs)| {
            let prog: Vec<f64> = hs
                .iter()
                .filter_map(|h| h.position_m.map(|p| direction.progress(p)))
                .collect();
            let fails: Vec<f64> = hs
                .iter()
                .filter(|h| h.outcome.failed())
                .filter_map(|h| h.position_m.map(|p| direction.progress(p)))
                .collect();
            CellSummary {
                handovers: hs.len(),
                failures: hs.iter().filter(|h| h.outcome.failed()).count(),
                ehp_position_m: prog
                    .iter()
                    .copied()
                    .reduce(f64::min)
                    .map(|p| direction.position(p)),
                mean_failure_position_m: (!fails.is_empty())
                    .then(|| direction.position(fails.iter().sum::<f64>() / fails.len() as f64)),
                carrier,
                cell,
                direction,
            }
        })
        .collect()
}

/// Successes and totals in one scenario.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rate {
    /// Successful handovers.
    pub ok: usize,
    /// Handovers.
    pub n: usize,
}

impl Rate {
    fn add(&mut self, ok: bool) {
        self.n += 1;
        self.ok += usize::from(ok);
    }
    /// Success rate in percent, or "-".
    pub fn pct(&self) -> String {
        if self.n == 0 {
            "-".into()
        } else {
            format!(
                "{:.1}% ({})",
                100.0 * self.ok as f64 / self.n as f64,
                self.n
            )
        }
    }
}

/// The paper's Table 1 for one carrier.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table1 {
    /// Carrier (or "all").
    pub carrier: String,
    /// Started within 200 m of the cell's EHP.
    pub near_ehp: Rate,
    /// Started 200 m or more beyond it.
    pub far_ehp: Rate,
    /// RSRP ≥ −95 dBm at the start.
    pub rsrp_high: Rate,
    /// RSRP < −95 dBm at the start.
    pub rsrp_low: Rate,
    /// All handovers.
    pub all: Rate,
}

/// Table 1 per carrier, then over all carriers.
pub fn table1(trips: &[TripData]) -> Vec<Table1> {
    let mut per: BTreeMap<String, Table1> = BTreeMap::new();
    let mut all = Table1 {
        carrier: "all".into(),
        ..Table1::default()
    };
    for ((carrier, _, dir), hs) in cells(trips) {
        let ehp = hs
            .iter()
            .filter_map(|h| h.position_m.map(|p| dir.progress(p)))
            .reduce(f64::min);
        let row = per.entry(carrier.clone()).or_insert_with(|| Table1 {
            carrier: carrier.clone(),
            ..Table1::default()
        });
        for h in hs {
            let ok = !h.outcome.failed();
            for r in [&mut *row, &mut all] {
                r.all.add(ok);
                if let (Some(e), Some(p)) = (ehp, h.position_m) {
                    if dir.progress(p) - e < EHP_NEAR_M {
                        r.near_ehp.add(ok);
                    } else {
                        r.far_ehp.add(ok);
                    }
                }
                if let Some(rsrp) = h.rsrp_dbm {
                    if rsrp >= RSRP_SPLIT_DBM {
                        r.rsrp_high.add(ok);
                    } else {
                        r.rsrp_low.add(ok);
                    }
                }
            }
        }
    }
    per.into_values().chain(std::iter::once(all)).collect()
}

/// Format Table 1 (success rate, and in brackets the number of handovers).
pub fn format_table1(rows: &[Table1]) -> String {
    let mut s = format!("{:<28}", "scenario");
    for r in rows {
        let _ = write!(s, " {:>18}", r.carrier);
    }
    s.push('\n');
    type Pick = fn(&Table1) -> Rate;
    let lines: [(&str, Pick); 5] = [
        ("Distance to EHP < 200m", |r| r.near_ehp),
        ("Distance to EHP >= 200m", |r| r.far_ehp),
        ("RSRP >= -95dBm", |r| r.rsrp_high),
        ("RSRP < -95dBm", |r| r.rsrp_low),
        ("all handovers", |r| r.all),
    ];
    for (name, f) in lines {
        let _ = write!(s, "{name:<28}");
        for r in rows {
            let _ = write!(s, " {:>18}", f(r).pct());
        }
        s.push('\n');
    }
    s
}

/// Per-carrier share of cells whose successes and failures a linear SVM separates.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Separability {
    /// Carrier (or "all").
    pub carrier: String,
    /// Cells with at least one success and one failure (the ones the question is about).
    pub mixed_cells: usize,
    /// Cells with only one outcome (trivially separable; not in the shares).
    pub single_outcome_cells: usize,
    /// Separable by location (lat/lon in local metres, or the line position without lat/lon).
    pub location: Rate,
    /// Separable by RSRP where the UE disconnected from the source.
    pub rsrp: Rate,
    /// Separable by both.
    pub both: Rate,
}

/// SVM separability per carrier, then over all carriers. A cell counts for a feature set when
/// every one of its handovers has those features.
pub fn svm_separability(trips: &[TripData]) -> Vec<Separability> {
    let mut per: BTreeMap<String, Separability> = BTreeMap::new();
    let mut all = Separability {
        carrier: "all".into(),
        ..Separability::default()
    };
    for ((carrier, _, _), hs) in cells(trips) {
        let y: Vec<bool> = hs.iter().map(|h| h.outcome.failed()).collect();
        let row = per.entry(carrier.clone()).or_insert_with(|| Separability {
            carrier: carrier.clone(),
            ..Separability::default()
        });
        if y.iter().all(|v| *v) || y.iter().all(|v| !*v) {
            row.single_outcome_cells += 1;
            all.single_outcome_cells += 1;
            continue;
        }
        row.mixed_cells += 1;
        all.mixed_cells += 1;
        let loc = location_features(&hs);
        let rsrp: Option<Vec<Vec<f64>>> = hs
            .iter()
            .map(|h| h.disconnect_rsrp_dbm().map(|r| vec![r]))
            .collect();
        if let Some(l) = &loc {
            let ok = svm::separable(l, &y);
            row.location.add(ok);
            all.location.add(ok);
        }
        if let Some(r) = &rsrp {
            let ok = svm::separable(r, &y);
            row.rsrp.add(ok);
            all.rsrp.add(ok);
        }
        if let (Some(l), Some(r)) = (&loc, &rsrp) {
            let x: Vec<Vec<f64>> = l
                .iter()
                .zip(r)
                .map(|(a, b)| a.iter().chain(b).copied().collect())
                .collect();
            let ok = svm::separable(&x, &y);
            row.both.add(ok);
            all.both.add(ok);
        }
    }
    per.into_values().chain(std::iter::once(all)).collect()
}

/// Location features of a cell's handovers where the UE disconnected from the source (the
/// paper's SVM features; for a failure recorded with a later loss, the loss): (east, north)
/// metres from the first one when all have lat/lon, else the line position, else `None`.
fn location_features(hs: &[&HandoverRecord]) -> Option<Vec<Vec<f64>>> {
    if let Some(ll) = hs
        .iter()
        .map(|h| h.disconnect_lat_lon())
        .collect::<Option<Vec<_>>>()
    {
        let (lat0, lon0) = ll[0];
        let k = lat0.to_radians().cos();
        return Some(
            ll.iter()
                .map(|(la, lo)| vec![(lo - lon0) * 111_320.0 * k, (la - lat0) * 111_320.0])
                .collect(),
        );
    }
    hs.iter()
        .map(|h| h.disconnect_position_m().map(|p| vec![p]))
        .collect()
}

/// Format the separability table: share of mixed cells separable (separable / counted).
pub fn format_separability(rows: &[Separability]) -> String {
    let mut s = format!(
        "{:<9} {:>11} {:>13} {:>16} {:>16} {:>16}\n",
        "carrier", "mixed cells", "1-class cells", "location", "RSRP", "both"
    );
    let p = |r: &Rate| {
        if r.n == 0 {
            "-".to_string()
        } else {
            format!(
                "{:.1}% ({}/{})",
                100.0 * r.ok as f64 / r.n as f64,
                r.ok,
                r.n
            )
        }
    };
    for r in rows {
        let _ = writeln!(
            s,
            "{:<9} {:>11} {:>13} {:>16} {:>16} {:>16}",
            r.carrier,
            r.mixed_cells,
            r.single_outcome_cells,
            p(&r.location),
            p(&r.rsrp),
            p(&r.both)
        );
    }
    s
}
