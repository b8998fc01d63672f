//! (relay) The decisions that keep one path's subflow up, pure and clock-free: the pauses
//! between connection attempts, what the operator hears of failed ones, the pause after an
//! attempt reached another proxy than the session's, and the four reasons to replace a
//! working subflow with a fresh connection (a silent path, an idle subflow whose congestion
//! state is stale, a subflow stuck in RTO back-off, credentials a reload replaced).
//!
//! Every method takes the time and the readings it decides on as arguments and returns what
//! to do: `polycorn-net`'s relay path task sleeps, reads sockets and counters, connects and
//! logs; `polycorn-sim`'s relay end does the same with modelled subflows in virtual time.

use polycorn_sched::time::{Duration, Instant};

use crate::session::PathCounters;

/// Which idle subflows the relay replaces with a fresh connection (the relay configuration's
/// `idle_refresh`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IdleRefresh {
    /// Only a subflow whose own slow-start threshold collapsed below 20 segments.
    #[default]
    Collapsed,
    /// Also every subflow that carried 256 KB or more of downlink data since it came up.
    Used,
    /// Never.
    Off,
}

/// The fields of a subflow's `TCP_INFO` the path policy reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SocketState {
    /// Slow-start threshold, segments (`tcpi_snd_ssthresh`; `u32::MAX` or the kernel's
    /// `0x7fffffff` while unset).
    pub ssthresh_segments: u32,
    /// Segments sent and not yet acknowledged (`tcpi_unacked`).
    pub unacked_segments: u32,
    /// Bytes written and not yet sent (`tcpi_notsent_bytes`).
    pub notsent_bytes: u64,
    /// Consecutive RTO back-offs (`tcpi_backoff`).
    pub backoff: u8,
}

/// Whether a subflow's socket carries at most probes: up to 4 segments in flight (probes and
/// their answers, a segment each; `TCP_INFO` counts what is in flight in segments) and up to
/// 1 KB queued (a probe or two). The idle test of the refreshes at both ends: on a path whose
/// RTT exceeds the probe interval a probe is always in flight.
pub fn probes_only(unacked_segments: u64, notsent_bytes: u64) -> bool {
    unacked_segments <= 4 && notsent_bytes <= 1024
}

/// While a path's TCP handshake has not got through, a new attempt starts this often: after a
/// blackout the path is used again within this (plus a round trip), not when a SYN lost in it
/// is next retransmitted (1 s, 2 s, 4 s after the first).
pub const CONNECT_STAGGER: Duration = Duration::from_millis(250);
/// How long a probe connection's TCP handshake may take before the probe fails.
pub const PROBE_CONNECT_TIMEOUT: Duration = Duration::from_millis(1500);

/// How often the relay looks at an idle subflow's congestion state.
pub const REFRESH_CHECK: Duration = Duration::from_secs(1);
/// A subflow younger than this is never refreshed (at most one refresh per path this often).
const REFRESH_MIN_AGE: Duration = Duration::from_secs(5);
/// A slow-start threshold below this many segments means a loss hit the subflow while its
/// window was small (idle): worth a fresh connection.
const REFRESH_SSTHRESH_SEGMENTS: u32 = 20;
/// With [`IdleRefresh::Used`], an idle subflow that carried this many bytes of downlink data
/// frames since it came up is replaced.
const REFRESH_USED_BYTES: u64 = 256 << 10;
/// A path counts as idle when fewer bytes than this crossed it (either way) in the last
/// [`REFRESH_CHECK`] (probes and their answers are far below).
const REFRESH_QUIET_BYTES: u64 = 4096;

/// After a reload replaced the TLS credentials, a path replaces its subflow (made with the
/// old ones) at its first idle moment, or after this long when it never is idle: so the proxy
/// soon sees the renewed certificate. Nothing in flight is lost (make before break).
pub const RENEW_WITHIN: Duration = Duration::from_secs(300);
/// Longest pause between a path's attempts to renew its subflow with credentials that fail.
const RENEW_RETRY_MAX: Duration = Duration::from_secs(60);

/// How often the relay looks for a subflow stuck in RTO back-off on a path that works.
pub const BACKOFF_CHECK: Duration = Duration::from_millis(250);
/// A subflow whose own TCP has stayed in RTO back-off this long, while frames from the proxy
/// keep arriving on its path, is replaced.
const BACKOFF_MIN: Duration = Duration::from_millis(500);

/// How often the watchdog looks whether the path is silent.
pub const WATCHDOG_CHECK: Duration = Duration::from_millis(500);
/// Looks in a row that found the path silent after which it is probed.
const WATCHDOG_SILENT_LOOKS: u32 = 2;

