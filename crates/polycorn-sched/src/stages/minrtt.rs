//! minRTT — the Linux MPTCP default scheduler as a soft selector.
//!
//! Source: Paasch et al., "Experimental evaluation of multipath TCP schedulers", CSWS'14, and the
//! out-of-tree kernel's `mptcp_sched.c` default scheduler; POLYCORN §4.2 reuses it as HRSCH's soft
//! selector. Picks, among candidates whose congestion window has room, the one with the lowest
//! smoothed RTT (ties: lowest path index, for determinism). No constants.

use crate::sets::{Moves, Reason, StageKind};
use crate::stage::{Schedulerlet, StageCtx};

/// Lowest smoothed RTT among candidates with window room.
#[derive(Debug, Clone, Default)]
pub struct MinRtt;

impl Schedulerlet for MinRtt {
    fn name(&self) -> &'static str {
        "minrtt"
    }
    fn kind(&self) -> StageKind {
        StageKind::SoftSelector
    }
    fn apply(&mut self, ctx: &StageCtx<'_>, moves: &mut Moves<'_>) {
        let best = moves
            .candidates()
            .iter()
            .map(|p| ctx.paths.get(p))
            .filter(|s| s.has_room())
            .min_by_key(|s| (s.srtt, s.id));
        if let Some(s) = best {
            moves.select(s.id, Reason::LowestRtt { srtt: s.srtt });
        }
    }
}
