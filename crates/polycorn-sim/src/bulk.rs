//! One saturating TCP download over each path on its own, sampled the way `ss` samples a
//! socket: the simulated counterpart of `polycorn testbed calibrate`, which measures the
//! emulated carriers with kernel TCP. The same [`tcp`](crate::tcp) model that carries the
//! subflows of a ride sends here, with no session, scheduler or relay in between, so the
//! calibration statistics (goodput windows, RTT quartiles, CT/RT, RTO episodes) can be put
//! beside the emulated ones.

use polycorn_link::link::LinkConfig;
use polycorn_link::trip_links::PathLinks;
use polycorn_sched::path::TcpInfoSample;

use crate::tcp::{SenderStats, TcpConfig, TcpConfigError};
use crate::transport::{Conn, Packet};
use crate::wire::Wire;

/// What to run.
#[derive(Debug, Clone, Copy)]
pub struct BulkConfig {
    /// The sender's and receiver's TCP.
    pub tcp: TcpConfig,
    /// How long the downloads run, µs from the start of the links.
    pub run_us: u64,
    /// Period of the sender samples, µs.
    pub sample_us: u64,
    /// Width of the receiver goodput bins, µs.
    pub bin_us: u64,
}

/// One sample of a sender.
#[derive(Debug, Clone, Copy)]
pub struct BulkSample {
    /// When, µs from the start.
    pub t_us: u64,
    /// The `TCP_INFO`-equivalent reading.
    pub info: TcpInfoSample,
    /// Retransmission timeout, backed off.
    pub rto: polycorn_sched::time::Duration,
    /// Slow-start threshold, segments (`None` while unset).
    pub ssthresh_segments: Option<u32>,
    /// The sender's counters so far.
    pub stats: SenderStats,
}

/// What one path's download recorded.
#[derive(Debug, Clone, Default)]
pub struct BulkPath {
    /// Bytes the receiver read in order per bin (`bins[j]` covers `[j·bin, (j+1)·bin)`).
    pub bins: Vec<u64>,
    /// The sender, every `sample_us` from 0.
    pub samples: Vec<BulkSample>,
    /// The sender's counters at the end.
    pub stats: SenderStats,
}

/// Why a bulk run could not start.
#[derive(Debug, thiserror::Error)]
pub enum BulkError {
    /// The TCP configuration is unusable.
    #[error("TCP configuration: {0}")]
    Tcp(#[from] TcpConfigError),
    /// A link of the path is unusable.
    #[error("path {path} {direction}: {source}")]
    Link {
        /// Index of the path.
        path: usize,
        /// `uplink` or `downlink`.
        direction: &'static str,
        /// What is wrong with it.
        source: polycorn_link::link::LinkError,
    },
    /// A zero sample period or bin width.
    #[error("sample period and bin width must be positive")]
    ZeroPeriod,
}

/// Run one download per path of `links` (sender at the proxy's end, receiver at the relay's),
/// each alone on its path, for `cfg.run_us`.
pub fn run(links: &[PathLinks], cfg: &BulkConfig) -> Result<Vec<BulkPath>, BulkError> {
    cfg.tcp.check()?;
    if cfg.sample_us == 0 || cfg.bin_us == 0 {
        return Err(BulkError::ZeroPeriod);
    }
    links
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let wire = |c: &LinkConfig, direction| {
                Wire::new(c.clone()).map_err(|source| BulkError::Link {
                    path: i,
                    direction,
                    source,
                })
            };
            Ok(one(
                wire(&l.downlink, "downlink")?,
                wire(&l.uplink, "uplink")?,
                cfg,
            ))
        })
        .collect()
}

