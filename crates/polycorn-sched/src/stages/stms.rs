//! STMS — send ahead on the slow path so that data arrives in order (selection filter placed
//! after minRTT).
//!
//! Source: Shi, Cui, Wang, Hu, Dai, Wang, Zheng, "STMS: Improving MPTCP Throughput Under
//! Heterogeneous Networks", USENIX ATC 2018. No public implementation; this follows the
//! paper's idea, with the choices below.
//!
//! minRTT gives the fast path the next bytes in order whenever its window has room. When it
//! picked a slower path `s` instead (the fast path `f` is full), STMS does not hand `s` the
//! next bytes, which would arrive long after the bytes `f` sends meanwhile and hold them up at
//! the receiver: it hands `s` bytes further ahead, past a *gap* the size of what `f` is
//! expected to deliver before a byte sent on `s` now arrives. The gap stays unsent for `f` to
//! fill in order ([`Schedulerlet::place_ahead`]; the driver keeps the skipped ranges and sends
//! them before any new data), so both paths' bytes reach the receiver about when they are
//! needed.
//!
//! ```text
//! rate_x  = cwnd_x / srtt_x                            (what path x sends per second)
//! delay_x = owd_x + notsent_x / rate_x                 (when a byte handed to x now arrives)
//! gap     = gain · (rate_f · (delay_s − owd_f) − notsent_f)   (bytes; 0 if negative)
//! ```
//!
//! `f`'s own unsent bytes go before any new byte handed to it, hence `− notsent_f`. If the
//! flow has no data (or no receiver credit) at `lowest unsent byte + gap`, the chunk does not
//! go on `s` (S → C, a wait, as BLEST and ECF wait): whatever `s` could carry would arrive
//! after `f` finished the flow, or would need more receive buffer than the receiver grants —
//! the flow-control credit is the bound STMS puts on out-of-order data at the receiver.
//!
//! Choices the paper leaves open, and what this stage does:
//! * **Which path is fast**: the one with the lowest *current* RTT (smoothed RTT, or the age
//!   of its oldest unacknowledged bytes when longer), among paths not filtered out, window
//!   room or not. A fast path that stops delivering (a blackout) ages out of that rank within
//!   its RTT, and the skipped bytes go in order on the path that is fast now instead of
//!   waiting for it.
//! * **Rates** are window-based (`cwnd / srtt`), as in the paper's model, and the fast path's
//!   window is taken as it is now: its growth in slow start during the gap is not predicted,
//!   which makes the gap smaller — bytes on the slow path arrive early and wait at the
//!   receiver rather than late and hold up the fast path's.
//! * **More than two paths**: each slower path gets its own gap from the same fast path.
//! * **`gain`** (spec `stms(gain=G)`, default 1) scales the gap.
//! * Reinjections and tail chunks are placed like any other chunk: reinjections go where the
//!   pipeline puts them, in order; STMS only moves new data.

use crate::flow::FlowId;
use crate::path::{PathId, PathSet, PathState};
use crate::sets::{Moves, Reason, StageKind};
use crate::stage::{Schedulerlet, StageCtx};

/// Default gap multiplier.
pub const DEFAULT_STMS_GAIN: f64 = 1.0;

/// Send-ahead filter: places the slow path's chunks ahead by the expected gap.
#[derive(Debug, Clone)]
pub struct Stms {
    /// Multiplier on the gap.
    pub gain: f64,
    /// The gap decided for the latest chunk: (flow, offset, slow path, gap bytes).
    planned: Option<(FlowId, u64, PathId, u64)>,
}

impl Default for Stms {
    fn default() -> Self {
        Stms::new(DEFAULT_STMS_GAIN)
    }
}

impl Stms {
    /// STMS with gap multiplier `gain`.
    pub fn new(gain: f64) -> Self {
        Stms {
            gain,
            planned: None,
        }
    }

    /// Bytes per second path `x` sends: its window per smoothed RTT.
    fn rate(x: &PathState) -> f64 {
        let srtt = x.srtt.as_secs_f64().max(1e-3);
        x.cwnd_bytes as f64 / srtt
    }

    /// The gap, in bytes, between the fast path's next byte and the first byte worth handing
    /// to the slow path `s` now.
    pub fn gap_bytes(&self, f: &PathState, s: &PathState) -> u64 {
        let rate_f = Self::rate(f);
        let rate_s = Self::rate(s).max(1.0);
        let delay_s = s.owd.as_secs_f64() + s.notsent_bytes as f64 / rate_s;
        let gap = rate_f * (delay_s - f.owd.as_secs_f64()) - f.notsent_bytes as f64;
        let gap = gap * self.gain;
        if gap.is_finite() && gap > 0.0 {
            gap.min(u64::MAX as f64 / 2.0) as u64
        } else {
            0
        }
    }
}

impl Schedulerlet for Stms {
    fn name(&self) -> &'static str {
        "stms"
    }
    fn params(&self) -> alloc::string::String {
        if self.gain == DEFAULT_STMS_GAIN {
            alloc::string::String::new()
        } else {
            alloc::format!("gain={}", self.gain)
        }
    }
    fn kind(&self) -> StageKind {
        StageKind::SelectionFilter
    }
    fn apply(&mut self, ctx: &StageCtx<'_>, moves: &mut Moves<'_>) {
        self.planned = None;
        let chunk = &ctx.chunk;
        let selected = moves.selected();
        if chunk.reinjection || selected.len() != 1 {
            return;
        }
        let usable = selected.union(moves.candidates());
        let Some(f) = usable
            .iter()
            .map(|p| ctx.paths.get(p))
            .min_by_key(|x| (x.current_rtt(), x.id))
        else {
            return;
        };
        let Some(p) = selected.first() else { return };
        if p == f.id {
            return;
        }
        let gap = self.gap_bytes(f, ctx.paths.get(p));
        if gap == 0 {
            return;
        }
        let available_bytes = chunk.data_end.saturating_sub(chunk.offset);
        if gap >= available_bytes {
            moves.unselect(
                p,
                Reason::StmsNoDataAhead {
                    gap_bytes: gap,
                    available_bytes,
                },
            );
            return;
        }
        self.planned = Some((chunk.flow, chunk.offset, p, gap));
    }
    fn place_ahead(&mut self, ctx: &StageCtx<'_>, sent_on: PathSet) -> u64 {
        match self.planned.take() {
            Some((flow, offset, p, gap))
                if flow == ctx.chunk.flow
                    && offset == ctx.chunk.offset
                    && sent_on == PathSet::single(p) =>
            {
                gap
            }
            _ => 0,
        }
    }
}
