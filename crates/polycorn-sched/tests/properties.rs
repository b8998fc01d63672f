//! Property tests: random sequences of inputs (paths, samples, flows, acks, time, predictions)
//! interleaved with polls, run against every preset and a few custom pipelines.
//!
//! Properties (one proptest each):
//! 1. `partition` — every attempt's start and end sets S/C/U partition the live paths.
//! 2. `moves_replay` — the trace replays from each attempt's start to its end, every move is
//!    allowed for its stage kind, nothing rejected is sent unless revived by a hard selector,
//!    nothing already carried is sent again, and the decision is the last attempt's S.
//! 3. `deadlines_not_in_past` — `poll_timeout()` is never before the latest `now` given.
//! 4. `determinism` — two schedulers fed the same inputs agree on everything.
//! 5. `sequence_sanity` — decisions respect buffered data, credit, in-order new data (STMS:
//!    new data only on bytes never sent), reinjection of sent-but-unacked sequence only,
//!    chunk size and the FIN.
//! 6. `no_panics` — extreme values and invalid ids give errors (the right ones), never panics.
//!
//! Every case runs its operation sequence once per preset in [`PRESETS`], per spec in
//! `CUSTOM_SPECS`, and on a programmatic pipeline with a test-only hard selector that revives
//! paths from U. 256 cases per property; set `PROPTEST_CASES` for a longer soak.

use std::collections::BTreeMap;

use polycorn_sched::stages::{Blest, Hpr, LocationTable, MinRtt, Tpr};
use polycorn_sched::{
    Attempt, Bandwidth, Decision, Duration, FixedPredictions, FlowId, Instant, Move, Moves, PathId,
    PathSet, Pipeline, Reason, Reinjection, SchedConfig, SchedError, SchedStats, Scheduler,
    Schedulerlet, SetName, StageCtx, StageKind, TcpInfoSample, UserId, DEFAULT_WINDOW_GAIN,
    PRESETS,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// Paths used by ordinary operation sequences.
const NPATHS: usize = 6;
/// Flow ids used by operation sequences.
const NFLOWS: u64 = 6;
/// User ids used by operation sequences.
const NUSERS: u64 = 3;
/// Trace capacity large enough that nothing is dropped.
const TRACE_CAPACITY: usize = 4096;

/// Custom textual specs run in addition to every preset.
const CUSTOM_SPECS: &[&str] = &[
    "hpr,minrtt,tpr,ori+er(k=1)",
    "minrtt,blest,ori+er",
    "loctable,hpr,rr,tpr,ori(alpha_ms=0,beta_bytes=0,tau=1)+none",
    "hpr(e_gps_m=1000),redundant,ecf(beta=1),ori(tau=3)+er(k=2)",
    "hpr,single,tpr+rto",
    "hpr,minrtt,tpr,ori(displace=0,tau=4)+er(k=2,cell_loss=1)",
    "minrtt,tpr,blest,ecf,ori(alpha_ms=5,beta_bytes=2000,tau=2)+er(k=1)",
    "hpr,minrtt,tpr+er(k=2,stuck_ms=1)",
    "rr,ori+er(oldest=0,stuck_ms=30)",
    "minrtt(thin_bytes=3000),ori(thin_bytes=3000)+er(k=1,stuck_ms=5)",
    "hpr,minrtt,tpr,stms(gain=2),ori(tau=2)+er(k=1)",
    "stale,musher(round=10,interval_ms=5,step_pct=10,collapse_pct=50,reprobe_ms=20),tpr+er(k=2)",
];

// ----- a test-only hard selector that revives from U ---------------------------------------

/// Hard selector reviving every even-indexed path with window room, from C or U, including
/// paths that already carried the chunk (which `Moves::revive` must refuse). None of the
/// built-in stages revives from U, so this exercises that path of the contract.
#[derive(Debug, Default)]
struct ReviveEven;

impl Schedulerlet for ReviveEven {
    fn name(&self) -> &'static str {
        "revive_even"
    }
    fn kind(&self) -> StageKind {
        StageKind::HardSelector
    }
    fn apply(&mut self, ctx: &StageCtx<'_>, moves: &mut Moves<'_>) {
        let pool = moves.unavailable().union(moves.candidates());
        for p in pool.iter() {
            if p.index() % 2 == 0 && ctx.paths.get(p).has_room() {
                moves.revive(p, Reason::IdleProbe { copies_left: 1 });
            }
        }
    }
}

/// Which pipeline to build.
#[derive(Clone, Copy, Debug)]
enum Spec {
    Text(&'static str),
    /// `hpr,loctable,minrtt,tpr,blest,revive_even+er(k=1)`.
    Reviver,
}

impl Spec {
    fn build(self, cfg: &SchedConfig) -> Scheduler {
        match self {
            Spec::Text(t) => Scheduler::from_spec(cfg.clone(), t).expect("spec parses"),
            Spec::Reviver => {
                let stages: Vec<Box<dyn Schedulerlet>> = vec![
                    Box::new(Hpr::default()),
                    Box::new(LocationTable),
                    Box::new(MinRtt::default()),
                    Box::new(Tpr::default()),
                    Box::new(Blest::default()),
                    Box::new(ReviveEven),
                ];
                let p = Pipeline::new(stages, Reinjection::extended(1)).expect("pipeline");
                Scheduler::new(cfg.clone(), p)
            }
        }
    }
}

fn all_specs() -> Vec<Spec> {
    PRESETS
        .iter()
        .map(|(name, _)| Spec::Text(name))
        .chain(CUSTOM_SPECS.iter().map(|s| Spec::Text(s)))
        .chain(std::iter::once(Spec::Reviver))
        .collect()
}

// ----- operations --------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    AddPath(usize),
    RemovePath(usize),
    ResetPath(usize),
    SetAlive(usize, bool),
    TcpInfo(usize, TcpInfoSample),
    Rtt(usize, u64),
    Owd(usize, u64),
    Bandwidth(usize, u64),
    Window(usize, u64, u64, u64),
    Rto(usize),
    Progress(usize),
    TrainSpeed(f64),
    OpenFlow(u64, u64),
    CloseFlow(u64),
    FlowData(u64, u64),
    Fin(u64),
    Rst(u64),
    /// Credit limit = the flow's current ack (model) + the value.
    Credit(u64, u64),
    /// Credit limit given verbatim.
    CreditRaw(u64, u64),
    /// Ack a value between the flow's current ack and its highest sent sequence (model), at
    /// this fraction of `u16::MAX`.
    Ack(u64, u16),
    /// Ack a value given verbatim (may be beyond what was sent, or below the current ack).
    AckRaw(u64, u64),
    /// Advance the clock by this many microseconds.
    Advance(u64),
    /// Predict a failure of the path `(in the past?, micros from now)`, or none.
    Failure(usize, Option<(bool, u64)>),
    Zone(usize, bool),
    /// Poll up to this many times (stopping at the first `None`).
    Poll(u8),
}

