//! Tests of the subflow model over a tiny driver: a fixed-rate bottleneck with a droptail
//! queue and propagation delay one way, a pure delay the other, and a backlogged or scripted
//! application.

use std::collections::VecDeque;

use super::*;

/// What the test does to a segment entering the bottleneck.
type Dropper = Box<dyn FnMut(Instant, &Segment) -> bool>;

struct Pipe {
    tx: TcpSender,
    rx: TcpReceiver,
    /// Bottleneck rate, bytes per second.
    rate: u64,
    /// One-way propagation delay (each direction).
    delay: Duration,
    /// Droptail queue limit, bytes waiting behind the segment in service.
    queue_limit: u64,
    link_free_at: Instant,
    data: VecDeque<(Instant, Segment)>,
    acks: VecDeque<(Instant, Ack)>,
    dropper: Dropper,
    /// Application: write whenever it can (true) or only what `to_write` says.
    backlogged: bool,
    to_write: u64,
    now: Instant,
    drops: u64,
    /// (time, srtt, cwnd segments) after every ACK, when recording.
    record: bool,
    log: Vec<(Instant, u64, u64)>,
}

impl Pipe {
    fn new(cfg: TcpConfig, mbit: u64, delay_ms: u64, queue_limit: u64) -> Pipe {
        Pipe {
            tx: TcpSender::new(cfg, Instant::ZERO),
            rx: TcpReceiver::new(AckPolicy::Delayed, cfg.mss),
            rate: mbit * 125_000,
            delay: Duration::from_millis(delay_ms),
            queue_limit,
            link_free_at: Instant::ZERO,
            data: VecDeque::new(),
            acks: VecDeque::new(),
            dropper: Box::new(|_, _| false),
            backlogged: true,
            to_write: 0,
            now: Instant::ZERO,
            drops: 0,
            record: false,
            log: Vec::new(),
        }
    }

    fn bdp_bytes(&self) -> u64 {
        self.rate * 2 * self.delay.as_micros() / 1_000_000
    }

    fn enqueue(&mut self, seg: Segment) {
        let now = self.now;
        if (self.dropper)(now, &seg) {
            self.drops += 1;
            return;
        }
        let backlog_us = (self.link_free_at - now).as_micros();
        let backlog_bytes = backlog_us * self.rate / 1_000_000;
        if backlog_bytes + u64::from(seg.len) > self.queue_limit {
            self.drops += 1;
            return;
        }
        let start = self.link_free_at.max(now);
        let tx_us = (u64::from(seg.len) * 1_000_000).div_ceil(self.rate);
        self.link_free_at = start + Duration::from_micros(tx_us);
        self.data.push_back((self.link_free_at + self.delay, seg));
    }

    fn app_write(&mut self) {
        if self.backlogged {
            let n = self.tx.writable();
            self.tx.write(self.now, n);
        } else if self.to_write > 0 {
            let n = self.tx.write(self.now, self.to_write);
            self.to_write -= n;
        }
    }

    /// Run until `end`.
    fn run_until(&mut self, end: Instant) {
        loop {
            self.app_write();
            while let Some(seg) = self.tx.poll_transmit(self.now) {
                self.enqueue(seg);
                self.app_write();
            }
            let mut next: Option<Instant> = None;
            let mut consider = |t: Option<Instant>| {
                if let Some(t) = t {
                    next = Some(next.map_or(t, |n: Instant| n.min(t)));
                }
            };
            consider(self.data.front().map(|d| d.0));
            consider(self.acks.front().map(|a| a.0));
            consider(self.tx.timeout());
            consider(self.rx.timeout());
            consider(
                self.tx
                    .next_transmit_time()
                    .map(|t| t.max(self.now + Duration::from_micros(1))),
            );
            let Some(t) = next else { break };
            if t > end {
                break;
            }
            self.now = self.now.max(t);
            let now = self.now;
            while self.data.front().is_some_and(|d| d.0 <= now) {
                let (_, seg) = self.data.pop_front().unwrap();
                if let Some(ack) = self.rx.on_segment(now, &seg) {
                    self.acks.push_back((now + self.delay, ack));
                }
            }
            if let Some(ack) = self.rx.on_timeout(now) {
                self.acks.push_back((now + self.delay, ack));
            }
            while self.acks.front().is_some_and(|a| a.0 <= now) {
                let (_, ack) = self.acks.pop_front().unwrap();
                self.tx.on_ack(now, &ack);
                self.tx.check_invariants();
                if self.record {
                    let i = self.tx.info(now);
                    self.log
                        .push((now, i.srtt.as_micros(), i.cwnd_bytes / 1448));
                }
            }
            if self.tx.timeout().is_some_and(|d| d <= now) {
                self.tx.on_timeout(now);
                self.tx.check_invariants();
            }
        }
        self.now = self.now.max(end);
    }

