//! # polycorn-sched — the composable multipath scheduler
//!
//! POLYCORN's HRSCH scheduler (NSDI'23 §4.2–§4.7) and the baselines it is compared with, as a
//! pure library. The same code decides in the on-train relay (uplink), the cloud proxy
//! (downlink), the emulator and any simulation.
//!
//! ## Contract
//! * **No I/O, no clock, no global randomness.** The crate is `#![no_std]` (with `alloc`): it
//!   cannot read a clock or open a socket. Every input carries `now` ([`Instant`], integer
//!   microseconds chosen by the caller).
//! * **Inputs in, decisions polled.** Feed samples (`on_tcp_info`, `on_rtt_sample`, `on_rto`, …),
//!   flow events (`open_flow`, `on_flow_data`, `on_flow_fin`, `on_flow_ack`, …) and train speed;
//!   call [`Scheduler::poll_decision`] until it returns `None`; call it again at
//!   [`Scheduler::poll_timeout`] or on the next input.
//! * **Deterministic.** Identical inputs give identical decisions and traces.
//! * **Explainable.** Every move of a path between the sets S (selected), C (candidate) and
//!   U (unavailable) is recorded with the stage, the sets and a [`Reason`] carrying the numbers
//!   behind it ([`Scheduler::trace`], [`Scheduler::attempts`]).
//!
//! ## Map
//! * [`time`] — `Instant`, `Duration`, `Bandwidth`.
//! * [`path`] — `PathId`, `PathSet` (bitmask, up to 32 paths), `PathState`, `TcpInfoSample`.
//! * [`sets`] — S/C/U, stage kinds, kind-checked [`Moves`], the [`Trace`].
//! * [`stage`] — the [`Schedulerlet`] trait and what a stage may read ([`StageCtx`]).
//! * [`stages`] — HRSCH's HPR, minRTT, TPR, ORI and the baselines (round robin, redundant,
//!   BLEST, ECF, STMS, MuSher, single path, location table), one file each. STMS and MuSher
//!   have no public reference code the pipeline could follow: they are written from their
//!   papers, each module saying which choices it made.
//! * [`reinject`] — reinjection policies: none, MPTCP's oldest-on-RTO, and ER.
//! * [`predict`] — the [`HandoverPredictor`] interface LinkDB implements.
//! * [`spec`] — pipelines from text (`"hpr,minrtt,tpr,ori+er"`, presets like `"hrsch"`).
//! * [`scheduler`] — the driver: PF user pick, round-robin flow pick, chunk pick, bookkeeping.
//!
//! ## Example
//! ```
//! use polycorn_sched::*;
//! let mut s = Scheduler::from_spec(SchedConfig::default(), "hrsch").unwrap();
//! let now = Instant::from_millis(0);
//! let (a, b) = (PathId::new(0).unwrap(), PathId::new(1).unwrap());
//! s.add_path(now, a).unwrap();
//! s.add_path(now, b).unwrap();
//! s.on_rtt_sample(now, b, Duration::from_millis(400)).unwrap();
//! s.open_flow(now, FlowId(1), UserId(7)).unwrap();
//! s.on_flow_data(now, FlowId(1), 3000).unwrap();
//! let d = s.poll_decision(now, &NoPrediction).unwrap();
//! assert_eq!((d.offset, d.len), (0, 1400));
//! assert!(d.paths.contains(a));
//! ```

#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod flow;
pub mod path;
pub mod predict;
pub mod reinject;
pub mod scheduler;
pub mod sets;
pub mod spec;
pub mod stage;
pub mod stages;
pub mod time;

pub use flow::{FlowId, UserId};
pub use path::{PathId, PathSet, PathState, TcpInfoSample, MAX_PATHS};
pub use predict::{FixedPredictions, HandoverPredictor, NoPrediction};
pub use reinject::Reinjection;
pub use scheduler::{
    Attempt, Decision, ReinjectTrigger, SchedConfig, SchedError, SchedEvent, SchedStats, Scheduler,
    DEFAULT_WINDOW_GAIN,
};
pub use sets::{Move, Moves, PathSets, Reason, SetName, StageKind, Trace};
pub use spec::{Pipeline, SpecError, PRESETS, STAGES};
pub use stage::{ChunkView, PathEvent, PathView, Schedulerlet, StageCtx, TrainContext};
pub use time::{Bandwidth, Duration, Instant};