fn tcp_info() -> impl Strategy<Value = TcpInfoSample> {
    (
        prop_oneof![1 => Just(0u64), 6 => 1_000u64..2_000_000],
        0u64..1_000_000,
        proptest::option::of(0u64..500_000),
        prop_oneof![1 => Just(0u64), 6 => 1_000u64..200_000],
        prop_oneof![Just(0u32), Just(1), Just(536), Just(1448)],
        prop_oneof![2 => Just(0u64), 3 => 0u64..100_000],
        prop_oneof![3 => Just(0u64), 1 => 0u64..50_000],
        prop_oneof![1 => Just(0u64), 2 => 1_000u64..50_000_000],
        prop_oneof![3 => Just(0u32), 1 => 0u32..6],
        0u64..2_000_000,
    )
        .prop_map(
            |(srtt, rttvar, min_rtt, cwnd, mss, unacked, notsent, rate, backoff, acked)| {
                TcpInfoSample {
                    srtt: Duration::from_micros(srtt),
                    rttvar: Duration::from_micros(rttvar),
                    min_rtt: min_rtt.map(Duration::from_micros),
                    cwnd_bytes: cwnd,
                    mss_bytes: mss,
                    unacked_bytes: unacked,
                    notsent_bytes: notsent,
                    delivery_rate: Bandwidth::from_bytes_per_sec(rate),
                    rto_backoff: backoff,
                    bytes_acked: acked,
                    unacked_age: Duration::ZERO,
                }
            },
        )
}

/// Ordinary operations: realistic ranges, ids within the small universe.
fn op() -> impl Strategy<Value = Op> {
    let p = || 0..NPATHS;
    let f = || 0..NFLOWS;
    prop_oneof![
        6 => p().prop_map(Op::AddPath),
        1 => p().prop_map(Op::RemovePath),
        1 => p().prop_map(Op::ResetPath),
        2 => (p(), prop::bool::weighted(0.7)).prop_map(|(p, a)| Op::SetAlive(p, a)),
        8 => (p(), tcp_info()).prop_map(|(p, s)| Op::TcpInfo(p, s)),
        2 => (p(), 0u64..1_000_000).prop_map(|(p, r)| Op::Rtt(p, r)),
        1 => (p(), 0u64..500_000).prop_map(|(p, d)| Op::Owd(p, d)),
        1 => (p(), 0u64..50_000_000).prop_map(|(p, b)| Op::Bandwidth(p, b)),
        3 => (p(), 0u64..100_000, 0u64..60_000, 0u64..30_000)
            .prop_map(|(p, c, u, n)| Op::Window(p, c, u, n)),
        3 => p().prop_map(Op::Rto),
        1 => p().prop_map(Op::Progress),
        1 => prop_oneof![0.0f64..120.0, Just(-1.0), Just(f64::NAN)].prop_map(Op::TrainSpeed),
        5 => (f(), 0..NUSERS).prop_map(|(f, u)| Op::OpenFlow(f, u)),
        1 => f().prop_map(Op::CloseFlow),
        8 => (f(), prop_oneof![Just(0u64), 1u64..5_000, 5_000u64..40_000])
            .prop_map(|(f, b)| Op::FlowData(f, b)),
        2 => f().prop_map(Op::Fin),
        1 => f().prop_map(Op::Rst),
        2 => (f(), 0u64..20_000).prop_map(|(f, c)| Op::Credit(f, c)),
        1 => (f(), prop_oneof![0u64..20_000, Just(u64::MAX)]).prop_map(|(f, c)| Op::CreditRaw(f, c)),
        6 => (f(), any::<u16>()).prop_map(|(f, x)| Op::Ack(f, x)),
        1 => (f(), 0u64..50_000).prop_map(|(f, a)| Op::AckRaw(f, a)),
        6 => prop_oneof![
            4 => 0u64..10_000,
            2 => 10_000u64..300_000,
            1 => 300_000u64..3_000_000,
        ]
        .prop_map(Op::Advance),
        2 => (
            p(),
            proptest::option::of((any::<bool>(), 0u64..30_000_000))
        )
            .prop_map(|(p, x)| Op::Failure(p, x)),
        1 => (p(), any::<bool>()).prop_map(|(p, z)| Op::Zone(p, z)),
        10 => (1u8..24).prop_map(Op::Poll),
    ]
}