    fn goodput_mbit(&self, from_bytes: u64, secs: f64) -> f64 {
        (self.rx.delivered() - from_bytes) as f64 * 8.0 / secs / 1e6
    }
}

fn secs(s: u64) -> Instant {
    Instant::from_secs_for_test(s)
}

trait FromSecs {
    fn from_secs_for_test(s: u64) -> Instant;
}
impl FromSecs for Instant {
    fn from_secs_for_test(s: u64) -> Instant {
        Instant::from_millis(s * 1000)
    }
}

fn cubic() -> TcpConfig {
    TcpConfig::default()
}

fn bbr() -> TcpConfig {
    TcpConfig {
        cc: CongestionControl::Bbr,
        ..TcpConfig::default()
    }
}

#[test]
fn lossless_pipe_reaches_the_bottleneck_rate() {
    // 20 Mbit/s, 20 ms RTT, a queue of one BDP.
    for cfg in [cubic(), bbr()] {
        let mut p = Pipe::new(cfg, 20, 10, 50_000);
        p.queue_limit = 4 * p.bdp_bytes();
        p.run_until(secs(2));
        let before = p.rx.delivered();
        p.run_until(secs(10));
        let g = p.goodput_mbit(before, 8.0);
        assert!(g > 19.0 && g <= 20.0, "{:?}: goodput {g} Mbit/s", cfg.cc);
        // The only losses are queue overflows; nothing is retransmitted spuriously.
        assert!(
            p.tx.stats().segments_retransmitted <= p.drops,
            "{:?}: {:?}, {} drops",
            cfg.cc,
            p.tx.stats(),
            p.drops
        );
    }
}

#[test]
fn slow_start_doubles_per_rtt_from_iw10() {
    // A fast link with a deep queue: nothing but the window limits the sender.
    let mut p = Pipe::new(cubic(), 1000, 50, 100 << 20);
    p.rx = TcpReceiver::new(AckPolicy::EverySegment, 1448);
    assert_eq!(p.tx.info(Instant::ZERO).cwnd_bytes, 10 * 1448);
    // Each round trip (100 ms) sends twice what the one before did: 10, 20, 40, 80.
    let mut sent = Vec::new();
    let mut last = 0;
    for k in 1..=4 {
        p.run_until(Instant::from_millis(100 * k - 50));
        let s = p.tx.stats().segments_sent;
        sent.push(s - last);
        last = s;
    }
    assert_eq!(sent[0], 10);
    assert_eq!(&sent[1..], &[20, 40, 80]);
    assert_eq!(p.tx.info(p.now).cwnd_bytes, 80 * 1448);
    assert_eq!(p.drops, 0);
}

#[test]
fn a_single_loss_is_repaired_by_sack_recovery_without_rto() {
    let mut dropped = false;
    // A queue deep enough that only the test's drop loses anything.
    let mut p = Pipe::new(cubic(), 20, 10, 10 << 20);
    p.dropper = Box::new(move |_, s| {
        if !dropped && s.seq >= 500 * 1448 && !s.retransmission {
            dropped = true;
            return true;
        }
        false
    });
    p.run_until(secs(3));
    let st = p.tx.stats();
    assert_eq!(p.drops, 1);
    assert_eq!(st.segments_retransmitted, 1, "{st:?}");
    assert_eq!(st.recoveries, 1);
    assert_eq!(st.rtos, 0);
    let i = p.tx.info(p.now);
    assert_eq!(i.rto_backoff, 0);
    assert!(p.rx.delivered() > 600 * 1448);
}

#[test]
fn a_blackout_backs_off_exponentially_and_recovers() {
    // 10 Mbit/s, 40 ms RTT; the path drops everything from 2 s to 5 s.
    let mut p = Pipe::new(cubic(), 10, 20, 50_000);
    p.dropper = Box::new(|now, _| now >= secs(2) && now < secs(5));
    p.run_until(secs(2));
    let i = p.tx.info(p.now);
    // Linux: RTO = srtt + max(4·mdev, 200 ms) on a steady path is about srtt + 200 ms.
    let rto_us = i.srtt.as_micros() + 200_000;
    let mut fired = Vec::new();
    let mut last = 0;
    while p.now < secs(5) {
        let t = p.tx.timeout().unwrap();
        p.run_until(t);
        let r = p.tx.stats().rtos;
        if r > last {
            fired.push((p.now, p.tx.info(p.now).rto_backoff));
            last = r;
        }
    }
    assert!(fired.len() >= 3, "{fired:?}");
    for (k, w) in fired.windows(2).enumerate() {
        let gap = (w[1].0 - w[0].0).as_micros();
        let expect = rto_us << (k + 1);
        assert!(
            gap.abs_diff(expect) <= expect / 5,
            "gap {gap} µs after RTO {k}, expected about {expect} ({fired:?})"
        );
        assert_eq!(w[1].1, w[0].1 + 1);
    }
    assert_eq!(fired[0].1, 1);
    // Afterwards the subflow recovers: back-off resets and data flows at the link rate again.
    p.run_until(secs(12));
    let before = p.rx.delivered();
    p.run_until(secs(16));
    assert_eq!(p.tx.info(p.now).rto_backoff, 0);
    let g = p.goodput_mbit(before, 4.0);
    assert!(g > 9.0, "goodput after the blackout {g} Mbit/s");
}

