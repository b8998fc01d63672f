//! The scheduler: per-path, per-flow and per-user state around a [`Pipeline`].
//!
//! One poll = one decision (POLYCORN §4.7):
//! 1. pick a **user** by proportional fairness,
//! 2. pick one of its **flows** round robin,
//! 3. take the flow's next **chunk**: the smallest unsent sequence, pending reinjections first,
//! 4. run the **pipeline** over S/C/U to choose the paths.
//!
//! If the pipeline selects nothing for that chunk (HPR blocked every path, TPR or BLEST/ECF
//! decided to wait), the next flow of the user and then the next user are tried, up to
//! [`SchedConfig::max_attempts_per_poll`] chunks, so a waiting tail chunk does not idle paths
//! other flows could use.
//!
//! **Proportional fairness.** All users share the same paths, so every user's instantaneous
//! achievable rate is the same and the PF metric `r_u / R_u` reduces to serving the backlogged
//! user with the smallest `R_u`: the exponentially weighted average of bytes scheduled for `u`,
//! with time constant [`SchedConfig::pf_time_constant`] (1 s). The average is kept as a sum of
//! bytes scaled by `exp((t - t_ref) / T)`, so one update costs one `exp` and comparisons need
//! none; `t_ref` is moved forward before the scale overflows.

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;

use crate::flow::{Flow, FlowId, User, UserId};
use crate::path::{PathId, PathSet, PathState, TcpInfoSample, MAX_PATHS};
use crate::predict::HandoverPredictor;
use crate::reinject::{ReinjectAction, STUCK_RTT_FACTOR};
use crate::sets::{Move, PathSets, Reason, SetName, Trace, DEFAULT_TRACE_CAPACITY};
use crate::sets::{Moves, Rejections};
use crate::spec::{Pipeline, SpecError};
use crate::stage::{ChunkView, PathEvent, PathView, StageCtx, TrainContext};
use crate::time::{Bandwidth, Duration, Instant};

/// Default [`SchedConfig::window_gain`]: BBR's window gain.
pub const DEFAULT_WINDOW_GAIN: f64 = 2.0;

/// Tunables of the driver (the stages carry their own constants).
#[derive(Clone, Debug, PartialEq)]
pub struct SchedConfig {
    /// Largest chunk, in data bytes, placed by one decision. Default 1400: about one packet, as
    /// HRSCH decides per packet; leaves room for framing and encryption within a 1448-byte MSS.
    pub chunk_bytes: u32,
    /// RTT assumed for a path before its first sample. Default 200 ms, near the median LTE RTT
    /// measured on HSR (POLYCORN §2: 185/191 ms).
    pub initial_rtt: Duration,
    /// Time constant of the PF average. Default 1 s: a few hundred decisions at HSR rates, short
    /// enough that a passenger returning from idle is served promptly.
    pub pf_time_constant: Duration,
    /// Chunks one poll may try before answering "nothing now". Default 8.
    pub max_attempts_per_poll: u16,
    /// After a poll that had data but sent nothing, [`Scheduler::poll_timeout`] asks to be polled
    /// again this much later even if no sample arrives. Default 5 ms.
    pub recheck_interval: Duration,
    /// Moves kept in the trace of the latest poll (0 disables tracing). Default 256.
    pub trace_capacity: usize,
    /// Credit (highest sendable sequence) a new flow starts with. Default unlimited; the proto
    /// layer sets real credit with [`Scheduler::on_flow_credit`].
    pub initial_credit_bytes: u64,
    /// Cap on each path's window as the scheduler uses it: this many times the larger of the
    /// highest rate the path delivered in the last 10 s × its smallest RTT and what it
    /// delivered in its last RTT, at least 10 segments ([`PathState::window_cap`]). Default
    /// `Some(2.0)`; `None` trusts the kernel's window alone. Values
    /// below 1 (or not finite) mean `None`.
    pub window_gain: Option<f64>,
}

impl Default for SchedConfig {
    fn default() -> Self {
        SchedConfig {
            chunk_bytes: 1400,
            initial_rtt: Duration::from_millis(200),
            pf_time_constant: Duration::from_secs(1),
            max_attempts_per_poll: 8,
            recheck_interval: Duration::from_millis(5),
            trace_capacity: DEFAULT_TRACE_CAPACITY,
            initial_credit_bytes: u64::MAX,
            window_gain: Some(DEFAULT_WINDOW_GAIN),
        }
    }
}

/// What to send: bytes `[offset, offset + len)` of `flow` (plus its FIN if `fin`) on every path
/// in `paths`. More than one path means redundant copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Owner of the flow.
    pub user: UserId,
    /// The flow.
    pub flow: FlowId,
    /// First data byte.
    pub offset: u64,
    /// Data bytes (0 for a bare FIN).
    pub len: u32,
    /// Whether the chunk ends with the flow's FIN.
    pub fin: bool,
    /// Paths to send on (never empty).
    pub paths: PathSet,
    /// Whether this chunk was sent before and is being reinjected.
    pub reinjection: bool,
}

impl Decision {
    /// Sequence space covered: data bytes plus one for a FIN.
    pub fn seq_len(&self) -> u64 {
        u64::from(self.len) + u64::from(self.fin)
    }
}

/// Refused inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SchedError {
    /// The path is not configured.
    #[error("{0} is not configured")]
    UnknownPath(PathId),
    /// The path is already configured.
    #[error("{0} is already configured")]
    PathExists(PathId),
    /// The flow is not open.
    #[error("{0} is not open")]
    UnknownFlow(FlowId),
    /// A flow with this id is already open.
    #[error("{0} is already open")]
    FlowExists(FlowId),
    /// Data after the flow's FIN.
    #[error("{0}: data after FIN")]
    DataAfterFin(FlowId),
    /// An acknowledgement for sequence numbers never sent.
    #[error("{flow}: ack {ack} beyond highest sent sequence {sent}")]
    AckBeyondSent {
        /// The flow.
        flow: FlowId,
        /// The acknowledged sequence.
        ack: u64,
        /// Highest sequence sent.
        sent: u64,
    },
    /// The flow's sequence space would overflow 64 bits.
    #[error("{0}: sequence space overflow")]
    SeqOverflow(FlowId),
}

/// Events kept for [`Scheduler::poll_event`] before the oldest are dropped.
pub const EVENT_QUEUE_CAPACITY: usize = 1024;