/// Extreme operations: boundary values, any path index, huge times.
fn extreme_op() -> impl Strategy<Value = Op> {
    let p = || prop_oneof![3 => 0..NPATHS, 1 => 0usize..32];
    let f = || prop_oneof![3 => 0..NFLOWS, 1 => any::<u64>()];
    let big = || {
        prop_oneof![
            Just(0u64),
            Just(1u64),
            Just(u64::MAX),
            Just(u64::MAX - 1),
            Just(u64::MAX / 2),
            any::<u64>()
        ]
    };
    let sample = (
        (big(), big(), proptest::option::of(big()), big()),
        (
            prop_oneof![Just(0u32), Just(1), Just(u32::MAX), any::<u32>()],
            big(),
            big(),
            big(),
            0u32..=255,
            big(),
        ),
    )
        .prop_map(
            |((srtt, rttvar, min_rtt, cwnd), (mss, unacked, notsent, rate, backoff, acked))| {
                TcpInfoSample {
                    srtt: Duration::from_micros(srtt),
                    rttvar: Duration::from_micros(rttvar),
                    min_rtt: min_rtt.map(Duration::from_micros),
                    cwnd_bytes: cwnd,
                    mss_bytes: mss,
                    unacked_bytes: unacked,
                    notsent_bytes: notsent,
                    delivery_rate: Bandwidth::from_bytes_per_sec(rate),
                    rto_backoff: backoff,
                    bytes_acked: acked,
                    unacked_age: Duration::ZERO,
                }
            },
        );
    prop_oneof![
        2 => p().prop_map(Op::AddPath),
        1 => p().prop_map(Op::RemovePath),
        1 => p().prop_map(Op::ResetPath),
        1 => (p(), any::<bool>()).prop_map(|(p, a)| Op::SetAlive(p, a)),
        4 => (p(), sample).prop_map(|(p, s)| Op::TcpInfo(p, s)),
        1 => (p(), big()).prop_map(|(p, r)| Op::Rtt(p, r)),
        1 => (p(), big()).prop_map(|(p, d)| Op::Owd(p, d)),
        1 => (p(), big()).prop_map(|(p, b)| Op::Bandwidth(p, b)),
        2 => (p(), big(), big(), big()).prop_map(|(p, c, u, n)| Op::Window(p, c, u, n)),
        1 => p().prop_map(Op::Rto),
        1 => p().prop_map(Op::Progress),
        1 => prop_oneof![
            any::<f64>(),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(f64::MAX),
            Just(f64::MIN_POSITIVE),
            Just(0.0)
        ]
        .prop_map(Op::TrainSpeed),
        2 => (f(), any::<u64>()).prop_map(|(f, u)| Op::OpenFlow(f, u)),
        1 => f().prop_map(Op::CloseFlow),
        2 => (f(), big()).prop_map(|(f, b)| Op::FlowData(f, b)),
        1 => f().prop_map(Op::Fin),
        1 => f().prop_map(Op::Rst),
        1 => (f(), big()).prop_map(|(f, c)| Op::Credit(f, c)),
        1 => (f(), big()).prop_map(|(f, c)| Op::CreditRaw(f, c)),
        1 => (f(), any::<u16>()).prop_map(|(f, x)| Op::Ack(f, x)),
        1 => (f(), big()).prop_map(|(f, a)| Op::AckRaw(f, a)),
        1 => big().prop_map(Op::Advance),
        1 => (p(), proptest::option::of((any::<bool>(), big()))).prop_map(|(p, x)| Op::Failure(p, x)),
        2 => any::<u8>().prop_map(Op::Poll),
    ]
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 1..120)
}

fn mixed_ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(prop_oneof![3 => op(), 1 => extreme_op()], 1..120)
}

/// Configurations for properties 1–5: realistic, chunks of at least one byte, big trace.
fn config() -> impl Strategy<Value = SchedConfig> {
    (
        prop_oneof![Just(1u32), Just(100), Just(1400), 1u32..5_000],
        1u16..=8,
        prop_oneof![2 => Just(u64::MAX), 1 => Just(0u64), 1 => 0u64..20_000],
        1u64..500_000,
        0u64..20_000,
        prop_oneof![Just(1_000_000u64), 1u64..5_000_000],
    )
        .prop_map(|(chunk, attempts, credit, rtt, recheck, pf)| SchedConfig {
            chunk_bytes: chunk,
            initial_rtt: Duration::from_micros(rtt),
            pf_time_constant: Duration::from_micros(pf),
            max_attempts_per_poll: attempts,
            recheck_interval: Duration::from_micros(recheck),
            trace_capacity: TRACE_CAPACITY,
            initial_credit_bytes: credit,
            // Both ways of judging a path's window, by a bit of the arbitrary chunk size.
            window_gain: (chunk % 2 == 0).then_some(DEFAULT_WINDOW_GAIN),
        })
}

/// Configurations for property 6: anything.
fn any_config() -> impl Strategy<Value = SchedConfig> {
    (
        any::<u32>(),
        0u16..=12,
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        prop_oneof![Just(0usize), 1usize..8, Just(TRACE_CAPACITY)],
    )
        .prop_map(
            |(chunk, attempts, credit, rtt, recheck, pf, trace)| SchedConfig {
                chunk_bytes: chunk,
                initial_rtt: Duration::from_micros(rtt),
                pf_time_constant: Duration::from_micros(pf),
                max_attempts_per_poll: attempts,
                recheck_interval: Duration::from_micros(recheck),
                trace_capacity: trace,
                initial_credit_bytes: credit,
                window_gain: (chunk % 2 == 0).then_some(DEFAULT_WINDOW_GAIN),
            },
        )
}

// ----- the model and the checks ------------------------------------------------------------

/// Which properties a run checks.
#[derive(Clone, Copy, Debug, Default)]
struct Checks {
    partition: bool,
    replay: bool,
    deadline: bool,
    sequence: bool,
    errors: bool,
    log: bool,
}

/// What the test knows about a flow from its own inputs and the decisions returned.
#[derive(Clone, Debug)]
struct FlowModel {
    user: UserId,
    buffered: u64,
    fin_at: Option<u64>,
    credit: u64,
    acked: u64,
    /// Highest sequence sent (next new sequence number).
    sent: u64,
    /// Ranges below `sent` never sent (start → end): left behind by chunks placed ahead.
    skipped: BTreeMap<u64, u64>,
    fin_sent: bool,
}

impl FlowModel {
    /// The lowest sequence never sent.
    fn lowest_unsent(&self) -> u64 {
        self.skipped.keys().next().copied().unwrap_or(self.sent)
    }