#[test]
fn rto_is_srtt_plus_the_200ms_minimum() {
    // A steady 2 ms RTT: Linux's RTO is srtt + max(4·mdev, rto_min) = 202 ms, not 3·srtt.
    let mut tx = TcpSender::new(cubic(), Instant::ZERO);
    assert_eq!(tx.info(Instant::ZERO).rto_backoff, 0);
    let mut t = Instant::ZERO;
    for _ in 0..50 {
        tx.write(t, 1448);
        let s = tx.poll_transmit(t).unwrap();
        // Before any sample the RTO is the initial 1 s.
        if s.seq == 0 {
            assert_eq!(tx.timeout(), Some(Instant::from_millis(1000)));
        }
        let acked_at = t + Duration::from_millis(2);
        tx.on_ack(acked_at, &Ack::cumulative(s.end()));
        assert_eq!(tx.timeout(), None);
        t += Duration::from_millis(10);
    }
    tx.write(t, 1448);
    tx.poll_transmit(t).unwrap();
    let i = tx.info(t);
    assert_eq!(i.srtt, Duration::from_millis(2));
    assert_eq!(tx.timeout(), Some(t + Duration::from_millis(202)));
    // Each timeout doubles it.
    tx.on_timeout(t + Duration::from_millis(202));
    assert_eq!(tx.info(t).rto_backoff, 1);
    assert_eq!(tx.timeout(), Some(t + Duration::from_millis(202 + 404)));
}

#[test]
fn slow_start_after_idle_resets_cwnd_only_when_enabled() {
    for enabled in [true, false] {
        let cfg = TcpConfig {
            slow_start_after_idle: enabled,
            ..cubic()
        };
        let mut p = Pipe::new(cfg, 20, 10, 1 << 20);
        p.backlogged = false;
        p.to_write = 2 << 20;
        p.run_until(secs(2));
        let cwnd_before = p.tx.cwnd_bytes();
        assert!(cwnd_before > 40 * 1448, "{cwnd_before}");
        // Idle for 3 s (many RTOs), then write again.
        p.run_until(secs(5));
        p.to_write = 1 << 20;
        p.app_write();
        let seg = p.tx.poll_transmit(p.now);
        assert!(seg.is_some());
        let after = p.tx.cwnd_bytes();
        if enabled {
            assert_eq!(after, 10 * 1448);
        } else {
            assert_eq!(after, cwnd_before);
        }
    }
}

#[test]
fn config_check_names_the_bad_field() {
    assert_eq!(TcpConfig::default().check(), Ok(()));
    let bad = TcpConfig {
        mss: 0,
        ..TcpConfig::default()
    };
    assert_eq!(bad.check(), Err(TcpConfigError::Mss(0)));
    assert!(bad.check().unwrap_err().to_string().contains("mss 0"));
    let bad = TcpConfig {
        rto_min: Duration::from_secs(2),
        ..TcpConfig::default()
    };
    assert!(matches!(bad.check(), Err(TcpConfigError::RtoBounds { .. })));
    let bad = TcpConfig {
        notsent_lowat: Some(0),
        ..TcpConfig::default()
    };
    assert_eq!(bad.check(), Err(TcpConfigError::NotsentLowat));
}

#[test]
fn notsent_lowat_limits_writable() {
    let cfg = TcpConfig {
        notsent_lowat: Some(16 * 1024),
        ..cubic()
    };
    let mut tx = TcpSender::new(cfg, Instant::ZERO);
    assert_eq!(tx.writable(), 16 * 1024);
    assert_eq!(tx.write(Instant::ZERO, 100_000), 16 * 1024);
    assert_eq!(tx.writable(), 0);
    // Sending drains not-sent bytes: room opens again.
    let s = tx.poll_transmit(Instant::ZERO).unwrap();
    assert_eq!(s.len, 1448);
    assert_eq!(tx.writable(), 1448);
    assert_eq!(tx.info(Instant::ZERO).notsent_bytes, 16 * 1024 - 1448);
    // Without the option, only the send buffer limits.
    let mut tx = TcpSender::new(cubic(), Instant::ZERO);
    assert_eq!(tx.write(Instant::ZERO, 10 << 20), 4 << 20);
    assert_eq!(tx.writable(), 0);
}

