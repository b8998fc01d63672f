//! RTT estimation and RTO as Linux computes them (`tcp_rtt_estimator`, `tcp_set_rto`), and
//! the windowed min/max filter (`lib/win_minmax.c`) used for min_rtt and BBR's bandwidth.

use super::{Duration, Instant};

/// Linux's RTT state, in microseconds; `srtt8` is 8 × srtt and `mdev4` 4 × mdev, as in the
/// kernel.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RttEstimator {
    srtt8: u64,
    mdev4: u64,
    mdev_max: u64,
    rttvar: u64,
    /// `snd_nxt` when the current RTT's variance window began (`rtt_seq`).
    rtt_seq: u64,
    rto_min: u64,
    rto_max: u64,
    /// The RTO before back-off (`icsk_rto` as last set by `tcp_set_rto`).
    rto: u64,
}

impl RttEstimator {
    pub(crate) fn new(rto_initial: Duration, rto_min: Duration, rto_max: Duration) -> Self {
        RttEstimator {
            srtt8: 0,
            mdev4: 0,
            mdev_max: 0,
            rttvar: 0,
            rtt_seq: 0,
            rto_min: rto_min.as_micros(),
            rto_max: rto_max.as_micros(),
            rto: rto_initial.as_micros(),
        }
    }

    /// Has any sample been taken?
    pub(crate) fn has_sample(&self) -> bool {
        self.srtt8 != 0
    }

    /// Fold in one RTT sample `m` (µs); `snd_una`/`snd_nxt` as after the ACK.
    pub(crate) fn sample(&mut self, m: Duration, snd_una: u64, snd_nxt: u64) {
        let m = m.as_micros().max(1) as i64;
        if self.srtt8 != 0 {
            let mut srtt = self.srtt8 as i64;
            let mut err = m - (srtt >> 3);
            srtt += err;
            let mut mdev = self.mdev4 as i64;
            if err < 0 {
                err = -err - (mdev >> 2);
                if err > 0 {
                    err >>= 3;
                }
            } else {
                err -= mdev >> 2;
            }
            mdev += err;
            self.mdev4 = mdev.max(0) as u64;
            if self.mdev4 > self.mdev_max {
                self.mdev_max = self.mdev4;
                if self.mdev_max > self.rttvar {
                    self.rttvar = self.mdev_max;
                }
            }
            if snd_una > self.rtt_seq {
                if self.mdev_max < self.rttvar {
                    self.rttvar -= (self.rttvar - self.mdev_max) >> 2;
                }
                self.rtt_seq = snd_nxt;
                self.mdev_max = self.rto_min;
            }
            self.srtt8 = srtt.max(1) as u64;
        } else {
            self.srtt8 = (m as u64) << 3;
            self.mdev4 = (m as u64) << 1;
            self.rttvar = self.mdev4.max(self.rto_min);
            self.mdev_max = self.rttvar;
            self.rtt_seq = snd_nxt;
        }
        // tcp_set_rto + tcp_bound_rto
        self.rto = ((self.srtt8 >> 3) + self.rttvar).min(self.rto_max);
    }

    /// Smoothed RTT (`tcpi_rtt`); zero before the first sample.
    pub(crate) fn srtt(&self) -> Duration {
        Duration::from_micros(self.srtt8 >> 3)
    }
    /// RTT deviation (`tcpi_rttvar`, `mdev_us >> 2`).
    pub(crate) fn rttvar(&self) -> Duration {
        Duration::from_micros(self.mdev4 >> 2)
    }
    /// The RTO with `backoff` doublings, capped at the maximum.
    pub(crate) fn rto(&self, backoff: u32) -> Duration {
        let shifted = if backoff >= 40 {
            u64::MAX
        } else {
            self.rto.saturating_mul(1 << backoff)
        };
        Duration::from_micros(shifted.min(self.rto_max))
    }
}

/// Kathleen Nichols' windowed min or max over time (`lib/win_minmax.c`): three samples,
/// O(1) per update.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MinMax {
    s: [(u64, u64); 3],
    is_max: bool,
}

impl MinMax {
    pub(crate) fn new_min() -> Self {
        MinMax {
            s: [(0, u64::MAX); 3],
            is_max: false,
        }
    }
    pub(crate) fn new_max() -> Self {
        MinMax {
            s: [(0, 0); 3],
            is_max: true,
        }
    }
    /// The current best value (`u64::MAX` for an empty min filter, 0 for an empty max).
    pub(crate) fn get(&self) -> u64 {
        self.s[0].1
    }
    fn better(&self, a: u64, b: u64) -> bool {
        if self.is_max {
            a >= b
        } else {
            a <= b
        }
    }
    /// Reset to one sample.
    pub(crate) fn reset(&mut self, t: u64, v: u64) {
        self.s = [(t, v); 3];
    }
    /// Fold in `v` measured at `t` (a time or round count), keeping a window of `win`.
    pub(crate) fn update(&mut self, win: u64, t: u64, v: u64) {
        if self.better(v, self.s[0].1) || t.saturating_sub(self.s[2].0) > win {
            self.reset(t, v);
            return;
        }
        if self.better(v, self.s[1].1) {
            self.s[2] = (t, v);
            self.s[1] = (t, v);
        } else if self.better(v, self.s[2].1) {
            self.s[2] = (t, v);
        }
        // subwin_update
        let dt = t.saturating_sub(self.s[0].0);
        if dt > win {
            self.s[0] = self.s[1];
            self.s[1] = self.s[2];
            self.s[2] = (t, v);
            if t.saturating_sub(self.s[0].0) > win {
                self.s[0] = self.s[1];
                self.s[1] = self.s[2];
                self.s[2] = (t, v);
            }
        } else if self.s[1].0 == self.s[0].0 && dt > win / 4 {
            self.s[2] = (t, v);
            self.s[1] = (t, v);
        } else if self.s[2].0 == self.s[1].0 && dt > win / 2 {
            self.s[2] = (t, v);
        }
    }
}

/// Microseconds of `t` since the model's epoch, for [`MinMax`] windows.
pub(crate) fn us(t: Instant) -> u64 {
    t.as_micros()
}
