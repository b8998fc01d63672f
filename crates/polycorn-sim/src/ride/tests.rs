use polycorn_link::link::{LinkConfig, OutageMode, QueueLimit};
use polycorn_link::trace::{DelaySeries, DeliveryTrace, Outages};
use polycorn_link::trip::{CarrierContext, ContextRow, HandoverTruth, Outcome, SourceLoss};
use polycorn_proto::path_policy::Replace;
use polycorn_proto::Role;

use super::*;
use crate::predict::GroundTruth;
use crate::workload::{ImSegment, Transfer};
use polycorn_proto::TrainPredictor;

fn constant(mbps: u64, owd_ms: u64) -> LinkConfig {
    let mut c =
        LinkConfig::new(DeliveryTrace::from_rate_series(&[(1000, mbps * 1_000_000)]).unwrap());
    c.delay = DelaySeries::constant(owd_ms * 1000);
    c.queue = QueueLimit::Bytes(200_000);
    c
}

pub(crate) fn small_ride(spec: &str) -> RideConfig {
    let path = |mbps, owd| PathLinks {
        uplink: constant(mbps, owd),
        downlink: constant(mbps, owd),
    };
    RideConfig {
        relay: SessionConfig::new(Role::Relay, 1, spec),
        proxy: SessionConfig::new(Role::Proxy, 1, spec),
        links: vec![path(20, 20), path(10, 40)],
        workload: Workload {
            downloads: vec![
                Transfer {
                    idx: 0,
                    start_us: 1_000_000,
                    size: 256 * 1024,
                },
                Transfer {
                    idx: 1,
                    start_us: 2_000_000,
                    size: 1 << 20,
                },
            ],
            download_timeout_us: 20_000_000,
            uploads: vec![Transfer {
                idx: 0,
                start_us: 4_000_000,
                size: 256 * 1024,
            }],
            upload_timeout_us: 20_000_000,
            im: vec![ImSegment {
                users: 2,
                start_us: 6_000_000,
                sends_us: vec![vec![0, 100_000, 200_000], vec![50_000, 150_000]],
                deadline_us: 2_000_000,
            }],
        },
        relay_tcp: TcpConfig::default(),
        proxy_tcp: TcpConfig::default(),
        end_us: 10_000_000,
        context: Vec::new(),
        prediction: Prediction::default(),
        upkeep: Upkeep::default(),
    }
}

/// `ride` with path 0 dark both ways from `from_ms` to `to_ms`.
fn blackout(mut ride: RideConfig, from_ms: u64, to_ms: u64) -> RideConfig {
    let path = &mut ride.links[0];
    for l in [&mut path.uplink, &mut path.downlink] {
        l.outages = Outages::new(vec![(from_ms, to_ms)]).unwrap();
        l.outage_mode = OutageMode::Drop;
    }
    ride
}

#[test]
fn a_ride_on_steady_links_completes_every_transfer_and_message() {
    let r = run(&small_ride("minrtt")).unwrap();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    for d in r.downloads.iter().chain(&r.uploads) {
        assert!(d.ok(), "{d:?}");
        assert_eq!(d.bytes(), d.size);
    }
    assert_eq!(r.im.len(), 5);
    for m in &r.im {
        let d = m.delivery_us.expect("answered");
        assert!(d >= 40_000, "at least one round trip: {d}");
    }
    // 256 KiB over 30 Mbit/s of paths 40 ms RTT apart takes well over a round trip.
    let fct = r.downloads[0].done_us.unwrap();
    assert!(fct > 80_000, "{fct}");
    assert!(r
        .wires
        .iter()
        .all(|(u, d)| u.bytes_out > 0 && d.bytes_out > 0));
}

/// The same ride twice gives the same results, byte for byte.
#[test]
fn a_ride_is_deterministic() {
    for spec in ["hrsch", "redundant"] {
        let a = format!("{:?}", run(&small_ride(spec)).unwrap());
        let b = format!("{:?}", run(&small_ride(spec)).unwrap());
        assert_eq!(a, b, "{spec}");
    }
}

