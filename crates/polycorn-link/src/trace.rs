//! Time series that drive a link: capacity ([`DeliveryTrace`]), one-way delay
//! ([`DelaySeries`]) and outages ([`Outages`]).
//!
//! ## Formats
//! * **Capacity** uses mahimahi's trace format (Winstein et al., NSDI'13; mahimahi
//!   `traces/README`): one line per *delivery opportunity*, holding the millisecond at which the
//!   link may send one MTU ([`OPPORTUNITY_BYTES`] = 1500 bytes). Timestamps are non-decreasing;
//!   a repeated timestamp means several opportunities in that millisecond. When the trace loops,
//!   its period is its last timestamp, so a trace ending at 0 ms cannot loop.
//! * **Delay** is a CSV `t_ms,delay_ms`: from `t_ms` on, the one-way delay is `delay_ms`
//!   (decimal milliseconds, kept to the microsecond). A step function, not an interpolation:
//!   what a trip model produces per handover or per second is a step.
//! * **Outages** are a CSV `start_ms,end_ms` of half-open spans `[start, end)`.
//!
//! Both CSVs accept an optional header line equal to the column names, and are written with it.
//!
//! ## Why strict parsing
//! A trace is untrusted input: a truncated file or a hand edit must fail loudly with the file
//! and the 1-based line ([`TraceError`], shown as `file:line: message`) instead of silently
//! emulating a different link. Every check has a limit (`MAX_*`) so that a hostile or
//! corrupted file cannot make the emulator allocate without bound or overflow its clock.
//! Only trailing empty lines are tolerated (editors add them).
//!
//! ## Time
//! Files are in milliseconds (mahimahi's resolution); queries take integer microseconds
//! (`*_us`), the unit the link model runs in.

use std::fmt::Write as _;

/// Bytes one delivery opportunity can carry: one 1500-byte MTU, as in mahimahi's traces.
pub const OPPORTUNITY_BYTES: u32 = 1500;

/// Largest timestamp accepted in any file, in milliseconds (2^40 ms ≈ 34 years). Keeps every
/// `ms * 1000` and loop offset far from `u64` overflow.
pub const MAX_TIMESTAMP_MS: u64 = 1 << 40;

/// Most opportunities in one [`DeliveryTrace`] (2^26 ≈ 67 M; the longest mahimahi trace in the
/// wild has about 0.5 M). At 8 bytes each this bounds a trace to 512 MiB.
pub const MAX_OPPORTUNITIES: usize = 1 << 26;

/// Most points in a [`DelaySeries`] or spans in [`Outages`] (one per millisecond for about
/// 4.6 hours).
pub const MAX_POINTS: usize = 1 << 24;

/// Largest one-way delay accepted from a file or [`DelaySeries::new`]: 600 s. HSR traces show
/// RTTs above 4 s; nothing real comes close to this.
pub const MAX_DELAY_US: u64 = 600_000_000;

/// Highest rate [`DeliveryTrace::from_rate_series`] accepts: 100 Gbit/s.
pub const MAX_RATE_BPS: u64 = 100_000_000_000;

/// Bits in one opportunity, as used by rate conversions.
const OPPORTUNITY_BITS: u64 = OPPORTUNITY_BYTES as u64 * 8;

/// File name used in errors for traces built in memory.
const IN_MEMORY: &str = "<memory>";

/// A rejected trace, delay or outage file (or in-memory series), with where and why.
///
/// Displayed as `file:line: message`; `line` is 1-based. For in-memory input the file is
/// `<memory>` (or `<rate series>`) and the line is the 1-based index of the offending element.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {kind}")]
pub struct TraceError {
    /// Name of the file (as given to `parse`), or `<memory>` for in-memory input.
    pub file: String,
    /// 1-based line number (or element index) of the problem.
    pub line: usize,
    /// What is wrong.
    pub kind: TraceErrorKind,
}

/// Why a trace, delay or outage input was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceErrorKind {
    /// The input holds no timestamps / points at all.
    #[error("empty: no entries found")]
    Empty,
    /// An empty line before the last entry (only trailing empty lines are allowed).
    #[error("empty line (only trailing empty lines are allowed)")]
    EmptyLine,
    /// Not a non-negative integer (e.g. `1.5`, `abc`, ` 12`).
    #[error("not a non-negative integer: {0:?}")]
    NotInteger(String),
    /// Not a non-negative decimal number (e.g. `1e3`, `nan`, `.5`).
    #[error("not a non-negative decimal number: {0:?}")]
    NotDecimal(String),
    /// A negative number.
    #[error("negative value: {0:?}")]
    Negative(String),
    /// A number followed by something else (e.g. `12abc`, `12 13`).
    #[error("trailing garbage after the number: {0:?}")]
    TrailingGarbage(String),
    /// A value above the documented limit.
    #[error("value {value} exceeds the limit {max}")]
    TooLarge {
        /// The value found (saturated at `u64::MAX` if it did not even fit).
        value: u64,
        /// The limit.
        max: u64,
    },
    /// More entries than the documented limit.
    #[error("more than {max} entries")]
    TooMany {
        /// The limit.
        max: usize,
    },
    /// A mahimahi timestamp smaller than the one before it.
    #[error("timestamp {value_ms} ms is before the previous one ({previous_ms} ms); timestamps must be non-decreasing")]
    Decreasing {
        /// The previous timestamp.
        previous_ms: u64,
        /// This timestamp.
        value_ms: u64,
    },
    /// A delay point not strictly after the previous one.
    #[error("time {value_ms} ms is not after the previous point ({previous_ms} ms); times must be strictly increasing")]
    NotIncreasing {
        /// The previous point's time.
        previous_ms: u64,
        /// This point's time.
        value_ms: u64,
    },
    /// A CSV line with the wrong number of comma-separated fields.
    #[error("expected {expected} comma-separated fields, found {found}")]
    FieldCount {
        /// Fields expected.
        expected: usize,
        /// Fields found.
        found: usize,
    },
    /// An outage whose end is not after its start.
    #[error("outage end {end_ms} ms is not after its start {start_ms} ms")]
    EmptySpan {
        /// Start of the span.
        start_ms: u64,
        /// End of the span.
        end_ms: u64,
    },
    /// A problem in a throughput log (see [`crate::throughput`]).
    #[error("{0}")]
    Other(String),
    /// An outage starting before the previous one ended (unsorted or overlapping).
    #[error("outage starting at {start_ms} ms begins before the previous one ends ({previous_end_ms} ms); spans must be sorted and must not overlap")]
    Overlap {
        /// End of the previous span.
        previous_end_ms: u64,
        /// Start of this span.
        start_ms: u64,
    },
}

