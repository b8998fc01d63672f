//! Paths (one long-lived subflow per cellular carrier), path bitmasks, and the per-path
//! snapshot the stages read.
//!
//! The I/O layer feeds samples ([`TcpInfoSample`] from `TCP_INFO`, RTT and one-way delay from
//! ping frames, RTO events); the scheduler itself adds what it schedules onto a path to that
//! path's not-yet-sent bytes, so consecutive decisions between two samples see the queue grow.

use core::fmt;

use crate::time::{Bandwidth, Duration, Instant};

/// Most paths one scheduler handles (the width of [`PathSet`]).
pub const MAX_PATHS: usize = 32;

/// Identifies a path; an index below [`MAX_PATHS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PathId(u8);

impl PathId {
    /// The path with index `index`, or `None` if `index >= MAX_PATHS`.
    pub const fn new(index: usize) -> Option<PathId> {
        if index < MAX_PATHS {
            Some(PathId(index as u8))
        } else {
            None
        }
    }
    /// The index of this path, below [`MAX_PATHS`].
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for PathId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "path{}", self.0)
    }
}

/// A set of paths as a bitmask.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PathSet(u32);

impl PathSet {
    /// The empty set.
    pub const EMPTY: PathSet = PathSet(0);

    /// The set holding only `path`.
    pub const fn single(path: PathId) -> PathSet {
        PathSet(1 << path.0)
    }
    /// The raw bitmask (bit i = path i).
    pub const fn bits(self) -> u32 {
        self.0
    }
    /// The set with bitmask `bits`.
    pub const fn from_bits(bits: u32) -> PathSet {
        PathSet(bits)
    }
    /// Does the set hold `path`?
    pub const fn contains(self, path: PathId) -> bool {
        self.0 & (1 << path.0) != 0
    }
    /// Add `path`.
    pub fn insert(&mut self, path: PathId) {
        self.0 |= 1 << path.0;
    }
    /// Remove `path`.
    pub fn remove(&mut self, path: PathId) {
        self.0 &= !(1 << path.0);
    }
    /// Number of paths in the set.
    pub const fn len(self) -> usize {
        self.0.count_ones() as usize
    }
    /// Is the set empty?
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// Paths in either set.
    pub const fn union(self, other: PathSet) -> PathSet {
        PathSet(self.0 | other.0)
    }
    /// Paths in both sets.
    pub const fn intersection(self, other: PathSet) -> PathSet {
        PathSet(self.0 & other.0)
    }
    /// Paths in `self` but not in `other`.
    pub const fn difference(self, other: PathSet) -> PathSet {
        PathSet(self.0 & !other.0)
    }
    /// Is every path of `self` also in `other`?
    pub const fn is_subset(self, other: PathSet) -> bool {
        self.0 & !other.0 == 0
    }
    /// The lowest-indexed path, if any.
    pub fn first(self) -> Option<PathId> {
        if self.0 == 0 {
            None
        } else {
            Some(PathId(self.0.trailing_zeros() as u8))
        }
    }
    /// Paths in ascending index order.
    pub fn iter(self) -> PathSetIter {
        PathSetIter(self.0)
    }
}

impl fmt::Debug for PathSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter().map(|p| p.0)).finish()
    }
}

impl fmt::Display for PathSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, p) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}", p.0)?;
        }
        f.write_str("}")
    }
}

impl FromIterator<PathId> for PathSet {
    fn from_iter<I: IntoIterator<Item = PathId>>(iter: I) -> Self {
        let mut s = PathSet::EMPTY;
        for p in iter {
            s.insert(p);
        }
        s
    }
}

/// Iterator over a [`PathSet`] in ascending order.
#[derive(Debug, Clone)]
pub struct PathSetIter(u32);

impl Iterator for PathSetIter {
    type Item = PathId;
    fn next(&mut self) -> Option<PathId> {
        if self.0 == 0 {
            return None;
        }
        let i = self.0.trailing_zeros();
        self.0 &= self.0 - 1;
        Some(PathId(i as u8))
    }
}

