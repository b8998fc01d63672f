//! BLEST — blocking estimation (selection filter placed after minRTT).
//!
//! Source: Ferlin, Alay, Mehani, Boreli, "BLEST: Blocking Estimation-based MPTCP Scheduler for
//! Heterogeneous Networks", IFIP Networking 2016, and its reference implementation in the
//! out-of-tree Linux MPTCP kernel (`mptcp_blest.c`, v0.95).
//!
//! When minRTT picked a path `s` that is not the fastest path `f` (lowest smoothed RTT among usable
//! paths, window room or not), BLEST estimates how many bytes `f` could send while a chunk sent
//! on `s` lingers: if those bytes (scaled by λ) no longer fit in the flow's send window once
//! the chunk and `s`'s in-flight bytes occupy it, the chunk waits for `f` (S → C).
//!
//! Constants, from the reference implementation:
//! * λ starts at 1.2 and stays in [1.0, 1.3];
//! * λ += 0.04 if a retransmission event (an RTO on any path) happened since the last update,
//!   else λ −= 0.01; at most one update per smallest RTT of the slow path.
//!
//! Adaptations:
//! * The send window is the flow's receiver credit beyond its cumulative ack
//!   ([`ChunkView::window_bytes`](crate::ChunkView)); a flow without credit limit never blocks.
//! * The fast path's byte estimate assumes congestion avoidance (`(cwnd + (n-1)/2) · n` packets in
//!   `n` RTTs): `TCP_INFO` gives no ssthresh to the scheduler, and slow start is short compared
//!   with HSR flows' lifetimes.

use crate::path::{PathState, MAX_PATHS};
use crate::sets::{Moves, Reason, StageKind};
use crate::stage::{PathEvent, Schedulerlet, StageCtx};
use crate::time::{Duration, Instant};

/// BLEST's λ bounds and steps, in thousandths.
const LAMBDA_INIT_MILLI: i64 = 1200;
const LAMBDA_MIN_MILLI: i64 = 1000;
const LAMBDA_MAX_MILLI: i64 = 1300;
const LAMBDA_BAD_STEP_MILLI: i64 = 40;
const LAMBDA_GOOD_STEP_MILLI: i64 = 10;

/// Blocking-estimation filter.
#[derive(Debug, Clone)]
pub struct Blest {
    lambda_milli: i64,
    last_lambda_update: Option<Instant>,
    retransmitted: bool,
    min_srtt: [Duration; MAX_PATHS],
    max_srtt: [Duration; MAX_PATHS],
}

impl Default for Blest {
    fn default() -> Self {
        Blest {
            lambda_milli: LAMBDA_INIT_MILLI,
            last_lambda_update: None,
            retransmitted: false,
            min_srtt: [Duration::MAX; MAX_PATHS],
            max_srtt: [Duration::ZERO; MAX_PATHS],
        }
    }
}

impl Blest {
    /// Current λ.
    pub fn lambda(&self) -> f64 {
        self.lambda_milli as f64 / 1000.0
    }

    /// At most once per `period` (the slow subflow's smallest RTT, as in the reference code).
    fn update_lambda(&mut self, now: Instant, period: Duration) {
        if let Some(t) = self.last_lambda_update {
            if now - t < period {
                return;
            }
        }
        if self.retransmitted {
            self.lambda_milli += LAMBDA_BAD_STEP_MILLI;
        } else {
            self.lambda_milli -= LAMBDA_GOOD_STEP_MILLI;
        }
        self.lambda_milli = self.lambda_milli.clamp(LAMBDA_MIN_MILLI, LAMBDA_MAX_MILLI);
        self.retransmitted = false;
        self.last_lambda_update = Some(now);
    }

    /// How long a chunk sent now on `s` stays unacknowledged.
    fn linger_time(&self, s: &PathState) -> Duration {
        let i = s.id.index();
        let (min, max) = (self.min_srtt[i].min(s.srtt), self.max_srtt[i].max(s.srtt));
        let mss = u64::from(s.mss_bytes.max(1));
        let inflight = (s.unacked_bytes / mss).saturating_add(1);
        let cwnd = (s.cwnd_bytes / mss).max(1);
        let estimate = if inflight >= cwnd {
            max
        } else {
            // inflight < cwnd, so the quotient is below max - min and fits.
            let part =
                u128::from((max - min).as_micros()) * u128::from(inflight) / u128::from(cwnd);
            min + Duration::from_micros(part as u64)
        };
        estimate.max(s.srtt)
    }

    /// Bytes `f` sends during `time`, times λ.
    fn fast_bytes(&self, f: &PathState, time: Duration) -> u64 {
        let i = f.id.index();
        let avg_rtt = ((u128::from(self.min_srtt[i].min(f.srtt).as_micros())
            + u128::from(self.max_srtt[i].max(f.srtt).as_micros()))
            / 2) as u64;
        // Round trips of the fast path during `time`, rounded up (1 if its RTT is unknown).
        let n = time
            .as_micros()
            .checked_div(avg_rtt)
            .map_or(1, |q| q.saturating_add(1));
        let mss = u64::from(f.mss_bytes.max(1));
        let cwnd = f.cwnd_bytes / mss;
        let packets = cwnd.saturating_add((n - 1) / 2).saturating_mul(n);
        let bytes = packets as u128 * mss as u128 * self.lambda_milli as u128 / 1000;
        bytes.min(u64::MAX as u128) as u64
    }
}

impl Schedulerlet for Blest {
    fn name(&self) -> &'static str {
        "blest"
    }
    fn kind(&self) -> StageKind {
        StageKind::SelectionFilter
    }
    fn apply(&mut self, ctx: &StageCtx<'_>, moves: &mut Moves<'_>) {
        let usable = moves.selected().union(moves.candidates());
        for p in usable.iter() {
            let srtt = ctx.paths.get(p).srtt;
            self.min_srtt[p.index()] = self.min_srtt[p.index()].min(srtt);
            self.max_srtt[p.index()] = self.max_srtt[p.index()].max(srtt);
        }
        let Some(fast) = usable
            .iter()
            .map(|p| ctx.paths.get(p))
            .min_by_key(|s| (s.srtt, s.id))
        else {
            return;
        };
        if ctx.chunk.window_bytes == u64::MAX {
            return;
        }
        for p in moves.selected().iter() {
            if p == fast.id {
                continue;
            }
            let slow = ctx.paths.get(p);
            self.update_lambda(ctx.now, self.min_srtt[p.index()].min(slow.srtt));
            let fast_bytes = self.fast_bytes(fast, self.linger_time(slow));
            // The kernel counts write_seq - snd_una: everything queued on the slow subflow.
            let slow_bytes = ctx.chunk.seq_len.saturating_add(slow.queued_bytes());
            let avail_bytes = ctx.chunk.window_bytes.saturating_sub(slow_bytes);
            if fast_bytes > avail_bytes {
                moves.unselect(
                    p,
                    Reason::BlestWouldBlock {
                        fast_bytes,
                        avail_bytes,
                    },
                );
            }
        }
    }
    fn on_path_event(&mut self, _now: Instant, _path: crate::path::PathId, event: PathEvent) {
        if event == PathEvent::Rto {
            self.retransmitted = true;
        }
    }
}
