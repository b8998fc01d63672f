//! One direction of one emulated path: a droptail queue drained by a mahimahi delivery trace,
//! followed by a one-way delay line, with seeded loss and outages.
//!
//! ## Contract
//! Pure and clock-free, in the style of quinn-proto: the caller (a TUN forwarder, a
//! simulator, a test) owns time. Every call takes `now_us`, the caller's clock in integer
//! microseconds since the link started (trace time 0); time never goes back — an earlier
//! `now_us` is treated as the latest time already seen. The caller:
//! 1. hands packets in with [`Link::enqueue`];
//! 2. takes packets out with [`Link::poll_delivered`] until it returns `None`;
//! 3. sleeps until [`Link::next_event_us`] (or the next packet) and goes back to 2.
//!
//! Packets are opaque to the model: the caller passes an id and a length and keeps the bytes.
//! The same config, seed and calls give the same outputs and the same log.
//!
//! ## Semantics (mahimahi's `LinkQueue` followed by a `DelayQueue`)
//! * **Opportunities.** The capacity trace lists delivery opportunities; one at trace
//!   millisecond `m` happens at `m * 1000` µs (plus `k * period` in the `k`-th loop when
//!   looping; played once otherwise, after which nothing is ever served again). Unlike
//!   mahimahi, several opportunities with the same stamp are spread evenly over that
//!   millisecond ([`DeliveryTrace::opportunity_us`]): at high rates packets leave smoothly
//!   instead of in a burst at each millisecond boundary. Each can carry
//!   [`OPPORTUNITY_BYTES`] from the head of the queue. An opportunity finding the queue empty
//!   (or left partly unused) is wasted, never banked — as in mahimahi.
//! * **Byte-accurate service.** A packet is served by as many opportunities as its bytes need,
//!   and one opportunity can finish several small packets: the head packet keeps its remaining
//!   byte count between opportunities. A packet is *served* (departs the bottleneck) at the
//!   opportunity that carries its last byte.
//! * **Arrival vs opportunity at the same instant.** Like mahimahi's `rationalize(now)` before
//!   `read_packet`, `enqueue(now)` first runs every opportunity at or before `now`, so a
//!   packet can only use opportunities strictly after its arrival.
//! * **Delay.** A packet served at `t` is delivered at `t + delay.delay_at_us(t)`, but never
//!   before the previously served packet: the path does not reorder (a drop in the delay
//!   series makes later packets wait for earlier ones, as on a real in-order bearer).
//! * **Droptail.** An arriving packet is dropped if accepting it would exceed the queue limit
//!   ([`QueueLimit`]). The queue counts every packet not yet fully served, including a
//!   partly-served head (mahimahi excludes the packet in transit; counting it keeps the limit
//!   a hard bound on memory and differs by at most one packet). Independently of the limit,
//!   at most [`MAX_QUEUE_PACKETS`] packets are ever queued.
//! * **Loss** is decided **at enqueue**: the loss process advances exactly once per offered
//!   packet of valid length, whatever else happens to it, so the loss pattern depends only on
//!   the seed and the packet's index — changing the queue or the outages does not shift it —
//!   and a lost packet never occupies the queue or capacity (like mahimahi's `mm-loss` shell
//!   placed in front of `mm-link`).
//! * **Outages** stop the bottleneck: opportunities inside an outage serve nothing (and are
//!   not logged as capacity). Arrivals during an outage are dropped in
//!   [`OutageMode::Drop`], or queued (subject to droptail) in [`OutageMode::Hold`] and served
//!   once the outage ends. [`LinkConfig::hold_in`] marks spans whose arrivals are held whatever
//!   the mode (a successful handover's interruption, during which the network forwards the
//!   bearer's packets to the new cell instead of losing them). Packets already queued when an outage starts stay queued in both
//!   modes; packets already served keep travelling and are delivered on time (they are past
//!   the radio). Outages and the delay series are absolute times: they do not loop with the
//!   capacity trace.
//!
//! ## Memory
//! The queue is bounded by its limit (and [`MAX_QUEUE_PACKETS`]); the log by its `max_lines`.
//! The delay line holds packets served but not yet polled — about `capacity × delay` packets
//! for a caller that polls at [`Link::next_event_us`] (a few thousand on a 100 Mbit/s, 500 ms
//! path, 16 bytes each); a caller that never polls lets it grow with what it sent.
//!
//! ## Precedence of drop reasons at enqueue
//! [`DropReason::InvalidLength`] (0 or > [`MAX_PACKET_BYTES`]; the loss process does not
//! advance) → [`DropReason::Outage`] (Drop mode) → [`DropReason::Loss`] →
//! [`DropReason::QueueFull`].
//!
//! ## Event log (off by default)
//! [`Link::enable_log`] turns on a mahimahi-format log (`mm-link --uplink-log`), readable by
//! mahimahi's `mm-throughput-graph`/`mm-delay-graph` and our tools. Times are milliseconds
//! since the link started (rounded down); the header sets `# base timestamp: 0`.
//! * `<ms> + <bytes>` — a packet offered to the link (logged even if then dropped).
//! * `<ms> d 1 <bytes>` — that packet dropped (mahimahi's `d <packets> <bytes>` form).
//! * `<ms> # 1500` — a delivery opportunity (not logged inside an outage).
//! * `<ms> - <bytes> <delay_ms>` — a packet served by the bottleneck; `delay_ms` is its
//!   queueing + serialization delay (`served_ms − arrival_ms`), as in mahimahi's link log;
//!   the one-way delay added afterwards is not part of it.
//!
//! The log buffer is bounded ([`Link::enable_log`]'s `max_lines`; lines beyond it are counted
//! in [`Link::log_lines_lost`] and discarded); drain it with [`Link::take_log`]. With the log
//! off, an idle link skips its wasted opportunities in O(log n); with it on, every opportunity
//! is visited to be logged.

