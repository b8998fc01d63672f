//! Redundant — soft selector that sends every chunk on every path with window room.
//!
//! Source: Frömmgen et al., "ReMP TCP: Low latency multipath TCP", ICC'16, and the out-of-tree
//! kernel's `mptcp_redundant.c`. The receiver keeps the first copy. No constants.

use crate::sets::{Moves, Reason, StageKind};
use crate::stage::{Schedulerlet, StageCtx};

/// All candidates with window room.
#[derive(Debug, Clone, Default)]
pub struct Redundant;

impl Schedulerlet for Redundant {
    fn name(&self) -> &'static str {
        "redundant"
    }
    fn kind(&self) -> StageKind {
        StageKind::SoftSelector
    }
    fn apply(&mut self, ctx: &StageCtx<'_>, moves: &mut Moves<'_>) {
        for p in ctx.paths.with_room(moves.candidates()).iter() {
            moves.select(p, Reason::AllPaths);
        }
    }
}