#[test]
fn delivery_rate_is_the_bottleneck_rate() {
    for cfg in [cubic(), bbr()] {
        let mut p = Pipe::new(cfg, 30, 15, 200_000);
        p.run_until(secs(5));
        let r = p.tx.info(p.now).delivery_rate.as_mbit_per_sec();
        assert!(r > 27.0 && r < 31.0, "{:?}: delivery rate {r}", cfg.cc);
    }
}

#[test]
fn cubic_and_bbr_fill_a_droptail_bottleneck() {
    // 50 Mbit/s, 60 ms RTT, a queue of half a BDP.
    for cfg in [cubic(), bbr()] {
        let mut p = Pipe::new(cfg, 50, 30, 0);
        p.queue_limit = p.bdp_bytes() / 2;
        p.run_until(secs(5));
        let before = p.rx.delivered();
        p.run_until(secs(35));
        let g = p.goodput_mbit(before, 30.0);
        assert!(g > 42.0, "{:?}: goodput {g} Mbit/s", cfg.cc);
        let st = p.tx.stats();
        if cfg.cc == CongestionControl::Cubic {
            // CUBIC fills the queue until it drops, then recovers without timeouts.
            assert!(st.recoveries > 0, "{st:?}");
        }
        assert_eq!(st.rtos, 0, "{:?}: {st:?}", cfg.cc);
    }
}

#[test]
fn bbr_keeps_the_queue_short() {
    let mut p = Pipe::new(bbr(), 50, 30, 10 << 20);
    p.record = true;
    p.run_until(secs(20));
    let srtts: Vec<u64> = p
        .log
        .iter()
        .filter(|e| e.0 > secs(10))
        .map(|e| e.1)
        .collect();
    let avg = srtts.iter().sum::<u64>() / srtts.len() as u64;
    // Base RTT 60 ms; BBR's cwnd of 2 BDP bounds the queue at one BDP (60 ms).
    assert!(avg < 110_000, "BBR srtt {avg} µs");
    let mut c = Pipe::new(cubic(), 50, 30, 10 << 20);
    c.record = true;
    c.run_until(secs(20));
    let cubic_srtt = c.tx.info(c.now).srtt.as_micros();
    assert!(cubic_srtt > avg, "CUBIC srtt {cubic_srtt} vs BBR {avg}");
}

#[test]
fn info_reports_linux_fields() {
    let mut p = Pipe::new(cubic(), 20, 25, 1 << 20);
    p.run_until(secs(3));
    let i = p.tx.info(p.now);
    assert_eq!(i.mss_bytes, 1448);
    assert!(i.min_rtt.unwrap() >= Duration::from_millis(50));
    assert!(i.min_rtt.unwrap() < Duration::from_millis(52));
    assert!(i.srtt >= i.min_rtt.unwrap());
    assert_eq!(i.bytes_acked, p.tx.bytes_acked());
    assert!(i.unacked_bytes > 0 && i.unacked_bytes % 1448 == 0);
    assert!(i.unacked_age.as_micros() >= i.min_rtt.unwrap().as_micros() / 2);
    // Nothing written, nothing outstanding: the age is zero.
    let mut q = Pipe::new(cubic(), 20, 25, 1 << 20);
    q.backlogged = false;
    q.to_write = 100_000;
    q.run_until(secs(2));
    let i = q.tx.info(q.now);
    assert_eq!(i.unacked_age, Duration::ZERO);
    assert_eq!(i.unacked_bytes, 0);
    assert_eq!(i.bytes_acked, 100_000);
    assert_eq!(q.rx.delivered(), 100_000);
}

#[test]
fn random_losses_are_all_repaired() {
    // Drop one segment in 50 by a fixed pattern (a hash of seq and time), both CCs.
    for cfg in [cubic(), bbr()] {
        let mut p = Pipe::new(cfg, 20, 20, 100_000);
        let mut k = 0u64;
        p.dropper = Box::new(move |_, _| {
            k = k
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (k >> 33) % 50 == 0
        });
        p.backlogged = false;
        p.to_write = 4 << 20;
        p.run_until(secs(60));
        assert_eq!(
            p.rx.delivered(),
            4 << 20,
            "{:?}: {:?}",
            cfg.cc,
            p.tx.stats()
        );
        assert_eq!(p.tx.bytes_acked(), 4 << 20);
        assert_eq!(p.tx.in_flight_segments(), 0);
    }
}

