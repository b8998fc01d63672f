//! Cost of one full scheduling decision, [`Scheduler::poll_decision`]: PF user pick,
//! round-robin flow pick, chunk pick, the whole pipeline (with its trace) and the bookkeeping
//! that follows a decision.
//!
//! Benchmark ids (one criterion iteration = one decision, so the reported time is per decision):
//! * `decision/hrsch/{2,4,8}paths` — `hpr,minrtt,tpr,ori+er`, default [`SchedConfig`] (trace
//!   on, as in production), 8 users x 2 flows, a quarter of the flows in their tail (FIN seen).
//! * `decision/vanilla/{2,4,8}paths` — `minrtt+rto`, same workload.
//! * `decision/hrsch_100users/4paths` — hrsch with 100 users x 5 flows (one tail flow each).
//! * `decision/hrsch_notrace/{2,4,8}paths` — hrsch with `trace_capacity: 0`, to show what the
//!   trace costs.
//!
//! Steady state: every path has a distinct realistic RTT (40–300 ms), a delivery-rate estimate
//! and a congestion window far larger than what one batch of decisions queues on it. HPR asks a
//! real predictor ([`FixedPredictions`]) that predicts a handover failure on path 1 ten minutes
//! ahead, so HPR evaluates its threshold every decision without rejecting; the train speed is
//! set. The clock advances 100 µs per decision (about the packet rate of a 100 Mbit/s uplink),
//! so PF's exponential average and ORI's idle timer see time pass. With windows this large
//! minRTT always picks the lowest-RTT path for the original, and ORI (α = 1 s, β = 8 KB,
//! τ = 16) finds every other path idle after ~6 chunks and copies the next 16 chunks onto it:
//! about 73% of hrsch decisions go out on *every* path. That is the expensive case for the
//! bookkeeping (one in-flight record per copy), so the 4- and 8-path hrsch numbers are
//! pessimistic.
//!
//! Measurement: decisions run in batches of [`BATCH`]; only the `poll_decision` calls of a batch
//! are timed (`std::time::Instant` around the batch, ~2 × 25 ns of clock reads per 256
//! decisions, i.e. < 0.2 ns per decision). Between batches, untimed maintenance keeps the state
//! steady: every path's queue is reset with a `TCP_INFO` sample, every flow is acked up to what it
//! has sent (which prunes the in-flight records) and non-tail flows get more data. Every batch's
//! results are checked outside the timed region: a `None` decision panics the benchmark.
//! Maintenance is *not* in the reported numbers; it would add about 2–4% (13% for 100 users x
//! 5 flows, where 500 flows are acked per batch) if it were.

use std::hint::black_box;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use polycorn_sched::{
    Bandwidth, Decision, Duration, FixedPredictions, FlowId, Instant, PathId, SchedConfig,
    Scheduler, TcpInfoSample, UserId,
};

/// Decisions between two maintenance steps.
const BATCH: usize = 256;
/// Simulated time between two decisions.
const STEP: Duration = Duration::from_micros(100);
/// Congestion window of every path: far more than one batch can queue on a path.
const CWND_BYTES: u64 = 8 << 20;
/// Bytes in flight on every path right after a maintenance step.
const UNACKED_BYTES: u64 = 256 << 10;
/// Data a tail flow had buffered when its FIN arrived: never exhausted during a run.
const TAIL_FLOW_BYTES: u64 = 1 << 40;
/// Non-tail flows are topped up when less than this is buffered and unsent.
const LOW_WATER_BYTES: u64 = 1 << 20;
/// And are given this much more.
const TOP_UP_BYTES: u64 = 4 << 20;
/// Train speed (≈ 300 km/h).
const TRAIN_SPEED_MPS: f64 = 83.0;
/// How far ahead the predicted handover failure of path 1 lies.
const FAILURE_AHEAD: Duration = Duration::from_secs(600);

/// (smoothed RTT ms, delivery rate Mbit/s) of the paths, per path count.
fn path_profile(n: usize) -> &'static [(u64, u64)] {
    match n {
        2 => &[(45, 30), (120, 12)],
        4 => &[(45, 30), (80, 20), (150, 12), (300, 5)],
        8 => &[
            (40, 35),
            (55, 28),
            (70, 22),
            (95, 18),
            (130, 12),
            (180, 9),
            (240, 6),
            (300, 4),
        ],
        _ => panic!("no path profile for {n} paths"),
    }
}