/// First pause after a failed connection attempt; it doubles with each failure in a row.
const RETRY_MIN: Duration = Duration::from_millis(100);
/// Longest pause between attempts that failed on coverage (timeouts, resets, no route): a
/// path coming out of a blackout is tried again within this.
const RETRY_MAX: Duration = Duration::from_secs(2);
/// Longest pause between attempts the proxy refused ([`Failure::Refused`]: revoked,
/// certificate, protocol version). Each costs the proxy a handshake and repeats until an
/// operator acts; a relay let in again (revocation lifted) is back within this.
const REFUSED_RETRY_MAX: Duration = Duration::from_secs(60);
/// A subflow replaced as silent sooner than this after it came up counts towards
/// [`SILENT_HINT_AFTER`].
const SHORT_LIVED: Duration = Duration::from_secs(10);
/// Short-lived silent subflows in a row of one path after which the relay warns of a path-MTU
/// black hole: the handshake's small packets get through, the data's full-sized ones do not,
/// so every new subflow falls silent as soon as it carries data.
const SILENT_HINT_AFTER: u32 = 4;

/// The pause between attempts that reached another proxy than the session's, while other
/// paths still reach the session's ([`Failure::OtherProxy`]): each costs that proxy a
/// handshake, and the path needs it only once the session's proxy is gone (its other paths
/// then find that out themselves).
pub const OTHER_PROXY_RETRY: Duration = Duration::from_secs(5);
/// How often a path waiting after reaching another proxy looks whether it may join now.
const OTHER_PROXY_CHECK: Duration = Duration::from_millis(250);

/// A path that has had no subflow this long, with every connection attempt failing, is
/// reported as a warning: shorter outages (blackouts, tunnels) are routine on a train.
const DOWN_WARN_AFTER: Duration = Duration::from_secs(30);
/// While the attempts keep failing, the warning is repeated this often.
const DOWN_REWARN: Duration = Duration::from_secs(300);

/// What kind of failure a connection attempt met, as far as the pause after it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Coverage: timeouts, resets, no route, a local setup problem.
    Coverage,
    /// The proxy refused the relay (revoked, certificate, protocol version).
    Refused,
    /// The attempt reached another proxy than the session's, which other paths still reach.
    OtherProxy,
}

/// The pause after a failed attempt of kind `failure`, given the pause after the previous one
/// in the same run of failures (`None` for the first failure). A refusal by the proxy starts
/// at [`RETRY_MAX`] and doubles up to [`REFUSED_RETRY_MAX`]; another proxy than the session's
/// gives [`OTHER_PROXY_RETRY`]; any other failure doubles from [`RETRY_MIN`] up to
/// [`RETRY_MAX`].
pub fn retry_pause(previous: Option<Duration>, failure: Failure) -> Duration {
    let doubled = previous.map_or(RETRY_MIN, |p| p.saturating_add(p));
    match failure {
        Failure::OtherProxy => OTHER_PROXY_RETRY,
        Failure::Refused => doubled.clamp(RETRY_MAX, REFUSED_RETRY_MAX),
        Failure::Coverage => doubled.clamp(RETRY_MIN, RETRY_MAX),
    }
}

/// The pauses of one run of failed attempts in a row ([`retry_pause`]).
#[derive(Debug, Default)]
pub struct Retry {
    /// The pause after the last of the failed attempts in a row, if any.
    pause: Option<Duration>,
}

impl Retry {
    /// An attempt failed with `failure`: the pause before the next one.
    pub fn failed(&mut self, failure: Failure) -> Duration {
        let wait = retry_pause(self.pause, failure);
        self.pause = Some(wait);
        wait
    }
}

/// Why a subflow is replaced by a fresh connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replace {
    /// The path stayed silent.
    Silent,
    /// Refresh of an idle subflow whose slow-start threshold collapsed (segments).
    Refresh(u32),
    /// Refresh of an idle subflow that carried this many downlink bytes.
    Used(u64),
    /// Refresh the proxy asked for: a timeout cut its end's slow-start threshold (segments)
    /// while the path was idle ([`crate::Frame::Refresh`]).
    Asked(u32),
    /// The path carries the proxy's frames again but this subflow's TCP still waits out an
    /// exponentially backed-off retransmission timer (consecutive back-offs).
    BackedOff(u8),
    /// The subflow was made with TLS credentials a reload has since replaced.
    Renewed,
}

