//! Acceptance tests for the link model: hand-computed byte-accurate service, loss statistics,
//! determinism, strict trace parsing, outages, looping, droptail, and a property test against
//! a naive reference model.

use std::collections::VecDeque;
use std::path::PathBuf;

use polycorn_link::link::{
    DropReason, EnqueueOutcome, Link, LinkConfig, OutageMode, QueueLimit, MAX_QUEUE_PACKETS,
};
use polycorn_link::loss::{LossModel, LossProcess};
use polycorn_link::trace::{DelaySeries, DeliveryTrace, Outages, TraceErrorKind};
use proptest::prelude::*;

const ENQ: EnqueueOutcome = EnqueueOutcome::Enqueued;

fn trace(ms: &[u64]) -> DeliveryTrace {
    DeliveryTrace::from_opportunities_ms(ms.to_vec()).unwrap()
}

/// One opportunity per millisecond, 1..=10, looping (12 Mbit/s).
fn every_ms() -> DeliveryTrace {
    trace(&(1..=10).collect::<Vec<_>>())
}

fn link(cfg: LinkConfig) -> Link {
    Link::new(cfg).unwrap()
}

/// Everything deliverable by `now_us`.
fn drain(l: &mut Link, now_us: u64) -> Vec<(u64, u64)> {
    std::iter::from_fn(|| l.poll_delivered(now_us)).collect()
}

/// Runs the link to completion by sleeping from event to event.
fn drain_all(l: &mut Link) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for _ in 0..1_000_000 {
        let Some(t) = l.next_event_us() else {
            return out;
        };
        out.extend(drain(l, t));
    }
    panic!("link did not go idle");
}

// ---- byte accuracy ------------------------------------------------------------------------

/// Opportunities at 1, 1, 2, 5 ms; packets of 1500, 3000, 100 bytes at t = 0; 10 ms delay.
/// The two opportunities stamped 1 ms are spread over that millisecond: 0.5 ms and 1.0 ms.
/// * 0.5 ms: packet 1 (1500) takes the whole opportunity → served at 500 µs.
/// * 1.0 ms: packet 2 gets 1500 of its 3000 bytes.
/// * 2 ms: packet 2's last 1500 bytes → served at 2 ms; nothing left for packet 3.
/// * 5 ms: packet 3 (100) → served at 5 ms.
///
/// Delivered at served + 10 ms: 10 500, 12 000, 15 000 µs.
#[test]
fn byte_accurate_delivery_hand_computed() {
    let mut cfg = LinkConfig::new(trace(&[1, 1, 2, 5]));
    cfg.delay = DelaySeries::constant(10_000);
    let mut l = link(cfg);
    l.enable_log(100);
    assert_eq!(l.enqueue(0, 1, 1500), ENQ);
    assert_eq!(l.enqueue(0, 2, 3000), ENQ);
    assert_eq!(l.enqueue(0, 3, 100), ENQ);
    assert_eq!((l.queue_packets(), l.queue_bytes()), (3, 4600));
    assert_eq!(l.next_event_us(), Some(500));

    assert_eq!(l.poll_delivered(10_499), None);
    assert_eq!((l.queue_packets(), l.queue_bytes()), (0, 0));
    assert_eq!(l.next_event_us(), Some(10_500));
    assert_eq!(drain(&mut l, 10_500), vec![(1, 10_500)]);
    assert_eq!(l.next_event_us(), Some(12_000));
    assert_eq!(drain(&mut l, 14_999), vec![(2, 12_000)]);
    assert_eq!(drain(&mut l, 20_000), vec![(3, 15_000)]);
    assert_eq!(l.next_event_us(), None);

    // The mahimahi-format log up to 5 ms, then the idle opportunities of the next passes
    // (period 5 ms: 6, 6, 7, 10, 11, 11, 12, 15, 16, 16, 17, 20 ms).
    let log = l.take_log();
    let expected = [
        "# polycorn-link (mahimahi link log format)",
        "# base timestamp: 0",
        "0 + 1500",
        "0 + 3000",
        "0 + 100",
        "1 # 1500",
        "1 - 1500 1",
        "1 # 1500",
        "2 # 1500",
        "2 - 3000 2",
        "5 # 1500",
        "5 - 100 5",
        "6 # 1500",
        "6 # 1500",
        "7 # 1500",
        "10 # 1500",
    ];
    assert_eq!(&log[..expected.len()], &expected[..]);
    assert_eq!(log.last().map(String::as_str), Some("20 # 1500"));
}