fn err(file: &str, line: usize, kind: TraceErrorKind) -> TraceError {
    TraceError {
        file: file.to_owned(),
        line,
        kind,
    }
}

/// The lines of `text` that carry content, with 1-based numbers: `\r` before `\n` is stripped
/// and trailing blank lines are dropped (a final `\n` does not start a line). Blank lines
/// before the last content line are kept so the caller can reject them with their number.
fn content_lines(text: &str) -> Vec<(usize, &str)> {
    let mut lines: Vec<(usize, &str)> = text
        .split('\n')
        .enumerate()
        .map(|(i, l)| (i + 1, l.strip_suffix('\r').unwrap_or(l)))
        .collect();
    while lines.last().is_some_and(|(_, l)| l.trim().is_empty()) {
        lines.pop();
    }
    lines
}

/// Parses a non-negative decimal integer with no sign, spaces or suffix.
fn parse_uint(s: &str) -> Result<u64, TraceErrorKind> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        let rest = s.strip_prefix('-').unwrap_or("");
        return Err(if rest.starts_with(|c: char| c.is_ascii_digit()) {
            TraceErrorKind::Negative(s.to_owned())
        } else {
            TraceErrorKind::NotInteger(s.to_owned())
        });
    }
    if digits < s.len() {
        let rest = &s[digits..];
        return Err(
            if rest.starts_with('.') && rest[1..].starts_with(|c: char| c.is_ascii_digit()) {
                TraceErrorKind::NotInteger(s.to_owned())
            } else {
                TraceErrorKind::TrailingGarbage(s.to_owned())
            },
        );
    }
    s.parse::<u64>().map_err(|_| TraceErrorKind::TooLarge {
        value: u64::MAX,
        max: MAX_TIMESTAMP_MS,
    })
}

/// Parses a millisecond timestamp: [`parse_uint`] capped at [`MAX_TIMESTAMP_MS`].
fn parse_ms(s: &str) -> Result<u64, TraceErrorKind> {
    let v = parse_uint(s)?;
    if v > MAX_TIMESTAMP_MS {
        return Err(TraceErrorKind::TooLarge {
            value: v,
            max: MAX_TIMESTAMP_MS,
        });
    }
    Ok(v)
}

/// Parses decimal milliseconds (`12`, `12.5`, `0.001`) into microseconds without going through
/// floating point; digits beyond the microsecond are rounded half up. Capped at
/// [`MAX_DELAY_US`].
fn parse_decimal_ms_to_us(s: &str) -> Result<u64, TraceErrorKind> {
    let bad = || TraceErrorKind::NotDecimal(s.to_owned());
    if let Some(rest) = s.strip_prefix('-') {
        if rest.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(TraceErrorKind::Negative(s.to_owned()));
        }
        return Err(bad());
    }
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (s, None),
    };
    let all_digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(int) || frac.is_some_and(|f| !all_digits(f)) {
        return Err(bad());
    }
    let too_large = TraceErrorKind::TooLarge {
        value: u64::MAX,
        max: MAX_DELAY_US,
    };
    // Cap the integer part first: anything above the delay limit in ms is rejected anyway.
    let int_ms: u64 = int.parse().map_err(|_| too_large.clone())?;
    if int_ms > MAX_DELAY_US / 1000 {
        return Err(TraceErrorKind::TooLarge {
            value: int_ms.saturating_mul(1000),
            max: MAX_DELAY_US,
        });
    }
    let mut us = int_ms * 1000;
    if let Some(f) = frac {
        let b = f.as_bytes();
        let digit = |i: usize| b.get(i).map_or(0, |d| u64::from(d - b'0'));
        us += digit(0) * 100 + digit(1) * 10 + digit(2);
        if digit(3) >= 5 {
            us += 1;
        }
    }
    if us > MAX_DELAY_US {
        return Err(TraceErrorKind::TooLarge {
            value: us,
            max: MAX_DELAY_US,
        });
    }
    Ok(us)
}

/// Writes microseconds as decimal milliseconds with no trailing zeros (`12`, `12.5`, `0.001`).
fn write_us_as_ms(out: &mut String, us: u64) {
    let (ms, frac) = (us / 1000, us % 1000);
    if frac == 0 {
        let _ = write!(out, "{ms}");
    } else {
        let digits = format!("{frac:03}");
        let _ = write!(out, "{ms}.{}", digits.trim_end_matches('0'));
    }
}

/// Splits one CSV data line into exactly `N` trimmed fields.
fn csv_fields<const N: usize>(line: &str) -> Result<[&str; N], TraceErrorKind> {
    let parts: Vec<&str> = line.split(',').map(str::trim).collect();
    <[&str; N]>::try_from(parts.as_slice()).map_err(|_| TraceErrorKind::FieldCount {
        expected: N,
        found: parts.len(),
    })
}

/// The content lines of a two-column CSV, without its optional header line.
fn csv_data_lines<'a>(text: &'a str, header: [&str; 2]) -> Vec<(usize, &'a str)> {
    let mut lines = content_lines(text);
    let is_header = lines.first().is_some_and(|(_, l)| {
        let f: Vec<&str> = l.split(',').map(str::trim).collect();
        f == header
    });
    if is_header {
        lines.remove(0);
    }
    lines
}

// ---------------------------------------------------------------------------------------------