use std::collections::VecDeque;
use std::fmt::Write as _;

use crate::loss::{LossError, LossModel, LossProcess};
use crate::trace::{DelaySeries, DeliveryTrace, Outages, OPPORTUNITY_BYTES};

/// Largest packet accepted by [`Link::enqueue`] (the largest IPv4 packet). Larger ones and empty
/// ones are dropped with [`DropReason::InvalidLength`].
pub const MAX_PACKET_BYTES: u32 = 65_535;

/// Hard cap on queued packets, whatever the [`QueueLimit`] (2^20). Bounds the queue's memory
/// at about 32 MiB even for a byte limit filled with tiny packets.
pub const MAX_QUEUE_PACKETS: u64 = 1 << 20;

/// Largest byte limit accepted in [`QueueLimit::Bytes`] (1 GiB).
pub const MAX_QUEUE_BYTES: u64 = 1 << 30;

/// What happens to packets arriving during an outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutageMode {
    /// Arriving packets are dropped ([`DropReason::Outage`]).
    #[default]
    Drop,
    /// Arriving packets queue (subject to the limit) and wait for the outage to end.
    Hold,
}

/// The droptail limit on the queue in front of the bottleneck.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueLimit {
    /// At most this many bytes queued (1 ..= [`MAX_QUEUE_BYTES`]).
    Bytes(u64),
    /// At most this many packets queued (1 ..= [`MAX_QUEUE_PACKETS`]).
    Packets(u64),
}

/// Everything that defines a link. Build with a struct literal or [`LinkConfig::new`].
#[derive(Debug, Clone)]
pub struct LinkConfig {
    /// Delivery opportunities.
    pub capacity: DeliveryTrace,
    /// `true`: the trace loops forever with period [`DeliveryTrace::period_ms`] (which must
    /// then be > 0); `false`: it is played once, after which nothing is served.
    pub looping: bool,
    /// One-way delay added after the bottleneck.
    pub delay: DelaySeries,
    /// Random loss, decided per packet at enqueue.
    pub loss: LossModel,
    /// When the link is down.
    pub outages: Outages,
    /// What happens to arrivals during an outage.
    pub outage_mode: OutageMode,
    /// Spans in which arrivals are held as in [`OutageMode::Hold`] whatever `outage_mode`
    /// says. Only meaningful inside `outages` (outside them the link serves anyway).
    pub hold_in: Outages,
    /// Droptail limit.
    pub queue: QueueLimit,
    /// Seed of the loss process.
    pub seed: u64,
}

