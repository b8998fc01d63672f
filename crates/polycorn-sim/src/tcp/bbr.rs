//! BBR v1 as Linux `tcp_bbr.c` runs it: a max filter of delivery rate over 10 rounds, a
//! 10 s min filter of RTT, Startup / Drain / ProbeBW (8-phase gain cycle) / ProbeRTT, packet
//! conservation in recovery, and the ACK-aggregation allowance (`bbr_extra_acked`: the window
//! grows by what ACKs delivered beyond the bandwidth estimate over the last 5–10 rounds, which
//! on cellular links with bursty delivery keeps the pipe full). The long-term (policer)
//! bandwidth model is left out.

use super::ack::{AckEvent, CaState};
use super::rtt::MinMax;
use super::{Duration, Instant, TcpConfig};

/// `bbr_high_gain`: 2/ln 2, the smallest gain that doubles the sending rate each round.
const HIGH_GAIN: f64 = 2885.0 / 1000.0 + 0.001;
/// `bbr_drain_gain`: the inverse of the high gain, to drain Startup's queue in one round.
const DRAIN_GAIN: f64 = 1000.0 / 2885.0;
/// `bbr_cwnd_gain` in ProbeBW.
const CWND_GAIN: f64 = 2.0;
/// `bbr_pacing_gain`: probe up, drain, then cruise for six phases.
const PACING_GAINS: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
/// `bbr_bw_rtts`: rounds in the bandwidth max filter.
const BW_ROUNDS: u64 = 10;
/// `bbr_min_rtt_win_sec`.
const MIN_RTT_WIN: Duration = Duration::from_secs(10);
/// `bbr_probe_rtt_mode_ms`.
const PROBE_RTT_TIME: Duration = Duration::from_millis(200);
/// `bbr_cwnd_min_target`.
const CWND_MIN: u32 = 4;
/// `bbr_pacing_margin_percent`: pace 1 % below the estimate.
const PACING_MARGIN: f64 = 0.99;
/// `bbr_full_bw_thresh`, `bbr_full_bw_cnt`.
const FULL_BW_THRESH: f64 = 1.25;
const FULL_BW_CNT: u32 = 3;
/// Bandwidth in the max filter is kept as segments per second × this, as an integer.
const BW_SCALE: f64 = 1000.0;
/// `bbr_extra_acked_win_rtts`: rounds per window of the ACK-aggregation max filter (two
/// windows are kept).
const EXTRA_ACKED_WIN_RTTS: u32 = 5;
/// `bbr_extra_acked_max_us`: the aggregation allowance is at most this much at the
/// bandwidth estimate.
const EXTRA_ACKED_MAX: Duration = Duration::from_millis(100);
/// `bbr_ack_epoch_acked_reset_thresh`: an aggregation epoch restarts after this many
/// segments.
const ACK_EPOCH_ACKED_RESET: u32 = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Startup,
    Drain,
    ProbeBw,
    ProbeRtt,
}

#[derive(Clone, Debug)]
pub(crate) struct Bbr {
    mode: Mode,
    mss: u32,
    cwnd: u32,
    prior_cwnd: u32,
    pacing_rate: u64,
    pacing_gain: f64,
    cwnd_gain: f64,
    bw: MinMax,
    min_rtt: Option<Duration>,
    min_rtt_stamp: Instant,
    probe_rtt_done: Option<Instant>,
    probe_rtt_round_done: bool,
    round_count: u64,
    next_rtt_delivered: u64,
    round_start: bool,
    full_bw: f64,
    full_bw_cnt: u32,
    full_bw_reached: bool,
    cycle_idx: usize,
    cycle_stamp: Instant,
    packet_conservation: bool,
    prev_state: CaState,
    idle_restart: bool,
    has_seen_rtt: bool,
    initial_window: u32,
    seed: u64,
    /// `bbr_update_ack_aggregation`: segments delivered beyond the bandwidth estimate over
    /// the current aggregation epoch, max per window (two windows of 5 rounds) …
    extra_acked: [u32; 2],
    extra_acked_win_rtts: u32,
    extra_acked_win_idx: usize,
    /// … and the epoch: when it began and what it delivered.
    ack_epoch_stamp: Instant,
    ack_epoch_acked: u32,
}

