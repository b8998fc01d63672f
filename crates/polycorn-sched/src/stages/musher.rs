//! MuSher — split traffic across paths in the ratio of their throughputs, probe for a better
//! ratio, drop a path whose throughput collapsed (soft selector, in place of minRTT).
//!
//! Source: Saha, Aggarwal, Pathak, Koutsonikolas, Widmer, "MuSher: An Agile Multipath-TCP
//! Scheduler for Dual-Band 802.11ad/ac Wireless LANs", ACM MobiCom 2019, and the ratio
//! scheduler its authors published for the out-of-tree Linux MPTCP kernel (quota rounds of
//! 100 segments; a search every 200 ms in 5 % steps, started when the aggregate rate moved for
//! five 100 ms intervals in a row, at most once per 3 s).
//!
//! **Ratio.** Each path in the ratio has a share (per mille; the shares add up to 1000).
//! Chunks go out in rounds of `round` chunks: a path takes `share · round / 1000` of them (at
//! least one), the path in use first, then the next unused one; when every path used its quota
//! the round starts again. The path whose turn it is gets the chunk only if its window has
//! room — otherwise the chunk waits (S stays empty), as in the kernel's ratio scheduler, which
//! keeps the split exact rather than letting the faster window take more than its share.
//! Shares start (and restart whenever the set of usable paths changes) in proportion to each
//! path's throughput estimate: its delivery rate, or `cwnd / srtt` before one is known.
//!
//! **Probing.** Every `interval_ms` (default 100 ms) the stage measures each path's delivered
//! rate from its acknowledged bytes, and the aggregate. Five measurements give a reference;
//! when the aggregate then differs from it by more than a fifth for five intervals in a row
//! (at most once per 3 s), a search starts: the largest share moves up one step (`step_pct`,
//! default 5 %, taken from the others in proportion), then, if the aggregate did not rise, one
//! step down from where it was; in the direction that helped it keeps stepping every two
//! intervals while the aggregate keeps rising, and steps back once it falls. Shares stay within
//! [5 %, 95 %], as in the kernel module.
//!
//! **Collapse.** A path leaves the ratio at once when its subflow waits out a retransmission
//! timeout, or when its oldest unacknowledged bytes have waited longer than the interval and
//! two of its smallest RTTs while in the last interval it delivered at most `collapse_pct` %
//! (default 10 %) of the highest rate it delivered in the last 10 s: the
//! paper's blockage of the 60 GHz link, seen here as a handover blackout or a fading carrier.
//! Its share goes to the others; `reprobe_ms` (default 1000 ms) later, once its subflow is out
//! of RTO back-off, it rejoins with a share from its throughput estimate again.
//!
//! Choices the paper leaves open, and what this stage does:
//! * The paper splits two paths (802.11ad and 802.11ac); with more, every path has a share and
//!   a search moves the largest share against the others in proportion.
//! * Its blockage detection reads the 802.11ad link layer; here it is the subflow's RTO
//!   back-off or its delivered rate, the signals a cellular path gives.
//! * Reinjections and chunks for which no path in the ratio is a candidate go to the
//!   lowest-RTT candidate with window room, like the kernel module's fallback.

use crate::path::{PathId, PathSet, PathState, MAX_PATHS};
use crate::sets::{Moves, Reason, StageKind};
use crate::stage::{Schedulerlet, StageCtx};
use crate::time::{Duration, Instant};

/// Default chunks per ratio round (the kernel module's 100 segments).
pub const DEFAULT_ROUND: u32 = 100;
/// Default measurement interval outside a search, ms.
pub const DEFAULT_INTERVAL_MS: u64 = 100;
/// Default search step, percent of the total.
pub const DEFAULT_STEP_PCT: u32 = 5;
/// Default collapse threshold, percent of the path's recent highest rate.
pub const DEFAULT_COLLAPSE_PCT: u32 = 10;
/// Default time before a collapsed path is tried again, ms.
pub const DEFAULT_REPROBE_MS: u64 = 1000;

/// Measurements averaged into a reference, and deviating ones in a row that start a search.
const SETTLE: u32 = 5;
/// Relative change of the aggregate rate that counts as a deviation (a fifth).
const TRIGGER_FRACTION: f64 = 0.2;
/// Least time between two searches.
const SEARCH_HOLDOFF: Duration = Duration::from_secs(3);
/// Share bounds, per mille (5 % and 95 %).
const SHARE_MIN: u32 = 50;
const SHARE_MAX: u32 = 950;