impl LinkConfig {
    /// A config with the given capacity and defaults for the rest: looping, zero delay, no
    /// loss, no outages, [`OutageMode::Drop`], a queue of 1000 packets (mahimahi's usual
    /// droptail size is in this range), seed 0.
    pub fn new(capacity: DeliveryTrace) -> Self {
        Self {
            capacity,
            looping: true,
            delay: DelaySeries::default(),
            loss: LossModel::None,
            outages: Outages::none(),
            outage_mode: OutageMode::Drop,
            hold_in: Outages::none(),
            queue: QueueLimit::Packets(1000),
            seed: 0,
        }
    }
}

/// Why a [`LinkConfig`] was rejected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LinkError {
    /// A looping trace whose last timestamp is 0 (its period would be zero).
    #[error("capacity trace ends at 0 ms, so it cannot loop (its period would be zero)")]
    ZeroPeriod,
    /// An invalid loss model.
    #[error(transparent)]
    Loss(#[from] LossError),
    /// A queue limit of zero or above the documented maximum.
    #[error("queue limit {0:?} out of range (1..={MAX_QUEUE_PACKETS} packets or 1..={MAX_QUEUE_BYTES} bytes)")]
    QueueLimit(QueueLimit),
}

/// Why [`Link::enqueue`] dropped a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Length 0 or above [`MAX_PACKET_BYTES`].
    InvalidLength,
    /// Arrived during an outage in [`OutageMode::Drop`].
    Outage,
    /// Chosen by the loss model.
    Loss,
    /// The queue limit would have been exceeded (droptail).
    QueueFull,
}

/// The fate of a packet handed to [`Link::enqueue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use]
pub enum EnqueueOutcome {
    /// Queued; it will come out of [`Link::poll_delivered`] (unless the trace ends first).
    Enqueued,
    /// Dropped, never to be delivered.
    Dropped(DropReason),
}

/// Counters since the link was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkStats {
    /// Packets handed to [`Link::enqueue`].
    pub offered_packets: u64,
    /// Packets accepted into the queue.
    pub enqueued_packets: u64,
    /// Drops for [`DropReason::InvalidLength`].
    pub dropped_invalid: u64,
    /// Drops for [`DropReason::Outage`].
    pub dropped_outage: u64,
    /// Drops for [`DropReason::Loss`].
    pub dropped_loss: u64,
    /// Drops for [`DropReason::QueueFull`].
    pub dropped_queue_full: u64,
    /// Packets fully served by the bottleneck.
    pub served_packets: u64,
    /// Bytes of the packets fully served.
    pub served_bytes: u64,
    /// Packets returned by [`Link::poll_delivered`].
    pub delivered_packets: u64,
}

/// A packet waiting in (or at the head of) the queue.
#[derive(Debug, Clone, Copy)]
struct Queued {
    id: u64,
    len_bytes: u32,
    remaining_bytes: u32,
    arrived_us: u64,
}

/// Position in the (possibly looping) opportunity schedule: the next opportunity is
/// `base_ms + trace[idx]` unless `finished`.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    idx: usize,
    base_ms: u64,
    finished: bool,
}

impl Cursor {
    fn peek_ms(&self, trace: &[u64]) -> Option<u64> {
        if self.finished {
            return None;
        }
        trace.get(self.idx).map(|&m| self.base_ms.saturating_add(m))
    }

    /// The time of the next opportunity, µs, with same-millisecond opportunities spread.
    fn peek_us(&self, trace: &DeliveryTrace, looping: bool) -> Option<u64> {
        if self.finished {
            return None;
        }
        trace.opportunity_us(self.idx, self.base_ms, looping)
    }

