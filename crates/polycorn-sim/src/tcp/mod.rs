//! A TCP subflow model: one sender and one receiver per path, driven in virtual time.
//!
//! Pure and deterministic: no clock, no I/O, no threads, no randomness (BBR's one random
//! choice is derived from [`TcpConfig::seed`]). Every call takes `now`, an
//! [`Instant`] of virtual time chosen by the simulator; outputs are polled. Steady-state
//! work allocates nothing: the scoreboard and the receiver's out-of-order ranges are
//! `VecDeque`/`Vec`s that keep their capacity, and each event costs O(log n) or amortised O(1).
//!
//! ## Driving a subflow
//! Sender side ([`TcpSender`]):
//! 1. [`TcpSender::writable`] says how many bytes the application may write now (send buffer
//!    and `TCP_NOTSENT_LOWAT`); [`TcpSender::write`] queues them, noting when (for
//!    `unacked_age`).
//! 2. [`TcpSender::poll_transmit`] hands out the next [`Segment`] that the congestion window
//!    and pacing allow (retransmissions first); [`TcpSender::next_transmit_time`] says when
//!    pacing allows the next one.
//! 3. [`TcpSender::on_ack`] takes the receiver's [`Ack`]s; [`TcpSender::timeout`] /
//!    [`TcpSender::on_timeout`] run the retransmission, tail-loss-probe and reordering
//!    timers (a probe is then handed out by the next [`TcpSender::poll_transmit`]).
//! 4. [`TcpSender::info`] is the `TCP_INFO` reading the shell would take
//!    ([`polycorn_sched::TcpInfoSample`]).
//!
//! Receiver side ([`TcpReceiver`]): [`TcpReceiver::on_segment`] returns an [`Ack`] to send
//! now, if any; [`TcpReceiver::timeout`] / [`TcpReceiver::on_timeout`] run the delayed-ACK
//! timer; [`TcpReceiver::delivered`] counts the in-order bytes readable.
//!
//! Segments carry byte ranges of the stream (`seq .. seq + len`), not data: the simulator
//! maps stream offsets to the session's frames itself.
//!
//! ## What is modelled, and how (Linux is the reference)
//! - MSS-sized segments ([`TcpConfig::mss`], 1448 by default), `TCP_NODELAY` (a short
//!   segment goes out when nothing larger is queued), no receive-window limit (autotuning is
//!   assumed to keep the window out of the way).
//! - Initial window of 10 segments, slow start, and [`CongestionControl::Cubic`] (RFC 9438,
//!   with HyStart's ACK-train and delay-increase exits as in Linux `tcp_cubic.c`) or [`CongestionControl::Bbr`] (BBR v1 as in Linux `tcp_bbr.c`: Startup, Drain,
//!   ProbeBW with its 8-phase gain cycle, ProbeRTT; the long-term policer model is left out).
//! - Loss recovery: a SACK scoreboard with RACK-lite loss detection (RFC 8985 as Linux runs it
//!   with no reordering seen: a segment is lost once a segment sent after it was delivered and
//!   it has waited an RTT plus a reordering window of min_rtt/4, zero once in recovery or with
//!   three segments SACKed). Sending is gated by Linux's
//!   `in_flight = packets_out - sacked - lost + retransmitted` against the window; in fast
//!   recovery CUBIC's window follows proportional rate reduction (RFC 6937 as Linux
//!   `tcp_cwnd_reduction`) and ends at ssthresh; BBR keeps its own packet conservation. The
//!   window grows only on ACKs that advance the cumulative point (`tcp_may_raise_cwnd`) and
//!   only while the window limits sending (`tcp_is_cwnd_limited`). Tail-loss probes as Linux `tcp_send_loss_probe` ([`TcpConfig::tail_loss_probe`]);
//!   no F-RTO.
//! - RTT and RTO exactly as Linux `tcp_rtt_estimator`/`tcp_set_rto`: srtt with gain 1/8,
//!   mdev with gain 1/4, `rttvar = max(mdev_max, rto_min)` refreshed once per RTT, RTO =
//!   srtt + rttvar (so at least srtt + [`TcpConfig::rto_min`], 200 ms), initial RTO 1 s,
//!   doubling on each timeout up to 120 s, `rto_backoff` reset by a valid RTT sample. RTT
//!   samples follow Linux with timestamps on (`tcp_clean_rtx_queue`, `tcp_ack_update_rtt`):
//!   from newly acknowledged segments never retransmitted (none when retransmitted data is
//!   cumulatively acknowledged), else from the echoed timestamp ([`Ack::ts_echo`]), so a
//!   segment delivered late after its retransmission gives its true, long RTT.
//! - Slow start after idle ([`TcpConfig::slow_start_after_idle`], Linux `tcp_cwnd_restart`:
//!   the window halves per RTO of idleness, down to the initial window; BBR is exempt as in
//!   Linux); CUBIC shifts its epoch over the idle time.
//! - The send buffer ([`TcpConfig::sndbuf`]) and `TCP_NOTSENT_LOWAT`
//!   ([`TcpConfig::notsent_lowat`]).
//! - Receiver ACK policy ([`AckPolicy`]): Linux-like delayed ACK (16 quick ACKs at the start
//!   and after a second without data, then an ACK once more than one MSS is unacknowledged
//!   or after 40 ms; out-of-order data and hole fills are ACKed at once), or an ACK per
//!   segment. Up to 3 SACK blocks (the room left beside the timestamp option), the most
//!   recently changed first; a duplicate segment is D-SACKed ([`Ack::dsack`]).
//! - Delivery rate as Linux `tcp_rate.c` (per-segment `delivered`/`first_tx` snapshots, the
//!   interval the longer of the send and ACK phases, samples shorter than min_rtt dropped,
//!   app-limited samples kept only when they beat the last), reported like
//!   `tcpi_delivery_rate` (segments × MSS per interval).
//!
//! ## Why the congestion controllers are written here
//! quinn-proto's `congestion::{Cubic, Bbr}` cannot be driven from outside: their `on_ack`
//! needs a `&RttEstimator`, which has no public constructor, they count QUIC packets
//! (no cumulative ACK, no SACK recovery, no Linux `tcp_cwnd_restart`, no HyStart), and they
//! take `std::time::Instant`. smoltcp's controllers (`socket::tcp::congestion`) are private
//! to its socket. The two here
//! are small, follow the Linux modules named above, and are tested in `tests.rs`.

