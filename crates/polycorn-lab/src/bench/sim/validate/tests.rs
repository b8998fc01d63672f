use super::*;
use crate::bench::report::tests::synthetic;

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn row<'a>(rows: &'a [Row], system: &str, what: &str) -> &'a Row {
    rows.iter()
        .find(|r| r.system == system && r.what == what)
        .unwrap_or_else(|| panic!("no row {system} / {what} in {rows:#?}"))
}

/// The same rides on both sides: every row with values passes at a ratio of 1.
#[test]
fn identical_rides_pass_every_row() {
    let e = vec![synthetic()];
    let rows = compare(&e, &e.clone(), &names(&["vanilla", "hrsch"]));
    assert!(rows.iter().any(|r| r.what == "median FCT 1 MB"));
    assert!(rows.iter().any(|r| r.what == "IM mean, 20 users"));
    assert!(rows.iter().any(|r| r.what == "A down MB/ride"));
    for r in &rows {
        if r.emulated.is_some() && r.simulated.is_some() {
            assert_eq!(r.mark, Mark::Pass, "{r:?}");
            assert!(r.note.is_empty(), "{r:?}");
        }
    }
    let (wp, wn, _, _) = tally(&rows);
    assert_eq!(
        (wp, wn),
        (12, 12),
        "3 sizes and 3 IM segments for 2 systems"
    );
}

/// Simulated flows 30% slower miss, and the miss names the model's known gaps for that
/// system; 10% slower passes.
#[test]
fn a_row_outside_the_tolerance_misses_with_the_known_gaps() {
    let e = synthetic();
    let mut s = e.clone();
    for run in &mut s.runs {
        let k = if run.system == "hrsch" { 1.3 } else { 1.1 };
        for f in &mut run.flows {
            f.fct_s *= k;
        }
    }
    let rows = compare(&[e], &[s], &names(&["vanilla", "hrsch"]));
    let miss = row(&rows, "hrsch", "median FCT 4 MB");
    assert_eq!(miss.mark, Mark::Miss);
    assert!((miss.ratio().unwrap() - 1.3).abs() < 1e-9, "{miss:?}");
    assert!(miss.gaps.contains(&"no-predictor"), "{}", miss.note);
    let mut dropped = miss.clone();
    dropped.drop_gap("no-predictor");
    assert!(!dropped.note.contains("no-predictor") && dropped.note.contains("partial-upkeep"));
    assert!(miss.note.contains("partial-upkeep"), "{}", miss.note);
    let pass = row(&rows, "vanilla", "median FCT 4 MB");
    assert_eq!(pass.mark, Mark::Pass, "{pass:?}");
    assert!(pass.note.is_empty());
    let text = render_text(&rows);
    assert!(
        text.contains("MISS") && text.contains("modem-report lag"),
        "{text}"
    );
    assert!(text.contains("of 12 workload rows"), "{text}");
    let md = render_markdown(&rows);
    assert!(md.starts_with("| system | row |"), "{md}");
    assert!(md.contains("| hrsch | median FCT 4 MB |"), "{md}");
}

/// A failed flow counts at its timeout in the median, so a side that fails more flows has the
/// longer median.
#[test]
fn a_failed_flow_counts_at_its_timeout() {
    let e = synthetic();
    let mut s = e.clone();
    let vanilla = s.runs.iter_mut().find(|r| r.system == "vanilla").unwrap();
    for f in vanilla.flows.iter_mut().filter(|f| f.size == 256 * 1024) {
        f.ok = false;
    }
    let timeout = s.plan.bulk_timeout_s;
    let rows = compare(&[e], &[s], &names(&["vanilla"]));
    let r = row(&rows, "vanilla", "median FCT 256 KB");
    assert_eq!(r.simulated, Some(timeout));
    assert_eq!(r.mark, Mark::Miss);
}