    /// Moves past the current opportunity (mahimahi's `use_a_delivery_opportunity`).
    fn step(&mut self, trace: &[u64], looping: bool) {
        self.idx += 1;
        if self.idx >= trace.len() {
            self.idx = 0;
            if looping {
                self.base_ms = self.base_ms.saturating_add(period(trace));
            } else {
                self.finished = true;
            }
        }
    }

    /// Moves to the first opportunity at or after `target_ms` without serving anything.
    fn seek_ms(&mut self, trace: &[u64], looping: bool, target_ms: u64) {
        if self.finished {
            return;
        }
        let period = period(trace);
        // The last opportunity of a pass is at `base + period`; if even that is too early, the
        // rest of this pass is skipped, and whole passes with it.
        if self.base_ms.saturating_add(period) < target_ms {
            if !looping || period == 0 {
                self.finished = true;
                return;
            }
            let behind = target_ms - self.base_ms - period;
            let passes = behind.div_ceil(period);
            self.base_ms = self.base_ms.saturating_add(passes.saturating_mul(period));
            self.idx = 0;
        }
        let base = self.base_ms;
        let rest = trace.get(self.idx..).unwrap_or_default();
        self.idx += rest.partition_point(|&m| base.saturating_add(m) < target_ms);
        if self.idx >= trace.len() {
            // Only reachable through saturation at the end of time.
            self.finished = true;
        }
    }
}

fn period(trace: &[u64]) -> u64 {
    trace.last().copied().unwrap_or(0)
}

/// A bounded buffer of mahimahi-format log lines.
#[derive(Debug)]
struct Log {
    lines: Vec<String>,
    max_lines: usize,
    lost: u64,
}

impl Log {
    fn push(&mut self, line: String) {
        if self.lines.len() < self.max_lines {
            self.lines.push(line);
        } else {
            self.lost += 1;
        }
    }
}

/// One emulated link direction. See the module docs for the semantics.
#[derive(Debug)]
pub struct Link {
    config: LinkConfig,
    loss: LossProcess,
    cursor: Cursor,
    /// Latest time seen.
    now_us: u64,
    queue: VecDeque<Queued>,
    queue_bytes: u64,
    /// Served packets not yet polled: `(id, deliver_at_us)`, non-decreasing in time.
    in_flight: VecDeque<(u64, u64)>,
    last_deliver_us: u64,
    stats: LinkStats,
    log: Option<Log>,
}

/// A packet's way over one link: when it was offered and delivered, the one-way delay it met,
/// and how long it was held in outages — the rest of its way was time in the link's buffer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Transit {
    /// Offered to the link, µs.
    pub sent_us: u64,
    /// Delivered at the far end, µs.
    pub at_us: u64,
    /// The link's one-way delay when the packet left the bottleneck, µs.
    pub propagation_us: u64,
    /// Time it was held while the link was in an outage, µs.
    pub dark_us: u64,
}

impl Transit {
    /// Time in the link's buffer: its way less the propagation delay and the outages.
    pub fn queueing_us(&self) -> u64 {
        (self.at_us - self.sent_us).saturating_sub(self.propagation_us + self.dark_us)
    }
}

impl Link {
    /// Validates `config` and creates an idle link at time 0.
    pub fn new(config: LinkConfig) -> Result<Self, LinkError> {
        if config.looping && config.capacity.period_ms() == 0 {
            return Err(LinkError::ZeroPeriod);
        }
        let limit_ok = match config.queue {
            QueueLimit::Bytes(b) => (1..=MAX_QUEUE_BYTES).contains(&b),
            QueueLimit::Packets(p) => (1..=MAX_QUEUE_PACKETS).contains(&p),
        };
        if !limit_ok {
            return Err(LinkError::QueueLimit(config.queue));
        }
        let loss = LossProcess::new(config.loss, config.seed)?;
        Ok(Self {
            config,
            loss,
            cursor: Cursor {
                idx: 0,
                base_ms: 0,
                finished: false,
            },
            now_us: 0,
            queue: VecDeque::new(),
            queue_bytes: 0,
            in_flight: VecDeque::new(),
            last_deliver_us: 0,
            stats: LinkStats::default(),
            log: None,
        })
    }