/// Where a search is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Search {
    /// Not searching; measurements build or check the reference.
    Idle,
    /// One step up from `base` is set; the next measurement judges it against `base_rate`.
    Up { base: u32, base_rate: f64 },
    /// One step down from `base` is set; judged against `base_rate`.
    Down { base: u32, base_rate: f64 },
    /// Stepping in `dir` (±1) while the aggregate keeps rising above `prev`.
    Climb { dir: i32, prev: f64 },
}

/// Throughput-ratio soft selector.
#[derive(Debug, Clone)]
pub struct Musher {
    /// Chunks per ratio round.
    pub round: u32,
    /// Measurement interval outside a search (twice this during one).
    pub interval: Duration,
    /// Search step, percent of the total.
    pub step_pct: u32,
    /// A path delivering less than this percent of its recent highest rate collapsed.
    pub collapse_pct: u32,
    /// How long a collapsed path stays out of the ratio.
    pub reprobe: Duration,
    share: [u32; MAX_PATHS],
    quota: [u32; MAX_PATHS],
    /// Paths the shares were computed for (collapsed ones excluded).
    in_ratio: PathSet,
    collapsed_at: [Option<Instant>; MAX_PATHS],
    /// Latest measurement: when, and each path's acknowledged total then.
    mark: Option<(Instant, [u64; MAX_PATHS])>,
    /// Each path's delivered rate over the latest interval, bytes/s.
    rate: [f64; MAX_PATHS],
    reference: Option<f64>,
    ref_sum: f64,
    ref_count: u32,
    deviations: u32,
    last_search: Option<Instant>,
    search: Search,
    /// Path whose share a search moves.
    primary: Option<PathId>,
}

impl Default for Musher {
    fn default() -> Self {
        Musher {
            round: DEFAULT_ROUND,
            interval: Duration::from_millis(DEFAULT_INTERVAL_MS),
            step_pct: DEFAULT_STEP_PCT,
            collapse_pct: DEFAULT_COLLAPSE_PCT,
            reprobe: Duration::from_millis(DEFAULT_REPROBE_MS),
            share: [0; MAX_PATHS],
            quota: [0; MAX_PATHS],
            in_ratio: PathSet::EMPTY,
            collapsed_at: [None; MAX_PATHS],
            mark: None,
            rate: [0.0; MAX_PATHS],
            reference: None,
            ref_sum: 0.0,
            ref_count: 0,
            deviations: 0,
            last_search: None,
            search: Search::Idle,
            primary: None,
        }
    }
}

impl Musher {
    /// The share of `path`, per mille (0 when it is not in the ratio).
    pub fn share_permille(&self, path: PathId) -> u32 {
        self.share[path.index()]
    }

    /// Whether `path` is out of the ratio because its throughput collapsed.
    pub fn is_collapsed(&self, path: PathId) -> bool {
        self.collapsed_at[path.index()].is_some()
    }

    fn estimate(p: &PathState) -> f64 {
        (p.effective_bandwidth().as_bytes_per_sec() as f64).max(1.0)
    }

    /// Shares of `paths` in proportion to their throughput estimates; a new round.
    fn reset_shares(&mut self, ctx: &StageCtx<'_>, paths: PathSet) {
        self.share = [0; MAX_PATHS];
        self.quota = [0; MAX_PATHS];
        self.in_ratio = paths;
        let total: f64 = paths.iter().map(|p| Self::estimate(ctx.paths.get(p))).sum();
        let mut given = 0u32;
        let mut last = None;
        for p in paths.iter() {
            let s = (1000.0 * Self::estimate(ctx.paths.get(p)) / total) as u32;
            self.share[p.index()] = s;
            given += s;
            last = Some(p);
        }
        if let Some(p) = last {
            self.share[p.index()] += 1000u32.saturating_sub(given);
        }
        self.primary = paths
            .iter()
            .max_by_key(|p| (self.share[p.index()], PathId::index(*p)));
        // A new ratio is judged afresh.
        self.search = Search::Idle;
        self.reference = None;
        self.ref_sum = 0.0;
        self.ref_count = 0;
        self.deviations = 0;
    }

