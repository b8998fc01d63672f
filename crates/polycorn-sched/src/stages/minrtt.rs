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

use crate::sets::{Moves, Reason, StageKind};
use crate::stage::{Schedulerlet, StageCtx};

/// Lowest smoothed RTT among candidates with window room.
#[derive(Debug, Clone, Default)]
pub struct MinRtt {
    /// A thin flow's chunk (at most this many bytes unsent or unacknowledged) may also go to a
    /// path whose window is full while fewer than this many bytes wait unsent on it (0: off).
    pub thin_bytes: u64,
}

impl Schedulerlet for MinRtt {
    fn name(&self) -> &'static str {
        "minrtt"
    }
    fn params(&self) -> alloc::string::String {
        if self.thin_bytes == 0 {
            alloc::string::String::new()
        } else {
            alloc::format!("thin_bytes={}", self.thin_bytes)
        }
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
            .min_by_key(|s| (s.srtt, s.id));
        if let Some(s) = best {
            let reason = if s.has_room() {
                Reason::LowestRtt { srtt: s.srtt }
            } else {
                Reason::LowestRttThin {
                    srtt: s.srtt,
                    notsent_bytes: s.notsent_bytes,
                }
            };
            moves.select(s.id, reason);
        }
    }
}
