//! What bench, calibrate and soak share about a run: the speed above which the train counts as
//! high-speed, and the facts results record about the host and the time.

/// Speed above which samples count, m/s (the paper's "HSR" is > 250 km/h).
pub const HSR_SPEED_MPS: f64 = 250.0 / 3.6;

/// The running kernel's release, as results record it.
pub fn kernel() -> String {
    nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// Now, in UTC, to the second: `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    utc_text(time::OffsetDateTime::now_utc())
}

fn utc_text(t: time::OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_text_is_rfc3339_to_the_second() {
        let at = |s: i64| utc_text(time::OffsetDateTime::from_unix_timestamp(s).unwrap());
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_764_639_296), "2025-12-02T01:34:56Z");
    }
}