/// One reading of a subflow's kernel state (Linux `TCP_INFO`), already converted to units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpInfoSample {
    /// Kernel smoothed RTT (`tcpi_rtt`).
    pub srtt: Duration,
    /// Kernel RTT variance (`tcpi_rttvar`).
    pub rttvar: Duration,
    /// Kernel minimum RTT (`tcpi_min_rtt`), if reported.
    pub min_rtt: Option<Duration>,
    /// Congestion window in bytes (`tcpi_snd_cwnd * tcpi_snd_mss`).
    pub cwnd_bytes: u64,
    /// Sender MSS (`tcpi_snd_mss`).
    pub mss_bytes: u32,
    /// Bytes sent and not yet acknowledged (`tcpi_unacked * tcpi_snd_mss`).
    pub unacked_bytes: u64,
    /// Bytes written to the socket and not yet sent (`tcpi_notsent_bytes`).
    pub notsent_bytes: u64,
    /// Delivery-rate estimate (`tcpi_delivery_rate`); zero if the kernel has none yet.
    pub delivery_rate: Bandwidth,
    /// Consecutive RTO back-offs of the oldest unacknowledged segment (`tcpi_backoff`).
    pub rto_backoff: u32,
    /// Total bytes acknowledged on this subflow (`tcpi_bytes_acked`); progress resets RTO counting.
    pub bytes_acked: u64,
    /// How long the oldest bytes written to the subflow and not yet acknowledged by the peer's
    /// TCP have waited (zero when everything written is acknowledged). The shell keeps the
    /// write times; the kernel has no such field. Unlike the smoothed RTT, which moves by an
    /// eighth of a sample that is itself a round trip old, it grows in real time while a
    /// path's queue builds or the path goes dark: a lower bound on what the path's RTT is now.
    pub unacked_age: Duration,
}

/// Largest RTO back-off count taken from a sample (`tcpi_backoff` is a `u8`).
pub const MAX_RTO_BACKOFF: u32 = 255;

/// Default MSS assumed before the first sample (Ethernet MTU minus IPv4/TCP headers with
/// timestamps).
pub const DEFAULT_MSS_BYTES: u32 = 1448;

/// How far back a path's delivery rates count for its window cap
/// ([`crate::scheduler::SchedConfig::window_gain`]): 10 s, about one cell at 300 km/h; a rate
/// older than that says little about the carrier now.
pub const RATE_MEMORY: Duration = Duration::from_secs(10);

/// Whole seconds of [`RATE_MEMORY`], one bucket each.
const RATE_BUCKETS: usize = 10;

/// The highest delivery rate a path's kernel reported in about the last [`RATE_MEMORY`]:
/// one maximum per second of the clock, ten seconds kept, no allocation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecentMaxRate {
    /// (second of the clock + 1, highest rate in it); a second of 0 is an empty bucket.
    buckets: [(u64, Bandwidth); RATE_BUCKETS],
}

impl RecentMaxRate {
    fn second(now: Instant) -> u64 {
        now.as_micros() / 1_000_000 + 1
    }

    /// Fold in one rate measured at `now`.
    pub fn record(&mut self, now: Instant, rate: Bandwidth) {
        let k = Self::second(now);
        let slot = &mut self.buckets[(k % RATE_BUCKETS as u64) as usize];
        if slot.0 != k {
            *slot = (k, rate);
        } else if rate > slot.1 {
            slot.1 = rate;
        }
    }

    /// The highest rate recorded in this second and the nine before it; zero when none.
    pub fn max(&self, now: Instant) -> Bandwidth {
        let k = Self::second(now);
        self.buckets
            .iter()
            .filter(|(s, _)| *s != 0 && *s <= k && *s + RATE_BUCKETS as u64 > k)
            .map(|(_, r)| *r)
            .max()
            .unwrap_or(Bandwidth::ZERO)
    }
}

/// Marks kept by [`AckedHistory`].
const ACKED_MARKS: usize = 16;

/// A path's acknowledged-bytes total at a few recent moments, about an eighth of an RTT apart
/// (so the 16 marks span two RTTs), to tell how much the path delivered in its last RTT: the
/// amount RFC 7661 calls pipeACK. No allocation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AckedHistory {
    /// (time, bytes acknowledged so far), oldest first from `head`.
    marks: [(Instant, u64); ACKED_MARKS],
    len: u8,
    head: u8,
}

impl AckedHistory {
    fn newest(&self) -> Option<(Instant, u64)> {
        (self.len > 0).then(|| {
            let i = (usize::from(self.head) + usize::from(self.len) - 1) % ACKED_MARKS;
            self.marks[i]
        })
    }