#[test]
fn same_inputs_give_the_same_run() {
    let run = |cfg: TcpConfig| {
        let mut p = Pipe::new(cfg, 40, 20, 80_000);
        p.record = true;
        let mut k = 7u64;
        p.dropper = Box::new(move |_, _| {
            k = k
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (k >> 33) % 300 == 0
        });
        p.run_until(secs(10));
        (p.log, p.tx.stats(), p.tx.info(p.now))
    };
    for cfg in [cubic(), bbr()] {
        let a = run(cfg);
        let b = run(cfg);
        assert!(a.0.len() > 1000);
        assert_eq!(a, b);
    }
}

#[test]
fn bbr_is_exempt_from_slow_start_after_idle() {
    let mut p = Pipe::new(bbr(), 20, 10, 1 << 20);
    p.backlogged = false;
    p.to_write = 4 << 20;
    p.run_until(secs(3));
    let before = p.tx.cwnd_bytes();
    p.run_until(secs(6));
    p.to_write = 1 << 20;
    p.app_write();
    assert!(p.tx.poll_transmit(p.now).is_some());
    assert_eq!(p.tx.cwnd_bytes(), before);
    assert!(before > 10 * 1448);
}

#[test]
fn bbr_paces_segments_at_its_rate() {
    let mut p = Pipe::new(bbr(), 20, 10, 1 << 20);
    p.run_until(secs(5));
    // In ProbeBW the pacing rate is near the bottleneck rate: consecutive segments are spaced
    // by about a segment's serialisation time at 20 Mbit/s (579 µs), not sent in a burst.
    let mut tx = p.tx.clone();
    let mut now = p.now;
    let mut gaps = Vec::new();
    let mut last = None;
    while gaps.len() < 5 {
        let Some(t) = tx.next_transmit_time() else {
            break;
        };
        now = now.max(t);
        if tx.poll_transmit(now).is_some() {
            if let Some(l) = last {
                gaps.push((now - l).as_micros());
            }
            last = Some(now);
        }
    }
    assert!(!gaps.is_empty());
    for g in gaps {
        assert!((400..=800).contains(&g), "gap {g} µs");
    }
}

#[test]
fn app_limited_sender_reports_a_rate_no_higher_than_it_sends() {
    // The application writes 10 segments every 100 ms on a 50 Mbit/s path: 1.16 Mbit/s.
    let mut p = Pipe::new(cubic(), 50, 10, 1 << 20);
    p.backlogged = false;
    for k in 0..30 {
        p.to_write += 10 * 1448;
        p.run_until(Instant::from_millis(100 * (k + 1)));
    }
    let i = p.tx.info(p.now);
    assert!(!i.delivery_rate.is_zero());
    // Linux keeps app-limited samples only when they beat the last: the estimate is a burst's
    // rate, below the bottleneck; the window stays where the application left it.
    assert!(i.delivery_rate.as_mbit_per_sec() <= 50.0, "{i:?}");
    // Linux's slow start grows the window only while it is below twice the most ever in
    // flight (`tcp_is_cwnd_limited`): to 20 segments, no further.
    assert_eq!(i.cwnd_bytes, 20 * 1448, "cwnd grows only when it limits");
}

#[test]
fn receiver_acks_like_linux() {
    let mut rx = TcpReceiver::new(AckPolicy::Delayed, 1000);
    let seg = |seq: u64| Segment {
        seq,
        len: 1000,
        retransmission: false,
        sent_at: Instant::ZERO,
    };
    let t = Instant::from_millis(1);
    // Quick ACKs for the first 16 segments.
    for k in 0..16 {
        assert!(rx.on_segment(t, &seg(k * 1000)).is_some());
    }
    // Then one ACK per two full segments.
    assert!(rx.on_segment(t, &seg(16_000)).is_none());
    assert_eq!(rx.timeout(), Some(t + Duration::from_millis(40)));
    let a = rx.on_segment(t, &seg(17_000)).unwrap();
    assert_eq!(a.cumulative, 18_000);
    assert_eq!(rx.timeout(), None);
    // A lone segment is ACKed by the 40 ms timer.
    assert!(rx.on_segment(t, &seg(18_000)).is_none());
    assert_eq!(rx.on_timeout(t + Duration::from_millis(39)), None);
    let a = rx.on_timeout(t + Duration::from_millis(40)).unwrap();
    assert_eq!(a.cumulative, 19_000);
    // Out of order: immediate ACKs with SACK blocks, the newest first.
    let a = rx.on_segment(t, &seg(21_000)).unwrap();
    assert_eq!(
        (a.cumulative, a.sack_blocks()),
        (19_000, &[(21_000, 22_000)][..])
    );
    let a = rx.on_segment(t, &seg(24_000)).unwrap();
    assert_eq!(a.sack_blocks(), &[(24_000, 25_000), (21_000, 22_000)]);
    let a = rx.on_segment(t, &seg(22_000)).unwrap();
    assert_eq!(a.sack_blocks(), &[(21_000, 23_000), (24_000, 25_000)]);
    // Filling the first hole: cumulative jumps over the merged range.
    let a = rx.on_segment(t, &seg(19_000)).unwrap();
    assert_eq!(a.cumulative, 20_000);
    let a = rx.on_segment(t, &seg(20_000)).unwrap();
    assert_eq!(
        (a.cumulative, a.sack_blocks()),
        (23_000, &[(24_000, 25_000)][..])
    );
    let a = rx.on_segment(t, &seg(23_000)).unwrap();
    assert_eq!((a.cumulative, a.sack_len), (25_000, 0));
    assert_eq!(rx.delivered(), 25_000);
    // A copy of data already held is D-SACKed at once.
    let a = rx.on_segment(t, &seg(24_000)).unwrap();
    assert!(a.dsack);
    // In delayed-ACK mode a lone segment waits; after a second without data, quick ACKs
    // resume.
    assert!(rx.on_segment(t, &seg(25_000)).is_none());
    let later = t + Duration::from_millis(1500);
    assert!(rx.on_segment(later, &seg(26_000)).is_some_and(|a| !a.dsack));
    assert!(rx.on_segment(later, &seg(27_000)).is_some());
}