/// Packets 1000, 3000, 100 bytes at t = 0, same opportunities (0.5, 1, 2, 5 ms), no delay:
/// * 0.5 ms: packet 1 done (1000), 500 bytes of packet 2 (2500 left).
/// * 1 ms: 1500 more of packet 2 (1000 left).
/// * 2 ms: packet 2 done (1000), packet 3 done (100); 400 bytes wasted.
#[test]
fn byte_accurate_straddling_packets() {
    let mut l = link(LinkConfig::new(trace(&[1, 1, 2, 5])));
    for (id, len) in [(1, 1000), (2, 3000), (3, 100)] {
        assert_eq!(l.enqueue(0, id, len), ENQ);
    }
    l.advance(1_000);
    assert_eq!((l.queue_packets(), l.queue_bytes()), (2, 3100));
    assert_eq!(
        drain(&mut l, 100_000),
        vec![(1, 500), (2, 2_000), (3, 2_000)]
    );
}

/// As in mahimahi, opportunities at or before the arrival instant are used up before the
/// packet is queued.
#[test]
fn arrival_at_an_opportunity_instant_misses_it() {
    let mut l = link(LinkConfig::new(trace(&[1, 1, 2])));
    assert_eq!(l.enqueue(999, 1, 100), ENQ);
    assert_eq!(l.enqueue(1_000, 2, 100), ENQ);
    assert_eq!(drain(&mut l, 10_000), vec![(1, 1_000), (2, 2_000)]);
}

/// A drop in the delay series does not let a later packet overtake an earlier one.
#[test]
fn delay_steps_keep_fifo_order() {
    let mut cfg = LinkConfig::new(every_ms());
    cfg.delay = DelaySeries::new(vec![(0, 100_000), (5, 10_000)]).unwrap();
    let mut l = link(cfg);
    assert_eq!(l.enqueue(0, 1, 100), ENQ); // served at 1 ms → 101 ms
    assert_eq!(l.enqueue(5_500, 2, 100), ENQ); // served at 6 ms → 16 ms, held to 101 ms
    assert_eq!(l.enqueue(150_000, 3, 100), ENQ); // served at 151 ms → 161 ms
    assert_eq!(
        drain_all(&mut l),
        vec![(1, 101_000), (2, 101_000), (3, 161_000)]
    );
}

// ---- looping, outages, droptail -----------------------------------------------------------

#[test]
fn looping_versus_once() {
    let run = |looping: bool| {
        let mut cfg = LinkConfig::new(trace(&[1, 2]));
        cfg.looping = looping;
        let mut l = link(cfg);
        for id in 0..5 {
            assert_eq!(l.enqueue(0, id, 1500), ENQ);
        }
        let out = drain_all(&mut l);
        (out, l.queue_packets(), l.trace_finished())
    };
    // Once: two opportunities, then nothing ever again — the rest stays queued, and the link
    // reports no next event.
    assert_eq!(run(false), (vec![(0, 1_000), (1, 2_000)], 3, true));
    // Looping with period 2 ms: 1, 2, 3, 4, 5 ms.
    let expected: Vec<(u64, u64)> = (0..5).map(|i| (i, (i + 1) * 1000)).collect();
    assert_eq!(run(true), (expected, 0, false));

    // mahimahi's loop rule: a trace starting at 0 has an opportunity at 0 of the next pass
    // coinciding with the last one of this pass (0, 2, 2, 4, 4, …); the two at each boundary
    // are spread over its millisecond: 1.5 and 2 ms, 3.5 and 4 ms.
    let mut l = link(LinkConfig::new(trace(&[0, 2])));
    for id in 0..4 {
        assert_eq!(l.enqueue(500, id, 1500), ENQ);
    }
    assert_eq!(
        drain_all(&mut l),
        vec![(0, 1_500), (1, 2_000), (2, 3_500), (3, 4_000)]
    );
}