/// What started a reinjection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReinjectTrigger {
    /// The path's `consecutive`-th RTO in a row.
    Rto {
        /// RTOs in a row, this one included.
        consecutive: u32,
    },
    /// The path's subflow was re-established (or the path removed).
    Reset,
    /// The predictor reported that the path lost its serving cell (ER with `cell_loss`).
    CellLoss,
    /// Chunks waited on the path far longer than another path's RTT (ER with `stuck_ms`).
    Stuck,
}

impl core::fmt::Display for ReinjectTrigger {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ReinjectTrigger::Rto { consecutive } => write!(f, "RTO #{consecutive}"),
            ReinjectTrigger::Reset => f.write_str("subflow reset"),
            ReinjectTrigger::CellLoss => f.write_str("cell loss"),
            ReinjectTrigger::Stuck => f.write_str("stuck behind a slower path"),
        }
    }
}

/// A change worth a line in an operator's log: a path held back on a prediction or let go
/// again, or chunks moved off a path. Per-decision detail stays in the [`Trace`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SchedEvent {
    /// A prediction-based candidate filter (HPR, the location table) began rejecting `path`.
    PathHeld {
        /// When.
        at: Instant,
        /// The path.
        path: PathId,
        /// The stage.
        stage: &'static str,
        /// Its reason (HPR: predicted time to the failure and the threshold L).
        reason: Reason,
    },
    /// That stage let `path` through again.
    PathReleased {
        /// When.
        at: Instant,
        /// The path.
        path: PathId,
        /// The stage that had held it.
        stage: &'static str,
        /// How long it was held.
        held_for: Duration,
    },
    /// Unacknowledged chunks of `path` went back to their flows to be sent elsewhere.
    Reinjected {
        /// When.
        at: Instant,
        /// The path.
        path: PathId,
        /// Why.
        trigger: ReinjectTrigger,
        /// Chunks moved.
        chunks: u32,
        /// Their sequence units (bytes).
        bytes: u64,
    },
}

/// Counters for metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchedStats {
    /// Polls that returned a decision.
    pub decisions: u64,
    /// Polls in which the pipeline held every tried chunk back (nothing sent).
    pub waits: u64,
    /// Sequence units of new data scheduled (first copy).
    pub new_bytes: u64,
    /// Sequence units of reinjected chunks scheduled (first copy).
    pub reinjected_bytes: u64,
    /// Sequence units of extra copies (redundant, ORI) beyond the first.
    pub redundant_bytes: u64,
    /// Reinjection triggers (an RTO that moved chunks back, a path reset, or a reported cell
    /// loss under ER with `cell_loss`).
    pub reinjection_events: u64,
    /// Reported cell losses that moved a path's chunks back (ER with `cell_loss`).
    pub cell_loss_reinjections: u64,
    /// Chunks sent again elsewhere because they were stuck on their path (ER with `stuck_ms`).
    pub stuck_chunks: u64,
    /// Chunks of new data a stage placed ahead of their flow's lowest unsent byte (STMS).
    pub ahead_chunks: u64,
    /// Sequence units scheduled per path (every copy).
    pub path_bytes: [u64; MAX_PATHS],
    /// Events dropped because nobody polled them ([`EVENT_QUEUE_CAPACITY`]).
    pub events_dropped: u64,
}

/// One chunk tried in the latest poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// Attempt number, matching [`Move::attempt`].
    pub attempt: u16,
    /// The chunk: as the pipeline saw it, or, when a stage placed it ahead
    /// ([`Schedulerlet::place_ahead`](crate::Schedulerlet::place_ahead)), as it was sent.
    pub chunk: ChunkView,
    /// Sets before the first stage.
    pub start: PathSets,
    /// Sets after the last stage; S is what was sent (nothing if empty).
    pub end: PathSets,
}

#[derive(Clone, Copy, Debug)]
struct SentRecord {
    flow_slot: u32,
    flow_gen: u32,
    start: u64,
    end: u64,
    carried_on: PathSet,
    /// When the scheduler placed this copy on the path.
    sent_at: Instant,
}

/// Records older than ER's `stuck_ms` looked at per path and poll (the oldest first), so a
/// long queue of chunks no other path may take costs a bounded scan.
const STUCK_SCAN: usize = 64;

#[derive(Clone, Copy, Debug)]
struct ChunkPick {
    offset: u64,
    seq_len: u64,
    reinjection: bool,
    carried_on: PathSet,
}

impl ChunkPick {
    fn new_data(offset: u64, seq_len: u64) -> Self {
        ChunkPick {
            offset,
            seq_len,
            reinjection: false,
            carried_on: PathSet::EMPTY,
        }
    }
}

/// Rebase the PF clock when weights exceed this.
const PF_MAX_WEIGHT: f64 = 1e100;

/// PF's weight at one instant, and how many small steps led to it since the last full `exp`.
#[derive(Clone, Copy, Debug)]
struct PfWeight {
    at: Instant,
    w: f64,
    steps: u32,
}

/// Largest `Δt / τ` for which the weight is carried forward by a polynomial instead of a
/// full `exp` (its error, below `x⁵ / 120`, is then under 1e-17: none in `f64`).
const PF_SMALL_STEP: f64 = 1e-3;
/// Small steps between two full `exp`s, so rounding cannot accumulate.
const PF_RESYNC_STEPS: u32 = 64;

/// `exp(x)` for `0 <= x <= PF_SMALL_STEP`, to `f64` precision.
fn exp_small(x: f64) -> f64 {
    1.0 + x * (1.0 + x / 2.0 * (1.0 + x / 3.0 * (1.0 + x / 4.0)))
}

