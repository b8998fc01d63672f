//! Link models for the emulator: from a generated HSR trip, or constant.

use polycorn_link::link::{LinkConfig, OutageMode, QueueLimit};
use polycorn_link::trace::{DelaySeries, DeliveryTrace, Outages, TraceError};
use polycorn_link::trip::Trip;
pub use polycorn_link::trip_links::{trip_queue, DEFAULT_QUEUE_BYTES};

use crate::forward::{DirectionModel, PathModel};

/// Both directions of every carrier of `trip` ([`polycorn_link::trip_links::from_trip`]): with
/// `queue`, or (`None`) each carrier's time-sized queue ([`trip_queue`]). Radio loss is in the
/// trip's outages (deep fades).
pub fn from_trip(trip: &Trip, queue: Option<QueueLimit>) -> Result<Vec<PathModel>, TraceError> {
    Ok(polycorn_link::trip_links::from_trip(trip, queue)?
        .into_iter()
        .map(|l| PathModel {
            uplink: DirectionModel::Shaped(l.uplink),
            downlink: DirectionModel::Shaped(l.downlink),
        })
        .collect())
}

/// A constant-rate, constant-delay path (both directions alike), or unshaped if `rate_bps` is 0.
pub fn constant(
    rate_bps: u64,
    one_way_delay_us: u64,
    queue: QueueLimit,
) -> Result<PathModel, TraceError> {
    if rate_bps == 0 {
        return Ok(PathModel {
            uplink: DirectionModel::Unshaped,
            downlink: DirectionModel::Unshaped,
        });
    }
    let mut cfg = LinkConfig::new(DeliveryTrace::from_rate_series(&[(1000, rate_bps)])?);
    cfg.delay = DelaySeries::constant(one_way_delay_us);
    cfg.queue = queue;
    Ok(PathModel {
        uplink: DirectionModel::Shaped(cfg.clone()),
        downlink: DirectionModel::Shaped(cfg),
    })
}

/// A path replaying recorded traces (looping, as mahimahi does), with `delay` one way in each
/// direction (a constant, or a series looped with the traces: [`DelaySeries::looped`]), dark
/// in both directions during `outages` (packets dropped), except that packets are held during
/// `hold_in` (both already looped: [`Outages::looped`]).
pub fn from_traces(
    downlink: DeliveryTrace,
    uplink: DeliveryTrace,
    delay: DelaySeries,
    outages: Outages,
    hold_in: Outages,
    queue: QueueLimit,
) -> PathModel {
    let dir = |t: DeliveryTrace| {
        let mut cfg = LinkConfig::new(t);
        cfg.delay = delay.clone();
        cfg.outages = outages.clone();
        cfg.outage_mode = OutageMode::Drop;
        cfg.hold_in = hold_in.clone();
        cfg.queue = queue;
        DirectionModel::Shaped(cfg)
    };
    PathModel {
        uplink: dir(uplink),
        downlink: dir(downlink),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use polycorn_link::trip::TripConfig;

    fn held(m: &PathModel) -> (&Outages, &Outages) {
        match (&m.uplink, &m.downlink) {
            (DirectionModel::Shaped(u), DirectionModel::Shaped(d)) => (&u.hold_in, &d.hold_in),
            _ => panic!("trip paths are shaped"),
        }
    }

    /// A trip's successful-handover interruptions are held by its links when the trip says
    /// so (the presets), dropped with every other outage when not.
    #[test]
    fn trip_links_hold_interruptions_only_when_configured() {
        let mut cfg = TripConfig::ktx(2, 3);
        assert!(cfg.hold_interruptions);
        let trip = Trip::generate(&cfg).unwrap();
        let models = from_trip(&trip, None).unwrap();
        for (p, m) in trip.paths.iter().zip(&models) {
            assert!(!p.interruptions_ms.is_empty());
            let want = Outages::new(p.interruptions_ms.clone()).unwrap();
            assert_eq!(held(m), (&want, &want));
        }
        cfg.hold_interruptions = false;
        let again = Trip::generate(&cfg).unwrap();
        assert_eq!(again.paths, trip.paths, "the trip itself does not change");
        for m in from_trip(&again, None).unwrap() {
            assert_eq!(held(&m), (&Outages::none(), &Outages::none()));
        }
    }

    /// A trace path's outages black out both directions (packets dropped), except the held
    /// spans; without outages its links are never dark.
    #[test]
    fn trace_links_carry_their_outages_both_ways() {
        let t = DeliveryTrace::parse("t", "1\n").unwrap();
        let out = Outages::new(vec![(100, 300), (500, 600)]).unwrap();
        let hold = Outages::new(vec![(500, 600)]).unwrap();
        let m = from_traces(
            t.clone(),
            t.clone(),
            DelaySeries::constant(5_000),
            out.clone(),
            hold.clone(),
            QueueLimit::Bytes(DEFAULT_QUEUE_BYTES),
        );
        for d in [&m.uplink, &m.downlink] {
            let DirectionModel::Shaped(c) = d else {
                panic!("trace paths are shaped")
            };
            assert_eq!((&c.outages, &c.hold_in), (&out, &hold));
            assert_eq!(c.outage_mode, OutageMode::Drop);
            assert!(c.looping);
        }
        let plain = from_traces(
            t.clone(),
            t,
            DelaySeries::constant(5_000),
            Outages::none(),
            Outages::none(),
            QueueLimit::Bytes(DEFAULT_QUEUE_BYTES),
        );
        assert_eq!(held(&plain), (&Outages::none(), &Outages::none()));
    }
}
