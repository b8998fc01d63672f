//! Trip-model tests: determinism, the published handover statistics it is calibrated to, the
//! direction of the paper's Table 1 effects, and internal consistency of the outputs.

use std::collections::BTreeMap;

use polycorn_link::trip::{Outcome, Trip, TripConfig, STEP_MS};

fn trips(n: u64) -> Vec<Trip> {
    (0..n)
        .map(|i| Trip::generate(&TripConfig::hsr(11, 500 + i)).expect("preset is valid"))
        .collect()
}

#[test]
fn handover_interval_and_failure_share_match_published_values() {
    // POLYCORN §2.3: one handover every 10.7 s (A) and 7.6 s (B) at 300 km/h;
    // 6.22% and 5.47% of handovers fail. Tolerances from the calibration issue:
    // ±25% relative for intervals, ±5 points for shares.
    let ts = trips(8);
    let mut per = [(0usize, 0usize, 0.0f64); 2];
    for t in &ts {
        for s in t.carrier_stats().iter().enumerate() {
            per[s.0].0 += s.1.handovers;
            per[s.0].1 += s.1.failures;
            per[s.0].2 += s.1.handover_interval_s / ts.len() as f64;
        }
    }
    for (c, (interval, share)) in [(10.7, 6.22), (7.6, 5.47)].into_iter().enumerate() {
        let (hos, fails, got_interval) = per[c];
        let got_share = 100.0 * fails as f64 / hos as f64;
        assert!(
            (got_interval - interval).abs() <= 0.25 * interval,
            "carrier {c}: interval {got_interval:.2}s vs {interval}s"
        );
        assert!(
            (got_share - share).abs() <= 5.0,
            "carrier {c}: failure share {got_share:.2}% vs {share}%"
        );
    }
}

#[test]
fn late_and_weak_handovers_fail_more_as_in_table_1() {
    let ts = trips(12);
    // EHP of a cell: earliest start position of any handover from it, over all trips.
    let mut ehp: BTreeMap<(usize, u32), f64> = BTreeMap::new();
    for h in ts.iter().flat_map(|t| &t.handovers) {
        let e = ehp.entry((h.carrier, h.from_cell)).or_insert(f64::INFINITY);
        *e = e.min(h.position_m);
    }
    let (mut near, mut far, mut strong, mut weak) = ((0, 0), (0, 0), (0, 0), (0, 0));
    for h in ts.iter().flat_map(|t| &t.handovers) {
        let ok = usize::from(h.outcome == Outcome::Success);
        let d = h.position_m - ehp[&(h.carrier, h.from_cell)];
        let b = if d < 200.0 { &mut near } else { &mut far };
        *b = (b.0 + ok, b.1 + 1);
        let b = if h.rsrp_dbm >= -95.0 {
            &mut strong
        } else {
            &mut weak
        };
        *b = (b.0 + ok, b.1 + 1);
    }
    let rate = |(ok, n): (usize, usize)| ok as f64 / n.max(1) as f64;
    println!(
        "success <200m {:.3} >=200m {:.3} rsrp>=-95 {:.3} <-95 {:.3}",
        rate(near),
        rate(far),
        rate(strong),
        rate(weak)
    );
    assert!(rate(near) > rate(far), "late handovers must fail more");
    assert!(
        rate(strong) > rate(weak),
        "weak-RSRP handovers must fail more"
    );
}