    /// Set the primary path's share to `target` (clamped), the others scaled to the rest.
    fn set_primary_share(&mut self, target: u32) -> u32 {
        let Some(pr) = self.primary else { return 0 };
        let others: PathSet = self.in_ratio.iter().filter(|p| *p != pr).collect();
        if others.is_empty() {
            return self.share[pr.index()];
        }
        let target = target.clamp(SHARE_MIN, SHARE_MAX);
        let old_rest: u32 = others.iter().map(|p| self.share[p.index()]).sum();
        let rest = 1000 - target;
        let mut given = 0u32;
        let n = others.len() as u32;
        for (k, p) in others.iter().enumerate() {
            let s = if k as u32 + 1 == n {
                rest - given
            } else if old_rest == 0 {
                rest / n
            } else {
                (u64::from(self.share[p.index()]) * u64::from(rest) / u64::from(old_rest)) as u32
            };
            self.share[p.index()] = s;
            given += s;
        }
        self.share[pr.index()] = target;
        self.quota = [0; MAX_PATHS];
        target
    }

    fn step(&self) -> u32 {
        self.step_pct.saturating_mul(10)
    }

    /// Measure rates when an interval has passed; collapse, re-probe, and search.
    fn measure(&mut self, ctx: &StageCtx<'_>) {
        let now = ctx.now;
        let mut acked = [0u64; MAX_PATHS];
        for p in ctx.live.iter() {
            acked[p.index()] = ctx.paths.get(p).bytes_acked;
        }
        let Some((at, before)) = self.mark else {
            self.mark = Some((now, acked));
            return;
        };
        let interval = match self.search {
            Search::Idle => self.interval,
            _ => self.interval + self.interval,
        };
        if now < at + interval || now <= at {
            return;
        }
        let secs = (now - at).as_secs_f64();
        let mut total = 0.0;
        for p in ctx.live.iter() {
            let i = p.index();
            // A total below the last one is a new subflow counting from zero.
            let delta = acked[i].saturating_sub(before[i]);
            self.rate[i] = delta as f64 / secs;
            total += self.rate[i];
        }
        self.mark = Some((now, acked));
        // Collapse: an RTO, or bytes in flight and almost nothing delivered.
        for p in self.in_ratio.iter() {
            let Some(s) = ctx.paths.try_get(p) else {
                continue;
            };
            let peak = s.recent_rate.max(now).as_bytes_per_sec() as f64;
            let stalled_for = self.interval.max(s.min_rtt + s.min_rtt);
            let starved = s.unacked_bytes > 0
                && s.unacked_age >= stalled_for
                && self.rate[p.index()] * 100.0 <= peak * f64::from(self.collapse_pct);
            if s.consecutive_rtos > 0 || starved {
                self.collapsed_at[p.index()] = Some(now);
            }
        }
        // Re-probe: a collapsed path out of back-off rejoins after `reprobe`.
        for p in ctx.live.iter() {
            let i = p.index();
            if let Some(t) = self.collapsed_at[i] {
                if now >= t + self.reprobe && ctx.paths.get(p).consecutive_rtos == 0 {
                    self.collapsed_at[i] = None;
                }
            }
        }
        let usable = self.usable(ctx);
        if usable != self.in_ratio {
            self.reset_shares(ctx, usable);
            return;
        }
        self.search_step(now, total);
    }

    /// Live paths not collapsed.
    fn usable(&self, ctx: &StageCtx<'_>) -> PathSet {
        ctx.live
            .iter()
            .filter(|p| self.collapsed_at[p.index()].is_none())
            .collect()
    }

    fn search_step(&mut self, now: Instant, rate: f64) {
        let Some(pr) = self.primary else { return };
        let cur = self.share[pr.index()];
        let step = self.step();
        match self.search {
            Search::Idle => {
                let Some(reference) = self.reference else {
                    self.ref_sum += rate;
                    self.ref_count += 1;
                    if self.ref_count >= SETTLE {
                        self.reference = Some(self.ref_sum / f64::from(self.ref_count));
                    }
                    return;
                };
                if (rate - reference).abs() > TRIGGER_FRACTION * reference {
                    self.deviations += 1;
                } else {
                    self.deviations = 0;
                }
                let held_off = self.last_search.is_some_and(|t| now < t + SEARCH_HOLDOFF);
                if self.deviations >= SETTLE && !held_off && self.in_ratio.len() > 1 {
                    self.last_search = Some(now);
                    self.deviations = 0;
                    if cur + step <= SHARE_MAX {
                        self.set_primary_share(cur + step);
                        self.search = Search::Up {
                            base: cur,
                            base_rate: rate,
                        };
                    } else {
                        self.set_primary_share(cur - step);
                        self.search = Search::Down {
                            base: cur,
                            base_rate: rate,
                        };
                    }
                }
            }
            Search::Up { base, base_rate } => {
                if rate > base_rate {
                    self.climb(cur, 1, rate);
                } else if base >= SHARE_MIN + step {
                    self.set_primary_share(base - step);
                    self.search = Search::Down { base, base_rate };
                } else {
                    self.set_primary_share(base);
                    self.end_search();
                }
            }
            Search::Down { base, base_rate } => {
                if rate > base_rate {
                    self.climb(cur, -1, rate);
                } else {
                    self.set_primary_share(base);
                    self.end_search();
                }
            }
            Search::Climb { dir, prev } => {
                if rate < prev {
                    let back = if dir > 0 { cur - step } else { cur + step };
                    self.set_primary_share(back);
                    self.end_search();
                } else {
                    self.climb(cur, dir, rate);
                }
            }
        }
    }

