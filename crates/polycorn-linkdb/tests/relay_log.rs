//! A relay's own context log as handover history: handovers inferred from the serving cells,
//! a day's log cut into rides, bad rows reported, and simulated rides as their relay saw them
//! against the ground truth.

use std::path::{Path, PathBuf};

use polycorn_linkdb::import::{relay, sim};
use polycorn_linkdb::predict::Track;
use polycorn_linkdb::record::{Direction, Outcome, Source};
use polycorn_linkdb::validate::{leave_one_ride_out_across, Lead, ModelKind, Truth};

fn tmp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("polycorn-relaylog-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A line running north from (0, 0): position = latitude × 111,320 m.
fn north() -> Track {
    Track {
        origin: (0.0, 0.0),
        heading_deg: 0.0,
    }
}

fn lat(pos_m: f64) -> f64 {
    pos_m / 111_320.0
}

fn opts(direction: Option<Direction>) -> relay::Options {
    relay::Options {
        route: "north".into(),
        track: north(),
        direction,
        carriers: None,
        before_day: None,
        done: Default::default(),
        monitor_lag_ms: 0,
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const HEADER: &str = "t_ms,lat,lon,speed_mps,heading_deg,cell_A,rsrp_dbm_A,cell_B,rsrp_dbm_B";

#[test]
fn cell_changes_are_successes_and_lost_cells_failures() {
    let d = tmp_dir("infer");
    let row =
        |t: u64, pos: f64, a: &str, b: &str| format!("{t},{:.9},0.0,100.0,0.0,{a},{b}\n", lat(pos));
    let mut log = format!("{HEADER}\n");
    log += &row(0, 0.0, "1,-90.0", "10,-80.0");
    log += &row(1000, 100.0, "1,-95.0", "10,-81.0");
    log += &row(2000, 200.0, "2,-85.0", "10,-82.0"); // A: 1 -> 2
    log += &row(3000, 300.0, "2,-100.0", ","); // B loses 10
    log += &row(4000, 400.0, ",", ","); // A loses 2
    log += &row(5000, 500.0, ",", "11,-90.0"); // B back on 11
    log += &row(6000, 600.0, "2,-90.0", "11,-91.0"); // A back on 2 (re-established)
    log += "7000,north,0.0,100.0,0.0,2,-90.0,11,-91.0\n"; // line 9: bad
    log += &row(13000, 1300.0, "3,-90.0", "12,-90.0"); // 7 s gap: no handover across it
    log += &row(14000, 1400.0, "3,-90.0", ","); // B loses 12; the log ends
    let file = write(&d, "day.csv", &log);

    let (trips, rep) = relay::import(&file, &opts(Some(Direction::Up))).unwrap();
    assert_eq!(trips.len(), 1);
    assert_eq!(rep.bad.len(), 1, "{rep:?}");
    assert_eq!(rep.bad[0].line, 9);
    assert!(
        rep.bad[0].to_string().contains("day.csv:9"),
        "{}",
        rep.bad[0]
    );
    let t = &trips[0];
    assert_eq!(t.meta.source, Source::Relay);
    assert_eq!(t.meta.name, "day-1");
    assert_eq!(t.meta.carriers, ["A", "B"]);
    assert_eq!(t.meta.duration_ms, 14_000);
    let got: Vec<_> = t
        .handovers
        .iter()
        .map(|h| {
            (
                h.carrier.as_str(),
                h.from_cell.as_str(),
                h.to_cell.as_deref(),
                h.start_ms,
                h.outcome,
                h.interruption_ms,
                h.rsrp_dbm,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "A",
                "1",
                Some("2"),
                1500,
                Outcome::Success,
                None,
                Some(-95.0)
            ),
            (
                "B",
                "10",
                Some("11"),
                2500,
                Outcome::Failure,
                Some(2000),
                Some(-82.0)
            ),
            (
                "A",
                "2",
                Some("2"),
                3500,
                Outcome::Failure,
                Some(2000),
                Some(-100.0)
            ),
            ("B", "12", None, 13500, Outcome::Failure, None, Some(-90.0)),
        ]
    );
    let pos: Vec<f64> = t.handovers.iter().map(|h| h.position_m.unwrap()).collect();
    for (p, want) in pos.iter().zip([150.0, 250.0, 350.0, 1350.0]) {
        assert!((p - want).abs() < 0.01, "{pos:?}");
    }
    assert!(t.handovers.iter().all(|h| h.lost.is_none()));
    let notes = rep.notes.join("\n");
    assert!(notes.contains("2 gaps"), "{notes}");
    assert!(notes.contains("1 failures had no end"), "{notes}");
}

/// A proxy's logs, one directory per relay, with files of the same name: each ride is named
/// by its path below the directory, and `?` (a modem not reported) is a gap, not a loss.
#[test]
fn a_proxys_logs_of_several_relays_are_told_apart() {
    let d = tmp_dir("proxy");
    for (train, b_cells) in [
        ("train-1", ["10", "?", "11"]),
        ("train-2", ["20", "", "20"]),
    ] {
        std::fs::create_dir_all(d.join(train)).unwrap();
        let mut log = format!("{HEADER}\n");
        for (k, b) in b_cells.iter().enumerate() {
            let rsrp = if b.is_empty() || *b == "?" {
                ""
            } else {
                "-90.0"
            };
            log += &format!(
                "{},{:.9},0.0,100.0,0.0,1,-90.0,{b},{rsrp}\n",
                k * 1000,
                lat(100.0 * k as f64)
            );
        }
        write(&d.join(train), "context-20261130T120000Z.csv", &log);
    }
    let (mut trips, rep) = relay::import(&d, &opts(Some(Direction::Up))).unwrap();
    assert!(rep.bad.is_empty(), "{rep:?}");
    trips.sort_by(|a, b| a.meta.name.cmp(&b.meta.name));
    let got: Vec<_> = trips
        .iter()
        .map(|t| {
            let h: Vec<_> = t
                .handovers
                .iter()
                .map(|h| (h.from_cell.clone(), h.to_cell.clone(), h.outcome))
                .collect();
            (t.meta.name.clone(), h)
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "train-1/context-20261130T120000Z-1".to_string(),
                vec![("10".to_string(), Some("11".to_string()), Outcome::Success)]
            ),
            (
                "train-2/context-20261130T120000Z-1".to_string(),
                vec![("20".to_string(), Some("20".to_string()), Outcome::Failure)]
            ),
        ]
    );
    assert_ne!(trips[0].meta.key, trips[1].meta.key);
    // Each ride began at its log's first fix, which the log's name gives.
    for t in &trips {
        assert_eq!(
            t.meta.started_ms,
            Some(1_796_040_000_000),
            "{}",
            t.meta.name
        );
        assert_eq!(t.meta.start_ms(), t.meta.started_ms);
    }

    // Only the days before a given one: today's logs are still being written.
    write(&d, "notes.csv", HEADER);
    for (before, files) in [("20261130", 0), ("20261201", 2)] {
        let o = relay::Options {
            before_day: Some(before.into()),
            ..opts(Some(Direction::Up))
        };
        let (trips, rep) = relay::import(&d, &o).unwrap();
        assert_eq!((trips.len(), rep.files), (files, files), "before {before}");
        assert!(
            rep.notes
                .iter()
                .any(|n| n.contains(&format!("{} files left for later", 3 - files))),
            "{rep:?}"
        );
    }
    assert_eq!(
        relay::log_day(Path::new("x/context-20261130T120000Z-2.csv")),
        Some("20261130")
    );
    assert_eq!(relay::log_day(Path::new("context-2026113.csv")), None);
    assert_eq!(
        relay::log_start_ms(Path::new("x/context-20261130T120001Z-2.csv")),
        Some(1_796_040_001_000)
    );
    for bad in [
        "context-20261130T120000.csv",
        "context-20261131T120000Z.csv",
        "context-20261130T250000Z.csv",
        "ctx-20261130T120000Z.csv",
        "context-2026113.csv",
    ] {
        assert_eq!(relay::log_start_ms(Path::new(bad)), None, "{bad}");
    }
}

#[test]
fn a_day_back_and_forth_is_cut_into_rides_at_the_turn() {
    let d = tmp_dir("rides");
    let mut log = String::from("t_ms,lat,lon,speed_mps,heading_deg,cell_A,rsrp_dbm_A\n");
    let mut pos = 0.0;
    let mut push = |t: u64, speed: f64, pos: f64, cell: u32| {
        log += &format!(
            "{},{:.9},0.0,{},0.0,{cell},-90.0\n",
            t * 1000,
            lat(pos),
            speed.abs()
        );
    };
    // Up 5 km, a 2-minute station stop, up 5 km more, 20 minutes at the terminus, down 10 km.
    let legs: [(u64, f64); 5] = [
        (100, 50.0),
        (120, 0.0),
        (100, 50.0),
        (1200, 0.0),
        (200, -50.0),
    ];
    let mut t = 0;
    for (secs, v) in legs {
        for _ in 0..secs {
            pos += v;
            let cell = 1 + (pos / 2000.0) as u32;
            push(t, v, pos, cell);
            t += 1;
        }
    }
    let file = write(&d, "2026-11-30.csv", &log);
    let (trips, rep) = relay::import(&file, &opts(None)).unwrap();
    let rides: Vec<_> = trips
        .iter()
        .map(|t| (t.meta.name.as_str(), t.meta.direction, t.meta.duration_ms))
        .collect();
    assert_eq!(
        rides,
        [
            ("2026-11-30-1", Direction::Up, 319_000),
            ("2026-11-30-2", Direction::Down, 199_000)
        ],
        "{}",
        rep.summary(5)
    );
    // Cells every 2 km: 5 changes up; down, 4 (the change to cell 5 came as the train left the
    // terminus, between the two rides); each ride's times start at 0.
    assert_eq!(trips[0].handovers.len(), 5);
    assert_eq!(trips[1].handovers.len(), 4);
    assert!(trips[1].handovers[0].start_ms < 60_000);
    // A log not named by the recorder says nothing of when its rides began; one that is does.
    assert!(trips.iter().all(|t| t.meta.started_ms.is_none()));
    let named = write(&d, "context-20261130T060000Z.csv", &log);
    let (dated, _) = relay::import(&named, &opts(None)).unwrap();
    let starts: Vec<u64> = dated.iter().filter_map(|t| t.meta.started_ms).collect();
    assert_eq!(starts.len(), 2);
    let base = 1_796_040_000_000 - 6 * 3_600_000;
    assert!(base <= starts[0], "{starts:?}");
    assert!(
        starts[0] + dated[0].meta.duration_ms <= starts[1],
        "{starts:?}"
    );
    assert!(
        starts[1] + dated[1].meta.duration_ms <= base + 1_720_000,
        "{starts:?}"
    );
    assert!(trips
        .iter()
        .all(|t| t.handovers.iter().all(|h| !h.outcome.failed())));
    assert!(
        rep.notes
            .iter()
            .any(|n| n.contains("fixes outside any ride")),
        "{:?}",
        rep.notes
    );

    // A log where the train never leaves the station has no ride, and says so.
    let still = write(
        &d,
        "depot.csv",
        "t_ms,lat,lon,speed_mps,heading_deg,cell_A,rsrp_dbm_A\n0,0.0,0.0,0.0,0.0,1,-80.0\n1000,0.0,0.0,0.0,0.0,1,-80.0\n",
    );
    let (trips, rep) = relay::import(&still, &opts(None)).unwrap();
    assert!(trips.is_empty());
    assert!(rep.notes.iter().any(|n| n.contains("no ride")), "{rep:?}");
}

#[test]
fn a_log_without_carriers_or_with_the_wrong_names_is_refused_naming_the_file() {
    let d = tmp_dir("bad");
    let f = write(
        &d,
        "nocell.csv",
        "t_ms,lat,lon,speed_mps,heading_deg\n0,0,0,0,0\n",
    );
    let e = relay::import(&f, &opts(None)).unwrap_err().to_string();
    assert!(
        e.contains("nocell.csv:1") && e.contains("no carrier"),
        "{e}"
    );
    let f = write(
        &d,
        "norsrp.csv",
        "t_ms,lat,lon,speed_mps,heading_deg,cell_A\n",
    );
    let e = relay::import(&f, &opts(None)).unwrap_err().to_string();
    assert!(
        e.contains("norsrp.csv:1") && e.contains("rsrp_dbm_A"),
        "{e}"
    );
    let f = write(&d, "two.csv", &format!("{HEADER}\n"));
    let mut o = opts(None);
    o.carriers = Some(vec!["China Mobile".into()]);
    let e = relay::import(&f, &o).unwrap_err().to_string();
    assert!(
        e.contains("two.csv:1") && e.contains("2 carriers in the header (A, B), 1 names"),
        "{e}"
    );
    // The right number of names renames the carriers.
    o.carriers = Some(vec!["CM".into(), "CU".into()]);
    let log = format!(
        "{HEADER}\n0,0.0,0.0,90.0,0.0,1,-90.0,7,-90.0\n1000,{:.9},0.0,90.0,0.0,2,-90.0,7,-90.0\n",
        lat(90.0)
    );
    let f = write(&d, "named.csv", &log);
    o.direction = Some(Direction::Up);
    let (trips, _) = relay::import(&f, &o).unwrap();
    assert_eq!(trips[0].meta.carriers, ["CM", "CU"]);
    assert_eq!(trips[0].handovers[0].carrier, "CM");
}

/// Simulated HSR rides with their ground truth, and the same rides as their relay would have
/// recorded them (one fix a second): every blackout spans a fix, so the failures are found,
/// each where the link went dark to within a second's travel; and LinkDB built from the relays'
/// inferences predicts the true failures about as well as LinkDB built from the truth.
#[test]
fn simulated_rides_as_their_relay_saw_them_against_the_truth() {
    let truth = sim::simulate("hsr", 1, 1..=8).unwrap();
    let seen: Vec<_> = truth.iter().map(|t| relay::as_seen_by_relay(t).0).collect();
    let mut all = relay::Comparison::default();
    for (t, s) in truth.iter().zip(&seen) {
        assert_eq!(s.meta.source, Source::Relay);
        assert_eq!(s.samples, t.samples);
        all.merge(relay::compare(&t.handovers, &s.handovers));
    }
    let (tf, found, inferred) = (
        all.true_failures,
        all.matched_failures,
        all.inferred_failures,
    );
    let mut errs: Vec<f64> = all.position_error_m.iter().map(|e| e.abs()).collect();
    errs.sort_by(f64::total_cmp);
    let median = errs[errs.len() / 2];
    println!(
        "{found} of {tf} true failures found, {inferred} inferred; |position error| median {median:.0} m"
    );
    assert!(tf >= 20, "{tf} failures in 8 rides");
    assert!(found as f64 >= 0.95 * tf as f64, "{found} of {tf}");
    assert!(inferred <= tf + tf / 20, "{inferred} inferred for {tf}");
    // Half a second's travel at 350 km/h is 49 m.
    assert!(median < 60.0, "median error {median} m");

    // Judged as HPR throttles (from t̂_HOF − L, L = 185 ms + 20 m / speed): the relays' history
    // places failures where the link went dark, the truth where the handover started, earlier;
    // without HPR's lead half of a cell's failures come "late" by construction (see the manual).
    let kinds = [ModelKind::Paper];
    let lead = Lead {
        rtt_ms: 185.0,
        gps_error_m: 20.0,
    };
    let from_truth = leave_one_ride_out_across(&truth, &truth, &kinds, lead, Truth::Disruption);
    let from_relay = leave_one_ride_out_across(&seen, &truth, &kinds, lead, Truth::Disruption);
    let share = |r: &polycorn_linkdb::validate::Report| {
        r.total.fail_correct as f64 / r.total.failures.max(1) as f64
    };
    let (a, b) = (share(&from_truth[0].1), share(&from_relay[0].1));
    println!("failures predicted in time: history from the truth {a:.3}, from the relays {b:.3}");
    assert!(b >= a - 0.06, "from the relays {b}, from the truth {a}");
}

proptest::proptest! {
    /// Any sequence of serving cells, lost cells and gaps: every cell change next to each other
    /// is one success, every cell lost one failure, nothing is made up across a gap, and every
    /// handover lies within the log, in order.
    #[test]
    fn every_change_and_every_loss_is_one_handover(
        rows in proptest::collection::vec((1u64..8, proptest::option::of(1u8..4)), 1..200)
    ) {
        let mut samples = Vec::new();
        let mut radio = Vec::new();
        let mut t = 0;
        let (mut successes, mut failures) = (0, 0);
        let mut prev_t: Option<u64> = None;
        // The cell held since the last row, with no gap since.
        let mut on: Option<u8> = None;
        for &(step_s, cell) in &rows {
            t += step_s * 1000;
            if prev_t.is_some_and(|pt| t - pt > relay::MAX_GAP_MS) {
                on = None;
            }
            match (on, cell) {
                (Some(a), Some(b)) if a != b => successes += 1,
                (Some(_), None) => failures += 1,
                _ => {}
            }
            on = cell;
            prev_t = Some(t);
            samples.push(polycorn_linkdb::record::Sample {
                t_ms: t,
                lat: Some(0.0),
                lon: Some(0.0),
                position_m: Some(t as f64 / 10.0),
                speed_mps: Some(100.0),
                heading_deg: None,
            });
            radio.push(polycorn_linkdb::record::RadioSample {
                t_ms: t,
                carrier: "A".into(),
                cell: cell.map(|c| c.to_string()),
                rsrp_dbm: None,
            });
        }
        let (hos, _) = relay::infer_handovers(&["A".into()], &samples, &radio, Direction::Up);
        let got_s = hos.iter().filter(|h| !h.outcome.failed()).count();
        let got_f = hos.iter().filter(|h| h.outcome.failed()).count();
        proptest::prop_assert_eq!((got_s, got_f), (successes, failures));
        let (first, last) = (samples[0].t_ms, samples[samples.len() - 1].t_ms);
        for w in hos.windows(2) {
            proptest::prop_assert!(w[0].start_ms <= w[1].start_ms);
        }
        for h in &hos {
            proptest::prop_assert!((first..=last).contains(&h.start_ms));
            proptest::prop_assert!(h.position_m.is_some());
            if let Some(i) = h.interruption_ms {
                proptest::prop_assert!(h.start_ms + i <= last);
            }
        }
    }
}

/// A modem monitor that reports late: the same handovers are inferred, each as late as the
/// monitor, and the fixes are untouched.
#[test]
fn a_late_modem_monitor_shifts_every_inferred_handover_by_its_lag() {
    let truth = sim::simulate("hsr", 1, 1..=2).unwrap();
    for t in &truth {
        let (now, _) = relay::as_seen_by_relay(t);
        assert_eq!(relay::as_seen_by_relay_lagged(t, 0, 0).0, now);
        let (late, _) = relay::as_seen_by_relay_lagged(t, 2_000, 0);
        assert_eq!(late.samples, t.samples);
        // Nothing reported in the first two seconds.
        assert!(late.radio.iter().all(|r| r.t_ms >= 2_000));
        // Past the first seconds, each handover the same, 2 s later.
        let key = |h: &polycorn_linkdb::record::HandoverRecord| {
            (
                h.carrier.clone(),
                h.from_cell.clone(),
                h.to_cell.clone(),
                h.outcome,
            )
        };
        let a: Vec<_> = now
            .handovers
            .iter()
            .filter(|h| h.start_ms >= 3_000)
            .collect();
        let b: Vec<_> = late
            .handovers
            .iter()
            .filter(|h| h.start_ms >= 5_000)
            .collect();
        assert!(a.len() > 50, "{} handovers", a.len());
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(key(x), key(y));
            assert_eq!(y.start_ms, x.start_ms + 2_000, "{x:?} {y:?}");
        }
    }
}

/// A monitor's lag undone at import: the cells are moved back by it, the handovers with them,
/// each placed where the train was then (between fixes, interpolated); a simulated lag undone
/// by as much gives the handovers of a monitor without lag.
#[test]
fn a_monitor_lag_undone_at_import_moves_the_handovers_back() {
    let d = tmp_dir("lag");
    let row =
        |t: u64, pos: f64, a: &str, b: &str| format!("{t},{:.9},0.0,100.0,0.0,{a},{b}\n", lat(pos));
    let mut log = format!("{HEADER}\n");
    log += &row(0, 0.0, "1,-90.0", "10,-80.0");
    log += &row(1000, 100.0, "1,-95.0", "10,-81.0");
    log += &row(2000, 200.0, "2,-85.0", "10,-82.0"); // A: 1 -> 2 reported here
    log += &row(3000, 300.0, "2,-100.0", ","); // B's 10 lost, reported here
    log += &row(4000, 400.0, "2,-100.0", "11,-90.0");
    let file = write(&d, "late.csv", &log);
    let at = |lag: u64| {
        let o = relay::Options {
            monitor_lag_ms: lag,
            ..opts(Some(Direction::Up))
        };
        let (trips, _) = relay::import(&file, &o).unwrap();
        trips[0]
            .handovers
            .iter()
            .map(|h| (h.carrier.clone(), h.start_ms, h.position_m.unwrap().round()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        at(0),
        [
            ("A".to_string(), 1500, 150.0),
            ("B".to_string(), 2500, 250.0)
        ]
    );
    // 600 ms late: each 600 ms (60 m at 100 m/s) earlier.
    assert_eq!(
        at(600),
        [("A".to_string(), 900, 90.0), ("B".to_string(), 1900, 190.0)]
    );

    // Simulated rides: a monitor 2 s late, undone by 2 s, gives what a monitor on time gives
    // (but for the ride's last seconds, which the late monitor never reported).
    for t in &sim::simulate("hsr", 1, 1..=2).unwrap() {
        let (now, _) = relay::as_seen_by_relay(t);
        let (undone, _) = relay::as_seen_by_relay_lagged(t, 2_000, 2_000);
        let end = t.meta.duration_ms.saturating_sub(3_000);
        let early = |v: &[polycorn_linkdb::record::HandoverRecord]| {
            v.iter()
                .filter(|h| h.start_ms < end)
                .cloned()
                .collect::<Vec<_>>()
        };
        assert!(early(&now.handovers).len() > 50);
        assert_eq!(early(&now.handovers), early(&undone.handovers));
    }
}