/// One path's download.
fn one(mut down: Wire<Packet>, mut up: Wire<Packet>, cfg: &BulkConfig) -> BulkPath {
    let mut tx = Conn::new(cfg.tcp, polycorn_sched::time::Instant::from_micros(0));
    let mut rx = Conn::new(cfg.tcp, polycorn_sched::time::Instant::from_micros(0));
    let mut out = BulkPath {
        bins: vec![0; cfg.run_us.div_ceil(cfg.bin_us) as usize],
        ..BulkPath::default()
    };
    let (mut now, mut next_sample, mut read) = (0u64, 0u64, 0u64);
    let mut arrived = Vec::new();
    while now < cfg.run_us {
        tx.on_timer(now);
        rx.on_timer(now);
        // Deliveries and what they set off, until nothing more is due now.
        loop {
            let room = tx.write_room();
            if room > 0 {
                tx.write(now, room);
            }
            let mut moved = false;
            while let Some(p) = tx.poll_packet(now) {
                let len = p.wire_len();
                down.send(now, len, p);
                moved = true;
            }
            while let Some(p) = rx.poll_packet(now) {
                let len = p.wire_len();
                up.send(now, len, p);
                moved = true;
            }
            down.deliver(now, &mut arrived);
            for (p, _) in arrived.drain(..) {
                rx.on_packet(now, p);
                moved = true;
            }
            up.deliver(now, &mut arrived);
            for (p, _) in arrived.drain(..) {
                tx.on_packet(now, p);
                moved = true;
            }
            if !moved {
                break;
            }
        }
        let got = rx.delivered();
        if got > read {
            out.bins[(now / cfg.bin_us) as usize] += got - read;
            read = got;
        }
        if now >= next_sample {
            out.samples.push(BulkSample {
                t_us: now,
                info: tx.info(now),
                rto: tx.rto(),
                ssthresh_segments: tx.ssthresh_segments(),
                stats: tx.stats(),
            });
            next_sample += cfg.sample_us;
        }
        let mut next = next_sample.min(cfg.run_us);
        for t in [
            down.next_event_us(),
            up.next_event_us(),
            tx.next_timer_us(),
            rx.next_timer_us(),
        ]
        .into_iter()
        .flatten()
        {
            next = next.min(t.max(now + 1));
        }
        now = next.max(now + 1);
    }
    out.stats = tx.stats();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use polycorn_link::trace::{DelaySeries, DeliveryTrace};

    fn constant(mbit: u64, one_way_ms: u64) -> LinkConfig {
        let mut c =
            LinkConfig::new(DeliveryTrace::from_rate_series(&[(1000, mbit * 1_000_000)]).unwrap());
        c.delay = DelaySeries::constant(one_way_ms * 1000);
        c
    }

    fn cfg(cc: crate::tcp::CongestionControl) -> BulkConfig {
        BulkConfig {
            tcp: TcpConfig {
                cc,
                ..TcpConfig::default()
            },
            run_us: 20_000_000,
            sample_us: 50_000,
            bin_us: 200_000,
        }
    }

    #[test]
    fn a_constant_path_is_filled_after_slow_start_and_sampled_on_time() {
        for cc in [
            crate::tcp::CongestionControl::Cubic,
            crate::tcp::CongestionControl::Bbr,
        ] {
            let links = [PathLinks {
                uplink: constant(10, 20),
                downlink: constant(10, 20),
            }];
            let r = run(&links, &cfg(cc)).unwrap();
            let p = &r[0];
            assert_eq!(p.bins.len(), 100);
            assert_eq!(p.samples.len(), 400, "{cc:?}");
            assert!(p
                .samples
                .windows(2)
                .all(|w| w[1].t_us - w[0].t_us == 50_000));
            // The last 10 s: within 10% of the 10 Mbit/s link (less its headers).
            let tail: u64 = p.bins[50..].iter().sum();
            let mbps = tail as f64 * 8.0 / 10e6;
            assert!((8.5..=10.0).contains(&mbps), "{cc:?}: {mbps:.2} Mbit/s");
            let srtt = p.samples.last().unwrap().info.srtt.as_secs_f64() * 1e3;
            assert!(srtt >= 40.0, "{cc:?}: srtt {srtt:.1} ms");
            assert!(p.stats.segments_sent > 10_000, "{cc:?}");
        }
    }

    /// A carrier that delivers in bursts (60 ms of data at once every 60 ms, 12 Mbit/s on
    /// average, over a 20 ms round trip): BBR's ACK-aggregation allowance keeps enough in
    /// flight to fill it, as Linux's does; a window of twice the bandwidth-delay product
    /// alone carried 3 Mbit/s here.
    #[test]
    fn bbr_fills_a_carrier_that_delivers_in_bursts() {
        const GAP_MS: u64 = 60;
        const GAPS: u64 = 1000 / GAP_MS;
        const ONE_WAY_MS: u64 = 10;
        let opportunities: Vec<u64> = (0..GAPS)
            .flat_map(|k| std::iter::repeat_n((k + 1) * GAP_MS - 1, GAP_MS as usize))
            .collect();
        let mut bursty =
            LinkConfig::new(DeliveryTrace::from_opportunities_ms(opportunities).unwrap());
        bursty.delay = DelaySeries::constant(ONE_WAY_MS * 1000);
        let links = [PathLinks {
            uplink: constant(12, ONE_WAY_MS),
            downlink: bursty,
        }];
        let r = run(&links, &cfg(crate::tcp::CongestionControl::Bbr)).unwrap();
        let tail: u64 = r[0].bins[50..].iter().sum();
        let mbps = tail as f64 * 8.0 / 10e6;
        assert!(mbps > 10.5, "{mbps:.2} Mbit/s of 12");
    }

    #[test]
    fn zero_periods_are_refused() {
        let mut c = cfg(crate::tcp::CongestionControl::Cubic);
        c.sample_us = 0;
        assert!(matches!(run(&[], &c), Err(BulkError::ZeroPeriod)));
    }
}
