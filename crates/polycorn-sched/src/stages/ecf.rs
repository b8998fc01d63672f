//! ECF — earliest completion first (selection filter placed after minRTT).
//!
//! Source: Lim, Nahum, Towsley, Gibbens, "ECF: An MPTCP Path Scheduler to Manage Heterogeneous
//! Paths", CoNEXT 2017, and its reference implementation in the out-of-tree Linux MPTCP kernel
//! (`mptcp_ecf.c`, v0.95).
//!
//! When minRTT picked a path `s` other than the fastest path `f`, ECF compares finishing the
//! flow's queued bytes `k` on `f` alone (waiting for its window) with using `s` now:
//!
//! ```text
//! x_f = max(k, cwnd_f);  delta = max(rttvar_f, rttvar_s)
//! if srtt_f · (x_f + cwnd_f) < cwnd_f · (srtt_s + delta) · (1 + waiting · beta):
//!     x_s = max(k, cwnd_s)
//!     if srtt_s · x_s >= cwnd_s · (2 · srtt_f + delta):  waiting = 1, do not use s (S → C)
//! else: waiting = 0
//! ```
//!
//! Constants: `beta = 0.25` (the kernel's `r_beta = 4`), the hysteresis that keeps ECF waiting
//! once it decided to wait. `waiting` is kept per flow, as the kernel keeps it per connection.
//! `k` is the flow's bytes not yet handed to any subflow (this chunk and reinjections included).

use alloc::collections::BTreeMap;

use crate::flow::FlowId;
use crate::sets::{Moves, Reason, StageKind};
use crate::stage::{Schedulerlet, StageCtx};

/// Earliest-completion-first filter.
#[derive(Debug, Clone)]
pub struct Ecf {
    /// Hysteresis factor β.
    pub beta: f64,
    waiting: BTreeMap<FlowId, bool>,
}

impl Default for Ecf {
    fn default() -> Self {
        Ecf::new(0.25)
    }
}

impl Ecf {
    /// ECF with hysteresis `beta`.
    pub fn new(beta: f64) -> Self {
        Ecf {
            beta,
            waiting: BTreeMap::new(),
        }
    }
}

impl Schedulerlet for Ecf {
    fn name(&self) -> &'static str {
        "ecf"
    }
    fn params(&self) -> alloc::string::String {
        if self.beta == Ecf::default().beta {
            alloc::string::String::new()
        } else {
            alloc::format!("beta={}", self.beta)
        }
    }
    fn kind(&self) -> StageKind {
        StageKind::SelectionFilter
    }
    fn apply(&mut self, ctx: &StageCtx<'_>, moves: &mut Moves<'_>) {
        let usable = moves.selected().union(moves.candidates());
        let Some(f) = usable
            .iter()
            .map(|p| ctx.paths.get(p))
            .min_by_key(|s| (s.srtt, s.id))
        else {
            return;
        };
        for p in moves.selected().iter() {
            if p == f.id {
                continue;
            }
            let s = ctx.paths.get(p);
            let waiting = self.waiting.get(&ctx.chunk.flow).copied().unwrap_or(false);
            let k = ctx.chunk.remaining_bytes as f64;
            let (cwnd_f, cwnd_s) = (f.cwnd_bytes.max(1) as f64, s.cwnd_bytes.max(1) as f64);
            let (srtt_f, srtt_s) = (f.srtt.as_secs_f64(), s.srtt.as_secs_f64());
            let delta = f.rttvar.max(s.rttvar).as_secs_f64();
            let x_f = k.max(cwnd_f);
            let lhs = srtt_f * (x_f + cwnd_f);
            let rhs = cwnd_f * (srtt_s + delta) * (1.0 + if waiting { self.beta } else { 0.0 });
            if lhs < rhs {
                let x_s = k.max(cwnd_s);
                if srtt_s * x_s >= cwnd_s * (2.0 * srtt_f + delta) {
                    self.waiting.insert(ctx.chunk.flow, true);
                    moves.unselect(p, Reason::EcfWaitForFastest);
                }
            } else {
                self.waiting.insert(ctx.chunk.flow, false);
            }
        }
    }
    fn on_flow_closed(&mut self, flow: FlowId) {
        self.waiting.remove(&flow);
    }
}