#[test]
fn outputs_are_consistent() {
    let t = Trip::generate(&TripConfig::hsr(3, 4)).unwrap();
    let steps = t.position_m.len();
    assert_eq!(t.duration_ms, steps as u64 * STEP_MS);
    assert!(
        t.position_m.windows(2).all(|w| w[1] >= w[0]),
        "the train never moves backwards"
    );
    assert!(t.speed_mps.iter().all(|v| *v <= 300.0 / 3.6 + 2.0 + 1e-9));
    assert_eq!(t.context.len(), steps.div_ceil(100));
    for (ci, p) in t.paths.iter().enumerate() {
        assert_eq!(p.dl_bps.len(), steps);
        assert!(
            p.outages_ms.windows(2).all(|w| w[0].1 < w[1].0),
            "outage spans are merged and sorted"
        );
        for &(s, e) in &p.outages_ms {
            for step in (s / STEP_MS)..(e / STEP_MS).min(steps as u64) {
                assert_eq!(
                    p.dl_bps[step as usize], 0.0,
                    "carrier {ci}: delivery inside an outage at {step}"
                );
            }
        }
        // Every success interrupts the carrier for its drawn time, marked as an interruption
        // (held, not dropped, by the emulated links) inside the outages.
        let successes: Vec<_> = t
            .handovers
            .iter()
            .filter(|h| h.carrier == ci && h.outcome == Outcome::Success)
            .collect();
        assert!(!successes.is_empty());
        assert!(p.interruptions_ms.windows(2).all(|w| w[0].1 < w[1].0));
        for h in &successes {
            assert!(
                p.interruptions_ms
                    .iter()
                    .any(|(s, e)| *s <= h.start_ms
                        && *e >= h.start_ms + h.interruption_ms.min(STEP_MS)),
                "no interruption span for {h:?}"
            );
        }
        for &(s, e) in &p.interruptions_ms {
            assert!(
                p.outages_ms.iter().any(|(a, b)| *a <= s && e <= *b),
                "interruption [{s}, {e}) outside every outage"
            );
            assert!(
                successes.iter().any(|h| h.start_ms >= s && h.start_ms < e),
                "interruption [{s}, {e}) without a successful handover"
            );
        }
        // Every failure blacks the carrier out for 1-10 s (plus detection), visible as an outage.
        for h in t
            .handovers
            .iter()
            .filter(|h| h.carrier == ci && h.outcome == Outcome::Failure)
        {
            let lost = h.lost.expect("a failure records where the source was lost");
            assert!(lost.t_ms >= h.start_ms && lost.position_m >= h.position_m);
            // From the start: degraded until the loss, then the blackout.
            let blackout = h.interruption_ms - (lost.t_ms - h.start_ms);
            // (The detection delay is drawn in ms and served in 10 ms steps.)
            assert!((1_000..=10_010).contains(&blackout), "{h:?}");
            assert!(
                p.outages_ms
                    .iter()
                    .any(|(s, e)| *s <= lost.t_ms && *e >= lost.t_ms + 1_000),
                "no blackout at the loss of {h:?}"
            );
        }
    }
    // During a blackout the context reports no serving cell.
    assert!(
        t.context
            .iter()
            .any(|r| r.carriers.iter().any(|c| c.cell.is_none()))
            || t.handovers.iter().all(|h| h.outcome == Outcome::Success)
    );
}

#[test]
fn opportunities_are_byte_accurate() {
    use polycorn_link::trip::PathProcess;
    // 12 Mbit/s for 1 s = 1,500,000 bytes = exactly 1000 opportunities, evenly spread.
    let ops = PathProcess::opportunities_ms(&vec![12e6; 100]);
    assert_eq!(ops.len(), 1000);
    assert_eq!(ops[0], 1);
    assert_eq!(*ops.last().unwrap(), 1000);
    // 0.6 Mbit/s: 75 bytes per ms -> one opportunity every 20 ms, no drift.
    let ops = PathProcess::opportunities_ms(&vec![0.6e6; 100]);
    assert_eq!(ops.len(), 50);
    assert!(ops.windows(2).all(|w| w[1] - w[0] == 20));
}

#[test]
fn bad_configs_are_refused_with_the_field_named() {
    let mut c = TripConfig::hsr(1, 1);
    c.stations_m = vec![0.0, -5.0];
    assert!(Trip::generate(&c)
        .unwrap_err()
        .to_string()
        .contains("stations_m"));
    let mut c = TripConfig::hsr(1, 1);
    c.carriers[1].cell_spacing_m = 10.0;
    assert!(Trip::generate(&c)
        .unwrap_err()
        .to_string()
        .contains("carriers.B.cell_spacing_m"));
    assert!(TripConfig::preset("maglev", 1, 1)
        .unwrap_err()
        .to_string()
        .contains("hsr, ktx"));
    assert!(Trip::generate(&TripConfig::ktx(1, 1)).is_ok());
}

#[test]
fn failures_recur_at_consistent_spots_of_their_cells() {
    // POLYCORN §2.3/§3: failures happen at location-determined spots (the mean failure location
    // of a cell predicts the next one). Over 12 rides of one route, most failures out of a cell
    // with several failures start within 30 m of that cell's median failure start.
    let ts = trips(12);
    let mut per_cell: BTreeMap<(usize, u32), Vec<f64>> = BTreeMap::new();
    for h in ts.iter().flat_map(|t| &t.handovers) {
        if h.outcome == Outcome::Failure {
            per_cell
                .entry((h.carrier, h.from_cell))
                .or_default()
                .push(h.position_m);
        }
    }
    let (mut near, mut total) = (0usize, 0usize);
    for v in per_cell.values_mut().filter(|v| v.len() >= 3) {
        v.sort_by(f64::total_cmp);
        let median = v[v.len() / 2];
        total += v.len();
        near += v.iter().filter(|p| (*p - median).abs() <= 30.0).count();
    }
    println!("{near} of {total} failures within 30 m of their cell's median failure position");
    assert!(total >= 20, "too few repeated failures to judge: {total}");
    assert!(
        near * 10 >= total * 7,
        "failures are not location-consistent: {near} of {total} within 30 m"
    );
}