#[test]
fn seeded_loss_patterns_deliver_everything() {
    // Bursty and random losses over many seeds; the scoreboard's counters are re-derived
    // after every event (`check_invariants`).
    for seed in 0..24u64 {
        let cfg = TcpConfig {
            cc: if seed % 2 == 0 {
                CongestionControl::Cubic
            } else {
                CongestionControl::Bbr
            },
            seed,
            pace_cubic: seed % 3 == 0,
            tail_loss_probe: seed % 5 != 0,
            slow_start_after_idle: seed % 7 != 0,
            ..TcpConfig::default()
        };
        let mut p = Pipe::new(cfg, 5 + seed % 40, 5 + seed % 30, 30_000 + seed * 5_000);
        if seed % 4 == 1 {
            p.rx = TcpReceiver::new(AckPolicy::EverySegment, cfg.mss);
        }
        let mut k = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        // Outages of up to 300 ms start with probability 1/400 per segment; 1 % of the
        // other segments are lost at random.
        let mut outage_until = Instant::ZERO;
        p.dropper = Box::new(move |now, _| {
            k = k
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if now < outage_until {
                return true;
            }
            match (k >> 33) % 400 {
                0 => {
                    outage_until = now + Duration::from_millis((k >> 20) % 300);
                    true
                }
                1..=4 => true,
                _ => false,
            }
        });
        p.backlogged = false;
        p.to_write = 3 << 20;
        p.run_until(secs(120));
        assert_eq!(p.rx.delivered(), 3 << 20, "seed {seed}: {:?}", p.tx.stats());
        assert_eq!(p.tx.in_flight_segments(), 0, "seed {seed}");
        assert_eq!(p.tx.timeout(), None, "seed {seed}");
    }
}

#[test]
fn a_lost_tail_is_found_by_the_loss_probe_not_the_rto() {
    for tlp in [true, false] {
        let cfg = TcpConfig {
            tail_loss_probe: tlp,
            ..cubic()
        };
        let mut p = Pipe::new(cfg, 20, 10, 1 << 20);
        p.backlogged = false;
        // Warm up (RTT samples), then a 30-segment burst whose last 3 segments are lost.
        p.to_write = 10 * 1448;
        p.run_until(secs(1));
        p.to_write = 30 * 1448;
        let tail = 10 * 1448 + 27 * 1448;
        p.dropper = Box::new(move |_, s| !s.retransmission && s.seq >= tail);
        // The probe goes out 2·srtt after the last ACK, about 150 ms after the burst began,
        // the retransmissions one per ACK (proportional rate reduction from an empty pipe);
        // the RTO would fire about 380 ms after the burst began.
        p.run_until(secs(1) + Duration::from_millis(300));
        let st = p.tx.stats();
        // Each probe (the last segment again) is SACKed: RACK marks the rest lost.
        if tlp {
            assert_eq!(st.tail_loss_probes, 1, "{st:?}");
            assert_eq!(st.rtos, 0, "{st:?}");
            assert_eq!(st.recoveries, 1, "{st:?}");
            assert_eq!(p.rx.delivered(), 40 * 1448);
        } else {
            assert_eq!(st.tail_loss_probes, 0);
            assert!(
                p.rx.delivered() < 40 * 1448,
                "without a probe the RTO is still pending"
            );
        }
        p.run_until(secs(3));
        assert_eq!(p.rx.delivered(), 40 * 1448);
        assert_eq!(p.tx.stats().rtos, u64::from(!tlp));
    }
}

