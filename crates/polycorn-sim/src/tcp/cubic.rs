//! CUBIC (RFC 9438) in segments, with Linux `tcp_cubic.c`'s HyStart delay-increase exit
//! from slow start, `tcp_cwnd_restart` after idle and the epoch shift over idle time.

use super::ack::{AckEvent, CaState};
use super::{Duration, Instant, TcpConfig};

/// RFC 9438 §4.6: multiplicative decrease factor.
const BETA: f64 = 0.7;
/// RFC 9438 §4.2: the cubic growth constant (segments / s³).
const C: f64 = 0.4;
/// Linux `hystart_low_window`: HyStart acts only from this window (segments) up.
const HYSTART_LOW_WINDOW: f64 = 16.0;
/// Linux `HYSTART_MIN_SAMPLES`: RTT samples per round before HyStart judges the round.
const HYSTART_MIN_SAMPLES: u32 = 8;
/// Linux `hystart_ack_delta_us`: ACKs at most this far apart belong to one train.
const HYSTART_ACK_DELTA: Duration = Duration::from_millis(2);
/// Linux `hystart_ack_delay()`: allowance for delayed and stretched ACKs, `min(1 ms,
/// 4 × 64 KB / pacing rate)`; 1 ms at the rates modelled here.
const HYSTART_ACK_DELAY: Duration = Duration::from_millis(1);

#[derive(Clone, Debug)]
pub(crate) struct Cubic {
    cwnd: f64,
    ssthresh: f64,
    w_max: f64,
    k: f64,
    origin: f64,
    w_est: f64,
    epoch_start: Option<Instant>,
    mss: u32,
    pace: bool,
    pacing_rate: u64,
    /// Smallest RTT this controller saw (`delay_min`).
    delay_min: Option<Duration>,
    // HyStart round state
    round_end_seq: u64,
    curr_rtt: Option<Duration>,
    sample_cnt: u32,
    round_start: Instant,
    last_ack: Instant,
}

impl Cubic {
    pub(crate) fn new(cfg: &TcpConfig) -> Self {
        Cubic {
            cwnd: f64::from(cfg.initial_window_segments.max(1)),
            ssthresh: f64::INFINITY,
            w_max: 0.0,
            k: 0.0,
            origin: 0.0,
            w_est: 0.0,
            epoch_start: None,
            mss: cfg.mss,
            pace: cfg.pace_cubic,
            pacing_rate: 0,
            delay_min: None,
            round_end_seq: 0,
            curr_rtt: None,
            sample_cnt: 0,
            round_start: Instant::ZERO,
            last_ack: Instant::ZERO,
        }
    }

    pub(crate) fn cwnd(&self) -> u32 {
        (self.cwnd as u32).max(1)
    }

    pub(crate) fn ssthresh(&self) -> u32 {
        if self.ssthresh.is_finite() {
            self.ssthresh as u32
        } else {
            u32::MAX
        }
    }

    pub(crate) fn pacing_rate(&self) -> Option<u64> {
        (self.pace && self.pacing_rate > 0).then_some(self.pacing_rate)
    }

    fn in_slow_start(&self) -> bool {
        self.cwnd < self.ssthresh
    }

    pub(crate) fn on_ack(&mut self, ev: &AckEvent) {
        if let Some(rtt) = ev.rs.rtt {
            self.delay_min = Some(self.delay_min.map_or(rtt, |d| d.min(rtt)));
            if self.in_slow_start() && ev.state == CaState::Open {
                self.hystart(ev, rtt);
            }
        }
        let acked = f64::from(ev.rs.acked_sacked);
        // No growth while the window is being reduced, nor on an ACK that only SACKs
        // (`tcp_may_raise_cwnd`), nor when the application, not the window, limits sending
        // (`tcp_is_cwnd_limited`).
        if acked > 0.0 && ev.state != CaState::Recovery && ev.data_acked && ev.cwnd_limited {
            if self.in_slow_start() {
                let room = (self.ssthresh - self.cwnd).max(0.0);
                let used = acked.min(room);
                self.cwnd += used;
                let rest = acked - used;
                if rest > 0.0 {
                    self.avoid(ev.now, rest, ev.min_rtt);
                }
            } else {
                self.avoid(ev.now, acked, ev.min_rtt);
            }
        }
        self.update_pacing(ev);
    }

    /// HyStart (Linux `hystart_update`): leave slow start when a round's train of closely
    /// spaced ACKs lasts longer than half the minimum RTT (the window fills the path), or when
    /// the round's minimum RTT rose past the smallest seen by an eighth of it (clamped to
    /// 4..16 ms: a queue is building).
    fn hystart(&mut self, ev: &AckEvent, rtt: Duration) {
        let now = ev.now;
        if ev.snd_una > self.round_end_seq {
            self.round_end_seq = ev.snd_nxt;
            self.curr_rtt = None;
            self.sample_cnt = 0;
            self.round_start = now;
            self.last_ack = now;
        }
        if self.cwnd < HYSTART_LOW_WINDOW {
            return;
        }
        if now - self.last_ack <= HYSTART_ACK_DELTA {
            self.last_ack = now;
            if let Some(min) = self.delay_min {
                let mut threshold = min.saturating_add(HYSTART_ACK_DELAY).as_micros();
                if !self.pace {
                    threshold /= 2;
                }
                if (now - self.round_start).as_micros() > threshold {
                    self.ssthresh = self.cwnd;
                    return;
                }
            }
        }
        self.curr_rtt = Some(self.curr_rtt.map_or(rtt, |c| c.min(rtt)));
        if self.sample_cnt < HYSTART_MIN_SAMPLES {
            self.sample_cnt += 1;
            return;
        }
        let (Some(curr), Some(min)) = (self.curr_rtt, self.delay_min) else {
            return;
        };
        let thresh = (min.as_micros() / 8).clamp(4_000, 16_000);
        if curr.as_micros() > min.as_micros() + thresh {
            self.ssthresh = self.cwnd;
        }
    }