/// A mahimahi capacity trace: the millisecond timestamps of the link's delivery opportunities,
/// each able to carry [`OPPORTUNITY_BYTES`].
///
/// Invariants (checked by every constructor): at least one opportunity, non-decreasing,
/// each ≤ [`MAX_TIMESTAMP_MS`], at most [`MAX_OPPORTUNITIES`]. A trace whose last timestamp is
/// 0 is valid here but cannot loop; [`crate::link::Link::new`] rejects it when asked to loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryTrace {
    opportunities_ms: Vec<u64>,
    /// Per opportunity: how far before its millisecond stamp it happens, µs (see
    /// [`DeliveryTrace::opportunity_us`]).
    lead_us: Vec<u16>,
    /// The same when the trace loops (groups span pass boundaries).
    lead_loop_us: Vec<u16>,
}

impl DeliveryTrace {
    /// Parses mahimahi trace text. `name` is used in errors only (usually the file path).
    ///
    /// Strict: each line is exactly one non-negative integer (no spaces, signs, decimals or
    /// comments), timestamps never decrease, the trace is not empty, and only trailing empty
    /// lines are tolerated. `\r\n` line ends are accepted.
    pub fn parse(name: &str, text: &str) -> Result<Self, TraceError> {
        let lines = content_lines(text);
        if lines.is_empty() {
            return Err(err(name, 1, TraceErrorKind::Empty));
        }
        let mut opportunities_ms = Vec::with_capacity(lines.len().min(MAX_OPPORTUNITIES));
        for (line_no, line) in lines {
            if opportunities_ms.len() == MAX_OPPORTUNITIES {
                let kind = TraceErrorKind::TooMany {
                    max: MAX_OPPORTUNITIES,
                };
                return Err(err(name, line_no, kind));
            }
            if line.trim().is_empty() {
                return Err(err(name, line_no, TraceErrorKind::EmptyLine));
            }
            let ms = parse_ms(line).map_err(|k| err(name, line_no, k))?;
            if let Some(&previous_ms) = opportunities_ms.last() {
                if ms < previous_ms {
                    let kind = TraceErrorKind::Decreasing {
                        previous_ms,
                        value_ms: ms,
                    };
                    return Err(err(name, line_no, kind));
                }
            }
            opportunities_ms.push(ms);
        }
        Ok(Self::with_leads(opportunities_ms))
    }

    /// Builds a trace from opportunity timestamps, with the same checks as [`Self::parse`]
    /// (errors name the file `<memory>` and the 1-based index as the line).
    pub fn from_opportunities_ms(opportunities_ms: Vec<u64>) -> Result<Self, TraceError> {
        if opportunities_ms.is_empty() {
            return Err(err(IN_MEMORY, 1, TraceErrorKind::Empty));
        }
        if opportunities_ms.len() > MAX_OPPORTUNITIES {
            let kind = TraceErrorKind::TooMany {
                max: MAX_OPPORTUNITIES,
            };
            return Err(err(IN_MEMORY, MAX_OPPORTUNITIES + 1, kind));
        }
        let mut previous_ms = 0;
        for (i, &ms) in opportunities_ms.iter().enumerate() {
            if ms > MAX_TIMESTAMP_MS {
                let kind = TraceErrorKind::TooLarge {
                    value: ms,
                    max: MAX_TIMESTAMP_MS,
                };
                return Err(err(IN_MEMORY, i + 1, kind));
            }
            if ms < previous_ms {
                let kind = TraceErrorKind::Decreasing {
                    previous_ms,
                    value_ms: ms,
                };
                return Err(err(IN_MEMORY, i + 1, kind));
            }
            previous_ms = ms;
        }
        Ok(Self::with_leads(opportunities_ms))
    }

    /// Builds a trace from a piecewise-constant capacity: `intervals` are consecutive
    /// `(duration_ms, bits_per_sec)` pieces starting at 0 ms.
    ///
    /// Capacity accrues every millisecond; an opportunity is emitted at the end of the
    /// millisecond in which the accrued bytes reach [`OPPORTUNITY_BYTES`], and the remainder is
    /// carried over — across interval boundaries too. The count is therefore exact: by the end
    /// of millisecond `t` there are `floor(Σ rate·time / 12000 bit)` opportunities, with no
    /// drift however many intervals there are, and they are spread evenly (to the
    /// millisecond) inside each interval.
    ///
    /// The trace ends at its last opportunity, which is its loop period: if the series ends in
    /// a zero-rate (or low-rate) stretch, that stretch is not part of the period. Trip traces
    /// are meant to be played once (`looping: false`); to loop a series exactly, end it with a
    /// rate high enough to put an opportunity in its last millisecond.
    ///
    /// Errors (file `<rate series>`, line = 1-based interval index): a rate above
    /// [`MAX_RATE_BPS`], a total duration above [`MAX_TIMESTAMP_MS`], more than
    /// [`MAX_OPPORTUNITIES`] opportunities, or no opportunity at all.
    pub fn from_rate_series(intervals: &[(u64, u64)]) -> Result<Self, TraceError> {
        const FILE: &str = "<rate series>";
        // Credit is kept in bit·ms/s (bits × 1000): a rate of r bit/s adds r per millisecond,
        // and one opportunity costs 12000 bits × 1000. Integer arithmetic, hence no drift.
        const COST: u64 = OPPORTUNITY_BITS * 1000;
        let mut opportunities_ms = Vec::new();
        let mut credit: u64 = 0;
        let mut t_ms: u64 = 0;
        for (i, &(duration_ms, rate_bps)) in intervals.iter().enumerate() {
            let line = i + 1;
            if rate_bps > MAX_RATE_BPS {
                let kind = TraceErrorKind::TooLarge {
                    value: rate_bps,
                    max: MAX_RATE_BPS,
                };
                return Err(err(FILE, line, kind));
            }
            let end_ms = t_ms.saturating_add(duration_ms);
            if end_ms > MAX_TIMESTAMP_MS {
                let kind = TraceErrorKind::TooLarge {
                    value: end_ms,
                    max: MAX_TIMESTAMP_MS,
                };
                return Err(err(FILE, line, kind));
            }
            if rate_bps == 0 {
                t_ms = end_ms;
                continue;
            }
            while t_ms < end_ms {
                t_ms += 1;
                credit += rate_bps;
                let n = credit / COST;
                credit -= n * COST;
                // n ≤ MAX_RATE_BPS / COST ≈ 8334, so the cast is lossless.
                let n = n as usize;
                if opportunities_ms.len() + n > MAX_OPPORTUNITIES {
                    let kind = TraceErrorKind::TooMany {
                        max: MAX_OPPORTUNITIES,
                    };
                    return Err(err(FILE, line, kind));
                }
                opportunities_ms.extend(std::iter::repeat_n(t_ms, n));
            }
        }
        if opportunities_ms.is_empty() {
            return Err(err(FILE, intervals.len().max(1), TraceErrorKind::Empty));
        }
        Ok(Self::with_leads(opportunities_ms))
    }

