use super::*;
use crate::trace::{DelaySeries, DeliveryTrace, Outages};

/// A trip of one path from traces, `duration_ms` long, without outages or interruptions.
fn plain_trip(
    down: &DeliveryTrace,
    up: &DeliveryTrace,
    delay: &DelaySeries,
    duration_ms: u64,
) -> Trip {
    let none = Outages::none();
    let path = TracePath {
        name: "x".into(),
        down,
        up,
        delay,
        outages: &none,
        interruptions: &none,
    };
    Trip::from_traces(&[path], duration_ms)
}

#[test]
fn traces_become_a_trip_byte_for_byte_looped() {
    // Down: 3 opportunities in the first 10 ms, 1 in the next 10 (period 20 ms).
    let down = DeliveryTrace::parse("d", "1\n1\n10\n20\n").unwrap();
    let up = DeliveryTrace::parse("u", "5\n").unwrap();
    let t = plain_trip(&down, &up, &DelaySeries::constant(25_000), 45);
    assert_eq!(t.duration_ms, 50);
    let p = &t.paths[0];
    let per = 1500.0 * 8.0 * 100.0; // one opportunity per 10 ms step, bit/s
    assert_eq!(p.dl_bps, vec![3.0 * per, per, 3.0 * per, per, 3.0 * per]);
    // Up: one every 5 ms, stamps 5, 10 | 15, 20 | ...
    assert_eq!(p.ul_bps, vec![2.0 * per; 5]);
    assert_eq!(p.owd_us, vec![25_000; 5]);
    // A delay series is read at each step's start; looped with the trace, it repeats.
    let owd_with = |points: Vec<(u64, u64)>| {
        let d = DelaySeries::new(points).unwrap().looped(20);
        plain_trip(&down, &up, &d, 45).paths[0].owd_us.clone()
    };
    assert_eq!(owd_with(vec![(0, 30_000), (15, 40_000)]), vec![30_000; 5]);
    assert_eq!(
        owd_with(vec![(0, 30_000), (10, 40_000)]),
        vec![30_000, 40_000, 30_000, 40_000, 30_000]
    );
    // Played back, every step delivers exactly its opportunities.
    let ops = PathProcess::opportunities_ms(&p.dl_bps);
    assert_eq!(ops.len(), 11);
    for k in 0..5u64 {
        let n = ops
            .iter()
            .filter(|&&m| m > k * 10 && m <= k * 10 + 10)
            .count();
        assert_eq!(n, if k % 2 == 0 { 3 } else { 1 }, "step {k}");
    }
    assert!(t.handovers.is_empty() && t.context.is_empty());
    assert!(t.speed_mps.iter().all(|v| *v == 0.0));
    assert_eq!(t.config.name, "traces");
    assert!(p.outages_ms.is_empty() && p.interruptions_ms.is_empty());
    // Outages and interruptions loop with the downlink trace (period 20 ms).
    let (out, held) = (
        Outages::new(vec![(2, 8), (15, 25)]).unwrap(),
        Outages::new(vec![(3, 4)]).unwrap(),
    );
    let t = Trip::from_traces(
        &[TracePath {
            name: "x".into(),
            down: &down,
            up: &up,
            delay: &DelaySeries::constant(25_000),
            outages: &out,
            interruptions: &held,
        }],
        45,
    );
    assert_eq!(
        t.paths[0].outages_ms,
        [(2, 8), (15, 20), (22, 28), (35, 40), (42, 48)]
    );
    assert_eq!(t.paths[0].interruptions_ms, [(3, 4), (23, 24), (43, 44)]);
    // Recorded traces may start at 0 ms: that opportunity is in the first step.
    let zero = DeliveryTrace::parse("z", "0\n0\n7\n12\n").unwrap();
    let t = plain_trip(&zero, &zero, &DelaySeries::constant(0), 30);
    // Loop 1: 0, 0, 7 | 12; loop 2 (base 12): 12, 12 | 19, 24; loop 3 (base 24): 24, 24 | ...
    assert_eq!(t.paths[0].dl_bps[0] / per, 3.0);
    assert_eq!(t.paths[0].dl_bps[1] / per, 4.0);
}

