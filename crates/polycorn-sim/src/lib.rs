//! polycorn's deterministic simulator: the production relay and proxy logic (the same
//! `polycorn-proto` sessions and `polycorn-sched` pipelines) over `polycorn-link` links and a
//! modelled TCP subflow per path, run in virtual time on one thread per ride. Pure: no clock,
//! no I/O, no threads; the same configuration gives the same results.
//!
//! - [`queue`]: the event queue in virtual time.
//! - [`wire`]: one direction of one path: a `polycorn-link` link and the packets on it.
//! - [`transport`]: one end of a subflow's TCP connection as the ride drives it.
//! - [`tcp`]: the TCP subflow model (segments, congestion control, loss recovery, RTO, send
//!   buffer, and a `TCP_INFO`-equivalent sample).
//! - [`end`]: one end of the session (relay or proxy): frames in, output out, `TCP_INFO`.
//! - [`upkeep`]: the relay's path upkeep (`polycorn_proto::path_policy`) with modelled
//!   connection handshakes, and what a path's links carry.
//! - [`predict`]: train context frames from the trip and the handover predictors each end
//!   holds (any `TrainPredictor`, or the trip's ground truth).
//! - [`apps`]: the passengers behind the relay and the servers behind the proxy.
//! - [`workload`]: what a ride carries and what it measured.
//! - [`ride`]: one ride from start to end.
//! - [`budget`]: where each download's time beyond the oracle's went.
//! - [`bulk`]: one saturating download per path on its own (the simulated side of
//!   `polycorn testbed calibrate`).

pub mod apps;
pub mod budget;
pub mod bulk;
pub mod end;
pub mod predict;
pub mod queue;
pub mod ride;
pub mod tcp;
pub mod transport;
pub mod upkeep;
pub mod wire;
pub mod workload;

pub use predict::{GroundTruth, Prediction, PredictorFactory};
pub use ride::{run, RideConfig, RideResult, SimError};
pub use upkeep::{Replacement, Upkeep};
pub use workload::{ImAnswer, ImSegment, Transfer, TransferResult, Workload};