    /// Spread the `k` opportunities that share a millisecond stamp `T` evenly over that
    /// millisecond: the `j`-th (1-based) happens at `T − 1 + j/k` ms, so a lone opportunity stays
    /// at `T` and 8 opportunities of a 100 Mbit/s trace come 125 µs apart instead of in one
    /// burst at the boundary. mahimahi serves them all at `T`, which adds up to 1 ms of waiting
    /// per direction at any rate; a cellular link schedules within its 1 ms subframes too, but
    /// does not batch a millisecond's worth of packets at its end.
    fn with_leads(opportunities_ms: Vec<u64>) -> Self {
        let n = opportunities_ms.len();
        let mut lead_us = vec![0u16; n];
        let lead = |j: usize, k: usize| (1000 - (j as u64) * 1000 / k as u64) as u16;
        let mut start = 0;
        while start < n {
            let t = opportunities_ms[start];
            let k = opportunities_ms[start..]
                .iter()
                .take_while(|&&m| m == t)
                .count();
            for j in 0..k {
                lead_us[start + j] = lead(j + 1, k);
            }
            start += k;
        }
        // When looping, a pass's last stamp (the period) and the next pass's stamps at 0 are the
        // same instant: spread them as one group, last-pass opportunities first.
        let mut lead_loop_us = lead_us.clone();
        let period = opportunities_ms.last().copied().unwrap_or(0);
        let b = opportunities_ms.iter().take_while(|&&m| m == 0).count();
        if period > 0 && b > 0 {
            let a = opportunities_ms
                .iter()
                .rev()
                .take_while(|&&m| m == period)
                .count();
            for j in 0..a {
                lead_loop_us[n - a + j] = lead(j + 1, a + b);
            }
            for (j, l) in lead_loop_us.iter_mut().take(b).enumerate() {
                *l = lead(a + j + 1, a + b);
            }
        }
        Self {
            opportunities_ms,
            lead_us,
            lead_loop_us,
        }
    }

    /// When opportunity `idx` of a pass starting at `base_ms` happens, µs: its millisecond stamp
    /// minus its lead (see [`DeliveryTrace`]'s spreading rule), never before 0. `looping`
    /// selects the grouping across pass boundaries.
    pub fn opportunity_us(&self, idx: usize, base_ms: u64, looping: bool) -> Option<u64> {
        let m = *self.opportunities_ms.get(idx)?;
        let lead = u64::from(if looping {
            self.lead_loop_us[idx]
        } else {
            self.lead_us[idx]
        });
        Some(
            base_ms
                .saturating_add(m)
                .saturating_mul(1000)
                .saturating_sub(lead),
        )
    }

    /// The opportunity timestamps in milliseconds (non-decreasing, never empty).
    pub fn opportunities_ms(&self) -> &[u64] {
        &self.opportunities_ms
    }

    /// Number of opportunities in one pass of the trace (≥ 1).
    pub fn opportunity_count(&self) -> usize {
        self.opportunities_ms.len()
    }

    /// The loop period in milliseconds: the last timestamp (mahimahi's rule). 0 means the
    /// trace cannot loop.
    pub fn period_ms(&self) -> u64 {
        self.opportunities_ms.last().copied().unwrap_or(0)
    }

    /// Mean capacity over one period in bit/s (`opportunities × 12000 bit / period`), or `None`
    /// for a zero-length period.
    pub fn mean_rate_bps(&self) -> Option<f64> {
        let period_ms = self.period_ms();
        if period_ms == 0 {
            return None;
        }
        let bits = self.opportunities_ms.len() as f64 * OPPORTUNITY_BITS as f64;
        Some(bits * 1000.0 / period_ms as f64)
    }

