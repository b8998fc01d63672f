//! A stretch of a trip: [`Trip::window`] cuts every per-step series, outage, interruption,
//! handover and context row to a time range and re-bases time to its start.

use crate::trip::{Trip, STEP_MS};

impl Trip {
    /// This trip from `from_ms` for `len_ms` (both rounded down to whole steps, clipped to the
    /// trip's end), with time re-based to 0: outages and interruptions cut to the window,
    /// handovers and context rows outside it dropped.
    pub fn window(&self, from_ms: u64, len_ms: u64) -> Trip {
        let s = ((from_ms / STEP_MS) as usize).min(self.speed_mps.len());
        let e = (s + (len_ms / STEP_MS) as usize).min(self.speed_mps.len());
        let (from, to) = (s as u64 * STEP_MS, e as u64 * STEP_MS);
        let mut t = self.clone();
        t.duration_ms = to - from;
        t.position_m = self.position_m[s..e].to_vec();
        t.speed_mps = self.speed_mps[s..e].to_vec();
        for p in &mut t.paths {
            p.dl_bps = p.dl_bps[s..e].to_vec();
            p.ul_bps = p.ul_bps[s..e].to_vec();
            p.owd_us = p.owd_us[s..e].to_vec();
            let clip = |v: &[(u64, u64)]| -> Vec<(u64, u64)> {
                v.iter()
                    .filter(|(a, b)| *b > from && *a < to)
                    .map(|(a, b)| (*a.max(&from) - from, *b.min(&to) - from))
                    .collect()
            };
            p.outages_ms = clip(&p.outages_ms);
            p.interruptions_ms = clip(&p.interruptions_ms);
        }
        t.handovers.retain(|h| (from..to).contains(&h.start_ms));
        for h in &mut t.handovers {
            h.start_ms -= from;
            if let Some(l) = &mut h.lost {
                l.t_ms -= from;
            }
        }
        t.context.retain(|c| (from..to).contains(&c.t_ms));
        for c in &mut t.context {
            c.t_ms -= from;
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use crate::trip::{Trip, TripConfig, STEP_MS};

    #[test]
    fn a_window_rebases_time_and_clips_to_the_trip() {
        let trip = Trip::generate(&TripConfig::hsr(1, 1)).unwrap();
        let from = 120_000;
        let w = trip.window(from, 60_000);
        assert_eq!(w.duration_ms, 60_000);
        assert_eq!(w.speed_mps.len(), 6000);
        assert_eq!(w.speed_mps[0], trip.speed_mps[(from / STEP_MS) as usize]);
        assert!(w.handovers.iter().all(|h| h.start_ms < 60_000));
        let inside = trip
            .handovers
            .iter()
            .filter(|h| (from..from + 60_000).contains(&h.start_ms))
            .count();
        assert_eq!(w.handovers.len(), inside);
        assert!(w.context.iter().all(|c| c.t_ms < 60_000));
        for p in &w.paths {
            assert_eq!(p.dl_bps.len(), 6000);
            assert_eq!(p.ul_bps.len(), 6000);
            assert_eq!(p.owd_us.len(), 6000);
            assert!(p.outages_ms.iter().all(|(a, b)| a < b && *b <= 60_000));
            assert!(p
                .interruptions_ms
                .iter()
                .all(|(a, b)| a < b && *b <= 60_000));
        }
        let tail = trip.window(trip.duration_ms - 5_000, 60_000);
        assert_eq!(tail.duration_ms, 5_000);
    }
}
