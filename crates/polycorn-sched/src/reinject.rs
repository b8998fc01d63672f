//! Reinjection policies: what happens to a path's unacknowledged chunks when it times out.
//!
//! Reinjection is lazy in every policy (POLYCORN §4.5): chunks go back to their flow's queue and
//! are rescheduled by the normal user/flow order, never onto a path that already carried them
//! (per-chunk path bitmap). The receiver keeps the first copy.

use core::fmt;

use crate::time::Duration;

/// ER's default k (POLYCORN §4.5): k = 1, 2, 3 cost 47%, 15%, 0.3% extra traffic on the
/// paper's dataset, so the paper uses 3.
pub const DEFAULT_ER_K: u32 = 3;

/// A chunk counts as stuck on its path once it has waited this many smoothed RTTs of the
/// fastest other path that could carry it (and at least ER's `stuck_ms`): a copy sent there
/// when it was sent would have been acknowledged twice over. The `stuck_ms` floor, far above
/// the RTTs of a working cellular path, keeps ordinary RTT differences from triggering it.
pub const STUCK_RTT_FACTOR: u64 = 2;

/// When a path's chunks are sent again elsewhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reinjection {
    /// Never: rely on the subflow's own TCP retransmissions.
    None,
    /// Linux MPTCP's opportunistic retransmission: on every RTO of a path, its oldest
    /// unacknowledged chunk is reinjected (Raiciu et al., NSDI'12).
    OldestOnRto,
    /// ER, extended reinjection (POLYCORN §4.5): on the k-th consecutive RTO of a path, *all*
    /// its unacknowledged chunks are reinjected.
    ///
    /// The paper presents ER as an extension of MPTCP's per-packet reinjection, which it calls
    /// too conservative for HSR, not as a replacement that does nothing before the k-th RTO.
    /// So by default (`oldest`) RTOs below k still reinject the path's oldest chunk, as
    /// [`Reinjection::OldestOnRto`] does; `oldest = false` (`er(k=N,oldest=0)`) is the batch
    /// alone.
    Extended {
        /// Consecutive RTOs that trigger the batch.
        k: u32,
        /// RTOs below k reinject the oldest unacknowledged chunk (MPTCP's behaviour).
        oldest: bool,
        /// Beyond the paper: also reinject all of a path's unacknowledged chunks as soon as the
        /// handover predictor reports that the path lost its serving cell (the relay's modem
        /// report of a failed handover), once per loss, instead of waiting for the k-th RTO.
        cell_loss: bool,
        /// Beyond the paper: a chunk that has waited on its path at least this long, and
        /// [`STUCK_RTT_FACTOR`] times the smoothed RTT of a live path that does not carry it
        /// and no stage holds back, is sent again there (`er(stuck_ms=N)`; `None`: never).
        ///
        /// A path whose capacity fades builds a queue of seconds without losing anything, so
        /// no RTO fires; what sits in that queue blocks in-order delivery of its flows while
        /// the other path could deliver it in a fraction of the time.
        stuck: Option<Duration>,
    },
}

impl Reinjection {
    /// The spec name (`none`, `rto`, `er(k=N)`, `er(k=N,cell_loss=1)`, `er(k=N,oldest=0)`,
    /// `er(k=N,stuck_ms=M)`, or several of these parameters together).
    pub fn spec(&self) -> alloc::string::String {
        match *self {
            Reinjection::None => "none".into(),
            Reinjection::OldestOnRto => "rto".into(),
            Reinjection::Extended {
                k,
                oldest,
                cell_loss,
                stuck,
            } => {
                let mut s = alloc::format!("er(k={k}");
                if cell_loss {
                    s.push_str(",cell_loss=1");
                }
                if !oldest {
                    s.push_str(",oldest=0");
                }
                if let Some(d) = stuck {
                    s.push_str(&alloc::format!(",stuck_ms={}", d.as_millis()));
                }
                s.push(')');
                s
            }
        }
    }

    /// ER with its batch on the k-th RTO, per-RTO reinjection below it, no cell-loss trigger.
    pub const fn extended(k: u32) -> Self {
        Reinjection::Extended {
            k,
            oldest: true,
            cell_loss: false,
            stuck: None,
        }
    }

    /// How long a chunk must wait on its path before it may count as stuck (`None`: the policy
    /// never reinjects stuck chunks).
    pub fn stuck_after(&self) -> Option<Duration> {
        match *self {
            Reinjection::Extended { stuck, .. } => stuck,
            _ => None,
        }
    }

    /// Whether a reported loss of a path's serving cell reinjects all its unacknowledged chunks.
    pub fn on_cell_loss(&self) -> bool {
        matches!(
            self,
            Reinjection::Extended {
                cell_loss: true,
                ..
            }
        )
    }

    /// What to do when a path reaches its `consecutive`-th RTO.
    pub(crate) fn action(&self, consecutive: u32) -> ReinjectAction {
        match *self {
            Reinjection::None => ReinjectAction::Nothing,
            Reinjection::OldestOnRto => ReinjectAction::Oldest,
            Reinjection::Extended { k, .. } if consecutive >= k.max(1) => ReinjectAction::All,
            Reinjection::Extended { oldest: true, .. } => ReinjectAction::Oldest,
            Reinjection::Extended { oldest: false, .. } => ReinjectAction::Nothing,
        }
    }
}

impl fmt::Display for Reinjection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.spec())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReinjectAction {
    Nothing,
    Oldest,
    All,
}