    /// Note the subflow's total `acked` at `now`, keeping marks at least `spacing` apart. A total
    /// below the last one (a new subflow counts from zero) starts the history again.
    pub fn record(&mut self, now: Instant, acked: u64, spacing: Duration) {
        if let Some((t, a)) = self.newest() {
            if acked < a {
                *self = AckedHistory::default();
            } else if now < t + spacing {
                return;
            }
        }
        if usize::from(self.len) == ACKED_MARKS {
            self.head = ((usize::from(self.head) + 1) % ACKED_MARKS) as u8;
            self.len -= 1;
        }
        let i = (usize::from(self.head) + usize::from(self.len)) % ACKED_MARKS;
        self.marks[i] = (now, acked);
        self.len += 1;
    }

    /// Bytes acknowledged between the newest mark at least `span` before `now` (the oldest
    /// mark when none is that old) and `acked`, the total now.
    pub fn acked_within(&self, now: Instant, span: Duration, acked: u64) -> u64 {
        let mut base = None;
        for k in 0..usize::from(self.len) {
            let (t, a) = self.marks[(usize::from(self.head) + k) % ACKED_MARKS];
            if base.is_none() || t + span <= now {
                base = Some(a);
            }
        }
        base.map_or(0, |a| acked.saturating_sub(a))
    }
}

/// Everything the stages know about one path at decision time.
#[derive(Clone, Debug, PartialEq)]
pub struct PathState {
    /// Which path.
    pub id: PathId,
    /// Whether the subflow is connected and usable; dead paths are in none of S, C, U.
    pub alive: bool,
    /// Smoothed RTT.
    pub srtt: Duration,
    /// RTT variance.
    pub rttvar: Duration,
    /// Smallest RTT seen.
    pub min_rtt: Duration,
    /// Congestion window in bytes, as the scheduler uses it: the kernel's
    /// ([`PathState::kernel_cwnd_bytes`]), capped at what the path delivered lately when
    /// [`crate::scheduler::SchedConfig::window_gain`] is set ([`PathState::window_cap`]).
    pub cwnd_bytes: u64,
    /// Congestion window in bytes as the kernel last reported it (`TCP_INFO`, or
    /// [`crate::Scheduler::on_window`]).
    pub kernel_cwnd_bytes: u64,
    /// Highest delivery rate of the last [`RATE_MEMORY`], from samples that acknowledged data.
    pub recent_rate: RecentMaxRate,
    /// Acknowledged totals of the last two RTTs or so, for what the last RTT delivered.
    pub acked_history: AckedHistory,
    /// Sender MSS in bytes.
    pub mss_bytes: u32,
    /// Bytes in flight (sent, not acknowledged by the subflow).
    pub unacked_bytes: u64,
    /// Bytes queued on the subflow and not yet sent (its share of the send buffer).
    pub notsent_bytes: u64,
    /// Bandwidth estimate; zero when unknown.
    pub bandwidth: Bandwidth,
    /// When `bandwidth` was last updated.
    pub bandwidth_at: Instant,
    /// One-way delay estimate towards the peer.
    pub owd: Duration,
    /// Whether `owd` was measured (otherwise it is `srtt / 2`).
    pub owd_measured: bool,
    /// Consecutive RTOs without progress.
    pub consecutive_rtos: u32,
    /// When the scheduler last placed bytes on this path (`None`: never).
    pub last_scheduled: Option<Instant>,
    /// Bytes the scheduler placed on other paths since it last placed any here.
    pub bytes_elsewhere_since: u64,
    /// Total `bytes_acked` of the last sample (to detect progress).
    pub bytes_acked: u64,
    /// Age of the oldest unacknowledged bytes on the subflow at the last sample
    /// ([`TcpInfoSample::unacked_age`]).
    pub unacked_age: Duration,
}

impl PathState {
    /// A fresh path: RTT `initial_rtt` until measured, an initial window of 10 MSS
    /// (RFC 6928), nothing in flight.
    pub fn new(id: PathId, initial_rtt: Duration) -> Self {
        PathState {
            id,
            alive: true,
            srtt: initial_rtt,
            rttvar: Duration::from_micros(initial_rtt.as_micros() / 2),
            min_rtt: initial_rtt,
            cwnd_bytes: 10 * DEFAULT_MSS_BYTES as u64,
            kernel_cwnd_bytes: 10 * DEFAULT_MSS_BYTES as u64,
            recent_rate: RecentMaxRate::default(),
            acked_history: AckedHistory::default(),
            mss_bytes: DEFAULT_MSS_BYTES,
            unacked_bytes: 0,
            notsent_bytes: 0,
            bandwidth: Bandwidth::ZERO,
            bandwidth_at: Instant::ZERO,
            owd: Duration::from_micros(initial_rtt.as_micros() / 2),
            owd_measured: false,
            consecutive_rtos: 0,
            last_scheduled: None,
            bytes_elsewhere_since: 0,
            bytes_acked: 0,
            unacked_age: Duration::ZERO,
        }
    }