    /// The trace in mahimahi format (one timestamp per line, each line ending in `\n`);
    /// [`Self::parse`] reads it back to an equal trace.
    pub fn to_mahimahi(&self) -> String {
        let mut out = String::with_capacity(self.opportunities_ms.len() * 8);
        for ms in &self.opportunities_ms {
            let _ = writeln!(out, "{ms}");
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------

/// One-way delay as a step function of time: points `(at_ms, delay_us)`; from `at_ms` on (until
/// the next point) the delay is `delay_us`. Before the first point the first delay applies;
/// after the last point the last delay holds forever, unless the series is
/// [looped](Self::looped) (as a recorded path's delay loops with its capacity trace).
///
/// Invariants: at least one point, times strictly increasing and ≤ [`MAX_TIMESTAMP_MS`],
/// delays ≤ [`MAX_DELAY_US`] (except through [`Self::constant`], which accepts any value); a
/// loop period is > 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelaySeries {
    points: Vec<(u64, u64)>,
    /// Time `t` reads the series at `t mod period` (ms), if set.
    period_ms: Option<u64>,
}

impl Default for DelaySeries {
    /// Zero delay.
    fn default() -> Self {
        Self::constant(0)
    }
}

impl DelaySeries {
    /// CSV header written by [`Self::to_csv`] and accepted by [`Self::parse`].
    pub const CSV_HEADER: &'static str = "t_ms,delay_ms";

    /// The same delay at all times.
    pub fn constant(delay_us: u64) -> Self {
        Self {
            points: vec![(0, delay_us)],
            period_ms: None,
        }
    }

    /// Builds a series from `(at_ms, delay_us)` points (errors name file `<memory>`, line =
    /// 1-based index): non-empty, strictly increasing times, limits as documented on the type.
    pub fn new(points: Vec<(u64, u64)>) -> Result<Self, TraceError> {
        if points.is_empty() {
            return Err(err(IN_MEMORY, 1, TraceErrorKind::Empty));
        }
        if points.len() > MAX_POINTS {
            let kind = TraceErrorKind::TooMany { max: MAX_POINTS };
            return Err(err(IN_MEMORY, MAX_POINTS + 1, kind));
        }
        let mut previous: Option<u64> = None;
        for (i, &(at_ms, delay_us)) in points.iter().enumerate() {
            Self::check_point(previous, at_ms, delay_us).map_err(|k| err(IN_MEMORY, i + 1, k))?;
            previous = Some(at_ms);
        }
        Ok(Self {
            points,
            period_ms: None,
        })
    }

    fn check_point(previous: Option<u64>, at_ms: u64, delay_us: u64) -> Result<(), TraceErrorKind> {
        if at_ms > MAX_TIMESTAMP_MS {
            return Err(TraceErrorKind::TooLarge {
                value: at_ms,
                max: MAX_TIMESTAMP_MS,
            });
        }
        if delay_us > MAX_DELAY_US {
            return Err(TraceErrorKind::TooLarge {
                value: delay_us,
                max: MAX_DELAY_US,
            });
        }
        if let Some(previous_ms) = previous {
            if at_ms <= previous_ms {
                return Err(TraceErrorKind::NotIncreasing {
                    previous_ms,
                    value_ms: at_ms,
                });
            }
        }
        Ok(())
    }

    /// Parses CSV `t_ms,delay_ms` (optional header line `t_ms,delay_ms`): `t_ms` a non-negative
    /// integer, strictly increasing; `delay_ms` a non-negative decimal (kept to the
    /// microsecond, rounded half up beyond). Spaces around fields are allowed. `name` is used in
    /// errors.
    pub fn parse(name: &str, text: &str) -> Result<Self, TraceError> {
        let lines = csv_data_lines(text, ["t_ms", "delay_ms"]);
        if lines.is_empty() {
            let line = content_lines(text).len() + 1;
            return Err(err(name, line, TraceErrorKind::Empty));
        }
        let mut points: Vec<(u64, u64)> = Vec::with_capacity(lines.len().min(MAX_POINTS));
        for (line_no, line) in lines {
            let e = |k| err(name, line_no, k);
            if points.len() == MAX_POINTS {
                return Err(e(TraceErrorKind::TooMany { max: MAX_POINTS }));
            }
            if line.trim().is_empty() {
                return Err(e(TraceErrorKind::EmptyLine));
            }
            let [t, d] = csv_fields::<2>(line).map_err(e)?;
            let at_ms = parse_ms(t).map_err(e)?;
            let delay_us = parse_decimal_ms_to_us(d).map_err(e)?;
            Self::check_point(points.last().map(|p| p.0), at_ms, delay_us).map_err(e)?;
            points.push((at_ms, delay_us));
        }
        Ok(Self {
            points,
            period_ms: None,
        })
    }

    /// The same series repeated every `period_ms` (time `t` reads it at `t mod period_ms`), as a
    /// capacity trace loops; points at or after `period_ms` are never reached. A period of 0
    /// leaves the series unlooped.
    pub fn looped(mut self, period_ms: u64) -> Self {
        self.period_ms = (period_ms > 0).then_some(period_ms);
        self
    }

    /// The loop period, ms, if the series loops.
    pub fn period_ms(&self) -> Option<u64> {
        self.period_ms
    }

    /// The series as CSV with header; [`Self::parse`] reads it back to an equal series (a loop
    /// period is not written).
    pub fn to_csv(&self) -> String {
        let mut out = String::with_capacity(16 + self.points.len() * 12);
        out.push_str(Self::CSV_HEADER);
        out.push('\n');
        for &(at_ms, delay_us) in &self.points {
            let _ = write!(out, "{at_ms},");
            write_us_as_ms(&mut out, delay_us);
            out.push('\n');
        }
        out
    }

    /// The points `(at_ms, delay_us)`, strictly increasing in time, never empty.
    pub fn points(&self) -> &[(u64, u64)] {
        &self.points
    }

    /// The one-way delay in effect at `t_us`.
    pub fn delay_at_us(&self, t_us: u64) -> u64 {
        let t_us = match self.period_ms {
            Some(p) => t_us % p.saturating_mul(1000),
            None => t_us,
        };
        let i = self
            .points
            .partition_point(|&(at_ms, _)| at_ms.saturating_mul(1000) <= t_us);
        self.points[i.saturating_sub(1)].1
    }

    /// The largest delay in the series.
    pub fn max_delay_us(&self) -> u64 {
        self.points.iter().map(|p| p.1).max().unwrap_or(0)
    }
}

// ---------------------------------------------------------------------------------------------

/// Times when the link is down: half-open spans `[start_ms, end_ms)`.
///
/// Invariants: every span non-empty (`start < end`), sorted, not overlapping (a span may start
/// exactly where the previous ended), all times ≤ [`MAX_TIMESTAMP_MS`], at most
/// [`MAX_POINTS`] spans. Outages are absolute times: they do not loop with the capacity trace.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outages {
    spans_ms: Vec<(u64, u64)>,
}

impl Outages {
    /// CSV header written by [`Self::to_csv`] and accepted by [`Self::parse`].
    pub const CSV_HEADER: &'static str = "start_ms,end_ms";

    /// No outages.
    pub fn none() -> Self {
        Self::default()
    }

    /// Builds from `(start_ms, end_ms)` spans (errors name file `<memory>`, line = 1-based
    /// index). An empty list is fine.
    pub fn new(spans_ms: Vec<(u64, u64)>) -> Result<Self, TraceError> {
        if spans_ms.len() > MAX_POINTS {
            let kind = TraceErrorKind::TooMany { max: MAX_POINTS };
            return Err(err(IN_MEMORY, MAX_POINTS + 1, kind));
        }
        let mut previous_end = None;
        for (i, &(start_ms, end_ms)) in spans_ms.iter().enumerate() {
            Self::check_span(previous_end, start_ms, end_ms)
                .map_err(|k| err(IN_MEMORY, i + 1, k))?;
            previous_end = Some(end_ms);
        }
        Ok(Self { spans_ms })
    }

