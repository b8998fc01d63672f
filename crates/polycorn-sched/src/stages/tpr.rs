//! TPR — tail-aware path rejection (selection filter).
//!
//! Source: POLYCORN (NSDI'23) §4.4 and Appendix A. Once a flow's FIN or RST has been seen, every
//! chunk it still has to send is a tail chunk. For a tail chunk, a selected path `i` is sent back
//! to C when
//!
//! ```text
//! T-(i) = owd_i + buf_i / bw_i                                     (lower bound using i)
//! T+(i) = min_{j != i} (owd_j + (buf_j + remain_f) / bw_j) * (1 + eta_j)   (upper bound without i)
//! T-(i) > T+(i)
//! ```
//!
//! with `eta_j = rttvar_j / srtt_j`. Definitions used here (the paper leaves them to the
//! implementation):
//! * `buf_i` — bytes the subflow holds ahead of a new chunk: in flight plus not yet sent. A
//!   full window must drain before new data leaves, which is Appendix A's situation.
//! * `bw_i` — the path's bandwidth estimate (delivery rate), else `cwnd / srtt`.
//! * `remain_f` — the flow's bytes not yet sent, this chunk and pending reinjections included.
//! * `j` ranges over live paths in S or C other than `i` (paths in U cannot carry the flow).
//!
//! No tunable constants. When there is no other usable path, `T+` is infinite and nothing is
//! rejected.

use crate::path::PathState;
use crate::sets::{Moves, Reason, StageKind};
use crate::stage::{Schedulerlet, StageCtx};
use crate::time::Duration;

/// Tail-aware path rejection.
#[derive(Debug, Clone, Default)]
pub struct Tpr;

impl Tpr {
    /// `T-(i)`: delivery time of a new chunk on `p`, at least.
    pub fn t_minus(p: &PathState) -> Duration {
        p.owd + p.effective_bandwidth().time_to_send(p.queued_bytes())
    }

    /// One term of `T+`: completion time of `remain_bytes` sent entirely on `p`, relaxed.
    pub fn t_plus_term(p: &PathState, remain_bytes: u64) -> Duration {
        let base = p.owd
            + p.effective_bandwidth()
                .time_to_send(p.queued_bytes().saturating_add(remain_bytes));
        if base == Duration::MAX {
            return Duration::MAX;
        }
        Duration::from_secs_f64(base.as_secs_f64() * (1.0 + p.rtt_variability()))
    }
}

impl Schedulerlet for Tpr {
    fn name(&self) -> &'static str {
        "tpr"
    }
    fn kind(&self) -> StageKind {
        StageKind::SelectionFilter
    }
    fn apply(&mut self, ctx: &StageCtx<'_>, moves: &mut Moves<'_>) {
        if !ctx.chunk.tail {
            return;
        }
        let usable = moves.selected().union(moves.candidates());
        for i in moves.selected().iter() {
            let t_plus = usable
                .iter()
                .filter(|j| *j != i)
                .map(|j| Tpr::t_plus_term(ctx.paths.get(j), ctx.chunk.remaining_bytes))
                .min()
                .unwrap_or(Duration::MAX);
            let t_minus = Tpr::t_minus(ctx.paths.get(i));
            if t_minus > t_plus {
                moves.unselect(i, Reason::TailSlower { t_minus, t_plus });
            }
        }
    }
}
