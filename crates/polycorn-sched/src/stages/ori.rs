//! ORI — opportunistic redundant injection (hard selector).
//!
//! Source: POLYCORN (NSDI'23) §4.6. A path is idle when nothing was scheduled on it for `alpha`,
//! or while `beta` bytes were scheduled on other paths, whichever comes first. Once a path is
//! idle, the next `tau` chunks that are sent at all are also duplicated onto it. This keeps
//! idle paths' estimates (RTT, bandwidth) fresh and adds a second chance for delivery.
//!
//! Constants (the paper's, chosen there from on-board experiments): `alpha = 1 s`,
//! `beta = 8 KB` (8192 bytes), `tau = 16` chunks.
//!
//! Choices the paper leaves open, made here:
//! * Only chunks that some earlier stage selected are duplicated (S non-empty): ORI adds copies,
//!   it never turns a "wait" into a send on a path another stage rejected.
//! * Copies go only to idle paths in C with window room. Paths in U (predicted handover failure,
//!   or already carried this chunk) are not revived.

use crate::path::{PathSet, MAX_PATHS};
use crate::sets::{Moves, Reason, StageKind};
use crate::stage::{Schedulerlet, StageCtx};
use crate::time::{Duration, Instant};

/// Opportunistic redundant injection.
#[derive(Debug, Clone)]
pub struct Ori {
    /// Idle after this long without traffic.
    pub alpha: Duration,
    /// Idle after this many bytes were scheduled elsewhere.
    pub beta_bytes: u64,
    /// Chunks duplicated onto a path once it is idle.
    pub tau: u32,
    copies_left: [u32; MAX_PATHS],
    added: PathSet,
}

impl Default for Ori {
    fn default() -> Self {
        Ori::new(Duration::from_secs(1), 8 * 1024, 16)
    }
}

impl Ori {
    /// ORI with explicit constants.
    pub fn new(alpha: Duration, beta_bytes: u64, tau: u32) -> Self {
        Ori {
            alpha,
            beta_bytes,
            tau,
            copies_left: [0; MAX_PATHS],
            added: PathSet::EMPTY,
        }
    }

    fn is_idle(&self, now: Instant, last: Option<Instant>, elsewhere: u64) -> bool {
        match last {
            None => true,
            Some(t) => now - t >= self.alpha || elsewhere >= self.beta_bytes,
        }
    }
}

impl Schedulerlet for Ori {
    fn name(&self) -> &'static str {
        "ori"
    }
    fn kind(&self) -> StageKind {
        StageKind::HardSelector
    }
    fn apply(&mut self, ctx: &StageCtx<'_>, moves: &mut Moves<'_>) {
        self.added = PathSet::EMPTY;
        if moves.selected().is_empty() || self.tau == 0 {
            return;
        }
        for p in moves.candidates().iter() {
            let s = ctx.paths.get(p);
            if !s.has_room() {
                continue;
            }
            let left = if self.copies_left[p.index()] > 0 {
                self.copies_left[p.index()]
            } else if self.is_idle(ctx.now, s.last_scheduled, s.bytes_elsewhere_since) {
                self.tau
            } else {
                continue;
            };
            if moves.revive(p, Reason::IdleProbe { copies_left: left }) {
                self.copies_left[p.index()] = left;
                self.added.insert(p);
            }
        }
    }
    fn on_sent(&mut self, _ctx: &StageCtx<'_>, sent_on: PathSet) {
        for p in sent_on.iter() {
            let c = &mut self.copies_left[p.index()];
            if self.added.contains(p) {
                *c = c.saturating_sub(1);
            } else {
                // The path carried an original: it is in use, not idle.
                *c = 0;
            }
        }
        self.added = PathSet::EMPTY;
    }
}