    /// Bytes the subflow holds: in flight plus not yet sent.
    pub fn queued_bytes(&self) -> u64 {
        self.unacked_bytes.saturating_add(self.notsent_bytes)
    }

    /// Can the subflow take more bytes right now (window not full)? This is MPTCP's
    /// "subflow available" test: in-flight plus queued bytes below the congestion window.
    pub fn has_room(&self) -> bool {
        self.alive && self.queued_bytes() < self.cwnd_bytes
    }

    /// The RTT as it is now at the least: the smoothed RTT, or the age of the oldest
    /// unacknowledged bytes when that is longer (those bytes have not made the round trip yet).
    pub fn current_rtt(&self) -> Duration {
        self.srtt.max(self.unacked_age)
    }

    /// Bandwidth to use in delay estimates: the measured estimate, else `cwnd / srtt`.
    pub fn effective_bandwidth(&self) -> Bandwidth {
        if !self.bandwidth.is_zero() {
            self.bandwidth
        } else {
            Bandwidth::from_bytes_over(self.cwnd_bytes, self.srtt)
        }
    }

    /// RTT variance relative to RTT (the paper's η in §4.4).
    pub fn rtt_variability(&self) -> f64 {
        if self.srtt.is_zero() {
            0.0
        } else {
            self.rttvar.as_secs_f64() / self.srtt.as_secs_f64()
        }
    }

    /// Age of the bandwidth estimate at `now`.
    pub fn bandwidth_age(&self, now: Instant) -> Duration {
        now - self.bandwidth_at
    }

    /// The most the scheduler lets the path hold (in flight plus queued) with window gain
    /// `gain`: `gain` × the larger of what the path delivered in its last RTT (RFC 7661's
    /// pipeACK) and the highest delivery rate of the last [`RATE_MEMORY`] × the smallest RTT
    /// (BBR's estimate of what the path holds), at least an initial window of 10 segments
    /// (RFC 6928); `u64::MAX` (no cap) while no rate was reported in that time.
    ///
    /// A subflow that carries many passengers' flows keeps the congestion window of its
    /// busiest moment through pauses (the session's probes keep it from counting as idle), so
    /// without a cap minRTT puts a whole new download on the one path whose window it fits, in
    /// one burst that overflows the carrier's queue while the other paths stay idle. After a
    /// pause the cap is `gain` path-sized bursts (Linux keeps reporting the last rate it
    /// measured with enough data to send); from there it grows with what each RTT delivers,
    /// as slow start does, and while the path is busy it stays at `gain` × a window's worth,
    /// above the kernel's window, whatever queueing does to the RTT.
    pub fn window_cap(&self, now: Instant, gain: f64) -> u64 {
        let rate = self.recent_rate.max(now);
        if rate.is_zero() {
            return u64::MAX;
        }
        let path_bytes = rate.as_bytes_per_sec() as f64 * self.min_rtt.as_secs_f64();
        let last_rtt = self
            .acked_history
            .acked_within(now, self.srtt, self.bytes_acked) as f64;
        let cap = path_bytes.max(last_rtt) * gain;
        let floor = 10 * u64::from(self.mss_bytes.max(1));
        if cap >= u64::MAX as f64 {
            u64::MAX
        } else {
            (cap as u64).max(floor)
        }
    }