/// Outage [3, 6) ms on a link with one opportunity per millisecond.
#[test]
fn outage_drop_versus_hold() {
    let run = |mode: OutageMode| {
        let mut cfg = LinkConfig::new(every_ms());
        cfg.outages = Outages::parse("o.csv", "start_ms,end_ms\n3,6\n").unwrap();
        cfg.outage_mode = mode;
        let mut l = link(cfg);
        let verdicts = [
            l.enqueue(2_500, 1, 1500), // queued before; its 3 ms opportunity is in the outage
            l.enqueue(4_000, 2, 1500),
            l.enqueue(5_999, 3, 1500),
            l.enqueue(6_000, 4, 1500), // the outage is over
        ];
        (verdicts, drain_all(&mut l), l.stats().dropped_outage)
    };
    let dropped = EnqueueOutcome::Dropped(DropReason::Outage);
    assert_eq!(
        run(OutageMode::Drop),
        (
            [ENQ, dropped, dropped, ENQ],
            vec![(1, 6_000), (4, 7_000)],
            2
        )
    );
    assert_eq!(
        run(OutageMode::Hold),
        (
            [ENQ; 4],
            vec![(1, 6_000), (2, 7_000), (3, 8_000), (4, 9_000)],
            0
        )
    );
}

/// Outages [3, 6) and [8, 9) ms in drop mode, with [4, 6) marked as held (a successful
/// handover's interruption): arrivals there wait for the outage's end, the rest are dropped.
#[test]
fn held_spans_keep_arrivals_inside_a_dropping_outage() {
    let mut cfg = LinkConfig::new(every_ms());
    cfg.outages = Outages::parse("o.csv", "start_ms,end_ms\n3,6\n8,9\n").unwrap();
    cfg.outage_mode = OutageMode::Drop;
    cfg.hold_in = Outages::parse("h.csv", "start_ms,end_ms\n4,6\n").unwrap();
    let mut l = link(cfg);
    let dropped = EnqueueOutcome::Dropped(DropReason::Outage);
    let verdicts = [
        l.enqueue(3_500, 1, 1500), // in the outage, before the held span
        l.enqueue(4_000, 2, 1500), // held
        l.enqueue(5_999, 3, 1500), // held
        l.enqueue(8_500, 4, 1500), // the second outage is not held
    ];
    assert_eq!(verdicts, [dropped, ENQ, ENQ, dropped]);
    assert_eq!(drain_all(&mut l), vec![(2, 6_000), (3, 7_000)]);
    assert_eq!(l.stats().dropped_outage, 2);
}

#[test]
fn droptail_by_bytes() {
    let mut cfg = LinkConfig::new(every_ms());
    cfg.queue = QueueLimit::Bytes(4000);
    let mut l = link(cfg);
    let full = EnqueueOutcome::Dropped(DropReason::QueueFull);
    assert_eq!(l.enqueue(100, 1, 1500), ENQ);
    assert_eq!(l.enqueue(100, 2, 1500), ENQ);
    assert_eq!(l.enqueue(100, 3, 1500), full); // 4500 > 4000
    assert_eq!(l.enqueue(100, 4, 1000), ENQ); // exactly 4000
    assert_eq!(l.enqueue(100, 5, 1), full);
    assert_eq!(l.queue_bytes(), 4000);
    // 1 ms serves packet 1, freeing 1500 bytes.
    assert_eq!(l.enqueue(1_000, 6, 1500), ENQ);
    assert_eq!(l.queue_bytes(), 4000);
    assert_eq!(l.stats().dropped_queue_full, 2);
    let ids: Vec<u64> = drain_all(&mut l).into_iter().map(|d| d.0).collect();
    assert_eq!(ids, vec![1, 2, 4, 6]);

    // A partly served head still counts in full.
    let mut cfg = LinkConfig::new(every_ms());
    cfg.queue = QueueLimit::Bytes(3000);
    let mut l = link(cfg);
    assert_eq!(l.enqueue(0, 1, 3000), ENQ);
    assert_eq!(l.enqueue(1_500, 2, 1), full);
    assert_eq!(l.enqueue(2_000, 3, 1), ENQ);
}

