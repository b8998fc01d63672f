//! Round robin — soft selector.
//!
//! Source: the out-of-tree Linux MPTCP `mptcp_rr.c` scheduler (one segment per subflow in turn,
//! skipping subflows whose window is full). The kernel's `num_segments` burst is 1 here: polycorn
//! already decides per chunk. No other constants.

use crate::path::PathId;
use crate::sets::{Moves, Reason, StageKind};
use crate::stage::{Schedulerlet, StageCtx};

/// The next candidate after the last one used, in index order, with window room.
#[derive(Debug, Clone, Default)]
pub struct RoundRobin {
    last: Option<PathId>,
}

impl Schedulerlet for RoundRobin {
    fn name(&self) -> &'static str {
        "rr"
    }
    fn kind(&self) -> StageKind {
        StageKind::SoftSelector
    }
    fn apply(&mut self, ctx: &StageCtx<'_>, moves: &mut Moves<'_>) {
        let ready = ctx.paths.with_room(moves.candidates());
        let start = self.last.map_or(0, |p| p.index() + 1);
        let next = ready
            .iter()
            .find(|p| p.index() >= start)
            .or_else(|| ready.first());
        if let Some(p) = next {
            moves.select(p, Reason::NextInTurn);
        }
    }
    fn on_sent(&mut self, _ctx: &StageCtx<'_>, sent_on: crate::path::PathSet) {
        if let Some(p) = sent_on.first() {
            self.last = Some(p);
        }
    }
}