    fn check_span(
        previous_end: Option<u64>,
        start_ms: u64,
        end_ms: u64,
    ) -> Result<(), TraceErrorKind> {
        if end_ms > MAX_TIMESTAMP_MS {
            return Err(TraceErrorKind::TooLarge {
                value: end_ms,
                max: MAX_TIMESTAMP_MS,
            });
        }
        if end_ms <= start_ms {
            return Err(TraceErrorKind::EmptySpan { start_ms, end_ms });
        }
        if let Some(previous_end_ms) = previous_end {
            if start_ms < previous_end_ms {
                return Err(TraceErrorKind::Overlap {
                    previous_end_ms,
                    start_ms,
                });
            }
        }
        Ok(())
    }

    /// Parses CSV `start_ms,end_ms` (optional header line `start_ms,end_ms`), integers, one span
    /// per line; spaces around fields are allowed. An empty file (or header only) means no
    /// outages. `name` is used in errors.
    pub fn parse(name: &str, text: &str) -> Result<Self, TraceError> {
        let lines = csv_data_lines(text, ["start_ms", "end_ms"]);
        let mut spans_ms: Vec<(u64, u64)> = Vec::with_capacity(lines.len().min(MAX_POINTS));
        for (line_no, line) in lines {
            let e = |k| err(name, line_no, k);
            if spans_ms.len() == MAX_POINTS {
                return Err(e(TraceErrorKind::TooMany { max: MAX_POINTS }));
            }
            if line.trim().is_empty() {
                return Err(e(TraceErrorKind::EmptyLine));
            }
            let [s, t] = csv_fields::<2>(line).map_err(e)?;
            let start_ms = parse_ms(s).map_err(e)?;
            let end_ms = parse_ms(t).map_err(e)?;
            Self::check_span(spans_ms.last().map(|p| p.1), start_ms, end_ms).map_err(e)?;
            spans_ms.push((start_ms, end_ms));
        }
        Ok(Self { spans_ms })
    }

    /// The spans as CSV with header; [`Self::parse`] reads it back to equal outages.
    pub fn to_csv(&self) -> String {
        let mut out = String::with_capacity(16 + self.spans_ms.len() * 16);
        out.push_str(Self::CSV_HEADER);
        out.push('\n');
        for &(s, e) in &self.spans_ms {
            let _ = writeln!(out, "{s},{e}");
        }
        out
    }

    /// The spans `(start_ms, end_ms)`, sorted, non-overlapping.
    pub fn spans_ms(&self) -> &[(u64, u64)] {
        &self.spans_ms
    }

    /// Whether there are no outages at all.
    pub fn is_empty(&self) -> bool {
        self.spans_ms.is_empty()
    }

    /// Total time dark, ms.
    pub fn dark_ms(&self) -> u64 {
        self.spans_ms.iter().map(|&(s, e)| e - s).sum()
    }

    /// These outages as one period of a looping trace, repeated every `period_ms` from 0 until
    /// `until_ms` (at most [`MAX_TIMESTAMP_MS`]; the last repetition is cut there). Spans that
    /// start at or after `period_ms` never play and are left out; a span reaching past it is cut
    /// there. At most [`MAX_POINTS`] spans: a horizon that would need more ends earlier. A
    /// `period_ms` of 0 returns the outages unchanged.
    pub fn looped(&self, period_ms: u64, until_ms: u64) -> Outages {
        if period_ms == 0 {
            return self.clone();
        }
        let until_ms = until_ms.min(MAX_TIMESTAMP_MS);
        let one: Vec<(u64, u64)> = self
            .spans_ms
            .iter()
            .filter(|&&(s, _)| s < period_ms)
            .map(|&(s, e)| (s, e.min(period_ms)))
            .collect();
        let mut spans_ms = Vec::new();
        let mut base = 0u64;
        'periods: while !one.is_empty() && base < until_ms {
            for &(s, e) in &one {
                let (s, e) = (base + s, (base + e).min(until_ms));
                if s >= until_ms || spans_ms.len() == MAX_POINTS {
                    break 'periods;
                }
                spans_ms.push((s, e));
            }
            base += period_ms;
        }
        Outages { spans_ms }
    }

    /// Index of the first span ending after `t_us`.
    fn first_ending_after(&self, t_us: u64) -> usize {
        self.spans_ms
            .partition_point(|&(_, end_ms)| end_ms * 1000 <= t_us)
    }

    /// Whether the link is down at `t_us` (`start ≤ t < end`).
    pub fn is_out(&self, t_us: u64) -> bool {
        let i = self.first_ending_after(t_us);
        self.spans_ms
            .get(i)
            .is_some_and(|&(start_ms, _)| start_ms * 1000 <= t_us)
    }