#[test]
fn droptail_by_packets() {
    let mut cfg = LinkConfig::new(every_ms());
    cfg.queue = QueueLimit::Packets(2);
    let mut l = link(cfg);
    let full = EnqueueOutcome::Dropped(DropReason::QueueFull);
    assert_eq!(l.enqueue(0, 1, 40), ENQ);
    assert_eq!(l.enqueue(0, 2, 40), ENQ);
    assert_eq!(l.enqueue(0, 3, 40), full);
    assert_eq!(l.queue_packets(), 2);
    // Both 40-byte packets leave at the 1 ms opportunity.
    assert_eq!(l.enqueue(1_000, 4, 40), ENQ);
    assert_eq!(l.enqueue(1_000, 5, 40), ENQ);
    assert_eq!(l.enqueue(1_000, 6, 40), full);
    assert!(Link::new(LinkConfig {
        queue: QueueLimit::Packets(MAX_QUEUE_PACKETS + 1),
        ..LinkConfig::new(every_ms())
    })
    .is_err());
}

// ---- loss ---------------------------------------------------------------------------------

/// Measured (loss rate, mean length of runs of consecutive losses).
fn measure(fates: impl Iterator<Item = bool>) -> (f64, f64) {
    let (mut n, mut lost, mut bursts, mut prev) = (0u64, 0u64, 0u64, false);
    for l in fates {
        n += 1;
        if l {
            lost += 1;
            if !prev {
                bursts += 1;
            }
        }
        prev = l;
    }
    (lost as f64 / n as f64, lost as f64 / bursts as f64)
}

fn assert_close(what: &str, measured: f64, configured: f64, rel_tol: f64) {
    let err = (measured - configured).abs() / configured;
    println!("{what}: measured {measured:.5}, configured {configured:.5}, error {err:.4}");
    assert!(err <= rel_tol, "{what}: relative error {err} > {rel_tol}");
}

/// 200 000 packets, fixed seed. Tolerance 10% relative: with ~2 000 bursts the standard error
/// of the mean burst length is ~2% and of the rate ~3%, so 10% is > 3σ yet catches any
/// modelling error (e.g. the wrong step order changes the burst length by 1/(1 − p_bg)).
#[test]
fn gilbert_elliott_matches_configuration() {
    const N: usize = 200_000;
    let models = [
        LossModel::gilbert(0.01, 0.25), // rate 3.85%, bursts of 4
        LossModel::GilbertElliott {
            p_good_to_bad: 0.02,
            p_bad_to_good: 0.2,
            loss_in_good: 0.002,
            loss_in_bad: 0.6,
        },
        LossModel::from_rate_and_burst(0.018, 3.0).unwrap(), // the paper's 1.8% RTO share
        LossModel::Bernoulli { p: 0.05 },
    ];
    for (i, m) in models.iter().enumerate() {
        let mut p = LossProcess::new(*m, 42 + i as u64).unwrap();
        let (rate, burst) = measure((0..N).map(|_| p.lose()));
        println!("{m:?}");
        assert_close("loss rate", rate, m.stationary_loss_rate(), 0.10);
        assert_close("mean burst", burst, m.mean_burst_packets().unwrap(), 0.10);
    }
}

