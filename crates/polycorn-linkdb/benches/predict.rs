//! Cost of one prediction with 10,000 cells loaded.
//!
//! The index holds 10,000 ⟨carrier, cell, direction⟩ cells (2 carriers × 5,000 cells, each
//! with 20 recorded handovers of which some failed) built from synthetic trip records. One
//! iteration is what HPR asks per path per decision: `next_failure(path, now)` after the shell
//! fed the latest fix and cell report. Ids:
//! * `predict/paper/next_failure` — the paper's predictor (one hash lookup, a division);
//! * `predict/risk/next_failure` — the logistic risk model (lookup, RSRP trend, a dot product);
//! * `predict/loctable/next_failure` — the location table (a binary search over zones);
//! * `predict/paper/update_cell+next_failure` — a cell report (hash of the cell name) plus one
//!   prediction, the cost right after a handover.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use polycorn_linkdb::record::{
    Direction, HandoverRecord, Outcome, RadioSample, Sample, Source, TripData, TripMeta,
};
use polycorn_linkdb::validate::ModelKind;
use polycorn_sched::predict::HandoverPredictor;
use polycorn_sched::{Instant, PathId};

const CELLS_PER_CARRIER: usize = 5_000;
const TRIPS: usize = 20;
const SPACING_M: f64 = 800.0;

fn trips() -> Vec<TripData> {
    let mut out = Vec::new();
    for t in 0..TRIPS {
        let mut handovers = Vec::new();
        let mut samples = Vec::new();
        let mut radio = Vec::new();
        for (ci, carrier) in ["A", "B"].iter().enumerate() {
            for c in 0..CELLS_PER_CARRIER {
                let pos = c as f64 * SPACING_M + ((t * 37 + c * 11) % 200) as f64;
                let failed = (c + t) % 9 == 0;
                handovers.push(HandoverRecord {
                    carrier: carrier.to_string(),
                    from_cell: format!("{ci}-{c}"),
                    to_cell: Some(format!("{ci}-{}", c + 1)),
                    direction: Direction::Up,
                    start_ms: (pos / 80.0 * 1000.0) as u64,
                    position_m: Some(pos),
                    lat: None,
                    lon: None,
                    rsrp_dbm: Some(-90.0 - (c % 20) as f64),
                    outcome: if failed {
                        Outcome::Failure
                    } else {
                        Outcome::Success
                    },
                    interruption_ms: Some(if failed { 3000 } else { 40 }),
                    lost: None,
                });
            }
        }
        for s in 0..(CELLS_PER_CARRIER as u64 * 10) {
            let t_ms = s * 1000;
            samples.push(Sample {
                t_ms,
                lat: None,
                lon: None,
                position_m: Some(s as f64 * 80.0),
                speed_mps: Some(80.0),
                heading_deg: None,
            });
            if s % 10 == 0 {
                radio.push(RadioSample {
                    t_ms,
                    carrier: "A".into(),
                    cell: None,
                    rsrp_dbm: Some(-95.0),
                });
            }
        }
        let mut d = TripData {
            meta: TripMeta {
                key: String::new(),
                source: Source::Sim,
                name: format!("bench-{t}"),
                route: "bench".into(),
                direction: Direction::Up,
                carriers: vec!["A".into(), "B".into()],
                duration_ms: CELLS_PER_CARRIER as u64 * 10_000,
                started_ms: None,
            },
            handovers,
            samples,
            radio,
        };
        d.seal();
        out.push(d);
    }
    out
}

fn bench(c: &mut Criterion) {
    let trips = trips();
    let refs: Vec<&TripData> = trips.iter().collect();
    let path = PathId::new(0).unwrap();
    let mut g = c.benchmark_group("predict");
    for kind in ModelKind::ALL {
        let mut p = kind.build(&refs);
        assert_eq!(p.index().cells().len(), 2 * CELLS_PER_CARRIER);
        p.map_path(path, "A");
        let cell = 2_500;
        let now = Instant::from_millis(1_000_000);
        p.update_fix(now, cell as f64 * SPACING_M + 50.0, 80.0, Direction::Up);
        p.update_cell(now, path, Some(&format!("0-{cell}")), Some(-97.0));
        p.update_cell(
            now + polycorn_sched::Duration::from_secs(1),
            path,
            Some(&format!("0-{cell}")),
            Some(-99.0),
        );
        g.bench_function(format!("{}/next_failure", kind.name()), |b| {
            b.iter(|| black_box(p.next_failure(black_box(path), black_box(now))))
        });
        if kind == ModelKind::Paper {
            let cells: Vec<String> = (0..64).map(|i| format!("0-{}", cell + i)).collect();
            let mut i = 0usize;
            g.bench_function("paper/update_cell+next_failure", |b| {
                b.iter(|| {
                    i = (i + 1) % cells.len();
                    p.update_cell(now, path, Some(&cells[i]), Some(-95.0));
                    black_box(p.next_failure(path, now))
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
