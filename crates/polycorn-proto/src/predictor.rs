//! The handover predictor as a session's shell holds it: a `polycorn-sched` predictor that
//! also takes the train context (GPS fix, speed, heading, serving cells) as it arrives.
//! `polycorn-net` wraps LinkDB's predictor in it; `polycorn-sim` takes any, including one
//! that knows a simulated trip's ground truth.

use polycorn_sched::predict::{HandoverPredictor, NoPrediction};
use polycorn_sched::time::Instant;

use crate::frame::ContextInfo;

/// A handover predictor fed with train context.
pub trait TrainPredictor: HandoverPredictor + Send {
    /// New context (from the relay's GPS and modems) at `now`.
    fn on_context(&mut self, now: Instant, ctx: &ContextInfo);
}

impl TrainPredictor for NoPrediction {
    fn on_context(&mut self, _now: Instant, _ctx: &ContextInfo) {}
}