/// The same statistics through the link: loss applied per packet at enqueue, nothing else
/// dropping (one 100-byte packet per opportunity).
#[test]
fn link_applies_loss_per_packet() {
    const N: u64 = 200_000;
    let model = LossModel::gilbert(0.01, 0.25);
    let mut cfg = LinkConfig::new(every_ms());
    cfg.loss = model;
    cfg.seed = 7;
    let mut l = link(cfg);
    let fates: Vec<bool> = (0..N)
        .map(|i| match l.enqueue(i * 1000, i, 100) {
            EnqueueOutcome::Enqueued => false,
            EnqueueOutcome::Dropped(DropReason::Loss) => true,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    let (rate, burst) = measure(fates.into_iter());
    assert_close("link loss rate", rate, model.stationary_loss_rate(), 0.10);
    assert_close("link mean burst", burst, 4.0, 0.10);
    let delivered = drain_all(&mut l).len() as u64;
    assert_eq!(delivered + l.stats().dropped_loss, N);
}

// ---- determinism --------------------------------------------------------------------------

/// A busy scenario: bursty loss, outages, a delay step, a small queue, pseudo-random packets.
fn scenario(seed: u64) -> (Vec<String>, Vec<(u64, u64)>, Vec<EnqueueOutcome>) {
    let cfg = LinkConfig {
        capacity: DeliveryTrace::from_rate_series(&[(50, 6_000_000), (50, 20_000_000)]).unwrap(),
        looping: true,
        delay: DelaySeries::new(vec![(0, 20_000), (300, 35_500)]).unwrap(),
        loss: LossModel::gilbert(0.05, 0.3),
        outages: Outages::new(vec![(120, 180), (400, 410)]).unwrap(),
        outage_mode: OutageMode::Hold,
        hold_in: Outages::none(),
        queue: QueueLimit::Bytes(30_000),
        seed,
    };
    let mut l = link(cfg);
    l.enable_log(1_000_000);
    let (mut t, mut x, mut out, mut verdicts) = (0u64, 12345u64, Vec::new(), Vec::new());
    for id in 0..3000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        t += (x >> 33) % 400;
        let len = 40 + ((x >> 20) % 1461) as u32;
        verdicts.push(l.enqueue(t, id, len));
        out.extend(drain(&mut l, t));
    }
    out.extend(drain_all(&mut l));
    assert_eq!(l.log_lines_lost(), 0);
    (l.take_log(), out, verdicts)
}

#[test]
fn same_seed_same_log_different_seed_different_log() {
    let a = scenario(1);
    let b = scenario(1);
    assert!(a.0.len() > 3000, "log too short: {}", a.0.len());
    assert_eq!(a, b);
    let c = scenario(2);
    assert_ne!(a.0, c.0);
    assert_ne!(a.2, c.2);
}

#[test]
fn log_is_off_by_default_and_bounded() {
    let mut l = link(LinkConfig::new(every_ms()));
    assert_eq!(l.enqueue(0, 1, 100), ENQ);
    drain_all(&mut l);
    assert!(l.take_log().is_empty());

    let mut l = link(LinkConfig::new(every_ms()));
    l.enable_log(5);
    for i in 0..10 {
        assert_eq!(l.enqueue(i * 1000, i, 100), ENQ);
    }
    assert_eq!(l.take_log().len(), 5);
    assert!(l.log_lines_lost() > 0);
    // Draining frees room again.
    assert_eq!(l.enqueue(20_000, 99, 100), ENQ);
    assert!(!l.take_log().is_empty());
}

// ---- strict parsing -----------------------------------------------------------------------

#[test]
fn malformed_traces_rejected_with_file_and_line() {
    let cases: &[(&str, usize, &str)] = &[
        ("", 1, "empty"),
        ("\n", 1, "empty"),
        ("1\n2\n\n3\n", 3, "empty line"),
        ("1\n2\n3.5\n", 3, "not a non-negative integer"),
        ("1\nx\n", 2, "not a non-negative integer"),
        ("1\n2\n-4\n", 3, "negative value"),
        ("1\n5\n4\n", 3, "before the previous one"),
        ("1\n2\n3\n4 # comment\n", 4, "trailing garbage"),
        ("1\n2ms\n", 2, "trailing garbage"),
        ("1\n99999999999999999999\n", 2, "exceeds the limit"),
    ];
    for &(text, line, msg) in cases {
        let e = DeliveryTrace::parse("traces/bad.down", text).unwrap_err();
        assert_eq!(e.line, line, "{text:?}: {e}");
        let shown = e.to_string();
        assert!(
            shown.starts_with(&format!("traces/bad.down:{line}: ")) && shown.contains(msg),
            "{text:?}: {shown}"
        );
    }
    // Trailing empty lines and CRLF are fine; the rest round-trips.
    let t = DeliveryTrace::parse("ok", "0\r\n3\r\n3\r\n9\r\n\r\n").unwrap();
    assert_eq!(t.opportunities_ms(), &[0, 3, 3, 9]);
    assert_eq!(DeliveryTrace::parse("ok", &t.to_mahimahi()).unwrap(), t);

    let e = DelaySeries::parse("d.csv", "t_ms,delay_ms\n0,10\n10,abc\n").unwrap_err();
    assert_eq!((e.line, e.to_string().starts_with("d.csv:3: ")), (3, true));
    let e = Outages::parse("o.csv", "start_ms,end_ms\n0,10\n5,20\n").unwrap_err();
    assert_eq!(e.line, 3);
    assert!(matches!(e.kind, TraceErrorKind::Overlap { .. }));
}

/// A zero-period trace can be played once but not looped.
#[test]
fn zero_period_trace_cannot_loop() {
    let t = DeliveryTrace::parse("z", "0\n0\n").unwrap();
    assert!(Link::new(LinkConfig::new(t.clone())).is_err());
    let mut cfg = LinkConfig::new(t);
    cfg.looping = false;
    let mut l = link(cfg);
    // Both opportunities are at 0 ms; a packet arriving at 0 misses them.
    assert_eq!(l.enqueue(0, 1, 100), ENQ);
    assert!(drain_all(&mut l).is_empty());
}

// ---- real mahimahi trace (optional) -------------------------------------------------------

fn shared_trace(name: &str) -> Option<PathBuf> {
    let rel = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/mahimahi");
    [rel, PathBuf::from("/work/shared/data/mahimahi")]
        .into_iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

#[test]
fn real_tmobile_lte_trace_if_present() {
    let name = "TMobile-LTE-driving.down";
    let Some(path) = shared_trace(name) else {
        println!("note: {name} not found under ../shared/data/mahimahi; skipping");
        return;
    };
    let text = std::fs::read_to_string(&path).unwrap();
    let t = DeliveryTrace::parse(&path.display().to_string(), &text).unwrap();
    let rate = t.mean_rate_bps().unwrap();
    println!(
        "{name}: {} opportunities over {} ms, mean {:.2} Mbit/s",
        t.opportunity_count(),
        t.period_ms(),
        rate / 1e6
    );
    assert!((1e6..100e6).contains(&rate), "implausible LTE rate {rate}");
    assert_eq!(t.to_mahimahi(), text);

    // Saturate the link for 10 s: it must carry (almost) exactly the trace's capacity.
    let mut l = link(LinkConfig::new(t.clone()));
    let horizon_us = 10_000_000;
    let mut now = 0;
    let mut id = 0;
    while now < horizon_us {
        while l.queue_packets() < 500 {
            let _ = l.enqueue(now, id, 1500);
            id += 1;
        }
        now += 1000;
        drain(&mut l, now);
    }
    let opportunities = t
        .opportunities_ms()
        .iter()
        .filter(|&&m| m > 0 && m * 1000 <= horizon_us)
        .count() as u64;
    assert_eq!(l.stats().served_bytes, opportunities * 1500);
}

// ---- property test against a naive reference ----------------------------------------------

/// The opportunity times (µs) of `trace` up to `horizon_us`, outages removed — built the
/// simplest way, independently of the link's cursor arithmetic.
fn opportunity_times(trace: &[u64], looping: bool, outages: &Outages, horizon_us: u64) -> Vec<u64> {
    let period = *trace.last().unwrap();
    // Absolute millisecond stamps of every opportunity, pass after pass.
    let mut stamps = Vec::new();
    let mut base = 0;
    'passes: loop {
        for &m in trace {
            if (base + m) * 1000 > horizon_us + 1000 {
                break 'passes;
            }
            stamps.push(base + m);
        }
        if !looping {
            break;
        }
        base += period;
    }
    // Equal stamps form a group of k; the j-th (1-based) happens at stamp - 1 + j/k ms.
    let mut out = Vec::new();
    let mut i = 0;
    while i < stamps.len() {
        let k = stamps[i..].iter().take_while(|&&x| x == stamps[i]).count() as u64;
        for j in 1..=k {
            let t = (stamps[i] * 1000).saturating_sub(1000 - j * 1000 / k);
            if t <= horizon_us && !outages.is_out(t) {
                out.push(t);
            }
        }
        i += k as usize;
    }
    out
}

fn fits(limit: QueueLimit, packets: usize, bytes: u64, len: u32) -> bool {
    match limit {
        QueueLimit::Bytes(b) => bytes + u64::from(len) <= b,
        QueueLimit::Packets(p) => (packets as u64) < p,
    }
}

/// The reference: visit every usable opportunity in time order and serve byte by byte the
/// packets the link accepted. Also checks each droptail verdict against its own queue.
/// Returns `(id, served_us)`.
fn reference(opps: &[u64], arrivals: &[Arrival], limit: QueueLimit) -> Vec<(u64, u64)> {
    let mut q: VecDeque<(u64, u32, u32)> = VecDeque::new(); // id, len, remaining
    let mut q_bytes = 0u64;
    let mut served = Vec::new();
    let mut serve = |t: u64, q: &mut VecDeque<(u64, u32, u32)>, q_bytes: &mut u64| {
        let mut budget = 1500u32;
        while let Some(head) = q.front_mut() {
            if budget == 0 {
                break;
            }
            let take = budget.min(head.2);
            head.2 -= take;
            budget -= take;
            if head.2 == 0 {
                *q_bytes -= u64::from(head.1);
                served.push((head.0, t));
                q.pop_front();
            }
        }
    };
    let mut next = 0;
    for (id, &(arrival, len, verdict)) in arrivals.iter().enumerate() {
        while next < opps.len() && opps[next] <= arrival {
            serve(opps[next], &mut q, &mut q_bytes);
            next += 1;
        }
        let room = fits(limit, q.len(), q_bytes, len);
        match verdict {
            EnqueueOutcome::Enqueued => {
                assert!(room, "packet {id} accepted into a full queue");
                q.push_back((id as u64, len, len));
                q_bytes += u64::from(len);
            }
            EnqueueOutcome::Dropped(DropReason::QueueFull) => {
                assert!(!room, "packet {id} tail-dropped with room in the queue");
            }
            EnqueueOutcome::Dropped(_) => {}
        }
    }
    for &t in &opps[next..] {
        serve(t, &mut q, &mut q_bytes);
    }
    served
}

#[derive(Debug, Clone)]
struct Case {
    trace_ms: Vec<u64>,
    looping: bool,
    outages: Vec<(u64, u64)>,
    mode: OutageMode,
    limit: QueueLimit,
    delay_us: u64,
    loss_p: f64,
    seed: u64,
    /// (gap before arrival in µs, length)
    packets: Vec<(u64, u32)>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(0u64..4, 1..30),
        any::<bool>(),
        prop::collection::vec((0u64..30, 1u64..20), 0..4),
        prop_oneof![Just(OutageMode::Drop), Just(OutageMode::Hold)],
        prop_oneof![
            (1u64..12_000).prop_map(QueueLimit::Bytes),
            (1u64..12).prop_map(QueueLimit::Packets)
        ],
        0u64..30_000,
        prop_oneof![Just(0.0), 0.0..0.3f64],
        any::<u64>(),
        prop::collection::vec((0u64..2_500, 1u32..4_000), 1..60),
    )
        .prop_map(
            |(gaps, looping, outage_gaps, mode, limit, delay_us, loss_p, seed, packets)| {
                let mut t = 0;
                let mut trace_ms: Vec<u64> = gaps
                    .iter()
                    .map(|g| {
                        t += g;
                        t
                    })
                    .collect();
                if t == 0 {
                    trace_ms.push(1);
                }
                let mut end = 0;
                let outages = outage_gaps
                    .iter()
                    .map(|&(gap, len)| {
                        let start = end + gap;
                        end = start + len;
                        (start, end)
                    })
                    .collect();
                Case {
                    trace_ms,
                    looping,
                    outages,
                    mode,
                    limit,
                    delay_us,
                    loss_p,
                    seed,
                    packets,
                }
            },
        )
}

