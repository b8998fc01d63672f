//! Predictors on hand-made histories, importers on hand-made and real files, and the validation
//! on simulated HSR trips.

use std::path::{Path, PathBuf};

use polycorn_linkdb::import::{sim, ucc5g, wmnlab};
use polycorn_linkdb::record::{
    Direction, HandoverRecord, LossRecord, Outcome, Sample, Source, TripData, TripMeta,
};
use polycorn_linkdb::store::{Store, TripFilter};
use polycorn_linkdb::validate::{
    leave_one_ride_out, leave_one_ride_out_judged, leave_one_ride_out_with, replay_judged,
    train_and_test, Categories, Lead, ModelKind, SetSize, TrainingError, Truth, T1_S, T2_S,
};
use polycorn_sched::predict::HandoverPredictor;
use polycorn_sched::{Duration, Instant, PathId};

fn ho(cell: &str, pos: f64, outcome: Outcome, dir: Direction) -> HandoverRecord {
    HandoverRecord {
        carrier: "A".into(),
        from_cell: cell.into(),
        to_cell: None,
        direction: dir,
        start_ms: 0,
        position_m: Some(pos),
        lat: None,
        lon: None,
        rsrp_dbm: Some(-100.0),
        outcome,
        interruption_ms: Some(if outcome == Outcome::Failure {
            2000
        } else {
            40
        }),
        lost: None,
    }
}

fn trip(name: &str, dir: Direction, hos: Vec<HandoverRecord>) -> TripData {
    let mut t = TripData {
        meta: TripMeta {
            key: String::new(),
            source: Source::Sim,
            name: name.into(),
            route: "test".into(),
            direction: dir,
            carriers: vec!["A".into()],
            duration_ms: 100_000,
            started_ms: None,
        },
        handovers: hos,
        samples: vec![Sample {
            t_ms: 0,
            lat: None,
            lon: None,
            position_m: Some(0.0),
            speed_mps: Some(50.0),
            heading_deg: None,
        }],
        radio: vec![],
    };
    t.seal();
    t
}

#[test]
fn paper_predictor_times_the_mean_failure_position() {
    let up = Direction::Up;
    let history = [
        trip(
            "t1",
            up,
            vec![
                ho("c1", 900.0, Outcome::Success, up),
                ho("c2", 2000.0, Outcome::Success, up),
            ],
        ),
        trip("t2", up, vec![ho("c1", 1000.0, Outcome::Failure, up)]),
        trip("t3", up, vec![ho("c1", 1100.0, Outcome::Failure, up)]),
    ];
    let refs: Vec<&TripData> = history.iter().collect();
    let mut p = ModelKind::Paper.build(&refs);
    let path = PathId::new(0).unwrap();
    let now = Instant::from_millis(10_000);
    p.map_path(path, "A");
    p.update_fix(now, 850.0, 50.0, up);
    p.update_cell(now, path, Some("c1"), Some(-100.0));
    // Mean failure position 1050 m, 200 m ahead at 50 m/s: 4 s from now.
    assert_eq!(
        p.next_failure(path, now),
        Some(now + Duration::from_secs(4))
    );
    // Dead reckoning: one second later the prediction does not move.
    assert_eq!(
        p.next_failure(path, now + Duration::from_secs(1)),
        Some(now + Duration::from_secs(4))
    );
    // Past it: the prediction lies in the past (HPR rejects at once).
    p.update_fix(now, 1150.0, 50.0, up);
    assert_eq!(p.next_failure(path, now), Some(now.saturating_sub_secs(2)));
    // A cell without recorded failures, an unknown cell, a stopped train: nothing.
    p.update_cell(now, path, Some("c2"), None);
    assert_eq!(p.next_failure(path, now), None);
    p.update_cell(now, path, Some("never-seen"), None);
    assert_eq!(p.next_failure(path, now), None);
    p.update_cell(now, path, Some("c1"), None);
    p.update_fix(now, 850.0, 0.0, up);
    assert_eq!(p.next_failure(path, now), None);
    // The other direction is another cell.
    p.update_fix(now, 850.0, 50.0, Direction::Down);
    assert_eq!(p.next_failure(path, now), None);
    // An unmapped path predicts nothing.
    assert_eq!(p.next_failure(PathId::new(1).unwrap(), now), None);
}