/// What the operator hears of one path's failed connection attempts. A failure that points at
/// configuration or credentials (`setup`: a device that does not exist, an address not on
/// this host, a certificate the proxy rejects, another protocol version) is a warning at
/// once, once per distinct error; any failure becomes a warning once the path has been
/// without a subflow for [`DOWN_WARN_AFTER`], then every [`DOWN_REWARN`]. The rest stays at
/// debug.
#[derive(Debug, Default)]
pub struct ConnectFailures {
    /// First failure of the current run of failures.
    since: Option<Instant>,
    /// Failed attempts in the current run.
    attempts: u32,
    /// Last warning of this run: when, and the error it named.
    warned: Option<(Instant, String)>,
}

/// A warning to log about a path's failed attempts.
#[derive(Debug, PartialEq)]
pub struct DownWarning {
    /// Failed attempts so far in this run.
    pub attempts: u32,
    /// Since the first of them.
    pub down: Duration,
}

impl ConnectFailures {
    /// Record a failed attempt at `now`; `Some` when it is worth a warning.
    pub fn failed(&mut self, now: Instant, setup: bool, error: &str) -> Option<DownWarning> {
        let since = *self.since.get_or_insert(now);
        self.attempts += 1;
        let down = now.saturating_duration_since(since);
        let warn = match &self.warned {
            None => setup || down >= DOWN_WARN_AFTER,
            Some((at, said)) => {
                (setup && said != error) || now.saturating_duration_since(*at) >= DOWN_REWARN
            }
        };
        if !warn {
            return None;
        }
        self.warned = Some((now, error.to_string()));
        Some(DownWarning {
            attempts: self.attempts,
            down,
        })
    }

    /// A connection got through at `now`: the run is over. `Some` (how long the path was
    /// without a subflow, and how many attempts failed) when a warning had been logged, so the
    /// recovery is worth saying too.
    pub fn connected(&mut self, now: Instant) -> Option<DownWarning> {
        let run = std::mem::take(self);
        run.warned.map(|_| DownWarning {
            attempts: run.attempts,
            down: run
                .since
                .map_or(Duration::ZERO, |s| now.saturating_duration_since(s)),
        })
    }
}

/// One path's state across its subflows: the run of failed attempts (pauses and warnings),
/// whether meeting another proxy was said, and the run of short-lived silent subflows.
#[derive(Debug, Default)]
pub struct PathPolicy {
    failures: ConnectFailures,
    retry: Retry,
    /// Attempts reaching another proxy than the session's were said since the last subflow.
    other_told: bool,
    /// Subflows in a row replaced as silent within [`SHORT_LIVED`] of coming up.
    silent_streak: u32,
}

impl PathPolicy {
    /// A connection attempt of the path without a subflow failed with `failure`: the pause
    /// before the next attempt.
    pub fn connect_failed(&mut self, failure: Failure) -> Duration {
        self.retry.failed(failure)
    }

    /// A failed attempt (`setup`: one that points at configuration or credentials) at `now`:
    /// `Some` when it is worth a warning ([`ConnectFailures`]).
    pub fn report(&mut self, now: Instant, setup: bool, error: &str) -> Option<DownWarning> {
        self.failures.failed(now, setup, error)
    }

    /// An attempt reached another proxy than the session's: whether to say so (once until the
    /// path has a subflow again).
    pub fn met_other_proxy(&mut self) -> bool {
        !std::mem::replace(&mut self.other_told, true)
    }

    /// A subflow came up at `now`: the run of failures is over. `Some` when a warning had been
    /// logged about it ([`ConnectFailures::connected`]).
    pub fn connected(&mut self, now: Instant) -> Option<DownWarning> {
        self.retry = Retry::default();
        self.other_told = false;
        self.failures.connected(now)
    }

    /// The subflow, up for `up_for`, ended or was replaced (`silent`: replaced because the path
    /// stayed silent). `Some` (the count) when short-lived silent subflows came often enough
    /// in a row to hint at a path-MTU black hole.
    pub fn subflow_over(&mut self, up_for: Duration, silent: bool) -> Option<u32> {
        if up_for >= SHORT_LIVED {
            self.silent_streak = 0;
        } else if silent {
            self.silent_streak += 1;
            if self.silent_streak == SILENT_HINT_AFTER {
                return Some(self.silent_streak);
            }
        }
        None
    }
}

/// The pause after an attempt reached another proxy than the session's: `wait`, or less,
/// until no path works with the session's proxy any more or the session changed (renewed, or
/// closed by its proxy), so that the path tries again at once when it may join.
#[derive(Debug)]
pub struct OtherProxyPause {
    /// The session's epoch at the start.
    epoch: u64,
    /// Whether the proxy had closed the session at the start.
    closed: bool,
    /// The end of the full pause.
    until: Instant,
}