/// Every completed download's last byte is followed from the request to the passenger, its
/// legs in order and its way over the link as the link models it.
#[test]
fn every_download_has_its_last_byte_followed() {
    use crate::budget::{Budget, OracleSplit};
    for spec in ["minrtt", "hrsch"] {
        let cfg = small_ride(spec);
        let r = run(&cfg).unwrap();
        assert_eq!(r.last_bytes.len(), r.downloads.len());
        for (d, lb) in r.downloads.iter().zip(&r.last_bytes) {
            assert!(d.ok(), "{d:?}");
            let lb = lb.expect("followed");
            let t = lb.transit;
            assert_eq!(lb.start_us, d.start_us);
            assert_eq!(lb.done_us, d.start_us + d.done_us.unwrap());
            // The request crossed at least the faster path's 20 ms.
            assert!(lb.request_us >= lb.start_us + 20_000, "{lb:?}");
            assert!(lb.request_us <= lb.first_sent_us, "{lb:?}");
            assert!(
                lb.first_sent_us <= t.sent_us && t.sent_us < t.at_us,
                "{lb:?}"
            );
            assert!(
                t.at_us <= lb.framed_us && lb.framed_us <= lb.done_us,
                "{lb:?}"
            );
            let owd = [20_000, 40_000][lb.path];
            assert_eq!(t.propagation_us, owd, "{spec}: {lb:?}");
            assert_eq!(t.dark_us, 0, "no outages");
            // Against a 30 Mbit/s oracle the parts add up and only the rest can be negative.
            let o = OracleSplit {
                request_s: 0.02,
                send_s: d.size as f64 * 8.0 / 30e6,
                owd_s: 0.02,
            };
            let b = Budget::of(&lb, &o);
            assert!(b.adds_up(0.05), "{b:?}");
            assert!(
                b.parts()[..5].iter().all(|x| *x >= 0.0 || x.abs() < 1.0),
                "{b:?}"
            );
            assert_eq!(b.stalls_ms, 0.0, "no outage, no RTO: {b:?}");
        }
    }
}

/// A blackout of one path while a download runs: the relay's watchdog finds the path silent,
/// probes it with fresh connections until one gets through after the blackout, and the fresh
/// subflow takes over; every transfer completes. Without the upkeep the old subflow stays.
#[test]
fn a_silent_path_gets_a_fresh_subflow_after_a_blackout() {
    let mut ride = blackout(small_ride("minrtt"), 2_200, 5_000);
    ride.workload.downloads[1].size = 4 << 20;
    let r = run(&ride).unwrap();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    for d in r.downloads.iter().chain(&r.uploads) {
        assert!(d.ok(), "{d:?}");
    }
    let silent: Vec<_> = r
        .replacements
        .iter()
        .filter(|x| x.path == 0 && x.why == Replace::Silent)
        .collect();
    assert_eq!(silent.len(), 1, "{:?}", r.replacements);
    // The first SYN after the blackout gets through (within a stagger and a round trip).
    let at = silent[0].at_us;
    assert!((5_000_000..5_400_000).contains(&at), "{at}");
    assert!(
        r.replacements.iter().all(|x| x.path == 0),
        "{:?}",
        r.replacements
    );
    // The fresh subflow carried data after it came up.
    let (relay_counters, _) = &r.paths[0][0];
    assert!(relay_counters.attaches >= 2, "{relay_counters:?}");

    let mut off = blackout(small_ride("minrtt"), 2_200, 5_000);
    off.workload.downloads[1].size = 4 << 20;
    off.upkeep.on = false;
    let r = run(&off).unwrap();
    assert!(r.replacements.is_empty());
}

fn context(rows: u64) -> Vec<ContextRow> {
    (0..rows)
        .map(|s| ContextRow {
            t_ms: s * 1000,
            lat: 31.0,
            lon: 121.0 + s as f64 * 1e-3,
            speed_mps: 80.0,
            heading_deg: 90.0,
            carriers: vec![
                CarrierContext {
                    cell: Some(1),
                    rsrp_dbm: Some(-90.0),
                },
                CarrierContext {
                    cell: Some(2),
                    rsrp_dbm: Some(-95.0),
                },
            ],
        })
        .collect()
}