#[test]
fn same_seeds_same_trip_and_route_shared_across_trips() {
    let a = Trip::generate(&TripConfig::hsr(1, 2)).unwrap();
    let b = Trip::generate(&TripConfig::hsr(1, 2)).unwrap();
    assert_eq!(a, b);
    let c = Trip::generate(&TripConfig::hsr(1, 3)).unwrap();
    assert_ne!(a.handovers, c.handovers);
    // Same route: the same cells are handed over from.
    let cells = |t: &Trip| {
        t.handovers
            .iter()
            .filter(|h| h.carrier == 0 && h.outcome == Outcome::Success)
            .map(|h| h.from_cell)
            .collect::<std::collections::BTreeSet<_>>()
    };
    let (ca, cc) = (cells(&a), cells(&c));
    assert!(
        ca.intersection(&cc).count() * 10 >= ca.len() * 8,
        "routes differ between trips"
    );
}

#[test]
fn location_means_cover_the_cruise_and_skip_stations() {
    let t = Trip::generate(&TripConfig::hsr(1, 2)).unwrap();
    let means = t.location_means(1000.0, 500.0);
    assert_eq!(means.len(), t.paths.len());
    let length = *t.position_m.last().unwrap();
    for per_point in &means {
        assert_eq!(per_point.len(), (length / 500.0) as usize);
        // The 60 km line starts, stops at 30 km and ends at a station: no mean within a
        // kilometre and a half of them (still accelerating or braking below 250 km/h) …
        for (j, m) in per_point.iter().enumerate() {
            let x = (j + 1) as f64 * 500.0;
            if [0.0, 30_000.0, 60_000.0]
                .iter()
                .any(|s| (x - s).abs() < 1_500.0)
            {
                assert!(m.is_none(), "{x} m: {m:?}");
            }
        }
        // … and one at most points of the cruise, each a mean of capacities.
        let known: Vec<f64> = per_point.iter().flatten().copied().collect();
        assert!(
            known.len() * 2 > per_point.len(),
            "{} of {}",
            known.len(),
            per_point.len()
        );
        assert!(known.iter().all(|c| *c >= 0.0 && *c <= 100e6));
    }
    // The mean around 10 km is the mean of the steps within 1 km of it.
    let c = &t.paths[0].dl_bps;
    let steps: Vec<usize> = (0..t.position_m.len())
        .filter(|&i| (t.position_m[i] - 10_000.0).abs() <= 1000.0)
        .collect();
    let expect = steps.iter().map(|&i| c[i]).sum::<f64>() / steps.len() as f64;
    let got = means[0][19].unwrap();
    assert!((got - expect).abs() <= 1e-6 * expect, "{got} vs {expect}");
}