impl Bbr {
    pub(crate) fn new(cfg: &TcpConfig) -> Self {
        let iw = cfg.initial_window_segments.max(1);
        // bbr_init_pacing_rate_from_rtt with no RTT yet: 1 ms.
        let pacing = HIGH_GAIN * f64::from(iw) * f64::from(cfg.mss) / 0.001 * PACING_MARGIN;
        Bbr {
            mode: Mode::Startup,
            mss: cfg.mss,
            cwnd: iw,
            prior_cwnd: 0,
            pacing_rate: pacing as u64,
            pacing_gain: HIGH_GAIN,
            cwnd_gain: HIGH_GAIN,
            bw: MinMax::new_max(),
            min_rtt: None,
            min_rtt_stamp: Instant::ZERO,
            probe_rtt_done: None,
            probe_rtt_round_done: false,
            round_count: 0,
            next_rtt_delivered: 0,
            round_start: false,
            full_bw: 0.0,
            full_bw_cnt: 0,
            full_bw_reached: false,
            cycle_idx: 0,
            cycle_stamp: Instant::ZERO,
            packet_conservation: false,
            prev_state: CaState::Open,
            idle_restart: false,
            has_seen_rtt: false,
            initial_window: iw,
            seed: cfg.seed,
            extra_acked: [0; 2],
            extra_acked_win_rtts: 0,
            extra_acked_win_idx: 0,
            ack_epoch_stamp: Instant::ZERO,
            ack_epoch_acked: 0,
        }
    }

    pub(crate) fn cwnd(&self) -> u32 {
        self.cwnd.max(1)
    }

    pub(crate) fn pacing_rate(&self) -> u64 {
        self.pacing_rate
    }

    /// Bottleneck bandwidth estimate in segments per second.
    fn max_bw(&self) -> f64 {
        self.bw.get() as f64 / BW_SCALE
    }

    /// `bbr_tso_segs_goal`: about a millisecond of data at the pacing rate, 2..=44 segments.
    fn tso_segs_goal(&self) -> u32 {
        let bytes = self.pacing_rate >> 10;
        ((bytes / u64::from(self.mss.max(1))) as u32).clamp(2, 44)
    }

    /// `bbr_bdp` plus `bbr_quantization_budget`.
    fn inflight(&self, bw: f64, gain: f64) -> u32 {
        let Some(min_rtt) = self.min_rtt else {
            return self.initial_window;
        };
        let bdp = (bw * min_rtt.as_secs_f64() * gain).ceil() as u32;
        let mut cwnd = bdp + 3 * self.tso_segs_goal();
        if self.mode == Mode::ProbeBw && self.cycle_idx == 0 {
            cwnd += 2;
        }
        cwnd
    }

    pub(crate) fn save_cwnd(&mut self, in_recovery: bool) {
        if !in_recovery && self.mode != Mode::ProbeRtt {
            self.prior_cwnd = self.cwnd;
        } else {
            self.prior_cwnd = self.prior_cwnd.max(self.cwnd);
        }
    }

    /// `tcp_enter_loss`: the window is saved only on the first timeout from the Open state
    /// (fast recovery saved it already; repeated timeouts keep the first saved value).
    pub(crate) fn on_rto(&mut self, in_flight: u32, from_open: bool) {
        if from_open {
            self.save_cwnd(false);
        }
        self.cwnd = in_flight + 1;
        self.prev_state = CaState::Loss;
        self.full_bw = 0.0;
        self.round_start = true;
    }

    pub(crate) fn on_tx_start(&mut self, now: Instant, app_limited: bool) {
        if app_limited {
            self.idle_restart = true;
            self.ack_epoch_stamp = now;
            self.ack_epoch_acked = 0;
            if self.mode == Mode::ProbeBw {
                self.set_pacing_rate(self.max_bw(), 1.0);
            } else if self.mode == Mode::ProbeRtt {
                self.check_probe_rtt_done(now);
            }
        }
    }

    fn set_pacing_rate(&mut self, bw: f64, gain: f64) {
        if bw <= 0.0 {
            return;
        }
        let rate = (bw * f64::from(self.mss) * gain * PACING_MARGIN) as u64;
        if self.full_bw_reached || rate > self.pacing_rate {
            self.pacing_rate = rate;
        }
    }

    fn reset_mode(&mut self, now: Instant) {
        if !self.full_bw_reached {
            self.mode = Mode::Startup;
            self.pacing_gain = HIGH_GAIN;
            self.cwnd_gain = HIGH_GAIN;
        } else {
            self.enter_probe_bw(now);
        }
    }