    /// Whether `[start, end)` lies within one skipped range.
    fn in_skipped(&self, start: u64, end: u64) -> bool {
        self.skipped
            .range(..=start)
            .next_back()
            .is_some_and(|(_, &e)| e >= end)
    }

    /// `[start, end)`, never sent before, was sent as new data.
    fn mark_sent(&mut self, start: u64, end: u64) {
        if start >= self.sent {
            if start > self.sent {
                self.skipped.insert(self.sent, start);
            }
            self.sent = end;
            return;
        }
        if let Some((&s, &e)) = self.skipped.range(..=start).next_back() {
            self.skipped.remove(&s);
            if s < start {
                self.skipped.insert(s, start);
            }
            if end < e {
                self.skipped.insert(end, e);
            }
        }
    }

    /// A cumulative ack: skipped ranges below it are gone.
    fn ack(&mut self, acked: u64) {
        self.acked = self.acked.max(acked);
        let below: Vec<(u64, u64)> = self
            .skipped
            .range(..self.acked)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in below {
            self.skipped.remove(&s);
            if e > self.acked {
                self.skipped.insert(self.acked, e);
            }
        }
    }
}

struct Harness {
    s: Scheduler,
    cfg: SchedConfig,
    pred: FixedPredictions,
    now: Instant,
    /// Latest `now` passed to any call of the scheduler.
    latest: Instant,
    configured: [bool; 32],
    flows: BTreeMap<u64, FlowModel>,
    checks: Checks,
    log: Vec<Entry>,
    /// The pipeline may place new data ahead of the lowest unsent byte (STMS).
    sends_ahead: bool,
}

/// What a run observed, compared between two runs by the determinism property.
#[derive(Debug, PartialEq)]
enum Entry {
    Input {
        op: usize,
        result: Option<Result<(), SchedError>>,
        timeout: Option<Instant>,
        stats: Box<SchedStats>,
    },
    Poll {
        op: usize,
        decision: Option<Decision>,
        moves: Vec<Move>,
        dropped: u32,
        attempts: Vec<Attempt>,
    },
    /// `Debug` of the whole scheduler at the end of the run.
    State(String),
}

fn pid(i: usize) -> PathId {
    PathId::new(i).expect("index below MAX_PATHS")
}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(TestCaseError::fail(format!($($fmt)+)));
        }
    };
}

fn set_of(s: PathSet, c: PathSet, u: PathSet, p: PathId) -> Option<SetName> {
    match (s.contains(p), c.contains(p), u.contains(p)) {
        (true, false, false) => Some(SetName::Selected),
        (false, true, false) => Some(SetName::Candidate),
        (false, false, true) => Some(SetName::Unavailable),
        _ => None,
    }
}

fn allowed(kind: StageKind, from: SetName, to: SetName) -> bool {
    use SetName::*;
    matches!(
        (kind, from, to),
        (StageKind::CandidateFilter, Candidate, Unavailable)
            | (StageKind::SoftSelector, Candidate, Selected)
            | (StageKind::SelectionFilter, Selected, Candidate)
            | (StageKind::HardSelector, Candidate | Unavailable, Selected)
    )
}

impl Harness {
    fn new(spec: Spec, cfg: &SchedConfig, checks: Checks) -> Self {
        Harness {
            s: spec.build(cfg),
            cfg: cfg.clone(),
            pred: FixedPredictions::new(),
            now: Instant::ZERO,
            latest: Instant::ZERO,
            configured: [false; 32],
            flows: BTreeMap::new(),
            checks,
            log: Vec::new(),
            sends_ahead: matches!(spec, Spec::Text(t) if t.contains("stms")),
        }
    }

    /// Check a refused or accepted input against what the model expects.
    fn expect(
        &self,
        what: &str,
        got: Result<(), SchedError>,
        want: Option<SchedError>,
    ) -> Result<(), TestCaseError> {
        if self.checks.errors {
            ensure!(
                got == want.map_or(Ok(()), Err),
                "{what}: got {got:?}, expected {want:?}"
            );
        }
        Ok(())
    }

    fn path_err(&self, p: usize) -> Option<SchedError> {
        (!self.configured[p]).then_some(SchedError::UnknownPath(pid(p)))
    }

    fn flow_err(&self, f: u64) -> Option<SchedError> {
        (!self.flows.contains_key(&f)).then_some(SchedError::UnknownFlow(FlowId(f)))
    }

