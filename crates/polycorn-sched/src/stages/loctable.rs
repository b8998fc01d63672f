//! Location-table blocker — candidate filter.
//!
//! Source: Kim & Cho, "Enhancing MPTCP Performance on High-Speed Trains with Predictive
//! Handover-Aware Packet Scheduling": trips record where each carrier's
//! handovers happened; while the train is inside a recorded handover zone of a path, that path
//! is blocked, and otherwise the default minRTT scheduler decides. The table lookup lives behind
//! [`HandoverPredictor::in_handover_zone`](crate::HandoverPredictor::in_handover_zone) (LinkDB
//! implements it). No constants here; zone extents are LinkDB's.

use crate::sets::{Moves, Reason, StageKind};
use crate::stage::{Schedulerlet, StageCtx};

/// Block paths while inside one of their recorded handover zones.
#[derive(Debug, Clone, Default)]
pub struct LocationTable;

impl Schedulerlet for LocationTable {
    fn name(&self) -> &'static str {
        "loctable"
    }
    fn kind(&self) -> StageKind {
        StageKind::CandidateFilter
    }
    fn apply(&mut self, ctx: &StageCtx<'_>, moves: &mut Moves<'_>) {
        for p in moves.candidates().iter() {
            if ctx.predictor.in_handover_zone(p, ctx.now) {
                moves.reject(p, Reason::InHandoverZone);
            }
        }
    }
}
