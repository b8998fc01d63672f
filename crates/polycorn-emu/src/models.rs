//! Link models for the emulator: from a generated HSR trip, or constant.

use polycorn_link::link::{LinkConfig, OutageMode, QueueLimit};
use polycorn_link::trace::{DelaySeries, DeliveryTrace, Outages, TraceError};
use polycorn_link::trip::{PathProcess, Trip, STEP_MS};

use crate::forward::{DirectionModel, PathModel};

/// Default droptail queue of constant and trace-replay paths: 175 kB, 140 ms at 10 Mbit/s — cellular
/// base stations buffer deeply (bufferbloat), which is why RTT under load on HSR is far above
/// the idle RTT. Calibrated with `polycorn testbed calibrate` (was 375 kB: RTT under BBR load
/// p50 255-330 ms against the published 185-191 ms). Trip paths size theirs in time
/// instead ([`trip_queue`]).
pub const DEFAULT_QUEUE_BYTES: u64 = 175_000;

/// A trip path's queue: `queue_ms` of its carrier's median downlink capacity (the preset's
/// `dl_median_bps`; at least 3 kB), so the slower carrier does not queue longer than the
/// faster one. Paths with no carrier model (a trip made of recorded traces) get
/// [`DEFAULT_QUEUE_BYTES`], as trace paths in the testbed do.
pub fn trip_queue(trip: &Trip, path: usize) -> QueueLimit {
    match trip.config.carriers.get(path) {
        Some(c) => {
            QueueLimit::Bytes(((c.dl_median_bps / 8.0 * c.queue_ms / 1000.0) as u64).max(3_000))
        }
        None => QueueLimit::Bytes(DEFAULT_QUEUE_BYTES),
    }
}

/// One direction of a trip path as a link config: the trip's capacity (played once), delay
/// series and outages. Packets arriving during an outage are dropped, as a detached radio
/// does, except during a successful handover's interruption when `hold` (the trip's
/// [`hold_interruptions`](polycorn_link::trip::TripConfig::hold_interruptions)): those wait
/// for the target cell.
fn direction(
    bps: &[f64],
    p: &PathProcess,
    hold: bool,
    queue: QueueLimit,
    seed: u64,
) -> Result<LinkConfig, TraceError> {
    let ops = PathProcess::opportunities_ms(bps);
    // A trip with no capacity at all still needs a valid trace: one opportunity at its end.
    let ops = if ops.is_empty() {
        vec![(bps.len() as u64 * STEP_MS).max(1)]
    } else {
        ops
    };
    let mut cfg = LinkConfig::new(DeliveryTrace::from_opportunities_ms(ops)?);
    cfg.looping = false;
    let mut points: Vec<(u64, u64)> = Vec::new();
    for (i, &d) in p.owd_us.iter().enumerate() {
        if points.last().is_none_or(|(_, last)| *last != d) {
            points.push((i as u64 * STEP_MS, d));
        }
    }
    cfg.delay = DelaySeries::new(points)?;
    cfg.outages = Outages::new(p.outages_ms.clone())?;
    cfg.outage_mode = OutageMode::Drop;
    if hold {
        cfg.hold_in = Outages::new(p.interruptions_ms.clone())?;
    }
    cfg.queue = queue;
    cfg.seed = seed;
    Ok(cfg)
}

/// Both directions of every carrier of `trip`: with `queue`, or (`None`) each carrier's
/// time-sized queue ([`trip_queue`]). Radio loss is in the trip's outages (deep fades).
pub fn from_trip(trip: &Trip, queue: Option<QueueLimit>) -> Result<Vec<PathModel>, TraceError> {
    trip.paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let q = queue.unwrap_or_else(|| trip_queue(trip, i));
            let hold = trip.config.hold_interruptions;
            Ok(PathModel {
                uplink: DirectionModel::Shaped(direction(&p.ul_bps, p, hold, q, 2 * i as u64)?),
                downlink: DirectionModel::Shaped(direction(
                    &p.dl_bps,
                    p,
                    hold,
                    q,
                    2 * i as u64 + 1,
                )?),
            })
        })
        .collect()
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