    fn apply(&mut self, i: usize, op: &Op) -> Result<(), TestCaseError> {
        let now = self.now;
        let what = format!("op #{i} {op:?}");
        let res: Option<Result<(), SchedError>> = match *op {
            Op::AddPath(p) => {
                let r = self.s.add_path(now, pid(p));
                let want = self.configured[p].then_some(SchedError::PathExists(pid(p)));
                self.expect(&what, r, want)?;
                if r.is_ok() {
                    self.configured[p] = true;
                }
                Some(r)
            }
            Op::RemovePath(p) => {
                let r = self.s.remove_path(now, pid(p));
                self.expect(&what, r, self.path_err(p))?;
                if r.is_ok() {
                    self.configured[p] = false;
                }
                Some(r)
            }
            Op::ResetPath(p) => {
                let r = self.s.on_path_reset(now, pid(p));
                self.expect(&what, r, self.path_err(p))?;
                Some(r)
            }
            Op::SetAlive(p, a) => {
                let r = self.s.set_path_alive(now, pid(p), a);
                self.expect(&what, r, self.path_err(p))?;
                Some(r)
            }
            Op::TcpInfo(p, ref sample) => {
                let r = self.s.on_tcp_info(now, pid(p), sample);
                self.expect(&what, r, self.path_err(p))?;
                Some(r)
            }
            Op::Rtt(p, x) => {
                let r = self.s.on_rtt_sample(now, pid(p), Duration::from_micros(x));
                self.expect(&what, r, self.path_err(p))?;
                Some(r)
            }
            Op::Owd(p, x) => {
                let r = self.s.on_owd_sample(now, pid(p), Duration::from_micros(x));
                self.expect(&what, r, self.path_err(p))?;
                Some(r)
            }
            Op::Bandwidth(p, x) => {
                let r = self
                    .s
                    .on_bandwidth_sample(now, pid(p), Bandwidth::from_bytes_per_sec(x));
                self.expect(&what, r, self.path_err(p))?;
                Some(r)
            }
            Op::Window(p, c, u, n) => {
                let r = self.s.on_window(now, pid(p), c, u, n);
                self.expect(&what, r, self.path_err(p))?;
                Some(r)
            }
            Op::Rto(p) => {
                let r = self.s.on_rto(now, pid(p));
                self.expect(&what, r, self.path_err(p))?;
                Some(r)
            }
            Op::Progress(p) => {
                let r = self.s.on_path_progress(now, pid(p));
                self.expect(&what, r, self.path_err(p))?;
                Some(r)
            }
            Op::TrainSpeed(v) => {
                self.s.on_train_speed(now, v);
                None
            }
            Op::OpenFlow(f, u) => {
                let r = self.s.open_flow(now, FlowId(f), UserId(u));
                let want = self
                    .flows
                    .contains_key(&f)
                    .then_some(SchedError::FlowExists(FlowId(f)));
                self.expect(&what, r, want)?;
                if r.is_ok() {
                    self.flows.insert(
                        f,
                        FlowModel {
                            user: UserId(u),
                            buffered: 0,
                            fin_at: None,
                            credit: self.cfg.initial_credit_bytes,
                            acked: 0,
                            sent: 0,
                            skipped: BTreeMap::new(),
                            fin_sent: false,
                        },
                    );
                }
                Some(r)
            }
            Op::CloseFlow(f) => {
                let r = self.s.close_flow(now, FlowId(f));
                self.expect(&what, r, self.flow_err(f))?;
                if r.is_ok() {
                    self.flows.remove(&f);
                }
                Some(r)
            }
            Op::FlowData(f, b) => {
                let r = self.s.on_flow_data(now, FlowId(f), b);
                let want = match self.flows.get(&f) {
                    None => Some(SchedError::UnknownFlow(FlowId(f))),
                    Some(m) if m.fin_at.is_some() => Some(SchedError::DataAfterFin(FlowId(f))),
                    Some(m) => match m.buffered.checked_add(b) {
                        Some(e) if e < u64::MAX => None,
                        _ => Some(SchedError::SeqOverflow(FlowId(f))),
                    },
                };
                self.expect(&what, r, want)?;
                if r.is_ok() {
                    if let Some(m) = self.flows.get_mut(&f) {
                        m.buffered += b;
                    }
                }
                Some(r)
            }
            Op::Fin(f) => {
                let r = self.s.on_flow_fin(now, FlowId(f));
                self.expect(&what, r, self.flow_err(f))?;
                if r.is_ok() {
                    if let Some(m) = self.flows.get_mut(&f) {
                        if m.fin_at.is_none() {
                            m.fin_at = Some(m.buffered);
                        }
                    }
                }
                Some(r)
            }
            Op::Rst(f) => {
                let r = self.s.on_flow_rst(now, FlowId(f));
                self.expect(&what, r, self.flow_err(f))?;
                Some(r)
            }
            Op::Credit(f, d) | Op::CreditRaw(f, d) => {
                let limit = match (op, self.flows.get(&f)) {
                    (Op::Credit(..), Some(m)) => m.acked.saturating_add(d),
                    _ => d,
                };
                let r = self.s.on_flow_credit(now, FlowId(f), limit);
                self.expect(&what, r, self.flow_err(f))?;
                if r.is_ok() {
                    if let Some(m) = self.flows.get_mut(&f) {
                        m.credit = m.credit.max(limit);
                    }
                }
                Some(r)
            }
            Op::Ack(f, _) | Op::AckRaw(f, _) => {
                let ack = match (op, self.flows.get(&f)) {
                    (&Op::Ack(_, x), Some(m)) => {
                        let span = u128::from(m.sent.saturating_sub(m.acked));
                        m.acked + (span * u128::from(x) / u128::from(u16::MAX)) as u64
                    }
                    (&Op::Ack(_, x), None) => u64::from(x),
                    (&Op::AckRaw(_, x), _) => x,
                    _ => unreachable!(),
                };
                let r = self.s.on_flow_ack(now, FlowId(f), ack);
                let want = match self.flows.get(&f) {
                    None => Some(SchedError::UnknownFlow(FlowId(f))),
                    Some(m) if ack > m.sent => Some(SchedError::AckBeyondSent {
                        flow: FlowId(f),
                        ack,
                        sent: m.sent,
                    }),
                    Some(_) => None,
                };
                self.expect(&what, r, want)?;
                if r.is_ok() {
                    if let Some(m) = self.flows.get_mut(&f) {
                        m.ack(ack);
                    }
                }
                Some(r)
            }
            Op::Advance(d) => {
                self.now += Duration::from_micros(d);
                None
            }
            Op::Failure(p, x) => {
                let at = x.map(|(past, d)| {
                    let t = now.as_micros();
                    Instant::from_micros(if past {
                        t.saturating_sub(d)
                    } else {
                        t.saturating_add(d)
                    })
                });
                self.pred.set_failure(pid(p), at);
                None
            }
            Op::Zone(p, z) => {
                self.pred.set_in_zone(pid(p), z);
                None
            }
            Op::Poll(n) => {
                for _ in 0..n {
                    if self.poll(i)?.is_none() {
                        break;
                    }
                }
                None
            }
        };
        // Ops that hand the scheduler no time leave the latest time it saw alone; `Poll` moves
        // it once per poll it makes (none for `Poll(0)`).
        if !matches!(
            op,
            Op::Advance(_) | Op::Failure(..) | Op::Zone(..) | Op::Poll(_)
        ) {
            self.latest = self.latest.max(now);
        }
        if self.checks.deadline {
            if let Some(t) = self.s.poll_timeout() {
                ensure!(
                    t >= self.latest,
                    "{what}: poll_timeout {t} is before the latest now {}",
                    self.latest
                );
            }
        }
        if self.checks.log {
            self.log.push(Entry::Input {
                op: i,
                result: res,
                timeout: self.s.poll_timeout(),
                stats: Box::new(self.s.stats().clone()),
            });
        }
        Ok(())
    }

