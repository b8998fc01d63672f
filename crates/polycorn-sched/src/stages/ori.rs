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
//!
//! Beyond the paper, `displace = false` (spec `ori(displace=0)`)
//! skips the copy while the chunk's flow has more unsent bytes than the selected paths' free
//! congestion windows can take: the rest of the backlog would spill onto the "idle" path as
//! originals at once, so a copy there would only take window from them. The typical case is the
//! first round trip of a download after a pause, when every path counts as idle by `alpha`:
//! the paper's ORI fills the second path's initial window with copies of the first path's
//! chunks, so the flow's first round trip carries about half the unique bytes it could. With the
//! backlog small enough (messages, a flow's tail) ORI copies exactly as the paper's does. A
//! burst of `tau` copies cut short by a growing backlog ends when the path carries an original.
//!
//! Also beyond the paper, `thin_bytes = N` (spec `ori(thin_bytes=N)`; 0, the stage default, is
//! off; the `polycorn` preset sets 5600)
//! copies every chunk of a *thin* flow — one with at most `N` bytes unsent or unacknowledged,
//! this chunk included: a message, a request, an answer — onto every candidate path with room,
//! idle or not. A thin flow's delivery time is its latency, not its throughput, and the paths'
//! RTTs swap which is lower every few hundred milliseconds on HSR; a copy on each path delivers
//! at the lower of them for a few hundred bytes, the idea of Linux's thin-stream handling and of
//! redundant schedulers for interactive traffic. Thin copies neither start, use up nor end an
//! idle path's burst of `tau`. A bulk flow is thin only in its first and last few chunks.

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
    /// Copy even when the flow's backlog would fill the idle path with originals (the paper's
    /// ORI); `false` copies only while the backlog fits the selected paths' free windows.
    pub displace: bool,
    /// Copy every chunk of a flow with at most this many bytes unsent or unacknowledged onto
    /// every candidate path with room (0: off, the paper's ORI).
    pub thin_bytes: u64,
    copies_left: [u32; MAX_PATHS],
    added: PathSet,
    thin_added: PathSet,
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
            displace: true,
            thin_bytes: 0,
            copies_left: [0; MAX_PATHS],
            added: PathSet::EMPTY,
            thin_added: PathSet::EMPTY,
        }
    }

    /// Would the chunk's flow fill more than the selected paths' free windows right now (this
    /// chunk included, limited by the receiver's window)? Then paths outside S are about to carry
    /// the flow's originals and are idle in name only.
    fn backlog_spills(ctx: &StageCtx<'_>, moves: &Moves<'_>) -> bool {
        let backlog = ctx.chunk.remaining_bytes.min(ctx.chunk.window_bytes);
        let free: u64 = moves
            .selected()
            .iter()
            .map(|p| {
                let s = ctx.paths.get(p);
                s.cwnd_bytes.saturating_sub(s.queued_bytes())
            })
            .fold(0u64, u64::saturating_add);
        backlog > free
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
    fn params(&self) -> alloc::string::String {
        let d = Ori::default();
        let mut out = alloc::vec::Vec::new();
        if self.alpha != d.alpha {
            out.push(alloc::format!("alpha_ms={}", self.alpha.as_millis()));
        }
        if self.beta_bytes != d.beta_bytes {
            out.push(alloc::format!("beta_bytes={}", self.beta_bytes));
        }
        if self.tau != d.tau {
            out.push(alloc::format!("tau={}", self.tau));
        }
        if self.displace != d.displace {
            out.push(alloc::format!("displace={}", u8::from(self.displace)));
        }
        if self.thin_bytes != d.thin_bytes {
            out.push(alloc::format!("thin_bytes={}", self.thin_bytes));
        }
        out.join(",")
    }
    fn kind(&self) -> StageKind {
        StageKind::HardSelector
    }
    fn apply(&mut self, ctx: &StageCtx<'_>, moves: &mut Moves<'_>) {
        self.added = PathSet::EMPTY;
        self.thin_added = PathSet::EMPTY;
        if moves.selected().is_empty() {
            return;
        }
        let flow_bytes = ctx.chunk.flow_bytes();
        if self.thin_bytes > 0 && flow_bytes <= self.thin_bytes {
            for p in moves.candidates().iter() {
                if ctx.paths.get(p).has_room() && moves.revive(p, Reason::ThinFlow { flow_bytes }) {
                    self.thin_added.insert(p);
                }
            }
            return;
        }
        if self.tau == 0 {
            return;
        }
        if !self.displace && Ori::backlog_spills(ctx, moves) {
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
        for p in sent_on.iter().filter(|p| !self.thin_added.contains(*p)) {
            let c = &mut self.copies_left[p.index()];
            if self.added.contains(p) {
                *c = c.saturating_sub(1);
            } else {
                // The path carried an original: it is in use, not idle.
                *c = 0;
            }
        }
        self.added = PathSet::EMPTY;
        self.thin_added = PathSet::EMPTY;
    }
}