#[test]
fn a_probe_of_a_segment_that_was_not_lost_is_dsacked() {
    // Nothing is lost, but two short segments wait for the receiver's 40 ms delayed ACK on a
    // 4 ms RTT path: the probe (2·srtt + 2 ms) resends the last one, the receiver D-SACKs the
    // copy, and the window stays.
    let cfg = TcpConfig {
        slow_start_after_idle: false,
        ..cubic()
    };
    let mut p = Pipe::new(cfg, 20, 2, 1 << 20);
    p.backlogged = false;
    p.to_write = 20 * 1448;
    p.run_until(secs(1));
    let cwnd = p.tx.cwnd_bytes();
    for _ in 0..2 {
        p.tx.write(p.now, 500);
        let t = p.now + Duration::from_micros(100);
        p.run_until(t);
    }
    p.run_until(secs(2));
    assert_eq!(p.rx.delivered(), 20 * 1448 + 1000);
    let st = p.tx.stats();
    assert_eq!(
        (st.tail_loss_probes, st.rtos, st.recoveries),
        (1, 0, 0),
        "{st:?}"
    );
    assert_eq!(p.tx.cwnd_bytes(), cwnd);
}

#[test]
fn fast_recovery_reduces_proportionally_to_ssthresh() {
    // Ten segments out at t0, the first lost: three SACKs mark it lost (RACK with no
    // reordering window once three are SACKed), recovery begins with ssthresh = 0.7 × 10.
    let t0 = Instant::from_millis(5);
    let mut tx = TcpSender::new(cubic(), t0);
    tx.write(t0, 30 * 1448);
    for k in 0..10 {
        assert_eq!(tx.poll_transmit(t0).map(|s| s.seq), Some(k * 1448));
    }
    assert!(tx.poll_transmit(t0).is_none(), "the initial window is full");
    let t1 = t0 + Duration::from_millis(10);
    let sack = |k: u64| Ack {
        sack: [(1448, k * 1448), (0, 0), (0, 0)],
        sack_len: 1,
        ..Ack::cumulative(0)
    };
    for k in 2..=3 {
        tx.on_ack(t1, &sack(k));
        assert_eq!(tx.stats().recoveries, 0);
    }
    tx.on_ack(t1, &sack(4));
    assert_eq!(tx.stats().recoveries, 1);
    // In flight 10 - 3 SACKed - 1 lost = 6; PRR lets one segment out: the retransmission.
    assert_eq!(tx.cwnd_bytes(), 7 * 1448);
    let r = tx.poll_transmit(t1).unwrap();
    assert!(r.retransmission && r.seq == 0);
    assert!(tx.poll_transmit(t1).is_none());
    // Each further SACK lets one new segment out while in flight stays at ssthresh.
    for k in 5..=10 {
        tx.on_ack(t1, &sack(k));
        let s = tx.poll_transmit(t1).unwrap();
        assert!(!s.retransmission);
        assert!(tx.poll_transmit(t1).is_none());
        assert_eq!(tx.in_flight_segments(), 7);
    }
    tx.check_invariants();
    // Everything acknowledged: recovery ends with the window at ssthresh.
    let t2 = t1 + Duration::from_millis(10);
    tx.on_ack(t2, &Ack::cumulative(16 * 1448));
    assert_eq!(tx.cwnd_bytes(), 7 * 1448);
    assert_eq!(tx.info(t2).bytes_acked, 16 * 1448);
    tx.check_invariants();
}