    fn poll(&mut self, i: usize) -> Result<Option<Decision>, TestCaseError> {
        let live = self.s.live_paths();
        let d = self.s.poll_decision(self.now, &self.pred);
        let ctx = format!("op #{i} poll at {}: decision {d:?}", self.now);
        self.latest = self.latest.max(self.now);
        if self.checks.deadline {
            if let Some(t) = self.s.poll_timeout() {
                ensure!(
                    t >= self.latest,
                    "{ctx}: poll_timeout {t} is before the latest now {}",
                    self.latest
                );
            }
        }
        if self.checks.partition {
            self.check_partition(&ctx, live)?;
        }
        if self.checks.replay {
            self.check_replay(&ctx, live, d)?;
        }
        self.check_sequence(&ctx, d)?;
        if self.checks.log {
            self.log.push(Entry::Poll {
                op: i,
                decision: d,
                moves: self.s.trace().moves().to_vec(),
                dropped: self.s.trace().dropped(),
                attempts: self.s.attempts().to_vec(),
            });
        }
        Ok(d)
    }

    // ----- property 1 ------------------------------------------------------------------

    fn check_partition(&self, ctx: &str, live: PathSet) -> Result<(), TestCaseError> {
        for a in self.s.attempts() {
            for (name, sets) in [("start", a.start), ("end", a.end)] {
                let (s, c, u) = (sets.selected(), sets.candidates(), sets.unavailable());
                ensure!(
                    s.intersection(c).is_empty()
                        && s.intersection(u).is_empty()
                        && c.intersection(u).is_empty(),
                    "{ctx}: attempt {} {name} sets overlap: S={s} C={c} U={u}",
                    a.attempt
                );
                ensure!(
                    s.union(c).union(u) == live,
                    "{ctx}: attempt {} {name} S={s} C={c} U={u} do not cover live {live}",
                    a.attempt
                );
            }
        }
        Ok(())
    }

    // ----- property 2 ------------------------------------------------------------------

    fn check_replay(
        &self,
        ctx: &str,
        live: PathSet,
        d: Option<Decision>,
    ) -> Result<(), TestCaseError> {
        let trace = self.s.trace();
        ensure!(
            trace.dropped() == 0,
            "{ctx}: trace dropped {}",
            trace.dropped()
        );
        let attempts = self.s.attempts();
        ensure!(
            attempts.len() <= usize::from(self.cfg.max_attempts_per_poll),
            "{ctx}: {} attempts > max {}",
            attempts.len(),
            self.cfg.max_attempts_per_poll
        );
        for (k, a) in attempts.iter().enumerate() {
            ensure!(
                usize::from(a.attempt) == k,
                "{ctx}: attempt {k} numbered {}",
                a.attempt
            );
        }
        let moves = trace.moves();
        for w in moves.windows(2) {
            ensure!(
                w[0].attempt <= w[1].attempt,
                "{ctx}: trace out of attempt order: {} then {}",
                w[0],
                w[1]
            );
        }
        for m in moves {
            ensure!(
                usize::from(m.attempt) < attempts.len(),
                "{ctx}: move {m} of an attempt that is not listed"
            );
        }
        for a in attempts {
            self.replay_attempt(ctx, live, a)?;
        }
        // Every attempt but a successful last one selected nothing.
        let (last, earlier) = match attempts.split_last() {
            Some((l, e)) => (Some(l), e),
            None => (None, &[][..]),
        };
        for a in earlier {
            ensure!(
                a.end.selected().is_empty(),
                "{ctx}: attempt {} selected {} but a later chunk was tried",
                a.attempt,
                a.end.selected()
            );
        }
        match d {
            Some(d) => {
                let last = last.ok_or_else(|| {
                    TestCaseError::fail(format!("{ctx}: a decision without attempts"))
                })?;
                ensure!(!d.paths.is_empty(), "{ctx}: decision with no path");
                ensure!(
                    d.paths == last.end.selected(),
                    "{ctx}: decision paths {} != last attempt's S {}",
                    d.paths,
                    last.end.selected()
                );
                ensure!(
                    d.flow == last.chunk.flow
                        && d.user == last.chunk.user
                        && d.offset == last.chunk.offset
                        && d.seq_len() == last.chunk.seq_len
                        && d.reinjection == last.chunk.reinjection,
                    "{ctx}: decision does not match the chunk {:?}",
                    last.chunk
                );
                ensure!(
                    d.paths.is_subset(live),
                    "{ctx}: decision paths {} not all live ({live})",
                    d.paths
                );
                for p in d.paths.iter() {
                    let st = self.s.path(p);
                    ensure!(
                        self.configured[p.index()] && st.is_some_and(|s| s.alive),
                        "{ctx}: decision path {p} is dead or unconfigured"
                    );
                }
            }
            None => {
                if let Some(l) = last {
                    ensure!(
                        l.end.selected().is_empty(),
                        "{ctx}: no decision but attempt {} selected {}",
                        l.attempt,
                        l.end.selected()
                    );
                }
            }
        }
        Ok(())
    }

