//! Per-second throughput logs (G-NetTrack style, e.g. the ucc5g dataset) as capacity traces.
//!
//! The file is CSV with a header naming at least `Timestamp` (`YYYY.MM.DD_HH.MM.SS`),
//! `DL_bitrate` and `UL_bitrate` (kbit/s). Rows with the same timestamp are averaged; each
//! sample lasts until the next timestamp, at most [`MAX_GAP_MS`] (longer gaps in the log are
//! logging outages, not link outages, and are cut to that). Values that are not numbers are
//! errors naming file and line; `-` (the logger's "no value") counts as 0 kbit/s.
//!
//! Throughput measured by a phone is what one TCP flow achieved, not the link's capacity; use
//! such traces as "this much went through", as mahimahi's cellular traces are used.
//!
//! When the header has a `PINGMIN` column (G-NetTrack's smallest RTT of each ping round, ms),
//! its values become a one-way delay series: half of each round's smallest RTT, from the row
//! that reports it until the next report, on the same time base as the rate series (gaps cut
//! alike). Rows without a ping (`-` or empty) keep the last value; before the first report
//! the first one applies.

use crate::trace::{DelaySeries, DeliveryTrace, TraceError, TraceErrorKind, MAX_DELAY_US};

/// Longest duration one sample may cover, ms.
pub const MAX_GAP_MS: u64 = 5_000;

/// Downlink and uplink rate series: `(duration_ms, bits_per_sec)` per sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThroughputSeries {
    /// Downlink.
    pub downlink: Vec<(u64, u64)>,
    /// Uplink.
    pub uplink: Vec<(u64, u64)>,
    /// Rows read.
    pub rows: usize,
    /// Gaps longer than [`MAX_GAP_MS`] that were cut.
    pub gaps_cut: usize,
    /// One-way delay from the `PINGMIN` column: `(at_ms, delay_us)` where it changes, on the
    /// rate series' time base; empty without that column or without a value in it.
    pub delay: Vec<(u64, u64)>,
    /// Rows with a `PINGMIN` value.
    pub ping_rows: usize,
}

impl ThroughputSeries {
    /// Delivery traces for both directions.
    pub fn traces(&self) -> Result<(DeliveryTrace, DeliveryTrace), TraceError> {
        Ok((
            DeliveryTrace::from_rate_series(&self.downlink)?,
            DeliveryTrace::from_rate_series(&self.uplink)?,
        ))
    }

    /// The delay series from the ping column, if the log has one.
    pub fn delay_series(&self) -> Option<DelaySeries> {
        // Points are strictly increasing and within limits by construction.
        (!self.delay.is_empty()).then(|| DelaySeries::new(self.delay.clone()).expect("checked"))
    }
}

fn err(file: &str, line: usize, msg: String) -> TraceError {
    TraceError {
        file: file.into(),
        line,
        kind: TraceErrorKind::Other(msg),
    }
}

/// Seconds from 2000-01-01 of `YYYY.MM.DD_HH.MM.SS` (only differences are used).
fn parse_timestamp(s: &str) -> Option<u64> {
    let (date, time) = s.split_once('_')?;
    let d: Vec<u64> = date
        .split('.')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let t: Vec<u64> = time
        .split('.')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let ([y, mo, da], [h, mi, se]) = (<[u64; 3]>::try_from(d).ok()?, <[u64; 3]>::try_from(t).ok()?);
    if !(2000..3000).contains(&y)
        || !(1..=12).contains(&mo)
        || !(1..=31).contains(&da)
        || h > 23
        || mi > 59
        || se > 60
    {
        return None;
    }
    // Days from 2000-01-01; a day past its month's end counts on into the next month.
    let month = time::Month::try_from(u8::try_from(mo).ok()?).ok()?;
    let first = time::Date::from_calendar_date(i32::try_from(y).ok()?, month, 1).ok()?;
    let epoch = time::Date::from_calendar_date(2000, time::Month::January, 1).ok()?;
    let days = u64::try_from((first - epoch).whole_days()).ok()? + da - 1;
    Some(days * 86_400 + h * 3600 + mi * 60 + se)
}