    /// Turns on the mahimahi-format event log, buffering at most `max_lines` lines (including
    /// the two header lines) between calls to [`Self::take_log`]. Calling it again keeps the
    /// buffered lines and changes the bound.
    pub fn enable_log(&mut self, max_lines: usize) {
        match &mut self.log {
            Some(log) => log.max_lines = max_lines,
            None => {
                let mut log = Log {
                    lines: Vec::new(),
                    max_lines,
                    lost: 0,
                };
                log.push("# polycorn-link (mahimahi link log format)".to_owned());
                log.push("# base timestamp: 0".to_owned());
                self.log = Some(log);
            }
        }
    }

    /// Drains the buffered log lines (empty if the log is off).
    pub fn take_log(&mut self) -> Vec<String> {
        self.log
            .as_mut()
            .map(|l| std::mem::take(&mut l.lines))
            .unwrap_or_default()
    }

    /// Log lines discarded because the buffer was full.
    pub fn log_lines_lost(&self) -> u64 {
        self.log.as_ref().map_or(0, |l| l.lost)
    }

    fn log_line(&mut self, f: impl FnOnce(&mut String)) {
        if let Some(log) = &mut self.log {
            let mut s = String::new();
            f(&mut s);
            log.push(s);
        }
    }

    /// The configuration the link runs.
    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// The [`Transit`] of a packet offered at `sent_us` and delivered at `at_us`: the one-way
    /// delay in force when it left the bottleneck, and how much of its time before that fell
    /// in the link's outages (held, not served).
    pub fn transit(&self, sent_us: u64, at_us: u64) -> Transit {
        let cfg = &self.config;
        let guess = at_us.saturating_sub(cfg.delay.delay_at_us(at_us));
        let propagation_us = cfg
            .delay
            .delay_at_us(guess)
            .min(at_us.saturating_sub(sent_us));
        let served_us = at_us - propagation_us;
        let spans = cfg.outages.spans_ms();
        let first = spans.partition_point(|&(_, b)| b * 1000 <= sent_us);
        let dark_us = spans[first..]
            .iter()
            .take_while(|&&(a, _)| a * 1000 < served_us)
            .map(|&(a, b)| {
                let (a, b) = (a * 1000, b * 1000);
                served_us.min(b).saturating_sub(sent_us.max(a))
            })
            .sum();
        Transit {
            sent_us,
            at_us,
            propagation_us,
            dark_us,
        }
    }

    /// The latest time seen by the link.
    pub fn now_us(&self) -> u64 {
        self.now_us
    }

    /// Bytes queued (not yet fully served, partly-served head counted in full).
    pub fn queue_bytes(&self) -> u64 {
        self.queue_bytes
    }

    /// Packets queued (not yet fully served).
    pub fn queue_packets(&self) -> u64 {
        self.queue.len() as u64
    }

    /// Packets served but not yet returned by [`Self::poll_delivered`].
    pub fn in_flight_packets(&self) -> u64 {
        self.in_flight.len() as u64
    }

    /// Counters since creation.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// Whether a played-once trace has used its last opportunity (never true when looping).
    pub fn trace_finished(&self) -> bool {
        self.cursor.finished
    }

