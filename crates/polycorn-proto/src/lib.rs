//! polycorn's wire protocol and multiplexing session, without I/O and without a clock.
//!
//! * [`frame`]: the frames relay and proxy exchange over every subflow, their encoding, and a
//!   decoder that turns any byte string into a frame, a request for more bytes, or a typed
//!   error (never a panic).
//! * [`session`]: one relay–proxy session shared by all subflows: per-flow send and receive
//!   buffers, reordering, duplicate removal, acknowledgements, credit-based flow control,
//!   reliable control frames, path probes, and the `polycorn-sched` scheduler that decides
//!   which path carries which chunk.
//! * [`path_policy`]: (relay) when a path's subflow is replaced by a fresh connection (a
//!   silent path, an idle subflow with stale congestion state, a subflow stuck in RTO
//!   back-off, renewed credentials) and the pauses between connection attempts.
//! * [`refresh_watch`]: (proxy) when to ask the relay for a fresh subflow (a slow-start
//!   threshold cut while the path was idle).
//! * [`predictor`]: the handover predictor fed with train context ([`TrainPredictor`]).
//! * [`write_log`]: when the bytes written to a subflow were handed to its socket (the age of
//!   the oldest unacknowledged ones, a `TCP_INFO` field the kernel lacks).
//!
//! The shell (`polycorn-net`, or `polycorn-sim` in virtual time) owns sockets and time and calls
//! in; this crate is the same in the relay, the proxy, the simulator and tests.

pub mod frame;
pub mod path_policy;
pub mod predictor;
pub mod refresh_watch;
pub mod session;
pub mod write_log;

pub use frame::{
    decode, valid_path_name, CellInfo, CloseReason, ContextInfo, Destination, Frame, FrameError,
    OpenStatus, ResetReason, Role, CHECK_SESSION, MAX_PATH_NAME, MIN_VERSION, REFRESH_VERSION,
    SESSION_PATH, VERSION,
};
pub use predictor::TrainPredictor;
pub use session::{
    Event, FlowTotals, HelloOutcome, PathCounters, PeerHello, ProtoError, ReadOutcome,
    ReorderStats, Session, SessionConfig, Unopened,
};
pub use write_log::WriteLog;