/// Parse a throughput log. `name` is used in errors.
pub fn parse(name: &str, text: &str) -> Result<ThroughputSeries, TraceError> {
    let mut lines = text.lines().enumerate();
    let (_, header) = lines
        .next()
        .ok_or_else(|| err(name, 1, "empty file".into()))?;
    let cols: Vec<&str> = header.split(',').map(str::trim).collect();
    let col = |c: &str| {
        cols.iter()
            .position(|x| *x == c)
            .ok_or_else(|| err(name, 1, format!("no `{c}` column in the header")))
    };
    let (ts, dl, ul) = (col("Timestamp")?, col("DL_bitrate")?, col("UL_bitrate")?);
    let ping = cols.iter().position(|x| *x == "PINGMIN");
    // (timestamp s, dl kbit/s sum, ul kbit/s sum, rows, smallest PINGMIN µs of one-way delay)
    let mut groups: Vec<(u64, f64, f64, u32, Option<u64>)> = Vec::new();
    let mut rows = 0;
    let mut ping_rows = 0;
    for (i, line) in lines {
        let lineno = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let field = |c: usize, what: &str| {
            f.get(c)
                .copied()
                .ok_or_else(|| err(name, lineno, format!("missing {what} column")))
        };
        let t = parse_timestamp(field(ts, "Timestamp")?).ok_or_else(|| {
            err(
                name,
                lineno,
                format!("bad timestamp `{}` (want YYYY.MM.DD_HH.MM.SS)", f[ts]),
            )
        })?;
        let kbps = |c: usize, what: &str| -> Result<f64, TraceError> {
            let v = field(c, what)?;
            if v == "-" || v.is_empty() {
                return Ok(0.0);
            }
            match v.parse::<f64>() {
                Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
                _ => Err(err(
                    name,
                    lineno,
                    format!("{what} `{v}` is not a non-negative number of kbit/s"),
                )),
            }
        };
        let (d, u) = (kbps(dl, "DL_bitrate")?, kbps(ul, "UL_bitrate")?);
        let owd_us = match ping.map(|c| field(c, "PINGMIN")).transpose()? {
            None | Some("-" | "") => None,
            Some(v) => match v.parse::<f64>() {
                Ok(x) if x.is_finite() && x >= 0.0 && x * 500.0 <= MAX_DELAY_US as f64 => {
                    ping_rows += 1;
                    Some((x * 500.0).round() as u64)
                }
                _ => {
                    return Err(err(
                        name,
                        lineno,
                        format!(
                            "PINGMIN `{v}` is not a round-trip time in ms (0 to {})",
                            2 * MAX_DELAY_US / 1000
                        ),
                    ))
                }
            },
        };
        rows += 1;
        match groups.last_mut() {
            Some(g) if g.0 == t => {
                g.1 += d;
                g.2 += u;
                g.3 += 1;
                g.4 = match (g.4, owd_us) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            Some(g) if t < g.0 => {
                return Err(err(
                    name,
                    lineno,
                    "timestamp earlier than the previous row".into(),
                ))
            }
            _ => groups.push((t, d, u, 1, owd_us)),
        }
    }
    if groups.is_empty() {
        return Err(err(name, 2, "no data rows".into()));
    }
    let mut out = ThroughputSeries {
        downlink: Vec::new(),
        uplink: Vec::new(),
        rows,
        gaps_cut: 0,
        delay: Vec::new(),
        ping_rows,
    };
    let mut at_ms = 0u64;
    for (k, g) in groups.iter().enumerate() {
        if let Some(owd) = g.4 {
            if out.delay.last().is_none_or(|&(_, last)| last != owd) {
                out.delay.push((at_ms, owd));
            }
        }
        let mut dur_ms = groups.get(k + 1).map_or(1000, |n| (n.0 - g.0) * 1000);
        if dur_ms > MAX_GAP_MS {
            dur_ms = MAX_GAP_MS;
            out.gaps_cut += 1;
        }
        let n = f64::from(g.3);
        out.downlink.push((dur_ms, (g.1 / n * 1000.0) as u64));
        out.uplink.push((dur_ms, (g.2 / n * 1000.0) as u64));
        at_ms += dur_ms;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_count_seconds_from_2000() {
        assert_eq!(parse_timestamp("2000.01.01_00.00.00"), Some(0));
        assert_eq!(
            parse_timestamp("2000.03.01_00.00.01"),
            Some(60 * 86_400 + 1)
        );
        assert_eq!(parse_timestamp("2019.12.16_07.22.43"), Some(629_796_163));
        assert_eq!(
            parse_timestamp("2023.02.30_00.00.00"),
            parse_timestamp("2023.03.02_00.00.00")
        );
        assert_eq!(parse_timestamp("1999.12.31_23.59.59"), None);
        assert_eq!(parse_timestamp("2019.13.01_00.00.00"), None);
    }

    const HEAD: &str = "Timestamp,Longitude,DL_bitrate,UL_bitrate,State\n";

    #[test]
    fn averages_duplicates_and_uses_timestamp_gaps() {
        let text = format!("{HEAD}2020.02.13_13.03.24,1,1000,100,D\n2020.02.13_13.03.24,1,3000,300,D\n2020.02.13_13.03.26,1,-,50,D\n2020.02.13_13.04.30,1,8000,0,D\n");
        let s = parse("x.csv", &text).unwrap();
        assert_eq!(s.rows, 4);
        assert_eq!(
            s.downlink,
            vec![(2000, 2_000_000), (5000, 0), (1000, 8_000_000)]
        );
        assert_eq!(s.uplink[0], (2000, 200_000));
        assert_eq!(s.gaps_cut, 1);
        let (down, _) = s.traces().unwrap();
        // 2 s at 2 Mbit/s = 500 kB = 333 full opportunities.
        assert_eq!(
            down.opportunities_ms()
                .iter()
                .filter(|&&m| m <= 2000)
                .count(),
            333
        );
    }

    /// The ping column: half the smallest RTT of a second, held until the next report, on the
    /// rate series' time base (the 64 s gap is cut to 5 s here too).
    #[test]
    fn pingmin_becomes_a_one_way_delay_series() {
        let head = "Timestamp,DL_bitrate,UL_bitrate,PINGAVG,PINGMIN\n";
        let text = format!(
            "{head}2020.02.13_13.03.24,1,1,-,-\n2020.02.13_13.03.26,1,1,90,81\n\
             2020.02.13_13.03.26,1,1,85,79.5\n2020.02.13_13.03.27,1,1,-,-\n\
             2020.02.13_13.04.31,1,1,99,79.5\n2020.02.13_13.04.32,1,1,120,100\n"
        );
        let s = parse("p.csv", &text).unwrap();
        assert_eq!(s.ping_rows, 4);
        // Groups start at 0, 2000, 3000, 8000 (gap cut), 9000 ms.
        assert_eq!(s.delay, vec![(2000, 39_750), (9000, 50_000)]);
        let d = s.delay_series().unwrap();
        // Before the first report the first value applies.
        assert_eq!(d.delay_at_us(0), 39_750);
        assert_eq!(d.delay_at_us(8_999_000), 39_750);
        assert_eq!(d.delay_at_us(9_000_000), 50_000);
        // No ping column, or never a value: no series.
        assert!(
            parse("a.csv", &format!("{HEAD}2020.02.13_13.03.24,1,1,1,D\n"))
                .unwrap()
                .delay_series()
                .is_none()
        );
        let none = format!("{head}2020.02.13_13.03.24,1,1,-,-\n");
        assert!(parse("a.csv", &none).unwrap().delay_series().is_none());
        // A bad value is named by file and line.
        let bad = format!("{head}2020.02.13_13.03.24,1,1,-,-\n2020.02.13_13.03.25,1,1,5,fast\n");
        let e = parse("p.csv", &bad).unwrap_err().to_string();
        assert!(
            e.starts_with("p.csv:3:") && e.contains("PINGMIN `fast`"),
            "{e}"
        );
        let neg = format!("{head}2020.02.13_13.03.24,1,1,-,-1\n");
        assert!(parse("p.csv", &neg).is_err());
    }

    #[test]
    fn errors_name_file_and_line() {
        let e = parse("a.csv", "x,y\n").unwrap_err().to_string();
        assert!(e.starts_with("a.csv:1:") && e.contains("Timestamp"), "{e}");
        let e = parse(
            "a.csv",
            &format!("{HEAD}2020.02.13_13.03.24,1,10,1,D\n2020.02.13_13.03.25,1,abc,1,D\n"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("a.csv:3:") && e.contains("abc"), "{e}");
        let e = parse("a.csv", &format!("{HEAD}2020.13.13_13.03.24,1,10,1,D\n"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("a.csv:2:") && e.contains("timestamp"), "{e}");
        let e = parse(
            "a.csv",
            &format!("{HEAD}2020.02.13_13.03.25,1,10,1,D\n2020.02.13_13.03.24,1,10,1,D\n"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("a.csv:3:") && e.contains("earlier"), "{e}");
        assert!(parse("a.csv", HEAD)
            .unwrap_err()
            .to_string()
            .contains("no data rows"));
    }
}