#[test]
#[ignore = "prints model statistics over 24 trips; run with --ignored --nocapture when tuning presets"]
fn print_hsr_model_stats() {
    use std::collections::BTreeMap;
    let route = std::env::var("ROUTE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let trips: Vec<Trip> = (0..24)
        .map(|i| Trip::generate(&TripConfig::hsr(route, 100 + i)).unwrap())
        .collect();
    for t in trips.iter().take(2) {
        for s in t.carrier_stats() {
            println!("{s:?}");
        }
        println!("{:?}", t.pair_stats());
    }
    /// Per cell: (position, rsrp, failed) of every handover out of it.
    type Cells = BTreeMap<u32, Vec<(f64, f64, bool)>>;
    let mut cells: [Cells; 2] = Default::default();
    let mut interval = [0.0f64; 2];
    for t in &trips {
        for s in t.carrier_stats().iter().enumerate() {
            interval[s.0] += s.1.handover_interval_s / trips.len() as f64;
        }
        for h in &t.handovers {
            cells[h.carrier].entry(h.from_cell).or_default().push((
                h.position_m,
                h.rsrp_dbm,
                h.outcome == Outcome::Failure,
            ));
        }
    }
    for (c, m) in cells.iter().enumerate() {
        let hos: usize = m.values().map(Vec::len).sum();
        let fails: usize = m.values().flatten().filter(|h| h.2).count();
        let failing: Vec<&Vec<(f64, f64, bool)>> =
            m.values().filter(|v| v.iter().any(|h| h.2)).collect();
        let rates: Vec<f64> = failing
            .iter()
            .map(|v| v.iter().filter(|h| h.2).count() as f64 / v.len() as f64)
            .collect();
        println!(
            "carrier {c}: {hos} handovers, interval {:.2} s, failure share {:.2}%, cells with >=1 failure {:.1}% ({} of {}), of those with a failure rate in [20%, 80%] {:.1}%",
            interval[c],
            100.0 * fails as f64 / hos as f64,
            100.0 * failing.len() as f64 / m.len() as f64,
            failing.len(),
            m.len(),
            100.0 * rates.iter().filter(|r| (0.2..=0.8).contains(*r)).count() as f64
                / rates.len().max(1) as f64,
        );
        // Table 1: pooled over all cells, pooled over cells with a failure, and the mean
        // over cells with a failure of each cell's success rate.
        type Split = fn(f64, f64) -> bool;
        let splits: [(&str, Split); 4] = [
            ("EHP < 200m", |d, _| d < 200.0),
            ("EHP >= 200m", |d, _| d >= 200.0),
            ("RSRP >= -95", |_, r| r >= -95.0),
            ("RSRP < -95", |_, r| r < -95.0),
        ];
        for (name, f) in splits {
            let (mut all, mut fc) = ((0usize, 0usize), (0usize, 0usize));
            let mut macro_rates = Vec::new();
            for v in m.values() {
                let ehp = v.iter().map(|h| h.0).fold(f64::INFINITY, f64::min);
                let sel: Vec<_> = v.iter().filter(|h| f(h.0 - ehp, h.1)).collect();
                let ok = sel.iter().filter(|h| !h.2).count();
                all = (all.0 + ok, all.1 + sel.len());
                if v.iter().any(|h| h.2) {
                    fc = (fc.0 + ok, fc.1 + sel.len());
                    if !sel.is_empty() {
                        macro_rates.push(ok as f64 / sel.len() as f64);
                    }
                }
            }
            let r = |(ok, n): (usize, usize)| 100.0 * ok as f64 / n.max(1) as f64;
            println!(
                "  {name:<12} all cells {:5.1}% ({:4})  failing cells {:5.1}% ({:4})  per-cell mean {:5.1}%",
                r(all),
                all.1,
                r(fc),
                fc.1,
                100.0 * macro_rates.iter().sum::<f64>() / macro_rates.len().max(1) as f64
            );
        }
    }
}

#[test]
fn more_carriers_are_independent_copies_of_the_presets_models() {
    let two = TripConfig::hsr(1, 1);
    let four = two.clone().with_carriers(4).unwrap();
    let names: Vec<&str> = four.carriers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["A", "B", "A2", "B2"]);
    assert_eq!(
        four.carriers[2].cell_spacing_m,
        two.carriers[0].cell_spacing_m
    );
    let t2 = Trip::generate(&two).unwrap();
    let t4 = Trip::generate(&four).unwrap();
    assert_eq!(t4.paths.len(), 4);
    // The first two carriers are the preset's own ride; the copies draw their own.
    assert_eq!(t4.paths[0].dl_bps, t2.paths[0].dl_bps);
    assert_eq!(t4.paths[1].dl_bps, t2.paths[1].dl_bps);
    assert_ne!(t4.paths[2].dl_bps, t4.paths[0].dl_bps);
    let one = two.clone().with_carriers(1).unwrap();
    assert_eq!(one.carriers.len(), 1);
    let err = two.with_carriers(0).unwrap_err().to_string();
    assert!(err.contains("carriers"), "{err}");
}
