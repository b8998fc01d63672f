//! (proxy) The watch over one subflow for a slow-start threshold cut while its path was idle:
//! pure, clock-free logic fed `TCP_INFO` samples by the shell (`polycorn-net`'s engine,
//! `polycorn-sim`'s proxy end).

use polycorn_sched::time::{Duration, Instant};

/// A path counts as busy while more than this many bytes crossed it (either way) within
/// [`REFRESH_IDLE`] ([`RefreshWatch`]); probes and their answers stay far below.
const REFRESH_BUSY_BYTES: u64 = 4096;
/// A slow-start threshold cut after the path carried no more than probes for this long is
/// the idle kind ([`RefreshWatch`]).
const REFRESH_IDLE: Duration = Duration::from_secs(1);
/// The proxy asks again at most this often while the relay has not replaced the subflow.
const REFRESH_ASK_EVERY: Duration = Duration::from_secs(10);
/// Only a threshold cut below this many segments (about 145 KB) is worth a fresh connection:
/// one slow-starts past it within a few RTTs anyway, and a window kept through the idle
/// spell (probes keep the socket from restarting it) can leave a cut of hundreds.
const REFRESH_LOW_SEGMENTS: u32 = 100;

/// (proxy) Watches one subflow for a cut of its slow-start threshold while its path was idle.
///
/// A retransmission timeout on an idle subflow (a probe lost in a handover's gap) sets the
/// kernel's threshold from the small window of probes. The subflow outlives passengers'
/// connections, so the next download on the path then grows its window linearly from there
/// (measured in the bench: 4.9 s instead of 2.1 s for one 4 MB download). A cut
/// while the path carried data reflects the path and is kept. Only the relay dials, so the
/// proxy asks it for a fresh connection ([`crate::Frame::Refresh`]).
///
/// Data that crosses the path before the relay could act (the cut often comes just before a
/// download, in a handover's gap) runs with the cut threshold; unless a loss meanwhile set a
/// new one, the cut stands once the path is idle again, and the proxy asks again then (the
/// relay drops a request when data crosses the path).
#[derive(Debug, Default)]
pub struct RefreshWatch {
    /// Bytes either way at the start of the current measuring window, and when it began.
    mark: Option<(Instant, u64)>,
    /// When the path last carried more than probes.
    busy_at: Option<Instant>,
    /// The threshold at the last sample (`None`: unset).
    ssthresh: Option<u32>,
    /// The threshold since it was cut while idle (`None`: no such cut, or a loss while data
    /// crossed the path set another since).
    cut: Option<u32>,
    /// When the relay was last asked.
    asked_at: Option<Instant>,
}

impl RefreshWatch {
    /// One `TCP_INFO` sample at `now`: `bytes` crossed the path so far (either way, frames),
    /// the subflow's threshold, whether the socket has next to nothing in flight or queued
    /// (`probes_only`: a probe or two, as when a probe's timeout cuts the threshold), and
    /// whether it is also out of back-off (`socket_idle`). Returns the threshold to report
    /// when the relay should be asked now.
    pub fn on_sample(
        &mut self,
        now: Instant,
        bytes: u64,
        ssthresh: Option<u32>,
        probes_only: bool,
        socket_idle: bool,
    ) -> Option<u32> {
        let (since, base) = *self.mark.get_or_insert((now, bytes));
        if bytes.saturating_sub(base) > REFRESH_BUSY_BYTES {
            self.busy_at = Some(now);
            self.mark = Some((now, bytes));
        } else if now - since >= REFRESH_IDLE {
            self.mark = Some((now, bytes));
        }
        let fell = match (self.ssthresh, ssthresh) {
            (None, Some(_)) => true,
            (Some(old), Some(new)) => new < old,
            _ => false,
        };
        self.ssthresh = ssthresh;
        if self.busy_at.is_some_and(|b| now - b < REFRESH_IDLE) {
            if self.cut != ssthresh {
                self.cut = None;
            }
            // The relay dropped the request when the data came: ask again once idle.
            self.asked_at = None;
            return None;
        }
        // A fall with more in flight is the tail of a download the socket still drains
        // (the session wrote it earlier): the path's own.
        if fell {
            self.cut = ssthresh.filter(|&t| probes_only && t < REFRESH_LOW_SEGMENTS);
        } else if self.cut.is_some() {
            self.cut = ssthresh;
        }
        let cut = self.cut?;
        let due = self.asked_at.is_none_or(|a| now - a >= REFRESH_ASK_EVERY);
        (socket_idle && due).then_some(cut)
    }