    fn enter_probe_bw(&mut self, now: Instant) {
        self.mode = Mode::ProbeBw;
        self.cwnd_gain = CWND_GAIN;
        // Linux: cycle_idx = CYCLE_LEN - 1 - random(bbr_cycle_rand = 7), then advance.
        self.seed = splitmix(self.seed);
        let r = (self.seed % 7) as usize;
        self.cycle_idx = 7 - r;
        self.advance_cycle(now);
    }

    fn advance_cycle(&mut self, now: Instant) {
        self.cycle_idx = (self.cycle_idx + 1) % PACING_GAINS.len();
        self.cycle_stamp = now;
        self.pacing_gain = PACING_GAINS[self.cycle_idx];
    }

    fn check_probe_rtt_done(&mut self, now: Instant) {
        if let Some(done) = self.probe_rtt_done {
            if now > done {
                self.min_rtt_stamp = now;
                self.cwnd = self.cwnd.max(self.prior_cwnd);
                self.reset_mode(now);
            }
        }
    }

    pub(crate) fn on_ack(&mut self, ev: &AckEvent) {
        let rs = &ev.rs;
        let now = ev.now;
        // bbr_update_bw
        self.round_start = false;
        if let (Some(delivered), Some(interval)) = (rs.delivered, rs.interval) {
            if !interval.is_zero() {
                if rs.prior_delivered >= self.next_rtt_delivered {
                    self.next_rtt_delivered = ev.delivered;
                    self.round_count += 1;
                    self.round_start = true;
                    self.packet_conservation = false;
                }
                let bw = delivered as f64 / interval.as_secs_f64();
                if !rs.is_app_limited || bw >= self.max_bw() {
                    self.bw
                        .update(BW_ROUNDS, self.round_count, (bw * BW_SCALE) as u64);
                }
            }
        }
        self.update_ack_aggregation(ev);
        // bbr_update_cycle_phase
        if self.mode == Mode::ProbeBw && self.is_next_cycle_phase(ev) {
            self.advance_cycle(now);
        }
        // bbr_check_full_bw_reached
        if !self.full_bw_reached && self.round_start && !rs.is_app_limited {
            let bw = self.max_bw();
            if bw >= self.full_bw * FULL_BW_THRESH {
                self.full_bw = bw;
                self.full_bw_cnt = 0;
            } else {
                self.full_bw_cnt += 1;
                self.full_bw_reached = self.full_bw_cnt >= FULL_BW_CNT;
            }
        }
        // bbr_check_drain
        if self.mode == Mode::Startup && self.full_bw_reached {
            self.mode = Mode::Drain;
            self.pacing_gain = DRAIN_GAIN;
            self.cwnd_gain = HIGH_GAIN;
        }
        if self.mode == Mode::Drain && ev.in_flight <= self.inflight(self.max_bw(), 1.0) {
            self.enter_probe_bw(now);
        }
        // bbr_update_min_rtt
        let expired = now > self.min_rtt_stamp + MIN_RTT_WIN;
        if let Some(rtt) = rs.rtt {
            if self.min_rtt.is_none_or(|m| rtt < m) || expired {
                self.min_rtt = Some(rtt);
                self.min_rtt_stamp = now;
            }
        }
        if expired && !self.idle_restart && self.mode != Mode::ProbeRtt {
            self.mode = Mode::ProbeRtt;
            self.pacing_gain = 1.0;
            self.cwnd_gain = 1.0;
            self.save_cwnd(ev.state != CaState::Open);
            self.probe_rtt_done = None;
        }
        if self.mode == Mode::ProbeRtt {
            if self.probe_rtt_done.is_none() && ev.in_flight <= CWND_MIN {
                self.probe_rtt_done = Some(now + PROBE_RTT_TIME);
                self.probe_rtt_round_done = false;
                self.next_rtt_delivered = ev.delivered;
            } else if self.probe_rtt_done.is_some() {
                if self.round_start {
                    self.probe_rtt_round_done = true;
                }
                if self.probe_rtt_round_done {
                    self.check_probe_rtt_done(now);
                }
            }
        }
        if rs.delivered.is_some_and(|d| d > 0) {
            self.idle_restart = false;
        }
        // bbr_set_pacing_rate (with bbr_init_pacing_rate_from_rtt on the first RTT)
        if !self.has_seen_rtt {
            if let Some(srtt) = ev.srtt.filter(|s| !s.is_zero()) {
                self.has_seen_rtt = true;
                let bw = f64::from(self.cwnd) / srtt.as_secs_f64();
                self.pacing_rate = (bw * f64::from(self.mss) * HIGH_GAIN * PACING_MARGIN) as u64;
            }
        }
        self.set_pacing_rate(self.max_bw(), self.pacing_gain);
        self.set_cwnd(ev);
    }