/// Subflow rows come from the per-path counters both record: retransmissions per downlink
/// megabyte and reconnects per ride, whatever other labels the counter has.
#[test]
fn subflow_rows_read_the_path_counters() {
    let mut e = synthetic();
    let mut s = e.clone();
    for (r, retrans, reconnects) in [(&mut e, 40.0, 2.0), (&mut s, 20.0, 0.0)] {
        let run = r.runs.iter_mut().find(|x| x.system == "vanilla").unwrap();
        run.path_down_bytes = vec![4_000_000, 2_000_000];
        run.counters.insert(
            "proxy:polycorn_path_retransmissions_total{path=\"p0\",relay=\"train\"}".into(),
            retrans,
        );
        run.counters.insert(
            "relay:polycorn_path_reconnects_total{path=\"p0\",relay=\"train\"}".into(),
            reconnects,
        );
    }
    let rows = compare(&[e], &[s], &names(&["vanilla"]));
    let r = row(&rows, "vanilla", "A retransmitted segments per down MB");
    assert_eq!((r.emulated, r.simulated), (Some(10.0), Some(5.0)));
    assert_eq!(r.mark, Mark::Miss);
    let r = row(&rows, "vanilla", "A reconnects/ride");
    assert_eq!((r.emulated, r.simulated), (Some(2.0), Some(0.0)));
    assert!(r.gaps.contains(&"partial-upkeep"), "{}", r.note);
    let down = row(&rows, "vanilla", "A down MB/ride");
    assert_eq!((down.emulated, down.mark), (Some(4.0), Mark::Pass));
    // Path B has no retransmission counter on either side: no value, said so.
    let b = row(&rows, "vanilla", "B retransmitted segments per down MB");
    assert_eq!(b.mark, Mark::NoData);
    assert!(
        b.note.contains("no value in the emulated rides"),
        "{}",
        b.note
    );
}

/// A system missing from one side gives rows without a mark, not a failure.
#[test]
fn a_system_only_one_side_ran_has_no_mark() {
    let e = synthetic();
    let mut s = e.clone();
    s.runs.retain(|r| r.system != "single");
    let rows = compare(&[e], &[s], &names(&["single"]));
    let r = row(&rows, "single", "median FCT 1 MB");
    assert_eq!((r.mark, r.simulated), (Mark::NoData, None));
    assert!(
        r.note.contains("no value in the simulated rides"),
        "{}",
        r.note
    );
    assert!(r.gaps.contains(&"single-pipeline"), "{}", r.note);
}

#[test]
fn the_gaps_of_a_system_ignore_its_suffixes() {
    let tags = |s: &str, k: Kind| gaps(s, k).iter().map(|g| g.tag).collect::<Vec<_>>();
    assert!(tags("hrsch+warm#2", Kind::Fct).contains(&"no-predictor"));
    assert!(!tags("vanilla", Kind::Fct).contains(&"no-predictor"));
    assert!(tags("single", Kind::Im).contains(&"single-pipeline"));
}

/// Rides of another seed, window or workload are refused, naming what differs.
#[test]
fn another_ride_is_refused_naming_the_difference() {
    let e = synthetic();
    check_same_ride(&e, &e.clone()).unwrap();
    let mut s = e.clone();
    s.meta.trip_seed = 9;
    let err = check_same_ride(&e, &s).unwrap_err().to_string();
    assert!(err.contains("trip (hsr route 1 trip 1 against"), "{err}");
    let mut s = e.clone();
    s.meta.from_s += 10.0;
    s.plan.bulk[1].start_s += 1.0;
    let err = check_same_ride(&e, &s).unwrap_err().to_string();
    assert!(
        err.contains("window") && err.contains("bulk downloads"),
        "{err}"
    );
    // A plan read back from results.json has no send times: the workload seed stands for them.
    let mut s = e.clone();
    s.plan.im.iter_mut().for_each(|seg| seg.sends_s.clear());
    check_same_ride(&e, &s).unwrap();
    let mut s = e.clone();
    s.plan.im[0].sends_s[0][0] += 0.5;
    let err = check_same_ride(&e, &s).unwrap_err().to_string();
    assert!(err.contains("IM messages"), "{err}");
}