/// With the trip's ground truth as the predictor and the relay's context, HRSCH's HPR keeps new
/// data off the path whose handover fails (its stage moves count the rejections); without a
/// predictor it never moves. The proxy receives every context frame the relay sends.
#[test]
fn hpr_throttles_a_path_before_its_failed_handover() {
    let failure = HandoverTruth {
        carrier: 0,
        from_cell: 1,
        to_cell: 3,
        start_ms: 2_900,
        position_m: 0.0,
        lat: 31.0,
        lon: 121.0,
        rsrp_dbm: -110.0,
        outcome: Outcome::Failure,
        interruption_ms: 3_100,
        lost: Some(SourceLoss {
            t_ms: 3_000,
            position_m: 0.0,
            lat: 31.0,
            lon: 121.0,
            rsrp_dbm: -115.0,
        }),
    };
    let mut ride = blackout(small_ride("hrsch"), 3_000, 6_000);
    ride.workload.downloads[1].start_us = 2_600_000;
    ride.context = context(10);
    let truth = GroundTruth::new(&[failure], 2);
    let hpr = |r: &RideResult, side: usize| {
        r.stage_moves[side]
            .iter()
            .find(|(s, _)| s == "hpr")
            .map_or(0, |(_, n)| *n)
    };
    ride.prediction = Prediction::both(
        "perfect",
        std::sync::Arc::new(move || Box::new(truth.clone()) as Box<dyn TrainPredictor>),
    );
    let r = run(&ride).unwrap();
    assert_eq!(r.context_frames, 10);
    assert!(hpr(&r, 1) > 0, "{:?}", r.stage_moves);
    for d in &r.downloads {
        assert!(d.ok(), "{d:?}");
    }
    ride.prediction = Prediction::default();
    let r = run(&ride).unwrap();
    assert_eq!(hpr(&r, 1), 0, "{:?}", r.stage_moves);
}

/// A ride over a trip made of recorded traces (`Trip::from_traces`: per-step capacity, a delay
/// series, a dropped outage and a held interruption on one path, no train) runs as a generated
/// trip's does: every transfer completes (the 4 MB download across the blackout too), over both paths, within the traces' capacity.
#[test]
fn a_ride_on_a_trip_of_recorded_traces_completes() {
    use polycorn_link::trip::{TracePath, Trip};
    use polycorn_link::trip_links::from_trip;
    // 12 Mbit/s (one opportunity a ms) and 6 Mbit/s, over a 10 s loop.
    let every = |ms: u64| {
        DeliveryTrace::from_opportunities_ms((1..=10_000 / ms).map(|k| k * ms).collect()).unwrap()
    };
    let (fast, slow) = (every(1), every(2));
    let delay = DelaySeries::new(vec![(0, 20_000), (3_000, 35_000)]).unwrap();
    let constant = DelaySeries::constant(40_000);
    let outages = Outages::new(vec![(1_100, 1_150), (2_200, 3_000)]).unwrap();
    let held = Outages::new(vec![(1_100, 1_150)]).unwrap();
    let none = Outages::new(vec![]).unwrap();
    let trip = Trip::from_traces(
        &[
            TracePath {
                name: "fast".into(),
                down: &fast,
                up: &fast,
                delay: &delay,
                outages: &outages,
                interruptions: &held,
            },
            TracePath {
                name: "slow".into(),
                down: &slow,
                up: &slow,
                delay: &constant,
                outages: &none,
                interruptions: &none,
            },
        ],
        10_000,
    );
    assert!(trip.handovers.is_empty() && trip.context.is_empty());
    let links = from_trip(&trip, None).unwrap();
    assert_eq!(links[0].downlink.hold_in, held);
    for spec in ["minrtt", "hrsch"] {
        let mut ride = small_ride(spec);
        ride.links = links.clone();
        ride.workload.downloads[1].size = 4 << 20;
        let r = run(&ride).unwrap();
        assert!(r.errors.is_empty(), "{spec}: {:?}", r.errors);
        for d in r.downloads.iter().chain(&r.uploads) {
            assert!(d.ok(), "{spec}: {d:?}");
        }
        assert_eq!(r.im.len(), 5);
        assert!(r.im.iter().all(|m| m.delivery_us.is_some()), "{spec}");
        // Both paths carried data; neither more than its trace allows (1500-byte packets).
        let down: Vec<u64> = r.wires.iter().map(|(_, d)| d.bytes_out).collect();
        assert!(down.iter().all(|b| *b > 0), "{spec}: {down:?}");
        assert!(
            down[0] <= 10_000 * 1500 && down[1] <= 5_000 * 1500,
            "{spec}: {down:?}"
        );
    }
}