    /// The relay was asked at `now`.
    pub fn asked(&mut self, now: Instant) {
        self.asked_at = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The proxy asks for a fresh subflow only for a threshold cut while the path carried no
    /// more than probes, once the socket is idle, and again at most every 10 s, or a second
    /// after data that left the cut threshold as it was; a cut while data flowed, or a new
    /// threshold set by data after the cut, asks nothing.
    #[test]
    fn refresh_is_asked_only_for_a_threshold_cut_while_idle() {
        let ms = Instant::from_millis;
        // A download: 64 KiB every 10 ms for 2 s, a loss cuts the threshold to 300 meanwhile.
        let mut w = RefreshWatch::default();
        let mut bytes = 0;
        for t in 0..200 {
            bytes += 64 << 10;
            let ss = (t >= 100).then_some(300);
            assert_eq!(w.on_sample(ms(t * 10), bytes, ss, false, false), None);
        }
        // Then idle (probes only): the threshold the download left is kept, nothing asked.
        for t in 200..600 {
            bytes += 4;
            assert_eq!(
                w.on_sample(ms(t * 10), bytes, Some(300), true, true),
                None,
                "at {t}"
            );
        }
        // A timeout on a probe cuts it to 27 while the socket backs off: asked once it is idle.
        assert_eq!(w.on_sample(ms(6000), bytes, Some(27), true, false), None);
        assert_eq!(w.on_sample(ms(6010), bytes, Some(27), true, true), Some(27));
        w.asked(ms(6010));
        assert_eq!(
            w.on_sample(ms(6020), bytes, Some(27), true, true),
            None,
            "asked already"
        );
        assert_eq!(
            w.on_sample(ms(16_010), bytes, Some(27), true, true),
            Some(27),
            "10 s later"
        );
        w.asked(ms(16_010));
        // A download before the relay replaced the subflow, which leaves the threshold as it
        // was: asked again a second after it, not 10 s after the last request.
        bytes += 1 << 20;
        assert_eq!(w.on_sample(ms(16_500), bytes, Some(27), false, false), None);
        assert_eq!(w.on_sample(ms(17_000), bytes, Some(27), true, true), None);
        assert_eq!(
            w.on_sample(ms(17_500), bytes, Some(27), true, true),
            Some(27)
        );
        w.asked(ms(17_500));
        // A download in which a loss sets another threshold ends the matter.
        bytes += 1 << 20;
        assert_eq!(w.on_sample(ms(18_000), bytes, Some(60), false, false), None);
        for t in 0..300 {
            assert_eq!(
                w.on_sample(ms(18_010 + t * 10), bytes, Some(60), true, true),
                None
            );
        }

        // A threshold set while the socket still drains a download the session wrote more
        // than a second ago (HyStart ending slow start, or a loss) is the path's own.
        let mut w = RefreshWatch::default();
        assert_eq!(w.on_sample(ms(0), 1 << 20, None, false, false), None);
        assert_eq!(
            w.on_sample(ms(1500), 1 << 20, Some(598), false, false),
            None
        );
        assert_eq!(w.on_sample(ms(3000), 1 << 20, Some(598), true, true), None);

        // A cut that leaves hundreds of segments asks nothing.
        let mut w = RefreshWatch::default();
        assert_eq!(w.on_sample(ms(0), 0, None, true, true), None);
        assert_eq!(w.on_sample(ms(1500), 100, Some(392), true, true), None);
        assert_eq!(w.on_sample(ms(3000), 200, Some(392), true, true), None);

        // A fresh subflow (no threshold) whose first cut comes while idle.
        let mut w = RefreshWatch::default();
        assert_eq!(w.on_sample(ms(0), 100, None, true, true), None);
        assert_eq!(w.on_sample(ms(1500), 200, Some(2), true, true), Some(2));
        // A cut within a second of data is the data's.
        let mut w = RefreshWatch::default();
        assert_eq!(w.on_sample(ms(0), 0, None, true, true), None);
        assert_eq!(w.on_sample(ms(500), 10_000, None, true, true), None);
        assert_eq!(w.on_sample(ms(900), 10_050, Some(40), true, true), None);
        assert_eq!(w.on_sample(ms(2000), 10_100, Some(40), true, true), None);
    }
}
