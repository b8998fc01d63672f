//! How fast the TCP subflow model runs: one backlogged subflow over a 50 Mbit/s bottleneck
//! (60 ms RTT, droptail queue of one BDP) for 10 minutes of virtual time, per congestion
//! controller. Prints simulated segments per wall-clock second.
//!
//! `cargo run --release -p polycorn-sim --example tcp_bench`

use std::collections::VecDeque;
use std::time::Instant as WallClock;

use polycorn_sim::tcp::{
    Ack, AckPolicy, CongestionControl, Duration, Instant, Segment, TcpConfig, TcpReceiver,
    TcpSender,
};

const RATE_BYTES_PER_SEC: u64 = 50 * 125_000;
const ONE_WAY: Duration = Duration::from_millis(30);
const RIDE: Instant = Instant::from_millis(600_000);

struct Run {
    segments: u64,
    delivered: u64,
    drops: u64,
    retransmitted: u64,
    rtos: u64,
    srtt: Duration,
}

fn run(cc: CongestionControl) -> Run {
    let cfg = TcpConfig {
        cc,
        ..TcpConfig::default()
    };
    let mut tx = TcpSender::new(cfg, Instant::ZERO);
    let mut rx = TcpReceiver::new(AckPolicy::Delayed, cfg.mss);
    let queue_limit = RATE_BYTES_PER_SEC * 2 * ONE_WAY.as_micros() / 1_000_000;
    let mut link_free_at = Instant::ZERO;
    let mut data: VecDeque<(Instant, Segment)> = VecDeque::new();
    let mut acks: VecDeque<(Instant, Ack)> = VecDeque::new();
    let mut now = Instant::ZERO;
    let (mut segments, mut drops) = (0u64, 0u64);
    loop {
        let n = tx.writable();
        tx.write(now, n);
        while let Some(seg) = tx.poll_transmit(now) {
            segments += 1;
            let backlog = (link_free_at - now).as_micros() * RATE_BYTES_PER_SEC / 1_000_000;
            if backlog + u64::from(seg.len) > queue_limit {
                drops += 1;
            } else {
                let us = (u64::from(seg.len) * 1_000_000).div_ceil(RATE_BYTES_PER_SEC);
                link_free_at = link_free_at.max(now) + Duration::from_micros(us);
                data.push_back((link_free_at + ONE_WAY, seg));
            }
            let n = tx.writable();
            tx.write(now, n);
        }
        let next = [
            data.front().map(|d| d.0),
            acks.front().map(|a| a.0),
            tx.timeout(),
            rx.timeout(),
            tx.next_transmit_time()
                .map(|t| t.max(now + Duration::from_micros(1))),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(t) = next.filter(|&t| t <= RIDE) else {
            break;
        };
        now = now.max(t);
        while data.front().is_some_and(|d| d.0 <= now) {
            let (_, seg) = data.pop_front().expect("front checked");
            if let Some(ack) = rx.on_segment(now, &seg) {
                acks.push_back((now + ONE_WAY, ack));
            }
        }
        if let Some(ack) = rx.on_timeout(now) {
            acks.push_back((now + ONE_WAY, ack));
        }
        while acks.front().is_some_and(|a| a.0 <= now) {
            let (_, ack) = acks.pop_front().expect("front checked");
            tx.on_ack(now, &ack);
        }
        if tx.timeout().is_some_and(|d| d <= now) {
            tx.on_timeout(now);
        }
    }
    let st = tx.stats();
    Run {
        segments,
        delivered: rx.delivered(),
        drops,
        retransmitted: st.segments_retransmitted,
        rtos: st.rtos,
        srtt: tx.info(now).srtt,
    }
}

fn main() {
    for cc in [CongestionControl::Cubic, CongestionControl::Bbr] {
        let start = WallClock::now();
        let r = run(cc);
        let wall = start.elapsed().as_secs_f64();
        println!(
            "{cc:?}: {} segments in {wall:.3} s = {:.0} segments/s; goodput {:.2} Mbit/s, \
             {} drops, {} retransmitted, {} RTOs, final srtt {}",
            r.segments,
            r.segments as f64 / wall,
            r.delivered as f64 * 8.0 / RIDE.as_micros() as f64,
            r.drops,
            r.retransmitted,
            r.rtos,
            r.srtt,
        );
    }
}
