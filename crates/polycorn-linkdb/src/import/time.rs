//! Timestamps: the civil timestamps of the measurement CSVs to seconds (UTC-agnostic: only
//! differences matter), and the day and start a relay's context log's name gives it.

use std::path::Path;

/// Seconds of a timestamp made of six numbers (year, month, day, hour, minute, second)
/// separated by any non-digit characters, e.g. `2023-03-26 16:36:54` or `2019.12.16_07.22.43`.
/// Fractional seconds are allowed (`54.250`). `None` if it does not have that shape.
pub fn parse_seconds(s: &str) -> Option<f64> {
    let s = s.trim();
    let mut parts = s
        .split(|c: char| !c.is_ascii_digit() && c != '.')
        .filter(|p| !p.is_empty());
    let mut n = [0i64; 5];
    for slot in &mut n {
        let p = parts.next()?;
        if p.contains('.') {
            // `2019.12.16` style: split on dots too.
            return parse_dotted(s);
        }
        *slot = p.parse().ok()?;
    }
    let sec: f64 = parts.next()?.parse().ok()?;
    if parts.next().is_some() {
        return None;
    }
    civil(n[0], n[1], n[2], n[3], n[4], sec)
}

fn parse_dotted(s: &str) -> Option<f64> {
    let p: Vec<&str> = s
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .collect();
    if p.len() != 6 {
        return None;
    }
    let n: Vec<i64> = p.iter().map(|x| x.parse().ok()).collect::<Option<_>>()?;
    civil(n[0], n[1], n[2], n[3], n[4], n[5] as f64)
}

/// Seconds since 1970-01-01 00:00 of a proleptic Gregorian date and time. Years 0 to 9999
/// (four digits; any number of digits parses). A day past its month's end counts on into the
/// next month (`02-30` is two days after `02-28`).
fn civil(y: i64, mo: i64, d: i64, h: i64, mi: i64, sec: f64) -> Option<f64> {
    if !(0..=9999).contains(&y)
        || !(1..=31).contains(&d)
        || !(0..24).contains(&h)
        || !(0..60).contains(&mi)
        || !(0.0..61.0).contains(&sec)
    {
        return None;
    }
    let month = time::Month::try_from(u8::try_from(mo).ok()?).ok()?;
    let first = time::Date::from_calendar_date(i32::try_from(y).ok()?, month, 1).ok()?;
    let days = (first - time::macros::date!(1970 - 01 - 01)).whole_days() + d - 1;
    Some((days * 86_400 + h * 3600 + mi * 60) as f64 + sec)
}

/// A CSV's timestamp column read row by row ([`parse_seconds`]): the time of a row, checked
/// to parse and not to go back ([`Clock::check`]), and once the row is taken, the seconds
/// since the first row taken ([`Clock::take`]).
#[derive(Debug, Default)]
pub(crate) struct Clock {
    first: Option<f64>,
    last: Option<f64>,
}

impl Clock {
    /// The seconds of timestamp `s`, or why the row is bad: it does not parse, or it is before
    /// the last row taken.
    pub(crate) fn check(&self, s: &str) -> Result<f64, String> {
        let t = parse_seconds(s).ok_or_else(|| format!("timestamp `{s}` does not parse"))?;
        if self.last.is_some_and(|last| t < last) {
            return Err("timestamp goes back in time".into());
        }
        Ok(t)
    }

    /// Take a row of time `t` (from [`Clock::check`]): seconds since the first row taken.
    pub(crate) fn take(&mut self, t: f64) -> f64 {
        self.last = Some(t);
        t - *self.first.get_or_insert(t)
    }
}

/// The day a context log's name gives it (`context-YYYYMMDDT….csv` → `YYYYMMDD`).
pub fn log_day(file: &Path) -> Option<&str> {
    let name = file.file_name()?.to_str()?;
    let day = name.strip_prefix("context-")?.get(..8)?;
    (day.bytes().all(|b| b.is_ascii_digit()) && name.as_bytes().get(8 + 8) == Some(&b'T'))
        .then_some(day)
}

/// When a context log's first fix was, ms since the Unix epoch, as its name gives it
/// (`context-YYYYMMDDTHHMMSSZ….csv`, whole seconds): `t_ms` counts from there.
pub fn log_start_ms(file: &Path) -> Option<u64> {
    let name = file.file_name()?.to_str()?;
    let stamp = name.strip_prefix("context-")?.get(..16)?;
    let format = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    let t = time::PrimitiveDateTime::parse(stamp, format).ok()?;
    u64::try_from(t.assume_utc().unix_timestamp())
        .ok()?
        .checked_mul(1000)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn both_formats() {
        let a = parse_seconds("2023-03-26 16:36:54").unwrap();
        let b = parse_seconds("2023-03-26 16:36:55 ").unwrap();
        assert_eq!(b - a, 1.0);
        let c = parse_seconds("2019.12.16_07.22.43").unwrap();
        let d = parse_seconds("2019.12.17_07.22.43").unwrap();
        assert_eq!(d - c, 86_400.0);
        assert_eq!(parse_seconds("1970-01-01 00:00:00"), Some(0.0));
        assert!(parse_seconds("2023-13-01 00:00:00").is_none());
        assert!(parse_seconds("garbage").is_none());
        // Years the day count cannot hold are refused, not wrapped (found by fuzzing).
        assert!(parse_seconds("200000000000000-1-1 0:0:0").is_none());
        assert!(parse_seconds("9000000000000000000-1-1 0:0:0").is_none());
        assert!(parse_seconds("9999.12.31_23.59.59").is_some());
        assert_eq!(
            parse_seconds("0000-01-01 00:00:00"),
            Some(-62_167_219_200.0)
        );
        assert_eq!(
            parse_seconds("2023-02-30 00:00:00"),
            parse_seconds("2023-03-01 00:00:00").map(|t| t + 86_400.0)
        );
        assert_eq!(parse_seconds("2000-03-01 00:00:00.5"), Some(951_868_800.5));
    }
}