#[test]
fn over_a_polycorn_link_with_an_outage() {
    use polycorn_link::{DeliveryTrace, EnqueueOutcome, Link, LinkConfig, Outages, QueueLimit};
    use std::collections::HashMap;

    // 24 Mbit/s, 20 ms each way, a 100-packet droptail queue, dark from 3 s to 4.5 s.
    let trace = DeliveryTrace::from_rate_series(&[(1000, 24_000_000)]).unwrap();
    let link_config = LinkConfig {
        delay: polycorn_link::DelaySeries::constant(20_000),
        queue: QueueLimit::Packets(100),
        outages: Outages::new(vec![(3000, 4500)]).unwrap(),
        ..LinkConfig::new(trace)
    };
    for cc in [CongestionControl::Cubic, CongestionControl::Bbr] {
        let cfg = TcpConfig {
            cc,
            ..TcpConfig::default()
        };
        let mut tx = TcpSender::new(cfg, Instant::ZERO);
        let mut rx = TcpReceiver::new(AckPolicy::Delayed, cfg.mss);
        let mut link = Link::new(link_config.clone()).unwrap();
        let mut on_link: HashMap<u64, Segment> = HashMap::new();
        let mut acks: VecDeque<(Instant, Ack)> = VecDeque::new();
        let mut next_id = 0u64;
        let mut now = Instant::ZERO;
        let end = secs(12);
        let mut max_age_in_outage = Duration::ZERO;
        let mut delivered_at_3s = 0;
        let mut delivered_at_6s = 0;
        while now < end {
            let n = tx.writable();
            tx.write(now, n);
            while let Some(seg) = tx.poll_transmit(now) {
                if link.enqueue(now.as_micros(), next_id, seg.len + 52) == EnqueueOutcome::Enqueued
                {
                    on_link.insert(next_id, seg);
                }
                next_id += 1;
            }
            while let Some((id, _)) = link.poll_delivered(now.as_micros()) {
                let seg = on_link.remove(&id).unwrap();
                if let Some(ack) = rx.on_segment(now, &seg) {
                    acks.push_back((now + Duration::from_millis(20), ack));
                }
            }
            if let Some(ack) = rx.on_timeout(now) {
                acks.push_back((now + Duration::from_millis(20), ack));
            }
            while acks.front().is_some_and(|a| a.0 <= now) {
                let (_, ack) = acks.pop_front().unwrap();
                tx.on_ack(now, &ack);
            }
            if tx.timeout().is_some_and(|t| t <= now) {
                tx.on_timeout(now);
            }
            if now >= secs(3) && now < Instant::from_millis(4500) {
                max_age_in_outage = max_age_in_outage.max(tx.info(now).unacked_age);
            }
            if now <= secs(3) {
                delivered_at_3s = rx.delivered();
            }
            if now <= secs(6) {
                delivered_at_6s = rx.delivered();
            }

            let next = [
                link.next_event_us().map(Instant::from_micros),
                acks.front().map(|a| a.0),
                tx.timeout(),
                rx.timeout(),
                tx.next_transmit_time(),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(end);
            now = next.max(now + Duration::from_micros(1)).min(end);
        }
        let st = tx.stats();
        let rate_before = delivered_at_3s as f64 * 8.0 / 3e6;
        let rate_after = (rx.delivered() - delivered_at_6s) as f64 * 8.0 / 6e6;
        assert!(
            rate_before > 18.0,
            "{cc:?}: {rate_before} Mbit/s before the outage"
        );
        assert!(
            rate_after > 20.0,
            "{cc:?}: {rate_after} Mbit/s after the outage"
        );
        assert!(st.rtos >= 2, "{cc:?}: {st:?}");
        assert!(
            max_age_in_outage > Duration::from_millis(1400),
            "{max_age_in_outage:?}"
        );
        assert_eq!(tx.info(now).rto_backoff, 0, "{cc:?}");
        assert!(rx.delivered() >= tx.bytes_acked());
        // Segments queued before the outage and delivered after it, behind their own
        // retransmissions, give long RTT samples through the echoed timestamp, never short
        // ones.
        let min_rtt = tx.info(now).min_rtt.unwrap();
        assert!(min_rtt >= Duration::from_millis(40), "{cc:?}: {min_rtt:?}");
    }
}

#[test]
fn receiver_echoes_the_timestamp_at_the_left_edge() {
    let mut rx = TcpReceiver::new(AckPolicy::Delayed, 1000);
    let seg = |seq: u64, ms: u64| Segment {
        seq,
        len: 1000,
        retransmission: false,
        sent_at: Instant::from_millis(ms),
    };
    let t = Instant::from_millis(100);
    for k in 0..16 {
        rx.on_segment(t, &seg(k * 1000, k));
    }
    // Two segments per ACK: the echo is the first one's (the one at the left edge).
    assert!(rx.on_segment(t, &seg(16_000, 16)).is_none());
    let a = rx.on_segment(t, &seg(17_000, 17)).unwrap();
    assert_eq!(a.ts_echo, Some(Instant::from_millis(16)));
    // Out of order: the echo stays until the hole is filled, then is the filler's.
    let a = rx.on_segment(t, &seg(19_000, 19)).unwrap();
    assert_eq!(a.ts_echo, Some(Instant::from_millis(16)));
    let a = rx.on_segment(t, &seg(18_000, 30)).unwrap();
    assert_eq!(
        (a.cumulative, a.ts_echo),
        (20_000, Some(Instant::from_millis(30)))
    );
}

#[test]
fn hystart_leaves_slow_start_before_a_deep_queue_fills() {
    // 50 Mbit/s, 60 ms RTT (a BDP of 259 segments), a 10 MB queue: without HyStart slow start
    // would double until the queue overflowed, seconds of delay later.
    let mut p = Pipe::new(cubic(), 50, 30, 10 << 20);
    p.run_until(secs(3));
    let i = p.tx.info(p.now);
    assert_eq!(p.drops, 0);
    let cwnd = i.cwnd_bytes / 1448;
    assert!((100..=400).contains(&cwnd), "cwnd {cwnd} segments");
    assert!(i.srtt < Duration::from_millis(100), "srtt {:?}", i.srtt);
}