impl OtherProxyPause {
    /// A pause of `wait` from `now`, in a session of `epoch` (`closed`: its proxy closed it).
    pub fn new(now: Instant, wait: Duration, epoch: u64, closed: bool) -> Self {
        OtherProxyPause {
            epoch,
            closed,
            until: now + wait,
        }
    }

    /// How long to sleep from `now` before the next look (`None`: the pause is over).
    pub fn sleep(&self, now: Instant) -> Option<Duration> {
        (now < self.until).then(|| (self.until - now).min(OTHER_PROXY_CHECK))
    }

    /// A look at the session: its epoch, whether its proxy closed it, whether any path works
    /// with it. True: the pause is over.
    pub fn may_join(&self, epoch: u64, closed: bool, any_usable: bool) -> bool {
        epoch != self.epoch || closed != self.closed || !any_usable
    }
}

/// Watchdog: a path that stays silent (no frame for the session's stall time) is probed with a
/// fresh connection; when the probe gets through, it replaces the old subflow, whose TCP may
/// sit in exponential RTO back-off for a long time.
#[derive(Debug, Default)]
pub struct Watchdog {
    /// Looks in a row that found the path silent.
    silent: u32,
}

impl Watchdog {
    /// A look every [`WATCHDOG_CHECK`]: whether the path is attached and silent. True: probe
    /// (with [`Failure`]-paced pauses only for refusals and another proxy) until a fresh
    /// subflow is up.
    pub fn on_look(&mut self, stalled: bool) -> bool {
        self.silent = if stalled { self.silent + 1 } else { 0 };
        self.silent >= WATCHDOG_SILENT_LOOKS
    }
}

/// Whether a path carried fewer than [`REFRESH_QUIET_BYTES`] either way between two readings of
/// its counters (the refresh's and the renewal's measure of an idle path).
fn quiet_between(before: &PathCounters, now: &PathCounters) -> bool {
    now.rx_bytes.saturating_sub(before.rx_bytes) < REFRESH_QUIET_BYTES
        && now.tx_bytes.saturating_sub(before.tx_bytes) < REFRESH_QUIET_BYTES
}

/// Whether a socket has only probes in flight and is out of back-off. On a path whose RTT
/// exceeds the probe interval a probe is always in flight, and nothing in flight was never
/// seen there. What the old subflow has in flight is sent again on the fresh one.
fn socket_idle(i: &SocketState) -> bool {
    probes_only(u64::from(i.unacked_segments), i.notsent_bytes) && i.backoff == 0
}

/// Refresh: a blackout that hits an idle subflow (only probes in flight) cuts its slow-start
/// threshold to a few segments, and loss-based congestion control then grows the window
/// linearly for many seconds when passengers' data comes back. Such a subflow is replaced,
/// while the path is idle, by a fresh connection that starts in slow start (make before
/// break). The proxy asks for the same when a timeout cut its own end's threshold (the
/// downlink's), which this end cannot see.
#[derive(Debug)]
pub struct Refresh {
    mode: IdleRefresh,
    /// When the subflow came up.
    started: Instant,
    /// The path's counters at the last look.
    last: PathCounters,
    /// Bytes received on the path when the subflow came up.
    rx_at_start: u64,
    /// The proxy's request not yet acted on: its threshold, segments.
    asked: Option<u32>,
}

impl Refresh {
    /// The subflow came up at `now`; the path's counters then.
    pub fn new(mode: IdleRefresh, now: Instant, counters: PathCounters) -> Self {
        Refresh {
            mode,
            started: now,
            last: counters,
            rx_at_start: counters.rx_bytes,
            asked: None,
        }
    }

    /// Whether the path refreshes at all.
    pub fn enabled(&self) -> bool {
        self.mode != IdleRefresh::Off
    }

    /// A look every [`REFRESH_CHECK`] at `now`: the path's counters, the proxy's request
    /// taken since the last look (its threshold), the subflow's socket (read only when needed;
    /// `None`: unreadable) and whether the path is usable (asked last). `Some`: replace the
    /// subflow with a fresh connection, for that reason.
    pub fn on_look(
        &mut self,
        now: Instant,
        counters: PathCounters,
        request: Option<u32>,
        socket: impl FnOnce() -> Option<SocketState>,
        usable: impl FnOnce() -> bool,
    ) -> Option<Replace> {
        let quiet = quiet_between(&self.last, &counters);
        self.last = counters;
        if let Some(ssthresh) = request {
            self.asked = Some(ssthresh);
        }
        if !quiet {
            // Data crossed the path since: it ran with the window it had.
            self.asked = None;
        }
        if now.saturating_duration_since(self.started) < REFRESH_MIN_AGE || !quiet {
            return None;
        }
        let i = socket()?;
        let collapsed = i.ssthresh_segments < REFRESH_SSTHRESH_SEGMENTS;
        let carried = counters.rx_bytes.saturating_sub(self.rx_at_start);
        let used = self.mode == IdleRefresh::Used && carried >= REFRESH_USED_BYTES;
        if !((collapsed || used || self.asked.is_some()) && socket_idle(&i) && usable()) {
            return None;
        }
        Some(match self.asked {
            _ if collapsed => Replace::Refresh(i.ssthresh_segments),
            Some(theirs) => Replace::Asked(theirs),
            None => Replace::Used(carried),
        })
    }
}