/// Losing the serving cell (a blackout) keeps the path failed until a cell is back, whether or
/// not the lost cell had a prediction; a path that never reported a cell is left alone.
#[test]
fn a_lost_cell_keeps_the_path_failed_until_a_cell_is_back() {
    let up = Direction::Up;
    let history = [
        trip("t1", up, vec![ho("c1", 1000.0, Outcome::Failure, up)]),
        trip("t2", up, vec![ho("c2", 2000.0, Outcome::Success, up)]),
    ];
    let refs: Vec<&TripData> = history.iter().collect();
    let mut p = ModelKind::Paper.build(&refs);
    let (a, b) = (PathId::new(0).unwrap(), PathId::new(1).unwrap());
    let t0 = Instant::from_millis(10_000);
    let later = t0 + Duration::from_secs(3);
    p.map_path(a, "A");
    p.map_path(b, "A");
    p.update_fix(t0, 990.0, 50.0, up);
    // A path without any cell report predicts nothing, before and after a `None` report.
    p.update_cell(t0, b, None, None);
    assert_eq!(p.next_failure(b, later), None);
    // Path a: predicted at 1000 m, then the cell is lost at t0: failed since t0, and the
    // prediction does not wander with the fixes that follow.
    p.update_cell(t0, a, Some("c1"), Some(-110.0));
    assert_eq!(p.next_failure(a, t0), Some(t0 + Duration::from_millis(200)));
    p.update_cell(t0, a, None, None);
    p.update_fix(later, 1140.0, 50.0, up);
    p.update_cell(later, a, None, None);
    assert_eq!(p.next_failure(a, later), Some(t0));
    // The loss itself is known too (ER with `cell_loss` reinjects on it); b never had a cell.
    assert_eq!(p.cell_lost_since(a, later), Some(t0));
    assert_eq!(p.cell_lost_since(b, later), None);
    // A new cell ends it: c2 has no failure history.
    p.update_cell(later, a, Some("c2"), Some(-90.0));
    assert_eq!(p.next_failure(a, later), None);
    assert_eq!(p.cell_lost_since(a, later), None);
    // Also a cell without any prediction: losing it is a failure under way, and an unknown
    // cell coming back ends it too.
    p.update_cell(later, a, None, None);
    assert_eq!(
        p.next_failure(a, later + Duration::from_secs(1)),
        Some(later)
    );
    p.update_cell(later, a, Some("never-seen"), None);
    assert_eq!(p.next_failure(a, later), None);
    // Re-mapping a path forgets it.
    p.update_cell(later, a, None, None);
    p.map_path(a, "A");
    assert_eq!(p.next_failure(a, later), None);
}

trait SubSecs {
    fn saturating_sub_secs(self, s: u64) -> Instant;
}
impl SubSecs for Instant {
    fn saturating_sub_secs(self, s: u64) -> Instant {
        Instant::from_micros(self.as_micros().saturating_sub(s * 1_000_000))
    }
}

#[test]
fn down_direction_counts_progress_backwards() {
    let down = Direction::Down;
    let history = [
        trip("d1", down, vec![ho("c9", -1000.0, Outcome::Failure, down)]),
        trip("d2", down, vec![ho("c9", -1200.0, Outcome::Failure, down)]),
    ];
    let refs: Vec<&TripData> = history.iter().collect();
    let mut p = ModelKind::Paper.build(&refs);
    let path = PathId::new(0).unwrap();
    p.map_path(path, "A");
    // Travelling towards decreasing positions from -500: the mean failure (-1100) is 600 m ahead.
    p.update_fix(Instant::ZERO, -500.0, 100.0, down);
    p.update_cell(Instant::ZERO, path, Some("c9"), None);
    assert_eq!(
        p.next_failure(path, Instant::ZERO),
        Some(Instant::from_millis(6_000))
    );
}

#[test]
fn location_table_blocks_inside_recorded_zones() {
    let up = Direction::Up;
    // A failure at 1000 m with a 2 s interruption at 50 m/s: zone [1000, 1100).
    let history = [trip("z", up, vec![ho("c1", 1000.0, Outcome::Failure, up)])];
    let refs: Vec<&TripData> = history.iter().collect();
    let mut p = ModelKind::LocationTable.build(&refs);
    let path = PathId::new(0).unwrap();
    p.map_path(path, "A");
    p.update_fix(Instant::ZERO, 900.0, 50.0, up);
    assert!(!p.in_handover_zone(path, Instant::ZERO));
    assert_eq!(
        p.next_failure(path, Instant::ZERO),
        Some(Instant::from_millis(2_000))
    );
    assert!(p.in_handover_zone(path, Instant::from_millis(3_000)));
    assert!(!p.in_handover_zone(path, Instant::from_millis(4_100)));
}