    /// Offers a packet at `now_us` (after running the link up to `now_us`). See the module docs
    /// for the order in which drop reasons apply.
    pub fn enqueue(&mut self, now_us: u64, packet_id: u64, len_bytes: u32) -> EnqueueOutcome {
        self.advance(now_us);
        let now_us = self.now_us;
        self.stats.offered_packets += 1;
        let now_ms = now_us / 1000;
        self.log_line(|s| {
            let _ = write!(s, "{now_ms} + {len_bytes}");
        });
        let reason = self.admit(now_us, len_bytes);
        match reason {
            None => {
                self.queue.push_back(Queued {
                    id: packet_id,
                    len_bytes,
                    remaining_bytes: len_bytes,
                    arrived_us: now_us,
                });
                self.queue_bytes += u64::from(len_bytes);
                self.stats.enqueued_packets += 1;
                EnqueueOutcome::Enqueued
            }
            Some(reason) => {
                let counter = match reason {
                    DropReason::InvalidLength => &mut self.stats.dropped_invalid,
                    DropReason::Outage => &mut self.stats.dropped_outage,
                    DropReason::Loss => &mut self.stats.dropped_loss,
                    DropReason::QueueFull => &mut self.stats.dropped_queue_full,
                };
                *counter += 1;
                self.log_line(|s| {
                    let _ = write!(s, "{now_ms} d 1 {len_bytes}");
                });
                EnqueueOutcome::Dropped(reason)
            }
        }
    }

    /// Decides whether a packet arriving now is accepted (`None`) or why it is dropped.
    fn admit(&mut self, now_us: u64, len_bytes: u32) -> Option<DropReason> {
        if len_bytes == 0 || len_bytes > MAX_PACKET_BYTES {
            return Some(DropReason::InvalidLength);
        }
        // Drawn for every valid packet so the loss pattern depends on the packet index only.
        let lost = self.loss.lose();
        if self.config.outage_mode == OutageMode::Drop
            && self.config.outages.is_out(now_us)
            && !self.config.hold_in.is_out(now_us)
        {
            return Some(DropReason::Outage);
        }
        if lost {
            return Some(DropReason::Loss);
        }
        let packets = self.queue.len() as u64;
        let fits = packets < MAX_QUEUE_PACKETS
            && match self.config.queue {
                QueueLimit::Bytes(max) => self.queue_bytes + u64::from(len_bytes) <= max,
                QueueLimit::Packets(max) => packets < max,
            };
        if fits {
            None
        } else {
            Some(DropReason::QueueFull)
        }
    }

    /// Runs every delivery opportunity at or before `now_us` (mahimahi's `rationalize`).
    /// Called by [`Self::enqueue`] and [`Self::poll_delivered`]; calling it directly is only
    /// needed to see up-to-date [`Self::queue_bytes`] or log lines.
    pub fn advance(&mut self, now_us: u64) {
        let now_us = now_us.max(self.now_us);
        self.now_us = now_us;
        // First millisecond whose opportunities are all strictly after `now_us`.
        let after_now_ms = now_us / 1000 + 1;
        loop {
            let trace = self.config.capacity.opportunities_ms();
            let (Some(t_ms), Some(t_us)) = (
                self.cursor.peek_ms(trace),
                self.cursor
                    .peek_us(&self.config.capacity, self.config.looping),
            ) else {
                break;
            };
            if t_us > now_us {
                break;
            }
            let out = self.config.outages.is_out(t_us);
            if self.log.is_none() {
                // Nothing to log: wasted opportunities can be skipped in bulk.
                if self.queue.is_empty() {
                    self.cursor
                        .seek_ms(trace, self.config.looping, after_now_ms);
                    // Opportunities of that millisecond spread before `now` are past too.
                    while self
                        .cursor
                        .peek_us(&self.config.capacity, self.config.looping)
                        .is_some_and(|t| t <= now_us)
                    {
                        let trace = self.config.capacity.opportunities_ms();
                        self.cursor.step(trace, self.config.looping);
                    }
                    break;
                }
                if out {
                    let end_us = self
                        .config
                        .outages
                        .next_change_after(t_us)
                        .unwrap_or(u64::MAX);
                    self.cursor.seek_ms(
                        trace,
                        self.config.looping,
                        (end_us / 1000).min(after_now_ms),
                    );
                    // Spread opportunities of the outage's last millisecond lie before its end:
                    // step past them too, so every pass of this loop makes progress.
                    while let Some(t) = self
                        .cursor
                        .peek_us(&self.config.capacity, self.config.looping)
                    {
                        if t >= end_us || t > now_us {
                            break;
                        }
                        let trace = self.config.capacity.opportunities_ms();
                        self.cursor.step(trace, self.config.looping);
                    }
                    continue;
                }
            }
            self.cursor.step(trace, self.config.looping);
            if out {
                continue;
            }
            self.log_line(|s| {
                let _ = write!(s, "{t_ms} # {OPPORTUNITY_BYTES}");
            });
            self.serve(t_us);
        }
    }

