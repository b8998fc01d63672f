//! A generated trip's paths as link configurations, both directions: what the emulator and the
//! simulator drive, so both apply the same per-packet delay, delivery opportunities, droptail
//! queue, outages and handover interruptions.

use crate::link::{LinkConfig, OutageMode, QueueLimit};
use crate::trace::{DelaySeries, DeliveryTrace, Outages, TraceError};
use crate::trip::{PathProcess, Trip, STEP_MS};

/// Default droptail queue of constant and trace-replay paths: 175 kB, 140 ms at 10 Mbit/s —
/// cellular base stations buffer deeply (bufferbloat), which is why RTT under load on HSR is
/// far above the idle RTT. Calibrated with `polycorn testbed calibrate` (was 375 kB: RTT under
/// BBR load p50 255-330 ms against the published 185-191 ms). Trip paths size theirs in time
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
/// [`hold_interruptions`](crate::trip::TripConfig::hold_interruptions)): those wait for the
/// target cell.
pub fn direction(
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

/// Both directions of one path: (uplink, relay → proxy; downlink, proxy → relay).
#[derive(Debug, Clone)]
pub struct PathLinks {
    /// Relay → proxy.
    pub uplink: LinkConfig,
    /// Proxy → relay.
    pub downlink: LinkConfig,
}

/// Both directions of every carrier of `trip`: with `queue`, or (`None`) each carrier's
/// time-sized queue ([`trip_queue`]). Radio loss is in the trip's outages (deep fades). Path
/// `i`'s uplink is seeded `2i`, its downlink `2i + 1`.
pub fn from_trip(trip: &Trip, queue: Option<QueueLimit>) -> Result<Vec<PathLinks>, TraceError> {
    trip.paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let q = queue.unwrap_or_else(|| trip_queue(trip, i));
            let hold = trip.config.hold_interruptions;
            Ok(PathLinks {
                uplink: direction(&p.ul_bps, p, hold, q, 2 * i as u64)?,
                downlink: direction(&p.dl_bps, p, hold, q, 2 * i as u64 + 1)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trip::TripConfig;

    /// Every path gets a link each way with the trip's outages, held interruptions when the
    /// trip says so, and distinct seeds.
    #[test]
    fn every_path_gets_both_directions_with_its_outages() {
        let trip = Trip::generate(&TripConfig::ktx(2, 3)).unwrap();
        let links = from_trip(&trip, None).unwrap();
        assert_eq!(links.len(), trip.paths.len());
        for (i, (p, l)) in trip.paths.iter().zip(&links).enumerate() {
            let out = Outages::new(p.outages_ms.clone()).unwrap();
            assert_eq!(l.uplink.outages, out);
            assert_eq!(l.downlink.outages, out);
            assert_eq!(l.uplink.seed, 2 * i as u64);
            assert_eq!(l.downlink.seed, 2 * i as u64 + 1);
            assert_eq!(l.uplink.queue, trip_queue(&trip, i));
            assert!(!l.uplink.looping);
        }
        let fixed = from_trip(&trip, Some(QueueLimit::Bytes(1234))).unwrap();
        assert!(fixed
            .iter()
            .all(|l| l.downlink.queue == QueueLimit::Bytes(1234)));
    }
}
