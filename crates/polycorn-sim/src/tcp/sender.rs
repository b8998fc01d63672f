//! The sending side of a subflow: send buffer, scoreboard, loss recovery, timers,
//! delivery-rate sampling and the `TCP_INFO` reading.

use std::collections::VecDeque;

use polycorn_sched::TcpInfoSample;

use super::ack::{AckEvent, CaState, RateSample};
use super::cc::Cc;
use super::rtt::{us, MinMax, RttEstimator};
use super::{Ack, Bandwidth, Duration, Instant, Segment, TcpConfig};

/// Linux `tcp_min_rtt_wlen`: the min_rtt filter's window.
const MIN_RTT_WINDOW: Duration = Duration::from_secs(300);
/// RFC 6675 DupThresh (Linux `tp->reordering` with no reordering seen).
const DUP_THRESH: u32 = 3;

/// Counters of one sender since it was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SenderStats {
    /// Bytes the application wrote.
    pub bytes_written: u64,
    /// Bytes sent for the first time.
    pub bytes_sent: u64,
    /// Bytes sent again.
    pub bytes_retransmitted: u64,
    /// Segments sent (first transmissions and retransmissions).
    pub segments_sent: u64,
    /// Segments retransmitted.
    pub segments_retransmitted: u64,
    /// Retransmission timeouts.
    pub rtos: u64,
    /// Fast recoveries entered.
    pub recoveries: u64,
    /// Tail-loss probes sent.
    pub tail_loss_probes: u64,
}

/// One segment on the scoreboard.
#[derive(Clone, Copy, Debug)]
struct SegRec {
    seq: u64,
    len: u32,
    /// Time of the last transmission.
    sent: Instant,
    /// Time of the first transmission.
    first_sent: Instant,
    // `tcp_rate.c` snapshot at the last transmission.
    tx_delivered: u64,
    tx_delivered_mstamp: Option<Instant>,
    tx_first_tx: Instant,
    tx_app_limited: bool,
    sacked: bool,
    lost: bool,
    /// A retransmission is outstanding (`TCPCB_SACKED_RETRANS`).
    retrans: bool,
    ever_retrans: bool,
}

impl SegRec {
    fn end(&self) -> u64 {
        self.seq + u64::from(self.len)
    }
}

/// A tail-loss probe owed (Linux `tcp_send_loss_probe`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Probe {
    /// One new segment, whatever the window says.
    NewData,
    /// The last segment sent, again.
    Retransmit(u64),
}

/// Rate-sample state being built during one ACK.
#[derive(Clone, Copy, Debug, Default)]
struct RateBuild {
    prior_delivered: u64,
    prior_mstamp: Option<Instant>,
    is_app_limited: bool,
    interval: Duration,
    /// Earliest and latest transmission among newly SACKed segments never retransmitted.
    first_sackt: Option<Instant>,
    last_sackt: Option<Instant>,
}

/// The sender of one subflow. See the [module docs](super) for how to drive it.
#[derive(Clone, Debug)]
pub struct TcpSender {
    cfg: TcpConfig,
    cc: Cc,
    rtt: RttEstimator,
    min_rtt: MinMax,
    state: CaState,
    /// `high_seq`: recovery or loss ends when everything below it is acknowledged.
    high_seq: u64,
    snd_una: u64,
    snd_nxt: u64,
    write_end: u64,
    segs: VecDeque<SegRec>,
    /// (stream end offset, write time) of writes not yet fully acknowledged.
    writes: VecDeque<(u64, Instant)>,
    packets_out: u32,
    sacked_out: u32,
    lost_out: u32,
    retrans_out: u32,
    /// Lost segments waiting for a retransmission.
    lost_pending: u32,
    /// No segment below this offset waits for a retransmission.
    retx_hint: u64,
    /// Original transmissions below this offset are decided by RACK (lost or delivered).
    rack_cursor: u64,
    /// Outstanding retransmissions in transmission order: (seq, time sent).
    retx_fifo: VecDeque<(u64, Instant)>,
    rack_mstamp: Option<Instant>,
    rack_end_seq: u64,
    rack_rtt: Duration,
    reo_deadline: Option<Instant>,
    rto_deadline: Option<Instant>,
    /// Tail-loss probe timer.
    tlp_deadline: Option<Instant>,
    /// A probe the timer asked for, not yet sent.
    probe: Option<Probe>,
    /// `tlp_high_seq`: `snd_nxt` when the outstanding probe went out.
    tlp_high_seq: Option<u64>,
    /// Whether the outstanding probe was a retransmission.
    tlp_retrans: bool,
    // Proportional rate reduction (RFC 6937, Linux `tcp_cwnd_reduction`).
    prior_cwnd: u32,
    prr_delivered: u32,
    prr_out: u32,
    backoff: u32,
    // tcp_rate.c
    delivered: u64,
    delivered_mstamp: Instant,
    first_tx_mstamp: Instant,
    app_limited: u64,
    rate_delivered: u64,
    rate_interval: Duration,
    // cwnd validation (tcp_cwnd_validate)
    is_cwnd_limited: bool,
    max_packets_out: u32,
    cwnd_usage_seq: u64,
    /// Last time data was sent (`lsndtime`).
    lsndtime: Instant,
    /// Earliest time pacing allows the next segment.
    next_send_at: Instant,
    prev_sack: [(u64, u64); super::MAX_SACK_BLOCKS],
    prev_sack_len: usize,
    stats: SenderStats,
}