mod ack;
mod bbr;
mod cc;
mod cubic;
mod receiver;
mod rtt;
mod sender;
#[cfg(test)]
mod tests;

pub use cc::CongestionControl;
pub use polycorn_sched::time::{Bandwidth, Duration, Instant};
pub use receiver::{AckPolicy, TcpReceiver};
pub use sender::{SenderStats, TcpSender};

/// Smallest MSS accepted (Linux `TCP_MIN_MSS`).
pub const MIN_MSS: u32 = 88;
/// Largest MSS accepted (a 64 KiB IPv4 packet less headers).
pub const MAX_MSS: u32 = 65_483;

/// Most SACK blocks an [`Ack`] carries (three fit beside the timestamp option).
pub const MAX_SACK_BLOCKS: usize = 3;

/// Configuration of one subflow. [`Default`] is Linux's defaults with CUBIC.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TcpConfig {
    /// Sender maximum segment size in bytes (1448: Ethernet MTU minus IPv4, TCP and
    /// timestamp headers).
    pub mss: u32,
    /// Initial congestion window in segments (RFC 6928: 10).
    pub initial_window_segments: u32,
    /// Congestion control algorithm.
    pub cc: CongestionControl,
    /// `net.ipv4.tcp_slow_start_after_idle` (Linux default: on).
    pub slow_start_after_idle: bool,
    /// `TCP_NOTSENT_LOWAT` in bytes: the application may write only while fewer bytes than
    /// this are written and not yet sent. `None`: no limit (Linux default).
    pub notsent_lowat: Option<u64>,
    /// Send buffer in bytes: written and not yet acknowledged bytes stay below it (Linux
    /// autotunes `SO_SNDBUF` up to `tcp_wmem[2]`, 4 MiB).
    pub sndbuf: u64,
    /// Minimum RTO (`TCP_RTO_MIN`, 200 ms).
    pub rto_min: Duration,
    /// Maximum RTO (`TCP_RTO_MAX`, 120 s).
    pub rto_max: Duration,
    /// RTO before the first RTT sample (`TCP_TIMEOUT_INIT`, 1 s).
    pub rto_initial: Duration,
    /// Pace CUBIC at Linux's `tcp_update_pacing_rate` rate (200 % of cwnd/srtt in slow start,
    /// 120 % after), as the `fq` qdisc would. Off by default (`fq_codel` does not pace).
    /// BBR always paces.
    pub pace_cubic: bool,
    /// Tail-loss probes (`net.ipv4.tcp_early_retrans = 3`, Linux default: on): 2·srtt after
    /// the last send with nothing more the window lets out, send one new segment or the last
    /// one again, so that a lost tail is found by RACK rather than the RTO.
    pub tail_loss_probe: bool,
    /// Seed of BBR's one random choice (the ProbeBW phase it starts in).
    pub seed: u64,
}