    /// Apply a `TCP_INFO` sample, the window capped with `window_gain` when set (see
    /// [`PathState::window_cap`]). Returns how many *new* consecutive RTOs it reveals.
    pub(crate) fn apply_tcp_info(
        &mut self,
        now: Instant,
        s: &TcpInfoSample,
        window_gain: Option<f64>,
    ) -> u32 {
        if !s.srtt.is_zero() {
            self.srtt = s.srtt;
            self.rttvar = s.rttvar;
        }
        match s.min_rtt {
            Some(m) if !m.is_zero() => self.min_rtt = m,
            _ => self.min_rtt = self.min_rtt.min(self.srtt),
        }
        if s.mss_bytes > 0 {
            self.mss_bytes = s.mss_bytes;
        }
        self.unacked_bytes = s.unacked_bytes;
        self.notsent_bytes = s.notsent_bytes;
        let progressed = s.bytes_acked > self.bytes_acked;
        if !s.delivery_rate.is_zero() {
            self.bandwidth = s.delivery_rate;
            self.bandwidth_at = now;
            // The kernel reports its last rate sample until the next acknowledgement: only a
            // sample that acknowledged something is a new measurement.
            if progressed {
                self.recent_rate.record(now, s.delivery_rate);
            }
        }
        self.bytes_acked = s.bytes_acked;
        let spacing = Duration::from_micros((self.srtt.as_micros() / 8).max(1_000));
        self.acked_history.record(now, s.bytes_acked, spacing);
        self.kernel_cwnd_bytes = s.cwnd_bytes;
        self.cwnd_bytes = match window_gain {
            Some(g) if g.is_finite() && g >= 1.0 => s.cwnd_bytes.min(self.window_cap(now, g)),
            _ => s.cwnd_bytes,
        };
        if !self.owd_measured {
            self.owd = Duration::from_micros(self.srtt.as_micros() / 2);
        }
        self.unacked_age = s.unacked_age;
        let before = self.consecutive_rtos;
        // The kernel's counter is 8 bits wide; a larger value is a bad sample, not 4 billion RTOs.
        let backoff = s.rto_backoff.min(MAX_RTO_BACKOFF);
        self.consecutive_rtos = backoff;
        if progressed && backoff == 0 {
            0
        } else {
            backoff.saturating_sub(before)
        }
    }

    /// Fold one RTT measurement into `srtt`/`rttvar` (RFC 6298 §2, α = 1/8, β = 1/4).
    pub(crate) fn apply_rtt(&mut self, rtt: Duration) {
        let r = rtt.as_micros() as i128;
        let srtt = self.srtt.as_micros() as i128;
        let var = self.rttvar.as_micros() as i128;
        let new_var = (3 * var + (srtt - r).abs()) / 4;
        let new_srtt = (7 * srtt + r) / 8;
        self.rttvar = Duration::from_micros(new_var as u64);
        self.srtt = Duration::from_micros(new_srtt as u64);
        self.min_rtt = self.min_rtt.min(rtt);
        if !self.owd_measured {
            self.owd = Duration::from_micros(self.srtt.as_micros() / 2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pathset_ops() {
        let a = PathId::new(0).unwrap();
        let b = PathId::new(31).unwrap();
        assert!(PathId::new(32).is_none());
        let mut s = PathSet::EMPTY;
        s.insert(a);
        s.insert(b);
        assert_eq!(s.len(), 2);
        assert_eq!(s.iter().collect::<alloc::vec::Vec<_>>(), [a, b]);
        s.remove(a);
        assert_eq!(s.first(), Some(b));
        assert!(PathSet::single(b).is_subset(s));
        assert_eq!(alloc::format!("{}", PathSet::from_bits(0b101)), "{0,2}");
    }

    #[test]
    fn tcp_info_reveals_new_rtos_and_progress_resets() {
        let mut p = PathState::new(PathId::new(0).unwrap(), Duration::from_millis(100));
        let mut s = TcpInfoSample {
            srtt: Duration::from_millis(50),
            rttvar: Duration::from_millis(5),
            min_rtt: None,
            cwnd_bytes: 14480,
            mss_bytes: 1448,
            unacked_bytes: 1448,
            notsent_bytes: 0,
            delivery_rate: Bandwidth::ZERO,
            rto_backoff: 2,
            bytes_acked: 0,
            unacked_age: Duration::ZERO,
        };
        assert_eq!(p.apply_tcp_info(Instant::ZERO, &s, None), 2);
        s.rto_backoff = 3;
        assert_eq!(p.apply_tcp_info(Instant::ZERO, &s, None), 1);
        s.rto_backoff = 0;
        s.bytes_acked = 10;
        assert_eq!(p.apply_tcp_info(Instant::ZERO, &s, None), 0);
        assert_eq!(p.consecutive_rtos, 0);
        assert_eq!(p.min_rtt, Duration::from_millis(50));
    }

    #[test]
    fn rfc6298_smoothing() {
        let mut p = PathState::new(PathId::new(0).unwrap(), Duration::from_millis(100));
        p.apply_rtt(Duration::from_millis(20));
        assert_eq!(p.srtt, Duration::from_micros(90_000));
        assert_eq!(p.rttvar, Duration::from_micros((3 * 50_000 + 80_000) / 4));
        assert_eq!(p.min_rtt, Duration::from_millis(20));
    }
}