    /// Congestion avoidance for `acked` segments (RFC 9438 §4.2–4.5).
    fn avoid(&mut self, now: Instant, acked: f64, min_rtt: Option<Duration>) {
        let epoch = match self.epoch_start {
            Some(e) => e,
            None => {
                self.epoch_start = Some(now);
                if self.cwnd < self.w_max {
                    self.k = ((self.w_max - self.cwnd) / C).cbrt();
                    self.origin = self.w_max;
                } else {
                    self.k = 0.0;
                    self.origin = self.cwnd;
                }
                self.w_est = self.cwnd;
                now
            }
        };
        let rtt = min_rtt
            .or(self.delay_min)
            .unwrap_or(Duration::from_millis(100));
        let t = (now - epoch).saturating_add(rtt).as_secs_f64();
        let target_cubic = self.origin + C * (t - self.k).powi(3);
        // Reno-friendly region (§4.3): W_est grows by alpha per window.
        let alpha = if self.w_est >= self.w_max {
            1.0
        } else {
            3.0 * (1.0 - BETA) / (1.0 + BETA)
        };
        self.w_est += alpha * acked / self.cwnd;
        let target = target_cubic
            .clamp(self.cwnd, 1.5 * self.cwnd)
            .max(self.w_est);
        if target > self.cwnd {
            self.cwnd += (target - self.cwnd) / self.cwnd * acked;
        }
    }

    fn reduce(&mut self) {
        self.epoch_start = None;
        // Fast convergence (§4.7).
        self.w_max = if self.cwnd < self.w_max {
            self.cwnd * (1.0 + BETA) / 2.0
        } else {
            self.cwnd
        };
        self.ssthresh = (self.cwnd * BETA).max(2.0).floor();
    }

    /// Fast recovery begins: ssthresh = β·cwnd; the sender's proportional rate reduction
    /// then sets the window on each ACK ([`Cubic::set_cwnd`]).
    pub(crate) fn on_loss(&mut self, _now: Instant) {
        self.reduce();
    }

    /// A reduction without recovery (a tail-loss probe repaired a loss: Linux's CWR state,
    /// entered and left at once): ssthresh = β·cwnd and the window drops to it.
    pub(crate) fn on_cwr(&mut self) {
        self.reduce();
        self.cwnd = self.ssthresh;
    }

    /// Set the window (proportional rate reduction, and its end at ssthresh).
    pub(crate) fn set_cwnd(&mut self, segments: u32) {
        self.cwnd = f64::from(segments.max(1));
    }

    /// Retransmission timeout: ssthresh as for a loss (only on the first timeout from the
    /// Open state), window = in flight + 1.
    pub(crate) fn on_rto(&mut self, in_flight: u32, from_open: bool) {
        if from_open {
            self.reduce();
        }
        self.epoch_start = None;
        self.cwnd = f64::from(in_flight + 1);
    }

    pub(crate) fn on_tx_start(&mut self, now: Instant, idle: Duration) {
        if let Some(e) = self.epoch_start {
            let shifted = e + idle;
            self.epoch_start = Some(if shifted > now { now } else { shifted });
        }
    }

    /// Linux `tcp_cwnd_restart`.
    pub(crate) fn restart_after_idle(&mut self, idle: Duration, rto: Duration, iw: u32) {
        self.ssthresh = self.ssthresh.max((0.75 * self.cwnd).floor());
        let restart = f64::from(iw).min(self.cwnd);
        let mut cwnd = self.cwnd.floor();
        let mut delta = idle.as_micros() as i128;
        let rto = rto.as_micros().max(1) as i128;
        loop {
            delta -= rto;
            if delta <= 0 || cwnd <= restart {
                break;
            }
            cwnd = (cwnd / 2.0).floor();
        }
        self.cwnd = cwnd.max(restart);
    }

    /// Linux `tcp_update_pacing_rate`.
    fn update_pacing(&mut self, ev: &AckEvent) {
        if !self.pace {
            return;
        }
        let Some(srtt) = ev.srtt.filter(|s| !s.is_zero()) else {
            return;
        };
        let ratio = if self.cwnd < self.ssthresh / 2.0 {
            2.0
        } else {
            1.2
        };
        let wnd = self.cwnd.max(f64::from(ev.in_flight));
        self.pacing_rate = (ratio * wnd * f64::from(self.mss) / srtt.as_secs_f64()) as u64;
    }
}
