//! Time and rate types with units in their names.
//!
//! The scheduler never reads a clock: every input carries an [`Instant`] chosen by the caller
//! (a tokio shell, an emulator, or a test). Instants are integer microseconds since an epoch the
//! caller picks; only differences matter. Arithmetic saturates instead of panicking so that a
//! shell feeding slightly out-of-order timestamps cannot crash the scheduler.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};

/// A point in time, in integer microseconds since a caller-chosen epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant {
    micros: u64,
}

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant { micros: 0 };

    /// An instant `micros` microseconds after the epoch.
    pub const fn from_micros(micros: u64) -> Self {
        Instant { micros }
    }

    /// An instant `millis` milliseconds after the epoch.
    pub const fn from_millis(millis: u64) -> Self {
        Instant {
            micros: millis.saturating_mul(1_000),
        }
    }

    /// Microseconds since the epoch.
    pub const fn as_micros(self) -> u64 {
        self.micros
    }

    /// Time elapsed from `earlier` to `self`, or zero if `earlier` is later.
    pub const fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration {
            micros: self.micros.saturating_sub(earlier.micros),
        }
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        Instant {
            micros: self.micros.saturating_add(rhs.micros),
        }
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating: an earlier minus a later instant is zero.
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "t={}.{:06}s",
            self.micros / 1_000_000,
            self.micros % 1_000_000
        )
    }
}

/// A span of time in integer microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration {
    micros: u64,
}

impl Duration {
    /// No time.
    pub const ZERO: Duration = Duration { micros: 0 };
    /// The longest representable span; used as "infinite".
    pub const MAX: Duration = Duration { micros: u64::MAX };

    /// A span of `micros` microseconds.
    pub const fn from_micros(micros: u64) -> Self {
        Duration { micros }
    }
    /// A span of `millis` milliseconds.
    pub const fn from_millis(millis: u64) -> Self {
        Duration {
            micros: millis.saturating_mul(1_000),
        }
    }
    /// A span of `secs` seconds.
    pub const fn from_secs(secs: u64) -> Self {
        Duration {
            micros: secs.saturating_mul(1_000_000),
        }
    }
    /// A span of `secs` seconds given as a float; negative and NaN map to zero, huge to MAX.
    pub fn from_secs_f64(secs: f64) -> Self {
        if secs.is_nan() || secs <= 0.0 {
            Duration::ZERO
        } else if secs >= u64::MAX as f64 / 1e6 {
            Duration::MAX
        } else {
            Duration {
                micros: (secs * 1e6) as u64,
            }
        }
    }
    /// Whole microseconds.
    pub const fn as_micros(self) -> u64 {
        self.micros
    }
    /// Whole milliseconds (truncated).
    pub const fn as_millis(self) -> u64 {
        self.micros / 1_000
    }
    /// Seconds as a float.
    pub fn as_secs_f64(self) -> f64 {
        self.micros as f64 / 1e6
    }
    /// `self + rhs`, saturating at [`Duration::MAX`].
    pub const fn saturating_add(self, rhs: Duration) -> Duration {
        Duration {
            micros: self.micros.saturating_add(rhs.micros),
        }
    }
    /// `self - rhs`, saturating at zero.
    pub const fn saturating_sub(self, rhs: Duration) -> Duration {
        Duration {
            micros: self.micros.saturating_sub(rhs.micros),
        }
    }
    /// Is this the zero span?
    pub const fn is_zero(self) -> bool {
        self.micros == 0
    }
}

impl Add for Duration {
    type Output = Duration;
    fn add(self, rhs: Duration) -> Duration {
        self.saturating_add(rhs)
    }
}

impl Sub for Duration {
    type Output = Duration;
    fn sub(self, rhs: Duration) -> Duration {
        self.saturating_sub(rhs)
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Duration::MAX {
            f.write_str("inf")
        } else if self.micros >= 1_000_000 {
            write!(f, "{:.3}s", self.as_secs_f64())
        } else {
            write!(f, "{:.3}ms", self.micros as f64 / 1e3)
        }
    }
}