/// `(arrival_us, len_bytes, verdict)` of one offered packet (its id is its index).
type Arrival = (u64, u32, EnqueueOutcome);

/// Runs a case: returns the verdicts with arrival times, the deliveries, and the final time.
fn run_case(c: &Case, log: bool) -> (Vec<Arrival>, Vec<(u64, u64)>, u64) {
    let cfg = LinkConfig {
        capacity: DeliveryTrace::from_opportunities_ms(c.trace_ms.clone()).unwrap(),
        looping: c.looping,
        delay: DelaySeries::constant(c.delay_us),
        loss: LossModel::Bernoulli { p: c.loss_p },
        outages: Outages::new(c.outages.clone()).unwrap(),
        outage_mode: c.mode,
        hold_in: Outages::none(),
        queue: c.limit,
        seed: c.seed,
    };
    let mut l = link(cfg);
    if log {
        l.enable_log(usize::MAX);
    }
    let (mut t, mut arrivals, mut delivered) = (0, Vec::new(), Vec::new());
    let limit_ok = |l: &Link| match c.limit {
        QueueLimit::Bytes(b) => l.queue_bytes() <= b,
        QueueLimit::Packets(p) => l.queue_packets() <= p,
    };
    for (id, &(gap, len)) in c.packets.iter().enumerate() {
        t += gap;
        let v = l.enqueue(t, id as u64, len);
        arrivals.push((t, len, v));
        assert!(limit_ok(&l));
        for d in drain(&mut l, t) {
            assert!(d.1 <= t, "delivered in the future");
            delivered.push(d);
        }
    }
    // Sleep from event to event; each event must lie in the future once handled.
    let mut steps = 0;
    while let Some(ev) = l.next_event_us() {
        delivered.extend(drain(&mut l, ev));
        assert!(
            l.next_event_us().is_none_or(|next| next > ev),
            "no progress at {ev}"
        );
        steps += 1;
        assert!(steps < 100_000);
    }
    let end_us = l.now_us();
    if c.looping {
        assert_eq!(l.queue_packets(), 0, "a looping link must drain");
    } else if l.queue_packets() > 0 {
        // Stuck only because the played-once trace has no usable opportunity left (its last
        // ones may fall inside an outage): running far ahead must serve nothing more.
        let served = l.stats().served_packets;
        l.advance(end_us + 1_000_000_000);
        assert!(l.trace_finished());
        assert_eq!(l.stats().served_packets, served);
    }
    (arrivals, delivered, end_us)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// FIFO, never early, byte budget respected, nothing served in an outage, droptail
    /// verdicts right, service identical to a naive reference, and identical with the event
    /// log on (which disables the idle fast path).
    #[test]
    fn link_invariants(c in case()) {
        let (arrivals, delivered, end_us) = run_case(&c, false);
        prop_assert_eq!(run_case(&c, true), (arrivals.clone(), delivered.clone(), end_us));
        let outages = Outages::new(c.outages.clone()).unwrap();

        // FIFO: ids strictly increasing, only accepted packets.
        for w in delivered.windows(2) {
            prop_assert!(w[0].0 < w[1].0, "reordered: {:?}", w);
        }
        let mut served = Vec::new();
        for &(id, at) in &delivered {
            let (arrival, _, verdict) = arrivals[id as usize];
            prop_assert_eq!(verdict, EnqueueOutcome::Enqueued);
            // Constant delay: service time is exactly delivery − delay.
            prop_assert!(at >= arrival + c.delay_us, "early: id {} at {} arrival {}", id, at, arrival);
            let served_us = at - c.delay_us;
            prop_assert!(served_us > arrival);
            // Served exactly at an opportunity time: checked against the reference below.
            prop_assert!(!outages.is_out(served_us), "served during an outage at {}", served_us);
            served.push((id, served_us));
        }
        for &(arrival, _, verdict) in &arrivals {
            let in_drop_outage = c.mode == OutageMode::Drop && outages.is_out(arrival);
            prop_assert_eq!(in_drop_outage, verdict == EnqueueOutcome::Dropped(DropReason::Outage));
        }

        // Bytes served by any time never exceed the opportunity bytes since the first arrival.
        let opps = opportunity_times(&c.trace_ms, c.looping, &outages, end_us);
        let first_arrival = arrivals[0].0;
        let mut cum_bytes = 0u64;
        for &(id, s) in &served {
            cum_bytes += u64::from(arrivals[id as usize].1);
            let n = opps.iter().filter(|&&o| o > first_arrival && o <= s).count() as u64;
            prop_assert!(cum_bytes <= n * 1500, "{} bytes by {} µs with {} opportunities", cum_bytes, s, n);
        }

        // Exactly what the naive reference serves.
        prop_assert_eq!(served, reference(&opps, &arrivals, c.limit));
    }
}