    /// Uses one opportunity at `t_us` on the head of the queue.
    fn serve(&mut self, t_us: u64) {
        let mut budget = OPPORTUNITY_BYTES;
        while budget > 0 {
            let Some(head) = self.queue.front_mut() else {
                break;
            };
            let take = budget.min(head.remaining_bytes);
            head.remaining_bytes -= take;
            budget -= take;
            if head.remaining_bytes > 0 {
                break;
            }
            let p = *head;
            self.queue.pop_front();
            self.queue_bytes -= u64::from(p.len_bytes);
            self.stats.served_packets += 1;
            self.stats.served_bytes += u64::from(p.len_bytes);
            let delay_us = self.config.delay.delay_at_us(t_us);
            let deliver_us = t_us.saturating_add(delay_us).max(self.last_deliver_us);
            self.last_deliver_us = deliver_us;
            self.in_flight.push_back((p.id, deliver_us));
            // A spread opportunity in (T-1, T] ms logs under its trace stamp T.
            let (t_ms, arrived_ms) = (t_us.div_ceil(1000), p.arrived_us / 1000);
            self.log_line(|s| {
                let _ = write!(
                    s,
                    "{t_ms} - {} {}",
                    p.len_bytes,
                    t_ms.saturating_sub(arrived_ms)
                );
            });
        }
    }

    /// Runs the link up to `now_us` and returns the next packet whose delivery time has come,
    /// as `(packet_id, deliver_at_us)` with `deliver_at_us <= now_us`, in FIFO order; `None`
    /// when there is none yet. Call until `None`.
    pub fn poll_delivered(&mut self, now_us: u64) -> Option<(u64, u64)> {
        self.advance(now_us);
        let &(id, at_us) = self.in_flight.front()?;
        if at_us > self.now_us {
            return None;
        }
        self.in_flight.pop_front();
        self.stats.delivered_packets += 1;
        Some((id, at_us))
    }

