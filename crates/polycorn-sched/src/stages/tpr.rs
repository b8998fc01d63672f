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
//! No tunable constants in the paper. `tpr(eta=X)` replaces every path's `eta_j` with the fixed
//! `X`, for sweeps of how much slack the bound needs (`eta=0`: `T+` without relaxation). When
//! there is no other usable path, `T+` is infinite and nothing is rejected.
//!
//! When TPR has turned away every selected path, the chunk waits: for the path `j` that gave
//! the smallest `T+` term (Appendix A's case, where `j`'s window is full), or for `i`'s queue to
//! drain. One wait never ends that way: `i` turned away on its one-way delay alone (`owd_i >
//! T+`, so even an empty queue would not let it through) while `j` has window room. minRTT
//! ranks paths by round-trip time, TPR by one-way delay; where the two orders disagree (delays
//! that differ between the directions, or acknowledgements queued behind the other direction's
//! traffic) minRTT keeps choosing `i` and nothing ever selects `j`. Then `j` gets the chunk at
//! once ([`Reason::TailSooner`]; `tpr(wait=1)` turns this off). A path turned away for its
//! queue still waits, as in the paper: sending the rest of a download on `j` whenever `i`'s
//! queue is long measured slower in the bench (docs/src/notebook/bulk.md).

use crate::path::{PathId, PathState};
use crate::sets::{Moves, Reason, StageKind};
use crate::stage::{Schedulerlet, StageCtx};
use crate::time::Duration;

/// Tail-aware path rejection.
#[derive(Debug, Clone, Default)]
pub struct Tpr {
    /// `tpr(wait=1)`: only turn paths away, never send the chunk on the sooner path itself
    /// (the paper's filter taken literally; the chunk then waits until a selector picks that
    /// path, which may be never). Default off.
    pub wait: bool,
    /// `tpr(eta=X)`: a fixed `eta` for every path instead of its `rttvar / srtt`. Default:
    /// the paper's `rttvar / srtt`.
    pub eta: Option<f64>,
}

impl Tpr {
    /// `T-(i)`: delivery time of a new chunk on `p`, at least.
    pub fn t_minus(p: &PathState) -> Duration {
        p.owd + p.effective_bandwidth().time_to_send(p.queued_bytes())
    }

    /// One term of `T+`: completion time of `remain_bytes` sent entirely on `p`, relaxed by
    /// the path's `eta = rttvar / srtt`.
    pub fn t_plus_term(p: &PathState, remain_bytes: u64) -> Duration {
        Self::t_plus_term_eta(p, remain_bytes, p.rtt_variability())
    }

    /// One term of `T+` relaxed by `eta`.
    pub fn t_plus_term_eta(p: &PathState, remain_bytes: u64, eta: f64) -> Duration {
        let base = p.owd
            + p.effective_bandwidth()
                .time_to_send(p.queued_bytes().saturating_add(remain_bytes));
        if base == Duration::MAX {
            return Duration::MAX;
        }
        Duration::from_secs_f64(base.as_secs_f64() * (1.0 + eta))
    }
}

impl Schedulerlet for Tpr {
    fn name(&self) -> &'static str {
        "tpr"
    }
    fn params(&self) -> alloc::string::String {
        let mut out: alloc::vec::Vec<alloc::string::String> = alloc::vec::Vec::new();
        if let Some(eta) = self.eta {
            out.push(alloc::format!("eta={eta}"));
        }
        if self.wait {
            out.push("wait=1".into());
        }
        out.join(",")
    }
    fn kind(&self) -> StageKind {
        StageKind::SelectionFilter
    }
    fn apply(&mut self, ctx: &StageCtx<'_>, moves: &mut Moves<'_>) {
        if !ctx.chunk.tail {
            return;
        }
        let usable = moves.selected().union(moves.candidates());
        // The path the chunk was turned away for, by its T+ term, and the T- turned away.
        let mut instead: Option<(Duration, PathId, Duration)> = None;
        for i in moves.selected().iter() {
            let best = usable
                .iter()
                .filter(|j| *j != i)
                .map(|j| {
                    let p = ctx.paths.get(j);
                    let eta = self.eta.unwrap_or_else(|| p.rtt_variability());
                    (Tpr::t_plus_term_eta(p, ctx.chunk.remaining_bytes, eta), j)
                })
                .min();
            let t_plus = best.map_or(Duration::MAX, |(t, _)| t);
            let t_minus = Tpr::t_minus(ctx.paths.get(i));
            if t_minus > t_plus && moves.unselect(i, Reason::TailSlower { t_minus, t_plus }) {
                // Turned away on its delay alone: no draining of its queue would help.
                let for_good = ctx.paths.get(i).owd > t_plus;
                if let (Some((t, j)), true) = (best, for_good) {
                    if instead.is_none_or(|(u, _, _)| t < u) {
                        instead = Some((t, j, t_minus));
                    }
                }
            }
        }
        if let Some((_, j, t_rejected)) = instead.filter(|_| !self.wait) {
            let pj = ctx.paths.get(j);
            if moves.selected().is_empty() && moves.candidates().contains(j) && pj.has_room() {
                moves.reselect(
                    j,
                    Reason::TailSooner {
                        t_minus: Tpr::t_minus(pj),
                        t_rejected,
                    },
                );
            }
        }
    }
}