/// A data rate in bytes per second.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bandwidth {
    bytes_per_sec: u64,
}

impl Bandwidth {
    /// No capacity (unknown or zero).
    pub const ZERO: Bandwidth = Bandwidth { bytes_per_sec: 0 };

    /// A rate of `bytes_per_sec` bytes per second.
    pub const fn from_bytes_per_sec(bytes_per_sec: u64) -> Self {
        Bandwidth { bytes_per_sec }
    }
    /// A rate of `bits_per_sec` bits per second.
    pub const fn from_bits_per_sec(bits_per_sec: u64) -> Self {
        Bandwidth {
            bytes_per_sec: bits_per_sec / 8,
        }
    }
    /// A rate of `mbit_per_sec` megabits per second.
    pub const fn from_mbit_per_sec(mbit_per_sec: u64) -> Self {
        Bandwidth {
            bytes_per_sec: mbit_per_sec.saturating_mul(125_000),
        }
    }
    /// The rate at which `bytes` take `over` to send; zero when `over` is zero.
    pub fn from_bytes_over(bytes: u64, over: Duration) -> Self {
        if over.is_zero() {
            return Bandwidth::ZERO;
        }
        let rate = (bytes as u128 * 1_000_000) / over.as_micros() as u128;
        Bandwidth {
            bytes_per_sec: rate.min(u64::MAX as u128) as u64,
        }
    }
    /// Bytes per second.
    pub const fn as_bytes_per_sec(self) -> u64 {
        self.bytes_per_sec
    }
    /// Megabits per second as a float.
    pub fn as_mbit_per_sec(self) -> f64 {
        self.bytes_per_sec as f64 * 8.0 / 1e6
    }
    /// Is the rate zero (unknown)?
    pub const fn is_zero(self) -> bool {
        self.bytes_per_sec == 0
    }
    /// Time to push `bytes` through at this rate, or [`Duration::MAX`] if the rate is zero.
    pub fn time_to_send(self, bytes: u64) -> Duration {
        if self.bytes_per_sec == 0 {
            return if bytes == 0 {
                Duration::ZERO
            } else {
                Duration::MAX
            };
        }
        let micros = (bytes as u128 * 1_000_000).div_ceil(self.bytes_per_sec as u128);
        Duration::from_micros(micros.min(u64::MAX as u128) as u64)
    }
}

impl fmt::Display for Bandwidth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.2}Mbit/s", self.as_mbit_per_sec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instant_arithmetic_saturates() {
        let a = Instant::from_millis(5);
        let b = Instant::from_millis(7);
        assert_eq!(b - a, Duration::from_millis(2));
        assert_eq!(a - b, Duration::ZERO);
        assert_eq!(
            Instant::from_micros(u64::MAX) + Duration::from_secs(1),
            Instant::from_micros(u64::MAX)
        );
    }

    #[test]
    fn bandwidth_time_to_send_rounds_up() {
        let bw = Bandwidth::from_mbit_per_sec(8); // 1 MB/s
        assert_eq!(bw.time_to_send(1_000_000), Duration::from_secs(1));
        assert_eq!(bw.time_to_send(1), Duration::from_micros(1));
        assert_eq!(Bandwidth::ZERO.time_to_send(1), Duration::MAX);
        assert_eq!(Bandwidth::ZERO.time_to_send(0), Duration::ZERO);
        assert_eq!(
            Bandwidth::from_bytes_over(1000, Duration::from_millis(1)).as_bytes_per_sec(),
            1_000_000
        );
    }

    #[test]
    fn from_secs_f64_is_total() {
        assert_eq!(Duration::from_secs_f64(-1.0), Duration::ZERO);
        assert_eq!(Duration::from_secs_f64(f64::NAN), Duration::ZERO);
        assert_eq!(Duration::from_secs_f64(1e30), Duration::MAX);
        assert_eq!(Duration::from_secs_f64(0.25), Duration::from_millis(250));
    }
}
