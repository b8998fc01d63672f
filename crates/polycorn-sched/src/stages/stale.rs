//! Stale — leave out paths waiting out a retransmission timeout (candidate filter).
//!
//! Source: the default scheduler of the out-of-tree Linux MPTCP (v0.9x) skips a subflow whose
//! retransmission timer has fired ("potentially failed") until it makes progress again; upstream
//! MPTCP has a similar notion of stale subflows. On a train this is the path whose cell has just
//! come back after a blackout: its TCP subflow will not send anything new until its backed-off
//! RTO timer fires (seconds after a 1–10 s blackout), so a chunk placed there waits that long
//! although the path looks idle, with window room and its old, low RTT.
//!
//! A candidate whose subflow reports a non-zero RTO backoff ([`PathState::consecutive_rtos`],
//! the kernel's `tcpi_backoff`) moves from C to U — but only while another candidate has none,
//! so a chunk is never held back for lack of a path. The path is a candidate again as soon as
//! its subflow's backoff returns to 0 (an acknowledgement of new data).
//!
//! [`PathState::consecutive_rtos`]: crate::path::PathState::consecutive_rtos

use crate::sets::{Moves, Reason, StageKind};
use crate::stage::{Schedulerlet, StageCtx};

/// Stale-path filter (MPTCP's potentially-failed subflows).
#[derive(Debug, Clone, Copy, Default)]
pub struct Stale;

impl Schedulerlet for Stale {
    fn name(&self) -> &'static str {
        "stale"
    }
    fn kind(&self) -> StageKind {
        StageKind::CandidateFilter
    }
    fn apply(&mut self, ctx: &StageCtx<'_>, moves: &mut Moves<'_>) {
        let candidates = moves.candidates();
        if !candidates
            .iter()
            .any(|p| ctx.paths.get(p).consecutive_rtos == 0)
        {
            return;
        }
        for p in candidates.iter() {
            let backoff = ctx.paths.get(p).consecutive_rtos;
            if backoff > 0 {
                moves.reject(p, Reason::RtoBackoff { backoff });
            }
        }
    }
}