struct FlowTrack {
    id: FlowId,
    tail: bool,
    /// Highest sequence number (exclusive) handed out in a decision.
    sent_hi: u64,
    /// Highest cumulative ack given.
    acked: u64,
    /// Data given to the scheduler (non-tail flows).
    buffered: u64,
}

struct Fixture {
    name: String,
    sched: Scheduler,
    pred: FixedPredictions,
    paths: Vec<(PathId, Duration, Bandwidth)>,
    flows: Vec<FlowTrack>,
    now: Instant,
    path_bytes_acked: u64,
    decisions: Box<[Option<Decision>; BATCH]>,
    tail_decisions: u64,
    multipath_decisions: u64,
}

impl Fixture {
    fn new(
        name: &str,
        spec: &str,
        cfg: SchedConfig,
        n_paths: usize,
        users: u64,
        flows_per_user: u64,
    ) -> Self {
        // The windows are meant to have room for every batch: the samples' 8 MB, not the cap
        // the recent rate would put on them (which costs nothing per decision).
        let cfg = SchedConfig {
            window_gain: None,
            ..cfg
        };
        let mut sched = Scheduler::from_spec(cfg, spec).expect("valid spec");
        let now = Instant::from_millis(1_000);
        let paths: Vec<_> = path_profile(n_paths)
            .iter()
            .enumerate()
            .map(|(i, &(rtt_ms, mbit))| {
                (
                    PathId::new(i).expect("path index"),
                    Duration::from_millis(rtt_ms),
                    Bandwidth::from_mbit_per_sec(mbit),
                )
            })
            .collect();
        for &(p, _, _) in &paths {
            sched.add_path(now, p).expect("new path");
        }
        sched.on_train_speed(now, TRAIN_SPEED_MPS);
        let mut flows = Vec::new();
        for u in 0..users {
            for k in 0..flows_per_user {
                let id = FlowId(u * flows_per_user + k);
                // The last flow of every other user (hrsch: 4 of 16 flows), or of every user
                // when users have more than 2 flows (100 users x 5: 100 of 500), is in its tail.
                let tail = k == flows_per_user - 1 && (flows_per_user > 2 || u % 2 == 0);
                sched
                    .open_flow(now, id, UserId(1000 + u))
                    .expect("new flow");
                let buffered = if tail { TAIL_FLOW_BYTES } else { TOP_UP_BYTES };
                sched.on_flow_data(now, id, buffered).expect("data");
                if tail {
                    sched.on_flow_fin(now, id).expect("fin");
                }
                flows.push(FlowTrack {
                    id,
                    tail,
                    sent_hi: 0,
                    acked: 0,
                    buffered,
                });
            }
        }
        let mut f = Fixture {
            name: name.to_owned(),
            sched,
            pred: FixedPredictions::new(),
            paths,
            flows,
            now,
            path_bytes_acked: 0,
            decisions: Box::new([None; BATCH]),
            tail_decisions: 0,
            multipath_decisions: 0,
        };
        f.maintain(0);
        // Settle (ORI's idle/copy cycle, PF averages) and check the workload exercises the
        // stages it is meant to: tail flows get decisions (TPR evaluates them), and for hrsch
        // ORI adds copies.
        f.run(64 * BATCH as u64);
        assert!(f.tail_decisions > 0, "{}: no tail-flow decisions", f.name);
        if spec == "hrsch" {
            assert!(f.multipath_decisions > 0, "{}: ORI never copied", f.name);
        }
        f
    }

