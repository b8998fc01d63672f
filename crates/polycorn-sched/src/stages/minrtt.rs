//! minRTT — the Linux MPTCP default scheduler as a soft selector.
//!
//! Source: Paasch et al., "Experimental evaluation of multipath TCP schedulers", CSWS'14, and the
//! out-of-tree kernel's `mptcp_sched.c` default scheduler; POLYCORN §4.2 reuses it as HRSCH's soft
//! selector. Picks, among candidates whose congestion window has room, the one with the lowest
//! smoothed RTT (ties: lowest path index, for determinism). No constants.
//!
//! Beyond the paper, `thin_bytes = N` (spec `minrtt(thin_bytes=N)`; 0, the default, is off; the
//! `polycorn` preset sets 5600) lets a chunk of a *thin* flow — at most `N` bytes unsent or
//! unacknowledged, this chunk included, the same test as `ori(thin_bytes=N)` — also go to a
//! path whose window is full, as long as fewer than `N` bytes already wait unsent in that
//! path's socket. The window is counted in segments, and a message is far smaller than one:
//! a window full of messages holds a fraction of the bytes it could. Without this, a thin chunk
//! takes whichever other path still has room even when that path's RTT is many times higher
//! (seen on HSR: a carrier whose uplink had faded to a tenth of a Mbit/s and queued seconds of
//! messages kept taking new ones, because the recovered carrier's window was full of
//! 100-byte segments). Written into the lower-RTT socket instead, the chunk waits there for
//! part of an RTT and leaves coalesced with the others into full segments as ACKs open the
//! window. The bound keeps that wait short and the socket's backlog small; chunks of flows
//! that are not thin still need window room.
//!
//! Also beyond the paper, `age = 1` (spec `minrtt(age=1)`) ranks paths by their *current* RTT
//! ([`PathState::current_rtt`](crate::path::PathState::current_rtt)): the smoothed RTT, or the
//! age of the oldest bytes the path's TCP has not had acknowledged, when that is longer. The
//! smoothed RTT follows a fading carrier's growing queue a round trip late and by an eighth of
//! each sample, so a carrier whose uplink falls below what is sent on it keeps looking fastest
//! while its queue grows by seconds (seen on HSR: messages waited 0.5–1.2 s on a carrier
//! fading towards a failed handover while the other delivered in 0.2 s). The age of the oldest
//! unacknowledged bytes grows in real time; on a working path it stays below one RTT.

use crate::path::PathState;
use crate::sets::{Moves, Reason, StageKind};
use crate::stage::{Schedulerlet, StageCtx};
use crate::time::Duration;

/// Lowest smoothed RTT among candidates with window room.
#[derive(Debug, Clone, Default)]
pub struct MinRtt {
    /// A thin flow's chunk (at most this many bytes unsent or unacknowledged) may also go to a
    /// path whose window is full while fewer than this many bytes wait unsent on it (0: off).
    pub thin_bytes: u64,
    /// Rank by the current RTT (smoothed RTT or the age of the oldest unacknowledged bytes,
    /// whichever is longer) instead of the smoothed RTT alone.
    pub age: bool,
}

impl MinRtt {
    /// The RTT this selector ranks `s` by.
    fn rtt(&self, s: &PathState) -> Duration {
        if self.age {
            s.current_rtt()
        } else {
            s.srtt
        }
    }
}

impl Schedulerlet for MinRtt {
    fn name(&self) -> &'static str {
        "minrtt"
    }
    fn params(&self) -> alloc::string::String {
        let mut p = alloc::vec::Vec::new();
        if self.thin_bytes != 0 {
            p.push(alloc::format!("thin_bytes={}", self.thin_bytes));
        }
        if self.age {
            p.push("age=1".into());
        }
        p.join(",")
    }
    fn kind(&self) -> StageKind {
        StageKind::SoftSelector
    }
    fn apply(&mut self, ctx: &StageCtx<'_>, moves: &mut Moves<'_>) {
        let thin = self.thin_bytes > 0 && ctx.chunk.flow_bytes() <= self.thin_bytes;
        let best = moves
            .candidates()
            .iter()
            .map(|p| ctx.paths.get(p))
            .filter(|s| s.has_room() || (thin && s.alive && s.notsent_bytes < self.thin_bytes))
            .min_by_key(|s| (self.rtt(s), s.id));
        if let Some(s) = best {
            let srtt = self.rtt(s);
            let reason = if s.has_room() {
                Reason::LowestRtt { srtt }
            } else {
                Reason::LowestRttThin {
                    srtt,
                    notsent_bytes: s.notsent_bytes,
                }
            };
            moves.select(s.id, reason);
        }
    }
}