    /// The first time after `t_us` at which [`Self::is_out`] changes value (an outage starts
    /// or ends), in microseconds; `None` if it never changes again. Spans that touch are one
    /// outage here: the joint is not a change.
    pub fn next_change_after(&self, t_us: u64) -> Option<u64> {
        let mut i = self.first_ending_after(t_us);
        let &(start_ms, mut end_ms) = self.spans_ms.get(i)?;
        if start_ms * 1000 > t_us {
            return Some(start_ms * 1000);
        }
        while let Some(&(next_start, next_end)) = self.spans_ms.get(i + 1) {
            if next_start != end_ms {
                break;
            }
            end_ms = next_end;
            i += 1;
        }
        Some(end_ms * 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outages_loop_with_their_trace() {
        let o = Outages::new(vec![(10, 20), (90, 130), (150, 160)]).unwrap();
        assert_eq!(o.dark_ms(), 60);
        // Period 100: (150, 160) never plays, (90, 130) is cut at 100; repeated until 250.
        let l = o.looped(100, 250);
        assert_eq!(
            l.spans_ms(),
            &[(10, 20), (90, 100), (110, 120), (190, 200), (210, 220)]
        );
        // The joint at 100 is one outage: no change at 100 once (90, 100) and a span at 100 touch.
        let touching = Outages::new(vec![(0, 5), (95, 100)])
            .unwrap()
            .looped(100, 300);
        assert!(touching.is_out(99_000) && touching.is_out(100_000) && !touching.is_out(105_000));
        assert_eq!(touching.next_change_after(96_000), Some(105_000));
        assert!(Outages::none().looped(100, 1_000).is_empty());
        assert_eq!(o.looped(0, 1_000), o);
        // A horizon cut inside a span.
        assert_eq!(
            o.looped(100, 115).spans_ms(),
            &[(10, 20), (90, 100), (110, 115)]
        );
    }

    fn kind_of(r: Result<DeliveryTrace, TraceError>) -> (usize, TraceErrorKind) {
        let e = r.unwrap_err();
        (e.line, e.kind)
    }

    #[test]
    fn parses_and_round_trips() {
        let t = DeliveryTrace::parse("t", "0\n1\n1\n5\n").unwrap();
        assert_eq!(t.opportunities_ms(), &[0, 1, 1, 5]);
        assert_eq!(t.period_ms(), 5);
        assert_eq!(t.to_mahimahi(), "0\n1\n1\n5\n");
        assert_eq!(DeliveryTrace::parse("u", &t.to_mahimahi()).unwrap(), t);
        // No final newline, CRLF, trailing blank lines: all fine.
        assert_eq!(DeliveryTrace::parse("t", "0\r\n1\r\n1\r\n5").unwrap(), t);
        assert_eq!(DeliveryTrace::parse("t", "0\n1\n1\n5\n\n  \n").unwrap(), t);
    }

    #[test]
    fn rejects_with_line_numbers() {
        let p = |s| kind_of(DeliveryTrace::parse("f", s));
        assert_eq!(p(""), (1, TraceErrorKind::Empty));
        assert_eq!(p("\n\n"), (1, TraceErrorKind::Empty));
        assert_eq!(p("1\n\n2\n"), (2, TraceErrorKind::EmptyLine));
        assert_eq!(p("1\n2.5\n"), (2, TraceErrorKind::NotInteger("2.5".into())));
        assert_eq!(p("1\n-3\n"), (2, TraceErrorKind::Negative("-3".into())));
        assert_eq!(
            p("1\n2\n3x\n"),
            (3, TraceErrorKind::TrailingGarbage("3x".into()))
        );
        assert_eq!(
            p("1\n2 3\n"),
            (2, TraceErrorKind::TrailingGarbage("2 3".into()))
        );
        assert_eq!(p(" 1\n"), (1, TraceErrorKind::NotInteger(" 1".into())));
        assert_eq!(p("+1\n"), (1, TraceErrorKind::NotInteger("+1".into())));
        assert_eq!(
            p("5\n4\n"),
            (
                2,
                TraceErrorKind::Decreasing {
                    previous_ms: 5,
                    value_ms: 4
                }
            )
        );
        assert!(matches!(
            p("99999999999999999999999\n"),
            (1, TraceErrorKind::TooLarge { .. })
        ));
        assert!(matches!(
            p(&format!("{}\n", MAX_TIMESTAMP_MS + 1)),
            (1, TraceErrorKind::TooLarge { .. })
        ));
        let e = DeliveryTrace::parse("dir/x.down", "1\nabc\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "dir/x.down:2: not a non-negative integer: \"abc\""
        );
    }

    #[test]
    fn from_opportunities_checks() {
        assert!(DeliveryTrace::from_opportunities_ms(vec![]).is_err());
        let e = DeliveryTrace::from_opportunities_ms(vec![1, 3, 2]).unwrap_err();
        assert_eq!((e.file.as_str(), e.line), ("<memory>", 3));
        let t = DeliveryTrace::from_opportunities_ms(vec![0, 0]).unwrap();
        assert_eq!(t.period_ms(), 0);
        assert_eq!(t.mean_rate_bps(), None);
    }

    #[test]
    fn mean_rate() {
        // 10 opportunities per 10 ms = 1 per ms = 12 Mbit/s.
        let t = DeliveryTrace::from_opportunities_ms((1..=10).collect()).unwrap();
        assert_eq!(t.mean_rate_bps(), Some(12_000_000.0));
    }

    #[test]
    fn rate_series_is_exact_and_carries_over() {
        // 12 Mbit/s = one opportunity per ms.
        let t = DeliveryTrace::from_rate_series(&[(10, 12_000_000)]).unwrap();
        assert_eq!(t.opportunities_ms(), &(1..=10).collect::<Vec<_>>()[..]);
        // 6 Mbit/s = one every 2 ms.
        let t = DeliveryTrace::from_rate_series(&[(10, 6_000_000)]).unwrap();
        assert_eq!(t.opportunities_ms(), &[2, 4, 6, 8, 10]);
        // Carry across intervals: 4 Mbit/s for 2 ms (2/3 opp) + 4 Mbit/s for 1 ms (1/3) = 1
        // opportunity at 3 ms, not 0.
        let t = DeliveryTrace::from_rate_series(&[(2, 4_000_000), (1, 4_000_000)]).unwrap();
        assert_eq!(t.opportunities_ms(), &[3]);
        // Many odd intervals: total count equals the exact floor of total bits / 12000.
        let series: Vec<(u64, u64)> = (0..1000).map(|i| (7, 1_000_003 + i * 7919)).collect();
        let total_bits_x1000: u64 = series.iter().map(|&(d, r)| d * r).sum();
        let t = DeliveryTrace::from_rate_series(&series).unwrap();
        assert_eq!(
            t.opportunity_count() as u64,
            total_bits_x1000 / (12_000 * 1000)
        );
        // Gaps: zero-rate intervals produce nothing.
        let t = DeliveryTrace::from_rate_series(&[(5, 0), (2, 12_000_000)]).unwrap();
        assert_eq!(t.opportunities_ms(), &[6, 7]);
    }

    #[test]
    fn rate_series_errors() {
        let e = DeliveryTrace::from_rate_series(&[(5, 0)]).unwrap_err();
        assert_eq!(e.kind, TraceErrorKind::Empty);
        let e = DeliveryTrace::from_rate_series(&[(5, 1), (5, MAX_RATE_BPS + 1)]).unwrap_err();
        assert_eq!((e.file.as_str(), e.line), ("<rate series>", 2));
        let e = DeliveryTrace::from_rate_series(&[(MAX_TIMESTAMP_MS + 1, 1)]).unwrap_err();
        assert!(matches!(e.kind, TraceErrorKind::TooLarge { .. }));
    }

    #[test]
    fn delay_series() {
        let d = DelaySeries::parse("d.csv", "t_ms,delay_ms\n0,10\n100,12.5\n200, 0.001\n").unwrap();
        assert_eq!(d.points(), &[(0, 10_000), (100, 12_500), (200, 1)]);
        assert_eq!(d.delay_at_us(0), 10_000);
        assert_eq!(d.delay_at_us(99_999), 10_000);
        assert_eq!(d.delay_at_us(100_000), 12_500);
        assert_eq!(d.delay_at_us(u64::MAX), 1);
        assert_eq!(d.to_csv(), "t_ms,delay_ms\n0,10\n100,12.5\n200,0.001\n");
        assert_eq!(DelaySeries::parse("x", &d.to_csv()).unwrap(), d);
        // Without header; before the first point the first delay applies.
        let d = DelaySeries::parse("d.csv", "50,3\n").unwrap();
        assert_eq!(d.delay_at_us(0), 3000);
        // Rounding beyond the microsecond.
        let d = DelaySeries::parse("d.csv", "0,1.00049\n1,1.0005\n").unwrap();
        assert_eq!(d.points(), &[(0, 1000), (1, 1001)]);
        assert_eq!(DelaySeries::constant(7).delay_at_us(123), 7);
        // Looped every 150 ms: 160 ms reads 10 ms, 260 ms reads 110 ms; 200 ms is never reached.
        let d = DelaySeries::parse(
            "d.csv",
            "0,10
100,12.5
200,1
",
        )
        .unwrap()
        .looped(150);
        assert_eq!(d.period_ms(), Some(150));
        assert_eq!(d.delay_at_us(149_999), 12_500);
        assert_eq!(d.delay_at_us(160_000), 10_000);
        assert_eq!(d.delay_at_us(260_000), 12_500);
        assert_eq!(d.delay_at_us(150_000 * 1000 + 5), 10_000);
        assert_eq!(DelaySeries::constant(7).looped(0).period_ms(), None);
    }

    #[test]
    fn delay_series_errors() {
        let p = |s: &str| {
            let e = DelaySeries::parse("d.csv", s).unwrap_err();
            (e.line, e.kind)
        };
        assert_eq!(p("t_ms,delay_ms\n"), (2, TraceErrorKind::Empty));
        assert_eq!(p(""), (1, TraceErrorKind::Empty));
        assert_eq!(
            p("t_ms,delay_ms\n0,1\n0,2\n"),
            (
                3,
                TraceErrorKind::NotIncreasing {
                    previous_ms: 0,
                    value_ms: 0
                }
            )
        );
        assert_eq!(
            p("0,1\n5\n"),
            (
                2,
                TraceErrorKind::FieldCount {
                    expected: 2,
                    found: 1
                }
            )
        );
        assert_eq!(p("0,-1\n"), (1, TraceErrorKind::Negative("-1".into())));
        assert_eq!(p("0,1e3\n"), (1, TraceErrorKind::NotDecimal("1e3".into())));
        assert_eq!(p("0,.5\n"), (1, TraceErrorKind::NotDecimal(".5".into())));
        assert_eq!(p("0.5,1\n"), (1, TraceErrorKind::NotInteger("0.5".into())));
        assert!(matches!(
            p("0,600001\n"),
            (1, TraceErrorKind::TooLarge { .. })
        ));
        assert!(DelaySeries::new(vec![]).is_err());
        assert_eq!(DelaySeries::new(vec![(5, 1), (4, 1)]).unwrap_err().line, 2);
    }

    #[test]
    fn outages() {
        let o = Outages::parse("o.csv", "start_ms,end_ms\n10,20\n20,30\n50,60\n").unwrap();
        assert!(!o.is_out(9_999));
        assert!(o.is_out(10_000));
        assert!(o.is_out(29_999));
        assert!(!o.is_out(30_000));
        assert!(o.is_out(55_000));
        assert!(!o.is_out(60_000));
        assert_eq!(o.next_change_after(0), Some(10_000));
        // Touching spans are one outage.
        assert_eq!(o.next_change_after(10_000), Some(30_000));
        assert_eq!(o.next_change_after(30_000), Some(50_000));
        assert_eq!(o.next_change_after(59_999), Some(60_000));
        assert_eq!(o.next_change_after(60_000), None);
        assert_eq!(Outages::parse("x", &o.to_csv()).unwrap(), o);
        assert!(Outages::parse("o.csv", "start_ms,end_ms\n")
            .unwrap()
            .is_empty());
        assert!(Outages::parse("o.csv", "").unwrap().is_empty());
        assert!(!Outages::none().is_out(0));
    }

    #[test]
    fn outage_errors() {
        let p = |s: &str| {
            let e = Outages::parse("o.csv", s).unwrap_err();
            (e.line, e.kind)
        };
        assert_eq!(
            p("start_ms,end_ms\n10,20\n15,30\n"),
            (
                3,
                TraceErrorKind::Overlap {
                    previous_end_ms: 20,
                    start_ms: 15
                }
            )
        );
        assert_eq!(
            p("5,5\n"),
            (
                1,
                TraceErrorKind::EmptySpan {
                    start_ms: 5,
                    end_ms: 5
                }
            )
        );
        assert_eq!(
            p("1,2,3\n"),
            (
                1,
                TraceErrorKind::FieldCount {
                    expected: 2,
                    found: 3
                }
            )
        );
        assert_eq!(p("1,2\n\n3,4\n"), (2, TraceErrorKind::EmptyLine));
        assert_eq!(Outages::new(vec![(5, 9), (1, 2)]).unwrap_err().line, 2);
    }
}