    /// One more step in `dir` from `cur`, or the end of the search at a bound.
    fn climb(&mut self, cur: u32, dir: i32, rate: f64) {
        let step = self.step();
        let next = if dir > 0 {
            cur.checked_add(step).filter(|n| *n <= SHARE_MAX)
        } else {
            cur.checked_sub(step).filter(|n| *n >= SHARE_MIN)
        };
        match next {
            Some(n) => {
                self.set_primary_share(n);
                self.search = Search::Climb { dir, prev: rate };
            }
            None => self.end_search(),
        }
    }

    fn end_search(&mut self) {
        self.search = Search::Idle;
        self.reference = None;
        self.ref_sum = 0.0;
        self.ref_count = 0;
    }

    /// Chunks `path` may take in a round.
    fn target(&self, path: PathId) -> u32 {
        let s = self.share[path.index()];
        if s == 0 {
            0
        } else {
            (u64::from(s) * u64::from(self.round.max(1)) / 1000).max(1) as u32
        }
    }

    /// The path whose turn it is among `paths`: one in use with quota left, else the first
    /// unused one; every quota used starts a new round.
    fn turn(&mut self, paths: PathSet) -> Option<PathId> {
        for _ in 0..2 {
            let mut unused = None;
            for p in paths.iter() {
                let (q, t) = (self.quota[p.index()], self.target(p));
                if t == 0 {
                    continue;
                }
                if q > 0 && q < t {
                    return Some(p);
                }
                if q == 0 && unused.is_none() {
                    unused = Some(p);
                }
            }
            if unused.is_some() {
                return unused;
            }
            for p in paths.iter() {
                self.quota[p.index()] = 0;
            }
        }
        None
    }
}

impl Schedulerlet for Musher {
    fn name(&self) -> &'static str {
        "musher"
    }
    fn params(&self) -> alloc::string::String {
        let d = Musher::default();
        let mut p = alloc::vec::Vec::new();
        if self.round != d.round {
            p.push(alloc::format!("round={}", self.round));
        }
        if self.interval != d.interval {
            p.push(alloc::format!("interval_ms={}", self.interval.as_millis()));
        }
        if self.step_pct != d.step_pct {
            p.push(alloc::format!("step_pct={}", self.step_pct));
        }
        if self.collapse_pct != d.collapse_pct {
            p.push(alloc::format!("collapse_pct={}", self.collapse_pct));
        }
        if self.reprobe != d.reprobe {
            p.push(alloc::format!("reprobe_ms={}", self.reprobe.as_millis()));
        }
        p.join(",")
    }
    fn kind(&self) -> StageKind {
        StageKind::SoftSelector
    }
    fn apply(&mut self, ctx: &StageCtx<'_>, moves: &mut Moves<'_>) {
        self.measure(ctx);
        let usable = self.usable(ctx);
        if usable != self.in_ratio {
            self.reset_shares(ctx, usable);
        }
        let candidates = moves.candidates();
        let in_turn: PathSet = candidates
            .intersection(self.in_ratio)
            .iter()
            .filter(|p| self.target(*p) > 0)
            .collect();
        if !ctx.chunk.reinjection && !in_turn.is_empty() {
            if let Some(p) = self.turn(in_turn) {
                if ctx.paths.get(p).has_room() {
                    moves.select(
                        p,
                        Reason::RatioTurn {
                            share_permille: self.share[p.index()],
                        },
                    );
                }
            }
            return;
        }
        let best = candidates
            .iter()
            .map(|p| ctx.paths.get(p))
            .filter(|s| s.has_room())
            .min_by_key(|s| (s.srtt, s.id));
        if let Some(s) = best {
            moves.select(s.id, Reason::LowestRtt { srtt: s.srtt });
        }
    }
    fn on_sent(&mut self, ctx: &StageCtx<'_>, sent_on: PathSet) {
        if ctx.chunk.reinjection {
            return;
        }
        for p in sent_on.iter() {
            self.quota[p.index()] = self.quota[p.index()].saturating_add(1);
        }
    }
}