    fn replay_attempt(&self, ctx: &str, live: PathSet, a: &Attempt) -> Result<(), TestCaseError> {
        let moves: Vec<_> = self
            .s
            .trace()
            .moves()
            .iter()
            .filter(|m| m.attempt == a.attempt)
            .collect();
        let carried = a.chunk.carried_on;
        let chunk_paths: PathSet = moves
            .iter()
            .filter(|m| m.kind.is_none())
            .map(|m| m.path)
            .collect();
        let (s0, c0, u0) = (
            a.start.selected(),
            a.start.candidates(),
            a.start.unavailable(),
        );
        ensure!(
            s0.is_empty() && c0 == live.difference(carried) && u0 == live.intersection(carried),
            "{ctx}: attempt {} starts S={s0} C={c0} U={u0}, live {live}, carried {carried}",
            a.attempt
        );
        ensure!(
            chunk_paths == u0,
            "{ctx}: attempt {}: chunk moves for {chunk_paths}, but U starts as {u0}",
            a.attempt
        );
        // Replay from before the per-chunk bitmap: carried paths back in C.
        let (mut s, mut c, mut u) = (s0, c0.union(chunk_paths), u0.difference(chunk_paths));
        let mut in_stages = false;
        let mut tainted = PathSet::EMPTY;
        for m in &moves {
            let at = set_of(s, c, u, m.path);
            ensure!(
                at == Some(m.from),
                "{ctx}: move {m}: path is in {at:?}, not {}",
                m.from
            );
            match m.kind {
                None => {
                    ensure!(!in_stages, "{ctx}: chunk move {m} after a stage move");
                    ensure!(
                        m.from == SetName::Candidate
                            && m.to == SetName::Unavailable
                            && m.reason == Reason::AlreadyCarried
                            && m.stage == "chunk"
                            && carried.contains(m.path),
                        "{ctx}: bad chunk move {m}"
                    );
                }
                Some(kind) => {
                    if !in_stages {
                        in_stages = true;
                        ensure!(
                            (s, c, u) == (s0, c0, u0),
                            "{ctx}: chunk moves do not lead to the start sets"
                        );
                    }
                    // A selection filter may also put back in S, when S is empty, a path no
                    // stage turned away: TPR's tail chunk to the path that delivers it sooner.
                    let reselect = kind == StageKind::SelectionFilter
                        && m.from == SetName::Candidate
                        && m.to == SetName::Selected
                        && matches!(m.reason, Reason::TailSooner { .. })
                        && s.is_empty()
                        && !tainted.contains(m.path);
                    ensure!(
                        allowed(kind, m.from, m.to) || reselect,
                        "{ctx}: move {m} not allowed for a {kind}"
                    );
                    ensure!(
                        m.reason != Reason::AlreadyCarried,
                        "{ctx}: stage move {m} claims AlreadyCarried"
                    );
                }
            }
            for set in [&mut s, &mut c, &mut u] {
                set.remove(m.path);
            }
            match m.to {
                SetName::Selected => s.insert(m.path),
                SetName::Candidate => c.insert(m.path),
                SetName::Unavailable => u.insert(m.path),
            }
            if m.to == SetName::Unavailable
                || (m.from == SetName::Selected && m.to == SetName::Candidate)
            {
                tainted.insert(m.path);
            }
            if m.to == SetName::Selected && m.kind == Some(StageKind::HardSelector) {
                tainted.remove(m.path);
            }
        }
        if !in_stages {
            ensure!(
                (s, c, u) == (s0, c0, u0),
                "{ctx}: chunk moves do not lead to the start sets"
            );
        }
        let (s1, c1, u1) = (a.end.selected(), a.end.candidates(), a.end.unavailable());
        ensure!(
            (s, c, u) == (s1, c1, u1),
            "{ctx}: attempt {}: replay gives S={s} C={c} U={u}, end is S={s1} C={c1} U={u1}",
            a.attempt
        );
        ensure!(
            s1.intersection(tainted).is_empty(),
            "{ctx}: attempt {}: {} rejected or unselected and sent without a hard selector",
            a.attempt,
            s1.intersection(tainted)
        );
        ensure!(
            s1.intersection(carried).is_empty(),
            "{ctx}: attempt {}: {} already carried the chunk but is selected",
            a.attempt,
            s1.intersection(carried)
        );
        Ok(())
    }

    // ----- property 5 ------------------------------------------------------------------

    /// Update the flow model from a decision; with `checks.sequence`, check the decision
    /// against the model first.
    fn check_sequence(&mut self, ctx: &str, d: Option<Decision>) -> Result<(), TestCaseError> {
        let Some(d) = d else { return Ok(()) };
        let check = self.checks.sequence;
        let chunk_bytes = self.cfg.chunk_bytes;
        let Some(m) = self.flows.get_mut(&d.flow.0) else {
            ensure!(!check, "{ctx}: decision for a flow that is not open");
            return Ok(());
        };
        let before = m.clone();
        if !d.reinjection {
            m.mark_sent(d.offset, d.offset + d.seq_len());
            m.fin_sent |= d.fin;
        }
        if !check {
            return Ok(());
        }
        let m = before;
        ensure!(d.user == m.user, "{ctx}: flow belongs to {}", m.user);
        ensure!(d.seq_len() >= 1, "{ctx}: empty decision");
        ensure!(
            d.len <= chunk_bytes,
            "{ctx}: {} data bytes > chunk_bytes {chunk_bytes}",
            d.len
        );
        let data_end = d.offset + u64::from(d.len);
        ensure!(
            data_end <= m.buffered,
            "{ctx}: data up to {data_end} but only {} supplied",
            m.buffered
        );
        ensure!(
            data_end <= m.credit,
            "{ctx}: data up to {data_end} beyond credit {}",
            m.credit
        );
        if d.fin {
            ensure!(
                m.fin_at == Some(data_end),
                "{ctx}: FIN at {data_end} but the flow's FIN is {:?}",
                m.fin_at
            );
        }
        if d.reinjection {
            ensure!(
                d.offset >= m.acked && d.offset + d.seq_len() <= m.sent,
                "{ctx}: reinjection outside sent-unacked [{}, {})",
                m.acked,
                m.sent
            );
        } else if self.sends_ahead {
            // STMS places chunks ahead: new data covers only bytes never sent.
            ensure!(
                d.offset >= m.sent || m.in_skipped(d.offset, d.offset + d.seq_len()),
                "{ctx}: new data [{}, {}) overlaps sent data (sent up to {}, skipped {:?})",
                d.offset,
                d.offset + d.seq_len(),
                m.sent,
                m.skipped
            );
            ensure!(!(d.fin && m.fin_sent), "{ctx}: FIN sent twice as new data");
        } else {
            ensure!(
                d.offset == m.lowest_unsent() && m.skipped.is_empty(),
                "{ctx}: new data at {} but highest sent is {}",
                d.offset,
                m.sent
            );
            ensure!(!(d.fin && m.fin_sent), "{ctx}: FIN sent twice as new data");
        }
        Ok(())
    }
}