/// The multipath scheduler. Pure: no clock, no I/O; every input carries `now`.
#[derive(Debug)]
pub struct Scheduler {
    cfg: SchedConfig,
    pipeline: Pipeline,
    paths: Box<[Option<PathState>; MAX_PATHS]>,
    /// Exactly the indices `i` with `paths[i].is_some()`, so per-poll scans visit only
    /// configured paths instead of all `MAX_PATHS` slots.
    configured: PathSet,
    inflight: Vec<VecDeque<SentRecord>>,
    flows: Vec<Option<Flow>>,
    free_flows: Vec<u32>,
    flow_index: BTreeMap<FlowId, u32>,
    users: Vec<Option<User>>,
    free_users: Vec<u32>,
    user_index: BTreeMap<UserId, u32>,
    active_users: Vec<(u32, u32)>,
    user_tried: Vec<u64>,
    poll_stamp: u64,
    next_gen: u32,
    pf_ref: Instant,
    /// PF's weight `exp((at - pf_ref) / τ)` at `at`: the shells poll many decisions at one
    /// `now`, which then need one `exp`; see [`Scheduler::pf_account`].
    pf_weight: Option<PfWeight>,
    train: TrainContext,
    trace: Trace,
    attempts: Vec<Attempt>,
    last_now: Instant,
    waiting_at: Option<Instant>,
    /// Per path, the cell loss (its start) whose chunks were already reinjected.
    cell_loss_seen: [Option<Instant>; MAX_PATHS],
    /// Rejections of the chunk being decided.
    rejections: Rejections,
    /// Per path: held back on a prediction since, by which stage.
    held: [Option<(Instant, &'static str)>; MAX_PATHS],
    events: VecDeque<SchedEvent>,
    stats: SchedStats,
}

impl Scheduler {
    /// A scheduler running `pipeline`.
    pub fn new(cfg: SchedConfig, pipeline: Pipeline) -> Self {
        let trace = Trace::with_capacity(cfg.trace_capacity);
        Scheduler {
            pipeline,
            paths: Box::new([const { None }; MAX_PATHS]),
            configured: PathSet::EMPTY,
            inflight: (0..MAX_PATHS).map(|_| VecDeque::new()).collect(),
            flows: Vec::new(),
            free_flows: Vec::new(),
            flow_index: BTreeMap::new(),
            users: Vec::new(),
            free_users: Vec::new(),
            user_index: BTreeMap::new(),
            active_users: Vec::new(),
            user_tried: Vec::new(),
            poll_stamp: 0,
            next_gen: 0,
            pf_ref: Instant::ZERO,
            pf_weight: None,
            train: TrainContext::default(),
            trace,
            attempts: Vec::with_capacity(usize::from(cfg.max_attempts_per_poll)),
            last_now: Instant::ZERO,
            waiting_at: None,
            cell_loss_seen: [None; MAX_PATHS],
            rejections: Rejections::default(),
            held: [None; MAX_PATHS],
            events: VecDeque::new(),
            stats: SchedStats::default(),
            cfg,
        }
    }

    /// A scheduler running the pipeline described by `spec` (see [`crate::spec`]).
    pub fn from_spec(cfg: SchedConfig, spec: &str) -> Result<Self, SpecError> {
        Ok(Scheduler::new(cfg, Pipeline::from_spec(spec)?))
    }

    // ----- read access -------------------------------------------------------------------

    /// The configuration.
    pub fn config(&self) -> &SchedConfig {
        &self.cfg
    }
    /// The pipeline.
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }
    /// State of `path`, if configured.
    pub fn path(&self, path: PathId) -> Option<&PathState> {
        self.paths[path.index()].as_ref()
    }
    /// Configured paths that are alive.
    pub fn live_paths(&self) -> PathSet {
        self.configured
            .iter()
            .filter(|&p| self.paths[p.index()].as_ref().is_some_and(|s| s.alive))
            .collect()
    }
    /// Moves of the latest poll.
    pub fn trace(&self) -> &Trace {
        &self.trace
    }
    /// Chunks tried in the latest poll, with their sets before and after the pipeline.
    pub fn attempts(&self) -> &[Attempt] {
        &self.attempts
    }
    /// Counters.
    pub fn stats(&self) -> &SchedStats {
        &self.stats
    }

    /// The next event, oldest first (at most [`EVENT_QUEUE_CAPACITY`] are kept; the count of
    /// dropped ones is in [`SchedStats::events_dropped`]).
    pub fn poll_event(&mut self) -> Option<SchedEvent> {
        self.events.pop_front()
    }

    fn push_event(&mut self, e: SchedEvent) {
        if self.events.len() >= EVENT_QUEUE_CAPACITY {
            self.events.pop_front();
            self.stats.events_dropped += 1;
        }
        self.events.push_back(e);
    }

    /// Train context as last reported.
    pub fn train(&self) -> TrainContext {
        self.train
    }
    /// Bytes of `flow` not yet sent (new data, FIN, pending reinjections).
    pub fn flow_remaining(&self, flow: FlowId) -> Option<u64> {
        self.flow_ref(flow).map(|f| f.remaining())
    }
    /// Pending reinjection bytes of `flow`.
    pub fn flow_pending_reinjection(&self, flow: FlowId) -> Option<u64> {
        self.flow_ref(flow).map(|f| f.pending_bytes)
    }
    /// Chunks of `path` sent and not yet known to be acknowledged (records kept for reinjection).
    pub fn path_unacked_chunks(&self, path: PathId) -> usize {
        self.inflight[path.index()]
            .iter()
            .filter(|r| self.record_live(r))
            .count()
    }
    /// Number of open flows.
    pub fn open_flows(&self) -> usize {
        self.flow_index.len()
    }
    /// Whether any flow has something it could send.
    pub fn has_backlog(&self) -> bool {
        self.flows.iter().flatten().any(Flow::backlogged)
    }

    // ----- paths -------------------------------------------------------------------------

    fn observe(&mut self, now: Instant) {
        self.last_now = self.last_now.max(now);
    }

    fn path_mut(&mut self, path: PathId) -> Result<&mut PathState, SchedError> {
        self.paths[path.index()]
            .as_mut()
            .ok_or(SchedError::UnknownPath(path))
    }

    /// Configure a new live path.
    pub fn add_path(&mut self, now: Instant, path: PathId) -> Result<(), SchedError> {
        self.observe(now);
        if self.paths[path.index()].is_some() {
            return Err(SchedError::PathExists(path));
        }
        self.paths[path.index()] = Some(PathState::new(path, self.cfg.initial_rtt));
        self.configured.insert(path);
        Ok(())
    }

    /// Remove a path; its unacknowledged chunks are reinjected.
    pub fn remove_path(&mut self, now: Instant, path: PathId) -> Result<(), SchedError> {
        self.on_path_reset(now, path)?;
        self.paths[path.index()] = None;
        self.configured.remove(path);
        self.held[path.index()] = None;
        Ok(())
    }

    /// Mark a path up or down (an outage detected by the shell). A down path is in none of
    /// S/C/U; its chunks stay in flight until it recovers, times out (RTO) or is reset.
    pub fn set_path_alive(
        &mut self,
        now: Instant,
        path: PathId,
        alive: bool,
    ) -> Result<(), SchedError> {
        self.observe(now);
        self.path_mut(path)?.alive = alive;
        Ok(())
    }

    /// The subflow of `path` was re-established: everything it held is lost, its chunks are
    /// reinjected (allowed on this path again), and its counters restart.
    pub fn on_path_reset(&mut self, now: Instant, path: PathId) -> Result<(), SchedError> {
        self.observe(now);
        let p = self.path_mut(path)?;
        p.unacked_bytes = 0;
        p.notsent_bytes = 0;
        p.consecutive_rtos = 0;
        p.bytes_acked = 0;
        p.unacked_age = Duration::ZERO;
        let bit = PathSet::single(path);
        let records: Vec<SentRecord> = self.inflight[path.index()].drain(..).collect();
        // The path lost these bytes: forget that it carried them, everywhere.
        for q in self.inflight.iter_mut() {
            for r in q.iter_mut() {
                r.carried_on = r.carried_on.difference(bit);
            }
        }
        for f in self.flows.iter_mut().flatten() {
            for pend in f.pending.values_mut() {
                pend.carried_on = pend.carried_on.difference(bit);
            }
        }
        let records = records.into_iter().map(|r| SentRecord {
            carried_on: r.carried_on.difference(bit),
            ..r
        });
        self.reinject_batch(now, path, ReinjectTrigger::Reset, records);
        self.stats.reinjection_events += 1;
        for s in self.pipeline.stages.iter_mut() {
            s.on_path_event(now, path, PathEvent::Reset);
        }
        Ok(())
    }

    /// Apply a `TCP_INFO` reading; new consecutive RTOs it reveals trigger the reinjection policy.
    pub fn on_tcp_info(
        &mut self,
        now: Instant,
        path: PathId,
        sample: &TcpInfoSample,
    ) -> Result<(), SchedError> {
        self.observe(now);
        let gain = self.cfg.window_gain;
        let p = self.path_mut(path)?;
        let before = p.consecutive_rtos;
        let new_rtos = p.apply_tcp_info(now, sample, gain);
        for i in 1..=new_rtos {
            self.rto_reached(now, path, before + i);
        }
        Ok(())
    }

    /// One RTO fired on `path` (for shells or simulators that see RTO events directly).
    pub fn on_rto(&mut self, now: Instant, path: PathId) -> Result<(), SchedError> {
        self.observe(now);
        let p = self.path_mut(path)?;
        p.consecutive_rtos = p.consecutive_rtos.saturating_add(1);
        let n = p.consecutive_rtos;
        self.rto_reached(now, path, n);
        Ok(())
    }

    /// The path delivered data again: consecutive RTO counting restarts.
    pub fn on_path_progress(&mut self, now: Instant, path: PathId) -> Result<(), SchedError> {
        self.observe(now);
        self.path_mut(path)?.consecutive_rtos = 0;
        Ok(())
    }

    /// An RTT measurement (ping/pong), folded in per RFC 6298.
    pub fn on_rtt_sample(
        &mut self,
        now: Instant,
        path: PathId,
        rtt: Duration,
    ) -> Result<(), SchedError> {
        self.observe(now);
        self.path_mut(path)?.apply_rtt(rtt);
        Ok(())
    }

    /// A one-way delay measurement towards the peer.
    pub fn on_owd_sample(
        &mut self,
        now: Instant,
        path: PathId,
        owd: Duration,
    ) -> Result<(), SchedError> {
        self.observe(now);
        let p = self.path_mut(path)?;
        p.owd = owd;
        p.owd_measured = true;
        Ok(())
    }

    /// A bandwidth estimate from outside `TCP_INFO` (e.g. a simulator or receiver report).
    pub fn on_bandwidth_sample(
        &mut self,
        now: Instant,
        path: PathId,
        bw: Bandwidth,
    ) -> Result<(), SchedError> {
        self.observe(now);
        let p = self.path_mut(path)?;
        p.bandwidth = bw;
        p.bandwidth_at = now;
        Ok(())
    }

    /// Window and queue state reported by a simulator (a subset of `TCP_INFO`).
    pub fn on_window(
        &mut self,
        now: Instant,
        path: PathId,
        cwnd_bytes: u64,
        unacked_bytes: u64,
        notsent_bytes: u64,
    ) -> Result<(), SchedError> {
        self.observe(now);
        let p = self.path_mut(path)?;
        p.cwnd_bytes = cwnd_bytes;
        p.kernel_cwnd_bytes = cwnd_bytes;
        p.unacked_bytes = unacked_bytes;
        p.notsent_bytes = notsent_bytes;
        Ok(())
    }

    /// Train speed from the recent GPS trajectory, m/s. Negative or non-finite values are
    /// treated as unknown.
    pub fn on_train_speed(&mut self, now: Instant, speed_mps: f64) {
        self.observe(now);
        self.train.speed_mps = (speed_mps.is_finite() && speed_mps >= 0.0).then_some(speed_mps);
        self.train.speed_at = now;
    }

    fn rto_reached(&mut self, now: Instant, path: PathId, consecutive: u32) {
        for s in self.pipeline.stages.iter_mut() {
            s.on_path_event(now, path, PathEvent::Rto);
        }
        match self.pipeline.reinjection.action(consecutive) {
            ReinjectAction::Nothing => {}
            ReinjectAction::Oldest => {
                self.prune(path);
                if let Some(r) = self.inflight[path.index()].pop_front() {
                    self.stats.reinjection_events += 1;
                    self.reinject_batch(now, path, ReinjectTrigger::Rto { consecutive }, [r]);
                }
            }
            ReinjectAction::All => {
                self.reinject_all(now, path, ReinjectTrigger::Rto { consecutive });
            }
        }
    }

    /// ER with `cell_loss`: a path whose modem reports no serving cell is dark until its next
    /// cell; move its unacknowledged chunks back once per loss instead of waiting for RTOs.
    fn reinject_lost_cells(&mut self, now: Instant, predictor: &dyn HandoverPredictor) {
        for path in self.configured.iter() {
            let i = path.index();
            let lost = predictor.cell_lost_since(path, now);
            if lost.is_none() || lost == self.cell_loss_seen[i] {
                self.cell_loss_seen[i] = lost;
                continue;
            }
            self.cell_loss_seen[i] = lost;
            self.prune(path);
            if self.reinject_all(now, path, ReinjectTrigger::CellLoss) {
                self.stats.cell_loss_reinjections += 1;
            }
        }
    }

    /// ER with `stuck_ms`: send again, on a faster path, chunks that have waited on theirs much
    /// longer than that path's RTT. Each record is moved once (it leaves its path's queue, and
    /// its copy elsewhere is a new record that knows both paths).
    fn reinject_stuck(&mut self, now: Instant, floor: Duration) {
        for path in self.configured.iter() {
            self.prune(path);
            let mut taken: Vec<SentRecord> = Vec::new();
            let (mut j, mut scanned) = (0, 0);
            while scanned < STUCK_SCAN {
                let Some(&r) = self.inflight[path.index()].get(j) else {
                    break;
                };
                if now - r.sent_at < floor {
                    break; // every later record is younger
                }
                scanned += 1;
                if !self.record_live(&r) {
                    self.inflight[path.index()].remove(j);
                    continue;
                }
                match self.stuck_deadline(&r, floor) {
                    Some(t) if t <= now => {
                        taken.push(r);
                        self.inflight[path.index()].remove(j);
                    }
                    _ => j += 1,
                }
            }
            if !taken.is_empty() {
                self.stats.reinjection_events += 1;
                self.stats.stuck_chunks += taken.len() as u64;
                self.reinject_batch(now, path, ReinjectTrigger::Stuck, taken);
            }
        }
    }

    /// When `r` counts as stuck: once it has waited `floor` and [`STUCK_RTT_FACTOR`] smoothed
    /// RTTs of the fastest live path that does not carry it and that no stage holds back on a
    /// prediction (`None`: no such path).
    fn stuck_deadline(&self, r: &SentRecord, floor: Duration) -> Option<Instant> {
        let fastest = self
            .configured
            .iter()
            .filter(|q| !r.carried_on.contains(*q) && self.held[q.index()].is_none())
            .filter_map(|q| self.paths[q.index()].as_ref())
            .filter(|s| s.alive)
            .map(|s| s.srtt)
            .min()?;
        let wait = Duration::from_micros(fastest.as_micros().saturating_mul(STUCK_RTT_FACTOR));
        Some(r.sent_at + floor.max(wait))
    }

    /// Whether the flow of `r` still exists and has not acknowledged all of it.
    fn record_live(&self, r: &SentRecord) -> bool {
        match self.flows.get(r.flow_slot as usize) {
            Some(Some(f)) => f.gen == r.flow_gen && f.acked < r.end,
            _ => false,
        }
    }

    /// Earliest moment a chunk in flight becomes stuck (ER with `stuck_ms`), looking at the
    /// same records [`Scheduler::reinject_stuck`] would.
    fn next_stuck_deadline(&self) -> Option<Instant> {
        let floor = self.pipeline.reinjection.stuck_after()?;
        let mut best: Option<Instant> = None;
        for path in self.configured.iter() {
            let records = self.inflight[path.index()].iter().take(STUCK_SCAN);
            for r in records.filter(|r| self.record_live(r)) {
                if best.is_some_and(|b| r.sent_at + floor >= b) {
                    break; // this record and every later one become stuck later still
                }
                if let Some(t) = self.stuck_deadline(r, floor) {
                    best = Some(best.map_or(t, |b| b.min(t)));
                }
            }
        }
        best
    }

    /// Move every chunk `path` still holds back to its flow (ER's batch); whether any moved.
    fn reinject_all(&mut self, now: Instant, path: PathId, trigger: ReinjectTrigger) -> bool {
        let records: Vec<SentRecord> = self.inflight[path.index()].drain(..).collect();
        if records.is_empty() {
            return false;
        }
        self.stats.reinjection_events += 1;
        self.reinject_batch(now, path, trigger, records);
        true
    }

    /// Reinject `records` taken off `path` and report them as one event (if any flow took one).
    fn reinject_batch(
        &mut self,
        now: Instant,
        path: PathId,
        trigger: ReinjectTrigger,
        records: impl IntoIterator<Item = SentRecord>,
    ) {
        let (mut chunks, mut bytes) = (0u32, 0u64);
        for r in records {
            if let Some(b) = self.reinject(r) {
                chunks += 1;
                bytes += b;
            }
        }
        if chunks > 0 {
            self.push_event(SchedEvent::Reinjected {
                at: now,
                path,
                trigger,
                chunks,
                bytes,
            });
        }
    }

    /// Put a sent chunk back into its flow; its sequence units, or `None` if its flow is gone.
    fn reinject(&mut self, r: SentRecord) -> Option<u64> {
        let Some(Some(f)) = self.flows.get_mut(r.flow_slot as usize) else {
            return None;
        };
        if f.gen != r.flow_gen {
            return None;
        }
        f.add_pending(r.start, r.end, r.carried_on);
        self.enqueue_flow(r.flow_slot);
        Some(r.end - r.start)
    }

    /// Drop acknowledged records at the front of `path`'s in-flight queue.
    fn prune(&mut self, path: PathId) {
        while let Some(r) = self.inflight[path.index()].front() {
            if self.record_live(r) {
                break;
            }
            self.inflight[path.index()].pop_front();
        }
    }

    // ----- flows and users ---------------------------------------------------------------

    fn flow_ref(&self, flow: FlowId) -> Option<&Flow> {
        let slot = *self.flow_index.get(&flow)?;
        self.flows[slot as usize].as_ref()
    }

    fn flow_slot(&self, flow: FlowId) -> Result<u32, SchedError> {
        self.flow_index
            .get(&flow)
            .copied()
            .ok_or(SchedError::UnknownFlow(flow))
    }

    fn flow_at(&mut self, slot: u32) -> &mut Flow {
        self.flows[slot as usize]
            .as_mut()
            .expect("indexed flow slot is occupied")
    }

    /// Open a flow owned by `user` (the user is created on its first flow).
    pub fn open_flow(
        &mut self,
        now: Instant,
        flow: FlowId,
        user: UserId,
    ) -> Result<(), SchedError> {
        self.observe(now);
        if self.flow_index.contains_key(&flow) {
            return Err(SchedError::FlowExists(flow));
        }
        self.next_gen = self.next_gen.wrapping_add(1);
        let gen = self.next_gen;
        let user_slot = match self.user_index.get(&user) {
            Some(&s) => s,
            None => {
                let u = User::new(user, gen);
                let s = match self.free_users.pop() {
                    Some(s) => {
                        self.users[s as usize] = Some(u);
                        s
                    }
                    None => {
                        self.users.push(Some(u));
                        self.user_tried.push(0);
                        (self.users.len() - 1) as u32
                    }
                };
                self.user_index.insert(user, s);
                s
            }
        };
        if let Some(u) = self.users[user_slot as usize].as_mut() {
            u.flows += 1;
        }
        let f = Flow::new(flow, gen, user_slot, self.cfg.initial_credit_bytes);
        let slot = match self.free_flows.pop() {
            Some(s) => {
                self.flows[s as usize] = Some(f);
                s
            }
            None => {
                self.flows.push(Some(f));
                (self.flows.len() - 1) as u32
            }
        };
        self.flow_index.insert(flow, slot);
        Ok(())
    }

    /// The source gave `bytes` more bytes of `flow`.
    pub fn on_flow_data(
        &mut self,
        now: Instant,
        flow: FlowId,
        bytes: u64,
    ) -> Result<(), SchedError> {
        self.observe(now);
        let slot = self.flow_slot(flow)?;
        let f = self.flow_at(slot);
        if f.fin_at.is_some() {
            return Err(SchedError::DataAfterFin(flow));
        }
        f.buffered_end = f
            .buffered_end
            .checked_add(bytes)
            .filter(|e| *e < u64::MAX)
            .ok_or(SchedError::SeqOverflow(flow))?;
        self.enqueue_flow(slot);
        Ok(())
    }

    /// The source closed `flow` (FIN): every chunk it still sends is a tail chunk, and the FIN
    /// itself is scheduled after the last byte. A second FIN is ignored.
    pub fn on_flow_fin(&mut self, now: Instant, flow: FlowId) -> Result<(), SchedError> {
        self.observe(now);
        let slot = self.flow_slot(flow)?;
        let f = self.flow_at(slot);
        if f.fin_at.is_none() {
            f.fin_at = Some(f.buffered_end);
        }
        f.tail = true;
        self.enqueue_flow(slot);
        Ok(())
    }

    /// An RST was seen for `flow`: what it still sends is tail data.
    pub fn on_flow_rst(&mut self, now: Instant, flow: FlowId) -> Result<(), SchedError> {
        self.observe(now);
        let slot = self.flow_slot(flow)?;
        self.flow_at(slot).tail = true;
        Ok(())
    }

    /// The receiver acknowledged every sequence number below `acked`.
    pub fn on_flow_ack(
        &mut self,
        now: Instant,
        flow: FlowId,
        acked: u64,
    ) -> Result<(), SchedError> {
        self.observe(now);
        let slot = self.flow_slot(flow)?;
        let f = self.flow_at(slot);
        if acked > f.next_new {
            return Err(SchedError::AckBeyondSent {
                flow,
                ack: acked,
                sent: f.next_new,
            });
        }
        f.apply_ack(acked);
        for p in 0..MAX_PATHS {
            if let Some(id) = PathId::new(p) {
                self.prune(id);
            }
        }
        Ok(())
    }

    /// The receiver allows data of `flow` below sequence `limit` (credit only grows).
    pub fn on_flow_credit(
        &mut self,
        now: Instant,
        flow: FlowId,
        limit: u64,
    ) -> Result<(), SchedError> {
        self.observe(now);
        let slot = self.flow_slot(flow)?;
        let f = self.flow_at(slot);
        f.credit_limit = f.credit_limit.max(limit);
        self.enqueue_flow(slot);
        Ok(())
    }

    /// Forget `flow` (both sides done, or reset). Its pending data is dropped.
    pub fn close_flow(&mut self, now: Instant, flow: FlowId) -> Result<(), SchedError> {
        self.observe(now);
        let slot = self
            .flow_index
            .remove(&flow)
            .ok_or(SchedError::UnknownFlow(flow))?;
        let f = self.flows[slot as usize]
            .take()
            .expect("indexed flow slot is occupied");
        self.free_flows.push(slot);
        for s in self.pipeline.stages.iter_mut() {
            s.on_flow_closed(flow);
        }
        let us = f.user_slot as usize;
        let user_gone = match self.users[us].as_mut() {
            Some(u) => {
                u.flows -= 1;
                u.flows == 0
            }
            None => false,
        };
        if user_gone {
            let u = self.users[us].take().expect("checked above");
            self.user_index.remove(&u.id);
            self.free_users.push(us as u32);
            for s in self.pipeline.stages.iter_mut() {
                s.on_user_closed(u.id);
            }
        }
        Ok(())
    }

    fn enqueue_flow(&mut self, slot: u32) {
        let Some(Some(f)) = self.flows.get_mut(slot as usize) else {
            return;
        };
        if f.queued || !f.backlogged() {
            return;
        }
        f.queued = true;
        let (gen, us) = (f.gen, f.user_slot);
        let Some(u) = self.users[us as usize].as_mut() else {
            return;
        };
        u.ring.push_back((slot, gen));
        if !u.active {
            u.active = true;
            self.active_users.push((us, u.gen));
        }
    }

    // ----- decisions ---------------------------------------------------------------------

    /// The backlogged user with the smallest PF average not yet tried in this poll.
    fn pick_user(&mut self) -> Option<u32> {
        let mut best: Option<(u32, f64)> = None;
        let mut i = 0;
        while i < self.active_users.len() {
            let (slot, gen) = self.active_users[i];
            let keep = match self.users[slot as usize].as_mut() {
                Some(u) if u.gen == gen && !u.ring.is_empty() => true,
                Some(u) if u.gen == gen => {
                    u.active = false;
                    false
                }
                _ => false,
            };
            if !keep {
                self.active_users.swap_remove(i);
                continue;
            }
            if self.user_tried[slot as usize] != self.poll_stamp {
                let acc = self.users[slot as usize].as_ref().map_or(0.0, |u| u.pf_acc);
                if best.is_none_or(|(_, b)| acc < b) {
                    best = Some((slot, acc));
                }
            }
            i += 1;
        }
        best.map(|(s, _)| s)
    }

    fn pick_chunk(&self, f: &Flow, live: PathSet) -> Option<ChunkPick> {
        for (&start, p) in f.pending.iter() {
            if !live.is_subset(p.carried_on) {
                return Some(ChunkPick {
                    offset: start,
                    seq_len: p.end - start,
                    reinjection: true,
                    carried_on: p.carried_on,
                });
            }
        }
        let chunk_bytes = u64::from(self.cfg.chunk_bytes.max(1));
        let (offset, seq_len) = f
            .next_skipped_chunk(chunk_bytes)
            .or_else(|| f.next_new_chunk(chunk_bytes))?;
        Some(ChunkPick::new_data(offset, seq_len))
    }

    /// Ask the stages whether the chunk `pick` (new data, at the flow's lowest unsent byte)
    /// should go further ahead; the chunk to send instead, if any.
    fn place_ahead(
        &mut self,
        now: Instant,
        predictor: &dyn HandoverPredictor,
        live: PathSet,
        fs: u32,
        chunk: ChunkView,
        sent_on: PathSet,
    ) -> Option<(ChunkPick, ChunkView)> {
        let ctx = StageCtx {
            now,
            live,
            paths: PathView { paths: &self.paths },
            chunk,
            train: self.train,
            predictor,
        };
        let mut ahead = 0u64;
        for s in self.pipeline.stages.iter_mut() {
            ahead = ahead.max(s.place_ahead(&ctx, sent_on));
        }
        if ahead == 0 {
            return None;
        }
        let f = self.flows[fs as usize].as_ref()?;
        let target = chunk.offset.saturating_add(ahead);
        let (offset, seq_len) =
            f.chunk_at_or_after(target, u64::from(self.cfg.chunk_bytes.max(1)))?;
        let view = ChunkView {
            offset,
            seq_len,
            ..chunk
        };
        Some((ChunkPick::new_data(offset, seq_len), view))
    }

    /// Decide what to send next, or `None` if nothing can be sent now. Call again after every
    /// decision (a poll places one chunk) and whenever a sample, ack or flow event arrives.
    pub fn poll_decision(
        &mut self,
        now: Instant,
        predictor: &dyn HandoverPredictor,
    ) -> Option<Decision> {
        self.observe(now);
        self.trace.clear();
        self.attempts.clear();
        self.poll_stamp += 1;
        if self.pipeline.reinjection.on_cell_loss() {
            self.reinject_lost_cells(now, predictor);
        }
        if let Some(floor) = self.pipeline.reinjection.stuck_after() {
            self.reinject_stuck(now, floor);
        }
        let live = self.live_paths();
        let any_room = live.iter().any(|p| {
            self.paths[p.index()]
                .as_ref()
                .is_some_and(PathState::has_room)
        });
        let mut attempt: u16 = 0;
        if any_room {
            while attempt < self.cfg.max_attempts_per_poll {
                let Some(us) = self.pick_user() else { break };
                self.user_tried[us as usize] = self.poll_stamp;
                let ring_len = self.users[us as usize].as_ref().map_or(0, |u| u.ring.len());
                for _ in 0..ring_len {
                    if attempt >= self.cfg.max_attempts_per_poll {
                        break;
                    }
                    let Some((fs, fgen)) = self.users[us as usize]
                        .as_mut()
                        .and_then(|u| u.ring.pop_front())
                    else {
                        break;
                    };
                    let (pick, chunk_view) = match self.flows[fs as usize].as_mut() {
                        Some(f) if f.gen == fgen => {
                            if !f.backlogged() {
                                f.queued = false;
                                continue;
                            }
                            let f = self.flows[fs as usize].as_ref().expect("just matched");
                            match self.pick_chunk(f, live) {
                                Some(pick) => {
                                    let user = self.users[us as usize]
                                        .as_ref()
                                        .map_or(UserId(0), |u| u.id);
                                    let view = ChunkView {
                                        user,
                                        flow: f.id,
                                        offset: pick.offset,
                                        seq_len: pick.seq_len,
                                        reinjection: pick.reinjection,
                                        carried_on: pick.carried_on,
                                        tail: f.tail,
                                        remaining_bytes: f.remaining(),
                                        unacked_bytes: f
                                            .next_new
                                            .saturating_sub(f.acked)
                                            .saturating_sub(f.skipped_bytes),
                                        window_bytes: f.credit_limit.saturating_sub(f.acked),
                                        data_end: f.buffered_end.min(f.credit_limit),
                                    };
                                    (pick, view)
                                }
                                None => {
                                    self.requeue(us, fs, fgen);
                                    continue;
                                }
                            }
                        }
                        _ => continue,
                    };
                    let sets = self.run_pipeline(now, predictor, attempt, live, chunk_view);
                    attempt += 1;
                    if sets.selected().is_empty() {
                        self.requeue(us, fs, fgen);
                        continue;
                    }
                    let (pick, chunk_view) = if pick.reinjection {
                        (pick, chunk_view)
                    } else {
                        match self.place_ahead(
                            now,
                            predictor,
                            live,
                            fs,
                            chunk_view,
                            sets.selected(),
                        ) {
                            Some((pick, view)) => {
                                if let Some(a) = self.attempts.last_mut() {
                                    a.chunk = view;
                                }
                                if view.offset != chunk_view.offset {
                                    self.stats.ahead_chunks += 1;
                                }
                                (pick, view)
                            }
                            None => (pick, chunk_view),
                        }
                    };
                    let d = self.commit(
                        now,
                        predictor,
                        live,
                        us,
                        fs,
                        pick,
                        chunk_view,
                        sets.selected(),
                    );
                    if self.flows[fs as usize]
                        .as_ref()
                        .is_some_and(Flow::backlogged)
                    {
                        self.requeue(us, fs, fgen);
                    } else if let Some(f) = self.flows[fs as usize].as_mut() {
                        f.queued = false;
                    }
                    self.waiting_at = None;
                    self.stats.decisions += 1;
                    return Some(d);
                }
            }
        }
        // Arm the recheck timer only if the pipeline held chunks back (a wait that time alone may
        // end: TPR, BLEST, ECF, HPR). No window room anywhere, or only reinjections that every
        // live path already carried, change with a sample, an ack or a path event instead.
        if attempt > 0 {
            self.waiting_at = Some(now);
            self.stats.waits += 1;
        } else {
            self.waiting_at = None;
        }
        None
    }

    fn requeue(&mut self, us: u32, fs: u32, fgen: u32) {
        if let Some(u) = self.users[us as usize].as_mut() {
            u.ring.push_back((fs, fgen));
        }
    }

    fn run_pipeline(
        &mut self,
        now: Instant,
        predictor: &dyn HandoverPredictor,
        attempt: u16,
        live: PathSet,
        chunk: ChunkView,
    ) -> PathSets {
        let mut sets = PathSets::start(live, chunk.carried_on);
        let start = sets;
        for p in live.intersection(chunk.carried_on).iter() {
            self.trace.record(Move {
                attempt,
                stage: "chunk",
                kind: None,
                path: p,
                from: SetName::Candidate,
                to: SetName::Unavailable,
                reason: Reason::AlreadyCarried,
            });
        }
        let ctx = StageCtx {
            now,
            live,
            paths: PathView { paths: &self.paths },
            chunk,
            train: self.train,
            predictor,
        };
        self.rejections.clear();
        for stage in self.pipeline.stages.iter_mut() {
            let mut m = Moves::new(
                &mut sets,
                &mut self.trace,
                &mut self.rejections,
                stage.name(),
                stage.kind(),
                attempt,
                chunk.carried_on,
            );
            stage.apply(&ctx, &mut m);
        }
        self.note_holds(now, start.candidates());
        if self.attempts.len() < usize::from(self.cfg.max_attempts_per_poll) {
            self.attempts.push(Attempt {
                attempt,
                chunk,
                start,
                end: sets,
            });
        }
        sets
    }

    /// Turn the latest chunk's rejections into hold and release events. A held path is let go
    /// when it was a candidate for a chunk and no stage rejected it.
    fn note_holds(&mut self, now: Instant, candidates: PathSet) {
        for p in self.rejections.predicted.iter() {
            let i = p.index();
            if self.held[i].is_some() {
                continue;
            }
            if let Some((stage, reason)) = self.rejections.why[i] {
                self.held[i] = Some((now, stage));
                self.push_event(SchedEvent::PathHeld {
                    at: now,
                    path: p,
                    stage,
                    reason,
                });
            }
        }
        for p in candidates.difference(self.rejections.any).iter() {
            if let Some((since, stage)) = self.held[p.index()].take() {
                self.push_event(SchedEvent::PathReleased {
                    at: now,
                    path: p,
                    stage,
                    held_for: now - since,
                });
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn commit(
        &mut self,
        now: Instant,
        predictor: &dyn HandoverPredictor,
        live: PathSet,
        us: u32,
        fs: u32,
        pick: ChunkPick,
        chunk: ChunkView,
        sent_on: PathSet,
    ) -> Decision {
        let seq_len = pick.seq_len;
        let carried = pick.carried_on.union(sent_on);
        let fgen = self.flows[fs as usize].as_ref().map_or(0, |f| f.gen);
        for p in live.iter() {
            let Some(ps) = self.paths[p.index()].as_mut() else {
                continue;
            };
            if sent_on.contains(p) {
                ps.notsent_bytes = ps.notsent_bytes.saturating_add(seq_len);
                ps.last_scheduled = Some(now);
                ps.bytes_elsewhere_since = 0;
                self.stats.path_bytes[p.index()] += seq_len;
            } else {
                ps.bytes_elsewhere_since = ps.bytes_elsewhere_since.saturating_add(seq_len);
            }
        }
        for p in sent_on.iter() {
            self.prune(p);
            self.inflight[p.index()].push_back(SentRecord {
                flow_slot: fs,
                flow_gen: fgen,
                start: pick.offset,
                end: pick.offset + seq_len,
                carried_on: carried,
                sent_at: now,
            });
        }
        let f = self.flow_at(fs);
        if pick.reinjection {
            if let Some(p) = f.pending.remove(&pick.offset) {
                f.pending_bytes -= p.end - pick.offset;
            }
        } else {
            f.mark_new_sent(pick.offset, seq_len);
        }
        let fin = f.carries_fin(pick.offset, seq_len);
        let (flow, user) = (f.id, chunk.user);
        if pick.reinjection {
            self.stats.reinjected_bytes += seq_len;
        } else {
            self.stats.new_bytes += seq_len;
        }
        self.stats.redundant_bytes += seq_len * (sent_on.len() as u64).saturating_sub(1);
        self.pf_account(now, us, seq_len);
        let ctx = StageCtx {
            now,
            live,
            paths: PathView { paths: &self.paths },
            chunk,
            train: self.train,
            predictor,
        };
        for s in self.pipeline.stages.iter_mut() {
            s.on_sent(&ctx, sent_on);
        }
        Decision {
            user,
            flow,
            offset: pick.offset,
            len: (seq_len - u64::from(fin)) as u32,
            fin,
            paths: sent_on,
            reinjection: pick.reinjection,
        }
    }

    /// Adds `bytes` to user `us`'s PF average at `now`. The weight `exp((now - pf_ref) / τ)`
    /// costs one `exp` per distinct `now`, except that a step of at most a thousandth of `τ`
    /// after the previous one (a decision per packet, 100 µs apart at 100 Mbit/s) carries the
    /// previous weight forward by `exp_small`, with a full `exp` every
    /// [`PF_RESYNC_STEPS`] steps.
    fn pf_account(&mut self, now: Instant, us: u32, bytes: u64) {
        let tau = || self.cfg.pf_time_constant.as_secs_f64().max(1e-6);
        let (mut w, steps) = match self.pf_weight {
            Some(p) if p.at == now => (p.w, p.steps),
            Some(p) if now > p.at && p.steps < PF_RESYNC_STEPS => {
                let x = (now - p.at).as_secs_f64() / tau();
                if x <= PF_SMALL_STEP {
                    (p.w * exp_small(x), p.steps + 1)
                } else {
                    (libm::exp((now - self.pf_ref).as_secs_f64() / tau()), 0)
                }
            }
            _ => (libm::exp((now - self.pf_ref).as_secs_f64() / tau()), 0),
        };
        if w > PF_MAX_WEIGHT {
            for u in self.users.iter_mut().flatten() {
                u.pf_acc /= w;
            }
            self.pf_ref = now;
            w = 1.0;
        }
        self.pf_weight = Some(PfWeight { at: now, w, steps });
        if let Some(u) = self.users[us as usize].as_mut() {
            u.pf_acc += bytes as f64 * w;
        }
    }

    /// When to poll again if nothing else happens: set after a poll in which the pipeline held
    /// chunks back, `recheck_interval` later. Never earlier than the latest `now` seen.
    ///
    /// With ER's `stuck_ms`, also when the oldest chunk in flight will have waited long enough
    /// to be sent again on a faster path.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let recheck = self.waiting_at.map(|t| t + self.cfg.recheck_interval);
        let stuck = self.next_stuck_deadline();
        let t = match (recheck, stuck) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        t.map(|t| t.max(self.last_now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_small_is_exp_to_f64_precision() {
        for i in 0..=1000 {
            let x = PF_SMALL_STEP * f64::from(i) / 1000.0;
            let (a, b) = (exp_small(x), libm::exp(x));
            assert!(
                (a - b).abs() <= 2.0 * f64::EPSILON * b,
                "x = {x}: {a} vs {b}"
            );
        }
    }

    #[test]
    fn pf_weight_carried_forward_stays_exact() {
        let mut s = Scheduler::from_spec(SchedConfig::default(), "minrtt").unwrap();
        let mut now = Instant::from_millis(0);
        s.pf_ref = now;
        // Slot 0 without a user: only the weight is computed.
        s.users.push(None);
        // 100 µs steps for 5 s (mostly small steps, a full exp every 64), then a large one.
        for _ in 0..50_000 {
            now += Duration::from_micros(100);
            s.pf_account(now, 0, 0);
        }
        now += Duration::from_millis(300);
        s.pf_account(now, 0, 0);
        for _ in 0..10 {
            now += Duration::from_micros(100);
            s.pf_account(now, 0, 0);
        }
        let w = s.pf_weight.unwrap();
        let exact = libm::exp((now - s.pf_ref).as_secs_f64());
        assert!((w.w - exact).abs() <= 1e-12 * exact, "{} vs {exact}", w.w);
        assert!(w.steps > 0 && w.steps <= PF_RESYNC_STEPS);
    }
}