    /// Untimed, between batches: check and account the batch's `n` decisions, reset the
    /// paths' queues, ack what was sent, top up data, refresh the prediction.
    fn maintain(&mut self, n: usize) {
        for d in &self.decisions[..n] {
            let Some(d) = d else {
                panic!("{}: poll_decision returned None in steady state", self.name);
            };
            let f = &mut self.flows[d.flow.0 as usize];
            debug_assert_eq!(f.id, d.flow);
            f.sent_hi = f.sent_hi.max(d.offset + d.seq_len());
            self.tail_decisions += u64::from(f.tail);
            self.multipath_decisions += u64::from(d.paths.len() > 1);
        }
        self.path_bytes_acked += UNACKED_BYTES;
        for &(p, rtt, bw) in &self.paths {
            let sample = TcpInfoSample {
                srtt: rtt,
                rttvar: Duration::from_micros(rtt.as_micros() / 8),
                min_rtt: Some(Duration::from_micros(rtt.as_micros() * 9 / 10)),
                cwnd_bytes: CWND_BYTES,
                mss_bytes: 1448,
                unacked_bytes: UNACKED_BYTES,
                notsent_bytes: 0,
                delivery_rate: bw,
                rto_backoff: 0,
                bytes_acked: self.path_bytes_acked,
                unacked_age: Duration::ZERO,
            };
            self.sched
                .on_tcp_info(self.now, p, &sample)
                .expect("configured path");
        }
        for f in &mut self.flows {
            if f.sent_hi > f.acked {
                self.sched
                    .on_flow_ack(self.now, f.id, f.sent_hi)
                    .expect("ack of sent data");
                f.acked = f.sent_hi;
            }
            if !f.tail && f.buffered - f.sent_hi < LOW_WATER_BYTES {
                self.sched
                    .on_flow_data(self.now, f.id, TOP_UP_BYTES)
                    .expect("data");
                f.buffered += TOP_UP_BYTES;
            }
        }
        let failing = self.paths[1].0;
        self.pred
            .set_failure(failing, Some(self.now + FAILURE_AHEAD));
    }

    /// Run `iters` decisions; returns the time spent in `poll_decision` only.
    fn run(&mut self, iters: u64) -> StdDuration {
        let mut timed = StdDuration::ZERO;
        let mut left = iters;
        while left > 0 {
            let n = left.min(BATCH as u64) as usize;
            let start = StdInstant::now();
            for slot in &mut self.decisions[..n] {
                self.now += STEP;
                *slot = self.sched.poll_decision(self.now, &self.pred);
            }
            timed += start.elapsed();
            black_box(&self.decisions);
            self.maintain(n);
            left -= n as u64;
        }
        timed
    }
}

fn bench_decision(c: &mut Criterion) {
    let mut g = c.benchmark_group("decision");
    let trace_off = SchedConfig {
        trace_capacity: 0,
        ..SchedConfig::default()
    };
    let cases: Vec<(&str, &str, SchedConfig, usize, u64, u64)> = vec![
        ("hrsch", "hrsch", SchedConfig::default(), 2, 8, 2),
        ("hrsch", "hrsch", SchedConfig::default(), 4, 8, 2),
        ("hrsch", "hrsch", SchedConfig::default(), 8, 8, 2),
        // The relay's and proxy's default pipeline.
        ("polycorn", "polycorn", SchedConfig::default(), 2, 8, 2),
        ("polycorn", "polycorn", SchedConfig::default(), 8, 8, 2),
        ("vanilla", "vanilla", SchedConfig::default(), 2, 8, 2),
        ("vanilla", "vanilla", SchedConfig::default(), 4, 8, 2),
        ("vanilla", "vanilla", SchedConfig::default(), 8, 8, 2),
        ("hrsch_100users", "hrsch", SchedConfig::default(), 4, 100, 5),
        ("hrsch_notrace", "hrsch", trace_off.clone(), 2, 8, 2),
        ("hrsch_notrace", "hrsch", trace_off.clone(), 4, 8, 2),
        ("hrsch_notrace", "hrsch", trace_off, 8, 8, 2),
    ];
    for (name, spec, cfg, n_paths, users, flows_per_user) in cases {
        let id = BenchmarkId::new(name, format!("{n_paths}paths"));
        let mut fx = Fixture::new(
            &format!("decision/{name}/{n_paths}paths"),
            spec,
            cfg,
            n_paths,
            users,
            flows_per_user,
        );
        g.bench_function(id, |b| b.iter_custom(|iters| fx.run(iters)));
    }
    g.finish();
}

criterion_group!(benches, bench_decision);
criterion_main!(benches);