impl TcpSender {
    /// A sender with nothing written, connected at `now`. `cfg` should pass
    /// [`TcpConfig::check`]; out-of-range values are clamped (an MSS or initial window of
    /// at least 1), not rejected.
    pub fn new(cfg: TcpConfig, now: Instant) -> Self {
        let mut cfg = cfg;
        cfg.mss = cfg.mss.max(1);
        TcpSender {
            cc: Cc::new(&cfg),
            rtt: RttEstimator::new(cfg.rto_initial, cfg.rto_min, cfg.rto_max),
            min_rtt: MinMax::new_min(),
            cfg,
            state: CaState::Open,
            high_seq: 0,
            snd_una: 0,
            snd_nxt: 0,
            write_end: 0,
            segs: VecDeque::new(),
            writes: VecDeque::new(),
            packets_out: 0,
            sacked_out: 0,
            lost_out: 0,
            retrans_out: 0,
            lost_pending: 0,
            retx_hint: 0,
            rack_cursor: 0,
            retx_fifo: VecDeque::new(),
            rack_mstamp: None,
            rack_end_seq: 0,
            rack_rtt: Duration::ZERO,
            reo_deadline: None,
            rto_deadline: None,
            tlp_deadline: None,
            probe: None,
            tlp_high_seq: None,
            tlp_retrans: false,
            prior_cwnd: 0,
            prr_delivered: 0,
            prr_out: 0,
            backoff: 0,
            delivered: 0,
            delivered_mstamp: now,
            first_tx_mstamp: now,
            app_limited: 0,
            rate_delivered: 0,
            rate_interval: Duration::ZERO,
            is_cwnd_limited: false,
            max_packets_out: 0,
            cwnd_usage_seq: 0,
            lsndtime: now,
            next_send_at: now,
            prev_sack: [(0, 0); super::MAX_SACK_BLOCKS],
            prev_sack_len: 0,
            stats: SenderStats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &TcpConfig {
        &self.cfg
    }

    /// Counters since creation.
    pub fn stats(&self) -> SenderStats {
        self.stats
    }

    /// Bytes written and not yet sent.
    pub fn notsent_bytes(&self) -> u64 {
        self.write_end - self.snd_nxt
    }

    /// Bytes written and not yet cumulatively acknowledged.
    pub fn queued_bytes(&self) -> u64 {
        self.write_end - self.snd_una
    }

    /// Stream offset below which everything is acknowledged (total bytes acknowledged).
    pub fn bytes_acked(&self) -> u64 {
        self.snd_una
    }

    /// Total bytes the application wrote (the stream offset of the next write).
    pub fn bytes_written(&self) -> u64 {
        self.write_end
    }

    /// The retransmission timeout now, backed off (`tcpi_rto`).
    pub fn rto(&self) -> Duration {
        self.rtt.rto(self.backoff)
    }

    /// The slow-start threshold, segments (`tcpi_snd_ssthresh`; `None` while unset, as before
    /// any loss and always with BBR).
    pub fn ssthresh_segments(&self) -> Option<u32> {
        let s = self.cc.ssthresh();
        (s != u32::MAX).then_some(s)
    }

    /// Congestion window in bytes.
    pub fn cwnd_bytes(&self) -> u64 {
        u64::from(self.cc.cwnd()) * u64::from(self.cfg.mss)
    }

    /// The pacing rate, when the controller paces (BBR always, CUBIC with
    /// [`TcpConfig::pace_cubic`]).
    pub fn pacing_rate(&self) -> Option<Bandwidth> {
        self.cc.pacing_rate().map(Bandwidth::from_bytes_per_sec)
    }

    /// Segments in flight as Linux counts them (`tcp_packets_in_flight`).
    pub fn in_flight_segments(&self) -> u32 {
        (self.packets_out - self.sacked_out - self.lost_out) + self.retrans_out
    }

    /// Bytes the application may write now: room in the send buffer, and while
    /// `TCP_NOTSENT_LOWAT` is set, up to that many bytes written and not yet sent.
    pub fn writable(&self) -> u64 {
        let room = self.cfg.sndbuf.saturating_sub(self.queued_bytes());
        match self.cfg.notsent_lowat {
            Some(lowat) => room.min(lowat.saturating_sub(self.notsent_bytes())),
            None => room,
        }
    }

    /// Queue up to `n` bytes written by the application at `now`; returns how many were
    /// taken (at most [`TcpSender::writable`]).
    pub fn write(&mut self, now: Instant, n: u64) -> u64 {
        let n = n.min(self.writable());
        if n == 0 {
            return 0;
        }
        self.write_end += n;
        self.stats.bytes_written += n;
        match self.writes.back_mut() {
            Some(last) if last.1 == now => last.0 = self.write_end,
            _ => self.writes.push_back((self.write_end, now)),
        }
        n
    }

    fn paced(&self) -> bool {
        self.cc.pacing_rate().is_some()
    }

    fn has_data(&self) -> bool {
        self.lost_pending > 0 || self.write_end > self.snd_nxt
    }

    fn cwnd_open(&self) -> bool {
        self.in_flight_segments() < self.cc.cwnd()
    }

    /// When the next segment may go out: `None` while there is nothing to send or the
    /// congestion window is full (an ACK changes that); otherwise the time pacing allows it,
    /// which may be at or before the current time (send now).
    pub fn next_transmit_time(&self) -> Option<Instant> {
        if self.probe.is_some() {
            return Some(self.lsndtime);
        }
        if !self.has_data() || !self.cwnd_open() {
            return None;
        }
        Some(if self.paced() {
            self.next_send_at
        } else {
            self.lsndtime
        })
    }

    /// The next segment the window and pacing allow at `now`, retransmissions first.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Segment> {
        if let Some(probe) = self.probe.take() {
            return Some(self.send_probe(now, probe));
        }
        if !self.has_data() {
            self.check_app_limited();
            return None;
        }
        if !self.cwnd_open() {
            self.cwnd_validate(true);
            return None;
        }
        if self.paced() && now < self.next_send_at {
            return None;
        }
        let seg = if self.lost_pending > 0 {
            self.retransmit(now)
        } else {
            let seg = self.send_new(now);
            self.schedule_tlp(now);
            seg
        };
        self.lsndtime = now;
        if let Some(rate) = self.cc.pacing_rate() {
            let start = self.next_send_at.max(now);
            self.next_send_at =
                start + Bandwidth::from_bytes_per_sec(rate.max(1)).time_to_send(u64::from(seg.len));
        }
        self.stats.segments_sent += 1;
        if self.state == CaState::Recovery {
            self.prr_out += 1;
        }
        let limited = !self.cwnd_open();
        self.cwnd_validate(limited);
        Some(seg)
    }

    /// Linux `tcp_send_loss_probe`, the part after the timer: send the probe.
    fn send_probe(&mut self, now: Instant, probe: Probe) -> Segment {
        let seg = match probe {
            Probe::NewData => {
                self.tlp_retrans = false;
                self.send_new(now)
            }
            Probe::Retransmit(seq) => {
                let idx = self.index_of(seq);
                self.rate_snapshot(now, idx);
                let s = &mut self.segs[idx];
                s.retrans = true;
                s.ever_retrans = true;
                s.sent = now;
                let (seq, len) = (s.seq, s.len);
                self.retrans_out += 1;
                self.retx_fifo.push_back((seq, now));
                self.stats.bytes_retransmitted += u64::from(len);
                self.stats.segments_retransmitted += 1;
                self.tlp_retrans = true;
                Segment {
                    seq,
                    len,
                    retransmission: true,
                    sent_at: now,
                }
            }
        };
        self.stats.tail_loss_probes += 1;
        self.stats.segments_sent += 1;
        self.tlp_high_seq = Some(self.snd_nxt);
        self.lsndtime = now;
        self.rto_deadline = Some(now + self.rtt.rto(self.backoff));
        seg
    }

    /// Linux `tcp_schedule_loss_probe`: arm the probe timer at 2·srtt (plus the minimum RTO
    /// when one segment is out, for a delayed ACK), never after the RTO.
    fn schedule_tlp(&mut self, now: Instant) {
        self.tlp_deadline = None;
        if !self.cfg.tail_loss_probe
            || self.packets_out == 0
            || self.state != CaState::Open
            || !self.rtt.has_sample()
            || (self.cwnd_open() && self.write_end > self.snd_nxt)
        {
            return;
        }
        let extra = if self.packets_out == 1 {
            self.cfg.rto_min
        } else {
            Duration::from_millis(2)
        };
        let srtt = self.rtt.srtt();
        let mut at = now + srtt.saturating_add(srtt).saturating_add(extra);
        if let Some(rto) = self.rto_deadline {
            if rto > now {
                at = at.min(rto);
            }
        }
        self.tlp_deadline = Some(at);
    }

    /// The probe timer fired.
    fn on_tlp_timer(&mut self, now: Instant) {
        self.tlp_deadline = None;
        if self.tlp_high_seq.is_some() || self.packets_out == 0 || self.state != CaState::Open {
            self.rto_deadline = Some(now + self.rtt.rto(self.backoff));
            return;
        }
        if self.write_end > self.snd_nxt {
            self.probe = Some(Probe::NewData);
        } else if let Some(last) = self.segs.back().filter(|s| !s.sacked) {
            self.probe = Some(Probe::Retransmit(last.seq));
        } else {
            self.rto_deadline = Some(now + self.rtt.rto(self.backoff));
        }
    }

    /// Index of the segment holding `seq` (`segs.len()` when none is at or after it).
    fn index_of(&self, seq: u64) -> usize {
        if seq <= self.snd_una {
            return 0;
        }
        if seq >= self.snd_nxt {
            return self.segs.len();
        }
        self.segs.partition_point(|s| s.end() <= seq)
    }

    fn rate_snapshot(&mut self, now: Instant, idx: usize) {
        if self.packets_out == 0 {
            self.first_tx_mstamp = now;
            self.delivered_mstamp = now;
        }
        let (delivered, mstamp, first, app) = (
            self.delivered,
            self.delivered_mstamp,
            self.first_tx_mstamp,
            self.app_limited != 0,
        );
        let s = &mut self.segs[idx];
        s.tx_delivered = delivered;
        s.tx_delivered_mstamp = Some(mstamp);
        s.tx_first_tx = first;
        s.tx_app_limited = app;
    }

    fn send_new(&mut self, now: Instant) -> Segment {
        if self.packets_out == 0 {
            let idle = now - self.lsndtime;
            if self.cfg.slow_start_after_idle
                && !self.cc.owns_window()
                && self.stats.segments_sent > 0
                && idle > self.rtt.rto(self.backoff)
            {
                self.cc.restart_after_idle(
                    idle,
                    self.rtt.rto(self.backoff),
                    self.cfg.initial_window_segments,
                );
            }
            self.cc.on_tx_start(now, idle, self.app_limited != 0);
        }
        let len = (self.write_end - self.snd_nxt).min(u64::from(self.cfg.mss)) as u32;
        let seq = self.snd_nxt;
        self.segs.push_back(SegRec {
            seq,
            len,
            sent: now,
            first_sent: now,
            tx_delivered: 0,
            tx_delivered_mstamp: None,
            tx_first_tx: now,
            tx_app_limited: false,
            sacked: false,
            lost: false,
            retrans: false,
            ever_retrans: false,
        });
        let idx = self.segs.len() - 1;
        self.rate_snapshot(now, idx);
        if self.packets_out == 0 {
            self.rto_deadline = Some(now + self.rtt.rto(self.backoff));
        }
        self.packets_out += 1;
        self.snd_nxt += u64::from(len);
        self.stats.bytes_sent += u64::from(len);
        Segment {
            seq,
            len,
            retransmission: false,
            sent_at: now,
        }
    }

    fn retransmit(&mut self, now: Instant) -> Segment {
        let mut idx = self.index_of(self.retx_hint);
        loop {
            let s = &self.segs[idx];
            if s.lost && !s.retrans && !s.sacked {
                break;
            }
            idx += 1;
        }
        self.rate_snapshot(now, idx);
        let s = &mut self.segs[idx];
        s.retrans = true;
        s.ever_retrans = true;
        s.sent = now;
        let (seq, len) = (s.seq, s.len);
        self.retx_hint = seq + u64::from(len);
        self.retrans_out += 1;
        self.lost_pending -= 1;
        self.retx_fifo.push_back((seq, now));
        self.stats.bytes_retransmitted += u64::from(len);
        self.stats.segments_retransmitted += 1;
        // Retransmitting the head restarts the timer (Linux `tcp_xmit_retransmit_queue`).
        if self.rto_deadline.is_none() || seq == self.snd_una {
            self.rto_deadline = Some(now + self.rtt.rto(self.backoff));
        }
        Segment {
            seq,
            len,
            retransmission: true,
            sent_at: now,
        }
    }

    /// Linux `tcp_rate_check_app_limited`.
    fn check_app_limited(&mut self) {
        if self.write_end - self.snd_nxt < u64::from(self.cfg.mss)
            && self.cwnd_open()
            && self.lost_pending == 0
        {
            self.app_limited = (self.delivered + u64::from(self.in_flight_segments())).max(1);
        }
    }

    /// Linux `tcp_cwnd_validate`.
    fn cwnd_validate(&mut self, is_cwnd_limited: bool) {
        if self.snd_una >= self.cwnd_usage_seq
            || is_cwnd_limited
            || (!self.is_cwnd_limited && self.packets_out > self.max_packets_out)
        {
            self.is_cwnd_limited = is_cwnd_limited;
            self.max_packets_out = self.packets_out;
            self.cwnd_usage_seq = self.snd_nxt;
        }
    }

    /// Linux `tcp_is_cwnd_limited`.
    fn cwnd_limited(&self) -> bool {
        let cwnd = self.cc.cwnd();
        if cwnd < self.cc.ssthresh() {
            return cwnd < 2 * self.max_packets_out;
        }
        self.is_cwnd_limited
    }

    /// `tcp_rate_skb_delivered` for the segment at `idx`, and RACK's advance.
    fn seg_delivered(&mut self, now: Instant, idx: usize, rb: &mut RateBuild) {
        let s = self.segs[idx];
        if let Some(mstamp) = s.tx_delivered_mstamp {
            if rb.prior_mstamp.is_none() || s.tx_delivered > rb.prior_delivered {
                rb.prior_delivered = s.tx_delivered;
                rb.prior_mstamp = Some(mstamp);
                rb.is_app_limited = s.tx_app_limited;
                self.first_tx_mstamp = s.sent;
                rb.interval = s.sent - s.tx_first_tx;
            }
        }
        self.segs[idx].tx_delivered_mstamp = None;
        // tcp_rack_advance
        let rtt = now - s.sent;
        if s.ever_retrans && self.min_rtt_opt().is_some_and(|m| rtt < m) {
            return;
        }
        self.rack_rtt = rtt;
        let after = match self.rack_mstamp {
            None => true,
            Some(m) => s.sent > m || (s.sent == m && s.end() > self.rack_end_seq),
        };
        if after {
            self.rack_mstamp = Some(s.sent);
            self.rack_end_seq = s.end();
        }
    }

    fn min_rtt_opt(&self) -> Option<Duration> {
        let m = self.min_rtt.get();
        (m != u64::MAX).then(|| Duration::from_micros(m))
    }

    /// Mark `[start, end)` SACKed, skipping what the previous ACK's blocks covered.
    fn sack_range(&mut self, now: Instant, start: u64, end: u64, rb: &mut RateBuild) -> u32 {
        let mut newly = 0;
        let mut cur = start.max(self.snd_una);
        let end = end.min(self.snd_nxt);
        while cur < end {
            // Skip a range the previous ACK already reported.
            if let Some(&(_, pe)) = self.prev_sack[..self.prev_sack_len]
                .iter()
                .find(|&&(ps, pe)| ps <= cur && cur < pe)
            {
                cur = pe;
                continue;
            }
            let stop = self.prev_sack[..self.prev_sack_len]
                .iter()
                .filter(|&&(ps, _)| ps > cur)
                .map(|&(ps, _)| ps)
                .min()
                .unwrap_or(end)
                .min(end);
            let mut idx = self.index_of(cur);
            while idx < self.segs.len() && self.segs[idx].end() <= stop {
                let s = self.segs[idx];
                if s.seq >= cur && !s.sacked {
                    if !s.ever_retrans {
                        rb.first_sackt = Some(rb.first_sackt.map_or(s.sent, |t| t.min(s.sent)));
                        rb.last_sackt = Some(rb.last_sackt.map_or(s.sent, |t| t.max(s.sent)));
                    }
                    self.seg_delivered(now, idx, rb);
                    let s = &mut self.segs[idx];
                    s.sacked = true;
                    self.sacked_out += 1;
                    if s.lost {
                        self.lost_out -= 1;
                        if !s.retrans {
                            self.lost_pending -= 1;
                        }
                    }
                    if s.retrans {
                        self.retrans_out -= 1;
                    }
                    s.lost = false;
                    s.retrans = false;
                    newly += 1;
                }
                idx += 1;
            }
            cur = stop;
        }
        newly
    }

    fn mark_lost(&mut self, idx: usize) {
        let s = &mut self.segs[idx];
        if s.sacked {
            return;
        }
        if !s.lost {
            // Never marked lost, or a tail-loss probe's copy of a segment not marked lost.
            s.lost = true;
            self.lost_out += 1;
        } else if !s.retrans {
            return;
        }
        if s.retrans {
            s.retrans = false;
            self.retrans_out -= 1;
        }
        self.lost_pending += 1;
        self.retx_hint = self.retx_hint.min(s.seq);
    }

    /// RACK reordering window (`tcp_rack_reo_wnd` with no reordering seen).
    fn reo_wnd(&self) -> Duration {
        if self.state != CaState::Open || self.sacked_out >= DUP_THRESH {
            return Duration::ZERO;
        }
        let m = self.min_rtt_opt().unwrap_or(Duration::ZERO);
        let w = Duration::from_micros(m.as_micros() / 4);
        w.min(self.rtt.srtt())
    }

    /// RACK loss detection; returns the segments newly marked lost.
    fn rack_detect(&mut self, now: Instant) -> u32 {
        self.reo_deadline = None;
        let Some(rack_t) = self.rack_mstamp else {
            return 0;
        };
        let reo = self.reo_wnd();
        let before = self.lost_pending;
        let mut earliest: Option<Instant> = None;
        // Retransmissions, in the order they were sent.
        while let Some(&(seq, sent)) = self.retx_fifo.front() {
            let idx = self.index_of(seq);
            let live = idx < self.segs.len()
                && self.segs[idx].seq == seq
                && self.segs[idx].retrans
                && self.segs[idx].sent == sent;
            if !live {
                self.retx_fifo.pop_front();
                continue;
            }
            let end = self.segs[idx].end();
            if !(rack_t > sent || (rack_t == sent && self.rack_end_seq > end)) {
                break;
            }
            let deadline = sent + self.rack_rtt + reo;
            if deadline <= now {
                self.mark_lost(idx);
                self.retx_fifo.pop_front();
            } else {
                earliest = Some(deadline);
                break;
            }
        }
        // First transmissions, in sequence (and so sending) order.
        self.rack_cursor = self.rack_cursor.max(self.snd_una);
        let mut idx = self.index_of(self.rack_cursor);
        while idx < self.segs.len() {
            let s = self.segs[idx];
            if !(s.sacked || s.lost) {
                if !(rack_t > s.first_sent
                    || (rack_t == s.first_sent && self.rack_end_seq > s.end()))
                {
                    break;
                }
                let deadline = s.first_sent + self.rack_rtt + reo;
                if deadline > now {
                    earliest = Some(earliest.map_or(deadline, |e| e.min(deadline)));
                    break;
                }
                self.mark_lost(idx);
            }
            self.rack_cursor = s.end();
            idx += 1;
        }
        self.reo_deadline = earliest;
        self.lost_pending.saturating_sub(before)
    }

    /// Take one acknowledgement received at `now`.
    pub fn on_ack(&mut self, now: Instant, ack: &Ack) {
        let prior_in_flight = self.in_flight_segments();
        let mut rb = RateBuild::default();
        let cum = ack.cumulative.min(self.snd_nxt);
        // SACK blocks.
        let mut newly_sacked = 0;
        for &(s, e) in ack.sack_blocks() {
            if e <= s || e <= cum {
                continue;
            }
            newly_sacked += self.sack_range(now, s, e, &mut rb);
        }
        let sack_rtt = rb.first_sackt.map(|t| now - t);
        let sack_ca_rtt = rb.last_sackt.map(|t| now - t);
        let mut n = ack.sack_len as usize;
        n = n.min(super::MAX_SACK_BLOCKS);
        self.prev_sack[..n].copy_from_slice(&ack.sack[..n]);
        self.prev_sack_len = n;
        // Cumulative acknowledgement.
        // Transmission times of the first and last newly acknowledged segments never
        // retransmitted, and whether retransmitted data was acknowledged (Karn).
        let mut first_ackt: Option<Instant> = None;
        let mut last_ackt: Option<Instant> = None;
        let mut retrans_acked = false;
        let mut newly_acked = 0u32;
        let advanced = cum > self.snd_una;
        while let Some(front) = self.segs.front() {
            if front.end() > cum {
                break;
            }
            let s = *front;
            if !s.sacked {
                self.seg_delivered(now, 0, &mut rb);
                newly_acked += 1;
                if s.lost {
                    self.lost_out -= 1;
                    if !s.retrans {
                        self.lost_pending -= 1;
                    }
                }
                if s.retrans {
                    self.retrans_out -= 1;
                }
                if s.ever_retrans {
                    retrans_acked = true;
                } else {
                    first_ackt = first_ackt.or(Some(s.sent));
                    last_ackt = Some(s.sent);
                }
            } else {
                self.sacked_out -= 1;
            }
            self.packets_out -= 1;
            self.segs.pop_front();
        }
        if advanced {
            self.snd_una = cum;
            while self.writes.front().is_some_and(|w| w.0 <= cum) {
                self.writes.pop_front();
            }
        }
        self.retx_hint = self.retx_hint.max(self.snd_una);
        let delivered_now = newly_acked + newly_sacked;
        self.delivered += u64::from(delivered_now);
        // RTT as Linux `tcp_clean_rtx_queue` / `tcp_ack_update_rtt` with timestamps: from
        // segments never retransmitted (none if retransmitted data was cumulatively
        // acknowledged), else from the echoed timestamp.
        let (mut seq_rtt, mut ca_rtt) = match (first_ackt, last_ackt) {
            (Some(f), Some(l)) if !retrans_acked => (Some(now - f), Some(now - l)),
            _ => (None, None),
        };
        if sack_ca_rtt.is_some() {
            ca_rtt = sack_ca_rtt;
        }
        let rs_rtt = ca_rtt;
        seq_rtt = seq_rtt.or(sack_rtt);
        if seq_rtt.is_none() && advanced {
            if let Some(echo) = ack.ts_echo {
                seq_rtt = Some(now - echo);
                ca_rtt = seq_rtt;
            }
        }
        if let Some(r) = seq_rtt {
            self.rtt.sample(r, self.snd_una, self.snd_nxt);
            self.backoff = 0;
        }
        if let Some(r) = ca_rtt {
            self.min_rtt
                .update(MIN_RTT_WINDOW.as_micros(), us(now), r.as_micros().max(1));
        }
        // Timers.
        if advanced {
            self.rto_deadline = if self.packets_out > 0 {
                Some(now + self.rtt.rto(self.backoff))
            } else {
                None
            };
        }
        // Linux `tcp_process_tlp_ack`.
        if let Some(h) = self.tlp_high_seq {
            if cum >= h {
                if !self.tlp_retrans || ack.dsack {
                    self.tlp_high_seq = None;
                } else if cum > h {
                    // The probe repaired a loss: reduce the window once (CWR).
                    self.tlp_high_seq = None;
                    if self.state == CaState::Open {
                        self.cc.on_cwr();
                    }
                } else if !advanced && newly_sacked == 0 {
                    self.tlp_high_seq = None;
                }
            }
        }
        // Loss detection and recovery state.
        let losses = self.rack_detect(now);
        if self.state != CaState::Open && self.snd_una >= self.high_seq {
            if self.state == CaState::Recovery {
                // tcp_end_cwnd_reduction
                let ssthresh = self.cc.ssthresh();
                if ssthresh != u32::MAX {
                    self.cc.set_cwnd(ssthresh);
                }
            }
            self.state = CaState::Open;
        }
        if self.state == CaState::Open && self.lost_out > 0 {
            self.enter_recovery(now);
        }
        // tcp_set_xmit_timer: a probe if one fits, else the RTO as armed above.
        if advanced || newly_sacked > 0 {
            self.schedule_tlp(now);
        }
        // tcp_rate_gen
        if self.app_limited != 0 && self.delivered > self.app_limited {
            self.app_limited = 0;
        }
        if delivered_now > 0 {
            self.delivered_mstamp = now;
        }
        let mut rs = RateSample {
            prior_delivered: rb.prior_delivered,
            delivered: None,
            interval: None,
            is_app_limited: rb.is_app_limited,
            acked_sacked: delivered_now,
            losses,
            prior_in_flight,
            rtt: rs_rtt,
        };
        if let Some(prior_mstamp) = rb.prior_mstamp {
            let d = self.delivered - rb.prior_delivered;
            let interval = rb.interval.max(now - prior_mstamp);
            let too_short = self.min_rtt_opt().is_some_and(|m| interval < m);
            if !too_short && !interval.is_zero() {
                rs.delivered = Some(d);
                rs.interval = Some(interval);
                if !rs.is_app_limited
                    || u128::from(d) * u128::from(self.rate_interval.as_micros())
                        >= u128::from(self.rate_delivered) * u128::from(interval.as_micros())
                {
                    self.rate_delivered = d;
                    self.rate_interval = interval;
                }
            }
        }
        let ev = AckEvent {
            now,
            rs,
            state: self.state,
            in_flight: self.in_flight_segments(),
            delivered: self.delivered,
            cwnd_limited: self.cwnd_limited(),
            data_acked: advanced,
            min_rtt: self.min_rtt_opt(),
            srtt: self.rtt.has_sample().then(|| self.rtt.srtt()),
            snd_una: self.snd_una,
            snd_nxt: self.snd_nxt,
        };
        self.cc.on_ack(&ev);
        if self.state == CaState::Recovery && !self.cc.owns_window() {
            self.prr(delivered_now, losses, advanced);
        }
    }

    /// Linux `tcp_cwnd_reduction`: during recovery, send in proportion to what is delivered
    /// until in flight falls to ssthresh, then up to it.
    fn prr(&mut self, newly_acked_sacked: u32, newly_lost: u32, advanced: bool) {
        if newly_acked_sacked == 0 || self.prior_cwnd == 0 {
            return;
        }
        let ssthresh = i64::from(self.cc.ssthresh().min(u32::MAX / 2));
        let in_flight = i64::from(self.in_flight_segments());
        let delta = ssthresh - in_flight;
        self.prr_delivered += newly_acked_sacked;
        let (delivered, out) = (i64::from(self.prr_delivered), i64::from(self.prr_out));
        let mut sndcnt = if delta < 0 {
            let prior = i64::from(self.prior_cwnd);
            (ssthresh * delivered + prior - 1) / prior - out
        } else {
            let mut n = (delivered - out).max(i64::from(newly_acked_sacked));
            if advanced && newly_lost == 0 {
                n += 1;
            }
            n.min(delta)
        };
        // The first retransmission goes out at once.
        sndcnt = sndcnt.max(if self.prr_out > 0 { 0 } else { 1 });
        self.cc.set_cwnd((in_flight + sndcnt.max(0)) as u32);
    }

    /// The earliest pending timer (retransmission, tail-loss probe or RACK reordering), if any.
    pub fn timeout(&self) -> Option<Instant> {
        fn earlier(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
            match (a, b) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, y) => x.or(y),
            }
        }
        earlier(
            earlier(self.rto_deadline, self.reo_deadline),
            self.tlp_deadline,
        )
    }

    /// Run the timers due at `now`.
    pub fn on_timeout(&mut self, now: Instant) {
        if self.reo_deadline.is_some_and(|d| d <= now) {
            let losses = self.rack_detect(now);
            if losses > 0 && self.state == CaState::Open {
                self.enter_recovery(now);
            }
        }
        if self.rto_deadline.is_some_and(|d| d <= now) {
            self.on_rto(now);
        } else if self.tlp_deadline.is_some_and(|d| d <= now) {
            self.on_tlp_timer(now);
        }
    }

    fn enter_recovery(&mut self, now: Instant) {
        // tcp_init_cwnd_reduction
        self.prior_cwnd = self.cc.cwnd();
        self.prr_delivered = 0;
        self.prr_out = 0;
        self.state = CaState::Recovery;
        self.high_seq = self.snd_nxt;
        self.stats.recoveries += 1;
        self.tlp_deadline = None;
        self.tlp_high_seq = None;
        self.cc.on_enter_recovery(now);
    }

    /// `tcp_retransmit_timer` / `tcp_enter_loss`.
    fn on_rto(&mut self, now: Instant) {
        if self.packets_out == 0 {
            self.rto_deadline = None;
            return;
        }
        self.stats.rtos += 1;
        // Linux `tcp_enter_loss` recomputes ssthresh only when leaving the Open state.
        let first = self.state == CaState::Open;
        for i in 0..self.segs.len() {
            let s = &mut self.segs[i];
            if s.sacked {
                continue;
            }
            if !s.lost {
                s.lost = true;
                self.lost_out += 1;
                self.lost_pending += 1;
            } else if s.retrans {
                self.lost_pending += 1;
            }
            if s.retrans {
                s.retrans = false;
                self.retrans_out -= 1;
            }
        }
        self.retx_fifo.clear();
        self.tlp_deadline = None;
        self.tlp_high_seq = None;
        self.probe = None;
        self.retx_hint = self.snd_una;
        self.rack_cursor = self.snd_nxt;
        self.reo_deadline = None;
        self.state = CaState::Loss;
        self.high_seq = self.snd_nxt;
        self.cc.on_rto(self.in_flight_segments(), first);
        self.backoff += 1;
        self.rto_deadline = Some(now + self.rtt.rto(self.backoff));
        // The head goes out again at once, whatever pacing says.
        self.next_send_at = self.next_send_at.min(now);
    }

    /// The `TCP_INFO` reading at `now`.
    pub fn info(&self, now: Instant) -> TcpInfoSample {
        let mss = u64::from(self.cfg.mss);
        let delivery_rate = if self.rate_interval.is_zero() {
            Bandwidth::ZERO
        } else {
            Bandwidth::from_bytes_over(self.rate_delivered * mss, self.rate_interval)
        };
        let unacked_age = if self.write_end > self.snd_una {
            self.writes
                .front()
                .map_or(Duration::ZERO, |&(_, t)| now - t)
        } else {
            Duration::ZERO
        };
        TcpInfoSample {
            srtt: self.rtt.srtt(),
            rttvar: self.rtt.rttvar(),
            min_rtt: self.min_rtt_opt(),
            cwnd_bytes: self.cwnd_bytes(),
            mss_bytes: self.cfg.mss,
            unacked_bytes: u64::from(self.packets_out) * mss,
            notsent_bytes: self.notsent_bytes(),
            delivery_rate,
            rto_backoff: self.backoff,
            bytes_acked: self.snd_una,
            unacked_age,
        }
    }

    /// Re-derive the scoreboard's counters and compare (tests only).
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        let (mut sacked, mut lost, mut retrans, mut pending) = (0, 0, 0, 0);
        let mut expect = self.snd_una;
        for s in &self.segs {
            assert_eq!(s.seq, expect, "scoreboard not contiguous");
            expect = s.end();
            sacked += u32::from(s.sacked);
            lost += u32::from(s.lost);
            retrans += u32::from(s.retrans);
            pending += u32::from(s.lost && !s.retrans && !s.sacked);
            assert!(!(s.sacked && (s.lost || s.retrans)));
            if s.lost && !s.retrans {
                assert!(
                    s.seq >= self.retx_hint,
                    "pending retransmission below the hint"
                );
            }
        }
        assert_eq!(expect, self.snd_nxt);
        assert_eq!(self.segs.len(), self.packets_out as usize);
        assert_eq!(
            (sacked, lost, retrans, pending),
            (
                self.sacked_out,
                self.lost_out,
                self.retrans_out,
                self.lost_pending
            )
        );
        assert!(self.write_end >= self.snd_nxt && self.snd_nxt >= self.snd_una);
    }
}