    /// The next time at which something can happen without new input: the earliest of the
    /// next delivery (which may already be due) and, if packets are queued, the next
    /// opportunity outside an outage. `None` if nothing will ever happen without new input
    /// (idle link, or a played-once trace that has ended). Opportunities an idle link would
    /// only log are not events.
    pub fn next_event_us(&self) -> Option<u64> {
        let delivery = self.in_flight.front().map(|&(_, at)| at);
        let service = if self.queue.is_empty() {
            None
        } else {
            self.next_usable_opportunity_us()
        };
        match (delivery, service) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next opportunity not inside an outage.
    fn next_usable_opportunity_us(&self) -> Option<u64> {
        let trace = self.config.capacity.opportunities_ms();
        let outages = &self.config.outages;
        let mut cursor = self.cursor;
        // Each iteration moves past one whole outage, so this runs at most #spans + 1 times.
        loop {
            let t_us = cursor.peek_us(&self.config.capacity, self.config.looping)?;
            if !outages.is_out(t_us) {
                return Some(t_us);
            }
            let end_us = outages.next_change_after(t_us)?;
            cursor.seek_ms(trace, self.config.looping, end_us / 1000);
            // Spread opportunities just before the end are still out: step past them.
            while cursor
                .peek_us(&self.config.capacity, self.config.looping)
                .is_some_and(|t| t < end_us)
            {
                cursor.step(trace, self.config.looping);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(ms: &[u64]) -> DeliveryTrace {
        DeliveryTrace::from_opportunities_ms(ms.to_vec()).unwrap()
    }

    #[test]
    fn cursor_seek_matches_stepping() {
        // Seeking must land exactly where stepping past every earlier opportunity would.
        let t = [0, 0, 3, 3, 7, 10];
        for looping in [true, false] {
            for target in 0..60 {
                let mut a = Cursor {
                    idx: 0,
                    base_ms: 0,
                    finished: false,
                };
                let mut b = a;
                a.seek_ms(&t, looping, target);
                while b.peek_ms(&t).is_some_and(|m| m < target) {
                    b.step(&t, looping);
                }
                assert_eq!(
                    (a.peek_ms(&t), a.finished),
                    (b.peek_ms(&t), b.finished),
                    "target {target} looping {looping}"
                );
            }
        }
    }

    #[test]
    fn config_validation() {
        let mut c = LinkConfig::new(trace(&[0, 0]));
        assert_eq!(Link::new(c.clone()).unwrap_err(), LinkError::ZeroPeriod);
        c.looping = false;
        assert!(Link::new(c.clone()).is_ok());
        c.queue = QueueLimit::Packets(0);
        assert!(matches!(
            Link::new(c.clone()),
            Err(LinkError::QueueLimit(_))
        ));
        c.queue = QueueLimit::Bytes(MAX_QUEUE_BYTES + 1);
        assert!(matches!(
            Link::new(c.clone()),
            Err(LinkError::QueueLimit(_))
        ));
        c.queue = QueueLimit::Bytes(1500);
        c.loss = LossModel::Bernoulli { p: 2.0 };
        assert!(matches!(Link::new(c), Err(LinkError::Loss(_))));
    }

    #[test]
    fn invalid_lengths_are_dropped_without_advancing_loss() {
        let mut l = Link::new(LinkConfig::new(trace(&[1]))).unwrap();
        assert_eq!(
            l.enqueue(0, 1, 0),
            EnqueueOutcome::Dropped(DropReason::InvalidLength)
        );
        assert_eq!(
            l.enqueue(0, 2, MAX_PACKET_BYTES + 1),
            EnqueueOutcome::Dropped(DropReason::InvalidLength)
        );
        assert_eq!(l.stats().dropped_invalid, 2);
        assert_eq!(l.enqueue(0, 3, MAX_PACKET_BYTES), EnqueueOutcome::Enqueued);
    }

    #[test]
    fn idle_skip_is_cheap_and_correct() {
        // One opportunity per ms; after an hour idle, a packet is served at the next ms.
        let mut l = Link::new(LinkConfig::new(trace(&[1]))).unwrap();
        let hour_us = 3_600_000_000;
        assert_eq!(l.enqueue(hour_us + 500, 9, 100), EnqueueOutcome::Enqueued);
        assert_eq!(l.next_event_us(), Some(hour_us + 1000));
        assert_eq!(l.poll_delivered(hour_us + 1000), Some((9, hour_us + 1000)));
        assert_eq!(l.next_event_us(), None);
    }

    #[test]
    fn time_never_goes_back() {
        let mut l = Link::new(LinkConfig::new(trace(&[1]))).unwrap();
        l.advance(10_000);
        assert_eq!(l.enqueue(5_000, 1, 100), EnqueueOutcome::Enqueued);
        assert_eq!(l.now_us(), 10_000);
        // Served at 11 ms, not 6 ms.
        assert_eq!(l.poll_delivered(20_000), Some((1, 11_000)));
    }

    #[test]
    fn next_event_skips_outages() {
        let mut c = LinkConfig::new(trace(&[1]));
        c.outages = Outages::new(vec![(2, 5), (5, 8)]).unwrap();
        c.outage_mode = OutageMode::Hold;
        let mut l = Link::new(c).unwrap();
        assert_eq!(l.enqueue(1_500, 1, 100), EnqueueOutcome::Enqueued);
        assert_eq!(l.next_event_us(), Some(8_000));
        assert_eq!(l.poll_delivered(7_999), None);
        assert_eq!(l.poll_delivered(8_000), Some((1, 8_000)));
    }
}