/// Back-off: after a blackout the proxy's retransmission may get through first; its frames
/// then arrive again (the path is not silent), while this end's own retransmission timer,
/// doubled at every RTO of the blackout, can hold everything the relay sends on the path for
/// seconds more. Once frames have arrived during such a back-off, the subflow is replaced.
#[derive(Debug, Default)]
pub struct BackoffWatch {
    /// When the back-off was first seen, and frames received by then.
    since: Option<(Instant, u64)>,
}

impl BackoffWatch {
    /// A look every [`BACKOFF_CHECK`] at `now`: frames received on the path so far, the
    /// subflow's socket (`None`: unreadable), whether a probe is under way. `Some` (the
    /// back-offs in a row): replace the subflow with a fresh connection.
    pub fn on_look(
        &mut self,
        now: Instant,
        rx_frames: u64,
        socket: Option<SocketState>,
        probing: bool,
    ) -> Option<u8> {
        let i = socket?;
        if i.backoff == 0 || i.unacked_segments == 0 {
            self.since = None;
            return None;
        }
        let (first, rx0) = *self.since.get_or_insert((now, rx_frames));
        (now.saturating_duration_since(first) >= BACKOFF_MIN && rx_frames > rx0 && !probing)
            .then_some(i.backoff)
    }

    /// The probe failed at `now`; `rx_frames` as at the look that started it: wait for more
    /// frames from the proxy before the next one.
    pub fn probe_failed(&mut self, now: Instant, rx_frames: u64) {
        self.since = Some((now, rx_frames));
    }
}

/// Renewal: a reload replaced the TLS credentials since this subflow was made. It is replaced
/// at the path's first idle look (no passengers' data either way), or after [`RENEW_WITHIN`]
/// when there is none, so that the proxy sees the new certificate. A proxy that refuses the
/// new credentials is told about once per reload, and tried again less and less often.
#[derive(Debug)]
pub struct Renewal {
    /// When the credentials of `generation` were first seen.
    since: Instant,
    /// The pause before the next look.
    wait: Duration,
    /// The credentials' generation being renewed to.
    generation: u64,
    /// Whether the failure of these credentials was told.
    told: bool,
    /// The path's counters at the last look.
    last: PathCounters,
}

impl Renewal {
    /// Credentials of `generation` replaced the subflow's at `now`; the path's counters then.
    pub fn new(now: Instant, generation: u64, counters: PathCounters) -> Self {
        Renewal {
            since: now,
            wait: REFRESH_CHECK,
            generation,
            told: false,
            last: counters,
        }
    }

    /// The pause before the next look.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// A look at `now`: the credentials' generation, the path's counters, whether the path is
    /// usable (asked only when needed) and whether a probe is under way. True: probe with the
    /// new credentials now.
    pub fn on_look(
        &mut self,
        now: Instant,
        generation: u64,
        counters: PathCounters,
        usable: impl FnOnce() -> bool,
        probing: bool,
    ) -> bool {
        if generation != self.generation {
            // Reloaded again (e.g. with the files fixed): from the start.
            let last = self.last;
            *self = Renewal::new(now, generation, last);
        }
        let idle = quiet_between(&self.last, &counters);
        self.last = counters;
        (idle || now.saturating_duration_since(self.since) >= RENEW_WITHIN) && usable() && !probing
    }

    /// The probe failed (`credentials`: a setup failure or a refusal by the proxy). True: tell
    /// the operator (once per reload); the next look comes later (doubling, up to
    /// [`RENEW_RETRY_MAX`]).
    pub fn probe_failed(&mut self, credentials: bool) -> bool {
        let tell = credentials && !std::mem::replace(&mut self.told, true);
        self.wait = self.wait.saturating_add(self.wait).min(RENEW_RETRY_MAX);
        tell
    }
}

#[cfg(test)]
mod tests;
