//! What an acknowledgement tells a congestion controller: the recovery state, the rate sample
//! and the acknowledgement event.

use super::{Duration, Instant};

/// The sender's loss-recovery state (Linux `icsk_ca_state`, the states modelled).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum CaState {
    Open,
    Recovery,
    Loss,
}

/// One delivery-rate sample (Linux `struct rate_sample`); `delivered` and `interval` are
/// `None` when the sample is invalid.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RateSample {
    pub(crate) prior_delivered: u64,
    pub(crate) delivered: Option<u64>,
    pub(crate) interval: Option<Duration>,
    pub(crate) is_app_limited: bool,
    pub(crate) acked_sacked: u32,
    pub(crate) losses: u32,
    pub(crate) prior_in_flight: u32,
    /// RTT of the most recently sent segment this ACK delivered.
    pub(crate) rtt: Option<Duration>,
}

/// What the sender tells its controller on each acknowledgement.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AckEvent {
    pub(crate) now: Instant,
    pub(crate) rs: RateSample,
    pub(crate) state: CaState,
    pub(crate) in_flight: u32,
    /// Total segments delivered so far (`tp->delivered`).
    pub(crate) delivered: u64,
    pub(crate) cwnd_limited: bool,
    /// The cumulative ACK point advanced (Linux `FLAG_DATA_ACKED`): with no reordering seen,
    /// only such ACKs may raise the window (`tcp_may_raise_cwnd`).
    pub(crate) data_acked: bool,
    pub(crate) min_rtt: Option<Duration>,
    pub(crate) srtt: Option<Duration>,
    /// Cumulative ACK point and next sequence to send, for per-round bookkeeping.
    pub(crate) snd_una: u64,
    pub(crate) snd_nxt: u64,
}