fn run(
    spec: Spec,
    cfg: &SchedConfig,
    ops: &[Op],
    checks: Checks,
) -> Result<Vec<Entry>, TestCaseError> {
    let mut h = Harness::new(spec, cfg, checks);
    for (i, op) in ops.iter().enumerate() {
        h.apply(i, op)
            .map_err(|e| TestCaseError::fail(format!("spec {spec:?}: {e}")))?;
    }
    if checks.log {
        // The whole state at the end: paths, flows, users, in-flight records, PF sums.
        h.log.push(Entry::State(format!("{:?}", h.s)));
    }
    Ok(h.log)
}

fn run_all(cfg: &SchedConfig, ops: &[Op], checks: Checks) -> Result<(), TestCaseError> {
    for spec in all_specs() {
        run(spec, cfg, ops, checks)?;
    }
    Ok(())
}

/// Cases per property: 256, or `PROPTEST_CASES` for longer soak runs.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// Property 1: S, C, U of every attempt, before and after the pipeline, partition the live
    /// paths.
    #[test]
    fn partition(cfg in config(), ops in ops()) {
        run_all(&cfg, &ops, Checks { partition: true, ..Checks::default() })?;
    }

    /// Property 2: the trace replays, every move is legal for its kind, nothing rejected is
    /// sent unless revived, nothing already carried is sent again, decisions match the sets.
    #[test]
    fn moves_replay(cfg in config(), ops in ops()) {
        run_all(&cfg, &ops, Checks { replay: true, ..Checks::default() })?;
    }

    /// Property 3: `poll_timeout()` never lies before the latest `now` given.
    #[test]
    fn deadlines_not_in_past(cfg in config(), ops in ops()) {
        run_all(&cfg, &ops, Checks { deadline: true, ..Checks::default() })?;
    }

    /// Property 4: identical inputs give identical decisions, traces, stats and state.
    #[test]
    fn determinism(cfg in config(), ops in ops()) {
        let checks = Checks { log: true, ..Checks::default() };
        for spec in all_specs() {
            let a = run(spec, &cfg, &ops, checks)?;
            let b = run(spec, &cfg, &ops, checks)?;
            prop_assert_eq!(a.len(), b.len(), "spec {:?}", spec);
            if let Some(k) = a.iter().zip(&b).position(|(x, y)| x != y) {
                prop_assert_eq!(&a[k], &b[k], "spec {:?}: runs diverge at log line {}", spec, k);
            }
        }
    }

    /// Property 5: decisions stay within supplied data and credit, new data goes out in order,
    /// reinjections cover sent-unacked sequence only, chunks are bounded, one FIN at its place.
    #[test]
    fn sequence_sanity(cfg in config(), ops in ops()) {
        run_all(&cfg, &ops, Checks { sequence: true, errors: true, ..Checks::default() })?;
    }

    /// Property 6: arbitrary inputs and configurations never panic; refused inputs give the
    /// error the caller's own bookkeeping predicts.
    #[test]
    fn no_panics(cfg in any_config(), ops in mixed_ops()) {
        run_all(&cfg, &ops, Checks { errors: true, deadline: true, ..Checks::default() })?;
    }
}

/// Directed companion of `no_panics`: BLEST with a 1 µs fast path and a slow path whose RTT is
/// `Duration::MAX` (round trips of the fast path during the slow path's RTT overflowed `u64`).
#[test]
fn blest_extreme_rtt_ratio_does_not_overflow() {
    let cfg = SchedConfig {
        initial_credit_bytes: 100_000,
        trace_capacity: TRACE_CAPACITY,
        ..SchedConfig::default()
    };
    let mut s = Scheduler::from_spec(cfg, "blest").expect("preset");
    let now = Instant::ZERO;
    let (fast, slow) = (pid(0), pid(1));
    s.add_path(now, fast).expect("new path");
    s.add_path(now, slow).expect("new path");
    let full = TcpInfoSample {
        srtt: Duration::from_micros(1),
        rttvar: Duration::ZERO,
        min_rtt: None,
        cwnd_bytes: 0,
        mss_bytes: 1448,
        unacked_bytes: 0,
        notsent_bytes: 0,
        delivery_rate: Bandwidth::ZERO,
        rto_backoff: 0,
        bytes_acked: 0,
        unacked_age: Duration::ZERO,
    };
    s.on_tcp_info(now, fast, &full).expect("configured");
    let with_room = TcpInfoSample {
        srtt: Duration::MAX,
        cwnd_bytes: 100_000,
        ..full
    };
    s.on_tcp_info(now, slow, &with_room).expect("configured");
    s.open_flow(now, FlowId(1), UserId(1)).expect("new flow");
    s.on_flow_data(now, FlowId(1), 5000).expect("open flow");
    // BLEST holds the chunk back for the fast path: no decision, and no panic.
    assert_eq!(s.poll_decision(now, &FixedPredictions::new()), None);
}

#[test]
fn a_filter_after_a_hard_selector_is_refused() {
    // Such an order would let a filter undo a revival, or a selector re-pick a rejected path.
    let stages: Vec<Box<dyn Schedulerlet>> = vec![
        Box::new(MinRtt::default()),
        Box::new(ReviveEven),
        Box::new(Blest::default()),
    ];
    let e = Pipeline::new(stages, Reinjection::None).unwrap_err();
    assert!(
        e.to_string()
            .contains("`blest` (selection filter) cannot come after `revive_even` (hard selector)"),
        "{e}"
    );
}