fn tmp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("polycorn-linkdb-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const WMN_HEADER: &str = "Timestamp,lat,long,gpsspeed,LTE_HO,MN_HO,eNB_to_ENDC,gNB_Rel,gNB_HO,RLF,SCG_RLF,num_of_neis,RSRP,RSRQ";

#[test]
fn wmnlab_rows_become_handovers_and_bad_rows_are_reported_with_file_and_line() {
    let d = tmp_dir("wmn");
    let f = d.join("2023-04-17_qc01_exp1_#02_B3.csv");
    let rows = [
        WMN_HEADER,
        "2023-04-17 10:00:00,-,-,-,0,0,0,0,0,0,0,1,-80,-10",
        "2023-04-17 10:00:01,-,-,-,1,0,0,0,0,0,0,1,-81,-10", // success
        "2023-04-17 10:00:02,-,-,-,0,0",                     // short row (line 4)
        "2023-04-17 10:00:40,-,-,-,0,0,0,0,0,1,0,1,-99,-12", // RLF = failure
        "2023-04-17 10:00:41,-,-,-,1,0,0,0,0,0,0,1,-90,-10", // re-establishment, merged
        "yesterday,-,-,-,0,0,0,0,0,0,0,1,-80,-10",           // bad timestamp (line 7)
        "2023-04-17 10:00:43,-,-,-,x,0,0,0,0,0,0,1,-80,-10", // bad flag (line 8)
        "2023-04-17 10:00:44,-,-,-,0,0,0,0,1,0,0,1,-80,-10", // NR event only
    ];
    std::fs::write(&f, rows.join("\n")).unwrap();
    std::fs::write(d.join("notes.csv"), "whatever").unwrap();
    let (trips, rep) = wmnlab::import(&d, wmnlab::Options::default()).unwrap();
    assert_eq!(trips.len(), 1);
    let t = &trips[0];
    assert_eq!(t.meta.name, "2023-04-17_exp1_#02/qc01");
    assert_eq!(t.meta.direction, Direction::Down, "even runs go down");
    assert_eq!(t.meta.carriers, vec!["B3".to_string()]);
    let outcomes: Vec<Outcome> = t.handovers.iter().map(|h| h.outcome).collect();
    assert_eq!(outcomes, vec![Outcome::Success, Outcome::Failure]);
    // Dead reckoning at 10 m/s, down the line; 40 s = 400 m → grid bin 1 of 300 m.
    let fail = &t.handovers[1];
    assert_eq!(fail.position_m, Some(-400.0));
    assert_eq!(fail.from_cell, "g1");
    assert_eq!(fail.start_ms, 40_000);
    let lines: Vec<usize> = rep.bad.iter().map(|b| b.line).collect();
    assert_eq!(lines, vec![4, 7, 8], "{}", rep.summary(10));
    assert!(rep.bad[0]
        .to_string()
        .contains("2023-04-17_qc01_exp1_#02_B3.csv:4:"));
    assert!(
        rep.notes.iter().any(|n| n.contains("notes.csv")),
        "skipped files are named"
    );
    assert!(rep
        .notes
        .iter()
        .any(|n| n.starts_with("1 LTE_HO/MN_HO events within")));
    std::fs::remove_dir_all(d).unwrap();
}

/// The whole header of a WMN Lab file, and rows shaped like its rows.
const WMN_FULL_HEADER: &str = "Timestamp,lat,long,gpsspeed,LTE_HO,MN_HO,eNB_to_ENDC,gNB_Rel,gNB_HO,RLF,SCG_RLF,num_of_neis,RSRP,RSRQ,RSRP1,RSRQ1,RSRP2,RSRQ2,nr-RSRP,nr-RSRQ,nr-RSRP1,nr-RSRQ1,nr-RSRP2,nr-RSRQ2,dl-loss,ul-loss,dl-exc-lat,ul-exc-lat,dl-latency,ul-latency";

fn wmn_full_row(second: u32, events: [&str; 7], rsrp: &str) -> String {
    format!(
        "2023-03-26 16:37:{second:02},24.99984033,121.55818816,0.24,{},3,{rsrp},-12.54,-93.27,-20.14,-93.37,-19.59,-77.92,-13.10,-84.99,-17.61,-86.94,-16.97,0,0,0,0,0.0109,0.0078",
        events.join(",")
    )
}

#[test]
fn wmnlab_several_events_in_one_bin_are_each_a_record() {
    let d = tmp_dir("wmn-multi");
    let f = d.join("2023-03-26_qc00_#01_All.csv");
    let z = "0";
    let rows = [
        WMN_FULL_HEADER.to_string(),
        wmn_full_row(0, [z; 7], "-84.1875"),
        // Two master-node handovers in one second, as a list and as a count.
        wmn_full_row(10, [z, "1@1", z, z, z, z, z], "-90.5"),
        wmn_full_row(20, [z, "2", "1", z, z, z, z], "-91.25"),
        // An LTE handover and a master-node handover in the same second; an NR list.
        wmn_full_row(30, ["1", "1", z, z, "1@1", z, z], "-92.0"),
        // Two failures in one second; the handover after them re-establishes the link.
        wmn_full_row(40, [z, z, z, z, z, "1@1", z], "-110.0"),
        wmn_full_row(41, [z, "1", z, z, z, z, z], "-100.0"),
    ];
    std::fs::write(&f, rows.join("\n")).unwrap();
    let (trips, rep) = wmnlab::import(&d, wmnlab::Options::default()).unwrap();
    assert!(rep.bad.is_empty(), "{}", rep.summary(10));
    let hos: Vec<(u64, Outcome, Option<f64>)> = trips[0]
        .handovers
        .iter()
        .map(|h| (h.start_ms, h.outcome, h.rsrp_dbm))
        .collect();
    let (s, fl) = (Outcome::Success, Outcome::Failure);
    assert_eq!(
        hos,
        vec![
            (10_000, s, Some(-90.5)),
            (10_000, s, Some(-90.5)),
            (20_000, s, Some(-91.25)),
            (20_000, s, Some(-91.25)),
            (30_000, s, Some(-92.0)),
            (30_000, s, Some(-92.0)),
            (40_000, fl, Some(-110.0)),
            (40_000, fl, Some(-110.0)),
        ]
    );
    let note = |start: &str| rep.notes.iter().any(|n| n.starts_with(start));
    assert!(note("1 LTE_HO/MN_HO events within"), "{:?}", rep.notes);
    assert!(note("3 NR secondary-leg events"), "{:?}", rep.notes);
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn wmnlab_malformed_event_cells_name_file_row_and_column() {
    let d = tmp_dir("wmn-malformed");
    let f = d.join("2023-03-26_qc00_#01_All.csv");
    let z = "0";
    let rows = [
        WMN_FULL_HEADER.to_string(),
        wmn_full_row(0, [z; 7], "-84.1875"),
        wmn_full_row(1, [z, "1@", z, z, z, z, z], "-84.0"), // line 3
        wmn_full_row(2, [z, z, z, z, z, "1@x", z], "-84.0"), // line 4
        wmn_full_row(3, ["1.5", z, z, z, z, z, z], "-84.0"), // line 5
        wmn_full_row(4, [z, z, z, z, "-", z, z], "-84.0"),  // line 6
        wmn_full_row(5, [z, "1", z, z, z, z, z], "-84.0"),  // read
    ];
    std::fs::write(&f, rows.join("\n")).unwrap();
    let (trips, rep) = wmnlab::import(&d, wmnlab::Options::default()).unwrap();
    assert_eq!(trips[0].handovers.len(), 1);
    let bad: Vec<String> = rep.bad.iter().map(|b| b.to_string()).collect();
    let file = f.display().to_string();
    for (i, (line, column, cell)) in [
        (3, "MN_HO", "1@"),
        (4, "RLF", "1@x"),
        (5, "LTE_HO", "1.5"),
        (6, "gNB_HO", "-"),
    ]
    .into_iter()
    .enumerate()
    {
        let b = &bad[i];
        assert!(
            b.starts_with(&format!(
                "{file}:{line}: column `{column}`: `{cell}` is not"
            )),
            "{b}"
        );
    }
    assert_eq!(bad.len(), 4, "{bad:?}");
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn ucc5g_cell_change_is_a_handover() {
    let d = tmp_dir("ucc");
    let sub = d.join("Driving");
    std::fs::create_dir_all(&sub).unwrap();
    let h = "Timestamp,Longitude,Latitude,Speed,Operatorname,CellID,NetworkMode,RSRP,RAWCELLID";
    let rows = [
        h,
        "2019.12.16_07.22.43,-8.38,51.93,36,B,12,LTE,-98,100",
        "2019.12.16_07.22.44,-8.38,51.93,36,B,12,LTE,-99,100",
        "2019.12.16_07.22.45,-8.38,51.93,36,B,13,LTE,-90,200",
        "2019.12.16_07.22.46,-8.38,51.93,36,B,13,LTE,-90,-",
        "2019.12.16_07.22.47,-8.38,51.93,36,C,13,LTE,-90,200",
        "2019.12.16_07.22.48,-8.38,51.93,36,B,13,LTE,-90,300",
    ];
    std::fs::write(sub.join("B_x.csv"), rows.join("\n")).unwrap();
    let (trips, rep) = ucc5g::import(&d).unwrap();
    let t = &trips[0];
    assert_eq!(t.meta.name, "Driving-B_x");
    let hs: Vec<(&str, Option<&str>, u64, Option<f64>)> = t
        .handovers
        .iter()
        .map(|h| {
            (
                h.from_cell.as_str(),
                h.to_cell.as_deref(),
                h.start_ms,
                h.rsrp_dbm,
            )
        })
        .collect();
    assert_eq!(
        hs,
        vec![
            ("100", Some("200"), 2000, Some(-99.0)),
            ("200", Some("300"), 5000, Some(-90.0))
        ]
    );
    assert_eq!(rep.bad.len(), 1, "{}", rep.summary(5));
    assert_eq!(rep.bad[0].line, 6);
    assert!(t.samples[0]
        .speed_mps
        .is_some_and(|v| (v - 10.0).abs() < 1e-9));
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn validation_on_simulated_hsr_trips_fills_the_categories() {
    let trips = sim::simulate("hsr", 2, 1..7).unwrap();
    let reports = leave_one_ride_out(&trips, &ModelKind::ALL);
    let n_fail = trips
        .iter()
        .flat_map(|t| &t.handovers)
        .filter(|h| h.outcome.failed())
        .count();
    let n_ok = trips.iter().flat_map(|t| &t.handovers).count() - n_fail;
    assert!(n_fail > 20, "{n_fail} failures");
    for (kind, r) in &reports {
        let c = &r.total;
        assert_eq!((c.failures, c.successes), (n_fail, n_ok), "{kind:?}");
        assert_eq!(c.fail_correct + c.fail_early + c.fail_late, c.failures);
        assert!(c.fail_unpredicted <= c.fail_late);
        let h = &r.with_history_total;
        assert!(h.failures <= c.failures && h.successes <= c.successes);
        assert_eq!(h.fail_correct + h.fail_early + h.fail_late, h.failures);
    }
    // The split by history: with 5 rides of history, some failures come out of cells that failed
    // in no other ride, and the paper's predictor (a mean failure location per cell) predicts
    // nothing for exactly those.
    let (all, hist) = (&reports[0].1.total, &reports[0].1.with_history_total);
    assert!(
        hist.failures > 0 && hist.failures < all.failures,
        "{hist:?} of {all:?}"
    );
    assert_eq!(
        all.fail_unpredicted - hist.fail_unpredicted,
        all.failures - hist.failures,
        "every failure out of a cell without a recorded failure is never predicted"
    );
    assert_eq!(hist.fail_correct, all.fail_correct);
    let paper = &reports[0].1.total;
    // History predicts something: some failures are caught in time, most successes left alone.
    assert!(
        paper.fail_correct > 0 && paper.success_correct * 10 > paper.successes * 7,
        "{paper:?}"
    );
    // Determinism.
    assert_eq!(
        leave_one_ride_out(&trips, &[ModelKind::Paper])[0].1,
        reports[0].1
    );
}

#[test]
fn hpr_lead_throttles_rtt_plus_gps_margin_before_the_predicted_failure() {
    // Two rides fail out of cell X at 1000 m; the held-out ride fails 5 m earlier, at 50 m/s:
    // the predictor alone is 0.1 s late; HPR's L = 185 ms + 20 m / 50 m/s = 585 ms is in time.
    let ride = |name: &str, pos: f64| {
        let mut h = ho("X", pos, Outcome::Failure, Direction::Up);
        h.start_ms = (pos / 50.0 * 1000.0) as u64;
        trip(name, Direction::Up, vec![h])
    };
    let trips = vec![ride("r1", 1000.0), ride("r2", 1000.0), ride("r3", 995.0)];
    let judged = |lead: Lead| {
        let r = &leave_one_ride_out_with(&trips, &[ModelKind::Paper], lead)[0].1;
        r.failure_deltas_s.clone()
    };
    let strict = judged(Lead::NONE);
    let lead = Lead {
        rtt_ms: 185.0,
        gps_error_m: 20.0,
    };
    assert!((lead.ms(50.0) - 585.0).abs() < 1e-9);
    let hpr = judged(lead);
    // r1 and r2 are held out against a mean that includes r3 (997.5 m): 0.05 s early either way;
    // r3 is 0.1 s late alone and 0.485 s in time with the lead.
    assert_eq!(strict.len(), 3);
    assert!(strict.iter().any(|d| (d + 0.1).abs() < 0.02), "{strict:?}");
    assert!(hpr.iter().all(|d| *d >= 0.0), "{hpr:?}");
    assert!(hpr.iter().any(|d| (d - 0.485).abs() < 0.02), "{hpr:?}");
    assert_eq!(
        leave_one_ride_out_with(&trips, &[ModelKind::Paper], Lead::NONE),
        leave_one_ride_out(&trips, &[ModelKind::Paper])
    );
}

#[test]
fn failures_are_judged_against_the_loss_of_the_source() {
    // Cell X has a coverage edge at 1100 m: rides whose handover starts late (950–1050 m) fail
    // there. L̂_HOF is the mean start of the other rides' failures (≤ 1025 m), so every loss
    // is caught 1.5–3 s ahead at 50 m/s; against its own start the earliest starter is late.
    let ride = |name: &str, start: f64, edge: f64| {
        let mut h = ho("X", start, Outcome::Failure, Direction::Up);
        h.start_ms = (start / 50.0 * 1000.0) as u64;
        h.lost = Some(LossRecord {
            t_ms: (edge / 50.0 * 1000.0) as u64,
            position_m: Some(edge),
            lat: None,
            lon: None,
            rsrp_dbm: Some(-120.0),
        });
        trip(name, Direction::Up, vec![h])
    };
    let trips = vec![
        ride("r1", 950.0, 1101.0),
        ride("r2", 1000.0, 1098.0),
        ride("r3", 1050.0, 1100.0),
    ];
    let judge = |truth| {
        leave_one_ride_out_judged(&trips, &[ModelKind::Paper], Lead::NONE, truth)[0]
            .1
            .total
            .clone()
    };
    let loss = judge(Truth::Disruption);
    assert_eq!((loss.failures, loss.fail_correct), (3, 3), "{loss:?}");
    let start = judge(Truth::Start);
    // r1 (950 m vs a mean of 1025 m) and r2 (1000 m vs 1000 m, due exactly then: correct).
    assert_eq!((start.fail_correct, start.fail_late), (2, 1), "{start:?}");
    // The default judges against the loss.
    assert_eq!(
        leave_one_ride_out(&trips, &[ModelKind::Paper])[0].1.total,
        loss
    );
}

#[test]
fn simulated_failures_record_where_the_source_was_lost() {
    let trips = sim::simulate("hsr", 1, 1..4).unwrap();
    let hos: Vec<&HandoverRecord> = trips.iter().flat_map(|t| &t.handovers).collect();
    let mut later = 0;
    for h in &hos {
        match (h.outcome, h.lost) {
            (Outcome::Success, None) => {}
            (Outcome::Failure, Some(l)) => {
                assert!(l.t_ms >= h.start_ms, "{h:?}");
                assert!(l.position_m >= h.position_m, "{h:?}");
                // The interruption runs from the start until the UE is on a cell again.
                assert!(h.interruption_ms.unwrap() > l.t_ms - h.start_ms, "{h:?}");
                later += usize::from(l.t_ms > h.start_ms);
            }
            _ => panic!("success with a loss, or failure without: {h:?}"),
        }
    }
    // Handovers started too late degrade the link until the source is lost further on.
    assert!(later >= 5, "{later} failures lost after their start");
}

#[test]
fn trip_dir_reads_the_loss_columns_and_files_written_before_them() {
    let d = tmp_dir("tripdir");
    std::fs::write(
        d.join("trip.json"),
        "{\"preset\": \"ktx\", \"route_seed\": 1, \"trip_seed\": 2, \"duration_ms\": 9000, \"carriers\": [\"A\"]}",
    )
    .unwrap();
    std::fs::write(
        d.join("context.csv"),
        "t_ms,lat,lon,speed_mps,heading_deg,cell_A,rsrp_dbm_A\n0,37.5,127.0,80.0,90.0,1,-90.0\n",
    )
    .unwrap();
    let head =
        "carrier,from_cell,to_cell,start_ms,position_m,lat,lon,rsrp_dbm,outcome,interruption_ms";
    std::fs::write(
        d.join("handovers.csv"),
        format!(
            "{head},lost_ms,lost_position_m,lost_lat,lost_lon,lost_rsrp_dbm\n\
             A,1,2,1000,80.0,,,-100.0,failure,3000,1500,120.0,,,-115.0\n\
             A,2,3,5000,400.0,,,-90.0,success,40,,,,,\n\
             A,3,4,7000,560.0,,,-99.0,failure,2000,soon,,,,\n"
        ),
    )
    .unwrap();
    let (t, rep) = sim::from_dir(&d).unwrap();
    let lost: Vec<Option<LossRecord>> = t.handovers.iter().map(|h| h.lost).collect();
    let want = LossRecord {
        t_ms: 1500,
        position_m: Some(120.0),
        lat: None,
        lon: None,
        rsrp_dbm: Some(-115.0),
    };
    assert_eq!(lost, vec![Some(want), None]);
    assert_eq!(t.handovers[0].disruption_ms(), 1500);
    assert_eq!(rep.bad.len(), 1, "{}", rep.summary(5));
    assert_eq!(rep.bad[0].line, 4);
    assert!(
        rep.summary(5).contains("lost_ms `soon`"),
        "{}",
        rep.summary(5)
    );
    // A file from before the loss was recorded: every failure is lost at its start.
    std::fs::write(
        d.join("handovers.csv"),
        format!("{head}\nA,1,2,1000,80.0,,,-100.0,failure,3000\n"),
    )
    .unwrap();
    let (t, rep) = sim::from_dir(&d).unwrap();
    assert!(rep.bad.is_empty());
    assert_eq!(t.handovers[0].lost, None);
    assert_eq!(t.handovers[0].disruption_ms(), 1000);
    std::fs::remove_dir_all(d).unwrap();
}

fn shared_data(name: &str) -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data")
        .join(name);
    if p.exists() {
        Some(p)
    } else {
        println!("skipping: {} not present", p.display());
        None
    }
}

#[test]
fn real_wmnlab_and_ucc5g_import() {
    if let Some(p) = shared_data("wmnlab") {
        let (trips, rep) = wmnlab::import(&p, wmnlab::Options::default()).unwrap();
        assert!(trips.len() >= 200, "{} trips", trips.len());
        let fails = trips
            .iter()
            .flat_map(|t| &t.handovers)
            .filter(|h| h.outcome.failed())
            .count();
        assert!(fails >= 300, "{fails} failures");
        for b in &rep.bad {
            assert!(b.line > 1 && b.file.exists(), "{b}");
        }
        // Only rows broken as a whole are bad (a line holding two rows run together): no
        // event cell is refused.
        assert!(
            rep.bad
                .iter()
                .all(|b| b.reason.contains("fields, header has")),
            "{}",
            rep.summary(20)
        );
        let hos = trips.iter().map(|t| t.handovers.len()).sum::<usize>();
        println!(
            "wmnlab: {} trips, {hos} handovers ({fails} failures)\n{}",
            trips.len(),
            rep.summary(5)
        );
    }
    if let Some(p) = shared_data("ucc5g") {
        let (trips, rep) = ucc5g::import(&p).unwrap();
        assert!(trips.iter().map(|t| t.handovers.len()).sum::<usize>() > 100);
        println!("ucc5g: {}", rep.summary(5));
    }
}

/// Trips stored in an SQLite LinkDB at `path` and read back.
fn through_db(path: &Path, trips: &[TripData]) -> Vec<TripData> {
    let mut store = Store::open(&format!("sqlite:{}", path.display())).unwrap();
    for t in trips {
        store.import(t).unwrap();
    }
    store.load(&TripFilter::default()).unwrap()
}

#[test]
fn validation_learns_from_one_database_and_tests_on_another() {
    let d = tmp_dir("train-test");
    // Two databases of the same line: rides 1–4 (last month) and rides 5–7 (this month).
    let last = through_db(
        &d.join("last.sqlite"),
        &sim::simulate("hsr", 2, 1..5).unwrap(),
    );
    let this = through_db(
        &d.join("this.sqlite"),
        &sim::simulate("hsr", 2, 5..8).unwrap(),
    );
    assert_eq!((last.len(), this.len()), (4, 3));
    let kinds = ModelKind::ALL;
    let (reports, info) =
        train_and_test(&last, &this, &kinds, Lead::NONE, Truth::default()).unwrap();
    assert_eq!(info.train, SetSize::of(&last));
    assert_eq!(info.test, SetSize::of(&this));
    assert_eq!(info.shared_rides, 0);
    assert!(
        info.train.failures > 0 && info.test.failures > 0,
        "{info:?}"
    );
    // Every tested handover is judged, by predictors from the whole of last month.
    let history: Vec<&TripData> = last.iter().collect();
    for (kind, rep) in &reports {
        let mut want = Categories::default();
        for t in &this {
            let mut pred = kind.build(&history);
            for j in replay_judged(&mut pred, t, Lead::NONE, Truth::default()) {
                let d = j.delta_s;
                if j.failed {
                    want.failures += 1;
                    match d {
                        Some(d) if d > T2_S => want.fail_early += 1,
                        Some(d) if d >= T1_S => want.fail_correct += 1,
                        _ => want.fail_late += 1,
                    }
                    want.fail_unpredicted += usize::from(d.is_none());
                } else {
                    want.successes += 1;
                    want.success_correct += usize::from(d.is_none_or(|d| d < T1_S));
                }
            }
        }
        assert_eq!(rep.total, want, "{kind:?}");
        assert_eq!(want.failures, info.test.failures, "{kind:?}");
        assert_eq!(want.failures + want.successes, info.test.handovers);
    }
    // The paper's predictor, learned from last month, flags some of this month's failures.
    let paper = &reports
        .iter()
        .find(|(k, _)| *k == ModelKind::Paper)
        .unwrap()
        .1;
    assert!(
        paper.total.fail_correct + paper.total.fail_early > 0,
        "{paper:?}"
    );
    // Learning from more rides than leave-one-ride-out over this month alone has gives
    // different tables: the training set matters.
    let alone = leave_one_ride_out_judged(&this, &kinds, Lead::NONE, Truth::default());
    assert_ne!(reports, alone);
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn training_and_testing_on_the_same_trips_is_leave_one_ride_out() {
    let trips = sim::simulate("hsr", 2, 1..5).unwrap();
    for truth in [Truth::Disruption, Truth::Start] {
        let want = leave_one_ride_out_judged(&trips, &ModelKind::ALL, Lead::NONE, truth);
        let (got, info) =
            train_and_test(&trips, &trips, &ModelKind::ALL, Lead::NONE, truth).unwrap();
        assert_eq!(got, want);
        assert_eq!(info.shared_rides, 4);
    }
}

#[test]
fn an_empty_training_set_or_one_without_failures_is_refused() {
    let test = sim::simulate("hsr", 2, 1..3).unwrap();
    let kinds = [ModelKind::Paper];
    let e = train_and_test(&[], &test, &kinds, Lead::NONE, Truth::default()).unwrap_err();
    assert_eq!(e, TrainingError::Empty);
    assert!(e.to_string().contains("training set is empty"), "{e}");
    let mut calm = sim::simulate("hsr", 2, 3..5).unwrap();
    for t in &mut calm {
        t.handovers.retain(|h| !h.outcome.failed());
    }
    let e = train_and_test(&calm, &test, &kinds, Lead::NONE, Truth::default()).unwrap_err();
    let TrainingError::NoFailures(size) = &e else {
        panic!("{e:?}")
    };
    assert_eq!((size.trips, size.failures), (2, 0));
    assert!(size.handovers > 0);
    assert!(
        e.to_string()
            .contains("no failed handover to learn from (2 trips in 2 rides"),
        "{e}"
    );
}