    /// `bbr_update_ack_aggregation`: how many segments ACKs delivered beyond what the
    /// bandwidth estimate expects since the aggregation epoch began (an epoch restarts
    /// whenever ACKs fall behind the estimate); the max over the last 5–10 rounds.
    fn update_ack_aggregation(&mut self, ev: &AckEvent) {
        let rs = &ev.rs;
        if rs.acked_sacked == 0 || rs.delivered.is_none() || rs.interval.is_none_or(|i| i.is_zero())
        {
            return;
        }
        if self.round_start {
            self.extra_acked_win_rtts = (self.extra_acked_win_rtts + 1).min(0x1F);
            if self.extra_acked_win_rtts >= EXTRA_ACKED_WIN_RTTS {
                self.extra_acked_win_rtts = 0;
                self.extra_acked_win_idx = 1 - self.extra_acked_win_idx;
                self.extra_acked[self.extra_acked_win_idx] = 0;
            }
        }
        let epoch = ev.now.saturating_duration_since(self.ack_epoch_stamp);
        let mut expected = (self.max_bw() * epoch.as_secs_f64()) as u64;
        if u64::from(self.ack_epoch_acked) <= expected
            || self.ack_epoch_acked.saturating_add(rs.acked_sacked) >= ACK_EPOCH_ACKED_RESET
        {
            self.ack_epoch_acked = 0;
            self.ack_epoch_stamp = ev.now;
            expected = 0;
        }
        self.ack_epoch_acked = (self.ack_epoch_acked + rs.acked_sacked).min(0xF_FFFF);
        let extra = (u64::from(self.ack_epoch_acked) - expected).min(u64::from(self.cwnd)) as u32;
        let w = &mut self.extra_acked[self.extra_acked_win_idx];
        *w = (*w).max(extra);
    }

    /// `bbr_ack_aggregation_cwnd`: the aggregation max, at most 100 ms at the bandwidth
    /// estimate, once the pipe was found full.
    fn ack_aggregation_cwnd(&self) -> u32 {
        if !self.full_bw_reached {
            return 0;
        }
        let max = (self.max_bw() * EXTRA_ACKED_MAX.as_secs_f64()) as u32;
        self.extra_acked[0].max(self.extra_acked[1]).min(max)
    }

    fn is_next_cycle_phase(&self, ev: &AckEvent) -> bool {
        let full_length = self.min_rtt.is_some_and(|m| ev.now - self.cycle_stamp > m);
        let gain = self.pacing_gain;
        if gain == 1.0 {
            return full_length;
        }
        let inflight = ev.rs.prior_in_flight;
        if gain > 1.0 {
            return full_length
                && (ev.rs.losses > 0 || inflight >= self.inflight(self.max_bw(), gain));
        }
        full_length || inflight <= self.inflight(self.max_bw(), 1.0)
    }

    fn set_cwnd(&mut self, ev: &AckEvent) {
        let acked = ev.rs.acked_sacked;
        if acked > 0 {
            let mut cwnd = self.cwnd;
            // bbr_set_cwnd_to_recover_or_restore
            if ev.rs.losses > 0 {
                cwnd = cwnd.saturating_sub(ev.rs.losses).max(1);
            }
            let mut conserving = false;
            if ev.state == CaState::Recovery && self.prev_state != CaState::Recovery {
                self.packet_conservation = true;
                self.next_rtt_delivered = ev.delivered;
                cwnd = ev.in_flight + acked;
            } else if self.prev_state >= CaState::Recovery && ev.state < CaState::Recovery {
                cwnd = cwnd.max(self.prior_cwnd);
                self.packet_conservation = false;
            }
            self.prev_state = ev.state;
            if self.packet_conservation {
                cwnd = cwnd.max(ev.in_flight + acked);
                conserving = true;
            }
            if !conserving {
                let target =
                    self.inflight(self.max_bw(), self.cwnd_gain) + self.ack_aggregation_cwnd();
                if self.full_bw_reached {
                    cwnd = (cwnd + acked).min(target);
                } else if cwnd < target || ev.delivered < u64::from(self.initial_window) {
                    cwnd += acked;
                }
                cwnd = cwnd.max(CWND_MIN);
            }
            self.cwnd = cwnd;
        }
        if self.mode == Mode::ProbeRtt {
            self.cwnd = self.cwnd.min(CWND_MIN);
        }
    }
}

/// SplitMix64: the one pseudo-random step BBR takes, from the configured seed.
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