/// Why a [`TcpConfig`] is unusable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TcpConfigError {
    /// `mss` outside [`MIN_MSS`]`..=`[`MAX_MSS`].
    #[error("tcp mss {0} out of range ({MIN_MSS}..={MAX_MSS} bytes)")]
    Mss(u32),
    /// `initial_window_segments` of zero.
    #[error("tcp initial_window_segments must be at least 1")]
    InitialWindow,
    /// `sndbuf` smaller than one segment.
    #[error("tcp sndbuf {sndbuf} is smaller than one segment ({mss} bytes)")]
    Sndbuf {
        /// The configured send buffer.
        sndbuf: u64,
        /// The configured MSS.
        mss: u32,
    },
    /// `notsent_lowat` of zero (nothing could ever be written).
    #[error("tcp notsent_lowat must be at least 1 byte")]
    NotsentLowat,
    /// RTO bounds that are zero or out of order.
    #[error("tcp RTO bounds out of order: need 0 < rto_min ({rto_min}) <= rto_initial ({rto_initial}) <= rto_max ({rto_max})")]
    RtoBounds {
        /// The configured minimum.
        rto_min: Duration,
        /// The configured initial RTO.
        rto_initial: Duration,
        /// The configured maximum.
        rto_max: Duration,
    },
}

impl TcpConfig {
    /// Check that the configuration is usable; [`TcpSender::new`] expects one that is.
    pub fn check(&self) -> Result<(), TcpConfigError> {
        if !(MIN_MSS..=MAX_MSS).contains(&self.mss) {
            return Err(TcpConfigError::Mss(self.mss));
        }
        if self.initial_window_segments == 0 {
            return Err(TcpConfigError::InitialWindow);
        }
        if self.sndbuf < u64::from(self.mss) {
            return Err(TcpConfigError::Sndbuf {
                sndbuf: self.sndbuf,
                mss: self.mss,
            });
        }
        if self.notsent_lowat == Some(0) {
            return Err(TcpConfigError::NotsentLowat);
        }
        if self.rto_min.is_zero()
            || self.rto_min > self.rto_initial
            || self.rto_initial > self.rto_max
        {
            return Err(TcpConfigError::RtoBounds {
                rto_min: self.rto_min,
                rto_initial: self.rto_initial,
                rto_max: self.rto_max,
            });
        }
        Ok(())
    }
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            mss: 1448,
            initial_window_segments: 10,
            cc: CongestionControl::Cubic,
            slow_start_after_idle: true,
            notsent_lowat: None,
            sndbuf: 4 << 20,
            rto_min: Duration::from_millis(200),
            rto_max: Duration::from_secs(120),
            rto_initial: Duration::from_secs(1),
            pace_cubic: false,
            tail_loss_probe: true,
            seed: 0,
        }
    }
}

/// One segment on the wire: the stream bytes `seq .. seq + len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Stream offset of the first byte.
    pub seq: u64,
    /// Bytes carried (at most the MSS, at least 1).
    pub len: u32,
    /// Whether these bytes were sent before.
    pub retransmission: bool,
    /// When this transmission left the sender (its timestamp option, TSval).
    pub sent_at: Instant,
}

impl Segment {
    /// Stream offset one past the last byte.
    pub fn end(&self) -> u64 {
        self.seq + u64::from(self.len)
    }
}

/// An acknowledgement: everything below `cumulative`, and the SACKed ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ack {
    /// Next stream offset the receiver expects (all bytes below it received).
    pub cumulative: u64,
    /// SACK blocks `[start, end)` above `cumulative`, the first `sack_len` valid, the most
    /// recently changed first.
    pub sack: [(u64, u64); MAX_SACK_BLOCKS],
    /// Number of valid entries in `sack`.
    pub sack_len: u8,
    /// The segment that triggered this ACK had arrived before (a D-SACK, RFC 2883).
    pub dsack: bool,
    /// The echoed timestamp (TSecr): [`Segment::sent_at`] of the segment the receiver took
    /// `TS.Recent` from (RFC 7323: the last one at the left edge of the window).
    pub ts_echo: Option<Instant>,
}

impl Ack {
    /// An ACK with no SACK blocks.
    pub fn cumulative(cumulative: u64) -> Ack {
        Ack {
            cumulative,
            sack: [(0, 0); MAX_SACK_BLOCKS],
            sack_len: 0,
            dsack: false,
            ts_echo: None,
        }
    }
    /// The valid SACK blocks.
    pub fn sack_blocks(&self) -> &[(u64, u64)] {
        &self.sack[..usize::from(self.sack_len).min(MAX_SACK_BLOCKS)]
    }
}
